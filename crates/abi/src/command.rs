//! Command codes carried in a slot's descriptor word.
//!
//! The high byte of a code names the ring the command travels on, so a slot read from the wrong
//! ring is rejected without a lookup table. Code 0 is never valid: a zeroed slot (fresh memory)
//! can never decode as a command.

use core::fmt;

/// Which ring a slot travels on, and so which side produced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingKind {
    /// iokerneld to kthread: received packets, completions, core grants and requests.
    Ingress,
    /// kthread to iokerneld: frames to transmit.
    EgressPacket,
    /// kthread to iokerneld: scheduling commands, kept off the packet ring so that a backlog of
    /// frames never delays a park.
    EgressCommand,
}

impl RingKind {
    const fn tag(self) -> u16 {
        match self {
            RingKind::Ingress => 0x01,
            RingKind::EgressPacket => 0x02,
            RingKind::EgressCommand => 0x03,
        }
    }
}

impl fmt::Display for RingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RingKind::Ingress => "ingress ring",
            RingKind::EgressPacket => "egress packet ring",
            RingKind::EgressCommand => "egress command ring",
        })
    }
}

/// Every command that may appear in a slot. `payload` and `length` refer to the slot's payload
/// word and length field (see [`Slot`](crate::Slot)); offsets are relative to the start of the
/// packet area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Command {
    /// Ingress. A frame was written into the runtime's packet area. `payload`: its offset,
    /// `length`: its length in bytes. The buffer is one the runtime posted with
    /// [`RxBufferPost`](Command::RxBufferPost) and is the runtime's again.
    RxPacket = 0x0101,
    /// Ingress. iokerneld is done with a buffer sent by [`TxPacket`](Command::TxPacket), which
    /// the runtime may reuse. `payload`: the buffer's offset. Flag [`flags::DROPPED`]: the
    /// frame was not sent (failed validation or the NIC queue was full).
    TxCompletion = 0x0102,
    // 0x0103 was `Join` (take over another kthread's work), which no side ever sent; it was
    // removed in layout version 4 and now decodes as an unknown command like any unused code.
    /// Ingress. The kthread now holds a core and is about to be (or was) woken on it.
    /// `payload`: the core's id, which the runtime records for its statistics and tests.
    Grant = 0x0104,
    /// Ingress. iokerneld wants this kthread's core back. It is pushed before the preemption
    /// signal is sent, so that the scheduler, to which the signal returns the kthread, finds it
    /// on the ring; a signal with no `Preempt` behind it only sends the running uthread through
    /// the scheduler. The kthread answers with [`Yielded`](Command::Yielded) once it has
    /// parked.
    Preempt = 0x0105,

    /// Egress packet. Transmit a frame. `payload`: its offset, `length`: its length. The buffer
    /// belongs to iokerneld until the matching [`TxCompletion`](Command::TxCompletion).
    TxPacket = 0x0201,

    /// Egress command. The kthread found no work and is about to sleep on its wake word; its
    /// core may go to someone else.
    Park = 0x0301,
    /// Egress command. The kthread parked because of [`Preempt`](Command::Preempt); the core is
    /// free now. Flag [`flags::HAS_WORK`]: it left runnable work behind, so the runtime still
    /// wants the core it had.
    Yielded = 0x0302,
    /// Egress command. Earliest timer of the whole runtime, sent by the last of its kthreads to
    /// park, so that iokerneld wakes the runtime at that deadline while all its kthreads are
    /// parked. `payload`: the deadline in `CLOCK_MONOTONIC` nanoseconds, `u64::MAX` for none.
    TimerDeadline = 0x0303,
    /// Egress command. A free buffer iokerneld may fill with one received frame. `payload`: its
    /// offset, `length`: its capacity in bytes. Posting keeps allocation inside the runtime:
    /// iokerneld only checks bounds, never manages the runtime's memory.
    RxBufferPost = 0x0304,
}

/// Flag bits in a slot's descriptor. Bit 15 is the ring's lap bit and is never visible here.
pub mod flags {
    /// On [`TxCompletion`](crate::Command::TxCompletion): the frame was not sent.
    pub const DROPPED: u16 = 1 << 0;
    /// On [`Yielded`](crate::Command::Yielded): runnable work was left behind.
    pub const HAS_WORK: u16 = 1 << 0;
    /// On [`Park`](crate::Command::Park) by a runtime's last running kthread: a TCP segment
    /// that carries only an acknowledgment may wait on the ring until the runtime runs for
    /// another reason (or iokerneld's bound on the wait passes), instead of waking it.
    pub const ACKS_CAN_WAIT: u16 = 1 << 0;
    /// All flag bits a slot can carry.
    pub const ALL: u16 = 0x7fff;
}

impl Command {
    /// Every command, in code order.
    pub const ALL: [Command; 9] = [
        Command::RxPacket,
        Command::TxCompletion,
        Command::Grant,
        Command::Preempt,
        Command::TxPacket,
        Command::Park,
        Command::Yielded,
        Command::TimerDeadline,
        Command::RxBufferPost,
    ];

    /// The wire code.
    #[inline]
    pub const fn code(self) -> u16 {
        self as u16
    }

    /// The ring this command travels on.
    #[inline]
    pub const fn ring(self) -> RingKind {
        let tag = self.code() >> 8;
        if tag == RingKind::Ingress.tag() {
            RingKind::Ingress
        } else if tag == RingKind::EgressPacket.tag() {
            RingKind::EgressPacket
        } else {
            RingKind::EgressCommand
        }
    }

    /// Whether `payload` and `length` name a region of the packet area that must be
    /// bounds-checked before use.
    #[inline]
    pub const fn carries_packet(self) -> bool {
        matches!(
            self,
            Command::RxPacket | Command::TxPacket | Command::RxBufferPost
        )
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?} (0x{:04x})", self.code())
    }
}

/// A code that names no [`Command`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownCommand(pub u16);

impl fmt::Display for UnknownCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown command code 0x{:04x}", self.0)
    }
}

impl std::error::Error for UnknownCommand {}

impl TryFrom<u16> for Command {
    type Error = UnknownCommand;

    #[inline]
    fn try_from(code: u16) -> Result<Self, UnknownCommand> {
        Ok(match code {
            0x0101 => Command::RxPacket,
            0x0102 => Command::TxCompletion,
            0x0104 => Command::Grant,
            0x0105 => Command::Preempt,
            0x0201 => Command::TxPacket,
            0x0301 => Command::Park,
            0x0302 => Command::Yielded,
            0x0303 => Command::TimerDeadline,
            0x0304 => Command::RxBufferPost,
            _ => return Err(UnknownCommand(code)),
        })
    }
}

impl From<Command> for u16 {
    #[inline]
    fn from(c: Command) -> u16 {
        c.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_names_its_ring() {
        for c in Command::ALL {
            assert_eq!(Command::try_from(c.code()), Ok(c));
            assert_eq!(c.code() >> 8, c.ring().tag());
        }
    }

    #[test]
    fn zero_and_neighbours_are_rejected() {
        // 0x0103 is the retired `Join`: a peer still sending it gets a clear refusal.
        for code in [
            0, 0x0100, 0x0103, 0x0106, 0x0200, 0x0202, 0x0300, 0x0305, 0xffff,
        ] {
            assert_eq!(Command::try_from(code), Err(UnknownCommand(code)));
        }
        let known = (0..=u16::MAX)
            .filter(|&c| Command::try_from(c).is_ok())
            .count();
        assert_eq!(known, Command::ALL.len());
    }

    #[test]
    fn display_names_the_code() {
        assert_eq!(Command::Park.to_string(), "Park (0x0301)");
        assert_eq!(
            UnknownCommand(0x1234).to_string(),
            "unknown command code 0x1234"
        );
        assert_eq!(
            Command::try_from(0x0103).unwrap_err().to_string(),
            "unknown command code 0x0103"
        );
    }
}
