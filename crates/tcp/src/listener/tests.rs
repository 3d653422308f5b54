use core::net::Ipv4Addr;

use super::*;
use crate::conn::{Connection, State};

const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
const SECRET: [u8; 16] = *b"0123456789abcdef";
/// A clock far from zero, in the middle of a cookie period.
const T0: Nanos = 1000 * COOKIE_PERIOD + COOKIE_PERIOD / 2;

fn server_ends() -> Endpoints {
    Endpoints {
        local: SERVER,
        remote: CLIENT,
    }
}

fn client_ends() -> Endpoints {
    Endpoints {
        local: CLIENT,
        remote: SERVER,
    }
}

fn listener(syn_backlog: usize, accept_backlog: usize, syn_cookies: bool) -> Listener {
    let config = ListenerConfig {
        syn_backlog,
        accept_backlog,
        syn_cookies,
        ..ListenerConfig::new(SECRET)
    };
    config.validate().unwrap();
    Listener::new(SERVER, config)
}

/// A segment from CLIENT to SERVER.
fn segment(seq: u32, ack: u32, flags: TcpFlags, options: TcpOptionSet) -> Vec<u8> {
    let h = TcpHeader {
        src_port: CLIENT.port(),
        dst_port: SERVER.port(),
        seq,
        ack,
        flags,
        window: 4000,
        urgent: 0,
        options,
    };
    let mut buf = vec![0u8; 80];
    let n = h.emit(&mut buf, 0, *CLIENT.ip(), *SERVER.ip()).unwrap();
    buf.truncate(n);
    buf
}

fn parse_from_client(bytes: &[u8]) -> TcpSegment<'_> {
    TcpSegment::parse(bytes, *CLIENT.ip(), *SERVER.ip()).unwrap()
}

fn parse_from_server(bytes: &[u8]) -> TcpSegment<'_> {
    TcpSegment::parse(bytes, *SERVER.ip(), *CLIENT.ip()).unwrap()
}

fn full_options(tsval: u32) -> TcpOptionSet {
    TcpOptionSet {
        mss: Some(1460),
        window_scale: Some(9),
        sack_permitted: true,
        timestamps: Some(Timestamps { tsval, tsecr: 0 }),
        sack: SackList::EMPTY,
    }
}

fn drops(l: &Listener, why: TcpDrop) -> u64 {
    l.counters().conns.drops[why as usize]
}

/// Sends a SYN that the (full) listener answers with a cookie; returns the SYN-ACK's bytes.
fn cookie_syn_ack(l: &mut Listener, now: Nanos, isn: u32, options: TcpOptionSet) -> Vec<u8> {
    let syn = segment(isn, 0, TcpFlags::SYN, options);
    let mut out = [0u8; MAX_HEADER];
    match l.on_syn(now, CLIENT, &parse_from_client(&syn), &mut out) {
        SynOutcome::Cookie { len } => out[..len].to_vec(),
        other => panic!("expected a cookie, got {other:?}"),
    }
}

/// The ACK completing the handshake a SYN-ACK began.
fn completing_ack(syn_ack: &[u8], tsval: Option<u32>) -> Vec<u8> {
    let sa = parse_from_server(syn_ack);
    let tsecr = sa.options().find_map(|o| match o {
        TcpOption::Timestamps(t) => Some(t.tsval),
        _ => None,
    });
    let options = TcpOptionSet {
        timestamps: tsval.map(|tsval| Timestamps {
            tsval,
            tsecr: tsecr.expect("the SYN-ACK carries timestamps"),
        }),
        ..TcpOptionSet::default()
    };
    segment(sa.ack(), sa.seq().wrapping_add(1), TcpFlags::ACK, options)
}

#[test]
fn siphash_matches_the_reference_vector() {
    let key: [u8; 16] = core::array::from_fn(|i| i as u8);
    let msg: [u8; 15] = core::array::from_fn(|i| i as u8);
    assert_eq!(siphash24(&key, &msg), 0xa129_ca61_49be_45e5);
    assert_eq!(siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
}

#[test]
fn initial_sequence_numbers_are_keyed_per_tuple_and_advance_every_4_us() {
    let a = initial_sequence(&SECRET, T0, server_ends());
    assert_eq!(a, initial_sequence(&SECRET, T0, server_ends()));
    assert_eq!(initial_sequence(&SECRET, T0 + 3_999, server_ends()), a);
    assert_eq!(initial_sequence(&SECRET, T0 + 4_000, server_ends()), a + 1);
    assert_eq!(
        initial_sequence(&SECRET, T0 + 4_000_000, server_ends()),
        a.wrapping_add(1000)
    );
    let other_port = Endpoints {
        remote: SocketAddrV4::new(*CLIENT.ip(), 40001),
        ..server_ends()
    };
    assert_ne!(initial_sequence(&SECRET, T0, other_port), a);
    assert_ne!(initial_sequence(&[7; 16], T0, server_ends()), a);
}

#[test]
fn syn_backlog_overflow_without_cookies_drops_and_counts() {
    let mut l = listener(2, 8, false);
    let syn = segment(100, 0, TcpFlags::SYN, full_options(1));
    let mut out = [0u8; MAX_HEADER];
    for _ in 0..2 {
        assert!(matches!(
            l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
            SynOutcome::HalfOpen { .. }
        ));
    }
    assert_eq!(l.half_open(), 2);
    for _ in 0..5 {
        assert_eq!(
            l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
            SynOutcome::Dropped(TcpDrop::SynBacklogFull)
        );
    }
    assert_eq!(drops(&l, TcpDrop::SynBacklogFull), 5);
    assert_eq!(l.half_open(), 2, "drops hold no state");
    l.half_open_done();
    assert!(matches!(
        l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
        SynOutcome::HalfOpen { .. }
    ));
    assert_eq!(l.counters().passive_opens, 3);
    assert_eq!(l.counters().syn_cookies_sent, 0);
}

#[test]
fn half_open_iss_is_the_rfc6528_number() {
    let mut l = listener(1, 1, true);
    let syn = segment(100, 0, TcpFlags::SYN, full_options(1));
    let mut out = [0u8; MAX_HEADER];
    assert_eq!(
        l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
        SynOutcome::HalfOpen {
            iss: initial_sequence(&SECRET, T0, server_ends())
        }
    );
}

#[test]
fn syn_backlog_overflow_with_cookies_answers_statelessly() {
    let mut l = listener(1, 8, true);
    let mut out = [0u8; MAX_HEADER];
    let syn = segment(100, 0, TcpFlags::SYN, full_options(1));
    assert!(matches!(
        l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
        SynOutcome::HalfOpen { .. }
    ));
    let sa_bytes = cookie_syn_ack(&mut l, T0, 5000, full_options(777));
    assert_eq!(l.half_open(), 1, "a cookie holds no state");
    assert_eq!(l.counters().syn_cookies_sent, 1);
    let sa = parse_from_server(&sa_bytes);
    assert_eq!(sa.flags(), TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(sa.ack(), 5001);
    assert_eq!((sa.src_port(), sa.dst_port()), (80, 40000));
    assert_eq!(sa.window(), 65535);
    let tcp = TcpConfig::default();
    let mut saw = (false, false, false, false);
    for o in sa.options() {
        match o {
            TcpOption::Mss(m) => saw.0 = m == tcp.mss,
            TcpOption::WindowScale(s) => saw.1 = s == window_scale_for(tcp.recv_buffer),
            TcpOption::SackPermitted => saw.2 = true,
            TcpOption::Timestamps(t) => {
                saw.3 = t.tsecr == 777
                    && t.tsval <= timestamp_clock(T0)
                    && t.tsval & TS_OPTION_MASK == 9 | TS_SACK_BIT
            }
            _ => {}
        }
    }
    assert_eq!(saw, (true, true, true, true), "{sa_bytes:?}");

    let ack = completing_ack(&sa_bytes, Some(778));
    let h = l
        .on_ack(T0 + 1_000_000, server_ends(), &parse_from_client(&ack))
        .expect("a valid cookie");
    assert_eq!(
        h,
        Handshake {
            ends: server_ends(),
            iss: sa.seq(),
            irs: 5000,
            peer_mss: 1460,
            peer_window_scale: Some(9),
            local_window_scale: window_scale_for(tcp.recv_buffer),
            sack_permitted: true,
            ts_recent: Some(778),
            peer_window: 4000,
        }
    );
    assert_eq!(l.counters().syn_cookies_accepted, 1);
    assert_eq!(drops(&l, TcpDrop::BadCookie), 0);
}

#[test]
fn cookie_mss_is_the_largest_table_entry_not_above_the_peers() {
    for (offered, granted) in [
        (None, 536),
        (Some(500), 536),
        (Some(1299), 536),
        (Some(1400), 1300),
        (Some(1440), 1440),
        (Some(9000), 1460),
    ] {
        let mut l = listener(0, 8, true);
        let options = TcpOptionSet {
            mss: offered,
            ..full_options(1)
        };
        let sa = cookie_syn_ack(&mut l, T0, 9, options);
        let ack = completing_ack(&sa, Some(2));
        let h = l
            .on_ack(T0, server_ends(), &parse_from_client(&ack))
            .unwrap();
        assert_eq!(h.peer_mss, granted, "peer offered {offered:?}");
    }
}

#[test]
fn without_peer_timestamps_a_cookie_loses_window_scaling_and_sack() {
    let mut l = listener(0, 8, true);
    let options = TcpOptionSet {
        timestamps: None,
        ..full_options(0)
    };
    let sa_bytes = cookie_syn_ack(&mut l, T0, 1, options);
    let sa = parse_from_server(&sa_bytes);
    let offered: Vec<_> = sa.options().collect();
    assert_eq!(offered, vec![TcpOption::Mss(1460)]);
    let ack = completing_ack(&sa_bytes, None);
    let h = l
        .on_ack(T0, server_ends(), &parse_from_client(&ack))
        .unwrap();
    assert_eq!(
        (
            h.peer_window_scale,
            h.sack_permitted,
            h.ts_recent,
            h.peer_mss
        ),
        (None, false, None, 1460)
    );
}

#[test]
fn cookies_expire_after_two_periods() {
    let start = 1000 * COOKIE_PERIOD;
    for (issued, arrived, valid) in [
        (start, start + COOKIE_PERIOD - 1, true),
        (
            start + COOKIE_PERIOD - 1,
            start + 2 * COOKIE_PERIOD - 1,
            true,
        ),
        (start, start + 2 * COOKIE_PERIOD - 1, true),
        (start + COOKIE_PERIOD - 1, start + 2 * COOKIE_PERIOD, false),
        (start, start + 2 * COOKIE_PERIOD, false),
    ] {
        let mut l = listener(0, 8, true);
        let sa = cookie_syn_ack(&mut l, issued, 1, full_options(1));
        // A cookie sent shortly before keeps the listener checking ACKs as cookies.
        let _ = cookie_syn_ack(&mut l, arrived, 99, full_options(1));
        let ack = completing_ack(&sa, Some(2));
        let got = l.on_ack(arrived, server_ends(), &parse_from_client(&ack));
        assert_eq!(got.is_some(), valid, "issued {issued}, arrived {arrived}");
        assert_eq!(drops(&l, TcpDrop::BadCookie), u64::from(!valid));
    }
}

#[test]
fn a_cookie_from_the_future_is_refused() {
    let mut l = listener(0, 8, true);
    let sa = cookie_syn_ack(&mut l, T0 + 3 * COOKIE_PERIOD, 1, full_options(1));
    let ack = completing_ack(&sa, Some(2));
    assert!(
        l.on_ack(T0, server_ends(), &parse_from_client(&ack))
            .is_none()
    );
}

#[test]
fn forged_acks_are_refused_and_counted() {
    let mut l = listener(0, 8, true);
    let sa_bytes = cookie_syn_ack(&mut l, T0, 1000, full_options(1));
    let sa = parse_from_server(&sa_bytes);
    let tsecr = sa
        .options()
        .find_map(|o| match o {
            TcpOption::Timestamps(t) => Some(t.tsval),
            _ => None,
        })
        .unwrap();
    let ts = |tsecr| TcpOptionSet {
        timestamps: Some(Timestamps { tsval: 5, tsecr }),
        ..TcpOptionSet::default()
    };
    let cookie = sa.seq();
    let mut forged = vec![
        // Wrong peer ISN, wrong cookie, off by one either way.
        segment(1002, cookie.wrapping_add(1), TcpFlags::ACK, ts(tsecr)),
        segment(1001, cookie, TcpFlags::ACK, ts(tsecr)),
        segment(1001, cookie.wrapping_add(2), TcpFlags::ACK, ts(tsecr)),
        // The options in TSecr carry a bit no cookie sets.
        segment(
            1001,
            cookie.wrapping_add(1),
            TcpFlags::ACK,
            ts(tsecr | 1 << 5),
        ),
    ];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        forged.push(segment(
            rng as u32,
            (rng >> 32) as u32,
            TcpFlags::ACK,
            ts(tsecr),
        ));
    }
    let n = forged.len() as u64;
    for f in &forged {
        let got = l.on_ack(T0, server_ends(), &parse_from_client(f));
        assert!(got.is_none(), "accepted a forged ACK {f:?}");
    }
    assert_eq!(drops(&l, TcpDrop::BadCookie), n);
    // The genuine ACK, but from another port: the cookie is bound to the 4-tuple.
    let ack = completing_ack(&sa_bytes, Some(2));
    let elsewhere = Endpoints {
        remote: SocketAddrV4::new(*CLIENT.ip(), 40001),
        ..server_ends()
    };
    assert!(l.on_ack(T0, elsewhere, &parse_from_client(&ack)).is_none());
    // And the genuine one is still good.
    assert!(
        l.on_ack(T0, server_ends(), &parse_from_client(&ack))
            .is_some()
    );
    assert_eq!(drops(&l, TcpDrop::BadCookie), n + 1);
}

#[test]
fn stray_acks_are_not_counted_as_cookies_when_none_was_sent() {
    let mut l = listener(4, 8, true);
    let ack = segment(1, 2, TcpFlags::ACK, TcpOptionSet::default());
    assert!(
        l.on_ack(T0, server_ends(), &parse_from_client(&ack))
            .is_none()
    );
    assert_eq!(drops(&l, TcpDrop::BadCookie), 0);
    let _ = l;
    let mut l = listener(0, 8, true);
    let _ = cookie_syn_ack(&mut l, T0, 1, full_options(1));
    let later = T0 + 2 * COOKIE_PERIOD;
    assert!(
        l.on_ack(later, server_ends(), &parse_from_client(&ack))
            .is_none()
    );
    assert_eq!(drops(&l, TcpDrop::BadCookie), 0);
}

#[test]
fn accept_queue_overflow() {
    let mut l = listener(8, 2, true);
    assert!(l.push_accept());
    assert!(l.push_accept());
    assert!(!l.push_accept(), "the accept queue holds two");
    assert_eq!(l.accept_queued(), 2);
    let syn = segment(100, 0, TcpFlags::SYN, full_options(1));
    let mut out = [0u8; MAX_HEADER];
    assert_eq!(
        l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
        SynOutcome::Dropped(TcpDrop::AcceptQueueFull),
        "no SYN is taken while nobody could accept it"
    );
    assert_eq!(drops(&l, TcpDrop::AcceptQueueFull), 1);
    assert_eq!(l.half_open(), 0);
    l.pop_accept();
    assert!(matches!(
        l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out),
        SynOutcome::HalfOpen { .. }
    ));
    assert!(l.push_accept());
    assert!(!l.push_accept());
}

#[test]
fn segments_that_are_no_syn_are_refused() {
    let mut l = listener(8, 8, true);
    let mut out = [0u8; MAX_HEADER];
    for flags in [
        TcpFlags::SYN | TcpFlags::ACK,
        TcpFlags::SYN | TcpFlags::RST,
        TcpFlags::SYN | TcpFlags::FIN,
        TcpFlags::ACK,
    ] {
        let seg = segment(1, 0, flags, TcpOptionSet::default());
        assert_eq!(
            l.on_syn(T0, CLIENT, &parse_from_client(&seg), &mut out),
            SynOutcome::Dropped(TcpDrop::BadFlags)
        );
    }
    assert_eq!(l.half_open(), 0);
}

#[test]
fn cookie_tsval_carries_the_bits_and_never_runs_ahead_of_the_clock() {
    for now in [
        0,
        63_000,
        64_000,
        1_000_000_007,
        u64::from(u32::MAX) * 1000 + 999,
    ] {
        for bits in [0, 0xf, TS_SACK_BIT | 3, TS_OPTION_MASK] {
            let clock = timestamp_clock(now);
            let tsval = cookie_tsval(now, bits);
            assert_eq!(tsval & TS_OPTION_MASK, bits);
            let behind = clock.wrapping_sub(tsval);
            assert!(behind < 2 << TS_OPTION_BITS, "{now} {bits}: {behind}");
        }
    }
}

/// Drives a connection's output into `peer`, returning how many segments went.
fn deliver(from: &mut Connection, to: &mut Connection, now: Nanos) -> usize {
    let mut buf = [0u8; 2048];
    let mut n = 0;
    while let Some(len) = from.poll_transmit(now, &mut buf) {
        let (src, dst) = (*from.ends().local.ip(), *from.ends().remote.ip());
        let seg = TcpSegment::parse(&buf[..len], src, dst).unwrap();
        to.on_segment(now, &seg);
        n += 1;
    }
    n
}

#[test]
fn a_cookie_connection_carries_data_both_ways_with_options_negotiated() {
    let tcp = TcpConfig {
        recv_buffer: 4 << 20,
        send_buffer: 4 << 20,
        ..TcpConfig::default()
    };
    let mut l = Listener::new(
        SERVER,
        ListenerConfig {
            syn_backlog: 0,
            tcp: tcp.clone(),
            ..ListenerConfig::new(SECRET)
        },
    );
    let mut client = Connection::connect(&tcp, client_ends(), 12345, T0);
    let mut buf = [0u8; 2048];
    let n = client.poll_transmit(T0, &mut buf).unwrap();
    let syn = buf[..n].to_vec();
    let mut out = [0u8; MAX_HEADER];
    let SynOutcome::Cookie { len } = l.on_syn(T0, CLIENT, &parse_from_client(&syn), &mut out)
    else {
        panic!("the backlog of zero answers with cookies");
    };
    let t1 = T0 + 50_000;
    client.on_segment(t1, &parse_from_server(&out[..len]));
    assert_eq!(client.state(), State::Established);
    let n = client.poll_transmit(t1, &mut buf).unwrap();
    let ack = buf[..n].to_vec();
    let t2 = t1 + 50_000;
    let h = l
        .on_ack(t2, server_ends(), &parse_from_client(&ack))
        .unwrap();
    assert!(h.peer_window_scale.is_some() && h.sack_permitted && h.ts_recent.is_some());
    let mut server = Connection::from_handshake(&l.config().tcp, &h, t2);
    assert!(l.push_accept());
    server.on_segment(t2, &parse_from_client(&ack));
    assert_eq!(server.state(), State::Established);

    // More than 64 KiB each way in flight needs window scaling on both sides.
    let up: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let down: Vec<u8> = (0..700_000u32).map(|i| (i * 13 + 5) as u8).collect();
    let (mut sent_up, mut sent_down) = (0, 0);
    let (mut got_up, mut got_down) = (Vec::new(), Vec::new());
    let mut now = t2;
    for _ in 0..10_000 {
        now += 20_000;
        if sent_up < up.len() {
            sent_up += client.send(now, &up[sent_up..]).unwrap_or(0);
        }
        if sent_down < down.len() {
            sent_down += server.send(now, &down[sent_down..]).unwrap_or(0);
        }
        let moved = deliver(&mut client, &mut server, now) + deliver(&mut server, &mut client, now);
        let mut rbuf = [0u8; 65536];
        while let Ok(k @ 1..) = server.recv(now, &mut rbuf) {
            got_up.extend_from_slice(&rbuf[..k]);
        }
        while let Ok(k @ 1..) = client.recv(now, &mut rbuf) {
            got_down.extend_from_slice(&rbuf[..k]);
        }
        if moved == 0 {
            for c in [&mut client, &mut server] {
                if c.next_deadline().is_some_and(|d| d <= now) {
                    c.on_timer(now);
                }
            }
        }
        if got_up.len() == up.len() && got_down.len() == down.len() {
            break;
        }
    }
    assert!(got_up == up, "client to server: {} bytes", got_up.len());
    assert!(
        got_down == down,
        "server to client: {} bytes",
        got_down.len()
    );
    assert!(server.peer_window() > 65535 && client.peer_window() > 65535);
}
