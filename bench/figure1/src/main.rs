//! Corral's measured point of the Shenango paper's Figure 1: the CPU efficiency (cycles of
//! application work over cycles allocated to the application) of Corral running "a uthread per
//! request" locally, at each offered load, on this machine's managed cores.
//!
//! The bench starts its own iokerneld and is itself the Corral runtime: registered
//! latency-critical (guaranteed 1 core), one kthread per managed core, none spinning, so that
//! an idle kthread parks and the core time it holds is what iokerneld grants it. Per load a
//! generator uthread sleeps on the runtime's timers until each Poisson arrival (when every
//! kthread has parked, the runtime hands its earliest timer to iokerneld, which grants a core
//! at that time) and spawns a uthread per request, which spins on the clock for an exponential
//! service time. Efficiency = service time spun / CPU time of the runtime's threads over the
//! point; latency = completion - scheduled arrival.

mod cputime;
mod daemon;
mod point;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use corral::{Config, IokernelSettings, Runtime};
use corral_iokernel::cpus::{format_cpu_list, parse_cpu_list};

use crate::daemon::Daemon;
use crate::point::{Arrivals, Outcome};

/// The name the runtime registers under, and finds itself by in iokerneld's statistics.
const RUNTIME_NAME: &str = "figure1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Shield {
    On,
    Off,
}

impl Shield {
    fn flag(self) -> &'static str {
        match self {
            Shield::On => "on",
            Shield::Off => "off",
        }
    }
}

/// Measures Corral's CPU efficiency and latency at each offered load of the paper's Figure 1
/// workload (Poisson arrivals, exponential service, a uthread per request), under an iokerneld
/// of its own. Prints one row per load and writes them as CSV or JSON on request.
#[derive(Parser, Debug)]
#[command(name = "corral-bench-figure1")]
struct Args {
    /// Offered loads, comma-separated, each a fraction of the managed cores' capacity (above 0,
    /// at most 1): requests arrive at load x cores / mean service time per second.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"
    )]
    loads: Vec<f64>,

    /// Seconds of arrivals measured per load.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,

    /// Seconds of arrivals run and discarded before each load's measurement.
    #[arg(long, default_value_t = 0.2)]
    warmup_seconds: f64,

    /// Mean of the exponential service time, microseconds.
    #[arg(long, default_value_t = 10.0)]
    service_mean_us: f64,

    /// A request that starts more than this many microseconds after its arrival time counts
    /// as a late arrival (a sign of overload).
    #[arg(long, default_value_t = 1000.0)]
    late_us: f64,

    /// Seed of the arrival and service-time generator (each load and warm-up gets its own
    /// stream from it).
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// CPU iokerneld runs on.
    #[arg(long, default_value_t = 0)]
    iokernel_cpu: usize,

    /// The CPUs iokerneld manages, as a list such as `1` or `1-3,5`; the runtime gets one
    /// kthread per managed CPU.
    #[arg(long, default_value = "1")]
    app_cpus: String,

    /// Passed to iokerneld's --shield: keep iokerneld's CPU to itself. The shielded
    /// measurement is the one to quote, as the demo runs shielded; shielding needs root.
    #[arg(long, value_enum, default_value_t = Shield::Off)]
    shield: Shield,

    /// The iokerneld binary [default: `iokerneld` next to this program].
    #[arg(long)]
    iokerneld: Option<PathBuf>,

    /// Write one CSV row per load here.
    #[arg(long)]
    csv: Option<PathBuf>,

    /// Write the settings and one object per load here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Settings checked and converted.
struct Plan {
    loads: Vec<f64>,
    duration_ns: u64,
    warmup_ns: u64,
    service_mean_ns: f64,
    late_ns: u64,
    managed: Vec<usize>,
    iokerneld: PathBuf,
}

/// How the bench failed: bad input (exit 2) or a failed measurement (exit 1).
enum Failure {
    Usage(String),
    Run(String),
}

fn seconds_to_ns(seconds: f64, flag: &str, zero_allowed: bool) -> Result<u64, Failure> {
    let ok = seconds.is_finite()
        && seconds <= 3600.0
        && (seconds > 0.0 || (zero_allowed && seconds == 0.0));
    if !ok {
        let least = if zero_allowed {
            "at least 0"
        } else {
            "above 0"
        };
        return Err(Failure::Usage(format!(
            "{flag} {seconds}: expected seconds, {least} and at most 3600"
        )));
    }
    Ok((seconds * 1e9).round() as u64)
}

fn plan(args: &Args) -> Result<Plan, Failure> {
    if args.loads.is_empty() {
        return Err(Failure::Usage("--loads: give at least one load".into()));
    }
    if let Some(bad) = args
        .loads
        .iter()
        .find(|&&load| !(load > 0.0 && load <= 1.0))
    {
        return Err(Failure::Usage(format!(
            "--loads {bad}: each load is a fraction of the managed cores' capacity, above 0 and \
             at most 1 (beyond it the queue grows for as long as the point runs)"
        )));
    }
    let duration_ns = seconds_to_ns(args.seconds, "--seconds", false)?;
    let warmup_ns = seconds_to_ns(args.warmup_seconds, "--warmup-seconds", true)?;
    if !(args.service_mean_us.is_finite()
        && args.service_mean_us >= 0.1
        && args.service_mean_us <= 1e6)
    {
        return Err(Failure::Usage(format!(
            "--service-mean-us {}: expected microseconds from 0.1 to 1,000,000",
            args.service_mean_us
        )));
    }
    if !(args.late_us.is_finite() && args.late_us > 0.0) {
        return Err(Failure::Usage(format!(
            "--late-us {}: expected a positive number of microseconds",
            args.late_us
        )));
    }
    let mut managed = parse_cpu_list(&args.app_cpus)
        .map_err(|e| Failure::Usage(format!("--app-cpus {:?}: {e}", args.app_cpus)))?;
    managed.sort_unstable();
    managed.dedup();
    if managed.is_empty() {
        return Err(Failure::Usage("--app-cpus: give at least one CPU".into()));
    }
    if managed.contains(&args.iokernel_cpu) {
        return Err(Failure::Usage(format!(
            "--iokernel-cpu {} is also in --app-cpus {}: iokerneld's CPU is not managed",
            args.iokernel_cpu, args.app_cpus
        )));
    }
    let allowed = corral::allowed_cpus();
    if !allowed.contains(&args.iokernel_cpu) {
        return Err(Failure::Usage(format!(
            "--iokernel-cpu {}: not a CPU this process may run on ({})",
            args.iokernel_cpu,
            format_cpu_list(&allowed)
        )));
    }
    if let Some(cpu) = managed.iter().find(|cpu| !allowed.contains(cpu)) {
        return Err(Failure::Usage(format!(
            "--app-cpus {}: CPU {cpu} is not one this process may run on ({})",
            args.app_cpus,
            format_cpu_list(&allowed)
        )));
    }
    let iokerneld = match &args.iokerneld {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| Failure::Run(format!("cannot find this program's path: {e}")))?
            .with_file_name("iokerneld"),
    };
    if !iokerneld.is_file() {
        return Err(Failure::Usage(format!(
            "--iokerneld: no iokerneld at {} (build it with `cargo build --release -p \
             corral-iokerneld`, or name it with --iokerneld)",
            iokerneld.display()
        )));
    }
    Ok(Plan {
        loads: args.loads.clone(),
        duration_ns,
        warmup_ns,
        service_mean_ns: args.service_mean_us * 1e3,
        late_ns: (args.late_us * 1e3).round() as u64,
        managed,
        iokerneld,
    })
}

/// One load's measurement.
struct Point {
    load: f64,
    cores: usize,
    requests: u64,
    completed: u64,
    efficiency: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    core_s: f64,
    service_s: f64,
    wall_s: f64,
    grants_per_s: f64,
    parks_per_s: f64,
    late: u64,
}

/// One column of the output: its name in the CSV and JSON, and its heading, width and
/// decimals in the printed table (`None`: not printed).
struct Column {
    name: &'static str,
    table: Option<(&'static str, usize, usize)>,
    value: fn(&Point) -> f64,
}

const fn column(
    name: &'static str,
    table: Option<(&'static str, usize, usize)>,
    value: fn(&Point) -> f64,
) -> Column {
    Column { name, table, value }
}

const COLUMNS: &[Column] = &[
    column("load", Some(("load", 5, 2)), |p| p.load),
    column("cores", Some(("cores", 5, 0)), |p| p.cores as f64),
    column("offered_cores", None, |p| p.load * p.cores as f64),
    column("requests", Some(("requests", 8, 0)), |p| p.requests as f64),
    column("completed", None, |p| p.completed as f64),
    column("efficiency", Some(("efficiency", 10, 3)), |p| p.efficiency),
    column("p50_us", Some(("p50 us", 9, 1)), |p| p.p50_us),
    column("p99_us", Some(("p99 us", 9, 1)), |p| p.p99_us),
    column("p999_us", Some(("p99.9 us", 9, 1)), |p| p.p999_us),
    column("core_seconds_held", Some(("core s", 8, 4)), |p| p.core_s),
    column("service_seconds", Some(("work s", 8, 4)), |p| p.service_s),
    column("wall_seconds", Some(("wall s", 7, 3)), |p| p.wall_s),
    column("grants_per_s", Some(("grants/s", 8, 0)), |p| p.grants_per_s),
    column("parks_per_s", Some(("parks/s", 8, 0)), |p| p.parks_per_s),
    column("late_arrivals", Some(("late", 7, 0)), |p| p.late as f64),
];

fn csv(points: &[Point]) -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    let mut out = names.join(",") + "\n";
    for p in points {
        let values: Vec<String> = COLUMNS.iter().map(|c| (c.value)(p).to_string()).collect();
        out += &(values.join(",") + "\n");
    }
    out
}

/// A whole number (a count) as a JSON integer, anything else as a float.
fn json_number(value: f64) -> serde_json::Value {
    const EXACT: f64 = (1u64 << 53) as f64;
    if value.fract() == 0.0 && value.abs() < EXACT {
        serde_json::json!(value as i64)
    } else {
        serde_json::json!(value)
    }
}

fn json(args: &Args, plan: &Plan, points: &[Point]) -> serde_json::Value {
    let point = |p: &Point| -> serde_json::Map<String, serde_json::Value> {
        COLUMNS
            .iter()
            .map(|c| (c.name.to_owned(), json_number((c.value)(p))))
            .collect()
    };
    serde_json::json!({
        "iokernel_cpu": args.iokernel_cpu,
        "app_cpus": format_cpu_list(&plan.managed),
        "shield": args.shield.flag(),
        "seconds": args.seconds,
        "warmup_seconds": args.warmup_seconds,
        "service_mean_us": args.service_mean_us,
        "late_us": args.late_us,
        "seed": args.seed,
        "points": points.iter().map(point).collect::<Vec<_>>(),
    })
}

/// The printed table's heading (`None`) or a point's row.
fn table_line(point: Option<&Point>) -> String {
    let cells: Vec<String> = COLUMNS
        .iter()
        .filter_map(|c| {
            let (heading, width, decimals) = c.table?;
            Some(match point {
                None => format!("{heading:>width$}"),
                Some(p) => format!("{:>width$.decimals$}", (c.value)(p)),
            })
        })
        .collect();
    cells.join(" ")
}

/// Every request ran exactly once, or the point is refused.
fn check_once(outcome: &Outcome, what: &str) -> Result<(), Failure> {
    if outcome.completed_once == outcome.spawned
        && outcome.never_completed == 0
        && outcome.completed_twice_or_more == 0
    {
        return Ok(());
    }
    Err(Failure::Run(format!(
        "{what}: {} requests spawned, {} completed once, {} more than once, {} never",
        outcome.spawned,
        outcome.completed_once,
        outcome.completed_twice_or_more,
        outcome.never_completed
    )))
}

fn measure(
    runtime: &Runtime,
    daemon: &Daemon,
    plan: &Plan,
    seed: u64,
    index: usize,
) -> Result<Point, Failure> {
    let load = plan.loads[index];
    let cores = plan.managed.len();
    let arrivals = |duration_ns, stream: u64| Arrivals {
        rate_per_s: load * cores as f64 * 1e9 / plan.service_mean_ns,
        service_mean_ns: plan.service_mean_ns,
        duration_ns,
        late_ns: plan.late_ns,
        seed: seed.wrapping_add(stream),
    };
    let run = |spec: Arrivals| {
        runtime
            .block_on(move || point::run(spec))
            .map_err(Failure::Run)
    };
    let stream = 2 * index as u64;
    if plan.warmup_ns > 0 {
        let warmup = run(arrivals(plan.warmup_ns, stream))?;
        check_once(&warmup, &format!("load {load}, warm-up"))?;
    }
    let counters = || daemon.counters(RUNTIME_NAME).map_err(Failure::Run);
    let cpu = || {
        cputime::runtime_threads_ns()
            .map_err(|e| Failure::Run(format!("reading the threads' CPU time: {e}")))
    };
    let counters_before = counters()?;
    let cpu_before = cpu()?;
    let started = Instant::now();
    let outcome = run(arrivals(plan.duration_ns, stream + 1))?;
    let wall_s = started.elapsed().as_secs_f64();
    let cpu_ns = cpu()?.saturating_sub(cpu_before);
    let counters_after = counters()?;
    check_once(&outcome, &format!("load {load}"))?;
    if outcome.latency.is_empty() {
        return Err(Failure::Run(format!(
            "load {load}: no request arrived in {} s; measure longer",
            plan.duration_ns as f64 / 1e9
        )));
    }
    if cpu_ns == 0 {
        return Err(Failure::Run(format!(
            "load {load}: the runtime's threads ran no CPU time"
        )));
    }
    let efficiency = outcome.service_ns as f64 / cpu_ns as f64;
    if efficiency > 1.0 {
        return Err(Failure::Run(format!(
            "load {load}: {} ns of service in {cpu_ns} ns of the runtime's CPU time: the \
             requests' clock ran while their kthread was off its CPU, so the CPU time does \
             not measure the core time held",
            outcome.service_ns
        )));
    }
    let quantile_us = |q: f64| outcome.latency.value_at_quantile(q) as f64 / 1e3;
    let per_second = |before: u64, after: u64| after.saturating_sub(before) as f64 / wall_s;
    Ok(Point {
        load,
        cores,
        requests: outcome.spawned,
        completed: outcome.completed_once,
        efficiency,
        p50_us: quantile_us(0.5),
        p99_us: quantile_us(0.99),
        p999_us: quantile_us(0.999),
        core_s: cpu_ns as f64 / 1e9,
        service_s: outcome.service_ns as f64 / 1e9,
        wall_s,
        grants_per_s: per_second(counters_before.grants, counters_after.grants),
        parks_per_s: per_second(counters_before.parks, counters_after.parks),
        late: outcome.late,
    })
}

fn write_file(path: &PathBuf, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text).map_err(|e| Failure::Run(format!("{}: {e}", path.display())))
}

fn run(args: &Args) -> Result<(), Failure> {
    let plan = plan(args)?;
    let managed = format_cpu_list(&plan.managed);
    let daemon = Daemon::start(
        &plan.iokerneld,
        args.iokernel_cpu,
        &managed,
        args.shield.flag(),
    )
    .map_err(Failure::Run)?;
    let settings = IokernelSettings::new(&daemon.socket, RUNTIME_NAME)
        .guaranteed_cores(1)
        .spinning_kthreads(0);
    let runtime = Runtime::new(
        Config::default()
            .kthreads(plan.managed.len())
            .iokernel(settings),
    )
    .map_err(|e| Failure::Run(format!("cannot register with iokerneld: {e}")))?;
    println!(
        "figure1: iokerneld on CPU {} (shield {}), managing {managed}; runtime {RUNTIME_NAME:?}: \
         latency-critical (guaranteed 1), {} kthread(s), none spinning; exp service mean {} us, \
         {} s per load after {} s of warm-up, seed {}",
        args.iokernel_cpu,
        args.shield.flag(),
        plan.managed.len(),
        args.service_mean_us,
        args.seconds,
        args.warmup_seconds,
        args.seed
    );
    println!("{}", table_line(None));
    let mut points = Vec::with_capacity(plan.loads.len());
    for index in 0..plan.loads.len() {
        let point = measure(&runtime, &daemon, &plan, args.seed, index)?;
        println!("{}", table_line(Some(&point)));
        points.push(point);
    }
    drop(runtime);
    if let Some(path) = &args.csv {
        write_file(path, &csv(&points))?;
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&json(args, &plan, &points))
            .map_err(|e| Failure::Run(format!("JSON: {e}")))?;
        write_file(path, &text)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(message)) => {
            eprintln!("corral-bench-figure1: error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Run(message)) => {
            eprintln!("corral-bench-figure1: {message}");
            ExitCode::FAILURE
        }
    }
}
