//! What a policy decides, and what it reports about cores, runtimes and kthreads.

use crate::ids::{CoreId, KthreadIndex, RuntimeId};
use crate::spec::{KthreadPlace, RuntimeSpec, RuntimeStats};

/// What the daemon must do. Decisions are emitted in the order they must be carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Pin `kthread` to `core` and wake it. Nothing else runs on the core.
    Wake {
        runtime: RuntimeId,
        kthread: KthreadIndex,
        core: CoreId,
    },
    /// Ask `victim_kthread` to park (signal it). The core is promised to `for_runtime`; a
    /// [`Decision::Wake`] for it follows once the victim reports that it parked.
    Preempt {
        victim_runtime: RuntimeId,
        victim_kthread: KthreadIndex,
        core: CoreId,
        for_runtime: RuntimeId,
    },
    /// A preempted kthread has not parked within its policy's preemption timeout:
    /// move it off the managed cores, then report [`Policy::preemption_completed`](crate::Policy::preemption_completed).
    /// Emitted once per preemption.
    PreemptionOverdue {
        victim_runtime: RuntimeId,
        victim_kthread: KthreadIndex,
        core: CoreId,
    },
}

/// Counters kept per core.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Kthreads woken on this core.
    pub grants: u64,
    /// Grants that gave the core to a different runtime than its previous user: the ones that
    /// cost a cold cache.
    pub reallocations: u64,
}

/// Who is on a core.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreOccupancy {
    Idle,
    Running {
        runtime: RuntimeId,
        kthread: KthreadIndex,
    },
    /// `kthread` still runs here but has been asked to park; the core then goes to `to`, or
    /// back to the idle pool if `to` is `None`.
    HandingOver {
        runtime: RuntimeId,
        kthread: KthreadIndex,
        to: Option<RuntimeId>,
        since: u64,
    },
}

impl CoreOccupancy {
    /// The runtime whose kthread occupies the core.
    pub fn owner(&self) -> Option<RuntimeId> {
        match *self {
            Self::Idle => None,
            Self::Running { runtime, .. } | Self::HandingOver { runtime, .. } => Some(runtime),
        }
    }
}

/// A core's state and history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoreView {
    pub occupancy: CoreOccupancy,
    pub sibling: Option<CoreId>,
    /// The kthread that ran here most recently (possibly still running).
    pub last_user: Option<(RuntimeId, KthreadIndex)>,
    pub stats: CoreStats,
}

/// A runtime's allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeView {
    pub id: RuntimeId,
    pub spec: RuntimeSpec,
    /// Cores its kthreads occupy, including those being preempted.
    pub running_cores: u32,
    /// Of `running_cores`, those it has been asked to give up.
    pub cores_handing_over: u32,
    /// Cores promised to it, handed over when the kthreads on them park.
    pub cores_reserved: u32,
    /// The core it gave up most recently.
    pub most_recent_core: Option<CoreId>,
    /// It asked for a core and none could be had yet.
    pub waiting: bool,
    /// It has work and no core; it will be granted one as soon as one can be had.
    pub has_pending_work: bool,
    pub stats: RuntimeStats,
}

impl RuntimeView {
    /// Cores it will hold once pending handovers settle.
    pub fn committed_cores(&self) -> u32 {
        self.running_cores - self.cores_handing_over + self.cores_reserved
    }
}

/// A kthread's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KthreadView {
    pub place: KthreadPlace,
    pub last_core: Option<CoreId>,
}
