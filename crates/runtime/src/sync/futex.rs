//! Waiting on a word's value, as the futex system call offers it, for uthreads and other
//! threads alike: [`wait`] blocks while a word holds an expected value, [`wake`] releases
//! waiters on it. Programs built on futexes (Rust's std, and C code that calls `futex` through
//! `syscall`) keep their protocol, and a uthread that waits gives its kthread back.
//!
//! A uthread waits in a table of address-hashed buckets, each a spinlock over a FIFO of waiters.
//! The spinlock is held only to check the word and queue, or to unlink waiters; waking happens
//! after it is released, so a wake that itself makes a futex call (an OS thread's unpark) never
//! finds its own bucket locked. Any other thread sleeps in the kernel on the word itself, as a
//! plain futex wait, counted in [`KernelSleepers`] so that a wake makes the system call only
//! while someone may sleep there.

use core::num::NonZeroU32;
use core::sync::atomic::{AtomicU32, Ordering};
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::sync::Arc;

use rustix::io::Errno;
use rustix::thread::futex as kernel;

use crate::preempt;
use crate::sched::uthread;
use crate::sync::kernel_sleepers::KernelSleepers;
use crate::sync::spin::RawSpinLock;
use crate::sync::waitq::{WaitNode, WaitRef, block_with, block_with_deadline};

/// The bitset that matches every other: what a wait or wake without one uses.
pub const MATCH_ANY: u32 = u32::MAX;

const BUCKETS: usize = 512;

/// Why [`wait`] returned without a wake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotWoken {
    /// The word did not hold the expected value.
    Changed,
    /// The deadline passed.
    TimedOut,
    /// A signal interrupted a kernel sleep (OS threads only); the caller re-checks.
    Interrupted,
    /// The kernel refused the sleep (OS threads only), with this errno.
    Refused(i32),
}

struct Waiter {
    addr: usize,
    bitset: u32,
    node: WaitRef,
}

struct Bucket {
    lock: RawSpinLock,
    waiters: UnsafeCell<VecDeque<Waiter>>,
}

// SAFETY: `waiters` is only touched with `lock` held (see `Bucket::with`); the nodes it refers
// to may be woken from any thread.
unsafe impl Sync for Bucket {}

impl Bucket {
    const fn new() -> Bucket {
        Bucket {
            lock: RawSpinLock::new(),
            waiters: UnsafeCell::new(VecDeque::new()),
        }
    }

    /// Runs `f` on the queue with the lock held and preemption disabled.
    fn with<R>(&self, f: impl FnOnce(&mut VecDeque<Waiter>) -> R) -> R {
        preempt::disable();
        let held = self.lock.guard();
        // SAFETY: the lock is held (`held`) until after the borrow ends.
        let r = f(unsafe { &mut *self.waiters.get() });
        drop(held);
        preempt::enable();
        r
    }
}

static TABLE: [Bucket; BUCKETS] = [const { Bucket::new() }; BUCKETS];
static SLEEPERS: KernelSleepers = KernelSleepers::new();

fn bucket(addr: usize) -> &'static Bucket {
    // Fibonacci hashing spreads neighbouring words (fields of one object) over buckets.
    let h = (addr as u64 >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 55;
    &TABLE[h as usize % BUCKETS]
}

/// Blocks while `word` holds `expected`, until a [`wake`] on it whose bitset shares a bit with
/// `bitset`, or until `deadline` (nanoseconds on CLOCK_MONOTONIC, as [`crate::now_ns`]).
///
/// # Panics
/// If `bitset` is 0 (it would match no wake).
pub fn wait(
    word: &AtomicU32,
    expected: u32,
    bitset: u32,
    deadline: Option<u64>,
) -> Result<(), NotWoken> {
    assert!(bitset != 0, "a futex wait with an empty bitset");
    if uthread::current_id().is_none() {
        return kernel_wait(word, expected, bitset, deadline);
    }
    let addr = word as *const AtomicU32 as usize;
    let b = bucket(addr);
    let mut changed = false;
    let mut enqueue = |node: WaitRef| {
        b.with(|q| {
            // A waker changes the word before it takes this lock, so checking under the lock
            // loses no wake.
            if word.load(Ordering::SeqCst) != expected {
                changed = true;
                return false;
            }
            q.push_back(Waiter { addr, bitset, node });
            true
        })
    };
    match deadline {
        None => {
            let node = WaitNode::for_current();
            block_with(&node, || enqueue(WaitRef::Stack(&node)));
            if changed {
                return Err(NotWoken::Changed);
            }
        }
        Some(deadline) => {
            let node = Arc::new(WaitNode::for_current());
            let timed_out =
                block_with_deadline(&node, deadline, || enqueue(WaitRef::Shared(node.clone())));
            if changed {
                return Err(NotWoken::Changed);
            }
            if timed_out {
                let me = Arc::as_ptr(&node);
                b.with(|q| q.retain(|w| !core::ptr::eq(w.node.node(), me)));
                return Err(NotWoken::TimedOut);
            }
        }
    }
    Ok(())
}

fn kernel_wait(
    word: &AtomicU32,
    expected: u32,
    bitset: u32,
    deadline: Option<u64>,
) -> Result<(), NotWoken> {
    let timeout = deadline.map(|ns| kernel::Timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as i64,
    });
    let bitset = NonZeroU32::new(bitset).expect("checked by the caller");
    // FUTEX_WAIT_BITSET's timeout is absolute on CLOCK_MONOTONIC, the clock of `now_ns`.
    let slept = SLEEPERS.sleep(|| {
        kernel::wait_bitset(
            word,
            kernel::Flags::PRIVATE,
            expected,
            timeout.as_ref(),
            bitset,
        )
    });
    match slept {
        Ok(()) => Ok(()),
        Err(Errno::AGAIN) => Err(NotWoken::Changed),
        Err(Errno::TIMEDOUT) => Err(NotWoken::TimedOut),
        Err(Errno::INTR) => Err(NotWoken::Interrupted),
        Err(e) => Err(NotWoken::Refused(e.raw_os_error())),
    }
}

/// Wakes up to `n` threads waiting on `word` with a bitset that shares a bit with `bitset`,
/// oldest first among uthreads; returns how many. Change the word first.
///
/// # Panics
/// If `bitset` is 0 (it would match no waiter).
pub fn wake(word: &AtomicU32, n: usize, bitset: u32) -> usize {
    let bitset = NonZeroU32::new(bitset).expect("a futex wake with an empty bitset");
    let addr = word as *const AtomicU32 as usize;
    // No fence is needed before the look at the queue: the bucket lock orders it. A waiter that
    // took the lock after us reads the word we changed before taking it; one that took it
    // before us is queued when we look.
    let mut woken = wake_queued(addr, n, bitset);
    if woken < n && SLEEPERS.any() {
        let left = u32::try_from(n - woken).unwrap_or(u32::MAX);
        woken += kernel::wake_bitset(word, kernel::Flags::PRIVATE, left, bitset).unwrap_or(0);
    }
    woken
}

/// Wakes up to `n` uthreads waiting on the word at `addr`, oldest first, without reading the
/// word or asking the kernel: for a waker that knows only the address, whose memory may since
/// have been freed (a signal interrupting whatever wait a uthread is in). Each woken waiter
/// returns as from any wake, and the callers of [`wait`] re-check their condition.
pub fn wake_uthreads_at(addr: usize, n: usize) -> usize {
    wake_queued(addr, n, NonZeroU32::MAX)
}

fn wake_queued(addr: usize, n: usize, bitset: NonZeroU32) -> usize {
    let b = bucket(addr);
    let mut woken = 0;
    while woken < n {
        let next = b.with(|q| {
            let i = q
                .iter()
                .position(|w| w.addr == addr && w.bitset & bitset.get() != 0)?;
            q.remove(i)
        });
        let Some(waiter) = next else { break };
        // SAFETY: a queued node stays alive until finished; a waiter that timed out finished
        // its node itself, and then this wake does not count.
        if unsafe { waiter.node.wake() } {
            woken += 1;
        }
    }
    woken
}

/// `FUTEX_WAKE_OP`'s encoded operation: what to do to the second word, and the comparison of
/// its old value that decides whether its waiters are woken too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeOp {
    op: u32,
    arg: u32,
    cmp: u32,
    cmp_arg: i32,
}

impl WakeOp {
    /// Decodes `val3`; `None` for an operation or comparison the kernel does not know.
    pub fn decode(encoded: u32) -> Option<WakeOp> {
        let op = (encoded >> 28) & 0xf;
        let cmp = (encoded >> 24) & 0xf;
        // Both arguments are 12-bit signed fields.
        let sign_extend = |v: u32| ((v << 20) as i32) >> 20;
        let mut arg = sign_extend((encoded >> 12) & 0xfff) as u32;
        let cmp_arg = sign_extend(encoded & 0xfff);
        // FUTEX_OP_OPARG_SHIFT: the argument is a bit number.
        if op & 8 != 0 {
            arg = 1u32 << (arg & 31);
        }
        let op = op & !8;
        (op <= 4 && cmp <= 5).then_some(WakeOp {
            op,
            arg,
            cmp,
            cmp_arg,
        })
    }

    /// Applies the operation atomically; returns the old value.
    pub fn apply(&self, word: &AtomicU32) -> u32 {
        let order = Ordering::SeqCst;
        match self.op {
            0 => word.swap(self.arg, order),
            1 => word.fetch_add(self.arg, order),
            2 => word.fetch_or(self.arg, order),
            3 => word.fetch_and(!self.arg, order),
            _ => word.fetch_xor(self.arg, order),
        }
    }

    /// Whether the second word's old value passes the comparison.
    pub fn holds(&self, old: u32) -> bool {
        let old = old as i32;
        match self.cmp {
            0 => old == self.cmp_arg,
            1 => old != self.cmp_arg,
            2 => old < self.cmp_arg,
            3 => old <= self.cmp_arg,
            4 => old > self.cmp_arg,
            _ => old >= self.cmp_arg,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU32, Ordering};

    /// `FUTEX_OP(op, oparg, cmp, cmparg)` as `linux/futex.h` defines it.
    fn encode(op: u32, arg: u32, cmp: u32, cmp_arg: u32) -> u32 {
        ((op & 0xf) << 28) | ((cmp & 0xf) << 24) | ((arg & 0xfff) << 12) | (cmp_arg & 0xfff)
    }

    #[test]
    fn wake_op_decodes_as_the_kernel_does() {
        // glibc's old condvar: set the word to 0, wake the second word's waiters if it was > 1.
        let op = WakeOp::decode(encode(0, 0, 4, 1)).unwrap();
        assert_eq!((op.op, op.arg, op.cmp, op.cmp_arg), (0, 0, 4, 1));
        // Shifted argument, negative comparison argument.
        let op = WakeOp::decode(encode(8 | 2, 5, 2, (-3i32) as u32)).unwrap();
        assert_eq!((op.op, op.arg, op.cmp, op.cmp_arg), (2, 32, 2, -3));
        // A negative plain argument is sign-extended.
        let op = WakeOp::decode(encode(1, (-1i32) as u32, 0, 0)).unwrap();
        assert_eq!(op.arg, u32::MAX);
        // Unknown operations and comparisons are refused.
        assert_eq!(WakeOp::decode(encode(5, 0, 0, 0)), None);
        assert_eq!(WakeOp::decode(encode(0, 0, 6, 0)), None);
    }

    #[test]
    fn wake_op_applies_and_compares() {
        let word = AtomicU32::new(6);
        let add = WakeOp::decode(encode(1, 3, 5, 6)).unwrap();
        let old = add.apply(&word);
        assert_eq!((old, word.load(Ordering::SeqCst)), (6, 9));
        assert!(add.holds(old), "6 >= 6");
        let andn = WakeOp::decode(encode(3, 1, 2, 0)).unwrap();
        assert_eq!(andn.apply(&word), 9);
        assert_eq!(word.load(Ordering::SeqCst), 8);
        assert!(!andn.holds(9), "9 < 0 is false");
        let xor = WakeOp::decode(encode(4, 0xff, 1, 8)).unwrap();
        assert_eq!(xor.apply(&word), 8);
        assert_eq!(word.load(Ordering::SeqCst), 0xf7);
        assert!(!xor.holds(8), "8 != 8 is false");
    }
}
