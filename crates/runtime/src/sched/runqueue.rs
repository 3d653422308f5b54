//! The per-kthread run queue: a bounded ring that only its owner pushes to, so that readying a
//! uthread costs two plain stores and no atomic read-modify-write. Popping and stealing move the
//! head; both happen under the queue's lock, so they are methods of [`Locked`], the proof that
//! the lock is held.
//!
//! Under iokerneld the head and tail counters live in the kthread's shared cache line, where
//! the core allocator reads them every pass to tell whether a uthread has waited a whole
//! interval. They are the queue's own counters, not copies, so what iokerneld sees is never
//! more than the queue held.

use crate::primitives::{AtomicU32, AtomicUsize, Ordering};
use crate::sync::spin::{RawSpinGuard, RawSpinLock};
use core::ptr::NonNull;

/// Default run queue capacity; a power of two so that indices may wrap freely.
pub const RUNQ_CAPACITY: usize = 256;

#[repr(align(64))]
struct CacheLine<T>(T);

/// Entries are nonzero `usize`s (pointers to uthreads in the runtime).
pub struct RunQueue {
    /// Serializes the takers (the owner popping, thieves stealing); the owner pushes without it.
    lock: RawSpinLock,
    /// Next entry to take. Written only under `lock`.
    head: NonNull<AtomicU32>,
    /// Next free slot. Written only by the owner.
    tail: NonNull<AtomicU32>,
    /// Where `head` and `tail` point unless they were placed elsewhere.
    _own: Option<Box<[CacheLine<AtomicU32>; 2]>>,
    slots: Box<[AtomicUsize]>,
    mask: usize,
}

// SAFETY: `head` and `tail` point to atomics that live as long as the queue (its own box, or
// `'static` memory given to `with_counters`); everything else is atomic.
unsafe impl Send for RunQueue {}
// SAFETY: as for Send: all shared access is through atomics.
unsafe impl Sync for RunQueue {}

impl Default for RunQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl RunQueue {
    pub fn new() -> Self {
        Self::with_capacity(RUNQ_CAPACITY)
    }

    /// A queue of `capacity` entries, a power of two.
    pub fn with_capacity(capacity: usize) -> Self {
        assert!(
            capacity.is_power_of_two() && capacity <= 1 << 30,
            "run queue capacity {capacity}"
        );
        let own = Box::new([CacheLine(AtomicU32::new(0)), CacheLine(AtomicU32::new(0))]);
        RunQueue {
            lock: RawSpinLock::new(),
            head: NonNull::from(&own[0].0),
            tail: NonNull::from(&own[1].0),
            _own: Some(own),
            slots: (0..capacity).map(|_| AtomicUsize::new(0)).collect(),
            mask: capacity - 1,
        }
    }

    /// A queue of `capacity` entries whose counters are `head` and `tail`, which must start
    /// equal and be written by nothing but this queue.
    #[cfg(not(loom))]
    pub fn with_counters(
        capacity: usize,
        head: &'static AtomicU32,
        tail: &'static AtomicU32,
    ) -> Self {
        let mut queue = Self::with_capacity(capacity);
        assert_eq!(
            head.load(Ordering::Relaxed),
            tail.load(Ordering::Relaxed),
            "run queue counters must start empty"
        );
        queue.head = NonNull::from(head);
        queue.tail = NonNull::from(tail);
        queue._own = None;
        queue
    }

    #[inline]
    fn head(&self) -> &AtomicU32 {
        // SAFETY: see the Send impl: the pointee outlives the queue.
        unsafe { self.head.as_ref() }
    }

    #[inline]
    fn tail(&self) -> &AtomicU32 {
        // SAFETY: as for `head`.
        unsafe { self.tail.as_ref() }
    }

    #[cfg(loom)]
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    #[inline]
    fn slot(&self, index: u32) -> &AtomicUsize {
        &self.slots[index as usize & self.mask]
    }

    /// Appends `item`. Only the owning kthread may call this, with or without its lock.
    /// Returns the item back when the queue is full.
    #[inline]
    pub fn push(&self, item: usize) -> Result<(), usize> {
        debug_assert_ne!(item, 0);
        let tail = self.tail().load(Ordering::Relaxed);
        // Acquire pairs with the head store of a thief that finished reading the slot we may
        // be about to overwrite.
        let head = self.head().load(Ordering::Acquire);
        if tail.wrapping_sub(head) as usize > self.mask {
            return Err(item);
        }
        self.slot(tail).store(item, Ordering::Relaxed);
        self.tail().store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    /// Locks the taking end. A uthread keeps preemption disabled while it holds the result.
    #[inline]
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            rq: self,
            _held: self.lock.guard(),
        }
    }

    /// Locks the taking end if nobody else holds it.
    #[inline]
    pub fn try_lock(&self) -> Option<Locked<'_>> {
        Some(Locked {
            rq: self,
            _held: self.lock.try_guard()?,
        })
    }

    /// A racy length: exact when called by the owner with its lock held.
    #[inline]
    pub fn len(&self) -> usize {
        let head = self.head().load(Ordering::Acquire);
        let tail = self.tail().load(Ordering::Acquire);
        tail.wrapping_sub(head) as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A run queue with its lock held: the only way to take entries out of it.
pub struct Locked<'a> {
    rq: &'a RunQueue,
    _held: RawSpinGuard<'a>,
}

impl Locked<'_> {
    /// Takes the oldest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<usize> {
        let rq = self.rq;
        let head = rq.head().load(Ordering::Relaxed);
        let tail = rq.tail().load(Ordering::Acquire);
        if head == tail {
            return None;
        }
        let item = rq.slot(head).load(Ordering::Relaxed);
        rq.head().store(head.wrapping_add(1), Ordering::Release);
        Some(item)
    }

    /// Moves the `n` oldest entries behind the others, in their order. Owner only (it pushes).
    pub fn move_oldest_to_back(&mut self, n: usize) {
        for _ in 0..n {
            let Some(item) = self.pop() else { return };
            // The pop just made room, and only the owner pushes.
            let pushed = self.rq.push(item);
            debug_assert!(pushed.is_ok());
        }
    }

    /// Moves half (rounded up) of this queue's entries into `into`, which must be the caller's
    /// own, empty queue. Returns how many moved.
    pub fn steal_half_into(&mut self, into: &RunQueue) -> usize {
        let rq = self.rq;
        let head = rq.head().load(Ordering::Relaxed);
        let tail = rq.tail().load(Ordering::Acquire);
        let available = tail.wrapping_sub(head) as usize;
        if available == 0 {
            return 0;
        }
        let take = available.div_ceil(2);
        let mut moved = 0;
        for i in 0..take {
            let item = rq.slot(head.wrapping_add(i as u32)).load(Ordering::Relaxed);
            if into.push(item).is_err() {
                break;
            }
            moved += 1;
        }
        rq.head()
            .store(head.wrapping_add(moved as u32), Ordering::Release);
        moved
    }
}
