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
//!
//! What glibc's `start_thread` sets up on a new thread's own TLS is done here too: each TCB
//! gets its own resolver state (`__resp`, zeroed as glibc zeroes `struct pthread`'s, so the
//! resolver initializes it on first use; closed with the TCB), and [`enter`] points the
//! `<ctype.h>` tables at the global locale's, which a fresh block leaves null.

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
/// `struct __res_state` on x86-64 glibc, and its `nscount` (which `__res_thread_freeres`
/// checks to tell a state the resolver initialized from a zeroed one).
const RES_STATE_SIZE: usize = 568;
const RES_OFF_NSCOUNT: usize = 16;

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
    if let Some(resp) = resolver_pointer_offset() {
        // SAFETY: calloc gives zeroed memory of the state's size or null.
        let state = unsafe { libc::calloc(1, RES_STATE_SIZE) };
        // SAFETY: `__resp`'s slot in the fresh block's static TLS (see the lookup), which
        // holds the image's `&_res` until this write; `free` reads a null as "none of ours".
        unsafe { ((tcb as isize + resp) as usize as *mut *mut c_void).write(state) };
        if state.is_null() {
            // SAFETY: the block just allocated, unused.
            unsafe { free(tcb) };
            return None;
        }
    }
    Some(tcb)
}

/// Sets up, on the calling thread's TLS (a fresh block from [`allocate`] that it has just
/// switched to), the per-thread C library state that glibc initializes when a thread starts.
pub fn enter() {
    // Writes the thread's locale and its cached `<ctype.h>` table pointers, which is what
    // glibc's `__ctype_init` does at thread start, through the public interface.
    // glibc's LC_GLOBAL_LOCALE, `(locale_t) -1`, which the libc crate does not define.
    let global = usize::MAX as libc::locale_t;
    // SAFETY: LC_GLOBAL_LOCALE is always a valid argument.
    unsafe { libc::uselocale(global) };
}

/// Frees a TCB from [`allocate`], with its TLS blocks and resolver state.
///
/// # Safety
/// Nothing runs on `tcb` and nothing will.
pub unsafe fn free(tcb: usize) {
    if let Some(resp) = resolver_pointer_offset() {
        // SAFETY: `__resp`'s slot in the block, which `allocate` filled.
        let state = unsafe { ((tcb as isize + resp) as usize as *const *mut c_void).read() };
        if !state.is_null() {
            let close = real!(__res_nclose: unsafe extern "C" fn(*mut c_void));
            // SAFETY: the state `allocate` made; only a state the resolver initialized has
            // name servers (and maybe sockets) to close, as glibc checks at thread exit.
            unsafe {
                if (state.cast::<u8>().add(RES_OFF_NSCOUNT) as *const i32).read() != 0 {
                    close(state);
                }
                libc::free(state);
            }
        }
    }
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

/// Where glibc keeps a thread's resolver state pointer (`__resp`), relative to its TCB; `None`
/// if this C library does not export it (its threads then share the process's `_res`).
fn resolver_pointer_offset() -> Option<isize> {
    static OFFSET: OnceLock<Option<isize>> = OnceLock::new();
    *OFFSET.get_or_init(look_up_resolver_pointer_offset)
}

fn look_up_resolver_pointer_offset() -> Option<isize> {
    // SAFETY: looks up a thread-local data symbol; dlsym gives its address in the calling
    // thread, whose TCB is `current_tcb()`. The C library is loaded at start-up, so its TLS is
    // in the static block at the same offset from every thread's TCB.
    let slot = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__resp".as_ptr()) } as *const usize;
    if slot.is_null() {
        return None;
    }
    let res_state = real!(__res_state: unsafe extern "C" fn() -> *mut c_void);
    // SAFETY: the calling thread's `__resp`, which must hold what `__res_state` returns.
    let consistent = unsafe { slot.read() == res_state() as usize };
    consistent.then(|| slot as isize - current_tcb() as isize)
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
