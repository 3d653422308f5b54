//! Random event sequences on random machines, checked against a model of what the daemon sees:
//! no core is ever given to two kthreads, counts match, no runtime exceeds its maximum, no
//! runtime at or below its guarantee is ever preempted, a runtime without a guarantee takes no
//! core granted less than a share quantum ago, and refused calls change nothing.
//!
//! The harness drives any [`Policy`] through the trait alone: the Shenango policy in both burst
//! sharing modes, the static and Arachne policies, and a trivial first-fit policy
//! (`first_fit.rs`) that shows a second policy plugs into the same harness and auditor.

#[path = "alloc_model/first_fit.rs"]
mod first_fit;

use std::collections::HashMap;

use corral_policy::audit::check_contract;
use corral_policy::{
    AllocError, Arachne, ArachneConfig, BurstSharing, CoreId, CoreOccupancy, Decision,
    KthreadIndex, KthreadPlace, KthreadQueues, Policy, QueueSnapshot, RingPositions, RuntimeId,
    RuntimeSpec, Shenango, ShenangoConfig, SpecError, Topology,
};

/// Seeded, so a failing seed replays exactly.
struct Rng(fastrand::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.u64(..)
    }

    fn below(&mut self, bound: usize) -> usize {
        self.0.usize(..bound)
    }

    fn percent(&mut self, chance: usize) -> bool {
        self.below(100) < chance
    }
}

fn random_topology(rng: &mut Rng) -> Topology {
    const SIZES: [usize; 8] = [1, 2, 3, 4, 7, 16, 33, 64];
    let cores = SIZES[rng.below(SIZES.len())];
    match rng.below(3) {
        0 => Topology::without_hyperthreads(cores).unwrap(),
        1 => Topology::hyperthread_pairs(cores).unwrap(),
        _ => {
            // Random pairing of a random subset.
            let mut order: Vec<usize> = (0..cores).collect();
            for index in (1..cores).rev() {
                order.swap(index, rng.below(index + 1));
            }
            let mut siblings = vec![None; cores];
            for pair in order.chunks(2) {
                if pair.len() == 2 && rng.percent(70) {
                    siblings[pair[0]] = Some(CoreId(pair[1] as u16));
                    siblings[pair[1]] = Some(CoreId(pair[0] as u16));
                }
            }
            Topology::from_siblings(siblings).unwrap()
        }
    }
}

/// What the daemon knows: who physically runs where, and which preemptions are in flight.
struct Daemon {
    alloc: Box<dyn Policy>,
    now: u64,
    occupant: Vec<Option<(RuntimeId, KthreadIndex)>>,
    preempting: Vec<(RuntimeId, KthreadIndex)>,
    specs: HashMap<RuntimeId, RuntimeSpec>,
    queues: HashMap<(RuntimeId, KthreadIndex), QueueSnapshot>,
    guaranteed: u32,
    preemptions: u64,
    wakes: u64,
    /// The policy's share quantum (0 where it has none).
    share_quantum: u64,
    /// When each core was last given to a kthread.
    granted_at: Vec<u64>,
}

impl Daemon {
    fn tick(&mut self, rng: &mut Rng) -> u64 {
        self.now += 1 + rng.below(10_000) as u64;
        self.now
    }

    fn retained(&self) -> HashMap<RuntimeId, i64> {
        self.specs
            .keys()
            .map(|&id| {
                let view = self.alloc.runtime(id).unwrap();
                (
                    id,
                    i64::from(view.running_cores) - i64::from(view.cores_handing_over),
                )
            })
            .collect()
    }

    /// Carries out decisions as the daemon would, checking each against the model.
    fn apply(
        &mut self,
        decisions: &[Decision],
        mut retained: HashMap<RuntimeId, i64>,
        context: &str,
    ) {
        for decision in decisions {
            match *decision {
                Decision::Wake {
                    runtime,
                    kthread,
                    core,
                } => {
                    assert!(
                        self.specs.contains_key(&runtime),
                        "{context}: wake for unknown {runtime}"
                    );
                    assert_eq!(
                        self.occupant[core.index()],
                        None,
                        "{context}: core {} given while occupied",
                        core.0
                    );
                    assert!(
                        !self.occupant.contains(&Some((runtime, kthread))),
                        "{context}: kthread woken twice"
                    );
                    self.occupant[core.index()] = Some((runtime, kthread));
                    self.granted_at[core.index()] = self.now;
                    *retained.get_mut(&runtime).unwrap() += 1;
                    self.wakes += 1;
                }
                Decision::Preempt {
                    victim_runtime,
                    victim_kthread,
                    core,
                    for_runtime,
                } => {
                    assert_ne!(victim_runtime, for_runtime);
                    assert_eq!(
                        self.occupant[core.index()],
                        Some((victim_runtime, victim_kthread)),
                        "{context}: preempting a kthread that is not there"
                    );
                    let guarantee = i64::from(self.specs[&victim_runtime].guaranteed_cores);
                    let victim_retained = retained.get_mut(&victim_runtime).unwrap();
                    assert!(
                        *victim_retained > guarantee,
                        "{context}: preempted {victim_runtime} holding {victim_retained} with guarantee {guarantee}"
                    );
                    *victim_retained -= 1;
                    // With no guarantee the taker is never below it, so it waits out the quantum.
                    if self.specs[&for_runtime].guaranteed_cores == 0 {
                        let held_for = self.now - self.granted_at[core.index()];
                        assert!(
                            held_for >= self.share_quantum,
                            "{context}: {for_runtime} took core {} held for only {held_for}",
                            core.0
                        );
                    }
                    assert!(!self.preempting.contains(&(victim_runtime, victim_kthread)));
                    self.preempting.push((victim_runtime, victim_kthread));
                    self.preemptions += 1;
                }
                Decision::PreemptionOverdue {
                    victim_runtime,
                    victim_kthread,
                    ..
                } => {
                    assert!(self.preempting.contains(&(victim_runtime, victim_kthread)));
                }
            }
        }
    }

    fn check(&self, context: &str) {
        let mut runtimes: Vec<RuntimeId> = self.specs.keys().copied().collect();
        runtimes.sort_by_key(|id| id.slot());
        if let Err(violation) = check_contract(&*self.alloc, &runtimes) {
            panic!("{context}: {violation}");
        }
        for core in self.alloc.topology().cores() {
            let occupancy = self.alloc.core(core).unwrap().occupancy;
            let seen = match occupancy {
                CoreOccupancy::Idle => None,
                CoreOccupancy::Running { runtime, kthread }
                | CoreOccupancy::HandingOver {
                    runtime, kthread, ..
                } => Some((runtime, kthread)),
            };
            assert_eq!(
                seen,
                self.occupant[core.index()],
                "{context}: core {}",
                core.0
            );
        }
        let mut occupied = 0;
        for (&id, spec) in &self.specs {
            let view = self.alloc.runtime(id).unwrap();
            assert!(
                view.running_cores + view.cores_reserved <= u32::from(spec.max_cores),
                "{context}: {id} above its maximum"
            );
            let here = self
                .occupant
                .iter()
                .filter(|slot| slot.is_some_and(|(runtime, _)| runtime == id))
                .count();
            assert_eq!(
                here, view.running_cores as usize,
                "{context}: {id} core count"
            );
            occupied += here;
        }
        assert_eq!(
            occupied + self.alloc.idle_core_count(),
            self.occupant.len(),
            "{context}: cores lost"
        );
    }

    fn random_runtime(&self, rng: &mut Rng) -> Option<RuntimeId> {
        let mut ids: Vec<RuntimeId> = self.specs.keys().copied().collect();
        ids.sort_by_key(|id| id.slot());
        (!ids.is_empty()).then(|| ids[rng.below(ids.len())])
    }

    fn random_occupied_core(&self, rng: &mut Rng) -> Option<(RuntimeId, KthreadIndex)> {
        let occupied: Vec<_> = self.occupant.iter().flatten().copied().collect();
        (!occupied.is_empty()).then(|| occupied[rng.below(occupied.len())])
    }
}

/// A policy under test and its share quantum.
type PolicyUnderTest = (Box<dyn Policy>, u64);

/// A Shenango policy with a random burst sharing mode and share quantum (none, or up to a few
/// of the harness's mean time step).
fn random_shenango(topology: Topology, rng: &mut Rng) -> PolicyUnderTest {
    let share_quantum = if rng.percent(50) {
        0
    } else {
        1 + rng.below(20_000) as u64
    };
    let config = ShenangoConfig {
        burst_sharing: if rng.percent(50) {
            BurstSharing::Balanced
        } else {
            BurstSharing::AnyBursting
        },
        preemption_timeout: Some(20_000),
        share_quantum,
    };
    (Box::new(Shenango::new(topology, config)), share_quantum)
}

/// Returns how many preemptions the run made.
fn run_one(seed: u64, steps: usize, policy: fn(Topology, &mut Rng) -> PolicyUnderTest) -> u64 {
    let mut rng = Rng(fastrand::Rng::with_seed(seed));
    let topology = random_topology(&mut rng);
    let cores = topology.core_count();
    let (alloc, share_quantum) = policy(topology, &mut rng);
    let mut daemon = Daemon {
        alloc,
        now: 0,
        occupant: vec![None; cores],
        preempting: Vec::new(),
        specs: HashMap::new(),
        queues: HashMap::new(),
        guaranteed: 0,
        preemptions: 0,
        wakes: 0,
        share_quantum,
        granted_at: vec![0; cores],
    };
    let mut out = Vec::new();

    for step in 0..steps {
        let context = format!("seed {seed} step {step}");
        out.clear();
        let retained = daemon.retained();
        let roll = rng.below(100);
        if roll < 8 || daemon.specs.is_empty() {
            let free = cores as u32 - daemon.guaranteed;
            let guaranteed = rng.below(free.min(3) as usize + 1) as u16;
            let max = (guaranteed + rng.below(cores + 2) as u16).max(1);
            let spec = RuntimeSpec::new(guaranteed, max)
                .with_kthreads(max + rng.below(3) as u16)
                .with_queue_capacities(64, 256);
            let now = daemon.tick(&mut rng);
            let id = daemon.alloc.register(spec, now).unwrap();
            daemon.specs.insert(id, spec);
            daemon.guaranteed += u32::from(guaranteed);
        } else if roll < 12 {
            let id = daemon.random_runtime(&mut rng).unwrap();
            daemon.alloc.unregister(id, &mut out).unwrap();
            // The daemon stopped its kthreads before telling the allocator.
            for slot in daemon.occupant.iter_mut() {
                if slot.is_some_and(|(runtime, _)| runtime == id) {
                    *slot = None;
                }
            }
            daemon.preempting.retain(|(runtime, _)| *runtime != id);
            let spec = daemon.specs.remove(&id).unwrap();
            daemon.guaranteed -= u32::from(spec.guaranteed_cores);
            let mut retained = retained;
            retained.remove(&id);
            daemon.apply(&out, retained, &context);
        } else if roll < 50 {
            // A pass: every active kthread observed, one sweep per runtime, some runtimes
            // falling behind.
            let mut active: Vec<_> = daemon.occupant.iter().flatten().copied().collect();
            active.sort_by_key(|(runtime, kthread)| (runtime.slot(), *kthread));
            let mut sweeps: Vec<(RuntimeId, Vec<KthreadQueues>)> = Vec::new();
            let busy: Vec<RuntimeId> = daemon
                .specs
                .keys()
                .copied()
                .filter(|_| rng.percent(40))
                .collect();
            for (runtime, kthread) in active {
                let queues = daemon.queues.entry((runtime, kthread)).or_default();
                if busy.contains(&runtime) {
                    let added = 1 + rng.below(3) as u32;
                    queues.run_queue.produced = queues.run_queue.produced.wrapping_add(added);
                    if rng.percent(50) {
                        queues.run_queue.consumed = queues.run_queue.consumed.wrapping_add(1);
                    }
                    if rng.percent(30) {
                        queues.ingress.produced = queues.ingress.produced.wrapping_add(1);
                    }
                    // Keep within the registered capacities, as an honest runtime does.
                    if queues.run_queue.pending() > 60 {
                        queues.run_queue.consumed = queues.run_queue.produced;
                    }
                    if queues.ingress.pending() > 200 {
                        queues.ingress.consumed = queues.ingress.produced;
                    }
                } else {
                    queues.run_queue.consumed = queues.run_queue.produced;
                    queues.ingress.consumed = queues.ingress.produced;
                }
                let queues = *queues;
                match sweeps.last_mut() {
                    Some((id, sweep)) if *id == runtime => {
                        sweep.push(KthreadQueues { kthread, queues })
                    }
                    _ => sweeps.push((runtime, vec![KthreadQueues { kthread, queues }])),
                }
            }
            for (runtime, sweep) in sweeps {
                daemon
                    .alloc
                    .observe_runtime(runtime, &sweep)
                    .unwrap_or_else(|error| panic!("{context}: {error}"));
            }
            let now = daemon.tick(&mut rng);
            daemon.alloc.run_pass(now, &mut out).unwrap();
            daemon.apply(&out, retained, &context);
        } else if roll < 65 {
            // A kthread runs out of work and parks (possibly while being preempted).
            if let Some((runtime, kthread)) = daemon.random_occupied_core(&mut rng) {
                let now = daemon.tick(&mut rng);
                daemon
                    .alloc
                    .kthread_parked(runtime, kthread, now, &mut out)
                    .unwrap();
                let core = daemon
                    .occupant
                    .iter()
                    .position(|slot| *slot == Some((runtime, kthread)))
                    .unwrap();
                daemon.occupant[core] = None;
                daemon
                    .preempting
                    .retain(|entry| *entry != (runtime, kthread));
                daemon.apply(&out, retained, &context);
            }
        } else if roll < 78 {
            if !daemon.preempting.is_empty() {
                let index = rng.below(daemon.preempting.len());
                let (runtime, kthread) = daemon.preempting.swap_remove(index);
                let now = daemon.tick(&mut rng);
                daemon
                    .alloc
                    .preemption_completed(runtime, kthread, now, &mut out)
                    .unwrap();
                let core = daemon
                    .occupant
                    .iter()
                    .position(|slot| *slot == Some((runtime, kthread)))
                    .unwrap();
                daemon.occupant[core] = None;
                daemon.apply(&out, retained, &context);
            }
        } else if roll < 92 {
            let id = daemon.random_runtime(&mut rng).unwrap();
            let now = daemon.tick(&mut rng);
            daemon.alloc.pending_work(id, now, &mut out).unwrap();
            daemon.apply(&out, retained, &context);
        } else {
            refused_calls_change_nothing(&mut daemon, &mut rng, &context);
        }
        daemon.check(&context);
    }
    assert!(daemon.wakes > 0, "seed {seed}: nothing ever ran");
    daemon.preemptions
}

fn refused_calls_change_nothing(daemon: &mut Daemon, rng: &mut Rng, context: &str) {
    let before = format!("{:?}", daemon.alloc);
    let mut out = Vec::new();
    let now = daemon.alloc.now();
    let id = daemon.random_runtime(rng).unwrap();
    let spec = daemon.specs[&id];
    let occupied = daemon.random_occupied_core(rng);
    let refusal = match rng.below(7) {
        0 => {
            let stale = RuntimeId::from_parts(id.slot(), id.generation() + 1);
            let result = daemon.alloc.pending_work(stale, now, &mut out);
            Some(matches!(result, Err(AllocError::UnknownRuntime(_))))
        }
        1 => {
            let beyond = KthreadIndex(spec.kthreads);
            let result = daemon.alloc.kthread_parked(id, beyond, now, &mut out);
            Some(matches!(result, Err(AllocError::NoSuchKthread { .. })))
        }
        2 => {
            let result = daemon.alloc.run_pass(now - 1, &mut out);
            Some(matches!(result, Err(AllocError::ClockWentBackwards { .. })))
        }
        3 => {
            let parked = (0..spec.kthreads).map(KthreadIndex).find(|&kthread| {
                matches!(
                    daemon.alloc.kthread(id, kthread).unwrap().place,
                    KthreadPlace::Parked { .. }
                )
            });
            parked.map(|parked| {
                let result = daemon.alloc.kthread_parked(id, parked, now, &mut out);
                matches!(result, Err(AllocError::KthreadNotActive { .. }))
            })
        }
        4 => occupied
            .filter(|running| !daemon.preempting.contains(running))
            .map(|(runtime, kthread)| {
                let result = daemon
                    .alloc
                    .preemption_completed(runtime, kthread, now, &mut out);
                matches!(result, Err(AllocError::NoPreemptionPending { .. }))
            }),
        5 => occupied.map(|(runtime, kthread)| {
            // Consumer ahead of producer, on one queue or the other.
            let garbage = QueueSnapshot {
                run_queue: RingPositions::new(rng.next() as u32, rng.next() as u32 | 1 << 31),
                ingress: RingPositions::new(0, 1),
            };
            let result = daemon.alloc.observe_runtime(
                runtime,
                &[KthreadQueues {
                    kthread,
                    queues: garbage,
                }],
            );
            matches!(result, Err(AllocError::ImpossibleQueue { .. }))
        }),
        _ => {
            let one_more = cores_left(daemon) + 1;
            let result = daemon
                .alloc
                .register(RuntimeSpec::new(one_more, one_more), now);
            Some(matches!(
                result,
                Err(AllocError::BadSpec(
                    SpecError::GuaranteesOversubscribed { .. }
                ))
            ))
        }
    };
    if let Some(refused_as_expected) = refusal {
        assert!(
            refused_as_expected,
            "{context}: not refused, or refused for the wrong reason"
        );
    }
    assert!(
        out.is_empty(),
        "{context}: a refused call decided something"
    );
    assert_eq!(
        before,
        format!("{:?}", daemon.alloc),
        "{context}: a refused call changed state"
    );
}

fn cores_left(daemon: &Daemon) -> u16 {
    (daemon.alloc.topology().core_count() as u32 - daemon.guaranteed) as u16
}

#[test]
fn invariants_hold_over_random_event_sequences() {
    let mut preemptions = 0;
    let mut runs_with_preemptions = 0;
    // ALLOC_MODEL_SEEDS=100000 for a longer soak.
    let seeds = std::env::var("ALLOC_MODEL_SEEDS")
        .ok()
        .and_then(|seeds| seeds.parse().ok())
        .unwrap_or(300);
    for seed in 0..seeds {
        let made = run_one(seed, 400, random_shenango);
        preemptions += made;
        runs_with_preemptions += u32::from(made > 0);
    }
    // Guards against a generator that never reaches the states worth checking.
    assert!(
        runs_with_preemptions > 150,
        "only {runs_with_preemptions} runs preempted"
    );
    assert!(preemptions > 1000, "only {preemptions} preemptions");
}

#[test]
fn a_second_policy_plugged_in_through_the_trait_keeps_the_contract() {
    for seed in 0..100 {
        let preemptions = run_one(seed, 400, |topology, _| {
            (Box::new(first_fit::FirstFit::new(topology)), 0)
        });
        assert_eq!(preemptions, 0, "seed {seed}: first-fit never preempts");
    }
}

#[test]
fn the_static_policy_keeps_the_contract_and_never_preempts() {
    for seed in 0..100 {
        let preemptions = run_one(seed, 400, |topology, _| {
            let settings = corral_policy::PolicySettings {
                preemption_timeout: Some(20_000),
                share_quantum: 0,
                options: Vec::new(),
            };
            (
                corral_policy::build("static", topology, &settings).unwrap(),
                0,
            )
        });
        assert_eq!(
            preemptions, 0,
            "seed {seed}: the static policy never preempts"
        );
    }
}

/// An Arachne policy deciding every few passes of the harness (its default 50 ms would never
/// come), with a random share quantum.
fn random_arachne(topology: Topology, rng: &mut Rng) -> PolicyUnderTest {
    let share_quantum = if rng.percent(50) {
        0
    } else {
        1 + rng.below(20_000) as u64
    };
    let config = ArachneConfig {
        interval: 1 + rng.below(40_000) as u64,
        preemption_timeout: Some(20_000),
        share_quantum,
        ..ArachneConfig::default()
    };
    (Box::new(Arachne::new(topology, config)), share_quantum)
}

#[test]
fn the_arachne_policy_keeps_the_contract() {
    let mut runs_with_preemptions = 0;
    for seed in 0..200 {
        let preemptions = run_one(seed, 400, random_arachne);
        runs_with_preemptions += u32::from(preemptions > 0);
    }
    // Guards against a generator that never reaches a decision that takes a core.
    assert!(
        runs_with_preemptions > 100,
        "only {runs_with_preemptions} runs preempted"
    );
}
