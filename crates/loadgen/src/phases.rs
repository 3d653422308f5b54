//! Schedules made of phases played back to back: a stretch at one rate, then another, with the
//! arrival process, service distribution, clients and seed shared, and request ids continuing
//! from one phase to the next. Load steps and ramps are built from these.
//!
//! Each phase is an ordinary [`ScheduleConfig`] whose times are shifted by the durations of the
//! phases before it, so a phase on its own has exactly the statistics of a one-phase schedule.
//! Phase 0 uses the seed as given (a one-phase schedule is the same as [`ScheduleConfig::iter`]
//! with that seed); phase `i` uses a seed derived from it and `i`, so that two phases at the same
//! rate do not repeat each other's arrivals.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::schedule::{
    Arrivals, NS_PER_SEC, Request, Schedule, ScheduleConfig, ScheduleError, ServiceDist, SplitMix64,
};

/// One stretch of a phased schedule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Target rate in requests per second.
    pub rate_rps: f64,
    /// Requests of this phase are due in `[start, start + duration_ns)`.
    pub duration_ns: u64,
}

impl Phase {
    pub fn new(rate_rps: f64, duration: Duration) -> Self {
        Phase {
            rate_rps,
            duration_ns: u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// Phases played back to back with shared settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub phases: Vec<Phase>,
    pub arrivals: Arrivals,
    pub service: ServiceDist,
    pub clients: u32,
    pub seed: u64,
    /// Id of the first request of the first phase; ids are consecutive from here across every
    /// phase.
    pub first_id: u64,
}

/// A phased schedule setting that cannot be used: which phase (if the problem is one phase's)
/// and the schedule's own error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhasesError {
    pub phase: Option<usize>,
    pub error: ScheduleError,
}

impl fmt::Display for PhasesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.phase {
            Some(i) => write!(
                f,
                "invalid phases[{i}].{} = {}: expected {}",
                self.error.key, self.error.value, self.error.expected
            ),
            None => self.error.fmt(f),
        }
    }
}

impl std::error::Error for PhasesError {}

impl Phases {
    /// The settings of `base` (its arrivals, service, clients, seed and first id) over
    /// `phases`; `base`'s own rate and duration are not used.
    pub fn new(base: &ScheduleConfig, phases: Vec<Phase>) -> Self {
        Phases {
            phases,
            arrivals: base.arrivals,
            service: base.service,
            clients: base.clients,
            seed: base.seed,
            first_id: base.first_id,
        }
    }

    /// Checks every value; the error names the bad one and, if it is a phase's, which phase.
    pub fn validate(&self) -> Result<(), PhasesError> {
        let shared = |error| PhasesError { phase: None, error };
        if self.phases.is_empty() {
            return Err(shared(ScheduleError::new(
                "phases",
                "[]",
                "at least one phase",
            )));
        }
        if self.clients == 0 {
            return Err(shared(ScheduleError::new("clients", 0, "at least 1")));
        }
        self.service.validate().map_err(shared)?;
        let mut total = 0u64;
        for (i, phase) in self.phases.iter().enumerate() {
            // Ids are checked once, over all phases, below.
            let cfg = ScheduleConfig {
                first_id: 0,
                ..self.phase_config(i, 0)
            };
            cfg.validate().map_err(|error| PhasesError {
                phase: Some(i),
                error,
            })?;
            total = total.checked_add(phase.duration_ns).ok_or(PhasesError {
                phase: Some(i),
                error: ScheduleError::new(
                    "duration",
                    phase.duration_ns,
                    "phases whose durations add up to less than 2^64 ns",
                ),
            })?;
        }
        if self.first_id.checked_add(self.request_bound()).is_none() {
            return Err(shared(ScheduleError::new(
                "first_id",
                self.first_id,
                "room for every request's id below u64::MAX",
            )));
        }
        Ok(())
    }

    /// The settings of phase `index` on its own, its first request numbered `first_id` and its
    /// times counted from its own start.
    pub fn phase_config(&self, index: usize, first_id: u64) -> ScheduleConfig {
        let phase = self.phases[index];
        ScheduleConfig {
            rate_rps: phase.rate_rps,
            duration_ns: phase.duration_ns,
            arrivals: self.arrivals,
            service: self.service,
            clients: self.clients,
            seed: self.phase_seed(index),
            first_id,
            max_requests: None,
        }
    }

    fn phase_seed(&self, index: usize) -> u64 {
        if index == 0 {
            self.seed
        } else {
            SplitMix64(self.seed ^ (index as u64).wrapping_mul(0xA076_1D64_78BD_642F)).next()
        }
    }

    /// When phase `index` starts, from the start of the schedule.
    pub fn start_ns(&self, index: usize) -> u64 {
        self.phases[..index]
            .iter()
            .fold(0u64, |t, p| t.saturating_add(p.duration_ns))
    }

    /// All phases together.
    pub fn duration_ns(&self) -> u64 {
        self.start_ns(self.phases.len())
    }

    /// Expected number of requests over all phases.
    pub fn expected_requests(&self) -> f64 {
        self.phases
            .iter()
            .map(|p| p.duration_ns as f64 * p.rate_rps / NS_PER_SEC)
            .sum()
    }

    /// The rate over the whole schedule: expected requests over the total duration.
    pub fn mean_rate_rps(&self) -> f64 {
        let secs = self.duration_ns() as f64 / NS_PER_SEC;
        if secs > 0.0 {
            self.expected_requests() / secs
        } else {
            0.0
        }
    }

    /// The most requests the schedule can produce: the sum of every phase's
    /// [`ScheduleConfig::request_bound`]. Size per-request tables with it.
    pub fn request_bound(&self) -> u64 {
        (0..self.phases.len())
            .map(|i| self.phase_config(i, 0).request_bound())
            .fold(0u64, u64::saturating_add)
    }

    /// The requests of every phase in order, produced lazily. Validate first; an invalid
    /// schedule gives unspecified output (but never panics).
    pub fn iter(&self) -> PhasedSchedule {
        PhasedSchedule::new(self.clone())
    }
}

/// A lazily produced phased schedule (see [`Phases::iter`]). It owns a copy of the phases,
/// made when it is created; each step allocates nothing.
#[derive(Clone, Debug)]
pub struct PhasedSchedule {
    phases: Phases,
    /// The phase being played; `phases.phases.len()` once every phase is done.
    index: usize,
    /// Start of the phase being played.
    offset_ns: u64,
    current: Option<Schedule>,
    next_id: u64,
}

impl PhasedSchedule {
    fn new(phases: Phases) -> Self {
        let next_id = phases.first_id;
        let current = (!phases.phases.is_empty()).then(|| phases.phase_config(0, next_id).iter());
        PhasedSchedule {
            phases,
            index: 0,
            offset_ns: 0,
            current,
            next_id,
        }
    }

    /// The phase the last request came from (or the one about to be played).
    pub fn phase(&self) -> usize {
        self.index
    }
}

impl Iterator for PhasedSchedule {
    type Item = Request;

    #[inline]
    fn next(&mut self) -> Option<Request> {
        loop {
            let schedule = self.current.as_mut()?;
            if let Some(r) = schedule.next() {
                self.next_id = r.id.wrapping_add(1);
                return Some(Request {
                    send_ns: r.send_ns.saturating_add(self.offset_ns),
                    ..r
                });
            }
            self.offset_ns = self
                .offset_ns
                .saturating_add(self.phases.phases[self.index].duration_ns);
            self.index += 1;
            self.current = (self.index < self.phases.phases.len())
                .then(|| self.phases.phase_config(self.index, self.next_id).iter());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ScheduleConfig {
        ScheduleConfig::new(1.0, Duration::from_secs(1))
            .clients(8)
            .seed(21)
            .first_id(100)
    }

    #[test]
    fn one_phase_is_the_plain_schedule() {
        let cfg = ScheduleConfig::new(50_000.0, Duration::from_millis(200))
            .clients(8)
            .seed(21)
            .first_id(100);
        let phases = Phases::new(&cfg, vec![Phase::new(50_000.0, Duration::from_millis(200))]);
        phases.validate().unwrap();
        assert_eq!(
            phases.iter().collect::<Vec<_>>(),
            cfg.iter().collect::<Vec<_>>()
        );
        assert_eq!(phases.request_bound(), cfg.request_bound());
    }

    #[test]
    fn ids_continue_and_times_stay_inside_their_phase() {
        let phases = Phases::new(
            &base(),
            vec![
                Phase::new(10_000.0, Duration::from_millis(300)),
                Phase::new(100_000.0, Duration::from_millis(200)),
                Phase::new(1_000.0, Duration::from_millis(500)),
            ],
        );
        phases.validate().unwrap();
        assert_eq!(phases.duration_ns(), 1_000_000_000);
        assert_eq!(phases.start_ns(1), 300_000_000);
        assert_eq!(phases.start_ns(2), 500_000_000);
        let reqs: Vec<Request> = phases.iter().collect();
        assert_eq!(reqs[0].id, 100);
        for w in reqs.windows(2) {
            assert_eq!(w[1].id, w[0].id + 1);
            assert!(w[1].send_ns >= w[0].send_ns);
        }
        assert!(reqs.last().unwrap().send_ns < 1_000_000_000);
        assert!(reqs.len() as u64 <= phases.request_bound());
        let count = |from: u64, to: u64| {
            reqs.iter()
                .filter(|r| (from..to).contains(&r.send_ns))
                .count() as f64
        };
        // Each phase's count is Poisson around rate * duration: within 5 standard deviations.
        for (expected, n) in [
            (3_000.0, count(0, 300_000_000)),
            (20_000.0, count(300_000_000, 500_000_000)),
            (500.0, count(500_000_000, 1_000_000_000)),
        ] {
            assert!(
                (n - expected).abs() < 5.0 * f64::sqrt(expected),
                "{n} requests where {expected} were expected"
            );
        }
        assert!((phases.expected_requests() - 23_500.0).abs() < 1e-6);
        assert!((phases.mean_rate_rps() - 23_500.0).abs() < 1e-6);
    }

    #[test]
    fn constant_phases_hold_their_rates_exactly() {
        let phases = Phases::new(
            &base().arrivals(Arrivals::Constant),
            vec![
                Phase::new(1_000.0, Duration::from_millis(10)),
                Phase::new(4_000.0, Duration::from_millis(5)),
            ],
        );
        phases.validate().unwrap();
        let times: Vec<u64> = phases.iter().map(|r| r.send_ns).collect();
        let mut expected: Vec<u64> = (0..10).map(|k| k * 1_000_000).collect();
        expected.extend((0..20).map(|k| 10_000_000 + k * 250_000));
        assert_eq!(times, expected);
        assert_eq!(phases.request_bound(), 30);
        let ids: Vec<u64> = phases.iter().map(|r| r.id).collect();
        assert_eq!(ids, (100..130).collect::<Vec<_>>());
    }

    #[test]
    fn phases_at_the_same_rate_do_not_repeat_each_other() {
        let phases = Phases::new(
            &base(),
            vec![
                Phase::new(10_000.0, Duration::from_millis(100)),
                Phase::new(10_000.0, Duration::from_millis(100)),
            ],
        );
        let reqs: Vec<Request> = phases.iter().collect();
        let first: Vec<u64> = reqs
            .iter()
            .filter(|r| r.send_ns < 100_000_000)
            .map(|r| r.send_ns)
            .collect();
        let second: Vec<u64> = reqs
            .iter()
            .filter(|r| r.send_ns >= 100_000_000)
            .map(|r| r.send_ns - 100_000_000)
            .collect();
        assert_ne!(first, second);
        // And the same phases give the same requests again.
        assert_eq!(reqs, phases.iter().collect::<Vec<_>>());
    }

    #[test]
    fn validation_names_the_phase_and_setting() {
        let ok = Phases::new(&base(), vec![Phase::new(10.0, Duration::from_secs(1)); 2]);
        assert!(ok.validate().is_ok());
        let mut bad = ok.clone();
        bad.phases[1].rate_rps = 0.0;
        let e = bad.validate().unwrap_err();
        assert_eq!((e.phase, e.error.key), (Some(1), "rate"));
        assert!(
            e.to_string().starts_with("invalid phases[1].rate = 0"),
            "{e}"
        );
        let mut bad = ok.clone();
        bad.phases[0].duration_ns = 0;
        assert_eq!(bad.validate().unwrap_err().phase, Some(0));
        let mut bad = ok.clone();
        bad.phases.clear();
        assert_eq!(bad.validate().unwrap_err().error.key, "phases");
        let mut bad = ok.clone();
        bad.clients = 0;
        let e = bad.validate().unwrap_err();
        assert_eq!((e.phase, e.error.key), (None, "clients"));
        let mut bad = ok.clone();
        bad.service = ServiceDist::Exponential { mean_ns: -1.0 };
        assert_eq!(bad.validate().unwrap_err().error.key, "service.mean_ns");
        let mut bad = ok.clone();
        bad.first_id = u64::MAX - 5;
        assert_eq!(bad.validate().unwrap_err().error.key, "first_id");
        let mut bad = ok;
        bad.phases[1].duration_ns = u64::MAX;
        assert_eq!(bad.validate().unwrap_err().phase, Some(1));
    }

    #[test]
    fn an_empty_schedule_yields_nothing() {
        let none = Phases::new(&base(), Vec::new());
        assert_eq!(none.iter().next(), None);
    }
}
