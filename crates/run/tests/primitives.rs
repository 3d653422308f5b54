//! Every synchronization and waiting call the shim interposes gives its POSIX result (the C
//! program checks each one and prints `ok` or `FAILED`), the same as under plain pthreads.

mod support;

use std::process::Command;

#[test]
fn pthread_primitives_behave_as_posix_says() {
    let dir = support::scratch("primitives");
    let exe = support::build("gcc", "primitives.c", &dir, &["-pthread"]);
    let plain = support::success("plain run", &support::run(&mut Command::new(&exe)));
    let shimmed = support::success(
        "corral-run",
        &support::run(
            support::corral_run()
                .args(["--kthreads", "2", "--"])
                .arg(&exe),
        ),
    );
    assert!(
        !plain.contains("FAILED"),
        "the check itself fails under plain pthreads:\n{plain}"
    );
    assert_eq!(shimmed, plain);
    assert_eq!(shimmed.lines().count(), 16, "{shimmed}");
}
