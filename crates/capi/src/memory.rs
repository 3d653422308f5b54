//! Memory that crosses the C boundary: handles boxed without aborting when memory runs out,
//! C objects and buffers borrowed for one call, and C pointers carried to other uthreads.

use core::ffi::c_void;
use std::alloc::{self, Layout};

/// A C pointer carried to another uthread. C owns what it points to.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut c_void);

// SAFETY: Rust never dereferences the pointer; whether the pointee may be used from another
// thread is the C caller's business, as with the argument of pthread_create.
unsafe impl Send for SendPtr {}

impl SendPtr {
    /// Closures must call this rather than read `.0`: closures capture disjoint fields, and
    /// capturing the bare `*mut c_void` would make the closure `!Send`.
    pub(crate) fn get(self) -> *mut c_void {
        self.0
    }
}

/// Allocates uninitialized memory for a `T`, or returns null if memory runs out: C callers
/// expect to handle that, where `Box::new` would abort the process.
pub(crate) fn try_alloc<T>() -> *mut T {
    const { assert!(size_of::<T>() != 0) };
    // SAFETY: the layout is not zero-sized (checked above).
    unsafe { alloc::alloc(Layout::new::<T>()) }.cast::<T>()
}

/// Moves `value` to the heap, or returns null if memory runs out (see [`try_alloc`]).
pub(crate) fn try_box<T>(value: T) -> *mut T {
    let p = try_alloc::<T>();
    if !p.is_null() {
        // SAFETY: fresh, non-null, and laid out for a T.
        unsafe { p.write(value) };
    }
    p
}

/// Frees what [`try_box`] returned. `Box::from_raw` accepts it because `try_alloc` used the
/// global allocator with `T`'s own layout, as `Box` does.
///
/// # Safety
/// `p` came from `try_box::<T>` (or `try_alloc::<T>` and was then initialized) and is not used
/// afterwards.
pub(crate) unsafe fn free_boxed<T>(p: *mut T) {
    // SAFETY: `p` holds an initialized `T` allocated by `try_alloc::<T>` with the global
    // allocator and `Layout::new::<T>()`, as a `Box<T>` would be, and the caller gives it up.
    drop(unsafe { Box::from_raw(p) });
}

/// Borrows a C object for the duration of a call.
///
/// # Safety
/// `p` is null or points to a live object that stays alive for `'a`: the C contract is that
/// an object is not freed while any call on it is in progress.
pub(crate) unsafe fn obj<'a, T>(p: *mut T) -> Option<&'a T> {
    // SAFETY: `p` is null (giving None) or points to a live, aligned `T` that outlives `'a`, as
    // the caller promised; C objects are only ever shared, never borrowed mutably, from Rust.
    unsafe { p.as_ref() }
}

/// Borrows `len` bytes at `buf` for reading; NULL is allowed only with `len` 0.
///
/// # Safety
/// `buf` points to `len` readable bytes that stay valid and unmodified for `'a`.
pub(crate) unsafe fn bytes_in<'a>(buf: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: `buf` is not null (checked above) and, as the caller promised, points to `len`
    // readable bytes (one object, so at most isize::MAX) left alone for `'a`; u8 needs no
    // alignment.
    Some(unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// Borrows `len` bytes at `buf` for writing; NULL is allowed only with `len` 0.
///
/// # Safety
/// `buf` points to `len` writable bytes that nothing else touches for `'a`.
pub(crate) unsafe fn bytes_out<'a>(buf: *mut c_void, len: usize) -> Option<&'a mut [u8]> {
    if len == 0 {
        return Some(&mut []);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: `buf` is not null (checked above) and, as the caller promised, points to `len`
    // writable bytes (one object, so at most isize::MAX) that nothing else touches for `'a`;
    // u8 needs no alignment.
    Some(unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), len) })
}
