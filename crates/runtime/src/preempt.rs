//! Preemption discipline.
//!
//! Every kthread has a preemption counter at `%gs:8`. Runtime critical sections (spinlocks, the
//! scheduler, the allocator, RCU read sections) raise it; a preemption request that arrives while
//! it is raised only clears the "not pending" bit, and the request is honoured when the counter
//! drops back to zero. Because the increment and decrement are single `%gs`-relative
//! instructions they stay correct even if the uthread migrates between them.
//!
//! On a thread that is not a kthread all of this is a no-op.

use crate::arch;
use crate::sched::kthread::{self, OFF_PREEMPT, PREEMPT_NOT_PENDING};

/// Disables preemption of the calling uthread until the matching [`enable`]. (Public code uses
/// [`PreemptGuard`], which cannot be unbalanced.)
#[inline(always)]
pub(crate) fn disable() {
    if kthread::current_kthread().is_some() {
        // SAFETY: we are on a kthread; see the module comment on why migration is harmless.
        unsafe { arch::gs_inc32::<OFF_PREEMPT>() };
    }
}

/// Re-enables preemption; runs a preemption that became pending meanwhile.
#[inline(always)]
pub(crate) fn enable() {
    if kthread::current_kthread().is_some() {
        // SAFETY: as in `disable`.
        unsafe { enable_on_kthread() };
    }
}

/// `disable` for code that knows it runs on a kthread.
///
/// # Safety
/// The caller runs on a kthread.
#[inline(always)]
pub(crate) unsafe fn disable_on_kthread() {
    // SAFETY: per the contract.
    unsafe { arch::gs_inc32::<OFF_PREEMPT>() };
}

/// `enable` for code that knows it runs on a kthread.
///
/// # Safety
/// The caller runs on a kthread and previously disabled preemption.
#[inline(always)]
pub(crate) unsafe fn enable_on_kthread() {
    // SAFETY: per the contract.
    if unsafe { arch::gs_dec32_is_zero::<OFF_PREEMPT>() } {
        run_pending();
    }
}

/// Whether the caller may be preempted (or switch) right now.
#[inline]
pub fn is_enabled() -> bool {
    match kthread::current_kthread() {
        // One %gs-relative load: the word of whichever kthread we are on at that instant.
        Some(_) => {
            // SAFETY: on a kthread (a migration since the check lands on another kthread).
            let word = unsafe { arch::gs_read32::<OFF_PREEMPT>() };
            word & !PREEMPT_NOT_PENDING == 0
        }
        None => true,
    }
}

#[cold]
fn run_pending() {
    crate::sched::preempt_pending();
}

/// Whether a uthread of this process can be preempted at all: only once a runtime with
/// preemption has installed its signal handler. Code that disables preemption around C
/// library calls on every call (the `malloc` wrappers) can skip it before then.
#[inline]
pub fn possible() -> bool {
    crate::signal::preemption_installed()
}

/// Disables preemption for as long as it lives.
pub struct PreemptGuard {
    _not_send: core::marker::PhantomData<*mut ()>,
}

impl PreemptGuard {
    #[inline]
    pub fn new() -> Self {
        disable();
        PreemptGuard {
            _not_send: core::marker::PhantomData,
        }
    }
}

impl Default for PreemptGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PreemptGuard {
    #[inline]
    fn drop(&mut self) {
        enable();
    }
}
