//! Property tests of the ring index arithmetic: against a queue model, from any starting
//! position (the wrap of the `u32` positions included), with the other side's position read
//! late or not at all.
#![cfg(not(loom))]

use std::collections::VecDeque;

use proptest::prelude::*;

use corral_xdp::ring::{RingIndex, RingMemory};

#[derive(Clone, Debug)]
enum Step {
    Push(usize),
    Pop(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0usize..12).prop_map(Step::Push),
        (0usize..12).prop_map(Step::Pop)
    ]
}

/// Starting positions that cross the wrap within a few steps, and anywhere else.
fn start() -> impl Strategy<Value = u32> {
    prop_oneof![(0u32..64).prop_map(|d| u32::MAX - d), any::<u32>()]
}

/// One side's turn: asks for `want` entries (reading the other side's position `theirs` only
/// if `refresh`), checks what it sees against what is `real`ly available, takes it from its
/// position `mine`; returns its new position.
fn turn(
    index: &mut RingIndex,
    want: u32,
    refresh: bool,
    theirs: u32,
    real: u32,
    mine: u32,
) -> Result<u32, TestCaseError> {
    let seen = if refresh {
        index.available_for(want, || theirs)
    } else {
        index.available()
    };
    prop_assert!(seen <= real);
    if refresh && want > 0 {
        prop_assert!(seen >= want.min(real));
    }
    prop_assert_eq!(index.advance(want.min(seen)), mine);
    Ok(index.position())
}

proptest! {
    /// Items pushed and popped in bursts come out in order, as many as fit, and the published
    /// positions count them.
    #[test]
    fn ring_behaves_as_a_bounded_queue(
        log2 in 0u32..4,
        start in start(),
        steps in proptest::collection::vec(step(), 0..64),
    ) {
        let size = 1usize << log2;
        let mem = RingMemory::<u64>::new(size, start);
        let mut p = mem.producer().unwrap();
        let mut c = mem.consumer().unwrap();
        let mut model = VecDeque::new();
        let mut next = 0u64;
        let (mut pushed, mut popped) = (0u32, 0u32);
        for s in steps {
            match s {
                Step::Push(k) => {
                    let items: Vec<u64> = (next..next + k as u64).collect();
                    let n = p.push_batch(&items);
                    prop_assert_eq!(n, k.min(size - model.len()));
                    model.extend(&items[..n]);
                    next += n as u64;
                    pushed = pushed.wrapping_add(n as u32);
                }
                Step::Pop(k) => {
                    let mut out = vec![0u64; k];
                    let n = c.pop_batch(&mut out);
                    prop_assert_eq!(n, k.min(model.len()));
                    for got in &out[..n] {
                        prop_assert_eq!(Some(*got), model.pop_front());
                    }
                    popped = popped.wrapping_add(n as u32);
                }
            }
            prop_assert_eq!(
                mem.positions(),
                (start.wrapping_add(pushed), start.wrapping_add(popped))
            );
            prop_assert_eq!(p.outstanding() as usize >= model.len(), true);
        }
    }

    /// The producer's cached view never shows more room than there is, and a refresh shows
    /// exactly what there is; likewise the consumer's view of what is ready.
    #[test]
    fn cached_views_are_conservative(
        log2 in 0u32..6,
        start in start(),
        moves in proptest::collection::vec((0u32..40, 0u32..40, any::<bool>()), 0..64),
    ) {
        let size = 1u32 << log2;
        let mut prod = RingIndex::producer(size, start, start);
        let mut cons = RingIndex::consumer(size, start, start);
        // The positions as published.
        let (mut produced, mut consumed) = (start, start);
        for (want_p, want_c, refresh) in moves {
            let real_free = size - produced.wrapping_sub(consumed);
            produced = turn(&mut prod, want_p, refresh, consumed, real_free, produced)?;
            let real_ready = produced.wrapping_sub(consumed);
            consumed = turn(&mut cons, want_c, refresh, produced, real_ready, consumed)?;
            prop_assert!(produced.wrapping_sub(consumed) <= size);
        }
    }

    /// Whatever the other side claims to have published, the views never count more than the
    /// ring holds.
    #[test]
    fn garbage_positions_never_overflow_the_ring(
        log2 in 0u32..6,
        start in start(),
        garbage in proptest::collection::vec(any::<u32>(), 1..16),
    ) {
        let size = 1u32 << log2;
        let mut prod = RingIndex::producer(size, start, start);
        let mut cons = RingIndex::consumer(size, start, start);
        for g in garbage {
            prod.refresh(g);
            prop_assert!(prod.available() <= size);
            cons.refresh(g);
            prop_assert!(cons.available() <= size);
        }
    }
}
