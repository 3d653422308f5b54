//! One load point, run inside the runtime: a generator uthread that sleeps on Corral's timers
//! until each Poisson arrival and spawns a uthread per request, which spins on the clock for its
//! service time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use corral::{WaitGroup, now_ns};
use hdrhistogram::Histogram;

/// What one run of arrivals asks for.
#[derive(Clone, Copy, Debug)]
pub struct Arrivals {
    /// Requests per second over all managed cores.
    pub rate_per_s: f64,
    pub service_mean_ns: f64,
    pub duration_ns: u64,
    /// A request that starts more than this after its arrival time counts as late.
    pub late_ns: u64,
    pub seed: u64,
}

/// What one run of arrivals did.
pub struct Outcome {
    pub spawned: u64,
    /// Requests that ran exactly once, more than once, and never.
    pub completed_once: u64,
    pub completed_twice_or_more: u64,
    pub never_completed: u64,
    /// Nanoseconds of service the requests asked for and spun, all together.
    pub service_ns: u64,
    /// Completion minus scheduled arrival, ns.
    pub latency: Histogram<u64>,
    pub late: u64,
}

struct Shared {
    /// One per request, counting its completions: each must end at 1.
    runs: Vec<AtomicU8>,
    /// One per request, its latency (ns), stored by the request with no lock and put in a
    /// histogram once the point is over, so that a request costs no more than the
    /// workload's own uthread.
    latency_ns: Vec<AtomicU64>,
    in_flight: WaitGroup,
    late: AtomicU64,
    late_ns: u64,
}

/// Marks a request done even if it panics, so that the generator's wait ends and the missing
/// completion shows up in the count instead of as a hang.
struct Done<'a>(&'a WaitGroup);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.done();
    }
}

fn exponential(rng: &mut fastrand::Rng, mean: f64) -> f64 {
    // 1 - U lies in (0, 1], so the logarithm is finite.
    -(1.0 - rng.f64()).ln() * mean
}

/// Runs on a uthread of the runtime: generates the arrivals of `spec`, waits for every request
/// to finish, and checks that each ran exactly once.
pub fn run(spec: Arrivals) -> Result<Outcome, String> {
    let mean_gap_ns = 1e9 / spec.rate_per_s;
    let expected = spec.duration_ns as f64 / mean_gap_ns;
    // A Poisson count beyond twice its mean plus 10,000 is beyond any run's chance.
    let capacity = (expected * 2.0) as usize + 10_000;
    let shared = Arc::new(Shared {
        runs: (0..capacity).map(|_| AtomicU8::new(0)).collect(),
        latency_ns: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
        in_flight: WaitGroup::new(),
        late: AtomicU64::new(0),
        late_ns: spec.late_ns,
    });
    let mut rng = fastrand::Rng::with_seed(spec.seed);
    let start = now_ns();
    let end = start.saturating_add(spec.duration_ns);
    let mut arrival = start + exponential(&mut rng, mean_gap_ns) as u64;
    let mut spawned = 0usize;
    let mut service_ns = 0u64;
    while arrival < end {
        let now = now_ns();
        if arrival > now {
            corral::sleep(Duration::from_nanos(arrival - now));
        }
        // Every arrival due by now, in order: the generator may have woken late (behind a
        // request, or for the grant of a parked core).
        let now = now_ns();
        while arrival < end && arrival <= now {
            if spawned == capacity {
                return Err(format!(
                    "more than {capacity} arrivals where {expected:.0} were expected"
                ));
            }
            let service = exponential(&mut rng, spec.service_mean_ns) as u64;
            service_ns += service;
            shared.in_flight.add(1);
            let (shared, index) = (shared.clone(), spawned);
            corral::spawn_detached(move || serve(&shared, index, arrival, service));
            spawned += 1;
            arrival += exponential(&mut rng, mean_gap_ns) as u64;
        }
    }
    shared.in_flight.wait();
    let mut outcome = Outcome {
        spawned: spawned as u64,
        completed_once: 0,
        completed_twice_or_more: 0,
        never_completed: 0,
        service_ns,
        latency: Histogram::new(3).map_err(|e| format!("histogram: {e}"))?,
        late: shared.late.load(Ordering::Relaxed),
    };
    for (runs, latency) in shared.runs[..spawned].iter().zip(&shared.latency_ns) {
        match runs.load(Ordering::Acquire) {
            0 => outcome.never_completed += 1,
            1 => outcome.completed_once += 1,
            _ => outcome.completed_twice_or_more += 1,
        }
        let ns = latency.load(Ordering::Relaxed);
        if ns > 0 {
            outcome
                .latency
                .record(ns)
                .map_err(|e| format!("histogram: {e}"))?;
        }
    }
    Ok(outcome)
}

/// One request: spin on the clock for `service_ns`, then record its latency from the scheduled
/// arrival.
fn serve(shared: &Shared, index: usize, arrival_ns: u64, service_ns: u64) {
    let _done = Done(&shared.in_flight);
    let started = now_ns();
    if started.saturating_sub(arrival_ns) > shared.late_ns {
        shared.late.fetch_add(1, Ordering::Relaxed);
    }
    let until = started + service_ns;
    while now_ns() < until {
        std::hint::spin_loop();
    }
    let latency = now_ns().saturating_sub(arrival_ns).max(1);
    shared.latency_ns[index].store(latency, Ordering::Relaxed);
    // Release: the latency is stored before the completion that the generator reads with
    // Acquire.
    shared.runs[index].fetch_add(1, Ordering::AcqRel);
}
