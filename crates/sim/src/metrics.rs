//! What a run measures: request latencies, core time by class of runtime, useful work,
//! reallocations, and a series of cores allocated over time.
//!
//! Core time and useful work are counted inside the measured window `[0, window)` only; a
//! run goes on past it to let requests that arrived inside it finish (their latencies count).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Largest latency recorded exactly (longer ones are clamped): one minute.
const MAX_LATENCY_NS: u64 = 60_000_000_000;

/// The length of `[start, end)` that lies inside `[0, window)`.
#[inline]
pub fn clipped(start: u64, end: u64, window: u64) -> u64 {
    end.min(window).saturating_sub(start.min(window))
}

/// One point of the cores-over-time series.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub t_ns: u64,
    /// Cores held (woken on, not yet parked) by latency-critical runtimes.
    pub lc_cores: u32,
    /// Cores held by batch runtimes.
    pub batch_cores: u32,
    /// Requests queued (not running) at latency-critical runtimes.
    pub lc_queued: u64,
    /// 99.9th percentile latency of the requests completed since the previous sample (0:
    /// none completed).
    pub window_p999_ns: u64,
}

/// Accumulated while a run goes.
#[derive(Debug)]
pub struct Metrics {
    pub window: u64,
    pub latency: Histogram<u64>,
    window_latency: Histogram<u64>,
    pub arrived: u64,
    pub completed: u64,
    /// Core time held by latency-critical runtimes, inside the window.
    pub lc_core_ns: u64,
    /// Service time run for latency-critical requests, inside the window.
    pub lc_useful_ns: u64,
    pub batch_core_ns: u64,
    /// Wake decisions that gave a core to another runtime than its previous user (a core's
    /// first grant is not one).
    pub reallocations: u64,
    pub grants: u64,
    pub preemptions: u64,
    pub series: Vec<Sample>,
}

impl Metrics {
    pub fn new(window: u64) -> Self {
        let histogram =
            || Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid histogram bounds");
        Self {
            window,
            latency: histogram(),
            window_latency: histogram(),
            arrived: 0,
            completed: 0,
            lc_core_ns: 0,
            lc_useful_ns: 0,
            batch_core_ns: 0,
            reallocations: 0,
            grants: 0,
            preemptions: 0,
            series: Vec::new(),
        }
    }

    pub fn record_latency(&mut self, ns: u64) {
        let ns = ns.clamp(1, MAX_LATENCY_NS);
        self.latency.saturating_record(ns);
        self.window_latency.saturating_record(ns);
        self.completed += 1;
    }

    /// A core was held from `start` to `end`.
    pub fn core_held(&mut self, latency_critical: bool, start: u64, end: u64) {
        let time = clipped(start, end, self.window);
        if latency_critical {
            self.lc_core_ns += time;
        } else {
            self.batch_core_ns += time;
        }
    }

    /// A latency-critical request's service ran from `start` to `end`.
    pub fn useful(&mut self, start: u64, end: u64) {
        self.lc_useful_ns += clipped(start, end, self.window);
    }

    pub fn sample(&mut self, t_ns: u64, lc_cores: u32, batch_cores: u32, lc_queued: u64) {
        let window_p999_ns = if self.window_latency.is_empty() {
            0
        } else {
            self.window_latency.value_at_quantile(0.999)
        };
        self.window_latency.reset();
        self.series.push(Sample {
            t_ns,
            lc_cores,
            batch_cores,
            lc_queued,
            window_p999_ns,
        });
    }
}

/// The results of one load point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PointResult {
    /// Offered load, time-weighted over the window, as a fraction of the cores' capacity.
    pub load: f64,
    /// Offered requests per second, over all latency-critical runtimes.
    pub offered_rps: f64,
    pub arrived: u64,
    pub completed: u64,
    /// Requests that had not completed when the run stopped (its drain limit).
    pub unfinished: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    /// Mean cores held by latency-critical runtimes over the window.
    pub lc_cores_mean: f64,
    /// Useful work / core time held, latency-critical runtimes.
    pub efficiency: f64,
    /// Core time the batch runtimes held / total core time.
    pub batch_share: f64,
    /// Core time no runtime held / total core time.
    pub idle_share: f64,
    pub reallocations: u64,
    pub reallocations_per_sec: f64,
    pub grants: u64,
    pub preemptions: u64,
    pub passes: u64,
    /// Events processed (for speed figures).
    pub events: u64,
    pub series: Vec<Sample>,
}

impl PointResult {
    pub fn from_metrics(
        metrics: Metrics,
        cores: usize,
        load: f64,
        offered_rps: f64,
        passes: u64,
        events: u64,
    ) -> Self {
        let window = metrics.window.max(1) as f64;
        let total_core_ns = window * cores as f64;
        let quantile = |q: f64| {
            if metrics.latency.is_empty() {
                0
            } else {
                metrics.latency.value_at_quantile(q)
            }
        };
        let ratio = |a: u64, b: f64| if b > 0.0 { a as f64 / b } else { 0.0 };
        Self {
            load,
            offered_rps,
            arrived: metrics.arrived,
            completed: metrics.completed,
            unfinished: metrics.arrived - metrics.completed,
            p50_ns: quantile(0.5),
            p99_ns: quantile(0.99),
            p999_ns: quantile(0.999),
            max_ns: if metrics.latency.is_empty() {
                0
            } else {
                metrics.latency.max()
            },
            mean_ns: if metrics.latency.is_empty() {
                0.0
            } else {
                metrics.latency.mean()
            },
            lc_cores_mean: metrics.lc_core_ns as f64 / window,
            efficiency: ratio(metrics.lc_useful_ns, metrics.lc_core_ns as f64),
            batch_share: ratio(metrics.batch_core_ns, total_core_ns),
            idle_share: 1.0 - ratio(metrics.batch_core_ns + metrics.lc_core_ns, total_core_ns),
            reallocations: metrics.reallocations,
            reallocations_per_sec: metrics.reallocations as f64 * 1e9 / window,
            grants: metrics.grants,
            preemptions: metrics.preemptions,
            passes,
            events,
            series: metrics.series,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_clipped_to_the_window() {
        assert_eq!(clipped(10, 20, 100), 10);
        assert_eq!(clipped(90, 120, 100), 10);
        assert_eq!(clipped(120, 130, 100), 0);
    }

    #[test]
    fn shares_and_quantiles() {
        let mut metrics = Metrics::new(1_000);
        metrics.core_held(true, 0, 500);
        metrics.core_held(false, 0, 2_000);
        metrics.useful(100, 300);
        metrics.arrived = 3;
        for ns in [10, 20, 30] {
            metrics.record_latency(ns);
        }
        metrics.sample(1_000, 1, 1, 0);
        metrics.reallocations = 4;
        let result = PointResult::from_metrics(metrics, 2, 0.5, 1.0, 0, 0);
        assert_eq!(result.efficiency, 0.4);
        assert_eq!(result.batch_share, 0.5);
        assert_eq!(result.idle_share, 0.25);
        assert_eq!(result.lc_cores_mean, 0.5);
        assert_eq!(result.p50_ns, 20);
        assert_eq!(result.unfinished, 0);
        assert_eq!(result.reallocations_per_sec, 4e6);
        assert_eq!(result.series[0].window_p999_ns, 30);
    }
}
