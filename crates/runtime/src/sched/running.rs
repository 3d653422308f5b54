//! The `running` flag that makes it safe to resume a uthread that is still switching away.
//!
//! A uthread may be made runnable, and even stolen by another kthread, before the kthread it
//! ran on has finished saving its registers. The flag is set from the moment a kthread decides
//! to run a context until that context is completely saved and its stack left; whoever resumes
//! it first waits for the flag to clear ([`RunningFlag::claim`]).
//!
//! The clear is done by `arch::switch_context` after it has moved to the next stack: a plain
//! byte store, which on x86 is a release store. Loom cannot run the naked-asm switch, so the
//! model in `tests/loom.rs` (`resume_waits_for_the_context_save`) stands in
//! [`RunningFlag::release`] for it, with the same (release) ordering; the real switch is covered
//! by the stealing stress tests in `tests/threads.rs`.

use crate::primitives::{AtomicU8, Ordering, spin_wait_hint};

pub struct RunningFlag(AtomicU8);

impl RunningFlag {
    /// A context that is not running anywhere.
    pub fn new(running: bool) -> Self {
        RunningFlag(AtomicU8::new(u8::from(running)))
    }

    /// Waits until the context is fully saved by whoever ran it last, then marks it running:
    /// from here on the caller may read its saved state and resume it.
    #[inline]
    pub fn claim(&self) {
        // Acquire pairs with the release clear after the save: the saved registers and stack
        // are visible once we see the flag clear.
        while self.0.load(Ordering::Acquire) != 0 {
            spin_wait_hint();
        }
        // Nobody else may claim it: the caller owns this runnable context (took it off a queue).
        self.0.store(1, Ordering::Relaxed);
    }

    /// The context is completely saved and its stack is no longer used.
    #[inline]
    pub fn release(&self) {
        self.0.store(0, Ordering::Release);
    }

    /// The byte `arch::switch_context` clears (as [`RunningFlag::release`] does) once it has left
    /// the old stack.
    #[cfg(not(loom))]
    pub fn as_switch_flag(&self) -> *const AtomicU8 {
        &self.0
    }
}
