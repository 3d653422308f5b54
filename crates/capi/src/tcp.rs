//! `corral_tcp_listener_t` and `corral_tcp_t`: the runtime's TCP, addressed with
//! `corral_sockaddr` (see `corral_udp_bind`).
//!
//! Calls block the calling uthread, never its kernel thread. A stream may be read by one
//! uthread while another writes to it; closing it while a call on it is in progress is not
//! allowed.

use core::ffi::{c_int, c_void};
use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4};
use std::time::Duration;

use corral::net::{TcpListener, TcpStream};

use super::error::{PANICKED, errno_of, ffi_guard};
use super::memory::{bytes_in, bytes_out, free_boxed, obj, try_box};
use super::udp::CorralSockAddr;

/// Opaque; see `corral_tcp_listener_t`.
pub struct CorralTcpListener {
    listener: TcpListener,
}

/// Opaque; see `corral_tcp_t`.
pub struct CorralTcp {
    stream: TcpStream,
}

/// A listening TCP socket of the runtime (see `corral_tcp_listen`).
pub type TcpListenerT = CorralTcpListener;

/// A TCP connection of the runtime (see `corral_tcp_accept`, `corral_tcp_dial`).
pub type TcpT = CorralTcp;

/// One buffer of a gather write: the same layout as POSIX `struct iovec`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CorralIovec {
    /// Start of the bytes to send; may be NULL only with `len` 0.
    pub base: *const c_void,
    /// Bytes at `base`.
    pub len: usize,
}

/// `corral_tcp_shutdown`: no more reads.
pub const CORRAL_SHUT_RD: c_int = 0;
/// `corral_tcp_shutdown`: no more writes (the peer reads end-of-stream once all is sent).
pub const CORRAL_SHUT_WR: c_int = 1;
/// `corral_tcp_shutdown`: both.
pub const CORRAL_SHUT_RDWR: c_int = 2;

/// The most buffers `corral_tcp_writev` takes, as POSIX's `IOV_MAX`.
pub const CORRAL_IOV_MAX: c_int = 1024;

fn c_addr(a: impl Into<SocketAddr>) -> Result<CorralSockAddr, c_int> {
    match a.into() {
        SocketAddr::V4(a) => Ok(a.into()),
        SocketAddr::V6(_) => Err(-libc::EAFNOSUPPORT),
    }
}

/// Reads a C socket address, or `-EINVAL` for NULL.
///
/// # Safety
/// `addr` is NULL or points to a valid `corral_sockaddr`.
unsafe fn addr_in(addr: *const CorralSockAddr) -> Result<SocketAddrV4, c_int> {
    // SAFETY: null (giving None) or valid per the caller's contract; copied out at once.
    unsafe { addr.as_ref() }
        .map(|a| SocketAddrV4::from(*a))
        .ok_or(-libc::EINVAL)
}

/// Writes `value` to `out` unless it is NULL.
///
/// # Safety
/// `out` is NULL or writable.
unsafe fn store<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null and writable per the caller's contract.
        unsafe { out.write(value) };
    }
}

/// Boxes `value` into `*out`: 0, or `-ENOMEM`.
///
/// # Safety
/// `out` is non-null and writable.
unsafe fn box_into<T>(value: T, out: *mut *mut T) -> c_int {
    let p = try_box(value);
    if p.is_null() {
        return -libc::ENOMEM;
    }
    // SAFETY: per the caller's contract.
    unsafe { out.write(p) };
    0
}

fn len_or_errno(r: io::Result<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => -(errno_of(&e) as isize),
    }
}

fn zero_or_errno(r: io::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => -errno_of(&e),
    }
}

fn timeout(ns: u64) -> Option<Duration> {
    (ns != 0).then(|| Duration::from_nanos(ns))
}

/// Listens for TCP connections on `local` (`ip` 0 or the runtime's address; `port` 0 for an
/// ephemeral port) and stores the listener in `*out`. Call from a uthread of a runtime whose
/// network is configured (see `corral_run`).
///
/// Returns 0, or `-EINVAL` (a NULL pointer), `-EADDRINUSE`, `-EADDRNOTAVAIL` (another
/// address), `-ENETDOWN` (no network configured, or not called from a uthread), `-ENOMEM`,
/// `-ENOTRECOVERABLE`.
///
/// # Safety
/// `local` points to a valid `corral_sockaddr`; `out` points to writable memory for one
/// pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_listen(
    local: *const CorralSockAddr,
    out: *mut *mut TcpListenerT,
) -> c_int {
    ffi_guard(PANICKED, || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: valid per this function's contract.
        let local = match unsafe { addr_in(local) } {
            Ok(a) => a,
            Err(e) => return e,
        };
        match TcpListener::bind(local) {
            // SAFETY: `out` is non-null (checked) and writable per the contract.
            Ok(listener) => unsafe { box_into(CorralTcpListener { listener }, out) },
            Err(e) => -errno_of(&e),
        }
    })
}

/// Waits for the next connection on `listener`, stores it in `*out` and, if `peer` is not
/// NULL, the peer's address in `*peer`. Blocks the uthread until a connection is established.
///
/// Returns 0, or `-EINVAL`, `-ENOMEM`, `-ENOTRECOVERABLE`.
///
/// # Safety
/// `listener` is a live listener; `out` is writable; `peer` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_accept(
    listener: *mut TcpListenerT,
    out: *mut *mut TcpT,
    peer: *mut CorralSockAddr,
) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live listener per this function's contract.
        let Some(l) = (unsafe { obj(listener) }) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        let (stream, from) = match l.listener.accept() {
            Ok(accepted) => accepted,
            Err(e) => return -errno_of(&e),
        };
        let from = match c_addr(from) {
            Ok(a) => a,
            Err(e) => return e,
        };
        // SAFETY: `peer` is NULL or writable per the contract.
        unsafe { store(peer, from) };
        // SAFETY: `out` is non-null (checked) and writable per the contract.
        unsafe { box_into(CorralTcp { stream }, out) }
    })
}

/// Stores the listener's address (with the port chosen for port 0) in `*out`.
/// Returns 0 or `-EINVAL`.
///
/// # Safety
/// `listener` is a live listener; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_listener_local_addr(
    listener: *mut TcpListenerT,
    out: *mut CorralSockAddr,
) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live listener per this function's contract.
        let Some(l) = (unsafe { obj(listener) }) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        match l
            .listener
            .local_addr()
            .map_err(|e| -errno_of(&e))
            .and_then(c_addr)
        {
            // SAFETY: non-null and writable per the contract.
            Ok(a) => unsafe {
                out.write(a);
                0
            },
            Err(e) => e,
        }
    })
}

/// Stops listening and frees the listener; connections it accepted stay open. No other call
/// on it may be in progress or follow. Does nothing for NULL.
///
/// # Safety
/// `listener` is NULL or a listener from `corral_tcp_listen` not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_listener_close(listener: *mut TcpListenerT) {
    ffi_guard((), || {
        if !listener.is_null() {
            // SAFETY: from corral_tcp_listen (try_box), closed once per the contract.
            unsafe { free_boxed(listener) };
        }
    });
}

/// Connects to `remote` and stores the connection in `*out`. Blocks the uthread until the
/// connection is established, refused, or `timeout_ns` nanoseconds have passed (0: the
/// runtime's own limit on connection attempts).
///
/// Returns 0, or `-EINVAL`, `-ECONNREFUSED` (the peer answered with a reset), `-ETIMEDOUT`,
/// `-ENETUNREACH` (outside the subnet with no gateway), `-EADDRNOTAVAIL` (no local port
/// left), `-ENETDOWN` (no network configured, or not called from a uthread), `-ENOMEM`,
/// `-ENOTRECOVERABLE`.
///
/// # Safety
/// `remote` points to a valid `corral_sockaddr`; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_dial(
    remote: *const CorralSockAddr,
    timeout_ns: u64,
    out: *mut *mut TcpT,
) -> c_int {
    ffi_guard(PANICKED, || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: valid per this function's contract.
        let remote = match unsafe { addr_in(remote) } {
            Ok(a) => a,
            Err(e) => return e,
        };
        let stream = match timeout(timeout_ns) {
            None => TcpStream::connect(remote),
            Some(t) => TcpStream::connect_timeout(&SocketAddr::V4(remote), t),
        };
        match stream {
            // SAFETY: `out` is non-null (checked) and writable per the contract.
            Ok(stream) => unsafe { box_into(CorralTcp { stream }, out) },
            Err(e) => -errno_of(&e),
        }
    })
}

/// Reads at most `len` bytes into `buf`. Blocks the uthread until some bytes have arrived, the
/// peer has closed its side, or the read timeout passes. Returns the bytes read, 0 at the end of
/// the stream, or `-EAGAIN` (timed out), `-ECONNRESET`, `-EINVAL`, `-ENOTRECOVERABLE`.
///
/// # Safety
/// `tcp` is a live connection; `buf` points to `len` writable bytes (or `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_read(tcp: *mut TcpT, buf: *mut c_void, len: usize) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: `tcp` is live and `buf` holds `len` writable bytes that nothing else touches
        // until the call returns, per this function's contract.
        let (Some(t), Some(data)) = (unsafe { obj(tcp) }, unsafe { bytes_out(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno((&t.stream).read(data))
    })
}

/// Queues at most `len` bytes from `buf` for sending. Blocks the uthread while the send buffer
/// is full (until the write timeout passes). Returns the bytes queued (at least 1 when `len` is
/// not 0), or `-EAGAIN` (timed out), `-EPIPE` (writes were shut down), `-ECONNRESET`,
/// `-EINVAL`, `-ENOTRECOVERABLE`.
///
/// # Safety
/// `tcp` is a live connection; `buf` points to `len` readable bytes (or `len` is 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_write(tcp: *mut TcpT, buf: *const c_void, len: usize) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: `tcp` is live and `buf` holds `len` readable bytes, per the contract.
        let (Some(t), Some(data)) = (unsafe { obj(tcp) }, unsafe { bytes_in(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno((&t.stream).write(data))
    })
}

/// `corral_tcp_write` of the `iovcnt` buffers in `iov`, in order, as one scatter-gather send:
/// the bytes are copied from each buffer straight into the send buffer. Returns the bytes
/// queued, which may stop short inside any buffer, or the errors of `corral_tcp_write`
/// (`-EINVAL` also for `iovcnt` negative or above `CORRAL_IOV_MAX`).
///
/// # Safety
/// `tcp` is a live connection; `iov` points to `iovcnt` valid `corral_iovec`s (or `iovcnt` is
/// 0), each naming `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_writev(
    tcp: *mut TcpT,
    iov: *const CorralIovec,
    iovcnt: c_int,
) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -(libc::EINVAL as isize);
        };
        if !(0..=CORRAL_IOV_MAX).contains(&iovcnt) || (iov.is_null() && iovcnt != 0) {
            return -(libc::EINVAL as isize);
        }
        let vecs: &[CorralIovec] = if iovcnt == 0 {
            &[]
        } else {
            // SAFETY: `iov` is non-null and points to `iovcnt` valid entries per the contract.
            unsafe { core::slice::from_raw_parts(iov, iovcnt as usize) }
        };
        let mut slices = Vec::with_capacity(vecs.len());
        for v in vecs {
            // SAFETY: each entry names `len` readable bytes per the contract.
            let Some(bytes) = (unsafe { bytes_in(v.base, v.len) }) else {
                return -(libc::EINVAL as isize);
            };
            slices.push(IoSlice::new(bytes));
        }
        len_or_errno((&t.stream).write_vectored(&slices))
    })
}

/// Shuts down reading (`CORRAL_SHUT_RD`), writing (`CORRAL_SHUT_WR`: the peer reads the end of
/// the stream once everything queued is sent) or both (`CORRAL_SHUT_RDWR`). Returns 0, or
/// `-EINVAL`, `-ENOTCONN`.
///
/// # Safety
/// `tcp` is a live connection.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_shutdown(tcp: *mut TcpT, how: c_int) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -libc::EINVAL;
        };
        let how = match how {
            CORRAL_SHUT_RD => Shutdown::Read,
            CORRAL_SHUT_WR => Shutdown::Write,
            CORRAL_SHUT_RDWR => Shutdown::Both,
            _ => return -libc::EINVAL,
        };
        zero_or_errno(t.stream.shutdown(how))
    })
}

/// Closes the connection and frees it: what was written is still sent and the connection
/// closes in the background, as `close(2)` does. No other call on it may be in progress or
/// follow. Does nothing for NULL.
///
/// # Safety
/// `tcp` is NULL or a connection from `corral_tcp_accept` or `corral_tcp_dial` not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_close(tcp: *mut TcpT) {
    ffi_guard((), || {
        if !tcp.is_null() {
            // SAFETY: from try_box, closed once per the contract.
            unsafe { free_boxed(tcp) };
        }
    });
}

/// Stores the connection's local address in `*out`. Returns 0 or `-EINVAL`.
///
/// # Safety
/// `tcp` is a live connection; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_local_addr(tcp: *mut TcpT, out: *mut CorralSockAddr) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        match t
            .stream
            .local_addr()
            .map_err(|e| -errno_of(&e))
            .and_then(c_addr)
        {
            // SAFETY: non-null and writable per the contract.
            Ok(a) => unsafe {
                out.write(a);
                0
            },
            Err(e) => e,
        }
    })
}

/// Stores the connection's peer address in `*out`. Returns 0 or `-EINVAL`.
///
/// # Safety
/// `tcp` is a live connection; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_peer_addr(tcp: *mut TcpT, out: *mut CorralSockAddr) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        match t
            .stream
            .peer_addr()
            .map_err(|e| -errno_of(&e))
            .and_then(c_addr)
        {
            // SAFETY: non-null and writable per the contract.
            Ok(a) => unsafe {
                out.write(a);
                0
            },
            Err(e) => e,
        }
    })
}

/// Nonzero `on` sends small writes at once instead of coalescing them while data is unacknowledged
/// (Nagle's algorithm, on by default). Returns 0 or `-EINVAL`.
///
/// # Safety
/// `tcp` is a live connection.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_set_nodelay(tcp: *mut TcpT, on: c_int) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -libc::EINVAL;
        };
        zero_or_errno(t.stream.set_nodelay(on != 0))
    })
}

/// Makes reads give up with `-EAGAIN` after `timeout_ns` nanoseconds; 0 waits forever.
/// Returns 0 or `-EINVAL`.
///
/// # Safety
/// `tcp` is a live connection.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_set_read_timeout(tcp: *mut TcpT, timeout_ns: u64) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -libc::EINVAL;
        };
        zero_or_errno(t.stream.set_read_timeout(timeout(timeout_ns)))
    })
}

/// Makes writes give up with `-EAGAIN` after `timeout_ns` nanoseconds with the send buffer
/// full; 0 waits forever. Returns 0 or `-EINVAL`.
///
/// # Safety
/// `tcp` is a live connection.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_tcp_set_write_timeout(tcp: *mut TcpT, timeout_ns: u64) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: a live connection per the contract.
        let Some(t) = (unsafe { obj(tcp) }) else {
            return -libc::EINVAL;
        };
        zero_or_errno(t.stream.set_write_timeout(timeout(timeout_ns)))
    })
}
