//! Uthread stacks: one mapping per uthread, a guard page at the bottom and the uthread's
//! control block at the top. Stacks are recycled through a per-kthread cache and a per-runtime
//! pool so that spawning does not make system calls in the steady state.

use core::cell::UnsafeCell;
use core::ptr::NonNull;
use std::io;

use crate::config::page_size;
use crate::sched::Shared;
use crate::sched::kthread::Kthread;
use crate::sched::uthread::UThread;
use crate::sync::spin::RawSpinLock;

/// Stacks each kthread keeps for reuse.
const KTHREAD_CACHE: usize = 64;
/// Stacks the runtime keeps for reuse beyond the kthreads' caches.
const POOL_CACHE: usize = 1024;
/// Stacks moved between a kthread's cache and the pool at a time: one kthread often spawns
/// what another runs and frees, and batching keeps the pool's lock cold.
const BATCH: usize = KTHREAD_CACHE / 2;

/// The runtime-wide pool of default-sized stacks.
pub(crate) struct StackPool {
    lock: RawSpinLock,
    stacks: UnsafeCell<Vec<NonNull<UThread>>>,
    pub default_size: usize,
}

impl StackPool {
    pub fn new(default_size: usize) -> Self {
        StackPool {
            lock: RawSpinLock::new(),
            stacks: UnsafeCell::new(Vec::new()),
            default_size,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<NonNull<UThread>>) -> R) -> R {
        crate::preempt::disable();
        self.lock.lock();
        // SAFETY: lock held.
        let r = f(unsafe { &mut *self.stacks.get() });
        // SAFETY: we hold the lock.
        unsafe { self.lock.unlock() };
        crate::preempt::enable();
        r
    }
}

impl Drop for StackPool {
    fn drop(&mut self) {
        for th in self.stacks.get_mut().drain(..) {
            // SAFETY: pooled stacks belong to nobody.
            unsafe { unmap(th) };
        }
    }
}

/// Rounds a requested usable stack size to whole pages.
pub(crate) fn round_stack_size(bytes: usize) -> usize {
    bytes.next_multiple_of(page_size())
}

/// A control block plus stack of `stack_size` usable bytes (already page-rounded).
/// `k` is the caller's kthread, if any; preemption must be disabled when it is given.
pub(crate) fn alloc(
    k: Option<&Kthread>,
    rt: &Shared,
    stack_size: usize,
) -> io::Result<NonNull<UThread>> {
    if stack_size == rt.stacks.default_size {
        match k {
            Some(k) => {
                // SAFETY: the cache is owner-only and we run on k with preemption disabled.
                let cache = unsafe { &mut *k.stack_cache.get() };
                if cache.is_empty() {
                    rt.stacks.with(|pool| {
                        let take = pool.len().min(BATCH);
                        cache.extend(pool.drain(pool.len() - take..));
                    });
                }
                if let Some(th) = cache.pop() {
                    return Ok(th);
                }
            }
            None => {
                if let Some(th) = rt.stacks.with(|pool| pool.pop()) {
                    return Ok(th);
                }
            }
        }
    }
    map_new(stack_size)
}

fn map_new(stack_size: usize) -> io::Result<NonNull<UThread>> {
    let page = page_size();
    let header = size_of::<UThread>().next_multiple_of(64);
    let len = page + (stack_size + header).next_multiple_of(page);
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing.
    let base = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("cannot map a {stack_size}-byte uthread stack: {err}"),
        ));
    }
    // SAFETY: the first page of the mapping we own becomes the guard.
    if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
        let err = io::Error::last_os_error();
        // SAFETY: unmapping what we just mapped.
        unsafe { libc::munmap(base, len) };
        return Err(io::Error::new(
            err.kind(),
            format!("cannot protect a uthread guard page: {err}"),
        ));
    }
    let at = base as usize + len - header;
    let th = at as *mut UThread;
    // SAFETY: `at` is 64-byte aligned, writable and large enough for a UThread.
    unsafe { th.write(UThread::new(base as usize, len, stack_size)) };
    // SAFETY: not null: it points into a fresh mapping.
    Ok(unsafe { NonNull::new_unchecked(th) })
}

/// Unmaps a stack and its control block.
///
/// # Safety
/// Nothing runs on `th` or refers to it.
pub(crate) unsafe fn unmap(th: NonNull<UThread>) {
    // SAFETY: the caller owns th.
    let (base, len) = unsafe { th.as_ref().mapping() };
    // SAFETY: drops the control block's owned fields before the memory goes.
    unsafe { core::ptr::drop_in_place(th.as_ptr()) };
    // SAFETY: the mapping was created by map_new with exactly this base and length.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };
}

/// Recycles the stack of a uthread that exited on `k`. Scheduler context of `k`.
pub(crate) fn release(k: &Kthread, th: NonNull<UThread>) {
    // SAFETY: the uthread is dead and its context never runs again.
    let t = unsafe { th.as_ref() };
    t.clear_for_reuse();
    let rt = k.shared();
    if t.stack_size() == rt.stacks.default_size {
        // SAFETY: owner-only cache, scheduler context.
        let cache = unsafe { &mut *k.stack_cache.get() };
        if cache.len() == KTHREAD_CACHE {
            let spill: Vec<_> = cache.drain(KTHREAD_CACHE - BATCH..).collect();
            let unwanted = rt.stacks.with(|pool| {
                let room = POOL_CACHE.saturating_sub(pool.len()).min(spill.len());
                pool.extend_from_slice(&spill[..room]);
                spill[room..].to_vec()
            });
            for extra in unwanted {
                // SAFETY: cached stacks belong to nobody.
                unsafe { unmap(extra) };
            }
        }
        cache.push(th);
        return;
    }
    // SAFETY: dead and unreferenced.
    unsafe { unmap(th) };
}

/// Returns a stopping kthread's cached stacks to the system.
pub(crate) fn drain_kthread_cache(k: &Kthread) {
    // SAFETY: owner-only cache, the kthread is stopping.
    let cache = unsafe { &mut *k.stack_cache.get() };
    for th in cache.drain(..) {
        // SAFETY: cached stacks belong to nobody.
        unsafe { unmap(th) };
    }
}
