//! What the allocator reads from a kthread's shared cache line, and Algorithm 1's test on it.

/// Positions of one single-producer single-consumer queue: free-running counters of items ever
/// added and ever taken, wrapping at 2^32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounters {
    /// Items added so far (the producer's position).
    pub produced: u32,
    /// Items taken so far (the consumer's position).
    pub consumed: u32,
}

impl QueueCounters {
    pub const fn new(produced: u32, consumed: u32) -> Self {
        Self { produced, consumed }
    }

    /// Items queued now. Garbage (huge) if the consumer claims to be ahead of the producer.
    pub const fn len(self) -> u32 {
        self.produced.wrapping_sub(self.consumed)
    }

    pub const fn is_empty(self) -> bool {
        self.produced == self.consumed
    }
}

/// One kthread's queues as seen at one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueSnapshot {
    /// Runnable uthreads waiting on the kthread's run queue.
    pub run_queue: QueueCounters,
    /// Packets and commands waiting on the kthread's ingress ring.
    pub ingress: QueueCounters,
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
const fn precedes(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Rejects counters that no honest runtime can produce.
pub(super) fn check(
    previous: Option<QueueCounters>,
    now: QueueCounters,
    capacity: u32,
) -> Result<(), QueueFault> {
    if now.len() > capacity {
        return Err(QueueFault::LongerThanCapacity {
            length: now.len(),
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

/// Algorithm 1's signal: something that was queued at the previous pass is queued still, i.e.
/// the consumer has not yet reached where the producer stood then. Queue length alone would need
/// a threshold tuned per workload; an item's age does not.
pub(super) fn item_outlived_interval(previous: QueueCounters, now: QueueCounters) -> bool {
    !previous.is_empty() && precedes(now.consumed, previous.produced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_still_queued_one_pass_later_is_congestion() {
        let before = QueueCounters::new(5, 3);
        assert!(item_outlived_interval(before, QueueCounters::new(9, 4)));
        assert!(!item_outlived_interval(before, QueueCounters::new(9, 5)));
        assert!(!item_outlived_interval(
            QueueCounters::new(3, 3),
            QueueCounters::new(4, 3)
        ));
    }

    #[test]
    fn congestion_test_survives_counter_wrap() {
        let before = QueueCounters::new(2, u32::MAX - 1);
        assert!(item_outlived_interval(
            before,
            QueueCounters::new(4, u32::MAX)
        ));
        assert!(item_outlived_interval(before, QueueCounters::new(4, 1)));
        assert!(!item_outlived_interval(before, QueueCounters::new(4, 2)));
        assert_eq!(check(Some(before), QueueCounters::new(4, 1), 8), Ok(()));
    }

    #[test]
    fn impossible_counters_are_faults() {
        assert_eq!(
            check(None, QueueCounters::new(3, 4), 8),
            Err(QueueFault::LongerThanCapacity {
                length: u32::MAX,
                capacity: 8
            })
        );
        assert_eq!(
            check(None, QueueCounters::new(20, 4), 8),
            Err(QueueFault::LongerThanCapacity {
                length: 16,
                capacity: 8
            })
        );
        let before = QueueCounters::new(10, 6);
        assert_eq!(
            check(Some(before), QueueCounters::new(10, 5), 8),
            Err(QueueFault::ConsumedWentBackwards {
                previous: 6,
                now: 5
            })
        );
        assert_eq!(
            check(Some(before), QueueCounters::new(9, 6), 8),
            Err(QueueFault::ProducedWentBackwards {
                previous: 10,
                now: 9
            })
        );
    }
}
