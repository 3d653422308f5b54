//! `iokerneld`: the Corral daemon that hands the managed cores to runtimes.
//!
//! `iokerneld [settings]` runs the daemon pinned to its own core until SIGINT or SIGTERM;
//! `iokerneld stats` prints a running daemon's statistics. `iokerneld --help` lists every
//! setting.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use corral_abi::control::{Reply, Request};
use corral_iokernel::alloc::{Allocator, AllocatorConfig};
use corral_iokernel::config::{self, Cli, Command, Config, SettingArgs};
use corral_iokernel::cpus::{Sysfs, format_cpu_list};
use corral_iokernel::daemon::Daemon;
use corral_iokernel::{control, logger, sys};
use log::{error, info};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Stats { socket }) => stats(socket, &cli.settings),
        None => run(&cli.settings),
    }
}

fn stats(socket: Option<PathBuf>, settings: &SettingArgs) -> ExitCode {
    let socket = match socket.or_else(|| settings.socket.clone()) {
        Some(path) => path,
        None => match &settings.config {
            Some(file) => match config::read_file(file) {
                Ok(file) => file
                    .socket
                    .unwrap_or_else(|| PathBuf::from(config::DEFAULT_SOCKET)),
                Err(e) => {
                    eprintln!("iokerneld: {e}");
                    return ExitCode::from(2);
                }
            },
            None => PathBuf::from(config::DEFAULT_SOCKET),
        },
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
    let alloc = Allocator::new(
        topology,
        AllocatorConfig {
            preemption_timeout: Some(config.preemption_timeout_us * 1000),
            ..AllocatorConfig::default()
        },
    );
    let listener = control::listen(&config.socket)
        .map_err(|e| format!("cannot listen on {}: {e}", config.socket.display()))?;
    info!(
        "iokerneld {} (pid {}) on CPU {}, managing CPUs {}; spare CPUs {}; socket {}; \
         interval {} us, preemption timeout {} us, control poll {} us",
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
