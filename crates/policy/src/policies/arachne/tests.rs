//! The Arachne policy on a virtual clock: passes every [`STEP`], decisions every [`INTERVAL`].

use super::*;
use crate::audit::check_contract;
use crate::{QueueSnapshot, RingPositions, SpecError};

const INTERVAL: u64 = 1_000;
const STEP: u64 = 10;

fn arachne(cores: usize) -> Arachne {
    Arachne::new(
        Topology::without_hyperthreads(cores).unwrap(),
        ArachneConfig {
            interval: INTERVAL,
            preemption_timeout: Some(500),
            share_quantum: 0,
            ..ArachneConfig::default()
        },
    )
}

fn active_kthreads(policy: &Arachne, runtime: RuntimeId) -> Vec<KthreadIndex> {
    let kthreads = policy.runtime(runtime).unwrap().spec.kthreads;
    (0..kthreads)
        .map(KthreadIndex)
        .filter(|&kthread| {
            matches!(
                policy.kthread(runtime, kthread).unwrap().place,
                KthreadPlace::Active { .. }
            )
        })
        .collect()
}

fn core_of(policy: &Arachne, runtime: RuntimeId, kthread: KthreadIndex) -> CoreId {
    match policy.kthread(runtime, kthread).unwrap().place {
        KthreadPlace::Active { core } => core,
        KthreadPlace::Parked { .. } => panic!("kthread {} is parked", kthread.0),
    }
}

/// Carries out the decisions as a daemon whose preempted kthreads park at once would, and
/// returns every decision made, those of the parks included.
fn settle(policy: &mut Arachne, mut out: Vec<Decision>, now: u64) -> Vec<Decision> {
    let mut position = 0;
    while position < out.len() {
        if let Decision::Preempt {
            victim_runtime,
            victim_kthread,
            ..
        } = out[position]
        {
            let mut more = Vec::new();
            policy
                .preemption_completed(victim_runtime, victim_kthread, now, &mut more)
                .unwrap();
            out.extend(more);
        }
        position += 1;
    }
    out
}

/// Passes at the multiples of [`STEP`] after `from` up to `to` (inclusive), every active kthread of each runtime in
/// `loads` showing that many items (fewer than [`STEP`]) waiting on its ingress ring. Returns
/// the decisions.
fn passes(
    policy: &mut Arachne,
    from: u64,
    to: u64,
    loads: &[(RuntimeId, u32)],
    runtimes: &[RuntimeId],
) -> Vec<Decision> {
    let mut decisions = Vec::new();
    let mut now = (from / STEP + 1) * STEP;
    while now <= to {
        for &(runtime, waiting) in loads {
            let sweep: Vec<KthreadQueues> = active_kthreads(policy, runtime)
                .into_iter()
                .map(|kthread| KthreadQueues {
                    kthread,
                    queues: QueueSnapshot {
                        run_queue: RingPositions::default(),
                        // Both ends move on every pass, as a queue being served does.
                        ingress: RingPositions::new(now as u32 + waiting, now as u32),
                    },
                })
                .collect();
            policy.observe_runtime(runtime, &sweep).unwrap();
        }
        let mut out = Vec::new();
        policy.run_pass(now, &mut out).unwrap();
        decisions.extend(settle(policy, out, now));
        check_contract(policy, runtimes).unwrap();
        now += STEP;
    }
    decisions
}

fn wakes_for(decisions: &[Decision], runtime: RuntimeId) -> usize {
    decisions
        .iter()
        .filter(|decision| matches!(decision, Decision::Wake { runtime: r, .. } if *r == runtime))
        .count()
}

fn park_all(policy: &mut Arachne, runtime: RuntimeId, now: u64) {
    for kthread in active_kthreads(policy, runtime) {
        let mut out = Vec::new();
        policy.kthread_parked(runtime, kthread, now, &mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
    }
}

#[test]
fn scales_up_one_core_per_interval_under_load_and_not_before() {
    let mut policy = arachne(8);
    let lc = policy.register(RuntimeSpec::new(0, 8), 0).unwrap();
    let mut out = Vec::new();
    policy.pending_work(lc, 1, &mut out).unwrap();
    assert_eq!(wakes_for(&out, lc), 1, "its first core at once");

    // Two runnable items per core (one running, one waiting): above 1.5, but no decision yet.
    let early = passes(&mut policy, 0, INTERVAL - STEP, &[(lc, 1)], &[lc]);
    assert!(early.is_empty(), "{early:?}");
    assert_eq!(policy.owned_cores(lc).unwrap(), 1);
    let first = passes(&mut policy, INTERVAL - STEP, INTERVAL, &[(lc, 1)], &[lc]);
    assert_eq!(wakes_for(&first, lc), 1, "{first:?}");
    let second = passes(&mut policy, INTERVAL, 2 * INTERVAL, &[(lc, 1)], &[lc]);
    assert_eq!(wakes_for(&second, lc), 1, "{second:?}");
    assert_eq!(policy.owned_cores(lc).unwrap(), 3);
    assert_eq!(active_kthreads(&policy, lc).len(), 3);
}

#[test]
fn holds_while_the_load_factor_stays_below_the_threshold() {
    let mut policy = arachne(4);
    let lc = policy.register(RuntimeSpec::new(0, 4), 0).unwrap();
    let mut out = Vec::new();
    policy.pending_work(lc, 1, &mut out).unwrap();
    // One item waiting every fourth pass: 1.25 runnable items per core on average.
    let mut now = 0;
    for round in 0..(3 * INTERVAL / STEP) {
        let waiting = u32::from(round % 4 == 0);
        let decisions = passes(&mut policy, now, now + STEP, &[(lc, waiting)], &[lc]);
        assert!(decisions.is_empty(), "at {now}: {decisions:?}");
        now += STEP;
    }
    assert_eq!(policy.owned_cores(lc).unwrap(), 1);
}

#[test]
fn scales_down_past_the_hysteresis_and_never_below_one_core() {
    let mut policy = arachne(8);
    let lc = policy.register(RuntimeSpec::new(0, 8), 0).unwrap();
    let mut out = Vec::new();
    policy.pending_work(lc, 1, &mut out).unwrap();
    // Up to three cores, recording utilization 1.0 at one core and 2.0 at two.
    passes(&mut policy, 0, 2 * INTERVAL, &[(lc, 1)], &[lc]);
    assert_eq!(policy.owned_cores(lc).unwrap(), 3);

    // All three busy with nothing waiting: below the threshold, above the recorded 2.0.
    passes(&mut policy, 2 * INTERVAL, 3 * INTERVAL, &[(lc, 0)], &[lc]);
    assert_eq!(policy.owned_cores(lc).unwrap(), 3);

    // One kthread parks: utilization 2.0, not below 2.0 - 0.09, so it keeps the idle core.
    let kthreads = active_kthreads(&policy, lc);
    policy
        .kthread_parked(lc, kthreads[2], 3 * INTERVAL + 5, &mut out)
        .unwrap();
    passes(&mut policy, 3 * INTERVAL + 5, 4 * INTERVAL, &[(lc, 0)], &[lc]);
    assert_eq!(policy.owned_cores(lc).unwrap(), 3);

    // Down to one busy kthread: 1.0 < 1.91, so it gives back one (idle) core at once.
    policy
        .kthread_parked(lc, kthreads[1], 4 * INTERVAL + 5, &mut out)
        .unwrap();
    let idle_before = policy.idle_core_count();
    passes(&mut policy, 4 * INTERVAL + 5, 5 * INTERVAL, &[(lc, 0)], &[lc]);
    assert_eq!(policy.owned_cores(lc).unwrap(), 2);
    assert_eq!(policy.idle_core_count(), idle_before);

    // At two cores the bar is the 1.0 recorded at one: utilization 1.0 holds.
    passes(&mut policy, 5 * INTERVAL, 6 * INTERVAL, &[(lc, 0)], &[lc]);
    assert_eq!(policy.owned_cores(lc).unwrap(), 2);

    // Idle altogether: down to one core, and no further.
    park_all(&mut policy, lc, 6 * INTERVAL + 5);
    passes(&mut policy, 6 * INTERVAL + 5, 9 * INTERVAL, &[], &[lc]);
    assert_eq!(policy.owned_cores(lc).unwrap(), 1);
    // The core it keeps is where its next work runs, at once.
    out.clear();
    policy.pending_work(lc, 9 * INTERVAL + 1, &mut out).unwrap();
    assert_eq!(wakes_for(&out, lc), 1, "{out:?}");
}

#[test]
fn a_scale_down_with_every_core_busy_gives_back_the_next_core_parked_on() {
    let mut policy = arachne(2);
    let lc = policy.register(RuntimeSpec::new(0, 2), 0).unwrap();
    let other = policy.register(RuntimeSpec::new(0, 2), 0).unwrap();
    let runtimes = [lc, other];
    let mut out = Vec::new();
    policy.pending_work(lc, 1, &mut out).unwrap();
    passes(&mut policy, 0, INTERVAL, &[(lc, 1)], &runtimes);
    assert_eq!(policy.owned_cores(lc).unwrap(), 2);

    // Idle for almost the whole interval, then both kthreads busy again at the decision.
    park_all(&mut policy, lc, INTERVAL + 5);
    passes(&mut policy, INTERVAL + 5, 2 * INTERVAL - 2 * STEP, &[], &runtimes);
    out.clear();
    policy
        .pending_work(lc, 2 * INTERVAL - 2 * STEP + 1, &mut out)
        .unwrap();
    let decided = passes(
        &mut policy,
        2 * INTERVAL - 2 * STEP + 1,
        2 * INTERVAL + 1,
        &[(lc, 1)],
        &runtimes,
    );
    assert_eq!(wakes_for(&decided, lc), 1, "the second core woken: {decided:?}");
    assert_eq!(active_kthreads(&policy, lc).len(), 2);
    assert_eq!(policy.owned_cores(lc).unwrap(), 2, "nothing to give back yet");

    // The next core it parks on goes back, and is free for the other runtime at once.
    let kthread = active_kthreads(&policy, lc)[0];
    let core = core_of(&policy, lc, kthread);
    out.clear();
    policy
        .kthread_parked(lc, kthread, 2 * INTERVAL + 3, &mut out)
        .unwrap();
    assert_eq!(policy.owned_cores(lc).unwrap(), 1);
    policy.pending_work(other, 2 * INTERVAL + 4, &mut out).unwrap();
    assert!(
        matches!(out[..], [Decision::Wake { runtime, core: c, .. }] if runtime == other && c == core),
        "{out:?}"
    );
    check_contract(&policy, &runtimes).unwrap();
}

#[test]
fn a_runtime_with_no_core_gets_one_at_once_if_free_else_at_the_next_decision() {
    let mut policy = arachne(2);
    let batch = policy.register(RuntimeSpec::new(0, 2), 0).unwrap();
    let lc = policy.register(RuntimeSpec::new(0, 2), 0).unwrap();
    let runtimes = [batch, lc];
    let mut out = Vec::new();
    policy.pending_work(batch, 1, &mut out).unwrap();
    passes(&mut policy, 0, INTERVAL, &[(batch, 1)], &runtimes);
    assert_eq!(policy.owned_cores(batch).unwrap(), 2);
    assert_eq!(policy.idle_core_count(), 0);

    out.clear();
    policy.pending_work(lc, INTERVAL + 1, &mut out).unwrap();
    assert!(out.is_empty(), "{out:?}");
    let view = policy.runtime(lc).unwrap();
    assert!(view.waiting && view.has_pending_work);

    let before = passes(&mut policy, INTERVAL + 1, 2 * INTERVAL - STEP + 1, &[(batch, 1)], &runtimes);
    assert!(before.is_empty(), "{before:?}");
    let decided = passes(
        &mut policy,
        2 * INTERVAL - STEP + 1,
        2 * INTERVAL + 1,
        &[(batch, 1)],
        &runtimes,
    );
    assert!(
        matches!(
            decided[..],
            [
                Decision::Preempt { victim_runtime, for_runtime, .. },
                Decision::Wake { runtime, .. },
            ] if victim_runtime == batch && for_runtime == lc && runtime == lc
        ),
        "{decided:?}"
    );
    assert_eq!(policy.runtime(batch).unwrap().stats.preemptions_suffered, 1);
    assert!(!policy.runtime(lc).unwrap().waiting);
}

#[test]
fn never_exceeds_max_cores_nor_takes_cores_within_a_guarantee() {
    let mut policy = arachne(4);
    let lc = policy.register(RuntimeSpec::new(2, 3), 0).unwrap();
    let batch = policy.register(RuntimeSpec::new(0, 4), 0).unwrap();
    let runtimes = [lc, batch];
    let mut out = Vec::new();
    policy.pending_work(batch, 1, &mut out).unwrap();
    policy.pending_work(lc, 2, &mut out).unwrap();
    let mut now = 2;
    let mut preemptions = 0;
    for _ in 0..10 {
        let decisions = passes(&mut policy, now, now + INTERVAL, &[(lc, 3), (batch, 1)], &runtimes);
        now += INTERVAL;
        for decision in &decisions {
            if let Decision::Preempt { victim_runtime, .. } = *decision {
                assert_eq!(victim_runtime, batch, "{decisions:?}");
                preemptions += 1;
            }
        }
        let owned = policy.owned_cores(lc).unwrap();
        assert!(owned <= 3);
        assert!(policy.runtime(lc).unwrap().running_cores <= 3);
    }
    // The latency-critical runtime reached its maximum, partly at the batch runtime's
    // expense; the batch runtime keeps the core left.
    assert_eq!(policy.owned_cores(lc).unwrap(), 3);
    assert_eq!(policy.owned_cores(batch).unwrap(), 1);
    assert!(preemptions > 0);

    // Guarantees are refused beyond the machine.
    assert!(matches!(
        policy.register(RuntimeSpec::new(3, 3), now),
        Err(AllocError::BadSpec(SpecError::GuaranteesOversubscribed { .. }))
    ));
}

#[test]
fn guaranteed_cores_are_granted_at_once_and_never_scaled_away() {
    let mut policy = arachne(4);
    let spinning = policy.register(RuntimeSpec::new(2, 4), 0).unwrap();
    let mut out = Vec::new();
    assert_eq!(policy.grant_guaranteed(spinning, 3, 1, &mut out).unwrap(), 2);
    assert_eq!(wakes_for(&out, spinning), 2);
    park_all(&mut policy, spinning, 2);
    passes(&mut policy, 2, 5 * INTERVAL, &[], &[spinning]);
    assert_eq!(policy.owned_cores(spinning).unwrap(), 2);
}

#[test]
fn unregistering_hands_a_core_being_taken_to_its_taker() {
    let mut policy = arachne(1);
    let batch = policy.register(RuntimeSpec::new(0, 1), 0).unwrap();
    let lc = policy.register(RuntimeSpec::new(1, 1), 0).unwrap();
    let mut out = Vec::new();
    policy.pending_work(batch, 1, &mut out).unwrap();
    out.clear();
    policy.pending_work(lc, 2, &mut out).unwrap();
    assert!(out.is_empty());
    out.clear();
    policy.run_pass(INTERVAL, &mut out).unwrap();
    assert!(matches!(out[..], [Decision::Preempt { .. }]), "{out:?}");
    check_contract(&policy, &[batch, lc]).unwrap();
    out.clear();
    policy.unregister(batch, &mut out).unwrap();
    assert!(
        matches!(out[..], [Decision::Wake { runtime, .. }] if runtime == lc),
        "{out:?}"
    );
    check_contract(&policy, &[lc]).unwrap();
}
