//! Incast: many Linux clients send one request each at the same moment to a Corral server
//! whose runtime is parked, through iokerneld's TAP device. Linux's own sockets absorb such a
//! burst without a retransmission; so must Corral's ingress. Every request is answered, no
//! client's kernel retransmits anything (`TCP_INFO`'s `tcpi_total_retrans`, summed), iokerneld
//! drops nothing on the way in, and the first packets after the burst (a new connection's SYN,
//! a request on an open connection) are not lost either.
//!
//! Nothing here asserts timing; waits are bounded only so that a broken build fails.

mod common;
mod tcp_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::serial;
use tcp_common::{ECHO, TcpDaemon, tcp_stats};

const FAMILY: u8 = 4;
const LIMIT: Duration = Duration::from_secs(60);

/// Segments the client's kernel has retransmitted on `s` over its lifetime.
fn total_retransmits(s: &TcpStream) -> u64 {
    tcp_common::kernel_retransmits(s.as_raw_fd())
}

/// Raises the open-file limit to its hard limit: a thousand client sockets do not fit in the
/// usual soft limit of 1024 together with everything else the test holds open.
fn raise_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is valid for writes.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(got, 0);
    // Root may raise the hard limit too, where it is low.
    limit.rlim_max = limit.rlim_max.max(8192);
    limit.rlim_cur = limit.rlim_max;
    // SAFETY: `limit` is a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

/// The shortest retransmission timeout of both ends in the test.
const RTO_MIN: Duration = Duration::from_secs(3);

/// Sets the route to the TAP device's subnet to [`RTO_MIN`]: Linux's sockets opened to it then
/// neither time out nor send a tail loss probe sooner.
fn slow_retransmissions_to(daemon: &TcpDaemon) {
    let [a, b, c] = daemon.subnet;
    let subnet = format!("{a}.{b}.{c}.0/24");
    let out = std::process::Command::new("ip")
        .args(["route", "replace", &subnet, "dev", &daemon.tap])
        .args(["src", &daemon.host().to_string()])
        .args(["rto_min", &format!("{}ms", RTO_MIN.as_millis())])
        .output()
        .expect("run ip route");
    assert!(
        out.status.success(),
        "ip route replace {subnet}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// iokerneld's packet statistics for the runtime called `name`: its counters, drops by cause
/// and backlog.
fn ingress(daemon: &TcpDaemon, name: &str) -> serde_json::Value {
    let stats = daemon.stats();
    let rt = stats["runtimes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| panic!("no runtime {name} in {stats:#}"));
    rt["net"].clone()
}

fn rx_dropped(net: &serde_json::Value) -> u64 {
    ["rx_no_buffer", "rx_ring_full", "rx_backlog_full"]
        .iter()
        .map(|k| {
            net["drops"][k]
                .as_u64()
                .expect("every drop cause is counted")
        })
        .sum()
}

/// Waits until the runtime called `name` holds no core.
fn wait_parked(daemon: &TcpDaemon, name: &str) {
    daemon.wait_for(&format!("{name} to park"), |s| {
        s["runtimes"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["name"] == name && r["cores_held"].as_u64() == Some(0))
        })
    });
}

#[test]
fn a_thousand_requests_at_once_to_a_parked_server_are_answered_with_no_retransmission() {
    const CONNECTIONS: usize = 1000;
    const NAME: &str = "incast";
    let _serial = serial();
    raise_file_limit();
    let mut daemon = TcpDaemon::start(FAMILY, 1, &[]);
    // Retransmission timers far longer than any wait a loaded machine can cause, on both
    // sides: then a retransmission means a segment was lost, not that an answer was slow
    // (one request in flight gets Linux's tail loss probe after about 200 ms otherwise).
    let mut tcp = tcp_common::test_tcp_settings();
    tcp.tcp.rto_min = RTO_MIN.as_nanos() as u64;
    tcp.tcp.rto_initial = tcp.tcp.rto_initial.max(tcp.tcp.rto_min);
    let server = tcp_common::start_corral_server_with(&daemon, NAME, daemon.ip(2), 0, tcp);
    slow_retransmissions_to(&daemon);
    let echo = server.addr(ECHO);
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|i| {
            let s = TcpStream::connect_timeout(&echo.into(), Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"));
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(LIMIT)).unwrap();
            s
        })
        .collect();
    common::wait_until("every connection accepted", LIMIT, || {
        server.served.accepted() >= CONNECTIONS as u64
    });
    // The handshakes' own retransmissions (if any) are not the burst's.
    let before: u64 = streams.iter().map(total_retransmits).sum();
    let drops_before = rx_dropped(&ingress(&daemon, NAME));
    let server_before = tcp_common::retransmissions(&tcp_stats(&server));
    let tap_dropped_before = daemon.tap_counter("tx_dropped");
    wait_parked(&daemon, NAME);

    // The burst: one small request on every connection, as fast as the kernel takes them.
    for (i, s) in streams.iter_mut().enumerate() {
        s.write_all(&(i as u64).to_le_bytes()).unwrap();
    }
    // The first packet after the burst: a new connection's SYN.
    let mut late = TcpStream::connect_timeout(&echo.into(), Duration::from_secs(30))
        .expect("a connection opened right after the burst");
    late.set_read_timeout(Some(LIMIT)).unwrap();
    for (i, s) in streams.iter_mut().enumerate() {
        let mut back = [0u8; 8];
        s.read_exact(&mut back)
            .unwrap_or_else(|e| panic!("connection {i}'s answer: {e}"));
        assert_eq!(u64::from_le_bytes(back), i as u64);
    }
    late.write_all(b"after the burst").unwrap();
    let mut back = [0u8; 15];
    late.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"after the burst");

    let net = ingress(&daemon, NAME);
    let after: u64 = streams.iter().map(total_retransmits).sum();
    assert_eq!(
        after - before,
        0,
        "the clients retransmitted {} segments of the burst; iokerneld's counters: {net:#}",
        after - before
    );
    assert_eq!(
        total_retransmits(&late),
        0,
        "the connection opened after the burst needed a retransmission; iokerneld's counters: {net:#}"
    );
    assert_eq!(
        rx_dropped(&net) - drops_before,
        0,
        "iokerneld dropped frames of the burst: {net:#}"
    );
    assert_eq!(
        daemon.tap_counter("tx_dropped") - tap_dropped_before,
        0,
        "the TAP device's queue overflowed: iokerneld did not read the burst in time"
    );
    assert_eq!(
        tcp_common::retransmissions(&tcp_stats(&server)) - server_before,
        0,
        "the server retransmitted"
    );
    drop(streams);
    drop(late);
    daemon.assert_alive();
}
