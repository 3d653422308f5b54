//! A full consistency check of the allocator's tables, for tests and debugging.

use super::Shenango;
use super::cores::CoreState;
use crate::{CoreId, KthreadIndex, KthreadPlace};

impl Shenango {
    /// Checks every invariant the allocator relies on and that its callers are promised: each
    /// core occupied by at most one kthread and each active kthread on exactly one core, counts
    /// matching, no runtime above its maximum, guarantees not oversubscribed, every index in
    /// step. O(cores + kthreads); allocates. Returns the first violation found.
    pub fn audit_tables(&self) -> Result<(), String> {
        let slots = self.runtimes.len();
        let mut retained = vec![0u32; slots];
        let mut handing_over = vec![0u32; slots];
        let mut reserved = vec![0u32; slots];
        let mut idle = 0;

        for (index, core) in self.cores.iter().enumerate() {
            let id = CoreId(index as u16);
            let is_idle = matches!(core.state, CoreState::Idle);
            if self.idle.contains(id) != is_idle {
                return Err(format!(
                    "core {index}: idle bitmap disagrees with {:?}",
                    core.state
                ));
            }
            let whole = is_idle
                && core.sibling.is_none_or(|sibling| {
                    matches!(self.cores[sibling.index()].state, CoreState::Idle)
                });
            if self.idle_whole.contains(id) != whole {
                return Err(format!("core {index}: whole-idle bitmap should be {whole}"));
            }
            if !is_idle && core.held_since > self.now {
                return Err(format!("core {index}: granted in the future"));
            }
            match core.state {
                CoreState::Idle => idle += 1,
                CoreState::Running { runtime, kthread } => {
                    let slot = runtime as usize;
                    self.check_occupant(id, slot, kthread)?;
                    let owner = &self.runtimes[slot];
                    let list = if core.sibling.is_some() {
                        &owner.cores_with_sibling
                    } else {
                        &owner.cores_without_sibling
                    };
                    if list.get(core.list_position as usize) != Some(&id) {
                        return Err(format!(
                            "core {index}: not at its place in its runtime's list"
                        ));
                    }
                    retained[slot] += 1;
                }
                CoreState::HandingOver {
                    runtime,
                    kthread,
                    to,
                    since,
                    ..
                } => {
                    let slot = runtime as usize;
                    self.check_occupant(id, slot, kthread)?;
                    if self.handovers.get(core.list_position as usize) != Some(&id) {
                        return Err(format!(
                            "core {index}: not at its place in the handover list"
                        ));
                    }
                    if since > self.now {
                        return Err(format!("core {index}: handover starts in the future"));
                    }
                    handing_over[slot] += 1;
                    if let Some(to) = to {
                        let to = to as usize;
                        if to == slot || !self.runtimes.get(to).is_some_and(|r| r.live) {
                            return Err(format!("core {index}: promised to bad slot {to}"));
                        }
                        reserved[to] += 1;
                    }
                }
            }
        }
        if idle != self.idle_count || self.idle.len() != idle {
            return Err(format!(
                "idle count {} but {idle} idle cores",
                self.idle_count
            ));
        }
        if self.handovers.len() != handing_over.iter().sum::<u32>() as usize {
            return Err("handover list holds cores that are not handing over".into());
        }

        let mut guaranteed = 0;
        let mut waiting = 0;
        for (slot, runtime) in self.runtimes.iter().enumerate() {
            if runtime.id.slot_index() != slot {
                return Err(format!("slot {slot} holds {}", runtime.id));
            }
            if !runtime.live {
                if retained[slot] + handing_over[slot] + reserved[slot] != 0 || runtime.waiting {
                    return Err(format!("unregistered slot {slot} still holds cores"));
                }
                continue;
            }
            let id = runtime.id;
            guaranteed += u32::from(runtime.spec.guaranteed_cores);
            waiting += u32::from(runtime.waiting);
            if runtime.retained() != retained[slot]
                || runtime.cores_handing_over != handing_over[slot]
                || runtime.cores_reserved != reserved[slot]
            {
                return Err(format!(
                    "{id}: counts retained {}/{} handing over {}/{} reserved {}/{}",
                    runtime.retained(),
                    retained[slot],
                    runtime.cores_handing_over,
                    handing_over[slot],
                    runtime.cores_reserved,
                    reserved[slot]
                ));
            }
            if runtime.claimed() > u32::from(runtime.spec.max_cores) {
                return Err(format!(
                    "{id}: claims {} cores, above its maximum",
                    runtime.claimed()
                ));
            }
            let mut active = 0;
            for (index, kthread) in runtime.kthreads.iter().enumerate() {
                if let KthreadPlace::Active { core } = kthread.place {
                    active += 1;
                    let occupant = match self.cores[core.index()].state {
                        CoreState::Running { runtime, kthread }
                        | CoreState::HandingOver {
                            runtime, kthread, ..
                        } => Some((runtime, kthread)),
                        CoreState::Idle => None,
                    };
                    if occupant != Some((slot as u32, KthreadIndex(index as u16))) {
                        return Err(format!(
                            "{id}: kthread {index} thinks it is on core {}",
                            core.0
                        ));
                    }
                }
            }
            if active != runtime.running() {
                return Err(format!(
                    "{id}: {active} active kthreads on {} cores",
                    runtime.running()
                ));
            }
            let mut parked = 0;
            let mut last_since = 0;
            for kthread in runtime.parked_in_order() {
                let KthreadPlace::Parked { since } = runtime.kthreads[kthread.index()].place else {
                    return Err(format!(
                        "{id}: active kthread {} on the parked list",
                        kthread.0
                    ));
                };
                if since < last_since {
                    return Err(format!("{id}: parked list out of order"));
                }
                last_since = since;
                parked += 1;
                if parked > runtime.kthreads.len() {
                    return Err(format!("{id}: parked list loops"));
                }
            }
            if parked + active as usize != runtime.kthreads.len() {
                return Err(format!("{id}: {parked} parked + {active} active kthreads"));
            }
        }
        if guaranteed != self.guaranteed_total || guaranteed as usize > self.cores.len() {
            return Err(format!("guarantees add up to {guaranteed}"));
        }
        if waiting != self.waiting_count {
            return Err(format!(
                "{waiting} runtimes waiting, counted {}",
                self.waiting_count
            ));
        }
        Ok(())
    }

    fn check_occupant(
        &self,
        core: CoreId,
        slot: usize,
        kthread: KthreadIndex,
    ) -> Result<(), String> {
        let Some(runtime) = self.runtimes.get(slot).filter(|runtime| runtime.live) else {
            return Err(format!("core {}: occupied by dead slot {slot}", core.0));
        };
        match runtime
            .kthreads
            .get(kthread.index())
            .map(|entry| entry.place)
        {
            Some(KthreadPlace::Active { core: on }) if on == core => Ok(()),
            other => Err(format!(
                "core {}: occupied by kthread {} of {}, which is {other:?}",
                core.0, kthread.0, runtime.id
            )),
        }
    }
}
