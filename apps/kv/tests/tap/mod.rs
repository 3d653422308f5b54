//! corral-kv on Corral's runtime behind its own iokerneld and TAP device, reached from Linux.
//!
//! Each test starts an iokerneld (on CPU 0, managing CPU 1) with a TAP device and a subnet of
//! its own, then `corral-kv --runtime corral` at `subnet.2` registered with it; Linux reaches
//! the server through the TAP's host side, `subnet.1`. Tests hold [`serial`] because they all
//! hand out CPU 1. Both processes are killed, and the directory removed, on drop.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long iokerneld or the server may take to come up.
const START: Duration = Duration::from_secs(20);

pub const KV: &str = env!("CARGO_BIN_EXE_corral-kv");

/// iokerneld, found next to corral-kv: a binary of another package has no `CARGO_BIN_EXE_`.
pub fn iokerneld_binary() -> PathBuf {
    let path = Path::new(KV).with_file_name("iokerneld");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p corral-iokerneld` and the same profile",
        path.display()
    );
    path
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds CPU 1 for the calling test, even after another test failed while holding it.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A Corral KV server behind its own iokerneld and TAP device.
pub struct TapKv {
    iokerneld: Child,
    /// Started once iokerneld listens.
    kv: Option<Child>,
    dir: PathBuf,
    pub ip: Ipv4Addr,
    pub port: u16,
    pub udp_port: u16,
    pub tap: String,
}

impl TapKv {
    /// Starts iokerneld and corral-kv for test number `test` (unique within this binary), with
    /// `extra` flags for corral-kv; returns once the server accepts a TCP connection from Linux.
    pub fn start(test: u8, extra: &[&str]) -> TapKv {
        let pid = std::process::id();
        let tap = format!("ckv{}t{test}", pid % 10_000);
        let subnet = [10, 140 + (pid % 10) as u8, test];
        let host = format!("{}.{}.{}.1/24", subnet[0], subnet[1], subnet[2]);
        let ip = Ipv4Addr::new(subnet[0], subnet[1], subnet[2], 2);
        let nic = ["--nic", "tap", "--tap-name", &tap, "--host-ip", &host];
        TapKv::launch(test, &tap, &nic, (ip, 24), extra, |addr| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok()
        })
    }

    /// As [`TapKv::start`], but iokerneld takes the root end of `pair` with its AF_XDP backend
    /// and corral-kv gets the pair's first spare address; Linux reaches it from the pair's
    /// namespace (and only from there).
    pub fn start_xdp(test: u8, pair: &corral_xdp::testnet::VethPair, extra: &[&str]) -> TapKv {
        let nic = ["--nic", "xdp", "--interface", &pair.host];
        TapKv::launch(test, &pair.host, &nic, (pair.spare[0], 29), extra, |addr| {
            pair.inside(|| TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok())
        })
    }

    /// Starts iokerneld with `nic` flags, then corral-kv at `ip/prefix`, and waits until
    /// `reaches` connects to it.
    fn launch(
        test: u8,
        link: &str,
        nic: &[&str],
        (ip, prefix): (Ipv4Addr, u8),
        extra: &[&str],
        mut reaches: impl FnMut(SocketAddr) -> bool,
    ) -> TapKv {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("corral-kv-tap-{pid}-{test}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        let socket = dir.join("iokerneld.sock");
        let iokerneld = Command::new(iokerneld_binary())
            .args(["--core", "0", "--managed-cores", "1", "--log-level", "warn"])
            // Never the machine-wide shield a root iokerneld takes by default: tests run beside
            // others, and a test killed mid-run would leave it in place.
            .args(["--shield", "off"])
            .args(nic)
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&dir, "iokerneld.log"))
            .spawn()
            .expect("start iokerneld");
        let (port, udp_port) = (11211, 11211);
        let mut me = TapKv {
            iokerneld,
            kv: None,
            dir,
            ip,
            port,
            udp_port,
            tap: link.to_owned(),
        };
        // The control socket is a SOCK_SEQPACKET one: ask it for statistics as an operator would.
        me.wait_for("iokerneld's control socket", || {
            Command::new(iokerneld_binary())
                .arg("stats")
                .arg("--socket")
                .arg(&socket)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        let kv = Command::new(KV)
            .args(["--runtime", "corral", "-l", &ip.to_string()])
            .args(["--prefix", &prefix.to_string()])
            .args(["-p", &port.to_string(), "-U", &udp_port.to_string()])
            .arg("--iokerneld")
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log_file(&me.dir, "corral-kv.out"))
            .stderr(log_file(&me.dir, "corral-kv.log"))
            .spawn()
            .expect("start corral-kv");
        me.kv = Some(kv);
        let addr = SocketAddr::V4(SocketAddrV4::new(ip, port));
        me.wait_for(
            &format!("corral-kv to accept a connection over {link}"),
            || reaches(addr),
        );
        me
    }

    /// `ip:port` of the TCP server, as memcached clients take it.
    pub fn server(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect((self.ip, self.port)).expect("connect over the TAP device");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// corral-kv's resident memory.
    pub fn rss_bytes(&self) -> usize {
        let kv = self.kv.as_ref().expect("corral-kv runs once started");
        crate::common::rss_bytes(kv.id())
    }

    /// What iokerneld and corral-kv have logged, for failure messages.
    pub fn logs(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!(
            "iokerneld.log:\n{}\ncorral-kv.log:\n{}",
            read("iokerneld.log"),
            read("corral-kv.log")
        )
    }

    /// Fails the test if either process has exited.
    pub fn assert_alive(&mut self) {
        let exited = [
            ("iokerneld", Some(&mut self.iokerneld)),
            ("corral-kv", self.kv.as_mut()),
        ]
        .into_iter()
        .find_map(|(what, child)| {
            let status = child?.try_wait().expect("check on a child")?;
            Some((what, status))
        });
        if let Some((what, status)) = exited {
            panic!("{what} exited with {status}\n{}", self.logs());
        }
    }

    fn wait_for(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            self.assert_alive();
            assert!(
                start.elapsed() < START,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl crate::common::KvServer for TapKv {
    fn connect(&self) -> TcpStream {
        TapKv::connect(self)
    }

    fn rss_bytes(&self) -> usize {
        TapKv::rss_bytes(self)
    }

    fn label(&self) -> String {
        format!("corral-kv at {} over {}", self.server(), self.tap)
    }
}

impl Drop for TapKv {
    fn drop(&mut self) {
        for child in [self.kv.as_mut(), Some(&mut self.iokerneld)]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::File::create(dir.join(name)).expect("create a log file")
}
