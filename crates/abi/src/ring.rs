//! Single-producer single-consumer rings of 16-byte slots over shared memory.
//!
//! Position `p` (a free-running `u32`) lives in slot `p & mask` and belongs to lap
//! `p >> log2(capacity)`. The producer writes the payload word, then the descriptor with the lap
//! bit set to the complement of the lap's parity; fresh memory is zero, so lap 0 writes 1 and no
//! zeroed slot ever looks new. The consumer compares that bit with what its own position
//! expects. It can never see a slot from a later lap, because the producer cannot write past
//! `head + capacity`, so one bit is enough to tell "new" from "last lap's".
//!
//! Each side publishes its position in a cell of its own, on a cache line only it writes. The
//! consumer's cell tells the producer which slots are free; the producer's cell is only for
//! observers ([`positions`](Consumer::positions)): neither view ever needs the other's position
//! on its fast path except the producer when its cached limit says the ring is full.
//!
//! All shared state is atomics, so a misbehaving peer (or a second view over the same ring) can
//! garble the ring's contents but never cause undefined behaviour here.

use core::fmt;

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::slot::{LAP_BIT, Slot};

/// One slot as it sits in shared memory.
#[repr(C, align(16))]
#[derive(Debug)]
pub struct SlotCell {
    desc: AtomicU64,
    payload: AtomicU64,
}

// Descriptor word first, payload second, 16 bytes: the layout the other side assumes.
#[cfg(not(loom))]
const _: () = {
    assert!(core::mem::offset_of!(SlotCell, desc) == 0);
    assert!(core::mem::offset_of!(SlotCell, payload) == 8);
    assert!(core::mem::size_of::<SlotCell>() == crate::SLOT_SIZE);
};

impl SlotCell {
    /// A zeroed slot, which reads as "not yet written" in lap 0.
    #[cfg(not(loom))]
    pub const fn new() -> SlotCell {
        SlotCell {
            desc: AtomicU64::new(0),
            payload: AtomicU64::new(0),
        }
    }

    /// A zeroed slot, which reads as "not yet written" in lap 0.
    #[cfg(loom)]
    pub fn new() -> SlotCell {
        SlotCell {
            desc: AtomicU64::new(0),
            payload: AtomicU64::new(0),
        }
    }
}

impl Default for SlotCell {
    fn default() -> Self {
        SlotCell::new()
    }
}

/// The ring has no free slot. The producer re-read the consumer's position before saying so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ring full")
    }
}

impl std::error::Error for Full {}

/// A ring view could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingError {
    /// The slot array's length is not a power of two in `1..=2^31`.
    Capacity {
        /// The length given.
        capacity: usize,
    },
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RingError::Capacity { capacity } => write!(
                f,
                "ring capacity {capacity} is not a power of two between 1 and 2^31"
            ),
        }
    }
}

impl std::error::Error for RingError {}

/// How many items a single-producer single-consumer queue (a ring, a run queue) has seen enter
/// and leave. Both counters start at 0, only grow, and wrap at 2^32; compare them with wrapping
/// arithmetic. The one counter type for every queue iokerneld watches: its own rings, and the
/// queues the core allocator judges a runtime's congestion by.
///
/// A view knows its own counter exactly and loads the other from the peer's cell, so when the
/// peer is untrusted that half may be garbage: use it for heuristics (congestion), never for
/// indexing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingPositions {
    /// Items pushed so far.
    pub produced: u32,
    /// Items popped so far.
    pub consumed: u32,
}

impl RingPositions {
    /// Positions after `produced` pushes and `consumed` pops.
    #[inline]
    pub const fn new(produced: u32, consumed: u32) -> Self {
        Self { produced, consumed }
    }

    /// Items pushed and not yet popped. Garbage (huge) if the consumer claims to be ahead of
    /// the producer.
    #[inline]
    pub const fn pending(&self) -> u32 {
        self.produced.wrapping_sub(self.consumed)
    }

    /// Whether an item that was already in the queue at `earlier` is still there now, i.e. the
    /// consumer has not yet reached where the producer stood then: the congestion signal of the
    /// Shenango allocator (Algorithm 1: something waited a whole interval). Queue length alone
    /// would need a threshold tuned per workload; an item's age does not. Positions one
    /// interval apart are never 2^31 items apart, so the signed difference is unambiguous.
    #[inline]
    pub const fn has_waited_since(&self, earlier: RingPositions) -> bool {
        (earlier.produced.wrapping_sub(self.consumed) as i32) > 0
    }
}

#[inline]
fn check_capacity(capacity: usize) -> Result<u32, RingError> {
    if capacity.is_power_of_two() && capacity <= 1 << 31 {
        Ok(capacity as u32 - 1)
    } else {
        Err(RingError::Capacity { capacity })
    }
}

/// The descriptor's lap bit for a slot written at `pos` into a ring whose capacity is
/// `1 << shift`: set on even laps, so that zeroed memory is "old" in lap 0.
#[inline(always)]
fn lap_bit(pos: u32, shift: u32) -> u64 {
    // `shift <= 31`, so the shift never overflows.
    (u64::from(!(pos >> shift)) & 1) << 31
}

/// The writing end of a ring. Keeps its own position, and a cached limit on how far it may write
/// before it must look at the consumer's position again.
#[derive(Debug)]
pub struct Producer<'a> {
    slots: &'a [SlotCell],
    mask: u32,
    shift: u32,
    tail: u32,
    /// `head + capacity` as last read; the producer may write while `tail != limit`.
    limit: u32,
    tail_cell: &'a AtomicU32,
    head_cell: &'a AtomicU32,
}

impl<'a> Producer<'a> {
    /// A producer over `slots`, publishing its position to `tail_cell` and reading the
    /// consumer's from `head_cell`. The ring must be fresh: slots zeroed, nothing pushed yet.
    pub fn new(
        slots: &'a [SlotCell],
        tail_cell: &'a AtomicU32,
        head_cell: &'a AtomicU32,
    ) -> Result<Self, RingError> {
        let mask = check_capacity(slots.len())?;
        Ok(Producer {
            slots,
            mask,
            shift: mask.count_ones(),
            tail: 0,
            limit: mask.wrapping_add(1),
            tail_cell,
            head_cell,
        })
    }

    /// A producer over raw shared memory.
    ///
    /// # Safety
    ///
    /// For all of `'a`: `slots` points to `capacity` [`SlotCell`]s and `tail_cell`, `head_cell`
    /// to one `AtomicU32` each, all aligned, mapped readable and writable, and never accessed
    /// other than atomically (by this process; another process may write anything, which only
    /// garbles the ring's contents). The ring must be fresh, as for [`Producer::new`].
    pub unsafe fn from_raw(
        slots: *const SlotCell,
        capacity: usize,
        tail_cell: *const AtomicU32,
        head_cell: *const AtomicU32,
    ) -> Result<Self, RingError> {
        // SAFETY: forwarded from our caller, who makes the same promises.
        let (slots, tail_cell, head_cell) =
            unsafe { ring_from_raw(slots, capacity, tail_cell, head_cell)? };
        Producer::new(slots, tail_cell, head_cell)
    }

    /// Test hook: start at `start`, a multiple of twice the capacity, so that a short test
    /// crosses the 2^32 wrap of the positions. Zeroed slots are "old" at any even lap.
    #[doc(hidden)]
    pub fn starting_at(mut self, start: u32) -> Self {
        assert_eq!(start & (self.mask << 1 | 1), 0, "start must be an even lap");
        self.tail = start;
        self.limit = start.wrapping_add(self.mask).wrapping_add(1);
        self.tail_cell.store(start, Ordering::Relaxed);
        self
    }

    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    /// Items pushed so far (exact).
    #[inline]
    pub fn position(&self) -> u32 {
        self.tail
    }

    /// This view's position and the consumer's published one (possibly garbage if the
    /// consumer is untrusted).
    #[inline]
    pub fn positions(&self) -> RingPositions {
        RingPositions {
            produced: self.tail,
            consumed: self.head_cell.load(Ordering::Acquire),
        }
    }

    #[inline(always)]
    fn cell(&self, pos: u32) -> &SlotCell {
        // SAFETY: `slots.len() == mask + 1` (checked at construction), so the masked index is in
        // bounds.
        unsafe { self.slots.get_unchecked((pos & self.mask) as usize) }
    }

    /// Re-reads the consumer's position and returns how many slots are free. A consumer
    /// position ahead of ours or more than a ring behind is a lie; it reads as full, so a
    /// runtime that scribbles on it only stops its own traffic.
    #[cold]
    fn refresh(&mut self) -> u32 {
        // Acquire pairs with the consumer's release of its position, which comes after its
        // last read of the slots it frees: we must not overwrite a slot still being read.
        let head = self.head_cell.load(Ordering::Acquire);
        let capacity = self.mask.wrapping_add(1);
        let used = self.tail.wrapping_sub(head);
        if used > capacity {
            self.limit = self.tail;
            return 0;
        }
        self.limit = head.wrapping_add(capacity);
        capacity - used
    }

    #[inline(always)]
    fn write(&self, pos: u32, slot: Slot) {
        let cell = self.cell(pos);
        let (desc, payload) = slot.to_raw();
        cell.payload.store(payload, Ordering::Relaxed);
        // Release: a consumer that sees this descriptor also sees the payload above and the
        // published tail (stored before any write), so observers never see consumed > produced.
        cell.desc.store(
            desc & !LAP_BIT | lap_bit(pos, self.shift),
            Ordering::Release,
        );
    }

    /// Appends `slot`, or returns [`Full`].
    #[inline]
    pub fn try_push(&mut self, slot: Slot) -> Result<(), Full> {
        if self.tail == self.limit && self.refresh() == 0 {
            return Err(Full);
        }
        let pos = self.tail;
        self.tail = pos.wrapping_add(1);
        self.tail_cell.store(self.tail, Ordering::Relaxed);
        self.write(pos, slot);
        Ok(())
    }

    /// Appends as many of `slots` as fit, in order; returns how many. Publishes the position
    /// once.
    #[inline]
    pub fn push_batch(&mut self, slots: &[Slot]) -> usize {
        let mut free = self.limit.wrapping_sub(self.tail) as usize;
        if free < slots.len() {
            free = self.refresh() as usize;
        }
        let n = free.min(slots.len());
        if n == 0 {
            return 0;
        }
        let start = self.tail;
        self.tail = start.wrapping_add(n as u32);
        self.tail_cell.store(self.tail, Ordering::Relaxed);
        for (i, &slot) in slots[..n].iter().enumerate() {
            self.write(start.wrapping_add(i as u32), slot);
        }
        n
    }
}

/// The reading end of a ring. Polls the slot at its own position; never reads the producer's
/// position except for [`positions`](Consumer::positions).
#[derive(Debug)]
pub struct Consumer<'a> {
    slots: &'a [SlotCell],
    mask: u32,
    shift: u32,
    head: u32,
    head_cell: &'a AtomicU32,
    tail_cell: &'a AtomicU32,
}

impl<'a> Consumer<'a> {
    /// A consumer over `slots`, publishing its position to `head_cell` and reading the
    /// producer's (only for [`positions`](Consumer::positions)) from `tail_cell`. The ring must
    /// be fresh: slots zeroed, nothing pushed yet.
    pub fn new(
        slots: &'a [SlotCell],
        head_cell: &'a AtomicU32,
        tail_cell: &'a AtomicU32,
    ) -> Result<Self, RingError> {
        let mask = check_capacity(slots.len())?;
        Ok(Consumer {
            slots,
            mask,
            shift: mask.count_ones(),
            head: 0,
            head_cell,
            tail_cell,
        })
    }

    /// A consumer over raw shared memory.
    ///
    /// # Safety
    ///
    /// As for [`Producer::from_raw`].
    pub unsafe fn from_raw(
        slots: *const SlotCell,
        capacity: usize,
        head_cell: *const AtomicU32,
        tail_cell: *const AtomicU32,
    ) -> Result<Self, RingError> {
        // SAFETY: forwarded from our caller, who makes the same promises.
        let (slots, head_cell, tail_cell) =
            unsafe { ring_from_raw(slots, capacity, head_cell, tail_cell)? };
        Consumer::new(slots, head_cell, tail_cell)
    }

    /// Test hook: the consumer's half of [`Producer::starting_at`].
    #[doc(hidden)]
    pub fn starting_at(mut self, start: u32) -> Self {
        assert_eq!(start & (self.mask << 1 | 1), 0, "start must be an even lap");
        self.head = start;
        self.head_cell.store(start, Ordering::Relaxed);
        self
    }

    /// Number of slots.
    #[inline]
    pub fn capacity(&self) -> u32 {
        self.mask.wrapping_add(1)
    }

    /// Items popped so far (exact).
    #[inline]
    pub fn position(&self) -> u32 {
        self.head
    }

    /// The producer's published position (possibly garbage if the producer is untrusted) and
    /// this view's.
    #[inline]
    pub fn positions(&self) -> RingPositions {
        RingPositions {
            produced: self.tail_cell.load(Ordering::Acquire),
            consumed: self.head,
        }
    }

    #[inline(always)]
    fn cell(&self, pos: u32) -> &SlotCell {
        // SAFETY: `slots.len() == mask + 1` (checked at construction), so the masked index is in
        // bounds.
        unsafe { self.slots.get_unchecked((pos & self.mask) as usize) }
    }

    /// Reads the slot at `pos` if the producer has written it in `pos`'s lap.
    #[inline(always)]
    fn read(&self, pos: u32) -> Option<Slot> {
        let cell = self.cell(pos);
        // Acquire pairs with the producer's release of the descriptor: the payload load below
        // then sees the payload written with it.
        let desc = cell.desc.load(Ordering::Acquire);
        if (desc ^ lap_bit(pos, self.shift)) & LAP_BIT != 0 {
            return None;
        }
        Some(Slot::from_raw(desc, cell.payload.load(Ordering::Relaxed)))
    }

    /// Whether the next slot has not been written yet.
    #[inline]
    pub fn is_empty(&self) -> bool {
        let desc = self.cell(self.head).desc.load(Ordering::Relaxed);
        (desc ^ lap_bit(self.head, self.shift)) & LAP_BIT != 0
    }

    /// Takes the oldest item, if any.
    #[inline]
    pub fn try_pop(&mut self) -> Option<Slot> {
        let slot = self.read(self.head)?;
        self.head = self.head.wrapping_add(1);
        // Release: our reads of the slot happen before the producer may reuse it.
        self.head_cell.store(self.head, Ordering::Release);
        Some(slot)
    }

    /// Takes up to `out.len()` items into `out`, oldest first; returns how many. Publishes the
    /// position once.
    #[inline]
    pub fn pop_batch(&mut self, out: &mut [Slot]) -> usize {
        let mut n = 0u32;
        for o in out.iter_mut() {
            match self.read(self.head.wrapping_add(n)) {
                Some(slot) => *o = slot,
                None => break,
            }
            n += 1;
        }
        if n != 0 {
            self.head = self.head.wrapping_add(n);
            self.head_cell.store(self.head, Ordering::Release);
        }
        n as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::command::Command;

    struct Ring {
        slots: Vec<SlotCell>,
        head: AtomicU32,
        tail: AtomicU32,
    }

    fn ring(capacity: usize) -> Ring {
        Ring {
            slots: (0..capacity).map(|_| SlotCell::new()).collect(),
            head: AtomicU32::new(0),
            tail: AtomicU32::new(0),
        }
    }

    fn views(r: &Ring) -> (Producer<'_>, Consumer<'_>) {
        (
            Producer::new(&r.slots, &r.tail, &r.head).unwrap(),
            Consumer::new(&r.slots, &r.head, &r.tail).unwrap(),
        )
    }

    fn item(i: u64) -> Slot {
        Slot::new(Command::RxPacket, (i % 0x7fff) as u16, i as u32, i)
    }

    #[test]
    fn layout_of_a_cell() {
        assert_eq!(core::mem::size_of::<SlotCell>(), crate::SLOT_SIZE);
        assert_eq!(core::mem::align_of::<SlotCell>(), 16);
    }

    #[test]
    fn capacity_must_be_a_power_of_two() {
        let r = ring(3);
        assert_eq!(
            Producer::new(&r.slots, &r.tail, &r.head).unwrap_err(),
            RingError::Capacity { capacity: 3 }
        );
        let r = ring(0);
        assert!(Consumer::new(&r.slots, &r.head, &r.tail).is_err());
        assert_eq!(
            RingError::Capacity { capacity: 3 }.to_string(),
            "ring capacity 3 is not a power of two between 1 and 2^31"
        );
    }

    #[test]
    fn fifo_full_and_empty_over_many_laps() {
        for cap in [1usize, 2, 4, 16] {
            let r = ring(cap);
            let (mut p, mut c) = views(&r);
            let mut next_in = 0u64;
            let mut next_out = 0u64;
            for round in 0..50 {
                assert!(c.is_empty());
                assert_eq!(c.try_pop(), None);
                let burst = 1 + round % cap;
                for _ in 0..burst {
                    p.try_push(item(next_in)).unwrap();
                    next_in += 1;
                }
                if burst == cap {
                    assert_eq!(p.try_push(item(999)), Err(Full));
                }
                assert_eq!(p.positions().pending() as usize, burst);
                for _ in 0..burst {
                    assert_eq!(c.try_pop(), Some(item(next_out)));
                    next_out += 1;
                }
            }
            assert_eq!(p.position(), next_in as u32);
            assert_eq!(c.position(), next_out as u32);
            assert_eq!(c.positions().pending(), 0);
        }
    }

    #[test]
    fn lap_bit_is_never_visible_and_cannot_be_forged() {
        let r = ring(2);
        let (mut p, mut c) = views(&r);
        // A descriptor with bit 31 set must not make a stale slot look new on the next lap.
        let forged = Slot::from_raw(u64::MAX, 7);
        for _ in 0..5 {
            p.try_push(forged).unwrap();
            assert_eq!(c.try_pop(), Some(forged));
            assert_eq!(c.try_pop(), None);
        }
    }

    #[test]
    fn batches() {
        let r = ring(8);
        let (mut p, mut c) = views(&r);
        let items: Vec<Slot> = (0..20).map(item).collect();
        assert_eq!(p.push_batch(&items[..5]), 5);
        assert_eq!(p.push_batch(&items[5..]), 3);
        assert_eq!(p.push_batch(&items[8..]), 0);
        let mut out = [Slot::default(); 6];
        assert_eq!(c.pop_batch(&mut out), 6);
        assert_eq!(&out[..], &items[..6]);
        assert_eq!(p.push_batch(&items[8..]), 6);
        let mut out = [Slot::default(); 16];
        assert_eq!(c.pop_batch(&mut out), 8);
        assert_eq!(&out[..8], &items[6..14]);
        assert_eq!(c.pop_batch(&mut out), 0);
        assert_eq!(p.push_batch(&[]), 0);
    }

    #[test]
    fn positions_wrap_at_2_pow_32() {
        let r = ring(4);
        let (p, c) = views(&r);
        let start = 0u32.wrapping_sub(8);
        let (mut p, mut c) = (p.starting_at(start), c.starting_at(start));
        let before = p.positions();
        for i in 0..40 {
            p.try_push(item(i)).unwrap();
            if i % 3 == 0 {
                p.try_push(item(1000 + i)).unwrap();
                assert_eq!(c.try_pop(), Some(item(i)));
                assert_eq!(c.try_pop(), Some(item(1000 + i)));
            } else {
                assert_eq!(c.try_pop(), Some(item(i)));
            }
        }
        assert!(p.position() < 100);
        assert_eq!(p.position(), c.position());
        assert!(!c.positions().has_waited_since(before));
    }

    #[test]
    fn lying_consumer_reads_as_full() {
        let r = ring(4);
        let (mut p, _c) = views(&r);
        p.try_push(item(0)).unwrap();
        p.try_push(item(0)).unwrap();
        p.try_push(item(0)).unwrap();
        p.try_push(item(0)).unwrap();
        // Ahead of the producer: nothing is free.
        r.head.store(1000, Ordering::Relaxed);
        assert_eq!(p.try_push(item(1)), Err(Full));
        // Honest again: one slot freed.
        r.head.store(1, Ordering::Relaxed);
        assert_eq!(p.try_push(item(1)), Ok(()));
        assert_eq!(p.try_push(item(1)), Err(Full));
        // More than a ring behind: nothing is free, and no slot is overwritten.
        r.head.store(u32::MAX - 3, Ordering::Relaxed);
        assert_eq!(p.try_push(item(1)), Err(Full));
        assert_eq!(p.push_batch(&[item(2); 3]), 0);
        assert_eq!(p.position(), 5);
    }

    #[test]
    fn congestion_signal() {
        let earlier = RingPositions {
            produced: 10,
            consumed: 7,
        };
        let still = RingPositions {
            produced: 12,
            consumed: 9,
        };
        let drained = RingPositions {
            produced: 12,
            consumed: 10,
        };
        assert!(still.has_waited_since(earlier));
        assert!(!drained.has_waited_since(earlier));
        let idle = RingPositions {
            produced: 5,
            consumed: 5,
        };
        assert!(!idle.has_waited_since(idle));
        let wrapped = RingPositions {
            produced: 3,
            consumed: u32::MAX,
        };
        assert!(
            RingPositions {
                produced: 4,
                consumed: u32::MAX
            }
            .has_waited_since(wrapped)
        );
        let before_wrap = RingPositions::new(2, u32::MAX - 1);
        assert!(RingPositions::new(4, 1).has_waited_since(before_wrap));
        assert!(!RingPositions::new(4, 2).has_waited_since(before_wrap));
        assert!(!RingPositions::new(4, 3).has_waited_since(RingPositions::new(3, 3)));
    }
}

/// Borrows a ring's slots and its two position cells from raw shared memory.
///
/// # Safety
///
/// As for [`Producer::from_raw`]: for all of `'a` the pointers are valid, aligned, mapped
/// readable and writable, and only ever accessed atomically.
unsafe fn ring_from_raw<'a>(
    slots: *const SlotCell,
    capacity: usize,
    own_cell: *const AtomicU32,
    peer_cell: *const AtomicU32,
) -> Result<(&'a [SlotCell], &'a AtomicU32, &'a AtomicU32), RingError> {
    check_capacity(capacity)?;
    // SAFETY: the caller promises the pointers are valid, aligned and only accessed through
    // atomics for 'a; shared references to atomics permit the other side's writes.
    Ok(unsafe {
        (
            core::slice::from_raw_parts(slots, capacity),
            &*own_cell,
            &*peer_cell,
        )
    })
}
