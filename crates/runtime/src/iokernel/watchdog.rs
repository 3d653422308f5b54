//! Noticing that iokerneld is gone. Once registered, a runtime's kthreads wait for iokerneld to
//! grant them cores; if iokerneld exits or crashes, nobody ever will, and the runtime would hang
//! for good. A plain OS thread therefore waits for the control connection to be hung up and then
//! ends the process with a clear error: a runtime cannot go on without its cores.
//!
//! The thread polls a duplicate of the connection together with a cancel eventfd. An orderly
//! shutdown stops the watchdog (cancel, join, which closes the duplicate) before closing the
//! connection itself, so that closing it neither trips the watchdog nor is delayed by it.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::thread::JoinHandle;
use std::time::Duration;

use corral_abi::control::Reply;
use corral_abi::transport;
use rustix::event::{PollFd, PollFlags};

/// The exit status of a runtime whose iokerneld went away (`EX_UNAVAILABLE` of sysexits.h).
pub const IOKERNELD_GONE_EXIT_STATUS: i32 = 69;

/// How long to wait for the reason iokerneld may have sent before it closed the connection.
const REASON_WAIT: Duration = Duration::from_millis(10);

/// The watcher of one runtime's control connection; see the module documentation.
pub(crate) struct Watchdog {
    cancel: OwnedFd,
    thread: Option<JoinHandle<()>>,
}

impl super::IokShared {
    /// Starts a watchdog on the control connection (see the module documentation); stop it
    /// before [`super::IokShared::disconnect`].
    pub(crate) fn watch_connection(&self) -> io::Result<Watchdog> {
        let connection = self.connection.lock().unwrap_or_else(|e| e.into_inner());
        match connection.as_ref() {
            Some(fd) => Watchdog::start(fd.as_fd()),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "corral: no control connection to watch",
            )),
        }
    }
}

impl Watchdog {
    /// Starts watching `connection`.
    pub(crate) fn start(connection: BorrowedFd<'_>) -> io::Result<Watchdog> {
        let connection = connection.try_clone_to_owned()?;
        let cancel = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        let cancelled = cancel.try_clone()?;
        let thread = std::thread::Builder::new()
            .name("corral-watchdog".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                if let Some(why) = wait_for_hang_up(connection.as_fd(), cancelled.as_fd()) {
                    die(&why);
                }
            })?;
        Ok(Watchdog {
            cancel,
            thread: Some(thread),
        })
    }

    /// Stops watching, for an orderly disconnect: once this returns, the watchdog holds no
    /// copy of the connection.
    pub(crate) fn stop(mut self) {
        self.cancel_and_join();
    }

    fn cancel_and_join(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        if rustix::io::write(&self.cancel, &1u64.to_ne_bytes()).is_ok() {
            let _ = thread.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.cancel_and_join();
    }
}

/// Waits until the connection is hung up (`Some`, with why) or `cancel` is signalled (`None`).
fn wait_for_hang_up(connection: BorrowedFd<'_>, cancel: BorrowedFd<'_>) -> Option<String> {
    loop {
        let mut fds = [
            PollFd::new(&connection, PollFlags::RDHUP),
            PollFd::new(&cancel, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Some(format!(
                    "cannot watch the control connection to iokerneld ({e})"
                ));
            }
        }
        if !fds[1].revents().is_empty() {
            return None;
        }
        let hung_up = PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL;
        if fds[0].revents().intersects(hung_up) {
            return Some(hang_up_reason(connection));
        }
    }
}

/// The error to report: iokerneld's own reason if it sent one before closing (an eviction),
/// otherwise that it is gone.
fn hang_up_reason(connection: BorrowedFd<'_>) -> String {
    match transport::client::recv_reply(connection, REASON_WAIT) {
        Ok(Reply::Error { message }) => {
            format!("iokerneld closed the control connection: {message}; exiting")
        }
        _ => "iokerneld closed the control connection: it exited or crashed; exiting".to_owned(),
    }
}

/// Ends the process. Standard error is written directly, without Rust's lock on it, which a
/// uthread stopped on a parked kthread may hold forever.
fn die(why: &str) -> ! {
    let line = format!("corral: {why}\n");
    let _ = rustix::io::write(std::io::stderr().as_fd(), line.as_bytes());
    std::process::exit(IOKERNELD_GONE_EXIT_STATUS)
}
