//! Ethernet II: MAC addresses and the 14-byte header.

use core::fmt;
use core::str::FromStr;

use crate::error::{BuildError, DropReason, need};

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00, which ARP requests carry as the unknown target hardware address.
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// The address with these octets.
    #[inline]
    pub const fn new(octets: [u8; 6]) -> Self {
        MacAddr(octets)
    }

    /// The six octets in transmission order.
    #[inline]
    pub const fn octets(self) -> [u8; 6] {
        self.0
    }

    /// All ones.
    #[inline]
    pub const fn is_broadcast(self) -> bool {
        u64::from_be_bytes([
            0, 0, self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5],
        ]) == 0xffff_ffff_ffff
    }

    /// Group bit (least significant bit of the first octet) set; broadcast is multicast too.
    #[inline]
    pub const fn is_multicast(self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Group bit clear.
    #[inline]
    pub const fn is_unicast(self) -> bool {
        !self.is_multicast()
    }

    /// U/L bit (second least significant bit of the first octet) set: not a vendor-assigned address.
    #[inline]
    pub const fn is_locally_administered(self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// All zeros.
    #[inline]
    pub const fn is_zero(self) -> bool {
        u64::from_be_bytes([
            0, 0, self.0[0], self.0[1], self.0[2], self.0[3], self.0[4], self.0[5],
        ]) == 0
    }
}

impl From<[u8; 6]> for MacAddr {
    fn from(octets: [u8; 6]) -> Self {
        MacAddr(octets)
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a string is not a MAC address of the form `aa:bb:cc:dd:ee:ff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseMacAddrError {
    /// The string does not split into six `:`-separated groups.
    GroupCount {
        /// Groups found.
        found: usize,
    },
    /// A group is not exactly two hexadecimal digits.
    BadGroup {
        /// 1-based position of the offending group.
        position: usize,
    },
}

impl fmt::Display for ParseMacAddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ParseMacAddrError::GroupCount { found } => write!(
                f,
                "invalid MAC address: expected 6 groups separated by ':' (like aa:bb:cc:dd:ee:ff), found {found}"
            ),
            ParseMacAddrError::BadGroup { position } => write!(
                f,
                "invalid MAC address: group {position} is not two hexadecimal digits"
            ),
        }
    }
}

impl core::error::Error for ParseMacAddrError {}

impl FromStr for MacAddr {
    type Err = ParseMacAddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let found = s.split(':').count();
        if found != 6 {
            return Err(ParseMacAddrError::GroupCount { found });
        }
        let mut octets = [0u8; 6];
        for (i, (group, out)) in s.split(':').zip(&mut octets).enumerate() {
            // `from_str_radix` alone would accept "+f" and single digits.
            let bad = ParseMacAddrError::BadGroup { position: i + 1 };
            if group.len() != 2 || !group.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad);
            }
            *out = u8::from_str_radix(group, 16).map_err(|_| bad)?;
        }
        Ok(MacAddr(octets))
    }
}

/// The 16-bit type field of an Ethernet II header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct EtherType(pub u16);

impl EtherType {
    /// Internet Protocol version 4.
    pub const IPV4: EtherType = EtherType(0x0800);
    /// Address Resolution Protocol.
    pub const ARP: EtherType = EtherType(0x0806);
    /// IPv6 (recognised only to be reported as unsupported).
    pub const IPV6: EtherType = EtherType(0x86dd);
    /// IEEE 802.1Q customer VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// IEEE 802.1ad service VLAN tag.
    pub const QINQ: EtherType = EtherType(0x88a8);
    /// Pre-standard double-tagging TPID still emitted by some switches.
    pub const QINQ_LEGACY: EtherType = EtherType(0x9100);

    /// Whether this value announces a VLAN tag rather than a payload protocol.
    #[inline]
    pub const fn is_vlan_tag(self) -> bool {
        matches!(self.0, 0x8100 | 0x88a8 | 0x9100)
    }
}

/// A borrowed, validated Ethernet II frame.
#[derive(Clone, Copy, Debug)]
pub struct EthernetFrame<'a> {
    header: &'a [u8; HEADER_LEN],
    payload: &'a [u8],
}

impl<'a> EthernetFrame<'a> {
    /// Views `frame` (without FCS) as Ethernet II.
    ///
    /// Any ethertype is accepted except VLAN tags, whose different header layout this crate does
    /// not handle; dispatching on the ethertype is left to the caller.
    #[inline]
    pub fn parse(frame: &'a [u8]) -> Result<Self, DropReason> {
        let (header, payload) = frame
            .split_first_chunk::<HEADER_LEN>()
            .ok_or(DropReason::Truncated)?;
        let this = Self { header, payload };
        if this.ethertype().is_vlan_tag() {
            return Err(DropReason::VlanTagged);
        }
        Ok(this)
    }

    /// Destination address.
    #[inline]
    pub fn dst(&self) -> MacAddr {
        let [a, b, c, d, e, f, ..] = *self.header;
        MacAddr([a, b, c, d, e, f])
    }

    /// Source address.
    #[inline]
    pub fn src(&self) -> MacAddr {
        let h = self.header;
        MacAddr([h[6], h[7], h[8], h[9], h[10], h[11]])
    }

    /// The type field.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType(u16::from_be_bytes([self.header[12], self.header[13]]))
    }

    /// Everything after the header, including any padding to the 60-byte minimum.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The header fields as a builder value, e.g. to swap addresses for a reply.
    #[inline]
    pub fn header(&self) -> EthernetHeader {
        EthernetHeader {
            dst: self.dst(),
            src: self.src(),
            ethertype: self.ethertype(),
        }
    }
}

/// The fields of an Ethernet II header, for building.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetHeader {
    /// Destination address.
    pub dst: MacAddr,
    /// Source address.
    pub src: MacAddr,
    /// Type of the payload.
    pub ethertype: EtherType,
}

impl EthernetHeader {
    /// Writes the header to the start of `buf`; returns [`HEADER_LEN`].
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, BuildError> {
        need(buf, HEADER_LEN)?;
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        buf[12..14].copy_from_slice(&self.ethertype.0.to_be_bytes());
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn mac_display_and_parse() {
        let m = MacAddr([0x02, 0x00, 0x5e, 0x10, 0xab, 0xff]);
        assert_eq!(m.to_string(), "02:00:5e:10:ab:ff");
        assert_eq!(std::format!("{m:?}"), "02:00:5e:10:ab:ff");
        assert_eq!("02:00:5E:10:AB:FF".parse::<MacAddr>(), Ok(m));
        assert_eq!(m.to_string().parse::<MacAddr>(), Ok(m));
    }

    #[test]
    fn mac_parse_errors() {
        use ParseMacAddrError::*;
        assert_eq!("".parse::<MacAddr>(), Err(GroupCount { found: 1 }));
        assert_eq!(
            "aa:bb:cc:dd:ee".parse::<MacAddr>(),
            Err(GroupCount { found: 5 })
        );
        assert_eq!(
            "aa:bb:cc:dd:ee:ff:00".parse::<MacAddr>(),
            Err(GroupCount { found: 7 })
        );
        assert_eq!(
            "aa:bb:cc:dd:ee:f".parse::<MacAddr>(),
            Err(BadGroup { position: 6 })
        );
        assert_eq!(
            "aa:bb:cc:dd:ee:fff".parse::<MacAddr>(),
            Err(BadGroup { position: 6 })
        );
        assert_eq!(
            "aa:+b:cc:dd:ee:ff".parse::<MacAddr>(),
            Err(BadGroup { position: 2 })
        );
        assert_eq!(
            "aa:bb:cg:dd:ee:ff".parse::<MacAddr>(),
            Err(BadGroup { position: 3 })
        );
        assert_eq!(
            "aa-bb-cc-dd-ee-ff".parse::<MacAddr>(),
            Err(GroupCount { found: 1 })
        );
        assert_eq!(
            "aa:bb:cc:dd:ee:é".parse::<MacAddr>(),
            Err(BadGroup { position: 6 })
        );
        let msg = "aa:bb".parse::<MacAddr>().unwrap_err().to_string();
        assert!(
            msg.contains("expected 6 groups") && msg.contains("found 2"),
            "{msg}"
        );
    }

    #[test]
    fn mac_predicates() {
        assert!(MacAddr::BROADCAST.is_broadcast());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!(!MacAddr::ZERO.is_broadcast());
        assert!(MacAddr::ZERO.is_zero() && MacAddr::ZERO.is_unicast());
        let mcast = MacAddr([0x01, 0x00, 0x5e, 0, 0, 1]);
        assert!(mcast.is_multicast() && !mcast.is_broadcast() && !mcast.is_locally_administered());
        let local = MacAddr([0x02, 0, 0, 0, 0, 1]);
        assert!(local.is_unicast() && local.is_locally_administered());
        let vendor = MacAddr([0x00, 0x1b, 0x21, 1, 2, 3]);
        assert!(vendor.is_unicast() && !vendor.is_locally_administered() && !vendor.is_zero());
    }

    #[test]
    fn header_round_trip_and_errors() {
        let h = EthernetHeader {
            dst: MacAddr::BROADCAST,
            src: MacAddr([2, 0, 0, 0, 0, 9]),
            ethertype: EtherType::ARP,
        };
        let mut buf = [0u8; 20];
        assert_eq!(h.emit(&mut buf), Ok(HEADER_LEN));
        let f = EthernetFrame::parse(&buf).unwrap();
        assert_eq!(f.header(), h);
        assert_eq!(f.payload().len(), 6);
        assert_eq!(
            h.emit(&mut buf[..13]),
            Err(BuildError::BufferTooSmall {
                needed: 14,
                available: 13
            })
        );
        for len in 0..HEADER_LEN {
            assert_eq!(
                EthernetFrame::parse(&buf[..len]).unwrap_err(),
                DropReason::Truncated
            );
        }
        assert!(EthernetFrame::parse(&buf[..HEADER_LEN]).is_ok());
        for tpid in [0x8100u16, 0x88a8, 0x9100] {
            buf[12..14].copy_from_slice(&tpid.to_be_bytes());
            assert_eq!(
                EthernetFrame::parse(&buf).unwrap_err(),
                DropReason::VlanTagged
            );
        }
    }
}
