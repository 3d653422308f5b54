//! Thin wrappers over the system calls iokerneld and its test client use, so that the rest of
//! the crate deals in `io::Result`s. What travels between iokerneld and a runtime (the control
//! socket, memfds, the region mapping) is corral-abi's transport instead.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// `CLOCK_MONOTONIC` in nanoseconds: the clock runtimes use for timer deadlines.
#[inline]
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Puts thread `tid` under `SCHED_IDLE` (`idle == true`) or back under `SCHED_OTHER`.
pub fn set_idle_policy(tid: i32, idle: bool) -> io::Result<()> {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    set_scheduler(tid, policy, 0)
}

/// Puts thread `tid` (0: the caller) under `policy` at `priority` (0 outside the real-time
/// classes). The fair classes keep the thread's nice value.
pub fn set_scheduler(tid: i32, policy: i32, priority: u32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::try_from(priority)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
    };
    // SAFETY: plain system call; `param` is a valid sched_param for the duration of the call.
    let rc = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Stops a child process (an iokerneld, say) with SIGTERM, so that it can undo what it changed
/// on the machine, and kills it if it has not exited within `patience`.
pub fn stop_child(child: &mut std::process::Child, patience: std::time::Duration) {
    if let Ok(pid) = i32::try_from(child.id()) {
        // SAFETY: plain system call; the child is not reaped yet, so its pid still names it.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let deadline = std::time::Instant::now() + patience;
    while std::time::Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The scheduling policy of thread `tid`.
pub fn sched_policy(tid: i32) -> io::Result<i32> {
    // SAFETY: plain system call without pointers.
    let rc = unsafe { libc::sched_getscheduler(tid) };
    if rc >= 0 {
        Ok(rc)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `signal` to thread `tid` of process `pid` only: a recycled tid in another process is
/// never hit.
pub fn tgkill(pid: i32, tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: tgkill takes three integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// The region mapping iokerneld and the test clients use: corral-abi's, shared with runtimes.
pub use corral_abi::transport::Mapping;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set a flag instead of killing the process, and returns the flag.
pub fn stop_on_sigint_sigterm() -> io::Result<&'static AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        install_handler(signal, on_stop_signal)?;
    }
    Ok(&STOP)
}

/// Installs `handler` for `signal`, restarting interrupted system calls.
pub fn install_handler(signal: i32, handler: extern "C" fn(libc::c_int)) -> io::Result<()> {
    // SAFETY: sigaction is a plain C struct for which all-zeroes is a valid value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler as usize;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action` is initialised and the handler only stores to an atomic, which is
    // async-signal-safe.
    let rc = unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Blocks (`block == true`) or unblocks `signal` for the calling thread.
pub fn mask_signal(signal: i32, block: bool) -> io::Result<()> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    let how = if block {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    // SAFETY: `set` is a valid sigset_t owned by this frame.
    let rc = unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut())
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// Wakes every thread of any process asleep on the shared futex at `addr` (an address in a
/// mapping of a runtime's region). The address is only a key for the kernel: an unmapped one
/// makes the call fail, never fault, so a post that outlived its runtime's region is harmless.
pub fn futex_wake_shared(addr: u64) {
    // SAFETY: FUTEX_WAKE reads and writes no memory; the kernel checks the address itself.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            addr as *const u32,
            libc::FUTEX_WAKE,
            i32::MAX,
        )
    };
}

/// Wakes the threads of this process asleep on `word` with [`futex_wait_private`].
pub fn futex_wake_private(word: &core::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// Sleeps while `word` reads `expected`. May return early (a signal): callers re-check.
pub fn futex_wait_private(word: &core::sync::atomic::AtomicU32, expected: u32) {
    // SAFETY: the word is a live, aligned u32 for the whole call; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            core::ptr::null::<libc::timespec>(),
        )
    };
}
