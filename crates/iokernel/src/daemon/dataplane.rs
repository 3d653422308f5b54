//! The busy loop's work: command rings in, allocation passes, decisions out, evictions.

use std::path::Path;

use corral_abi::{Command, RingKind, Slot, control::Reply, flags};
use log::{error, warn};

use super::{Daemon, Kthread, Runtime, Sched, net};
use crate::alloc::{
    AllocError, Decision, KthreadIndex, KthreadPlace, KthreadQueues, QueueSnapshot, RingPositions,
    RuntimeId,
};
use crate::control::send_reply;
use crate::sys;

impl Daemon {
    /// Drains every registered kthread's egress command ring.
    pub(super) fn drain_commands(&mut self) {
        for slot in 0..self.runtimes.len() {
            let Some(runtime) = self.runtimes[slot].as_deref_mut() else {
                continue;
            };
            if runtime.doomed {
                continue;
            }
            if let Err(reason) = drain_runtime(&mut self.sched, runtime) {
                let id = runtime.id;
                self.doom(id, reason);
            }
        }
    }

    /// One allocation pass: observe queues, shared queues and timers, then run the allocator.
    pub(super) fn pass(&mut self) {
        let now = self.sched.now();
        for slot in 0..self.runtimes.len() {
            let Some(runtime) = self.runtimes[slot].as_deref_mut() else {
                continue;
            };
            if runtime.doomed {
                continue;
            }
            if let Err(reason) = observe_runtime(&mut self.sched, runtime, now) {
                let id = runtime.id;
                self.doom(id, reason);
            }
        }
        if let Err(e) = self.sched.alloc.run_pass(now, &mut self.sched.decisions) {
            error!("allocation pass refused: {e}");
        }
    }

    /// Carries out one decision. A runtime whose kthread cannot be reached is evicted.
    pub(super) fn carry_out(&mut self, decision: Decision) {
        log::debug!("{decision:?}");
        match decision {
            Decision::Wake {
                runtime,
                kthread,
                core,
            } => {
                let cpu = self.config.managed_cores[core.index()];
                let promised = self.promised[core.index()].take();
                let decided = match promised {
                    Some((to, at)) if to == runtime => at,
                    _ => self.sched.now(),
                };
                let Some(entry) = self
                    .runtimes
                    .get_mut(runtime.slot() as usize)
                    .and_then(|r| r.as_deref_mut())
                    .filter(|r| r.id == runtime && !r.doomed)
                else {
                    return;
                };
                let Some(kt) = entry.kthreads.get_mut(kthread.index()) else {
                    return;
                };
                kt.view.publish_wake_decision(decided);
                match wake(kt, cpu) {
                    Ok(()) => {
                        self.sched.counters.wakes += 1;
                        net::refresh_active(&*self.sched.alloc, entry);
                    }
                    Err(e) => self.doom(
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
                let now = self.sched.now();
                self.promised[core.index()] = Some((for_runtime, now));
                let Some(entry) = self.runtime_mut(victim_runtime) else {
                    return;
                };
                if entry.doomed {
                    return;
                }
                let pid = entry.pid;
                let Some(kt) = entry.kthreads.get_mut(victim_kthread.index()) else {
                    return;
                };
                let result = kt
                    .ingress
                    .push_control(Slot::value(Command::Preempt, 0))
                    .map_err(|_| "its ingress ring is full".to_owned())
                    .and_then(|()| {
                        sys::tgkill(pid, kt.tid, libc::SIGUSR1)
                            .map_err(|e| format!("tgkill(SIGUSR1) failed: {e}"))
                    });
                match result {
                    Ok(()) => {
                        kt.preempt_sent_at = Some(now);
                        entry.counters.preempt_signals += 1;
                        self.sched.counters.preemptions_signalled += 1;
                    }
                    Err(e) => self.doom(
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
                let cpu = self.config.managed_cores[core.index()];
                let spare = &self.config.spare_cpus;
                let Some(entry) = self.runtimes[victim_runtime.slot() as usize]
                    .as_deref_mut()
                    .filter(|r| r.id == victim_runtime && !r.doomed)
                else {
                    return;
                };
                let label = entry.label();
                let Some(kt) = entry.kthreads.get_mut(victim_kthread.index()) else {
                    return;
                };
                kt.preempt_sent_at = None;
                let how = demote(kt, spare);
                warn!(
                    "kthread {} (tid {}) of {} ignored preemption from CPU {cpu} for over {} us; \
                     {}",
                    victim_kthread.0,
                    kt.tid,
                    label,
                    self.config.preemption_timeout_us,
                    match &how {
                        Ok(how) => format!("demoted it ({how})"),
                        Err(e) => format!("could not demote it: {e}"),
                    }
                );
                entry.counters.demotions += 1;
                self.sched.counters.demotions += 1;
                let now = self.sched.now();
                if let Err(e) = self.sched.alloc.preemption_completed(
                    victim_runtime,
                    victim_kthread,
                    now,
                    &mut self.sched.decisions,
                ) {
                    error!("preemption_completed refused after a demotion: {e}");
                }
                net::refresh_active(&*self.sched.alloc, entry);
            }
        }
    }

    /// Removes a runtime: its threads leave the managed cores, the allocator reclaims its cores,
    /// its memory is unmapped and its descriptors and connection closed. `misbehaved`: it broke
    /// the contract (as opposed to hanging up), so it is told why and counted as an eviction.
    pub(super) fn evict(&mut self, id: RuntimeId, reason: &str, misbehaved: bool) {
        let Some(mut runtime) = self
            .runtimes
            .get_mut(id.slot() as usize)
            .and_then(|r| r.take_if(|r| r.id == id))
        else {
            return;
        };
        if misbehaved {
            warn!("evicting {}: {reason}", runtime.label());
            self.sched.counters.evictions += 1;
            if let Some(conn) = self.conns.get(runtime.conn).and_then(Option::as_ref) {
                let _ = send_reply(
                    std::os::fd::AsFd::as_fd(&conn.fd),
                    &Reply::Error {
                        message: format!("evicted: {reason}"),
                    },
                );
            }
        } else {
            log::info!("{} left: {reason}", runtime.label());
            self.sched.counters.disconnects += 1;
        }
        if let Some(net) = runtime.net {
            self.switch
                .tables
                .remove(net.mac, net.ipv4, id.slot() as usize);
        }
        let label = runtime.label();
        for (index, kt) in runtime.kthreads.iter_mut().enumerate() {
            let active = matches!(
                self.sched
                    .alloc
                    .kthread(id, KthreadIndex(index as u16))
                    .map(|k| k.place),
                Ok(KthreadPlace::Active { .. })
            );
            // Only threads that may run on a managed core need moving. A thread of a process
            // that is gone may have had its id recycled by now: only touch threads that are
            // still the runtime's.
            if (active || kt.pinned.is_some())
                && Path::new(&format!("/proc/{}/task/{}", runtime.pid, kt.tid)).exists()
                && let Err(e) = demote(kt, &self.config.spare_cpus)
                && !crate::cpus::is_gone(&e)
            {
                warn!("cannot demote tid {} of {label}: {e}", kt.tid);
            }
            self.tids.remove(&kt.tid);
        }
        if let Err(e) = self.sched.alloc.unregister(id, &mut self.sched.decisions) {
            error!("allocator refused to unregister {id}: {e}");
        }
        let conn = runtime.conn;
        drop(runtime);
        self.close_conn(conn);
    }
}

/// Drains one runtime's command rings. An error is the runtime's fault and the reason to evict
/// it.
fn drain_runtime(sched: &mut Sched, runtime: &mut Runtime) -> Result<(), String> {
    let id = runtime.id;
    for index in 0..runtime.kthreads.len() {
        // At most one ring's worth per iteration, so that a runtime refilling its ring as fast
        // as it is drained cannot keep the loop here.
        let capacity = runtime.kthreads[index].commands.capacity();
        for _ in 0..capacity {
            let Some(slot) = runtime.kthreads[index].commands.try_pop() else {
                break;
            };
            command(sched, runtime, id, index, slot)?;
        }
    }
    Ok(())
}

fn command(
    sched: &mut Sched,
    runtime: &mut Runtime,
    id: RuntimeId,
    index: usize,
    slot: Slot,
) -> Result<(), String> {
    let kthread = KthreadIndex(index as u16);
    let bad = |e: AllocError| format!("kthread {index}: {e}");
    match slot.command_on(RingKind::EgressCommand) {
        Err(e) => Err(format!("kthread {index}, {}: {e}", RingKind::EgressCommand)),
        Ok(command @ (Command::Park | Command::Yielded)) => {
            let place = sched.alloc.kthread(id, kthread).map_err(bad)?.place;
            if !matches!(place, KthreadPlace::Active { .. }) {
                // A park from a kthread that was demoted or never woken: it has no core to give
                // back. A late answer to a preemption may still say that work was left behind,
                // and nothing else would ever get that work a core again.
                runtime.counters.stale_commands += 1;
                sched.counters.stale_commands += 1;
                if command == Command::Yielded && slot.flags() & flags::HAS_WORK != 0 {
                    let now = sched.now();
                    sched
                        .alloc
                        .parked_with_work(id, now, &mut sched.decisions)
                        .map_err(bad)?;
                }
                return Ok(());
            }
            log::debug!(
                "{id} kthread {index}: {command:?}, flags {:#x}",
                slot.flags()
            );
            let now = sched.now();
            if let Some(sent) = runtime.kthreads[index].preempt_sent_at.take() {
                let latency = now - sent;
                runtime.counters.preemption_latency_last_ns = latency;
                runtime.counters.preemption_latency_max_ns =
                    runtime.counters.preemption_latency_max_ns.max(latency);
                let seen = runtime.kthreads[index].view.preempt_seen_ns();
                runtime.handover.record(sent, seen, now);
            }
            sched
                .alloc
                .kthread_parked(id, kthread, now, &mut sched.decisions)
                .map_err(bad)?;
            sched.counters.parks += 1;
            net::refresh_active(&*sched.alloc, runtime);
            // A frame steered to this kthread after its last look at the ring, but before its
            // park was read here, would otherwise wait for its next wake-up.
            let unread = net::rx_unread(&runtime.kthreads[index]);
            if command == Command::Yielded && (slot.flags() & flags::HAS_WORK != 0 || unread) {
                sched
                    .alloc
                    .parked_with_work(id, now, &mut sched.decisions)
                    .map_err(bad)?;
            } else if command == Command::Park && unread {
                sched
                    .alloc
                    .pending_work(id, now, &mut sched.decisions)
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
fn observe_runtime(sched: &mut Sched, runtime: &mut Runtime, now: u64) -> Result<(), String> {
    let id = runtime.id;
    // Allows one more immediate core request per pass for frames sent to a runtime that has
    // no core (see `deliver`).
    runtime.core_requested = false;
    let mut stale_lists = false;
    sched.sweep.clear();
    for (index, kt) in runtime.kthreads.iter().enumerate() {
        let kthread = KthreadIndex(index as u16);
        let active = matches!(
            sched.alloc.kthread(id, kthread).map(|k| k.place),
            Ok(KthreadPlace::Active { .. })
        );
        // Every change of place is followed by a refresh; this only guards the steering lists
        // against a path that forgot, at no extra cost.
        stale_lists |= active != kt.active;
        if !active {
            continue;
        }
        let queues = QueueSnapshot {
            run_queue: kt.positions.runq(),
            ingress: RingPositions::new(kt.ingress.position(), kt.positions.ingress_consumed()),
        };
        sched.sweep.push(KthreadQueues { kthread, queues });
    }
    if !sched.sweep.is_empty() {
        match sched.alloc.observe_runtime(id, &sched.sweep) {
            Ok(()) => {}
            Err(e @ AllocError::ImpossibleQueue { .. }) => return Err(e.to_string()),
            Err(e) => error!("queue observation refused: {e}"),
        }
    }
    if stale_lists {
        net::refresh_active(&*sched.alloc, runtime);
    }

    let committed = sched
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
            sched
                .alloc
                .parked_with_work(id, now, &mut sched.decisions)
                .map_err(|e| e.to_string())?;
        }
    } else if shared.has_waited_since(runtime.shared_last) {
        sched
            .alloc
            .report_congestion(id)
            .map_err(|e| e.to_string())?;
    }
    runtime.shared_last = shared;
    if committed == 0 && runtime.timer_deadline <= now {
        wants_core = true;
        runtime.timer_deadline = u64::MAX;
        runtime.counters.timer_wakeups += 1;
        sched.counters.timer_wakeups += 1;
    }
    if wants_core {
        sched
            .alloc
            .pending_work(id, now, &mut sched.decisions)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Pins a kthread to `cpu` (restoring its policy if it was demoted), tells it which core it
/// holds, and wakes it.
fn wake(kt: &mut Kthread, cpu: usize) -> Result<(), String> {
    if kt.idle_policy {
        sys::set_idle_policy(kt.tid, false)
            .map_err(|e| format!("cannot restore SCHED_OTHER: {e}"))?;
        kt.idle_policy = false;
    }
    if kt.pinned != Some(cpu) {
        sys::set_affinity(kt.tid, &[cpu]).map_err(|e| format!("sched_setaffinity: {e}"))?;
        kt.pinned = Some(cpu);
    }
    kt.ingress
        .push_control(Slot::value(Command::Grant, cpu as u64))
        .map_err(|_| "its ingress ring is full".to_owned())?;
    kt.view.publish_wake_sent(sys::now_ns());
    sys::eventfd_signal(std::os::fd::AsFd::as_fd(&kt.eventfd))
        .map_err(|e| format!("eventfd write: {e}"))
}

/// Moves a kthread off the managed cores: onto the spare CPUs if there are any, else to
/// `SCHED_IDLE` where it runs only when its CPU has nothing else to do. Returns what was done.
fn demote(kt: &mut Kthread, spare: &[usize]) -> std::io::Result<String> {
    if spare.is_empty() {
        sys::set_idle_policy(kt.tid, true)?;
        kt.idle_policy = true;
        Ok("SCHED_IDLE".into())
    } else {
        sys::set_affinity(kt.tid, spare)?;
        kt.pinned = None;
        Ok(format!(
            "moved to CPUs {}",
            crate::cpus::format_cpu_list(spare)
        ))
    }
}
