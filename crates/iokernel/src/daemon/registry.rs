//! The registry of runtimes: every registered runtime ([`Tenant`]) by its allocator id, which
//! runtime each registered thread belongs to, and the evictions not yet carried out. The
//! control plane fills it, the switch and the core driver borrow it to work on the runtimes'
//! rings, and an eviction empties a runtime's entry.

use std::collections::HashMap;

use corral_abi::control::{NetIdentity, PreemptionMode};
use corral_abi::{Consumer, KthreadView, QueuePositions, Region, RingPositions};

use super::backlog::Backlog;
use super::control_plane::ConnRef;
use super::net::{Ingress, NetCounters, RxBuffers};
use crate::sys::Mapping;
use corral_policy::RuntimeId;

/// One registered kthread as iokerneld sees it.
pub(super) struct Kthread {
    pub(super) tid: i32,
    pub(super) view: KthreadView<'static>,
    pub(super) positions: &'static QueuePositions,
    /// iokerneld's end of the ingress ring, kept for the runtime's life so that its position
    /// stays in step with the kthread's consumer.
    pub(super) ingress: Ingress,
    pub(super) commands: Consumer<'static>,
    pub(super) packets: Consumer<'static>,
    /// Receive buffers it posted and iokerneld has not filled yet.
    pub(super) rx_buffers: RxBuffers,
    /// Ingress position just after the last `RxPacket` pushed to it that asks for a core:
    /// what decides whether it left frames unread.
    pub(super) last_rx_position: u32,
    /// Ingress position just after the last bare ACK left waiting on it since (see
    /// `Tenant::acks_can_wait`), `None` when there is none.
    pub(super) waiting_ack_position: Option<u32>,
    /// Active per the allocator as of the last refresh of the runtime's lists.
    pub(super) active: bool,
    /// Parked, and its egress packet ring is still polled in case it left frames there.
    pub(super) linger: bool,
    /// The CPU it was last pinned to by a wake, `None` if it has not been or was moved since.
    pub(super) pinned: Option<usize>,
    /// It runs at `SCHED_IDLE`: demoted, or a kthread of an idle-class runtime.
    pub(super) idle_policy: bool,
    /// Its core was taken in place (idle class) and it has not parked since: it is still on its
    /// CPU, runnable, so its next grant needs no `Grant` and no wake-up (it may not poll its
    /// ingress ring for a long time, and `Grant`s would fill it).
    pub(super) in_place: bool,
    /// When it was last sent the preemption signal, for the preemption latency statistic.
    pub(super) preempt_sent_at: Option<u64>,
    /// Asked to give up its core and not signalled yet: when its grace period ends.
    pub(super) cede_deadline: Option<u64>,
    /// What iokerneld last wrote into the kthread's cede word, which only it writes.
    pub(super) cede_rung: u32,
    /// Whether its network work and timers keep up while it holds a core (see `kick`).
    pub(super) net_watch: super::kick::NetWatch,
}

/// Counters the allocator does not keep.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TenantCounters {
    pub(super) timer_wakeups: u64,
    pub(super) demotions: u64,
    pub(super) stale_commands: u64,
    pub(super) preempt_signals: u64,
    /// Preemption signals sent with the cede request, without waiting for a grace period.
    pub(super) preempt_signals_at_once: u64,
    pub(super) cedes_cooperative: u64,
    pub(super) preemption_latency_last_ns: u64,
    pub(super) preemption_latency_max_ns: u64,
    /// Kicks sent because an ingress item, or a timer, waited on a kthread holding a core.
    pub(super) kicks_ingress: u64,
    pub(super) kicks_timer: u64,
    /// Kicks sent because a runnable uthread waited a whole period behind one that spins.
    pub(super) kicks_run_queue: u64,
    /// Cores taken from its kthreads by waking the taker on top of them: idle-class kthreads
    /// at once, others once they miss their grace period for a taker that runs above them.
    pub(super) taken_in_place: u64,
    /// Of those, the ones taken after the grace period.
    pub(super) taken_in_place_after_grace: u64,
    /// Bare TCP ACKs left on its rings without asking for a core, and how many times such
    /// ACKs waited out `ack_wait_us` and asked for one.
    pub(super) acks_left_waiting: u64,
    pub(super) ack_waits_expired: u64,
}

/// How long this runtime's kthreads took to give up a core when asked: from the preemption
/// signal to its handler (as the kthread stamps it in its shared line), and from the handler to
/// iokerneld seeing the kthread park. Histograms are allocated at registration; recording into
/// them allocates nothing.
pub(super) struct Handover {
    pub(super) signal: hdrhistogram::Histogram<u64>,
    pub(super) park: hdrhistogram::Histogram<u64>,
    /// Hand-overs whose handler stamp was missing or out of order (a signal handled before
    /// this one was sent, say): counted, not timed.
    pub(super) unstamped: u64,
}

/// Hand-over phases longer than this (1 s) are recorded as this.
const HANDOVER_HIGH_NS: u64 = 1_000_000_000;

impl Handover {
    pub(super) fn new() -> Self {
        let histogram = || {
            hdrhistogram::Histogram::new_with_bounds(1, HANDOVER_HIGH_NS, 2)
                .expect("constant histogram bounds are valid")
        };
        Handover {
            signal: histogram(),
            park: histogram(),
            unstamped: 0,
        }
    }

    /// A preemption signalled at `sent` ended with the kthread parked, seen at `parked`; the
    /// kthread says its handler ran at `seen`.
    pub(super) fn record(&mut self, sent: u64, seen: u64, parked: u64) {
        if seen < sent || seen > parked {
            self.unstamped += 1;
            return;
        }
        self.signal.saturating_record((seen - sent).max(1));
        self.park.saturating_record((parked - seen).max(1));
    }
}

/// A registered runtime: what iokerneld keeps of it from registration to eviction. The
/// switch and the core driver work on its kthreads through the [`Registry`].
pub(super) struct Tenant {
    pub(super) id: RuntimeId,
    pub(super) name: String,
    pub(super) pid: i32,
    /// How it asked to be preempted: with the daemon's grace period, or by signal at once.
    pub(super) preemption: PreemptionMode,
    /// Its control connection.
    pub(super) conn: ConnRef,
    /// Earliest timer it reported (`CLOCK_MONOTONIC` ns), `u64::MAX` for none.
    pub(super) timer_deadline: u64,
    /// Kthread 0's shared queue as seen at the previous pass.
    pub(super) shared_last: RingPositions,
    /// Marked for eviction; ignored until the eviction is carried out.
    pub(super) evicting: bool,
    pub(super) counters: TenantCounters,
    pub(super) handover: Handover,
    /// Its addresses, if it registered any; only then does it receive frames.
    pub(super) net: Option<NetIdentity>,
    pub(super) net_counters: NetCounters,
    /// Indices of its active kthreads, among which received frames are spread.
    pub(super) active: Vec<u16>,
    /// Indices of kthreads whose egress packet rings are polled.
    pub(super) tx_poll: Vec<u16>,
    /// A core was requested for a frame since the last pass or wake-up.
    pub(super) core_requested: bool,
    /// Its last kthread parked saying that bare TCP ACKs may wait (`flags::ACKS_CAN_WAIT`),
    /// and no kthread has run since.
    pub(super) acks_can_wait: bool,
    /// When the oldest bare ACK still waiting on its rings arrived.
    pub(super) acks_waiting_since: Option<u64>,
    /// Frames for it that did not fit its buffers or rings yet, in arrival order.
    pub(super) backlog: Backlog,
    /// Declared before `mapping`, so the views into the region are dropped first.
    pub(super) kthreads: Vec<Kthread>,
    pub(super) region: Region<'static>,
    pub(super) mapping: Mapping,
}

impl Tenant {
    pub(super) fn label(&self) -> String {
        format!("{} ({:?}, pid {})", self.id, self.name, self.pid)
    }

    /// Turns the bare ACKs left waiting on its rings into frames that ask for a core like any
    /// other (unread frames count), and stops letting new ones wait: a kthread of it runs
    /// again, or they waited long enough.
    pub(super) fn stop_acks_waiting(&mut self) {
        self.acks_can_wait = false;
        for kt in &mut self.kthreads {
            if let Some(position) = kt.waiting_ack_position.take() {
                kt.last_rx_position = position;
            }
        }
        self.acks_waiting_since = None;
    }
}

/// Arrivals and departures, for the statistics.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RegistryCounters {
    pub(super) registrations: u64,
    /// Runtimes removed for breaking the contract.
    pub(super) evictions: u64,
    /// Runtimes that hung up.
    pub(super) disconnects: u64,
}

/// Every registered runtime, slot by slot, and what is to become of them.
#[derive(Default)]
pub(super) struct Registry {
    counters: RegistryCounters,
    /// By the slot of their id.
    tenants: Vec<Option<Box<Tenant>>>,
    /// The runtime each registered thread belongs to.
    tids: HashMap<i32, RuntimeId>,
    /// Marked for eviction, with the reason, not yet carried out.
    evictions: Vec<(RuntimeId, String)>,
}

impl Registry {
    /// Slots in the table (some empty): the bound of [`Registry::at_mut`]'s argument.
    pub(super) fn slots(&self) -> usize {
        self.tenants.len()
    }

    /// The runtime in `slot`, if any.
    pub(super) fn at(&self, slot: usize) -> Option<&Tenant> {
        self.tenants.get(slot)?.as_deref()
    }

    /// The runtime in `slot`, if any.
    pub(super) fn at_mut(&mut self, slot: usize) -> Option<&mut Tenant> {
        self.tenants.get_mut(slot)?.as_deref_mut()
    }

    /// The runtime in `slot` unless it is being evicted.
    pub(super) fn live_at_mut(&mut self, slot: usize) -> Option<&mut Tenant> {
        self.at_mut(slot).filter(|t| !t.evicting)
    }

    pub(super) fn get(&self, id: RuntimeId) -> Option<&Tenant> {
        self.at(id.slot() as usize).filter(|t| t.id == id)
    }

    pub(super) fn get_mut(&mut self, id: RuntimeId) -> Option<&mut Tenant> {
        self.at_mut(id.slot() as usize).filter(|t| t.id == id)
    }

    /// Every registered runtime.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.iter().flatten().map(|t| &**t)
    }

    /// The runtime that registered thread `tid`.
    pub(super) fn owner_of_thread(&self, tid: i32) -> Option<RuntimeId> {
        self.tids.get(&tid).copied()
    }

    /// Adds a runtime whose threads are `tids`.
    pub(super) fn insert(&mut self, tenant: Tenant, tids: &[i32]) {
        self.counters.registrations += 1;
        let slot = tenant.id.slot() as usize;
        if self.tenants.len() <= slot {
            self.tenants.resize_with(slot + 1, || None);
        }
        for &tid in tids {
            self.tids.insert(tid, tenant.id);
        }
        self.tenants[slot] = Some(Box::new(tenant));
    }

    /// Takes a runtime out of the registry, with its threads. `misbehaved`: it is evicted for
    /// breaking the contract rather than leaving.
    pub(super) fn remove(&mut self, id: RuntimeId, misbehaved: bool) -> Option<Box<Tenant>> {
        let tenant = self
            .tenants
            .get_mut(id.slot() as usize)?
            .take_if(|t| t.id == id)?;
        if misbehaved {
            self.counters.evictions += 1;
        } else {
            self.counters.disconnects += 1;
        }
        for kt in &tenant.kthreads {
            self.tids.remove(&kt.tid);
        }
        Some(tenant)
    }

    /// Marks a runtime for eviction: it is ignored from now on and evicted by the loop (see
    /// [`Registry::next_eviction`]).
    pub(super) fn mark_for_eviction(&mut self, id: RuntimeId, reason: String) {
        if let Some(tenant) = self.get_mut(id)
            && !tenant.evicting
        {
            tenant.evicting = true;
            self.evictions.push((id, reason));
        }
    }

    pub(super) fn counters(&self) -> RegistryCounters {
        self.counters
    }

    /// An eviction to carry out, and why.
    pub(super) fn next_eviction(&mut self) -> Option<(RuntimeId, String)> {
        self.evictions.pop()
    }
}
