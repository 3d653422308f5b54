//! One test per allocation rule, on small synthetic machines.

use std::collections::{HashMap, HashSet};

use super::*;
use crate::{MAX_KTHREADS, QueueFault, QueueSnapshot, RingPositions, SpecError, TopologyError};

/// Drives an allocator the way the daemon does: a clock, queue counters per kthread, and the
/// decisions of the last call.
struct Sim {
    alloc: Shenango,
    now: u64,
    queues: HashMap<(RuntimeId, KthreadIndex), QueueSnapshot>,
    /// Runtimes whose kthreads get a new run-queue item every pass and consume none.
    busy: HashSet<RuntimeId>,
}

impl Sim {
    fn with(topology: Topology, config: ShenangoConfig) -> Self {
        Self {
            alloc: Shenango::new(topology, config),
            now: 0,
            queues: HashMap::new(),
            busy: HashSet::new(),
        }
    }

    fn flat(cores: usize) -> Self {
        Self::with(
            Topology::without_hyperthreads(cores).unwrap(),
            ShenangoConfig::default(),
        )
    }

    fn paired(cores: usize) -> Self {
        Self::with(
            Topology::hyperthread_pairs(cores).unwrap(),
            ShenangoConfig::default(),
        )
    }

    fn tick(&mut self) -> u64 {
        self.now += 5_000;
        self.now
    }

    /// Lets a share quantum go by with nothing happening, so that every core held now may be
    /// taken by a runtime of equal standing (tests of the other preemption rules start here).
    fn outlast_share_quantum(&mut self) {
        self.now += self.alloc.config().share_quantum;
    }

    fn register(&mut self, guaranteed: u16, max: u16) -> RuntimeId {
        let now = self.tick();
        self.alloc
            .register(RuntimeSpec::new(guaranteed, max), now)
            .unwrap()
    }

    fn active_kthreads(&self, runtime: RuntimeId) -> Vec<(KthreadIndex, CoreId)> {
        let spec = self.alloc.runtime(runtime).unwrap().spec;
        (0..spec.kthreads)
            .filter_map(|index| {
                let kthread = KthreadIndex(index);
                match self.alloc.kthread(runtime, kthread).unwrap().place {
                    KthreadPlace::Active { core } => Some((kthread, core)),
                    KthreadPlace::Parked { .. } => None,
                }
            })
            .collect()
    }

    /// Observes every active kthread (busy runtimes pile up work, others drain), then runs
    /// the pass.
    fn pass(&mut self) -> Vec<Decision> {
        let runtimes: Vec<RuntimeId> = self.alloc.runtime_ids().collect();
        for runtime in runtimes {
            let mut sweep = Vec::new();
            for (kthread, _) in self.active_kthreads(runtime) {
                let queues = self.queues.entry((runtime, kthread)).or_default();
                if self.busy.contains(&runtime) {
                    queues.run_queue.produced += 1;
                } else {
                    queues.run_queue.consumed = queues.run_queue.produced;
                }
                let queues = *queues;
                sweep.push(KthreadQueues { kthread, queues });
            }
            self.alloc.observe_runtime(runtime, &sweep).unwrap();
        }
        let now = self.tick();
        let mut out = Vec::new();
        self.alloc.run_pass(now, &mut out).unwrap();
        self.audit();
        out
    }

    /// Makes the runtime congested until the allocator acts for it; returns that decision.
    fn congest(&mut self, runtime: RuntimeId) -> Option<Decision> {
        self.busy.insert(runtime);
        let mut found = None;
        for _ in 0..3 {
            let decisions = self.pass();
            found = decisions
                .into_iter()
                .find(|decision| beneficiary(decision) == Some(runtime));
            if found.is_some() {
                break;
            }
        }
        self.busy.remove(&runtime);
        found
    }

    fn pending_work(&mut self, runtime: RuntimeId) -> Vec<Decision> {
        let now = self.tick();
        let mut out = Vec::new();
        self.alloc.pending_work(runtime, now, &mut out).unwrap();
        self.audit();
        out
    }

    fn park(&mut self, runtime: RuntimeId, kthread: KthreadIndex) -> Vec<Decision> {
        let now = self.tick();
        let mut out = Vec::new();
        self.alloc
            .kthread_parked(runtime, kthread, now, &mut out)
            .unwrap();
        self.audit();
        out
    }

    /// Parks whichever kthread runs on `core`.
    fn park_core(&mut self, core: CoreId) -> Vec<Decision> {
        let CoreOccupancy::Running { runtime, kthread } = self.alloc.core(core).unwrap().occupancy
        else {
            panic!("core {} is not running a kthread", core.0);
        };
        self.park(runtime, kthread)
    }

    fn preemption_completed(&mut self, runtime: RuntimeId, kthread: KthreadIndex) -> Vec<Decision> {
        let now = self.tick();
        let mut out = Vec::new();
        self.alloc
            .preemption_completed(runtime, kthread, now, &mut out)
            .unwrap();
        self.audit();
        out
    }

    fn unregister(&mut self, runtime: RuntimeId) -> Vec<Decision> {
        let mut out = Vec::new();
        self.alloc.unregister(runtime, &mut out).unwrap();
        self.audit();
        out
    }

    fn cores_of(&self, runtime: RuntimeId) -> Vec<u16> {
        let mut cores: Vec<u16> = self
            .active_kthreads(runtime)
            .into_iter()
            .map(|(_, core)| core.0)
            .collect();
        cores.sort_unstable();
        cores
    }

    fn view(&self, runtime: RuntimeId) -> RuntimeView {
        self.alloc.runtime(runtime).unwrap()
    }

    fn audit(&self) {
        let runtimes: Vec<RuntimeId> = self.alloc.runtime_ids().collect();
        if let Err(violation) = crate::audit::check_contract(&self.alloc, &runtimes) {
            panic!("invariant broken: {violation}");
        }
    }
}

fn beneficiary(decision: &Decision) -> Option<RuntimeId> {
    match *decision {
        Decision::Wake { runtime, .. } => Some(runtime),
        Decision::Preempt { for_runtime, .. } => Some(for_runtime),
        Decision::PreemptionOverdue { .. } => None,
    }
}

fn woken_core(decision: Option<Decision>) -> u16 {
    match decision {
        Some(Decision::Wake { core, .. }) => core.0,
        other => panic!("expected a wake, got {other:?}"),
    }
}

fn only_wake(decisions: &[Decision]) -> (RuntimeId, KthreadIndex, u16) {
    match decisions {
        [
            Decision::Wake {
                runtime,
                kthread,
                core,
            },
        ] => (*runtime, *kthread, core.0),
        other => panic!("expected one wake, got {other:?}"),
    }
}

fn only_preempt(decisions: &[Decision]) -> (RuntimeId, KthreadIndex, u16, RuntimeId) {
    match decisions {
        [
            Decision::Preempt {
                victim_runtime,
                victim_kthread,
                core,
                for_runtime,
            },
        ] => (*victim_runtime, *victim_kthread, core.0, *for_runtime),
        other => panic!("expected one preemption, got {other:?}"),
    }
}

/// Grants `count` cores to `runtime`: the first for pending work, the rest for congestion.
fn grow(sim: &mut Sim, runtime: RuntimeId, count: usize) {
    for _ in 0..count {
        if sim.view(runtime).committed_cores() == 0 {
            let decisions = sim.pending_work(runtime);
            assert!(!decisions.is_empty(), "no core for pending work");
        } else {
            assert!(sim.congest(runtime).is_some(), "no core for congestion");
        }
    }
}

fn observe(
    sim: &mut Sim,
    runtime: RuntimeId,
    kthread: KthreadIndex,
    run_queue: (u32, u32),
    ingress: (u32, u32),
) {
    let queues = QueueSnapshot {
        run_queue: RingPositions::new(run_queue.0, run_queue.1),
        ingress: RingPositions::new(ingress.0, ingress.1),
    };
    sim.alloc
        .observe_runtime(runtime, &[KthreadQueues { kthread, queues }])
        .unwrap();
}

fn run_pass(sim: &mut Sim) -> Vec<Decision> {
    let now = sim.tick();
    let mut out = Vec::new();
    sim.alloc.run_pass(now, &mut out).unwrap();
    sim.audit();
    out
}

// ---- Algorithm 1: congestion ----

#[test]
fn item_queued_across_two_passes_grants_a_core() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::flat(cores);
        let app = sim.register(0, 4);
        only_wake(&sim.pending_work(app));
        let k0 = KthreadIndex(0);

        observe(&mut sim, app, k0, (5, 3), (0, 0));
        assert!(run_pass(&mut sim).is_empty(), "first sight is no evidence");
        observe(&mut sim, app, k0, (9, 4), (0, 0));
        let (runtime, _, _) = only_wake(&run_pass(&mut sim));
        assert_eq!(runtime, app);
        assert_eq!(sim.view(app).stats.congestion_detections, 1);
    }
}

#[test]
fn item_queued_across_two_passes_on_the_ingress_ring_grants_a_core() {
    let mut sim = Sim::paired(4);
    let app = sim.register(0, 4);
    only_wake(&sim.pending_work(app));
    let k0 = KthreadIndex(0);
    observe(&mut sim, app, k0, (0, 0), (100, 90));
    assert!(run_pass(&mut sim).is_empty());
    observe(&mut sim, app, k0, (0, 0), (120, 99));
    only_wake(&run_pass(&mut sim));
}

#[test]
fn drained_queue_grants_nothing() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    only_wake(&sim.pending_work(app));
    let k0 = KthreadIndex(0);
    observe(&mut sim, app, k0, (5, 3), (7, 7));
    run_pass(&mut sim);
    // Everything queued at the last pass was taken; new items arrived since.
    observe(&mut sim, app, k0, (8, 5), (9, 7));
    assert!(run_pass(&mut sim).is_empty());
    assert_eq!(sim.view(app).stats.congestion_detections, 0);
}

#[test]
fn empty_queue_grants_nothing() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    only_wake(&sim.pending_work(app));
    let k0 = KthreadIndex(0);
    for position in [3, 3, 4, 4] {
        observe(&mut sim, app, k0, (position, position), (0, 0));
        assert!(run_pass(&mut sim).is_empty());
    }
    // Was empty, now has an item: it has not waited a whole interval yet.
    observe(&mut sim, app, k0, (6, 4), (0, 0));
    assert!(run_pass(&mut sim).is_empty());
}

#[test]
fn only_the_previous_pass_counts_as_evidence() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    only_wake(&sim.pending_work(app));
    let k0 = KthreadIndex(0);
    // Counters far from zero on first sight are fine: there is nothing to compare them with.
    observe(&mut sim, app, k0, (0x9000_0005, 0x9000_0003), (0, 0));
    run_pass(&mut sim);
    // Not observed in this pass: the next comparison would span two intervals, so none is made.
    run_pass(&mut sim);
    observe(&mut sim, app, k0, (0x9000_0009, 0x9000_0004), (0, 0));
    assert!(run_pass(&mut sim).is_empty());
    observe(&mut sim, app, k0, (0x9000_0009, 0x9000_0005), (0, 0));
    only_wake(&run_pass(&mut sim));
}

#[test]
fn a_kthread_is_not_judged_by_counters_from_before_it_parked() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    only_wake(&sim.pending_work(app));
    let k0 = KthreadIndex(0);
    observe(&mut sim, app, k0, (5, 3), (0, 0));
    run_pass(&mut sim);
    sim.park(app, k0);
    only_wake(&sim.pending_work(app));
    observe(&mut sim, app, k0, (7, 4), (0, 0));
    assert!(run_pass(&mut sim).is_empty());
}

#[test]
fn a_congested_runtime_gets_one_core_per_pass() {
    let mut sim = Sim::flat(16);
    let app = sim.register(0, 16);
    grow(&mut sim, app, 1);
    // Both kthreads stall: still one core for the runtime in this pass.
    grow(&mut sim, app, 1);
    sim.busy.insert(app);
    sim.pass();
    let decisions = sim.pass();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
}

#[test]
fn maximum_is_respected() {
    for (cores, max) in [(2, 1), (4, 3), (16, 5), (64, 7)] {
        let mut sim = Sim::flat(cores);
        let app = sim.register(0, max);
        grow(&mut sim, app, 1);
        sim.busy.insert(app);
        for _ in 0..3 * usize::from(max) {
            sim.pass();
            assert!(sim.view(app).running_cores <= u32::from(max));
        }
        assert_eq!(sim.view(app).running_cores, u32::from(max));
        assert!(!sim.view(app).waiting, "at its maximum it asks for nothing");
    }
}

// ---- Algorithm 2: which core ----

#[test]
fn hyperthread_sibling_is_preferred() {
    let mut sim = Sim::paired(8);
    let other = sim.register(0, 8);
    let app = sim.register(0, 8);
    assert_eq!(only_wake(&sim.pending_work(other)).2, 0);
    // Core 1 is idle but its sibling is busy: a whole free physical core comes first.
    assert_eq!(only_wake(&sim.pending_work(app)).2, 2);
    // Now the sibling of app's core beats every other idle core.
    assert_eq!(woken_core(sim.congest(app)), 3);
    assert_eq!(woken_core(sim.congest(app)), 4);
    // The sibling also beats the core it gave up most recently.
    sim.park_core(CoreId(3));
    sim.park_core(CoreId(4));
    assert_eq!(sim.view(app).most_recent_core, Some(CoreId(4)));
    assert_eq!(woken_core(sim.congest(app)), 3);
}

#[test]
fn cores_come_in_sibling_pairs_on_every_topology() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::paired(cores);
        let app = sim.register(0, cores as u16);
        for granted in 1..=cores {
            grow(&mut sim, app, 1);
            let held = sim.cores_of(app);
            assert_eq!(held.len(), granted);
            let whole_pairs = held
                .chunks(2)
                .all(|pair| pair.len() == 1 || pair[0] ^ 1 == pair[1]);
            assert!(whole_pairs, "{cores} cores: holds {held:?}");
        }
    }
}

#[test]
fn without_hyperthreads_cores_are_taken_in_order() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::flat(cores);
        let app = sim.register(0, cores as u16);
        grow(&mut sim, app, cores);
        assert_eq!(sim.cores_of(app), (0..cores as u16).collect::<Vec<_>>());
        assert_eq!(sim.alloc.idle_core_count(), 0);
    }
}

#[test]
fn most_recently_used_core_is_preferred() {
    let mut sim = Sim::flat(8);
    let other = sim.register(0, 8);
    let app = sim.register(0, 8);
    assert_eq!(only_wake(&sim.pending_work(other)).2, 0);
    assert_eq!(only_wake(&sim.pending_work(app)).2, 1);
    assert_eq!(woken_core(sim.congest(app)), 2);
    sim.park_core(CoreId(0));
    sim.park_core(CoreId(2));
    // Cores 0 and 2 are both idle; 2 is where app ran last.
    assert_eq!(woken_core(sim.congest(app)), 2);
}

#[test]
fn idle_core_beats_preempting_the_most_recent_one() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    let burster = sim.register(0, 3);
    assert_eq!(only_wake(&sim.pending_work(app)).2, 0);
    sim.park_core(CoreId(0));
    grow(&mut sim, burster, 3);
    assert_eq!(sim.cores_of(burster), vec![0, 1, 2]);
    // Core 0 (app's last) belongs to a burster, core 3 is idle.
    assert_eq!(only_wake(&sim.pending_work(app)).2, 3);
    assert_eq!(sim.view(burster).stats.preemptions_suffered, 0);
}

#[test]
fn most_recent_core_is_taken_back_from_a_burster_when_nothing_is_idle() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    let burster = sim.register(0, 4);
    assert_eq!(only_wake(&sim.pending_work(app)).2, 0);
    sim.park_core(CoreId(0));
    grow(&mut sim, burster, 4);
    sim.outlast_share_quantum();
    let (victim, _, core, taker) = only_preempt(&sim.pending_work(app));
    assert_eq!((victim, core, taker), (burster, 0, app));
}

// ---- Preemption and guarantees ----

#[test]
fn only_bursting_runtimes_are_preempted() {
    for burst_sharing in [BurstSharing::Balanced, BurstSharing::AnyBursting] {
        let config = ShenangoConfig {
            burst_sharing,
            ..ShenangoConfig::default()
        };
        let mut sim = Sim::with(Topology::without_hyperthreads(4).unwrap(), config);
        let guaranteed = sim.register(2, 4);
        let burster = sim.register(0, 4);
        let newcomer = sim.register(0, 1);
        grow(&mut sim, guaranteed, 2);
        grow(&mut sim, burster, 2);
        sim.outlast_share_quantum();
        let (victim, victim_kthread, core, taker) = only_preempt(&sim.pending_work(newcomer));
        assert_eq!((victim, taker), (burster, newcomer));
        assert!(sim.cores_of(burster).contains(&core));
        assert_eq!(sim.view(guaranteed).stats.preemptions_suffered, 0);

        let (runtime, _, woken) = only_wake(&sim.preemption_completed(burster, victim_kthread));
        assert_eq!((runtime, woken), (newcomer, core));
        assert_eq!(sim.view(burster).running_cores, 1);
    }
}

#[test]
fn runtimes_at_their_guarantee_are_never_preempted() {
    let mut sim = Sim::flat(4);
    let first = sim.register(2, 4);
    let second = sim.register(2, 4);
    let latecomer = sim.register(0, 2);
    grow(&mut sim, first, 2);
    grow(&mut sim, second, 2);
    assert!(sim.pending_work(latecomer).is_empty());
    assert!(sim.view(latecomer).waiting);
    for _ in 0..5 {
        sim.busy.insert(first);
        assert!(sim.pass().is_empty(), "nothing to take from anyone");
    }
    // A core freed by a park goes straight to the runtime that has been waiting.
    let (runtime, _, core) = only_wake(&sim.park_core(CoreId(0)));
    assert_eq!((runtime, core), (latecomer, 0));
    assert_eq!(sim.view(first).stats.preemptions_suffered, 0);
    assert_eq!(sim.view(second).stats.preemptions_suffered, 0);
}

#[test]
fn runtime_below_its_guarantee_preempts_a_burster() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::flat(cores);
        let burster = sim.register(0, cores as u16);
        let guaranteed = sim.register(2, 2);
        grow(&mut sim, burster, cores);

        let (victim, kthread, core, _) = only_preempt(&sim.pending_work(guaranteed));
        assert_eq!(victim, burster);
        assert_eq!(sim.view(guaranteed).cores_reserved, 1);
        only_wake(&sim.preemption_completed(burster, kthread));
        assert_eq!(sim.cores_of(guaranteed), vec![core]);

        // Still below its guarantee: congestion takes a second core the same way.
        sim.busy.insert(guaranteed);
        let decisions = sim.pass();
        let decisions = if decisions.is_empty() {
            sim.pass()
        } else {
            decisions
        };
        let (victim, kthread, _, taker) = only_preempt(&decisions);
        assert_eq!((victim, taker), (burster, guaranteed));
        sim.busy.remove(&guaranteed);
        only_wake(&sim.park(burster, kthread));
        assert_eq!(sim.view(guaranteed).running_cores, 2);
    }
}

#[test]
fn neediest_runtime_gets_the_last_idle_core_in_a_pass() {
    let mut sim = Sim::flat(4);
    let burster = sim.register(0, 4);
    let guaranteed = sim.register(2, 2);
    grow(&mut sim, burster, 2);
    grow(&mut sim, guaranteed, 1);
    assert_eq!(sim.alloc.idle_core_count(), 1);
    // Both congested in the same pass; the one below its guarantee goes first.
    assert!(sim.pass().is_empty());
    sim.busy.insert(burster);
    sim.busy.insert(guaranteed);
    assert!(
        sim.pass().is_empty(),
        "queues were empty at the previous pass"
    );
    let decisions = sim.pass();
    let first = decisions.first().copied();
    assert!(
        matches!(first, Some(Decision::Wake { runtime, .. }) if runtime == guaranteed),
        "{decisions:?}"
    );
    // The burster found nothing idle and nobody it may take from.
    assert_eq!(decisions.len(), 1, "{decisions:?}");
}

#[test]
fn each_preemption_in_a_pass_takes_from_whoever_bursts_most_at_that_moment() {
    let mut sim = Sim::flat(13);
    let owed: Vec<RuntimeId> = (0..4).map(|_| sim.register(2, 2)).collect();
    let big = sim.register(0, 13);
    let middle = sim.register(0, 13);
    let small = sim.register(0, 13);
    for &runtime in &owed {
        grow(&mut sim, runtime, 1);
    }
    grow(&mut sim, big, 5);
    grow(&mut sim, middle, 3);
    grow(&mut sim, small, 1);
    assert_eq!(sim.alloc.idle_core_count(), 0);

    assert!(sim.pass().is_empty());
    sim.busy.extend(owed.iter().copied());
    assert!(sim.pass().is_empty());
    let decisions = sim.pass();
    let victims: Vec<RuntimeId> = decisions
        .iter()
        .map(|decision| match *decision {
            Decision::Preempt { victim_runtime, .. } => victim_runtime,
            other => panic!("expected preemptions only, got {other:?}"),
        })
        .collect();
    assert_eq!(victims.len(), 4);
    // Bursts 5, 3, 1 become 2, 2, 1: take from the biggest until it is level with the next.
    let taken_from = |runtime| victims.iter().filter(|&&victim| victim == runtime).count();
    assert_eq!((taken_from(big), taken_from(middle)), (3, 1));
    assert!(!victims.contains(&small));
}

#[test]
fn balanced_bursters_do_not_take_cores_back_and_forth() {
    let mut sim = Sim::flat(4);
    let left = sim.register(0, 4);
    let right = sim.register(0, 4);
    grow(&mut sim, left, 2);
    grow(&mut sim, right, 2);
    sim.busy.insert(left);
    sim.busy.insert(right);
    for _ in 0..10 {
        assert!(sim.pass().is_empty());
    }
    assert_eq!(sim.view(left).stats.preemptions_suffered, 0);
}

#[test]
fn balanced_bursters_even_out() {
    let mut sim = Sim::flat(6);
    let big = sim.register(0, 6);
    let small = sim.register(0, 6);
    grow(&mut sim, big, 5);
    grow(&mut sim, small, 1);
    sim.busy.insert(small);
    let mut preemptions = 0;
    for _ in 0..10 {
        sim.outlast_share_quantum();
        for decision in sim.pass() {
            if let Decision::Preempt { victim_kthread, .. } = decision {
                preemptions += 1;
                sim.preemption_completed(big, victim_kthread);
            }
        }
    }
    assert_eq!(preemptions, 2);
    assert_eq!(sim.view(big).running_cores, 3);
    assert_eq!(sim.view(small).running_cores, 3);
}

#[test]
fn paper_policy_lets_any_burster_take_from_another() {
    let config = ShenangoConfig {
        burst_sharing: BurstSharing::AnyBursting,
        ..ShenangoConfig::default()
    };
    let mut sim = Sim::with(Topology::without_hyperthreads(4).unwrap(), config);
    let left = sim.register(0, 4);
    let right = sim.register(0, 4);
    grow(&mut sim, left, 2);
    grow(&mut sim, right, 2);
    sim.outlast_share_quantum();
    sim.busy.insert(left);
    sim.pass();
    let (victim, _, _, taker) = only_preempt(&sim.pass());
    assert_eq!((victim, taker), (right, left));
}

#[test]
fn a_runtime_with_no_core_may_take_from_a_runtime_bursting_by_one() {
    let mut sim = Sim::flat(2);
    let first = sim.register(0, 1);
    let second = sim.register(0, 1);
    let third = sim.register(0, 1);
    grow(&mut sim, first, 1);
    grow(&mut sim, second, 1);
    sim.outlast_share_quantum();
    let (_, _, _, taker) = only_preempt(&sim.pending_work(third));
    assert_eq!(taker, third);
}

#[test]
fn a_preempted_burster_is_not_asked_twice_for_the_same_core() {
    let mut sim = Sim::flat(2);
    let burster = sim.register(0, 2);
    let guaranteed = sim.register(2, 2);
    grow(&mut sim, burster, 2);
    only_preempt(&sim.pending_work(guaranteed));
    // One promise at a time: congestion before the handover asks for nothing more.
    sim.busy.insert(guaranteed);
    for _ in 0..3 {
        assert!(sim.pass().is_empty());
    }
}

#[test]
fn overdue_preemption_is_reported_once() {
    let mut sim = Sim::flat(2);
    let burster = sim.register(0, 2);
    let guaranteed = sim.register(1, 1);
    grow(&mut sim, burster, 2);
    let (_, kthread, core, _) = only_preempt(&sim.pending_work(guaranteed));
    let mut overdue = Vec::new();
    for _ in 0..300 {
        overdue.extend(sim.pass());
    }
    assert_eq!(
        overdue,
        vec![Decision::PreemptionOverdue {
            victim_runtime: burster,
            victim_kthread: kthread,
            core: CoreId(core),
        }]
    );
    only_wake(&sim.preemption_completed(burster, kthread));
}

// ---- Which kthread ----

#[test]
fn kthread_that_last_ran_on_the_core_is_woken_else_the_longest_parked() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 3);
    let (_, first, core) = only_wake(&sim.pending_work(app));
    assert_eq!(
        (first, core),
        (KthreadIndex(0), 0),
        "all parked alike: lowest index"
    );
    let (_, second, core) = only_wake(std::slice::from_ref(&sim.congest(app).unwrap()));
    assert_eq!((second, core), (KthreadIndex(1), 1));
    sim.park(app, KthreadIndex(0));
    sim.park(app, KthreadIndex(1));
    let parked: Vec<_> = sim.alloc.parked_kthreads(app).unwrap().collect();
    assert_eq!(
        parked,
        vec![KthreadIndex(2), KthreadIndex(0), KthreadIndex(1)]
    );

    // Core 1 (most recent) comes back with kthread 1, which ran there, not kthread 2.
    let (_, kthread, core) = only_wake(&sim.pending_work(app));
    assert_eq!((kthread, core), (KthreadIndex(1), 1));
    // Core 0 comes back with kthread 0.
    let (_, kthread, core) = only_wake(std::slice::from_ref(&sim.congest(app).unwrap()));
    assert_eq!((kthread, core), (KthreadIndex(0), 0));
    // Core 2 is new to the runtime: the longest parked kthread.
    let (_, kthread, core) = only_wake(std::slice::from_ref(&sim.congest(app).unwrap()));
    assert_eq!((kthread, core), (KthreadIndex(2), 2));
}

#[test]
fn another_runtimes_last_use_means_longest_parked() {
    let mut sim = Sim::flat(1);
    let app = sim.register(0, 2);
    let other = sim.register(0, 1);
    only_wake(&sim.pending_work(app));
    sim.park(app, KthreadIndex(0));
    only_wake(&sim.pending_work(other));
    sim.park(other, KthreadIndex(0));
    // Kthread 1 has been parked since registration, kthread 0 only since just now.
    let (_, kthread, _) = only_wake(&sim.pending_work(app));
    assert_eq!(kthread, KthreadIndex(1));
    assert_eq!(sim.alloc.core(CoreId(0)).unwrap().stats.reallocations, 3);
}

// ---- Events ----

#[test]
fn park_frees_the_core_for_the_next_congested_runtime() {
    let mut sim = Sim::flat(3);
    let hog = sim.register(0, 2);
    let app = sim.register(0, 2);
    grow(&mut sim, hog, 2);
    grow(&mut sim, app, 1);
    // app bursts by one, hog by two: even split reached, so app waits.
    sim.busy.insert(app);
    sim.pass();
    assert!(sim.pass().is_empty());
    assert!(sim.view(app).waiting);
    let (runtime, _, core) = only_wake(&sim.park_core(CoreId(0)));
    assert_eq!((runtime, core), (app, 0));
    assert!(!sim.view(app).waiting);
}

#[test]
fn park_with_nobody_waiting_leaves_the_core_idle() {
    let mut sim = Sim::paired(4);
    let app = sim.register(0, 2);
    grow(&mut sim, app, 2);
    assert!(sim.park_core(CoreId(1)).is_empty());
    assert_eq!(sim.alloc.idle_core_count(), 3);
    assert_eq!(sim.view(app).stats.parks, 1);
}

#[test]
fn waiting_ends_when_congestion_does() {
    let mut sim = Sim::flat(2);
    let hog = sim.register(0, 1);
    let app = sim.register(0, 2);
    grow(&mut sim, hog, 1);
    grow(&mut sim, app, 1);
    sim.busy.insert(app);
    sim.pass();
    sim.pass();
    assert!(sim.view(app).waiting);
    sim.busy.remove(&app);
    sim.pass();
    assert!(!sim.view(app).waiting);
    assert!(sim.park_core(CoreId(0)).is_empty());
}

#[test]
fn pending_work_without_a_core_is_granted_at_once() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::paired(cores);
        let app = sim.register(0, 2);
        let (runtime, kthread, _) = only_wake(&sim.pending_work(app));
        assert_eq!((runtime, kthread), (app, KthreadIndex(0)));
        // With a core, the runtime finds its work itself.
        assert!(sim.pending_work(app).is_empty());
        assert_eq!(sim.view(app).running_cores, 1);
    }
}

#[test]
fn pending_work_with_no_core_to_be_had_is_served_on_the_next_park() {
    let mut sim = Sim::flat(2);
    let first = sim.register(1, 1);
    let second = sim.register(1, 1);
    let third = sim.register(0, 1);
    grow(&mut sim, first, 1);
    grow(&mut sim, second, 1);
    assert!(sim.pending_work(third).is_empty());
    assert!(sim.view(third).has_pending_work);
    // Passes keep it waiting.
    assert!(sim.pass().is_empty());
    assert!(sim.view(third).waiting);
    let (runtime, _, _) = only_wake(&sim.park_core(CoreId(1)));
    assert_eq!(runtime, third);
    assert!(!sim.view(third).has_pending_work);
}

#[test]
fn unregister_reclaims_all_cores() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::paired(cores);
        let app = sim.register(1, cores as u16);
        grow(&mut sim, app, cores);
        assert_eq!(sim.alloc.idle_core_count(), 0);
        assert!(sim.unregister(app).is_empty());
        assert_eq!(sim.alloc.idle_core_count(), cores);
        assert!(matches!(
            sim.alloc.runtime(app),
            Err(AllocError::UnknownRuntime(_))
        ));
        // Its guarantee is free again.
        sim.register(cores as u16, cores as u16);
    }
}

#[test]
fn unregister_hands_cores_to_waiting_and_promised_runtimes() {
    let mut sim = Sim::flat(4);
    let doomed = sim.register(0, 4);
    let guaranteed = sim.register(1, 1);
    let waiting = sim.register(0, 1);
    grow(&mut sim, doomed, 4);
    let (_, _, promised_core, _) = only_preempt(&sim.pending_work(guaranteed));
    // `waiting` has no core; under Balanced it may still take one from a runtime with burst.
    sim.outlast_share_quantum();
    let decisions = sim.pending_work(waiting);
    assert_eq!(decisions.len(), 1);
    let decisions = sim.unregister(doomed);
    assert!(decisions.contains(&Decision::Wake {
        runtime: guaranteed,
        kthread: KthreadIndex(0),
        core: CoreId(promised_core),
    }));
    assert_eq!(sim.view(guaranteed).running_cores, 1);
    assert_eq!(sim.view(waiting).running_cores, 1);
    assert_eq!(sim.alloc.idle_core_count(), 2);
}

#[test]
fn unregistering_the_promised_runtime_returns_the_core_to_the_pool() {
    let mut sim = Sim::flat(2);
    let burster = sim.register(0, 2);
    let guaranteed = sim.register(1, 1);
    grow(&mut sim, burster, 2);
    let (_, kthread, core, _) = only_preempt(&sim.pending_work(guaranteed));
    assert!(sim.unregister(guaranteed).is_empty());
    assert!(matches!(
        sim.alloc.core(CoreId(core)).unwrap().occupancy,
        CoreOccupancy::HandingOver { to: None, .. }
    ));
    assert!(sim.preemption_completed(burster, kthread).is_empty());
    assert_eq!(sim.alloc.idle_core_count(), 1);
}

#[test]
fn voluntary_park_during_preemption_completes_the_handover() {
    let mut sim = Sim::flat(2);
    let burster = sim.register(0, 2);
    let guaranteed = sim.register(1, 1);
    grow(&mut sim, burster, 2);
    let (_, kthread, core, _) = only_preempt(&sim.pending_work(guaranteed));
    let (runtime, _, woken) = only_wake(&sim.park(burster, kthread));
    assert_eq!((runtime, woken), (guaranteed, core));
}

// ---- Refusals ----

#[test]
fn a_refused_sweep_records_nothing_of_the_runtime() {
    let mut sim = Sim::flat(2);
    let app = sim.register(0, 2);
    grow(&mut sim, app, 2);
    let queued = |produced, consumed| QueueSnapshot {
        run_queue: RingPositions::new(produced, consumed),
        ingress: RingPositions::default(),
    };
    let sweep = |first, second| {
        [
            KthreadQueues {
                kthread: KthreadIndex(0),
                queues: first,
            },
            KthreadQueues {
                kthread: KthreadIndex(1),
                queues: second,
            },
        ]
    };
    sim.alloc
        .observe_runtime(app, &sweep(queued(100, 0), queued(0, 0)))
        .unwrap();
    run_pass(&mut sim);
    // Kthread 0 still has its items (congested), but kthread 1's counters are impossible: the
    // whole sweep is refused, so kthread 0's evidence is not recorded either.
    let before = format!("{:?}", sim.alloc);
    assert!(matches!(
        sim.alloc
            .observe_runtime(app, &sweep(queued(101, 1), queued(0, 1))),
        Err(AllocError::ImpossibleQueue {
            kthread: KthreadIndex(1),
            ..
        })
    ));
    assert_eq!(before, format!("{:?}", sim.alloc));
    let mut reversed = sweep(queued(101, 1), queued(0, 0));
    reversed.reverse();
    assert_eq!(
        sim.alloc.observe_runtime(app, &reversed),
        Err(AllocError::ObservationsOutOfOrder {
            runtime: app,
            kthread: KthreadIndex(0)
        })
    );
    let twice = [reversed[1], reversed[1]];
    assert_eq!(
        sim.alloc.observe_runtime(app, &twice),
        Err(AllocError::ObservationsOutOfOrder {
            runtime: app,
            kthread: KthreadIndex(0)
        })
    );
    assert_eq!(before, format!("{:?}", sim.alloc));
    // The same sweep with honest counters is accepted and finds the congestion.
    let congestion_before = sim.view(app).stats.congestion_detections;
    sim.alloc
        .observe_runtime(app, &sweep(queued(101, 1), queued(0, 0)))
        .unwrap();
    assert_eq!(
        sim.alloc
            .observe_runtime(app, &sweep(queued(101, 1), queued(0, 0))),
        Err(AllocError::AlreadyObserved {
            runtime: app,
            kthread: KthreadIndex(0)
        })
    );
    assert_eq!(
        sim.view(app).stats.congestion_detections,
        congestion_before + 1
    );
}

#[test]
fn bad_ids_and_impossible_observations_are_refused_without_change() {
    let mut sim = Sim::flat(2);
    let app = sim.register(0, 2);
    only_wake(&sim.pending_work(app));
    let mut out = Vec::new();

    let stale = {
        let doomed = sim.register(0, 1);
        sim.unregister(doomed);
        doomed
    };
    let reused = sim.register(0, 1);
    let now = sim.tick();
    assert_eq!(reused.slot(), stale.slot(), "slot is reused...");
    assert_eq!(
        sim.alloc.pending_work(stale, now, &mut out),
        Err(AllocError::UnknownRuntime(stale)),
        "...but the stale id does not reach the new tenant"
    );
    let never = RuntimeId::from_parts(99, 0);
    assert_eq!(
        sim.alloc.unregister(never, &mut out),
        Err(AllocError::UnknownRuntime(never))
    );
    assert!(matches!(
        sim.alloc
            .kthread_parked(app, KthreadIndex(7), now, &mut out),
        Err(AllocError::NoSuchKthread { .. })
    ));
    assert!(matches!(
        sim.alloc
            .kthread_parked(app, KthreadIndex(1), now, &mut out),
        Err(AllocError::KthreadNotActive { .. })
    ));
    assert!(matches!(
        sim.alloc
            .preemption_completed(app, KthreadIndex(0), now, &mut out),
        Err(AllocError::NoPreemptionPending { .. })
    ));
    assert!(matches!(
        sim.alloc
            .observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(1), queues: QueueSnapshot::default() }]),
        Err(AllocError::KthreadNotActive { .. })
    ));
    assert!(matches!(
        sim.alloc.core(CoreId(2)),
        Err(AllocError::NoSuchCore(_))
    ));

    let consumer_ahead = QueueSnapshot {
        run_queue: RingPositions::new(3, 4),
        ..QueueSnapshot::default()
    };
    assert!(matches!(
        sim.alloc
            .observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(0), queues: consumer_ahead }]),
        Err(AllocError::ImpossibleQueue {
            queue: QueueKind::RunQueue,
            fault: QueueFault::LongerThanCapacity { .. },
            ..
        })
    ));
    let fine = QueueSnapshot {
        ingress: RingPositions::new(10, 8),
        ..QueueSnapshot::default()
    };
    sim.alloc
        .observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(0), queues: fine }])
        .unwrap();
    assert_eq!(
        sim.alloc.observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(0), queues: fine }]),
        Err(AllocError::AlreadyObserved {
            runtime: app,
            kthread: KthreadIndex(0)
        })
    );
    let last = sim.alloc.now();
    assert_eq!(
        sim.alloc.run_pass(last - 1, &mut out),
        Err(AllocError::ClockWentBackwards {
            last,
            now: last - 1
        })
    );
    run_pass(&mut sim);
    let backwards = QueueSnapshot {
        ingress: RingPositions::new(10, 7),
        ..QueueSnapshot::default()
    };
    assert!(matches!(
        sim.alloc.observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(0), queues: backwards }]),
        Err(AllocError::ImpossibleQueue {
            queue: QueueKind::Ingress,
            fault: QueueFault::ConsumedWentBackwards { .. },
            ..
        })
    ));
    assert!(out.is_empty());
    sim.audit();
    assert_eq!(sim.view(app).running_cores, 1);
}

#[test]
fn impossible_registrations_are_refused() {
    let mut sim = Sim::flat(4);
    let cases = [
        (RuntimeSpec::new(0, 0), SpecError::ZeroMaxCores),
        (
            RuntimeSpec::new(3, 2),
            SpecError::GuaranteeAboveMax {
                guaranteed: 3,
                max: 2,
            },
        ),
        (
            RuntimeSpec::new(0, 4).with_kthreads(3),
            SpecError::FewerKthreadsThanMaxCores {
                kthreads: 3,
                max: 4,
            },
        ),
        (
            RuntimeSpec::new(0, 4).with_kthreads(2000),
            SpecError::TooManyKthreads {
                kthreads: 2000,
                limit: MAX_KTHREADS,
            },
        ),
        (
            RuntimeSpec::new(0, 4).with_queue_capacities(0, 8),
            SpecError::BadQueueCapacity {
                queue: QueueKind::RunQueue,
                capacity: 0,
            },
        ),
    ];
    for (spec, error) in cases {
        assert_eq!(sim.alloc.register(spec, 0), Err(AllocError::BadSpec(error)));
    }
    sim.register(3, 4);
    assert_eq!(
        sim.alloc.register(RuntimeSpec::new(2, 2), sim.now),
        Err(AllocError::BadSpec(SpecError::GuaranteesOversubscribed {
            requested: 2,
            already_guaranteed: 3,
            cores: 4
        }))
    );
    // A spec may ask for more cores than exist; it just never gets them.
    sim.register(1, 64);
}

#[test]
fn queue_capacity_bounds_observations() {
    let mut sim = Sim::flat(2);
    let now = sim.tick();
    let app = sim
        .alloc
        .register(RuntimeSpec::new(0, 1).with_queue_capacities(8, 16), now)
        .unwrap();
    only_wake(&sim.pending_work(app));
    let too_long = QueueSnapshot {
        run_queue: RingPositions::new(9, 0),
        ..QueueSnapshot::default()
    };
    assert!(matches!(
        sim.alloc.observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(0), queues: too_long }]),
        Err(AllocError::ImpossibleQueue {
            fault: QueueFault::LongerThanCapacity {
                length: 9,
                capacity: 8
            },
            ..
        })
    ));
    let full = QueueSnapshot {
        run_queue: RingPositions::new(8, 0),
        ingress: RingPositions::new(16, 0),
    };
    sim.alloc
        .observe_runtime(app, &[KthreadQueues { kthread: KthreadIndex(0), queues: full }])
        .unwrap();
}

#[test]
fn topologies_are_validated() {
    assert_eq!(
        Topology::without_hyperthreads(0),
        Err(TopologyError::NoCores)
    );
    assert_eq!(
        Topology::without_hyperthreads(MAX_CORES + 1),
        Err(TopologyError::TooManyCores {
            cores: MAX_CORES + 1
        })
    );
    assert!(Topology::without_hyperthreads(MAX_CORES).is_ok());
    let odd = Topology::hyperthread_pairs(5).unwrap();
    assert_eq!(odd.sibling(CoreId(3)), Some(CoreId(2)));
    assert_eq!(odd.sibling(CoreId(4)), None);
    assert_eq!(odd.sibling(CoreId(9)), None);
    assert_eq!(
        Topology::from_siblings(vec![Some(CoreId(1)), None]),
        Err(TopologyError::NotMutual {
            core: CoreId(0),
            sibling: CoreId(1)
        })
    );
    assert_eq!(
        Topology::from_siblings(vec![Some(CoreId(0))]),
        Err(TopologyError::OwnSibling { core: CoreId(0) })
    );
    assert_eq!(
        Topology::from_siblings(vec![Some(CoreId(5))]),
        Err(TopologyError::SiblingOutOfRange {
            core: CoreId(0),
            sibling: CoreId(5)
        })
    );
    // Linux numbers siblings N apart on many machines: (0, 2), (1, 3).
    let spread = Topology::from_siblings(vec![
        Some(CoreId(2)),
        Some(CoreId(3)),
        Some(CoreId(0)),
        Some(CoreId(1)),
    ])
    .unwrap();
    let mut sim = Sim::with(spread, ShenangoConfig::default());
    let app = sim.register(0, 2);
    grow(&mut sim, app, 2);
    assert_eq!(sim.cores_of(app), vec![0, 2]);
}

// ---- Cost ----

#[test]
fn steady_state_passes_do_not_grow_any_buffer() {
    let mut sim = Sim::paired(64);
    let runtimes: Vec<RuntimeId> = (0..16).map(|i| sim.register(i % 3, 8)).collect();
    for &runtime in &runtimes {
        grow(&mut sim, runtime, 2);
    }
    let capacities = |alloc: &Shenango| {
        let mut all = vec![
            alloc.handovers.capacity(),
            alloc.requesters.capacity(),
            alloc.victim_rank.capacity(),
            alloc.victim_rank_position.capacity(),
        ];
        for runtime in &alloc.runtimes {
            all.push(runtime.kthreads.capacity());
            all.push(runtime.cores_with_sibling.capacity());
            all.push(runtime.cores_without_sibling.capacity());
        }
        all
    };
    let before = capacities(&sim.alloc);
    for round in 0..400 {
        for (index, &runtime) in runtimes.iter().enumerate() {
            if (index + round) % 3 == 0 {
                sim.busy.insert(runtime);
            } else {
                sim.busy.remove(&runtime);
            }
        }
        for decision in sim.pass() {
            if let Decision::Preempt {
                victim_runtime,
                victim_kthread,
                ..
            } = decision
            {
                sim.preemption_completed(victim_runtime, victim_kthread);
            }
        }
        if round % 2 == 1 {
            // Runtimes park what they do not need.
            for &runtime in &runtimes {
                if !sim.busy.contains(&runtime) && sim.view(runtime).running_cores > 1 {
                    let (kthread, _) = sim.active_kthreads(runtime)[0];
                    if matches!(
                        sim.alloc.kthread(runtime, kthread).unwrap().place,
                        KthreadPlace::Active { .. }
                    ) && let Ok(CoreOccupancy::Running { .. }) = sim
                        .alloc
                        .core(
                            sim.alloc
                                .kthread(runtime, kthread)
                                .unwrap()
                                .last_core
                                .unwrap(),
                        )
                        .map(|view| view.occupancy)
                    {
                        sim.park(runtime, kthread);
                    }
                }
            }
        }
    }
    assert_eq!(capacities(&sim.alloc), before);
}

// ---- Work stranded by preemption, shared queues, spinning kthreads ----

#[test]
fn work_stranded_by_a_preemption_waits_for_an_idle_core_without_preempting() {
    let mut sim = Sim::flat(1);
    let latency_critical = sim.register(0, 1);
    let batch = sim.register(0, 1);
    grow(&mut sim, batch, 1);
    sim.outlast_share_quantum();
    let (victim, victim_kthread, core, _) = only_preempt(&sim.pending_work(latency_critical));
    assert_eq!(victim, batch);
    let (runtime, _, woken) = only_wake(&sim.preemption_completed(batch, victim_kthread));
    assert_eq!((runtime, woken), (latency_critical, core));

    // The batch runtime left work behind: it must not take the core straight back.
    let now = sim.tick();
    let mut out = Vec::new();
    sim.alloc.parked_with_work(batch, now, &mut out).unwrap();
    assert!(out.is_empty(), "stranded work preempted: {out:?}");
    assert!(sim.view(batch).waiting);
    // Passes keep it waiting, without preempting either, even once the quantum is over.
    sim.outlast_share_quantum();
    for _ in 0..3 {
        assert!(sim.pass().is_empty());
        assert!(sim.view(batch).waiting);
    }
    // When the latency-critical runtime parks, the batch runtime gets the core back.
    let (runtime, _, woken) = only_wake(&sim.park_core(CoreId(core)));
    assert_eq!((runtime, woken), (batch, core));
    assert!(!sim.view(batch).waiting);
    assert!(sim.pass().is_empty());
}

#[test]
fn stranded_work_takes_an_idle_core_at_once_and_is_ignored_while_holding_one() {
    let mut sim = Sim::flat(2);
    let app = sim.register(0, 2);
    let now = sim.tick();
    let mut out = Vec::new();
    sim.alloc.parked_with_work(app, now, &mut out).unwrap();
    only_wake(&out);
    out.clear();
    sim.alloc.parked_with_work(app, now, &mut out).unwrap();
    assert!(out.is_empty());
    assert!(!sim.view(app).waiting);
}

#[test]
fn reported_congestion_grants_a_core_in_that_pass() {
    let mut sim = Sim::flat(4);
    let app = sim.register(0, 4);
    grow(&mut sim, app, 1);
    let before = sim.view(app).stats.congestion_detections;
    sim.alloc.report_congestion(app).unwrap();
    // A second report in the same pass counts once.
    sim.alloc.report_congestion(app).unwrap();
    let decisions = sim.pass();
    assert_eq!(beneficiary(&decisions[0]), Some(app));
    assert_eq!(sim.view(app).stats.congestion_detections, before + 1);
    assert_eq!(sim.view(app).running_cores, 2);
    // Without a report (and with drained queues) nothing more is granted.
    assert!(sim.pass().is_empty());
}

#[test]
fn spinning_kthreads_get_their_guaranteed_cores_at_once() {
    for cores in [2, 4, 16, 64] {
        let mut sim = Sim::paired(cores);
        let burster = sim.register(0, cores as u16);
        grow(&mut sim, burster, cores);
        let spinner = sim.register(2, 2);
        let now = sim.tick();
        let mut out = Vec::new();
        // The first preemption promises a core; the next waits for the handover.
        let granted = sim
            .alloc
            .grant_guaranteed(spinner, 2, now, &mut out)
            .unwrap();
        assert_eq!(granted, 1, "{cores} cores");
        let (_, victim_kthread, _, taker) = only_preempt(&out);
        assert_eq!(taker, spinner);
        let woken = sim.preemption_completed(burster, victim_kthread);
        only_wake(&woken);
        let now = sim.tick();
        out.clear();
        let granted = sim
            .alloc
            .grant_guaranteed(spinner, 2, now, &mut out)
            .unwrap();
        assert_eq!(granted, 1);
        let (_, victim_kthread, _, _) = only_preempt(&out);
        only_wake(&sim.preemption_completed(burster, victim_kthread));
        assert_eq!(sim.view(spinner).running_cores, 2);
        // At its guarantee, asking again grants nothing.
        let now = sim.tick();
        out.clear();
        assert_eq!(
            sim.alloc
                .grant_guaranteed(spinner, 2, now, &mut out)
                .unwrap(),
            0
        );
        assert!(out.is_empty());
        sim.audit();
    }
}

#[test]
fn spinning_kthreads_take_idle_cores_without_preempting() {
    let mut sim = Sim::flat(4);
    let spinner = sim.register(3, 4);
    let now = sim.tick();
    let mut out = Vec::new();
    // Asking for more than the guarantee is capped at the guarantee.
    assert_eq!(
        sim.alloc
            .grant_guaranteed(spinner, 4, now, &mut out)
            .unwrap(),
        3
    );
    assert_eq!(out.len(), 3);
    assert!(out.iter().all(|d| matches!(d, Decision::Wake { .. })));
    sim.audit();
}

// ---- Share quantum ----

/// Carries out a pass's preemptions at once, as kthreads that park at their next chance do,
/// and returns the wakes that followed, with their time.
fn pass_and_hand_over(sim: &mut Sim) -> Vec<(u64, RuntimeId, u16)> {
    let mut woken = Vec::new();
    for decision in sim.pass() {
        if let Decision::Preempt {
            victim_runtime,
            victim_kthread,
            ..
        } = decision
        {
            let (runtime, _, core) = only_wake(&sim.preemption_completed(victim_runtime, victim_kthread));
            woken.push((sim.now, runtime, core));
        }
    }
    woken
}

#[test]
fn two_congested_runtimes_without_guarantees_take_turns_of_a_quantum() {
    let mut sim = Sim::flat(1);
    let quantum = sim.alloc.config().share_quantum;
    let first = sim.register(0, 1);
    let second = sim.register(0, 1);
    only_wake(&sim.pending_work(first));
    let mut turn_started = sim.now;
    let mut holder = first;
    // The other one has work too, but the core was granted just now.
    assert!(sim.pending_work(second).is_empty());
    assert!(sim.view(second).waiting);
    sim.busy.insert(first);
    sim.busy.insert(second);

    let mut turns = HashMap::from([(first, 1), (second, 0)]);
    while turns.values().sum::<u32>() < 20 {
        for (at, runtime, core) in pass_and_hand_over(&mut sim) {
            assert_eq!(core, 0);
            assert_ne!(runtime, holder, "a runtime took its own core");
            let turn = at - turn_started;
            // The preemption waits for the quantum, and comes at the first pass after it.
            assert!(turn >= quantum, "turn of {turn} ns, quantum {quantum} ns");
            assert!(turn <= quantum + 3 * 5_000, "turn of {turn} ns, quantum {quantum} ns");
            *turns.get_mut(&runtime).unwrap() += 1;
            // The preempted runtime still has work: it waits for its next turn.
            assert!(sim.pending_work(holder).is_empty());
            (holder, turn_started) = (runtime, at);
        }
    }
    assert_eq!((turns[&first], turns[&second]), (10, 10));
    let preemptions = sim.view(first).stats.preemptions_suffered
        + sim.view(second).stats.preemptions_suffered;
    assert_eq!(preemptions, 19);
}

#[test]
fn a_runtime_that_parks_hands_its_core_over_before_the_quantum_ends() {
    let mut sim = Sim::flat(1);
    let first = sim.register(0, 1);
    let second = sim.register(0, 1);
    only_wake(&sim.pending_work(first));
    assert!(sim.pending_work(second).is_empty());
    let (runtime, _, core) = only_wake(&sim.park_core(CoreId(0)));
    assert_eq!((runtime, core), (second, 0));
    assert_eq!(sim.view(first).stats.preemptions_suffered, 0);
}

#[test]
fn a_runtime_below_its_guarantee_does_not_wait_for_the_quantum() {
    let mut sim = Sim::flat(1);
    let batch = sim.register(0, 1);
    let other_batch = sim.register(0, 1);
    let latency_critical = sim.register(1, 1);
    only_wake(&sim.pending_work(batch));
    // Granted just now: a runtime of equal standing waits...
    assert!(sim.pending_work(other_batch).is_empty());
    // ...one below its guarantee does not.
    let (victim, kthread, core, taker) = only_preempt(&sim.pending_work(latency_critical));
    assert_eq!((victim, core, taker), (batch, 0, latency_critical));
    let (runtime, _, _) = only_wake(&sim.preemption_completed(batch, kthread));
    assert_eq!(runtime, latency_critical);
    // At its guarantee it is never preempted, however long it holds the core.
    sim.outlast_share_quantum();
    sim.busy.insert(other_batch);
    sim.busy.insert(batch);
    for _ in 0..3 {
        assert!(sim.pass().is_empty());
    }
}

#[test]
fn a_share_quantum_of_zero_lets_equals_take_a_core_at_once() {
    let config = ShenangoConfig {
        share_quantum: 0,
        ..ShenangoConfig::default()
    };
    let mut sim = Sim::with(Topology::without_hyperthreads(1).unwrap(), config);
    let first = sim.register(0, 1);
    let second = sim.register(0, 1);
    only_wake(&sim.pending_work(first));
    let (victim, _, _, taker) = only_preempt(&sim.pending_work(second));
    assert_eq!((victim, taker), (first, second));
}

#[test]
fn a_victim_core_held_for_a_quantum_is_taken_though_its_newer_siblings_are_not() {
    // Hyperthread pairs (0, 1) and (2, 3); the taker's own core is 0, so the sibling (1) would
    // be its first choice, but it was granted last.
    let mut sim = Sim::paired(4);
    let burster = sim.register(0, 4);
    let taker = sim.register(0, 2);
    only_wake(&sim.pending_work(taker));
    grow(&mut sim, burster, 3);
    assert_eq!(sim.cores_of(burster), vec![1, 2, 3]);
    sim.outlast_share_quantum();
    // The burster gives core 1 up and takes it back: that grant is younger than the quantum.
    assert!(sim.park_core(CoreId(1)).is_empty());
    assert_eq!(woken_core(sim.congest(burster)), 1);
    assert_eq!(sim.alloc.idle_core_count(), 0);
    let decision = sim.congest(taker);
    let Some(Decision::Preempt { core, victim_runtime, .. }) = decision else {
        panic!("expected a preemption, got {decision:?}");
    };
    assert_eq!(victim_runtime, burster);
    assert_ne!(core.0, 1, "took the core granted less than a quantum ago");
}

#[test]
fn sixteen_runtimes_without_guarantees_even_out_on_64_cores_one_quantum_at_a_time() {
    for mut sim in [Sim::flat(64), Sim::paired(64)] {
        let quantum = sim.alloc.config().share_quantum;
        let first = sim.register(0, 64);
        let mut granted_at = HashMap::new();
        let (_, _, core) = only_wake(&sim.pending_work(first));
        granted_at.insert(core, sim.now);
        for _ in 1..64 {
            let core = woken_core(sim.congest(first));
            granted_at.insert(core, sim.now);
        }
        let latecomers: Vec<RuntimeId> = (1..16).map(|_| sim.register(0, 64)).collect();
        // Every latecomer arrives with work while the first runtime holds every core.
        for &runtime in &latecomers {
            assert!(sim.pending_work(runtime).is_empty());
        }
        sim.busy.insert(first);
        sim.busy.extend(latecomers.iter().copied());

        let mut handovers = 0;
        for _ in 0..2_000 {
            let taken_at = sim.now + 5_000;
            for decision in sim.pass() {
                let Decision::Preempt {
                    victim_runtime,
                    victim_kthread,
                    core,
                    ..
                } = decision
                else {
                    panic!("expected only preemptions, got {decision:?}");
                };
                let held = taken_at - granted_at[&core.0];
                assert!(held >= quantum, "core {} taken after {held} ns", core.0);
                let (_, _, woken) =
                    only_wake(&sim.preemption_completed(victim_runtime, victim_kthread));
                granted_at.insert(woken, sim.now);
                handovers += 1;
            }
        }
        // Each takes its even share, and no core moves more than once to get there.
        for runtime in latecomers.iter().copied().chain([first]) {
            assert_eq!(sim.view(runtime).running_cores, 4, "{runtime}");
        }
        assert_eq!(handovers, 60);
    }
}
