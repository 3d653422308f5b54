//! A TCP peer for tests and benchmarks, written once over [`Net`] so that the same services run
//! on Linux's stack ([`LinuxNet`], `std::net` and OS threads) and on Corral's
//! ([`CorralNet`], `corral::net` and uthreads).
//!
//! Services, one per listening port (see [`Service`]):
//! * **echo**: every byte back, then a FIN after the client's;
//! * **sink**: reads to the client's FIN, then answers the SHA-256 of what arrived (64 hex
//!   digits and a newline) and closes: the client half-closed first;
//! * **source**: sends `len` bytes of [`pattern`], half-closes, and keeps reading to the
//!   client's FIN: the server half-closed first;
//! * **sockperf**: the server side of `sockperf ping-pong --tcp` ([`sockperf`]).
//!
//! Each finished connection leaves an [`Outcome`] (bytes and SHA-256 of what the server
//! received), so tests check both directions without trusting the client tool alone.

pub mod client;
pub mod net;
pub mod pattern;
pub mod server;
pub mod sockperf;

pub use net::{CorralNet, LinuxNet, Net};
pub use server::{Outcome, Served, Service, serve};

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
