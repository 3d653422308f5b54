//! The dispatcher and the kick.
//!
//! Every kthread blocks the signals the program may direct at the process ([`kernel_blocked`]),
//! so the kernel leaves each one pending for the process, where the dispatcher, an OS thread of
//! its own, takes it with `sigtimedwait` and routes it. Only the signals that must reach the
//! thread that caused them or that the runtime uses stay unblocked on kthreads.
//!
//! A signal routed to a uthread that is neither in a signal wait nor asleep in the shim is
//! delivered by the kick ([`KICK`], the kernel's highest realtime signal, hidden from the
//! program): it interrupts each kthread, and the one running that uthread runs its handler
//! there, on the uthread's own stack, as the kernel would have. A kthread may be interrupted
//! where a handler cannot run (preemption disabled, in its scheduler); the dispatcher then
//! kicks again, backing off, until the signal has been taken.

use core::ffi::c_void;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use corral_sigroute::SigSet;

use super::deliver::deliver_pending;
use super::state::{self, Record, STATE};
use super::{route, set_kernel_mask, to_sigset};

/// The kick: the kernel's `SIGRTMAX`. `SIGRTMAX` as the program sees it is one lower.
pub const KICK: i32 = 64;

/// Faults the kernel raises in the thread that caused them: never blocked, never routed.
const FAULTS: [i32; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGFPE,
    libc::SIGILL,
    libc::SIGTRAP,
    libc::SIGSYS,
];

/// Signals left to the kernel on kthreads besides faults: `SIGPIPE` and `SIGXFSZ` go to the
/// thread whose write raised them, `SIGABRT` to the thread in `abort`, the profiling timers'
/// to whichever thread runs (what a profiler samples).
const THREAD_BOUND: [i32; 5] = [
    libc::SIGPIPE,
    libc::SIGXFSZ,
    libc::SIGABRT,
    libc::SIGPROF,
    libc::SIGVTALRM,
];

static RUNTIME: OnceLock<&'static corral::Runtime> = OnceLock::new();
static DISPATCHER_TID: AtomicI32 = AtomicI32::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// Whether the preemption signal is the runtime's (then the program's uses of it reach the
/// dispatcher from the runtime's handler, not by being blocked).
static PREEMPTING: AtomicBool = AtomicBool::new(false);
/// Set when a signal was routed to a uthread that may be running: the dispatcher kicks.
static UNDELIVERED: AtomicBool = AtomicBool::new(false);
/// Signals some `signalfd` reads: left pending in the kernel, not taken by the dispatcher.
static SIGNALFD: AtomicU64 = AtomicU64::new(0);
static CONFIG_ASKED: AtomicU64 = AtomicU64::new(0);
static CONFIG_SEEN: AtomicU64 = AtomicU64::new(0);

/// The first retry of a kick, and the longest wait between two.
const FIRST_RETRY: Duration = Duration::from_micros(200);
const LAST_RETRY: Duration = Duration::from_millis(50);

/// Whether the shim routes signals (once the dispatcher runs).
pub fn active() -> bool {
    STARTED.load(Ordering::Acquire)
}

/// What kthreads block: everything except faults, the thread-bound signals, SIGKILL and
/// SIGSTOP (which cannot be blocked), the C library's internal signals, the kick, and the
/// preemption signal when the runtime uses it.
pub fn kernel_blocked(preempting: bool) -> SigSet {
    let mut open = SigSet::of(&FAULTS)
        .union(SigSet::of(&THREAD_BOUND))
        .union(SigSet::of(&[libc::SIGKILL, libc::SIGSTOP, 32, 33, KICK]));
    if preempting {
        open = open.with(corral::PREEMPT_SIGNAL);
    }
    SigSet::FULL.minus(open)
}

/// What the dispatcher takes: what kthreads block, and the program's uses of the preemption
/// signal, which the runtime's handler passes on.
fn dispatched() -> SigSet {
    kernel_blocked(PREEMPTING.load(Ordering::Relaxed))
        .with(corral::PREEMPT_SIGNAL)
        .minus(SigSet(SIGNALFD.load(Ordering::SeqCst)))
}

/// Whether a `signalfd` reads `sig` from the kernel.
pub fn left_to_signalfd(sig: i32) -> bool {
    SigSet(SIGNALFD.load(Ordering::SeqCst)).contains(sig)
}

/// Called on the main OS thread before the runtime starts its kthreads, which inherit its
/// mask: blocks what kthreads block, keeps the program's blocking of the thread-bound
/// signals, and returns the mask the program started with (its `main`'s).
pub fn prepare(preempting: bool) -> SigSet {
    PREEMPTING.store(preempting, Ordering::Relaxed);
    let initial = set_kernel_mask(libc::SIG_BLOCK, SigSet::EMPTY);
    let kept = initial.intersect(SigSet::of(&THREAD_BOUND));
    set_kernel_mask(libc::SIG_SETMASK, kernel_blocked(preempting).union(kept));
    initial
}

/// Installs the kick's handler and starts the dispatcher.
pub fn start(rt: &'static corral::Runtime) -> std::io::Result<()> {
    let _ = RUNTIME.set(rt);
    // SAFETY: a valid action whose handler only reads the calling uthread's record; the kick
    // and the preemption signal stay blocked while it runs until it unblocks them itself.
    unsafe {
        let mut action: libc::sigaction = core::mem::zeroed();
        action.sa_sigaction =
            on_kick as extern "C" fn(i32, *mut libc::siginfo_t, *mut c_void) as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        action.sa_mask = to_sigset(SigSet::of(&[KICK, corral::PREEMPT_SIGNAL]));
        if crate::disposition::real_sigaction()(KICK, &action, core::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    std::thread::Builder::new()
        .name("corral-signals".into())
        .spawn(run)?;
    while DISPATCHER_TID.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    STARTED.store(true, Ordering::Release);
    Ok(())
}

/// Has the dispatcher kick until `rec`'s uthread (and any other) has taken what was routed
/// to it.
pub fn watch_undelivered() {
    UNDELIVERED.store(true, Ordering::SeqCst);
    poke();
}

fn poke() {
    let tid = DISPATCHER_TID.load(Ordering::Acquire);
    // SAFETY: gettid and getpid cannot fail; tgkill of our own dispatcher thread.
    unsafe {
        if tid != 0 && tid != libc::gettid() {
            libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, KICK);
        }
    }
}

/// Sends the program's own use of the preemption signal, which the runtime's handler received,
/// to the dispatcher. False if there is no dispatcher.
pub fn forward(info: &libc::siginfo_t) -> bool {
    let tid = DISPATCHER_TID.load(Ordering::Acquire);
    if tid == 0 {
        return false;
    }
    // SAFETY: rt_tgsigqueueinfo to a thread of our own process with the siginfo the kernel gave.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_tgsigqueueinfo,
            libc::getpid(),
            tid,
            info.si_signo,
            info as *const libc::siginfo_t,
        )
    };
    rc == 0
}

/// Leaves `set` to a `signalfd`: the dispatcher stops taking its signals, and those pending for
/// the process go back to the kernel, where the `signalfd` reads them.
pub fn leave_to_signalfd(set: SigSet) {
    let set = set.intersect(kernel_blocked(PREEMPTING.load(Ordering::Relaxed)));
    let before = SigSet(SIGNALFD.fetch_or(set.0, Ordering::SeqCst));
    if set.minus(before).is_empty() {
        return;
    }
    let asked = CONFIG_ASKED.fetch_add(1, Ordering::SeqCst) + 1;
    poke();
    let give_up = Instant::now() + Duration::from_secs(1);
    while CONFIG_SEEN.load(Ordering::SeqCst) < asked && Instant::now() < give_up {
        crate::wait::yield_now();
    }
    let taken = STATE.lock().drain_process(set);
    for info in taken {
        // SAFETY: rt_sigqueueinfo to our own process, with a siginfo the dispatcher received.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigqueueinfo,
                libc::getpid(),
                info.si_signo,
                &info as *const libc::siginfo_t,
            )
        };
    }
}

/// The dispatcher's loop.
fn run() {
    set_kernel_mask(libc::SIG_SETMASK, SigSet::FULL.minus(SigSet::of(&FAULTS)));
    // SAFETY: gettid cannot fail.
    DISPATCHER_TID.store(unsafe { libc::gettid() }, Ordering::Release);
    let mut retry: Option<Duration> = None;
    loop {
        let asked = CONFIG_ASKED.load(Ordering::SeqCst);
        let set = dispatched().with(KICK);
        CONFIG_SEEN.store(asked, Ordering::SeqCst);
        // SAFETY: plain data; the kernel fills it.
        let mut info: libc::siginfo_t = unsafe { core::mem::zeroed() };
        match timed_wait(set, &mut info, retry) {
            Some(KICK) | None => {}
            Some(_) => {
                route::to_process(info);
            }
        }
        if UNDELIVERED.swap(false, Ordering::SeqCst) || retry.is_some() {
            retry = if kick_undelivered() {
                Some(retry.map_or(FIRST_RETRY, |r| (r * 2).min(LAST_RETRY)))
            } else {
                None
            };
        }
    }
}

fn timed_wait(set: SigSet, info: &mut libc::siginfo_t, timeout: Option<Duration>) -> Option<i32> {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos().into(),
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: rt_sigtimedwait with an 8-byte kernel set, our siginfo and timespec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigtimedwait,
            &set.0 as *const u64,
            info as *mut libc::siginfo_t,
            ts_ptr,
            8usize,
        )
    };
    (rc > 0).then_some(rc as i32)
}

/// Wakes or kicks every uthread with a signal it could take and has not; true if there was one.
fn kick_undelivered() -> bool {
    let waiting: Vec<Arc<Record>> = STATE
        .lock()
        .slots
        .iter()
        .filter(|s| s.rec.deliverable())
        .map(|s| s.rec.clone())
        .collect();
    if waiting.is_empty() {
        return false;
    }
    let mut running = false;
    for rec in &waiting {
        let at = rec.blocked_on.load(Ordering::SeqCst);
        if at != 0 {
            corral::futex::wake_uthreads_at(at, usize::MAX);
        } else {
            running = true;
        }
    }
    if running && let Some(rt) = RUNTIME.get() {
        // SAFETY: getpid cannot fail; tgkill of our own kthreads.
        let pid = unsafe { libc::getpid() };
        for tid in rt.kthread_tids() {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, KICK) };
        }
    }
    true
}

/// The kick's handler, on a kthread: if the uthread it interrupted may run code here and has a
/// signal to take, its handlers run now, on its own stack.
extern "C" fn on_kick(_sig: i32, _info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // Preemption enabled means the uthread holds no lock of the runtime's or the shim's and is
    // not between uthreads (its TLS, hence its record, is its own).
    if !corral::preempt::is_enabled() {
        return;
    }
    let Some(rec) = state::current() else {
        return;
    };
    if !rec.deliverable() {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno, which the interrupted code owns.
    let saved_errno = unsafe { *libc::__errno_location() };
    // From here the uthread may move to another kthread (a handler may block; leaving a
    // preemption guard acts on a pending request): this one must stay preemptible and
    // kickable meanwhile.
    let mut interrupts = SigSet::of(&[KICK]);
    if PREEMPTING.load(Ordering::Relaxed) {
        interrupts = interrupts.with(corral::PREEMPT_SIGNAL);
    }
    set_kernel_mask(libc::SIG_UNBLOCK, interrupts);
    let here = &rec as *const _ as usize;
    if corral::current_stack().is_some_and(|s| s.contains(&here)) {
        deliver_pending(rec);
    }
    // Otherwise on an alternate stack, inside another handler: the retry finds it elsewhere.
    set_kernel_mask(libc::SIG_BLOCK, interrupts);
    // sigreturn installs the saved `uc_stack` as this thread's alternate signal stack: make it
    // the one of the kthread we return on, which may not be the one we were kicked on.
    // SAFETY: ctx is the ucontext_t the kernel passed to this SA_SIGINFO handler.
    unsafe {
        let uc = ctx.cast::<libc::ucontext_t>();
        libc::sigaltstack(core::ptr::null(), &mut (*uc).uc_stack);
        *libc::__errno_location() = saved_errno;
    }
}
