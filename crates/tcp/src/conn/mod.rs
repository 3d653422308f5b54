//! One TCP connection: the RFC 9293 state machine with RFC 7323, RFC 6298, RFC 5681/6582 and
//! RFC 2018, as plain data driven by the caller.
//!
//! The caller owns the clock, the lock and the I/O. After any call that may change what the
//! connection wants to send (every call below except the read-only accessors), it drains
//! [`Connection::poll_transmit`] and re-arms its timer for [`Connection::next_deadline`].

mod input;
mod output;
mod recv;
mod ring;
mod rtt;
mod scoreboard;
mod timers;

#[cfg(test)]
mod tests;

use core::fmt;
use core::net::SocketAddrV4;

use corral_wire::{TcpOption, TcpSegment};

use crate::Nanos;
use crate::cc::CongestionControl;
use crate::config::TcpConfig;
use crate::seq::Seq;
use crate::stats::ConnStats;
use recv::RecvBuffer;
use ring::ByteRing;
use rtt::RttEstimator;
use scoreboard::Scoreboard;

/// The two ends of a connection, from this side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoints {
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
}

/// RFC 9293 §3.3.2 states. LISTEN belongs to [`crate::Listener`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    SynSent,
    SynReceived,
    Established,
    FinWait1,
    FinWait2,
    CloseWait,
    Closing,
    LastAck,
    TimeWait,
    /// Fully closed: the connection may be removed from its table.
    Closed,
}

/// What the peer and we agreed on in a handshake the listener completed (e.g. from a SYN
/// cookie), enough to create an ESTABLISHED connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    pub ends: Endpoints,
    /// Our initial sequence number.
    pub iss: u32,
    /// The peer's initial sequence number.
    pub irs: u32,
    /// The peer's MSS option (536 when absent, RFC 9293 §3.7.1).
    pub peer_mss: u16,
    /// The peer's window-scale shift; `None` means neither side scales.
    pub peer_window_scale: Option<u8>,
    /// Our window-scale shift as sent in the SYN-ACK (ignored when the peer did not scale).
    pub local_window_scale: u8,
    pub sack_permitted: bool,
    /// The peer's latest TSval when both sides use timestamps.
    pub ts_recent: Option<u32>,
    /// The window field of the completing ACK, unscaled as received.
    pub peer_window: u16,
}

/// Changes a blocked caller may be waiting for, returned by the event entry points.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Events(pub u8);

impl Events {
    pub const NONE: Events = Events(0);
    /// Data (or the peer's FIN) became readable.
    pub const READABLE: Events = Events(1);
    /// Send-buffer space was freed.
    pub const WRITABLE: Events = Events(2);
    /// The handshake completed (SYN-SENT or SYN-RECEIVED to ESTABLISHED).
    pub const ESTABLISHED: Events = Events(4);
    /// The connection failed (reset, timed out); [`Connection::error`] says why.
    pub const ERROR: Events = Events(8);
    /// The connection reached CLOSED and may be removed.
    pub const CLOSED: Events = Events(16);

    #[inline]
    pub const fn contains(self, other: Events) -> bool {
        self.0 & other.0 == other.0
    }

    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl core::ops::BitOr for Events {
    type Output = Events;
    fn bitor(self, rhs: Events) -> Events {
        Events(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for Events {
    fn bitor_assign(&mut self, rhs: Events) {
        self.0 |= rhs.0;
    }
}

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Events({:#07b})", self.0)
    }
}

/// Why an application call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TcpError {
    /// Nothing to read yet, or no send-buffer space: block and retry on an event.
    WouldBlock,
    /// The handshake has not completed.
    NotConnected,
    /// The peer refused the connection (RST in SYN-SENT).
    Refused,
    /// The peer reset the connection.
    Reset,
    /// Retransmissions (or keepalive probes) went unanswered.
    TimedOut,
    /// Writing after `shutdown_write` or `close`.
    BrokenPipe,
}

impl fmt::Display for TcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TcpError::WouldBlock => "operation would block",
            TcpError::NotConnected => "not connected",
            TcpError::Refused => "connection refused",
            TcpError::Reset => "connection reset by peer",
            TcpError::TimedOut => "connection timed out",
            TcpError::BrokenPipe => "broken pipe",
        })
    }
}

impl std::error::Error for TcpError {}

/// Longest TCP header this engine emits (20 bytes plus 40 of options).
pub const MAX_HEADER: usize = 60;

/// MSS assumed when the peer sends none (RFC 9293 §3.7.1).
const DEFAULT_MSS: u16 = 536;
/// Length of the timestamps option as this engine lays it out.
const TS_OPTION_LEN: u32 = 12;
/// Largest window-scale shift (RFC 7323 §2.3).
const MAX_WSCALE: u8 = 14;

/// One tick of the timestamp clock, in nanoseconds.
const TIMESTAMP_TICK: Nanos = 1_000;

/// The timestamp clock (RFC 7323 §5.4): microseconds of the caller's clock, so round trips of a
/// few microseconds are still measured. A listener answering with SYN cookies must use the same
/// clock, so that the connection's first TSval is not below the SYN-ACK's.
#[inline]
pub const fn timestamp_clock(now: Nanos) -> u32 {
    (now / TIMESTAMP_TICK) as u32
}

/// The window-scale shift a receive buffer of `recv_buffer` bytes needs (RFC 7323 §2.2).
pub const fn window_scale_for(recv_buffer: usize) -> u8 {
    let mut shift = 0;
    while shift < MAX_WSCALE && (recv_buffer >> shift) > u16::MAX as usize {
        shift += 1;
    }
    shift
}

/// A RST owed to the peer, with the fields it must carry.
#[derive(Clone, Copy, Debug)]
struct RstOwed {
    seq: Seq,
    ack: Option<Seq>,
}

/// The options of an arriving segment, read once.
#[derive(Clone, Copy, Default)]
struct SegOptions<'a> {
    mss: Option<u16>,
    window_scale: Option<u8>,
    sack_permitted: bool,
    timestamps: Option<corral_wire::Timestamps>,
    sack: Option<corral_wire::tcp::SackBlocks<'a>>,
}

impl<'a> SegOptions<'a> {
    fn parse(seg: &TcpSegment<'a>) -> SegOptions<'a> {
        let mut o = SegOptions::default();
        if seg.option_bytes().is_empty() {
            return o;
        }
        for opt in seg.options() {
            match opt {
                TcpOption::Mss(m) => o.mss = Some(m),
                TcpOption::WindowScale(s) => o.window_scale = Some(s.min(MAX_WSCALE)),
                TcpOption::SackPermitted => o.sack_permitted = true,
                TcpOption::Timestamps(t) => o.timestamps = Some(t),
                TcpOption::Sack(b) => o.sack = Some(b),
                TcpOption::Unknown { .. } => {}
            }
        }
        o
    }
}

/// One connection.
pub struct Connection {
    config: TcpConfig,
    ends: Endpoints,
    state: State,
    stats: ConnStats,
    error: Option<TcpError>,
    /// Created by a passive open (a RST in SYN-RECEIVED then just removes it).
    passive: bool,

    // Send sequence space (RFC 9293 §3.3.1). SND.MAX is the highest sequence number sent; after
    // an RTO, SND.NXT goes back to SND.UNA and climbs again (go-back-N).
    iss: Seq,
    snd_una: Seq,
    snd_nxt: Seq,
    snd_max: Seq,
    /// The peer's window, scaled, in bytes.
    snd_wnd: u32,
    max_snd_wnd: u32,
    snd_wl1: Seq,
    snd_wl2: Seq,
    snd_wscale: u8,
    /// Largest payload the peer accepts (its MSS, capped by ours), before our options.
    send_mss: u32,
    /// Unacknowledged and unsent bytes; the first is at `buf_seq`.
    sbuf: ByteRing,
    buf_seq: Seq,
    /// The application shut down writing: a FIN follows the buffered bytes.
    fin_queued: bool,
    /// The application closed: nothing will read what arrives.
    app_closed: bool,

    // Receive sequence space.
    irs: Seq,
    rcv_nxt: Seq,
    rcv_wscale: u8,
    /// The window-scale shift our SYN offers (used only if the peer's SYN offers one too).
    offered_wscale: Option<u8>,
    /// Right edge of the window last advertised.
    rcv_adv: Seq,
    rbuf: RecvBuffer,
    /// The peer's FIN was received in order: reads end after the buffered bytes.
    fin_received: bool,
    /// A FIN that arrived ahead of missing data, at this sequence number.
    peer_fin: Option<Seq>,
    last_ack_sent: Seq,

    // Negotiated options.
    ts_enabled: bool,
    ts_recent: u32,
    ts_recent_at: Nanos,
    sack_enabled: bool,

    // ACK policy.
    ack_now: bool,
    delack_deadline: Option<Nanos>,
    full_segments_unacked: u32,
    /// An ACK a receive batch deferred to its end (`on_segment_in_batch`).
    ack_owed_by_batch: bool,
    /// Set while `on_segment_in_batch` runs.
    in_receive_batch: bool,

    // Control segments owed.
    rst_owed: Option<RstOwed>,
    /// Since when `throttled_in_window` counts the ACKs `throttle` allowed (RFC 5961 §7).
    throttle_window_start: Nanos,
    throttled_in_window: u32,
    probe_owed: bool,

    // Retransmission (RFC 6298).
    rtt: RttEstimator,
    rto_deadline: Option<Nanos>,
    /// Consecutive RTO expirations without progress.
    retries: u32,
    /// The retransmission timer expired awaiting the ACK of our SYN or SYN-ACK (a duplicate SYN
    /// answered again does not count): the RTO is at least 3 s once the handshake completes
    /// (RFC 6298 §5.7).
    handshake_timed_out: bool,
    /// Karn's algorithm without timestamps: the sequence number whose ACK gives the next RTT
    /// sample, and when its segment left. Cleared by any retransmission.
    rtt_timed: Option<(Seq, Nanos)>,
    /// Karn's algorithm with timestamps: our timestamp clock when a timeout (or a duplicate
    /// SYN) last made us send again. Until an ACK echoes a TSval at least this new, echoes may
    /// be stale and time nothing (see `take_rtt_sample`).
    karn_tsval: Option<u32>,

    // Persist (zero-window probes) and keepalive.
    persist_deadline: Option<Nanos>,
    persist_backoff: u32,
    probes_unanswered: u32,
    keepalive_deadline: Option<Nanos>,
    keepalive_sent: u32,
    last_send: Nanos,
    /// TIME-WAIT's end, or FIN-WAIT-2's for a connection the application closed.
    close_deadline: Option<Nanos>,

    // Congestion control and loss recovery (RFC 5681, RFC 6582, RFC 2018).
    cc: Box<dyn CongestionControl>,
    dup_acks: u32,
    in_recovery: bool,
    recover: Seq,
    /// Window inflation during fast recovery (RFC 6582 §3.2), on top of the algorithm's cwnd.
    inflation: u32,
    /// Where the search for the next hole to retransmit in recovery starts.
    rexmit_next: Seq,
    /// Retransmissions recovery may send now.
    rexmit_budget: u32,
    scoreboard: Scoreboard,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("ends", &self.ends)
            .field("state", &self.state)
            .field("snd_una", &self.snd_una)
            .field("snd_nxt", &self.snd_nxt)
            .field("snd_max", &self.snd_max)
            .field("snd_wnd", &self.snd_wnd)
            .field("cwnd", &self.cwnd())
            .field(
                "unsent",
                &(self.buf_seq + self.sbuf.len() as u32 - self.snd_nxt),
            )
            .field("fin_queued", &self.fin_queued)
            .field("in_recovery", &self.in_recovery)
            .field("rcv_nxt", &self.rcv_nxt)
            .field("rcv_window", &(self.rcv_adv - self.rcv_nxt))
            .field("unread", &self.rbuf.readable())
            .field("ack_now", &self.ack_now)
            .field("rto_deadline", &self.rto_deadline)
            .field("delack_deadline", &self.delack_deadline)
            .field("persist_deadline", &self.persist_deadline)
            .field("close_deadline", &self.close_deadline)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn new(config: &TcpConfig, ends: Endpoints, state: State, iss: u32, now: Nanos) -> Connection {
        let iss = Seq(iss);
        let mss = u32::from(config.mss);
        Connection {
            config: config.clone(),
            ends,
            state,
            stats: ConnStats::default(),
            error: None,
            passive: false,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_max: iss,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: Seq(0),
            snd_wl2: iss,
            snd_wscale: 0,
            send_mss: u32::from(DEFAULT_MSS.min(config.mss)),
            sbuf: ByteRing::new(config.send_buffer),
            buf_seq: iss + 1,
            fin_queued: false,
            app_closed: false,
            irs: Seq(0),
            rcv_nxt: Seq(0),
            rcv_wscale: 0,
            offered_wscale: config
                .window_scaling
                .then(|| window_scale_for(config.recv_buffer)),
            rcv_adv: Seq(0),
            rbuf: RecvBuffer::new(config.recv_buffer, config.max_ooo_ranges),
            fin_received: false,
            peer_fin: None,
            last_ack_sent: Seq(0),
            ts_enabled: false,
            ts_recent: 0,
            ts_recent_at: now,
            sack_enabled: false,
            ack_now: false,
            delack_deadline: None,
            full_segments_unacked: 0,
            ack_owed_by_batch: false,
            in_receive_batch: false,
            rst_owed: None,
            throttle_window_start: now,
            throttled_in_window: 0,
            probe_owed: false,
            rtt: RttEstimator::new(config.rto_initial, config.rto_min, config.rto_max),
            rto_deadline: None,
            retries: 0,
            handshake_timed_out: false,
            rtt_timed: None,
            karn_tsval: None,
            persist_deadline: None,
            persist_backoff: 0,
            probes_unanswered: 0,
            keepalive_deadline: None,
            keepalive_sent: 0,
            last_send: now,
            close_deadline: None,
            cc: config
                .congestion_control
                .build(mss, mss * config.initial_window_segments),
            dup_acks: 0,
            in_recovery: false,
            recover: iss,
            inflation: 0,
            rexmit_next: iss,
            rexmit_budget: 0,
            scoreboard: Scoreboard::default(),
        }
    }

    /// Active open (RFC 9293 §3.10.1): SYN-SENT; the SYN goes out on the next
    /// [`Connection::poll_transmit`]. `config` must be valid.
    pub fn connect(config: &TcpConfig, ends: Endpoints, iss: u32, now: Nanos) -> Connection {
        Connection::new(config, ends, State::SynSent, iss, now)
    }

    /// Passive open of a SYN the listener accepted with state: SYN-RECEIVED; the SYN-ACK goes
    /// out on the next [`Connection::poll_transmit`]. `syn` must carry SYN and not ACK.
    pub fn accept_syn(
        config: &TcpConfig,
        ends: Endpoints,
        syn: &TcpSegment<'_>,
        iss: u32,
        now: Nanos,
    ) -> Connection {
        let mut c = Connection::new(config, ends, State::SynReceived, iss, now);
        c.passive = true;
        c.take_peer_syn(now, syn, &SegOptions::parse(syn));
        c.stats.segments_in += 1;
        c
    }

    /// A connection whose handshake the listener completed statelessly: ESTABLISHED, with the
    /// initial RTO (no SYN-ACK of a cookie is timed or retransmitted, so RFC 6298 §5.7 has
    /// nothing to go by).
    pub fn from_handshake(config: &TcpConfig, handshake: &Handshake, now: Nanos) -> Connection {
        let h = handshake;
        let mut c = Connection::new(config, h.ends, State::Established, h.iss, now);
        c.passive = true;
        c.irs = Seq(h.irs);
        c.rcv_nxt = c.irs + 1;
        c.last_ack_sent = c.rcv_nxt;
        c.snd_una = c.iss + 1;
        c.snd_nxt = c.snd_una;
        c.snd_max = c.snd_una;
        c.rexmit_next = c.snd_una;
        c.set_send_mss(h.peer_mss);
        if let (Some(peer), true) = (h.peer_window_scale, config.window_scaling) {
            c.snd_wscale = peer.min(MAX_WSCALE);
            c.rcv_wscale = h.local_window_scale.min(MAX_WSCALE);
        }
        if let (Some(ts), true) = (h.ts_recent, config.timestamps) {
            c.ts_enabled = true;
            c.ts_recent = ts;
        }
        c.sack_enabled = h.sack_permitted && config.sack;
        c.size_congestion_control();
        c.snd_wnd = u32::from(h.peer_window) << c.snd_wscale;
        c.max_snd_wnd = c.snd_wnd;
        c.snd_wl1 = c.rcv_nxt;
        c.snd_wl2 = c.snd_una;
        c.rcv_adv = c.rcv_nxt;
        c.rcv_adv = c.rcv_nxt + c.advertised_window();
        c.arm_keepalive(now);
        c
    }

    /// Takes the peer's SYN: its sequence number and what its options offer.
    fn take_peer_syn(&mut self, now: Nanos, syn: &TcpSegment<'_>, opts: &SegOptions<'_>) {
        self.irs = Seq(syn.seq());
        self.rcv_nxt = self.irs + 1;
        self.last_ack_sent = self.rcv_nxt;
        // A SYN's window is unscaled and at most 64 KiB: the edge it advertises.
        self.rcv_adv = self.rcv_nxt + self.rbuf.window().min(usize::from(u16::MAX)) as u32;
        let ts = opts.timestamps.filter(|_| self.config.timestamps);
        if let Some(ts) = ts {
            self.ts_enabled = true;
            self.ts_recent = ts.tsval;
            self.ts_recent_at = now;
        }
        if let (Some(peer), Some(ours)) = (opts.window_scale, self.offered_wscale) {
            self.snd_wscale = peer;
            self.rcv_wscale = ours;
        } else {
            self.offered_wscale = None;
        }
        self.sack_enabled = self.config.sack && opts.sack_permitted;
        self.set_send_mss(opts.mss.unwrap_or(DEFAULT_MSS));
        self.size_congestion_control();
        // The window of a SYN is never scaled (RFC 7323 §2.2).
        self.snd_wnd = u32::from(syn.window());
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = self.irs;
        self.snd_wl2 = Seq(syn.ack());
    }

    fn set_send_mss(&mut self, peer_mss: u16) {
        self.send_mss = u32::from(peer_mss.clamp(64, self.config.mss));
    }

    /// Once the handshake fixed the segment size: congestion control counts in the segments
    /// actually sent (RFC 5681's SMSS), not in our own MSS.
    fn size_congestion_control(&mut self) {
        let smss = self.data_mss();
        if smss != u32::from(self.config.mss) {
            self.cc = self
                .config
                .congestion_control
                .build(smss, smss * self.config.initial_window_segments);
        }
    }

    /// Payload of a full-sized data segment after the options every segment carries.
    #[inline]
    fn data_mss(&self) -> u32 {
        let opts = if self.ts_enabled { TS_OPTION_LEN } else { 0 };
        self.send_mss - opts
    }

    /// Whether the handshake is done (RFC 9293's synchronized states).
    #[inline]
    fn synchronized(&self) -> bool {
        !matches!(
            self.state,
            State::SynSent | State::SynReceived | State::Closed
        )
    }

    /// Sequence number of our FIN, once the application shut down writing.
    #[inline]
    fn fin_seq(&self) -> Option<Seq> {
        self.fin_queued
            .then(|| self.buf_seq + self.sbuf.len() as u32)
    }

    /// Whether our FIN was sent and acknowledged.
    #[inline]
    fn fin_acked(&self) -> bool {
        self.fin_seq().is_some_and(|f| self.snd_una.gt(f))
    }

    /// Moves to CLOSED, stops every timer and returns the send buffer's heap.
    fn enter_closed(&mut self) -> Events {
        self.state = State::Closed;
        self.rto_deadline = None;
        self.delack_deadline = None;
        self.persist_deadline = None;
        self.keepalive_deadline = None;
        self.close_deadline = None;
        self.ack_now = false;
        self.ack_owed_by_batch = false;
        self.probe_owed = false;
        self.sbuf.release();
        Events::CLOSED
    }

    /// The connection failed: every blocked caller wakes to the error. Bytes already received
    /// in order stay readable, and `recv` reports the error once they are read (as Linux
    /// does after a reset or a time-out); out-of-order bytes can never be completed and go.
    fn fail(&mut self, why: TcpError) -> Events {
        self.error = Some(why);
        self.rbuf.discard_out_of_order();
        if self.rbuf.readable() == 0 {
            self.rbuf.release();
        }
        self.enter_closed() | Events::ERROR | Events::READABLE | Events::WRITABLE
    }

    fn enter_time_wait(&mut self, now: Nanos) -> Events {
        self.state = State::TimeWait;
        // Everything sent is acknowledged: TIME-WAIT keeps no send buffer, and no receive
        // buffer either once nothing is left to read.
        self.sbuf.release();
        if self.rbuf.readable() == 0 {
            self.rbuf.release();
        }
        self.rto_deadline = None;
        self.persist_deadline = None;
        self.keepalive_deadline = None;
        // With `time_wait` = 0 the deadline is now: the last ACK still leaves first.
        self.close_deadline = Some(now + self.config.time_wait);
        Events::NONE
    }

    fn arm_keepalive(&mut self, now: Nanos) {
        if let Some(k) = self.config.keepalive
            && matches!(self.state, State::Established | State::CloseWait)
        {
            self.keepalive_deadline = Some(now + k.idle);
            self.keepalive_sent = 0;
        }
    }

    /// The event entry points for the application.
    fn app_error(&self) -> Option<TcpError> {
        self.error
    }

    /// Copies as much of `data` as the send buffer takes; `WouldBlock` when it takes nothing.
    pub fn send(&mut self, now: Nanos, data: &[u8]) -> Result<usize, TcpError> {
        self.send_vectored(now, &[data])
    }

    /// Like [`Connection::send`], from several buffers in order, as one stream.
    pub fn send_vectored(&mut self, now: Nanos, bufs: &[&[u8]]) -> Result<usize, TcpError> {
        if let Some(e) = self.app_error() {
            return Err(e);
        }
        match self.state {
            State::SynSent | State::SynReceived => return Err(TcpError::NotConnected),
            State::Established | State::CloseWait if !self.fin_queued => {}
            _ => return Err(TcpError::BrokenPipe),
        }
        let mut n = 0;
        for b in bufs {
            let took = self.sbuf.push(b);
            n += took;
            if took < b.len() {
                break;
            }
        }
        if n == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(TcpError::WouldBlock);
        }
        self.update_persist(now);
        Ok(n)
    }

    /// Bytes `send` would accept now.
    pub fn send_space(&self) -> usize {
        match self.state {
            State::Established | State::CloseWait if !self.fin_queued && self.error.is_none() => {
                self.sbuf.free()
            }
            _ => 0,
        }
    }

    /// Copies received in-order bytes into `buf`; `Ok(0)` once the peer's FIN is reached (or
    /// for an empty `buf`), `WouldBlock` when nothing is there yet.
    pub fn recv(&mut self, now: Nanos, buf: &mut [u8]) -> Result<usize, TcpError> {
        let _ = now;
        if let Some(e) = self.app_error() {
            // What arrived in order before the failure is read first; after the peer's FIN,
            // the end of the stream is reported as such (Linux too reads 0 there).
            let n = self.rbuf.read(buf);
            if self.rbuf.readable() == 0 {
                self.rbuf.release();
            }
            return if n > 0 || self.fin_received {
                Ok(n)
            } else {
                Err(e)
            };
        }
        if matches!(self.state, State::SynSent | State::SynReceived) {
            return Err(TcpError::NotConnected);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let n = self.rbuf.read(buf);
        if n == 0 {
            return if self.fin_received || self.state == State::Closed {
                Ok(0)
            } else {
                Err(TcpError::WouldBlock)
            };
        }
        self.maybe_window_update();
        Ok(n)
    }

    /// After a read: announce the opened window if it grew enough to matter (receiver-side
    /// silly window avoidance, RFC 9293 §3.8.6.2.2).
    fn maybe_window_update(&mut self) {
        if !self.synchronized() || self.fin_received {
            return;
        }
        let edge = self.rcv_nxt + self.advertised_window();
        let grown = edge - self.rcv_adv;
        let threshold = (self.rbuf.capacity() as u32 / 2).min(u32::from(self.config.mss));
        if edge.gt(self.rcv_adv) && grown >= threshold {
            self.ack_now = true;
        }
    }

    /// The window we would advertise now, in bytes, after scaling's rounding.
    #[inline]
    fn advertised_window(&self) -> u32 {
        u32::from(self.window_field()) << self.rcv_wscale
    }

    /// The window field of a non-SYN segment sent now: the free space rounded down to the
    /// scale, so that the right edge it advertises is always one the buffer can honour.
    ///
    /// The edge never moves left while the buffer can back it: rounding down gives the largest
    /// edge (on the 2^shift grid that starts at RCV.NXT) within the buffer, so an earlier edge
    /// is only lost when covering it would take bytes the buffer does not have. That can happen
    /// when RCV.NXT moved by a non-multiple of 2^shift and the application read nothing since,
    /// and it retracts the edge by less than 2^shift (RFC 7323 appendix F; RFC 1122
    /// §4.2.2.16 has senders cope). Rounding up instead, as Linux does, promises bytes the
    /// buffer cannot take: with an application that stops reading, the promise creeps a little
    /// with every ACK, the sender never sees a zero window and retransmits into the sliver
    /// until it gives up, where a zero window would be probed forever.
    pub(super) fn window_field(&self) -> u16 {
        (self.rbuf.window() >> self.rcv_wscale).min(usize::from(u16::MAX)) as u16
    }

    /// Bytes `recv` would return now.
    pub fn recv_available(&self) -> usize {
        self.rbuf.readable()
    }

    /// Whether `recv` would not block (data, the peer's FIN, or an error).
    pub fn readable(&self) -> bool {
        self.rbuf.readable() > 0
            || self.fin_received
            || self.error.is_some()
            || self.state == State::Closed
    }

    /// Whether `send` would not block (space or an error).
    pub fn writable(&self) -> bool {
        self.send_space() > 0
            || self.error.is_some()
            || !matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
            || self.fin_queued
    }

    /// Sends a FIN after the queued data (`shutdown(SHUT_WR)`).
    pub fn shutdown_write(&mut self, now: Nanos) -> Result<(), TcpError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.fin_queued {
            return Ok(());
        }
        match self.state {
            State::SynSent => {
                self.enter_closed();
                return Ok(());
            }
            // The FIN waits for the handshake; completing it moves to FIN-WAIT-1.
            State::SynReceived => {}
            State::Established => self.state = State::FinWait1,
            State::CloseWait => self.state = State::LastAck,
            State::Closed => return Err(TcpError::NotConnected),
            _ => return Ok(()),
        }
        self.fin_queued = true;
        self.update_persist(now);
        Ok(())
    }

    /// The application is done with the connection: a FIN after queued data, or a RST when
    /// received data was left unread (RFC 9293 §3.6.1, as Linux does).
    pub fn close(&mut self, now: Nanos) {
        if self.state == State::Closed {
            return;
        }
        if self.rbuf.readable() > 0 {
            self.abort(now);
            return;
        }
        self.app_closed = true;
        let _ = self.shutdown_write(now);
        if self.state == State::FinWait2 && self.close_deadline.is_none() {
            self.close_deadline = Some(now + self.config.time_wait);
        }
        // Nothing will read again.
        if self.state != State::Closed && self.rbuf.readable() == 0 {
            self.keepalive_deadline = None;
        }
    }

    /// In TIME-WAIT, whether a new SYN (without ACK) from the same peer may start a new
    /// incarnation (RFC 6191, RFC 9293 §3.10.7.4): its timestamp is newer than the last one
    /// seen or, without timestamps on either, its sequence number lies beyond RCV.NXT. The caller
    /// then removes this connection and hands the SYN to its listener; otherwise the SYN is fed
    /// to [`Connection::on_segment`], which answers it with a challenge ACK.
    pub fn time_wait_accepts_syn(&self, syn: &TcpSegment<'_>) -> bool {
        let flags = syn.flags();
        if self.state != State::TimeWait
            || !flags.contains(corral_wire::TcpFlags::SYN)
            || flags.contains(corral_wire::TcpFlags::ACK)
            || flags.contains(corral_wire::TcpFlags::RST)
        {
            return false;
        }
        let ts = SegOptions::parse(syn).timestamps;
        match (self.ts_enabled, ts) {
            (true, Some(ts)) => (ts.tsval.wrapping_sub(self.ts_recent) as i32) > 0,
            (true, None) => false,
            (false, _) => Seq(syn.seq()).gt(self.rcv_nxt),
        }
    }

    /// Sends a RST and moves to CLOSED at once.
    pub fn abort(&mut self, now: Nanos) {
        let _ = now;
        match self.state {
            State::Closed | State::TimeWait => {}
            State::SynSent => {}
            _ => {
                self.rst_owed = Some(RstOwed {
                    seq: self.snd_max,
                    ack: Some(self.rcv_nxt),
                })
            }
        }
        self.rbuf.release();
        self.enter_closed();
    }

    pub fn set_nodelay(&mut self, nodelay: bool) {
        self.config.nodelay = nodelay;
    }

    pub fn nodelay(&self) -> bool {
        self.config.nodelay
    }

    pub fn state(&self) -> State {
        self.state
    }

    pub fn ends(&self) -> Endpoints {
        self.ends
    }

    /// Why the connection failed, once it has.
    pub fn error(&self) -> Option<TcpError> {
        self.error
    }

    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    /// Bytes of heap this connection holds now (buffers and queues), for memory accounting.
    pub fn memory(&self) -> usize {
        self.sbuf.allocated() + self.rbuf.allocated() + core::mem::size_of_val(&*self.cc)
    }

    /// The congestion window the sender uses now (recovery's inflation included).
    pub fn cwnd(&self) -> u32 {
        self.cc.cwnd().saturating_add(self.inflation)
    }

    /// The peer's receive window, scaled, in bytes.
    pub fn peer_window(&self) -> u32 {
        self.snd_wnd
    }

    /// The smoothed round-trip time, once measured.
    pub fn srtt(&self) -> Option<Nanos> {
        self.rtt.srtt()
    }

    /// The retransmission timeout armed next, backoff included.
    pub fn rto(&self) -> Nanos {
        self.rtt.rto()
    }

    /// Bytes sent and not yet acknowledged.
    pub fn bytes_in_flight(&self) -> u32 {
        self.snd_max - self.snd_una
    }

    /// Whether a segment from the peer that carries only an acknowledgment (no data, no SYN,
    /// FIN or RST) could change what this connection does before its next timer: `false`
    /// lets the host hold such segments until the connection runs for another reason.
    ///
    /// An ACK matters while a handshake or a FIN awaits one, while data waits to be sent (the
    /// ACK opens the window, or clocks out the next segments), and while more than one
    /// segment is in flight (duplicate ACKs drive fast retransmit). With at most one segment
    /// in flight and nothing else to send, a bare ACK only frees that segment and stops the
    /// retransmission timer; a late one is found before the timer fires, since the timer's
    /// wake-up reads what arrived first. A keepalive probe waits for its answer only through
    /// its own timer, too.
    pub fn needs_prompt_acks(&self) -> bool {
        match self.state {
            State::Established | State::CloseWait => {}
            State::Closed | State::FinWait2 | State::TimeWait => return false,
            State::SynSent
            | State::SynReceived
            | State::FinWait1
            | State::Closing
            | State::LastAck => return true,
        }
        let data_end = self.buf_seq + self.sbuf.len() as u32;
        let unsent = data_end - self.snd_max;
        unsent > 0 || self.fin_queued || self.bytes_in_flight() > self.send_mss
    }
}
