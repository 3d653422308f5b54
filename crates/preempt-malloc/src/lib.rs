//! `malloc` and its family for C code that runs on Corral uthreads, with preemption disabled
//! (once a runtime of the process can preempt at all, see `corral::preempt::possible`):
//! glibc's allocator keeps locks and caches that belong to "the current thread", which a
//! uthread preempted inside it would otherwise leave behind on its kthread. Each call goes to
//! glibc's exported `__libc_*` entry points (so no `dlsym`, which itself allocates, is needed).
//!
//! Linking this crate into a shared or static library (the `corral-run` shim, `libcorral`)
//! defines `malloc`, `free`, `calloc`, `realloc`, `memalign`, `aligned_alloc`,
//! `posix_memalign`, `valloc` and `pvalloc` for the whole program; a crate that links it must
//! name it (`use corral_preempt_malloc as _;`) so that it is not left out as unused.

#![allow(clippy::missing_safety_doc)]

use core::ffi::c_void;

use corral::preempt::{self, PreemptGuard};

/// Runs `f` with preemption disabled, when any runtime can preempt at all (`corral-run`
/// standalone never does, and then a call costs one load more than glibc's own).
#[inline(always)]
fn guarded<R>(f: impl FnOnce() -> R) -> R {
    if !preempt::possible() {
        return f();
    }
    with_preemption_disabled(f)
}

/// Out of line, so that the common path saves no registers for the kthread lookups.
#[inline(never)]
fn with_preemption_disabled<R>(f: impl FnOnce() -> R) -> R {
    let _g = PreemptGuard::new();
    f()
}

unsafe extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_free(p: *mut c_void);
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_valloc(size: usize) -> *mut c_void;
    fn __libc_pvalloc(size: usize) -> *mut c_void;
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's malloc.
    guarded(|| unsafe { __libc_malloc(size) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn free(p: *mut c_void) {
    // SAFETY: glibc's free, with the caller's pointer.
    guarded(|| unsafe { __libc_free(p) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc's calloc.
    guarded(|| unsafe { __libc_calloc(n, size) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: glibc's realloc, with the caller's pointer.
    guarded(|| unsafe { __libc_realloc(p, size) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn memalign(align: usize, size: usize) -> *mut c_void {
    // SAFETY: glibc's memalign.
    guarded(|| unsafe { __libc_memalign(align, size) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn aligned_alloc(align: usize, size: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return core::ptr::null_mut();
    }
    // SAFETY: forwarded.
    unsafe { memalign(align, size) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> i32 {
    if !align.is_power_of_two() || !align.is_multiple_of(size_of::<usize>()) {
        return libc::EINVAL;
    }
    // SAFETY: forwarded.
    let p = unsafe { memalign(align, size) };
    if p.is_null() && size != 0 {
        return libc::ENOMEM;
    }
    // SAFETY: the caller's out-pointer.
    unsafe { *out = p };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn valloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's valloc.
    guarded(|| unsafe { __libc_valloc(size) })
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pvalloc(size: usize) -> *mut c_void {
    // SAFETY: glibc's pvalloc.
    guarded(|| unsafe { __libc_pvalloc(size) })
}
