//! The runtime's side of the control socket: send a request (a registration with its
//! descriptors, or anything else) and wait for the one reply.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::control::{MAX_REPLY_LEN, Registration, Reply, Request};

use super::socket::{connect, send_message};

/// Sends `request` with `fds` attached on `socket`, then waits up to `timeout` for one reply.
pub fn request_on(
    socket: BorrowedFd<'_>,
    request: &[u8],
    fds: &[BorrowedFd<'_>],
    timeout: Duration,
) -> io::Result<Reply> {
    send_message(socket, request, fds)?;
    recv_reply(socket, timeout)
}

/// Connects to the control socket at `path`, sends `request` with `fds` attached and waits up
/// to `timeout` for the reply. Returns the connection too: a registered runtime must keep it
/// open for as long as it lives.
pub fn request(
    path: &Path,
    request: &[u8],
    fds: &[BorrowedFd<'_>],
    timeout: Duration,
) -> io::Result<(OwnedFd, Reply)> {
    let socket = connect(path)?;
    let reply = request_on(socket.as_fd(), request, fds, timeout)?;
    Ok((socket, reply))
}

/// Registers a runtime: connects to `path` and sends `registration` with the region's memfd,
/// its one descriptor, attached. Returns the connection and iokerneld's reply; the caller
/// decides what a refusal means.
pub fn register(
    path: &Path,
    registration: Registration,
    region: BorrowedFd<'_>,
    timeout: Duration,
) -> io::Result<(OwnedFd, Reply)> {
    request(
        path,
        &Request::Register(registration).encode(),
        &[region],
        timeout,
    )
}

/// Waits up to `timeout` for one reply on `socket`.
pub fn recv_reply(socket: BorrowedFd<'_>, timeout: Duration) -> io::Result<Reply> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; MAX_REPLY_LEN];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply from iokerneld within {timeout:?}"),
            ));
        }
        let mut pfd = [rustix::event::PollFd::new(
            &socket,
            rustix::event::PollFlags::IN,
        )];
        let timespec = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match rustix::event::poll(&mut pfd, Some(&timespec)) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        match rustix::net::recv(socket, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((0, _)) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "iokerneld closed the connection without a reply",
                ));
            }
            Ok((n, _)) => {
                return Reply::decode(&buf[..n])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
            }
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
