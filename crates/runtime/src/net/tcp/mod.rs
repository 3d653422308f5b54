//! The runtime's TCP: the sans-I/O engine (`corral-tcp`) driven by the receive path, the
//! runtime's timers and the application's calls.
//!
//! * [`TcpLayer`] (here): the connection table (sharded by 4-tuple, bounded), the listener
//!   table, demultiplexing of arriving segments, transmission of what the engine emits, the
//!   in-runtime loopback, and the counters.
//! * `conn`: one connection: the per-connection lock with its pending queue (resequencing),
//!   wake-ups, the timer.
//! * `listen`: one listening port and its accept queue.
//! * `ports`: local ports for outgoing connections, chosen so iokerneld's RSS steers the
//!   replies back to the dialing kthread.
//! * `api`: [`TcpListener`] and [`TcpStream`], mirroring `std::net`.
//! * `settings`: [`TcpSettings`], part of [`crate::net::NetConfig`].

pub(crate) mod api;
pub(crate) mod conn;
pub(crate) mod listen;
pub(crate) mod ports;
pub(crate) mod settings;

#[cfg(test)]
mod tests;

use core::hash::{BuildHasherDefault, Hash, Hasher};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use corral_abi::{FRAME_CAPACITY, MAX_FRAME};
use corral_tcp::{
    ConnStats, Connection, Endpoints, Events, ListenerConfig, State, SynOutcome, TcpCounters,
    TcpDrop,
};
use corral_wire::frame::L4_OFFSET;
use corral_wire::{Ipv4FrameSpec, MacAddr, RssHasher, TcpFlags, TcpSegment};

pub use api::{Incoming, TcpListener, TcpStream};
pub use settings::TcpSettings;

use conn::{ConnCell, Held};
use listen::ListenerCell;

use crate::net::stack::{Lookup, NetStack, StackDrop, TTL};
use crate::sync::spin::SpinLock;

/// How long a connection uses the next hop's MAC it last found in the ARP table without
/// looking again (well under the table's own expiry).
const NEIGHBOUR_CACHE_NS: u64 = 1_000_000_000;

/// Shards of the connection table: lookups on different flows rarely meet on one lock.
const SHARDS: usize = 64;

/// FxHash-style hasher for 4-tuples: the key is not attacker-chosen beyond what the peer's
/// address and port select, and the table is bounded.
#[derive(Default)]
pub(crate) struct FlowHasher(u64);

impl Hasher for FlowHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(n)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FlowMap<V> = HashMap<Endpoints, V, BuildHasherDefault<FlowHasher>>;

/// Counters of the layer itself (connections count their own).
#[derive(Default)]
struct LayerCounters {
    drops: [AtomicU64; TcpDrop::COUNT],
    active_opens: AtomicU64,
    failed_opens: AtomicU64,
    resets_sent: AtomicU64,
    resets_received: AtomicU64,
    table_peak: AtomicU64,
}

/// Frames sent to the runtime's own address, delivered after the sender let its connection go
/// (a connection talking to another in the same runtime would otherwise re-enter itself).
struct Loopback {
    frames: VecDeque<(Vec<u8>, usize)>,
    spare: Vec<Vec<u8>>,
    draining: bool,
}

/// One live connection as [`crate::net::NetStats`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpConnInfo {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    pub state: State,
    /// Bytes the engine holds for it (buffers, queues), as `Connection::memory` reports.
    pub memory: usize,
    pub stats: ConnStats,
}

/// The TCP part of [`crate::net::NetStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Totals: every drop reason (`counters.conns.drops`, indexed by `TcpDrop as usize`) and
    /// every retransmission kind, over closed and live connections, listeners and the layer.
    pub counters: TcpCounters,
    /// Connections in the table now (every state, TIME-WAIT included).
    pub connections: u64,
    /// Listening ports.
    pub listeners: u64,
    /// Segments a connection's pending queue could not take (contention overflow).
    pub pending_overflow: u64,
    /// One entry per live connection.
    pub live: Vec<TcpConnInfo>,
}

impl TcpStats {
    /// The count of the TCP drop reason named `name` (`TcpDrop::as_str`), 0 if unknown.
    pub fn drop_count(&self, name: &str) -> u64 {
        TcpDrop::ALL
            .iter()
            .find(|d| d.as_str() == name)
            .map_or(0, |&d| self.counters.conns.drops[d as usize])
    }

    /// Every drop reason with its name, zeros included.
    pub fn drops(&self) -> Vec<(&'static str, u64)> {
        TcpDrop::ALL
            .iter()
            .map(|&d| (d.as_str(), self.counters.conns.drops[d as usize]))
            .collect()
    }
}

/// Adds `from` (listener or layer counters, conns included) to `to`.
fn merge(to: &mut TcpCounters, from: &TcpCounters) {
    to.absorb(&from.conns);
    to.active_opens += from.active_opens;
    to.passive_opens += from.passive_opens;
    to.failed_opens += from.failed_opens;
    to.resets_sent += from.resets_sent;
    to.resets_received += from.resets_received;
    to.syn_cookies_sent += from.syn_cookies_sent;
    to.syn_cookies_accepted += from.syn_cookies_accepted;
}

/// The runtime's TCP state, one per [`NetStack`].
pub(crate) struct TcpLayer {
    settings: TcpSettings,
    secret: [u8; 16],
    shards: Box<[SpinLock<FlowMap<Arc<ConnCell>>>]>,
    live: AtomicUsize,
    /// Connections for which a bare ACK may not wait (see `TcpLayer::acks_can_wait`).
    needing_prompt_acks: AtomicUsize,
    listeners: SpinLock<HashMap<u16, Arc<ListenerCell>>>,
    counters: LayerCounters,
    /// Stats of closed connections.
    retired_conns: SpinLock<ConnStats>,
    /// Counters of closed listeners.
    retired_listeners: SpinLock<TcpCounters>,
    /// Connections whose stats changed since the counters were last reported to iokerneld.
    unreported: SpinLock<Vec<Arc<ConnCell>>>,
    /// Connections that owe a receive batch its ACK (see `conn`), and whether there are any.
    owe_batch_acks: SpinLock<Vec<Arc<ConnCell>>>,
    batch_acks_owed: AtomicBool,
    /// The sum over every connection, closed ones included, of its stats as last reported.
    reported_conns: SpinLock<ConnStats>,
    loopback: SpinLock<Loopback>,
    loopback_queued: AtomicBool,
    next_port: AtomicUsize,
    /// The hash iokerneld steers by (see `ports`).
    rss: Box<RssHasher>,
}

impl TcpLayer {
    pub fn new(settings: TcpSettings, seed: u64) -> TcpLayer {
        let mut secret = [0u8; 16];
        // Secrets for ISNs and cookies: per runtime, unpredictable enough from the outside.
        let mut s = seed ^ 0x9e37_79b9_7f4a_7c15;
        for chunk in secret.chunks_mut(8) {
            s = s.wrapping_mul(0x2545_f491_4f6c_dd1d).rotate_left(29) ^ crate::timer::now_ns();
            chunk.copy_from_slice(&s.to_le_bytes());
        }
        TcpLayer {
            settings,
            secret,
            shards: (0..SHARDS)
                .map(|_| SpinLock::new(FlowMap::default()))
                .collect(),
            live: AtomicUsize::new(0),
            needing_prompt_acks: AtomicUsize::new(0),
            listeners: SpinLock::new(HashMap::new()),
            counters: LayerCounters::default(),
            retired_conns: SpinLock::new(ConnStats::default()),
            retired_listeners: SpinLock::new(TcpCounters::default()),
            unreported: SpinLock::new(Vec::new()),
            owe_batch_acks: SpinLock::new(Vec::new()),
            batch_acks_owed: AtomicBool::new(false),
            reported_conns: SpinLock::new(ConnStats::default()),
            loopback: SpinLock::new(Loopback {
                frames: VecDeque::new(),
                spare: Vec::new(),
                draining: false,
            }),
            loopback_queued: AtomicBool::new(false),
            next_port: AtomicUsize::new(seed as usize),
            rss: Box::default(),
        }
    }

    pub fn settings(&self) -> &TcpSettings {
        &self.settings
    }

    pub fn next_port(&self) -> &AtomicUsize {
        &self.next_port
    }

    pub fn rss(&self) -> &RssHasher {
        &self.rss
    }

    pub fn secret(&self) -> &[u8; 16] {
        &self.secret
    }

    pub fn count_drop(&self, why: TcpDrop) {
        self.counters.drops[why as usize].fetch_add(1, Relaxed);
    }

    pub fn count_reset_received(&self) {
        self.counters.resets_received.fetch_add(1, Relaxed);
    }

    pub fn count_active_open(&self, ok: bool) {
        if ok {
            self.counters.active_opens.fetch_add(1, Relaxed);
        } else {
            self.counters.failed_opens.fetch_add(1, Relaxed);
        }
    }

    // -----------------------------------------------------------------------------------------
    // The connection table

    fn shard(&self, ends: &Endpoints) -> &SpinLock<FlowMap<Arc<ConnCell>>> {
        let mut h = FlowHasher::default();
        ends.hash(&mut h);
        &self.shards[(h.finish() >> 32) as usize % SHARDS]
    }

    pub fn lookup(&self, ends: &Endpoints) -> Option<Arc<ConnCell>> {
        self.shard(ends).lock().get(ends).cloned()
    }

    pub fn contains(&self, ends: &Endpoints) -> bool {
        self.shard(ends).lock().contains_key(ends)
    }

    /// Adds a connection; `TableFull`, or `None` for a 4-tuple already in use. The caller owns
    /// the connection (or nobody else can see it yet) and marks it `in_table`.
    fn insert(&self, cell: &Arc<ConnCell>) -> Result<(), Option<TcpDrop>> {
        let max = self.settings.max_connections;
        if self.live.fetch_add(1, Relaxed) >= max {
            self.live.fetch_sub(1, Relaxed);
            self.count_drop(TcpDrop::TableFull);
            return Err(Some(TcpDrop::TableFull));
        }
        let ends = cell.ends();
        {
            let mut shard = self.shard(&ends).lock();
            if shard.contains_key(&ends) {
                drop(shard);
                self.live.fetch_sub(1, Relaxed);
                return Err(None);
            }
            shard.insert(ends, cell.clone());
        }
        let now = self.live.load(Relaxed) as u64;
        self.counters.table_peak.fetch_max(now, Relaxed);
        Ok(())
    }

    /// Removes a closed connection and keeps its stats.
    fn remove(&self, cell: &Arc<ConnCell>, stats: &ConnStats) {
        let ends = cell.ends();
        let removed = {
            let mut shard = self.shard(&ends).lock();
            match shard.get(&ends) {
                Some(c) if Arc::ptr_eq(c, cell) => shard.remove(&ends),
                _ => None,
            }
        };
        if removed.is_some() {
            self.live.fetch_sub(1, Relaxed);
        }
        self.retired_conns.lock().add(stats);
        // `removed` (an Arc) drops here, outside the shard lock.
    }

    /// Inserts a new connection the caller owns, marking it so.
    fn insert_owned(&self, held: &mut Held<'_>) -> Result<(), Option<TcpDrop>> {
        let cell = held.cell.clone();
        self.insert(&cell)?;
        held.owned_state().in_table = true;
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Listeners

    /// Adds a listener on `local` (port 0: a free ephemeral port); `EADDRINUSE` if taken.
    /// `ip` is the address bound (unspecified or ours); `ours` the runtime's address, which
    /// the listener's cookies and ISNs are computed over.
    pub fn listen(
        &self,
        ip: Ipv4Addr,
        ours: Ipv4Addr,
        port: u16,
        backlog: usize,
    ) -> std::io::Result<Arc<ListenerCell>> {
        let mut table = self.listeners.lock();
        let port = if port != 0 {
            if table.contains_key(&port) {
                return Err(std::io::Error::from_raw_os_error(libc::EADDRINUSE));
            }
            port
        } else {
            ports::free_listen_port(&self.next_port, |p| table.contains_key(&p))
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EADDRINUSE))?
        };
        let s = &self.settings;
        let config = ListenerConfig {
            syn_backlog: s.syn_backlog,
            accept_backlog: backlog,
            syn_cookies: s.syn_cookies,
            tcp: s.tcp.clone(),
            ..ListenerConfig::new(self.secret)
        };
        let cell = Arc::new(ListenerCell::new(
            SocketAddrV4::new(ip, port),
            SocketAddrV4::new(ours, port),
            config,
        ));
        table.insert(port, cell.clone());
        Ok(cell)
    }

    /// Removes a listener; its queued, never accepted connections are reset.
    pub fn unlisten(&self, stack: &NetStack, cell: &Arc<ListenerCell>) {
        {
            let mut table = self.listeners.lock();
            let port = cell.local().port();
            if table.get(&port).is_some_and(|l| Arc::ptr_eq(l, cell)) {
                table.remove(&port);
            }
        }
        let queued = {
            let mut s = cell.state.lock();
            s.closed = true;
            core::mem::take(&mut s.queue)
        };
        cell.acceptors.wake_all();
        for c in queued {
            let mut held = Held::enter(stack, &c);
            let now = crate::timer::now_ns();
            held.conn().abort(now);
            held.after(Events::NONE, now);
        }
        let counters = cell.counters();
        merge(&mut self.retired_listeners.lock(), &counters);
    }

    fn listener_for(&self, local: SocketAddrV4) -> Option<Arc<ListenerCell>> {
        let l = self.listeners.lock().get(&local.port()).cloned()?;
        (l.local().ip().is_unspecified() || l.local().ip() == local.ip()).then_some(l)
    }

    // -----------------------------------------------------------------------------------------
    // Receive

    /// A verified segment arrived from `src` to `dst` (our address); `l4` is its bytes.
    /// `in_batch`: one of a receive batch, which ends with [`TcpLayer::end_receive_batch`].
    pub fn input(
        &self,
        stack: &NetStack,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        l4: &[u8],
        now: u64,
        in_batch: bool,
    ) {
        let Ok(seg) = TcpSegment::parse_unverified(l4) else {
            return;
        };
        let ends = Endpoints {
            local: SocketAddrV4::new(dst, seg.dst_port()),
            remote: SocketAddrV4::new(src, seg.src_port()),
        };
        match self.lookup(&ends) {
            Some(cell) => {
                if cell.own_or_queue(l4) {
                    let mut held = Held::owned(stack, &cell, in_batch);
                    let kept = held.segment(l4, now);
                    held.release();
                    if !kept {
                        self.to_listener(stack, ends, l4, now);
                    }
                }
            }
            None => self.to_listener(stack, ends, l4, now),
        }
        self.flush_loopback(stack);
    }

    /// A segment no connection took: the listener's, or a RST.
    pub fn to_listener(&self, stack: &NetStack, ends: Endpoints, l4: &[u8], now: u64) {
        let Ok(seg) = TcpSegment::parse_unverified(l4) else {
            return;
        };
        let flags = seg.flags();
        let listener = self.listener_for(ends.local);
        let Some(listener) = listener else {
            self.count_drop(TcpDrop::NoConnection);
            self.reset(stack, ends, &seg, now);
            return;
        };
        if flags.contains(TcpFlags::RST) {
            self.count_drop(TcpDrop::NoConnection);
            return;
        }
        if flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK) {
            self.syn(stack, &listener, ends, &seg, now);
        } else if flags.contains(TcpFlags::ACK) && !flags.contains(TcpFlags::SYN) {
            let handshake = listener.state.lock().engine.on_ack(now, ends, &seg);
            match handshake {
                Some(h) => self.cookie_established(stack, &listener, &h, l4, now),
                None => {
                    self.count_drop(TcpDrop::NoConnection);
                    self.reset(stack, ends, &seg, now);
                }
            }
        } else {
            self.count_drop(TcpDrop::NoConnection);
            self.reset(stack, ends, &seg, now);
        }
    }

    fn syn(
        &self,
        stack: &NetStack,
        listener: &Arc<ListenerCell>,
        ends: Endpoints,
        seg: &TcpSegment<'_>,
        now: u64,
    ) {
        let mut cookie = [0u8; corral_tcp::conn::MAX_HEADER];
        let (outcome, tcp) = {
            let mut s = listener.state.lock();
            if s.closed {
                drop(s);
                self.count_drop(TcpDrop::NoConnection);
                self.reset(stack, ends, seg, now);
                return;
            }
            let o = s.engine.on_syn(now, ends.remote, seg, &mut cookie);
            (o, s.engine.config().tcp.clone())
        };
        match outcome {
            SynOutcome::HalfOpen { iss } => {
                let conn = Connection::accept_syn(&tcp, ends, seg, iss, now);
                let cell = Arc::new(ConnCell::new(conn, Some(listener.clone()), true));
                let mut held = Held::enter(stack, &cell);
                if self.insert_owned(&mut held).is_err() {
                    // Full table (counted), or a connection raced us to this 4-tuple: the SYN
                    // is dropped and the peer retries.
                    let o = held.owned_state();
                    o.half_open = false;
                    o.listener = None;
                    listener.half_open_done();
                    return;
                }
                held.after(Events::NONE, now);
            }
            SynOutcome::Cookie { len } => {
                let _ = self.send_segment(stack, *ends.remote.ip(), now, &mut |out| {
                    out[..len].copy_from_slice(&cookie[..len]);
                    Some(len)
                });
            }
            SynOutcome::Dropped(_) => {}
        }
    }

    fn cookie_established(
        &self,
        stack: &NetStack,
        listener: &Arc<ListenerCell>,
        h: &corral_tcp::Handshake,
        l4: &[u8],
        now: u64,
    ) {
        let tcp = listener.state.lock().engine.config().tcp.clone();
        let conn = Connection::from_handshake(&tcp, h, now);
        let cell = Arc::new(ConnCell::new(conn, None, false));
        let mut held = Held::enter(stack, &cell);
        if self.insert_owned(&mut held).is_err() {
            held.conn().abort(now);
            held.after(Events::NONE, now);
            return;
        }
        if !listener.push_accepted(cell.clone()) {
            self.count_drop(TcpDrop::AcceptQueueFull);
            held.conn().abort(now);
            held.after(Events::NONE, now);
            return;
        }
        // Data may ride on the completing ACK.
        held.segment(l4, now);
    }

    /// Answers `seg` with a RST (unless it is one).
    fn reset(&self, stack: &NetStack, ends: Endpoints, seg: &TcpSegment<'_>, now: u64) {
        let mut sent = false;
        let _ = self.send_segment(stack, *ends.remote.ip(), now, &mut |out| {
            let n = corral_tcp::reset::reset_for(ends.local, ends.remote, seg, out);
            sent = n.is_some();
            n
        });
        if sent {
            self.counters.resets_sent.fetch_add(1, Relaxed);
        }
    }

    /// Inserts an outgoing connection (the caller holds it); `EADDRINUSE` when the 4-tuple is
    /// taken, `ENOBUFS` when the table is full.
    pub fn insert_active(&self, held: &mut Held<'_>) -> std::io::Result<()> {
        self.insert_owned(held).map_err(|e| match e {
            Some(_) => std::io::Error::from_raw_os_error(libc::ENOBUFS),
            None => std::io::Error::from_raw_os_error(libc::EADDRINUSE),
        })
    }

    // -----------------------------------------------------------------------------------------
    // Transmit

    /// Sends everything the engine has to send now. False when it stopped for want of a
    /// transmit buffer (the caller retries soon).
    pub fn transmit(&self, stack: &NetStack, owned: &mut conn::Owned, now: u64) -> bool {
        let conn = &mut owned.conn;
        let remote = *conn.ends().remote.ip();
        let mut write = |out: &mut [u8]| conn.poll_transmit(now, out);
        loop {
            let sent = match owned.neighbour {
                // The next hop's MAC as recently resolved: no ARP table lookup per segment.
                Some((mac, until)) if until > now => {
                    self.send_resolved(stack, remote, mac, &mut write)
                }
                _ => {
                    let (sent, mac) = self.send_segment(stack, remote, now, &mut write);
                    if let Some(mac) = mac {
                        owned.neighbour = Some((mac, now.saturating_add(NEIGHBOUR_CACHE_NS)));
                    }
                    sent
                }
            };
            match sent {
                SendOutcome::Went => {}
                SendOutcome::Nothing => return true,
                SendOutcome::Blocked => return false,
            }
        }
    }

    /// Sends one segment that `write` puts at the start of the buffer it is given (`None`:
    /// nothing to send). Also returns the next hop's MAC when the ARP table knew it.
    fn send_segment(
        &self,
        stack: &NetStack,
        remote: Ipv4Addr,
        now: u64,
        write: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> (SendOutcome, Option<MacAddr>) {
        if remote == stack.ip() {
            return (self.send_resolved(stack, remote, stack.mac(), write), None);
        }
        let Some(next_hop) = stack.next_hop(remote) else {
            return (self.discard(stack, write, StackDrop::NoLink), None);
        };
        match stack.lookup(next_hop, now) {
            Lookup::Known(mac) => (self.send_resolved(stack, remote, mac, write), Some(mac)),
            Lookup::Queued { send_request } => {
                let mut frame = vec![0u8; FRAME_CAPACITY];
                let Some(n) = write(&mut frame[L4_OFFSET..MAX_FRAME]) else {
                    return (SendOutcome::Nothing, None);
                };
                let len = self
                    .spec(stack, remote, MacAddr::ZERO)
                    .wrap_tcp_segment(&mut frame, n)
                    .unwrap_or(0);
                frame.truncate(len);
                if !stack.enqueue_unresolved(next_hop, frame) {
                    stack.count(StackDrop::ArpQueueFull);
                }
                if send_request {
                    stack.send_arp_request(next_hop, false);
                }
                (SendOutcome::Went, None)
            }
            Lookup::Full => (self.discard(stack, write, StackDrop::ArpQueueFull), None),
        }
    }

    fn spec(&self, stack: &NetStack, remote: Ipv4Addr, dst_mac: MacAddr) -> Ipv4FrameSpec {
        Ipv4FrameSpec {
            src_mac: stack.mac(),
            dst_mac,
            src_ip: stack.ip(),
            dst_ip: remote,
            ttl: TTL,
            ident: stack.ident(),
            tos: 0,
        }
    }

    /// Sends one segment to a next hop whose MAC is known (ourselves: the loopback queue).
    fn send_resolved(
        &self,
        stack: &NetStack,
        remote: Ipv4Addr,
        mac: MacAddr,
        write: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> SendOutcome {
        if remote == stack.ip() {
            let mut frame = self.loopback_buffer();
            let Some(n) = write(&mut frame[L4_OFFSET..MAX_FRAME]) else {
                self.recycle(frame);
                return SendOutcome::Nothing;
            };
            let len = self
                .spec(stack, remote, stack.mac())
                .wrap_tcp_segment(&mut frame, n)
                .unwrap_or(0);
            stack.count_tx(len);
            stack.count_loopback();
            let mut lb = self.loopback.lock();
            lb.frames.push_back((frame, len));
            self.loopback_queued.store(true, Relaxed);
            return SendOutcome::Went;
        }
        let spec = self.spec(stack, remote, mac);
        let mut wrote = false;
        let mut len = 0;
        let r = stack.link().transmit(false, &mut |buf| {
            wrote = true;
            len = match write(&mut buf[L4_OFFSET..MAX_FRAME]) {
                Some(n) => spec.wrap_tcp_segment(buf, n).unwrap_or(0),
                None => 0,
            };
            len
        });
        match r {
            Ok(()) if len == 0 => SendOutcome::Nothing,
            Ok(()) => {
                stack.count_tx(len);
                SendOutcome::Went
            }
            Err(reason) => {
                stack.count(reason);
                if !wrote {
                    SendOutcome::Blocked
                } else if len == 0 {
                    SendOutcome::Nothing
                } else {
                    // Lost like a full NIC queue: the engine retransmits it.
                    SendOutcome::Went
                }
            }
        }
    }

    /// Takes a segment that cannot go out and drops it, counted (the engine will retransmit).
    fn discard(
        &self,
        stack: &NetStack,
        write: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
        why: StackDrop,
    ) -> SendOutcome {
        let mut scratch = [0u8; MAX_FRAME - L4_OFFSET];
        match write(&mut scratch) {
            Some(_) => {
                stack.count(why);
                SendOutcome::Went
            }
            None => SendOutcome::Nothing,
        }
    }

    fn loopback_buffer(&self) -> Vec<u8> {
        self.loopback
            .lock()
            .spare
            .pop()
            .unwrap_or_else(|| vec![0u8; FRAME_CAPACITY])
    }

    fn recycle(&self, frame: Vec<u8>) {
        let mut lb = self.loopback.lock();
        if lb.spare.len() < 64 {
            lb.spare.push(frame);
        }
    }

    /// Delivers looped-back frames. Whoever finds the queue not being drained drains it; a
    /// frame queued meanwhile is picked up by the drainer before it stops.
    pub fn flush_loopback(&self, stack: &NetStack) {
        if !self.loopback_queued.load(Relaxed) {
            return;
        }
        crate::preempt::disable();
        {
            let mut lb = self.loopback.lock();
            if lb.draining {
                drop(lb);
                crate::preempt::enable();
                return;
            }
            lb.draining = true;
        }
        loop {
            let next = {
                let mut lb = self.loopback.lock();
                let f = lb.frames.pop_front();
                if f.is_none() {
                    lb.draining = false;
                    self.loopback_queued.store(false, Relaxed);
                }
                f
            };
            let Some((frame, len)) = next else { break };
            stack.receive(&frame[..len], crate::timer::now_ns());
            self.recycle(frame);
        }
        crate::preempt::enable();
    }

    // -----------------------------------------------------------------------------------------
    // Counters

    pub fn stats(&self, stack: &NetStack) -> TcpStats {
        let mut counters = self.counters_besides_connections();
        counters.absorb(&self.retired_conns.lock());
        let cells = self.live_cells();
        let mut live = Vec::with_capacity(cells.len());
        let mut pending_overflow = 0;
        for cell in &cells {
            pending_overflow += cell.pending_overflow();
            let mut held = Held::enter(stack, cell);
            let conn = held.conn();
            counters.absorb(conn.stats());
            let ends = conn.ends();
            live.push(TcpConnInfo {
                local: ends.local,
                remote: ends.remote,
                state: conn.state(),
                memory: conn.memory(),
                stats: conn.stats().clone(),
            });
        }
        live.sort_by_key(|i| (i.local.port(), i.remote.port(), *i.remote.ip()));
        TcpStats {
            counters,
            connections: self.live.load(Relaxed) as u64,
            listeners: self.listeners.lock().len() as u64,
            pending_overflow,
            live,
        }
    }

    /// The totals of [`TcpLayer::stats`] (`TcpStats::counters`), at a cost that grows with the
    /// connections changed since the last call rather than with all of them: iokerneld's
    /// report is refreshed every time a runtime goes quiet, up to once per request on a
    /// request/response server. Each connection's stats as last reported are kept with it,
    /// and their sum here; only what changed since is read. Scheduler context.
    pub fn report_counters(&self, stack: &NetStack) -> TcpCounters {
        let mut changed = core::mem::take(&mut *self.unreported.lock());
        let mut growth = ConnStats::default();
        for cell in &changed {
            cell.clear_unreported();
            Held::enter(stack, cell).report_growth(&mut growth);
        }
        changed.clear();
        {
            // Hand the buffer back, unless connections were noted meanwhile.
            let mut list = self.unreported.lock();
            if list.is_empty() {
                core::mem::swap(&mut *list, &mut changed);
            }
        }
        let mut counters = self.counters_besides_connections();
        let mut reported = self.reported_conns.lock();
        reported.add(&growth);
        counters.absorb(&reported);
        counters
    }

    /// [`TcpLayer::report_counters`] with the layer's sizes: a [`TcpStats`] without the
    /// per-connection parts (`live`, `pending_overflow`).
    pub fn totals(&self, stack: &NetStack) -> TcpStats {
        TcpStats {
            counters: self.report_counters(stack),
            connections: self.live.load(Relaxed) as u64,
            listeners: self.listeners.lock().len() as u64,
            pending_overflow: 0,
            live: Vec::new(),
        }
    }

    /// Whether every bare ACK that arrives now may wait until the runtime runs for another
    /// reason (a segment with data, a timer): no connection needs one promptly
    /// (`Connection::needs_prompt_acks`) and no listener has a SYN cookie out. Told to
    /// iokerneld when the runtime parks, so that a request/response server is not woken once
    /// more per request by its client's ACK of the reply.
    pub fn acks_can_wait(&self, now: u64) -> bool {
        if self.needing_prompt_acks.load(Relaxed) != 0 {
            return false;
        }
        let listeners = self.listeners.lock();
        !listeners.values().any(|l| l.needs_prompt_acks(now))
    }

    /// A connection started or stopped needing bare ACKs promptly.
    pub(super) fn count_needing_prompt_acks(&self, needs: bool) {
        if needs {
            self.needing_prompt_acks.fetch_add(1, Relaxed);
        } else {
            self.needing_prompt_acks.fetch_sub(1, Relaxed);
        }
    }

    /// Notes that a connection's stats changed (once until the next report).
    pub(super) fn note_unreported(&self, cell: &Arc<ConnCell>) {
        self.unreported.lock().push(cell.clone());
    }

    /// Notes that a connection owes a receive batch its ACK (once until the batch ends).
    pub(super) fn note_owes_batch_ack(&self, cell: &Arc<ConnCell>) {
        self.owe_batch_acks.lock().push(cell.clone());
        self.batch_acks_owed.store(true, Relaxed);
    }

    /// A receive batch ended: sends the ACKs its segments left owed.
    pub fn end_receive_batch(&self, stack: &NetStack, now: u64) {
        if !self.batch_acks_owed.load(Relaxed) {
            return;
        }
        let owed = {
            let mut list = self.owe_batch_acks.lock();
            self.batch_acks_owed.store(false, Relaxed);
            std::mem::take(&mut *list)
        };
        for cell in owed {
            cell.clear_owes_batch_ack();
            // Owned elsewhere, it is skipped: a release outside a batch sends the ACK, one
            // inside lists the connection again; should that release have looked just before
            // the list was taken, the delayed-ACK timer sends it.
            if let Some(mut held) = Held::try_enter(stack, &cell) {
                held.end_receive_batch(now);
                held.release();
            }
        }
        self.flush_loopback(stack);
    }

    /// What is counted outside connections: the layer's own counters and drops, and the
    /// listeners' (closed ones included).
    fn counters_besides_connections(&self) -> TcpCounters {
        let mut counters = self.retired_listeners.lock().clone();
        let c = &self.counters;
        let layer = TcpCounters {
            active_opens: c.active_opens.load(Relaxed),
            failed_opens: c.failed_opens.load(Relaxed),
            resets_sent: c.resets_sent.load(Relaxed),
            resets_received: c.resets_received.load(Relaxed),
            ..TcpCounters::default()
        };
        merge(&mut counters, &layer);
        for (total, d) in counters.conns.drops.iter_mut().zip(&c.drops) {
            *total += d.load(Relaxed);
        }
        let listeners: Vec<Arc<ListenerCell>> = self.listeners.lock().values().cloned().collect();
        for l in &listeners {
            merge(&mut counters, &l.counters());
        }
        counters.established_now = self.live.load(Relaxed) as u64;
        counters.table_peak = c.table_peak.load(Relaxed);
        counters
    }
}

impl TcpLayer {
    /// Every connection in the table, taken out of the shards so that no shard lock is held
    /// while a connection is entered.
    fn live_cells(&self) -> Vec<Arc<ConnCell>> {
        let mut cells = Vec::new();
        for shard in self.shards.iter() {
            cells.extend(shard.lock().values().cloned());
        }
        cells
    }

    /// Each live connection described for diagnostics: its endpoints, the engine's sequence
    /// variables, windows and timers, and the runtime's side (timer armed, transmit blocked,
    /// blocked readers and writers). Formatting is not cheap: not for the statistics path.
    pub fn describe_connections(&self, stack: &NetStack) -> Vec<String> {
        self.live_cells()
            .iter()
            .map(|cell| {
                let mut held = Held::enter(stack, cell);
                let (armed, tx_blocked) = (cell.armed_deadline(), held.owned_state().tx_blocked);
                format!(
                    "{:?}; timer armed for {armed:?}, tx blocked {tx_blocked}, readers {}, \
                     writers {}",
                    held.conn(),
                    cell.readers.maybe_waiters(),
                    cell.writers.maybe_waiters(),
                )
            })
            .collect()
    }
}

/// What [`TcpLayer::send_segment`] did.
enum SendOutcome {
    Went,
    Nothing,
    /// No transmit buffer: `write` was not called.
    Blocked,
}

/// A TCP timer of the runtime's fired: see [`conn::timer_fired`].
pub(crate) use conn::timer_fired;
