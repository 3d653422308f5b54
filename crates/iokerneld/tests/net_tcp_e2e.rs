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

/// `rounds` request/response exchanges of 64 bytes from a runtime named `client` to the echo
/// server at `server_ip`, each followed by `pause`; returns iokerneld's statistics of the
/// runtime named `server` afterwards.
fn request_response_rounds(
    daemon: &Daemon,
    server: &str,
    server_ip: Ipv4Addr,
    client: &str,
    rounds: u64,
    pause: Duration,
) -> serde_json::Value {
    let client = daemon.runtime(client, 3);
    client.block_on(move || {
        let mut c = TcpStream::connect((server_ip, PORT)).expect("connect runtime to runtime");
        c.set_nodelay(true).unwrap();
        let mut reply = [0u8; 64];
        for round in 0..rounds {
            let request = [round as u8; 64];
            c.write_all(&request).unwrap();
            c.read_exact(&mut reply).unwrap();
            assert_eq!(reply, request);
            corral::sleep(pause);
        }
    });
    let stats: serde_json::Value = daemon.iokerneld.stats();
    stats["runtimes"]
        .as_array()
        .expect("runtimes array")
        .iter()
        .find(|r| r["name"] == server)
        .cloned()
        .unwrap_or_else(|| panic!("{server} not in {stats:#}"))
}

/// A request/response connection leaves timers behind in the server that its replies and the
/// client's ACKs have made pointless (the delayed ACK a reply carried, the retransmission timer
/// the ACK stopped). The server parks between requests; it must not report such a timer to
/// iokerneld and be woken on a core for it after every request.
#[test]
fn a_parked_server_is_not_woken_for_timers_its_replies_made_pointless() {
    const ROUNDS: u64 = 200;
    let _serial = serial();
    let daemon = Daemon::start(5);
    let server_ip = daemon.ip(2);
    let server = daemon.runtime("rrserver", 2);
    start_echo(&server, server_ip);
    // Long enough for the server to park, and for every timer it armed to come due.
    let pause = Duration::from_millis(6);
    let runtime =
        request_response_rounds(&daemon, "rrserver", server_ip, "rrclient", ROUNDS, pause);
    let count = |key: &str| runtime[key].as_u64().unwrap();
    // Each request (and each ACK of a reply) wakes the server; a timer should not.
    assert!(count("grants") >= ROUNDS, "{runtime:#}");
    assert!(count("timer_wakeups") < ROUNDS / 10, "{runtime:#}");
    // The ACKs came 0.5 ms after the replies (the client's delayed ACK) and no request within
    // iokerneld's ACK wait (2 ms): each waited that long, then got the server a core.
    assert!(count("ack_waits_expired") >= ROUNDS / 2, "{runtime:#}");
}

/// The client's ACK of each reply arrives after the server parked; none of the server's
/// connections needs it promptly (one segment in flight, nothing to send), so iokerneld leaves
/// it on the server's ring instead of granting a core for it, and the server reads it with the
/// next request: one grant per request, not two.
#[test]
fn a_parked_server_is_not_woken_for_the_acks_of_its_replies() {
    const ROUNDS: u64 = 200;
    let _serial = serial();
    let daemon = Daemon::start_with(6, &["--ack-wait-us", "3000"]);
    let server_ip = daemon.ip(2);
    let server = daemon.runtime("ackserver", 2);
    start_echo(&server, server_ip);
    // Past the client's delayed ACK (0.5 ms), so that the ACK goes out bare, and within the
    // server's ACK wait (3 ms), so that the next request brings it in.
    let pause = Duration::from_millis(1);
    let runtime =
        request_response_rounds(&daemon, "ackserver", server_ip, "ackclient", ROUNDS, pause);
    let count = |key: &str| runtime[key].as_u64().unwrap();
    assert!(count("acks_left_waiting") >= ROUNDS / 2, "{runtime:#}");
    // The handshake, the requests, and a few ACKs that came before the server parked.
    assert!(count("grants") < ROUNDS * 3 / 2, "{runtime:#}");
    // What the waiting ACKs acknowledged was read in the end: nothing was retransmitted.
    let tcp = server.net_stats().unwrap().tcp.counters;
    assert_eq!(tcp.conns.rto_retransmits, 0, "{tcp:?}");
}
