//! Signals: stack-overflow reports for uthreads, and the preemption signal.
//!
//! SIGSEGV/SIGBUS run on an alternate stack; a fault inside the running uthread's guard page is
//! reported with the uthread's name and id before aborting. Anything else goes to whatever
//! handler was installed before ours (Rust's own, for OS thread stacks).
//!
//! SIGUSR1 asks the kthread to give up the current uthread. If preemption is disabled the
//! request is recorded in the preemption word and honoured when it is re-enabled; otherwise
//! the handler switches away right there, leaving the kernel's signal frame (all registers,
//! vector state included) on the uthread's stack until it is resumed.

use core::cell::UnsafeCell;
use core::ptr;
use std::sync::Once;

use crate::arch;
use crate::preempt;
use crate::sched::kthread::{self, KThread, OFF_PREEMPT, PREEMPT_NOT_PENDING};
use crate::sched::uthread::running_on;

/// The signal iokerneld uses to preempt a kthread.
pub const PREEMPT_SIGNAL: libc::c_int = libc::SIGUSR1;

const ALTSTACK_SIZE: usize = 64 * 1024;

struct OldActions(UnsafeCell<[Option<libc::sigaction>; 2]>);
// SAFETY: written once inside `INSTALL` before the handlers that read it are installed.
unsafe impl Sync for OldActions {}
static OLD: OldActions = OldActions(UnsafeCell::new([None, None]));
static INSTALL: Once = Once::new();
static INSTALL_PREEMPT: Once = Once::new();

/// Per-kthread signal set-up, on the kthread's own OS thread.
pub(crate) fn on_kthread_start() {
    INSTALL.call_once(|| {
        for (i, sig) in [libc::SIGSEGV, libc::SIGBUS].into_iter().enumerate() {
            let old = install(sig, on_fault, libc::SA_ONSTACK);
            // SAFETY: inside call_once, before any handler of ours can run.
            unsafe { (*OLD.0.get())[i] = Some(old) };
        }
    });
    ensure_altstack();
}

/// Installs the preemption handler (process-wide, once).
pub(crate) fn install_preemption_handler() {
    INSTALL_PREEMPT.call_once(|| {
        install(PREEMPT_SIGNAL, on_preempt, 0);
    });
}

fn install(
    sig: libc::c_int,
    handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
    extra_flags: libc::c_int,
) -> libc::sigaction {
    // SAFETY: sigaction structs are plain data.
    let mut new: libc::sigaction = unsafe { core::mem::zeroed() };
    new.sa_sigaction = handler as usize;
    new.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | extra_flags;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: valid pointers to sigaction structs; the mask is emptied first.
    unsafe {
        libc::sigemptyset(&mut new.sa_mask);
        libc::sigaction(sig, &new, &mut old);
    }
    old
}

fn ensure_altstack() {
    // SAFETY: stack_t is plain data.
    let mut cur: libc::stack_t = unsafe { core::mem::zeroed() };
    // SAFETY: querying only.
    unsafe { libc::sigaltstack(ptr::null(), &mut cur) };
    if cur.ss_flags & libc::SS_DISABLE == 0 {
        return; // Rust already gave this thread one.
    }
    // SAFETY: a fresh anonymous mapping; it lives as long as the thread (leaked at exit, small).
    let mem = unsafe {
        libc::mmap(
            ptr::null_mut(),
            ALTSTACK_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if mem == libc::MAP_FAILED {
        return;
    }
    let st = libc::stack_t {
        ss_sp: mem,
        ss_flags: 0,
        ss_size: ALTSTACK_SIZE,
    };
    // SAFETY: st describes memory we own.
    unsafe { libc::sigaltstack(&st, ptr::null_mut()) };
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some(k) = kthread::current_kthread()
        && let Some(th) = running_on(k)
    {
        let (lo, hi) = th.guard_range();
        if (lo..hi).contains(&addr) {
            report_overflow(th.name(), th.id(), th.stack_size());
            // SAFETY: abort is async-signal-safe.
            unsafe { libc::abort() };
        }
    }
    chain(sig, info, ctx);
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let idx = if sig == libc::SIGSEGV { 0 } else { 1 };
    // SAFETY: written once before our handler was installed.
    let old = unsafe { (*OLD.0.get())[idx] };
    match old {
        Some(old) if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN => {
            if old.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with this signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { core::mem::transmute(old.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the previous handler was installed with this signature.
                let f: extern "C" fn(libc::c_int) =
                    unsafe { core::mem::transmute(old.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // Restore the default action; returning re-executes the fault, which then kills us.
            // SAFETY: resetting a signal disposition.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
}

/// Writes the overflow report without allocating (we are in a signal handler).
fn report_overflow(name: Option<&str>, id: u64, stack_size: usize) {
    let mut buf = [0u8; 512];
    let mut w = Writer {
        buf: &mut buf,
        len: 0,
    };
    w.put(b"corral: uthread '");
    w.put(name.unwrap_or("<unnamed>").as_bytes());
    w.put(b"' (id ");
    w.num(id);
    w.put(b") overflowed its stack of ");
    w.num(stack_size as u64);
    w.put(b" bytes; aborting\n");
    let len = w.len;
    // SAFETY: write(2) of our own buffer is async-signal-safe.
    unsafe { libc::write(2, buf.as_ptr().cast(), len) };
}

struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    fn put(&mut self, s: &[u8]) {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s[..n]);
        self.len += n;
    }

    fn num(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.put(&digits[i..]);
    }
}

extern "C" fn on_preempt(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let Some(k) = kthread::current_kthread() else {
        return;
    };
    if k.preempt_word() & !PREEMPT_NOT_PENDING != 0 || k.current().is_null() {
        // Not now: record it; the next preempt::enable that reaches zero acts on it.
        // SAFETY: on a kthread; one instruction, so it cannot tear against the interrupted code.
        unsafe { arch::gs_and32::<OFF_PREEMPT>(!PREEMPT_NOT_PENDING) };
        return;
    }
    // The uthread's other uthreads must be preemptible while this one sits in its handler.
    // SAFETY: sigset_t is plain data; unblocking our own signal for this thread.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, PREEMPT_SIGNAL);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
    }
    // errno belongs to the OS thread, which other uthreads use until we are resumed.
    // SAFETY: __errno_location always returns this thread's errno.
    let saved_errno = unsafe { *libc::__errno_location() };
    preempt::disable();
    crate::sched::yield_from_signal();
    preempt::enable();
    // SAFETY: as above (possibly another OS thread's errno now, which is the one to restore).
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Marks a pending preemption as handled.
pub(crate) fn clear_pending(_k: &KThread) {
    // SAFETY: called on the kthread `_k` whose %gs we update.
    unsafe { arch::gs_or32::<OFF_PREEMPT>(PREEMPT_NOT_PENDING) };
}
