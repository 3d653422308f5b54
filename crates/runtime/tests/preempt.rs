//! Preemption by signal: a uthread that never yields is interrupted, and resumes later with
//! every register (general purpose, vector and floating point) intact. iokerneld sends the same
//! signal; here the test sends it.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use corral::{Config, Runtime};

/// The kthread's OS thread id, once it has started.
fn kthread_tid(rt: &Runtime) -> i32 {
    let start = Instant::now();
    loop {
        let tid = rt.kthread_tids()[0];
        if tid != 0 {
            return tid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "kthread never started"
        );
        std::thread::yield_now();
    }
}

fn signal_kthread(tid: i32) {
    // SAFETY: tgkill with our own pid and one of our threads' ids.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            tid,
            corral::PREEMPT_SIGNAL,
        )
    };
}

/// Keeps its state in registers: eight f64 lanes and an integer LCG, with no calls. Every
/// 4096 iterations it publishes its progress and counts how often the other uthread moved
/// since its last look, which on a single kthread can only happen if it was preempted.
#[inline(never)]
fn register_heavy(iterations: u64, mine: &AtomicU64, other: &AtomicU64) -> (u64, [f64; 8], u64) {
    let mut lanes = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let mut lcg = 0x1234_5678u64;
    let mut other_seen = other.load(Ordering::Relaxed);
    let mut interleavings = 0;
    for i in 0..iterations {
        for (j, lane) in lanes.iter_mut().enumerate() {
            *lane = *lane * 1.000_000_1 + (i as f64) * 1e-9 - (j as f64) * 1e-10;
        }
        lcg = lcg
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(i | 1);
        if i % 4096 == 0 {
            mine.store(i, Ordering::Relaxed);
            let now = other.load(Ordering::Relaxed);
            if now != other_seen {
                interleavings += 1;
                other_seen = now;
            }
        }
    }
    (lcg, lanes, interleavings)
}

/// Stops a signalling thread when dropped, even if the test fails first.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_spinning_uthread_is_preempted_so_another_can_run() {
    let rt = Runtime::new(Config::default().kthreads(1).preemption(true)).unwrap();
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    let main = rt.spawn(move || {
        let f2 = f.clone();
        // Runnable, but only gets the kthread if the spinner below is preempted.
        let setter = corral::spawn(move || f2.store(true, Ordering::SeqCst));
        while !f.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        setter.join().unwrap();
    });
    let tid = kthread_tid(&rt);
    let start = Instant::now();
    while !main.is_finished() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the spinner was never preempted"
        );
        signal_kthread(tid);
        std::thread::sleep(Duration::from_micros(200));
    }
    main.join().unwrap();
}

#[test]
fn preempted_uthreads_keep_all_their_registers() {
    const ITERS: u64 = 30_000_000;
    let reference = register_heavy(ITERS, &AtomicU64::new(0), &AtomicU64::new(0));

    let rt = Runtime::new(Config::default().kthreads(1).preemption(true)).unwrap();
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..2).map(|_| AtomicU64::new(0)).collect());
    let handles: Vec<_> = (0..2)
        .map(|me| {
            let progress = progress.clone();
            rt.spawn(move || register_heavy(ITERS, &progress[me], &progress[1 - me]))
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_signals = StopOnDrop(stop.clone());
    let signaller = start_signaller(&rt, stop.clone(), Duration::from_micros(100));
    let start = Instant::now();
    while !handles.iter().all(|h| h.is_finished()) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "computation never finished"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    let signals = signaller.join().unwrap();
    let mut interleavings = 0;
    for h in handles {
        let got = h.join().unwrap();
        assert_eq!(got.0, reference.0, "integer state corrupted by preemption");
        assert_eq!(
            got.1.map(f64::to_bits),
            reference.1.map(f64::to_bits),
            "vector/FP state corrupted"
        );
        interleavings += got.2;
    }
    assert!(signals > 100, "only {signals} signals sent");
    assert!(
        interleavings > 10,
        "the two uthreads interleaved only {interleavings} times"
    );
}

fn start_signaller(
    rt: &Runtime,
    stop: Arc<AtomicBool>,
    period: Duration,
) -> std::thread::JoinHandle<u64> {
    let tids: Vec<i32> = (0..rt.config().kthreads)
        .map(|i| {
            loop {
                let t = rt.kthread_tids()[i];
                if t != 0 {
                    break t;
                }
                std::thread::yield_now();
            }
        })
        .collect();
    std::thread::spawn(move || {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            for &t in &tids {
                signal_kthread(t);
                n += 1;
            }
            if !period.is_zero() {
                std::thread::sleep(period);
            }
        }
        n
    })
}

#[test]
fn a_storm_of_preemption_signals_is_survived() {
    // Signals back to back: a handler must never nest another switch (and frame) on the stack.
    let rt = Runtime::new(Config::default().kthreads(2).preemption(true)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_signals = StopOnDrop(stop.clone());
    let signaller = start_signaller(&rt, stop.clone(), Duration::ZERO);
    let hs: Vec<_> = (0..6)
        .map(|_| {
            rt.spawn(|| {
                let t = Instant::now();
                let mut yields = 0u64;
                while t.elapsed() < Duration::from_secs(2) {
                    corral::yield_now();
                    corral::sleep(Duration::from_micros(1));
                    // Being moved between kthreads mid-check must not make a uthread look
                    // like an ordinary thread, nor unbalance the preemption counter.
                    for _ in 0..100 {
                        assert!(
                            corral::kthread_index().is_some(),
                            "uthread lost its kthread"
                        );
                        assert!(
                            corral::preempt::is_enabled(),
                            "preemption counter unbalanced"
                        );
                    }
                    yields += 1;
                }
                yields
            })
        })
        .collect();
    let yields: u64 = hs
        .into_iter()
        .map(|h| h.join().expect("no panic under signals"))
        .sum();
    stop.store(true, Ordering::Relaxed);
    let signals = signaller.join().unwrap();
    assert!(
        yields > 0 && signals > 1000,
        "yields {yields}, signals {signals}"
    );
}

#[test]
fn each_kthread_keeps_its_own_alternate_signal_stack() {
    let rt = Runtime::new(Config::default().kthreads(2).preemption(true)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_signals = StopOnDrop(stop.clone());
    let signaller = start_signaller(&rt, stop.clone(), Duration::from_micros(50));
    let hs: Vec<_> = (0..8)
        .map(|_| {
            rt.spawn(|| {
                let mut seen = Vec::new();
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(1) {
                    let spin = Instant::now();
                    while spin.elapsed() < Duration::from_micros(200) {
                        std::hint::spin_loop();
                    }
                    let _no_migration = corral::preempt::PreemptGuard::new();
                    // SAFETY: stack_t is plain data that sigaltstack fills in.
                    let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
                    // SAFETY: querying only.
                    unsafe { libc::sigaltstack(std::ptr::null(), &mut cur) };
                    seen.push((corral::kthread_index().unwrap(), cur.ss_sp as usize));
                }
                seen
            })
        })
        .collect();
    let mut all: Vec<(usize, usize)> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    signaller.join().unwrap();
    all.sort_unstable();
    all.dedup();
    let mut stacks: Vec<usize> = all.iter().map(|x| x.1).collect();
    stacks.sort_unstable();
    stacks.dedup();
    assert_eq!(
        all.len(),
        stacks.len(),
        "an alternate signal stack moved between kthreads: {all:?}"
    );
}
