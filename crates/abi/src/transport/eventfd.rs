//! The kthreads' eventfds: iokerneld writes one to wake its kthread, which sleeps on it.
//!
//! iokerneld makes every eventfd it receives nonblocking (the flag belongs to the open file,
//! which both processes share), so that a runtime that fills its counter cannot block
//! iokerneld. Runtimes create them nonblocking to begin with and sleep in `poll`.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};

use super::{FdProblem, describe_fd};

/// What `/proc/self/fd` shows for an eventfd.
const EVENTFD_LINK: &str = "anon_inode:[eventfd]";

/// A nonblocking, close-on-exec eventfd with a zero count.
pub fn create() -> io::Result<OwnedFd> {
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?)
}

/// Adds 1 to an eventfd. A full counter (`EAGAIN`) already means "wake up", so it is not an
/// error.
pub fn signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Consumes the eventfd's count if it is nonzero, without blocking: whether it was.
pub fn try_consume(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut value = [0u8; 8];
    match rustix::io::read(fd, &mut value) {
        Ok(8) => Ok(true),
        Ok(_) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Sleeps until the eventfd is readable, a signal arrives, or `timeout` (`None`: no limit)
/// passes. The caller then tries [`try_consume`] and decides whether to sleep again.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<()> {
    let timespec = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as i64,
        tv_nsec: i64::from(t.subsec_nanos()),
    });
    let mut pfd = [PollFd::new(&fd, PollFlags::IN)];
    match rustix::event::poll(&mut pfd, timespec.as_ref()) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Checks that `fd` is an eventfd and makes it nonblocking.
pub fn check(fd: BorrowedFd<'_>) -> Result<(), FdProblem> {
    let actual = describe_fd(fd).map_err(|e| FdProblem::Uninspectable {
        error: e.to_string(),
    })?;
    if actual != EVENTFD_LINK {
        return Err(FdProblem::NotAnEventfd { actual });
    }
    set_nonblocking(fd).map_err(|e| FdProblem::CannotMakeNonblocking {
        error: e.to_string(),
    })
}

/// Sets `O_NONBLOCK` on a descriptor (and so on every descriptor sharing its open file).
fn set_nonblocking(fd: BorrowedFd<'_>) -> rustix::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)
}
