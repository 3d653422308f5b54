//! The core driver: feeds the allocator what the runtimes' command rings, queues, shared queues
//! and timers say, and carries out its decisions on the runtimes' threads (pin and wake, signal
//! a preemption, demote a kthread that ignored one, move a departing runtime's threads off the
//! managed cores). A runtime whose thread cannot be reached, or whose rings say something
//! impossible, is marked for eviction in the registry.

use std::collections::HashSet;
use std::path::Path;

use corral_abi::control::PreemptionMode;
use corral_abi::{Command, RingKind, Slot, flags};
use log::{error, warn};

use super::handoff::{HandoffStats, Handoffs};
use super::kick::Stall;
use super::net;
use super::registry::{Kthread, Registry, Tenant};
use crate::config::{Config, Handover};
use crate::sys::{self, now_ns};
use corral_policy::{
    AllocError, Decision, KthreadIndex, KthreadPlace, KthreadQueues, Policy, QueueSnapshot,
    RingPositions, RuntimeId, RuntimeSpec,
};

/// What the core driver has done, for the statistics.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DriverCounters {
    pub(super) demotions: u64,
    pub(super) stale_commands: u64,
    pub(super) wakes: u64,
    pub(super) preemptions_signalled: u64,
    /// Of those, signals sent with no grace period (the runtime's mode, or a grace of 0).
    pub(super) preemptions_signalled_at_once: u64,
    pub(super) timer_wakeups: u64,
    /// Kthreads that gave back a core (`Park`, or `Yielded` after a preemption).
    pub(super) parks: u64,
    /// Preemptions the kthread answered within the grace period, with no signal.
    pub(super) cedes_cooperative: u64,
    /// Preemption signals sent with no `Preempt`, for network work or timers (see `kick`).
    pub(super) kicks: u64,
    /// Cores taken from a kthread by waking the taker on top of it: an idle-class kthread at
    /// once, with no signal; another once it missed its grace period (see `signal_preemption`).
    pub(super) taken_in_place: u64,
    /// Of those, cores taken from a kthread that missed its grace period, for a taker that
    /// runs above it.
    pub(super) taken_in_place_after_grace: u64,
}

/// How soon a runtime with work and no core is to get one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CoreRequest {
    /// At once, taking a core from a runtime over its guarantee if need be (a frame arrived).
    Now,
    /// The next idle core, taking none from anybody (work left behind by a parked kthread).
    WhenIdle,
}

/// The allocator, what feeds it and what carries out its decisions.
pub(super) struct CoreDriver {
    alloc: Box<dyn Policy>,
    decisions: Vec<Decision>,
    /// One runtime's active kthreads' queue counters, swept for the policy; reused every pass.
    sweep: Vec<KthreadQueues>,
    /// Decisions being carried out, while those they lead to collect in `decisions`.
    executing: Vec<Decision>,
    /// Latest time handed to the allocator, which refuses time going back.
    clock: u64,
    counters: DriverCounters,
    /// Per managed core: the runtime it was promised to by a preemption, and when. The wake
    /// that completes the handover tells the kthread this time as the moment its core was
    /// decided, so that the runtime can measure the whole preemption.
    promised: Vec<Option<(RuntimeId, u64)>>,
    /// How long a bare TCP ACK may wait for a runtime that said it can (`ack_wait_us`).
    ack_wait_ns: u64,
    /// Per managed core: taken in place from an idle-class kthread that still runs there, so
    /// the next wake on it goes from the loop (see `take_in_place`).
    held_in_place: Vec<bool>,
    managed_cores: Vec<usize>,
    spare_cpus: Vec<usize>,
    preemption_timeout_us: u64,
    /// The helpers that wake granted kthreads on their own core (`handover = "local"`).
    handoffs: Option<Handoffs>,
    /// How long a kthread asked to give up its core may take before it is signalled.
    cede_grace_ns: u64,
    /// Preemptions asked for and not signalled yet: the victim, and when to signal it.
    pending_cedes: Vec<(RuntimeId, KthreadIndex, u64)>,
    /// Shielding is on: latency-critical kthreads run at SCHED_FIFO on the managed cores.
    realtime_kthreads: bool,
    /// Runtimes whose kthreads run at SCHED_FIFO when shielding is on: those with guaranteed
    /// cores and no spinning kthreads.
    latency_critical: HashSet<RuntimeId>,
    /// Kthreads (by tid) iokerneld put at SCHED_FIFO and has not taken back out of it.
    realtime_tids: HashSet<i32>,
}

/// The scheduling class a kthread runs in on a managed core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KthreadClass {
    /// SCHED_OTHER, sharing the CPU with Linux's threads.
    Fair,
    /// SCHED_IDLE: runs only when the CPU has nothing else (a runtime of
    /// `PreemptionMode::IdleClass`).
    Idle,
    /// SCHED_FIFO at [`crate::shield::KTHREAD_PRIORITY`]: no ordinary thread preempts it.
    Realtime,
}

impl CoreDriver {
    /// A driver of `alloc` over `config.managed_cores`; with `handover = "local"` it starts a
    /// helper thread on each managed core.
    pub(super) fn new(alloc: Box<dyn Policy>, config: &Config) -> std::io::Result<Self> {
        let clock = now_ns().max(alloc.now());
        let handoffs = match config.handover {
            Handover::Local => Some(Handoffs::start(
                &config.managed_cores,
                config.helper_spin_max_us * 1000,
            )?),
            Handover::Remote => None,
        };
        Ok(CoreDriver {
            alloc,
            decisions: Vec::with_capacity(64),
            sweep: Vec::with_capacity(corral_abi::MAX_KTHREADS),
            executing: Vec::with_capacity(64),
            clock,
            counters: DriverCounters::default(),
            promised: vec![None; config.managed_cores.len()],
            held_in_place: vec![false; config.managed_cores.len()],
            ack_wait_ns: config.ack_wait_us * 1000,
            managed_cores: config.managed_cores.clone(),
            spare_cpus: config.spare_cpus.clone(),
            preemption_timeout_us: config.preemption_timeout_us,
            handoffs,
            cede_grace_ns: config.cede_grace_us * 1000,
            pending_cedes: Vec::with_capacity(config.managed_cores.len()),
            realtime_kthreads: config.shield,
            latency_critical: HashSet::new(),
            realtime_tids: HashSet::new(),
        })
    }

    /// Each managed core's hand-over counters (empty with `handover = "remote"`).
    pub(super) fn handoff_stats(&self) -> Vec<HandoffStats> {
        self.handoffs
            .as_ref()
            .map(|h| h.stats())
            .unwrap_or_default()
    }

    /// Sends the preemption signal to every kthread whose grace period ran out, and delivers
    /// grants that a helper left unclaimed too long, as of the loop's time `now`. Cheap when
    /// there is nothing to do.
    pub(super) fn chase_handovers(&mut self, registry: &mut Registry, now: u64) {
        if let Some(h) = &mut self.handoffs {
            h.deliver_overdue(now);
        }
        let mut i = 0;
        while i < self.pending_cedes.len() {
            let (runtime, kthread, deadline) = self.pending_cedes[i];
            if now < deadline {
                i += 1;
                continue;
            }
            self.pending_cedes.swap_remove(i);
            self.signal_preemption(registry, runtime, kthread, deadline);
        }
    }

    /// Sends the preemption signal to a kthread still asked to give up its core (one that
    /// parked meanwhile, or left, is not signalled). If the core was promised to a runtime
    /// whose kthreads run above the victim's class, the core is also taken in place: the
    /// taker need not wait for the victim to park.
    fn signal_preemption(
        &mut self,
        registry: &mut Registry,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        deadline: u64,
    ) {
        let taker_above = self.taker_runs_above(registry, runtime, kthread);
        let Some(entry) = registry.get_mut(runtime).filter(|r| !r.evicting) else {
            return;
        };
        let pid = entry.pid;
        let Some(kt) = entry.kthreads.get_mut(kthread.index()) else {
            return;
        };
        if kt.cede_deadline != Some(deadline) {
            return;
        }
        kt.cede_deadline = None;
        match sys::tgkill(pid, kt.tid, libc::SIGUSR1) {
            Ok(()) => {
                entry.counters.preempt_signals += 1;
                self.counters.preemptions_signalled += 1;
                let now = self.now();
                match taker_above {
                    // A kthread that missed its grace period is most likely not running at all
                    // (a fair thread holds the CPU), so the signal reaches it only when Linux
                    // next runs it: milliseconds in the fair class. The taker, woken now,
                    // preempts it at once, and it parks when it next runs, at the signal.
                    Some(core) => {
                        let kt = &mut entry.kthreads[kthread.index()];
                        kt.preempt_sent_at = None;
                        entry.counters.taken_in_place_after_grace += 1;
                        self.counters.taken_in_place_after_grace += 1;
                        self.take_in_place(entry, kthread, core, now);
                    }
                    None => entry.kthreads[kthread.index()].preempt_sent_at = Some(now),
                }
            }
            Err(e) => registry.mark_for_eviction(
                runtime,
                format!(
                    "cannot preempt kthread {}: tgkill(SIGUSR1) failed: {e}",
                    kthread.0
                ),
            ),
        }
    }

    /// The core a preempted kthread holds, if it was promised to a runtime whose kthreads run
    /// in a class above the victim's (a latency-critical runtime at SCHED_FIFO over a fair or
    /// idle-class batch kthread): there Linux lets the taker run at once over the victim.
    fn taker_runs_above(
        &self,
        registry: &Registry,
        victim: RuntimeId,
        kthread: KthreadIndex,
    ) -> Option<corral_policy::CoreId> {
        let Ok(KthreadPlace::Active { core }) =
            self.alloc.kthread(victim, kthread).map(|k| k.place)
        else {
            return None;
        };
        let (taker, _) = self.promised.get(core.index()).copied().flatten()?;
        let victim_class = self.class_for(victim, registry.get(victim)?.preemption);
        let taker_class = self.class_for(taker, registry.get(taker)?.preemption);
        (taker_class == KthreadClass::Realtime && victim_class != KthreadClass::Realtime)
            .then_some(core)
    }

    /// How long a bare TCP ACK may wait on the ring of a runtime that said it can.
    pub(super) fn ack_wait_ns(&self) -> u64 {
        self.ack_wait_ns
    }

    /// The time, never earlier than a time already handed to the allocator.
    pub(super) fn now(&mut self) -> u64 {
        self.clock = self.clock.max(now_ns());
        self.clock
    }

    /// The latest time handed to the allocator.
    pub(super) fn clock(&self) -> u64 {
        self.clock
    }

    /// The allocator, to read its state.
    pub(super) fn alloc(&self) -> &dyn Policy {
        &*self.alloc
    }

    pub(super) fn counters(&self) -> DriverCounters {
        self.counters
    }

    /// Registers a runtime with the allocator.
    pub(super) fn register(&mut self, spec: RuntimeSpec) -> Result<RuntimeId, String> {
        let now = self.now();
        let id = self.alloc.register(spec, now).map_err(|e| e.to_string())?;
        if spec.guaranteed_cores > 0 {
            self.latency_critical.insert(id);
        }
        Ok(id)
    }

    /// The class a kthread of `runtime` runs in on a managed core. A spinning kthread never
    /// parks, so at SCHED_FIFO it would shut every other thread out of its CPU but for the fair
    /// server's share: a runtime with spinning kthreads stays in the fair class, all of it.
    fn class_for(&self, runtime: RuntimeId, preemption: PreemptionMode) -> KthreadClass {
        if preemption == PreemptionMode::IdleClass {
            KthreadClass::Idle
        } else if self.realtime_kthreads && self.latency_critical.contains(&runtime) {
            KthreadClass::Realtime
        } else {
            KthreadClass::Fair
        }
    }

    /// Grants a new runtime's spinning kthreads their guaranteed cores at once.
    pub(super) fn grant_spinning(&mut self, id: RuntimeId, kthreads: u16) -> Result<(), String> {
        self.latency_critical.remove(&id);
        let now = self.now();
        self.alloc
            .grant_guaranteed(id, kthreads, now, &mut self.decisions)
            .map(|_| ())
            .map_err(|e| format!("cannot grant its spinning kthreads' cores: {e}"))
    }

    /// Asks a core for a runtime that has work and no core.
    pub(super) fn request_core(&mut self, id: RuntimeId, how: CoreRequest) {
        let now = self.now();
        let result = match how {
            CoreRequest::Now => self.alloc.pending_work(id, now, &mut self.decisions),
            CoreRequest::WhenIdle => self.alloc.parked_with_work(id, now, &mut self.decisions),
        };
        if let Err(e) = result {
            error!("{how:?} core request refused for {id}: {e}");
        }
    }

    /// Counts runtime `id` as congested in the current pass: work is waiting for it now (frames
    /// held in its backlog) and the pass need not wait an interval to see it.
    pub(super) fn report_congestion(&mut self, id: RuntimeId) {
        if let Err(e) = self.alloc.report_congestion(id) {
            error!("congestion report refused for {id}: {e}");
        }
    }

    /// Drains every registered kthread's egress command ring.
    pub(super) fn drain_commands(&mut self, registry: &mut Registry) {
        for slot in 0..registry.slots() {
            let Some(runtime) = registry.live_at_mut(slot) else {
                continue;
            };
            if let Err(reason) = drain_runtime(self, runtime) {
                let id = runtime.id;
                registry.mark_for_eviction(id, reason);
            }
        }
    }

    /// One allocation pass: observe queues, shared queues and timers, then run the allocator.
    pub(super) fn pass(&mut self, registry: &mut Registry) {
        let now = self.now();
        for slot in 0..registry.slots() {
            let Some(runtime) = registry.live_at_mut(slot) else {
                continue;
            };
            if let Err(reason) = observe_runtime(self, runtime, now) {
                let id = runtime.id;
                registry.mark_for_eviction(id, reason);
            }
        }
        if let Err(e) = self.alloc.run_pass(now, &mut self.decisions) {
            error!("allocation pass refused: {e}");
        }
    }

    /// Carries out the decisions made so far and those they lead to; returns whether there
    /// were any.
    pub(super) fn carry_out_decisions(&mut self, registry: &mut Registry) -> bool {
        if self.decisions.is_empty() {
            return false;
        }
        while !self.decisions.is_empty() {
            std::mem::swap(&mut self.decisions, &mut self.executing);
            for i in 0..self.executing.len() {
                let decision = self.executing[i];
                self.carry_out(decision, registry);
            }
            self.executing.clear();
        }
        true
    }

    /// Carries out one decision. A runtime whose kthread cannot be reached is evicted.
    fn carry_out(&mut self, decision: Decision, registry: &mut Registry) {
        log::debug!("{decision:?}");
        match decision {
            Decision::Wake {
                runtime,
                kthread,
                core,
            } => {
                let cpu = self.managed_cores[core.index()];
                let promised = self.promised[core.index()].take();
                let decided = match promised {
                    Some((to, at)) if to == runtime => at,
                    _ => self.now(),
                };
                let Some(entry) = registry.get_mut(runtime).filter(|r| !r.evicting) else {
                    return;
                };
                let Some(kt) = entry.kthreads.get_mut(kthread.index()) else {
                    return;
                };
                kt.view.publish_wake_decision(decided);
                // It runs again: it reads whatever waited on its rings, and new bare ACKs ask
                // for a core like anything else until it parks again.
                entry.stop_acks_waiting();
                let class = self.class_for(runtime, entry.preemption);
                let idle_class = class == KthreadClass::Idle;
                let kt = &mut entry.kthreads[kthread.index()];
                let over_idle_class = std::mem::take(&mut self.held_in_place[core.index()]);
                if kt.in_place {
                    // Still on its CPU and runnable since its core was taken in place: it
                    // needs only to be where the grant says.
                    kt.in_place = false;
                    match place(kt, cpu, class, &mut self.realtime_tids) {
                        Ok(()) => {
                            if let Some(h) = &self.handoffs {
                                h.set_occupied(core.index(), true, idle_class);
                            }
                            self.counters.wakes += 1;
                            net::refresh_active(&*self.alloc, entry);
                        }
                        Err(e) => registry.mark_for_eviction(
                            runtime,
                            format!("cannot move kthread {} to CPU {cpu}: {e}", kthread.0),
                        ),
                    }
                    return;
                }
                match wake(kt, cpu, class, &mut self.realtime_tids) {
                    Ok(()) => {
                        let word = kt.view.wake_word();
                        match &mut self.handoffs {
                            Some(h) => {
                                // Occupied first: the helper must not take the woken kthread's
                                // first moments for an idle core.
                                h.set_occupied(core.index(), true, idle_class);
                                if over_idle_class {
                                    // The CPU still runs the kthread the core was taken from,
                                    // in the idle class like the helper: a post would wait
                                    // for its slice to end.
                                    h.deliver_from_loop(core.index(), word);
                                } else {
                                    h.deliver(core.index(), word, now_ns());
                                }
                            }
                            None => sys::futex_wake_shared(word.as_ptr() as u64),
                        }
                        self.counters.wakes += 1;
                        net::refresh_active(&*self.alloc, entry);
                    }
                    Err(e) => registry.mark_for_eviction(
                        runtime,
                        format!("cannot wake kthread {} on CPU {cpu}: {e}", kthread.0),
                    ),
                }
            }
            Decision::Preempt {
                victim_runtime,
                victim_kthread,
                core,
                for_runtime,
            } => {
                let now = self.now();
                self.promised[core.index()] = Some((for_runtime, now));
                let taker_idle_class = registry
                    .get(for_runtime)
                    .is_some_and(|r| r.preemption == PreemptionMode::IdleClass);
                let Some(entry) = registry.get_mut(victim_runtime).filter(|r| !r.evicting) else {
                    return;
                };
                if entry.preemption == PreemptionMode::IdleClass && !taker_idle_class {
                    self.take_in_place(entry, victim_kthread, core, now);
                    return;
                }
                let pid = entry.pid;
                // A runtime that cannot cede in time is signalled at once; no runtime gets
                // more than the daemon's grace.
                let grace = entry.preemption.cede_grace_ns(self.cede_grace_ns);
                let Some(kt) = entry.kthreads.get_mut(victim_kthread.index()) else {
                    return;
                };
                // The request goes on the ingress ring, which the kthread polls every time its
                // scheduler runs: one that gets there within the grace period parks by itself.
                let result = kt
                    .ingress
                    .push_control(Slot::value(Command::Preempt, 0))
                    .map_err(|_| "its ingress ring is full".to_owned())
                    .and_then(|()| {
                        // After the push: a kthread that sees the word move finds the command.
                        ring_cede_word(kt)?;
                        if grace == 0 {
                            sys::tgkill(pid, kt.tid, libc::SIGUSR1)
                                .map_err(|e| format!("tgkill(SIGUSR1) failed: {e}"))
                        } else {
                            Ok(())
                        }
                    });
                match result {
                    Ok(()) if grace != 0 => {
                        let deadline = now + grace;
                        kt.cede_deadline = Some(deadline);
                        self.pending_cedes
                            .push((victim_runtime, victim_kthread, deadline));
                    }
                    Ok(()) => {
                        kt.preempt_sent_at = Some(now);
                        entry.counters.preempt_signals += 1;
                        entry.counters.preempt_signals_at_once += 1;
                        self.counters.preemptions_signalled += 1;
                        self.counters.preemptions_signalled_at_once += 1;
                    }
                    Err(e) => registry.mark_for_eviction(
                        victim_runtime,
                        format!("cannot preempt kthread {}: {e}", victim_kthread.0),
                    ),
                }
            }
            Decision::PreemptionOverdue {
                victim_runtime,
                victim_kthread,
                core,
            } => {
                let cpu = self.managed_cores[core.index()];
                let spare = &self.spare_cpus;
                let Some(entry) = registry.get_mut(victim_runtime).filter(|r| !r.evicting) else {
                    return;
                };
                let label = entry.label();
                let Some(kt) = entry.kthreads.get_mut(victim_kthread.index()) else {
                    return;
                };
                kt.preempt_sent_at = None;
                kt.cede_deadline = None;
                if let Some(h) = &self.handoffs {
                    // Its core goes to someone else; the kthread itself may still run there
                    // (demoted to SCHED_IDLE) until it parks.
                    h.set_occupied(core.index(), false, false);
                }
                let how = demote(kt, spare, &mut self.realtime_tids);
                warn!(
                    "kthread {} (tid {}) of {} ignored preemption from CPU {cpu} for over {} us; \
                     {}",
                    victim_kthread.0,
                    kt.tid,
                    label,
                    self.preemption_timeout_us,
                    match &how {
                        Ok(how) => format!("demoted it ({how})"),
                        Err(e) => format!("could not demote it: {e}"),
                    }
                );
                entry.counters.demotions += 1;
                self.counters.demotions += 1;
                let now = self.now();
                if let Err(e) = self.alloc.preemption_completed(
                    victim_runtime,
                    victim_kthread,
                    now,
                    &mut self.decisions,
                ) {
                    error!("preemption_completed refused after a demotion: {e}");
                }
                net::refresh_active(&*self.alloc, entry);
            }
        }
    }

    /// Takes `core` from an idle-class kthread with no signal: the allocator sees the kthread
    /// park (with work left), so it wakes the taker on the core, and Linux runs the taker at
    /// once in the place of the kthread, which stays on the CPU, runnable, and runs again
    /// whenever the core has nothing else to run, until it is granted a core again (this one,
    /// with nothing to move, or another, where the grant moves it) or parks by itself.
    fn take_in_place(
        &mut self,
        entry: &mut Tenant,
        victim_kthread: KthreadIndex,
        core: corral_policy::CoreId,
        now: u64,
    ) {
        let victim_runtime = entry.id;
        if let Some(kt) = entry.kthreads.get_mut(victim_kthread.index()) {
            kt.in_place = true;
        }
        self.held_in_place[core.index()] = true;
        entry.counters.taken_in_place += 1;
        self.counters.taken_in_place += 1;
        if let Some(h) = &self.handoffs {
            h.set_occupied(core.index(), false, false);
        }
        let handed_over = self
            .alloc
            .preemption_completed(victim_runtime, victim_kthread, now, &mut self.decisions)
            .and_then(|()| {
                self.alloc
                    .parked_with_work(victim_runtime, now, &mut self.decisions)
            });
        if let Err(e) = handed_over {
            error!("allocator refused a hand-over in place from {victim_runtime}: {e}");
        }
        net::refresh_active(&*self.alloc, entry);
    }

    /// Moves a departing runtime's threads off the managed cores and has the allocator reclaim
    /// its cores.
    pub(super) fn release(&mut self, runtime: &mut Tenant) {
        let id = runtime.id;
        let label = runtime.label();
        for (index, kt) in runtime.kthreads.iter_mut().enumerate() {
            let place = self
                .alloc
                .kthread(id, KthreadIndex(index as u16))
                .map(|k| k.place);
            let active = matches!(place, Ok(KthreadPlace::Active { .. }));
            if let (Some(h), Ok(KthreadPlace::Active { core })) = (&self.handoffs, place) {
                h.set_occupied(core.index(), false, false);
            }
            // Only threads that may run on a managed core need moving. A thread of a process
            // that is gone may have had its id recycled by now: only touch threads that are
            // still the runtime's.
            if (active || kt.pinned.is_some())
                && Path::new(&format!("/proc/{}/task/{}", runtime.pid, kt.tid)).exists()
                && let Err(e) = demote(kt, &self.spare_cpus, &mut self.realtime_tids)
                && !crate::cpus::is_gone(&e)
            {
                warn!("cannot demote tid {} of {label}: {e}", kt.tid);
            }
        }
        for kt in &runtime.kthreads {
            self.realtime_tids.remove(&kt.tid);
        }
        self.latency_critical.remove(&id);
        if let Err(e) = self.alloc.unregister(id, &mut self.decisions) {
            error!("allocator refused to unregister {id}: {e}");
        }
    }
}

/// Drains one runtime's command rings. An error is the runtime's fault and the reason to evict
/// it.
fn drain_runtime(driver: &mut CoreDriver, runtime: &mut Tenant) -> Result<(), String> {
    let id = runtime.id;
    for index in 0..runtime.kthreads.len() {
        // At most one ring's worth per iteration, so that a runtime refilling its ring as fast
        // as it is drained cannot keep the loop here.
        let capacity = runtime.kthreads[index].commands.capacity();
        for _ in 0..capacity {
            let Some(slot) = runtime.kthreads[index].commands.try_pop() else {
                break;
            };
            command(driver, runtime, id, index, slot)?;
        }
    }
    Ok(())
}

fn command(
    driver: &mut CoreDriver,
    runtime: &mut Tenant,
    id: RuntimeId,
    index: usize,
    slot: Slot,
) -> Result<(), String> {
    let kthread = KthreadIndex(index as u16);
    let bad = |e: AllocError| format!("kthread {index}: {e}");
    match slot.command_on(RingKind::EgressCommand) {
        Err(e) => Err(format!("kthread {index}, {}: {e}", RingKind::EgressCommand)),
        Ok(command @ (Command::Park | Command::Yielded)) => {
            let place = driver.alloc.kthread(id, kthread).map_err(bad)?.place;
            let KthreadPlace::Active { core } = place else {
                // A park from a kthread that was demoted or never woken: it has no core to give
                // back. A late answer to a preemption may still say that work was left behind,
                // and nothing else would ever get that work a core again.
                runtime.counters.stale_commands += 1;
                driver.counters.stale_commands += 1;
                // A kthread taken in place that parks now waits for a `Grant`.
                runtime.kthreads[index].in_place = false;
                if command == Command::Yielded && slot.flags() & flags::HAS_WORK != 0 {
                    let now = driver.now();
                    driver
                        .alloc
                        .parked_with_work(id, now, &mut driver.decisions)
                        .map_err(bad)?;
                }
                return Ok(());
            };
            log::debug!(
                "{id} kthread {index}: {command:?}, flags {:#x}",
                slot.flags()
            );
            let now = driver.now();
            if let Some(h) = &driver.handoffs {
                h.set_occupied(core.index(), false, false);
            }
            if runtime.kthreads[index].cede_deadline.take().is_some() {
                // It parked within the grace period: no signal was needed.
                runtime.counters.cedes_cooperative += 1;
                driver.counters.cedes_cooperative += 1;
            }
            if let Some(sent) = runtime.kthreads[index].preempt_sent_at.take() {
                let latency = now - sent;
                runtime.counters.preemption_latency_last_ns = latency;
                runtime.counters.preemption_latency_max_ns =
                    runtime.counters.preemption_latency_max_ns.max(latency);
                let seen = runtime.kthreads[index].view.preempt_seen_ns();
                runtime.handover.record(sent, seen, now);
            }
            driver
                .alloc
                .kthread_parked(id, kthread, now, &mut driver.decisions)
                .map_err(bad)?;
            driver.counters.parks += 1;
            net::refresh_active(&*driver.alloc, runtime);
            // Only the park that leaves the runtime with no kthread running decides; a park
            // read out of order, from a kthread that was not the last, says nothing.
            runtime.acks_can_wait = runtime.active.is_empty()
                && command == Command::Park
                && slot.flags() & flags::ACKS_CAN_WAIT != 0;
            // A frame steered to this kthread after its last look at the ring, but before its
            // park was read here, would otherwise wait for its next wake-up.
            let unread = net::rx_unread(&runtime.kthreads[index]);
            if command == Command::Yielded && (slot.flags() & flags::HAS_WORK != 0 || unread) {
                driver
                    .alloc
                    .parked_with_work(id, now, &mut driver.decisions)
                    .map_err(bad)?;
            } else if command == Command::Park && unread {
                driver
                    .alloc
                    .pending_work(id, now, &mut driver.decisions)
                    .map_err(bad)?;
            }
            Ok(())
        }
        Ok(Command::TimerDeadline) => {
            runtime.timer_deadline = slot.payload();
            Ok(())
        }
        Ok(Command::RxBufferPost) => net::post_rx_buffer(runtime, index, slot),
        Ok(other) => Err(format!(
            "kthread {index}: {other} is not handled on the {}",
            RingKind::EgressCommand
        )),
    }
}

/// Feeds one runtime's queues, shared queue and timer to the allocator.
fn observe_runtime(driver: &mut CoreDriver, runtime: &mut Tenant, now: u64) -> Result<(), String> {
    let id = runtime.id;
    if runtime
        .acks_waiting_since
        .is_some_and(|since| now.saturating_sub(since) >= driver.ack_wait_ns)
    {
        runtime.stop_acks_waiting();
        runtime.counters.ack_waits_expired += 1;
        driver
            .alloc
            .pending_work(id, now, &mut driver.decisions)
            .map_err(|e| format!("pending_work: {e}"))?;
    }
    // Allows one more immediate core request per pass for frames sent to a runtime that has
    // no core (see `deliver`).
    runtime.core_requested = false;
    let mut stale_lists = false;
    driver.sweep.clear();
    let pid = runtime.pid;
    // Work only a running kthread's scheduler picks up from a parked one: its due timers, and
    // frames left on its ring. The first running kthread is watched for it too (see `kick`).
    let mut stranded_timer: Option<u64> = None;
    let mut stranded_rx = false;
    let mut sent_while_parked = false;
    for (index, kt) in runtime.kthreads.iter_mut().enumerate() {
        let parked = !matches!(
            driver
                .alloc
                .kthread(id, KthreadIndex(index as u16))
                .map(|k| k.place),
            Ok(KthreadPlace::Active { .. })
        );
        if parked {
            if let Some(t) = kt.view.timer_deadline_ns() {
                stranded_timer = Some(stranded_timer.map_or(t, |s| s.min(t)));
            }
            stranded_rx |= net::rx_unread(kt);
            // A parked kthread drains its ingress ring while it waits for a grant, and answers
            // what it finds there (an echo request, a segment that needs an ACK), possibly after
            // its egress ring was last polled and found empty: such frames are picked up here,
            // within a pass, instead of at its next wake-up.
            if !kt.linger && !kt.packets.is_empty() {
                kt.linger = true;
                sent_while_parked = true;
            }
        }
    }
    if sent_while_parked {
        net::refresh_active(&*driver.alloc, runtime);
    }
    let mut watch_stranded = true;
    for (index, kt) in runtime.kthreads.iter_mut().enumerate() {
        let kthread = KthreadIndex(index as u16);
        let active = matches!(
            driver.alloc.kthread(id, kthread).map(|k| k.place),
            Ok(KthreadPlace::Active { .. })
        );
        // Every change of place is followed by a refresh; this only guards the steering lists
        // against a path that forgot, at no extra cost.
        stale_lists |= active != kt.active;
        if !active {
            kt.net_watch.stop();
            continue;
        }
        let queues = QueueSnapshot {
            run_queue: kt.positions.runq(),
            ingress: RingPositions::new(kt.ingress.position(), kt.positions.ingress_consumed()),
        };
        driver.sweep.push(KthreadQueues { kthread, queues });
        if kt.cede_deadline.is_some() || kt.preempt_sent_at.is_some() {
            // Being asked for its core: that request makes it run its scheduler anyway.
            kt.net_watch.stop();
            continue;
        }
        let (mut timer, mut rx_stranded) = (kt.view.timer_deadline_ns(), false);
        if std::mem::take(&mut watch_stranded) {
            timer = match (timer, stranded_timer) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            rx_stranded = stranded_rx;
        }
        if let Some(stall) = kt.net_watch.check(queues, timer, rx_stranded, now) {
            if let Err(e) = sys::tgkill(pid, kt.tid, libc::SIGUSR1) {
                // A kthread that exits (the runtime is shutting down) may still count as
                // holding its core until its connection closes: nothing to kick, and no
                // reason to evict. A runtime that is really gone is unregistered by its
                // hang-up.
                log::debug!("{id}: cannot kick kthread {index}: tgkill(SIGUSR1) failed: {e}");
                kt.net_watch.stop();
                continue;
            }
            driver.counters.kicks += 1;
            match stall {
                Stall::Ingress => runtime.counters.kicks_ingress += 1,
                Stall::Timer => runtime.counters.kicks_timer += 1,
                Stall::RunQueue => runtime.counters.kicks_run_queue += 1,
            }
        }
    }
    if !driver.sweep.is_empty() {
        match driver.alloc.observe_runtime(id, &driver.sweep) {
            Ok(()) => {}
            Err(e @ AllocError::ImpossibleQueue { .. }) => return Err(e.to_string()),
            Err(e) => error!("queue observation refused: {e}"),
        }
    }
    if stale_lists {
        net::refresh_active(&*driver.alloc, runtime);
    }

    let committed = driver
        .alloc
        .runtime(id)
        .map(|r| r.committed_cores())
        .map_err(|e| e.to_string())?;
    let shared = runtime.kthreads[0].positions.shared_queue();
    let mut wants_core = false;
    if shared.pending() != 0 && committed == 0 {
        if shared.produced != runtime.shared_last.produced {
            // New work handed in while the runtime holds no core: grant one at once, as for
            // a packet.
            wants_core = true;
        } else {
            // Work left behind when the runtime lost its last core: wait for an idle core
            // rather than take one straight back (see `parked_with_work`).
            driver
                .alloc
                .parked_with_work(id, now, &mut driver.decisions)
                .map_err(|e| e.to_string())?;
        }
    } else if shared.has_waited_since(runtime.shared_last) {
        driver
            .alloc
            .report_congestion(id)
            .map_err(|e| e.to_string())?;
    }
    runtime.shared_last = shared;
    if committed == 0 && runtime.timer_deadline <= now {
        wants_core = true;
        runtime.timer_deadline = u64::MAX;
        runtime.counters.timer_wakeups += 1;
        driver.counters.timer_wakeups += 1;
    }
    if wants_core {
        driver
            .alloc
            .pending_work(id, now, &mut driver.decisions)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Pins a kthread to `cpu` in its scheduling class (see [`place`]), tells it which core it
/// holds, and rings its wake word; the caller then wakes the futex (or has it woken).
fn wake(
    kt: &mut Kthread,
    cpu: usize,
    class: KthreadClass,
    realtime: &mut HashSet<i32>,
) -> Result<(), String> {
    place(kt, cpu, class, realtime)?;
    kt.ingress
        .push_control(Slot::value(Command::Grant, cpu as u64))
        .map_err(|_| "its ingress ring is full".to_owned())?;
    kt.view.publish_wake_sent(sys::now_ns());
    kt.view
        .wake_word()
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// Pins a kthread to `cpu` in `class` (restored if it was demoted). `realtime` holds the
/// kthreads at SCHED_FIFO.
fn place(
    kt: &mut Kthread,
    cpu: usize,
    class: KthreadClass,
    realtime: &mut HashSet<i32>,
) -> Result<(), String> {
    let current = if kt.idle_policy {
        KthreadClass::Idle
    } else if realtime.contains(&kt.tid) {
        KthreadClass::Realtime
    } else {
        KthreadClass::Fair
    };
    if current != class {
        let result = match class {
            KthreadClass::Realtime => {
                crate::shield::set_realtime(kt.tid, crate::shield::KTHREAD_PRIORITY)
            }
            KthreadClass::Idle => sys::set_idle_policy(kt.tid, true),
            KthreadClass::Fair => sys::set_idle_policy(kt.tid, false),
        };
        result.map_err(|e| format!("cannot set {class:?} class: {e}"))?;
        kt.idle_policy = class == KthreadClass::Idle;
        if class == KthreadClass::Realtime {
            realtime.insert(kt.tid);
        } else {
            realtime.remove(&kt.tid);
        }
    }
    if kt.pinned != Some(cpu) {
        corral_affinity::set_thread_affinity(kt.tid, &[cpu]).map_err(|e| e.to_string())?;
        kt.pinned = Some(cpu);
    }
    Ok(())
}

/// Moves a kthread's cede word on by one, checking that nobody else wrote it: the runtime
/// only reads it, so any other value is a runtime writing into iokerneld's line.
fn ring_cede_word(kt: &mut Kthread) -> Result<(), String> {
    use std::sync::atomic::Ordering;
    let next = kt.cede_rung.wrapping_add(1);
    kt.view
        .cede_word()
        .compare_exchange(kt.cede_rung, next, Ordering::SeqCst, Ordering::SeqCst)
        .map_err(|found| {
            format!(
                "its cede word reads {found:#x}, not the {:#x} iokerneld wrote: the runtime \
                 wrote into iokerneld's line",
                kt.cede_rung
            )
        })?;
    kt.cede_rung = next;
    Ok(())
}

/// Moves a kthread off the managed cores: onto the spare CPUs if there are any, else to
/// `SCHED_IDLE` where it runs only when its CPU has nothing else to do. Returns what was done.
/// A kthread at SCHED_FIFO leaves it either way: on the spare CPUs it would shut Linux's
/// threads out.
fn demote(
    kt: &mut Kthread,
    spare: &[usize],
    realtime: &mut HashSet<i32>,
) -> std::io::Result<String> {
    if spare.is_empty() {
        sys::set_idle_policy(kt.tid, true)?;
        kt.idle_policy = true;
        realtime.remove(&kt.tid);
        Ok("SCHED_IDLE".into())
    } else {
        if realtime.contains(&kt.tid) {
            sys::set_idle_policy(kt.tid, false)?;
            realtime.remove(&kt.tid);
        }
        corral_affinity::set_thread_affinity(kt.tid, spare)?;
        kt.pinned = None;
        Ok(format!(
            "moved to CPUs {}",
            crate::cpus::format_cpu_list(spare)
        ))
    }
}
