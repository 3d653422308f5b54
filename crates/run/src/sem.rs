//! Unnamed POSIX semaphores (`sem_init` and friends): the value and a count of waiters in the
//! program's `sem_t`. Named semaphores (`sem_open`) stay glibc's and are not supported.
//!
//! Layout inside glibc's 32-byte object: offset 0 the value, 4 the waiters.

use core::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use crate::{futex, layout, time};

const OFF_VALUE: usize = 0;
const OFF_WAITERS: usize = 4;

/// Sets `errno` and returns -1, the semaphore functions' way of failing.
fn fail(e: i32) -> i32 {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = e };
    -1
}

/// # Safety
/// `s` is a live semaphore.
unsafe fn words<'a>(s: *mut libc::sem_t) -> (&'a AtomicU32, &'a AtomicU32) {
    // SAFETY: per the contract.
    unsafe { (layout::word(s, OFF_VALUE), layout::word(s, OFF_WAITERS)) }
}

fn try_take(value: &AtomicU32) -> bool {
    let mut v = value.load(Ordering::Relaxed);
    while v > 0 {
        match value.compare_exchange_weak(v, v - 1, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => v = now,
        }
    }
    false
}

fn take(value: &AtomicU32, waiters: &AtomicU32, deadline: Option<Instant>) -> i32 {
    loop {
        if try_take(value) {
            return 0;
        }
        waiters.fetch_add(1, Ordering::SeqCst);
        let woke = futex::wait(value, 0, deadline);
        waiters.fetch_sub(1, Ordering::SeqCst);
        if woke == Err(futex::NotWoken::TimedOut) {
            return if try_take(value) {
                0
            } else {
                fail(libc::ETIMEDOUT)
            };
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_init(s: *mut libc::sem_t, _pshared: i32, value: u32) -> i32 {
    if value > i32::MAX as u32 {
        return fail(libc::EINVAL);
    }
    // SAFETY: s points at the program's storage.
    unsafe {
        s.write_bytes(0, 1);
        layout::word(s, OFF_VALUE).store(value, Ordering::Release);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_destroy(_s: *mut libc::sem_t) -> i32 {
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_wait(s: *mut libc::sem_t) -> i32 {
    // SAFETY: s is a live semaphore.
    let (value, waiters) = unsafe { words(s) };
    take(value, waiters, None)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_trywait(s: *mut libc::sem_t) -> i32 {
    // SAFETY: s is a live semaphore.
    let (value, _) = unsafe { words(s) };
    if try_take(value) {
        0
    } else {
        fail(libc::EAGAIN)
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_timedwait(s: *mut libc::sem_t, abstime: *const libc::timespec) -> i32 {
    // SAFETY: forwarded.
    unsafe { sem_clockwait(s, libc::CLOCK_REALTIME, abstime) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_clockwait(
    s: *mut libc::sem_t,
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> i32 {
    // SAFETY: s is a live semaphore.
    let (value, waiters) = unsafe { words(s) };
    if try_take(value) {
        return 0;
    }
    // SAFETY: abstime is the caller's timespec.
    match unsafe { time::deadline(clock, abstime) } {
        Ok(d) => take(value, waiters, Some(d)),
        Err(e) => fail(e),
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_post(s: *mut libc::sem_t) -> i32 {
    // SAFETY: s is a live semaphore.
    let (value, waiters) = unsafe { words(s) };
    if value.fetch_add(1, Ordering::SeqCst) == i32::MAX as u32 {
        value.fetch_sub(1, Ordering::SeqCst);
        return fail(libc::EOVERFLOW);
    }
    if waiters.load(Ordering::SeqCst) != 0 {
        futex::wake(value, 1);
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sem_getvalue(s: *mut libc::sem_t, out: *mut i32) -> i32 {
    // SAFETY: s is a live semaphore, out the caller's int.
    unsafe { *out = words(s).0.load(Ordering::Relaxed) as i32 };
    0
}
