//! ARP for IPv4 over Ethernet (RFC 826).
//!
//! An ARP packet is 28 bytes and rare compared to data traffic, so [`ArpPacket::parse`] copies
//! the fields into a small `Copy` value instead of holding a borrowed view.

use core::net::Ipv4Addr;

use crate::error::{BuildError, DropReason, need};
use crate::ethernet::{self, EtherType, EthernetHeader, MacAddr};

/// Length of an IPv4-over-Ethernet ARP packet.
pub const PACKET_LEN: usize = 28;

const HTYPE_ETHERNET: u16 = 1;

/// The ARP opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// Who has `target_ip`?
    Request,
    /// `sender_ip` is at `sender_mac`.
    Reply,
}

impl ArpOp {
    /// The on-wire opcode.
    pub const fn code(self) -> u16 {
        match self {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        }
    }
}

/// A validated IPv4-over-Ethernet ARP request or reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ArpPacket {
    /// Request or reply.
    pub op: ArpOp,
    /// Hardware address of the sender.
    pub sender_mac: MacAddr,
    /// Protocol address of the sender.
    pub sender_ip: Ipv4Addr,
    /// Hardware address of the target (zero in requests).
    pub target_mac: MacAddr,
    /// Protocol address of the target.
    pub target_ip: Ipv4Addr,
}

impl ArpPacket {
    /// Parses the payload of an Ethernet frame of type ARP; trailing padding is ignored.
    pub fn parse(bytes: &[u8]) -> Result<Self, DropReason> {
        let (p, _) = bytes
            .split_first_chunk::<PACKET_LEN>()
            .ok_or(DropReason::Truncated)?;
        let htype = u16::from_be_bytes([p[0], p[1]]);
        let ptype = u16::from_be_bytes([p[2], p[3]]);
        if htype != HTYPE_ETHERNET || ptype != EtherType::IPV4.0 || p[4] != 6 || p[5] != 4 {
            return Err(DropReason::BadArp);
        }
        let op = match u16::from_be_bytes([p[6], p[7]]) {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            _ => return Err(DropReason::BadArp),
        };
        Ok(ArpPacket {
            op,
            sender_mac: MacAddr([p[8], p[9], p[10], p[11], p[12], p[13]]),
            sender_ip: Ipv4Addr::new(p[14], p[15], p[16], p[17]),
            target_mac: MacAddr([p[18], p[19], p[20], p[21], p[22], p[23]]),
            target_ip: Ipv4Addr::new(p[24], p[25], p[26], p[27]),
        })
    }

    /// A request asking who owns `target_ip`.
    pub const fn request(sender_mac: MacAddr, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Self {
        ArpPacket {
            op: ArpOp::Request,
            sender_mac,
            sender_ip,
            target_mac: MacAddr::ZERO,
            target_ip,
        }
    }

    /// The reply to this request from the owner of its target address, who has `our_mac`.
    pub const fn reply(&self, our_mac: MacAddr) -> Self {
        ArpPacket {
            op: ArpOp::Reply,
            sender_mac: our_mac,
            sender_ip: self.target_ip,
            target_mac: self.sender_mac,
            target_ip: self.sender_ip,
        }
    }

    /// Writes the 28-byte packet to the start of `buf`; returns [`PACKET_LEN`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, BuildError> {
        need(buf, PACKET_LEN)?;
        let p = &mut buf[..PACKET_LEN];
        p[0..2].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        p[2..4].copy_from_slice(&EtherType::IPV4.0.to_be_bytes());
        p[4] = 6;
        p[5] = 4;
        p[6..8].copy_from_slice(&self.op.code().to_be_bytes());
        p[8..14].copy_from_slice(&self.sender_mac.0);
        p[14..18].copy_from_slice(&self.sender_ip.octets());
        p[18..24].copy_from_slice(&self.target_mac.0);
        p[24..28].copy_from_slice(&self.target_ip.octets());
        Ok(PACKET_LEN)
    }

    /// Writes a complete Ethernet frame carrying this packet; returns the frame length.
    ///
    /// Requests are broadcast; replies go to the target hardware address. No padding to the
    /// 60-byte Ethernet minimum is added: NICs and TAP devices pad short frames themselves.
    pub fn emit_frame(&self, buf: &mut [u8]) -> Result<usize, BuildError> {
        need(buf, ethernet::HEADER_LEN + PACKET_LEN)?;
        let dst = match self.op {
            ArpOp::Request => MacAddr::BROADCAST,
            ArpOp::Reply => self.target_mac,
        };
        let eth = EthernetHeader {
            dst,
            src: self.sender_mac,
            ethertype: EtherType::ARP,
        };
        let n = eth.emit(buf)?;
        Ok(n + self.emit(&mut buf[n..])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ethernet::EthernetFrame;

    const A_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0a]);
    const B_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
    const A_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    #[test]
    fn request_and_reply_frames() {
        let req = ArpPacket::request(A_MAC, A_IP, B_IP);
        let mut buf = [0u8; 64];
        let n = req.emit_frame(&mut buf).unwrap();
        assert_eq!(n, 42);
        let eth = EthernetFrame::parse(&buf[..n]).unwrap();
        assert_eq!(eth.dst(), MacAddr::BROADCAST);
        assert_eq!(eth.src(), A_MAC);
        assert_eq!(eth.ethertype(), EtherType::ARP);
        let parsed = ArpPacket::parse(eth.payload()).unwrap();
        assert_eq!(parsed, req);
        assert_eq!(parsed.target_mac, MacAddr::ZERO);

        let rep = parsed.reply(B_MAC);
        let n = rep.emit_frame(&mut buf).unwrap();
        let eth = EthernetFrame::parse(&buf[..n]).unwrap();
        assert_eq!(eth.dst(), A_MAC);
        let parsed = ArpPacket::parse(eth.payload()).unwrap();
        assert_eq!(parsed.op, ArpOp::Reply);
        assert_eq!((parsed.sender_mac, parsed.sender_ip), (B_MAC, B_IP));
        assert_eq!((parsed.target_mac, parsed.target_ip), (A_MAC, A_IP));
    }

    #[test]
    fn known_bytes() {
        let mut buf = [0u8; PACKET_LEN];
        ArpPacket::request(A_MAC, A_IP, B_IP)
            .emit(&mut buf)
            .unwrap();
        assert_eq!(&buf[..8], &[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
        assert_eq!(&buf[24..], &[10, 0, 0, 2]);
    }

    #[test]
    fn malformed() {
        let mut good = [0u8; PACKET_LEN + 18];
        ArpPacket::request(A_MAC, A_IP, B_IP)
            .emit(&mut good)
            .unwrap();
        assert!(ArpPacket::parse(&good).is_ok(), "padding is ignored");
        for len in 0..PACKET_LEN {
            assert_eq!(ArpPacket::parse(&good[..len]), Err(DropReason::Truncated));
        }
        for (idx, val) in [
            (1, 6),
            (0, 1),
            (3, 0xdd),
            (2, 0x86),
            (4, 8),
            (5, 16),
            (7, 3),
            (7, 0),
            (6, 1),
        ] {
            let mut bad = good;
            bad[idx] = val;
            assert_eq!(
                ArpPacket::parse(&bad),
                Err(DropReason::BadArp),
                "byte {idx} = {val}"
            );
        }
        let mut small = [0u8; 10];
        assert_eq!(
            ArpPacket::request(A_MAC, A_IP, B_IP).emit_frame(&mut small),
            Err(BuildError::BufferTooSmall {
                needed: 42,
                available: 10
            })
        );
    }
}
