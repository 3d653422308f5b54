//! Access to a mapped region: snapshot and validate the header, then hand out ring views and
//! packet pointers whose offsets come only from the validated snapshot.

use core::alloc::Layout as AllocLayout;
use core::marker::PhantomData;
use core::mem::size_of;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error};

use crate::layout::{HEADER_SIZE, KTHREAD_CONTROL_SIZE};
use crate::ring::{Consumer, Producer, RingPositions, SlotCell};
use crate::slot::{PacketArea, PacketRef, SlotError};
use crate::{CACHE_LINE, Header, Layout, LayoutError, RegionBuilder, RingKind};

#[cfg(not(target_pointer_width = "64"))]
compile_error!("corral-abi assumes 64-bit offsets fit in usize");

/// The cache line at the start of each kthread area that iokerneld's allocator reads every
/// pass. Only the runtime's kthread writes it, so the allocator's reads never contend with
/// iokerneld's own writes.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct QueuePositions {
    /// Consumer position of the ingress ring: the ring's own cell, not a copy, so that popping
    /// costs no extra store. (Its producer position is iokerneld's own and lives elsewhere, on a
    /// line the runtime never writes.)
    ingress_head: AtomicU32,
    /// Run queue head (items taken), published by the runtime.
    pub runq_head: AtomicU32,
    /// Run queue tail (items added), published by the runtime.
    pub runq_tail: AtomicU32,
    /// Items ever added to the queue the runtime's kthreads share for work handed in from
    /// outside them. Meaningful in kthread 0's line only; iokerneld reads it even while every
    /// kthread is parked, which is how a runtime with no core asks for one.
    pub shared_tail: AtomicU32,
    /// Items ever taken from that shared queue (kthread 0's line only).
    pub shared_head: AtomicU32,
}

impl QueuePositions {
    /// Items the kthread has taken off its ingress ring. Untrusted when read by iokerneld.
    #[inline]
    pub fn ingress_consumed(&self) -> u32 {
        self.ingress_head.load(Ordering::Acquire)
    }

    /// Publishes the run queue's positions (runtime side).
    #[inline]
    pub fn publish_runq(&self, head: u32, tail: u32) {
        self.runq_tail.store(tail, Ordering::Release);
        self.runq_head.store(head, Ordering::Release);
    }

    /// The shared queue's positions (kthread 0's line). Untrusted when read by iokerneld.
    #[inline]
    pub fn shared_queue(&self) -> RingPositions {
        snapshot(&self.shared_tail, &self.shared_head)
    }

    /// The run queue's published positions. Untrusted when read by iokerneld.
    #[inline]
    pub fn runq(&self) -> RingPositions {
        snapshot(&self.runq_tail, &self.runq_head)
    }
}

/// A consistent-enough snapshot of a queue whose two ends move while it is read.
///
/// The tail is read first: the head read afterwards is at least the head at that moment, so
/// the length can only come out smaller than the queue ever was, never longer than its
/// capacity. Reading the head first could pair an old head with a tail pushed after later
/// pops, and a correct runtime would look impossible. If consumers overtook the tail read in
/// between, the queue was empty by then, and it is reported empty at the tail read. Both
/// positions stay monotonic from one snapshot to the next.
#[inline]
fn snapshot(tail: &AtomicU32, head: &AtomicU32) -> RingPositions {
    let produced = tail.load(Ordering::Acquire);
    let consumed = head.load(Ordering::Acquire);
    // Signed distance: the consumer is ahead when it is less than 2^31 past the producer.
    let ahead = (consumed.wrapping_sub(produced) as i32) > 0;
    RingPositions {
        produced,
        consumed: if ahead { produced } else { consumed },
    }
}

/// Positions written only by the runtime's kthread, besides [`QueuePositions`]: its egress
/// producers'. iokerneld reads them only for observation.
#[repr(C, align(64))]
struct RuntimeLine {
    egress_packet_tail: AtomicU32,
    egress_command_tail: AtomicU32,
    /// When the kthread's preemption signal handler last ran (`CLOCK_MONOTONIC` nanoseconds):
    /// with the time iokerneld sent the signal and the time it saw the kthread park, this splits
    /// a core hand-over into signal delivery and parking. Untrusted, for statistics only.
    preempt_seen_ns: AtomicU64,
    /// The earliest deadline of the kthread's timers (`CLOCK_MONOTONIC` nanoseconds), 0 when it
    /// has none. Stored whenever its timer heap changes. iokerneld signals a kthread that holds
    /// a core and lets a deadline pass by a whole `net_kick_us` (its uthreads do not yield, so
    /// its scheduler does not run its timers), at most once per `net_kick_us`: a runtime that
    /// lies here only earns itself rate-limited signals.
    timer_deadline_ns: AtomicU64,
}

/// Positions written only by iokerneld.
#[repr(C, align(64))]
struct IokernelLine {
    ingress_tail: AtomicU32,
    egress_packet_head: AtomicU32,
    egress_command_head: AtomicU32,
    _pad: u32,
    /// When iokerneld decided to give this kthread its current core (`CLOCK_MONOTONIC`
    /// nanoseconds): the runtime measures its wake-up latency from it.
    wake_decision_ns: AtomicU64,
    /// When iokerneld last rang the kthread's wake word to wake it: the runtime measures the
    /// wake-up itself (wake to running) from it.
    wake_sent_ns: AtomicU64,
    /// The kthread's wake word, a futex shared by both processes: iokerneld adds one after
    /// pushing a grant and then wakes the futex (itself, or through the helper thread on the
    /// granted core); a parked kthread sleeps on it. The runtime adds one itself only to wake
    /// its own kthreads for shutdown. Nothing iokerneld decides depends on its value, so what
    /// a runtime writes here can only wake, or fail to wake, its own kthreads.
    wake_word: AtomicU32,
    /// The cede word: iokerneld adds one after pushing `Preempt`. A running kthread compares it
    /// with the value it last saw each time a uthread yields or blocks, and goes to its
    /// scheduler (which reads the ring and parks) when it moved: that is how a kthread gives
    /// its core back without the preemption signal. iokerneld never reads it back.
    cede_word: AtomicU32,
}

/// The control lines at the start of every kthread area.
#[repr(C)]
struct KthreadControl {
    positions: QueuePositions,
    runtime: RuntimeLine,
    iokernel: IokernelLine,
    reported: ReportedCounters,
}

/// Counters the runtime reports about itself (its network stack's, TCP's included), for
/// `iokerneld stats`: [`REPORTED_COUNTERS`] names each slot. Meaningful in kthread 0's area
/// only. The runtime overwrites the block now and then with relaxed stores (never per packet);
/// iokerneld only prints what it reads there, never decides anything by it.
#[repr(C, align(64))]
pub struct ReportedCounters {
    slots: [AtomicU64; REPORTED_SLOTS],
}

impl ReportedCounters {
    /// Stores slot `index` (an index into [`REPORTED_COUNTERS`]; others are ignored).
    #[inline]
    pub fn store(&self, index: usize, value: u64) {
        if let Some(slot) = self.slots.get(index) {
            slot.store(value, Ordering::Relaxed);
        }
    }

    /// Reads every named slot, in [`REPORTED_COUNTERS`]'s order. Untrusted when read by
    /// iokerneld.
    pub fn read(&self) -> [u64; REPORTED_COUNTERS.len()] {
        core::array::from_fn(|i| self.slots[i].load(Ordering::Relaxed))
    }
}

/// Slots in the [`ReportedCounters`] block: more than are named, so that counters can be added
/// without moving the rings.
pub const REPORTED_SLOTS: usize = 96;

/// The name of each [`ReportedCounters`] slot, in order: `net.` for the runtime's stack
/// (`NetStats`' field names), `tcp.` for its TCP (`TcpCounters`: `ConnStats`' field names and
/// its own), `tcp.drops.` for TCP's drop reasons (`TcpDrop::as_str`). `published_at_ns` is when
/// the runtime last wrote the block (`CLOCK_MONOTONIC`, 0: never).
pub const REPORTED_COUNTERS: [&str; 57] = [
    "published_at_ns",
    "net.rx_packets",
    "net.rx_bytes",
    "net.tx_packets",
    "net.tx_bytes",
    "net.loopback_packets",
    "net.icmp_echo_requests",
    "net.icmp_echo_replies_sent",
    "net.udp_rx_datagrams",
    "net.udp_tx_datagrams",
    "net.drops",
    "tcp.segments_in",
    "tcp.segments_out",
    "tcp.bytes_in",
    "tcp.bytes_out",
    "tcp.rto_retransmits",
    "tcp.fast_retransmits",
    "tcp.syn_retransmits",
    "tcp.timeouts",
    "tcp.recoveries",
    "tcp.dup_acks_in",
    "tcp.ooo_segments",
    "tcp.duplicate_segments",
    "tcp.delayed_acks",
    "tcp.challenge_acks",
    "tcp.zero_window_probes",
    "tcp.keepalive_probes",
    "tcp.active_opens",
    "tcp.passive_opens",
    "tcp.failed_opens",
    "tcp.resets_sent",
    "tcp.resets_received",
    "tcp.syn_cookies_sent",
    "tcp.syn_cookies_accepted",
    "tcp.established_now",
    "tcp.table_peak",
    "tcp.drops.no_connection",
    "tcp.drops.out_of_window",
    "tcp.drops.paws_rejected",
    "tcp.drops.rst_challenged",
    "tcp.drops.rst_out_of_window",
    "tcp.drops.syn_challenged",
    "tcp.drops.ack_of_unsent_data",
    "tcp.drops.ack_too_old",
    "tcp.drops.no_ack_flag",
    "tcp.drops.bad_flags",
    "tcp.drops.beyond_window",
    "tcp.drops.ooo_queue_full",
    "tcp.drops.syn_backlog_full",
    "tcp.drops.accept_queue_full",
    "tcp.drops.bad_cookie",
    "tcp.drops.table_full",
    "tcp.drops.bad_checksum",
    "tcp.drops.bad_header",
    // Signals from iokerneld that found the kthread with no request to cede its core: kicks for
    // network work or overdue timers while its uthreads did not yield.
    "sched.kicks",
    // Added after the rest, so that no earlier name moves to another slot.
    "tcp.out_of_window_acks",
    "tcp.acks_rate_limited",
];

const _: () = assert!(REPORTED_COUNTERS.len() <= REPORTED_SLOTS);

/// The index of the [`ReportedCounters`] slot named `name`, if there is one.
pub const fn reported_index(name: &str) -> Option<usize> {
    let mut i = 0;
    while i < REPORTED_COUNTERS.len() {
        if const_str_eq(REPORTED_COUNTERS[i], name) {
            return Some(i);
        }
        i += 1;
    }
    None
}

const fn const_str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// Pin the control lines' layout (see KthreadLayout): each side must find each cell at the same
// offset, and producer and consumer cells of one ring must sit on different lines.
const _: () = {
    use core::mem::offset_of;
    assert!(size_of::<QueuePositions>() == CACHE_LINE);
    assert!(size_of::<KthreadControl>() as u64 == KTHREAD_CONTROL_SIZE);
    assert!(core::mem::align_of::<KthreadControl>() == CACHE_LINE);
    assert!(offset_of!(KthreadControl, positions) + offset_of!(QueuePositions, ingress_head) == 0);
    assert!(offset_of!(QueuePositions, runq_head) == 4);
    assert!(offset_of!(QueuePositions, runq_tail) == 8);
    assert!(offset_of!(QueuePositions, shared_tail) == 12);
    assert!(offset_of!(QueuePositions, shared_head) == 16);
    assert!(offset_of!(KthreadControl, runtime) == 64);
    assert!(offset_of!(RuntimeLine, egress_packet_tail) == 0);
    assert!(offset_of!(RuntimeLine, egress_command_tail) == 4);
    assert!(offset_of!(RuntimeLine, preempt_seen_ns) == 8);
    assert!(offset_of!(RuntimeLine, timer_deadline_ns) == 16);
    assert!(offset_of!(KthreadControl, reported) == 192);
    assert!(size_of::<ReportedCounters>() == REPORTED_SLOTS * 8);
    assert!(offset_of!(KthreadControl, iokernel) == 128);
    assert!(offset_of!(IokernelLine, ingress_tail) == 0);
    assert!(offset_of!(IokernelLine, egress_packet_head) == 4);
    assert!(offset_of!(IokernelLine, egress_command_head) == 8);
    assert!(offset_of!(IokernelLine, wake_decision_ns) == 16);
    assert!(offset_of!(IokernelLine, wake_sent_ns) == 24);
    assert!(offset_of!(IokernelLine, wake_word) == 32);
    assert!(offset_of!(IokernelLine, cede_word) == 36);
};

/// A mapping of a region: base and length, with the promise that it stays valid for `'a`.
#[derive(Clone, Copy, Debug)]
pub struct RawRegion<'a> {
    base: NonNull<u8>,
    len: usize,
    _memory: PhantomData<&'a [AtomicU64]>,
}

// SAFETY: a RawRegion is an address range valid for 'a (see `new`); everything this crate does
// through it is atomic loads and stores, which any thread may perform.
unsafe impl Send for RawRegion<'_> {}
// SAFETY: as for Send; shared access hands out only atomics and raw pointers.
unsafe impl Sync for RawRegion<'_> {}

impl<'a> RawRegion<'a> {
    /// Wraps a mapping.
    ///
    /// # Safety
    ///
    /// For all of `'a`, `base..base + len` must stay mapped readable and writable, and this
    /// process must not access the header, kthread areas or rings other than through this
    /// crate (atomically) nor hold a `&mut` to any of it. Another process may write anything
    /// anywhere: that is what validation is for. The packet area is the caller's to access
    /// through the raw pointers [`Region::packet_bytes`] returns.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        RawRegion {
            base,
            len,
            _memory: PhantomData,
        }
    }

    /// Base address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A private snapshot of the header. The peer may rewrite the header at any time; validate
    /// and use only the snapshot.
    pub fn read_header(&self) -> Result<Header, LayoutError> {
        if (self.len as u64) < HEADER_SIZE {
            return Err(LayoutError::RegionTooSmall {
                mapped: self.len as u64,
            });
        }
        let addr = self.base.as_ptr() as usize;
        if !addr.is_multiple_of(CACHE_LINE) {
            return Err(LayoutError::MisalignedBase { addr });
        }
        const WORDS: usize = size_of::<Header>() / 8;
        // SAFETY: the mapping is at least HEADER_SIZE bytes (checked above) and 64-aligned, and
        // `new`'s contract says it is valid for 'a and accessed only atomically here.
        let live =
            unsafe { core::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU64>(), WORDS) };
        let mut words = [0u64; WORDS];
        for (w, cell) in words.iter_mut().zip(live) {
            *w = cell.load(Ordering::Relaxed);
        }
        // SAFETY: Header is repr(C), all integers, and exactly WORDS words with no padding (the
        // size assertion in layout.rs), so every bit pattern is a valid Header.
        Ok(unsafe { core::mem::transmute::<[u64; WORDS], Header>(words) })
    }

    /// Snapshots and validates the header against this mapping's length.
    pub fn attach(self) -> Result<Region<'a>, LayoutError> {
        let layout = self.read_header()?.validate(self.len as u64)?;
        Ok(Region { raw: self, layout })
    }
}

/// A region whose header has been validated. All offsets it uses come from that snapshot.
#[derive(Clone, Debug)]
pub struct Region<'a> {
    raw: RawRegion<'a>,
    layout: Layout,
}

impl<'a> Region<'a> {
    /// The validated layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The mapping.
    pub fn raw(&self) -> RawRegion<'a> {
        self.raw
    }

    /// The packet area.
    pub fn packet_area(&self) -> PacketArea {
        self.layout.packet_area()
    }

    /// Kthread `index`'s queue positions and rings, if there is such a kthread.
    pub fn kthread(&self, index: u32) -> Option<KthreadView<'a>> {
        let offset = self.layout.kthread_offset(index)? as usize;
        let k = self.layout.kthread_layout();
        let slots = |at: u64, kind: RingKind| -> &'a [SlotCell] {
            let n = self.layout.ring_slots(kind) as usize;
            // SAFETY: validation proved the kthread area [offset, offset + kthread_area_size)
            // lies inside the mapping, is 64-aligned, and is at least KthreadLayout::size, which
            // holds this ring's n 16-byte slots at `at`. The memory is valid for 'a and accessed
            // only atomically (RawRegion::new); SlotCell is two atomics, valid for any bits.
            unsafe {
                core::slice::from_raw_parts(
                    self.raw
                        .base
                        .as_ptr()
                        .add(offset + at as usize)
                        .cast::<SlotCell>(),
                    n,
                )
            }
        };
        // SAFETY: as above; KthreadControl's KTHREAD_CONTROL_SIZE bytes of atomics sit at the
        // start of the area.
        let control = unsafe { &*self.raw.base.as_ptr().add(offset).cast::<KthreadControl>() };
        Some(KthreadView {
            control,
            ingress: slots(k.ingress, RingKind::Ingress),
            egress_packet: slots(k.egress_packet, RingKind::EgressPacket),
            egress_command: slots(k.egress_command, RingKind::EgressCommand),
        })
    }

    /// A raw pointer to the bytes `packet` names, after checking them against this region's
    /// packet area (a [`PacketRef`] checked against another area is rejected, not trusted).
    /// The peer may change the bytes at any time: copy them before parsing.
    pub fn packet_bytes(&self, packet: PacketRef) -> Result<NonNull<[u8]>, SlotError> {
        let area = self.layout.packet_area();
        let packet = area.check(packet.offset(), packet.length())?;
        // SAFETY: the packet area lies inside the mapping (validated) and `packet` lies inside
        // the packet area (checked just above), so the address stays within the mapping.
        let start = unsafe {
            self.raw
                .base
                .add(area.offset as usize + packet.offset() as usize)
        };
        Ok(NonNull::slice_from_raw_parts(
            start,
            packet.length() as usize,
        ))
    }
}

/// One kthread's part of a region. Each `*_producer` / `*_consumer` returns a fresh view at
/// position 0: make one per ring per side, once, and keep it.
#[derive(Clone, Copy)]
pub struct KthreadView<'a> {
    control: &'a KthreadControl,
    ingress: &'a [SlotCell],
    egress_packet: &'a [SlotCell],
    egress_command: &'a [SlotCell],
}

impl<'a> KthreadView<'a> {
    /// The allocator's cache line.
    pub fn positions(&self) -> &'a QueuePositions {
        &self.control.positions
    }

    /// iokerneld side: records when it decided to give this kthread a core (the decision to
    /// preempt another runtime for it, or the grant itself), before waking it.
    pub fn publish_wake_decision(&self, monotonic_ns: u64) {
        self.control
            .iokernel
            .wake_decision_ns
            .store(monotonic_ns, Ordering::Release);
    }

    /// Runtime side: when iokerneld decided to give this kthread its current core (0: never).
    pub fn wake_decision(&self) -> &'a AtomicU64 {
        &self.control.iokernel.wake_decision_ns
    }

    /// The kthread's wake word (a shared futex): iokerneld rings it, the parked kthread sleeps
    /// on it. See `IokernelLine::wake_word` for who may write it.
    pub fn wake_word(&self) -> &'a AtomicU32 {
        &self.control.iokernel.wake_word
    }

    /// The kthread's cede word: iokerneld adds one after each `Preempt` it pushes; see
    /// `IokernelLine::cede_word`.
    pub fn cede_word(&self) -> &'a AtomicU32 {
        &self.control.iokernel.cede_word
    }

    /// iokerneld side: records that it is about to ring the kthread's wake word.
    pub fn publish_wake_sent(&self, monotonic_ns: u64) {
        self.control
            .iokernel
            .wake_sent_ns
            .store(monotonic_ns, Ordering::Release);
    }

    /// Runtime side: when iokerneld last rang this kthread's wake word (0: never).
    pub fn wake_sent(&self) -> &'a AtomicU64 {
        &self.control.iokernel.wake_sent_ns
    }

    /// Runtime side: where the kthread records when its preemption signal handler ran.
    pub fn preempt_seen(&self) -> &'a AtomicU64 {
        &self.control.runtime.preempt_seen_ns
    }

    /// iokerneld side: when the kthread says its preemption signal handler last ran (0: never).
    /// Written by the runtime, so only good for statistics.
    pub fn preempt_seen_ns(&self) -> u64 {
        self.control.runtime.preempt_seen_ns.load(Ordering::Acquire)
    }

    /// Runtime side: where the kthread stores its earliest timer deadline (0: none).
    pub fn timer_deadline(&self) -> &'a AtomicU64 {
        &self.control.runtime.timer_deadline_ns
    }

    /// iokerneld side: the kthread's earliest timer deadline as it says (`None`: no timer).
    /// Untrusted.
    pub fn timer_deadline_ns(&self) -> Option<u64> {
        match self
            .control
            .runtime
            .timer_deadline_ns
            .load(Ordering::Relaxed)
        {
            0 => None,
            t => Some(t),
        }
    }

    /// The block of counters the runtime reports about itself (meaningful for kthread 0).
    pub fn reported(&self) -> &'a ReportedCounters {
        &self.control.reported
    }

    /// Both published positions of a ring, read from shared memory: consumer first, then
    /// producer, so that a well-behaved pair never shows more taken than added. For monitoring
    /// (tests and tools; iokerneld's scheduling never reads it); untrusted when the peer is.
    pub fn ring_positions(&self, kind: RingKind) -> RingPositions {
        let c = self.control;
        let (head, tail) = match kind {
            RingKind::Ingress => (&c.positions.ingress_head, &c.iokernel.ingress_tail),
            RingKind::EgressPacket => (
                &c.iokernel.egress_packet_head,
                &c.runtime.egress_packet_tail,
            ),
            RingKind::EgressCommand => (
                &c.iokernel.egress_command_head,
                &c.runtime.egress_command_tail,
            ),
        };
        let consumed = head.load(Ordering::Acquire);
        let produced = tail.load(Ordering::Acquire);
        RingPositions { produced, consumed }
    }

    /// iokerneld's end of the ingress ring.
    pub fn ingress_producer(&self) -> Producer<'a> {
        let c = self.control;
        producer(
            self.ingress,
            &c.iokernel.ingress_tail,
            &c.positions.ingress_head,
        )
    }

    /// The kthread's end of the ingress ring.
    pub fn ingress_consumer(&self) -> Consumer<'a> {
        let c = self.control;
        consumer(
            self.ingress,
            &c.positions.ingress_head,
            &c.iokernel.ingress_tail,
        )
    }

    /// The kthread's end of the egress packet ring.
    pub fn egress_packet_producer(&self) -> Producer<'a> {
        let c = self.control;
        producer(
            self.egress_packet,
            &c.runtime.egress_packet_tail,
            &c.iokernel.egress_packet_head,
        )
    }

    /// iokerneld's end of the egress packet ring.
    pub fn egress_packet_consumer(&self) -> Consumer<'a> {
        let c = self.control;
        consumer(
            self.egress_packet,
            &c.iokernel.egress_packet_head,
            &c.runtime.egress_packet_tail,
        )
    }

    /// The kthread's end of the egress command ring.
    pub fn egress_command_producer(&self) -> Producer<'a> {
        let c = self.control;
        producer(
            self.egress_command,
            &c.runtime.egress_command_tail,
            &c.iokernel.egress_command_head,
        )
    }

    /// iokerneld's end of the egress command ring.
    pub fn egress_command_consumer(&self) -> Consumer<'a> {
        let c = self.control;
        consumer(
            self.egress_command,
            &c.iokernel.egress_command_head,
            &c.runtime.egress_command_tail,
        )
    }
}

// Ring sizes in a validated layout are powers of two within bounds, so these cannot fail.
fn producer<'a>(slots: &'a [SlotCell], tail: &'a AtomicU32, head: &'a AtomicU32) -> Producer<'a> {
    Producer::new(slots, tail, head).expect("validated ring size")
}

fn consumer<'a>(slots: &'a [SlotCell], head: &'a AtomicU32, tail: &'a AtomicU32) -> Consumer<'a> {
    Consumer::new(slots, head, tail).expect("validated ring size")
}

/// A page-aligned heap region, laid out by a builder: for tests, and for a runtime that shares
/// nothing (standalone mode).
#[derive(Debug)]
pub struct OwnedRegion {
    ptr: NonNull<u8>,
    alloc: AllocLayout,
}

// SAFETY: the allocation is owned; shared access goes through RawRegion (atomics only) and
// exclusive access needs &mut.
unsafe impl Send for OwnedRegion {}
// SAFETY: as for Send.
unsafe impl Sync for OwnedRegion {}

impl OwnedRegion {
    /// Allocates and lays out a region.
    pub fn new(builder: &RegionBuilder) -> Result<OwnedRegion, LayoutError> {
        let size = builder.layout()?.region_size() as usize;
        let alloc = AllocLayout::from_size_align(size, 4096)
            .map_err(|_| LayoutError::PacketAreaTooLarge { size: size as u64 })?;
        // SAFETY: `alloc` has a nonzero size (a region holds at least a header).
        let ptr = unsafe { alloc_zeroed(alloc) };
        let Some(ptr) = NonNull::new(ptr) else {
            handle_alloc_error(alloc)
        };
        let mut region = OwnedRegion { ptr, alloc };
        builder.init(region.as_mut_slice())?;
        Ok(region)
    }

    /// The memory, for writing (tests use it to corrupt headers).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `alloc.size()` initialised (zeroed) bytes that we own, and
        // &mut self rules out any RawRegion borrowed from us.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.alloc.size()) }
    }

    /// The mapping, borrowed.
    pub fn raw(&self) -> RawRegion<'_> {
        // SAFETY: the allocation lives until drop, which the borrow prevents while the
        // RawRegion lives, and &mut access (as_mut_slice) is excluded by the same borrow.
        unsafe { RawRegion::new(self.ptr, self.alloc.size()) }
    }

    /// Validates and returns the region.
    pub fn attach(&self) -> Result<Region<'_>, LayoutError> {
        self.raw().attach()
    }
}

impl Drop for OwnedRegion {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.alloc) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, MAGIC, Slot};

    fn builder() -> RegionBuilder {
        RegionBuilder::new(2)
            .ingress_slots(8)
            .egress_packet_slots(4)
            .egress_command_slots(4)
            .packet_area_size(8192)
    }

    #[test]
    fn attach_and_talk_both_ways() {
        let owned = OwnedRegion::new(&builder()).unwrap();
        let rt = owned.attach().unwrap();
        let io = owned.attach().unwrap();
        assert_eq!(rt.layout(), io.layout());
        let k_rt = rt.kthread(1).unwrap();
        let k_io = io.kthread(1).unwrap();
        assert!(io.kthread(2).is_none());

        let mut ingress_tx = k_io.ingress_producer();
        let mut ingress_rx = k_rt.ingress_consumer();
        ingress_tx
            .try_push(Slot::packet(Command::RxPacket, 128, 60))
            .unwrap();
        let s = ingress_rx.try_pop().unwrap();
        assert_eq!(s.command_on(RingKind::Ingress), Ok(Command::RxPacket));
        assert_eq!(k_io.positions().ingress_consumed(), 1);
        assert_eq!(ingress_tx.positions().pending(), 0);

        let mut tx = k_rt.egress_packet_producer();
        let mut tx_io = k_io.egress_packet_consumer();
        let mut cmd = k_rt.egress_command_producer();
        let mut cmd_io = k_io.egress_command_consumer();
        for _ in 0..4 {
            tx.try_push(Slot::packet(Command::TxPacket, 0, 64)).unwrap();
        }
        assert!(tx.try_push(Slot::packet(Command::TxPacket, 0, 64)).is_err());
        // The command ring is not held up by the full packet ring.
        cmd.try_push(Slot::value(Command::Park, 0)).unwrap();
        assert_eq!(
            cmd_io
                .try_pop()
                .unwrap()
                .command_on(RingKind::EgressCommand),
            Ok(Command::Park)
        );
        assert_eq!(tx_io.positions().pending(), 4);
        let p = tx_io.try_pop().unwrap();
        let r = p.packet_in(io.packet_area()).unwrap();
        let bytes = io.packet_bytes(r).unwrap();
        assert_eq!(bytes.len(), 64);
        assert_eq!(
            bytes.cast::<u8>().as_ptr() as usize - owned.raw().as_ptr() as usize,
            io.packet_area().offset as usize
        );

        k_rt.positions().publish_runq(3, 5);
        assert_eq!(k_io.positions().runq().pending(), 2);

        // Kthread 0's rings are separate from kthread 1's.
        assert!(
            rt.kthread(0)
                .unwrap()
                .ingress_consumer()
                .try_pop()
                .is_none()
        );
    }

    #[test]
    fn packet_refs_from_another_area_are_rechecked() {
        let owned = OwnedRegion::new(&builder()).unwrap();
        let region = owned.attach().unwrap();
        let big = PacketArea {
            offset: 0,
            size: 1 << 30,
        };
        let r = big.check(8000, 1000).unwrap();
        assert_eq!(
            region.packet_bytes(r).unwrap_err(),
            SlotError::PacketOutOfBounds {
                offset: 8000,
                length: 1000,
                area_size: 8192
            }
        );
    }

    #[test]
    fn attach_rejects_bad_mappings() {
        let mut owned = OwnedRegion::new(&builder()).unwrap();
        let len = owned.raw().len();
        let small = {
            // SAFETY: a prefix of a live allocation, borrowed no longer than `owned`.
            unsafe { RawRegion::new(NonNull::new(owned.raw().as_ptr()).unwrap(), 100) }
        };
        assert_eq!(
            small.attach().unwrap_err(),
            LayoutError::RegionTooSmall { mapped: 100 }
        );
        let shifted = {
            // SAFETY: a suffix of a live allocation, as above.
            unsafe { RawRegion::new(NonNull::new(owned.raw().as_ptr().add(8)).unwrap(), len - 8) }
        };
        assert!(matches!(
            shifted.attach().unwrap_err(),
            LayoutError::MisalignedBase { .. }
        ));
        owned.as_mut_slice()[0] ^= 0xff;
        assert_eq!(
            owned.attach().unwrap_err(),
            LayoutError::BadMagic {
                found: MAGIC ^ 0xff
            }
        );
    }

    #[test]
    fn init_into_a_caller_buffer() {
        #[repr(C, align(64))]
        struct Buf([u8; 1 << 16]);
        let mut buf = Box::new(Buf([0xa5; 1 << 16]));
        let b = RegionBuilder::new(1)
            .ingress_slots(4)
            .egress_packet_slots(4)
            .egress_command_slots(4)
            .packet_area_size(1024);
        let layout = b.init(&mut buf.0).unwrap();
        assert_eq!(layout.region_size(), 8192);
        // Rings were zeroed even though the buffer was not.
        assert!(
            buf.0[HEADER_SIZE as usize..layout.packet_area().offset as usize]
                .iter()
                .all(|&b| b == 0)
        );
        assert_eq!(
            b.init(&mut buf.0[8..]).unwrap_err(),
            LayoutError::MisalignedBase {
                addr: buf.0.as_ptr() as usize + 8
            }
        );
        let raw = {
            let n = buf.0.len();
            // SAFETY: `buf` outlives `raw` and is not touched through the slice meanwhile.
            unsafe { RawRegion::new(NonNull::new(buf.0.as_mut_ptr()).unwrap(), n) }
        };
        assert_eq!(raw.attach().unwrap().layout(), &layout);
    }
}
