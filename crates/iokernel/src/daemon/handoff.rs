//! Waking granted kthreads on their own core (`handover = "local"`): one helper thread per
//! managed core, pinned there at `SCHED_IDLE`, and the loop's side of each core's mailbox. The
//! handshake and the spin budget are corral-handoff's; this file owns the threads and the
//! futexes.
//!
//! The loop rings a granted kthread's wake word itself and posts only the word's address; the
//! helper, which Linux runs only when no kthread on its core is runnable, claims the post and
//! wakes the futex on its own CPU. A helper that has gone to sleep (its core stayed idle for its
//! spin budget) leaves the wake to the loop, which then wakes the helper too, so that it is
//! runnable again by the time the core next goes idle. A post left unclaimed for
//! [`POST_PATIENCE_NS`] (the helper is not getting its CPU) is taken back and delivered by the
//! loop.
//!
//! A core held by a kthread in Linux's idle class (a runtime of `PreemptionMode::IdleClass`) is
//! not idle for the helper, but Linux would share it between the two: while such a kthread
//! holds the core the helper sleeps, the loop delivers grants itself, and it leaves the helper
//! asleep.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;

use corral_handoff::{Delivery, HelperState, Mailbox, SpinBudget};

use crate::sys::{self, now_ns};

/// The shortest spin of a helper whose core idles for long stretches.
const MIN_SPIN_NS: u64 = 5_000;
/// How long a post may wait for the helper before the loop delivers it itself.
const POST_PATIENCE_NS: u64 = 50_000;
/// How long a helper that runs while the loop says a kthread holds its core waits for the loop
/// to see the kthread park before it yields the CPU. Either the kthread just parked (the loop
/// sees it within a microsecond or two, and a yield on the then idle core returns at once), or
/// Linux gave the helper a fair-share slice while the kthread runs: the yield hands it back,
/// so keep this short.
const OCCUPIED_PATIENCE_NS: u64 = 2_000;

/// What a helper counts; it alone writes these.
#[derive(Debug, Default)]
pub(super) struct HelperCounters {
    /// Kthreads it woke on its core.
    pub(super) local_wakes: AtomicU64,
    /// Times it went to sleep after its spin budget.
    pub(super) sleeps: AtomicU64,
    /// Times it yielded its CPU to a kthread that holds the core.
    pub(super) yields: AtomicU64,
    /// Its current spin budget.
    pub(super) spin_limit_ns: AtomicU64,
}

/// One managed core's helper, as the loop sees it.
struct CoreHelper {
    cpu: usize,
    mailbox: Arc<Mailbox>,
    /// The core is held by a kthread in the idle class: the helper is to sleep.
    idle_class: Arc<AtomicBool>,
    counters: Arc<HelperCounters>,
    thread: Option<JoinHandle<()>>,
    /// When the post now in the mailbox was made (loop-private).
    posted_at: Option<u64>,
    /// Wakes the loop delivered because the helper slept.
    loop_wakes: u64,
    /// Posts the loop took back and delivered because the helper did not claim them in time.
    overdue: u64,
}

/// One core's hand-over counters, for the statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HandoffStats {
    pub cpu: usize,
    /// Grants the helper delivered on the core itself.
    pub local_wakes: u64,
    /// Grants the loop delivered from its CPU because the helper slept.
    pub loop_wakes: u64,
    /// Grants the loop delivered because the helper did not get its CPU in time.
    pub overdue_posts: u64,
    pub helper_sleeps: u64,
    pub helper_yields: u64,
    pub helper_spin_limit_ns: u64,
}

/// The helpers of all managed cores, by allocator core index.
pub(super) struct Handoffs {
    cores: Vec<CoreHelper>,
}

impl Handoffs {
    /// Starts one helper per CPU of `cpus` (allocator core `i` is `cpus[i]`), each spinning at
    /// most `spin_max_ns` on its idle core before it sleeps.
    pub(super) fn start(cpus: &[usize], spin_max_ns: u64) -> io::Result<Self> {
        let mut cores = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let mailbox = Arc::new(Mailbox::new());
            let idle_class = Arc::new(AtomicBool::new(false));
            let counters = Arc::new(HelperCounters::default());
            let (ready_tx, ready_rx) = std::sync::mpsc::channel();
            let thread = {
                let (mailbox, counters) = (mailbox.clone(), counters.clone());
                let idle_class = idle_class.clone();
                std::thread::Builder::new()
                    .name(format!("corral-helper{cpu}"))
                    .spawn(move || {
                        let setup = corral_affinity::pin_current_thread(cpu)
                            .map_err(io::Error::other)
                            .and_then(|()| sys::set_idle_policy(sys::gettid(), true));
                        let ok = setup.is_ok();
                        let _ = ready_tx.send(setup);
                        if ok {
                            helper_main(&mailbox, &idle_class, &counters, spin_max_ns);
                        }
                    })?
            };
            let mut helper = CoreHelper {
                cpu,
                mailbox,
                idle_class,
                counters,
                thread: Some(thread),
                posted_at: None,
                loop_wakes: 0,
                overdue: 0,
            };
            match ready_rx.recv() {
                Ok(Ok(())) => cores.push(helper),
                Ok(Err(e)) => {
                    helper.stop();
                    return Err(io::Error::new(
                        e.kind(),
                        format!("cannot set up the helper thread of CPU {cpu}: {e}"),
                    ));
                }
                Err(_) => {
                    helper.stop();
                    return Err(io::Error::other(format!(
                        "the helper thread of CPU {cpu} died during setup"
                    )));
                }
            }
        }
        Ok(Handoffs { cores })
    }

    /// Delivers a ring of `word` (already rung) to the kthread asleep on it, which iokerneld has
    /// just pinned to allocator core `core`. A sleeping helper is woken too, unless the core is
    /// held in the idle class (it would only go back to sleep).
    pub(super) fn deliver(&mut self, core: usize, word: &AtomicU32, now: u64) {
        let h = &mut self.cores[core];
        if let Some(stale) = h.mailbox.retract() {
            // A post still unclaimed from an earlier grant of this core (the kthread it was for
            // has since parked or left): deliver it rather than lose it.
            sys::futex_wake_shared(stale);
            h.overdue += 1;
        }
        let addr = word.as_ptr() as u64;
        match h.mailbox.post(addr) {
            Delivery::ByHelper => h.posted_at = Some(now),
            Delivery::ByLoop => {
                sys::futex_wake_shared(addr);
                h.loop_wakes += 1;
                h.posted_at = None;
                if !h.idle_class.load(Ordering::Relaxed) && h.mailbox.wake_helper() {
                    sys::futex_wake_private(h.mailbox.wakeup_word());
                }
            }
        }
    }

    /// Wakes the kthread asleep on `word` (already rung) from the loop, for a core whose CPU
    /// runs a kthread in the idle class: the helper, in the same class, would get the CPU to
    /// claim a post only when that kthread's slice ends, so none is posted, and a sleeping
    /// helper is left asleep.
    pub(super) fn deliver_from_loop(&mut self, core: usize, word: &AtomicU32) {
        let h = &mut self.cores[core];
        if let Some(stale) = h.mailbox.retract() {
            sys::futex_wake_shared(stale);
            h.overdue += 1;
        }
        h.posted_at = None;
        sys::futex_wake_shared(word.as_ptr() as u64);
        h.loop_wakes += 1;
    }

    /// Records whether a kthread holds allocator core `core`, and whether it runs in the idle
    /// class (then the helper sleeps).
    pub(super) fn set_occupied(&self, core: usize, occupied: bool, idle_class: bool) {
        let h = &self.cores[core];
        h.idle_class
            .store(occupied && idle_class, Ordering::Relaxed);
        h.mailbox.set_occupied(occupied);
    }

    /// Delivers, from the loop, every post a helper has left unclaimed for too long.
    pub(super) fn deliver_overdue(&mut self, now: u64) {
        for h in &mut self.cores {
            let Some(at) = h.posted_at else {
                continue;
            };
            if now.saturating_sub(at) < POST_PATIENCE_NS {
                continue;
            }
            h.posted_at = None;
            if let Some(addr) = h.mailbox.retract() {
                sys::futex_wake_shared(addr);
                h.overdue += 1;
            }
        }
    }

    /// Each core's counters.
    pub(super) fn stats(&self) -> Vec<HandoffStats> {
        self.cores
            .iter()
            .map(|h| HandoffStats {
                cpu: h.cpu,
                local_wakes: h.counters.local_wakes.load(Ordering::Relaxed),
                loop_wakes: h.loop_wakes,
                overdue_posts: h.overdue,
                helper_sleeps: h.counters.sleeps.load(Ordering::Relaxed),
                helper_yields: h.counters.yields.load(Ordering::Relaxed),
                helper_spin_limit_ns: h.counters.spin_limit_ns.load(Ordering::Relaxed),
            })
            .collect()
    }
}

impl CoreHelper {
    fn stop(&mut self) {
        if let Some(post) = self.mailbox.stop() {
            sys::futex_wake_shared(post);
        }
        sys::futex_wake_private(self.mailbox.wakeup_word());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Handoffs {
    fn drop(&mut self) {
        for h in &mut self.cores {
            h.stop();
        }
    }
}

/// A helper's life: watch the mailbox while the core is idle, wake what is posted, yield to a
/// kthread that holds the core, sleep once the spin budget is spent.
fn helper_main(
    mailbox: &Mailbox,
    idle_class: &AtomicBool,
    counters: &HelperCounters,
    spin_max_ns: u64,
) {
    let mut budget = SpinBudget::new(MIN_SPIN_NS, spin_max_ns);
    counters
        .spin_limit_ns
        .store(budget.limit_ns(), Ordering::Relaxed);
    // Running means the core had nothing else to run: it went idle now.
    let mut idle_since = now_ns();
    let mut occupied_since: Option<u64> = None;
    loop {
        if let Some(target) = mailbox.claim() {
            // The gap ends now: the wake hands the CPU to the kthread before it returns.
            budget.record_gap(now_ns().saturating_sub(idle_since));
            counters
                .spin_limit_ns
                .store(budget.limit_ns(), Ordering::Relaxed);
            // Counted before the wake: the woken kthread preempts this idle-class thread at
            // once, and a count made after it would wait for the helper's next slice, which on
            // a busy core may come long after the wake.
            counters.local_wakes.fetch_add(1, Ordering::Relaxed);
            sys::futex_wake_shared(target);
            // Back here when the core is idle again.
            idle_since = now_ns();
            occupied_since = None;
            continue;
        }
        let now = now_ns();
        // Held in the idle class: the core is busy, and this thread would share it.
        let held_in_idle_class = idle_class.load(Ordering::Relaxed);
        if mailbox.occupied() && !held_in_idle_class {
            // Either its kthread parked and the loop has not seen it yet, or Linux gave this
            // thread a slice while the kthread runs: then give it back.
            let since = *occupied_since.get_or_insert(now);
            if now.saturating_sub(since) > OCCUPIED_PATIENCE_NS {
                // SAFETY: sched_yield takes no arguments and cannot fail in a way we act on.
                unsafe { libc::sched_yield() };
                counters.yields.fetch_add(1, Ordering::Relaxed);
                occupied_since = None;
                idle_since = now_ns();
            }
        } else {
            if occupied_since.take().is_some() {
                // The loop just saw the core's kthread park: the idle gap starts now.
                idle_since = now;
            }
            if held_in_idle_class || now.saturating_sub(idle_since) > budget.limit_ns() {
                match mailbox.announce_sleep() {
                    Err(Some(target)) => {
                        // A grant just as the budget ran out: the gap ends now.
                        budget.record_gap(now_ns().saturating_sub(idle_since));
                        counters.local_wakes.fetch_add(1, Ordering::Relaxed);
                        sys::futex_wake_shared(target);
                    }
                    Err(None) => return,
                    Ok(wakeups) => {
                        counters.sleeps.fetch_add(1, Ordering::Relaxed);
                        // The loop moves the word on after marking us watching: sleep only
                        // while it has not.
                        while mailbox.helper_state() == HelperState::Asleep
                            && mailbox.wakeups() == wakeups
                        {
                            sys::futex_wait_private(mailbox.wakeup_word(), wakeups);
                        }
                        if mailbox.helper_state() == HelperState::Stopping {
                            return;
                        }
                        // Woken once the loop delivered a grant itself; running again once the
                        // core is idle. The gap was at least this long: what the budget needs
                        // to know is that it outlasted the spin (a core held in the idle class
                        // was not idle: nothing to learn).
                        if !held_in_idle_class {
                            budget.record_gap(now_ns().saturating_sub(idle_since));
                        }
                    }
                }
                counters
                    .spin_limit_ns
                    .store(budget.limit_ns(), Ordering::Relaxed);
                idle_since = now_ns();
                continue;
            }
        }
        if mailbox.helper_state() == HelperState::Stopping {
            return;
        }
        core::hint::spin_loop();
    }
}
