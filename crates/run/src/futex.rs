//! Futex-style waiting for the shim's pthread objects: `wait(word, expected)` blocks while the
//! word holds `expected`, `wake(word, n)` releases up to `n` waiters on it. Both are the
//! runtime's [`corral::futex`]: a uthread waiting gives its kthread back instead of blocking it
//! in the kernel; a caller that is not a uthread sleeps in the kernel.
//!
//! Every pthread object of the shim lives in the program's own storage as atomic words on
//! which it waits here, so static initializers work and no object is ever allocated.

use core::sync::atomic::AtomicU32;
use std::time::Instant;

use corral::futex::{self as rt, MATCH_ANY};

/// Why a wait returned without a wake.
#[derive(Debug, PartialEq, Eq)]
pub enum NotWoken {
    /// The word no longer held the expected value.
    Changed,
    TimedOut,
}

/// Blocks while `word` holds `expected`, until a `wake` on it or `deadline`. May return `Ok`
/// without a wake (a signal interrupted a kernel sleep): every caller re-checks its word.
///
/// A signal routed to the waiting uthread ends the wait early: its handler runs here, as
/// during a kernel futex wait, and the caller re-checks.
pub fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> Result<(), NotWoken> {
    let deadline = deadline.map(monotonic_ns);
    if !crate::signals::before_wait(word.as_ptr() as usize) {
        crate::signals::deliver_current();
        return Ok(());
    }
    let slept = rt::wait(word, expected, MATCH_ANY, deadline);
    crate::signals::after_wait();
    match slept {
        Ok(()) | Err(rt::NotWoken::Interrupted) => Ok(()),
        Err(rt::NotWoken::Changed) => Err(NotWoken::Changed),
        Err(rt::NotWoken::TimedOut) => Err(NotWoken::TimedOut),
        Err(rt::NotWoken::Refused(errno)) => crate::refuse::fatal(&format!(
            "a futex wait on a pthread object failed: {}",
            std::io::Error::from_raw_os_error(errno)
        )),
    }
}

/// Wakes up to `n` threads waiting on `word`; returns how many.
pub fn wake(word: &AtomicU32, n: usize) -> usize {
    rt::wake(word, n, MATCH_ANY)
}

/// `when` in nanoseconds on CLOCK_MONOTONIC (the clock of `Instant`), never early.
pub fn monotonic_ns(when: Instant) -> u64 {
    let left = when.saturating_duration_since(Instant::now());
    corral::now_ns().saturating_add(u64::try_from(left.as_nanos()).unwrap_or(u64::MAX))
}
