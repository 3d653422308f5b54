//! What every call does at the C boundary: catch panics, turn errors into negative errno
//! values, and say what went wrong on stderr.

use core::ffi::c_int;
use std::io::{self, Write};
use std::panic::{self, AssertUnwindSafe};

/// Returned for a Rust panic caught at the boundary: the runtime's state may be inconsistent.
pub(crate) const PANICKED: c_int = -libc::ENOTRECOVERABLE;

/// Runs `f`, turning a panic into `on_panic`: a panic reaching an `extern "C"` boundary would
/// abort the whole process, where C callers can handle an error code.
pub(crate) fn ffi_guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    // AssertUnwindSafe: after a panic we only hand back an error code. Restoring the runtime's
    // invariants is not possible from here; keeping the unwind out of C is what must hold.
    panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Maps a runtime error to a positive errno value.
pub(crate) fn errno_of(e: &io::Error) -> c_int {
    if let Some(code) = e.raw_os_error() {
        return code;
    }
    // The runtime wraps some OS errors with a message, which keeps the kind but drops the code.
    match e.kind() {
        io::ErrorKind::OutOfMemory => libc::ENOMEM,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::PermissionDenied => libc::EPERM,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        _ => libc::EIO,
    }
}

/// Writes one diagnostic line, ignoring a closed stderr (`eprintln!` would panic on it).
pub(crate) fn report(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "corral: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_errno() {
        assert_eq!(
            errno_of(&io::Error::from_raw_os_error(libc::EAGAIN)),
            libc::EAGAIN
        );
        let wrapped = io::Error::new(io::ErrorKind::OutOfMemory, "cannot map a stack");
        assert_eq!(errno_of(&wrapped), libc::ENOMEM);
        assert_eq!(errno_of(&io::Error::other("x")), libc::EIO);
    }
}
