//! TCP on a runtime without iokerneld: client and server in one runtime, over its internal
//! loopback. Exercises the API, blocking, the connection table and the engine's paths end to
//! end.
// These exercise the full runtime, which is not built under loom (see tests/loom.rs).
#![cfg(not(loom))]

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4};
use std::time::Duration;

use corral::net::{NetConfig, TcpListener, TcpSettings, TcpState, TcpStream};
use corral::{Config, Runtime};

const IP: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 2);

fn runtime_with(tcp: TcpSettings) -> Runtime {
    Runtime::new(
        Config::default()
            .kthreads(2)
            .net(NetConfig::new(IP, 24).tcp(tcp)),
    )
    .unwrap()
}

fn runtime() -> Runtime {
    runtime_with(TcpSettings::default())
}

/// Short TIME-WAIT so tests that wait for the table to empty do not wait a minute.
fn quick_settings() -> TcpSettings {
    let mut s = TcpSettings::default();
    s.tcp.time_wait = 20_000_000;
    s
}

/// FNV-1a, 64 bits.
fn fnv(hash: &mut u64, data: &[u8]) {
    for &b in data {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x100_0000_01b3);
    }
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// Deterministic test bytes.
fn pattern(offset: usize, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let x = (offset + i) as u64;
        *b = (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8;
    }
}

fn wait_for_empty_table(rt: &Runtime) {
    for _ in 0..500 {
        if rt.net_stats().unwrap().tcp.connections == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = rt.net_stats().unwrap().tcp;
    panic!(
        "connections left: {} ({:?})",
        stats.connections,
        stats.live.iter().take(5).collect::<Vec<_>>()
    );
}

#[test]
fn connect_accept_and_echo() {
    let rt = runtime_with(quick_settings());
    rt.block_on(|| {
        let listener = TcpListener::bind("0.0.0.0:7000").unwrap();
        assert_eq!(listener.local_addr().unwrap().port(), 7000);
        let server = corral::spawn(move || {
            let (mut s, peer) = listener.accept().unwrap();
            assert_eq!(s.peer_addr().unwrap(), peer);
            let mut buf = [0u8; 256];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
        });
        let mut c = TcpStream::connect((IP, 7000)).unwrap();
        assert_eq!(c.peer_addr().unwrap(), SocketAddrV4::new(IP, 7000));
        assert!(c.local_addr().unwrap().port() >= 49152);
        c.set_nodelay(true).unwrap();
        assert!(c.nodelay().unwrap());
        for i in 0..100u32 {
            let msg = format!("request {i}");
            c.write_all(msg.as_bytes()).unwrap();
            let mut back = vec![0u8; msg.len()];
            c.read_exact(&mut back).unwrap();
            assert_eq!(back, msg.as_bytes());
        }
        c.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        server.join().unwrap();
    });
    let stats = rt.net_stats().unwrap();
    assert_eq!(stats.tcp.counters.active_opens, 1);
    assert_eq!(stats.tcp.counters.passive_opens, 1);
    assert_eq!(stats.tcp.counters.conns.rto_retransmits, 0);
    assert_eq!(stats.drop_count("no_tcp"), 0);
    wait_for_empty_table(&rt);
}

#[test]
fn large_transfer_arrives_intact() {
    const TOTAL: usize = 16 << 20;
    let rt = runtime_with(quick_settings());
    rt.block_on(|| {
        let listener = TcpListener::bind((IP, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let receiver = corral::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut got = 0;
            let mut hash = FNV_START;
            let mut buf = vec![0u8; 64 * 1024];
            let mut want = vec![0u8; 64 * 1024];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                pattern(got, &mut want[..n]);
                assert!(buf[..n] == want[..n], "corrupt bytes at {got}");
                fnv(&mut hash, &buf[..n]);
                got += n;
            }
            (got, hash)
        });
        let mut c = TcpStream::connect((IP, port)).unwrap();
        let mut sent = 0;
        let mut hash = FNV_START;
        let mut chunk = vec![0u8; 100_000];
        while sent < TOTAL {
            let n = chunk.len().min(TOTAL - sent);
            pattern(sent, &mut chunk[..n]);
            fnv(&mut hash, &chunk[..n]);
            c.write_all(&chunk[..n]).unwrap();
            sent += n;
        }
        drop(c);
        let (got, their_hash) = receiver.join().unwrap();
        assert_eq!(got, TOTAL);
        assert_eq!(their_hash, hash);
    });
    let tcp = rt.net_stats().unwrap().tcp;
    assert!(tcp.counters.conns.bytes_out >= TOTAL as u64);
    wait_for_empty_table(&rt);
}

#[test]
fn half_close_keeps_the_other_direction_open() {
    let rt = runtime();
    rt.block_on(|| {
        let listener = TcpListener::bind((IP, 7001)).unwrap();
        let server = corral::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap();
            // The client's FIN arrived; this direction still works.
            s.write_all(&all).unwrap();
            s.write_all(b" and done").unwrap();
        });
        let mut c = TcpStream::connect((IP, 7001)).unwrap();
        c.write_all(b"the request").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        assert_eq!(
            c.write(b"more").unwrap_err().kind(),
            ErrorKind::BrokenPipe,
            "writing after shutdown(Write)"
        );
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert_eq!(back, "the request and done");
        server.join().unwrap();
    });
}

#[test]
fn connecting_to_a_closed_port_is_refused() {
    let rt = runtime();
    rt.block_on(|| {
        let e = TcpStream::connect((IP, 7999)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
        // A listener that went away refuses too.
        let l = TcpListener::bind((IP, 7998)).unwrap();
        drop(l);
        let e = TcpStream::connect((IP, 7998)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    });
    let tcp = rt.net_stats().unwrap().tcp;
    assert_eq!(tcp.counters.failed_opens, 2);
    assert!(tcp.counters.resets_sent >= 2);
    assert!(tcp.drop_count("no_connection") >= 2);
    assert_eq!(tcp.connections, 0);
}

#[test]
fn connect_times_out_when_nobody_answers() {
    // A full accept queue makes the listener drop SYNs (as Linux does), so nobody answers.
    let rt = runtime_with(TcpSettings {
        syn_cookies: false,
        ..TcpSettings::default()
    });
    rt.block_on(|| {
        let listener = TcpListener::bind_with_backlog((IP, 7002), 1).unwrap();
        let first = TcpStream::connect((IP, 7002)).unwrap();
        // Wait until the first connection sits in the accept queue.
        let addr = SocketAddr::from((IP, 7002));
        let e = TcpStream::connect_timeout(&addr, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        let e = TcpStream::connect_timeout(&addr, Duration::ZERO).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        drop(first);
        drop(listener);
    });
    let tcp = rt.net_stats().unwrap().tcp;
    assert!(tcp.drop_count("accept_queue_full") >= 1);
}

#[test]
fn read_and_write_time_out_with_would_block() {
    let mut s = quick_settings();
    s.tcp.send_buffer = 8 * 1024;
    s.tcp.recv_buffer = 8 * 1024;
    let rt = runtime_with(s);
    rt.block_on(|| {
        let listener = TcpListener::bind((IP, 7003)).unwrap();
        let c = TcpStream::connect((IP, 7003)).unwrap();
        let (server, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        assert_eq!(c.read_timeout().unwrap(), Some(Duration::from_millis(20)));
        let mut buf = [0u8; 16];
        let e = (&c).read(&mut buf).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);

        // Nobody reads on the server: the windows and the send buffer fill up.
        c.set_write_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let chunk = [7u8; 4096];
        let mut written = 0;
        let e = loop {
            match (&c).write(&chunk) {
                Ok(n) => written += n,
                Err(e) => break e,
            }
            assert!(written < 1 << 20, "the buffers are bounded");
        };
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        assert!(written >= 8 * 1024);
        assert!(c.set_write_timeout(Some(Duration::ZERO)).is_err());
        c.set_write_timeout(None).unwrap();
        assert_eq!(c.write_timeout().unwrap(), None);

        // Reading on the server opens the window again and the writer goes on.
        let reader = corral::spawn(move || {
            let mut total = 0;
            let mut buf = [0u8; 4096];
            let mut s = server;
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    return total;
                }
                total += n;
            }
        });
        (&c).write_all(&chunk).unwrap();
        drop(c);
        assert_eq!(reader.join().unwrap(), written + chunk.len());
    });
    wait_for_empty_table(&rt);
}

#[test]
fn write_vectored_sends_every_slice_in_order() {
    let rt = runtime();
    rt.block_on(|| {
        let listener = TcpListener::bind((IP, 7004)).unwrap();
        let mut c = TcpStream::connect((IP, 7004)).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        let parts: [&[u8]; 4] = [b"scatter", b"-", b"gather", &[b'!'; 3000]];
        let slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let n = c.write_vectored(&slices).unwrap();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert_eq!(
            n, total,
            "one call takes every slice while the buffer has room"
        );
        c.flush().unwrap();
        let mut got = vec![0u8; total];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, parts.concat());
    });
}

#[test]
fn many_concurrent_connections_are_served_and_freed() {
    const CONNS: usize = 1000;
    let rt = Runtime::new(
        Config::default()
            .kthreads(4)
            .net(NetConfig::new(IP, 24).tcp(quick_settings())),
    )
    .unwrap();
    rt.block_on(|| {
        let listener = TcpListener::bind((IP, 7005)).unwrap();
        let server = corral::spawn(move || {
            let mut handlers = Vec::new();
            for _ in 0..CONNS {
                let (mut s, _) = listener.accept().unwrap();
                handlers.push(corral::spawn(move || {
                    let mut buf = [0u8; 8];
                    s.read_exact(&mut buf).unwrap();
                    let v = u64::from_le_bytes(buf) * 2;
                    s.write_all(&v.to_le_bytes()).unwrap();
                }));
            }
            for h in handlers {
                h.join().unwrap();
            }
        });
        let clients: Vec<_> = (0..CONNS as u64)
            .map(|i| {
                corral::spawn(move || {
                    let mut c = TcpStream::connect((IP, 7005)).unwrap();
                    c.write_all(&i.to_le_bytes()).unwrap();
                    let mut buf = [0u8; 8];
                    c.read_exact(&mut buf).unwrap();
                    assert_eq!(u64::from_le_bytes(buf), i * 2);
                    let mut rest = Vec::new();
                    c.read_to_end(&mut rest).unwrap();
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        server.join().unwrap();
    });
    let tcp = rt.net_stats().unwrap().tcp;
    assert_eq!(tcp.counters.active_opens, CONNS as u64);
    assert!(tcp.counters.table_peak >= 2);
    wait_for_empty_table(&rt);
    let tcp = rt.net_stats().unwrap().tcp;
    assert!(tcp.live.is_empty());
}

#[test]
fn a_new_syn_reuses_a_time_wait_connection() {
    // Default TIME-WAIT (60 s): the reuse cannot come from expiry.
    let rt = runtime();
    rt.block_on(|| {
        let listener = TcpListener::bind((IP, 7006)).unwrap();
        for round in 0..3u8 {
            if round > 0 {
                let live = corral::net::stats().unwrap().tcp.live;
                assert!(
                    live.iter().any(|i| i.local.port() == 7006
                        && i.remote.port() == 40_000
                        && i.state == TcpState::TimeWait),
                    "the server's side of the last round is in TIME-WAIT: {live:?}"
                );
            }
            let mut c = TcpStream::connect_from(40_000, (IP, 7006)).unwrap();
            let (mut s, _) = listener.accept().unwrap();
            c.write_all(&[round]).unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            assert_eq!(b[0], round);
            // The server closes first, so the server's side holds TIME-WAIT.
            drop(s);
            let mut rest = Vec::new();
            c.read_to_end(&mut rest).unwrap();
            drop(c);
            // Wait until the client's side is gone (LAST-ACK answered).
            for _ in 0..1000 {
                let live = corral::net::stats().unwrap().tcp.live;
                if live.iter().all(|i| i.local.port() != 40_000) {
                    break;
                }
                corral::sleep(Duration::from_millis(1));
            }
        }
    });
    let tcp = rt.net_stats().unwrap().tcp;
    assert_eq!(tcp.counters.active_opens, 3);
    assert_eq!(tcp.counters.failed_opens, 0);
}
