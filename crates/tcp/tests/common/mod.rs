//! A deterministic virtual network for the engine: stacks (a connection table and an optional
//! listener each, as the runtime keeps them) joined by a simulated link that loses, reorders,
//! duplicates, corrupts and delays segments, drawn from a seeded PRNG, on a virtual clock.
//!
//! Every segment crosses the link as bytes and is parsed on arrival with its checksum verified,
//! exactly as the runtime does: a corrupted segment must fail that check (the link flips one
//! bit, which the Internet checksum always detects), and the simulation panics if one passes
//! or if an intact one fails.

#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use corral_tcp::listener::{Listener, ListenerConfig, SynOutcome};
use corral_tcp::reset::reset_for;
use corral_tcp::{Connection, Endpoints, Nanos, State, TcpConfig, TcpCounters};
use corral_wire::{TcpFlags, TcpSegment};
use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;

pub const US: Nanos = 1_000;
pub const MS: Nanos = 1_000_000;
pub const S: Nanos = 1_000_000_000;

/// Large enough for any segment the engine emits at the default MSS.
const SEGMENT_BUFFER: usize = 60 + 9000;

/// What the link does to each segment, independently per segment and direction.
#[derive(Clone, Debug)]
pub struct LinkConfig {
    /// Probability that a segment is lost.
    pub loss: f64,
    /// Probability that a segment is held back by up to `reorder_delay`, so later ones pass it.
    pub reorder: f64,
    pub reorder_delay: Nanos,
    /// Probability that a segment arrives twice.
    pub duplicate: f64,
    /// Probability that one bit of a segment is flipped.
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay: Nanos,
    /// Bottleneck rate in bits per second, with a drop-tail queue of `queue_limit` segments.
    pub rate_bps: Option<u64>,
    pub queue_limit: usize,
}

impl LinkConfig {
    /// A clean 10 Gbit/s link with 20 µs one-way delay and a 128-segment queue.
    pub fn clean() -> LinkConfig {
        LinkConfig {
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: 0,
            duplicate: 0.0,
            corrupt: 0.0,
            delay: 20 * US,
            rate_bps: Some(10_000_000_000),
            queue_limit: 128,
        }
    }

    /// `loss` with reordering, duplication and corruption alongside.
    pub fn faulty(loss: f64) -> LinkConfig {
        LinkConfig {
            loss,
            reorder: loss,
            reorder_delay: 100 * US,
            duplicate: loss / 2.0,
            corrupt: loss / 5.0,
            ..LinkConfig::clean()
        }
    }
}

/// What the link did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub sent: u64,
    pub lost: u64,
    pub queue_drops: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    /// Corrupted segments the receiving stack's checksum check rejected (must equal the
    /// corrupted segments delivered).
    pub corrupt_rejected: u64,
    pub delivered: u64,
    /// Segments to an address no stack has (answers to spoofed sources).
    pub unroutable: u64,
}

/// A segment on the wire, with the addresses its IP header would carry.
#[derive(Clone, Debug)]
pub struct Packet {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub bytes: Vec<u8>,
}

struct InFlight {
    packet: Packet,
    corrupted: bool,
}

type Key = (u32, u16, u32, u16);

fn key(e: Endpoints) -> Key {
    (
        u32::from(*e.local.ip()),
        e.local.port(),
        u32::from(*e.remote.ip()),
        e.remote.port(),
    )
}

/// One host's TCP: a connection table, an optional listener and an accept queue.
pub struct Stack {
    pub ip: Ipv4Addr,
    pub config: TcpConfig,
    conns: BTreeMap<Key, Entry>,
    listener: Option<Listener>,
    accept_queue: VecDeque<Endpoints>,
    /// Connections that may have something to send or a new deadline.
    dirty: BTreeSet<Key>,
    deadlines: BTreeSet<(Nanos, Key)>,
    /// Counters of connections already removed, and of segments outside any connection.
    pub totals: TcpCounters,
    pub removed: u64,
    /// Segments this stack emitted outside any connection (RSTs and cookie SYN-ACKs).
    out: Vec<Packet>,
}

struct Entry {
    conn: Connection,
    half_open: bool,
    deadline: Option<Nanos>,
}

impl Stack {
    fn new(ip: Ipv4Addr, config: TcpConfig) -> Stack {
        config.validate().expect("valid stack config");
        Stack {
            ip,
            config,
            conns: BTreeMap::new(),
            listener: None,
            accept_queue: VecDeque::new(),
            dirty: BTreeSet::new(),
            deadlines: BTreeSet::new(),
            totals: TcpCounters::default(),
            removed: 0,
            out: Vec::new(),
        }
    }

    pub fn listen(&mut self, port: u16, config: ListenerConfig) {
        config.validate().expect("valid listener config");
        self.listener = Some(Listener::new(SocketAddrV4::new(self.ip, port), config));
    }

    pub fn listener(&self) -> Option<&Listener> {
        self.listener.as_ref()
    }

    /// Takes the next established connection from the accept queue.
    pub fn accept(&mut self) -> Option<Endpoints> {
        let ends = self.accept_queue.pop_front()?;
        if let Some(l) = &mut self.listener {
            l.pop_accept();
        }
        Some(ends)
    }

    pub fn conn(&self, ends: Endpoints) -> Option<&Connection> {
        self.conns.get(&key(ends)).map(|e| &e.conn)
    }

    /// The connection, for application calls: it is polled for output on the next step.
    pub fn conn_mut(&mut self, ends: Endpoints) -> Option<&mut Connection> {
        let k = key(ends);
        let e = self.conns.get_mut(&k)?;
        self.dirty.insert(k);
        Some(&mut e.conn)
    }

    /// Connections in the table (half-open ones included).
    pub fn table_len(&self) -> usize {
        self.conns.len()
    }

    /// Heap bytes the table's connections hold.
    pub fn memory(&self) -> usize {
        self.conns.values().map(|e| e.conn.memory()).sum()
    }

    /// Every counter: removed connections, live ones and segments outside any connection.
    pub fn counters(&self) -> TcpCounters {
        let mut c = self.totals.clone();
        for e in self.conns.values() {
            c.absorb(e.conn.stats());
        }
        if let Some(l) = &self.listener {
            let lc = l.counters();
            c.passive_opens += lc.passive_opens;
            c.syn_cookies_sent += lc.syn_cookies_sent;
            c.syn_cookies_accepted += lc.syn_cookies_accepted;
            c.absorb(&lc.conns);
        }
        c
    }

    fn insert(&mut self, conn: Connection, half_open: bool) {
        let k = key(conn.ends());
        self.conns.insert(
            k,
            Entry {
                conn,
                half_open,
                deadline: None,
            },
        );
        self.dirty.insert(k);
    }

    /// Active open from `local_port` to `remote`.
    pub fn connect(&mut self, now: Nanos, local_port: u16, remote: SocketAddrV4) -> Endpoints {
        let ends = Endpoints {
            local: SocketAddrV4::new(self.ip, local_port),
            remote,
        };
        let iss = corral_tcp::listener::initial_sequence(&[9; 16], now, ends);
        self.insert(Connection::connect(&self.config, ends, iss, now), false);
        self.totals.active_opens += 1;
        ends
    }

    /// A segment arrived; false when its checksum (or header) did not verify.
    fn receive(&mut self, now: Nanos, p: &Packet) -> bool {
        let Ok(seg) = TcpSegment::parse(&p.bytes, p.src, p.dst) else {
            self.totals.drop(corral_tcp::TcpDrop::BadChecksum);
            return false;
        };
        let ends = Endpoints {
            local: SocketAddrV4::new(p.dst, seg.dst_port()),
            remote: SocketAddrV4::new(p.src, seg.src_port()),
        };
        let k = key(ends);
        if let Some(e) = self.conns.get_mut(&k) {
            e.conn.on_segment(now, &seg);
            self.dirty.insert(k);
            return true;
        }
        let flags = seg.flags();
        let mut buf = [0u8; 64];
        if let Some(l) = self
            .listener
            .as_mut()
            .filter(|l| l.local().port() == ends.local.port())
        {
            if flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK) {
                match l.on_syn(now, ends.remote, &seg, &mut buf) {
                    SynOutcome::HalfOpen { iss } => {
                        let tcp = l.config().tcp.clone();
                        let conn = Connection::accept_syn(&tcp, ends, &seg, iss, now);
                        self.insert(conn, true);
                    }
                    SynOutcome::Cookie { len } => self.out.push(Packet {
                        src: p.dst,
                        dst: p.src,
                        bytes: buf[..len].to_vec(),
                    }),
                    SynOutcome::Dropped(_) => {}
                }
                return true;
            }
            if flags.contains(TcpFlags::ACK)
                && !flags.contains(TcpFlags::RST)
                && !flags.contains(TcpFlags::SYN)
                && let Some(h) = l.on_ack(now, ends, &seg)
            {
                let tcp = l.config().tcp.clone();
                let mut conn = Connection::from_handshake(&tcp, &h, now);
                if l.push_accept() {
                    self.accept_queue.push_back(ends);
                } else {
                    self.totals.drop(corral_tcp::TcpDrop::AcceptQueueFull);
                    conn.abort(now);
                }
                conn.on_segment(now, &seg);
                self.insert(conn, false);
                return true;
            }
        }
        self.totals.drop(corral_tcp::TcpDrop::NoConnection);
        if let Some(n) = reset_for(ends.local, ends.remote, &seg, &mut buf) {
            self.totals.resets_sent += 1;
            self.out.push(Packet {
                src: p.dst,
                dst: p.src,
                bytes: buf[..n].to_vec(),
            });
        }
        true
    }

    fn fire_timers(&mut self, now: Nanos) {
        while let Some(&(at, k)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(e) = self.conns.get_mut(&k) {
                e.deadline = None;
                e.conn.on_timer(now);
                self.dirty.insert(k);
            }
        }
    }

    /// Drains the output of every connection touched since the last poll, follows half-open
    /// connections into the accept queue, and removes closed ones.
    fn poll(&mut self, now: Nanos, out: &mut Vec<Packet>) {
        out.append(&mut self.out);
        let mut buf = vec![0u8; SEGMENT_BUFFER];
        while let Some(k) = self.dirty.pop_first() {
            let Some(e) = self.conns.get_mut(&k) else {
                continue;
            };
            while let Some(n) = e.conn.poll_transmit(now, &mut buf) {
                let ends = e.conn.ends();
                out.push(Packet {
                    src: *ends.local.ip(),
                    dst: *ends.remote.ip(),
                    bytes: buf[..n].to_vec(),
                });
            }
            if e.half_open && e.conn.state() != State::SynReceived {
                e.half_open = false;
                let l = self.listener.as_mut().expect("half-open under a listener");
                l.half_open_done();
                if e.conn.state() != State::Closed {
                    if l.push_accept() {
                        self.accept_queue.push_back(e.conn.ends());
                    } else {
                        self.totals.drop(corral_tcp::TcpDrop::AcceptQueueFull);
                        e.conn.abort(now);
                        while let Some(n) = e.conn.poll_transmit(now, &mut buf) {
                            let ends = e.conn.ends();
                            out.push(Packet {
                                src: *ends.local.ip(),
                                dst: *ends.remote.ip(),
                                bytes: buf[..n].to_vec(),
                            });
                        }
                    }
                }
            }
            if let Some(d) = e.deadline.take() {
                self.deadlines.remove(&(d, k));
            }
            if e.conn.state() == State::Closed {
                let e = self.conns.remove(&k).expect("present");
                self.totals.absorb(e.conn.stats());
                self.removed += 1;
                continue;
            }
            e.deadline = e.conn.next_deadline();
            if let Some(d) = e.deadline {
                self.deadlines.insert((d, k));
            }
        }
    }

    fn next_deadline(&self) -> Option<Nanos> {
        self.deadlines.first().map(|&(d, _)| d)
    }
}

/// Stacks joined by one shared link (each direction its own bottleneck queue).
pub struct Sim {
    pub now: Nanos,
    pub link: LinkConfig,
    pub link_stats: LinkStats,
    rng: XorShiftRng,
    stacks: Vec<Stack>,
    queue: BinaryHeap<Reverse<(Nanos, u64, usize)>>,
    in_flight: BTreeMap<usize, InFlight>,
    next_id: usize,
    order: u64,
    /// Per (src, dst) pair: when the bottleneck is next free, and departures still queued.
    bottleneck: BTreeMap<(u32, u32), (Nanos, VecDeque<Nanos>)>,
    /// Longest the clock moves in one step, so that applications get to act.
    pub tick: Nanos,
}

impl Sim {
    pub fn new(seed: u64, link: LinkConfig) -> Sim {
        Sim {
            now: 1_000 * S,
            link,
            link_stats: LinkStats::default(),
            rng: XorShiftRng::seed_from_u64(seed),
            stacks: Vec::new(),
            queue: BinaryHeap::new(),
            in_flight: BTreeMap::new(),
            next_id: 0,
            order: 0,
            bottleneck: BTreeMap::new(),
            tick: 100 * US,
        }
    }

    pub fn add_stack(&mut self, ip: Ipv4Addr, config: TcpConfig) -> usize {
        self.stacks.push(Stack::new(ip, config));
        self.stacks.len() - 1
    }

    pub fn stack(&self, i: usize) -> &Stack {
        &self.stacks[i]
    }

    pub fn stack_mut(&mut self, i: usize) -> &mut Stack {
        &mut self.stacks[i]
    }

    /// Segments waiting on the link.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Puts a segment on the link as if a host at `packet.src` had sent it.
    pub fn inject(&mut self, packet: Packet) {
        self.transmit(packet);
    }

    fn schedule(&mut self, at: Nanos, packet: Packet, corrupted: bool) {
        let id = self.next_id;
        self.next_id += 1;
        self.order += 1;
        self.in_flight.insert(id, InFlight { packet, corrupted });
        self.queue.push(Reverse((at, self.order, id)));
    }

    fn transmit(&mut self, mut packet: Packet) {
        let now = self.now;
        let l = self.link.clone();
        self.link_stats.sent += 1;
        if self.rng.random_bool(l.loss) {
            self.link_stats.lost += 1;
            return;
        }
        let mut depart = now;
        if let Some(rate) = l.rate_bps {
            let pair = (u32::from(packet.src), u32::from(packet.dst));
            let (free_at, queued) = self.bottleneck.entry(pair).or_default();
            while queued.front().is_some_and(|&d| d <= now) {
                queued.pop_front();
            }
            if queued.len() >= l.queue_limit {
                self.link_stats.queue_drops += 1;
                return;
            }
            // Ethernet, IPv4 and the segment.
            let bits = (packet.bytes.len() as u64 + 14 + 20) * 8;
            depart = (*free_at).max(now) + bits * S / rate;
            *free_at = depart;
            queued.push_back(depart);
        }
        let mut arrive = depart + l.delay;
        if self.rng.random_bool(l.reorder) {
            self.link_stats.reordered += 1;
            arrive += self.rng.random_range(0..=l.reorder_delay);
        }
        let mut corrupted = false;
        if self.rng.random_bool(l.corrupt) {
            let bit = self.rng.random_range(0..packet.bytes.len() * 8);
            packet.bytes[bit / 8] ^= 1 << (bit % 8);
            corrupted = true;
            self.link_stats.corrupted += 1;
        }
        if self.rng.random_bool(l.duplicate) {
            self.link_stats.duplicated += 1;
            self.link_stats.corrupted += u64::from(corrupted);
            let later = arrive + self.rng.random_range(0..=l.delay);
            self.schedule(later, packet.clone(), corrupted);
        }
        self.schedule(arrive, packet, corrupted);
    }

    fn next_event(&self) -> Option<Nanos> {
        let link = self.queue.peek().map(|Reverse((at, _, _))| *at);
        let timers = self.stacks.iter().filter_map(|s| s.next_deadline()).min();
        match (link, timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sends what application calls left to send, then moves the clock to the next arrival or
    /// timer (at most `tick` ahead) and handles everything due then.
    pub fn step(&mut self) {
        self.flush();
        let limit = self.now + self.tick;
        self.now = self
            .next_event()
            .map_or(limit, |t| t.clamp(self.now, limit));
        let now = self.now;
        while let Some(&Reverse((at, _, id))) = self.queue.peek() {
            if at > now {
                break;
            }
            self.queue.pop();
            let f = self.in_flight.remove(&id).expect("scheduled");
            let Some(stack) = self.stacks.iter_mut().find(|s| s.ip == f.packet.dst) else {
                self.link_stats.unroutable += 1;
                continue;
            };
            self.link_stats.delivered += 1;
            let verified = stack.receive(now, &f.packet);
            assert_eq!(
                verified,
                !f.corrupted,
                "a segment {} the checksum check",
                if f.corrupted {
                    "corrupted on the link passed"
                } else {
                    "intact failed"
                }
            );
            if f.corrupted {
                self.link_stats.corrupt_rejected += 1;
            }
        }
        for s in &mut self.stacks {
            s.fire_timers(now);
        }
        self.flush();
    }

    /// Puts every stack's pending output on the link.
    pub fn flush(&mut self) {
        let mut out = Vec::new();
        for s in &mut self.stacks {
            s.poll(self.now, &mut out);
        }
        for p in out {
            self.transmit(p);
        }
    }

    /// Steps until `done` holds; panics after `max_time` of virtual time.
    pub fn run_until(&mut self, max_time: Nanos, mut done: impl FnMut(&mut Sim) -> bool) {
        let end = self.now + max_time;
        while !done(self) {
            assert!(
                self.now < end,
                "not done after {} s of virtual time",
                max_time / S
            );
            self.step();
        }
    }

    /// Hands a segment straight to the stack at `packet.dst`, as a host on its own LAN segment
    /// would, past the link's faults and queue.
    pub fn deliver_now(&mut self, packet: Packet) {
        let now = self.now;
        let stack = self
            .stacks
            .iter_mut()
            .find(|s| s.ip == packet.dst)
            .expect("a stack at the destination");
        assert!(
            stack.receive(now, &packet),
            "an injected segment must verify"
        );
    }

    /// A random number for tests' own use (attack traffic), from the same seeded stream.
    pub fn random(&mut self) -> u64 {
        self.rng.random()
    }
}

/// One direction of a bulk transfer driven by the application calls of two connections.
pub struct Transfer {
    pub data: Vec<u8>,
    pub sent: usize,
    pub received: Vec<u8>,
    pub shut: bool,
    pub eof: bool,
}

impl Transfer {
    /// `len` bytes of a pattern that differs at every offset modulo 251 and per `salt`.
    pub fn new(len: usize, salt: u8) -> Transfer {
        let data = (0..len)
            .map(|i| (i as u64 * 31 + i as u64 / 251 + u64::from(salt)) as u8)
            .collect();
        Transfer {
            data,
            sent: 0,
            received: Vec::new(),
            shut: false,
            eof: false,
        }
    }

    pub fn done(&self) -> bool {
        self.eof
    }

    /// Writes what the sender's buffer takes (then shuts its side down) and reads what the
    /// receiver has.
    pub fn pump(&mut self, sim: &mut Sim, from: (usize, Endpoints), to: (usize, Endpoints)) {
        let now = sim.now;
        if let Some(c) = sim.stack_mut(from.0).conn_mut(from.1) {
            if self.sent < self.data.len() {
                if let Ok(n) = c.send(now, &self.data[self.sent..]) {
                    self.sent += n;
                }
            } else if !self.shut && c.shutdown_write(now).is_ok() {
                self.shut = true;
            }
        }
        if let Some(c) = sim.stack_mut(to.0).conn_mut(to.1) {
            let mut buf = [0u8; 65536];
            loop {
                match c.recv(now, &mut buf) {
                    Ok(0) => {
                        self.eof = true;
                        break;
                    }
                    Ok(n) => self.received.extend_from_slice(&buf[..n]),
                    Err(_) => break,
                }
            }
        }
    }
}

/// Returns the peer's view of `ends`.
pub fn flip(ends: Endpoints) -> Endpoints {
    Endpoints {
        local: ends.remote,
        remote: ends.local,
    }
}
