//! For tests and benchmarks: a veth pair with one end in a fresh network namespace (standing
//! in for another host) and the other in the caller's namespace (where the XDP program goes),
//! made with `ip` and removed on drop, so also when a test panics.
//!
//! Names and the /29 subnet come from the process id and a counter, so that pairs made at
//! once, in this process or in another, never share an interface, a namespace or an address:
//! `cx<pid>_<n>h` here, `cx<pid>_<n>p` in the namespace `cxns<pid>_<n>`, addresses in
//! 10.64.0.0/12.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::iface::parse_mac;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs a command; its standard output, or an error with its standard error.
pub fn run(cmd: &[&str]) -> io::Result<String> {
    let out = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
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

/// The pair. Both ends are up, with addresses in a /29.
pub struct VethPair {
    /// The namespace.
    pub namespace: String,
    /// This namespace's end.
    pub host: String,
    /// The namespace's end.
    pub peer: String,
    /// The host end's address (Linux's).
    pub host_ip: Ipv4Addr,
    /// The peer end's address.
    pub peer_ip: Ipv4Addr,
    /// Addresses of the subnet that no interface has.
    pub spare: [Ipv4Addr; 4],
    /// The host end's MAC.
    pub host_mac: [u8; 6],
    /// The peer end's MAC.
    pub peer_mac: [u8; 6],
}

impl VethPair {
    /// A pair with `queues` receive and transmit queues on each end (at most 16 pairs a
    /// process).
    pub fn create(queues: u32) -> io::Result<VethPair> {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        if n >= 16 {
            return Err(io::Error::other("at most 16 veth pairs per process"));
        }
        let namespace = format!("cxns{pid}_{n}");
        let host = format!("cx{pid}_{n}h");
        let peer = format!("cx{pid}_{n}p");
        // A /29 of 10.64.0.0/12 for this pid (mod 8192) and counter.
        let index = ((pid & 0x1fff) << 4) | n;
        let base = u32::from(Ipv4Addr::new(10, 64, 0, 0)) + index * 8;
        let ip = |i: u32| Ipv4Addr::from(base + i);
        // Leftovers of an earlier process with the same pid.
        run_quietly(&["ip", "link", "del", &host]);
        run_quietly(&["ip", "netns", "del", &namespace]);
        run(&["ip", "netns", "add", &namespace])?;
        // From here on, dropping the value cleans up whatever was made.
        let mut pair = VethPair {
            namespace,
            host,
            peer,
            host_ip: ip(1),
            peer_ip: ip(2),
            spare: [ip(3), ip(4), ip(5), ip(6)],
            host_mac: [0; 6],
            peer_mac: [0; 6],
        };
        let q = queues.to_string();
        run(&[
            "ip",
            "link",
            "add",
            &pair.host,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &pair.peer,
            "netns",
            &pair.namespace,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ])?;
        let host_cidr = format!("{}/29", pair.host_ip);
        let peer_cidr = format!("{}/29", pair.peer_ip);
        run(&["ip", "addr", "add", &host_cidr, "dev", &pair.host])?;
        run(&["ip", "link", "set", &pair.host, "up"])?;
        pair.ip_netns(&["addr", "add", &peer_cidr, "dev", &pair.peer])?;
        pair.ip_netns(&["link", "set", &pair.peer, "up"])?;
        pair.ip_netns(&["link", "set", "lo", "up"])?;
        pair.host_mac = mac_in(&run(&["ip", "-br", "link", "show", "dev", &pair.host])?)?;
        pair.peer_mac = mac_in(&pair.ip_netns(&["-br", "link", "show", "dev", &pair.peer])?)?;
        Ok(pair)
    }

    /// `ip -n NAMESPACE args...`
    pub fn ip_netns(&self, args: &[&str]) -> io::Result<String> {
        let mut cmd = vec!["ip", "-n", &self.namespace];
        cmd.extend_from_slice(args);
        run(&cmd)
    }

    /// Makes the namespace send to `ip` at the host end's MAC without asking by ARP.
    pub fn static_neighbor(&self, ip: Ipv4Addr) -> io::Result<()> {
        let ip = ip.to_string();
        let m = self.host_mac;
        let mac = format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        );
        self.ip_netns(&[
            "neigh",
            "replace",
            &ip,
            "lladdr",
            &mac,
            "dev",
            &self.peer,
            "nud",
            "permanent",
        ])
        .map(drop)
    }

    /// Turns off the peer end's transmit checksum offload (`ethtool -K PEER tx off`), so that
    /// Linux in the namespace fills in every checksum, as frames from a wire always have it.
    /// With the offload on, veth hands over TCP and UDP frames whose checksum holds only the
    /// pseudo-header's sum, which an AF_XDP reader sees as it is and must refuse.
    pub fn full_checksums(&self) -> io::Result<()> {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.namespace,
            "ethtool",
            "-K",
            &self.peer,
            "tx",
            "off",
        ])
        .map(drop)
    }

    /// Forgets what the namespace learned by ARP.
    pub fn flush_neighbors(&self) -> io::Result<()> {
        self.ip_netns(&["neigh", "flush", "dev", &self.peer])
            .map(drop)
    }

    /// Moves the calling thread into the namespace.
    pub fn enter(&self) -> io::Result<()> {
        enter(&self.namespace)
    }

    /// Runs `f` on a thread inside the namespace; returns what it returns.
    pub fn inside<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                self.enter().expect("enter the namespace");
                f()
            })
            .join()
            .expect("the thread in the namespace panicked")
        })
    }

    /// Starts `f` on a thread inside the namespace.
    pub fn spawn_inside<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let namespace = self.namespace.clone();
        std::thread::spawn(move || {
            enter(&namespace).expect("enter the namespace");
            f()
        })
    }

    /// What `ip -d link show` says of the host end.
    pub fn host_details(&self) -> io::Result<String> {
        run(&["ip", "-d", "link", "show", "dev", &self.host])
    }

    /// Whether the host end has an XDP program, as `ip -d link show` tells.
    pub fn xdp_attached(&self) -> bool {
        self.host_details()
            .map(|text| text.contains("prog/xdp"))
            .unwrap_or(false)
    }

    /// Frames the peer end has received (its `rx_packets`, from `/proc/thread-self/net/dev`
    /// read by a thread inside the namespace).
    pub fn peer_rx_packets(&self) -> io::Result<u64> {
        let text = self.inside(|| std::fs::read_to_string("/proc/thread-self/net/dev"))?;
        let prefix = format!("{}:", self.peer);
        text.lines()
            .find_map(|line| {
                let rest = line.trim_start().strip_prefix(&prefix)?;
                // Receive bytes, then packets.
                rest.split_whitespace().nth(1)?.parse().ok()
            })
            .ok_or_else(|| io::Error::other(format!("no {} in /proc/net/dev", self.peer)))
    }
}

/// Moves the calling thread into the namespace `name`.
fn enter(name: &str) -> io::Result<()> {
    let file = std::fs::File::open(format!("/var/run/netns/{name}"))?;
    // SAFETY: setns on a valid descriptor moves only the calling thread.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The MAC in one line of `ip -br link` output.
fn mac_in(line: &str) -> io::Result<[u8; 6]> {
    line.split_whitespace()
        .nth(2)
        .and_then(parse_mac)
        .ok_or_else(|| io::Error::other(format!("no MAC in {line:?}")))
}

impl Drop for VethPair {
    fn drop(&mut self) {
        // Deleting one end deletes both.
        run_quietly(&["ip", "link", "del", &self.host]);
        run_quietly(&["ip", "netns", "del", &self.namespace]);
    }
}
