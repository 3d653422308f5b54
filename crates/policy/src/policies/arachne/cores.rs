//! The moves a core makes: woken for its owner, given to another runtime idle or by
//! preemption, vacated when its kthread parks, given back; and the choice of which core.

use core::cmp::Reverse;

use super::{Arachne, Handover};
use crate::kthreads::kthread_to_wake;
use crate::{CoreId, Decision, KthreadPlace};

impl Arachne {
    /// Wakes a parked kthread of `slot` on `core`, an idle core it owns: the one that last ran
    /// there if it is parked (its cache may be warm), else the one parked longest.
    pub(super) fn start(&mut self, slot: usize, core: CoreId, out: &mut Vec<Decision>) {
        let tenant = &self.tenants[slot];
        let last_user = self.cores[core.index()].last_user;
        // `claimed <= max_cores <= kthreads` and this core is claimed but unoccupied, so some
        // kthread is parked.
        let Some(kthread) = kthread_to_wake(&tenant.kthreads, tenant.id, last_user) else {
            return;
        };
        let id = tenant.id;
        let now = self.now;
        let tenant = &mut self.tenants[slot];
        tenant.kthreads[kthread.index()].activate(core);
        tenant.running += 1;
        tenant.owned_idle -= 1;
        tenant.stats.grants += 1;
        tenant.wants_core = false;
        tenant.waiting = false;
        let entry = &mut self.cores[core.index()];
        entry.stats.grants += 1;
        if entry.last_user.is_some_and(|(user, _)| user != id) {
            entry.stats.reallocations += 1;
        }
        entry.occupant = Some((slot as u32, kthread));
        entry.held_since = now;
        entry.last_user = Some((id, kthread));
        self.idle -= 1;
        out.push(Decision::Wake {
            runtime: id,
            kthread,
            core,
        });
    }

    /// Wakes kthreads of `slot` on up to `count` of its idle cores.
    pub(super) fn wake_owned(&mut self, slot: usize, count: u64, out: &mut Vec<Decision>) {
        let mut left = count.min(u64::from(self.tenants[slot].owned_idle));
        for core in self.core_ids() {
            if left == 0 {
                break;
            }
            if self.is_owned_idle(core, slot) {
                self.start(slot, core, out);
                left -= 1;
            }
        }
    }

    /// An unowned idle core for `slot`: the sibling of a core it owns, else the one it gave up
    /// last, else the lowest-numbered.
    pub(super) fn free_core_for(&self, slot: usize) -> Option<CoreId> {
        let sibling = self.core_ids().find_map(|core| {
            let sibling = self.topology.sibling(core)?;
            (self.cores[core.index()].owner == Some(slot as u32) && self.is_free(sibling))
                .then_some(sibling)
        });
        let recent = self.tenants[slot]
            .most_recent_core
            .filter(|&core| self.is_free(core));
        sibling
            .or(recent)
            .or_else(|| self.core_ids().find(|&core| self.is_free(core)))
    }

    /// Whether `taker` may take a core from `victim`: only beyond the victim's guarantee, and,
    /// for a taker that holds a core and is at or above its guarantee, only if the victim keeps
    /// at least the taker's burst afterwards.
    pub(super) fn may_take(&self, victim: usize, taker: usize) -> bool {
        let (victim, taker) = (&self.tenants[victim], &self.tenants[taker]);
        if !victim.live || victim.id == taker.id || victim.burst() <= 0 {
            return false;
        }
        let guaranteed = u32::from(taker.spec.guaranteed_cores);
        let (victim_burst_after, taker_burst_after) = (victim.burst() - 1, taker.burst() + 1);
        taker.owned < guaranteed || taker.owned == 0 || victim_burst_after >= taker_burst_after
    }

    /// A core to take for `taker`, and whether it is idle: from the runtimes it may take from,
    /// those waiting to give a core back first, then the most bursting (ties by slot); of the
    /// victim's cores an idle one, else a running one (if it keeps more running cores than its
    /// guarantee) whose kthread has run for the share quantum, unless the taker is below its
    /// guarantee.
    pub(super) fn core_to_take_for(&self, taker: usize) -> Option<(CoreId, bool)> {
        let below_guarantee =
            self.tenants[taker].owned < u32::from(self.tenants[taker].spec.guaranteed_cores);
        let started_by = if below_guarantee {
            Some(u64::MAX)
        } else {
            self.now.checked_sub(self.config.share_quantum)
        };
        let mut victims: Vec<usize> = (0..self.tenants.len())
            .filter(|&victim| self.may_take(victim, taker))
            .collect();
        victims.sort_by_key(|&victim| {
            let tenant = &self.tenants[victim];
            (tenant.releases_pending == 0, Reverse(tenant.burst()), victim)
        });
        victims.into_iter().find_map(|victim| {
            let idle = self
                .core_ids()
                .find(|&core| self.is_owned_idle(core, victim));
            if let Some(core) = idle {
                return Some((core, true));
            }
            let tenant = &self.tenants[victim];
            if tenant.retained() <= u32::from(tenant.spec.guaranteed_cores) {
                return None;
            }
            let started_by = started_by?;
            self.core_ids()
                .rev()
                .find(|&core| {
                    let entry = &self.cores[core.index()];
                    entry.owner == Some(victim as u32)
                        && entry.occupant.is_some()
                        && entry.handover.is_none()
                        && entry.held_since <= started_by
                })
                .map(|core| (core, false))
        })
    }

    /// Gives `slot` one more core and starts a kthread on it (or, for a core taken from a
    /// running kthread, once that kthread parks). Returns whether a core was granted or
    /// promised.
    pub(super) fn grant_one(&mut self, slot: usize, out: &mut Vec<Decision>) -> bool {
        if !self.tenants[slot].can_grow() {
            return false;
        }
        if let Some(core) = self.free_core_for(slot) {
            self.set_owner(core, Some(slot));
            self.start(slot, core, out);
            return true;
        }
        let Some((core, idle)) = self.core_to_take_for(slot) else {
            return false;
        };
        if idle {
            self.set_owner(core, Some(slot));
            self.start(slot, core, out);
        } else {
            self.preempt(core, slot, out);
        }
        true
    }

    /// Moves an idle core from its owner (if any) to `owner` (or to nobody). A victim that was
    /// waiting to give a core back has now given it.
    pub(super) fn set_owner(&mut self, core: CoreId, owner: Option<usize>) {
        if let Some(previous) = self.cores[core.index()].owner {
            let previous = &mut self.tenants[previous as usize];
            previous.owned -= 1;
            previous.owned_idle -= 1;
            previous.releases_pending = previous.releases_pending.saturating_sub(1);
        }
        if let Some(slot) = owner {
            let tenant = &mut self.tenants[slot];
            tenant.owned += 1;
            tenant.owned_idle += 1;
        }
        self.cores[core.index()].owner = owner.map(|slot| slot as u32);
    }

    pub(super) fn preempt(&mut self, core: CoreId, taker: usize, out: &mut Vec<Decision>) {
        let entry = &mut self.cores[core.index()];
        let (Some(victim), Some((_, kthread))) = (entry.owner, entry.occupant) else {
            return;
        };
        entry.owner = Some(taker as u32);
        entry.handover = Some(Handover {
            since: self.now,
            overdue_reported: false,
        });
        self.handovers += 1;
        let victim = &mut self.tenants[victim as usize];
        victim.owned -= 1;
        victim.handing_over += 1;
        victim.releases_pending = victim.releases_pending.saturating_sub(1);
        victim.stats.preemptions_suffered += 1;
        let victim = victim.id;
        let tenant = &mut self.tenants[taker];
        tenant.owned += 1;
        tenant.reserved += 1;
        tenant.wants_core = false;
        tenant.waiting = false;
        out.push(Decision::Preempt {
            victim_runtime: victim,
            victim_kthread: kthread,
            core,
            for_runtime: tenant.id,
        });
    }

    /// Takes the kthread on `core` off it, parked, and leaves the core idle.
    pub(super) fn vacate(&mut self, core: CoreId) {
        let entry = &mut self.cores[core.index()];
        let Some((slot, kthread)) = entry.occupant.take() else {
            return;
        };
        if entry.handover.take().is_some() {
            self.handovers -= 1;
            self.tenants[slot as usize].handing_over -= 1;
        }
        self.idle += 1;
        let now = self.now;
        let tenant = &mut self.tenants[slot as usize];
        tenant.kthreads[kthread.index()].place = KthreadPlace::Parked { since: now };
        tenant.running -= 1;
        tenant.most_recent_core = Some(core);
        tenant.stats.parks += 1;
    }

    /// The kthread on `core` parked or was taken off: the core goes to whoever owns it now (the
    /// taker of a handover, which wakes a kthread there), or back to its own runtime, idle (given
    /// back if it owes a scale-down), or to a waiting runtime if nobody owns it.
    pub(super) fn kthread_left(&mut self, core: CoreId, out: &mut Vec<Decision>) {
        let handed_over = self.cores[core.index()].handover.is_some();
        self.vacate(core);
        let Some(owner) = self.cores[core.index()].owner.map(|slot| slot as usize) else {
            self.serve_waiting(out);
            return;
        };
        let tenant = &mut self.tenants[owner];
        tenant.owned_idle += 1;
        if handed_over {
            tenant.reserved -= 1;
            self.start(owner, core, out);
        } else if tenant.releases_pending > 0 {
            self.set_owner(core, None);
            self.serve_waiting(out);
        }
    }

    /// Offers unowned idle cores to the runtimes waiting for a core, neediest first. Never
    /// preempts: that waits for the next decision.
    pub(super) fn serve_waiting(&mut self, out: &mut Vec<Decision>) {
        let mut waiting: Vec<usize> = (0..self.tenants.len())
            .filter(|&slot| self.tenants[slot].live && self.tenants[slot].waiting)
            .collect();
        waiting.sort_by_key(|&slot| self.grant_priority(slot));
        for slot in waiting {
            let Some(core) = self.free_core_for(slot) else {
                return;
            };
            if self.tenants[slot].can_grow() {
                self.set_owner(core, Some(slot));
                self.start(slot, core, out);
            }
        }
    }
}
