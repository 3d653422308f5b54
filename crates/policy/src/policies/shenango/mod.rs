//! The Shenango policy: Algorithms 1 and 2 of Shenango (NSDI '19) §4.1, reallocating cores
//! every few microseconds on queueing delay.
//!
//! The daemon sweeps each runtime's active kthreads' queue counters into
//! [`Policy::observe_runtime`], calls [`Policy::run_pass`] every interval, relays the runtimes'
//! park reports, and carries out the decisions (pin and wake, signal).
//!
//! * How many cores (Algorithm 1): a runtime is congested when an item that was queued at the
//!   previous pass, on any of its kthreads' run queues or ingress rings, is queued still. A
//!   congested runtime gets one more core per pass, up to its maximum. Runtimes give cores
//!   back by parking.
//! * Which core (Algorithm 2): the sibling of a core it holds, else the core it gave up last,
//!   else an idle core (one whose whole physical core is free first), else a core taken from a
//!   runtime above its guarantee. A taken core changes hands only when its kthread reports
//!   that it parked.
//! * Which kthread: the one that last ran on that core if it is parked, else the one parked
//!   longest.
//!
//! Guarantees are never oversubscribed and never preempted. Everything a pass touches is
//! indexed by id in preallocated tables, and nothing allocates once runtimes are registered.
//! A pass costs O(1) per observed kthread, plus O(runtimes) to collect the runtimes that asked
//! for a core, plus, per grant, the requester's own cores and N/64 bitmap words (and, for a
//! requester that must wait out the share quantum, the bursting runtimes' cores up to the first
//! one old enough: O(N)); the only superlinear steps are in-place sorts of runtimes (those
//! asking, and, once per call that must preempt, those bursting): O(R log R).
//!
//! Times are whatever monotonic unit the caller uses (nanoseconds in the daemon); they only
//! have to never go back.
//!
//! # Where this departs from the paper
//!
//! * The paper takes a core from a *random* bursting application. Here the victim is the most
//!   bursting runtime (ties by slot), so runs are reproducible and cores come from whoever has
//!   the most to spare.
//! * [`BurstSharing::Balanced`] (the default) lets a runtime that is itself at or above its
//!   guarantee take a core only from a runtime that will still burst at least as much. With the
//!   paper's rule ([`BurstSharing::AnyBursting`]) two congested bursting runtimes preempt each
//!   other every pass, each preemption costing both a context switch. Runtimes below their
//!   guarantee, and runtimes holding no core at all, may take from any bursting runtime.
//! * A runtime at or above its guarantee (a runtime with no guarantee and no core included)
//!   takes a core only once the runtime holding it has held it for a share quantum
//!   ([`ShenangoConfig::share_quantum`], 1 ms by default). Without it, two congested runtimes
//!   with no guarantee sharing one core take it from each other at every pass (each holding no
//!   core when it asks), every turn too short to do much but switch. With it they take turns of
//!   at least a quantum, and neither starves; a runtime that parks still hands its core over at
//!   once. A runtime below its guarantee preempts at once, so latency-critical runtimes need a
//!   guarantee.
//! * Runtimes are served neediest first (furthest below their guarantee, then least
//!   bursting), ties rotating every pass, where the paper walks applications in a fixed order.
//! * "Any idle core" prefers one whose sibling is idle too, keeping half-busy physical cores
//!   for the runtime on the other half (which step 1 will ask for).
//! * A runtime has at most one promised (preempted, not yet handed over) core at a time, so a
//!   congestion signal that persists while the victim winds down does not pile up preemptions.
//! * A core freed by a park goes straight to a runtime that asked for a core and got none
//!   (congested, or with pending work and no core) instead of idling until the next pass.
//! * Preemptions that are not honoured in time are reported ([`Decision::PreemptionOverdue`]),
//!   as DESIGN §4 asks; the paper does not say.
//! * A comparison always spans exactly one pass: a kthread not observed in the previous pass
//!   (just woken, or skipped) cannot be found congested.

mod audit;
mod cores;
mod records;
mod select;
mod transitions;

#[cfg(test)]
mod tests;

use super::{OptionError, PolicyEntry, PolicySettings};
use crate::queues::{self, KthreadQueues, QueueKind};
use crate::spec::check_cores_fit;
use crate::{
    AllocError, CoreId, CoreOccupancy, CoreStats, CoreView, Decision, KthreadIndex, KthreadPlace,
    KthreadView, MAX_CORES, MAX_RUNTIMES, Policy, RuntimeId, RuntimeSpec, RuntimeView,
    Topology,
};
use cores::{Core, CoreSet, CoreState};
use records::RuntimeRecord;

/// Registered as `shenango`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "shenango",
    summary: "Shenango's congestion-driven allocation, one core per congested runtime per pass",
    options: &[(
        "burst_sharing",
        "which bursting runtimes a runtime at or above its guarantee may take a core from: \
         balanced (only one left bursting at least as much; the default) or any-bursting (the paper's)",
    )],
    build: |topology, settings: &PolicySettings| {
        let burst_sharing = match settings.option("burst_sharing").map(str::trim) {
            None | Some("balanced") => BurstSharing::Balanced,
            Some("any-bursting") => BurstSharing::AnyBursting,
            Some(other) => {
                return Err(OptionError {
                    key: "burst_sharing".into(),
                    value: other.into(),
                    expected: "balanced or any-bursting".into(),
                });
            }
        };
        Ok(Box::new(Shenango::new(
            topology,
            ShenangoConfig {
                burst_sharing,
                preemption_timeout: settings.preemption_timeout,
                share_quantum: settings.share_quantum,
            },
        )))
    },
};

/// Which bursting runtimes a runtime that is itself at or above its guarantee may take a core
/// from, when no core is idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BurstSharing {
    /// Only from a runtime that would still burst at least as much as the taker after the
    /// transfer. Two congested bursting runtimes then settle on an even split of the burstable
    /// cores instead of preempting each other every pass. A runtime below its guarantee, or
    /// holding no core at all, may still take from any bursting runtime.
    #[default]
    Balanced,
    /// From any bursting runtime, as in the paper.
    AnyBursting,
}

/// [`ShenangoConfig::share_quantum`] by default: 1 ms in nanoseconds. A preemption costs the
/// two runtimes about 50 µs of hand-over (signal, park, wake-up on the core) and a cold cache,
/// so a turn of 1 ms keeps that overhead near 5% when two busy runtimes share a core, while a
/// runtime with no core waits at most about a millisecond, no longer than the time slices of
/// Linux's fair scheduler. Runtimes that need microseconds get a guarantee, which is never
/// subject to the quantum.
pub const DEFAULT_SHARE_QUANTUM: u64 = 1_000_000;

/// Tunables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShenangoConfig {
    pub burst_sharing: BurstSharing,
    /// How long (in the caller's time unit) a preempted kthread may keep its core before
    /// [`Decision::PreemptionOverdue`]; `None` never reports.
    pub preemption_timeout: Option<u64>,
    /// How long (in the caller's time unit) a runtime keeps a core it was granted before a
    /// runtime at or above its guarantee may take it (a time slice among runtimes of equal
    /// standing); 0 lets them take it at once. A runtime below its guarantee never waits.
    pub share_quantum: u64,
}

impl Default for ShenangoConfig {
    fn default() -> Self {
        Self {
            burst_sharing: BurstSharing::Balanced,
            // 1 ms in nanoseconds: two hundred allocation intervals.
            preemption_timeout: Some(1_000_000),
            share_quantum: DEFAULT_SHARE_QUANTUM,
        }
    }
}

/// The Shenango policy. See the module documentation.
#[derive(Clone, Debug)]
pub struct Shenango {
    config: ShenangoConfig,
    topology: Topology,
    cores: Vec<Core>,
    idle: CoreSet,
    /// Idle cores whose sibling is idle too (or that have none): granting one of these puts the
    /// runtime on a physical core it shares with nobody.
    idle_whole: CoreSet,
    idle_count: usize,
    /// Cores being handed over, for the overdue check.
    handovers: Vec<CoreId>,
    runtimes: Vec<RuntimeRecord>,
    guaranteed_total: u32,
    waiting_count: u32,
    /// The pass that observations currently feed, counted from 1 so that 0 means "never".
    pass: u64,
    now: u64,
    /// Reused by every grant round: (priority, slot) of the runtimes asking for a core.
    requesters: Vec<(u64, u32)>,
    /// Bursting runtimes, most bursting first; built on the first preemption of a call and kept
    /// ordered as victims lose cores, so picking a victim stays O(log runtimes).
    victim_rank: Vec<u32>,
    victim_rank_position: Vec<u32>,
    victim_rank_valid: bool,
}

impl Shenango {
    /// All cores start idle.
    pub fn new(topology: Topology, config: ShenangoConfig) -> Self {
        let core_count = topology.core_count();
        let cores = topology
            .cores()
            .map(|core| Core {
                state: CoreState::Idle,
                sibling: topology.sibling(core),
                list_position: 0,
                last_user: None,
                held_since: 0,
                stats: CoreStats::default(),
            })
            .collect();
        let mut allocator = Self {
            config,
            cores,
            idle: CoreSet::new(core_count),
            idle_whole: CoreSet::new(core_count),
            idle_count: 0,
            handovers: Vec::with_capacity(core_count),
            runtimes: Vec::new(),
            guaranteed_total: 0,
            waiting_count: 0,
            pass: 1,
            now: 0,
            requesters: Vec::new(),
            victim_rank: Vec::new(),
            victim_rank_position: Vec::new(),
            victim_rank_valid: false,
            topology,
        };
        for index in 0..core_count {
            allocator.mark_idle(CoreId(index as u16));
        }
        allocator
    }
    /// A runtime with no core has work: a core at once if one can be had (`only_idle`: without
    /// preempting), else the next one freed. Remembered until it is granted one, since with no
    /// kthread running there is nothing to observe.
    fn wants_first_core(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        only_idle: bool,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        self.now = now;
        if self.runtimes[slot].committed() > 0 {
            return Ok(());
        }
        self.victim_rank_valid = false;
        if only_idle {
            self.runtimes[slot].has_stranded_work = true;
        } else {
            self.runtimes[slot].has_pending_work = true;
        }
        if !self.grant_one_core(slot, only_idle, out) {
            self.set_waiting(slot, true);
        }
        Ok(())
    }
    pub fn config(&self) -> &ShenangoConfig {
        &self.config
    }
    /// Registered runtimes, by slot.
    pub fn runtime_ids(&self) -> impl Iterator<Item = RuntimeId> + '_ {
        self.runtimes
            .iter()
            .filter(|runtime| runtime.live)
            .map(|runtime| runtime.id)
    }
    /// The runtime's parked kthreads, longest-parked first.
    pub fn parked_kthreads(
        &self,
        runtime: RuntimeId,
    ) -> Result<impl Iterator<Item = KthreadIndex> + '_, AllocError> {
        let slot = self.slot_of(runtime)?;
        Ok(self.runtimes[slot].parked_in_order())
    }
    fn check_clock(&self, now: u64) -> Result<(), AllocError> {
        if now < self.now {
            return Err(AllocError::ClockWentBackwards {
                last: self.now,
                now,
            });
        }
        Ok(())
    }
    fn slot_of(&self, runtime: RuntimeId) -> Result<usize, AllocError> {
        match self.runtimes.get(runtime.slot_index()) {
            Some(entry) if entry.live && entry.id == runtime => Ok(runtime.slot_index()),
            _ => Err(AllocError::UnknownRuntime(runtime)),
        }
    }
    fn check_kthread(&self, slot: usize, kthread: KthreadIndex) -> Result<(), AllocError> {
        let entry = &self.runtimes[slot];
        if kthread.index() >= entry.kthreads.len() {
            return Err(AllocError::NoSuchKthread {
                runtime: entry.id,
                kthread,
                kthreads: entry.spec.kthreads,
            });
        }
        Ok(())
    }
    fn active_core_of(&self, slot: usize, kthread: KthreadIndex) -> Result<CoreId, AllocError> {
        self.check_kthread(slot, kthread)?;
        match self.runtimes[slot].kthreads[kthread.index()].place {
            KthreadPlace::Active { core } => Ok(core),
            KthreadPlace::Parked { .. } => Err(AllocError::KthreadNotActive {
                runtime: self.runtimes[slot].id,
                kthread,
            }),
        }
    }
    /// Which slot goes first among equally needy runtimes; it moves every pass so that no slot
    /// is always served first when cores run short.
    fn grant_rotation(&self) -> usize {
        (self.pass % self.runtimes.len().max(1) as u64) as usize
    }
    /// Sort key for grant rounds: furthest below guarantee first, then least bursting, then
    /// the slot's turn in this pass's rotation.
    fn grant_priority(&self, slot: usize, rotation: usize) -> u64 {
        let runtime = &self.runtimes[slot];
        let surplus = i64::from(runtime.committed()) - i64::from(runtime.spec.guaranteed_cores);
        // Surplus lies within ±MAX_CORES, so the offset keeps it positive.
        let need_rank = (surplus + MAX_CORES as i64) as u64;
        let turn = if slot >= rotation {
            slot - rotation
        } else {
            slot + self.runtimes.len() - rotation
        };
        (need_rank << 32) | turn as u64
    }
}

impl Policy for Shenango {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    /// Registers a runtime with all its kthreads parked. It gets a core when it shows demand
    /// ([`Policy::pending_work`] or congestion).
    fn register(&mut self, spec: RuntimeSpec, now: u64) -> Result<RuntimeId, AllocError> {
        self.check_clock(now)?;
        spec.validate()?;
        let core_count = self.topology.core_count();
        check_cores_fit(spec.guaranteed_cores, self.guaranteed_total, core_count)?;
        let slot = match self.runtimes.iter().position(|runtime| !runtime.live) {
            Some(slot) => slot,
            None if self.runtimes.len() < MAX_RUNTIMES => {
                let slot = self.runtimes.len();
                self.runtimes
                    .push(RuntimeRecord::vacant(RuntimeId::from_parts(slot as u32, 0)));
                // Grown with the slot table so that grant rounds never reallocate.
                self.requesters
                    .reserve(self.runtimes.len() - self.requesters.len());
                self.victim_rank
                    .reserve(self.runtimes.len() - self.victim_rank.len());
                self.victim_rank_position.push(u32::MAX);
                slot
            }
            None => return Err(AllocError::TooManyRuntimes),
        };
        self.now = now;
        let id = self.runtimes[slot].id;
        self.runtimes[slot].occupy(id, spec, now, core_count);
        self.guaranteed_total += u32::from(spec.guaranteed_cores);
        self.victim_rank_valid = false;
        Ok(id)
    }
    /// Removes a runtime (its connection closed). Every core it occupied is reclaimed: handed
    /// to the runtime it was promised to, or to a waiting runtime, or left idle. The daemon must
    /// already have stopped its kthreads.
    fn unregister(
        &mut self,
        runtime: RuntimeId,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        self.victim_rank_valid = false;
        self.reclaim_everything_of(slot, out);
        self.serve_waiters(out);
        Ok(())
    }
    /// Records the counters and applies Algorithm 1's test against the previous pass's: the
    /// runtime is congested if, on any kthread observed in both passes, an item queued then is
    /// queued still. One call per runtime so that the runtime's slot is looked up once per pass,
    /// not once per kthread.
    ///
    /// Counters that cannot be true (see [`QueueFault`](crate::QueueFault)) are refused with
    /// [`AllocError::ImpossibleQueue`]; then nothing of the sweep is recorded and the rest of the
    /// pass is unaffected.
    fn observe_runtime(
        &mut self,
        runtime: RuntimeId,
        kthreads: &[KthreadQueues],
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let record = &mut self.runtimes[slot];
        let mut congested = false;
        // Ascending order is what makes "at most once per pass" checkable without writing.
        let mut lowest_allowed = 0;
        for &KthreadQueues { kthread, queues } in kthreads {
            let Some(entry) = record.kthreads.get(kthread.index()) else {
                return Err(AllocError::NoSuchKthread {
                    runtime,
                    kthread,
                    kthreads: record.spec.kthreads,
                });
            };
            if kthread.index() < lowest_allowed {
                return Err(AllocError::ObservationsOutOfOrder { runtime, kthread });
            }
            lowest_allowed = kthread.index() + 1;
            if !matches!(entry.place, KthreadPlace::Active { .. }) {
                return Err(AllocError::KthreadNotActive { runtime, kthread });
            }
            if entry.observed_in_pass == pass {
                return Err(AllocError::AlreadyObserved { runtime, kthread });
            }
            let observed_last_pass = entry.observed_in_pass.wrapping_add(1) == pass;
            let previous = observed_last_pass.then_some(entry.queues_last_seen);
            let impossible = |queue, fault| AllocError::ImpossibleQueue {
                runtime,
                kthread,
                queue,
                fault,
            };
            queues::check_counters(
                previous.map(|seen| seen.run_queue),
                queues.run_queue,
                record.spec.run_queue_capacity,
            )
            .map_err(|fault| impossible(QueueKind::RunQueue, fault))?;
            queues::check_counters(
                previous.map(|seen| seen.ingress),
                queues.ingress,
                record.spec.ingress_capacity,
            )
            .map_err(|fault| impossible(QueueKind::Ingress, fault))?;
            congested |= previous.is_some_and(|seen| {
                queues.run_queue.has_waited_since(seen.run_queue)
                    || queues.ingress.has_waited_since(seen.ingress)
            });
        }
        for &KthreadQueues { kthread, queues } in kthreads {
            let entry = &mut record.kthreads[kthread.index()];
            entry.queues_last_seen = queues;
            entry.observed_in_pass = pass;
        }
        if congested && record.congested_in_pass != pass {
            record.congested_in_pass = pass;
            record.stats.congestion_detections += 1;
        }
        Ok(())
    }

    /// Algorithm 1's finding for a queue the runtime shares among its kthreads (work handed in
    /// from outside its kthreads): an item has waited there since the previous pass. Counts as
    /// congestion in the current pass.
    fn report_congestion(&mut self, runtime: RuntimeId) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let entry = &mut self.runtimes[slot];
        if entry.congested_in_pass != pass {
            entry.congested_in_pass = pass;
            entry.stats.congestion_detections += 1;
        }
        Ok(())
    }
    /// Ends a pass: grants one core to each runtime found congested since the previous pass or
    /// waiting with pending work, neediest first (furthest below its guarantee, then least
    /// bursting). Also reports preemptions that are overdue.
    fn run_pass(&mut self, now: u64, out: &mut Vec<Decision>) -> Result<(), AllocError> {
        self.check_clock(now)?;
        self.now = now;
        self.victim_rank_valid = false;

        let pass = self.pass;
        let rotation = self.grant_rotation();
        self.requesters.clear();
        for slot in 0..self.runtimes.len() {
            let runtime = &self.runtimes[slot];
            let has_pending_work = runtime.has_pending_work;
            // Waiting is re-derived every pass: congestion that went away is no claim on the
            // next freed core. Work stranded by a preemption is, until a core frees up.
            let waiting = has_pending_work || runtime.has_stranded_work;
            if runtime.waiting != waiting {
                self.set_waiting(slot, waiting);
            }
            let runtime = &self.runtimes[slot];
            let asks = runtime.congested_in_pass == pass || has_pending_work;
            if asks && runtime.live && runtime.can_grow() {
                let priority = self.grant_priority(slot, rotation);
                self.requesters.push((priority, slot as u32));
            }
        }
        if self.requesters.len() > 1 {
            self.requesters.sort_unstable();
        }
        for position in 0..self.requesters.len() {
            let slot = self.requesters[position].1 as usize;
            if !self.grant_one_core(slot, false, out) {
                self.set_waiting(slot, true);
            }
        }

        self.report_overdue_handovers(out);
        self.pass += 1;
        Ok(())
    }
    /// A kthread parked: on its own because it found no work, or because it was preempted.
    /// Its core goes to the runtime it was promised to, else to a waiting runtime, else idle.
    fn kthread_parked(
        &mut self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        let core = self.active_core_of(slot, kthread)?;
        self.now = now;
        self.victim_rank_valid = false;
        match self.cores[core.index()].state {
            CoreState::HandingOver { .. } => self.complete_handover(core, out),
            // An active kthread's core is never idle.
            CoreState::Idle => {}
            CoreState::Running { .. } => {
                self.park_from_running_core(slot, kthread, core);
                // It ran out of work, so whatever congestion it showed is over.
                self.set_waiting(slot, false);
                self.mark_idle(core);
                self.serve_waiters(out);
            }
        }
        Ok(())
    }
    /// A preempted kthread reports that it parked; its core is handed over. Unlike
    /// [`Policy::kthread_parked`], refuses a kthread that was not being preempted.
    fn preemption_completed(
        &mut self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        let core = self.active_core_of(slot, kthread)?;
        let CoreState::HandingOver { .. } = self.cores[core.index()].state else {
            return Err(AllocError::NoPreemptionPending { runtime, kthread });
        };
        self.now = now;
        self.victim_rank_valid = false;
        self.complete_handover(core, out);
        Ok(())
    }
    /// The runtime has work (a packet, an expired timer) and possibly no core to run it: if it
    /// holds none, it is granted one at once, preempting a bursting runtime if no core is idle.
    /// If none can be had, it gets the next one freed. A runtime that holds a core will find
    /// the work itself, so then this does nothing.
    fn pending_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.wants_first_core(runtime, now, false, out)
    }
    /// A preempted kthread parked with runnable work left on its queue. The runtime waits for
    /// the next idle core without taking one from anybody: taking the core straight back
    /// would undo the preemption, and the runtime that preempted it would take it back again.
    /// A runtime that still holds a core finds the work itself, so then this does nothing.
    fn parked_with_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.wants_first_core(runtime, now, true, out)
    }
    /// Grants cores until the runtime holds or is promised `cores` (capped at its guarantee),
    /// preempting bursting runtimes if it must. For runtimes whose spinning kthreads hold
    /// their guaranteed cores from the start. Returns how many were granted or promised.
    fn grant_guaranteed(
        &mut self,
        runtime: RuntimeId,
        cores: u16,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<u32, AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        self.now = now;
        let target = u32::from(cores.min(self.runtimes[slot].spec.guaranteed_cores));
        let mut granted = 0;
        while self.runtimes[slot].committed() < target {
            self.victim_rank_valid = false;
            // One promised core at a time (see `can_grow`); the next waits for the handover.
            if !self.grant_one_core(slot, false, out) || self.runtimes[slot].cores_reserved > 0 {
                granted += u32::from(self.runtimes[slot].cores_reserved > 0);
                break;
            }
            granted += 1;
        }
        Ok(granted)
    }
    fn topology(&self) -> &Topology {
        &self.topology
    }
    /// The latest time the allocator was given.
    fn now(&self) -> u64 {
        self.now
    }
    /// Passes completed.
    fn passes_run(&self) -> u64 {
        self.pass - 1
    }
    fn idle_core_count(&self) -> usize {
        self.idle_count
    }
    fn core(&self, core: CoreId) -> Result<CoreView, AllocError> {
        let entry = self
            .cores
            .get(core.index())
            .ok_or(AllocError::NoSuchCore(core))?;
        let occupancy = match entry.state {
            CoreState::Idle => CoreOccupancy::Idle,
            CoreState::Running { runtime, kthread } => CoreOccupancy::Running {
                runtime: self.runtimes[runtime as usize].id,
                kthread,
            },
            CoreState::HandingOver {
                runtime,
                kthread,
                to,
                since,
                ..
            } => CoreOccupancy::HandingOver {
                runtime: self.runtimes[runtime as usize].id,
                kthread,
                to: to.map(|slot| self.runtimes[slot as usize].id),
                since,
            },
        };
        Ok(CoreView {
            occupancy,
            sibling: entry.sibling,
            last_user: entry.last_user,
            stats: entry.stats,
        })
    }
    fn runtime(&self, runtime: RuntimeId) -> Result<RuntimeView, AllocError> {
        let entry = &self.runtimes[self.slot_of(runtime)?];
        Ok(RuntimeView {
            id: entry.id,
            spec: entry.spec,
            running_cores: entry.running(),
            cores_handing_over: entry.cores_handing_over,
            cores_reserved: entry.cores_reserved,
            most_recent_core: entry.most_recent_core,
            waiting: entry.waiting,
            has_pending_work: entry.has_pending_work,
            stats: entry.stats,
        })
    }
    fn kthread(
        &self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
    ) -> Result<KthreadView, AllocError> {
        let slot = self.slot_of(runtime)?;
        self.check_kthread(slot, kthread)?;
        let entry = &self.runtimes[slot].kthreads[kthread.index()];
        Ok(KthreadView {
            place: entry.place,
            last_core: entry.last_core,
        })
    }

    fn audit(&self) -> Result<(), String> {
        self.audit_tables()
    }
}
