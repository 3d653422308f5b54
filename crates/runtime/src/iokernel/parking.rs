//! Parking: the commands a kthread sends on its command ring as it parks (`Park`, `Yielded`,
//! the runtime's timer deadline), and its sleep on the eventfd until iokerneld wakes it.

use core::sync::atomic::Ordering;

use std::os::fd::AsFd;

use corral_abi::transport::eventfd;
use corral_abi::{Command, Slot, flags};

use super::IokKthread;

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
    pub unsafe fn send_park(&self, preempted: bool, left_work: bool) {
        let slot = if preempted {
            let f = if left_work { flags::HAS_WORK } else { 0 };
            Slot::new(Command::Yielded, f, 0, 0)
        } else {
            Slot::value(Command::Park, 0)
        };
        self.preempt_requested.store(false, Ordering::Release);
        // SAFETY: forwarded.
        unsafe { self.send(slot) };
    }

    /// Blocks until the eventfd is written (by iokerneld, or by the runtime at shutdown).
    ///
    /// The eventfd is nonblocking (corral-abi's transport creates it so, and iokerneld insists,
    /// so that no runtime can ever block its write): sleep in `poll`, then read. A signal (a
    /// stale preemption) only sends the loop round again.
    pub fn wait(&self) {
        let fd = self.eventfd.as_fd();
        while !eventfd::try_consume(fd).unwrap_or(false) {
            let _ = eventfd::wait_readable(fd, None);
        }
    }

    /// Wakes the kthread without iokerneld (shutdown only).
    pub fn kick(&self) {
        let _ = eventfd::signal(self.eventfd.as_fd());
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
