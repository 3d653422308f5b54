//! Corral's network stack against Linux's, measured in one run from the same Linux client:
//!
//! * **Corral**: a server in a Corral runtime under iokerneld (TAP device backend), its kthread
//!   spinning on a guaranteed core (`--parked-gap-us` instead lets it park between requests,
//!   so that each request must first wake it);
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

/// A path that `--tcp-bulk` measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum BulkPath {
    /// A Linux sender through the TAP device (and, for scale, Linux to Linux over veth).
    Tap,
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
        let (linux, corral) = tcp::round_trip(&args, &binary);
        round_trip_table(
            &format!(
                "TCP round trip on one connection, {} B each way, {} samples x {} reps",
                args.payload, args.samples, args.reps
            ),
            &linux,
            &corral,
        );
    } else {
        let linux = udp::linux_echo(&args);
        let corral = udp::corral_echo(&args, &binary);
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
            &corral,
        );
    }
}

fn round_trip_table(title: &str, linux: &[Tails], corral: &[Tails]) {
    println!("{title}");
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "server", "p50 us", "p99 us", "p99.9 us"
    );
    let m = |tails: &[Tails], i: usize| median(tails.iter().map(|t| t[i]).collect());
    for (name, tails) in [("linux", linux), ("corral", corral)] {
        println!(
            "{name:<10} {:>10.1} {:>10.1} {:>10.1}",
            m(tails, 0),
            m(tails, 1),
            m(tails, 2)
        );
    }
    let ratio = |i: usize| m(corral, i) / m(linux, i);
    println!(
        "{:<10} {:>9.2}x {:>9.2}x {:>9.2}x",
        "ratio",
        ratio(0),
        ratio(1),
        ratio(2)
    );
}

fn rates(args: &Args, binary: &std::path::Path, seconds: f64) {
    let (tap_rx, tap_tx) = udp::tap_rate(args, binary, args.payload, seconds);
    let (local_rx, local_tx) = udp::local_rate(args, binary, args.payload, seconds);
    println!(
        "one-way UDP rates, {} B payload, {seconds} s each",
        args.payload
    );
    println!(
        "Linux sender -> TAP -> iokerneld -> Corral receiver: {tap_rx:.0} received/s \
         ({tap_tx:.0} sent/s)"
    );
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
    if args.bulk_paths.contains(&BulkPath::Tap) {
        tcp_bulk_tap(args, binary, seconds);
    }
    if args.bulk_paths.contains(&BulkPath::Local) {
        tcp_bulk_local(args, binary, seconds);
    }
}

fn mb(bytes_per_s: f64) -> f64 {
    bytes_per_s / 1e6
}

fn tcp_bulk_tap(args: &Args, binary: &std::path::Path, seconds: f64) {
    let (linux, corral) = tcp::bulk_linux_sender(args, binary, seconds);
    let tap_frames: Vec<f64> = (0..args.reps)
        .map(|_| udp::tap_ceiling(args, binary, FULL_UDP_PAYLOAD, seconds / 4.0).0)
        .collect();
    let tap_ceiling = median(tap_frames.clone()) * MSS;
    println!(
        "Linux sender -> Linux sink over veth:          {:>8.1} MB/s  runs {:.1?}",
        mb(median(linux.clone())),
        linux.iter().map(|&b| mb(b)).collect::<Vec<_>>()
    );
    println!(
        "Linux sender -> TAP -> Corral sink:            {:>8.1} MB/s  runs {:.1?}",
        mb(median(corral.clone())),
        corral.iter().map(|&b| mb(b)).collect::<Vec<_>>()
    );
    println!(
        "  TAP ceiling: {:.0} full-size frames/s x {MSS} B = {:.1} MB/s (runs {tap_frames:.0?}); \
         ratio {:.2}x",
        median(tap_frames.clone()),
        mb(tap_ceiling),
        median(corral.clone()) / tap_ceiling
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
