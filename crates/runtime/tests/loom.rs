//! Model checks of the lock-free pieces: the run queue (owner pushes without a lock, owner and
//! thieves pop under the owner's lock) and the spinlock.
//! Run with: RUSTFLAGS="--cfg loom" cargo test -p corral --test loom --release
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use corral::runqueue::RunQueue;
use corral::spin::RawSpinLock;

struct Kthread {
    lock: RawSpinLock,
    rq: RunQueue,
}

fn kthread(capacity: usize) -> Arc<Kthread> {
    Arc::new(Kthread {
        lock: RawSpinLock::new(),
        rq: RunQueue::with_capacity(capacity),
    })
}

fn pop_locked(k: &Kthread) -> Option<usize> {
    k.lock.lock();
    let v = k.rq.pop();
    // SAFETY: locked just above.
    unsafe { k.lock.unlock() };
    v
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
            v2.lock.lock();
            v2.rq.steal_half_into(&t2.rq);
            // SAFETY: locked just above.
            unsafe { v2.lock.unlock() };
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
            v2.lock.lock();
            let n = v2.rq.steal_half_into(&t2.rq);
            // SAFETY: locked just above.
            unsafe { v2.lock.unlock() };
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
        let counter = Arc::new(loom::cell::UnsafeCell::new(0u32));
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
