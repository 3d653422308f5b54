//! What every policy promises its caller, checked through the [`Policy`] trait alone, so that
//! tests and simulations can audit any policy.

use crate::{CoreId, CoreOccupancy, KthreadIndex, KthreadPlace, Policy, RuntimeId};

/// Checks the bookkeeping contract of [`Policy`] over the registered `runtimes`: every occupied
/// core names a kthread that is active there and every active kthread's core names it back,
/// each runtime's counts match what the cores say and stay within its maximum, the idle count
/// matches, guarantees fit the machine; then the policy's own [`Policy::audit`]. O(cores +
/// kthreads); allocates. Returns the first violation found.
pub fn check_contract(policy: &dyn Policy, runtimes: &[RuntimeId]) -> Result<(), String> {
    let cores = policy.topology().core_count();
    let mut idle = 0;
    let mut occupied_by = vec![0u32; runtimes.len()];
    for core in policy.topology().cores() {
        let view = policy.core(core).map_err(|e| e.to_string())?;
        let (runtime, kthread) = match view.occupancy {
            CoreOccupancy::Idle => {
                idle += 1;
                continue;
            }
            CoreOccupancy::Running { runtime, kthread }
            | CoreOccupancy::HandingOver {
                runtime, kthread, ..
            } => (runtime, kthread),
        };
        let Some(position) = runtimes.iter().position(|&id| id == runtime) else {
            return Err(format!(
                "core {}: occupied by {runtime}, which is not registered",
                core.0
            ));
        };
        occupied_by[position] += 1;
        let place = policy
            .kthread(runtime, kthread)
            .map_err(|e| format!("core {}: {e}", core.0))?
            .place;
        if place != (KthreadPlace::Active { core }) {
            return Err(format!(
                "core {}: occupied by kthread {} of {runtime}, which is {place:?}",
                core.0, kthread.0
            ));
        }
    }
    if idle != policy.idle_core_count() {
        return Err(format!(
            "{idle} idle cores, but the policy counts {}",
            policy.idle_core_count()
        ));
    }

    let mut guaranteed = 0;
    for (position, &runtime) in runtimes.iter().enumerate() {
        let view = policy.runtime(runtime).map_err(|e| e.to_string())?;
        guaranteed += u32::from(view.spec.guaranteed_cores);
        if view.running_cores != occupied_by[position] {
            return Err(format!(
                "{runtime}: runs on {} cores by its count, {} by the cores'",
                view.running_cores, occupied_by[position]
            ));
        }
        if view.cores_handing_over > view.running_cores
            || view.running_cores + view.cores_reserved > u32::from(view.spec.max_cores)
        {
            return Err(format!(
                "{runtime}: {} running ({} handing over) + {} reserved, maximum {}",
                view.running_cores,
                view.cores_handing_over,
                view.cores_reserved,
                view.spec.max_cores
            ));
        }
        let mut active = 0;
        for index in 0..view.spec.kthreads {
            let kthread = KthreadIndex(index);
            let place = policy
                .kthread(runtime, kthread)
                .map_err(|e| e.to_string())?
                .place;
            if let KthreadPlace::Active { core } = place {
                active += 1;
                check_core_names(policy, core, runtime, kthread)?;
            }
        }
        if active != view.running_cores {
            return Err(format!(
                "{runtime}: {active} active kthreads on {} cores",
                view.running_cores
            ));
        }
    }
    if guaranteed as usize > cores {
        return Err(format!(
            "guarantees add up to {guaranteed} of {cores} cores"
        ));
    }
    policy.audit()
}

fn check_core_names(
    policy: &dyn Policy,
    core: CoreId,
    runtime: RuntimeId,
    kthread: KthreadIndex,
) -> Result<(), String> {
    let occupant = match policy.core(core).map_err(|e| e.to_string())?.occupancy {
        CoreOccupancy::Idle => None,
        CoreOccupancy::Running { runtime, kthread }
        | CoreOccupancy::HandingOver {
            runtime, kthread, ..
        } => Some((runtime, kthread)),
    };
    if occupant != Some((runtime, kthread)) {
        return Err(format!(
            "kthread {} of {runtime} thinks it is on core {}, which holds {occupant:?}",
            kthread.0, core.0
        ));
    }
    Ok(())
}
