//! Latency over time: one small histogram per window of *scheduled* send time, so that a
//! change in load (a phase, a burst, a core taken away) shows up in the windows it was scheduled
//! in, however late its responses came back.
//!
//! The windows' histograms keep 2 significant digits (1% resolution) instead of the run
//! summary's 3, which makes each about 14 KiB instead of 100 KiB: a run may have thousands of
//! windows. Every window is allocated when the recorder is made; recording allocates nothing.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::recorder::{HIST_HIGH_NS, HIST_LOW_NS, Outcome, Percentiles};

/// Significant decimal digits the windows' histograms keep.
pub const WINDOW_SIGFIGS: u8 = 2;

/// One window of a run, as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowReport {
    /// Start of the window, in ms of scheduled time from the start of the run.
    pub start_ms: f64,
    /// Requests scheduled in the window (sent or not).
    pub scheduled: u64,
    /// Of those, the ones matched by a response in time.
    pub matched: u64,
    /// Latency of the matched ones, from their scheduled send time. `mean_ns` is exact; the
    /// other values are histogram values within 1%.
    pub latency: Percentiles,
}

#[derive(Clone, Debug)]
struct Window {
    scheduled: u64,
    sum_ns: u128,
    latency: Histogram<u32>,
}

/// Per-window counts and latency, keyed by scheduled send time.
#[derive(Clone, Debug)]
pub struct WindowedLatency {
    window_ns: u64,
    windows: Vec<Window>,
    /// Records whose scheduled time was past the last window.
    outside: u64,
}

impl WindowedLatency {
    /// Windows needed to cover `span_ns` of scheduled time in windows of `window_ns`.
    pub fn window_count(window_ns: u64, span_ns: u64) -> u64 {
        span_ns.div_ceil(window_ns.max(1)).max(1)
    }

    /// Windows of `window_ns` (at least 1 ns) covering scheduled times `[0, span_ns)`. Check
    /// [`WindowedLatency::window_count`] first: each window takes about 14 KiB.
    pub fn new(window_ns: u64, span_ns: u64) -> Self {
        let window_ns = window_ns.max(1);
        let count = usize::try_from(Self::window_count(window_ns, span_ns))
            .expect("window table fits in memory");
        let hist = Histogram::new_with_bounds(HIST_LOW_NS, HIST_HIGH_NS, WINDOW_SIGFIGS)
            .expect("constant histogram bounds are valid");
        let window = Window {
            scheduled: 0,
            sum_ns: 0,
            latency: hist,
        };
        WindowedLatency {
            window_ns,
            windows: vec![window; count],
            outside: 0,
        }
    }

    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// Number of windows.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Records that keyed past the last window (and were not counted anywhere else).
    pub fn outside(&self) -> u64 {
        self.outside
    }

    #[inline]
    fn window(&mut self, scheduled_ns: u64) -> Option<&mut Window> {
        let index = usize::try_from(scheduled_ns / self.window_ns).ok()?;
        let found = self.windows.get_mut(index);
        if found.is_none() {
            self.outside += 1;
        }
        found
    }

    /// A request scheduled at `scheduled_ns` was due (whether or not it could be sent).
    #[inline]
    pub fn record_scheduled(&mut self, scheduled_ns: u64) {
        if let Some(w) = self.window(scheduled_ns) {
            w.scheduled += 1;
        }
    }

    /// A request scheduled at `scheduled_ns` was matched with this latency.
    #[inline]
    pub fn record_latency(&mut self, scheduled_ns: u64, latency_ns: u64) {
        if let Some(w) = self.window(scheduled_ns) {
            w.sum_ns += u128::from(latency_ns);
            w.latency.saturating_record(latency_ns);
        }
    }

    /// Records what [`ResponseRecorder::record_response`](crate::recorder::ResponseRecorder)
    /// made of a response: only matches count.
    #[inline]
    pub fn record_outcome(&mut self, scheduled_ns: u64, outcome: Outcome) {
        if let Outcome::Matched { latency_ns } = outcome {
            self.record_latency(scheduled_ns, latency_ns);
        }
    }

    /// Window `index` (`None` past the last). Costs a few microseconds: a caller with a time
    /// budget can report windows one at a time.
    pub fn report(&self, index: usize) -> Option<WindowReport> {
        let w = self.windows.get(index)?;
        let h = &w.latency;
        let latency = if h.is_empty() {
            Percentiles::default()
        } else {
            Percentiles {
                count: h.len(),
                min_ns: h.min(),
                // The histogram's own mean walks every bucket; the exact sum is cheaper and
                // more precise.
                mean_ns: w.sum_ns as f64 / h.len() as f64,
                p50_ns: h.value_at_quantile(0.5),
                p90_ns: h.value_at_quantile(0.9),
                p99_ns: h.value_at_quantile(0.99),
                p999_ns: h.value_at_quantile(0.999),
                max_ns: h.max(),
            }
        };
        Some(WindowReport {
            start_ms: (index as u64 * self.window_ns) as f64 / 1e6,
            scheduled: w.scheduled,
            matched: h.len(),
            latency,
        })
    }

    /// Every window, in order.
    pub fn reports(&self) -> Vec<WindowReport> {
        (0..self.windows.len())
            .filter_map(|i| self.report(i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn within(actual: u64, expected: u64, rel: f64) -> bool {
        (actual as f64 - expected as f64).abs() <= expected as f64 * rel
    }

    #[test]
    fn windows_cover_the_span() {
        assert_eq!(WindowedLatency::window_count(10, 100), 10);
        assert_eq!(WindowedLatency::window_count(10, 101), 11);
        assert_eq!(WindowedLatency::window_count(10, 0), 1);
        assert_eq!(WindowedLatency::window_count(0, 5), 5);
        let w = WindowedLatency::new(1_000_000, 10_500_000);
        assert_eq!(w.len(), 11);
        let starts: Vec<f64> = w.reports().iter().map(|r| r.start_ms).collect();
        assert_eq!(starts, (0..11).map(f64::from).collect::<Vec<_>>());
    }

    #[test]
    fn latency_lands_in_the_window_of_its_scheduled_time() {
        // Three 10 ms windows: requests every 1 ms; those scheduled in window k take
        // (k + 1) * 100 us, and every fifth request of window 1 is never answered.
        let mut w = WindowedLatency::new(10_000_000, 30_000_000);
        for i in 0..30u64 {
            let scheduled = i * 1_000_000;
            let k = i / 10;
            w.record_scheduled(scheduled);
            if k == 1 && i % 5 == 0 {
                continue;
            }
            // A response that arrives long after its window ended still counts in it.
            w.record_outcome(
                scheduled,
                Outcome::Matched {
                    latency_ns: (k + 1) * 100_000,
                },
            );
            w.record_outcome(scheduled, Outcome::Duplicate);
        }
        let r = w.reports();
        assert_eq!(r.len(), 3);
        assert_eq!(
            r.iter()
                .map(|r| (r.scheduled, r.matched))
                .collect::<Vec<_>>(),
            vec![(10, 10), (10, 8), (10, 10)]
        );
        for (k, report) in r.iter().enumerate() {
            let expected = (k as u64 + 1) * 100_000;
            let p = report.latency;
            assert_eq!(p.count, report.matched);
            assert_eq!(p.mean_ns, expected as f64);
            for v in [p.min_ns, p.p50_ns, p.p99_ns, p.p999_ns, p.max_ns] {
                assert!(within(v, expected, 0.01), "window {k}: {p:?}");
            }
        }
        assert_eq!(w.outside(), 0);
    }

    #[test]
    fn percentiles_of_a_known_window() {
        let mut w = WindowedLatency::new(1_000, 1_000);
        for us in 1..=1000u64 {
            w.record_scheduled(0);
            w.record_latency(999, us * 1_000);
        }
        let p = w.report(0).unwrap().latency;
        assert_eq!(p.count, 1000);
        assert!(within(p.p50_ns, 500_000, 0.01), "{p:?}");
        assert!(within(p.p90_ns, 900_000, 0.01), "{p:?}");
        assert!(within(p.p99_ns, 990_000, 0.01), "{p:?}");
        assert!(within(p.max_ns, 1_000_000, 0.01), "{p:?}");
        assert_eq!(p.mean_ns, 500_500.0);
        assert!(p.min_ns <= p.p50_ns && p.p50_ns <= p.p90_ns && p.p90_ns <= p.p99_ns);
        assert!(p.p99_ns <= p.p999_ns && p.p999_ns <= p.max_ns);
    }

    #[test]
    fn records_past_the_span_are_counted_apart() {
        let mut w = WindowedLatency::new(10, 20);
        w.record_scheduled(20);
        w.record_latency(u64::MAX, 5);
        w.record_scheduled(19);
        assert_eq!(w.outside(), 2);
        let r = w.reports();
        assert_eq!((r[0].scheduled, r[1].scheduled), (0, 1));
        assert_eq!(r[1].latency, Percentiles::default());
        assert!(w.report(2).is_none());
    }

    #[test]
    fn reports_round_trip_through_json() {
        let mut w = WindowedLatency::new(1_000_000, 2_000_000);
        w.record_scheduled(10);
        w.record_latency(10, 12_345);
        let r = w.reports();
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"start_ms\":0.0"), "{json}");
        let back: Vec<WindowReport> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
    }
}
