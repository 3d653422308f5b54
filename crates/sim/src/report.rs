//! Results as text: the table printed on stdout, CSV (one row per load point, and the series
//! one row per sample) and JSON (the costs, the configuration and every point with its series).

use std::fmt::Write as _;

use serde::Serialize;

use crate::costs::Costs;
use crate::metrics::PointResult;

/// Every cost with its value and source, one per line.
pub fn costs_table(costs: &Costs) -> String {
    let mut out = String::from("costs:\n");
    for (name, cost) in costs.all() {
        let _ = writeln!(
            out,
            "  {name:<11} {:>9.2} us  {}",
            cost.ns as f64 / 1e3,
            cost.source
        );
    }
    out
}

/// One line per load point.
pub fn results_table(points: &[PointResult]) -> String {
    let mut out = format!(
        "{:>6} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7} {:>7} {:>11} {:>10}\n",
        "load",
        "offered/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "LC cores",
        "effic.",
        "batch",
        "idle",
        "realloc/s",
        "unfinished"
    );
    for p in points {
        let _ = writeln!(
            out,
            "{:>6.3} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>8.2} {:>7.3} {:>7.3} {:>7.3} {:>11.0} {:>10}",
            p.load,
            p.offered_rps,
            p.p50_ns as f64 / 1e3,
            p.p99_ns as f64 / 1e3,
            p.p999_ns as f64 / 1e3,
            p.lc_cores_mean,
            p.efficiency,
            p.batch_share,
            p.idle_share,
            p.reallocations_per_sec,
            p.unfinished
        );
    }
    out
}

pub const CSV_HEADER: &str = "load,offered_rps,arrived,completed,unfinished,p50_ns,p99_ns,p999_ns,max_ns,mean_ns,lc_cores_mean,efficiency,batch_share,idle_share,reallocations,reallocations_per_sec,grants,preemptions,passes,events";

/// One row per load point, without the series.
pub fn csv(points: &[PointResult]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for p in points {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.load,
            p.offered_rps,
            p.arrived,
            p.completed,
            p.unfinished,
            p.p50_ns,
            p.p99_ns,
            p.p999_ns,
            p.max_ns,
            p.mean_ns,
            p.lc_cores_mean,
            p.efficiency,
            p.batch_share,
            p.idle_share,
            p.reallocations,
            p.reallocations_per_sec,
            p.grants,
            p.preemptions,
            p.passes,
            p.events
        );
    }
    out
}

/// The cores-over-time series of every point, one row per sample, the point named by its load.
pub fn series_csv(points: &[PointResult]) -> String {
    let mut out = String::from("load,t_ns,lc_cores,batch_cores,lc_queued,window_p999_ns\n");
    for p in points {
        for s in &p.series {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{}",
                p.load, s.t_ns, s.lc_cores, s.batch_cores, s.lc_queued, s.window_p999_ns
            );
        }
    }
    out
}

/// Everything about a sweep, for `--json`.
#[derive(Serialize)]
pub struct Report<'a> {
    pub policy: &'a str,
    pub cores: u16,
    pub latency_critical_runtimes: usize,
    pub batch_runtimes: usize,
    pub service: String,
    pub seconds: f64,
    pub seed: u64,
    pub cede: &'a str,
    pub costs: &'a Costs,
    pub points: &'a [PointResult],
}

pub fn json(report: &Report<'_>) -> String {
    serde_json::to_string_pretty(report).expect("results serialize")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn every_format_has_a_row_per_point() {
        let point = PointResult::from_metrics(Metrics::new(1_000), 2, 0.5, 10.0, 1, 1);
        let points = vec![point.clone(), point];
        assert_eq!(results_table(&points).lines().count(), 3);
        let csv = csv(&points);
        assert_eq!(csv.lines().count(), 3);
        let columns = CSV_HEADER.split(',').count();
        assert!(csv.lines().all(|line| line.split(',').count() == columns));
        assert_eq!(series_csv(&points).lines().count(), 1);
        let costs = Costs::measured();
        assert_eq!(costs_table(&costs).lines().count(), costs.all().len() + 1);
        let text = json(&Report {
            policy: "shenango",
            cores: 2,
            latency_critical_runtimes: 1,
            batch_runtimes: 0,
            service: "exp:10us".into(),
            seconds: 1.0,
            seed: 1,
            cede: "signal",
            costs: &costs,
            points: &points,
        });
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["points"].as_array().unwrap().len(), 2);
        assert!(value["costs"]["grant"]["source"].is_string());
    }
}
