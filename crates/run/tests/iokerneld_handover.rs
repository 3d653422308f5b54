//! Under iokerneld, an unmodified `xz -T2` run by corral-run as the batch job on the one
//! managed core gives that core up each time a latency-critical runtime (this test's own) needs
//! it, over 1,000 hand-overs: never so late that iokerneld has to demote it (its preemption
//! bound), and its output is still byte-identical to a plain run.
//!
//! iokerneld comes from `target/<profile>/iokerneld`, which scripts/test.sh builds before the
//! workspace tests (`cargo test` does not build other packages' binaries).

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corral::{Config, IokernelSettings, Runtime};

const HANDOVERS: u64 = 1000;
/// iokerneld's preemption bound: a kthread still holding its core this long after being asked
/// to give it back is demoted off the managed cores.
const PREEMPTION_TIMEOUT_US: u64 = 10_000;

struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start() -> Daemon {
        let exe = support::profile_dir().join("iokerneld");
        assert!(
            exe.is_file(),
            "{} is missing: build it with `cargo build -p corral-iokerneld --bin iokerneld` \
             (scripts/test.sh does)",
            exe.display()
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("iokerneld.sock");
        let child = Command::new(exe)
            .args([
                "--core",
                "0",
                "--managed-cores",
                "1",
                "--nic",
                "none",
                "--log-level",
                "warn",
            ])
            .args([
                "--preemption-timeout-us",
                &PREEMPTION_TIMEOUT_US.to_string(),
            ])
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start iokerneld");
        // Killed on drop from here on, even if it never comes up.
        let daemon = Daemon {
            child,
            socket,
            _dir: dir,
        };
        let start = Instant::now();
        while daemon.stats().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "iokerneld did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }

    /// `iokerneld stats`, once it answers.
    fn stats(&self) -> Option<serde_json::Value> {
        let exe = support::profile_dir().join("iokerneld");
        let out = Command::new(exe)
            .args(["stats", "--socket"])
            .arg(&self.socket)
            .stderr(Stdio::null())
            .output()
            .expect("run iokerneld stats");
        serde_json::from_slice(&out.stdout).ok()
    }

    fn has_runtime(&self, name: &str) -> bool {
        self.stats().is_some_and(|s| {
            s["runtimes"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["name"] == name))
        })
    }

    fn runtime_stats(&self, name: &str) -> serde_json::Value {
        let stats = self.stats().expect("iokerneld stats prints JSON");
        stats["runtimes"]
            .as_array()
            .expect("a runtimes array")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("runtime {name} not in {stats:#}"))
    }
}

/// Enough text that `xz -T2 -6` keeps the core busy for the whole test.
fn input() -> PathBuf {
    let path = support::scratch("iokerneld_handover").join("input.txt");
    let mut data = Vec::with_capacity(48 << 20);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while data.len() < 48 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(format!("{:x} {} ", x % 100_000, x % 7).as_bytes());
    }
    std::fs::write(&path, &data).expect("write the input");
    path
}

#[test]
#[ignore = "fails today: the shimmed batch kthread ignores iokerneld's preemption and is demoted after its first few hand-overs (an open defect of corral-run; run with --ignored)"]
fn a_corral_run_batch_job_gives_the_core_back_each_time() {
    let input = input();
    let xz = ["-T2", "-6", "-c"];
    let daemon = Daemon::start();
    let batch = support::corral_run()
        .args(["--iokerneld"])
        .arg(&daemon.socket)
        .args(["--name", "xz-batch", "--kthreads", "1", "--", "/usr/bin/xz"])
        .args(xz)
        .arg(&input)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start corral-run xz");
    // Wait until the batch job registered and holds the core.
    let start = Instant::now();
    while !daemon.has_runtime("xz-batch") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "xz did not register"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = daemon.runtime_stats("xz-batch");
    let lc = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(&daemon.socket, "lc")),
    )
    .expect("register the latency-critical runtime");
    // Each sleep parks the latency-critical runtime, which hands the core to the batch job;
    // each wake-up takes it back.
    lc.block_on(|| {
        for _ in 0..HANDOVERS {
            corral::sleep(Duration::from_micros(300));
        }
    });
    let after = daemon.runtime_stats("xz-batch");
    drop(lc);
    let counter = |s: &serde_json::Value, key: &str| {
        s[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in {s:#}"))
    };
    let preemptions =
        counter(&after, "preemptions_suffered") - counter(&before, "preemptions_suffered");
    assert!(
        preemptions >= HANDOVERS - 1,
        "xz gave the core up {preemptions} times in {HANDOVERS} hand-overs: {after:#}"
    );
    assert_eq!(
        counter(&after, "demotions"),
        0,
        "xz held the core past the bound: {after:#}"
    );
    let latency_max = counter(&after, "preemption_latency_max_ns");
    assert!(
        latency_max < PREEMPTION_TIMEOUT_US * 1000,
        "slowest hand-over {latency_max} ns"
    );
    let shimmed = batch.wait_with_output().expect("wait for xz");
    assert!(
        shimmed.status.success(),
        "xz under corral-run: {}",
        shimmed.status
    );
    let plain = Command::new("/usr/bin/xz")
        .args(xz)
        .arg(&input)
        .output()
        .expect("plain xz");
    assert!(plain.status.success());
    assert!(
        shimmed.stdout == plain.stdout,
        "xz output under iokerneld differs from plain"
    );
}
