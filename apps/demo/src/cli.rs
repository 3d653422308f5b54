//! Command-line options.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use corral_loadgen::ServiceDist;
use corral_loadgen::kv::SizeDist;

use corral_bench_dns::linux::LinuxDns;

use crate::results::System;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Experiment {
    /// Latency and batch throughput against offered load, Corral and Linux side by side (the
    /// paper's Figure 4).
    Sweep,
    /// The same sweep on Corral at several allocation intervals (the paper's Figure 8).
    Intervals,
    /// A sudden step up in load and back, p99.9 per window around the step (the paper's
    /// Figure 5), on Corral.
    Burst,
    /// The memcached co-location experiment (the paper's Figure 4 for memcached): corral-kv
    /// with the batch job on Corral, Debian's memcached with the batch job at SCHED_IDLE on
    /// Linux, and corral-kv alone on a dedicated core, each driven to saturation with the same
    /// memcached workload over TCP.
    Kv,
    /// The DNS co-location experiment (the paper's gdnsd with swaptions): corral-dns with the
    /// batch job on Corral, a Linux DNS server from Debian (`--dns-server`, gdnsd by default)
    /// with the batch job at SCHED_IDLE, and corral-dns alone on a dedicated core, each driven
    /// to saturation with the same queries over UDP.
    Dns,
}

impl Experiment {
    /// Whether this is a server co-location experiment (a ladder of rates to saturation
    /// against one latency objective), rather than a spin-server sweep.
    pub fn is_server_ladder(self) -> bool {
        matches!(self, Experiment::Kv | Experiment::Dns)
    }
}

/// Where the load comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DemoNic {
    /// Corral: iokerneld's built-in generator (`nic gen`); Linux: corral-loadgen-linux over
    /// loopback.
    #[default]
    Gen,
    /// Both: corral-loadgen-linux in a network namespace, over a veth pair whose other end
    /// iokerneld takes with `nic xdp` (Corral) or Linux serves on (Linux).
    Xdp,
}

/// The veth pair of `--nic xdp`: iokerneld's end (root namespace, Linux's address `.1`) and the
/// client namespace's end (`.2`); the Corral spin server is at `.3`.
pub const XDP_SUBNET: [u8; 3] = [10, 93, 0];

/// How iokerneld takes the core back from the Corral batch job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BatchPreemption {
    /// Its kthread runs in Linux's idle class, and iokerneld wakes the taker on top of it:
    /// no request, no signal (the runtime's `PreemptionMode::IdleClass`).
    IdleClass,
    /// iokerneld asks it for the core: the Monte Carlo job cedes at its next preemption point
    /// (within `--cede-grace-us`, else the signal); a `--batch-cmd` job is signalled at once.
    Asked,
}

/// How iokerneld hands a core from one kthread to another (its `--handover`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Handover {
    Local,
    Remote,
}

impl Handover {
    pub fn name(self) -> &'static str {
        match self {
            Handover::Local => "local",
            Handover::Remote => "remote",
        }
    }
}

/// Shows, on this machine, a latency-critical UDP spin server keeping microsecond tail latency
/// while a batch job takes the cycles it leaves idle, under Corral and under Linux.
///
/// Corral: iokerneld busy-polls CPU `--iokernel-cpu` and plays the load from its built-in
/// generator (`nic gen`); spin and batch are Corral runtimes sharing CPU `--app-cpu`. Linux: spin
/// on a UDP socket and batch threads at SCHED_IDLE pinned to `--app-cpu`, load from
/// corral-loadgen-linux over loopback on `--iokernel-cpu`. Must run as root (iokerneld pins
/// threads, moves them between cores and signals them).
#[derive(Clone, Debug, Parser, serde::Serialize)]
#[command(name = "corral-demo", version, about, long_about)]
pub struct Args {
    /// Which experiment to run.
    #[arg(long, value_enum, default_value_t = Experiment::Sweep)]
    pub experiment: Experiment,

    /// Systems to measure, comma-separated (`corral`, `linux`, `dedicated`: spin alone on
    /// Corral with a spinning kthread on a guaranteed core, the floor) [default: all three
    /// for sweep and kv, corral for intervals and burst].
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<System>,

    /// Service time each request asks for: `exp:10us`, `const:10us` or `bimodal` (90% 5 us,
    /// 10% 55 us).
    #[arg(long, default_value = "exp:10us")]
    #[serde(serialize_with = "display")]
    pub service: ServiceDist,

    /// Offered loads as fractions of one core, comma-separated; the rate is load / mean
    /// service time [default: 0.1,0.2,...,0.9; with --quick 0.2,0.5].
    #[arg(long, value_delimiter = ',')]
    pub loads: Vec<f64>,

    /// Seconds of load at each point [default: 12 for sweep, 6 for intervals (five sweeps), 5
    /// for kv; with --quick 1].
    #[arg(long)]
    pub point_secs: Option<f64>,

    /// Seconds at the start of each point left out of the batch throughput [default: 1; with
    /// --quick 0.2].
    #[arg(long)]
    pub warmup_secs: Option<f64>,

    /// Seconds the batch job runs alone (server idle) for its standalone throughput
    /// [default: 4; with --quick 1].
    #[arg(long)]
    pub alone_secs: Option<f64>,

    /// iokerneld's allocation interval in microseconds (sweep and burst).
    #[arg(long, default_value_t = 5)]
    pub interval_us: u64,

    /// How long the Corral spin server's idle kthread polls before parking, in microseconds
    /// [default: the runtime's, 2]. Each park costs two core hand-overs when the next request
    /// comes; polling about one hand-over's time keeps the server's core when requests arrive
    /// closer together than that, at the batch job's expense.
    #[arg(long)]
    pub spin_before_park_us: Option<u64>,

    /// Pass `--handover MODE` to iokerneld (`local` or `remote`); without it iokerneld uses
    /// its own default.
    #[arg(long, value_enum, value_name = "MODE")]
    pub handover: Option<Handover>,

    /// iokerneld's core allocation policy (`--policy`): `shenango` (its default), `static`
    /// (each runtime keeps its guarantee for good: the batch job, with none, never runs), or
    /// any other policy iokerneld knows.
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,

    /// One of the policy's own options for iokerneld (`--policy-option KEY=VALUE`, e.g.
    /// `interval_us=5000` for `arachne`); repeat for more. Checked against the policy before
    /// anything runs.
    #[arg(long = "policy-option", value_name = "KEY=VALUE")]
    pub policy_options: Vec<String>,

    /// iokerneld's `--cede-grace-us`: how long a batch kthread asked for its core may take to
    /// reach a preemption point (the batch job passes one every few microseconds) before it is
    /// sent the preemption signal; 0 signals at once.
    #[arg(long, default_value_t = 20)]
    pub cede_grace_us: u64,

    /// How iokerneld takes the core back from the Corral batch job [default: asked for the
    /// Monte Carlo job in the spin sweeps, which cedes at a preemption point within
    /// microseconds and no interrupt, and the taker is woken on its own CPU (the lowest
    /// median); idle-class in the key-value experiment, where each request is a hand-over and
    /// a batch kthread that is never parked keeps more of the core (measured in
    /// docs/benchmarks.md), and for a `--batch-cmd` program, which has no preemption points, so
    /// that a hand-over is one wake-up rather than a signal, a park and a wake-up].
    #[arg(long, value_enum)]
    pub batch_preemption: Option<BatchPreemption>,

    /// Allocation intervals to compare, microseconds (intervals experiment).
    #[arg(long, value_delimiter = ',', default_value = "5,25,50,100,1000")]
    pub intervals: Vec<u64>,

    /// Milliseconds per latency window reported by the Corral generator.
    #[arg(long, default_value_t = 10)]
    pub window_ms: u64,

    /// Burst: the base load before and after the step.
    #[arg(long, default_value_t = 0.1)]
    pub burst_base: f64,

    /// Burst: the load during the step.
    #[arg(long, default_value_t = 0.7)]
    pub burst_peak: f64,

    /// Burst: seconds at each of base, peak, base [default: 1; with --quick 0.3].
    #[arg(long)]
    pub burst_secs: Option<f64>,

    /// Burst: seconds of the steady run at the peak rate [default: 4; with --quick 0.5].
    #[arg(long)]
    pub steady_secs: Option<f64>,

    /// Simulated clients (request tags) of the generators; in the key-value experiment, the
    /// TCP connections each generator opens.
    #[arg(long, default_value_t = 64)]
    pub clients: u32,

    /// Seed of the request schedules (the same for both systems, so both get the same
    /// arrivals and service times).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Bytes of each request's UDP payload.
    #[arg(long, default_value_t = 64)]
    pub payload: usize,

    /// Milliseconds after a point's last request that answers still count.
    #[arg(long, default_value_t = 100)]
    pub grace_ms: u64,

    /// A short run for tests: two load points, short points, a few seconds in all.
    #[arg(long)]
    pub quick: bool,

    /// Run every system unshielded, for comparison: iokerneld gets `--shield off`, and the
    /// Linux baseline's load-generator CPU is not shielded, its load generator and server stay
    /// in the fair class. By default (as root) iokerneld keeps its core to itself with its loop
    /// at SCHED_FIFO and the latency-critical kthreads at SCHED_FIFO, and the runner gives the
    /// Linux baseline the same: its load generator's CPU shielded, the load generator and the
    /// server at the same SCHED_FIFO priorities.
    #[arg(long)]
    pub no_shield: bool,

    /// Directory for results.json, results.csv, plots and logs [default:
    /// target/demo/<timestamp>/, next to the runner's own executable].
    #[arg(long)]
    pub out: Option<PathBuf>,

    /// Directory holding iokerneld, spin, batch and corral-loadgen-linux [default: the
    /// directory of this executable].
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,

    /// The CPU iokerneld (or the Linux load generator) runs on.
    #[arg(long, default_value_t = 0)]
    pub iokernel_cpu: usize,

    /// The CPU the spin server and the batch job share.
    #[arg(long, default_value_t = 1)]
    pub app_cpu: usize,

    /// Address of the Corral spin runtime (behind iokerneld's generator).
    #[arg(long, default_value = "10.99.0.2:5000")]
    pub corral_addr: std::net::SocketAddrV4,

    /// Loopback address of the Linux spin server.
    #[arg(long, default_value = "127.0.0.1:5000")]
    pub linux_addr: std::net::SocketAddrV4,

    /// Where the load comes from: `gen` (iokerneld's built-in generator for Corral, a load
    /// generator over loopback for Linux) or `xdp` (for both, corral-loadgen-linux in a
    /// network namespace behind a veth pair: Corral's iokerneld takes its end of the pair with
    /// `--nic xdp`, Linux's spin server listens on it). Sweep only.
    #[arg(long, value_enum, default_value_t = DemoNic::Gen)]
    pub nic: DemoNic,

    /// With `--nic xdp`: the load generator's CPU [default: --iokernel-cpu, which it then
    /// shares with iokerneld's loop, unshielded, when the machine has no third CPU].
    #[arg(long)]
    pub client_cpu: Option<usize>,

    /// iokerneld's control socket [default: a fresh path under /run/corral/ for this run].
    #[arg(long)]
    pub socket: Option<PathBuf>,

    /// Run this command as the batch job instead of the Monte Carlo `batch` app, e.g.
    /// `--batch-cmd "xz -T2 -9 -c /data/big.tar"`: under `corral-run` (one kthread, no
    /// guarantee) for Corral, at SCHED_IDLE pinned to --app-cpu for Linux. Its throughput is
    /// the CPU time its processes receive (read from /proc, in CPU microseconds per second), so
    /// the program needs no cooperation; its standard output is discarded. Words are split at
    /// whitespace, with '...' and "..." quoting and no other shell syntax. It must keep running
    /// for the whole demo.
    #[arg(long, value_name = "COMMAND")]
    pub batch_cmd: Option<String>,

    /// Key-value and DNS experiments: offered rates in requests per second, comma-separated, rising;
    /// each system stops after two points in a row show it saturated [default:
    /// 10k, 20k, 40k, 60k, 80k, 100k, 125k, 150k, 200k, 250k, 300k, 400k, 500k, 650k, 800k,
    /// 1M; with --quick 5k,10k].
    #[arg(long, value_delimiter = ',', value_name = "RPS,...")]
    pub rates: Vec<f64>,

    /// Key-value and DNS experiments: the rate of the unloaded point that measures each
    /// server's median latency; the Linux server's sets the objective.
    #[arg(long, default_value_t = 1000.0, value_name = "RPS")]
    pub unloaded_rate: f64,

    /// Key-value and DNS experiments: the p99 latency objective every system is held to, as a
    /// multiple of the Linux server's unloaded median (without Linux in --systems, of the first
    /// system's).
    #[arg(long, default_value_t = 10.0)]
    pub slo_factor: f64,

    /// Key-value experiment: keys in the key space (every key is set before a run when the
    /// generator preloads).
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,

    /// Key-value experiment: key sizes (`fixed:N`, `uniform:[MIN:]MAX`, `fb_key`, ...).
    #[arg(long, default_value = "fixed:30")]
    #[serde(serialize_with = "display")]
    pub key_size: SizeDist,

    /// Key-value experiment: value sizes (`fixed:N`, `fb_value` for mutilate's ETC sizes,
    /// ...).
    #[arg(long, default_value = "fixed:200")]
    #[serde(serialize_with = "display")]
    pub value_size: SizeDist,

    /// Key-value experiment: the fraction of requests that are gets (the rest are sets).
    #[arg(long, default_value_t = 0.9)]
    pub get_fraction: f64,

    /// Key-value experiment: the TCP port of corral-kv, on --corral-addr's IP.
    #[arg(long, default_value_t = 11211)]
    pub kv_port: u16,

    /// Key-value experiment: the loopback address memcached listens on (not 11211, which a
    /// memcached system service may hold).
    #[arg(long, default_value = "127.0.0.1:11411")]
    pub memcached_addr: std::net::SocketAddrV4,

    /// Key-value experiment: the memcached executable (Debian's 1.6.18 package, which
    /// scripts/setup.sh installs).
    #[arg(long, default_value = "/usr/bin/memcached")]
    pub memcached: PathBuf,

    /// DNS experiment: the Linux server Corral is compared with: `gdnsd` (the server the paper
    /// ported), `nsd` or `knot`, from Debian, with one server thread.
    #[arg(long, default_value = "gdnsd", value_name = "SERVER")]
    #[serde(serialize_with = "display")]
    pub dns_server: LinuxDns,

    /// DNS experiment: host names in the zone (each with an A record; every other one an AAAA,
    /// every tenth a CNAME to it).
    #[arg(long, default_value_t = 10_000)]
    pub dns_names: usize,

    /// DNS experiment: queries in the query file both generators ask in order, round and round
    /// (existing names and types, CNAMEs, NODATA and NXDOMAIN in dnsperf's usual proportions).
    #[arg(long, default_value_t = 1_000)]
    pub dns_queries: usize,

    /// DNS experiment: the UDP port of corral-dns, on --corral-addr's IP.
    #[arg(long, default_value_t = 53)]
    pub dns_port: u16,

    /// DNS experiment: the loopback address the Linux DNS server listens on.
    #[arg(long, default_value = "127.0.0.1:5353")]
    pub linux_dns_addr: std::net::SocketAddrV4,

    /// Draw the plots of an earlier run again and measure nothing: from DIR/results.json (any
    /// experiment) or, without it, from a sweep's DIR/results.csv (titled with --service, which
    /// the CSV does not record); into --out [default: DIR].
    #[arg(long, value_name = "DIR")]
    pub replot: Option<PathBuf>,

    /// TrueType font for the plots' text.
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    pub font: PathBuf,
}

fn display<T: std::fmt::Display, S: serde::Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// The options with every default filled in and checked.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    pub experiment: Experiment,
    pub systems: Vec<System>,
    #[serde(serialize_with = "display")]
    pub service: ServiceDist,
    pub mean_service_ns: f64,
    pub loads: Vec<f64>,
    pub point_secs: f64,
    pub warmup_secs: f64,
    pub alone_secs: f64,
    pub interval_us: u64,
    pub spin_before_park_us: Option<u64>,
    /// iokerneld's `--handover`, when given.
    pub handover: Option<Handover>,
    /// iokerneld's `--policy`, when given (a name iokerneld knows).
    pub policy: Option<String>,
    /// iokerneld's `--policy-option`s, `KEY=VALUE` each.
    pub policy_options: Vec<String>,
    pub cede_grace_us: u64,
    pub batch_preemption: BatchPreemption,
    pub intervals: Vec<u64>,
    pub window_ms: u64,
    pub burst_base: f64,
    pub burst_peak: f64,
    pub burst_secs: f64,
    pub steady_secs: f64,
    pub clients: u32,
    pub seed: u64,
    pub payload: usize,
    pub grace_ms: u64,
    pub quick: bool,
    /// Whether the systems are shielded (not `--no-shield`).
    pub shield: bool,
    pub iokernel_cpu: usize,
    pub app_cpu: usize,
    pub corral_addr: std::net::SocketAddrV4,
    pub linux_addr: std::net::SocketAddrV4,
    pub nic: DemoNic,
    /// The load generator's CPU with `--nic xdp`.
    pub client_cpu: usize,
    /// `--batch-cmd`, split into words; `None` runs the Monte Carlo `batch` app.
    pub batch_cmd: Option<Vec<String>>,
    /// The key-value experiment's workload and ladder (the ladder also the DNS experiment's).
    pub kv: KvPlan,
    /// The DNS experiment's servers and queries.
    pub dns: DnsPlan,
}

/// The most queries in the DNS experiment's query file: at most 30 bytes a line, they fit in
/// the 64 KiB request that carries them to iokerneld's generator.
pub const MAX_DNS_QUERIES: usize = 1_500;

/// The DNS experiment's plan: the Linux server, the zone and query file sizes, and where the
/// servers listen. Its ladder and objective are the key-value experiment's flags.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DnsPlan {
    #[serde(serialize_with = "display")]
    pub linux_server: LinuxDns,
    pub names: usize,
    pub queries: usize,
    /// corral-dns's address behind iokerneld's generator.
    pub corral_addr: std::net::SocketAddrV4,
    pub linux_addr: std::net::SocketAddrV4,
}

/// The key-value experiment's plan: the workload both generators play, the rates, and the
/// latency objective.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KvPlan {
    /// Offered rates (requests per second), rising.
    pub rates: Vec<f64>,
    pub unloaded_rate: f64,
    pub slo_factor: f64,
    pub keys: u64,
    #[serde(serialize_with = "display")]
    pub key_size: SizeDist,
    #[serde(serialize_with = "display")]
    pub value_size: SizeDist,
    pub get_fraction: f64,
    /// corral-kv's address behind iokerneld's generator.
    pub corral_addr: std::net::SocketAddrV4,
    pub memcached_addr: std::net::SocketAddrV4,
    pub memcached: PathBuf,
}

/// The key-value experiment's default ladder of offered rates (requests per second): from a
/// light load to beyond what one core serves.
pub const KV_RATES: [f64; 16] = [
    10e3, 20e3, 40e3, 60e3, 80e3, 100e3, 125e3, 150e3, 200e3, 250e3, 300e3, 400e3, 500e3, 650e3,
    800e3, 1e6,
];

impl Plan {
    /// Requests per second for a load.
    pub fn rate(&self, load: f64) -> f64 {
        load * 1e9 / self.mean_service_ns
    }
}

fn positive(name: &str, v: f64) -> Result<f64, String> {
    if v.is_finite() && v > 0.0 && v < 1e6 {
        Ok(v)
    } else {
        Err(format!(
            "invalid {name} = {v}: expected seconds in (0, 1e6)"
        ))
    }
}

impl Args {
    pub fn plan(&self) -> Result<Plan, String> {
        let q = self.quick;
        let systems = if self.systems.is_empty() {
            match self.experiment {
                Experiment::Sweep | Experiment::Kv | Experiment::Dns => {
                    vec![System::Corral, System::Linux, System::Dedicated]
                }
                Experiment::Intervals | Experiment::Burst => vec![System::Corral],
            }
        } else {
            let mut s = self.systems.clone();
            s.sort();
            s.dedup();
            s
        };
        if self.policy.as_deref() == Some("static") && systems.contains(&System::Corral) {
            return Err(
                "invalid --policy static with Corral's co-location: each runtime keeps only its \
                 guaranteed cores, and the batch job has none, so it would never run; measure \
                 the static policy with --systems dedicated (the server alone on its \
                 guaranteed core)"
                    .into(),
            );
        }
        if matches!(self.experiment, Experiment::Intervals | Experiment::Burst)
            && systems != [System::Corral]
        {
            return Err(format!(
                "invalid systems = {}: the {} experiment runs on Corral only{}",
                systems
                    .iter()
                    .map(|s| s.name())
                    .collect::<Vec<_>>()
                    .join(","),
                match self.experiment {
                    Experiment::Intervals => "intervals",
                    _ => "burst",
                },
                if self.experiment == Experiment::Burst {
                    " (corral-loadgen-linux cannot change rate mid-run or report windows)"
                } else {
                    " (Linux has no allocation interval)"
                }
            ));
        }
        let loads = if self.loads.is_empty() {
            if q {
                vec![0.2, 0.5]
            } else {
                (1..=9).map(|k| k as f64 / 10.0).collect()
            }
        } else {
            self.loads.clone()
        };
        if let Some(bad) = loads
            .iter()
            .find(|l| !(l.is_finite() && **l > 0.0 && **l < 1.5))
        {
            return Err(format!(
                "invalid loads = {bad}: expected fractions of one core in (0, 1.5)"
            ));
        }
        for (name, v) in [
            ("burst-base", self.burst_base),
            ("burst-peak", self.burst_peak),
        ] {
            if !(v.is_finite() && v > 0.0 && v < 1.5) {
                return Err(format!(
                    "invalid {name} = {v}: expected a fraction of one core in (0, 1.5)"
                ));
            }
        }
        let mean_service_ns = self.service.mean_ns();
        if mean_service_ns.is_nan() || mean_service_ns < 100.0 {
            return Err(format!(
                "invalid service = {}: expected a mean of at least 100 ns",
                self.service
            ));
        }
        if self.intervals.is_empty() || self.intervals.contains(&0) || self.interval_us == 0 {
            return Err("invalid intervals: expected microseconds of at least 1".into());
        }
        if self.window_ms == 0 {
            return Err("invalid window-ms = 0: expected at least 1".into());
        }
        if self.clients == 0 {
            return Err("invalid clients = 0: expected at least 1".into());
        }
        if self.iokernel_cpu == self.app_cpu {
            return Err(format!(
                "invalid app-cpu = {}: must differ from iokernel-cpu",
                self.app_cpu
            ));
        }
        if self.nic == DemoNic::Xdp && self.experiment != Experiment::Sweep {
            return Err(format!(
                "--nic xdp runs the sweep only, not --experiment {:?}",
                self.experiment
            )
            .to_lowercase());
        }
        let client_cpu = self.client_cpu.unwrap_or(self.iokernel_cpu);
        if client_cpu == self.app_cpu {
            return Err(format!(
                "invalid client-cpu = {client_cpu}: the load generator must not share the \
                 application CPU it measures"
            ));
        }
        // A shield would move the load generator off iokerneld's CPU, onto the one measured.
        let client_beside_loop = self.nic == DemoNic::Xdp && client_cpu == self.iokernel_cpu;
        let shield = !(self.no_shield || client_beside_loop);
        let [a, b, c] = XDP_SUBNET;
        let (corral_addr, linux_addr) = match self.nic {
            DemoNic::Gen => (self.corral_addr, self.linux_addr),
            DemoNic::Xdp => (
                std::net::SocketAddrV4::new([a, b, c, 3].into(), self.corral_addr.port()),
                std::net::SocketAddrV4::new([a, b, c, 1].into(), self.linux_addr.port()),
            ),
        };
        let pick =
            |v: Option<f64>, normal: f64, quick: f64| v.unwrap_or(if q { quick } else { normal });
        let normal_point = match self.experiment {
            Experiment::Intervals => 6.0,
            Experiment::Kv | Experiment::Dns => 5.0,
            Experiment::Sweep | Experiment::Burst => 12.0,
        };
        let kv = self.kv_plan()?;
        let point_secs = positive("point-secs", pick(self.point_secs, normal_point, 1.0))?;
        let warmup_secs = pick(self.warmup_secs, 1.0, 0.2);
        if !(warmup_secs.is_finite() && warmup_secs >= 0.0 && warmup_secs < point_secs) {
            return Err(format!(
                "invalid warmup-secs = {warmup_secs}: expected 0 to less than point-secs ({point_secs})"
            ));
        }
        Ok(Plan {
            experiment: self.experiment,
            systems,
            service: self.service,
            mean_service_ns,
            loads,
            point_secs,
            warmup_secs,
            alone_secs: positive("alone-secs", pick(self.alone_secs, 4.0, 1.0))?,
            interval_us: self.interval_us,
            spin_before_park_us: self.spin_before_park_us,
            handover: self.handover,
            policy: self
                .policy
                .as_deref()
                .map(|name| {
                    corral_policy::policies::KNOWN
                        .iter()
                        .any(|entry| entry.name == name)
                        .then(|| name.to_owned())
                        .ok_or_else(|| {
                            format!(
                                "invalid --policy: {}",
                                corral_policy::UnknownPolicy { name: name.into() }
                            )
                        })
                })
                .transpose()?,
            policy_options: self.checked_policy_options()?,
            cede_grace_us: self.cede_grace_us,
            batch_preemption: self.batch_preemption.unwrap_or(
                if self.batch_cmd.is_some() || self.experiment.is_server_ladder() {
                    BatchPreemption::IdleClass
                } else {
                    BatchPreemption::Asked
                },
            ),
            intervals: self.intervals.clone(),
            window_ms: self.window_ms,
            burst_base: self.burst_base,
            burst_peak: self.burst_peak,
            burst_secs: positive("burst-secs", pick(self.burst_secs, 1.0, 0.3))?,
            steady_secs: positive("steady-secs", pick(self.steady_secs, 4.0, 0.5))?,
            clients: self.clients,
            seed: self.seed,
            payload: self.payload,
            grace_ms: self.grace_ms,
            quick: q,
            shield,
            iokernel_cpu: self.iokernel_cpu,
            app_cpu: self.app_cpu,
            corral_addr,
            linux_addr,
            nic: self.nic,
            client_cpu,
            batch_cmd: self
                .batch_cmd
                .as_deref()
                .map(|c| {
                    split_words(c)
                        .filter(|w| !w.is_empty())
                        .ok_or_else(|| format!("invalid batch-cmd = {c:?}: {}", BATCH_CMD_SYNTAX))
                })
                .transpose()?,
            kv,
            dns: self.dns_plan()?,
        })
    }

    /// `--policy-option`s, refused here if iokerneld's policy (its default when `--policy` is
    /// not given) would refuse them.
    fn checked_policy_options(&self) -> Result<Vec<String>, String> {
        let mut options = Vec::new();
        for pair in &self.policy_options {
            options.push(
                corral_policy::parse_option(pair).ok_or_else(|| {
                    format!("invalid --policy-option {pair:?}: expected KEY=VALUE")
                })?,
            );
        }
        let settings = corral_policy::PolicySettings {
            options,
            ..corral_policy::PolicySettings::default()
        };
        let policy = self.policy.as_deref().unwrap_or("shenango");
        corral_policy::check(policy, &settings)
            .map_err(|e| format!("invalid --policy-option: {e}"))?;
        Ok(self.policy_options.clone())
    }

    fn dns_plan(&self) -> Result<DnsPlan, String> {
        if self.dns_names == 0 {
            return Err("invalid dns-names = 0: expected at least 1".into());
        }
        // The query file travels in iokerneld's gen request, which holds 64 KiB.
        if !(1..=MAX_DNS_QUERIES).contains(&self.dns_queries) {
            return Err(format!(
                "invalid dns-queries = {}: expected 1 to {MAX_DNS_QUERIES} (the query file goes \
                 to iokerneld's generator in its run request)",
                self.dns_queries
            ));
        }
        if self.dns_port == 0 {
            return Err("invalid dns-port = 0: expected a UDP port".into());
        }
        Ok(DnsPlan {
            linux_server: self.dns_server,
            names: self.dns_names,
            queries: self.dns_queries,
            corral_addr: std::net::SocketAddrV4::new(*self.corral_addr.ip(), self.dns_port),
            linux_addr: self.linux_dns_addr,
        })
    }

    fn kv_plan(&self) -> Result<KvPlan, String> {
        let rates = if !self.rates.is_empty() {
            self.rates.clone()
        } else if self.quick {
            vec![5e3, 10e3]
        } else {
            KV_RATES.to_vec()
        };
        let sane_rate = |r: f64| (1.0..=1e8).contains(&r);
        if let Some(bad) = rates.iter().find(|r| !sane_rate(**r)) {
            return Err(format!(
                "invalid rates = {bad}: expected requests per second in [1, 1e8]"
            ));
        }
        if rates.windows(2).any(|w| w[1] <= w[0]) {
            return Err(format!(
                "invalid rates = {}: expected rising rates",
                rates
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        if !sane_rate(self.unloaded_rate) {
            return Err(format!(
                "invalid unloaded-rate = {}: expected requests per second in [1, 1e8]",
                self.unloaded_rate
            ));
        }
        if !(self.slo_factor.is_finite() && self.slo_factor >= 1.0) {
            return Err(format!(
                "invalid slo-factor = {}: expected at least 1",
                self.slo_factor
            ));
        }
        if !(0.0..=1.0).contains(&self.get_fraction) {
            return Err(format!(
                "invalid get-fraction = {}: expected a fraction in [0, 1]",
                self.get_fraction
            ));
        }
        if self.keys == 0 {
            return Err("invalid keys = 0: expected at least 1".into());
        }
        if self.kv_port == 0 {
            return Err("invalid kv-port = 0: expected a TCP port".into());
        }
        Ok(KvPlan {
            rates,
            unloaded_rate: self.unloaded_rate,
            slo_factor: self.slo_factor,
            keys: self.keys,
            key_size: self.key_size,
            value_size: self.value_size,
            get_fraction: self.get_fraction,
            corral_addr: std::net::SocketAddrV4::new(*self.corral_addr.ip(), self.kv_port),
            memcached_addr: self.memcached_addr,
            memcached: self.memcached.clone(),
        })
    }
}

const BATCH_CMD_SYNTAX: &str =
    "expected a program and its arguments, separated by whitespace, with balanced quotes";

/// Splits a command line into words at whitespace; '...' and "..." quote (no escapes, no other
/// shell syntax). `None` for an unbalanced quote.
pub fn split_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_default();
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    if quote.is_some() {
        return None;
    }
    words.extend(word);
    Some(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_xdp_moves_both_servers_onto_the_veth_subnet_and_runs_the_sweep_only() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["corral-demo"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).unwrap().plan()
        };
        let p = parse(&["--nic", "xdp"]).unwrap();
        assert_eq!(p.nic, DemoNic::Xdp);
        assert_eq!(p.corral_addr.to_string(), "10.93.0.3:5000");
        assert_eq!(p.linux_addr.to_string(), "10.93.0.1:5000");
        // The client shares iokerneld's CPU: nothing is shielded.
        assert_eq!(p.client_cpu, 0);
        assert!(!p.shield);
        let p = parse(&[
            "--nic",
            "xdp",
            "--iokernel-cpu",
            "0",
            "--app-cpu",
            "1",
            "--client-cpu",
            "2",
        ])
        .unwrap();
        assert!(p.shield);
        assert_eq!(p.client_cpu, 2);
        let err = parse(&["--nic", "xdp", "--client-cpu", "1"]).unwrap_err();
        assert!(err.contains("client-cpu = 1"), "{err}");
        let err = parse(&["--nic", "xdp", "--experiment", "kv"]).unwrap_err();
        assert!(err.contains("sweep only"), "{err}");
        let p = parse(&[]).unwrap();
        assert_eq!(p.nic, DemoNic::Gen);
        assert_eq!(p.corral_addr.to_string(), "10.99.0.2:5000");
        assert!(p.shield);
    }

    #[test]
    fn batch_commands_split_into_words() {
        assert_eq!(
            split_words("  xz -T2  -c 'my file' \"a b\"c ''").unwrap(),
            ["xz", "-T2", "-c", "my file", "a bc", ""]
        );
        assert_eq!(split_words("xz 'open"), None);
        let p = plan(&["--batch-cmd", "pigz -p 2 -c f"]).unwrap();
        assert_eq!(p.batch_cmd.unwrap(), ["pigz", "-p", "2", "-c", "f"]);
        assert!(plan(&["--batch-cmd", "   "]).is_err());
        assert!(plan(&["--batch-cmd", "xz \"f"]).is_err());
        assert_eq!(plan(&[]).unwrap().batch_cmd, None);
    }

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let mut v = vec!["corral-demo"];
        v.extend_from_slice(args);
        Args::try_parse_from(v).map_err(|e| e.to_string())?.plan()
    }

    #[test]
    fn defaults_are_the_demo() {
        let p = plan(&[]).unwrap();
        assert_eq!(
            p.systems,
            vec![System::Corral, System::Linux, System::Dedicated]
        );
        assert_eq!(p.handover, None);
        assert_eq!(p.batch_preemption, BatchPreemption::Asked);
        let xz = plan(&["--batch-cmd", "xz -T2 -c /dev/urandom"]).unwrap();
        assert_eq!(xz.batch_preemption, BatchPreemption::IdleClass);
        assert_eq!(p.loads.len(), 9);
        assert!((p.rate(0.1) - 10_000.0).abs() < 1e-6);
        assert!((p.rate(0.9) - 90_000.0).abs() < 1e-6);
        let q = plan(&["--quick"]).unwrap();
        assert_eq!(q.loads, vec![0.2, 0.5]);
        assert!(q.point_secs <= 1.0);
    }

    #[test]
    fn the_policy_is_taken_and_checked_against_iokernelds() {
        assert_eq!(plan(&[]).unwrap().policy, None);
        assert_eq!(
            plan(&["--policy", "static", "--systems", "dedicated"])
                .unwrap()
                .policy
                .as_deref(),
            Some("static")
        );
        let err = plan(&["--policy", "static"]).unwrap_err();
        assert!(err.contains("would never run"), "{err}");
        let p = plan(&[
            "--policy",
            "arachne",
            "--systems",
            "dedicated",
            "--policy-option",
            "scale_up_load_factor=2",
        ])
        .unwrap();
        assert_eq!(p.policy_options, ["scale_up_load_factor=2"]);
        let err = plan(&["--policy-option", "interval_us=5"]).unwrap_err();
        assert!(
            err.contains("has no option \"interval_us\"") && err.contains("burst_sharing"),
            "{err}"
        );
        let err = plan(&["--policy-option", "burst_sharing"]).unwrap_err();
        assert!(err.contains("expected KEY=VALUE"), "{err}");
        let err = plan(&["--policy", "fastest"]).unwrap_err();
        assert!(
            err.contains("invalid --policy") && err.contains("\"shenango\""),
            "{err}"
        );
    }

    #[test]
    fn handover_mode_is_taken_and_checked() {
        let p = plan(&["--handover", "remote"]).unwrap();
        assert_eq!(p.handover, Some(Handover::Remote));
        assert_eq!(
            serde_json::to_value(&p).unwrap()["handover"],
            serde_json::json!("remote")
        );
        assert!(plan(&["--handover", "sideways"]).is_err());
        let p = plan(&["--systems", "dedicated,corral"]).unwrap();
        assert_eq!(p.systems, vec![System::Corral, System::Dedicated]);
    }

    #[test]
    fn kv_defaults_are_the_memcached_experiment() {
        let p = plan(&["--experiment", "kv"]).unwrap();
        assert_eq!(
            p.systems,
            vec![System::Corral, System::Linux, System::Dedicated]
        );
        assert_eq!(p.kv.rates, KV_RATES);
        assert_eq!(p.batch_preemption, BatchPreemption::IdleClass);
        let asked = plan(&["--experiment", "kv", "--batch-preemption", "asked"]).unwrap();
        assert_eq!(asked.batch_preemption, BatchPreemption::Asked);
        assert_eq!(p.kv.corral_addr.to_string(), "10.99.0.2:11211");
        assert_eq!(p.kv.key_size.to_string(), "fixed:30");
        assert_eq!(p.kv.value_size.to_string(), "fixed:200");
        assert_eq!(p.point_secs, 5.0);
        let q = plan(&["--experiment", "kv", "--quick", "--kv-port", "7000"]).unwrap();
        assert_eq!(q.kv.rates, [5e3, 10e3]);
        assert_eq!(q.kv.corral_addr.port(), 7000);
        let json = serde_json::to_value(&q).unwrap();
        assert_eq!(json["kv"]["value_size"], "fixed:200");
    }

    #[test]
    fn dns_defaults_are_gdnsd_and_a_query_file_that_fits_the_generator() {
        let p = plan(&["--experiment", "dns"]).unwrap();
        assert!(p.experiment.is_server_ladder());
        assert_eq!(
            p.systems,
            vec![System::Corral, System::Linux, System::Dedicated]
        );
        assert_eq!(p.dns.linux_server, LinuxDns::Gdnsd);
        assert_eq!(p.dns.corral_addr.to_string(), "10.99.0.2:53");
        assert_eq!(p.dns.linux_addr.to_string(), "127.0.0.1:5353");
        assert_eq!(p.kv.rates, KV_RATES);
        assert_eq!(p.batch_preemption, BatchPreemption::IdleClass);
        assert_eq!(p.point_secs, 5.0);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["dns"]["linux_server"], "gdnsd");
        // The largest query file allowed, at the longest lines the zone's names give, fits
        // the generator's request with room for the rest of the spec.
        let most = corral_bench_dns::workload::queries(10_000, MAX_DNS_QUERIES);
        assert!(
            serde_json::to_string(&most).unwrap().len() < 60 << 10,
            "{}",
            most.len()
        );
        let knot = plan(&["--experiment", "dns", "--dns-server", "knot"]).unwrap();
        assert_eq!(knot.dns.linux_server, LinuxDns::Knot);
        for (args, want) in [
            (&["--dns-server", "bind"][..], "nsd, knot or gdnsd"),
            (&["--dns-queries", "5000"], "invalid dns-queries"),
            (&["--dns-queries", "0"], "invalid dns-queries"),
            (&["--dns-names", "0"], "invalid dns-names"),
            (&["--dns-port", "0"], "invalid dns-port"),
        ] {
            let mut argv = vec!["--experiment", "dns"];
            argv.extend_from_slice(args);
            let err = plan(&argv).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }

    #[test]
    fn bimodal_has_a_10us_mean() {
        let p = plan(&["--service", "bimodal"]).unwrap();
        assert!((p.mean_service_ns - 10_000.0).abs() < 1e-6);
    }

    #[test]
    fn bad_options_are_refused_with_their_name() {
        for (args, want) in [
            (&["--loads", "0.5,2"][..], "invalid loads"),
            (&["--point-secs", "0"], "invalid point-secs"),
            (&["--warmup-secs", "20"], "invalid warmup-secs"),
            (
                &["--experiment", "burst", "--systems", "linux"],
                "invalid systems",
            ),
            (
                &["--experiment", "intervals", "--systems", "corral,linux"],
                "invalid systems",
            ),
            (
                &["--experiment", "burst", "--systems", "dedicated"],
                "invalid systems",
            ),
            (&["--systems", "corral,bogus"], "invalid system"),
            (&["--app-cpu", "0"], "invalid app-cpu"),
            (&["--rates", "2000,1000"], "invalid rates"),
            (&["--rates", "0"], "invalid rates"),
            (&["--slo-factor", "0.5"], "invalid slo-factor"),
            (&["--get-fraction", "1.5"], "invalid get-fraction"),
            (&["--keys", "0"], "invalid keys"),
            (&["--unloaded-rate", "0"], "invalid unloaded-rate"),
            (
                &["--intervals", "5,0", "--experiment", "intervals"],
                "invalid intervals",
            ),
        ] {
            let err = plan(args).unwrap_err();
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }
}
