//! The committed `include/corral.h` must be exactly what cbindgen makes of this crate now.
//!
//! C users and the C/C++ tests read the committed header, never a generated one, so a changed
//! `extern "C"` signature, type or doc comment that is not carried into it would go unnoticed
//! until a C program broke. This test regenerates the header and fails on any difference; with
//! `CORRAL_BLESS=1` it rewrites the committed header instead.

use std::path::{Path, PathBuf};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Set to `1` to write the regenerated header over the committed one.
const BLESS_VAR: &str = "CORRAL_BLESS";

/// What a developer runs to bring the committed header up to date.
const UPDATE_COMMAND: &str = "CORRAL_BLESS=1 cargo test --profile ci -p corral-capi --test header";

/// Lines of context shown on each side of the first difference.
const CONTEXT: usize = 3;

/// The header as cbindgen generates it from the whole crate (every module `src/lib.rs`
/// declares), with the settings in `cbindgen.toml`.
fn generate(crate_dir: &Path) -> String {
    let config_path = crate_dir.join("cbindgen.toml");
    // Read explicitly rather than through `cbindgen::generate`, which falls back to default
    // settings when the file is broken, and would then report a header full of differences.
    let config = cbindgen::Config::from_file(&config_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", config_path.display()));
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_crate(crate_dir)
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen cannot generate the header: {e}"));
    let mut text = Vec::new();
    bindings.write(&mut text);
    String::from_utf8(text).expect("cbindgen writes UTF-8")
}

/// Where the two texts first differ: the 1-based line number and a short excerpt of each side.
fn first_difference(committed: &str, generated: &str) -> String {
    let old: Vec<&str> = committed.lines().collect();
    let new: Vec<&str> = generated.lines().collect();
    let at = old
        .iter()
        .zip(&new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let excerpt = |lines: &[&str]| {
        let from = at.saturating_sub(CONTEXT);
        let to = (at + CONTEXT + 1).min(lines.len());
        let mut s = String::new();
        for (i, line) in lines.iter().enumerate().take(to).skip(from) {
            let mark = if i == at { '>' } else { ' ' };
            s.push_str(&format!("{mark} {:4} | {line}\n", i + 1));
        }
        if at >= lines.len() {
            s.push_str(&format!(
                ">      | <end of file after {} lines>\n",
                lines.len()
            ));
        }
        s
    };
    format!(
        "first difference at line {}:\n--- committed ---\n{}--- generated ---\n{}",
        at + 1,
        excerpt(&old),
        excerpt(&new)
    )
}

#[test]
fn committed_header_matches_the_crate() {
    let crate_dir = Path::new(MANIFEST_DIR);
    let committed_path = crate_dir.join("include/corral.h");
    let generated = generate(crate_dir);
    let committed = std::fs::read_to_string(&committed_path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", committed_path.display()));
    if committed == generated {
        return;
    }
    if std::env::var_os(BLESS_VAR).is_some_and(|v| v == "1") {
        std::fs::write(&committed_path, &generated)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", committed_path.display()));
        println!("{BLESS_VAR}=1: rewrote {}", committed_path.display());
        return;
    }
    // Kept for a full diff: the message below shows only the first difference.
    let generated_path: PathBuf = Path::new(env!("CARGO_TARGET_TMPDIR")).join("corral.h");
    std::fs::write(&generated_path, &generated)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", generated_path.display()));
    panic!(
        "{} is not what cbindgen generates from the crate.\n{}\n\
         Full diff: diff -u {} {}\n\
         If the change is intended, update the header with:\n    {UPDATE_COMMAND}\n\
         and commit it with the code.",
        committed_path.display(),
        first_difference(&committed, &generated),
        committed_path.display(),
        generated_path.display(),
    );
}
