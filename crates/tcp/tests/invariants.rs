//! Property tests from outside the engine: a connection in any state (SYN-SENT, SYN-RECEIVED,
//! established by an active, passive or SYN-cookie open, and whatever closing state the steps
//! lead to) is fed random segments and application calls, and after every step what it emits
//! and returns must keep the sequence-space invariants:
//!
//! * nothing panics; every segment it emits verifies;
//! * SND.UNA (SND.MAX seen on the wire minus `bytes_in_flight`) never moves back, never passes
//!   SND.MAX, and no data at or below it is sent again;
//! * every payload byte it sends is the application's byte at that offset;
//! * the acknowledgment it sends never moves back and never covers bytes the peer did not send;
//! * the right edge of the receive window it advertises never moves left;
//! * `recv` returns exactly the peer's stream, in order, and only bytes the peer sent;
//! * memory stays within the buffers, and a closed connection has no deadline.

use std::net::{Ipv4Addr, SocketAddrV4};

use corral_tcp::conn::window_scale_for;
use corral_tcp::listener::{Listener, ListenerConfig, SynOutcome};
use corral_tcp::seq::Seq;
use corral_tcp::{Connection, Endpoints, Keepalive, Nanos, State, TcpConfig};
use corral_wire::{SackList, TcpFlags, TcpHeader, TcpOption, TcpOptionSet, TcpSegment, Timestamps};
use proptest::prelude::*;

const DUT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
const PEER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
const MS: Nanos = 1_000_000;
const T0: Nanos = 5_000_000 * MS;

fn dut_ends() -> Endpoints {
    Endpoints {
        local: DUT,
        remote: PEER,
    }
}

/// The application's byte at stream offset `i` (the peer's stream uses another salt).
fn stream_byte(i: u64, salt: u8) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 8) ^ u64::from(salt)) as u8
}

const DUT_SALT: u8 = 0x5a;
const PEER_SALT: u8 = 0xa5;

#[derive(Clone, Copy, Debug)]
enum Start {
    SynSent,
    SynReceived,
    Active,
    Passive,
    Cookie,
}

#[derive(Clone, Debug)]
enum Step {
    Segment {
        seq_off: i32,
        ack_off: i32,
        flags: u8,
        window: u16,
        len: u16,
        ts: Option<(bool, u32)>,
        sack: Vec<(i32, u16)>,
    },
    Timer,
    Advance(u32),
    Send(u16),
    Recv(u16),
    Shutdown,
    Close,
    Abort,
}

fn step() -> impl Strategy<Value = Step> {
    let segment = (
        // In order (0) most often, so that streams get somewhere.
        prop_oneof![6 => Just(0), 4 => -1500i32..3000, 1 => any::<i32>()],
        // i32::MIN stands for "everything in flight", i32::MIN + 1 for "half of it".
        prop_oneof![4 => Just(i32::MIN), 1 => Just(i32::MIN + 1), 3 => -200i32..4000, 1 => any::<i32>()],
        prop_oneof![8 => Just(0x10u8), 4 => Just(0x18u8), 1 => Just(0x11u8), 4 => any::<u8>()],
        prop_oneof![3 => Just(u16::MAX), 1 => Just(0u16), 2 => any::<u16>()],
        prop_oneof![Just(0u16), 1u16..1500],
        proptest::option::weighted(0.9, (prop::bool::weighted(0.97), any::<u32>())),
        proptest::collection::vec((-100i32..4000, 1u16..3000), 0..3),
    )
        .prop_map(
            |(seq_off, ack_off, flags, window, len, ts, sack)| Step::Segment {
                seq_off,
                ack_off,
                flags,
                window,
                len,
                ts,
                sack,
            },
        );
    prop_oneof![
        16 => segment,
        2 => Just(Step::Timer),
        2 => (0u32..3_000_000_000).prop_map(Step::Advance),
        3 => (0u16..20_000).prop_map(Step::Send),
        3 => (0u16..20_000).prop_map(Step::Recv),
        1 => Just(Step::Shutdown),
        1 => Just(Step::Close),
        1 => Just(Step::Abort),
    ]
}

/// What the test knows of the connection from the outside.
struct Harness {
    cfg: TcpConfig,
    c: Connection,
    now: Nanos,
    iss: Seq,
    peer_iss: Seq,
    /// Highest SND.MAX seen on the wire, and the SND.UNA derived from it.
    snd_max: Seq,
    una: Seq,
    /// Bytes the application got the connection to take.
    written: u64,
    /// The peer's stream: offsets fed so far (ranges), how much `recv` returned.
    fed: Vec<(u64, u64)>,
    received: u64,
    /// The last acknowledgment and right window edge the connection advertised.
    last_ack: Option<Seq>,
    last_edge: Option<Seq>,
    /// The receive window's scale, once a handshake the test made fixed it.
    rcv_wscale: Option<u8>,
    peer_tsval: u32,
    last_dut_tsval: u32,
    fin_sent_by_peer: bool,
}

impl Harness {
    fn feed(
        &mut self,
        seq: Seq,
        ack: Seq,
        flags: TcpFlags,
        window: u16,
        (payload_off, len): (u64, usize),
        options: TcpOptionSet,
    ) {
        let h = TcpHeader {
            src_port: PEER.port(),
            dst_port: DUT.port(),
            seq: seq.0,
            ack: ack.0,
            flags,
            window,
            urgent: 0,
            options,
        };
        let hl = h.header_len();
        let mut buf = vec![0u8; hl + len];
        for (k, b) in buf[hl..].iter_mut().enumerate() {
            *b = stream_byte(payload_off.wrapping_add(k as u64), PEER_SALT);
        }
        let n = h.emit(&mut buf, len, *PEER.ip(), *DUT.ip()).unwrap();
        let seg = TcpSegment::parse(&buf[..n], *PEER.ip(), *DUT.ip()).unwrap();
        if len > 0 && payload_off < 1 << 40 {
            self.fed.push((payload_off, payload_off + len as u64));
        }
        self.c.on_segment(self.now, &seg);
    }

    /// The peer's stream bytes the connection could have in order: the contiguous prefix of
    /// everything fed.
    fn contiguous_fed(&self) -> u64 {
        let mut ranges = self.fed.clone();
        ranges.sort_unstable();
        let mut end = 0;
        for (a, b) in ranges {
            if a > end {
                break;
            }
            end = end.max(b);
        }
        end
    }

    fn peer_options(&mut self, ts: Option<(bool, u32)>, sack: &[(i32, u16)]) -> TcpOptionSet {
        let mut o = TcpOptionSet::default();
        if let Some((sane, raw)) = ts {
            self.peer_tsval = self.peer_tsval.wrapping_add(raw % 1000);
            let tsval = if sane { self.peer_tsval } else { raw };
            let tsecr = if sane {
                self.last_dut_tsval
            } else {
                raw.rotate_left(7)
            };
            o.timestamps = Some(Timestamps { tsval, tsecr });
        }
        let mut list = SackList::EMPTY;
        for &(l, n) in sack {
            let left = self.una.0.wrapping_add(l as u32);
            list.push(left, left.wrapping_add(u32::from(n)));
        }
        o.sack = list;
        o
    }

    /// Drains what the connection sends and checks every segment.
    fn drain(&mut self) -> Result<Vec<(TcpFlags, u32, u32)>, TestCaseError> {
        let mut sent = Vec::new();
        let mut buf = vec![0u8; 9100];
        let before = self.c.state();
        while let Some(n) = self.c.poll_transmit(self.now, &mut buf) {
            prop_assert!(sent.len() < 10_000, "poll_transmit never ends");
            let seg = TcpSegment::parse(&buf[..n], *DUT.ip(), *PEER.ip());
            prop_assert!(seg.is_ok(), "an emitted segment does not verify");
            let seg = seg.unwrap();
            let flags = seg.flags();
            sent.push((flags, seg.seq(), seg.ack()));
            for o in seg.options() {
                if let TcpOption::Timestamps(t) = o {
                    self.last_dut_tsval = t.tsval;
                }
            }
            if flags.contains(TcpFlags::RST) {
                continue;
            }
            let seq = Seq(seg.seq());
            let len = seg.payload().len() as u32;
            let end = seq
                + len
                + u32::from(flags.contains(TcpFlags::SYN))
                + u32::from(flags.contains(TcpFlags::FIN));
            if len > 0 {
                // Only data above SND.UNA is (re)sent, and it is the application's.
                prop_assert!(
                    (seq + len).gt(self.una),
                    "resent acknowledged data: {seq:?}+{len} at una {:?}",
                    self.una
                );
                let off = u64::from(seq - (self.iss + 1));
                prop_assert!(
                    off + u64::from(len) <= self.written,
                    "sent beyond what was written: {off}+{len} > {}",
                    self.written
                );
                for (k, &b) in seg.payload().iter().enumerate() {
                    prop_assert_eq!(
                        b,
                        stream_byte(off + k as u64, DUT_SALT),
                        "payload byte {} differs",
                        off + k as u64
                    );
                }
            }
            if end.gt(self.snd_max) {
                self.snd_max = end;
            }
            if flags.contains(TcpFlags::ACK) {
                let ack = Seq(seg.ack());
                if let Some(last) = self.last_ack {
                    prop_assert!(ack.ge(last), "ACK went back from {last:?} to {ack:?}");
                }
                self.last_ack = Some(ack);
                let acked = ack - (self.peer_iss + 1);
                let most = self.contiguous_fed() + 1;
                prop_assert!(
                    u64::from(acked) <= most,
                    "acknowledged {acked} bytes of a stream with {most} contiguous"
                );
                if let (Some(shift), false) = (self.rcv_wscale, flags.contains(TcpFlags::SYN)) {
                    let edge = ack + (u32::from(seg.window()) << shift);
                    // The edge the receive buffer can honour: what the application read plus
                    // the buffer (one more once the peer's FIN took a sequence number).
                    let buffer_edge =
                        self.peer_iss + 1 + self.received as u32 + self.cfg.recv_buffer as u32;
                    prop_assert!(
                        edge.le(buffer_edge + u32::from(self.fin_sent_by_peer)),
                        "window edge {edge:?} beyond what the buffer holds ({buffer_edge:?})"
                    );
                    if let Some(last) = self.last_edge {
                        // It moves left only when no edge on the 2^shift grid from this ACK
                        // covers the old one within the buffer: this one is the largest.
                        prop_assert!(
                            edge.ge(last) || (edge + (1u32 << shift)).gt(buffer_edge),
                            "window edge moved left from {last:?} to {edge:?} with the buffer \
                             holding up to {buffer_edge:?} ({before:?} -> {:?})",
                            self.c.state()
                        );
                    }
                    self.last_edge = Some(self.last_edge.map_or(edge, |l| l.max(edge)));
                }
            }
        }
        Ok(sent)
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        let state = self.c.state();
        if state == State::Closed {
            prop_assert_eq!(self.c.next_deadline(), None);
            return Ok(());
        }
        let in_flight = self.c.bytes_in_flight();
        prop_assert!(
            u64::from(in_flight) <= self.written + 2,
            "{in_flight} in flight, {} written",
            self.written
        );
        if !matches!(state, State::SynSent | State::SynReceived) {
            let una = Seq(self.snd_max.0.wrapping_sub(in_flight));
            prop_assert!(
                una.ge(self.una),
                "SND.UNA went back from {:?} to {una:?}",
                self.una
            );
            self.una = una;
        }
        let bound = self.cfg.send_buffer + self.cfg.recv_buffer + 4096;
        prop_assert!(self.c.memory() <= bound, "{} bytes", self.c.memory());
        Ok(())
    }
}

fn config(options: bool) -> TcpConfig {
    TcpConfig {
        timestamps: options,
        sack: options,
        window_scaling: options,
        send_buffer: 64 * 1024,
        recv_buffer: 100_000,
        max_ooo_ranges: 4,
        keepalive: Some(Keepalive {
            idle: 50 * MS,
            interval: 10 * MS,
            probes: 2,
        }),
        delayed_ack: MS,
        time_wait: 100 * MS,
        ..TcpConfig::default()
    }
}

fn peer_syn_options(options: bool, tsval: u32, tsecr: u32) -> TcpOptionSet {
    TcpOptionSet {
        mss: Some(1460),
        window_scale: options.then_some(7),
        sack_permitted: options,
        timestamps: options.then_some(Timestamps { tsval, tsecr }),
        sack: SackList::EMPTY,
    }
}

fn start(how: Start, options: bool, iss: u32, peer_iss: u32) -> Result<Harness, TestCaseError> {
    let cfg = config(options);
    let shift = if options {
        window_scale_for(cfg.recv_buffer)
    } else {
        0
    };
    let mut h = Harness {
        c: Connection::connect(&cfg, dut_ends(), iss, T0),
        cfg: cfg.clone(),
        now: T0,
        iss: Seq(iss),
        peer_iss: Seq(peer_iss),
        snd_max: Seq(iss),
        una: Seq(iss),
        written: 0,
        fed: Vec::new(),
        received: 0,
        last_ack: None,
        last_edge: None,
        rcv_wscale: None,
        peer_tsval: 1000,
        last_dut_tsval: 0,
        fin_sent_by_peer: false,
    };
    let syn = |h: &mut Harness| {
        let o = peer_syn_options(options, h.peer_tsval, 0);
        let hd = TcpHeader {
            src_port: PEER.port(),
            dst_port: DUT.port(),
            seq: peer_iss,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65535,
            urgent: 0,
            options: o,
        };
        let mut b = vec![0u8; 60];
        let n = hd.emit(&mut b, 0, *PEER.ip(), *DUT.ip()).unwrap();
        b.truncate(n);
        b
    };
    let ack_options = |h: &Harness| TcpOptionSet {
        timestamps: options.then_some(Timestamps {
            tsval: h.peer_tsval + 1,
            tsecr: h.last_dut_tsval,
        }),
        ..TcpOptionSet::default()
    };
    match how {
        Start::SynSent | Start::Active => {
            h.drain()?;
            if let Start::Active = how {
                h.now += MS;
                let o = peer_syn_options(options, h.peer_tsval, h.last_dut_tsval);
                h.feed(
                    Seq(peer_iss),
                    Seq(iss) + 1,
                    TcpFlags::SYN | TcpFlags::ACK,
                    65535,
                    (0, 0),
                    o,
                );
                prop_assert_eq!(h.c.state(), State::Established);
                h.rcv_wscale = Some(shift);
            }
        }
        Start::SynReceived | Start::Passive => {
            let b = syn(&mut h);
            let seg = TcpSegment::parse(&b, *PEER.ip(), *DUT.ip()).unwrap();
            h.c = Connection::accept_syn(&cfg, dut_ends(), &seg, iss, T0);
            h.drain()?;
            if let Start::Passive = how {
                h.now += MS;
                let o = ack_options(&h);
                h.feed(
                    Seq(peer_iss) + 1,
                    Seq(iss) + 1,
                    TcpFlags::ACK,
                    65535,
                    (0, 0),
                    o,
                );
                prop_assert_eq!(h.c.state(), State::Established);
                h.rcv_wscale = Some(shift);
            }
        }
        Start::Cookie => {
            let mut l = Listener::new(
                DUT,
                ListenerConfig {
                    syn_backlog: 0,
                    tcp: cfg.clone(),
                    ..ListenerConfig::new([3; 16])
                },
            );
            let b = syn(&mut h);
            let seg = TcpSegment::parse(&b, *PEER.ip(), *DUT.ip()).unwrap();
            let mut out = [0u8; 60];
            let SynOutcome::Cookie { len } = l.on_syn(T0, PEER, &seg, &mut out) else {
                return Err(TestCaseError::fail("no cookie"));
            };
            let sa = TcpSegment::parse(&out[..len], *DUT.ip(), *PEER.ip()).unwrap();
            for o in sa.options() {
                if let TcpOption::Timestamps(t) = o {
                    h.last_dut_tsval = t.tsval;
                }
            }
            let cookie = sa.seq();
            h.iss = Seq(cookie);
            h.snd_max = Seq(cookie) + 1;
            h.una = Seq(cookie) + 1;
            h.now += MS;
            let o = ack_options(&h);
            let hd = TcpHeader {
                src_port: PEER.port(),
                dst_port: DUT.port(),
                seq: peer_iss.wrapping_add(1),
                ack: cookie.wrapping_add(1),
                flags: TcpFlags::ACK,
                window: 65535,
                urgent: 0,
                options: o,
            };
            let mut b = vec![0u8; 60];
            let n = hd.emit(&mut b, 0, *PEER.ip(), *DUT.ip()).unwrap();
            let ack = TcpSegment::parse(&b[..n], *PEER.ip(), *DUT.ip()).unwrap();
            let hs = l.on_ack(h.now, dut_ends(), &ack).expect("a valid cookie");
            h.c = Connection::from_handshake(&cfg, &hs, h.now);
            h.c.on_segment(h.now, &ack);
            prop_assert_eq!(h.c.state(), State::Established);
            // A cookie carries the window scale only with timestamps.
            h.rcv_wscale = Some(shift);
        }
    }
    h.drain()?;
    h.check()?;
    Ok(h)
}

fn run(
    how: Start,
    options: bool,
    iss: u32,
    peer_iss: u32,
    steps: Vec<Step>,
) -> Result<(), TestCaseError> {
    let mut h = start(how, options, iss, peer_iss)?;
    for s in steps {
        match s {
            Step::Segment {
                seq_off,
                ack_off,
                flags,
                window,
                len,
                ts,
                sack,
            } => {
                // Offsets are from RCV.NXT as the connection last acknowledged it.
                let rcv_nxt = h.last_ack.unwrap_or(h.peer_iss + 1);
                let seq = Seq(rcv_nxt.0.wrapping_add(seq_off as u32));
                let in_flight = h.c.bytes_in_flight();
                let ack_off = match ack_off {
                    i32::MIN => in_flight,
                    -0x7fff_ffff => in_flight / 2,
                    n => n as u32,
                };
                let ack = Seq(h.una.0.wrapping_add(ack_off));
                let mut flags = TcpFlags(flags & 0x3f);
                let off = u64::from(seq - (h.peer_iss + 1));
                // Once the peer has sent a FIN, its stream ends: no data past it.
                let len = if h.fin_sent_by_peer {
                    0
                } else {
                    usize::from(len)
                };
                if h.fin_sent_by_peer {
                    flags = TcpFlags(flags.0 & !TcpFlags::FIN.0);
                }
                if flags.contains(TcpFlags::FIN) && off < 1 << 31 {
                    h.fin_sent_by_peer = true;
                }
                let o = h.peer_options(ts, &sack);
                let was = h.c.state();
                let syn = flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::RST);
                let len = if off < 1 << 31 && !syn { len } else { 0 };
                h.feed(seq, ack, flags, window, (off, len), o);
                if was == State::SynSent && syn && h.c.state() != State::SynSent {
                    // The peer's SYN fixed its stream's start; options the test did not plan
                    // fixed the window scale.
                    h.peer_iss = seq;
                    h.fed.clear();
                    h.rcv_wscale = None;
                }
            }
            Step::Timer => {
                if let Some(d) = h.c.next_deadline() {
                    h.now = h.now.max(d);
                    h.c.on_timer(h.now);
                }
            }
            Step::Advance(ns) => h.now += Nanos::from(ns),
            Step::Send(n) => {
                let data: Vec<u8> = (0..u64::from(n))
                    .map(|i| stream_byte(h.written + i, DUT_SALT))
                    .collect();
                if let Ok(took) = h.c.send(h.now, &data) {
                    prop_assert!(took <= data.len());
                    h.written += took as u64;
                }
            }
            Step::Recv(n) => {
                let mut buf = vec![0u8; usize::from(n)];
                if let Ok(got) = h.c.recv(h.now, &mut buf) {
                    for (k, &b) in buf[..got].iter().enumerate() {
                        prop_assert_eq!(
                            b,
                            stream_byte(h.received + k as u64, PEER_SALT),
                            "received byte {} differs",
                            h.received + k as u64
                        );
                    }
                    h.received += got as u64;
                    prop_assert!(
                        h.received <= h.contiguous_fed(),
                        "received {} of {} sent in order",
                        h.received,
                        h.contiguous_fed()
                    );
                }
            }
            Step::Shutdown => {
                let _ = h.c.shutdown_write(h.now);
            }
            Step::Close => h.c.close(h.now),
            Step::Abort => h.c.abort(h.now),
        }
        h.drain()?;
        h.check()?;
    }
    Ok(())
}

fn start_strategy() -> impl Strategy<Value = Start> {
    prop_oneof![
        1 => Just(Start::SynSent),
        1 => Just(Start::SynReceived),
        3 => Just(Start::Active),
        3 => Just(Start::Passive),
        2 => Just(Start::Cookie),
    ]
}

/// Initial sequence numbers, often just below the wrap.
fn isn() -> impl Strategy<Value = u32> {
    prop_oneof![any::<u32>(), (0u32..100_000).prop_map(|d| u32::MAX - d)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 768, ..ProptestConfig::default() })]

    #[test]
    fn random_segments_and_calls_keep_the_sequence_space_invariants(
        how in start_strategy(),
        options in any::<bool>(),
        iss in isn(),
        peer_iss in isn(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        run(how, options, iss, peer_iss, steps)?;
    }
}
