//! An AF_PACKET socket on one device, for tests that put frames on a wire or watch it.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// An AF_PACKET socket on one device: whole Ethernet frames in both directions.
pub struct PacketSocket {
    fd: OwnedFd,
}

impl PacketSocket {
    /// Bound to `dev`: receiving every frame (outgoing ones included), with receives timing
    /// out after `timeout`, if `receive`; else only sending, past the device's queueing
    /// discipline (whose queue would also hold the host's own segments).
    pub fn bind(dev: &str, receive: bool, timeout: Duration) -> PacketSocket {
        let name = std::ffi::CString::new(dev).unwrap();
        // SAFETY: `name` is NUL-terminated and outlives the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        assert!(ifindex > 0, "no interface {dev}");
        let all = if receive {
            (libc::ETH_P_ALL as u16).to_be()
        } else {
            0
        };
        // SAFETY: plain socket creation; the result is checked and owned below.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(all)) };
        assert!(raw >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
        // SAFETY: `raw` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain data; all-zero is valid before the fields are set.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = all;
        addr.sll_ifindex = ifindex;
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: `addr` is valid for the call and its size is passed.
        let bound = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(bound, 0, "bind: {}", std::io::Error::last_os_error());
        let socket = PacketSocket { fd };
        socket.set(libc::SOL_SOCKET, libc::SO_RCVTIMEO, &tv);
        socket.set(
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            &libc::c_int::from(!receive),
        );
        socket
    }

    fn set<T>(&self, level: libc::c_int, name: libc::c_int, value: &T) {
        // SAFETY: `value` is valid for reads of its size, which is passed.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                (value as *const T).cast(),
                size_of::<T>() as u32,
            )
        };
        assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
    }

    /// The next frame, or `None` after the timeout.
    pub fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        (n > 0).then_some(n as usize)
    }

    /// Sends every frame of `frames` with one `sendmmsg`; returns how many went.
    pub fn send_all(&self, frames: &mut [Vec<u8>]) -> usize {
        let mut iov: Vec<libc::iovec> = frames
            .iter_mut()
            .map(|f| libc::iovec {
                iov_base: f.as_mut_ptr().cast(),
                iov_len: f.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .map(|v| {
                // SAFETY: mmsghdr is plain data; all-zero is valid before the fields are set.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: every header points at one iovec over a live frame, all outliving the call.
        let n =
            unsafe { libc::sendmmsg(self.fd.as_raw_fd(), msgs.as_mut_ptr(), msgs.len() as u32, 0) };
        n.max(0) as usize
    }
}
