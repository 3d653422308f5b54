//! `corral-sim compare`: its flags, and the run from them to tables, files and plots. The
//! comparison itself is the library's (`corral_sim::compare`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use corral_sim::compare::{self, CompareConfig};
use corral_sim::report;
use corral_sim::{LoadSchedule, ServiceDist};

use crate::{compare_plot, cost_set, plot, secs_to_ns, with_overrides};

/// What `--help` adds after the flags.
pub const AFTER_HELP: &str = "\
Provisioning, the same for every policy: each latency-critical runtime is guaranteed what a \
static (ZygOS/IX-style) deployment provisions it for peak, the highest load of --loads and \
--burst in cores, split among the latency-critical runtimes and rounded up (--lc-guaranteed \
peak), because Corral has no best-effort class and beyond their guarantees runtimes are \
equals: the guarantee is what ranks a latency-critical runtime above the batch ones. Batch \
runtimes have no guarantee, except under static, which dedicates each runtime exactly its \
guarantee: there the batch runtimes are guaranteed the cores the latency-critical guarantees \
leave. Every runtime may use every core. What was used is printed before the results.

Every run starts with no core held and is measured from time 0, so a policy that adds a core \
per decision (arachne: one per 50 ms) pays its ramp inside the whole-run figures; the settled \
figures (the series after --settle-seconds: mean cores held at the samples, the worst \
window's p99.9) leave that ramp out, as the paper measures each load after ramping to it. A \
policy still working off the backlog its ramp left (arachne at high loads, whose cores leave \
little to spare) shows it in the settled figures too.

Writes DIR/compare.csv (one row per core count, policy and load), DIR/burst.csv (the burst \
runs' series), DIR/compare.json (settings, costs with their sources, provisioning, every \
result) and the plots DIR/compare.png, DIR/compare.svg, DIR/burst.png, DIR/burst.svg.";

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
    /// Managed cores of each machine compared, comma-separated; each gets its own row of
    /// panels.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    cores: Vec<u16>,

    /// Policies compared, by the names corral_policy::build knows, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "shenango,arachne,static")]
    policies: Vec<String>,

    /// The sweep's offered loads (Figure 3's x axis), each a fraction of the machine's
    /// capacity (cores / mean service time, requests per second over all latency-critical
    /// runtimes), above 0 and at most 1; one run per core count, policy and load.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"
    )]
    loads: Vec<f64>,

    /// Latency-critical runtimes, sharing the offered load evenly: one value for every core
    /// count or one per --cores entry [default: one per 16 cores, at least one: 1 at 16, 4 at
    /// 64].
    #[arg(long, value_delimiter = ',')]
    lc: Option<Vec<u16>>,

    /// Batch runtimes (always runnable, want every core), as --lc [default: one per 16
    /// cores, at least one].
    #[arg(long, value_delimiter = ',')]
    batch: Option<Vec<u16>>,

    /// Guaranteed cores of each latency-critical runtime: `peak` (the highest load's cores
    /// split among them, rounded up: 15 at 16 cores with one runtime and loads up to 0.9), or
    /// core counts as --lc. The guarantees may not add up to more than the cores.
    #[arg(long, default_value = "peak")]
    lc_guaranteed: String,

    /// Service time of each request: `const:10us`, `exp:10us`, `bimodal` (90% 5 us, 10% 55
    /// us) or `bimodal:SHORT:LONG:LONG_FRACTION`.
    #[arg(long, default_value = "exp:10us")]
    service: ServiceDist,

    /// Cost set: `measured`, `paper`, `zero` or a `corral-bench-iokernel --json` output (see
    /// the main command's --costs). Printed with each cost's source.
    #[arg(long, default_value = "measured")]
    costs: String,

    /// Override one cost of the set, NAME=NANOSECONDS, repeatable (the main command's --cost
    /// lists the names).
    #[arg(long = "cost", value_name = "NAME=NS")]
    cost_overrides: Vec<String>,

    /// An option for one policy, `POLICY:KEY=VALUE` (e.g. `arachne:interval_us=5000`, the
    /// thesis's 5 ms estimator); repeat for more. The keys each policy takes are the main
    /// command's --policy-option.
    #[arg(long = "policy-option", value_name = "POLICY:KEY=VALUE")]
    policy_options: Vec<String>,

    /// Microseconds a runtime keeps a granted core before a runtime of equal standing may take
    /// it (iokerneld's share_quantum_us).
    #[arg(long, default_value_t = 1000)]
    share_quantum_us: u64,

    /// Microseconds a preempted kthread may keep its core before it is taken off at once; 0:
    /// never (iokerneld's preemption_timeout_us).
    #[arg(long, default_value_t = 10_000)]
    preemption_timeout_us: u64,

    /// Simulated seconds of arrivals per sweep point.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,

    /// The settled figures leave out the series up to this many simulated seconds (arachne's
    /// ramp from one core to 15 at 50 ms a core is 0.7 s).
    #[arg(long, default_value_t = 1.0)]
    settle_seconds: f64,

    /// Longest simulated time past the arrivals spent completing requests already arrived.
    #[arg(long, default_value_t = 1.0)]
    drain_seconds: f64,

    /// Period of the cores-over-time series and of its p99.9 windows, microseconds.
    #[arg(long, default_value_t = 1000)]
    sample_us: u64,

    /// The burst run's load schedule (Figure 5's shape), TIME:LOAD steps; the burst is its
    /// first step up. The default holds 0.1 for 0.5 s, bursts to 0.6 for 0.5 s and drops back
    /// to 0.1: the paper's Figure 5 holds a base load for 1 s, steps up for 1 s and back, and
    /// finds Arachne takes over 500 ms to add the cores; half-second levels keep that visible
    /// at a third of the simulated time.
    #[arg(long, default_value = CompareConfig::DEFAULT_BURST)]
    burst: String,

    /// Simulated seconds of arrivals of each burst run.
    #[arg(long, default_value_t = 1.5)]
    burst_seconds: f64,

    /// A window's p99.9 above this many microseconds counts as the burst still hurting (the
    /// burst table's time above it).
    #[arg(long, default_value_t = 1000)]
    burst_threshold_us: u64,

    /// Seed of every run (the policies see the same arrivals and service times).
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Threads running points at once; the results do not depend on it.
    #[arg(long, default_value_t = 1)]
    jobs: usize,

    /// Where the CSV, JSON and plot files go (created if missing).
    #[arg(long, default_value = ".")]
    out: PathBuf,

    /// TrueType font for the plots' text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    font: PathBuf,
}

/// Reads `POLICY:KEY=VALUE`.
fn policy_option(text: &str) -> Result<(String, String, String), String> {
    let bad = || format!("--policy-option {text:?}: expected POLICY:KEY=VALUE");
    let (policy, option) = text.split_once(':').ok_or_else(bad)?;
    let (key, value) = corral_policy::parse_option(option).ok_or_else(bad)?;
    Ok((policy.trim().to_owned(), key, value))
}

/// The configuration the flags describe; every error is the input's.
fn config(args: &CompareArgs) -> Result<CompareConfig, String> {
    let lc_guaranteed = match args.lc_guaranteed.trim() {
        "peak" => None,
        list => Some(
            list.split(',')
                .map(|n| n.trim().parse::<u16>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| {
                    format!("--lc-guaranteed {list:?}: expected `peak` or core counts, e.g. 15,15")
                })?,
        ),
    };
    Ok(CompareConfig {
        core_counts: args.cores.clone(),
        policies: args.policies.iter().map(|p| p.trim().to_owned()).collect(),
        policy_options: args
            .policy_options
            .iter()
            .map(|text| policy_option(text))
            .collect::<Result<_, _>>()?,
        loads: args.loads.clone(),
        lc_runtimes: args.lc.clone(),
        batch_runtimes: args.batch.clone(),
        lc_guaranteed,
        service: args.service,
        costs: with_overrides(
            cost_set(&args.costs).map_err(|e| format!("--costs: {e}"))?,
            &args.cost_overrides,
        )?,
        share_quantum_ns: args.share_quantum_us * 1_000,
        preemption_timeout_ns: (args.preemption_timeout_us > 0)
            .then(|| args.preemption_timeout_us * 1_000),
        duration_ns: secs_to_ns(args.seconds, "--seconds")?,
        settle_ns: secs_to_ns(args.settle_seconds, "--settle-seconds")?,
        drain_limit_ns: secs_to_ns(args.drain_seconds, "--drain-seconds")?,
        sample_every_ns: args.sample_us.saturating_mul(1_000),
        burst: LoadSchedule::parse(&args.burst).map_err(|e| format!("--burst: {e}"))?,
        burst_duration_ns: secs_to_ns(args.burst_seconds, "--burst-seconds")?,
        burst_threshold_ns: args.burst_threshold_us.saturating_mul(1_000),
        seed: args.seed,
    })
}

/// Runs the comparison: exit 2 for bad input (as clap's own errors), 1 if a run fails.
pub fn main(args: CompareArgs) -> ExitCode {
    let started = Instant::now();
    let checked = config(&args).and_then(|config| {
        if args.jobs == 0 {
            return Err("--jobs must be at least 1".into());
        }
        let provisions = config.provisions()?;
        plot::load_font(&args.font)?;
        Ok((config, provisions))
    });
    let (config, provisions) = match checked {
        Ok(checked) => checked,
        Err(e) => {
            eprintln!("corral-sim compare: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "compare: policies {}; loads {:?}; service {}; {} s per sweep point (settled after {} \
         s); burst {} over {} s; {} us samples; seed {}; {} thread(s)",
        config.policies.join(", "),
        config.loads,
        config.service,
        args.seconds,
        args.settle_seconds,
        args.burst,
        args.burst_seconds,
        args.sample_us,
        args.seed,
        args.jobs
    );
    for (policy, key, value) in &config.policy_options {
        println!("  {policy}: {key}={value}");
    }
    for provision in &provisions {
        println!("{}", provision.describe());
    }
    print!("{}", report::costs_table(&config.costs));
    match write(&args, &config) {
        Ok(()) => {
            println!("wall time {:.1} s", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("corral-sim compare: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(args: &CompareArgs, config: &CompareConfig) -> Result<(), String> {
    let comparison = compare::run(config, args.jobs)?;
    print!("{}", compare::sweep_table(&comparison));
    println!(
        "\nburst {}: LC cores the burst needs, time to reach them, time its windows' p99.9 stay \
         above the threshold and how many, the highest window p99.9, the whole run's p99.9 and \
         batch share:",
        args.burst
    );
    print!(
        "{}",
        compare::burst_table(&comparison, config.burst_threshold_ns)
    );
    let dir = &args.out;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for (name, text) in [
        ("compare.csv", compare::sweep_csv(&comparison)),
        ("burst.csv", compare::burst_csv(&comparison, &config.burst)),
        ("compare.json", compare::json(config, &comparison)),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    written.extend(compare_plot::sweep(dir, &comparison)?);
    written.extend(compare_plot::burst(dir, &comparison, config)?);
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}
