//! A million items through rings in a laid-out region, between two OS threads: exact order, no
//! loss, no duplicate, and an observer never sees more taken than added.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use corral_abi::{Command, OwnedRegion, RegionBuilder, RingKind, Slot};

const ITEMS: u32 = 1_000_000;

fn item(i: u32) -> Slot {
    Slot::new(
        Command::TxPacket,
        (i % 0x7fff) as u16,
        i,
        u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    )
}

fn region(slots: u32) -> OwnedRegion {
    OwnedRegion::new(
        &RegionBuilder::new(1)
            .ingress_slots(4)
            .egress_packet_slots(slots)
            .egress_command_slots(4),
    )
    .unwrap()
}

/// Spins briefly, then yields: both threads may share one core when tests run in parallel.
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        std::hint::spin_loop();
    } else {
        thread::yield_now();
    }
}

/// Pushes and pops one item at a time (or in batches of up to `batch`) through the egress
/// packet ring of a region with `slots` slots per ring, with a third thread watching positions.
fn run(slots: u32, batch: usize) {
    let owned = region(slots);
    let r = owned.attach().unwrap();
    let k = r.kthread(0).unwrap();
    let mut p = k.egress_packet_producer();
    let mut c = k.egress_packet_consumer();
    let done = AtomicBool::new(false);
    let watching = AtomicBool::new(false);
    let observed = thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            let mut buf = Vec::with_capacity(batch);
            while i < ITEMS {
                let mut spins = 0;
                if batch == 1 {
                    while p.try_push(item(i)).is_err() {
                        backoff(&mut spins);
                    }
                    i += 1;
                } else {
                    // Vary the batch length so batches straddle laps at every offset.
                    let want = 1 + (i as usize * 7919) % batch;
                    buf.clear();
                    buf.extend((i..ITEMS).take(want).map(item));
                    let mut sent = 0;
                    while sent < buf.len() {
                        let n = p.push_batch(&buf[sent..]);
                        if n == 0 {
                            backoff(&mut spins);
                        }
                        sent += n;
                    }
                    i += sent as u32;
                }
            }
        });
        let observer = s.spawn(|| {
            let mut looks = 0u64;
            while !done.load(Ordering::Relaxed) {
                let pos = k.ring_positions(RingKind::EgressPacket);
                assert!(pos.pending() as i32 >= 0, "{pos:?}");
                looks += 1;
                watching.store(true, Ordering::Relaxed);
                thread::yield_now();
            }
            looks
        });
        // Nothing is taken before the observer has looked once: however late the scheduler
        // starts it, it watches the transfer rather than its end.
        let mut spins = 0;
        while !watching.load(Ordering::Relaxed) {
            backoff(&mut spins);
        }
        let mut next = 0;
        let mut spins = 0;
        let mut out = vec![Slot::default(); batch];
        while next < ITEMS {
            let n = if batch == 1 {
                match c.try_pop() {
                    Some(s) => {
                        out[0] = s;
                        1
                    }
                    None => 0,
                }
            } else {
                c.pop_batch(&mut out)
            };
            if n == 0 {
                backoff(&mut spins);
                continue;
            }
            spins = 0;
            for s in &out[..n] {
                assert_eq!(*s, item(next), "item {next}");
                next += 1;
            }
            let pos = c.positions();
            assert!(pos.produced.wrapping_sub(pos.consumed) as i32 >= 0);
        }
        assert_eq!(c.try_pop(), None);
        done.store(true, Ordering::Relaxed);
        observer.join().unwrap()
    });
    assert!(observed > 0);
    assert_eq!(c.position(), ITEMS);
    assert_eq!(p.position(), ITEMS);
    assert_eq!(k.ring_positions(RingKind::EgressPacket).pending(), 0);
}

#[test]
fn million_items_one_at_a_time() {
    run(256, 1);
}

#[test]
fn million_items_through_a_tiny_ring() {
    run(4, 1);
}

#[test]
fn million_items_in_batches() {
    run(64, 32);
}
