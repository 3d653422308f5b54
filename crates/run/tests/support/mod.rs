//! Shared by the integration tests: the launcher, the shim built for tests, compiling C and
//! C++ programs, and running programs with a time limit.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Generous: every program here takes seconds at most; this only stops a hang from hanging CI.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// `target/<profile>`, from this executable's path `target/<profile>/deps/<test>-<hash>`.
pub fn profile_dir() -> PathBuf {
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

fn newest_under(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
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

/// The shim as `cargo test` builds it (in `deps/`: only `cargo build` copies it next to the
/// launcher), checked to be newer than its sources and the runtime's.
pub fn shim() -> PathBuf {
    if let Some(p) = std::env::var_os("CORRAL_RUN_SHIM") {
        return PathBuf::from(p);
    }
    let shim = profile_dir().join("deps/libcorral_shim.so");
    assert!(
        shim.is_file(),
        "{} is missing: `cargo test -p corral-run` builds it",
        shim.display()
    );
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest =
        newest_under(&crates.join("run/src")).max(newest_under(&crates.join("runtime/src")));
    assert!(
        modified(&shim) >= newest,
        "{} is older than the sources: rebuild it with `cargo test -p corral-run`",
        shim.display()
    );
    shim
}

/// `corral-run [ARGS...]`, set up to preload the test shim.
pub fn corral_run() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_corral-run"));
    cmd.env("CORRAL_RUN_SHIM", shim());
    cmd
}

/// A scratch directory for this test binary.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("corral-run")
        .join(name);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    dir
}

/// Compiles `tests/programs/SOURCE` with `compiler` (gcc, g++ or rustc) into `dir`; extra flags
/// last.
pub fn build(compiler: &str, source: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(source);
    let exe = dir.join(source.split('.').next().expect("a file name"));
    let checks: &[&str] = match compiler {
        "rustc" => &["-O", "-g", "--edition", "2021", "-D", "warnings"],
        _ => &["-O2", "-g", "-Wall", "-Werror"],
    };
    let out = Command::new(compiler)
        .args(checks)
        .arg(&src)
        .args(extra)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} (scripts/setup.sh installs it): {e}"));
    assert!(
        out.status.success(),
        "{compiler} {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs `cmd` to completion with empty stdin, killing it after [`RUN_TIMEOUT`].
pub fn run(cmd: &mut Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output());
    while !waiter.is_finished() {
        if started.elapsed() > RUN_TIMEOUT {
            // SAFETY: kill with our own child's pid, which we have not reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            let out = waiter.join().expect("waiter thread").expect("wait");
            panic!(
                "{cmd:?} hung (killed after {RUN_TIMEOUT:?}); stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().expect("waiter thread").expect("wait")
}

/// Asserts that `out` is a success and returns its stdout.
pub fn success(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}); stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
