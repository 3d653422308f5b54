//! Open-loop request schedules: when each request is due, who sends it, and how much work it asks
//! the server for.
//!
//! # Randomness
//!
//! Sampling uses [`fastrand::Rng`] (wyrand) only as a source of uniform 64-bit words; every
//! distribution is sampled here by its exact inverse CDF, so the sequence for a seed is defined
//! by this file alone and does not change with a dependency's sampling algorithm:
//!
//! - a uniform `U` in the open interval (0, 1) takes the top 53 bits of a word and centres them in
//!   their cell (`(w >> 11) * 2^-53 + 2^-54`), so `ln U` is always finite;
//! - an exponential with mean `m` is `-m * ln U`;
//! - a bimodal draw is long when `U < long_fraction`.
//!
//! Arrival gaps, service times and client ids come from three streams derived from the seed, so
//! for one seed the arrival times are the same whatever the service distribution, and the
//! service times are the same whatever the rate. Comparisons between runs (and the queueing
//! simulation in [`crate::queueing`]) then differ only in what was changed.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Nanoseconds per second, as a float for rate arithmetic.
pub const NS_PER_SEC: f64 = 1e9;

/// Highest target rate accepted: one request per nanosecond.
pub const MAX_RATE_RPS: f64 = 1e9;

/// How the gaps between consecutive requests are drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential gaps: a Poisson process, the first request one gap after the start.
    Poisson,
    /// Every gap is exactly `1 / rate`, the first request at the start.
    Constant,
}

impl fmt::Display for Arrivals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arrivals::Poisson => "poisson",
            Arrivals::Constant => "constant",
        })
    }
}

impl FromStr for Arrivals {
    type Err = ScheduleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "poisson" | "exp" | "exponential" => Ok(Arrivals::Poisson),
            "constant" | "const" | "uniform" => Ok(Arrivals::Constant),
            _ => Err(ScheduleError::new("arrivals", s, "`poisson` or `constant`")),
        }
    }
}

/// The distribution of the service time a request asks the server to spend on it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ServiceDist {
    /// Every request asks for `ns`.
    Constant { ns: u32 },
    /// Exponentially distributed with this mean (draws above `u32::MAX` ns are clamped).
    Exponential { mean_ns: f64 },
    /// `short_ns` with probability `1 - long_fraction`, else `long_ns`.
    Bimodal {
        short_ns: u32,
        long_ns: u32,
        long_fraction: f64,
    },
}

impl ServiceDist {
    /// The paper's bimodal workload: 90% of requests take 5 µs and 10% take 55 µs (mean 10 µs).
    pub const PAPER_BIMODAL: ServiceDist = ServiceDist::Bimodal {
        short_ns: 5_000,
        long_ns: 55_000,
        long_fraction: 0.1,
    };

    /// Mean service time in nanoseconds.
    pub fn mean_ns(&self) -> f64 {
        match *self {
            ServiceDist::Constant { ns } => ns as f64,
            ServiceDist::Exponential { mean_ns } => mean_ns,
            ServiceDist::Bimodal {
                short_ns,
                long_ns,
                long_fraction,
            } => short_ns as f64 * (1.0 - long_fraction) + long_ns as f64 * long_fraction,
        }
    }

    /// Checks the parameters; the error names the bad one.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        match *self {
            ServiceDist::Constant { .. } => Ok(()),
            ServiceDist::Exponential { mean_ns } => {
                if mean_ns.is_finite() && mean_ns > 0.0 && mean_ns <= u32::MAX as f64 {
                    Ok(())
                } else {
                    Err(ScheduleError::new(
                        "service.mean_ns",
                        mean_ns,
                        format!("a finite mean in (0, {}] ns", u32::MAX),
                    ))
                }
            }
            ServiceDist::Bimodal { long_fraction, .. } => {
                if (0.0..=1.0).contains(&long_fraction) {
                    Ok(())
                } else {
                    Err(ScheduleError::new(
                        "service.long_fraction",
                        long_fraction,
                        "a probability in [0, 1]",
                    ))
                }
            }
        }
    }

    /// Draws one service time in nanoseconds.
    #[inline]
    pub fn sample(&self, rng: &mut fastrand::Rng) -> u32 {
        match *self {
            ServiceDist::Constant { ns } => ns,
            ServiceDist::Exponential { mean_ns } => {
                // `as` saturates, which is the documented clamp for the far tail.
                exponential(rng, mean_ns).round() as u32
            }
            ServiceDist::Bimodal {
                short_ns,
                long_ns,
                long_fraction,
            } => {
                if open_unit(rng) < long_fraction {
                    long_ns
                } else {
                    short_ns
                }
            }
        }
    }
}

impl fmt::Display for ServiceDist {
    /// The form [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ServiceDist::Constant { ns } => write!(f, "const:{ns}ns"),
            ServiceDist::Exponential { mean_ns } => write!(f, "exp:{mean_ns}ns"),
            ServiceDist::Bimodal {
                short_ns,
                long_ns,
                long_fraction,
            } => write!(f, "bimodal:{short_ns}ns:{long_ns}ns:{long_fraction}"),
        }
    }
}

impl FromStr for ServiceDist {
    type Err = ScheduleError;

    /// Reads `const:10us`, `exp:10us`, `bimodal` (the paper's 5 µs / 55 µs, 10% long) or
    /// `bimodal:SHORT:LONG:LONG_FRACTION`, e.g. `bimodal:5us:55us:0.1`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const EXPECTED: &str =
            "`const:<time>`, `exp:<mean>`, `bimodal` or `bimodal:<short>:<long>:<long fraction>`";
        let parts: Vec<&str> = s.trim().split(':').collect();
        let time_u32 = |t: &str| -> Result<u32, ScheduleError> {
            let ns = parse_duration_ns(t)?;
            if ns > u32::MAX as f64 {
                return Err(ScheduleError::new(
                    "service",
                    t,
                    format!("at most {} ns", u32::MAX),
                ));
            }
            Ok(ns.round() as u32)
        };
        let dist = match parts.as_slice() {
            [kind, t] if matches!(*kind, "const" | "constant" | "fixed") => {
                ServiceDist::Constant { ns: time_u32(t)? }
            }
            [kind, t] if matches!(*kind, "exp" | "exponential") => ServiceDist::Exponential {
                mean_ns: parse_duration_ns(t)?,
            },
            ["bimodal"] => ServiceDist::PAPER_BIMODAL,
            ["bimodal", short, long, frac] => ServiceDist::Bimodal {
                short_ns: time_u32(short)?,
                long_ns: time_u32(long)?,
                long_fraction: frac.parse().map_err(|_| {
                    ScheduleError::new("service.long_fraction", frac, "a number in [0, 1]")
                })?,
            },
            _ => return Err(ScheduleError::new("service", s, EXPECTED)),
        };
        dist.validate()?;
        Ok(dist)
    }
}

/// Parses a non-negative time such as `10us`, `10µs`, `1.5ms`, `500ns` or `2s` into
/// nanoseconds. The unit is required, so that `10` is never silently read as 10 ns.
pub fn parse_duration_ns(s: &str) -> Result<f64, ScheduleError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => {
            return Err(ScheduleError::new(
                "time",
                s,
                "a number with a unit: ns, us, ms or s (e.g. `10us`)",
            ));
        }
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v * scale),
        _ => Err(ScheduleError::new(
            "time",
            s,
            "a non-negative number with a unit (e.g. `10us`)",
        )),
    }
}

/// A schedule setting that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError {
    pub key: &'static str,
    pub value: String,
    pub expected: String,
}

impl ScheduleError {
    pub(crate) fn new(
        key: &'static str,
        value: impl fmt::Display,
        expected: impl fmt::Display,
    ) -> Self {
        ScheduleError {
            key,
            value: value.to_string(),
            expected: expected.to_string(),
        }
    }
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} = {}: expected {}",
            self.key, self.value, self.expected
        )
    }
}

impl std::error::Error for ScheduleError {}

/// What to play: the rate, for how long, and what each request looks like.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleConfig {
    /// Target rate in requests per second.
    pub rate_rps: f64,
    /// Requests are due in `[0, duration_ns)`.
    pub duration_ns: u64,
    pub arrivals: Arrivals,
    pub service: ServiceDist,
    /// Number of simulated clients; each request names one, uniformly at random (the union of
    /// independent Poisson clients is Poisson, so this is the same as each client sending at
    /// `rate / clients`).
    pub clients: u32,
    pub seed: u64,
    /// Id of the first request; ids are consecutive from here.
    pub first_id: u64,
    /// Stop after this many requests even if the duration has not run out.
    pub max_requests: Option<u64>,
}

impl ScheduleConfig {
    /// Poisson arrivals of 10 µs exponential requests from one client, seed 1.
    pub fn new(rate_rps: f64, duration: Duration) -> Self {
        ScheduleConfig {
            rate_rps,
            duration_ns: u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            arrivals: Arrivals::Poisson,
            service: ServiceDist::Exponential { mean_ns: 10_000.0 },
            clients: 1,
            seed: 1,
            first_id: 0,
            max_requests: None,
        }
    }

    pub fn arrivals(mut self, arrivals: Arrivals) -> Self {
        self.arrivals = arrivals;
        self
    }

    pub fn service(mut self, service: ServiceDist) -> Self {
        self.service = service;
        self
    }

    pub fn clients(mut self, clients: u32) -> Self {
        self.clients = clients;
        self
    }

    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    pub fn first_id(mut self, id: u64) -> Self {
        self.first_id = id;
        self
    }

    pub fn max_requests(mut self, n: u64) -> Self {
        self.max_requests = Some(n);
        self
    }

    /// Checks every value; the error names the bad one.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if !(self.rate_rps.is_finite() && self.rate_rps > 0.0 && self.rate_rps <= MAX_RATE_RPS) {
            return Err(ScheduleError::new(
                "rate",
                self.rate_rps,
                format!("a rate in (0, {MAX_RATE_RPS}] requests/s"),
            ));
        }
        if self.duration_ns == 0 {
            return Err(ScheduleError::new("duration", "0", "a positive duration"));
        }
        if self.clients == 0 {
            return Err(ScheduleError::new("clients", 0, "at least 1"));
        }
        self.service.validate()?;
        if self.first_id.checked_add(self.request_bound()).is_none() {
            return Err(ScheduleError::new(
                "first_id",
                self.first_id,
                "room for every request's id below u64::MAX",
            ));
        }
        Ok(())
    }

    /// Mean gap between requests in nanoseconds.
    pub fn mean_gap_ns(&self) -> f64 {
        NS_PER_SEC / self.rate_rps
    }

    /// Expected number of requests over the duration (before `max_requests`).
    pub fn expected_requests(&self) -> f64 {
        self.duration_ns as f64 * self.rate_rps / NS_PER_SEC
    }

    /// The most requests the schedule can produce. A constant schedule's count is exact; a
    /// Poisson count is random, and the schedule stops at its mean plus ten standard deviations
    /// (plus 100), which a Poisson count exceeds with probability below 1e-20. Consumers size
    /// per-request tables with this once, so that nothing grows while a run is on.
    pub fn request_bound(&self) -> u64 {
        let natural = match self.arrivals {
            Arrivals::Constant => {
                // Requests at k * gap for every k with k * gap < duration.
                let n = (self.duration_ns as f64 / self.mean_gap_ns()).ceil();
                let mut n = n.min(u64::MAX as f64) as u64;
                // Float rounding can put the last k * gap on either side of the duration;
                // settle it with the same arithmetic the schedule uses. The error is at most
                // a step or two; the steps are bounded so that absurd durations (where the
                // float arithmetic has no resolution left) cannot loop for long.
                for _ in 0..4 {
                    if n > 0 && constant_send_ns(n - 1, self.mean_gap_ns()) >= self.duration_ns {
                        n -= 1;
                    }
                }
                for _ in 0..4 {
                    if n < u64::MAX && constant_send_ns(n, self.mean_gap_ns()) < self.duration_ns {
                        n += 1;
                    }
                }
                n
            }
            Arrivals::Poisson => {
                let mean = self.expected_requests();
                (mean + 10.0 * mean.sqrt() + 100.0).min(u64::MAX as f64) as u64
            }
        };
        self.max_requests.map_or(natural, |m| m.min(natural))
    }

    /// Offered load on one server: rate times mean service time.
    pub fn load(&self) -> f64 {
        self.rate_rps * self.service.mean_ns() / NS_PER_SEC
    }

    /// The requests of this schedule, produced lazily. Validate the config first; an invalid
    /// config gives a schedule whose output is unspecified (but never panics).
    pub fn iter(&self) -> Schedule {
        Schedule::new(self)
    }
}

impl IntoIterator for &ScheduleConfig {
    type Item = Request;
    type IntoIter = Schedule;

    fn into_iter(self) -> Schedule {
        self.iter()
    }
}

/// One request of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Request {
    /// When it is due, in nanoseconds from the start of the schedule.
    pub send_ns: u64,
    pub id: u64,
    pub client: u32,
    /// Service time it asks the server to spend.
    pub service_ns: u32,
}

/// A lazily produced schedule (see [`ScheduleConfig::iter`]). Each step draws a few random
/// numbers and allocates nothing.
#[derive(Clone, Debug)]
pub struct Schedule {
    arrivals: Arrivals,
    service: ServiceDist,
    clients: u32,
    duration_ns: u64,
    mean_gap_ns: f64,
    next_id: u64,
    index: u64,
    bound: u64,
    /// Time of the last Poisson arrival, kept in floating point so that rounding each send
    /// time to whole nanoseconds does not bias the gaps.
    t_ns: f64,
    gap_rng: fastrand::Rng,
    service_rng: fastrand::Rng,
    client_rng: fastrand::Rng,
}

impl Schedule {
    fn new(cfg: &ScheduleConfig) -> Self {
        let mut seeds = SplitMix64(cfg.seed);
        Schedule {
            arrivals: cfg.arrivals,
            service: cfg.service,
            clients: cfg.clients.max(1),
            duration_ns: cfg.duration_ns,
            mean_gap_ns: cfg.mean_gap_ns(),
            next_id: cfg.first_id,
            index: 0,
            bound: cfg.request_bound(),
            t_ns: 0.0,
            gap_rng: fastrand::Rng::with_seed(seeds.next()),
            service_rng: fastrand::Rng::with_seed(seeds.next()),
            client_rng: fastrand::Rng::with_seed(seeds.next()),
        }
    }

    /// Requests produced so far.
    pub fn produced(&self) -> u64 {
        self.index
    }
}

impl Iterator for Schedule {
    type Item = Request;

    #[inline]
    fn next(&mut self) -> Option<Request> {
        if self.index >= self.bound {
            return None;
        }
        let send_ns = match self.arrivals {
            Arrivals::Constant => constant_send_ns(self.index, self.mean_gap_ns),
            Arrivals::Poisson => {
                self.t_ns += exponential(&mut self.gap_rng, self.mean_gap_ns);
                // Saturates for absurd durations, which then end the schedule below.
                self.t_ns.round() as u64
            }
        };
        if send_ns >= self.duration_ns {
            // Park at the bound so that the iterator stays finished.
            self.bound = self.index;
            return None;
        }
        let req = Request {
            send_ns,
            id: self.next_id,
            client: if self.clients == 1 {
                0
            } else {
                self.client_rng.u32(..self.clients)
            },
            service_ns: self.service.sample(&mut self.service_rng),
        };
        self.index += 1;
        self.next_id = self.next_id.wrapping_add(1);
        Some(req)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.bound.saturating_sub(self.index);
        (0, usize::try_from(left).ok())
    }
}

/// The k-th send time of a constant schedule: one multiplication from the start, so rounding
/// never accumulates over a long run.
#[inline]
fn constant_send_ns(k: u64, gap_ns: f64) -> u64 {
    (k as f64 * gap_ns).round() as u64
}

/// A uniform draw from the open interval (0, 1) with 53 random bits.
#[inline]
pub(crate) fn open_unit(rng: &mut fastrand::Rng) -> f64 {
    const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
    (rng.u64(..) >> 11) as f64 * SCALE + SCALE / 2.0
}

/// An exponential draw with this mean, by inverse CDF.
#[inline]
pub(crate) fn exponential(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    -mean * open_unit(rng).ln()
}

/// Spreads one seed into several well-mixed, distinct seeds.
pub(crate) struct SplitMix64(pub u64);

impl SplitMix64 {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn poisson_rate_is_within_two_percent_over_a_long_schedule() {
        for (rate, seed) in [(50_000.0, 7), (1_000_000.0, 8)] {
            let cfg = ScheduleConfig::new(rate, secs(10)).seed(seed);
            let n = cfg.iter().count() as f64;
            let achieved = n / 10.0;
            assert!(
                (achieved / rate - 1.0).abs() < 0.02,
                "rate {rate}: achieved {achieved}"
            );
        }
    }

    #[test]
    fn exponential_gaps_have_the_right_mean_and_unit_cv() {
        let cfg = ScheduleConfig::new(100_000.0, secs(5)).seed(42);
        let mut prev = 0u64;
        let (mut n, mut sum, mut sum_sq) = (0f64, 0f64, 0f64);
        for r in cfg.iter() {
            let gap = (r.send_ns - prev) as f64;
            prev = r.send_ns;
            n += 1.0;
            sum += gap;
            sum_sq += gap * gap;
        }
        let mean = sum / n;
        let cv = (sum_sq / n - mean * mean).sqrt() / mean;
        assert!((mean / 10_000.0 - 1.0).abs() < 0.01, "mean gap {mean}");
        assert!((cv - 1.0).abs() < 0.02, "cv {cv}");
    }

    #[test]
    fn constant_gaps_are_exact_and_the_count_is_exact() {
        let cfg = ScheduleConfig::new(100_000.0, secs(1)).arrivals(Arrivals::Constant);
        let reqs: Vec<Request> = cfg.iter().collect();
        assert_eq!(reqs.len(), 100_000);
        assert_eq!(cfg.request_bound(), 100_000);
        for (k, r) in reqs.iter().enumerate() {
            assert_eq!(r.send_ns, k as u64 * 10_000);
            assert_eq!(r.id, k as u64);
        }
        // A rate that does not divide a second: gaps differ by at most the 1 ns rounding and
        // never drift.
        let cfg = ScheduleConfig::new(3_000.0, secs(3)).arrivals(Arrivals::Constant);
        let reqs: Vec<Request> = cfg.iter().collect();
        assert_eq!(reqs.len(), 9_000);
        assert_eq!(cfg.request_bound(), 9_000);
        for w in reqs.windows(2) {
            let gap = w[1].send_ns - w[0].send_ns;
            assert!((333_333..=333_334).contains(&gap), "gap {gap}");
        }
        assert_eq!(reqs[8_999].send_ns, 2_999_666_667);
    }

    #[test]
    fn constant_bound_is_the_exact_count_at_awkward_rates() {
        for (rate, dur) in [
            (7.0, Duration::from_secs(3)),
            (1e9 / 3.0, Duration::from_millis(1)),
            (333_333.3, Duration::from_millis(7)),
            (1e9, Duration::from_nanos(1_001)),
        ] {
            let cfg = ScheduleConfig::new(rate, dur).arrivals(Arrivals::Constant);
            assert_eq!(
                cfg.iter().count() as u64,
                cfg.request_bound(),
                "{rate} {dur:?}"
            );
        }
        // Absurd durations are computed quickly and validate.
        let huge = ScheduleConfig {
            duration_ns: u64::MAX,
            ..ScheduleConfig::new(1e9, Duration::from_secs(1)).arrivals(Arrivals::Constant)
        };
        assert!(huge.request_bound() > 1 << 60);
    }

    #[test]
    fn bimodal_proportions_are_ninety_ten() {
        let cfg = ScheduleConfig::new(1_000_000.0, secs(1))
            .service(ServiceDist::PAPER_BIMODAL)
            .seed(3);
        let (mut short, mut long) = (0u64, 0u64);
        for r in cfg.iter() {
            match r.service_ns {
                5_000 => short += 1,
                55_000 => long += 1,
                other => panic!("unexpected service time {other}"),
            }
        }
        let frac = long as f64 / (short + long) as f64;
        assert!((frac - 0.1).abs() < 0.002, "long fraction {frac}");
        assert_eq!(ServiceDist::PAPER_BIMODAL.mean_ns(), 10_000.0);
    }

    #[test]
    fn exponential_service_mean_and_cv() {
        let cfg = ScheduleConfig::new(1_000_000.0, secs(1))
            .service(ServiceDist::Exponential { mean_ns: 20_000.0 })
            .seed(11);
        let (mut n, mut sum, mut sum_sq) = (0f64, 0f64, 0f64);
        for r in cfg.iter() {
            let s = r.service_ns as f64;
            n += 1.0;
            sum += s;
            sum_sq += s * s;
        }
        let mean = sum / n;
        let cv = (sum_sq / n - mean * mean).sqrt() / mean;
        assert!((mean / 20_000.0 - 1.0).abs() < 0.01, "mean {mean}");
        assert!((cv - 1.0).abs() < 0.01, "cv {cv}");
    }

    #[test]
    fn same_seed_same_schedule_and_streams_are_independent() {
        let a = ScheduleConfig::new(10_000.0, secs(1)).seed(5).clients(16);
        let b: Vec<Request> = a.iter().collect();
        assert_eq!(b, a.iter().collect::<Vec<_>>());
        let other = a.seed(6).iter().collect::<Vec<_>>();
        assert_ne!(b, other);
        // Changing the service distribution leaves arrivals and clients alone.
        let c: Vec<Request> = a.service(ServiceDist::PAPER_BIMODAL).iter().collect();
        assert_eq!(b.len(), c.len());
        assert!(
            b.iter()
                .zip(&c)
                .all(|(x, y)| x.send_ns == y.send_ns && x.client == y.client)
        );
    }

    #[test]
    fn clients_are_spread_uniformly() {
        let cfg = ScheduleConfig::new(1_000_000.0, secs(1))
            .clients(10)
            .seed(9);
        let mut counts = [0u64; 10];
        let mut n = 0;
        for r in cfg.iter() {
            counts[r.client as usize] += 1;
            n += 1;
        }
        for c in counts {
            assert!((c as f64 / n as f64 - 0.1).abs() < 0.003, "{counts:?}");
        }
    }

    #[test]
    fn ids_are_consecutive_and_times_ordered_within_the_duration() {
        let cfg = ScheduleConfig::new(200_000.0, Duration::from_millis(100)).first_id(1_000);
        let mut prev = None::<Request>;
        for r in cfg.iter() {
            assert!(r.send_ns < 100_000_000);
            if let Some(p) = prev {
                assert_eq!(r.id, p.id + 1);
                assert!(r.send_ns >= p.send_ns);
            } else {
                assert_eq!(r.id, 1_000);
            }
            prev = Some(r);
        }
    }

    #[test]
    fn max_requests_caps_the_schedule() {
        let cfg = ScheduleConfig::new(1_000.0, secs(100)).max_requests(10);
        assert_eq!(cfg.iter().count(), 10);
        assert_eq!(cfg.request_bound(), 10);
    }

    #[test]
    fn parsing_service_and_times() {
        assert_eq!(
            "exp:10us".parse::<ServiceDist>().unwrap(),
            ServiceDist::Exponential { mean_ns: 10_000.0 }
        );
        assert_eq!(
            "const:1.5ms".parse::<ServiceDist>().unwrap(),
            ServiceDist::Constant { ns: 1_500_000 }
        );
        assert_eq!(
            "bimodal".parse::<ServiceDist>().unwrap(),
            ServiceDist::PAPER_BIMODAL
        );
        assert_eq!(
            "bimodal:1us:100us:0.01".parse::<ServiceDist>().unwrap(),
            ServiceDist::Bimodal {
                short_ns: 1_000,
                long_ns: 100_000,
                long_fraction: 0.01
            }
        );
        for d in [
            ServiceDist::PAPER_BIMODAL,
            ServiceDist::Constant { ns: 7 },
            ServiceDist::Exponential { mean_ns: 12.5 },
        ] {
            assert_eq!(d.to_string().parse::<ServiceDist>().unwrap(), d);
        }
        for bad in [
            "",
            "exp",
            "exp:10",
            "exp:-1us",
            "exp:0us",
            "const:10xs",
            "bimodal:1us:2us:1.5",
            "bimodal:1us",
            "const:5s",
            "nope:1us",
        ] {
            let e = bad.parse::<ServiceDist>().unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad}");
        }
        assert_eq!(parse_duration_ns("250ns").unwrap(), 250.0);
        assert_eq!(parse_duration_ns("2s").unwrap(), 2e9);
        assert_eq!(parse_duration_ns("3µs").unwrap(), 3e3);
        assert!("poisson".parse::<Arrivals>().is_ok());
        assert!("sometimes".parse::<Arrivals>().is_err());
    }

    #[test]
    fn validation_names_the_bad_setting() {
        let ok = ScheduleConfig::new(1_000.0, secs(1));
        assert!(ok.validate().is_ok());
        assert_eq!(
            ScheduleConfig::new(0.0, secs(1))
                .validate()
                .unwrap_err()
                .key,
            "rate"
        );
        assert_eq!(
            ScheduleConfig::new(f64::NAN, secs(1))
                .validate()
                .unwrap_err()
                .key,
            "rate"
        );
        assert_eq!(
            ScheduleConfig::new(1.0, Duration::ZERO)
                .validate()
                .unwrap_err()
                .key,
            "duration"
        );
        assert_eq!(ok.clients(0).validate().unwrap_err().key, "clients");
        assert_eq!(
            ok.first_id(u64::MAX).validate().unwrap_err().key,
            "first_id"
        );
    }
}
