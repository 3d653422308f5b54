//! Bad input gets memcached's answer or a closed connection, memory stays bounded, and other
//! clients carry on: the checks, run against each backend by `bad_input.rs` (Linux sockets)
//! and `corral_tap_bad_input.rs` (Corral behind a TAP device).

use std::io::{Read, Write};
use std::net::Shutdown;
use std::thread;
use std::time::Duration;

use super::{KvServer, Running, read_to_close, roundtrip};

/// Sends `request`, half-closes, and returns what the server sent and whether it closed.
fn exchange(server: &impl KvServer, request: &[u8]) -> (Vec<u8>, bool) {
    let mut s = server.connect();
    s.write_all(request).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    read_to_close(&mut s)
}

/// Sends `request` and keeps the connection open; returns what came back before the server
/// closed it, or `None` if it stayed open (answered by a trailing `mn`).
fn closes(server: &impl KvServer, request: &[u8]) -> Option<Vec<u8>> {
    let mut s = server.connect();
    s.write_all(request).unwrap();
    let _ = s.write_all(b"\r\nmn\r\n");
    let (got, closed) = read_to_close_or_mn(&mut s);
    closed.then_some(got)
}

fn read_to_close_or_mn(s: &mut std::net::TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if got.ends_with(b"MN\r\n") {
            return (got, false);
        }
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Malformed and oversized requests get memcached's replies, byte for byte (`mc` is memcached).
pub fn malformed_and_oversized_requests_get_memcacheds_replies(kv: &impl KvServer, mc: &Running) {
    let long_key = "k".repeat(251);
    let cases: Vec<Vec<u8>> = vec![
        b"bogus\r\n".to_vec(),
        b"set k 0 0 x\r\n".to_vec(),
        b"set k 0 0 -5\r\nabc\r\n".to_vec(),
        b"set k 0 0 3\r\nabcde\r\nget k\r\n".to_vec(),
        format!("get {long_key}\r\n").into_bytes(),
        format!("set {long_key} 0 0 1\r\nx\r\n").into_bytes(),
        format!("mg {long_key} v\r\n").into_bytes(),
        b"incr k notanumber\r\ndecr\r\ntouch k\r\n".to_vec(),
        // Over the 1 MB item limit: refused, and the data swallowed, not parsed as commands.
        {
            let mut r = b"set big 0 0 2000000\r\n".to_vec();
            r.extend(std::iter::repeat_n(b'g', 2_000_000));
            r.extend_from_slice(b"\r\nget big\r\n");
            r
        },
        {
            let mut r = b"ms big 2000000 T0\r\n".to_vec();
            r.extend(std::iter::repeat_n(b'e', 2_000_000));
            r.extend_from_slice(b"\r\nmg big v\r\n");
            r
        },
    ];
    for req in cases {
        let mut a = kv.connect();
        let mut b = mc.connect();
        let got = roundtrip(&mut a, &req);
        let want = roundtrip(&mut b, &req);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "request {:?}",
            String::from_utf8_lossy(&req[..req.len().min(80)])
        );
    }
}

/// Lines without an end, HTTP and `quit` close the connection as memcached does (`mc`).
pub fn unterminated_lines_and_http_close_the_connection_like_memcached(
    kv: &impl KvServer,
    mc: &Running,
) {
    // More than 2048 bytes without a newline, and nothing after: closed.
    let no_newline = vec![b'x'; 3000];
    let servers: [&dyn KvServer; 2] = [kv, mc];
    for server in servers {
        let mut s = server.connect();
        s.write_all(&no_newline).unwrap();
        let (got, closed) = read_to_close(&mut s);
        assert!(
            closed && got.is_empty(),
            "{}: closed {closed}, got {got:?}",
            server.label()
        );
    }
    let http = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
    let mut quit = b"set a 0 0 1\r\nb\r\nquit\r\n".to_vec();
    quit.extend_from_slice(b"get a\r\n");
    for req in [http, quit] {
        let got = closes(kv, &req);
        let want = closes(mc, &req);
        assert!(
            want.is_some(),
            "memcached kept the connection open for {:?}",
            String::from_utf8_lossy(&req[..20])
        );
        assert_eq!(
            got,
            want,
            "request {:?}",
            String::from_utf8_lossy(&req[..20])
        );
    }
    // A get line may run long (many keys), but not without bound.
    let mut huge_get = b"get ".to_vec();
    huge_get.extend(std::iter::repeat_n(b'k', 2 << 20));
    let (_, closed) = exchange(kv, &huge_get);
    assert!(closed);
}

/// A value over `-I` is refused and its bytes swallowed without being held.
pub fn oversized_values_are_swallowed_in_bounded_memory(kv: &impl KvServer) {
    let mut c = kv.connect();
    let before = kv.rss_bytes();
    let declared: usize = 256 << 20;
    c.write_all(format!("set huge 0 0 {declared}\r\n").as_bytes())
        .unwrap();
    let chunk = vec![b'z'; 1 << 20];
    for _ in 0..declared >> 20 {
        c.write_all(&chunk).unwrap();
    }
    let reply = roundtrip(&mut c, b"\r\nget huge\r\n");
    assert_eq!(reply, b"SERVER_ERROR object too large for cache\r\nEND\r\n");
    let grown = kv.rss_bytes().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "swallowing 256 MB grew RSS by {grown} bytes"
    );
}

/// A client that never reads its replies stops being read from, in bounded memory, while
/// other clients are served.
pub fn a_client_that_never_reads_stalls_only_itself(kv: &impl KvServer) {
    let mut setup = kv.connect();
    let value = vec![b'b'; 512 << 10];
    let mut req = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    assert_eq!(roundtrip(&mut setup, &req), b"STORED\r\n");
    let before = kv.rss_bytes();

    // The greedy client asks for 512 KB values without ever reading, until its own writes block.
    let greedy = kv.connect();
    greedy
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let writer = {
        let mut greedy = greedy.try_clone().unwrap();
        thread::spawn(move || {
            let gets = b"get big\r\n".repeat(1000);
            let mut sent = 0usize;
            while greedy.write_all(&gets).is_ok() {
                sent += gets.len();
                if sent > 64 << 20 {
                    break;
                }
            }
            sent
        })
    };
    let sent = writer.join().unwrap();
    // 64 MB of requests would ask for ~3.7 TB of replies; the server stopped reading instead.
    assert!(
        sent < 64 << 20,
        "the server kept reading from a client that never reads"
    );

    // Another client is unaffected.
    let mut other = kv.connect();
    assert_eq!(
        roundtrip(&mut other, b"set x 0 0 1\r\ny\r\nget x\r\n"),
        b"STORED\r\nVALUE x 0 1\r\ny\r\nEND\r\n"
    );
    let grown = kv.rss_bytes().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "a stalled client grew RSS by {grown} bytes"
    );
    drop(greedy);
}
