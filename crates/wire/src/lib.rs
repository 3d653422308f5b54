//! Packet formats shared by iokerneld and the Corral runtime's network stack.
//!
//! Two sides, both allocation-free and usable without `std`:
//!
//! * **Parsing untrusted bytes.** Views such as [`EthernetFrame`], [`Ipv4Packet`],
//!   [`UdpDatagram`] and [`TcpSegment`] borrow the receive buffer and validate every length and
//!   checksum up front, so their accessors cannot fail and never index out of bounds. Every
//!   rejection is one [`DropReason`], whose variants double as drop-counter names.
//!   [`parse_frame`] runs the whole chain for the runtime; [`classify`] is iokerneld's cheaper
//!   steering pass (no transport checksums) that yields the [`FiveTuple`] to feed [`RssHasher`].
//! * **Building.** Header structs ([`EthernetHeader`], [`Ipv4Header`], [`UdpHeader`],
//!   [`TcpHeader`], [`IcmpEchoHeader`], [`ArpPacket`]) write into a caller's `&mut [u8]`. The
//!   transport builders expect the payload to be in place already and checksum it there, so the
//!   data is written into the packet buffer once; [`Ipv4FrameSpec`] wraps a whole frame.
//!
//! The formats are hand-written rather than taken from a general-purpose crate such as
//! `etherparse`. Its slices are zero-copy and allocation-free too, but slicing separates headers
//! without verifying checksums and passes fragments through as payload, and its errors are
//! per-layer types. Using it here would mean walking each header a second time to apply those
//! checks and translating every error into a [`DropReason`], on a path budgeted in nanoseconds.
//! What Corral needs (untagged Ethernet II, ARP, option-less IPv4 output, ICMP echo, UDP, TCP
//! with four options) is small enough that owning it costs less than adapting it, and keeps this
//! crate free of dependencies.
//!
//! The [`checksum`] module sums 16 bytes per loop iteration in native byte order and provides
//! RFC 1624 incremental updates; [`rss`] implements the Toeplitz hash NICs use for RSS.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod arp;
pub mod checksum;
mod error;
pub mod ethernet;
pub mod frame;
pub mod icmp;
pub mod ipv4;
pub mod rss;
pub mod tcp;
pub mod udp;

pub use arp::{ArpOp, ArpPacket};
pub use error::{BuildError, DropReason};
pub use ethernet::{EtherType, EthernetFrame, EthernetHeader, MacAddr, ParseMacAddrError};
pub use frame::{
    Classification, FiveTuple, FrameClass, Ipv4FrameSpec, Packet, ParsedFrame, classify,
    parse_frame,
};
pub use icmp::{EchoKind, IcmpEcho, IcmpEchoHeader};
pub use ipv4::{Ipv4Header, Ipv4Packet};
pub use rss::{RssHasher, RssKey};
pub use tcp::{SackList, TcpFlags, TcpHeader, TcpOption, TcpOptionSet, TcpSegment, Timestamps};
pub use udp::{UdpDatagram, UdpHeader};
