//! Corral runtimes under a real iokerneld: one managed core (CPU 1) shared by a
//! latency-critical runtime and a batch runtime, iokerneld on CPU 0.
//!
//! The tests share CPU 1, so they run one at a time. They assert behaviour, not timing: every
//! wait is bounded only so that a broken build fails instead of hanging.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Daemon, Launch, serial, wait_until};
use corral::{Config, IokernelSettings, PreemptionMode, Runtime};

impl Daemon {
    fn start(extra: &[&str]) -> Daemon {
        Daemon::launch(Launch {
            args: &["--log-level", "warn", "--nic", "none"],
            socket: "iokerneld.sock",
            extra,
            log: false,
        })
    }

    fn settings(&self, name: &str) -> IokernelSettings {
        IokernelSettings::new(&self.socket, name)
    }

    fn runtime(&self, name: &str, kthreads: usize) -> Runtime {
        Runtime::new(
            Config::default()
                .kthreads(kthreads)
                .iokernel(self.settings(name)),
        )
        .expect("register with iokerneld")
    }

    /// A one-kthread runtime with one guaranteed core: below its guarantee whenever it has no
    /// core, so it takes the core from a batch runtime at once instead of after the share
    /// quantum, as latency-critical runtimes are meant to.
    fn latency_critical(&self, name: &str) -> Runtime {
        Runtime::new(
            Config::default()
                .kthreads(1)
                .iokernel(self.settings(name).guaranteed_cores(1)),
        )
        .expect("register with iokerneld")
    }

    fn runtime_stats(&self, name: &str) -> serde_json::Value {
        let stats = self.stats();
        stats["runtimes"]
            .as_array()
            .expect("runtimes array")
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("runtime {name} not in {stats:#}"))
    }
}

/// Starts `uthreads` CPU-bound uthreads on `rt` that each count their iterations into
/// `progress` until `stop` is set.
fn start_batch(rt: &Runtime, uthreads: usize, stop: &Arc<AtomicBool>, progress: &Arc<AtomicU64>) {
    start_batch_with(rt, uthreads, stop, progress, || {});
}

/// As [`start_batch`], calling `between_chunks` after each chunk of 1000 steps.
fn start_batch_with(
    rt: &Runtime,
    uthreads: usize,
    stop: &Arc<AtomicBool>,
    progress: &Arc<AtomicU64>,
    between_chunks: fn(),
) {
    for _ in 0..uthreads {
        let stop = stop.clone();
        let progress = progress.clone();
        rt.spawn(move || {
            let mut x = 1.0f64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..1000 {
                    x = x * 1.000_000_1 + 1e-9;
                }
                progress.fetch_add(1, Ordering::Relaxed);
                between_chunks();
            }
            std::hint::black_box(x);
        });
    }
}

#[test]
fn a_runtime_registers_runs_work_and_reports_its_mode() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    let rt = daemon.runtime("solo", 1);
    assert!(matches!(rt.mode(), corral::Mode::Iokernel(_)));
    assert!(rt.iokernel_runtime_id().is_some());
    let sum = rt.block_on(|| {
        let handles: Vec<_> = (0..100u64).map(|i| corral::spawn(move || i * i)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, 328_350);
    // The kthread ran on the managed core.
    let kthreads = rt.iokernel_kthread_stats();
    assert_eq!(kthreads[0].cpu, Some(1));
    assert!(kthreads[0].grants >= 1);
    // It parks when idle, and a timer wakes it again.
    wait_until("the runtime to park", Duration::from_secs(5), || {
        daemon.runtime_stats("solo")["cores_held"] == 0
    });
    let slept = rt.block_on(|| {
        let start = Instant::now();
        corral::sleep(Duration::from_millis(2));
        start.elapsed()
    });
    assert!(slept >= Duration::from_millis(2));
    drop(rt);
    wait_until(
        "the runtime to be unregistered",
        Duration::from_secs(5),
        || daemon.stats()["runtimes"].as_array().unwrap().is_empty(),
    );
}

#[test]
fn a_refused_registration_is_an_error_naming_the_reason() {
    let _serial = serial();
    let daemon = Daemon::start(&[]);
    // Two managed-core guarantees on a daemon that manages one core.
    let err = Runtime::new(
        Config::default()
            .kthreads(2)
            .iokernel(daemon.settings("greedy").guaranteed_cores(2)),
    )
    .err()
    .expect("oversubscribed guarantee accepted");
    let text = err.to_string();
    assert!(text.contains("refused"), "{text}");
    assert!(text.contains("guarantee"), "{text}");
    let missing = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(
                daemon.dir().join("nope.sock"),
                "lost",
            )),
    )
    .err()
    .expect("registered with no daemon");
    assert!(missing.to_string().contains("nope.sock"), "{missing}");
}

/// Waits until `count` reaches `wanted` while `worker` produces it; fails with iokerneld's
/// view if the count stops growing for a minute or the worker ends first.
fn count_up_to<T>(
    daemon: &Daemon,
    what: &str,
    wanted: u64,
    worker: &std::thread::JoinHandle<T>,
    count: impl Fn(&Daemon) -> u64,
) {
    let (mut last, mut since) = (0, Instant::now());
    loop {
        let now = count(daemon);
        if now >= wanted {
            return;
        }
        if now != last {
            (last, since) = (now, Instant::now());
        }
        assert!(
            since.elapsed() < Duration::from_secs(60) && !worker.is_finished(),
            "{what} stopped at {last}: {:#}",
            daemon.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The latency-critical runtime sleeps, so each of its wake-ups needs the core back from the
/// busy batch runtime; the batch runtime must get it back each time the other parks.
///
/// Not every sleep makes a hand-over (a kthread that Linux keeps off its CPU past the sleep
/// finds its timer due and never parks), so the rounds go on until the latency-critical runtime
/// has parked `ROUNDS` times, and each counter is checked against the others.
#[test]
fn the_core_goes_back_and_forth_between_latency_critical_and_batch() {
    const ROUNDS: u64 = 2000;
    let _serial = serial();
    // A preemption bound ten times the default: on a loaded machine Linux alone can keep the
    // batch kthread off its CPU for over 10 ms, and a demoted kthread's core changes hands
    // without a park.
    let mut daemon = Daemon::start(&["--preemption-timeout-us", "100000"]);
    let batch = daemon.runtime("batch", 1);
    let lc = daemon.latency_critical("lc");
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    start_batch(&batch, 4, &stop, &progress);
    wait_until("batch to start", Duration::from_secs(10), || {
        progress.load(Ordering::Relaxed) > 0
    });

    let lc_before = daemon.runtime_stats("lc");
    let batch_before = daemon.runtime_stats("batch");
    let stop_lc = Arc::new(AtomicBool::new(false));
    let rounds = {
        let stop_lc = stop_lc.clone();
        std::thread::spawn(move || {
            lc.block_on(move || {
                while !stop_lc.load(Ordering::Relaxed) {
                    corral::sleep(Duration::from_micros(500));
                    // The wake-up that brought us here is stamped, and not in the future.
                    let sent = corral::core_wake_sent_at_ns().expect("a wake-up time");
                    let decided = corral::core_granted_at_ns().expect("a decision time");
                    let now = corral::now_ns();
                    assert!(decided <= sent && sent <= now, "{decided} {sent} {now}");
                }
            });
            lc
        })
    };
    let lc_counter = |s: &serde_json::Value, key: &str| {
        s[key].as_u64().unwrap() - lc_before[key].as_u64().unwrap()
    };
    count_up_to(&daemon, "latency-critical parks", ROUNDS, &rounds, |d| {
        lc_counter(&d.runtime_stats("lc"), "parks")
    });
    stop_lc.store(true, Ordering::Relaxed);
    let _lc = rounds.join().expect("the latency-critical rounds");
    stop.store(true, Ordering::Relaxed);
    daemon.assert_alive();

    let lc_stats = daemon.runtime_stats("lc");
    let batch_stats = daemon.runtime_stats("batch");
    let batch_counter =
        |key: &str| batch_stats[key].as_u64().unwrap() - batch_before[key].as_u64().unwrap();
    let lc_parks = lc_counter(&lc_stats, "parks");
    let lc_grants = lc_counter(&lc_stats, "grants");
    let batch_preemptions = batch_counter("preemptions_suffered");
    let batch_grants = batch_counter("grants");
    let context = format!("lc: {lc_stats:#}\nbatch: {batch_stats:#}");
    assert_eq!(batch_counter("demotions"), 0, "{context}");
    // Each time it parked (but the last), the latency-critical runtime woke on the managed
    // core, by its timer, which it can only have done by taking the core from the batch
    // runtime.
    assert!(
        lc_grants + 1 >= lc_parks,
        "lc parked {lc_parks} times, granted {lc_grants}: {context}"
    );
    assert!(
        lc_counter(&lc_stats, "timer_wakeups") + 1 >= lc_parks,
        "{context}"
    );
    assert!(
        batch_preemptions + 1 >= lc_grants,
        "lc was granted a core {lc_grants} times but batch preempted {batch_preemptions}: {context}"
    );
    // And each time the latency-critical runtime parked, the batch runtime got the core back.
    assert!(
        batch_grants + 1 >= lc_parks,
        "lc parked {lc_parks} times but batch got the core back only {batch_grants} times: {context}"
    );
    assert!(progress.load(Ordering::Relaxed) > 0);

    // Each preemption of the batch runtime was split into its signal and park phases.
    let handover = &batch_stats["handover"];
    let timed = handover["samples"].as_u64().unwrap();
    let untimed = handover["unstamped"].as_u64().unwrap();
    let preempted = batch_stats["preemptions_suffered"].as_u64().unwrap();
    assert!(
        timed > 0 && timed + untimed + 1 >= preempted,
        "{preempted} preemptions: {handover:#}"
    );
    for phase in ["signal_p50_ns", "park_p50_ns"] {
        assert!(handover[phase].as_u64().unwrap() > 0, "{handover:#}");
    }
}

/// Thousands of reallocations while both runtimes spawn short uthreads: each runs exactly once.
///
/// The latency-critical runtime parks between bursts until the batch runtime has been preempted
/// `WANTED` times, and the batch runtime keeps spawning until then: how much work that takes
/// depends on the machine, so the test counts reallocations, not work.
#[test]
fn no_uthread_is_lost_or_run_twice_across_reallocations() {
    const WANTED: u64 = 1000;
    const BURST: usize = 100;
    let _serial = serial();
    let mut daemon = Daemon::start(&[]);
    let batch = daemon.runtime("batch", 1);
    let lc = daemon.latency_critical("lc");
    let batch_ledger = RunLedger::new(1 << 22);
    let lc_ledger = RunLedger::new(1 << 21);
    let enough = Arc::new(AtomicBool::new(false));

    let (ledger, stop) = (batch_ledger.clone(), enough.clone());
    let batch_done = batch.spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let handles: Vec<_> = (0..BURST)
                .filter_map(|_| ledger.slot())
                .map(|slot| {
                    let ledger = ledger.clone();
                    corral::spawn(move || {
                        let mut x = 0u64;
                        for j in 0..20_000u64 {
                            x = x.wrapping_mul(31).wrapping_add(j);
                        }
                        std::hint::black_box(x);
                        ledger.ran(slot);
                    })
                })
                .collect();
            if handles.is_empty() {
                break;
            }
            for h in handles {
                h.join().unwrap();
            }
        }
    });
    let (ledger, stop) = (lc_ledger.clone(), enough.clone());
    let lc_done = lc.spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            // Park between bursts, so the core changes hands.
            corral::sleep(Duration::from_micros(200));
            let handles: Vec<_> = (0..BURST)
                .filter_map(|_| ledger.slot())
                .map(|slot| {
                    let ledger = ledger.clone();
                    corral::spawn(move || ledger.ran(slot))
                })
                .collect();
            if handles.is_empty() {
                break;
            }
            for h in handles {
                h.join().unwrap();
            }
        }
    });
    let preemptions = |d: &Daemon| {
        d.runtime_stats("batch")["preemptions_suffered"]
            .as_u64()
            .unwrap()
    };
    let limit = Duration::from_secs(120);
    let started = Instant::now();
    while preemptions(&daemon) < WANTED && started.elapsed() < limit {
        assert!(
            !lc_done.is_finished() && !batch_done.is_finished(),
            "a ledger filled up before {WANTED} reallocations"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    enough.store(true, Ordering::Relaxed);
    wait_until("both runtimes to finish", Duration::from_secs(60), || {
        batch_done.is_finished() && lc_done.is_finished()
    });
    batch_done.join().unwrap();
    lc_done.join().unwrap();
    daemon.assert_alive();
    batch_ledger.assert_each_ran_once("batch");
    lc_ledger.assert_each_ran_once("lc");
    // A uthread counts as exited once its kthread has recycled it, just after its join.
    wait_until(
        "every uthread to be recycled",
        Duration::from_secs(5),
        || batch.live_uthreads() == 0 && lc.live_uthreads() == 0,
    );
    let preemptions = preemptions(&daemon);
    assert!(
        preemptions >= WANTED,
        "only {preemptions} reallocations from batch to lc in {limit:?}"
    );
}

/// Keeps its state in registers: eight f64 lanes and an integer LCG, with no calls.
#[inline(never)]
fn register_heavy(iterations: u64) -> (u64, [f64; 8]) {
    let mut lanes = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
    let mut lcg = 0x1234_5678u64;
    for i in 0..iterations {
        for (j, lane) in lanes.iter_mut().enumerate() {
            *lane = *lane * 1.000_000_1 + (i as f64) * 1e-9 - (j as f64) * 1e-10;
        }
        lcg = lcg
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(i | 1);
    }
    (lcg, lanes)
}

/// A batch computation preempted by iokerneld thousands of times keeps every register.
///
/// The uthreads repeat a register-heavy computation, checking each result, until the batch
/// runtime has suffered `WANTED` preemptions: how much computing that takes depends on the
/// machine's speed and on how often the runtime cedes at once instead of being signalled, so
/// the test counts preemptions, not work.
#[test]
fn registers_survive_thousands_of_iokerneld_preemptions() {
    const ROUND: u64 = 1_000_000;
    const WANTED: u64 = 1_000;
    let _serial = serial();
    let reference = register_heavy(ROUND);
    let mut daemon = Daemon::start(&[]);
    let batch = daemon.runtime("batch", 1);
    let lc = daemon.latency_critical("lc");
    let enough = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let enough = enough.clone();
            batch.spawn(move || {
                let (mut rounds, mut corrupted) = (0u64, Vec::new());
                while !enough.load(Ordering::Relaxed) {
                    // black_box: a pure call with a constant argument could be hoisted out of
                    // the loop and computed once.
                    let got = register_heavy(std::hint::black_box(ROUND));
                    rounds += 1;
                    if got.0 != reference.0
                        || got.1.map(f64::to_bits) != reference.1.map(f64::to_bits)
                    {
                        corrupted.push(got);
                    }
                }
                (rounds, corrupted)
            })
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_lc = stop.clone();
    let interrupter = lc.spawn(move || {
        while !stop_lc.load(Ordering::Relaxed) {
            corral::sleep(Duration::from_micros(200));
        }
    });
    let suffered = |d: &Daemon| d.runtime_stats("batch")["preemptions_suffered"].as_u64();
    let limit = Duration::from_secs(120);
    let started = Instant::now();
    let mut preemptions = 0;
    while started.elapsed() < limit {
        preemptions = suffered(&daemon).unwrap();
        if preemptions >= WANTED {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    enough.store(true, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    interrupter.join().unwrap();
    let mut rounds = 0;
    for h in handles {
        let (ran, corrupted) = h.join().unwrap();
        rounds += ran;
        assert!(
            corrupted.is_empty(),
            "register state corrupted by preemption in {} of {ran} rounds: \
             got {corrupted:?}, expected {reference:?}",
            corrupted.len()
        );
    }
    daemon.assert_alive();
    let stats = daemon.runtime_stats("batch");
    assert!(
        preemptions >= WANTED,
        "only {preemptions} preemptions in {limit:?} ({rounds} rounds checked): {stats:#}"
    );
}

/// A spinning kthread holds its guaranteed core from registration on, idle or not, and a
/// burstable runtime with work never takes it.
#[test]
fn a_spinning_kthread_keeps_its_guaranteed_core() {
    let _serial = serial();
    let mut daemon = Daemon::start(&[]);
    let spinner = Runtime::new(
        Config::default().kthreads(1).iokernel(
            daemon
                .settings("spinner")
                .guaranteed_cores(1)
                .spinning_kthreads(1),
        ),
    )
    .expect("register the spinning runtime");
    wait_until(
        "the spinning kthread's grant",
        Duration::from_secs(5),
        || daemon.runtime_stats("spinner")["cores_held"] == 1,
    );
    let batch = daemon.runtime("batch", 1);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    start_batch(&batch, 1, &stop, &progress);
    // Idle, the spinner still holds the core; the batch runtime waits for it.
    std::thread::sleep(Duration::from_millis(100));
    let stats = daemon.runtime_stats("spinner");
    assert_eq!(stats["cores_held"], 1, "{stats:#}");
    assert_eq!(stats["preemptions_suffered"], 0, "{stats:#}");
    assert_eq!(
        progress.load(Ordering::Relaxed),
        0,
        "batch ran on the guaranteed core"
    );
    // The spinner's work runs at once.
    assert_eq!(spinner.block_on(|| 6 * 7), 42);
    // When the spinner leaves, the batch runtime gets the core.
    drop(spinner);
    wait_until("batch to run", Duration::from_secs(10), || {
        progress.load(Ordering::Relaxed) > 0
    });
    stop.store(true, Ordering::Relaxed);
    daemon.assert_alive();
}

/// A runtime with more kthreads than iokerneld gives it cores: uthreads spread over all its
/// run queues and timers on all its kthreads, and none is stranded on a parked kthread.
#[test]
fn work_and_timers_are_never_stranded_on_parked_kthreads() {
    const UTHREADS: u64 = 2000;
    let _serial = serial();
    let mut daemon = Daemon::start(&[]);
    let rt = daemon.runtime("wide", 4);
    let done = Arc::new(AtomicU64::new(0));
    let count = done.clone();
    rt.block_on(move || {
        let handles: Vec<_> = (0..UTHREADS)
            .map(|i| {
                let count = count.clone();
                corral::spawn(move || {
                    for round in 0..3 {
                        if (i + round) % 3 == 0 {
                            corral::sleep(Duration::from_micros(50 + i % 200));
                        } else {
                            corral::yield_now();
                        }
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
    assert_eq!(done.load(Ordering::Relaxed), UTHREADS);
    // A uthread counts as exited once its kthread has recycled it, just after its join.
    wait_until(
        "every uthread to be recycled",
        Duration::from_secs(5),
        || rt.live_uthreads() == 0,
    );
    // Only one core is managed, so one kthread at a time held it.
    let stats = daemon.runtime_stats("wide");
    assert!(stats["grants"].as_u64().unwrap() >= 1, "{stats:#}");
    daemon.assert_alive();
}

/// Counts each uthread's runs: every slot handed out must end at exactly one.
struct RunLedger {
    runs: Vec<std::sync::atomic::AtomicU8>,
    next: AtomicU64,
}

impl RunLedger {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(RunLedger {
            runs: (0..capacity)
                .map(|_| std::sync::atomic::AtomicU8::new(0))
                .collect(),
            next: AtomicU64::new(0),
        })
    }

    /// A fresh slot, or `None` once the ledger is full.
    fn slot(&self) -> Option<usize> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize;
        (i < self.runs.len()).then_some(i)
    }

    fn ran(&self, slot: usize) {
        self.runs[slot].fetch_add(1, Ordering::Relaxed);
    }

    fn assert_each_ran_once(&self, name: &str) {
        let handed_out = (self.next.load(Ordering::Relaxed) as usize).min(self.runs.len());
        assert!(handed_out > 0, "{name}: no uthread ran");
        for (i, runs) in self.runs[..handed_out].iter().enumerate() {
            assert_eq!(runs.load(Ordering::Relaxed), 1, "{name} uthread {i}");
        }
    }
}

/// How the batch runtime behaves in a hand-over run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BatchKind {
    /// No batch runtime: the latency-critical runtime's core is idle between its runs.
    None,
    /// Uthreads that compute without yielding (they block only to be joined).
    Busy,
    /// Uthreads that yield every few microseconds.
    Yielding,
}

/// Runs a latency-critical runtime that sleeps briefly and spawns a uthread each time it
/// wakes, against `batch`, under iokerneld with `args`, until `counted` (read from the
/// statistics: the kind of hand-over under test) has grown by `target`. Every uthread either
/// runtime spawned must have run exactly once.
fn handovers_keep_every_uthread(
    args: &[&str],
    batch_kind: BatchKind,
    target: u64,
    counted: fn(&Daemon) -> u64,
) {
    let _serial = serial();
    let mut daemon = Daemon::start(args);
    let lc = daemon.latency_critical("lc");
    let batch = (batch_kind != BatchKind::None).then(|| daemon.runtime("batch", 1));
    let stop = Arc::new(AtomicBool::new(false));
    let lc_ledger = RunLedger::new(1 << 21);
    let batch_ledger = RunLedger::new(1 << 22);
    let before = counted(&daemon);

    // The batch runtime first, as a batch job would be; the latency-critical runtime takes the
    // core from it whenever it has work (without a core it is below its guarantee), and the
    // batch runtime, preempted with work left, waits for the core to be free again.
    let batch_done = batch.as_ref().map(|batch| {
        let (stop, ledger) = (stop.clone(), batch_ledger.clone());
        batch.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let handles: Vec<_> = (0..8)
                    .filter_map(|_| ledger.slot())
                    .map(|slot| {
                        let ledger = ledger.clone();
                        corral::spawn(move || {
                            let mut x = 1.0f64;
                            for step in 0..20_000u32 {
                                x = x * 1.000_000_1 + 1e-9;
                                if batch_kind == BatchKind::Yielding && step % 1000 == 999 {
                                    corral::yield_now();
                                }
                            }
                            std::hint::black_box(x);
                            ledger.ran(slot);
                        })
                    })
                    .collect();
                if handles.is_empty() {
                    break;
                }
                for h in handles {
                    h.join().unwrap();
                }
            }
        })
    });
    if batch.is_some() {
        wait_until("the batch runtime to run", Duration::from_secs(10), || {
            batch_ledger.runs[0].load(Ordering::Relaxed) > 0
        });
    }

    let lc_done = {
        let (stop, ledger) = (stop.clone(), lc_ledger.clone());
        lc.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                corral::sleep(Duration::from_micros(20));
                let Some(slot) = ledger.slot() else { break };
                let ledger = ledger.clone();
                corral::spawn(move || ledger.ran(slot)).join().unwrap();
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let done = counted(&daemon) - before;
        if done >= target {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {done} of {target} hand-overs; statistics: {:#}",
            daemon.stats()
        );
        assert!(
            !lc_done.is_finished(),
            "the latency-critical ledger filled up"
        );
    }
    stop.store(true, Ordering::Relaxed);
    wait_until("both runtimes to stop", Duration::from_secs(60), || {
        lc_done.is_finished() && batch_done.as_ref().is_none_or(|b| b.is_finished())
    });
    lc_done.join().unwrap();
    if let Some(b) = batch_done {
        b.join().unwrap();
    }
    daemon.assert_alive();
    lc_ledger.assert_each_ran_once("lc");
    if batch.is_some() {
        batch_ledger.assert_each_ran_once("batch");
    }
    // A shielding daemon undoes its shield on SIGTERM (dropped, it would be killed); the
    // runtimes leave first, as a runtime whose daemon is gone exits its process.
    drop(lc);
    drop(batch);
    let status = daemon.stop_with(libc::SIGTERM);
    assert!(status.success(), "iokerneld exited with {status}");
}

/// Undoes, when dropped, a shield that a failed test's killed daemon left, so that the tests
/// after it find the machine as it was.
struct UnshieldOnExit;

impl Drop for UnshieldOnExit {
    fn drop(&mut self) {
        if std::path::Path::new("/run/corral/shield.state").exists() {
            let _ = std::process::Command::new(common::IOKERNELD)
                .arg("--unshield")
                .output();
        }
    }
}

const HANDOVERS: u64 = 100_000;

fn global_counter(daemon: &Daemon, key: &str) -> u64 {
    daemon.stats()["global"][key].as_u64().unwrap()
}

/// Grants of an idle core, each delivered by the helper on the core itself.
#[test]
fn idle_grants_by_the_helper_lose_no_uthread() {
    handovers_keep_every_uthread(&[], BatchKind::None, HANDOVERS, |d| {
        d.stats()["global"]["handoff"][0]["local_wakes"]
            .as_u64()
            .unwrap()
    });
}

/// The latency-critical runtime parks and the batch runtime gets the core back; it took the
/// core with the preemption signal.
#[test]
fn give_backs_and_signalled_preemptions_lose_no_uthread() {
    handovers_keep_every_uthread(&[], BatchKind::Busy, HANDOVERS, |d| {
        d.runtime_stats("batch")["grants"].as_u64().unwrap()
    });
}

/// Preemptions of a batch runtime that yields often: it parks within the grace period, with
/// no signal.
#[test]
fn cooperative_cedes_lose_no_uthread() {
    handovers_keep_every_uthread(
        &["--cede-grace-us", "2000"],
        BatchKind::Yielding,
        HANDOVERS,
        |d| {
            d.runtime_stats("batch")["cedes_cooperative"]
                .as_u64()
                .unwrap()
        },
    );
}

/// With the shield on, the latency-critical runtime's kthread runs at SCHED_FIFO, above the
/// fair batch kthread. A batch kthread that misses its grace period is then not waited for:
/// the taker is woken on top of it rather than after it parks (which needs Linux to run it
/// again, milliseconds later when a fair thread holds the CPU), and the batch kthread parks
/// later at the signal. The batch uthreads reach their scheduler every few tens of
/// microseconds, so a grace of 1 us is missed by nearly every preemption, whatever else runs
/// on the CPU. Nothing is lost or run twice.
#[test]
fn takes_in_place_after_a_missed_grace_period_lose_no_uthread() {
    let _unshield = UnshieldOnExit;
    handovers_keep_every_uthread(
        &["--shield", "on", "--cede-grace-us", "1"],
        BatchKind::Busy,
        HANDOVERS / 10,
        |d| global_counter(d, "taken_in_place_after_grace"),
    );
}

/// Preemptions by signal under the old mechanism (iokerneld wakes from its own CPU).
#[test]
fn remote_handovers_lose_no_uthread() {
    handovers_keep_every_uthread(
        &["--handover", "remote"],
        BatchKind::Busy,
        HANDOVERS / 4,
        |d| global_counter(d, "preemptions_signalled"),
    );
}

/// Times a latency-critical runtime takes the core from a busy batch runtime in each test.
const GRACE_ROUNDS: u64 = 300;

/// Runs [`GRACE_ROUNDS`] preemptions of one batch uthread that calls `between_chunks` after each chunk
/// of its loop, under iokerneld with `--cede-grace-us grace_us`; returns how the batch runtime
/// gave its core back.
fn preemptions_of_a_busy_batch(grace_us: &str, between_chunks: fn()) -> Preemptions {
    let stats = busy_batch_preempted(
        grace_us,
        PreemptionMode::Cooperative,
        between_chunks,
        GRACE_ROUNDS,
    );
    let counter = |key: &str| stats["runtimes"][0][key].as_u64().unwrap();
    Preemptions {
        signalled: counter("preempt_signals"),
        ceded: counter("cedes_cooperative"),
        ceded_before_running: counter("cedes_before_running"),
    }
}

/// How a busy batch runtime gave its core back, as iokerneld and the runtime counted it.
#[derive(Debug)]
struct Preemptions {
    /// iokerneld signalled the kthread after the grace period.
    signalled: u64,
    /// The kthread parked within the grace period, with no signal.
    ceded: u64,
    /// The runtime answered the request from its scheduler before it had run the uthread
    /// again since its grant: Linux ran the woken kthread so late that the next request was
    /// already there.
    ceded_before_running: u64,
}

/// As [`preemptions_of_a_busy_batch`], with the batch runtime registered in `preemption` mode,
/// until it has been preempted `rounds` times; returns iokerneld's statistics with the batch
/// runtime's alone in `runtimes`.
fn busy_batch_preempted(
    grace_us: &str,
    preemption: PreemptionMode,
    between_chunks: fn(),
    rounds: u64,
) -> serde_json::Value {
    let _serial = serial();
    let mut daemon = Daemon::start(&["--cede-grace-us", grace_us]);
    let batch = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(daemon.settings("batch").preemption_mode(preemption)),
    )
    .expect("register with iokerneld");
    let lc = daemon.latency_critical("lc");
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    start_batch_with(&batch, 1, &stop, &progress, between_chunks);
    // Until the batch kthread has also read the grant that started it, which its uthread may
    // have begun running before (then a kick makes it read it).
    wait_until("batch to start", Duration::from_secs(10), || {
        progress.load(Ordering::Relaxed) > 0 && batch.iokernel_kthread_stats()[0].grants > 0
    });
    // Before the hand-overs: a grant that waited on the ring of a kthread Linux did not run at
    // once (a stray busy thread on the core outranks the idle class) is kicked for here, not
    // in what the hand-overs did.
    let at_start = daemon.runtime_stats("batch");
    // Until the batch runtime has lost the core `rounds` times, however many sleeps that takes
    // (a sleep need not make a hand-over: see the test above).
    let stop_lc = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let stop_lc = stop_lc.clone();
        std::thread::spawn(move || {
            lc.block_on(move || {
                while !stop_lc.load(Ordering::Relaxed) {
                    corral::sleep(Duration::from_micros(300));
                }
            });
            lc
        })
    };
    let preempted = |d: &Daemon| {
        d.runtime_stats("batch")["preemptions_suffered"]
            .as_u64()
            .unwrap()
            - at_start["preemptions_suffered"].as_u64().unwrap()
    };
    count_up_to(&daemon, "batch preemptions", rounds, &sleeper, preempted);
    stop_lc.store(true, Ordering::Relaxed);
    let _lc = sleeper.join().expect("the latency-critical runtime");
    // Read before the batch uthread is stopped. Once it exits, its kthread parks while its core
    // is taken in place, and the allocator, which saw it give that core up with work left, grants
    // it the core the latency-critical runtime gives back through its ring: a grant, not a
    // hand-over, and one that may wait there for a kick while a busier thread on the CPU
    // outranks the idle class.
    let mut stats = daemon.stats();
    let mut batch_stats = daemon.runtime_stats("batch");
    // What the batch runtime's own kthread took for kicks (signals with no request for the
    // core behind them), beside what iokerneld sent.
    let kthread = batch.iokernel_kthread_stats()[0];
    batch_stats["kicks_taken"] = kthread.kicks.into();
    batch_stats["cedes_before_running"] = kthread.cedes_before_running.into();
    stop.store(true, Ordering::Relaxed);
    daemon.assert_alive();
    assert!(daemon.runtime_stats("lc")["grants"].as_u64().unwrap() >= rounds);
    stats["runtimes"] = serde_json::json!([batch_stats]);
    stats["batch_at_start"] = at_start;
    stats
}

/// A batch uthread that never yields or blocks never reaches its scheduler: with a grace
/// period, every preemption still happens, by the signal after it.
#[test]
fn a_runtime_that_never_yields_is_preempted_after_the_grace_period() {
    let p = preemptions_of_a_busy_batch("100", || {});
    // Only a request that finds the kthread in its scheduler before it runs the uthread again
    // (the first round, or a round where Linux ran the woken kthread late) can be answered
    // without the signal: a running uthread that never yields is never ceded.
    assert!(p.ceded <= p.ceded_before_running, "{p:?}");
    assert!(p.signalled + p.ceded >= GRACE_ROUNDS - 2, "{p:?}");
}

/// A compute loop that passes `corral::preemption_point()` every few microseconds gives its
/// core back by itself: within the grace period, with no signal.
#[test]
fn preemption_points_give_the_core_back_without_a_signal() {
    // A grace period far above the longest time Linux's fair class keeps a busy thread off its
    // CPU (about 4 ms, one tick), so that a signal means a preemption point missed, not a stall.
    let p = preemptions_of_a_busy_batch("20000", corral::preemption_point);
    // A signal only if the batch kthread lost its CPU for the whole grace period.
    assert!(p.ceded >= GRACE_ROUNDS - 5 && p.signalled <= 5, "{p:?}");
}

/// A runtime registered to be preempted by signal at once gets no grace period, even one long
/// enough for its preemption points to cede in: every preemption is signalled with the request,
/// and none is ceded.
#[test]
fn a_runtime_registered_for_signals_at_once_gets_no_grace_period() {
    let stats = busy_batch_preempted(
        "5000",
        PreemptionMode::SignalAtOnce,
        corral::preemption_point,
        GRACE_ROUNDS,
    );
    let batch = &stats["runtimes"][0];
    let counter = |key: &str| batch[key].as_u64().unwrap();
    assert_eq!(batch["preemption"], "signal_at_once", "{batch:#}");
    assert!(counter("preempt_signals") >= GRACE_ROUNDS - 2, "{batch:#}");
    assert_eq!(
        counter("preempt_signals_at_once"),
        counter("preempt_signals"),
        "{batch:#}"
    );
    assert_eq!(counter("cedes_cooperative"), 0, "{batch:#}");
    // A signal sent with the request often arrives after the kthread saw the cede word and
    // went to its scheduler: it must not be taken later, after the next grant, as a kick.
    let kicks_sent = counter("kicks_ingress") + counter("kicks_timer") + counter("kicks_run_queue");
    assert!(counter("kicks_taken") <= kicks_sent, "{batch:#}");
    assert_eq!(
        counter("preemptions_suffered"),
        counter("preempt_signals"),
        "{batch:#}"
    );
    // The other runtime registered as cooperative: every signal sent at once was the batch's.
    let global = &stats["global"];
    assert_eq!(global["cede_grace_us"], 5000);
    assert_eq!(
        global["preemptions_signalled_at_once"], batch["preempt_signals_at_once"],
        "{global:#}"
    );
}

/// A runtime in the idle class is never asked for its core: iokerneld wakes the taker on top
/// of its busy kthread (no request, no signal, no cede), the kthread runs on in the idle
/// moments, and its work goes on. Its uthread never yields, so its kthread never looks at its
/// ingress ring: more hand-overs than the ring has slots must leave nothing there.
#[test]
fn a_runtime_in_the_idle_class_is_taken_in_place_with_no_signal() {
    const ROUNDS: u64 = 1500;
    let stats = busy_batch_preempted("5000", PreemptionMode::IdleClass, || {}, ROUNDS);
    let batch = &stats["runtimes"][0];
    let counter = |key: &str| batch[key].as_u64().unwrap();
    // What the hand-overs did: the counters' growth after the batch kthread started.
    let during = |key: &str| counter(key) - stats["batch_at_start"][key].as_u64().unwrap();
    assert_eq!(batch["preemption"], "idle_class", "{batch:#}");
    assert!(counter("taken_in_place") >= ROUNDS - 2, "{batch:#}");
    // No hand-over left anything on its ingress ring to kick it for.
    assert_eq!(during("kicks_ingress"), 0, "{stats:#}");
    assert_eq!(during("preempt_signals"), 0, "{stats:#}");
    assert_eq!(during("cedes_cooperative"), 0, "{stats:#}");
    assert_eq!(during("demotions"), 0, "{stats:#}");
    assert_eq!(
        stats["global"]["taken_in_place"], batch["taken_in_place"],
        "{stats:#}"
    );
    // The taker is woken from the loop: a post would wait for the batch kthread's slice, the
    // helper being in the idle class too, and be delivered late.
    let handoff = &stats["global"]["handoff"][0];
    assert_eq!(handoff["overdue_posts"], 0, "{handoff:#}");
    assert!(
        handoff["loop_wakes"].as_u64().unwrap() >= ROUNDS - 2,
        "{handoff:#}"
    );
}

/// The helper of the managed core is `SCHED_IDLE`: while a batch kthread keeps the core busy,
/// Linux gives the helper no more than crumbs of CPU, and it delivers nothing.
#[test]
fn the_helper_stays_off_a_busy_core() {
    let _serial = serial();
    let mut daemon = Daemon::start(&[]);
    let pid = daemon.stats()["global"]["pid"].as_u64().unwrap();
    let helper = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim() == "corral-helper1")
        })
        .expect("iokerneld's helper thread of CPU 1")
        .path();
    let policy = std::fs::read_to_string(helper.join("sched")).unwrap();
    assert!(
        policy
            .lines()
            .any(|l| l.starts_with("policy") && l.trim_end().ends_with(" 5")),
        "the helper is not SCHED_IDLE:\n{policy}"
    );
    let run_ns = || -> u64 {
        std::fs::read_to_string(helper.join("schedstat"))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let batch = daemon.runtime("batch", 1);
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicU64::new(0));
    start_batch(&batch, 2, &stop, &progress);
    wait_until("batch to start", Duration::from_secs(10), || {
        progress.load(Ordering::Relaxed) > 0
    });
    let wakes = |d: &Daemon| {
        d.stats()["global"]["handoff"][0]["local_wakes"]
            .as_u64()
            .unwrap()
    };
    // Exact, not a bound: the batch kthread never parks, so nothing is granted while it runs,
    // and the helper counts each wake before making it, so the wake that started the batch
    // kthread is already in `wakes_before`.
    let (ran_before, wakes_before, since) = (run_ns(), wakes(&daemon), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (ran, woke) = (run_ns() - ran_before, wakes(&daemon) - wakes_before);
    let watched = since.elapsed();
    stop.store(true, Ordering::Relaxed);
    daemon.assert_alive();
    assert_eq!(woke, 0, "the helper woke kthreads while the core was busy");
    // A fair-share slice now and then is all Linux gives a SCHED_IDLE thread next to a busy
    // one (weight 3 against 1024, about 0.3%): under 1% of the time watched.
    assert!(
        u128::from(ran) * 100 < watched.as_nanos(),
        "the helper ran {ran} ns of {watched:?} on a busy core"
    );
}
