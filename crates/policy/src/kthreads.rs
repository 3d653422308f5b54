//! A runtime's kthreads as the policies off the hot path keep them (the static and Arachne
//! policies; Shenango keeps its own, with an intrusive parked list): where each kthread is, its
//! latest accepted observation, which one to wake on a core, and recording a sweep.

use crate::error::AllocError;
use crate::ids::{CoreId, KthreadIndex, RuntimeId};
use crate::queues::{KthreadQueues, LastObservation, check_sweep};
use crate::spec::{KthreadPlace, RuntimeSpec};
use crate::views::KthreadView;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KthreadRecord {
    pub(crate) place: KthreadPlace,
    pub(crate) last_core: Option<CoreId>,
    pub(crate) last: LastObservation,
}

impl KthreadRecord {
    /// `count` kthreads, all parked since `now`.
    pub(crate) fn all_parked(count: u16, now: u64) -> Vec<Self> {
        (0..count)
            .map(|_| Self {
                place: KthreadPlace::Parked { since: now },
                last_core: None,
                last: LastObservation::default(),
            })
            .collect()
    }

    pub(crate) fn is_active(&self) -> bool {
        matches!(self.place, KthreadPlace::Active { .. })
    }

    /// Puts it on `core`. Counters from before it slept say nothing about how long work waits
    /// now, so the next pass compares nothing.
    pub(crate) fn activate(&mut self, core: CoreId) {
        self.place = KthreadPlace::Active { core };
        self.last_core = Some(core);
        self.last.pass = 0;
    }

    pub(crate) fn view(&self) -> KthreadView {
        KthreadView {
            place: self.place,
            last_core: self.last_core,
        }
    }
}

/// `runtime`'s kthread `kthread`, or why there is none.
pub(crate) fn kthread_record<'a>(
    kthreads: &'a [KthreadRecord],
    runtime: RuntimeId,
    spec: &RuntimeSpec,
    kthread: KthreadIndex,
) -> Result<&'a KthreadRecord, AllocError> {
    kthreads
        .get(kthread.index())
        .ok_or(AllocError::NoSuchKthread {
            runtime,
            kthread,
            kthreads: spec.kthreads,
        })
}

/// Which of `runtime`'s kthreads to wake on a core that `last_user` ran on last: that kthread
/// if it is `runtime`'s and parked (its cache lines may still be there), else the one parked
/// longest (leaving the recently parked ones for the cores they warmed). `None` if none is
/// parked.
pub(crate) fn kthread_to_wake(
    kthreads: &[KthreadRecord],
    runtime: RuntimeId,
    last_user: Option<(RuntimeId, KthreadIndex)>,
) -> Option<KthreadIndex> {
    let warm = last_user
        .filter(|&(user, kthread)| user == runtime && !kthreads[kthread.index()].is_active())
        .map(|(_, kthread)| kthread);
    warm.or_else(|| {
        kthreads
            .iter()
            .enumerate()
            .filter_map(|(index, kthread)| match kthread.place {
                KthreadPlace::Parked { since } => Some((since, index)),
                KthreadPlace::Active { .. } => None,
            })
            .min()
            .map(|(_, index)| KthreadIndex(index as u16))
    })
}

/// Checks one runtime's sweep for `pass` with [`check_sweep`] and, if it is accepted, records
/// every kthread's observation. Returns whether an item waited a whole pass.
pub(crate) fn record_sweep(
    kthreads: &mut [KthreadRecord],
    runtime: RuntimeId,
    spec: &RuntimeSpec,
    pass: u64,
    sweep: &[KthreadQueues],
) -> Result<bool, AllocError> {
    let congested = check_sweep(runtime, spec, pass, sweep, |index| {
        kthreads
            .get(index.index())
            .map(|kthread| (kthread.is_active(), kthread.last))
    })?;
    for &KthreadQueues { kthread, queues } in sweep {
        kthreads[kthread.index()].last = LastObservation { queues, pass };
    }
    Ok(congested)
}
