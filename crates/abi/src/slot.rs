//! The value carried by one ring slot, and its checked decoding.
//!
//! A slot is two `u64` words. The descriptor word holds, from the least significant bit:
//!
//! | bits   | field                                   |
//! |--------|-----------------------------------------|
//! | 0..16  | command code ([`Command`])              |
//! | 16..31 | flags (15 bits, see [`flags`](crate::flags)) |
//! | 31     | lap bit, owned by the ring              |
//! | 32..64 | length in bytes, or 0                   |
//!
//! The payload word holds an offset into the packet area or a plain value, depending on the
//! command. Nothing here trusts the words: every accessor that interprets them returns a
//! [`SlotError`] instead of panicking.

use core::fmt;

use crate::command::{Command, RingKind, UnknownCommand};

const FLAGS_SHIFT: u32 = 16;
const LENGTH_SHIFT: u32 = 32;
/// Set by the producer to mark a slot as written in the current lap; see `ring.rs`.
pub(crate) const LAP_BIT: u64 = 1 << 31;
const FLAGS_MASK: u64 = 0x7fff;

/// One ring entry as a value: a descriptor word and a payload word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Slot {
    desc: u64,
    payload: u64,
}

impl Slot {
    /// A slot for `command`. Flag bit 15 does not exist (the ring owns it) and is dropped.
    #[inline]
    pub const fn new(command: Command, flags: u16, length: u32, payload: u64) -> Slot {
        Slot {
            desc: command.code() as u64
                | ((flags as u64 & FLAGS_MASK) << FLAGS_SHIFT)
                | ((length as u64) << LENGTH_SHIFT),
            payload,
        }
    }

    /// A slot naming `length` bytes at `offset` in the packet area.
    #[inline]
    pub const fn packet(command: Command, offset: u64, length: u32) -> Slot {
        Slot::new(command, 0, length, offset)
    }

    /// A slot carrying one value and no length.
    #[inline]
    pub const fn value(command: Command, value: u64) -> Slot {
        Slot::new(command, 0, 0, value)
    }

    /// A slot from raw words, as read from memory. The lap bit is cleared.
    #[inline]
    pub const fn from_raw(desc: u64, payload: u64) -> Slot {
        Slot {
            desc: desc & !LAP_BIT,
            payload,
        }
    }

    /// The raw (descriptor, payload) words, lap bit clear.
    #[inline]
    pub const fn to_raw(self) -> (u64, u64) {
        (self.desc, self.payload)
    }

    /// The command code, unchecked.
    #[inline]
    pub const fn code(&self) -> u16 {
        self.desc as u16
    }

    /// The command, if the code names one.
    #[inline]
    pub fn command(&self) -> Result<Command, SlotError> {
        Command::try_from(self.code())
            .map_err(|UnknownCommand(code)| SlotError::UnknownCommand { code })
    }

    /// The command, if the code names one that belongs on `ring`. This is how iokerneld should
    /// decode what a runtime wrote: a command on the wrong ring is as bad as an unknown one.
    #[inline]
    pub fn command_on(&self, ring: RingKind) -> Result<Command, SlotError> {
        let command = self.command()?;
        if command.ring() == ring {
            Ok(command)
        } else {
            Err(SlotError::WrongRing { command, ring })
        }
    }

    /// The 15 flag bits.
    #[inline]
    pub const fn flags(&self) -> u16 {
        ((self.desc >> FLAGS_SHIFT) & FLAGS_MASK) as u16
    }

    /// The length field.
    #[inline]
    pub const fn length(&self) -> u32 {
        (self.desc >> LENGTH_SHIFT) as u32
    }

    /// The payload word: an offset or a value.
    #[inline]
    pub const fn payload(&self) -> u64 {
        self.payload
    }

    /// The packet this slot names (payload = offset, length = length), if it lies wholly inside
    /// `area`. Does not look at the command; see [`Command::carries_packet`].
    #[inline]
    pub fn packet_in(&self, area: PacketArea) -> Result<PacketRef, SlotError> {
        area.check(self.payload, self.length())
    }
}

/// Where the packet buffers sit in the region. Offsets in slots are relative to its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketArea {
    /// Offset of the area from the start of the region.
    pub offset: u64,
    /// Size of the area in bytes.
    pub size: u64,
}

impl PacketArea {
    /// `length` bytes at `offset` (relative to the area), if they lie wholly inside it.
    #[inline]
    pub fn check(self, offset: u64, length: u32) -> Result<PacketRef, SlotError> {
        // Written as a subtraction so that no offset, however large, can overflow.
        if offset <= self.size && u64::from(length) <= self.size - offset {
            Ok(PacketRef { offset, length })
        } else {
            Err(SlotError::PacketOutOfBounds {
                offset,
                length,
                area_size: self.size,
            })
        }
    }
}

/// A byte range of the packet area, checked against the area's size when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketRef {
    offset: u64,
    length: u32,
}

impl PacketRef {
    /// Offset from the start of the packet area.
    #[inline]
    pub const fn offset(&self) -> u64 {
        self.offset
    }

    /// Length in bytes.
    #[inline]
    pub const fn length(&self) -> u32 {
        self.length
    }
}

/// Why a slot read from shared memory cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// The command code names no command.
    UnknownCommand {
        /// The code found.
        code: u16,
    },
    /// A valid command on a ring it does not belong to.
    WrongRing {
        /// The command found.
        command: Command,
        /// The ring it was read from.
        ring: RingKind,
    },
    /// Offset and length reach outside the packet area.
    PacketOutOfBounds {
        /// Offset found (relative to the packet area).
        offset: u64,
        /// Length found.
        length: u32,
        /// Size of the packet area.
        area_size: u64,
    },
}

impl fmt::Display for SlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SlotError::UnknownCommand { code } => {
                write!(f, "slot command: unknown code 0x{code:04x}")
            }
            SlotError::WrongRing { command, ring } => {
                write!(
                    f,
                    "slot command: {command} does not belong on the {ring} (it belongs on the {})",
                    command.ring()
                )
            }
            SlotError::PacketOutOfBounds {
                offset,
                length,
                area_size,
            } => write!(
                f,
                "slot packet: offset {offset:#x} + length {length} is outside the packet area of \
                 {area_size} bytes"
            ),
        }
    }
}

impl std::error::Error for SlotError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags;

    #[test]
    fn fields_land_where_documented() {
        let s = Slot::new(Command::TxCompletion, flags::DROPPED, 0xdead_beef, 42);
        let (desc, payload) = s.to_raw();
        assert_eq!(desc, 0xdead_beef_0001_0102);
        assert_eq!(payload, 42);
        assert_eq!(s.command(), Ok(Command::TxCompletion));
        assert_eq!(s.flags(), flags::DROPPED);
        assert_eq!(s.length(), 0xdead_beef);
    }

    #[test]
    fn flag_bit_15_is_the_rings() {
        let s = Slot::new(Command::Park, 0xffff, 0, 0);
        assert_eq!(s.flags(), 0x7fff);
        assert_eq!(s.to_raw().0 & LAP_BIT, 0);
        assert_eq!(Slot::from_raw(u64::MAX, 0).to_raw().0, !LAP_BIT);
    }

    #[test]
    fn wrong_ring_and_unknown_codes_are_errors() {
        let s = Slot::value(Command::Park, 0);
        assert_eq!(s.command_on(RingKind::EgressCommand), Ok(Command::Park));
        assert_eq!(
            s.command_on(RingKind::EgressPacket),
            Err(SlotError::WrongRing {
                command: Command::Park,
                ring: RingKind::EgressPacket
            })
        );
        let e = Slot::from_raw(0x0999, 0).command().unwrap_err();
        assert_eq!(e, SlotError::UnknownCommand { code: 0x0999 });
        assert_eq!(e.to_string(), "slot command: unknown code 0x0999");
        assert_eq!(
            Slot::default().command(),
            Err(SlotError::UnknownCommand { code: 0 })
        );
    }

    #[test]
    fn packet_bounds() {
        let area = PacketArea {
            offset: 4096,
            size: 1000,
        };
        let ok = Slot::packet(Command::TxPacket, 900, 100)
            .packet_in(area)
            .unwrap();
        assert_eq!((ok.offset(), ok.length()), (900, 100));
        assert!(
            Slot::packet(Command::TxPacket, 1000, 0)
                .packet_in(area)
                .is_ok()
        );
        for (offset, length) in [(901, 100), (1001, 0), (u64::MAX, 1), (u64::MAX - 10, 20)] {
            let e = Slot::packet(Command::TxPacket, offset, length)
                .packet_in(area)
                .unwrap_err();
            assert_eq!(
                e,
                SlotError::PacketOutOfBounds {
                    offset,
                    length,
                    area_size: 1000
                }
            );
        }
        assert_eq!(
            Slot::packet(Command::TxPacket, 901, 100)
                .packet_in(area)
                .unwrap_err()
                .to_string(),
            "slot packet: offset 0x385 + length 100 is outside the packet area of 1000 bytes"
        );
    }
}
