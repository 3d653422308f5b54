//! Parking: the commands a kthread sends on its command ring as it parks (`Park`, `Yielded`,
//! the runtime's timer deadline), and its wait on its wake word until iokerneld grants it a core
//! (the handshake itself is [`super::grant_wait`]).

use core::sync::atomic::Ordering;

use corral_abi::{Command, Slot, flags};

use super::IokKthread;
use super::grant_wait::{Woken, wait_for_grant};
use crate::primitives::AtomicBool;

impl IokKthread {
    /// Pushes a command, waiting for room (iokerneld drains the ring every loop).
    ///
    /// # Safety
    /// Called only by the owning kthread, with preemption disabled.
    pub unsafe fn send(&self, slot: Slot) {
        self.commands_lock.lock();
        // SAFETY: commands_lock held.
        let commands = unsafe { &mut *self.commands.get() };
        while commands.try_push(slot).is_err() {
            crate::arch::pause();
        }
        // SAFETY: we hold the lock.
        unsafe { self.commands_lock.unlock() };
    }

    /// Reports that the kthread parks: `Yielded` (flagged when work was left behind) after a
    /// preemption, `Park` otherwise.
    ///
    /// # Safety
    /// As for [`IokKthread::send`].
    pub unsafe fn send_park(&self, preempted: bool, left_work: bool, acks_can_wait: bool) {
        let slot = if preempted {
            let f = if left_work { flags::HAS_WORK } else { 0 };
            Slot::new(Command::Yielded, f, 0, 0)
        } else {
            let f = if acks_can_wait {
                flags::ACKS_CAN_WAIT
            } else {
                0
            };
            Slot::new(Command::Park, f, 0, 0)
        };
        self.preempt_requested.store(false, Ordering::Release);
        // SAFETY: forwarded.
        unsafe { self.send(slot) };
    }

    /// Blocks until iokerneld grants a core (a grant newer than `grants_before`, the count
    /// read before the kthread reported that it parks) or `shutdown` is set. `drain` drains the
    /// kthread's own ingress ring and returns the grant count after. Wake-ups with neither are
    /// counted in `spurious_wakes`.
    pub fn wait_for_grant(
        &self,
        shutdown: &AtomicBool,
        grants_before: u64,
        drain: impl FnMut() -> u64,
    ) -> Woken {
        wait_for_grant(&self.wake_word, shutdown, grants_before, drain, || {
            self.spurious_wakes.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Wakes the kthread without iokerneld (shutdown only: set the flag first).
    pub fn kick(&self) {
        self.wake_word.ring();
    }
}

/// Reports the runtime's earliest timer (`u64::MAX`: none) before its last kthread parks.
///
/// # Safety
/// As for [`IokKthread::send`].
pub(crate) unsafe fn send_timer_deadline(k: &IokKthread, deadline: u64) {
    // SAFETY: forwarded.
    unsafe { k.send(Slot::value(Command::TimerDeadline, deadline)) };
}
