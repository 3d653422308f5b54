//! Wait group and barrier.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with};

/// Waits for a set of tasks to finish: `add` before starting them, `done` as each ends, `wait`
/// until the count is back to zero.
#[derive(Default)]
pub struct WaitGroup {
    count: AtomicUsize,
    waiters: WaitQueue,
}

impl WaitGroup {
    pub const fn new() -> Self {
        WaitGroup {
            count: AtomicUsize::new(0),
            waiters: WaitQueue::new(),
        }
    }

    pub fn add(&self, n: usize) {
        self.count.fetch_add(n, Ordering::AcqRel);
    }

    /// Marks one task done. Panics if called more often than `add` allowed.
    pub fn done(&self) {
        let prev = self.count.fetch_sub(1, Ordering::AcqRel);
        assert!(prev != 0, "WaitGroup::done called more times than add");
        if prev == 1 {
            self.waiters.wake_all();
        }
    }

    pub fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub fn wait(&self) {
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let node = WaitNode::for_current();
        block_with(&node, || {
            self.waiters.with(|l| {
                if self.count.load(Ordering::Acquire) == 0 {
                    false
                } else {
                    l.push(WaitRef::Stack(&node));
                    true
                }
            })
        });
    }
}

/// Lets `n` uthreads wait for each other; reusable.
pub struct Barrier {
    n: usize,
    waiters: WaitQueue,
    /// Arrivals in the current round; guarded by the wait queue's lock.
    arrived: UnsafeCell<usize>,
}

// SAFETY: `arrived` is only touched with the wait queue's lock held.
unsafe impl Sync for Barrier {}
// SAFETY: as above.
unsafe impl Send for Barrier {}

/// Returned by [`Barrier::wait`]; exactly one waiter per round is the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl Barrier {
    /// A barrier for `n` parties (`n == 0` behaves like 1).
    pub const fn new(n: usize) -> Self {
        Barrier {
            n,
            waiters: WaitQueue::new(),
            arrived: UnsafeCell::new(0),
        }
    }

    pub fn wait(&self) -> BarrierWaitResult {
        let node = WaitNode::for_current();
        let mut released = None;
        block_with(&node, || {
            self.waiters.with(|l| {
                // SAFETY: the wait queue's lock is held.
                let arrived = unsafe { &mut *self.arrived.get() };
                *arrived += 1;
                if *arrived >= self.n {
                    *arrived = 0;
                    released = Some(l.take_all());
                    false
                } else {
                    l.push(WaitRef::Stack(&node));
                    true
                }
            })
        });
        match released {
            Some(others) => {
                for w in others {
                    // SAFETY: barrier waiters are untimed; their nodes live until woken.
                    unsafe { w.wake() };
                }
                BarrierWaitResult(true)
            }
            None => BarrierWaitResult(false),
        }
    }
}
