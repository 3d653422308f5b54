//! Who reports the timers when every kthread parks (iokerneld mode).
//!
//! Parked kthreads do not watch timers under iokerneld: the last kthread to park reports the
//! runtime's earliest timer deadline, and iokerneld grants a core then. Each kthread that parks
//! first hands its timers to a kthread still holding a core (or keeps them), then leaves
//! [`ActiveKthreads`]; the one that takes the count to zero reads every kthread's timers and
//! reports them. The count is one read-modify-write chain, so the last parker's decrement
//! comes after every other parker's, and with them after every timer those kthreads added or
//! handed over: none is stranded unreported. Timers are only added by kthreads holding a
//! core, so none can be added once the count is zero. The model in `tests/loom.rs`
//! (`last_parker_reports_every_timer`) checks it.

use crate::primitives::{AtomicUsize, Ordering};

/// How many kthreads hold a core (or are about to learn they lost it).
pub struct ActiveKthreads(AtomicUsize);

impl Default for ActiveKthreads {
    fn default() -> Self {
        Self::new()
    }
}

impl ActiveKthreads {
    /// None: kthreads start parked, until iokerneld's first grant.
    pub fn new() -> Self {
        ActiveKthreads(AtomicUsize::new(0))
    }

    /// A kthread gives up its core. Returns true if it was the last one holding a core: it
    /// then reports the earliest timer of all kthreads (or takes work left behind instead,
    /// [`ActiveKthreads::unpark`]ing itself again).
    pub fn park(&self) -> bool {
        // AcqRel at least: the last parker must see the timers every earlier parker added or
        // handed over before it parked.
        self.0.fetch_sub(1, Ordering::SeqCst) == 1
    }

    /// A kthread was granted a core (or the last parker keeps its core after all).
    pub fn unpark(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
