//! Programs whose language runtime brings its own threads, start-up checks and blocking system
//! calls print under corral-run's default flags what they print plain: OpenJDK (a thread pool,
//! a synchronized counter, CompletableFutures, garbage collection), Node (pbkdf2 on libuv's
//! thread pool while the main thread waits in `epoll_wait`), and Go with cgo (its start-up
//! check of the stack bounds `pthread_getattr_np` reports; its runtime's threads sleep in raw
//! futex and `nanosleep` system calls). The JVM also takes the signals it handles itself:
//! `SIGQUIT` prints a thread dump, `SIGTERM` runs the shutdown hooks.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
fn the_jvm_dumps_its_threads_on_sigquit_and_runs_its_hooks_on_sigterm() {
    let dir = support::scratch("jvm-signals");
    let compiled = support::run(
        Command::new(tool("javac"))
            .arg("-d")
            .arg(&dir)
            .arg(programs().join("Signals.java")),
    );
    support::success("javac", &compiled);
    let mut child = support::corral_run()
        .arg("--")
        .arg(tool("java"))
        .arg("-cp")
        .arg(&dir)
        .arg("Signals")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start java under corral-run");
    let pid = child.id() as i32;
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |wanted: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
                let found = line.contains(wanted);
                seen.push(line);
                if found {
                    return;
                }
            }
        }
        let _ = std::process::Command::new("kill")
            .arg("-9")
            .arg(pid.to_string())
            .status();
        panic!(
            "no {wanted:?} in a minute; the JVM printed:\n{}",
            seen.join("\n")
        );
    };
    wait_for("ready");
    // SAFETY: kill of our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGQUIT) }, 0);
    wait_for("Full thread dump");
    wait_for("\"main\"");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    wait_for("shutdown hook ran");
    let status = child.wait().expect("wait for java");
    assert_eq!(status.code(), Some(143), "the JVM ended with {status}");
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
