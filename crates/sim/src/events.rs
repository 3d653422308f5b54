//! The event queue: a binary heap ordered by virtual time, ties broken by insertion order so
//! that a run is reproducible.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens at an instant. Events about a kthread carry the kthread's epoch (or preemption
/// sequence number) at scheduling time; one that no longer matches is stale and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The daemon's allocation pass.
    Pass,
    /// A request arrives at latency-critical runtime `runtime`.
    Arrival { runtime: u32 },
    /// A woken kthread starts running on its core.
    KthreadRuns {
        runtime: u32,
        kthread: u16,
        epoch: u32,
    },
    /// A kthread finishes the request it runs.
    Complete {
        runtime: u32,
        kthread: u16,
        epoch: u32,
    },
    /// A kthread that found no work has spun and parked; the daemon sees the park.
    ParkSeen {
        runtime: u32,
        kthread: u16,
        epoch: u32,
    },
    /// A kthread asked to give up its core (signal or cooperative cede) stops and parks.
    PreemptTakesEffect {
        runtime: u32,
        kthread: u16,
        sequence: u32,
    },
    /// Record a point of the cores-over-time series.
    Sample,
}

#[derive(Debug)]
struct Entry {
    at: u64,
    sequence: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.sequence) == (other.at, other.sequence)
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed: the heap is a max-heap and the earliest event must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.sequence).cmp(&(self.at, self.sequence))
    }
}

/// Pending events, earliest first; events at the same time come out in the order scheduled.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    scheduled: u64,
}

impl EventQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn schedule(&mut self, at: u64, event: Event) {
        self.heap.push(Entry {
            at,
            sequence: self.scheduled,
            event,
        });
        self.scheduled += 1;
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(u64, Event)> {
        self.heap.pop().map(|entry| (entry.at, entry.event))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_scheduling_order() {
        let mut queue = EventQueue::new();
        queue.schedule(30, Event::Pass);
        queue.schedule(10, Event::Arrival { runtime: 1 });
        queue.schedule(10, Event::Arrival { runtime: 2 });
        queue.schedule(20, Event::Sample);
        queue.schedule(10, Event::Arrival { runtime: 3 });
        let order: Vec<_> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(
            order,
            vec![
                (10, Event::Arrival { runtime: 1 }),
                (10, Event::Arrival { runtime: 2 }),
                (10, Event::Arrival { runtime: 3 }),
                (20, Event::Sample),
                (30, Event::Pass),
            ]
        );
        assert!(queue.is_empty());
    }
}
