//! iokerneld mode: the runtime's side of core allocation.
//!
//! At start the runtime lays out a shared region in a sealed memfd, starts its kthreads parked
//! (each asleep on its wake word, a futex in the region), and registers with iokerneld over the
//! control socket, passing the region. From then on:
//!
//! * iokerneld reads each running kthread's run-queue counters, which live in the region (see
//!   `sched/runqueue.rs`), and kthread 0's counters of the queue shared by all kthreads, to see
//!   when work has waited a whole interval;
//! * a kthread that finds no work pushes `Park` on its command ring and sleeps on its wake word.
//!   The last one to park first reports the runtime's earliest timer, so that iokerneld wakes
//!   the runtime at that deadline;
//! * iokerneld wakes a kthread by pinning it to a core, pushing `Grant` (with the core) on its
//!   ingress ring and ringing its wake word (from iokerneld's own CPU, or through its helper
//!   thread on the granted core, which wakes the kthread there without a cross-CPU wake-up);
//! * iokerneld takes a core back by pushing `Preempt`; a kthread that reaches its scheduler
//!   within iokerneld's grace period (it polls its ingress ring there) parks by itself, and
//!   only one that does not gets the preemption signal. The
//!   signal puts the running uthread back on its run queue and returns to the scheduler, which
//!   sees `Preempt`, pushes `Yielded` (flagged if work was left behind) and parks.
//!
//! With a network configured, the region also carries the runtime's packet buffers; see
//! [`PacketPool`] for how they are shared out and how packets are stolen between kthreads.
//!
//! One concern per file: [`setup`] lays out the region and registers (over corral-abi's
//! transport), [`packets`] holds the packet pool and receive/transmit, [`parking`] the commands
//! a kthread sends as it parks and its wait on its wake word, [`grant_wait`] the rule that a woken
//! kthread runs only with a grant and [`last_parker`] who reports the timers when all park (both
//! model-checked), [`ingress`] the draining and stealing of
//! ingress rings, and [`handover`] the time stamps iokerneld leaves for measuring hand-overs.
//!
//! Closing the control connection (the runtime exits or dies) tells iokerneld to reclaim
//! everything at once.

pub(crate) mod grant_wait;
mod handover;
mod ingress;
pub(crate) mod last_parker;
mod packets;
mod parking;
pub(crate) mod reported;
mod setup;
pub(crate) mod watchdog;

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::os::fd::OwnedFd;

use crate::primitives::WakeWord;
use std::sync::Mutex;

use corral_abi::{Consumer, Producer, QueuePositions, Region};

use crate::sched::kthread::Kthread;
use crate::sync::spin::{RawSpinLock, SpinLock};

pub use handover::{core_granted_at_ns, core_wake_sent_at_ns};
pub(crate) use ingress::{drain_own_after_wake, poll_own, steal_ingress};
pub(crate) use packets::{PacketPool, transmit};
pub(crate) use parking::send_timer_deadline;
pub(crate) use setup::{prepare, register};

/// State of a runtime under iokerneld shared by its kthreads.
pub(crate) struct IokShared {
    region: Region<'static>,
    /// The control connection. Closing it unregisters the runtime.
    connection: Mutex<Option<OwnedFd>>,
    /// Kthreads not parked (holding a core, or about to learn they lost it).
    pub active: last_parker::ActiveKthreads,
    /// Kthreads `0..spinning` never park once granted a core.
    pub spinning: usize,
    runtime_id: AtomicU64,
    /// The packet buffers, when the runtime has a network configured.
    pub packets: Option<PacketPool>,
    /// The counters the runtime reports to iokerneld's statistics.
    pub reported: reported::Reporter,
}

/// One kthread's end of the region.
pub(crate) struct IokKthread {
    /// The kthread's wake word in the region, which iokerneld rings after pushing a grant.
    wake_word: WakeWord,
    /// Serializes consumers of the ingress ring: the owner, and thieves (try_lock only).
    ingress_lock: RawSpinLock,
    /// Under `ingress_lock`.
    ingress: UnsafeCell<Consumer<'static>>,
    /// Serializes producers of the command ring: the owner, and thieves flushing its receive
    /// buffers (try_lock only), so the ring keeps one producer at a time.
    commands_lock: RawSpinLock,
    /// Under `commands_lock`.
    commands: UnsafeCell<Producer<'static>>,
    /// Owner only, with preemption disabled.
    egress: UnsafeCell<Producer<'static>>,
    /// Receive buffers of this kthread waiting to be posted again.
    rx_repost: SpinLock<Vec<u64>>,
    /// Free transmit buffers of this kthread.
    tx_free: SpinLock<Vec<u64>>,
    /// Frames pushed on this kthread's egress ring and not yet completed.
    tx_inflight: AtomicU32,
    /// The counters iokerneld reads; the run queue's live here.
    pub positions: &'static QueuePositions,
    /// When iokerneld decided to give this kthread its current core.
    wake_decision: &'static AtomicU64,
    /// When iokerneld last rang this kthread's wake word.
    wake_sent: &'static AtomicU64,
    /// Where the preemption signal handler stamps its arrival, for iokerneld's statistics.
    pub preempt_seen: &'static AtomicU64,
    /// Where this kthread's timer heap stores its earliest deadline for iokerneld (0: none).
    pub timer_deadline: &'static AtomicU64,
    /// Preemption signals that found no request to give up the core: iokerneld's kicks for
    /// network work or overdue timers while the uthreads did not yield.
    pub kicks: AtomicU64,
    /// Requests for the core answered from the scheduler before it ran any uthread since the
    /// grant: the request came while the kthread was still on its way back to work (Linux ran
    /// it late after the grant), so it gave the core back without interrupting anything.
    pub cedes_before_running: AtomicU64,
    /// iokerneld's cede word, and the value the owner last acted on (owner only).
    cede_word: &'static AtomicU32,
    cede_seen: AtomicU32,
    /// A `Preempt` arrived after the latest `Grant`. Atomic: a kthread that steals from this
    /// kthread's ingress ring applies the commands it pops here.
    preempt_requested: AtomicBool,
    /// The core iokerneld last granted (`u32::MAX` before the first grant).
    pub cpu: AtomicU32,
    /// Grants and preemptions seen, for tests and statistics.
    pub grants: AtomicU64,
    pub preemptions: AtomicU64,
    /// Wake-ups that came with no grant, after which the kthread went back to waiting.
    pub spurious_wakes: AtomicU64,
}

impl IokKthread {
    /// Whether iokerneld asked for the core since the owner's scheduler last looked: a
    /// uthread that yields or blocks then returns to the scheduler instead of switching
    /// straight to the next uthread. One load of a line iokerneld writes only to preempt.
    #[inline]
    pub fn cede_pending(&self) -> bool {
        self.cede_word.load(Ordering::Relaxed) != self.cede_seen.load(Ordering::Relaxed)
    }
}

impl IokShared {
    /// Kthread 0's line, which also carries the shared queue's counters.
    fn shared_queue(&self) -> &'static QueuePositions {
        self.kthread_positions(0)
    }

    fn kthread_positions(&self, index: usize) -> &'static QueuePositions {
        self.region
            .kthread(index as u32)
            .expect("kthread index within the region")
            .positions()
    }

    /// Work was added to the shared queue (from outside the kthreads, or spilled).
    #[inline]
    pub fn shared_added(&self, n: usize) {
        self.shared_queue()
            .shared_tail
            .fetch_add(n as u32, Ordering::Release);
    }

    /// Work was taken from the shared queue.
    #[inline]
    pub fn shared_taken(&self, n: usize) {
        self.shared_queue()
            .shared_head
            .fetch_add(n as u32, Ordering::Release);
    }

    /// The id iokerneld gave this runtime.
    pub fn runtime_id(&self) -> u64 {
        self.runtime_id.load(Ordering::Relaxed)
    }

    /// Closes the control connection: iokerneld reclaims the runtime's cores.
    pub fn disconnect(&self) {
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(connection);
    }
}

/// The shared counters behind a kthread's run queue.
pub(crate) fn runq_counters(k: &IokKthread) -> (&'static AtomicU32, &'static AtomicU32) {
    (&k.positions.runq_head, &k.positions.runq_tail)
}

// `IokShared` is reached from every kthread; its fields are atomics, a mutex, a validated
// region view (which hands out only atomics) and the packet pool, whose buffers are handed
// out one owner at a time.
// SAFETY: see above.
unsafe impl Sync for IokShared {}
// SAFETY: see above.
unsafe impl Send for IokShared {}
// SAFETY: the ingress consumer and command producer are touched only under their locks, the
// egress producer only by the owning kthread with preemption disabled; the rest is atomics,
// spinlocks and the wake word (a futex in the region).
unsafe impl Sync for IokKthread {}
// SAFETY: as above.
unsafe impl Send for IokKthread {}
