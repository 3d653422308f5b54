//! `corral_waitgroup_t`: the runtime's wait group, kept alive until its last `done` returns.

use core::ffi::c_int;
use core::ptr;
use core::sync::atomic::{AtomicUsize, Ordering, fence};

use corral::WaitGroup;

use super::error::{PANICKED, ffi_guard};
use super::memory::{free_boxed, obj, try_box};

/// Opaque; see `corral_waitgroup_t`.
pub struct CorralWaitGroup {
    wg: WaitGroup,
    /// One reference for the owner (dropped by `corral_waitgroup_free`) plus one per `done` in
    /// progress. `WaitGroup::done` still touches the group after the decrement that lets a
    /// waiter return, and C code typically frees the group right after `wait`, so the memory
    /// must outlive every `done` call, not just the count reaching zero.
    refs: AtomicUsize,
}

impl CorralWaitGroup {
    /// # Safety
    /// `p` is live and the caller owns one of its references, which it gives up here.
    unsafe fn release(p: *mut CorralWaitGroup) {
        // SAFETY: live while we hold our reference.
        let refs = unsafe { &(*p).refs };
        if refs.fetch_sub(1, Ordering::Release) == 1 {
            // Pairs with the other holders' Release decrements: their use of the group
            // happens before the free.
            fence(Ordering::Acquire);
            // SAFETY: ours was the last reference; nobody can reach the group any more.
            unsafe { free_boxed(p) };
        }
    }
}

/// Waits for a set of tasks: `add` before starting them, `done` as each ends, `wait` until
/// all are done.
pub type WaitGroupT = CorralWaitGroup;

/// Creates a wait group with a count of 0. Returns NULL if memory runs out.
#[unsafe(no_mangle)]
pub extern "C" fn corral_waitgroup_new() -> *mut WaitGroupT {
    ffi_guard(ptr::null_mut(), || {
        try_box(CorralWaitGroup {
            wg: WaitGroup::new(),
            refs: AtomicUsize::new(1),
        })
    })
}

/// Adds `n` to the count of tasks. Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_add(wg: *mut WaitGroupT, n: usize) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(g) = (unsafe { obj(wg) }) else {
            return -libc::EINVAL;
        };
        g.wg.add(n);
        0
    })
}

/// Marks one task done, waking the waiters when the count reaches 0. Returns 0, or `-EINVAL`
/// (NULL, or the count is already 0). The group may be freed by a waiter while this call is
/// still returning; that is safe.
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new` whose count this task is part
/// of.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_done(wg: *mut WaitGroupT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract: our task is still counted, so the owner
        // cannot have passed wait and freed it yet.
        let Some(g) = (unsafe { obj(wg) }) else {
            return -libc::EINVAL;
        };
        // Relaxed: this happens before our decrement of the count, which happens before the
        // waiter returns and frees, so the owner's decrement of refs sees ours (as Arc::clone).
        g.refs.fetch_add(1, Ordering::Relaxed);
        // Racy against a concurrent excess `done`, but catches the plain misuse before the
        // runtime's count wraps around.
        let rc = if g.wg.count() == 0 {
            -libc::EINVAL
        } else {
            ffi_guard(PANICKED, || {
                g.wg.done();
                0
            })
        };
        // SAFETY: we took a reference above.
        unsafe { CorralWaitGroup::release(wg) };
        rc
    })
}

/// Blocks until the count is 0 (returns at once if it is). Returns 0 or `-EINVAL` (NULL).
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_wait(wg: *mut WaitGroupT) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: live for the call per the contract.
        let Some(g) = (unsafe { obj(wg) }) else {
            return -libc::EINVAL;
        };
        g.wg.wait();
        0
    })
}

/// Frees `wg` (NULL is ignored). Call it once nobody waits on it and no more tasks will call
/// `corral_waitgroup_done`; `done` calls still returning are fine.
///
/// # Safety
/// `wg` is NULL or a live wait group from `corral_waitgroup_new`, freed only once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_waitgroup_free(wg: *mut WaitGroupT) {
    ffi_guard((), || {
        if !wg.is_null() {
            // SAFETY: live, and the owner's reference is given up exactly once.
            unsafe { CorralWaitGroup::release(wg) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitgroup_lives_until_the_last_reference() {
        let wg = corral_waitgroup_new();
        // SAFETY: wg is live until its last reference goes, which the test tracks.
        unsafe {
            assert_eq!(corral_waitgroup_done(wg), -libc::EINVAL);
            assert_eq!(corral_waitgroup_add(wg, 1), 0);
            assert_eq!(corral_waitgroup_done(wg), 0);
            assert_eq!(corral_waitgroup_wait(wg), 0);
            // Stand in for a `done` that is still returning when the owner frees the group.
            (*wg).refs.fetch_add(1, Ordering::Relaxed);
            corral_waitgroup_free(wg);
            assert_eq!((*wg).refs.load(Ordering::Relaxed), 1);
            CorralWaitGroup::release(wg);
        }
    }
}
