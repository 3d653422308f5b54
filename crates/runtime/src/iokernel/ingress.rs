//! Ingress rings: the owner's pass over its own ring (grants, preemption requests, packets,
//! completions) and packet stealing from the rings of other kthreads.

use core::sync::atomic::Ordering;

use corral_abi::{Command, RingKind};

use super::Kthread;
use super::packets::{rx_packet, tx_completion};
use crate::sched::Shared;

/// The owner's pass over its own ingress ring, from its scheduler: applies grants and
/// preemption requests, processes packets and completions, and posts returned receive buffers.
/// Returns whether iokerneld wants the core back.
///
/// If a thief is draining the ring right now this skips it: the thief applies whatever it pops
/// to this kthread's state, and the next pass sees the outcome.
pub(crate) fn poll_own(k: &Kthread) -> bool {
    let kio = k.iok();
    // Acquire: iokerneld pushes `Preempt` before it moves the cede word, so the drain below
    // (or a thief's, which already applied it) sees the command.
    kio.cede_seen
        .store(kio.cede_word.load(Ordering::Acquire), Ordering::Relaxed);
    if kio.ingress_lock.try_lock() {
        // SAFETY: we hold the ring's consumer lock.
        unsafe { drain_locked(k.shared(), k.index, crate::timer::now_ns()) };
        // SAFETY: taken above.
        unsafe { kio.ingress_lock.unlock() };
    }
    if k.shared().net.is_some() {
        kio.flush_reposts(true);
    }
    kio.preempt_requested.load(Ordering::Acquire)
}

/// After a wake-up: drains the kthread's own ingress ring, waiting for a thief that is
/// draining it to finish (a grant it pops still counts), and returns the grants seen so far.
/// iokerneld pushes a grant before it rings the wake word, so once the ring was seen the grant
/// is in the ring or already counted. Scheduler context.
///
/// The count is read under the lock, so that every grant it includes was applied in full (the
/// core, the cleared preemption request) by whoever popped it: read after the unlock, it could
/// include a grant a thief popped meanwhile and is still applying (the loom model
/// `parked_kthread_runs_only_with_a_grant` finds that race).
pub(crate) fn drain_own_after_wake(k: &Kthread) -> u64 {
    let kio = k.iok();
    kio.ingress_lock.lock();
    // SAFETY: we hold the ring's consumer lock.
    unsafe { drain_locked(k.shared(), k.index, crate::timer::now_ns()) };
    let grants = kio.grants.load(Ordering::Relaxed);
    // SAFETY: taken above.
    unsafe { kio.ingress_lock.unlock() };
    grants
}

/// Packet stealing: drains the ingress ring of any other kthread that nobody is draining.
/// Returns whether anything was processed. Scheduler context.
pub(crate) fn steal_ingress(k: &Kthread) -> bool {
    let rt = k.shared();
    if rt.net.is_none() {
        // Only packets are worth stealing; grants and preemptions wait for their owner.
        return false;
    }
    let n = rt.kthreads.len();
    let start = k.next_random() as usize % n;
    let mut any = false;
    for i in 0..n {
        let index = (start + i) % n;
        if index == k.index {
            continue;
        }
        let victim = rt.kthreads[index].iok();
        if victim.ingress_lock.try_lock() {
            // SAFETY: we hold the victim's consumer lock.
            let drained = unsafe { drain_locked(rt, index, crate::timer::now_ns()) };
            // SAFETY: taken above.
            unsafe { victim.ingress_lock.unlock() };
            if drained > 0 {
                any = true;
                victim.flush_reposts(false);
            }
        }
    }
    any
}

/// Pops everything on kthread `owner`'s ingress ring. Commands concern `owner`; packets are
/// processed here, on the calling kthread, as one receive batch. Returns how many slots were
/// popped.
///
/// # Safety
/// The caller holds `owner`'s `ingress_lock` and runs with preemption disabled.
unsafe fn drain_locked(rt: &Shared, owner: usize, now: u64) -> usize {
    let kio = rt.kthreads[owner].iok();
    // SAFETY: the consumer lock is held (caller's contract).
    let ingress = unsafe { &mut *kio.ingress.get() };
    let mut popped = 0;
    while let Some(slot) = ingress.try_pop() {
        popped += 1;
        match slot.command_on(RingKind::Ingress) {
            Ok(Command::Grant) => {
                // A grant supersedes any preemption sent before it: that one concerned the
                // core this kthread held before it last parked.
                kio.preempt_requested.store(false, Ordering::Release);
                kio.cpu.store(slot.payload() as u32, Ordering::Relaxed);
                kio.grants.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Command::Preempt) => {
                kio.preempt_requested.store(true, Ordering::Release);
                kio.preemptions.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Command::RxPacket) => rx_packet(rt, slot, now),
            Ok(Command::TxCompletion) => tx_completion(rt, kio, slot),
            // Nothing else travels on an ingress ring; a code this build does not know is
            // ignored rather than trusted.
            _ => {}
        }
    }
    if popped > 0
        && let Some(net) = &rt.net
    {
        // The pass's own time, as its packets had: no clock read on every pass.
        net.end_receive_batch(now);
    }
    popped
}
