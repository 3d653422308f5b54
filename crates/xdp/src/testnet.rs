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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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

/// A flood of UDP frames out of one interface (of the calling thread's namespace): a raw
/// `AF_PACKET` socket past the queueing discipline, [`UdpFlood::BATCH`] prebuilt frames a
/// `sendmmsg`, from `flows` source ports so that a multi-queue receiver spreads them. A
/// cheaper sender per frame than a UDP socket, so that what it feeds, not it, sets the rate.
pub struct UdpFlood {
    socket: OwnedFd,
    frames: Vec<Vec<u8>>,
}

impl UdpFlood {
    /// Frames per [`UdpFlood::send_batch`].
    pub const BATCH: usize = 64;

    /// `len`-byte frames (at least 42) as `spec` describes them, to UDP port `dst_port` from
    /// ports `first_port..first_port + flows`.
    pub fn new(
        interface: &str,
        spec: &corral_wire::frame::Ipv4FrameSpec,
        len: usize,
        first_port: u16,
        flows: u16,
        dst_port: u16,
    ) -> io::Result<UdpFlood> {
        let offset = corral_wire::frame::UDP_PAYLOAD_OFFSET;
        if len < offset || flows == 0 {
            return Err(io::Error::other(format!(
                "frames of {len} bytes from {flows} flows: at least {offset} bytes and one flow"
            )));
        }
        let payload = vec![0x5a; len - offset];
        let frames = (0..Self::BATCH)
            .map(|i| {
                let mut buf = vec![0u8; len];
                let ports = corral_wire::UdpHeader {
                    src_port: first_port + (i as u16 % flows),
                    dst_port,
                };
                spec.build_udp(&mut buf, ports, &payload)
                    .map_err(|e| io::Error::other(format!("building a frame: {e:?}")))?;
                Ok(buf)
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(UdpFlood {
            socket: packet_socket(interface)?,
            frames,
        })
    }

    /// Sends the batch once (one `sendmmsg`); how many frames went.
    pub fn send_batch(&mut self) -> usize {
        let mut iovs: [libc::iovec; Self::BATCH] = std::array::from_fn(|i| libc::iovec {
            iov_base: self.frames[i].as_mut_ptr().cast(),
            iov_len: self.frames[i].len(),
        });
        let mut msgs: [libc::mmsghdr; Self::BATCH] = std::array::from_fn(|i| {
            // SAFETY: an all-zero mmsghdr is valid (null name and control, no flags).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &raw mut iovs[i];
            m.msg_hdr.msg_iovlen = 1;
            m
        });
        // SAFETY: `msgs` holds BATCH headers whose iovecs point into `self.frames`, all alive
        // and unmoved for the call; the socket is open.
        let n = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                Self::BATCH as libc::c_uint,
                0,
            )
        };
        n.max(0) as usize
    }
}

/// A raw `AF_PACKET` socket that sends on `interface`, past the queueing discipline, and
/// receives nothing (protocol 0).
fn packet_socket(interface: &str) -> io::Result<OwnedFd> {
    // SAFETY: socket() with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on an open socket with a pointer to a live int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            (&raw const one).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let ifindex = crate::Interface::by_name(interface)
        .map_err(io::Error::from)?
        .index();
    // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    // SAFETY: bind with a pointer to a live sockaddr_ll and its size.
    let rc = unsafe {
        libc::bind(
            fd,
            (&raw const addr).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(socket)
}
