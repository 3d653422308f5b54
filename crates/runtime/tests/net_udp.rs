//! UDP sockets on a runtime without iokerneld: only the runtime's own address is reachable
//! (over its internal loopback), which exercises the socket API, blocking and the spawner.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use corral::net::{NetConfig, UdpSocket, UdpSpawner};
use corral::{Config, Runtime};

const IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

fn runtime() -> Runtime {
    Runtime::new(Config::default().kthreads(2).net(NetConfig::new(IP, 24))).unwrap()
}

#[test]
fn send_and_receive_over_loopback() {
    let rt = runtime();
    rt.block_on(|| {
        let server = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9000)).unwrap();
        let client = UdpSocket::bind(SocketAddrV4::new(IP, 0)).unwrap();
        let client_addr = client.local_addr().unwrap();
        assert!(client_addr.port() >= 49152);
        client
            .send_to(b"hello", SocketAddrV4::new(IP, 9000))
            .unwrap();
        let mut buf = [0u8; 64];
        let (n, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!((&buf[..n], from), (&b"hello"[..], client_addr));

        // Connected sockets.
        client.connect(SocketAddrV4::new(IP, 9000)).unwrap();
        assert_eq!(client.peer_addr().unwrap(), SocketAddrV4::new(IP, 9000));
        client.send(b"again").unwrap();
        let (n, _) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"again");
        server.send_to(b"back", client_addr).unwrap();
        assert_eq!(client.recv(&mut buf).unwrap(), 4);

        // Errors in the std style.
        let e = UdpSocket::bind(SocketAddrV4::new(IP, 9000)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
        let e = server.send(b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EDESTADDRREQ));
        assert_eq!(
            server.peer_addr().unwrap_err().kind(),
            std::io::ErrorKind::NotConnected
        );
        let big = vec![0u8; corral::net::MAX_UDP_PAYLOAD + 1];
        assert_eq!(
            client.send(&big).unwrap_err().raw_os_error(),
            Some(libc::EMSGSIZE)
        );
    });
    let stats = rt.net_stats().unwrap();
    assert_eq!(stats.loopback_packets, 3);
    assert_eq!(stats.udp_rx_datagrams, 3);
    assert_eq!(stats.total_drops(), 0);
    assert!(stats.sockets.is_empty(), "sockets closed on drop");
}

#[test]
fn receiver_blocks_its_uthread_and_times_out() {
    let rt = runtime();
    rt.block_on(|| {
        let server = UdpSocket::bind(SocketAddrV4::new(IP, 9100)).unwrap();
        server
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut buf = [0u8; 8];
        let e = server.recv_from(&mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        server.set_read_timeout(None).unwrap();

        let sender = corral::spawn(|| {
            corral::sleep(Duration::from_millis(10));
            let c = UdpSocket::bind(SocketAddrV4::new(IP, 0)).unwrap();
            c.send_to(b"wake", SocketAddrV4::new(IP, 9100)).unwrap();
        });
        let (n, _) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"wake");
        sender.join().unwrap();
    });
}

#[test]
fn spawner_runs_a_uthread_per_datagram() {
    let rt = runtime();
    rt.block_on(|| {
        let spawner = UdpSpawner::bind(SocketAddrV4::new(IP, 7), |payload, _from, reply| {
            let upper: Vec<u8> = payload.to_ascii_uppercase();
            reply.send(&upper).unwrap();
        })
        .unwrap();
        let client = UdpSocket::bind(SocketAddrV4::new(IP, 0)).unwrap();
        client.connect(spawner.local_addr().unwrap()).unwrap();
        for i in 0..20 {
            client.send(format!("msg{i}").as_bytes()).unwrap();
        }
        let mut got: Vec<String> = (0..20)
            .map(|_| {
                let mut buf = [0u8; 16];
                let n = client.recv(&mut buf).unwrap();
                String::from_utf8(buf[..n].to_vec()).unwrap()
            })
            .collect();
        got.sort();
        let mut want: Vec<String> = (0..20).map(|i| format!("MSG{i}")).collect();
        want.sort();
        assert_eq!(got, want);
    });
}

#[test]
fn a_spawner_runs_a_bounded_number_of_handlers_and_drops_and_counts_the_rest() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use corral::net::SPAWNER_IN_FLIGHT_CAPACITY;

    /// Lets the handlers finish however the test ends, so that the runtime can stop.
    struct Release(Arc<AtomicBool>);
    impl Drop for Release {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    const EXTRA: usize = 100;
    let released = Arc::new(AtomicBool::new(false));
    let rt = runtime();
    let release = Release(released.clone());
    let started = Arc::new(AtomicUsize::new(0));
    let (gate, count) = (released.clone(), started.clone());
    let (spawner, client) = rt.block_on(move || {
        let spawner = UdpSpawner::bind(SocketAddrV4::new(IP, 7070), move |payload, _, reply| {
            count.fetch_add(1, Ordering::Relaxed);
            while !gate.load(Ordering::Acquire) {
                corral::yield_now();
            }
            reply.send(&payload).unwrap();
        })
        .unwrap();
        let client = UdpSocket::bind(SocketAddrV4::new(IP, 0)).unwrap();
        client.connect(spawner.local_addr().unwrap()).unwrap();
        // More datagrams than handlers may run, while none can finish.
        for i in 0..SPAWNER_IN_FLIGHT_CAPACITY + EXTRA {
            client.send(&(i as u32).to_be_bytes()).unwrap();
        }
        (spawner, client)
    });
    let port = |rt: &Runtime| {
        rt.net_stats()
            .unwrap()
            .sockets
            .into_iter()
            .find(|s| s.local.port() == 7070)
            .unwrap()
    };
    let held = port(&rt);
    assert_eq!(held.rx_dropped, EXTRA as u64, "{held:?}");
    assert_eq!(held.rx_datagrams, SPAWNER_IN_FLIGHT_CAPACITY as u64);
    assert_eq!(held.queued, SPAWNER_IN_FLIGHT_CAPACITY as u64);
    // Each admitted handler starts (the kthreads run them in turn), and no other.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while started.load(Ordering::Relaxed) < SPAWNER_IN_FLIGHT_CAPACITY {
        assert!(
            std::time::Instant::now() < deadline,
            "handlers did not start"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(started.load(Ordering::Relaxed), SPAWNER_IN_FLIGHT_CAPACITY);

    // Every admitted handler answers once let go, and then the port admits again.
    drop(release);
    let (spawner, client) = rt.block_on(move || {
        let mut buf = [0u8; 8];
        for _ in 0..SPAWNER_IN_FLIGHT_CAPACITY {
            assert_eq!(client.recv(&mut buf).unwrap(), 4);
        }
        client.send(b"again").unwrap();
        assert_eq!(client.recv(&mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"again");
        (spawner, client)
    });
    let after = port(&rt);
    assert_eq!(after.rx_dropped, EXTRA as u64, "{after:?}");
    assert_eq!(after.queued, 0, "{after:?}");
    assert_eq!(
        started.load(Ordering::Relaxed),
        SPAWNER_IN_FLIGHT_CAPACITY + 1
    );
    rt.block_on(move || drop((spawner, client)));
}

#[test]
fn other_hosts_need_a_device() {
    let rt = runtime();
    rt.block_on(|| {
        let s = UdpSocket::bind(SocketAddrV4::new(IP, 0)).unwrap();
        // Queued for ARP, whose request has nowhere to go.
        s.send_to(b"x", SocketAddrV4::new(Ipv4Addr::new(10, 9, 0, 3), 1))
            .unwrap();
        let e = s
            .send_to(b"x", SocketAddrV4::new(Ipv4Addr::new(8, 8, 8, 8), 1))
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH));
    });
    let stats = rt.net_stats().unwrap();
    assert_eq!(stats.drop_count("no_link"), 1);
    assert_eq!(stats.arp.entries, 1);
}

#[test]
fn sockets_need_a_configured_network() {
    let e = UdpSocket::bind(SocketAddrV4::new(IP, 1)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENETDOWN));
    let rt = Runtime::new(Config::default().kthreads(1)).unwrap();
    assert!(rt.net_stats().is_none());
    let e = rt.block_on(|| UdpSocket::bind(SocketAddrV4::new(IP, 1)).unwrap_err());
    assert_eq!(e.raw_os_error(), Some(libc::ENETDOWN));

    let bad = Config::default().net(NetConfig::new(Ipv4Addr::new(224, 0, 0, 1), 24));
    let e = Runtime::new(bad).err().unwrap();
    assert!(e.to_string().contains("net.ip = 224.0.0.1"), "{e}");
}
