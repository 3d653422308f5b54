//! Nanoseconds per operation on the receive hot path. Run on purpose:
//! `cargo bench -p corral-wire`. Reports the median of several rounds, since the machines
//! this runs on are noisy.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use corral_wire::checksum::checksum;
use corral_wire::{Ipv4FrameSpec, MacAddr, RssHasher, RssKey, UdpHeader, classify, parse_frame};

const ROUNDS: usize = 11;
const ITERS: u32 = 2_000_000;

fn median_ns(mut f: impl FnMut()) -> f64 {
    let mut samples = [0f64; ROUNDS];
    for s in &mut samples {
        let start = Instant::now();
        for _ in 0..ITERS {
            f();
        }
        *s = start.elapsed().as_nanos() as f64 / f64::from(ITERS);
    }
    samples.sort_by(f64::total_cmp);
    samples[ROUNDS / 2]
}

fn main() {
    let spec = Ipv4FrameSpec {
        src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
        dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
        src_ip: Ipv4Addr::new(10, 0, 0, 1),
        dst_ip: Ipv4Addr::new(10, 0, 0, 2),
        ttl: 64,
        ident: 0,
        tos: 0,
    };
    let mut frame = [0u8; 64];
    let n = spec
        .build_udp(
            &mut frame,
            UdpHeader {
                src_port: 40000,
                dst_port: 7,
            },
            &[0x5a; 22],
        )
        .expect("64-byte frame fits");
    assert_eq!(n, 64);
    parse_frame(&frame).expect("valid frame");

    let parse = median_ns(|| {
        let _ = black_box(parse_frame(black_box(&frame)));
    });
    let class = median_ns(|| {
        let _ = black_box(classify(black_box(&frame)));
    });
    let hasher = RssHasher::new(&RssKey::MICROSOFT);
    let rss = median_ns(|| {
        let (s, d) = black_box((spec.src_ip, spec.dst_ip));
        black_box(hasher.hash_ipv4_ports(s, d, 40000, 7));
    });
    let mut out = [0u8; 64];
    let build = median_ns(|| {
        let _ = black_box(spec.write_udp(
            black_box(&mut out),
            UdpHeader {
                src_port: 1,
                dst_port: 2,
            },
            22,
        ));
    });
    let mtu = [0xa5u8; 1500];
    let csum = median_ns(|| {
        black_box(checksum(black_box(&mtu)));
    });

    println!("parse_frame, 64-byte UDP frame:   {parse:7.2} ns");
    println!("classify, 64-byte UDP frame:      {class:7.2} ns");
    println!("RSS 4-tuple hash:                 {rss:7.2} ns");
    println!("write_udp, 22-byte payload:       {build:7.2} ns");
    println!(
        "checksum over 1500 bytes:         {csum:7.2} ns ({:.2} GB/s)",
        1500.0 / csum
    );
}
