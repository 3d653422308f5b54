//! Algorithm 2 (SELECTCORE): which core a runtime gets, and whom it is taken from.

use core::cmp::Reverse;

use super::cores::CoreState;
use super::{BurstSharing, Shenango};
use crate::CoreId;

const NOT_RANKED: u32 = u32::MAX;

impl Shenango {
    /// Picks the core to grant, in the paper's order of preference:
    ///
    /// 1. the hyperthread sibling of a core the runtime runs on (shared L1/L2, and no other
    ///    runtime contending for them);
    /// 2. the core it gave up most recently (its cache may still be warm);
    /// 3. any idle core, preferring one whose sibling is idle too, so the half-free physical
    ///    cores stay available to the runtimes on their other half;
    /// 4. a core of the most bursting runtime that may be preempted.
    ///
    /// CANBEALLOCATED accepts a busy core only when no core is idle, so the two regimes are
    /// separate paths: an idle core always wins over a preemption. Cost: the runtime's own
    /// cores, plus N/64 words, plus O(log runtimes) for a victim, plus, for a runtime that
    /// must wait out the share quantum, the victims' cores up to the first old enough.
    pub(super) fn select_core(&mut self, slot: usize) -> Option<CoreId> {
        if self.idle_count > 0 {
            self.select_idle_core(slot)
        } else {
            self.select_core_to_preempt(slot)
        }
    }

    fn select_idle_core(&self, slot: usize) -> Option<CoreId> {
        let runtime = &self.runtimes[slot];
        for &held in &runtime.cores_with_sibling {
            if let Some(sibling) = self.topology.sibling(held)
                && self.idle.contains(sibling)
            {
                return Some(sibling);
            }
        }
        if let Some(recent) = runtime.most_recent_core
            && self.idle.contains(recent)
        {
            return Some(recent);
        }
        self.idle_whole.first().or_else(|| self.idle.first())
    }

    fn select_core_to_preempt(&mut self, slot: usize) -> Option<CoreId> {
        self.ensure_victim_rank();
        // Whether a runtime may be preempted only grows with its burst, so if the most
        // bursting one is off limits, so is every core steps 1 and 2 could name.
        self.most_bursting_victim_for(slot)?;
        let granted_by = self.grant_cutoff_for(slot)?;
        let runtime = &self.runtimes[slot];
        for &held in &runtime.cores_with_sibling {
            if let Some(sibling) = self.topology.sibling(held)
                && self.is_preemptible_by(sibling, slot, granted_by)
            {
                return Some(sibling);
            }
        }
        if let Some(recent) = runtime.most_recent_core
            && self.is_preemptible_by(recent, slot, granted_by)
        {
            return Some(recent);
        }
        // The most bursting runtime's cores may all be younger than the quantum while a less
        // bursting one that may also be preempted holds an older core: walk down the ranking,
        // which stops at the first runtime that may not be preempted (none after it may be).
        for position in 0..self.victim_rank.len() {
            let victim = self.victim_rank[position] as usize;
            if victim == slot {
                continue;
            }
            if !self.may_preempt(victim, slot) {
                break;
            }
            if let Some(core) = self.core_granted_by(victim, granted_by) {
                return Some(core);
            }
        }
        None
    }

    /// The latest time a core may have been granted to its runtime for `taker` to take it now:
    /// any time (`u64::MAX`) for a runtime below its guarantee, else a share quantum ago; `None`
    /// if no grant can be that old yet.
    fn grant_cutoff_for(&self, taker: usize) -> Option<u64> {
        let runtime = &self.runtimes[taker];
        if runtime.committed() < u32::from(runtime.spec.guaranteed_cores) {
            return Some(u64::MAX);
        }
        self.now.checked_sub(self.config.share_quantum)
    }

    /// A core of `victim` granted at or before `granted_by`, preferring one without a sibling
    /// (taking it splits no hyperthread pair), and the last listed first.
    fn core_granted_by(&self, victim: usize, granted_by: u64) -> Option<CoreId> {
        let victim = &self.runtimes[victim];
        let old_enough = |core: &&CoreId| self.cores[core.index()].held_since <= granted_by;
        victim
            .cores_without_sibling
            .iter()
            .rev()
            .find(old_enough)
            .or_else(|| victim.cores_with_sibling.iter().rev().find(old_enough))
            .copied()
    }

    fn is_preemptible_by(&self, core: CoreId, taker: usize, granted_by: u64) -> bool {
        let entry = &self.cores[core.index()];
        match entry.state {
            CoreState::Running { runtime, .. } => {
                entry.held_since <= granted_by && self.may_preempt(runtime as usize, taker)
            }
            CoreState::Idle | CoreState::HandingOver { .. } => false,
        }
    }

    /// The runtime bursting most, other than the taker, if the taker may preempt it.
    fn most_bursting_victim_for(&self, taker: usize) -> Option<usize> {
        let victim = self
            .victim_rank
            .iter()
            .copied()
            .find(|&victim| victim as usize != taker)? as usize;
        self.may_preempt(victim, taker).then_some(victim)
    }

    /// Only cores beyond a guarantee are ever taken, and under [`BurstSharing::Balanced`] only
    /// from a runtime that keeps at least the taker's burst afterwards (so two bursting runtimes
    /// cannot take a core back and forth every pass). Which of the victim's cores are old
    /// enough to take is the share quantum's business ([`Self::grant_cutoff_for`]).
    fn may_preempt(&self, victim: usize, taker: usize) -> bool {
        if victim == taker {
            return false;
        }
        let victim_burst = self.runtimes[victim].burst();
        if victim_burst <= 0 {
            return false;
        }
        let taker = &self.runtimes[taker];
        let committed = i64::from(taker.committed());
        let guaranteed = i64::from(taker.spec.guaranteed_cores);
        let victim_burst_after = victim_burst - 1;
        let taker_burst_after = committed + 1 - guaranteed;
        match self.config.burst_sharing {
            BurstSharing::AnyBursting => true,
            BurstSharing::Balanced => {
                committed < guaranteed
                    // A runtime with no core at all must get one even when everyone bursts by
                    // one: otherwise it could wait forever for a batch job to park.
                    || committed == 0
                    || victim_burst_after >= taker_burst_after
            }
        }
    }

    fn ensure_victim_rank(&mut self) {
        if self.victim_rank_valid {
            return;
        }
        for &slot in &self.victim_rank {
            self.victim_rank_position[slot as usize] = NOT_RANKED;
        }
        self.victim_rank.clear();
        for (slot, runtime) in self.runtimes.iter().enumerate() {
            if runtime.live && runtime.burst() > 0 {
                self.victim_rank.push(slot as u32);
            }
        }
        let runtimes = &self.runtimes;
        self.victim_rank
            .sort_unstable_by_key(|&slot| (Reverse(runtimes[slot as usize].burst()), slot));
        for (position, &slot) in self.victim_rank.iter().enumerate() {
            self.victim_rank_position[slot as usize] = position as u32;
        }
        self.victim_rank_valid = true;
    }

    /// Keeps the ranking sorted after `victim`'s burst dropped by one: it swaps places with the
    /// last runtime of its old burst level.
    pub(super) fn note_victim_lost_core(&mut self, victim: usize) {
        if !self.victim_rank_valid {
            return;
        }
        let position = self.victim_rank_position[victim];
        if position == NOT_RANKED {
            self.victim_rank_valid = false;
            return;
        }
        let position = position as usize;
        let burst = self.runtimes[victim].burst();
        let runtimes = &self.runtimes;
        let outranking = self.victim_rank[position + 1..]
            .partition_point(|&other| runtimes[other as usize].burst() > burst);
        let target = position + outranking;
        if target != position {
            self.victim_rank.swap(position, target);
            let displaced = self.victim_rank[position] as usize;
            self.victim_rank_position[displaced] = position as u32;
            self.victim_rank_position[victim] = target as u32;
        }
    }
}
