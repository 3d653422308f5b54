//! Model checks of the ring views: a descriptor written before its producer position is
//! published is the one the consumer reads, entries are reused only after the consumer
//! released them, across the wrap, and frames lent through one ring come back through another
//! exactly once. The kernel's side of each ring is played by the same types: it follows the
//! same protocol (`net/xdp/xsk_queue.h`), so a missing ordering on either side shows up here as
//! a race on an entry.
//! Run with: RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=3 CARGO_TARGET_DIR=target/loom \
//!           cargo test -p corral-xdp --test loom --release
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;

use corral_xdp::ring::{Consumer, Desc, Producer, RingMemory};

fn push_spin<T: Copy>(p: &mut Producer<'_, T>, item: T) {
    while p.push_batch(&[item]) == 0 {
        thread::yield_now();
    }
}

fn pop_spin<T: Copy + Default>(c: &mut Consumer<'_, T>) -> T {
    let mut out = [T::default()];
    while c.pop_batch(&mut out) == 0 {
        thread::yield_now();
    }
    out[0]
}

fn desc(i: u64) -> Desc {
    Desc {
        addr: i * 2048 + 256,
        len: 60 + i as u32,
        options: 0,
    }
}

/// Descriptors through a two-entry ring whose positions start just below the wrap: each entry
/// is reused, and the positions wrap, while the other side works.
#[test]
fn descriptors_cross_the_wrap_in_order() {
    loom::model(|| {
        let ring = Arc::new(RingMemory::<Desc>::new(2, u32::MAX - 1));
        let r = ring.clone();
        let consumer = thread::spawn(move || {
            let mut c = r.consumer().unwrap();
            for i in 0..3 {
                assert_eq!(pop_spin(&mut c), desc(i));
            }
        });
        let mut p = ring.producer().unwrap();
        for i in 0..3 {
            push_spin(&mut p, desc(i));
        }
        consumer.join().unwrap();
        assert_eq!(ring.positions(), (1, 1));
    });
}

/// A burst pushed into a one-entry ring: only what fits is taken, and the rest goes after the
/// consumer frees the entry.
#[test]
fn bursts_take_only_free_entries() {
    loom::model(|| {
        let ring = Arc::new(RingMemory::<u64>::new(1, 0));
        let r = ring.clone();
        let consumer = thread::spawn(move || {
            let mut c = r.consumer().unwrap();
            let a = pop_spin(&mut c);
            let b = pop_spin(&mut c);
            (a, b)
        });
        let mut p = ring.producer().unwrap();
        let mut sent = 0;
        let items = [7u64, 8];
        while sent < items.len() {
            let n = p.push_batch(&items[sent..]);
            assert!(n <= 1);
            if n == 0 {
                thread::yield_now();
            }
            sent += n;
        }
        assert_eq!(consumer.join().unwrap(), (7, 8));
    });
}

/// The receive path: user space lends frames on the fill ring, the kernel takes them and
/// hands them back filled on the RX ring, user space gets each frame back exactly once and
/// lends it again.
#[test]
fn frames_lent_on_fill_come_back_on_rx() {
    loom::model(|| {
        let fill = Arc::new(RingMemory::<u64>::new(2, 0));
        let rx = Arc::new(RingMemory::<Desc>::new(2, 0));
        let (kf, kr) = (fill.clone(), rx.clone());
        let kernel = thread::spawn(move || {
            let mut from_fill = kf.consumer().unwrap();
            let mut to_rx = kr.producer().unwrap();
            for _ in 0..3 {
                let addr = pop_spin(&mut from_fill);
                push_spin(
                    &mut to_rx,
                    Desc {
                        addr: addr + 256,
                        len: 64,
                        options: 0,
                    },
                );
            }
        });
        let mut to_fill = fill.producer().unwrap();
        let mut from_rx = rx.consumer().unwrap();
        assert_eq!(to_fill.push_batch(&[0, 2048]), 2);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let d = pop_spin(&mut from_rx);
            assert_eq!(d.len, 64);
            let frame = d.addr - 256;
            seen.push(frame);
            // Lend it again (the kernel takes only one more).
            if seen.len() == 1 {
                push_spin(&mut to_fill, frame);
            }
        }
        kernel.join().unwrap();
        assert_eq!(seen[..2], [0, 2048]);
        assert_eq!(seen[2], 0);
    });
}

/// The need-wakeup flag the consumer sets is what the producer reads afterwards.
#[test]
fn need_wakeup_is_seen_after_it_is_set() {
    loom::model(|| {
        let ring = Arc::new(RingMemory::<u64>::new(2, 0));
        let r = ring.clone();
        let kernel = thread::spawn(move || {
            let c = r.consumer().unwrap();
            c.set_needs_wakeup(true);
        });
        kernel.join().unwrap();
        assert!(ring.producer().unwrap().needs_wakeup());
    });
}
