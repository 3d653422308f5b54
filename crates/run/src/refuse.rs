//! What the shim cannot support, refused with a message naming it and exit status
//! [`REFUSED_STATUS`] rather than a hang or silent corruption:
//!
//! - `fork` while the program has other threads: the child would have one OS thread and none of
//!   the kthreads that ran them (single-threaded programs may fork; the child should only
//!   `exec` or `_exit`, POSIX's rule for multi-threaded processes);
//! - threads started by OpenMP's libgomp, which synchronizes with raw `futex` system calls that
//!   would block kthreads instead of uthreads;
//! - `pthread_cancel`, which needs glibc's cancellation machinery in its own threads.

use core::ffi::CStr;

use crate::real::real;
use crate::thread;

/// Exit status of a program stopped for using something the shim cannot support (EX_SOFTWARE).
pub const REFUSED_STATUS: i32 = 70;

/// Prints `corral-run: MESSAGE` and ends the process with [`REFUSED_STATUS`].
pub fn fatal(message: &str) -> ! {
    let line = format!("corral-run: {message}\n");
    // SAFETY: writes our own buffer to stderr; _exit ends the process without running code of
    // a program in a state it does not expect.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
        libc::_exit(REFUSED_STATUS)
    }
}

fn refuse(construct: &str, why: &str) -> ! {
    fatal(&format!(
        "{construct} is not supported under corral-run: {why}"
    ))
}

/// Refuses threads whose start routine is in libgomp.
pub fn check_thread_start(start: usize) {
    let mut info: libc::Dl_info = unsafe_zeroed_dl_info();
    // SAFETY: dladdr only reads the address and fills info.
    if unsafe { libc::dladdr(start as *const _, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr returned a NUL-terminated file name.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    if file.contains("libgomp") {
        refuse(
            "OpenMP (libgomp)",
            "its threads synchronize with raw futex system calls, which would block kthreads",
        );
    }
}

fn unsafe_zeroed_dl_info() -> libc::Dl_info {
    libc::Dl_info {
        dli_fname: core::ptr::null(),
        dli_fbase: core::ptr::null_mut(),
        dli_sname: core::ptr::null(),
        dli_saddr: core::ptr::null_mut(),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn fork() -> libc::pid_t {
    let others = thread::live_threads();
    if others > 0 {
        refuse(
            "fork() with other threads running",
            &format!(
                "{others} thread(s) would be lost in the child, which has no kthreads to run them"
            ),
        );
    }
    let f = real!(fork: unsafe extern "C" fn() -> libc::pid_t);
    // SAFETY: the C library's fork.
    unsafe { f() }
}

#[unsafe(no_mangle)]
pub extern "C" fn pthread_cancel(_t: libc::pthread_t) -> i32 {
    refuse(
        "pthread_cancel",
        "uthreads have no cancellation points or asynchronous cancellation",
    )
}
