//! Per-core bookkeeping.

use crate::ids::{CoreId, KthreadIndex, RuntimeId};
use crate::views::CoreStats;

/// Runtimes are named by slot inside the allocator: a core can only point at a live runtime,
/// because unregistering clears every core that names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CoreState {
    Idle,
    Running {
        runtime: u32,
        kthread: KthreadIndex,
    },
    /// `kthread` has been asked to park; the core then goes to `to` (or back to the idle pool
    /// if `to` unregistered meanwhile).
    HandingOver {
        runtime: u32,
        kthread: KthreadIndex,
        to: Option<u32>,
        since: u64,
        overdue_reported: bool,
    },
}

#[derive(Clone, Debug)]
pub(super) struct Core {
    pub(super) state: CoreState,
    pub(super) sibling: Option<CoreId>,
    /// Index of this core in whichever list holds it: its runtime's core list while running, the
    /// allocator's handover list while handing over. Makes removal O(1).
    pub(super) list_position: u32,
    pub(super) last_user: Option<(RuntimeId, KthreadIndex)>,
    /// When its current kthread was started on it; meaningless while idle. Runtimes of equal
    /// standing may take the core only once this is a share quantum old.
    pub(super) held_since: u64,
    pub(super) stats: CoreStats,
}

/// A set of cores as a bitmap, so "some idle core" costs a scan of N/64 words.
#[derive(Clone, Debug)]
pub(super) struct CoreSet {
    words: Vec<u64>,
}

impl CoreSet {
    pub(super) fn new(cores: usize) -> Self {
        Self {
            words: vec![0; cores.div_ceil(64)],
        }
    }

    pub(super) fn insert(&mut self, core: CoreId) {
        self.words[core.index() / 64] |= 1 << (core.index() % 64);
    }

    pub(super) fn remove(&mut self, core: CoreId) {
        self.words[core.index() / 64] &= !(1 << (core.index() % 64));
    }

    pub(super) fn contains(&self, core: CoreId) -> bool {
        self.words[core.index() / 64] & (1 << (core.index() % 64)) != 0
    }

    /// The lowest-numbered core in the set.
    pub(super) fn first(&self) -> Option<CoreId> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, word)| **word != 0)
            .map(|(index, word)| CoreId((index * 64 + word.trailing_zeros() as usize) as u16))
    }

    pub(super) fn len(&self) -> usize {
        self.words
            .iter()
            .map(|word| word.count_ones() as usize)
            .sum()
    }
}
