//! The simulated machine: managed cores, runtimes and their kthreads on a virtual clock,
//! playing iokerneld's part towards a real [`Policy`].
//!
//! Each pass (every [`Costs::interval`](crate::Costs)) it sweeps every runtime's active
//! kthreads' queue counters into [`Policy::observe_runtime`], asks for a core for runtimes that
//! hold none and have work left ([`Policy::parked_with_work`]), calls [`Policy::run_pass`] and
//! carries out the decisions. Between passes it reports what iokerneld relays: a request for a
//! runtime with no active kthread ([`Policy::pending_work`], at most once per pass), a kthread
//! that found no work and parked ([`Policy::kthread_parked`]), a preempted kthread that parked
//! ([`Policy::kthread_parked`], then [`Policy::parked_with_work`] if work is left), and an
//! overdue preemption ([`Policy::preemption_completed`]).
//!
//! A request goes to one of the runtime's active kthreads, uniformly at random (RSS over
//! many flows), or to kthread 0 if none is active, as iokerneld steers frames. A kthread runs
//! its own run queue, then its ingress, then steals from its siblings in order; a spinning
//! kthread picks up work that appears anywhere in its runtime.

use corral_policy::audit::check_contract;
use corral_policy::{
    CoreOccupancy, Decision, KthreadIndex, KthreadPlace, KthreadQueues, Policy, QueueSnapshot,
    RingPositions, RuntimeId, Topology,
};

use crate::config::{CedeMode, RuntimeKind, SimConfig};
use crate::events::{Event, EventQueue};
use crate::kthread::{Kthread, Run};
use crate::metrics::{Metrics, PointResult};
use crate::requests::Requests;
use crate::workload::Arrivals;

/// A batch kthread's run queue as swept: an item always waiting behind the running one, so a
/// batch runtime is congested at every pass it runs in, as one with more threads than cores.
const BATCH_RUN_QUEUE: RingPositions = RingPositions::new(1, 0);

#[derive(Debug)]
struct SimRuntime {
    kind: RuntimeKind,
    id: RuntimeId,
    kthreads: Vec<Kthread>,
    /// Kthreads the policy sees active, ascending.
    active: Vec<u16>,
    /// Running kthreads that found no work.
    spinning: Vec<u16>,
    /// Requests on its kthreads' queues (not running).
    queued: u64,
    /// `pending_work` was reported since the last pass.
    requested_this_pass: bool,
    arrivals: Option<Arrivals>,
}

impl SimRuntime {
    fn latency_critical(&self) -> bool {
        self.kind == RuntimeKind::LatencyCritical
    }

    fn has_work(&self) -> bool {
        !self.latency_critical() || self.queued > 0
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct SimCore {
    /// (runtime index, kthread) holding it.
    occupant: Option<(u32, u16)>,
    since: u64,
    last_runtime: Option<u32>,
}

/// Cost figures, copied out of [`crate::Costs`] for the hot path.
#[derive(Clone, Copy, Debug)]
struct Charges {
    interval: u64,
    grant: u64,
    stop: u64,
    park: u64,
    handover: u64,
    dispatch: u64,
    net_core: u64,
    net_latency: u64,
}

/// One run in progress. Build it with [`Sim::new`], run it with [`Sim::run`].
#[derive(Debug)]
pub struct Sim {
    config: SimConfig,
    charges: Charges,
    policy: Box<dyn Policy>,
    now: u64,
    events: EventQueue,
    rng: fastrand::Rng,
    runtimes: Vec<SimRuntime>,
    ids: Vec<RuntimeId>,
    /// Runtime index by the policy's slot.
    index_of_slot: Vec<u32>,
    cores: Vec<SimCore>,
    requests: Requests,
    metrics: Metrics,
    decisions: Vec<Decision>,
    executing: Vec<Decision>,
    sweep: Vec<KthreadQueues>,
    lc_cores: u32,
    batch_cores: u32,
    lc_queued: u64,
    events_handled: u64,
}

impl Sim {
    /// A machine with every runtime registered and every core idle.
    pub fn new(config: SimConfig) -> Result<Self, String> {
        config.validate()?;
        let topology = if config.hyperthreads {
            Topology::hyperthread_pairs(usize::from(config.cores))
        } else {
            Topology::without_hyperthreads(usize::from(config.cores))
        }
        .map_err(|e| e.to_string())?;
        let mut policy = corral_policy::build(&config.policy, topology, &config.settings)
            .map_err(|e| e.to_string())?;
        let lc_count = config.latency_critical_count().max(1);
        let per_ns_at_full_load = config.full_load_rps() / lc_count as f64 / 1e9;
        let mut runtimes = Vec::with_capacity(config.runtimes.len());
        let mut ids = Vec::with_capacity(config.runtimes.len());
        let mut index_of_slot = Vec::new();
        for (index, runtime) in config.runtimes.iter().enumerate() {
            let id = policy
                .register(runtime.spec, 0)
                .map_err(|e| format!("runtime {index}: {e}"))?;
            let slot = id.slot() as usize;
            if index_of_slot.len() <= slot {
                index_of_slot.resize(slot + 1, u32::MAX);
            }
            index_of_slot[slot] = index as u32;
            ids.push(id);
            runtimes.push(SimRuntime {
                kind: runtime.kind,
                id,
                kthreads: (0..runtime.spec.kthreads).map(|_| Kthread::new()).collect(),
                active: Vec::with_capacity(usize::from(runtime.spec.max_cores)),
                spinning: Vec::with_capacity(usize::from(runtime.spec.max_cores)),
                queued: 0,
                requested_this_pass: false,
                arrivals: (runtime.kind == RuntimeKind::LatencyCritical)
                    .then(|| Arrivals::new(config.load.clone(), per_ns_at_full_load)),
            });
        }
        let costs = &config.costs;
        let charges = Charges {
            interval: costs.interval.ns,
            grant: costs.grant.ns,
            stop: match config.cede {
                CedeMode::Signal => costs.preempt.ns,
                CedeMode::Cooperative => costs.cede.ns,
            },
            park: costs.park.ns,
            handover: costs.handover.ns,
            dispatch: costs.dispatch.ns,
            net_core: costs.net_core.ns,
            net_latency: costs.net_latency.ns,
        };
        Ok(Self {
            charges,
            policy,
            now: 0,
            events: EventQueue::new(),
            rng: fastrand::Rng::with_seed(config.seed),
            runtimes,
            ids,
            index_of_slot,
            cores: vec![SimCore::default(); usize::from(config.cores)],
            requests: Requests::new(),
            metrics: Metrics::new(config.duration_ns),
            decisions: Vec::new(),
            executing: Vec::new(),
            sweep: Vec::new(),
            lc_cores: 0,
            batch_cores: 0,
            lc_queued: 0,
            events_handled: 0,
            config,
        })
    }

    /// Runs to the end of the window, then until every request that arrived has completed
    /// (or the drain limit passes), and returns the results.
    pub fn run(mut self) -> Result<PointResult, String> {
        let window = self.config.duration_ns;
        let stop = window.saturating_add(self.config.drain_limit_ns);
        self.events.schedule(self.charges.interval, Event::Pass);
        if self.config.sample_every_ns <= window {
            self.events
                .schedule(self.config.sample_every_ns, Event::Sample);
        }
        for index in 0..self.runtimes.len() {
            if let Some(arrivals) = &self.runtimes[index].arrivals
                && let Some(at) = arrivals.next_after(0, &mut self.rng)
                && at < window
            {
                self.events.schedule(
                    at,
                    Event::Arrival {
                        runtime: index as u32,
                    },
                );
            }
            if !self.runtimes[index].latency_critical() {
                let id = self.runtimes[index].id;
                self.policy
                    .pending_work(id, 0, &mut self.decisions)
                    .map_err(|e| format!("pending_work: {e}"))?;
                self.carry_out()?;
            }
        }
        if self.config.audit {
            self.audit()?;
        }
        while let Some((at, event)) = self.events.pop() {
            // Events at the window's end are still handled, so that the series always has
            // its last sample there, whether or not a request happens to be in flight.
            if (at > window && self.requests.live() == 0) || at > stop {
                break;
            }
            self.now = at;
            self.events_handled += 1;
            self.handle(event)?;
            if self.config.audit {
                self.audit()
                    .map_err(|e| format!("at {at} ns after {event:?}: {e}"))?;
            }
        }
        self.finish()
    }

    fn finish(mut self) -> Result<PointResult, String> {
        let window = self.config.duration_ns;
        for core in 0..self.cores.len() {
            if let Some((runtime, _)) = self.cores[core].occupant {
                let lc = self.runtimes[runtime as usize].latency_critical();
                self.metrics.core_held(lc, self.cores[core].since, window);
            }
        }
        // Requests still running at the end ran up to the window's end as well.
        for runtime in &self.runtimes {
            for kthread in &runtime.kthreads {
                if let Run::Busy {
                    started, request, ..
                } = kthread.run
                {
                    let overhead = self.requests.get(request).overhead;
                    self.metrics.useful(
                        started + self.charges.dispatch + overhead,
                        window.max(started),
                    );
                }
            }
        }
        let load = self.config.load.mean(window);
        let offered = load
            * self.config.full_load_rps()
            * f64::from(u8::from(self.config.latency_critical_count() > 0));
        let passes = self.policy.passes_run();
        Ok(PointResult::from_metrics(
            self.metrics,
            self.cores.len(),
            load,
            offered,
            passes,
            self.events_handled,
        ))
    }

    fn handle(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Pass => self.pass(),
            Event::Arrival { runtime } => self.arrival(runtime as usize),
            Event::KthreadRuns {
                runtime,
                kthread,
                epoch,
            } => {
                let kt = &self.runtimes[runtime as usize].kthreads[usize::from(kthread)];
                if kt.epoch == epoch && matches!(kt.run, Run::Waking { .. }) {
                    self.start_next(runtime as usize, kthread);
                }
                Ok(())
            }
            Event::Complete {
                runtime,
                kthread,
                epoch,
            } => self.complete(runtime as usize, kthread, epoch),
            Event::ParkSeen {
                runtime,
                kthread,
                epoch,
            } => {
                let runtime = runtime as usize;
                let kt = &self.runtimes[runtime].kthreads[usize::from(kthread)];
                if kt.epoch != epoch || !matches!(kt.run, Run::Spinning { .. }) {
                    return Ok(());
                }
                self.park(runtime, kthread);
                let id = self.runtimes[runtime].id;
                self.policy
                    .kthread_parked(id, KthreadIndex(kthread), self.now, &mut self.decisions)
                    .map_err(|e| format!("kthread_parked: {e}"))?;
                self.carry_out()
            }
            Event::PreemptTakesEffect {
                runtime,
                kthread,
                sequence,
            } => {
                let runtime = runtime as usize;
                let kt = &self.runtimes[runtime].kthreads[usize::from(kthread)];
                if kt.preempt_sequence != sequence || !kt.preempting || kt.run == Run::Parked {
                    return Ok(());
                }
                self.stop_preempted(runtime, kthread, false)?;
                self.carry_out()
            }
            Event::Sample => {
                self.metrics
                    .sample(self.now, self.lc_cores, self.batch_cores, self.lc_queued);
                let next = self.now + self.config.sample_every_ns;
                if next <= self.config.duration_ns {
                    self.events.schedule(next, Event::Sample);
                }
                Ok(())
            }
        }
    }

    /// The daemon's pass: sweep, ask for cores for stranded work, run the policy.
    fn pass(&mut self) -> Result<(), String> {
        for index in 0..self.runtimes.len() {
            let runtime = &mut self.runtimes[index];
            runtime.requested_this_pass = false;
            if runtime.active.is_empty() {
                if runtime.has_work() {
                    let id = runtime.id;
                    self.policy
                        .parked_with_work(id, self.now, &mut self.decisions)
                        .map_err(|e| format!("parked_with_work: {e}"))?;
                }
                continue;
            }
            self.sweep.clear();
            let batch = !runtime.latency_critical();
            for &kthread in &runtime.active {
                let kt = &runtime.kthreads[usize::from(kthread)];
                self.sweep.push(KthreadQueues {
                    kthread: KthreadIndex(kthread),
                    queues: QueueSnapshot {
                        run_queue: if batch {
                            BATCH_RUN_QUEUE
                        } else {
                            kt.run_queue.positions()
                        },
                        ingress: kt.ingress.positions(),
                    },
                });
            }
            self.policy
                .observe_runtime(runtime.id, &self.sweep)
                .map_err(|e| format!("observe_runtime: {e}"))?;
        }
        self.policy
            .run_pass(self.now, &mut self.decisions)
            .map_err(|e| format!("run_pass: {e}"))?;
        self.carry_out()?;
        self.events
            .schedule(self.now + self.charges.interval, Event::Pass);
        Ok(())
    }

    fn arrival(&mut self, index: usize) -> Result<(), String> {
        let service = u64::from(self.config.service.sample(&mut self.rng));
        let request = self
            .requests
            .arrive(self.now, self.charges.net_core, service);
        self.metrics.arrived += 1;
        let runtime = &mut self.runtimes[index];
        let target = match runtime.active.len() {
            0 => 0,
            n => runtime.active[self.rng.usize(..n)],
        };
        runtime.kthreads[usize::from(target)].ingress.push(request);
        runtime.queued += 1;
        self.lc_queued += 1;
        self.work_appeared(index, target);
        let runtime = &mut self.runtimes[index];
        if runtime.active.is_empty() && !runtime.requested_this_pass {
            runtime.requested_this_pass = true;
            let id = runtime.id;
            self.policy
                .pending_work(id, self.now, &mut self.decisions)
                .map_err(|e| format!("pending_work: {e}"))?;
            self.carry_out()?;
        }
        if let Some(arrivals) = &self.runtimes[index].arrivals
            && let Some(at) = arrivals.next_after(self.now, &mut self.rng)
            && at < self.config.duration_ns
        {
            self.events.schedule(
                at,
                Event::Arrival {
                    runtime: index as u32,
                },
            );
        }
        Ok(())
    }

    /// Work was queued on `target`: it takes it if it is spinning, else a spinning sibling
    /// steals it.
    fn work_appeared(&mut self, index: usize, target: u16) {
        let runtime = &self.runtimes[index];
        let taker = if matches!(
            runtime.kthreads[usize::from(target)].run,
            Run::Spinning { .. }
        ) {
            Some(target)
        } else {
            runtime.spinning.last().copied()
        };
        if let Some(kthread) = taker {
            self.start_next(index, kthread);
        }
    }

    fn complete(&mut self, index: usize, kthread: u16, epoch: u32) -> Result<(), String> {
        let kt = &self.runtimes[index].kthreads[usize::from(kthread)];
        let Run::Busy {
            request, started, ..
        } = kt.run
        else {
            return Ok(());
        };
        if kt.epoch != epoch {
            return Ok(());
        }
        let done = self.requests.complete(request)?;
        self.metrics
            .useful(started + self.charges.dispatch + done.overhead, self.now);
        self.metrics
            .record_latency(self.now - done.arrival + self.charges.net_latency);
        self.start_next(index, kthread);
        Ok(())
    }

    /// A running kthread looks for its next request: its own queues, then its siblings'. With
    /// none it spins, and parks after the park cost.
    fn start_next(&mut self, index: usize, kthread: u16) {
        let runtime = &mut self.runtimes[index];
        let k = usize::from(kthread);
        let core = runtime.kthreads[k]
            .run
            .core()
            .expect("only a kthread on a core looks for work");
        if let Some(position) = runtime.spinning.iter().position(|&s| s == kthread) {
            runtime.spinning.swap_remove(position);
        }
        if !runtime.latency_critical() {
            runtime.kthreads[k].run = Run::Batch { core };
            runtime.kthreads[k].next_epoch();
            return;
        }
        let mut taken = runtime.kthreads[k].pop_own();
        if taken.is_none() && runtime.queued > 0 {
            let n = runtime.kthreads.len();
            for offset in 1..n {
                taken = runtime.kthreads[(k + offset) % n].pop_own();
                if taken.is_some() {
                    break;
                }
            }
        }
        let kt = &mut runtime.kthreads[k];
        let epoch = kt.next_epoch();
        match taken {
            Some(request) => {
                runtime.queued -= 1;
                self.lc_queued -= 1;
                kt.run = Run::Busy {
                    core,
                    request,
                    started: self.now,
                };
                let r = self.requests.get(request);
                let ends = self.now + self.charges.dispatch + r.overhead + r.remaining;
                self.events.schedule(
                    ends,
                    Event::Complete {
                        runtime: index as u32,
                        kthread,
                        epoch,
                    },
                );
            }
            None => {
                kt.run = Run::Spinning { core };
                runtime.spinning.push(kthread);
                self.events.schedule(
                    self.now + self.charges.park,
                    Event::ParkSeen {
                        runtime: index as u32,
                        kthread,
                        epoch,
                    },
                );
            }
        }
    }

    /// A kthread asked for its core stops (or was demoted, `overdue`): the request it ran goes
    /// back on its run queue, it parks, and the daemon reports it. The decisions this leads to
    /// are left for the caller to carry out (it may be carrying out decisions already).
    fn stop_preempted(&mut self, index: usize, kthread: u16, overdue: bool) -> Result<(), String> {
        self.park(index, kthread);
        let id = self.runtimes[index].id;
        let k = KthreadIndex(kthread);
        if overdue {
            self.policy
                .preemption_completed(id, k, self.now, &mut self.decisions)
                .map_err(|e| format!("preemption_completed: {e}"))?;
        } else {
            self.policy
                .kthread_parked(id, k, self.now, &mut self.decisions)
                .map_err(|e| format!("kthread_parked: {e}"))?;
        }
        let runtime = &self.runtimes[index];
        if !runtime.latency_critical() || runtime.kthreads[usize::from(kthread)].has_own_work() {
            self.policy
                .parked_with_work(id, self.now, &mut self.decisions)
                .map_err(|e| format!("parked_with_work: {e}"))?;
        }
        if self.runtimes[index].queued > 0 {
            self.work_appeared(index, kthread);
        }
        Ok(())
    }

    /// Takes a kthread off its core: an interrupted request goes back on its run queue, and the
    /// core's time is accounted.
    fn park(&mut self, index: usize, kthread: u16) {
        let runtime = &mut self.runtimes[index];
        let kt = &mut runtime.kthreads[usize::from(kthread)];
        let Some(core) = kt.run.core() else {
            return;
        };
        if let Run::Busy {
            request, started, ..
        } = kt.run
        {
            let request_state = self.requests.get_mut(request);
            let ran = self.now.saturating_sub(started + self.charges.dispatch);
            let overhead_done = ran.min(request_state.overhead);
            let service_start = started + self.charges.dispatch + request_state.overhead;
            let done = (ran - overhead_done).min(request_state.remaining);
            request_state.overhead -= overhead_done;
            request_state.remaining -= done;
            self.metrics.useful(service_start, service_start + done);
            kt.run_queue.push(request);
            runtime.queued += 1;
            self.lc_queued += 1;
        }
        kt.run = Run::Parked;
        kt.preempting = false;
        kt.next_epoch();
        if let Ok(position) = runtime.active.binary_search(&kthread) {
            runtime.active.remove(position);
        }
        if let Some(position) = runtime.spinning.iter().position(|&s| s == kthread) {
            runtime.spinning.swap_remove(position);
        }
        let lc = runtime.latency_critical();
        let held = &mut self.cores[usize::from(core)];
        self.metrics.core_held(lc, held.since, self.now);
        held.occupant = None;
        if lc {
            self.lc_cores -= 1;
        } else {
            self.batch_cores -= 1;
        }
    }

    /// Carries out the decisions made so far and those they lead to.
    fn carry_out(&mut self) -> Result<(), String> {
        while !self.decisions.is_empty() {
            std::mem::swap(&mut self.decisions, &mut self.executing);
            for position in 0..self.executing.len() {
                let decision = self.executing[position];
                self.carry_out_one(decision)?;
            }
            self.executing.clear();
        }
        Ok(())
    }

    fn index_of(&self, id: RuntimeId) -> Result<usize, String> {
        self.index_of_slot
            .get(id.slot() as usize)
            .map(|&index| index as usize)
            .filter(|&index| self.ids.get(index) == Some(&id))
            .ok_or_else(|| format!("decision names unknown {id}"))
    }

    fn carry_out_one(&mut self, decision: Decision) -> Result<(), String> {
        match decision {
            Decision::Wake {
                runtime,
                kthread,
                core,
            } => {
                let index = self.index_of(runtime)?;
                let slot = self
                    .cores
                    .get_mut(core.index())
                    .ok_or_else(|| format!("wake on unknown core {}", core.0))?;
                if let Some(occupant) = slot.occupant {
                    return Err(format!(
                        "core {} double-booked: given to {runtime} kthread {} while {occupant:?} holds it",
                        core.0, kthread.0
                    ));
                }
                let reallocation = slot.last_runtime.is_some_and(|last| last as usize != index);
                slot.occupant = Some((index as u32, kthread.0));
                slot.since = self.now;
                slot.last_runtime = Some(index as u32);
                self.metrics.grants += 1;
                self.metrics.reallocations += u64::from(reallocation);
                let sim_runtime = &mut self.runtimes[index];
                let kt = sim_runtime
                    .kthreads
                    .get_mut(kthread.index())
                    .ok_or_else(|| format!("wake for unknown kthread {}", kthread.0))?;
                if kt.run != Run::Parked {
                    return Err(format!(
                        "{runtime} kthread {} woken on core {} while {:?}",
                        kthread.0, core.0, kt.run
                    ));
                }
                kt.run = Run::Waking { core: core.0 };
                kt.preempting = false;
                let epoch = kt.next_epoch();
                if let Err(position) = sim_runtime.active.binary_search(&kthread.0) {
                    sim_runtime.active.insert(position, kthread.0);
                }
                if sim_runtime.latency_critical() {
                    self.lc_cores += 1;
                } else {
                    self.batch_cores += 1;
                }
                let delay = self.charges.grant + self.charges.handover * u64::from(reallocation);
                self.events.schedule(
                    self.now + delay,
                    Event::KthreadRuns {
                        runtime: index as u32,
                        kthread: kthread.0,
                        epoch,
                    },
                );
                Ok(())
            }
            Decision::Preempt {
                victim_runtime,
                victim_kthread,
                core,
                ..
            } => {
                let index = self.index_of(victim_runtime)?;
                let kt = &mut self.runtimes[index].kthreads[victim_kthread.index()];
                if kt.run.core() != Some(core.0) {
                    return Err(format!(
                        "preemption of {victim_runtime} kthread {} on core {}, which it is not on ({:?})",
                        victim_kthread.0, core.0, kt.run
                    ));
                }
                kt.preempting = true;
                kt.preempt_sequence = kt.preempt_sequence.wrapping_add(1);
                self.metrics.preemptions += 1;
                let sequence = kt.preempt_sequence;
                self.events.schedule(
                    self.now + self.charges.stop,
                    Event::PreemptTakesEffect {
                        runtime: index as u32,
                        kthread: victim_kthread.0,
                        sequence,
                    },
                );
                Ok(())
            }
            Decision::PreemptionOverdue {
                victim_runtime,
                victim_kthread,
                ..
            } => {
                let index = self.index_of(victim_runtime)?;
                if self.runtimes[index].kthreads[victim_kthread.index()].run == Run::Parked {
                    return Ok(());
                }
                self.stop_preempted(index, victim_kthread.0, true)
            }
        }
    }

    /// The policy's contract, and the simulator's bookkeeping against the policy's views: who
    /// is on each core, which kthreads are active, and the request counts.
    fn audit(&self) -> Result<(), String> {
        check_contract(&*self.policy, &self.ids)?;
        for (core, held) in self.cores.iter().enumerate() {
            let view = self
                .policy
                .core(corral_policy::CoreId(core as u16))
                .map_err(|e| e.to_string())?;
            let policy_says = match view.occupancy {
                CoreOccupancy::Idle => None,
                CoreOccupancy::Running { runtime, kthread }
                | CoreOccupancy::HandingOver {
                    runtime, kthread, ..
                } => Some((self.index_of(runtime)? as u32, kthread.0)),
            };
            if policy_says != held.occupant {
                return Err(format!(
                    "core {core}: the policy has {policy_says:?} on it, the machine {:?}",
                    held.occupant
                ));
            }
        }
        let mut busy = 0;
        let mut queued_total = 0;
        for runtime in &self.runtimes {
            let mut queued = 0;
            for (k, kt) in runtime.kthreads.iter().enumerate() {
                let place = self
                    .policy
                    .kthread(runtime.id, KthreadIndex(k as u16))
                    .map_err(|e| e.to_string())?
                    .place;
                let expected = kt.run.core().map(|core| KthreadPlace::Active {
                    core: corral_policy::CoreId(core),
                });
                let active = matches!(place, KthreadPlace::Active { .. });
                if (expected.is_some() && expected != Some(place)) || (expected.is_none() && active)
                {
                    return Err(format!(
                        "{} kthread {k}: the policy has it {place:?}, the machine {:?}",
                        runtime.id, kt.run
                    ));
                }
                if active != runtime.active.binary_search(&(k as u16)).is_ok() {
                    return Err(format!("{} kthread {k}: active list is stale", runtime.id));
                }
                queued += (kt.ingress.len() + kt.run_queue.len()) as u64;
                busy += u64::from(matches!(kt.run, Run::Busy { .. }));
            }
            if queued != runtime.queued {
                return Err(format!(
                    "{}: {queued} requests queued, counted {}",
                    runtime.id, runtime.queued
                ));
            }
            if !runtime.spinning.is_empty() && runtime.queued > 0 {
                return Err(format!(
                    "{}: a kthread spins while {} requests wait",
                    runtime.id, runtime.queued
                ));
            }
            queued_total += queued;
        }
        if queued_total != self.lc_queued || queued_total + busy != self.requests.live() {
            return Err(format!(
                "{queued_total} queued + {busy} running, but {} requests in flight ({} counted queued)",
                self.requests.live(),
                self.lc_queued
            ));
        }
        if self.metrics.arrived != self.metrics.completed + self.requests.live() {
            return Err(format!(
                "{} arrived, {} completed, {} in flight",
                self.metrics.arrived,
                self.metrics.completed,
                self.requests.live()
            ));
        }
        Ok(())
    }
}
