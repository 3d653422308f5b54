//! corral-run is transparent: stdin, stdout, stderr, exit status and death by a signal are the
//! program's own; bad options are refused with usage and status 2.

mod support;

use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

fn exits_program() -> std::path::PathBuf {
    support::build(
        "gcc",
        "exits.c",
        &support::scratch("launcher"),
        &["-pthread"],
    )
}

#[test]
fn streams_and_status_are_the_programs() {
    let exe = exits_program();
    let mut child = support::corral_run()
        .arg("--")
        .arg(&exe)
        .args(["status", "42"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start corral-run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"through stdin\n")
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(42));
    assert_eq!(out.stdout, b"through stdin\n");
    assert_eq!(out.stderr, b"to stderr\n");

    let out = support::run(support::corral_run().arg(&exe).args(["return", "3"]));
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn death_by_signal_is_the_programs() {
    let exe = exits_program();
    let out = support::run(
        support::corral_run()
            .arg("--")
            .arg(&exe)
            .args(["signal", "15"]),
    );
    assert_eq!(out.status.signal(), Some(libc::SIGTERM), "{}", out.status);
}

#[test]
fn bad_options_are_refused() {
    for (args, message) in [
        (
            &["--guaranteed", "1", "--", "true"][..],
            "--guaranteed needs --iokerneld",
        ),
        (
            &["--name", "x", "--", "true"][..],
            "--name needs --iokerneld",
        ),
        (
            &["--kthreads", "0", "--", "true"][..],
            "--kthreads \"0\": expected a positive",
        ),
        (
            &["--kthreads", "4", "--max-cores", "2", "--", "true"][..],
            "exceeds --max-cores",
        ),
        (&["--bogus", "--", "true"][..], "unknown option --bogus"),
        (
            &["--children", "all", "--", "true"][..],
            "--children \"all\": expected plain or corral",
        ),
        (&["--kthreads", "2"][..], "no PROGRAM given"),
    ] {
        let out = support::run(support::corral_run().args(args));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(message),
            "{args:?}: expected {message:?} in {stderr}"
        );
    }
    let out = support::run(support::corral_run().arg("/nonexistent/program"));
    assert_eq!(out.status.code(), Some(127));
}
