//! The memcached conversation ([`StreamSession`]) carried by the sans-I/O TCP engine, as
//! iokerneld's generator would carry it: a client `corral_tcp::Connection` talks to a server
//! `Connection` on a virtual clock, segments handed across by this test, and the server side
//! answers with a small in-memory memcached (get and set). Every reply is checked and timed by
//! the same code the Linux client uses.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use corral_loadgen::kv::{Keyspace, KvChecks, KvWorkload, Op, SizeDist, Versions};
use corral_loadgen::kvstream::StreamSession;
use corral_loadgen::recorder::{AdherencePolicy, Recorder, RunInfo};
use corral_loadgen::{Arrivals, ScheduleConfig};
use corral_tcp::{Connection, Endpoints, State, TcpConfig};
use corral_wire::TcpSegment;

const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 40_000);
const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 11_211);

/// A memcached that knows get and set, enough to answer the generator; `corrupt` flips a byte
/// of the value in the n-th get that hits.
#[derive(Default)]
struct TinyMemcached {
    items: HashMap<Vec<u8>, (u32, Vec<u8>)>,
    input: Vec<u8>,
    hits: u64,
    corrupt: Option<u64>,
}

impl TinyMemcached {
    /// Answers every complete command in `input`, appending replies to `out`.
    fn serve(&mut self, out: &mut Vec<u8>) {
        loop {
            let Some(nl) = self.input.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let line = String::from_utf8(self.input[..nl].to_vec()).unwrap();
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["get", key] => {
                    match self.items.get(key.as_bytes()) {
                        Some((flags, data)) => {
                            self.hits += 1;
                            let mut data = data.clone();
                            if self.corrupt == Some(self.hits) {
                                data[0] ^= 1;
                            }
                            out.extend_from_slice(
                                format!("VALUE {key} {flags} {}\r\n", data.len()).as_bytes(),
                            );
                            out.extend_from_slice(&data);
                            out.extend_from_slice(b"\r\nEND\r\n");
                        }
                        None => out.extend_from_slice(b"END\r\n"),
                    }
                    self.input.drain(..nl + 2);
                }
                ["set", key, flags, _exptime, len] => {
                    let len: usize = len.parse().unwrap();
                    let end = nl + 2 + len + 2;
                    if self.input.len() < end {
                        return;
                    }
                    let data = self.input[nl + 2..nl + 2 + len].to_vec();
                    self.items
                        .insert(key.as_bytes().to_vec(), (flags.parse().unwrap(), data));
                    out.extend_from_slice(b"STORED\r\n");
                    self.input.drain(..end);
                }
                _ => panic!("unexpected command {line:?}"),
            }
        }
    }
}

/// Both ends and the clock.
struct Wire {
    now: u64,
    client: Connection,
    server: Option<Connection>,
    cfg: TcpConfig,
    segment: Vec<u8>,
}

impl Wire {
    fn new() -> Wire {
        let cfg = TcpConfig::default();
        let ends = Endpoints {
            local: CLIENT,
            remote: SERVER,
        };
        let mut client = Connection::connect(&cfg, ends, 1_000, 0);
        client.set_nodelay(true);
        Wire {
            now: 0,
            client,
            server: None,
            cfg,
            segment: vec![0; 70_000],
        }
    }

    /// Moves every segment either side has to send, fires due timers, and advances the clock
    /// by `step_ns`.
    fn pump(&mut self, step_ns: u64) {
        self.now += step_ns;
        let now = self.now;
        for c in [Some(&mut self.client), self.server.as_mut()]
            .into_iter()
            .flatten()
        {
            if c.next_deadline().is_some_and(|d| d <= now) {
                c.on_timer(now);
            }
        }
        loop {
            let mut moved = false;
            while let Some(n) = self.client.poll_transmit(now, &mut self.segment) {
                moved = true;
                let seg =
                    TcpSegment::parse(&self.segment[..n], *CLIENT.ip(), *SERVER.ip()).unwrap();
                match &mut self.server {
                    Some(s) => {
                        s.on_segment(now, &seg);
                    }
                    None => {
                        let ends = Endpoints {
                            local: SERVER,
                            remote: CLIENT,
                        };
                        let mut s = Connection::accept_syn(&self.cfg, ends, &seg, 9_000, now);
                        s.set_nodelay(true);
                        self.server = Some(s);
                    }
                }
            }
            if let Some(s) = &mut self.server {
                while let Some(n) = s.poll_transmit(now, &mut self.segment) {
                    moved = true;
                    let seg =
                        TcpSegment::parse(&self.segment[..n], *SERVER.ip(), *CLIENT.ip()).unwrap();
                    self.client.on_segment(now, &seg);
                }
            }
            if !moved {
                return;
            }
        }
    }
}

/// Plays a schedule over the engine against [`TinyMemcached`]; returns the checks and the
/// summary's counts.
fn play(corrupt: Option<u64>) -> (KvChecks, corral_loadgen::Summary) {
    let mut w = Wire::new();
    for _ in 0..10 {
        w.pump(10_000);
    }
    assert_eq!(w.client.state(), State::Established);
    let mut workload = KvWorkload::new(200);
    workload.key_size = SizeDist::FB_KEY;
    workload.value_size = SizeDist::FB_VALUE;
    workload.max_value = 20_000;
    workload.get_fraction = 0.8;
    let space = Keyspace::new(workload);
    let mut versions = Versions::new(200);
    let mut session = StreamSession::new();
    let mut checks = KvChecks::default();
    let mut server = TinyMemcached {
        corrupt,
        ..TinyMemcached::default()
    };
    let (mut to_send, mut to_client) = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; 65_536];

    // One step of both applications: the client writes what it can and reads replies, the
    // server reads commands and answers.
    let mut step = |w: &mut Wire,
                    session: &mut StreamSession,
                    checks: &mut KvChecks,
                    to_send: &mut Vec<u8>,
                    rec: Option<&mut Recorder>| {
        let now = w.now;
        if !to_send.is_empty() {
            let n = w.client.send(now, to_send).unwrap();
            to_send.drain(..n);
        }
        let s = w.server.as_mut().unwrap();
        while let Ok(n) = s.recv(now, &mut buf) {
            if n == 0 {
                break;
            }
            server.input.extend_from_slice(&buf[..n]);
        }
        server.serve(&mut to_client);
        if !to_client.is_empty() {
            let n = s.send(now, &to_client).unwrap();
            to_client.drain(..n);
        }
        while let Ok(n) = w.client.recv(now, session.spare(65_536)) {
            if n == 0 {
                break;
            }
            session.filled(n);
        }
        session
            .take_replies(&space, now, checks, rec.map(|r| &mut r.responses))
            .unwrap();
        w.pump(1_000);
    };

    // Preload every key, then play the schedule on the virtual clock.
    for k in 0..200 {
        session.request(
            &space,
            &mut versions,
            Op::Set { key: k },
            None,
            0,
            &mut to_send,
            &mut checks,
        );
    }
    while session.in_flight() > 0 {
        step(&mut w, &mut session, &mut checks, &mut to_send, None);
    }
    assert_eq!(checks.stored, 200);
    let preloaded = checks.stored;
    checks = KvChecks {
        preloaded,
        ..KvChecks::default()
    };

    let schedule = ScheduleConfig::new(100_000.0, Duration::from_millis(20))
        .arrivals(Arrivals::Constant)
        .seed(3);
    let mut rec = Recorder::for_schedule(&schedule);
    let epoch = w.now;
    let mut scheduled = 0;
    for req in schedule.iter() {
        while w.now - epoch < req.send_ns {
            step(
                &mut w,
                &mut session,
                &mut checks,
                &mut to_send,
                Some(&mut rec),
            );
        }
        scheduled += 1;
        session.request(
            &space,
            &mut versions,
            space.op(req.id),
            Some(req.id),
            req.send_ns,
            &mut to_send,
            &mut checks,
        );
        rec.send.record_sent(req.send_ns, w.now - epoch);
    }
    while session.in_flight() > 0 {
        step(
            &mut w,
            &mut session,
            &mut checks,
            &mut to_send,
            Some(&mut rec),
        );
    }
    let info = RunInfo {
        target_rps: schedule.rate_rps,
        duration_ns: schedule.duration_ns,
        scheduled,
    };
    (checks, rec.summary(&info, &AdherencePolicy::default()))
}

#[test]
fn every_request_over_the_engine_gets_a_checked_reply() {
    let (checks, s) = play(None);
    assert_eq!(s.scheduled, 2_000);
    assert_eq!(
        (s.sent, s.matched, s.lost, s.malformed),
        (2_000, 2_000, 0, 0)
    );
    assert_eq!(checks.errors(), 0, "{checks}");
    assert_eq!(checks.gets + checks.sets, 2_000);
    assert_eq!((checks.hits, checks.misses), (checks.gets, 0), "{checks}");
    assert_eq!(checks.stored, checks.sets);
    // Latency is virtual time: at least the clock steps a request and its reply take.
    assert!(s.latency.min_ns >= 1_000, "{:?}", s.latency);
}

#[test]
fn a_wrong_value_over_the_engine_is_an_error_not_a_sample() {
    let (checks, s) = play(Some(5));
    assert_eq!(checks.wrong_value, 1, "{checks}");
    assert_eq!(checks.errors(), 1);
    assert_eq!((s.matched, s.malformed, s.lost), (1_999, 1, 1));
    assert_eq!(s.latency.count, 1_999);
}
