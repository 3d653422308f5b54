//! A parked kthread's wait for a core (iokerneld mode): it runs uthreads again only with a
//! grant, or leaves to shut down.
//!
//! The two sides:
//! - iokerneld pushes `Grant` on the kthread's ingress ring (the ring publishes the slot with
//!   a `Release` store of its descriptor), *then* rings the kthread's [`WakeWord`] (adds one and
//!   wakes the futex); the runtime, to shut down, sets its shutdown flag, *then* rings every
//!   kthread's word;
//! - the kthread, having noted how many grants it had seen before it reported that it parks,
//!   reads the word, *then* checks the shutdown flag and drains its ingress ring, and sleeps
//!   only while the word still reads what it read.
//!
//! So a ring that comes after the read ends the sleep, and one that came before it makes the
//! grant (or the shutdown flag) published before it visible to the drain: no grant is ever
//! missed. A change of the word with neither (a ring for a grant the kthread already saw while
//! it was running) is spurious: the kthread does not run uthreads on it, since iokerneld may
//! have given that core to someone else, and waits again. The models in `tests/loom.rs`
//! (`parked_kthread_runs_only_with_a_grant` and `parked_kthread_leaves_for_shutdown`) check
//! both.

use crate::primitives::{AtomicBool, Ordering, WakeWord};

/// Why a parked kthread stopped waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// iokerneld granted a core: run.
    Granted,
    /// The runtime shuts down (a grant may have come too).
    ShuttingDown,
}

/// Waits on `word` until a grant arrives or `shutdown` is set.
///
/// `grants_before`: the grant count the kthread read before it reported that it parks.
/// `drain`: drains the kthread's ingress ring (waiting for a thief that is draining it: a grant
/// a thief pops still counts) and returns the grant count after. `spurious`: called for each
/// change of the word that brought neither a grant nor shutdown.
pub fn wait_for_grant(
    word: &WakeWord,
    shutdown: &AtomicBool,
    grants_before: u64,
    mut drain: impl FnMut() -> u64,
    mut spurious: impl FnMut(),
) -> Woken {
    let mut last_seen = None;
    loop {
        // Read before looking: a ring after this read changes the word and ends the sleep.
        let seen = word.load();
        if shutdown.load(Ordering::SeqCst) {
            return Woken::ShuttingDown;
        }
        if drain() != grants_before {
            return Woken::Granted;
        }
        if last_seen.is_some_and(|last| last != seen) {
            spurious();
        }
        last_seen = Some(seen);
        word.wait(seen);
    }
}
