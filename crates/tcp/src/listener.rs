//! Passive opens (RFC 9293 LISTEN): a bounded SYN backlog, SYN cookies when it is full, and a
//! bounded accept queue.
//!
//! The listener decides; the caller keeps the connection table. A SYN either creates a
//! half-open connection ([`crate::Connection::accept_syn`]), which the caller inserts in its
//! table and reports back with [`Listener::half_open_done`] when it leaves SYN-RECEIVED, or is
//! answered statelessly with a SYN cookie, whose completing ACK [`Listener::on_ack`] turns into
//! a [`crate::Handshake`].

use core::net::SocketAddrV4;

use corral_wire::TcpSegment;

use crate::Nanos;
use crate::conn::{Endpoints, Handshake};

/// Bounds and secrets of one listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    /// Most half-open connections at once.
    pub syn_backlog: usize,
    /// Most established connections waiting for `accept`.
    pub accept_backlog: usize,
    /// Answer SYNs with cookies when the SYN backlog is full (otherwise they are dropped).
    pub syn_cookies: bool,
    /// Secret for cookies and initial sequence numbers (RFC 6528); random per stack.
    pub secret: [u8; 16],
}

/// What to do with a SYN.
#[derive(Debug, PartialEq, Eq)]
pub enum SynOutcome {
    /// Create a half-open connection with this initial sequence number.
    HalfOpen { iss: u32 },
    /// A SYN-ACK carrying a cookie was written to the caller's buffer: send these many bytes.
    Cookie { len: usize },
    /// Dropped and counted.
    Dropped(crate::stats::TcpDrop),
}

/// One listening socket's admission state.
#[derive(Debug)]
pub struct Listener {
    local: SocketAddrV4,
    config: ListenerConfig,
}

impl Listener {
    pub fn new(local: SocketAddrV4, config: ListenerConfig) -> Listener {
        Listener { local, config }
    }

    pub fn local(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn config(&self) -> &ListenerConfig {
        &self.config
    }

    /// A SYN (without ACK) arrived from `remote`; a cookie SYN-ACK is written to `out`.
    pub fn on_syn(
        &mut self,
        now: Nanos,
        remote: SocketAddrV4,
        syn: &TcpSegment<'_>,
        out: &mut [u8],
    ) -> SynOutcome {
        let _ = (now, remote, syn, out);
        todo!()
    }

    /// An ACK arrived for no connection: if it completes a valid cookie, the handshake.
    pub fn on_ack(
        &mut self,
        now: Nanos,
        ends: Endpoints,
        ack: &TcpSegment<'_>,
    ) -> Option<Handshake> {
        let _ = (now, ends, ack);
        todo!()
    }

    /// A half-open connection from [`SynOutcome::HalfOpen`] left SYN-RECEIVED (either way).
    pub fn half_open_done(&mut self) {
        todo!()
    }

    /// An established connection was queued for `accept`; false when the queue is full (the
    /// caller then resets it and counts [`crate::TcpDrop::AcceptQueueFull`]).
    pub fn push_accept(&mut self) -> bool {
        todo!()
    }

    /// `accept` took a connection from the queue.
    pub fn pop_accept(&mut self) {
        todo!()
    }
}
