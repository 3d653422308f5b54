//! The C library's own definitions of the functions the shim interposes, looked up once with
//! `dlsym(RTLD_NEXT, ...)`: for callers that are not uthreads, and for what the shim forwards.

use core::sync::atomic::{AtomicUsize, Ordering};

/// Looks up `name` (NUL-terminated) in the objects loaded after the shim.
pub fn lookup(name: &'static [u8], cache: &AtomicUsize) -> usize {
    let cached = cache.load(Ordering::Relaxed);
    if cached != 0 {
        return cached;
    }
    debug_assert_eq!(name.last(), Some(&0));
    // SAFETY: name is NUL-terminated; RTLD_NEXT is valid from a shared object.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if f == 0 {
        crate::refuse::fatal(&format!(
            "the C library has no {}",
            String::from_utf8_lossy(&name[..name.len() - 1])
        ));
    }
    cache.store(f, Ordering::Relaxed);
    f
}

/// `real!(name: fn type)` gives the C library's `name` as a function pointer of that type.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static CACHE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
        let f = $crate::real::lookup(concat!(stringify!($name), "\0").as_bytes(), &CACHE);
        // SAFETY: dlsym found the C library's definition of this function, whose C signature
        // is the one written at the call site.
        unsafe { core::mem::transmute::<usize, $ty>(f) }
    }};
}
pub(crate) use real;
