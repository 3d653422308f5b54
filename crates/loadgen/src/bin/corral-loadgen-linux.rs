//! Open-loop load generator on Linux sockets: the baseline client for Corral's latency
//! experiments. Plays a seeded schedule against a UDP echo or spin server (`--protocol spin`,
//! the default) or a memcached server over TCP or UDP (`--protocol memcache-tcp` /
//! `memcache-udp`) or a DNS server (`--protocol dns --queries FILE`, dnsperf's query format),
//! and reports latency measured from each request's scheduled send time.
//!
//! ```text
//! corral-loadgen-linux --server 127.0.0.1:5000 --rate 100000 --duration 5 \
//!     --service exp:10us --clients 64 --cpu 0 --json out.json
//! corral-loadgen-linux --protocol memcache-tcp --server 127.0.0.1:11211 --rate 100000 \
//!     --duration 5 --keys 100000 --key-size fb_key --value-size fb_value --get-fraction 0.9 \
//!     --connections 16 --threads 2 --json out.json
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use serde::Serialize;

use corral_loadgen::client::{self, ClientConfig};
use corral_loadgen::dns::{DnsClientConfig, QueryMix};
use corral_loadgen::kv::{KvChecks, Popularity, SizeDist};
use corral_loadgen::kvclient::{self, KvClientConfig, Transport};
use corral_loadgen::queueing::{self, QueueingBound};
use corral_loadgen::{AdherencePolicy, Arrivals, ScheduleConfig, ServiceDist, Summary};

/// What the requests are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Protocol {
    /// corral-loadgen's echo request over UDP (spin or any echo server).
    Spin,
    /// memcached's text protocol over TCP.
    MemcacheTcp,
    /// memcached's text protocol over UDP, with its 8-byte frame header.
    MemcacheUdp,
    /// DNS queries over UDP from --queries, matched by DNS ID.
    Dns,
}

#[derive(Parser, Debug)]
#[command(
    about = "Open-loop load generator (Linux sockets): spin over UDP, memcached over TCP or UDP, DNS over UDP"
)]
struct Args {
    /// Which requests to send.
    #[arg(long, value_enum, default_value = "spin")]
    protocol: Protocol,
    /// Server address, IP:PORT.
    #[arg(long)]
    server: SocketAddr,
    /// Target rate in requests per second.
    #[arg(long)]
    rate: f64,
    /// Seconds of requests to schedule.
    #[arg(long)]
    duration: f64,
    /// Service time each request asks for: `exp:10us`, `const:10us`, `bimodal`
    /// (90% 5us / 10% 55us) or `bimodal:SHORT:LONG:LONG_FRACTION`.
    #[arg(long, default_value = "exp:10us")]
    service: ServiceDist,
    /// Inter-arrival gaps: `poisson` or `constant`.
    #[arg(long, default_value = "poisson")]
    arrivals: Arrivals,
    /// Simulated clients; each request is tagged with one.
    #[arg(long, default_value_t = 16)]
    clients: u32,
    /// Sockets (source ports) the clients are spread over [default: min(clients, 16)].
    #[arg(long)]
    flows: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CPU to pin the sender thread to.
    #[arg(long)]
    cpu: Option<usize>,
    /// CPU to pin the receiver thread to [default: the sender's CPU, so the client uses one
    /// core; give another CPU to keep receiving off the sender's core].
    #[arg(long)]
    rx_cpu: Option<usize>,
    /// Bytes of each request's UDP payload.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// Milliseconds after the last send that responses still count.
    #[arg(long, default_value_t = 100)]
    grace_ms: u64,
    /// The generator fell behind if its p99 send lateness exceeds this many microseconds.
    #[arg(long, default_value_t = 10.0)]
    max_p99_lateness_us: f64,
    /// Also compute the zero-overhead FCFS latency bound for this schedule (takes a second or
    /// so of CPU after the run).
    #[arg(long)]
    bound: bool,
    /// Write the configuration and summary as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// memcached: keys in the key space.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// memcached: key sizes: `fixed:N`, `uniform:[MIN:]MAX`, `gev:LOC:SCALE:SHAPE`,
    /// `gpareto:LOC:SCALE:SHAPE`, `fb_key` (mutilate's ETC key sizes).
    #[arg(long, default_value = "fixed:30")]
    key_size: SizeDist,
    /// memcached: value sizes, in the same forms, or `fb_value` (mutilate's ETC value sizes).
    #[arg(long, default_value = "fixed:200")]
    value_size: SizeDist,
    /// memcached: largest value; larger draws are clamped [default: 1 MiB over TCP, 60000
    /// over UDP].
    #[arg(long)]
    max_value: Option<u32>,
    /// memcached: fraction of requests that are gets (the rest are sets).
    #[arg(long, default_value_t = 0.9)]
    get_fraction: f64,
    /// memcached: key popularity, `uniform` or `zipf:S`.
    #[arg(long, default_value = "uniform")]
    popularity: Popularity,
    /// memcached: TCP connections (or UDP sockets); key K goes over connection K % N.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// memcached: threads; connection C belongs to thread C % T.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// memcached: CPUs to pin the threads to, comma-separated (thread I on the I-th, round
    /// robin) [default: --cpu if given].
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// memcached: do not set every key before the run (gets of unset keys then miss).
    #[arg(long)]
    no_preload: bool,
    /// DNS: the queries, in dnsperf's format (`NAME TYPE` per line), asked in order, round
    /// and round.
    #[arg(long, required_if_eq("protocol", "dns"))]
    queries: Option<PathBuf>,
    /// DNS: EDNS UDP payload size to offer (no EDNS if absent).
    #[arg(long)]
    edns: Option<u16>,
}

#[derive(Serialize)]
struct Report<'a> {
    protocol: Protocol,
    config: &'a ClientConfig,
    summary: &'a Summary,
    bound: Option<QueueingBound>,
}

/// A memcached run's JSON: the same `summary` as a spin run, and the reply checks.
#[derive(Serialize)]
struct KvJson<'a> {
    protocol: Protocol,
    config: &'a KvClientConfig,
    summary: &'a Summary,
    checks: &'a KvChecks,
    preload_s: f64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("corral-loadgen-linux: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration < 1e6) {
        return Err(format!(
            "invalid duration = {}: expected seconds in (0, 1e6)",
            args.duration
        )
        .into());
    }
    if !(args.max_p99_lateness_us.is_finite() && args.max_p99_lateness_us >= 0.0) {
        return Err(format!(
            "invalid max-p99-lateness-us = {}: expected a non-negative number",
            args.max_p99_lateness_us
        )
        .into());
    }
    let mut schedule =
        ScheduleConfig::new(args.rate, std::time::Duration::from_secs_f64(args.duration))
            .arrivals(args.arrivals)
            .service(args.service)
            .clients(args.clients)
            .seed(args.seed);
    schedule.first_id = 1;
    let policy = AdherencePolicy {
        max_p99_lateness_ns: (args.max_p99_lateness_us * 1e3) as u64,
        ..AdherencePolicy::default()
    };
    let transport = match args.protocol {
        Protocol::Spin => None,
        Protocol::MemcacheTcp => Some(Transport::Tcp),
        Protocol::MemcacheUdp => Some(Transport::Udp),
        Protocol::Dns => return run_dns(args, schedule, policy),
    };
    if let Some(transport) = transport {
        return run_kv(args, transport, schedule, policy);
    }
    let mut cfg = ClientConfig::new(args.server, schedule);
    cfg.payload = args.payload;
    cfg.flows = args.flows.unwrap_or(args.clients.clamp(1, 16) as usize);
    cfg.cpu = args.cpu;
    cfg.rx_cpu = args.rx_cpu.or(args.cpu);
    cfg.grace_ns = args.grace_ms.saturating_mul(1_000_000);
    cfg.policy = policy;

    let summary = client::run(&cfg)?;
    println!("{summary}");
    let bound = if args.bound {
        let b = queueing::bound(&cfg.schedule)?;
        if let Some(sim) = b.simulated {
            println!(
                "zero-overhead FCFS bound at load {:.2}: p99.9 {}",
                b.load,
                corral_loadgen::recorder::human_ns(sim.sojourn.p999_ns)
            );
        }
        Some(b)
    } else {
        None
    };
    if let Some(path) = &args.json {
        let report = Report {
            protocol: args.protocol,
            config: &cfg,
            summary: &summary,
            bound,
        };
        let text = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// A DNS run's JSON: the same `summary` as a spin run, and the responses by RCODE.
#[derive(Serialize)]
struct DnsJson<'a> {
    protocol: Protocol,
    config: &'a DnsClientConfig,
    queries: &'a std::path::Path,
    summary: &'a Summary,
    dns: &'a corral_loadgen::dns::DnsCounts,
}

fn run_dns(
    args: &Args,
    schedule: ScheduleConfig,
    policy: AdherencePolicy,
) -> Result<(), Box<dyn std::error::Error>> {
    let path = args
        .queries
        .as_deref()
        .ok_or("--protocol dns needs --queries FILE")?;
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mix = QueryMix::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let cfg = DnsClientConfig {
        server: args.server,
        schedule,
        flows: args.flows.unwrap_or(args.clients.clamp(1, 16) as usize),
        edns: args.edns,
        cpu: args.cpu,
        rx_cpu: args.rx_cpu.or(args.cpu),
        grace_ns: args.grace_ms.saturating_mul(1_000_000),
        policy,
    };
    let report = corral_loadgen::dns::run(&cfg, &mix)?;
    println!("{report}");
    if let Some(out) = &args.json {
        let json = DnsJson {
            protocol: args.protocol,
            config: &cfg,
            queries: path,
            summary: &report.summary,
            dns: &report.counts,
        };
        let text = serde_json::to_string_pretty(&json)?;
        std::fs::write(out, text + "\n").map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    Ok(())
}

fn run_kv(
    args: &Args,
    transport: Transport,
    schedule: ScheduleConfig,
    policy: AdherencePolicy,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = KvClientConfig::new(args.server, transport, schedule);
    cfg.workload.keys = args.keys;
    cfg.workload.key_size = args.key_size;
    cfg.workload.value_size = args.value_size;
    if let Some(max) = args.max_value {
        cfg.workload.max_value = max;
    }
    cfg.workload.get_fraction = args.get_fraction;
    cfg.workload.popularity = args.popularity;
    cfg.workload.seed = args.seed;
    cfg.connections = args.connections;
    cfg.threads = args.threads;
    cfg.cpus = if args.cpus.is_empty() {
        args.cpu.into_iter().collect()
    } else {
        args.cpus.clone()
    };
    cfg.preload = !args.no_preload;
    cfg.grace_ns = args.grace_ms.saturating_mul(1_000_000);
    cfg.policy = policy;
    let report = kvclient::run(&cfg)?;
    println!("{report}");
    if let Some(path) = &args.json {
        let json = KvJson {
            protocol: args.protocol,
            config: &cfg,
            summary: &report.summary,
            checks: &report.checks,
            preload_s: report.preload_s,
        };
        let text = serde_json::to_string_pretty(&json)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}
