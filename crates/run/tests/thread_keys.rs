//! Thread-key destructors run once per thread, with its value, in rounds while destructors set
//! values again, and never for keys a thread left unset: the same under corral-run as under
//! plain pthreads.

mod support;

use std::process::Command;

#[test]
fn key_destructors_run_once_per_thread() {
    let dir = support::scratch("thread_keys");
    let exe = support::build("gcc", "thread_keys.c", &dir, &["-pthread"]);
    let plain = support::success("plain run", &support::run(&mut Command::new(&exe)));
    let shimmed = support::success(
        "corral-run",
        &support::run(support::corral_run().arg("--").arg(&exe)),
    );
    assert_eq!(shimmed, plain);
    // 200 threads: half exit through pthread_exit, half return; 100 set key b; key `again`
    // sets itself twice more (3 rounds) in each of the 100 returning threads.
    let expected = "destructor a runs 200\n\
                    destructor a once per thread 1\n\
                    destructor b runs 100\n\
                    destructor again runs 300\n\
                    destructor of unset key runs 0\n\
                    wrong values 0\n";
    assert_eq!(shimmed, expected);
}
