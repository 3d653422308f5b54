//! `sched_yield`, `sleep`, `usleep`, `nanosleep` and `clock_nanosleep`: in a uthread they yield
//! or sleep on Corral's timers, leaving the kthread to other uthreads; elsewhere they are the C
//! library's.

use std::time::Duration;

use crate::real::real;
use crate::{thread, time};

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
        Ok(d) => {
            corral::sleep(d);
            if !rem.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe {
                    *rem = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    }
                };
            }
            0
        }
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
            Ok(d) => {
                corral::sleep_until(d);
                0
            }
            Err(e) => e,
        };
    }
    if time::clock_now(clock).is_err() {
        return libc::EINVAL;
    }
    // SAFETY: req is the caller's timespec.
    match unsafe { time::duration(req) } {
        Ok(d) => {
            corral::sleep(d);
            if !rem.is_null() {
                // SAFETY: the caller's out-pointer.
                unsafe {
                    *rem = libc::timespec {
                        tv_sec: 0,
                        tv_nsec: 0,
                    }
                };
            }
            0
        }
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
    corral::sleep(Duration::from_micros(us.into()));
    0
}

#[unsafe(no_mangle)]
pub extern "C" fn sleep(s: u32) -> u32 {
    if !thread::on_uthread() {
        let f = real!(sleep: unsafe extern "C" fn(u32) -> u32);
        // SAFETY: the C library's sleep.
        return unsafe { f(s) };
    }
    corral::sleep(Duration::from_secs(s.into()));
    0
}
