//! Signal masks of uthreads. A kthread's mask is the kthread's, shared by every uthread it
//! runs, and it blocks what the shim routes (see [`crate::signals`]); so in a uthread
//! `pthread_sigmask`/`sigprocmask` keep a per-uthread mask, in its signal record, that they
//! report and update and that the shim's routing honours, without touching the kthread's. A
//! signal pending for the uthread or the process that the new mask lets through is delivered
//! before the call returns. Elsewhere they are the C library's.

use core::cell::Cell;

use corral_sigroute::SigSet;

use crate::real::real;
use crate::signals::{self, from_sigset, to_sigset};
use crate::thread;

std::thread_local! {
    /// The mask of a uthread without a signal record (before routing starts): each uthread
    /// has its own TLS, so this is the calling uthread's.
    static UNROUTED_MASK: Cell<SigSet> = const { Cell::new(SigSet::EMPTY) };
}

/// The calling uthread's signal mask, as the program set it.
pub fn current_uthread_mask() -> libc::sigset_t {
    to_sigset(signals::current_mask().unwrap_or_else(|| UNROUTED_MASK.with(Cell::get)))
}

/// # Safety
/// The pointers are null or valid, as for `pthread_sigmask`.
unsafe fn uthread_mask(how: i32, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> i32 {
    let record = signals::current();
    let current = record.map_or_else(|| UNROUTED_MASK.with(Cell::get), signals::Record::mask);
    if !set.is_null() && !matches!(how, libc::SIG_BLOCK | libc::SIG_UNBLOCK | libc::SIG_SETMASK) {
        return libc::EINVAL;
    }
    if !old.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *old = to_sigset(current) };
    }
    if set.is_null() {
        return 0;
    }
    // SAFETY: set is the caller's initialized set.
    let given = from_sigset(unsafe { &*set });
    let next = match how {
        libc::SIG_BLOCK => current.union(given),
        libc::SIG_UNBLOCK => current.minus(given),
        _ => given,
    };
    match record {
        Some(rec) => signals::set_current_mask(rec, next),
        None => UNROUTED_MASK.with(|m| m.set(next)),
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_sigmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    if thread::on_uthread() {
        // SAFETY: forwarded.
        return unsafe { uthread_mask(how, set, old) };
    }
    let f = real!(pthread_sigmask: unsafe extern "C" fn(i32, *const libc::sigset_t, *mut libc::sigset_t) -> i32);
    // SAFETY: forwarded.
    unsafe { f(how, set, old) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigprocmask(
    how: i32,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> i32 {
    if thread::on_uthread() {
        // SAFETY: forwarded.
        let rc = unsafe { uthread_mask(how, set, old) };
        if rc != 0 {
            // SAFETY: this thread's errno.
            unsafe { *libc::__errno_location() = rc };
            return -1;
        }
        return 0;
    }
    let f = real!(sigprocmask: unsafe extern "C" fn(i32, *const libc::sigset_t, *mut libc::sigset_t) -> i32);
    // SAFETY: forwarded.
    unsafe { f(how, set, old) }
}
