//! Network work and timers keep going while every uthread of a runtime spins without yielding:
//! iokerneld kicks a kthread that holds a core and leaves packets unread, or a timer overdue,
//! for a whole period (`crates/iokernel/src/daemon/kick.rs`), and the runtime's handler runs
//! that work and the uthreads it wakes before the interrupted one.
//!
//! Each test starts its own iokerneld (CPU 0, managing CPU 1) with its own socket, TAP device
//! and subnet, one at a time. Nothing here asserts timing; every wait is bounded only so that
//! a broken build fails instead of hanging.

mod common;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket as LinuxUdp};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Launch, serial, wait_until};
use corral::net::{NetConfig, UdpSpawner};
use corral::{Config, IokernelSettings, Runtime};

const ECHO_PORT: u16 = 7;
const KTHREADS: usize = 2;

/// An iokerneld with a TAP device whose host side is `subnet.1/24`.
struct Daemon {
    iokerneld: common::Daemon,
    subnet: [u8; 3],
}

impl Daemon {
    fn start(test: u8) -> Daemon {
        let pid = std::process::id();
        let tap = format!("crs{}t{test}", pid % 100_000);
        let subnet = [10, 200 + (pid % 20) as u8, test];
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
        Daemon { iokerneld, subnet }
    }

    fn ip(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], last)
    }

    fn runtime(&self, name: &str, last: u8) -> Runtime {
        Runtime::new(
            Config::default()
                .kthreads(KTHREADS)
                .iokernel(IokernelSettings::new(&self.iokerneld.socket, name))
                .net(NetConfig::new(self.ip(last), 24)),
        )
        .expect("start a networked runtime under iokerneld")
    }
}

/// Uthreads that spin without ever yielding until `stop` is set: one more than the runtime has
/// kthreads, so that every kthread holding a core runs one and one more waits in a run queue.
struct Spinners {
    stop: Arc<AtomicBool>,
    handles: Vec<corral::JoinHandle<u64>>,
}

impl Spinners {
    fn start(rt: &Runtime) -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicU64::new(0));
        let handles = (0..=KTHREADS)
            .map(|_| {
                let stop = stop.clone();
                let started = started.clone();
                rt.spawn(move || {
                    started.fetch_add(1, Ordering::SeqCst);
                    let mut spins = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        spins = spins.wrapping_add(1);
                        std::hint::spin_loop();
                    }
                    spins
                })
            })
            .collect();
        wait_until("a spinner to start", Duration::from_secs(10), || {
            started.load(Ordering::SeqCst) > 0
        });
        Spinners { stop, handles }
    }

    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for h in self.handles.drain(..) {
            h.join().expect("a spinner panicked");
        }
    }
}

impl Drop for Spinners {
    /// A failed assertion must not leave the runtime's drop waiting for uthreads that spin.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn reported(stats: &serde_json::Value, runtime: &str, name: &str) -> u64 {
    stats["runtimes"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == runtime))
        .and_then(|r| r["reported"][name].as_u64())
        .unwrap_or(0)
}

fn runtime_counter(stats: &serde_json::Value, runtime: &str, name: &str) -> u64 {
    stats["runtimes"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == runtime))
        .and_then(|r| r[name].as_u64())
        .unwrap_or(0)
}

/// Every kick iokerneld sent the runtime's kthreads, whatever the reason.
fn kicks(stats: &serde_json::Value, runtime: &str) -> u64 {
    ["kicks_ingress", "kicks_timer", "kicks_run_queue"]
        .iter()
        .map(|k| runtime_counter(stats, runtime, k))
        .sum()
}

#[test]
fn udp_echo_and_timers_keep_going_while_every_uthread_spins() {
    const REQUESTS: u64 = 200;
    const SLEEPS: u64 = 5;
    let _serial = serial();
    let mut daemon = Daemon::start(1);
    let server_ip = daemon.ip(2);
    let rt = daemon.runtime("spinning", 2);
    let _echo = rt.block_on(move || {
        UdpSpawner::bind(
            SocketAddrV4::new(server_ip, ECHO_PORT),
            |payload, _src, reply| {
                reply.send(&payload).expect("echo");
            },
        )
        .expect("bind the echo server")
    });
    // A uthread that sleeps again and again: armed before the spinners take over, each of its
    // timers must still fire. Only the sleeps it wakes from once a spinner holds the runtime's
    // one core count: from then on it runs only if iokerneld kicks that spinner's kthread,
    // however slowly the spinners came up.
    let slept = Arc::new(AtomicU64::new(0));
    let armed = Arc::new(AtomicBool::new(false));
    let spinning = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let (slept, armed, spinning) = (slept.clone(), armed.clone(), spinning.clone());
        rt.spawn(move || {
            armed.store(true, Ordering::SeqCst);
            while slept.load(Ordering::SeqCst) < SLEEPS {
                corral::sleep(Duration::from_millis(10));
                if spinning.load(Ordering::SeqCst) {
                    slept.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    wait_until("the sleeper to start", Duration::from_secs(10), || {
        armed.load(Ordering::SeqCst)
    });
    let spinners = Spinners::start(&rt);
    spinning.store(true, Ordering::SeqCst);

    let deadline = Instant::now() + Duration::from_secs(30);
    while slept.load(Ordering::SeqCst) < SLEEPS {
        assert!(
            Instant::now() < deadline,
            "{} of {SLEEPS} sleeps ended while the uthreads spin; kthreads: {:?}; iokerneld: {:#}",
            slept.load(Ordering::SeqCst),
            rt.iokernel_kthread_stats(),
            daemon.iokerneld.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // No packet arrived meanwhile: kicks fired those timers (for the overdue timer, or for
    // the woken sleeper waiting behind a spinner).
    let stats = daemon.iokerneld.stats();
    assert!(kicks(&stats, "spinning") > 0, "{stats:#}");

    let client = LinuxUdp::bind((daemon.ip(1), 0)).unwrap();
    client
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let server = SocketAddrV4::new(server_ip, ECHO_PORT);
    let mut buf = [0u8; 2048];
    let start = Instant::now();
    for seq in 0..REQUESTS {
        let request = seq.to_le_bytes();
        // A datagram may be lost before ARP resolves: send again until the answer comes.
        loop {
            client.send_to(&request, server).unwrap();
            match client.recv_from(&mut buf) {
                Ok((n, from)) if from == server.into() && buf[..n] == request => break,
                Ok(_) => {}
                Err(_) => {}
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "request {seq} unanswered while the uthreads spin; iokerneld: {:#}",
                daemon.iokerneld.stats()
            );
        }
    }
    // The spinners held the cores all along: the work above was done by kicks, which iokerneld
    // counts. The runtime's report in its region counts them too; it is refreshed when a
    // kthread passes through its scheduler, so it is read once the spinners have stopped and
    // the runtime has gone idle (its last kthread to park writes it).
    spinners.stop();
    sleeper.join().expect("the sleeper");
    let stats = daemon.iokerneld.wait_for("the runtime's report", |s| {
        reported(s, "spinning", "net.udp_rx_datagrams") >= REQUESTS
            && reported(s, "spinning", "net.udp_tx_datagrams") >= REQUESTS
    });
    assert!(kicks(&stats, "spinning") > 0, "{stats:#}");
    assert!(reported(&stats, "spinning", "sched.kicks") > 0, "{stats:#}");
    daemon.iokerneld.assert_alive();
}

#[test]
fn a_bulk_transfer_from_linux_completes_while_every_uthread_spins() {
    use std::io::{Read, Write};
    const BYTES: usize = 16 << 20;
    const PORT: u16 = 5001;
    let _serial = serial();
    let mut daemon = Daemon::start(2);
    let server_ip = daemon.ip(2);
    let rt = daemon.runtime("spinning-tcp", 2);
    let pattern = |i: usize| (i.wrapping_mul(131) ^ (i >> 11)) as u8;
    let listener = rt.block_on(move || {
        corral::net::TcpListener::bind(SocketAddrV4::new(server_ip, PORT)).expect("listen")
    });
    // The receiver waits in accept before the spinners take over: the connection, every
    // segment's ACK and every window update come through kicks.
    let receiver = rt.spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 16];
        let (mut at, mut bad) = (0usize, 0usize);
        loop {
            let n = stream.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            bad += buf[..n]
                .iter()
                .enumerate()
                .filter(|&(i, &b)| b != pattern(at + i))
                .count();
            at += n;
        }
        (at, bad)
    });
    std::thread::sleep(Duration::from_millis(50));
    let spinners = Spinners::start(&rt);

    let data: Vec<u8> = (0..BYTES).map(pattern).collect();
    let mut linux = std::net::TcpStream::connect_timeout(
        &SocketAddrV4::new(server_ip, PORT).into(),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|e| {
        panic!(
            "connect from Linux while the uthreads spin: {e}; kthreads: {:?}; iokerneld: {:#}",
            rt.iokernel_kthread_stats(),
            daemon.iokerneld.stats()
        )
    });
    linux
        .set_write_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    linux
        .write_all(&data)
        .expect("send everything while the uthreads spin");
    linux.shutdown(std::net::Shutdown::Write).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !receiver.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the receiver did not see the end of the stream; iokerneld: {:#}",
            daemon.iokerneld.stats()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = daemon.iokerneld.stats();
    assert!(kicks(&stats, "spinning-tcp") > 0, "{stats:#}");
    spinners.stop();
    let (received, bad) = receiver.join().expect("the receiver");
    assert_eq!(received, BYTES, "bytes received");
    assert_eq!(bad, 0, "bytes corrupted");
    // The runtime's TCP counters reach iokerneld's statistics.
    let stats = daemon.iokerneld.wait_for("the runtime's TCP report", |s| {
        reported(s, "spinning-tcp", "tcp.bytes_in") >= BYTES as u64
    });
    assert!(
        reported(&stats, "spinning-tcp", "tcp.passive_opens") >= 1,
        "{stats:#}"
    );
    daemon.iokerneld.assert_alive();
}
