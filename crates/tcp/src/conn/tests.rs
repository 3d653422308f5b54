//! Packet-level tests on a virtual clock: segments are crafted with corral_wire's builder, fed
//! with `on_segment`, and what `poll_transmit` writes is parsed back and checked field by field.

use core::net::{Ipv4Addr, SocketAddrV4};

use corral_wire::{SackList, TcpFlags, TcpHeader, TcpOption, TcpOptionSet, TcpSegment, Timestamps};

use super::*;
use crate::config::Keepalive;
use crate::stats::TcpDrop;

const US: Nanos = 1_000;

const LOCAL_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const REMOTE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const LOCAL_PORT: u16 = 40_000;
const REMOTE_PORT: u16 = 80;
const ISS: u32 = 1_000;
const IRS: u32 = 5_000_000;
const MS: Nanos = 1_000_000;
/// Virtual time the tests start at.
const T0: Nanos = 1_000 * MS;

const ACK: TcpFlags = TcpFlags::ACK;
const SYN: TcpFlags = TcpFlags::SYN;
const FIN: TcpFlags = TcpFlags::FIN;
const RST: TcpFlags = TcpFlags::RST;
const PSH: TcpFlags = TcpFlags::PSH;

fn ends() -> Endpoints {
    Endpoints {
        local: SocketAddrV4::new(LOCAL_IP, LOCAL_PORT),
        remote: SocketAddrV4::new(REMOTE_IP, REMOTE_PORT),
    }
}

/// A small config without timestamps, so expected segments stay short; tests that need the
/// options turn them on.
fn config() -> TcpConfig {
    TcpConfig {
        mss: 1000,
        send_buffer: 64 * 1024,
        recv_buffer: 64 * 1024,
        timestamps: false,
        sack: false,
        window_scaling: false,
        rto_initial: 100 * MS,
        rto_min: 10 * MS,
        rto_max: 1_000 * MS,
        delayed_ack: 0,
        time_wait: 2_000 * MS,
        nodelay: true,
        ..TcpConfig::default()
    }
}

/// A segment from the peer.
#[derive(Clone, Debug, Default)]
struct Seg {
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    window: u16,
    options: TcpOptionSet,
    payload: Vec<u8>,
}

impl Seg {
    fn new(seq: u32, ack: u32, flags: TcpFlags) -> Seg {
        Seg {
            seq,
            ack,
            flags,
            window: 65535,
            ..Default::default()
        }
    }
    fn data(mut self, payload: &[u8]) -> Seg {
        self.payload = payload.to_vec();
        self
    }
    fn window(mut self, w: u16) -> Seg {
        self.window = w;
        self
    }
    fn ts(mut self, tsval: u32, tsecr: u32) -> Seg {
        self.options.timestamps = Some(Timestamps { tsval, tsecr });
        self
    }
    fn build(&self) -> Vec<u8> {
        let h = TcpHeader {
            src_port: REMOTE_PORT,
            dst_port: LOCAL_PORT,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            window: self.window,
            urgent: 0,
            options: self.options,
        };
        let hl = h.header_len();
        let mut buf = vec![0u8; hl + self.payload.len()];
        buf[hl..].copy_from_slice(&self.payload);
        let n = h
            .emit(&mut buf, self.payload.len(), REMOTE_IP, LOCAL_IP)
            .unwrap();
        assert_eq!(n, buf.len());
        buf
    }
}

/// A segment the connection sent, parsed back (checksum verified).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Sent {
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    window: u16,
    payload: Vec<u8>,
    mss: Option<u16>,
    wscale: Option<u8>,
    sack_permitted: bool,
    ts: Option<Timestamps>,
    sack: Vec<(u32, u32)>,
}

fn parse_sent(bytes: &[u8]) -> Sent {
    let s = TcpSegment::parse(bytes, LOCAL_IP, REMOTE_IP).expect("valid segment and checksum");
    assert_eq!((s.src_port(), s.dst_port()), (LOCAL_PORT, REMOTE_PORT));
    let mut out = Sent {
        seq: s.seq(),
        ack: s.ack(),
        flags: s.flags(),
        window: s.window(),
        payload: s.payload().to_vec(),
        mss: None,
        wscale: None,
        sack_permitted: false,
        ts: None,
        sack: Vec::new(),
    };
    for o in s.options() {
        match o {
            TcpOption::Mss(m) => out.mss = Some(m),
            TcpOption::WindowScale(w) => out.wscale = Some(w),
            TcpOption::SackPermitted => out.sack_permitted = true,
            TcpOption::Timestamps(t) => out.ts = Some(t),
            TcpOption::Sack(b) => out.sack.extend(b),
            TcpOption::Unknown { .. } => panic!("unknown option sent"),
        }
    }
    out
}

fn feed(c: &mut Connection, now: Nanos, seg: &Seg) -> Events {
    let bytes = seg.build();
    let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
    c.on_segment(now, &parsed)
}

fn drain(c: &mut Connection, now: Nanos) -> Vec<Sent> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; MAX_HEADER + usize::from(c.config.mss)];
    while let Some(n) = c.poll_transmit(now, &mut buf) {
        out.push(parse_sent(&buf[..n]));
        assert!(out.len() < 10_000, "poll_transmit never ends");
    }
    out
}

fn one(c: &mut Connection, now: Nanos) -> Sent {
    let mut v = drain(c, now);
    assert_eq!(v.len(), 1, "expected one segment, got {v:#?}");
    v.pop().unwrap()
}

fn none(c: &mut Connection, now: Nanos) {
    let v = drain(c, now);
    assert!(v.is_empty(), "expected nothing, got {v:#?}");
}

fn assert_ack(s: &Sent, seq: u32, ack: u32) {
    assert_eq!(
        (s.seq, s.ack, s.flags, s.payload.len()),
        (seq, ack, ACK, 0),
        "{s:?}"
    );
}

/// An active open completed against a peer with window 65535 and MSS 1000.
fn client(cfg: &TcpConfig) -> Connection {
    let mut c = Connection::connect(cfg, ends(), ISS, T0);
    let syn = one(&mut c, T0);
    assert_eq!(syn.flags, SYN);
    let mut synack = Seg::new(IRS, ISS + 1, SYN | ACK);
    synack.options.mss = Some(1000);
    if cfg.timestamps {
        synack.options.timestamps = Some(Timestamps {
            tsval: 7,
            tsecr: syn.ts.unwrap().tsval,
        });
    }
    if cfg.window_scaling {
        synack.options.window_scale = Some(0);
    }
    synack.options.sack_permitted = cfg.sack;
    let ev = feed(&mut c, T0 + MS, &synack);
    assert!(ev.contains(Events::ESTABLISHED));
    let ack = one(&mut c, T0 + MS);
    assert_ack(&ack, ISS + 1, IRS + 1);
    c
}

/// A passive open completed (SYN, SYN-ACK, ACK).
fn server(cfg: &TcpConfig) -> Connection {
    let mut syn = Seg::new(IRS, 0, SYN);
    syn.options.mss = Some(1000);
    let bytes = syn.build();
    let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
    let mut c = Connection::accept_syn(cfg, ends(), &parsed, ISS, T0);
    let synack = one(&mut c, T0);
    assert_eq!(
        (synack.flags, synack.seq, synack.ack),
        (SYN | ACK, ISS, IRS + 1)
    );
    let ev = feed(&mut c, T0 + MS, &Seg::new(IRS + 1, ISS + 1, ACK));
    assert!(ev.contains(Events::ESTABLISHED));
    assert_eq!(c.state(), State::Established);
    none(&mut c, T0 + MS);
    c
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn active_open_negotiates_options() {
    let cfg = TcpConfig {
        timestamps: true,
        sack: true,
        window_scaling: true,
        recv_buffer: 1 << 20,
        ..config()
    };
    let mut c = Connection::connect(&cfg, ends(), ISS, T0);
    assert_eq!(c.state(), State::SynSent);
    assert_eq!(
        c.next_deadline(),
        None,
        "nothing armed before the SYN leaves"
    );
    let syn = one(&mut c, T0);
    assert_eq!((syn.seq, syn.ack, syn.flags), (ISS, 0, SYN));
    assert_eq!(syn.mss, Some(1000));
    assert_eq!(syn.wscale, Some(5), "1 MiB needs a shift of 5");
    assert!(syn.sack_permitted);
    assert_eq!(
        syn.ts,
        Some(Timestamps {
            tsval: timestamp_clock(T0),
            tsecr: 0
        })
    );
    assert_eq!(syn.window, 65535, "a SYN's window is never scaled");
    assert_eq!(c.next_deadline(), Some(T0 + 100 * MS));

    let mut synack = Seg::new(IRS, ISS + 1, SYN | ACK).window(1000);
    synack.options = TcpOptionSet {
        mss: Some(536),
        window_scale: Some(3),
        sack_permitted: true,
        timestamps: Some(Timestamps {
            tsval: 77,
            tsecr: timestamp_clock(T0),
        }),
        sack: SackList::EMPTY,
    };
    let ev = feed(&mut c, T0 + 2 * MS, &synack);
    assert!(ev.contains(Events::ESTABLISHED | Events::WRITABLE));
    assert_eq!(c.state(), State::Established);
    assert_eq!(
        c.peer_window(),
        1000,
        "the SYN-ACK's window is not scaled either"
    );
    assert_eq!(c.srtt(), Some(2 * MS), "RTT from the timestamp echo");
    let ack = one(&mut c, T0 + 2 * MS);
    assert_ack(&ack, ISS + 1, IRS + 1);
    assert_eq!(ack.window, ((1 << 20) >> 5) as u16);
    assert_eq!(
        ack.ts,
        Some(Timestamps {
            tsval: timestamp_clock(T0 + 2 * MS),
            tsecr: 77
        })
    );
    assert_eq!(c.next_deadline(), None);
    // The peer's MSS of 536 less 12 bytes of timestamps bounds our segments.
    c.send(T0 + 3 * MS, &pattern(2000)).unwrap();
    let sent = drain(&mut c, T0 + 3 * MS);
    assert_eq!(
        sent.len(),
        1,
        "sender silly window avoidance holds the 476 bytes left"
    );
    assert_eq!(sent[0].payload.len(), 524);
    // From now on the window field is scaled by 2^3: 250 means 2000 bytes.
    feed(
        &mut c,
        T0 + 4 * MS,
        &Seg::new(IRS + 1, ISS + 525, ACK).window(250).ts(78, 0),
    );
    assert_eq!(c.peer_window(), 2000);
    let sent = drain(&mut c, T0 + 4 * MS);
    assert_eq!(
        sent.iter().map(|s| s.payload.len()).collect::<Vec<_>>(),
        [524, 524, 428]
    );
}

#[test]
fn passive_open_and_data_both_ways() {
    let mut c = server(&config());
    let ev = feed(
        &mut c,
        T0 + 2 * MS,
        &Seg::new(IRS + 1, ISS + 1, ACK | PSH).data(b"hello"),
    );
    assert!(ev.contains(Events::READABLE));
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 6);
    let mut buf = [0u8; 64];
    assert_eq!(c.recv(T0 + 2 * MS, &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"hello");
    assert_eq!(c.recv(T0 + 2 * MS, &mut buf), Err(TcpError::WouldBlock));
    assert_eq!(c.send(T0 + 3 * MS, b"world"), Ok(5));
    let s = one(&mut c, T0 + 3 * MS);
    assert_eq!(
        (s.seq, s.ack, s.flags, &s.payload[..]),
        (ISS + 1, IRS + 6, ACK | PSH, &b"world"[..])
    );
    // One RTT sample of 1 ms from the handshake: the RTO is rto_min.
    assert_eq!(c.next_deadline(), Some(T0 + 3 * MS + 10 * MS));
    let ev = feed(&mut c, T0 + 4 * MS, &Seg::new(IRS + 6, ISS + 6, ACK));
    assert!(ev.contains(Events::WRITABLE));
    assert_eq!(c.next_deadline(), None, "all acknowledged: no timer");
    assert_eq!(c.srtt(), Some(MS), "Karn-timed sample without timestamps");
    assert_eq!(c.stats().bytes_in, 5);
    assert_eq!(c.stats().bytes_out, 5);
}

#[test]
fn syn_received_answers_a_bad_ack_with_rst_and_a_retransmitted_syn_with_the_syn_ack() {
    let syn = Seg::new(IRS, 0, SYN).build();
    let parsed = TcpSegment::parse(&syn, REMOTE_IP, LOCAL_IP).unwrap();
    let mut c = Connection::accept_syn(&config(), ends(), &parsed, ISS, T0);
    assert_eq!(one(&mut c, T0).flags, SYN | ACK);
    feed(&mut c, T0 + MS, &Seg::new(IRS, 0, SYN));
    let again = one(&mut c, T0 + MS);
    assert_eq!((again.flags, again.seq), (SYN | ACK, ISS));
    feed(&mut c, T0 + MS, &Seg::new(IRS + 1, ISS + 50, ACK));
    let rst = one(&mut c, T0 + MS);
    assert_eq!((rst.flags, rst.seq), (RST, ISS + 50));
    assert_eq!(c.state(), State::SynReceived);
    assert_eq!(c.stats().drops[TcpDrop::AckOfUnsentData as usize], 1);
}

#[test]
fn syn_retransmits_back_off_then_the_connect_times_out() {
    let cfg = TcpConfig {
        syn_retransmits: 2,
        ..config()
    };
    let mut c = Connection::connect(&cfg, ends(), ISS, T0);
    one(&mut c, T0);
    let mut t = T0;
    for (i, rto) in [100 * MS, 200 * MS].into_iter().enumerate() {
        assert_eq!(c.next_deadline(), Some(t + rto));
        t += rto;
        assert_eq!(c.on_timer(t), Events::NONE);
        let s = one(&mut c, t);
        assert_eq!((s.flags, s.seq), (SYN, ISS));
        assert_eq!(c.stats().syn_retransmits, i as u64 + 1);
    }
    t += 400 * MS;
    assert_eq!(c.next_deadline(), Some(t));
    let ev = c.on_timer(t);
    assert!(ev.contains(Events::ERROR | Events::CLOSED));
    assert_eq!(c.error(), Some(TcpError::TimedOut));
    none(&mut c, t);
}

#[test]
fn rst_in_syn_sent_refuses_only_with_an_acceptable_ack() {
    let mut c = Connection::connect(&config(), ends(), ISS, T0);
    one(&mut c, T0);
    feed(&mut c, T0 + MS, &Seg::new(0, ISS + 5, RST | ACK));
    assert_eq!(c.state(), State::SynSent);
    let ev = feed(&mut c, T0 + MS, &Seg::new(0, ISS + 1, RST | ACK));
    assert!(ev.contains(Events::ERROR));
    assert_eq!(c.error(), Some(TcpError::Refused));
    assert_eq!(c.state(), State::Closed);
}

#[test]
fn active_close_through_time_wait() {
    let mut c = client(&config());
    c.shutdown_write(T0 + 2 * MS).unwrap();
    assert_eq!(c.state(), State::FinWait1);
    let fin = one(&mut c, T0 + 2 * MS);
    assert_eq!((fin.seq, fin.ack, fin.flags), (ISS + 1, IRS + 1, ACK | FIN));
    assert_eq!(c.send(T0, b"x"), Err(TcpError::BrokenPipe));
    feed(&mut c, T0 + 3 * MS, &Seg::new(IRS + 1, ISS + 2, ACK));
    assert_eq!(c.state(), State::FinWait2);
    assert_eq!(
        c.next_deadline(),
        None,
        "half-closed, still reading: no deadline"
    );
    // The peer still sends, then closes.
    feed(
        &mut c,
        T0 + 4 * MS,
        &Seg::new(IRS + 1, ISS + 2, ACK).data(b"late"),
    );
    assert_ack(&one(&mut c, T0 + 4 * MS), ISS + 2, IRS + 5);
    let ev = feed(&mut c, T0 + 5 * MS, &Seg::new(IRS + 5, ISS + 2, ACK | FIN));
    assert!(ev.contains(Events::READABLE));
    assert_eq!(c.state(), State::TimeWait);
    assert_ack(&one(&mut c, T0 + 5 * MS), ISS + 2, IRS + 6);
    let mut buf = [0u8; 8];
    assert_eq!(c.recv(T0, &mut buf), Ok(4));
    assert_eq!(c.recv(T0, &mut buf), Ok(0));
    // TIME-WAIT ends exactly 2 MSL later; a retransmitted FIN is acknowledged and restarts it.
    assert_eq!(c.next_deadline(), Some(T0 + 5 * MS + 2_000 * MS));
    feed(
        &mut c,
        T0 + 1_000 * MS,
        &Seg::new(IRS + 5, ISS + 2, ACK | FIN),
    );
    assert_ack(&one(&mut c, T0 + 1_000 * MS), ISS + 2, IRS + 6);
    let end = T0 + 3_000 * MS;
    assert_eq!(c.next_deadline(), Some(end));
    assert_eq!(c.on_timer(end - 1), Events::NONE);
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.on_timer(end), Events::CLOSED);
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn passive_close() {
    let mut c = server(&config());
    let ev = feed(&mut c, T0 + 2 * MS, &Seg::new(IRS + 1, ISS + 1, ACK | FIN));
    assert!(ev.contains(Events::READABLE));
    assert_eq!(c.state(), State::CloseWait);
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 2);
    let mut buf = [0u8; 8];
    assert_eq!(c.recv(T0, &mut buf), Ok(0), "end of stream");
    c.send(T0 + 3 * MS, b"bye").unwrap();
    c.close(T0 + 3 * MS);
    assert_eq!(c.state(), State::LastAck);
    let s = one(&mut c, T0 + 3 * MS);
    assert_eq!(
        (s.seq, s.flags, &s.payload[..]),
        (ISS + 1, ACK | PSH | FIN, &b"bye"[..])
    );
    feed(&mut c, T0 + 4 * MS, &Seg::new(IRS + 2, ISS + 4, ACK));
    assert_eq!(c.state(), State::LastAck, "the FIN is not acknowledged yet");
    let ev = feed(&mut c, T0 + 4 * MS, &Seg::new(IRS + 2, ISS + 5, ACK));
    assert!(ev.contains(Events::CLOSED));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn simultaneous_close() {
    let mut c = client(&config());
    c.shutdown_write(T0 + 2 * MS).unwrap();
    let fin = one(&mut c, T0 + 2 * MS);
    assert_eq!(fin.flags, ACK | FIN);
    // The peer's FIN crosses ours: it does not acknowledge our FIN.
    feed(&mut c, T0 + 3 * MS, &Seg::new(IRS + 1, ISS + 1, ACK | FIN));
    assert_eq!(c.state(), State::Closing);
    assert_ack(&one(&mut c, T0 + 3 * MS), ISS + 2, IRS + 2);
    feed(&mut c, T0 + 4 * MS, &Seg::new(IRS + 2, ISS + 2, ACK));
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.next_deadline(), Some(T0 + 4 * MS + 2_000 * MS));
}

#[test]
fn simultaneous_open() {
    let mut c = Connection::connect(&config(), ends(), ISS, T0);
    one(&mut c, T0);
    // The peer's own SYN crosses ours.
    let mut syn = Seg::new(IRS, 0, SYN);
    syn.options.mss = Some(1000);
    feed(&mut c, T0 + MS, &syn);
    assert_eq!(c.state(), State::SynReceived);
    let synack = one(&mut c, T0 + MS);
    assert_eq!(
        (synack.flags, synack.seq, synack.ack),
        (SYN | ACK, ISS, IRS + 1)
    );
    // Then its SYN-ACK for our SYN arrives.
    let ev = feed(&mut c, T0 + 2 * MS, &Seg::new(IRS, ISS + 1, SYN | ACK));
    assert!(ev.contains(Events::ESTABLISHED));
    assert_eq!(c.state(), State::Established);
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 1);
}

#[test]
fn rst_validation_rfc5961() {
    let mut c = client(&config());
    // Outside the window: dropped silently.
    feed(&mut c, T0 + 2 * MS, &Seg::new(IRS + 1 + 70_000, 0, RST));
    assert_eq!(c.state(), State::Established);
    none(&mut c, T0 + 2 * MS);
    assert_eq!(c.stats().drops[TcpDrop::RstOutOfWindow as usize], 1);
    // In the window but not exact: a challenge ACK.
    feed(&mut c, T0 + 2 * MS, &Seg::new(IRS + 100, 0, RST));
    assert_eq!(c.state(), State::Established);
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 1);
    assert_eq!(c.stats().drops[TcpDrop::RstChallenged as usize], 1);
    assert_eq!(c.stats().challenge_acks, 1);
    // Exactly RCV.NXT: the connection is reset.
    let ev = feed(&mut c, T0 + 3 * MS, &Seg::new(IRS + 1, 0, RST));
    assert!(ev.contains(Events::ERROR | Events::CLOSED | Events::READABLE));
    assert_eq!(c.error(), Some(TcpError::Reset));
    let mut buf = [0u8; 4];
    assert_eq!(c.recv(T0, &mut buf), Err(TcpError::Reset));
    assert_eq!(c.send(T0, b"x"), Err(TcpError::Reset));
    none(&mut c, T0 + 3 * MS);
}

/// A reset does not take back what was already delivered in order: the application reads it,
/// then the reset. Out-of-order bytes, which can never be completed, are gone.
#[test]
fn data_received_before_a_reset_is_read_before_the_error() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 1, ISS + 1, ACK).data(b"in order"),
    );
    feed(&mut c, t, &Seg::new(IRS + 20, ISS + 1, ACK).data(b"ahead"));
    drain(&mut c, t);
    let ev = feed(&mut c, t, &Seg::new(IRS + 9, 0, RST));
    assert!(ev.contains(Events::ERROR | Events::READABLE | Events::CLOSED));
    assert_eq!(
        (c.state(), c.error()),
        (State::Closed, Some(TcpError::Reset))
    );
    assert!(c.readable());
    assert_eq!(c.send(t, b"x"), Err(TcpError::Reset));
    let mut buf = [0u8; 5];
    assert_eq!(c.recv(t, &mut buf), Ok(5));
    assert_eq!(&buf, b"in or");
    assert_eq!(c.recv(t, &mut buf), Ok(3));
    assert_eq!(&buf[..3], b"der");
    assert_eq!(c.recv(t, &mut buf), Err(TcpError::Reset));
    assert_eq!(c.recv(t, &mut buf), Err(TcpError::Reset));
    assert_eq!(
        c.memory(),
        core::mem::size_of_val(&*c.cc),
        "the buffers are returned"
    );
    none(&mut c, t);
}

/// After the peer's FIN, a reset ends nothing more: the bytes before the FIN are read, then
/// the end of the stream.
#[test]
fn a_reset_after_the_peers_fin_still_reads_to_the_end_of_the_stream() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 1, ISS + 1, ACK | FIN).data(b"bye"),
    );
    assert_eq!(c.state(), State::CloseWait);
    drain(&mut c, t);
    feed(&mut c, t, &Seg::new(IRS + 5, 0, RST));
    assert_eq!(c.error(), Some(TcpError::Reset));
    let mut buf = [0u8; 8];
    assert_eq!(c.recv(t, &mut buf), Ok(3));
    assert_eq!(c.recv(t, &mut buf), Ok(0));
}

#[test]
fn challenge_acks_are_rate_limited() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    let limit = input::THROTTLED_ACKS_PER_SECOND;
    for _ in 0..limit + 50 {
        feed(&mut c, t, &Seg::new(IRS + 100, 0, RST));
        drain(&mut c, t);
    }
    assert_eq!(c.stats().challenge_acks, u64::from(limit));
    assert_eq!(c.stats().acks_rate_limited, 50);
    assert_eq!(
        c.stats().drops[TcpDrop::RstChallenged as usize],
        u64::from(limit) + 50
    );
    // A second later the budget is back.
    feed(&mut c, t + 1_000 * MS, &Seg::new(IRS + 100, 0, RST));
    assert_ack(&one(&mut c, t + 1_000 * MS), ISS + 1, IRS + 1);
    assert_eq!(c.state(), State::Established);
}

#[test]
fn syn_and_bad_acks_on_an_established_connection_get_challenge_acks() {
    let mut c = client(&config());
    feed(&mut c, T0 + 2 * MS, &Seg::new(IRS + 10, 0, SYN));
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 1);
    assert_eq!(c.stats().drops[TcpDrop::SynChallenged as usize], 1);
    feed(
        &mut c,
        T0 + 2 * MS,
        &Seg::new(IRS + 1, ISS + 1000, ACK).data(b"abc"),
    );
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 1);
    assert_eq!(c.stats().drops[TcpDrop::AckOfUnsentData as usize], 1);
    assert_eq!(
        c.recv_available(),
        0,
        "the data of a segment acking unsent data is dropped"
    );
    feed(
        &mut c,
        T0 + 2 * MS,
        &Seg::new(IRS + 1, ISS.wrapping_sub(70_000), ACK),
    );
    assert_ack(&one(&mut c, T0 + 2 * MS), ISS + 1, IRS + 1);
    assert_eq!(c.stats().drops[TcpDrop::AckTooOld as usize], 1);
    assert_eq!(c.stats().challenge_acks, 3);
    feed(
        &mut c,
        T0 + 2 * MS,
        &Seg::new(IRS + 1, 0, TcpFlags(0)).data(b"abc"),
    );
    none(&mut c, T0 + 2 * MS);
    assert_eq!(c.stats().drops[TcpDrop::NoAckFlag as usize], 1);
    assert_eq!(c.state(), State::Established);
}

#[test]
fn rto_is_exact_doubles_and_caps() {
    let cfg = TcpConfig {
        max_retransmits: 6,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 10 * MS;
    c.send(t, b"data").unwrap();
    one(&mut c, t);
    // No RTT sample from the handshake? One was taken: SYN at T0, SYN-ACK at T0 + 1 ms.
    assert_eq!(c.srtt(), Some(MS));
    // RTO = max(rto_min, srtt + 4 * rttvar) = max(10 ms, 3 ms) = 10 ms.
    let mut deadline = t + 10 * MS;
    let mut expected_rto = 10 * MS;
    for i in 1..=6u64 {
        assert_eq!(c.next_deadline(), Some(deadline), "expiry {i}");
        assert_eq!(c.on_timer(deadline - 1), Events::NONE);
        none(&mut c, deadline - 1);
        c.on_timer(deadline);
        let s = one(&mut c, deadline);
        assert_eq!((s.seq, &s.payload[..]), (ISS + 1, &b"data"[..]));
        assert_eq!(c.stats().timeouts, i);
        assert_eq!(c.stats().rto_retransmits, i);
        expected_rto = (expected_rto * 2).min(cfg.rto_max);
        deadline += expected_rto;
    }
    assert_eq!(expected_rto, 640 * MS);
    assert_eq!(c.next_deadline(), Some(deadline));
    let ev = c.on_timer(deadline);
    assert!(ev.contains(Events::ERROR));
    assert_eq!(c.error(), Some(TcpError::TimedOut));
}

#[test]
fn rto_backoff_is_capped_by_rto_max() {
    let cfg = TcpConfig {
        rto_max: 300 * MS,
        rto_initial: 100 * MS,
        ..config()
    };
    let mut c = client(&cfg);
    c.send(T0 + 2 * MS, b"x").unwrap();
    one(&mut c, T0 + 2 * MS);
    let mut t = T0 + 2 * MS;
    let mut gaps = Vec::new();
    for _ in 0..6 {
        let d = c.next_deadline().unwrap();
        gaps.push(d - t);
        t = d;
        c.on_timer(t);
        one(&mut c, t);
    }
    assert_eq!(
        gaps,
        [10 * MS, 20 * MS, 40 * MS, 80 * MS, 160 * MS, 300 * MS]
    );
    // An ACK of new data ends the backoff.
    feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 2, ACK));
    c.send(t + MS, b"y").unwrap();
    one(&mut c, t + MS);
    assert!(c.next_deadline().unwrap() - (t + MS) < 300 * MS);
}

#[test]
fn fast_retransmit_on_three_duplicate_acks_then_newreno_recovery() {
    let mut c = client(&config());
    let t = T0 + 10 * MS;
    c.send(t, &pattern(5000)).unwrap();
    let sent = drain(&mut c, t);
    assert_eq!(sent.len(), 5);
    assert_eq!(c.cwnd(), 10_000);
    // The first segment is lost; the peer acknowledges the others with duplicate ACKs.
    for i in 1..=2 {
        feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 1, ACK));
        none(&mut c, t + MS);
        assert_eq!(c.stats().dup_acks_in, i);
    }
    feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 1, ACK));
    let r = one(&mut c, t + MS);
    assert_eq!((r.seq, r.payload.len()), (ISS + 1, 1000));
    assert_eq!(&r.payload[..], &pattern(5000)[..1000]);
    assert_eq!(c.stats().fast_retransmits, 1);
    assert_eq!(c.stats().recoveries, 1);
    assert_eq!(c.stats().rto_retransmits, 0);
    // ssthresh = flight / 2 = 2500; cwnd = ssthresh + 3 SMSS.
    assert_eq!(c.cwnd(), 5500);
    // A partial ACK (the third segment was lost too) retransmits the next hole at once.
    feed(&mut c, t + 2 * MS, &Seg::new(IRS + 1, ISS + 2001, ACK));
    let r = one(&mut c, t + 2 * MS);
    assert_eq!((r.seq, r.payload.len()), (ISS + 2001, 1000));
    assert_eq!(c.stats().fast_retransmits, 2);
    // The full ACK ends recovery: cwnd = min(ssthresh, flight + SMSS).
    feed(&mut c, t + 3 * MS, &Seg::new(IRS + 1, ISS + 5001, ACK));
    assert_eq!(c.cwnd(), 1000);
    assert_eq!(c.next_deadline(), None);
    // Further duplicate ACKs of the same point do not start a second recovery.
    assert_eq!(c.stats().recoveries, 1);
}

#[test]
fn sack_recovery_skips_sacked_data() {
    let cfg = TcpConfig {
        sack: true,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 10 * MS;
    c.send(t, &pattern(6000)).unwrap();
    assert_eq!(drain(&mut c, t).len(), 6);
    // Segments 0 and 2 are lost; 1, 3, 4 and 5 arrive and are SACKed.
    let dup = |blocks: &[(u32, u32)]| {
        let mut s = Seg::new(IRS + 1, ISS + 1, ACK);
        for &(l, r) in blocks {
            s.options.sack.push(ISS + 1 + l, ISS + 1 + r);
        }
        s
    };
    feed(&mut c, t + MS, &dup(&[(1000, 2000)]));
    feed(&mut c, t + MS, &dup(&[(3000, 4000), (1000, 2000)]));
    none(&mut c, t + MS);
    feed(&mut c, t + MS, &dup(&[(3000, 5000), (1000, 2000)]));
    let r = one(&mut c, t + MS);
    assert_eq!(r.seq, ISS + 1, "the first hole");
    feed(&mut c, t + MS, &dup(&[(3000, 6000), (1000, 2000)]));
    let r = one(&mut c, t + MS);
    assert_eq!(r.seq, ISS + 2001, "the SACKed second segment is skipped");
    assert_eq!(c.stats().fast_retransmits, 2);
    feed(&mut c, t + 2 * MS, &Seg::new(IRS + 1, ISS + 6001, ACK));
    assert_eq!(c.bytes_in_flight(), 0);
    none(&mut c, t + 2 * MS);
}

#[test]
fn sack_blocks_most_recent_first() {
    let cfg = TcpConfig {
        sack: true,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    let d = pattern(4000);
    let at = |off: usize| Seg::new(IRS + 1 + off as u32, ISS + 1, ACK).data(&d[off..off + 1000]);
    feed(&mut c, t, &at(1000));
    let s = one(&mut c, t);
    assert_eq!(s.ack, IRS + 1);
    assert_eq!(s.sack, [(IRS + 1001, IRS + 2001)]);
    feed(&mut c, t, &at(3000));
    assert_eq!(
        one(&mut c, t).sack,
        [(IRS + 3001, IRS + 4001), (IRS + 1001, IRS + 2001)]
    );
    feed(&mut c, t, &at(2000));
    assert_eq!(one(&mut c, t).sack, [(IRS + 1001, IRS + 4001)]);
    assert_eq!(c.stats().ooo_segments, 3);
    let ev = feed(&mut c, t, &at(0));
    assert!(ev.contains(Events::READABLE));
    let s = one(&mut c, t);
    assert_eq!((s.ack, s.sack.len()), (IRS + 4001, 0));
    let mut buf = vec![0u8; 5000];
    assert_eq!(c.recv(t, &mut buf), Ok(4000));
    assert_eq!(&buf[..4000], &d[..]);
}

#[test]
fn out_of_order_queue_is_bounded_and_drops_are_counted() {
    let cfg = TcpConfig {
        max_ooo_ranges: 2,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    for off in [1000u32, 3000, 5000] {
        feed(
            &mut c,
            t,
            &Seg::new(IRS + 1 + off, ISS + 1, ACK).data(&[1; 500]),
        );
        assert_ack(&one(&mut c, t), ISS + 1, IRS + 1);
    }
    assert_eq!(c.stats().drops[TcpDrop::OooQueueFull as usize], 1);
    assert_eq!(c.stats().ooo_segments, 2);
    // Beyond the window: trimmed and counted.
    let big = vec![2u8; 1000];
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 1 + 65_000, ISS + 1, ACK).data(&big),
    );
    one(&mut c, t);
    assert_eq!(c.stats().drops[TcpDrop::BeyondWindow as usize], 1);
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 1 + 80_000, ISS + 1, ACK).data(&big),
    );
    one(&mut c, t);
    assert_eq!(c.stats().drops[TcpDrop::OutOfWindow as usize], 1);
    assert!(c.memory() <= 64 * 1024 + 2 * 64 + 256);
}

#[test]
fn window_scaling_above_one_mebibyte() {
    let cfg = TcpConfig {
        mss: 8960,
        recv_buffer: 4 << 20,
        send_buffer: 4 << 20,
        window_scaling: true,
        ..config()
    };
    let mut c = Connection::connect(&cfg, ends(), ISS, T0);
    let syn = one(&mut c, T0);
    assert_eq!(syn.wscale, Some(7), "4 MiB >> 7 fits in 16 bits");
    let mut synack = Seg::new(IRS, ISS + 1, SYN | ACK);
    synack.options.mss = Some(8960);
    synack.options.window_scale = Some(7);
    feed(&mut c, T0 + MS, &synack);
    let ack = one(&mut c, T0 + MS);
    let advertised = u32::from(ack.window) << 7;
    assert_eq!(advertised, 4 << 20);
    // The receive side takes 1.5 MiB in flight without a read.
    let chunk = vec![9u8; 8960];
    let mut seq = IRS + 1;
    let mut t = T0 + 2 * MS;
    while seq - (IRS + 1) < 3 << 19 {
        feed(
            &mut c,
            t,
            &Seg::new(seq, ISS + 1, ACK).window(16_384).data(&chunk),
        );
        seq += 8960;
        t += US;
    }
    assert_eq!(c.recv_available() as u32, seq - (IRS + 1));
    let s = drain(&mut c, t).pop().unwrap();
    assert_eq!(s.ack, seq);
    assert!(u32::from(s.window) << 7 >= (4 << 20) - (3 << 19) - 8960);
    // The send side fills a 2 MiB window (16384 << 7) once slow start opens cwnd that far.
    assert_eq!(c.peer_window(), 2 << 20);
    let data = vec![5u8; 4 << 20];
    assert_eq!(c.send(t, &data), Ok(4 << 20));
    let mut acked = ISS + 1;
    for _ in 0..20 {
        let sent = drain(&mut c, t);
        if sent.is_empty() {
            break;
        }
        let last = sent.last().unwrap();
        let top = last.seq + last.payload.len() as u32;
        assert!(top - acked <= 2 << 20, "never beyond the peer's window");
        if top - acked > 1 << 20 {
            // More than 1 MiB in flight.
            return;
        }
        t += MS;
        for s in sent {
            acked = s.seq + s.payload.len() as u32;
            feed(&mut c, t, &Seg::new(seq, acked, ACK).window(16_384));
        }
    }
    panic!("the sender never had more than 1 MiB in flight");
}

#[test]
fn zero_window_probes_back_off_and_never_time_out() {
    let mut c = client(&config());
    let t = T0 + 5 * MS;
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).window(0));
    assert_eq!(c.peer_window(), 0);
    c.send(t, b"blocked").unwrap();
    none(&mut c, t);
    let memory = c.memory();
    // The persist timer starts at the RTO (10 ms here) and doubles up to rto_max.
    let mut deadline = t + 10 * MS;
    let mut interval = 10 * MS;
    for i in 1..=30u64 {
        assert_eq!(c.next_deadline(), Some(deadline), "probe {i}");
        c.on_timer(deadline);
        let p = one(&mut c, deadline);
        assert_eq!(
            (p.seq, p.flags, p.payload.len()),
            (ISS, ACK, 0),
            "one below SND.UNA"
        );
        assert_eq!(c.stats().zero_window_probes, i);
        // The peer answers every probe, still with a zero window.
        feed(
            &mut c,
            deadline + MS,
            &Seg::new(IRS + 1, ISS + 1, ACK).window(0),
        );
        none(&mut c, deadline + MS);
        interval = (interval * 2).min(1_000 * MS);
        deadline += interval;
    }
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.error(), None);
    assert_eq!(
        c.memory(),
        memory,
        "a peer holding its window shut costs nothing more"
    );
    // The window opens: the data goes out and the persist timer stops.
    let t = deadline - MS;
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).window(1000));
    let s = one(&mut c, t);
    assert_eq!((s.seq, &s.payload[..]), (ISS + 1, &b"blocked"[..]));
    assert_eq!(
        c.next_deadline(),
        Some(t + 10 * MS),
        "the RTO, not the persist timer"
    );
}

#[test]
fn unanswered_zero_window_probes_time_out() {
    let cfg = TcpConfig {
        max_retransmits: 3,
        ..config()
    };
    let mut c = client(&cfg);
    feed(
        &mut c,
        T0 + 5 * MS,
        &Seg::new(IRS + 1, ISS + 1, ACK).window(0),
    );
    c.send(T0 + 5 * MS, b"x").unwrap();
    let mut ev = Events::NONE;
    for _ in 0..4 {
        let d = c.next_deadline().unwrap();
        ev = c.on_timer(d);
        drain(&mut c, d);
    }
    assert!(ev.contains(Events::ERROR));
    assert_eq!(c.error(), Some(TcpError::TimedOut));
}

#[test]
fn keepalive_probes_then_gives_up() {
    let cfg = TcpConfig {
        keepalive: Some(Keepalive {
            idle: 1_000 * MS,
            interval: 100 * MS,
            probes: 3,
        }),
        ..config()
    };
    let mut c = client(&cfg);
    let established = T0 + MS;
    assert_eq!(c.next_deadline(), Some(established + 1_000 * MS));
    let t = established + 1_000 * MS;
    c.on_timer(t);
    let p = one(&mut c, t);
    assert_eq!(
        (p.seq, p.ack, p.flags, p.payload.len()),
        (ISS, IRS + 1, ACK, 0)
    );
    assert_eq!(c.stats().keepalive_probes, 1);
    // An answer restarts the idle period.
    feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 1, ACK));
    none(&mut c, t + MS);
    let mut t = t + MS + 1_000 * MS;
    assert_eq!(c.next_deadline(), Some(t));
    for i in 1..=3u64 {
        c.on_timer(t);
        one(&mut c, t);
        assert_eq!(c.stats().keepalive_probes, 1 + i);
        t += 100 * MS;
        assert_eq!(c.next_deadline(), Some(t));
    }
    let ev = c.on_timer(t);
    assert!(ev.contains(Events::ERROR | Events::CLOSED));
    assert_eq!(c.error(), Some(TcpError::TimedOut));
}

/// A connection with timestamps whose TS.Recent is 100, from 3 bytes received at `t`.
fn client_with_ts_recent_100(t: Nanos) -> Connection {
    let cfg = TcpConfig {
        timestamps: true,
        ..config()
    };
    let mut c = client(&cfg);
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 1, ISS + 1, ACK).data(b"new").ts(100, 0),
    );
    let a = one(&mut c, t);
    assert_eq!(a.ack, IRS + 4);
    assert_eq!(a.ts.unwrap().tsecr, 100, "TS.Recent follows the peer");
    c
}

#[test]
fn paws_rejects_old_timestamps() {
    let t = T0 + 5 * MS;
    let mut c = client_with_ts_recent_100(t);
    // An old duplicate from an earlier incarnation: its timestamp is older than TS.Recent.
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 4, ISS + 1, ACK).data(b"old").ts(50, 0),
    );
    let a = one(&mut c, t);
    assert_eq!((a.ack, a.ts.unwrap().tsecr), (IRS + 4, 100));
    assert_eq!(c.stats().drops[TcpDrop::PawsRejected as usize], 1);
    assert_eq!(c.recv_available(), 3);
    // A RST is not subject to PAWS.
    feed(&mut c, t, &Seg::new(IRS + 4, 0, RST).ts(1, 0));
    assert_eq!(c.error(), Some(TcpError::Reset));
}

#[test]
fn paws_forgets_ts_recent_after_2_30_timestamp_ticks_without_an_update() {
    let cfg = TcpConfig {
        timestamps: true,
        keepalive: None,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 1, ISS + 1, ACK).data(b"a").ts(100, 0),
    );
    assert_eq!(one(&mut c, t).ts.unwrap().tsecr, 100);
    // A microsecond clock like ours is half-way round 2^31 ticks later: its TSval now looks
    // older than TS.Recent. One tick short of 2^30 ticks, PAWS still holds.
    let wrapped = 100u32.wrapping_add(1 << 31).wrapping_add(5);
    let idle = (1u64 << 30) * US;
    feed(
        &mut c,
        t + idle - 1,
        &Seg::new(IRS + 2, ISS + 1, ACK).data(b"b").ts(wrapped, 0),
    );
    assert_eq!(c.stats().drops[TcpDrop::PawsRejected as usize], 1);
    assert_eq!(one(&mut c, t + idle - 1).ack, IRS + 2);
    // After 2^30 ticks, TS.Recent expired (RFC 7323 §5.5): the segment is taken and its TSval
    // becomes TS.Recent.
    feed(
        &mut c,
        t + idle,
        &Seg::new(IRS + 2, ISS + 1, ACK).data(b"b").ts(wrapped, 0),
    );
    let a = one(&mut c, t + idle);
    assert_eq!((a.ack, a.ts.unwrap().tsecr), (IRS + 3, wrapped));
    assert_eq!(c.stats().drops[TcpDrop::PawsRejected as usize], 1);
    assert_eq!(c.recv_available(), 2);
}

/// The peer lost our first SYN and then its first SYN-ACK: the SYN-ACK that arrives is its
/// retransmission, a second after the SYN it echoes.
#[test]
fn a_syn_ack_after_a_retransmitted_syn_is_no_rtt_sample() {
    let cfg = TcpConfig {
        timestamps: true,
        rto_initial: 1_000 * MS,
        rto_max: 10_000 * MS,
        ..config()
    };
    let mut c = Connection::connect(&cfg, ends(), ISS, T0);
    one(&mut c, T0);
    let t1 = T0 + 1_000 * MS;
    c.on_timer(t1);
    let syn = one(&mut c, t1);
    assert_eq!(syn.flags, SYN);
    let mut synack = Seg::new(IRS, ISS + 1, SYN | ACK).ts(9, syn.ts.unwrap().tsval);
    synack.options.mss = Some(1000);
    let t2 = t1 + 1_000 * MS + 40 * US;
    assert!(feed(&mut c, t2, &synack).contains(Events::ESTABLISHED));
    assert_eq!(
        c.srtt(),
        None,
        "no sample from a handshake that retransmitted"
    );
    assert_eq!(
        c.rto(),
        3_000 * MS,
        "backoff reset, and 3 s after the SYN timed out (RFC 6298 §5.7)"
    );
    // The first data is timed as usual.
    one(&mut c, t2);
    c.send(t2, b"data").unwrap();
    let d = one(&mut c, t2);
    feed(
        &mut c,
        t2 + 40 * US,
        &Seg::new(IRS + 1, ISS + 5, ACK).ts(10, d.ts.unwrap().tsval),
    );
    assert_eq!(c.srtt(), Some(40 * US));
    assert_eq!(c.rto(), 10 * MS, "from the sample, floored at rto_min");
}

/// Our SYN-ACK went twice; the peer's ACK echoes the first one's TSval (as a challenge ACK to
/// the second does): it may answer either, and times nothing. An echo of the second does.
#[test]
fn the_ack_of_a_retransmitted_syn_ack_is_timed_only_by_its_latest_tsval() {
    let cfg = TcpConfig {
        timestamps: true,
        ..config()
    };
    for echo_latest in [false, true] {
        let mut syn = Seg::new(IRS, 0, SYN).ts(5, 0);
        syn.options.mss = Some(1000);
        let bytes = syn.build();
        let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
        let mut c = Connection::accept_syn(&cfg, ends(), &parsed, ISS, T0);
        let first = one(&mut c, T0).ts.unwrap().tsval;
        let t1 = T0 + 100 * MS;
        c.on_timer(t1);
        let second = one(&mut c, t1).ts.unwrap().tsval;
        let t2 = t1 + MS;
        let echo = if echo_latest { second } else { first };
        feed(&mut c, t2, &Seg::new(IRS + 1, ISS + 1, ACK).ts(6, echo));
        assert_eq!(c.state(), State::Established);
        let expected = echo_latest.then_some(MS);
        assert_eq!(c.srtt(), expected, "echo of the latest: {echo_latest}");
    }
}

/// After a timeout, the peer answers the go-back-N resend of what it already had with its old
/// TS.Recent (RFC 7323 §4.3 updates it only from acceptable segments): that echo is older than
/// the timeout and is no RTT sample; the echo of a segment sent after the timeout is.
#[test]
fn an_echo_older_than_the_last_timeout_is_no_rtt_sample() {
    let cfg = TcpConfig {
        timestamps: true,
        ..config()
    };
    let mut c = client(&cfg);
    assert_eq!(c.srtt(), Some(MS));
    let t = T0 + 10 * MS;
    c.send(t, b"data").unwrap();
    let first = one(&mut c, t);
    // The ACK is lost; the RTO (10 ms) fires and the data goes again.
    let rto = c.next_deadline().unwrap();
    c.on_timer(rto);
    let again = one(&mut c, rto);
    assert_eq!(again.payload, b"data");
    // The delayed ACK of the first copy, echoing its TSval, arrives after the timeout.
    let late = rto + 2 * MS;
    feed(
        &mut c,
        late,
        &Seg::new(IRS + 1, ISS + 5, ACK).ts(8, first.ts.unwrap().tsval),
    );
    assert_eq!(c.srtt(), Some(MS), "ambiguous: no sample");
    // New data, answered with an echo of itself: timed again.
    c.send(late, b"more").unwrap();
    let more = one(&mut c, late);
    feed(
        &mut c,
        late + 3 * MS,
        &Seg::new(IRS + 1, ISS + 9, ACK).ts(9, more.ts.unwrap().tsval),
    );
    assert_eq!(c.srtt(), Some((7 * MS + 3 * MS) / 8));
}

/// Once everything sent before a timeout is acknowledged, even by an ambiguous ACK, the next
/// echo times the path again, also after the timestamp clock moved on by more than 2^31 ticks.
#[test]
fn echoes_time_the_path_again_after_a_timeout_and_a_long_idle_time() {
    let cfg = TcpConfig {
        timestamps: true,
        keepalive: None,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 10 * MS;
    c.send(t, b"data").unwrap();
    let first = one(&mut c, t);
    let rto = c.next_deadline().unwrap();
    c.on_timer(rto);
    one(&mut c, rto);
    feed(
        &mut c,
        rto + MS,
        &Seg::new(IRS + 1, ISS + 5, ACK).ts(8, first.ts.unwrap().tsval),
    );
    assert_eq!(c.srtt(), Some(MS));
    let later = rto + (3u64 << 31) * US;
    c.send(later, b"more").unwrap();
    let more = one(&mut c, later);
    feed(
        &mut c,
        later + 3 * MS,
        &Seg::new(IRS + 1, ISS + 9, ACK).ts(9, more.ts.unwrap().tsval),
    );
    assert_eq!(c.srtt(), Some((7 * MS + 3 * MS) / 8));
}

#[test]
fn delayed_acks() {
    let cfg = TcpConfig {
        delayed_ack: 40 * MS,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    let full = vec![3u8; 1000];
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).data(&full));
    none(&mut c, t);
    assert_eq!(c.next_deadline(), Some(t + 40 * MS));
    // The second full-sized segment is acknowledged at once.
    feed(
        &mut c,
        t + MS,
        &Seg::new(IRS + 1001, ISS + 1, ACK).data(&full),
    );
    assert_ack(&one(&mut c, t + MS), ISS + 1, IRS + 2001);
    assert_eq!(c.next_deadline(), None);
    // A small segment waits for the timer, exactly.
    feed(
        &mut c,
        t + 2 * MS,
        &Seg::new(IRS + 2001, ISS + 1, ACK).data(b"hi"),
    );
    none(&mut c, t + 2 * MS);
    let d = t + 42 * MS;
    assert_eq!(c.next_deadline(), Some(d));
    c.on_timer(d - 1);
    none(&mut c, d - 1);
    c.on_timer(d);
    assert_ack(&one(&mut c, d), ISS + 1, IRS + 2003);
    assert_eq!(c.stats().delayed_acks, 1);
    // Out-of-order data is acknowledged at once.
    feed(
        &mut c,
        d,
        &Seg::new(IRS + 3003, ISS + 1, ACK).data(b"later"),
    );
    assert_ack(&one(&mut c, d), ISS + 1, IRS + 2003);
    // A reply carries the ACK with it.
    feed(
        &mut c,
        d + MS,
        &Seg::new(IRS + 2003, ISS + 1, ACK).data(b"q"),
    );
    c.send(d + MS, b"r").unwrap();
    let s = one(&mut c, d + MS);
    assert_eq!((s.ack, &s.payload[..]), (IRS + 2004, &b"r"[..]));
}

fn feed_in_batch(c: &mut Connection, now: Nanos, seg: &Seg) -> Events {
    let bytes = seg.build();
    let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
    c.on_segment_in_batch(now, &parsed)
}

/// Feeds `n` full segments from the first byte on as one batch's, checking that none is
/// acknowledged on its own.
fn batch_without_acks(c: &mut Connection, now: Nanos, n: u32) {
    let full = vec![3u8; 1000];
    for i in 0..n {
        let seg = Seg::new(IRS + 1 + i * 1000, ISS + 1, ACK).data(&full);
        feed_in_batch(c, now, &seg);
        none(c, now);
    }
}

#[test]
fn a_receive_batch_is_acknowledged_once_at_its_end() {
    let cfg = TcpConfig {
        delayed_ack: 40 * MS,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    batch_without_acks(&mut c, t, 6);
    assert!(c.ack_owed_by_batch());
    // The delayed-ACK timer still bounds an owed ACK.
    assert_eq!(c.next_deadline(), Some(t + 40 * MS));
    c.end_receive_batch();
    assert!(!c.ack_owed_by_batch());
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 6001);
    assert_eq!(c.next_deadline(), None);
    // A batch with nothing owed ends with nothing to send.
    c.end_receive_batch();
    none(&mut c, t);
    // Had the batch's end never come, the timer sends the owed ACK.
    let full = vec![3u8; 1000];
    for i in 0..2 {
        feed_in_batch(
            &mut c,
            t + MS,
            &Seg::new(IRS + 6001 + i * 1000, ISS + 1, ACK).data(&full),
        );
    }
    none(&mut c, t + MS);
    c.on_timer(t + 41 * MS);
    assert_ack(&one(&mut c, t + 41 * MS), ISS + 1, IRS + 8001);
    assert!(!c.ack_owed_by_batch());
}

#[test]
fn a_receive_batch_acks_at_the_stretch_limit_and_at_once_for_a_hole() {
    let cfg = TcpConfig {
        delayed_ack: 40 * MS,
        ack_stretch: 4,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    let full = vec![5u8; 1000];
    batch_without_acks(&mut c, t, 3);
    // The fourth full segment reaches `ack_stretch`: acknowledged at once, nothing owed.
    feed_in_batch(&mut c, t, &Seg::new(IRS + 3001, ISS + 1, ACK).data(&full));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 4001);
    assert!(!c.ack_owed_by_batch());
    // Out-of-order data in a batch is acknowledged at once (a duplicate ACK for the sender's
    // fast retransmit), not at the batch's end.
    feed_in_batch(&mut c, t, &Seg::new(IRS + 5001, ISS + 1, ACK).data(&full));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 4001);
    // So is the segment that fills the hole.
    feed_in_batch(&mut c, t, &Seg::new(IRS + 4001, ISS + 1, ACK).data(&full));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 6001);
    // With a stretch of 2, a batch acknowledges every second segment, as outside one.
    let cfg = TcpConfig {
        ack_stretch: 2,
        ..cfg
    };
    let mut c = client(&cfg);
    feed_in_batch(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).data(&full));
    none(&mut c, t);
    feed_in_batch(&mut c, t, &Seg::new(IRS + 1001, ISS + 1, ACK).data(&full));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 2001);
}

#[test]
fn nagle_holds_small_segments_while_one_is_unacknowledged() {
    let cfg = TcpConfig {
        nodelay: false,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    c.send(t, b"a").unwrap();
    assert_eq!(one(&mut c, t).payload, b"a");
    c.send(t, b"b").unwrap();
    c.send(t, b"c").unwrap();
    none(&mut c, t);
    feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 2, ACK));
    let s = one(&mut c, t + MS);
    assert_eq!((s.seq, &s.payload[..]), (ISS + 2, &b"bc"[..]));
    // A full-sized segment is never held.
    c.send(t + MS, &[7u8; 1500]).unwrap();
    let s = one(&mut c, t + MS);
    assert_eq!(s.payload.len(), 1000);
    c.set_nodelay(true);
    assert_eq!(one(&mut c, t + MS).payload.len(), 500);
}

#[test]
fn close_with_unread_data_resets() {
    let mut c = client(&config());
    feed(
        &mut c,
        T0 + 2 * MS,
        &Seg::new(IRS + 1, ISS + 1, ACK).data(b"unread"),
    );
    one(&mut c, T0 + 2 * MS);
    c.close(T0 + 3 * MS);
    assert_eq!(c.state(), State::Closed);
    let r = one(&mut c, T0 + 3 * MS);
    assert_eq!((r.flags, r.seq, r.ack), (RST | ACK, ISS + 1, IRS + 7));
}

#[test]
fn an_idle_connection_holds_no_buffers() {
    let mut c = client(&config());
    let idle = c.memory();
    assert!(idle < 256, "{idle} bytes");
    c.send(T0 + 2 * MS, &pattern(3000)).unwrap();
    assert!(c.memory() > idle);
    assert!(c.memory() <= idle + 64 * 1024);
}

mod random {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Step {
        Segment {
            seq_off: i32,
            ack_off: i32,
            flags: u8,
            window: u16,
            len: usize,
            ts: Option<(u32, u32)>,
            sack: Vec<(i32, u16)>,
        },
        Timer,
        Advance(u32),
        Send(usize),
        Recv(usize),
        Shutdown,
        Close,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => (
                prop_oneof![3 => -2000i32..8000, 1 => -3000i32..70_000],
                prop_oneof![3 => -100i32..6000, 1 => -3000i32..70_000],
                any::<u8>(),
                any::<u16>(),
                prop_oneof![Just(0usize), 1usize..1200],
                proptest::option::of(any::<(u32, u32)>()),
                proptest::collection::vec((-2000i32..70_000, 1u16..5000), 0..4),
            )
                .prop_map(|(seq_off, ack_off, flags, window, len, ts, sack)| Step::Segment {
                    seq_off,
                    ack_off,
                    flags,
                    window,
                    len,
                    ts,
                    sack,
                }),
            2 => Just(Step::Timer),
            2 => (0u32..2_000_000).prop_map(Step::Advance),
            2 => (0usize..5000).prop_map(Step::Send),
            2 => (0usize..5000).prop_map(Step::Recv),
            1 => Just(Step::Shutdown),
            1 => Just(Step::Close),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        /// Whatever arrives and whatever the application does, nothing panics, the sequence
        /// space stays ordered and memory stays within its bounds.
        #[test]
        fn random_segments_keep_invariants(
            passive in any::<bool>(),
            options in any::<bool>(),
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let cfg = TcpConfig {
                timestamps: options,
                sack: options,
                window_scaling: options,
                max_ooo_ranges: 4,
                keepalive: Some(Keepalive { idle: 50 * MS, interval: 10 * MS, probes: 2 }),
                delayed_ack: MS,
                ..config()
            };
            let mut c = if passive { server(&cfg) } else { client(&cfg) };
            let mut now = T0 + 2 * MS;
            let bound = cfg.send_buffer + cfg.recv_buffer + 4 * 64 + 256;
            for s in steps {
                match s {
                    Step::Segment { seq_off, ack_off, flags, window, len, ts, sack } => {
                        let seq = c.rcv_nxt.0.wrapping_add(seq_off as u32);
                        let ack = c.snd_una.0.wrapping_add(ack_off as u32);
                        let mut seg = Seg::new(seq, ack, TcpFlags(flags & 0x1f)).window(window);
                        seg.payload = pattern(len);
                        if let Some((a, b)) = ts {
                            seg.options.timestamps = Some(Timestamps { tsval: a, tsecr: b });
                        }
                        for (l, n) in sack {
                            let left = c.snd_una.0.wrapping_add(l as u32);
                            seg.options.sack.push(left, left.wrapping_add(u32::from(n)));
                        }
                        feed(&mut c, now, &seg);
                    }
                    Step::Timer => {
                        if let Some(d) = c.next_deadline() {
                            now = now.max(d);
                            c.on_timer(now);
                        }
                    }
                    Step::Advance(ns) => now += Nanos::from(ns),
                    Step::Send(n) => {
                        let _ = c.send(now, &pattern(n));
                    }
                    Step::Recv(n) => {
                        let mut buf = vec![0u8; n];
                        let _ = c.recv(now, &mut buf);
                    }
                    Step::Shutdown => {
                        let _ = c.shutdown_write(now);
                    }
                    Step::Close => c.close(now),
                }
                drain(&mut c, now);
                prop_assert!(c.snd_una.le(c.snd_nxt) && c.snd_nxt.le(c.snd_max));
                prop_assert!(c.buf_seq.le(c.snd_una + 1));
                prop_assert!(c.recv_available() <= cfg.recv_buffer);
                prop_assert!(c.memory() <= bound, "{} > {}", c.memory(), bound);
                if let Some(d) = c.next_deadline() {
                    prop_assert!(d >= now.saturating_sub(2_000 * MS));
                }
                if c.state() == State::Closed {
                    prop_assert_eq!(c.next_deadline(), None);
                }
            }
        }
    }
}

/// Two engines connected back to back through a lossy, reordering link: every byte arrives
/// intact, in order, and both sides close cleanly.
mod pair {
    use super::*;

    struct Link {
        /// (delivery time, bytes, to the server?)
        queue: Vec<(Nanos, Vec<u8>, bool)>,
        rng: u64,
        loss_percent: u64,
        jitter: Nanos,
    }

    impl Link {
        fn next(&mut self) -> u64 {
            // xorshift64*: deterministic, no dependency.
            self.rng ^= self.rng >> 12;
            self.rng ^= self.rng << 25;
            self.rng ^= self.rng >> 27;
            self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn send(&mut self, now: Nanos, bytes: Vec<u8>, to_server: bool) {
            if self.next() % 100 < self.loss_percent {
                return;
            }
            let delay = 50 * US + self.next() % (self.jitter + 1);
            if self.loss_percent > 0 && self.next() % 100 < self.loss_percent {
                // Duplicated, the copy later.
                self.queue.push((now + 2 * delay, bytes.clone(), to_server));
            }
            self.queue.push((now + delay, bytes, to_server));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        cfg: &TcpConfig,
        slow_reader: bool,
        loss_percent: u64,
        jitter: Nanos,
        seed: u64,
        size: usize,
    ) -> (Connection, Connection) {
        let client_ends = ends();
        let server_ends = Endpoints {
            local: client_ends.remote,
            remote: client_ends.local,
        };
        let mut client = Connection::connect(
            cfg,
            client_ends,
            u32::MAX - 20_000 + seed as u32 % 10_000,
            T0,
        );
        let mut server: Option<Connection> = None;
        let mut link = Link {
            queue: Vec::new(),
            rng: seed | 1,
            loss_percent,
            jitter,
        };
        let up = pattern(size);
        let down: Vec<u8> = pattern(size + 13).into_iter().rev().collect();
        let (mut sent_up, mut sent_down) = (0, 0);
        let (mut got_up, mut got_down) = (Vec::new(), Vec::new());
        let (mut closed_up, mut closed_down) = (false, false);
        let mut now = T0;
        let mut buf = vec![0u8; MAX_HEADER + usize::from(cfg.mss)];
        let mut rbuf = vec![0u8; 10_000];
        for _ in 0..2_000_000 {
            // Applications.
            if client.state() == State::Established || client.state() == State::CloseWait {
                if sent_up < up.len() {
                    sent_up += client.send(now, &up[sent_up..]).unwrap_or(0);
                } else if !closed_up {
                    client.shutdown_write(now).unwrap();
                    closed_up = true;
                }
            }
            let read_now = !slow_reader || link.next().is_multiple_of(8);
            while read_now && let Ok(n) = client.recv(now, &mut rbuf) {
                if n == 0 {
                    break;
                }
                got_down.extend_from_slice(&rbuf[..n]);
            }
            if let Some(s) = server.as_mut() {
                if s.state() == State::Established || s.state() == State::CloseWait {
                    if sent_down < down.len() {
                        sent_down += s.send(now, &down[sent_down..]).unwrap_or(0);
                    } else if !closed_down {
                        s.shutdown_write(now).unwrap();
                        closed_down = true;
                    }
                }
                while read_now && let Ok(n) = s.recv(now, &mut rbuf) {
                    if n == 0 {
                        break;
                    }
                    got_up.extend_from_slice(&rbuf[..n]);
                }
            }
            // Output.
            while let Some(n) = client.poll_transmit(now, &mut buf) {
                link.send(now, buf[..n].to_vec(), true);
            }
            if let Some(s) = server.as_mut() {
                while let Some(n) = s.poll_transmit(now, &mut buf) {
                    link.send(now, buf[..n].to_vec(), false);
                }
            }
            let both_closed = client.state() == State::Closed
                && server.as_ref().is_some_and(|s| s.state() == State::Closed);
            if both_closed
                || (client.state() == State::TimeWait
                    && server.as_ref().is_some_and(|s| s.state() == State::Closed))
            {
                break;
            }
            // Next event: a delivery or a timer.
            let next_packet = link.queue.iter().map(|p| p.0).min();
            let timers = [
                client.next_deadline(),
                server.as_ref().and_then(|s| s.next_deadline()),
                next_packet,
            ];
            let Some(t) = timers.into_iter().flatten().min() else {
                panic!("stalled: {client:?} {server:?}");
            };
            now = now.max(t);
            if next_packet == Some(t) {
                let i = link.queue.iter().position(|p| p.0 == t).unwrap();
                let (_, bytes, to_server) = link.queue.remove(i);
                if to_server {
                    let seg = TcpSegment::parse(&bytes, LOCAL_IP, REMOTE_IP).unwrap();
                    match server.as_mut() {
                        Some(s) => {
                            // The server takes segments in receive batches: those that
                            // arrive within 20 µs of each other.
                            s.on_segment_in_batch(now, &seg);
                            let batch_goes_on =
                                link.queue.iter().any(|p| p.2 && p.0 <= now + 20 * US);
                            if !batch_goes_on {
                                s.end_receive_batch();
                            }
                        }
                        None if seg.flags() == SYN => {
                            server = Some(Connection::accept_syn(
                                cfg,
                                server_ends,
                                &seg,
                                u32::MAX - (seed as u32 % 300_000),
                                now,
                            ));
                        }
                        None => {}
                    }
                } else {
                    let seg = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
                    client.on_segment(now, &seg);
                }
            } else {
                if client.next_deadline().is_some_and(|d| d <= now) {
                    client.on_timer(now);
                }
                if let Some(s) = server.as_mut()
                    && s.next_deadline().is_some_and(|d| d <= now)
                {
                    s.on_timer(now);
                }
            }
        }
        // What a slow reader left behind is still readable after the close.
        while let Ok(n) = client.recv(now, &mut rbuf)
            && n > 0
        {
            got_down.extend_from_slice(&rbuf[..n]);
        }
        if let Some(s) = server.as_mut() {
            while let Ok(n) = s.recv(now, &mut rbuf)
                && n > 0
            {
                got_up.extend_from_slice(&rbuf[..n]);
            }
        }
        assert!(
            got_up == up,
            "upstream: {} of {} bytes; {client:?} {:?} {server:?} {:?}",
            got_up.len(),
            up.len(),
            client.error(),
            server.as_ref().map(|s| s.error())
        );
        assert!(
            got_down == down,
            "downstream: {} of {} bytes",
            got_down.len(),
            down.len()
        );
        assert_eq!(client.error(), None);
        let server = server.unwrap();
        assert_eq!(server.error(), None);
        assert_eq!(server.state(), State::Closed);
        (client, server)
    }

    #[test]
    fn clean_link() {
        let (c, s) = run(&config(), false, 0, 0, 1, 300_000);
        for st in [c.stats(), s.stats()] {
            assert_eq!(
                (st.rto_retransmits, st.fast_retransmits, st.timeouts),
                (0, 0, 0)
            );
            assert_eq!(st.drops, [0; TcpDrop::COUNT]);
        }
    }

    #[test]
    fn lossy_link_with_every_option() {
        let cfg = TcpConfig {
            timestamps: true,
            sack: true,
            window_scaling: true,
            recv_buffer: 256 * 1024,
            delayed_ack: 200 * US,
            nodelay: false,
            ..config()
        };
        for (loss, seed) in [(1, 3), (5, 5), (10, 7)] {
            let (c, s) = run(&cfg, false, loss, 40 * US, seed, 200_000);
            let st = [c.stats(), s.stats()];
            let retransmits: u64 = st
                .iter()
                .map(|x| x.rto_retransmits + x.fast_retransmits)
                .sum();
            assert!(retransmits > 0, "loss {loss}% must cause retransmissions");
        }
    }

    #[test]
    #[ignore = "a long sweep for debugging"]
    fn sweep() {
        let cfg = TcpConfig {
            timestamps: true,
            sack: true,
            window_scaling: true,
            delayed_ack: 200 * US,
            nodelay: false,
            ..config()
        };
        let small = TcpConfig {
            recv_buffer: 4000,
            send_buffer: 4000,
            ..cfg.clone()
        };
        for seed in 1..200 {
            for loss in [0, 3, 10, 20] {
                eprintln!("seed {seed} loss {loss}");
                run(&cfg, false, loss, 100 * US, seed, 100_000);
                run(&config(), false, loss, 100 * US, seed, 50_000);
                run(&small, true, loss, 100 * US, seed, 50_000);
            }
        }
    }

    #[test]
    fn slow_readers_behind_small_windows() {
        let cfg = TcpConfig {
            timestamps: true,
            sack: true,
            recv_buffer: 4000,
            send_buffer: 4000,
            delayed_ack: 200 * US,
            nodelay: false,
            ..config()
        };
        for (loss, seed) in [(0, 17), (5, 19), (10, 23)] {
            run(&cfg, true, loss, 40 * US, seed, 60_000);
        }
    }

    #[test]
    fn many_seeds() {
        let cfg = TcpConfig {
            timestamps: true,
            sack: true,
            window_scaling: true,
            delayed_ack: 200 * US,
            nodelay: false,
            ..config()
        };
        for seed in 100..120 {
            run(&cfg, false, 8, 100 * US, seed, 30_000);
            run(&config(), false, 8, 100 * US, seed, 30_000);
        }
    }

    #[test]
    fn lossy_link_without_options() {
        for (loss, seed) in [(2, 11), (10, 13)] {
            run(&config(), false, loss, 40 * US, seed, 100_000);
        }
    }
}

#[test]
fn fin_wait_2_of_a_closed_connection_is_bounded() {
    let mut c = client(&config());
    c.close(T0 + 2 * MS);
    one(&mut c, T0 + 2 * MS);
    feed(&mut c, T0 + 3 * MS, &Seg::new(IRS + 1, ISS + 2, ACK));
    assert_eq!(c.state(), State::FinWait2);
    let end = T0 + 3 * MS + 2_000 * MS;
    assert_eq!(c.next_deadline(), Some(end));
    assert_eq!(c.on_timer(end), Events::CLOSED);
    // Data arriving for a closed application is answered with a RST.
    let mut c = client(&config());
    c.close(T0 + 2 * MS);
    one(&mut c, T0 + 2 * MS);
    feed(
        &mut c,
        T0 + 3 * MS,
        &Seg::new(IRS + 1, ISS + 2, ACK).data(b"x"),
    );
    assert_eq!(c.state(), State::Closed);
    assert_eq!(one(&mut c, T0 + 3 * MS).flags, RST | ACK);
}

#[test]
fn rst_in_syn_received_removes_the_half_open_connection() {
    let syn = Seg::new(IRS, 0, SYN).build();
    let parsed = TcpSegment::parse(&syn, REMOTE_IP, LOCAL_IP).unwrap();
    let mut c = Connection::accept_syn(&config(), ends(), &parsed, ISS, T0);
    one(&mut c, T0);
    feed(&mut c, T0 + MS, &Seg::new(IRS + 5, 0, RST));
    assert_eq!(c.state(), State::SynReceived, "not exact: challenged");
    let ev = feed(&mut c, T0 + MS, &Seg::new(IRS + 1, 0, RST));
    assert!(ev.contains(Events::CLOSED));
    assert_eq!(c.state(), State::Closed);
}

#[test]
fn reading_a_full_buffer_announces_the_window() {
    let cfg = TcpConfig {
        recv_buffer: 4000,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 2 * MS;
    for i in 0..4u32 {
        feed(
            &mut c,
            t,
            &Seg::new(IRS + 1 + i * 1000, ISS + 1, ACK).data(&[1; 1000]),
        );
    }
    let acks = drain(&mut c, t);
    assert_eq!(acks.last().unwrap().window, 0);
    // Data beyond a zero window is not accepted, but its ACK is acknowledged.
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 4001, ISS + 1, ACK).data(&[2; 10]),
    );
    let a = one(&mut c, t);
    assert_eq!((a.ack, a.window), (IRS + 4001, 0));
    assert_eq!(c.stats().drops[TcpDrop::BeyondWindow as usize], 1);
    let mut buf = [0u8; 500];
    c.recv(t, &mut buf).unwrap();
    none(&mut c, t);
    c.recv(t, &mut buf).unwrap();
    let a = one(&mut c, t);
    assert_eq!((a.ack, a.window), (IRS + 4001, 1000), "the window update");
}

#[test]
fn time_wait_holds_no_buffers() {
    let mut c = client(&config());
    c.send(T0 + 2 * MS, &pattern(3000)).unwrap();
    drain(&mut c, T0 + 2 * MS);
    c.shutdown_write(T0 + 2 * MS).unwrap();
    drain(&mut c, T0 + 2 * MS);
    feed(
        &mut c,
        T0 + 3 * MS,
        &Seg::new(IRS + 1, ISS + 3002, ACK | FIN),
    );
    assert_eq!(c.state(), State::TimeWait);
    assert_ack(&one(&mut c, T0 + 3 * MS), ISS + 3002, IRS + 2);
    assert!(c.memory() < 256);
    none(&mut c, T0 + 4 * MS);
}

/// Counts heap allocations made by the current thread, so a test can show the data path does
/// not allocate once the buffers reached their size.
mod alloc_count {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    pub struct Counting;

    std::thread_local! {
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }

    // SAFETY: every call is forwarded to the system allocator unchanged; the counter is a
    // const-initialised thread-local Cell, which itself never allocates.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            // SAFETY: forwarded unchanged.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    pub fn allocations() -> u64 {
        COUNT.with(Cell::get)
    }
}

#[test]
fn the_data_path_does_not_allocate_once_warm() {
    let cfg = TcpConfig {
        timestamps: true,
        sack: true,
        window_scaling: true,
        delayed_ack: 100 * US,
        ..config()
    };
    let mut client = client(&cfg);
    let mut buf = vec![0u8; MAX_HEADER + 1000];
    let mut rbuf = vec![0u8; 8192];
    let data = pattern(8192);
    let mut now = T0 + 10 * MS;
    // Client-side steady state: the peer is scripted (acks everything it gets, sends replies).
    let mut peer_seq = IRS + 1;
    let mut allocs_in_engine = 0;
    // Warm-up: the send ring reaches its bound at once.
    assert_eq!(client.send(now, &pattern(64 * 1024)), Ok(64 * 1024));
    for round in 0..2000 {
        let before = alloc_count::allocations();
        let _ = client.send(now, &data[..(round * 37) % 4096 + 1]);
        let mut acked = None;
        while let Some(n) = client.poll_transmit(now, &mut buf) {
            let s = TcpSegment::parse(&buf[..n], LOCAL_IP, REMOTE_IP).unwrap();
            acked = Some(s.seq().wrapping_add(s.payload().len() as u32));
        }
        let _ = client.recv(now, &mut rbuf);
        let during = alloc_count::allocations() - before;
        if round >= 100 {
            allocs_in_engine += during;
        }
        now += 20 * US;
        if let Some(a) = acked {
            let reply = Seg::new(peer_seq, a, ACK)
                .ts(round as u32 + 100, timestamp_clock(now))
                .data(&data[..100]);
            let bytes = reply.build();
            let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
            let before = alloc_count::allocations();
            client.on_segment(now, &parsed);
            if client.next_deadline().is_some_and(|d| d <= now) {
                client.on_timer(now);
            }
            if round >= 100 {
                allocs_in_engine += alloc_count::allocations() - before;
            }
            peer_seq += 100;
        }
    }
    assert_eq!(client.error(), None);
    assert!(client.stats().bytes_out > 1_000_000);
    assert!(client.stats().bytes_in >= 190_000);
    assert_eq!(client.stats().drops, [0; TcpDrop::COUNT]);
    assert_eq!(allocs_in_engine, 0, "the warm data path allocated");
}

#[test]
fn from_handshake_is_established_with_the_agreed_options() {
    let cfg = TcpConfig {
        timestamps: true,
        sack: true,
        window_scaling: true,
        recv_buffer: 1 << 20,
        ..config()
    };
    let h = Handshake {
        ends: ends(),
        iss: ISS,
        irs: IRS,
        peer_mss: 1000,
        peer_window_scale: Some(2),
        local_window_scale: window_scale_for(cfg.recv_buffer),
        sack_permitted: true,
        ts_recent: Some(4242),
        peer_window: 1000,
    };
    let t = T0 + 5 * MS;
    let mut c = Connection::from_handshake(&cfg, &h, t);
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.peer_window(), 4000);
    none(&mut c, t);
    c.send(t, &pattern(5000)).unwrap();
    let sent = drain(&mut c, t);
    assert_eq!(
        sent.len(),
        4,
        "988 bytes each (1000 less timestamps); the 48 left of the 4000-byte window wait (SWS)"
    );
    let s = &sent[0];
    assert_eq!((s.seq, s.ack, s.payload.len()), (ISS + 1, IRS + 1, 988));
    assert_eq!(u32::from(s.window) << 5, 1 << 20);
    assert_eq!(
        s.ts,
        Some(Timestamps {
            tsval: timestamp_clock(t),
            tsecr: 4242
        })
    );
    assert_eq!(c.cwnd(), 9880, "ten segments of the size actually sent");
}

#[test]
fn time_wait_of_zero_closes_at_once() {
    let cfg = TcpConfig {
        time_wait: 0,
        ..config()
    };
    let mut c = client(&cfg);
    c.shutdown_write(T0 + 2 * MS).unwrap();
    one(&mut c, T0 + 2 * MS);
    feed(&mut c, T0 + 3 * MS, &Seg::new(IRS + 1, ISS + 2, ACK | FIN));
    // The last ACK still goes out, then the connection is gone.
    assert_ack(&one(&mut c, T0 + 3 * MS), ISS + 2, IRS + 2);
    assert_eq!(c.next_deadline(), Some(T0 + 3 * MS));
    assert_eq!(c.on_timer(T0 + 3 * MS), Events::CLOSED);
    assert_eq!(c.state(), State::Closed);
}

#[test]
fn resending_after_an_rto_skips_sacked_data() {
    let cfg = TcpConfig {
        sack: true,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 10 * MS;
    c.send(t, &pattern(4000)).unwrap();
    assert_eq!(drain(&mut c, t).len(), 4);
    // Segments 0 and 2 are lost; one duplicate ACK reports 1 and 3.
    let mut dup = Seg::new(IRS + 1, ISS + 1, ACK);
    dup.options.sack.push(ISS + 3001, ISS + 4001);
    dup.options.sack.push(ISS + 1001, ISS + 2001);
    feed(&mut c, t + MS, &dup);
    none(&mut c, t + MS);
    let d = c.next_deadline().unwrap();
    c.on_timer(d);
    let r = one(&mut c, d);
    assert_eq!((r.seq, r.payload.len()), (ISS + 1, 1000));
    let mut ack = Seg::new(IRS + 1, ISS + 2001, ACK);
    ack.options.sack.push(ISS + 3001, ISS + 4001);
    feed(&mut c, d + MS, &ack);
    let r = one(&mut c, d + MS);
    assert_eq!(
        (r.seq, r.payload.len()),
        (ISS + 2001, 1000),
        "only the hole"
    );
    assert_eq!(c.stats().rto_retransmits, 2);
    feed(&mut c, d + 2 * MS, &Seg::new(IRS + 1, ISS + 4001, ACK));
    assert_eq!(c.bytes_in_flight(), 0);
    assert_eq!(c.next_deadline(), None);
}

/// Prints what one 64-byte request/response exchange costs in the engine alone (both ends:
/// send, segment out, segment in, read, and back). A measurement, not a pass/fail test:
/// `cargo test -p corral-tcp --profile ci --lib -- --ignored --nocapture engine_round_trip`.
#[test]
#[ignore = "a measurement"]
fn engine_round_trip_cost() {
    let cfg = TcpConfig {
        timestamps: true,
        sack: true,
        window_scaling: true,
        nodelay: true,
        ..TcpConfig::default()
    };
    let client_ends = ends();
    let server_ends = Endpoints {
        local: client_ends.remote,
        remote: client_ends.local,
    };
    let mut now = T0;
    let mut client = Connection::connect(&cfg, client_ends, 1, now);
    let mut buf = vec![0u8; MAX_HEADER + usize::from(cfg.mss)];
    let n = client.poll_transmit(now, &mut buf).unwrap();
    let syn = TcpSegment::parse(&buf[..n], LOCAL_IP, REMOTE_IP).unwrap();
    let mut server = Connection::accept_syn(&cfg, server_ends, &syn, 2, now);
    let deliver = |from: &mut Connection, to: &mut Connection, now: Nanos, buf: &mut [u8]| {
        while let Some(n) = from.poll_transmit(now, buf) {
            let (src, dst) = (*from.ends().local.ip(), *from.ends().remote.ip());
            let seg = TcpSegment::parse(&buf[..n], src, dst).unwrap();
            to.on_segment(now, &seg);
        }
    };
    deliver(&mut server, &mut client, now, &mut buf);
    deliver(&mut client, &mut server, now, &mut buf);
    assert_eq!(server.state(), State::Established);
    let request = [7u8; 64];
    let mut rbuf = [0u8; 256];
    let rounds = 1_000_000u32;
    let start = std::time::Instant::now();
    for _ in 0..rounds {
        now += 10 * US;
        client.send(now, &request).unwrap();
        deliver(&mut client, &mut server, now, &mut buf);
        assert_eq!(server.recv(now, &mut rbuf), Ok(64));
        server.send(now, &rbuf[..64]).unwrap();
        deliver(&mut server, &mut client, now, &mut buf);
        assert_eq!(client.recv(now, &mut rbuf), Ok(64));
    }
    let per = start.elapsed().as_nanos() / u128::from(rounds);
    eprintln!(
        "engine: {per} ns per 64-byte request/response (both ends, checksums included); \
         segments out {} + {}",
        client.stats().segments_out,
        server.stats().segments_out
    );
}

#[test]
#[ignore = "a measurement"]
fn idle_connection_size() {
    let c = client(&TcpConfig::default());
    eprintln!(
        "Connection: {} bytes inline + {} bytes of heap when idle (NewReno)",
        core::mem::size_of::<Connection>(),
        c.memory()
    );
}

#[test]
fn a_probe_does_not_stand_in_for_an_owed_ack() {
    let cfg = TcpConfig {
        delayed_ack: 40 * MS,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 5 * MS;
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).window(0));
    c.send(t, b"waiting").unwrap();
    let probe_at = c.next_deadline().unwrap();
    assert_eq!(probe_at, t + 10 * MS);
    // Data arrives just before the probe: its ACK is delayed.
    feed(
        &mut c,
        probe_at - US,
        &Seg::new(IRS + 1, ISS + 1, ACK).window(0).data(b"q"),
    );
    none(&mut c, probe_at - US);
    c.on_timer(probe_at);
    let p = one(&mut c, probe_at);
    assert_eq!(p.seq, ISS, "the probe");
    // The delayed ACK still comes, on its own deadline.
    let delack = probe_at - US + 40 * MS;
    assert_eq!(c.next_deadline(), Some(probe_at + 20 * MS));
    c.on_timer(probe_at + 20 * MS);
    assert_eq!(one(&mut c, probe_at + 20 * MS).seq, ISS);
    assert_eq!(c.next_deadline(), Some(delack));
    c.on_timer(delack);
    assert_ack(&one(&mut c, delack), ISS + 1, IRS + 2);
}

#[test]
fn time_wait_lets_a_newer_syn_start_a_new_incarnation() {
    for timestamps in [false, true] {
        let cfg = TcpConfig {
            timestamps,
            ..config()
        };
        let mut c = client(&cfg);
        c.shutdown_write(T0 + 2 * MS).unwrap();
        drain(&mut c, T0 + 2 * MS);
        let fin = Seg::new(IRS + 1, ISS + 2, ACK | FIN);
        let fin = if timestamps { fin.ts(100, 0) } else { fin };
        feed(&mut c, T0 + 3 * MS, &fin);
        drain(&mut c, T0 + 3 * MS);
        assert_eq!(c.state(), State::TimeWait);
        let check = |seq: u32, ts: Option<u32>| {
            let mut syn = Seg::new(seq, 0, SYN);
            if let Some(v) = ts {
                syn = syn.ts(v, 0);
            }
            let bytes = syn.build();
            let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
            c.time_wait_accepts_syn(&parsed)
        };
        if timestamps {
            assert!(
                check(IRS, Some(101)),
                "newer timestamp, whatever the sequence number"
            );
            assert!(!check(IRS + 100_000, Some(99)));
            assert!(!check(IRS + 100_000, None));
        } else {
            assert!(check(IRS + 100_000, None));
            assert!(!check(IRS + 1, None), "not beyond RCV.NXT");
        }
        // Not accepted: the SYN gets a challenge ACK and TIME-WAIT goes on.
        let syn = Seg::new(IRS, 0, SYN);
        feed(&mut c, T0 + 4 * MS, &syn);
        assert_eq!(one(&mut c, T0 + 4 * MS).ack, IRS + 2);
        assert_eq!(c.state(), State::TimeWait);
    }
}

/// The peer retransmits below the sequence number its last ACK carried (after its go-back-N
/// its ACKs carry its SND.MAX): the retransmission's ACK moves SND.UNA and its window is the
/// newest, and it must be taken, or the old window counted from the new SND.UNA reaches past
/// what the peer offered.
#[test]
fn an_ack_that_moves_snd_una_updates_the_window_from_an_older_sequence_number() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    c.send(t, &pattern(20_000)).unwrap();
    let first = drain(&mut c, t);
    assert!(!first.is_empty());
    // The peer sent 2000 bytes we never saw; its ACK carries its SND.MAX past them.
    feed(
        &mut c,
        t + MS,
        &Seg::new(IRS + 1 + 2000, ISS + 1 + 2000, ACK).window(10_000),
    );
    assert_eq!(c.peer_window(), 10_000);
    drain(&mut c, t + MS);
    // Its retransmission of the first 1000: acknowledges up to 6000 with a window of 1000.
    feed(
        &mut c,
        t + 2 * MS,
        &Seg::new(IRS + 1, ISS + 1 + 6000, ACK)
            .window(1000)
            .data(&pattern(1000)),
    );
    assert_eq!(c.peer_window(), 1000, "the window of the newest ACK");
    let edge = ISS + 1 + 7000;
    for s in drain(&mut c, t + 2 * MS) {
        assert!(
            s.seq
                .wrapping_add(s.payload.len() as u32)
                .wrapping_sub(edge) as i32
                <= 0,
            "sent past the peer's window: {s:?}"
        );
    }
}

/// What we sent past SND.UNA was lost and the peer's window then closed at SND.UNA (its
/// application stopped reading). Our ACK of the peer's data must sit where the peer accepts a
/// zero-length segment, SND.UNA (its RCV.NXT), not at SND.MAX beyond its window, where it
/// would be dropped and both sides would wait for each other for good.
#[test]
fn an_ack_behind_a_closed_window_carries_an_acceptable_sequence_number() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    c.send(t, &pattern(5000)).unwrap();
    let sent = drain(&mut c, t);
    assert_eq!(sent.len(), 5);
    // The peer got the first 2000 and no more, and its buffer is full.
    feed(
        &mut c,
        t + MS,
        &Seg::new(IRS + 1, ISS + 1 + 2000, ACK).window(0),
    );
    drain(&mut c, t + MS);
    feed(
        &mut c,
        t + 2 * MS,
        &Seg::new(IRS + 1, ISS + 1 + 2000, ACK | PSH)
            .window(0)
            .data(&pattern(1000)),
    );
    let acks: Vec<Sent> = drain(&mut c, t + 2 * MS)
        .into_iter()
        .filter(|s| s.payload.is_empty())
        .collect();
    assert!(!acks.is_empty(), "the peer's data is acknowledged");
    for a in &acks {
        assert_ack(a, ISS + 1 + 2000, IRS + 1 + 1000);
    }
}

#[test]
fn bare_acks_matter_only_to_handshakes_closes_and_more_than_one_segment_in_flight() {
    let cfg = config();
    let c = Connection::connect(&cfg, ends(), ISS, T0);
    assert!(c.needs_prompt_acks(), "SYN-SENT waits for the SYN-ACK");
    let mut c = server(&cfg);
    assert!(!c.needs_prompt_acks(), "established and idle");
    // A reply of one segment: its ACK only stops the retransmission timer.
    assert_eq!(c.send(T0 + 2 * MS, b"reply"), Ok(5));
    one(&mut c, T0 + 2 * MS);
    assert!(!c.needs_prompt_acks(), "one segment in flight");
    feed(&mut c, T0 + 3 * MS, &Seg::new(IRS + 1, ISS + 6, ACK));
    // Two segments in flight: duplicate ACKs would drive fast retransmit.
    c.set_nodelay(true);
    assert_eq!(c.send(T0 + 4 * MS, &pattern(1500)), Ok(1500));
    assert_eq!(drain(&mut c, T0 + 4 * MS).len(), 2);
    assert!(c.needs_prompt_acks(), "1,500 bytes in flight, MSS 1,000");
    feed(&mut c, T0 + 5 * MS, &Seg::new(IRS + 1, ISS + 1506, ACK));
    assert!(!c.needs_prompt_acks(), "all acknowledged");
    // Data the window holds back waits for an ACK to open it.
    feed(
        &mut c,
        T0 + 6 * MS,
        &Seg::new(IRS + 1, ISS + 1506, ACK).window(0),
    );
    assert_eq!(c.send(T0 + 6 * MS, b"held"), Ok(4));
    drain(&mut c, T0 + 6 * MS);
    assert!(c.needs_prompt_acks(), "unsent data behind a zero window");
    feed(&mut c, T0 + 7 * MS, &Seg::new(IRS + 1, ISS + 1506, ACK));
    drain(&mut c, T0 + 7 * MS);
    feed(&mut c, T0 + 8 * MS, &Seg::new(IRS + 1, ISS + 1510, ACK));
    assert!(!c.needs_prompt_acks());
    // Our FIN waits for its ACK.
    c.close(T0 + 9 * MS);
    drain(&mut c, T0 + 9 * MS);
    assert_eq!(c.state(), State::FinWait1);
    assert!(c.needs_prompt_acks(), "FIN-WAIT-1");
    feed(&mut c, T0 + 10 * MS, &Seg::new(IRS + 1, ISS + 1511, ACK));
    assert_eq!(c.state(), State::FinWait2);
    assert!(
        !c.needs_prompt_acks(),
        "FIN-WAIT-2 waits for the peer's FIN, not an ACK"
    );
}

/// A flood of forged segments outside the window (bare ACKs and data, beyond the right edge
/// and far below RCV.NXT) draws at most [`input::THROTTLED_ACKS_PER_SECOND`] ACKs a second,
/// and challenge ACKs share that budget (RFC 5961 §7).
#[test]
fn acks_for_segments_outside_the_window_share_the_challenge_ack_budget() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    let limit = u64::from(input::THROTTLED_ACKS_PER_SECOND);
    let beyond = IRS + 1 + 70_000;
    let far_past = IRS.wrapping_sub(10_000_000);
    let forged = [
        Seg::new(beyond, ISS + 1, ACK),
        Seg::new(far_past, ISS + 1, ACK),
        Seg::new(beyond, ISS + 1, ACK).data(b"forged"),
        Seg::new(far_past, ISS + 1, ACK | FIN).data(b"forged"),
    ];
    let mut acks = 0;
    for i in 0..2 * limit {
        feed(&mut c, t, &forged[i as usize % forged.len()]);
        for a in drain(&mut c, t) {
            assert_ack(&a, ISS + 1, IRS + 1);
            acks += 1;
        }
    }
    assert_eq!(acks, limit, "one ACK per allowed segment");
    let s = c.stats();
    assert_eq!(
        (s.out_of_window_acks, s.acks_rate_limited, s.challenge_acks),
        (limit, limit, 0)
    );
    assert_eq!(s.drops[TcpDrop::OutOfWindow as usize], limit);
    assert_eq!(s.duplicate_segments, limit, "the far past counts as old");
    // The budget is spent for challenge ACKs too.
    feed(&mut c, t, &Seg::new(IRS + 100, 0, RST));
    feed(&mut c, t, &Seg::new(IRS + 10, 0, SYN));
    none(&mut c, t);
    assert_eq!(c.stats().challenge_acks, 0);
    assert_eq!(c.stats().acks_rate_limited, limit + 2);
    assert_eq!(c.recv_available(), 0, "nothing forged was taken");
    assert_eq!(c.state(), State::Established);
    // A second later it is back, for either kind.
    let t = t + 1_000 * MS;
    feed(&mut c, t, &forged[0]);
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 1);
    feed(&mut c, t, &Seg::new(IRS + 100, 0, RST));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 1);
    let s = c.stats();
    assert_eq!((s.out_of_window_acks, s.challenge_acks), (limit + 1, 1));
}

/// With the budget spent by forged segments, the ACKs a peer in step with us waits for still
/// go out at once: for out-of-order data in the window (its duplicate ACKs drive fast
/// retransmit), for data past the right edge that was trimmed, and for what lands just below
/// RCV.NXT: a retransmission whose ACK was lost, a keepalive, a zero-window probe, a FIN
/// retransmitted in TIME-WAIT.
#[test]
fn acks_that_recovery_depends_on_are_not_throttled() {
    let cfg = TcpConfig {
        recv_buffer: 4096,
        ..config()
    };
    let mut c = client(&cfg);
    let t = T0 + 2 * MS;
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).data(b"hello"));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 6);
    let limit = u64::from(input::THROTTLED_ACKS_PER_SECOND);
    for _ in 0..limit + 10 {
        feed(&mut c, t, &Seg::new(IRS + 1 + 10_000, ISS + 1, ACK));
        drain(&mut c, t);
    }
    let suppressed = c.stats().acks_rate_limited;
    assert_eq!(suppressed, 10);
    // Out of order, in the window.
    feed(&mut c, t, &Seg::new(IRS + 9, ISS + 1, ACK).data(b"late"));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 6);
    feed(&mut c, t, &Seg::new(IRS + 9, ISS + 1, ACK).data(b"late"));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 6);
    feed(&mut c, t, &Seg::new(IRS + 6, ISS + 1, ACK).data(b"abc"));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 13);
    // Data past the right edge: trimmed and acknowledged.
    let window = cfg.recv_buffer as u32 - 12;
    let over = pattern(window as usize + 1000);
    feed(&mut c, t, &Seg::new(IRS + 13, ISS + 1, ACK).data(&over));
    let a = one(&mut c, t);
    assert_eq!((a.ack, a.window), (IRS + 13 + window, 0));
    assert_eq!(c.stats().drops[TcpDrop::BeyondWindow as usize], 1);
    let rcv_nxt = IRS + 13 + window;
    // Just below RCV.NXT: a retransmission of data already had, a keepalive (one below the
    // peer's SND.UNA, no data), one as far back as a receive buffer goes.
    let acked_before = c.stats().out_of_window_acks;
    for seq in [IRS + 1, rcv_nxt - 1, rcv_nxt - 1 - cfg.recv_buffer as u32] {
        let seg = if seq == rcv_nxt - 1 {
            Seg::new(seq, ISS + 1, ACK)
        } else {
            Seg::new(seq, ISS + 1, ACK).data(b"old")
        };
        feed(&mut c, t, &seg);
        assert_ack(&one(&mut c, t), ISS + 1, rcv_nxt);
    }
    assert_eq!(c.stats().out_of_window_acks, acked_before + 3);
    // One byte further back is out of a peer's reach: throttled.
    feed(
        &mut c,
        t,
        &Seg::new(rcv_nxt - 2 - cfg.recv_buffer as u32, ISS + 1, ACK),
    );
    none(&mut c, t);
    assert_eq!(c.stats().acks_rate_limited, suppressed + 1);
    let mut buf = vec![0u8; 2 * cfg.recv_buffer];
    assert_eq!(c.recv(t, &mut buf), Ok(12 + window as usize));

    // TIME-WAIT: the peer's FIN again, because our ACK of it was lost.
    let mut c = client(&cfg);
    c.close(t);
    assert_eq!(one(&mut c, t).flags, ACK | FIN);
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 2, ACK | FIN));
    assert_ack(&one(&mut c, t), ISS + 2, IRS + 2);
    assert_eq!(c.state(), State::TimeWait);
    for _ in 0..limit + 1 {
        feed(&mut c, t, &Seg::new(IRS + 1 + 70_000, ISS + 2, ACK));
        drain(&mut c, t);
    }
    assert_eq!(c.stats().acks_rate_limited, 1);
    feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 2, ACK | FIN));
    assert_ack(&one(&mut c, t + MS), ISS + 2, IRS + 2);
    assert_eq!(c.next_deadline(), Some(t + MS + cfg.time_wait));
}

/// A timestamp older than TS.Recent is as easy to forge as a sequence number outside the
/// window (a random one is older half the time): PAWS's ACKs are throttled wherever the
/// segment lies, even in the window.
#[test]
fn paws_failures_are_answered_within_the_budget() {
    let t = T0 + 5 * MS;
    let mut c = client_with_ts_recent_100(t);
    let limit = u64::from(input::THROTTLED_ACKS_PER_SECOND);
    let mut acks = 0;
    for i in 0..limit + 20 {
        let seq = if i % 2 == 0 { IRS + 4 } else { IRS + 1 };
        feed(
            &mut c,
            t,
            &Seg::new(seq, ISS + 1, ACK).data(b"old").ts(50, 0),
        );
        acks += drain(&mut c, t).len() as u64;
    }
    assert_eq!(acks, limit);
    let s = c.stats();
    assert_eq!(s.drops[TcpDrop::PawsRejected as usize], limit + 20);
    assert_eq!((s.out_of_window_acks, s.acks_rate_limited), (limit, 20));
    assert_eq!(c.recv_available(), 3);
    // A segment with a fresh timestamp is taken and acknowledged as ever.
    feed(
        &mut c,
        t,
        &Seg::new(IRS + 4, ISS + 1, ACK).data(b"more").ts(101, 0),
    );
    assert_eq!(one(&mut c, t).ack, IRS + 8);
}

/// A SYN outside the window draws a challenge ACK, not a duplicate ACK (RFC 5961 §4 checks
/// the SYN whatever its sequence number).
#[test]
fn a_syn_outside_the_window_is_challenged() {
    let mut c = client(&config());
    let t = T0 + 2 * MS;
    feed(&mut c, t, &Seg::new(IRS.wrapping_sub(1_000_000), 0, SYN));
    assert_ack(&one(&mut c, t), ISS + 1, IRS + 1);
    let s = c.stats();
    assert_eq!(s.drops[TcpDrop::SynChallenged as usize], 1);
    assert_eq!((s.challenge_acks, s.out_of_window_acks), (1, 0));
    assert_eq!(c.state(), State::Established);
}

/// Settings for RFC 6298 §5.7: the RFC's 1 s initial RTO and a ceiling above 3 s.
fn rfc6298_config(timestamps: bool) -> TcpConfig {
    TcpConfig {
        timestamps,
        rto_initial: 1_000 * MS,
        rto_max: 60_000 * MS,
        ..config()
    }
}

/// Active open, RFC 6298 §5.7: our SYN timed out, so data transmission begins with a 3 s RTO;
/// the first ACK of data times the path again. Without the timeout, the SYN-ACK's sample sets
/// the RTO.
#[test]
fn rto_is_3_s_once_connected_after_the_syn_timed_out() {
    let cfg = rfc6298_config(false);
    for syn_lost in [false, true] {
        let mut c = Connection::connect(&cfg, ends(), ISS, T0);
        one(&mut c, T0);
        let mut t = T0;
        if syn_lost {
            t += 1_000 * MS;
            c.on_timer(t);
            assert_eq!(one(&mut c, t).flags, SYN);
            assert_eq!(c.rto(), 2_000 * MS, "backed off");
        }
        let mut synack = Seg::new(IRS, ISS + 1, SYN | ACK);
        synack.options.mss = Some(1000);
        t += 2 * MS;
        assert!(feed(&mut c, t, &synack).contains(Events::ESTABLISHED));
        assert_ack(&one(&mut c, t), ISS + 1, IRS + 1);
        if !syn_lost {
            assert_eq!(c.srtt(), Some(2 * MS));
            assert_eq!(c.rto(), 10 * MS, "from the handshake's sample");
            continue;
        }
        assert_eq!(c.srtt(), None, "Karn: the SYN went twice");
        assert_eq!(c.rto(), 3_000 * MS);
        c.send(t, b"data").unwrap();
        one(&mut c, t);
        assert_eq!(c.next_deadline(), Some(t + 3_000 * MS));
        // Lost: the timer fires 3 s later, and backs off from 3 s.
        t += 3_000 * MS;
        c.on_timer(t);
        assert_eq!(one(&mut c, t).payload, b"data");
        assert_eq!(c.next_deadline(), Some(t + 6_000 * MS));
        // A later segment is timed and sets the RTO from its sample as usual.
        feed(&mut c, t + 2 * MS, &Seg::new(IRS + 1, ISS + 5, ACK));
        c.send(t + 2 * MS, b"more").unwrap();
        one(&mut c, t + 2 * MS);
        feed(&mut c, t + 4 * MS, &Seg::new(IRS + 1, ISS + 9, ACK));
        assert_eq!(c.srtt(), Some(2 * MS));
        assert_eq!(c.rto(), 10 * MS);
    }
}

/// Passive open, RFC 6298 §5.7: our SYN-ACK timed out, so the RTO is 3 s once the peer's ACK
/// arrives, even when that ACK echoes the latest SYN-ACK and gives a sample (kept for the
/// next one). A SYN-ACK sent again for a duplicate SYN, with no timeout, changes nothing:
/// without a sample the RTO is the configured initial one.
#[test]
fn rto_is_3_s_once_accepted_after_the_syn_ack_timed_out() {
    let accept = |cfg: &TcpConfig| {
        let mut syn = Seg::new(IRS, 0, SYN);
        syn.options.mss = Some(1000);
        if cfg.timestamps {
            syn.options.timestamps = Some(Timestamps { tsval: 5, tsecr: 0 });
        }
        let bytes = syn.build();
        let parsed = TcpSegment::parse(&bytes, REMOTE_IP, LOCAL_IP).unwrap();
        let mut c = Connection::accept_syn(cfg, ends(), &parsed, ISS, T0);
        assert_eq!(one(&mut c, T0).flags, SYN | ACK);
        c
    };
    // The SYN-ACK timed out; the ACK (no timestamps) times nothing.
    let cfg = rfc6298_config(false);
    let mut c = accept(&cfg);
    let t = T0 + 1_000 * MS;
    c.on_timer(t);
    assert_eq!(one(&mut c, t).flags, SYN | ACK);
    let t = t + MS;
    assert!(feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK)).contains(Events::ESTABLISHED));
    assert_eq!((c.srtt(), c.rto()), (None, 3_000 * MS));
    c.send(t, b"reply").unwrap();
    one(&mut c, t);
    assert_eq!(c.next_deadline(), Some(t + 3_000 * MS));

    // With timestamps, the ACK echoes the second SYN-ACK: a sample, and still 3 s.
    let cfg = rfc6298_config(true);
    let mut c = accept(&cfg);
    let t = T0 + 1_000 * MS;
    c.on_timer(t);
    let again = one(&mut c, t).ts.unwrap().tsval;
    let t = t + MS;
    feed(&mut c, t, &Seg::new(IRS + 1, ISS + 1, ACK).ts(6, again));
    assert_eq!((c.srtt(), c.rto()), (Some(MS), 3_000 * MS));
    c.send(t, b"reply").unwrap();
    let d = one(&mut c, t);
    assert_eq!(c.next_deadline(), Some(t + 3_000 * MS));
    // The next sample replaces it (RFC 6298 §2.3 from the SRTT and RTTVAR kept).
    feed(
        &mut c,
        t + MS,
        &Seg::new(IRS + 1, ISS + 6, ACK).ts(7, d.ts.unwrap().tsval),
    );
    assert_eq!((c.srtt(), c.rto()), (Some(MS), 10 * MS));

    // The peer's SYN came twice and was answered twice, but no timer expired.
    let cfg = rfc6298_config(false);
    let mut c = accept(&cfg);
    let t = T0 + 500 * MS;
    let mut syn = Seg::new(IRS, 0, SYN);
    syn.options.mss = Some(1000);
    feed(&mut c, t, &syn);
    assert_eq!(one(&mut c, t).flags, SYN | ACK);
    feed(&mut c, t + MS, &Seg::new(IRS + 1, ISS + 1, ACK));
    assert_eq!(c.state(), State::Established);
    assert_eq!((c.srtt(), c.rto()), (None, 1_000 * MS), "the initial RTO");
}

/// RFC 6298 §5.7 only raises an RTO below 3 s: a configured initial RTO of 4 s stays, and a
/// ceiling below 3 s caps the 3 s.
#[test]
fn rto_after_a_handshake_timeout_respects_the_configured_bounds() {
    for (rto_initial, rto_max, expected) in [
        (4_000 * MS, 60_000 * MS, 4_000 * MS),
        (100 * MS, 2_000 * MS, 2_000 * MS),
    ] {
        let cfg = TcpConfig {
            rto_initial,
            rto_max,
            ..config()
        };
        let mut c = Connection::connect(&cfg, ends(), ISS, T0);
        one(&mut c, T0);
        let t = T0 + rto_initial;
        c.on_timer(t);
        one(&mut c, t);
        feed(&mut c, t + MS, &Seg::new(IRS, ISS + 1, SYN | ACK));
        assert_eq!(c.state(), State::Established);
        assert_eq!(
            c.rto(),
            expected,
            "rto_initial {rto_initial}, rto_max {rto_max}"
        );
    }
}
