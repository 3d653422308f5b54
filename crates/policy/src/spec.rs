//! What a runtime asks for, and what every policy reports about runtimes and kthreads.

use crate::error::SpecError;
use crate::ids::CoreId;
use crate::queues::QueueKind;

/// Most kthreads one runtime may register.
pub const MAX_KTHREADS: usize = 1024;

/// Largest queue capacity: with 32-bit wrapping counters, a longer queue could not be told apart
/// from a consumer running ahead of its producer.
pub const MAX_QUEUE_CAPACITY: u32 = 1 << 31;

/// What a runtime asks for when it registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuntimeSpec {
    /// Cores it may hold without ever being preempted.
    pub guaranteed_cores: u16,
    /// Cores it may hold at most, guaranteed plus burstable.
    pub max_cores: u16,
    /// Its kthreads, indexed 0..kthreads; all start parked.
    pub kthreads: u16,
    /// Slots in each kthread's run queue; longer observed queues are refused as impossible.
    pub run_queue_capacity: u32,
    /// Slots in each kthread's ingress ring.
    pub ingress_capacity: u32,
}

impl RuntimeSpec {
    /// One kthread per core it may hold, and queue capacities that only rule out counters
    /// running backwards.
    pub const fn new(guaranteed_cores: u16, max_cores: u16) -> Self {
        Self {
            guaranteed_cores,
            max_cores,
            kthreads: max_cores,
            run_queue_capacity: MAX_QUEUE_CAPACITY,
            ingress_capacity: MAX_QUEUE_CAPACITY,
        }
    }

    pub const fn with_queue_capacities(mut self, run_queue: u32, ingress: u32) -> Self {
        self.run_queue_capacity = run_queue;
        self.ingress_capacity = ingress;
        self
    }

    pub const fn with_kthreads(mut self, kthreads: u16) -> Self {
        self.kthreads = kthreads;
        self
    }

    /// Checks everything that does not depend on other runtimes.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.max_cores == 0 {
            return Err(SpecError::ZeroMaxCores);
        }
        if self.guaranteed_cores > self.max_cores {
            return Err(SpecError::GuaranteeAboveMax {
                guaranteed: self.guaranteed_cores,
                max: self.max_cores,
            });
        }
        if usize::from(self.kthreads) > MAX_KTHREADS {
            return Err(SpecError::TooManyKthreads {
                kthreads: self.kthreads,
                limit: MAX_KTHREADS,
            });
        }
        if self.kthreads < self.max_cores {
            return Err(SpecError::FewerKthreadsThanMaxCores {
                kthreads: self.kthreads,
                max: self.max_cores,
            });
        }
        for (queue, capacity) in [
            (QueueKind::RunQueue, self.run_queue_capacity),
            (QueueKind::Ingress, self.ingress_capacity),
        ] {
            if capacity == 0 || capacity > MAX_QUEUE_CAPACITY {
                return Err(SpecError::BadQueueCapacity { queue, capacity });
            }
        }
        Ok(())
    }
}

/// Refuses to promise `requested` more cores beside `already` promised ones on a machine of
/// `cores`: a guarantee is a promise never to preempt, which oversubscription would break.
pub(crate) fn check_cores_fit(requested: u16, already: u32, cores: usize) -> Result<(), SpecError> {
    if already + u32::from(requested) > cores as u32 {
        return Err(SpecError::GuaranteesOversubscribed {
            requested,
            already_guaranteed: already,
            cores,
        });
    }
    Ok(())
}

/// Counters kept per runtime while it is registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Times one of its kthreads was woken on a core.
    pub grants: u64,
    /// Times a core of its was taken back for another runtime.
    pub preemptions_suffered: u64,
    /// Times one of its kthreads parked, on its own or when preempted.
    pub parks: u64,
    /// Passes in which Algorithm 1 found it congested.
    pub congestion_detections: u64,
}

/// Where a kthread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KthreadPlace {
    /// Parked since the given time; the longest-parked is woken first when no kthread has a
    /// cache-warm claim on the core.
    Parked { since: u64 },
    /// Running on `core` (possibly being preempted from it).
    Active { core: CoreId },
}
