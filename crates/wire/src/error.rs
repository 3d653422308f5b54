//! Why a frame was dropped, and why a frame could not be built.

use core::fmt;

/// Every reason a parser in this crate rejects input.
///
/// One flat enum (rather than an error type per layer) so that iokerneld and the runtime can keep
/// one counter per variant and expose them by [`DropReason::as_str`] name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// The bytes end before a fixed-size header does.
    Truncated,
    /// The frame carries an 802.1Q / 802.1ad tag; VLANs are not supported.
    VlanTagged,
    /// An ethertype other than IPv4 or ARP (including 802.3 length fields).
    UnsupportedEthertype,
    /// ARP that is not a request or reply for IPv4 over Ethernet.
    BadArp,
    /// IPv4 version field is not 4.
    BadIpVersion,
    /// IPv4 IHL below 5 or pointing past the bytes present.
    BadIhl,
    /// IPv4 total length shorter than the header or longer than the bytes present.
    BadTotalLength,
    /// IPv4 header checksum does not verify.
    BadIpChecksum,
    /// An IPv4 fragment (MF set or non-zero offset); fragments are not reassembled.
    Fragment,
    /// An IPv4 protocol other than ICMP, TCP or UDP.
    UnsupportedProtocol,
    /// ICMP message checksum does not verify.
    BadIcmpChecksum,
    /// A well-formed ICMP message that is not an echo request or reply.
    UnsupportedIcmp,
    /// UDP length field below 8 or beyond the IP payload.
    BadUdpLength,
    /// UDP checksum present and wrong.
    BadUdpChecksum,
    /// TCP data offset out of range, or malformed TCP options.
    BadTcpHeader,
    /// TCP checksum does not verify.
    BadTcpChecksum,
}

impl DropReason {
    /// Every variant, in declaration order, so `ALL[r.index()] == r`.
    pub const ALL: [DropReason; 16] = [
        DropReason::Truncated,
        DropReason::VlanTagged,
        DropReason::UnsupportedEthertype,
        DropReason::BadArp,
        DropReason::BadIpVersion,
        DropReason::BadIhl,
        DropReason::BadTotalLength,
        DropReason::BadIpChecksum,
        DropReason::Fragment,
        DropReason::UnsupportedProtocol,
        DropReason::BadIcmpChecksum,
        DropReason::UnsupportedIcmp,
        DropReason::BadUdpLength,
        DropReason::BadUdpChecksum,
        DropReason::BadTcpHeader,
        DropReason::BadTcpChecksum,
    ];

    /// Number of variants; the length of a counter array indexed by [`DropReason::index`].
    pub const COUNT: usize = Self::ALL.len();

    /// Dense index in `0..COUNT`, for indexing a counter array without a hash map.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// A stable snake_case name, suitable as a counter or metric name.
    pub const fn as_str(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::VlanTagged => "vlan_tagged",
            DropReason::UnsupportedEthertype => "unsupported_ethertype",
            DropReason::BadArp => "bad_arp",
            DropReason::BadIpVersion => "bad_ip_version",
            DropReason::BadIhl => "bad_ihl",
            DropReason::BadTotalLength => "bad_total_length",
            DropReason::BadIpChecksum => "bad_ip_checksum",
            DropReason::Fragment => "fragment",
            DropReason::UnsupportedProtocol => "unsupported_protocol",
            DropReason::BadIcmpChecksum => "bad_icmp_checksum",
            DropReason::UnsupportedIcmp => "unsupported_icmp",
            DropReason::BadUdpLength => "bad_udp_length",
            DropReason::BadUdpChecksum => "bad_udp_checksum",
            DropReason::BadTcpHeader => "bad_tcp_header",
            DropReason::BadTcpChecksum => "bad_tcp_checksum",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for DropReason {}

/// Why a builder could not write a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The output buffer cannot hold the headers plus payload.
    BufferTooSmall {
        /// Bytes the packet needs.
        needed: usize,
        /// Bytes the buffer has.
        available: usize,
    },
    /// The payload does not fit the 16-bit length fields of IPv4/UDP.
    PayloadTooLarge {
        /// Payload length asked for.
        len: usize,
        /// Largest payload the format can carry.
        max: usize,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuildError::BufferTooSmall { needed, available } => {
                write!(f, "buffer too small: need {needed} bytes, have {available}")
            }
            BuildError::PayloadTooLarge { len, max } => {
                write!(f, "payload of {len} bytes exceeds the maximum of {max}")
            }
        }
    }
}

impl core::error::Error for BuildError {}

/// Checks that `buf` has room for `needed` bytes.
#[inline]
pub(crate) fn need(buf: &[u8], needed: usize) -> Result<(), BuildError> {
    if buf.len() < needed {
        return Err(BuildError::BufferTooSmall {
            needed,
            available: buf.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_covers_every_variant() {
        // `index` is the discriminant, so a variant missing from `ALL` would leave a gap or
        // push the last variant's index past the end.
        let last = DropReason::ALL[DropReason::COUNT - 1];
        assert_eq!(last, DropReason::BadTcpChecksum);
        assert_eq!(last.index(), DropReason::COUNT - 1);
    }

    #[test]
    fn all_is_dense_and_names_are_unique() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        for (i, a) in DropReason::ALL.iter().enumerate() {
            for b in &DropReason::ALL[i + 1..] {
                assert_ne!(a.as_str(), b.as_str());
            }
            assert!(
                a.as_str()
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c == b'_')
            );
        }
    }
}
