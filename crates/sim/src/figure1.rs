//! The paper's Figure 1, extended: at each offered load (in cores' worth of work), the bound on
//! a 1 ms allocator's CPU efficiency ([`crate::bound`]) beside Corral's, simulated.
//!
//! Corral's point is one run of the simulator ([`crate::run_point`]) with the Shenango policy,
//! the configured costs (the measured set by default), one latency-critical runtime
//! (guaranteed 1 core, up to every core) serving `exp` service times of the bound's mean, and
//! by default no batch runtime. Its efficiency is the paper's, cycles of application work over
//! cycles allocated to the application: service time run over the core time the runtime held,
//! from each wake decision to its kthread's park (the wake-up, the spin before parking and the
//! per-request dispatch count as held, not as work). Without a batch runtime a core comes from
//! the idle pool, as for the paper's runtime running alone. With one (`batch_runtimes: 1`) the
//! hand-over and the batch kthread's preemption are charged too, but the policy then shares
//! the cores above the guarantee with the batch runtime a share quantum (1 ms) at a time, so
//! the latency-critical runtime waits for cores and its p99.9 leaves the bound's limit far
//! behind: its efficiency would not be one that meets the limit.
//!
//! The machine has as many cores as the bound needs at the highest load (at least
//! `max_cores`), so that Corral may hold as many cores as the 1 ms allocator is given.

use crate::bound::{self, BoundParams, BoundPoint};
use crate::config::SimConfig;
use crate::costs::Costs;
use crate::workload::{LoadSchedule, ServiceDist};

/// What a Figure 1 sweep runs.
#[derive(Clone, Debug)]
pub struct Figure1Config {
    /// Offered loads in cores' worth of work, each positive and at most `max_cores`.
    pub loads: Vec<f64>,
    pub max_cores: u16,
    pub bound: BoundParams,
    pub costs: Costs,
    /// Batch runtimes beside the latency-critical one (0 or more).
    pub batch_runtimes: u16,
    /// Simulated time of arrivals per Corral point.
    pub duration_ns: u64,
    pub seed: u64,
}

impl Figure1Config {
    /// The default loads: 0.1, then every quarter core up to `max_cores`.
    pub fn default_loads(max_cores: u16) -> Vec<f64> {
        let quarters = u32::from(max_cores) * 4;
        std::iter::once(0.1)
            .chain((1..=quarters).map(|q| f64::from(q) / 4.0))
            .collect()
    }
}

/// One load of the figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure1Row {
    pub bound: BoundPoint,
    /// Service time run / core time held by the latency-critical runtime.
    pub corral_efficiency: f64,
    pub corral_p999_ns: u64,
    /// Mean cores the latency-critical runtime held.
    pub corral_cores: f64,
    /// Requests that had not completed when the run stopped (0 unless overloaded).
    pub corral_unfinished: u64,
}

/// The cores of the simulated machine: enough for the bound's largest `n`.
pub fn machine_cores(max_cores: u16, bound: &[BoundPoint]) -> u16 {
    let needed = bound.iter().map(|point| point.cores).max().unwrap_or(0);
    u16::try_from(needed).unwrap_or(u16::MAX).max(max_cores)
}

/// Runs the bound and Corral at every load.
pub fn run(config: &Figure1Config) -> Result<Vec<Figure1Row>, String> {
    if config.max_cores == 0 {
        return Err("--max-cores must be at least 1".into());
    }
    if let Some(&bad) = config
        .loads
        .iter()
        .find(|&&load| !(load > 0.0 && load <= f64::from(config.max_cores)))
    {
        return Err(format!(
            "load {bad}: each load must be above 0 and at most --max-cores ({})",
            config.max_cores
        ));
    }
    let bounds = bound::sweep(&config.bound, &config.loads);
    let cores = machine_cores(config.max_cores, &bounds);
    let mut rows = Vec::with_capacity(bounds.len());
    for point in bounds {
        let mut sim = SimConfig::simple(cores, 1, 1, config.batch_runtimes, 0.0);
        sim.costs = config.costs.clone();
        sim.service = ServiceDist::Exponential {
            mean_ns: config.bound.service_mean_ns,
        };
        // The simulator's load is a fraction of the machine's capacity.
        sim.load = LoadSchedule::constant(point.load / f64::from(cores));
        sim.duration_ns = config.duration_ns;
        sim.seed = config.seed;
        let result = crate::run_point(sim)?;
        rows.push(Figure1Row {
            bound: point,
            corral_efficiency: result.efficiency,
            corral_p999_ns: result.p999_ns,
            corral_cores: result.lc_cores_mean,
            corral_unfinished: result.unfinished,
        });
    }
    Ok(rows)
}

pub const CSV_HEADER: &str =
    "load,bound_cores,bound_efficiency,corral_efficiency,corral_p999_ns,corral_cores_held";

/// One row per load.
pub fn csv(rows: &[Figure1Row]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for row in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{}\n",
            row.bound.load,
            row.bound.cores,
            row.bound.efficiency,
            row.corral_efficiency,
            row.corral_p999_ns,
            row.corral_cores
        ));
    }
    out
}

/// The table printed on stdout.
pub fn table(rows: &[Figure1Row]) -> String {
    let mut out = format!(
        "{:>6} {:>7} {:>9} {:>10} {:>12} {:>12}\n",
        "load", "bound n", "bound eff", "Corral eff", "Corral p99.9", "Corral cores"
    );
    for row in rows {
        out.push_str(&format!(
            "{:>6.2} {:>7} {:>9.3} {:>10.3} {:>9.1} us {:>12.2}\n",
            row.bound.load,
            row.bound.cores,
            row.bound.efficiency,
            row.corral_efficiency,
            row.corral_p999_ns as f64 / 1e3,
            row.corral_cores
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_loads_reach_max_cores() {
        let loads = Figure1Config::default_loads(2);
        assert_eq!(loads, vec![0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]);
    }

    #[test]
    fn loads_beyond_the_machine_are_refused() {
        let config = Figure1Config {
            loads: vec![3.0],
            max_cores: 2,
            bound: BoundParams::default(),
            costs: Costs::measured(),
            batch_runtimes: 1,
            duration_ns: 1_000_000,
            seed: 1,
        };
        assert!(run(&config).unwrap_err().contains("at most --max-cores"));
    }
}
