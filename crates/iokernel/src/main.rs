//! `iokerneld`: the Corral daemon that hands the managed cores to runtimes.
//!
//! `iokerneld [settings]` runs the daemon pinned to its own core until SIGINT or SIGTERM;
//! `iokerneld stats` prints a running daemon's statistics; `iokerneld gen` plays a run of a
//! running daemon's traffic generator (`nic = "gen"`) and prints its results. `iokerneld --help`
//! lists every setting.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use corral_abi::control::{Reply, Request};
use corral_iokernel::alloc::PolicySettings;
use corral_iokernel::config::{self, Cli, Command, Config, GenArgs, SettingArgs};
use corral_iokernel::cpus::{Sysfs, format_cpu_list};
use corral_iokernel::daemon::Daemon;
use corral_iokernel::genrun::GenResult;
use corral_iokernel::{control, logger, sys};
use corral_loadgen::recorder::human_ns;
use log::{error, info};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Stats { socket }) => stats(socket, &cli.settings),
        Some(Command::Gen(args)) => generate(&args, &cli.settings),
        None => run(&cli.settings),
    }
}

/// The control socket a client subcommand connects to: its own `--socket`, else the
/// `socket` setting from the flags or the config file, else the default.
fn client_socket(socket: Option<PathBuf>, settings: &SettingArgs) -> Result<PathBuf, ExitCode> {
    match socket.or_else(|| settings.socket.clone()) {
        Some(path) => Ok(path),
        None => match &settings.config {
            Some(file) => match config::read_file(file) {
                Ok(file) => Ok(file
                    .socket
                    .unwrap_or_else(|| PathBuf::from(config::DEFAULT_SOCKET))),
                Err(e) => {
                    eprintln!("iokerneld: {e}");
                    Err(ExitCode::from(2))
                }
            },
            None => Ok(PathBuf::from(config::DEFAULT_SOCKET)),
        },
    }
}

fn stats(socket: Option<PathBuf>, settings: &SettingArgs) -> ExitCode {
    let socket = match client_socket(socket, settings) {
        Ok(path) => path,
        Err(code) => return code,
    };
    let reply = control::connect(&socket).and_then(|conn| {
        control::request_on(
            std::os::fd::AsFd::as_fd(&conn),
            &Request::Stats.encode(),
            &[],
            Duration::from_secs(5),
        )
    });
    match reply {
        Ok(Reply::Stats { json }) => match serde_json::from_str::<serde_json::Value>(&json) {
            Ok(value) => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&value).unwrap_or(json.clone())
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("iokerneld stats: the daemon sent invalid JSON ({e}): {json}");
                ExitCode::FAILURE
            }
        },
        Ok(Reply::Error { message }) => {
            eprintln!("iokerneld stats: refused: {message}");
            ExitCode::FAILURE
        }
        Ok(other) => {
            eprintln!("iokerneld stats: unexpected reply {other:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("iokerneld stats: {}: {e}", socket.display());
            ExitCode::FAILURE
        }
    }
}

/// `iokerneld gen`: asks the daemon for a run, waits for its end, and prints the results.
fn generate(args: &GenArgs, settings: &SettingArgs) -> ExitCode {
    let spec = match args.spec() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("iokerneld gen: {e}");
            return ExitCode::from(2);
        }
    };
    let socket = match client_socket(args.socket.clone(), settings) {
        Ok(path) => path,
        Err(code) => return code,
    };
    // The reply comes when the run has ended: after its phases and grace period, plus the
    // start delay and the time the daemon takes to set it up and report it.
    let run_s = spec.duration_ns() as f64 / 1e9 + spec.grace_ms / 1e3;
    let timeout = Duration::from_secs_f64(run_s + 30.0);
    eprintln!(
        "iokerneld gen: {} phase(s) over {:.3} s against {} ({} clients, {} service, {} \
         arrivals, {}-byte payloads)",
        spec.phases.len(),
        spec.duration_ns() as f64 / 1e9,
        spec.target,
        spec.clients,
        spec.service,
        spec.arrivals,
        spec.payload
    );
    let request = Request::Gen {
        json: spec.to_json(),
    };
    let reply = control::connect(&socket).and_then(|conn| {
        control::request_on(
            std::os::fd::AsFd::as_fd(&conn),
            &request.encode(),
            &[],
            timeout,
        )
    });
    let json = match reply {
        Ok(Reply::Gen { json }) => json,
        Ok(Reply::Error { message }) => {
            eprintln!("iokerneld gen: refused: {message}");
            return ExitCode::FAILURE;
        }
        Ok(other) => {
            eprintln!("iokerneld gen: unexpected reply {other:?}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("iokerneld gen: {}: {e}", socket.display());
            return ExitCode::FAILURE;
        }
    };
    let result: GenResult = match serde_json::from_str(&json) {
        Ok(result) => result,
        Err(e) => {
            eprintln!("iokerneld gen: the daemon sent results that do not parse ({e}): {json}");
            return ExitCode::FAILURE;
        }
    };
    let s = &result.summary;
    eprintln!(
        "iokerneld gen: {} requests scheduled, {} sent, {} matched, {} lost",
        s.scheduled, s.sent, s.matched, s.lost
    );
    eprintln!("  {s}");
    if !result.windows.is_empty() {
        let worst = result
            .windows
            .iter()
            .map(|w| w.latency.p99_ns)
            .max()
            .unwrap_or(0);
        eprintln!(
            "  {} windows of {} ms; worst window p99 {}",
            result.windows.len(),
            spec.window_ms.unwrap_or(0.0),
            human_ns(worst)
        );
    }
    let d = &result.daemon;
    eprintln!(
        "  daemon: {} wakes, {} preemptions, {} reallocations ({:.1}/s), {} parks",
        d.wakes, d.preemptions, d.reallocations, d.reallocations_per_s, d.parks
    );
    let c = &result.gen_cost;
    eprintln!(
        "  gen cost: {:.1} ns per request (building {:.1} ns per request, parsing {:.1} ns per \
         response)",
        c.ns_per_request, c.build_ns_per_request, c.parse_ns_per_response
    );
    let pretty = serde_json::to_string_pretty(&result).unwrap_or(json);
    match &args.json {
        Some(path) => {
            if let Err(e) = std::fs::write(path, pretty + "\n") {
                eprintln!("iokerneld gen: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        None => println!("{pretty}"),
    }
    ExitCode::SUCCESS
}

fn run(settings: &SettingArgs) -> ExitCode {
    let config = match Config::resolve(settings) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("iokerneld: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = logger::init(config.log_level.0, config.log_file.as_deref()) {
        eprintln!(
            "iokerneld: invalid log_file = {:?}: {e}",
            config
                .log_file
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
        );
        return ExitCode::from(2);
    }
    match start(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            eprintln!("iokerneld: {e}");
            ExitCode::FAILURE
        }
    }
}

fn start(config: Config) -> Result<(), String> {
    let stop = sys::stop_on_sigint_sigterm()
        .map_err(|e| format!("cannot install the SIGINT/SIGTERM handlers: {e}"))?;
    sys::set_affinity(0, &[config.core])
        .map_err(|e| format!("cannot pin iokerneld to CPU {}: {e}", config.core))?;
    let topology = Sysfs::new(&config.sysfs_root)
        .topology(&config.managed_cores)
        .map_err(|e| format!("cannot read the CPU topology: {e}"))?;
    let settings = PolicySettings {
        preemption_timeout: Some(config.preemption_timeout_us * 1000),
    };
    let alloc = corral_iokernel::alloc::build(&config.policy, topology, &settings)
        .map_err(|e| e.to_string())?;
    let listener = control::listen(&config.socket)
        .map_err(|e| format!("cannot listen on {}: {e}", config.socket.display()))?;
    info!(
        "iokerneld {} (pid {}) on CPU {}, managing CPUs {}; spare CPUs {}; socket {}; \
         policy {}, interval {} us, preemption timeout {} us, control poll {} us",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        config.core,
        format_cpu_list(&config.managed_cores),
        if config.spare_cpus.is_empty() {
            "none (ignored preemptions demote to SCHED_IDLE)".to_owned()
        } else {
            format_cpu_list(&config.spare_cpus)
        },
        config.socket.display(),
        config.policy,
        config.interval_us,
        config.preemption_timeout_us,
        config.control_poll_us,
    );
    let nic = corral_iokernel::nic::open(&config.nic).map_err(|e| e.to_string())?;
    match &nic {
        Some(nic) => info!("NIC: {}", nic.describe()),
        None => info!("NIC: none (frames are switched among runtimes only)"),
    }
    let socket = config.socket.clone();
    let mut daemon = Daemon::new(config, alloc, listener, nic)
        .map_err(|e| format!("cannot set up the control socket: {e}"))?;
    daemon.run(stop);
    info!("stopping");
    if let Err(e) = std::fs::remove_file(&socket) {
        error!("cannot remove {}: {e}", socket.display());
    }
    Ok(())
}
