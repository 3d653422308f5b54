//! Model check of the mailbox handshake (`corral_handoff::mailbox`): every post iokerneld's
//! loop makes is delivered exactly once, by the helper or by the loop, whether the helper is
//! watching, going to sleep, or asleep; and a helper that went to sleep is always woken by
//! the loop when the loop delivers in its place.
//!
//! Run with: RUSTFLAGS="--cfg loom" cargo test -p corral-handoff --test loom --release
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

use corral_handoff::{Delivery, HelperState, Mailbox};

const TARGET: u64 = 0x1000;

// The loop's post and the helper's sleep race on one word; see the mailbox's documentation.

/// The helper's loop, reduced to one look at the mailbox and then, finding nothing, the
/// announcement that it sleeps (what it does once its spin budget runs out).
fn helper(mailbox: &Mailbox, delivered: &AtomicUsize) -> bool {
    if mailbox.claim().is_some() {
        delivered.fetch_add(1, Ordering::SeqCst);
        return false;
    }
    match mailbox.announce_sleep() {
        Err(Some(_)) => {
            delivered.fetch_add(1, Ordering::SeqCst);
            false
        }
        Err(None) => unreachable!("nobody stops the helper here"),
        Ok(_) => true,
    }
}

#[test]
fn every_post_is_delivered_once() {
    loom::model(|| {
        let mailbox = Arc::new(Mailbox::new());
        let delivered = Arc::new(AtomicUsize::new(0));
        let helper_thread = {
            let (mailbox, delivered) = (mailbox.clone(), delivered.clone());
            thread::spawn(move || helper(&mailbox, &delivered))
        };
        let by_loop = mailbox.post(TARGET) == Delivery::ByLoop;
        if by_loop {
            delivered.fetch_add(1, Ordering::SeqCst);
        }
        let slept = helper_thread.join().unwrap();
        // Exactly one side delivered, and a helper that went to sleep left the post to the
        // loop (otherwise nobody would ever wake the kthread).
        assert_eq!(
            delivered.load(Ordering::SeqCst),
            1,
            "slept {slept}, by loop {by_loop}"
        );
        assert!(!slept || by_loop, "the helper slept on an undelivered post");
        if by_loop {
            // The loop delivered because the helper was asleep: it must find it so to wake it.
            assert!(mailbox.wake_helper());
            assert_eq!(mailbox.helper_state(), HelperState::Watching);
        }
    });
}

/// The loop takes back a post the helper was slow to claim while the helper claims it: one of
/// them gets it.
#[test]
fn a_retracted_post_is_delivered_once() {
    loom::model(|| {
        let mailbox = Arc::new(Mailbox::new());
        assert_eq!(mailbox.post(TARGET), Delivery::ByHelper);
        let helper_thread = {
            let mailbox = mailbox.clone();
            thread::spawn(move || mailbox.claim().is_some())
        };
        let by_loop = mailbox.retract().is_some();
        let by_helper = helper_thread.join().unwrap();
        assert!(by_loop ^ by_helper);
    });
}
