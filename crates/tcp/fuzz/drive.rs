//! The segment path driven by arbitrary bytes: shared by the cargo-fuzz target
//! (`fuzz_targets/segments.rs`, nightly) and the stable smoke run (`tests/fuzz_smoke.rs`).
//!
//! The input picks how the connection starts (active, passive, or from a SYN cookie, with or
//! without options), then is read as a list of operations: segments whose sequence and
//! acknowledgment numbers are mostly near the connection's own (so that they reach deep into
//! the state machine) with raw, possibly malformed, option bytes and payload from the input;
//! wholly arbitrary header bytes; the same segments offered to a listener and to the RST
//! answer; timers, clock jumps, and application sends, reads, shutdowns, closes and aborts.
//! After each operation every segment the connection emits must verify, and its basic
//! bounds must hold. Any panic is a finding.

use std::net::{Ipv4Addr, SocketAddrV4};

use corral_tcp::listener::{Listener, ListenerConfig, SynOutcome};
use corral_tcp::reset::reset_for;
use corral_tcp::{Connection, Endpoints, Keepalive, Nanos, State, TcpConfig};
use corral_wire::tcp::compute_checksum;
use corral_wire::{TcpFlags, TcpHeader, TcpOptionSet, TcpSegment, Timestamps};

const LOCAL: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80);
const REMOTE: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 40000);
const MS: Nanos = 1_000_000;

struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes([self.u8()?, self.u8()?]))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes([
            self.u8()?,
            self.u8()?,
            self.u8()?,
            self.u8()?,
        ]))
    }
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
}

fn ends() -> Endpoints {
    Endpoints {
        local: LOCAL,
        remote: REMOTE,
    }
}

/// A segment from REMOTE to LOCAL with the given header fields, raw option bytes (padded to a
/// multiple of 4, at most 40) and payload, with a correct checksum.
fn build(seq: u32, ack: u32, flags: u8, window: u16, options: &[u8], payload: &[u8]) -> Vec<u8> {
    let h = TcpHeader {
        src_port: REMOTE.port(),
        dst_port: LOCAL.port(),
        seq,
        ack,
        flags: TcpFlags(flags),
        window,
        urgent: 0,
        options: TcpOptionSet::default(),
    };
    let opt_len = options.len().min(40).div_ceil(4) * 4;
    let mut seg = vec![0u8; 20 + opt_len + payload.len()];
    h.emit(&mut seg, 0, *REMOTE.ip(), *LOCAL.ip())
        .expect("20 bytes fit");
    seg[12] = (((20 + opt_len) / 4) as u8) << 4;
    seg[20..20 + options.len().min(40)].copy_from_slice(&options[..options.len().min(40)]);
    seg[20 + opt_len..].copy_from_slice(payload);
    let c = compute_checksum(&seg, *REMOTE.ip(), *LOCAL.ip());
    seg[16..18].copy_from_slice(&c.to_be_bytes());
    seg
}

struct Driver {
    cfg: TcpConfig,
    conn: Connection,
    listener: Listener,
    now: Nanos,
    /// The last ACK number the connection sent, and its highest sequence number sent: the
    /// anchors for "near" sequence and acknowledgment numbers.
    rcv_anchor: u32,
    snd_anchor: u32,
    buf: Vec<u8>,
}

impl Driver {
    fn drain(&mut self) {
        let mut emitted = 0;
        while let Some(n) = self.conn.poll_transmit(self.now, &mut self.buf) {
            emitted += 1;
            assert!(emitted < 100_000, "poll_transmit never stops");
            let seg = TcpSegment::parse(&self.buf[..n], *LOCAL.ip(), *REMOTE.ip())
                .expect("an emitted segment verifies");
            if seg.flags().contains(TcpFlags::ACK) && !seg.flags().contains(TcpFlags::RST) {
                self.rcv_anchor = seg.ack();
            }
            let end = seg.seq().wrapping_add(seg.payload().len() as u32);
            if (end.wrapping_sub(self.snd_anchor) as i32) > 0 {
                self.snd_anchor = end;
            }
        }
        let bound = self.cfg.send_buffer + self.cfg.recv_buffer + 4096;
        assert!(
            self.conn.memory() <= bound,
            "{} bytes held",
            self.conn.memory()
        );
        assert!(self.conn.recv_available() <= self.cfg.recv_buffer);
        if self.conn.state() == State::Closed {
            assert_eq!(self.conn.next_deadline(), None);
        }
    }

    /// Offers a parsed segment to everything that takes segments.
    fn offer(&mut self, bytes: &[u8]) {
        let Ok(seg) = TcpSegment::parse_unverified(bytes) else {
            return;
        };
        self.conn.on_segment(self.now, &seg);
        let mut out = [0u8; 64];
        let _ = reset_for(LOCAL, REMOTE, &seg, &mut out);
        let flags = seg.flags();
        if flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK) {
            if let SynOutcome::HalfOpen { .. } =
                self.listener.on_syn(self.now, REMOTE, &seg, &mut out)
            {
                self.listener.half_open_done();
            }
        } else if let Some(h) = self.listener.on_ack(self.now, ends(), &seg) {
            let mut c = Connection::from_handshake(&self.cfg, &h, self.now);
            c.on_segment(self.now, &seg);
            let mut buf = vec![0u8; 9100];
            while c.poll_transmit(self.now, &mut buf).is_some() {}
        }
    }
}

/// Runs one input.
pub fn drive(data: &[u8]) {
    let mut input = Input { data };
    let setup = input.u8().unwrap_or(0);
    let options = setup & 1 != 0;
    let cfg = TcpConfig {
        timestamps: options,
        sack: options,
        window_scaling: options,
        send_buffer: 32 * 1024,
        recv_buffer: 100_000,
        max_ooo_ranges: 4,
        keepalive: (setup & 2 != 0).then_some(Keepalive {
            idle: 50 * MS,
            interval: 10 * MS,
            probes: 2,
        }),
        delayed_ack: MS,
        time_wait: 100 * MS,
        nodelay: setup & 4 != 0,
        congestion_control: if setup & 8 != 0 {
            corral_tcp::CcAlgorithm::Cubic
        } else {
            corral_tcp::CcAlgorithm::NewReno
        },
        ..TcpConfig::default()
    };
    let iss = input.u32().unwrap_or(1);
    let peer_iss = input.u32().unwrap_or(2);
    let now = 1_000_000 * MS;
    let mut listener = Listener::new(
        LOCAL,
        ListenerConfig {
            syn_backlog: 1,
            accept_backlog: 2,
            tcp: cfg.clone(),
            ..ListenerConfig::new([7; 16])
        },
    );
    let syn_options: Vec<u8> = if options {
        let ts = Timestamps {
            tsval: 100,
            tsecr: 0,
        };
        let mut o = vec![2, 4, 5, 0xb4, 1, 3, 3, 7, 4, 2, 8, 10];
        o.extend_from_slice(&ts.tsval.to_be_bytes());
        o.extend_from_slice(&ts.tsecr.to_be_bytes());
        o
    } else {
        vec![2, 4, 5, 0xb4]
    };
    let syn = build(peer_iss, 0, TcpFlags::SYN.0, 65535, &syn_options, &[]);
    let syn = TcpSegment::parse(&syn, *REMOTE.ip(), *LOCAL.ip()).expect("valid SYN");
    let conn = match (setup >> 4) % 3 {
        0 => Connection::connect(&cfg, ends(), iss, now),
        1 => Connection::accept_syn(&cfg, ends(), &syn, iss, now),
        _ => {
            // Fill the backlog, then take a cookie and complete it.
            let mut out = [0u8; 64];
            let _ = listener.on_syn(now, REMOTE, &syn, &mut out);
            match listener.on_syn(now, REMOTE, &syn, &mut out) {
                SynOutcome::Cookie { len } => {
                    let sa = TcpSegment::parse(&out[..len], *LOCAL.ip(), *REMOTE.ip())
                        .expect("a cookie SYN-ACK verifies");
                    let mut o = Vec::new();
                    for opt in sa.options() {
                        if let corral_wire::TcpOption::Timestamps(t) = opt {
                            o = vec![1, 1, 8, 10];
                            o.extend_from_slice(&101u32.to_be_bytes());
                            o.extend_from_slice(&t.tsval.to_be_bytes());
                        }
                    }
                    let ack = build(
                        peer_iss.wrapping_add(1),
                        sa.seq().wrapping_add(1),
                        TcpFlags::ACK.0,
                        65535,
                        &o,
                        &[],
                    );
                    let ack = TcpSegment::parse(&ack, *REMOTE.ip(), *LOCAL.ip()).unwrap();
                    let h = listener
                        .on_ack(now, ends(), &ack)
                        .expect("a fresh cookie is valid");
                    Connection::from_handshake(&cfg, &h, now)
                }
                other => panic!("a full backlog answers with a cookie, not {other:?}"),
            }
        }
    };
    let mut d = Driver {
        cfg,
        conn,
        listener,
        now,
        rcv_anchor: peer_iss.wrapping_add(1),
        snd_anchor: iss.wrapping_add(1),
        buf: vec![0u8; 9100],
    };
    d.drain();
    let mut written = 0u64;
    while let Some(op) = input.u8() {
        match op % 16 {
            0..=6 => {
                // A segment near the connection's own numbers.
                let mode = input.u8().unwrap_or(0);
                let seq_delta = i32::from(input.u16().unwrap_or(0) as i16);
                let ack_delta = i32::from(input.u16().unwrap_or(0) as i16);
                let seq = match mode & 3 {
                    0 | 1 => d.rcv_anchor,
                    2 => d.rcv_anchor.wrapping_add(seq_delta as u32),
                    _ => input.u32().unwrap_or(0),
                };
                let ack = match (mode >> 2) & 3 {
                    0 | 1 => d.snd_anchor,
                    2 => d.snd_anchor.wrapping_add(ack_delta as u32),
                    _ => input.u32().unwrap_or(0),
                };
                let flags = if mode & 0x40 != 0 {
                    input.u8().unwrap_or(0)
                } else {
                    TcpFlags::ACK.0 | (mode & 0x80 != 0) as u8
                };
                let window = input.u16().unwrap_or(u16::MAX);
                let opt_len = usize::from(input.u8().unwrap_or(0) % 44);
                let options = if mode & 0x30 == 0 && d.cfg.timestamps {
                    // Well-formed timestamps, so that PAWS lets most segments in.
                    let mut o = vec![1, 1, 8, 10];
                    o.extend_from_slice(&(200 + written as u32).to_be_bytes());
                    o.extend_from_slice(&0u32.to_be_bytes());
                    o
                } else {
                    input.bytes(opt_len).to_vec()
                };
                let len = usize::from(input.u8().unwrap_or(0)) * 8;
                let payload = input.bytes(len).to_vec();
                let seg = build(seq, ack, flags, window, &options, &payload);
                d.offer(&seg);
            }
            7 => {
                // Arbitrary header bytes.
                let len = usize::from(input.u8().unwrap_or(0));
                let raw = input.bytes(len).to_vec();
                d.offer(&raw);
            }
            8 => {
                if let Some(t) = d.conn.next_deadline() {
                    d.now = d.now.max(t);
                    d.conn.on_timer(d.now);
                }
            }
            9 => d.now += Nanos::from(input.u32().unwrap_or(0)) * 100,
            10 | 11 => {
                let n = usize::from(input.u16().unwrap_or(0));
                let data: Vec<u8> = (0..n).map(|i| (written as usize + i) as u8).collect();
                if let Ok(took) = d.conn.send(d.now, &data) {
                    assert!(took <= n);
                    written += took as u64;
                }
            }
            12 | 13 => {
                let mut buf = vec![0u8; usize::from(input.u16().unwrap_or(0))];
                if let Ok(n) = d.conn.recv(d.now, &mut buf) {
                    assert!(n <= buf.len());
                }
            }
            14 => {
                let _ = d.conn.shutdown_write(d.now);
            }
            _ => match input.u8().unwrap_or(0) % 4 {
                0 => d.conn.abort(d.now),
                1 => d.conn.set_nodelay(true),
                _ => d.conn.close(d.now),
            },
        }
        d.drain();
    }
}
