//! What a run measured, as written to `results.json`: every point's raw generator output and
//! the command lines that produced it, next to the few numbers the tables and plots use.

use std::collections::BTreeMap;
use std::fmt;

use corral_loadgen::{Percentiles, Summary};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    /// Spin and batch as Corral runtimes under iokerneld, load from its `gen` backend.
    Corral,
    /// Spin on a Linux UDP socket, batch as Linux threads at SCHED_IDLE, load from
    /// `corral-loadgen-linux` over loopback.
    Linux,
    /// Spin alone on Corral with a spinning kthread on a guaranteed core, no batch job: the
    /// kernel-bypass floor that wastes the core whenever the server is idle.
    Dedicated,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Corral => "corral",
            System::Linux => "linux",
            System::Dedicated => "dedicated",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            System::Corral => "Corral",
            System::Linux => "Linux",
            System::Dedicated => "Dedicated",
        }
    }

    /// The one-letter prefix of its table columns.
    pub fn letter(self) -> &'static str {
        match self {
            System::Corral => "C",
            System::Linux => "L",
            System::Dedicated => "D",
        }
    }
}

impl fmt::Display for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.title())
    }
}

impl std::str::FromStr for System {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "corral" => Ok(System::Corral),
            "linux" => Ok(System::Linux),
            "dedicated" => Ok(System::Dedicated),
            _ => Err(format!(
                "invalid system = {s}: expected `corral`, `linux` or `dedicated`"
            )),
        }
    }
}

/// Latency over one slice of a run (the generator's `--window-ms`), times from the schedule's
/// start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub start_ms: f64,
    pub scheduled: u64,
    pub matched: u64,
    pub latency: Percentiles,
}

/// One load point of one system.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Offered load as a fraction of one core: rate times mean service time.
    pub load: f64,
    pub rate_rps: f64,
    /// The generator's command line.
    pub command: Vec<String>,
    pub summary: Summary,
    /// Batch throughput during the point, after its warm-up.
    pub batch_units_per_s: Option<f64>,
    /// `batch_units_per_s` over the same system's batch-alone throughput.
    pub batch_fraction: Option<f64>,
    /// Runner-time window (seconds) over which batch throughput was integrated.
    pub batch_window_s: Option<[f64; 2]>,
    /// Core reallocations per second during the point (Corral).
    pub reallocations_per_s: Option<f64>,
    /// Times iokerneld's loop went more than 50 µs without its CPU during the point, and the
    /// total time lost (Corral): every packet and generated request waits that long.
    #[serde(default)]
    pub iokerneld_stalls: Option<[u64; 2]>,
    /// The generator's own latency windows, when it reports them.
    #[serde(default)]
    pub windows: Vec<Window>,
    /// Other iokerneld processes (not the runner's) seen running at the start or end of the
    /// point: they compete for the same CPUs, so the point is suspect.
    #[serde(default)]
    pub interference: Vec<String>,
    /// CPUs' worth of time that processes the runner did not start used during the point
    /// (0.25 = a quarter of one CPU): other work on a machine the experiment should own.
    #[serde(default)]
    pub foreign_cpus: Option<f64>,
    /// Time the host machine took from the two CPUs during the point (steal).
    #[serde(default)]
    pub steal: Option<CpuSteal>,
    /// Kthreads demoted during the point for ignoring a preemption (Corral).
    #[serde(default)]
    pub demotions: Option<Demotions>,
    /// Everything the generator reported, as it reported it.
    pub raw: serde_json::Value,
}

/// CPU time the host machine (the hypervisor) ran something else while this guest's CPU
/// wanted to run: the steal column of `/proc/stat`, in its 10 ms ticks, over a point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuSteal {
    /// iokerneld's CPU (Corral), or the load generator's (Linux).
    pub iokernel_cpu_ms: f64,
    /// The CPU the spin server (and the batch job) run on.
    pub app_cpu_ms: f64,
}

/// Demotions during a point: kthreads that ignored a preemption and were demoted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Demotions {
    /// iokerneld's global counter.
    pub total: u64,
    /// Per runtime, by name (only runtimes registered at both ends of the point).
    pub by_runtime: BTreeMap<String, u64>,
}

/// The batch job alone on the application core (the server idle).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchAlone {
    pub units_per_s: f64,
    pub window_s: [f64; 2],
    /// CPUs' worth of other processes' time meanwhile (see [`Point::foreign_cpus`]).
    #[serde(default)]
    pub foreign_cpus: Option<f64>,
}

/// One system set up once and measured at a series of load points.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SystemRun {
    pub system: System,
    /// Allocation interval (Corral).
    pub interval_us: Option<u64>,
    /// Command lines of the long-running processes, by name.
    pub commands: BTreeMap<String, Vec<String>>,
    /// The spin server's calibration, as it printed it.
    pub spin_iterations_per_us: Option<f64>,
    pub batch_alone: Option<BatchAlone>,
    pub points: Vec<Point>,
    /// iokerneld's statistics at the end of the run (Corral).
    pub daemon_stats: Option<serde_json::Value>,
    /// Warnings and errors iokerneld logged during the run (Corral), e.g. demoted kthreads.
    #[serde(default)]
    pub daemon_warnings: Vec<String>,
    /// Each process's scheduling class and CPUs: the long-running ones' threads as seen after
    /// the first point, the load generator's as started.
    #[serde(default)]
    pub classes: Vec<String>,
    /// The shielding the system had: iokerneld's own line, or the runner's for Linux.
    #[serde(default)]
    pub shield: Option<String>,
}

/// The zero-overhead FCFS bound at one load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoundPoint {
    pub load: f64,
    pub rate_rps: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// From the M/M/1 formula, for Poisson arrivals and exponential service.
    pub mm1_p999_ns: Option<f64>,
    pub simulated_requests: u64,
}

/// The burst experiment: a step up in load and back, and a steady run at the high rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub system: System,
    pub base_load: f64,
    pub peak_load: f64,
    pub base_rps: f64,
    pub peak_rps: f64,
    /// Seconds at each of base, peak, base.
    pub phase_secs: f64,
    pub window_ms: f64,
    pub burst: Point,
    pub steady: Point,
}

/// One offered rate of the key-value experiment, for one system.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvPoint {
    /// Offered requests per second.
    pub rate_rps: f64,
    /// The light point that measures the server's unloaded median (memcached's sets the
    /// objective).
    pub unloaded: bool,
    /// The generator's command line.
    pub command: Vec<String>,
    pub summary: Summary,
    /// Replies the generator found wrong (a wrong value, an unexpected or unparsable reply, a
    /// client or server error) and connections that failed with requests in flight.
    pub errors: u64,
    /// The generator's reply checks, as it reported them.
    pub checks: serde_json::Value,
    /// Batch throughput during the point, after its warm-up.
    pub batch_units_per_s: Option<f64>,
    /// `batch_units_per_s` over the same system's batch-alone throughput: the batch share.
    pub batch_fraction: Option<f64>,
    pub batch_window_s: Option<[f64; 2]>,
    /// Core reallocations per second (Corral).
    pub reallocations_per_s: Option<f64>,
    /// iokerneld's loop stalls (count, total ns) during the point (Corral).
    pub iokerneld_stalls: Option<[u64; 2]>,
    /// Kthreads demoted for ignoring a preemption (Corral).
    pub demotions: Option<Demotions>,
    /// CPUs' worth of time the server process used over the generator's run (1.0 = its core
    /// was busy throughout).
    pub server_cpus: Option<f64>,
    /// CPUs' worth of iokerneld's time its built-in generator spent building requests and
    /// parsing replies (Corral and the dedicated floor).
    pub generator_cpus: Option<f64>,
    /// CPUs' worth of time processes the runner did not start used (see
    /// [`Point::foreign_cpus`]).
    pub foreign_cpus: Option<f64>,
    /// Other iokerneld processes seen at the start or end of the point (see
    /// [`Point::interference`]).
    #[serde(default)]
    pub interference: Vec<String>,
    pub steal: Option<CpuSteal>,
    /// Everything the generator reported, as it reported it.
    pub raw: serde_json::Value,
}

/// One system of the key-value experiment: its unloaded point, its objective and its ladder.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvSystemRun {
    pub system: System,
    /// Command lines of the long-running processes, by name.
    pub commands: BTreeMap<String, Vec<String>>,
    pub batch_alone: Option<BatchAlone>,
    pub unloaded: KvPoint,
    /// The p99 latency objective, the same for every system: the slo factor times memcached's
    /// unloaded median.
    pub slo_p99_ns: u64,
    /// The ladder's points, rising; the ladder stops after two points in a row saturated.
    pub points: Vec<KvPoint>,
    /// iokerneld's statistics at the end of the run (Corral and the dedicated floor).
    pub daemon_stats: Option<serde_json::Value>,
    #[serde(default)]
    pub daemon_warnings: Vec<String>,
    /// Each process's scheduling class and CPUs: the long-running ones' threads as seen after
    /// the first point, the load generator's as started.
    #[serde(default)]
    pub classes: Vec<String>,
    /// The shielding the system had: iokerneld's own line, or the runner's for Linux.
    #[serde(default)]
    pub shield: Option<String>,
}
