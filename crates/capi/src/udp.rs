//! `corral_udp_t`: the runtime's UDP sockets, addressed with `corral_sockaddr`.

use core::ffi::{c_int, c_void};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use corral::net::UdpSocket;

use super::error::{PANICKED, errno_of, ffi_guard};
use super::memory::{bytes_in, bytes_out, free_boxed, obj, try_box};

/// An IPv4 socket address.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CorralSockAddr {
    /// IPv4 address in host byte order: 10.0.0.2 is `0x0a000002`. 0 is "any" in
    /// `corral_udp_bind`.
    pub ip: u32,
    /// Port in host byte order; 0 in `corral_udp_bind` picks a free ephemeral port.
    pub port: u16,
}

impl From<CorralSockAddr> for SocketAddrV4 {
    fn from(a: CorralSockAddr) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(a.ip), a.port)
    }
}

impl From<SocketAddrV4> for CorralSockAddr {
    fn from(a: SocketAddrV4) -> CorralSockAddr {
        CorralSockAddr {
            ip: u32::from(*a.ip()),
            port: a.port(),
        }
    }
}

/// Opaque; see `corral_udp_t`.
pub struct CorralUdp {
    socket: UdpSocket,
}

/// A UDP socket of the runtime (see `corral_udp_bind`).
pub type UdpT = CorralUdp;

/// Reads a C socket address, or `-EINVAL` for NULL.
///
/// # Safety
/// `addr` is NULL or points to a valid `corral_sockaddr`.
unsafe fn addr_in(addr: *const CorralSockAddr) -> Result<SocketAddrV4, c_int> {
    // SAFETY: `addr` is null (giving None) or points to a valid `corral_sockaddr`, as the caller
    // promised; it is copied out before returning.
    unsafe { addr.as_ref() }
        .map(|a| SocketAddrV4::from(*a))
        .ok_or(-libc::EINVAL)
}

/// Turns a byte count or an error into the `ssize_t`-style result of the UDP calls.
fn len_or_errno(r: io::Result<usize>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => -(errno_of(&e) as isize),
    }
}

/// Opens a UDP socket bound to `local` (`ip` 0 or the runtime's address; `port` 0 for an
/// ephemeral port) and stores it in `*out`. Call from a uthread of a runtime whose network is
/// configured (see `corral_run`).
///
/// Returns 0, or `-EINVAL` (a NULL pointer), `-EADDRINUSE`, `-EADDRNOTAVAIL` (another
/// address), `-ENETDOWN` (no network configured, or not called from a uthread),
/// `-ENOTRECOVERABLE`.
///
/// # Safety
/// `local` points to a valid `corral_sockaddr`; `out` points to writable memory for one
/// pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_bind(
    local: *const CorralSockAddr,
    out: *mut *mut UdpT,
) -> c_int {
    ffi_guard(PANICKED, || {
        if out.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: `local` points to a valid address per this function's contract.
        let local = match unsafe { addr_in(local) } {
            Ok(a) => a,
            Err(e) => return e,
        };
        let socket = match UdpSocket::bind(local) {
            Ok(s) => s,
            Err(e) => return -errno_of(&e),
        };
        let p = try_box(CorralUdp { socket });
        if p.is_null() {
            return -libc::ENOMEM;
        }
        // SAFETY: `out` is not null (checked on entry) and writable per this function's contract.
        unsafe { out.write(p) };
        0
    })
}

/// Sets the only peer `corral_udp_send` sends to and `corral_udp_recv` receives from.
/// Returns 0, or `-EINVAL` (NULL, port 0 or address 0).
///
/// # Safety
/// `udp` is a live socket; `peer` points to a valid `corral_sockaddr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_connect(udp: *mut UdpT, peer: *const CorralSockAddr) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: `udp` is a live socket and `peer` a valid address per this function's contract.
        let (Some(u), Ok(peer)) = (unsafe { obj(udp) }, unsafe { addr_in(peer) }) else {
            return -libc::EINVAL;
        };
        match u.socket.connect(peer) {
            Ok(()) => 0,
            Err(e) => -errno_of(&e),
        }
    })
}

/// Sends `len` bytes from `buf` as one datagram to `dst`. Blocks the uthread while no
/// transmit buffer is free. Returns `len`, or `-EINVAL`, `-EMSGSIZE` (larger than one frame:
/// 1472 bytes), `-ENETUNREACH` (outside the subnet with no gateway), `-ENOTRECOVERABLE`.
///
/// # Safety
/// `udp` is a live socket; `buf` points to `len` readable bytes (or `len` is 0); `dst` points
/// to a valid `corral_sockaddr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_send_to(
    udp: *mut UdpT,
    buf: *const c_void,
    len: usize,
    dst: *const CorralSockAddr,
) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: `udp` is a live socket and `dst` a valid address per this function's contract.
        let (Some(u), Ok(dst)) = (unsafe { obj(udp) }, unsafe { addr_in(dst) }) else {
            return -(libc::EINVAL as isize);
        };
        // SAFETY: `buf` points to `len` readable bytes (or `len` is 0) per this function's
        // contract, and C leaves them alone until the call returns.
        let Some(data) = (unsafe { bytes_in(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno(u.socket.send_to(data, dst))
    })
}

/// `corral_udp_send_to` the connected peer; `-EDESTADDRREQ` if not connected.
///
/// # Safety
/// As for `corral_udp_send_to`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_send(udp: *mut UdpT, buf: *const c_void, len: usize) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: as in corral_udp_send_to, whose contract this function shares.
        let (Some(u), Some(data)) = (unsafe { obj(udp) }, unsafe { bytes_in(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno(u.socket.send(data))
    })
}

/// Receives one datagram into `buf` (the excess of a longer one is discarded) and, if `src`
/// is not NULL, stores its source there. Blocks the uthread until a datagram arrives or the
/// read timeout passes. Returns the bytes copied, or `-EAGAIN` (timed out), `-EINVAL`,
/// `-ENOTRECOVERABLE`.
///
/// # Safety
/// `udp` is a live socket; `buf` points to `len` writable bytes (or `len` is 0); `src` is NULL
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_recv_from(
    udp: *mut UdpT,
    buf: *mut c_void,
    len: usize,
    src: *mut CorralSockAddr,
) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: `udp` is a live socket and `buf` points to `len` writable bytes (or `len` is
        // 0) that nothing else touches until the call returns, per this function's contract.
        let (Some(u), Some(data)) = (unsafe { obj(udp) }, unsafe { bytes_out(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        match u.socket.recv_from(data) {
            Ok((n, from)) => {
                if !src.is_null() {
                    // SAFETY: non-null and writable per the contract.
                    unsafe { src.write(from.into()) };
                }
                n as isize
            }
            Err(e) => -(errno_of(&e) as isize),
        }
    })
}

/// `corral_udp_recv_from` the connected peer; `-ENOTCONN` if not connected.
///
/// # Safety
/// As for `corral_udp_recv_from`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_recv(udp: *mut UdpT, buf: *mut c_void, len: usize) -> isize {
    ffi_guard(PANICKED as isize, || {
        // SAFETY: as in corral_udp_recv_from, whose contract this function shares.
        let (Some(u), Some(data)) = (unsafe { obj(udp) }, unsafe { bytes_out(buf, len) }) else {
            return -(libc::EINVAL as isize);
        };
        len_or_errno(u.socket.recv(data))
    })
}

/// Makes receives give up with `-EAGAIN` after `timeout_ns` nanoseconds; 0 waits forever.
/// Returns 0 or `-EINVAL`.
///
/// # Safety
/// `udp` is a live socket.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_set_read_timeout(udp: *mut UdpT, timeout_ns: u64) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: `udp` is a live socket per this function's contract.
        let Some(u) = (unsafe { obj(udp) }) else {
            return -libc::EINVAL;
        };
        let t = (timeout_ns != 0).then(|| Duration::from_nanos(timeout_ns));
        match u.socket.set_read_timeout(t) {
            Ok(()) => 0,
            Err(e) => -errno_of(&e),
        }
    })
}

/// Stores the socket's bound address (with the port chosen for port 0) in `*out`.
/// Returns 0 or `-EINVAL`.
///
/// # Safety
/// `udp` is a live socket; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_local_addr(udp: *mut UdpT, out: *mut CorralSockAddr) -> c_int {
    ffi_guard(PANICKED, || {
        // SAFETY: `udp` is a live socket per this function's contract.
        let Some(u) = (unsafe { obj(udp) }) else {
            return -libc::EINVAL;
        };
        if out.is_null() {
            return -libc::EINVAL;
        }
        match u.socket.local_addr() {
            // SAFETY: non-null and writable per the contract.
            Ok(a) => unsafe {
                out.write(a.into());
                0
            },
            Err(e) => -errno_of(&e),
        }
    })
}

/// Closes the socket and frees it; its port is free again at once. No other call on it may
/// be in progress or follow. Does nothing for NULL.
///
/// # Safety
/// `udp` is NULL or a socket from `corral_udp_bind` not yet closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn corral_udp_close(udp: *mut UdpT) {
    ffi_guard((), || {
        if !udp.is_null() {
            // SAFETY: from corral_udp_bind (try_box), closed once per the contract.
            unsafe { free_boxed(udp) };
        }
    });
}

#[cfg(test)]
mod tests {
    use core::ptr;

    use corral::net::NetConfig;
    use corral::{Config, Runtime};

    use super::*;

    #[test]
    fn udp_needs_a_network() {
        let mut out = ptr::null_mut();
        let any = CorralSockAddr::default();
        // SAFETY: `any` is a valid address and `out` a writable pointer, both live for the call.
        let rc = unsafe { corral_udp_bind(&any, &mut out) };
        assert_eq!(rc, -libc::ENETDOWN);
        // SAFETY: corral_udp_bind checks `local` for NULL (via addr_in) before reading it, and
        // `out` is writable.
        let rc = unsafe { corral_udp_bind(ptr::null(), &mut out) };
        assert_eq!(rc, -libc::EINVAL);
        // SAFETY: corral_udp_send checks `udp` for NULL (via obj) before using it, and reads no
        // bytes for a length of 0.
        let rc = unsafe { corral_udp_send(ptr::null_mut(), ptr::null(), 0) };
        assert_eq!(rc, -(libc::EINVAL as isize));
        // SAFETY: NULL is documented as allowed, and ignored.
        unsafe { corral_udp_close(ptr::null_mut()) };
    }

    #[test]
    fn udp_round_trip_through_the_c_calls() {
        let ip = Ipv4Addr::new(10, 77, 0, 2);
        let cfg = Config::default().kthreads(1).net(NetConfig::new(ip, 24));
        let rt = Runtime::new(cfg).unwrap();
        rt.block_on(move || {
            let ip = u32::from(ip);
            let mut server = ptr::null_mut();
            let mut client = ptr::null_mut();
            let server_addr = CorralSockAddr { ip, port: 5353 };
            let mut client_addr = CorralSockAddr::default();
            let mut buf = [0u8; 32];
            let mut from = CorralSockAddr::default();
            // SAFETY: every pointer is valid for the call; sockets are closed once at the end.
            unsafe {
                assert_eq!(corral_udp_bind(&server_addr, &mut server), 0);
                assert_eq!(
                    corral_udp_bind(&server_addr, &mut client),
                    -libc::EADDRINUSE
                );
                let any = CorralSockAddr { ip: 0, port: 0 };
                assert_eq!(corral_udp_bind(&any, &mut client), 0);
                assert_eq!(corral_udp_local_addr(client, &mut client_addr), 0);
                assert!(client_addr.port >= 49152);
                assert_eq!(
                    corral_udp_send(client, b"x".as_ptr().cast(), 1),
                    -(libc::EDESTADDRREQ as isize)
                );
                assert_eq!(corral_udp_connect(client, &server_addr), 0);
                assert_eq!(corral_udp_send(client, b"ping".as_ptr().cast(), 4), 4);
                let n = corral_udp_recv_from(server, buf.as_mut_ptr().cast(), buf.len(), &mut from);
                assert_eq!(n, 4);
                assert_eq!(&buf[..4], b"ping");
                assert_eq!(
                    from,
                    CorralSockAddr {
                        ip,
                        port: client_addr.port
                    }
                );
                assert_eq!(
                    corral_udp_send_to(server, b"pong".as_ptr().cast(), 4, &from),
                    4
                );
                assert_eq!(
                    corral_udp_recv(client, buf.as_mut_ptr().cast(), buf.len()),
                    4
                );
                assert_eq!(&buf[..4], b"pong");
                let big = vec![0u8; 1473];
                assert_eq!(
                    corral_udp_send(client, big.as_ptr().cast(), big.len()),
                    -(libc::EMSGSIZE as isize)
                );
                assert_eq!(corral_udp_set_read_timeout(server, 1_000_000), 0);
                assert_eq!(
                    corral_udp_recv(server, buf.as_mut_ptr().cast(), buf.len()),
                    -(libc::ENOTCONN as isize)
                );
                assert_eq!(
                    corral_udp_recv_from(
                        server,
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        ptr::null_mut()
                    ),
                    -(libc::EAGAIN as isize)
                );
                corral_udp_close(client);
                corral_udp_close(server);
            }
        });
        assert_eq!(rt.net_stats().unwrap().udp_rx_datagrams, 2);
    }
}
