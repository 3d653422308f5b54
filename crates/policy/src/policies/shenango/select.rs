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
    /// cores, plus N/64 words, plus O(log runtimes) for a victim.
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
        let most_bursting = self.most_bursting_victim_for(slot)?;
        let runtime = &self.runtimes[slot];
        for &held in &runtime.cores_with_sibling {
            if let Some(sibling) = self.topology.sibling(held)
                && self.is_preemptible_by(sibling, slot)
            {
                return Some(sibling);
            }
        }
        if let Some(recent) = runtime.most_recent_core
            && self.is_preemptible_by(recent, slot)
        {
            return Some(recent);
        }
        // Prefer a core without a sibling: taking it splits no hyperthread pair.
        let victim = &self.runtimes[most_bursting];
        victim
            .cores_without_sibling
            .last()
            .or(victim.cores_with_sibling.last())
            .copied()
    }

    fn is_preemptible_by(&self, core: CoreId, taker: usize) -> bool {
        match self.cores[core.index()].state {
            CoreState::Running { runtime, .. } => self.may_preempt(runtime as usize, taker),
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
    /// cannot take a core back and forth every pass).
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
