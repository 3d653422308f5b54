//! A simulated kthread: where it runs and what it does, and its two queues with the
//! producer/consumer counters the daemon sweeps for the policy.

use std::collections::VecDeque;

use corral_policy::RingPositions;

/// What a kthread is doing. Every state but `Parked` holds a core: the policy sees the kthread
/// active from the wake decision until the daemon sees it park.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    Parked,
    /// Woken on `core`, not yet running (the grant latency).
    Waking {
        core: u16,
    },
    /// Running `request` since `started` (dispatch overhead first, then service).
    Busy {
        core: u16,
        request: u32,
        started: u64,
    },
    /// Found no work: spins, then parks, unless work shows up.
    Spinning {
        core: u16,
    },
    /// A batch runtime's kthread, always busy.
    Batch {
        core: u16,
    },
}

impl Run {
    pub fn core(self) -> Option<u16> {
        match self {
            Run::Parked => None,
            Run::Waking { core }
            | Run::Busy { core, .. }
            | Run::Spinning { core }
            | Run::Batch { core } => Some(core),
        }
    }
}

/// A FIFO of request slots with wrapping producer/consumer counters, like the runtime's rings.
#[derive(Debug, Default)]
pub struct Queue {
    items: VecDeque<u32>,
    positions: RingPositions,
}

impl Queue {
    pub fn push(&mut self, request: u32) {
        self.items.push_back(request);
        self.positions.produced = self.positions.produced.wrapping_add(1);
    }

    pub fn pop(&mut self) -> Option<u32> {
        let request = self.items.pop_front()?;
        self.positions.consumed = self.positions.consumed.wrapping_add(1);
        Some(request)
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn positions(&self) -> RingPositions {
        self.positions
    }
}

#[derive(Debug)]
pub struct Kthread {
    pub run: Run,
    /// Bumped at every change of state and every event scheduled for it; an event carrying an
    /// older epoch is stale.
    pub epoch: u32,
    /// Asked to give up its core and not yet parked.
    pub preempting: bool,
    /// Identifies the latest preemption request, for its event.
    pub preempt_sequence: u32,
    /// Requests handed in by the NIC (RSS), in arrival order.
    pub ingress: Queue,
    /// Requests interrupted by a preemption, to be resumed.
    pub run_queue: Queue,
}

impl Kthread {
    pub fn new() -> Self {
        Self {
            run: Run::Parked,
            epoch: 0,
            preempting: false,
            preempt_sequence: 0,
            ingress: Queue::default(),
            run_queue: Queue::default(),
        }
    }

    /// The next request of its own: resumed ones first, as the runtime's scheduler does.
    pub fn pop_own(&mut self) -> Option<u32> {
        self.run_queue.pop().or_else(|| self.ingress.pop())
    }

    pub fn has_own_work(&self) -> bool {
        !self.run_queue.is_empty() || !self.ingress.is_empty()
    }

    pub fn next_epoch(&mut self) -> u32 {
        self.epoch = self.epoch.wrapping_add(1);
        self.epoch
    }
}

impl Default for Kthread {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_pushes_and_pops() {
        let mut kthread = Kthread::new();
        kthread.ingress.push(1);
        kthread.ingress.push(2);
        kthread.run_queue.push(3);
        assert_eq!(kthread.pop_own(), Some(3));
        assert_eq!(kthread.pop_own(), Some(1));
        assert_eq!(kthread.ingress.positions(), RingPositions::new(2, 1));
        assert_eq!(kthread.run_queue.positions(), RingPositions::new(1, 1));
        assert!(kthread.has_own_work());
        assert_eq!(kthread.pop_own(), Some(2));
        assert!(!kthread.has_own_work());
        assert_eq!(kthread.run.core(), None);
    }
}
