//! The four AF_XDP rings, seen from user space: single-producer single-consumer rings of
//! descriptors in memory shared with the kernel.
//!
//! A ring of `size` entries (a power of two) has a producer position and a consumer position,
//! free-running `u32`s that wrap; position `p` lives in entry `p & (size - 1)`. The producer
//! owns the entries from the producer position up to the consumer position plus `size`; the
//! consumer owns those from the consumer position up to the producer position. Each side
//! publishes its position with a release store after touching its entries, and reads the
//! other's with an acquire load before touching them (libxdp's `xsk_ring_prod__submit` and
//! `xsk_ring_cons__peek` do the same; the kernel pairs them with `smp_load_acquire` and
//! `smp_store_release` in `net/xdp/xsk_queue.h`).
//!
//! Each side caches the other's position and re-reads it only when the cache says there is
//! not enough room (producer) or not enough entries (consumer): that arithmetic is
//! [`RingIndex`], pure and tested alone. [`Producer`] and
//! [`Consumer`] apply it to shared memory. User space produces on the fill and TX rings and
//! consumes from the RX and completion rings; the kernel does the opposite, so the two types
//! also model the kernel's side in tests ([`RingMemory`]), and under `--cfg loom` they are
//! built on loom's atomics and cells so that `tests/loom.rs` can model-check the orderings.
//!
//! The fill and TX rings also carry a flags word whose `XDP_RING_NEED_WAKEUP` bit the kernel
//! sets when it will not look at the ring again until user space makes a system call.

use core::fmt;

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering};

/// `XDP_RING_NEED_WAKEUP`: the bit of a ring's flags word.
pub const NEED_WAKEUP: u32 = 1;

/// An RX or TX descriptor: `struct xdp_desc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    /// Offset of the frame's first byte in the UMEM.
    pub addr: u64,
    /// The frame's length.
    pub len: u32,
    /// `XDP_PKT_CONTD` and the like; always 0 here (no multi-buffer frames).
    pub options: u32,
}

const _: () = {
    assert!(core::mem::size_of::<Desc>() == 16);
    assert!(core::mem::offset_of!(Desc, len) == 8);
};

/// One side's view of a ring's positions: where it works next, and how far it may go as of
/// the other side's position it last read. For the producer that limit is the consumer's
/// position plus the ring's size (the entries it may fill); for the consumer it is the
/// producer's position (the entries it may read). Both count what is left with wrapping
/// subtraction, so positions may wrap freely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingIndex {
    size: u32,
    /// What is added to the other side's position to make the limit: `size` or 0.
    slack: u32,
    next: u32,
    limit: u32,
}

impl RingIndex {
    /// The producer's view of a ring of `size` entries whose positions are `producer` and
    /// `consumer`.
    pub fn producer(size: u32, producer: u32, consumer: u32) -> RingIndex {
        RingIndex::new(size, size, producer, consumer)
    }

    /// The consumer's view.
    pub fn consumer(size: u32, producer: u32, consumer: u32) -> RingIndex {
        RingIndex::new(size, 0, consumer, producer)
    }

    fn new(size: u32, slack: u32, mine: u32, theirs: u32) -> RingIndex {
        let mut index = RingIndex {
            size,
            slack,
            next: mine,
            limit: mine,
        };
        index.refresh(theirs);
        index
    }

    /// Entries this side may take (free ones for the producer, ready ones for the consumer)
    /// as far as the cached position of the other side tells.
    pub fn available(&self) -> u32 {
        self.limit.wrapping_sub(self.next)
    }

    /// Takes a newly read position of the other side. One that would make more than the
    /// ring's size available (a consumer ahead of the producer, a producer behind the
    /// consumer or more than a ring ahead) cannot come from a well-behaved peer: it counts as
    /// "no progress since last time".
    pub fn refresh(&mut self, theirs: u32) {
        let limit = theirs.wrapping_add(self.slack);
        if limit.wrapping_sub(self.next) <= self.size {
            self.limit = limit;
        }
    }

    /// Entries available, at least `want` if the other side has made them so: its position is
    /// read (`theirs()`) only when the cached one shows fewer.
    pub fn available_for(&mut self, want: u32, theirs: impl FnOnce() -> u32) -> u32 {
        if self.available() < want {
            self.refresh(theirs());
        }
        self.available()
    }

    /// Takes `n` available entries; returns the position of the first.
    ///
    /// # Panics
    /// If fewer than `n` are available.
    pub fn advance(&mut self, n: u32) -> u32 {
        assert!(
            n <= self.available(),
            "taking {n} of {} available entries",
            self.available()
        );
        let start = self.next;
        self.next = self.next.wrapping_add(n);
        start
    }

    /// This side's position to publish: one past the last entry taken.
    pub fn position(&self) -> u32 {
        self.next
    }
}

/// One ring entry. Reads and writes are unsynchronized: only the side that owns the entry's
/// position (by the protocol above) touches it.
#[repr(transparent)]
pub struct Slot<T> {
    #[cfg(not(loom))]
    cell: core::cell::UnsafeCell<T>,
    #[cfg(loom)]
    cell: loom::cell::UnsafeCell<T>,
}

// SAFETY: a Slot is only read or written through `read` and `write`, whose callers guarantee
// that no one else touches the entry at the same time (they own its position), so sharing
// references between threads cannot race.
unsafe impl<T: Send> Sync for Slot<T> {}

impl<T: Copy> Slot<T> {
    /// An entry holding `value`.
    pub fn new(value: T) -> Slot<T> {
        Slot {
            #[cfg(not(loom))]
            cell: core::cell::UnsafeCell::new(value),
            #[cfg(loom)]
            cell: loom::cell::UnsafeCell::new(value),
        }
    }

    /// # Safety
    /// The caller owns the entry's position: no one writes it meanwhile.
    #[cfg(not(loom))]
    unsafe fn read(&self) -> T {
        // SAFETY: the pointer is valid and aligned (it is this cell's), and by the caller's
        // guarantee nothing writes the entry during the read.
        unsafe { self.cell.get().read() }
    }

    /// # Safety
    /// The caller owns the entry's position: no one reads or writes it meanwhile.
    #[cfg(not(loom))]
    unsafe fn write(&self, value: T) {
        // SAFETY: the pointer is valid and aligned, and by the caller's guarantee nothing else
        // touches the entry during the write.
        unsafe { self.cell.get().write(value) }
    }

    /// # Safety
    /// As above; loom checks the guarantee.
    #[cfg(loom)]
    unsafe fn read(&self) -> T {
        // SAFETY: loom's pointer is valid for the closure's duration; the caller guarantees
        // exclusive use, which loom verifies.
        self.cell.with(|p| unsafe { p.read() })
    }

    /// # Safety
    /// As above; loom checks the guarantee.
    #[cfg(loom)]
    unsafe fn write(&self, value: T) {
        // SAFETY: as for `read`.
        self.cell.with_mut(|p| unsafe { p.write(value) })
    }
}

/// A ring's size is not a power of two between 1 and 2^31, or does not match its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadSize(pub usize);

impl fmt::Display for BadSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ring size {} is not a power of two up to 2^31", self.0)
    }
}

impl std::error::Error for BadSize {}

/// A ring's shared parts: the producer's and consumer's positions, the flags word and the
/// entries (a power of two of them).
pub struct RingParts<'a, T> {
    /// The producer's position.
    pub producer: &'a AtomicU32,
    /// The consumer's position.
    pub consumer: &'a AtomicU32,
    /// The flags word.
    pub flags: &'a AtomicU32,
    /// The entries.
    pub slots: &'a [Slot<T>],
}

impl<T> Clone for RingParts<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for RingParts<'_, T> {}

impl<'a, T: Copy> RingParts<'a, T> {
    /// The ring's size, if a power of two up to 2^31.
    fn size(&self) -> Result<u32, BadSize> {
        let n = self.slots.len();
        if n.is_power_of_two() && n <= 1 << 31 {
            Ok(n as u32)
        } else {
            Err(BadSize(n))
        }
    }

    /// The entry of position `pos`.
    fn slot(&self, pos: u32) -> &'a Slot<T> {
        &self.slots[(pos & (self.slots.len() as u32 - 1)) as usize]
    }

    /// The producing side, starting from the positions as they are. Only one producer may
    /// exist per ring.
    pub fn producer(self) -> Result<Producer<'a, T>, BadSize> {
        let index = RingIndex::producer(
            self.size()?,
            self.producer.load(Ordering::Relaxed),
            self.consumer.load(Ordering::Acquire),
        );
        Ok(Producer { ring: self, index })
    }

    /// The consuming side, likewise. Only one consumer may exist per ring.
    pub fn consumer(self) -> Result<Consumer<'a, T>, BadSize> {
        let index = RingIndex::consumer(
            self.size()?,
            self.producer.load(Ordering::Acquire),
            self.consumer.load(Ordering::Relaxed),
        );
        Ok(Consumer { ring: self, index })
    }
}

/// The producing side of a ring.
pub struct Producer<'a, T> {
    ring: RingParts<'a, T>,
    index: RingIndex,
}

impl<T: Copy> Producer<'_, T> {
    /// The ring's size.
    pub fn size(&self) -> u32 {
        self.ring.slots.len() as u32
    }

    /// Free entries, re-reading the consumer's position only if fewer than `want` are known.
    pub fn free(&mut self, want: u32) -> u32 {
        let consumer = self.ring.consumer;
        self.index
            .available_for(want, || consumer.load(Ordering::Acquire))
    }

    /// Produces up to `n` entries, the `i`th being `item(i)`, and publishes them; returns how
    /// many (fewer when the ring has less room).
    pub fn push_with(&mut self, n: usize, mut item: impl FnMut(usize) -> T) -> usize {
        let want = n.min(self.size() as usize) as u32;
        let k = want.min(self.free(want));
        if k == 0 {
            return 0;
        }
        let start = self.index.advance(k);
        for i in 0..k {
            // SAFETY: the position was just taken from the free ones, which the consumer no
            // longer reads (its acquire-loaded position is past them); nothing else produces
            // on this ring.
            unsafe {
                self.ring
                    .slot(start.wrapping_add(i))
                    .write(item(i as usize))
            };
        }
        self.ring
            .producer
            .store(self.index.position(), Ordering::Release);
        k as usize
    }

    /// Produces as many of `items` as fit; returns how many.
    pub fn push_batch(&mut self, items: &[T]) -> usize {
        self.push_with(items.len(), |i| items[i])
    }

    /// Whether the consumer asked to be woken by a system call.
    pub fn needs_wakeup(&self) -> bool {
        self.ring.flags.load(Ordering::Acquire) & NEED_WAKEUP != 0
    }

    /// Entries produced and not yet consumed, as last known (a fresh read of the consumer's
    /// position would show as many or fewer).
    pub fn outstanding(&self) -> u32 {
        self.size() - self.index.available()
    }
}

/// The consuming side of a ring.
pub struct Consumer<'a, T> {
    ring: RingParts<'a, T>,
    index: RingIndex,
}

impl<T: Copy> Consumer<'_, T> {
    /// The ring's size.
    pub fn size(&self) -> u32 {
        self.ring.slots.len() as u32
    }

    /// Entries ready, re-reading the producer's position only if fewer than `want` are known.
    pub fn ready(&mut self, want: u32) -> u32 {
        let producer = self.ring.producer;
        self.index
            .available_for(want, || producer.load(Ordering::Acquire))
    }

    /// Consumes up to `max` entries, handing each to `take` in order, and publishes that they
    /// are consumed; returns how many.
    pub fn pop_with(&mut self, max: usize, mut take: impl FnMut(T)) -> usize {
        let want = max.min(self.size() as usize) as u32;
        let k = want.min(self.ready(want));
        if k == 0 {
            return 0;
        }
        let start = self.index.advance(k);
        for i in 0..k {
            // SAFETY: the position is below the producer's acquire-loaded position and not yet
            // released, so the producer wrote it and will not write it again until the release
            // store below; nothing else consumes from this ring.
            take(unsafe { self.ring.slot(start.wrapping_add(i)).read() });
        }
        self.ring
            .consumer
            .store(self.index.position(), Ordering::Release);
        k as usize
    }

    /// Consumes up to `out.len()` entries into `out`; returns how many.
    pub fn pop_batch(&mut self, out: &mut [T]) -> usize {
        let mut i = 0;
        self.pop_with(out.len(), |v| {
            out[i] = v;
            i += 1;
        })
    }

    /// Sets or clears the flags word's need-wakeup bit (the kernel's part, for models).
    pub fn set_needs_wakeup(&self, on: bool) {
        if on {
            self.ring.flags.fetch_or(NEED_WAKEUP, Ordering::Release);
        } else {
            self.ring.flags.fetch_and(!NEED_WAKEUP, Ordering::Release);
        }
    }
}

/// A ring in ordinary memory, for tests and models (and for two threads of one process).
pub struct RingMemory<T> {
    producer: AtomicU32,
    consumer: AtomicU32,
    flags: AtomicU32,
    slots: Box<[Slot<T>]>,
}

impl<T: Copy + Default> RingMemory<T> {
    /// `size` entries, both positions at `start` (the kernel starts at 0; a test may start near
    /// the wrap).
    pub fn new(size: usize, start: u32) -> RingMemory<T> {
        RingMemory {
            producer: AtomicU32::new(start),
            consumer: AtomicU32::new(start),
            flags: AtomicU32::new(0),
            slots: (0..size).map(|_| Slot::new(T::default())).collect(),
        }
    }

    /// Its parts.
    pub fn parts(&self) -> RingParts<'_, T> {
        RingParts {
            producer: &self.producer,
            consumer: &self.consumer,
            flags: &self.flags,
            slots: &self.slots,
        }
    }

    /// The producing side.
    pub fn producer(&self) -> Result<Producer<'_, T>, BadSize> {
        self.parts().producer()
    }

    /// The consuming side.
    pub fn consumer(&self) -> Result<Consumer<'_, T>, BadSize> {
        self.parts().consumer()
    }

    /// The published positions: (producer, consumer).
    pub fn positions(&self) -> (u32, u32) {
        (
            self.producer.load(Ordering::Acquire),
            self.consumer.load(Ordering::Acquire),
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fresh_ring_is_empty_and_all_free() {
        let p = RingIndex::producer(8, 0, 0);
        assert_eq!(p.available(), 8);
        let c = RingIndex::consumer(8, 0, 0);
        assert_eq!(c.available(), 0);
    }

    #[test]
    fn free_counts_across_the_wrap() {
        let mut p = RingIndex::producer(8, u32::MAX - 2, u32::MAX - 2);
        assert_eq!(p.advance(5), u32::MAX - 2);
        assert_eq!(p.position(), 2);
        assert_eq!(p.available(), 3);
        // The consumer moved past the wrap too.
        p.refresh(1);
        assert_eq!(p.available(), 7);
    }

    #[test]
    fn cached_consumer_is_read_only_when_short() {
        let mut p = RingIndex::producer(4, 0, 0);
        p.advance(3);
        let mut reads = 0;
        assert_eq!(
            p.available_for(1, || {
                reads += 1;
                3
            }),
            1
        );
        assert_eq!(reads, 0);
        assert_eq!(
            p.available_for(2, || {
                reads += 1;
                3
            }),
            4
        );
        assert_eq!(reads, 1);
    }

    #[test]
    fn impossible_positions_are_ignored() {
        let mut p = RingIndex::producer(4, 10, 8);
        assert_eq!(p.available(), 2);
        // A consumer ahead of the producer would give 6 free of 4.
        p.refresh(12);
        assert_eq!(p.available(), 2);
        let mut c = RingIndex::consumer(4, 10, 8);
        assert_eq!(c.available(), 2);
        // A producer behind the consumer, or more than a ring ahead.
        c.refresh(7);
        assert_eq!(c.available(), 2);
        c.refresh(13);
        assert_eq!(c.available(), 2);
        c.refresh(12);
        assert_eq!(c.available(), 4);
    }

    #[test]
    #[should_panic(expected = "available entries")]
    fn claiming_more_than_free_panics() {
        RingIndex::producer(4, 0, 0).advance(5);
    }

    #[test]
    fn items_cross_a_ring_in_order() {
        let mem = RingMemory::<u64>::new(4, u32::MAX - 1);
        let mut p = mem.producer().unwrap();
        let mut c = mem.consumer().unwrap();
        assert_eq!(p.push_batch(&[1, 2, 3, 4, 5]), 4);
        assert_eq!(p.push_batch(&[5]), 0);
        let mut out = [0; 3];
        assert_eq!(c.pop_batch(&mut out), 3);
        assert_eq!(out, [1, 2, 3]);
        assert_eq!(p.push_batch(&[5, 6, 7]), 3);
        let mut out = [0; 8];
        assert_eq!(c.pop_batch(&mut out), 4);
        assert_eq!(out[..4], [4, 5, 6, 7]);
        assert_eq!(mem.positions(), (5, 5));
    }

    #[test]
    fn need_wakeup_flag_is_seen_by_the_producer() {
        let mem = RingMemory::<u64>::new(2, 0);
        let p = mem.producer().unwrap();
        let c = mem.consumer().unwrap();
        assert!(!p.needs_wakeup());
        c.set_needs_wakeup(true);
        assert!(p.needs_wakeup());
        c.set_needs_wakeup(false);
        assert!(!p.needs_wakeup());
    }

    #[test]
    fn sizes_must_be_powers_of_two() {
        assert_eq!(
            RingMemory::<u64>::new(3, 0).producer().err(),
            Some(BadSize(3))
        );
        assert!(RingMemory::<u64>::new(0, 0).consumer().is_err());
    }
}
