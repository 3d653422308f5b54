//! Loading the steering program and attaching it to an interface through a BPF link.
//!
//! A link (`BPF_LINK_CREATE`, Linux 5.9) rather than netlink's `IFLA_XDP`: the attachment
//! lives as long as the link's descriptor, so when the process exits or is killed the kernel
//! detaches the program, and no stale program keeps steering frames to sockets that are gone.
//! A link also never replaces a program that is already there: the kernel refuses with
//! `EBUSY` (a program in the same mode) or `EEXIST` (one in the other mode), which
//! [`Error::AlreadyAttached`] reports.

use std::ffi::CStr;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::Error;
use crate::iface::Interface;
use crate::maps::{AddrMap, XskMap, bpf_error};
use crate::program;
use crate::sys;

/// The program's name, as `ip link` and `bpftool` show it.
pub const PROGRAM_NAME: &str = "corral_steer";

/// The license the program declares: it calls no GPL-only helper.
const LICENSE: &CStr = c"Dual MIT/GPL";

/// The verifier's log room on a failed load's retry.
const LOG_SIZE: usize = 1 << 20;

/// The steering program, loaded and verified, bound to its two maps.
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads the steering program over `addresses` and `sockets`. When the kernel refuses it,
    /// loads it once more with the verifier's log on and puts the log in the error.
    pub fn load(addresses: &AddrMap, sockets: &XskMap) -> Result<Program, Error> {
        use std::os::fd::AsRawFd;
        let insns = program::steering(addresses.fd().as_raw_fd(), sockets.fd().as_raw_fd());
        let first = match sys::prog_load_xdp(&insns, PROGRAM_NAME, LICENSE, None) {
            Ok(fd) => return Ok(Program { fd }),
            Err(e) => e,
        };
        let mut log = vec![0u8; LOG_SIZE];
        match sys::prog_load_xdp(&insns, PROGRAM_NAME, LICENSE, Some(&mut log)) {
            // Refused once, accepted with the log on: nothing to report.
            Ok(fd) => Ok(Program { fd }),
            Err(e) => {
                let log = log_text(&log);
                if log.is_empty() {
                    // Refused before the verifier ran: permissions, or a missing feature.
                    Err(bpf_error("loading the XDP program (BPF_PROG_LOAD)", first))
                } else {
                    Err(Error::Verifier { source: e, log })
                }
            }
        }
    }

    /// The program's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The log up to its terminating zero.
fn log_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Where to run the program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Native if the driver supports it, else generic.
    #[default]
    Auto,
    /// In the driver (`XDP_FLAGS_DRV_MODE`), or fail.
    Native,
    /// After the driver, on socket buffers (`XDP_FLAGS_SKB_MODE`): works on every interface,
    /// copies every frame.
    Generic,
}

/// Where the program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// In the driver.
    Native,
    /// On socket buffers.
    Generic,
}

impl fmt::Display for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Attached::Native => "native",
            Attached::Generic => "generic",
        })
    }
}

/// The program attached to an interface; detached when dropped (or when the process ends).
pub struct XdpLink {
    fd: OwnedFd,
    mode: Attached,
    info: sys::LinkInfo,
}

impl XdpLink {
    /// Attaches `program` to `iface` in `mode`. With [`AttachMode::Auto`], falls back to
    /// generic mode only when the driver has no native XDP (`EOPNOTSUPP`), never when another
    /// program is there.
    pub fn attach(
        program: &Program,
        iface: &Interface,
        mode: AttachMode,
    ) -> Result<XdpLink, Error> {
        let try_mode = |attached: Attached| {
            let flags = match attached {
                Attached::Native => sys::XDP_FLAGS_DRV_MODE,
                Attached::Generic => sys::XDP_FLAGS_SKB_MODE,
            };
            sys::link_create_xdp(program.fd(), iface.index(), flags)
        };
        let (result, attached) = match mode {
            AttachMode::Native => (try_mode(Attached::Native), Attached::Native),
            AttachMode::Generic => (try_mode(Attached::Generic), Attached::Generic),
            AttachMode::Auto => match try_mode(Attached::Native) {
                Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    (try_mode(Attached::Generic), Attached::Generic)
                }
                other => (other, Attached::Native),
            },
        };
        let fd = result.map_err(|e| link_error(iface, attached, e))?;
        let info = sys::link_info(fd.as_fd())
            .map_err(|e| Error::os("reading the XDP link's ids (BPF_OBJ_GET_INFO_BY_FD)", e))?;
        Ok(XdpLink {
            fd,
            mode: attached,
            info,
        })
    }

    /// Where the program runs.
    pub fn mode(&self) -> Attached {
        self.mode
    }

    /// The link's id (`bpftool link show id N`).
    pub fn id(&self) -> u32 {
        self.info.id
    }

    /// The attached program's id (`ip link` shows it as `prog/xdp id N`).
    pub fn prog_id(&self) -> u32 {
        self.info.prog_id
    }

    /// The link's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn link_error(iface: &Interface, mode: Attached, e: std::io::Error) -> Error {
    let name = iface.name();
    match e.raw_os_error() {
        Some(libc::EBUSY) | Some(libc::EEXIST) => Error::AlreadyAttached {
            interface: name.to_owned(),
            source: e,
        },
        Some(libc::ENODEV) => Error::NoSuchInterface(name.to_owned()),
        Some(libc::EOPNOTSUPP) => Error::Unsupported {
            what: format!("{name}'s driver has no {mode} XDP"),
            source: e,
        },
        Some(libc::EINVAL) => Error::Unsupported {
            what: format!(
                "attaching XDP to {name} through a BPF link (BPF_LINK_CREATE with BPF_XDP \
                 needs Linux 5.9; {mode} mode may also be refused for this device's MTU or \
                 queue settings)"
            ),
            source: e,
        },
        _ => bpf_error(&format!("attaching XDP to {name} in {mode} mode"), e),
    }
}
