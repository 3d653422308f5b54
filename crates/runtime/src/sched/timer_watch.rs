//! Who watches the timers while kthreads park (standalone mode).
//!
//! A parked kthread sleeps until the earliest timer deadline of *any* kthread, because a kthread
//! busy in a long uthread cannot fire its own. A timer added while every parked kthread sleeps
//! past it must wake one of them. The two sides:
//! - a parker publishes the deadline it will watch ([`WatchedDeadline::publish`]), then reads
//!   the timers again and watches the earlier of the two;
//! - whoever adds a timer makes it visible in its queue's `next` (a `SeqCst` store), then calls
//!   [`needs_watcher`], which fences and reads every parker's published deadline.
//!
//! Either the parker's second read sees the new timer, or the adder sees a published deadline
//! later than the new one (or a parker that has not published yet, `u64::MAX`) and wakes a
//! kthread. The model in `tests/loom.rs` (`timer_added_while_parked_is_watched`) checks it.
//!
//! Under iokerneld the kthreads do not watch timers themselves: the last one to park reports the
//! earliest deadline to iokerneld, which wakes a kthread then (`iokernel::last_parker`).

use crate::primitives::{AtomicU64, Ordering, fence};
use crate::sched::idle::Idle;

/// The earliest deadline a parked kthread wakes up for; `u64::MAX` while not parked (or parked
/// with nothing to watch).
pub struct WatchedDeadline(AtomicU64);

impl Default for WatchedDeadline {
    fn default() -> Self {
        Self::new()
    }
}

impl WatchedDeadline {
    pub fn new() -> Self {
        WatchedDeadline(AtomicU64::new(u64::MAX))
    }

    /// Publishes what the parker watches, `earliest()` (the earliest timer of all kthreads),
    /// then reads it again: returns the deadline to sleep until.
    pub fn publish(&self, earliest: impl Fn() -> u64) -> u64 {
        let watch = earliest();
        self.0.store(watch, Ordering::SeqCst);
        // Pairs with the fence in `needs_watcher` (store then load: Dekker needs both fences).
        fence(Ordering::SeqCst);
        watch.min(earliest())
    }

    /// The kthread no longer parks.
    pub fn clear(&self) {
        self.0.store(u64::MAX, Ordering::SeqCst);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A timer with `deadline` was just made visible: whether some parked kthread must be woken
/// to watch it, because every parked kthread sleeps past it.
pub fn needs_watcher<'a>(
    idle: &Idle,
    deadline: u64,
    watched: impl IntoIterator<Item = &'a WatchedDeadline>,
) -> bool {
    // Pairs with the publish-then-read in `WatchedDeadline::publish`.
    fence(Ordering::SeqCst);
    if idle.n_parked() == 0 {
        return false;
    }
    watched
        .into_iter()
        .map(WatchedDeadline::get)
        .min()
        .is_some_and(|w| deadline < w)
}
