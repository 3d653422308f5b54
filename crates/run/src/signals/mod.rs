//! Signals for a program whose threads are uthreads.
//!
//! A kthread's kernel mask is shared by every uthread it runs, so the kernel cannot honour a
//! uthread's mask, nor find the uthread waiting in `sigsuspend` or `sigwait`. The shim takes
//! over: kthreads block the signals a program directs at the process, a dispatcher thread takes
//! each one from the kernel ([`dispatch`]), and the shim routes it by POSIX's rules
//! (`corral-sigroute`) among the uthreads' own masks and waits ([`state`], [`route`]). The
//! uthread that takes it runs its handler on its own stack ([`deliver`]); signal waits and
//! sleeps are uthread waits that give the kthread back ([`calls`]). `kill` of the process
//! itself, `raise`, `pthread_kill` and `sigqueue` route without the kernel.

mod calls;
mod deliver;
mod dispatch;
mod route;
mod state;

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use corral::futex as rt;
use corral_sigroute::SigSet;

pub use dispatch::{KICK, active, forward};
pub use state::{Record, current, forget, leave};

/// The mask the program started with: its `main`'s.
static INITIAL_MASK: AtomicU64 = AtomicU64::new(0);

/// A kernel-layout set from a C library `sigset_t`.
pub fn from_sigset(set: &libc::sigset_t) -> SigSet {
    // SAFETY: glibc's x86-64 sigset_t begins with the kernel's 64-bit set, signal n at bit n-1.
    SigSet(unsafe { *(set as *const libc::sigset_t).cast::<u64>() })
}

pub fn to_sigset(set: SigSet) -> libc::sigset_t {
    // SAFETY: all zeroes is the empty set; the first 64 bits are the kernel's set, as above.
    unsafe {
        let mut out: libc::sigset_t = core::mem::zeroed();
        *(&raw mut out).cast::<u64>() = set.0;
        out
    }
}

/// The layout of `siginfo_t` for signals sent by `kill`, `tgkill` and `sigqueue` (x86-64).
#[repr(C)]
struct SentInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: i32,
    uid: u32,
    value: usize,
    _rest: [u64; 12],
}

const _: () = assert!(size_of::<SentInfo>() == size_of::<libc::siginfo_t>());

/// A `siginfo_t` for signal `sig` sent by process `pid` as user `uid`, with `code` (`SI_USER`,
/// `SI_TKILL`, `SI_QUEUE`) and the value `sigqueue` passes.
pub fn signal_info(sig: i32, code: i32, pid: i32, uid: u32, value: usize) -> libc::siginfo_t {
    let sent = SentInfo {
        signo: sig,
        errno: 0,
        code,
        _pad: 0,
        pid,
        uid,
        value,
        _rest: [0; 12],
    };
    // SAFETY: same size; SentInfo is the kernel's layout of these fields, padding included.
    unsafe { core::mem::transmute::<SentInfo, libc::siginfo_t>(sent) }
}

/// Before the runtime starts, on the main OS thread: see [`dispatch::prepare`].
pub fn prepare(preempting: bool) {
    let initial = dispatch::prepare(preempting);
    INITIAL_MASK.store(initial.0, Ordering::Relaxed);
}

/// Once the runtime runs: starts routing.
pub fn start(rt: &'static corral::Runtime) -> std::io::Result<()> {
    dispatch::start(rt)?;
    // SAFETY: registers a plain function for the child of a fork.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(in_fork_child)) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Changes the calling OS thread's kernel mask (`how` as for `pthread_sigmask`) with the system
/// call itself, not the shim's `pthread_sigmask`; returns the mask before.
pub fn set_kernel_mask(how: i32, set: SigSet) -> SigSet {
    let mut before: u64 = 0;
    // SAFETY: rt_sigprocmask on this thread with 8-byte kernel sets we own.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            &set.0 as *const u64,
            &mut before as *mut u64,
            8usize,
        )
    };
    SigSet(before)
}

/// The child of a fork has one thread and no dispatcher: its kernel mask becomes the forking
/// uthread's, so that what it runs or execs sees the program's mask.
extern "C" fn in_fork_child() {
    let mask = current_mask().unwrap_or(SigSet(INITIAL_MASK.load(Ordering::Relaxed)));
    set_kernel_mask(libc::SIG_SETMASK, mask);
}

/// Called by `main`'s uthread on its own TLS (the main thread's TCB, `tcb`).
pub fn enter_main(tcb: usize) {
    if !active() {
        return;
    }
    let rec = state::register(tcb, SigSet(INITIAL_MASK.load(Ordering::Relaxed)), true);
    enter_uthread(&rec);
    // The record lives in STATE until the process ends.
    core::mem::forget(rec);
}

/// Called by `pthread_create` for the thread whose TCB is `tcb`: its record, with the
/// creator's mask (POSIX: a new thread inherits its creator's mask, and nothing pending).
pub fn new_thread(tcb: usize) -> Option<Arc<Record>> {
    active().then(|| state::register(tcb, current_mask().unwrap_or(SigSet::EMPTY), false))
}

/// Called by a new uthread on its own TLS.
pub fn enter_uthread(rec: &Arc<Record>) {
    state::enter(rec);
    deliver_current();
}

/// The calling uthread's mask, if it has a record.
pub fn current_mask() -> Option<SigSet> {
    current().map(Record::mask)
}

/// Sets the calling uthread's mask; then what it unblocked and is pending is delivered.
pub fn set_current_mask(rec: &Record, mask: SigSet) {
    rec.set_mask(mask);
    if rec.deliverable() {
        deliver::deliver_pending(rec);
    }
}

/// Delivers what the calling uthread can take now.
pub fn deliver_current() {
    if let Some(rec) = current()
        && rec.deliverable()
    {
        deliver::deliver_pending(rec);
    }
}

/// Before a shim wait on the word at `addr`: says where the calling uthread sleeps, for a
/// signal to interrupt it. False if a signal is deliverable already (do not sleep).
pub fn before_wait(addr: usize) -> bool {
    let Some(rec) = current() else {
        return true;
    };
    rec.blocked_on.store(addr, Ordering::SeqCst);
    if rec.deliverable() {
        rec.blocked_on.store(0, Ordering::SeqCst);
        return false;
    }
    true
}

/// After a shim wait: delivers what interrupted it, if anything.
pub fn after_wait() {
    if let Some(rec) = current() {
        rec.blocked_on.store(0, Ordering::SeqCst);
        if rec.deliverable() {
            deliver::deliver_pending(rec);
        }
    }
}

/// Sleeps until `when` or until a handler has run on the calling uthread (true). Without a
/// record, sleeps on the runtime's timers.
pub fn sleep_until(when: std::time::Instant) -> bool {
    let Some(rec) = current() else {
        corral::sleep_until(when);
        return false;
    };
    let deadline = crate::futex::monotonic_ns(when);
    if corral::now_ns() >= deadline {
        // A sleep of nothing still lets others run, as the runtime's own does.
        corral::yield_now();
        return rec.deliverable() && deliver::deliver_pending(rec);
    }
    loop {
        let seen = rec.word.load(Ordering::SeqCst);
        if rec.deliverable() && deliver::deliver_pending(rec) {
            return true;
        }
        let slept = rec.sleep_on_word(seen, Some(deadline));
        if slept == Err(rt::NotWoken::TimedOut) || corral::now_ns() >= deadline {
            return rec.deliverable() && deliver::deliver_pending(rec);
        }
    }
}
