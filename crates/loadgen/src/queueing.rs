//! The latency an ideal server would give: the sojourn time (queueing plus service) of a single
//! first-come-first-served server with no overhead at all, fed the same arrivals and service
//! times as a real run. A measured p99.9 can be read against this bound: whatever lies above it
//! is overhead of the system under test, not of the workload.

use serde::{Deserialize, Serialize};

use crate::recorder::{Percentiles, new_histogram};
use crate::schedule::{Arrivals, NS_PER_SEC, ScheduleConfig, ScheduleError, ServiceDist};

/// The `q`-quantile of the M/M/1 sojourn time in ns, for Poisson arrivals at `rate_rps` and
/// exponential service with mean `mean_service_ns`. The sojourn time is exponential with rate
/// `mu - lambda`, so the quantile is `-ln(1 - q) / (mu - lambda)`. `None` when the queue is
/// unstable (load at or above 1) or the arguments are out of range.
pub fn mm1_sojourn_quantile_ns(rate_rps: f64, mean_service_ns: f64, q: f64) -> Option<f64> {
    if !(rate_rps > 0.0 && mean_service_ns > 0.0 && q > 0.0 && q < 1.0) {
        return None;
    }
    let lambda = rate_rps / NS_PER_SEC;
    let mu = 1.0 / mean_service_ns;
    (mu > lambda).then(|| -(1.0 - q).ln() / (mu - lambda))
}

/// p99.9 of the M/M/1 sojourn time: `ln(1000) / (mu - lambda)`.
pub fn mm1_p999_ns(rate_rps: f64, mean_service_ns: f64) -> Option<f64> {
    mm1_sojourn_quantile_ns(rate_rps, mean_service_ns, 0.999)
}

/// Requests to simulate for a stable p99.9 at this load. Consecutive sojourn times are
/// correlated over a busy period, whose length grows like `1 / (1 - sqrt(load))^2`, so the count
/// grows with it: 2 million at light load, about 18 million at 80%, capped
/// at 50 million.
pub fn recommended_requests(load: f64) -> u64 {
    let load = load.clamp(0.0, 0.999);
    let relax = 1.0 / (1.0 - load.sqrt()).powi(2);
    (200_000.0 * relax).clamp(2_000_000.0, 50_000_000.0) as u64
}

/// What a simulation found.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimResult {
    /// Requests whose sojourn times were recorded (after the warm-up).
    pub requests: u64,
    /// Sojourn time percentiles.
    pub sojourn: Percentiles,
    /// Fraction of time the server was busy.
    pub utilization: f64,
}

/// Simulates one FCFS server fed `requests` requests of the schedule `cfg` (its rate, arrival
/// process, service distribution and seed; its duration is ignored). The first 1% of requests
/// warm the queue up from empty and are not recorded. Uses the Lindley recursion on integer
/// nanoseconds: a request waits for what is left of the previous one's wait and service after
/// the gap between them.
pub fn simulate_fcfs(cfg: &ScheduleConfig, requests: u64) -> Result<SimResult, ScheduleError> {
    let mut cfg = *cfg;
    cfg.duration_ns = u64::MAX;
    cfg.max_requests = Some(requests);
    cfg.first_id = 0;
    cfg.validate()?;
    let warmup = requests / 100;
    let mut hist = new_histogram();
    let (mut wait, mut prev_send, mut busy, mut last_done) = (0u64, 0u64, 0u64, 0u64);
    let mut first_send = None;
    for (i, r) in cfg.iter().enumerate() {
        let gap = r.send_ns - prev_send;
        prev_send = r.send_ns;
        // The previous request's remaining work when this one arrives.
        wait = wait.saturating_sub(gap);
        let sojourn = wait + r.service_ns as u64;
        if i as u64 >= warmup {
            hist.saturating_record(sojourn);
            first_send.get_or_insert(r.send_ns);
            busy += r.service_ns as u64;
            last_done = r.send_ns + sojourn;
        }
        wait = sojourn;
    }
    let span = last_done.saturating_sub(first_send.unwrap_or(0));
    Ok(SimResult {
        requests: hist.len(),
        sojourn: Percentiles::of(&hist),
        utilization: if span > 0 {
            busy as f64 / span as f64
        } else {
            0.0
        },
    })
}

/// The zero-overhead latency bound for a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct QueueingBound {
    /// Offered load: rate times mean service time.
    pub load: f64,
    /// p99.9 sojourn time from the M/M/1 formula, when arrivals are Poisson and service is
    /// exponential and the load is below 1.
    pub mm1_p999_ns: Option<f64>,
    /// From simulation of the same schedule; `None` at load 1 or above, where the queue grows
    /// without bound and no percentile is meaningful.
    pub simulated: Option<SimResult>,
}

/// The bound for `cfg`, simulating [`recommended_requests`] requests.
pub fn bound(cfg: &ScheduleConfig) -> Result<QueueingBound, ScheduleError> {
    cfg.validate()?;
    let load = cfg.load();
    let mm1_p999_ns = match (cfg.arrivals, cfg.service) {
        (Arrivals::Poisson, ServiceDist::Exponential { mean_ns }) => {
            mm1_p999_ns(cfg.rate_rps, mean_ns)
        }
        _ => None,
    };
    let simulated = if load < 1.0 {
        Some(simulate_fcfs(cfg, recommended_requests(load))?)
    } else {
        None
    };
    Ok(QueueingBound {
        load,
        mm1_p999_ns,
        simulated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn exp_schedule(load: f64, seed: u64) -> ScheduleConfig {
        // Mean service 10 us, so the rate for a load is load * 100k/s.
        ScheduleConfig::new(load * 100_000.0, Duration::from_secs(1))
            .service(ServiceDist::Exponential { mean_ns: 10_000.0 })
            .seed(seed)
    }

    #[test]
    fn mm1_formula() {
        // mu = 1/10us, lambda = 50k/s: mu - lambda = 50k/s, p99.9 = ln(1000) / 50k s.
        let p = mm1_p999_ns(50_000.0, 10_000.0).unwrap();
        assert!((p - 1000f64.ln() / 50_000.0 * 1e9).abs() < 1e-6);
        let median = mm1_sojourn_quantile_ns(50_000.0, 10_000.0, 0.5).unwrap();
        assert!((median - 2f64.ln() * 20_000.0).abs() < 1e-6);
        assert_eq!(mm1_p999_ns(100_000.0, 10_000.0), None);
        assert_eq!(mm1_p999_ns(0.0, 10_000.0), None);
        assert_eq!(mm1_sojourn_quantile_ns(1.0, 1.0, 1.0), None);
    }

    #[test]
    fn simulation_matches_mm1_from_light_to_heavy_load() {
        for (load, seed) in [(0.1, 1), (0.5, 2), (0.8, 3)] {
            let cfg = exp_schedule(load, seed);
            let sim = simulate_fcfs(&cfg, recommended_requests(load)).unwrap();
            let want = mm1_p999_ns(cfg.rate_rps, 10_000.0).unwrap();
            let got = sim.sojourn.p999_ns as f64;
            assert!(
                (got / want - 1.0).abs() < 0.03,
                "load {load}: simulated p99.9 {got} vs M/M/1 {want}"
            );
            // The mean sojourn of M/M/1 is 1 / (mu - lambda).
            let mean_want = 10_000.0 / (1.0 - load);
            assert!(
                (sim.sojourn.mean_ns / mean_want - 1.0).abs() < 0.04,
                "load {load}: mean {} vs {mean_want}",
                sim.sojourn.mean_ns
            );
            assert!((sim.utilization / load - 1.0).abs() < 0.03, "{sim:?}");
        }
    }

    #[test]
    fn constant_arrivals_and_service_never_queue() {
        let cfg = ScheduleConfig::new(50_000.0, Duration::from_secs(1))
            .arrivals(Arrivals::Constant)
            .service(ServiceDist::Constant { ns: 15_000 });
        let sim = simulate_fcfs(&cfg, 100_000).unwrap();
        assert_eq!(sim.requests, 99_000);
        // Every sojourn is exactly the service time: one histogram bucket, whose lowest value
        // is 15 us (the top of the bucket is within HDR's 0.1%).
        assert_eq!(sim.sojourn.min_ns, 15_000);
        assert_eq!(sim.sojourn.max_ns, sim.sojourn.p50_ns);
        assert!(sim.sojourn.max_ns <= 15_015);
        assert!((sim.utilization - 0.75).abs() < 1e-3, "{sim:?}");
    }

    #[test]
    fn bimodal_bound_lies_between_its_service_modes_and_grows_with_load() {
        let at = |load: f64| {
            let cfg = ScheduleConfig::new(load * 100_000.0, Duration::from_secs(1))
                .service(ServiceDist::PAPER_BIMODAL)
                .seed(5);
            bound(&cfg).unwrap()
        };
        let light = at(0.1);
        let heavy = at(0.7);
        assert_eq!(light.mm1_p999_ns, None);
        let l = light.simulated.unwrap().sojourn;
        let h = heavy.simulated.unwrap().sojourn;
        // At light load almost nothing waits: the tail is a long request, plus a little.
        assert!(l.p999_ns >= 55_000 && l.p999_ns < 120_000, "{l:?}");
        assert!(l.p50_ns >= 5_000 && l.p50_ns < 6_000, "{l:?}");
        assert!(h.p999_ns > 2 * l.p999_ns, "{h:?} vs {l:?}");
    }

    #[test]
    fn bound_reports_the_formula_for_mm1_and_nothing_when_overloaded() {
        let b = bound(&exp_schedule(0.5, 9)).unwrap();
        assert!((b.load - 0.5).abs() < 1e-12);
        let f = b.mm1_p999_ns.unwrap();
        let s = b.simulated.unwrap().sojourn.p999_ns as f64;
        assert!((s / f - 1.0).abs() < 0.05);
        let over = bound(&exp_schedule(1.2, 9)).unwrap();
        assert_eq!(over.mm1_p999_ns, None);
        assert_eq!(over.simulated, None);
    }

    #[test]
    fn recommended_counts_grow_with_load() {
        assert_eq!(recommended_requests(0.1), 2_000_000);
        assert!(recommended_requests(0.9) > recommended_requests(0.8));
        assert_eq!(recommended_requests(1.5), 50_000_000);
    }
}
