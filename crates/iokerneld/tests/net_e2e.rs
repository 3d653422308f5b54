//! Corral runtimes with their network stack under a real iokerneld and a TAP device, talking to
//! real Linux programs: `ping`, Linux UDP sockets, and the kernel's ARP.
//!
//! Each test starts its own iokerneld (CPU 0, managing CPU 1) with its own socket, TAP device
//! and subnet, and the tests run one at a time. Nothing here asserts timing; every wait is
//! bounded only so that a broken build fails instead of hanging.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket as LinuxUdp};
use std::ops::{Deref, DerefMut};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Launch, serial, wait_until};
use corral::net::{NetConfig, UdpSocket, UdpSpawner};
use corral::{Config, IokernelSettings, Runtime};

const ECHO_PORT: u16 = 7;

/// An iokerneld with a TAP device `tap` whose host side is `subnet.1/24`.
struct Daemon {
    iokerneld: common::Daemon,
    subnet: [u8; 3],
    tap: String,
}

impl Deref for Daemon {
    type Target = common::Daemon;

    fn deref(&self) -> &common::Daemon {
        &self.iokerneld
    }
}

impl DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut common::Daemon {
        &mut self.iokerneld
    }
}

impl Daemon {
    fn start(test: u8) -> Daemon {
        let pid = std::process::id();
        let tap = format!("cre{}t{test}", pid % 100_000);
        let subnet = [10, 120 + (pid % 20) as u8, test];
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
            extra: &[],
            log: false,
        });
        Daemon {
            iokerneld,
            subnet,
            tap,
        }
    }

    fn host(&self) -> Ipv4Addr {
        self.ip(1)
    }

    fn ip(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], last)
    }

    fn runtime(&self, name: &str, last: u8) -> Runtime {
        Runtime::new(
            Config::default()
                .kthreads(1)
                .iokernel(IokernelSettings::new(&self.socket, name))
                .net(NetConfig::new(self.ip(last), 24)),
        )
        .expect("start a networked runtime under iokerneld")
    }
}

/// Starts a UDP echo server on `rt`: one uthread per datagram.
fn start_echo(rt: &Runtime, ip: Ipv4Addr) -> UdpSpawner {
    rt.block_on(move || {
        UdpSpawner::bind(SocketAddrV4::new(ip, ECHO_PORT), |payload, _src, reply| {
            reply.send(&payload).expect("echo");
        })
        .expect("bind the echo server")
    })
}

/// The payload of datagram `seq`: its number, then bytes derived from it.
fn payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = seq.to_le_bytes().to_vec();
    p.extend((0..len.saturating_sub(8)).map(|i| (seq as usize * 31 + i * 7) as u8));
    p
}

#[test]
fn ping_from_linux_gets_every_echo_back() {
    let _serial = serial();
    let mut daemon = Daemon::start(1);
    let rt = daemon.runtime("pinged", 2);
    let target = daemon.ip(2).to_string();
    let out = Command::new("ping")
        .args([
            "-n", "-q", "-c", "1000", "-i", "0.002", "-W", "2", "-s", "56",
        ])
        .arg(&target)
        .stdin(Stdio::null())
        .output()
        .expect("run ping (iputils-ping)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1000 packets transmitted, 1000 received"),
        "ping lost echoes:\n{text}"
    );
    let stats = rt.net_stats().expect("net stats");
    assert!(stats.icmp_echo_replies_sent >= 1000, "{stats:?}");
    daemon.assert_alive();
}

/// Each ping finds the runtime parked, and Linux's ARP entry gone: the ARP request wakes the
/// runtime, and the echo request that follows at once often reaches it only as it parks, when
/// its kthread answers it from its drain of the ring while it waits for a grant. That answer
/// must leave within an allocation pass, not wait for the next frame to wake the runtime
/// (`ping -W 5` would see it then only because nothing else comes).
#[test]
fn an_echo_answered_while_parked_leaves_without_waiting_for_the_next_frame() {
    let _serial = serial();
    let mut daemon = Daemon::start(7);
    let _rt = daemon.runtime("parked", 2);
    let target = daemon.ip(2).to_string();
    for round in 0..10 {
        daemon.wait_for("the runtime to park", |s| {
            s["runtimes"][0]["active_kthreads"]
                .as_array()
                .is_some_and(Vec::is_empty)
        });
        let _ = Command::new("ip")
            .args(["neigh", "flush", "dev", &daemon.tap])
            .status();
        let out = Command::new("ping")
            .args(["-n", "-c", "1", "-W", "5"])
            .arg(&target)
            .stdin(Stdio::null())
            .output()
            .expect("run ping (iputils-ping)");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("1 received"),
            "round {round}: the echo never came back:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.assert_alive();
}

#[test]
fn a_million_datagrams_from_a_linux_client_come_back_intact() {
    const DATAGRAMS: u64 = 1_000_000;
    const WINDOW: u64 = 32;
    // A datagram missing this long is lost, not late: a loaded machine deschedules iokerneld's
    // busy loop for hundreds of milliseconds at a time (its `loop_stall_max_ns` shows it).
    const LOST_AFTER: Duration = Duration::from_secs(5);
    let _serial = serial();
    let mut daemon = Daemon::start(2);
    let server_ip = daemon.ip(2);
    let rt = daemon.runtime("echo", 2);
    let _echo = start_echo(&rt, server_ip);

    let client = LinuxUdp::bind((daemon.host(), 0)).unwrap();
    client.set_read_timeout(Some(LOST_AFTER)).unwrap();
    let server = SocketAddrV4::new(server_ip, ECHO_PORT);
    // At a moderate rate (a window of outstanding datagrams), every one comes back intact.
    let mut next = 0u64;
    let mut received = 0u64;
    let mut seen = vec![false; DATAGRAMS as usize];
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    while received < DATAGRAMS {
        while next < DATAGRAMS && next - received < WINDOW {
            client.send_to(&payload(next, 64), server).unwrap();
            next += 1;
        }
        match client.recv_from(&mut buf) {
            Ok((n, from)) => {
                assert_eq!(from, server.into());
                let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
                assert!(seq < DATAGRAMS, "unknown datagram {seq}");
                assert_eq!(&buf[..n], &payload(seq, 64)[..], "datagram {seq} corrupted");
                assert!(!seen[seq as usize], "datagram {seq} came back twice");
                seen[seq as usize] = true;
                received += 1;
            }
            Err(e) => panic!(
                "after {received} of {DATAGRAMS} echoes, none for {LOST_AFTER:?} ({e}); \
                 runtime: {:?}; kthreads: {:?}; iokerneld: {:#}",
                rt.net_stats(),
                rt.iokernel_kthread_stats(),
                daemon.stats()
            ),
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "only {received} echoes in 240 s"
        );
    }
    daemon.assert_alive();
}

#[test]
fn overload_drops_are_counted_not_silent() {
    const BLAST: u64 = 200_000;
    let _serial = serial();
    let mut daemon = Daemon::start(3);
    let server_ip = daemon.ip(2);
    let rt = daemon.runtime("overloaded", 2);
    // A slow server: each datagram costs 50 us of work, far more than the offered rate allows.
    let server = rt.block_on(move || {
        UdpSpawner::bind(
            SocketAddrV4::new(server_ip, ECHO_PORT),
            |payload, _src, reply| {
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(50) {
                    std::hint::spin_loop();
                }
                let _ = reply.send(&payload);
            },
        )
        .unwrap()
    });
    let client = LinuxUdp::bind((daemon.host(), 0)).unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let to = SocketAddrV4::new(server_ip, ECHO_PORT);
    let receiver = client.try_clone().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let counter = got.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while receiver.recv_from(&mut buf).is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    for seq in 0..BLAST {
        // Linux may refuse when its own queue is full; that is a drop on the Linux side.
        let _ = client.send_to(&payload(seq, 64), to);
    }
    reader.join().unwrap();
    drop(server);
    let echoed = got.load(Ordering::Relaxed);
    assert!(echoed < BLAST, "no overload: every datagram came back");
    // Every datagram that did not come back was dropped somewhere, and each layer counts its
    // drops: the TAP device (Linux), iokerneld, the runtime's stack and its socket queues.
    let tap_dropped: u64 = ["tx_dropped", "rx_dropped"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(format!("/sys/class/net/{}/statistics/{f}", daemon.tap))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum();
    let stats = daemon.stats();
    let runtime = stats["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "overloaded")
        .cloned()
        .unwrap();
    let iokerneld_dropped: u64 = runtime["packets"]["drops"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    let stack_dropped = rt.net_stats().unwrap().total_drops();
    let counted = tap_dropped + iokerneld_dropped + stack_dropped;
    assert!(
        counted > 0,
        "{} of {BLAST} datagrams lost and no layer counted a drop",
        BLAST - echoed
    );
    daemon.assert_alive();
}

#[test]
fn a_corral_client_talks_to_a_linux_server_and_arp_resolves_both_ways() {
    let _serial = serial();
    let mut daemon = Daemon::start(4);
    let host = daemon.host();
    let linux = LinuxUdp::bind((host, 0)).unwrap();
    linux
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let server = match linux.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        for _ in 0..100 {
            let (n, from) = linux
                .recv_from(&mut buf)
                .expect("a datagram from the runtime");
            linux.send_to(&buf[..n], from).unwrap();
        }
    });
    let client_ip = daemon.ip(3);
    let rt = daemon.runtime("client", 3);
    rt.block_on(move || {
        let socket = UdpSocket::bind(SocketAddrV4::new(client_ip, 0)).unwrap();
        socket.connect(server).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 2048];
        for seq in 0..100u64 {
            let p = payload(seq, 200);
            socket.send(&p).unwrap();
            let n = socket.recv(&mut buf).expect("the Linux server's echo");
            assert_eq!(&buf[..n], &p[..]);
        }
    });
    echo.join().unwrap();
    // The runtime resolved the host with ARP; the host resolved the runtime the same way.
    let arp = rt.net_stats().unwrap().arp;
    assert!(arp.requests_sent >= 1, "{arp:?}");
    let neigh = Command::new("ip")
        .args(["neigh", "show", "dev", &daemon.tap])
        .output()
        .unwrap();
    let neigh = String::from_utf8_lossy(&neigh.stdout);
    assert!(
        neigh.contains(&client_ip.to_string()),
        "Linux has no ARP entry for the runtime:\n{neigh}"
    );
    daemon.assert_alive();
}

#[test]
fn two_runtimes_exchange_datagrams_through_local_switching() {
    let _serial = serial();
    let mut daemon = Daemon::start(5);
    let (a_ip, b_ip) = (daemon.ip(10), daemon.ip(11));
    let b = daemon.runtime("b", 11);
    let _echo = start_echo(&b, b_ip);
    let a = daemon.runtime("a", 10);
    let tap_rx_before = std::fs::read_to_string(format!(
        "/sys/class/net/{}/statistics/rx_packets",
        daemon.tap
    ))
    .unwrap();
    a.block_on(move || {
        let socket = UdpSocket::bind(SocketAddrV4::new(a_ip, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let to = SocketAddrV4::new(b_ip, ECHO_PORT);
        let mut buf = [0u8; 2048];
        for seq in 0..1000u64 {
            let p = payload(seq, 100);
            socket.send_to(&p, to).unwrap();
            let (n, from) = socket.recv_from(&mut buf).expect("b's echo");
            assert_eq!(from, to);
            assert_eq!(&buf[..n], &p[..]);
        }
    });
    let stats = daemon.stats();
    let switched = stats["net"]["local_switched"].as_u64().unwrap();
    assert!(switched >= 2000, "only {switched} frames switched locally");
    // None of it went through the TAP device to Linux (what Linux received from it is
    // unchanged, apart from nothing).
    let tap_rx_after = std::fs::read_to_string(format!(
        "/sys/class/net/{}/statistics/rx_packets",
        daemon.tap
    ))
    .unwrap();
    assert_eq!(tap_rx_before, tap_rx_after, "frames leaked to the NIC");
    daemon.assert_alive();
}

/// A runtime flooding another through the local switch, both on the one managed core: the core
/// changes hands thousands of times, and the sender never stalls waiting for completions that
/// reached it after it parked.
#[test]
fn a_flooding_sender_never_stalls_on_a_shared_core() {
    const DATAGRAMS: u64 = 200_000;
    let _serial = serial();
    let mut daemon = Daemon::start(6);
    let (a_ip, b_ip) = (daemon.ip(20), daemon.ip(21));
    let b = daemon.runtime("sink", 21);
    let received = Arc::new(AtomicU64::new(0));
    let counter = received.clone();
    b.spawn(move || {
        let socket = UdpSocket::bind(SocketAddrV4::new(b_ip, 9)).unwrap();
        let mut buf = [0u8; 2048];
        while socket.recv_from(&mut buf).is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    let a = daemon.runtime("source", 20);
    let sender = a.spawn(move || {
        let socket = UdpSocket::bind(SocketAddrV4::new(a_ip, 0)).unwrap();
        let to = SocketAddrV4::new(b_ip, 9);
        for seq in 0..DATAGRAMS {
            socket.send_to(&payload(seq, 64), to).unwrap();
        }
    });
    wait_until("the sender to finish", Duration::from_secs(60), || {
        sender.is_finished()
    });
    sender.join().unwrap();
    wait_until("the sink to receive", Duration::from_secs(10), || {
        received.load(Ordering::Relaxed) > 0
    });
    let stats = daemon.stats();
    let source = stats["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "source")
        .cloned()
        .unwrap();
    assert!(
        source["grants"].as_u64().unwrap() > 1,
        "the core never changed hands: {source:#}"
    );
    daemon.assert_alive();
}
