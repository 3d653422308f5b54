//! The state machine of one blocked waiter: it starts [`WaitState::Waiting`] and moves exactly
//! once, to `Woken` (by a notifier) or `TimedOut` (by a timer), with a compare-exchange. The
//! party whose exchange succeeds, and only that party, makes the waiter runnable: a wake racing
//! a timeout neither loses the waiter nor wakes it twice. The model in `tests/loom.rs`
//! (`wake_and_timeout_race_has_one_winner`) checks it.

use crate::primitives::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WaitState {
    Waiting = 0,
    Woken = 1,
    TimedOut = 2,
}

impl WaitState {
    fn from_u8(v: u8) -> WaitState {
        match v {
            0 => WaitState::Waiting,
            1 => WaitState::Woken,
            2 => WaitState::TimedOut,
            _ => unreachable!("wait state {v}: only WaitState values are ever stored"),
        }
    }
}

pub struct AtomicWaitState(AtomicU8);

impl Default for AtomicWaitState {
    fn default() -> Self {
        Self::new()
    }
}

impl AtomicWaitState {
    pub fn new() -> Self {
        AtomicWaitState(AtomicU8::new(WaitState::Waiting as u8))
    }

    /// The state, with what the finishing party did before finishing visible.
    #[inline]
    pub fn load(&self) -> WaitState {
        WaitState::from_u8(self.0.load(Ordering::Acquire))
    }

    /// Moves a waiting node to `to`. Returns false if another party already finished it; only
    /// the party that gets true may make the waiter runnable.
    #[inline]
    pub fn finish(&self, to: WaitState) -> bool {
        debug_assert_ne!(to, WaitState::Waiting);
        // Release: what the finisher did before (e.g. handing over data) is visible to the
        // waiter that sees the new state; Acquire: a loser sees the winner's writes.
        self.0
            .compare_exchange(
                WaitState::Waiting as u8,
                to as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}
