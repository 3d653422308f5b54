//! ICMP echo request and reply (RFC 792); other ICMP messages are reported as unsupported.

use crate::checksum::{Checksum, checksum};
use crate::error::{BuildError, DropReason, need};

/// Length of the echo header (type, code, checksum, identifier, sequence number).
pub const HEADER_LEN: usize = 8;

const TYPE_ECHO_REPLY: u8 = 0;
const TYPE_ECHO_REQUEST: u8 = 8;

/// Which echo message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EchoKind {
    /// Type 8.
    Request,
    /// Type 0.
    Reply,
}

impl EchoKind {
    /// The ICMP type number.
    pub const fn icmp_type(self) -> u8 {
        match self {
            EchoKind::Request => TYPE_ECHO_REQUEST,
            EchoKind::Reply => TYPE_ECHO_REPLY,
        }
    }
}

/// A borrowed, checksum-verified ICMP echo message.
#[derive(Clone, Copy, Debug)]
pub struct IcmpEcho<'a> {
    header: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> IcmpEcho<'a> {
    /// Parses an IPv4 payload as ICMP echo. The checksum covers all of `msg`, so `msg` must be
    /// exactly the IP payload.
    ///
    /// The checksum is verified before the type is looked at, so that
    /// [`DropReason::UnsupportedIcmp`] counts only intact messages.
    #[inline]
    pub fn parse(msg: &'a [u8]) -> Result<Self, DropReason> {
        let (header, payload) = msg
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(DropReason::Truncated)?;
        if checksum(msg) != 0 {
            return Err(DropReason::BadIcmpChecksum);
        }
        if !matches!(header[0], TYPE_ECHO_REPLY | TYPE_ECHO_REQUEST) || header[1] != 0 {
            return Err(DropReason::UnsupportedIcmp);
        }
        Ok(Self { header, payload })
    }

    /// Request or reply.
    #[inline]
    pub fn kind(&self) -> EchoKind {
        if self.header[0] == TYPE_ECHO_REQUEST {
            EchoKind::Request
        } else {
            EchoKind::Reply
        }
    }

    /// The identifier field.
    #[inline]
    pub fn ident(&self) -> u16 {
        u16::from_be_bytes([self.header[4], self.header[5]])
    }

    /// The sequence number field.
    #[inline]
    pub fn seq(&self) -> u16 {
        u16::from_be_bytes([self.header[6], self.header[7]])
    }

    /// The checksum field as sent.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.header[2], self.header[3]])
    }

    /// Echo data, which a reply must return unchanged.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The header of the reply to this message.
    #[inline]
    pub fn reply_header(&self) -> IcmpEchoHeader {
        IcmpEchoHeader {
            kind: EchoKind::Reply,
            ident: self.ident(),
            seq: self.seq(),
        }
    }
}

/// The fields of an echo header, for building.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpEchoHeader {
    /// Request or reply.
    pub kind: EchoKind,
    /// Identifier.
    pub ident: u16,
    /// Sequence number.
    pub seq: u16,
}

impl IcmpEchoHeader {
    /// Largest payload that fits an IPv4 packet with a 20-byte header.
    pub const MAX_PAYLOAD: usize = crate::ipv4::Ipv4Header::MAX_PAYLOAD - HEADER_LEN;

    /// Writes the header into `msg[..8]`, where `msg[8..8 + payload_len]` already holds the
    /// payload, and fills in the checksum over both; returns the message length.
    #[inline]
    pub fn emit(&self, msg: &mut [u8], payload_len: usize) -> Result<usize, BuildError> {
        if payload_len > Self::MAX_PAYLOAD {
            return Err(BuildError::PayloadTooLarge {
                len: payload_len,
                max: Self::MAX_PAYLOAD,
            });
        }
        let len = HEADER_LEN + payload_len;
        need(msg, len)?;
        let m = &mut msg[..len];
        m[0] = self.kind.icmp_type();
        m[1] = 0;
        m[2..4].fill(0);
        m[4..6].copy_from_slice(&self.ident.to_be_bytes());
        m[6..8].copy_from_slice(&self.seq.to_be_bytes());
        let c = Checksum::new().add_bytes(m).finish();
        m[2..4].copy_from_slice(&c.to_be_bytes());
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(kind: EchoKind, payload: &[u8]) -> ([u8; 64], usize) {
        let mut buf = [0u8; 64];
        buf[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
        let n = IcmpEchoHeader {
            kind,
            ident: 0x1234,
            seq: 7,
        }
        .emit(&mut buf, payload.len())
        .unwrap();
        (buf, n)
    }

    #[test]
    fn request_and_reply_round_trip() {
        let (buf, n) = echo(EchoKind::Request, b"hello, ping");
        assert_eq!(n, 19);
        let m = IcmpEcho::parse(&buf[..n]).unwrap();
        assert_eq!(m.kind(), EchoKind::Request);
        assert_eq!((m.ident(), m.seq()), (0x1234, 7));
        assert_eq!(m.payload(), b"hello, ping");

        let mut out = [0u8; 64];
        out[HEADER_LEN..n].copy_from_slice(m.payload());
        let rn = m.reply_header().emit(&mut out, m.payload().len()).unwrap();
        let r = IcmpEcho::parse(&out[..rn]).unwrap();
        assert_eq!(r.kind(), EchoKind::Reply);
        assert_eq!(
            (r.ident(), r.seq(), r.payload()),
            (0x1234, 7, &b"hello, ping"[..])
        );
    }

    #[test]
    fn known_checksum() {
        // Type 8, code 0, id 1, seq 1, no data: sum 0x0802, checksum 0xf7fd.
        let (buf, n) = {
            let mut b = [0u8; 8];
            let n = IcmpEchoHeader {
                kind: EchoKind::Request,
                ident: 1,
                seq: 1,
            }
            .emit(&mut b, 0)
            .unwrap();
            (b, n)
        };
        assert_eq!(n, 8);
        assert_eq!(&buf[2..4], &[0xf7, 0xfd]);
    }

    #[test]
    fn malformed() {
        let (buf, n) = echo(EchoKind::Reply, b"abc");
        for len in 0..HEADER_LEN {
            assert_eq!(
                IcmpEcho::parse(&buf[..len]).unwrap_err(),
                DropReason::Truncated
            );
        }
        // Dropping a payload byte breaks the checksum over the whole message.
        assert_eq!(
            IcmpEcho::parse(&buf[..n - 1]).unwrap_err(),
            DropReason::BadIcmpChecksum
        );
        let mut bad = buf;
        bad[n - 1] ^= 0x40;
        assert_eq!(
            IcmpEcho::parse(&bad[..n]).unwrap_err(),
            DropReason::BadIcmpChecksum
        );

        // A valid destination-unreachable and an echo with non-zero code are unsupported.
        for (ty, code) in [(3u8, 1u8), (8, 1), (13, 0)] {
            let mut m = [0u8; 12];
            m[0] = ty;
            m[1] = code;
            let c = checksum(&m);
            m[2..4].copy_from_slice(&c.to_be_bytes());
            assert_eq!(
                IcmpEcho::parse(&m).unwrap_err(),
                DropReason::UnsupportedIcmp
            );
        }
        assert!(matches!(
            IcmpEchoHeader {
                kind: EchoKind::Request,
                ident: 0,
                seq: 0
            }
            .emit(&mut [0u8; 10], 3),
            Err(BuildError::BufferTooSmall {
                needed: 11,
                available: 10
            })
        ));
    }
}
