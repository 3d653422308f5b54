//! Hand-over time stamps: when iokerneld decided to give a kthread its core and when it wrote
//! the kthread's wake word, as iokerneld left them in the region, for measuring wake-ups and
//! preemptions from inside a uthread.

use core::sync::atomic::Ordering;

/// When iokerneld decided to give the calling uthread's kthread its current core, in
/// `CLOCK_MONOTONIC` nanoseconds (comparable with [`crate::now_ns`]): for measuring how long a
/// wake-up or a preemption took to reach a uthread. `None` outside a runtime in iokerneld mode
/// or before iokerneld recorded a decision.
pub fn core_granted_at_ns() -> Option<u64> {
    let _guard = crate::preempt::PreemptGuard::new();
    let k = crate::sched::kthread::current_kthread()?;
    let ns = k.iok.as_ref()?.wake_decision.load(Ordering::Acquire);
    (ns != 0).then_some(ns)
}

/// When iokerneld last rang the wake word of the calling uthread's kthread, in
/// `CLOCK_MONOTONIC` nanoseconds: the wake-up proper (ring to running) is the time
/// since, if the kthread has not parked since. `None` outside a runtime in iokerneld mode or
/// before the first wake-up.
pub fn core_wake_sent_at_ns() -> Option<u64> {
    let _guard = crate::preempt::PreemptGuard::new();
    let k = crate::sched::kthread::current_kthread()?;
    let ns = k.iok.as_ref()?.wake_sent.load(Ordering::Acquire);
    (ns != 0).then_some(ns)
}
