//! The allocator's record of each runtime and of each of its kthreads: registration, parked
//! order, the cores it holds, and the counters Algorithm 1 compares.

use crate::ids::{CoreId, KthreadIndex, RuntimeId};
use crate::queues::QueueSnapshot;
use crate::spec::{KthreadPlace, RuntimeSpec, RuntimeStats};

/// `observed_in_pass` of a kthread not observed since it woke: no pass equals it, nor follows it.
pub(super) const NOT_OBSERVED: u64 = u64::MAX;

/// Marks the end of the intrusive parked list.
const END: u16 = u16::MAX;

/// The allocator's record of one kthread of a runtime.
#[derive(Clone, Debug)]
pub(super) struct KthreadRecord {
    pub(super) place: KthreadPlace,
    pub(super) last_core: Option<CoreId>,
    /// Its counters at `observed_in_pass`; compared against only if that was the previous
    /// pass, so a comparison always spans exactly one interval.
    pub(super) queues_last_seen: QueueSnapshot,
    /// The pass in which it was last observed since it last woke ([`NOT_OBSERVED`]: not yet).
    /// Also catches a second observation in one pass without clearing anything per pass.
    pub(super) observed_in_pass: u64,
    parked_older: u16,
    parked_newer: u16,
}

impl KthreadRecord {
    pub(super) fn is_parked(&self) -> bool {
        matches!(self.place, KthreadPlace::Parked { .. })
    }
}

/// The allocator's record of one runtime slot. Slots of unregistered runtimes stay in the table
/// (`live == false`) so their
/// buffers are reused by the next registration.
#[derive(Clone, Debug)]
pub(super) struct RuntimeRecord {
    pub(super) id: RuntimeId,
    pub(super) live: bool,
    pub(super) spec: RuntimeSpec,
    pub(super) kthreads: Vec<KthreadRecord>,
    /// Parked kthreads, oldest park first, linked through the kthreads so that waking the one
    /// that last ran on a core (from anywhere in the list) is O(1).
    parked_oldest: u16,
    parked_newest: u16,
    /// Cores its kthreads run on and that are not being preempted, split by whether the core
    /// has a sibling: sibling preference only needs to walk the first list, and a victim core
    /// without a sibling disturbs nobody's hyperthread pair.
    pub(super) cores_with_sibling: Vec<CoreId>,
    pub(super) cores_without_sibling: Vec<CoreId>,
    /// Cores its kthreads still run on but have been asked to give up.
    pub(super) cores_handing_over: u32,
    /// Cores promised to it, handed over when their current kthread parks.
    pub(super) cores_reserved: u32,
    /// The core it gave up last (Algorithm 2's second preference).
    pub(super) most_recent_core: Option<CoreId>,
    /// The pass in which Algorithm 1 last found it congested.
    pub(super) congested_in_pass: u64,
    /// It has work but no core to run it on (a packet or timer for an idle runtime). Stays set
    /// until it is granted a core, since with no kthread running there is nothing to observe.
    pub(super) has_pending_work: bool,
    /// A preempted kthread of its parked with runnable work left: it waits for an idle core
    /// (never preempting for it) until it is granted one.
    pub(super) has_stranded_work: bool,
    /// It asked for a core and none could be had; a core freed by a park goes to it first.
    pub(super) waiting: bool,
    pub(super) stats: RuntimeStats,
}

impl RuntimeRecord {
    pub(super) fn vacant(id: RuntimeId) -> Self {
        Self {
            id,
            live: false,
            spec: RuntimeSpec::new(0, 1),
            kthreads: Vec::new(),
            parked_oldest: END,
            parked_newest: END,
            cores_with_sibling: Vec::new(),
            cores_without_sibling: Vec::new(),
            cores_handing_over: 0,
            cores_reserved: 0,
            most_recent_core: None,
            congested_in_pass: 0,
            has_pending_work: false,
            has_stranded_work: false,
            waiting: false,
            stats: RuntimeStats::default(),
        }
    }

    /// Makes this slot hold a new runtime, all kthreads parked in index order.
    pub(super) fn occupy(&mut self, id: RuntimeId, spec: RuntimeSpec, now: u64, cores: usize) {
        let vacant = Self::vacant(id);
        let mut kthreads = core::mem::take(&mut self.kthreads);
        let mut cores_with_sibling = core::mem::take(&mut self.cores_with_sibling);
        let mut cores_without_sibling = core::mem::take(&mut self.cores_without_sibling);
        *self = vacant;
        self.live = true;
        self.spec = spec;

        kthreads.clear();
        kthreads.extend((0..spec.kthreads).map(|_| KthreadRecord {
            place: KthreadPlace::Parked { since: now },
            last_core: None,
            queues_last_seen: QueueSnapshot::default(),
            observed_in_pass: NOT_OBSERVED,
            parked_older: END,
            parked_newer: END,
        }));
        self.kthreads = kthreads;
        for kthread in 0..spec.kthreads {
            self.link_newest_parked(kthread);
        }

        // Sized once here so that granting cores during a pass never reallocates.
        let holdable = usize::from(spec.max_cores).min(cores);
        cores_with_sibling.clear();
        cores_with_sibling.reserve(holdable);
        cores_without_sibling.clear();
        cores_without_sibling.reserve(holdable);
        self.cores_with_sibling = cores_with_sibling;
        self.cores_without_sibling = cores_without_sibling;
    }

    /// Cores it runs on and will keep.
    pub(super) fn retained(&self) -> u32 {
        (self.cores_with_sibling.len() + self.cores_without_sibling.len()) as u32
    }

    /// Cores its kthreads occupy right now.
    pub(super) fn running(&self) -> u32 {
        self.retained() + self.cores_handing_over
    }

    /// Cores it will hold once pending handovers settle.
    pub(super) fn committed(&self) -> u32 {
        self.retained() + self.cores_reserved
    }

    /// Cores it occupies or has been promised: bounded by its maximum, so that it never has more
    /// kthreads awake than it asked for, even while a core of its is being taken back.
    pub(super) fn claimed(&self) -> u32 {
        self.running() + self.cores_reserved
    }

    /// Cores held beyond its guarantee; only these may be preempted.
    pub(super) fn burst(&self) -> i64 {
        i64::from(self.retained()) - i64::from(self.spec.guaranteed_cores)
    }

    /// Whether one more core may be promised to it now. One promise at a time: a runtime still
    /// waiting for a preempted core is not given a second one for the same congestion.
    pub(super) fn can_grow(&self) -> bool {
        self.cores_reserved == 0 && self.claimed() < u32::from(self.spec.max_cores)
    }

    pub(super) fn oldest_parked(&self) -> Option<KthreadIndex> {
        (self.parked_oldest != END).then_some(KthreadIndex(self.parked_oldest))
    }

    /// Parked kthreads from the longest-parked on.
    pub(super) fn parked_in_order(&self) -> impl Iterator<Item = KthreadIndex> + '_ {
        let mut next = self.parked_oldest;
        core::iter::from_fn(move || {
            let current = next;
            if current == END {
                return None;
            }
            next = self.kthreads[usize::from(current)].parked_newer;
            Some(KthreadIndex(current))
        })
    }

    pub(super) fn park(&mut self, kthread: KthreadIndex, now: u64) {
        let entry = &mut self.kthreads[kthread.index()];
        entry.place = KthreadPlace::Parked { since: now };
        // Counters from before it slept say nothing about how long work waits after it wakes.
        entry.observed_in_pass = NOT_OBSERVED;
        self.link_newest_parked(kthread.0);
        self.stats.parks += 1;
    }

    pub(super) fn activate(&mut self, kthread: KthreadIndex, core: CoreId) {
        self.unlink_parked(kthread.0);
        let entry = &mut self.kthreads[kthread.index()];
        entry.place = KthreadPlace::Active { core };
        entry.last_core = Some(core);
        entry.observed_in_pass = NOT_OBSERVED;
    }

    fn link_newest_parked(&mut self, kthread: u16) {
        let previous_newest = self.parked_newest;
        {
            let entry = &mut self.kthreads[usize::from(kthread)];
            entry.parked_older = previous_newest;
            entry.parked_newer = END;
        }
        if previous_newest == END {
            self.parked_oldest = kthread;
        } else {
            self.kthreads[usize::from(previous_newest)].parked_newer = kthread;
        }
        self.parked_newest = kthread;
    }

    fn unlink_parked(&mut self, kthread: u16) {
        let (older, newer) = {
            let entry = &self.kthreads[usize::from(kthread)];
            (entry.parked_older, entry.parked_newer)
        };
        if older == END {
            self.parked_oldest = newer;
        } else {
            self.kthreads[usize::from(older)].parked_newer = newer;
        }
        if newer == END {
            self.parked_newest = older;
        } else {
            self.kthreads[usize::from(newer)].parked_older = older;
        }
        let entry = &mut self.kthreads[usize::from(kthread)];
        entry.parked_older = END;
        entry.parked_newer = END;
    }
}
