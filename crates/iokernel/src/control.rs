//! The control socket's plumbing: a nonblocking `SOCK_SEQPACKET` listener, messages with
//! descriptors attached (`SCM_RIGHTS`), and the checks on what a runtime sends before any of it
//! is used. Message contents are corral-abi's [`control`](corral_abi::control) format.

use std::io;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use corral_abi::control::{MAX_REPLY_LEN, MAX_REQUEST_LEN, Reply};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

/// Most descriptors one message may carry (the kernel's `SCM_MAX_FD`).
pub const MAX_FDS: usize = 253;

/// Largest region iokerneld maps (64 GiB): far above any real runtime, and it keeps a bogus
/// size from exhausting iokerneld's address space.
pub const MAX_REGION_LEN: u64 = 64 << 30;

/// Creates the listening socket at `path`: its parent directory is created, and a stale socket
/// file left by a previous run is replaced.
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another iokerneld is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&fd, &SocketAddrUnix::new(path)?)?;
    rustix::net::listen(&fd, 128)?;
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

/// Connects a blocking client socket to `path`.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::connect(&fd, &SocketAddrUnix::new(path)?)?;
    Ok(fd)
}

/// The process id of the peer at the time it connected.
pub fn peer_pid(socket: BorrowedFd<'_>) -> io::Result<i32> {
    Ok(rustix::net::sockopt::socket_peercred(socket)?
        .pid
        .as_raw_nonzero()
        .get())
}

/// Outcome of reading from a connection.
#[derive(Debug)]
pub enum Received {
    /// One whole message (`len` bytes at the start of the buffer) and its descriptors.
    Message { len: usize, fds: Vec<OwnedFd> },
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
    Io(io::Error),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
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

/// Sends one message with `fds` attached, without raising SIGPIPE.
pub fn send_message(
    socket: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one message",
        ));
    }
    let sent = rustix::net::sendmsg(
        socket,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
    )?;
    if sent != bytes.len() {
        return Err(io::Error::other("message sent in part"));
    }
    Ok(())
}

/// Sends a reply; the connection is nonblocking, so a peer that does not read is not waited
/// for.
pub fn send_reply(socket: BorrowedFd<'_>, reply: &Reply) -> io::Result<()> {
    send_message(socket, &reply.encode(), &[])
}

/// Client side: sends `request` with `fds` attached on `socket`, then waits up to `timeout` for
/// one reply.
pub fn request_on(
    socket: BorrowedFd<'_>,
    request: &[u8],
    fds: &[BorrowedFd<'_>],
    timeout: Duration,
) -> io::Result<Reply> {
    send_message(socket, request, fds)?;
    recv_reply(socket, timeout)
}

/// Client side: waits up to `timeout` for one reply on `socket`.
pub fn recv_reply(socket: BorrowedFd<'_>, timeout: Duration) -> io::Result<Reply> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; MAX_REPLY_LEN];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no reply from iokerneld",
            ));
        }
        let mut pfd = [rustix::event::PollFd::new(
            &socket,
            rustix::event::PollFlags::IN,
        )];
        let timespec = rustix::time::Timespec {
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

/// What the descriptor at `/proc/self/fd/N` points to, as `readlink` shows it.
pub fn describe_fd(fd: BorrowedFd<'_>) -> io::Result<String> {
    use std::os::fd::AsRawFd;
    let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    Ok(target.to_string_lossy().into_owned())
}

/// Checks that `fd` is an eventfd and makes it nonblocking, so that a runtime that fills its
/// counter cannot make iokerneld's write block.
pub fn check_eventfd(fd: BorrowedFd<'_>) -> Result<(), String> {
    let what = describe_fd(fd).map_err(|e| format!("cannot inspect it: {e}"))?;
    if what != "anon_inode:[eventfd]" {
        return Err(format!("it is not an eventfd but {what}"));
    }
    crate::sys::set_nonblocking(fd).map_err(|e| format!("cannot make it nonblocking: {e}"))
}

/// Checks that `fd` is a memfd sealed against shrinking and returns its size. Without the seal
/// the runtime could truncate the file under iokerneld's mapping, and iokerneld's next read
/// would die of SIGBUS.
pub fn check_region_fd(fd: BorrowedFd<'_>) -> Result<usize, String> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| {
        let what = describe_fd(fd).unwrap_or_else(|_| "unknown".into());
        format!("it is not a memfd that supports sealing ({what}: {e})")
    })?;
    if !seals.contains(rustix::fs::SealFlags::SHRINK) {
        return Err("the memfd is not sealed against shrinking (F_SEAL_SHRINK)".into());
    }
    let size = rustix::fs::fstat(fd)
        .map_err(|e| format!("fstat failed: {e}"))?
        .st_size;
    let size = u64::try_from(size).unwrap_or(0);
    if size == 0 {
        return Err("the memfd is empty".into());
    }
    if size > MAX_REGION_LEN {
        return Err(format!(
            "the memfd is {size} bytes, more than the {MAX_REGION_LEN} iokerneld maps"
        ));
    }
    Ok(size as usize)
}

/// Lets the caller keep using a descriptor that `fds` owns.
pub fn borrow_all(fds: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    fds.iter().map(|fd| fd.as_fd()).collect()
}
