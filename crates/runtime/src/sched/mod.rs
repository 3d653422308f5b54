//! The scheduler: per-kthread run queues, work stealing, and parking of idle kthreads.
//!
//! Each kthread runs [`sched_main`] on its own OS stack (the "scheduler context"). Uthreads
//! switch straight to one another when the local run queue has work, and fall back into the
//! scheduler context when it is empty. The scheduler then checks timers, the runtime's inject
//! queue and other kthreads' run queues (stealing half of one), and after
//! `Config::spin_before_park` of finding nothing it parks the kthread on a futex.
//!
//! Invariants:
//! - Only a kthread pushes to its own run queue; popping and stealing go through
//!   `RunQueue::lock` (the `runqueue::Locked` guard).
//! - A uthread's `running` flag is cleared by the context switch *after* its registers are
//!   saved; whoever resumes it first waits for the flag to clear. So a uthread may be made
//!   runnable (even stolen) before it has finished switching away.
//! - A parking kthread has an empty run queue, and rechecks every queue after announcing itself
//!   parked; a kthread that makes work runnable checks for parked kthreads after publishing it
//!   (with a full fence between), so no runnable work waits while a kthread sleeps.

pub(crate) mod blocking;
pub(crate) mod idle;
pub(crate) mod kthread;
pub(crate) mod running;
pub(crate) mod runqueue;
pub(crate) mod stack;
pub(crate) mod timer_watch;
pub(crate) mod uthread;

use core::cell::UnsafeCell;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::collections::VecDeque;

use crate::arch;
use crate::config::Config;
use crate::iokernel::{IokKthread, IokShared};
use crate::preempt;
use crate::sync::spin::RawSpinLock;
use crate::timer;
use idle::Idle;
use kthread::{Kthread, KthreadState, this_kthread};
use running::RunningFlag;
use runqueue::RUNQ_CAPACITY;
use uthread::UThread;

/// How many scheduling decisions a kthread makes between forced trips through the scheduler
/// (for timers and the inject queue) when uthreads keep switching straight to one another.
const POLL_EVERY: u32 = 64;

/// State of one runtime shared by all its kthreads.
pub(crate) struct Shared {
    pub kthreads: Box<[&'static Kthread]>,
    pub config: Config,
    /// Which kthreads are spinning and parked.
    pub idle: Idle,
    inject_lock: RawSpinLock,
    inject: UnsafeCell<VecDeque<usize>>,
    pub(crate) inject_len: AtomicUsize,
    pub stacks: stack::StackPool,
    pub shutdown: AtomicBool,
    /// Uthreads spawned from threads that are not this runtime's kthreads.
    pub foreign_spawned: core::sync::atomic::AtomicU64,
    /// Set in iokerneld mode, where iokerneld decides which kthreads run.
    pub iok: Option<IokShared>,
    /// Set when the configuration has a network.
    pub net: Option<std::sync::Arc<crate::net::stack::NetStack>>,
    /// Kthreads out of the blocking reserve (`config.kthreads` of them at start).
    pub active_kthreads: AtomicUsize,
}

// SAFETY: the UnsafeCells are guarded by the spinlocks next to them.
unsafe impl Sync for Shared {}
// SAFETY: as above.
unsafe impl Send for Shared {}

impl Shared {
    pub fn new(config: Config, iok: Option<(IokShared, Vec<IokKthread>)>) -> Box<Shared> {
        let config_kthreads = config.kthreads;
        let (iok, mut iok_kthreads) = match iok {
            Some((shared, kthreads)) => (Some(shared), kthreads.into_iter().map(Some).collect()),
            None => (None, Vec::new()),
        };
        iok_kthreads.resize_with(config.kthreads + config.blocking_reserve, || None);
        let net = config
            .net
            .as_ref()
            .map(|n| crate::net::new_stack(n, iok.is_some()));
        let mut shared = Box::new(Shared {
            kthreads: Box::new([]),
            stacks: stack::StackPool::new(config.stack_size),
            config,
            idle: Idle::new(),
            inject_lock: RawSpinLock::new(),
            inject: UnsafeCell::new(VecDeque::new()),
            inject_len: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            foreign_spawned: core::sync::atomic::AtomicU64::new(0),
            active_kthreads: AtomicUsize::new(config_kthreads),
            iok,
            net,
        });
        let rt: *const Shared = &*shared;
        let uthread_tls = shared.config.uthread_tls;
        // Kthreads are leaked on purpose: an OS thread created by a kthread inherits its %gs
        // base, and `current_kthread` reads through it, so that memory must stay valid.
        shared.kthreads = iok_kthreads
            .into_iter()
            .enumerate()
            .map(|(i, iok)| &*Box::leak(Kthread::new(i, rt, iok, uthread_tls)))
            .collect();
        for k in &shared.kthreads[config_kthreads..] {
            k.in_reserve.store(true, Ordering::Relaxed);
        }
        shared
    }

    fn nkthreads(&self) -> usize {
        self.kthreads.len()
    }

    /// Queues a runnable uthread from outside this runtime's kthreads.
    pub fn inject(&self, th: usize) {
        preempt::disable();
        self.inject_lock.lock();
        // SAFETY: inject_lock held.
        unsafe { (*self.inject.get()).push_back(th) };
        self.inject_len.fetch_add(1, Ordering::Relaxed);
        if let Some(iok) = &self.iok {
            iok.shared_added(1);
        }
        // SAFETY: we hold the lock.
        unsafe { self.inject_lock.unlock() };
        preempt::enable();
        self.wake_if_idle();
    }

    /// Moves up to `max` injected uthreads into `k`'s run queue; returns the first.
    fn take_injected(&self, k: &Kthread, max: usize) -> Option<usize> {
        if self.inject_len.load(Ordering::Relaxed) == 0 || !self.inject_lock.try_lock() {
            return None;
        }
        // SAFETY: inject_lock held.
        let q = unsafe { &mut *self.inject.get() };
        let first = q.pop_front();
        let mut taken = usize::from(first.is_some());
        while taken < max {
            let Some(th) = q.front().copied() else { break };
            if k.rq.push(th).is_err() {
                break;
            }
            q.pop_front();
            taken += 1;
        }
        self.inject_len.fetch_sub(taken, Ordering::Relaxed);
        if let Some(iok) = &self.iok {
            iok.shared_taken(taken);
        }
        // SAFETY: we hold the lock.
        unsafe { self.inject_lock.unlock() };
        first
    }

    /// Wakes a parked kthread if work was just published and nobody is looking for it.
    #[inline]
    pub fn wake_if_idle(&self) {
        if self.iok.is_some() {
            // iokerneld watches the queues and grants a core when work waits.
            return;
        }
        if self.idle.wake_needed() {
            self.wake_one();
        }
    }

    /// `wake_if_idle` after a kthread queued work on its own run queue: with a single kthread
    /// that kthread is awake and will run it, so there is nobody to wake.
    #[inline]
    pub fn wake_if_idle_after_local_push(&self) {
        if self.nkthreads() > 1 {
            self.wake_if_idle();
        }
    }

    /// Unparks one kthread, which starts out spinning.
    fn wake_one(&self) {
        // A uthread may call this: it must not be preempted while holding the parked list.
        preempt::disable();
        let index = self.idle.take_parked();
        preempt::enable();
        if let Some(i) = index {
            self.kthreads[i].park_word.wake();
        }
    }

    /// The earliest timer deadline of any kthread.
    fn earliest_timer(&self) -> u64 {
        self.kthreads
            .iter()
            .map(|k| k.timers.next_deadline())
            .min()
            .unwrap_or(u64::MAX)
    }

    /// A timer was added: if every parked kthread sleeps past it, wake one to watch it.
    pub fn timer_added(&self, deadline: u64) {
        if self.iok.is_some() {
            // Timers are added by running kthreads, and the last one to park reports them.
            return;
        }
        let watched = self.kthreads.iter().map(|k| &k.park_deadline);
        if timer_watch::needs_watcher(&self.idle, deadline, watched) {
            self.wake_one();
        }
    }

    /// Whether any work is visible to a kthread about to park.
    fn work_visible(&self, now: u64) -> bool {
        self.inject_len.load(Ordering::SeqCst) > 0
            || self
                .kthreads
                .iter()
                .any(|k| !k.rq.is_empty() || k.timers.next_deadline() <= now)
    }

    /// Uthreads spawned and not yet exited.
    pub fn live_uthreads(&self) -> u64 {
        let spawned: u64 = self
            .kthreads
            .iter()
            .map(|k| k.spawned.load(Ordering::Relaxed))
            .sum();
        let exited: u64 = self
            .kthreads
            .iter()
            .map(|k| k.exited.load(Ordering::Relaxed))
            .sum();
        (spawned + self.foreign_spawned.load(Ordering::Relaxed)).saturating_sub(exited)
    }

    /// Stops every kthread once they finish what they are running.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for k in self.kthreads.iter() {
            k.park_word.wake();
            if let Some(iok) = &k.iok {
                iok.kick();
            }
        }
    }
}

/// Entry of a kthread's OS thread.
pub(crate) fn kthread_main(k: &'static Kthread) {
    k.bind_current_thread();
    crate::signal::on_kthread_start();
    crate::sync::rcu::register_kthread(k);
    let rt = k.shared();
    if rt.iok.is_some() {
        // Under iokerneld a kthread starts parked and runs only once granted a core.
        k.state.store(KthreadState::Parked, Ordering::SeqCst);
        rt.idle.count_parked(true);
        // As in iok_park: only a grant (or shutdown) ends the wait. Counted from zero, not from
        // a fresh read: once registered, a running kthread stealing packets from this ring may
        // apply the first grant before this kthread gets here.
        k.iok()
            .wait_for_grant(&rt.shutdown, 0, || drain_while_parked(k));
        rt.idle.count_parked(false);
        if let Some(iok) = &rt.iok {
            iok.active.unpark();
        }
        // The scheduler context runs with preemption disabled.
        crate::iokernel::poll_own(k);
    }
    if k.in_reserve.load(Ordering::SeqCst) {
        k.state.store(KthreadState::Parked, Ordering::SeqCst);
        k.timers.stop_accepting();
        blocking::wait_in_reserve(k);
        k.timers.start_accepting();
    }
    rt.idle.start_spinning();
    k.state.store(KthreadState::Spinning, Ordering::SeqCst);
    sched_main(k);
    k.state.store(KthreadState::Gone, Ordering::SeqCst);
    stack::drain_kthread_cache(k);
    // iokerneld may still signal this thread until the runtime's connection closes; once
    // unbound, the handler would take the signal for someone else's and give it its default
    // action, which ends the process.
    crate::signal::on_kthread_exit();
    k.unbind_current_thread();
}

/// The scheduler loop. Runs with preemption disabled, on the kthread's own stack.
fn sched_main(k: &'static Kthread) {
    let rt = k.shared();
    // This kthread starts counted as spinning.
    let mut spinning = true;
    let mut spin_start = timer::now_ns();
    loop {
        // A preemption signal that reached this kthread while it had no uthread to interrupt
        // (here, or parked) was recorded as pending. Whatever it asked for, the pass below
        // covers: the ring poll finds a `Preempt` pushed before the signal, and `find_work`
        // fires due timers and polls the network. Left pending, it would interrupt the next
        // uthread at its first `preempt::enable` for nothing, which happens after nearly every
        // preemption of a runtime iokerneld signals at once.
        crate::signal::clear_pending(k);
        // Our own ingress ring, in the scheduler context (preemption disabled): packets, and
        // whether iokerneld wants the core back.
        if k.iok.is_some() && crate::iokernel::poll_own(k) {
            // iokerneld wants the core back, whatever work is queued.
            if !k.ran_since_grant.get() {
                k.iok().cedes_before_running.fetch_add(1, Ordering::Relaxed);
            }
            if !spinning {
                spinning = true;
                k.state.store(KthreadState::Spinning, Ordering::Relaxed);
                rt.idle.start_spinning();
            }
            iok_park(k, true);
            spin_start = timer::now_ns();
            continue;
        }
        if let Some(th) = find_work(k) {
            if spinning {
                spinning = false;
                k.state.store(KthreadState::Running, Ordering::Relaxed);
                if rt.idle.stop_spinning() {
                    // We were the last one looking: there may be more work (on our queue or
                    // a victim's), so make sure somebody keeps looking.
                    rt.wake_if_idle_after_local_push();
                }
            }
            k.ran_since_grant.set(true);
            // SAFETY: th came off a run queue, so it is a live, runnable uthread of this
            // runtime, and we are in the scheduler context of the kthread we run on.
            unsafe { run_from_scheduler(k, th as *mut UThread) };
            reap_dead(k);
            if let Some(th) = NonNull::new(k.interrupted.replace(ptr::null_mut())) {
                kicked(k, th);
            }
            continue;
        }
        if rt.shutdown.load(Ordering::Relaxed) {
            if spinning {
                rt.idle.stop_spinning();
            }
            return;
        }
        let now = timer::now_ns();
        if !spinning {
            spinning = true;
            spin_start = now;
            k.state.store(KthreadState::Spinning, Ordering::Relaxed);
            rt.idle.start_spinning();
        } else if now.saturating_sub(spin_start) >= rt.config.spin_before_park.as_nanos() as u64
            && rt.iok.as_ref().is_none_or(|iok| k.index >= iok.spinning)
        {
            if rt.iok.is_some() {
                iok_park(k, false);
            } else if !blocking::retire(k) {
                park(k);
            }
            // Parking returns with this kthread counted as spinning again.
            spin_start = timer::now_ns();
        } else {
            arch::pause();
        }
    }
}

/// The preemption signal interrupted `th` under iokerneld: either iokerneld wants the core
/// (a `Preempt` on the ingress ring) or it kicked this kthread because packets waited unread
/// on its ring (or a parked kthread's) or a timer (its own or a parked kthread's) went overdue
/// while its uthreads did not yield. Runs that network work and the due timers now, then queues `th` behind what they made runnable, so that a
/// uthread woken by a packet or a timer runs before the one that kept the kthread busy (it
/// would otherwise wait behind it, and behind every other uthread that does not yield). The
/// loop then parks if iokerneld asked for the core. Scheduler context.
fn kicked(k: &'static Kthread, th: NonNull<UThread>) {
    let waiting = k.rq.len();
    let ceded = crate::iokernel::poll_own(k);
    if !ceded {
        k.iok().kicks.fetch_add(1, Ordering::Relaxed);
        let rt = k.shared();
        let now = timer::now_ns();
        // Every kthread's due timers, not only ours: iokerneld also kicks the first running
        // kthread for timers and frames left on parked kthreads, which nobody else fires.
        for victim in rt.kthreads.iter() {
            if victim.timers.next_deadline() <= now {
                timer::run_expired(&victim.timers, now);
            }
        }
        if let Some(net) = &rt.net
            && net.next_deadline() <= now
        {
            net.poll(now);
        }
        if rt.nkthreads() > 1 {
            crate::iokernel::steal_ingress(k);
        }
        let readied = k.rq.len().saturating_sub(waiting);
        if readied > 0 && waiting > 0 {
            k.rq.lock().move_oldest_to_back(waiting);
        }
    }
    push_local(k, th.as_ptr() as usize);
}

/// Finds the next uthread for `k`: expired timers, the local queue, the inject queue, then
/// stealing. Scheduler context only.
fn find_work(k: &Kthread) -> Option<usize> {
    k.rcu_gen.fetch_add(1, Ordering::Release);
    let rt = k.shared();
    if let Some(iok) = &rt.iok {
        iok.reported.maybe_publish(rt, timer::now_ns(), false);
    }
    if k.timers.next_deadline() != u64::MAX {
        timer::run_expired(&k.timers, timer::now_ns());
    }
    if let Some(net) = &rt.net {
        // ARP retries armed from outside a kthread have no runtime timer behind them.
        let due = net.next_deadline();
        if due != u64::MAX && due <= timer::now_ns() {
            net.poll(timer::now_ns());
        }
    }
    // On the periodic trips through the scheduler one uthread from the inject queue goes
    // first, so work from outside (or spilled from a full queue) cannot starve behind uthreads
    // that keep yielding. Only one: moving a batch onto a full local queue would just spill it
    // again before any of it ran.
    let inject_first = k.ticks.get().is_multiple_of(POLL_EVERY);
    if inject_first && let Some(th) = rt.take_injected(k, 1) {
        return Some(th);
    }
    if let Some(th) = pop_local(k) {
        return Some(th);
    }
    if let Some(th) = rt.take_injected(k, RUNQ_CAPACITY / 2) {
        return Some(th);
    }
    let n = rt.nkthreads();
    // Packets waiting on a busy or parked kthread's ring are work too: processing them here
    // may make uthreads runnable on our queue.
    if n > 1
        && k.iok.is_some()
        && crate::iokernel::steal_ingress(k)
        && let Some(th) = pop_local(k)
    {
        return Some(th);
    }
    if n > 1 {
        let start = (k.next_random() as usize) % n;
        for i in 0..n {
            let victim = rt.kthreads[(start + i) % n];
            if ptr::eq(victim, k) {
                continue;
            }
            if !victim.rq.is_empty()
                && let Some(mut taking) = victim.rq.try_lock()
            {
                let moved = taking.steal_half_into(&k.rq);
                drop(taking);
                if moved > 0 {
                    return pop_local(k);
                }
            }
        }
        // Expired timers of kthreads that are busy or parked.
        let now = timer::now_ns();
        for victim in rt.kthreads.iter() {
            if !ptr::eq(*victim, k) && victim.timers.next_deadline() <= now {
                timer::run_expired(&victim.timers, now);
            }
        }
        if let Some(th) = pop_local(k) {
            return Some(th);
        }
    }
    None
}

#[inline]
fn pop_local(k: &Kthread) -> Option<usize> {
    if k.rq.is_empty() {
        return None;
    }
    k.rq.lock().pop()
}

/// Parks `k` until it is woken (standalone mode). Returns with `k` counted as spinning.
fn park(k: &'static Kthread) {
    let rt = k.shared();
    // Hand our timers to a kthread that is awake; if none is, we keep them and wake ourselves
    // at the earliest deadline.
    if k.timers.next_deadline() != u64::MAX {
        hand_timers_to_a_running_kthread(k);
    }
    k.timers.stop_accepting();

    k.state.store(KthreadState::Parked, Ordering::SeqCst);
    rt.idle.announce_parked(k.index, &k.park_word);

    // Anything published before we were counted as parked must be seen now.
    let mut woken = rt.work_visible(timer::now_ns()) || rt.shutdown.load(Ordering::SeqCst);
    while !woken {
        // Wake for every kthread's timers, not only ours: a kthread busy in a long uthread
        // cannot fire its own. Publish what we watch, then look again, so that a timer added
        // meanwhile is either seen here or sees us (Shared::timer_added).
        let watch = k.park_deadline.publish(|| rt.earliest_timer());
        let now = timer::now_ns();
        if watch <= now {
            break;
        }
        woken = k.park_word.sleep((watch != u64::MAX).then(|| watch - now))
            || rt.shutdown.load(Ordering::SeqCst);
    }
    k.park_deadline.clear();
    rt.idle.leave_parked(k.index);
    k.timers.start_accepting();
    k.state.store(KthreadState::Spinning, Ordering::SeqCst);
}

/// Parks `k` under iokerneld: reports it and sleeps on its wake word until iokerneld grants a
/// core again. `preempted`: iokerneld asked for the core. Returns with `k` counted as spinning.
fn iok_park(k: &'static Kthread, preempted: bool) {
    let rt = k.shared();
    let iok = rt.iok.as_ref().expect("iokerneld mode");
    let kio = k.iok();
    if k.timers.next_deadline() != u64::MAX {
        timer::drop_stale_tcp_timers(&k.timers, timer::now_ns());
    }
    // Hand our timers to a kthread that still holds a core; if none does, the last kthread to
    // park reports the earliest timer of all to iokerneld.
    if k.timers.next_deadline() != u64::MAX {
        hand_timers_to_a_running_kthread(k);
    }
    k.timers.stop_accepting();
    k.state.store(KthreadState::Parked, Ordering::SeqCst);
    let last = iok.active.park();
    // iokerneld watches only the run queues of kthreads that hold a core. The last one must
    // not leave runnable work on a parked kthread's queue unannounced: it takes it instead
    // (find_work steals from every kthread), unless iokerneld is taking the core, in which
    // case the park is flagged as leaving work behind.
    let work_left = rt.kthreads.iter().any(|other| !other.rq.is_empty());
    if last && !preempted && (work_left || rt.inject_len.load(Ordering::SeqCst) > 0) {
        iok.active.unpark();
        k.timers.start_accepting();
        k.state.store(KthreadState::Spinning, Ordering::SeqCst);
        return;
    }
    rt.idle.count_parked(true);
    rt.idle.stop_spinning();
    let mut acks_can_wait = false;
    if last {
        let now = timer::now_ns();
        // A runtime gone quiet leaves its final counters for iokerneld's statistics.
        iok.reported.maybe_publish(rt, now, true);
        // SAFETY: our own command ring, scheduler context.
        unsafe { crate::iokernel::send_timer_deadline(kio, rt.earliest_timer()) };
        // Until the next grant only the parked kthreads' ring drains run TCP, for frames that
        // asked for a core themselves (a grant follows) or bare ACKs (which only settle
        // what they acknowledge), so this holds until iokerneld is told again.
        acks_can_wait = rt.net.as_ref().is_none_or(|n| n.tcp.acks_can_wait(now));
    }
    let grants = kio.grants.load(Ordering::Acquire);
    // SAFETY: as above.
    unsafe { kio.send_park(preempted, work_left, acks_can_wait) };
    // Run again only with a grant (or to shut down). A ring of the wake word that arrives without one
    // would otherwise put this kthread on a core iokerneld has given to someone else, where
    // Linux time-slices the two.
    kio.wait_for_grant(&rt.shutdown, grants, || drain_while_parked(k));
    k.ran_since_grant.set(false);
    crate::iokernel::poll_own(k);
    iok.active.unpark();
    rt.idle.count_parked(false);
    rt.idle.start_spinning();
    k.timers.start_accepting();
    k.state.store(KthreadState::Spinning, Ordering::SeqCst);
}

/// A parked kthread's drain of its ingress ring (looking for its grant); returns the grants seen.
/// Segments the drain hands to TCP may arm timers on this kthread (a retransmission, a delayed
/// ACK), after the runtime reported its earliest timer when it parked: they go to a kthread
/// that holds a core, or else the earliest deadline is reported again, so that iokerneld wakes
/// the runtime for them. Scheduler context.
fn drain_while_parked(k: &'static Kthread) -> u64 {
    let grants = crate::iokernel::drain_own_after_wake(k);
    if k.timers.next_deadline() != u64::MAX && !hand_timers_to_a_running_kthread(k) {
        // SAFETY: our own command ring, scheduler context.
        unsafe { crate::iokernel::send_timer_deadline(k.iok(), k.shared().earliest_timer()) };
    }
    grants
}

/// Moves `k`'s timers to a kthread of its runtime that is not parked, if one accepts them;
/// returns whether one did.
fn hand_timers_to_a_running_kthread(k: &Kthread) -> bool {
    k.shared().kthreads.iter().any(|other| {
        !ptr::eq(*other, k)
            && other.state.load(Ordering::SeqCst) != KthreadState::Parked
            && k.timers.move_all_to(&other.timers)
    })
}

/// Switches from the scheduler context into `th`.
///
/// # Safety
/// Scheduler context of `k`; `th` is runnable and owned by nobody else.
unsafe fn run_from_scheduler(k: &Kthread, th: *mut UThread) {
    // SAFETY: forwarded.
    unsafe { switch_into(k, k.sched_rsp.as_ptr(), &k.sched_running, th) };
}

/// Saves the running context into `save`/`prev_running` and resumes `next`.
///
/// # Safety
/// Preemption is disabled; `next` is runnable, owned by the caller, and is not the caller.
#[inline(always)]
unsafe fn switch_into(
    k: &Kthread,
    save: *mut usize,
    prev_running: &RunningFlag,
    next: *mut UThread,
) {
    // SAFETY: next is a live uthread (caller's contract).
    let next = unsafe { &*next };
    // It may have been readied before it finished switching away on another kthread.
    next.running.claim();
    k.count_switch();
    k.set_current(next as *const UThread as *mut UThread);
    // SAFETY: we switch to next right below, preemption disabled (caller's contract).
    unsafe { k.install_fs(next.fs_base()) };
    // SAFETY: next's saved stack pointer is valid and its context is not running anywhere.
    unsafe { arch::switch_context(save, next.saved_rsp(), prev_running.as_switch_flag()) };
}

/// Switches away from the current uthread, which must already be queued somewhere (or about to
/// be woken by someone else). Returns when it is resumed, possibly on another kthread.
///
/// # Safety
/// Called from a uthread with preemption disabled exactly once by the caller.
pub(crate) unsafe fn schedule_away() {
    // SAFETY: we run on a kthread (a uthread is running).
    let k = unsafe { this_kthread() };
    let cur = k.current();
    debug_assert!(!cur.is_null());
    // SAFETY: cur is the running uthread.
    let cur = unsafe { &*cur };
    let tick = k.ticks.get().wrapping_add(1);
    k.ticks.set(tick);
    if tick % POLL_EVERY != 0
        && !cede_pending(k)
        && let Some(next) = pop_local(k)
    {
        k.rcu_gen.fetch_add(1, Ordering::Release);
        // SAFETY: next came off our run queue; preemption is disabled.
        unsafe { switch_into(k, cur.rsp_slot(), &cur.running, next as *mut UThread) };
        return;
    }
    k.set_current(ptr::null_mut());
    // SAFETY: the scheduler context runs next, with preemption disabled.
    unsafe { k.install_fs(0) };
    // SAFETY: the scheduler context of this kthread is suspended in run_from_scheduler.
    unsafe {
        arch::switch_context(
            cur.rsp_slot(),
            k.sched_rsp.get(),
            cur.running.as_switch_flag(),
        )
    };
}

/// Makes `th` runnable.
pub(crate) fn ready(th: NonNull<UThread>) {
    // SAFETY: th is a live uthread that is blocked; its runtime outlives it.
    let rt = unsafe { th.as_ref().runtime() };
    preempt::disable();
    match kthread::current_kthread() {
        // A parked kthread (draining its ingress ring while it waits for a grant) must not keep
        // what it readies: iokerneld does not watch a parked kthread's run queue, so the work
        // would wait for some unrelated wake-up. The shared queue is watched, and new work
        // there gets a runtime with no core a core at once.
        Some(k) if ptr::eq(k.rt, rt) && k.state.load(Ordering::Relaxed) != KthreadState::Parked => {
            push_local(k, th.as_ptr() as usize);
            preempt::enable();
            rt.wake_if_idle_after_local_push();
        }
        _ => {
            preempt::enable();
            rt.inject(th.as_ptr() as usize);
        }
    }
}

/// Pushes onto `k`'s own run queue, spilling half of it to the inject queue when full.
pub(crate) fn push_local(k: &Kthread, th: usize) {
    if k.rq.push(th).is_ok() {
        return;
    }
    let rt = k.shared();
    let mut taking = k.rq.lock();
    rt.inject_lock.lock();
    // SAFETY: inject_lock held.
    let q = unsafe { &mut *rt.inject.get() };
    let mut moved = 0;
    for _ in 0..RUNQ_CAPACITY / 2 {
        match taking.pop() {
            Some(t) => {
                q.push_back(t);
                moved += 1;
            }
            None => break,
        }
    }
    q.push_back(th);
    rt.inject_len.fetch_add(moved + 1, Ordering::Relaxed);
    if let Some(iok) = &rt.iok {
        iok.shared_added(moved + 1);
    }
    // SAFETY: we hold the lock.
    unsafe { rt.inject_lock.unlock() };
    drop(taking);
}

/// Whether iokerneld asked `k` for its core: the switch then goes through the scheduler,
/// which parks.
#[inline]
fn cede_pending(k: &Kthread) -> bool {
    k.iok.as_ref().is_some_and(|kio| kio.cede_pending())
}

/// A cooperative preemption point for long computations: yields if iokerneld has asked this
/// kthread for its core (its cede word moved), so that the kthread parks at once, without the
/// preemption signal and the cross-CPU interrupt it costs. Otherwise it costs a load and a
/// compare, so a compute loop can call it every few microseconds. Does nothing off a kthread
/// or without iokerneld.
#[inline]
pub fn preemption_point() {
    let asked = {
        let _guard = crate::preempt::PreemptGuard::new();
        kthread::current_kthread().is_some_and(cede_pending)
    };
    if asked {
        yield_now();
    }
}

/// Yields the current uthread: it goes to the back of the local queue and the next one runs.
/// Off a kthread this yields the OS thread.
pub fn yield_now() {
    if kthread::current_kthread().is_none() {
        std::thread::yield_now();
        return;
    }
    // SAFETY: on a kthread.
    unsafe { disable_for_switch() };
    // SAFETY: we are on a kthread, in a uthread, with preemption disabled.
    unsafe { yield_locked() };
    // SAFETY: disabled above.
    unsafe { preempt::enable_on_kthread() };
}

/// # Safety
/// In a uthread on a kthread, with preemption disabled once.
unsafe fn yield_locked() {
    // SAFETY: on a kthread.
    let k = unsafe { this_kthread() };
    let cur = k.current();
    let tick = k.ticks.get().wrapping_add(1);
    k.ticks.set(tick);
    if tick % POLL_EVERY == 0 || cede_pending(k) {
        // Give the scheduler a turn (timers, inject queue, fairness with other kthreads).
        push_local(k, cur as usize);
        k.set_current(ptr::null_mut());
        // SAFETY: the scheduler context runs next, with preemption disabled.
        unsafe { k.install_fs(0) };
        // SAFETY: cur is running; the scheduler context is suspended.
        unsafe {
            arch::switch_context(
                (*cur).rsp_slot(),
                k.sched_rsp.get(),
                (*cur).running.as_switch_flag(),
            )
        };
        return;
    }
    if k.rq.is_empty() {
        return;
    }
    let mut taking = k.rq.lock();
    let next = taking.pop();
    if let Some(next) = next {
        // There is room: we just took one out, and only we push.
        let _ = k.rq.push(cur as usize);
        drop(taking);
        k.rcu_gen.fetch_add(1, Ordering::Release);
        // SAFETY: cur is running, next came off our queue.
        unsafe { switch_into(k, (*cur).rsp_slot(), &(*cur).running, next as *mut UThread) };
    } else {
        drop(taking);
    }
}

/// The preemption signal arrived with preemption enabled, in a uthread.
pub(crate) fn yield_from_signal() {
    // SAFETY: the signal handler runs on the interrupted uthread's kthread and disabled
    // preemption once.
    unsafe { preempted_locked() };
}

/// What the preemption signal does: under iokerneld, return to the scheduler, which reads why
/// (a `Preempt` command) and parks; standalone, yield to the next uthread.
///
/// # Safety
/// In a uthread on a kthread, with preemption disabled once.
unsafe fn preempted_locked() {
    // SAFETY: on a kthread (caller's contract).
    let k = unsafe { this_kthread() };
    if k.iok.is_none() {
        // SAFETY: forwarded.
        unsafe { yield_locked() };
        return;
    }
    let cur = k.current();
    // The scheduler queues it again once it has looked at why it was signalled (`kicked`).
    k.interrupted.set(cur);
    k.set_current(ptr::null_mut());
    // SAFETY: the scheduler context runs next, with preemption disabled.
    unsafe { k.install_fs(0) };
    // SAFETY: cur is running and handed to the scheduler; the scheduler context is suspended.
    unsafe {
        arch::switch_context(
            (*cur).rsp_slot(),
            k.sched_rsp.get(),
            (*cur).running.as_switch_flag(),
        )
    };
}

/// A pending preemption became due (the counter dropped to zero): yield the core.
pub(crate) fn preempt_pending() {
    let Some(k) = kthread::current_kthread() else {
        return;
    };
    // SAFETY: a pending request is only ever set on a kthread; restoring the bit is the
    // handler's own bookkeeping.
    crate::signal::clear_pending(k);
    if !k.current().is_null() {
        // SAFETY: on a kthread, in a uthread, preemption enabled (count just reached zero).
        unsafe {
            preempt::disable_on_kthread();
            preempted_locked();
            preempt::enable_on_kthread();
        }
    }
}

/// Disables preemption for an operation that may switch away, after checking that the caller
/// is a uthread that did not already have preemption disabled (holding a spinlock or an RCU read
/// section across a switch would deadlock): that panics.
///
/// # Safety
/// The caller runs on a kthread.
#[inline]
pub(crate) unsafe fn disable_for_switch() {
    // SAFETY: on a kthread, per the contract. From here on we cannot migrate, so the kthread
    // read below is the one we run on.
    unsafe { preempt::disable_on_kthread() };
    // SAFETY: as above.
    let k = unsafe { this_kthread() };
    let depth = k.preempt_word() & !kthread::PREEMPT_NOT_PENDING;
    if depth != 1 || k.current().is_null() {
        // SAFETY: undoing our own disable.
        unsafe { preempt::enable_on_kthread() };
        switch_not_allowed(depth - 1);
    }
}

#[cold]
fn switch_not_allowed(depth: u32) -> ! {
    panic!(
        "corral: a uthread tried to block or yield with preemption disabled (depth {depth}): \
         a SpinLock guard, PreemptGuard or RCU read guard is held across a blocking call"
    );
}

/// Recycles the uthread that just exited on `k`, if any.
fn reap_dead(k: &Kthread) {
    let dead = k.dead.replace(ptr::null_mut());
    if let Some(dead) = NonNull::new(dead) {
        kthread::bump(&k.exited);
        stack::release(k, dead);
    }
}

/// Ends the current uthread. Its stack is recycled by the scheduler.
///
/// # Safety
/// Called by the uthread entry after the uthread's closure has returned, with nothing on the
/// stack that still needs dropping.
pub(crate) unsafe fn exit_current() -> ! {
    // SAFETY: we are in a uthread on a kthread.
    unsafe { preempt::disable_on_kthread() };
    // SAFETY: as above; not kept across a switch (we never come back).
    let k = unsafe { this_kthread() };
    let cur = k.current();
    k.dead.set(cur);
    k.set_current(ptr::null_mut());
    // SAFETY: the scheduler context runs next, with preemption disabled.
    unsafe { k.install_fs(0) };
    // SAFETY: the scheduler context is suspended; our context is never resumed.
    unsafe {
        arch::switch_context(
            (*cur).rsp_slot(),
            k.sched_rsp.get(),
            (*cur).running.as_switch_flag(),
        )
    };
    unreachable!("a dead uthread was resumed");
}
