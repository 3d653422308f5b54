//! The split of the slowest requests: what the requests above p99 and above p99.9 spent their
//! time on (see [`crate::split`]).
//!
//! Keeping every request's split would take tens of megabytes at a run's rates, so
//! [`TailKeeper`] keeps only the slowest: a min-heap of fixed capacity, sized when the run
//! starts so that it holds the slowest 1% of as many responses as the schedule can produce.
//! Nothing is allocated per request, and a request costs a heap operation only while it is
//! among the slowest seen so far.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde::{Deserialize, Serialize};

use crate::split::{Split, Stage, Unsplit};

/// The fraction of requests above p99 that the keeper must hold; 1% plus room for rounding.
const KEPT_FRACTION_DIVISOR: u64 = 100;
const KEPT_EXTRA: u64 = 64;

/// The slowest requests' splits, bounded. See the module documentation.
#[derive(Clone, Debug)]
pub struct TailKeeper {
    /// The slowest requests offered, fastest on top; never more than `capacity`.
    heap: BinaryHeap<Reverse<(u64, Split)>>,
    capacity: usize,
    /// Requests offered (all with a split).
    split: u64,
    /// Matched requests without a split: no or bad stamps, or instants out of order (by the
    /// gap that came out negative, in [`Stage::ALL`] order).
    unstamped: u64,
    out_of_order: [u64; 5],
}

impl TailKeeper {
    /// A keeper that holds the slowest `capacity` requests.
    pub fn with_capacity(capacity: usize) -> TailKeeper {
        TailKeeper {
            heap: BinaryHeap::with_capacity(capacity),
            capacity,
            split: 0,
            unstamped: 0,
            out_of_order: [0; 5],
        }
    }

    /// A keeper big enough for the requests above p99 of up to `requests` responses.
    pub fn for_requests(requests: u64) -> TailKeeper {
        let n = requests / KEPT_FRACTION_DIVISOR + KEPT_EXTRA;
        TailKeeper::with_capacity(usize::try_from(n).expect("tail table fits in memory"))
    }

    /// A request that took `latency_ns` (scheduled send to response seen), split as `split`.
    #[inline]
    pub fn offer(&mut self, latency_ns: u64, split: Split) {
        self.split += 1;
        if self.heap.len() < self.capacity {
            self.heap.push(Reverse((latency_ns, split)));
        } else if let Some(mut fastest) = self.heap.peek_mut()
            && fastest.0.0 < latency_ns
        {
            *fastest = Reverse((latency_ns, split));
        }
    }

    /// A matched request whose latency could not be split, and why.
    #[inline]
    pub fn note_unsplit(&mut self, why: Unsplit) {
        match why {
            Unsplit::Unstamped => self.unstamped += 1,
            Unsplit::OutOfOrder(stage) => {
                let i = Stage::ALL.iter().position(|&s| s == stage).unwrap_or(0);
                self.out_of_order[i] += 1;
            }
        }
    }

    /// Adds what another keeper of the same run saw (a generator's other thread).
    pub fn merge(&mut self, other: &TailKeeper) {
        let split = self.split;
        for Reverse((latency_ns, s)) in other.heap.iter().copied() {
            self.offer(latency_ns, s);
        }
        self.split = split + other.split;
        self.unstamped += other.unstamped;
        for (a, b) in self.out_of_order.iter_mut().zip(other.out_of_order) {
            *a += b;
        }
    }

    /// The splits above p99 and above p99.9 of the requests offered.
    pub fn report(&self) -> TailReport {
        let out_of_order: BTreeMap<Stage, u64> = Stage::ALL
            .iter()
            .zip(self.out_of_order)
            .filter(|(_, n)| *n > 0)
            .map(|(&s, n)| (s, n))
            .collect();
        TailReport {
            split: self.split,
            unsplit: self.unstamped + out_of_order.values().sum::<u64>(),
            unstamped: self.unstamped,
            out_of_order,
            above_p99: self.above(0.99),
            above_p999: self.above(0.999),
        }
    }

    /// The slowest `ceil((1 - quantile) * split)` requests, when the keeper holds them all.
    fn above(&self, quantile: f64) -> Option<TailSplit> {
        let count = tail_count(self.split, quantile)?;
        let count_usize = usize::try_from(count).ok()?;
        if count_usize > self.heap.len() {
            return None;
        }
        let mut kept: Vec<(u64, Split)> = self.heap.iter().map(|r| r.0).collect();
        let slowest_first = |a: &(u64, Split), b: &(u64, Split)| b.cmp(a);
        let tail = if count_usize < kept.len() {
            kept.select_nth_unstable_by(count_usize - 1, slowest_first);
            &kept[..count_usize]
        } else {
            &kept[..]
        };
        let splits: Vec<Split> = tail.iter().map(|k| k.1).collect();
        Some(TailSplit {
            quantile,
            requests: count,
            threshold_ns: tail.iter().map(|k| k.0).min()?,
            median: Split::median_of(&splits)?,
        })
    }
}

/// How many of `n` requests are above `quantile`: `ceil((1 - quantile) * n)`, at least one;
/// `None` for no requests.
pub fn tail_count(n: u64, quantile: f64) -> Option<u64> {
    if n == 0 {
        return None;
    }
    let above = ((1.0 - quantile) * n as f64 - 1e-9).ceil().max(1.0) as u64;
    Some(above.min(n))
}

/// The requests above one quantile.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TailSplit {
    pub quantile: f64,
    /// How many requests are above it.
    pub requests: u64,
    /// The fastest of them: the quantile's latency.
    pub threshold_ns: u64,
    /// Each gap's median over them.
    pub median: Split,
}

/// The tail's split for a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TailReport {
    /// Matched requests whose latency was split.
    pub split: u64,
    /// Matched requests whose latency could not be split: `unstamped` plus `out_of_order`.
    pub unsplit: u64,
    /// Missing or damaged stamps.
    #[serde(default)]
    pub unstamped: u64,
    /// Instants out of order, by the gap that came out negative: the clocks are not one clock
    /// (a bug), so these say where to look.
    #[serde(default)]
    pub out_of_order: BTreeMap<Stage, u64>,
    pub above_p99: Option<TailSplit>,
    pub above_p999: Option<TailSplit>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A split whose queueing is `queue` and whose other gaps are 1 ns each.
    fn queued(queue: u64) -> Split {
        Split {
            send_late_ns: 1,
            deliver_ns: 1,
            queue_ns: queue,
            service_ns: 1,
            return_ns: 1,
        }
    }

    #[test]
    fn counts_above_a_quantile_round_up() {
        assert_eq!(tail_count(0, 0.99), None);
        assert_eq!(tail_count(1, 0.99), Some(1));
        assert_eq!(tail_count(100, 0.99), Some(1));
        assert_eq!(tail_count(101, 0.99), Some(2));
        assert_eq!(tail_count(10_000, 0.99), Some(100));
        assert_eq!(tail_count(10_000, 0.999), Some(10));
        assert_eq!(tail_count(12_345, 0.999), Some(13));
    }

    #[test]
    fn the_tail_is_the_slowest_requests_whatever_their_order() {
        // 10 000 requests with latency 1..=10 000 ns, offered in a scrambled order, into a
        // keeper sized for them: above p99 are the 100 slowest (9 901..=10 000), above p99.9
        // the 10 slowest.
        let mut k = TailKeeper::for_requests(10_000);
        assert_eq!(k.capacity, 164);
        let mut order: Vec<u64> = (1..=10_000).collect();
        fastrand::Rng::with_seed(3).shuffle(&mut order);
        for lat in order {
            k.offer(lat, queued(lat));
        }
        k.note_unsplit(Unsplit::Unstamped);
        k.note_unsplit(Unsplit::OutOfOrder(Stage::Return));
        k.note_unsplit(Unsplit::OutOfOrder(Stage::Return));
        let r = k.report();
        assert_eq!((r.split, r.unsplit, r.unstamped), (10_000, 3, 1));
        assert_eq!(r.out_of_order, [(Stage::Return, 2)].into());
        assert_eq!(
            serde_json::to_value(&r).unwrap()["out_of_order"],
            serde_json::json!({"return": 2})
        );
        let p99 = r.above_p99.unwrap();
        assert_eq!((p99.requests, p99.threshold_ns), (100, 9_901));
        // Lower median of 9 901..=10 000.
        assert_eq!(p99.median.queue_ns, 9_950);
        assert_eq!(p99.median.service_ns, 1);
        let p999 = r.above_p999.unwrap();
        assert_eq!((p999.requests, p999.threshold_ns), (10, 9_991));
        assert_eq!(p999.median.queue_ns, 9_995);
    }

    #[test]
    fn a_keeper_too_small_for_the_tail_reports_none_rather_than_a_wrong_one() {
        let mut k = TailKeeper::with_capacity(5);
        for lat in 1..=1_000 {
            k.offer(lat, queued(lat));
        }
        let r = k.report();
        // 1 000 requests: 10 above p99 (not all kept), 1 above p99.9 (kept).
        assert_eq!(r.above_p99, None);
        let p999 = r.above_p999.unwrap();
        assert_eq!((p999.requests, p999.threshold_ns), (1, 1_000));
        assert_eq!(p999.median, queued(1_000));
    }

    #[test]
    fn few_requests_make_a_tail_of_one_and_none_make_none() {
        let k = TailKeeper::for_requests(0);
        assert_eq!(k.report(), TailReport::default());
        let mut k = TailKeeper::for_requests(10);
        k.offer(7, queued(7));
        k.offer(3, queued(3));
        let r = k.report();
        assert_eq!(r.above_p99.unwrap().threshold_ns, 7);
        assert_eq!(r.above_p999.unwrap().requests, 1);
    }
}
