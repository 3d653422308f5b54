//! Runs every parser on arbitrary bytes: `cargo +nightly fuzz run parse_frame` from crates/wire.
//! Beyond not panicking, it checks that the steering classifier and the full parser agree: a frame
//! the runtime accepts must be steerable, to the flow the runtime will see.

#![no_main]

use corral_wire::{FrameClass, Packet, classify, parse_frame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let class = classify(data);
    let Ok(frame) = parse_frame(data) else {
        return;
    };
    let class = class.expect("a frame parse_frame accepts must classify");
    assert_eq!(class.dst_mac, frame.eth.dst());
    match (frame.packet, class.class) {
        (Packet::Arp(a), FrameClass::Arp(b)) => assert_eq!(a, b),
        (Packet::Udp { ip, udp }, FrameClass::Flow(t)) => {
            assert_eq!((t.src_ip, t.dst_ip), (ip.src(), ip.dst()));
            assert_eq!((t.src_port, t.dst_port), (udp.src_port(), udp.dst_port()));
        }
        (Packet::Tcp { ip, tcp }, FrameClass::Flow(t)) => {
            assert_eq!((t.src_ip, t.dst_ip), (ip.src(), ip.dst()));
            assert_eq!((t.src_port, t.dst_port), (tcp.src_port(), tcp.dst_port()));
            for option in tcp.options() {
                std::hint::black_box(option);
            }
        }
        (Packet::Icmp { ip, icmp }, FrameClass::Icmp { src, dst }) => {
            assert_eq!((src, dst), (ip.src(), ip.dst()));
            std::hint::black_box(icmp.payload());
        }
        (p, c) => panic!("parse_frame gave {p:?} but classify gave {c:?}"),
    }
});
