//! The Arachne policy: Arachne's core estimator (Qin, "Arachne: Core-Aware Thread Management",
//! Stanford PhD thesis, §6.3.2) deciding every runtime's core count on a millisecond scale, and
//! a core arbiter that grants and takes back cores to match.
//!
//! Every [`ArachneConfig::interval`] (judged by the `now` of [`Policy::run_pass`]) the estimator
//! looks at what it averaged over the interval for each runtime (`estimator.rs` says how the
//! figures are derived from the queue counters iokerneld sweeps):
//!
//! * **Scale up** by one core when the average load factor over the runtime's cores reaches
//!   [`ArachneConfig::scale_up_load_factor`]; the runtime's total utilization at that moment is
//!   recorded for its current core count.
//! * **Scale down** by one core when total utilization falls below the one recorded at the last
//!   scale-up to the current count, less [`ArachneConfig::scale_down_hysteresis`]. Never below
//!   one core, nor below what [`Policy::grant_guaranteed`] asked for: Arachne always leaves an
//!   application at least one core.
//!
//! Cores are *owned*: a core granted to a runtime stays its own, whether a kthread of it runs
//! there or has parked, until the estimator scales the runtime down or another runtime takes
//! it. Owned idle cores are where the runtime's kthreads are woken when work waits (an item on
//! an active kthread's queues at a pass, [`Policy::report_congestion`], or
//! [`Policy::pending_work`] while none of its kthreads runs): in Arachne an owned core's
//! dispatcher picks up new threads at once, and here a parked kthread on it is woken within a
//! pass. No other runtime is woken on an owned core.
//!
//! Which core a scale-up gets: an unowned idle core (the sibling of a core the runtime owns,
//! else the one it gave up last, else the lowest-numbered); if none, one taken from a runtime
//! that owns more than its guarantee: an idle core of it if it has one (no preemption needed),
//! else a running one ([`Decision::Preempt`]; the core is the taker's once its kthread parks).
//! Victims are runtimes waiting to give a core back first, then the one with the most cores
//! beyond its guarantee. A scale-down gives back an idle owned core at once, else the next core
//! one of its kthreads parks on.
//!
//! A runtime with no core and work ([`Policy::pending_work`], [`Policy::parked_with_work`], or
//! congestion on a shared queue) gets its first core at once if one is unowned and idle, else
//! at the next decision, when it may take one from a runtime above its guarantee (a runtime
//! with no core may take even a runtime's last core beyond its guarantee, so that it is never
//! starved: runtimes with no guarantee then take turns of an interval). A core freed
//! between decisions (a scale-down's core parking, an unregistered runtime's) goes at once to
//! a runtime waiting for one.
//!
//! # Where this departs from Arachne
//!
//! * The interval defaults to 50 ms ([`DEFAULT_INTERVAL`]), the reallocation interval the
//!   Shenango paper (NSDI '19, §1) measured for Arachne; the thesis's estimator averages over
//!   5 ms by default. Both are one setting of [`ArachneConfig::interval`].
//! * Arachne's runtime asks for cores and the arbiter grants them; here one policy does both,
//!   from what iokerneld observes, so the load factor and utilization are estimated from queue
//!   counters and parks instead of the dispatcher's cycle counts.
//! * Guarantees (Corral's, not Arachne's) are honoured as every policy must: a runtime's cores
//!   up to its guarantee are never taken. Between runtimes at or above their guarantees, a core
//!   is taken only from a runtime that will still own at least as many cores beyond its
//!   guarantee as the taker afterwards, and only once the kthread on it has run for
//!   [`ArachneConfig::share_quantum`]; otherwise two runtimes both scaling up would trade a core
//!   at every decision.

mod audit;
mod cores;
mod estimator;

#[cfg(test)]
mod tests;

use super::{PolicyEntry, PolicySettings};
use crate::kthreads::{KthreadRecord, kthread_record, record_sweep};
use crate::spec::check_cores_fit;
use crate::{
    AllocError, CoreId, CoreOccupancy, CoreStats, CoreView, Decision, KthreadIndex, KthreadPlace,
    KthreadQueues, KthreadView, Policy, RuntimeId, RuntimeSpec, RuntimeStats,
    RuntimeView, Topology,
};
use estimator::{Estimator, Thresholds, Verdict};

/// Registered as `arachne`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "arachne",
    summary: "Arachne's core estimator: a core more or less per runtime every 50 ms, on load factor and utilization",
    options: &[
        (
            "scale_up_load_factor",
            "runnable items per owned core, averaged over an interval, that adds a core; default 1.5",
        ),
        (
            "scale_down_hysteresis",
            "cores of utilization below the last scale-up's that take one away; default 0.09",
        ),
        (
            "interval_us",
            "microseconds the estimator averages over before each decision; default 50000",
        ),
    ],
    build: |topology, settings: &PolicySettings| {
        let defaults = ArachneConfig::default();
        let config = ArachneConfig {
            scale_up_load_factor: settings
                .parsed("scale_up_load_factor", "a number above 0", |x: &f64| {
                    x.is_finite() && *x > 0.0
                })?
                .unwrap_or(defaults.scale_up_load_factor),
            scale_down_hysteresis: settings
                .parsed(
                    "scale_down_hysteresis",
                    "a number of cores, 0 or more",
                    |x: &f64| x.is_finite() && *x >= 0.0,
                )?
                .unwrap_or(defaults.scale_down_hysteresis),
            interval: settings
                .parsed(
                    "interval_us",
                    "microseconds from 1 to 10000000",
                    |x: &u64| (1..=10_000_000).contains(x),
                )?
                .map_or(defaults.interval, |us| us * 1000),
            preemption_timeout: settings.preemption_timeout,
            share_quantum: settings.share_quantum,
        };
        Ok(Box::new(Arachne::new(topology, config)))
    },
};

/// [`ArachneConfig::interval`] by default: 50 ms in nanoseconds.
pub const DEFAULT_INTERVAL: u64 = 50_000_000;

/// Tunables. Times are in the caller's unit (nanoseconds in the daemon).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArachneConfig {
    /// Scale up when the average load factor (runnable items per owned core) over an interval
    /// reaches this. 1.5 by default, the thesis's default.
    pub scale_up_load_factor: f64,
    /// Scale down when total utilization (in cores) is below the one recorded at the last
    /// scale-up by more than this. 0.09 (9% of a core) by default, the thesis's default.
    pub scale_down_hysteresis: f64,
    /// How long the estimator averages before each decision, and so how often it decides.
    /// [`DEFAULT_INTERVAL`] (50 ms) by default, the interval the Shenango paper reports for
    /// Arachne; the thesis's estimator defaults to 5 ms.
    pub interval: u64,
    /// How long a preempted kthread may keep its core before [`Decision::PreemptionOverdue`];
    /// `None` never reports. 1 ms by default, as the Shenango policy's.
    pub preemption_timeout: Option<u64>,
    /// How long a kthread runs on a core before a runtime at or above its guarantee may take
    /// the core; 0: at once. A runtime below its guarantee never waits. 1 ms by default, as
    /// the Shenango policy's; the daemon passes its own setting.
    pub share_quantum: u64,
}

impl Default for ArachneConfig {
    fn default() -> Self {
        Self {
            scale_up_load_factor: 1.5,
            scale_down_hysteresis: 0.09,
            interval: DEFAULT_INTERVAL,
            preemption_timeout: Some(1_000_000),
            share_quantum: 1_000_000,
        }
    }
}

#[derive(Clone, Debug)]
struct Tenant {
    id: RuntimeId,
    live: bool,
    spec: RuntimeSpec,
    kthreads: Vec<KthreadRecord>,
    estimator: Estimator,
    /// Cores it owns: its idle ones, its running ones not being taken, and those being handed
    /// over to it.
    owned: u32,
    /// Of `owned`, those with no kthread on them.
    owned_idle: u32,
    /// Cores its kthreads are on, including those being taken from it.
    running: u32,
    /// Of `running`, those being taken from it.
    handing_over: u32,
    /// Of `owned`, those another runtime's kthread still occupies.
    reserved: u32,
    /// Scale-downs not carried out yet: the next cores its kthreads park on are given back.
    releases_pending: u32,
    /// Cores [`Policy::grant_guaranteed`] asked for: never scaled below.
    floor: u32,
    /// It has work and no kthread running it; cleared when one is woken.
    wants_core: bool,
    /// It asked for a core (its first, or a scale-up) and none could be had.
    waiting: bool,
    /// Items seen waiting on its kthreads' queues in the current pass.
    waiting_items: u64,
    congested_in_pass: u64,
    most_recent_core: Option<CoreId>,
    stats: RuntimeStats,
}

impl Tenant {
    /// Cores it owns or still occupies: bounded by its maximum, so it never has more kthreads
    /// awake than it asked for, even while a core of its is being taken.
    fn claimed(&self) -> u32 {
        self.owned + self.handing_over
    }

    fn can_grow(&self) -> bool {
        self.claimed() < u32::from(self.spec.max_cores)
    }

    /// Its core count as the estimator sees it: scale-downs not carried out yet are done.
    fn target(&self) -> u32 {
        self.owned - self.releases_pending
    }

    /// Cores it owns beyond its guarantee: only these may be taken.
    fn burst(&self) -> i64 {
        i64::from(self.owned) - i64::from(self.spec.guaranteed_cores)
    }

    /// Running cores it keeps: those that may be preempted must be beyond its guarantee.
    fn retained(&self) -> u32 {
        self.running - self.handing_over
    }
}

/// A preemption under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Handover {
    since: u64,
    overdue_reported: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Core {
    /// The runtime slot it belongs to (during a handover, the taker).
    owner: Option<u32>,
    /// The kthread on it and its runtime slot.
    occupant: Option<(u32, KthreadIndex)>,
    /// Set while `occupant` has been asked to park so that the core goes to `owner`.
    handover: Option<Handover>,
    /// When `occupant` was woken on it.
    held_since: u64,
    last_user: Option<(RuntimeId, KthreadIndex)>,
    stats: CoreStats,
}

/// The Arachne policy. See the module documentation.
#[derive(Clone, Debug)]
pub struct Arachne {
    config: ArachneConfig,
    topology: Topology,
    cores: Vec<Core>,
    tenants: Vec<Tenant>,
    /// Cores with no kthread on them.
    idle: usize,
    /// Preemptions under way, so that passes without any skip the overdue check.
    handovers: usize,
    /// The pass that observations feed, counted from 1 so that 0 means "never".
    pass: u64,
    now: u64,
    /// When the estimator last decided.
    last_decision: u64,
}

impl Arachne {
    /// All cores idle and owned by nobody.
    pub fn new(topology: Topology, config: ArachneConfig) -> Self {
        let count = topology.core_count();
        Self {
            config,
            topology,
            cores: vec![Core::default(); count],
            tenants: Vec::new(),
            idle: count,
            handovers: 0,
            pass: 1,
            now: 0,
            last_decision: 0,
        }
    }

    pub fn config(&self) -> &ArachneConfig {
        &self.config
    }

    /// Cores the runtime owns, including those being handed over to it.
    pub fn owned_cores(&self, runtime: RuntimeId) -> Result<u32, AllocError> {
        Ok(self.tenants[self.slot_of(runtime)?].owned)
    }

    fn thresholds(&self) -> Thresholds {
        Thresholds {
            scale_up_load_factor: self.config.scale_up_load_factor,
            scale_down_hysteresis: self.config.scale_down_hysteresis,
        }
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
        let slot = runtime.slot() as usize;
        match self.tenants.get(slot) {
            Some(tenant) if tenant.live && tenant.id == runtime => Ok(slot),
            _ => Err(AllocError::UnknownRuntime(runtime)),
        }
    }

    fn active_core_of(&self, slot: usize, kthread: KthreadIndex) -> Result<CoreId, AllocError> {
        let tenant = &self.tenants[slot];
        match kthread_record(&tenant.kthreads, tenant.id, &tenant.spec, kthread)?.place {
            KthreadPlace::Active { core } => Ok(core),
            KthreadPlace::Parked { .. } => Err(AllocError::KthreadNotActive {
                runtime: tenant.id,
                kthread,
            }),
        }
    }

    fn core_ids(&self) -> impl DoubleEndedIterator<Item = CoreId> + use<> {
        (0..self.cores.len()).map(|index| CoreId(index as u16))
    }

    fn is_free(&self, core: CoreId) -> bool {
        let entry = &self.cores[core.index()];
        entry.owner.is_none() && entry.occupant.is_none()
    }

    fn is_owned_idle(&self, core: CoreId, slot: usize) -> bool {
        let entry = &self.cores[core.index()];
        entry.owner == Some(slot as u32) && entry.occupant.is_none()
    }

    /// Grant order: furthest below its guarantee first, then fewest cores beyond it; ties
    /// rotate with the pass so that no slot always goes first.
    fn grant_priority(&self, slot: usize) -> (i64, usize) {
        let turn = (slot + self.tenants.len() - (self.pass as usize % self.tenants.len()))
            % self.tenants.len();
        (self.tenants[slot].burst(), turn)
    }

    /// The runtime has work and possibly no kthread running: wakes one on an idle core it
    /// owns, else, if it owns none, gives it an unowned idle core; else it waits for the next
    /// core freed or the next decision.
    fn work_for(&mut self, slot: usize, out: &mut Vec<Decision>) {
        let tenant = &mut self.tenants[slot];
        if tenant.retained() > 0 {
            return;
        }
        tenant.wants_core = true;
        if tenant.owned_idle > 0 {
            self.wake_owned(slot, 1, out);
        } else if tenant.owned == 0 {
            match self.free_core_for(slot) {
                Some(core) if self.tenants[slot].can_grow() => {
                    self.set_owner(core, Some(slot));
                    self.start(slot, core, out);
                }
                _ => self.tenants[slot].waiting = true,
            }
        }
    }

    fn demand(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        self.now = now;
        self.work_for(slot, out);
        Ok(())
    }

    /// The estimator's decision for every runtime: scale-downs first, so that the cores they
    /// free go to the scale-ups, then scale-ups (and first cores) neediest first.
    fn decide(&mut self, out: &mut Vec<Decision>) {
        let thresholds = self.thresholds();
        let mut scaling_up = Vec::new();
        for slot in 0..self.tenants.len() {
            let tenant = &mut self.tenants[slot];
            if !tenant.live {
                continue;
            }
            let floor = tenant.floor.max(1);
            let verdict = tenant.estimator.judge(tenant.target(), floor, &thresholds);
            let wants_first_core = tenant.owned == 0 && tenant.wants_core;
            tenant.waiting = wants_first_core;
            match verdict {
                _ if wants_first_core => scaling_up.push(slot),
                Verdict::ScaleUp => scaling_up.push(slot),
                Verdict::ScaleDown => self.scale_down(slot),
                Verdict::Hold => {}
            }
        }
        scaling_up.sort_by_key(|&slot| self.grant_priority(slot));
        for slot in scaling_up {
            let tenant = &mut self.tenants[slot];
            if tenant.releases_pending > 0 {
                // Load came back before the scale-down was carried out: keep the core.
                tenant.releases_pending -= 1;
            } else if !self.grant_one(slot, out) {
                self.tenants[slot].waiting = true;
            }
        }
    }

    /// Gives back an idle core the runtime owns, or, if it has none, the next one it parks on.
    fn scale_down(&mut self, slot: usize) {
        // Owed first, then paid at once if an idle core can pay it (`set_owner` settles one).
        self.tenants[slot].releases_pending += 1;
        if let Some(core) = self.core_ids().rev().find(|&core| self.is_owned_idle(core, slot)) {
            self.set_owner(core, None);
        }
    }

    fn report_overdue_handovers(&mut self, out: &mut Vec<Decision>) {
        let Some(timeout) = self.config.preemption_timeout else {
            return;
        };
        if self.handovers == 0 {
            return;
        }
        for index in 0..self.cores.len() {
            let entry = &mut self.cores[index];
            if let (Some((slot, kthread)), Some(handover)) = (entry.occupant, &mut entry.handover)
                && !handover.overdue_reported
                && self.now.saturating_sub(handover.since) >= timeout
            {
                handover.overdue_reported = true;
                out.push(Decision::PreemptionOverdue {
                    victim_runtime: self.tenants[slot as usize].id,
                    victim_kthread: kthread,
                    core: CoreId(index as u16),
                });
            }
        }
    }
}

impl Policy for Arachne {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    /// Registers a runtime owning no core; it gets its first when it shows work.
    fn register(&mut self, spec: RuntimeSpec, now: u64) -> Result<RuntimeId, AllocError> {
        self.check_clock(now)?;
        spec.validate()?;
        let cores = self.cores.len();
        let guaranteed: u32 = self
            .tenants
            .iter()
            .filter(|tenant| tenant.live)
            .map(|tenant| u32::from(tenant.spec.guaranteed_cores))
            .sum();
        check_cores_fit(spec.guaranteed_cores, guaranteed, cores)?;
        let (slot, generation) = match self.tenants.iter().position(|tenant| !tenant.live) {
            Some(slot) => (slot, self.tenants[slot].id.generation().wrapping_add(1)),
            None if self.tenants.len() < crate::MAX_RUNTIMES => (self.tenants.len(), 0),
            None => return Err(AllocError::TooManyRuntimes),
        };
        self.now = now;
        let tenant = Tenant {
            id: RuntimeId::from_parts(slot as u32, generation),
            live: true,
            spec,
            kthreads: KthreadRecord::all_parked(spec.kthreads, now),
            // It can never own more cores than the machine has.
            estimator: Estimator::new(spec.max_cores.min(cores as u16)),
            owned: 0,
            owned_idle: 0,
            running: 0,
            handing_over: 0,
            reserved: 0,
            releases_pending: 0,
            floor: 0,
            wants_core: false,
            waiting: false,
            waiting_items: 0,
            congested_in_pass: 0,
            most_recent_core: None,
            stats: RuntimeStats::default(),
        };
        if slot == self.tenants.len() {
            self.tenants.push(tenant);
        } else {
            self.tenants[slot] = tenant;
        }
        Ok(self.tenants[slot].id)
    }

    /// Frees every core it owns or occupies: a core it was taking from another runtime goes
    /// back to nobody once that runtime's kthread parks, a core being taken from it goes to its
    /// taker at once, the rest to runtimes waiting for a core, or idle.
    fn unregister(
        &mut self,
        runtime: RuntimeId,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        for core in self.core_ids() {
            let entry = self.cores[core.index()];
            if entry.occupant.is_some_and(|(occupant, _)| occupant as usize == slot) {
                // The daemon has stopped the kthread.
                self.vacate(core);
                match entry.owner {
                    Some(owner) if owner as usize != slot => {
                        let taker = &mut self.tenants[owner as usize];
                        taker.reserved -= 1;
                        taker.owned_idle += 1;
                        self.start(owner as usize, core, out);
                    }
                    _ => self.cores[core.index()].owner = None,
                }
            } else if entry.owner == Some(slot as u32) {
                self.cores[core.index()].owner = None;
            }
        }
        let tenant = &mut self.tenants[slot];
        tenant.live = false;
        tenant.owned = 0;
        tenant.owned_idle = 0;
        tenant.running = 0;
        tenant.handing_over = 0;
        tenant.reserved = 0;
        tenant.releases_pending = 0;
        tenant.wants_core = false;
        tenant.waiting = false;
        self.serve_waiting(out);
        Ok(())
    }

    /// Validates the counters as every policy does and adds the items waiting on the
    /// kthreads' queues to the pass's sample; at the pass, that many of the runtime's idle
    /// cores get a kthread.
    fn observe_runtime(
        &mut self,
        runtime: RuntimeId,
        kthreads: &[KthreadQueues],
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let tenant = &mut self.tenants[slot];
        let congested = record_sweep(&mut tenant.kthreads, runtime, &tenant.spec, pass, kthreads)?;
        let waiting: u64 = kthreads
            .iter()
            .map(|sweep| {
                u64::from(sweep.queues.run_queue.pending()) + u64::from(sweep.queues.ingress.pending())
            })
            .sum();
        tenant.waiting_items = tenant.waiting_items.saturating_add(waiting);
        if congested && tenant.congested_in_pass != pass {
            tenant.congested_in_pass = pass;
            tenant.stats.congestion_detections += 1;
        }
        Ok(())
    }

    /// An item waits on a queue the runtime's kthreads share: counted as one waiting item, and
    /// as work for a runtime with no kthread running.
    fn report_congestion(&mut self, runtime: RuntimeId) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let tenant = &mut self.tenants[slot];
        tenant.waiting_items = tenant.waiting_items.saturating_add(1);
        if tenant.retained() == 0 {
            tenant.wants_core = true;
        }
        if tenant.congested_in_pass != pass {
            tenant.congested_in_pass = pass;
            tenant.stats.congestion_detections += 1;
        }
        Ok(())
    }

    /// Samples every runtime for the estimator, wakes kthreads on owned idle cores for the
    /// items that wait, and, once an interval has passed since the last decision, decides.
    fn run_pass(&mut self, now: u64, out: &mut Vec<Decision>) -> Result<(), AllocError> {
        self.check_clock(now)?;
        self.now = now;
        for slot in 0..self.tenants.len() {
            let tenant = &mut self.tenants[slot];
            if !tenant.live {
                continue;
            }
            let waiting = core::mem::take(&mut tenant.waiting_items);
            let (running, owned) = (tenant.running, tenant.owned);
            tenant.estimator.window.record_pass(running, waiting, owned);
            if waiting > 0 {
                self.wake_owned(slot, waiting, out);
            }
            if self.tenants[slot].wants_core {
                self.work_for(slot, out);
            }
        }
        if now - self.last_decision >= self.config.interval {
            self.last_decision = now;
            self.decide(out);
        }
        self.report_overdue_handovers(out);
        self.pass += 1;
        Ok(())
    }

    /// A kthread parked: a core being taken goes to its taker; otherwise the core stays the
    /// runtime's, idle, unless it owes a scale-down.
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
        if self.cores[core.index()].handover.is_none() {
            // It ran out of work: whatever it was asking for is over.
            let tenant = &mut self.tenants[slot];
            tenant.waiting = false;
            tenant.wants_core = false;
        }
        self.kthread_left(core, out);
        Ok(())
    }

    /// A preempted kthread parked; its core goes to its taker.
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
        if self.cores[core.index()].handover.is_none() {
            return Err(AllocError::NoPreemptionPending { runtime, kthread });
        }
        self.now = now;
        self.kthread_left(core, out);
        Ok(())
    }

    /// Work for a runtime with no kthread running: a kthread on an idle core it owns, else its
    /// first core at once if one is free, else at the next decision.
    fn pending_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.demand(runtime, now, out)
    }

    /// As [`Policy::pending_work`]: a preempted runtime's work waits for a core it owns, a free
    /// core, or the next decision, where a runtime with no core may take one back.
    fn parked_with_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.demand(runtime, now, out)
    }

    /// Wakes or takes cores until `cores` (capped at its guarantee) run or are promised, and
    /// never scales the runtime below that many. Returns how many were granted or promised.
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
        let tenant = &mut self.tenants[slot];
        let target = u32::from(cores.min(tenant.spec.guaranteed_cores));
        tenant.floor = tenant.floor.max(target);
        let mut granted = 0;
        while self.tenants[slot].retained() + self.tenants[slot].reserved < target {
            if self.tenants[slot].owned_idle > 0 {
                self.wake_owned(slot, 1, out);
            } else if !self.grant_one(slot, out) {
                self.tenants[slot].waiting = true;
                break;
            }
            granted += 1;
        }
        Ok(granted)
    }

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn now(&self) -> u64 {
        self.now
    }

    fn passes_run(&self) -> u64 {
        self.pass - 1
    }

    fn idle_core_count(&self) -> usize {
        self.idle
    }

    fn core(&self, core: CoreId) -> Result<CoreView, AllocError> {
        let entry = self
            .cores
            .get(core.index())
            .ok_or(AllocError::NoSuchCore(core))?;
        let id = |slot: u32| self.tenants[slot as usize].id;
        let occupancy = match (entry.occupant, entry.handover) {
            (None, _) => CoreOccupancy::Idle,
            (Some((slot, kthread)), None) => CoreOccupancy::Running {
                runtime: id(slot),
                kthread,
            },
            (Some((slot, kthread)), Some(handover)) => CoreOccupancy::HandingOver {
                runtime: id(slot),
                kthread,
                to: entry.owner.map(id),
                since: handover.since,
            },
        };
        Ok(CoreView {
            occupancy,
            sibling: self.topology.sibling(core),
            last_user: entry.last_user,
            stats: entry.stats,
        })
    }

    fn runtime(&self, runtime: RuntimeId) -> Result<RuntimeView, AllocError> {
        let tenant = &self.tenants[self.slot_of(runtime)?];
        Ok(RuntimeView {
            id: tenant.id,
            spec: tenant.spec,
            running_cores: tenant.running,
            cores_handing_over: tenant.handing_over,
            cores_reserved: tenant.reserved,
            most_recent_core: tenant.most_recent_core,
            waiting: tenant.waiting,
            has_pending_work: tenant.wants_core,
            stats: tenant.stats,
        })
    }

    fn kthread(
        &self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
    ) -> Result<KthreadView, AllocError> {
        let tenant = &self.tenants[self.slot_of(runtime)?];
        Ok(kthread_record(&tenant.kthreads, runtime, &tenant.spec, kthread)?.view())
    }

    fn audit(&self) -> Result<(), String> {
        self.audit_tables()
    }
}
