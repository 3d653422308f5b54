//! Each construct the shim cannot support is refused with a message naming it and exit status
//! 70, never a hang; the same programs work under plain pthreads.

mod support;

use std::process::Command;

const REFUSED_STATUS: i32 = 70;

fn refused(source: &str, flags: &[&str], construct: &str) {
    let dir = support::scratch("refused");
    let exe = support::build("gcc", source, &dir, flags);
    support::success("plain run", &support::run(&mut Command::new(&exe)));
    let out = support::run(support::corral_run().arg("--").arg(&exe));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(REFUSED_STATUS),
        "{source}: {}; stderr:\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains(&format!(
            "corral-run: {construct} is not supported under corral-run"
        )),
        "{source}: the refusal does not name {construct:?}:\n{stderr}"
    );
}

#[test]
fn fork_with_threads_is_refused() {
    refused(
        "forks_with_threads.c",
        &["-pthread"],
        "fork() with other threads running",
    );
}

#[test]
fn openmp_is_refused() {
    refused("openmp.c", &["-fopenmp"], "OpenMP (libgomp)");
}

#[test]
fn pthread_cancel_is_refused() {
    refused("cancels.c", &["-pthread"], "pthread_cancel");
}
