//! A stable smoke run of the fuzz target's function (crates/tcp/fuzz, which needs nightly):
//! a few thousand seeded random inputs, plus inputs shaped like the operations it reads, so
//! that the segment path is exercised by every test run.

#[path = "../fuzz/drive.rs"]
mod drive;

use rand::{Rng, RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;

#[test]
fn random_inputs_never_panic() {
    let mut rng = XorShiftRng::seed_from_u64(0x7cb_f022);
    for _ in 0..3000 {
        let len = rng.random_range(0..1500);
        let mut input = vec![0u8; len];
        rng.fill_bytes(&mut input);
        drive::drive(&input);
    }
}

/// Inputs made mostly of in-order segments with payload, sends and reads, so that data flows
/// and the deeper states (recovery, closing) are reached.
#[test]
fn structured_inputs_never_panic() {
    let mut rng = XorShiftRng::seed_from_u64(0x5e9_5e9);
    for _ in 0..2000 {
        let mut input = vec![rng.random::<u8>()];
        input.extend_from_slice(&rng.random::<[u8; 8]>());
        for _ in 0..rng.random_range(1..60) {
            match rng.random_range(0..10) {
                0..=4 => {
                    // op 0: a segment; mode: near numbers, timestamps when negotiated.
                    let mode = rng.random::<u8>() & 0x8e;
                    input.extend_from_slice(&[0, mode]);
                    input.extend_from_slice(&rng.random::<[u8; 4]>());
                    input.extend_from_slice(&[0xff, 0xff, 0]);
                    let len = rng.random_range(0..=180u8);
                    input.push(len);
                    input.extend((0..usize::from(len) * 8).map(|_| rng.random::<u8>()));
                }
                5 => input.push(8),
                6 => input.extend_from_slice(&[10, 0x10, 0x00]),
                7 => input.extend_from_slice(&[12, 0xff, 0xff]),
                8 => input.extend_from_slice(&[9, 0, 0, 0x27, 0x10]),
                _ => input.push(rng.random_range(14..16)),
            }
        }
        drive::drive(&input);
    }
}
