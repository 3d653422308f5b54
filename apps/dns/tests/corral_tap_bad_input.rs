//! Hostile input to corral-dns on Corral's runtime through iokerneld and a TAP device: random
//! and malformed datagrams, names of hundreds of labels, compression loops and long pointer
//! chains, and a flood far beyond what the server answers. The server must stay up, answer or
//! count every message, keep its memory bounded, and answer normally afterwards; every
//! datagram of the flood that never became a query must be counted as a drop by some layer.
//!
//! Nothing here asserts timing: the flood's rate is reported, not checked.

mod common;
mod tap;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::diff::{malformed, query};
use common::{Rng, UdpClient, dig_answers_over_udp_and_tcp};
use corral_dns_proto::message::query as plain_query;
use tap::{Counters, TapDns, serial};

const WWW: &[u8] = b"\x03www\x07example\x03com\x00";

/// A header of `id` with QDCOUNT 1 and the given ARCOUNT.
fn header(id: u16, arcount: u8) -> Vec<u8> {
    let mut m = vec![0u8; 12];
    m[..2].copy_from_slice(&id.to_be_bytes());
    m[5] = 1;
    m[11] = arcount;
    m
}

/// A question of `labels` one-byte labels (over 127 is past the 255-byte limit).
fn many_labels(id: u16, labels: usize) -> Vec<u8> {
    let mut m = header(id, 0);
    for _ in 0..labels {
        m.extend_from_slice(b"\x01a");
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    m
}

/// A good question, then an additional record whose owner is a compression pointer to itself.
fn additional_pointer_loop(id: u16) -> Vec<u8> {
    let mut m = header(id, 1);
    m.extend_from_slice(WWW);
    m.extend_from_slice(&[0, 1, 0, 1]);
    let at = m.len() as u16;
    m.extend_from_slice(&(0xc000 | at).to_be_bytes());
    m.extend_from_slice(&[0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
    m
}

/// Two names in the additional section pointing at each other (the second pointer points
/// forward, so a reader that follows pointers both ways loops).
fn additional_pointer_cycle(id: u16) -> Vec<u8> {
    let mut m = header(id, 2);
    m.extend_from_slice(WWW);
    m.extend_from_slice(&[0, 1, 0, 1]);
    let first = m.len() as u16;
    let second = first + 2 + 10;
    m.extend_from_slice(&(0xc000 | second).to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(&(0xc000 | first).to_be_bytes());
    m.extend_from_slice(&[0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0]);
    m
}

/// A second additional record whose owner is the end of a chain of `hops` pointers, each to
/// the one before, ending at the question's root label: a walk that ends, but a long one. The
/// chain sits in an unknown option of an OPT record before it (the question may hold no
/// pointers).
fn additional_pointer_chain(id: u16, hops: usize) -> Vec<u8> {
    let mut m = header(id, 2);
    m.extend_from_slice(WWW);
    m.extend_from_slice(&[0, 1, 0, 1]);
    // After the OPT's root owner, type, class, TTL and length, and the option's code and length.
    let data_start = m.len() + 11 + 4;
    let mut chain = Vec::new();
    let mut previous = (12 + WWW.len() - 1) as u16;
    for i in 0..hops {
        chain.extend_from_slice(&(0xc000 | previous).to_be_bytes());
        previous = (data_start + 2 * i) as u16;
    }
    m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0]);
    m.extend_from_slice(&((chain.len() + 4) as u16).to_be_bytes());
    m.extend_from_slice(&[0xfd, 0xe9]);
    m.extend_from_slice(&(chain.len() as u16).to_be_bytes());
    m.extend_from_slice(&chain);
    m.extend_from_slice(&(0xc000 | previous).to_be_bytes());
    m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0, 0, 0]);
    m
}

/// Every datagram the test sends, with what it must come back as.
struct Case {
    what: &'static str,
    msg: Vec<u8>,
    /// `Some(rcode)`: one answer with it; `None`: no answer (dropped and counted).
    rcode: Option<u8>,
}

fn crafted(id: &mut u16) -> Vec<Case> {
    let mut next = || {
        *id = id.wrapping_add(1);
        *id
    };
    let mut cases = vec![
        Case {
            what: "empty datagram",
            msg: Vec::new(),
            rcode: None,
        },
        Case {
            what: "11 bytes",
            msg: vec![0xab; 11],
            rcode: None,
        },
        Case {
            what: "a response",
            msg: {
                let mut q = plain_query(next(), WWW, 1, None);
                q[2] |= 0x80;
                q
            },
            rcode: None,
        },
        Case {
            what: "127 labels, 255 bytes: the longest name, outside every zone",
            msg: many_labels(next(), 127),
            rcode: Some(5),
        },
        Case {
            what: "128 labels, 257 bytes",
            msg: many_labels(next(), 128),
            rcode: Some(1),
        },
        Case {
            what: "700 labels in one datagram",
            msg: many_labels(next(), 700),
            rcode: Some(1),
        },
        Case {
            what: "a question that is a pointer to itself",
            msg: {
                let mut m = header(next(), 0);
                m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
                m
            },
            rcode: Some(1),
        },
        Case {
            what: "an additional owner pointing at itself",
            msg: additional_pointer_loop(next()),
            rcode: Some(1),
        },
        Case {
            what: "two additional owners pointing at each other",
            msg: additional_pointer_cycle(next()),
            rcode: Some(1),
        },
        Case {
            what: "a chain of 600 pointers",
            msg: additional_pointer_chain(next(), 600),
            rcode: Some(1),
        },
        Case {
            // As NSD 4.6 does: bytes after the last record are not read.
            what: "a good query padded with zeros to a full frame",
            msg: {
                let mut q = plain_query(next(), WWW, 1, None);
                q.resize(1472, 0);
                q
            },
            rcode: Some(0),
        },
    ];
    for labels in [63, 64, 100, 126] {
        cases.push(Case {
            what: "a long name of one-byte labels",
            msg: many_labels(next(), labels),
            rcode: Some(5),
        });
    }
    cases
}

fn rcode(answer: &[u8]) -> u8 {
    answer[3] & 0xf
}

#[test]
fn malformed_datagrams_are_answered_or_counted_and_the_server_stays_up() {
    const RANDOM: usize = 4000;
    let _serial = serial();
    let mut dns = TapDns::start(3, &[]);
    let mut client = UdpClient::new(SocketAddr::V4(dns.addr()));
    let before = dns.settled_counters();
    let mut id = 0x4000u16;
    let mut sent = 0u64;
    let (mut short, mut responses, mut answered) = (0u64, 0u64, 0u64);
    for case in crafted(&mut id) {
        let got = client.exchange(&case.msg);
        sent += 1;
        match case.rcode {
            None => assert!(got.is_empty(), "{}: answered {got:02x?}", case.what),
            Some(want) => {
                assert_eq!(got.len(), 1, "{}: {got:02x?}", case.what);
                assert_eq!(got[0][..2], case.msg[..2], "{}: wrong ID", case.what);
                assert_eq!(rcode(&got[0]), want, "{}: {:02x?}", case.what, got[0]);
                answered += 1;
            }
        }
        match case.msg.len() {
            0..12 => short += 1,
            _ if case.msg[2] & 0x80 != 0 => responses += 1,
            _ => {}
        }
    }
    // Random bytes of every length up to a full frame, and the differential stream's
    // malformed messages: at most one answer each, with the message's ID and QR set.
    let mut r = Rng::new(29);
    for i in 0..RANDOM {
        let msg: Vec<u8> = if i % 2 == 0 {
            let len = r.below(1473) as usize;
            (0..len).map(|_| r.next() as u8).collect()
        } else {
            let id = r.next() as u16;
            malformed(&mut r, id)
        };
        let got = client.exchange(&msg);
        sent += 1;
        let dropped = msg.len() < 12 || msg[2] & 0x80 != 0;
        if msg.len() < 12 {
            short += 1;
        } else if msg[2] & 0x80 != 0 {
            responses += 1;
        }
        if dropped {
            assert!(got.is_empty(), "{msg:02x?} answered: {got:02x?}");
            continue;
        }
        assert_eq!(got.len(), 1, "{msg:02x?}: {got:02x?}");
        let a = &got[0];
        assert!(
            a.len() >= 12 && a[..2] == msg[..2] && a[2] & 0x80 != 0,
            "{a:02x?}"
        );
        answered += 1;
    }
    dns.assert_alive();
    let after = dns.settled_counters();
    let d = |name: &str| after.get(name) - before.get(name);
    // Two probes went with each message, each answered NOERROR.
    let probes = 2 * sent;
    assert_eq!(d("udp_queries"), sent + probes, "{after:?}");
    assert_eq!(d("dropped_short"), short, "{after:?}");
    assert_eq!(d("dropped_response"), responses, "{after:?}");
    let rcodes: u64 = [
        "noerror",
        "nxdomain",
        "formerr",
        "refused",
        "notimp",
        "badvers",
        "other_rcode",
    ]
    .iter()
    .map(|n| d(n))
    .sum();
    assert_eq!(rcodes, answered + probes, "{after:?}");
    assert_eq!(d("send_errors"), 0, "{after:?}");
    eprintln!(
        "{sent} hostile datagrams: {answered} answered, {short} too short and {responses} \
         responses dropped and counted; {after:?}"
    );
    dig_answers_over_udp_and_tcp(SocketAddr::V4(dns.addr()));
    dns.assert_alive();
}

/// What a Linux socket dropped because its receive queue was full (`/proc/net/udp`'s last
/// column, for the socket bound to `port`).
fn linux_socket_drops(port: u16) -> u64 {
    let table = std::fs::read_to_string("/proc/net/udp").unwrap();
    let hex = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .find(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| a.ends_with(&hex))
        })
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

/// Answers a windowed client gets in `secs`: the server's capacity, as near as a Linux client
/// across the TAP device measures it.
fn capacity(dns: &TapDns, secs: f64) -> f64 {
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.connect(dns.addr()).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut r = Rng::new(3);
    let mut buf = [0u8; 2048];
    let (mut outstanding, mut got) = (0u32, 0u64);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        while outstanding < 64 {
            let id = r.next() as u16;
            let _ = sock.send(&query(&mut r, id));
            outstanding += 1;
        }
        match sock.recv(&mut buf) {
            Ok(_) => {
                got += 1;
                outstanding -= 1;
            }
            // Lost on the way: send the window again.
            Err(_) => outstanding = 0,
        }
    }
    got as f64 / start.elapsed().as_secs_f64()
}

/// Every layer's count of what it dropped, and what reached the server.
#[derive(Debug)]
struct Tally {
    counters: Counters,
    iokerneld_drops: u64,
    iokerneld_reasons: serde_json::Value,
    tap_tx_dropped: u64,
    qdisc_dropped: u64,
}

impl Tally {
    fn take(dns: &mut TapDns) -> Tally {
        let counters = dns.settled_counters();
        let (iokerneld_drops, iokerneld_reasons) = dns.iokerneld_drops();
        Tally {
            counters,
            iokerneld_drops,
            iokerneld_reasons,
            tap_tx_dropped: dns.tap_counter("tx_dropped"),
            qdisc_dropped: dns.qdisc_dropped(),
        }
    }
}

/// What one flood did, as every layer counted it.
struct Flood {
    sent: u64,
    report: String,
    /// Datagrams that became queries, and those each layer counted as dropped.
    queries: u64,
    dropped: u64,
    rss_after: usize,
}

/// Floods the server for `secs` at `rate` (or as fast as one sender goes), nine good queries
/// in ten and the rest malformed, while a second thread counts the answers.
fn flood(dns: &mut TapDns, rate: f64, secs: f64, seed: u64) -> Flood {
    // The TAP device's drops are counted as the flood's: nothing else may cross it.
    dns.quiet_host_side();
    let before = Tally::take(dns);
    let rss_before = dns.rss_bytes();
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
    sock.connect(dns.addr()).unwrap();
    let port = sock.local_addr().unwrap().port();
    let receiver = sock.try_clone().unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let reader = {
        let (done, received) = (done.clone(), received.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            loop {
                match receiver.recv(&mut buf) {
                    Ok(_) => {
                        received.fetch_add(1, Relaxed);
                    }
                    Err(_) if done.load(Relaxed) => return,
                    Err(_) => {}
                }
            }
        })
    };
    let mut r = Rng::new(seed);
    let messages: Vec<Vec<u8>> = (0..4096)
        .map(|i| {
            let id = r.next() as u16;
            if i % 10 == 9 {
                malformed(&mut r, id)
            } else {
                query(&mut r, id)
            }
        })
        .collect();
    let (mut sent, mut refused) = (0u64, 0u64);
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed().as_secs_f64();
        if elapsed >= secs {
            break;
        }
        let due = (elapsed * rate) as u64;
        while sent + refused < due {
            match sock.send(&messages[((sent + refused) % 4096) as usize]) {
                Ok(_) => sent += 1,
                // ENOBUFS and the like: it never left this host's socket.
                Err(_) => refused += 1,
            }
        }
    }
    let took = start.elapsed().as_secs_f64();
    let offered = (sent + refused) as f64 / took;
    done.store(true, Relaxed);
    reader.join().unwrap();
    dns.assert_alive();
    let after = Tally::take(dns);
    let rss_after = dns.rss_bytes();
    let answers = received.load(Relaxed);
    let socket_drops = linux_socket_drops(port);

    let d = |name: &str| after.counters.get(name) - before.counters.get(name);
    let queries = d("udp_queries");
    let iokerneld = after.iokerneld_drops - before.iokerneld_drops;
    let stack = d("stack_drops");
    let tap = after.tap_tx_dropped - before.tap_tx_dropped;
    let qdisc = after.qdisc_dropped - before.qdisc_dropped;
    let report = format!(
        "offered {offered:.0}/s for {took:.1} s, {:.1}x the {:.0}/s answered meanwhile: {sent} \
         sent ({refused} refused by Linux), {queries} reached corral-dns, {answers} answers \
         came back (the client's socket dropped {socket_drops}); drops: TAP {tap}, qdisc \
         {qdisc}, iokerneld {iokerneld} ({}), runtime stack {stack}; send errors {}; RSS \
         {rss_before} -> {rss_after}",
        offered * took / queries.max(1) as f64,
        queries as f64 / took,
        after.iokerneld_reasons,
        d("send_errors"),
    );
    eprintln!("{report}");
    assert_eq!(d("send_errors"), 0, "{report}");
    Flood {
        sent,
        report,
        queries,
        dropped: iokerneld + stack + tap + qdisc,
        rss_after,
    }
}

#[test]
fn a_flood_at_ten_times_capacity_is_dropped_and_counted_in_bounded_memory() {
    // What floods may add to the server's resident memory. Datagrams and uthreads are held
    // only while queued (iokerneld's backlog and the runtime's run queue are bounded); what
    // stays is the runtime's cache of uthread stacks (at most 1,024 in the pool and 64 per
    // kthread, each with the pages a handler touched) and allocator slack.
    const FIRST_BOUND: usize = 32 << 20;
    // A second flood finds the caches full: it may add only a little.
    const SECOND_BOUND: usize = 4 << 20;
    let _serial = serial();
    let mut dns = TapDns::start(4, &[]);
    let cap = capacity(&dns, 2.0);
    let rss_start = dns.rss_bytes();
    let mut floods = Vec::new();
    for seed in [10, 11] {
        let f = flood(&mut dns, 10.0 * cap, 3.0, seed);
        let report = format!("capacity {cap:.0}/s; {}", f.report);
        assert!(f.queries < f.sent, "no overload: {report}");
        // Every datagram that left Linux's socket became a query or was counted as dropped
        // by the layer that dropped it, and none was counted twice.
        assert_eq!(
            f.queries + f.dropped,
            f.sent,
            "queries and drops do not add up to what was sent: {report}"
        );
        floods.push(f);
    }
    let (first, second) = (&floods[0], &floods[1]);
    assert!(
        first.rss_after <= rss_start + FIRST_BOUND,
        "resident memory grew by {} bytes in the first flood: {}",
        first.rss_after - rss_start,
        first.report
    );
    assert!(
        second.rss_after <= first.rss_after + SECOND_BOUND,
        "resident memory grew by {} bytes in the second flood: {}",
        second.rss_after - first.rss_after,
        second.report
    );
    dig_answers_over_udp_and_tcp(SocketAddr::V4(dns.addr()));
    dns.assert_alive();
}
