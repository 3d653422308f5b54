//! Property tests: every builder round-trips through its parser for arbitrary field values,
//! no parser panics on arbitrary bytes, and single-byte corruption of a valid frame is either
//! harmless or reported as a `DropReason`.

use std::net::Ipv4Addr;

use corral_wire::checksum::{self, Checksum, checksum};
use corral_wire::rss::toeplitz;
use corral_wire::*;
use proptest::prelude::*;

fn ipv4() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>().prop_map(Ipv4Addr::from_bits)
}

fn mac() -> impl Strategy<Value = MacAddr> {
    any::<[u8; 6]>().prop_map(MacAddr)
}

fn spec() -> impl Strategy<Value = Ipv4FrameSpec> {
    (
        mac(),
        mac(),
        ipv4(),
        ipv4(),
        any::<u8>(),
        any::<u16>(),
        any::<u8>(),
    )
        .prop_map(
            |(src_mac, dst_mac, src_ip, dst_ip, ttl, ident, tos)| Ipv4FrameSpec {
                src_mac,
                dst_mac,
                src_ip,
                dst_ip,
                ttl,
                ident,
                tos,
            },
        )
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..300)
}

fn tcp_header() -> impl Strategy<Value = TcpHeader> {
    let options = (
        prop::option::of(any::<u16>()),
        prop::option::of(any::<u8>()),
        any::<bool>(),
        prop::option::of((any::<u32>(), any::<u32>())),
    )
        .prop_map(|(mss, window_scale, sack_permitted, ts)| TcpOptionSet {
            mss,
            window_scale,
            sack_permitted,
            timestamps: ts.map(|(tsval, tsecr)| Timestamps { tsval, tsecr }),
            ..Default::default()
        });
    (any::<(u16, u16, u32, u32, u8, u16, u16)>(), options).prop_map(
        |((src_port, dst_port, seq, ack, flags, window, urgent), options)| TcpHeader {
            src_port,
            dst_port,
            seq,
            ack,
            flags: TcpFlags(flags),
            window,
            urgent,
            options,
        },
    )
}

/// RFC 1071 by the book, one big-endian word at a time.
fn reference_checksum(data: &[u8]) -> u16 {
    let mut sum: u64 = 0;
    for pair in data.chunks(2) {
        sum += u64::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether two checksums are the same one's-complement number (0x0000 and 0xffff are both zero).
fn ones_eq(a: u16, b: u16) -> bool {
    a == b || (a | b == 0xffff && a & b == 0)
}

fn collect_options(seg: &TcpSegment<'_>) -> TcpOptionSet {
    let mut got = TcpOptionSet::default();
    for o in seg.options() {
        match o {
            TcpOption::Mss(v) => got.mss = Some(v),
            TcpOption::WindowScale(v) => got.window_scale = Some(v),
            TcpOption::SackPermitted => got.sack_permitted = true,
            TcpOption::Timestamps(t) => got.timestamps = Some(t),
            other => panic!("builder emitted an unexpected option {other:?}"),
        }
    }
    got
}

proptest! {
    #[test]
    fn checksum_matches_reference(data in prop::collection::vec(any::<u8>(), 0..2000)) {
        prop_assert_eq!(checksum(&data), reference_checksum(&data));
    }

    #[test]
    fn checksum_any_split(data in prop::collection::vec(any::<u8>(), 0..200), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..5)) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
        points.sort_unstable();
        let mut sum = Checksum::new();
        let mut prev = 0;
        for p in points.into_iter().chain([data.len()]) {
            sum = sum.add_bytes(&data[prev..p]);
            prev = p;
        }
        prop_assert_eq!(sum.finish(), checksum(&data));
    }

    #[test]
    fn incremental_update_agrees(mut data in prop::collection::vec(any::<u8>(), 2..64).prop_map(|mut v| { v.truncate(v.len() & !1); v }), at in any::<prop::sample::Index>(), new in any::<u16>()) {
        let i = at.index(data.len() / 2) * 2;
        let before = checksum(&data);
        let old = u16::from_be_bytes([data[i], data[i + 1]]);
        data[i..i + 2].copy_from_slice(&new.to_be_bytes());
        prop_assert!(ones_eq(checksum::update_u16(before, old, new), checksum(&data)));
    }

    #[test]
    fn ipv4_rewrites_keep_header_valid(s in spec(), ttl in any::<u8>(), src in ipv4(), dst in ipv4(), p in payload()) {
        let mut buf = vec![0u8; 400];
        let n = s.build_udp(&mut buf, UdpHeader { src_port: 1, dst_port: 2 }, &p).unwrap();
        let ip = &mut buf[14..n];
        ipv4::set_ttl(ip, ttl).unwrap();
        ipv4::set_src(ip, src).unwrap();
        ipv4::set_dst(ip, dst).unwrap();
        let parsed = Ipv4Packet::parse(ip).unwrap();
        prop_assert_eq!((parsed.ttl(), parsed.src(), parsed.dst()), (ttl, src, dst));
        let mut fresh = [0u8; 20];
        fresh.copy_from_slice(&ip[..20]);
        fresh[10..12].fill(0);
        prop_assert_eq!(checksum(&fresh), parsed.header_checksum());
    }

    #[test]
    fn mac_display_parse_round_trip(m in mac()) {
        prop_assert_eq!(m.to_string().parse::<MacAddr>(), Ok(m));
    }

    #[test]
    fn mac_parse_never_panics(s in "\\PC{0,24}") {
        let _ = s.parse::<MacAddr>();
    }

    #[test]
    fn ethernet_round_trip(dst in mac(), src in mac(), et in any::<u16>().prop_filter("not a VLAN TPID", |e| !EtherType(*e).is_vlan_tag()), p in payload()) {
        let h = EthernetHeader { dst, src, ethertype: EtherType(et) };
        let mut buf = vec![0u8; 14 + p.len()];
        h.emit(&mut buf).unwrap();
        buf[14..].copy_from_slice(&p);
        let f = EthernetFrame::parse(&buf).unwrap();
        prop_assert_eq!(f.header(), h);
        prop_assert_eq!(f.payload(), &p[..]);
    }

    #[test]
    fn arp_round_trip(req in any::<bool>(), sm in mac(), si in ipv4(), tm in mac(), ti in ipv4()) {
        let a = ArpPacket {
            op: if req { ArpOp::Request } else { ArpOp::Reply },
            sender_mac: sm, sender_ip: si, target_mac: tm, target_ip: ti,
        };
        let mut buf = [0u8; 64];
        let n = a.emit_frame(&mut buf).unwrap();
        let Packet::Arp(b) = parse_frame(&buf[..n]).unwrap().packet else { panic!("not ARP") };
        prop_assert_eq!(a, b);
        prop_assert_eq!(classify(&buf[..n]).unwrap().class, FrameClass::Arp(a));
    }

    #[test]
    fn ipv4_round_trip(src in ipv4(), dst in ipv4(), protocol in any::<u8>(), ttl in any::<u8>(), ident in any::<u16>(), tos in any::<u8>(), p in payload(), pad in 0usize..40) {
        let h = Ipv4Header { src, dst, protocol, ttl, ident, tos, payload_len: p.len() };
        let mut buf = vec![0u8; 20 + p.len() + pad];
        h.emit(&mut buf).unwrap();
        buf[20..20 + p.len()].copy_from_slice(&p);
        let ip = Ipv4Packet::parse(&buf).unwrap();
        prop_assert_eq!((ip.src(), ip.dst(), ip.protocol(), ip.ttl(), ip.ident(), ip.tos()), (src, dst, protocol, ttl, ident, tos));
        prop_assert!(ip.dont_fragment());
        prop_assert_eq!(ip.payload(), &p[..]);
    }

    #[test]
    fn icmp_round_trip(s in spec(), req in any::<bool>(), ident in any::<u16>(), seq in any::<u16>(), p in payload()) {
        let kind = if req { EchoKind::Request } else { EchoKind::Reply };
        let mut buf = vec![0u8; 42 + p.len()];
        let n = s.build_icmp_echo(&mut buf, IcmpEchoHeader { kind, ident, seq }, &p).unwrap();
        prop_assert_eq!(n, buf.len());
        let f = parse_frame(&buf).unwrap();
        let Packet::Icmp { ip, icmp } = f.packet else { panic!("not ICMP") };
        prop_assert_eq!((ip.src(), ip.dst()), (s.src_ip, s.dst_ip));
        prop_assert_eq!((icmp.kind(), icmp.ident(), icmp.seq(), icmp.payload()), (kind, ident, seq, &p[..]));
    }

    #[test]
    fn udp_round_trip(s in spec(), sp in any::<u16>(), dp in any::<u16>(), p in payload()) {
        let mut buf = vec![0u8; 42 + p.len()];
        let n = s.build_udp(&mut buf, UdpHeader { src_port: sp, dst_port: dp }, &p).unwrap();
        let f = parse_frame(&buf[..n]).unwrap();
        prop_assert_eq!((f.eth.src(), f.eth.dst()), (s.src_mac, s.dst_mac));
        let Packet::Udp { ip, udp } = f.packet else { panic!("not UDP") };
        prop_assert_eq!((ip.ttl(), ip.ident(), ip.tos()), (s.ttl, s.ident, s.tos));
        prop_assert_eq!((udp.src_port(), udp.dst_port(), udp.payload()), (sp, dp, &p[..]));
        prop_assert_ne!(udp.checksum(), 0);
        let flow = FiveTuple { src_ip: s.src_ip, dst_ip: s.dst_ip, src_port: sp, dst_port: dp, protocol: ipv4::PROTO_UDP };
        prop_assert_eq!(classify(&buf[..n]).unwrap().class, FrameClass::Flow(flow));
    }

    #[test]
    fn tcp_round_trip(s in spec(), h in tcp_header(), p in payload()) {
        let mut buf = vec![0u8; 34 + h.header_len() + p.len()];
        let n = s.build_tcp(&mut buf, &h, &p).unwrap();
        prop_assert_eq!(n, buf.len());
        let Packet::Tcp { tcp, .. } = parse_frame(&buf).unwrap().packet else { panic!("not TCP") };
        prop_assert_eq!((tcp.src_port(), tcp.dst_port(), tcp.seq(), tcp.ack()), (h.src_port, h.dst_port, h.seq, h.ack));
        prop_assert_eq!((tcp.flags(), tcp.window(), tcp.urgent()), (h.flags, h.window, h.urgent));
        prop_assert_eq!(tcp.header_len(), h.header_len());
        prop_assert_eq!(collect_options(&tcp), h.options);
        prop_assert_eq!(tcp.payload(), &p[..]);
        prop_assert_eq!(tcp::compute_checksum(&buf[34..], s.src_ip, s.dst_ip), tcp.checksum());
    }

    #[test]
    fn rss_table_matches_definition(key in any::<[u8; 32]>(), tail in any::<[u8; 8]>(), src in ipv4(), dst in ipv4(), sp in any::<u16>(), dp in any::<u16>()) {
        let mut k = [0u8; 40];
        k[..32].copy_from_slice(&key);
        k[32..].copy_from_slice(&tail);
        let key = RssKey(k);
        let h = RssHasher::new(&key);
        let mut input = [0u8; 12];
        input[..4].copy_from_slice(&src.octets());
        input[4..8].copy_from_slice(&dst.octets());
        input[8..10].copy_from_slice(&sp.to_be_bytes());
        input[10..].copy_from_slice(&dp.to_be_bytes());
        prop_assert_eq!(h.hash_ipv4(src, dst), toeplitz(&key, &input[..8]));
        prop_assert_eq!(h.hash_ipv4_ports(src, dst, sp, dp), toeplitz(&key, &input));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), src in ipv4(), dst in ipv4()) {
        let _ = parse_frame(&bytes);
        let _ = classify(&bytes);
        let _ = EthernetFrame::parse(&bytes);
        let _ = ArpPacket::parse(&bytes);
        let _ = Ipv4Packet::parse(&bytes);
        let _ = IcmpEcho::parse(&bytes);
        let _ = UdpDatagram::parse(&bytes, src, dst);
        if let Ok(t) = TcpSegment::parse_unverified(&bytes) {
            let _ = t.options().count();
        }
        let _ = TcpSegment::parse(&bytes, src, dst);
    }

    /// Random bytes behind a plausible Ethernet + IPv4 prefix reach the deeper parsers far more
    /// often than uniformly random frames do.
    #[test]
    fn random_ip_bodies_never_panic(et in prop::sample::select(vec![0x0800u16, 0x0806]), ihl in 0u8..16, rest in prop::collection::vec(any::<u8>(), 0..120)) {
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&et.to_be_bytes());
        frame.push(0x40 | ihl);
        frame.extend_from_slice(&rest);
        let _ = parse_frame(&frame);
        let _ = classify(&frame);
    }

    #[test]
    fn mutated_frames_never_panic(s in spec(), h in tcp_header(), p in payload(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), cut in any::<prop::sample::Index>()) {
        let mut buf = vec![0u8; 34 + h.header_len() + p.len()];
        s.build_tcp(&mut buf, &h, &p).unwrap();
        for (at, v) in edits {
            let i = at.index(buf.len());
            buf[i] = v;
        }
        let end = cut.index(buf.len() + 1);
        if let Ok(f) = parse_frame(&buf[..end])
            && let Packet::Tcp { tcp, .. } = f.packet
        {
            let _ = tcp.options().count();
        }
        let _ = classify(&buf[..end]);
    }

    #[test]
    fn single_byte_corruption_is_detected(s in spec(), kind in 0u8..3, h in tcp_header(), p in payload(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
        let mut buf = vec![0u8; 34 + h.header_len() + p.len()];
        let n = match kind {
            0 => s.build_udp(&mut buf, UdpHeader { src_port: h.src_port, dst_port: h.dst_port }, &p),
            1 => s.build_tcp(&mut buf, &h, &p),
            _ => s.build_icmp_echo(&mut buf, IcmpEchoHeader { kind: EchoKind::Request, ident: 1, seq: 2 }, &p),
        }.unwrap();
        let frame = &mut buf[..n];
        prop_assert!(parse_frame(frame).is_ok());
        let i = at.index(n);
        frame[i] ^= flip;
        match parse_frame(frame) {
            Err(reason) => prop_assert!(DropReason::ALL.contains(&reason)),
            Ok(_) => {
                // Only bytes no checksum covers may change undetected: the MAC addresses; a UDP
                // checksum byte that turns the field into 0 ("not computed"); or a UDP length
                // byte, since a shorter length selects a prefix whose checksum can match.
                let mac = i < 12;
                let udp_unchecked = kind == 0 && (40..42).contains(&i) && frame[40..42] == [0, 0];
                let udp_len = kind == 0 && (38..40).contains(&i);
                prop_assert!(mac || udp_unchecked || udp_len, "corruption at byte {} of {} went unnoticed", i, n);
            }
        }
    }

    #[test]
    fn single_byte_corruption_of_arp(req in any::<bool>(), sm in mac(), si in ipv4(), ti in ipv4(), at in 0usize..42, flip in 1u8..=255) {
        let a = ArpPacket { op: if req { ArpOp::Request } else { ArpOp::Reply }, sender_mac: sm, sender_ip: si, target_mac: MacAddr::ZERO, target_ip: ti };
        let mut buf = [0u8; 42];
        a.emit_frame(&mut buf).unwrap();
        buf[at] ^= flip;
        match parse_frame(&buf) {
            Ok(f) => {
                // ARP has no checksum: only the fixed-value fields are checked.
                prop_assert!(!(12..14 + 8).contains(&at) || (at == 21 && matches!(f.packet, Packet::Arp(b) if b.op != a.op)));
            }
            // The flip made the EtherType IPv4's (0x0806 ^ 0x06): the IPv4 parser rejects
            // the frame, for a reason of its own.
            Err(reason) if u16::from_be_bytes([buf[12], buf[13]]) == 0x0800 => {
                prop_assert!(DropReason::ALL.contains(&reason) && reason != DropReason::BadArp, "{:?}", reason)
            }
            Err(reason) => prop_assert!(matches!(reason, DropReason::BadArp | DropReason::UnsupportedEthertype | DropReason::VlanTagged)),
        }
    }
}
