//! Timers: a min-heap per kthread, ordered by deadline on the monotonic clock.
//!
//! A timer never fires early: it fires when the clock reads at or past its deadline. When a
//! kthread parks, its timers move to a kthread that is awake; the last kthread to park keeps
//! them and wakes itself at the earliest deadline. Idle kthreads also fire other kthreads'
//! expired timers, so a busy kthread does not hold them back.

use core::cell::UnsafeCell;
use core::cmp::Ordering as CmpOrdering;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::preempt;
use crate::sched::kthread::{self, this_kthread};
use crate::sched::uthread::UThread;
use crate::sched::{self};
use crate::sync::spin::RawSpinLock;
use crate::sync::waitq::{self, WaitNode};

/// Nanoseconds on CLOCK_MONOTONIC (the clock behind `std::time::Instant` on Linux).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Converts an `Instant` to a deadline in `now_ns` terms, rounding late, never early.
pub(crate) fn deadline_of(when: Instant) -> u64 {
    let left = when.saturating_duration_since(Instant::now());
    // now_ns is read after Instant::now, so it is at least as late: the sum is never early.
    now_ns().saturating_add(duration_ns(left))
}

pub(crate) fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What a timer does when it fires.
pub(crate) enum TimerAction {
    /// Make a sleeping uthread runnable.
    Wake(NonNull<UThread>),
    /// Time out a wait, unless it was already woken.
    Timeout(Arc<WaitNode>),
    /// Run the network stack's periodic work (ARP retries and expiry).
    NetPoll,
    /// A TCP connection's next deadline (retransmission, delayed ACK, TIME-WAIT, ...).
    Tcp {
        conn: std::sync::Weak<crate::net::tcp::conn::ConnCell>,
        deadline: u64,
    },
}

// SAFETY: waking a uthread is allowed from any kthread.
unsafe impl Send for TimerAction {}

impl TimerAction {
    fn fire(self) {
        match self {
            TimerAction::Wake(th) => sched::ready(th),
            TimerAction::Timeout(node) => {
                // SAFETY: the Arc keeps the node alive.
                unsafe { waitq::finish(Arc::as_ptr(&node), waitq::WaitState::TimedOut) };
            }
            TimerAction::NetPoll => crate::net::timer_fired(),
            TimerAction::Tcp { conn, deadline } => crate::net::tcp::timer_fired(conn, deadline),
        }
    }
}

struct Entry {
    deadline: u64,
    seq: u64,
    action: TimerAction,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest deadline on top.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.deadline, other.seq).cmp(&(self.deadline, self.seq))
    }
}

/// One kthread's timers.
pub(crate) struct TimerQueue {
    lock: RawSpinLock,
    heap: UnsafeCell<BinaryHeap<Entry>>,
    /// Earliest deadline, `u64::MAX` when empty; read without the lock.
    next: AtomicU64,
    seq: UnsafeCell<u64>,
    /// False while the owner is parked: others must not hand it timers then.
    accepting: AtomicBool,
    /// Under iokerneld: the cell of the shared region where the earliest deadline is stored
    /// too (0 for none), so that iokerneld can tell when a kthread whose uthreads do not yield
    /// lets a timer pass unfired. A plain store whenever the heap changes.
    published: Option<&'static AtomicU64>,
}

// SAFETY: heap and seq are only touched with the lock held.
unsafe impl Sync for TimerQueue {}
// SAFETY: as above.
unsafe impl Send for TimerQueue {}

impl TimerQueue {
    /// An empty queue; with `cell`, one that also stores its earliest deadline there (see
    /// `published`).
    pub fn published_in(cell: Option<&'static AtomicU64>) -> Self {
        TimerQueue {
            lock: RawSpinLock::new(),
            heap: UnsafeCell::new(BinaryHeap::new()),
            next: AtomicU64::new(u64::MAX),
            seq: UnsafeCell::new(0),
            accepting: AtomicBool::new(true),
            published: cell,
        }
    }

    /// Stores the earliest deadline where iokerneld reads it (0 for none). Relaxed: iokerneld
    /// only compares it with its clock, and a late value costs at most one needless signal.
    #[inline]
    fn publish(&self, next: u64) {
        if let Some(cell) = self.published {
            cell.store(
                if next == u64::MAX { 0 } else { next.max(1) },
                Ordering::Relaxed,
            );
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut BinaryHeap<Entry>, &mut u64) -> R) -> R {
        preempt::disable();
        self.lock.lock();
        // SAFETY: lock held.
        let r = unsafe { f(&mut *self.heap.get(), &mut *self.seq.get()) };
        // SAFETY: lock held.
        let next = unsafe { (*self.heap.get()).peek().map_or(u64::MAX, |e| e.deadline) };
        // SeqCst: pairs with parked kthreads' publish-then-recheck (see Shared::timer_added).
        self.next.store(next, Ordering::SeqCst);
        self.publish(next);
        // SAFETY: we hold the lock.
        unsafe { self.lock.unlock() };
        preempt::enable();
        r
    }

    #[inline]
    pub fn next_deadline(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }

    pub fn insert(&self, deadline: u64, action: TimerAction) {
        self.with(|heap, seq| {
            *seq += 1;
            heap.push(Entry {
                deadline,
                seq: *seq,
                action,
            });
        });
    }

    /// Pops up to `out.len()` expired entries.
    fn pop_expired(&self, now: u64, out: &mut Vec<TimerAction>, max: usize) {
        self.with(|heap, _| {
            while out.len() < max && heap.peek().is_some_and(|e| e.deadline <= now) {
                out.push(heap.pop().expect("peeked").action);
            }
        });
    }

    /// Pops the earliest entry if it is a TCP connection's and not due at `now`.
    pub fn pop_future_tcp(
        &self,
        now: u64,
    ) -> Option<(u64, std::sync::Weak<crate::net::tcp::conn::ConnCell>)> {
        self.with(|heap, _| {
            let future_tcp = heap
                .peek()
                .is_some_and(|e| e.deadline > now && matches!(e.action, TimerAction::Tcp { .. }));
            if !future_tcp {
                return None;
            }
            match heap.pop().expect("peeked") {
                Entry {
                    deadline,
                    action: TimerAction::Tcp { conn, .. },
                    ..
                } => Some((deadline, conn)),
                _ => unreachable!("peeked a TCP entry"),
            }
        })
    }

    /// Moves every timer to `to` if it accepts them now. Never waits for `to`'s lock.
    pub fn move_all_to(&self, to: &TimerQueue) -> bool {
        preempt::disable();
        self.lock.lock();
        let moved = to.lock.try_lock() && {
            let ok = to.accepting.load(Ordering::Relaxed);
            if ok {
                // SAFETY: both locks held.
                let (from_heap, to_heap) = unsafe { (&mut *self.heap.get(), &mut *to.heap.get()) };
                // SAFETY: to's lock held.
                let to_seq = unsafe { &mut *to.seq.get() };
                for mut e in from_heap.drain() {
                    *to_seq += 1;
                    e.seq = *to_seq;
                    to_heap.push(e);
                }
                let next = to_heap.peek().map_or(u64::MAX, |e| e.deadline);
                to.next.store(next, Ordering::Release);
                to.publish(next);
                self.next.store(u64::MAX, Ordering::Release);
                self.publish(u64::MAX);
            }
            // SAFETY: we took it with try_lock.
            unsafe { to.lock.unlock() };
            ok
        };
        // SAFETY: we hold our own lock.
        unsafe { self.lock.unlock() };
        preempt::enable();
        moved
    }

    /// The owner is about to park: refuse hand-offs from now on.
    pub fn stop_accepting(&self) {
        self.with(|_, _| self.accepting.store(false, Ordering::Relaxed));
    }

    pub fn start_accepting(&self) {
        self.accepting.store(true, Ordering::Relaxed);
    }
}

/// Most stale entries a parking kthread looks at (see [`drop_stale_tcp_timers`]).
const STALE_TIMERS_PER_PARK: usize = 16;

/// Before `q`'s kthread parks: drops the TCP entries at the front of `q` whose connection no
/// longer needs a timer that early (a delayed ACK sent with the reply, a retransmission timer
/// the peer's ACK stopped), arming each connection again for when it does. Such an entry would
/// otherwise set the runtime's earliest deadline, and iokerneld would take a core from someone
/// else at that time to fire a timer with nothing to do: a request/response connection leaves
/// one or two behind per request. Stops at the first entry still needed.
pub(crate) fn drop_stale_tcp_timers(q: &TimerQueue, now: u64) {
    for _ in 0..STALE_TIMERS_PER_PARK {
        let Some((deadline, conn)) = q.pop_future_tcp(now) else {
            return;
        };
        if crate::net::tcp::conn::timer_still_needed(&conn, deadline, now) {
            q.insert(deadline, TimerAction::Tcp { conn, deadline });
            return;
        }
    }
}

/// Fires the expired timers of `q` on the calling kthread.
pub(crate) fn run_expired(q: &TimerQueue, now: u64) {
    const BATCH: usize = 32;
    let mut fired = Vec::new();
    loop {
        q.pop_expired(now, &mut fired, BATCH);
        let n = fired.len();
        for action in fired.drain(..) {
            action.fire();
        }
        if n < BATCH {
            break;
        }
    }
}

/// Puts the calling uthread to sleep for at least `d`. Off a kthread this sleeps the OS thread.
pub fn sleep(d: Duration) {
    let deadline = now_ns().saturating_add(duration_ns(d));
    sleep_until_ns(deadline, d);
}

/// Puts the calling uthread to sleep until at least `when`.
pub fn sleep_until(when: Instant) {
    let left = when.saturating_duration_since(Instant::now());
    sleep_until_ns(deadline_of(when), left);
}

fn sleep_until_ns(deadline: u64, os_fallback: Duration) {
    if kthread::current_kthread().is_none() {
        std::thread::sleep(os_fallback);
        return;
    }
    if now_ns() >= deadline {
        sched::yield_now();
        return;
    }
    // SAFETY: on a kthread.
    unsafe { sched::disable_for_switch() };
    // SAFETY: preemption disabled: still on the same kthread, in a uthread.
    let k = unsafe { this_kthread() };
    let cur = NonNull::new(k.current()).expect("checked by disable_for_switch");
    k.timers.insert(deadline, TimerAction::Wake(cur));
    k.shared().timer_added(deadline);
    // SAFETY: in a uthread with preemption disabled once; the timer will ready us.
    unsafe { sched::schedule_away() };
    // SAFETY: disabled above.
    unsafe { preempt::enable_on_kthread() };
}
