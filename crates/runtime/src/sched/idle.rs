//! Who is idle: the handshake between a kthread that parks and one that publishes work, so that
//! runnable work never waits while every kthread sleeps (no lost wake-up).
//!
//! A kthread is counted either as spinning (looking for work) or as parked (on the parked list,
//! sleeping on its [`ParkWord`]), or neither while it runs a uthread. The two sides:
//! - parking: [`Idle::announce_parked`] (spinning -> parked, then a `SeqCst` fence), then
//!   re-check every place work can appear, and only then sleep until the park word is set;
//! - publishing: make the work visible, then [`Idle::wake_needed`], which fences and tells
//!   whether nobody is spinning while somebody is parked; if so, [`Idle::take_parked`] and wake
//!   that kthread's park word.
//!
//! Like Dekker's algorithm, the fences order "publish work; read the counters" against "count
//! myself parked; read the work": at least one side sees the other. The model in
//! `tests/loom.rs` (`parked_kthread_is_woken_for_published_work`) checks it.

use crate::primitives::{AtomicUsize, Futex, Ordering, UnsafeCell, fence};
use crate::sync::spin::RawSpinLock;

/// The idle-kthread counters and the parked list of one runtime.
pub struct Idle {
    n_spinning: AtomicUsize,
    n_parked: AtomicUsize,
    parked_lock: RawSpinLock,
    /// Indices of parked kthreads, guarded by `parked_lock`.
    parked: UnsafeCell<Vec<usize>>,
}

// SAFETY: `parked` is only touched with `parked_lock` held; everything else is atomic.
unsafe impl Sync for Idle {}
// SAFETY: as above.
unsafe impl Send for Idle {}

impl Default for Idle {
    fn default() -> Self {
        Self::new()
    }
}

impl Idle {
    pub fn new() -> Self {
        Idle {
            n_spinning: AtomicUsize::new(0),
            n_parked: AtomicUsize::new(0),
            parked_lock: RawSpinLock::new(),
            parked: UnsafeCell::new(Vec::new()),
        }
    }

    pub fn n_parked(&self) -> usize {
        self.n_parked.load(Ordering::SeqCst)
    }

    /// A kthread starts looking for work.
    pub fn start_spinning(&self) {
        self.n_spinning.fetch_add(1, Ordering::SeqCst);
    }

    /// A kthread stops looking for work. Returns true if it was the last one looking.
    pub fn stop_spinning(&self) -> bool {
        self.n_spinning.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// Counts a kthread that parks outside the list (under iokerneld, which wakes it itself).
    pub fn count_parked(&self, parked: bool) {
        if parked {
            self.n_parked.fetch_add(1, Ordering::SeqCst);
        } else {
            self.n_parked.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Spinning kthread `index` joins the parked list, after clearing its park word. The caller
    /// must then re-check for work before it sleeps on `word`.
    pub fn announce_parked(&self, index: usize, word: &ParkWord) {
        word.0.store(0, Ordering::Relaxed);
        let _held = self.parked_lock.guard();
        // SAFETY: parked_lock held.
        self.parked.with_mut(|list| unsafe { (*list).push(index) });
        self.n_parked.fetch_add(1, Ordering::SeqCst);
        self.n_spinning.fetch_sub(1, Ordering::SeqCst);
        // Pairs with the fence in `wake_needed`. On x86 the locked RMWs above already are full
        // barriers; the explicit fence makes the pairing hold in the language's memory model
        // too (which is what loom checks), and costs nothing that matters before a sleep.
        fence(Ordering::SeqCst);
    }

    /// Call after publishing work: whether a parked kthread must be woken for it because no
    /// kthread is looking.
    #[inline]
    pub fn wake_needed(&self) -> bool {
        // Pairs with the read-modify-writes in `announce_parked`: either the parker sees our
        // work, or we see it parked.
        fence(Ordering::SeqCst);
        self.n_spinning.load(Ordering::Relaxed) == 0 && self.n_parked.load(Ordering::Relaxed) > 0
    }

    /// Takes any parked kthread off the list and counts it as spinning; the caller wakes it
    /// with [`ParkWord::wake`].
    pub fn take_parked(&self) -> Option<usize> {
        let _held = self.parked_lock.guard();
        // SAFETY: parked_lock held.
        let index = self.parked.with_mut(|list| unsafe { (*list).pop() });
        if index.is_some() {
            self.n_parked.fetch_sub(1, Ordering::SeqCst);
            self.n_spinning.fetch_add(1, Ordering::SeqCst);
        }
        index
    }

    /// A parked kthread that stops sleeping (woken, timed out or saw work) leaves the list if a
    /// waker did not already take it off; either way it is counted as spinning afterwards.
    pub fn leave_parked(&self, index: usize) {
        let _held = self.parked_lock.guard();
        // SAFETY: parked_lock held.
        let was_listed = self.parked.with_mut(|list| {
            // SAFETY: as above.
            let list = unsafe { &mut *list };
            let pos = list.iter().position(|&i| i == index);
            pos.map(|pos| list.swap_remove(pos)).is_some()
        });
        if was_listed {
            self.n_parked.fetch_sub(1, Ordering::SeqCst);
            self.n_spinning.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// What a parked kthread sleeps on: 0 while parked and waiting, 1 once woken.
pub struct ParkWord(Futex);

impl Default for ParkWord {
    fn default() -> Self {
        Self::new()
    }
}

impl ParkWord {
    pub fn new() -> Self {
        ParkWord(Futex::new(0))
    }

    /// Sets the word and wakes the kthread sleeping on it.
    pub fn wake(&self) {
        self.0.store(1, Ordering::Release);
        self.0.wake_one();
    }

    /// Sleeps until woken, or for at most `timeout_ns`. May return early. Returns whether the
    /// word was set.
    pub fn sleep(&self, timeout_ns: Option<u64>) -> bool {
        self.0.wait(0, timeout_ns);
        self.is_woken()
    }

    /// Clears the word before a sleep that only a later `wake` may end.
    pub fn reset(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    pub fn is_woken(&self) -> bool {
        self.0.load(Ordering::Acquire) == 1
    }
}
