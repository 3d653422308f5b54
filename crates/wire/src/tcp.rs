//! TCP header view and builder (RFC 9293) with the options of RFC 7323 and RFC 2018.
//!
//! The view validates the option list once in `parse`, so iterating it later cannot fail and the
//! state machine never has to handle a malformed option.

use core::fmt;
use core::net::Ipv4Addr;

use crate::checksum::{Checksum, pseudo_header};
use crate::error::{BuildError, DropReason, need};
use crate::ipv4::{Ipv4Header, PROTO_TCP};

/// Length of a header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Longest header the 4-bit data offset can describe.
pub const MAX_HEADER_LEN: usize = 60;

const KIND_EOL: u8 = 0;
const KIND_NOP: u8 = 1;
const KIND_MSS: u8 = 2;
const KIND_WSCALE: u8 = 3;
const KIND_SACK_PERMITTED: u8 = 4;
const KIND_SACK: u8 = 5;
const KIND_TIMESTAMPS: u8 = 8;

/// The eight control bits of a TCP header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN echo (RFC 3168).
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced (RFC 3168).
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// Whether every bit of `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        if self.0 == 0 {
            return f.write_str("(none)");
        }
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// The timestamps option (RFC 7323 §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timestamps {
    /// The sender's clock.
    pub tsval: u32,
    /// The echoed peer clock.
    pub tsecr: u32,
}

/// The SACK blocks of a SACK option (RFC 2018), as `(left edge, right edge)` pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SackBlocks<'a>(&'a [u8]);

impl Iterator for SackBlocks<'_> {
    type Item = (u32, u32);

    fn next(&mut self) -> Option<(u32, u32)> {
        let (block, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        let [a, b, c, d, e, f, g, h] = *block;
        Some((
            u32::from_be_bytes([a, b, c, d]),
            u32::from_be_bytes([e, f, g, h]),
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.0.len() / 8;
        (n, Some(n))
    }
}

impl ExactSizeIterator for SackBlocks<'_> {}

/// One TCP option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// Maximum segment size.
    Mss(u16),
    /// Window scale shift count, as sent (RFC 7323 says to treat values above 14 as 14).
    WindowScale(u8),
    /// SACK permitted.
    SackPermitted,
    /// Selective acknowledgment blocks.
    Sack(SackBlocks<'a>),
    /// Timestamps.
    Timestamps(Timestamps),
    /// An option this crate does not interpret.
    Unknown {
        /// The option kind.
        kind: u8,
        /// Its data, after the kind and length bytes.
        data: &'a [u8],
    },
}

/// Splits the next option off `opts`: `None` at the end of the list, `Err` if malformed.
#[inline]
fn next_option<'a>(opts: &mut &'a [u8]) -> Option<Result<TcpOption<'a>, ()>> {
    loop {
        let (&kind, rest) = opts.split_first()?;
        match kind {
            KIND_EOL => {
                *opts = &[];
                return None;
            }
            KIND_NOP => *opts = rest,
            _ => break,
        }
    }
    let all: &'a [u8] = opts;
    let Some(&len) = all.get(1) else {
        return Some(Err(()));
    };
    let len = usize::from(len);
    if len < 2 || len > all.len() {
        return Some(Err(()));
    }
    let (kind, data) = (all[0], &all[2..len]);
    *opts = &all[len..];
    let opt = match (kind, data) {
        (KIND_MSS, &[a, b]) => TcpOption::Mss(u16::from_be_bytes([a, b])),
        (KIND_WSCALE, &[s]) => TcpOption::WindowScale(s),
        (KIND_SACK_PERMITTED, &[]) => TcpOption::SackPermitted,
        (KIND_SACK, d) if !d.is_empty() && d.len() % 8 == 0 => TcpOption::Sack(SackBlocks(d)),
        (KIND_TIMESTAMPS, &[a, b, c, d, e, f, g, h]) => TcpOption::Timestamps(Timestamps {
            tsval: u32::from_be_bytes([a, b, c, d]),
            tsecr: u32::from_be_bytes([e, f, g, h]),
        }),
        (KIND_MSS | KIND_WSCALE | KIND_SACK_PERMITTED | KIND_SACK | KIND_TIMESTAMPS, _) => {
            return Some(Err(()));
        }
        (kind, data) => TcpOption::Unknown { kind, data },
    };
    Some(Ok(opt))
}

/// Iterator over the options of a parsed segment; NOPs and the end-of-list marker are skipped.
#[derive(Clone, Debug)]
pub struct TcpOptions<'a>(&'a [u8]);

impl<'a> Iterator for TcpOptions<'a> {
    type Item = TcpOption<'a>;

    fn next(&mut self) -> Option<TcpOption<'a>> {
        let mut rest = self.0;
        let item = next_option(&mut rest);
        self.0 = rest;
        // Options were validated by `TcpSegment::parse`; stopping on an error keeps this
        // iterator panic-free even so.
        match item {
            Some(Ok(o)) => Some(o),
            _ => {
                self.0 = &[];
                None
            }
        }
    }
}

/// A borrowed TCP segment with a validated header.
#[derive(Clone, Copy, Debug)]
pub struct TcpSegment<'a> {
    fixed: &'a [u8; MIN_HEADER_LEN],
    options: &'a [u8],
    payload: &'a [u8],
}

impl<'a> TcpSegment<'a> {
    /// Parses the IPv4 payload `seg` sent from `src` to `dst`, verifying the checksum.
    #[inline]
    pub fn parse(seg: &'a [u8], src: Ipv4Addr, dst: Ipv4Addr) -> Result<Self, DropReason> {
        let this = Self::parse_unverified(seg)?;
        if !verify_checksum(seg, src, dst) {
            return Err(DropReason::BadTcpChecksum);
        }
        Ok(this)
    }

    /// Like [`TcpSegment::parse`] but without the checksum check, for when the NIC has verified
    /// it or only the ports are wanted.
    #[inline]
    pub fn parse_unverified(seg: &'a [u8]) -> Result<Self, DropReason> {
        let (fixed, _) = seg
            .split_first_chunk::<MIN_HEADER_LEN>()
            .ok_or(DropReason::Truncated)?;
        let header_len = usize::from(fixed[12] >> 4) * 4;
        if header_len < MIN_HEADER_LEN || header_len > seg.len() {
            return Err(DropReason::BadTcpHeader);
        }
        let options = &seg[MIN_HEADER_LEN..header_len];
        let mut rest = options;
        while let Some(opt) = next_option(&mut rest) {
            if opt.is_err() {
                return Err(DropReason::BadTcpHeader);
            }
        }
        Ok(Self {
            fixed,
            options,
            payload: &seg[header_len..],
        })
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.fixed[0], self.fixed[1]])
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.fixed[2], self.fixed[3]])
    }

    /// Sequence number.
    #[inline]
    pub fn seq(&self) -> u32 {
        let f = self.fixed;
        u32::from_be_bytes([f[4], f[5], f[6], f[7]])
    }

    /// Acknowledgment number (meaningful only with ACK set).
    #[inline]
    pub fn ack(&self) -> u32 {
        let f = self.fixed;
        u32::from_be_bytes([f[8], f[9], f[10], f[11]])
    }

    /// Header length in bytes, from the data offset field.
    #[inline]
    pub fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Control bits.
    #[inline]
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.fixed[13])
    }

    /// Receive window, unscaled.
    #[inline]
    pub fn window(&self) -> u16 {
        u16::from_be_bytes([self.fixed[14], self.fixed[15]])
    }

    /// The checksum field as sent.
    #[inline]
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.fixed[16], self.fixed[17]])
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        u16::from_be_bytes([self.fixed[18], self.fixed[19]])
    }

    /// The options, already validated.
    #[inline]
    pub fn options(&self) -> TcpOptions<'a> {
        TcpOptions(self.options)
    }

    /// The raw option bytes.
    #[inline]
    pub fn option_bytes(&self) -> &'a [u8] {
        self.options
    }

    /// Segment data after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// Whether `seg` (the whole IPv4 payload) carries a correct TCP checksum from `src` to `dst`.
#[inline]
pub fn verify_checksum(seg: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> bool {
    // Longer than any IPv4 payload: the length cannot be represented, so it cannot verify.
    let Ok(len) = u16::try_from(seg.len()) else {
        return false;
    };
    pseudo_header(src, dst, PROTO_TCP, len)
        .add_bytes(seg)
        .finish()
        == 0
}

/// The checksum for `seg` (the whole IPv4 payload) from `src` to `dst`, with the checksum field
/// itself treated as zero.
#[inline]
pub fn compute_checksum(seg: &[u8], src: Ipv4Addr, dst: Ipv4Addr) -> u16 {
    let len = seg.len() as u16;
    let head = seg.get(..16).unwrap_or(seg);
    let tail = seg.get(18..).unwrap_or(&[]);
    pseudo_header(src, dst, PROTO_TCP, len)
        .add_bytes(head)
        .add_u16(0)
        .add_bytes(tail)
        .finish()
}

/// SACK blocks for an outgoing header (RFC 2018 §3), as `(left edge, right edge)` pairs in the
/// order they are to be sent: the block holding the segment that triggered the ACK first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SackList {
    blocks: [(u32, u32); SackList::MAX],
    len: u8,
}

impl SackList {
    /// Most blocks a header can carry (four without timestamps, three with them).
    pub const MAX: usize = 4;

    /// No blocks.
    pub const EMPTY: SackList = SackList {
        blocks: [(0, 0); SackList::MAX],
        len: 0,
    };

    /// Appends a block; false (and nothing changes) when [`SackList::MAX`] are already held.
    #[inline]
    pub fn push(&mut self, left: u32, right: u32) -> bool {
        let n = usize::from(self.len);
        if n == Self::MAX {
            return false;
        }
        self.blocks[n] = (left, right);
        self.len += 1;
        true
    }

    /// The blocks, in sending order.
    #[inline]
    pub fn as_slice(&self) -> &[(u32, u32)] {
        &self.blocks[..self.len as usize]
    }

    /// Number of blocks held.
    #[inline]
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no block is held.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Options to put in an outgoing header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpOptionSet {
    /// Maximum segment size (SYN only).
    pub mss: Option<u16>,
    /// Window scale shift count (SYN only).
    pub window_scale: Option<u8>,
    /// SACK permitted (SYN only).
    pub sack_permitted: bool,
    /// Timestamps.
    pub timestamps: Option<Timestamps>,
    /// SACK blocks; those that do not fit in the 40 option bytes left by the other options are
    /// left out from the end of the list.
    pub sack: SackList,
}

impl TcpOptionSet {
    /// Encoded length, a multiple of 4, at most 40.
    #[inline]
    pub const fn len(&self) -> usize {
        let n = self.len_without_sack();
        let blocks = self.sack_blocks_fitting();
        if blocks == 0 { n } else { n + 4 + 8 * blocks }
    }

    const fn len_without_sack(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.window_scale.is_some() {
            n += 4;
        }
        n += match (self.sack_permitted, self.timestamps.is_some()) {
            (_, true) => 12,
            (true, false) => 4,
            (false, false) => 0,
        };
        n
    }

    /// How many of the SACK blocks fit after the other options (each block takes 8 bytes, the
    /// option's kind and length 2 more, padded with two NOPs).
    #[inline]
    pub const fn sack_blocks_fitting(&self) -> usize {
        let room = (MAX_HEADER_LEN - MIN_HEADER_LEN) - self.len_without_sack();
        let fit = if room >= 12 { (room - 4) / 8 } else { 0 };
        if self.sack.len() < fit {
            self.sack.len()
        } else {
            fit
        }
    }

    /// Whether no option is set.
    #[inline]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the options into `out`, which is exactly `self.len()` bytes long.
    ///
    /// NOPs pad each option to a 4-byte boundary in the layout most stacks send, so that the
    /// 32-bit fields of the timestamps option stay aligned.
    fn write(&self, out: &mut [u8]) {
        let mut at = 0;
        if let Some(mss) = self.mss {
            let [a, b] = mss.to_be_bytes();
            out[at..at + 4].copy_from_slice(&[KIND_MSS, 4, a, b]);
            at += 4;
        }
        if let Some(shift) = self.window_scale {
            out[at..at + 4].copy_from_slice(&[KIND_NOP, KIND_WSCALE, 3, shift]);
            at += 4;
        }
        match (self.sack_permitted, self.timestamps) {
            (sack, Some(ts)) => {
                let lead = if sack {
                    [KIND_SACK_PERMITTED, 2]
                } else {
                    [KIND_NOP, KIND_NOP]
                };
                out[at..at + 2].copy_from_slice(&lead);
                out[at + 2..at + 4].copy_from_slice(&[KIND_TIMESTAMPS, 10]);
                out[at + 4..at + 8].copy_from_slice(&ts.tsval.to_be_bytes());
                out[at + 8..at + 12].copy_from_slice(&ts.tsecr.to_be_bytes());
            }
            (true, None) => {
                out[at..at + 4].copy_from_slice(&[KIND_NOP, KIND_NOP, KIND_SACK_PERMITTED, 2]);
            }
            (false, None) => {}
        }
        let blocks = self.sack_blocks_fitting();
        if blocks > 0 {
            at = self.len_without_sack();
            out[at..at + 4].copy_from_slice(&[
                KIND_NOP,
                KIND_NOP,
                KIND_SACK,
                (2 + 8 * blocks) as u8,
            ]);
            at += 4;
            for &(left, right) in &self.sack.as_slice()[..blocks] {
                out[at..at + 4].copy_from_slice(&left.to_be_bytes());
                out[at + 4..at + 8].copy_from_slice(&right.to_be_bytes());
                at += 8;
            }
        }
    }
}

/// The fields of a TCP header, for building.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// Receive window, already scaled down.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options.
    pub options: TcpOptionSet,
}

impl TcpHeader {
    /// Header length including options: where the payload starts.
    #[inline]
    pub const fn header_len(&self) -> usize {
        MIN_HEADER_LEN + self.options.len()
    }

    /// Writes the header into `seg[..header_len()]`, where
    /// `seg[header_len()..header_len() + payload_len]` already holds the payload, with the
    /// checksum over the pseudo-header from `src` to `dst`; returns the segment length.
    #[inline]
    pub fn emit(
        &self,
        seg: &mut [u8],
        payload_len: usize,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> Result<usize, BuildError> {
        let hl = self.header_len();
        let payload = seg
            .get(hl..hl + payload_len)
            .map_or(Checksum::new(), |p| Checksum::new().add_bytes(p));
        self.emit_summed(seg, payload_len, payload, src, dst)
    }

    /// As [`TcpHeader::emit`], given the payload's sum (`Checksum::new().add_bytes(payload)`),
    /// for a sender that summed the payload where it copied it from: reading the copy back
    /// would wait for the stores to reach a buffer another CPU last held.
    #[inline]
    pub fn emit_summed(
        &self,
        seg: &mut [u8],
        payload_len: usize,
        payload: Checksum,
        src: Ipv4Addr,
        dst: Ipv4Addr,
    ) -> Result<usize, BuildError> {
        let hl = self.header_len();
        let max = Ipv4Header::MAX_PAYLOAD - hl;
        if payload_len > max {
            return Err(BuildError::PayloadTooLarge {
                len: payload_len,
                max,
            });
        }
        let len = hl + payload_len;
        need(seg, len)?;
        let s = &mut seg[..len];
        s[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        s[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        s[4..8].copy_from_slice(&self.seq.to_be_bytes());
        s[8..12].copy_from_slice(&self.ack.to_be_bytes());
        s[12] = ((hl / 4) as u8) << 4;
        s[13] = self.flags.0;
        s[14..16].copy_from_slice(&self.window.to_be_bytes());
        s[16..18].fill(0);
        s[18..20].copy_from_slice(&self.urgent.to_be_bytes());
        self.options.write(&mut s[MIN_HEADER_LEN..hl]);
        let c = pseudo_header(src, dst, PROTO_TCP, len as u16)
            .add_bytes(&s[..hl])
            .add_sum(payload)
            .finish();
        s[16..18].copy_from_slice(&c.to_be_bytes());
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    fn syn() -> TcpHeader {
        TcpHeader {
            src_port: 40000,
            dst_port: 80,
            seq: 0xdead_beef,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65535,
            urgent: 0,
            options: TcpOptionSet {
                mss: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some(Timestamps { tsval: 1, tsecr: 0 }),
                sack: SackList::EMPTY,
            },
        }
    }

    /// Builds a segment with hand-written option bytes and a correct checksum.
    fn with_raw_options(opts: &[u8], buf: &mut [u8; 80]) -> usize {
        let h = TcpHeader {
            options: TcpOptionSet::default(),
            ..syn()
        };
        let n = h.emit(buf, 0, SRC, DST).unwrap();
        let len = n + opts.len();
        buf[20..len].copy_from_slice(opts);
        buf[12] = (((20 + opts.len()) / 4) as u8) << 4;
        let c = compute_checksum(&buf[..len], SRC, DST);
        buf[16..18].copy_from_slice(&c.to_be_bytes());
        len
    }

    #[test]
    fn syn_round_trip() {
        let h = syn();
        assert_eq!(h.header_len(), 40);
        let mut buf = [0u8; 80];
        let n = h.emit(&mut buf, 0, SRC, DST).unwrap();
        assert_eq!(n, 40);
        let s = TcpSegment::parse(&buf[..n], SRC, DST).unwrap();
        assert_eq!((s.src_port(), s.dst_port()), (40000, 80));
        assert_eq!((s.seq(), s.ack()), (0xdead_beef, 0));
        assert_eq!(s.flags(), TcpFlags::SYN);
        assert_eq!((s.window(), s.urgent(), s.header_len()), (65535, 0, 40));
        let mut it = s.options();
        assert_eq!(it.next(), Some(TcpOption::Mss(1460)));
        assert_eq!(it.next(), Some(TcpOption::WindowScale(7)));
        assert_eq!(it.next(), Some(TcpOption::SackPermitted));
        assert_eq!(
            it.next(),
            Some(TcpOption::Timestamps(Timestamps { tsval: 1, tsecr: 0 }))
        );
        assert_eq!(it.next(), None);
        assert_eq!(compute_checksum(&buf[..n], SRC, DST), s.checksum());
    }

    #[test]
    fn data_segment_round_trip() {
        let h = TcpHeader {
            flags: TcpFlags::ACK | TcpFlags::PSH,
            ack: 77,
            options: TcpOptionSet {
                timestamps: Some(Timestamps { tsval: 9, tsecr: 8 }),
                ..Default::default()
            },
            ..syn()
        };
        let mut buf = [0u8; 80];
        buf[32..37].copy_from_slice(b"hello");
        let n = h.emit(&mut buf, 5, SRC, DST).unwrap();
        let s = TcpSegment::parse(&buf[..n], SRC, DST).unwrap();
        assert_eq!(s.payload(), b"hello");
        assert!(s.flags().contains(TcpFlags::ACK) && !s.flags().contains(TcpFlags::SYN));
        assert_eq!(s.options().count(), 1);
        assert_eq!(std::format!("{:?}", s.flags()), "PSH|ACK");
    }

    #[test]
    fn sack_and_unknown_options() {
        let mut buf = [0u8; 80];
        let opts = [
            1, 1, 5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, // two SACK blocks
            30, 4, 0xaa, 0xbb, // unknown kind 30
            0, 0, 0, 0, // end of list, then padding that must not be read as options
        ];
        let n = with_raw_options(&opts, &mut buf);
        let s = TcpSegment::parse(&buf[..n], SRC, DST).unwrap();
        let mut it = s.options();
        let Some(TcpOption::Sack(blocks)) = it.next() else {
            panic!("expected SACK")
        };
        assert_eq!(blocks.len(), 2);
        let v: std::vec::Vec<_> = blocks.collect();
        assert_eq!(v, [(1, 2), (3, 4)]);
        assert_eq!(
            it.next(),
            Some(TcpOption::Unknown {
                kind: 30,
                data: &[0xaa, 0xbb]
            })
        );
        assert_eq!(it.next(), None);
    }

    #[test]
    fn malformed_header() {
        let mut buf = [0u8; 80];
        let n = syn().emit(&mut buf, 0, SRC, DST).unwrap();
        for len in 0..MIN_HEADER_LEN {
            assert_eq!(
                TcpSegment::parse(&buf[..len], SRC, DST).unwrap_err(),
                DropReason::Truncated
            );
        }
        // Data offset says 40 bytes but fewer are present.
        assert_eq!(
            TcpSegment::parse(&buf[..n - 1], SRC, DST).unwrap_err(),
            DropReason::BadTcpHeader
        );
        for off in [0u8, 4] {
            let mut b = buf;
            b[12] = off << 4;
            assert_eq!(
                TcpSegment::parse(&b[..n], SRC, DST).unwrap_err(),
                DropReason::BadTcpHeader
            );
        }
        let mut b = buf;
        b[5] ^= 0x10;
        assert_eq!(
            TcpSegment::parse(&b[..n], SRC, DST).unwrap_err(),
            DropReason::BadTcpChecksum
        );
        assert!(TcpSegment::parse_unverified(&b[..n]).is_ok());
        assert_eq!(
            TcpSegment::parse(&buf[..n], SRC, Ipv4Addr::new(198, 51, 100, 8)).unwrap_err(),
            DropReason::BadTcpChecksum,
            "pseudo-header must be covered"
        );
    }

    #[test]
    fn malformed_options() {
        // Each list fills whole 32-bit words, so only the option contents are at fault.
        let cases: [&[u8]; 10] = [
            &[30, 8, 0, 0],            // unknown kind whose length runs past the header
            &[2, 0, 0, 0],             // length 0
            &[2, 1, 0, 0],             // length 1
            &[1, 1, 1, 30],            // kind byte with no length byte left
            &[2, 3, 5, 1],             // MSS with wrong length
            &[3, 4, 7, 0],             // window scale with wrong length
            &[4, 3, 0, 0],             // SACK-permitted with wrong length
            &[5, 6, 0, 0, 0, 0, 1, 1], // SACK with a partial block
            &[5, 2, 1, 1],             // SACK with no block
            &[8, 8, 0, 0, 0, 0, 0, 0], // timestamps with wrong length
        ];
        for opts in cases {
            let mut buf = [0u8; 80];
            let n = with_raw_options(opts, &mut buf);
            assert_eq!(
                TcpSegment::parse(&buf[..n], SRC, DST).unwrap_err(),
                DropReason::BadTcpHeader,
                "{opts:?}"
            );
        }
        // The same bytes after an end-of-list marker are padding and are not looked at.
        let mut buf = [0u8; 80];
        let n = with_raw_options(&[0, 2, 0, 0], &mut buf);
        assert_eq!(
            TcpSegment::parse(&buf[..n], SRC, DST)
                .unwrap()
                .options()
                .count(),
            0
        );
    }

    #[test]
    fn option_set_layouts() {
        let cases = [
            (TcpOptionSet::default(), 0),
            (
                TcpOptionSet {
                    sack_permitted: true,
                    ..Default::default()
                },
                4,
            ),
            (
                TcpOptionSet {
                    mss: Some(536),
                    ..Default::default()
                },
                4,
            ),
            (
                TcpOptionSet {
                    timestamps: Some(Timestamps { tsval: 5, tsecr: 6 }),
                    ..Default::default()
                },
                12,
            ),
            (syn().options, 20),
        ];
        for (set, len) in cases {
            assert_eq!(set.len(), len);
            let h = TcpHeader {
                options: set,
                ..syn()
            };
            let mut buf = [0u8; 80];
            let n = h.emit(&mut buf, 0, SRC, DST).unwrap();
            let s = TcpSegment::parse(&buf[..n], SRC, DST).unwrap();
            let mut got = TcpOptionSet::default();
            for o in s.options() {
                match o {
                    TcpOption::Mss(v) => got.mss = Some(v),
                    TcpOption::WindowScale(v) => got.window_scale = Some(v),
                    TcpOption::SackPermitted => got.sack_permitted = true,
                    TcpOption::Timestamps(t) => got.timestamps = Some(t),
                    other => panic!("unexpected {other:?}"),
                }
            }
            assert_eq!(got, set);
        }
    }

    fn sack_list(blocks: &[(u32, u32)]) -> SackList {
        let mut l = SackList::EMPTY;
        for &(a, b) in blocks {
            assert!(l.push(a, b));
        }
        l
    }

    #[test]
    fn sack_blocks_round_trip_and_fit() {
        let four = [(10, 20), (30, 40), (50, 60), (0xffff_fff0, 5)];
        let mut full = sack_list(&four);
        assert!(!full.push(1, 2), "a fifth block is refused");
        let ts = Some(Timestamps { tsval: 7, tsecr: 9 });
        let cases = [
            (
                TcpOptionSet {
                    sack: full,
                    ..Default::default()
                },
                4,
                36,
            ),
            (
                TcpOptionSet {
                    sack: full,
                    timestamps: ts,
                    ..Default::default()
                },
                3,
                40,
            ),
            (
                TcpOptionSet {
                    sack: sack_list(&four[..1]),
                    timestamps: ts,
                    ..Default::default()
                },
                1,
                24,
            ),
            (
                TcpOptionSet {
                    sack: full,
                    ..syn().options
                },
                2,
                40,
            ),
        ];
        for (set, blocks, len) in cases {
            assert_eq!(
                (set.sack_blocks_fitting(), set.len()),
                (blocks, len),
                "{set:?}"
            );
            let h = TcpHeader {
                flags: TcpFlags::ACK,
                options: set,
                ..syn()
            };
            let mut buf = [0u8; 80];
            buf[len + 20..len + 23].copy_from_slice(b"abc");
            let n = h.emit(&mut buf, 3, SRC, DST).unwrap();
            assert_eq!(n, 20 + len + 3);
            let s = TcpSegment::parse(&buf[..n], SRC, DST).unwrap();
            assert_eq!(s.payload(), b"abc");
            let mut got_ts = None;
            let mut got = std::vec::Vec::new();
            for o in s.options() {
                match o {
                    TcpOption::Sack(b) => got.extend(b),
                    TcpOption::Timestamps(t) => got_ts = Some(t),
                    _ => {}
                }
            }
            assert_eq!(got, four[..blocks]);
            assert_eq!(got_ts, set.timestamps);
        }
    }

    #[test]
    fn build_errors() {
        let h = syn();
        assert!(matches!(
            h.emit(&mut [0u8; 39], 0, SRC, DST),
            Err(BuildError::BufferTooSmall {
                needed: 40,
                available: 39
            })
        ));
        assert!(matches!(
            h.emit(&mut [0u8; 40], 65535, SRC, DST),
            Err(BuildError::PayloadTooLarge { .. })
        ));
        assert!(!verify_checksum(&[0u8; 70000], SRC, DST));
    }
}
