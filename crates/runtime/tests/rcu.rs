//! RCU readers never see freed memory.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use corral::{Config, RcuCell, Runtime};

const LIVE: u64 = 0x600D_600D_600D_600D;
const POISON: u64 = 0xDEAD_BEEF_DEAD_BEEF;

/// Poisons itself when dropped, so a reader that still holds it after the free would notice.
struct Versioned {
    magic: u64,
    version: u64,
    freed: Arc<AtomicU64>,
}

impl Drop for Versioned {
    fn drop(&mut self) {
        // SAFETY: a volatile store to our own field, so the poison survives the optimizer.
        unsafe { std::ptr::write_volatile(&mut self.magic, POISON) };
        self.freed.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn readers_never_observe_freed_values() {
    let rt = Runtime::new(Config::default().kthreads(2)).unwrap();
    let freed = Arc::new(AtomicU64::new(0));
    let f2 = freed.clone();
    rt.block_on(move || {
        let freed = f2;
        let cell = Arc::new(RcuCell::new(Versioned {
            magic: LIVE,
            version: 0,
            freed: freed.clone(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..6)
            .map(|_| {
                let cell = cell.clone();
                let stop = stop.clone();
                corral::spawn(move || {
                    let mut reads = 0u64;
                    let mut last = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let v = cell.read();
                        for _ in 0..50 {
                            // SAFETY: v borrows a live value for the whole read section.
                            let magic = unsafe { std::ptr::read_volatile(&v.magic) };
                            assert_eq!(magic, LIVE, "reader saw a freed value");
                        }
                        assert!(v.version >= last, "versions went backwards");
                        last = v.version;
                        drop(v);
                        reads += 1;
                        if reads.is_multiple_of(16) {
                            corral::yield_now();
                        }
                    }
                    reads
                })
            })
            .collect();
        for version in 1..=2_000u64 {
            let next = Versioned {
                magic: LIVE,
                version,
                freed: freed.clone(),
            };
            if version % 2 == 0 {
                cell.update(next);
            } else {
                cell.update_deferred(next);
            }
            if version % 64 == 0 {
                corral::yield_now();
            }
        }
        stop.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(reads > 0);
    });
    // Deferred frees happen in the background after their grace period.
    let start = std::time::Instant::now();
    while freed.load(Ordering::SeqCst) < 2_000 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "only {} freed",
            freed.load(Ordering::SeqCst)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn os_thread_readers_are_waited_for() {
    let freed = Arc::new(AtomicU64::new(0));
    let cell = Arc::new(RcuCell::new(Versioned {
        magic: LIVE,
        version: 0,
        freed: freed.clone(),
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let cell = cell.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let v = cell.read();
                // SAFETY: v borrows a live value for the whole read section.
                assert_eq!(unsafe { std::ptr::read_volatile(&v.magic) }, LIVE);
            }
        })
    };
    for version in 1..=500 {
        cell.update(Versioned {
            magic: LIVE,
            version,
            freed: freed.clone(),
        });
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert_eq!(freed.load(Ordering::SeqCst), 500);
}
