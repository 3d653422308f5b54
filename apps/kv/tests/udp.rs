//! UDP with memcached's 8-byte frame header: request id echoed, replies split into numbered
//! datagrams of at most 1400 bytes, multi-datagram requests dropped.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::start_kv;
use corral_testserver::free_port;

fn frame(id: u16, seq: u16, total: u16, body: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for v in [id, seq, total, 0] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    d.extend_from_slice(body);
    d
}

/// Sends one request and reassembles its reply from however many datagrams it takes.
fn ask(sock: &UdpSocket, port: u16, id: u16, body: &[u8]) -> Vec<u8> {
    sock.send_to(&frame(id, 0, 1, body), ("127.0.0.1", port))
        .unwrap();
    let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let n = sock.recv(&mut buf).expect("reply datagram");
        assert!(n <= 1400, "datagram of {n} bytes");
        let d = &buf[..n];
        assert_eq!(u16::from_be_bytes([d[0], d[1]]), id);
        let seq = u16::from_be_bytes([d[2], d[3]]) as usize;
        let total = u16::from_be_bytes([d[4], d[5]]) as usize;
        assert_eq!(&d[6..8], &[0, 0]);
        parts.resize(total, None);
        parts[seq] = Some(d[8..].to_vec());
        if parts.iter().all(Option::is_some) {
            return parts.into_iter().flatten().flatten().collect();
        }
    }
}

#[test]
fn udp_requests_are_framed_like_memcached() {
    let udp_port = free_port();
    let kv = start_kv(&["-U", &udp_port.to_string()]);
    let _ = kv.port;
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();

    assert_eq!(
        ask(&sock, udp_port, 7, b"set k 5 0 3\r\nabc\r\n"),
        b"STORED\r\n"
    );
    assert_eq!(
        ask(&sock, udp_port, 8, b"get k\r\n"),
        b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    );

    // A 10 KB value comes back in eight datagrams, reassembled in sequence order.
    let value: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut set = b"set big 0 0 10000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(ask(&sock, udp_port, 9, &set), b"STORED\r\n");
    let mut want = b"VALUE big 0 10000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(ask(&sock, udp_port, 10, b"get big\r\n"), want);

    // A request that claims to span two datagrams is dropped; the next one is answered.
    sock.send_to(&frame(11, 0, 2, b"get k\r\n"), ("127.0.0.1", udp_port))
        .unwrap();
    assert_eq!(ask(&sock, udp_port, 12, b"mn\r\n"), b"MN\r\n");
}
