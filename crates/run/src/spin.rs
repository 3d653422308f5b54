//! `pthread_spin_*`: a test-and-set lock that yields the uthread while it cannot take the lock.
//! A uthread holding a spinlock can be descheduled like any other (it may block or be preempted
//! inside its critical section), so spinning without yielding could wait for a holder queued
//! behind the spinner on the same kthread.

use core::sync::atomic::{AtomicI32, Ordering};

/// # Safety
/// `l` points at a live `pthread_spinlock_t` (an `int`).
unsafe fn word<'a>(l: *mut libc::pthread_spinlock_t) -> &'a AtomicI32 {
    // SAFETY: per the contract; AtomicI32 has the layout of int.
    unsafe { &*(l as *const AtomicI32) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_init(l: *mut libc::pthread_spinlock_t, _pshared: i32) -> i32 {
    // SAFETY: l points at the program's storage.
    unsafe { word(l).store(0, Ordering::Release) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_destroy(_l: *mut libc::pthread_spinlock_t) -> i32 {
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_lock(l: *mut libc::pthread_spinlock_t) -> i32 {
    // SAFETY: l is a live spinlock.
    let w = unsafe { word(l) };
    let mut spins = 0u32;
    while w.swap(1, Ordering::Acquire) != 0 {
        while w.load(Ordering::Relaxed) != 0 {
            spins += 1;
            if spins.is_multiple_of(64) {
                crate::wait::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_trylock(l: *mut libc::pthread_spinlock_t) -> i32 {
    // SAFETY: l is a live spinlock.
    if unsafe { word(l) }.swap(1, Ordering::Acquire) == 0 {
        0
    } else {
        libc::EBUSY
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_spin_unlock(l: *mut libc::pthread_spinlock_t) -> i32 {
    // SAFETY: l is a live spinlock.
    unsafe { word(l) }.store(0, Ordering::Release);
    0
}
