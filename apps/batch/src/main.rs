//! `batch`: a CPU-bound batch job that reports its throughput over time, for co-location
//! experiments (a latency-critical server and this job sharing cores).
//!
//! ```text
//! batch --runtime corral --duration 10                    # Corral runtime (CORRAL_IOKERNELD honoured)
//! batch --runtime corral --iokerneld /run/corral/iokerneld.sock --kthreads 2
//! batch --runtime linux --cpu 0,1 --duration 10 --json    # Linux threads at SCHED_IDLE
//! ```

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use serde::Serialize;

use corral_app_batch::{Shared, UnitSize, worker_loop};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum RuntimeKind {
    /// uthreads on the Corral runtime; registers with iokerneld (no guarantee) when
    /// CORRAL_IOKERNELD or --iokerneld names its socket.
    Corral,
    /// Linux threads at SCHED_IDLE.
    Linux,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Preemption {
    Cooperative,
    IdleClass,
}

#[derive(Parser, Debug)]
#[command(
    about = "CPU-bound batch job (Monte Carlo option pricing) reporting work units per second"
)]
struct Args {
    #[arg(long, value_enum, default_value_t = RuntimeKind::Corral)]
    runtime: RuntimeKind,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Milliseconds between throughput reports.
    #[arg(long, default_value_t = 100)]
    report_ms: u64,
    /// Print JSON lines instead of text.
    #[arg(long)]
    json: bool,
    /// Workers (uthreads or Linux threads) [default: 4 per kthread for corral, one per CPU
    /// for linux].
    #[arg(long)]
    workers: Option<usize>,
    /// Kthreads of the Corral runtime [default: one per CPU this process may use].
    #[arg(long)]
    kthreads: Option<usize>,
    /// iokerneld's control socket: register with it (no guaranteed cores).
    #[arg(long)]
    iokerneld: Option<PathBuf>,
    /// How iokerneld takes a core back: `cooperative` (it asks, and each worker's preemption
    /// point gives the core up) or `idle-class` (the kthreads run in Linux's idle class, and
    /// iokerneld wakes the taker on top of them, with no request).
    #[arg(long, value_enum, default_value_t = Preemption::Cooperative)]
    preemption: Preemption,
    /// CPUs to pin to, comma-separated (Linux threads round-robin, or the runtime's kthreads
    /// when it runs without iokerneld).
    #[arg(long, value_delimiter = ',')]
    cpu: Vec<usize>,
    /// Monte Carlo paths per work unit. The default makes a unit take a few microseconds: under
    /// iokerneld each worker passes a preemption point after every unit, so it gives its core
    /// back within a unit of being asked, without the preemption signal.
    #[arg(long, default_value_t = 8)]
    paths: usize,
    /// Averaging dates per path.
    #[arg(long, default_value_t = 32)]
    steps: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Report {
        elapsed_s: f64,
        units: u64,
        units_per_s: f64,
    },
    Total {
        runtime: RuntimeKind,
        workers: usize,
        total_units: u64,
        elapsed_s: f64,
        mean_units_per_s: f64,
        checksum: f64,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("batch: {e}");
            ExitCode::from(2)
        }
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn run(args: &Args) -> io::Result<()> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration < 1e7) {
        return Err(invalid(format!(
            "invalid duration = {}: expected seconds in (0, 1e7)",
            args.duration
        )));
    }
    if args.report_ms == 0 {
        return Err(invalid("invalid report-ms = 0: expected at least 1".into()));
    }
    if args.paths == 0 || args.steps == 0 {
        return Err(invalid(format!(
            "invalid paths = {} / steps = {}: expected at least 1 each",
            args.paths, args.steps
        )));
    }
    if args.workers == Some(0) {
        return Err(invalid("invalid workers = 0: expected at least 1".into()));
    }
    if args.runtime == RuntimeKind::Linux && (args.kthreads.is_some() || args.iokerneld.is_some()) {
        return Err(invalid(
            "invalid --kthreads/--iokerneld with --runtime linux: they configure the Corral runtime"
                .into(),
        ));
    }
    let size = UnitSize {
        paths: args.paths,
        steps: args.steps,
    };
    match args.runtime {
        RuntimeKind::Corral => run_corral(args, size),
        RuntimeKind::Linux => run_linux(args, size),
    }
}

fn run_corral(args: &Args, size: UnitSize) -> io::Result<()> {
    let mut config = corral::Config::from_env();
    if let Some(socket) = &args.iokerneld {
        let mode = match args.preemption {
            Preemption::Cooperative => corral::PreemptionMode::Cooperative,
            Preemption::IdleClass => corral::PreemptionMode::IdleClass,
        };
        config =
            config.iokernel(corral::IokernelSettings::new(socket, "batch").preemption_mode(mode));
    }
    if let Some(k) = args.kthreads {
        config = config.kthreads(k);
    }
    if !args.cpu.is_empty() {
        config = config.cpus(args.cpu.clone());
    }
    let rt = corral::Runtime::new(config)?;
    let workers = args.workers.unwrap_or(4 * rt.config().kthreads);
    let shared = Arc::new(Shared::new(workers, size, args.seed));
    let reporter = start_reporter(args, Arc::clone(&shared));
    let pool = Arc::clone(&shared);
    let checksum = rt.block_on(move || {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let pool = Arc::clone(&pool);
                corral::spawn(move || worker_loop(w, &pool, corral::preemption_point))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join())
            .collect::<Result<Vec<f64>, _>>()
            .map(|prices| prices.iter().sum::<f64>())
    });
    let (total, elapsed) = reporter
        .join()
        .map_err(|_| io::Error::other("reporter thread panicked"))??;
    let checksum = checksum.map_err(|_| io::Error::other("a worker panicked"))?;
    print_total(args, workers, total, elapsed, checksum)
}

fn run_linux(args: &Args, size: UnitSize) -> io::Result<()> {
    let workers = args.workers.unwrap_or_else(|| {
        if args.cpu.is_empty() {
            thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            args.cpu.len()
        }
    });
    let shared = Arc::new(Shared::new(workers, size, args.seed));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let pool = Arc::clone(&shared);
            let cpu = (!args.cpu.is_empty()).then(|| args.cpu[w % args.cpu.len()]);
            thread::Builder::new()
                .name(format!("batch-{w}"))
                .spawn(move || -> io::Result<f64> {
                    let setup = set_idle_policy()
                        .and_then(|()| cpu.map_or(Ok(()), corral_affinity::pin_current_thread));
                    if let Err(e) = setup {
                        // Nothing runs at normal priority by mistake: stop everyone.
                        pool.stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                    Ok(worker_loop(w, &pool, || {}))
                })
        })
        .collect::<io::Result<_>>()?;
    let reporter = start_reporter(args, Arc::clone(&shared));
    let mut checksum = 0.0;
    let mut failure = None;
    for h in handles {
        match h.join() {
            Ok(Ok(c)) => checksum += c,
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(_) => failure = failure.or(Some(io::Error::other("a worker panicked"))),
        }
    }
    if let Some(e) = failure {
        // Let the reporter finish its current sleep and exit.
        let _ = reporter.join();
        return Err(e);
    }
    let (total, elapsed) = reporter
        .join()
        .map_err(|_| io::Error::other("reporter thread panicked"))??;
    print_total(args, workers, total, elapsed, checksum)
}

/// Puts the calling thread in the SCHED_IDLE class: it runs only when nothing else wants the
/// CPU, which is how Linux is given the batch job in the co-location comparison.
fn set_idle_policy() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; param is a valid sched_param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc != 0 {
        return Err(io::Error::other(format!(
            "sched_setscheduler(SCHED_IDLE): {}",
            io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Starts the thread that prints throughput every `report_ms` and stops the workers when the
/// duration is up; it returns the units done and the time elapsed at that moment. It is a plain
/// Linux thread outside the measured runtime, so reports keep coming (showing 0 units/s) even
/// when the batch job gets no CPU at all.
fn start_reporter(args: &Args, shared: Arc<Shared>) -> thread::JoinHandle<io::Result<(u64, f64)>> {
    let duration = Duration::from_secs_f64(args.duration);
    let every = Duration::from_millis(args.report_ms);
    let json = args.json;
    thread::spawn(move || {
        let start = Instant::now();
        let mut out = io::stdout().lock();
        let (mut prev_units, mut prev_t) = (0u64, Duration::ZERO);
        let mut k = 1u32;
        loop {
            // Absolute deadlines, so that reports do not drift with the time spent printing.
            let next = (every * k).min(duration);
            thread::sleep((start + next).saturating_duration_since(Instant::now()));
            let t = start.elapsed();
            let units = shared.total();
            if t >= duration || shared.stop.load(Ordering::Relaxed) {
                shared.stop.store(true, Ordering::Relaxed);
                return Ok((units, t.as_secs_f64()));
            }
            let dt = (t - prev_t).as_secs_f64();
            let line = Line::Report {
                elapsed_s: t.as_secs_f64(),
                units,
                units_per_s: if dt > 0.0 {
                    (units - prev_units) as f64 / dt
                } else {
                    0.0
                },
            };
            write_line(&mut out, &line, json)?;
            (prev_units, prev_t) = (units, t);
            k += 1;
        }
    })
}

fn write_line(out: &mut impl Write, line: &Line, json: bool) -> io::Result<()> {
    if json {
        serde_json::to_writer(&mut *out, line)?;
        writeln!(out)?;
    } else {
        match line {
            Line::Report {
                elapsed_s,
                units,
                units_per_s,
            } => writeln!(
                out,
                "elapsed_s={elapsed_s:.3} units={units} units_per_s={units_per_s:.0}"
            )?,
            Line::Total {
                runtime,
                workers,
                total_units,
                elapsed_s,
                mean_units_per_s,
                checksum,
            } => writeln!(
                out,
                "total runtime={} workers={workers} total_units={total_units} elapsed_s={elapsed_s:.3} mean_units_per_s={mean_units_per_s:.0} checksum={checksum:.6e}",
                match runtime {
                    RuntimeKind::Corral => "corral",
                    RuntimeKind::Linux => "linux",
                }
            )?,
        }
    }
    out.flush()
}

fn print_total(
    args: &Args,
    workers: usize,
    total: u64,
    elapsed: f64,
    checksum: f64,
) -> io::Result<()> {
    let line = Line::Total {
        runtime: args.runtime,
        workers,
        total_units: total,
        elapsed_s: elapsed,
        mean_units_per_s: if elapsed > 0.0 {
            total as f64 / elapsed
        } else {
            0.0
        },
        checksum,
    };
    write_line(&mut io::stdout().lock(), &line, args.json)
}
