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
