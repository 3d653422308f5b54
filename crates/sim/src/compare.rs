//! The allocation policies side by side at several machine sizes (`corral-sim compare`), in two
//! shapes from the Shenango paper (NSDI '19, §6):
//!
//! * **Figure 3's**: a latency-critical service's offered load rising step by step while batch
//!   runtimes fill the rest of the machine. One [`crate::run_point`] per core count, policy and
//!   load.
//! * **Figure 5's**: a load burst and back, one run per core count and policy on a
//!   [`LoadSchedule`], with the cores-over-time series.
//!
//! Provisioning is the same for every policy. Each latency-critical runtime is guaranteed what a
//! static (ZygOS/IX-style) deployment provisions it for the sweep's peak: the highest load, in
//! cores, split among the latency-critical runtimes and rounded up ([`Provision`]). Corral has
//! no best-effort class; beyond their guarantees runtimes are equals, so the guarantee is what
//! ranks a latency-critical runtime above the batch ones. Batch runtimes have no guarantee,
//! except under `static`, which dedicates each runtime exactly its guarantee: there they are
//! guaranteed the cores the latency-critical guarantees leave, as a static deployment gives the
//! rest of the machine to batch work.
//!
//! Every run starts with no core held, and the simulator measures from time 0, so a policy that
//! adds a core per decision (`arachne`, one per 50 ms) pays its ramp from one core inside the
//! whole-run figures. The sweep therefore also reports what the cores-over-time series shows
//! after a settling time ([`Settled`]); the paper ramps its load up and measures each load over
//! several seconds, which the settled figures stand in for. They cannot leave out a backlog
//! the ramp left behind: the simulator records a latency when a request completes, and its
//! core time from time 0, so only the series can be cut at a later time.
//!
//! Every run of a comparison uses the same seed, so the policies see the same arrivals and
//! service times; results do not depend on how many threads run the points.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use corral_policy::{PolicySettings, RuntimeSpec, policies::KNOWN};
use serde::Serialize;

use crate::config::{CedeMode, RuntimeConfig, RuntimeKind, SimConfig};
use crate::costs::Costs;
use crate::metrics::{PointResult, Sample};
use crate::report;
use crate::workload::{LoadSchedule, ServiceDist};

/// What a comparison runs.
#[derive(Clone, Debug)]
pub struct CompareConfig {
    /// Managed cores of each machine compared.
    pub core_counts: Vec<u16>,
    /// Policy names, as `corral_policy::build` knows them.
    pub policies: Vec<String>,
    /// `(policy, key, value)`: an option given to that policy only.
    pub policy_options: Vec<(String, String, String)>,
    /// The sweep's offered loads, fractions of the machine's capacity.
    pub loads: Vec<f64>,
    /// Latency-critical runtimes per core count: one value for every core count, or one per
    /// core count; `None`: [`default_runtimes`].
    pub lc_runtimes: Option<Vec<u16>>,
    /// Batch runtimes, as `lc_runtimes`.
    pub batch_runtimes: Option<Vec<u16>>,
    /// Each latency-critical runtime's guarantee, as `lc_runtimes`; `None`: the peak rule.
    pub lc_guaranteed: Option<Vec<u16>>,
    pub service: ServiceDist,
    pub costs: Costs,
    pub share_quantum_ns: u64,
    pub preemption_timeout_ns: Option<u64>,
    /// Simulated time of arrivals per sweep point.
    pub duration_ns: u64,
    /// Series samples at or before this time are left out of the settled figures.
    pub settle_ns: u64,
    /// How long a run may go on past its arrivals to complete requests.
    pub drain_limit_ns: u64,
    /// Period of the cores-over-time series (and of its p99.9 windows).
    pub sample_every_ns: u64,
    /// The burst run's load.
    pub burst: LoadSchedule,
    /// Simulated time of arrivals of the burst run.
    pub burst_duration_ns: u64,
    /// A window's p99.9 above this counts as the burst still hurting.
    pub burst_threshold_ns: u64,
    pub seed: u64,
}

/// Runtimes of one kind at `cores` cores when not given: one per 16 cores, at least one.
pub fn default_runtimes(cores: u16) -> u16 {
    (cores / 16).max(1)
}

/// How one machine size is provisioned, the same for every policy.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Provision {
    pub cores: u16,
    pub lc_runtimes: u16,
    pub batch_runtimes: u16,
    /// Each latency-critical runtime's guarantee.
    pub lc_guaranteed: u16,
    /// `peak` (the highest load's cores split among the latency-critical runtimes, rounded up)
    /// or `given`.
    pub lc_guaranteed_rule: &'static str,
    /// The highest offered load (sweep or burst), in cores.
    pub peak_load_cores: f64,
    /// Each batch runtime's guarantee under `static`: the cores the latency-critical guarantees
    /// leave, split evenly, the first ones taking the remainder. Under the other policies batch
    /// runtimes have no guarantee.
    pub static_batch_guaranteed: Vec<u16>,
}

impl Provision {
    fn batch_guaranteed(&self, policy: &str, index: usize) -> u16 {
        if policy == "static" {
            self.static_batch_guaranteed[index]
        } else {
            0
        }
    }

    /// One line saying how the machine is provisioned.
    pub fn describe(&self) -> String {
        let rule = if self.lc_guaranteed_rule == "peak" {
            format!(
                "the peak rule: {:.2} cores of load at the highest load, over {} runtime(s), \
                 rounded up",
                self.peak_load_cores, self.lc_runtimes
            )
        } else {
            "given with --lc-guaranteed".into()
        };
        format!(
            "{} cores: {} latency-critical runtime(s) guaranteed {} core(s) each ({rule}), up to \
             {}; {} batch runtime(s), guaranteed 0 (under static: {:?}, the cores left)",
            self.cores,
            self.lc_runtimes,
            self.lc_guaranteed,
            self.cores,
            self.batch_runtimes,
            self.static_batch_guaranteed
        )
    }
}

/// One value per core count from a list of one value or one per core count.
fn per_core_count(
    flag: &str,
    values: &Option<Vec<u16>>,
    core_counts: &[u16],
    default: impl Fn(u16) -> u16,
) -> Result<Vec<Option<u16>>, String> {
    match values {
        None => Ok(core_counts.iter().map(|&c| Some(default(c))).collect()),
        Some(list) if list.len() == 1 => Ok(vec![Some(list[0]); core_counts.len()]),
        Some(list) if list.len() == core_counts.len() => {
            Ok(list.iter().copied().map(Some).collect())
        }
        Some(list) => Err(format!(
            "{flag}: {} values for {} core counts (give one value, or one per --cores entry)",
            list.len(),
            core_counts.len()
        )),
    }
}

impl CompareConfig {
    /// The default loads: 0.1 to 0.9 by 0.1.
    pub fn default_loads() -> Vec<f64> {
        (1..=9).map(|tenth| f64::from(tenth) / 10.0).collect()
    }

    /// The default burst, Figure 5's shape at this scale: load 0.1 for 0.5 s, 0.6 for 0.5 s,
    /// then 0.1 again (the paper holds each level for a second).
    pub const DEFAULT_BURST: &'static str = "0s:0.1,500ms:0.6,1s:0.1";

    /// The settings of one policy: the daemon's shared ones and that policy's options.
    fn settings(&self, policy: &str) -> PolicySettings {
        PolicySettings {
            preemption_timeout: self.preemption_timeout_ns,
            share_quantum: self.share_quantum_ns,
            options: self
                .policy_options
                .iter()
                .filter(|(name, _, _)| name == policy)
                .map(|(_, key, value)| (key.clone(), value.clone()))
                .collect(),
        }
    }

    /// Checks everything a run would trip over, naming the flag, and works out each machine
    /// size's provisioning. Every error is the input's.
    pub fn provisions(&self) -> Result<Vec<Provision>, String> {
        if self.core_counts.is_empty() {
            return Err("--cores: give at least one core count".into());
        }
        if self.core_counts.contains(&0) {
            return Err("--cores: every core count must be at least 1".into());
        }
        if self.policies.is_empty() {
            return Err("--policies: give at least one policy".into());
        }
        for policy in &self.policies {
            if !KNOWN.iter().any(|entry| entry.name == policy) {
                let names: Vec<&str> = KNOWN.iter().map(|entry| entry.name).collect();
                return Err(format!(
                    "--policies: unknown policy {policy:?} (known: {})",
                    names.join(", ")
                ));
            }
            corral_policy::check(policy, &self.settings(policy))
                .map_err(|e| format!("--policy-option: {e}"))?;
        }
        if let Some((policy, _, _)) = self
            .policy_options
            .iter()
            .find(|(policy, _, _)| !self.policies.contains(policy))
        {
            return Err(format!(
                "--policy-option: {policy:?} is not one of --policies"
            ));
        }
        if self.loads.is_empty() {
            return Err("--loads: give at least one load".into());
        }
        if let Some(bad) = self.loads.iter().find(|&&l| !(l > 0.0 && l <= 1.0)) {
            return Err(format!(
                "--loads: {bad} is not a fraction of the machine's capacity above 0 and at most 1"
            ));
        }
        let steps = self.burst.as_steps();
        if let Some((_, bad)) = steps.iter().find(|(_, l)| *l > 1.0) {
            return Err(format!(
                "--burst: load {bad} is above 1 (the machine's capacity)"
            ));
        }
        if BurstShape::of(&self.burst).is_none() {
            return Err("--burst: the schedule needs a step up in load".into());
        }
        if let Some(&(last, _)) = steps.last()
            && last >= self.burst_duration_ns
        {
            return Err(
                "--burst-seconds: the run ends before the --burst schedule's last step".into(),
            );
        }
        if self.duration_ns == 0 || self.burst_duration_ns == 0 {
            return Err("--seconds and --burst-seconds must be above 0".into());
        }
        if self.sample_every_ns == 0 {
            return Err("--sample-us must be at least 1".into());
        }
        if self.settle_ns.saturating_add(self.sample_every_ns) > self.duration_ns {
            return Err(
                "--settle-seconds: leaves no --sample-us period of --seconds to settle over".into(),
            );
        }
        let peak_load = self
            .loads
            .iter()
            .chain(steps.iter().map(|(_, l)| l))
            .fold(0.0_f64, |a, &b| a.max(b));
        let lc = per_core_count(
            "--lc",
            &self.lc_runtimes,
            &self.core_counts,
            default_runtimes,
        )?;
        let batch = per_core_count(
            "--batch",
            &self.batch_runtimes,
            &self.core_counts,
            default_runtimes,
        )?;
        let given = per_core_count(
            "--lc-guaranteed",
            &self.lc_guaranteed,
            &self.core_counts,
            |_| 0,
        )?;
        let mut out = Vec::new();
        for (index, &cores) in self.core_counts.iter().enumerate() {
            let (lc, batch) = (lc[index].unwrap_or(1), batch[index].unwrap_or(0));
            if lc == 0 {
                return Err("--lc: every machine needs a latency-critical runtime".into());
            }
            let peak_load_cores = peak_load * f64::from(cores);
            let (lc_guaranteed, rule) = match self.lc_guaranteed {
                Some(_) => (given[index].unwrap_or(0), "given"),
                // A hair below the product so that 0.7 * 10 is 7 cores, not 8.
                None => (
                    ((peak_load_cores / f64::from(lc)) - 1e-9).ceil().max(1.0) as u16,
                    "peak",
                ),
            };
            let guaranteed = u32::from(lc) * u32::from(lc_guaranteed);
            if guaranteed > u32::from(cores) {
                return Err(format!(
                    "--lc-guaranteed: {lc} latency-critical runtime(s) x {lc_guaranteed} \
                     guaranteed cores = {guaranteed} exceed --cores {cores}"
                ));
            }
            let left = u32::from(cores) - guaranteed;
            let static_batch_guaranteed = (0..u32::from(batch))
                .map(|i| (left / u32::from(batch) + u32::from(i < left % u32::from(batch))) as u16)
                .collect();
            out.push(Provision {
                cores,
                lc_runtimes: lc,
                batch_runtimes: batch,
                lc_guaranteed,
                lc_guaranteed_rule: rule,
                peak_load_cores,
                static_batch_guaranteed,
            });
        }
        Ok(out)
    }

    /// One run of `policy` on a machine provisioned as `provision`.
    pub fn sim_config(
        &self,
        provision: &Provision,
        policy: &str,
        load: LoadSchedule,
        duration_ns: u64,
    ) -> SimConfig {
        let cores = provision.cores;
        let mut runtimes = Vec::new();
        for _ in 0..provision.lc_runtimes {
            runtimes.push(RuntimeConfig {
                kind: RuntimeKind::LatencyCritical,
                spec: RuntimeSpec::new(provision.lc_guaranteed, cores),
            });
        }
        for index in 0..usize::from(provision.batch_runtimes) {
            runtimes.push(RuntimeConfig {
                kind: RuntimeKind::Batch,
                spec: RuntimeSpec::new(provision.batch_guaranteed(policy, index), cores),
            });
        }
        SimConfig {
            cores,
            hyperthreads: false,
            runtimes,
            policy: policy.into(),
            settings: self.settings(policy),
            costs: self.costs.clone(),
            cede: CedeMode::Signal,
            service: self.service,
            load,
            duration_ns,
            drain_limit_ns: self.drain_limit_ns,
            sample_every_ns: self.sample_every_ns,
            seed: self.seed,
            audit: false,
        }
    }

    /// Everything but the costs, for the JSON output.
    fn settings_json(&self) -> serde_json::Value {
        serde_json::json!({
            "core_counts": self.core_counts,
            "policies": self.policies,
            "policy_options": self.policy_options,
            "loads": self.loads,
            "service": self.service.to_string(),
            "cede": "signal",
            "share_quantum_ns": self.share_quantum_ns,
            "preemption_timeout_ns": self.preemption_timeout_ns,
            "seconds": self.duration_ns as f64 / 1e9,
            "settle_seconds": self.settle_ns as f64 / 1e9,
            "drain_seconds": self.drain_limit_ns as f64 / 1e9,
            "sample_ns": self.sample_every_ns,
            "burst": self.burst.as_steps(),
            "burst_seconds": self.burst_duration_ns as f64 / 1e9,
            "burst_threshold_ns": self.burst_threshold_ns,
            "seed": self.seed,
        })
    }
}

/// What the series shows once a run has settled: samples after [`CompareConfig::settle_ns`].
/// Core counts are the samples' (cores held at each sample instant), averaged.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Settled {
    pub samples: usize,
    pub lc_cores: f64,
    pub batch_share: f64,
    pub idle_share: f64,
    /// The highest p99.9 of any one sample window after settling (0: none completed).
    pub worst_window_p999_ns: u64,
}

impl Settled {
    pub fn of(series: &[Sample], settle_ns: u64, cores: u16) -> Self {
        let after: Vec<&Sample> = series.iter().filter(|s| s.t_ns > settle_ns).collect();
        let n = after.len().max(1) as f64;
        let mean = |f: fn(&Sample) -> u32| after.iter().map(|s| f64::from(f(s))).sum::<f64>() / n;
        let lc_cores = mean(|s| s.lc_cores);
        let batch_cores = mean(|s| s.batch_cores);
        let cores = f64::from(cores);
        Self {
            samples: after.len(),
            lc_cores,
            batch_share: batch_cores / cores,
            idle_share: 1.0 - (lc_cores + batch_cores) / cores,
            worst_window_p999_ns: after.iter().map(|s| s.window_p999_ns).max().unwrap_or(0),
        }
    }
}

/// Where a burst schedule's burst is: its first step up in load, to when that step ends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BurstShape {
    pub start_ns: u64,
    /// `None`: the burst lasts to the end of the run.
    pub end_ns: Option<u64>,
    pub low_load: f64,
    pub high_load: f64,
}

impl BurstShape {
    pub fn of(schedule: &LoadSchedule) -> Option<Self> {
        let steps = schedule.as_steps();
        let index = (1..steps.len()).find(|&i| steps[i].1 > steps[i - 1].1)?;
        Some(Self {
            start_ns: steps[index].0,
            end_ns: steps.get(index + 1).map(|s| s.0),
            low_load: steps[index - 1].1,
            high_load: steps[index].1,
        })
    }
}

/// How a policy met the burst, read off the series (to the sample period's resolution).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BurstSummary {
    pub shape: BurstShape,
    /// The cores the burst's load needs: `high_load x cores`, rounded up.
    pub target_lc_cores: u32,
    /// From the burst's start to the first sample with at least `target_lc_cores` held by the
    /// latency-critical runtimes; `None`: not reached.
    pub ramp_ns: Option<u64>,
    /// From the burst's start to the end of the last window whose p99.9 is above the threshold
    /// (0: none is).
    pub above_threshold_ns: u64,
    /// Windows after the burst's start whose p99.9 is above the threshold.
    pub windows_above: usize,
    /// The highest window p99.9 after the burst's start.
    pub peak_window_p999_ns: u64,
}

impl BurstSummary {
    pub fn of(shape: BurstShape, series: &[Sample], cores: u16, threshold_ns: u64) -> Self {
        let target_lc_cores = (shape.high_load * f64::from(cores) - 1e-9).ceil().max(0.0) as u32;
        let after: Vec<&Sample> = series.iter().filter(|s| s.t_ns > shape.start_ns).collect();
        let above: Vec<&&Sample> = after
            .iter()
            .filter(|s| s.window_p999_ns > threshold_ns)
            .collect();
        Self {
            shape,
            target_lc_cores,
            ramp_ns: series
                .iter()
                .find(|s| s.t_ns >= shape.start_ns && s.lc_cores >= target_lc_cores)
                .map(|s| s.t_ns - shape.start_ns),
            above_threshold_ns: above.last().map_or(0, |s| s.t_ns - shape.start_ns),
            windows_above: above.len(),
            peak_window_p999_ns: after.iter().map(|s| s.window_p999_ns).max().unwrap_or(0),
        }
    }
}

/// One point of the sweep. Its series is dropped once [`Settled`] is taken from it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SweepPoint {
    pub cores: u16,
    pub policy: String,
    pub result: PointResult,
    pub settled: Settled,
}

/// One burst run, with its series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BurstRun {
    pub cores: u16,
    pub policy: String,
    pub summary: BurstSummary,
    pub result: PointResult,
}

/// Everything a comparison measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub provisions: Vec<Provision>,
    /// By core count, then policy, then load, in the order given.
    pub sweep: Vec<SweepPoint>,
    /// By core count, then policy.
    pub bursts: Vec<BurstRun>,
}

#[derive(Clone, Copy)]
enum Job {
    Sweep {
        machine: usize,
        policy: usize,
        load: usize,
    },
    Burst {
        machine: usize,
        policy: usize,
    },
}

/// Runs every point on up to `threads` threads. Each point is its own seeded run, so the
/// results are the same for any number of threads.
pub fn run(config: &CompareConfig, threads: usize) -> Result<Comparison, String> {
    let provisions = config.provisions()?;
    let shape = BurstShape::of(&config.burst).expect("provisions() checked the burst");
    let mut jobs = Vec::new();
    for machine in 0..provisions.len() {
        for policy in 0..config.policies.len() {
            jobs.push(Job::Burst { machine, policy });
            for load in 0..config.loads.len() {
                jobs.push(Job::Sweep {
                    machine,
                    policy,
                    load,
                });
            }
        }
    }
    // Larger machines first, so that a thread is not left with one long run at the end.
    jobs.sort_by_key(|job| {
        let (Job::Sweep { machine, .. } | Job::Burst { machine, .. }) = *job;
        std::cmp::Reverse(provisions[machine].cores)
    });
    let run_job = |job: Job| -> Result<PointResult, String> {
        let (machine, policy, load, duration) = match job {
            Job::Sweep {
                machine,
                policy,
                load,
            } => (
                machine,
                policy,
                LoadSchedule::constant(config.loads[load]),
                config.duration_ns,
            ),
            Job::Burst { machine, policy } => (
                machine,
                policy,
                config.burst.clone(),
                config.burst_duration_ns,
            ),
        };
        let provision = &provisions[machine];
        let policy = &config.policies[policy];
        crate::run_point(config.sim_config(provision, policy, load, duration))
            .map_err(|e| format!("{} cores, {policy}: {e}", provision.cores))
    };
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<PointResult, String>>>> =
        Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&job) = jobs.get(index) else { break };
                    let result = run_job(job);
                    results.lock().expect("no thread panics holding it")[index] = Some(result);
                }
            });
        }
    });
    let results = results.into_inner().expect("no thread panics holding it");
    let mut sweep = Vec::new();
    let mut bursts = Vec::new();
    for (job, result) in jobs.into_iter().zip(results) {
        let result = result.expect("every job ran")?;
        match job {
            Job::Sweep {
                machine, policy, ..
            } => {
                let cores = provisions[machine].cores;
                let settled = Settled::of(&result.series, config.settle_ns, cores);
                sweep.push((
                    job,
                    SweepPoint {
                        cores,
                        policy: config.policies[policy].clone(),
                        result: PointResult {
                            series: Vec::new(),
                            ..result
                        },
                        settled,
                    },
                ));
            }
            Job::Burst { machine, policy } => {
                let cores = provisions[machine].cores;
                bursts.push((
                    job,
                    BurstRun {
                        cores,
                        policy: config.policies[policy].clone(),
                        summary: BurstSummary::of(
                            shape,
                            &result.series,
                            cores,
                            config.burst_threshold_ns,
                        ),
                        result,
                    },
                ));
            }
        }
    }
    // Back to the order given: core count, policy, load.
    let order = |job: &Job| match *job {
        Job::Sweep {
            machine,
            policy,
            load,
        } => (machine, policy, load),
        Job::Burst { machine, policy } => (machine, policy, 0),
    };
    sweep.sort_by_key(|(job, _)| order(job));
    bursts.sort_by_key(|(job, _)| order(job));
    Ok(Comparison {
        provisions,
        sweep: sweep.into_iter().map(|(_, p)| p).collect(),
        bursts: bursts.into_iter().map(|(_, b)| b).collect(),
    })
}

/// The sweep, one row per core count, policy and load: the report's columns
/// ([`report::CSV_HEADER`]) between the machine's and the settled figures.
pub fn sweep_csv(comparison: &Comparison) -> String {
    let mut out = format!(
        "cores,policy,lc_runtimes,batch_runtimes,lc_guaranteed,{},settled_lc_cores,\
         settled_batch_share,settled_idle_share,settled_worst_window_p999_ns\n",
        report::CSV_HEADER
    );
    for point in &comparison.sweep {
        let provision = provision_of(comparison, point.cores);
        let row = report::csv(std::slice::from_ref(&point.result));
        let row = row
            .lines()
            .nth(1)
            .expect("report::csv writes a row per point");
        let s = &point.settled;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{row},{},{},{},{}",
            point.cores,
            point.policy,
            provision.lc_runtimes,
            provision.batch_runtimes,
            provision.lc_guaranteed,
            s.lc_cores,
            s.batch_share,
            s.idle_share,
            s.worst_window_p999_ns
        );
    }
    out
}

fn provision_of(comparison: &Comparison, cores: u16) -> &Provision {
    comparison
        .provisions
        .iter()
        .find(|p| p.cores == cores)
        .expect("every point's machine is provisioned")
}

/// The burst runs' series, one row per sample, with the load offered at the sample's time.
pub fn burst_csv(comparison: &Comparison, schedule: &LoadSchedule) -> String {
    let mut out =
        String::from("cores,policy,t_ns,load,lc_cores,batch_cores,lc_queued,window_p999_ns\n");
    for run in &comparison.bursts {
        for s in &run.result.series {
            // The window ending at t was offered the load in force just before t.
            let (load, _) = schedule.at(s.t_ns.saturating_sub(1));
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{}",
                run.cores,
                run.policy,
                s.t_ns,
                load,
                s.lc_cores,
                s.batch_cores,
                s.lc_queued,
                s.window_p999_ns
            );
        }
    }
    out
}

/// The settings, the costs with their sources, the provisioning and every result.
pub fn json(config: &CompareConfig, comparison: &Comparison) -> String {
    #[derive(Serialize)]
    struct Out<'a> {
        settings: serde_json::Value,
        costs: &'a Costs,
        #[serde(flatten)]
        comparison: &'a Comparison,
    }
    serde_json::to_string_pretty(&Out {
        settings: config.settings_json(),
        costs: &config.costs,
        comparison,
    })
    .expect("results serialize")
}

/// Per core count and policy, the report's table, then the settled figures.
pub fn sweep_table(comparison: &Comparison) -> String {
    let mut out = String::new();
    for provision in &comparison.provisions {
        let _ = writeln!(out, "\n== {}", provision.describe());
        let mut policies: Vec<&str> = Vec::new();
        for point in comparison
            .sweep
            .iter()
            .filter(|p| p.cores == provision.cores)
        {
            if !policies.contains(&point.policy.as_str()) {
                policies.push(&point.policy);
            }
        }
        for policy in policies {
            let points: Vec<&SweepPoint> = comparison
                .sweep
                .iter()
                .filter(|p| p.cores == provision.cores && p.policy == policy)
                .collect();
            let results: Vec<PointResult> = points.iter().map(|p| p.result.clone()).collect();
            let _ = writeln!(out, "-- {policy}, whole run:");
            out.push_str(&report::results_table(&results));
            let _ = writeln!(
                out,
                "-- {policy}, settled:\n{:>6} {:>8} {:>7} {:>7} {:>18}",
                "load", "LC cores", "batch", "idle", "worst window p99.9"
            );
            for p in points {
                let _ = writeln!(
                    out,
                    "{:>6.3} {:>8.2} {:>7.3} {:>7.3} {:>15.1} us",
                    p.result.load,
                    p.settled.lc_cores,
                    p.settled.batch_share,
                    p.settled.idle_share,
                    p.settled.worst_window_p999_ns as f64 / 1e3
                );
            }
        }
    }
    out
}

/// One line per burst run.
pub fn burst_table(comparison: &Comparison, threshold_ns: u64) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut out = format!(
        "{:>6} {:<9} {:>7} {:>9} {:>12} {:>8} {:>14} {:>12} {:>7}\n",
        "cores",
        "policy",
        "target",
        "ramp ms",
        format!(">{}us ms", threshold_ns / 1_000),
        "windows",
        "peak win p99.9",
        "run p99.9",
        "batch"
    );
    for run in &comparison.bursts {
        let s = &run.summary;
        let _ = writeln!(
            out,
            "{:>6} {:<9} {:>7} {:>9} {:>12.1} {:>8} {:>11.1} us {:>9.1} us {:>7.3}",
            run.cores,
            run.policy,
            s.target_lc_cores,
            s.ramp_ns
                .map_or_else(|| "never".into(), |ns| format!("{:.1}", ms(ns))),
            ms(s.above_threshold_ns),
            s.windows_above,
            s.peak_window_p999_ns as f64 / 1e3,
            run.result.p999_ns as f64 / 1e3,
            run.result.batch_share
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CompareConfig {
        CompareConfig {
            core_counts: vec![16, 64],
            policies: vec!["shenango".into(), "arachne".into(), "static".into()],
            policy_options: Vec::new(),
            loads: CompareConfig::default_loads(),
            lc_runtimes: None,
            batch_runtimes: None,
            lc_guaranteed: None,
            service: ServiceDist::Exponential { mean_ns: 10_000.0 },
            costs: Costs::zero(),
            share_quantum_ns: 1_000_000,
            preemption_timeout_ns: Some(10_000_000),
            duration_ns: 2_000_000_000,
            settle_ns: 1_000_000_000,
            drain_limit_ns: 1_000_000_000,
            sample_every_ns: 1_000_000,
            burst: LoadSchedule::parse(CompareConfig::DEFAULT_BURST).unwrap(),
            burst_duration_ns: 1_500_000_000,
            burst_threshold_ns: 1_000_000,
            seed: 1,
        }
    }

    #[test]
    fn the_peak_rule_provisions_the_highest_load_rounded_up() {
        let provisions = config().provisions().unwrap();
        // 0.9 x 16 = 14.4 cores for one runtime; 0.9 x 64 / 4 = 14.4 for each of four.
        assert_eq!(provisions[0].lc_runtimes, 1);
        assert_eq!(provisions[0].lc_guaranteed, 15);
        assert_eq!(provisions[0].static_batch_guaranteed, vec![1]);
        assert_eq!(provisions[1].lc_runtimes, 4);
        assert_eq!(provisions[1].lc_guaranteed, 15);
        assert_eq!(provisions[1].static_batch_guaranteed, vec![1, 1, 1, 1]);
        let exact = CompareConfig {
            core_counts: vec![10],
            loads: vec![0.7],
            burst: LoadSchedule::parse("0s:0.1,1ms:0.2").unwrap(),
            ..config()
        };
        assert_eq!(exact.provisions().unwrap()[0].lc_guaranteed, 7);
    }

    #[test]
    fn static_batch_runtimes_split_the_cores_left() {
        let uneven = CompareConfig {
            core_counts: vec![16],
            batch_runtimes: Some(vec![3]),
            lc_guaranteed: Some(vec![11]),
            ..config()
        };
        let provision = &uneven.provisions().unwrap()[0];
        assert_eq!(provision.static_batch_guaranteed, vec![2, 2, 1]);
        let guarantees = |policy| -> Vec<u16> {
            let sim = uneven.sim_config(provision, policy, LoadSchedule::constant(0.5), 1);
            sim.runtimes
                .iter()
                .map(|r| r.spec.guaranteed_cores)
                .collect()
        };
        assert_eq!(guarantees("static"), vec![11, 2, 2, 1]);
        assert_eq!(guarantees("shenango"), vec![11, 0, 0, 0]);
    }

    #[test]
    fn bad_input_names_its_flag() {
        let cases: Vec<(CompareConfig, &str)> = vec![
            (
                CompareConfig {
                    core_counts: vec![],
                    ..config()
                },
                "--cores",
            ),
            (
                CompareConfig {
                    core_counts: vec![0],
                    ..config()
                },
                "--cores",
            ),
            (
                CompareConfig {
                    policies: vec![],
                    ..config()
                },
                "--policies",
            ),
            (
                CompareConfig {
                    policies: vec!["fifo".into()],
                    ..config()
                },
                "--policies",
            ),
            (
                CompareConfig {
                    loads: vec![],
                    ..config()
                },
                "--loads",
            ),
            (
                CompareConfig {
                    loads: vec![0.0],
                    ..config()
                },
                "--loads",
            ),
            (
                CompareConfig {
                    loads: vec![1.01],
                    ..config()
                },
                "--loads",
            ),
            (
                CompareConfig {
                    lc_guaranteed: Some(vec![17]),
                    ..config()
                },
                "--lc-guaranteed",
            ),
            (
                CompareConfig {
                    lc_runtimes: Some(vec![1, 2, 3]),
                    ..config()
                },
                "--lc",
            ),
            (
                CompareConfig {
                    lc_runtimes: Some(vec![0]),
                    ..config()
                },
                "--lc",
            ),
            (
                CompareConfig {
                    burst: LoadSchedule::parse("0s:0.5,1ms:0.1").unwrap(),
                    ..config()
                },
                "--burst",
            ),
            (
                CompareConfig {
                    settle_ns: 2_000_000_000,
                    ..config()
                },
                "--settle-seconds",
            ),
            (
                CompareConfig {
                    policy_options: vec![("arachne".into(), "bogus".into(), "1".into())],
                    ..config()
                },
                "--policy-option",
            ),
        ];
        for (bad, flag) in cases {
            let error = bad.provisions().unwrap_err();
            assert!(error.starts_with(flag), "{error:?} should name {flag}");
        }
    }

    #[test]
    fn burst_summary_reads_the_series() {
        let shape =
            BurstShape::of(&LoadSchedule::parse("0s:0.1,2ms:0.5,5ms:0.1").unwrap()).unwrap();
        assert_eq!(shape.start_ns, 2_000_000);
        assert_eq!(shape.end_ns, Some(5_000_000));
        let sample = |ms: u64, lc_cores, p999_us: u64| Sample {
            t_ns: ms * 1_000_000,
            lc_cores,
            batch_cores: 0,
            lc_queued: 0,
            window_p999_ns: p999_us * 1_000,
        };
        let series = [
            sample(1, 1, 50),
            sample(2, 1, 2_000),
            sample(3, 1, 3_000),
            sample(4, 2, 1_500),
            sample(5, 2, 80),
            sample(6, 1, 1_200),
            sample(7, 1, 60),
        ];
        let summary = BurstSummary::of(shape, &series, 4, 1_000_000);
        assert_eq!(summary.target_lc_cores, 2);
        assert_eq!(summary.ramp_ns, Some(2_000_000));
        assert_eq!(summary.windows_above, 3);
        assert_eq!(summary.above_threshold_ns, 4_000_000);
        assert_eq!(summary.peak_window_p999_ns, 3_000_000);
        let settled = Settled::of(&series, 4_000_000, 4);
        assert_eq!(settled.samples, 3);
        assert!((settled.lc_cores - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(settled.worst_window_p999_ns, 1_200_000);
    }
}
