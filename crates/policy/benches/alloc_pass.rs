//! Cost of one allocator pass of the Shenango policy, called through `dyn Policy` as the daemon
//! calls it: observing every active kthread's queues (one sweep per runtime) plus `run_pass`.
//!
//! Run with `cargo bench -p corral-policy --bench alloc_pass`. Between timed passes the
//! runtimes park idle kthreads, finish preemptions and report pending work, so the machine
//! keeps churning the way it does under a mixed load; only the pass itself is timed.

use std::hint::black_box;
use std::time::Instant;

use corral_policy::{
    Decision, KthreadIndex, KthreadQueues, Policy, PolicySettings, QueueSnapshot, RuntimeId,
    RuntimeSpec, Topology,
};

const WARMUP_PASSES: usize = 20_000;
/// `ALLOC_PASS_PASSES` overrides this, e.g. to run under a profiler.
const TIMED_PASSES: usize = 200_000;

/// Seeded, so every run replays the same load.
struct Rng(fastrand::Rng);

impl Rng {
    fn percent(&mut self, chance: u64) -> bool {
        self.0.u64(..100) < chance
    }
}

struct Load {
    alloc: Box<dyn Policy>,
    rng: Rng,
    now: u64,
    runtimes: Vec<RuntimeId>,
    /// Which kthread the daemon has running on each core (from the decisions it carried out).
    occupant: Vec<Option<(RuntimeId, KthreadIndex)>>,
    preempting: Vec<(RuntimeId, KthreadIndex)>,
    /// Queue counters by runtime slot and kthread, as the runtimes would publish them.
    queues: Vec<Vec<QueueSnapshot>>,
    busy: Vec<bool>,
    /// Per runtime slot, its active kthreads' counters in kthread order: what the daemon sweeps
    /// from their shared cache lines.
    sweeps: Vec<Vec<KthreadQueues>>,
    observed: usize,
    decisions: Vec<Decision>,
}

impl Load {
    fn new(topology: Topology, runtime_count: usize, max_cores: u16) -> Self {
        let cores = topology.core_count();
        let settings = PolicySettings {
            // 1 ms in nanoseconds, the policy's default.
            preemption_timeout: Some(1_000_000),
            share_quantum: corral_policy::policies::shenango::DEFAULT_SHARE_QUANTUM,
            options: Vec::new(),
        };
        let mut alloc = corral_policy::build("shenango", topology, &settings).unwrap();
        let guaranteed_each = (cores / runtime_count / 2).min(2) as u16;
        let runtimes: Vec<RuntimeId> = (0..runtime_count)
            .map(|index| {
                let guaranteed = if index % 2 == 0 { guaranteed_each } else { 0 };
                alloc
                    .register(RuntimeSpec::new(guaranteed, max_cores), 0)
                    .unwrap()
            })
            .collect();
        Self {
            alloc,
            rng: Rng(fastrand::Rng::with_seed(0x5eed)),
            now: 0,
            occupant: vec![None; cores],
            preempting: Vec::new(),
            queues: vec![vec![QueueSnapshot::default(); usize::from(max_cores)]; runtime_count],
            busy: vec![false; runtime_count],
            sweeps: vec![Vec::with_capacity(usize::from(max_cores)); runtime_count],
            observed: 0,
            decisions: Vec::with_capacity(4 * cores),
            runtimes,
        }
    }

    fn carry_out(&mut self) {
        for decision in self.decisions.drain(..) {
            match decision {
                Decision::Wake {
                    runtime,
                    kthread,
                    core,
                } => self.occupant[core.index()] = Some((runtime, kthread)),
                Decision::Preempt {
                    victim_runtime,
                    victim_kthread,
                    ..
                } => self.preempting.push((victim_runtime, victim_kthread)),
                Decision::PreemptionOverdue { .. } => {}
            }
        }
    }

    fn vacate(&mut self, runtime: RuntimeId, kthread: KthreadIndex) {
        if let Some(slot) = self
            .occupant
            .iter_mut()
            .find(|slot| **slot == Some((runtime, kthread)))
        {
            *slot = None;
        }
    }

    /// Everything that happens between two passes; not timed.
    fn between_passes(&mut self) {
        self.now += 5_000;
        while let Some((runtime, kthread)) = self.preempting.pop() {
            self.alloc
                .preemption_completed(runtime, kthread, self.now, &mut self.decisions)
                .unwrap();
            self.vacate(runtime, kthread);
            self.carry_out();
        }
        // Load shifts: a runtime stays busy or idle for a few passes at a time.
        for index in 0..self.runtimes.len() {
            if self.rng.percent(15) {
                self.busy[index] = self.rng.percent(35);
            }
        }
        // Idle runtimes' kthreads run out of work and park.
        for core in 0..self.occupant.len() {
            let Some((runtime, kthread)) = self.occupant[core] else {
                continue;
            };
            if !self.busy[runtime.slot() as usize]
                && !self.preempting.contains(&(runtime, kthread))
                && self.rng.percent(20)
            {
                self.alloc
                    .kthread_parked(runtime, kthread, self.now, &mut self.decisions)
                    .unwrap();
                self.occupant[core] = None;
                self.carry_out();
            }
        }
        // Packets for runtimes with no core.
        for index in 0..self.runtimes.len() {
            if self.busy[index] && self.rng.percent(30) {
                self.alloc
                    .pending_work(self.runtimes[index], self.now, &mut self.decisions)
                    .unwrap();
                self.carry_out();
            }
        }
        // What the daemon reads from each active kthread's shared cache line.
        for sweep in &mut self.sweeps {
            sweep.clear();
        }
        self.observed = 0;
        for &(runtime, kthread) in self.occupant.iter().flatten() {
            let slot = runtime.slot() as usize;
            let queues = &mut self.queues[slot][kthread.index()];
            if self.busy[slot] {
                queues.run_queue.produced = queues.run_queue.produced.wrapping_add(2);
                queues.run_queue.consumed = queues.run_queue.consumed.wrapping_add(1);
                queues.ingress.produced = queues.ingress.produced.wrapping_add(3);
                queues.ingress.consumed = queues.ingress.consumed.wrapping_add(2);
            } else {
                queues.run_queue.consumed = queues.run_queue.produced;
                queues.ingress.consumed = queues.ingress.produced;
            }
            if queues.run_queue.pending() > 1 << 20 || queues.ingress.pending() > 1 << 20 {
                queues.run_queue.consumed = queues.run_queue.produced;
                queues.ingress.consumed = queues.ingress.produced;
            }
            self.sweeps[slot].push(KthreadQueues {
                kthread,
                queues: *queues,
            });
            self.observed += 1;
        }
        for sweep in &mut self.sweeps {
            sweep.sort_unstable_by_key(|observation| observation.kthread);
        }
        self.now += 1;
    }

    /// One pass, as the daemon's loop runs it every interval.
    fn pass(&mut self) {
        for (&runtime, sweep) in self.runtimes.iter().zip(&self.sweeps) {
            if !sweep.is_empty() {
                self.alloc
                    .observe_runtime(runtime, black_box(sweep))
                    .unwrap();
            }
        }
        self.alloc.run_pass(self.now, &mut self.decisions).unwrap();
    }
}

fn measure(label: &str, topology: Topology, runtime_count: usize, max_cores: u16) {
    let timed_passes = std::env::var("ALLOC_PASS_PASSES")
        .ok()
        .and_then(|passes| passes.parse().ok())
        .unwrap_or(TIMED_PASSES);
    let mut load = Load::new(topology, runtime_count, max_cores);
    for _ in 0..WARMUP_PASSES.min(timed_passes) {
        load.between_passes();
        load.pass();
        load.carry_out();
    }
    let mut samples = Vec::with_capacity(timed_passes);
    let mut observed = 0usize;
    let mut decided = 0usize;
    for _ in 0..timed_passes {
        load.between_passes();
        observed += load.observed;
        let start = Instant::now();
        load.pass();
        samples.push(start.elapsed().as_nanos() as u64);
        decided += load.decisions.len();
        load.carry_out();
    }
    samples.sort_unstable();
    let at = |fraction: f64| samples[((samples.len() - 1) as f64 * fraction) as usize];
    println!(
        "{label}: median {} ns/pass (p10 {}, p90 {}, p99 {}); {:.1} kthreads observed and {:.2} decisions per pass",
        at(0.5),
        at(0.1),
        at(0.9),
        at(0.99),
        observed as f64 / timed_passes as f64,
        decided as f64 / timed_passes as f64,
    );
}

/// What two `Instant::now()` calls around nothing cost, included in every sample above.
fn timer_overhead() -> u64 {
    let mut samples: Vec<u64> = (0..100_000)
        .map(|_| {
            let start = Instant::now();
            black_box(());
            start.elapsed().as_nanos() as u64
        })
        .collect();
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn main() {
    println!(
        "timer overhead: median {} ns per sample (included below)",
        timer_overhead()
    );
    measure(
        "64 cores (32 hyperthread pairs), 16 runtimes",
        Topology::hyperthread_pairs(64).unwrap(),
        16,
        16,
    );
    measure(
        "64 cores (no hyperthreads), 16 runtimes",
        Topology::without_hyperthreads(64).unwrap(),
        16,
        16,
    );
    measure(
        "2 cores, 2 runtimes",
        Topology::without_hyperthreads(2).unwrap(),
        2,
        2,
    );
}
