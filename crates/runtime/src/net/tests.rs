//! The stack on frames in memory: what goes in, what comes out, and what is counted.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use corral_wire::{
    ArpOp, ArpPacket, EchoKind, IcmpEchoHeader, Ipv4FrameSpec, MacAddr, Packet, UdpHeader,
    parse_frame,
};
use proptest::prelude::*;

use super::config::NetConfig;
use super::socket::{Datagram, RECV_QUEUE_CAPACITY, Socket};
use super::stack::{
    ARP_QUEUE_PER_NEIGHBOUR, ARP_RETRY_NS, ARP_TTL_NS, FRAME_CAPACITY, Link, MAX_UDP_PAYLOAD,
    NetStack, StackDrop,
};

const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 7);
const PEER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 7]);
const GW_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const GW_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 1]);
const T0: u64 = 1_000_000_000;

/// Collects transmitted frames; `buffers` limits how many may be sent.
#[derive(Clone, Default)]
struct Capture {
    frames: Arc<Mutex<Vec<Vec<u8>>>>,
    armed: Arc<Mutex<Vec<u64>>>,
    buffers: Option<Arc<Mutex<usize>>>,
}

impl Capture {
    fn take(&self) -> Vec<Vec<u8>> {
        core::mem::take(&mut *self.frames.lock().unwrap())
    }
}

impl Link for Capture {
    fn transmit(
        &self,
        _may_block: bool,
        build: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> Result<(), StackDrop> {
        if let Some(b) = &self.buffers {
            let mut b = b.lock().unwrap();
            if *b == 0 {
                return Err(StackDrop::TxNoBuffer);
            }
            *b -= 1;
        }
        let mut buf = vec![0u8; FRAME_CAPACITY];
        let n = build(&mut buf);
        buf.truncate(n);
        self.frames.lock().unwrap().push(buf);
        Ok(())
    }

    fn arm_timer(&self, deadline: u64) {
        self.armed.lock().unwrap().push(deadline);
    }
}

fn config() -> NetConfig {
    NetConfig::new(OUR_IP, 24)
}

fn stack_with(config: NetConfig) -> (NetStack, Capture) {
    let cap = Capture::default();
    (NetStack::new(config, Box::new(cap.clone())), cap)
}

fn stack() -> (NetStack, Capture) {
    stack_with(config())
}

fn bind(s: &NetStack, port: u16) -> Arc<Socket> {
    s.bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port), |local| {
        Arc::new(Socket::queued(local))
    })
    .unwrap()
}

fn peer_spec(s: &NetStack) -> Ipv4FrameSpec {
    Ipv4FrameSpec {
        src_mac: PEER_MAC,
        dst_mac: s.mac(),
        src_ip: PEER_IP,
        dst_ip: OUR_IP,
        ttl: 64,
        ident: 1,
        tos: 0,
    }
}

fn udp_from_peer(s: &NetStack, src_port: u16, dst_port: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; FRAME_CAPACITY];
    let n = peer_spec(s)
        .build_udp(&mut buf, UdpHeader { src_port, dst_port }, payload)
        .unwrap();
    buf.truncate(n);
    buf
}

fn ping_from_peer(s: &NetStack, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; FRAME_CAPACITY];
    let header = IcmpEchoHeader {
        kind: EchoKind::Request,
        ident: 0x1234,
        seq: 9,
    };
    let n = peer_spec(s)
        .build_icmp_echo(&mut buf, header, payload)
        .unwrap();
    buf.truncate(n);
    buf
}

fn arp_frame(p: ArpPacket) -> Vec<u8> {
    let mut buf = vec![0u8; 64];
    let n = p.emit_frame(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

fn drops(s: &NetStack, name: &str) -> u64 {
    s.stats().drop_count(name)
}

#[test]
fn arp_request_for_us_is_answered_and_sender_learned() {
    let (s, cap) = stack();
    let req = ArpPacket::request(PEER_MAC, PEER_IP, OUR_IP);
    assert_eq!(s.receive(&arp_frame(req), T0), None);
    let out = cap.take();
    assert_eq!(out.len(), 1);
    let f = parse_frame(&out[0]).unwrap();
    assert_eq!((f.eth.dst(), f.eth.src()), (PEER_MAC, s.mac()));
    let Packet::Arp(reply) = f.packet else {
        panic!("{:?}", f.packet)
    };
    assert_eq!(reply.op, ArpOp::Reply);
    assert_eq!((reply.sender_mac, reply.sender_ip), (s.mac(), OUR_IP));
    assert_eq!((reply.target_mac, reply.target_ip), (PEER_MAC, PEER_IP));
    let st = s.stats();
    assert_eq!((st.arp.requests_received, st.arp.replies_sent), (1, 1));
    assert_eq!((st.arp.learned, st.arp.entries), (1, 1));
    assert_eq!(st.total_drops(), 0);

    // The learned neighbour is used without asking again.
    s.send_udp(5000, SocketAddrV4::new(PEER_IP, 53), b"q", false, T0)
        .unwrap();
    let out = cap.take();
    assert_eq!(out.len(), 1);
    assert_eq!(parse_frame(&out[0]).unwrap().eth.dst(), PEER_MAC);
}

#[test]
fn arp_for_another_host_is_counted_not_answered() {
    let (s, cap) = stack();
    let req = ArpPacket::request(PEER_MAC, PEER_IP, Ipv4Addr::new(10, 0, 0, 99));
    assert_eq!(s.receive(&arp_frame(req), T0), Some("arp_other_target"));
    assert!(cap.take().is_empty());
    assert_eq!(s.stats().arp.entries, 0, "not talking to us: not learned");
    // Someone claiming our address.
    let req = ArpPacket::request(PEER_MAC, OUR_IP, PEER_IP);
    assert_eq!(s.receive(&arp_frame(req), T0), Some("arp_address_conflict"));
}

#[test]
fn unresolved_neighbour_queues_packets_until_the_reply() {
    let (s, cap) = stack();
    let dst = SocketAddrV4::new(PEER_IP, 9000);
    for i in 0..3u8 {
        s.send_udp(4000, dst, &[i; 10], true, T0).unwrap();
    }
    let out = cap.take();
    assert_eq!(out.len(), 1, "one request, packets held");
    let f = parse_frame(&out[0]).unwrap();
    assert_eq!(f.eth.dst(), MacAddr::BROADCAST);
    let Packet::Arp(req) = f.packet else { panic!() };
    assert_eq!(
        (req.op, req.target_ip, req.sender_ip),
        (ArpOp::Request, PEER_IP, OUR_IP)
    );
    assert_eq!(*cap.armed.lock().unwrap(), vec![T0 + ARP_RETRY_NS]);

    let reply = req.reply(PEER_MAC);
    assert_eq!(s.receive(&arp_frame(reply), T0 + 5), None);
    let out = cap.take();
    assert_eq!(out.len(), 3);
    for (i, frame) in out.iter().enumerate() {
        // parse_frame verifies the IPv4 and UDP checksums.
        let f = parse_frame(frame).unwrap();
        assert_eq!((f.eth.dst(), f.eth.src()), (PEER_MAC, s.mac()));
        let Packet::Udp { ip, udp } = f.packet else {
            panic!()
        };
        assert_eq!((ip.src(), ip.dst(), ip.ttl()), (OUR_IP, PEER_IP, 64));
        assert_eq!((udp.src_port(), udp.dst_port()), (4000, 9000));
        assert_eq!(udp.payload(), &[i as u8; 10]);
        assert_ne!(udp.checksum(), 0);
    }
    assert_eq!(s.stats().arp.learned, 1);
}

#[test]
fn resolution_retries_then_gives_up() {
    let (s, cap) = stack();
    let dst = SocketAddrV4::new(PEER_IP, 9000);
    for _ in 0..ARP_QUEUE_PER_NEIGHBOUR + 4 {
        s.send_udp(4000, dst, b"x", true, T0).unwrap();
    }
    assert_eq!(drops(&s, "arp_queue_full"), 4);
    assert_eq!(cap.take().len(), 1);
    s.poll(T0 + 1); // Not due yet.
    assert!(cap.take().is_empty());
    s.poll(T0 + ARP_RETRY_NS);
    s.poll(T0 + 2 * ARP_RETRY_NS);
    assert_eq!(cap.take().len(), 2, "two retries");
    s.poll(T0 + 3 * ARP_RETRY_NS);
    assert!(cap.take().is_empty());
    let st = s.stats();
    assert_eq!(st.arp.requests_sent, 3);
    assert_eq!(st.arp.failures, 1);
    assert_eq!(
        st.drop_count("arp_unresolved"),
        ARP_QUEUE_PER_NEIGHBOUR as u64
    );
    assert_eq!(st.arp.entries, 0);
    assert_eq!(s.next_deadline(), u64::MAX);
}

#[test]
fn learned_neighbours_expire() {
    let (s, cap) = stack();
    s.receive(
        &arp_frame(ArpPacket::request(PEER_MAC, PEER_IP, OUR_IP)),
        T0,
    );
    cap.take();
    let dst = SocketAddrV4::new(PEER_IP, 9);
    s.send_udp(1, dst, b"a", false, T0 + ARP_TTL_NS - 1)
        .unwrap();
    assert_eq!(parse_frame(&cap.take()[0]).unwrap().eth.dst(), PEER_MAC);
    s.send_udp(1, dst, b"a", false, T0 + ARP_TTL_NS).unwrap();
    let out = cap.take();
    assert!(matches!(
        parse_frame(&out[0]).unwrap().packet,
        Packet::Arp(_)
    ));
}

#[test]
fn off_subnet_goes_to_the_gateway() {
    let (s, cap) = stack_with(config().gateway(GW_IP).static_arp(GW_IP, GW_MAC));
    let far = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 1), 53);
    s.send_udp(3000, far, b"dns?", true, T0).unwrap();
    let out = cap.take();
    let f = parse_frame(&out[0]).unwrap();
    assert_eq!(f.eth.dst(), GW_MAC);
    let Packet::Udp { ip, .. } = f.packet else {
        panic!()
    };
    assert_eq!(ip.dst(), *far.ip());

    let (s, _) = stack();
    let e = s.send_udp(3000, far, b"dns?", true, T0).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH));
}

#[test]
fn ping_is_answered() {
    let (s, cap) = stack();
    let payload: Vec<u8> = (0..56u8).collect();
    assert_eq!(s.receive(&ping_from_peer(&s, &payload), T0), None);
    let out = cap.take();
    assert_eq!(out.len(), 1);
    let f = parse_frame(&out[0]).unwrap();
    assert_eq!((f.eth.dst(), f.eth.src()), (PEER_MAC, s.mac()));
    let Packet::Icmp { ip, icmp } = f.packet else {
        panic!()
    };
    assert_eq!((ip.src(), ip.dst()), (OUR_IP, PEER_IP));
    assert_eq!(icmp.kind(), EchoKind::Reply);
    assert_eq!((icmp.ident(), icmp.seq()), (0x1234, 9));
    assert_eq!(icmp.payload(), &payload[..]);
    let st = s.stats();
    assert_eq!((st.icmp_echo_requests, st.icmp_echo_replies_sent), (1, 1));
    assert_eq!((st.rx_packets, st.tx_packets), (1, 1));
}

#[test]
fn reply_without_a_buffer_is_counted() {
    let cap = Capture {
        buffers: Some(Arc::new(Mutex::new(0))),
        ..Capture::default()
    };
    let s = NetStack::new(config(), Box::new(cap.clone()));
    assert_eq!(
        s.receive(&ping_from_peer(&s, b"x"), T0),
        Some("tx_no_buffer")
    );
}

#[test]
fn udp_is_delivered_to_its_socket() {
    let (s, _) = stack();
    let sock = bind(&s, 7000);
    let before = crate::timer::now_ns();
    assert_eq!(
        s.receive(&udp_from_peer(&s, 1234, 7000, b"hello"), T0),
        None
    );
    let after = crate::timer::now_ns();
    let d = sock.recv(Some(u64::MAX)).unwrap();
    // Stamped with the real clock when the stack took it in, whatever the caller's `now`.
    assert!(
        (before..=after).contains(&d.received_ns),
        "{before} {} {after}",
        d.received_ns
    );
    assert_eq!(
        d,
        Datagram {
            payload: b"hello".to_vec(),
            src: SocketAddrV4::new(PEER_IP, 1234),
            received_ns: d.received_ns,
        }
    );
    assert_eq!(
        s.receive(&udp_from_peer(&s, 1234, 7001, b"hello"), T0),
        Some("no_socket")
    );
    let st = s.stats();
    assert_eq!(st.udp_rx_datagrams, 1);
    assert_eq!(st.sockets.len(), 1);
    assert_eq!(st.sockets[0].rx_datagrams, 1);

    // A connected socket hears only its peer.
    sock.set_peer(Some(SocketAddrV4::new(PEER_IP, 1)));
    assert_eq!(
        s.receive(&udp_from_peer(&s, 1234, 7000, b"x"), T0),
        Some("not_connected_peer")
    );
    assert_eq!(s.receive(&udp_from_peer(&s, 1, 7000, b"y"), T0), None);

    // Unbinding frees the port.
    s.unbind(&sock);
    assert_eq!(
        s.receive(&udp_from_peer(&s, 1, 7000, b"y"), T0),
        Some("no_socket")
    );
}

#[test]
fn receive_queue_is_bounded() {
    let (s, _) = stack();
    let sock = bind(&s, 7000);
    let frame = udp_from_peer(&s, 1, 7000, b"z");
    for _ in 0..RECV_QUEUE_CAPACITY {
        assert_eq!(s.receive(&frame, T0), None);
    }
    assert_eq!(s.receive(&frame, T0), Some("socket_queue_full"));
    let st = sock.stats();
    assert_eq!(
        (st.rx_datagrams, st.rx_dropped, st.queued),
        (RECV_QUEUE_CAPACITY as u64, 1, RECV_QUEUE_CAPACITY as u64)
    );
}

#[test]
fn blocked_receiver_is_woken_and_timeouts_expire() {
    let (s, _) = stack();
    let s = Arc::new(s);
    let sock = bind(&s, 7000);
    let err = sock
        .recv(Some(crate::timer::now_ns() + 5_000_000))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EAGAIN));
    let (s2, sock2) = (s.clone(), sock.clone());
    let t = std::thread::spawn(move || sock2.recv(None));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let frame = udp_from_peer(&s2, 5, 7000, b"late");
    s2.receive(&frame, T0);
    assert_eq!(t.join().unwrap().unwrap().payload, b"late");
    // Closing wakes receivers with EBADF.
    let sock3 = sock.clone();
    let t = std::thread::spawn(move || sock3.recv(None));
    std::thread::sleep(std::time::Duration::from_millis(20));
    sock.close();
    assert_eq!(
        t.join().unwrap().unwrap_err().raw_os_error(),
        Some(libc::EBADF)
    );
}

#[test]
fn bind_errors_and_ephemeral_ports() {
    let (s, _) = stack();
    let _a = bind(&s, 7000);
    let make = |local| Arc::new(Socket::queued(local));
    let e = s.bind(SocketAddrV4::new(OUR_IP, 7000), make).err().unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE));
    let e = s
        .bind(SocketAddrV4::new(PEER_IP, 7001), make)
        .err()
        .unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL));
    let ports: Vec<u16> = (0..100).map(|_| bind(&s, 0).local().port()).collect();
    let mut unique = ports.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 100);
    assert!(ports.iter().all(|p| (49152..=65535).contains(p)));
}

#[test]
fn datagrams_larger_than_a_frame_are_refused() {
    let (s, cap) = stack_with(config().static_arp(PEER_IP, PEER_MAC));
    let dst = SocketAddrV4::new(PEER_IP, 9);
    let e = s
        .send_udp(1, dst, &[0; MAX_UDP_PAYLOAD + 1], true, T0)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE));
    s.send_udp(1, dst, &[7; MAX_UDP_PAYLOAD], true, T0).unwrap();
    let out = cap.take();
    assert_eq!(out[0].len(), 1514);
    let Packet::Udp { udp, .. } = parse_frame(&out[0]).unwrap().packet else {
        panic!()
    };
    assert_eq!(udp.payload().len(), MAX_UDP_PAYLOAD);
}

#[test]
fn own_address_loops_back() {
    let (s, cap) = stack();
    let sock = bind(&s, 7000);
    s.send_udp(6000, SocketAddrV4::new(OUR_IP, 7000), b"me", true, T0)
        .unwrap();
    assert!(cap.take().is_empty(), "never leaves the runtime");
    let d = sock.recv(Some(u64::MAX)).unwrap();
    assert_eq!((d.payload.as_slice(), d.src.port()), (&b"me"[..], 6000));
    assert_eq!(s.stats().loopback_packets, 1);
}

/// Corrupts a valid frame in one way per expected drop reason.
#[test]
fn every_malformed_frame_is_counted_once() {
    let (s, _) = stack();
    let _sock = bind(&s, 7000);
    let good = udp_from_peer(&s, 1, 7000, b"payload!");
    assert_eq!(s.receive(&good, T0), None);
    let refresh_ip_checksum = |f: &mut Vec<u8>| {
        f[24..26].fill(0);
        let c = corral_wire::checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
    };
    type Mutation = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Mutation)> = vec![
        ("truncated", Box::new(|f| f.truncate(10))),
        (
            "vlan_tagged",
            Box::new(|f| f[12..14].copy_from_slice(&[0x81, 0])),
        ),
        (
            "unsupported_ethertype",
            Box::new(|f| f[12..14].copy_from_slice(&[0x86, 0xdd])),
        ),
        ("bad_ip_version", Box::new(|f| f[14] = 0x65)),
        ("bad_ihl", Box::new(|f| f[14] = 0x44)),
        ("bad_total_length", Box::new(|f| f.truncate(40))),
        ("bad_ip_checksum", Box::new(|f| f[24] ^= 1)),
        (
            "fragment",
            Box::new(move |f| {
                f[20] = 0x20;
                refresh_ip_checksum(f)
            }),
        ),
        (
            "unsupported_protocol",
            Box::new(move |f| {
                f[23] = 2;
                refresh_ip_checksum(f)
            }),
        ),
        (
            "bad_udp_checksum",
            Box::new(|f| *f.last_mut().unwrap() ^= 1),
        ),
        (
            "bad_udp_length",
            Box::new(|f| f[38..40].copy_from_slice(&4u16.to_be_bytes())),
        ),
        (
            "not_our_mac",
            Box::new(|f| f[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9])),
        ),
        (
            "bad_source",
            Box::new(|f| f[6..12].copy_from_slice(&[0xff; 6])),
        ),
        (
            "not_our_ip",
            Box::new(move |f| {
                f[33] = 99;
                f[40..42].fill(0); // The UDP checksum covers the address.
                refresh_ip_checksum(f)
            }),
        ),
        (
            "ttl_expired",
            Box::new(move |f| {
                f[22] = 0;
                refresh_ip_checksum(f)
            }),
        ),
        (
            "no_socket",
            Box::new(|f| {
                f[36..38].copy_from_slice(&7001u16.to_be_bytes());
                f[40..42].fill(0); // No checksum: allowed over IPv4.
            }),
        ),
    ];
    for (want, mutate) in cases {
        let mut frame = good.clone();
        mutate(&mut frame);
        let before = s.stats();
        assert_eq!(s.receive(&frame, T0), Some(want), "case {want}");
        let after = s.stats();
        assert_eq!(
            after.drop_count(want),
            before.drop_count(want) + 1,
            "{want}"
        );
        assert_eq!(after.total_drops(), before.total_drops() + 1, "{want}");
    }

    // ICMP: a corrupt echo, a non-echo message, an unsolicited reply, a broadcast ping.
    let ping = ping_from_peer(&s, b"abc");
    let mut f = ping.clone();
    *f.last_mut().unwrap() ^= 1;
    assert_eq!(s.receive(&f, T0), Some("bad_icmp_checksum"));
    let mut f = ping.clone();
    f[34] = 13; // Timestamp request, checksum fixed up.
    f[36..38].fill(0);
    let c = corral_wire::checksum::checksum(&f[34..]);
    f[36..38].copy_from_slice(&c.to_be_bytes());
    assert_eq!(s.receive(&f, T0), Some("unsupported_icmp"));
    let mut buf = vec![0u8; 128];
    let header = IcmpEchoHeader {
        kind: EchoKind::Reply,
        ident: 1,
        seq: 1,
    };
    let n = peer_spec(&s)
        .build_icmp_echo(&mut buf, header, b"")
        .unwrap();
    assert_eq!(s.receive(&buf[..n], T0), Some("unsolicited_echo_reply"));
    let mut spec = peer_spec(&s);
    spec.dst_ip = Ipv4Addr::new(10, 0, 0, 255);
    spec.dst_mac = MacAddr::BROADCAST;
    let header = IcmpEchoHeader {
        kind: EchoKind::Request,
        ..header
    };
    let n = spec.build_icmp_echo(&mut buf, header, b"").unwrap();
    assert_eq!(s.receive(&buf[..n], T0), Some("broadcast_echo"));
    // TCP is parsed and verified; a segment for no connection is answered with a RST and
    // counted among TCP's drops.
    let n = peer_spec(&s)
        .build_tcp(
            &mut buf,
            &corral_wire::TcpHeader {
                src_port: 1,
                dst_port: 80,
                ..Default::default()
            },
            b"",
        )
        .unwrap();
    assert_eq!(s.receive(&buf[..n], T0), None);
    assert_eq!(s.stats().tcp.drop_count("no_connection"), 1);
    // Malformed ARP.
    let mut f = arp_frame(ArpPacket::request(PEER_MAC, PEER_IP, OUR_IP));
    f[21] = 9;
    assert_eq!(s.receive(&f, T0), Some("bad_arp"));

    let st = s.stats();
    assert_eq!(st.rx_packets, 1 + 16 + 6);
    assert_eq!(st.total_drops(), 16 + 5);
    // Every reason has a distinct name.
    let mut names: Vec<_> = st.drops.iter().map(|(n, _)| *n).collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names.len(),
        corral_wire::DropReason::COUNT + StackDrop::COUNT
    );
}

/// One frame in, and either exactly one drop counted under the reason returned, or none.
fn check_accounting(s: &NetStack, frame: &[u8]) -> Result<(), TestCaseError> {
    let before = s.stats();
    let reason = s.receive(frame, T0);
    let after = s.stats();
    prop_assert_eq!(after.rx_packets, before.rx_packets + 1);
    match reason {
        Some(name) => {
            prop_assert_eq!(after.total_drops(), before.total_drops() + 1);
            prop_assert_eq!(after.drop_count(name), before.drop_count(name) + 1);
        }
        None => prop_assert_eq!(after.total_drops(), before.total_drops()),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic_and_drops_have_reasons(
        bytes in proptest::collection::vec(any::<u8>(), 0..1600)
    ) {
        let (s, _) = stack();
        let _sock = bind(&s, 7000);
        check_accounting(&s, &bytes)?;
    }

    #[test]
    fn corrupted_frames_never_panic_and_drops_have_reasons(
        which in 0usize..3,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<Option<usize>>(),
    ) {
        let (s, _) = stack();
        let _sock = bind(&s, 7000);
        let mut frame = match which {
            0 => udp_from_peer(&s, 9, 7000, b"some payload bytes"),
            1 => ping_from_peer(&s, b"ping payload"),
            _ => arp_frame(ArpPacket::request(PEER_MAC, PEER_IP, OUR_IP)),
        };
        for (at, x) in flips {
            let len = frame.len();
            frame[at % len] ^= x;
        }
        if let Some(cut) = cut {
            frame.truncate(cut % (frame.len() + 1));
        }
        check_accounting(&s, &frame)?;
    }
}
