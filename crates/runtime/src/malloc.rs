//! A global-allocator wrapper that disables preemption inside the allocator, so that a uthread
//! preempted in the middle of `malloc` never leaves an allocator lock held by "its" OS thread
//! while another uthread on the same OS thread calls `malloc`.

use core::alloc::{GlobalAlloc, Layout};

use crate::preempt;

/// Wraps an allocator `A`; installed around `std::alloc::System` by default (feature
/// `global-allocator`).
pub struct PreemptSafeAlloc<A>(pub A);

// SAFETY: every method forwards to A unchanged; only the preemption counter moves around it.
unsafe impl<A: GlobalAlloc> GlobalAlloc for PreemptSafeAlloc<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        preempt::disable();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc(layout) };
        preempt::enable();
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        preempt::disable();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        preempt::enable();
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        preempt::disable();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        preempt::enable();
        p
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        preempt::disable();
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        preempt::enable();
        p
    }
}

#[cfg(feature = "global-allocator")]
#[global_allocator]
static GLOBAL: PreemptSafeAlloc<std::alloc::System> = PreemptSafeAlloc(std::alloc::System);
