//! The preemption signal's disposition as the program sees it. The runtime takes cores back
//! with `PREEMPT_SIGNAL` (`SIGUSR1`), which programs also use for their own purposes: `xz`,
//! for one, installs a progress-report handler for it. Were that handler installed on the
//! kernel, every preemption request would print a progress line instead of giving the core
//! back, and iokerneld would demote the program for ignoring it.
//!
//! So once the runtime has installed its handler, `sigaction`, `signal`, `bsd_signal` and
//! `sysv_signal` for that signal keep the program's disposition here, report it back, and leave
//! the kernel's alone. The kernel's handler is [`on_preempt_signal`], which tells the two uses
//! apart by who sent the signal: one sent with `kill` or `sigqueue` (another process, a shell's
//! `kill -USR1`) is the program's, and goes on to the shim's dispatcher, which routes it to the
//! uthread that takes it (see [`crate::signals`]); one sent to a thread with `tgkill`
//! (iokerneld's preemption requests and kicks, the runtime's own re-raise) is the runtime's.
//! On a thread that is not a kthread every such signal is the program's. (The program's own
//! `kill` of itself, `raise` and `pthread_kill` never reach the kernel: the shim routes them.)
//!
//! Every other signal the shim routes keeps the program's disposition in the kernel, where
//! [`program_action`] reads it: kthreads block those signals, so the kernel never runs their
//! handlers itself.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use corral::SpinLock;

use crate::real::real;

type SigactionFn = unsafe extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;
type InfoHandler = extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void);
type PlainHandler = extern "C" fn(i32);

/// Set once the kernel's handler for the preemption signal is [`on_preempt_signal`].
static TAKEN_OVER: AtomicBool = AtomicBool::new(false);
/// The runtime's handler, which [`on_preempt_signal`] passes the runtime's signals to.
static RUNTIME_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// The program's disposition. The signal handler reads it with one load, so each one is a
/// fresh allocation that is never freed: a handler may still be reading the previous one, and a
/// program sets a signal's disposition a handful of times, not in a loop.
static PROGRAM: AtomicPtr<libc::sigaction> = AtomicPtr::new(core::ptr::null_mut());
/// Serializes the program's changes (read, replace) against each other.
static CHANGES: SpinLock<()> = SpinLock::new(());

/// `SIG_DFL` with no flags, for `SA_RESETHAND`: the signal handler cannot allocate.
struct StaticAction(libc::sigaction);
// SAFETY: never written.
unsafe impl Sync for StaticAction {}
// SAFETY: all zeroes is a valid sigaction: SIG_DFL, no flags, an empty mask.
static DEFAULT_ACTION: StaticAction = StaticAction(unsafe { core::mem::zeroed() });

pub fn real_sigaction() -> SigactionFn {
    real!(sigaction: SigactionFn)
}

/// The kernel's disposition of `sig` now.
pub fn kernel_disposition(sig: i32) -> libc::sigaction {
    // SAFETY: sigaction is plain data; a null new action only queries.
    unsafe {
        let mut now: libc::sigaction = core::mem::zeroed();
        real_sigaction()(sig, core::ptr::null(), &mut now);
        now
    }
}

/// Called once the runtime has started: if it installed a handler for the preemption signal
/// (`before` is the disposition from before it started, the program's own), the program's
/// changes from now on stay here and the kernel's handler becomes [`on_preempt_signal`].
pub fn take_over_preempt_signal(before: libc::sigaction) {
    let sig = corral::PREEMPT_SIGNAL;
    let runtime = kernel_disposition(sig);
    if runtime.sa_sigaction == before.sa_sigaction
        || runtime.sa_flags & libc::SA_SIGINFO == 0
        || runtime.sa_sigaction == libc::SIG_DFL
        || runtime.sa_sigaction == libc::SIG_IGN
    {
        // No preemption in this runtime: the signal stays the program's alone.
        return;
    }
    RUNTIME_HANDLER.store(runtime.sa_sigaction, Ordering::Release);
    PROGRAM.store(Box::into_raw(Box::new(before)), Ordering::Release);
    let mut ours = runtime;
    ours.sa_sigaction = on_preempt_signal as InfoHandler as usize;
    // SAFETY: a valid action; the handler only reads what was stored above.
    let rc = unsafe { real_sigaction()(sig, &ours, core::ptr::null_mut()) };
    if rc != 0 {
        crate::refuse::fatal("cannot install the preemption signal's handler");
    }
    TAKEN_OVER.store(true, Ordering::Release);
}

/// Whether the program set the preemption signal to `SIG_IGN` (while the kernel has the
/// runtime's handler).
pub fn program_ignores_preempt_signal() -> bool {
    if !TAKEN_OVER.load(Ordering::Acquire) {
        return false;
    }
    let _changes = CHANGES.lock();
    // SAFETY: set before TAKEN_OVER and never freed.
    unsafe { (*PROGRAM.load(Ordering::Acquire)).sa_sigaction == libc::SIG_IGN }
}

/// Sets the kernel's disposition of `sig` to `handler` with no flags; returns the one it
/// replaced, for [`restore_kernel_disposition`], or `None` if it could not be set.
pub fn set_kernel_disposition(sig: i32, handler: libc::sighandler_t) -> Option<libc::sigaction> {
    let mut next = DEFAULT_ACTION.0;
    next.sa_sigaction = handler;
    let mut before = DEFAULT_ACTION.0;
    // SAFETY: valid actions.
    let rc = unsafe { real_sigaction()(sig, &next, &mut before) };
    (rc == 0).then_some(before)
}

pub fn restore_kernel_disposition(sig: i32, before: &libc::sigaction) {
    // SAFETY: an action the kernel reported.
    unsafe { real_sigaction()(sig, before, core::ptr::null_mut()) };
}

fn intercepted(sig: i32) -> bool {
    sig == corral::PREEMPT_SIGNAL && TAKEN_OVER.load(Ordering::Acquire)
}

/// The program's action for `sig`: its own for the preemption signal once taken over, the
/// kernel's for the others (the kernel never runs a routed signal's handler: every kthread
/// blocks it, so the kernel's disposition is the program's, kept there).
pub fn program_action(sig: i32) -> libc::sigaction {
    if intercepted(sig) {
        let _changes = CHANGES.lock();
        // SAFETY: set before TAKEN_OVER and never freed.
        return unsafe { *PROGRAM.load(Ordering::Acquire) };
    }
    kernel_disposition(sig)
}

/// `SA_RESETHAND`: the program's action for `sig` becomes the default, as its handler starts.
pub fn reset_program_action(sig: i32) {
    if intercepted(sig) {
        // Only read through PROGRAM, never written.
        let default = &DEFAULT_ACTION.0 as *const libc::sigaction as *mut libc::sigaction;
        PROGRAM.store(default, Ordering::Release);
    } else {
        make_kernel_default(sig);
    }
}

/// Makes the kernel's action for `sig` its default, for the default action to be taken.
pub fn make_kernel_default(sig: i32) {
    // SAFETY: a valid action (SIG_DFL, no flags).
    unsafe { real_sigaction()(sig, &DEFAULT_ACTION.0, core::ptr::null_mut()) };
}

/// The program's `sigaction` for the preemption signal: reports and replaces its disposition.
///
/// # Safety
/// `act` and `old` are null or valid.
unsafe fn program_sigaction(act: *const libc::sigaction, old: *mut libc::sigaction) {
    let _changes = CHANGES.lock();
    let current = PROGRAM.load(Ordering::Acquire);
    if !old.is_null() {
        // SAFETY: the caller's out-pointer; `current` is never freed.
        unsafe { *old = *current };
    }
    if !act.is_null() {
        // SAFETY: the caller's action.
        let next = Box::into_raw(Box::new(unsafe { *act }));
        PROGRAM.store(next, Ordering::Release);
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    if intercepted(sig) {
        // SAFETY: forwarded.
        unsafe { program_sigaction(act, old) };
        return 0;
    }
    if refused_kick(sig) {
        return -1;
    }
    // SAFETY: forwarded.
    unsafe { real_sigaction()(sig, act, old) }
}

/// The kick is the shim's (the program's `SIGRTMAX` is one lower): changing it is `EINVAL`.
fn refused_kick(sig: i32) -> bool {
    if sig != crate::signals::KICK || !crate::signals::active() {
        return false;
    }
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = libc::EINVAL };
    true
}

/// glibc exports its `sigaction` under this name too.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __sigaction(
    sig: i32,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> i32 {
    // SAFETY: forwarded.
    unsafe { sigaction(sig, act, old) }
}

/// `signal`-style installation with these flags, for the preemption signal once taken over.
fn program_signal(handler: libc::sighandler_t, flags: i32) -> libc::sighandler_t {
    // SAFETY: sigaction is plain data.
    let mut act: libc::sigaction = unsafe { core::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = flags;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { core::mem::zeroed() };
    // SAFETY: both are ours.
    unsafe { program_sigaction(&act, &mut old) };
    old.sa_sigaction
}

/// `signal` and `bsd_signal`: BSD semantics, as glibc's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    if intercepted(sig) {
        return program_signal(handler, libc::SA_RESTART);
    }
    if refused_kick(sig) {
        return libc::SIG_ERR;
    }
    let f = real!(signal: unsafe extern "C" fn(i32, libc::sighandler_t) -> libc::sighandler_t);
    // SAFETY: forwarded.
    unsafe { f(sig, handler) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn bsd_signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: forwarded.
    unsafe { signal(sig, handler) }
}

/// `sysv_signal`: the handler is reset when it runs, and the signal is not blocked meanwhile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sysv_signal(sig: i32, handler: libc::sighandler_t) -> libc::sighandler_t {
    if intercepted(sig) {
        return program_signal(handler, libc::SA_RESETHAND | libc::SA_NODEFER);
    }
    if refused_kick(sig) {
        return libc::SIG_ERR;
    }
    let f = real!(sysv_signal: unsafe extern "C" fn(i32, libc::sighandler_t) -> libc::sighandler_t);
    // SAFETY: forwarded.
    unsafe { f(sig, handler) }
}

/// The kernel's handler for the preemption signal once taken over.
extern "C" fn on_preempt_signal(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    let sent_to_process = code == libc::SI_USER || code == libc::SI_QUEUE;
    if !sent_to_process && corral::kthread_index().is_some() {
        // SAFETY: the runtime's handler, stored before ours was installed, with the arguments
        // the kernel gave us; it may switch uthreads and return later, as in its own frame.
        let runtime: InfoHandler =
            unsafe { core::mem::transmute(RUNTIME_HANDLER.load(Ordering::Acquire)) };
        runtime(sig, info, ctx);
        return;
    }
    // The program's: routed to the uthread that takes it, by the dispatcher.
    // SAFETY: as above.
    if crate::signals::forward(unsafe { &*info }) {
        return;
    }
    deliver_to_program(sig, info, ctx);
}

/// Runs the program's disposition for a signal that is its own, as the kernel would have.
fn deliver_to_program(sig: i32, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: never freed (see PROGRAM).
    let action = unsafe { *PROGRAM.load(Ordering::Acquire) };
    match action.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // SIGUSR1's default action ends the process: give the kernel back its default and
            // send the signal again, delivered as soon as this handler returns.
            // SAFETY: a valid action; tgkill to our own thread.
            unsafe {
                let mut default: libc::sigaction = core::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                real_sigaction()(sig, &default, core::ptr::null_mut());
                libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), sig);
            }
        }
        handler => {
            if action.sa_flags & libc::SA_RESETHAND != 0 {
                // Only read through PROGRAM, never written.
                let default = &DEFAULT_ACTION.0 as *const libc::sigaction as *mut libc::sigaction;
                PROGRAM.store(default, Ordering::Release);
            }
            if action.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the program installed it with this signature.
                let f: InfoHandler = unsafe { core::mem::transmute(handler) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the program installed it with this signature.
                let f: PlainHandler = unsafe { core::mem::transmute(handler) };
                f(sig);
            }
        }
    }
}
