//! A byte ring that grows on demand up to a fixed bound, so an idle connection holds little and
//! a busy one stops allocating once it reached its bound.

use corral_wire::checksum::Checksum;

/// Smallest allocation, so that a short exchange does not grow the ring several times.
const MIN_ALLOC: usize = 2048;

/// Bytes at offsets `0..len` from `head` are committed; bytes beyond `len` (up to `max`) may be
/// written ahead of time with [`ByteRing::write_at`] (out-of-order data).
#[derive(Debug)]
pub(super) struct ByteRing {
    buf: Vec<u8>,
    head: usize,
    len: usize,
    max: usize,
}

impl ByteRing {
    pub(super) fn new(max: usize) -> ByteRing {
        ByteRing {
            buf: Vec::new(),
            head: 0,
            len: 0,
            max,
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The bound: committed plus free bytes.
    #[inline]
    pub(super) fn max(&self) -> usize {
        self.max
    }

    #[inline]
    pub(super) fn free(&self) -> usize {
        self.max - self.len
    }

    /// Bytes of heap held.
    #[inline]
    pub(super) fn allocated(&self) -> usize {
        self.buf.capacity()
    }

    /// Makes offsets `0..end` addressable, keeping every byte already written at its offset.
    fn reserve(&mut self, end: usize) {
        let old = self.buf.len();
        if end <= old {
            return;
        }
        debug_assert!(end <= self.max);
        let cap = end.max(old * 2).max(MIN_ALLOC).min(self.max);
        let mut grown = vec![0u8; cap];
        let (front, back) = self.buf.split_at(self.head);
        grown[..back.len()].copy_from_slice(back);
        grown[back.len()..old].copy_from_slice(front);
        self.buf = grown;
        self.head = 0;
    }

    /// Writes `data` at `offset` from the head; `offset + data.len()` must be at most `max`.
    pub(super) fn write_at(&mut self, offset: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.reserve(offset + data.len());
        let cap = self.buf.len();
        let start = (self.head + offset) % cap;
        let first = data.len().min(cap - start);
        self.buf[start..start + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
    }

    /// Counts `n` more bytes, already written past the committed ones, as committed.
    #[inline]
    pub(super) fn commit(&mut self, n: usize) {
        debug_assert!(self.len + n <= self.max);
        self.len += n;
    }

    /// Appends as much of `data` as fits; returns how much.
    pub(super) fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        self.write_at(self.len, &data[..n]);
        self.len += n;
        n
    }

    /// Committed bytes `offset..offset + n`, as the run up to the ring's end and the rest.
    fn runs(&self, offset: usize, n: usize) -> (&[u8], &[u8]) {
        debug_assert!(offset + n <= self.len);
        if n == 0 {
            return (&[], &[]);
        }
        let cap = self.buf.len();
        let start = (self.head + offset) % cap;
        let first = n.min(cap - start);
        (&self.buf[start..start + first], &self.buf[..n - first])
    }

    /// Copies committed bytes `offset..offset + out.len()` into `out`; returns the two runs
    /// copied.
    pub(super) fn peek(&self, offset: usize, out: &mut [u8]) -> (&[u8], &[u8]) {
        let (a, b) = self.runs(offset, out.len());
        out[..a.len()].copy_from_slice(a);
        out[a.len()..].copy_from_slice(b);
        (a, b)
    }

    /// As [`ByteRing::peek`], and returns the bytes' Internet checksum sum, taken from the
    /// ring while the copy has it in the cache.
    pub(super) fn peek_summed(&self, offset: usize, out: &mut [u8]) -> Checksum {
        let (a, b) = self.peek(offset, out);
        Checksum::new().add_bytes(a).add_bytes(b)
    }

    /// Drops `n` committed bytes from the head.
    #[inline]
    pub(super) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        if n == 0 {
            return;
        }
        self.head = (self.head + n) % self.buf.len();
        self.len -= n;
    }

    /// Moves committed bytes into `out`; returns how many.
    pub(super) fn read(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len);
        self.peek(0, &mut out[..n]);
        self.consume(n);
        n
    }

    /// Returns the heap, when nothing is held, for a connection that will not use it again.
    pub(super) fn release(&mut self) {
        self.buf = Vec::new();
        self.head = 0;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_grows_and_keeps_bytes_written_ahead() {
        let mut r = ByteRing::new(10_000);
        assert_eq!(r.allocated(), 0);
        let data: Vec<u8> = (0..=255u8).cycle().take(1500).collect();
        assert_eq!(r.push(&data), 1500);
        let mut out = [0u8; 1000];
        assert_eq!(r.read(&mut out), 1000);
        assert_eq!(&out[..], &data[..1000]);
        // Written ahead, then the gap filled: growth must keep both where they were.
        r.write_at(3000, &data[..1000]);
        r.write_at(500, &data);
        r.write_at(2000, &data[..1000]);
        r.commit(4000 - r.len());
        assert!(r.allocated() >= 4000 && r.allocated() <= 10_000);
        let mut all = vec![0u8; 4000];
        r.peek(0, &mut all);
        assert_eq!(&all[..500], &data[1000..1500]);
        assert_eq!(&all[500..2000], &data[..]);
        assert_eq!(&all[2000..3000], &data[..1000]);
        assert_eq!(&all[3000..4000], &data[..1000]);
        assert_eq!(r.push(&[1u8; 7000]), 6000, "bounded");
        assert_eq!(r.free(), 0);
        assert_eq!(r.allocated(), 10_000);
    }
}
