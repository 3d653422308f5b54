//! The bytes a source sends: a seeded xorshift stream, so that any length's SHA-256 can be
//! computed on both sides without storing the data.

use sha2::{Digest, Sha256};

/// An endless, seeded byte stream.
pub struct Pattern {
    state: u64,
}

impl Pattern {
    pub fn new(seed: u64) -> Pattern {
        // SplitMix64 of the seed, never zero (xorshift's fixed point).
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Pattern {
            state: (z ^ (z >> 31)) | 1,
        }
    }

    /// Fills `buf` with the next bytes. Callers use a fixed chunk size that is a multiple of 8
    /// (except for the last chunk) so that the stream does not depend on how it is cut.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let mut x = self.state;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.state = x;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// The chunk size sources write in (a multiple of 8).
pub const CHUNK: usize = 64 * 1024;

/// Calls `each` with consecutive chunks of the first `len` bytes of the stream for `seed`.
pub fn for_each_chunk(len: u64, seed: u64, mut each: impl FnMut(&[u8])) {
    let mut pattern = Pattern::new(seed);
    let mut buf = vec![0u8; CHUNK];
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        pattern.fill(&mut buf[..n]);
        each(&buf[..n]);
        left -= n as u64;
    }
}

/// The SHA-256 of the first `len` bytes of the stream for `seed`.
pub fn sha256(len: u64, seed: u64) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for_each_chunk(len, seed, |c| hasher.update(c));
    hasher.finalize().into()
}

/// Writes the first `len` bytes of the stream for `seed` to a file (for `socat`/`nc`).
pub fn write_file(path: &std::path::Path, len: u64, seed: u64) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut result = Ok(());
    for_each_chunk(len, seed, |c| {
        if result.is_ok() {
            result = file.write_all(c);
        }
    });
    result?;
    file.flush()
}
