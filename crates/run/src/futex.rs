//! Futex-style waiting for uthreads: `wait(word, expected)` blocks while the word holds
//! `expected`, `wake(word, n)` releases up to `n` waiters on it. The real futex system call
//! would block the kthread; this parks the uthread instead (or the OS thread, for callers that
//! are not uthreads), through a table of address-hashed buckets of Corral mutexes and condvars.
//!
//! Every pthread object of the shim lives in the program's own storage as atomic words on
//! which it waits here, so static initializers work and no object is ever allocated.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use corral::{Condvar, Mutex};

const BUCKETS: usize = 256;

/// One blocked thread. Lives on its own stack; the bucket holds a pointer to it only while the
/// thread waits, and the thread leaves only after taking itself off the list under the lock
/// (or being taken off by a waker).
struct Waiter {
    addr: usize,
    woken: AtomicBool,
    cv: Condvar,
}

struct WaiterList(Vec<*const Waiter>);

// SAFETY: the pointers are only dereferenced under the bucket's lock, while their waiters are
// blocked on it (see Waiter).
unsafe impl Send for WaiterList {}

struct Bucket {
    waiters: Mutex<WaiterList>,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Bucket = Bucket {
    waiters: Mutex::new(WaiterList(Vec::new())),
};
static TABLE: [Bucket; BUCKETS] = [EMPTY; BUCKETS];

fn bucket(addr: usize) -> &'static Bucket {
    // Fibonacci hashing spreads neighbouring words (fields of one object) over buckets.
    let h = (addr as u64 >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
    &TABLE[h as usize % BUCKETS]
}

/// Why a wait returned without a wake.
#[derive(Debug, PartialEq, Eq)]
pub enum NotWoken {
    /// The word no longer held the expected value.
    Changed,
    TimedOut,
}

/// Blocks while `word` holds `expected`, until a `wake` on it or `deadline`.
pub fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> Result<(), NotWoken> {
    let addr = word as *const AtomicU32 as usize;
    let b = bucket(addr);
    let mut list = b.waiters.lock();
    // A waker changes the word before it takes this lock, so checking under it loses nothing.
    if word.load(Ordering::SeqCst) != expected {
        return Err(NotWoken::Changed);
    }
    let me = Waiter {
        addr,
        woken: AtomicBool::new(false),
        cv: Condvar::new(),
    };
    list.0.push(&me);
    loop {
        if me.woken.load(Ordering::Relaxed) {
            return Ok(());
        }
        match deadline {
            None => me.cv.wait(&mut list),
            Some(d) => {
                let timed_out = Instant::now() >= d || me.cv.wait_until(&mut list, d).timed_out();
                if timed_out && !me.woken.load(Ordering::Relaxed) {
                    list.0.retain(|&w| !core::ptr::eq(w, &me));
                    return Err(NotWoken::TimedOut);
                }
            }
        }
    }
}

/// Wakes up to `n` threads waiting on `word`, oldest first; returns how many.
pub fn wake(word: &AtomicU32, n: usize) -> usize {
    let addr = word as *const AtomicU32 as usize;
    let mut list = bucket(addr).waiters.lock();
    let mut woken = 0;
    list.0.retain(|&w| {
        // SAFETY: w is blocked on this bucket (see Waiter) and we hold its lock.
        let w = unsafe { &*w };
        if woken < n && w.addr == addr {
            w.woken.store(true, Ordering::Relaxed);
            w.cv.notify_one();
            woken += 1;
            false
        } else {
            true
        }
    });
    woken
}
