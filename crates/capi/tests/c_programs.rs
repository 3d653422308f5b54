//! Compiles the C and C++ programs under `tests/c` and `tests/cpp` against the static library and
//! runs them: the C API is only really tested from C.
//!
//! Which library: `cargo test` does not build this package's own `libcorral.a` first (it only
//! builds a lib before integration tests when the lib is an rlib or dylib). It does build
//! examples, so the `corral_capi_testlib` example compiles `src/lib.rs` as a second static
//! library, found next to this test's executable. Set `CORRAL_CAPI_LIB` to test another build,
//! such as `target/release/libcorral.a` after `cargo build --release -p corral-capi`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const MANIFEST_DIR: &str = env!("CARGO_MANIFEST_DIR");

/// Generous: both programs take well under a second; this only stops a deadlock from hanging CI.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// `target/<profile>`, from this executable's path `target/<profile>/deps/c_programs-<hash>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test executable lives in target/<profile>/deps")
        .to_path_buf()
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", path.display()))
}

/// The newest modification time of the files under `dir`.
fn newest_under(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let t = if path.is_dir() {
            newest_under(&path)
        } else {
            modified(&path)
        };
        newest = newest.max(t);
    }
    newest
}

fn library() -> PathBuf {
    if let Some(lib) = std::env::var_os("CORRAL_CAPI_LIB") {
        return PathBuf::from(lib);
    }
    let lib = profile_dir().join("examples/libcorral_capi_testlib.a");
    assert!(
        lib.is_file(),
        "{} is missing: it is built by `cargo test -p corral-capi` (with examples); \
         `cargo test --test c_programs` alone skips it, so add `--examples` or set CORRAL_CAPI_LIB",
        lib.display()
    );
    // A run that does not rebuild examples could otherwise test yesterday's code. The library
    // holds this crate and the runtime, so either one's sources being newer makes it stale.
    let crates = Path::new(MANIFEST_DIR).join("..");
    let newest_source =
        newest_under(&crates.join("capi/src")).max(newest_under(&crates.join("runtime/src")));
    assert!(
        modified(&lib) >= newest_source,
        "{} is older than the sources: rebuild it with `cargo test -p corral-capi` (or --examples)",
        lib.display()
    );
    lib
}

/// Where compiled programs go: per profile, so debug and release runs do not clash.
fn out_dir() -> PathBuf {
    let profile = profile_dir();
    let name = profile.file_name().expect("profile dir has a name");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("corral-capi")
        .join(name);
    std::fs::create_dir_all(&dir).expect("create the output directory");
    dir
}

fn compiler(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// Runs a compiler; panics with its diagnostics if it fails.
fn compile(cc: &str, args: &[&str]) {
    let out = Command::new(cc)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} {} failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles `source` with the library into an executable called `name`.
fn build_program(cc: &str, std_flag: &str, source: &str, name: &str) -> PathBuf {
    let manifest = Path::new(MANIFEST_DIR);
    let include = manifest.join("include");
    let source = manifest.join(source);
    let exe = out_dir().join(name);
    let lib = library();
    compile(
        cc,
        &[
            std_flag,
            "-O2",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            include.to_str().expect("UTF-8 path"),
            source.to_str().expect("UTF-8 path"),
            lib.to_str().expect("UTF-8 path"),
            "-lpthread",
            "-ldl",
            "-lm",
            "-o",
            exe.to_str().expect("UTF-8 path"),
        ],
    );
    exe
}

/// Runs `exe` to completion (killing it after `RUN_TIMEOUT`); returns (success, stdout, stderr).
fn run(exe: &Path) -> (bool, String, String) {
    let mut child = Command::new(exe)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    // Drained on their own threads so a chatty program cannot fill a pipe and stall.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().expect("stdout reader");
    let mut stderr = stderr.join().expect("stderr reader");
    match status {
        Some(s) if !s.success() => stderr.push_str(&format!("\n[exit status: {s}]")),
        None => stderr.push_str(&format!("\n[killed after {RUN_TIMEOUT:?}]")),
        _ => {}
    }
    (status.is_some_and(|s| s.success()), stdout, stderr)
}

/// Runs a test program and checks its exit status and its closing "N passed, 0 failed" line.
fn check_program(exe: &Path) {
    let (ok, stdout, stderr) = run(exe);
    let report = format!(
        "{}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        exe.display()
    );
    assert!(ok, "test program failed: {report}");
    let last = stdout.lines().last().unwrap_or("");
    let passed: Option<u32> = last
        .strip_suffix(" passed, 0 failed")
        .and_then(|n| n.parse().ok());
    assert!(
        passed.is_some_and(|n| n > 0),
        "no \"N passed, 0 failed\" line: {report}"
    );
    print!("{stdout}");
}

#[test]
fn c_program_passes() {
    let exe = build_program(
        &compiler("CC", "gcc"),
        "-std=c11",
        "tests/c/basic.c",
        "basic_c",
    );
    check_program(&exe);
}

/// TCP from C over the runtime's loopback: echo, a checked transfer, a refused dial.
#[test]
fn c_tcp_program_passes() {
    let exe = build_program(&compiler("CC", "gcc"), "-std=c11", "tests/c/tcp.c", "tcp_c");
    check_program(&exe);
}

#[test]
fn cpp_program_passes() {
    let exe = build_program(
        &compiler("CXX", "g++"),
        "-std=c++17",
        "tests/cpp/basic.cpp",
        "basic_cpp",
    );
    check_program(&exe);
}

/// The header must stand alone and stay warning-free for strict C99 and older C++ users.
#[test]
fn header_compiles_standalone() {
    let include = Path::new(MANIFEST_DIR).join("include");
    let include = include.to_str().expect("UTF-8 path");
    let probe = out_dir().join("header_probe.c");
    std::fs::write(
        &probe,
        "#include \"corral.h\"\nint main(void) { return 0; }\n",
    )
    .expect("write the probe");
    let probe = probe.to_str().expect("UTF-8 path");
    let strict = ["-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only"];
    let mut c_args = vec!["-std=c99", "-I", include, probe];
    c_args.extend(strict);
    compile(&compiler("CC", "gcc"), &c_args);
    let mut cpp_args = vec!["-x", "c++", "-std=c++11", "-I", include, probe];
    cpp_args.extend(strict);
    compile(&compiler("CXX", "g++"), &cpp_args);
}
