//! A parked kthread's wait for a core (iokerneld mode): it runs uthreads again only with a
//! grant, or leaves to shut down.
//!
//! The two sides:
//! - iokerneld pushes `Grant` on the kthread's ingress ring (the ring publishes the slot with
//!   a `Release` store of its descriptor), *then* signals the kthread's [`EventCount`]; the
//!   runtime, to shut down, sets its shutdown flag, *then* signals every kthread's counter;
//! - the kthread, having noted how many grants it had seen before it reported that it parks,
//!   consumes a signal, *then* drains its ingress ring and compares the grant count.
//!
//! So a consumed signal always finds the grant (or the shutdown flag) that was published before
//! it: no grant is ever missed. A signal with neither (a count left over from a grant the
//! kthread already saw while it was running) is spurious: the kthread does not run uthreads on
//! it, since iokerneld may have given that core to someone else, and waits again. The model in
//! `tests/loom.rs` (`parked_kthread_runs_only_with_a_grant` and
//! `parked_kthread_leaves_for_shutdown`) checks both.

use crate::primitives::{AtomicBool, EventCount, Ordering};

/// Why a parked kthread stopped waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// iokerneld granted a core: run.
    Granted,
    /// The runtime shuts down (a grant may have come too).
    ShuttingDown,
}

/// Waits on `events` until a grant arrives or `shutdown` is set.
///
/// `grants_before`: the grant count the kthread read before it reported that it parks.
/// `drain`: drains the kthread's ingress ring (waiting for a thief that is draining it: a grant
/// a thief pops still counts) and returns the grant count after. `spurious`: called for each
/// wake-up that brought neither a grant nor shutdown.
pub fn wait_for_grant(
    events: &EventCount,
    shutdown: &AtomicBool,
    grants_before: u64,
    mut drain: impl FnMut() -> u64,
    mut spurious: impl FnMut(),
) -> Woken {
    loop {
        if shutdown.load(Ordering::SeqCst) {
            return Woken::ShuttingDown;
        }
        events.wait();
        // The signal was sent after the grant was pushed: consumed first, it makes the grant
        // visible to this drain.
        if drain() != grants_before {
            return Woken::Granted;
        }
        spurious();
    }
}
