//! End to end: `corral-loadgen-linux --protocol memcache-tcp|memcache-udp` against the real
//! memcached, started here on a free port. Timing is not asserted (the machine is shared); what
//! must hold exactly is that every request got a reply and every reply was right.

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

const MEMCACHED: &str = "/usr/bin/memcached";

/// memcached on a port that was free a moment ago, killed when dropped.
struct Memcached {
    child: Child,
    port: u16,
}

impl Memcached {
    fn start() -> Memcached {
        // A port free for both TCP and UDP.
        let port = loop {
            let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = tcp.local_addr().unwrap().port();
            if UdpSocket::bind(("127.0.0.1", port)).is_ok() {
                break port;
            }
        };
        let child = Command::new(MEMCACHED)
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                &port.to_string(),
            ])
            .args(["-t", "2", "-m", "64", "-u", "root"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("memcached 1.6.18 is installed at /usr/bin/memcached");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "memcached did not start"
            );
            thread::sleep(Duration::from_millis(20));
        }
        Memcached { child, port }
    }
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(protocol: &str, port: u16, extra: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_corral-loadgen-linux"))
        .args(["--protocol", protocol, "--server"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--rate", "5000", "--duration", "0.5", "--grace-ms", "2000"])
        .args(["--json"])
        .arg(&json)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    read(&json)
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn n(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} in {v}"))
}

/// Every request sent got a reply, every reply was right, and the counts add up.
fn assert_all_checked(v: &Value, keys: u64) {
    assert_eq!(n(v, "/checks/preloaded"), keys, "{v}");
    let sent = n(v, "/summary/sent");
    assert!(sent > 0, "{v}");
    assert_eq!(n(v, "/summary/scheduled"), sent, "{v}");
    assert_eq!(n(v, "/summary/matched"), sent, "{v}");
    assert_eq!(n(v, "/summary/lost"), 0, "{v}");
    assert_eq!(n(v, "/summary/malformed"), 0, "{v}");
    assert_eq!(n(v, "/summary/unknown"), 0, "{v}");
    for e in [
        "wrong_value",
        "wrong_reply",
        "client_errors",
        "server_errors",
        "unparsable",
        "connection_failures",
    ] {
        assert_eq!(n(v, &format!("/checks/{e}")), 0, "{e}: {v}");
    }
    let (gets, sets) = (n(v, "/checks/gets"), n(v, "/checks/sets"));
    assert_eq!(gets + sets, sent, "{v}");
    assert_eq!(n(v, "/checks/stored"), sets, "{v}");
    // Every key was preloaded and the memory is ample: every get hits.
    assert_eq!(n(v, "/checks/hits"), gets, "{v}");
    assert_eq!(n(v, "/checks/misses"), 0, "{v}");
    assert!(gets > 0 && sets > 0, "{v}");
}

#[test]
fn tcp_against_memcached_every_reply_checked() {
    let mc = Memcached::start();
    let v = run(
        "memcache-tcp",
        mc.port,
        &[
            "--keys",
            "3000",
            "--key-size",
            "fb_key",
            "--value-size",
            "fb_value",
            "--max-value",
            "100000",
            "--get-fraction",
            "0.7",
            "--popularity",
            "zipf:0.99",
            "--connections",
            "6",
            "--threads",
            "2",
        ],
    );
    assert_all_checked(&v, 3000);
    assert_eq!(v["protocol"], "memcache-tcp");
    // A second run against the same server, with another seed, is just as clean: values of
    // the first run's keys are overwritten by the preload.
    let v = run(
        "memcache-tcp",
        mc.port,
        &["--keys", "3000", "--seed", "9", "--connections", "3"],
    );
    assert_all_checked(&v, 3000);
}

#[test]
fn udp_against_memcached_every_reply_checked() {
    let mc = Memcached::start();
    // Values up to 3000 bytes: replies of up to three datagrams to reassemble.
    let v = run(
        "memcache-udp",
        mc.port,
        &[
            "--keys",
            "500",
            "--value-size",
            "uniform:1:3000",
            "--get-fraction",
            "0.8",
            "--connections",
            "2",
        ],
    );
    assert_all_checked(&v, 500);
    assert_eq!(v["protocol"], "memcache-udp");
}

#[test]
fn a_server_that_is_not_memcached_is_an_error_not_a_latency_sample() {
    // An echo server: it sends the requests back, which are no memcached replies.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = std::io::copy(&mut r, &mut s);
            });
        }
    });
    let out = Command::new(env!("CARGO_BIN_EXE_corral-loadgen-linux"))
        .args(["--protocol", "memcache-tcp", "--server"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--rate", "1000", "--duration", "0.1", "--keys", "10"])
        .output()
        .unwrap();
    // The preload's sets come back as `set ...` lines: the run refuses to start.
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("preload"), "{err}");

    // Without a preload the run goes on and counts every reply as unparsable.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_corral-loadgen-linux"))
        .args(["--protocol", "memcache-tcp", "--server"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["--rate", "1000", "--duration", "0.1", "--keys", "10"])
        .args(["--no-preload", "--connections", "2", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read(&json);
    assert_eq!(n(&v, "/summary/matched"), 0, "{v}");
    assert_eq!(n(&v, "/summary/latency/count"), 0, "{v}");
    assert!(n(&v, "/checks/unparsable") >= 1, "{v}");
}
