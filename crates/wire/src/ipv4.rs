//! IPv4 headers (RFC 791).

use core::net::Ipv4Addr;

use crate::checksum::{self, checksum};
use crate::error::{BuildError, DropReason, need};

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Largest total length the 16-bit field can express.
pub const MAX_TOTAL_LEN: usize = u16::MAX as usize;

/// Protocol number of ICMP.
pub const PROTO_ICMP: u8 = 1;
/// Protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// Protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A borrowed IPv4 packet whose header has been fully validated.
#[derive(Clone, Copy, Debug)]
pub struct Ipv4Packet<'a> {
    fixed: &'a [u8; MIN_HEADER_LEN],
    header: &'a [u8],
    payload: &'a [u8],
}

impl<'a> Ipv4Packet<'a> {
    /// Validates the header at the start of `bytes`.
    ///
    /// Bytes beyond the total length (Ethernet padding of short frames) are ignored. Options are
    /// accepted and skipped. Fragments are rejected with [`DropReason::Fragment`] because nothing
    /// downstream reassembles them; the checksum is checked first so that a corrupted header is
    /// counted as corrupted, not as a fragment.
    #[inline]
    pub fn parse(bytes: &'a [u8]) -> Result<Self, DropReason> {
        let (fixed, _) = bytes
            .split_first_chunk::<MIN_HEADER_LEN>()
            .ok_or(DropReason::Truncated)?;
        if fixed[0] >> 4 != 4 {
            return Err(DropReason::BadIpVersion);
        }
        let header_len = usize::from(fixed[0] & 0x0f) * 4;
        if header_len < MIN_HEADER_LEN || header_len > bytes.len() {
            return Err(DropReason::BadIhl);
        }
        let total_len = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
        if total_len < header_len || total_len > bytes.len() {
            return Err(DropReason::BadTotalLength);
        }
        let header = &bytes[..header_len];
        if checksum(header) != 0 {
            return Err(DropReason::BadIpChecksum);
        }
        if u16::from_be_bytes([fixed[6], fixed[7]]) & (FLAG_MF | OFFSET_MASK) != 0 {
            return Err(DropReason::Fragment);
        }
        Ok(Self {
            fixed,
            header,
            payload: &bytes[header_len..total_len],
        })
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.header.len()
    }

    /// The type-of-service byte (DSCP and ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.fixed[1]
    }

    /// The total length field: header plus payload.
    #[inline]
    pub fn total_len(&self) -> u16 {
        u16::from_be_bytes([self.fixed[2], self.fixed[3]])
    }

    /// The identification field.
    #[inline]
    pub fn ident(&self) -> u16 {
        u16::from_be_bytes([self.fixed[4], self.fixed[5]])
    }

    /// Whether the don't-fragment flag is set.
    #[inline]
    pub fn dont_fragment(&self) -> bool {
        u16::from_be_bytes([self.fixed[6], self.fixed[7]]) & FLAG_DF != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.fixed[8]
    }

    /// The payload protocol number (see the `PROTO_*` constants).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.fixed[9]
    }

    /// The header checksum field as sent.
    #[inline]
    pub fn header_checksum(&self) -> u16 {
        u16::from_be_bytes([self.fixed[10], self.fixed[11]])
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        let f = self.fixed;
        Ipv4Addr::new(f[12], f[13], f[14], f[15])
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        let f = self.fixed;
        Ipv4Addr::new(f[16], f[17], f[18], f[19])
    }

    /// The raw option bytes (empty for a 20-byte header), for callers that count or log them.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.header[MIN_HEADER_LEN..]
    }

    /// The whole header, options included.
    #[inline]
    pub fn header(&self) -> &'a [u8] {
        self.header
    }

    /// The payload, exactly `total_len - header_len` bytes.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// The fields of an option-less IPv4 header, for building.
///
/// Built headers always set DF: the stack sizes segments to the path MTU itself and never
/// fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Header {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol (see the `PROTO_*` constants).
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// Identification field.
    pub ident: u16,
    /// Type-of-service byte (DSCP and ECN).
    pub tos: u8,
    /// Length of the payload that will follow the header.
    pub payload_len: usize,
}

impl Ipv4Header {
    /// Largest payload an option-less header can describe.
    pub const MAX_PAYLOAD: usize = MAX_TOTAL_LEN - MIN_HEADER_LEN;

    /// Writes the 20-byte header, checksum included, to the start of `buf`; returns 20.
    ///
    /// `buf` needs room for the header only; the payload may be written before or after.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, BuildError> {
        if self.payload_len > Self::MAX_PAYLOAD {
            return Err(BuildError::PayloadTooLarge {
                len: self.payload_len,
                max: Self::MAX_PAYLOAD,
            });
        }
        need(buf, MIN_HEADER_LEN)?;
        let h = &mut buf[..MIN_HEADER_LEN];
        let total = (MIN_HEADER_LEN + self.payload_len) as u16;
        h[0] = 0x45;
        h[1] = self.tos;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&self.ident.to_be_bytes());
        h[6..8].copy_from_slice(&FLAG_DF.to_be_bytes());
        h[8] = self.ttl;
        h[9] = self.protocol;
        h[10..12].fill(0);
        h[12..16].copy_from_slice(&self.src.octets());
        h[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(MIN_HEADER_LEN)
    }
}

fn header_mut(buf: &mut [u8]) -> Result<&mut [u8; MIN_HEADER_LEN], BuildError> {
    let available = buf.len();
    buf.first_chunk_mut::<MIN_HEADER_LEN>()
        .ok_or(BuildError::BufferTooSmall {
            needed: MIN_HEADER_LEN,
            available,
        })
}

/// Rewrites the TTL of the header at the start of `buf`, updating its checksum incrementally.
pub fn set_ttl(buf: &mut [u8], ttl: u8) -> Result<(), BuildError> {
    let h = header_mut(buf)?;
    let old = u16::from_be_bytes([h[10], h[11]]);
    let new = checksum::update_ttl(old, h[9], h[8], ttl);
    h[8] = ttl;
    h[10..12].copy_from_slice(&new.to_be_bytes());
    Ok(())
}

fn set_addr(buf: &mut [u8], at: usize, addr: Ipv4Addr) -> Result<(), BuildError> {
    let h = header_mut(buf)?;
    let old_addr = Ipv4Addr::new(h[at], h[at + 1], h[at + 2], h[at + 3]);
    let old = u16::from_be_bytes([h[10], h[11]]);
    let new = checksum::update_ipv4_addr(old, old_addr, addr);
    h[at..at + 4].copy_from_slice(&addr.octets());
    h[10..12].copy_from_slice(&new.to_be_bytes());
    Ok(())
}

/// Rewrites the source address of the header at the start of `buf`, updating its checksum
/// incrementally. A TCP or UDP checksum covering the address must be updated separately with
/// [`checksum::update_ipv4_addr`].
pub fn set_src(buf: &mut [u8], addr: Ipv4Addr) -> Result<(), BuildError> {
    set_addr(buf, 12, addr)
}

/// Rewrites the destination address; see [`set_src`].
pub fn set_dst(buf: &mut [u8], addr: Ipv4Addr) -> Result<(), BuildError> {
    set_addr(buf, 16, addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(payload_len: usize) -> [u8; 64] {
        let mut buf = [0u8; 64];
        Ipv4Header {
            src: Ipv4Addr::new(192, 168, 1, 10),
            dst: Ipv4Addr::new(10, 9, 8, 7),
            protocol: PROTO_UDP,
            ttl: 64,
            ident: 0xbeef,
            tos: 0x10,
            payload_len,
        }
        .emit(&mut buf)
        .unwrap();
        buf
    }

    /// Recomputes the checksum after a test edits header fields, so that only the edited field
    /// is wrong.
    fn refresh_checksum(h: &mut [u8]) {
        let hl = usize::from(h[0] & 0xf) * 4;
        h[10..12].fill(0);
        let c = checksum(&h[..hl]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn build_then_parse() {
        let buf = sample(30);
        let p = Ipv4Packet::parse(&buf[..50]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 50);
        assert_eq!(p.tos(), 0x10);
        assert_eq!(p.ident(), 0xbeef);
        assert!(p.dont_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), PROTO_UDP);
        assert_eq!(p.src(), Ipv4Addr::new(192, 168, 1, 10));
        assert_eq!(p.dst(), Ipv4Addr::new(10, 9, 8, 7));
        assert!(p.options().is_empty());
        assert_eq!(p.payload().len(), 30);
        assert_eq!(checksum(p.header()), 0);
    }

    #[test]
    fn trailing_padding_ignored() {
        let buf = sample(6);
        let p = Ipv4Packet::parse(&buf).unwrap();
        assert_eq!(p.payload().len(), 6);
    }

    #[test]
    fn options_are_skipped() {
        let mut buf = sample(8);
        // Shift in 8 bytes of options: NOP, NOP, NOP, NOP, then an end-of-list padded word.
        buf.copy_within(20..28, 28);
        buf[20..28].copy_from_slice(&[1, 1, 1, 1, 0, 0, 0, 0]);
        buf[0] = 0x47;
        buf[2..4].copy_from_slice(&36u16.to_be_bytes());
        refresh_checksum(&mut buf);
        let p = Ipv4Packet::parse(&buf).unwrap();
        assert_eq!(p.header_len(), 28);
        assert_eq!(p.options(), &[1, 1, 1, 1, 0, 0, 0, 0]);
        assert_eq!(p.payload().len(), 8);
    }

    #[test]
    fn truncated() {
        let buf = sample(0);
        for len in 0..MIN_HEADER_LEN {
            assert_eq!(
                Ipv4Packet::parse(&buf[..len]).unwrap_err(),
                DropReason::Truncated
            );
        }
        assert!(Ipv4Packet::parse(&buf[..20]).is_ok());
    }

    #[test]
    fn bad_version() {
        for v in [0u8, 6, 15] {
            let mut buf = sample(0);
            buf[0] = (v << 4) | 5;
            refresh_checksum(&mut buf);
            assert_eq!(
                Ipv4Packet::parse(&buf).unwrap_err(),
                DropReason::BadIpVersion
            );
        }
    }

    #[test]
    fn bad_ihl() {
        for ihl in 0..5u8 {
            let mut buf = sample(0);
            buf[0] = 0x40 | ihl;
            assert_eq!(
                Ipv4Packet::parse(&buf).unwrap_err(),
                DropReason::BadIhl,
                "ihl {ihl}"
            );
        }
        // IHL claims 60 bytes but only 40 are present.
        let mut buf = sample(20);
        buf[0] = 0x4f;
        refresh_checksum(&mut buf);
        assert_eq!(
            Ipv4Packet::parse(&buf[..40]).unwrap_err(),
            DropReason::BadIhl
        );
    }

    #[test]
    fn lying_total_length() {
        let buf = sample(30);
        // Longer than the bytes present.
        assert_eq!(
            Ipv4Packet::parse(&buf[..49]).unwrap_err(),
            DropReason::BadTotalLength
        );
        // Shorter than the header.
        for total in [0u16, 19] {
            let mut b = sample(0);
            b[2..4].copy_from_slice(&total.to_be_bytes());
            refresh_checksum(&mut b);
            assert_eq!(
                Ipv4Packet::parse(&b).unwrap_err(),
                DropReason::BadTotalLength
            );
        }
        // Shorter than an options-bearing header.
        let mut b = sample(0);
        b[0] = 0x46;
        b[2..4].copy_from_slice(&22u16.to_be_bytes());
        refresh_checksum(&mut b);
        assert_eq!(
            Ipv4Packet::parse(&b).unwrap_err(),
            DropReason::BadTotalLength
        );
    }

    #[test]
    fn bad_checksum() {
        let mut buf = sample(0);
        buf[11] ^= 1;
        assert_eq!(
            Ipv4Packet::parse(&buf).unwrap_err(),
            DropReason::BadIpChecksum
        );
        let mut buf = sample(0);
        buf[15] ^= 0x80;
        assert_eq!(
            Ipv4Packet::parse(&buf).unwrap_err(),
            DropReason::BadIpChecksum
        );
    }

    #[test]
    fn fragments() {
        for (flags_off, what) in [
            (0x2000u16, "MF"),
            (0x0001, "offset 8"),
            (0x3fff, "DF|MF|max"),
            (0x2001, "MF and offset"),
        ] {
            let mut buf = sample(8);
            buf[6..8].copy_from_slice(&flags_off.to_be_bytes());
            refresh_checksum(&mut buf);
            assert_eq!(
                Ipv4Packet::parse(&buf).unwrap_err(),
                DropReason::Fragment,
                "{what}"
            );
        }
        // DF alone, and DF clear, are not fragments.
        for flags_off in [0x4000u16, 0] {
            let mut buf = sample(8);
            buf[6..8].copy_from_slice(&flags_off.to_be_bytes());
            refresh_checksum(&mut buf);
            let p = Ipv4Packet::parse(&buf).unwrap();
            assert_eq!(p.dont_fragment(), flags_off != 0);
        }
    }

    #[test]
    fn oversized_payload_refused() {
        let h = Ipv4Header {
            src: Ipv4Addr::LOCALHOST,
            dst: Ipv4Addr::LOCALHOST,
            protocol: PROTO_TCP,
            ttl: 1,
            ident: 0,
            tos: 0,
            payload_len: Ipv4Header::MAX_PAYLOAD + 1,
        };
        assert!(matches!(
            h.emit(&mut [0u8; 20]),
            Err(BuildError::PayloadTooLarge { .. })
        ));
        let h = Ipv4Header {
            payload_len: Ipv4Header::MAX_PAYLOAD,
            ..h
        };
        assert_eq!(h.emit(&mut [0u8; 20]), Ok(20));
        assert!(matches!(
            h.emit(&mut [0u8; 19]),
            Err(BuildError::BufferTooSmall { .. })
        ));
    }

    #[test]
    fn rewrites_keep_checksum_valid() {
        let mut buf = sample(10);
        set_ttl(&mut buf, 1).unwrap();
        set_src(&mut buf, Ipv4Addr::new(172, 16, 0, 1)).unwrap();
        set_dst(&mut buf, Ipv4Addr::new(255, 255, 255, 255)).unwrap();
        let p = Ipv4Packet::parse(&buf).unwrap();
        assert_eq!(p.ttl(), 1);
        assert_eq!(p.src(), Ipv4Addr::new(172, 16, 0, 1));
        assert_eq!(p.dst(), Ipv4Addr::BROADCAST);
        let incremental = p.header_checksum();
        let mut copy = buf;
        refresh_checksum(&mut copy);
        assert_eq!(u16::from_be_bytes([copy[10], copy[11]]), incremental);
        assert!(set_ttl(&mut buf[..19], 3).is_err());
    }
}
