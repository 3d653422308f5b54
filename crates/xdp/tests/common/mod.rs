//! A veth pair with one end in a fresh network namespace (the client host) and the other in
//! the root namespace (where the XDP program goes), removed on drop, even when a test panics.
//!
//! Names and the /29 subnet come from the process id and a counter, so that tests running at
//! once, in this process or in another, never share an interface, a namespace or an address.

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use corral_wire::MacAddr;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs a command; panics with its output if it fails.
pub fn run(cmd: &[&str]) -> String {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a command, ignoring how it ends.
fn run_quietly(cmd: &[&str]) {
    let _ = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The pair. `host` is the root namespace's end, `peer` the namespace's.
pub struct Net {
    pub ns: String,
    pub host: String,
    pub peer: String,
    /// The root end's own address, Linux's.
    pub host_ip: Ipv4Addr,
    /// The namespace end's address.
    pub peer_ip: Ipv4Addr,
    /// Addresses of the subnet that no interface has, to register.
    pub spare: [Ipv4Addr; 4],
    pub host_mac: MacAddr,
    pub peer_mac: MacAddr,
}

impl Net {
    /// A pair with `queues` receive and transmit queues on each end.
    pub fn new(queues: u32) -> Net {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(n < 16, "at most 16 pairs per process");
        let ns = format!("cxns{pid}_{n}");
        let host = format!("cx{pid}_{n}h");
        let peer = format!("cx{pid}_{n}p");
        // A /29 of 10.64.0.0/12 for this pid (mod 8192) and counter.
        let index = ((pid & 0x1fff) << 4) | n;
        let base = u32::from(Ipv4Addr::new(10, 64, 0, 0)) + index * 8;
        let ip = |i: u32| Ipv4Addr::from(base + i);
        // Leftovers of an earlier process with the same pid.
        run_quietly(&["ip", "link", "del", &host]);
        run_quietly(&["ip", "netns", "del", &ns]);
        run(&["ip", "netns", "add", &ns]);
        let mut net = Net {
            ns,
            host,
            peer,
            host_ip: ip(1),
            peer_ip: ip(2),
            spare: [ip(3), ip(4), ip(5), ip(6)],
            host_mac: MacAddr::ZERO,
            peer_mac: MacAddr::ZERO,
        };
        let q = queues.to_string();
        run(&[
            "ip",
            "link",
            "add",
            &net.host,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &net.peer,
            "netns",
            &net.ns,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ]);
        let host_cidr = format!("{}/29", net.host_ip);
        let peer_cidr = format!("{}/29", net.peer_ip);
        run(&["ip", "addr", "add", &host_cidr, "dev", &net.host]);
        run(&["ip", "link", "set", &net.host, "up"]);
        net.ip_ns(&["addr", "add", &peer_cidr, "dev", &net.peer]);
        net.ip_ns(&["link", "set", &net.peer, "up"]);
        net.ip_ns(&["link", "set", "lo", "up"]);
        net.host_mac = mac_of(&run(&["ip", "-br", "link", "show", "dev", &net.host]));
        net.peer_mac = mac_of(&net.ip_ns(&["-br", "link", "show", "dev", &net.peer]));
        net
    }

    /// `ip -n NS args...`
    pub fn ip_ns(&self, args: &[&str]) -> String {
        let mut cmd = vec!["ip", "-n", &self.ns];
        cmd.extend_from_slice(args);
        run(&cmd)
    }

    /// Makes the namespace send to `ip` at the root end's MAC without asking by ARP.
    pub fn static_neighbor(&self, ip: Ipv4Addr) {
        let ip = ip.to_string();
        let mac = self.host_mac.to_string();
        self.ip_ns(&[
            "neigh",
            "replace",
            &ip,
            "lladdr",
            &mac,
            "dev",
            &self.peer,
            "nud",
            "permanent",
        ]);
    }

    /// Forgets what the namespace learned by ARP.
    pub fn flush_neighbors(&self) {
        self.ip_ns(&["neigh", "flush", "dev", &self.peer]);
    }

    /// Runs `f` on a thread inside the namespace; returns what it returns.
    pub fn inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| s.spawn(|| self.enter_then(f)).join().unwrap())
    }

    /// Starts `f` on a thread inside the namespace.
    pub fn spawn_inside<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = format!("/var/run/netns/{}", self.ns);
        std::thread::spawn(move || {
            enter(&path);
            f()
        })
    }

    fn enter_then<T>(&self, f: impl FnOnce() -> T) -> T {
        enter(&format!("/var/run/netns/{}", self.ns));
        f()
    }

    /// Whether `ip -d link show` shows an XDP program on the root end.
    pub fn xdp_attached(&self) -> bool {
        run(&["ip", "-d", "link", "show", "dev", &self.host]).contains("prog/xdp")
    }

    /// From inside the namespace: whether a TCP connection to `to` opens within `timeout`.
    pub fn connects(&self, to: SocketAddr, timeout: Duration) -> bool {
        self.inside(|| TcpStream::connect_timeout(&to, timeout).is_ok())
    }
}

/// Moves the calling thread into the namespace at `path`.
fn enter(path: &str) {
    let file = std::fs::File::open(path).expect("open the namespace");
    // SAFETY: moves only this thread into the namespace; the descriptor is valid.
    let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
}

/// The MAC in `ip -br link` output.
fn mac_of(line: &str) -> MacAddr {
    let field = line
        .split_whitespace()
        .nth(2)
        .expect("a MAC in ip -br output");
    field.parse().expect("a MAC")
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting one end deletes both.
        run_quietly(&["ip", "link", "del", &self.host]);
        run_quietly(&["ip", "netns", "del", &self.ns]);
    }
}

/// A child process killed (SIGKILL) and reaped on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` every millisecond until it holds or `timeout` passes; how long it took.
pub fn within(timeout: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if f() {
            return Some(start.elapsed());
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
