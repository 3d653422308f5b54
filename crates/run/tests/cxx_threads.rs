//! A C++ program with 10,000 `std::thread`s (mutex, condition variable, shared_mutex,
//! `thread_local` counters with destructors, errno) prints the same results under corral-run as
//! under plain pthreads; the checks it counts (errno and `thread_local` values that another
//! thread changed) are zero in both.

mod support;

use std::process::Command;

#[test]
fn cxx_threads_match_plain_pthreads() {
    let dir = support::scratch("cxx_threads");
    let exe = support::build("g++", "threads.cpp", &dir, &["-std=c++17", "-pthread"]);
    let plain = support::success("plain run", &support::run(&mut Command::new(&exe)));
    let shimmed = support::success(
        "corral-run",
        &support::run(
            support::corral_run()
                .args(["--kthreads", "2", "--"])
                .arg(&exe),
        ),
    );
    assert_eq!(shimmed, plain, "corral-run and plain pthreads disagree");
    for line in [
        "threads 10000",
        "shared_counter 500000",
        "thread_local destructors 10000",
        "errno mismatches 0",
        "thread_local mismatches 0",
        "shared_mutex mismatches 0",
    ] {
        assert!(
            plain.lines().any(|l| l == line),
            "expected {line:?} in:\n{plain}"
        );
    }
}
