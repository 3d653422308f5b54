//! Condition variable paired with [`crate::Mutex`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::mutex::MutexGuard;
use crate::sync::waitq::{WaitNode, WaitQueue, WaitRef, block_with, block_with_deadline};
use crate::timer;

/// Whether a timed wait returned because its time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

/// Blocks uthreads until notified. Wake-ups are never lost: a waiter is queued before it
/// releases the mutex, so a notifier that changed the state under the mutex finds it.
#[derive(Default)]
pub struct Condvar {
    waiters: WaitQueue,
}

impl Condvar {
    pub const fn new() -> Self {
        Condvar {
            waiters: WaitQueue::new(),
        }
    }

    /// Releases the guard's mutex, waits for a notification, and re-locks. May wake spuriously
    /// only if notified; prefer [`Condvar::wait_while`] to re-check the condition.
    pub fn wait<T: ?Sized>(&self, guard: &mut MutexGuard<'_, T>) {
        let raw = guard.mutex().raw();
        let node = WaitNode::for_current();
        block_with(&node, || {
            self.waiters.with(|l| l.push(WaitRef::Stack(&node)));
            // SAFETY: the guard proves we hold the mutex; it is re-locked below before the
            // guard can be used again.
            unsafe { raw.unlock() };
            true
        });
        raw.lock();
    }

    /// Waits until `condition` returns false.
    pub fn wait_while<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) {
        while condition(&mut **guard) {
            self.wait(guard);
        }
    }

    /// Like [`Condvar::wait`], giving up after `timeout`.
    pub fn wait_timeout<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        let deadline = timer::now_ns().saturating_add(timer::duration_ns(timeout));
        self.wait_deadline(guard, deadline)
    }

    /// Like [`Condvar::wait`], giving up at `deadline`.
    pub fn wait_until<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> WaitTimeoutResult {
        self.wait_deadline(guard, timer::deadline_of(deadline))
    }

    fn wait_deadline<T: ?Sized>(
        &self,
        guard: &mut MutexGuard<'_, T>,
        deadline: u64,
    ) -> WaitTimeoutResult {
        let raw = guard.mutex().raw();
        let node = Arc::new(WaitNode::for_current());
        let timed_out = block_with_deadline(&node, deadline, || {
            self.waiters.with(|l| l.push(WaitRef::Shared(node.clone())));
            // SAFETY: as in wait.
            unsafe { raw.unlock() };
            true
        });
        if timed_out {
            self.waiters.remove(Arc::as_ptr(&node));
        }
        raw.lock();
        WaitTimeoutResult(timed_out)
    }

    /// Wakes the longest-waiting uthread, if any.
    pub fn notify_one(&self) {
        if self.waiters.maybe_waiters() {
            self.waiters.wake_one();
        }
    }

    /// Wakes every waiting uthread.
    pub fn notify_all(&self) {
        if self.waiters.maybe_waiters() {
            self.waiters.wake_all();
        }
    }
}
