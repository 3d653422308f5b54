//! The region's memfd: created and sealed by the runtime, checked by iokerneld.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{MemfdFlags, SealFlags};

use super::{FdProblem, Mapping, describe_fd};
use crate::{Layout, RegionBuilder};

/// Largest region iokerneld maps (64 GiB): far above any real runtime, and it keeps a bogus
/// size from exhausting iokerneld's address space.
pub const MAX_REGION_LEN: u64 = 64 << 30;

/// The seals a runtime puts on its region: its size can never change again, nor its seals.
/// iokerneld insists on `SHRINK`, the one whose absence could hurt it.
pub const REGION_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// A memfd laid out as a region, and the creator's own mapping of it.
#[derive(Debug)]
pub struct RegionFile {
    /// The memfd, to send to iokerneld (and then close).
    pub memfd: OwnedFd,
    /// The creator's shared mapping of the whole memfd.
    pub mapping: Mapping,
    /// The layout written into the header.
    pub layout: Layout,
}

impl RegionFile {
    /// Creates a memfd of the size `builder` lays out, maps it, writes the header and rings,
    /// and seals it with [`REGION_SEALS`], as iokerneld demands.
    pub fn create(builder: &RegionBuilder) -> io::Result<Self> {
        let file = Self::create_unsealed(builder)?;
        seal_region(&file.memfd)?;
        Ok(file)
    }

    /// As [`RegionFile::create`] but without the seals: only for checking that iokerneld
    /// refuses such a region.
    pub fn create_unsealed(builder: &RegionBuilder) -> io::Result<Self> {
        let layout = builder
            .layout()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let memfd = rustix::fs::memfd_create(
            "corral-region",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&memfd, layout.region_size())?;
        let len = usize::try_from(layout.region_size())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "region too large"))?;
        let mapping = Mapping::new(&memfd, len)?;
        // SAFETY: the mapping is fresh and not yet shared with anyone (no other thread and no
        // other process has it), so this is the only access for the slice's short life.
        let bytes = unsafe { std::slice::from_raw_parts_mut(mapping.as_ptr(), mapping.len()) };
        builder
            .init(bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        Ok(Self {
            memfd,
            mapping,
            layout,
        })
    }
}

/// Seals a region's memfd with [`REGION_SEALS`].
pub fn seal_region(memfd: &OwnedFd) -> io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(memfd, REGION_SEALS)?)
}

/// Checks that `fd` is a memfd sealed against shrinking, of 1 to [`MAX_REGION_LEN`] bytes, and
/// returns its size.
pub fn check_region_fd(fd: BorrowedFd<'_>) -> Result<usize, FdProblem> {
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| FdProblem::NotSealable {
        actual: describe_fd(fd).unwrap_or_else(|_| "unknown".into()),
        error: e.to_string(),
    })?;
    if !seals.contains(SealFlags::SHRINK) {
        return Err(FdProblem::NotSealedAgainstShrinking {
            seals: seals.bits(),
        });
    }
    let size = rustix::fs::fstat(fd)
        .map_err(|e| FdProblem::Fstat {
            error: e.to_string(),
        })?
        .st_size;
    let size = u64::try_from(size).unwrap_or(0);
    if size == 0 {
        return Err(FdProblem::Empty);
    }
    if size > MAX_REGION_LEN {
        return Err(FdProblem::TooLarge { size });
    }
    usize::try_from(size).map_err(|_| FdProblem::TooLarge { size })
}
