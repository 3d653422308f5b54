//! What can go wrong, said so that whoever starts iokerneld knows what to do about it.

use std::fmt;
use std::io;

/// A failure to set up or change the XDP path.
#[derive(Debug)]
pub enum Error {
    /// No network interface has this name (in this process's network namespace).
    NoSuchInterface(String),
    /// The interface already has an XDP program that a new link may not replace.
    AlreadyAttached {
        /// The interface.
        interface: String,
        /// What the kernel said: `EBUSY` or `EEXIST`.
        source: io::Error,
    },
    /// The verifier refused the program.
    Verifier {
        /// What `BPF_PROG_LOAD` returned.
        source: io::Error,
        /// The verifier's log (empty if even the logged retry failed without one).
        log: String,
    },
    /// The kernel or the driver lacks something needed.
    Unsupported {
        /// What is missing, and from which Linux version it exists.
        what: String,
        /// What the kernel said.
        source: io::Error,
    },
    /// A setting that cannot work.
    Config(String),
    /// Another system call failed.
    Os {
        /// What was being done.
        doing: String,
        /// What the kernel said.
        source: io::Error,
    },
}

impl Error {
    /// An [`Error::Os`] for `doing`.
    pub(crate) fn os(doing: impl Into<String>, source: io::Error) -> Error {
        Error::Os {
            doing: doing.into(),
            source,
        }
    }

    /// The errno behind the error, if a system call failed.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::AlreadyAttached { source, .. }
            | Error::Verifier { source, .. }
            | Error::Unsupported { source, .. }
            | Error::Os { source, .. } => source.raw_os_error(),
            Error::NoSuchInterface(_) | Error::Config(_) => None,
        }
    }
}

/// The errno's symbolic name, for the few that matter here.
pub(crate) fn errno_name(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EBUSY) => "EBUSY",
        Some(libc::EEXIST) => "EEXIST",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EPERM) => "EPERM",
        Some(libc::EACCES) => "EACCES",
        Some(libc::ENODEV) => "ENODEV",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(libc::EAFNOSUPPORT) => "EAFNOSUPPORT",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::E2BIG) => "E2BIG",
        Some(libc::ENOENT) => "ENOENT",
        _ => "errno",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoSuchInterface(name) => {
                write!(
                    f,
                    "no network interface named {name:?} in this network namespace"
                )
            }
            Error::AlreadyAttached { interface, source } => {
                let why = match source.raw_os_error() {
                    Some(libc::EBUSY) => {
                        "it already has an XDP program in that mode (held by another BPF link, \
                         or attached through netlink, as `ip link set dev ... xdp` does); \
                         detach it first (`ip link set dev IF xdp off`, or end the process \
                         holding the link)"
                    }
                    Some(libc::EEXIST) => {
                        "it already has an XDP program in the other mode (native and generic \
                         XDP cannot both be active), or a device stacked on it (a bond or a \
                         bridge) has one; detach that first"
                    }
                    _ => "it already has an XDP program",
                };
                write!(
                    f,
                    "cannot attach to {interface}: {why} ({}: {source})",
                    errno_name(source)
                )
            }
            Error::Verifier { source, log } => {
                write!(
                    f,
                    "the kernel refused the XDP program ({}: {source})",
                    errno_name(source)
                )?;
                if log.is_empty() {
                    Ok(())
                } else {
                    write!(f, "; verifier log:\n{}", log.trim_end())
                }
            }
            Error::Unsupported { what, source } => {
                write!(f, "{what} ({}: {source})", errno_name(source))
            }
            Error::Config(what) => f.write_str(what),
            Error::Os { doing, source } => {
                write!(f, "{doing}: {source} ({})", errno_name(source))
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::AlreadyAttached { source, .. }
            | Error::Verifier { source, .. }
            | Error::Unsupported { source, .. }
            | Error::Os { source, .. } => Some(source),
            Error::NoSuchInterface(_) | Error::Config(_) => None,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match &e {
            Error::NoSuchInterface(_) => io::ErrorKind::NotFound,
            Error::AlreadyAttached { .. } => io::ErrorKind::ResourceBusy,
            Error::Unsupported { .. } => io::ErrorKind::Unsupported,
            Error::Config(_) => io::ErrorKind::InvalidInput,
            Error::Verifier { .. } | Error::Os { .. } => io::ErrorKind::Other,
        };
        io::Error::new(kind, e.to_string())
    }
}
