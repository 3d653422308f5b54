//! Load generation and measurement for Corral's experiments.
//!
//! - [`schedule`]: open-loop request schedules (Poisson or constant arrivals at a target rate,
//!   many simulated clients, constant / exponential / bimodal service times), seeded and lazy.
//! - [`wire`]: the fixed-size little-endian request payload that a spin server echoes back.
//! - [`split`]: where one request's latency went: send lateness, delivery and wake, queueing,
//!   service and return, from the generator's and the server's stamps on one clock.
//! - [`tail`]: the median split of the requests above p99 and p99.9, kept in bounded memory.
//! - [`recorder`]: latency from each request's scheduled send time (no coordinated omission),
//!   loss and duplicate accounting, offered versus achieved rate, and schedule adherence.
//! - [`phases`]: schedules made of phases at different rates played back to back, ids
//!   continuing across them.
//! - [`windows`]: latency per window of scheduled send time, to see it change over a run.
//! - [`queueing`]: the zero-overhead bound, the sojourn time of one ideal FCFS server, from the
//!   M/M/1 formula and by simulation of the same schedule.
//! - [`memcache`]: memcached's text protocol for a client: requests, an incremental reply
//!   parser, and the UDP frame header with multi-datagram replies.
//! - [`kv`]: mutilate-style key-value workloads (key and value sizes, get/set mix, key
//!   popularity) and the check of every reply against its request.
//! - [`kvstream`]: one memcached conversation over a byte stream (TCP), sans I/O: requests
//!   out, bytes in, replies checked in order and recorded.
//! - [`kvclient`]: a Linux memcached client (TCP or UDP) that plays a schedule of
//!   key-value requests.
//! - [`dns`]: DNS queries from a dnsperf-format file, responses matched by DNS ID and
//!   checked against their question, and a Linux UDP client that plays a schedule of them.
//! - [`client`]: a Linux UDP client that plays a schedule against a server (the baseline; the
//!   `corral-loadgen-linux` binary).
//!
//! Everything but [`client`], [`kvclient`] and [`dns::run`] is plain data and functions with no threads, sockets or clocks of
//! its own, so a generator built into another program (iokerneld's `gen` NIC backend) drives it
//! from its own loop:
//!
//! ```
//! use corral_loadgen::{recorder::*, schedule::*, wire::Message};
//! use std::time::Duration;
//!
//! let cfg = ScheduleConfig::new(100_000.0, Duration::from_millis(10))
//!     .service("bimodal".parse().unwrap())
//!     .clients(64)
//!     .seed(7);
//! cfg.validate().unwrap();
//! let mut rec = Recorder::for_schedule(&cfg);
//! let mut frame = [0u8; 64];
//! let mut scheduled = 0;
//! for req in cfg.iter() {
//!     scheduled += 1;
//!     Message::from(&req).encode(&mut frame).unwrap();
//!     rec.send.record_sent(req.send_ns, req.send_ns); // put `frame` on the wire here
//!     // ... and when its echo comes back:
//!     let echo = Message::decode(&frame).unwrap();
//!     rec.responses.record_response(echo.id, echo.scheduled_send_ns, req.send_ns + 12_000);
//! }
//! let run = RunInfo { target_rps: cfg.rate_rps, duration_ns: cfg.duration_ns, scheduled };
//! let summary = rec.summary(&run, &AdherencePolicy::default());
//! assert_eq!(summary.lost, 0);
//! ```

pub mod client;
pub mod dns;
pub mod kv;
pub mod kvclient;
pub mod kvstream;
pub mod memcache;
pub mod phases;
pub mod queueing;
pub mod recorder;
pub mod schedule;
pub mod split;
pub mod tail;
pub mod windows;
pub mod wire;

pub use phases::{Phase, PhasedSchedule, Phases, PhasesError};

pub use recorder::{AdherencePolicy, Percentiles, Recorder, RunInfo, Summary};
pub use schedule::{Arrivals, Request, Schedule, ScheduleConfig, ServiceDist};
pub use split::{Split, Stage, Timeline};
pub use tail::{TailReport, TailSplit};
pub use windows::{WindowReport, WindowedLatency};
pub use wire::Message;
