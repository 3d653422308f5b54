//! The `gen` NIC backend end to end: a real iokerneld (`--nic gen`, CPU 0, managing CPU 1), a
//! Corral runtime in this process serving the spin protocol under it, and `iokerneld gen` runs
//! played against that runtime.
//!
//! Each test starts its own iokerneld with its own socket, and the tests run one at a time.
//! Nothing here asserts timing: the grace periods are long and every wait is bounded only so
//! that a broken build fails instead of hanging.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Daemon, IOKERNELD, Launch, serial, wait_until};
use corral::net::{NetConfig, UdpSpawner};
use corral::{Config, IokernelSettings, Runtime};
use corral_app_spin::{Calibration, serve};
use corral_gen::run::GenResult;

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const TARGET: &str = "10.99.0.2:5000";

impl Daemon {
    /// An iokerneld with the given NIC backend (gen at the default 10.99.0.1/24).
    fn start(nic: &str) -> Daemon {
        Daemon::launch(Launch {
            args: &["--log-level", "warn", "--nic", nic],
            socket: "iokerneld.sock",
            extra: &[],
            log: false,
        })
    }

    /// A runtime at `ip` serving the spin protocol on port 5000: each request burns its
    /// service time, then is echoed.
    fn spin_server(&self, ip: Ipv4Addr) -> (Runtime, UdpSpawner) {
        let rt = Runtime::new(
            Config::default()
                .kthreads(1)
                .iokernel(IokernelSettings::new(&self.socket, "spin"))
                .net(NetConfig::new(ip, 24)),
        )
        .expect("start a networked runtime under iokerneld");
        let calibration = Calibration::measure();
        let server = rt.block_on(move || {
            UdpSpawner::bind(
                SocketAddrV4::new(ip, 5000),
                move |mut request, _from, reply| {
                    if serve(&calibration, &mut request, reply.received_ns()) {
                        let _ = reply.send(&request);
                    }
                },
            )
            .expect("bind the spin server")
        });
        (rt, server)
    }

    fn gen_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(IOKERNELD);
        command
            .arg("gen")
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Runs `iokerneld gen` to its end.
    fn run_gen(&self, args: &[&str]) -> Output {
        self.gen_command(args).output().expect("run iokerneld gen")
    }

    /// Runs `iokerneld gen`, which must succeed, and parses its results.
    fn gen_ok(&self, args: &[&str]) -> GenResult {
        let out = self.run_gen(args);
        assert!(
            out.status.success(),
            "iokerneld gen failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "iokerneld gen printed results that do not parse ({e}):\n{}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// The gen backend's description in the statistics.
    fn gen_state(&self) -> String {
        self.stats()["nic"]["description"]
            .as_str()
            .expect("a NIC description")
            .to_owned()
    }
}

/// Every request was answered exactly once, and the latencies make sense.
fn assert_all_matched(result: &GenResult, requests: u64) {
    let s = &result.summary;
    assert_eq!(
        (s.scheduled, s.sent, s.send_errors),
        (requests, requests, 0),
        "{s:?}"
    );
    assert_eq!((s.matched, s.lost, s.late), (requests, 0, 0), "{s:?}");
    assert_eq!((s.duplicates, s.unknown, s.malformed), (0, 0, 0), "{s:?}");
    assert_eq!(s.received, requests, "{s:?}");
    let p = s.latency;
    assert_eq!(p.count, requests);
    // Every answer carries the server's stamps on the generator's clock: each latency splits.
    assert_eq!(
        (s.tail.split, s.tail.unsplit),
        (requests, 0),
        "{:?}",
        s.tail
    );
    assert!(p.min_ns > 0, "{p:?}");
    assert!(
        p.min_ns <= p.p50_ns
            && p.p50_ns <= p.p90_ns
            && p.p90_ns <= p.p99_ns
            && p.p99_ns <= p.p999_ns
            && p.p999_ns <= p.max_ns,
        "{p:?}"
    );
    assert!(p.mean_ns >= p.min_ns as f64 && p.mean_ns <= p.max_ns as f64);
    assert_eq!(s.lateness.count, requests);
    assert_eq!(result.gen_cost.requests, requests);
    assert!(result.gen_cost.responses >= requests);
    assert!(result.gen_cost.ns_per_request > 0.0);
    assert!(result.gen_cost.build_ns > 0 && result.gen_cost.parse_ns > 0);
}

#[test]
fn every_request_of_a_run_comes_back_matched_by_id() {
    let _serial = serial();
    let mut daemon = Daemon::start("gen");
    let (rt, server) = daemon.spin_server(SERVER_IP);
    // 2,000 requests: 4,000/s at constant gaps for half a second.
    let result = daemon.gen_ok(&[
        "--target",
        TARGET,
        "--rate",
        "4000",
        "--duration",
        "0.5",
        "--arrivals",
        "constant",
        "--service",
        "exp:5us",
        "--clients",
        "64",
        "--seed",
        "1",
        "--payload",
        "64",
        "--grace-ms",
        "2000",
        "--window-ms",
        "100",
    ]);
    assert_all_matched(&result, 2_000);

    // The spec comes back as validated, with every setting.
    let spec = &result.spec;
    assert_eq!(spec.target, TARGET);
    assert_eq!(spec.phases.len(), 1);
    assert_eq!(
        (spec.phases[0].rate_rps, spec.phases[0].duration_s),
        (4000.0, 0.5)
    );
    assert_eq!((spec.clients, spec.payload, spec.seed), (64, 64, 1));
    assert_eq!(spec.window_ms, Some(100.0));
    assert!((result.summary.offered_rps - 4000.0).abs() < 1e-6);

    // Five windows of 400 requests each, all answered.
    let windows = &result.windows;
    assert_eq!(windows.len(), 5);
    for (i, w) in windows.iter().enumerate() {
        assert_eq!(w.start_ms, i as f64 * 100.0);
        assert_eq!((w.scheduled, w.matched), (400, 400), "window {i}");
        assert_eq!(w.latency.count, 400);
        assert!(w.latency.min_ns > 0 && w.latency.p50_ns <= w.latency.max_ns);
    }

    // The runtime was woken for the requests, and the daemon reports what it did.
    let d = &result.daemon;
    assert_eq!(d.interval_us, 5);
    assert!(d.wakes >= 1, "{d:?}");
    assert!(d.reallocations_per_s.is_finite() && d.reallocations_per_s >= 0.0);

    // The runtime's stack saw the requests and sent the echoes, and learned the generator's
    // address from its announcement.
    let net = rt.net_stats().expect("net stats");
    assert!(net.udp_rx_datagrams >= 2_000, "{net:?}");
    assert!(net.udp_tx_datagrams >= 2_000, "{net:?}");
    assert!(net.arp.learned >= 1, "{net:?}");

    // The generator is idle again, and the statistics show the run.
    let state = daemon.gen_state();
    assert!(state.contains("idle"), "{state}");
    assert!(
        state.contains("1 runs started, 1 finished, 0 abandoned"),
        "{state}"
    );
    let stats = daemon.stats();
    assert!(stats["nic"]["rx_frames"].as_u64().unwrap() >= 2_000);
    assert!(stats["nic"]["tx_frames"].as_u64().unwrap() >= 2_000);
    drop(server);
    drop(rt);
    daemon.assert_alive();
}

#[test]
fn refusals_name_the_reason() {
    let _serial = serial();
    let mut daemon = Daemon::start("gen");
    let (rt, server) = daemon.spin_server(SERVER_IP);
    let short = ["--rate", "1000", "--duration", "0.1"];

    // No runtime owns the target address.
    let out = daemon.run_gen(&[&["--target", "10.99.0.9:5000"][..], &short[..]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused"), "{err}");
    assert!(
        err.contains("invalid target = 10.99.0.9:5000: no registered runtime owns 10.99.0.9"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    // The generator's own address.
    let out = daemon.run_gen(&[&["--target", "10.99.0.1:5000"][..], &short[..]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("generator's own address"), "{err}");

    // Bad arguments are refused before anything is sent, naming the setting.
    for (args, expected) in [
        (
            vec![
                "--target",
                TARGET,
                "--rate",
                "1000",
                "--duration",
                "1",
                "--payload",
                "10",
            ],
            "invalid payload = 10",
        ),
        (
            vec!["--target", TARGET, "--rate", "0", "--duration", "1"],
            "invalid phases[0].rate_rps = 0",
        ),
        (
            vec!["--target", "nowhere", "--rate", "1", "--duration", "1"],
            "invalid target = \"nowhere\"",
        ),
        (
            vec!["--target", TARGET, "--phase", "100@1", "--phase", "fast@1"],
            "RPS@SECONDS",
        ),
        (
            vec!["--target", TARGET, "--phase", "100@1", "--rate", "5"],
            "cannot be used with",
        ),
        (vec!["--target", TARGET, "--rate", "5"], "--duration"),
    ] {
        let out = daemon.run_gen(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    drop(server);
    drop(rt);
    daemon.assert_alive();

    // A daemon whose NIC is not gen cannot play runs.
    let mut none = Daemon::start("none");
    let out = none.run_gen(&[&["--target", TARGET][..], &short[..]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NIC backend is none, not gen"), "{err}");
    none.assert_alive();
}

#[test]
fn a_second_run_is_refused_while_one_is_in_progress() {
    let _serial = serial();
    let mut daemon = Daemon::start("gen");
    let (rt, server) = daemon.spin_server(SERVER_IP);
    let first = daemon
        .gen_command(&[
            "--target",
            TARGET,
            "--rate",
            "2000",
            "--duration",
            "1.5",
            "--arrivals",
            "constant",
            "--service",
            "const:2us",
            "--grace-ms",
            "2000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the first run");
    wait_until("the first run to start", Duration::from_secs(10), || {
        daemon.gen_state().contains("playing a run")
    });
    let out = daemon.run_gen(&["--target", TARGET, "--rate", "1000", "--duration", "0.1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a gen run is already in progress"), "{err}");
    // The first run was not disturbed.
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: GenResult = serde_json::from_slice(&out.stdout).unwrap();
    assert_all_matched(&result, 3_000);
    drop(server);
    drop(rt);
    daemon.assert_alive();
}

#[test]
fn a_client_hanging_up_abandons_its_run_and_the_next_run_is_served() {
    let _serial = serial();
    let mut daemon = Daemon::start("gen");
    let (rt, server) = daemon.spin_server(SERVER_IP);
    let mut quitter = daemon
        .gen_command(&["--target", TARGET, "--rate", "5000", "--duration", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a run");
    wait_until("the run to start", Duration::from_secs(10), || {
        daemon.gen_state().contains("playing a run")
    });
    quitter.kill().unwrap();
    quitter.wait().unwrap();
    wait_until("the run to be abandoned", Duration::from_secs(10), || {
        let state = daemon.gen_state();
        state.contains("idle") && state.contains("1 abandoned")
    });
    daemon.assert_alive();

    // The next run is served in full: two phases, ids continuing from one to the other.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.json");
    let out = daemon.run_gen(&[
        "--target",
        TARGET,
        "--phase",
        "2000@0.25",
        "--phase",
        "4000@0.25",
        "--arrivals",
        "constant",
        "--service",
        "const:2us",
        "--grace-ms",
        "2000",
        "--window-ms",
        "250",
        "--json",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "--json writes the file instead");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(summary.contains("1500 matched, 0 lost"), "{summary}");
    let result: GenResult = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_all_matched(&result, 1_500);
    let per_window: Vec<(u64, u64)> = result
        .windows
        .iter()
        .map(|w| (w.scheduled, w.matched))
        .collect();
    assert_eq!(per_window, vec![(500, 500), (1000, 1000)]);
    assert_eq!(result.spec.phases.len(), 2);
    let state = daemon.gen_state();
    assert!(
        state.contains("2 runs started, 1 finished, 1 abandoned"),
        "{state}"
    );
    drop(server);
    drop(rt);
    daemon.assert_alive();
}
