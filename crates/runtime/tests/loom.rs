//! Model checks of the runtime's concurrency protocols, on the same code the runtime runs
//! (built against loom's atomics through `corral::primitives`):
//! - the run queue (owner pushes without a lock, owner and thieves take under its lock) and the
//!   spinlock;
//! - the park/wake handshake (`sched::idle`): no lost wake-up;
//! - the timer watch while parked (`sched::timer_watch`): a new timer is always watched;
//! - the wait-node state machine (`sync::wait_state`): wake vs timeout has one winner;
//! - kernel futex sleepers (`sync::kernel_sleepers`): a wake that skips the system call never
//!   leaves one asleep;
//! - the `running` flag (`sched::running`): a context is resumed only after it is saved;
//! - iokerneld mode: a parked kthread runs again only with a grant, and never misses one
//!   (`iokernel::grant_wait`, over the wake word, a shared futex, `primitives::WakeWord`); it leaves
//!   for shutdown; the last kthread to park reports every timer (`iokernel::last_parker`).
//!
//! Not modelled: the naked-asm context switch (its flag clear is stood in by
//! `RunningFlag::release`) and the mutex's membarrier-based unlock (loom has no asymmetric
//! fence); both are covered by the stress tests in `tests/threads.rs` and `tests/sync.rs`.
//!
//! Run with: RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 cargo test -p corral --test loom --release
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::thread;

use corral::iokernel::grant_wait::{Woken, wait_for_grant};
use corral::iokernel::last_parker::ActiveKthreads;
use corral::primitives::{AtomicBool, Futex, WakeWord};
use corral::runqueue::RunQueue;
use corral::sched::idle::{Idle, ParkWord};
use corral::sched::running::RunningFlag;
use corral::sched::timer_watch::{WatchedDeadline, needs_watcher};
use corral::spin::RawSpinLock;
use corral::sync::kernel_sleepers::KernelSleepers;
use corral::sync::wait_state::{AtomicWaitState, WaitState};

struct Kthread {
    rq: RunQueue,
}

fn kthread(capacity: usize) -> Arc<Kthread> {
    Arc::new(Kthread {
        rq: RunQueue::with_capacity(capacity),
    })
}

fn pop_locked(k: &Kthread) -> Option<usize> {
    k.rq.lock().pop()
}

/// The owner pushes (wrapping the small ring) and pops while a thief steals half into its own
/// queue: every item is taken exactly once.
#[test]
fn push_pop_and_steal_take_each_item_once() {
    loom::model(|| {
        let victim = kthread(2);
        let thief_q = kthread(4);
        let v2 = victim.clone();
        let t2 = thief_q.clone();
        let thief = thread::spawn(move || {
            let mut got = Vec::new();
            v2.rq.lock().steal_half_into(&t2.rq);
            while let Some(x) = pop_locked(&t2) {
                got.push(x);
            }
            got
        });
        let mut got = Vec::new();
        let mut pushed = 0;
        for item in 1..=3usize {
            // Full ring: the owner takes one out to make room (the runtime spills instead).
            while v_push(&victim, item).is_err() {
                if let Some(x) = pop_locked(&victim) {
                    got.push(x);
                }
                thread::yield_now();
            }
            pushed += 1;
        }
        while let Some(x) = pop_locked(&victim) {
            got.push(x);
        }
        got.extend(thief.join().unwrap());
        got.sort_unstable();
        assert_eq!(pushed, 3);
        assert_eq!(got, vec![1, 2, 3]);
    });
}

fn v_push(k: &Kthread, item: usize) -> Result<(), usize> {
    k.rq.push(item)
}

/// A push is visible to a thief that runs after it, and a full queue never overwrites an
/// entry a thief has not finished reading.
#[test]
fn steal_sees_published_items_and_wraparound_is_safe() {
    loom::model(|| {
        let victim = kthread(2);
        victim.rq.push(1).unwrap();
        victim.rq.push(2).unwrap();
        let thief_q = kthread(2);
        let v2 = victim.clone();
        let t2 = thief_q.clone();
        let thief = thread::spawn(move || {
            let n = v2.rq.lock().steal_half_into(&t2.rq);
            let mut got = Vec::new();
            while let Some(x) = pop_locked(&t2) {
                got.push(x);
            }
            assert_eq!(got.len(), n);
            got
        });
        // The owner refills the slot the thief may be reading from.
        let pushed3 = victim.rq.push(3).is_ok();
        let mut got = thief.join().unwrap();
        while let Some(x) = pop_locked(&victim) {
            got.push(x);
        }
        if !pushed3 {
            victim.rq.push(3).unwrap();
            got.push(pop_locked(&victim).unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2, 3]);
    });
}

/// Two threads increment a counter under the spinlock; no update is lost.
#[test]
fn spinlock_excludes() {
    loom::model(|| {
        let lock = Arc::new(RawSpinLock::new());
        let counter = Arc::new(UnsafeCell::new(0u32));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let lock = lock.clone();
                let counter = counter.clone();
                thread::spawn(move || {
                    lock.lock();
                    // SAFETY: the spinlock serializes access.
                    counter.with_mut(|c| unsafe { *c += 1 });
                    // SAFETY: locked just above.
                    unsafe { lock.unlock() };
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // SAFETY: all writers joined.
        assert_eq!(counter.with(|c| unsafe { *c }), 2);
    });
}

/// The park/wake handshake: a kthread finds nothing and parks while another publishes work
/// and wakes a parked kthread if nobody is spinning. The parker must end up with the work,
/// either by seeing it in its re-check or by being woken; a lost wake-up leaves it asleep
/// forever, which loom reports as a deadlock.
#[test]
fn parked_kthread_is_woken_for_published_work() {
    loom::model(|| {
        let idle = Arc::new(Idle::new());
        let word = Arc::new(ParkWord::new());
        let work = Arc::new(AtomicUsize::new(0));
        // The parker starts out spinning.
        idle.start_spinning();

        let publisher = {
            let (idle, word, work) = (idle.clone(), word.clone(), work.clone());
            thread::spawn(move || {
                // As Shared::inject / ready: publish, then wake_if_idle.
                work.store(1, Ordering::Relaxed);
                if idle.wake_needed()
                    && let Some(index) = idle.take_parked()
                {
                    assert_eq!(index, 0);
                    word.wake();
                }
            })
        };

        // As sched::park: announce, re-check, sleep until woken.
        idle.announce_parked(0, &word);
        let mut woken = work.load(Ordering::SeqCst) != 0;
        while !woken {
            woken = word.sleep(None);
        }
        idle.leave_parked(0);
        assert_eq!(
            work.load(Ordering::Relaxed),
            1,
            "woken without the work visible"
        );
        publisher.join().unwrap();
        assert_eq!(idle.n_parked(), 0);
    });
}

/// A timer added by a running kthread while another parks: the parker either watches a
/// deadline no later than the new timer, or is woken to look again. A parker that sleeps past
/// the timer unwoken stays asleep here (the model gives its sleep no timeout, since waking at
/// the later deadline would be too late), which loom reports as a deadlock.
#[test]
fn timer_added_while_parked_is_watched() {
    const OWN_TIMER: u64 = 100;
    const NEW_TIMER: u64 = 50;
    loom::model(|| {
        let idle = Arc::new(Idle::new());
        let word = Arc::new(ParkWord::new());
        // Earliest timer of each kthread: [the parker, the busy kthread].
        let next: Arc<[AtomicU64; 2]> =
            Arc::new([AtomicU64::new(OWN_TIMER), AtomicU64::new(u64::MAX)]);
        let watched: Arc<[WatchedDeadline; 2]> =
            Arc::new([WatchedDeadline::new(), WatchedDeadline::new()]);
        idle.start_spinning();

        let busy = {
            let (idle, word, next, watched) =
                (idle.clone(), word.clone(), next.clone(), watched.clone());
            thread::spawn(move || {
                // As TimerQueue::insert then Shared::timer_added.
                next[1].store(NEW_TIMER, Ordering::SeqCst);
                if needs_watcher(&idle, NEW_TIMER, watched.iter())
                    && let Some(index) = idle.take_parked()
                {
                    assert_eq!(index, 0);
                    word.wake();
                }
            })
        };

        let earliest = || next.iter().map(|n| n.load(Ordering::SeqCst)).min().unwrap();
        idle.announce_parked(0, &word);
        loop {
            let watch = watched[0].publish(earliest);
            if watch <= NEW_TIMER {
                // The sleep's timeout fires in time for the new timer.
                break;
            }
            if word.sleep(None) {
                break;
            }
        }
        watched[0].clear();
        idle.leave_parked(0);
        busy.join().unwrap();
    });
}

/// A notifier and a timer race to finish one wait node: exactly one wins, the waiter is
/// made runnable exactly once, sees the winner's state, and sees what the notifier handed
/// over before waking it.
#[test]
fn wake_and_timeout_race_has_one_winner() {
    loom::model(|| wake_and_timeout_race(true));
}

/// As above with a waiter that re-checks without being unparked (a timed park that timed
/// out, as in `block_with_deadline`): only the state's own ordering hands the data over.
#[test]
fn wake_and_timeout_race_seen_without_unpark() {
    loom::model(|| wake_and_timeout_race(false));
}

fn wake_and_timeout_race(waiter_parks: bool) {
    {
        let state = Arc::new(AtomicWaitState::new());
        let handed_over = Arc::new(UnsafeCell::new(0u32));
        let wakes = Arc::new(AtomicUsize::new(0));
        let waiter = thread::current();

        let notifier = {
            let (state, handed_over, wakes, waiter) = (
                state.clone(),
                handed_over.clone(),
                wakes.clone(),
                waiter.clone(),
            );
            thread::spawn(move || {
                // SAFETY: written only before the state leaves Waiting, read only after.
                handed_over.with_mut(|v| unsafe { *v = 7 });
                let won = state.finish(WaitState::Woken);
                if won {
                    wakes.fetch_add(1, Ordering::Relaxed);
                    waiter.unpark();
                }
                won
            })
        };
        let timer = {
            let (state, wakes) = (state.clone(), wakes.clone());
            thread::spawn(move || {
                let won = state.finish(WaitState::TimedOut);
                if won {
                    wakes.fetch_add(1, Ordering::Relaxed);
                    waiter.unpark();
                }
                won
            })
        };

        // As block_with for an OS thread.
        while state.load() == WaitState::Waiting {
            if waiter_parks {
                thread::park();
            } else {
                thread::yield_now();
            }
        }
        let outcome = state.load();
        if outcome == WaitState::Woken {
            // SAFETY: the notifier wrote it before finishing; the Acquire load orders it.
            assert_eq!(handed_over.with(|v| unsafe { *v }), 7);
        }
        let notified = notifier.join().unwrap();
        let timed_out = timer.join().unwrap();
        assert!(notified != timed_out, "exactly one party finishes the node");
        assert_eq!(outcome == WaitState::Woken, notified);
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
        assert_eq!(state.load(), outcome, "a finished node never changes again");
    }
}

/// A uthread readied while its kthread is still switching away is stolen by another kthread:
/// the thief resumes it only after the save completed, and then sees the saved context.
#[test]
fn resume_waits_for_the_context_save() {
    loom::model(|| {
        // The uthread's saved stack pointer, and its running flag (set: it runs on kthread A).
        let saved_rsp = Arc::new(UnsafeCell::new(0usize));
        let running = Arc::new(RunningFlag::new(true));
        let runq = kthread(2);

        let thief = {
            let (saved_rsp, running, runq) = (saved_rsp.clone(), running.clone(), runq.clone());
            thread::spawn(move || {
                // As find_work: take it off the victim's queue, then switch_into.
                let th = loop {
                    if let Some(th) = pop_locked(&runq) {
                        break th;
                    }
                    thread::yield_now();
                };
                assert_eq!(th, 1);
                running.claim();
                // SAFETY: claim returned: the context is saved and nobody else resumes it.
                let rsp = saved_rsp.with(|r| unsafe { *r });
                assert_eq!(rsp, 0x1000, "resumed a context that was not saved yet");
            })
        };

        // Kthread A: the uthread makes itself runnable (as a wake-up racing its block), then
        // switches away: save the context, leave the stack, clear the flag (switch_context).
        runq.rq.push(1).unwrap();
        // SAFETY: the flag is still set: no other kthread reads the saved context yet.
        saved_rsp.with_mut(|r| unsafe { *r = 0x1000 });
        running.release();
        thief.join().unwrap();
    });
}

/// A kthread's ingress ring, reduced to what the grant handshake relies on: one slot whose
/// descriptor iokerneld publishes with a `Release` store after writing the payload (the core),
/// as corral-abi's ring does, and the consumer lock that the owner and packet thieves take to
/// drain it (`iokernel::ingress`). The real ring is in shared memory with plain atomics, which
/// loom cannot see; this keeps its publication order.
struct Ingress {
    lock: RawSpinLock,
    /// 0: empty; 1: a `Grant` was pushed.
    desc: AtomicU64,
    /// The granted core, written before `desc`.
    core: UnsafeCell<u32>,
    /// Under `lock`: the slot was popped.
    popped: UnsafeCell<bool>,
    /// Under `lock`: the core the kthread was last granted (`IokKthread::cpu`).
    cpu: UnsafeCell<u32>,
    /// Grants applied (`IokKthread::grants`).
    grants: AtomicU64,
}

impl Ingress {
    fn new() -> Self {
        Ingress {
            lock: RawSpinLock::new(),
            desc: AtomicU64::new(0),
            core: UnsafeCell::new(u32::MAX),
            popped: UnsafeCell::new(false),
            cpu: UnsafeCell::new(u32::MAX),
            grants: AtomicU64::new(0),
        }
    }

    /// iokerneld's `grant`: push `Grant`, then ring the wake word.
    fn grant(&self, word: &WakeWord, core: u32) {
        // SAFETY: the consumer reads the payload only after seeing the descriptor.
        self.core.with_mut(|c| unsafe { *c = core });
        self.desc.store(1, Ordering::Release);
        word.ring();
    }

    /// As `drain_locked`: applies a grant it pops.
    ///
    /// # Safety
    /// `lock` is held.
    unsafe fn drain_locked(&self) {
        // SAFETY: `popped` and `cpu` are under the lock (caller's contract); `core` is read
        // only after its descriptor was seen with Acquire.
        unsafe {
            if self.desc.load(Ordering::Acquire) == 1 && !self.popped.with(|p| *p) {
                self.popped.with_mut(|p| *p = true);
                let core = self.core.with(|c| *c);
                self.cpu.with_mut(|c| *c = core);
                self.grants.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// As `drain_own_after_wake`: waits for the lock, drains, returns the grants seen. The
    /// count is read under the lock: read after it, it may include a grant a thief is still
    /// applying (seen here as a race on `cpu`).
    fn drain_own(&self) -> u64 {
        self.lock.lock();
        // SAFETY: locked just above.
        unsafe { self.drain_locked() };
        let grants = self.grants.load(Ordering::Relaxed);
        // SAFETY: locked above.
        unsafe { self.lock.unlock() };
        grants
    }

    /// As `steal_ingress`: drains only if nobody else is.
    fn steal(&self) {
        if self.lock.try_lock() {
            // SAFETY: locked just above.
            unsafe { self.drain_locked() };
            // SAFETY: locked above.
            unsafe { self.lock.unlock() };
        }
    }
}

/// iokerneld grants a parked kthread a core while a packet thief may drain its ring, and a
/// late ring for a grant the kthread saw while it was running arrives at any moment. The
/// kthread must run only once it has the grant (the core it was given is visible), after at
/// most one spurious wake-up; a grant it missed leaves it waiting forever, which loom reports
/// as a deadlock.
#[test]
fn parked_kthread_runs_only_with_a_grant() {
    loom::model(|| {
        let word = Arc::new(WakeWord::new());
        let ingress = Arc::new(Ingress::new());
        let shutdown = AtomicBool::new(false);
        let thief = {
            let ingress = ingress.clone();
            thread::spawn(move || ingress.steal())
        };
        // The late ring, from a helper thread that was slow to deliver an earlier grant.
        let late = {
            let word = word.clone();
            thread::spawn(move || word.ring())
        };

        // As iok_park: note the grants seen, then report `Park`, after which (and only after
        // which) iokerneld may grant a core.
        let before = ingress.grants.load(Ordering::Acquire);
        let iokerneld = {
            let (word, ingress) = (word.clone(), ingress.clone());
            thread::spawn(move || ingress.grant(&word, 3))
        };
        let mut spurious = 0;
        let woken = wait_for_grant(
            &word,
            &shutdown,
            before,
            || ingress.drain_own(),
            || spurious += 1,
        );
        assert_eq!(woken, Woken::Granted);
        assert_eq!(ingress.grants.load(Ordering::Relaxed), 1);
        // SAFETY: whoever popped the grant released the lock before drain_own took it.
        let cpu = ingress.cpu.with(|c| unsafe { *c });
        assert_eq!(cpu, 3, "ran without the grant");
        assert!(spurious <= 1);
        iokerneld.join().unwrap();
        thief.join().unwrap();
        late.join().unwrap();
    });
}

/// The runtime shuts down while a kthread is parked, a late ring arrives and no grant is
/// coming: the kthread must leave (a lost kick leaves it waiting forever, a loom deadlock) and
/// must not take the late ring for a grant.
#[test]
fn parked_kthread_leaves_for_shutdown() {
    loom::model(|| {
        let word = Arc::new(WakeWord::new());
        let ingress = Arc::new(Ingress::new());
        let shutdown = Arc::new(AtomicBool::new(false));

        let stopper = {
            let (word, shutdown) = (word.clone(), shutdown.clone());
            thread::spawn(move || {
                // As Shared::begin_shutdown then IokKthread::kick.
                shutdown.store(true, Ordering::SeqCst);
                word.ring();
            })
        };
        let late = {
            let word = word.clone();
            thread::spawn(move || word.ring())
        };

        let before = ingress.grants.load(Ordering::Acquire);
        let woken = wait_for_grant(&word, &shutdown, before, || ingress.drain_own(), || {});
        assert_eq!(woken, Woken::ShuttingDown);
        stopper.join().unwrap();
        late.join().unwrap();
    });
}

/// A kthread's timer queue reduced to its earliest deadline, with `TimerQueue`'s locking:
/// insertion under the queue's lock, the hand-over of `move_all_to` (the source's lock, then
/// a `try_lock` of the target's, refused once the target stops accepting) and
/// `stop_accepting` under the lock.
struct Timers {
    lock: RawSpinLock,
    accepting: AtomicBool,
    next: AtomicU64,
}

impl Timers {
    fn new() -> Self {
        Timers {
            lock: RawSpinLock::new(),
            accepting: AtomicBool::new(true),
            next: AtomicU64::new(u64::MAX),
        }
    }

    fn insert(&self, deadline: u64) {
        self.lock.lock();
        let next = self.next.load(Ordering::Relaxed).min(deadline);
        self.next.store(next, Ordering::Release);
        // SAFETY: locked above.
        unsafe { self.lock.unlock() };
    }

    fn move_all_to(&self, to: &Timers) -> bool {
        self.lock.lock();
        let moved = to.lock.try_lock() && {
            let ok = to.accepting.load(Ordering::Relaxed);
            if ok {
                let next = to
                    .next
                    .load(Ordering::Relaxed)
                    .min(self.next.load(Ordering::Relaxed));
                to.next.store(next, Ordering::Release);
                self.next.store(u64::MAX, Ordering::Release);
            }
            // SAFETY: taken by the try_lock above.
            unsafe { to.lock.unlock() };
            ok
        };
        // SAFETY: locked above.
        unsafe { self.lock.unlock() };
        moved
    }

    fn stop_accepting(&self) {
        self.lock.lock();
        self.accepting.store(false, Ordering::Relaxed);
        // SAFETY: locked above.
        unsafe { self.lock.unlock() };
    }
}

/// Two kthreads hold cores. One adds a timer, then both park as iok_park does: hand their
/// timers to a kthread not yet parked (or keep them), stop accepting timers, count themselves
/// parked, give up the core, and the last one to do so reports the earliest timer of all.
/// Whichever parks last must report the new timer, wherever it ended up. (Under iokerneld
/// timers are only added by kthreads holding a core, so none can come after the last park.)
#[test]
fn last_parker_reports_every_timer() {
    const NEW_TIMER: u64 = 50;
    struct Kthreads {
        active: ActiveKthreads,
        timers: [Timers; 2],
        parked: [AtomicBool; 2],
        reports: AtomicUsize,
    }
    fn iok_park(ks: &Kthreads, me: usize) {
        let other = 1 - me;
        if ks.timers[me].next.load(Ordering::Acquire) != u64::MAX
            && !ks.parked[other].load(Ordering::SeqCst)
        {
            ks.timers[me].move_all_to(&ks.timers[other]);
        }
        ks.timers[me].stop_accepting();
        ks.parked[me].store(true, Ordering::SeqCst);
        if ks.active.park() {
            let earliest = ks
                .timers
                .iter()
                .map(|t| t.next.load(Ordering::Acquire))
                .min()
                .unwrap();
            assert_eq!(earliest, NEW_TIMER, "the last parker stranded a timer");
            ks.reports.fetch_add(1, Ordering::Relaxed);
        }
    }
    loom::model(|| {
        let ks = Arc::new(Kthreads {
            active: ActiveKthreads::new(),
            timers: [Timers::new(), Timers::new()],
            parked: [AtomicBool::new(false), AtomicBool::new(false)],
            reports: AtomicUsize::new(0),
        });
        // Both were granted a core.
        ks.active.unpark();
        ks.active.unpark();

        let adder = {
            let ks = ks.clone();
            thread::spawn(move || {
                // A uthread on this kthread sleeps: its timer goes on its own queue.
                ks.timers[0].insert(NEW_TIMER);
                iok_park(&ks, 0);
            })
        };
        iok_park(&ks, 1);
        adder.join().unwrap();
        assert_eq!(
            ks.reports.load(Ordering::Relaxed),
            1,
            "exactly one kthread parks last"
        );
    });
}

/// A thread that sleeps in the kernel on a futex word (`sync::kernel_sleepers`) is never left
/// asleep by a waker that changed the word and skipped the wake call because it saw nobody
/// counted. Loom reports a deadlock if it is.
#[test]
fn a_kernel_sleeper_is_never_left_asleep() {
    loom::model(|| {
        let word = Arc::new(Futex::new(0));
        let sleepers = Arc::new(KernelSleepers::new());
        let waker = {
            let (word, sleepers) = (word.clone(), sleepers.clone());
            thread::spawn(move || {
                // The program's own change may be relaxed: the protocol's fence orders it.
                word.store(1, Ordering::Relaxed);
                if sleepers.any() {
                    word.wake_one();
                }
            })
        };
        while word.load(Ordering::Relaxed) == 0 {
            sleepers.sleep(|| word.wait(0, None));
        }
        waker.join().unwrap();
    });
}
