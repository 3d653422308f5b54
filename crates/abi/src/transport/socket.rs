//! The control socket itself: a unix `SOCK_SEQPACKET` socket, so that every message arrives
//! whole or not at all, with descriptors travelling as `SCM_RIGHTS`.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::net::{
    AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};

/// Most descriptors one message may carry (the kernel's `SCM_MAX_FD`). A registration carries
/// one, but iokerneld receives as many as the kernel can pass, so that a message with too many
/// is refused by its count rather than cut short.
pub const MAX_FDS: usize = 253;

/// A fresh control socket, close-on-exec, with the extra `flags` (nonblocking for iokerneld).
pub(super) fn socket(flags: SocketFlags) -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | flags,
        None,
    )?)
}

/// The address of the socket file at `path`; the error names the path when it is too long
/// for a unix socket address.
pub(super) fn address(path: &Path) -> io::Result<SocketAddrUnix> {
    SocketAddrUnix::new(path).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a usable unix socket path: {e}", path.display()),
        )
    })
}

/// Connects a blocking client socket to the control socket at `path`.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = socket(SocketFlags::empty())?;
    rustix::net::connect(&fd, &address(path)?)?;
    Ok(fd)
}

/// Sends one message with `fds` attached, without blocking and without raising SIGPIPE. On a
/// `SOCK_SEQPACKET` socket the message goes whole or fails.
pub fn send_message(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} descriptors for one message: at most {MAX_FDS}",
                fds.len()
            ),
        ));
    }
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the descriptors do not fit the control buffer",
        ));
    }
    let sent = rustix::net::sendmsg(
        socket,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?;
    if sent != bytes.len() {
        return Err(io::Error::other(format!(
            "message sent in part: {sent} of {} bytes",
            bytes.len()
        )));
    }
    Ok(())
}
