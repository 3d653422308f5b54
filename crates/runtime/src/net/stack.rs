//! Protocol processing: Ethernet, ARP, IPv4, ICMP echo and UDP demultiplexing.
//!
//! [`NetStack`] knows nothing about rings or kthreads. Frames come in as byte slices
//! ([`NetStack::receive`]); frames go out through a [`Link`], which hands the stack a buffer to
//! build each frame in. That keeps every protocol decision testable on frames in memory, and
//! lets the runtime plug in iokerneld's packet area (or no device at all, standalone).
//!
//! Locking: the ARP table and the socket table each sit behind a spinlock held only for
//! lookups and updates, never while a frame is transmitted, because [`NetStack::receive`] runs
//! in the scheduler (preemption disabled, on whichever kthread took the packet) and must never
//! wait for a uthread.

use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use corral_tcp::TcpDrop;
use corral_wire::frame::{ICMP_PAYLOAD_OFFSET, UDP_PAYLOAD_OFFSET};
use corral_wire::{
    ArpOp, ArpPacket, DropReason, EchoKind, IcmpEcho, Ipv4FrameSpec, Ipv4Packet, MacAddr, Packet,
    UdpDatagram, UdpHeader, parse_frame,
};

use crate::net::config::NetConfig;
use crate::net::socket::{Datagram, Socket};
use crate::net::tcp::{TcpLayer, TcpStats};
use crate::sync::spin::SpinLock;

/// Bytes in every packet buffer, and the largest frame sent or accepted: iokerneld's contract.
pub use corral_abi::{FRAME_CAPACITY, MAX_FRAME};
/// Largest UDP payload that fits one frame (no fragmentation).
pub const MAX_UDP_PAYLOAD: usize = MAX_FRAME - UDP_PAYLOAD_OFFSET;

/// How long a learned neighbour stays valid.
pub const ARP_TTL_NS: u64 = 60_000_000_000;
/// Interval between ARP requests for an unresolved neighbour.
pub const ARP_RETRY_NS: u64 = 1_000_000_000;
/// Requests sent for one resolution before its queued packets are dropped.
pub const ARP_TRIES: u32 = 3;
/// Packets held per unresolved neighbour, and neighbours resolved at once.
pub const ARP_QUEUE_PER_NEIGHBOUR: usize = 16;
pub const ARP_MAX_PENDING: usize = 64;
/// Time to live of packets this stack sends.
pub const TTL: u8 = 64;
/// Ports handed out by binding port 0 (the IANA dynamic range).
pub const EPHEMERAL_PORTS: core::ops::RangeInclusive<u16> = 49152..=65535;

/// Why the stack (rather than a parser) dropped a frame. With [`DropReason`] these name every
/// drop counter in [`NetStats::drops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum StackDrop {
    /// Unicast to another MAC, or multicast.
    NotOurMac,
    /// IPv4 to an address that is not ours.
    NotOurIp,
    /// Source MAC or IPv4 address is broadcast, multicast or zero.
    BadSource,
    /// Arrived with a TTL of zero.
    TtlExpired,
    /// An ARP packet about another host's address (seen, not an error).
    ArpOtherTarget,
    /// Someone else claims our address.
    ArpAddressConflict,
    /// An ICMP echo reply: this stack sends no echo requests.
    UnsolicitedEchoReply,
    /// An echo request sent to a broadcast address (ignored, as Linux does by default).
    BroadcastEcho,
    /// No longer counted (TCP is handled by `net::tcp`); kept so counter names stay stable.
    NoTcp,
    /// UDP to a port with no socket.
    NoSocket,
    /// UDP to a connected socket from another address.
    NotConnectedPeer,
    /// A socket's receive queue was full.
    SocketQueueFull,
    /// Too many packets waiting for ARP resolution.
    ArpQueueFull,
    /// ARP resolution failed after every retry; the packets waiting for it are dropped.
    ArpUnresolved,
    /// No transmit buffer was free.
    TxNoBuffer,
    /// The egress ring was full.
    TxRingFull,
    /// iokerneld refused to send a frame (completion flagged DROPPED).
    TxRejected,
    /// No device to send on (standalone mode: only the runtime's own address is reachable).
    NoLink,
    /// iokerneld handed over a buffer reference that is not one of ours.
    BadDescriptor,
}

impl StackDrop {
    pub const ALL: [StackDrop; 19] = [
        StackDrop::NotOurMac,
        StackDrop::NotOurIp,
        StackDrop::BadSource,
        StackDrop::TtlExpired,
        StackDrop::ArpOtherTarget,
        StackDrop::ArpAddressConflict,
        StackDrop::UnsolicitedEchoReply,
        StackDrop::BroadcastEcho,
        StackDrop::NoTcp,
        StackDrop::NoSocket,
        StackDrop::NotConnectedPeer,
        StackDrop::SocketQueueFull,
        StackDrop::ArpQueueFull,
        StackDrop::ArpUnresolved,
        StackDrop::TxNoBuffer,
        StackDrop::TxRingFull,
        StackDrop::TxRejected,
        StackDrop::NoLink,
        StackDrop::BadDescriptor,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// A stable snake_case name for counters.
    pub const fn as_str(self) -> &'static str {
        match self {
            StackDrop::NotOurMac => "not_our_mac",
            StackDrop::NotOurIp => "not_our_ip",
            StackDrop::BadSource => "bad_source",
            StackDrop::TtlExpired => "ttl_expired",
            StackDrop::ArpOtherTarget => "arp_other_target",
            StackDrop::ArpAddressConflict => "arp_address_conflict",
            StackDrop::UnsolicitedEchoReply => "unsolicited_echo_reply",
            StackDrop::BroadcastEcho => "broadcast_echo",
            StackDrop::NoTcp => "no_tcp",
            StackDrop::NoSocket => "no_socket",
            StackDrop::NotConnectedPeer => "not_connected_peer",
            StackDrop::SocketQueueFull => "socket_queue_full",
            StackDrop::ArpQueueFull => "arp_queue_full",
            StackDrop::ArpUnresolved => "arp_unresolved",
            StackDrop::TxNoBuffer => "tx_no_buffer",
            StackDrop::TxRingFull => "tx_ring_full",
            StackDrop::TxRejected => "tx_rejected",
            StackDrop::NoLink => "no_link",
            StackDrop::BadDescriptor => "bad_descriptor",
        }
    }
}

/// Where outgoing frames go.
pub(crate) trait Link: Send + Sync {
    /// Sends one frame: `build` writes it into a buffer of [`FRAME_CAPACITY`] bytes and returns
    /// its length (0: nothing to send after all). `may_block`: the caller is a uthread that may
    /// wait for a free buffer; otherwise (the scheduler) a missing buffer is a drop.
    fn transmit(
        &self,
        may_block: bool,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<(), StackDrop>;

    /// Asks for [`NetStack::poll`] to run at `deadline` (monotonic ns) or soon after.
    fn arm_timer(&self, deadline: u64);

    /// Whether arriving frames are steered to kthreads by iokerneld's RSS (so outgoing TCP
    /// connections pick their local ports to match).
    fn steers_by_rss(&self) -> bool {
        false
    }
}

/// Everything counted, as returned by [`crate::Runtime::net_stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames sent to the runtime's own address and delivered without leaving it.
    pub loopback_packets: u64,
    pub icmp_echo_requests: u64,
    pub icmp_echo_replies_sent: u64,
    pub udp_rx_datagrams: u64,
    pub udp_tx_datagrams: u64,
    pub arp: ArpStats,
    /// Every drop reason with its count, zeros included, parser reasons first.
    pub drops: Vec<(&'static str, u64)>,
    /// One entry per open socket.
    pub sockets: Vec<SocketStats>,
    /// TCP: totals (every drop reason, every retransmission kind) and live connections.
    pub tcp: TcpStats,
}

impl NetStats {
    /// The count of the drop reason named `name` (0 for an unknown name).
    pub fn drop_count(&self, name: &str) -> u64 {
        self.drops
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |&(_, c)| c)
    }

    /// Drops of every reason together.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(|&(_, c)| c).sum()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArpStats {
    pub requests_received: u64,
    pub replies_received: u64,
    pub requests_sent: u64,
    pub replies_sent: u64,
    /// Neighbours learned or refreshed.
    pub learned: u64,
    /// Resolutions abandoned after every retry.
    pub failures: u64,
    /// Entries in the cache now, resolved or being resolved.
    pub entries: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketStats {
    pub local: SocketAddrV4,
    pub peer: Option<SocketAddrV4>,
    pub rx_datagrams: u64,
    /// Datagrams dropped because the receive queue was full.
    pub rx_dropped: u64,
    pub tx_datagrams: u64,
    /// Datagrams waiting to be received; for a spawner's port, handlers running or waiting
    /// to run.
    pub queued: u64,
}

#[derive(Default)]
struct Counters {
    wire: [AtomicU64; DropReason::COUNT],
    stack: [AtomicU64; StackDrop::COUNT],
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    loopback: AtomicU64,
    echo_requests: AtomicU64,
    echo_replies: AtomicU64,
    udp_rx: AtomicU64,
    udp_tx: AtomicU64,
    arp_requests_in: AtomicU64,
    arp_replies_in: AtomicU64,
    arp_requests_out: AtomicU64,
    arp_replies_out: AtomicU64,
    arp_learned: AtomicU64,
    arp_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

enum Neighbour {
    /// `expires`: `u64::MAX` for a static entry.
    Resolved { mac: MacAddr, expires: u64 },
    /// Frames built with a zero destination MAC, patched once the address is known.
    Resolving {
        queued: VecDeque<Vec<u8>>,
        tries: u32,
        next_try: u64,
    },
}

/// What the ARP table says about a next hop.
pub(crate) enum Lookup {
    Known(MacAddr),
    /// Queued; send a request if asked to.
    Queued {
        send_request: bool,
    },
    Full,
}

/// One runtime's network stack.
pub(crate) struct NetStack {
    ip: Ipv4Addr,
    mac: MacAddr,
    config: NetConfig,
    link: Box<dyn Link>,
    arp: SpinLock<HashMap<Ipv4Addr, Neighbour>>,
    sockets: SpinLock<HashMap<u16, Arc<Socket>>>,
    next_ephemeral: AtomicU32,
    next_ident: AtomicU16,
    /// Earliest ARP retry, `u64::MAX` for none: the scheduler polls the stack when it passes.
    next_deadline: AtomicU64,
    counters: Counters,
    pub tcp: TcpLayer,
}

impl NetStack {
    pub fn new(config: NetConfig, link: Box<dyn Link>) -> NetStack {
        let mut arp = HashMap::new();
        for &(ip, mac) in &config.static_arp {
            arp.insert(
                ip,
                Neighbour::Resolved {
                    mac,
                    expires: u64::MAX,
                },
            );
        }
        // Start the ephemeral search at an address-dependent point, so that two runtimes
        // restarted together do not reuse each other's recent ports in lockstep.
        let seed = u32::from(config.ip).wrapping_mul(0x9E37_79B9) >> 18;
        NetStack {
            ip: config.ip,
            mac: config.effective_mac(),
            link,
            arp: SpinLock::new(arp),
            sockets: SpinLock::new(HashMap::new()),
            next_ephemeral: AtomicU32::new(seed),
            next_ident: AtomicU16::new(seed as u16),
            next_deadline: AtomicU64::new(u64::MAX),
            counters: Counters::default(),
            tcp: TcpLayer::new(config.tcp.clone(), u64::from(seed)),
            config,
        }
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    pub(crate) fn link(&self) -> &dyn Link {
        &*self.link
    }

    /// Whether iokerneld steers arriving frames by RSS over this runtime's active kthreads.
    pub(crate) fn steered(&self) -> bool {
        self.link.steers_by_rss()
    }

    pub(crate) fn count_loopback(&self) {
        bump(&self.counters.loopback);
    }

    /// The neighbour a packet to `dst` goes to: `dst` itself on the subnet (or ourselves),
    /// else the gateway; `None` when unreachable.
    pub(crate) fn next_hop(&self, dst: Ipv4Addr) -> Option<Ipv4Addr> {
        if dst == self.ip || self.config.on_link(dst) {
            Some(dst)
        } else {
            self.config.gateway
        }
    }

    pub fn count(&self, reason: StackDrop) {
        bump(&self.counters.stack[reason as usize]);
    }

    fn count_wire(&self, reason: DropReason) {
        bump(&self.counters.wire[reason.index()]);
    }

    /// The earliest time [`NetStack::poll`] has work, `u64::MAX` for never.
    #[inline]
    pub fn next_deadline(&self) -> u64 {
        self.next_deadline.load(Relaxed)
    }

    // -----------------------------------------------------------------------------------------
    // Receive

    /// Processes one received frame. Never blocks; everything it cannot use is counted.
    /// Returns the name of the counter a drop went to, `None` if the frame was used.
    pub fn receive(&self, frame: &[u8], now: u64) -> Option<&'static str> {
        self.receive_frame(frame, now, false)
    }

    /// As [`NetStack::receive`], for one frame of a receive batch: the frames a kthread takes
    /// off an ingress ring in one pass. TCP owes the batch's ACKs to its end, which the caller
    /// marks with [`NetStack::end_receive_batch`].
    pub fn receive_in_batch(&self, frame: &[u8], now: u64) -> Option<&'static str> {
        self.receive_frame(frame, now, true)
    }

    /// A receive batch ended: sends the ACKs it owes.
    pub fn end_receive_batch(&self, now: u64) {
        self.tcp.end_receive_batch(self, now);
    }

    fn receive_frame(&self, frame: &[u8], now: u64, in_batch: bool) -> Option<&'static str> {
        bump(&self.counters.rx_packets);
        self.counters
            .rx_bytes
            .fetch_add(frame.len() as u64, Relaxed);
        match self.receive_inner(frame, now, in_batch) {
            Ok(()) => None,
            Err(Rejected::Wire(r)) => {
                match r {
                    DropReason::BadTcpChecksum => self.tcp.count_drop(TcpDrop::BadChecksum),
                    DropReason::BadTcpHeader => self.tcp.count_drop(TcpDrop::BadHeader),
                    _ => {}
                }
                self.count_wire(r);
                Some(r.as_str())
            }
            Err(Rejected::Stack(r)) => {
                self.count(r);
                Some(r.as_str())
            }
        }
    }

    fn receive_inner(&self, frame: &[u8], now: u64, in_batch: bool) -> Result<(), Rejected> {
        let parsed = parse_frame(frame)?;
        let eth = parsed.eth;
        let dst_mac = eth.dst();
        let broadcast_mac = dst_mac.is_broadcast();
        if dst_mac != self.mac && !broadcast_mac {
            return Err(StackDrop::NotOurMac.into());
        }
        if !eth.src().is_unicast() || eth.src().is_zero() {
            return Err(StackDrop::BadSource.into());
        }
        let (ip, is_broadcast_ip) = match parsed.packet {
            Packet::Arp(arp) => return self.arp_input(arp, now),
            Packet::Icmp { ip, .. } | Packet::Udp { ip, .. } | Packet::Tcp { ip, .. } => {
                let dst = ip.dst();
                let bcast = dst == Ipv4Addr::BROADCAST || dst == self.config.broadcast();
                if dst != self.ip && !bcast {
                    return Err(StackDrop::NotOurIp.into());
                }
                let src = ip.src();
                if src.is_broadcast() || src.is_multicast() || src == self.config.broadcast() {
                    return Err(StackDrop::BadSource.into());
                }
                if ip.ttl() == 0 {
                    return Err(StackDrop::TtlExpired.into());
                }
                (ip, bcast)
            }
        };
        match parsed.packet {
            Packet::Icmp { icmp, .. } => {
                if is_broadcast_ip {
                    return Err(StackDrop::BroadcastEcho.into());
                }
                self.icmp_input(eth.src(), &ip, &icmp, now)
            }
            Packet::Udp { udp, .. } => self.udp_input(&ip, &udp),
            Packet::Tcp { .. } if is_broadcast_ip => Err(StackDrop::NotOurIp.into()),
            Packet::Tcp { .. } => {
                self.tcp
                    .input(self, ip.src(), ip.dst(), ip.payload(), now, in_batch);
                Ok(())
            }
            Packet::Arp(_) => unreachable!("handled above"),
        }
    }

    fn arp_input(&self, arp: ArpPacket, now: u64) -> Result<(), Rejected> {
        match arp.op {
            ArpOp::Request => bump(&self.counters.arp_requests_in),
            ArpOp::Reply => bump(&self.counters.arp_replies_in),
        }
        if arp.sender_ip == self.ip {
            return Err(StackDrop::ArpAddressConflict.into());
        }
        let for_us = arp.target_ip == self.ip;
        let sender_ok = arp.sender_mac.is_unicast()
            && !arp.sender_mac.is_zero()
            && !arp.sender_ip.is_unspecified()
            && !arp.sender_ip.is_broadcast()
            && !arp.sender_ip.is_multicast();
        // RFC 826: refresh a neighbour we already know; add one only if it is talking to us.
        let mut released = VecDeque::new();
        if sender_ok {
            let mut table = self.arp.lock();
            let known = table.contains_key(&arp.sender_ip);
            if for_us || known {
                let entry = table.entry(arp.sender_ip).or_insert(Neighbour::Resolved {
                    mac: arp.sender_mac,
                    expires: 0,
                });
                match entry {
                    Neighbour::Resolved { expires, .. } if *expires == u64::MAX => {}
                    _ => {
                        if let Neighbour::Resolving { queued, .. } = entry {
                            released = core::mem::take(queued);
                        }
                        *entry = Neighbour::Resolved {
                            mac: arp.sender_mac,
                            expires: now.saturating_add(ARP_TTL_NS),
                        };
                        bump(&self.counters.arp_learned);
                    }
                }
            }
        }
        for mut frame in released {
            frame[..6].copy_from_slice(&arp.sender_mac.0);
            self.transmit_frame(&frame, false);
        }
        if !for_us {
            return Err(StackDrop::ArpOtherTarget.into());
        }
        if arp.op == ArpOp::Request {
            let reply = arp.reply(self.mac);
            let sent = self
                .link
                .transmit(false, &mut |buf| reply.emit_frame(buf).unwrap_or(0));
            match sent {
                Ok(()) => {
                    bump(&self.counters.arp_replies_out);
                    self.count_tx(corral_wire::ethernet::HEADER_LEN + corral_wire::arp::PACKET_LEN);
                }
                Err(r) => self.count(r),
            }
        }
        Ok(())
    }

    fn icmp_input(
        &self,
        src_mac: MacAddr,
        ip: &Ipv4Packet<'_>,
        icmp: &IcmpEcho<'_>,
        now: u64,
    ) -> Result<(), Rejected> {
        if icmp.kind() == EchoKind::Reply {
            return Err(StackDrop::UnsolicitedEchoReply.into());
        }
        bump(&self.counters.echo_requests);
        let spec = Ipv4FrameSpec {
            src_mac: self.mac,
            dst_mac: src_mac,
            src_ip: self.ip,
            dst_ip: ip.src(),
            ttl: TTL,
            ident: self.ident(),
            tos: 0,
        };
        let payload = icmp.payload();
        if ICMP_PAYLOAD_OFFSET + payload.len() > MAX_FRAME {
            // Cannot happen for a frame that fit a buffer; the reply would not either.
            return Err(DropReason::BadTotalLength.into());
        }
        let header = icmp.reply_header();
        let mut len = 0;
        let mut build = |buf: &mut [u8]| {
            len = spec.build_icmp_echo(buf, header, payload).unwrap_or(0);
            len
        };
        if ip.src() == self.ip {
            // Pinging ourselves: answer without a device.
            let mut buf = [0u8; FRAME_CAPACITY];
            let n = build(&mut buf);
            bump(&self.counters.echo_replies);
            self.count_tx(n);
            bump(&self.counters.loopback);
            self.receive(&buf[..n], now);
            return Ok(());
        }
        match self.link.transmit(false, &mut build) {
            Ok(()) => {
                bump(&self.counters.echo_replies);
                self.count_tx(len);
                Ok(())
            }
            Err(r) => Err(r.into()),
        }
    }

    fn udp_input(&self, ip: &Ipv4Packet<'_>, udp: &UdpDatagram<'_>) -> Result<(), Rejected> {
        let socket = self.sockets.lock().get(&udp.dst_port()).cloned();
        let Some(socket) = socket else {
            return Err(StackDrop::NoSocket.into());
        };
        let src = SocketAddrV4::new(ip.src(), udp.src_port());
        if socket.peer().is_some_and(|p| p != src) {
            return Err(StackDrop::NotConnectedPeer.into());
        }
        let local = socket.local();
        if !local.ip().is_unspecified() && *local.ip() != ip.dst() {
            // Bound to our own address: broadcasts are for wildcard sockets only.
            return Err(StackDrop::NotOurIp.into());
        }
        bump(&self.counters.udp_rx);
        let datagram = Datagram {
            payload: udp.payload().to_vec(),
            src,
            // Read here, per datagram: the receive path's own `now` is read once per ring
            // drain, before frames that arrive while it drains.
            received_ns: crate::timer::now_ns(),
        };
        if socket.deliver(datagram) {
            Ok(())
        } else {
            Err(StackDrop::SocketQueueFull.into())
        }
    }

    // -----------------------------------------------------------------------------------------
    // Send

    pub(crate) fn ident(&self) -> u16 {
        self.next_ident.fetch_add(1, Relaxed)
    }

    pub(crate) fn count_tx(&self, len: usize) {
        bump(&self.counters.tx_packets);
        self.counters.tx_bytes.fetch_add(len as u64, Relaxed);
    }

    /// Copies a finished frame into a transmit buffer.
    fn transmit_frame(&self, frame: &[u8], may_block: bool) {
        let r = self.link.transmit(may_block, &mut |buf| {
            buf[..frame.len()].copy_from_slice(frame);
            frame.len()
        });
        match r {
            Ok(()) => self.count_tx(frame.len()),
            Err(r) => self.count(r),
        }
    }

    /// Sends a UDP datagram from `src_port`. `may_block`: may wait for a transmit buffer.
    pub fn send_udp(
        &self,
        src_port: u16,
        dst: SocketAddrV4,
        payload: &[u8],
        may_block: bool,
        now: u64,
    ) -> io::Result<()> {
        if payload.len() > MAX_UDP_PAYLOAD {
            return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
        }
        if dst.port() == 0 || dst.ip().is_unspecified() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let dst_ip = *dst.ip();
        let broadcast = dst_ip.is_broadcast() || dst_ip == self.config.broadcast();
        let local = dst_ip == self.ip || dst_ip.is_loopback();
        if dst_ip.is_multicast() {
            return Err(io::Error::from_raw_os_error(libc::ENETUNREACH));
        }
        let dst_ip = if dst_ip.is_loopback() {
            self.ip
        } else {
            dst_ip
        };
        let next_hop = if broadcast || local || self.config.on_link(dst_ip) {
            dst_ip
        } else {
            match self.config.gateway {
                Some(gw) => gw,
                None => return Err(io::Error::from_raw_os_error(libc::ENETUNREACH)),
            }
        };
        let ports = UdpHeader {
            src_port,
            dst_port: dst.port(),
        };
        let write = |buf: &mut [u8], dst_mac: MacAddr| {
            let spec = Ipv4FrameSpec {
                src_mac: self.mac,
                dst_mac,
                src_ip: self.ip,
                dst_ip,
                ttl: TTL,
                ident: self.ident(),
                tos: 0,
            };
            spec.build_udp(buf, ports, payload).unwrap_or(0)
        };
        bump(&self.counters.udp_tx);
        if local {
            let mut buf = [0u8; FRAME_CAPACITY];
            let n = write(&mut buf, self.mac);
            self.count_tx(n);
            bump(&self.counters.loopback);
            self.receive(&buf[..n], now);
            return Ok(());
        }
        let dst_mac = if broadcast {
            MacAddr::BROADCAST
        } else {
            match self.lookup(next_hop, now) {
                Lookup::Known(mac) => mac,
                Lookup::Full => {
                    self.count(StackDrop::ArpQueueFull);
                    return Ok(());
                }
                Lookup::Queued { send_request } => {
                    let mut frame = vec![0u8; UDP_PAYLOAD_OFFSET + payload.len()];
                    let n = write(&mut frame, MacAddr::ZERO);
                    frame.truncate(n);
                    if !self.enqueue_unresolved(next_hop, frame) {
                        self.count(StackDrop::ArpQueueFull);
                    }
                    if send_request {
                        self.send_arp_request(next_hop, may_block);
                    }
                    return Ok(());
                }
            }
        };
        let mut len = 0;
        let r = self.link.transmit(may_block, &mut |buf| {
            len = write(buf, dst_mac);
            len
        });
        match r {
            Ok(()) => {
                self.count_tx(len);
                Ok(())
            }
            Err(reason) => {
                self.count(reason);
                // Like a full NIC queue on Linux: the datagram is lost, not the call.
                Ok(())
            }
        }
    }

    /// Looks up `ip`'s MAC, starting a resolution if there is none.
    pub(crate) fn lookup(&self, ip: Ipv4Addr, now: u64) -> Lookup {
        let mut table = self.arp.lock();
        match table.get(&ip) {
            Some(Neighbour::Resolved { mac, expires }) if *expires > now => Lookup::Known(*mac),
            Some(Neighbour::Resolving { queued, .. }) => {
                if queued.len() >= ARP_QUEUE_PER_NEIGHBOUR {
                    Lookup::Full
                } else {
                    Lookup::Queued {
                        send_request: false,
                    }
                }
            }
            _ => {
                let resolving = table
                    .values()
                    .filter(|n| matches!(n, Neighbour::Resolving { .. }))
                    .count();
                if resolving >= ARP_MAX_PENDING {
                    return Lookup::Full;
                }
                let next_try = now.saturating_add(ARP_RETRY_NS);
                table.insert(
                    ip,
                    Neighbour::Resolving {
                        queued: VecDeque::new(),
                        tries: 1,
                        next_try,
                    },
                );
                drop(table);
                self.set_deadline(next_try);
                Lookup::Queued { send_request: true }
            }
        }
    }

    /// Queues a frame for a neighbour being resolved. False if there is no room.
    pub(crate) fn enqueue_unresolved(&self, ip: Ipv4Addr, frame: Vec<u8>) -> bool {
        let mut table = self.arp.lock();
        match table.get_mut(&ip) {
            Some(Neighbour::Resolving { queued, .. }) if queued.len() < ARP_QUEUE_PER_NEIGHBOUR => {
                queued.push_back(frame);
                true
            }
            Some(Neighbour::Resolved { mac, .. }) => {
                // Resolved between the lookup and now: send at once.
                let mac = *mac;
                drop(table);
                let mut frame = frame;
                frame[..6].copy_from_slice(&mac.0);
                self.transmit_frame(&frame, false);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn send_arp_request(&self, target: Ipv4Addr, may_block: bool) {
        let req = ArpPacket::request(self.mac, self.ip, target);
        match self
            .link
            .transmit(may_block, &mut |buf| req.emit_frame(buf).unwrap_or(0))
        {
            Ok(()) => {
                bump(&self.counters.arp_requests_out);
                self.count_tx(corral_wire::ethernet::HEADER_LEN + corral_wire::arp::PACKET_LEN);
            }
            Err(r) => self.count(r),
        }
    }

    fn set_deadline(&self, deadline: u64) {
        if self.next_deadline.fetch_min(deadline, Relaxed) > deadline {
            self.link.arm_timer(deadline);
        }
    }

    /// Retries and abandons ARP resolutions and forgets expired neighbours. Runs from the
    /// scheduler or a timer; cheap when nothing is due.
    pub fn poll(&self, now: u64) {
        if self.next_deadline() > now {
            return;
        }
        let mut retry = Vec::new();
        let mut next = u64::MAX;
        {
            let mut table = self.arp.lock();
            // Claim the pass: whoever sets the deadline next re-arms the timer.
            self.next_deadline.store(u64::MAX, Relaxed);
            table.retain(|&ip, n| match n {
                Neighbour::Resolved { expires, .. } => *expires > now,
                Neighbour::Resolving {
                    queued,
                    tries,
                    next_try,
                } => {
                    if *next_try > now {
                        next = next.min(*next_try);
                        return true;
                    }
                    if *tries >= ARP_TRIES {
                        bump(&self.counters.arp_failures);
                        self.counters.stack[StackDrop::ArpUnresolved as usize]
                            .fetch_add(queued.len() as u64, Relaxed);
                        return false;
                    }
                    *tries += 1;
                    *next_try = now.saturating_add(ARP_RETRY_NS);
                    next = next.min(*next_try);
                    retry.push(ip);
                    true
                }
            });
        }
        if next != u64::MAX {
            self.set_deadline(next);
        }
        for ip in retry {
            self.send_arp_request(ip, false);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Sockets

    /// Adds `socket`'s port to the table; port 0 picks a free ephemeral port. Returns the port.
    pub fn bind(
        &self,
        addr: SocketAddrV4,
        make: impl FnOnce(SocketAddrV4) -> Arc<Socket>,
    ) -> io::Result<Arc<Socket>> {
        if !addr.ip().is_unspecified() && *addr.ip() != self.ip {
            return Err(io::Error::from_raw_os_error(libc::EADDRNOTAVAIL));
        }
        let mut table = self.sockets.lock();
        let port = if addr.port() != 0 {
            if table.contains_key(&addr.port()) {
                return Err(io::Error::from_raw_os_error(libc::EADDRINUSE));
            }
            addr.port()
        } else {
            let span = u32::from(EPHEMERAL_PORTS.end() - EPHEMERAL_PORTS.start()) + 1;
            let start = self.next_ephemeral.fetch_add(1, Relaxed);
            let free = (0..span)
                .map(|i| EPHEMERAL_PORTS.start() + ((start.wrapping_add(i)) % span) as u16)
                .find(|p| !table.contains_key(p));
            match free {
                Some(p) => {
                    self.next_ephemeral
                        .store(u32::from(p - EPHEMERAL_PORTS.start()) + 1, Relaxed);
                    p
                }
                None => return Err(io::Error::from_raw_os_error(libc::EADDRINUSE)),
            }
        };
        let socket = make(SocketAddrV4::new(*addr.ip(), port));
        table.insert(port, socket.clone());
        Ok(socket)
    }

    /// Removes `socket` from the table (if it is still the one bound to its port).
    pub fn unbind(&self, socket: &Arc<Socket>) {
        let mut table = self.sockets.lock();
        let port = socket.local().port();
        if table.get(&port).is_some_and(|s| Arc::ptr_eq(s, socket)) {
            table.remove(&port);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Counters

    /// Each live TCP connection described for diagnostics (see
    /// `TcpLayer::describe_connections`).
    pub fn describe_tcp_connections(&self) -> Vec<String> {
        self.tcp.describe_connections(self)
    }

    pub fn stats(&self) -> NetStats {
        self.counted(true)
    }

    /// The totals of [`NetStack::stats`] for iokerneld's statistics, cheap enough for every
    /// time a runtime goes quiet: no socket list, no connection list (`tcp.live`), and no
    /// `tcp.pending_overflow` (it is per connection).
    pub(crate) fn totals(&self) -> NetStats {
        self.counted(false)
    }

    fn counted(&self, lists: bool) -> NetStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Relaxed);
        let mut drops: Vec<(&'static str, u64)> = DropReason::ALL
            .iter()
            .map(|r| (r.as_str(), get(&c.wire[r.index()])))
            .collect();
        drops.extend(
            StackDrop::ALL
                .iter()
                .map(|&r| (r.as_str(), get(&c.stack[r as usize]))),
        );
        let entries = self.arp.lock().len() as u64;
        let mut sockets: Vec<SocketStats> = Vec::new();
        if lists {
            let open: Vec<Arc<Socket>> = self.sockets.lock().values().cloned().collect();
            sockets = open.iter().map(|s| s.stats()).collect();
            sockets.sort_by_key(|s| s.local.port());
        }
        NetStats {
            rx_packets: get(&c.rx_packets),
            rx_bytes: get(&c.rx_bytes),
            tx_packets: get(&c.tx_packets),
            tx_bytes: get(&c.tx_bytes),
            loopback_packets: get(&c.loopback),
            icmp_echo_requests: get(&c.echo_requests),
            icmp_echo_replies_sent: get(&c.echo_replies),
            udp_rx_datagrams: get(&c.udp_rx),
            udp_tx_datagrams: get(&c.udp_tx),
            arp: ArpStats {
                requests_received: get(&c.arp_requests_in),
                replies_received: get(&c.arp_replies_in),
                requests_sent: get(&c.arp_requests_out),
                replies_sent: get(&c.arp_replies_out),
                learned: get(&c.arp_learned),
                failures: get(&c.arp_failures),
                entries,
            },
            drops,
            sockets,
            tcp: if lists {
                self.tcp.stats(self)
            } else {
                self.tcp.totals(self)
            },
        }
    }
}

/// A drop reason from either layer.
enum Rejected {
    Wire(DropReason),
    Stack(StackDrop),
}

impl From<DropReason> for Rejected {
    fn from(r: DropReason) -> Rejected {
        Rejected::Wire(r)
    }
}

impl From<StackDrop> for Rejected {
    fn from(r: StackDrop) -> Rejected {
        Rejected::Stack(r)
    }
}
