//! One managed core's mailbox, shared by iokerneld's loop and the core's helper thread.
//!
//! The loop *posts* the address of the granted kthread's wake word (after it has rung the word
//! itself: the helper never touches a runtime's memory, it only passes the address to
//! `FUTEX_WAKE`, which a stale or unmapped address cannot turn into a fault). The helper
//! *claims* the post and wakes the futex. Every post is delivered by exactly one side:
//!
//! - a helper about to sleep announces it ([`HelperState::Asleep`]), then looks at the mailbox
//!   once more;
//! - the loop posts, then reads the helper's state; if the helper sleeps it takes the post back
//!   and delivers it itself (a cross-CPU wake-up, as without helpers), then wakes the helper.
//!
//! All four accesses are sequentially consistent, so at least one side sees the other's write
//! (the store-then-load pattern), and a post is taken by one swap or compare-exchange only. A
//! post the helper has not claimed after a while (its CPU is busy with something else) is
//! taken back the same way ([`Mailbox::retract`]).
//!
//! The loop also tells the helper whether a kthread holds the core ([`Mailbox::set_occupied`]):
//! a helper that finds itself running while a kthread holds the core has been given a slice of
//! CPU by Linux's fairness, not an idle core, and yields it back.

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// What the helper is doing, as the loop sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum HelperState {
    /// Running or runnable: it will look at the mailbox when its core goes idle.
    Watching = 0,
    /// Asleep on its state word: only the loop can deliver a post, and wake it.
    Asleep = 1,
    /// Told to exit.
    Stopping = 2,
}

/// Who delivers a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The helper will (it may already have).
    ByHelper,
    /// The helper sleeps and the post was taken back: the loop wakes the kthread itself, then
    /// the helper ([`Mailbox::wake_helper`]).
    ByLoop,
}

/// A core's mailbox. One cache line, written by both sides only at hand-overs.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Mailbox {
    /// 0: empty. Otherwise the address of the wake word to wake.
    post: AtomicU64,
    /// A [`HelperState`]; the futex word the helper sleeps on.
    helper: AtomicU32,
    /// Nonzero while a kthread holds the core, as far as the loop knows.
    occupied: AtomicU32,
}

impl Default for Mailbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Mailbox {
    /// An empty mailbox, its helper watching, its core free.
    pub fn new() -> Self {
        Mailbox {
            post: AtomicU64::new(0),
            helper: AtomicU32::new(HelperState::Watching as u32),
            occupied: AtomicU32::new(0),
        }
    }

    // ---- iokerneld's loop ----

    /// Posts `target` (nonzero) for the helper. Any earlier post must have been delivered or
    /// retracted. A helper that is not watching (asleep, or stopping) leaves it to the loop.
    pub fn post(&self, target: u64) -> Delivery {
        debug_assert_ne!(target, 0);
        self.post.store(target, Ordering::SeqCst);
        if self.helper.load(Ordering::SeqCst) != HelperState::Watching as u32
            && self
                .post
                .compare_exchange(target, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return Delivery::ByLoop;
        }
        Delivery::ByHelper
    }

    /// Takes back a post the helper has not claimed: the address, which the loop then wakes
    /// itself, or `None` if the helper got to it first.
    pub fn retract(&self) -> Option<u64> {
        match self.post.swap(0, Ordering::SeqCst) {
            0 => None,
            target => Some(target),
        }
    }

    /// Marks the helper watching again; the caller then wakes the state word
    /// ([`Mailbox::helper_word`]). Returns whether it was asleep (a stopping helper stays so).
    pub fn wake_helper(&self) -> bool {
        self.helper
            .compare_exchange(
                HelperState::Asleep as u32,
                HelperState::Watching as u32,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
    }

    /// Tells the helper to exit; the caller then wakes the state word.
    pub fn stop(&self) {
        self.helper
            .store(HelperState::Stopping as u32, Ordering::SeqCst);
    }

    /// Records whether a kthread holds the core.
    pub fn set_occupied(&self, occupied: bool) {
        self.occupied.store(u32::from(occupied), Ordering::SeqCst);
    }

    // ---- the helper ----

    /// Takes the post, if there is one.
    pub fn claim(&self) -> Option<u64> {
        if self.post.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.retract()
    }

    /// Announces that the helper goes to sleep, then looks once more: a post that arrived
    /// meanwhile is returned (the helper delivers it and stays awake); `None` means the helper
    /// may sleep on [`Mailbox::helper_word`] while it reads [`HelperState::Asleep`], and any
    /// later post will be delivered by the loop. A stopping helper stays stopping.
    pub fn announce_sleep(&self) -> Option<u64> {
        if self
            .helper
            .compare_exchange(
                HelperState::Watching as u32,
                HelperState::Asleep as u32,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            return None;
        }
        let target = self.retract();
        if target.is_some() {
            // Stay awake: whatever the loop does with the state now, it finds no post to take.
            let _ = self.helper.compare_exchange(
                HelperState::Asleep as u32,
                HelperState::Watching as u32,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        target
    }

    /// The helper's state.
    pub fn helper_state(&self) -> HelperState {
        match self.helper.load(Ordering::SeqCst) {
            0 => HelperState::Watching,
            1 => HelperState::Asleep,
            _ => HelperState::Stopping,
        }
    }

    /// Whether a kthread holds the core, as far as the loop knows.
    pub fn occupied(&self) -> bool {
        self.occupied.load(Ordering::Relaxed) != 0
    }

    /// The word the helper sleeps on (a futex); its value is a [`HelperState`].
    #[cfg(not(loom))]
    pub fn helper_word(&self) -> &AtomicU32 {
        &self.helper
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_watching_helper_gets_the_post() {
        let m = Mailbox::new();
        assert_eq!(m.post(42), Delivery::ByHelper);
        assert_eq!(m.claim(), Some(42));
        assert_eq!(m.claim(), None);
        assert_eq!(m.retract(), None);
    }

    #[test]
    fn a_sleeping_helper_leaves_the_post_to_the_loop() {
        let m = Mailbox::new();
        assert_eq!(m.announce_sleep(), None);
        assert_eq!(m.helper_state(), HelperState::Asleep);
        assert_eq!(m.post(7), Delivery::ByLoop);
        assert_eq!(m.claim(), None, "the loop took the post back");
        assert!(m.wake_helper());
        assert_eq!(m.helper_state(), HelperState::Watching);
        assert!(!m.wake_helper(), "already awake");
    }

    #[test]
    fn a_post_that_beats_the_sleep_keeps_the_helper_awake() {
        let m = Mailbox::new();
        assert_eq!(m.post(9), Delivery::ByHelper);
        assert_eq!(m.announce_sleep(), Some(9));
        assert_eq!(m.helper_state(), HelperState::Watching);
    }

    #[test]
    fn an_unclaimed_post_can_be_taken_back_once() {
        let m = Mailbox::new();
        m.post(5);
        assert_eq!(m.retract(), Some(5));
        assert_eq!(m.retract(), None);
        assert_eq!(m.claim(), None);
    }

    #[test]
    fn stopping_is_final() {
        let m = Mailbox::new();
        m.stop();
        assert_eq!(m.announce_sleep(), None);
        assert!(!m.wake_helper());
        assert_eq!(m.helper_state(), HelperState::Stopping);
    }

    #[test]
    fn occupancy_is_reported() {
        let m = Mailbox::new();
        assert!(!m.occupied());
        m.set_occupied(true);
        assert!(m.occupied());
        m.set_occupied(false);
        assert!(!m.occupied());
    }
}
