//! The Arachne policy's own invariants, on top of what every policy promises.

use super::Arachne;
use crate::{CoreId, KthreadPlace};

impl Arachne {
    /// Every runtime's counts match what the cores say, a running core belongs to the runtime
    /// on it, a handed-over core to someone else (or nobody), nobody claims more than its
    /// maximum, and cores are owned only by registered runtimes.
    pub(super) fn audit_tables(&self) -> Result<(), String> {
        #[derive(Default, PartialEq, Debug)]
        struct Counts {
            owned: u32,
            owned_idle: u32,
            running: u32,
            handing_over: u32,
            reserved: u32,
        }
        let mut counts: Vec<Counts> = self.tenants.iter().map(|_| Counts::default()).collect();
        let (mut idle, mut handovers) = (0, 0);
        for (index, entry) in self.cores.iter().enumerate() {
            if let Some(owner) = entry.owner {
                if !self.tenants[owner as usize].live {
                    return Err(format!("core {index} is owned by dead slot {owner}"));
                }
                counts[owner as usize].owned += 1;
                counts[owner as usize].owned_idle += u32::from(entry.occupant.is_none());
            }
            let Some((slot, kthread)) = entry.occupant else {
                idle += 1;
                if entry.handover.is_some() {
                    return Err(format!("core {index} is handed over with nobody on it"));
                }
                continue;
            };
            let tenant = &self.tenants[slot as usize];
            if tenant.kthreads[kthread.index()].place
                != (KthreadPlace::Active {
                    core: CoreId(index as u16),
                })
            {
                return Err(format!("core {index}: its kthread is elsewhere"));
            }
            counts[slot as usize].running += 1;
            match entry.handover {
                None if entry.owner != Some(slot) => {
                    return Err(format!("core {index} runs slot {slot} but is not its own"));
                }
                None => {}
                Some(_) if entry.owner == Some(slot) => {
                    return Err(format!("core {index} is handed over to its own runtime"));
                }
                Some(_) => {
                    handovers += 1;
                    counts[slot as usize].handing_over += 1;
                    if let Some(owner) = entry.owner {
                        counts[owner as usize].reserved += 1;
                    }
                }
            }
        }
        if (idle, handovers) != (self.idle, self.handovers) {
            return Err(format!(
                "{idle} idle and {handovers} handing over, counted {} and {}",
                self.idle, self.handovers
            ));
        }
        for (tenant, counted) in self.tenants.iter().zip(&counts).filter(|(t, _)| t.live) {
            let kept = Counts {
                owned: tenant.owned,
                owned_idle: tenant.owned_idle,
                running: tenant.running,
                handing_over: tenant.handing_over,
                reserved: tenant.reserved,
            };
            if kept != *counted {
                return Err(format!("{}: counted {kept:?}, cores say {counted:?}", tenant.id));
            }
            if tenant.claimed() > u32::from(tenant.spec.max_cores)
                || tenant.releases_pending > tenant.owned
            {
                return Err(format!(
                    "{}: claims {} of {}, owes {} of {} owned",
                    tenant.id,
                    tenant.claimed(),
                    tenant.spec.max_cores,
                    tenant.releases_pending,
                    tenant.owned
                ));
            }
        }
        Ok(())
    }
}
