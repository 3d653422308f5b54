//! The `gen` NIC backend end to end: a real iokerneld (`--nic gen`, CPU 0, managing CPU 1), a
//! Corral runtime in this process serving the spin protocol under it, and `iokerneld gen` runs
//! played against that runtime; and `iokerneld gen --protocol dns` runs against `corral-dns
//! --runtime corral` (package corral-app-dns, found next to iokerneld) serving the DNS test
//! zones under it.
//!
//! Each test starts its own iokerneld with its own socket, and the tests run one at a time.
//! Nothing here asserts timing: the grace periods are long and every wait is bounded only so
//! that a broken build fails instead of hanging.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Daemon, IOKERNELD, Launch, WAIT, binary_beside_iokerneld, serial, wait_until};
use corral::net::{NetConfig, UdpSpawner};
use corral::{Config, IokernelSettings, Runtime};
use corral_abi::control::{Reply, Request};
use corral_app_spin::{Calibration, serve};
use corral_gen::run::GenResult;
use corral_gen::run::Protocol;

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
    assert_all_answered(result, requests);
    let s = &result.summary;
    // Every answer carries the server's stamps on the generator's clock: each latency splits.
    assert_eq!(
        (s.tail.split, s.tail.unsplit),
        (requests, 0),
        "{:?}",
        s.tail
    );
    assert_eq!(result.gen_cost.requests, requests);
    assert!(result.gen_cost.responses >= requests);
    assert!(result.gen_cost.ns_per_request > 0.0);
    assert!(result.gen_cost.build_ns > 0 && result.gen_cost.parse_ns > 0);
}

/// Every request was sent and answered exactly once, with nothing else received, and the
/// latencies are in order.
fn assert_all_answered(result: &GenResult, requests: u64) {
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

/// The DNS server's address: port 53 on its own stack.
const DNS_TARGET: &str = "10.99.0.2:53";

/// Questions asked in order, round and round: three names the zones have (one through a CNAME
/// chain, one under a wildcard, one in capitals), two missing from zones the server has, and
/// two outside every zone.
const DNS_MIX: &str = "\
; dnsperf's format: NAME TYPE
www.example.com A
www.example.org. AAAA
x.wild.example.com TXT
WWW.Example.COM A
nothing.example.com AAAA
missing.example.org A
nowhere.test. A
# outside every zone too
example.net MX
";

/// The RCODE each line of [`DNS_MIX`] draws: NOERROR (0), NXDOMAIN (3) or REFUSED (5).
const DNS_RCODES: [u8; 8] = [0, 0, 0, 0, 3, 3, 5, 5];

/// The test zones corral-dns serves (the files in `apps/dns/tests/zones`).
const DNS_ZONES: [&str; 3] = [
    "example.com=example.com.zone",
    "example.org=example.org.zone",
    "child.example.com=child.example.com.zone",
];

/// `corral-dns --runtime corral` at 10.99.0.2 under a daemon, serving the DNS test zones;
/// killed on drop.
struct DnsServer {
    child: Child,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn zones_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps/dns/tests/zones")
}

impl Daemon {
    /// Runs `iokerneld gen --protocol dns` with the queries in `queries` against the DNS
    /// server, in one phase (`RPS@SECONDS`), with `extra` flags.
    fn dns_run(&self, queries: &Path, phase: &str, extra: &[&str]) -> Output {
        let queries = queries.to_str().unwrap();
        let dns = [
            "--protocol",
            "dns",
            "--queries",
            queries,
            "--target",
            DNS_TARGET,
        ];
        self.run_gen(&[&dns[..], &["--phase", phase], extra].concat())
    }

    /// Starts corral-dns on one kthread under this daemon, and returns once a short DNS run
    /// gets every query answered (it has registered and listens).
    fn dns_server(&self, queries: &Path) -> DnsServer {
        let child = Command::new(binary_beside_iokerneld("corral-dns", "corral-app-dns"))
            .current_dir(zones_dir())
            .args(["--runtime", "corral", "-l", "10.99.0.2", "-p", "53"])
            .args(["-t", "1", "--iokerneld"])
            .arg(&self.socket)
            .args(DNS_ZONES)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start corral-dns");
        let mut server = DnsServer { child };
        let deadline = Instant::now() + 3 * WAIT;
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("corral-dns exited with {status}");
            }
            let out = self.dns_run(queries, "200@0.05", &["--grace-ms", "200"]);
            let answered = out.status.success()
                && serde_json::from_slice::<GenResult>(&out.stdout)
                    .is_ok_and(|r| r.summary.lost == 0 && r.summary.matched > 0);
            if answered {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "corral-dns did not answer a short run within {:?}: {}",
                3 * WAIT,
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn every_dns_query_is_answered_matched_and_counted_by_rcode() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let queries = dir.path().join("queries.txt");
    std::fs::write(&queries, DNS_MIX).unwrap();
    let mut daemon = Daemon::start("gen");
    let server = daemon.dns_server(&queries);
    let json = dir.path().join("dns.json");
    // 2,000 queries: 2,000/s at constant gaps for a second, from 16 client ports.
    let out = daemon.dns_run(
        &queries,
        "2000@1",
        &[
            "--edns",
            "1232",
            "--arrivals",
            "constant",
            "--clients",
            "16",
            "--grace-ms",
            "2000",
            "--window-ms",
            "500",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "iokerneld gen failed: {stderr}");
    let text = std::fs::read_to_string(&json).unwrap();
    let result: GenResult = serde_json::from_str(&text).unwrap();
    let requests = 2_000u64;
    assert_all_answered(&result, requests);
    let windows: Vec<(u64, u64)> = result
        .windows
        .iter()
        .map(|w| (w.scheduled, w.matched))
        .collect();
    assert_eq!(windows, vec![(1000, 1000), (1000, 1000)]);

    // Request n asks line n mod 8 of the mix: each RCODE as often as its lines are asked.
    let lines = DNS_RCODES.len() as u64;
    let asked = |line: u64| (requests + lines - 1 - line) / lines;
    let drawn = |rcode: u8| -> u64 {
        (0..lines)
            .filter(|&l| DNS_RCODES[l as usize] == rcode)
            .map(asked)
            .sum()
    };
    let dns = result.dns.expect("a dns run's results have counts");
    assert_eq!(
        dns,
        corral_loadgen::dns::DnsCounts {
            noerror: drawn(0),
            nxdomain: drawn(3),
            refused: drawn(5),
            servfail: 0,
            other_rcode: 0,
            truncated: 0,
            mismatched: 0,
        }
    );
    assert_eq!(dns.noerror + dns.nxdomain + dns.refused, requests);
    // The JSON has the counts at the top, and the spec carries the queries' text.
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["dns"]["nxdomain"], drawn(3));
    assert_eq!(value["dns"]["mismatched"], 0);
    assert_eq!(value["spec"]["protocol"], "dns");
    assert_eq!(value["spec"]["dns"]["queries"], DNS_MIX);
    assert_eq!(value["spec"]["dns"]["edns"], 1232);
    assert_eq!(result.spec.protocol, Protocol::Dns);
    // The summary on standard error has them too.
    assert!(
        stderr.contains(&format!(
            "dns: noerror {} nxdomain {} refused {} servfail 0 other 0 truncated 0 mismatched 0",
            dns.noerror, dns.nxdomain, dns.refused
        )),
        "{stderr}"
    );
    drop(server);
    daemon.assert_alive();
}

#[test]
fn a_bad_dns_run_is_refused_naming_the_file_line_or_field() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(
        &bad,
        "www.example.com A\n; fine so far\nwww.example.com BOGUS\n",
    )
    .unwrap();
    let big = dir.path().join("big.txt");
    std::fs::write(&big, "www.example.com A\n".repeat(4_000)).unwrap();
    // Small enough to read, but its JSON (each newline written as two bytes) is not.
    let long = dir.path().join("long.txt");
    std::fs::write(&long, "www.example.com A\n".repeat(3_600)).unwrap();
    let good = dir.path().join("good.txt");
    std::fs::write(&good, DNS_MIX).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let daemon = Daemon::start("gen");
    let short = ["--target", DNS_TARGET, "--rate", "100", "--duration", "0.1"];
    for (args, expected) in [
        (
            vec!["--protocol", "dns", "--queries", &path(&bad)],
            format!("{}: line 3: unknown record type \"BOGUS\"", bad.display()),
        ),
        (
            vec!["--protocol", "dns", "--queries", &path(&big)],
            format!(
                "{}: 72000 bytes of queries do not fit in a run's spec, which holds at most \
                 65536 bytes of JSON",
                big.display()
            ),
        ),
        (
            vec!["--protocol", "dns", "--queries", &path(&long)],
            format!(
                "{}: 64800 bytes of queries do not fit in a run's spec, which holds at most \
                 65536 bytes of JSON (with them the spec is",
                long.display()
            ),
        ),
        (
            vec!["--protocol", "dns", "--queries", "/nonexistent/queries.txt"],
            "cannot read /nonexistent/queries.txt".to_owned(),
        ),
        (
            vec!["--protocol", "dns"],
            "--protocol dns needs --queries FILE".to_owned(),
        ),
        (
            vec!["--queries", &path(&good)],
            "--queries and --edns are for --protocol dns, not spin".to_owned(),
        ),
        (
            vec![
                "--protocol",
                "dns",
                "--queries",
                &path(&good),
                "--clients",
                "300",
            ],
            "invalid clients = 300".to_owned(),
        ),
    ] {
        let out = daemon.run_gen(&[&args[..], &short[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&expected), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }

    // The daemon checks a spec sent to it by other means as well, naming the field.
    let ask = |json: &str| {
        let conn = corral_iokernel::control::connect(&daemon.socket).unwrap();
        let request = Request::Gen { json: json.into() };
        corral_iokernel::control::request_on(conn.as_fd(), &request.encode(), &[], WAIT).unwrap()
    };
    let spec = |extra: &str| {
        format!(
            r#"{{"target": "{DNS_TARGET}", "phases": [{{"rate_rps": 100, "duration_s": 0.1}}], {extra}}}"#
        )
    };
    for (extra, expected) in [
        (
            r#""protocol": "dns", "dns": {"queries": "a.example A\nb.example AAAA x\n"}"#,
            "invalid dns.queries = line 2: expected NAME TYPE",
        ),
        (r#""protocol": "dns""#, "invalid dns = nothing"),
        (
            r#""dns": {"queries": "a.example A"}"#,
            "no dns object with protocol spin",
        ),
        (
            r#""protocol": "dns", "dns": {"path": "/etc/shadow"}"#,
            "invalid dns.path",
        ),
    ] {
        match ask(&spec(extra)) {
            Reply::Error { message } => assert!(message.contains(expected), "{extra}: {message}"),
            other => panic!("{extra}: expected a refusal, got {other:?}"),
        }
    }
    let mut daemon = daemon;
    daemon.assert_alive();
}
