//! The shared-memory contract between `iokerneld` and one Corral runtime.
//!
//! A runtime creates a region (a memfd), lays it out with [`RegionBuilder`] and hands it to
//! iokerneld, which maps it too. The region holds a [`Header`], then per kthread one cache line
//! of [`QueuePositions`] that the core allocator reads, an ingress ring (iokerneld to kthread)
//! and two egress rings (kthread to iokerneld: packets, and commands that must never wait behind
//! packets), and finally the runtime's packet buffers. Everything in it is addressed by offsets,
//! never pointers.
//!
//! The runtime is untrusted. iokerneld snapshots the header once and validates the snapshot
//! ([`Header::validate`]), decodes every slot with checked accessors ([`Slot::command_on`],
//! [`Slot::packet`]), and its ring views never read a position the other side wrote except to
//! decide that a ring is full, where a lie only hurts the liar.
//!
//! How the two sides reach each other is here too: the control messages ([`control`]) and
//! their [`transport`] (the control socket, descriptor passing, the region's memfd and the
//! checks iokerneld makes on it), as are the frame sizes both
//! sides must agree on ([`MAX_FRAME`], [`FRAME_CAPACITY`]).
//!
//! The rings ([`Producer`], [`Consumer`]) are single-producer single-consumer with 16-byte
//! slots. A lap bit in each slot tells the consumer whether the slot is new, so it polls one
//! slot and never reads the producer's position; the producer reads the consumer's position
//! only when its cached copy says the ring is full. Under `--cfg loom` only the rings, slots and
//! command codes are built, on loom's atomics, so that `tests/loom.rs` can model-check them.
//!
//! ```
//! use corral_abi::{Command, OwnedRegion, RegionBuilder, RingKind, Slot};
//!
//! // Runtime side: lay out a region (a memfd mapping in real use; heap memory here).
//! let owned = OwnedRegion::new(&RegionBuilder::new(2).packet_area_size(1 << 16)).unwrap();
//! let runtime = owned.attach().unwrap();
//! let mut tx = runtime.kthread(0).unwrap().egress_packet_producer();
//! tx.try_push(Slot::packet(Command::TxPacket, 0, 60)).unwrap();
//!
//! // iokerneld side: validate, then check everything it reads.
//! let iokernel = owned.raw().attach().unwrap();
//! let mut rx = iokernel.kthread(0).unwrap().egress_packet_consumer();
//! let slot = rx.try_pop().unwrap();
//! assert_eq!(slot.command_on(RingKind::EgressPacket), Ok(Command::TxPacket));
//! let frame = slot.packet_in(iokernel.packet_area()).unwrap();
//! let bytes = iokernel.packet_bytes(frame).unwrap();
//! assert_eq!(bytes.len(), 60);
//! ```

#![warn(missing_docs)]

mod command;
mod ring;
mod slot;

#[cfg(not(loom))]
pub mod control;
#[cfg(not(loom))]
mod layout;
#[cfg(not(loom))]
mod region;
#[cfg(not(loom))]
pub mod transport;

pub use command::{Command, RingKind, UnknownCommand, flags};
pub use ring::{Consumer, Full, Producer, RingError, RingPositions, SlotCell};
pub use slot::{PacketArea, PacketRef, Slot, SlotError};

#[cfg(not(loom))]
pub use layout::{Area, Header, KthreadLayout, Layout, LayoutError, RegionBuilder};
#[cfg(not(loom))]
pub use region::{
    KthreadView, OwnedRegion, QueuePositions, REPORTED_COUNTERS, REPORTED_SLOTS, RawRegion, Region,
    ReportedCounters, reported_index,
};

/// Identifies a Corral region: the bytes `CORRALSM` read as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"CORRALSM");

/// Bumped whenever the meaning or placement of any byte in the region changes; iokerneld
/// refuses any other version rather than guessing. Version 4 retired command code 0x0103;
/// version 5 added the wake and cede words to iokerneld's line of each kthread; version 6 the
/// timer deadline in the runtime's line and the reported counters after the control lines.
pub const LAYOUT_VERSION: u32 = 6;

/// Largest number of kthreads (cores) one runtime may register; it sizes the offset table in
/// the header.
pub const MAX_KTHREADS: usize = 256;

/// Smallest ring, in slots: four 16-byte slots fill one cache line, so slot arrays never share a
/// line with anything else.
pub const MIN_RING_SLOTS: u32 = 4;

/// Largest ring, in slots (1 MiB of slots). Bounds the work a bad header can ask of iokerneld.
pub const MAX_RING_SLOTS: u32 = 1 << 16;

/// Bytes in one ring slot: two `u64` words.
pub const SLOT_SIZE: usize = 16;

/// Alignment of every area and of every cache line that one side writes and the other reads.
pub const CACHE_LINE: usize = 64;

/// Bytes in one packet buffer: a full [`MAX_FRAME`], rounded up so that buffers stay aligned.
/// Runtimes carve their packet area into buffers of this size (every receive buffer posted
/// and every transmit buffer), and iokerneld reads frames from its NIC into buffers of this
/// size, so that an over-long frame is counted rather than silently truncated.
pub const FRAME_CAPACITY: usize = 2048;

/// Longest Ethernet frame either side sends or accepts (no FCS, no VLAN tag): a 1500-byte MTU
/// plus the 14-byte header. iokerneld refuses posted receive buffers smaller than this.
pub const MAX_FRAME: usize = 1514;

const _: () = assert!(MAX_FRAME <= FRAME_CAPACITY);
