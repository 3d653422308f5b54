//! Thin wrappers over the system calls iokerneld and its test client use, so that the rest of
//! the crate deals in `io::Result`s and needs `unsafe` only where it shares memory.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use corral_abi::RawRegion;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::process::Pid;
use rustix::thread::CpuSet;

/// `CLOCK_MONOTONIC` in nanoseconds: the clock runtimes use for timer deadlines.
#[inline]
pub fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn pid(raw: i32) -> io::Result<Pid> {
    Pid::from_raw(raw).ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
}

/// Restricts thread `tid` (0: the calling thread) to `cpus`.
pub fn set_affinity(tid: i32, cpus: &[usize]) -> io::Result<()> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    let target = if tid == 0 { None } else { Some(pid(tid)?) };
    rustix::thread::sched_setaffinity(target, &set).map_err(io::Error::from)
}

/// Puts thread `tid` under `SCHED_IDLE` (`idle == true`) or back under `SCHED_OTHER`.
pub fn set_idle_policy(tid: i32, idle: bool) -> io::Result<()> {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system call; `param` is a valid sched_param for the duration of the call.
    let rc = unsafe { libc::sched_setscheduler(tid, policy, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
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

/// Adds 1 to an eventfd. A full counter (`EAGAIN` on a nonblocking eventfd) already means
/// "wake up", so it is not an error.
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Sets `O_NONBLOCK` on a descriptor (and so on every descriptor sharing its open file).
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// A shared, read-write mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access to it goes through
// RawRegion (atomics) or raw pointers whose users synchronise themselves.
unsafe impl Send for Mapping {}
// SAFETY: as for Send.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, `MAP_SHARED`, readable and writable.
    pub fn new(fd: impl AsFd, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel picks overlaps nothing we use; it
        // is only ever reached through this value, which unmaps it on drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Self { base, len })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The mapping as a region, borrowed.
    pub fn raw(&self) -> RawRegion<'_> {
        // SAFETY: the mapping stays valid while `self` is borrowed, and this crate reaches the
        // region's shared parts only through corral-abi's atomic views.
        unsafe { RawRegion::new(self.base, self.len) }
    }

    /// The mapping as a region with an unchecked lifetime, for a structure that keeps views
    /// of the region next to the mapping itself.
    ///
    /// # Safety
    ///
    /// The caller must not use the returned region, or any view made from it, after this
    /// `Mapping` is dropped.
    pub unsafe fn raw_unbounded(&self) -> RawRegion<'static> {
        // SAFETY: validity for as long as the views are used is the caller's promise; access is
        // atomic as for `raw`.
        unsafe { RawRegion::new(self.base, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base + len` is the mapping made in `new`, unmapped only here, and no
        // view of it outlives `self` (`raw` borrows; `raw_unbounded`'s callers promise it).
        unsafe {
            let _ = rustix::mm::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

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
