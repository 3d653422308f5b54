//! `pthread_rwlock_*`: one futex word holding the number of readers, or `WRITER` while a
//! writer holds the lock, and a count of waiters. Readers are preferred, as in glibc's default
//! (`PTHREAD_RWLOCK_PREFER_READER_NP`), so a thread may take a read lock it already holds.
//!
//! Layout inside glibc's 56-byte object (all zeros is `PTHREAD_RWLOCK_INITIALIZER`): offset 0
//! the state, 4 the waiters.

use core::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::{futex, layout, time};

const OFF_STATE: usize = 0;
const OFF_WAITERS: usize = 4;
const WRITER: u32 = u32::MAX;
const MAX_READERS: u32 = WRITER - 1;

/// # Safety
/// `l` is a live rwlock.
unsafe fn words<'a>(l: *mut libc::pthread_rwlock_t) -> (&'a AtomicU32, &'a AtomicU32) {
    // SAFETY: per the contract.
    unsafe { (layout::word(l, OFF_STATE), layout::word(l, OFF_WAITERS)) }
}

fn try_read(state: &AtomicU32) -> Result<(), u32> {
    let s = state.load(Ordering::Relaxed);
    if s >= MAX_READERS {
        return Err(s);
    }
    state
        .compare_exchange(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
        .map(|_| ())
        .map_err(|_| s)
}

fn try_write(state: &AtomicU32) -> Result<(), u32> {
    state
        .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
        .map(|_| ())
}

/// Retries `attempt` until it succeeds, sleeping on the state word between tries.
fn acquire(
    state: &AtomicU32,
    waiters: &AtomicU32,
    attempt: fn(&AtomicU32) -> Result<(), u32>,
    deadline: Option<Instant>,
) -> i32 {
    loop {
        let seen = match attempt(state) {
            Ok(()) => return 0,
            Err(s) => s,
        };
        if seen == MAX_READERS {
            return libc::EAGAIN;
        }
        waiters.fetch_add(1, Ordering::SeqCst);
        // The state may have changed since the attempt: only sleep on what we saw.
        let woke = if state.load(Ordering::SeqCst) == seen && seen != 0 {
            futex::wait(state, seen, deadline)
        } else {
            Ok(())
        };
        waiters.fetch_sub(1, Ordering::SeqCst);
        if woke == Err(futex::NotWoken::TimedOut) {
            return match attempt(state) {
                Ok(()) => 0,
                Err(_) => libc::ETIMEDOUT,
            };
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_init(
    l: *mut libc::pthread_rwlock_t,
    _attr: *const libc::pthread_rwlockattr_t,
) -> i32 {
    // SAFETY: l points at the program's rwlock storage.
    unsafe { l.write_bytes(0, 1) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_destroy(l: *mut libc::pthread_rwlock_t) -> i32 {
    // SAFETY: l is a live rwlock.
    let (state, _) = unsafe { words(l) };
    if state.load(Ordering::Relaxed) != 0 {
        return libc::EBUSY;
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_rdlock(l: *mut libc::pthread_rwlock_t) -> i32 {
    // SAFETY: l is a live rwlock.
    let (state, waiters) = unsafe { words(l) };
    acquire(state, waiters, try_read, None)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_wrlock(l: *mut libc::pthread_rwlock_t) -> i32 {
    // SAFETY: l is a live rwlock.
    let (state, waiters) = unsafe { words(l) };
    acquire(state, waiters, try_write, None)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_tryrdlock(l: *mut libc::pthread_rwlock_t) -> i32 {
    // SAFETY: l is a live rwlock.
    let (state, _) = unsafe { words(l) };
    match try_read(state) {
        Ok(()) => 0,
        Err(MAX_READERS) => libc::EAGAIN,
        Err(_) => libc::EBUSY,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_trywrlock(l: *mut libc::pthread_rwlock_t) -> i32 {
    // SAFETY: l is a live rwlock.
    let (state, _) = unsafe { words(l) };
    if try_write(state).is_ok() {
        0
    } else {
        libc::EBUSY
    }
}

/// # Safety
/// `l` a live rwlock, `abstime` the caller's timespec.
unsafe fn timed(
    l: *mut libc::pthread_rwlock_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
    attempt: fn(&AtomicU32) -> Result<(), u32>,
) -> i32 {
    // SAFETY: per the contract.
    let (state, waiters) = unsafe { words(l) };
    if attempt(state).is_ok() {
        return 0;
    }
    // SAFETY: per the contract.
    match unsafe { time::deadline(clock, abstime) } {
        Ok(d) => acquire(state, waiters, attempt, Some(d)),
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_timedrdlock(
    l: *mut libc::pthread_rwlock_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { timed(l, libc::CLOCK_REALTIME, abstime, try_read) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_timedwrlock(
    l: *mut libc::pthread_rwlock_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { timed(l, libc::CLOCK_REALTIME, abstime, try_write) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_clockrdlock(
    l: *mut libc::pthread_rwlock_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { timed(l, clock, abstime, try_read) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_clockwrlock(
    l: *mut libc::pthread_rwlock_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { timed(l, clock, abstime, try_write) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_rwlock_unlock(l: *mut libc::pthread_rwlock_t) -> i32 {
    // SAFETY: l is a live rwlock.
    let (state, waiters) = unsafe { words(l) };
    let s = state.load(Ordering::Relaxed);
    let now_free = if s == WRITER {
        state.store(0, Ordering::SeqCst);
        true
    } else if s == 0 {
        return libc::EPERM;
    } else {
        state.fetch_sub(1, Ordering::SeqCst) == 1
    };
    if now_free && waiters.load(Ordering::SeqCst) != 0 {
        futex::wake(state, usize::MAX);
    }
    0
}
