//! A memcached server made of the TCP engine's server connections around `corral_memcache`
//! sessions, and an in-memory link that can lose, delay and reorder frames: what the fleet's
//! tests and the generator's memcache-tcp test run against. Every frame the server receives
//! is parsed with its checksums verified.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{Ipv4Addr, SocketAddrV4};

use corral_gen::nic::GEN_MAC;
use corral_memcache::{Limits, Session, Status, Store, StoreConfig};
use corral_tcp::listener::ListenerConfig;
use corral_tcp::reset::reset_for;
use corral_tcp::{Connection, Endpoints, Listener, Nanos, State, SynOutcome, TcpConfig};
use corral_wire::frame::L4_OFFSET;
use corral_wire::{Ipv4FrameSpec, MacAddr, Packet, TcpFlags, parse_frame};

pub const US: Nanos = 1_000;
pub const MS: Nanos = 1_000_000;
pub const S: Nanos = 1_000_000_000;

pub const GEN_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
pub const SERVER_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x01]);
pub const PORT: u16 = 11211;
pub const MAX_FRAME: usize = 1514;

/// xorshift64*: the link's faults, reproducible from a seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct LinkStats {
    pub carried: u64,
    pub lost: u64,
    pub reordered: u64,
}

/// A frame on the link: (arrival time, sequence number, towards the server?, bytes).
pub type InFlight = (Nanos, u64, bool, Vec<u8>);

/// Frames in flight one way or the other, delivered in order of arrival time.
pub struct Link {
    pub rng: Rng,
    pub loss: f64,
    pub reorder: f64,
    pub delay: Nanos,
    pub queue: BinaryHeap<Reverse<InFlight>>,
    pub seq: u64,
    pub stats: LinkStats,
}

impl Link {
    pub fn new(seed: u64, loss: f64, reorder: f64) -> Link {
        Link {
            rng: Rng(seed | 1),
            loss,
            reorder,
            delay: 10 * US,
            queue: BinaryHeap::new(),
            seq: 0,
            stats: LinkStats::default(),
        }
    }

    pub fn send(&mut self, now: Nanos, to_server: bool, frame: Vec<u8>) {
        self.stats.carried += 1;
        if self.rng.chance(self.loss) {
            self.stats.lost += 1;
            return;
        }
        let mut at = now + self.delay;
        if self.rng.chance(self.reorder) {
            // Held back behind the frames sent in the next 5 to 50 µs.
            at += 5 * US + self.rng.next() % (45 * US);
            self.stats.reordered += 1;
        }
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq, to_server, frame)));
    }

    pub fn next_arrival(&self) -> Option<Nanos> {
        self.queue.peek().map(|Reverse((at, ..))| *at)
    }

    pub fn pop_due(&mut self, now: Nanos) -> Option<(bool, Vec<u8>)> {
        if self.next_arrival()? > now {
            return None;
        }
        let Reverse((_, _, to_server, frame)) = self.queue.pop()?;
        Some((to_server, frame))
    }
}

/// What a test server does wrong on purpose.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Change one byte of the data of this many `VALUE` replies.
    pub corrupt_values: u32,
    /// From the first time, stop answering the connection from this client port (its
    /// requests are acknowledged and never read), and reset it on its first data at or after
    /// the second.
    pub reset: Option<(u16, Nanos, Nanos)>,
    /// Close the sending side of the connection from this client port (a FIN) once it has
    /// answered its first data at or after this time; requests after that go unanswered.
    pub close: Option<(u16, Nanos)>,
}

pub struct ServerConn {
    pub conn: Connection,
    pub session: Session,
    pub half_open: bool,
    /// Reply bytes the engine has not taken yet, from `out_at`.
    pub out: Vec<u8>,
    pub out_at: usize,
}

/// A memcached server: one listener and the engine's server connections, each around a
/// memcached session on one shared store.
pub struct Server {
    pub listener: Listener,
    pub tcp: TcpConfig,
    pub conns: BTreeMap<u16, ServerConn>,
    pub store: Store,
    pub faults: Faults,
    pub resets_sent: u64,
    pub closes_sent: u64,
    pub values_corrupted: u32,
    pub accepted: u64,
}

impl Server {
    pub fn new(faults: Faults) -> Server {
        let tcp = TcpConfig {
            nodelay: true,
            time_wait: 10 * MS,
            ..TcpConfig::default()
        };
        let config = ListenerConfig {
            tcp: tcp.clone(),
            ..ListenerConfig::new(*b"memcached-server")
        };
        config.validate().unwrap();
        Server {
            listener: Listener::new(SocketAddrV4::new(SERVER_IP, PORT), config),
            tcp,
            conns: BTreeMap::new(),
            store: Store::new(StoreConfig::new(64 << 20, 1 << 20, 0)),
            faults,
            resets_sent: 0,
            closes_sent: 0,
            values_corrupted: 0,
            accepted: 0,
        }
    }

    pub fn spec() -> Ipv4FrameSpec {
        Ipv4FrameSpec {
            src_mac: SERVER_MAC,
            dst_mac: GEN_MAC,
            src_ip: SERVER_IP,
            dst_ip: GEN_IP,
            ttl: 64,
            ident: 0,
            tos: 0,
        }
    }

    pub fn receive(&mut self, now: Nanos, frame: &[u8], link: &mut Link) {
        let parsed = parse_frame(frame).expect("the fleet's frames verify");
        assert_eq!(parsed.eth.src(), GEN_MAC);
        assert_eq!(parsed.eth.dst(), SERVER_MAC);
        let Packet::Tcp { ip, tcp } = parsed.packet else {
            panic!("the fleet sends only TCP: {:?}", parsed.packet);
        };
        assert_eq!(
            (ip.src(), ip.dst(), tcp.dst_port()),
            (GEN_IP, SERVER_IP, PORT)
        );
        let port = tcp.src_port();
        let ends = Endpoints {
            local: SocketAddrV4::new(SERVER_IP, PORT),
            remote: SocketAddrV4::new(GEN_IP, port),
        };
        if let Some(sc) = self.conns.get_mut(&port) {
            sc.conn.on_segment(now, &tcp);
            let mut read = true;
            if let Some((p, hold, reset)) = self.faults.reset
                && p == port
                && now >= hold
            {
                read = false;
                if now >= reset && !tcp.payload().is_empty() {
                    self.faults.reset = None;
                    sc.conn.abort(now);
                    self.resets_sent += 1;
                }
            }
            let close = self
                .faults
                .close
                .is_some_and(|(p, at)| p == port && now >= at && !tcp.payload().is_empty());
            self.pump(port, now, link, read);
            if close && let Some(sc) = self.conns.get_mut(&port) {
                self.faults.close = None;
                sc.conn.shutdown_write(now).unwrap();
                self.closes_sent += 1;
                self.pump(port, now, link, read);
            }
            return;
        }
        let flags = tcp.flags();
        let mut buf = [0u8; MAX_FRAME];
        if flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK) {
            match self
                .listener
                .on_syn(now, ends.remote, &tcp, &mut buf[L4_OFFSET..])
            {
                SynOutcome::HalfOpen { iss } => {
                    let conn = Connection::accept_syn(&self.tcp, ends, &tcp, iss, now);
                    self.conns.insert(
                        port,
                        ServerConn {
                            conn,
                            session: Session::new(Limits::default()),
                            half_open: true,
                            out: Vec::new(),
                            out_at: 0,
                        },
                    );
                    self.pump(port, now, link, true);
                }
                SynOutcome::Cookie { .. } => panic!("the backlog holds every connection"),
                SynOutcome::Dropped(why) => panic!("SYN dropped: {why:?}"),
            }
            return;
        }
        if let Some(n) = reset_for(ends.local, ends.remote, &tcp, &mut buf[L4_OFFSET..]) {
            let len = Self::spec().wrap_tcp_segment(&mut buf, n).unwrap();
            link.send(now, false, buf[..len].to_vec());
        }
    }

    /// Moves bytes between connection `port`'s engine and its session (unless `read` is
    /// false: then the engine keeps what arrived) and sends its segments.
    pub fn pump(&mut self, port: u16, now: Nanos, link: &mut Link, read: bool) {
        let sc = self.conns.get_mut(&port).expect("present");
        let mut chunk = [0u8; 4096];
        let mut peer_done = false;
        while read && sc.conn.readable() {
            match sc.conn.recv(now, &mut chunk) {
                Ok(0) => {
                    peer_done = true;
                    break;
                }
                Ok(n) => sc.session.feed(&chunk[..n]),
                Err(_) => break,
            }
        }
        let before = sc.out.len();
        if sc.session.run(&self.store, 0, &mut sc.out) == Status::Close {
            sc.conn.close(now);
        }
        if self.values_corrupted < self.faults.corrupt_values
            && let Some(at) = find(&sc.out[before..], b"VALUE ")
        {
            let header = before + at;
            let data = header + find(&sc.out[header..], b"\r\n").unwrap() + 2;
            sc.out[data] = if sc.out[data] == b'#' { b'$' } else { b'#' };
            self.values_corrupted += 1;
        }
        if sc.out_at < sc.out.len()
            && let Ok(n) = sc.conn.send(now, &sc.out[sc.out_at..])
        {
            sc.out_at += n;
            if sc.out_at == sc.out.len() {
                sc.out.clear();
                sc.out_at = 0;
            }
        }
        if peer_done && sc.conn.state() == State::CloseWait {
            sc.conn.close(now);
        }
        let mut frame = [0u8; MAX_FRAME];
        while let Some(n) = sc.conn.poll_transmit(now, &mut frame[L4_OFFSET..]) {
            let len = Self::spec().wrap_tcp_segment(&mut frame, n).unwrap();
            link.send(now, false, frame[..len].to_vec());
        }
        if sc.half_open && sc.conn.state() != State::SynReceived {
            sc.half_open = false;
            self.listener.half_open_done();
            if sc.conn.state() != State::Closed {
                assert!(self.listener.push_accept());
                self.listener.pop_accept();
                self.accepted += 1;
            }
        }
        if sc.conn.state() == State::Closed {
            self.conns.remove(&port);
        }
    }

    pub fn fire_timers(&mut self, now: Nanos, link: &mut Link) {
        let due: Vec<u16> = self
            .conns
            .iter()
            .filter(|(_, sc)| sc.conn.next_deadline().is_some_and(|d| d <= now))
            .map(|(&p, _)| p)
            .collect();
        for port in due {
            self.conns.get_mut(&port).unwrap().conn.on_timer(now);
            let held = self
                .faults
                .reset
                .is_some_and(|(p, hold, _)| p == port && now >= hold);
            self.pump(port, now, link, !held);
        }
    }

    pub fn next_deadline(&self) -> Option<Nanos> {
        self.conns
            .values()
            .filter_map(|sc| sc.conn.next_deadline())
            .min()
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
