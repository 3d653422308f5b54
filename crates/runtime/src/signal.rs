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
use crate::sched::kthread::{self, Kthread, OFF_PREEMPT, PREEMPT_NOT_PENDING};
use crate::sched::uthread::running_on;

/// The signal iokerneld uses to preempt a kthread.
pub const PREEMPT_SIGNAL: libc::c_int = libc::SIGUSR1;

const ALTSTACK_SIZE: usize = 64 * 1024;

/// Handlers that were installed before ours: SIGSEGV, SIGBUS, the preemption signal.
struct OldActions(UnsafeCell<[Option<libc::sigaction>; 3]>);
// SAFETY: each slot is written once, inside a `Once`, before the handler that reads it is
// installed.
unsafe impl Sync for OldActions {}
static OLD: OldActions = OldActions(UnsafeCell::new([None, None, None]));
const OLD_PREEMPT: usize = 2;
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

/// Blocks the preemption signal on a kthread's OS thread that is about to stop being one. A
/// signal iokerneld sent it meanwhile (a kick, or a request for a core it is giving up anyway)
/// then stays pending and is discarded when the thread exits, instead of reaching the handler
/// on a thread that is no longer a kthread.
pub(crate) fn on_kthread_exit() {
    set_preempt_signal_blocked(true);
}

/// Installs the preemption handler (process-wide, once).
/// Whether any runtime of this process installed the preemption handler (it stays installed).
#[inline]
pub(crate) fn preemption_installed() -> bool {
    INSTALL_PREEMPT.is_completed()
}

pub(crate) fn install_preemption_handler() {
    INSTALL_PREEMPT.call_once(|| {
        let old = install(PREEMPT_SIGNAL, on_preempt, 0);
        // SAFETY: inside call_once; our handler only reads the slot after `install` returned,
        // and a signal arriving in between finds None and falls back to the default action.
        unsafe { (*OLD.0.get())[OLD_PREEMPT] = Some(old) };
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

/// Passes a signal that is not ours to the handler installed before us, or to the default
/// action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let idx = match sig {
        libc::SIGSEGV => 0,
        libc::SIGBUS => 1,
        _ => OLD_PREEMPT,
    };
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
        Some(old) if old.sa_sigaction == libc::SIG_IGN => {}
        _ => {
            // The default action. A fault re-executes on return and then kills us; any other
            // signal is raised again, now with the default disposition.
            // SAFETY: resetting a signal disposition and raising it are async-signal-safe.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                if sig != libc::SIGSEGV && sig != libc::SIGBUS {
                    libc::raise(sig);
                }
            }
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

extern "C" fn on_preempt(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(k) = kthread::current_kthread() else {
        chain(sig, info, ctx);
        return;
    };
    if !k.shared().config.preemption {
        chain(sig, info, ctx);
        return;
    }
    if let Some(iok) = &k.iok {
        // For iokerneld's hand-over statistics. clock_gettime is async-signal-safe.
        iok.preempt_seen.store(
            crate::timer::now_ns(),
            core::sync::atomic::Ordering::Release,
        );
    }
    if k.preempt_word() & !PREEMPT_NOT_PENDING != 0 || k.current().is_null() {
        // Not now: record it; the next preempt::enable that reaches zero acts on it.
        // SAFETY: on a kthread; one instruction, so it cannot tear against the interrupted code.
        unsafe { arch::gs_and32::<OFF_PREEMPT>(!PREEMPT_NOT_PENDING) };
        return;
    }
    // errno belongs to the OS thread, which other uthreads use until we are resumed.
    // SAFETY: __errno_location always returns this thread's errno.
    let saved_errno = unsafe { *libc::__errno_location() };
    // Raise the count before unblocking the signal: a request already queued is delivered at
    // once and must only be recorded, not nest another switch (and signal frame) on this stack.
    // SAFETY: on a kthread.
    unsafe { preempt::disable_on_kthread() };
    // Other uthreads must be preemptible while this one sits in its handler.
    set_preempt_signal_blocked(false);
    crate::sched::yield_from_signal();
    // Possibly resumed on another kthread. Until sigreturn nothing may move us again.
    set_preempt_signal_blocked(true);
    // sigreturn installs the saved `uc_stack` as this thread's alternate signal stack: make it
    // the stack of the kthread we return on, not of the one we were interrupted on.
    // SAFETY: ctx is the ucontext_t the kernel passed to this SA_SIGINFO handler.
    unsafe {
        let uc = ctx.cast::<libc::ucontext_t>();
        libc::sigaltstack(ptr::null(), &mut (*uc).uc_stack);
        *libc::__errno_location() = saved_errno;
    }
    // Drop our count without switching here. A request that arrived meanwhile is raised again
    // (it stays queued while blocked) and handled by a fresh handler once sigreturn unblocks it.
    // SAFETY: we raised it above on whatever kthread we ran on; the count moves with the core.
    if unsafe { arch::gs_dec32_is_zero::<OFF_PREEMPT>() } {
        // SAFETY: on a kthread.
        unsafe { arch::gs_or32::<OFF_PREEMPT>(PREEMPT_NOT_PENDING) };
        // SAFETY: signalling our own thread.
        unsafe {
            libc::syscall(
                libc::SYS_tgkill,
                libc::getpid(),
                libc::gettid(),
                PREEMPT_SIGNAL,
            )
        };
    }
}

/// Changes this kthread's mask for the preemption signal with the system call itself, not the
/// C library's wrapper: a program may interpose `pthread_sigmask` (the `corral-run` shim does,
/// keeping per-uthread masks), and this must reach the kthread.
fn set_preempt_signal_blocked(blocked: bool) {
    let how = if blocked {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // The kernel's sigset: one bit per signal, signal n at bit n - 1.
    let set: u64 = 1 << (PREEMPT_SIGNAL - 1);
    // SAFETY: rt_sigprocmask reads 8 bytes of set and changes only this thread's mask.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            &set as *const u64,
            ptr::null_mut::<u64>(),
            size_of::<u64>(),
        )
    };
}

/// Marks a pending preemption as handled.
pub(crate) fn clear_pending(_k: &Kthread) {
    // SAFETY: called on the kthread `_k` whose %gs we update.
    unsafe { arch::gs_or32::<OFF_PREEMPT>(PREEMPT_NOT_PENDING) };
}
