//! What one simulation run is given.

use corral_policy::{PolicySettings, RuntimeSpec};

use crate::costs::Costs;
use crate::workload::{LoadSchedule, ServiceDist};

/// What a runtime runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// Serves open-loop requests; its kthreads park when they find no work.
    LatencyCritical,
    /// Always has runnable work on every kthread: never parks, congested whenever it runs.
    Batch,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    pub kind: RuntimeKind,
    /// Registered with the policy as is: guaranteed and maximum cores, one kthread per core it
    /// may hold (or more).
    pub spec: RuntimeSpec,
}

/// How a kthread asked to give up its core does so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CedeMode {
    /// Signalled at once: stops after [`Costs::preempt`].
    Signal,
    /// Parks by itself at its next scheduling point: stops after [`Costs::cede`].
    Cooperative,
}

/// One simulation run: a machine, its runtimes, a load and the costs.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Managed cores.
    pub cores: u16,
    /// Cores 2i and 2i+1 share a physical core (the policy prefers siblings).
    pub hyperthreads: bool,
    pub runtimes: Vec<RuntimeConfig>,
    /// A name `corral_policy::build` knows.
    pub policy: String,
    pub settings: PolicySettings,
    pub costs: Costs,
    pub cede: CedeMode,
    pub service: ServiceDist,
    /// Offered load as a fraction of the cores' capacity (`cores / mean service time`), spread
    /// evenly over the latency-critical runtimes.
    pub load: LoadSchedule,
    /// Simulated time over which requests arrive and metrics are taken.
    pub duration_ns: u64,
    /// How long past `duration_ns` the run may go on so that requests already arrived complete.
    pub drain_limit_ns: u64,
    /// Period of the cores-over-time series.
    pub sample_every_ns: u64,
    pub seed: u64,
    /// Check the policy's contract and the simulator's own bookkeeping against the policy after
    /// every event (slow; for tests).
    pub audit: bool,
}

impl SimConfig {
    /// A machine of `cores` cores with `lc` latency-critical runtimes (each guaranteed
    /// `lc_guaranteed` cores, up to all cores) and `batch` batch runtimes (no guarantee, up to
    /// all cores), the measured costs, `exp:10us` service, 10 ms.
    pub fn simple(cores: u16, lc: u16, lc_guaranteed: u16, batch: u16, load: f64) -> Self {
        let mut runtimes = Vec::new();
        for _ in 0..lc {
            runtimes.push(RuntimeConfig {
                kind: RuntimeKind::LatencyCritical,
                spec: RuntimeSpec::new(lc_guaranteed, cores),
            });
        }
        for _ in 0..batch {
            runtimes.push(RuntimeConfig {
                kind: RuntimeKind::Batch,
                spec: RuntimeSpec::new(0, cores),
            });
        }
        Self {
            cores,
            hyperthreads: false,
            runtimes,
            policy: "shenango".into(),
            settings: PolicySettings {
                preemption_timeout: Some(10_000_000),
                share_quantum: 1_000_000,
                options: Vec::new(),
            },
            costs: Costs::measured(),
            cede: CedeMode::Signal,
            service: ServiceDist::Exponential { mean_ns: 10_000.0 },
            load: LoadSchedule::constant(load),
            duration_ns: 10_000_000,
            drain_limit_ns: 100_000_000,
            sample_every_ns: 1_000_000,
            seed: 1,
            audit: false,
        }
    }

    pub fn latency_critical_count(&self) -> usize {
        self.runtimes
            .iter()
            .filter(|r| r.kind == RuntimeKind::LatencyCritical)
            .count()
    }

    /// Requests per second all latency-critical runtimes together are offered at load 1.
    pub fn full_load_rps(&self) -> f64 {
        f64::from(self.cores) * 1e9 / self.service.mean_ns()
    }

    /// Checks what the policy would not (it checks the specs themselves at registration).
    pub fn validate(&self) -> Result<(), String> {
        if self.cores == 0 {
            return Err("at least one core is needed".into());
        }
        if self.runtimes.is_empty() {
            return Err("at least one runtime is needed".into());
        }
        if self.costs.interval.ns == 0 {
            return Err("the allocation interval must be positive".into());
        }
        if self.sample_every_ns == 0 {
            return Err("the sample period must be positive".into());
        }
        let mean = self.service.mean_ns();
        if mean.is_nan() || mean <= 0.0 {
            return Err("the mean service time must be positive".into());
        }
        // The policy refuses these too, but only once a run has started.
        for (index, runtime) in self.runtimes.iter().enumerate() {
            runtime
                .spec
                .validate()
                .map_err(|e| format!("runtime {index}: {e}"))?;
        }
        Ok(())
    }
}
