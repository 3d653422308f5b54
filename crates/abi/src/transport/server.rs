//! iokerneld's side of the control socket: listen, accept, learn who connected, receive
//! bounded messages with their descriptors, reply, and check a registration's descriptors
//! before anything is mapped or written.

use core::fmt;
use std::io::{self, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SocketFlags};

use crate::control::{MAX_REQUEST_LEN, Reply};

use super::socket::{MAX_FDS, address, send_message, socket};
use super::{FdProblem, check_region_fd};

/// Binds a nonblocking listening control socket at `path` (which must not exist) with room
/// for `backlog` pending connections.
pub fn bind_listener(path: &Path, backlog: i32) -> io::Result<OwnedFd> {
    let fd = socket(SocketFlags::NONBLOCK)?;
    rustix::net::bind(&fd, &address(path)?)?;
    rustix::net::listen(&fd, backlog)?;
    Ok(fd)
}

/// Accepts one pending connection, nonblocking; `None` when there is none.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    match rustix::net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The process id of the peer at the time it connected (`SO_PEERCRED`).
pub fn peer_pid(socket: BorrowedFd<'_>) -> io::Result<i32> {
    Ok(rustix::net::sockopt::socket_peercred(socket)?
        .pid
        .as_raw_nonzero()
        .get())
}

/// Sends a reply without blocking: a peer that does not read is not waited for.
pub fn send_reply(socket: BorrowedFd<'_>, reply: &Reply) -> io::Result<()> {
    send_message(socket, &reply.encode(), &[])
}

/// Outcome of reading from a connection.
#[derive(Debug)]
pub enum Received {
    /// One whole message (`len` bytes at the start of [`RecvBuffers::data`]) and its
    /// descriptors, in the order they were attached.
    Message {
        /// Bytes received.
        len: usize,
        /// The descriptors, close-on-exec.
        fds: Vec<OwnedFd>,
    },
    /// The peer closed the connection.
    Closed,
    /// Nothing to read now.
    Nothing,
}

/// Why a message was refused before its contents were looked at.
#[derive(Debug)]
pub enum RecvError {
    /// The message was longer than any valid request.
    TooLong,
    /// More descriptors than a message may carry, or the kernel could not pass them all.
    DescriptorsTruncated,
    /// The receive itself failed.
    Io(io::Error),
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong => write!(
                f,
                "message longer than the largest request ({MAX_REQUEST_LEN} bytes)"
            ),
            Self::DescriptorsTruncated => write!(
                f,
                "descriptors were truncated (more than {MAX_FDS}, or the receiver's limit)"
            ),
            Self::Io(e) => write!(f, "receive failed: {e}"),
        }
    }
}

impl std::error::Error for RecvError {}

/// Reusable buffers for [`recv_message`], sized for the largest request and [`MAX_FDS`]
/// descriptors.
pub struct RecvBuffers {
    data: Vec<u8>,
    control: Vec<MaybeUninit<u8>>,
}

impl Default for RecvBuffers {
    fn default() -> Self {
        Self {
            // One byte spare, so that an over-long message is seen as such even where the kernel
            // does not report MSG_TRUNC.
            data: vec![0; MAX_REQUEST_LEN + 1],
            control: vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))],
        }
    }
}

impl RecvBuffers {
    /// The bytes of the last message received (its length is in [`Received::Message`]).
    pub fn data(&self) -> &[u8] {
        &self.data
    }
}

/// Receives one message without blocking. Descriptors arrive close-on-exec; they are closed
/// again whenever the message is refused.
pub fn recv_message(socket: BorrowedFd<'_>, bufs: &mut RecvBuffers) -> Result<Received, RecvError> {
    let mut control = RecvAncillaryBuffer::new(&mut bufs.control);
    let mut iov = [IoSliceMut::new(&mut bufs.data)];
    let msg = match rustix::net::recvmsg(
        socket,
        &mut iov,
        &mut control,
        RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
    ) {
        Ok(msg) => msg,
        Err(rustix::io::Errno::AGAIN) => return Ok(Received::Nothing),
        Err(e) => return Err(RecvError::Io(e.into())),
    };
    // Collect before any early return, so that every descriptor is owned (and closed on drop).
    let mut fds = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    if msg.flags.contains(ReturnFlags::CTRUNC) {
        return Err(RecvError::DescriptorsTruncated);
    }
    if msg.flags.contains(ReturnFlags::TRUNC) || msg.bytes > MAX_REQUEST_LEN {
        return Err(RecvError::TooLong);
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(Received::Closed);
    }
    Ok(Received::Message {
        len: msg.bytes,
        fds,
    })
}

/// The descriptor of a registration, checked: the region's memfd with its size.
#[derive(Debug)]
pub struct RegistrationFds {
    /// The region: a memfd sealed against shrinking.
    pub region: OwnedFd,
    /// The region's size in bytes, 1 to [`MAX_REGION_LEN`](super::MAX_REGION_LEN).
    pub region_len: usize,
}

/// Why a registration's descriptors were refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistrationFdsError {
    /// The message did not carry exactly one descriptor.
    Count {
        /// Descriptors that came.
        actual: usize,
    },
    /// Descriptor 0, the region.
    Region(FdProblem),
}

impl fmt::Display for RegistrationFdsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Count { actual } => write!(
                f,
                "{actual} descriptors came with the registration, expected 1 (the region)"
            ),
            Self::Region(problem) => write!(f, "descriptor 0 (the region): {problem}"),
        }
    }
}

impl std::error::Error for RegistrationFdsError {}

impl RegistrationFds {
    /// Checks the descriptors that came with a registration: exactly one, a memfd sealed
    /// against shrinking (without the seal the runtime could truncate it under iokerneld's
    /// mapping, and iokerneld's next read would die of SIGBUS) of a sane size. On a refusal
    /// every descriptor is closed.
    pub fn check(fds: Vec<OwnedFd>) -> Result<Self, RegistrationFdsError> {
        let region = match <[OwnedFd; 1]>::try_from(fds) {
            Ok([region]) => region,
            // Dropping the vector `try_from` hands back closes whatever came.
            Err(fds) => return Err(RegistrationFdsError::Count { actual: fds.len() }),
        };
        let region_len = check_region_fd(region.as_fd()).map_err(RegistrationFdsError::Region)?;
        Ok(Self { region, region_len })
    }
}
