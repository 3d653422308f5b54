//! The moves a core makes between idle, running and handing over, each keeping every index
//! (idle bitmaps, per-runtime core lists, the handover list, parked lists) in step.

use super::Shenango;
use super::cores::CoreState;
use crate::{CoreId, Decision, KthreadIndex, KthreadPlace, RuntimeId};

impl Shenango {
    pub(super) fn mark_idle(&mut self, core: CoreId) {
        self.cores[core.index()].state = CoreState::Idle;
        self.idle.insert(core);
        self.idle_count += 1;
        match self.cores[core.index()].sibling {
            None => self.idle_whole.insert(core),
            Some(sibling) if self.idle.contains(sibling) => {
                self.idle_whole.insert(core);
                self.idle_whole.insert(sibling);
            }
            Some(_) => {}
        }
    }

    fn take_idle(&mut self, core: CoreId) {
        self.idle.remove(core);
        self.idle_whole.remove(core);
        self.idle_count -= 1;
        if let Some(sibling) = self.cores[core.index()].sibling {
            self.idle_whole.remove(sibling);
        }
    }

    fn attach_to_runtime(&mut self, slot: usize, core: CoreId) {
        let runtime = &mut self.runtimes[slot];
        let list = if self.cores[core.index()].sibling.is_some() {
            &mut runtime.cores_with_sibling
        } else {
            &mut runtime.cores_without_sibling
        };
        self.cores[core.index()].list_position = list.len() as u32;
        list.push(core);
    }

    fn detach_from_runtime(&mut self, slot: usize, core: CoreId) {
        let runtime = &mut self.runtimes[slot];
        let list = if self.cores[core.index()].sibling.is_some() {
            &mut runtime.cores_with_sibling
        } else {
            &mut runtime.cores_without_sibling
        };
        let position = self.cores[core.index()].list_position as usize;
        list.swap_remove(position);
        if let Some(&moved) = list.get(position) {
            self.cores[moved.index()].list_position = position as u32;
        }
    }

    fn attach_handover(&mut self, core: CoreId) {
        self.cores[core.index()].list_position = self.handovers.len() as u32;
        self.handovers.push(core);
    }

    fn detach_handover(&mut self, core: CoreId) {
        let position = self.cores[core.index()].list_position as usize;
        self.handovers.swap_remove(position);
        if let Some(&moved) = self.handovers.get(position) {
            self.cores[moved.index()].list_position = position as u32;
        }
    }

    pub(super) fn set_waiting(&mut self, slot: usize, waiting: bool) {
        let runtime = &mut self.runtimes[slot];
        if runtime.waiting != waiting {
            runtime.waiting = waiting;
            if waiting {
                self.waiting_count += 1;
            } else {
                self.waiting_count -= 1;
            }
        }
    }

    /// The kthread that last ran on `core` if it belongs to this runtime and is parked (its
    /// cache lines may still be there), else the one parked longest (leaving recently parked
    /// ones for the cores they warmed).
    fn choose_kthread(&self, slot: usize, core: CoreId) -> Option<KthreadIndex> {
        let runtime = &self.runtimes[slot];
        if let Some((user, kthread)) = self.cores[core.index()].last_user
            && user == runtime.id
            && runtime.kthreads[kthread.index()].is_parked()
        {
            return Some(kthread);
        }
        runtime.oldest_parked()
    }

    /// Puts one of the runtime's parked kthreads on `core`, which nobody occupies any more.
    /// Fails only if the runtime has no parked kthread, which `can_grow` rules out.
    fn start_on_core(&mut self, slot: usize, core: CoreId, out: &mut Vec<Decision>) -> bool {
        let Some(kthread) = self.choose_kthread(slot, core) else {
            return false;
        };
        let id = self.runtimes[slot].id;
        self.runtimes[slot].activate(kthread, core);
        self.cores[core.index()].state = CoreState::Running {
            runtime: slot as u32,
            kthread,
        };
        self.attach_to_runtime(slot, core);

        let entry = &mut self.cores[core.index()];
        entry.held_since = self.now;
        entry.stats.grants += 1;
        if entry.last_user.is_none_or(|(user, _)| user != id) {
            entry.stats.reallocations += 1;
        }
        entry.last_user = Some((id, kthread));

        self.note_demand_met(slot);
        self.runtimes[slot].stats.grants += 1;
        // Its burst grew, so a victim ranking built earlier in this call is stale.
        self.victim_rank_valid = false;
        out.push(Decision::Wake {
            runtime: id,
            kthread,
            core,
        });
        true
    }

    fn note_demand_met(&mut self, slot: usize) {
        self.runtimes[slot].has_pending_work = false;
        self.runtimes[slot].has_stranded_work = false;
        self.set_waiting(slot, false);
    }

    /// Gives the runtime one more core if it may have one and one can be had; `only_idle`
    /// forbids preempting. Returns whether a core was granted or promised.
    pub(super) fn grant_one_core(
        &mut self,
        slot: usize,
        only_idle: bool,
        out: &mut Vec<Decision>,
    ) -> bool {
        if !self.runtimes[slot].can_grow() || (only_idle && self.idle_count == 0) {
            return false;
        }
        let Some(core) = self.select_core(slot) else {
            return false;
        };
        match self.cores[core.index()].state {
            CoreState::Idle => {
                self.take_idle(core);
                if self.start_on_core(slot, core, out) {
                    true
                } else {
                    self.mark_idle(core);
                    false
                }
            }
            CoreState::Running { .. } => {
                self.preempt(core, slot, out);
                true
            }
            // select_core never offers a core that is already changing hands.
            CoreState::HandingOver { .. } => false,
        }
    }

    fn preempt(&mut self, core: CoreId, for_slot: usize, out: &mut Vec<Decision>) {
        let CoreState::Running {
            runtime: victim,
            kthread,
        } = self.cores[core.index()].state
        else {
            return;
        };
        let victim = victim as usize;
        self.detach_from_runtime(victim, core);
        self.runtimes[victim].cores_handing_over += 1;
        self.runtimes[victim].stats.preemptions_suffered += 1;
        self.cores[core.index()].state = CoreState::HandingOver {
            runtime: victim as u32,
            kthread,
            to: Some(for_slot as u32),
            since: self.now,
            overdue_reported: false,
        };
        self.attach_handover(core);
        self.runtimes[for_slot].cores_reserved += 1;
        self.note_demand_met(for_slot);
        self.note_victim_lost_core(victim);
        out.push(Decision::Preempt {
            victim_runtime: self.runtimes[victim].id,
            victim_kthread: kthread,
            core,
            for_runtime: self.runtimes[for_slot].id,
        });
    }

    /// The kthread on a running (not handing-over) core parked.
    pub(super) fn park_from_running_core(
        &mut self,
        slot: usize,
        kthread: KthreadIndex,
        core: CoreId,
    ) {
        self.detach_from_runtime(slot, core);
        let now = self.now;
        let runtime = &mut self.runtimes[slot];
        runtime.park(kthread, now);
        runtime.most_recent_core = Some(core);
    }

    /// The kthread on a handing-over core parked: the core goes to whoever it was promised to.
    pub(super) fn complete_handover(&mut self, core: CoreId, out: &mut Vec<Decision>) {
        let CoreState::HandingOver {
            runtime: victim,
            kthread,
            to,
            ..
        } = self.cores[core.index()].state
        else {
            return;
        };
        let victim = victim as usize;
        self.detach_handover(core);
        let now = self.now;
        let runtime = &mut self.runtimes[victim];
        runtime.cores_handing_over -= 1;
        runtime.park(kthread, now);
        runtime.most_recent_core = Some(core);
        if let Some(to) = to {
            let to = to as usize;
            self.runtimes[to].cores_reserved -= 1;
            if self.start_on_core(to, core, out) {
                return;
            }
        }
        self.mark_idle(core);
        self.serve_waiters(out);
    }

    /// Offers idle cores to runtimes that asked for a core and got none, neediest first. Never
    /// preempts: nothing about the bursting runtimes changed since they were refused.
    pub(super) fn serve_waiters(&mut self, out: &mut Vec<Decision>) {
        if self.waiting_count == 0 || self.idle_count == 0 {
            return;
        }
        let rotation = self.grant_rotation();
        self.requesters.clear();
        for slot in 0..self.runtimes.len() {
            let runtime = &self.runtimes[slot];
            if runtime.live && runtime.waiting {
                let priority = self.grant_priority(slot, rotation);
                self.requesters.push((priority, slot as u32));
            }
        }
        self.requesters.sort_unstable();
        for position in 0..self.requesters.len() {
            if self.idle_count == 0 {
                break;
            }
            let slot = self.requesters[position].1 as usize;
            self.grant_one_core(slot, true, out);
        }
    }

    /// Takes back every core the runtime occupies or was promised, and frees its slot.
    pub(super) fn reclaim_everything_of(&mut self, slot: usize, out: &mut Vec<Decision>) {
        for index in 0..self.runtimes[slot].kthreads.len() {
            let KthreadPlace::Active { core } = self.runtimes[slot].kthreads[index].place else {
                continue;
            };
            match self.cores[core.index()].state {
                CoreState::Running { .. } => self.mark_idle(core),
                CoreState::HandingOver { to, .. } => {
                    self.detach_handover(core);
                    let handed = to.is_some_and(|to| {
                        self.runtimes[to as usize].cores_reserved -= 1;
                        self.start_on_core(to as usize, core, out)
                    });
                    if !handed {
                        self.mark_idle(core);
                    }
                }
                CoreState::Idle => {}
            }
        }
        for position in 0..self.handovers.len() {
            let core = self.handovers[position];
            if let CoreState::HandingOver { to, .. } = &mut self.cores[core.index()].state
                && *to == Some(slot as u32)
            {
                // The victim was already asked to park; its core will come back idle.
                *to = None;
            }
        }

        self.set_waiting(slot, false);
        let runtime = &mut self.runtimes[slot];
        self.guaranteed_total -= u32::from(runtime.spec.guaranteed_cores);
        runtime.live = false;
        runtime.cores_with_sibling.clear();
        runtime.cores_without_sibling.clear();
        runtime.cores_handing_over = 0;
        runtime.cores_reserved = 0;
        runtime.has_pending_work = false;
        runtime.has_stranded_work = false;
        let next = RuntimeId::from_parts(
            runtime.id.slot(),
            runtime.id.generation().wrapping_add(1),
        );
        runtime.id = next;
    }

    pub(super) fn report_overdue_handovers(&mut self, out: &mut Vec<Decision>) {
        let Some(timeout) = self.config.preemption_timeout else {
            return;
        };
        for position in 0..self.handovers.len() {
            let core = self.handovers[position];
            let now = self.now;
            if let CoreState::HandingOver {
                runtime,
                kthread,
                since,
                overdue_reported,
                ..
            } = &mut self.cores[core.index()].state
                && !*overdue_reported
                && now.saturating_sub(*since) >= timeout
            {
                *overdue_reported = true;
                out.push(Decision::PreemptionOverdue {
                    victim_runtime: self.runtimes[*runtime as usize].id,
                    victim_kthread: *kthread,
                    core,
                });
            }
        }
    }
}
