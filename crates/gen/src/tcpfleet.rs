//! A fleet of memcached clients over TCP, sans I/O: `connections` client connections of the
//! `corral-tcp` engine from the generator's address to one target, fed by a key-value request
//! stream, emitting and taking whole Ethernet/IPv4/TCP frames.
//!
//! The caller owns the clock (nanoseconds on the schedule's clock, the same one requests are
//! scheduled on) and the frames: [`TcpFleet::submit`] queues a request on its connection,
//! [`TcpFleet::poll`] writes every frame that is due (handshakes, requests, ACKs,
//! retransmissions, FINs, and RSTs to segments for no connection) into the caller's buffers,
//! [`TcpFleet::receive`] takes a frame from the target, and [`TcpFleet::next_deadline`] says
//! when the engine's timers next need a poll.
//!
//! A request for key `k` always goes on connection `k % connections`: memcached answers one
//! connection's requests in order, so a get then must see exactly the last set sent before it
//! ([`Ordering::InOrder`](corral_loadgen::kv::Ordering::InOrder)), and every reply is checked
//! against its request. Replies are matched first in, first out to their connection's
//! outstanding requests; a right one is a latency sample from the request's *scheduled* time,
//! a wrong one is counted (as a `KvChecks` error and as malformed in the recorder) and never
//! timed. Connection `c` uses source port [`CLIENT_PORT_BASE`] + `c`, so that RSS at the
//! target sees one flow per connection.
//!
//! Memory is bounded: the tables are sized at start (one slot per connection, each with room
//! for `max_in_flight` outstanding requests; submitting more is refused and counted), and the
//! byte buffers grow on demand up to fixed bounds, as the engine's own do: its send and
//! receive buffers, the bytes of requests the engine has not taken yet (at most
//! `max_in_flight` requests' worth) and the reply bytes not yet parsed (about one reply).
//!
//! A connection that fails (reset by the target, refused, timed out, closed by the target, or
//! whose reply stream cannot be parsed) loses the requests it had outstanding, which are
//! counted; the next request for it opens a new connection on the same port. A set it lost
//! may or may not have been stored, so before that request the new connection stores each
//! such key again (an untimed set, counted in `repair_sets`): a later get of the key is then
//! checked against a value the target certainly has.
//!
//! Before the timed run, [`TcpFleet::start_preload`] and [`TcpFleet::preload_step`] set every
//! key of the key space once, in the manner of mutilate, so that gets hit: key `k` on
//! connection `k % connections` like every later request on it, at most [`PRELOAD_WINDOW`]
//! sets in flight per connection. The sets are checked but not timed; any wrong reply or
//! failed connection, or no reply for [`PRELOAD_STALL_NS`], fails the preload. The fleet's
//! clock keeps running through it: [`TcpFleet::start_schedule`] then says where the schedule's
//! time 0 falls on that clock, and the recorders see schedule times.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};

use corral_abi::MAX_FRAME;
use corral_iokernel::nic::FrameBatch;
use corral_loadgen::kv::{Keyspace, KvChecks, Op, Versions};
use corral_loadgen::kvstream::StreamSession;
use corral_loadgen::recorder::{ResponseRecorder, SendRecorder, summarize};
use corral_loadgen::{AdherencePolicy, RunInfo, Summary};
use corral_tcp::listener::initial_sequence;
use corral_tcp::reset::reset_for;
use corral_tcp::{
    ConnStats, Connection, Endpoints, Nanos, State, TcpConfig, TcpCounters, TcpError,
};
use corral_wire::frame::L4_OFFSET;
use corral_wire::{Ipv4FrameSpec, Ipv4Packet, MacAddr, Packet, TcpSegment, parse_frame};

use crate::nic::CLIENT_PORT_BASE;

/// Most connections a fleet may have: each needs a distinct source port above
/// [`CLIENT_PORT_BASE`].
pub const MAX_CONNECTIONS: usize = 16_384;

/// RSTs owed to segments that matched no connection, held until a poll sends them; more are
/// dropped (the peer retransmits and is answered then).
const RST_QUEUE: usize = 64;

/// Sets in flight per connection while preloading.
pub const PRELOAD_WINDOW: usize = 64;

/// A preload that gets no reply for this long fails.
pub const PRELOAD_STALL_NS: Nanos = 5_000_000_000;

/// How many timer entries per connection the heap may hold before it is rebuilt.
const TIMER_SLACK: usize = 4;

/// Bytes asked of the reply stream for each read from a connection.
const READ_CHUNK: usize = 16 * 1024;

const TTL: u8 = 64;

/// Where a fleet's frames come from and go to, and how its connections behave.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Client connections, 1 to [`MAX_CONNECTIONS`].
    pub connections: usize,
    /// The generator's addresses.
    pub local_mac: MacAddr,
    pub local_ip: Ipv4Addr,
    /// The target's MAC (next hop) and address.
    pub target_mac: MacAddr,
    pub target: SocketAddrV4,
    /// Each connection's engine settings.
    pub tcp: TcpConfig,
    /// Requests a connection may have outstanding (sent or waiting to be sent, not answered).
    /// After a failed connection, sets repairing what it lost may briefly double that.
    pub max_in_flight: usize,
    /// Secret for initial sequence numbers (RFC 6528).
    pub iss_secret: [u8; 16],
}

impl FleetConfig {
    /// 256 requests outstanding per connection (an open-loop generator that stalls for a
    /// moment then queues every request that came due meanwhile), the engine's defaults with
    /// Nagle off (a request is sent as soon as it is queued).
    pub fn new(
        connections: usize,
        local: (MacAddr, Ipv4Addr),
        target: (MacAddr, SocketAddrV4),
    ) -> FleetConfig {
        FleetConfig {
            connections,
            local_mac: local.0,
            local_ip: local.1,
            target_mac: target.0,
            target: target.1,
            tcp: TcpConfig {
                nodelay: true,
                ..TcpConfig::default()
            },
            max_in_flight: 256,
            iss_secret: *b"corral-gen-fleet",
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_CONNECTIONS).contains(&self.connections) {
            return Err(format!(
                "invalid connections = {}: expected 1 to {MAX_CONNECTIONS}",
                self.connections
            ));
        }
        if !(1..=65_536).contains(&self.max_in_flight) {
            return Err(format!(
                "invalid max_in_flight = {}: expected 1 to 65536",
                self.max_in_flight
            ));
        }
        self.tcp
            .validate()
            .map_err(|e| format!("invalid tcp.{}: {}", e.field, e.problem))
    }
}

/// Everything a fleet counted. Engine counters (retransmissions, segments, drops) are in
/// [`TcpFleet::tcp_counters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FleetCounters {
    /// Connections opened (SYNs queued), reconnections included.
    pub connects: u64,
    /// Connections that completed their handshake.
    pub established: u64,
    /// Connections opened again after an earlier one on the same slot ended.
    pub reconnects: u64,
    /// Connections the target reset (RST while synchronized).
    pub resets: u64,
    /// Connections refused (RST to the SYN).
    pub refused: u64,
    /// Connections whose retransmissions (or handshake) went unanswered.
    pub timed_out: u64,
    /// Connections the target closed (its FIN) while this side still wanted to talk.
    pub closed_by_peer: u64,
    /// Connections aborted because their reply stream could not be parsed or had a reply
    /// nobody asked for.
    pub broken_streams: u64,
    /// Requests accepted by [`TcpFleet::submit`].
    pub requests: u64,
    /// Requests refused because their connection had `max_in_flight` outstanding or was
    /// closing.
    pub refused_requests: u64,
    /// Requests outstanding on a connection when it failed: never answered.
    pub lost_requests: u64,
    /// Untimed sets of keys whose set was lost with a failed connection, sent first on the
    /// connection opened after it.
    pub repair_sets: u64,
    /// Frames written by [`TcpFleet::poll`].
    pub frames_out: u64,
    /// Frames handed to [`TcpFleet::receive`] that belong to a fleet connection.
    pub frames_in: u64,
    /// Frames for anything else (another protocol, address or port), or damaged.
    pub foreign_frames: u64,
    /// Segments for a fleet port whose connection is gone.
    pub stray_segments: u64,
    /// RSTs sent in answer to them.
    pub resets_sent: u64,
}

/// Why [`TcpFleet::submit`] did not take a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its connection already has `max_in_flight` requests outstanding.
    TooManyInFlight,
    /// Its connection is closing (this side or the target closed it) and takes no more.
    Closing,
}

/// One request of the stream: its operation, its id in the timed run (`None` for a preload,
/// which is checked but not timed), and when it was scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FleetRequest {
    pub op: Op,
    pub id: Option<u64>,
    pub scheduled_ns: u64,
}

/// Where a preload stands after [`TcpFleet::preload_step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreloadProgress {
    /// Sets are still in flight or waiting for room.
    Running,
    /// Every key is stored; the checks start again from zero (with `preloaded` set).
    Done(PreloadReport),
    /// What went wrong; the run cannot go on (its gets would be checked against values the
    /// target may not have).
    Failed(String),
}

/// A finished preload: how many keys were set and how long it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PreloadReport {
    pub keys: u64,
    pub duration_ns: u64,
}

/// A preload in progress.
#[derive(Clone, Copy, Debug)]
struct Preload {
    /// Sets queued so far.
    sent: u64,
    started_ns: Nanos,
    /// When the count of replies last moved.
    last_progress_ns: Nanos,
    replies: u64,
}

/// Buffers the fleet writes frames into: [`FrameBatch`] in iokerneld, a list in tests.
pub trait FrameOut {
    /// A buffer for the next frame (at least [`MAX_FRAME`] bytes), `None` when full.
    fn buffer(&mut self) -> Option<&mut [u8]>;
    /// Keeps the first `len` bytes of the last buffer.
    fn commit(&mut self, len: usize);
}

impl FrameOut for FrameBatch {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        self.next_buffer()
    }

    fn commit(&mut self, len: usize) {
        FrameBatch::commit(self, len);
    }
}

/// Frames as owned vectors, for tests and tools: at most `limit` of them are held.
#[derive(Debug)]
pub struct FrameList {
    frames: Vec<Vec<u8>>,
    scratch: Vec<u8>,
    limit: usize,
}

impl FrameList {
    pub fn new(limit: usize) -> FrameList {
        FrameList {
            frames: Vec::new(),
            scratch: vec![0; MAX_FRAME],
            limit,
        }
    }

    /// The frames written so far, oldest first; the list is empty afterwards.
    pub fn take(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.frames)
    }
}

impl FrameOut for FrameList {
    fn buffer(&mut self) -> Option<&mut [u8]> {
        (self.frames.len() < self.limit).then_some(self.scratch.as_mut_slice())
    }

    fn commit(&mut self, len: usize) {
        self.frames.push(self.scratch[..len].to_vec());
    }
}

/// One client connection and its conversation.
struct Slot {
    conn: Option<Connection>,
    session: StreamSession,
    /// The operations `session` has outstanding, oldest first.
    ops: VecDeque<Op>,
    /// Keys whose set was lost with the last connection, to be stored again first.
    repair: Vec<u64>,
    /// Request bytes the engine has not taken yet, from `unsent_at`.
    unsent: Vec<u8>,
    unsent_at: usize,
    deadline: Option<Nanos>,
    dirty: bool,
    /// The engine counted the handshake's completion for this connection.
    established: bool,
    /// Whether any connection was ever opened on this slot.
    opened: bool,
    /// The next key this connection sets while preloading (keys `c`, `c + connections`, ...).
    preload_next: u64,
    /// Whether the slot is listed in `preload_ready`.
    preload_listed: bool,
}

/// See the module documentation.
pub struct TcpFleet {
    config: FleetConfig,
    space: Keyspace,
    versions: Versions,
    slots: Vec<Slot>,
    /// Slots that may have output, a new deadline, or bytes to move; each listed once.
    dirty: Vec<u32>,
    /// Each slot's deadline as it was set, earliest first. An entry whose slot has since moved
    /// or cleared its deadline is skipped when it comes up; when stale entries make the heap
    /// [`TIMER_SLACK`] times the slot count it is rebuilt from the slots, so it stays bounded.
    timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    spec: Ipv4FrameSpec,
    checks: KvChecks,
    recorder: ResponseRecorder,
    /// Timed requests taken (at their submission time) or refused.
    send: SendRecorder,
    counters: FleetCounters,
    /// Engine counters of connections already gone.
    closed_stats: ConnStats,
    /// RST segments owed to stray segments: (length, segment).
    rst_owed: Vec<(usize, [u8; RST_LEN])>,
    preload: Option<Preload>,
    /// Slots that may have room for more preload sets: each listed once.
    preload_ready: Vec<u32>,
    /// Where the schedule's time 0 falls on the fleet's clock: the recorders get times less
    /// this.
    schedule_origin_ns: Nanos,
}

/// Room for a RST segment ([`reset_for`] writes a bare 20-byte header).
const RST_LEN: usize = 20;

impl TcpFleet {
    /// A fleet with no connection open yet: each opens on its first request. `recorder` takes
    /// the timed requests' latencies; validate `config` and the workload first.
    pub fn new(config: FleetConfig, space: Keyspace, recorder: ResponseRecorder) -> TcpFleet {
        config.validate().expect("a validated fleet config");
        let slots = (0..config.connections)
            .map(|_| Slot {
                conn: None,
                session: StreamSession::new(),
                ops: VecDeque::with_capacity(config.max_in_flight),
                repair: Vec::with_capacity(config.max_in_flight),
                unsent: Vec::new(),
                unsent_at: 0,
                deadline: None,
                dirty: false,
                established: false,
                opened: false,
                preload_next: 0,
                preload_listed: false,
            })
            .collect();
        let spec = Ipv4FrameSpec {
            src_mac: config.local_mac,
            dst_mac: config.target_mac,
            src_ip: config.local_ip,
            dst_ip: *config.target.ip(),
            ttl: TTL,
            ident: 0,
            tos: 0,
        };
        TcpFleet {
            versions: Versions::new(space.workload.keys),
            space,
            dirty: Vec::with_capacity(config.connections),
            slots,
            timers: BinaryHeap::with_capacity(TIMER_SLACK * config.connections + 1),
            spec,
            checks: KvChecks::default(),
            recorder,
            send: SendRecorder::new(),
            counters: FleetCounters::default(),
            closed_stats: ConnStats::default(),
            rst_owed: Vec::with_capacity(RST_QUEUE),
            preload: None,
            preload_ready: Vec::new(),
            schedule_origin_ns: 0,
            config,
        }
    }

    pub fn config(&self) -> &FleetConfig {
        &self.config
    }

    /// The operation of timed request `id` under the fleet's workload.
    pub fn op_of(&self, id: u64) -> Op {
        self.space.op(id)
    }

    /// The connection requests for `op` go on.
    pub fn connection_of(&self, op: Op) -> usize {
        (op.key() % self.config.connections as u64) as usize
    }

    /// The source port of connection `c`.
    pub fn port_of(c: usize) -> u16 {
        CLIENT_PORT_BASE + c as u16
    }

    fn ends_of(&self, c: usize) -> Endpoints {
        Endpoints {
            local: SocketAddrV4::new(self.config.local_ip, Self::port_of(c)),
            remote: self.config.target,
        }
    }

    fn mark(&mut self, c: usize) {
        let slot = &mut self.slots[c];
        if !slot.dirty {
            slot.dirty = true;
            self.dirty.push(c as u32);
        }
    }

    /// Opens connection `c` (its first, or again after one ended).
    fn open(&mut self, c: usize, now: Nanos) {
        let ends = self.ends_of(c);
        let iss = initial_sequence(&self.config.iss_secret, now, ends);
        let slot = &mut self.slots[c];
        slot.conn = Some(Connection::connect(&self.config.tcp, ends, iss, now));
        slot.established = false;
        if slot.opened {
            self.counters.reconnects += 1;
        }
        slot.opened = true;
        self.counters.connects += 1;
        self.mark(c);
    }

    /// Opens every connection now, ahead of the first request.
    pub fn connect_all(&mut self, now: Nanos) {
        for c in 0..self.slots.len() {
            if self.slots[c].conn.is_none() {
                self.open(c, now);
            }
        }
    }

    /// Starts setting every key once (see the module documentation): opens every connection
    /// now; [`preload_step`](Self::preload_step) then sends the sets as room opens.
    pub fn start_preload(&mut self, now: Nanos) {
        self.connect_all(now);
        let keys = self.space.workload.keys;
        self.preload_ready.clear();
        for (c, slot) in self.slots.iter_mut().enumerate() {
            slot.preload_next = c as u64;
            slot.preload_listed = slot.preload_next < keys;
            if slot.preload_listed {
                self.preload_ready.push(c as u32);
            }
        }
        self.preload = Some(Preload {
            sent: 0,
            started_ns: now,
            last_progress_ns: now,
            replies: 0,
        });
    }

    /// Whether a preload is in progress.
    pub fn preloading(&self) -> bool {
        self.preload.is_some()
    }

    /// Queues the preload's next sets where their connection has room, and says whether it
    /// is done: call it on every poll while [`preloading`](Self::preloading) (it queues, a
    /// [`poll`](Self::poll) sends). Done and failed are final: the preload is over then.
    pub fn preload_step(&mut self, now: Nanos) -> PreloadProgress {
        let Some(mut p) = self.preload else {
            return PreloadProgress::Failed("no preload in progress".into());
        };
        let keys = self.space.workload.keys;
        let connections = self.config.connections as u64;
        let window = PRELOAD_WINDOW.min(self.config.max_in_flight);
        while let Some(c) = self.preload_ready.pop() {
            let c = c as usize;
            self.slots[c].preload_listed = false;
            while self.slots[c].preload_next < keys && self.slots[c].session.in_flight() < window {
                let key = self.slots[c].preload_next;
                let set = FleetRequest {
                    op: Op::Set { key },
                    id: None,
                    scheduled_ns: now,
                };
                if let Err(why) = self.submit(now, set) {
                    self.preload = None;
                    return PreloadProgress::Failed(format!(
                        "preload: the set of key {key} was refused ({why:?})"
                    ));
                }
                self.slots[c].preload_next += connections;
                p.sent += 1;
            }
        }
        let errors = self.checks.errors();
        if errors > 0 {
            self.preload = None;
            return PreloadProgress::Failed(format!(
                "preload: {errors} of {} sets failed ({})",
                p.sent, self.checks
            ));
        }
        let replies = self.checks.correct();
        if replies != p.replies {
            p.replies = replies;
            p.last_progress_ns = now;
        } else if now.saturating_sub(p.last_progress_ns) > PRELOAD_STALL_NS {
            self.preload = None;
            return PreloadProgress::Failed(format!(
                "preload: no reply from {} in {} s ({replies} of {keys} keys stored)",
                self.config.target,
                PRELOAD_STALL_NS / 1_000_000_000
            ));
        }
        if p.sent == keys && replies == keys {
            self.preload = None;
            self.checks = KvChecks {
                preloaded: self.checks.stored,
                ..KvChecks::default()
            };
            return PreloadProgress::Done(PreloadReport {
                keys,
                duration_ns: now.saturating_sub(p.started_ns),
            });
        }
        self.preload = Some(p);
        PreloadProgress::Running
    }

    /// Says that the schedule's time 0 is `origin_ns` on the fleet's clock (the default is
    /// 0: the same clock). The requests' scheduled times and the deadline are schedule times.
    pub fn start_schedule(&mut self, origin_ns: Nanos) {
        self.schedule_origin_ns = origin_ns;
    }

    /// Aborts every connection (a RST each, on the next poll): the run is given up.
    pub fn abort_all(&mut self, now: Nanos) {
        for c in 0..self.slots.len() {
            if let Some(conn) = self.slots[c].conn.as_mut() {
                conn.abort(now);
                self.mark(c);
            }
        }
    }

    /// Queues `req` on its connection (opening it if there is none); returns the connection.
    /// It goes out on the next [`poll`](Self::poll).
    /// A timed request counts as sent at `now` (its lateness is `now` less its scheduled
    /// time, on the schedule's clock), a refused one as a send error.
    pub fn submit(&mut self, now: Nanos, req: FleetRequest) -> Result<usize, Refused> {
        let c = self.connection_of(req.op);
        let refused = if self.slots[c].session.in_flight() >= self.config.max_in_flight {
            Some(Refused::TooManyInFlight)
        } else {
            match self.slots[c].conn.as_ref().map(Connection::state) {
                None => {
                    self.open(c, now);
                    None
                }
                Some(State::SynSent | State::Established) => None,
                Some(_) => Some(Refused::Closing),
            }
        };
        let schedule_now = now.saturating_sub(self.schedule_origin_ns);
        if let Some(why) = refused {
            self.counters.refused_requests += 1;
            if req.id.is_some() {
                self.send.record_send_error(req.scheduled_ns, schedule_now);
            }
            return Err(why);
        }
        if req.id.is_some() {
            self.send.record_sent(req.scheduled_ns, schedule_now);
        }
        let slot = &mut self.slots[c];
        // Keep only the bytes the engine has not taken.
        slot.unsent.drain(..slot.unsent_at);
        slot.unsent_at = 0;
        while let Some(key) = slot.repair.pop() {
            let op = Op::Set { key };
            slot.session.request(
                &self.space,
                &mut self.versions,
                op,
                None,
                now,
                &mut slot.unsent,
                &mut self.checks,
            );
            slot.ops.push_back(op);
            self.counters.repair_sets += 1;
        }
        slot.session.request(
            &self.space,
            &mut self.versions,
            req.op,
            req.id,
            req.scheduled_ns,
            &mut slot.unsent,
            &mut self.checks,
        );
        slot.ops.push_back(req.op);
        self.counters.requests += 1;
        self.mark(c);
        Ok(c)
    }

    /// A frame arrived from the network at `now`: a segment for one of the connections is
    /// given to it, and the replies it completes are checked and recorded.
    pub fn receive(&mut self, frame: &[u8], now: Nanos) {
        let Ok(parsed) = parse_frame(frame) else {
            self.counters.foreign_frames += 1;
            return;
        };
        let Packet::Tcp { ip, tcp } = parsed.packet else {
            self.counters.foreign_frames += 1;
            return;
        };
        self.receive_segment(&ip, &tcp, now);
    }

    /// [`receive`](Self::receive) of a frame the caller already parsed (and so verified):
    /// its IPv4 header and TCP segment.
    pub fn receive_segment(&mut self, ip: &Ipv4Packet<'_>, tcp: &TcpSegment<'_>, now: Nanos) {
        let port = tcp.dst_port();
        let c = usize::from(port.wrapping_sub(CLIENT_PORT_BASE));
        if ip.dst() != self.config.local_ip
            || ip.src() != *self.config.target.ip()
            || tcp.src_port() != self.config.target.port()
            || port < CLIENT_PORT_BASE
            || c >= self.slots.len()
        {
            self.counters.foreign_frames += 1;
            return;
        }
        self.counters.frames_in += 1;
        let Some(conn) = self.slots[c].conn.as_mut() else {
            self.counters.stray_segments += 1;
            let mut seg = [0u8; RST_LEN];
            if self.rst_owed.len() < RST_QUEUE
                && let Some(n) = reset_for(self.ends_of(c).local, self.config.target, tcp, &mut seg)
            {
                self.rst_owed.push((n, seg));
            }
            return;
        };
        conn.on_segment(now, tcp);
        self.read(c, now);
        self.mark(c);
    }

    /// Moves what connection `c` received into its conversation, checking replies at `now`.
    fn read(&mut self, c: usize, now: Nanos) {
        let slot = &mut self.slots[c];
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        let mut peer_closed = false;
        while conn.readable() {
            match conn.recv(now, slot.session.spare(READ_CHUNK)) {
                Ok(0) => {
                    peer_closed = true;
                    break;
                }
                Ok(n) => slot.session.filled(n),
                Err(_) => break,
            }
        }
        let before = slot.session.in_flight();
        let taken = slot.session.take_replies(
            &self.space,
            now.saturating_sub(self.schedule_origin_ns),
            &mut self.checks,
            Some(&mut self.recorder),
        );
        // Replies complete requests in order: the oldest operations are done.
        let answered = before - slot.session.in_flight();
        slot.ops.drain(..answered);
        if answered > 0
            && self.preload.is_some()
            && !slot.preload_listed
            && slot.preload_next < self.space.workload.keys
        {
            // Room for more of its preload sets.
            slot.preload_listed = true;
            self.preload_ready.push(c as u32);
        }
        if taken.is_err() {
            self.counters.broken_streams += 1;
            conn.abort(now);
            self.fail(c);
        } else if peer_closed && conn.state() == State::CloseWait {
            self.counters.closed_by_peer += 1;
            conn.close(now);
            self.fail(c);
        }
    }

    /// Connection `c` can carry no more replies: what it had outstanding is lost.
    fn fail(&mut self, c: usize) {
        let slot = &mut self.slots[c];
        let lost = slot.session.in_flight() as u64;
        if lost > 0 {
            self.checks.connection_failures += 1;
            self.counters.lost_requests += lost;
        }
        for op in slot.ops.drain(..) {
            if let Op::Set { key } = op
                && !slot.repair.contains(&key)
            {
                slot.repair.push(key);
            }
        }
        slot.session.abandon();
        slot.unsent.clear();
        slot.unsent_at = 0;
    }

    /// Fires the timers due by `now`, then writes every frame due into `out` until it is
    /// full (what did not fit goes on the next poll).
    pub fn poll(&mut self, now: Nanos, out: &mut impl FrameOut) {
        while let Some(&(n, seg)) = self.rst_owed.last() {
            let Some(buf) = out.buffer() else {
                return;
            };
            buf[L4_OFFSET..L4_OFFSET + n].copy_from_slice(&seg[..n]);
            self.spec.ident = self.spec.ident.wrapping_add(1);
            if let Ok(len) = self.spec.wrap_tcp_segment(buf, n) {
                out.commit(len);
                self.counters.frames_out += 1;
                self.counters.resets_sent += 1;
            }
            self.rst_owed.pop();
        }
        while let Some(&Reverse((at, c))) = self.timers.peek()
            && at <= now
        {
            self.timers.pop();
            let c = c as usize;
            let slot = &mut self.slots[c];
            if slot.deadline == Some(at)
                && let Some(conn) = slot.conn.as_mut()
            {
                slot.deadline = None;
                conn.on_timer(now);
                self.mark(c);
            }
        }
        let mut i = 0;
        let mut full = false;
        while i < self.dirty.len() {
            let c = self.dirty[i] as usize;
            if self.service(c, now, out, &mut full) {
                self.slots[c].dirty = false;
                self.dirty.swap_remove(i);
            } else {
                i += 1;
            }
            if full {
                break;
            }
        }
    }

    /// Moves connection `c`'s request bytes into its engine and its segments into `out`;
    /// returns whether it is done (false: `out` filled up first).
    fn service(&mut self, c: usize, now: Nanos, out: &mut impl FrameOut, full: &mut bool) -> bool {
        loop {
            match self.service_once(c, now, out, full) {
                Some(done) => return done,
                None => continue,
            }
        }
    }

    /// One round of [`service`](Self::service): `None` when the engine took bytes and sent
    /// them and has room for more.
    fn service_once(
        &mut self,
        c: usize,
        now: Nanos,
        out: &mut impl FrameOut,
        full: &mut bool,
    ) -> Option<bool> {
        let slot = &mut self.slots[c];
        let Some(conn) = slot.conn.as_mut() else {
            slot.deadline = None;
            return Some(true);
        };
        let offered = slot.unsent_at;
        if !slot.established && matches!(conn.state(), State::Established | State::CloseWait) {
            slot.established = true;
            self.counters.established += 1;
        }
        if slot.unsent_at < slot.unsent.len() && conn.send_space() > 0 {
            if let Ok(n) = conn.send(now, &slot.unsent[slot.unsent_at..]) {
                slot.unsent_at += n;
            }
            if slot.unsent_at == slot.unsent.len() {
                slot.unsent.clear();
                slot.unsent_at = 0;
            }
        }
        let mut done = true;
        loop {
            let Some(buf) = out.buffer() else {
                *full = true;
                done = false;
                break;
            };
            let end = buf.len().min(MAX_FRAME);
            let Some(n) = conn.poll_transmit(now, &mut buf[L4_OFFSET..end]) else {
                break;
            };
            self.spec.ident = self.spec.ident.wrapping_add(1);
            match self.spec.wrap_tcp_segment(buf, n) {
                Ok(len) => {
                    out.commit(len);
                    self.counters.frames_out += 1;
                }
                Err(_) => break,
            }
        }
        // The handshake may have completed, or room opened, since the bytes were offered.
        let slot = &mut self.slots[c];
        let conn = slot.conn.as_mut().expect("checked above");
        let more = slot.unsent_at < slot.unsent.len() && conn.send_space() > 0;
        if conn.state() == State::Closed {
            match conn.error() {
                Some(TcpError::Reset) => self.counters.resets += 1,
                Some(TcpError::Refused) => self.counters.refused += 1,
                Some(TcpError::TimedOut) => self.counters.timed_out += 1,
                _ => {}
            }
            let stats = conn.stats().clone();
            absorb(&mut self.closed_stats, &stats);
            slot.conn = None;
            slot.deadline = None;
            self.fail(c);
            return Some(done);
        }
        let deadline = conn.next_deadline();
        if deadline != slot.deadline {
            slot.deadline = deadline;
            if let Some(at) = deadline {
                self.arm(c, at);
            }
        }
        let slot = &self.slots[c];
        let took = slot.unsent_at > offered;
        if done && more && took {
            return None;
        }
        Some(done)
    }

    /// Files slot `c`'s new deadline `at`, rebuilding the heap first if stale entries crowd it.
    fn arm(&mut self, c: usize, at: Nanos) {
        if self.timers.len() >= TIMER_SLACK * self.slots.len() {
            self.timers.clear();
            for (i, slot) in self.slots.iter().enumerate() {
                if let Some(d) = slot.deadline
                    && i != c
                {
                    self.timers.push(Reverse((d, i as u32)));
                }
            }
        }
        self.timers.push(Reverse((at, c as u32)));
    }

    /// When [`poll`](Self::poll) is next needed for a timer, if ever (frames received and
    /// requests submitted need a poll too). It may be a timer since moved later: a poll then
    /// finds nothing due.
    pub fn next_deadline(&self) -> Option<Nanos> {
        self.timers.peek().map(|&Reverse((at, _))| at)
    }

    /// Whether a poll has work regardless of timers.
    pub fn has_output(&self) -> bool {
        !self.dirty.is_empty() || !self.rst_owed.is_empty()
    }

    /// Closes every connection (FIN after the requests already queued).
    pub fn close_all(&mut self, now: Nanos) {
        for c in 0..self.slots.len() {
            if let Some(conn) = self.slots[c].conn.as_mut() {
                conn.close(now);
                self.mark(c);
            }
        }
    }

    /// Connections open (in any state but closed).
    pub fn open_connections(&self) -> usize {
        self.slots.iter().filter(|s| s.conn.is_some()).count()
    }

    /// Requests sent or queued and not answered, over all connections.
    pub fn in_flight(&self) -> usize {
        self.slots.iter().map(|s| s.session.in_flight()).sum()
    }

    pub fn counters(&self) -> &FleetCounters {
        &self.counters
    }

    pub fn checks(&self) -> &KvChecks {
        &self.checks
    }

    pub fn recorder(&self) -> &ResponseRecorder {
        &self.recorder
    }

    /// Replies after `deadline_ns` count as late, and their requests as lost.
    pub fn set_deadline(&mut self, deadline_ns: u64) {
        self.recorder.set_deadline(deadline_ns);
    }

    /// The loadgen summary of the timed requests so far: latency from scheduled time, send
    /// lateness, matched, malformed (wrong replies), late and lost.
    pub fn summary(&self, run: &RunInfo, policy: &AdherencePolicy) -> Summary {
        summarize(run, &self.send, &self.recorder, policy)
    }

    /// The engine's counters over every connection, open and gone: segments, bytes,
    /// retransmissions (RTO, fast, SYN), timeouts, drops by reason.
    pub fn tcp_counters(&self) -> TcpCounters {
        let mut t = TcpCounters {
            active_opens: self.counters.connects,
            failed_opens: self.counters.refused,
            resets_received: self.counters.resets + self.counters.refused,
            resets_sent: self.counters.resets_sent,
            established_now: self
                .slots
                .iter()
                .filter(|s| {
                    s.conn
                        .as_ref()
                        .is_some_and(|c| c.state() == State::Established)
                })
                .count() as u64,
            ..TcpCounters::default()
        };
        t.absorb(&self.closed_stats);
        for s in &self.slots {
            if let Some(conn) = &s.conn {
                t.absorb(conn.stats());
            }
        }
        t
    }

    /// Retransmitted segments of every kind, over every connection.
    pub fn retransmissions(&self) -> u64 {
        let c = self.tcp_counters().conns;
        c.rto_retransmits + c.fast_retransmits + c.syn_retransmits
    }

    /// Schedule time of the last timed request taken or refused.
    pub fn last_send_ns(&self) -> u64 {
        self.send.last_actual_ns()
    }

    /// The checks, both recorders and the counters, for the run's report.
    pub fn finish(
        self,
    ) -> (
        KvChecks,
        SendRecorder,
        ResponseRecorder,
        FleetCounters,
        TcpCounters,
    ) {
        let tcp = self.tcp_counters();
        (self.checks, self.send, self.recorder, self.counters, tcp)
    }
}

/// Adds `s` into `into` (a connection gone, into the fleet's totals).
fn absorb(into: &mut ConnStats, s: &ConnStats) {
    let mut t = TcpCounters {
        conns: into.clone(),
        ..TcpCounters::default()
    };
    t.absorb(s);
    *into = t.conns;
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_loadgen::kv::KvWorkload;
    use corral_wire::TcpFlags;

    const TARGET: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 11211);

    fn fleet(connections: usize, max_in_flight: usize) -> TcpFleet {
        let mut config = FleetConfig::new(
            connections,
            (MacAddr([2, 0, 0, 0, 0, 2]), Ipv4Addr::new(10, 0, 0, 2)),
            (MacAddr([2, 0, 0, 0, 0, 1]), TARGET),
        );
        config.max_in_flight = max_in_flight;
        TcpFleet::new(
            config,
            Keyspace::new(KvWorkload::new(100)),
            ResponseRecorder::new(0, 100),
        )
    }

    fn request(key: u64, id: u64) -> FleetRequest {
        FleetRequest {
            op: Op::Get { key },
            id: Some(id),
            scheduled_ns: id,
        }
    }

    #[test]
    fn bad_configs_are_refused_with_the_field_named() {
        let ok = fleet(1, 1).config().clone();
        for (bad, field) in [
            (
                FleetConfig {
                    connections: 0,
                    ..ok.clone()
                },
                "connections",
            ),
            (
                FleetConfig {
                    connections: MAX_CONNECTIONS + 1,
                    ..ok.clone()
                },
                "connections",
            ),
            (
                FleetConfig {
                    max_in_flight: 0,
                    ..ok.clone()
                },
                "max_in_flight",
            ),
            (
                FleetConfig {
                    tcp: TcpConfig {
                        mss: 0,
                        ..ok.tcp.clone()
                    },
                    ..ok.clone()
                },
                "tcp.mss",
            ),
        ] {
            let e = bad.validate().unwrap_err();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn each_connection_opens_on_its_own_port_and_requests_beyond_the_bound_are_refused() {
        let mut f = fleet(4, 2);
        // Keys 1 and 5 share connection 1; key 2 goes on connection 2.
        assert_eq!(f.submit(0, request(1, 0)), Ok(1));
        assert_eq!(f.submit(0, request(5, 1)), Ok(1));
        assert_eq!(f.submit(0, request(9, 2)), Err(Refused::TooManyInFlight));
        assert_eq!(f.submit(0, request(2, 3)), Ok(2));
        let mut out = FrameList::new(16);
        f.poll(0, &mut out);
        let frames = out.take();
        assert_eq!(frames.len(), 2, "one SYN per opened connection");
        let mut ports = Vec::new();
        for frame in &frames {
            let parsed = parse_frame(frame).expect("a valid frame");
            let Packet::Tcp { ip, tcp } = parsed.packet else {
                panic!("not TCP");
            };
            assert_eq!((ip.dst(), tcp.dst_port()), (*TARGET.ip(), TARGET.port()));
            assert_eq!(tcp.flags(), TcpFlags::SYN);
            assert!(tcp.payload().is_empty());
            ports.push(tcp.src_port());
        }
        ports.sort_unstable();
        assert_eq!(ports, [TcpFleet::port_of(1), TcpFleet::port_of(2)]);
        let c = f.counters();
        assert_eq!((c.connects, c.requests, c.refused_requests), (2, 3, 1));
        assert_eq!(f.in_flight(), 3);
        // The SYN's retransmission timer is the next deadline.
        let at = f.next_deadline().expect("a SYN timer");
        f.poll(at, &mut out);
        assert_eq!(out.take().len(), 2);
        assert_eq!(f.retransmissions(), 2);
    }

    #[test]
    fn frames_for_other_addresses_or_ports_are_counted_as_foreign() {
        let mut f = fleet(2, 1);
        f.receive(&[0u8; 10], 0);
        let spec = Ipv4FrameSpec {
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            dst_mac: MacAddr([2, 0, 0, 0, 0, 2]),
            src_ip: *TARGET.ip(),
            dst_ip: Ipv4Addr::new(10, 0, 0, 2),
            ttl: 64,
            ident: 0,
            tos: 0,
        };
        let mut buf = [0u8; 128];
        // To a port past the fleet's connections.
        let header = corral_wire::TcpHeader {
            src_port: TARGET.port(),
            dst_port: TcpFleet::port_of(2),
            seq: 1,
            ack: 0,
            flags: TcpFlags::RST,
            window: 0,
            urgent: 0,
            options: corral_wire::TcpOptionSet::default(),
        };
        let n = spec.build_tcp(&mut buf, &header, &[]).unwrap();
        f.receive(&buf[..n], 0);
        // A RST to a connection never opened: stray, and not answered.
        let header = corral_wire::TcpHeader {
            dst_port: TcpFleet::port_of(1),
            ..header
        };
        let n = spec.build_tcp(&mut buf, &header, &[]).unwrap();
        f.receive(&buf[..n], 0);
        let c = *f.counters();
        assert_eq!((c.foreign_frames, c.frames_in, c.stray_segments), (2, 1, 1));
        let mut out = FrameList::new(4);
        f.poll(0, &mut out);
        assert!(out.take().is_empty());
    }
}
