//! Core allocation policies: which runtime's kthread runs on which managed core.
//!
//! A policy is a pure state machine behind the [`Policy`] trait. It is fed observations (queue
//! counters, parks, registrations, pending work) with the time as a plain number, and answers
//! with [`Decision`]s. It never reads clocks, shared memory or sysfs, and never talks to the OS,
//! so the same code drives iokerneld, tests and simulations alike.
//!
//! The daemon picks a policy by name from [`policies::KNOWN`] ([`build`]) and holds it as a
//! `Box<dyn Policy>`. Each pass it sweeps every runtime's active kthreads' counters into
//! [`Policy::observe_runtime`], calls [`Policy::run_pass`], and carries out the decisions (pin
//! and wake, signal); between passes it relays the runtimes' park reports and pending work.
//!
//! Policies share the contract types here: ids ([`RuntimeId`], [`KthreadIndex`], [`CoreId`]),
//! the [`Topology`], registrations ([`RuntimeSpec`]), queue snapshots ([`QueueSnapshot`], built
//! on the ABI's [`RingPositions`]), decisions, views and errors. [`audit::check_contract`]
//! checks, through the trait alone, what every policy promises its caller.

pub mod audit;
mod error;
mod ids;
mod kthreads;
pub mod policies;
mod queues;
mod spec;
mod topology;
mod views;

pub use corral_abi::RingPositions;
pub use error::{AllocError, SpecError};
pub use ids::{CoreId, KthreadIndex, RuntimeId};
pub use policies::arachne::{Arachne, ArachneConfig};
pub use policies::shenango::{BurstSharing, Shenango, ShenangoConfig};
pub use policies::static_cores::{Static, StaticConfig};
pub use policies::{
    OptionError, PolicyEntry, PolicyError, PolicySettings, UnknownPolicy, build, check,
    parse_option,
};
pub use queues::{
    KthreadQueues, LastObservation, QueueFault, QueueKind, QueueSnapshot, check_counters,
    check_sweep,
};
pub use spec::{KthreadPlace, MAX_KTHREADS, MAX_QUEUE_CAPACITY, RuntimeSpec, RuntimeStats};
pub use topology::{MAX_CORES, Topology, TopologyError};
pub use views::{CoreOccupancy, CoreStats, CoreView, Decision, KthreadView, RuntimeView};

/// Most runtimes registered at once.
pub const MAX_RUNTIMES: usize = 1 << 16;

/// A core allocation policy.
///
/// Every call that takes `now` refuses time going back ([`AllocError::ClockWentBackwards`]).
/// Times are whatever monotonic unit the caller uses (nanoseconds in the daemon). A refused call
/// changes nothing. Decisions are appended to `out` in the order they must be carried out.
///
/// [`Policy::run_pass`] is called at the daemon's allocation interval (microseconds). A policy
/// that decides on a longer time scale (a load-factor policy re-deciding every few
/// milliseconds, say) accumulates observations and acts only in the passes where its own
/// period has elapsed, judged by `now`; nothing about the call pattern changes.
///
/// The bookkeeping contract every policy keeps, whatever it decides: a core holds at most one
/// kthread, a kthread is active on at most one core and only after a [`Decision::Wake`] for it,
/// a runtime never holds more than its `max_cores`, and guarantees are never oversubscribed.
/// [`audit::check_contract`] verifies it from the views below.
pub trait Policy: core::fmt::Debug + Send {
    /// The name it is registered under in [`policies::KNOWN`].
    fn name(&self) -> &'static str;

    /// Registers a runtime with all its kthreads parked.
    fn register(&mut self, spec: RuntimeSpec, now: u64) -> Result<RuntimeId, AllocError>;

    /// Removes a runtime (its connection closed) and reclaims every core it occupied. The
    /// daemon must already have stopped its kthreads.
    fn unregister(&mut self, runtime: RuntimeId, out: &mut Vec<Decision>)
    -> Result<(), AllocError>;

    /// Records one runtime's active kthreads' queue counters for the coming pass, in ascending
    /// kthread order, each kthread at most once per pass. All or nothing: if any observation is
    /// refused (an impossible counter, a parked kthread), none is recorded.
    fn observe_runtime(
        &mut self,
        runtime: RuntimeId,
        kthreads: &[KthreadQueues],
    ) -> Result<(), AllocError>;

    /// An item has waited since the previous pass on a queue the runtime shares among its
    /// kthreads (work handed in from outside them). Counts as an observation of the current
    /// pass.
    fn report_congestion(&mut self, runtime: RuntimeId) -> Result<(), AllocError>;

    /// Ends a pass: acts on the observations made since the previous one.
    fn run_pass(&mut self, now: u64, out: &mut Vec<Decision>) -> Result<(), AllocError>;

    /// A kthread parked, on its own or because it was preempted.
    fn kthread_parked(
        &mut self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError>;

    /// A preempted kthread parked; refuses a kthread that was not being preempted.
    fn preemption_completed(
        &mut self,
        runtime: RuntimeId,
        kthread: KthreadIndex,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError>;

    /// The runtime has work (a packet, an expired timer) and possibly no core to run it.
    fn pending_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError>;

    /// A preempted kthread parked with runnable work left and the runtime may hold no core.
    fn parked_with_work(
        &mut self,
        runtime: RuntimeId,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<(), AllocError>;

    /// The runtime's kthreads spin, so it wants `cores` (capped at its guarantee) now rather
    /// than on demand. Returns how many cores were granted or promised.
    fn grant_guaranteed(
        &mut self,
        runtime: RuntimeId,
        cores: u16,
        now: u64,
        out: &mut Vec<Decision>,
    ) -> Result<u32, AllocError>;

    fn topology(&self) -> &Topology;

    /// The latest time the policy was given.
    fn now(&self) -> u64;

    /// Passes completed.
    fn passes_run(&self) -> u64;

    fn idle_core_count(&self) -> usize;

    fn core(&self, core: CoreId) -> Result<CoreView, AllocError>;

    fn runtime(&self, runtime: RuntimeId) -> Result<RuntimeView, AllocError>;

    fn kthread(&self, runtime: RuntimeId, kthread: KthreadIndex)
    -> Result<KthreadView, AllocError>;

    /// Checks the policy's own invariants, on top of [`audit::check_contract`]; for tests and
    /// debugging. Allocates.
    fn audit(&self) -> Result<(), String> {
        Ok(())
    }
}
