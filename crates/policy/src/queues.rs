//! What a policy reads from a kthread's shared cache line, and the checks that refuse counters
//! no honest runtime can produce. Whether an item waited a whole interval (Algorithm 1's test)
//! is [`RingPositions::has_waited_since`], shared with the daemon's own queues.

use corral_abi::RingPositions;

use crate::error::AllocError;
use crate::ids::{KthreadIndex, RuntimeId};
use crate::spec::RuntimeSpec;

/// One kthread's queues as seen at one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Runnable uthreads waiting on the kthread's run queue.
    pub run_queue: RingPositions,
    /// Packets and commands waiting on the kthread's ingress ring.
    pub ingress: RingPositions,
}

/// One active kthread's queues, as swept for [`Policy::observe_runtime`](crate::Policy::observe_runtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KthreadQueues {
    pub kthread: KthreadIndex,
    pub queues: QueueSnapshot,
}

/// Which of a kthread's queues an observation problem concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    RunQueue,
    Ingress,
}

/// Why a queue observation cannot be true. The counters come from memory the runtime writes, so
/// these are the runtime's fault, not the daemon's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueFault {
    /// More items queued than the queue holds; this is also how a consumer running ahead of its
    /// producer shows up.
    LongerThanCapacity { length: u32, capacity: u32 },
    /// The consumer position moved back since the previous pass.
    ConsumedWentBackwards { previous: u32, now: u32 },
    /// The producer position moved back since the previous pass.
    ProducedWentBackwards { previous: u32, now: u32 },
}

impl core::fmt::Display for QueueFault {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::LongerThanCapacity { length, capacity } => write!(
                f,
                "{length} items queued in a queue of {capacity} (consumer ahead of producer?)"
            ),
            Self::ConsumedWentBackwards { previous, now } => {
                write!(f, "consumer position went back from {previous} to {now}")
            }
            Self::ProducedWentBackwards { previous, now } => {
                write!(f, "producer position went back from {previous} to {now}")
            }
        }
    }
}

/// `a` comes before `b` on the wrapping counter line. Positions one pass apart are never 2^31
/// items apart, so the signed difference is unambiguous.
#[inline]
const fn precedes(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Rejects counters that no honest runtime can produce: more queued than `capacity`, or, given
/// the counters of the previous pass, either end moving back. Every policy applies it to what
/// it observes, since the counters come from memory the runtime writes.
#[inline]
pub fn check_counters(
    previous: Option<RingPositions>,
    now: RingPositions,
    capacity: u32,
) -> Result<(), QueueFault> {
    if now.pending() > capacity {
        return Err(QueueFault::LongerThanCapacity {
            length: now.pending(),
            capacity,
        });
    }
    if let Some(previous) = previous {
        if precedes(now.consumed, previous.consumed) {
            return Err(QueueFault::ConsumedWentBackwards {
                previous: previous.consumed,
                now: now.consumed,
            });
        }
        if precedes(now.produced, previous.produced) {
            return Err(QueueFault::ProducedWentBackwards {
                previous: previous.produced,
                now: now.produced,
            });
        }
    }
    Ok(())
}

/// A kthread's latest accepted observation, as a policy keeps it to judge the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastObservation {
    pub queues: QueueSnapshot,
    /// The pass it was made in, counted from 1; 0: never.
    pub pass: u64,
}

/// Checks one runtime's sweep for `pass` as [`Policy::observe_runtime`](crate::Policy::observe_runtime)
/// requires: kthreads that exist (`kthread` answers `None` for one that does not), in ascending
/// order, active (`kthread` answers whether it is, and its last observation), not yet observed
/// in this pass, with counters [`check_counters`] accepts against their previous pass's. Returns
/// whether an item waited a whole pass on a kthread observed in the previous pass too
/// (Algorithm 1's congestion). Records nothing: the caller records every kthread's observation
/// once the whole sweep is accepted. For policies whose kthread records are not on a hot path;
/// the Shenango policy keeps its own copy of these checks inline.
pub fn check_sweep(
    runtime: RuntimeId,
    spec: &RuntimeSpec,
    pass: u64,
    sweep: &[KthreadQueues],
    kthread: impl Fn(KthreadIndex) -> Option<(bool, LastObservation)>,
) -> Result<bool, AllocError> {
    let mut congested = false;
    let mut lowest_allowed = 0;
    for &KthreadQueues {
        kthread: index,
        queues,
    } in sweep
    {
        let Some((active, last)) = kthread(index) else {
            return Err(AllocError::NoSuchKthread {
                runtime,
                kthread: index,
                kthreads: spec.kthreads,
            });
        };
        if index.index() < lowest_allowed {
            return Err(AllocError::ObservationsOutOfOrder {
                runtime,
                kthread: index,
            });
        }
        lowest_allowed = index.index() + 1;
        if !active {
            return Err(AllocError::KthreadNotActive {
                runtime,
                kthread: index,
            });
        }
        if last.pass == pass {
            return Err(AllocError::AlreadyObserved {
                runtime,
                kthread: index,
            });
        }
        let previous = (last.pass.wrapping_add(1) == pass).then_some(last.queues);
        for (queue, now, before, capacity) in [
            (
                QueueKind::RunQueue,
                queues.run_queue,
                previous.map(|seen| seen.run_queue),
                spec.run_queue_capacity,
            ),
            (
                QueueKind::Ingress,
                queues.ingress,
                previous.map(|seen| seen.ingress),
                spec.ingress_capacity,
            ),
        ] {
            check_counters(before, now, capacity).map_err(|fault| AllocError::ImpossibleQueue {
                runtime,
                kthread: index,
                queue,
                fault,
            })?;
            congested |= before.is_some_and(|before| now.has_waited_since(before));
        }
    }
    Ok(congested)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_counters_are_faults() {
        assert_eq!(
            check_counters(None, RingPositions::new(3, 4), 8),
            Err(QueueFault::LongerThanCapacity {
                length: u32::MAX,
                capacity: 8
            })
        );
        assert_eq!(
            check_counters(None, RingPositions::new(20, 4), 8),
            Err(QueueFault::LongerThanCapacity {
                length: 16,
                capacity: 8
            })
        );
        let before = RingPositions::new(10, 6);
        assert_eq!(
            check_counters(Some(before), RingPositions::new(10, 5), 8),
            Err(QueueFault::ConsumedWentBackwards {
                previous: 6,
                now: 5
            })
        );
        assert_eq!(
            check_counters(Some(before), RingPositions::new(9, 6), 8),
            Err(QueueFault::ProducedWentBackwards {
                previous: 10,
                now: 9
            })
        );
    }
}
