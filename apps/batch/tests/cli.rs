//! The `batch` binary end to end: its report stream in both modes and its argument checks.
//! Throughput numbers are not asserted (the machine is shared); the shape of the output is.

use std::process::Command;

use serde_json::Value;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_batch"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Parses the JSON lines and checks what must hold whatever the machine's load: reports come
/// in time order with non-decreasing unit counts, and the total closes the stream.
fn check_stream(stdout: &str, duration_s: f64) -> (Vec<Value>, Value) {
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (total, reports) = lines.split_last().expect("at least the total line");
    assert_eq!(total["type"], "total", "{stdout}");
    assert!(!reports.is_empty(), "{stdout}");
    let (mut prev_t, mut prev_units) = (0.0, 0);
    for r in reports {
        assert_eq!(r["type"], "report", "{stdout}");
        let t = r["elapsed_s"].as_f64().unwrap();
        let units = r["units"].as_u64().unwrap();
        assert!(t > prev_t && t < duration_s, "{stdout}");
        assert!(units >= prev_units, "{stdout}");
        assert!(r["units_per_s"].as_f64().unwrap() >= 0.0);
        (prev_t, prev_units) = (t, units);
    }
    let elapsed = total["elapsed_s"].as_f64().unwrap();
    assert!(
        elapsed >= duration_s && elapsed < duration_s + 1.0,
        "{stdout}"
    );
    assert!(total["total_units"].as_u64().unwrap() >= prev_units);
    (reports.to_vec(), total.clone())
}

#[test]
fn corral_runtime_reports_throughput() {
    let (ok, stdout, stderr) = run(&[
        "--runtime",
        "corral",
        "--kthreads",
        "1",
        "--workers",
        "8",
        "--duration",
        "0.4",
        "--report-ms",
        "50",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let (reports, total) = check_stream(&stdout, 0.4);
    // About 7 reports; a loaded machine may delay the reporter's wake-ups.
    assert!(reports.len() >= 2, "{stdout}");
    assert_eq!(total["runtime"], "corral");
    assert_eq!(total["workers"], 8);
    // Normal-priority kthreads get CPU time: work was done and priced.
    assert!(total["total_units"].as_u64().unwrap() > 0, "{stdout}");
    assert!(total["checksum"].as_f64().unwrap() > 0.0, "{stdout}");
}

#[test]
fn linux_threads_at_sched_idle_report_throughput() {
    let (ok, stdout, stderr) = run(&[
        "--runtime",
        "linux",
        "--workers",
        "2",
        "--duration",
        "0.3",
        "--report-ms",
        "50",
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let (_, total) = check_stream(&stdout, 0.3);
    assert_eq!(total["runtime"], "linux");
    assert_eq!(total["workers"], 2);
}

#[test]
fn text_output_has_one_line_per_report_and_a_total() {
    let (ok, stdout, stderr) = run(&[
        "--runtime",
        "linux",
        "--duration",
        "0.25",
        "--report-ms",
        "100",
    ]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    // Reports at 0.1 s and 0.2 s (unless a wake-up is badly delayed), then the total.
    let (total, reports) = lines.split_last().unwrap();
    assert!(!reports.is_empty() && reports.len() <= 2, "{stdout}");
    assert!(lines[0].starts_with("elapsed_s=0.1"), "{stdout}");
    assert!(
        reports.iter().all(|l| l.contains(" units_per_s=")),
        "{stdout}"
    );
    assert!(total.starts_with("total "), "{stdout}");
    assert!(total.contains("mean_units_per_s="), "{stdout}");
}

#[test]
fn bad_arguments_are_reported() {
    for args in [
        &["--runtime", "linux", "--kthreads", "2"][..],
        &["--duration", "0"],
        &["--report-ms", "0"],
        &["--workers", "0"],
        &["--paths", "0"],
        &["--runtime", "linux", "--cpu", "100000", "--duration", "1"],
        &["--runtime", "corral", "--kthreads", "0", "--duration", "1"],
    ] {
        let (ok, _, stderr) = run(args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains("invalid"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
