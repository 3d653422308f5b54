//! The iokerneld daemon: one busy-polling thread that drains the runtimes' command rings, runs
//! the core allocator every interval, carries out its decisions, and every `control_poll_us`
//! serves the control socket (registrations, statistics, traffic generator runs, hang-ups).
//!
//! Everything a runtime wrote is untrusted: a bad command, impossible queue counters or a
//! kthread that cannot be woken evicts that runtime (its threads are moved off the managed
//! cores, its cores reclaimed) and nothing else. All per-runtime state lives in tables that
//! are allocated at registration; a pass and a loop iteration allocate nothing.

mod control_plane;
mod dataplane;
mod generator;
mod net;
mod stats;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use corral_abi::control::NetIdentity;
use corral_abi::{Consumer, KthreadView, QueuePositions, Region, RingPositions};
use rustix::event::epoll;

use crate::alloc::{Decision, KthreadQueues, Policy, RuntimeId};
use crate::config::Config;
use crate::control::RecvBuffers;
use crate::sys::{Mapping, now_ns};

pub use net::{CONTROL_RESERVE, MAX_FRAME, NetDrop, NetStats, TX_BURST};
use net::{Ingress, NetCounters, RxBuffers, Switch};
pub use stats::{GlobalStats, HandoverStats, NicStats, RuntimeNetStats, RuntimeStats, Stats};

/// The wire form of a runtime id: slot in the low half, generation in the high half.
pub fn encode_runtime_id(id: RuntimeId) -> u64 {
    u64::from(id.slot()) | u64::from(id.generation()) << 32
}

/// Inverse of [`encode_runtime_id`].
pub fn decode_runtime_id(wire: u64) -> RuntimeId {
    RuntimeId::from_parts(wire as u32, (wire >> 32) as u32)
}

/// One registered kthread as iokerneld sees it.
struct Kthread {
    tid: i32,
    eventfd: OwnedFd,
    view: KthreadView<'static>,
    positions: &'static QueuePositions,
    /// iokerneld's end of the ingress ring, kept for the runtime's life so that its position
    /// stays in step with the kthread's consumer.
    ingress: Ingress,
    commands: Consumer<'static>,
    packets: Consumer<'static>,
    /// Receive buffers it posted and iokerneld has not filled yet.
    rx_buffers: RxBuffers,
    /// Ingress position just after the last `RxPacket` pushed to it.
    last_rx_position: u32,
    /// Active per the allocator as of the last refresh of the runtime's lists.
    active: bool,
    /// Parked, and its egress packet ring is still polled in case it left frames there.
    linger: bool,
    /// The CPU it was last pinned to by a wake, `None` if it has not been or was moved since.
    pinned: Option<usize>,
    /// It was demoted to `SCHED_IDLE` and must be restored before it runs on a managed core.
    idle_policy: bool,
    /// When it was last asked to give up its core, for the preemption latency statistic.
    preempt_sent_at: Option<u64>,
}

/// Counters the allocator does not keep.
#[derive(Clone, Copy, Debug, Default)]
struct RuntimeCounters {
    timer_wakeups: u64,
    demotions: u64,
    stale_commands: u64,
    preempt_signals: u64,
    preemption_latency_last_ns: u64,
    preemption_latency_max_ns: u64,
}

/// How long this runtime's kthreads took to give up a core when asked: from the preemption
/// signal to its handler (as the kthread stamps it in its shared line), and from the handler to
/// iokerneld seeing the kthread park. Histograms are allocated at registration; recording into
/// them allocates nothing.
struct Handover {
    signal: hdrhistogram::Histogram<u64>,
    park: hdrhistogram::Histogram<u64>,
    /// Hand-overs whose handler stamp was missing or out of order (a signal handled before
    /// this one was sent, say): counted, not timed.
    unstamped: u64,
}

/// Hand-over phases longer than this (1 s) are recorded as this.
const HANDOVER_HIGH_NS: u64 = 1_000_000_000;

impl Handover {
    fn new() -> Self {
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
    fn record(&mut self, sent: u64, seen: u64, parked: u64) {
        if seen < sent || seen > parked {
            self.unstamped += 1;
            return;
        }
        self.signal.saturating_record((seen - sent).max(1));
        self.park.saturating_record((parked - seen).max(1));
    }
}

/// A registered runtime.
struct Runtime {
    id: RuntimeId,
    name: String,
    pid: i32,
    /// Its connection's slot in the connection table.
    conn: usize,
    /// Earliest timer it reported (`CLOCK_MONOTONIC` ns), `u64::MAX` for none.
    timer_deadline: u64,
    /// Kthread 0's shared queue as seen at the previous pass.
    shared_last: RingPositions,
    /// Marked for eviction; ignored until the eviction is carried out.
    doomed: bool,
    counters: RuntimeCounters,
    handover: Handover,
    /// Its addresses, if it registered any; only then does it receive frames.
    net: Option<NetIdentity>,
    net_counters: NetCounters,
    /// Indices of its active kthreads, among which received frames are spread.
    active: Vec<u16>,
    /// Indices of kthreads whose egress packet rings are polled.
    tx_poll: Vec<u16>,
    /// A core was requested for a frame since the last pass or wake-up.
    core_requested: bool,
    /// Declared before `mapping`, so the views into the region are dropped first.
    kthreads: Vec<Kthread>,
    region: Region<'static>,
    mapping: Mapping,
}

impl Runtime {
    fn label(&self) -> String {
        format!("{} ({:?}, pid {})", self.id, self.name, self.pid)
    }
}

/// A control connection.
struct Conn {
    fd: OwnedFd,
    generation: u32,
    pid: i32,
    runtime: Option<RuntimeId>,
}

/// Global counters.
#[derive(Clone, Debug, Default)]
struct Counters {
    loop_iterations: u64,
    registrations: u64,
    refused_registrations: u64,
    last_refusal: Option<String>,
    evictions: u64,
    disconnects: u64,
    demotions: u64,
    stale_commands: u64,
    wakes: u64,
    preemptions_signalled: u64,
    timer_wakeups: u64,
    /// Kthreads that gave back a core (`Park`, or `Yielded` after a preemption).
    parks: u64,
    /// Loop iterations that took longer than [`LOOP_STALL_NS`] (the daemon was descheduled, or
    /// the machine took its CPU away), their total and the longest.
    loop_stalls: u64,
    loop_stall_ns: u64,
    loop_stall_max_ns: u64,
}

/// A loop iteration longer than this is counted as a stall: normal ones take well under a
/// microsecond, so this much means the daemon did not have its CPU.
pub const LOOP_STALL_NS: u64 = 50_000;

/// The allocator and what feeds it, apart from the runtime table so that both can be
/// borrowed at once.
struct Sched {
    alloc: Box<dyn Policy>,
    decisions: Vec<Decision>,
    /// One runtime's active kthreads' queue counters, swept for the policy; reused every pass.
    sweep: Vec<KthreadQueues>,
    /// Latest time handed to the allocator, which refuses time going back.
    clock: u64,
    counters: Counters,
}

impl Sched {
    fn now(&mut self) -> u64 {
        self.clock = self.clock.max(now_ns());
        self.clock
    }
}

/// The daemon. See the module documentation.
pub struct Daemon {
    config: Config,
    sched: Sched,
    runtimes: Vec<Option<Box<Runtime>>>,
    tids: HashMap<i32, RuntimeId>,
    conns: Vec<Option<Conn>>,
    free_conns: Vec<usize>,
    conn_generation: u32,
    listener: OwnedFd,
    epoll: OwnedFd,
    events: Vec<epoll::Event>,
    recv: RecvBuffers,
    executing: Vec<Decision>,
    evictions: Vec<(RuntimeId, String)>,
    /// Per managed core: the runtime it was promised to by a preemption, and when. The wake
    /// that completes the handover tells the kthread this time as the moment its core was
    /// decided, so that the runtime can measure the whole preemption.
    promised: Vec<Option<(RuntimeId, u64)>>,
    switch: Switch,
    /// The traffic generator's run in progress (with `nic = gen`).
    gen_run: Option<Box<generator::GenOwner>>,
    started: Instant,
}

/// Token of the listening socket in the epoll set; connection tokens have a generation in
/// their high half and so never equal it.
const LISTENER_TOKEN: u64 = u64::MAX;

/// Most control connections open at once; more are closed as soon as they are accepted.
const MAX_CONNECTIONS: usize = 4096;

impl Daemon {
    /// A daemon serving `listener` with `alloc` over `config.managed_cores`, switching packets
    /// between its runtimes and `nic` (`None`: among runtimes only).
    pub fn new(
        config: Config,
        alloc: Box<dyn Policy>,
        listener: OwnedFd,
        nic: Option<Box<dyn crate::nic::Nic>>,
    ) -> std::io::Result<Self> {
        let epoll_fd = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        epoll::add(
            &epoll_fd,
            &listener,
            epoll::EventData::new_u64(LISTENER_TOKEN),
            epoll::EventFlags::IN,
        )?;
        let clock = now_ns().max(alloc.now());
        let promised = vec![None; config.managed_cores.len()];
        Ok(Self {
            config,
            sched: Sched {
                alloc,
                decisions: Vec::with_capacity(64),
                sweep: Vec::with_capacity(corral_abi::MAX_KTHREADS),
                clock,
                counters: Counters::default(),
            },
            runtimes: Vec::new(),
            tids: HashMap::new(),
            conns: Vec::new(),
            free_conns: Vec::new(),
            conn_generation: 0,
            listener,
            epoll: epoll_fd,
            events: Vec::with_capacity(64),
            recv: RecvBuffers::default(),
            executing: Vec::with_capacity(64),
            evictions: Vec::new(),
            promised,
            switch: Switch::new(nic),
            gen_run: None,
            started: Instant::now(),
        })
    }

    /// Busy-polls until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) {
        let interval = self.config.interval_us * 1000;
        let poll = self.config.control_poll_us * 1000;
        let mut next_pass = now_ns() + interval;
        let mut next_poll = 0;
        let mut last = now_ns();
        while !stop.load(Ordering::Relaxed) {
            self.sched.counters.loop_iterations += 1;
            self.drain_commands();
            self.execute();
            let now = now_ns();
            let took = now.saturating_sub(last);
            last = now;
            if took > LOOP_STALL_NS {
                let c = &mut self.sched.counters;
                c.loop_stalls += 1;
                c.loop_stall_ns += took;
                c.loop_stall_max_ns = c.loop_stall_max_ns.max(took);
            }
            self.poll_nic(now);
            self.drain_tx();
            self.execute();
            if now >= next_pass {
                self.pass();
                self.execute();
                next_pass += interval;
                if next_pass <= now {
                    // Fell behind (descheduled, say): do not run a burst of passes to catch up.
                    next_pass = now + interval;
                }
            }
            if now >= next_poll {
                self.poll_gen(now);
                self.poll_control();
                self.execute();
                next_poll = now + poll;
            }
            core::hint::spin_loop();
        }
    }

    fn runtime_mut(&mut self, id: RuntimeId) -> Option<&mut Runtime> {
        self.runtimes
            .get_mut(id.slot() as usize)?
            .as_deref_mut()
            .filter(|r| r.id == id)
    }

    fn runtime(&self, id: RuntimeId) -> Option<&Runtime> {
        self.runtimes
            .get(id.slot() as usize)?
            .as_deref()
            .filter(|r| r.id == id)
    }

    /// Marks a runtime for eviction; it is carried out by [`Daemon::execute`].
    fn doom(&mut self, id: RuntimeId, reason: String) {
        if let Some(runtime) = self.runtime_mut(id)
            && !runtime.doomed
        {
            runtime.doomed = true;
            self.evictions.push((id, reason));
        }
    }

    /// Carries out the allocator's decisions and pending evictions, including whatever they
    /// lead to, in order.
    fn execute(&mut self) {
        loop {
            if !self.sched.decisions.is_empty() {
                std::mem::swap(&mut self.sched.decisions, &mut self.executing);
                for i in 0..self.executing.len() {
                    let decision = self.executing[i];
                    self.carry_out(decision);
                }
                self.executing.clear();
            } else if let Some((id, reason)) = self.evictions.pop() {
                self.evict(id, &reason, true);
            } else {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_ids_round_trip_through_the_wire_form() {
        for id in [
            RuntimeId::from_parts(0, 0),
            RuntimeId::from_parts(7, 3),
            RuntimeId::from_parts(u32::MAX, u32::MAX),
        ] {
            assert_eq!(decode_runtime_id(encode_runtime_id(id)), id);
        }
        assert_eq!(encode_runtime_id(RuntimeId::from_parts(5, 1)), 5 | 1 << 32);
    }
}
