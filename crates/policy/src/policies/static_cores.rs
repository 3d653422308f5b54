//! The static policy: each runtime is given a fixed set of cores when it registers and keeps
//! them until it leaves; no core ever goes to another runtime, nothing is ever preempted. This
//! is how systems that cannot reallocate cores quickly (ZygOS, IX between its slow
//! reallocations) are provisioned: for peak load, the cores idle whenever the load is lower.
//!
//! How many cores: [`StaticConfig::cores_per_runtime`], or by default the runtime's guarantee
//! (so a runtime with no guarantee never runs). Cores are dedicated lowest-numbered first. A
//! runtime that shows demand (pending work, congestion, stranded work, spinning kthreads) has
//! a kthread woken on every dedicated core that is idle; a kthread that parks leaves its core
//! idle, still dedicated, until the runtime shows demand again.

use super::{PolicyEntry, PolicySettings};
use crate::kthreads::{KthreadRecord, kthread_record, kthread_to_wake, record_sweep};
use crate::spec::check_cores_fit;
use crate::{
    AllocError, CoreId, CoreOccupancy, CoreStats, CoreView, Decision, KthreadIndex, KthreadPlace,
    KthreadQueues, KthreadView, Policy, RuntimeId, RuntimeSpec, RuntimeStats, RuntimeView,
    Topology,
};

/// Registered as `static`.
pub const ENTRY: PolicyEntry = PolicyEntry {
    name: "static",
    summary: "each runtime holds a fixed set of cores (its guarantee), never reallocated",
    options: &[(
        "cores_per_runtime",
        "cores dedicated to every runtime, capped at its maximum; default: its guarantee",
    )],
    build: |topology, settings: &PolicySettings| {
        let cores_per_runtime = settings.parsed(
            "cores_per_runtime",
            "a core count from 1 to 65535",
            |n: &u16| *n >= 1,
        )?;
        Ok(Box::new(Static::new(
            topology,
            StaticConfig { cores_per_runtime },
        )))
    },
};

/// Tunables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StaticConfig {
    /// Cores dedicated to every runtime (capped at its maximum); `None`: its guarantee.
    pub cores_per_runtime: Option<u16>,
}

#[derive(Clone, Debug)]
struct Tenant {
    id: RuntimeId,
    live: bool,
    spec: RuntimeSpec,
    kthreads: Vec<KthreadRecord>,
    /// The cores it holds for good, ascending.
    dedicated: Vec<CoreId>,
    running: u32,
    congested_in_pass: u64,
    /// It showed demand and some dedicated core had no kthread to wake (or it has none).
    waiting: bool,
    most_recent_core: Option<CoreId>,
    stats: RuntimeStats,
}

#[derive(Clone, Copy, Debug, Default)]
struct Core {
    /// The runtime slot it is dedicated to.
    owner: Option<u32>,
    running: Option<KthreadIndex>,
    last_user: Option<(RuntimeId, KthreadIndex)>,
    stats: CoreStats,
}

/// The static policy. See the module documentation.
#[derive(Clone, Debug)]
pub struct Static {
    config: StaticConfig,
    topology: Topology,
    cores: Vec<Core>,
    tenants: Vec<Tenant>,
    idle: usize,
    /// The pass that observations feed, counted from 1 so that 0 means "never".
    pass: u64,
    now: u64,
}

impl Static {
    /// All cores idle and dedicated to nobody.
    pub fn new(topology: Topology, config: StaticConfig) -> Self {
        let count = topology.core_count();
        Self {
            config,
            topology,
            cores: vec![Core::default(); count],
            tenants: Vec::new(),
            idle: count,
            pass: 1,
            now: 0,
        }
    }

    pub fn config(&self) -> &StaticConfig {
        &self.config
    }

    /// The cores dedicated to `runtime`, ascending.
    pub fn dedicated_cores(&self, runtime: RuntimeId) -> Result<&[CoreId], AllocError> {
        Ok(&self.tenants[self.slot_of(runtime)?].dedicated)
    }

    fn fixed_count(&self, spec: &RuntimeSpec) -> u16 {
        self.config
            .cores_per_runtime
            .unwrap_or(spec.guaranteed_cores)
            .min(spec.max_cores)
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

    fn kthread_of(
        &self,
        slot: usize,
        kthread: KthreadIndex,
    ) -> Result<&KthreadRecord, AllocError> {
        let tenant = &self.tenants[slot];
        kthread_record(&tenant.kthreads, tenant.id, &tenant.spec, kthread)
    }

    fn active_core_of(&self, slot: usize, kthread: KthreadIndex) -> Result<CoreId, AllocError> {
        match self.kthread_of(slot, kthread)?.place {
            KthreadPlace::Active { core } => Ok(core),
            KthreadPlace::Parked { .. } => Err(AllocError::KthreadNotActive {
                runtime: self.tenants[slot].id,
                kthread,
            }),
        }
    }

    /// Wakes a kthread on each of the runtime's idle dedicated cores, at most `limit` running
    /// in all: the one that last ran on the core if it is parked, else the one parked longest.
    /// Returns how many were woken.
    fn fill(&mut self, slot: usize, limit: u32, out: &mut Vec<Decision>) -> u32 {
        let mut woken = 0;
        for position in 0..self.tenants[slot].dedicated.len() {
            let tenant = &self.tenants[slot];
            if tenant.running >= limit {
                break;
            }
            let core = tenant.dedicated[position];
            if self.cores[core.index()].running.is_some() {
                continue;
            }
            let last_user = self.cores[core.index()].last_user;
            let Some(kthread) = kthread_to_wake(&tenant.kthreads, tenant.id, last_user) else {
                break;
            };
            let id = tenant.id;
            let tenant = &mut self.tenants[slot];
            tenant.kthreads[kthread.index()].activate(core);
            tenant.running += 1;
            tenant.stats.grants += 1;
            let entry = &mut self.cores[core.index()];
            entry.stats.grants += 1;
            if entry.last_user.is_some_and(|(user, _)| user != id) {
                entry.stats.reallocations += 1;
            }
            entry.running = Some(kthread);
            entry.last_user = Some((id, kthread));
            self.idle -= 1;
            woken += 1;
            out.push(Decision::Wake {
                runtime: id,
                kthread,
                core,
            });
        }
        let tenant = &mut self.tenants[slot];
        tenant.waiting =
            tenant.running < limit.min(tenant.dedicated.len() as u32) || tenant.dedicated.is_empty();
        woken
    }

    fn demand(&mut self, runtime: RuntimeId, now: u64, out: &mut Vec<Decision>) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        self.now = now;
        self.fill(slot, u32::MAX, out);
        Ok(())
    }
}

impl Policy for Static {
    fn name(&self) -> &'static str {
        ENTRY.name
    }

    /// Registers a runtime and dedicates its cores to it. Refused if its guarantee, or the
    /// cores it would be given, do not fit in what other runtimes left.
    fn register(&mut self, spec: RuntimeSpec, now: u64) -> Result<RuntimeId, AllocError> {
        self.check_clock(now)?;
        spec.validate()?;
        let cores = self.cores.len();
        let live = || self.tenants.iter().filter(|tenant| tenant.live);
        let guaranteed: u32 = live().map(|t| u32::from(t.spec.guaranteed_cores)).sum();
        let dedicated: u32 = live().map(|t| t.dedicated.len() as u32).sum();
        let wanted = self.fixed_count(&spec);
        check_cores_fit(spec.guaranteed_cores, guaranteed, cores)?;
        check_cores_fit(wanted, dedicated, cores)?;
        self.now = now;
        let (slot, generation) = match self.tenants.iter().position(|tenant| !tenant.live) {
            Some(slot) => (slot, self.tenants[slot].id.generation() + 1),
            None => (self.tenants.len(), 0),
        };
        let free = self
            .cores
            .iter()
            .enumerate()
            .filter(|(_, core)| core.owner.is_none())
            .map(|(index, _)| index)
            .take(usize::from(wanted))
            .collect::<Vec<_>>();
        for &index in &free {
            self.cores[index].owner = Some(slot as u32);
        }
        let tenant = Tenant {
            id: RuntimeId::from_parts(slot as u32, generation),
            live: true,
            spec,
            kthreads: KthreadRecord::all_parked(spec.kthreads, now),
            dedicated: free.into_iter().map(|index| CoreId(index as u16)).collect(),
            running: 0,
            congested_in_pass: 0,
            waiting: false,
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

    /// Frees its cores (idle, dedicated to nobody); nothing is decided.
    fn unregister(
        &mut self,
        runtime: RuntimeId,
        _out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        for &core in &self.tenants[slot].dedicated {
            let entry = &mut self.cores[core.index()];
            if entry.running.take().is_some() {
                self.idle += 1;
            }
            entry.owner = None;
        }
        let tenant = &mut self.tenants[slot];
        tenant.live = false;
        tenant.dedicated.clear();
        tenant.running = 0;
        Ok(())
    }

    /// Validates the counters as every policy does and notes congestion (Algorithm 1's test),
    /// which wakes kthreads on the runtime's idle dedicated cores at the pass.
    fn observe_runtime(
        &mut self,
        runtime: RuntimeId,
        kthreads: &[KthreadQueues],
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let tenant = &mut self.tenants[slot];
        let congested = record_sweep(&mut tenant.kthreads, runtime, &tenant.spec, pass, kthreads)?;
        if congested {
            self.report_congestion(runtime)?;
        }
        Ok(())
    }

    fn report_congestion(&mut self, runtime: RuntimeId) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let tenant = &mut self.tenants[slot];
        if tenant.congested_in_pass != pass {
            tenant.congested_in_pass = pass;
            tenant.stats.congestion_detections += 1;
        }
        Ok(())
    }

    /// Wakes kthreads on the idle dedicated cores of every runtime that was congested or is
    /// waiting with demand.
    fn run_pass(&mut self, now: u64, out: &mut Vec<Decision>) -> Result<(), AllocError> {
        self.check_clock(now)?;
        self.now = now;
        for slot in 0..self.tenants.len() {
            let tenant = &self.tenants[slot];
            if tenant.live && (tenant.congested_in_pass == self.pass || tenant.waiting) {
                self.fill(slot, u32::MAX, out);
            }
        }
        self.pass += 1;
        Ok(())
    }

    /// The kthread's core stays the runtime's, idle.
    fn kthread_parked(
        &mut self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        now: u64,
        _out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        let core = self.active_core_of(slot, kthread)?;
        self.now = now;
        self.cores[core.index()].running = None;
        self.idle += 1;
        let tenant = &mut self.tenants[slot];
        tenant.kthreads[kthread.index()].place = KthreadPlace::Parked { since: now };
        tenant.running -= 1;
        tenant.most_recent_core = Some(core);
        tenant.stats.parks += 1;
        // It ran out of work: whatever demand it showed is over.
        tenant.waiting = false;
        Ok(())
    }

    /// Always refused: nothing is ever preempted.
    fn preemption_completed(
        &mut self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        now: u64,
        _out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        self.active_core_of(slot, kthread)?;
        Err(AllocError::NoPreemptionPending { runtime, kthread })
    }

    fn pending_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.demand(runtime, now, out)
    }

    fn parked_with_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.demand(runtime, now, out)
    }

    /// Wakes kthreads on its dedicated cores until `cores` (capped at its guarantee and at its
    /// dedicated cores) run.
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
        let target = u32::from(cores.min(self.tenants[slot].spec.guaranteed_cores));
        Ok(self.fill(slot, target, out))
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
        Ok(CoreView {
            occupancy: match (entry.owner, entry.running) {
                (Some(slot), Some(kthread)) => CoreOccupancy::Running {
                    runtime: self.tenants[slot as usize].id,
                    kthread,
                },
                _ => CoreOccupancy::Idle,
            },
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
            cores_handing_over: 0,
            cores_reserved: 0,
            most_recent_core: tenant.most_recent_core,
            waiting: tenant.waiting,
            has_pending_work: tenant.waiting,
            stats: tenant.stats,
        })
    }

    fn kthread(
        &self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
    ) -> Result<KthreadView, AllocError> {
        let slot = self.slot_of(runtime)?;
        Ok(self.kthread_of(slot, kthread)?.view())
    }

    /// Dedicated cores are disjoint, each runtime's list matches the cores' owners, kthreads run
    /// only on their runtime's cores, and the counts agree.
    fn audit(&self) -> Result<(), String> {
        let mut idle = 0;
        for (index, core) in self.cores.iter().enumerate() {
            idle += usize::from(core.running.is_none());
            if core.running.is_some() && core.owner.is_none() {
                return Err(format!("core {index} runs a kthread but belongs to nobody"));
            }
            if let Some(slot) = core.owner {
                let tenant = &self.tenants[slot as usize];
                if !tenant.live || !tenant.dedicated.contains(&CoreId(index as u16)) {
                    return Err(format!("core {index} belongs to slot {slot}, which does not list it"));
                }
            }
        }
        if idle != self.idle {
            return Err(format!("{idle} idle cores, counted {}", self.idle));
        }
        for (slot, tenant) in self.tenants.iter().enumerate().filter(|(_, t)| t.live) {
            let running = tenant
                .kthreads
                .iter()
                .filter(|kthread| matches!(kthread.place, KthreadPlace::Active { .. }))
                .count() as u32;
            if running != tenant.running {
                return Err(format!("{}: {running} running, counted {}", tenant.id, tenant.running));
            }
            for core in &tenant.dedicated {
                if self.cores[core.index()].owner != Some(slot as u32) {
                    return Err(format!("{}: lists core {} it does not own", tenant.id, core.0));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SpecError;
    use crate::audit::check_contract;

    fn policy(cores: usize) -> Static {
        Static::new(
            Topology::without_hyperthreads(cores).unwrap(),
            StaticConfig::default(),
        )
    }

    #[test]
    fn a_runtime_gets_exactly_its_guarantee_and_keeps_it() {
        let mut policy = policy(4);
        let lc = policy.register(RuntimeSpec::new(2, 4), 0).unwrap();
        let batch = policy.register(RuntimeSpec::new(0, 4), 0).unwrap();
        assert_eq!(policy.dedicated_cores(lc).unwrap(), &[CoreId(0), CoreId(1)]);
        assert!(policy.dedicated_cores(batch).unwrap().is_empty());
        let mut out = Vec::new();
        policy.pending_work(lc, 1, &mut out).unwrap();
        policy.pending_work(batch, 1, &mut out).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out.iter().all(|decision| matches!(
            decision,
            Decision::Wake { runtime, core, .. } if *runtime == lc && core.0 < 2
        )));
        assert!(policy.runtime(batch).unwrap().waiting);
        check_contract(&policy, &[lc, batch]).unwrap();

        // The batch runtime stays congested: still nothing, and the idle cores stay idle.
        out.clear();
        policy.report_congestion(batch).unwrap();
        policy.run_pass(2, &mut out).unwrap();
        assert!(out.is_empty());
        assert_eq!(policy.idle_core_count(), 2);
    }

    #[test]
    fn a_parked_core_stays_dedicated_and_the_warm_kthread_comes_back() {
        let mut policy = policy(3);
        let lc = policy.register(RuntimeSpec::new(1, 3), 0).unwrap();
        let other = policy.register(RuntimeSpec::new(2, 3), 0).unwrap();
        let mut out = Vec::new();
        policy.pending_work(lc, 1, &mut out).unwrap();
        let Decision::Wake { kthread, core, .. } = out[0] else {
            panic!("{out:?}")
        };
        out.clear();
        policy.kthread_parked(lc, kthread, 2, &mut out).unwrap();
        assert!(out.is_empty());
        // The other runtime, congested, does not get the freed core.
        policy.pending_work(other, 3, &mut out).unwrap();
        assert!(out.iter().all(|d| !matches!(d, Decision::Wake { core: c, .. } if *c == core)));
        out.clear();
        policy.pending_work(lc, 4, &mut out).unwrap();
        assert_eq!(
            out,
            vec![Decision::Wake {
                runtime: lc,
                kthread,
                core
            }]
        );
        check_contract(&policy, &[lc, other]).unwrap();
        assert_eq!(policy.core(core).unwrap().stats.reallocations, 0);
    }

    #[test]
    fn a_configured_count_is_capped_and_must_fit() {
        let mut policy = Static::new(
            Topology::without_hyperthreads(5).unwrap(),
            StaticConfig {
                cores_per_runtime: Some(3),
            },
        );
        let first = policy.register(RuntimeSpec::new(0, 2), 0).unwrap();
        assert_eq!(policy.dedicated_cores(first).unwrap().len(), 2);
        let second = policy.register(RuntimeSpec::new(0, 4), 0).unwrap();
        let error = policy.register(RuntimeSpec::new(0, 4), 0).unwrap_err();
        assert!(matches!(
            error,
            AllocError::BadSpec(SpecError::GuaranteesOversubscribed { .. })
        ));
        let mut out = Vec::new();
        policy.unregister(second, &mut out).unwrap();
        assert!(out.is_empty());
        let third = policy.register(RuntimeSpec::new(0, 4), 0).unwrap();
        assert_eq!(
            policy.dedicated_cores(third).unwrap(),
            &[CoreId(2), CoreId(3), CoreId(4)]
        );
        check_contract(&policy, &[first, third]).unwrap();
    }

    #[test]
    fn nothing_is_preempted_and_guaranteed_grants_stop_at_the_guarantee() {
        let mut policy = policy(4);
        let spinning = policy.register(RuntimeSpec::new(3, 4), 0).unwrap();
        let mut out = Vec::new();
        assert_eq!(policy.grant_guaranteed(spinning, 2, 1, &mut out).unwrap(), 2);
        assert_eq!(policy.grant_guaranteed(spinning, 9, 1, &mut out).unwrap(), 1);
        assert_eq!(out.len(), 3);
        let Decision::Wake { kthread, .. } = out[0] else {
            panic!()
        };
        assert!(matches!(
            policy.preemption_completed(spinning, kthread, 2, &mut out),
            Err(AllocError::NoPreemptionPending { .. })
        ));
        assert!(matches!(
            policy.run_pass(0, &mut out),
            Err(AllocError::ClockWentBackwards { .. })
        ));
        check_contract(&policy, &[spinning]).unwrap();
    }
}
