//! `corral-sim`: simulate a machine's managed cores under a core allocation policy and print
//! latency, core usage and efficiency per load point. Parses arguments and prints; the
//! simulation is the library's.

mod compare_cli;
mod compare_plot;
mod plot;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use corral_policy::{PolicySettings, RuntimeSpec, policies::KNOWN};
use corral_sim::bound::BoundParams;
use corral_sim::figure1::{self, Figure1Config};
use corral_sim::report::{self, Report};
use corral_sim::{
    CedeMode, Costs, LoadSchedule, RuntimeConfig, RuntimeKind, ServiceDist, SimConfig, run_point,
};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Cede {
    /// The victim is signalled and stops after the `preempt` cost.
    Signal,
    /// The victim parks by itself at its next scheduling point, after the `cede` cost.
    Cooperative,
}

fn policy_help() -> String {
    let names: Vec<String> = KNOWN
        .iter()
        .map(|entry| format!("{} ({})", entry.name, entry.summary))
        .collect();
    format!(
        "The allocation policy, by the name corral_policy::build knows: {}",
        names.join("; ")
    )
}

/// Simulates N managed cores shared by latency-critical and batch runtimes under a real Corral
/// core allocation policy, on a virtual clock with the costs of waking, preempting, parking
/// and handing over cores, and prints per load point: p50/p99/p99.9 latency, mean cores held
/// by the latency-critical runtimes, their CPU efficiency (service time run / core time held),
/// the batch runtimes' share of all core time, the idle share, and core reallocations per
/// second. Every cost used is printed with its source.
#[derive(Parser, Debug)]
#[command(name = "corral-sim", version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,

    /// Managed cores.
    #[arg(long, default_value_t = 16)]
    cores: u16,

    /// Cores 2i and 2i+1 are hyperthread siblings (the policy prefers a sibling of a core the
    /// runtime holds).
    #[arg(long)]
    hyperthreads: bool,

    /// Latency-critical runtimes; the offered load is split evenly among them.
    #[arg(long, default_value_t = 1)]
    lc: u16,

    /// Batch runtimes: always have runnable work, never park, want every core they can get.
    #[arg(long, default_value_t = 1)]
    batch: u16,

    /// Guaranteed cores of each latency-critical runtime (a runtime below its guarantee takes a
    /// core from a bursting one at once). Guarantees may not add up to more than --cores.
    #[arg(long, default_value_t = 1)]
    lc_guaranteed: u16,

    /// Maximum cores (and kthreads) of each latency-critical runtime [default: --cores].
    #[arg(long)]
    lc_max: Option<u16>,

    /// Guaranteed cores of each batch runtime.
    #[arg(long, default_value_t = 0)]
    batch_guaranteed: u16,

    /// Maximum cores (and kthreads) of each batch runtime [default: --cores].
    #[arg(long)]
    batch_max: Option<u16>,

    /// Offered loads, comma-separated, each a fraction of the cores' capacity (--cores / mean
    /// service time requests per second over all latency-critical runtimes); one simulation per
    /// load.
    #[arg(long, value_delimiter = ',', default_value = "0.1,0.3,0.5,0.7,0.9")]
    loads: Vec<f64>,

    /// A load schedule instead of --loads: TIME:LOAD steps, e.g. `0s:0.05,100ms:0.6,200ms:0.05`
    /// (the shape of the paper's Figure 5 burst); one simulation. Times need a unit (ns, us,
    /// ms, s).
    #[arg(long, conflicts_with = "loads")]
    schedule: Option<String>,

    /// Service time of each request: `const:10us`, `exp:10us`, `bimodal` (90% 5 us, 10% 55 us)
    /// or `bimodal:SHORT:LONG:LONG_FRACTION` (the demo's syntax).
    #[arg(long, default_value = "exp:10us")]
    service: ServiceDist,

    /// Simulated seconds of arrivals per load point (requests still in flight then are run to
    /// completion, up to --drain-seconds more).
    #[arg(long, default_value_t = 0.1)]
    seconds: f64,

    /// Longest simulated time past --seconds spent completing requests already arrived.
    #[arg(long, default_value_t = 1.0)]
    drain_seconds: f64,

    /// Seed of the one random generator (arrivals, service times, steering). A seed gives the
    /// same results every run.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    #[arg(long, default_value = "shenango", help = policy_help())]
    policy: String,

    /// One of the policy's own options, `KEY=VALUE`, as iokerneld's `--policy-option`; repeat
    /// for more. `arachne`: `scale_up_load_factor`, `scale_down_hysteresis`, `interval_us`;
    /// `shenango`: `burst_sharing` (`balanced` or `any-bursting`); `static`:
    /// `cores_per_runtime`.
    #[arg(long = "policy-option", value_name = "KEY=VALUE")]
    policy_options: Vec<String>,

    /// Cost set: `measured` (this machine class's corral-bench-iokernel figures of
    /// 2026-11-23, and the demo spin server's packet path measured by
    /// scripts/sim_validate.py), `paper` (the Shenango paper's, NSDI '19 §3-§5), `zero`, or the path of a
    /// `corral-bench-iokernel --json` output (its stdout, or just its JSON line), whose
    /// per-repetition medians give grant = wake_ns, preempt = preempt_signal_ns +
    /// preempt_park_ns, cede = coop_preempt_ns - wake_ns, park = 2 us spin + preempt_park_ns,
    /// handover = preempt_ns - preempt_signal_ns - preempt_park_ns - preempt_wake_ns (interval,
    /// dispatch, net_core and net_latency keep the measured set's values). The paper's set has
    /// no packet-path costs: its Figure 1 makes its requests locally.
    #[arg(long, default_value = "measured")]
    costs: String,

    /// Override one cost: NAME=NANOSECONDS, repeatable. Names: interval (between allocation
    /// passes), grant (wake decision to kthread running), preempt (signal decision to the
    /// victim's park seen), cede (the same, cooperative), park (a kthread with no work holds its
    /// core this long before its park is seen), handover (extra before running on a core
    /// another runtime used last), dispatch (core time per request not counted as useful),
    /// net_core (core time per request on its packets, once, not counted as useful),
    /// net_latency (time per request on the packet path off the runtime's cores, added to its
    /// latency).
    #[arg(long = "cost", value_name = "NAME=NS")]
    cost_overrides: Vec<String>,

    /// How a kthread asked for its core gives it up.
    #[arg(long, value_enum, default_value = "signal")]
    cede: Cede,

    /// Microseconds a runtime keeps a granted core before a runtime of equal standing may take
    /// it (the policy's share quantum; iokerneld's share_quantum_us).
    #[arg(long, default_value_t = 1000)]
    share_quantum_us: u64,

    /// Microseconds a preempted kthread may keep its core before the policy reports it overdue
    /// (it is then taken off at once); 0: never (iokerneld's preemption_timeout_us).
    #[arg(long, default_value_t = 10_000)]
    preemption_timeout_us: u64,

    /// Period of the cores-over-time series, in microseconds.
    #[arg(long, default_value_t = 1000)]
    sample_us: u64,

    /// Check the policy's contract and the simulator's bookkeeping after every event (slow).
    #[arg(long)]
    audit: bool,

    /// Write one CSV row per load point here.
    #[arg(long)]
    csv: Option<PathBuf>,

    /// Write the cores-over-time series here as CSV: one row per sample (every --sample-us) of
    /// every point: cores held by latency-critical and by batch runtimes, requests queued, and
    /// the p99.9 latency of the requests completed since the previous sample.
    #[arg(long)]
    series_csv: Option<PathBuf>,

    /// Write the costs, the configuration and every point with its series here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The paper's Figure 1, extended: per offered load (in cores' worth of work), the fewest
    /// cores an allocator re-deciding every 1 ms needs (M/M/n, queue empty at each interval's
    /// start, p99.9 within the limit) and the efficiency that bounds, beside Corral's simulated
    /// efficiency and p99.9 (Shenango policy, one latency-critical runtime guaranteed 1 core).
    /// Writes DIR/figure1.csv, DIR/figure1.png and DIR/figure1.svg and prints a table.
    Figure1(Figure1Args),
    /// The policies side by side at 16 and 64 cores: the paper's Figure 3 shape (latency-critical
    /// load rising beside batch runtimes) and Figure 5 shape (a load burst and back), with
    /// tables, CSV, JSON and plots in DIR.
    #[command(after_long_help = compare_cli::AFTER_HELP)]
    Compare(Box<compare_cli::CompareArgs>),
}

#[derive(clap::Args, Debug)]
struct Figure1Args {
    /// The highest offered load, in cores' worth of work.
    #[arg(long, default_value_t = 16)]
    max_cores: u16,

    /// Offered loads in cores' worth of work, comma-separated [default: 0.1, then every 0.25 up
    /// to --max-cores].
    #[arg(long, value_delimiter = ',')]
    loads: Option<Vec<f64>>,

    /// Where figure1.csv, figure1.png and figure1.svg go (created if missing).
    #[arg(long, default_value = ".")]
    out: PathBuf,

    /// Mean of the exponential service time, microseconds.
    #[arg(long, default_value_t = 10.0)]
    service_mean_us: f64,

    /// The bound's latency limit, microseconds.
    #[arg(long, default_value_t = 100.0)]
    latency_limit_us: f64,

    /// The quantile held to the latency limit.
    #[arg(long, default_value_t = 0.999)]
    quantile: f64,

    /// The bound's allocation interval, microseconds.
    #[arg(long, default_value_t = 1000.0)]
    interval_us: f64,

    /// Requests the bound simulates per trial, at least.
    #[arg(long, default_value_t = 1_000_000)]
    bound_requests: u64,

    /// Batch runtimes beside Corral's latency-critical one (0: its cores come from the idle
    /// pool, as the paper's runtime running alone; 1: taken from a batch runtime, which the
    /// policy lets keep a core for a share quantum, so p99.9 leaves the limit behind).
    #[arg(long, default_value_t = 0)]
    batch: u16,

    /// Simulated seconds of arrivals per Corral point.
    #[arg(long, default_value_t = 0.1)]
    seconds: f64,

    /// Cost set for Corral's runs: `measured`, `paper`, `zero` or a `corral-bench-iokernel
    /// --json` output (see the main command's --costs).
    #[arg(long, default_value = "measured")]
    costs: String,

    /// Seed of the bound's and the simulator's generators.
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// TrueType font for the plot's text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    font: PathBuf,

    /// A `corral-bench-figure1 --csv` output: Corral measured on this machine. Its loads join
    /// the sweep, its efficiencies are drawn as a third series, and a table of them beside the
    /// bound and the simulated Corral at the same loads is printed and written to
    /// DIR/figure1-measured.csv.
    #[arg(long)]
    measured: Option<PathBuf>,
}

fn cost_set(name: &str) -> Result<Costs, String> {
    Ok(match name {
        "measured" => Costs::measured(),
        "paper" => Costs::paper(),
        "zero" => Costs::zero(),
        path => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            Costs::from_bench_json(&text, path)?
        }
    })
}

fn run_figure1(args: Figure1Args) -> Result<(), String> {
    let positive = |value: f64, what: &str| {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(format!("{what} must be a positive number"))
        }
    };
    if !(args.quantile > 0.0 && args.quantile < 1.0) {
        return Err("--quantile must lie between 0 and 1".into());
    }
    let bound = BoundParams {
        service_mean_ns: positive(args.service_mean_us, "--service-mean-us")? * 1e3,
        latency_limit_ns: positive(args.latency_limit_us, "--latency-limit-us")? * 1e3,
        quantile: args.quantile,
        interval_ns: positive(args.interval_us, "--interval-us")? * 1e3,
        requests: args.bound_requests.max(1),
        seed: args.seed,
    };
    let measured = match &args.measured {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--measured {}: {e}", path.display()))?;
            figure1::parse_measured(&text, &format!("--measured {}", path.display()))?
        }
        None => Vec::new(),
    };
    if let Some(point) = measured
        .iter()
        .find(|point| point.load > f64::from(args.max_cores))
    {
        return Err(format!(
            "--measured: a load of {} cores is above --max-cores ({})",
            point.load, args.max_cores
        ));
    }
    let loads = args
        .loads
        .clone()
        .unwrap_or_else(|| Figure1Config::default_loads(args.max_cores));
    let config = Figure1Config {
        loads: figure1::with_measured_loads(&loads, &measured),
        max_cores: args.max_cores,
        bound,
        // The figure's requests are made inside the runtime: no packets.
        costs: cost_set(&args.costs)?.without_network(),
        batch_runtimes: args.batch,
        duration_ns: secs_to_ns(args.seconds, "--seconds")?,
        seed: args.seed,
    };
    plot::load_font(&args.font)?;
    println!(
        "figure1: bound M/M/n, exp service mean {} us, p{} <= {} us, {} us intervals, >= {} \
         requests per trial; Corral: shenango policy, 1 latency-critical runtime (guaranteed 1), \
         {} batch runtime(s), {} s per point, seed {}",
        args.service_mean_us,
        args.quantile * 100.0,
        args.latency_limit_us,
        args.interval_us,
        bound.requests,
        args.batch,
        args.seconds,
        args.seed
    );
    print!("{}", report::costs_table(&config.costs));
    let rows = figure1::run(&config)?;
    print!("{}", figure1::table(&rows));
    if !measured.is_empty() {
        println!("Corral measured on this machine (--measured), beside the bound at its loads:");
        print!("{}", figure1::measured_table(&rows, &measured));
    }
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let csv = args.out.join("figure1.csv");
    std::fs::write(&csv, figure1::csv(&rows)).map_err(|e| format!("{}: {e}", csv.display()))?;
    let mut written = plot::figure1(&args.out, &rows, &measured, &bound)?;
    written.insert(0, csv);
    if !measured.is_empty() {
        let path = args.out.join("figure1-measured.csv");
        std::fs::write(&path, figure1::measured_csv(&rows, &measured))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn costs(args: &Args) -> Result<Costs, String> {
    with_overrides(cost_set(&args.costs)?, &args.cost_overrides)
}

/// `costs` with each `--cost NAME=NS` of `overrides` applied in order.
fn with_overrides(mut costs: Costs, overrides: &[String]) -> Result<Costs, String> {
    for item in overrides {
        let (name, ns) = item
            .split_once('=')
            .ok_or_else(|| format!("--cost {item}: expected NAME=NANOSECONDS"))?;
        let ns = ns
            .trim()
            .parse()
            .map_err(|_| format!("--cost {item}: the value must be whole nanoseconds"))?;
        costs.set(name.trim(), ns)?;
    }
    Ok(costs)
}

fn secs_to_ns(seconds: f64, what: &str) -> Result<u64, String> {
    if seconds.is_finite() && seconds >= 0.0 {
        Ok((seconds * 1e9).round() as u64)
    } else {
        Err(format!("{what} must be a non-negative number of seconds"))
    }
}

/// What the main command's flags ask for, checked before anything runs.
struct Plan {
    base: SimConfig,
    schedules: Vec<LoadSchedule>,
    costs: Costs,
}

/// Everything the flags can get wrong, found before the first simulation: a bad value is the
/// user's mistake (exit 2), not a failed run.
fn plan(args: &Args) -> Result<Plan, String> {
    let costs = costs(args)?;
    let spec =
        |guaranteed, max: Option<u16>| RuntimeSpec::new(guaranteed, max.unwrap_or(args.cores));
    let mut runtimes = Vec::new();
    for _ in 0..args.lc {
        runtimes.push(RuntimeConfig {
            kind: RuntimeKind::LatencyCritical,
            spec: spec(args.lc_guaranteed, args.lc_max),
        });
    }
    for _ in 0..args.batch {
        runtimes.push(RuntimeConfig {
            kind: RuntimeKind::Batch,
            spec: spec(args.batch_guaranteed, args.batch_max),
        });
    }
    let schedules = match &args.schedule {
        Some(text) => vec![LoadSchedule::parse(text)?],
        None => args
            .loads
            .iter()
            .map(|&load| LoadSchedule::steps(vec![(0, load)]))
            .collect::<Result<_, _>>()?,
    };
    let cede = match args.cede {
        Cede::Signal => CedeMode::Signal,
        Cede::Cooperative => CedeMode::Cooperative,
    };
    let base = SimConfig {
        cores: args.cores,
        hyperthreads: args.hyperthreads,
        runtimes,
        policy: args.policy.clone(),
        settings: PolicySettings {
            preemption_timeout: (args.preemption_timeout_us > 0)
                .then(|| args.preemption_timeout_us * 1_000),
            share_quantum: args.share_quantum_us * 1_000,
            options: args
                .policy_options
                .iter()
                .map(|pair| {
                    corral_policy::parse_option(pair).ok_or_else(|| {
                        format!("invalid --policy-option {pair:?}: expected KEY=VALUE")
                    })
                })
                .collect::<Result<_, _>>()?,
        },
        costs: costs.clone(),
        cede,
        service: args.service,
        load: LoadSchedule::constant(0.0),
        duration_ns: secs_to_ns(args.seconds, "--seconds")?,
        drain_limit_ns: secs_to_ns(args.drain_seconds, "--drain-seconds")?,
        sample_every_ns: args.sample_us.max(1) * 1_000,
        seed: args.seed,
        audit: args.audit,
    };
    corral_policy::check(&base.policy, &base.settings).map_err(|e| e.to_string())?;
    for schedule in &schedules {
        SimConfig {
            load: schedule.clone(),
            ..base.clone()
        }
        .validate()?;
    }
    Ok(Plan {
        base,
        schedules,
        costs,
    })
}

fn run(args: Args, plan: Plan) -> Result<(), String> {
    let Plan {
        base,
        schedules,
        costs,
    } = plan;
    println!(
        "policy {}{}, {} cores{}, {} latency-critical runtime(s) (guaranteed {}, max {}), {} \
         batch runtime(s) (guaranteed {}, max {}), service {}, {} s per point, seed {}, cede {:?}",
        args.policy,
        base.settings
            .options
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect::<String>(),
        args.cores,
        if args.hyperthreads {
            " (hyperthread pairs)"
        } else {
            ""
        },
        args.lc,
        args.lc_guaranteed,
        args.lc_max.unwrap_or(args.cores),
        args.batch,
        args.batch_guaranteed,
        args.batch_max.unwrap_or(args.cores),
        args.service,
        args.seconds,
        args.seed,
        args.cede
    );
    print!("{}", report::costs_table(&costs));
    let mut points = Vec::new();
    for schedule in schedules {
        let config = SimConfig {
            load: schedule,
            ..base.clone()
        };
        points.push(run_point(config)?);
    }
    print!("{}", report::results_table(&points));
    if let Some(path) = &args.csv {
        std::fs::write(path, report::csv(&points))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.series_csv {
        std::fs::write(path, report::series_csv(&points))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.json {
        let text = report::json(&Report {
            policy: &args.policy,
            cores: args.cores,
            latency_critical_runtimes: usize::from(args.lc),
            batch_runtimes: usize::from(args.batch),
            service: args.service.to_string(),
            seconds: args.seconds,
            seed: args.seed,
            cede: match args.cede {
                Cede::Signal => "signal",
                Cede::Cooperative => "cooperative",
            },
            costs: &costs,
            points: &points,
        });
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args = Args::parse();
    let result = match args.command.take() {
        Some(Command::Compare(compare)) => return compare_cli::main(*compare),
        Some(Command::Figure1(figure)) => run_figure1(figure),
        None => match plan(&args) {
            Ok(plan) => run(args, plan),
            Err(e) => {
                eprintln!("corral-sim: {e}");
                return ExitCode::from(2);
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("corral-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
