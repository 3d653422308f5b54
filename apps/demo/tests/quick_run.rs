//! The runner end to end: a `--quick` run of all three systems produces well-formed results
//! (the tail's split and the dedicated floor among them), so does a `--quick` run of the
//! memcached experiment and of the DNS experiment, a
//! Ctrl-C stops every process it started, and missing binaries are named. These start
//! iokerneld, so they need root and CPUs 0 and 1, like the demo itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs touching CPU 1 one at a time, even when the test harness runs tests in parallel.
static CPU: Mutex<()> = Mutex::new(());

/// `target/<profile>/`: the test executable lives in its `deps/`.
fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .expect("the test runs from target/<profile>/deps")
        .to_path_buf()
}

/// Fails, saying how to build them, when a sibling binary the runner needs is missing.
fn require_binaries() -> PathBuf {
    let dir = bin_dir();
    let profile = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let profile_flag = match profile.as_str() {
        "debug" => String::new(),
        "release" => " --release".into(),
        p => format!(" --profile {p}"),
    };
    let missing: Vec<String> = [
        ("iokerneld", "corral-iokerneld"),
        ("spin", "corral-app-spin"),
        ("batch", "corral-app-batch"),
        ("corral-loadgen-linux", "corral-loadgen"),
    ]
    .iter()
    .filter(|(bin, _)| !dir.join(bin).is_file())
    .map(|(bin, pkg)| format!("{bin}: build it with `cargo build{profile_flag} -p {pkg}`"))
    .collect();
    assert!(
        missing.is_empty(),
        "binaries missing from {} (`cargo test --workspace` builds them all): {}",
        dir.display(),
        missing.join("; ")
    );
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests start iokerneld, which needs root: run them as root"
    );
    dir
}

/// What a server experiment needs besides: Corral's server `binary` (of `package`) and the
/// Linux peer at `peer` (Debian's package `debian`).
fn require_server_binaries(binary: &str, package: &str, peer: &str, debian: &str) -> PathBuf {
    let dir = require_binaries();
    assert!(
        dir.join(binary).is_file(),
        "{binary} missing from {}: build it with `cargo build -p {package}` in this profile",
        dir.display()
    );
    assert!(
        Path::new(peer).is_file(),
        "{peer} missing: install Debian's {debian} (`bash scripts/setup.sh`)"
    );
    dir
}

/// Each of `wanted` appears in the demo's output.
fn assert_prints(stdout: &str, wanted: &[&str]) {
    for want in wanted {
        assert!(stdout.contains(want), "{want:?} missing from:\n{stdout}");
    }
}

/// The run's results.json.
fn results(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}

const MEMCACHED: &str = "/usr/bin/memcached";

/// A loopback port for the Linux spin server that no other test run uses.
fn port() -> u16 {
    30_000 + (std::process::id() % 20_000) as u16
}

fn demo() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_corral-demo"));
    c.stdin(Stdio::null());
    c
}

/// Runs to completion, killing it after `timeout`.
fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: the child has not been reaped (its waiter has not returned).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
            let out = rx.recv_timeout(Duration::from_secs(15));
            panic!(
                "corral-demo did not finish within {} s; after SIGINT: {:?}",
                timeout.as_secs(),
                out.map(|o| o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()))
            );
        }
    }
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_str()?.to_owned();
            name.parse::<u32>().ok()?;
            if name == me {
                return None;
            }
            let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            cmd.contains(needle).then(|| format!("{name}: {cmd}"))
        })
        .collect()
}

#[test]
fn quick_run_of_all_systems_writes_well_formed_results() {
    let bins = require_binaries();
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut cmd = demo();
    cmd.args(["--quick", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&bins)
        .args(["--linux-addr", &format!("127.0.0.1:{}", port())]);
    let o = run_with_timeout(cmd, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "a quick run took {:?}",
        started.elapsed()
    );
    // Progress for each system and point, then the tables and the target checks.
    assert_prints(
        &stdout,
        &[
            "== Corral",
            "== Linux",
            "== Dedicated",
            "C p99.9",
            "L p99.9",
            "D p99.9",
            "C/D p99.9",
            "bound p99.9",
            "C p99.9 <= 0.5x L p99.9",
            "C p99.9 <= 2x bound",
            "C batch >= L batch",
            "C p99.9 <= 1.5x D p99.9",
            "C p99 <= L p99",
            "D p99.9 <= 5x bound",
            "Classes and shielding",
            "Linux classes: corral-loadgen-linux:",
            "Tail split",
            "steal app CPU ms",
            "demotions",
            "results.json",
        ],
    );

    let json = results(out.path());
    assert_eq!(json["experiment"], "sweep");
    let loads: Vec<f64> = json["plan"]["loads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect();
    assert_eq!(loads.len(), 2, "{}", json["plan"]);
    let systems = json["systems"].as_array().unwrap();
    let names: Vec<&str> = systems
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["corral", "linux", "dedicated"]);
    let split_header = stdout
        .lines()
        .find(|l| l.starts_with("system") && l.contains("send-late"))
        .unwrap_or_else(|| panic!("no tail split table in:\n{stdout}"));
    for column in [
        "tail",
        "requests",
        "from",
        "deliver+wake",
        "queue",
        "service",
        "return",
        "unsplit",
    ] {
        assert!(split_header.contains(column), "{column}: {split_header}");
    }
    // Every point's tail split, in the table: one row above p99 and one above p99.9 for each
    // system and load, each with its five stages.
    let split_rows = stdout
        .lines()
        .filter(|l| l.contains(" >p99 ") || l.contains(" >p99.9 "))
        .count();
    assert_eq!(split_rows, 2 * 3 * loads.len(), "{stdout}");
    for s in systems {
        let name = s["system"].as_str().unwrap();
        let dedicated = name == "dedicated";
        if dedicated {
            assert!(s["batch_alone"].is_null(), "{name}");
            assert!(s["commands"]["batch"].is_null(), "{name}");
            assert!(
                s["commands"]["spin"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|a| a == "--spinning"),
                "{name}: {}",
                s["commands"]
            );
        } else {
            assert!(
                s["batch_alone"]["units_per_s"].as_f64().unwrap() > 0.0,
                "{name}"
            );
        }
        assert!(s["commands"]["spin"].as_array().is_some(), "{name}");
        let points = s["points"].as_array().unwrap();
        assert_eq!(points.len(), loads.len(), "{name}");
        for (p, &load) in points.iter().zip(&loads) {
            assert_eq!(p["load"].as_f64().unwrap(), load);
            assert!(p["rate_rps"].as_f64().unwrap() > 0.0);
            let summary = &p["summary"];
            assert!(
                summary["matched"].as_u64().unwrap() > 0,
                "{name} at {load}: nothing answered: {summary}"
            );
            for field in ["achieved_rps", "lost", "fell_behind", "scheduled", "sent"] {
                assert!(!summary[field].is_null(), "{name}: {field}");
            }
            for field in ["p50_ns", "p99_ns", "p999_ns"] {
                assert!(summary["latency"][field].as_u64().unwrap() > 0, "{field}");
            }
            assert_eq!(
                p["batch_units_per_s"].as_f64().is_some(),
                !dedicated,
                "{name}: {p}"
            );
            assert_eq!(p["batch_fraction"].as_f64().is_some(), !dedicated, "{name}");
            assert!(!p["command"].as_array().unwrap().is_empty());
            assert!(p["raw"].is_object());
            // Every answer carried the server's stamps on the generator's clock, so every
            // matched request's latency was split, and the tail's split was kept.
            let tail = &summary["tail"];
            assert_eq!(
                tail["split"], summary["matched"],
                "{name} at {load}: {tail}"
            );
            assert_eq!(
                tail["unsplit"].as_u64(),
                Some(0),
                "{name} at {load}: {tail}"
            );
            for key in ["above_p99", "above_p999"] {
                let t = &tail[key];
                assert!(t["requests"].as_u64().unwrap() >= 1, "{name} {key}: {tail}");
                // The service stage is the requested work: at least a fraction of a µs.
                assert!(
                    t["median"]["service_ns"].as_u64().unwrap() > 0,
                    "{name} {key}: {tail}"
                );
            }
            // Steal on both CPUs, every system.
            for cpu in ["iokernel_cpu_ms", "app_cpu_ms"] {
                assert!(p["steal"][cpu].as_f64().unwrap() >= 0.0, "{name}: {p}");
            }
        }
        if name != "linux" {
            assert!(s["commands"]["iokerneld"].as_array().is_some());
            for p in points {
                assert!(p["reallocations_per_s"].as_f64().is_some(), "{p}");
                assert!(!p["windows"].as_array().unwrap().is_empty());
                assert!(p["demotions"]["total"].as_u64().is_some(), "{p}");
                assert!(p["iokerneld_stalls"].as_array().is_some(), "{p}");
            }
        }
    }
    assert!(json["plan"]["handover"].is_null(), "{}", json["plan"]);
    assert_eq!(json["bounds"].as_array().unwrap().len(), 2);
    assert_eq!(json["rows"].as_array().unwrap().len(), 2);
    // Six targets at each load up to 80%.
    assert_eq!(json["checks"].as_array().unwrap().len(), 12);

    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + loads.len(), "{csv}");
    assert!(
        lines[0].starts_with("load,rate_rps,corral_"),
        "{}",
        lines[0]
    );

    for stem in ["latency", "batch"] {
        let png = std::fs::read(out.path().join(format!("{stem}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{stem}.png");
        let svg = std::fs::read_to_string(out.path().join(format!("{stem}.svg"))).unwrap();
        assert!(
            svg.trim_start().starts_with("<svg") || svg.trim_start().starts_with("<?xml"),
            "{stem}.svg"
        );
        assert!(
            svg.contains("<svg") && svg.trim_end().ends_with("</svg>"),
            "{stem}.svg"
        );
    }
}

/// `--nic xdp`: the same load generator, in a namespace behind a veth pair, drives Corral
/// through iokerneld's XDP backend and Linux through its own stack; every point is answered,
/// and the pair and namespace are gone afterwards.
#[test]
fn quick_run_over_xdp_drives_both_systems_from_a_namespace() {
    let bins = require_binaries();
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let mut cmd = demo();
    cmd.args([
        "--quick",
        "--nic",
        "xdp",
        "--systems",
        "corral,linux",
        "--out",
    ])
    .arg(out.path())
    .arg("--bin-dir")
    .arg(&bins);
    let o = run_with_timeout(cmd, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "{stdout}\n{stderr}\n{}",
        log_tails(out.path())
    );
    assert_prints(
        &stdout,
        &[
            "nic xdp on crldemo0",
            "in the client namespace, over the veth pair to 10.93.0.1:",
            "C p99.9 <= 0.5x L p99.9",
        ],
    );
    let json = results(out.path());
    assert_eq!(json["plan"]["nic"], "xdp");
    for s in json["systems"].as_array().unwrap() {
        let name = s["system"].as_str().unwrap();
        for p in s["points"].as_array().unwrap() {
            let summary = &p["summary"];
            assert!(
                summary["matched"].as_u64().unwrap() > 0,
                "{name}: nothing answered over the veth pair: {summary}"
            );
            let command = p["command"].as_array().unwrap();
            assert!(
                command.iter().any(|a| a == "netns"),
                "{name}: the load generator ran outside the namespace: {command:?}"
            );
        }
    }
    assert!(
        !std::path::Path::new("/sys/class/net/crldemo0").exists(),
        "the veth pair outlived the demo"
    );
}

#[test]
fn quick_burst_reports_windows_through_the_step() {
    let bins = require_binaries();
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let mut cmd = demo();
    cmd.args(["--experiment", "burst", "--quick", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&bins);
    let o = run_with_timeout(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains("Target: every high-phase window"),
        "{stdout}"
    );
    let json = results(out.path());
    let burst = &json["burst"];
    let windows = burst["burst"]["windows"].as_array().unwrap();
    // Three phases of 0.3 s in 10 ms windows.
    assert!(windows.len() >= 80, "{} windows", windows.len());
    assert!(burst["steady"]["summary"]["matched"].as_u64().unwrap() > 0);
    assert!(!json["burst_check"]["verdict"].is_null());
    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap();
    assert!(csv.starts_with("run,start_ms,"), "{csv}");
    assert!(
        csv.lines().count() > windows.len(),
        "burst and steady windows"
    );
    let png = std::fs::read(out.path().join("burst.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        std::fs::read_to_string(out.path().join("burst.svg"))
            .unwrap()
            .contains("<svg")
    );
}

#[test]
fn ctrl_c_stops_every_process_it_started() {
    let bins = require_binaries();
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let socket = format!("/run/corral/demo-test-{}.sock", std::process::id());
    let mut child = demo()
        .args([
            "--quick",
            "--point-secs",
            "30",
            "--socket",
            &socket,
            "--out",
        ])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&bins)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the Corral half is up (its daemon and runtimes run with that socket).
    let end = Instant::now() + Duration::from_secs(60);
    while processes_mentioning(&socket).len() < 3 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "corral-demo exited early"
        );
        assert!(
            Instant::now() < end,
            "the Corral processes never all started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: the child has not been reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let end = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("corral-demo did not stop within 20 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let left = processes_mentioning(&socket);
    assert!(left.is_empty(), "left running: {left:?}");
    assert!(
        !Path::new(&socket).exists(),
        "iokerneld's socket was left behind"
    );
}

/// Any command as the batch job: under corral-run for Corral, at SCHED_IDLE for Linux, its
/// share measured from the CPU time it received, with no reports of its own.
#[test]
fn a_batch_command_gets_a_measured_cpu_share() {
    let bins = require_binaries();
    assert!(
        bins.join("corral-run").is_file() && bins.join("libcorral_shim.so").is_file(),
        "corral-run or its shim is missing from {}: build them with `cargo build -p corral-run` \
         (same profile)",
        bins.display()
    );
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let mut cmd = demo();
    cmd.args([
        "--quick",
        "--systems",
        "corral,linux",
        "--loads",
        "0.2",
        "--batch-cmd",
        "xz -T2 -6 -c /dev/urandom",
        "--out",
    ])
    .arg(out.path())
    .arg("--bin-dir")
    .arg(&bins)
    .args(["--linux-addr", &format!("127.0.0.1:{}", port() + 1)]);
    let o = run_with_timeout(cmd, Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("batch CPU share"), "{stdout}");
    let json = results(out.path());
    assert_eq!(
        json["plan"]["batch_cmd"],
        serde_json::json!(["xz", "-T2", "-6", "-c", "/dev/urandom"])
    );
    // What the daemon and the batch job said, for a failure below.
    let logs = log_tails(&out.path().join("logs"));
    for s in json["systems"].as_array().unwrap() {
        let name = s["system"].as_str().unwrap();
        let batch = s["commands"]["batch"].as_array().unwrap();
        let ran_xz = batch.iter().any(|w| w == "xz");
        assert!(ran_xz, "{name}: {batch:?}");
        assert_eq!(
            batch[0].as_str().unwrap().ends_with("corral-run"),
            name == "corral",
            "{name}: {batch:?}"
        );
        // CPU microseconds per second: alone, and beside the server at each load.
        assert!(
            s["batch_alone"]["units_per_s"].as_f64().unwrap() > 0.0,
            "{name}: {}\n{stdout}\n{logs}",
            s["batch_alone"]
        );
        for p in s["points"].as_array().unwrap() {
            assert!(
                p["batch_units_per_s"].as_f64().unwrap() > 0.0,
                "{name}: {p}\n{stdout}\n{logs}"
            );
            assert!(
                p["batch_fraction"].as_f64().unwrap() > 0.0,
                "{name}: {p}\n{stdout}\n{logs}"
            );
        }
    }
}

/// The last lines of every log in `dir`, each under its file name.
fn log_tails(dir: &Path) -> String {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            format!("--- {}\n{tail}\n", path.display())
        })
        .collect()
}

#[test]
fn missing_binaries_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let o = demo()
        .args(["--quick", "--systems", "linux", "--bin-dir"])
        .arg(dir.path())
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("missing") && stderr.contains("corral-loadgen-linux"),
        "{stderr}"
    );
    assert!(stderr.contains("cargo build"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn quick_kv_run_of_all_systems_answers_every_request_correctly() {
    let bins = require_server_binaries("corral-kv", "corral-app-kv", MEMCACHED, "memcached");
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let socket = format!("/run/corral/demo-kv-test-{}.sock", std::process::id());
    let mut cmd = demo();
    cmd.args(["--experiment", "kv", "--quick", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&bins)
        .args(["--socket", &socket])
        .args(["--memcached", MEMCACHED])
        .args(["--memcached-addr", &format!("127.0.0.1:{}", port() + 2)]);
    let o = run_with_timeout(cmd, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert_prints(
        &stdout,
        &[
            "== Corral",
            "== Linux",
            "== Dedicated",
            "C p99",
            "L p99",
            "D p99",
            "C batch",
            "C realloc/s",
            "objective",
            "ceiling:",
            "Targets:",
            "capacity >= 2x memcached's",
            "results.json",
        ],
    );

    let json = results(out.path());
    assert_eq!(json["experiment"], "kv");
    let rates: Vec<f64> = json["plan"]["kv"]["rates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_f64().unwrap())
        .collect();
    assert_eq!(rates.len(), 2, "{}", json["plan"]);
    let systems = json["systems"].as_array().unwrap();
    let names: Vec<&str> = systems
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["corral", "linux", "dedicated"]);
    // One objective for all: memcached's unloaded median times the factor.
    assert_eq!(json["objective"]["from"], "linux", "{}", json["objective"]);
    let memcached_median = systems[1]["unloaded"]["summary"]["latency"]["p50_ns"]
        .as_u64()
        .unwrap();
    for s in systems {
        assert_eq!(
            s["slo_p99_ns"].as_u64(),
            Some(10 * memcached_median),
            "{}",
            s["system"]
        );
    }
    let mut csv_rows = 0;
    for s in systems {
        let name = s["system"].as_str().unwrap();
        let server = match name {
            "linux" => "memcached",
            _ => "corral-kv",
        };
        let server_command = s["commands"][server]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no {server} command in {}", s["commands"]));
        // One server thread on the one application core.
        assert!(
            server_command
                .windows(2)
                .any(|w| w[0] == "-t" && w[1] == "1"),
            "{name}: {server_command:?}"
        );
        assert_eq!(s["batch_alone"].is_null(), name == "dedicated", "{name}");
        assert!(s["slo_p99_ns"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(s["unloaded"]["unloaded"], true, "{name}");
        let points: Vec<&Value> = std::iter::once(&s["unloaded"])
            .chain(s["points"].as_array().unwrap())
            .collect();
        // The ladder stops after two saturated points in a row, so both rates are always played.
        assert_eq!(points.len(), 1 + rates.len(), "{name}");
        csv_rows += points.len();
        for p in points {
            let rate = p["rate_rps"].as_f64().unwrap();
            let summary = &p["summary"];
            assert!(
                summary["achieved_rps"].as_f64().unwrap() > 0.0,
                "{name} at {rate}/s: nothing answered: {summary}"
            );
            assert!(
                summary["matched"].as_u64().unwrap() > 0,
                "{name}: {summary}"
            );
            // Every reply checked against the generator's model of the key space.
            assert_eq!(
                p["errors"].as_u64(),
                Some(0),
                "{name} at {rate}/s: {}",
                p["checks"]
            );
            let checks = &p["checks"];
            let answered = ["hits", "misses", "stored"]
                .iter()
                .map(|k| checks[*k].as_u64().unwrap())
                .sum::<u64>();
            // Late replies are checked too, but are not matched.
            assert!(
                answered >= summary["matched"].as_u64().unwrap(),
                "{name} at {rate}/s: {checks} vs {summary}"
            );
            for field in ["p50_ns", "p99_ns", "p999_ns"] {
                assert!(summary["latency"][field].as_u64().unwrap() > 0, "{field}");
            }
            assert_eq!(
                p["batch_fraction"].as_f64().is_some(),
                name != "dedicated",
                "{name}: {p}"
            );
            assert_eq!(
                p["reallocations_per_s"].as_f64().is_some(),
                name != "linux",
                "{name}: {p}"
            );
            assert!(p["server_cpus"].as_f64().is_some(), "{name}: {p}");
            assert!(!p["command"].as_array().unwrap().is_empty());
        }
    }
    let ceilings = json["ceilings"].as_array().unwrap();
    assert_eq!(ceilings.len(), 3);
    for c in ceilings {
        assert!(c["limit"].is_string(), "{c}");
    }
    let throughput = json["checks"]["throughput"].as_array().unwrap();
    let judged: Vec<&str> = throughput
        .iter()
        .map(|t| t["system"].as_str().unwrap())
        .collect();
    assert_eq!(judged, ["corral", "dedicated"]);

    let csv = std::fs::read_to_string(out.path().join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + csv_rows, "{csv}");
    let png = std::fs::read(out.path().join("kv.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(out.path().join("kv.svg")).unwrap();
    assert!(svg.trim_end().ends_with("</svg>"));
    assert!(
        processes_mentioning(&socket).is_empty(),
        "processes left behind: {:?}",
        processes_mentioning(&socket)
    );
}

#[test]
fn quick_dns_run_of_all_systems_answers_every_query_correctly() {
    let bins = require_server_binaries("corral-dns", "corral-app-dns", "/usr/sbin/gdnsd", "gdnsd");
    let _cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let out = tempfile::tempdir().unwrap();
    let socket = format!("/run/corral/demo-dns-test-{}.sock", std::process::id());
    let mut cmd = demo();
    cmd.args(["--experiment", "dns", "--quick", "--out"])
        .arg(out.path())
        .arg("--bin-dir")
        .arg(&bins)
        .args(["--socket", &socket])
        .args(["--dns-names", "500", "--dns-queries", "200"])
        .args(["--linux-dns-addr", &format!("127.0.0.1:{}", port() + 3)]);
    let o = run_with_timeout(cmd, Duration::from_secs(300));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert_prints(
        &stdout,
        &[
            "== Corral",
            "== Linux: gdnsd",
            "== Dedicated",
            "C p99",
            "L p99",
            "D p99",
            "objective",
            "gdnsd's unloaded median",
            "Targets:",
            "capacity >= 3x gdnsd's",
            "dns.png",
        ],
    );
    let json = results(out.path());
    assert_eq!(json["experiment"], "dns");
    let systems = json["systems"].as_array().unwrap();
    let names: Vec<&str> = systems
        .iter()
        .map(|s| s["system"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["corral", "linux", "dedicated"]);
    assert_eq!(json["objective"]["from_server"], "gdnsd");
    for s in systems {
        let name = s["system"].as_str().unwrap();
        let server = if name == "linux" {
            "gdnsd"
        } else {
            "corral-dns"
        };
        assert!(
            s["commands"][server].is_array(),
            "{name}: no {server} command in {}",
            s["commands"]
        );
        for p in std::iter::once(&s["unloaded"]).chain(s["points"].as_array().unwrap()) {
            let rate = p["rate_rps"].as_f64().unwrap();
            let summary = &p["summary"];
            let matched = summary["matched"].as_u64().unwrap();
            assert!(matched > 0, "{name} at {rate}/s: {summary}");
            // Every answer carried its query's ID and question, and none failed.
            assert_eq!(
                p["errors"].as_u64(),
                Some(0),
                "{name} at {rate}/s: {}",
                p["checks"]
            );
            let c = &p["checks"];
            let count = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{k} in {c}"));
            // The query file asks existing names and missing ones, all inside the zone.
            assert!(count("noerror") > 0 && count("nxdomain") > 0, "{name}: {c}");
            assert_eq!(count("refused"), 0, "{name}: {c}");
            assert!(
                count("noerror") + count("nxdomain") >= matched,
                "{name} at {rate}/s: {c} vs {summary}"
            );
        }
    }
    let png = std::fs::read(out.path().join("dns.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        processes_mentioning(&socket).is_empty(),
        "processes left behind: {:?}",
        processes_mentioning(&socket)
    );
    assert!(
        processes_mentioning(&out.path().display().to_string()).is_empty(),
        "processes left behind: {:?}",
        processes_mentioning(&out.path().display().to_string())
    );
}
