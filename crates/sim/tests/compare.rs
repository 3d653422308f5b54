//! `corral-sim compare` on a small seeded machine: every file is written with every policy,
//! core count and load in it, the burst's series covers its schedule, the same seed gives the
//! same files whatever the threads, and bad input is refused with exit status 2, naming the
//! flag.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use corral_sim::compare::{self, CompareConfig};
use corral_sim::{Costs, LoadSchedule, ServiceDist};

const POLICIES: [&str; 3] = ["shenango", "arachne", "static"];

fn small() -> CompareConfig {
    CompareConfig {
        core_counts: vec![4, 6],
        policies: POLICIES.iter().map(|p| p.to_string()).collect(),
        policy_options: Vec::new(),
        loads: vec![0.3, 0.7],
        lc_runtimes: None,
        batch_runtimes: None,
        lc_guaranteed: None,
        service: ServiceDist::Exponential { mean_ns: 10_000.0 },
        costs: Costs::measured(),
        share_quantum_ns: 1_000_000,
        preemption_timeout_ns: Some(10_000_000),
        duration_ns: 20_000_000,
        settle_ns: 10_000_000,
        drain_limit_ns: 100_000_000,
        sample_every_ns: 1_000_000,
        burst: LoadSchedule::parse("0s:0.1,10ms:0.6,20ms:0.1").unwrap(),
        burst_duration_ns: 30_000_000,
        burst_threshold_ns: 1_000_000,
        seed: 3,
    }
}

fn corral_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_corral-sim"))
        .args(args)
        .output()
        .expect("corral-sim runs")
}

fn out_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("corral-sim-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn every_point_and_the_burst_series_are_there_and_runs_repeat() {
    let config = small();
    let one = compare::run(&config, 1).unwrap();
    assert_eq!(one.sweep.len(), 2 * 3 * 2);
    for cores in [4, 6] {
        for policy in POLICIES {
            for load in [0.3, 0.7] {
                assert!(
                    one.sweep.iter().any(|p| p.cores == cores
                        && p.policy == policy
                        && (p.result.load - load).abs() < 1e-12
                        && p.result.arrived > 0
                        && p.settled.samples == 10),
                    "{cores} cores, {policy}, load {load}"
                );
            }
            let burst = one
                .bursts
                .iter()
                .find(|b| b.cores == cores && b.policy == policy)
                .unwrap();
            // One sample a period from the first period to the end of the schedule's run.
            let times: Vec<u64> = burst.result.series.iter().map(|s| s.t_ns).collect();
            let expected: Vec<u64> = (1..=30).map(|ms| ms * 1_000_000).collect();
            assert_eq!(times, expected, "{cores} cores, {policy}");
            assert_eq!(burst.summary.shape.start_ns, 10_000_000);
        }
    }
    let csv = compare::sweep_csv(&one);
    assert_eq!(csv.lines().count(), 1 + 12);
    let columns = csv.lines().next().unwrap().split(',').count();
    assert!(csv.lines().all(|line| line.split(',').count() == columns));
    assert_eq!(
        compare::burst_csv(&one, &config.burst).lines().count(),
        1 + 2 * 3 * 30
    );
    // The same seed gives the same results, on any number of threads.
    let two = compare::run(&config, 2).unwrap();
    assert_eq!(one, two);
    assert_eq!(compare::json(&config, &one), compare::json(&config, &two));
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const SMALL_ARGS: [&str; 14] = [
    "compare",
    "--cores",
    "4",
    "--loads",
    "0.3,0.6",
    "--seconds",
    "0.02",
    "--settle-seconds",
    "0.01",
    "--burst",
    "0s:0.1,10ms:0.6,20ms:0.1",
    "--burst-seconds",
    "0.03",
    "--jobs=2",
];

#[test]
fn the_command_writes_every_file_and_repeats_itself() {
    let mut csvs = Vec::new();
    for run in ["a", "b"] {
        let dir = out_dir(&format!("compare-{run}"));
        let mut args = SMALL_ARGS.to_vec();
        args.extend(["--out", dir.to_str().unwrap()]);
        let output = corral_sim(&args);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{output:?}");
        assert!(stdout.contains("guaranteed 3 core(s)"), "{stdout}");
        assert!(stdout.contains("wall time"), "{stdout}");
        for name in [
            "compare.png",
            "compare.svg",
            "burst.png",
            "burst.svg",
            "compare.json",
        ] {
            let size = std::fs::metadata(dir.join(name)).unwrap().len();
            assert!(size > 1_000, "{name}: {size} bytes");
        }
        let sweep = read(&dir, "compare.csv");
        for policy in POLICIES {
            for load in ["0.3", "0.6"] {
                let prefix = format!("4,{policy},1,1,3,{load},");
                assert!(sweep.lines().any(|l| l.starts_with(&prefix)), "{prefix}");
            }
        }
        let json: serde_json::Value = serde_json::from_str(&read(&dir, "compare.json")).unwrap();
        assert!(json["costs"]["grant"]["source"].is_string());
        assert_eq!(json["sweep"].as_array().unwrap().len(), 6);
        csvs.push((sweep, read(&dir, "burst.csv")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert_eq!(csvs[0], csvs[1]);
}

#[test]
fn bad_input_is_refused_with_status_2_naming_the_flag() {
    let dir = out_dir("compare-bad");
    for (change, flag) in [
        (["--cores", "0"], "--cores"),
        (["--cores", ""], "--cores"),
        (["--policies", "fifo"], "--policies"),
        (["--policies", ""], "--policies"),
        (["--loads", "0"], "--loads"),
        (["--loads", "1.5"], "--loads"),
        (["--loads", ""], "--loads"),
        (["--lc-guaranteed", "5"], "--lc-guaranteed"),
        (["--burst", "0s:0.5"], "--burst"),
        (["--policy-option", "arachne:nope=1"], "--policy-option"),
        (["--cost", "net_core=x"], "--cost"),
        (["--cost", "nonsense=1"], "net_latency"),
    ] {
        // The bad value replaces the good one, since a flag given twice is refused for that.
        let mut args: Vec<&str> = Vec::new();
        let mut rest = SMALL_ARGS.iter();
        while let Some(&arg) = rest.next() {
            if arg == change[0] {
                rest.next();
            } else {
                args.push(arg);
            }
        }
        args.extend(change);
        args.extend(["--out", dir.to_str().unwrap()]);
        let output = corral_sim(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{change:?}: {stderr}");
        assert!(stderr.contains(flag), "{change:?}: {stderr}");
    }
    assert!(!dir.exists(), "nothing is written for bad input");
}
