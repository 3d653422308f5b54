//! One TCP connection: the RFC 9293 state machine with RFC 7323, RFC 6298, RFC 5681/6582 and
//! RFC 2018, as plain data driven by the caller.
//!
//! The caller owns the clock, the lock and the I/O. After any call that may change what the
//! connection wants to send (every call below except the read-only accessors), it drains
//! [`Connection::poll_transmit`] and re-arms its timer for [`Connection::next_deadline`].

use core::fmt;
use core::net::SocketAddrV4;

use corral_wire::TcpSegment;

use crate::Nanos;
use crate::config::TcpConfig;
use crate::stats::ConnStats;

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

/// One connection.
pub struct Connection {
    config: TcpConfig,
    ends: Endpoints,
    state: State,
    stats: ConnStats,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("ends", &self.ends)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Active open (RFC 9293 §3.10.1): SYN-SENT; the SYN goes out on the next
    /// [`Connection::poll_transmit`]. `config` must be valid.
    pub fn connect(config: &TcpConfig, ends: Endpoints, iss: u32, now: Nanos) -> Connection {
        let _ = (config, ends, iss, now);
        todo!()
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
        let _ = (config, ends, syn, iss, now);
        todo!()
    }

    /// A connection whose handshake the listener completed statelessly: ESTABLISHED.
    pub fn from_handshake(config: &TcpConfig, handshake: &Handshake, now: Nanos) -> Connection {
        let _ = (config, handshake, now);
        todo!()
    }

    /// A segment for this connection arrived (its checksum already verified).
    pub fn on_segment(&mut self, now: Nanos, seg: &TcpSegment<'_>) -> Events {
        let _ = (now, seg);
        todo!()
    }

    /// The deadline from [`Connection::next_deadline`] passed: runs every expired timer.
    pub fn on_timer(&mut self, now: Nanos) -> Events {
        let _ = now;
        todo!()
    }

    /// The earliest time [`Connection::on_timer`] has work to do.
    pub fn next_deadline(&self) -> Option<Nanos> {
        todo!()
    }

    /// Writes the next segment to send, header (checksum included) and payload, into `out`,
    /// which must hold at least `MAX_HEADER + mss` bytes; returns its length, or `None` when
    /// nothing is due now.
    pub fn poll_transmit(&mut self, now: Nanos, out: &mut [u8]) -> Option<usize> {
        let _ = (now, out);
        todo!()
    }

    /// Copies as much of `data` as the send buffer takes; `WouldBlock` when it takes nothing.
    pub fn send(&mut self, now: Nanos, data: &[u8]) -> Result<usize, TcpError> {
        self.send_vectored(now, &[data])
    }

    /// Like [`Connection::send`], from several buffers in order, as one stream.
    pub fn send_vectored(&mut self, now: Nanos, bufs: &[&[u8]]) -> Result<usize, TcpError> {
        let _ = (now, bufs);
        todo!()
    }

    /// Bytes `send` would accept now.
    pub fn send_space(&self) -> usize {
        todo!()
    }

    /// Copies received in-order bytes into `buf`; `Ok(0)` once the peer's FIN is reached (or
    /// for an empty `buf`), `WouldBlock` when nothing is there yet.
    pub fn recv(&mut self, now: Nanos, buf: &mut [u8]) -> Result<usize, TcpError> {
        let _ = (now, buf);
        todo!()
    }

    /// Bytes `recv` would return now.
    pub fn recv_available(&self) -> usize {
        todo!()
    }

    /// Whether `recv` would not block (data, the peer's FIN, or an error).
    pub fn readable(&self) -> bool {
        todo!()
    }

    /// Whether `send` would not block (space or an error).
    pub fn writable(&self) -> bool {
        todo!()
    }

    /// Sends a FIN after the queued data (`shutdown(SHUT_WR)`).
    pub fn shutdown_write(&mut self, now: Nanos) -> Result<(), TcpError> {
        let _ = now;
        todo!()
    }

    /// The application is done with the connection: a FIN after queued data, or a RST when
    /// received data was left unread (RFC 9293 §3.6.1, as Linux does).
    pub fn close(&mut self, now: Nanos) {
        let _ = now;
        todo!()
    }

    /// Sends a RST and moves to CLOSED at once.
    pub fn abort(&mut self, now: Nanos) {
        let _ = now;
        todo!()
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
        todo!()
    }

    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    /// Bytes of heap this connection holds now (buffers and queues), for memory accounting.
    pub fn memory(&self) -> usize {
        todo!()
    }
}
