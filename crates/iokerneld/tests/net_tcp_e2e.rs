//! Corral's TCP under a real iokerneld and a TAP device, against the Linux kernel's TCP: a
//! Linux client talking to a Corral `TcpListener`, and a Corral `TcpStream` talking to a Linux
//! listener.
//!
//! Each test starts its own iokerneld (CPU 0, managing CPU 1) with its own socket, TAP device
//! and subnet, and the tests run one at a time. Nothing here asserts timing; every wait is
//! bounded only so that a broken build fails instead of hanging.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener as LinuxListener, TcpStream as LinuxStream};
use std::time::Duration;

use common::{Launch, serial};
use corral::net::{NetConfig, TcpListener, TcpStream};
use corral::{Config, IokernelSettings, Runtime};

const PORT: u16 = 7;

struct Daemon {
    iokerneld: common::Daemon,
    subnet: [u8; 3],
}

impl Daemon {
    fn start(test: u8) -> Daemon {
        Self::start_with(test, &[])
    }

    fn start_with(test: u8, extra: &[&str]) -> Daemon {
        let pid = std::process::id();
        // A prefix and a subnet range (10.60-99.x) no other test binary uses: tests of other
        // binaries may run at the same time, and two TAP devices with one subnet would route
        // this test's packets to the other's runtime.
        let tap = format!("ctrt{}t{test}", pid % 100_000);
        let subnet = [10, 60 + (pid % 40) as u8, test];
        let cidr = format!("{}.{}.{}.1/24", subnet[0], subnet[1], subnet[2]);
        let iokerneld = common::Daemon::launch(Launch {
            args: &[
                "--log-level",
                "warn",
                "--nic",
                "tap",
                "--tap-name",
                &tap,
                "--host-ip",
                &cidr,
            ],
            socket: "iokerneld.sock",
            extra,
            log: false,
        });
        Daemon { iokerneld, subnet }
    }

    fn ip(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], last)
    }

    fn runtime(&self, name: &str, last: u8) -> Runtime {
        Runtime::new(
            Config::default()
                .kthreads(1)
                .iokernel(IokernelSettings::new(&self.iokerneld.socket, name))
                .net(NetConfig::new(self.ip(last), 24)),
        )
        .expect("start a networked runtime under iokerneld")
    }
}

/// FNV-1a, 64 bits.
fn fnv(hash: &mut u64, data: &[u8]) {
    for &b in data {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x100_0000_01b3);
    }
}

const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

fn pattern(offset: usize, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = ((offset + i) as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .to_be_bytes()[0];
    }
}

/// Writes `total` bytes of the pattern to `c` in `chunk`-byte writes while a second uthread
/// reads what comes back, then shuts writing down and waits for the end of what comes back.
/// Returns the bytes read, their hash and the hash of what was sent.
fn send_and_read_back(c: TcpStream, total: usize, chunk: usize) -> (usize, u64, u64) {
    let reader_side = c.try_clone().unwrap();
    let reader = corral::spawn(move || {
        let mut s = reader_side;
        let mut buf = vec![0u8; 64 * 1024];
        let (mut got, mut hash) = (0, FNV_START);
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                return (got, hash);
            }
            fnv(&mut hash, &buf[..n]);
            got += n;
        }
    });
    let mut sent_hash = FNV_START;
    let mut chunk = vec![0u8; chunk];
    let mut sent = 0;
    while sent < total {
        let n = chunk.len().min(total - sent);
        pattern(sent, &mut chunk[..n]);
        fnv(&mut sent_hash, &chunk[..n]);
        (&c).write_all(&chunk[..n]).unwrap();
        sent += n;
    }
    c.shutdown(Shutdown::Write).unwrap();
    let (got, hash) = reader.join().unwrap();
    (got, hash, sent_hash)
}

/// Runs `body`; if it has not finished after `limit`, prints what each runtime and iokerneld
/// hold (connections with their sequence variables and timers, kthreads with their run queues
/// and timers) and aborts, so that a hang shows where the work is stuck.
fn or_dump_after<T: Send>(
    limit: Duration,
    daemon: &Daemon,
    runtimes: &[&Runtime],
    body: impl FnOnce() -> T + Send,
) -> T {
    let (done, finished) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            if finished.recv_timeout(limit) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            eprintln!("no progress after {limit:?}; clock now {}", now_ns());
            for rt in runtimes {
                eprintln!(
                    "runtime {:?}: shared queue {}, kthreads {:?}",
                    rt.iokernel_runtime_id(),
                    rt.shared_runnable(),
                    rt.iokernel_kthread_stats()
                );
                for c in rt.describe_tcp_connections() {
                    eprintln!("  {c}");
                }
            }
            eprintln!("iokerneld: {:#}", daemon.iokerneld.stats());
            // No destructor runs after the abort: iokerneld would outlive the test.
            // SAFETY: kill(2) on iokerneld's pid, a child this process has not reaped.
            unsafe { libc::kill(daemon.iokerneld.pid() as i32, libc::SIGKILL) };
            std::process::abort();
        });
        let out = body();
        let _ = done.send(());
        out
    })
}

/// CLOCK_MONOTONIC in nanoseconds, the runtime's timer clock.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Starts an echo server on the runtime: one uthread per connection, echoing until EOF.
fn start_echo(rt: &Runtime, ip: Ipv4Addr) {
    rt.block_on(move || {
        let listener = TcpListener::bind((ip, PORT)).expect("bind the echo server");
        corral::spawn(move || {
            for conn in listener.incoming() {
                let mut s = conn.expect("accept");
                corral::spawn(move || {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if s.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
    });
}

#[test]
fn a_linux_client_gets_echoes_and_10_mb_back_intact() {
    const TOTAL: usize = 10 << 20;
    let _serial = serial();
    let daemon = Daemon::start(1);
    let server = daemon.ip(2);
    let rt = daemon.runtime("tcpecho", 2);
    start_echo(&rt, server);

    let mut c = LinuxStream::connect_timeout(&(server, PORT).into(), Duration::from_secs(10))
        .expect("Linux connects to the Corral listener");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.set_nodelay(true).unwrap();
    for i in 0..200u32 {
        let msg = format!("ping {i}");
        c.write_all(msg.as_bytes()).unwrap();
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).unwrap();
        assert_eq!(back, msg.as_bytes());
    }

    echo_through(c, TOTAL);

    let tcp = rt.net_stats().unwrap().tcp;
    assert_eq!(tcp.counters.passive_opens, 1);
    assert!(tcp.counters.conns.bytes_in >= TOTAL as u64, "{tcp:?}");
    assert_eq!(tcp.drop_count("bad_checksum"), 0);
}

/// Sends `total` bytes through an echo server from `c` (a thread writes while this one reads
/// and hashes) and checks that they all came back intact.
fn echo_through(mut c: LinuxStream, total: usize) {
    let mut writer = c.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut hash = FNV_START;
        let mut chunk = vec![0u8; 64 * 1024];
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            pattern(sent, &mut chunk[..n]);
            fnv(&mut hash, &chunk[..n]);
            writer.write_all(&chunk[..n]).unwrap();
            sent += n;
        }
        writer.shutdown(Shutdown::Write).unwrap();
        hash
    });
    let mut got = 0;
    let mut hash = FNV_START;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = c.read(&mut buf).expect("read the echo");
        if n == 0 {
            break;
        }
        fnv(&mut hash, &buf[..n]);
        got += n;
    }
    let sent_hash = sender.join().unwrap();
    assert_eq!(got, total);
    assert_eq!(hash, sent_hash, "the echo came back intact");
}

#[test]
fn a_transfer_survives_loss_reordering_duplication_and_corruption() {
    const TOTAL: usize = 4 << 20;
    let _serial = serial();
    let daemon = Daemon::start_with(
        3,
        &[
            "--faults",
            "all:loss=0.05,reorder=0.05,dup=0.02,corrupt=0.01,only=tcp,seed=7",
        ],
    );
    let server = daemon.ip(2);
    let rt = daemon.runtime("tcplossy", 2);
    start_echo(&rt, server);
    let c = LinuxStream::connect_timeout(&(server, PORT).into(), Duration::from_secs(20))
        .expect("Linux connects through the faults");
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    echo_through(c, TOTAL);
    let tcp = rt.net_stats().unwrap().tcp;
    let c = &tcp.counters.conns;
    assert!(
        c.rto_retransmits + c.fast_retransmits > 0,
        "the runtime's side retransmitted: {c:?}"
    );
    assert!(
        tcp.drop_count("bad_checksum") > 0,
        "corruption was caught: {tcp:?}"
    );
}

#[test]
fn a_corral_client_talks_to_a_linux_listener() {
    const TOTAL: usize = 2 << 20;
    let _serial = serial();
    let daemon = Daemon::start(2);
    let host = daemon.ip(1);
    let linux = LinuxListener::bind((host, 0)).expect("a Linux listener on the TAP's address");
    let port = linux.local_addr().unwrap().port();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = linux.accept().unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                return;
            }
            s.write_all(&buf[..n]).unwrap();
        }
    });
    let rt = daemon.runtime("tcpclient", 2);
    let (got, hash, sent_hash) = rt.block_on(move || {
        let c = TcpStream::connect((host, port)).expect("connect to Linux");
        send_and_read_back(c, TOTAL, 50_000)
    });
    echo.join().unwrap();
    assert_eq!(got, TOTAL);
    assert_eq!(hash, sent_hash);
    let tcp = rt.net_stats().unwrap().tcp;
    assert_eq!(tcp.counters.active_opens, 1);
}

#[test]
fn two_corral_runtimes_talk_through_the_local_switch() {
    const TOTAL: usize = 4 << 20;
    let _serial = serial();
    let daemon = Daemon::start(4);
    let server_ip = daemon.ip(2);
    let server = daemon.runtime("tcpserver", 2);
    start_echo(&server, server_ip);
    let client = daemon.runtime("tcpclient2", 3);
    let limit = Duration::from_secs(60);
    let runtimes = [&server, &client];
    let (got, hash, sent_hash) = or_dump_after(limit, &daemon, &runtimes, || {
        client.block_on(move || {
            let c = TcpStream::connect((server_ip, PORT)).expect("connect runtime to runtime");
            send_and_read_back(c, TOTAL, 64 * 1024)
        })
    });
    assert_eq!(got, TOTAL);
    assert_eq!(hash, sent_hash);
    assert_eq!(client.net_stats().unwrap().tcp.counters.active_opens, 1);
    assert_eq!(server.net_stats().unwrap().tcp.counters.passive_opens, 1);
}

/// iokerneld's counters of the server runtime, by name.
type Counters = std::collections::BTreeMap<&'static str, u64>;

/// How a request/response round left the server: what iokerneld counted for it during the
/// round, and what it held once both sides had settled.
struct Round {
    /// Increase of the server's counters over the round.
    delta: Counters,
    /// Segments the client sent that the server's TCP has not read (its ACK of the reply, left
    /// on the server's ring).
    unread: u64,
    /// The server kthread's earliest timer once it parked, if it kept one.
    server_timer: Option<u64>,
}

/// iokerneld's counters of the server that the rounds follow.
const ROUND_COUNTERS: [&str; 5] = [
    "grants",
    "timer_wakeups",
    "acks_left_waiting",
    "ack_waits_expired",
    "preemptions_suffered",
];

/// 64-byte request/response rounds from a runtime named `client` to the echo server, one at a
/// time. After each, both runtimes are left to settle before the next: the client's delayed
/// ACK of the reply has gone out, the client holds no timer and has parked, and so has the
/// server. What the server does between requests then depends on nothing but the two stacks
/// and iokerneld, however slowly the machine runs them.
///
/// The server is watched only from outside: its kthread's state, and iokerneld's statistics
/// with what it reported when it last parked. Asking a runtime for its statistics from another
/// thread reaches into its connections, which can leave one retrying a send on its next run:
/// only the client, whose timers the test is not about, is asked.
struct RoundTrips<'a> {
    daemon: &'a Daemon,
    server: &'a Runtime,
    server_name: &'a str,
    client: Runtime,
    stream: Option<TcpStream>,
    rounds: u64,
    /// The server's counters when the last round (or the handshake) settled.
    settled: Counters,
}

/// Only against a hang: each round settles within milliseconds (or iokerneld's ACK wait).
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

impl<'a> RoundTrips<'a> {
    fn connect(
        daemon: &'a Daemon,
        (server, server_name, server_ip): (&'a Runtime, &'a str, Ipv4Addr),
        client: &str,
    ) -> RoundTrips<'a> {
        let client = daemon.runtime(client, 3);
        let stream = client.block_on(move || {
            let c = TcpStream::connect((server_ip, PORT)).expect("connect runtime to runtime");
            c.set_nodelay(true).unwrap();
            c
        });
        let mut trips = RoundTrips {
            daemon,
            server,
            server_name,
            client,
            stream: Some(stream),
            rounds: 0,
            settled: Counters::new(),
        };
        // The handshake settles as a round does (the server's ACK wait may hold the last ACK).
        (_, trips.settled, _) = trips.settle(|_, _| true);
        trips
    }

    /// The server's counters, and the segments the client sent that the server had not read
    /// when it last parked.
    fn observe(&self) -> (Counters, u64) {
        let sent = self
            .client
            .net_stats()
            .unwrap()
            .tcp
            .counters
            .conns
            .segments_out;
        let stats: serde_json::Value = self.daemon.iokerneld.stats();
        let server = stats["runtimes"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["name"] == self.server_name))
            .unwrap_or_else(|| panic!("{} not in {stats:#}", self.server_name));
        let read = server["reported"]["tcp.segments_in"]
            .as_u64()
            .unwrap_or_else(|| panic!("no reported tcp.segments_in in {server:#}"));
        let unread = sent.saturating_sub(read);
        let counters = ROUND_COUNTERS
            .iter()
            .map(|&key| (key, server[key].as_u64().unwrap()))
            .collect();
        (counters, unread)
    }

    /// Waits until the client has sent everything it will (its delayed ACK included: it holds
    /// no timer) and parked, the server has parked, and `settled(unread, counters)` holds;
    /// returns the unread count, the server's counters and its earliest timer then.
    fn settle(&self, settled: impl Fn(u64, &Counters) -> bool) -> (u64, Counters, Option<u64>) {
        let start = std::time::Instant::now();
        loop {
            let parked = || {
                let (c, s) = (
                    self.client.iokernel_kthread_stats()[0],
                    self.server.iokernel_kthread_stats()[0],
                );
                (c.parked && c.next_timer_ns.is_none() && s.parked).then_some((c.grants, s))
            };
            if let Some((client_grants, server)) = parked() {
                let (counters, unread) = self.observe();
                // The server did not run meanwhile, so what it reported when it parked is
                // current; nor did the client, which sent everything counted.
                if let Some((again, server_again)) = parked()
                    && again == client_grants
                    && server_again.grants == server.grants
                    && settled(unread, &counters)
                {
                    return (unread, counters, server_again.next_timer_ns);
                }
            }
            assert!(
                start.elapsed() < SETTLE_LIMIT,
                "round {} did not settle within {SETTLE_LIMIT:?}: client {:?}, server {:?}, \
                 iokerneld's view {:?}",
                self.rounds,
                self.client.iokernel_kthread_stats(),
                self.server.iokernel_kthread_stats(),
                self.observe()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// One round; it is over once `settled(unread, counters)` holds with both sides parked.
    fn round(&mut self, settled: impl Fn(u64, &Counters) -> bool) -> Round {
        // From where the last round settled, so that nothing between rounds goes uncounted.
        let before = self.settled.clone();
        let round = self.rounds as u8;
        let stream = self.stream.take().expect("the connection");
        self.stream = Some(self.client.block_on(move || {
            let request = [round; 64];
            (&stream).write_all(&request).unwrap();
            let mut reply = [0u8; 64];
            (&stream).read_exact(&mut reply).unwrap();
            assert_eq!(reply, request);
            stream
        }));
        self.rounds += 1;
        let (unread, after, server_timer) =
            self.settle(|unread, counters| settled(unread, &delta(&before, counters)));
        self.settled = after.clone();
        Round {
            delta: delta(&before, &after),
            unread,
            server_timer,
        }
    }
}

fn delta(before: &Counters, after: &Counters) -> Counters {
    after.iter().map(|(&k, &v)| (k, v - before[k])).collect()
}

/// A server runtime whose retransmission timer cannot come due in these tests: a live one
/// would wake it for as long as the client's ACK takes, which is a matter of machine speed.
fn patient_server(daemon: &Daemon, name: &str) -> Runtime {
    let mut tcp = corral::net::TcpSettings::default();
    tcp.tcp.rto_min = 60_000_000_000;
    tcp.tcp.rto_initial = tcp.tcp.rto_min;
    tcp.tcp.rto_max = tcp.tcp.rto_min;
    Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(&daemon.iokerneld.socket, name))
            .net(NetConfig::new(daemon.ip(2), 24).tcp(tcp)),
    )
    .expect("start a networked runtime under iokerneld")
}

/// A request/response connection leaves timers behind in the server that its replies and the
/// client's ACKs have made pointless (the delayed ACK a reply carried, the retransmission timer
/// the ACK stopped). The server parks between requests; it must not report such a timer to
/// iokerneld and be woken on a core for it after every request.
#[test]
fn a_parked_server_is_not_woken_for_timers_its_replies_made_pointless() {
    // Rounds in which the server parked as soon as it had replied and the client's ACK then
    // waited for it on its ring until iokerneld's ACK wait (2 ms) ran out: the state the test
    // is about, where nothing but that wait may give it a core.
    const WAITED: u64 = 100;
    // Nearly every round is one; a loaded machine spoils a few (see below).
    const MAX_ROUNDS: u64 = 2 * WAITED;
    let _serial = serial();
    let daemon = Daemon::start(5);
    let server = patient_server(&daemon, "rrserver");
    start_echo(&server, daemon.ip(2));
    let mut trips = RoundTrips::connect(&daemon, (&server, "rrserver", daemon.ip(2)), "rrclient");
    let mut waited = 0;
    while waited < WAITED {
        assert!(
            trips.rounds < MAX_ROUNDS,
            "in only {waited} of {} rounds did the client's ACK wait on the server's ring \
             until the wait ran out",
            trips.rounds
        );
        // Settled once the server has read the client's ACK.
        let r = trips.round(|unread, _| unread == 0);
        let n = trips.rounds;
        // The request found the server parked and got it a core.
        assert!(r.delta["grants"] >= 1, "round {n}: {:?}", r.delta);
        // Once it parked with everything read and answered, every timer it had was pointless.
        assert_eq!(
            r.server_timer.map(|t| t as i64 - now_ns() as i64),
            None,
            "round {n}: the server parked keeping a timer (due in so many ns) after its reply \
             was acknowledged; {:?}; {:?}",
            r.delta,
            server.iokernel_kthread_stats()
        );
        if r.delta["preemptions_suffered"] > 0 {
            // Its core was taken mid-round (on a loaded machine), maybe before it replied: a
            // timer it held then, such as the delayed ACK of the request, was still live.
            continue;
        }
        // It parked only on its own, having replied: the reply carried the delayed ACK, and
        // the client's ACK stopped the retransmission timer long before that could come due.
        assert_eq!(r.delta["timer_wakeups"], 0, "round {n}: {:?}", r.delta);
        if r.delta["acks_left_waiting"] > 0 && r.delta["ack_waits_expired"] > 0 {
            waited += 1;
        }
    }
    let tcp = server.net_stats().unwrap().tcp.counters;
    assert_eq!(tcp.conns.rto_retransmits, 0, "{tcp:?}");
}

/// The client's ACK of each reply arrives after the server parked; none of the server's
/// connections needs it promptly (one segment in flight, nothing to send), so iokerneld leaves
/// it on the server's ring instead of granting a core for it, and the server reads it with the
/// next request: one grant per request, not two.
#[test]
fn a_parked_server_is_not_woken_for_the_acks_of_its_replies() {
    // Rounds whose request found the ACK of the round before still waiting, read it, and
    // got the server the one core it took: one grant, for the request.
    const BROUGHT_IN: u64 = 100;
    // Nearly every round is one; a loaded machine spoils a few (an ACK that came before the
    // server had parked, a core taken mid-round).
    const MAX_ROUNDS: u64 = 2 * BROUGHT_IN;
    let _serial = serial();
    // The longest ACK wait, so that it does not run out between a round and the next.
    let daemon = Daemon::start_with(6, &["--ack-wait-us", "1000000"]);
    let server = patient_server(&daemon, "ackserver");
    start_echo(&server, daemon.ip(2));
    let mut trips = RoundTrips::connect(&daemon, (&server, "ackserver", daemon.ip(2)), "ackclient");
    let mut waiting = false;
    let mut brought_in = 0;
    while brought_in < BROUGHT_IN {
        assert!(
            trips.rounds < MAX_ROUNDS,
            "in only {brought_in} of {} rounds did the request bring in a waiting ACK with \
             one grant",
            trips.rounds
        );
        // Settled once the client's ACK was read, or left waiting on the server's ring.
        let r = trips.round(|unread, delta| unread == 0 || delta["acks_left_waiting"] > 0);
        let n = trips.rounds;
        // Whatever ACK the round before left waiting was read: at most this round's is not.
        assert!(r.unread <= 1, "round {n}: {} segments unread", r.unread);
        let was_waiting = std::mem::replace(&mut waiting, r.unread == 1);
        if r.delta["preemptions_suffered"] > 0 {
            // Its core was taken mid-round (on a loaded machine): it got one back for the work
            // or the live timer it still had.
            continue;
        }
        // It parked only on its own, having replied, and its retransmission timer cannot come
        // due.
        assert_eq!(r.delta["timer_wakeups"], 0, "round {n}: {:?}", r.delta);
        if was_waiting && r.delta["grants"] == 1 {
            brought_in += 1;
        }
    }
    let tcp = server.net_stats().unwrap().tcp.counters;
    assert_eq!(tcp.conns.rto_retransmits, 0, "{tcp:?}");
}
