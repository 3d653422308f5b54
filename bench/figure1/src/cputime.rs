//! The core time the runtime holds, read as the CPU time of the process's threads.
//!
//! A kthread runs only on a core iokerneld granted it and parks when it has nothing to do, so
//! its CPU time is the time it held a core: the requests it ran, the runtime's own work
//! (scheduling, spawning, timers) and its spin before parking. The time between iokerneld's
//! decision to grant a core and the woken kthread running is not in it.

use std::io;

/// Nanoseconds of CPU time thread `tid` of this process has run.
///
/// Read through the thread's CPU clock rather than `/proc/<tid>/schedstat`: the clock brings a
/// running thread's count up to date, where schedstat lags by up to a scheduler tick.
fn thread_cpu_ns(tid: i32) -> io::Result<u64> {
    // The kernel's clock id of a thread's CPU time, as glibc's pthread_getcpuclockid builds it:
    // the complemented tid above CPUCLOCK_SCHED (2) and the per-thread bit (4).
    let clock: libc::clockid_t = (!tid << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer; an id naming no thread of
    // this process is refused with EINVAL, not read.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// CPU time, ns, of every thread of this process but the calling one (the bench's controller,
/// which only starts each point, waits, and reads iokerneld's statistics).
pub fn runtime_threads_ns() -> io::Result<u64> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let mut total = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        if tid == me {
            continue;
        }
        match thread_cpu_ns(tid) {
            Ok(ns) => total += ns,
            // A thread that exited since the directory was read has nothing more to add.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(total)
}
