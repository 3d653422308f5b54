//! Corral's network stack against Linux's, measured in one run from the same Linux client:
//!
//! * **Corral**: a server in a Corral runtime under iokerneld, its kthread spinning on a
//!   guaranteed core (`--parked-gap-us` instead lets it park between requests, so that each
//!   request must first wake it), reached through the TAP device backend or (`--paths xdp`)
//!   through a veth pair with iokerneld's XDP program on this end and the client in a
//!   namespace at the other;
//! * **Linux**: a plain server thread in its own network namespace, reached over a veth pair,
//!   pinned to the same CPU.
//!
//! Experiments: UDP echo round trips (the default), one-way UDP rates (`--rates`), and for TCP
//! round trips on one connection (`--tcp`), connections per second (`--tcp-connections`),
//! incast (`--tcp-incast`: many connections send one request each at once) and bulk throughput (`--tcp-bulk`, with the TAP device's and the local switch's full-size frame
//! rates as ceilings).
//!
//! A round-trip client runs closed-loop (one request in flight), pinned to iokerneld's CPU, and
//! records each round trip in an HDR histogram. On a 2-CPU machine there is no other CPU for
//! it: it stands in for a client on another machine, so it runs at `SCHED_FIFO` priority 1 in
//! both runs (it sleeps between requests), which lets it take the CPU from iokerneld's busy
//! loop the moment its answer arrives instead of waiting up to a CFS slice. The servers both
//! get the other CPU.

mod setup;
mod tcp;
mod udp;

use std::path::PathBuf;

use clap::Parser;
use hdrhistogram::Histogram;

use setup::median;

#[derive(Parser, Debug)]
#[command(about = "Corral's UDP and TCP through iokerneld against Linux's over veth")]
pub struct Args {
    /// Round trips (or connections, with --tcp-connections) per server per repetition.
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Repetitions; medians of the per-repetition figures are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Payload bytes of a request and of its response.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// iokerneld's CPU (the client shares it).
    #[arg(long, default_value_t = 0)]
    iokernel_cpu: usize,
    /// The servers' CPU.
    #[arg(long, default_value_t = 1)]
    server_cpu: usize,
    /// Let the Corral UDP server's kthread park between requests (each request wakes it), with
    /// this many microseconds between requests; 0 = a spinning kthread, back-to-back requests.
    #[arg(long, default_value_t = 0)]
    parked_gap_us: u64,
    /// The iokerneld binary; default: next to this program.
    #[arg(long)]
    iokerneld: Option<PathBuf>,
    /// Instead of round trips, measure one-way packet rates for this many seconds: a Linux
    /// sender flooding a Corral receiver through the TAP device, and one Corral runtime
    /// flooding another through iokerneld's local switch.
    #[arg(long)]
    rates: Option<f64>,
    /// The CPU of `--rates`' raw sender [default: iokerneld's, standing in for another
    /// machine as the round-trip client does]. The servers' CPU instead leaves iokerneld's
    /// CPU to iokerneld, so that the rate shows what its NIC path takes per frame; the
    /// receiver then shares its CPU with the sender.
    #[arg(long)]
    rate_sender_cpu: Option<usize>,
    /// TCP round trips on one connection instead of UDP.
    #[arg(long)]
    tcp: bool,
    /// TCP connections per second instead: connect, one request and response, close.
    #[arg(long)]
    tcp_connections: bool,
    /// TCP bulk throughput instead, this many seconds per run: from a Linux sender, and
    /// between two Corral runtimes, each against its frame-rate ceiling.
    #[arg(long)]
    tcp_bulk: Option<f64>,
    /// Which paths `--tcp-bulk` measures.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [BulkPath::Tap, BulkPath::Local])]
    bulk_paths: Vec<BulkPath>,
    /// How the Linux client reaches Corral in the UDP echo, `--tcp` and `--rates`
    /// experiments: `tap`, `xdp` or both (`tap,xdp`). With `xdp`, `--rates` also measures
    /// the bare AF_XDP floor on the same interface.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [NicPath::Tap])]
    paths: Vec<NicPath>,
    /// Incast instead: `--samples` connections to an echo server each send one request at
    /// the same moment, `--reps` bursts, a Corral server parked before each.
    #[arg(long)]
    tcp_incast: bool,
    /// Memory per idle established TCP connection instead, server side, over `--samples`
    /// connections.
    #[arg(long)]
    tcp_idle_memory: bool,
    /// Each Corral TCP connection's send and receive buffer, in bytes (default: the
    /// runtime's).
    #[arg(long)]
    tcp_buffer: Option<usize>,

    /// iokerneld's `--share-quantum-us` (default: iokerneld's).
    #[arg(long)]
    share_quantum_us: Option<u64>,
    /// iokerneld's `--rx-backlog-frames` (default: iokerneld's; 0 drops what a runtime's
    /// buffers cannot take at once).
    #[arg(long)]
    rx_backlog_frames: Option<u64>,
}

/// How a Linux client reaches Corral.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum NicPath {
    /// Through iokerneld's TAP device.
    Tap,
    /// Through a veth pair, iokerneld's XDP program on this end.
    Xdp,
}

impl NicPath {
    fn wire(self) -> setup::Wire {
        match self {
            NicPath::Tap => setup::Wire::tap(),
            NicPath::Xdp => setup::Wire::xdp(),
        }
    }
}

/// A path that `--tcp-bulk` measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BulkPath {
    /// A Linux sender through the TAP device (and, for scale, Linux to Linux over veth).
    Tap,
    /// A Linux sender in a namespace through a veth pair and iokerneld's XDP program.
    Xdp,
    /// One Corral runtime to another through iokerneld's local switch.
    Local,
}

/// Percentiles in microseconds: p50, p99, p99.9.
pub type Tails = [f64; 3];

pub fn tails(hist: &Histogram<u64>) -> Tails {
    [0.5, 0.99, 0.999].map(|q| hist.value_at_quantile(q) as f64 / 1e3)
}

/// The TCP payload of a full-size segment on a 1500-byte MTU (the MSS each side announces).
const MSS: f64 = 1460.0;
/// The UDP payload of a full-size frame on a 1500-byte MTU.
const FULL_UDP_PAYLOAD: usize = 1472;

fn main() {
    let args = Args::parse();
    let binary = args.iokerneld.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("iokerneld")
    });
    if let Some(seconds) = args.rates {
        rates(&args, &binary, seconds);
    } else if let Some(seconds) = args.tcp_bulk {
        tcp_bulk(&args, &binary, seconds);
    } else if args.tcp_idle_memory {
        let m = tcp::idle_memory(&args, &binary);
        println!(
            "memory per idle established TCP connection, {} connections",
            args.samples
        );
        println!(
            "linux: both ends' sockets (kernel slab) {:>8.0} B, so about {:.0} B an end",
            m.linux_pair,
            m.linux_pair / 2.0
        );
        println!(
            "corral server (resident)               {:>8.0} B",
            m.corral_server
        );
        println!(
            "ratio to one Linux end                  {:>7.2}x",
            m.corral_server / (m.linux_pair / 2.0)
        );
    } else if args.tcp_incast {
        let (linux, corral) = tcp::incast(&args, &binary);
        println!(
            "TCP incast: {} connections send {} B each at once, then a new connection's probe; \
             {} bursts",
            args.samples, args.payload, args.reps
        );
        println!(
            "{:<14} {:>16} {:>14} {:>16}",
            "server", "all answered ms", "probe us", "retransmissions"
        );
        let m = |b: &[tcp::Burst], f: fn(&tcp::Burst) -> f64| median(b.iter().map(f).collect());
        for (name, bursts) in [("linux (veth)", &linux), ("corral (TAP)", &corral)] {
            println!(
                "{name:<14} {:>16.2} {:>14.0} {:>16}   runs {:.2?} ms",
                m(bursts, |b| b.all_answered_us) / 1e3,
                m(bursts, |b| b.probe_us),
                bursts.iter().map(|b| b.retransmits).sum::<u64>(),
                bursts
                    .iter()
                    .map(|b| b.all_answered_us / 1e3)
                    .collect::<Vec<_>>()
            );
        }
        println!(
            "ratio          {:>15.2}x {:>13.2}x",
            m(&corral, |b| b.all_answered_us) / m(&linux, |b| b.all_answered_us),
            m(&corral, |b| b.probe_us) / m(&linux, |b| b.probe_us)
        );
    } else if args.tcp_connections {
        let (linux, corral) = tcp::connections(&args, &binary);
        println!(
            "TCP connections per second (connect, {} B each way, close), {} connections x {} reps",
            args.payload, args.samples, args.reps
        );
        let (l, c) = (median(linux.clone()), median(corral.clone()));
        println!("linux (veth)  {l:>10.0} /s   runs {linux:.0?}");
        println!("corral (TAP)  {c:>10.0} /s   runs {corral:.0?}");
        println!("ratio         {:>9.2}x", c / l);
    } else if args.tcp {
        let wires: Vec<_> = args.paths.iter().map(|p| p.wire()).collect();
        let (linux, corral) = tcp::round_trip(&args, &binary, &wires);
        round_trip_table(
            &format!(
                "TCP round trip on one connection, {} B each way, {} samples x {} reps",
                args.payload, args.samples, args.reps
            ),
            &linux,
            &wires
                .iter()
                .map(|w| w.name)
                .zip(&corral)
                .collect::<Vec<_>>(),
        );
    } else {
        let linux = udp::linux_echo(&args);
        let wires: Vec<_> = args.paths.iter().map(|p| p.wire()).collect();
        let corral: Vec<_> = wires
            .iter()
            .map(|w| udp::corral_echo(&args, &binary, w))
            .collect();
        let mode = if args.parked_gap_us == 0 {
            "spinning kthread, back-to-back requests".to_string()
        } else {
            format!("parked kthread, {} us between requests", args.parked_gap_us)
        };
        round_trip_table(
            &format!(
                "UDP echo round trip, {} B payload, {} samples x {} reps ({mode})",
                args.payload, args.samples, args.reps
            ),
            &linux,
            &wires
                .iter()
                .map(|w| w.name)
                .zip(&corral)
                .collect::<Vec<_>>(),
        );
    }
}

/// Linux's tails, then each Corral path's with its ratios to Linux's; with two paths, the
/// second's ratios to the first's as well.
fn round_trip_table(title: &str, linux: &[Tails], corral: &[(&str, &Vec<Tails>)]) {
    println!("{title}");
    println!(
        "{:<14} {:>10} {:>10} {:>10}",
        "server", "p50 us", "p99 us", "p99.9 us"
    );
    let m = |tails: &[Tails], i: usize| median(tails.iter().map(|t| t[i]).collect());
    let row = |name: &str, tails: &[Tails]| {
        println!(
            "{name:<14} {:>10.1} {:>10.1} {:>10.1}",
            m(tails, 0),
            m(tails, 1),
            m(tails, 2)
        );
    };
    row("linux (veth)", linux);
    for (name, tails) in corral {
        row(&format!("corral ({name})"), tails);
    }
    let ratio = |name: &str, a: &[Tails], b: &[Tails]| {
        println!(
            "{name:<14} {:>9.2}x {:>9.2}x {:>9.2}x",
            m(a, 0) / m(b, 0),
            m(a, 1) / m(b, 1),
            m(a, 2) / m(b, 2)
        );
    };
    for (name, tails) in corral {
        ratio(&format!("{name} / linux"), tails, linux);
    }
    if let [(first, a), (second, b)] = corral {
        ratio(&format!("{second} / {first}"), b, a);
    }
}

fn rates(args: &Args, binary: &std::path::Path, seconds: f64) {
    println!(
        "one-way UDP rates, {} B payload, {seconds} s flat out, {:.2} s per paced rate",
        args.payload,
        seconds / 4.0
    );
    let len = args.payload + 42;
    let mut rows = Vec::new();
    for path in &args.paths {
        let wire = path.wire();
        let (figures, syscalls) = udp::wire_raw_rates(args, binary, &wire, len, seconds);
        rows.push((
            format!("{} -> iokerneld -> Corral", wire.name),
            figures,
            syscalls,
        ));
    }
    if args.paths.contains(&NicPath::Xdp) {
        let (figures, syscalls) = udp::xdp_floor(args, len, seconds);
        rows.push(("XDP -> bare AF_XDP socket".to_owned(), figures, syscalls));
    }
    let sender_cpu = args.rate_sender_cpu.unwrap_or(args.iokernel_cpu);
    let shares = if sender_cpu == args.iokernel_cpu {
        "iokerneld's CPU (the floor's receiver's)".to_owned()
    } else if sender_cpu == args.server_cpu {
        "the Corral receiver's CPU (the floor has none there)".to_owned()
    } else {
        format!("CPU {sender_cpu}")
    };
    println!(
        "raw {len}-byte frames from a Linux packet socket (64 a sendmmsg, 16 flows) on CPU \
         {sender_cpu}; flat out: the sender shares {shares} under the fair scheduler; paced: \
         the best of a ladder, the sender at the remote client's priority"
    );
    println!(
        "{:<30} {:>11} {:>11} {:>11} {:>11} {:>14} {:>10}",
        "path", "flat rx/s", "sent/s", "paced rx/s", "offered/s", "syscalls/frame", "sys us/fr"
    );
    for (name, f, cost) in &rows {
        println!(
            "{name:<30} {:>11.0} {:>11.0} {:>11.0} {:>11.0} {:>14.4} {:>10}",
            f[0],
            f[1],
            f[2],
            f[3],
            cost.syscalls,
            cost.system_us
                .map_or_else(|| "-".to_owned(), |us| format!("{us:.2}"))
        );
    }
    let (local_rx, local_tx) = udp::local_rate(args, binary, args.payload, seconds);
    println!(
        "Corral runtime -> iokerneld local switch -> Corral runtime: {local_rx:.0} \
         received/s ({local_tx:.0} sent/s)"
    );
}

/// Bulk TCP against two ceilings measured in the same run: full-size frames per second
/// through each path (UDP datagrams of a full frame's payload, counted at a Corral receiver:
/// the best of a ladder of paced rates, each a quarter of `seconds`), times the MSS.
fn tcp_bulk(args: &Args, binary: &std::path::Path, seconds: f64) {
    println!(
        "TCP bulk throughput, {seconds} s x {} reps; MB/s = 10^6 bytes of payload per second",
        args.reps
    );
    let wires: Vec<setup::Wire> = args
        .bulk_paths
        .iter()
        .filter_map(|p| match p {
            BulkPath::Tap => Some(setup::Wire::tap()),
            BulkPath::Xdp => Some(setup::Wire::xdp()),
            BulkPath::Local => None,
        })
        .collect();
    if !wires.is_empty() {
        let linux = tcp::bulk_linux(args, seconds);
        println!(
            "Linux sender -> Linux sink over veth:          {:>8.1} MB/s  runs {:.1?}",
            mb(median(linux.clone())),
            linux.iter().map(|&b| mb(b)).collect::<Vec<_>>()
        );
        for wire in &wires {
            tcp_bulk_wire(args, binary, wire, seconds, median(linux.clone()));
        }
    }
    if args.bulk_paths.contains(&BulkPath::Local) {
        tcp_bulk_local(args, binary, seconds);
    }
}

fn mb(bytes_per_s: f64) -> f64 {
    bytes_per_s / 1e6
}

/// A Linux sender to a Corral sink behind `wire`, against the wire's full-size frame ceiling
/// and Linux to Linux.
fn tcp_bulk_wire(
    args: &Args,
    binary: &std::path::Path,
    wire: &setup::Wire,
    seconds: f64,
    linux: f64,
) {
    let corral = tcp::bulk_corral(args, binary, wire, seconds);
    let frames: Vec<f64> = (0..args.reps)
        .map(|_| udp::wire_ceiling(args, binary, wire, FULL_UDP_PAYLOAD, seconds / 4.0).0)
        .collect();
    let ceiling = median(frames.clone()) * MSS;
    println!(
        "Linux sender -> {:<4} -> Corral sink:            {:>8.1} MB/s  runs {:.1?}  ({:.2}x Linux)",
        wire.name,
        mb(median(corral.clone())),
        corral.iter().map(|&b| mb(b)).collect::<Vec<_>>(),
        median(corral.clone()) / linux
    );
    println!(
        "  {} ceiling: {:.0} full-size frames/s x {MSS} B = {:.1} MB/s (runs {frames:.0?}); \
         ratio {:.2}x",
        wire.name,
        median(frames.clone()),
        mb(ceiling),
        median(corral.clone()) / ceiling
    );
}

/// Between two runtimes each TCP run is followed at once by a ceiling run, so that a pair sees
/// the same state of the host; the ratio is reported per pair as well as of the medians.
fn tcp_bulk_local(args: &Args, binary: &std::path::Path, seconds: f64) {
    let (local, local_frames): (Vec<f64>, Vec<f64>) = (0..args.reps)
        .map(|_| {
            let tcp = tcp::bulk_between_runtimes(args, binary, seconds);
            let frames = udp::local_ceiling(args, binary, FULL_UDP_PAYLOAD, seconds / 4.0).0;
            (tcp, frames)
        })
        .unzip();
    let local_ceiling = median(local_frames.clone()) * MSS;
    let pair_ratios: Vec<f64> = local
        .iter()
        .zip(&local_frames)
        .map(|(tcp, frames)| tcp / (frames * MSS))
        .collect();
    println!(
        "Corral runtime -> local switch -> Corral sink: {:>8.1} MB/s  runs {:.1?}",
        mb(median(local.clone())),
        local.iter().map(|&b| mb(b)).collect::<Vec<_>>()
    );
    println!(
        "  local ceiling: {:.0} full-size frames/s x {MSS} B = {:.1} MB/s (runs {local_frames:.0?}); \
         ratio {:.2}x (pairs {pair_ratios:.2?}, median {:.2}x)",
        median(local_frames.clone()),
        mb(local_ceiling),
        median(local.clone()) / local_ceiling,
        median(pair_ratios.clone()),
    );
}
