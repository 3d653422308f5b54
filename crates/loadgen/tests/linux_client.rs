//! End to end: the `corral-loadgen-linux` binary against a small UDP echo server on loopback.
//! Timing is not asserted (the machine is shared); what must hold exactly is the accounting.

use std::net::UdpSocket;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use corral_loadgen::Message;
use corral_loadgen::client::monotonic_ns;
use corral_loadgen::wire::ServerStamps;
use serde_json::Value;

/// What the echo server does with each request.
#[derive(Clone, Copy)]
enum Behaviour {
    Echo,
    /// Drops requests whose id is a multiple of 10.
    DropTenth,
    /// Answers requests whose id is a multiple of 7 twice, and sends one stray datagram.
    DuplicateSeventh,
    /// Holds each request for at least [`HELD_NS`], then works on it for at least
    /// [`WORKED_NS`], stamping both, and answers; the stamps of request 5 are damaged.
    Stamp,
}

const HELD_NS: u64 = 20_000;
const WORKED_NS: u64 = 30_000;

/// Spins until `CLOCK_MONOTONIC` reaches `until`; returns the time then.
fn spin_until(until: u64) -> u64 {
    loop {
        let now = monotonic_ns();
        if now >= until {
            return now;
        }
    }
}

struct EchoServer {
    port: u16,
    stop: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<Vec<u64>>>,
}

impl EchoServer {
    fn start(behaviour: Behaviour) -> EchoServer {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let port = sock.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            let mut ids = Vec::new();
            let mut buf = [0u8; 2048];
            let mut stamped = [0u8; 2048];
            let mut stray_sent = false;
            while !stop2.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let received_ns = monotonic_ns();
                let req = &buf[..n];
                let m = Message::decode(req).expect("client sends valid requests");
                ids.push(m.id);
                match behaviour {
                    Behaviour::Echo => {
                        sock.send_to(req, from).unwrap();
                    }
                    Behaviour::DropTenth => {
                        if !m.id.is_multiple_of(10) {
                            sock.send_to(req, from).unwrap();
                        }
                    }
                    Behaviour::DuplicateSeventh => {
                        sock.send_to(req, from).unwrap();
                        if m.id.is_multiple_of(7) {
                            sock.send_to(req, from).unwrap();
                        }
                        if !stray_sent {
                            sock.send_to(b"not a response", from).unwrap();
                            stray_sent = true;
                        }
                    }
                    Behaviour::Stamp => {
                        let start_ns = spin_until(received_ns + HELD_NS);
                        let end_ns = spin_until(start_ns + WORKED_NS);
                        let out = &mut stamped[..n];
                        out.copy_from_slice(req);
                        ServerStamps {
                            received_ns,
                            start_ns,
                            end_ns,
                        }
                        .write(out)
                        .unwrap();
                        if m.id == 5 {
                            out[50] ^= 1;
                        }
                        sock.send_to(out, from).unwrap();
                    }
                }
            }
            ids
        });
        EchoServer {
            port,
            stop,
            handle: Some(handle),
        }
    }

    /// Stops the server and returns the ids it saw, in order.
    fn finish(mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap()
    }
}

fn run_client(port: u16, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_corral-loadgen-linux"))
        .args([
            "--server",
            &format!("127.0.0.1:{port}"),
            "--rate",
            "2000",
            "--duration",
            "0.5",
            "--service",
            "exp:10us",
            "--clients",
            "8",
            "--flows",
            "4",
            "--seed",
            "3",
            "--payload",
            "100",
            "--grace-ms",
            "300",
            "--json",
        ])
        .arg(&json)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("offered"), "{stdout}");
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn u(v: &Value, key: &str) -> u64 {
    v["summary"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn every_request_is_answered_and_matched() {
    let server = EchoServer::start(Behaviour::Echo);
    let first_cpu = corral_affinity::allowed_cpus().unwrap()[0].to_string();
    let report = run_client(server.port, &["--cpu", &first_cpu]);
    let ids = server.finish();

    let sent = u(&report, "sent");
    // About 1000 requests at 2000/s for 0.5 s (Poisson, so not exactly).
    assert!((800..1200).contains(&sent), "{report}");
    assert_eq!(u(&report, "scheduled"), sent);
    assert_eq!(u(&report, "send_errors"), 0);
    assert_eq!(ids.len() as u64, sent);
    // Ids are consecutive from 1, sent in schedule order.
    assert!(ids.iter().copied().eq(1..=sent));
    assert_eq!(u(&report, "matched"), sent);
    assert_eq!(u(&report, "lost"), 0);
    assert_eq!(u(&report, "duplicates"), 0);
    assert_eq!(u(&report, "unknown"), 0);
    assert_eq!(u(&report, "malformed"), 0);
    assert_eq!(report["summary"]["latency"]["count"].as_u64(), Some(sent));
    assert_eq!(report["config"]["payload"].as_u64(), Some(100));
}

#[test]
fn dropped_requests_are_counted_as_lost() {
    let server = EchoServer::start(Behaviour::DropTenth);
    let report = run_client(server.port, &[]);
    let ids = server.finish();
    let sent = u(&report, "sent");
    let dropped = ids.iter().filter(|&&id| id.is_multiple_of(10)).count() as u64;
    assert_eq!(ids.len() as u64, sent);
    assert_eq!(u(&report, "lost"), dropped);
    assert_eq!(u(&report, "matched"), sent - dropped);
}

#[test]
fn duplicate_and_stray_responses_are_counted() {
    let server = EchoServer::start(Behaviour::DuplicateSeventh);
    let report = run_client(server.port, &["--arrivals", "constant"]);
    let ids = server.finish();
    let sent = u(&report, "sent");
    // A constant schedule: exactly rate * duration requests.
    assert_eq!(sent, 1000);
    let doubled = ids.iter().filter(|&&id| id.is_multiple_of(7)).count() as u64;
    assert_eq!(u(&report, "matched"), sent);
    assert_eq!(u(&report, "lost"), 0);
    assert_eq!(u(&report, "duplicates"), doubled);
    assert_eq!(u(&report, "malformed"), 1);
    assert_eq!(u(&report, "received"), sent + doubled + 1);
}

#[test]
fn the_tail_is_split_with_the_servers_stamps() {
    let server = EchoServer::start(Behaviour::Stamp);
    let report = run_client(server.port, &[]);
    server.finish();
    let sent = u(&report, "sent");
    assert_eq!(u(&report, "matched"), sent);
    let tail = &report["summary"]["tail"];
    // Every response but the one with damaged stamps is split; that one still counts as
    // matched.
    assert_eq!(tail["split"].as_u64(), Some(sent - 1), "{tail}");
    assert_eq!(tail["unsplit"].as_u64(), Some(1), "{tail}");
    for key in ["above_p99", "above_p999"] {
        let t = &tail[key];
        let requests = t["requests"]
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {tail}"));
        assert!(requests >= 1 && requests <= sent / 100 + 1, "{key}: {tail}");
        let gap = |name: &str| t["median"][name].as_u64().unwrap();
        // The server held and worked on every request at least this long; no gap is longer
        // than the slowest latency (within the histogram's 0.1%).
        assert!(gap("queue_ns") >= HELD_NS, "{key}: {tail}");
        assert!(gap("service_ns") >= WORKED_NS, "{key}: {tail}");
        assert!(
            t["threshold_ns"].as_u64().unwrap() >= HELD_NS + WORKED_NS,
            "{key}: {tail}"
        );
        let max = report["summary"]["latency"]["max_ns"].as_u64().unwrap();
        for name in [
            "send_late_ns",
            "deliver_ns",
            "queue_ns",
            "service_ns",
            "return_ns",
        ] {
            assert!(gap(name) <= max + max / 100, "{key} {name}: {tail}");
        }
    }
}

#[test]
fn bad_arguments_are_reported_not_panicked_on() {
    for args in [
        &["--rate", "0", "--duration", "1"][..],
        &["--rate", "100", "--duration", "1", "--payload", "8"],
        &["--rate", "100", "--duration=-1"],
        &["--rate", "100", "--duration", "1", "--service", "exp:10"],
        &["--rate", "100", "--duration", "1", "--cpu", "100000"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_corral-loadgen-linux"))
            .args(["--server", "127.0.0.1:9"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains("invalid"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
