//! A `memcache-tcp` run of the `gen` backend, driven as iokerneld's loop drives it (receive
//! polls and transmitted frames, on `CLOCK_MONOTONIC`), against the in-memory memcached server
//! of `common`: the spec's schedule becomes gets and sets over TCP connections, every reply is
//! checked, and the results carry the checks and the connections' counters.

mod common;

use std::net::SocketAddrV4;

use common::{GEN_IP, Link, PORT, SERVER_IP, SERVER_MAC, Server};
use corral_gen::Gen;
use corral_gen::run::{GenSpec, PhaseSpec, Protocol};
use corral_iokernel::nic::{FrameBatch, Nic};
use corral_iokernel::sys::now_ns;
use corral_loadgen::kv::{KvWorkload, SizeDist};
use corral_loadgen::{AdherencePolicy, Arrivals};
use corral_tcp::reset::reset_for;
use corral_wire::frame::L4_OFFSET;
use corral_wire::{Packet, parse_frame};

#[test]
fn a_memcache_tcp_run_checks_every_reply_over_its_connections() {
    let mut spec = GenSpec::new(
        SocketAddrV4::new(SERVER_IP, PORT),
        vec![PhaseSpec {
            rate_rps: 20_000.0,
            duration_s: 0.05,
        }],
    );
    spec.arrivals = Arrivals::Constant;
    spec.protocol = Protocol::MemcacheTcp;
    spec.clients = 16;
    spec.kv = KvWorkload {
        value_size: SizeDist::Uniform { min: 10, max: 2000 },
        get_fraction: 0.6,
        ..KvWorkload::new(300)
    };
    // Long enough that a loaded machine's stalls do not make replies late.
    spec.grace_ms = 1_000.0;
    spec.validate().unwrap();

    let mut generator = Gen::new(GEN_IP, 24);
    generator.start(&spec, SERVER_MAC.0).unwrap();
    let mut server = Server::new(Default::default());
    let mut link = Link::new(1, 0.0, 0.0);
    let mut batch = FrameBatch::default();
    let mut arp = 0;
    let finished = loop {
        let now = now_ns();
        batch.clear();
        generator.recv_burst_at(&mut batch, now);
        for i in 0..batch.len() {
            let frame = batch.frame(i);
            match parse_frame(frame)
                .expect("the generator's frames verify")
                .packet
            {
                Packet::Arp(_) => arp += 1,
                _ => link.send(now, true, frame.to_vec()),
            }
        }
        server.fire_timers(now, &mut link);
        while let Some((to_server, frame)) = link.pop_due(now) {
            if to_server {
                server.receive(now, &frame, &mut link);
            } else {
                generator.send(&frame).unwrap();
            }
        }
        if let Some(run) = generator.take_finished(now) {
            break run;
        }
    };
    assert!(arp > 0, "the generator announces itself to its target");

    let kv = finished
        .kv_report()
        .expect("a memcache-tcp run reports its checks");
    let (summary, windows, cost) = finished.finish(&AdherencePolicy::default());
    assert!(windows.is_empty());
    // Every request was queued by a poll, and the replies came through the transmit path
    // (a segment may carry several).
    assert_eq!(cost.requests, 1_000);
    assert!(cost.responses > 0, "{cost:?}");
    assert!(cost.timed_bursts > 0 && cost.build_ns > 0, "{cost:?}");
    assert_eq!(summary.scheduled, 1_000);
    assert_eq!(summary.sent, 1_000);
    assert_eq!(summary.matched, 1_000, "{summary:?}");
    assert_eq!((summary.lost, summary.malformed, summary.late), (0, 0, 0));
    assert_eq!((kv.checks.errors(), kv.errors), (0, 0), "{}", kv.checks);
    assert_eq!(kv.checks.correct(), 1_000, "{}", kv.checks);
    assert_eq!(kv.checks.gets + kv.checks.sets, 1_000);
    // Every key was set before the schedule started (by default), so every get hits.
    assert_eq!(kv.checks.preloaded, 300, "{}", kv.checks);
    assert!(kv.preload_s > 0.0);
    assert_eq!(
        (kv.checks.hits, kv.checks.misses),
        (kv.checks.gets, 0),
        "{}",
        kv.checks
    );
    assert!(kv.checks.hits > 0 && kv.checks.stored > 0, "{}", kv.checks);
    let c = kv.connections;
    assert_eq!(
        (c.connects, c.established, c.reconnects),
        (16, 16, 0),
        "{c:?}"
    );
    assert_eq!(
        (c.resets, c.lost_requests, c.refused_requests),
        (0, 0, 0),
        "{c:?}"
    );
    assert_eq!(server.accepted, 16);
    // The fleet took the preload's sets and the schedule's requests.
    assert_eq!(c.requests, 300 + 1_000, "{c:?}");
}

#[test]
fn a_memcache_tcp_run_against_nothing_loses_every_request_and_keeps_its_bounds() {
    let mut spec = GenSpec::new(
        SocketAddrV4::new(SERVER_IP, PORT),
        vec![PhaseSpec {
            rate_rps: 100_000.0,
            duration_s: 0.02,
        }],
    );
    spec.arrivals = Arrivals::Constant;
    spec.protocol = Protocol::MemcacheTcp;
    spec.clients = 4;
    spec.grace_ms = 10.0;
    // The schedule's requests themselves meet the silence.
    spec.preload = false;
    spec.validate().unwrap();

    let mut generator = Gen::new(GEN_IP, 24);
    generator.start(&spec, SERVER_MAC.0).unwrap();
    let mut batch = FrameBatch::default();
    let mut syns = 0;
    let finished = loop {
        let now = now_ns();
        batch.clear();
        generator.recv_burst_at(&mut batch, now);
        for i in 0..batch.len() {
            // Nothing answers: every frame but the ARP announcement is a SYN.
            if let Packet::Tcp { tcp, .. } = parse_frame(batch.frame(i)).unwrap().packet {
                assert!(tcp.payload().is_empty());
                syns += 1;
            }
        }
        if let Some(run) = generator.take_finished(now) {
            break run;
        }
    };
    assert!(syns >= 4);
    let kv = finished.kv_report().unwrap();
    let (summary, _, _) = finished.finish(&AdherencePolicy::default());
    assert_eq!(summary.scheduled, 2_000);
    assert_eq!(summary.matched, 0);
    // Each connection took 256 requests and refused the rest.
    let c = kv.connections;
    assert_eq!((c.connects, c.established), (4, 0), "{c:?}");
    assert_eq!(c.requests, 4 * 256, "{c:?}");
    assert_eq!(c.refused_requests, 2_000 - 4 * 256, "{c:?}");
    assert_eq!(summary.sent, 4 * 256);
    assert_eq!(summary.send_errors, 2_000 - 4 * 256);
    assert_eq!(kv.checks.correct(), 0);
}

#[test]
fn a_memcache_tcp_run_whose_preload_is_refused_ends_with_the_reason_and_no_results() {
    let mut spec = GenSpec::new(
        SocketAddrV4::new(SERVER_IP, PORT),
        vec![PhaseSpec {
            rate_rps: 1_000.0,
            duration_s: 0.05,
        }],
    );
    spec.protocol = Protocol::MemcacheTcp;
    spec.clients = 4;
    spec.kv = KvWorkload::new(100);
    spec.validate().unwrap();
    assert!(spec.preload, "preloading is the default");

    let mut generator = Gen::new(GEN_IP, 24);
    generator.start(&spec, SERVER_MAC.0).unwrap();
    let mut batch = FrameBatch::default();
    let mut refused = 0;
    let mut frame = [0u8; 1514];
    let finished = loop {
        let now = now_ns();
        batch.clear();
        generator.recv_burst_at(&mut batch, now);
        let mut resets = Vec::new();
        for i in 0..batch.len() {
            // Nothing listens at the target: every SYN is answered with a RST.
            if let Packet::Tcp { tcp, .. } = parse_frame(batch.frame(i)).unwrap().packet {
                let mut seg = [0u8; 20];
                let ends = (
                    SocketAddrV4::new(SERVER_IP, PORT),
                    SocketAddrV4::new(GEN_IP, tcp.src_port()),
                );
                if let Some(n) = reset_for(ends.0, ends.1, &tcp, &mut seg) {
                    frame[L4_OFFSET..L4_OFFSET + n].copy_from_slice(&seg[..n]);
                    let len = Server::spec().wrap_tcp_segment(&mut frame, n).unwrap();
                    resets.push(frame[..len].to_vec());
                }
            }
        }
        for r in resets {
            refused += 1;
            generator.send(&r).unwrap();
        }
        if let Some(run) = generator.take_finished(now) {
            break run;
        }
    };
    assert!(refused >= 1);
    let why = finished.failure().expect("the run was given up");
    assert!(why.starts_with("preload: "), "{why}");
    let kv = finished.kv_report().unwrap();
    assert!(kv.checks.connection_failures >= 1, "{}", kv.checks);
    assert!(kv.connections.refused >= 1, "{:?}", kv.connections);
    // No timed request was sent.
    let (summary, _, _) = finished.finish(&AdherencePolicy::default());
    assert_eq!((summary.scheduled, summary.sent), (0, 0));
}
