//! A discrete-event simulator of managed cores and application runtimes that drives the real
//! core allocation policies of `corral-policy`, with the observations iokerneld gives them.
//!
//! A run ([`run_point`]) simulates `N` managed cores and `M` runtimes on a virtual clock in
//! integer nanoseconds: latency-critical runtimes serving open-loop Poisson requests (at a
//! constant load or a schedule of load steps) with a service-time distribution, and batch
//! runtimes that always want cores. The policy is built by name with `corral_policy::build`
//! and is fed, every allocation interval, each runtime's active kthreads' queue counters, as
//! iokerneld does; its decisions are carried out with the configured costs (grant, preemption
//! or cooperative cede, park, hand-over, per-request dispatch) charged in virtual time. See
//! [`machine`] for exactly what is reported to the policy and when.
//!
//! Everything is deterministic for a seed: one seeded generator, and ties in the event queue
//! broken by scheduling order. The library reads no clock.
//!
//! measured: 1.4 s for `time target/release/corral-sim --cores 64 --lc 8 --batch 8
//! --lc-guaranteed 4 --loads 0.5 --seconds 1` (1 s of 64 cores, 16 runtimes, 5 µs passes;
//! release build, this 2-vCPU machine class; see README.md).

pub mod bound;
pub mod compare;
pub mod config;
pub mod costs;
pub mod events;
pub mod figure1;
pub mod kthread;
pub mod machine;
pub mod metrics;
pub mod report;
pub mod requests;
pub mod workload;

pub use config::{CedeMode, RuntimeConfig, RuntimeKind, SimConfig};
pub use costs::{Cost, Costs};
pub use machine::Sim;
pub use metrics::{PointResult, Sample};
pub use workload::{LoadSchedule, ServiceDist};

/// Runs one load point to completion.
pub fn run_point(config: SimConfig) -> Result<PointResult, String> {
    Sim::new(config)?.run()
}
