//! A deliberately simple second policy, for tests only: a runtime that shows demand (congestion
//! or pending work) gets the lowest-numbered idle core, one per pass, up to its maximum; nothing
//! is ever preempted. It keeps the whole [`Policy`] contract, so it must pass the same harness
//! and auditor as the Shenango policy.

use corral_policy::{
    AllocError, CoreId, CoreOccupancy, CoreStats, CoreView, Decision, KthreadIndex, KthreadPlace,
    KthreadQueues, KthreadView, LastObservation, Policy, RuntimeId, RuntimeSpec, RuntimeStats,
    RuntimeView, SpecError, Topology, check_sweep,
};

#[derive(Debug)]
struct Kthread {
    place: KthreadPlace,
    last_core: Option<CoreId>,
    last: LastObservation,
}

#[derive(Debug)]
struct Tenant {
    id: RuntimeId,
    live: bool,
    spec: RuntimeSpec,
    kthreads: Vec<Kthread>,
    congested_in_pass: u64,
    has_pending_work: bool,
    most_recent_core: Option<CoreId>,
    stats: RuntimeStats,
}

#[derive(Debug)]
pub struct FirstFit {
    topology: Topology,
    cores: Vec<Option<(RuntimeId, KthreadIndex)>>,
    last_users: Vec<Option<(RuntimeId, KthreadIndex)>>,
    core_stats: Vec<CoreStats>,
    tenants: Vec<Tenant>,
    /// Counted from 1, so that 0 means "never".
    pass: u64,
    now: u64,
}

impl FirstFit {
    pub fn new(topology: Topology) -> Self {
        let count = topology.core_count();
        Self {
            topology,
            cores: vec![None; count],
            last_users: vec![None; count],
            core_stats: vec![CoreStats::default(); count],
            tenants: Vec::new(),
            pass: 1,
            now: 0,
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

    fn kthread_of(&self, slot: usize, kthread: KthreadIndex) -> Result<&Kthread, AllocError> {
        let tenant = &self.tenants[slot];
        tenant
            .kthreads
            .get(kthread.index())
            .ok_or(AllocError::NoSuchKthread {
                runtime: tenant.id,
                kthread,
                kthreads: tenant.spec.kthreads,
            })
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

    fn running(&self, slot: usize) -> u32 {
        let id = self.tenants[slot].id;
        self.cores
            .iter()
            .filter(|core| core.is_some_and(|(runtime, _)| runtime == id))
            .count() as u32
    }

    /// The lowest idle core to the runtime's lowest parked kthread, if it may hold one more.
    fn grant_idle(&mut self, slot: usize, out: &mut Vec<Decision>) -> bool {
        if self.running(slot) >= u32::from(self.tenants[slot].spec.max_cores) {
            return false;
        }
        let Some(core) = self.cores.iter().position(Option::is_none) else {
            return false;
        };
        let tenant = &mut self.tenants[slot];
        let Some(index) = tenant
            .kthreads
            .iter()
            .position(|kthread| matches!(kthread.place, KthreadPlace::Parked { .. }))
        else {
            return false;
        };
        let core_id = CoreId(core as u16);
        let kthread = KthreadIndex(index as u16);
        let entry = &mut tenant.kthreads[index];
        entry.place = KthreadPlace::Active { core: core_id };
        entry.last_core = Some(core_id);
        entry.last.pass = 0;
        tenant.has_pending_work = false;
        tenant.stats.grants += 1;
        let stats = &mut self.core_stats[core];
        stats.grants += 1;
        if self.last_users[core].is_none_or(|(user, _)| user != tenant.id) {
            stats.reallocations += 1;
        }
        self.cores[core] = Some((tenant.id, kthread));
        self.last_users[core] = Some((tenant.id, kthread));
        out.push(Decision::Wake {
            runtime: tenant.id,
            kthread,
            core: core_id,
        });
        true
    }
}

impl Policy for FirstFit {
    fn name(&self) -> &'static str {
        "first-fit"
    }

    fn register(&mut self, spec: RuntimeSpec, now: u64) -> Result<RuntimeId, AllocError> {
        self.check_clock(now)?;
        spec.validate()?;
        let guaranteed: u32 = self
            .tenants
            .iter()
            .filter(|tenant| tenant.live)
            .map(|tenant| u32::from(tenant.spec.guaranteed_cores))
            .sum();
        let cores = self.cores.len();
        if guaranteed + u32::from(spec.guaranteed_cores) > cores as u32 {
            return Err(SpecError::GuaranteesOversubscribed {
                requested: spec.guaranteed_cores,
                already_guaranteed: guaranteed,
                cores,
            }
            .into());
        }
        self.now = now;
        let kthreads = (0..spec.kthreads)
            .map(|_| Kthread {
                place: KthreadPlace::Parked { since: now },
                last_core: None,
                last: LastObservation::default(),
            })
            .collect();
        let (slot, generation) = match self.tenants.iter().position(|tenant| !tenant.live) {
            Some(slot) => (slot, self.tenants[slot].id.generation() + 1),
            None => (self.tenants.len(), 0),
        };
        let tenant = Tenant {
            id: RuntimeId::from_parts(slot as u32, generation),
            live: true,
            spec,
            kthreads,
            congested_in_pass: 0,
            has_pending_work: false,
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

    fn unregister(
        &mut self,
        runtime: RuntimeId,
        _out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        for core in &mut self.cores {
            if core.is_some_and(|(owner, _)| owner == runtime) {
                *core = None;
            }
        }
        self.tenants[slot].live = false;
        Ok(())
    }

    fn observe_runtime(
        &mut self,
        runtime: RuntimeId,
        kthreads: &[KthreadQueues],
    ) -> Result<(), AllocError> {
        let slot = self.slot_of(runtime)?;
        let pass = self.pass;
        let tenant = &self.tenants[slot];
        let congested = check_sweep(runtime, &tenant.spec, pass, kthreads, |index| {
            tenant.kthreads.get(index.index()).map(|kthread| {
                let active = matches!(kthread.place, KthreadPlace::Active { .. });
                (active, kthread.last)
            })
        })?;
        let tenant = &mut self.tenants[slot];
        for &KthreadQueues { kthread, queues } in kthreads {
            let entry = &mut tenant.kthreads[kthread.index()];
            entry.last = LastObservation { queues, pass };
        }
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

    fn run_pass(&mut self, now: u64, out: &mut Vec<Decision>) -> Result<(), AllocError> {
        self.check_clock(now)?;
        self.now = now;
        for slot in 0..self.tenants.len() {
            let tenant = &self.tenants[slot];
            if tenant.live && (tenant.congested_in_pass == self.pass || tenant.has_pending_work) {
                self.grant_idle(slot, out);
            }
        }
        self.pass += 1;
        Ok(())
    }

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
        self.cores[core.index()] = None;
        let tenant = &mut self.tenants[slot];
        tenant.kthreads[kthread.index()].place = KthreadPlace::Parked { since: now };
        tenant.most_recent_core = Some(core);
        tenant.stats.parks += 1;
        Ok(())
    }

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
        // It never preempts.
        Err(AllocError::NoPreemptionPending { runtime, kthread })
    }

    fn pending_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.check_clock(now)?;
        let slot = self.slot_of(runtime)?;
        self.now = now;
        if self.running(slot) == 0 && !self.grant_idle(slot, out) {
            self.tenants[slot].has_pending_work = true;
        }
        Ok(())
    }

    fn parked_with_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError> {
        self.pending_work(runtime, now, out)
    }

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
        let mut granted = 0;
        while self.running(slot) < target && self.grant_idle(slot, out) {
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
        self.cores.iter().filter(|core| core.is_none()).count()
    }

    fn core(&self, core: CoreId) -> Result<CoreView, AllocError> {
        let occupant = self
            .cores
            .get(core.index())
            .ok_or(AllocError::NoSuchCore(core))?;
        Ok(CoreView {
            occupancy: match *occupant {
                None => CoreOccupancy::Idle,
                Some((runtime, kthread)) => CoreOccupancy::Running { runtime, kthread },
            },
            sibling: self.topology.sibling(core),
            last_user: self.last_users[core.index()],
            stats: self.core_stats[core.index()],
        })
    }

    fn runtime(&self, runtime: RuntimeId) -> Result<RuntimeView, AllocError> {
        let slot = self.slot_of(runtime)?;
        let tenant = &self.tenants[slot];
        Ok(RuntimeView {
            id: tenant.id,
            spec: tenant.spec,
            running_cores: self.running(slot),
            cores_handing_over: 0,
            cores_reserved: 0,
            most_recent_core: tenant.most_recent_core,
            waiting: tenant.has_pending_work,
            has_pending_work: tenant.has_pending_work,
            stats: tenant.stats,
        })
    }

    fn kthread(
        &self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
    ) -> Result<KthreadView, AllocError> {
        let slot = self.slot_of(runtime)?;
        let entry = self.kthread_of(slot, kthread)?;
        Ok(KthreadView {
            place: entry.place,
            last_core: entry.last_core,
        })
    }
}
