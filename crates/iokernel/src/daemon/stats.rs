//! Live statistics, served as JSON on the control socket (`iokerneld stats`).
//!
//! The same types deserialize, so that tests and tools can read a dump back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::faults::FaultCounters;
use super::net::NetStats;
use super::{Daemon, encode_runtime_id};
use crate::nic::NicCounters;
use corral_policy::{CoreId, CoreOccupancy};

/// Everything `iokerneld stats` prints.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Stats {
    pub global: GlobalStats,
    pub runtimes: Vec<RuntimeStats>,
    pub cores: Vec<CoreStats>,
    /// The packet switch, all runtimes together.
    pub net: NetStats,
    /// The NIC backend; `None` with `nic = none`.
    pub nic: Option<NicStats>,
    /// Fault injection (`--faults`), per direction.
    #[serde(default)]
    pub faults: FaultStats,
}

/// The fault injectors, by direction; a direction without faults is `None`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FaultStats {
    /// NIC to runtime.
    pub rx: Option<FaultDirectionStats>,
    /// Runtime to NIC.
    pub tx: Option<FaultDirectionStats>,
    /// Runtime to runtime, through the local switch.
    pub local: Option<FaultDirectionStats>,
}

/// What one direction's fault injector did, in frames.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FaultDirectionStats {
    /// Its settings, in the `--faults` syntax without the direction.
    pub spec: String,
    /// `frames` handed in; `emitted` passed on (duplicates and released frames included);
    /// `dropped` (loss), `duplicated`, `corrupted`, `delayed`, `reordered`, and
    /// `hold_overflow` (frames to hold that found the table full, and were dropped).
    #[serde(flatten)]
    pub counters: FaultCounters,
    /// Frames held now (delayed or reordered, not yet released).
    pub held: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NicStats {
    /// As in the `nic` setting.
    pub backend: String,
    pub description: String,
    /// What the kernel gave the backend, where that varies (`xdp`: "native zero-copy",
    /// "native copy" or "generic").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Frames received per receive queue, where the backend reads several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_rx_frames: Vec<u64>,
    #[serde(flatten)]
    pub counters: NicCounters,
}

/// A runtime's addresses and packet counters.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RuntimeNetStats {
    pub mac: String,
    pub ipv4: String,
    /// Receive buffers posted and not yet filled, over all its kthreads.
    pub rx_buffers_posted: usize,
    /// Frames held in its backlog now, the most held at once, and how many it may hold
    /// (`rx_backlog_frames`).
    #[serde(default)]
    pub rx_backlog_held: usize,
    #[serde(default)]
    pub rx_backlog_high_water: usize,
    #[serde(default)]
    pub rx_backlog_capacity: usize,
    #[serde(flatten)]
    pub counters: NetStats,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GlobalStats {
    pub pid: u32,
    pub core: usize,
    pub managed_cores: Vec<usize>,
    pub interval_us: u64,
    pub preemption_timeout_us: u64,
    pub uptime_s: f64,
    pub passes: u64,
    pub loop_iterations: u64,
    pub runtimes_registered: usize,
    pub registrations: u64,
    pub refused_registrations: u64,
    pub last_refusal: Option<String>,
    /// Log lines about refused requests and connections left out by the rate limit (a
    /// summary line counts them every few seconds while it bites).
    #[serde(default)]
    pub refused_messages_suppressed: u64,
    /// Runtimes removed for breaking the contract.
    pub evictions: u64,
    /// Runtimes that closed their connection (exited or crashed).
    pub disconnects: u64,
    pub demotions: u64,
    pub stale_commands: u64,
    pub wakes: u64,
    pub preemptions_signalled: u64,
    /// Of `preemptions_signalled`, those sent at once with the request for the core, with no
    /// grace period: to runtimes registered as `signal_at_once`, or all with a grace of 0.
    #[serde(default)]
    pub preemptions_signalled_at_once: u64,
    /// Preemptions answered within the grace period (`cede_grace_us`), with no signal.
    #[serde(default)]
    pub cedes_cooperative: u64,
    /// Cores taken from kthreads by waking the taker on top of them: from kthreads in the idle
    /// class (runtimes registered as `idle_class`) at once, with no request and no signal, and
    /// from others that missed their grace period, for a taker that runs above them.
    #[serde(default)]
    pub taken_in_place: u64,
    /// Of `taken_in_place`, the cores taken after a missed grace period.
    #[serde(default)]
    pub taken_in_place_after_grace: u64,
    /// The `handover` setting: `local` or `remote`.
    #[serde(default)]
    pub handover: String,
    #[serde(default)]
    pub cede_grace_us: u64,
    /// The `share_quantum_us` setting.
    #[serde(default)]
    pub share_quantum_us: u64,
    /// The `ack_wait_us` setting.
    #[serde(default)]
    pub ack_wait_us: u64,
    /// Per managed core, how its grants were delivered (empty with `handover = "remote"`).
    #[serde(default)]
    pub handoff: Vec<super::HandoffStats>,
    pub timer_wakeups: u64,
    /// Preemption signals sent with no request for the core, to make a kthread whose uthreads
    /// do not yield run its network work and timers.
    #[serde(default)]
    pub kicks: u64,
    /// Kthreads that gave back a core (parked, or yielded after a preemption).
    #[serde(default)]
    pub parks: u64,
    /// Loop iterations longer than 50 µs (the daemon lost its CPU), their total and the longest.
    pub loop_stalls: u64,
    pub loop_stall_ns: u64,
    pub loop_stall_max_ns: u64,
    pub idle_cores: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RuntimeStats {
    /// As in the registration reply.
    pub id: u64,
    pub name: String,
    pub pid: i32,
    pub kthreads: usize,
    pub guaranteed_cores: u16,
    pub max_cores: u16,
    /// Cores its kthreads run on now (including any being taken back).
    pub cores_held: u32,
    pub cores_handing_over: u32,
    pub waiting: bool,
    pub grants: u64,
    pub preemptions_suffered: u64,
    pub preempt_signals: u64,
    /// How it registered to be preempted: `cooperative` (signalled only when the grace period
    /// runs out) or `signal_at_once` (signalled with the request, no grace period).
    #[serde(default)]
    pub preemption: String,
    /// Of `preempt_signals`, those sent at once, with no grace period.
    #[serde(default)]
    pub preempt_signals_at_once: u64,
    /// Preemptions it answered within the grace period, with no signal.
    #[serde(default)]
    pub cedes_cooperative: u64,
    pub preemption_latency_last_ns: u64,
    pub preemption_latency_max_ns: u64,
    /// Its preemptions split into signal delivery and parking.
    pub handover: HandoverStats,
    pub parks: u64,
    pub congestion_detections: u64,
    pub timer_wakeups: u64,
    /// Kicks its kthreads got because an ingress item waited unread a whole period on a
    /// kthread holding a core.
    #[serde(default)]
    pub kicks_ingress: u64,
    /// Kicks its kthreads got because a timer was overdue a whole period.
    #[serde(default)]
    pub kicks_timer: u64,
    /// Kicks its kthreads got because a runnable uthread waited a whole period behind one
    /// that did not yield.
    #[serde(default)]
    pub kicks_run_queue: u64,
    /// Cores taken from its kthreads by waking the taker on top of them (`idle_class`, or
    /// after a missed grace period).
    #[serde(default)]
    pub taken_in_place: u64,
    /// Of those, the ones taken after a missed grace period.
    #[serde(default)]
    pub taken_in_place_after_grace: u64,
    /// Bare TCP ACKs left on its rings without asking for a core, as it allowed when it
    /// parked (`ack_wait_us`).
    #[serde(default)]
    pub acks_left_waiting: u64,
    /// Times such ACKs waited `ack_wait_us` and a core was asked for them.
    #[serde(default)]
    pub ack_waits_expired: u64,
    pub demotions: u64,
    pub stale_commands: u64,
    /// Its kthreads that are active now (those frames are steered to).
    pub active_kthreads: Vec<u16>,
    /// Its addresses and packet counters; `None` if it registered no addresses (it may
    /// still have tried to send, which the counters show).
    pub net: Option<RuntimeNetStats>,
    /// Its packet counters, whether or not it registered addresses.
    pub packets: NetStats,
    /// What the runtime says about itself (its network stack's and TCP's counters, by the
    /// runtime's own names, `corral_abi::REPORTED_COUNTERS`), as last written into its region.
    /// Untrusted: printed, never used for a decision. Absent if it never wrote them.
    #[serde(default)]
    pub reported: Option<BTreeMap<String, u64>>,
}

/// The two phases of giving up a core when preempted, in nanoseconds: from iokerneld's
/// `tgkill` to the kthread's signal handler (`signal`), and from the handler to iokerneld
/// seeing the kthread park (`park`: switching to the scheduler, any deferral while preemption
/// was disabled, and the park command crossing the ring). Percentiles are 0 with no samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HandoverStats {
    pub samples: u64,
    /// Preemptions whose handler time stamp was missing or out of order.
    pub unstamped: u64,
    pub signal_p50_ns: u64,
    pub signal_p99_ns: u64,
    pub park_p50_ns: u64,
    pub park_p99_ns: u64,
}

impl HandoverStats {
    fn of(h: &super::registry::Handover) -> Self {
        let q = |hist: &hdrhistogram::Histogram<u64>, q: f64| {
            if hist.is_empty() {
                0
            } else {
                hist.value_at_quantile(q)
            }
        };
        HandoverStats {
            samples: h.signal.len(),
            unstamped: h.unstamped,
            signal_p50_ns: q(&h.signal, 0.5),
            signal_p99_ns: q(&h.signal, 0.99),
            park_p50_ns: q(&h.park, 0.5),
            park_p99_ns: q(&h.park, 0.99),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoreOwner {
    pub id: u64,
    pub name: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoreStats {
    pub cpu: usize,
    /// `idle`, `running` or `handing_over`.
    pub state: String,
    pub owner: Option<CoreOwner>,
    pub kthread: Option<u16>,
    pub grants: u64,
    pub reallocations: u64,
}

/// The counters a runtime reports in its region, by name; `None` if it never wrote them.
fn reported(r: &super::registry::Tenant) -> Option<BTreeMap<String, u64>> {
    let values = r.kthreads.first()?.view.reported().read();
    if values[0] == 0 {
        return None;
    }
    Some(
        corral_abi::REPORTED_COUNTERS
            .iter()
            .zip(values)
            .map(|(name, value)| ((*name).to_owned(), value))
            .collect(),
    )
}

impl Daemon {
    /// A snapshot of every counter.
    pub fn stats(&self) -> Stats {
        let c = self.driver.counters();
        let l = &self.counters;
        let r = self.registry.counters();
        let refusals = self.control.counters();
        let alloc = self.driver.alloc();
        let global = GlobalStats {
            pid: std::process::id(),
            core: self.config.core,
            managed_cores: self.config.managed_cores.clone(),
            interval_us: self.config.interval_us,
            preemption_timeout_us: self.config.preemption_timeout_us,
            uptime_s: self.started.elapsed().as_secs_f64(),
            passes: alloc.passes_run(),
            loop_iterations: l.iterations,
            runtimes_registered: self.registry.iter().count(),
            registrations: r.registrations,
            refused_registrations: refusals.refused_registrations,
            last_refusal: refusals.last_refusal.clone(),
            refused_messages_suppressed: self.control.refusal_messages_suppressed(),
            evictions: r.evictions,
            disconnects: r.disconnects,
            demotions: c.demotions,
            stale_commands: c.stale_commands,
            wakes: c.wakes,
            preemptions_signalled: c.preemptions_signalled,
            preemptions_signalled_at_once: c.preemptions_signalled_at_once,
            cedes_cooperative: c.cedes_cooperative,
            taken_in_place: c.taken_in_place,
            taken_in_place_after_grace: c.taken_in_place_after_grace,
            handover: self.config.handover.name().to_owned(),
            cede_grace_us: self.config.cede_grace_us,
            share_quantum_us: self.config.share_quantum_us,
            ack_wait_us: self.config.ack_wait_us,
            handoff: self.driver.handoff_stats(),
            timer_wakeups: c.timer_wakeups,
            kicks: c.kicks,
            parks: c.parks,
            loop_stalls: l.stalls,
            loop_stall_ns: l.stall_ns,
            loop_stall_max_ns: l.stall_max_ns,
            idle_cores: alloc.idle_core_count(),
        };
        let runtimes = self
            .registry
            .iter()
            .filter_map(|r| {
                let view = alloc.runtime(r.id).ok()?;
                Some(RuntimeStats {
                    id: encode_runtime_id(r.id),
                    name: r.name.clone(),
                    pid: r.pid,
                    kthreads: r.kthreads.len(),
                    guaranteed_cores: view.spec.guaranteed_cores,
                    max_cores: view.spec.max_cores,
                    cores_held: view.running_cores,
                    cores_handing_over: view.cores_handing_over,
                    waiting: view.waiting,
                    grants: view.stats.grants,
                    preemptions_suffered: view.stats.preemptions_suffered,
                    preempt_signals: r.counters.preempt_signals,
                    preemption: r.preemption.name().to_owned(),
                    preempt_signals_at_once: r.counters.preempt_signals_at_once,
                    cedes_cooperative: r.counters.cedes_cooperative,
                    preemption_latency_last_ns: r.counters.preemption_latency_last_ns,
                    preemption_latency_max_ns: r.counters.preemption_latency_max_ns,
                    handover: HandoverStats::of(&r.handover),
                    parks: view.stats.parks,
                    congestion_detections: view.stats.congestion_detections,
                    timer_wakeups: r.counters.timer_wakeups,
                    kicks_ingress: r.counters.kicks_ingress,
                    kicks_timer: r.counters.kicks_timer,
                    kicks_run_queue: r.counters.kicks_run_queue,
                    taken_in_place: r.counters.taken_in_place,
                    taken_in_place_after_grace: r.counters.taken_in_place_after_grace,
                    acks_left_waiting: r.counters.acks_left_waiting,
                    ack_waits_expired: r.counters.ack_waits_expired,
                    demotions: r.counters.demotions,
                    stale_commands: r.counters.stale_commands,
                    active_kthreads: r.active.clone(),
                    net: r.net.map(|net| {
                        let m = net.mac;
                        RuntimeNetStats {
                            mac: format!(
                                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                                m[0], m[1], m[2], m[3], m[4], m[5]
                            ),
                            ipv4: std::net::Ipv4Addr::from(net.ipv4).to_string(),
                            rx_buffers_posted: r.kthreads.iter().map(|k| k.rx_buffers.len()).sum(),
                            rx_backlog_held: r.backlog.len(),
                            rx_backlog_high_water: r.backlog.high_water(),
                            rx_backlog_capacity: r.backlog.capacity(),
                            counters: r.net_counters.stats(),
                        }
                    }),
                    packets: r.net_counters.stats(),
                    reported: reported(r),
                })
            })
            .collect();
        let cores = self
            .config
            .managed_cores
            .iter()
            .enumerate()
            .filter_map(|(index, &cpu)| {
                let view = alloc.core(CoreId(index as u16)).ok()?;
                let (state, owner, kthread) = match view.occupancy {
                    CoreOccupancy::Idle => ("idle", None, None),
                    CoreOccupancy::Running { runtime, kthread } => {
                        ("running", Some(runtime), Some(kthread.0))
                    }
                    CoreOccupancy::HandingOver {
                        runtime, kthread, ..
                    } => ("handing_over", Some(runtime), Some(kthread.0)),
                };
                let owner = owner.map(|id| CoreOwner {
                    id: encode_runtime_id(id),
                    name: self
                        .registry
                        .get(id)
                        .map(|r| r.name.clone())
                        .unwrap_or_default(),
                });
                Some(CoreStats {
                    cpu,
                    state: state.into(),
                    owner,
                    kthread,
                    grants: view.stats.grants,
                    reallocations: view.stats.reallocations,
                })
            })
            .collect();
        let nic = self.switch.nic().map(|nic| NicStats {
            backend: nic.name().to_owned(),
            description: nic.describe(),
            mode: nic.mode(),
            queue_rx_frames: nic.queue_rx_frames(),
            counters: nic.counters(),
        });
        Stats {
            global,
            runtimes,
            cores,
            net: self.switch.stats(),
            nic,
            faults: self.switch.fault_stats(),
        }
    }

    /// [`Daemon::stats`] as JSON text.
    pub fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats()).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
