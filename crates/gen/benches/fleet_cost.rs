//! What a `memcache-tcp` run of the `gen` backend costs per request, away from iokerneld's
//! loop: the backend is driven as the loop drives it (receive polls that queue the requests due
//! and write the fleet's frames, and the target's frames handed to `send`) against the
//! in-memory memcached server of the tests (the TCP engine's server connections around
//! `corral_memcache` sessions, over a link with a 10 µs delay), on a virtual clock that moves
//! a microsecond between polls. Only the backend's calls are timed (on the real clock); the
//! server's work and the link are not, and a poll with nothing due is not counted.
//!
//! Run with `cargo bench -p corral-gen --bench fleet_cost [-- RATE SECONDS CONNECTIONS]`
//! (default 100000 requests/s for 1 s over 64 connections, 10,000 keys of 30 bytes with
//! 200-byte values, 90% gets, every key preloaded). The preload is not timed.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddrV4;
use std::time::Instant;

use common::{GEN_IP, Link, PORT, SERVER_IP, SERVER_MAC, Server};
use corral_gen::Gen;
use corral_gen::run::{GenSpec, PhaseSpec, Protocol};
use corral_iokernel::nic::{FrameBatch, Nic};
use corral_iokernel::sys::now_ns;
use corral_loadgen::kv::KvWorkload;
use corral_loadgen::{AdherencePolicy, Arrivals};

const ETHERTYPE_ARP: [u8; 2] = [0x08, 0x06];

/// How far the clock moves between two polls.
const STEP_NS: u64 = 1_000;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let number = |i: usize, default: f64| args.get(i).map_or(default, |a| a.parse().unwrap());
    let rate = number(0, 100_000.0);
    let seconds = number(1, 1.0);
    let connections = number(2, 64.0) as u32;
    let mut spec = GenSpec::new(
        SocketAddrV4::new(SERVER_IP, PORT),
        vec![PhaseSpec {
            rate_rps: rate,
            duration_s: seconds,
        }],
    );
    spec.arrivals = Arrivals::Poisson;
    spec.protocol = Protocol::MemcacheTcp;
    spec.clients = connections;
    spec.kv = KvWorkload::new(10_000);
    spec.grace_ms = 50.0;
    spec.validate().expect("a valid spec");

    let mut generator = Gen::new(GEN_IP, 24);
    generator.start(&spec, SERVER_MAC.0).expect("start");
    let mut server = Server::new(Default::default());
    let mut link = Link::new(1, 0.0, 0.0);
    let mut batch = FrameBatch::default();
    let mut polls = Calls::default();
    let mut receives = Calls::default();
    // A virtual clock from now on, a microsecond a step: nothing here waits for real time,
    // and the backend reads the clock only to time itself.
    let mut now = now_ns();
    let finished = loop {
        now += STEP_NS;
        batch.clear();
        let timed = !generator.preloading();
        let start = Instant::now();
        generator.recv_burst_at(&mut batch, now);
        // A poll with nothing due returns at once; what the loop pays for those is not a
        // request's cost (and would be mostly this clock read).
        if timed && !batch.is_empty() {
            polls.add(start.elapsed().as_nanos() as u64);
        }
        for i in 0..batch.len() {
            let frame = batch.frame(i);
            // The generator's ARP announcements are not for the server.
            if frame[12..14] != ETHERTYPE_ARP {
                link.send(now, true, frame.to_vec());
            }
        }
        server.fire_timers(now, &mut link);
        while let Some((to_server, frame)) = link.pop_due(now) {
            if to_server {
                server.receive(now, &frame, &mut link);
            } else {
                let timed = !generator.preloading();
                let start = Instant::now();
                generator
                    .send_at(&frame, now)
                    .expect("gen takes every frame");
                if timed {
                    receives.add(start.elapsed().as_nanos() as u64);
                }
            }
        }
        if let Some(run) = generator.take_finished(now) {
            break run;
        }
    };
    let kv = finished.kv_report().expect("a memcache-tcp run");
    let (summary, _, _) = finished.finish(&AdherencePolicy::default());
    assert_eq!(kv.errors, 0, "{}", kv.checks);
    let requests = summary.sent.max(1) as f64;
    let (poll_ns, receive_ns) = (polls.estimate_ns(), receives.estimate_ns());
    println!(
        "fleet: {} requests at {rate:.0}/s over {connections} connections ({} matched, {} keys \
         preloaded); backend calls {:.1} ns per request (polls {:.1}, frames from the target \
         {:.1}; {} polls with frames, {} frames in; {} calls over {INTERRUPTED_NS} ns left out as \
         interrupted)",
        summary.sent,
        summary.matched,
        kv.checks.preloaded,
        (poll_ns + receive_ns) / requests,
        poll_ns / requests,
        receive_ns / requests,
        polls.calls,
        receives.calls,
        polls.interrupted + receives.interrupted,
    );
}

/// A call that took longer than this was interrupted (the thread lost its CPU, which on a
/// shared machine takes milliseconds): its time is not the backend's.
const INTERRUPTED_NS: u64 = 50_000;

/// The times of one kind of backend call.
#[derive(Default)]
struct Calls {
    calls: u64,
    interrupted: u64,
    /// Over the calls that were not interrupted.
    ns: u64,
}

impl Calls {
    fn add(&mut self, ns: u64) {
        self.calls += 1;
        if ns > INTERRUPTED_NS {
            self.interrupted += 1;
        } else {
            self.ns += ns;
        }
    }

    /// The time of every call, the interrupted ones counted at the others' mean.
    fn estimate_ns(&self) -> f64 {
        let kept = self.calls - self.interrupted;
        if kept == 0 {
            0.0
        } else {
            self.ns as f64 * self.calls as f64 / kept as f64
        }
    }
}
