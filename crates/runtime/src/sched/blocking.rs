//! The blocking reserve (standalone mode, `Config::blocking_reserve`): kthreads that stand in
//! for kthreads blocked in the kernel.
//!
//! A uthread that makes a blocking system call the runtime does not turn into a uthread wait
//! (`epoll_wait`, a `read` on a pipe, a raw futex) holds its kthread until the call returns,
//! and the uthreads queued behind it wait; if every kthread is held so, the program stops. A
//! monitor thread looks at the kthreads: every millisecond after it found one newly held,
//! backing off to [`MAX_PERIOD`] while nothing changes, and reading `/proc` only while uthreads
//! wait in a queue. A kthread is held when it has run the same uthread since the last look (its
//! switch count has not moved) and its OS thread is asleep in the kernel (`S` or `D` in
//! `/proc`); a uthread that computes is not held, it is using its core. While uthreads wait to
//! run and fewer than `kthreads` kthreads are free, the monitor takes kthreads out of the
//! reserve to make up the difference, as Go's runtime hands a processor to a new thread when
//! one blocks in a system call. A kthread beyond `kthreads` that finds nothing to do goes back
//! to the reserve instead of parking, so the runtime keeps `kthreads` of them working once the
//! held ones come back.

use core::sync::atomic::Ordering;
use std::io;
use std::time::Duration;

use crate::sched::Shared;
use crate::sched::kthread::{Kthread, KthreadState};

/// How often the monitor looks after it found a kthread newly held.
const MIN_PERIOD: Duration = Duration::from_millis(1);
/// How often it looks at least: a newly held kthread is noticed within this.
const MAX_PERIOD: Duration = Duration::from_millis(16);

/// Starts the monitor (only with a reserve); it ends at shutdown.
pub(crate) fn start(rt: &'static Shared) -> io::Result<Option<std::thread::JoinHandle<()>>> {
    if rt.config.blocking_reserve == 0 {
        return Ok(None);
    }
    std::thread::Builder::new()
        .name("corral-blocking".into())
        .spawn(move || monitor(rt))
        .map(Some)
}

fn monitor(rt: &'static Shared) {
    let mut switches: Vec<u64> = rt.kthreads.iter().map(|k| k.switches()).collect();
    let mut period = MIN_PERIOD;
    let mut held_before = 0;
    let mut warned = false;
    while !rt.shutdown.load(Ordering::SeqCst) {
        std::thread::sleep(period);
        // Only queued work can be kept waiting; without any, nothing below is worth a look at
        // `/proc` (a program whose threads all compute, or all wait, costs one pass of loads).
        let waiting = rt.work_visible(crate::timer::now_ns());
        let mut held = 0;
        for (k, seen) in rt.kthreads.iter().zip(switches.iter_mut()) {
            let now = k.switches();
            let moved = now != *seen;
            *seen = now;
            if waiting
                && !moved
                && !k.in_reserve.load(Ordering::SeqCst)
                && k.state.load(Ordering::SeqCst) == KthreadState::Running
                && asleep_in_kernel(k)
            {
                held += 1;
            }
        }
        let active = rt.active_kthreads.load(Ordering::SeqCst);
        let mut wanted = shortfall(rt.config.kthreads, active, held);
        let mut activated = 0;
        while wanted > 0 && activate_one(rt) {
            wanted -= 1;
            activated += 1;
        }
        // Look again soon while kthreads newly block; back off while the picture holds.
        period = if activated > 0 || held > held_before {
            MIN_PERIOD
        } else {
            (period * 2).min(MAX_PERIOD)
        };
        held_before = held;
        if wanted > 0 && !warned {
            warned = true;
            eprintln!(
                "corral: {held} of {active} kthreads are blocked in system calls while uthreads \
                 wait to run, and all {} reserve kthreads are in use: the program may stall \
                 (raise the blocking reserve)",
                rt.config.blocking_reserve
            );
        }
    }
}

/// How many kthreads to take from the reserve: enough that `parallelism` are free to run
/// uthreads, given `active` out of the reserve of which `held` are blocked in the kernel.
fn shortfall(parallelism: usize, active: usize, held: usize) -> usize {
    parallelism.saturating_sub(active.saturating_sub(held))
}

/// Whether `k`'s OS thread is asleep in the kernel (`S` or `D` in its `/proc` stat).
fn asleep_in_kernel(k: &Kthread) -> bool {
    let tid = k.tid.load(Ordering::Relaxed);
    if tid == 0 {
        return false;
    }
    std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|stat| thread_state(&stat))
        .is_some_and(|state| state == 'S' || state == 'D')
}

/// The state letter of a `/proc/.../stat` line: the first field after the command name, which
/// is in parentheses and may itself contain spaces and parentheses.
fn thread_state(stat: &str) -> Option<char> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.trim_start().chars().next()
}

/// Takes one kthread out of the reserve; false if none is left.
fn activate_one(rt: &Shared) -> bool {
    for k in rt.kthreads.iter() {
        if k.in_reserve
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            rt.active_kthreads.fetch_add(1, Ordering::SeqCst);
            k.park_word.wake();
            return true;
        }
    }
    false
}

/// Called by an idle kthread instead of parking (standalone mode): if more than `kthreads`
/// kthreads are out of the reserve, goes back to it until the monitor takes it out again.
/// Returns whether it did; like `park`, it returns with `k` counted as spinning.
pub(crate) fn retire(k: &'static Kthread) -> bool {
    let rt = k.shared();
    if rt.config.blocking_reserve == 0 {
        return false;
    }
    let parallelism = rt.config.kthreads;
    let claimed = rt
        .active_kthreads
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |a| {
            (a > parallelism).then(|| a - 1)
        });
    if claimed.is_err() {
        return false;
    }
    // Its timers go to a kthread that is awake; with none awake it must stay to fire them.
    if k.timers.next_deadline() != u64::MAX && !super::hand_timers_to_a_running_kthread(k) {
        rt.active_kthreads.fetch_add(1, Ordering::SeqCst);
        return false;
    }
    k.timers.stop_accepting();
    k.state.store(KthreadState::Parked, Ordering::SeqCst);
    k.park_word.reset();
    k.in_reserve.store(true, Ordering::SeqCst);
    rt.idle.stop_spinning();
    // As a parker does (`Idle::announce_parked`): work published while this kthread still
    // counted as spinning may have found no one to wake, so look once more, and if there is
    // work, leave the reserve at once (unless the monitor already took this kthread out).
    core::sync::atomic::fence(Ordering::SeqCst);
    if rt.work_visible(crate::timer::now_ns())
        && k.in_reserve
            .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    {
        rt.active_kthreads.fetch_add(1, Ordering::SeqCst);
    }
    wait_in_reserve(k);
    k.timers.start_accepting();
    rt.idle.start_spinning();
    k.state.store(KthreadState::Spinning, Ordering::SeqCst);
    true
}

/// Sleeps while `k` is in the reserve (until the monitor takes it out, or shutdown).
pub(crate) fn wait_in_reserve(k: &Kthread) {
    let rt = k.shared();
    // The monitor clears `in_reserve` before it wakes the word, and the flag is checked after
    // every reset of the word, so a wake is never slept through.
    while k.in_reserve.load(Ordering::SeqCst) && !rt.shutdown.load(Ordering::SeqCst) {
        k.park_word.sleep(None);
        k.park_word.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortfall_makes_up_the_free_kthreads() {
        // Two kthreads, one blocked: one more.
        assert_eq!(shortfall(2, 2, 1), 1);
        // Both blocked: two more.
        assert_eq!(shortfall(2, 2, 2), 2);
        // One already taken out for the blocked one: none.
        assert_eq!(shortfall(2, 3, 1), 0);
        // Nothing blocked: none, even with an extra kthread still out.
        assert_eq!(shortfall(2, 3, 0), 0);
        assert_eq!(shortfall(64, 64, 0), 0);
        assert_eq!(shortfall(64, 64, 63), 63);
    }

    #[test]
    fn the_state_letter_follows_the_last_parenthesis() {
        assert_eq!(thread_state("1234 (corral-k0) S 1 2 3"), Some('S'));
        assert_eq!(thread_state("1234 (a) b) (c) D 1"), Some('D'));
        assert_eq!(thread_state("1234 (x)R 1"), Some('R'));
        assert_eq!(thread_state("garbage"), None);
    }
}
