//! How a runtime and iokerneld reach each other: the control socket, descriptor passing and
//! the region's memfd. Both sides link this module, so that the kind of socket, the seals a
//! region carries and the checks iokerneld makes on the descriptor are written once.
//!
//! A runtime ([`client`]) creates its region with [`RegionFile::create`] and sends a
//! [`Request::Register`] with [`client::register`]: the region's memfd, the one descriptor a
//! registration carries, attached as `SCM_RIGHTS` (its kthreads sleep on wake words inside the
//! region, so they need no descriptor of their own). iokerneld ([`server`]) receives it with
//! [`server::recv_message`], which bounds both the bytes and the descriptors and refuses a
//! truncated message, and checks the descriptor with [`RegistrationFds::check`] before it maps
//! anything.
//!
//! [`Request::Register`]: crate::control::Request::Register
//! [`RegistrationFds::check`]: server::RegistrationFds::check

pub mod client;
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
/// `/memfd:corral-region (deleted)` or `pipe:[1234]`).
pub fn describe_fd(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<String> {
    use std::os::fd::AsRawFd;
    let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    Ok(target.to_string_lossy().into_owned())
}
