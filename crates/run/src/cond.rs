//! `pthread_cond_*`: a sequence word that every signal bumps; a waiter sleeps while it still
//! reads the value seen before it released the mutex, so a signal sent after the waiter's check
//! of the predicate is never lost. Spurious wake-ups are allowed, as POSIX allows them.
//!
//! Layout inside glibc's 48-byte object (all zeros is `PTHREAD_COND_INITIALIZER`): offset 0
//! the sequence, 4 the clock of timed waits (0 `CLOCK_REALTIME`, 1 `CLOCK_MONOTONIC`, from the
//! condattr), 8 the number of waiters (so that signals with nobody waiting skip the wake).

use core::sync::atomic::Ordering;

use crate::{futex, layout, mutex, time};

const OFF_SEQ: usize = 0;
const OFF_CLOCK: usize = 4;
const OFF_WAITERS: usize = 8;

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_init(
    c: *mut libc::pthread_cond_t,
    attr: *const libc::pthread_condattr_t,
) -> i32 {
    let mut clock: libc::clockid_t = libc::CLOCK_REALTIME;
    // SAFETY: attr, when given, is an initialized attribute object; glibc's accessor reads it.
    if !attr.is_null() && unsafe { libc::pthread_condattr_getclock(attr, &mut clock) } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: c points at the program's condvar storage.
    unsafe {
        c.write_bytes(0, 1);
        layout::word(c, OFF_CLOCK).store(clock as u32, Ordering::Relaxed);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_destroy(c: *mut libc::pthread_cond_t) -> i32 {
    // SAFETY: c is a live condvar (caller's contract).
    if unsafe { layout::word(c, OFF_WAITERS).load(Ordering::Relaxed) } != 0 {
        return libc::EBUSY;
    }
    0
}

/// # Safety
/// `c` a live condvar, `m` a mutex the caller holds.
unsafe fn wait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
    deadline: Option<std::time::Instant>,
) -> i32 {
    // SAFETY: per the contract.
    let (seq, waiters) = unsafe { (layout::word(c, OFF_SEQ), layout::word(c, OFF_WAITERS)) };
    waiters.fetch_add(1, Ordering::SeqCst);
    let seen = seq.load(Ordering::SeqCst);
    // SAFETY: the caller holds m.
    let released = match unsafe { mutex::release_for_wait(m) } {
        Ok(r) => r,
        Err(e) => {
            waiters.fetch_sub(1, Ordering::SeqCst);
            return e;
        }
    };
    let woke = futex::wait(seq, seen, deadline);
    waiters.fetch_sub(1, Ordering::SeqCst);
    // SAFETY: m is the mutex we released above.
    unsafe { mutex::reacquire_after_wait(m, released) };
    match woke {
        Err(futex::NotWoken::TimedOut) => libc::ETIMEDOUT,
        _ => 0,
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_wait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { wait(c, m, None) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_timedwait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: c is a live condvar.
    let clock = unsafe { layout::word(c, OFF_CLOCK).load(Ordering::Relaxed) } as libc::clockid_t;
    // SAFETY: forwarded.
    unsafe { pthread_cond_clockwait(c, m, clock, abstime) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_clockwait(
    c: *mut libc::pthread_cond_t,
    m: *mut libc::pthread_mutex_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> i32 {
    if clock != libc::CLOCK_REALTIME && clock != libc::CLOCK_MONOTONIC {
        return libc::EINVAL;
    }
    // SAFETY: abstime is the caller's timespec.
    match unsafe { time::deadline(clock, abstime) } {
        // SAFETY: forwarded.
        Ok(d) => unsafe { wait(c, m, Some(d)) },
        Err(e) => e,
    }
}

/// # Safety
/// `c` is a live condvar.
unsafe fn signal(c: *mut libc::pthread_cond_t, n: usize) -> i32 {
    // SAFETY: per the contract.
    let (seq, waiters) = unsafe { (layout::word(c, OFF_SEQ), layout::word(c, OFF_WAITERS)) };
    seq.fetch_add(1, Ordering::SeqCst);
    if waiters.load(Ordering::SeqCst) != 0 {
        futex::wake(seq, n);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_signal(c: *mut libc::pthread_cond_t) -> i32 {
    // SAFETY: forwarded.
    unsafe { signal(c, 1) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_cond_broadcast(c: *mut libc::pthread_cond_t) -> i32 {
    // SAFETY: forwarded.
    unsafe { signal(c, usize::MAX) }
}
