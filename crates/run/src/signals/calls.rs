//! The signal calls a uthread makes: waits (`sigwait`, `sigwaitinfo`, `sigtimedwait`,
//! `sigsuspend`, `pause`) that give the kthread back, sends to the process or a thread (`kill`
//! of the process itself, `sigqueue`, `raise`, `pthread_kill`) routed without the kernel,
//! `sigpending`, `signalfd`, and `SIGRTMAX` one below the kick. Elsewhere (not a uthread, or
//! before the runtime started) each is the C library's.

use core::sync::atomic::Ordering;

use corral::futex as rt;
use corral_sigroute::{SigSet, Waiting};

use super::deliver::deliver_pending;
use super::state::{Record, STATE, current};
use super::{KICK, active, deliver_current, dispatch, from_sigset, route, signal_info, to_sigset};
use crate::real::real;
use crate::{thread, tls};

fn set_errno(e: i32) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The calling uthread's record, once signals are routed.
fn routed_here() -> Option<&'static Record> {
    if !active() || !thread::on_uthread() {
        return None;
    }
    current()
}

fn set_waiting(rec: &Record, waiting: Waiting) {
    let mut st = STATE.lock();
    if let Some(i) = st.index_of(rec) {
        st.slots[i].waiting = waiting;
    }
}

/// The `sigwait` family: takes a signal of `set` pending on the uthread or the process, or
/// waits for one until `deadline`. `Err(EINTR)` if a handler ran meanwhile, `Err(EAGAIN)` at
/// the deadline.
fn wait_for(rec: &Record, set: SigSet, deadline: Option<u64>) -> Result<libc::siginfo_t, i32> {
    loop {
        let seen = {
            let mut st = STATE.lock();
            let i = st.index_of(rec).ok_or(libc::EINVAL)?;
            let taken = st.slots[i].accepted.take().or_else(|| st.take(i, set));
            if let Some(info) = taken {
                st.slots[i].waiting = Waiting::No;
                return Ok(info);
            }
            st.slots[i].waiting = Waiting::ForSignals(set);
            rec.word.load(Ordering::SeqCst)
        };
        if rec.deliverable() {
            // A signal for a handler, not one of those waited for.
            set_waiting(rec, Waiting::No);
            if deliver_pending(rec) {
                return Err(libc::EINTR);
            }
            continue;
        }
        if rec.sleep_on_word(seen, deadline) == Err(rt::NotWoken::TimedOut) {
            let mut st = STATE.lock();
            let i = st.index_of(rec).ok_or(libc::EINVAL)?;
            st.slots[i].waiting = Waiting::No;
            return st.slots[i].accepted.take().ok_or(libc::EAGAIN);
        }
    }
}

/// `sigsuspend`: the uthread's mask is `mask` until a handler has run.
fn suspend(rec: &Record, mask: SigSet) {
    let before = rec.set_mask(mask);
    loop {
        set_waiting(rec, Waiting::Suspended);
        let seen = rec.word.load(Ordering::SeqCst);
        if rec.deliverable() {
            set_waiting(rec, Waiting::No);
            if deliver_pending(rec) {
                break;
            }
            continue;
        }
        let _ = rec.sleep_on_word(seen, None);
    }
    rec.set_mask(before);
    deliver_current();
}

/// A relative timeout as an absolute deadline on CLOCK_MONOTONIC; `Err(EINVAL)` if malformed.
///
/// # Safety
/// `timeout` is null or readable.
unsafe fn deadline_after(timeout: *const libc::timespec) -> Result<Option<u64>, i32> {
    if timeout.is_null() {
        return Ok(None);
    }
    // SAFETY: per the contract.
    let d = unsafe { crate::time::duration(timeout) }?;
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    Ok(Some(corral::now_ns().saturating_add(ns)))
}

/// # Safety
/// `set` is readable; `info` is null or writable; `timeout` is null or readable.
unsafe fn timed_wait(
    rec: &Record,
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
) -> i32 {
    if set.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: per the contract.
    let deadline = match unsafe { deadline_after(timeout) } {
        Ok(d) => d,
        Err(e) => {
            set_errno(e);
            return -1;
        }
    };
    // SAFETY: per the contract.
    let wanted = from_sigset(unsafe { &*set }).without(KICK);
    match wait_for(rec, wanted, deadline) {
        Ok(got) => {
            if !info.is_null() {
                // SAFETY: per the contract.
                unsafe { *info = got };
            }
            got.si_signo
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigtimedwait(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
    timeout: *const libc::timespec,
) -> i32 {
    if let Some(rec) = routed_here() {
        // SAFETY: the caller's pointers, as sigtimedwait's.
        return unsafe { timed_wait(rec, set, info, timeout) };
    }
    let f = real!(sigtimedwait: unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t, *const libc::timespec) -> i32);
    // SAFETY: forwarded.
    unsafe { f(set, info, timeout) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigwaitinfo(
    set: *const libc::sigset_t,
    info: *mut libc::siginfo_t,
) -> i32 {
    if let Some(rec) = routed_here() {
        // SAFETY: the caller's pointers, as sigwaitinfo's.
        return unsafe { timed_wait(rec, set, info, core::ptr::null()) };
    }
    let f = real!(sigwaitinfo: unsafe extern "C" fn(*const libc::sigset_t, *mut libc::siginfo_t) -> i32);
    // SAFETY: forwarded.
    unsafe { f(set, info) }
}

/// `sigwait` returns an error number and restarts after a handler, as POSIX has it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigwait(set: *const libc::sigset_t, sig: *mut i32) -> i32 {
    if let Some(rec) = routed_here() {
        if set.is_null() || sig.is_null() {
            return libc::EFAULT;
        }
        // SAFETY: the caller's set.
        let wanted = from_sigset(unsafe { &*set }).without(KICK);
        loop {
            match wait_for(rec, wanted, None) {
                Ok(info) => {
                    // SAFETY: the caller's out-pointer.
                    unsafe { *sig = info.si_signo };
                    return 0;
                }
                Err(libc::EINTR) => continue,
                Err(e) => return e,
            }
        }
    }
    let f = real!(sigwait: unsafe extern "C" fn(*const libc::sigset_t, *mut i32) -> i32);
    // SAFETY: forwarded.
    unsafe { f(set, sig) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigsuspend(mask: *const libc::sigset_t) -> i32 {
    if let Some(rec) = routed_here() {
        if mask.is_null() {
            set_errno(libc::EFAULT);
            return -1;
        }
        // SAFETY: the caller's set.
        suspend(rec, from_sigset(unsafe { &*mask }));
        set_errno(libc::EINTR);
        return -1;
    }
    let f = real!(sigsuspend: unsafe extern "C" fn(*const libc::sigset_t) -> i32);
    // SAFETY: forwarded.
    unsafe { f(mask) }
}

#[unsafe(no_mangle)]
pub extern "C" fn pause() -> i32 {
    if let Some(rec) = routed_here() {
        suspend(rec, rec.mask());
        set_errno(libc::EINTR);
        return -1;
    }
    let f = real!(pause: unsafe extern "C" fn() -> i32);
    // SAFETY: the C library's pause.
    unsafe { f() }
}

/// Signals a uthread may not be sent: beyond what the program sees as `SIGRTMAX`, and the C
/// library's internal ones.
fn sendable(sig: i32) -> bool {
    (1..KICK).contains(&sig) && sig != 32 && sig != 33
}

/// Sends `sig` to the calling kthread, for SIGKILL and SIGSTOP, which act on the whole process.
fn to_own_kthread(sig: i32) {
    // SAFETY: tgkill of our own thread.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), libc::gettid(), sig) };
}

fn send_to_thread(tcb: usize, sig: i32) -> i32 {
    if sig == 0 {
        return 0;
    }
    if !sendable(sig) {
        return libc::EINVAL;
    }
    if sig == libc::SIGKILL || sig == libc::SIGSTOP {
        to_own_kthread(sig);
        return 0;
    }
    if let Err(e) = route::to_thread(tcb, route::sent_by_us(sig, libc::SI_TKILL)) {
        return e;
    }
    if tcb == tls::current_tcb() {
        // A signal a thread sends itself is delivered before the call returns.
        deliver_current();
    }
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn pthread_kill(t: libc::pthread_t, sig: i32) -> i32 {
    if active() && thread::on_uthread() {
        let tcb = t as usize;
        if STATE.lock().by_tcb(tcb).is_some() {
            return send_to_thread(tcb, sig);
        }
        if thread::is_shim_thread(t) {
            // Finished, not yet joined.
            return libc::ESRCH;
        }
    }
    let f = real!(pthread_kill: unsafe extern "C" fn(libc::pthread_t, i32) -> i32);
    // SAFETY: forwarded: not a uthread.
    unsafe { f(t, sig) }
}

#[unsafe(no_mangle)]
pub extern "C" fn raise(sig: i32) -> i32 {
    if routed_here().is_some() {
        let rc = send_to_thread(tls::current_tcb(), sig);
        if rc != 0 {
            set_errno(rc);
            return -1;
        }
        return 0;
    }
    let f = real!(raise: unsafe extern "C" fn(i32) -> i32);
    // SAFETY: the C library's raise.
    unsafe { f(sig) }
}

/// Whether a signal a uthread sends its own process is routed here rather than by the kernel:
/// all but SIGKILL and SIGSTOP, and those a `signalfd` reads from the kernel.
fn routes_here(pid: libc::pid_t, sig: i32) -> bool {
    // SAFETY: getpid cannot fail.
    let own = pid == unsafe { libc::getpid() };
    own && routed_here().is_some()
        && sendable(sig)
        && sig != libc::SIGKILL
        && sig != libc::SIGSTOP
        && !dispatch::left_to_signalfd(sig)
}

#[unsafe(no_mangle)]
pub extern "C" fn kill(pid: libc::pid_t, sig: i32) -> i32 {
    if routes_here(pid, sig) {
        route::to_process(route::sent_by_us(sig, libc::SI_USER));
        deliver_current();
        return 0;
    }
    let f = real!(kill: unsafe extern "C" fn(libc::pid_t, i32) -> i32);
    // SAFETY: the C library's kill.
    unsafe { f(pid, sig) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigqueue(pid: libc::pid_t, sig: i32, value: libc::sigval) -> i32 {
    if routes_here(pid, sig) {
        // SAFETY: getpid and getuid cannot fail.
        let (me, uid) = unsafe { (libc::getpid(), libc::getuid()) };
        let info = signal_info(sig, libc::SI_QUEUE, me, uid, value.sival_ptr as usize);
        if !route::to_process(info) {
            set_errno(libc::EAGAIN);
            return -1;
        }
        deliver_current();
        return 0;
    }
    let f = real!(sigqueue: unsafe extern "C" fn(libc::pid_t, i32, libc::sigval) -> i32);
    // SAFETY: forwarded.
    unsafe { f(pid, sig, value) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigpending(set: *mut libc::sigset_t) -> i32 {
    let f = real!(sigpending: unsafe extern "C" fn(*mut libc::sigset_t) -> i32);
    let Some(rec) = routed_here() else {
        // SAFETY: forwarded.
        return unsafe { f(set) };
    };
    if set.is_null() {
        set_errno(libc::EFAULT);
        return -1;
    }
    // SAFETY: plain data; the kernel fills it (what it still holds: signals for a signalfd,
    // and any the dispatcher has not taken yet).
    let mut kernel: libc::sigset_t = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    unsafe { f(&mut kernel) };
    let process = STATE.lock().process_pending();
    let all = rec
        .pending()
        .union(process)
        .union(from_sigset(&kernel))
        .without(KICK);
    // SAFETY: the caller's out-pointer.
    unsafe { *set = to_sigset(all) };
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn signalfd(fd: i32, mask: *const libc::sigset_t, flags: i32) -> i32 {
    if active() && !mask.is_null() {
        // SAFETY: the caller's set.
        dispatch::leave_to_signalfd(from_sigset(unsafe { &*mask }));
    }
    let f = real!(signalfd: unsafe extern "C" fn(i32, *const libc::sigset_t, i32) -> i32);
    // SAFETY: forwarded.
    unsafe { f(fd, mask, flags) }
}

/// `SIGRTMAX` as the program sees it: the kick is the kernel's highest signal, so the
/// program's is one lower.
#[unsafe(no_mangle)]
pub extern "C" fn __libc_current_sigrtmax() -> i32 {
    let f = real!(__libc_current_sigrtmax: unsafe extern "C" fn() -> i32);
    // SAFETY: the C library's.
    let kernel = unsafe { f() };
    kernel.min(KICK) - 1
}
