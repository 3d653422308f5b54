//! The TCP client fleet against memcached servers made of the same TCP engine's server
//! connections around `corral_memcache` sessions, exchanging whole frames over an in-memory
//! link on a virtual clock: every frame either side sends is parsed (checksums verified) on
//! arrival, and the link can lose, delay and reorder frames.

mod common;

use std::net::SocketAddrV4;

use common::{Faults, GEN_IP, Link, MS, PORT, S, SERVER_IP, SERVER_MAC, Server, US};
use corral_gen::nic::GEN_MAC;
use corral_gen::tcpfleet::{
    FleetConfig, FleetRequest, FrameList, PRELOAD_STALL_NS, PreloadProgress, PreloadReport,
    TcpFleet,
};
use corral_loadgen::kv::{Keyspace, KvWorkload, Op, SizeDist};
use corral_loadgen::recorder::ResponseRecorder;
use corral_loadgen::{AdherencePolicy, RunInfo};
use corral_memcache::store::{Peek, Store, StoreConfig};
use corral_tcp::Nanos;

/// A workload over 2,000 keys with values of 10 to 3,000 bytes (some span several segments).
fn keyspace(get_fraction: f64) -> Keyspace {
    keyspace_of(2000, get_fraction)
}

fn keyspace_of(keys: u64, get_fraction: f64) -> Keyspace {
    let workload = KvWorkload {
        value_size: SizeDist::Uniform { min: 10, max: 3000 },
        get_fraction,
        seed: 42,
        ..KvWorkload::new(keys)
    };
    workload.validate().unwrap();
    Keyspace::new(workload)
}

fn fleet(connections: usize, space: Keyspace, timed: u64) -> TcpFleet {
    let mut config = FleetConfig::new(
        connections,
        (GEN_MAC, GEN_IP),
        (SERVER_MAC, SocketAddrV4::new(SERVER_IP, PORT)),
    );
    config.tcp.time_wait = 10 * MS;
    config.tcp.rto_initial = 20 * MS;
    config.max_in_flight = 1024;
    config.validate().unwrap();
    TcpFleet::new(config, space, ResponseRecorder::new(0, timed))
}

/// One request of the test stream: what `submit` was given, and the connection it went on
/// (`None`: refused).
struct Sent {
    req: FleetRequest,
    conn: Option<usize>,
}

/// Runs `stream` (in order of scheduled time) through the fleet against `server` until every
/// request is answered or lost and the link is quiet, then closes every connection and runs
/// until both sides' tables are empty.
fn run(
    fleet: &mut TcpFleet,
    server: &mut Server,
    link: &mut Link,
    stream: &[FleetRequest],
) -> Vec<Sent> {
    run_from(0, fleet, server, link, stream)
}

/// [`run`] with the schedule's time 0 at `origin` on the fleet's clock, which starts there.
fn run_from(
    origin: Nanos,
    fleet: &mut TcpFleet,
    server: &mut Server,
    link: &mut Link,
    stream: &[FleetRequest],
) -> Vec<Sent> {
    fleet.start_schedule(origin);
    let mut now: Nanos = origin;
    let mut next = 0;
    let mut sent = Vec::with_capacity(stream.len());
    let mut out = FrameList::new(32);
    let mut closing = false;
    let mut steps = 0u64;
    loop {
        steps += 1;
        assert!(steps < 50_000_000, "the run makes no progress");
        while next < stream.len() && origin + stream[next].scheduled_ns <= now {
            let req = stream[next];
            sent.push(Sent {
                req,
                conn: fleet.submit(now, req).ok(),
            });
            next += 1;
        }
        server.fire_timers(now, link);
        loop {
            fleet.poll(now, &mut out);
            let frames = out.take();
            if frames.is_empty() {
                break;
            }
            for f in frames {
                link.send(now, true, f);
            }
        }
        while let Some((to_server, frame)) = link.pop_due(now) {
            if to_server {
                server.receive(now, &frame, link);
            } else {
                fleet.receive(&frame, now);
            }
        }
        if fleet.has_output() {
            continue;
        }
        let quiet = next == stream.len() && fleet.in_flight() == 0;
        if quiet && !closing {
            closing = true;
            fleet.close_all(now);
            continue;
        }
        if closing && fleet.open_connections() == 0 && server.conns.is_empty() {
            return sent;
        }
        let wake = [
            stream.get(next).map(|r| origin + r.scheduled_ns),
            link.next_arrival(),
            fleet.next_deadline(),
            server.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("something is pending while connections are open");
        assert!(wake < 3600 * S, "stuck: nothing due within an hour");
        now = now.max(wake);
    }
}

/// Preloads the fleet's key space against `server` from time 0 until the preload is done or
/// has failed; returns how it ended and when.
fn preload(
    fleet: &mut TcpFleet,
    server: &mut Server,
    link: &mut Link,
) -> (Result<PreloadReport, String>, Nanos) {
    let mut now: Nanos = 0;
    let mut out = FrameList::new(32);
    fleet.start_preload(now);
    let mut steps = 0u64;
    loop {
        steps += 1;
        assert!(steps < 50_000_000, "the preload makes no progress");
        match fleet.preload_step(now) {
            PreloadProgress::Running => {}
            PreloadProgress::Done(report) => return (Ok(report), now),
            PreloadProgress::Failed(why) => return (Err(why), now),
        }
        server.fire_timers(now, link);
        loop {
            fleet.poll(now, &mut out);
            let frames = out.take();
            if frames.is_empty() {
                break;
            }
            for f in frames {
                link.send(now, true, f);
            }
        }
        while let Some((to_server, frame)) = link.pop_due(now) {
            if to_server {
                server.receive(now, &frame, link);
            } else {
                fleet.receive(&frame, now);
            }
        }
        if fleet.has_output() {
            continue;
        }
        // As in the generator: the preload is looked at every millisecond regardless.
        let wake = [
            link.next_arrival(),
            fleet.next_deadline(),
            server.next_deadline(),
            Some(now + MS),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("the periodic look is always pending");
        now = now.max(wake);
    }
}

/// `n` requests, one every 1.5 µs from 1 ms on, the first `preload` of them untimed sets of
/// every key in turn.
fn stream(space: &Keyspace, n: u64, preload: u64) -> Vec<FleetRequest> {
    let mut out: Vec<FleetRequest> = (0..preload)
        .map(|k| FleetRequest {
            op: Op::Set {
                key: k % space.workload.keys,
            },
            id: None,
            scheduled_ns: MS / 2 + k * US / 2,
        })
        .collect();
    let start = out.last().map_or(MS, |r| r.scheduled_ns + MS);
    out.extend((0..n).map(|id| FleetRequest {
        op: space.op(id),
        id: Some(id),
        scheduled_ns: start + id * 3 * US / 2,
    }));
    out
}

/// The timed part of `stream`, as a run.
fn run_info(stream: &[FleetRequest]) -> RunInfo {
    let timed: Vec<&FleetRequest> = stream.iter().filter(|r| r.id.is_some()).collect();
    RunInfo {
        target_rps: 1e9 / (3 * US / 2) as f64,
        duration_ns: timed.last().unwrap().scheduled_ns + 3 * US / 2,
        scheduled: timed.len() as u64,
    }
}

fn assert_all_answered(fleet: &TcpFleet, sent: &[Sent]) {
    for s in sent {
        assert!(s.conn.is_some(), "refused: {:?}", s.req);
        if let Some(id) = s.req.id {
            assert!(fleet.recorder().is_answered(id), "request {id} unanswered");
        }
    }
}

#[test]
fn sixty_four_connections_answer_ten_thousand_mixed_requests_correctly() {
    let space = keyspace(0.7);
    let requests = stream(&space, 10_000, 0);
    let mut fleet = fleet(64, space, 10_000);
    let mut server = Server::new(Faults::default());
    let mut link = Link::new(1, 0.0, 0.0);
    let sent = run(&mut fleet, &mut server, &mut link, &requests);

    assert_all_answered(&fleet, &sent);
    let checks = *fleet.checks();
    assert_eq!(checks.errors(), 0, "{checks}");
    assert_eq!(checks.gets + checks.sets, 10_000);
    assert_eq!(checks.correct(), 10_000, "{checks}");
    assert!(
        checks.hits > 0 && checks.misses > 0 && checks.stored > 0,
        "{checks}"
    );
    assert_eq!(fleet.recorder().matched(), 10_000);
    let summary = fleet.summary(&run_info(&requests), &AdherencePolicy::default());
    assert_eq!(
        (summary.sent, summary.matched, summary.lost),
        (10_000, 10_000, 0)
    );
    // Over a 10 µs link, no request waits less than a round trip.
    assert!(summary.latency.p50_ns >= 20 * US, "{summary:?}");
    // Every connection carried requests, on its own port.
    let mut used = [false; 64];
    for s in &sent {
        used[s.conn.unwrap()] = true;
    }
    assert!(used.iter().all(|&u| u));
    let c = *fleet.counters();
    assert_eq!(
        (c.connects, c.established, c.reconnects),
        (64, 64, 0),
        "{c:?}"
    );
    assert_eq!((c.resets, c.lost_requests, c.refused_requests), (0, 0, 0));
    assert_eq!((c.foreign_frames, c.stray_segments), (0, 0), "{c:?}");
    assert_eq!(server.accepted, 64);
    assert_eq!(fleet.retransmissions(), 0);
    let tcp = fleet.tcp_counters();
    assert_eq!(tcp.active_opens, 64);
    assert_eq!(tcp.conns.segments_out + c.resets_sent, c.frames_out);
    assert_eq!(tcp.conns.segments_in + c.stray_segments, c.frames_in);
}

/// The whole stream through `connections` connections over a link that loses `loss` of the
/// frames each way and holds back a tenth; every request must still be answered correctly.
fn lossy(seed: u64, connections: usize, requests: u64, loss: f64) {
    let space = keyspace(0.8);
    let stream = stream(&space, requests, 0);
    let mut fleet = fleet(connections, space, requests);
    let mut server = Server::new(Faults::default());
    let mut link = Link::new(seed, loss, 0.10);
    let sent = run(&mut fleet, &mut server, &mut link, &stream);

    assert!(
        link.stats.lost > 0 && link.stats.reordered > 0,
        "{:?}",
        link.stats
    );
    assert_all_answered(&fleet, &sent);
    let checks = *fleet.checks();
    assert_eq!(checks.errors(), 0, "{checks}");
    assert_eq!(checks.correct(), requests, "{checks}");
    assert_eq!(fleet.recorder().matched(), requests);
    let c = *fleet.counters();
    assert_eq!(
        (c.resets, c.lost_requests, c.reconnects),
        (0, 0, 0),
        "{c:?}"
    );
    assert_eq!(server.accepted, connections as u64);
    let tcp = fleet.tcp_counters();
    let retransmissions = fleet.retransmissions();
    assert!(retransmissions > 0, "{tcp:?}");
    assert_eq!(
        retransmissions,
        tcp.conns.rto_retransmits + tcp.conns.fast_retransmits + tcp.conns.syn_retransmits
    );
    eprintln!(
        "seed {seed}: link {:?}, fleet {c:?}, engine {tcp:?}",
        link.stats
    );
}

#[test]
fn five_percent_loss_and_reordering_still_answer_every_request_correctly() {
    for seed in [0x5eed, 2, 3] {
        lossy(seed, 64, 10_000, 0.05);
    }
}

#[test]
fn a_thousand_connections_under_one_percent_loss() {
    lossy(7, 1024, 20_000, 0.01);
}

#[test]
fn a_wrong_value_is_an_error_and_not_a_latency_sample() {
    let space = keyspace(1.0);
    let keys = space.workload.keys;
    let requests = stream(&space, 2_000, keys);
    let mut fleet = fleet(16, space, 2_000);
    let mut server = Server::new(Faults {
        corrupt_values: 1,
        ..Faults::default()
    });
    let mut link = Link::new(3, 0.0, 0.0);
    let sent = run(&mut fleet, &mut server, &mut link, &requests);

    assert_eq!(server.values_corrupted, 1);
    let checks = *fleet.checks();
    assert_eq!(checks.sets, keys);
    assert_eq!(checks.stored, keys);
    // Every key was preloaded, so every get hits, one of them with a damaged value.
    assert_eq!(checks.wrong_value, 1, "{checks}");
    assert_eq!(checks.errors(), 1, "{checks}");
    assert_eq!(checks.hits, 2_000 - 1, "{checks}");
    assert_eq!(fleet.recorder().matched(), 2_000 - 1);
    let unanswered: Vec<u64> = sent
        .iter()
        .filter_map(|s| s.req.id)
        .filter(|&id| !fleet.recorder().is_answered(id))
        .collect();
    assert_eq!(unanswered.len(), 1, "{unanswered:?}");
    let summary = fleet.summary(&run_info(&requests), &AdherencePolicy::default());
    assert_eq!((summary.sent, summary.matched), (2_000, 2_000 - 1));
    assert_eq!((summary.malformed, summary.lost, summary.late), (1, 1, 0));
    // The stream stayed in step: the connection went on answering correctly.
    let c = *fleet.counters();
    assert_eq!(
        (c.broken_streams, c.lost_requests, c.resets),
        (0, 0, 0),
        "{c:?}"
    );
}

#[test]
fn a_reset_connection_is_counted_and_the_others_are_unaffected() {
    // 200 keys, so that the victim's four keys are each asked for every 300 µs, and sets it
    // loses are followed by gets of the same keys.
    let space = keyspace_of(200, 0.5);
    let requests = stream(&space, 10_000, 0);
    let victim = 5;
    let victim_keys: Vec<u64> = (0..200).filter(|k| k % 64 == victim as u64).collect();
    let mut fleet = fleet(64, space, 10_000);
    // Mid-run (the requests run from 1 ms to 16 ms), the server stops answering the victim
    // for a millisecond, then resets it.
    let mut server = Server::new(Faults {
        reset: Some((TcpFleet::port_of(victim), 7 * MS, 8 * MS)),
        ..Faults::default()
    });
    let mut link = Link::new(4, 0.0, 0.0);
    let sent = run(&mut fleet, &mut server, &mut link, &requests);

    assert_eq!(server.resets_sent, 1);
    let c = *fleet.counters();
    assert_eq!(c.resets, 1, "{c:?}");
    let mut victim_lost = Vec::new();
    for s in &sent {
        let id = s.req.id.unwrap();
        let conn = s.conn.expect("nothing refused");
        assert_eq!(victim_keys.contains(&s.req.op.key()), conn == victim);
        if conn != victim {
            assert!(fleet.recorder().is_answered(id), "request {id} on {conn}");
        } else if !fleet.recorder().is_answered(id) {
            victim_lost.push(s.req);
        }
    }
    assert_eq!(victim_lost.len() as u64, c.lost_requests);
    // Sets were lost, and their keys were asked for again after the reset.
    let lost_sets: Vec<u64> = victim_lost
        .iter()
        .filter(|r| matches!(r.op, Op::Set { .. }))
        .map(|r| r.op.key())
        .collect();
    let last_lost = victim_lost.iter().map(|r| r.scheduled_ns).max().unwrap();
    assert!(
        sent.iter().any(|s| s.req.scheduled_ns > last_lost
            && matches!(s.req.op, Op::Get { key } if lost_sets.contains(&key))),
        "no get follows a lost set: {victim_lost:?}"
    );
    // Later requests for the victim's keys opened it again, and were answered correctly:
    // a get after a lost set is right only if the fleet stored that key again first.
    assert_eq!((c.reconnects, c.connects), (1, 65), "{c:?}");
    // Each key whose set was lost was stored again, once.
    let mut distinct = lost_sets.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(c.repair_sets, distinct.len() as u64, "{c:?}");
    let checks = *fleet.checks();
    assert_eq!(checks.connection_failures, 1, "{checks}");
    assert_eq!(checks.errors(), 1, "{checks}");
    assert_eq!(fleet.recorder().matched(), 10_000 - c.lost_requests);
}

#[test]
fn replies_after_the_deadline_are_late_and_not_samples() {
    let space = keyspace(0.7);
    let requests = stream(&space, 10_000, 0);
    let mut fleet = fleet(64, space, 10_000);
    // Halfway through the schedule (1 ms to 16 ms).
    fleet.set_deadline(8 * MS);
    let mut server = Server::new(Faults::default());
    let mut link = Link::new(5, 0.0, 0.0);
    run(&mut fleet, &mut server, &mut link, &requests);

    let summary = fleet.summary(&run_info(&requests), &AdherencePolicy::default());
    assert_eq!(summary.sent, 10_000);
    assert!(summary.late > 0 && summary.matched > 0, "{summary:?}");
    assert_eq!(summary.matched + summary.late, 10_000, "{summary:?}");
    assert_eq!(summary.lost, summary.late);
    assert_eq!(fleet.recorder().latency().len(), summary.matched);
    // Every reply was still right: lateness is not an error.
    assert_eq!(fleet.checks().errors(), 0);
    assert_eq!(fleet.checks().correct(), 10_000);
}

#[test]
fn a_connection_the_server_closes_is_counted_and_opened_again() {
    let space = keyspace_of(200, 0.5);
    let requests = stream(&space, 10_000, 0);
    let victim = 9;
    let mut fleet = fleet(64, space, 10_000);
    let mut server = Server::new(Faults {
        close: Some((TcpFleet::port_of(victim), 6 * MS)),
        ..Faults::default()
    });
    let mut link = Link::new(6, 0.0, 0.0);
    let sent = run(&mut fleet, &mut server, &mut link, &requests);

    assert_eq!(server.closes_sent, 1);
    let c = *fleet.counters();
    assert_eq!((c.closed_by_peer, c.resets), (1, 0), "{c:?}");
    // While its connection was closing, the victim's requests were refused; then it opened
    // again.
    assert_eq!((c.reconnects, c.connects), (1, 65), "{c:?}");
    let (mut answered, mut refused, mut lost) = (0, 0, 0);
    for s in &sent {
        let id = s.req.id.unwrap();
        match s.conn {
            Some(conn) if conn != victim => {
                assert!(fleet.recorder().is_answered(id), "request {id} on {conn}");
            }
            None => refused += 1,
            Some(_) if fleet.recorder().is_answered(id) => answered += 1,
            Some(_) => lost += 1,
        }
    }
    assert!(answered > 0);
    assert_eq!(refused, c.refused_requests);
    assert_eq!(lost, c.lost_requests);
    // The server answered what it had read before its FIN; anything sent after that was lost
    // with the connection (a failure only if there was some).
    let checks = *fleet.checks();
    assert_eq!(checks.connection_failures, u64::from(lost > 0), "{checks}");
    assert_eq!(checks.errors(), checks.connection_failures, "{checks}");
    let summary = fleet.summary(&run_info(&requests), &AdherencePolicy::default());
    assert_eq!(summary.send_errors, refused);
    assert_eq!(summary.matched, 10_000 - refused - lost);
}

#[test]
fn after_a_preload_every_get_hits_and_every_reply_is_checked() {
    for (seed, loss, reorder) in [(1, 0.0, 0.0), (7, 0.02, 0.05)] {
        let space = keyspace(0.8);
        let keys = space.workload.keys;
        let requests = stream(&space, 10_000, 0);
        let mut fleet = fleet(16, space, 10_000);
        let mut server = Server::new(Faults::default());
        let mut link = Link::new(seed, loss, reorder);
        let (report, done_at) = preload(&mut fleet, &mut server, &mut link);
        let report = report.unwrap();
        assert_eq!(report.keys, keys);
        assert_eq!(report.duration_ns, done_at);
        assert!(!fleet.preloading());
        // Every key is on the server.
        let mut key = Vec::new();
        for k in 0..keys {
            keyspace(0.8).key_into(k, &mut key);
            // The preload's items never expire, so any time will do.
            assert!(
                !matches!(server.store.peek(&key, 0), Peek::Miss),
                "key {k} was not stored"
            );
        }
        // The checks count the timed run only, from zero.
        let checks = *fleet.checks();
        assert_eq!((checks.preloaded, checks.stored, checks.sets), (keys, 0, 0));
        assert_eq!(fleet.in_flight(), 0);

        let origin = done_at + MS;
        let sent = run_from(origin, &mut fleet, &mut server, &mut link, &requests);
        assert_all_answered(&fleet, &sent);
        let checks = *fleet.checks();
        assert_eq!(checks.errors(), 0, "{checks}");
        assert_eq!(checks.gets + checks.sets, 10_000, "{checks}");
        assert_eq!(checks.correct(), 10_000, "{checks}");
        assert!(checks.gets > 0 && checks.sets > 0, "{checks}");
        assert_eq!((checks.hits, checks.misses), (checks.gets, 0), "{checks}");
        assert_eq!(checks.stored, checks.sets, "{checks}");
        assert_eq!(checks.preloaded, keys);
        let summary = fleet.summary(&run_info(&requests), &AdherencePolicy::default());
        assert_eq!(
            (
                summary.sent,
                summary.matched,
                summary.lost,
                summary.malformed
            ),
            (10_000, 10_000, 0, 0)
        );
        // Times are on the schedule's clock: a request waits at least a round trip of the
        // 10 µs link, and none waited as long as the preload took.
        assert!(summary.latency.p50_ns >= 20 * US, "{summary:?}");
        assert!(summary.latency.max_ns < done_at, "{summary:?}");
        assert_eq!(summary.lateness.max_ns, 0, "{summary:?}");
    }
}

#[test]
fn a_preload_the_server_stops_answering_fails_instead_of_running() {
    let space = keyspace(0.8);
    let mut fleet = fleet(8, space, 1);
    // Connection 3 is acknowledged and never answered.
    let mut server = Server::new(Faults {
        reset: Some((TcpFleet::port_of(3), 0, 3600 * S)),
        ..Faults::default()
    });
    let mut link = Link::new(3, 0.0, 0.0);
    let (report, at) = preload(&mut fleet, &mut server, &mut link);
    let why = report.unwrap_err();
    assert!(why.starts_with("preload: no reply"), "{why}");
    assert!(at > PRELOAD_STALL_NS, "{at}");
    assert!(!fleet.preloading());
    // The other connections' keys were stored.
    let checks = *fleet.checks();
    assert_eq!(checks.errors(), 0, "{checks}");
    assert_eq!(checks.stored, 2000 - 2000 / 8, "{checks}");
}

#[test]
fn a_preload_whose_sets_the_server_refuses_fails() {
    // Values are up to 3,000 bytes and the server takes items of at most 1,024: it answers
    // the larger sets with SERVER_ERROR.
    let space = keyspace(0.8);
    let mut fleet = fleet(4, space, 1);
    let mut server = Server::new(Faults::default());
    server.store = Store::new(StoreConfig::new(64 << 20, 1024, 0));
    let mut link = Link::new(5, 0.0, 0.0);
    let (report, _) = preload(&mut fleet, &mut server, &mut link);
    let why = report.unwrap_err();
    assert!(why.starts_with("preload: "), "{why}");
    assert!(why.contains("sets failed"), "{why}");
    assert!(fleet.checks().server_errors > 0, "{}", fleet.checks());
}

#[test]
fn a_preload_of_fewer_keys_than_connections_sets_each_key_on_its_own_connection() {
    let space = keyspace_of(10, 0.5);
    let requests = stream(&space, 500, 0);
    let mut fleet = fleet(16, space, 500);
    let mut server = Server::new(Faults::default());
    let mut link = Link::new(2, 0.0, 0.0);
    let (report, done_at) = preload(&mut fleet, &mut server, &mut link);
    assert_eq!(report.unwrap().keys, 10);
    assert_eq!(fleet.checks().preloaded, 10);
    let sent = run_from(done_at, &mut fleet, &mut server, &mut link, &requests);
    assert_all_answered(&fleet, &sent);
    let checks = *fleet.checks();
    assert_eq!(checks.errors(), 0, "{checks}");
    assert_eq!((checks.hits, checks.misses), (checks.gets, 0), "{checks}");
    // Key k went on connection k: the six connections past the last key carried nothing.
    for s in &sent {
        assert_eq!(s.conn, Some(s.req.op.key() as usize));
    }
}
