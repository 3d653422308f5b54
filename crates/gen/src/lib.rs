//! `gen`: an open-loop traffic generator that iokerneld links in as a NIC backend. It plays a
//! corral-loadgen request schedule onto the switch's receive path and times the responses the
//! runtimes send back, so that a service on a runtime can be loaded without a second machine.
//!
//! The daemon reaches it only through `corral_iokernel::nic::Nic`: the backend itself
//! ([`nic`]), the run it plays for a control client as a job of that trait ([`job`]), the run
//! spec and results ([`run`]), a fleet of memcached clients over the sans-I/O TCP engine
//! ([`tcpfleet`]), the DNS queries and reply tables of a `dns` run ([`dns`]), and the
//! `iokerneld gen` client ([`args`], [`play`]).

pub mod args;
pub mod dns;
pub mod job;
pub mod nic;
pub mod play;
pub mod run;
pub mod tcpfleet;

pub use args::GenArgs;
pub use job::GenBackend;
pub use nic::Gen;
