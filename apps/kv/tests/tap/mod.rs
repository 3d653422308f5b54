//! corral-kv on Corral's runtime behind its own iokerneld and TAP device, reached from Linux.
//!
//! Each test starts an iokerneld (on CPU 0, managing CPU 1) with a TAP device and a subnet of
//! its own, then `corral-kv --runtime corral` at `subnet.2` registered with it; Linux reaches
//! the server through the TAP's host side, `subnet.1`. Tests hold [`serial`] because they all
//! hand out CPU 1. Both processes are killed, and the directory removed, on drop.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub use corral_testserver::serial;
use corral_testserver::{Behind, TapSubnet};

pub const KV: &str = env!("CARGO_BIN_EXE_corral-kv");

/// iokerneld, found next to corral-kv.
pub fn iokerneld_binary() -> PathBuf {
    corral_testserver::sibling_binary(KV, "iokerneld", "corral-iokerneld")
}

/// A Corral KV server behind its own iokerneld and TAP device.
pub struct TapKv {
    behind: Behind,
    pub ip: Ipv4Addr,
    pub port: u16,
    pub udp_port: u16,
    pub tap: String,
}

impl TapKv {
    /// Starts iokerneld and corral-kv for test number `test` (unique within this binary), with
    /// `extra` flags for corral-kv; returns once the server accepts a TCP connection from Linux.
    pub fn start(test: u8, extra: &[&str]) -> TapKv {
        let link = TapSubnet::for_test("ckv", 140, test);
        let nic = link.nic_args();
        TapKv::launch(test, &link.tap, &nic, (link.server, 24), extra, |addr| {
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
        let mut behind = Behind::start(iokerneld_binary(), &format!("kv-tap-{pid}-{test}"), nic);
        let (port, udp_port) = (11211, 11211);
        let mut kv = Command::new(KV);
        kv.args(["--runtime", "corral", "-l", &ip.to_string()])
            .args(["--prefix", &prefix.to_string()])
            .args(["-p", &port.to_string(), "-U", &udp_port.to_string()])
            .args(extra);
        behind.start_server("corral-kv", kv);
        let addr = SocketAddr::V4(SocketAddrV4::new(ip, port));
        behind.wait_for(
            &format!("corral-kv to accept a connection over {link}"),
            || reaches(addr),
        );
        TapKv {
            behind,
            ip,
            port,
            udp_port,
            tap: link.to_owned(),
        }
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
        corral_testserver::rss_bytes(self.behind.server_pid())
    }

    /// What iokerneld and corral-kv have logged, for failure messages.
    pub fn logs(&self) -> String {
        self.behind.logs()
    }

    /// Fails the test if either process has exited.
    pub fn assert_alive(&mut self) {
        self.behind.assert_alive();
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
