//! One managed core's mailbox, shared by iokerneld's loop and the core's helper thread.
//!
//! The loop *posts* the address of the granted kthread's wake word (after it has rung the word
//! itself: the helper never touches a runtime's memory, it only passes the address to
//! `FUTEX_WAKE`, which a stale or unmapped address cannot turn into a fault). The helper
//! *claims* the post and wakes the futex. Every post is delivered by exactly one side.
//!
//! Everything the two sides decide on lives in one word, changed only by read-modify-writes,
//! so the word's modification order alone settles every race (no store-then-load pattern
//! whose correctness would rest on sequential consistency):
//!
//! - [`EMPTY`]: no post, the helper watches (running, or runnable and waiting for its core to
//!   go idle);
//! - [`ASLEEP`]: no post, the helper sleeps: only the loop can deliver, and it wakes the helper;
//! - [`STOPPING`]: the helper is told to exit;
//! - anything else: a post, the address to wake.
//!
//! A post the helper has not claimed after a while (its CPU is busy with something else) is
//! taken back by the loop ([`Mailbox::retract`]). The loop also tells the helper whether a
//! kthread holds the core ([`Mailbox::set_occupied`]): a helper that finds itself running while
//! a kthread holds the core has been given a slice of CPU by Linux's fairness, not an idle
//! core, and yields it back.

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// No post; the helper watches.
pub const EMPTY: u64 = 0;
/// No post; the helper sleeps.
pub const ASLEEP: u64 = 1;
/// The helper is to exit.
pub const STOPPING: u64 = 2;

/// What the helper is doing, as the mailbox says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelperState {
    /// Running or runnable: it will look at the mailbox when its core goes idle.
    Watching,
    /// Asleep: only the loop can deliver a post, and wake it.
    Asleep,
    /// Told to exit.
    Stopping,
}

/// Who delivers a post.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// The helper will (it may already have).
    ByHelper,
    /// The helper sleeps (or is stopping): the loop wakes the kthread itself, then wakes the
    /// helper ([`Mailbox::wake_helper`]).
    ByLoop,
}

/// A core's mailbox. One cache line, written by both sides only at hand-overs.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Mailbox {
    /// [`EMPTY`], [`ASLEEP`], [`STOPPING`] or a posted address.
    word: AtomicU64,
    /// Moves on every time the loop wakes the helper: the futex the helper sleeps on.
    wakeups: AtomicU32,
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
            word: AtomicU64::new(EMPTY),
            wakeups: AtomicU32::new(0),
            occupied: AtomicU32::new(0),
        }
    }

    // ---- iokerneld's loop ----

    /// Posts `target` (an address, so never one of the state values) for the helper. Any
    /// earlier post must have been delivered or retracted; one still there is replaced.
    pub fn post(&self, target: u64) -> Delivery {
        debug_assert!(target > STOPPING);
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            if current == ASLEEP || current == STOPPING {
                return Delivery::ByLoop;
            }
            match self.word.compare_exchange_weak(
                current,
                target,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Delivery::ByHelper,
                Err(now) => current = now,
            }
        }
    }

    /// Takes back a post the helper has not claimed: the address, which the loop then wakes
    /// itself, or `None` if the helper got to it first.
    pub fn retract(&self) -> Option<u64> {
        self.take_post()
    }

    /// Marks a sleeping helper watching again. Returns whether it was asleep; the caller then
    /// wakes [`Mailbox::wakeup_word`].
    pub fn wake_helper(&self) -> bool {
        let woke = self
            .word
            .compare_exchange(ASLEEP, EMPTY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if woke {
            self.wakeups.fetch_add(1, Ordering::AcqRel);
        }
        woke
    }

    /// Tells the helper to exit, taking back any post (returned, for the loop to deliver). The
    /// caller then wakes [`Mailbox::wakeup_word`].
    pub fn stop(&self) -> Option<u64> {
        let previous = self.word.swap(STOPPING, Ordering::AcqRel);
        self.wakeups.fetch_add(1, Ordering::AcqRel);
        (previous > STOPPING).then_some(previous)
    }

    /// Records whether a kthread holds the core.
    pub fn set_occupied(&self, occupied: bool) {
        self.occupied.store(u32::from(occupied), Ordering::Release);
    }

    // ---- the helper ----

    /// Takes the post, if there is one.
    pub fn claim(&self) -> Option<u64> {
        if self.word.load(Ordering::Relaxed) <= STOPPING {
            return None;
        }
        self.take_post()
    }

    /// Announces that the helper goes to sleep: `Ok(wakeups)` if it may now sleep on
    /// [`Mailbox::wakeup_word`] while that reads `wakeups` and the state stays
    /// [`HelperState::Asleep`] (any later post is delivered by the loop), or `Err(post)` with a
    /// post that arrived first (the helper delivers it and stays awake), or `Err(None)` when
    /// stopping.
    pub fn announce_sleep(&self) -> Result<u32, Option<u64>> {
        let wakeups = self.wakeups.load(Ordering::Acquire);
        match self
            .word
            .compare_exchange(EMPTY, ASLEEP, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Ok(wakeups),
            Err(STOPPING) => Err(None),
            Err(_) => Err(self.take_post()),
        }
    }

    /// The helper's state.
    pub fn helper_state(&self) -> HelperState {
        match self.word.load(Ordering::Acquire) {
            ASLEEP => HelperState::Asleep,
            STOPPING => HelperState::Stopping,
            _ => HelperState::Watching,
        }
    }

    /// Whether a kthread holds the core, as far as the loop knows.
    pub fn occupied(&self) -> bool {
        self.occupied.load(Ordering::Relaxed) != 0
    }

    /// The futex the helper sleeps on; it moves on each time the loop wakes the helper.
    #[cfg(not(loom))]
    pub fn wakeup_word(&self) -> &AtomicU32 {
        &self.wakeups
    }

    /// The wake-up count now (what [`Mailbox::wakeup_word`] holds).
    pub fn wakeups(&self) -> u32 {
        self.wakeups.load(Ordering::Acquire)
    }

    /// Swaps a post (and only a post) for [`EMPTY`].
    fn take_post(&self) -> Option<u64> {
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            if current <= STOPPING {
                return None;
            }
            match self.word.compare_exchange_weak(
                current,
                EMPTY,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(current),
                Err(now) => current = now,
            }
        }
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
        let before = m.announce_sleep().unwrap();
        assert_eq!(m.helper_state(), HelperState::Asleep);
        assert_eq!(m.post(70), Delivery::ByLoop);
        assert_eq!(m.claim(), None, "the loop keeps the post");
        assert!(m.wake_helper());
        assert_ne!(m.wakeups(), before, "the helper's futex moved on");
        assert_eq!(m.helper_state(), HelperState::Watching);
        assert!(!m.wake_helper(), "already awake");
    }

    #[test]
    fn a_post_that_beats_the_sleep_keeps_the_helper_awake() {
        let m = Mailbox::new();
        assert_eq!(m.post(90), Delivery::ByHelper);
        assert_eq!(m.announce_sleep(), Err(Some(90)));
        assert_eq!(m.helper_state(), HelperState::Watching);
    }

    #[test]
    fn an_unclaimed_post_can_be_taken_back_once() {
        let m = Mailbox::new();
        m.post(50);
        assert_eq!(m.retract(), Some(50));
        assert_eq!(m.retract(), None);
        assert_eq!(m.claim(), None);
    }

    #[test]
    fn stopping_is_final_and_hands_back_the_post() {
        let m = Mailbox::new();
        m.post(60);
        assert_eq!(m.stop(), Some(60));
        assert_eq!(m.announce_sleep(), Err(None));
        assert!(!m.wake_helper());
        assert_eq!(m.post(80), Delivery::ByLoop);
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
