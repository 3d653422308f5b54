//! A sans-I/O TCP engine.
//!
//! Everything here is plain data plus functions. A [`Connection`] is driven by five kinds of
//! event: a segment arrived ([`Connection::on_segment`]), a timer fired
//! ([`Connection::on_timer`]), the application wrote ([`Connection::send`]), read
//! ([`Connection::recv`]) or closed ([`Connection::shutdown_write`], [`Connection::close`]).
//! Segments to send are pulled with [`Connection::poll_transmit`]. Time is a `u64` count of
//! nanoseconds passed in by the caller, so the same engine runs in the runtime, in iokerneld's
//! traffic generator, and in tests on a virtual clock.
//!
//! * [`seq`]: sequence-space arithmetic (RFC 9293 §3.4).
//! * [`config`]: every tunable, with validation.
//! * [`conn`]: one connection's state machine, buffers, timers and loss recovery.
//! * [`cc`]: pluggable congestion control (NewReno, CUBIC).
//! * [`listener`]: passive opens: the SYN backlog, SYN cookies, the accept queue bound.
//! * [`reset`]: the answer to a segment that matches no connection.
//! * [`stats`]: drop reasons and event counters.

pub mod cc;
pub mod config;
pub mod conn;
pub mod listener;
pub mod reset;
pub mod seq;
pub mod stats;

pub use cc::{CcAlgorithm, CongestionControl};
pub use config::{ConfigError, Keepalive, TcpConfig};
pub use conn::{Connection, Endpoints, Events, Handshake, State, TcpError};
pub use listener::{Listener, ListenerConfig, SynOutcome};
pub use seq::Seq;
pub use stats::{ConnStats, TcpCounters, TcpDrop};

/// Nanoseconds on the caller's clock. Only differences matter.
pub type Nanos = u64;
