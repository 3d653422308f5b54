//! Core-allocation benchmarks, each against the raw Linux mechanism it is built from, measured
//! in the same run:
//!
//! * wake-up: from iokerneld's decision to grant a core to the uthread running on it, against
//!   an eventfd write waking a thread blocked on another CPU;
//! * preemption: from iokerneld's decision to take a busy batch runtime's core to the
//!   latency-critical uthread running there, against a raw `tgkill`-to-handler delivery plus
//!   the raw eventfd wake;
//! * reallocation rate: core hand-overs per second between a batch runtime and a
//!   latency-critical runtime that keeps parking, sustained on one managed core, and the batch
//!   runtime's core time lost per round trip (batch -> latency-critical -> batch), against one
//!   raw signal delivery plus two raw same-CPU hand-overs;
//! * the preemption and the reallocation rate again with a cooperative batch runtime (its
//!   uthreads yield every few microseconds) under a second iokerneld with a cede grace period,
//!   so that the batch kthread parks by itself and no signal is sent.
//!
//! The raw same-CPU hand-over (a thread wakes another pinned to its CPU, then blocks) is the
//! floor of any hand-over on one core.
//!
//! iokerneld runs on `--iokernel-cpu` and manages `--app-cpu`; the raw peers use the same two
//! CPUs. Latencies are per-sample medians; each experiment is repeated `--reps` times and the
//! median of the medians is reported.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use corral::{Config, IokernelSettings, Runtime};

#[derive(Parser, Debug)]
#[command(
    about = "iokerneld core-allocation benchmarks against raw Linux wake-up and signal latency"
)]
struct Args {
    /// Repetitions of each experiment; the median of their medians is reported.
    #[arg(long, default_value_t = 5)]
    reps: usize,
    /// Microseconds the woken side stays blocked before each wake-up, in both the raw eventfd
    /// peer and iokerneld's wake-up experiment. It must be the same for both: on a virtual
    /// machine the wake-up cost grows with how long the target CPU was idle (the guest
    /// polls before halting, and a halted vCPU is woken by the host).
    #[arg(long, default_value_t = 100)]
    idle_us: u64,
    /// Samples per latency experiment repetition.
    #[arg(long, default_value_t = 2000)]
    samples: usize,
    /// Seconds of each reallocation-rate repetition.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// How long the latency-critical uthread sleeps between runs in the reallocation-rate
    /// experiment, in microseconds. It must exceed the runtime's spin-before-park (2 us) for
    /// the kthread to park and give the core back.
    #[arg(long, default_value_t = 10)]
    realloc_sleep_us: u64,
    /// CPU of iokerneld (and of the waker in the raw peers).
    #[arg(long, default_value_t = 0)]
    iokernel_cpu: usize,
    /// The managed CPU the runtimes share (and the woken side of the raw peers).
    #[arg(long, default_value_t = 1)]
    app_cpu: usize,
    /// iokerneld's `handover` setting: `local` (helper threads wake kthreads on their own CPU)
    /// or `remote` (iokerneld wakes them from its CPU).
    #[arg(long, default_value = "local")]
    handover: String,
    /// The iokerneld binary; default: next to this program.
    #[arg(long)]
    iokerneld: Option<PathBuf>,
    /// Grace period of the second iokerneld, for the cooperative rows (microseconds).
    #[arg(long, default_value_t = 50)]
    coop_grace_us: u64,
    /// Busy-loop steps between yields of the cooperative batch runtime's uthreads (a step is a
    /// dependent multiply-add, a few nanoseconds).
    #[arg(long, default_value_t = 1000)]
    coop_yield_steps: u64,
    /// Print results as JSON too.
    #[arg(long)]
    json: bool,
}

fn now_ns() -> u64 {
    corral::now_ns()
}

/// A benchmark pinned somewhere else than asked measures something else: stop.
fn pin(cpu: usize) {
    if let Err(e) = corral_affinity::pin_current_thread(cpu) {
        panic!("{e}");
    }
}

fn median_u64(v: &mut [u64]) -> f64 {
    assert!(!v.is_empty(), "no samples");
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

fn median_f64(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

// ---- Raw peers ----

/// Median ns from an eventfd write on `waker_cpu` to the return of `read` in a thread blocked
/// on `woken_cpu`.
fn raw_eventfd_wake(samples: usize, idle_us: u64, waker_cpu: usize, woken_cpu: usize) -> f64 {
    // SAFETY: plain eventfd creation.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(efd >= 0);
    let sent = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    let (sent2, ready2) = (sent.clone(), ready.clone());
    let woken = std::thread::spawn(move || {
        pin(woken_cpu);
        let mut lat = Vec::with_capacity(samples);
        for _ in 0..samples {
            ready2.store(true, Ordering::Release);
            let mut v = 0u64;
            // SAFETY: reading 8 bytes from our eventfd into a u64.
            let n = unsafe { libc::read(efd, (&mut v as *mut u64).cast(), 8) };
            let t = now_ns();
            assert_eq!(n, 8);
            lat.push(t - sent2.load(Ordering::Acquire));
        }
        lat
    });
    pin(waker_cpu);
    for _ in 0..samples {
        while !ready.swap(false, Ordering::AcqRel) {
            std::hint::spin_loop();
        }
        // Let the reader block in the kernel, idle as long as a parked kthread would be. Spin
        // rather than sleep: a sleep overshoots by the timer slack (50 us), and the longer
        // the target CPU idles the slower it wakes.
        let until = now_ns() + idle_us * 1000;
        while now_ns() < until {
            std::hint::spin_loop();
        }
        sent.store(now_ns(), Ordering::Release);
        let one = 1u64;
        // SAFETY: writing 8 bytes to our eventfd.
        unsafe { libc::write(efd, (&one as *const u64).cast(), 8) };
    }
    let mut lat = woken.join().unwrap();
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(efd) };
    median_u64(&mut lat)
}

/// Median ns of a hand-over between two threads pinned to `cpu`: one stamps the time, wakes
/// the other (a private futex) and blocks; the other notes when it runs. What a hand-over on one
/// core costs with no iokerneld in it.
fn raw_same_cpu_handover(samples: usize, cpu: usize) -> f64 {
    use std::sync::atomic::AtomicU32;
    struct Side {
        turn: AtomicU32,
    }
    let sides = Arc::new([
        Side {
            turn: AtomicU32::new(0),
        },
        Side {
            turn: AtomicU32::new(0),
        },
    ]);
    let stamp = Arc::new(AtomicU64::new(0));
    let wait = |word: &AtomicU32| {
        while word.load(Ordering::Acquire) == 0 {
            // SAFETY: the word is live for the call; no timeout.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                    0u32,
                    core::ptr::null::<libc::timespec>(),
                )
            };
        }
        word.store(0, Ordering::Relaxed);
    };
    let wake = |word: &AtomicU32| {
        word.store(1, Ordering::Release);
        // SAFETY: FUTEX_WAKE uses the address only as a key.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                1,
            )
        };
    };
    let rounds = samples / 2 + 1;
    let other = {
        let (sides, stamp) = (sides.clone(), stamp.clone());
        std::thread::spawn(move || {
            pin(cpu);
            let mut lat = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                wait(&sides[1].turn);
                lat.push(now_ns().saturating_sub(stamp.load(Ordering::Acquire)));
                stamp.store(now_ns(), Ordering::Release);
                wake(&sides[0].turn);
            }
            lat
        })
    };
    pin(cpu);
    let mut lat = Vec::with_capacity(samples);
    for round in 0..rounds {
        stamp.store(now_ns(), Ordering::Release);
        wake(&sides[1].turn);
        wait(&sides[0].turn);
        if round > 0 {
            lat.push(now_ns().saturating_sub(stamp.load(Ordering::Acquire)));
        }
    }
    lat.extend(other.join().unwrap());
    median_u64(&mut lat)
}

static SIGNAL_ARRIVED: AtomicU64 = AtomicU64::new(0);

extern "C" fn record_arrival(_: libc::c_int) {
    SIGNAL_ARRIVED.store(now_ns(), Ordering::Release);
}

/// Median ns from `tgkill` on `sender_cpu` to the handler running in a thread spinning on
/// `target_cpu`.
fn raw_signal_delivery(samples: usize, sender_cpu: usize, target_cpu: usize) -> f64 {
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = record_arrival as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, core::ptr::null_mut());
    }
    let tid = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tid2, stop2) = (tid.clone(), stop.clone());
    let spinner = std::thread::spawn(move || {
        pin(target_cpu);
        // SAFETY: gettid has no preconditions.
        tid2.store(unsafe { libc::gettid() } as u64, Ordering::Release);
        while !stop2.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        }
    });
    pin(sender_cpu);
    while tid.load(Ordering::Acquire) == 0 {
        std::hint::spin_loop();
    }
    let tid = tid.load(Ordering::Acquire) as libc::pid_t;
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        SIGNAL_ARRIVED.store(0, Ordering::Release);
        let t0 = now_ns();
        // SAFETY: signalling a thread of our own process with a handled signal.
        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR2) };
        let t1 = loop {
            let t = SIGNAL_ARRIVED.load(Ordering::Acquire);
            if t != 0 {
                break t;
            }
            std::hint::spin_loop();
        };
        lat.push(t1.saturating_sub(t0));
        std::thread::sleep(Duration::from_micros(50));
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    median_u64(&mut lat)
}

// ---- iokerneld ----

struct Daemon {
    child: Child,
    socket: PathBuf,
    dir: PathBuf,
    binary: PathBuf,
}

impl Daemon {
    fn start(binary: &PathBuf, args: &Args, grace_us: u64, tag: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("corral-bench-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("iokerneld.sock");
        let child = Command::new(binary)
            .arg("--core")
            .arg(args.iokernel_cpu.to_string())
            .arg("--managed-cores")
            .arg(args.app_cpu.to_string())
            .arg("--socket")
            .arg(&socket)
            .args(["--log-level", "warn", "--nic", "none"])
            // Unshielded, as the raw peers it is compared with run: the two daemons alternate,
            // and only one of them could hold a shield.
            .args(["--shield", "off"])
            .arg("--handover")
            .arg(&args.handover)
            .arg("--cede-grace-us")
            .arg(grace_us.to_string())
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let start = Instant::now();
        while !socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "iokerneld did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        Daemon {
            child,
            socket,
            dir,
            binary: binary.clone(),
        }
    }

    fn runtime(&self, name: &str) -> Runtime {
        self.runtime_guaranteed(name, 0)
    }

    /// A latency-critical runtime: one guaranteed core, so that it takes the core from the
    /// batch runtime at once rather than after iokerneld's share quantum.
    fn latency_critical(&self, name: &str) -> Runtime {
        self.runtime_guaranteed(name, 1)
    }

    fn runtime_guaranteed(&self, name: &str, guaranteed_cores: usize) -> Runtime {
        Runtime::new(
            Config::default().kthreads(1).iokernel(
                IokernelSettings::new(&self.socket, name).guaranteed_cores(guaranteed_cores),
            ),
        )
        .expect("register with iokerneld")
    }

    /// Stops (`true`) or resumes the daemon, so that only one busy-polls at a time.
    fn pause(&self, stop: bool) {
        let signal = if stop { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    fn stats(&self) -> serde_json::Value {
        let out = Command::new(&self.binary)
            .arg("stats")
            .arg("--socket")
            .arg(&self.socket)
            .output()
            .expect("iokerneld stats");
        serde_json::from_slice(&out.stdout).expect("stats JSON")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Resumed (it may be paused) and stopped with SIGTERM, so that it undoes whatever it
        // changed on the machine; killed only if it does not exit.
        self.pause(false);
        corral_iokernel::sys::stop_child(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Median ns from iokerneld's grant decision to a uthread running on the granted core: a lone
/// runtime whose uthread sleeps, so that each wake-up is iokerneld waking a parked kthread at
/// the uthread's timer.
fn iokerneld_wake(daemon: &Daemon, samples: usize, idle_us: u64) -> f64 {
    let lc = daemon.runtime("wake-bench");
    let mut lat = lc.block_on(move || {
        let mut lat = Vec::with_capacity(samples);
        for _ in 0..samples {
            corral::sleep(Duration::from_micros(idle_us));
            let now = now_ns();
            let decided = corral::core_granted_at_ns().expect("a grant time");
            lat.push(now.saturating_sub(decided));
        }
        lat
    });
    median_u64(&mut lat)
}

/// Starts CPU-bound uthreads on `batch` until `stop`; returns their shared progress counter
/// (one unit per 200 steps). With `yield_steps`, each uthread yields every that many steps.
fn start_batch(
    batch: &Runtime,
    stop: &Arc<AtomicBool>,
    yield_steps: Option<u64>,
) -> Arc<AtomicU64> {
    let progress = Arc::new(AtomicU64::new(0));
    for _ in 0..2 {
        let (stop, progress) = (stop.clone(), progress.clone());
        batch.spawn(move || {
            let mut x = 1.0f64;
            let mut since_yield = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..200 {
                    x = x * 1.000_000_1 + 1e-9;
                }
                progress.fetch_add(1, Ordering::Relaxed);
                if let Some(every) = yield_steps {
                    since_yield += 200;
                    if since_yield >= every {
                        since_yield = 0;
                        corral::yield_now();
                    }
                }
            }
            std::hint::black_box(x);
        });
    }
    let start = Instant::now();
    while progress.load(Ordering::Relaxed) == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "batch never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    progress
}

/// One repetition of the preemption experiment: medians in ns of the whole hand-over and of
/// its phases.
struct Preempt {
    /// iokerneld's decision to take the batch runtime's core -> the latency-critical uthread
    /// running on it.
    total: f64,
    /// tgkill -> the batch kthread's signal handler (iokerneld's statistics).
    signal: f64,
    /// Signal handler -> iokerneld sees the batch kthread park (iokerneld's statistics).
    park: f64,
    /// iokerneld rings the latency-critical kthread's wake word -> its uthread running.
    wake: f64,
    /// Preemptions of the batch runtime that took the signal, and those it ceded by itself.
    signalled: u64,
    cooperative: u64,
}

/// Median ns from iokerneld's decision to preempt the busy batch runtime to the
/// latency-critical uthread running on the core it took, with the phases of that hand-over.
fn iokerneld_preempt(daemon: &Daemon, samples: usize, yield_steps: Option<u64>) -> Preempt {
    let batch = daemon.runtime("batch-bench");
    let lc = daemon.latency_critical("preempt-bench");
    let stop = Arc::new(AtomicBool::new(false));
    let _progress = start_batch(&batch, &stop, yield_steps);
    let (mut total, mut wake) = lc.block_on(move || {
        let mut total = Vec::with_capacity(samples);
        let mut wake = Vec::with_capacity(samples);
        for _ in 0..samples {
            corral::sleep(Duration::from_micros(300));
            let now = now_ns();
            let decided = corral::core_granted_at_ns().expect("a grant time");
            let sent = corral::core_wake_sent_at_ns().expect("a wake time");
            total.push(now.saturating_sub(decided));
            wake.push(now.saturating_sub(sent));
        }
        (total, wake)
    });
    let stats = daemon.stats();
    stop.store(true, Ordering::Relaxed);
    let handover = stats["runtimes"]
        .as_array()
        .expect("runtimes")
        .iter()
        .find(|r| r["name"] == "batch-bench")
        .map(|r| r["handover"].clone())
        .expect("the batch runtime's statistics");
    let ns = |key: &str| handover[key].as_u64().expect("handover percentile") as f64;
    let batch_stats = stats["runtimes"]
        .as_array()
        .expect("runtimes")
        .iter()
        .find(|r| r["name"] == "batch-bench")
        .expect("the batch runtime's statistics");
    Preempt {
        total: median_u64(&mut total),
        signal: ns("signal_p50_ns"),
        park: ns("park_p50_ns"),
        wake: median_u64(&mut wake),
        signalled: batch_stats["preempt_signals"].as_u64().unwrap_or(0),
        cooperative: batch_stats["cedes_cooperative"].as_u64().unwrap_or(0),
    }
}

struct Realloc {
    per_second: f64,
    lc_wakeups: u64,
    batch_progress: u64,
    /// Batch core time lost per round trip (batch -> LC -> batch), ns: the batch runtime's
    /// progress rate against its rate alone on the core just before.
    lost_per_round_trip_ns: f64,
    signalled: u64,
    cooperative: u64,
}

/// Core reallocations per second on the managed core between a busy batch runtime and a
/// latency-critical runtime that parks as soon as it has run and sleeps briefly.
fn reallocation_rate(
    daemon: &Daemon,
    seconds: f64,
    sleep_us: u64,
    app_cpu: usize,
    yield_steps: Option<u64>,
) -> Realloc {
    let batch = daemon.runtime("batch-realloc");
    let lc = daemon.latency_critical("lc-realloc");
    let stop = Arc::new(AtomicBool::new(false));
    let progress = start_batch(&batch, &stop, yield_steps);
    // The batch runtime alone on the core first: its rate is what a round trip is charged
    // against.
    let alone_start = Instant::now();
    let alone_before = progress.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs_f64(seconds / 2.0));
    let alone_rate = (progress.load(Ordering::Relaxed) - alone_before) as f64
        / alone_start.elapsed().as_secs_f64();
    let core_reallocations = |stats: &serde_json::Value| -> u64 {
        stats["cores"]
            .as_array()
            .expect("cores")
            .iter()
            .find(|c| c["cpu"].as_u64() == Some(app_cpu as u64))
            .and_then(|c| c["reallocations"].as_u64())
            .expect("reallocations of the managed core")
    };
    let before = core_reallocations(&daemon.stats());
    let batch_before = progress.load(Ordering::Relaxed);
    let started = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    let lc_wakeups = lc.block_on(move || {
        let mut n = 0u64;
        let start = Instant::now();
        while start.elapsed() < limit {
            corral::sleep(Duration::from_micros(sleep_us));
            n += 1;
        }
        n
    });
    let elapsed = started.elapsed().as_secs_f64();
    let after = core_reallocations(&daemon.stats());
    let batch_progress = progress.load(Ordering::Relaxed) - batch_before;
    let stats = daemon.stats();
    stop.store(true, Ordering::Relaxed);
    let reallocations = (after - before) as f64;
    let lost_s = elapsed - batch_progress as f64 / alone_rate.max(1.0);
    let batch_stats = stats["runtimes"]
        .as_array()
        .expect("runtimes")
        .iter()
        .find(|r| r["name"] == "batch-realloc")
        .expect("the batch runtime's statistics");
    Realloc {
        per_second: reallocations / elapsed,
        lc_wakeups,
        batch_progress,
        lost_per_round_trip_ns: lost_s.max(0.0) * 1e9 / (reallocations / 2.0).max(1.0),
        signalled: batch_stats["preempt_signals"].as_u64().unwrap_or(0),
        cooperative: batch_stats["cedes_cooperative"].as_u64().unwrap_or(0),
    }
}

fn main() {
    let args = Args::parse();
    if args.reps == 0 || args.samples == 0 || args.seconds <= 0.0 {
        eprintln!("error: --reps and --samples must be at least 1 and --seconds positive");
        std::process::exit(2);
    }
    let binary = args.iokerneld.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("iokerneld")
    });
    if !binary.exists() {
        eprintln!(
            "error: iokerneld not found at {} (build it with `cargo build --release -p corral-iokerneld`, or pass --iokerneld)",
            binary.display()
        );
        std::process::exit(2);
    }
    let daemon = Daemon::start(&binary, &args, 0, "signal");
    let coop_daemon = Daemon::start(&binary, &args, args.coop_grace_us, "coop");
    coop_daemon.pause(true);
    let mut raw_wake = Vec::new();
    let mut raw_signal = Vec::new();
    let mut raw_local = Vec::new();
    let mut wake = Vec::new();
    let mut preempt = Vec::new();
    let mut realloc = Vec::new();
    let mut coop_preempt = Vec::new();
    let mut coop_realloc = Vec::new();
    let coop = Some(args.coop_yield_steps);
    for rep in 0..args.reps {
        eprintln!("repetition {}/{}", rep + 1, args.reps);
        // The raw peers share iokerneld's CPU with the daemon's busy loop; measure them with
        // the daemons stopped so neither disturbs the other.
        daemon.pause(true);
        raw_wake.push(raw_eventfd_wake(
            args.samples,
            args.idle_us,
            args.iokernel_cpu,
            args.app_cpu,
        ));
        raw_signal.push(raw_signal_delivery(
            args.samples,
            args.iokernel_cpu,
            args.app_cpu,
        ));
        raw_local.push(raw_same_cpu_handover(args.samples, args.app_cpu));
        daemon.pause(false);
        // Main thread back off iokerneld's CPU.
        pin(args.app_cpu);
        wake.push(iokerneld_wake(&daemon, args.samples, args.idle_us));
        preempt.push(iokerneld_preempt(&daemon, args.samples, None));
        realloc.push(reallocation_rate(
            &daemon,
            args.seconds,
            args.realloc_sleep_us,
            args.app_cpu,
            None,
        ));
        daemon.pause(true);
        coop_daemon.pause(false);
        coop_preempt.push(iokerneld_preempt(&coop_daemon, args.samples, coop));
        coop_realloc.push(reallocation_rate(
            &coop_daemon,
            args.seconds,
            args.realloc_sleep_us,
            args.app_cpu,
            coop,
        ));
        coop_daemon.pause(true);
        daemon.pause(false);
    }
    let raw_wake_m = median_f64(&raw_wake);
    let raw_signal_m = median_f64(&raw_signal);
    let raw_local_m = median_f64(&raw_local);
    let wake_m = median_f64(&wake);
    let total = |p: &[Preempt]| median_f64(&p.iter().map(|p| p.total).collect::<Vec<_>>());
    let preempt_m = total(&preempt);
    let coop_m = total(&coop_preempt);
    let phase = |f: fn(&Preempt) -> f64| median_f64(&preempt.iter().map(f).collect::<Vec<_>>());
    let (signal_m, park_m, lc_wake_m) = (phase(|p| p.signal), phase(|p| p.park), phase(|p| p.wake));
    let rate = |r: &[Realloc]| median_f64(&r.iter().map(|r| r.per_second).collect::<Vec<_>>());
    let lost = |r: &[Realloc]| {
        median_f64(
            &r.iter()
                .map(|r| r.lost_per_round_trip_ns)
                .collect::<Vec<_>>(),
        )
    };
    let (rate_m, coop_rate_m) = (rate(&realloc), rate(&coop_realloc));
    let (lost_m, coop_lost_m) = (lost(&realloc), lost(&coop_realloc));
    let round_trip_peer = raw_signal_m + 2.0 * raw_local_m;
    println!(
        "median of {} repetitions ({} samples each); handover = {}",
        args.reps, args.samples, args.handover
    );
    println!(
        "{:<48} {:>10} {:>10} {:>7}  peer",
        "measure", "corral", "peer", "ratio"
    );
    let row = |name: &str, value: f64, peer: f64, peer_name: &str| {
        println!(
            "{name:<48} {:>8.2}us {:>8.2}us {:>6.2}x  {peer_name}",
            value / 1e3,
            peer / 1e3,
            value / peer
        )
    };
    let raw = |name: &str, value: f64| println!("{name:<48} {:>8.2}us", value / 1e3);
    raw("raw: same-CPU hand-over (wake, then block)", raw_local_m);
    raw("raw: eventfd wake of an idle CPU", raw_wake_m);
    raw("raw: tgkill -> handler", raw_signal_m);
    row(
        "grant to an idle core: decision -> running",
        wake_m,
        raw_local_m,
        "same-CPU hand-over",
    );
    row(
        "  (against the cross-CPU wake)",
        wake_m,
        raw_wake_m,
        "eventfd wake of an idle CPU",
    );
    row(
        "preempt, signal: decision -> LC running",
        preempt_m,
        raw_signal_m + raw_local_m,
        "tgkill + same-CPU hand-over",
    );
    row(
        "preempt, cooperative: decision -> LC running",
        coop_m,
        raw_local_m,
        "same-CPU hand-over",
    );
    row(
        "core time lost per round trip, signal",
        lost_m,
        round_trip_peer,
        "tgkill + 2 same-CPU hand-overs",
    );
    row(
        "core time lost per round trip, cooperative",
        coop_lost_m,
        round_trip_peer,
        "tgkill + 2 same-CPU hand-overs",
    );
    println!("signal preemption, phase medians (they need not add up to the total's median):");
    raw("  signal: tgkill -> batch handler", signal_m);
    raw("  park: handler -> iokerneld sees the park", park_m);
    raw(
        "  iokerneld: park seen -> wake word rung",
        (preempt_m - signal_m - park_m - lc_wake_m).max(0.0),
    );
    raw("  wake: wake word rung -> LC running", lc_wake_m);
    raw(
        "  spin before park (LC, configured)",
        Config::default().spin_before_park.as_nanos() as f64,
    );
    println!(
        "{:<48} {:>8.0}/s",
        "reallocations per second, signal", rate_m
    );
    println!(
        "{:<48} {:>8.0}/s",
        "reallocations per second, cooperative", coop_rate_m
    );
    for (name, runs) in [("signal", &realloc), ("cooperative", &coop_realloc)] {
        for (i, r) in runs.iter().enumerate() {
            println!(
                "  {name} rep {i}: {:.0}/s, {} LC wake-ups, {} batch units, {:.2} us lost per \
                 round trip, preemptions {} signalled / {} ceded",
                r.per_second,
                r.lc_wakeups,
                r.batch_progress,
                r.lost_per_round_trip_ns / 1e3,
                r.signalled,
                r.cooperative
            );
        }
    }
    for (i, p) in coop_preempt.iter().enumerate() {
        println!(
            "  cooperative preempt rep {i}: preemptions {} signalled / {} ceded",
            p.signalled, p.cooperative
        );
    }
    if args.json {
        let json = serde_json::json!({
            "reps": args.reps,
            "samples": args.samples,
            "handover": args.handover,
            "coop_grace_us": args.coop_grace_us,
            "wake_ns": wake,
            "raw_eventfd_wake_ns": raw_wake,
            "raw_same_cpu_handover_ns": raw_local,
            "raw_signal_ns": raw_signal,
            "preempt_ns": preempt.iter().map(|p| p.total).collect::<Vec<_>>(),
            "preempt_signal_ns": preempt.iter().map(|p| p.signal).collect::<Vec<_>>(),
            "preempt_park_ns": preempt.iter().map(|p| p.park).collect::<Vec<_>>(),
            "preempt_wake_ns": preempt.iter().map(|p| p.wake).collect::<Vec<_>>(),
            "coop_preempt_ns": coop_preempt.iter().map(|p| p.total).collect::<Vec<_>>(),
            "reallocations_per_second": realloc.iter().map(|r| r.per_second).collect::<Vec<_>>(),
            "coop_reallocations_per_second":
                coop_realloc.iter().map(|r| r.per_second).collect::<Vec<_>>(),
            "lost_per_round_trip_ns":
                realloc.iter().map(|r| r.lost_per_round_trip_ns).collect::<Vec<_>>(),
            "coop_lost_per_round_trip_ns":
                coop_realloc.iter().map(|r| r.lost_per_round_trip_ns).collect::<Vec<_>>(),
        });
        println!("{json}");
    }
}
