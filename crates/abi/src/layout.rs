//! The region header, its validation, and the builder that lays a region out.
//!
//! ```text
//! 0                      Header (HEADER_SIZE bytes, fields below)
//! kthread_offsets[i]     kthread i's area (kthread_area_size bytes each), see KthreadLayout
//! packet_area_offset     packet buffers (packet_area_size bytes)
//! ```
//!
//! iokerneld validates a snapshot of the header and from then on uses only the resulting
//! [`Layout`], so the runtime cannot change the layout under it by rewriting the header.

use core::fmt;
use core::mem::size_of;

use crate::command::RingKind;
use crate::slot::PacketArea;
use crate::{
    CACHE_LINE, LAYOUT_VERSION, MAGIC, MAX_KTHREADS, MAX_RING_SLOTS, MIN_RING_SLOTS, SLOT_SIZE,
};

/// Size of [`Header`] in bytes; kthread areas may start right after it.
pub(crate) const HEADER_SIZE: u64 = size_of::<Header>() as u64;

/// Bytes of control cache lines at the start of each kthread area: queue positions, then the
/// positions the runtime publishes, then those iokerneld publishes, then the counters the
/// runtime reports (`ReportedCounters`).
pub(crate) const KTHREAD_CONTROL_SIZE: u64 =
    3 * CACHE_LINE as u64 + (crate::region::REPORTED_SLOTS * 8) as u64;

/// The builder places the packet area and sizes the region on page boundaries, so that the
/// memfd's size is a page multiple and packet buffers start on a page.
const PAGE: u64 = 4096;

/// The header at offset 0 of every region, exactly as it sits in memory (native byte order: both
/// sides run on the same machine).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`LAYOUT_VERSION`].
    pub version: u32,
    /// `size_of::<Header>()`, a second guard against a mismatched build.
    pub header_size: u32,
    /// Bytes of the region that the layout uses; at most the size of the mapping.
    pub region_size: u64,
    /// Number of kthreads, `1..=MAX_KTHREADS`.
    pub kthreads: u32,
    /// [`SLOT_SIZE`].
    pub slot_size: u32,
    /// Slots in each ingress ring: a power of two in `MIN_RING_SLOTS..=MAX_RING_SLOTS`.
    pub ingress_slots: u32,
    /// Slots in each egress packet ring, same bounds.
    pub egress_packet_slots: u32,
    /// Slots in each egress command ring, same bounds.
    pub egress_command_slots: u32,
    /// Must be 0.
    pub reserved0: u32,
    /// Bytes of each kthread area: a multiple of 64, at least [`KthreadLayout::size`].
    pub kthread_area_size: u64,
    /// Offset of the packet area, a multiple of 64.
    pub packet_area_offset: u64,
    /// Size of the packet area in bytes.
    pub packet_area_size: u64,
    /// Must be 0.
    pub reserved: [u64; 7],
    /// Offset of each kthread's area: multiples of 64, ascending and disjoint. Entries from
    /// `kthreads` on must be 0.
    pub kthread_offsets: [u64; MAX_KTHREADS],
}

// The header is an ABI: pin every field's offset so that a reordering cannot slip through.
const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(Header, magic) == 0);
    assert!(offset_of!(Header, version) == 8);
    assert!(offset_of!(Header, header_size) == 12);
    assert!(offset_of!(Header, region_size) == 16);
    assert!(offset_of!(Header, kthreads) == 24);
    assert!(offset_of!(Header, slot_size) == 28);
    assert!(offset_of!(Header, ingress_slots) == 32);
    assert!(offset_of!(Header, egress_packet_slots) == 36);
    assert!(offset_of!(Header, egress_command_slots) == 40);
    assert!(offset_of!(Header, reserved0) == 44);
    assert!(offset_of!(Header, kthread_area_size) == 48);
    assert!(offset_of!(Header, packet_area_offset) == 56);
    assert!(offset_of!(Header, packet_area_size) == 64);
    assert!(offset_of!(Header, reserved) == 72);
    assert!(offset_of!(Header, kthread_offsets) == 128);
    // No padding anywhere: reading the header as words must cover every byte.
    assert!(size_of::<Header>() == 128 + 8 * MAX_KTHREADS);
};

impl Header {
    /// A header of all zeroes (which fails validation).
    pub const fn zeroed() -> Header {
        Header {
            magic: 0,
            version: 0,
            header_size: 0,
            region_size: 0,
            kthreads: 0,
            slot_size: 0,
            ingress_slots: 0,
            egress_packet_slots: 0,
            egress_command_slots: 0,
            reserved0: 0,
            kthread_area_size: 0,
            packet_area_offset: 0,
            packet_area_size: 0,
            reserved: [0; 7],
            kthread_offsets: [0; MAX_KTHREADS],
        }
    }

    /// Checks every field against the rules above and against `mapped_size`, the size of the
    /// mapping the header was read from, and returns the layout it describes.
    ///
    /// Validate a private copy (see [`RawRegion::read_header`](crate::RawRegion::read_header)),
    /// never the live header, and use only the returned [`Layout`] afterwards.
    pub fn validate(&self, mapped_size: u64) -> Result<Layout, LayoutError> {
        use LayoutError as E;
        if self.magic != MAGIC {
            return Err(E::BadMagic { found: self.magic });
        }
        if self.version != LAYOUT_VERSION {
            return Err(E::UnsupportedVersion {
                found: self.version,
            });
        }
        if u64::from(self.header_size) != HEADER_SIZE {
            return Err(E::HeaderSize {
                found: self.header_size,
            });
        }
        if self.slot_size as usize != SLOT_SIZE {
            return Err(E::SlotSize {
                found: self.slot_size,
            });
        }
        let region_size = self.region_size;
        if region_size > mapped_size || region_size < HEADER_SIZE {
            return Err(E::RegionSize {
                found: region_size,
                mapped: mapped_size,
            });
        }
        if self.reserved0 != 0 {
            return Err(E::ReservedNonZero {
                field: "reserved0",
                found: u64::from(self.reserved0),
            });
        }
        if let Some(&found) = self.reserved.iter().find(|&&r| r != 0) {
            return Err(E::ReservedNonZero {
                field: "reserved",
                found,
            });
        }
        if self.kthreads == 0 || self.kthreads as usize > MAX_KTHREADS {
            return Err(E::KthreadCount {
                found: self.kthreads,
            });
        }
        for (ring, slots) in [
            (RingKind::Ingress, self.ingress_slots),
            (RingKind::EgressPacket, self.egress_packet_slots),
            (RingKind::EgressCommand, self.egress_command_slots),
        ] {
            if !slots.is_power_of_two() || !(MIN_RING_SLOTS..=MAX_RING_SLOTS).contains(&slots) {
                return Err(E::RingSlots { ring, found: slots });
            }
        }
        let kthread = KthreadLayout::new(
            self.ingress_slots,
            self.egress_packet_slots,
            self.egress_command_slots,
        );
        let area_size = self.kthread_area_size;
        if area_size < kthread.size || !area_size.is_multiple_of(CACHE_LINE as u64) {
            return Err(E::KthreadAreaSize {
                found: area_size,
                needed: kthread.size,
            });
        }

        let kthreads = self.kthreads as usize;
        let mut previous_end = HEADER_SIZE;
        for (i, &offset) in self.kthread_offsets[..kthreads].iter().enumerate() {
            let area = Area::Kthread(i as u32);
            check_area(area, offset, area_size, region_size)?;
            if offset < HEADER_SIZE {
                return Err(E::Overlap {
                    area,
                    offset,
                    other: Area::Header,
                });
            }
            if offset < previous_end {
                return Err(E::KthreadOrder {
                    index: i as u32,
                    offset,
                    previous_end,
                });
            }
            // check_area proved this does not overflow.
            previous_end = offset + area_size;
        }
        for (i, &offset) in self.kthread_offsets.iter().enumerate().skip(kthreads) {
            if offset != 0 {
                return Err(E::StrayKthreadOffset {
                    index: i as u32,
                    found: offset,
                });
            }
        }

        let packets = PacketArea {
            offset: self.packet_area_offset,
            size: self.packet_area_size,
        };
        check_area(Area::Packets, packets.offset, packets.size, region_size)?;
        if packets.size != 0 {
            let overlaps = |start: u64, size: u64| {
                start < packets.offset + packets.size && packets.offset < start + size
            };
            if overlaps(0, HEADER_SIZE) {
                return Err(E::Overlap {
                    area: Area::Packets,
                    offset: packets.offset,
                    other: Area::Header,
                });
            }
            for (i, &offset) in self.kthread_offsets[..kthreads].iter().enumerate() {
                if overlaps(offset, area_size) {
                    return Err(E::Overlap {
                        area: Area::Packets,
                        offset: packets.offset,
                        other: Area::Kthread(i as u32),
                    });
                }
            }
        }

        Ok(Layout {
            header: *self,
            kthread,
            packets,
        })
    }
}

/// Checks that `[offset, offset + size)` is 64-aligned and inside the region.
fn check_area(area: Area, offset: u64, size: u64, region_size: u64) -> Result<(), LayoutError> {
    if !offset.is_multiple_of(CACHE_LINE as u64) {
        return Err(LayoutError::Misaligned { area, offset });
    }
    match offset.checked_add(size) {
        Some(end) if end <= region_size => Ok(()),
        _ => Err(LayoutError::OutOfBounds {
            area,
            offset,
            size,
            region_size,
        }),
    }
}

/// Where things sit inside one kthread area, relative to its start. Derived from the ring sizes
/// alone, so that the header carries fewer offsets for a runtime to get wrong.
///
/// ```text
///   0  QueuePositions      written by the runtime, read by the allocator every pass
///  64  runtime positions   egress packet and command ring tails (written by the runtime)
/// 128  iokernel positions  ingress tail, egress packet and command heads (written by iokerneld)
/// 192  reported counters   ReportedCounters, REPORTED_SLOTS words (written by the runtime)
/// 960  ingress slots, then egress packet slots, then egress command slots
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KthreadLayout {
    /// Offset of the ingress ring's slots.
    pub ingress: u64,
    /// Offset of the egress packet ring's slots.
    pub egress_packet: u64,
    /// Offset of the egress command ring's slots.
    pub egress_command: u64,
    /// Smallest area that holds all of it.
    pub size: u64,
}

impl KthreadLayout {
    /// The layout for rings of these sizes (in slots).
    pub const fn new(
        ingress_slots: u32,
        egress_packet_slots: u32,
        egress_command_slots: u32,
    ) -> Self {
        let ingress = KTHREAD_CONTROL_SIZE;
        let egress_packet = ingress + ring_bytes(ingress_slots);
        let egress_command = egress_packet + ring_bytes(egress_packet_slots);
        let end = egress_command + ring_bytes(egress_command_slots);
        KthreadLayout {
            ingress,
            egress_packet,
            egress_command,
            size: align_up(end, CACHE_LINE as u64),
        }
    }
}

/// Bytes of a ring's slots, rounded to whole cache lines so the next ring starts on its own.
const fn ring_bytes(slots: u32) -> u64 {
    align_up(slots as u64 * SLOT_SIZE as u64, CACHE_LINE as u64)
}

const fn align_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// A validated layout: a private copy of the header that passed [`Header::validate`], plus what
/// follows from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    header: Header,
    kthread: KthreadLayout,
    packets: PacketArea,
}

impl Layout {
    /// The header this layout was validated from.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// Bytes of the region in use.
    pub fn region_size(&self) -> u64 {
        self.header.region_size
    }

    /// Number of kthreads.
    pub fn kthreads(&self) -> u32 {
        self.header.kthreads
    }

    /// Slots in the ring of `kind` (the same for every kthread).
    pub fn ring_slots(&self, kind: RingKind) -> u32 {
        match kind {
            RingKind::Ingress => self.header.ingress_slots,
            RingKind::EgressPacket => self.header.egress_packet_slots,
            RingKind::EgressCommand => self.header.egress_command_slots,
        }
    }

    /// Offset of kthread `index`'s area, if there is such a kthread.
    pub fn kthread_offset(&self, index: u32) -> Option<u64> {
        (index < self.header.kthreads).then(|| self.header.kthread_offsets[index as usize])
    }

    /// Bytes of each kthread area.
    pub fn kthread_area_size(&self) -> u64 {
        self.header.kthread_area_size
    }

    /// Offsets inside every kthread area.
    pub fn kthread_layout(&self) -> KthreadLayout {
        self.kthread
    }

    /// The packet area.
    pub fn packet_area(&self) -> PacketArea {
        self.packets
    }
}

/// Builds a region for the runtime side. Defaults: 1024 ingress slots, 1024 egress packet slots,
/// 64 egress command slots (commands are few and small), no packet area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionBuilder {
    kthreads: u32,
    ingress_slots: u32,
    egress_packet_slots: u32,
    egress_command_slots: u32,
    packet_area_size: u64,
}

impl RegionBuilder {
    /// A builder for `kthreads` kthreads.
    pub const fn new(kthreads: u32) -> Self {
        RegionBuilder {
            kthreads,
            ingress_slots: 1024,
            egress_packet_slots: 1024,
            egress_command_slots: 64,
            packet_area_size: 0,
        }
    }

    /// Slots in each ingress ring.
    pub const fn ingress_slots(mut self, slots: u32) -> Self {
        self.ingress_slots = slots;
        self
    }

    /// Slots in each egress packet ring.
    pub const fn egress_packet_slots(mut self, slots: u32) -> Self {
        self.egress_packet_slots = slots;
        self
    }

    /// Slots in each egress command ring.
    pub const fn egress_command_slots(mut self, slots: u32) -> Self {
        self.egress_command_slots = slots;
        self
    }

    /// Bytes of packet buffers.
    pub const fn packet_area_size(mut self, bytes: u64) -> Self {
        self.packet_area_size = bytes;
        self
    }

    /// The layout these parameters give: the header at 0, kthread areas packed right after it,
    /// the packet area on the next page, the region rounded up to a page. Runs the same
    /// validation iokerneld will, so a layout that builds is one iokerneld accepts.
    pub fn layout(&self) -> Result<Layout, LayoutError> {
        let mut h = Header::zeroed();
        h.magic = MAGIC;
        h.version = LAYOUT_VERSION;
        h.header_size = HEADER_SIZE as u32;
        h.slot_size = SLOT_SIZE as u32;
        h.kthreads = self.kthreads;
        h.ingress_slots = self.ingress_slots;
        h.egress_packet_slots = self.egress_packet_slots;
        h.egress_command_slots = self.egress_command_slots;
        // Validation rejects bad counts and sizes below; clamp only so that the arithmetic here
        // cannot overflow before it does.
        let kthreads = u64::from(self.kthreads.min(MAX_KTHREADS as u32));
        let slots = |s: u32| s.min(MAX_RING_SLOTS);
        let kthread = KthreadLayout::new(
            slots(self.ingress_slots),
            slots(self.egress_packet_slots),
            slots(self.egress_command_slots),
        );
        h.kthread_area_size = kthread.size;
        for i in 0..kthreads {
            h.kthread_offsets[i as usize] = HEADER_SIZE + i * kthread.size;
        }
        h.packet_area_offset = align_up(HEADER_SIZE + kthreads * kthread.size, PAGE);
        h.packet_area_size = self.packet_area_size;
        h.region_size = h
            .packet_area_offset
            .checked_add(self.packet_area_size)
            .and_then(|end| end.checked_next_multiple_of(PAGE))
            .ok_or(LayoutError::PacketAreaTooLarge {
                size: self.packet_area_size,
            })?;
        h.validate(h.region_size)
    }

    /// Lays the region out in `buf`: zeroes the header and kthread areas (so every ring is
    /// fresh) and writes the header. The packet area is left as it is: a fresh memfd is
    /// already zero, and touching it would commit every page of it now.
    ///
    /// `buf` must be 64-byte aligned and at least [`Layout::region_size`] long. Once iokerneld
    /// or another thread shares the memory, reach it only through
    /// [`RawRegion`](crate::RawRegion), not through this slice.
    pub fn init(&self, buf: &mut [u8]) -> Result<Layout, LayoutError> {
        let layout = self.layout()?;
        if (buf.len() as u64) < layout.region_size() {
            return Err(LayoutError::BufferTooSmall {
                len: buf.len(),
                needed: layout.region_size(),
            });
        }
        let addr = buf.as_ptr() as usize;
        if !addr.is_multiple_of(CACHE_LINE) {
            return Err(LayoutError::MisalignedBase { addr });
        }
        buf[..layout.packet_area().offset as usize].fill(0);
        // SAFETY: `buf` is at least `region_size >= HEADER_SIZE` bytes long (checked above and
        // by validation), 64-byte aligned (checked above, and Header's alignment is 64), and
        // exclusively borrowed; Header is plain integers, so writing it is just bytes.
        unsafe { buf.as_mut_ptr().cast::<Header>().write(*layout.header()) };
        Ok(layout)
    }
}

/// A named part of the region, for error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Area {
    /// The header.
    Header,
    /// The area of the kthread with this index.
    Kthread(u32),
    /// The packet area.
    Packets,
}

impl fmt::Display for Area {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Area::Header => f.write_str("the header"),
            Area::Kthread(i) => write!(f, "kthread {i}'s area"),
            Area::Packets => f.write_str("the packet area"),
        }
    }
}

/// The header field that places `area`, for error messages.
struct OffsetField(Area);

impl fmt::Display for OffsetField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Area::Header => f.write_str("header"),
            Area::Kthread(i) => write!(f, "header.kthread_offsets[{i}]"),
            Area::Packets => f.write_str("header.packet_area_offset"),
        }
    }
}

fn ring_field(ring: RingKind) -> &'static str {
    match ring {
        RingKind::Ingress => "ingress_slots",
        RingKind::EgressPacket => "egress_packet_slots",
        RingKind::EgressCommand => "egress_command_slots",
    }
}

/// Why a region's header (or a builder's parameters) cannot be used. Each variant carries the
/// value found, and its message names the field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// The mapping is smaller than a header.
    RegionTooSmall {
        /// Bytes mapped.
        mapped: u64,
    },
    /// The mapping's base address is not 64-byte aligned.
    MisalignedBase {
        /// The address.
        addr: usize,
    },
    /// `magic` is not [`MAGIC`].
    BadMagic {
        /// Value found.
        found: u64,
    },
    /// `version` is not [`LAYOUT_VERSION`].
    UnsupportedVersion {
        /// Value found.
        found: u32,
    },
    /// `header_size` is not the size of [`Header`].
    HeaderSize {
        /// Value found.
        found: u32,
    },
    /// `slot_size` is not [`SLOT_SIZE`].
    SlotSize {
        /// Value found.
        found: u32,
    },
    /// `region_size` exceeds the mapping or is smaller than the header.
    RegionSize {
        /// Value found.
        found: u64,
        /// Bytes mapped.
        mapped: u64,
    },
    /// A reserved field is not zero.
    ReservedNonZero {
        /// The field.
        field: &'static str,
        /// Value found.
        found: u64,
    },
    /// `kthreads` is 0 or above [`MAX_KTHREADS`].
    KthreadCount {
        /// Value found.
        found: u32,
    },
    /// A ring size is not a power of two in `MIN_RING_SLOTS..=MAX_RING_SLOTS`.
    RingSlots {
        /// Which ring's size.
        ring: RingKind,
        /// Value found.
        found: u32,
    },
    /// `kthread_area_size` is not a multiple of 64 or too small for the rings.
    KthreadAreaSize {
        /// Value found.
        found: u64,
        /// The least size that holds the rings.
        needed: u64,
    },
    /// An area's offset is not a multiple of 64.
    Misaligned {
        /// Which area.
        area: Area,
        /// Offset found.
        offset: u64,
    },
    /// An area reaches past `region_size`.
    OutOfBounds {
        /// Which area.
        area: Area,
        /// Offset found.
        offset: u64,
        /// The area's size.
        size: u64,
        /// The region's size.
        region_size: u64,
    },
    /// Two areas overlap.
    Overlap {
        /// The area whose offset is at fault.
        area: Area,
        /// Its offset.
        offset: u64,
        /// The area it overlaps.
        other: Area,
    },
    /// A kthread's area starts before the previous one ends (areas must be ascending).
    KthreadOrder {
        /// The kthread.
        index: u32,
        /// Its offset.
        offset: u64,
        /// Where the previous area ends.
        previous_end: u64,
    },
    /// A `kthread_offsets` entry past `kthreads` is not zero.
    StrayKthreadOffset {
        /// The entry.
        index: u32,
        /// Value found.
        found: u64,
    },
    /// Builder: the buffer is shorter than the region.
    BufferTooSmall {
        /// Buffer length.
        len: usize,
        /// Region size.
        needed: u64,
    },
    /// Builder: the packet area is so large that the region size overflows.
    PacketAreaTooLarge {
        /// Size asked for.
        size: u64,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use LayoutError as E;
        match *self {
            E::RegionTooSmall { mapped } => write!(
                f,
                "region of {mapped} bytes is smaller than the {HEADER_SIZE}-byte header"
            ),
            E::MisalignedBase { addr } => write!(
                f,
                "region base address {addr:#x} is not aligned to {CACHE_LINE} bytes"
            ),
            E::BadMagic { found } => write!(
                f,
                "header.magic = {found:#018x}: not a Corral region (expected {MAGIC:#018x})"
            ),
            E::UnsupportedVersion { found } => write!(
                f,
                "header.version = {found}: unsupported (this build speaks layout version \
                 {LAYOUT_VERSION})"
            ),
            E::HeaderSize { found } => {
                write!(f, "header.header_size = {found}: expected {HEADER_SIZE}")
            }
            E::SlotSize { found } => write!(f, "header.slot_size = {found}: expected {SLOT_SIZE}"),
            E::RegionSize { found, mapped } => write!(
                f,
                "header.region_size = {found}: must be between {HEADER_SIZE} and the {mapped} \
                 bytes mapped"
            ),
            E::ReservedNonZero { field, found } => {
                write!(f, "header.{field} = {found:#x}: reserved, must be 0")
            }
            E::KthreadCount { found } => write!(
                f,
                "header.kthreads = {found}: must be between 1 and {MAX_KTHREADS}"
            ),
            E::RingSlots { ring, found } => write!(
                f,
                "header.{} = {found}: must be a power of two between {MIN_RING_SLOTS} and \
                 {MAX_RING_SLOTS}",
                ring_field(ring)
            ),
            E::KthreadAreaSize { found, needed } => write!(
                f,
                "header.kthread_area_size = {found}: must be a multiple of {CACHE_LINE} and at \
                 least {needed} for these ring sizes"
            ),
            E::Misaligned { area, offset } => write!(
                f,
                "{} = {offset:#x}: not a multiple of {CACHE_LINE}",
                OffsetField(area)
            ),
            E::OutOfBounds {
                area,
                offset,
                size,
                region_size,
            } => write!(
                f,
                "{} = {offset:#x}: {area} ({size} bytes) ends past region_size {region_size}",
                OffsetField(area)
            ),
            E::Overlap {
                area,
                offset,
                other,
            } => write!(
                f,
                "{} = {offset:#x}: {area} overlaps {other}",
                OffsetField(area)
            ),
            E::KthreadOrder {
                index,
                offset,
                previous_end,
            } => write!(
                f,
                "header.kthread_offsets[{index}] = {offset:#x}: starts before the previous area \
                 ends at {previous_end:#x} (kthread areas must be ascending and disjoint)"
            ),
            E::StrayKthreadOffset { index, found } => write!(
                f,
                "header.kthread_offsets[{index}] = {found:#x}: past header.kthreads, must be 0"
            ),
            E::BufferTooSmall { len, needed } => {
                write!(f, "buffer of {len} bytes: the region needs {needed}")
            }
            E::PacketAreaTooLarge { size } => {
                write!(f, "packet_area_size = {size}: region size overflows")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Header {
        *RegionBuilder::new(3)
            .ingress_slots(16)
            .egress_packet_slots(8)
            .egress_command_slots(4)
            .packet_area_size(10_000)
            .layout()
            .unwrap()
            .header()
    }

    #[test]
    fn builder_layout_is_as_documented() {
        let l = RegionBuilder::new(2)
            .packet_area_size(1 << 20)
            .layout()
            .unwrap();
        assert_eq!(HEADER_SIZE, 2176);
        let k = l.kthread_layout();
        assert_eq!(k.ingress, 960);
        assert_eq!(k.egress_packet, 960 + 1024 * 16);
        assert_eq!(k.egress_command, 960 + 2 * 1024 * 16);
        assert_eq!(k.size, 960 + 2 * 1024 * 16 + 64 * 16);
        assert_eq!(l.kthread_offset(0), Some(2176));
        assert_eq!(l.kthread_offset(1), Some(2176 + k.size));
        assert_eq!(l.kthread_offset(2), None);
        assert_eq!(l.packet_area().offset, 73728);
        assert_eq!(l.region_size(), 73728 + (1 << 20));
        assert_eq!(l.ring_slots(RingKind::EgressCommand), 64);
    }

    #[test]
    fn good_header_validates_against_larger_mapping() {
        let h = good();
        assert!(h.validate(h.region_size).is_ok());
        assert!(h.validate(h.region_size + 4096).is_ok());
    }

    fn err(h: &Header) -> LayoutError {
        h.validate(h.region_size).unwrap_err()
    }

    #[test]
    fn each_field_is_checked() {
        use LayoutError as E;
        let base = good();
        let mut h = base;
        h.magic ^= 1;
        assert_eq!(err(&h), E::BadMagic { found: MAGIC ^ 1 });

        let mut h = base;
        h.version = 1;
        assert_eq!(err(&h), E::UnsupportedVersion { found: 1 });
        assert_eq!(
            err(&h).to_string(),
            format!(
                "header.version = 1: unsupported (this build speaks layout version {LAYOUT_VERSION})"
            )
        );

        let mut h = base;
        h.header_size = 64;
        assert_eq!(err(&h), E::HeaderSize { found: 64 });

        let mut h = base;
        h.slot_size = 8;
        assert_eq!(err(&h), E::SlotSize { found: 8 });

        let h = base;
        assert_eq!(
            h.validate(h.region_size - 1).unwrap_err(),
            E::RegionSize {
                found: h.region_size,
                mapped: h.region_size - 1
            }
        );

        let mut h = base;
        h.reserved[6] = 9;
        assert_eq!(
            err(&h),
            E::ReservedNonZero {
                field: "reserved",
                found: 9
            }
        );

        for bad in [0, MAX_KTHREADS as u32 + 1] {
            let mut h = base;
            h.kthreads = bad;
            assert_eq!(err(&h), E::KthreadCount { found: bad });
        }
        let mut h = base;
        h.kthreads = 0;
        assert_eq!(
            err(&h).to_string(),
            "header.kthreads = 0: must be between 1 and 256"
        );

        for bad in [0, 2, 12, MAX_RING_SLOTS * 2] {
            let mut h = base;
            h.egress_packet_slots = bad;
            assert_eq!(
                err(&h),
                E::RingSlots {
                    ring: RingKind::EgressPacket,
                    found: bad
                }
            );
        }
        let mut h = base;
        h.ingress_slots = 12;
        assert_eq!(
            err(&h).to_string(),
            "header.ingress_slots = 12: must be a power of two between 4 and 65536"
        );

        let mut h = base;
        h.ingress_slots = 32;
        assert_eq!(
            err(&h),
            E::KthreadAreaSize {
                found: base.kthread_area_size,
                needed: base.kthread_area_size + 256
            }
        );
        let mut h = base;
        h.kthread_area_size += 8;
        assert!(matches!(err(&h), E::KthreadAreaSize { .. }));
    }

    #[test]
    fn offsets_are_checked() {
        use LayoutError as E;
        let base = good();
        let area = base.kthread_area_size;

        let mut h = base;
        h.kthread_offsets[1] += 8;
        assert_eq!(
            err(&h),
            E::Misaligned {
                area: Area::Kthread(1),
                offset: base.kthread_offsets[1] + 8
            }
        );
        assert_eq!(
            err(&h).to_string(),
            format!(
                "header.kthread_offsets[1] = {:#x}: not a multiple of 64",
                base.kthread_offsets[1] + 8
            )
        );

        let mut h = base;
        h.kthread_offsets[2] = u64::MAX - 63;
        assert!(matches!(
            err(&h),
            E::OutOfBounds {
                area: Area::Kthread(2),
                ..
            }
        ));

        let mut h = base;
        h.kthread_offsets[0] = 64;
        assert_eq!(
            err(&h),
            E::Overlap {
                area: Area::Kthread(0),
                offset: 64,
                other: Area::Header
            }
        );

        let mut h = base;
        h.kthread_offsets[2] = h.kthread_offsets[1] + area - 64;
        assert_eq!(
            err(&h),
            E::KthreadOrder {
                index: 2,
                offset: h.kthread_offsets[2],
                previous_end: h.kthread_offsets[1] + area
            }
        );
        let mut h = base;
        h.kthread_offsets.swap(0, 2);
        assert!(matches!(err(&h), E::KthreadOrder { index: 1, .. }));

        let mut h = base;
        h.kthread_offsets[3] = 4096;
        assert_eq!(
            err(&h),
            E::StrayKthreadOffset {
                index: 3,
                found: 4096
            }
        );

        let mut h = base;
        h.packet_area_offset = h.kthread_offsets[2];
        assert_eq!(
            err(&h),
            E::Overlap {
                area: Area::Packets,
                offset: h.kthread_offsets[2],
                other: Area::Kthread(2)
            }
        );
        assert_eq!(
            err(&h).to_string(),
            format!(
                "header.packet_area_offset = {:#x}: the packet area overlaps kthread 2's area",
                h.kthread_offsets[2]
            )
        );

        let mut h = base;
        h.packet_area_offset = 0;
        assert_eq!(
            err(&h),
            E::Overlap {
                area: Area::Packets,
                offset: 0,
                other: Area::Header
            }
        );

        let mut h = base;
        h.packet_area_size = h.region_size;
        assert!(matches!(
            err(&h),
            E::OutOfBounds {
                area: Area::Packets,
                ..
            }
        ));

        let mut h = base;
        h.packet_area_offset += 32;
        assert!(matches!(
            err(&h),
            E::Misaligned {
                area: Area::Packets,
                ..
            }
        ));

        // An empty packet area may sit anywhere in bounds.
        let mut h = base;
        h.packet_area_size = 0;
        h.packet_area_offset = 0;
        assert!(h.validate(h.region_size).is_ok());
    }

    #[test]
    fn builder_errors() {
        assert_eq!(
            RegionBuilder::new(0).layout().unwrap_err(),
            LayoutError::KthreadCount { found: 0 }
        );
        assert_eq!(
            RegionBuilder::new(1000).layout().unwrap_err(),
            LayoutError::KthreadCount { found: 1000 }
        );
        assert_eq!(
            RegionBuilder::new(1)
                .ingress_slots(100)
                .layout()
                .unwrap_err(),
            LayoutError::RingSlots {
                ring: RingKind::Ingress,
                found: 100
            }
        );
        assert_eq!(
            RegionBuilder::new(1)
                .ingress_slots(u32::MAX)
                .layout()
                .unwrap_err(),
            LayoutError::RingSlots {
                ring: RingKind::Ingress,
                found: u32::MAX
            }
        );
        assert_eq!(
            RegionBuilder::new(1)
                .packet_area_size(u64::MAX - 100)
                .layout()
                .unwrap_err(),
            LayoutError::PacketAreaTooLarge {
                size: u64::MAX - 100
            }
        );
        let b = RegionBuilder::new(1);
        let need = b.layout().unwrap().region_size();
        let mut small = vec![0u8; need as usize - 1];
        assert_eq!(
            b.init(&mut small).unwrap_err(),
            LayoutError::BufferTooSmall {
                len: need as usize - 1,
                needed: need
            }
        );
    }
}
