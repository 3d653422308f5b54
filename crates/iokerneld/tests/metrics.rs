//! The statistics in the Prometheus text format, from `iokerneld stats --format prometheus` and
//! from `--metrics-listen` over HTTP, read back with the Prometheus project's own Python parser
//! (`prometheus_client.parser`, Debian's python3-prometheus-client) and checked against the
//! JSON statistics of the same daemon; and the HTTP endpoint's answers to wrong paths, wrong
//! methods, garbage and silent clients.
//!
//! Every daemon runs on CPU 0 and manages CPU 1 with no NIC; runtimes are in-process
//! `corral-testclient` stand-ins. The tests share CPU 1, so they hold `serial()` while they run.
//! Values that move (loop iterations, uptime) are checked to lie between a JSON snapshot taken
//! before the text and one taken after it.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{IOKERNELD, Launch, WAIT, serial};
use corral_abi::control::NetIdentity;
use corral_iokernel::daemon::Stats;
use corral_testclient::client::{Mode, Options, Runtime};
use corral_testclient::netclient::NetMode;
use serde::Deserialize;

type Daemon = common::Daemon<Stats>;

/// Runtime names with the characters a label value must escape (a registered name may not
/// hold a line feed; the unit tests of the renderer cover that one).
const VICTIM: &str = "victim";
const SPOOFER: &str = r#"spoof "er" \ 1"#;
const SCRAPED: &str = r#"scraped "rt" \"#;

const A: NetIdentity = NetIdentity {
    mac: [0x02, 0, 0, 0, 0x0a, 0x01],
    ipv4: [10, 1, 0, 1],
};
const B: NetIdentity = NetIdentity {
    mac: [0x02, 0, 0, 0, 0x0b, 0x01],
    ipv4: [10, 1, 0, 2],
};

impl Daemon {
    fn start(extra: &[&str]) -> Daemon {
        Daemon::launch(Launch {
            args: &["--nic", "none"],
            socket: "iokerneld.sock",
            extra,
            log: true,
        })
    }

    /// `iokerneld stats --socket SOCKET ARGS`: its standard output.
    fn stats_command(&self, args: &[&str]) -> String {
        let out = Command::new(IOKERNELD)
            .arg("stats")
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run iokerneld stats");
        assert!(
            out.status.success(),
            "iokerneld stats {args:?}: {}\n{}\nlog:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).expect("UTF-8 statistics")
    }
}

/// A sample as the parser gives it.
#[derive(Debug, Deserialize)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A metric family as the parser gives it (for a counter, `name` lacks the `_total` its
/// samples have).
#[derive(Debug, Deserialize)]
struct Family {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    help: String,
    samples: Vec<Sample>,
}

/// Reads the text with `prometheus_client.parser.text_string_to_metric_families`.
const PARSER: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = [
    {"name": f.name, "type": f.type, "help": f.documentation,
     "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]}
    for f in text_string_to_metric_families(sys.stdin.read())
]
json.dump(families, sys.stdout)
"#;

fn parse(text: &str) -> Vec<Family> {
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "run /usr/bin/python3 (scripts/setup.sh installs it with python3-prometheus-client)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the text (is python3-prometheus-client installed? \
         scripts/setup.sh installs it): {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the parser's JSON")
}

struct Families(Vec<Family>);

impl Families {
    fn family(&self, name: &str) -> &Family {
        self.0
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no family {name}; families: {:?}", self.names()))
    }

    fn names(&self) -> Vec<&str> {
        self.0.iter().map(|f| f.name.as_str()).collect()
    }

    /// The samples named `sample` whose labels include `labels`.
    fn samples(&self, sample: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.0
            .iter()
            .flat_map(|f| &f.samples)
            .filter(|s| s.name == sample)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample named `sample` whose labels include `labels`.
    fn value(&self, sample: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.samples(sample, labels);
        assert_eq!(
            found.len(),
            1,
            "{sample} {labels:?}: {} samples match: {found:?}\nsamples of that name: {:?}",
            found.len(),
            self.samples(sample, &[])
        );
        found[0].value
    }
}

/// Checks what holds for any text iokerneld writes: every family is typed, documented and
/// named for the project, counters end in `_total`, and no series appears twice.
fn check_well_formed(families: &Families) {
    let mut series = BTreeSet::new();
    for f in &families.0 {
        assert!(f.name.starts_with("corral_"), "{}", f.name);
        assert!(!f.help.is_empty(), "{} has no HELP", f.name);
        assert!(!f.samples.is_empty(), "{} has no samples", f.name);
        match f.kind.as_str() {
            "counter" => {
                for s in &f.samples {
                    assert_eq!(s.name, format!("{}_total", f.name), "{f:?}");
                }
            }
            "gauge" => {
                for s in &f.samples {
                    assert_eq!(s.name, f.name, "{f:?}");
                }
            }
            // An untyped family is a sample the parser could not place under its TYPE.
            other => panic!("{} is of type {other}: {f:?}", f.name),
        }
        for s in &f.samples {
            assert!(
                series.insert(format!("{} {:?}", s.name, s.labels)),
                "{} {:?} appears twice",
                s.name,
                s.labels
            );
        }
    }
}

/// Asserts `before <= value <= after`.
fn between(what: &str, value: f64, before: f64, after: f64) {
    assert!(
        before <= value && value <= after,
        "{what} = {value}, not within [{before}, {after}]"
    );
}

#[test]
fn stats_in_the_prometheus_format_parse_and_match_the_json() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let _victim = Runtime::start(Options {
        net: Some(A),
        ..Options::new(&daemon.socket, VICTIM)
    })
    .expect("register the victim");
    let _spoofer = Runtime::start(Options {
        mode: Mode::Net(NetMode::Spoof),
        net: Some(B),
        peer: Some(A),
        count: 9,
        ..Options::new(&daemon.socket, SPOOFER)
    })
    .expect("register the spoofer");
    daemon.wait_for("the 9 spoofed frames to be dropped", |s| {
        s.net.drops["tx_spoofed"] == 9
    });

    let before = daemon.stats();
    let text = daemon.stats_command(&["--format", "prometheus"]);
    let after = daemon.stats();
    let families = Families(parse(&text));
    check_well_formed(&families);

    // The JSON is still the default, and `--format json` is the same thing.
    for args in [&[][..], &["--format", "json"][..]] {
        let json = daemon.stats_command(args);
        let stats: Stats = serde_json::from_str(&json).expect("JSON statistics");
        assert_eq!(stats.runtimes.len(), 2, "{json}");
    }

    for (name, kind) in [
        ("corral_iokerneld_info", "gauge"),
        ("corral_iokerneld_uptime_seconds", "gauge"),
        ("corral_allocation_passes", "counter"),
        ("corral_iokerneld_loop_iterations", "counter"),
        ("corral_iokerneld_loop_stall_seconds", "counter"),
        ("corral_registrations", "counter"),
        ("corral_runtimes", "gauge"),
        ("corral_runtime_info", "gauge"),
        ("corral_runtime_cores_held", "gauge"),
        ("corral_runtime_grants", "counter"),
        ("corral_runtime_tx_frames", "counter"),
        ("corral_runtime_dropped_frames", "counter"),
        ("corral_runtime_kicks", "counter"),
        ("corral_runtime_preemption_latency_max_seconds", "gauge"),
        ("corral_core_state", "gauge"),
        ("corral_core_grants", "counter"),
        ("corral_switch_dropped_frames", "counter"),
        ("corral_switch_rx_bytes", "counter"),
        ("corral_setting_interval_seconds", "gauge"),
    ] {
        assert_eq!(families.family(name).kind, kind, "{name}");
    }

    // Settings and levels that do not move, exactly; microseconds as seconds.
    assert_eq!(families.value("corral_setting_interval_seconds", &[]), 5e-6);
    assert_eq!(
        families.value("corral_setting_preemption_timeout_seconds", &[]),
        before.global.preemption_timeout_us as f64 / 1e6
    );
    assert_eq!(families.value("corral_managed_cores", &[]), 1.0);
    assert_eq!(families.value("corral_runtimes", &[]), 2.0);
    assert_eq!(families.value("corral_registrations_total", &[]), 2.0);
    let pid = before.global.pid.to_string();
    assert_eq!(
        families.value("corral_iokerneld_info", &[("pid", &pid), ("core", "0")]),
        1.0
    );

    // Counters that move lie between the two JSON snapshots.
    let g = (&before.global, &after.global);
    between(
        "corral_allocation_passes_total",
        families.value("corral_allocation_passes_total", &[]),
        g.0.passes as f64,
        g.1.passes as f64,
    );
    between(
        "corral_iokerneld_loop_iterations_total",
        families.value("corral_iokerneld_loop_iterations_total", &[]),
        g.0.loop_iterations as f64,
        g.1.loop_iterations as f64,
    );
    between(
        "corral_iokerneld_loop_stall_seconds_total",
        families.value("corral_iokerneld_loop_stall_seconds_total", &[]),
        g.0.loop_stall_ns as f64 / 1e9,
        g.1.loop_stall_ns as f64 / 1e9,
    );
    between(
        "corral_iokerneld_uptime_seconds",
        families.value("corral_iokerneld_uptime_seconds", &[]),
        g.0.uptime_s,
        g.1.uptime_s,
    );

    // Each runtime by its name, escaped on the way out and read back as it was registered.
    for r in &before.runtimes {
        let id = r.id.to_string();
        let labels = [("runtime", r.name.as_str()), ("runtime_id", id.as_str())];
        let info = families.samples("corral_runtime_info", &labels);
        assert_eq!(info.len(), 1, "{}: {info:?}", r.name);
        let net = r.net.as_ref().expect("both registered addresses");
        assert_eq!(info[0].labels["pid"], r.pid.to_string());
        assert_eq!(info[0].labels["mac"], net.mac);
        assert_eq!(info[0].labels["ipv4"], net.ipv4);
        assert_eq!(info[0].labels["preemption"], r.preemption);
        assert_eq!(families.value("corral_runtime_kthreads", &labels), 1.0);
        assert_eq!(families.value("corral_runtime_max_cores", &labels), 1.0);
        let later = after
            .runtimes
            .iter()
            .find(|a| a.id == r.id)
            .expect("still registered");
        between(
            "corral_runtime_grants_total",
            families.value("corral_runtime_grants_total", &labels),
            r.grants as f64,
            later.grants as f64,
        );
        // Every drop reason of the JSON is a `reason` of the one family.
        for (reason, &count) in r.packets.drops.iter().chain(&r.packets.rx_parse_drops) {
            let with_reason = [labels[0], labels[1], ("reason", reason.as_str())];
            let later_count = later
                .packets
                .drops
                .get(reason)
                .or_else(|| later.packets.rx_parse_drops.get(reason))
                .copied()
                .unwrap_or(0);
            between(
                &format!("{} dropped {reason}", r.name),
                families.value("corral_runtime_dropped_frames_total", &with_reason),
                count as f64,
                later_count as f64,
            );
        }
    }
    assert!(
        families
            .samples("corral_runtime_info", &[])
            .iter()
            .any(|s| s.labels["runtime"] == SPOOFER),
        "the spoofer's name does not read back"
    );
    // The spoofer's nine frames, per runtime and for the switch.
    assert_eq!(
        families.value(
            "corral_runtime_dropped_frames_total",
            &[("runtime", SPOOFER), ("reason", "tx_spoofed")]
        ),
        9.0
    );
    assert_eq!(
        families.value(
            "corral_runtime_dropped_frames_total",
            &[("runtime", VICTIM), ("reason", "tx_spoofed")]
        ),
        0.0
    );
    assert_eq!(
        families.value(
            "corral_switch_dropped_frames_total",
            &[("reason", "tx_spoofed")]
        ),
        9.0
    );
    let reasons: BTreeSet<&str> = families
        .samples("corral_switch_dropped_frames_total", &[])
        .iter()
        .map(|s| s.labels["reason"].as_str())
        .collect();
    let json_reasons: BTreeSet<&str> = before
        .net
        .drops
        .keys()
        .chain(before.net.rx_parse_drops.keys())
        .map(String::as_str)
        .collect();
    assert_eq!(reasons, json_reasons);

    // The managed core is in exactly one state.
    let states = families.samples("corral_core_state", &[("core", "1")]);
    assert_eq!(states.len(), 3, "{states:?}");
    assert_eq!(
        states.iter().map(|s| s.value).sum::<f64>(),
        1.0,
        "{states:?}"
    );
    drop(daemon);
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `curl ARGS URL` against the daemon's metrics port: the status, the content type and the
/// body.
fn curl(dir: &Path, port: u16, path: &str, args: &[&str]) -> (u16, String, String) {
    let body = dir.join("curl-body");
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "-o"])
        .arg(&body)
        .args(["-w", "%{http_code} %{content_type}"])
        .args(args)
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .expect("run curl (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "curl {path}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let written = String::from_utf8(out.stdout).unwrap();
    let (code, content_type) = written.split_once(' ').unwrap_or((&written, ""));
    (
        code.parse()
            .unwrap_or_else(|_| panic!("curl wrote {written:?}")),
        content_type.to_owned(),
        std::fs::read_to_string(&body).unwrap_or_default(),
    )
}

/// Sends `request` on a fresh connection and returns all that comes back before the server
/// closes it (empty if it closed without a word).
fn raw_exchange(port: u16, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics port");
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.set_write_timeout(Some(WAIT)).unwrap();
    // The server may answer and close before it has read everything.
    let _ = stream.write_all(request);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn scrape_ok(daemon: &Daemon, port: u16) -> Families {
    let (code, content_type, body) = curl(daemon.dir(), port, "/metrics", &[]);
    assert_eq!(code, 200, "{body}\nlog:\n{}", daemon.log());
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let families = Families(parse(&body));
    check_well_formed(&families);
    families
}

#[test]
fn metrics_are_served_over_http_and_bad_requests_do_no_harm() {
    let _serial = serial();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut daemon = Daemon::start(&["--metrics-listen", &listen]);
    let _runtime =
        Runtime::start(Options::new(&daemon.socket, SCRAPED)).expect("register a runtime");
    let id = daemon.stats().runtimes[0].id.to_string();

    let families = scrape_ok(&daemon, port);
    assert_eq!(
        families.value(
            "corral_runtime_info",
            &[("runtime", SCRAPED), ("runtime_id", &id)]
        ),
        1.0
    );
    assert_eq!(families.value("corral_runtimes", &[]), 1.0);
    assert_eq!(families.value("corral_registrations_total", &[]), 1.0);
    // A query string is the scraper's business.
    assert_eq!(curl(daemon.dir(), port, "/metrics?target=x", &[]).0, 200);

    // Other paths and methods.
    for path in ["/", "/metric", "/metrics/", "/stats"] {
        let (code, _, _) = curl(daemon.dir(), port, path, &[]);
        assert_eq!(code, 404, "{path}");
    }
    for method in ["POST", "PUT", "DELETE", "HEAD"] {
        let args: &[&str] = if method == "HEAD" {
            &["-I"]
        } else {
            &["-X", method]
        };
        let (code, _, _) = curl(daemon.dir(), port, "/metrics", args);
        assert_eq!(code, 405, "{method}");
    }
    let answer = raw_exchange(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
    assert!(answer.contains("\r\nAllow: GET\r\n"), "{answer}");

    // Garbage, an oversized head, a request cut short, a silent client: each gets an error or
    // a closed connection, and the daemon and its endpoint carry on.
    let answer = raw_exchange(port, b"\x00\xffgarbage\x01 in \x7f the line\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
    let answer = raw_exchange(port, b"GET /metrics HTTP/9.9\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer:?}");
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
    huge.resize(16 * 1024, b'a');
    let answer = raw_exchange(port, &huge);
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer:?}");
    let answer = raw_exchange(port, b"GET /metr");
    assert_eq!(answer, "", "a request cut short gets no answer");
    {
        // Connected and saying nothing: the next scrape waits for it to time out, no more.
        let _silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        scrape_ok(&daemon, port);
    }
    daemon.assert_alive();
    let families = scrape_ok(&daemon, port);
    assert_eq!(families.value("corral_runtimes", &[]), 1.0);
    assert_eq!(daemon.stats().runtimes.len(), 1);
    daemon.assert_alive();
}

/// `iokerneld --core 0 --managed-cores 1 --nic none --socket DIR/iokerneld.sock ARGS`, run to
/// its exit: its status code and standard error.
fn run_to_exit(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(IOKERNELD)
        .args([
            "--core",
            "0",
            "--managed-cores",
            "1",
            "--nic",
            "none",
            "--shield",
            "off",
        ])
        .arg("--socket")
        .arg(dir.join("iokerneld.sock"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("iokerneld {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

#[test]
fn the_metrics_address_comes_from_the_flag_or_the_file_and_a_bad_one_stops_iokerneld() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("iokerneld.toml");

    for (args, file, expected) in [
        (
            &["--metrics-listen", "not-an-address"][..],
            None,
            r#"invalid metrics_listen = "not-an-address": expected an IP address and port"#,
        ),
        (
            &["--metrics-listen", "localhost:9464"][..],
            None,
            r#"invalid metrics_listen = "localhost:9464""#,
        ),
        (
            &[][..],
            Some("metrics_listen = \"127.0.0.1:0\"\n"),
            r#"invalid metrics_listen = "127.0.0.1:0": port 0"#,
        ),
    ] {
        let mut all = args.to_vec();
        if let Some(text) = file {
            std::fs::write(&config, text).unwrap();
            all.extend(["--config", config.to_str().unwrap()]);
        }
        let (code, stderr) = run_to_exit(dir.path(), &all);
        assert_eq!(code, Some(2), "{all:?}: {stderr}");
        assert!(stderr.contains(expected), "{all:?}: {stderr}");
    }

    // An address someone else holds stops iokerneld before it opens its control socket.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (code, stderr) = run_to_exit(dir.path(), &["--metrics-listen", &address]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen for metrics on {address}: ")),
        "{stderr}"
    );
    assert!(!dir.path().join("iokerneld.sock").exists());
    drop(taken);

    // The config file's key serves as the flag does.
    let port = free_port();
    std::fs::write(&config, format!("metrics_listen = \"127.0.0.1:{port}\"\n")).unwrap();
    let daemon = Daemon::start(&["--config", config.to_str().unwrap()]);
    let families = scrape_ok(&daemon, port);
    assert_eq!(families.value("corral_runtimes", &[]), 0.0);
}
