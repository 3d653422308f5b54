//! The main command through its binary: a short run succeeds and writes what it is asked to;
//! flags it cannot use are refused with status 2 before any simulation, naming what is wrong.

use std::process::{Command, Output};

fn corral_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corral-sim"))
        .args(args)
        .output()
        .expect("corral-sim runs")
}

#[test]
fn a_short_run_prints_its_costs_and_writes_its_csv() {
    let csv = std::env::temp_dir().join(format!("corral-sim-cli-{}.csv", std::process::id()));
    let output = corral_sim(&[
        "--cores",
        "2",
        "--loads",
        "0.2,0.4",
        "--seconds",
        "0.002",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("net_core"), "{stdout}");
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    std::fs::remove_file(&csv).unwrap();
}

#[test]
fn flags_it_cannot_use_are_refused_with_status_2() {
    for (args, says) in [
        (&["--policy", "nope"][..], "unknown policy"),
        (
            &["--cores", "2", "--lc", "1", "--lc-guaranteed", "3"][..],
            "guaranteed_cores",
        ),
        (&["--cores", "0"][..], "core"),
        (&["--policy-option", "x"][..], "--policy-option"),
        (
            &["--policy", "arachne", "--policy-option", "nope=1"][..],
            "nope",
        ),
        (&["--schedule", "0s"][..], "TIME:LOAD"),
        (&["--cost", "x=1"][..], "unknown cost"),
        (
            &["--costs", "/nonexistent/bench.txt"][..],
            "/nonexistent/bench.txt",
        ),
    ] {
        let output = corral_sim(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}: nothing runs");
    }
}
