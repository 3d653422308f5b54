//! The `tap` backend: a Linux TAP device. Its host side is an ordinary interface with an
//! address, so any program on the machine (or in another namespace routed through it) is a
//! real peer of the runtimes.
//!
//! A TAP file descriptor hands over one frame per `read` and takes one per `write`: that system
//! call per frame (about a microsecond) is what bounds this backend's packet rate, not the
//! switch. An empty poll costs a system call too, so the loop polls an idle device only every
//! [`IDLE_POLL_NS`].

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

use super::{FRAME_CAPACITY, FrameBatch, Nic, NicCounters};

/// Least time between polls of an idle device. Frames that arrive meanwhile wait at most this
/// long; reading in between would spend most of the loop in failed `read`s.
pub const IDLE_POLL_NS: u64 = 2_000;

/// MTU given to the host side: frames are at most 1514 bytes, which every runtime buffer holds.
const MTU: i32 = 1500;

/// Frames the device queues for iokerneld to read (its `txqueuelen`; Linux gives a TAP device
/// 500). This queue is the NIC's receive ring of this backend: while the loop is off its CPU it
/// must hold a burst, and 1,000 clients sending at once overflowed 500 when the loop lost its
/// CPU for a few milliseconds (one frame a syscall, about 5 us each from a Linux sender).
pub const QUEUE_FRAMES: i32 = 4096;

/// An open TAP device. It was created non-persistent (unless it already existed), so closing
/// the descriptor removes it.
pub struct Tap {
    fd: OwnedFd,
    name: String,
    host_ip: Ipv4Addr,
    prefix: u8,
    host_mac: [u8; 6],
    counters: NicCounters,
}

impl Tap {
    /// Creates the device `name` (or attaches to an existing TAP device of that name), makes it
    /// nonblocking, gives its host side `host_ip/prefix`, MTU 1500 and a queue of
    /// [`QUEUE_FRAMES`], and brings it up.
    pub fn open(name: &str, host_ip: Ipv4Addr, prefix: u8) -> io::Result<Tap> {
        let context = |what: &str, e: io::Error| {
            io::Error::new(e.kind(), format!("TAP device {name:?}: {what}: {e}"))
        };
        let fd = rustix::fs::open(
            "/dev/net/tun",
            OFlags::RDWR | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| context("cannot open /dev/net/tun", e.into()))?;
        let mut req = ifreq(name)?;
        req.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF reads (and may write back the name into) one ifreq, which `req` is,
        // valid for the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF, &mut req) } < 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::EBUSY) => "it is in use by another process (another iokerneld?)",
                Some(libc::EINVAL) => "an interface of that name exists and is not a TAP device",
                Some(libc::EPERM) => "creating it needs CAP_NET_ADMIN",
                _ => "TUNSETIFF failed",
            };
            return Err(context(why, e));
        }

        let ctl = rustix::net::socket(
            rustix::net::AddressFamily::INET,
            rustix::net::SocketType::DGRAM,
            None,
        )
        .map_err(|e| context("cannot open a configuration socket", e.into()))?;
        let set = |request: libc::c_ulong, fill: &dyn Fn(&mut libc::ifreq), what: &str| {
            let mut req = ifreq(name)?;
            fill(&mut req);
            // SAFETY: every SIOCSIF*/SIOCGIF* request used here reads or writes one ifreq,
            // which `req` is, valid for the call.
            if unsafe { libc::ioctl(ctl.as_raw_fd(), request as _, &mut req) } < 0 {
                return Err(context(what, io::Error::last_os_error()));
            }
            Ok(req)
        };
        set(
            libc::SIOCSIFADDR,
            &|r| r.ifr_ifru.ifru_addr = sockaddr_in(host_ip),
            "cannot set the host address",
        )?;
        let mask = Ipv4Addr::from(u32::MAX << (32 - u32::from(prefix)));
        set(
            libc::SIOCSIFNETMASK,
            &|r| r.ifr_ifru.ifru_netmask = sockaddr_in(mask),
            "cannot set the netmask",
        )?;
        set(
            libc::SIOCSIFMTU,
            &|r| r.ifr_ifru.ifru_mtu = MTU,
            "cannot set the MTU",
        )?;
        set(
            libc::SIOCSIFTXQLEN,
            // `ifr_qlen` in C: the union's int member, which libc names after another use.
            &|r| r.ifr_ifru.ifru_ifindex = QUEUE_FRAMES,
            "cannot set its queue length",
        )?;
        let current = set(libc::SIOCGIFFLAGS, &|_| {}, "cannot read the flags")?;
        // SAFETY: SIOCGIFFLAGS filled in the flags member of the union.
        let flags = unsafe { current.ifr_ifru.ifru_flags };
        set(
            libc::SIOCSIFFLAGS,
            &|r| r.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short,
            "cannot bring it up",
        )?;
        let hw = set(libc::SIOCGIFHWADDR, &|_| {}, "cannot read its MAC address")?;
        // SAFETY: SIOCGIFHWADDR filled in the hardware address member of the union.
        let data = unsafe { hw.ifr_ifru.ifru_hwaddr.sa_data };
        let host_mac = std::array::from_fn(|i| data[i] as u8);
        Ok(Tap {
            fd,
            name: name.to_owned(),
            host_ip,
            prefix,
            host_mac,
            counters: NicCounters::default(),
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// An ifreq naming `name`, everything else zero.
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data (arrays, integers, a union of such, a raw pointer) for
    // which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a valid interface name"),
        ));
    }
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

fn sockaddr_in(addr: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(addr.octets()),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16 bytes of plain data; the kernel reads the
    // family to know which it is.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

impl Nic for Tap {
    fn name(&self) -> &'static str {
        "tap"
    }

    fn describe(&self) -> String {
        let m = self.host_mac;
        format!(
            "TAP device {} (host side {}/{}, MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}, MTU {MTU})",
            self.name, self.host_ip, self.prefix, m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }

    fn recv_burst(&mut self, out: &mut FrameBatch) -> usize {
        let mut got = 0;
        while let Some(buf) = out.next_buffer() {
            self.counters.rx_syscalls += 1;
            match rustix::io::read(self.fd.as_fd(), buf) {
                Ok(0) => break,
                Ok(n) => {
                    out.commit(n.min(FRAME_CAPACITY));
                    self.counters.rx_frames += 1;
                    self.counters.rx_bytes += n as u64;
                    got += 1;
                }
                Err(rustix::io::Errno::AGAIN) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => {
                    self.counters.rx_errors += 1;
                    break;
                }
            }
        }
        got
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        match rustix::io::write(self.fd.as_fd(), frame) {
            Ok(_) => {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += frame.len() as u64;
                Ok(())
            }
            Err(e) => {
                self.counters.tx_errors += 1;
                Err(e.into())
            }
        }
    }

    fn counters(&self) -> NicCounters {
        // What Linux could not queue for us: its side of the device transmits to us.
        let path = format!("/sys/class/net/{}/statistics/tx_dropped", self.name);
        let rx_device_drops = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        NicCounters {
            rx_device_drops,
            ..self.counters
        }
    }

    fn idle_poll_interval_ns(&self) -> u64 {
        IDLE_POLL_NS
    }
}
