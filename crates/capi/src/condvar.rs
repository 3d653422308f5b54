//! `corral_condvar_t`: the runtime's condition variable, waited on with a `corral_mutex_t`.

use core::ffi::c_int;
use core::ptr;
use std::time::Duration;

use corral::{Condvar, MutexGuard};

use super::error::{PANICKED, ffi_guard};
use super::memory::{free_boxed, obj, try_box};
use super::mutex::{CorralMutex, MutexT, caller_token};

/// Opaque; see `corral_condvar_t`.
pub struct CorralCondvar {
    cv: Condvar,
}

/// A condition variable, used with a `corral_mutex_t`.
pub type CondvarT = CorralCondvar;

/// Creates a condition variable. Returns NULL if memory runs out.
#[unsafe(no_mangle)]
pub extern "C" fn corral_condvar_new() -> *mut CondvarT {
    ffi_guard(ptr::null_mut(), || {
        try_box(CorralCondvar { cv: Condvar::new() })
    })
}

/// Shared by wait and timedwait: `wait` gets the guard and returns whether it timed out.
///
/// # Safety
/// `condvar` and `mutex` are NULL or live objects from their `_new` functions.
unsafe fn condvar_wait_with(
    condvar: *mut CorralCondvar,
    mutex: *mut CorralMutex,
    wait: impl FnOnce(&Condvar, &mut MutexGuard<'static, ()>) -> bool,
) -> c_int {
    // SAFETY: live for the call per the contract.
    let cv = unsafe { obj(condvar) };
    // SAFETY: live per the contract, and for as long as the guard taken below borrows it:
    // corral_mutex_free may not be called while this wait, a call on the mutex, is in progress.
    let m = unsafe { obj::<'static>(mutex) };
    let (Some(cv), Some(m)) = (cv, m) else {
        return -libc::EINVAL;
    };
    let me = caller_token();
    if !m.holds(me) {
        return -libc::EPERM;
    }
    // The guard leaves the cell for the wait: while we sleep the mutex is free, and the next
    // holder stores its own guard there.
    // SAFETY: the caller holds the lock (checked above).
    let mut guard = unsafe { m.take_guard() };
    let timed_out = wait(&cv.cv, &mut guard);
    // SAFETY: the wait re-acquired the mutex before returning.
    unsafe { m.store_guard(guard, me) };
    if timed_out { -libc::ETIMEDOUT } else { 0 }
}

/// Unlocks `mutex`, waits until `condvar` is signalled, and locks `mutex` again before
/// returning. Wake-ups are never lost, but re-check your condition in a loop: another thread
/// may get the mutex first.
///
/// Returns 0, `-EINVAL` (a NULL argument) or `-EPERM` (the caller does not hold `mutex`).
///
/// # Safety
/// `condvar` and `mutex` are NULL or live objects from their `_new` functions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_wait(condvar: *mut CondvarT, mutex: *mut MutexT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: condvar_wait_with's contract is this function's, which the caller upholds.
        unsafe {
            condvar_wait_with(condvar, mutex, |cv, g| {
                cv.wait(g);
                false
            })
        }
    })
}

/// Like `corral_condvar_wait`, giving up after `timeout_us` microseconds: returns
/// `-ETIMEDOUT` then, never earlier than the timeout (with `mutex` locked again).
///
/// # Safety
/// `condvar` and `mutex` are NULL or live objects from their `_new` functions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_timedwait(
    condvar: *mut CondvarT,
    mutex: *mut MutexT,
    timeout_us: u64,
) -> c_int {
    ffi_guard(PANICKED, || {
        let timeout = Duration::from_micros(timeout_us);
        // SAFETY: condvar_wait_with's contract is this function's, which the caller upholds.
        unsafe {
            condvar_wait_with(condvar, mutex, |cv, g| {
                cv.wait_timeout(g, timeout).timed_out()
            })
        }
    })
}

/// Wakes the longest waiter on `condvar`, if any. Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `condvar` is NULL or a live condition variable from `corral_condvar_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_signal(condvar: *mut CondvarT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(cv) = (unsafe { obj(condvar) }) else {
            return -libc::EINVAL;
        };
        cv.cv.notify_one();
        0
    })
}

/// Wakes every waiter on `condvar`. Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `condvar` is NULL or a live condition variable from `corral_condvar_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_broadcast(condvar: *mut CondvarT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(cv) = (unsafe { obj(condvar) }) else {
            return -libc::EINVAL;
        };
        cv.cv.notify_all();
        0
    })
}

/// Frees `condvar` (NULL is ignored). Nobody may be waiting on it or use it afterwards.
///
/// # Safety
/// `condvar` is NULL or a live condition variable from `corral_condvar_new`, with no call on
/// it in progress.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_condvar_free(condvar: *mut CondvarT) {
    ffi_guard((), || {
        if !condvar.is_null() {
            // SAFETY: from corral_condvar_new; the caller promised no further use.
            unsafe { free_boxed(condvar) };
        }
    });
}
