//! Corral's TCP against the Linux kernel's, over iokerneld's TAP device: `socat`, `nc`
//! (Debian's netcat-openbsd) and Python sockets move data both ways, checked with SHA-256 on
//! both sides; a thousand concurrent connections; half-close in each direction; and
//! `sockperf ping-pong --tcp` against the test peer's sockperf server.
//!
//! Each test starts its own iokerneld with its own TAP device and subnet, one at a time.
//! Nothing asserts timing; waits are bounded only so that a broken build fails.

mod common;
mod tcp_common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::serial;
use corral_app_tcppeer::{Service, hex, pattern};
use tcp_common::{
    ECHO, SEED, SINK, SOCKPERF, SOURCE, TcpDaemon, pattern_file, run_tool, sha256_hex, start_server,
};

/// Test binary number for `TcpDaemon::start`.
const FAMILY: u8 = 1;
const BYTES: u64 = 8 << 20;
const LIMIT: Duration = Duration::from_secs(120);

/// The sink's outcome for the connection that sent `sha`, found among the server's.
fn assert_sink_received(server: &tcp_common::Server, len: u64, sha: &str) {
    let outcomes = server.served.outcomes();
    assert!(
        outcomes.iter().any(|o| o.service == Service::Sink
            && o.received == len
            && hex(&o.sha256) == sha
            && o.error.is_none()),
        "no sink connection received {len} bytes with SHA-256 {sha}: {outcomes:#?}"
    );
}

#[test]
fn socat_moves_data_intact_both_ways() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 1, &[]);
    let server = start_server(&daemon, "socat", BYTES);
    let (_dir, input, sha) = pattern_file(BYTES, 5);
    // Linux -> server: the sink answers the SHA-256 of what it read after socat's FIN.
    let sink = server.addr(SINK).to_string();
    let out = run_tool(
        "socat",
        &["-t", "60", "STDIO", &format!("TCP:{sink}")],
        Some(&input),
        LIMIT,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha);
    // Server -> Linux: the source's bytes, then its FIN.
    let source = server.addr(SOURCE).to_string();
    let out = run_tool(
        "socat",
        &["-u", &format!("TCP:{source}"), "STDOUT"],
        None,
        LIMIT,
    );
    assert_eq!(out.stdout.len() as u64, BYTES);
    assert_eq!(sha256_hex(&out.stdout), hex(&pattern::sha256(BYTES, SEED)));
    server.wait_finished(2, LIMIT);
    assert_sink_received(&server, BYTES, &sha);
    daemon.assert_alive();
}

#[test]
fn nc_moves_data_intact_both_ways() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 2, &[]);
    let server = start_server(&daemon, "nc", BYTES);
    let (_dir, input, sha) = pattern_file(BYTES, 6);
    let ip = server.ip.to_string();
    // -N: shut down the sending side at the end of standard input.
    let out = run_tool(
        "nc",
        &["-N", "-w", "60", &ip, &SINK.to_string()],
        Some(&input),
        LIMIT,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), sha);
    let out = run_tool(
        "nc",
        &["-N", "-w", "60", &ip, &SOURCE.to_string()],
        None,
        LIMIT,
    );
    assert_eq!(out.stdout.len() as u64, BYTES);
    assert_eq!(sha256_hex(&out.stdout), hex(&pattern::sha256(BYTES, SEED)));
    server.wait_finished(2, LIMIT);
    assert_sink_received(&server, BYTES, &sha);
    daemon.assert_alive();
}

/// Python's socket module: a sender thread and a receiver at once through the echo service,
/// with small and large writes, then the sink.
const PYTHON: &str = r#"
import hashlib, os, socket, sys, threading
ip, echo, sink = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = bytes((i * 131 + (i >> 9)) & 0xff for i in range(4 << 20))
s = socket.create_connection((ip, echo), timeout=60)
def send():
    off, step = 0, 1
    while off < len(data):
        s.sendall(data[off:off + step])
        off += step
        step = step * 3 % 70001 + 1
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send)
t.start()
got = bytearray()
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
t.join()
s.close()
assert got == data, "echo differs: %d of %d bytes" % (len(got), len(data))
s = socket.create_connection((ip, sink), timeout=60)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
reply = b""
while True:
    chunk = s.recv(100)
    if not chunk:
        break
    reply += chunk
assert reply.decode().strip() == hashlib.sha256(data).hexdigest(), reply
print(hashlib.sha256(data).hexdigest())
"#;

#[test]
fn python_sockets_echo_and_sink() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 3, &[]);
    let server = start_server(&daemon, "python", 0);
    let ip = server.ip.to_string();
    let out = run_tool(
        "/usr/bin/python3",
        &["-c", PYTHON, &ip, &ECHO.to_string(), &SINK.to_string()],
        None,
        LIMIT,
    );
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_string();
    server.wait_finished(2, LIMIT);
    let outcomes = server.served.outcomes();
    let echo = outcomes
        .iter()
        .find(|o| o.service == Service::Echo)
        .expect("the echo connection");
    assert_eq!(echo.received, 4 << 20);
    assert_eq!(echo.sent, 4 << 20);
    assert_eq!(hex(&echo.sha256), sha);
    assert_sink_received(&server, 4 << 20, &sha);
    daemon.assert_alive();
}

#[test]
fn a_thousand_concurrent_connections_are_all_served_and_released() {
    const CONNECTIONS: usize = 1000;
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 4, &[]);
    let server = start_server(&daemon, "thousand", 0);
    let echo = server.addr(ECHO);
    // All open at once before any carries data.
    let mut streams: Vec<TcpStream> = (0..CONNECTIONS)
        .map(|i| {
            TcpStream::connect_timeout(&echo.into(), Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    common::wait_until("every connection accepted", LIMIT, || {
        server.served.accepted() >= CONNECTIONS as u64
    });
    assert_eq!(server.served.live(), CONNECTIONS as u64);
    for (i, s) in streams.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(&(i as u64).to_le_bytes()).unwrap();
    }
    for (i, s) in streams.iter_mut().enumerate() {
        let mut back = [0u8; 8];
        s.read_exact(&mut back)
            .unwrap_or_else(|e| panic!("connection {i}'s echo: {e}"));
        assert_eq!(u64::from_le_bytes(back), i as u64);
        s.shutdown(Shutdown::Write).unwrap();
    }
    for (i, s) in streams.iter_mut().enumerate() {
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)
            .unwrap_or_else(|e| panic!("connection {i}'s FIN: {e}"));
        assert!(rest.is_empty());
    }
    drop(streams);
    server.wait_finished(CONNECTIONS as u64, LIMIT);
    assert_eq!(server.served.live(), 0);
    let outcomes = server.served.outcomes();
    assert_eq!(outcomes.len(), CONNECTIONS);
    assert!(
        outcomes
            .iter()
            .all(|o| o.error.is_none() && o.received == 8),
        "{:?}",
        outcomes
            .iter()
            .find(|o| o.error.is_some() || o.received != 8)
    );
    tcp_common::assert_connections_released(&server, LIMIT);
    daemon.assert_alive();
}

#[test]
fn half_close_works_in_each_direction() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 5, &[]);
    let len = 1 << 20;
    let server = start_server(&daemon, "halfclose", len);
    // The client closes its side first; the server still answers after the FIN.
    let mut s = TcpStream::connect_timeout(&server.addr(SINK).into(), LIMIT).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert_eq!(reply.trim(), sha256_hex(&data));
    // The server closes its side first; the client still sends after the server's FIN.
    let mut s = TcpStream::connect_timeout(&server.addr(SOURCE).into(), LIMIT).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    assert_eq!(got.len() as u64, len);
    assert_eq!(sha256_hex(&got), hex(&pattern::sha256(len, SEED)));
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    server.wait_finished(2, LIMIT);
    let outcomes = server.served.outcomes();
    let source = outcomes
        .iter()
        .find(|o| matches!(o.service, Service::Source { .. }))
        .unwrap();
    assert_eq!(source.error, None);
    assert_eq!(source.sent, len);
    assert_eq!(source.received, data.len() as u64);
    assert_eq!(hex(&source.sha256), sha256_hex(&data));
    daemon.assert_alive();
}

/// `sockperf ping-pong --tcp` (64-byte messages for one second) against the test peer's
/// sockperf server: every message answered, none dropped, duplicated or out of order.
#[test]
fn sockperf_ping_pong_gets_every_reply() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 6, &[]);
    let server = start_server(&daemon, "sockperf", 0);
    let ip = server.ip.to_string();
    let out = run_tool(
        "sockperf",
        &[
            "ping-pong",
            "--tcp",
            "-i",
            &ip,
            "-p",
            &SOCKPERF.to_string(),
            "-t",
            "1",
            "-m",
            "64",
        ],
        None,
        LIMIT,
    );
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let counts = tcp_common::sockperf_counts(&text);
    assert!(counts.sent > 0 && counts.sent == counts.received, "{text}");
    assert!(
        text.contains(
            "# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0"
        ),
        "{text}"
    );
    server.wait_finished(1, LIMIT);
    let outcome = &server.served.outcomes()[0];
    assert_eq!(outcome.service, Service::Sockperf);
    // sockperf closes with replies still unread, which resets the connection (RFC 9293
    // §3.6.1, as Linux does): that is the only error allowed.
    assert!(
        matches!(
            outcome.error,
            None | Some(std::io::ErrorKind::ConnectionReset)
        ),
        "{outcome:?}"
    );
    assert!(outcome.received >= 64 * counts.received, "{outcome:?}");
    daemon.assert_alive();
}
