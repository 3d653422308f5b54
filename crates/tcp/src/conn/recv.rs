//! The receive side's storage: one ring bounded by the receive buffer holds the in-order bytes
//! the application has not read and, further on, out-of-order bytes at their final offsets, so
//! a segment that fills a hole makes everything behind it readable without copying again.
//! Out-of-order ranges are bounded by `max_ooo_ranges`; each remembers when it last changed, for
//! SACK (RFC 2018 §4: the block holding the most recent segment first).

use corral_wire::SackList;

use super::ring::ByteRing;
use crate::seq::Seq;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OooRange {
    start: Seq,
    end: Seq,
    /// Higher is more recently changed.
    stamp: u32,
}

/// What storing a segment did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    /// In order: RCV.NXT moved by this many bytes (the segment and any ranges it joined).
    InOrder(u32),
    /// Queued out of order.
    OutOfOrder,
    /// A new range was refused: `max_ooo_ranges` are held.
    QueueFull,
}

#[derive(Debug)]
pub(super) struct RecvBuffer {
    ring: ByteRing,
    ooo: Vec<OooRange>,
    max_ranges: usize,
    stamp: u32,
}

impl RecvBuffer {
    pub(super) fn new(max: usize, max_ranges: usize) -> RecvBuffer {
        RecvBuffer {
            ring: ByteRing::new(max),
            ooo: Vec::new(),
            max_ranges,
            stamp: 0,
        }
    }

    /// In-order bytes waiting for the application.
    #[inline]
    pub(super) fn readable(&self) -> usize {
        self.ring.len()
    }

    /// The receive window: room after the unread bytes (out-of-order bytes sit inside it).
    #[inline]
    pub(super) fn window(&self) -> usize {
        self.ring.free()
    }

    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.ring.max()
    }

    #[inline]
    pub(super) fn has_ooo(&self) -> bool {
        !self.ooo.is_empty()
    }

    pub(super) fn allocated(&self) -> usize {
        self.ring.allocated() + self.ooo.capacity() * core::mem::size_of::<OooRange>()
    }

    /// Stores `data` starting at `seq`, which lies in `[rcv_nxt, rcv_nxt + window)` with all of
    /// `data` inside the window.
    pub(super) fn store(&mut self, rcv_nxt: Seq, seq: Seq, data: &[u8]) -> Stored {
        let offset = (seq - rcv_nxt) as usize;
        debug_assert!(offset + data.len() <= self.window());
        let end = seq + data.len() as u32;
        if offset == 0 {
            self.ring.write_at(self.ring.len(), data);
            let mut new_nxt = end;
            // Ranges are sorted: join every one the new data reaches.
            let joined = self.ooo.iter().take_while(|r| r.start.le(new_nxt)).count();
            for r in self.ooo.drain(..joined) {
                new_nxt = new_nxt.max(r.end);
            }
            let advanced = new_nxt - rcv_nxt;
            self.ring.commit(advanced as usize);
            return Stored::InOrder(advanced);
        }
        // Ranges overlapping or touching [seq, end) merge into one.
        let first = self.ooo.iter().take_while(|r| r.end.lt(seq)).count();
        let last = first
            + self.ooo[first..]
                .iter()
                .take_while(|r| r.start.le(end))
                .count();
        if first == last && self.ooo.len() >= self.max_ranges {
            return Stored::QueueFull;
        }
        self.ring.write_at(self.ring.len() + offset, data);
        self.stamp = self.stamp.wrapping_add(1);
        let mut merged = OooRange {
            start: seq,
            end,
            stamp: self.stamp,
        };
        for r in &self.ooo[first..last] {
            merged.start = merged.start.min(r.start);
            merged.end = merged.end.max(r.end);
        }
        if first == last {
            if self.ooo.capacity() == 0 {
                // The one allocation of the queue, at its bound.
                self.ooo.reserve_exact(self.max_ranges);
            }
            self.ooo.insert(first, merged);
        } else {
            self.ooo[first] = merged;
            self.ooo.drain(first + 1..last);
        }
        Stored::OutOfOrder
    }

    /// Moves unread bytes into `out`.
    #[inline]
    pub(super) fn read(&mut self, out: &mut [u8]) -> usize {
        self.ring.read(out)
    }

    /// Fills `list` with up to `max` SACK blocks, most recently changed first.
    pub(super) fn sack_blocks(&self, list: &mut SackList, max: usize) {
        let mut last_stamp = None::<u32>;
        for _ in 0..max.min(self.ooo.len()) {
            // Few blocks over few ranges: a selection by recency, no sorting and no allocation.
            let next = self
                .ooo
                .iter()
                .filter(|r| last_stamp.is_none_or(|s| (r.stamp.wrapping_sub(s) as i32) < 0))
                .max_by(|a, b| (a.stamp.wrapping_sub(b.stamp) as i32).cmp(&0));
            let Some(r) = next else { break };
            list.push(r.start.0, r.end.0);
            last_stamp = Some(r.stamp);
        }
    }

    /// Forgets the out-of-order ranges of a connection that will not receive again; the
    /// in-order bytes stay readable.
    pub(super) fn discard_out_of_order(&mut self) {
        self.ooo = Vec::new();
    }

    /// Returns the heap of a connection that will not receive again.
    pub(super) fn release(&mut self) {
        self.ring.release();
        self.ooo = Vec::new();
    }

    #[cfg(test)]
    pub(super) fn ooo_ranges(&self) -> Vec<(u32, u32)> {
        self.ooo.iter().map(|r| (r.start.0, r.end.0)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_fill_and_ranges_merge_within_bounds() {
        let mut b = RecvBuffer::new(10_000, 2);
        let nxt = Seq(u32::MAX - 50);
        let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        assert_eq!(
            b.store(nxt, nxt + 300, &bytes[300..400]),
            Stored::OutOfOrder
        );
        assert_eq!(
            b.store(nxt, nxt + 600, &bytes[600..700]),
            Stored::OutOfOrder
        );
        assert_eq!(b.store(nxt, nxt + 800, &bytes[800..900]), Stored::QueueFull);
        // Touching the first range merges into it, not a new range.
        assert_eq!(
            b.store(nxt, nxt + 400, &bytes[400..500]),
            Stored::OutOfOrder
        );
        let mut list = SackList::EMPTY;
        b.sack_blocks(&mut list, 4);
        assert_eq!(
            list.as_slice(),
            [
                ((nxt + 300).0, (nxt + 500).0),
                ((nxt + 600).0, (nxt + 700).0)
            ]
        );
        assert_eq!(b.store(nxt, nxt, &bytes[..350]), Stored::InOrder(500));
        assert_eq!(b.ooo_ranges(), [((nxt + 600).0, (nxt + 700).0)]);
        let mut out = vec![0u8; 1000];
        assert_eq!(b.read(&mut out), 500);
        assert_eq!(&out[..500], &bytes[..500]);
        assert_eq!(b.window(), 10_000);
    }
}
