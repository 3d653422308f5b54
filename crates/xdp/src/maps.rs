//! The program's two maps: the registered addresses, and the sockets by receive queue.

use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::error::Error;
use crate::sys::{self, MapTypes};

/// The IPv4 addresses whose frames go to the AF_XDP sockets: a BPF hash map from the address
/// (4 bytes, wire order, as the frame holds it) to a 32-bit value the program ignores (kept
/// for a future use, such as a per-address queue; 1 today).
pub struct AddrMap {
    fd: OwnedFd,
    capacity: u32,
}

// SAFETY: created with 4-byte keys and 4-byte values (AddrMap::new).
unsafe impl MapTypes for AddrMap {
    type K = [u8; 4];
    type V = u32;
    fn map_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AddrMap {
    /// An empty map with room for `capacity` addresses.
    pub fn new(capacity: u32) -> Result<AddrMap, Error> {
        if capacity == 0 {
            return Err(Error::Config(
                "the address map needs room for one address".into(),
            ));
        }
        let fd = sys::map_create(sys::MAP_TYPE_HASH, 4, 4, capacity, "corral_addrs")
            .map_err(|e| bpf_error("creating the address map (BPF_MAP_CREATE, hash)", e))?;
        Ok(AddrMap { fd, capacity })
    }

    /// How many addresses fit.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Adds `ip` (no change if present).
    pub fn insert(&self, ip: Ipv4Addr) -> Result<(), Error> {
        sys::map_update(self, &ip.octets(), &1, sys::UPDATE_ANY).map_err(|e| {
            if e.raw_os_error() == Some(libc::E2BIG) {
                Error::Config(format!(
                    "cannot register {ip}: the address map is full ({} addresses)",
                    self.capacity
                ))
            } else {
                Error::os(format!("registering {ip} (BPF_MAP_UPDATE_ELEM)"), e)
            }
        })
    }

    /// Removes `ip`; whether it was there.
    pub fn remove(&self, ip: Ipv4Addr) -> Result<bool, Error> {
        sys::map_delete(self, &ip.octets())
            .map_err(|e| Error::os(format!("unregistering {ip} (BPF_MAP_DELETE_ELEM)"), e))
    }

    /// Whether `ip` is there.
    pub fn contains(&self, ip: Ipv4Addr) -> Result<bool, Error> {
        sys::map_lookup(self, &ip.octets())
            .map(|v| v.is_some())
            .map_err(|e| Error::os(format!("looking up {ip} (BPF_MAP_LOOKUP_ELEM)"), e))
    }

    /// The map's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The AF_XDP socket for each receive queue: a `BPF_MAP_TYPE_XSKMAP` from the queue number to
/// the socket (given by descriptor; user space cannot read entries back).
pub struct XskMap {
    fd: OwnedFd,
    queues: u32,
}

// SAFETY: created with 4-byte keys and 4-byte values (XskMap::new).
unsafe impl MapTypes for XskMap {
    type K = u32;
    type V = u32;
    fn map_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl XskMap {
    /// A map for queues `0..queues`.
    pub fn new(queues: u32) -> Result<XskMap, Error> {
        if queues == 0 {
            return Err(Error::Config("the socket map needs one queue".into()));
        }
        let fd =
            sys::map_create(sys::MAP_TYPE_XSKMAP, 4, 4, queues, "corral_xsks").map_err(|e| {
                bpf_error(
                    "creating the socket map (BPF_MAP_CREATE, XSKMAP, Linux 4.18)",
                    e,
                )
            })?;
        Ok(XskMap { fd, queues })
    }

    /// Frames of queue `queue` go to `socket` (a bound AF_XDP socket).
    pub fn set(&self, queue: u32, socket: BorrowedFd<'_>) -> Result<(), Error> {
        let fd = socket.as_raw_fd() as u32;
        sys::map_update(self, &queue, &fd, sys::UPDATE_ANY).map_err(|e| {
            Error::os(
                format!(
                    "adding queue {queue}'s socket to the socket map (of {})",
                    self.queues
                ),
                e,
            )
        })
    }

    /// Frames of queue `queue` go to Linux again; whether it had a socket.
    pub fn clear(&self, queue: u32) -> Result<bool, Error> {
        sys::map_delete(self, &queue).map_err(|e| {
            Error::os(
                format!("removing queue {queue}'s socket from the socket map"),
                e,
            )
        })
    }

    /// The map's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A failed bpf() call that set-up needs: permission and missing-feature errors said as such.
pub(crate) fn bpf_error(doing: &str, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => Error::os(
            format!("{doing}: needs root (CAP_BPF and CAP_NET_ADMIN)"),
            e,
        ),
        Some(libc::ENOSYS) => Error::Unsupported {
            what: format!("{doing}: this kernel has no bpf() system call (CONFIG_BPF_SYSCALL)"),
            source: e,
        },
        Some(libc::EINVAL) => Error::Unsupported {
            what: format!("{doing}: the kernel does not know this request"),
            source: e,
        },
        _ => Error::os(doing, e),
    }
}
