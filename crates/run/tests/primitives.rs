//! Every synchronization and waiting call the shim interposes gives its POSIX result, created
//! threads have the C library's per-thread state and their own stacks, and futexes waited on
//! through `syscall` (by C code, and by Rust's std) work and leave the CPU, and threads blocked
//! in other system calls leave the rest running (the blocking reserve): each program checks
//! its calls and prints `ok` or `FAILED`, and must print the same under corral-run as under
//! plain pthreads.

mod support;

use std::process::Command;

/// Builds `source`, runs it plainly and under corral-run with `kthreads`, and checks that both
/// print the same `lines` lines and that none failed.
fn same_as_plain(compiler: &str, source: &str, flags: &[&str], kthreads: u32, lines: usize) {
    let dir = support::scratch(source.split('.').next().expect("a file name"));
    let exe = support::build(compiler, source, &dir, flags);
    let plain = support::success("plain run", &support::run(&mut Command::new(&exe)));
    let shimmed = support::success(
        "corral-run",
        &support::run(
            support::corral_run()
                .args(["--kthreads", &kthreads.to_string(), "--"])
                .arg(&exe),
        ),
    );
    assert!(
        !plain.contains("FAILED"),
        "the check itself fails under plain pthreads:\n{plain}"
    );
    assert_eq!(shimmed, plain);
    assert_eq!(shimmed.lines().count(), lines, "{shimmed}");
}

#[test]
fn pthread_primitives_behave_as_posix_says() {
    same_as_plain("gcc", "primitives.c", &["-pthread"], 2, 16);
}

#[test]
fn created_threads_have_the_c_librarys_per_thread_state() {
    same_as_plain("gcc", "thread_libc_state.c", &["-pthread"], 2, 11);
}

#[test]
fn each_thread_is_told_its_own_stack() {
    same_as_plain("gcc", "thread_stacks.c", &["-pthread"], 2, 9);
}

/// On one kthread: a futex waiter that kept it would never be woken.
#[test]
fn futexes_through_syscall_wait_as_uthreads() {
    same_as_plain("gcc", "raw_futex.c", &["-pthread"], 1, 14);
}

/// On one kthread, as above: Rust's std waits through `syscall(SYS_futex)`.
#[test]
fn rusts_std_sync_waits_as_uthreads() {
    same_as_plain("rustc", "std_sync.rs", &[], 1, 8);
}

/// On one kthread: four threads block in the kernel until main, which must still run, wakes
/// them (the blocking reserve runs main while they hold kthreads).
#[test]
fn threads_blocked_in_system_calls_leave_the_others_running() {
    same_as_plain("gcc", "blocking_calls.c", &["-pthread"], 1, 4);
}
