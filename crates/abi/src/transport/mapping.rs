//! A shared mapping of a whole region memfd.

use std::io;
use std::os::fd::AsFd;
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

use crate::RawRegion;

/// A shared, read-write mapping of a whole file, unmapped on drop (or never, once
/// [`leak`](Mapping::leak)ed).
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; all access to it goes through
// RawRegion (atomics) or raw pointers whose users synchronise themselves.
unsafe impl Send for Mapping {}
// SAFETY: as for Send.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, `MAP_SHARED`, readable and writable.
    pub fn new(fd: impl AsFd, len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: a fresh mapping at an address the kernel picks overlaps nothing we use; it
        // is only ever reached through this value, which unmaps it on drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }?;
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(Self { base, len })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: [`Mapping::new`] refuses an empty mapping).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Keeps the mapping for the rest of the process's life.
    pub fn leak(self) -> &'static Mapping {
        Box::leak(Box::new(self))
    }

    /// The mapping as a region, borrowed.
    pub fn raw(&self) -> RawRegion<'_> {
        // SAFETY: the mapping stays valid while `self` is borrowed, and users of this type
        // reach the region's shared parts only through this crate's atomic views.
        unsafe { RawRegion::new(self.base, self.len) }
    }

    /// The mapping as a region with an unchecked lifetime, for a structure that keeps views
    /// of the region next to the mapping itself.
    ///
    /// # Safety
    ///
    /// The caller must not use the returned region, or any view made from it, after this
    /// `Mapping` is dropped.
    pub unsafe fn raw_unbounded(&self) -> RawRegion<'static> {
        // SAFETY: validity for as long as the views are used is the caller's promise; access is
        // atomic as for `raw`.
        unsafe { RawRegion::new(self.base, self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base..base + len` is the mapping made in `new`, unmapped only here, and no
        // view of it outlives `self` (`raw` borrows; `raw_unbounded`'s callers promise it).
        unsafe {
            let _ = rustix::mm::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
