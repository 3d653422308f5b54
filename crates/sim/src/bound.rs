//! The Shenango paper's conservative upper bound on the CPU efficiency of a core allocator that
//! re-decides every millisecond (NSDI '19, §2, Figure 1).
//!
//! As the paper states it: an M/M/n/FCFS queue with Poisson arrivals, exponential service
//! times with a mean of 10 µs and a latency limit of 100 µs at the 99.9th percentile; the queue
//! starts empty at the beginning of each 1 ms interval and everything still pending at its end
//! is processed at once, so intervals are independent. For an offered load (in cores' worth of
//! work) the minimum integer number of cores `n` that meets the limit is found by trial, and
//! the efficiency is `load / n`: what even a perfect 1 ms allocator, with no overheads at all,
//! could not beat.
//!
//! Each trial simulates whole intervals until at least [`BoundParams::requests`] requests have
//! arrived (1,000,000 by default, so that the 99.9th percentile rests on about 1,000 requests
//! above it). A request pending at its interval's end completes there: its latency is cut at
//! the interval's end, the paper's "processed immediately", which can only help the bound.
//! Every `n` tried for a load sees the same arrivals and service times (one seed), so the
//! trials differ only in `n`.

/// What the bound assumes; [`BoundParams::default`] is the paper's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundParams {
    /// Mean of the exponential service time.
    pub service_mean_ns: f64,
    /// The latency the quantile must not exceed.
    pub latency_limit_ns: f64,
    /// The quantile held to the limit, e.g. 0.999.
    pub quantile: f64,
    /// How often the allocator re-decides; the queue starts empty at each interval's start.
    pub interval_ns: f64,
    /// Requests simulated per trial, at least (whole intervals are simulated).
    pub requests: u64,
    pub seed: u64,
}

impl Default for BoundParams {
    fn default() -> Self {
        Self {
            service_mean_ns: 10_000.0,
            latency_limit_ns: 100_000.0,
            quantile: 0.999,
            interval_ns: 1_000_000.0,
            requests: 1_000_000,
            seed: 1,
        }
    }
}

/// The bound at one offered load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundPoint {
    /// Offered load in cores' worth of work (arrival rate × mean service time).
    pub load: f64,
    /// The fewest cores that meet the latency limit.
    pub cores: u32,
    /// `load / cores`.
    pub efficiency: f64,
    /// The quantile's latency at `cores` (the largest latency at or below it).
    pub latency_ns: f64,
}

/// An exponential draw with mean `mean` (`1 - f64()` lies in (0, 1], so the log is finite).
fn exponential(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -(1.0 - rng.f64()).ln() * mean
}

/// The latency at `params.quantile` of `cores` FCFS servers fed the load's Poisson arrivals,
/// over independent intervals.
pub fn quantile_latency(params: &BoundParams, load: f64, cores: u32) -> f64 {
    assert!(cores > 0, "at least one core");
    let rate_per_ns = load / params.service_mean_ns;
    let interval = params.interval_ns;
    // Separate streams, so that a request's service time does not depend on how many gaps
    // were drawn before it (it would, with one stream, through the gap that ends an interval).
    let mut gaps = fastrand::Rng::with_seed(params.seed);
    let mut services = fastrand::Rng::with_seed(params.seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut free_at = vec![0.0_f64; cores as usize];
    let mut latencies = Vec::with_capacity(params.requests as usize + 1_000);
    while (latencies.len() as u64) < params.requests {
        free_at.fill(0.0);
        let mut arrival = exponential(&mut gaps, 1.0 / rate_per_ns);
        while arrival < interval {
            let service = exponential(&mut services, params.service_mean_ns);
            // FCFS: the request takes the core that frees up first.
            let (core, &free) = free_at
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .expect("at least one core");
            let finish = arrival.max(free) + service;
            free_at[core] = finish;
            latencies.push(finish.min(interval) - arrival);
            arrival += exponential(&mut gaps, 1.0 / rate_per_ns);
        }
    }
    // The smallest latency at or above which a share of at most 1 - quantile lies.
    let rank =
        ((params.quantile * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
    let (_, &mut at_rank, _) = latencies.select_nth_unstable_by(rank - 1, f64::total_cmp);
    at_rank
}

/// The fewest cores that meet the limit at `load` (cores' worth of work, > 0), trying from
/// `ceil(load)` up: fewer cores than the work would let the backlog grow from interval to
/// interval, which the bound's reset at each interval would hide.
pub fn min_cores(params: &BoundParams, load: f64) -> BoundPoint {
    assert!(load.is_finite() && load > 0.0, "the load must be positive");
    let mut cores = (load.ceil() as u32).max(1);
    loop {
        let latency_ns = quantile_latency(params, load, cores);
        if latency_ns <= params.latency_limit_ns {
            return BoundPoint {
                load,
                cores,
                efficiency: load / f64::from(cores),
                latency_ns,
            };
        }
        cores += 1;
    }
}

/// The bound at every load.
pub fn sweep(params: &BoundParams, loads: &[f64]) -> Vec<BoundPoint> {
    loads.iter().map(|&load| min_cores(params, load)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fewer requests than the default, to keep the tests fast; still 100 above the quantile.
    fn params() -> BoundParams {
        BoundParams {
            requests: 100_000,
            ..BoundParams::default()
        }
    }

    #[test]
    fn cores_cover_the_load_and_efficiency_is_at_most_one() {
        let loads = [0.1, 0.5, 0.9, 1.0, 1.5, 2.0, 3.7, 6.0];
        for point in sweep(&params(), &loads) {
            assert!(f64::from(point.cores) >= point.load.ceil(), "{point:?}");
            assert!(
                point.efficiency > 0.0 && point.efficiency <= 1.0,
                "{point:?}"
            );
            assert!(point.latency_ns <= 100_000.0, "{point:?}");
        }
    }

    #[test]
    fn cores_never_fall_as_the_load_rises() {
        let loads: Vec<f64> = (1..=24).map(|i| f64::from(i) * 0.25).collect();
        let points = sweep(&params(), &loads);
        for pair in points.windows(2) {
            assert!(pair[0].cores <= pair[1].cores, "{pair:?}");
        }
        // A sawtooth: the efficiency drops where a core is added.
        assert!(
            points
                .windows(2)
                .any(|pair| pair[1].efficiency < pair[0].efficiency)
        );
    }

    #[test]
    fn known_points() {
        // At 0.1 cores one core queues rarely; at a full core's worth one core is saturated.
        assert_eq!(min_cores(&params(), 0.1).cores, 1);
        assert!(min_cores(&params(), 1.0).cores >= 2);
        // M/M/1 at utilization 0.5: latency is exponential with mean 20 µs, so p99.9 is
        // 20 µs × ln 1000 ≈ 138 µs (a little less with the cut at each interval's end).
        let latency = quantile_latency(&params(), 0.5, 1);
        assert!((100_000.0..150_000.0).contains(&latency), "{latency}");
        assert_eq!(min_cores(&params(), 0.5).cores, 2);
    }

    #[test]
    fn a_seed_gives_the_same_bound() {
        let a = sweep(&params(), &[0.7, 2.3]);
        let b = sweep(&params(), &[0.7, 2.3]);
        assert_eq!(a, b);
    }
}
