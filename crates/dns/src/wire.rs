//! The message format of RFC 1035 section 4: the header, names with compression pointers, and
//! the constants the server uses.

use crate::name::{MAX_LABEL, MAX_NAME};

pub const HEADER_LEN: usize = 12;
/// What a client without EDNS can receive over UDP (RFC 1035 section 4.2.1).
pub const UDP_MIN_PAYLOAD: u16 = 512;
/// The payload size the server offers over UDP, the value of the 2020 DNS flag day (and NSD's
/// and Knot's default): big enough for most answers, small enough not to fragment.
pub const UDP_MAX_PAYLOAD: u16 = 1232;

pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const PTR: u16 = 12;
    pub const HINFO: u16 = 13;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const DNAME: u16 = 39;
    pub const OPT: u16 = 41;
    pub const DS: u16 = 43;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const ANY: u16 = 255;
    pub const CAA: u16 = 257;
}

pub mod class {
    pub const IN: u16 = 1;
    pub const CH: u16 = 3;
    pub const ANY: u16 = 255;
}

pub mod rcode {
    pub const NOERROR: u8 = 0;
    pub const FORMERR: u8 = 1;
    pub const SERVFAIL: u8 = 2;
    pub const NXDOMAIN: u8 = 3;
    pub const NOTIMP: u8 = 4;
    pub const REFUSED: u8 = 5;
}

pub mod opcode {
    pub const QUERY: u8 = 0;
    pub const NOTIFY: u8 = 4;
}

/// Header flag bits, in the second 16-bit word.
pub mod flag {
    pub const QR: u16 = 0x8000;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    pub const RA: u16 = 0x0080;
    pub const AD: u16 = 0x0020;
    pub const CD: u16 = 0x0010;
}

/// EDNS option codes.
pub mod edns_opt {
    pub const EDE: u16 = 15;
}

/// Extended DNS Error codes (RFC 8914) the server reports.
pub mod ede {
    pub const NOT_AUTHORITATIVE: u16 = 20;
    pub const NOT_SUPPORTED: u16 = 21;
}

/// The fixed 12-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
}

impl Header {
    pub fn parse(msg: &[u8]) -> Option<Header> {
        let h = msg.get(..HEADER_LEN)?;
        let w = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        Some(Header {
            id: w(0),
            flags: w(2),
            qdcount: w(4),
            ancount: w(6),
            nscount: w(8),
            arcount: w(10),
        })
    }

    pub fn write(&self, out: &mut [u8]) {
        for (i, v) in [
            self.id,
            self.flags,
            self.qdcount,
            self.ancount,
            self.nscount,
            self.arcount,
        ]
        .into_iter()
        .enumerate()
        {
            out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
        }
    }

    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }

    pub fn rcode(&self) -> u8 {
        (self.flags & 0xf) as u8
    }

    pub fn has(&self, bit: u16) -> bool {
        self.flags & bit != 0
    }
}

/// Why a name in a message could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameError {
    /// The message ends inside the name.
    Truncated,
    /// A label length with the reserved top bits 01 or 10.
    BadLabelType,
    /// A compression pointer that does not point strictly backwards, so could loop.
    BadPointer,
    /// More than 255 bytes once decompressed.
    TooLong,
}

/// Reads the name at `pos` in `msg`, following compression pointers, into `out` (in wire form,
/// case kept). Returns its length in `out` and the position just after it in `msg`.
///
/// Each pointer must point before the start of the labels that led to it, so the walk moves
/// strictly backwards through the message and ends; a pointer forward, or to itself, is
/// refused rather than followed.
pub fn read_name(
    msg: &[u8],
    pos: usize,
    out: &mut [u8; MAX_NAME],
) -> Result<(usize, usize), NameError> {
    let mut at = pos;
    let mut floor = pos;
    let mut len = 0usize;
    let mut end = None;
    loop {
        let &b = msg.get(at).ok_or(NameError::Truncated)?;
        match b >> 6 {
            0 => {
                let l = b as usize;
                debug_assert!(l <= MAX_LABEL);
                if l == 0 {
                    if len + 1 > MAX_NAME {
                        return Err(NameError::TooLong);
                    }
                    out[len] = 0;
                    len += 1;
                    return Ok((len, end.unwrap_or(at + 1)));
                }
                let label = msg.get(at + 1..at + 1 + l).ok_or(NameError::Truncated)?;
                // The root's byte must still fit after this label.
                if len + 1 + l + 1 > MAX_NAME {
                    return Err(NameError::TooLong);
                }
                out[len] = b;
                out[len + 1..len + 1 + l].copy_from_slice(label);
                len += 1 + l;
                at += 1 + l;
            }
            3 => {
                let &lo = msg.get(at + 1).ok_or(NameError::Truncated)?;
                let target = (usize::from(b & 0x3f) << 8) | usize::from(lo);
                if target >= floor {
                    return Err(NameError::BadPointer);
                }
                if end.is_none() {
                    end = Some(at + 2);
                }
                floor = target;
                at = target;
            }
            _ => return Err(NameError::BadLabelType),
        }
    }
}

pub fn u16_at(msg: &[u8], pos: usize) -> Option<u16> {
    Some(u16::from_be_bytes(msg.get(pos..pos + 2)?.try_into().ok()?))
}

pub fn u32_at(msg: &[u8], pos: usize) -> Option<u32> {
    Some(u32::from_be_bytes(msg.get(pos..pos + 4)?.try_into().ok()?))
}

const TYPE_NAMES: &[(u16, &str)] = &[
    (rtype::A, "A"),
    (rtype::NS, "NS"),
    (rtype::CNAME, "CNAME"),
    (rtype::SOA, "SOA"),
    (rtype::PTR, "PTR"),
    (rtype::HINFO, "HINFO"),
    (rtype::MX, "MX"),
    (rtype::TXT, "TXT"),
    (rtype::AAAA, "AAAA"),
    (rtype::SRV, "SRV"),
    (rtype::DNAME, "DNAME"),
    (rtype::OPT, "OPT"),
    (rtype::DS, "DS"),
    (rtype::IXFR, "IXFR"),
    (rtype::AXFR, "AXFR"),
    (rtype::ANY, "ANY"),
    (rtype::CAA, "CAA"),
];

/// The mnemonic of a record type, or `TYPEnnn` (RFC 3597).
pub fn type_name(t: u16) -> std::borrow::Cow<'static, str> {
    match TYPE_NAMES.iter().find(|(code, _)| *code == t) {
        Some((_, name)) => (*name).into(),
        None => format!("TYPE{t}").into(),
    }
}

/// The type a mnemonic or `TYPEnnn` names, case-insensitively.
pub fn type_from_name(s: &str) -> Option<u16> {
    if let Some((_, n)) = s
        .split_at_checked(4)
        .filter(|(p, _)| p.eq_ignore_ascii_case("TYPE"))
    {
        return n.parse().ok();
    }
    TYPE_NAMES
        .iter()
        .find(|(_, name)| name.eq_ignore_ascii_case(s))
        .map(|(code, _)| *code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(msg: &[u8], pos: usize) -> Result<(Vec<u8>, usize), NameError> {
        let mut buf = [0u8; MAX_NAME];
        read_name(msg, pos, &mut buf).map(|(l, e)| (buf[..l].to_vec(), e))
    }

    #[test]
    fn follows_backward_pointers() {
        let msg = b"\x03www\x07example\x03com\x00\x04mail\xc0\x04";
        assert_eq!(read(msg, 0).unwrap(), (msg[..17].to_vec(), 17));
        assert_eq!(
            read(msg, 17).unwrap(),
            (b"\x04mail\x07example\x03com\x00".to_vec(), 24)
        );
    }

    #[test]
    fn refuses_loops_forward_pointers_and_bad_labels() {
        assert_eq!(read(b"\xc0\x00", 0), Err(NameError::BadPointer));
        assert_eq!(read(b"\x01a\xc0\x00", 0), Err(NameError::BadPointer));
        assert_eq!(read(b"\xc0\x02\x00", 0), Err(NameError::BadPointer));
        // Two pointers that point at each other.
        assert_eq!(read(b"\x00\xc0\x03\xc0\x01", 3), Err(NameError::BadPointer));
        assert_eq!(read(b"\x40a\x00", 0), Err(NameError::BadLabelType));
        assert_eq!(read(b"\x80a\x00", 0), Err(NameError::BadLabelType));
        assert_eq!(read(b"\x03ab", 0), Err(NameError::Truncated));
        assert_eq!(read(b"\xc0", 0), Err(NameError::Truncated));
    }

    #[test]
    fn refuses_names_over_255_bytes() {
        let mut msg = Vec::new();
        for _ in 0..4 {
            msg.push(63);
            msg.extend_from_slice(&[b'x'; 63]);
        }
        msg.push(0);
        assert_eq!(read(&msg, 0), Err(NameError::TooLong));
        // 127 one-byte labels make 255 bytes with the root: the longest legal name.
        let mut ok: Vec<u8> = (0..127).flat_map(|_| [1, b'a']).collect();
        ok.push(0);
        assert_eq!(read(&ok, 0).unwrap().0.len(), 255);
        let mut over: Vec<u8> = (0..128).flat_map(|_| [1, b'a']).collect();
        over.push(0);
        assert_eq!(read(&over, 0), Err(NameError::TooLong));
    }

    #[test]
    fn type_names_round_trip() {
        for t in [1, 2, 5, 6, 12, 15, 16, 28, 33, 257, 65000] {
            assert_eq!(type_from_name(&type_name(t)), Some(t));
        }
        assert_eq!(type_from_name("aaaa"), Some(28));
        assert_eq!(type_from_name("BOGUS"), None);
    }
}
