//! Programs whose language runtime brings its own threads, start-up checks and blocking system
//! calls print under corral-run's default flags what they print plain: OpenJDK (a thread pool,
//! a synchronized counter, CompletableFutures, garbage collection), Node (pbkdf2 on libuv's
//! thread pool while the main thread waits in `epoll_wait`), and Go with cgo (its start-up
//! check of the stack bounds `pthread_getattr_np` reports; its runtime's threads sleep in raw
//! futex and `nanosleep` system calls).

mod support;

use std::path::Path;
use std::process::Command;

fn programs() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs")
}

/// Runs `program ARGS` plainly and under corral-run with default flags; both must succeed and
/// print the same `lines` lines.
fn same_as_plain(program: &Path, args: &[&std::ffi::OsStr], lines: usize) {
    let plain = support::success("plain run", &support::run(Command::new(program).args(args)));
    let shimmed = support::success(
        "corral-run",
        &support::run(support::corral_run().arg("--").arg(program).args(args)),
    );
    assert_eq!(plain.lines().count(), lines, "{plain}");
    assert_eq!(shimmed, plain);
}

fn tool(name: &str) -> &'static Path {
    let path: &'static Path = Box::leak(Path::new("/usr/bin").join(name).into_boxed_path());
    assert!(
        path.is_file(),
        "{} is missing: scripts/setup.sh installs it",
        path.display()
    );
    path
}

#[test]
fn the_jvm_runs_a_thread_pool_as_it_does_plain() {
    let dir = support::scratch("jvm");
    let compiled = support::run(
        Command::new(tool("javac"))
            .arg("-d")
            .arg(&dir)
            .arg(programs().join("Pool.java")),
    );
    support::success("javac", &compiled);
    let args = ["-cp".as_ref(), dir.as_os_str(), "Pool".as_ref()];
    same_as_plain(tool("java"), &args, 4);
}

#[test]
fn node_runs_its_thread_pool_while_its_loop_waits() {
    let script = programs().join("pbkdf2_pool.js");
    same_as_plain(tool("node"), &[script.as_os_str()], 4);
}

#[test]
fn go_with_cgo_starts_and_runs_its_goroutines() {
    let dir = support::scratch("cgo");
    let exe = dir.join("cgo_sum");
    let built = support::run(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&exe)
            .arg(programs().join("cgo_sum.go"))
            .env("CGO_ENABLED", "1")
            .env("GOTOOLCHAIN", "local")
            .env("GOCACHE", dir.join("cache"))
            .env("GOPATH", dir.join("gopath")),
    );
    support::success("go build (scripts/setup.sh installs Go)", &built);
    same_as_plain(&exe, &[], 1);
}
