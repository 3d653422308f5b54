//! Model checks of the SPSC ring: ordering, full and empty, the lap bit across wraparound, and
//! the positions observers read.
//! Run with: RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom \
//!           cargo test -p corral-abi --test loom --release
#![cfg(loom)]

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;

use corral_abi::{Command, Consumer, Full, Producer, Slot, SlotCell};

struct Ring {
    slots: Box<[SlotCell]>,
    head: AtomicU32,
    tail: AtomicU32,
}

fn ring(capacity: usize) -> Arc<Ring> {
    Arc::new(Ring {
        slots: (0..capacity).map(|_| SlotCell::new()).collect(),
        head: AtomicU32::new(0),
        tail: AtomicU32::new(0),
    })
}

fn producer(r: &Ring) -> Producer<'_> {
    Producer::new(&r.slots, &r.tail, &r.head).unwrap()
}

fn consumer(r: &Ring) -> Consumer<'_> {
    Consumer::new(&r.slots, &r.head, &r.tail).unwrap()
}

/// Item `i`: both words depend on `i`, so a payload from one write paired with a descriptor from
/// another would be caught.
fn item(i: u32) -> Slot {
    Slot::new(
        Command::RxPacket,
        i as u16 + 1,
        i + 100,
        u64::from(i) * 7 + 3,
    )
}

fn push_spin(p: &mut Producer<'_>, s: Slot) {
    while p.try_push(s) == Err(Full) {
        thread::yield_now();
    }
}

fn pop_spin(c: &mut Consumer<'_>) -> Slot {
    loop {
        if let Some(s) = c.try_pop() {
            return s;
        }
        thread::yield_now();
    }
}

/// Items through a ring of `capacity` slots, concurrently: each reused slot must be told from
/// the previous lap's item by the lap bit alone, and the producer must wait for a slot to be
/// read before reusing it.
fn spsc(capacity: usize, items: u32) {
    loom::model(move || {
        let r = ring(capacity);
        let r2 = r.clone();
        let t = thread::spawn(move || {
            let mut c = consumer(&r2);
            for i in 0..items {
                assert_eq!(pop_spin(&mut c), item(i));
                // The producer's published position is never behind what we have taken.
                let pos = c.positions();
                assert!(pos.produced.wrapping_sub(pos.consumed) as i32 >= 0);
            }
            assert_eq!(c.try_pop(), None);
        });
        let mut p = producer(&r);
        for i in 0..items {
            push_spin(&mut p, item(i));
        }
        t.join().unwrap();
        assert_eq!(p.positions().pending(), 0);
    });
}

/// Four items through two slots: laps 0 and 1, each slot reused once.
#[test]
fn order_across_a_lap() {
    spsc(2, 4);
}

/// Three items through one slot: laps 0, 1 and 2, where lap 2's bit equals lap 0's, so a
/// consumer that could see a slot from two laps back would take a stale item.
#[test]
fn lap_parity_repeats_safely() {
    spsc(1, 3);
}

/// A one-slot ring flips the lap bit on every item. Full is reported exactly when the only slot
/// is unread, and an item pushed after a pop is never lost or reordered.
#[test]
fn full_and_empty_with_one_slot() {
    loom::model(|| {
        let r = ring(1);
        let mut p = producer(&r);
        p.try_push(item(0)).unwrap();
        assert_eq!(p.try_push(item(1)), Err(Full));
        let r2 = r.clone();
        let t = thread::spawn(move || {
            let mut c = consumer(&r2);
            let a = pop_spin(&mut c);
            let b = pop_spin(&mut c);
            assert_eq!(c.try_pop(), None);
            assert!(c.is_empty());
            (a, b)
        });
        push_spin(&mut p, item(1));
        let (a, b) = t.join().unwrap();
        assert_eq!((a, b), (item(0), item(1)));
        assert_eq!(p.try_push(item(2)), Ok(()));
        assert_eq!(p.try_push(item(3)), Err(Full));
    });
}

/// Batches wrap around a two-slot ring; every item arrives once, in order.
#[test]
fn batches_wrap() {
    loom::model(|| {
        let r = ring(2);
        let r2 = r.clone();
        let t = thread::spawn(move || {
            let mut c = consumer(&r2);
            let mut got = Vec::new();
            let mut buf = [Slot::default(); 2];
            while got.len() < 4 {
                let n = c.pop_batch(&mut buf);
                if n == 0 {
                    thread::yield_now();
                }
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        let items = [item(0), item(1), item(2), item(3)];
        let mut p = producer(&r);
        let mut sent = 0;
        while sent < items.len() {
            let n = p.push_batch(&items[sent..]);
            if n == 0 {
                thread::yield_now();
            }
            sent += n;
        }
        assert_eq!(t.join().unwrap(), items);
    });
}

/// A third party that reads the consumer's position and then the producer's (as the allocator
/// does) never sees more taken than added.
#[test]
fn observer_never_sees_consumed_ahead_of_produced() {
    loom::model(|| {
        let r = ring(2);
        let rc = r.clone();
        let ro = r.clone();
        let consumer_thread = thread::spawn(move || {
            let mut c = consumer(&rc);
            for i in 0..2 {
                assert_eq!(pop_spin(&mut c), item(i));
            }
        });
        let observer = thread::spawn(move || {
            let consumed = ro.head.load(Ordering::Acquire);
            let produced = ro.tail.load(Ordering::Acquire);
            assert!(produced.wrapping_sub(consumed) as i32 >= 0);
            assert!(produced <= 2);
        });
        let mut p = producer(&r);
        for i in 0..2 {
            p.try_push(item(i)).unwrap();
        }
        consumer_thread.join().unwrap();
        observer.join().unwrap();
    });
}
