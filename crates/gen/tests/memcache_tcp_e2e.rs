//! A `memcache-tcp` run end to end: a real iokerneld (`--nic gen`, CPU 0, managing CPU 1), a
//! Corral runtime in this process serving memcached's text protocol (`corral_memcache`
//! sessions on the runtime's `TcpStream`s) under it, and `iokerneld gen --protocol
//! memcache-tcp` played against it: the generator's TCP connections go through iokerneld's
//! switch to the runtime's TCP stack, and every reply is checked.
//!
//! It needs the `iokerneld` binary built with the same profile (`cargo build -p
//! corral-iokerneld`, or `cargo test --workspace`). Nothing here asserts timing: the grace
//! period is long, and every wait is bounded only so that a broken build fails instead of
//! hanging.

use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::net::{NetConfig, TcpListener};
use corral::{Config, IokernelSettings, Runtime};
use corral_gen::run::{GenResult, Protocol};
use corral_memcache::{Limits, Session, Status, Store, StoreConfig};

const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const PORT: u16 = 11211;

/// `iokerneld`, next to this test's binary's directory (where cargo puts the binaries of the
/// workspace's packages).
fn iokerneld() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/PROFILE/deps")
        .join("iokerneld");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p corral-iokerneld` and the same profile",
        path.display()
    );
    path
}

/// An iokerneld with the gen backend, killed on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
    socket: PathBuf,
}

impl Daemon {
    fn start() -> Daemon {
        let dir = std::env::temp_dir().join(format!("corral-gen-memcache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("iokerneld.sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(iokerneld())
            .args(["--core", "0", "--managed-cores", "1", "--shield", "off"])
            .args(["--log-level", "warn", "--nic", "gen"])
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .spawn()
            .expect("start iokerneld");
        let deadline = Instant::now() + Duration::from_secs(10);
        while corral_iokernel::control::connect(&socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "iokerneld did not open its socket"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Daemon { child, dir, socket }
    }
}

impl Drop for Daemon {
    /// SIGTERM first, so that iokerneld exits as it would in service (it runs unshielded here:
    /// a shield left by a test killed mid-run would hold every later program off CPU 0).
    fn drop(&mut self) {
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let asked = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && asked.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A memcached server on a runtime under `daemon`: one uthread per connection.
fn memcached(daemon: &Daemon) -> Runtime {
    let rt = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(&daemon.socket, "memcached"))
            .net(NetConfig::new(SERVER_IP, 24)),
    )
    .expect("start a networked runtime under iokerneld");
    let store = Arc::new(Store::new(StoreConfig::new(64 << 20, 1 << 20, 0)));
    rt.block_on(move || {
        let listener = TcpListener::bind((SERVER_IP, PORT)).expect("bind");
        corral::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut stream) = conn else { continue };
                let store = store.clone();
                corral::spawn(move || {
                    let mut session = Session::new(Limits::default());
                    let mut buf = vec![0u8; 16 * 1024];
                    let mut out = Vec::new();
                    loop {
                        let n = match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        session.feed(&buf[..n]);
                        loop {
                            let status = session.run(&store, 0, &mut out);
                            if stream.write_all(&out).is_err() {
                                return;
                            }
                            out.clear();
                            match status {
                                Status::OutputFull => continue,
                                Status::NeedInput => break,
                                Status::Close => return,
                            }
                        }
                    }
                });
            }
        });
    });
    rt
}

#[test]
fn a_memcache_tcp_run_through_iokerneld_checks_every_reply() {
    let daemon = Daemon::start();
    let rt = memcached(&daemon);
    let out = Command::new(iokerneld())
        .arg("gen")
        .arg("--socket")
        .arg(&daemon.socket)
        .args(["--target", "10.99.0.2:11211", "--protocol", "memcache-tcp"])
        .args([
            "--rate",
            "4000",
            "--duration",
            "0.5",
            "--arrivals",
            "constant",
        ])
        .args([
            "--clients",
            "32",
            "--keys",
            "500",
            "--value-size",
            "uniform:10:3000",
        ])
        .args(["--get-fraction", "0.7", "--grace-ms", "3000"])
        .stdin(Stdio::null())
        .output()
        .expect("run iokerneld gen");
    assert!(
        out.status.success(),
        "iokerneld gen failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: GenResult = serde_json::from_slice(&out.stdout).expect("results parse");
    assert_eq!(result.spec.protocol, Protocol::MemcacheTcp);
    let s = &result.summary;
    assert_eq!(
        (s.scheduled, s.sent, s.send_errors),
        (2_000, 2_000, 0),
        "{s:?}"
    );
    assert_eq!(
        (s.matched, s.lost, s.late, s.malformed),
        (2_000, 0, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.latency.count, 2_000);
    let kv = result.kv.expect("a memcache-tcp run reports its checks");
    assert_eq!((kv.checks.errors(), kv.errors), (0, 0), "{}", kv.checks);
    assert_eq!(kv.checks.correct(), 2_000, "{}", kv.checks);
    // Every key was set before the schedule started: every get hits.
    assert_eq!(kv.checks.preloaded, 500, "{}", kv.checks);
    assert_eq!(
        (kv.checks.hits, kv.checks.misses),
        (kv.checks.gets, 0),
        "{}",
        kv.checks
    );
    assert!(kv.checks.hits > 0 && kv.checks.stored > 0, "{}", kv.checks);
    let c = kv.connections;
    assert_eq!((c.connects, c.established), (32, 32), "{c:?}");
    assert_eq!(
        (c.resets, c.lost_requests, c.refused_requests),
        (0, 0, 0),
        "{c:?}"
    );
    assert_eq!(result.gen_cost.requests, 2_000);
    drop(rt);
}
