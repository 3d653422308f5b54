//! Unmodified memcached clients against corral-kv on Corral's runtime, through iokerneld and a
//! TAP device: libmemcached's conformance tester (`memccapable`, text protocol), its load
//! generator (`memcslap`), the pymemcache check, the differential streams against memcached
//! 1.6.18 on Linux sockets, and UDP with memcached's frame header. Each
//! test starts its own iokerneld and server (see `tap`), one at a time.

mod common;
mod tap;

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

use common::clients::{memccapable_passes, memcslap_without_errors, run};
use common::differential::{MEMCACHED_FLAGS, compare};
use common::start_memcached;
use tap::{TapKv, serial};

#[test]
fn memccapable_text_protocol_passes_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(1, &["-t", "1"]);
    memccapable_passes(
        |p| Command::new(p),
        &kv.ip.to_string(),
        kv.port,
        || kv.logs(),
    );
    kv.assert_alive();
}

#[test]
fn memcslap_load_has_no_errors_over_tap() {
    let _serial = serial();
    // Two kthreads on the one managed core: connections' uthreads are preempted and migrate
    // while they share the store's shards.
    let mut kv = TapKv::start(2, &["-t", "2"]);
    memcslap_without_errors(|p| Command::new(p), &kv.server(), 8, || kv.logs());
    kv.assert_alive();
}

#[test]
fn random_streams_match_memcached_over_tap() {
    let _serial = serial();
    for seed in 1..=4u8 {
        let mut kv = TapKv::start(20 + seed, &["-t", "1"]);
        let mc = start_memcached(MEMCACHED_FLAGS);
        compare(&kv, &mc, u64::from(seed), 3000);
        kv.assert_alive();
    }
}

#[test]
fn pymemcache_checks_pass_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(3, &["-t", "1"]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kv_check.py");
    // Debian's interpreter, where python3-pymemcache is installed.
    let (ok, text) = run(Command::new("/usr/bin/python3").args([
        script,
        &kv.port.to_string(),
        &kv.ip.to_string(),
    ]));
    assert!(
        ok && text.contains("all checks passed"),
        "kv_check.py:\n{text}\n{}",
        kv.logs()
    );
    kv.assert_alive();
}

fn frame(id: u16, seq: u16, total: u16, body: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for v in [id, seq, total, 0] {
        d.extend_from_slice(&v.to_be_bytes());
    }
    d.extend_from_slice(body);
    d
}

/// Sends one request and reassembles its reply from however many datagrams it takes.
fn ask(sock: &UdpSocket, kv: &TapKv, id: u16, body: &[u8]) -> Vec<u8> {
    sock.send_to(&frame(id, 0, 1, body), (kv.ip, kv.udp_port))
        .unwrap();
    let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        let n = sock
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("reply datagram to request {id}: {e}\n{}", kv.logs()));
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
fn udp_get_and_set_over_tap() {
    let _serial = serial();
    let mut kv = TapKv::start(4, &["-t", "1"]);
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();

    assert_eq!(ask(&sock, &kv, 7, b"set k 5 0 3\r\nabc\r\n"), b"STORED\r\n");
    assert_eq!(
        ask(&sock, &kv, 8, b"get k\r\n"),
        b"VALUE k 5 3\r\nabc\r\nEND\r\n"
    );

    // A 10 KB value, stored over TCP (a request that large would need IP fragments), comes
    // back over UDP in eight datagrams, reassembled in sequence order.
    let value: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut set = b"set big 0 0 10000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    let mut tcp = kv.connect();
    tcp.write_all(&set).unwrap();
    let mut stored = [0u8; 8];
    tcp.read_exact(&mut stored).unwrap();
    assert_eq!(&stored, b"STORED\r\n");
    let mut want = b"VALUE big 0 10000\r\n".to_vec();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(ask(&sock, &kv, 10, b"get big\r\n"), want);

    // What UDP stored, TCP reads, and the other way round.
    assert_eq!(
        ask(&sock, &kv, 11, b"set shared 0 0 4\r\nudp!\r\n"),
        b"STORED\r\n"
    );
    tcp.write_all(b"get shared\r\n").unwrap();
    let mut got = [0u8; 29];
    tcp.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"VALUE shared 0 4\r\nudp!\r\nEND\r\n");

    // A request that claims to span two datagrams is dropped; the next one is answered.
    sock.send_to(&frame(12, 0, 2, b"get k\r\n"), (kv.ip, kv.udp_port))
        .unwrap();
    assert_eq!(ask(&sock, &kv, 13, b"mn\r\n"), b"MN\r\n");
    kv.assert_alive();
}
