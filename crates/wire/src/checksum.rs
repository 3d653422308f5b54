//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! The sum is accumulated over native-endian 64-bit loads: one's-complement addition is
//! byte-order independent (RFC 1071 §2(B)), so summing native words and swapping once at the end
//! gives the network-order result without a byte swap per load, and 64-bit end-around-carry
//! additions cover four 16-bit words per instruction.

use core::net::Ipv4Addr;

/// A running Internet checksum over any number of byte runs.
///
/// Runs may have odd lengths: a run that starts at an odd offset of the overall message has its
/// sum byte-swapped before it is added, which is exactly how its bytes pair up with their
/// neighbours in the 16-bit word stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checksum {
    acc: u64,
    odd: bool,
}

#[inline(always)]
fn add_carry(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    // Cannot overflow: when `carry` is set, `s` is at most u64::MAX - 1.
    s + u64::from(carry)
}

#[inline(always)]
fn fold(mut x: u64) -> u16 {
    x = (x & 0xffff_ffff) + (x >> 32);
    x = (x & 0xffff) + (x >> 16);
    x = (x & 0xffff) + (x >> 16);
    x = (x & 0xffff) + (x >> 16);
    x as u16
}

/// One's-complement sum of `data` as native-endian words, not yet folded.
#[inline]
fn sum_native(data: &[u8]) -> u64 {
    let (words, mut tail) = data.as_chunks::<8>();
    let (pairs, lone) = words.as_chunks::<2>();
    // Two independent accumulators halve the length of the add-with-carry dependency chain.
    let mut a = 0u64;
    let mut b = 0u64;
    for [x, y] in pairs {
        a = add_carry(a, u64::from_ne_bytes(*x));
        b = add_carry(b, u64::from_ne_bytes(*y));
    }
    for x in lone {
        a = add_carry(a, u64::from_ne_bytes(*x));
    }
    let mut acc = add_carry(a, b);
    if let Some((w, rest)) = tail.split_first_chunk::<4>() {
        acc = add_carry(acc, u64::from(u32::from_ne_bytes(*w)));
        tail = rest;
    }
    if let Some((w, rest)) = tail.split_first_chunk::<2>() {
        acc = add_carry(acc, u64::from(u16::from_ne_bytes(*w)));
        tail = rest;
    }
    if let [last] = tail {
        // A trailing odd byte is the high-order half of a zero-padded word.
        acc = add_carry(acc, u64::from(u16::from_ne_bytes([*last, 0])));
    }
    acc
}

impl Checksum {
    /// An empty sum.
    #[inline]
    pub const fn new() -> Self {
        Self { acc: 0, odd: false }
    }

    /// Adds a run of bytes that follows everything added so far.
    #[inline]
    #[must_use]
    pub fn add_bytes(mut self, data: &[u8]) -> Self {
        let mut s = fold(sum_native(data));
        if self.odd {
            s = s.swap_bytes();
        }
        self.acc = add_carry(self.acc, u64::from(s));
        self.odd ^= data.len() % 2 == 1;
        self
    }

    /// Adds the sum of a run computed on its own (from its own start), as if its bytes were
    /// added here: the same result as `add_bytes` over them. It lets a copy be summed from its
    /// source, which the copy has just brought into the cache.
    #[inline]
    #[must_use]
    pub fn add_sum(mut self, run: Checksum) -> Self {
        let mut s = fold(run.acc);
        if self.odd {
            s = s.swap_bytes();
        }
        self.acc = add_carry(self.acc, u64::from(s));
        self.odd ^= run.odd;
        self
    }

    /// Adds a 16-bit value as it would appear on the wire (big-endian).
    #[inline]
    #[must_use]
    pub fn add_u16(mut self, v: u16) -> Self {
        let mut w = u16::from_ne_bytes(v.to_be_bytes());
        if self.odd {
            w = w.swap_bytes();
        }
        self.acc = add_carry(self.acc, u64::from(w));
        self
    }

    /// Adds a 32-bit value as it would appear on the wire (big-endian).
    #[inline]
    #[must_use]
    pub fn add_u32(self, v: u32) -> Self {
        self.add_u16((v >> 16) as u16).add_u16(v as u16)
    }

    /// Adds an IPv4 address in network order.
    #[inline]
    #[must_use]
    pub fn add_ipv4(self, addr: Ipv4Addr) -> Self {
        self.add_u32(addr.to_bits())
    }

    /// The folded one's-complement sum, as a host-order value of the big-endian word.
    #[inline]
    pub fn sum(self) -> u16 {
        u16::from_be_bytes(fold(self.acc).to_ne_bytes())
    }

    /// The checksum to place in a header: the complement of [`Checksum::sum`].
    ///
    /// Over a message that already contains a correct checksum this is 0.
    #[inline]
    pub fn finish(self) -> u16 {
        !self.sum()
    }
}

/// The Internet checksum of `data` (0 when `data` includes a correct checksum field).
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    Checksum::new().add_bytes(data).finish()
}

/// The sum of the IPv4 pseudo-header that TCP and UDP checksums cover (RFC 9293 §3.1, RFC 768).
#[inline]
pub fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> Checksum {
    Checksum::new()
        .add_ipv4(src)
        .add_ipv4(dst)
        .add_u16(u16::from(protocol))
        .add_u16(l4_len)
}

/// Updates checksum `check` after a 16-bit field changed from `old` to `new` (RFC 1624 eqn. 3).
///
/// Equation 3 rather than the older RFC 1141 form, because the latter can produce 0xffff where a
/// full recomputation yields 0x0000.
#[inline]
pub fn update_u16(check: u16, old: u16, new: u16) -> u16 {
    let sum = u32::from(!check) + u32::from(!old) + u32::from(new);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Updates checksum `check` after a 32-bit field (aligned to a 16-bit boundary) changed.
#[inline]
pub fn update_u32(check: u16, old: u32, new: u32) -> u16 {
    let sum = u32::from(!check)
        + u32::from(!(old >> 16) as u16)
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    !(sum as u16)
}

/// Updates checksum `check` after an IPv4 address it covers was rewritten (header or pseudo-header).
#[inline]
pub fn update_ipv4_addr(check: u16, old: Ipv4Addr, new: Ipv4Addr) -> u16 {
    update_u32(check, old.to_bits(), new.to_bits())
}

/// Updates an IPv4 header checksum after the TTL changed; `protocol` shares the TTL's word.
#[inline]
pub fn update_ttl(check: u16, protocol: u8, old_ttl: u8, new_ttl: u8) -> u16 {
    update_u16(
        check,
        u16::from_be_bytes([old_ttl, protocol]),
        u16::from_be_bytes([new_ttl, protocol]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_summed_on_its_own_adds_like_its_bytes() {
        let data: [u8; 301] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        for split in [0, 1, 2, 3, 150, 151, 300, 301] {
            for start in [0, 1, 2] {
                let whole = Checksum::new()
                    .add_bytes(&data[..start])
                    .add_bytes(&data[start..]);
                let head = Checksum::new().add_bytes(&data[..start]);
                let run = Checksum::new()
                    .add_bytes(&data[start..split.max(start)])
                    .add_bytes(&data[split.max(start)..]);
                assert_eq!(
                    head.add_sum(run).finish(),
                    whole.finish(),
                    "{split} {start}"
                );
            }
        }
    }

    /// Word-at-a-time reference implementation straight from the RFC 1071 definition.
    fn reference(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let w = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(w);
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: these bytes sum to 0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(Checksum::new().add_bytes(&data).sum(), 0xddf2);
        assert_eq!(checksum(&data), 0x220d);
        // Splitting the message anywhere, including at odd offsets, must not change the result.
        for cut in 0..=data.len() {
            let (a, b) = data.split_at(cut);
            assert_eq!(
                Checksum::new().add_bytes(a).add_bytes(b).sum(),
                0xddf2,
                "cut {cut}"
            );
        }
        let s = Checksum::new()
            .add_bytes(&data[..1])
            .add_bytes(&data[1..4])
            .add_bytes(&data[4..5])
            .add_bytes(&data[5..]);
        assert_eq!(s.sum(), 0xddf2);
    }

    #[test]
    fn known_ipv4_header() {
        // A commonly cited 20-byte header whose checksum field holds 0xb861.
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0);
        hdr[10] = 0;
        hdr[11] = 0;
        assert_eq!(checksum(&hdr), 0xb861);
    }

    #[test]
    fn odd_lengths_and_all_tail_paths() {
        let data: [u8; 64] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        for len in 0..=data.len() {
            assert_eq!(checksum(&data[..len]), reference(&data[..len]), "len {len}");
        }
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(checksum(&[0xff; 1500]), reference(&[0xff; 1500]));
    }

    #[test]
    fn word_helpers_match_bytes() {
        let a = Ipv4Addr::new(10, 1, 2, 3);
        let b = Ipv4Addr::new(192, 168, 200, 7);
        let mut bytes = [0u8; 12];
        bytes[..4].copy_from_slice(&a.octets());
        bytes[4..8].copy_from_slice(&b.octets());
        bytes[9] = 17;
        bytes[10..].copy_from_slice(&1234u16.to_be_bytes());
        assert_eq!(
            pseudo_header(a, b, 17, 1234).sum(),
            Checksum::new().add_bytes(&bytes).sum()
        );
        // A word added after an odd-length run straddles two byte positions.
        let odd = Checksum::new().add_bytes(&[0xab]).add_u16(0x1234).sum();
        assert_eq!(odd, Checksum::new().add_bytes(&[0xab, 0x12, 0x34]).sum());
    }

    #[test]
    fn incremental_updates_match_recomputation() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let new = update_ttl(0xb861, 0x11, 0x40, 0x3f);
        hdr[8] = 0x3f;
        hdr[10..12].copy_from_slice(&new.to_be_bytes());
        assert_eq!(checksum(&hdr), 0);

        let old_src = Ipv4Addr::new(192, 168, 0, 1);
        let new_src = Ipv4Addr::new(10, 255, 0, 254);
        let new = update_ipv4_addr(new, old_src, new_src);
        hdr[12..16].copy_from_slice(&new_src.octets());
        hdr[10..12].copy_from_slice(&new.to_be_bytes());
        assert_eq!(checksum(&hdr), 0);
        hdr[10] = 0;
        hdr[11] = 0;
        assert_eq!(checksum(&hdr), new);
    }
}
