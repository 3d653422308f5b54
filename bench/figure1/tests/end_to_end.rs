//! The bench end to end, as root: its own iokerneld (unshielded, on a socket of its own) on
//! CPU 0 managing CPU 1, two short loads, and the files it writes read back, the CSV by the
//! parser `corral-sim figure1 --measured` uses. Behaviour only, no timing: the machine is
//! shared.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use corral_testserver::{serial, sibling_binary};

const BENCH: &str = env!("CARGO_BIN_EXE_corral-bench-figure1");

/// A bound on a run, so that a broken build fails instead of hanging the suite.
const PATIENCE: Duration = Duration::from_secs(90);

fn run(args: &[&str]) -> Output {
    let mut child = Command::new(BENCH)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the bench");
    let started = Instant::now();
    while child.try_wait().expect("poll the bench").is_none() {
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect the bench");
            panic!(
                "the bench ran past {PATIENCE:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collect the bench")
}

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let dir =
            std::env::temp_dir().join(format!("corral-figure1-test-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create the test directory");
        Dir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn show(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_owned()
}

#[test]
fn every_request_completes_once_at_each_load() {
    let _cpu = serial();
    sibling_binary(BENCH, "iokerneld", "corral-iokerneld");
    let dir = Dir::new("run");
    let (csv, json) = (dir.path("points.csv"), dir.path("points.json"));
    let out = run(&[
        "--loads",
        "0.2,0.5",
        "--seconds",
        "0.5",
        "--warmup-seconds",
        "0.1",
        "--shield",
        "off",
        "--csv",
        &show(&csv),
        "--json",
        &show(&json),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the bench failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&csv).expect("the CSV");
    let points = corral_sim::figure1::parse_measured(&text, "the bench's CSV")
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(points.len(), 2, "{text}");
    for (point, load) in points.iter().zip([0.2, 0.5]) {
        assert_eq!(point.load, load, "{text}");
        assert_eq!(point.cores, 1, "{text}");
        assert!(point.requests > 0, "{text}");
        assert!(point.efficiency > 0.0 && point.efficiency <= 1.0, "{text}");
        // The histogram is not empty: its quantiles are real latencies.
        assert!(
            point.p50_us > 0.0 && point.p999_us >= point.p50_us,
            "{text}"
        );
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON")).expect("JSON");
    let rows = report["points"].as_array().expect("points");
    assert_eq!(rows.len(), 2, "{report:#}");
    for row in rows {
        assert_eq!(row["requests"], row["completed"], "{report:#}");
        // Counts are written as integers.
        assert!(row["requests"].as_u64().expect("a count") > 0, "{report:#}");
        assert!(row["core_seconds_held"].as_f64().expect("core time") > 0.0);
    }
    assert_eq!(report["shield"], "off");
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (&["--loads", "0"], "--loads"),
        (&["--loads", "0.5,-1"], "--loads"),
        (&["--loads", "40"], "--loads"),
        (&["--loads", "half"], "--loads"),
        (&["--seconds", "0"], "--seconds"),
        (&["--warmup-seconds=-1"], "--warmup-seconds"),
        (&["--service-mean-us", "0"], "--service-mean-us"),
        (&["--app-cpus", "1-x"], "--app-cpus"),
        (&["--app-cpus", "9000"], "--app-cpus"),
        (&["--app-cpus", "0"], "--iokernel-cpu"),
        (&["--shield", "maybe"], "--shield"),
        (&["--iokerneld", "/nonexistent/iokerneld"], "--iokerneld"),
    ];
    for (args, flag) in cases {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag),
            "{args:?} does not name {flag}: {stderr}"
        );
    }
}
