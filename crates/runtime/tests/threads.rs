//! Uthread lifecycle, scheduling and configuration errors.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::collections::HashSet;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use corral::{Builder, Config, Runtime};

fn runtime(kthreads: usize) -> Runtime {
    Runtime::new(Config::default().kthreads(kthreads)).expect("runtime starts")
}

#[test]
fn hundred_thousand_uthreads_return_their_values() {
    let rt = runtime(2);
    let (sum, ids) = rt.block_on(|| {
        let handles: Vec<_> = (0..100_000u64)
            .map(|i| corral::spawn(move || (i, vec![i; 3], corral::current_id().unwrap())))
            .collect();
        let mut sum = 0u64;
        let mut ids = HashSet::new();
        for (i, h) in handles.into_iter().enumerate() {
            let (v, payload, id) = h.join().unwrap();
            assert_eq!(v, i as u64);
            assert_eq!(payload, vec![i as u64; 3]);
            sum += v;
            ids.insert(id);
        }
        (sum, ids.len())
    });
    assert_eq!(sum, 99_999 * 100_000 / 2);
    assert_eq!(ids, 100_000, "uthread ids are unique");
    // The block_on uthread itself finishes exiting just after it hands back its result.
    let start = Instant::now();
    while rt.live_uthreads() != 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{} uthreads never exited",
            rt.live_uthreads()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn join_returns_the_panic_payload() {
    let rt = runtime(2);
    let msg = rt.block_on(|| {
        let n = std::hint::black_box(42);
        let h = corral::spawn(move || -> u32 { panic!("boom {n}") });
        let err = h.join().unwrap_err();
        err.downcast_ref::<String>().cloned().unwrap()
    });
    assert_eq!(msg, "boom 42");
}

#[test]
#[should_panic(expected = "inner failure")]
fn block_on_resumes_a_panic() {
    let rt = runtime(1);
    rt.block_on(|| panic!("inner failure"));
}

#[test]
fn names_and_ids_are_visible() {
    let rt = runtime(2);
    rt.block_on(|| {
        let h = Builder::new()
            .name("worker-7")
            .spawn(|| (corral::current_name(), corral::current_id()))
            .unwrap();
        let id = h.id();
        assert_eq!(h.name(), Some("worker-7"));
        let (name, seen_id) = h.join().unwrap();
        assert_eq!(name.as_deref(), Some("worker-7"));
        assert_eq!(seen_id, Some(id));
    });
    assert_eq!(
        corral::current_id(),
        None,
        "the test thread is not a uthread"
    );
}

#[test]
fn work_stealing_spreads_cpu_bound_uthreads() {
    // Only against a hang: stealing takes microseconds once the other kthread runs.
    const LIMIT: Duration = Duration::from_secs(60);
    let rt = runtime(2);
    let seen = rt.block_on(|| {
        // One uthread spawns everything, so all work starts on its kthread's queue. None of it
        // yields: each spins until spawned work has run on both kthreads, which only a steal
        // by the other kthread can bring about.
        let ran_on: Arc<[AtomicBool; 2]> =
            Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let start = Instant::now();
        let handles: Vec<_> = (0..64)
            .map(|_| {
                let ran_on = ran_on.clone();
                corral::spawn(move || {
                    let mut on = HashSet::new();
                    loop {
                        let k = corral::kthread_index().unwrap();
                        on.insert(k);
                        ran_on[k].store(true, Ordering::Relaxed);
                        if ran_on.iter().all(|r| r.load(Ordering::Relaxed))
                            || start.elapsed() > LIMIT
                        {
                            break on;
                        }
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let mut seen = HashSet::new();
        for h in handles {
            seen.extend(h.join().unwrap());
        }
        seen
    });
    assert_eq!(
        seen,
        HashSet::from([0, 1]),
        "both kthreads ran the spawned work within {LIMIT:?}"
    );
}

#[test]
fn yield_interleaves_uthreads_on_one_kthread() {
    let rt = runtime(1);
    let order = rt.block_on(|| {
        let log = Arc::new(corral::Mutex::new(Vec::new()));
        let hs: Vec<_> = (0..3)
            .map(|t| {
                let log = log.clone();
                corral::spawn(move || {
                    for i in 0..3 {
                        log.lock().push((t, i));
                        corral::yield_now();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        Arc::try_unwrap(log).ok().unwrap().into_inner()
    });
    // Round robin: every uthread's step i happens before any uthread's step i + 1.
    for w in order.windows(2) {
        assert!(w[0].1 <= w[1].1, "not round robin: {order:?}");
    }
    assert_eq!(order.len(), 9);
}

#[test]
fn sleep_never_returns_early() {
    let rt = runtime(2);
    rt.block_on(|| {
        let hs: Vec<_> = (0..200u64)
            .map(|i| {
                corral::spawn(move || {
                    let d = Duration::from_micros(50 + (i * 37) % 2000);
                    let start = Instant::now();
                    corral::sleep(d);
                    let slept = start.elapsed();
                    assert!(slept >= d, "slept {slept:?} < {d:?}");
                    let until = Instant::now() + d;
                    corral::sleep_until(until);
                    assert!(Instant::now() >= until, "sleep_until returned early");
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
}

#[test]
fn sleepers_wake_after_every_kthread_parked() {
    // Long enough that both kthreads park meanwhile: the timers must survive parking.
    let rt = runtime(2);
    rt.block_on(|| {
        let hs: Vec<_> = (0..4u64)
            .map(|i| {
                corral::spawn(move || {
                    let d = Duration::from_millis(20 + 10 * i);
                    let start = Instant::now();
                    corral::sleep(d);
                    start.elapsed()
                })
            })
            .collect();
        for (i, h) in hs.into_iter().enumerate() {
            let slept = h.join().unwrap();
            let d = Duration::from_millis(20 + 10 * i as u64);
            assert!(
                slept >= d && slept < d + Duration::from_secs(2),
                "slept {slept:?} for {d:?}"
            );
        }
    });
}

fn spin_until(flag: &AtomicBool, limit: Duration) -> bool {
    let t = Instant::now();
    while !flag.load(Ordering::SeqCst) {
        if t.elapsed() > limit {
            return false;
        }
        std::hint::spin_loop();
    }
    true
}

#[test]
fn a_busy_kthread_does_not_hold_back_other_uthreads_timers() {
    // Only against a hang: the busy uthread gives up spinning after this long, and if the
    // sleeps below waited for it, it was not stopped by them.
    const LIMIT: Duration = Duration::from_secs(60);
    let rt = runtime(2);
    let stopped_while_busy = rt.block_on(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        // Never yields: its kthread cannot fire timers while it runs. It spins until the sleeps
        // below are all over, which they must be while it still spins.
        let busy = corral::spawn(move || {
            let t = Instant::now();
            while !s2.load(Ordering::Relaxed) {
                if t.elapsed() > LIMIT {
                    return false;
                }
                std::hint::spin_loop();
            }
            true
        });
        for _ in 0..10 {
            corral::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap()
    });
    assert!(
        stopped_while_busy,
        "1 ms sleeps waited {LIMIT:?} for a busy uthread to stop"
    );
}

#[test]
fn runnable_work_is_not_left_while_a_kthread_is_parked() {
    let rt = runtime(3);
    let stuck = rt.block_on(|| {
        let mut stuck = 0;
        for _ in 0..100 {
            // Let the other kthreads park.
            corral::sleep(Duration::from_millis(1));
            let a_go = Arc::new(AtomicBool::new(false));
            let b_go = Arc::new(AtomicBool::new(false));
            let (a1, b1, a2, b2) = (a_go.clone(), b_go.clone(), a_go.clone(), b_go.clone());
            // a and the spawner busy-wait without yielding, so b needs the third kthread.
            let ha = corral::spawn(move || {
                a1.store(true, Ordering::SeqCst);
                spin_until(&b1, Duration::from_secs(1))
            });
            let hb = corral::spawn(move || b2.store(true, Ordering::SeqCst));
            if !(spin_until(&a2, Duration::from_secs(1))
                && spin_until(&b_go, Duration::from_secs(1)))
            {
                stuck += 1;
            }
            ha.join().unwrap();
            hb.join().unwrap();
        }
        stuck
    });
    assert_eq!(stuck, 0, "runnable uthreads waited while a kthread slept");
}

#[test]
fn work_from_outside_is_not_starved_by_yielding_uthreads() {
    let rt = runtime(1);
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let h = rt.spawn(move || {
        let f1 = f.clone();
        let other = corral::spawn(move || {
            let t = Instant::now();
            while !f1.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
                corral::yield_now();
            }
        });
        let t = Instant::now();
        while !f.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(5) {
            corral::yield_now();
        }
        other.join().unwrap();
        f.load(Ordering::SeqCst)
    });
    std::thread::sleep(Duration::from_millis(20));
    let f2 = flag.clone();
    let injected = rt.spawn(move || f2.store(true, Ordering::SeqCst));
    assert!(
        h.join().unwrap(),
        "the injected uthread never ran while others yielded"
    );
    injected.join().unwrap();
}

#[test]
fn spilled_uthreads_are_not_starved() {
    let rt = runtime(1);
    let all_started = rt.block_on(|| {
        // More than a run queue holds: some spill to the inject queue.
        const N: usize = 600;
        let started = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..N)
            .map(|_| {
                let s = started.clone();
                corral::spawn(move || {
                    s.fetch_add(1, Ordering::SeqCst);
                    let t = Instant::now();
                    while s.load(Ordering::SeqCst) < N && t.elapsed() < Duration::from_secs(5) {
                        corral::yield_now();
                    }
                    s.load(Ordering::SeqCst) == N
                })
            })
            .collect();
        hs.into_iter().all(|h| h.join().unwrap())
    });
    assert!(
        all_started,
        "some uthreads never started while others yielded"
    );
}

#[test]
fn os_threads_and_uthreads_share_a_mutex_and_condvar() {
    let rt = runtime(2);
    let state = Arc::new((corral::Mutex::new(0u32), corral::Condvar::new()));
    let s2 = state.clone();
    let h = rt.spawn(move || {
        let (m, cv) = &*s2;
        let mut g = m.lock();
        cv.wait_while(&mut g, |v| *v == 0);
        *g += 1;
        cv.notify_all();
    });
    std::thread::sleep(Duration::from_millis(5));
    let (m, cv) = &*state;
    *m.lock() = 1;
    cv.notify_all();
    let mut g = m.lock();
    cv.wait_while(&mut g, |v| *v != 2);
    drop(g);
    h.join().unwrap();
}

#[test]
fn work_from_outside_wakes_a_parked_single_kthread() {
    let rt = runtime(1);
    for _ in 0..20 {
        // Long enough for the only kthread to park.
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(rt.spawn(|| 42).join().unwrap(), 42);
    }
    // A uthread woken by an OS thread, on a runtime whose only kthread is parked.
    let wg = Arc::new(corral::WaitGroup::new());
    wg.add(1);
    let w = wg.clone();
    let h = rt.spawn(move || w.wait());
    std::thread::sleep(Duration::from_millis(5));
    wg.done();
    h.join().unwrap();
}

#[test]
fn spawn_from_outside_and_detach() {
    let rt = runtime(2);
    let done = Arc::new(AtomicUsize::new(0));
    for _ in 0..100 {
        let d = done.clone();
        drop(rt.spawn(move || {
            d.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < 100 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "detached uthreads did not all run"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn detached_uthreads_run_and_a_panic_in_one_harms_nobody() {
    let rt = runtime(2);
    let n = rt.block_on(|| {
        let counter = Arc::new(AtomicUsize::new(0));
        let wg = Arc::new(corral::WaitGroup::new());
        wg.add(10_001);
        for i in 0..10_000 {
            let (c, w) = (counter.clone(), wg.clone());
            let id = corral::spawn_detached(move || {
                c.fetch_add(i, Ordering::Relaxed);
                w.done();
            });
            assert!(id.as_u64() > 0);
        }
        let w = wg.clone();
        corral::spawn_detached(move || {
            w.done();
            panic!("detached failure");
        });
        wg.wait();
        counter.load(Ordering::Relaxed)
    });
    assert_eq!(n, (0..10_000).sum::<usize>());
    assert_eq!(
        rt.block_on(|| 7),
        7,
        "the runtime still works after the panic"
    );
}

#[test]
fn custom_stack_sizes_work() {
    let rt = runtime(1);
    let v = rt.block_on(|| {
        Builder::new()
            .stack_size(2 << 20)
            .spawn(|| {
                let big = [7u8; 1 << 20];
                big.iter().map(|&b| b as u64).sum::<u64>()
            })
            .unwrap()
            .join()
            .unwrap()
    });
    assert_eq!(v, 7 << 20);
}

#[test]
fn bad_configs_name_the_value() {
    let err = Runtime::new(Config::default().kthreads(0))
        .err()
        .expect("zero kthreads refused");
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("kthreads = 0"), "{err}");

    let err = Runtime::new(Config::default().stack_size(100))
        .err()
        .expect("tiny stack refused");
    assert!(err.to_string().contains("stack_size = 100"), "{err}");
    assert!(err.to_string().contains("page"), "{err}");

    let err = Runtime::new(Config::default().kthreads(100_000))
        .err()
        .expect("absurd kthreads refused");
    assert!(err.to_string().contains("kthreads = 100000"), "{err}");

    let err = Runtime::new(Config::default().cpus(vec![4096]))
        .err()
        .expect("missing CPU refused");
    assert!(err.to_string().contains("cpus = 4096"), "{err}");
}

#[test]
fn builder_errors_instead_of_panicking() {
    let err = Builder::new().spawn(|| ()).expect_err("no runtime here");
    assert!(
        err.to_string().contains("outside a Corral runtime"),
        "{err}"
    );

    let rt = runtime(1);
    let msg = rt.block_on(|| {
        Builder::new()
            .stack_size(100)
            .spawn(|| ())
            .err()
            .map(|e| e.to_string())
    });
    let msg = msg.expect("tiny stack refused");
    assert!(msg.contains("stack_size = 100"), "{msg}");
}

#[test]
fn pinned_runtime_runs() {
    let cpus = corral::allowed_cpus();
    let rt = Runtime::new(Config::default().kthreads(cpus.len()).pinned()).unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    rt.block_on(move || f.store(true, Ordering::SeqCst));
    assert!(flag.load(Ordering::SeqCst));
}

#[test]
fn many_runtimes_come_and_go() {
    for n in 1..=3 {
        let rt = runtime(n);
        assert_eq!(rt.block_on(move || n * 2), n * 2);
    }
}

/// A uthread blocked in the kernel (a `read` on an empty pipe, which nothing turns into a
/// uthread wait) holds its kthread; with one kthread, the uthread that would write to the pipe
/// runs only on a kthread from the blocking reserve. Twenty rounds, so that kthreads go back to
/// the reserve between them and come out again.
#[test]
fn a_kthread_blocked_in_the_kernel_is_stood_in_for_by_the_reserve() {
    let rt = Runtime::new(Config::default().kthreads(1).blocking_reserve(2))
        .expect("runtime with a blocking reserve");
    for round in 0..20u8 {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let [read_end, write_end] = fds;
        let reader = rt.spawn(move || {
            let mut byte = 0u8;
            // SAFETY: reads one byte into a local from a descriptor we own.
            let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
            (n, byte)
        });
        let writer = rt.spawn(move || {
            // Let the reader block first.
            std::thread::sleep(Duration::from_millis(5));
            // SAFETY: writes one byte from a local to a descriptor we own.
            unsafe { libc::write(write_end, (&round as *const u8).cast(), 1) }
        });
        // Without a stand-in the writer never runs and the reader waits for ever: a watchdog
        // unblocks it with a byte no writer sends, so that the test fails instead of hanging.
        let (finished, watched) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            if watched.recv_timeout(Duration::from_secs(30)).is_err() {
                let stray = 0xFFu8;
                // SAFETY: writes one byte from a local to a descriptor the round keeps open
                // until this thread is joined.
                unsafe { libc::write(write_end, (&stray as *const u8).cast(), 1) };
            }
        });
        let read = reader.join().expect("reader");
        let _ = finished.send(());
        watchdog.join().expect("watchdog");
        assert_eq!(
            read,
            (1, round),
            "round {round}: no kthread stood in for the reader"
        );
        assert_eq!(writer.join().expect("writer"), 1);
        // SAFETY: closing the descriptors this round opened.
        unsafe {
            libc::close(read_end);
            libc::close(write_end);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_blocking_reserve_is_refused_under_iokerneld() {
    let config = Config::default()
        .blocking_reserve(1)
        .iokernel(corral::IokernelSettings::new(
            "/nonexistent.sock",
            "reserve",
        ));
    let err = Runtime::new(config).err().expect("refused");
    assert!(err.to_string().contains("blocking_reserve"), "{err}");
}
