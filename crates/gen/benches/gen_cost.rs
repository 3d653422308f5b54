//! What the `gen` backend costs the dataplane loop per request, away from the loop: building
//! request frames in full bursts (`recv_burst_at`) and taking their echoes (`send`), through the
//! backend's public interface. The echoes are built beforehand and are not timed.
//!
//! Run with `cargo bench -p corral-gen --bench gen_cost`. The backend's own measurement
//! (`gen_cost` in a run's results) includes the clock reads it makes in the loop; this one shows
//! the work without the loop around it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use corral_gen::Gen;
use corral_gen::run::{GenSpec, PhaseSpec};
use corral_iokernel::nic::{BURST, FrameBatch, Nic};
use corral_loadgen::Arrivals;
use corral_wire::{Ipv4FrameSpec, Packet, UdpHeader, parse_frame};

const REQUESTS: u64 = 2_000_000;

fn main() {
    let target = SocketAddrV4::new(Ipv4Addr::new(10, 99, 0, 2), 5000);
    let mut spec = GenSpec::new(
        target,
        vec![PhaseSpec {
            rate_rps: 1e9,
            duration_s: REQUESTS as f64 / 1e9,
        }],
    );
    spec.arrivals = Arrivals::Constant;
    spec.window_ms = Some(REQUESTS as f64 / 1e9 * 1e3 / 100.0);
    spec.validate().expect("a valid spec");
    let mut generator = Gen::new(Ipv4Addr::new(10, 99, 0, 1), 24);
    generator
        .start(&spec, [0x02, 0x43, 10, 99, 0, 2])
        .expect("start");
    // Everything is due: every poll is a full burst.
    let later = u64::MAX / 2;
    let mut batch = FrameBatch::default();
    let mut echoes: Vec<Vec<u8>> = Vec::with_capacity(REQUESTS as usize);
    let mut built = 0u64;
    let mut build_ns = 0u128;
    loop {
        batch.clear();
        let start = Instant::now();
        let n = generator.recv_burst_at(&mut batch, later);
        build_ns += start.elapsed().as_nanos();
        for i in 0..n {
            if let Some(echo) = echo_of(batch.frame(i)) {
                echoes.push(echo);
                built += 1;
            }
        }
        if n < BURST {
            break;
        }
    }
    let start = Instant::now();
    for echo in &echoes {
        generator.send(echo).expect("gen takes every frame");
    }
    let parse_ns = start.elapsed().as_nanos();
    println!(
        "gen: {built} requests of 64 bytes; building {:.1} ns per request (bursts of {BURST}), \
         taking the echo {:.1} ns per response, {:.1} ns per request in all",
        build_ns as f64 / built as f64,
        parse_ns as f64 / built as f64,
        (build_ns + parse_ns) as f64 / built as f64
    );
}

/// The echo a spin server sends for a request frame (`None` for the ARP announcement).
fn echo_of(request: &[u8]) -> Option<Vec<u8>> {
    let parsed = parse_frame(request).ok()?;
    let Packet::Udp { ip, udp } = parsed.packet else {
        return None;
    };
    let mut buf = vec![0u8; 1514];
    let len = Ipv4FrameSpec::reply_to(&parsed.eth, &ip, 64, 0)
        .build_udp(
            &mut buf,
            UdpHeader {
                src_port: udp.dst_port(),
                dst_port: udp.src_port(),
            },
            udp.payload(),
        )
        .ok()?;
    buf.truncate(len);
    Some(buf)
}
