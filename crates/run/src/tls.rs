//! A glibc thread control block and static TLS block for each uthread, so that `errno`,
//! `__thread`/`thread_local` variables and the C library's per-thread state (stdio lock owner,
//! malloc arena and cache, thread-specific data, `pthread_self`) are per uthread.
//!
//! Blocks come from the dynamic linker's own `_dl_allocate_tls` (every loaded module's TLS,
//! initialized from its image; modules loaded later get theirs lazily through the DTV, as for
//! any thread), and the fields of the TCB header that glibc reads but a new block leaves zero
//! are copied from the creating thread: the stack and pointer guards (which mangled
//! `setjmp` buffers and `atexit` entries depend on), the multi-threaded flag, `sysinfo` and the
//! CET feature word. Restartable sequences are marked unregistered, so `sched_getcpu` asks the
//! kernel instead of reading a CPU number nobody updates. Each TCB gets its own thread id
//! (above any the kernel hands out), because glibc's internal recursive locks (the dynamic
//! linker's, taken by `__cxa_thread_atexit_impl` for every C++ `thread_local` with a
//! destructor) recognise their owner by it: with a shared id, or none, two uthreads would both
//! think they own such a lock.

use core::arch::asm;
use core::ffi::c_void;
use core::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use crate::real::real;

/// x86-64 `tcbhead_t` offsets (glibc `sysdeps/x86_64/nptl/tls.h`).
const OFF_TCB: usize = 0;
const OFF_SELF: usize = 16;
const OFF_MULTIPLE_THREADS: usize = 24;
const OFF_SYSINFO: usize = 32;
const OFF_STACK_GUARD: usize = 40;
const OFF_POINTER_GUARD: usize = 48;
const OFF_FEATURE_1: usize = 72;
/// `struct rseq`'s `cpu_id`, and the value glibc stores when registration failed.
const RSEQ_OFF_CPU_ID: usize = 4;
const RSEQ_CPU_ID_REGISTRATION_FAILED: u32 = -2i32 as u32;

/// Thread ids of uthread TCBs: above Linux's largest pid (`PID_MAX_LIMIT`, 2^22), so never a
/// kernel thread's; signals sent to one fail with `ESRCH` rather than hitting another thread.
static NEXT_TID: AtomicI32 = AtomicI32::new(1 << 30);

/// Where `struct pthread` keeps the thread id, as glibc tells debuggers
/// (`_thread_db_pthread_tid`: bits, count, offset).
fn tid_offset() -> usize {
    static OFFSET: OnceLock<usize> = OnceLock::new();
    *OFFSET.get_or_init(look_up_tid_offset)
}

fn look_up_tid_offset() -> usize {
    // SAFETY: looks up a read-only data symbol by its NUL-terminated name.
    let desc = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_thread_db_pthread_tid".as_ptr()) }
        as *const u32;
    if desc.is_null() {
        crate::refuse::fatal(
            "this C library does not describe its thread descriptor (_thread_db_pthread_tid)",
        );
    }
    // SAFETY: glibc's descriptor is three u32s; the third is the field's offset.
    let (bits, offset) = unsafe { (*desc, *desc.add(2)) };
    if bits != 32 {
        crate::refuse::fatal("this C library's thread id field is not 32 bits wide");
    }
    offset as usize
}

/// The calling thread's thread control block (the `%fs` base; glibc keeps it at `%fs:0`).
pub fn current_tcb() -> usize {
    let tcb: usize;
    // SAFETY: reads the TCB's self pointer, which glibc keeps at %fs:0 on every thread.
    unsafe {
        asm!("mov {}, qword ptr fs:[0]", out(reg) tcb, options(nostack, readonly, preserves_flags))
    };
    tcb
}

/// A fresh TCB with its TLS blocks, or `None` when out of memory.
pub fn allocate() -> Option<usize> {
    let alloc = real!(_dl_allocate_tls: unsafe extern "C" fn(*mut c_void) -> *mut c_void);
    // SAFETY: a null argument asks the dynamic linker to allocate the whole block.
    let tcb = unsafe { alloc(core::ptr::null_mut()) } as usize;
    if tcb == 0 {
        return None;
    }
    let from = current_tcb();
    // SAFETY: both are TCBs: the calling thread's, and the fresh one nobody else uses yet;
    // the offsets are tcbhead_t's.
    unsafe {
        let put = |off: usize, v: usize| ((tcb + off) as *mut usize).write(v);
        let get = |off: usize| ((from + off) as *const usize).read();
        put(OFF_TCB, tcb);
        put(OFF_SELF, tcb);
        ((tcb + OFF_MULTIPLE_THREADS) as *mut i32)
            .write(((from + OFF_MULTIPLE_THREADS) as *const i32).read());
        put(OFF_SYSINFO, get(OFF_SYSINFO));
        put(OFF_STACK_GUARD, get(OFF_STACK_GUARD));
        put(OFF_POINTER_GUARD, get(OFF_POINTER_GUARD));
        ((tcb + OFF_FEATURE_1) as *mut u32).write(((from + OFF_FEATURE_1) as *const u32).read());
        ((tcb + tid_offset()) as *mut i32).write(NEXT_TID.fetch_add(1, Ordering::Relaxed));
        if let Some(rseq) = rseq_offset() {
            ((tcb as isize + rseq) as usize as *mut u32)
                .add(RSEQ_OFF_CPU_ID / 4)
                .write(RSEQ_CPU_ID_REGISTRATION_FAILED);
        }
    }
    Some(tcb)
}

/// Frees a TCB from [`allocate`], with its TLS blocks.
///
/// # Safety
/// Nothing runs on `tcb` and nothing will.
pub unsafe fn free(tcb: usize) {
    let dealloc = real!(_dl_deallocate_tls: unsafe extern "C" fn(*mut c_void, bool));
    // SAFETY: per the contract; `true` frees the TCB's memory too.
    unsafe { dealloc(tcb as *mut c_void, true) };
}

/// Runs the calling thread's C++ `thread_local` and `__cxa_thread_atexit` destructors.
pub fn run_thread_local_destructors() {
    let call = real!(__call_tls_dtors: unsafe extern "C" fn());
    // SAFETY: what glibc runs when a thread exits; it empties the list it runs.
    unsafe { call() };
}

/// Where glibc keeps a thread's `struct rseq`, relative to its TCB (glibc 2.35 and later).
fn rseq_offset() -> Option<isize> {
    static OFFSET: OnceLock<Option<isize>> = OnceLock::new();
    *OFFSET.get_or_init(look_up_rseq_offset)
}

fn look_up_rseq_offset() -> Option<isize> {
    // SAFETY: looks up data symbols; NUL-terminated names.
    let (off, size) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize,
            libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32,
        )
    };
    if off.is_null() || size.is_null() {
        return None;
    }
    // SAFETY: the dynamic linker's exported, initialized variables.
    unsafe { (*size > 0).then(|| *off) }
}
