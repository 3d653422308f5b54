//! How a waker knows whether anyone sleeps in the kernel on a futex word, without a system
//! call when nobody does.
//!
//! A sleeper counts itself and fences before the kernel compares the word, and uncounts itself
//! after it returns; a waker changes the word, fences, then reads the count. Like Dekker's
//! algorithm (and `sched::idle`), at least one side sees the other: either the waker sees the
//! sleeper counted and makes the wake call, or the kernel's comparison reads the changed word
//! and the sleeper does not sleep. Modelled in `tests/loom.rs`
//! (`a_kernel_sleeper_is_never_left_asleep`), with [`crate::primitives::Futex`] standing in
//! for the kernel.

use crate::primitives::{AtomicUsize, Ordering, fence};

/// Threads that are, or are about to be, asleep in the kernel on some futex word.
pub struct KernelSleepers {
    count: AtomicUsize,
}

impl Default for KernelSleepers {
    fn default() -> Self {
        Self::new()
    }
}

impl KernelSleepers {
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        KernelSleepers {
            count: AtomicUsize::new(0),
        }
    }

    #[cfg(loom)]
    pub fn new() -> Self {
        KernelSleepers {
            count: AtomicUsize::new(0),
        }
    }

    /// Runs `sleep` (the kernel's compare-and-sleep on a word) counted as a sleeper.
    pub fn sleep<R>(&self, sleep: impl FnOnce() -> R) -> R {
        self.count.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let r = sleep();
        self.count.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Whether a wake must go to the kernel. Call after changing the word.
    pub fn any(&self) -> bool {
        fence(Ordering::SeqCst);
        self.count.load(Ordering::SeqCst) != 0
    }
}
