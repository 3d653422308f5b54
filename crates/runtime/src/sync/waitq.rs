//! Blocking: wait nodes and wait queues shared by every primitive that can block.
//!
//! A blocked thread (a uthread, or an ordinary OS thread using the same primitive) is described
//! by a [`WaitNode`]. Exactly one party moves a node out of [`WaitState::Waiting`] (see
//! `wait_state`) and that party wakes the thread: a notifier, or a timer for timed waits.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;

use crate::preempt;
use crate::sched::kthread::{self, this_kthread};
use crate::sched::uthread::UThread;
use crate::sched::{self};
use crate::sync::spin::RawSpinLock;
use crate::sync::wait_state::AtomicWaitState;
pub(crate) use crate::sync::wait_state::WaitState;
use crate::timer::{self, TimerAction};

enum Who {
    UThread(NonNull<UThread>),
    Os(std::thread::Thread),
}

pub(crate) struct WaitNode {
    who: Who,
    state: AtomicWaitState,
}

// SAFETY: the uthread pointer is only used to make that uthread runnable, which any thread may do.
unsafe impl Send for WaitNode {}
// SAFETY: as above; the state is atomic.
unsafe impl Sync for WaitNode {}

impl WaitNode {
    /// A node for the calling thread, uthread or not.
    pub fn for_current() -> WaitNode {
        preempt::disable();
        let th = kthread::current_kthread()
            .map(|k| k.current())
            .and_then(NonNull::new);
        preempt::enable();
        let who = match th {
            Some(th) => Who::UThread(th),
            None => Who::Os(std::thread::current()),
        };
        WaitNode {
            who,
            state: AtomicWaitState::new(),
        }
    }

    pub fn state(&self) -> WaitState {
        self.state.load()
    }
}

/// Moves a waiting node to `to` and wakes its thread. Returns false if someone else already did.
///
/// # Safety
/// `node` is alive: its thread is blocked on it (a node is not freed before it is finished).
pub(crate) unsafe fn finish(node: *const WaitNode, to: WaitState) -> bool {
    // SAFETY: per the contract.
    let n = unsafe { &*node };
    // Read what we need before the exchange: afterwards the node may be freed.
    match &n.who {
        Who::UThread(th) => {
            let th = *th;
            if !n.state.finish(to) {
                return false;
            }
            sched::ready(th);
        }
        Who::Os(t) => {
            let t = t.clone();
            if !n.state.finish(to) {
                return false;
            }
            t.unpark();
        }
    }
    true
}

/// # Safety
/// As for [`finish`].
pub(crate) unsafe fn wake(node: *const WaitNode) -> bool {
    // SAFETY: forwarded.
    unsafe { finish(node, WaitState::Woken) }
}

/// Blocks the caller on `node`. `enqueue` runs with preemption disabled; it publishes the node
/// where a waker will find it and returns true, or returns false if there is no need to wait.
pub(crate) fn block_with(node: &WaitNode, enqueue: impl FnOnce() -> bool) {
    match node.who {
        Who::UThread(_) => {
            // SAFETY: a node for a uthread is only made on a kthread, and used by that uthread.
            unsafe { sched::disable_for_switch() };
            if enqueue() {
                // SAFETY: in a uthread with preemption disabled once.
                unsafe { sched::schedule_away() };
            }
            // SAFETY: disabled above.
            unsafe { preempt::enable_on_kthread() };
        }
        Who::Os(_) => {
            if enqueue() {
                while node.state() == WaitState::Waiting {
                    std::thread::park();
                }
            }
        }
    }
}

/// Like [`block_with`] with a deadline (monotonic ns). Returns true if the wait timed out.
pub(crate) fn block_with_deadline(
    node: &Arc<WaitNode>,
    deadline: u64,
    enqueue: impl FnOnce() -> bool,
) -> bool {
    match node.who {
        Who::UThread(_) => {
            // SAFETY: as in block_with.
            unsafe { sched::disable_for_switch() };
            if enqueue() {
                // SAFETY: preemption is disabled, so this is the kthread we run on.
                let k = unsafe { this_kthread() };
                k.timers
                    .insert(deadline, TimerAction::Timeout(node.clone()));
                k.shared().timer_added(deadline);
                // SAFETY: in a uthread with preemption disabled once.
                unsafe { sched::schedule_away() };
            }
            // SAFETY: disabled above.
            unsafe { preempt::enable_on_kthread() };
        }
        Who::Os(_) => {
            if enqueue() {
                while node.state() == WaitState::Waiting {
                    let now = timer::now_ns();
                    if now >= deadline {
                        // SAFETY: we own the node.
                        unsafe { finish(Arc::as_ptr(node), WaitState::TimedOut) };
                        break;
                    }
                    std::thread::park_timeout(std::time::Duration::from_nanos(deadline - now));
                }
            }
        }
    }
    node.state() == WaitState::TimedOut
}

/// A queued waiter: a node on the blocked thread's stack, or a shared one for timed waits.
pub(crate) enum WaitRef {
    Stack(*const WaitNode),
    Shared(Arc<WaitNode>),
}

impl WaitRef {
    pub fn node(&self) -> *const WaitNode {
        match self {
            WaitRef::Stack(p) => *p,
            WaitRef::Shared(a) => Arc::as_ptr(a),
        }
    }

    /// # Safety
    /// As for [`finish`].
    pub unsafe fn wake(self) -> bool {
        // SAFETY: forwarded; for Shared our Arc keeps the node alive.
        unsafe { finish(self.node(), WaitState::Woken) }
    }
}

/// A FIFO of waiters behind a spinlock.
pub(crate) struct WaitQueue {
    lock: RawSpinLock,
    queue: UnsafeCell<VecDeque<WaitRef>>,
    len: AtomicUsize,
}

// SAFETY: the queue is only touched with the lock held.
unsafe impl Sync for WaitQueue {}
// SAFETY: as above.
unsafe impl Send for WaitQueue {}

impl Default for WaitQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitQueue {
    pub const fn new() -> Self {
        WaitQueue {
            lock: RawSpinLock::new(),
            queue: UnsafeCell::new(VecDeque::new()),
            len: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the queue with the lock held and preemption disabled.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&mut WaitList<'_>) -> R) -> R {
        preempt::disable();
        let held = self.lock.guard();
        // SAFETY: the queue is only touched with the lock held, which `held` proves; the
        // borrow ends with `list`, before the guard drops.
        let q = unsafe { &mut *self.queue.get() };
        let mut list = WaitList { q, len: &self.len };
        let r = f(&mut list);
        drop(held);
        preempt::enable();
        r
    }

    /// Whether anyone might be waiting (racy, but ordered by the caller's own synchronization).
    #[inline]
    pub fn maybe_waiters(&self) -> bool {
        self.len.load(Ordering::Acquire) != 0
    }

    /// Wakes the oldest waiter that is still waiting. Returns whether one was woken.
    pub fn wake_one(&self) -> bool {
        loop {
            let Some(w) = self.with(|l| l.pop()) else {
                return false;
            };
            // SAFETY: a queued node stays alive until finished.
            if unsafe { w.wake() } {
                return true;
            }
        }
    }

    /// Wakes every waiter. Returns how many were woken.
    pub fn wake_all(&self) -> usize {
        let all = self.with(|l| l.take_all());
        let mut woken = 0;
        for w in all {
            // SAFETY: a queued node stays alive until finished.
            if unsafe { w.wake() } {
                woken += 1;
            }
        }
        woken
    }

    /// Removes a node that timed out while queued.
    pub fn remove(&self, node: *const WaitNode) {
        self.with(|l| l.remove(node));
    }
}

/// The queue, borrowed with its lock held.
pub(crate) struct WaitList<'a> {
    q: &'a mut VecDeque<WaitRef>,
    len: &'a AtomicUsize,
}

impl WaitList<'_> {
    pub fn push(&mut self, w: WaitRef) {
        self.q.push_back(w);
        self.len.store(self.q.len(), Ordering::Release);
    }

    pub fn pop(&mut self) -> Option<WaitRef> {
        let w = self.q.pop_front();
        self.len.store(self.q.len(), Ordering::Release);
        w
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    pub fn take_all(&mut self) -> VecDeque<WaitRef> {
        self.len.store(0, Ordering::Release);
        core::mem::take(self.q)
    }

    pub fn remove(&mut self, node: *const WaitNode) {
        self.q.retain(|w| !core::ptr::eq(w.node(), node));
        self.len.store(self.q.len(), Ordering::Release);
    }
}
