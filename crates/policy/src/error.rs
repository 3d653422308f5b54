//! Everything the allocator refuses, and why.

use crate::ids::{CoreId, KthreadIndex, RuntimeId};
use crate::queues::{QueueFault, QueueKind};

/// Why a call was refused. A refused call changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// Not a registered runtime (never was, or has unregistered since).
    UnknownRuntime(RuntimeId),
    /// The runtime has no kthread with this index.
    NoSuchKthread {
        runtime: RuntimeId,
        kthread: KthreadIndex,
        kthreads: u16,
    },
    /// The kthread is parked, but the call is about a kthread running on a core.
    KthreadNotActive {
        runtime: RuntimeId,
        kthread: KthreadIndex,
    },
    /// "Preemption completed" for a kthread nobody asked to give up its core.
    NoPreemptionPending {
        runtime: RuntimeId,
        kthread: KthreadIndex,
    },
    /// A sweep of a runtime's kthreads named this kthread after a higher-numbered one (or twice).
    ObservationsOutOfOrder {
        runtime: RuntimeId,
        kthread: KthreadIndex,
    },
    /// The kthread's queues were already observed in this pass.
    AlreadyObserved {
        runtime: RuntimeId,
        kthread: KthreadIndex,
    },
    /// The runtime published queue counters that cannot be true. The observation is dropped;
    /// the runtime is broken or hostile and should be disconnected.
    ImpossibleQueue {
        runtime: RuntimeId,
        kthread: KthreadIndex,
        queue: QueueKind,
        fault: QueueFault,
    },
    /// Time must not go back between calls.
    ClockWentBackwards { last: u64, now: u64 },
    /// Not a managed core.
    NoSuchCore(CoreId),
    /// The registration asks for something impossible.
    BadSpec(SpecError),
    /// Every runtime slot is taken.
    TooManyRuntimes,
}

/// What is wrong with a [`RuntimeSpec`](crate::RuntimeSpec).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// A runtime that may never hold a core could never run.
    ZeroMaxCores,
    GuaranteeAboveMax {
        guaranteed: u16,
        max: u16,
    },
    /// Each core it may hold needs a kthread to run there.
    FewerKthreadsThanMaxCores {
        kthreads: u16,
        max: u16,
    },
    TooManyKthreads {
        kthreads: u16,
        limit: usize,
    },
    /// Queue capacities must be in 1..=[`MAX_QUEUE_CAPACITY`](crate::MAX_QUEUE_CAPACITY).
    BadQueueCapacity {
        queue: QueueKind,
        capacity: u32,
    },
    /// Guarantees may not add up to more cores than exist: a guarantee is a promise never to
    /// preempt, which oversubscription would break.
    GuaranteesOversubscribed {
        requested: u16,
        already_guaranteed: u32,
        cores: usize,
    },
}

impl From<SpecError> for AllocError {
    fn from(error: SpecError) -> Self {
        Self::BadSpec(error)
    }
}

impl core::fmt::Display for AllocError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::UnknownRuntime(runtime) => write!(f, "{runtime} is not registered"),
            Self::NoSuchKthread {
                runtime,
                kthread,
                kthreads,
            } => write!(
                f,
                "{runtime} has {kthreads} kthreads, so no kthread {}",
                kthread.0
            ),
            Self::KthreadNotActive { runtime, kthread } => {
                write!(f, "kthread {} of {runtime} is parked", kthread.0)
            }
            Self::NoPreemptionPending { runtime, kthread } => write!(
                f,
                "kthread {} of {runtime} reported a preemption nobody asked for",
                kthread.0
            ),
            Self::ObservationsOutOfOrder { runtime, kthread } => write!(
                f,
                "kthread {} of {runtime} is out of order in the sweep of its runtime's kthreads",
                kthread.0
            ),
            Self::AlreadyObserved { runtime, kthread } => write!(
                f,
                "kthread {} of {runtime} was already observed in this pass",
                kthread.0
            ),
            Self::ImpossibleQueue {
                runtime,
                kthread,
                queue,
                fault,
            } => write!(f, "kthread {} of {runtime}, {queue:?}: {fault}", kthread.0),
            Self::ClockWentBackwards { last, now } => {
                write!(f, "time went back from {last} to {now}")
            }
            Self::NoSuchCore(core) => write!(f, "core {} is not managed", core.0),
            Self::BadSpec(error) => write!(f, "bad runtime registration: {error}"),
            Self::TooManyRuntimes => write!(f, "every runtime slot is taken"),
        }
    }
}

impl core::fmt::Display for SpecError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::ZeroMaxCores => write!(f, "max_cores is 0"),
            Self::GuaranteeAboveMax { guaranteed, max } => write!(
                f,
                "guaranteed_cores ({guaranteed}) is above max_cores ({max})"
            ),
            Self::FewerKthreadsThanMaxCores { kthreads, max } => {
                write!(f, "{kthreads} kthreads cannot use max_cores = {max} cores")
            }
            Self::TooManyKthreads { kthreads, limit } => {
                write!(f, "{kthreads} kthreads, more than the limit of {limit}")
            }
            Self::BadQueueCapacity { queue, capacity } => {
                write!(f, "{queue:?} capacity {capacity} is out of range")
            }
            Self::GuaranteesOversubscribed {
                requested,
                already_guaranteed,
                cores,
            } => write!(
                f,
                "guaranteeing {requested} more cores on top of {already_guaranteed} exceeds the {cores} managed cores"
            ),
        }
    }
}

impl std::error::Error for AllocError {}
impl std::error::Error for SpecError {}
