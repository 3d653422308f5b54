//! corral-dns on Corral's runtime behind its own iokerneld and TAP device, reached from Linux.
//!
//! Each test starts an iokerneld (on CPU 0, managing CPU 1) with a TAP device and a subnet of
//! its own, then `corral-dns --runtime corral` at `subnet.2`, port 53, registered with it;
//! Linux reaches the server through the TAP's host side, `subnet.1`. Tests hold [`serial`]
//! because they all hand out CPU 1. Both processes are killed, and the directory removed, on
//! drop.
//!
//! Other test binaries create TAP devices too, possibly at the same time (two checkouts on one
//! machine), and two devices holding one host address confuse the kernel's routes, so these
//! draw their subnets `10.X.test.0/24` from a second-octet range of their own, 150-159 (varied
//! by the pid), beside iokerneld's tests (120-139, 160-239) and corral-kv's (140-149); the TAP
//! devices are named `cdns<pid>t<test>`.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use corral_testserver::serial;
use corral_testserver::{Behind, TapSubnet};

use crate::common::{ZONES, zones_dir};

pub const DNS: &str = env!("CARGO_BIN_EXE_corral-dns");

/// The server's port: on its own stack nothing else holds 53.
pub const PORT: u16 = 53;

/// iokerneld, found next to corral-dns.
pub fn iokerneld_binary() -> PathBuf {
    corral_testserver::sibling_binary(DNS, "iokerneld", "corral-iokerneld")
}

/// A Corral DNS server behind its own iokerneld and TAP device.
pub struct TapDns {
    behind: Behind,
    pub ip: Ipv4Addr,
    pub tap: String,
}

impl TapDns {
    /// Starts iokerneld and corral-dns (the test zones, counters every second) for test number
    /// `test` (unique within this binary), with `extra` flags for corral-dns; returns once the
    /// server accepts a TCP connection from Linux.
    pub fn start(test: u8, extra: &[&str]) -> TapDns {
        let link = TapSubnet::for_test("cdns", 150, test);
        let mut behind = Behind::start(
            iokerneld_binary(),
            &format!("dns-tap-{}-{test}", std::process::id()),
            &link.nic_args(),
        );
        let (ip, tap) = (link.server, link.tap);
        let mut dns = Command::new(DNS);
        dns.current_dir(zones_dir())
            .args(["--runtime", "corral", "-l", &ip.to_string()])
            .args(["-p", &PORT.to_string(), "--stats-every", "1"])
            .args(ZONES.iter().map(|(o, f)| format!("{o}={f}")))
            .args(extra);
        behind.start_server("corral-dns", dns);
        let addr = SocketAddr::V4(SocketAddrV4::new(ip, PORT));
        behind.wait_for(
            "corral-dns to accept a connection over the TAP device",
            || TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok(),
        );
        TapDns { behind, ip, tap }
    }

    pub fn addr(&self) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, PORT)
    }

    /// The TAP device's host side, which Linux sends from.
    pub fn host(&self) -> Ipv4Addr {
        let o = self.ip.octets();
        Ipv4Addr::new(o[0], o[1], o[2], 1)
    }

    /// iokerneld's statistics, as `iokerneld stats` prints them.
    pub fn iokerneld_stats(&self) -> serde_json::Value {
        let out = self
            .behind
            .stats_command()
            .output()
            .expect("run iokerneld stats");
        assert!(
            out.status.success(),
            "iokerneld stats failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        serde_json::from_slice(&out.stdout).expect("iokerneld's statistics are JSON")
    }

    /// Frames iokerneld dropped on their way to corral-dns, every reason together, and the
    /// reasons.
    pub fn iokerneld_drops(&self) -> (u64, serde_json::Value) {
        let stats = self.iokerneld_stats();
        let runtime = stats["runtimes"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == "corral-dns"))
            .cloned()
            .unwrap_or_else(|| panic!("corral-dns is not registered: {stats:#}"));
        let drops = runtime["packets"]["drops"].clone();
        let total = drops
            .as_object()
            .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        (total, drops)
    }

    /// Leaves Linux nothing of its own to send into the TAP device: a permanent neighbour
    /// entry for the server (no ARP probes) and no IPv6 on the device (no neighbour discovery
    /// or multicast reports). A test that compares the device's drops with the datagrams it
    /// sent needs every frame there to be one of them.
    pub fn quiet_host_side(&self) {
        let o = self.ip.octets();
        let mac = format!("02:43:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3]);
        let ip = self.ip.to_string();
        let neigh = [
            "neigh",
            "replace",
            &ip,
            "lladdr",
            &mac,
            "dev",
            &self.tap,
            "nud",
            "permanent",
        ];
        let sysctl = format!("net.ipv6.conf.{}.disable_ipv6=1", self.tap);
        for (program, args) in [("ip", &neigh[..]), ("sysctl", &["-q", "-w", &sysctl][..])] {
            let status = Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .status()
                .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
            assert!(status.success(), "{program} {args:?} failed");
        }
    }

    /// A counter of the TAP device, as Linux keeps it.
    pub fn tap_counter(&self, name: &str) -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{}/statistics/{name}", self.tap))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Packets the TAP device's queueing discipline dropped (Linux counts them there, not in
    /// the device's own counters).
    pub fn qdisc_dropped(&self) -> u64 {
        let out = Command::new("tc")
            .args(["-s", "qdisc", "show", "dev", &self.tap])
            .output()
            .expect("run tc (iproute2)");
        let text = String::from_utf8_lossy(&out.stdout);
        // "Sent N bytes M pkt (dropped D, overlimits ...": every qdisc of the device.
        text.split("dropped ")
            .skip(1)
            .filter_map(|rest| rest.split([',', ' ']).next()?.parse::<u64>().ok())
            .sum()
    }

    /// corral-dns's latest counters line (`--stats-every 1`), as `name=value` pairs.
    pub fn counters(&self) -> Counters {
        let log =
            std::fs::read_to_string(self.behind.dir.join("corral-dns.log")).unwrap_or_default();
        let line = log
            .lines()
            .rev()
            .find(|l| l.starts_with("corral-dns: udp_queries="))
            .unwrap_or_default();
        Counters(
            line.trim_start_matches("corral-dns: ")
                .split_whitespace()
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect(),
        )
    }

    /// The counters once they have stopped moving: two lines a second apart that agree (so
    /// the server is done with what reached it, and the line is newer than the call).
    pub fn settled_counters(&mut self) -> Counters {
        let mut last = self.counters();
        let start = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(1100));
            self.assert_alive();
            let now = self.counters();
            if now == last && !now.0.is_empty() {
                return now;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "corral-dns's counters still move after 60 s\n{}",
                self.logs()
            );
            last = now;
        }
    }

    /// corral-dns's resident memory.
    pub fn rss_bytes(&self) -> usize {
        corral_testserver::rss_bytes(self.behind.server_pid())
    }

    /// What iokerneld and corral-dns have logged (the last of it), for failure messages.
    pub fn logs(&self) -> String {
        self.behind.logs()
    }

    /// Fails the test if either process has exited.
    pub fn assert_alive(&mut self) {
        self.behind.assert_alive();
    }
}

/// corral-dns's counters by name (its own and its runtime's stack's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters(pub Vec<(String, u64)>);

impl Counters {
    /// The counter `name`, 0 if the line does not have it (the stack's drop reasons appear
    /// only once nonzero).
    pub fn get(&self, name: &str) -> u64 {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or(0, |(_, v)| *v)
    }
}
