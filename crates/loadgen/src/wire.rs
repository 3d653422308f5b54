//! The request payload (a UDP datagram's data). A spin server reads the service time, spins
//! for it and sends the same bytes back, so the response is decoded with the same function.
//!
//! Layout, all little-endian, [`HEADER_LEN`] bytes then zero padding up to the payload size:
//!
//! | offset | size | field |
//! | ------ | ---- | ----- |
//! | 0  | 4 | magic `b"CRLQ"` |
//! | 4  | 4 | total payload length in bytes, header included |
//! | 8  | 8 | request id |
//! | 16 | 8 | scheduled send time, ns (the generator's clock) |
//! | 24 | 4 | requested service time, ns |
//! | 28 | 4 | client id |
//! | 32 | 4 | check: a hash of bytes 0..32 |
//!
//! The length field catches truncation by any layer; the check word makes it very unlikely
//! that foreign or damaged bytes that happen to start with the magic are taken for a request
//! (latency is measured from the echoed scheduled time, so a damaged one must be rejected).

use std::fmt;

use crate::schedule::Request;

/// First four bytes of every payload.
pub const MAGIC: u32 = u32::from_le_bytes(*b"CRLQ");
/// Bytes of the header; the smallest payload.
pub const HEADER_LEN: usize = 36;
/// The largest payload: the most a UDP datagram over IPv4 can carry.
pub const MAX_LEN: usize = 65_507;

/// The fields a request carries (and its echo returns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Message {
    pub id: u64,
    pub scheduled_send_ns: u64,
    pub service_ns: u32,
    pub client: u32,
}

impl From<&Request> for Message {
    /// `scheduled_send_ns` is the request's time relative to the start of its schedule; a
    /// generator that keeps another clock sets the field itself.
    fn from(r: &Request) -> Self {
        Message {
            id: r.id,
            scheduled_send_ns: r.send_ns,
            service_ns: r.service_ns,
            client: r.client,
        }
    }
}

/// Why bytes are not a valid payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than a header (or a buffer too small to encode into).
    TooShort {
        len: usize,
    },
    /// More bytes than [`MAX_LEN`].
    TooLong {
        len: usize,
    },
    BadMagic {
        found: u32,
    },
    /// The length field disagrees with the number of bytes: the datagram was truncated or
    /// padded on the way.
    LengthMismatch {
        declared: u32,
        actual: usize,
    },
    /// The check word does not match the header: the header was damaged.
    BadCheck {
        declared: u32,
        computed: u32,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WireError::TooShort { len } => {
                write!(
                    f,
                    "payload of {len} bytes is shorter than the {HEADER_LEN}-byte header"
                )
            }
            WireError::TooLong { len } => {
                write!(
                    f,
                    "payload of {len} bytes is longer than the maximum {MAX_LEN}"
                )
            }
            WireError::BadMagic { found } => write!(
                f,
                "bad magic {found:#010x} (expected {MAGIC:#010x}): not a load generator payload"
            ),
            WireError::LengthMismatch { declared, actual } => write!(
                f,
                "payload declares {declared} bytes but has {actual}: truncated or padded"
            ),
            WireError::BadCheck { declared, computed } => write!(
                f,
                "header check {declared:#010x} does not match its contents ({computed:#010x}): damaged"
            ),
        }
    }
}

impl std::error::Error for WireError {}

impl Message {
    /// Writes the message as a payload filling all of `buf` (header, then zeros).
    #[inline]
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let len = buf.len();
        if len < HEADER_LEN {
            return Err(WireError::TooShort { len });
        }
        if len > MAX_LEN {
            return Err(WireError::TooLong { len });
        }
        let (header, padding) = buf.split_at_mut(HEADER_LEN);
        header[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        // MAX_LEN fits in u32, checked above.
        header[4..8].copy_from_slice(&(len as u32).to_le_bytes());
        header[8..16].copy_from_slice(&self.id.to_le_bytes());
        header[16..24].copy_from_slice(&self.scheduled_send_ns.to_le_bytes());
        header[24..28].copy_from_slice(&self.service_ns.to_le_bytes());
        header[28..32].copy_from_slice(&self.client.to_le_bytes());
        let check = check_word(header[..32].try_into().expect("32-byte slice"));
        header[32..36].copy_from_slice(&check.to_le_bytes());
        padding.fill(0);
        Ok(())
    }

    /// Reads a payload; any malformed input gives an error, never a panic. Padding bytes are
    /// not inspected.
    #[inline]
    pub fn decode(buf: &[u8]) -> Result<Message, WireError> {
        let len = buf.len();
        if len < HEADER_LEN {
            return Err(WireError::TooShort { len });
        }
        if len > MAX_LEN {
            return Err(WireError::TooLong { len });
        }
        let magic = le_u32(buf, 0);
        if magic != MAGIC {
            return Err(WireError::BadMagic { found: magic });
        }
        let declared = le_u32(buf, 4);
        if declared as usize != len {
            return Err(WireError::LengthMismatch {
                declared,
                actual: len,
            });
        }
        let computed = check_word(buf[..32].try_into().expect("32-byte slice"));
        let check = le_u32(buf, 32);
        if check != computed {
            return Err(WireError::BadCheck {
                declared: check,
                computed,
            });
        }
        Ok(Message {
            id: le_u64(buf, 8),
            scheduled_send_ns: le_u64(buf, 16),
            service_ns: le_u32(buf, 24),
            client: le_u32(buf, 28),
        })
    }
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4-byte slice"))
}

#[inline]
fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8-byte slice"))
}

/// A 32-bit hash of the header's first 32 bytes: each 64-bit word is folded in with a
/// multiply-rotate step, then the state is finalized with a 64-bit mixer. Any single changed
/// bit changes the result; it is not meant to resist deliberate forgery.
#[inline]
fn check_word(h: &[u8; 32]) -> u32 {
    let mut s: u64 = 0x243F_6A88_85A3_08D3;
    for chunk in h.chunks_exact(8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        s = (s ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    s ^= s >> 33;
    s = s.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    s ^= s >> 33;
    (s ^ (s >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn msg() -> Message {
        Message {
            id: 0x0102_0304_0506_0708,
            scheduled_send_ns: 123_456_789,
            service_ns: 10_000,
            client: 7,
        }
    }

    #[test]
    fn layout_is_little_endian_and_padded_with_zeros() {
        let mut buf = [0xAAu8; 64];
        msg().encode(&mut buf).unwrap();
        assert_eq!(&buf[0..4], b"CRLQ");
        assert_eq!(&buf[4..8], &64u32.to_le_bytes());
        assert_eq!(&buf[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&buf[24..28], &10_000u32.to_le_bytes());
        assert_eq!(&buf[28..32], &7u32.to_le_bytes());
        assert!(buf[HEADER_LEN..].iter().all(|&b| b == 0));
        assert_eq!(Message::decode(&buf).unwrap(), msg());
    }

    #[test]
    fn rejects_bad_input_with_the_reason() {
        let mut buf = [0u8; 64];
        msg().encode(&mut buf).unwrap();
        assert_eq!(
            Message::decode(&buf[..35]),
            Err(WireError::TooShort { len: 35 })
        );
        assert_eq!(
            Message::decode(&buf[..40]),
            Err(WireError::LengthMismatch {
                declared: 64,
                actual: 40
            })
        );
        let mut bad = buf;
        bad[0] ^= 1;
        assert!(matches!(
            Message::decode(&bad),
            Err(WireError::BadMagic { .. })
        ));
        let mut bad = buf;
        bad[20] ^= 0x10;
        assert!(matches!(
            Message::decode(&bad),
            Err(WireError::BadCheck { .. })
        ));
        assert_eq!(
            msg().encode(&mut [0u8; 10]),
            Err(WireError::TooShort { len: 10 })
        );
        assert_eq!(
            msg().encode(&mut vec![0u8; MAX_LEN + 1]),
            Err(WireError::TooLong { len: MAX_LEN + 1 })
        );
        assert_eq!(
            Message::decode(&vec![0u8; MAX_LEN + 1]),
            Err(WireError::TooLong { len: MAX_LEN + 1 })
        );
        for e in [
            WireError::TooShort { len: 1 },
            WireError::BadMagic { found: 0 },
        ] {
            assert!(!e.to_string().is_empty());
        }
    }

    #[test]
    fn every_single_bit_flip_in_the_header_is_caught() {
        let mut buf = [0u8; HEADER_LEN];
        msg().encode(&mut buf).unwrap();
        for bit in 0..HEADER_LEN * 8 {
            let mut b = buf;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(Message::decode(&b).is_err(), "bit {bit}");
        }
    }

    proptest! {
        #[test]
        fn round_trip(id: u64, sched: u64, service: u32, client: u32, len in HEADER_LEN..2048usize) {
            let m = Message { id, scheduled_send_ns: sched, service_ns: service, client };
            let mut buf = vec![0xFFu8; len];
            m.encode(&mut buf).unwrap();
            prop_assert_eq!(Message::decode(&buf), Ok(m));
            // Truncation anywhere is an error, not a wrong message.
            let cut = len / 2;
            prop_assert!(Message::decode(&buf[..cut]).is_err());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = Message::decode(&bytes);
        }

        #[test]
        fn random_bytes_after_a_valid_magic_and_length_are_rejected(
            rest in proptest::collection::vec(any::<u8>(), 28..200)
        ) {
            let mut bytes = b"CRLQ".to_vec();
            bytes.extend_from_slice(&((rest.len() + 8) as u32).to_le_bytes());
            bytes.extend_from_slice(&rest);
            // Only a matching check word can make these decode; allow that 2^-32 chance by
            // checking consistency rather than demanding an error.
            if let Ok(m) = Message::decode(&bytes) {
                let mut again = vec![0u8; bytes.len()];
                m.encode(&mut again).unwrap();
                prop_assert_eq!(&again[..HEADER_LEN], &bytes[..HEADER_LEN]);
            }
        }
    }
}
