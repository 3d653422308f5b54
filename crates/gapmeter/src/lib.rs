//! The gap meter: a busy loop that reads the clock on one CPU and keeps every gap between two
//! consecutive reads above a threshold. A gap is time the loop did not have its CPU (another
//! thread, an interrupt, the host), so the gaps say how much of the CPU a dataplane loop there
//! would lose, and for how long at a time.

pub mod attribution;

use hdrhistogram::Histogram;
use serde_json::{Value, json};

use crate::attribution::Gap;

/// Gaps of at least this long are counted apart in the report: the longest gap iokerneld's
/// loop may take without missing its target.
pub const LONG_GAP_NS: u64 = 200_000;

/// The running account of one loop: fed every clock read in order.
pub struct Tally {
    threshold_ns: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    reads: u64,
    lost_ns: u64,
    long_gaps: u64,
    gaps: Histogram<u64>,
    /// Each gap's start and end, up to `log_capacity` of them, when asked for.
    log: Vec<Gap>,
    log_capacity: usize,
}

impl Tally {
    /// Counts gaps strictly longer than `threshold_ns`.
    pub fn new(threshold_ns: u64) -> Tally {
        Tally {
            threshold_ns,
            first_ns: None,
            last_ns: 0,
            reads: 0,
            lost_ns: 0,
            long_gaps: 0,
            // 1 ns to an hour at three significant digits; longer gaps count as an hour.
            gaps: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("valid bounds and precision"),
            log: Vec::new(),
            log_capacity: 0,
        }
    }

    /// Also keeps the first `capacity` gaps' start and end (16 bytes each), for
    /// [`attribution`].
    pub fn logging(threshold_ns: u64, capacity: usize) -> Tally {
        Tally {
            log: Vec::with_capacity(capacity),
            log_capacity: capacity,
            ..Tally::new(threshold_ns)
        }
    }

    /// The gaps kept so far, in order.
    pub fn logged(&self) -> &[Gap] {
        &self.log
    }

    /// One clock read. A read earlier than the one before (which a monotonic clock never
    /// gives) counts as no gap.
    #[inline]
    pub fn read(&mut self, now_ns: u64) {
        self.reads += 1;
        if self.first_ns.is_none() {
            self.first_ns = Some(now_ns);
        } else {
            let gap = now_ns.saturating_sub(self.last_ns);
            if gap > self.threshold_ns {
                self.gap(gap, now_ns);
            }
        }
        self.last_ns = now_ns;
    }

    #[cold]
    fn gap(&mut self, gap_ns: u64, end_ns: u64) {
        if self.log.len() < self.log_capacity {
            self.log.push(Gap {
                start_ns: end_ns - gap_ns,
                end_ns,
            });
        }
        self.lost_ns += gap_ns;
        if gap_ns >= LONG_GAP_NS {
            self.long_gaps += 1;
        }
        self.gaps.saturating_record(gap_ns);
    }

    /// What the reads so far add up to.
    pub fn report(&self) -> GapReport {
        let span_ns = self
            .last_ns
            .saturating_sub(self.first_ns.unwrap_or(self.last_ns));
        let count = self.gaps.len();
        let at = |q: f64| (count > 0).then(|| self.gaps.value_at_quantile(q));
        GapReport {
            threshold_ns: self.threshold_ns,
            span_ns,
            reads: self.reads,
            gaps: count,
            long_gaps: self.long_gaps,
            lost_ns: self.lost_ns,
            lost_fraction: if span_ns > 0 {
                self.lost_ns as f64 / span_ns as f64
            } else {
                0.0
            },
            max_ns: (count > 0).then(|| self.gaps.max()),
            p50_ns: at(0.5),
            p99_ns: at(0.99),
        }
    }
}

/// The gaps of a sequence of clock reads.
pub fn tally(reads_ns: impl IntoIterator<Item = u64>, threshold_ns: u64) -> GapReport {
    let mut t = Tally::new(threshold_ns);
    for r in reads_ns {
        t.read(r);
    }
    t.report()
}

/// The gaps one loop saw. Percentiles are over the gaps (not over all reads) and exact to
/// three significant digits.
#[derive(Clone, Debug, PartialEq)]
pub struct GapReport {
    pub threshold_ns: u64,
    /// From the first read to the last.
    pub span_ns: u64,
    pub reads: u64,
    /// Gaps above the threshold.
    pub gaps: u64,
    /// Gaps of at least [`LONG_GAP_NS`].
    pub long_gaps: u64,
    /// The gaps' total.
    pub lost_ns: u64,
    /// `lost_ns` over `span_ns`.
    pub lost_fraction: f64,
    pub max_ns: Option<u64>,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
}

impl GapReport {
    pub fn to_json(&self) -> Value {
        json!({
            "threshold_ns": self.threshold_ns,
            "span_ns": self.span_ns,
            "reads": self.reads,
            "gaps": self.gaps,
            "gaps_over_200us": self.long_gaps,
            "lost_ns": self.lost_ns,
            "lost_fraction": self.lost_fraction,
            "max_gap_ns": self.max_ns,
            "p50_gap_ns": self.p50_ns,
            "p99_gap_ns": self.p99_ns,
        })
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds, through the vDSO (tens of nanoseconds, no `rdtsc` of its
/// own): the clock tracefs's `mono` trace clock reads.
#[inline]
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Spins on the calling thread for `duration_ns`, reading the clock as fast as it can.
pub fn spin(duration_ns: u64, threshold_ns: u64) -> GapReport {
    spin_into(Tally::new(threshold_ns), duration_ns).report()
}

/// [`spin`], keeping the first `capacity` gaps' start and end as well.
pub fn spin_logged(duration_ns: u64, threshold_ns: u64, capacity: usize) -> (GapReport, Vec<Gap>) {
    let t = spin_into(Tally::logging(threshold_ns, capacity), duration_ns);
    (t.report(), t.log)
}

fn spin_into(mut t: Tally, duration_ns: u64) -> Tally {
    let start = monotonic_ns();
    t.read(start);
    loop {
        let now = monotonic_ns();
        t.read(now);
        if now - start >= duration_ns {
            return t;
        }
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gaps_above_the_threshold_count_and_they_add_up() {
        // Reads 1 us apart, with gaps of 10 us (at the threshold: not counted), 10.001 us,
        // 50 us and 300 us.
        let reads = [
            0, 1_000, 2_000, 12_000, 13_000, 23_001, 24_000, 74_000, 75_000, 375_000, 376_000,
        ];
        let r = tally(reads, 10_000);
        assert_eq!(r.reads, 11);
        assert_eq!(r.span_ns, 376_000);
        assert_eq!(r.gaps, 3);
        assert_eq!(r.long_gaps, 1);
        assert_eq!(r.lost_ns, 10_001 + 50_000 + 300_000);
        assert!((r.lost_fraction - 360_001.0 / 376_000.0).abs() < 1e-12);
        let max = r.max_ns.unwrap();
        assert!(max.abs_diff(300_000) <= 300, "{max}");
        let p50 = r.p50_ns.unwrap();
        assert!(p50.abs_diff(50_000) <= 50, "{p50}");
        assert!(r.p99_ns.unwrap().abs_diff(300_000) <= 300);
    }

    #[test]
    fn no_gap_is_no_percentile_and_nothing_lost() {
        let r = tally((0..1000).map(|i| i * 500), 10_000);
        assert_eq!((r.gaps, r.lost_ns, r.long_gaps), (0, 0, 0));
        assert_eq!((r.max_ns, r.p50_ns, r.p99_ns), (None, None, None));
        assert_eq!(r.lost_fraction, 0.0);
        let empty = tally([], 10_000);
        assert_eq!(
            (empty.reads, empty.span_ns, empty.lost_fraction),
            (0, 0, 0.0)
        );
        let one = tally([42], 10_000);
        assert_eq!((one.reads, one.span_ns, one.gaps), (1, 0, 0));
    }

    #[test]
    fn a_logging_tally_keeps_each_gap_up_to_its_capacity() {
        let mut t = Tally::logging(10_000, 2);
        for r in [0, 1_000, 21_000, 22_000, 72_000, 73_000, 173_000] {
            t.read(r);
        }
        assert_eq!(
            t.logged(),
            [
                Gap {
                    start_ns: 1_000,
                    end_ns: 21_000
                },
                Gap {
                    start_ns: 22_000,
                    end_ns: 72_000
                }
            ]
        );
        assert_eq!(t.report().gaps, 3, "gaps past the capacity still count");
    }

    #[test]
    fn a_read_that_goes_backwards_is_no_gap() {
        let r = tally([100_000, 50_000, 51_000, 200_000], 10_000);
        assert_eq!(r.gaps, 1);
        assert_eq!(r.lost_ns, 149_000);
    }

    #[test]
    fn spinning_reads_the_clock_many_times() {
        let r = spin(2_000_000, 10_000);
        assert!(r.span_ns >= 2_000_000, "{r:?}");
        assert!(r.reads > 100, "{r:?}");
        assert!(r.lost_ns <= r.span_ns);
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_cpu_list("0-1\n"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("3"), Some(vec![3]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("4-2"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }
}
