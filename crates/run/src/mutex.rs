//! `pthread_mutex_*`: a three-state futex mutex (0 free, 1 locked, 2 locked with waiters) in the
//! program's `pthread_mutex_t`, blocking through [`crate::futex`].
//!
//! Layout inside glibc's 40-byte object, chosen so that glibc's static initializers
//! (`PTHREAD_MUTEX_INITIALIZER`, `PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP`, ...) mean the same:
//! offset 0 the lock word (glibc's `__lock`), 4 the recursion count (`__count`), 16 the kind
//! (`__kind`), 24 the owner's thread pointer (in `__list`). Robust, priority-inheritance and
//! priority-protect mutexes behave as plain ones of their type.

use core::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::{futex, layout, time};

unsafe extern "C" {
    /// glibc's, which knows its attribute layout (the libc crate does not declare it).
    fn pthread_mutexattr_gettype(attr: *const libc::pthread_mutexattr_t, kind: *mut i32) -> i32;
}

const OFF_LOCK: usize = 0;
const OFF_COUNT: usize = 4;
const OFF_KIND: usize = 16;
const OFF_OWNER: usize = 24;

const KIND_RECURSIVE: u32 = libc::PTHREAD_MUTEX_RECURSIVE as u32;
const KIND_ERRORCHECK: u32 = libc::PTHREAD_MUTEX_ERRORCHECK as u32;
/// glibc keeps flags (robust, shared, ...) above the type bits.
const KIND_TYPE_MASK: u32 = 3;

/// The calling thread's identity: its thread control block, distinct for every uthread.
fn me() -> usize {
    // SAFETY: pthread_self has no preconditions; glibc's reads %fs.
    unsafe { libc::pthread_self() as usize }
}

/// Locks the futex word of a mutex-like object; `deadline` bounds the wait.
pub fn raw_lock(w: &AtomicU32, deadline: Option<Instant>) -> bool {
    if w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
    {
        return true;
    }
    while w.swap(2, Ordering::Acquire) != 0 {
        if futex::wait(w, 2, deadline) == Err(futex::NotWoken::TimedOut) {
            return w.swap(2, Ordering::Acquire) == 0;
        }
    }
    true
}

pub fn raw_try_lock(w: &AtomicU32) -> bool {
    w.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_ok()
}

pub fn raw_unlock(w: &AtomicU32) {
    if w.fetch_sub(1, Ordering::Release) != 1 {
        w.store(0, Ordering::Release);
        futex::wake(w, 1);
    }
}

/// Recursive and error-checking mutexes know their owner; the others do not need to.
fn tracks_owner(kind: u32) -> bool {
    kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK
}

/// # Safety
/// `m` is a live `pthread_mutex_t`.
unsafe fn kind(m: *mut libc::pthread_mutex_t) -> u32 {
    // SAFETY: per the contract; the kind is only written by init.
    unsafe { layout::word(m, OFF_KIND).load(Ordering::Relaxed) & KIND_TYPE_MASK }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_init(
    m: *mut libc::pthread_mutex_t,
    attr: *const libc::pthread_mutexattr_t,
) -> i32 {
    let mut kind: i32 = libc::PTHREAD_MUTEX_NORMAL;
    // SAFETY: attr, when given, is an initialized attribute object (caller's contract);
    // glibc's own accessor reads its layout.
    if !attr.is_null() && unsafe { pthread_mutexattr_gettype(attr, &mut kind) } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: m points at the program's mutex storage.
    unsafe {
        m.write_bytes(0, 1);
        layout::word(m, OFF_KIND).store(kind as u32, Ordering::Relaxed);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_destroy(m: *mut libc::pthread_mutex_t) -> i32 {
    // SAFETY: m is a live mutex (caller's contract).
    if unsafe { layout::word(m, OFF_LOCK).load(Ordering::Relaxed) } != 0 {
        return libc::EBUSY;
    }
    0
}

/// Shared by lock, trylock and the timed locks.
///
/// # Safety
/// `m` is a live `pthread_mutex_t`.
unsafe fn lock(m: *mut libc::pthread_mutex_t, how: How) -> i32 {
    // SAFETY: per the contract.
    let (w, kind) = unsafe { (layout::word(m, OFF_LOCK), kind(m)) };
    if kind == KIND_RECURSIVE || kind == KIND_ERRORCHECK {
        // SAFETY: as above.
        let owner = unsafe { layout::pointer_word(m, OFF_OWNER) };
        if owner.load(Ordering::Relaxed) == me() {
            if kind == KIND_ERRORCHECK {
                return libc::EDEADLK;
            }
            // SAFETY: as above; only the owner touches the count.
            let count = unsafe { layout::word(m, OFF_COUNT) };
            let c = count.load(Ordering::Relaxed);
            if c == u32::MAX {
                return libc::EAGAIN;
            }
            count.store(c + 1, Ordering::Relaxed);
            return 0;
        }
    }
    let locked = match how {
        How::Block => raw_lock(w, None),
        How::Try => raw_try_lock(w),
        How::Until(d) => raw_lock(w, Some(d)),
    };
    if !locked {
        return if matches!(how, How::Try) {
            libc::EBUSY
        } else {
            libc::ETIMEDOUT
        };
    }
    if tracks_owner(kind) {
        // SAFETY: as above; we own the mutex now.
        unsafe {
            layout::word(m, OFF_COUNT).store(1, Ordering::Relaxed);
            layout::pointer_word(m, OFF_OWNER).store(me(), Ordering::Relaxed);
        }
    }
    0
}

#[derive(Clone, Copy)]
enum How {
    Block,
    Try,
    Until(Instant),
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_lock(m: *mut libc::pthread_mutex_t) -> i32 {
    // SAFETY: forwarded.
    unsafe { lock(m, How::Block) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_trylock(m: *mut libc::pthread_mutex_t) -> i32 {
    // SAFETY: forwarded.
    unsafe { lock(m, How::Try) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_timedlock(
    m: *mut libc::pthread_mutex_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { pthread_mutex_clocklock(m, libc::CLOCK_REALTIME, abstime) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_clocklock(
    m: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> i32 {
    // An uncontended lock succeeds whatever the deadline, as POSIX asks.
    // SAFETY: forwarded.
    if unsafe { lock(m, How::Try) } == 0 {
        return 0;
    }
    // SAFETY: abstime is the caller's timespec.
    match unsafe { time::deadline(clock, abstime) } {
        // SAFETY: forwarded.
        Ok(d) => unsafe { lock(m, How::Until(d)) },
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_mutex_unlock(m: *mut libc::pthread_mutex_t) -> i32 {
    // SAFETY: m is a live mutex (caller's contract).
    let kind = unsafe { kind(m) };
    if tracks_owner(kind) {
        // SAFETY: as above.
        let owner = unsafe { layout::pointer_word(m, OFF_OWNER) };
        if owner.load(Ordering::Relaxed) != me() {
            return libc::EPERM;
        }
        // SAFETY: as above; we own it.
        let count = unsafe { layout::word(m, OFF_COUNT) };
        let c = count.load(Ordering::Relaxed);
        if c > 1 {
            count.store(c - 1, Ordering::Relaxed);
            return 0;
        }
        count.store(0, Ordering::Relaxed);
        owner.store(0, Ordering::Relaxed);
    }
    // SAFETY: as above.
    raw_unlock(unsafe { layout::word(m, OFF_LOCK) });
    0
}

/// What a condition wait gives up and takes back: the recursion count.
pub struct Released(u32);

/// Fully releases a mutex for a condition wait.
///
/// # Safety
/// `m` is a live mutex the caller holds.
pub unsafe fn release_for_wait(m: *mut libc::pthread_mutex_t) -> Result<Released, i32> {
    // SAFETY: per the contract.
    let kind = unsafe { kind(m) };
    let mut count = 1;
    if tracks_owner(kind) {
        // SAFETY: as above.
        let (owner, c) = unsafe {
            (
                layout::pointer_word(m, OFF_OWNER),
                layout::word(m, OFF_COUNT),
            )
        };
        if owner.load(Ordering::Relaxed) != me() {
            return Err(libc::EPERM);
        }
        count = c.load(Ordering::Relaxed);
        c.store(0, Ordering::Relaxed);
        owner.store(0, Ordering::Relaxed);
    }
    // SAFETY: as above.
    raw_unlock(unsafe { layout::word(m, OFF_LOCK) });
    Ok(Released(count))
}

/// Takes back a mutex after a condition wait.
///
/// # Safety
/// `m` is the live mutex that `release_for_wait` gave `r` for.
pub unsafe fn reacquire_after_wait(m: *mut libc::pthread_mutex_t, r: Released) {
    // SAFETY: per the contract.
    raw_lock(unsafe { layout::word(m, OFF_LOCK) }, None);
    // SAFETY: as above.
    if tracks_owner(unsafe { kind(m) }) {
        // SAFETY: as above; we own it again.
        unsafe {
            layout::word(m, OFF_COUNT).store(r.0, Ordering::Relaxed);
            layout::pointer_word(m, OFF_OWNER).store(me(), Ordering::Relaxed);
        }
    }
}
