//! An interface steered by the program: the maps, the program, its link and one socket per
//! receive queue, set up in the order that keeps the host's traffic flowing throughout.

use std::fmt;
use std::net::Ipv4Addr;

use crate::attach::{AttachMode, Attached, Program, XdpLink};
use crate::error::Error;
use crate::iface::Interface;
use crate::maps::{AddrMap, XskMap};
use crate::socket::{Counters, SocketConfig, XskSocket, ZeroCopy};

/// How a [`Port`] is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// Where the program runs.
    pub attach: AttachMode,
    /// Each socket's sizes and modes.
    pub socket: SocketConfig,
    /// Sockets on queues `0..n`: `None` for every receive queue the interface has.
    pub queues: Option<u32>,
    /// Room in the address map.
    pub max_addresses: u32,
}

impl Default for PortConfig {
    fn default() -> PortConfig {
        PortConfig {
            attach: AttachMode::Auto,
            socket: SocketConfig::default(),
            queues: None,
            max_addresses: 1024,
        }
    }
}

/// What the kernel gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The program in the driver, the sockets sharing frames with it.
    NativeZeroCopy,
    /// The program in the driver, frames copied into the sockets' UMEMs.
    NativeCopy,
    /// The program after the driver, frames copied.
    Generic,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::NativeZeroCopy => "native zero-copy",
            Mode::NativeCopy => "native copy",
            Mode::Generic => "generic",
        })
    }
}

/// An interface whose frames for registered IPv4 addresses (and ARP about them) go to this
/// process's AF_XDP sockets, one per receive queue, while everything else goes on to Linux.
///
/// Dropping it (or the process ending, however it ends) detaches the program.
pub struct Port {
    // Dropped first: the program is detached before its sockets and maps go.
    link: XdpLink,
    sockets: Vec<XskSocket>,
    addresses: AddrMap,
    xsk_map: XskMap,
    _program: Program,
    iface: Interface,
    mode: Mode,
}

impl Port {
    /// Attaches to `interface` and opens its sockets. The address map starts empty: nothing
    /// is steered until [`Port::register`].
    pub fn open(interface: &str, config: &PortConfig) -> Result<Port, Error> {
        config.socket.validate()?;
        let iface = Interface::by_name(interface)?;
        let available = iface.rx_queues()?;
        let queues = config.queues.unwrap_or(available);
        if queues == 0 || queues > available {
            return Err(Error::Config(format!(
                "{queues} queues asked of {interface}, which has {available} receive queues"
            )));
        }
        let addresses = AddrMap::new(config.max_addresses)?;
        let xsk_map = XskMap::new(queues)?;
        let program = Program::load(&addresses, &xsk_map)?;
        // Attach before opening sockets: it fails fast when another program is there, and
        // with both maps empty the program passes every frame meanwhile.
        let link = XdpLink::attach(&program, &iface, config.attach)?;
        let force_copy = link.mode() == Attached::Generic;
        let sockets = (0..queues)
            .map(|q| XskSocket::open(&iface, q, &config.socket, force_copy))
            .collect::<Result<Vec<_>, _>>()?;
        for s in &sockets {
            xsk_map.set(s.queue(), s.fd())?;
        }
        let mode = match link.mode() {
            Attached::Generic => Mode::Generic,
            Attached::Native if sockets.iter().all(|s| s.zero_copy()) => Mode::NativeZeroCopy,
            Attached::Native => Mode::NativeCopy,
        };
        if config.socket.zero_copy == ZeroCopy::Require && mode != Mode::NativeZeroCopy {
            return Err(Error::Unsupported {
                what: format!("zero-copy on {interface}: the program runs in {mode} mode"),
                source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            });
        }
        Ok(Port {
            link,
            sockets,
            addresses,
            xsk_map,
            _program: program,
            iface,
            mode,
        })
    }

    /// Steers `ip`'s frames to the sockets.
    pub fn register(&self, ip: Ipv4Addr) -> Result<(), Error> {
        self.addresses.insert(ip)
    }

    /// Lets `ip`'s frames go to Linux again; whether it was registered.
    pub fn unregister(&self, ip: Ipv4Addr) -> Result<bool, Error> {
        self.addresses.remove(ip)
    }

    /// Whether `ip` is registered.
    pub fn is_registered(&self, ip: Ipv4Addr) -> Result<bool, Error> {
        self.addresses.contains(ip)
    }

    /// What the kernel gave.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The interface.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }

    /// The sockets, by queue.
    pub fn sockets(&self) -> &[XskSocket] {
        &self.sockets
    }

    /// The sockets, by queue, to receive and send on.
    pub fn sockets_mut(&mut self) -> &mut [XskSocket] {
        &mut self.sockets
    }

    /// Stops steering queue `queue`'s frames to its socket (they go to Linux), and hands the
    /// socket over, e.g. to close it.
    pub fn take_socket(&mut self, queue: u32) -> Result<Option<XskSocket>, Error> {
        let Some(at) = self.sockets.iter().position(|s| s.queue() == queue) else {
            return Ok(None);
        };
        self.xsk_map.clear(queue)?;
        Ok(Some(self.sockets.remove(at)))
    }

    /// Every socket's counters, summed.
    pub fn counters(&self) -> Counters {
        let mut sum = Counters::default();
        for s in &self.sockets {
            sum += s.counters();
        }
        sum
    }

    /// The link's id and the program's id, as `bpftool` and `ip link` show them.
    pub fn ids(&self) -> (u32, u32) {
        (self.link.id(), self.link.prog_id())
    }

    /// One line for a log: interface, mode, queues, ids.
    pub fn describe(&self) -> String {
        let (link, prog) = self.ids();
        format!(
            "AF_XDP on {} (ifindex {}): {}, {} queue(s), XDP link {link}, program {prog}",
            self.iface.name(),
            self.iface.index(),
            self.mode,
            self.sockets.len()
        )
    }
}
