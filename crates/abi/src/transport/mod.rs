//! How a runtime and iokerneld reach each other: the control socket, descriptor passing, the
//! region's memfd and the kthreads' eventfds. Both sides link this module, so that the kind of
//! socket, the seals a region carries and the checks iokerneld makes on every descriptor are
//! written once.
//!
//! A runtime ([`client`]) creates its region with [`RegionFile::create`], one eventfd per
//! kthread with [`eventfd::create`], and sends a [`Request::Register`] with
//! [`client::register`]: the region's memfd, then the eventfds in kthread order, attached as
//! `SCM_RIGHTS`. iokerneld ([`server`]) receives it with [`server::recv_message`], which bounds
//! both the bytes and the descriptors and refuses a truncated message, and checks the
//! descriptors with [`RegistrationFds::check`] before it maps anything.
//!
//! [`Request::Register`]: crate::control::Request::Register
//! [`RegistrationFds::check`]: server::RegistrationFds::check

pub mod client;
pub mod eventfd;
mod mapping;
mod region_fd;
pub mod server;
mod socket;

#[cfg(test)]
mod tests;

pub use mapping::Mapping;
pub use region_fd::{MAX_REGION_LEN, REGION_SEALS, RegionFile, check_region_fd, seal_region};
pub use socket::{MAX_FDS, connect, send_message};

use core::fmt;

/// Why a descriptor that came with a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FdProblem {
    /// `/proc/self/fd` could not say what the descriptor is.
    Uninspectable {
        /// The error from `readlink`.
        error: String,
    },
    /// An eventfd was expected.
    NotAnEventfd {
        /// What the descriptor is, as `/proc/self/fd` names it.
        actual: String,
    },
    /// `O_NONBLOCK` could not be set.
    CannotMakeNonblocking {
        /// The error from `fcntl`.
        error: String,
    },
    /// A memfd was expected: `F_GET_SEALS` failed.
    NotSealable {
        /// What the descriptor is, as `/proc/self/fd` names it.
        actual: String,
        /// The error from `fcntl`.
        error: String,
    },
    /// The memfd lacks `F_SEAL_SHRINK`.
    NotSealedAgainstShrinking {
        /// The seals it has, as `F_GET_SEALS` reports them.
        seals: u32,
    },
    /// `fstat` failed.
    Fstat {
        /// The error from `fstat`.
        error: String,
    },
    /// The memfd has no bytes.
    Empty,
    /// The memfd is larger than [`MAX_REGION_LEN`].
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
}

impl fmt::Display for FdProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FdProblem::Uninspectable { error } => write!(f, "cannot inspect it: {error}"),
            FdProblem::NotAnEventfd { actual } => {
                write!(f, "it is not an eventfd but {actual}")
            }
            FdProblem::CannotMakeNonblocking { error } => {
                write!(f, "cannot make it nonblocking: {error}")
            }
            FdProblem::NotSealable { actual, error } => {
                write!(
                    f,
                    "it is not a memfd that supports sealing ({actual}: {error})"
                )
            }
            FdProblem::NotSealedAgainstShrinking { seals } => write!(
                f,
                "the memfd is not sealed against shrinking (F_SEAL_SHRINK): its seals are \
                 0x{seals:x}"
            ),
            FdProblem::Fstat { error } => write!(f, "fstat failed: {error}"),
            FdProblem::Empty => write!(f, "the memfd is empty"),
            FdProblem::TooLarge { size } => write!(
                f,
                "the memfd is {size} bytes, more than the {MAX_REGION_LEN} iokerneld maps"
            ),
        }
    }
}

impl std::error::Error for FdProblem {}

/// What the descriptor at `/proc/self/fd/N` points to, as `readlink` shows it (for example
/// `anon_inode:[eventfd]`, `/memfd:corral-region (deleted)` or `pipe:[1234]`).
pub fn describe_fd(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<String> {
    use std::os::fd::AsRawFd;
    let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    Ok(target.to_string_lossy().into_owned())
}
