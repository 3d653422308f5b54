//! `sched_yield`, `sleep`, `usleep`, `nanosleep` and `clock_nanosleep`: in a uthread they yield
//! or sleep on Corral's timers, leaving the kthread to other uthreads, and a signal handler
//! that runs on the uthread ends the sleep early (`EINTR`, with the time left), as POSIX has
//! it; elsewhere they are the C library's.

use std::time::{Duration, Instant};

use crate::real::real;
use crate::{signals, thread, time};

/// Sleeps the calling uthread until `when`; the time left if a handler interrupted it.
fn sleep_until(when: Instant) -> Option<Duration> {
    signals::sleep_until(when).then(|| when.saturating_duration_since(Instant::now()))
}

fn write_left(rem: *mut libc::timespec, left: Duration) {
    if !rem.is_null() {
        // SAFETY: the caller's out-pointer.
        unsafe {
            *rem = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos().into(),
            }
        };
    }
}

pub fn yield_now() {
    if thread::on_uthread() {
        corral::yield_now();
    } else {
        let f = real!(sched_yield: unsafe extern "C" fn() -> i32);
        // SAFETY: the C library's sched_yield.
        unsafe { f() };
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn sched_yield() -> i32 {
    yield_now();
    0
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn nanosleep(req: *const libc::timespec, rem: *mut libc::timespec) -> i32 {
    if !thread::on_uthread() {
        let f = real!(nanosleep: unsafe extern "C" fn(*const libc::timespec, *mut libc::timespec) -> i32);
        // SAFETY: forwarded with the caller's pointers.
        return unsafe { f(req, rem) };
    }
    // SAFETY: req is the caller's timespec.
    match unsafe { time::duration(req) } {
        Ok(d) => match sleep_until(Instant::now() + d) {
            None => 0,
            Some(left) => {
                write_left(rem, left);
                // SAFETY: this thread's errno.
                unsafe { *libc::__errno_location() = libc::EINTR };
                -1
            }
        },
        Err(e) => {
            // SAFETY: this thread's errno.
            unsafe { *libc::__errno_location() = e };
            -1
        }
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_nanosleep(
    clock: libc::clockid_t,
    flags: i32,
    req: *const libc::timespec,
    rem: *mut libc::timespec,
) -> i32 {
    if !thread::on_uthread() {
        let f = real!(clock_nanosleep: unsafe extern "C" fn(libc::clockid_t, i32, *const libc::timespec, *mut libc::timespec) -> i32);
        // SAFETY: forwarded with the caller's pointers.
        return unsafe { f(clock, flags, req, rem) };
    }
    if flags & libc::TIMER_ABSTIME != 0 {
        // SAFETY: req is the caller's timespec.
        return match unsafe { time::deadline(clock, req) } {
            Ok(d) => match sleep_until(d) {
                None => 0,
                Some(_) => libc::EINTR,
            },
            Err(e) => e,
        };
    }
    if time::clock_now(clock).is_err() {
        return libc::EINVAL;
    }
    // SAFETY: req is the caller's timespec.
    match unsafe { time::duration(req) } {
        Ok(d) => match sleep_until(Instant::now() + d) {
            None => 0,
            Some(left) => {
                write_left(rem, left);
                libc::EINTR
            }
        },
        Err(e) => e,
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn usleep(us: libc::useconds_t) -> i32 {
    if !thread::on_uthread() {
        let f = real!(usleep: unsafe extern "C" fn(libc::useconds_t) -> i32);
        // SAFETY: the C library's usleep.
        return unsafe { f(us) };
    }
    if sleep_until(Instant::now() + Duration::from_micros(us.into())).is_some() {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = libc::EINTR };
        return -1;
    }
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn sleep(s: u32) -> u32 {
    if !thread::on_uthread() {
        let f = real!(sleep: unsafe extern "C" fn(u32) -> u32);
        // SAFETY: the C library's sleep.
        return unsafe { f(s) };
    }
    match sleep_until(Instant::now() + Duration::from_secs(s.into())) {
        None => 0,
        // The seconds left, rounded up, as glibc reports them.
        Some(left) => {
            u32::try_from(left.as_secs() + u64::from(left.subsec_nanos() > 0)).unwrap_or(u32::MAX)
        }
    }
}
