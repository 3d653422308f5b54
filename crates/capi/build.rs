//! Regenerates `include/corral.h` from `src/lib.rs` with cbindgen on every build.
//!
//! The header is committed so C users need no Rust tooling; regenerating it here keeps it in
//! step with the code. A cbindgen failure only warns: the library is still usable, and the
//! committed header stays as it was.

use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rerun-if-changed=src/lib.rs");
    println!("cargo::rerun-if-changed=cbindgen.toml");
    println!("cargo::rerun-if-changed=build.rs");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    if let Err(e) = generate(&dir) {
        println!("cargo::warning=include/corral.h was not regenerated: {e}");
    }
}

fn generate(dir: &Path) -> Result<(), String> {
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))?;
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    bindings.write(&mut text);
    let path = dir.join("include/corral.h");
    // Rewriting an unchanged file would bump its mtime and make every C build that depends on it
    // rebuild, so only write real changes.
    if fs::read(&path).ok().as_deref() != Some(text.as_slice()) {
        fs::create_dir_all(dir.join("include")).map_err(|e| e.to_string())?;
        fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}
