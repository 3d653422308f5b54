//! `iokerneld`: the Corral daemon that hands the managed cores to runtimes.
//!
//! `iokerneld [settings]` runs the daemon pinned to its own core until SIGINT or SIGTERM (and,
//! with `--metrics-listen`, serves its statistics to Prometheus); `iokerneld stats` prints a
//! running daemon's statistics, as JSON or in the Prometheus text format; `iokerneld gen` plays
//! a run of a running daemon's traffic generator (`nic = "gen"`) and prints its results.
//! `iokerneld --help` lists every setting.

mod exposition;
mod metrics_server;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory as _, Parser, Subcommand, ValueEnum};
use corral_abi::control::{Reply, Request};
use corral_gen::{GenArgs, GenBackend};
use corral_iokernel::config::{self, Config, NicConfig, SettingArgs};
use corral_iokernel::cpus::{Sysfs, format_cpu_list};
use corral_iokernel::daemon::Daemon;
use corral_iokernel::nic::{self, Nic};
use corral_iokernel::shield::{self, Keeper, Shield, ShieldError, ShieldSpec};
use corral_iokernel::{control, logger, sys};
use corral_policy::PolicySettings;
use log::{error, info, warn};

/// iokerneld: allocates the managed cores among Corral runtimes every few microseconds.
///
/// Settings come from the TOML file given with --config (keys named as below, e.g.
/// `managed_cores = "1-3"`), and each flag overrides the file.
#[derive(Debug, Parser)]
#[command(name = "iokerneld", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub settings: SettingArgs,

    /// Undo what a shielding iokerneld that was killed left changed on the machine (thread and
    /// IRQ affinities, kernel scheduler settings), then exit. A new start does this too.
    #[arg(long)]
    pub unshield: bool,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Connect to a running iokerneld, ask for its statistics and print them.
    Stats {
        /// Control socket to connect to [default: the `socket` setting].
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// `json` (the statistics as the daemon sends them, indented) or `prometheus` (the
        /// Prometheus text exposition format, as `--metrics-listen` serves it).
        #[arg(long, value_enum, default_value_t = StatsFormat::Json)]
        format: StatsFormat,
    },
    /// Play an open-loop run of a running iokerneld's traffic generator (`nic = "gen"`)
    /// against a service of one of its runtimes (a UDP spin server, memcached over TCP, or an
    /// authoritative DNS server with `--protocol dns --queries FILE`), wait for it to end, and
    /// print the results: a summary on standard error, the JSON on standard output (or in
    /// --json FILE).
    Gen(Box<GenArgs>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    Json,
    Prometheus,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.unshield && cli.command.is_some() {
        // clap's `conflicts_with` names arguments, not subcommands.
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--unshield cannot be used with a subcommand",
            )
            .exit();
    }
    match cli.command {
        Some(Command::Stats { socket, format }) => stats(socket, format, &cli.settings),
        Some(Command::Gen(args)) => {
            corral_gen::play::play(&args, client_socket(args.socket.clone(), &cli.settings))
        }
        None if cli.unshield => unshield(),
        None => run(&cli.settings),
    }
}

fn unshield() -> ExitCode {
    match shield::undo_stale() {
        Ok(Some(report)) => {
            eprintln!("iokerneld: {report}");
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!(
                "iokerneld: no shield to undo ({} does not exist)",
                shield::JOURNAL_PATH
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("iokerneld: {e}");
            ExitCode::FAILURE
        }
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

/// Asks the daemon on `socket` for its statistics; the JSON text, or why there is none.
fn request_stats(socket: &Path, timeout: Duration) -> Result<String, String> {
    let reply = control::connect(socket).and_then(|conn| {
        control::request_on(
            std::os::fd::AsFd::as_fd(&conn),
            &Request::Stats.encode(),
            &[],
            timeout,
        )
    });
    match reply {
        Ok(Reply::Stats { json }) => Ok(json),
        Ok(Reply::Error { message }) => Err(format!("refused: {message}")),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(e) => Err(format!("{}: {e}", socket.display())),
    }
}

fn stats(socket: Option<PathBuf>, format: StatsFormat, settings: &SettingArgs) -> ExitCode {
    let socket = match client_socket(socket, settings) {
        Ok(path) => path,
        Err(code) => return code,
    };
    let json = match request_stats(&socket, Duration::from_secs(5)) {
        Ok(json) => json,
        Err(e) => {
            eprintln!("iokerneld stats: {e}");
            return ExitCode::FAILURE;
        }
    };
    let text = match format {
        StatsFormat::Json => serde_json::from_str::<serde_json::Value>(&json)
            .map(|value| serde_json::to_string_pretty(&value).unwrap_or(json.clone())),
        StatsFormat::Prometheus => serde_json::from_str::<corral_iokernel::daemon::Stats>(&json)
            .map(|stats| exposition::render(&stats).trim_end().to_owned()),
    };
    match text {
        Ok(text) => {
            use std::io::Write as _;
            match writeln!(std::io::stdout().lock(), "{text}") {
                // A reader that stopped early (`| head`) wanted no more.
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                    eprintln!("iokerneld stats: cannot write the statistics: {e}");
                    ExitCode::FAILURE
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => {
            eprintln!("iokerneld stats: the daemon sent invalid statistics ({e}): {json}");
            ExitCode::FAILURE
        }
    }
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

fn start(mut config: Config) -> Result<(), String> {
    let stop = sys::stop_on_sigint_sigterm()
        .map_err(|e| format!("cannot install the SIGINT/SIGTERM handlers: {e}"))?;
    corral_affinity::pin_current_thread(config.core)
        .map_err(|e| format!("cannot pin iokerneld to CPU {}: {e}", config.core))?;
    let topology = Sysfs::new(&config.sysfs_root)
        .topology(&config.managed_cores)
        .map_err(|e| format!("cannot read the CPU topology: {e}"))?;
    let settings = PolicySettings {
        preemption_timeout: Some(config.preemption_timeout_us * 1000),
        share_quantum: config.share_quantum_us * 1000,
        options: config.policy_options.clone(),
    };
    let alloc =
        corral_policy::build(&config.policy, topology, &settings).map_err(|e| e.to_string())?;
    // Before the control socket, so that an address that cannot be had stops iokerneld before
    // anything else is set up, and a daemon that takes registrations also serves its metrics.
    if let Some(address) = config.metrics_listen {
        start_metrics(address, &config)?;
    }
    // After the settings that can fail at once, so that a refused start changes nothing, and
    // before the control socket, so that a daemon that takes registrations is shielded. Held
    // until the end of this function: every return after this undoes it as it drops.
    let shield = if config.shield {
        shield_core(config.core)
    } else {
        undo_stale_shield();
        None
    };
    config.shield = shield.is_some();
    let listener = control::listen(&config.socket)
        .map_err(|e| format!("cannot listen on {}: {e}", config.socket.display()))?;
    info!(
        "iokerneld {} (pid {}) on CPU {}, managing CPUs {}; spare CPUs {}; socket {}; \
         policy {}{}, interval {} us, preemption timeout {} us, share quantum {} us, \
         control poll {} us",
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
        config
            .policy_options
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect::<String>(),
        config.interval_us,
        config.preemption_timeout_us,
        config.share_quantum_us,
        config.control_poll_us,
    );
    let nic = open_nic(&config.nic).map_err(|e| e.to_string())?;
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
    if let Some(shield) = shield {
        match shield.undo() {
            Ok(report) => info!("{report}"),
            Err(e) => warn!("{e}"),
        }
    }
    Ok(())
}

/// Undoes what a shielding iokerneld that was killed left behind, so that a machine does not
/// stay shielded until the next shielding start. A live holder's shield is its own.
fn undo_stale_shield() {
    match shield::undo_stale() {
        Ok(Some(report)) => info!("undid a shield its holder left behind: {report}"),
        Ok(None) | Err(ShieldError::Busy { .. }) => {}
        Err(e) => warn!("{e}"),
    }
}

/// Shields iokerneld's CPU, keeps it shielded from a sweeping thread, and puts the calling
/// thread, the loop, at SCHED_FIFO; logs one line of what was done. `None`: running unshielded
/// (another process holds the shield, or it could not be applied), which the log says.
fn shield_core(core: usize) -> Option<Keeper> {
    let spec = ShieldSpec {
        keep: vec![core],
        exempt_pids: vec![std::process::id()],
    };
    match Shield::apply(&spec) {
        Ok(shield) => {
            let summary = shield.summary();
            // Started before the loop's thread turns real-time: the keeper leaves the CPU and
            // the class it inherits at once.
            let keeper = match Keeper::start(shield) {
                Ok(keeper) => keeper,
                Err(e) => {
                    warn!("running unshielded: cannot start the shield's sweeping thread: {e}");
                    return None;
                }
            };
            let class = match shield::set_realtime(0, shield::LOOP_PRIORITY) {
                Ok(()) => format!("loop at SCHED_FIFO priority {}", shield::LOOP_PRIORITY),
                Err(e) => format!("loop left in the fair class (SCHED_FIFO refused: {e})"),
            };
            info!(
                "{summary}; {class}; swept every {} ms",
                shield::SWEEP_PERIOD.as_millis()
            );
            Some(keeper)
        }
        Err(e) => {
            warn!("running unshielded: {e}");
            None
        }
    }
}

/// Serves the metrics on `address` from a thread of their own, off iokerneld's CPU: on the
/// spare CPUs if there are any, else on the managed cores under `SCHED_IDLE`, where it runs only
/// when a core has nothing else to do (iokerneld's own CPU is never idle: the loop spins).
fn start_metrics(address: std::net::SocketAddr, config: &Config) -> Result<(), String> {
    let listener = metrics_server::bind(address)?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("cannot read the metrics address: {e}"))?;
    let placement = if config.spare_cpus.is_empty() {
        metrics_server::Placement {
            cpus: config.managed_cores.clone(),
            idle: true,
        }
    } else {
        metrics_server::Placement {
            cpus: config.spare_cpus.clone(),
            idle: false,
        }
    };
    let place = format!(
        "CPUs {}{}",
        format_cpu_list(&placement.cpus),
        if placement.idle {
            " under SCHED_IDLE"
        } else {
            ""
        }
    );
    metrics_server::spawn(listener, config.socket.clone(), placement)?;
    info!("metrics: serving http://{address}/metrics from {place}");
    Ok(())
}

/// Opens the configured NIC backend: `gen` is linked in here, the others come with the daemon.
fn open_nic(config: &NicConfig) -> std::io::Result<Option<Box<dyn Nic>>> {
    match config {
        NicConfig::Gen { host_ip, prefix } => {
            Ok(Some(Box::new(GenBackend::new(*host_ip, *prefix))))
        }
        other => nic::open(other),
    }
}
