//! Toeplitz receive-side-scaling hash, as NICs compute it, so that iokerneld spreads flows over
//! a runtime's cores the way hardware RSS would.
//!
//! The input is the concatenation, in network byte order, of source address, destination
//! address and (for the 4-tuple) source port and destination port.

use core::net::Ipv4Addr;

use crate::frame::FiveTuple;

/// A 40-byte Toeplitz key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RssKey(pub [u8; 40]);

impl RssKey {
    /// The key from Microsoft's RSS specification, which NIC vendors ship as their default and
    /// against which the published verification suite is computed.
    pub const MICROSOFT: RssKey = RssKey([
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ]);
}

impl Default for RssKey {
    fn default() -> Self {
        RssKey::MICROSOFT
    }
}

/// Bit-at-a-time Toeplitz hash of `input` under `key`: for every set input bit, XOR in the 32
/// key bits starting at that bit's position. Key bits past the 320th are taken as zero.
///
/// This is the definition, used to check [`RssHasher`]; prefer the hasher on hot paths.
pub fn toeplitz(key: &RssKey, input: &[u8]) -> u32 {
    let k = &key.0;
    let mut window = u64::from_be_bytes([k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]]);
    let mut result = 0u32;
    for (i, &byte) in input.iter().enumerate() {
        for bit in (0..8).rev() {
            if (byte >> bit) & 1 == 1 {
                result ^= (window >> 32) as u32;
            }
            window <<= 1;
        }
        window |= u64::from(k.get(i + 8).copied().unwrap_or(0));
    }
    result
}

/// Longest input the table covers: the IPv4 4-tuple.
const TABLE_BYTES: usize = 12;

/// Toeplitz hashing with a per-key table: one lookup and XOR per input byte.
///
/// 12 KiB; build it once per key (it is `const`, so it can live in a `static`).
#[derive(Clone, Debug)]
pub struct RssHasher {
    table: [[u32; 256]; TABLE_BYTES],
}

impl RssHasher {
    /// Precomputes, for every input byte position and value, the XOR of the key windows its set
    /// bits select.
    pub const fn new(key: &RssKey) -> Self {
        let mut table = [[0u32; 256]; TABLE_BYTES];
        let mut pos = 0;
        while pos < TABLE_BYTES {
            // Key bits 8*pos .. 8*pos+40: enough for the 32-bit windows of all 8 bits.
            let k = &key.0;
            let window = (k[pos] as u64) << 32
                | (k[pos + 1] as u64) << 24
                | (k[pos + 2] as u64) << 16
                | (k[pos + 3] as u64) << 8
                | k[pos + 4] as u64;
            let mut value = 1;
            while value < 256 {
                let mut acc = 0u32;
                let mut bit = 0;
                while bit < 8 {
                    // Bit 0 here is the most significant bit of the input byte.
                    if value & (0x80 >> bit) != 0 {
                        acc ^= (window >> (8 - bit)) as u32;
                    }
                    bit += 1;
                }
                table[pos][value] = acc;
                value += 1;
            }
            pos += 1;
        }
        RssHasher { table }
    }

    #[inline(always)]
    fn hash_bytes<const N: usize>(&self, input: [u8; N]) -> u32 {
        let mut h = 0;
        for (row, &b) in self.table.iter().zip(input.iter()) {
            h ^= row[usize::from(b)];
        }
        h
    }

    /// Hash of the 2-tuple (source address, destination address).
    #[inline]
    pub fn hash_ipv4(&self, src: Ipv4Addr, dst: Ipv4Addr) -> u32 {
        let [a, b, c, d] = src.octets();
        let [e, f, g, h] = dst.octets();
        self.hash_bytes([a, b, c, d, e, f, g, h])
    }

    /// Hash of the 4-tuple (source address, destination address, source port, destination port).
    #[inline]
    pub fn hash_ipv4_ports(
        &self,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        src_port: u16,
        dst_port: u16,
    ) -> u32 {
        let [a, b, c, d] = src.octets();
        let [e, f, g, h] = dst.octets();
        let [i, j] = src_port.to_be_bytes();
        let [k, l] = dst_port.to_be_bytes();
        self.hash_bytes([a, b, c, d, e, f, g, h, i, j, k, l])
    }

    /// Hash of a flow's 4-tuple; the protocol is not hashed, as in NIC RSS.
    #[inline]
    pub fn hash_flow(&self, flow: &FiveTuple) -> u32 {
        self.hash_ipv4_ports(flow.src_ip, flow.dst_ip, flow.src_port, flow.dst_port)
    }
}

impl Default for RssHasher {
    fn default() -> Self {
        RssHasher::new(&RssKey::MICROSOFT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv4 rows of the published RSS verification suite (Microsoft's "Verifying the RSS
    /// Hash Calculation"; also the Intel 82599 datasheet §7.1.2.8.3): source, destination,
    /// source port, destination port, 2-tuple hash, 4-tuple hash.
    struct Row {
        src: [u8; 4],
        dst: [u8; 4],
        src_port: u16,
        dst_port: u16,
        hash_2tuple: u32,
        hash_4tuple: u32,
    }

    const fn row(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, h2: u32, h4: u32) -> Row {
        Row {
            src,
            dst,
            src_port: sp,
            dst_port: dp,
            hash_2tuple: h2,
            hash_4tuple: h4,
        }
    }

    const SUITE: [Row; 5] = [
        row(
            [66, 9, 149, 187],
            [161, 142, 100, 80],
            2794,
            1766,
            0x323e_8fc2,
            0x51cc_c178,
        ),
        row(
            [199, 92, 111, 2],
            [65, 69, 140, 83],
            14230,
            4739,
            0xd718_262a,
            0xc626_b0ea,
        ),
        row(
            [24, 19, 198, 95],
            [12, 22, 207, 184],
            12898,
            38024,
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        row(
            [38, 27, 205, 30],
            [209, 142, 163, 6],
            48228,
            2217,
            0x8298_9176,
            0xafc7_327f,
        ),
        row(
            [153, 39, 163, 191],
            [202, 188, 127, 2],
            44251,
            1303,
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];

    static HASHER: RssHasher = RssHasher::new(&RssKey::MICROSOFT);

    #[test]
    fn verification_suite_table() {
        for Row {
            src,
            dst,
            src_port: sp,
            dst_port: dp,
            hash_2tuple: h2,
            hash_4tuple: h4,
        } in SUITE
        {
            let (s, d) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            assert_eq!(HASHER.hash_ipv4(s, d), h2, "{s} -> {d}");
            assert_eq!(
                HASHER.hash_ipv4_ports(s, d, sp, dp),
                h4,
                "{s}:{sp} -> {d}:{dp}"
            );
            let flow = FiveTuple {
                src_ip: s,
                dst_ip: d,
                src_port: sp,
                dst_port: dp,
                protocol: 6,
            };
            assert_eq!(HASHER.hash_flow(&flow), h4);
        }
    }

    #[test]
    fn verification_suite_bitwise() {
        let key = RssKey::default();
        for Row {
            src,
            dst,
            src_port: sp,
            dst_port: dp,
            hash_2tuple: h2,
            hash_4tuple: h4,
        } in SUITE
        {
            let mut input = [0u8; 12];
            input[..4].copy_from_slice(&src);
            input[4..8].copy_from_slice(&dst);
            input[8..10].copy_from_slice(&sp.to_be_bytes());
            input[10..].copy_from_slice(&dp.to_be_bytes());
            assert_eq!(toeplitz(&key, &input[..8]), h2);
            assert_eq!(toeplitz(&key, &input), h4);
        }
    }

    #[test]
    fn other_keys_and_long_input() {
        let key = RssKey([0x5a; 40]);
        let h = RssHasher::new(&key);
        let (s, d) = (Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8));
        let mut input = [1, 2, 3, 4, 5, 6, 7, 8, 0, 80, 1, 187];
        assert_eq!(h.hash_ipv4_ports(s, d, 80, 443), toeplitz(&key, &input));
        input[11] = 188;
        assert_ne!(h.hash_ipv4_ports(s, d, 80, 443), toeplitz(&key, &input));
        // Inputs longer than the key can cover still hash (with zero key bits past the end).
        assert_eq!(toeplitz(&key, &[0u8; 64]), 0);
        let _ = toeplitz(&key, &[0xff; 64]);
    }
}
