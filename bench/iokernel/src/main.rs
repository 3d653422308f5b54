//! Core-allocation benchmarks, each against the raw Linux mechanism it is built from, measured
//! in the same run:
//!
//! * wake-up: from iokerneld's decision to grant a core to the uthread running on it, against
//!   an eventfd write waking a thread blocked on another CPU;
//! * preemption: from iokerneld's decision to take a busy batch runtime's core to the
//!   latency-critical uthread running there, against a raw `tgkill`-to-handler delivery plus
//!   the raw eventfd wake;
//! * reallocation rate: core hand-overs per second between a batch runtime and a
//!   latency-critical runtime that keeps parking, sustained on one managed core.
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
    /// The iokerneld binary; default: next to this program.
    #[arg(long)]
    iokerneld: Option<PathBuf>,
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
    fn start(binary: &PathBuf, args: &Args) -> Daemon {
        let dir = std::env::temp_dir().join(format!("corral-bench-{}", std::process::id()));
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
        Runtime::new(
            Config::default()
                .kthreads(1)
                .iokernel(IokernelSettings::new(&self.socket, name)),
        )
        .expect("register with iokerneld")
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
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// Starts CPU-bound uthreads on `batch` until `stop`; returns their shared progress counter.
fn start_batch(batch: &Runtime, stop: &Arc<AtomicBool>) -> Arc<AtomicU64> {
    let progress = Arc::new(AtomicU64::new(0));
    for _ in 0..2 {
        let (stop, progress) = (stop.clone(), progress.clone());
        batch.spawn(move || {
            let mut x = 1.0f64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..200 {
                    x = x * 1.000_000_1 + 1e-9;
                }
                progress.fetch_add(1, Ordering::Relaxed);
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
    /// iokerneld writes the latency-critical kthread's eventfd -> its uthread running.
    wake: f64,
}

/// Median ns from iokerneld's decision to preempt the busy batch runtime to the
/// latency-critical uthread running on the core it took, with the phases of that hand-over.
fn iokerneld_preempt(daemon: &Daemon, samples: usize) -> Preempt {
    let batch = daemon.runtime("batch-bench");
    let lc = daemon.runtime("preempt-bench");
    let stop = Arc::new(AtomicBool::new(false));
    let _progress = start_batch(&batch, &stop);
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
    Preempt {
        total: median_u64(&mut total),
        signal: ns("signal_p50_ns"),
        park: ns("park_p50_ns"),
        wake: median_u64(&mut wake),
    }
}

struct Realloc {
    per_second: f64,
    lc_wakeups: u64,
    batch_progress: u64,
}

/// Core reallocations per second on the managed core between a busy batch runtime and a
/// latency-critical runtime that parks as soon as it has run and sleeps briefly.
fn reallocation_rate(daemon: &Daemon, seconds: f64, sleep_us: u64, app_cpu: usize) -> Realloc {
    let batch = daemon.runtime("batch-realloc");
    let lc = daemon.runtime("lc-realloc");
    let stop = Arc::new(AtomicBool::new(false));
    let progress = start_batch(&batch, &stop);
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
    stop.store(true, Ordering::Relaxed);
    Realloc {
        per_second: (after - before) as f64 / elapsed,
        lc_wakeups,
        batch_progress,
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
    let daemon = Daemon::start(&binary, &args);
    // This process's own threads (the raw peers) stay off iokerneld's CPU except as wakers.
    let mut raw_wake = Vec::new();
    let mut raw_signal = Vec::new();
    let mut wake = Vec::new();
    let mut preempt = Vec::new();
    let mut realloc = Vec::new();
    for rep in 0..args.reps {
        eprintln!("repetition {}/{}", rep + 1, args.reps);
        // The raw peers share iokerneld's CPU with the daemon's busy loop; measure them with
        // the daemon stopped so neither disturbs the other.
        // SAFETY: pausing and resuming our own child process.
        unsafe { libc::kill(daemon.child.id() as i32, libc::SIGSTOP) };
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
        // SAFETY: as above.
        unsafe { libc::kill(daemon.child.id() as i32, libc::SIGCONT) };
        // Main thread back off iokerneld's CPU.
        pin(args.app_cpu);
        wake.push(iokerneld_wake(&daemon, args.samples, args.idle_us));
        preempt.push(iokerneld_preempt(&daemon, args.samples));
        realloc.push(reallocation_rate(
            &daemon,
            args.seconds,
            args.realloc_sleep_us,
            args.app_cpu,
        ));
    }
    let raw_wake_m = median_f64(&raw_wake);
    let raw_signal_m = median_f64(&raw_signal);
    let wake_m = median_f64(&wake);
    let preempt_m = median_f64(&preempt.iter().map(|p| p.total).collect::<Vec<_>>());
    let phase = |f: fn(&Preempt) -> f64| median_f64(&preempt.iter().map(f).collect::<Vec<_>>());
    let (signal_m, park_m, lc_wake_m) = (phase(|p| p.signal), phase(|p| p.park), phase(|p| p.wake));
    let rate_m = median_f64(&realloc.iter().map(|r| r.per_second).collect::<Vec<_>>());
    let preempt_peer = raw_signal_m + raw_wake_m;
    println!(
        "median of {} repetitions ({} samples each)",
        args.reps, args.samples
    );
    println!(
        "{:<44} {:>12} {:>12} {:>8}",
        "measure", "corral", "peer", "ratio"
    );
    println!(
        "{:<44} {:>10.2}us {:>10.2}us {:>7.2}x",
        "wake: decision -> uthread running",
        wake_m / 1e3,
        raw_wake_m / 1e3,
        wake_m / raw_wake_m
    );
    println!(
        "{:<44} {:>10.2}us {:>10.2}us {:>7.2}x",
        "preempt: decision -> LC uthread running",
        preempt_m / 1e3,
        preempt_peer / 1e3,
        preempt_m / preempt_peer
    );
    println!(
        "{:<44} {:>10.2}us",
        "  peer part: raw tgkill -> handler",
        raw_signal_m / 1e3
    );
    println!("preemption hand-over, phase medians (they need not add up to the total's median):");
    for (name, value, peer) in [
        (
            "  signal: tgkill -> batch handler",
            signal_m,
            Some(raw_signal_m),
        ),
        ("  park: handler -> iokerneld sees the park", park_m, None),
        (
            "  iokerneld: park seen -> eventfd written",
            (preempt_m - signal_m - park_m - lc_wake_m).max(0.0),
            None,
        ),
        (
            "  wake: eventfd written -> LC running",
            lc_wake_m,
            Some(raw_wake_m),
        ),
    ] {
        match peer {
            Some(peer) => println!(
                "{name:<44} {:>10.2}us {:>10.2}us {:>7.2}x",
                value / 1e3,
                peer / 1e3,
                value / peer
            ),
            None => println!("{name:<44} {:>10.2}us", value / 1e3),
        }
    }
    println!(
        "{:<44} {:>10.2}us",
        "  spin before park (LC, configured)",
        Config::default().spin_before_park.as_nanos() as f64 / 1e3
    );
    println!(
        "{:<44} {:>10.0}/s",
        "reallocations per second (1 managed core)", rate_m
    );
    for (i, r) in realloc.iter().enumerate() {
        println!(
            "  rep {i}: {:.0}/s, {} LC wake-ups, {} batch work units",
            r.per_second, r.lc_wakeups, r.batch_progress
        );
    }
    if args.json {
        let json = serde_json::json!({
            "reps": args.reps,
            "samples": args.samples,
            "wake_ns": wake,
            "raw_eventfd_wake_ns": raw_wake,
            "preempt_ns": preempt.iter().map(|p| p.total).collect::<Vec<_>>(),
            "preempt_signal_ns": preempt.iter().map(|p| p.signal).collect::<Vec<_>>(),
            "preempt_park_ns": preempt.iter().map(|p| p.park).collect::<Vec<_>>(),
            "preempt_wake_ns": preempt.iter().map(|p| p.wake).collect::<Vec<_>>(),
            "raw_signal_ns": raw_signal,
            "reallocations_per_second": realloc.iter().map(|r| r.per_second).collect::<Vec<_>>(),
        });
        println!("{json}");
    }
}
