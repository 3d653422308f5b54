//! The packet switch: frames from the NIC and from runtimes' egress packet rings are steered
//! into the posted receive buffers of the runtime that owns their destination, or sent out
//! through the NIC.
//!
//! The protocol, as the runtime sees it:
//!
//! * A kthread posts free receive buffers with `RxBufferPost` on its egress command ring
//!   (offset, capacity of at least [`MAX_FRAME`] bytes, at most one per ingress slot
//!   outstanding). Anything else is a protocol violation and evicts the runtime.
//! * A frame for the runtime is copied into one of the buffers posted by the kthread chosen for
//!   it and announced with `RxPacket` (offset, length) on that kthread's ingress ring. No
//!   buffer or no room on the ring: the frame is dropped and counted. Packets never take the
//!   last [`CONTROL_RESERVE`] ingress slots, which stay free for `Grant` and `Preempt`.
//! * A kthread sends by pushing `TxPacket` (offset, length) on its egress packet ring.
//!   iokerneld copies the frame out, checks it (bounds, length, the runtime's own source MAC
//!   and IPv4 address) and answers with `TxCompletion` (same offset; flag `DROPPED` if it was
//!   not sent) on the same kthread's ingress ring. A `TxPacket` is taken off the ring only
//!   when its completion has room, so completions are never lost.
//!
//! Steering: the destination MAC selects the runtime (one hash lookup), the Toeplitz hash of
//! the flow selects one of its active kthreads (skipped when it has one). A runtime with no
//! active kthread gets the frame on kthread 0's ring and a core at once. Broadcast ARP
//! requests go to the runtime that owns the target address; other broadcasts and multicasts go
//! to nobody. A frame a runtime sends to another local runtime's MAC is switched here and never
//! reaches the NIC.
//!
//! Frames are copied twice on the local path (out of the sender's area, into the receiver's),
//! so that what was checked is what is delivered: the sender may rewrite its buffer at any
//! time.
//!
//! Fault injection (`--faults`, `faults.rs`), when configured for a direction, stands between
//! the switch's decision and the frame's delivery: NIC frames before they are steered (`rx`),
//! checked runtime frames before they reach the NIC (`tx`) or another runtime (`local`). A
//! runtime's send completes as sent whatever the injector then does to the frame, as on a
//! lossy wire. Frames it holds back are copies in the injector's own table, released by the
//! loop through [`Switch::release_held`]. Without faults the cost is one branch per frame.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use corral_abi::{Command, Full, Producer, RingKind, Slot, flags};
use corral_wire::{ArpOp, Classification, DropReason, FrameClass, RssHasher, classify, ethernet};
use serde::{Deserialize, Serialize};

use super::driver::{CoreDriver, CoreRequest};
use super::faults::{Direction, Injector};
use super::registry::{Kthread, Registry, Tenant};
use super::stats::{FaultDirectionStats, FaultStats};
use crate::config::FaultsConfig;
use crate::nic::{FrameBatch, Nic};
use corral_policy::{KthreadIndex, KthreadPlace, Policy};

/// Longest frame switched (corral-abi's, which runtimes share). Receive buffers must hold one.
pub use corral_abi::MAX_FRAME;

/// Ingress slots packets and completions never take, so that a grant or a preemption request
/// always fits.
pub const CONTROL_RESERVE: u32 = 2;

/// Most frames taken off one egress packet ring per loop iteration, so that one busy kthread
/// cannot keep the loop from everyone else.
pub const TX_BURST: usize = 32;

/// Why the switch dropped a frame. The names are the counters' names in the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetDrop {
    /// The receiving kthread had no posted buffer.
    RxNoBuffer,
    /// The receiving kthread's ingress ring had no room.
    RxRingFull,
    /// No posted buffer or ring room, and the runtime's backlog was full (or off).
    RxBacklogFull,
    /// Longer than [`MAX_FRAME`].
    RxTooBig,
    /// Unicast to a MAC no runtime registered.
    RxUnknownMac,
    /// A broadcast ARP request for an address no runtime registered.
    RxArpNotLocal,
    /// A broadcast or multicast that is not an ARP request.
    RxBroadcastIgnored,
    /// Sent with a source MAC or IPv4 address (or ARP sender) that is not the runtime's own,
    /// or by a runtime that registered no addresses.
    TxSpoofed,
    /// Shorter than an Ethernet header, longer than [`MAX_FRAME`], or not a frame the switch
    /// can check the source of (not ARP, ICMP, UDP or TCP over IPv4, or corrupt).
    TxMalformed,
    /// The descriptor named bytes outside the runtime's packet area.
    TxOutOfBounds,
    /// For no local runtime, and there is no NIC.
    TxNoRoute,
    /// The NIC refused it.
    NicSendFailed,
}

impl NetDrop {
    pub const ALL: [NetDrop; 12] = [
        NetDrop::RxNoBuffer,
        NetDrop::RxRingFull,
        NetDrop::RxBacklogFull,
        NetDrop::RxTooBig,
        NetDrop::RxUnknownMac,
        NetDrop::RxArpNotLocal,
        NetDrop::RxBroadcastIgnored,
        NetDrop::TxSpoofed,
        NetDrop::TxMalformed,
        NetDrop::TxOutOfBounds,
        NetDrop::TxNoRoute,
        NetDrop::NicSendFailed,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub const fn as_str(self) -> &'static str {
        match self {
            NetDrop::RxNoBuffer => "rx_no_buffer",
            NetDrop::RxRingFull => "rx_ring_full",
            NetDrop::RxBacklogFull => "rx_backlog_full",
            NetDrop::RxTooBig => "rx_too_big",
            NetDrop::RxUnknownMac => "rx_unknown_mac",
            NetDrop::RxArpNotLocal => "rx_arp_not_local",
            NetDrop::RxBroadcastIgnored => "rx_broadcast_ignored",
            NetDrop::TxSpoofed => "tx_spoofed",
            NetDrop::TxMalformed => "tx_malformed",
            NetDrop::TxOutOfBounds => "tx_out_of_bounds",
            NetDrop::TxNoRoute => "tx_no_route",
            NetDrop::NicSendFailed => "nic_send_failed",
        }
    }
}

/// Packet counters, kept globally and per runtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct NetCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Frames sent from one runtime to another (or itself) without the NIC.
    pub local_switched: u64,
    pub rx_buffer_posts: u64,
    /// Frames that waited in a runtime's backlog before they were delivered or dropped.
    pub rx_backlogged: u64,
    pub drops: [u64; NetDrop::COUNT],
    /// Received frames that failed the steering parse, by corral-wire's reason.
    pub rx_parse_drops: [u64; DropReason::COUNT],
}

impl NetCounters {
    #[inline]
    fn drop(&mut self, why: NetDrop) {
        self.drops[why as usize] += 1;
    }

    /// The counters as statistics.
    pub fn stats(&self) -> NetStats {
        NetStats {
            rx_packets: self.rx_packets,
            rx_bytes: self.rx_bytes,
            tx_packets: self.tx_packets,
            tx_bytes: self.tx_bytes,
            local_switched: self.local_switched,
            rx_buffer_posts: self.rx_buffer_posts,
            rx_backlogged: self.rx_backlogged,
            drops: NetDrop::ALL
                .iter()
                .map(|d| (d.as_str().to_owned(), self.drops[*d as usize]))
                .collect(),
            rx_parse_drops: DropReason::ALL
                .iter()
                .map(|d| (d.as_str().to_owned(), self.rx_parse_drops[d.index()]))
                .collect(),
        }
    }
}

/// [`NetCounters`] in the statistics JSON. Every counter is present, zero or not.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NetStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub local_switched: u64,
    pub rx_buffer_posts: u64,
    /// Frames that waited in a runtime's backlog.
    #[serde(default)]
    pub rx_backlogged: u64,
    /// By [`NetDrop`] name.
    pub drops: BTreeMap<String, u64>,
    /// By corral-wire `DropReason` name.
    pub rx_parse_drops: BTreeMap<String, u64>,
}

/// Hashes the small integer keys of the steering tables (a MAC or an IPv4 address in a
/// `u64`) with one multiplication: the default SipHash costs more than the rest of a lookup,
/// and the keys are not chosen by anyone who gains from collisions (a runtime registers only
/// its own address, once).
#[derive(Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }

    fn finish(&self) -> u64 {
        let x = self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }
}

type Table = HashMap<u64, usize, BuildHasherDefault<KeyHasher>>;

#[inline]
fn mac_key(mac: &[u8]) -> u64 {
    let mut key = [0u8; 8];
    key[..6].copy_from_slice(&mac[..6]);
    u64::from_le_bytes(key)
}

#[inline]
fn ip_key(ip: [u8; 4]) -> u64 {
    u64::from(u32::from_be_bytes(ip))
}

/// Which runtime (slot in the runtime table) owns each registered MAC and IPv4 address.
#[derive(Default)]
pub struct Tables {
    macs: Table,
    ips: Table,
}

impl Tables {
    /// The runtime holding `mac` or `ipv4`, if any, for a registration to be refused.
    pub fn conflict(&self, mac: [u8; 6], ipv4: [u8; 4]) -> Option<(&'static str, usize)> {
        if let Some(&slot) = self.macs.get(&mac_key(&mac)) {
            return Some(("MAC", slot));
        }
        self.ips
            .get(&ip_key(ipv4))
            .map(|&slot| ("IPv4 address", slot))
    }

    pub fn insert(&mut self, mac: [u8; 6], ipv4: [u8; 4], slot: usize) {
        self.macs.insert(mac_key(&mac), slot);
        self.ips.insert(ip_key(ipv4), slot);
    }

    /// The runtime that registered `ipv4`.
    pub fn ip_owner(&self, ipv4: [u8; 4]) -> Option<usize> {
        self.ips.get(&ip_key(ipv4)).copied()
    }

    pub fn remove(&mut self, mac: [u8; 6], ipv4: [u8; 4], slot: usize) {
        let key = mac_key(&mac);
        if self.macs.get(&key) == Some(&slot) {
            self.macs.remove(&key);
        }
        let key = ip_key(ipv4);
        if self.ips.get(&key) == Some(&slot) {
            self.ips.remove(&key);
        }
    }
}

/// The fault injectors of the directions that have faults.
struct Faults {
    rx: Option<Box<Injector>>,
    tx: Option<Box<Injector>>,
    local: Option<Box<Injector>>,
    /// Some injector may hold frames, which the loop must release when due.
    holding: bool,
}

impl Faults {
    fn new(config: &FaultsConfig) -> Self {
        let injector = |direction| {
            config
                .get(direction)
                .filter(|spec| spec.is_active())
                .map(|spec| {
                    log::warn!("fault injection on {direction}: {spec}");
                    Box::new(Injector::new(direction, spec.clone()))
                })
        };
        let (rx, tx, local) = (
            injector(Direction::Rx),
            injector(Direction::Tx),
            injector(Direction::Local),
        );
        let holding = [&rx, &tx, &local]
            .iter()
            .any(|i| i.as_ref().is_some_and(|i| i.holds()));
        Faults {
            rx,
            tx,
            local,
            holding,
        }
    }

    fn stats(&self) -> FaultStats {
        let of = |injector: &Option<Box<Injector>>| {
            injector.as_ref().map(|i| FaultDirectionStats {
                spec: i.spec().to_string(),
                counters: i.counters(),
                held: i.held(),
            })
        };
        FaultStats {
            rx: of(&self.rx),
            tx: of(&self.tx),
            local: of(&self.local),
        }
    }
}

/// The switch's own state, apart from the runtimes: who owns which address, the NIC, and the
/// buffers and counters of steering.
pub(super) struct Switch {
    tables: Tables,
    nic: Option<Box<dyn Nic>>,
    batch: FrameBatch,
    /// Where a frame sent by a runtime is copied before it is checked.
    scratch: Box<[u8; MAX_FRAME]>,
    tx_slots: [Slot; TX_BURST],
    rss: Box<RssHasher>,
    counters: NetCounters,
    /// The last NIC poll found frames: poll again at once.
    nic_busy: bool,
    next_nic_poll: u64,
    faults: Faults,
}

impl Switch {
    pub(super) fn new(nic: Option<Box<dyn Nic>>, faults: &FaultsConfig) -> Self {
        Self {
            tables: Tables::default(),
            nic,
            batch: FrameBatch::default(),
            scratch: Box::new([0; MAX_FRAME]),
            tx_slots: [Slot::default(); TX_BURST],
            rss: Box::default(),
            counters: NetCounters::default(),
            nic_busy: false,
            next_nic_poll: 0,
            faults: Faults::new(faults),
        }
    }

    /// Which of `mac` and `ipv4` a runtime already owns ("MAC address" or "IPv4 address"), and
    /// the slot of that runtime.
    pub(super) fn address_owner(
        &self,
        mac: [u8; 6],
        ipv4: [u8; 4],
    ) -> Option<(&'static str, usize)> {
        self.tables.conflict(mac, ipv4)
    }

    /// Has the NIC take frames to `mac` and `ipv4` from whatever else shares it, before a
    /// runtime is registered with them; `Err` refuses the registration. [`Switch::detach`]
    /// (or [`Switch::unclaim`] if the registration fails later) undoes it.
    pub(super) fn claim(&mut self, mac: [u8; 6], ipv4: [u8; 4]) -> Result<(), String> {
        match self.nic.as_mut() {
            Some(nic) => nic.claim(mac, ipv4.into()),
            None => Ok(()),
        }
    }

    /// Undoes [`Switch::claim`] for a registration that failed after it.
    pub(super) fn unclaim(&mut self, mac: [u8; 6], ipv4: [u8; 4]) {
        if let Some(nic) = self.nic.as_mut() {
            nic.release(mac, ipv4.into());
        }
    }

    /// Frames to `mac` and `ipv4` go to the runtime in `slot` from now on.
    pub(super) fn attach(&mut self, mac: [u8; 6], ipv4: [u8; 4], slot: usize) {
        self.tables.insert(mac, ipv4, slot);
    }

    /// Frames to `mac` and `ipv4` no longer go to the runtime in `slot`, and the NIC gives them
    /// back.
    pub(super) fn detach(&mut self, mac: [u8; 6], ipv4: [u8; 4], slot: usize) {
        self.tables.remove(mac, ipv4, slot);
        self.unclaim(mac, ipv4);
    }

    /// The NIC backend, if any, with the address tables to look up while it is borrowed.
    pub(super) fn nic_mut(&mut self) -> (Option<&mut (dyn Nic + 'static)>, &Tables) {
        (self.nic.as_deref_mut(), &self.tables)
    }

    pub(super) fn nic(&self) -> Option<&dyn Nic> {
        self.nic.as_deref()
    }

    /// The switch's counters.
    pub(super) fn stats(&self) -> NetStats {
        self.counters.stats()
    }

    /// The fault injectors' counters.
    pub(super) fn fault_stats(&self) -> FaultStats {
        self.faults.stats()
    }
}

/// iokerneld's end of an ingress ring. Keeps a lower bound on the free slots so that most
/// pushes do not read the consumer's cache line, and keeps packets out of the last
/// [`CONTROL_RESERVE`] slots.
pub struct Ingress {
    producer: Producer<'static>,
    capacity: u32,
    /// Free slots at least (the consumer only ever frees more).
    room: u32,
}

impl Ingress {
    pub fn new(producer: Producer<'static>) -> Self {
        let capacity = producer.capacity();
        Self {
            producer,
            capacity,
            room: capacity,
        }
    }

    /// Items pushed so far.
    #[inline]
    pub fn position(&self) -> u32 {
        self.producer.position()
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Re-reads the consumer's position. A position ahead of ours or more than a ring behind
    /// is a lie and reads as a full ring.
    #[cold]
    fn refresh(&mut self) {
        let positions = self.producer.positions();
        let used = positions.produced.wrapping_sub(positions.consumed);
        self.room = self.capacity.saturating_sub(used);
    }

    /// How many of `want` packets or completions fit now.
    #[inline]
    pub fn data_room(&mut self, want: u32) -> u32 {
        if self.room < CONTROL_RESERVE + want {
            self.refresh();
        }
        self.room.saturating_sub(CONTROL_RESERVE).min(want)
    }

    /// Pushes packets or completions that [`Ingress::data_room`] said fit; returns how many
    /// were pushed (fewer only if the consumer lied about its position).
    #[inline]
    fn push_data(&mut self, slots: &[Slot]) -> usize {
        let n = self.producer.push_batch(slots);
        self.room = self.room.saturating_sub(n as u32);
        n
    }

    /// Pushes a grant or a preemption request, which may use the reserved slots.
    pub fn push_control(&mut self, slot: Slot) -> Result<(), Full> {
        self.producer.try_push(slot)?;
        self.room = self.room.saturating_sub(1);
        Ok(())
    }
}

/// A kthread's posted receive buffers, oldest first, in a ring allocated at registration.
pub struct RxBuffers {
    offsets: Box<[u64]>,
    head: usize,
    len: usize,
}

impl RxBuffers {
    pub fn new(capacity: usize) -> Self {
        Self {
            offsets: vec![0; capacity].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    /// Adds a buffer; `false` if as many as the ring holds are already posted.
    pub fn push(&mut self, offset: u64) -> bool {
        if self.len == self.offsets.len() {
            return false;
        }
        let at = (self.head + self.len) % self.offsets.len();
        self.offsets[at] = offset;
        self.len += 1;
        true
    }

    #[inline]
    pub fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let offset = self.offsets[self.head];
        self.head = (self.head + 1) % self.offsets.len();
        self.len -= 1;
        Some(offset)
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

/// Rebuilds a runtime's lists of active kthreads (for steering) and of kthreads whose egress
/// packet rings are polled (active ones, and parked ones that may have left frames behind),
/// from the allocator's state. Called whenever a kthread wakes or parks.
pub(super) fn refresh_active(alloc: &dyn Policy, runtime: &mut Tenant) {
    runtime.active.clear();
    runtime.tx_poll.clear();
    for (index, kt) in runtime.kthreads.iter_mut().enumerate() {
        let active = matches!(
            alloc
                .kthread(runtime.id, KthreadIndex(index as u16))
                .map(|k| k.place),
            Ok(KthreadPlace::Active { .. })
        );
        // A kthread that just parked may have pushed frames before its park: keep polling its
        // ring until it is found empty.
        kt.linger = !active && (kt.linger || kt.active);
        kt.active = active;
        if active {
            runtime.active.push(index as u16);
        }
        if active || kt.linger {
            runtime.tx_poll.push(index as u16);
        }
    }
    runtime.core_requested = false;
}

/// Whether a frame announced to `kt` is still unread: its ingress consumer has not passed
/// the last `RxPacket`.
pub(super) fn rx_unread(kt: &Kthread) -> bool {
    let consumed = kt.positions.ingress_consumed();
    let behind = kt.last_rx_position.wrapping_sub(consumed);
    behind != 0 && behind <= kt.ingress.capacity()
}

/// Handles an `RxBufferPost`. An error is a protocol violation.
pub(super) fn post_rx_buffer(runtime: &mut Tenant, index: usize, slot: Slot) -> Result<(), String> {
    let buffer = slot
        .packet_in(runtime.region.packet_area())
        .map_err(|e| format!("kthread {index}: RxBufferPost: {e}"))?;
    if buffer.length() < MAX_FRAME as u32 {
        return Err(format!(
            "kthread {index}: RxBufferPost of a {}-byte buffer at {:#x}: receive buffers must \
             hold {MAX_FRAME} bytes",
            buffer.length(),
            buffer.offset()
        ));
    }
    let kt = &mut runtime.kthreads[index];
    if !kt.rx_buffers.push(buffer.offset()) {
        return Err(format!(
            "kthread {index}: RxBufferPost with {} receive buffers already posted and unfilled \
             (at most one per ingress slot)",
            kt.rx_buffers.len()
        ));
    }
    runtime.net_counters.rx_buffer_posts += 1;
    Ok(())
}

/// What [`deliver`] works with, apart from the frame: the runtimes, the driver to ask a core
/// of, the flow hash and the switch's counters.
struct Delivery<'a> {
    registry: &'a mut Registry,
    driver: &'a mut CoreDriver,
    rss: &'a RssHasher,
    global: &'a mut NetCounters,
    now: u64,
}

/// Ingress slots of one kthread that a delivery must leave free (for completions already
/// promised to it).
#[derive(Clone, Copy)]
struct Reserve {
    slot: usize,
    index: usize,
    slots: u32,
}

impl Reserve {
    /// Nothing reserved.
    const NONE: Reserve = Reserve {
        slot: usize::MAX,
        index: 0,
        slots: 0,
    };
}

/// Copies `frame` into a buffer of the runtime in `slot` and announces it, or holds it in the
/// runtime's backlog when its buffers or ring cannot take it yet (or something is held
/// already: a flow's frames keep their order). Returns whether it was delivered or held; a
/// drop is counted on the runtime and globally.
fn deliver(
    delivery: Delivery<'_>,
    slot: usize,
    frame: &[u8],
    class: &Classification,
    reserve: Reserve,
) -> bool {
    let Delivery {
        registry,
        driver,
        rss,
        global,
        now,
    } = delivery;
    let Some(rt) = registry.live_at_mut(slot) else {
        global.drop(NetDrop::RxUnknownMac);
        return false;
    };
    if rt.backlog.is_empty() {
        match place(rt, rss, frame, class, reserve) {
            Ok(index) => {
                delivered(rt, index, frame.len(), class, driver, global, now);
                return true;
            }
            Err(why) if rt.backlog.capacity() == 0 => {
                rt.net_counters.drop(why);
                global.drop(why);
                return false;
            }
            Err(_) => {}
        }
    }
    if !rt.backlog.push(frame) {
        rt.net_counters.drop(NetDrop::RxBacklogFull);
        global.drop(NetDrop::RxBacklogFull);
        return false;
    }
    rt.net_counters.rx_backlogged += 1;
    global.rx_backlogged += 1;
    // The runtime is not keeping up: one with no core gets one at once, one that is running
    // counts as congested in this pass (Algorithm 1 grants it another core at the pass's end)
    // rather than after its queue has waited a whole interval.
    if rt.active.is_empty() {
        if !rt.core_requested {
            rt.core_requested = true;
            driver.request_core(rt.id, CoreRequest::Now);
        }
    } else {
        driver.report_congestion(rt.id);
    }
    true
}

/// Puts `frame` in a posted buffer of the kthread of `rt` it is steered to and announces it on
/// that kthread's ring. Returns the kthread, or why it did not fit (nothing counted).
fn place(
    rt: &mut Tenant,
    rss: &RssHasher,
    frame: &[u8],
    class: &Classification,
    reserve: Reserve,
) -> Result<usize, NetDrop> {
    let index = match rt.active.len() {
        0 => 0,
        1 => usize::from(rt.active[0]),
        n => {
            let hash = match &class.class {
                FrameClass::Flow(flow) => rss.hash_flow(flow),
                FrameClass::Icmp { src, dst } => rss.hash_ipv4(*src, *dst),
                FrameClass::Arp(_) => 0,
            };
            // Multiply-shift maps the hash onto 0..n without a division.
            usize::from(rt.active[((u64::from(hash) * n as u64) >> 32) as usize])
        }
    };
    let slot = rt.id.slot() as usize;
    let kt = &mut rt.kthreads[index];
    let need = if (reserve.slot, reserve.index) == (slot, index) {
        1 + reserve.slots
    } else {
        1
    };
    if kt.ingress.data_room(need) < need {
        return Err(NetDrop::RxRingFull);
    }
    let Some(offset) = kt.rx_buffers.pop() else {
        return Err(NetDrop::RxNoBuffer);
    };
    let len = frame.len();
    // The buffer was checked to hold MAX_FRAME bytes when it was posted and frames are never
    // longer; check again rather than trust that reasoning with another runtime's memory.
    let Ok(dst) = rt
        .region
        .packet_area()
        .check(offset, len as u32)
        .and_then(|p| rt.region.packet_bytes(p))
    else {
        return Err(NetDrop::RxNoBuffer);
    };
    // SAFETY: `dst` is `len` bytes inside the runtime's packet area, which stays mapped while
    // the runtime is in the table; no reference to that memory exists in this process (the
    // runtime may write it concurrently, which only garbles its own frame), and `frame` is
    // iokerneld's own memory, so the ranges do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(frame.as_ptr(), dst.as_ptr().cast::<u8>(), len);
    }
    if kt
        .ingress
        .push_data(&[Slot::packet(Command::RxPacket, offset, len as u32)])
        == 0
    {
        // Only when the kthread lied about its ring position; the buffer is lost to it.
        return Err(NetDrop::RxRingFull);
    }
    Ok(index)
}

/// Counts a frame of `len` bytes just placed on kthread `index` of `rt` and makes sure it will
/// be read: by a running kthread, or by one woken for it now (or, for a bare ACK the runtime
/// said may wait, when it next runs).
fn delivered(
    rt: &mut Tenant,
    index: usize,
    len: usize,
    class: &Classification,
    driver: &mut CoreDriver,
    global: &mut NetCounters,
    now: u64,
) {
    rt.net_counters.rx_packets += 1;
    rt.net_counters.rx_bytes += len as u64;
    global.rx_packets += 1;
    global.rx_bytes += len as u64;
    let kt = &mut rt.kthreads[index];
    if rt.active.is_empty() && class.bare_tcp_ack && may_wait(rt.acks_can_wait, kt, driver) {
        // Read when the runtime next runs, or once it has waited `ack_wait_us`.
        kt.waiting_ack_position = Some(kt.ingress.position());
        rt.acks_waiting_since.get_or_insert(now);
        rt.counters.acks_left_waiting += 1;
        return;
    }
    kt.last_rx_position = kt.ingress.position();
    kt.waiting_ack_position = None;
    if rt.active.is_empty() && !rt.core_requested {
        // Nobody is running to see it: kthread 0 has it, and a core is requested once (per
        // allocation pass or wake-up) until one is granted.
        rt.core_requested = true;
        driver.request_core(rt.id, CoreRequest::Now);
    }
}

/// Whether a bare TCP ACK just pushed to `kt`'s ring may wait there without a core being
/// asked for: the runtime said it can wait for them, waiting is on, and the ring stays at most
/// half full (the rest is for what does ask for a core).
fn may_wait(acks_can_wait: bool, kt: &Kthread, driver: &CoreDriver) -> bool {
    let unread = kt
        .ingress
        .position()
        .wrapping_sub(kt.positions.ingress_consumed());
    acks_can_wait && driver.ack_wait_ns() > 0 && unread <= kt.ingress.capacity() / 2
}

/// Where a checked frame from a runtime goes.
enum Route {
    Local(usize),
    Nic,
}

fn route_tx(tables: &Tables, frame: &[u8], class: &Classification) -> Route {
    if frame[0] & 1 == 0 {
        return match tables.macs.get(&mac_key(frame)) {
            Some(&slot) => Route::Local(slot),
            None => Route::Nic,
        };
    }
    if let FrameClass::Arp(arp) = &class.class
        && arp.op == ArpOp::Request
        && let Some(&slot) = tables.ips.get(&ip_key(arp.target_ip.octets()))
    {
        return Route::Local(slot);
    }
    Route::Nic
}

/// Copies the frame a `TxPacket` names into `scratch` and checks it. The outer error is a
/// protocol violation; the inner one a drop.
fn check_tx(
    rt: &Tenant,
    index: usize,
    slot: Slot,
    scratch: &mut [u8; MAX_FRAME],
) -> Result<Result<(usize, Classification), NetDrop>, String> {
    match slot.command_on(RingKind::EgressPacket) {
        Ok(Command::TxPacket) => {}
        Ok(other) => {
            return Err(format!(
                "kthread {index}: {other} is not handled on the {}",
                RingKind::EgressPacket
            ));
        }
        Err(e) => return Err(format!("kthread {index}, {}: {e}", RingKind::EgressPacket)),
    }
    let Ok(packet) = slot.packet_in(rt.region.packet_area()) else {
        return Ok(Err(NetDrop::TxOutOfBounds));
    };
    let len = packet.length() as usize;
    if !(ethernet::HEADER_LEN..=MAX_FRAME).contains(&len) {
        return Ok(Err(NetDrop::TxMalformed));
    }
    let Ok(src) = rt.region.packet_bytes(packet) else {
        return Ok(Err(NetDrop::TxOutOfBounds));
    };
    // SAFETY: `src` is `len` bytes inside the runtime's packet area, mapped while the runtime
    // is in the table; it is only read, through a raw pointer (the runtime may be writing it,
    // which only garbles its own frame: whatever was copied is what gets checked and sent).
    // `scratch` is iokerneld's own and holds MAX_FRAME >= len bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr().cast::<u8>(), scratch.as_mut_ptr(), len);
    }
    let frame = &scratch[..len];
    let Some(id) = rt.net else {
        return Ok(Err(NetDrop::TxSpoofed));
    };
    if frame[6..12] != id.mac {
        return Ok(Err(NetDrop::TxSpoofed));
    }
    let Ok(class) = classify(frame) else {
        return Ok(Err(NetDrop::TxMalformed));
    };
    let genuine = match &class.class {
        FrameClass::Arp(arp) => arp.sender_mac.0 == id.mac && arp.sender_ip.octets() == id.ipv4,
        FrameClass::Flow(flow) => flow.src_ip.octets() == id.ipv4,
        FrameClass::Icmp { src, .. } => src.octets() == id.ipv4,
    };
    if !genuine {
        return Ok(Err(NetDrop::TxSpoofed));
    }
    Ok(Ok((len, class)))
}

impl Switch {
    /// Reads a burst from the NIC, if it is due, and steers it.
    pub(super) fn poll_nic(&mut self, now: u64, registry: &mut Registry, driver: &mut CoreDriver) {
        let sw = self;
        let Some(nic) = sw.nic.as_mut() else {
            return;
        };
        if !sw.nic_busy && now < sw.next_nic_poll {
            return;
        }
        sw.batch.clear();
        let got = nic.recv_burst_at(&mut sw.batch, now);
        sw.nic_busy = got > 0;
        sw.next_nic_poll = now + nic.idle_poll_interval_ns();
        for i in 0..got {
            let frame = sw.batch.frame(i);
            let Some(faults) = sw.faults.rx.as_deref_mut() else {
                let to = Delivery {
                    registry,
                    driver,
                    rss: &sw.rss,
                    global: &mut sw.counters,
                    now,
                };
                receive(&sw.tables, to, frame, Reserve::NONE);
                continue;
            };
            faults.inject(frame, now, &mut |frame| {
                let to = Delivery {
                    registry: &mut *registry,
                    driver: &mut *driver,
                    rss: &sw.rss,
                    global: &mut sw.counters,
                    now,
                };
                receive(&sw.tables, to, frame, Reserve::NONE);
            });
        }
    }

    /// Hands the frames held in runtimes' backlogs to them, oldest first, as far as their posted
    /// buffers and rings take them now (buffers come back with the commands drained just
    /// before). One branch per runtime when nothing is held.
    pub(super) fn drain_backlogs(
        &mut self,
        now: u64,
        registry: &mut Registry,
        driver: &mut CoreDriver,
    ) {
        for slot in 0..registry.slots() {
            let Some(rt) = registry.live_at_mut(slot) else {
                continue;
            };
            // Nothing can move until some kthread has a buffer again (a runtime that stopped
            // posting them costs this one check per iteration).
            if rt.backlog.is_empty() || rt.kthreads.iter().all(|k| k.rx_buffers.len() == 0) {
                continue;
            }
            // Taken out for the loop so that its frames can be read while the runtime's rings
            // are written; an empty backlog owns no memory, so this moves two pointers.
            let mut backlog = std::mem::take(&mut rt.backlog);
            while let Some(frame) = backlog.front() {
                // It was classified when it arrived; only its steering is needed again.
                let Ok(class) = classify(frame) else {
                    backlog.pop_front();
                    continue;
                };
                let Ok(index) = place(rt, &self.rss, frame, &class, Reserve::NONE) else {
                    break;
                };
                delivered(
                    rt,
                    index,
                    frame.len(),
                    &class,
                    driver,
                    &mut self.counters,
                    now,
                );
                backlog.pop_front();
            }
            rt.backlog = backlog;
        }
    }

    /// Passes on the frames the fault injectors held back whose time has come (one branch
    /// when no injector holds frames).
    #[inline]
    pub(super) fn release_held(
        &mut self,
        now: u64,
        registry: &mut Registry,
        driver: &mut CoreDriver,
    ) {
        if self.faults.holding {
            self.release_due(now, registry, driver);
        }
    }

    fn release_due(&mut self, now: u64, registry: &mut Registry, driver: &mut CoreDriver) {
        let sw = self;
        for faults in [sw.faults.rx.as_deref_mut(), sw.faults.local.as_deref_mut()]
            .into_iter()
            .flatten()
        {
            faults.release_due(now, &mut |frame| {
                let to = Delivery {
                    registry: &mut *registry,
                    driver: &mut *driver,
                    rss: &sw.rss,
                    global: &mut sw.counters,
                    now,
                };
                receive(&sw.tables, to, frame, Reserve::NONE);
            });
        }
        if let (Some(faults), Some(nic)) = (sw.faults.tx.as_deref_mut(), sw.nic.as_mut()) {
            faults.release_due(now, &mut |frame| {
                if nic.send(frame).is_err() {
                    sw.counters.drop(NetDrop::NicSendFailed);
                }
            });
            nic.flush();
        }
    }

    /// Drains the egress packet rings of active kthreads (and of parked ones that may have left
    /// frames), a burst per ring.
    pub(super) fn drain_tx(&mut self, now: u64, registry: &mut Registry, driver: &mut CoreDriver) {
        self.drain_tx_rings(now, registry, driver);
        if let Some(nic) = self.nic.as_mut() {
            nic.flush();
        }
    }

    fn drain_tx_rings(&mut self, now: u64, registry: &mut Registry, driver: &mut CoreDriver) {
        for slot in 0..registry.slots() {
            let mut polled = 0;
            while let Some(rt) = registry.at_mut(slot) {
                if rt.evicting || polled >= rt.tx_poll.len() {
                    break;
                }
                let index = usize::from(rt.tx_poll[polled]);
                match self.tx_burst(now, slot, index, registry, driver) {
                    Ok(true) => polled += 1,
                    // It left the list; the next one moved into its place.
                    Ok(false) => {}
                    Err(reason) => {
                        if let Some(id) = registry.at(slot).map(|r| r.id) {
                            registry.mark_for_eviction(id, reason);
                        }
                        break;
                    }
                }
            }
        }
    }

    /// One burst from one kthread's egress packet ring. Returns whether the kthread stays in
    /// the runtime's polled list (a parked one leaves it once its ring is empty).
    fn tx_burst(
        &mut self,
        now: u64,
        slot: usize,
        index: usize,
        registry: &mut Registry,
        driver: &mut CoreDriver,
    ) -> Result<bool, String> {
        let sw = self;
        let Some(rt) = registry.at_mut(slot) else {
            return Ok(true);
        };
        let kt = &mut rt.kthreads[index];
        let room = kt.ingress.data_room(TX_BURST as u32) as usize;
        if room == 0 {
            return Ok(true);
        }
        let n = kt.packets.pop_batch(&mut sw.tx_slots[..room]);
        if n == 0 {
            if kt.linger {
                kt.linger = false;
                rt.tx_poll.retain(|&k| usize::from(k) != index);
                return Ok(false);
            }
            return Ok(true);
        }
        let mut completions = [Slot::default(); TX_BURST];
        for (i, completion) in completions.iter_mut().enumerate().take(n) {
            let desc = sw.tx_slots[i];
            let rt = registry
                .at_mut(slot)
                .expect("the sender stays registered during its burst");
            let checked = check_tx(rt, index, desc, &mut sw.scratch)?;
            // Ok((length, switched locally)); Err(None) for a drop counted on the receiver.
            let outcome: Result<(usize, bool), Option<NetDrop>> = match checked {
                Err(why) => Err(Some(why)),
                Ok((len, class)) => {
                    let frame = &sw.scratch[..len];
                    match route_tx(&sw.tables, frame, &class) {
                        Route::Local(to) => {
                            // The burst's completions, pushed at its end, were promised room
                            // on the sender's ring; a frame to itself must not take it.
                            let reserve = Reserve {
                                slot,
                                index,
                                slots: n as u32,
                            };
                            if let Some(faults) = sw.faults.local.as_deref_mut() {
                                // What leaves the injector now may be frames it held for other
                                // runtimes: each is steered by its own address.
                                faults.inject(frame, now, &mut |frame| {
                                    let delivery = Delivery {
                                        registry: &mut *registry,
                                        driver: &mut *driver,
                                        rss: &sw.rss,
                                        global: &mut sw.counters,
                                        now,
                                    };
                                    receive(&sw.tables, delivery, frame, reserve);
                                });
                                Ok((len, true))
                            } else {
                                let delivery = Delivery {
                                    registry: &mut *registry,
                                    driver: &mut *driver,
                                    rss: &sw.rss,
                                    global: &mut sw.counters,
                                    now,
                                };
                                if deliver(delivery, to, frame, &class, reserve) {
                                    Ok((len, true))
                                } else {
                                    Err(None)
                                }
                            }
                        }
                        Route::Nic => match (sw.nic.as_mut(), sw.faults.tx.as_deref_mut()) {
                            (None, _) => Err(Some(NetDrop::TxNoRoute)),
                            (Some(nic), None) => match nic.send(frame) {
                                Ok(()) => Ok((len, false)),
                                Err(_) => Err(Some(NetDrop::NicSendFailed)),
                            },
                            (Some(nic), Some(faults)) => {
                                // Sent, as far as the runtime knows; what the injector then
                                // does to it happens on the wire.
                                faults.inject(frame, now, &mut |frame| {
                                    if nic.send(frame).is_err() {
                                        sw.counters.drop(NetDrop::NicSendFailed);
                                    }
                                });
                                Ok((len, false))
                            }
                        },
                    }
                }
            };
            let rt = registry
                .at_mut(slot)
                .expect("the sender stays registered during its burst");
            let sent = match outcome {
                Ok((len, local)) => {
                    for c in [&mut rt.net_counters, &mut sw.counters] {
                        c.tx_packets += 1;
                        c.tx_bytes += len as u64;
                        c.local_switched += u64::from(local);
                    }
                    true
                }
                Err(Some(why)) => {
                    rt.net_counters.drop(why);
                    sw.counters.drop(why);
                    false
                }
                Err(None) => false,
            };
            let flag = if sent { 0 } else { flags::DROPPED };
            *completion = Slot::new(Command::TxCompletion, flag, 0, desc.payload());
        }
        let rt = registry
            .at_mut(slot)
            .expect("the sender stays registered during its burst");
        // Room was checked before the descriptors were taken; fewer fit only if the kthread
        // lied about its ring position, and then the loss is its own.
        rt.kthreads[index].ingress.push_data(&completions[..n]);
        if !rt.kthreads[index].active && rt.active.is_empty() && !rt.core_requested {
            // Frames pushed just before the kthread parked: their completions may be what a
            // blocked sender waits for, and no running kthread will see them. Ask for the next
            // idle core, without taking one from anybody (this often follows a preemption).
            rt.core_requested = true;
            driver.request_core(rt.id, CoreRequest::WhenIdle);
        }
        Ok(true)
    }
}

/// Steers one frame that arrived from the NIC (or, with faults on the local path, from a
/// runtime), leaving `reserve` free.
fn receive(tables: &Tables, to: Delivery<'_>, frame: &[u8], reserve: Reserve) {
    if frame.len() > MAX_FRAME {
        to.global.drop(NetDrop::RxTooBig);
        return;
    }
    if frame.len() < ethernet::HEADER_LEN {
        to.global.rx_parse_drops[DropReason::Truncated.index()] += 1;
        return;
    }
    if frame[0] & 1 != 0 {
        match classify(frame) {
            Ok(
                class @ Classification {
                    class: FrameClass::Arp(arp),
                    ..
                },
            ) if arp.op == ArpOp::Request => {
                match tables.ips.get(&ip_key(arp.target_ip.octets())) {
                    Some(&slot) => {
                        deliver(to, slot, frame, &class, reserve);
                    }
                    None => to.global.drop(NetDrop::RxArpNotLocal),
                }
            }
            _ => to.global.drop(NetDrop::RxBroadcastIgnored),
        }
        return;
    }
    let Some(&slot) = tables.macs.get(&mac_key(frame)) else {
        to.global.drop(NetDrop::RxUnknownMac);
        return;
    };
    match classify(frame) {
        Ok(c) => {
            deliver(to, slot, frame, &c, reserve);
        }
        Err(why) => {
            to.global.rx_parse_drops[why.index()] += 1;
            if let Some(rt) = to.registry.at_mut(slot) {
                rt.net_counters.rx_parse_drops[why.index()] += 1;
            }
        }
    }
}
