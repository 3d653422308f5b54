//! `corral-abi-client`: registers with iokerneld as a runtime made of plain OS threads and
//! behaves according to `--mode`, printing one line per event (`registered ID`,
//! `grant K CPU running-on C since-decision-ns N`, `preempt K`, `park K`, `yielded K`, and
//! finally `evicted: REASON` or `disconnected`). For tests and packet benchmarks that need a
//! runtime without the runtime library.
//!
//! Packet modes (`echo`, `ping`, `spoof`, `oob-tx`, `oob-post`) need `--mac` and `--ip` and
//! print `pong SEQ` per intact echo and `done sent N completed N dropped N received N intact
//! N` when a sending mode has finished. `--bench SECONDS` instead registers two endpoints and
//! prints the rate at which iokerneld (run with `--nic none`) switches frames between them.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use corral_abi::control::{NetIdentity, PreemptionMode};
use corral_testclient::client::{ClientError, Ending, Mode, Options, Runtime};
use corral_wire::MacAddr;

/// Register with iokerneld as a runtime whose kthreads are plain threads.
#[derive(Debug, Parser)]
#[command(name = "corral-abi-client", version, about)]
struct Cli {
    /// iokerneld's control socket.
    #[arg(long, default_value = corral_iokernel::config::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Name shown in iokerneld's logs and statistics.
    #[arg(long, default_value = "abi-client")]
    name: String,
    /// Number of kthreads (one OS thread each).
    #[arg(long, default_value_t = 1)]
    kthreads: usize,
    /// Guaranteed cores.
    #[arg(long, default_value_t = 0)]
    guaranteed: u16,
    /// Most cores held at once [default: the number of kthreads].
    #[arg(long)]
    max_cores: Option<u16>,
    /// Kthreads (the first N) that spin once granted a core instead of parking.
    #[arg(long, default_value_t = 0)]
    spinning: u16,
    /// Ask iokerneld to send the preemption signal at once when it wants a core back,
    /// instead of waiting its grace period for a cooperative cede.
    #[arg(long)]
    preempt_at_once: bool,
    /// idle: park at once; busy: spin until preempted, then yield with work left;
    /// block-sigusr1: block SIGUSR1 and never yield; garbage: overwrite the region with
    /// random bytes after registering.
    #[arg(long, default_value = "idle")]
    mode: Mode,
    /// Report a timer due this many milliseconds after registering (0: due at once).
    #[arg(long, value_name = "MS")]
    timer_after_ms: Option<u64>,
    /// Add one item to the shared queue this many milliseconds after registering.
    #[arg(long, value_name = "MS")]
    work_after_ms: Option<u64>,
    /// MAC address to register, such as 02:00:00:00:00:01.
    #[arg(long)]
    mac: Option<MacAddr>,
    /// IPv4 address to register.
    #[arg(long)]
    ip: Option<Ipv4Addr>,
    /// The peer's MAC address (ping, spoof).
    #[arg(long)]
    peer_mac: Option<MacAddr>,
    /// The peer's IPv4 address (ping, spoof).
    #[arg(long)]
    peer_ip: Option<Ipv4Addr>,
    /// Frames to send in the sending modes.
    #[arg(long, default_value_t = 10)]
    count: u64,
    /// UDP payload bytes per ping.
    #[arg(long, default_value_t = 64)]
    payload_len: usize,
    /// Instead of one runtime, register two endpoints, flood one from the other for this many
    /// seconds, and print the switching rate (iokerneld must run with --nic none).
    #[arg(long, value_name = "SECONDS")]
    bench: Option<f64>,
    /// Frame length for --bench.
    #[arg(long, default_value_t = 64)]
    frame_len: usize,
}

fn identity(mac: Option<MacAddr>, ip: Option<Ipv4Addr>) -> Option<NetIdentity> {
    Some(NetIdentity {
        mac: mac?.0,
        ipv4: ip?.octets(),
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(seconds) = cli.bench {
        let duration = Duration::from_secs_f64(seconds);
        return match corral_testclient::netclient::bench_pair(&cli.socket, duration, cli.frame_len)
        {
            Ok(r) => {
                println!(
                    "bench frame_len {} seconds {:.3} received {} sent {} dropped {} rate_pps {:.0}",
                    cli.frame_len,
                    r.seconds,
                    r.received,
                    r.sent,
                    r.dropped,
                    r.received_pps()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("corral-abi-client: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut options = Options::new(&cli.socket, cli.name);
    options.kthreads = cli.kthreads;
    options.guaranteed_cores = cli.guaranteed;
    options.max_cores = cli
        .max_cores
        .unwrap_or(u16::try_from(cli.kthreads).unwrap_or(u16::MAX));
    options.spinning_kthreads = cli.spinning;
    if cli.preempt_at_once {
        options.preemption = PreemptionMode::SignalAtOnce;
    }
    options.mode = cli.mode;
    options.timer_after = cli.timer_after_ms.map(Duration::from_millis);
    options.work_after = cli.work_after_ms.map(Duration::from_millis);
    options.events = Some(Arc::new(|line| println!("{line}")));
    options.net = identity(cli.mac, cli.ip);
    options.peer = identity(cli.peer_mac, cli.peer_ip);
    options.count = cli.count;
    options.payload_len = cli.payload_len;
    let runtime = match Runtime::start(options) {
        Ok(runtime) => runtime,
        Err(ClientError::Refused(message)) => {
            println!("refused: {message}");
            return ExitCode::from(2);
        }
        Err(ClientError::Io(e)) => {
            eprintln!("corral-abi-client: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("registered {}", runtime.id);
    match runtime.wait_ending(None) {
        Ok(Ending::Evicted(message)) => {
            println!("evicted: {message}");
            ExitCode::from(3)
        }
        Ok(_) => {
            println!("disconnected");
            ExitCode::from(4)
        }
        Err(e) => {
            eprintln!("corral-abi-client: {e}");
            ExitCode::FAILURE
        }
    }
}
