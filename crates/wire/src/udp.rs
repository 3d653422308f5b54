//! UDP (RFC 768) over IPv4.

use core::net::Ipv4Addr;

use crate::checksum::{Checksum, pseudo_header};
use crate::error::{BuildError, DropReason, need};
use crate::ipv4::{Ipv4Header, PROTO_UDP};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A borrowed, validated UDP datagram.
#[derive(Clone, Copy, Debug)]
pub struct UdpDatagram<'a> {
    header: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> UdpDatagram<'a> {
    /// Parses the IPv4 payload `seg` sent from `src` to `dst`, verifying the checksum unless the
    /// sender left it zero (RFC 768 allows that over IPv4).
    #[inline]
    pub fn parse(seg: &'a [u8], src: Ipv4Addr, dst: Ipv4Addr) -> Result<Self, DropReason> {
        let this = Self::parse_unverified(seg)?;
        if this.checksum() != 0 {
            let len = this.length();
            let datagram = &seg[..usize::from(len)];
            if pseudo_header(src, dst, PROTO_UDP, len)
                .add_bytes(datagram)
                .finish()
                != 0
            {
                return Err(DropReason::BadUdpChecksum);
            }
        }
        Ok(this)
    }

    /// Like [`UdpDatagram::parse`] but without the checksum check, for when the NIC has verified
    /// it or only the ports are wanted.
    #[inline]
    pub fn parse_unverified(seg: &'a [u8]) -> Result<Self, DropReason> {
        let (header, _) = seg
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(DropReason::Truncated)?;
        let len = usize::from(u16::from_be_bytes([header[4], header[5]]));
        if len < HEADER_LEN || len > seg.len() {
            return Err(DropReason::BadUdpLength);
        }
        Ok(Self {
            header,
            payload: &seg[HEADER_LEN..len],
        })
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.header[0], self.header[1]])
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.header[2], self.header[3]])
    }

    /// The length field: header plus payload.
    #[inline]
    pub fn length(&self) -> u16 {
        u16::from_be_bytes([self.header[4], self.header[5]])
    }

    /// The checksum field as sent (0 means the sender computed none).
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.header[6], self.header[7]])
    }

    /// The payload, as delimited by the length field.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// The port fields of a UDP header, for building.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpHeader {
    /// Largest payload that fits an IPv4 packet with a 20-byte header.
    pub const MAX_PAYLOAD: usize = Ipv4Header::MAX_PAYLOAD - HEADER_LEN;

    /// Writes the header into `seg[..8]`, where `seg[8..8 + payload_len]` already holds the
    /// payload, with the checksum computed over the pseudo-header from `src` to `dst`; returns
    /// the datagram length.
    ///
    /// A computed checksum of 0 is sent as 0xffff, since 0 on the wire means "no checksum".
    #[inline]
    pub fn emit(
        &self,
        seg: &mut [u8],
        payload_len: usize,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> Result<usize, BuildError> {
        let payload = seg
            .get(HEADER_LEN..HEADER_LEN + payload_len)
            .map_or(Checksum::new(), |p| Checksum::new().add_bytes(p));
        self.emit_summed(seg, payload_len, payload, src, dst)
    }

    /// As [`UdpHeader::emit`], given the payload's sum (`Checksum::new().add_bytes(payload)`),
    /// for a sender that summed the payload where it copied it from.
    pub fn emit_summed(
        &self,
        seg: &mut [u8],
        payload_len: usize,
        payload: Checksum,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> Result<usize, BuildError> {
        if payload_len > Self::MAX_PAYLOAD {
            return Err(BuildError::PayloadTooLarge {
                len: payload_len,
                max: Self::MAX_PAYLOAD,
            });
        }
        let len = HEADER_LEN + payload_len;
        need(seg, len)?;
        let d = &mut seg[..len];
        d[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        d[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        d[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        d[6..8].fill(0);
        let c = match pseudo_header(src, dst, PROTO_UDP, len as u16)
            .add_bytes(&d[..HEADER_LEN])
            .add_sum(payload)
            .finish()
        {
            0 => 0xffff,
            c => c,
        };
        d[6..8].copy_from_slice(&c.to_be_bytes());
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    fn datagram(payload: &[u8]) -> ([u8; 64], usize) {
        let mut buf = [0u8; 64];
        buf[HEADER_LEN..HEADER_LEN + payload.len()].copy_from_slice(payload);
        let n = UdpHeader {
            src_port: 5353,
            dst_port: 53,
        }
        .emit(&mut buf, payload.len(), SRC, DST)
        .unwrap();
        (buf, n)
    }

    #[test]
    fn round_trip() {
        let (buf, n) = datagram(b"query");
        assert_eq!(n, 13);
        let d = UdpDatagram::parse(&buf[..n], SRC, DST).unwrap();
        assert_eq!((d.src_port(), d.dst_port(), d.length()), (5353, 53, 13));
        assert_eq!(d.payload(), b"query");
        assert_ne!(d.checksum(), 0);
        // Bytes after the UDP length (e.g. IP payload longer than the datagram) are not payload.
        let d = UdpDatagram::parse(&buf[..n + 5], SRC, DST).unwrap();
        assert_eq!(d.payload(), b"query");
    }

    #[test]
    fn checksum_covers_pseudo_header() {
        let (buf, n) = datagram(b"x");
        assert_eq!(
            UdpDatagram::parse(&buf[..n], SRC, Ipv4Addr::new(10, 0, 0, 3)).unwrap_err(),
            DropReason::BadUdpChecksum
        );
        assert_eq!(
            UdpDatagram::parse(&buf[..n], DST, SRC).unwrap().payload(),
            b"x"
        );
    }

    #[test]
    fn zero_checksum_means_unchecked() {
        let (mut buf, n) = datagram(b"abcd");
        buf[6..8].fill(0);
        buf[9] ^= 0xff;
        assert!(UdpDatagram::parse(&buf[..n], SRC, DST).is_ok());
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // With a zero 2-byte payload the checksum is the complement of the other words' sum;
        // carrying that checksum value as the payload word instead makes the total sum 0xffff,
        // so the computed checksum becomes 0.
        let (buf, n) = datagram(&[0, 0]);
        let word = u16::from_be_bytes([buf[6], buf[7]]);
        let (buf, n2) = datagram(&word.to_be_bytes());
        assert_eq!(n, n2);
        assert_eq!(&buf[6..8], &[0xff, 0xff]);
        let d = UdpDatagram::parse(&buf[..n], SRC, DST).unwrap();
        assert_eq!(d.checksum(), 0xffff);
    }

    #[test]
    fn malformed() {
        let (buf, n) = datagram(b"payload!");
        for len in 0..HEADER_LEN {
            assert_eq!(
                UdpDatagram::parse(&buf[..len], SRC, DST).unwrap_err(),
                DropReason::Truncated
            );
        }
        // Length field longer than what IP delivered.
        assert_eq!(
            UdpDatagram::parse(&buf[..n - 1], SRC, DST).unwrap_err(),
            DropReason::BadUdpLength
        );
        for lie in [0u16, 7] {
            let mut b = buf;
            b[4..6].copy_from_slice(&lie.to_be_bytes());
            assert_eq!(
                UdpDatagram::parse(&b[..n], SRC, DST).unwrap_err(),
                DropReason::BadUdpLength
            );
        }
        let mut b = buf;
        b[n - 1] ^= 1;
        assert_eq!(
            UdpDatagram::parse(&b[..n], SRC, DST).unwrap_err(),
            DropReason::BadUdpChecksum
        );
        // A shorter length field that still fits is honoured, and caught by the checksum.
        let mut b = buf;
        b[4..6].copy_from_slice(&10u16.to_be_bytes());
        assert_eq!(
            UdpDatagram::parse(&b[..n], SRC, DST).unwrap_err(),
            DropReason::BadUdpChecksum
        );
        assert_eq!(
            UdpDatagram::parse_unverified(&b[..n]).unwrap().payload(),
            b"pa"
        );
        assert!(matches!(
            UdpHeader {
                src_port: 1,
                dst_port: 2
            }
            .emit(&mut [0u8; 64], UdpHeader::MAX_PAYLOAD + 1, SRC, DST),
            Err(BuildError::PayloadTooLarge { .. })
        ));
    }
}
