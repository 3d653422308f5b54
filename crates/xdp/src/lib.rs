//! AF_XDP for iokerneld: the frames of the IPv4 addresses Corral runtimes own are taken from
//! the NIC's receive queues straight into user space, and everything else is left to Linux.
//!
//! A small XDP program ([`program`]) runs on every frame the interface receives. A frame
//! addressed to an IPv4 address in the address map ([`AddrMap`]), or an ARP packet about such
//! an address, is redirected to the AF_XDP socket of the receive queue it arrived on (the
//! [`XskMap`] entry at `rx_queue_index`); every other frame gets `XDP_PASS`, so the host's own
//! traffic is untouched. [`Port`] puts it all together on one interface: it loads the program,
//! attaches it through a BPF link ([`XdpLink`], detached by the kernel when the process ends,
//! however it ends), opens one [`XskSocket`] per receive queue, and keeps the address map in
//! step with [`Port::register`] and [`Port::unregister`]. Each socket owns a UMEM and its four
//! rings ([`ring`]), and moves frames in bursts: [`XskSocket::recv_burst`] (which can also send
//! a received frame back out in place), [`XskSocket::send_burst`] (or
//! [`XskSocket::enqueue`] frame by frame, then one [`XskSocket::flush`]), [`XskSocket::reap`],
//! counting the system calls it makes ([`Counters`]).
//!
//! ```no_run
//! use corral_xdp::{Port, PortConfig, Verdict};
//!
//! let mut port = Port::open("eth1", &PortConfig::default())?;
//! println!("{}", port.describe()); // "... native copy, 4 queue(s) ..."
//! port.register("10.0.0.5".parse().unwrap())?;
//! loop {
//!     for socket in port.sockets_mut() {
//!         socket.recv_burst(32, |frame| {
//!             // ... look at the frame ...
//!             Verdict::Release
//!         });
//!         socket.reap();
//!     }
//! }
//! # Ok::<(), corral_xdp::Error>(())
//! ```
//!
//! # Why no libbpf, libxdp or aya
//!
//! Everything here is system calls: `bpf(2)` through libc's `syscall()` (the `sys` module, seven
//! commands), and the AF_XDP socket options, `mmap`, `bind`, `sendto`, `recvfrom` and `poll`
//! through rustix (which the workspace already uses). The program is 45 instruction slots, written
//! with a small assembler ([`insn`]) and checked in unit tests by an interpreter of that
//! subset, so no BPF C compiler, object file, BTF or ELF loader is involved. libbpf and libxdp
//! (and the crates binding them, such as `libbpf-sys` or `xsk-rs`) are C libraries that a
//! default build would have to find installed or compile, with their headers; aya would bring
//! an ELF loader and a separate BPF toolchain for the program. With this crate the default
//! build needs nothing but crates.io, and every kernel interaction is in a few hundred lines
//! that can be read against the kernel's UAPI headers.
//!
//! # Modes
//!
//! [`AttachMode::Auto`] attaches the program in native (driver) mode and falls back to
//! generic mode only when the driver has no native XDP. Sockets are bound asking for neither
//! copy nor zero-copy ([`ZeroCopy::Auto`]), which makes the kernel try zero-copy and fall back
//! to copy; [`Port::mode`] reports what was obtained ([`Mode`]). veth, for instance, runs the
//! program natively but has no zero-copy AF_XDP: native copy.
//!
//! # Privileges
//!
//! Root, or `CAP_BPF`, `CAP_NET_ADMIN` and (for the UMEM, which the kernel pins and otherwise
//! counts against `RLIMIT_MEMLOCK`) `CAP_IPC_LOCK`.
//!
//! Under `--cfg loom` only [`ring`] is built, on loom's atomics, for `tests/loom.rs`.

#![warn(missing_docs)]

pub mod ring;

#[cfg(not(loom))]
mod attach;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod iface;
#[cfg(not(loom))]
pub mod insn;
#[cfg(not(loom))]
mod maps;
#[cfg(not(loom))]
mod port;
#[cfg(not(loom))]
pub mod program;
#[cfg(not(loom))]
mod socket;
#[cfg(not(loom))]
mod sys;
#[cfg(not(loom))]
pub mod testnet;
#[cfg(not(loom))]
mod unicast;

#[cfg(not(loom))]
pub use attach::{AttachMode, Attached, PROGRAM_NAME, Program, XdpLink};
#[cfg(not(loom))]
pub use error::Error;
#[cfg(not(loom))]
pub use iface::{Interface, parse_mac};
#[cfg(not(loom))]
pub use maps::{AddrMap, XskMap};
#[cfg(not(loom))]
pub use port::{Mode, Port, PortConfig};
#[cfg(not(loom))]
pub use socket::{
    Counters, KernelStats, MAX_BURST, RX_HEADROOM, SocketConfig, Verdict, XskSocket, ZeroCopy,
};
#[cfg(not(loom))]
pub use unicast::UnicastFilter;
