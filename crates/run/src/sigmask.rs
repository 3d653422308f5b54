//! Signal masks of uthreads. A kthread's mask is the kthread's, shared by every uthread it
//! runs, and it must keep the preemption signal deliverable; so in a uthread
//! `pthread_sigmask`/`sigprocmask` keep a per-uthread mask (in the uthread's own TLS) that they
//! report and update, without blocking anything on the kthread. Signals are delivered to
//! whichever kthread the kernel picks, as for any multi-threaded process whose threads all
//! leave them unblocked. Elsewhere they are the C library's.

use core::cell::Cell;

use crate::real::real;
use crate::thread;

std::thread_local! {
    /// Each uthread has its own TLS, so this is the calling uthread's mask.
    static MASK: Cell<Option<libc::sigset_t>> = const { Cell::new(None) };
}

fn empty_set() -> libc::sigset_t {
    // SAFETY: sigemptyset initializes the set it is given.
    unsafe {
        let mut s = core::mem::zeroed();
        libc::sigemptyset(&mut s);
        s
    }
}

/// The calling uthread's signal mask, as the program set it.
pub fn current_uthread_mask() -> libc::sigset_t {
    MASK.with(Cell::get).unwrap_or_else(empty_set)
}

/// # Safety
/// The pointers are null or valid, as for `pthread_sigmask`.
unsafe fn uthread_mask(how: i32, set: *const libc::sigset_t, old: *mut libc::sigset_t) -> i32 {
    let current = MASK.with(Cell::get).unwrap_or_else(empty_set);
    if !old.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe { *old = current };
    }
    if set.is_null() {
        return 0;
    }
    let mut next = current;
    // SAFETY: set is the caller's initialized set; next is ours.
    unsafe {
        for sig in 1..libc::SIGRTMAX() {
            if libc::sigismember(set, sig) != 1 {
                continue;
            }
            match how {
                libc::SIG_BLOCK => libc::sigaddset(&mut next, sig),
                libc::SIG_UNBLOCK => libc::sigdelset(&mut next, sig),
                libc::SIG_SETMASK => 0,
                _ => return libc::EINVAL,
            };
        }
        if how == libc::SIG_SETMASK {
            next = *set;
        }
    }
    MASK.with(|m| m.set(Some(next)));
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
