//! An open-loop memcached client on Linux sockets, over TCP or UDP: the baseline that plays
//! the same schedule and measures it with the same recorder as iokerneld's generator.
//!
//! Requests go to connection `key % connections` (a TCP connection or a UDP socket), and
//! connection `c` belongs to thread `c % threads`. Every thread walks the whole schedule and
//! plays the requests of its own connections, so the threads share nothing while the run is
//! on; their recorders are merged at the end. Because every request on a key goes over one
//! TCP connection, which memcached serves in order, a get must return exactly the last value
//! set before it ([`Ordering::InOrder`]); UDP datagrams may be served out of order, so there a
//! get may return any version this client had set ([`Ordering::Unordered`]).
//!
//! A thread sends each request when it is due (spinning, like the UDP spin client), never
//! waits for replies (requests pipeline on a TCP connection), and measures latency from the
//! scheduled send time, so a slow server or a connection whose send buffer is full shows up as
//! latency and as send lateness: no coordinated omission. Replies are parsed by
//! [`crate::memcache`] and checked by [`crate::kv`]; a wrong reply is counted as an error and
//! as `malformed` in the summary, not as a latency sample.
//!
//! Before the clock starts, every key is set once (version 1) unless `preload` is off, with a
//! bounded number of sets in flight per connection, and each set's reply is checked.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use corral_affinity::pin_current_thread;

use crate::client::monotonic_ns;
use crate::kv::{Keyspace, KvChecks, KvWorkload, Ordering, ReplyCheck, Versions, encode_request};
use crate::kvstream::{InFlight, StreamSession, settle};
use crate::memcache::{UdpFrame, UdpReassembler};
use crate::recorder::{
    AdherencePolicy, ResponseRecorder, RunInfo, SendRecorder, Summary, summarize,
};
use crate::schedule::ScheduleConfig;

/// How requests reach memcached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
}

/// Largest value a UDP run may set: the request must fit in one datagram.
pub const UDP_MAX_VALUE: u32 = 60_000;

/// Sets in flight per TCP connection while preloading.
const PRELOAD_WINDOW: usize = 64;

/// Sets in flight per UDP socket while preloading: few, so that a burst of large sets does
/// not overflow the server's receive buffer (a lost set leaves its key unset).
const UDP_PRELOAD_WINDOW: usize = 4;

/// Most requests issued in one turn of the loop before the connections are written and read:
/// a client that fell behind catches up in batches, not with everything due at once.
const ISSUE_BATCH: usize = 64;

/// A TCP preload that makes no progress for this long fails.
const PRELOAD_STALL: Duration = Duration::from_secs(5);

/// A UDP preload that makes no progress for this long takes what is in flight as lost.
const UDP_PRELOAD_LOSS: Duration = Duration::from_millis(100);

/// How a run is set up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvClientConfig {
    pub server: SocketAddr,
    pub transport: Transport,
    pub schedule: ScheduleConfig,
    pub workload: KvWorkload,
    /// TCP connections, or UDP sockets.
    pub connections: usize,
    pub threads: usize,
    /// CPUs to pin thread `i` to (`cpus[i % len]`); none if empty.
    pub cpus: Vec<usize>,
    pub preload: bool,
    /// How long after the later of the last send and the schedule's end replies still count.
    pub grace_ns: u64,
    pub policy: AdherencePolicy,
}

impl KvClientConfig {
    pub fn new(server: SocketAddr, transport: Transport, schedule: ScheduleConfig) -> Self {
        let mut workload = KvWorkload::new(10_000);
        if transport == Transport::Udp {
            workload.max_value = workload.max_value.min(UDP_MAX_VALUE);
        }
        KvClientConfig {
            server,
            transport,
            schedule,
            workload,
            connections: 16,
            threads: 1,
            cpus: Vec::new(),
            preload: true,
            grace_ns: 100_000_000,
            policy: AdherencePolicy::default(),
        }
    }

    /// Checks every value; the error says which and why.
    pub fn validate(&self) -> io::Result<()> {
        self.schedule.validate().map_err(invalid)?;
        self.workload.validate().map_err(invalid)?;
        if !(1..=4096).contains(&self.connections) {
            return Err(invalid(format!(
                "invalid connections = {}: expected 1 to 4096",
                self.connections
            )));
        }
        if !(1..=self.connections.min(256)).contains(&self.threads) {
            return Err(invalid(format!(
                "invalid threads = {}: expected 1 to min(connections, 256)",
                self.threads
            )));
        }
        if self.transport == Transport::Udp && self.workload.max_value > UDP_MAX_VALUE {
            return Err(invalid(format!(
                "invalid max-value = {}: a UDP request must fit in one datagram (at most {UDP_MAX_VALUE})",
                self.workload.max_value
            )));
        }
        Ok(())
    }

    fn ordering(&self) -> Ordering {
        match self.transport {
            Transport::Tcp => Ordering::InOrder,
            Transport::Udp => Ordering::Unordered,
        }
    }
}

fn invalid(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e)
}

/// A run's results: the same summary as every other generator, and the reply checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KvReport {
    pub summary: Summary,
    pub checks: KvChecks,
    /// Seconds the preload took.
    pub preload_s: f64,
}

impl std::fmt::Display for KvReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n{}\npreload: {} keys set in {:.3} s",
            self.summary, self.checks, self.checks.preloaded, self.preload_s
        )
    }
}

/// Runs the schedule against `cfg.server`.
pub fn run(cfg: &KvClientConfig) -> io::Result<KvReport> {
    cfg.validate()?;
    let space = Arc::new(Keyspace::new(cfg.workload));
    let barrier = Arc::new(Barrier::new(cfg.threads));
    let epoch = Arc::new(AtomicU64::new(0));
    let preload_ns = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(cfg.threads);
    for t in 0..cfg.threads {
        let conns = (t..cfg.connections)
            .step_by(cfg.threads)
            .map(|_| Conn::open(cfg))
            .collect::<io::Result<Vec<_>>>()?;
        let (cfg, space, barrier, epoch, preload_ns) = (
            cfg.clone(),
            Arc::clone(&space),
            Arc::clone(&barrier),
            Arc::clone(&epoch),
            Arc::clone(&preload_ns),
        );
        handles.push(
            thread::Builder::new()
                .name(format!("kvload-{t}"))
                .spawn(move || {
                    let mut w = Worker::new(&cfg, t, conns, &space);
                    let start = Instant::now();
                    let preloaded = if cfg.preload { w.preload() } else { Ok(()) };
                    // Every thread reaches the barriers, even one whose preload failed, so
                    // that the others are not left waiting.
                    if barrier.wait().is_leader() {
                        preload_ns
                            .store(start.elapsed().as_nanos() as u64, AtomicOrdering::Relaxed);
                        epoch.store(monotonic_ns() + 20_000_000, AtomicOrdering::Release);
                    }
                    barrier.wait();
                    preloaded?;
                    w.play(epoch.load(AtomicOrdering::Acquire))
                })?,
        );
    }
    let mut results = Vec::with_capacity(handles.len());
    for h in handles {
        results.push(
            h.join()
                .map_err(|_| io::Error::other("a client thread panicked"))??,
        );
    }
    let mut results = results.into_iter();
    let first = results.next().expect("at least one thread");
    let (mut send, mut resp, mut checks, scheduled) = first;
    for (s, r, c, _) in results {
        send.merge(&s);
        resp.merge(&r);
        checks.merge(&c);
    }
    let summary = summarize(
        &RunInfo::of(&cfg.schedule, scheduled),
        &send,
        &resp,
        &cfg.policy,
    );
    Ok(KvReport {
        summary,
        checks,
        preload_s: preload_ns.load(AtomicOrdering::Relaxed) as f64 / 1e9,
    })
}

enum Socket {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// One connection (or UDP socket) and the requests in flight on it.
struct Conn {
    socket: Socket,
    /// TCP: bytes encoded and not yet written.
    out: Vec<u8>,
    out_at: usize,
    /// TCP: the requests in flight and the replies received.
    session: StreamSession,
    /// UDP: by request id.
    slots: Vec<Option<InFlight>>,
    next_request_id: u16,
    reassembler: UdpReassembler,
    in_flight: usize,
    dead: bool,
}

impl Conn {
    fn open(cfg: &KvClientConfig) -> io::Result<Conn> {
        let socket = match cfg.transport {
            Transport::Tcp => {
                let s = TcpStream::connect(cfg.server)?;
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
                Socket::Tcp(s)
            }
            Transport::Udp => {
                let local: SocketAddr = if cfg.server.is_ipv4() {
                    "0.0.0.0:0".parse().expect("literal address")
                } else {
                    "[::]:0".parse().expect("literal address")
                };
                let s = UdpSocket::bind(local)?;
                s.connect(cfg.server)?;
                s.set_nonblocking(true)?;
                Socket::Udp(s)
            }
        };
        let slots = match cfg.transport {
            Transport::Tcp => Vec::new(),
            Transport::Udp => vec![None; 1 << 16],
        };
        Ok(Conn {
            socket,
            out: Vec::with_capacity(64 << 10),
            out_at: 0,
            session: StreamSession::new(),
            slots,
            next_request_id: 0,
            reassembler: UdpReassembler::new(),
            in_flight: 0,
            dead: false,
        })
    }

    fn fd(&self) -> RawFd {
        match &self.socket {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Udp(s) => s.as_raw_fd(),
        }
    }
}

/// What a thread hands back: its recorders, its checks, and how many requests the whole
/// schedule made.
type ThreadResult = (SendRecorder, ResponseRecorder, KvChecks, u64);

/// One thread: its connections and its share of the schedule.
struct Worker<'a> {
    cfg: &'a KvClientConfig,
    space: &'a Keyspace,
    ordering: Ordering,
    thread: usize,
    conns: Vec<Conn>,
    versions: Versions,
    checks: KvChecks,
    check: ReplyCheck,
    key: Vec<u8>,
    value: Vec<u8>,
    /// A UDP request being built.
    datagram: Vec<u8>,
    /// Room for any UDP datagram received.
    inbound: Vec<u8>,
    epoll: Epoll,
}

impl<'a> Worker<'a> {
    fn new(cfg: &'a KvClientConfig, thread: usize, conns: Vec<Conn>, space: &'a Keyspace) -> Self {
        let epoll = Epoll::new().expect("epoll_create1");
        for (i, c) in conns.iter().enumerate() {
            epoll.add(c.fd(), i as u64).expect("epoll_ctl");
        }
        Worker {
            cfg,
            space,
            ordering: cfg.ordering(),
            thread,
            conns,
            versions: Versions::new(cfg.workload.keys),
            checks: KvChecks::default(),
            check: ReplyCheck::new(),
            key: Vec::new(),
            value: Vec::new(),
            datagram: Vec::with_capacity(65_536),
            inbound: vec![0; 65_536],
            epoll,
        }
    }

    /// The local connection for key `k`, if this thread owns it.
    fn conn_of(&self, k: u64) -> Option<usize> {
        let c = (k % self.cfg.connections as u64) as usize;
        (c % self.cfg.threads == self.thread).then_some(c / self.cfg.threads)
    }

    /// Encodes and sends a request on local connection `c`; returns whether it was taken. A
    /// TCP request is queued in user space and written by the next [`flush`] of its connection
    /// (the caller flushes every connection once it has issued what is due: one write per
    /// connection and loop turn, not per request).
    fn issue(&mut self, c: usize, op: crate::kv::Op, id: Option<u64>, scheduled_ns: u64) -> bool {
        let conn = &mut self.conns[c];
        if conn.dead {
            return false;
        }
        match &conn.socket {
            Socket::Tcp(_) => {
                conn.session.request(
                    self.space,
                    &mut self.versions,
                    op,
                    id,
                    scheduled_ns,
                    &mut conn.out,
                    &mut self.checks,
                );
                conn.in_flight += 1;
                true
            }
            Socket::Udp(sock) => {
                let rid = conn.next_request_id;
                conn.next_request_id = rid.wrapping_add(1);
                self.datagram.clear();
                self.datagram
                    .extend_from_slice(&UdpFrame::request(rid).encode());
                let expect = encode_request(
                    self.space,
                    &mut self.versions,
                    self.ordering,
                    op,
                    &mut self.datagram,
                    &mut self.key,
                    &mut self.value,
                );
                self.checks.count_op(&expect);
                conn.reassembler.forget(rid);
                // An older request under this id had no reply in 65536 sends: it is lost.
                if conn.slots[rid as usize].is_some() {
                    conn.in_flight -= 1;
                }
                match sock.send(&self.datagram) {
                    Ok(_) => {
                        conn.slots[rid as usize] = Some(InFlight {
                            id,
                            scheduled_ns,
                            expect,
                        });
                        conn.in_flight += 1;
                        true
                    }
                    Err(_) => {
                        conn.slots[rid as usize] = None;
                        false
                    }
                }
            }
        }
    }

    /// Reads whatever has arrived on local connection `c` and checks the replies.
    fn receive(
        &mut self,
        c: usize,
        now_ns: impl Fn() -> u64,
        rec: &mut Option<&mut ResponseRecorder>,
    ) {
        let conn = &mut self.conns[c];
        if conn.dead {
            return;
        }
        match &mut conn.socket {
            Socket::Tcp(s) => loop {
                let n = match s.read(conn.session.spare(64 << 10)) {
                    Ok(0) => {
                        fail(conn, &mut self.checks);
                        return;
                    }
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => {
                        fail(conn, &mut self.checks);
                        return;
                    }
                };
                conn.session.filled(n);
                let taken = conn.session.take_replies(
                    self.space,
                    now_ns(),
                    &mut self.checks,
                    rec.as_deref_mut(),
                );
                conn.in_flight = conn.session.in_flight();
                if taken.is_err() {
                    fail(conn, &mut self.checks);
                    return;
                }
            },
            Socket::Udp(s) => loop {
                let n = match s.recv(&mut self.inbound) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    // An ICMP error for an earlier datagram: that request is lost.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionRefused
                        ) =>
                    {
                        continue;
                    }
                    Err(_) => {
                        fail(conn, &mut self.checks);
                        return;
                    }
                };
                let now = now_ns();
                match conn.reassembler.accept(&self.inbound[..n]) {
                    Ok(None) => {}
                    Ok(Some((rid, reply))) => match conn.slots[rid as usize].take() {
                        Some(done) => {
                            conn.in_flight -= 1;
                            let v = self.check.check_whole(self.space, &done.expect, &reply);
                            settle(&mut self.checks, rec.as_deref_mut(), &done, v, now);
                        }
                        None => {
                            if let Some(r) = rec.as_deref_mut() {
                                r.record_stale();
                            }
                        }
                    },
                    Err(_) => {
                        self.checks.unparsable += 1;
                        if let Some(r) = rec.as_deref_mut() {
                            r.record_malformed();
                        }
                    }
                }
            },
        }
    }

    /// Sets every key this thread owns to version 1, a window of sets per connection at a
    /// time, and waits for their replies.
    fn preload(&mut self) -> io::Result<()> {
        let keys = self.cfg.workload.keys;
        let mut next_key = vec![0u64; self.conns.len()];
        // Connection `c` of this thread owns keys `g, g + connections, ...` with `g` its global
        // index.
        for (c, k) in next_key.iter_mut().enumerate() {
            *k = (c * self.cfg.threads + self.thread) as u64;
        }
        let window = match self.cfg.transport {
            Transport::Tcp => PRELOAD_WINDOW,
            Transport::Udp => UDP_PRELOAD_WINDOW,
        };
        let mut last_progress = Instant::now();
        let mut done_before = 0;
        loop {
            let mut all_sent = true;
            for (c, next) in next_key.iter_mut().enumerate() {
                while self.conns[c].in_flight < window && *next < keys && !self.conns[c].dead {
                    let k = *next;
                    *next += self.cfg.connections as u64;
                    self.issue(c, crate::kv::Op::Set { key: k }, None, 0);
                }
                all_sent &= *next >= keys || self.conns[c].dead;
            }
            for c in 0..self.conns.len() {
                flush(&mut self.conns[c], &mut self.checks);
            }
            for i in 0..self.epoll.wait(1)? {
                let c = self.epoll.token(i);
                self.receive(c, || 0, &mut None);
            }
            let in_flight: usize = self
                .conns
                .iter()
                .filter(|c| !c.dead)
                .map(|c| c.in_flight)
                .sum();
            if all_sent && in_flight == 0 {
                break;
            }
            let done = self.checks.correct() + self.checks.errors();
            if done != done_before {
                done_before = done;
                last_progress = Instant::now();
            } else if self.cfg.transport == Transport::Udp
                && last_progress.elapsed() > UDP_PRELOAD_LOSS
            {
                // Datagrams were dropped (a socket buffer overflowed): those sets are lost;
                // free their slots and go on.
                for conn in &mut self.conns {
                    conn.slots.iter_mut().for_each(|s| *s = None);
                    conn.in_flight = 0;
                }
                last_progress = Instant::now();
            } else if last_progress.elapsed() > PRELOAD_STALL {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "preload: no reply from {} in {PRELOAD_STALL:?}",
                        self.cfg.server
                    ),
                ));
            }
        }
        // The timed run starts with nothing in flight, and counts only its own requests.
        for conn in &mut self.conns {
            conn.slots.iter_mut().for_each(|s| *s = None);
            conn.in_flight = 0;
        }
        let preloaded = self.checks.stored;
        let errors = self.checks.errors();
        if errors > 0 && self.cfg.transport == Transport::Tcp {
            return Err(io::Error::other(format!(
                "preload: {errors} of {preloaded} sets failed ({})",
                self.checks
            )));
        }
        self.checks = KvChecks {
            preloaded,
            ..KvChecks::default()
        };
        Ok(())
    }

    /// Plays this thread's share of the schedule from `epoch_ns` (`CLOCK_MONOTONIC`).
    fn play(mut self, epoch_ns: u64) -> io::Result<ThreadResult> {
        if !self.cfg.cpus.is_empty() {
            pin_current_thread(self.cfg.cpus[self.thread % self.cfg.cpus.len()])?;
        }
        let now_ns = || monotonic_ns().saturating_sub(epoch_ns);
        let mut send = SendRecorder::new();
        let mut resp = ResponseRecorder::for_schedule(&self.cfg.schedule);
        let mut schedule = self.cfg.schedule.iter();
        let mut next = self.next_own(&mut schedule);
        let mut deadline = u64::MAX;
        loop {
            let mut now = now_ns();
            let mut issued = 0;
            while let Some((req, c, op)) = next
                && req.send_ns <= now
                && issued < ISSUE_BATCH
            {
                issued += 1;
                if self.issue(c, op, Some(req.id), req.send_ns) {
                    send.record_sent(req.send_ns, now);
                } else {
                    send.record_send_error(req.send_ns, now);
                }
                next = self.next_own(&mut schedule);
                now = now_ns();
            }
            if next.is_none() && deadline == u64::MAX {
                deadline = send
                    .last_actual_ns()
                    .max(self.cfg.schedule.duration_ns)
                    .saturating_add(self.cfg.grace_ns);
                resp.set_deadline(deadline);
            }
            for c in 0..self.conns.len() {
                if self.conns[c].out_at < self.conns[c].out.len() {
                    flush(&mut self.conns[c], &mut self.checks);
                }
            }
            // Sleep in the kernel only when nothing is due for a while.
            let idle_ms = match next {
                Some((req, _, _)) if req.send_ns > now + 2_000_000 => 1,
                None => 1,
                _ => 0,
            };
            let mut rec = Some(&mut resp);
            for i in 0..self.epoll.wait(idle_ms)? {
                let c = self.epoll.token(i);
                self.receive(c, now_ns, &mut rec);
            }
            if next.is_none() {
                let in_flight: usize = self
                    .conns
                    .iter()
                    .filter(|c| !c.dead)
                    .map(|c| c.in_flight)
                    .sum();
                if in_flight == 0 || now_ns() > deadline {
                    break;
                }
            }
        }
        Ok((send, resp, self.checks, schedule.produced()))
    }

    /// The next request of the schedule that goes over one of this thread's connections.
    fn next_own(
        &self,
        schedule: &mut crate::schedule::Schedule,
    ) -> Option<(crate::schedule::Request, usize, crate::kv::Op)> {
        for req in schedule.by_ref() {
            let op = self.space.op(req.id);
            if let Some(c) = self.conn_of(op.key()) {
                return Some((req, c, op));
            }
        }
        None
    }
}

/// Writes what a TCP connection has queued, as far as the socket takes it.
fn flush(conn: &mut Conn, checks: &mut KvChecks) {
    let Socket::Tcp(s) = &mut conn.socket else {
        return;
    };
    while conn.out_at < conn.out.len() {
        match s.write(&conn.out[conn.out_at..]) {
            Ok(n) => conn.out_at += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => {
                fail(conn, checks);
                return;
            }
        }
    }
    conn.out.clear();
    conn.out_at = 0;
}

/// A connection that failed: what was in flight on it is lost.
fn fail(conn: &mut Conn, checks: &mut KvChecks) {
    if !conn.dead {
        conn.dead = true;
        checks.connection_failures += 1;
        conn.session.abandon();
        conn.in_flight = 0;
    }
}

/// An epoll instance watching sockets for input.
struct Epoll {
    fd: RawFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
        })
    }

    fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both fds are open and `ev` is a valid event for the call.
        let rc = unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// How many sockets are ready (their tokens are [`token`](Self::token)`(0..n)`),
    /// waiting at most `timeout_ms`.
    fn wait(&mut self, timeout_ms: i32) -> io::Result<usize> {
        // SAFETY: `events` is valid for writes of its length.
        let n = unsafe {
            libc::epoll_wait(
                self.fd,
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                timeout_ms,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(n as usize)
    }

    fn token(&self, i: usize) -> usize {
        self.events[i].u64 as usize
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and closed once.
        unsafe { libc::close(self.fd) };
    }
}
