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
/// 4096 iterations it publishes its progress (`base` + the iteration) and counts in
/// `interleavings` each time the other uthread moved since its last look, which on a single
/// kthread can only happen if it was preempted.
#[inline(never)]
fn register_heavy(
    iterations: u64,
    base: u64,
    mine: &AtomicU64,
    other: &AtomicU64,
    interleavings: &AtomicU64,
) -> (u64, [f64; 8]) {
    let mut lanes = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let mut lcg = 0x1234_5678u64;
    let mut other_seen = other.load(Ordering::Relaxed);
    for i in 0..iterations {
        for (j, lane) in lanes.iter_mut().enumerate() {
            *lane = *lane * 1.000_000_1 + (i as f64) * 1e-9 - (j as f64) * 1e-10;
        }
        lcg = lcg
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(i | 1);
        if i % 4096 == 0 {
            mine.store(base + i, Ordering::Relaxed);
            let now = other.load(Ordering::Relaxed);
            if now != other_seen {
                interleavings.fetch_add(1, Ordering::Relaxed);
                other_seen = now;
            }
        }
    }
    (lcg, lanes)
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
    // Rounds of register-heavy work, each checked against a run nobody interrupted, until the
    // two uthreads have interleaved (each one preempted mid-round) this often.
    const ROUND: u64 = 2_000_000;
    const INTERLEAVINGS: u64 = 1000;
    // Only against a hang: a quiet machine gets there in well under a second.
    const LIMIT: Duration = Duration::from_secs(60);
    let nobody = AtomicU64::new(0);
    let reference = register_heavy(ROUND, 0, &nobody, &nobody, &AtomicU64::new(0));

    let rt = Runtime::new(Config::default().kthreads(1).preemption(true)).unwrap();
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..2).map(|_| AtomicU64::new(0)).collect());
    let interleavings = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..2)
        .map(|me| {
            let (progress, interleavings) = (progress.clone(), interleavings.clone());
            rt.spawn(move || {
                let mut rounds = 0u64;
                while interleavings.load(Ordering::Relaxed) < INTERLEAVINGS
                    && start.elapsed() < LIMIT
                {
                    let got = register_heavy(
                        ROUND,
                        rounds * ROUND,
                        &progress[me],
                        &progress[1 - me],
                        &interleavings,
                    );
                    assert_eq!(got.0, reference.0, "integer state corrupted by preemption");
                    assert_eq!(
                        got.1.map(f64::to_bits),
                        reference.1.map(f64::to_bits),
                        "vector/FP state corrupted"
                    );
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let signaller = Signaller::start(&rt, Duration::from_micros(100));
    while !handles.iter().all(|h| h.is_finished()) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let signals = signaller.finish();
    let rounds: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let interleavings = interleavings.load(Ordering::Relaxed);
    assert!(
        interleavings >= INTERLEAVINGS,
        "the two uthreads interleaved only {interleavings} times in {LIMIT:?} \
         ({rounds} rounds, {signals} signals sent)"
    );
    // Each interleaving is a preemption, and only the signals sent here preempt.
    assert!(
        signals >= interleavings,
        "{interleavings} interleavings from {signals} signals"
    );
}

/// A thread that signals every kthread of a runtime, back to back or every `period`, counting
/// what it sent, until stopped (or dropped, so that a failed test does not leave it running).
struct Signaller {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Signaller {
    fn start(rt: &Runtime, period: Duration) -> Signaller {
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
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, sent) = (stop.clone(), sent.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for &t in &tids {
                        signal_kthread(t);
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    if !period.is_zero() {
                        std::thread::sleep(period);
                    }
                }
            })
        };
        Signaller {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    /// Signals sent so far.
    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops the thread; returns how many signals it sent.
    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
        self.sent()
    }
}

impl Drop for Signaller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_storm_of_preemption_signals_is_survived() {
    // Signals back to back: a handler must never nest another switch (and frame) on the stack.
    // The storm lasts until this many signals have been sent and every uthread has been
    // through this many rounds of yields, sleeps and checks under it.
    const SIGNALS: u64 = 1_000_000;
    const ROUNDS: u64 = 10_000;
    // Only against a hang: a quiet machine gets there in about a second.
    const LIMIT: Duration = Duration::from_secs(60);
    let rt = Runtime::new(Config::default().kthreads(2).preemption(true)).unwrap();
    let signaller = Signaller::start(&rt, Duration::ZERO);
    let start = Instant::now();
    let hs: Vec<_> = (0..6)
        .map(|_| {
            let sent = signaller.sent.clone();
            rt.spawn(move || {
                let mut rounds = 0u64;
                while (rounds < ROUNDS || sent.load(Ordering::Relaxed) < SIGNALS)
                    && start.elapsed() < LIMIT
                {
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
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let rounds: Vec<u64> = hs
        .into_iter()
        .map(|h| h.join().expect("no panic under signals"))
        .collect();
    let signals = signaller.finish();
    assert!(
        signals >= SIGNALS && rounds.iter().all(|&r| r >= ROUNDS),
        "in {LIMIT:?}: {signals} signals, rounds per uthread {rounds:?}"
    );
}

#[test]
fn each_kthread_keeps_its_own_alternate_signal_stack() {
    let rt = Runtime::new(Config::default().kthreads(2).preemption(true)).unwrap();
    let signaller = Signaller::start(&rt, Duration::from_micros(50));
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
    signaller.finish();
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

/// A kthread signalled while it shuts down (iokerneld may kick it until the runtime's
/// connection closes) takes the signal as a kthread or not at all: the process survives
/// signals sent right up to the moment its kthreads' OS threads are gone.
#[test]
fn a_kthread_signalled_while_it_exits_does_not_end_the_process() {
    for _ in 0..300 {
        let rt = Runtime::new(Config::default().kthreads(1).preemption(true)).unwrap();
        let tid = kthread_tid(&rt);
        let stop = Arc::new(AtomicBool::new(false));
        let signaller = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    signal_kthread(tid);
                }
            })
        };
        // The signals go on until the drop has joined the kthread's OS thread, so some reach
        // it while it stops; those sent after it is gone fail with ESRCH.
        drop(rt);
        stop.store(true, Ordering::Relaxed);
        signaller.join().unwrap();
    }
}
