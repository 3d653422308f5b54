//! Synchronization primitives under contention across kthreads.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use corral::{Barrier, Condvar, Config, Mutex, Runtime, RwLock, SpinLock, WaitGroup};

fn runtime(kthreads: usize) -> Runtime {
    Runtime::new(Config::default().kthreads(kthreads)).expect("runtime starts")
}

#[test]
fn mutex_counter_is_exact() {
    let rt = runtime(2);
    let total = rt.block_on(|| {
        let counter = Arc::new(Mutex::new(0u64));
        let hs: Vec<_> = (0..64)
            .map(|_| {
                let c = counter.clone();
                corral::spawn(move || {
                    for i in 0..100_000 {
                        *c.lock() += 1;
                        if i % 1000 == 0 {
                            corral::yield_now();
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        *counter.lock()
    });
    assert_eq!(total, 64 * 100_000);
}

#[test]
fn mutex_try_lock_reports_holder() {
    let m = Mutex::new(5);
    let g = m.lock();
    assert!(m.try_lock().is_none());
    // A failed try_lock must leave the holder's lock alone.
    assert!(
        m.try_lock().is_none(),
        "a failed try_lock released the lock"
    );
    drop(g);
    assert_eq!(*m.try_lock().unwrap(), 5);
}

#[test]
fn condvar_producer_consumer_loses_nothing() {
    let rt = runtime(2);
    let received = rt.block_on(|| {
        let q = Arc::new((Mutex::new(VecDeque::new()), Condvar::new(), Condvar::new()));
        const ITEMS: u64 = 200_000;
        const CAP: usize = 16;
        let producers: Vec<_> = (0..4u64)
            .map(|p| {
                let q = q.clone();
                corral::spawn(move || {
                    let (m, not_empty, not_full) = &*q;
                    for i in 0..ITEMS / 4 {
                        let mut g = m.lock();
                        not_full.wait_while(&mut g, |q| q.len() >= CAP);
                        g.push_back(p * ITEMS + i);
                        drop(g);
                        not_empty.notify_one();
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                corral::spawn(move || {
                    let (m, not_empty, not_full) = &*q;
                    let mut got = Vec::new();
                    for _ in 0..ITEMS / 4 {
                        let mut g = m.lock();
                        not_empty.wait_while(&mut g, |q| q.is_empty());
                        got.push(g.pop_front().unwrap());
                        drop(g);
                        not_full.notify_one();
                    }
                    got
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let mut all: Vec<u64> = consumers
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect();
        all.sort_unstable();
        all
    });
    let expected: Vec<u64> = (0..4u64)
        .flat_map(|p| (0..50_000).map(move |i| p * 200_000 + i))
        .collect();
    assert_eq!(received, expected);
}

#[test]
fn condvar_ping_pong_across_kthreads() {
    let rt = runtime(2);
    rt.block_on(|| {
        let s = Arc::new((Mutex::new(0u32), Condvar::new()));
        let s2 = s.clone();
        let other = corral::spawn(move || {
            let (m, cv) = &*s2;
            for i in 0..20_000u32 {
                let mut g = m.lock();
                cv.wait_while(&mut g, |t| *t != 2 * i + 1);
                *g += 1;
                cv.notify_one();
            }
        });
        let (m, cv) = &*s;
        for i in 0..20_000u32 {
            let mut g = m.lock();
            cv.wait_while(&mut g, |t| *t != 2 * i);
            *g += 1;
            cv.notify_one();
        }
        other.join().unwrap();
        assert_eq!(*m.lock(), 40_000);
    });
}

#[test]
fn condvar_wait_timeout_times_out_and_is_not_early() {
    let rt = runtime(2);
    rt.block_on(|| {
        let m = Mutex::new(());
        let cv = Condvar::new();
        let mut g = m.lock();
        let start = Instant::now();
        let r = cv.wait_timeout(&mut g, Duration::from_millis(3));
        assert!(r.timed_out());
        assert!(start.elapsed() >= Duration::from_millis(3));
    });
    // The same from an OS thread.
    let m = Mutex::new(());
    let cv = Condvar::new();
    let mut g = m.lock();
    let start = Instant::now();
    assert!(
        cv.wait_timeout(&mut g, Duration::from_millis(3))
            .timed_out()
    );
    assert!(start.elapsed() >= Duration::from_millis(3));
}

#[test]
fn condvar_notify_beats_timeout() {
    let rt = runtime(2);
    rt.block_on(|| {
        let s = Arc::new((Mutex::new(false), Condvar::new()));
        let mut timeouts = 0;
        for _ in 0..200 {
            *s.0.lock() = false;
            let s2 = s.clone();
            let waiter = corral::spawn(move || {
                let (m, cv) = &*s2;
                let mut g = m.lock();
                let mut timed_out = false;
                while !*g {
                    timed_out = cv.wait_timeout(&mut g, Duration::from_secs(5)).timed_out();
                    if timed_out {
                        break;
                    }
                }
                timed_out
            });
            corral::yield_now();
            *s.0.lock() = true;
            s.1.notify_all();
            if waiter.join().unwrap() {
                timeouts += 1;
            }
        }
        assert_eq!(timeouts, 0, "a notified waiter reported a timeout");
    });
}

#[test]
fn waitgroup_waits_for_all() {
    let rt = runtime(2);
    rt.block_on(|| {
        let wg = Arc::new(WaitGroup::new());
        let done = Arc::new(AtomicUsize::new(0));
        wg.add(500);
        for i in 0..500u64 {
            let wg = wg.clone();
            let done = done.clone();
            drop(corral::spawn(move || {
                if i % 7 == 0 {
                    corral::sleep(Duration::from_micros(i));
                }
                done.fetch_add(1, Ordering::SeqCst);
                wg.done();
            }));
        }
        wg.wait();
        assert_eq!(done.load(Ordering::SeqCst), 500);
        assert_eq!(wg.count(), 0);
    });
}

#[test]
#[should_panic(expected = "more times than add")]
fn waitgroup_done_underflow_panics() {
    WaitGroup::new().done();
}

#[test]
fn barrier_releases_rounds_with_one_leader() {
    let rt = runtime(2);
    rt.block_on(|| {
        const N: usize = 10;
        let barrier = Arc::new(Barrier::new(N));
        let arrived = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..N)
            .map(|_| {
                let b = barrier.clone();
                let a = arrived.clone();
                corral::spawn(move || {
                    let mut leaders = 0;
                    for round in 0..100 {
                        a.fetch_add(1, Ordering::SeqCst);
                        if b.wait().is_leader() {
                            leaders += 1;
                        }
                        // Nobody passes round r before all N arrived in it.
                        assert!(a.load(Ordering::SeqCst) >= (round + 1) * N);
                    }
                    leaders
                })
            })
            .collect();
        let leaders: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(leaders, 100);
    });
}

#[test]
fn rwlock_readers_share_and_writers_exclude() {
    let rt = runtime(2);
    rt.block_on(|| {
        let lock = Arc::new(RwLock::new((0u64, 0u64)));
        let readers_inside = Arc::new(AtomicUsize::new(0));
        let max_readers = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for w in 0..4 {
            let lock = lock.clone();
            hs.push(corral::spawn(move || {
                for _ in 0..5_000 {
                    let mut g = lock.write();
                    g.0 += 1;
                    if w == 0 {
                        corral::yield_now();
                    }
                    g.1 += 1;
                }
            }));
        }
        for _ in 0..8 {
            let lock = lock.clone();
            let inside = readers_inside.clone();
            let max = max_readers.clone();
            hs.push(corral::spawn(move || {
                for _ in 0..5_000 {
                    let g = lock.read();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(n, Ordering::SeqCst);
                    assert_eq!(g.0, g.1, "a reader saw a half-done write");
                    corral::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*lock.read(), (20_000, 20_000));
        assert!(
            max_readers.load(Ordering::SeqCst) > 1,
            "readers never overlapped"
        );
    });
}

#[test]
fn spinlock_protects_data_and_forbids_blocking() {
    let rt = runtime(2);
    let total = rt.block_on(|| {
        let s = Arc::new(SpinLock::new(0u64));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let s = s.clone();
                corral::spawn(move || {
                    for _ in 0..50_000 {
                        *s.lock() += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        *s.lock()
    });
    assert_eq!(total, 400_000);

    let err = rt.block_on(|| {
        corral::spawn(|| {
            let s = SpinLock::new(());
            let _g = s.lock();
            corral::yield_now();
        })
        .join()
        .unwrap_err()
    });
    let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("preemption disabled"), "{msg}");
}
