//! End to end through a veth pair: the steering program attached natively to the root
//! namespace's end, clients in a fresh namespace behind the other end. Needs root.
#![cfg(not(loom))]

mod common;

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corral_wire::ipv4::{PROTO_TCP, PROTO_UDP};
use corral_wire::{ArpOp, ArpPacket, EtherType, EthernetFrame, Ipv4Packet, MacAddr, TcpFlags};
use corral_xdp::{
    AttachMode, Error, Mode, PROGRAM_NAME, Port, PortConfig, SocketConfig, Verdict, ZeroCopy,
};

use common::{ChildGuard, VethPair, connects, pair, within};

/// Small UMEMs and rings: the tests move a few frames.
fn config(attach: AttachMode) -> PortConfig {
    PortConfig {
        attach,
        socket: SocketConfig {
            frame_count: 256,
            rx_frames: 128,
            fill_size: 256,
            completion_size: 128,
            rx_size: 128,
            tx_size: 128,
            ..SocketConfig::default()
        },
        ..PortConfig::default()
    }
}

fn open(net: &VethPair) -> Port {
    let port = Port::open(&net.host, &config(AttachMode::Native)).expect("attach natively");
    // veth runs XDP in its driver; whether it gives zero-copy depends on the kernel.
    assert_ne!(port.mode(), Mode::Generic, "{}", port.describe());
    port
}

/// Swaps a UDP frame's MACs, IPv4 addresses and ports (option-less IPv4 header); the
/// checksums stay right, being sums.
fn swap_udp(frame: &mut [u8]) {
    let (dst, rest) = frame.split_at_mut(6);
    dst.swap_with_slice(&mut rest[..6]);
    let (src_ip, dst_ip) = frame[26..34].split_at_mut(4);
    src_ip.swap_with_slice(dst_ip);
    let (src_port, dst_port) = frame[34..38].split_at_mut(2);
    src_port.swap_with_slice(dst_port);
}

/// What a received frame is, as far as these tests care.
#[derive(Debug, PartialEq)]
enum Seen {
    ArpRequestFor(Ipv4Addr),
    UdpTo(Ipv4Addr),
    TcpSynTo(SocketAddr),
    Other,
}

/// Reads the frame without checking transport checksums: a veth peer offloads them, so the
/// frames its host sends carry only the pseudo-header's sum (`CHECKSUM_PARTIAL`), which the
/// XDP program sees as it is.
fn what(frame: &[u8]) -> (Seen, Option<ArpPacket>) {
    let Ok(eth) = EthernetFrame::parse(frame) else {
        return (Seen::Other, None);
    };
    match eth.ethertype() {
        EtherType::ARP => match ArpPacket::parse(eth.payload()) {
            Ok(arp) if arp.op == ArpOp::Request => (Seen::ArpRequestFor(arp.target_ip), Some(arp)),
            _ => (Seen::Other, None),
        },
        EtherType::IPV4 => match Ipv4Packet::parse(eth.payload()) {
            Ok(ip) if ip.protocol() == PROTO_UDP => (Seen::UdpTo(ip.dst()), None),
            Ok(ip) if ip.protocol() == PROTO_TCP && ip.payload().len() >= 20 => {
                let l4 = ip.payload();
                let port = u16::from_be_bytes([l4[2], l4[3]]);
                if l4[13] & TcpFlags::SYN.0 != 0 {
                    (Seen::TcpSynTo(SocketAddr::from((ip.dst(), port))), None)
                } else {
                    (Seen::Other, None)
                }
            }
            _ => (Seen::Other, None),
        },
        _ => (Seen::Other, None),
    }
}

/// A UDP socket whose datagrams carry no checksum (`SO_NO_CHECK`), so that what the socket
/// reflects arrives with a valid one rather than the partial sum veth leaves.
fn udp_without_checksum(ip: Ipv4Addr) -> UdpSocket {
    let sock = UdpSocket::bind((ip, 0)).unwrap();
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a valid socket with a pointer to a live int and its size.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
    sock
}

/// (a) and (d): the namespace's ARP request and UDP datagram for a registered address reach
/// the socket, which answers the first (a copied frame) and reflects the second (in place);
/// meanwhile a TCP connection to the root end's own address, Linux's, works.
#[test]
fn registered_frames_reach_the_socket_and_linux_keeps_the_rest() {
    let net = pair(1);
    let mut port = open(&net);
    let registered = net.spare[0];
    port.register(registered).unwrap();
    assert!(port.is_registered(registered).unwrap());
    assert!(net.xdp_attached());
    let listing = net.host_details().unwrap();
    assert!(listing.contains(PROGRAM_NAME), "{listing}");

    let listener = TcpListener::bind((net.host_ip, 0)).unwrap();
    let linux = listener.local_addr().unwrap();
    assert!(connects(&net, linux, Duration::from_secs(2)));

    let peer_ip = net.peer_ip;
    let client = net.spawn_inside(move || {
        let sock = udp_without_checksum(peer_ip);
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..20 {
            sock.send_to(b"steered", (registered, 7777)).unwrap();
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                return Some((buf[..n].to_vec(), from));
            }
        }
        None
    });

    let host_mac = MacAddr(net.host_mac);
    let (mut arp_requests, mut reflected) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(6);
    while !client.is_finished() && Instant::now() < deadline {
        let mut replies = Vec::new();
        let socket = &mut port.sockets_mut()[0];
        socket.recv_burst(32, |frame| match what(frame) {
            (Seen::ArpRequestFor(ip), Some(arp)) if ip == registered => {
                arp_requests += 1;
                let mut buf = [0u8; 60];
                let n = arp.reply(host_mac).emit_frame(&mut buf).unwrap();
                replies.push(buf[..n].to_vec());
                Verdict::Release
            }
            (Seen::UdpTo(ip), _) if ip == registered => {
                reflected += 1;
                swap_udp(frame);
                Verdict::Transmit(frame.len())
            }
            other => panic!("steered a frame not for {registered}: {other:?}"),
        });
        for reply in &replies {
            assert!(socket.enqueue(reply), "queue the ARP reply");
        }
        socket.flush();
        socket.reap();
    }
    let (payload, from) = client
        .join()
        .unwrap()
        .expect("an answer from the registered address");
    assert_eq!(payload, b"steered");
    assert_eq!(from, SocketAddr::from((registered, 7777)));
    assert!(
        arp_requests >= 1,
        "the namespace asked for {registered} by ARP"
    );
    assert!(reflected >= 1);

    let counters = port.sockets()[0].counters();
    assert!(counters.rx_frames >= 2, "{counters:?}");
    assert!(counters.tx_frames >= 2, "{counters:?}");
    assert_eq!(counters.kick_errors, 0, "{counters:?}");
    // Linux still has its own address while the program is attached.
    assert!(connects(&net, linux, Duration::from_secs(2)));
    assert!(net.xdp_attached());
    drop(port);
    assert!(
        !net.xdp_attached(),
        "dropping the port detaches the program"
    );
}

/// Set by `killing_the_holder_detaches_the_program` for the child it starts.
const HOLD: &str = "CORRAL_XDP_TEST_HOLD";

/// Not a test by itself (it returns at once): the child process of
/// `killing_the_holder_detaches_the_program`, which attaches to the interface named in
/// `CORRAL_XDP_TEST_HOLD` ("interface,address"), registers the address, says so on stdout
/// and waits to be killed.
#[test]
fn holder_child() {
    let Ok(spec) = std::env::var(HOLD) else {
        return;
    };
    // Die with the parent, should it die first.
    // SAFETY: prctl(PR_SET_PDEATHSIG) with a signal number has no memory effects.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    let (interface, ip) = spec.split_once(',').unwrap();
    let port = Port::open(interface, &config(AttachMode::Native)).unwrap();
    port.register(ip.parse().unwrap()).unwrap();
    println!("attached {}", port.ids().1);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// (b): a process holding the attachment is killed with SIGKILL; the kernel detaches the
/// program within a second, and Linux answers on the address the program was taking again.
#[test]
fn killing_the_holder_detaches_the_program() {
    let net = pair(1);
    let listener = TcpListener::bind((net.host_ip, 0)).unwrap();
    let linux = listener.local_addr().unwrap();

    let child = Command::new(std::env::current_exe().unwrap())
        .args(["holder_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(HOLD, format!("{},{}", net.host, net.host_ip))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("attached ") {
                let _ = tx.send(line);
            }
        }
    });
    let line = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the child attached");
    assert!(net.xdp_attached(), "{line}");
    // The child's program takes the frames for Linux's own address (the ARP requests for it,
    // first), and nobody answers them.
    assert!(!connects(&net, linux, Duration::from_millis(300)));

    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let took = within(Duration::from_secs(1), || !net.xdp_attached())
        .expect("the program is detached within a second of SIGKILL");
    eprintln!("detached {took:?} after the holder was reaped");
    net.flush_neighbors().unwrap();
    assert!(
        connects(&net, linux, Duration::from_secs(2)),
        "Linux answers on {} again",
        net.host_ip
    );
}

/// (c): a second attachment, in the same mode or the other, is refused with a clear error;
/// so are a missing interface and a zero-copy demand veth cannot meet.
#[test]
fn a_second_attach_is_refused() {
    let net = pair(1);
    let first = open(&net);

    let err = Port::open(&net.host, &config(AttachMode::Native))
        .err()
        .expect("a second native attach is refused");
    let text = err.to_string();
    assert!(
        matches!(&err, Error::AlreadyAttached { .. }),
        "{err:?}: {text}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::EBUSY), "{text}");
    assert!(text.contains(&net.host) && text.contains("EBUSY"), "{text}");

    let err = Port::open(&net.host, &config(AttachMode::Generic))
        .err()
        .expect("a generic attach over a native one is refused");
    assert!(
        matches!(&err, Error::AlreadyAttached { .. }),
        "{err:?}: {err}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST), "{err}");

    // The first attachment is untouched.
    assert!(net.xdp_attached());
    assert_eq!(first.ids().1, prog_id_shown(&net));
    drop(first);
    assert!(!net.xdp_attached());

    let missing = format!("{}x", net.host);
    match Port::open(&missing, &config(AttachMode::Auto)) {
        Err(Error::NoSuchInterface(name)) => assert_eq!(name, missing),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("attached to a missing interface"),
    }

    let mut zc = config(AttachMode::Native);
    zc.socket.zero_copy = ZeroCopy::Require;
    match Port::open(&net.host, &zc) {
        Ok(port) => assert_eq!(port.mode(), Mode::NativeZeroCopy),
        Err(e) => {
            eprintln!("zero-copy refused: {e}");
            assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
            // A failed open leaves nothing attached.
            assert!(!net.xdp_attached());
        }
    }
}

/// The program id `ip -d link show` prints after `prog/xdp id`.
fn prog_id_shown(net: &VethPair) -> u32 {
    let listing = net.host_details().unwrap();
    let after = listing.split("prog/xdp id ").nth(1).expect("prog/xdp id");
    after.split_whitespace().next().unwrap().parse().unwrap()
}

/// (e): frames for an address go to the socket while it is registered and to Linux again once
/// it is not.
#[test]
fn unregistered_addresses_go_back_to_linux() {
    let net = pair(1);
    let mut port = open(&net);
    // No ARP: the connection's first frame is its SYN.
    net.static_neighbor(net.host_ip).unwrap();
    let listener = TcpListener::bind((net.host_ip, 0)).unwrap();
    let linux = listener.local_addr().unwrap();
    port.register(net.host_ip).unwrap();

    let attempt = net.spawn_inside(move || {
        TcpStream::connect_timeout(&linux, Duration::from_millis(700)).is_ok()
    });
    let mut syns = 0;
    while !attempt.is_finished() {
        port.sockets_mut()[0].recv_burst(32, |frame| {
            assert_eq!(what(frame).0, Seen::TcpSynTo(linux));
            syns += 1;
            Verdict::Release
        });
    }
    assert!(!attempt.join().unwrap(), "Linux never saw the SYN");
    assert!(syns >= 1);

    assert!(port.unregister(net.host_ip).unwrap());
    assert!(!port.unregister(net.host_ip).unwrap(), "already gone");
    assert!(!port.is_registered(net.host_ip).unwrap());
    let before = port.sockets()[0].counters().rx_frames;
    assert!(connects(&net, linux, Duration::from_secs(2)));
    let socket = &mut port.sockets_mut()[0];
    socket.recv_burst(32, |_| Verdict::Release);
    assert_eq!(socket.counters().rx_frames, before);
}

/// One socket per queue: flows from many source ports spread over a 4-queue veth, and each
/// frame arrives on the socket of the queue it came in on.
#[test]
fn every_queue_has_its_socket() {
    const FLOWS: usize = 64;
    let net = pair(4);
    let mut port = open(&net);
    assert_eq!(port.sockets().len(), 4);
    let registered = net.spare[1];
    port.register(registered).unwrap();
    net.static_neighbor(registered).unwrap();
    let peer_ip = net.peer_ip;
    net.inside(|| {
        for i in 0..FLOWS {
            let sock = UdpSocket::bind((peer_ip, 0)).unwrap();
            sock.send_to(&[i as u8; 8], (registered, 9)).unwrap();
        }
    });
    let mut per_queue = [0usize; 4];
    within(Duration::from_secs(3), || {
        for (q, socket) in port.sockets_mut().iter_mut().enumerate() {
            per_queue[q] += socket.recv_burst(64, |frame| {
                assert_eq!(what(frame).0, Seen::UdpTo(registered));
                Verdict::Release
            });
        }
        per_queue.iter().sum::<usize>() == FLOWS
    })
    .unwrap_or_else(|| panic!("{per_queue:?} of {FLOWS} frames"));
    let used = per_queue.iter().filter(|&&n| n > 0).count();
    assert!(used >= 2, "all flows on one queue: {per_queue:?}");
}

/// Generic mode works too, and says so: a datagram is received and answered with a copy.
#[test]
fn generic_mode_steers_too() {
    let net = pair(1);
    let mut port = Port::open(&net.host, &config(AttachMode::Generic)).unwrap();
    assert_eq!(port.mode(), Mode::Generic);
    assert!(!port.sockets()[0].zero_copy());
    let registered = net.spare[2];
    port.register(registered).unwrap();
    net.static_neighbor(registered).unwrap();
    let peer_ip = net.peer_ip;
    let client = net.spawn_inside(move || {
        let sock = udp_without_checksum(peer_ip);
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        sock.send_to(b"generic", (registered, 9)).unwrap();
        let mut buf = [0u8; 16];
        sock.recv_from(&mut buf)
            .map(|(n, _)| buf[..n].to_vec())
            .ok()
    });
    let mut answered = 0;
    within(Duration::from_secs(2), || {
        let mut copy = Vec::new();
        let socket = &mut port.sockets_mut()[0];
        socket.recv_burst(8, |frame| {
            assert_eq!(what(frame).0, Seen::UdpTo(registered));
            swap_udp(frame);
            copy = frame.to_vec();
            Verdict::Release
        });
        if !copy.is_empty() {
            assert!(socket.send(&copy));
            answered += 1;
        }
        socket.reap();
        answered == 1
    })
    .expect("the datagram on the socket");
    assert_eq!(client.join().unwrap().as_deref(), Some(&b"generic"[..]));
    let listing = net.host_details().unwrap();
    assert!(listing.contains("xdpgeneric"), "{listing}");
}
