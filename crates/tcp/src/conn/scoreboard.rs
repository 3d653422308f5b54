//! The sender's record of what the peer reported in SACK blocks (RFC 2018), above SND.UNA: a
//! few sorted, disjoint ranges in a fixed array (no heap), enough to skip SACKed data when
//! retransmitting in recovery.

use crate::seq::Seq;

/// Ranges kept; a peer sends at most four blocks per ACK, and holes beyond the eighth range are
/// left to the RTO.
const MAX_RANGES: usize = 8;

#[derive(Clone, Debug, Default)]
pub(super) struct Scoreboard {
    ranges: [(Seq, Seq); MAX_RANGES],
    len: usize,
}

impl Scoreboard {
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn clear(&mut self) {
        self.len = 0;
    }

    fn as_slice(&self) -> &[(Seq, Seq)] {
        &self.ranges[..self.len]
    }

    /// Records a SACK block `[left, right)` after clipping it to `[snd_una, snd_max]`; returns
    /// whether it told something new.
    pub(super) fn add(&mut self, left: Seq, right: Seq, snd_una: Seq, snd_max: Seq) -> bool {
        let left = left.max(snd_una);
        if right.gt(snd_max) || right.le(left) {
            return false;
        }
        let first = self.as_slice().iter().take_while(|r| r.1.lt(left)).count();
        let last = first
            + self.as_slice()[first..]
                .iter()
                .take_while(|r| r.0.le(right))
                .count();
        if first == last {
            if self.len == MAX_RANGES {
                if first == MAX_RANGES {
                    return false;
                }
                // Keep the lowest ranges: they describe the holes retransmitted first.
                self.len -= 1;
            }
            self.ranges.copy_within(first..self.len, first + 1);
            self.ranges[first] = (left, right);
            self.len += 1;
            return true;
        }
        let merged = (
            left.min(self.ranges[first].0),
            right.max(self.ranges[last - 1].1),
        );
        let new = merged != self.ranges[first] || last - first > 1;
        self.ranges[first] = merged;
        self.ranges.copy_within(last..self.len, first + 1);
        self.len -= last - first - 1;
        new
    }

    /// SND.UNA moved to `una`: forget what it covers.
    pub(super) fn ack(&mut self, una: Seq) {
        let gone = self.as_slice().iter().take_while(|r| r.1.le(una)).count();
        self.ranges.copy_within(gone..self.len, 0);
        self.len -= gone;
        if self.len > 0 && self.ranges[0].0.lt(una) {
            self.ranges[0].0 = una;
        }
    }

    /// The highest SACKed sequence number.
    pub(super) fn highest(&self) -> Option<Seq> {
        self.as_slice().last().map(|r| r.1)
    }

    /// The first unSACKed range at or after `from` and below `limit`, at most `max` long.
    pub(super) fn next_hole(&self, from: Seq, limit: Seq, max: u32) -> Option<(Seq, u32)> {
        let mut seq = from;
        for &(start, end) in self.as_slice() {
            if end.le(seq) {
                continue;
            }
            if start.le(seq) {
                seq = end;
                continue;
            }
            let stop = start.min(limit);
            return seq.lt(stop).then(|| (seq, (stop - seq).min(max)));
        }
        seq.lt(limit).then(|| (seq, (limit - seq).min(max)))
    }

    /// SACKed bytes below `seq`.
    pub(super) fn sacked_below(&self, seq: Seq) -> u32 {
        self.as_slice()
            .iter()
            .take_while(|r| r.0.lt(seq))
            .map(|r| r.1.min(seq) - r.0)
            .sum()
    }

    pub(super) fn sacked_bytes(&self) -> u32 {
        self.as_slice().iter().map(|r| r.1 - r.0).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_clips_and_finds_holes() {
        let mut s = Scoreboard::default();
        let (una, max) = (Seq(1000), Seq(9000));
        assert!(s.add(Seq(3000), Seq(4000), una, max));
        assert!(s.add(Seq(6000), Seq(7000), una, max));
        assert!(!s.add(Seq(3000), Seq(4000), una, max), "nothing new");
        assert!(!s.add(Seq(8000), Seq(9500), una, max), "beyond SND.MAX");
        assert!(s.add(Seq(4000), Seq(5000), una, max));
        assert_eq!(
            s.as_slice(),
            [(Seq(3000), Seq(5000)), (Seq(6000), Seq(7000))]
        );
        assert_eq!(s.sacked_bytes(), 3000);
        assert_eq!(s.sacked_below(Seq(4500)), 1500);
        assert_eq!(s.sacked_below(Seq(9000)), 3000);
        assert_eq!(s.sacked_below(Seq(3000)), 0);
        let hi = s.highest().unwrap();
        assert_eq!(s.next_hole(una, hi, 1460), Some((Seq(1000), 1460)));
        assert_eq!(s.next_hole(Seq(2460), hi, 1460), Some((Seq(2460), 540)));
        assert_eq!(s.next_hole(Seq(3000), hi, 1460), Some((Seq(5000), 1000)));
        assert_eq!(s.next_hole(Seq(6500), hi, 1460), None);
        s.ack(Seq(3500));
        assert_eq!(
            s.as_slice(),
            [(Seq(3500), Seq(5000)), (Seq(6000), Seq(7000))]
        );
        s.ack(Seq(7000));
        assert!(s.is_empty());
        for i in 0..10u32 {
            s.add(Seq(1100 + 200 * i), Seq(1200 + 200 * i), una, max);
        }
        assert_eq!(s.len, MAX_RANGES);
        assert_eq!(s.ranges[0], (Seq(1100), Seq(1200)));
    }
}
