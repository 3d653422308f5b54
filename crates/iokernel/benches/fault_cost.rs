//! What the fault injector costs per frame when it is on: deciding a frame's fate and passing
//! it on (or holding it), away from the loop. With faults off the switch pays one branch per
//! frame and one per loop iteration, which this does not measure.
//!
//! Run with `cargo bench -p corral-iokernel --bench fault_cost`.

use std::hint::black_box;
use std::time::Instant;

use corral_iokernel::daemon::faults::{Direction, FaultSpec, Injector};

const FRAMES: u64 = 2_000_000;

/// A 128-byte Ethernet frame with an IPv4 header.
fn frame() -> Vec<u8> {
    let mut f = vec![0u8; 128];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&114u16.to_be_bytes());
    f
}

fn measure(name: &str, spec: FaultSpec) {
    let mut injector = Injector::new(Direction::Rx, spec);
    let frame = frame();
    let mut out = 0u64;
    let start = Instant::now();
    for i in 0..FRAMES {
        // One frame every 100 ns of virtual time.
        let now = i * 100;
        injector.release_due(now, &mut |f: &[u8]| out += f.len() as u64);
        injector.inject(&frame, now, &mut |f: &[u8]| out += f.len() as u64);
    }
    let ns = start.elapsed().as_nanos() as f64 / FRAMES as f64;
    black_box(out);
    println!("{name:<44} {ns:>6.1} ns/frame  {:?}", injector.counters());
}

fn main() {
    let base = FaultSpec {
        seed: 1,
        ..FaultSpec::default()
    };
    measure(
        "loss=0.01",
        FaultSpec {
            loss: 0.01,
            ..base.clone()
        },
    );
    measure(
        "loss,dup,corrupt=0.01",
        FaultSpec {
            loss: 0.01,
            dup: 0.01,
            corrupt: 0.01,
            ..base.clone()
        },
    );
    measure(
        "loss,dup,corrupt,reorder=0.01,delay_us=10",
        FaultSpec {
            loss: 0.01,
            dup: 0.01,
            corrupt: 0.01,
            reorder: 0.01,
            delay: 1.0,
            delay_min_us: 10,
            delay_max_us: 10,
            ..base.clone()
        },
    );
    measure(
        "reorder=0.05",
        FaultSpec {
            reorder: 0.05,
            ..base
        },
    );
}
