//! Absolute `timespec` deadlines on a POSIX clock turned into `Instant`s (the monotonic clock
//! Corral's timers run on), and the checks POSIX asks of them.

use std::time::{Duration, Instant};

/// The `Instant` at which `clock` reads `abstime`, or `EINVAL` for a malformed time or clock.
///
/// # Safety
/// `abstime` points at a readable `timespec`.
pub unsafe fn deadline(
    clock: libc::clockid_t,
    abstime: *const libc::timespec,
) -> Result<Instant, i32> {
    if abstime.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let t = unsafe { *abstime };
    if t.tv_nsec < 0 || t.tv_nsec >= 1_000_000_000 {
        return Err(libc::EINVAL);
    }
    let now_instant = Instant::now();
    let now = clock_now(clock)?;
    let target = Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec as u32);
    let target = if t.tv_sec < 0 { Duration::ZERO } else { target };
    Ok(now_instant + target.saturating_sub(now))
}

/// What `clock` reads now, as time since its epoch.
pub fn clock_now(clock: libc::clockid_t) -> Result<Duration, i32> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec as u32))
}

/// A relative `timespec` as a `Duration`, or `EINVAL`.
///
/// # Safety
/// `rel` points at a readable `timespec`.
pub unsafe fn duration(rel: *const libc::timespec) -> Result<Duration, i32> {
    if rel.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: per the contract.
    let t = unsafe { *rel };
    if t.tv_sec < 0 || t.tv_nsec < 0 || t.tv_nsec >= 1_000_000_000 {
        return Err(libc::EINVAL);
    }
    Ok(Duration::new(t.tv_sec as u64, t.tv_nsec as u32))
}
