//! Views of the program's opaque pthread storage (glibc's `pthread_mutex_t` and friends) as the
//! atomic words the shim keeps there. Each object's field offsets are stated where it is
//! implemented; `check_sizes` pins the sizes they must fit in.

use core::sync::atomic::{AtomicU32, AtomicUsize};

/// The u32 at byte `offset` of the object at `p`.
///
/// # Safety
/// `p` points at a live object of at least `offset + 4` bytes, 4-byte aligned, that the
/// program lets every thread touch (as pthread objects are), for as long as the result is used.
pub unsafe fn word<'a, T>(p: *mut T, offset: usize) -> &'a AtomicU32 {
    // SAFETY: per the contract; AtomicU32 has the layout of u32.
    unsafe { &*((p as *mut u8).add(offset) as *const AtomicU32) }
}

/// The usize at byte `offset` of the object at `p`.
///
/// # Safety
/// As for [`word`], with 8 bytes at an 8-byte aligned offset.
pub unsafe fn pointer_word<'a, T>(p: *mut T, offset: usize) -> &'a AtomicUsize {
    // SAFETY: per the contract; AtomicUsize has the layout of usize.
    unsafe { &*((p as *mut u8).add(offset) as *const AtomicUsize) }
}

const _: () = {
    assert!(size_of::<libc::pthread_mutex_t>() >= 32);
    assert!(size_of::<libc::pthread_cond_t>() >= 12);
    assert!(size_of::<libc::pthread_rwlock_t>() >= 8);
    assert!(size_of::<libc::pthread_barrier_t>() >= 12);
    assert!(size_of::<libc::sem_t>() >= 8);
    assert!(size_of::<libc::pthread_once_t>() >= 4);
    assert!(size_of::<libc::pthread_spinlock_t>() >= 4);
};
