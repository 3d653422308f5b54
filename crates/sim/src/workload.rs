//! Open-loop workloads: a load schedule (steps of offered load over time) and Poisson
//! arrivals that follow it. Service times are [`ServiceDist`] draws, the syntax the demo
//! takes (`const:10us`, `exp:10us`, `bimodal`, `bimodal:5us:55us:0.1`), from corral-loadgen.

pub use corral_loadgen::ServiceDist;
use corral_loadgen::schedule::parse_duration_ns;

/// Offered load over time, as a fraction of the cores' capacity: `(from_ns, load)` steps,
/// sorted, the first at 0. The load of a step holds until the next one starts.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadSchedule {
    steps: Vec<(u64, f64)>,
}

impl LoadSchedule {
    /// One load throughout.
    pub fn constant(load: f64) -> Self {
        Self {
            steps: vec![(0, load)],
        }
    }

    /// Steps as given; they must start at 0, increase in time and have finite loads >= 0.
    pub fn steps(steps: Vec<(u64, f64)>) -> Result<Self, String> {
        match steps.first() {
            Some((0, _)) => {}
            _ => return Err("a load schedule must start at time 0".into()),
        }
        if steps.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
            return Err("load schedule steps must be in increasing time order".into());
        }
        if steps
            .iter()
            .any(|(_, load)| !load.is_finite() || *load < 0.0)
        {
            return Err("loads must be finite and non-negative".into());
        }
        Ok(Self { steps })
    }

    /// Reads `TIME:LOAD,TIME:LOAD,...`, e.g. `0s:0.1,1s:0.6,2s:0.1` (Figure 5's burst).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut steps = Vec::new();
        for item in text.split(',') {
            let (time, load) = item
                .split_once(':')
                .ok_or_else(|| format!("{item:?}: expected TIME:LOAD, e.g. 1s:0.5"))?;
            let ns = parse_duration_ns(time).map_err(|e| format!("{item:?}: {e:?}"))?;
            let load: f64 = load
                .trim()
                .parse()
                .map_err(|_| format!("{item:?}: the load must be a number"))?;
            steps.push((ns.round() as u64, load));
        }
        Self::steps(steps)
    }

    /// The load at `t` and when it next changes (`u64::MAX`: never).
    pub fn at(&self, t: u64) -> (f64, u64) {
        let next = self.steps.partition_point(|&(from, _)| from <= t);
        let load = self.steps[next - 1].1;
        let until = self.steps.get(next).map_or(u64::MAX, |&(from, _)| from);
        (load, until)
    }

    /// The time-weighted mean load over `[0, duration)`.
    pub fn mean(&self, duration: u64) -> f64 {
        if duration == 0 {
            return self.steps[0].1;
        }
        let mut total = 0.0;
        for (index, &(from, load)) in self.steps.iter().enumerate() {
            let until = self
                .steps
                .get(index + 1)
                .map_or(duration, |s| s.0.min(duration));
            if from < until {
                total += load * (until - from) as f64;
            }
        }
        total / duration as f64
    }

    pub fn as_steps(&self) -> &[(u64, f64)] {
        &self.steps
    }
}

/// A uniform draw in the open interval (0, 1), as corral-loadgen draws them.
fn open_unit(rng: &mut fastrand::Rng) -> f64 {
    ((rng.u64(..) >> 11) as f64) * (1.0 / (1u64 << 53) as f64) + (1.0 / (1u64 << 54) as f64)
}

/// Poisson arrivals at one runtime whose rate follows a [`LoadSchedule`]: at load `l`, the
/// rate is `l * requests_per_ns_at_full_load`.
#[derive(Clone, Debug)]
pub struct Arrivals {
    schedule: LoadSchedule,
    per_ns_at_full_load: f64,
}

impl Arrivals {
    pub fn new(schedule: LoadSchedule, per_ns_at_full_load: f64) -> Self {
        Self {
            schedule,
            per_ns_at_full_load,
        }
    }

    /// The next arrival after `from`, or `None` if the rate is zero from there on. The process
    /// is memoryless, so a gap that crosses a step is redrawn from the step at the new rate.
    pub fn next_after(&self, from: u64, rng: &mut fastrand::Rng) -> Option<u64> {
        let mut t = from;
        loop {
            let (load, until) = self.schedule.at(t);
            let rate = load * self.per_ns_at_full_load;
            if rate > 0.0 {
                let gap = (-open_unit(rng).ln() / rate).max(1.0);
                let at = t as f64 + gap;
                if at < until as f64 {
                    return Some(at.round() as u64);
                }
            }
            if until == u64::MAX {
                return None;
            }
            t = until;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_parses_and_answers_steps() {
        let schedule = LoadSchedule::parse("0s:0.1, 1ms:0.6,2ms:0.1").unwrap();
        assert_eq!(schedule.at(0), (0.1, 1_000_000));
        assert_eq!(schedule.at(1_500_000), (0.6, 2_000_000));
        assert_eq!(schedule.at(5_000_000), (0.1, u64::MAX));
        assert!((schedule.mean(3_000_000) - (0.1 + 0.6 + 0.1) / 3.0).abs() < 1e-9);
        assert!(LoadSchedule::parse("1s:0.5").is_err());
        assert!(LoadSchedule::parse("0s:0.5,0s:0.6").is_err());
        assert!(LoadSchedule::parse("0s:x").is_err());
        assert!(LoadSchedule::parse("0:0.5").is_err(), "a time needs a unit");
    }

    #[test]
    fn poisson_rate_follows_the_schedule() {
        // 1 request per us at load 1; load 0.5 for 10 ms, then 0 for 10 ms, then 1.
        let schedule =
            LoadSchedule::steps(vec![(0, 0.5), (10_000_000, 0.0), (20_000_000, 1.0)]).unwrap();
        let arrivals = Arrivals::new(schedule, 1e-3);
        let mut rng = fastrand::Rng::with_seed(7);
        let (mut t, mut counts) = (0, [0u32; 3]);
        while let Some(next) = arrivals.next_after(t, &mut rng) {
            if next >= 30_000_000 {
                break;
            }
            assert!(next > t);
            counts[(next / 10_000_000) as usize] += 1;
            t = next;
        }
        assert!((4_500..5_500).contains(&counts[0]), "{counts:?}");
        assert_eq!(counts[1], 0);
        assert!((9_400..10_600).contains(&counts[2]), "{counts:?}");
    }

    #[test]
    fn no_arrivals_at_zero_load() {
        let arrivals = Arrivals::new(LoadSchedule::constant(0.0), 1e-3);
        assert_eq!(
            arrivals.next_after(0, &mut fastrand::Rng::with_seed(1)),
            None
        );
    }
}
