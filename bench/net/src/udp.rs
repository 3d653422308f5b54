//! UDP: echo round trips (Corral through the TAP device or XDP against Linux over veth) and
//! one-way datagram rates (through the TAP device or XDP, between two runtimes through
//! iokerneld's local switch, and into a bare AF_XDP socket as the XDP path's floor).

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use corral::Runtime;
use corral::net::UdpSocket as CorralUdp;
use hdrhistogram::Histogram;

use corral_wire::MacAddr;
use corral_wire::frame::Ipv4FrameSpec;
use corral_xdp::testnet::UdpFlood;

use crate::setup::{Daemon, Namespace, VETH_HOST, VETH_PEER, Wire, XDP_RUNTIME, pin};
use crate::{Args, Tails};

/// Closed-loop round trips from a socket bound to `local` to `server`.
fn client(local: Ipv4Addr, server: SocketAddrV4, args: &Args) -> Tails {
    crate::setup::as_remote_client(args.iokernel_cpu, || {
        let socket = UdpSocket::bind((local, 0)).expect("bind the client");
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
        let mut buf = vec![0u8; 2048];
        let mut request = vec![0u8; args.payload.max(8)];
        let warmup = args.samples / 10;
        for seq in 0..warmup + args.samples {
            request[..8].copy_from_slice(&seq.to_le_bytes());
            if args.parked_gap_us > 0 {
                std::thread::sleep(Duration::from_micros(args.parked_gap_us));
            }
            let start = Instant::now();
            socket.send_to(&request, server).unwrap();
            loop {
                let (n, _) = socket.recv_from(&mut buf).expect("an echo within 2 s");
                if n >= 8 && buf[..8] == request[..8] {
                    break;
                }
            }
            if seq >= warmup {
                hist.record(start.elapsed().as_nanos() as u64).unwrap();
            }
        }
        crate::tails(&hist)
    })
}

/// Round trips to a Corral echo server behind `wire`.
pub fn corral_echo(args: &Args, binary: &Path, wire: &Wire) -> Vec<Tails> {
    let daemon = Daemon::start(args, binary, wire.nic_args, "echo");
    let rt = daemon.runtime("echo-bench", wire.runtime, 1, args.parked_gap_us == 0);
    let server = SocketAddrV4::new(wire.runtime, 7);
    let _server = rt.spawn(move || {
        let socket = CorralUdp::bind(server).expect("bind the echo port");
        let mut buf = vec![0u8; 2048];
        loop {
            let (n, from) = socket.recv_from(&mut buf).expect("receive");
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    (0..args.reps)
        .map(|_| wire.client(|| client(wire.client, server, args)))
        .collect()
}

/// Round trips to a Linux echo server in a namespace behind a veth pair.
pub fn linux_echo(args: &Args) -> Vec<Tails> {
    let ns = Namespace::create();
    let _server = ns.spawn(args.server_cpu, || {
        let socket = UdpSocket::bind((VETH_PEER, 7)).expect("bind in the namespace");
        let mut buf = vec![0u8; 2048];
        loop {
            let (n, from) = socket.recv_from(&mut buf).unwrap();
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let server = SocketAddrV4::new(VETH_PEER, 7);
    (0..args.reps)
        .map(|_| client(VETH_HOST, server, args))
        .collect()
}

/// Starts a uthread counting the datagrams that reach `addr` on `rt`.
fn start_sink(rt: &Runtime, addr: SocketAddrV4) -> Arc<AtomicU64> {
    let count = Arc::new(AtomicU64::new(0));
    let counter = count.clone();
    rt.spawn(move || {
        let socket = CorralUdp::bind(addr).expect("bind the sink");
        let mut buf = vec![0u8; 2048];
        while socket.recv_from(&mut buf).is_ok() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });
    count
}

/// Raw frames of `len` bytes (UDP to port 9, 16 flows) per second a Linux sender gets through
/// `wire` to a Corral receiver spinning on the managed core: flat out (sharing iokerneld's
/// CPU under the fair scheduler), and paced at each rate of a ladder (the sender at the remote
/// client's priority, sleeping between batches); (flat-out received/s, sent/s, best paced
/// received/s, its offered rate), and iokerneld's NIC system calls per received frame.
pub fn wire_raw_rates(
    args: &Args,
    binary: &Path,
    wire: &Wire,
    len: usize,
    seconds: f64,
) -> ([f64; 4], Cost) {
    let daemon = Daemon::start(args, binary, wire.nic_args, "rate");
    let rt = daemon.runtime("rate-sink", wire.runtime, 1, true);
    let count = start_sink(&rt, SocketAddrV4::new(wire.runtime, 9));
    let (frames_before, syscalls_before) = daemon.nic_rx_frames_and_syscalls();
    let system_before = daemon.system_seconds();
    let rates = raw_rates(args, wire, wire.runtime, len, &count, seconds);
    let (frames, syscalls) = daemon.nic_rx_frames_and_syscalls();
    let frames = (frames - frames_before).max(1) as f64;
    let per_frame = Cost {
        syscalls: (syscalls - syscalls_before) as f64 / frames,
        system_us: Some((daemon.system_seconds() - system_before) / frames * 1e6),
    };
    (rates, per_frame)
}

/// Raw floods of `len`-byte frames from `wire`'s client to `to`'s port 9, whose receiver
/// counts into `count`: flat out for `seconds`, then the ladder of paced rates, a quarter of
/// `seconds` each. Returns flat-out received/s and sent/s, and the best paced received/s with
/// its offered rate.
fn raw_rates(
    args: &Args,
    wire: &Wire,
    to: Ipv4Addr,
    len: usize,
    count: &AtomicU64,
    seconds: f64,
) -> [f64; 4] {
    let spec = Ipv4FrameSpec {
        src_mac: MacAddr([0x02, 0, 0, 0, 0, 0x02]),
        dst_mac: corral::net::NetConfig::new(to, 24).effective_mac(),
        src_ip: wire.client,
        dst_ip: to,
        ttl: 64,
        ident: 0,
        tos: 0,
    };
    let link = wire.sender_link;
    let flat = wire.client(|| raw_flood(args, link, &spec, len, count, seconds, None));
    let paced = climb_ladder(|rate| {
        wire.client(|| raw_flood(args, link, &spec, len, count, seconds / 4.0, Some(rate)))
    });
    [flat.0, flat.1, paced.0, paced.1]
}

/// What a receiver spent per frame received.
pub struct Cost {
    /// NIC system calls.
    pub syscalls: f64,
    /// iokerneld's CPU time in the kernel, microseconds (which includes softirq work that
    /// happened to run while it was on its CPU).
    pub system_us: Option<f64>,
}

/// Sends `len`-byte raw frames as `spec` says on `link` (in the calling thread's namespace)
/// for `seconds`: flat out, or paced at `rate` frames a second; the receiver counts into
/// `count`. Returns the rates received and sent.
fn raw_flood(
    args: &Args,
    link: &str,
    spec: &Ipv4FrameSpec,
    len: usize,
    count: &AtomicU64,
    seconds: f64,
    rate: Option<f64>,
) -> (f64, f64) {
    let mut flood = UdpFlood::new(link, spec, len, 20_000, 16, 9)
        .unwrap_or_else(|e| panic!("a raw sender on {link}: {e}"));
    // What was in flight from the last run lands before counting starts.
    std::thread::sleep(Duration::from_millis(100));
    let before = count.load(Ordering::Relaxed);
    let batch = UdpFlood::BATCH as u64;
    let mut send = move || {
        let start = Instant::now();
        let (mut sent, mut batches) = (0u64, 0u64);
        while start.elapsed().as_secs_f64() < seconds {
            if let Some(rate) = rate {
                let due = Duration::from_secs_f64((batches * batch) as f64 / rate);
                let wait = due.saturating_sub(start.elapsed());
                std::thread::sleep(wait.max(Duration::from_micros(1)));
            }
            sent += flood.send_batch() as u64;
            batches += 1;
        }
        (sent, start.elapsed().as_secs_f64())
    };
    let cpu = args.rate_sender_cpu.unwrap_or(args.iokernel_cpu);
    let (sent, elapsed) = if rate.is_some() {
        crate::setup::as_remote_client(cpu, send)
    } else {
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    pin(cpu);
                    send()
                })
                .join()
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let received = count.load(Ordering::Relaxed) - before;
    (received as f64 / elapsed, sent as f64 / elapsed)
}

/// A ceiling's ladder climbs in steps of 25,000 datagrams per second up to 600,000; past that,
/// in steps of 100,000 for as long as the path still delivers nearly all it is offered, so that
/// the ladder's top never stands in for the path's ceiling.
const LADDER_STEP: f64 = 25_000.0;
const LADDER_FULL_TOP: f64 = 600_000.0;
const LADDER_EXTENDED_STEP: f64 = 100_000.0;
const LADDER_LIMIT: f64 = 5_000_000.0;
/// Delivered over offered above which the path is taken to be below its ceiling still.
const UNSATURATED: f64 = 0.95;

/// Runs `flood` (which returns datagrams received and offered per second) at each rate of the
/// ladder; returns the best.
fn climb_ladder(mut flood: impl FnMut(f64) -> (f64, f64)) -> (f64, f64) {
    let mut best = (0.0, 0.0);
    let mut rate = LADDER_STEP;
    loop {
        let got = flood(rate);
        if got.0 > best.0 {
            best = got;
        }
        let unsaturated = got.0 >= UNSATURATED * got.1;
        rate += if rate < LADDER_FULL_TOP {
            LADDER_STEP
        } else if unsaturated {
            LADDER_EXTENDED_STEP
        } else {
            break;
        };
        if rate > LADDER_LIMIT {
            break;
        }
    }
    best
}

/// The most datagrams of `payload` bytes per second `wire` delivers to a Corral receiver at
/// any offered rate. A sender flat out on iokerneld's CPU takes that CPU from iokerneld
/// (there is no third one), so the most is found by pacing: the sender sleeps between bursts
/// and offers each rate of a ladder in turn. Each burst is one segmented send, so that the
/// sender's cost per frame is close to a TCP sender's. Returns the best received rate and the
/// offered rate that gave it.
pub fn wire_ceiling(
    args: &Args,
    binary: &Path,
    wire: &Wire,
    payload: usize,
    seconds: f64,
) -> (f64, f64) {
    let daemon = Daemon::start(args, binary, wire.nic_args, "ceiling");
    let rt = daemon.runtime("ceiling-sink", wire.runtime, 1, true);
    let to = SocketAddrV4::new(wire.runtime, 9);
    let count = start_sink(&rt, to);
    let mut best_received = 0.0;
    let mut best_system = 0.0;
    let best = climb_ladder(|rate| {
        let system = daemon.system_seconds();
        let got = wire.client(|| {
            flood(
                args,
                wire.client,
                to,
                &count,
                payload,
                seconds,
                Some(rate),
                true,
            )
        });
        if got.0 > best_received {
            best_received = got.0;
            best_system = (daemon.system_seconds() - system) / (got.0 * seconds) * 1e6;
        }
        got
    });
    eprintln!(
        "{} ceiling: {:.0} frames/s received of {:.0} offered; iokerneld's system time {:.2} us \
         per frame",
        wire.name, best.0, best.1, best_system
    );
    best
}

/// The XDP path's floor: the same raw floods from the same namespace (flat out, and the
/// ladder of paced rates), into a bare AF_XDP socket on the same interface, in the same mode,
/// polled by a thread on iokerneld's CPU that counts each frame and gives it back: what
/// AF_XDP itself delivers here, with no switch, no runtime and no copy behind it. Returns as
/// [`wire_raw_rates`] does, with the socket's system calls per frame.
pub fn xdp_floor(args: &Args, len: usize, seconds: f64) -> ([f64; 4], Cost) {
    let wire = Wire::xdp();
    let mut port = corral_xdp::Port::open("crlxdp0", &corral_xdp::PortConfig::default())
        .unwrap_or_else(|e| panic!("the AF_XDP floor: {e}"));
    port.register(XDP_RUNTIME)
        .expect("register the receiver's address");
    let count = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (c, s, cpu) = (count.clone(), stop.clone(), args.iokernel_cpu);
    let receiver = std::thread::spawn(move || {
        pin(cpu);
        while !s.load(Ordering::Relaxed) {
            for socket in port.sockets_mut() {
                let n = socket.recv_burst(32, |_| corral_xdp::Verdict::Release);
                c.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        port.counters()
    });
    let rates = raw_rates(args, &wire, XDP_RUNTIME, len, &count, seconds);
    stop.store(true, Ordering::Relaxed);
    let counters = receiver.join().expect("the floor's receiver");
    let per_frame = Cost {
        syscalls: counters.syscalls() as f64 / counters.rx_frames.max(1) as f64,
        system_us: None,
    };
    (rates, per_frame)
}

/// Floods `to`, whose receiver counts into `count`, from `from` for `seconds`: flat out, or
/// paced at `rate` datagrams per second (bursts of 16 with sleeps between them); `segmented`:
/// each burst one send, segmented by the kernel.
#[allow(clippy::too_many_arguments, reason = "one flood's whole description")]
fn flood(
    args: &Args,
    from: Ipv4Addr,
    to: SocketAddrV4,
    count: &AtomicU64,
    payload: usize,
    seconds: f64,
    rate: Option<f64>,
    segmented: bool,
) -> (f64, f64) {
    const BURST: u64 = 16;
    // Let ARP settle before timing.
    let sender = UdpSocket::bind((from, 0)).unwrap();
    if segmented {
        // UDP generic segmentation: one send of a burst, cut into `payload`-byte datagrams
        // below the socket layer, as TCP's segmentation offload cuts a large write.
        let size = payload as libc::c_int;
        // SAFETY: a valid socket, option and option length.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sender),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
    }
    sender.send_to(&[0u8; 64], to).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let before = count.load(Ordering::Relaxed);
    let cpu = args.iokernel_cpu;
    let send = || {
        let burst = vec![0u8; payload * BURST as usize];
        let payload = &burst[..payload];
        let start = Instant::now();
        let mut sent = 0u64;
        let mut bursts = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            if let Some(rate) = rate {
                // Behind schedule it still sleeps a moment, so that iokerneld keeps its CPU.
                let due = Duration::from_secs_f64((bursts * BURST) as f64 / rate);
                let wait = due.saturating_sub(start.elapsed());
                std::thread::sleep(wait.max(Duration::from_micros(1)));
            }
            if segmented {
                if sender.send_to(&burst, to).is_ok() {
                    sent += BURST;
                }
            } else {
                for _ in 0..BURST {
                    if sender.send_to(payload, to).is_ok() {
                        sent += 1;
                    }
                }
            }
            bursts += 1;
        }
        (sent, start.elapsed().as_secs_f64())
    };
    // Paced, the sender sleeps between bursts and may run as the remote client does; flat
    // out, it would starve iokerneld at a real-time priority.
    let (sent, elapsed) = if rate.is_some() {
        crate::setup::as_remote_client(cpu, send)
    } else {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    pin(cpu);
                    send()
                })
                .join()
                .unwrap()
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let received = count.load(Ordering::Relaxed) - before;
    (received as f64 / elapsed, sent as f64 / elapsed)
}

/// Two runtimes under one iokerneld with no NIC (`--nic none`), sharing the one managed core:
/// a sink counting what reaches its port 9, and a source that has resolved the sink's MAC.
struct LocalPair {
    source: Runtime,
    _sink: Runtime,
    source_ip: Ipv4Addr,
    to: SocketAddrV4,
    count: Arc<AtomicU64>,
    /// Dropped last (fields drop in order): a runtime whose iokerneld goes first exits.
    _daemon: Daemon,
}

impl LocalPair {
    fn start(args: &Args, binary: &Path) -> LocalPair {
        let daemon = Daemon::start(args, binary, &["--nic", "none"], "local");
        let (a_ip, b_ip) = (Ipv4Addr::new(10, 95, 0, 2), Ipv4Addr::new(10, 95, 0, 3));
        let sink = daemon.runtime("local-sink", b_ip, 1, false);
        let to = SocketAddrV4::new(b_ip, 9);
        let count = start_sink(&sink, to);
        let source = daemon.runtime("local-source", a_ip, 1, false);
        // One datagram first, so that ARP is resolved before timing.
        source.block_on(move || {
            let s = CorralUdp::bind(SocketAddrV4::new(a_ip, 0)).unwrap();
            s.send_to(&[0u8; 64], to).unwrap();
        });
        std::thread::sleep(Duration::from_millis(100));
        LocalPair {
            source,
            _sink: sink,
            source_ip: a_ip,
            to,
            count,
            _daemon: daemon,
        }
    }

    /// Sends datagrams of `payload` bytes for `seconds`: flat out, or paced at `rate` a second
    /// (bursts of 16 with sleeps between them, the source's kthread parking meanwhile).
    /// Returns the rates received and sent.
    fn flood(&self, payload: usize, seconds: f64, rate: Option<f64>) -> (f64, f64) {
        const BURST: u64 = 16;
        let (source_ip, to) = (self.source_ip, self.to);
        let before = self.count.load(Ordering::Relaxed);
        let (sent, elapsed) = self.source.block_on(move || {
            let s = CorralUdp::bind(SocketAddrV4::new(source_ip, 0)).unwrap();
            let buf = vec![0u8; payload];
            let start = Instant::now();
            let (mut sent, mut bursts) = (0u64, 0u64);
            while start.elapsed().as_secs_f64() < seconds {
                if let Some(rate) = rate {
                    let due = Duration::from_secs_f64((bursts * BURST) as f64 / rate);
                    if let Some(wait) = due.checked_sub(start.elapsed()) {
                        corral::sleep(wait);
                    }
                }
                for _ in 0..BURST {
                    if s.send_to(&buf, to).is_ok() {
                        sent += 1;
                    }
                }
                bursts += 1;
            }
            (sent, start.elapsed().as_secs_f64())
        });
        std::thread::sleep(Duration::from_millis(50));
        let received = self.count.load(Ordering::Relaxed) - before;
        (received as f64 / elapsed, sent as f64 / elapsed)
    }
}

/// Datagrams of `payload` bytes per second one Corral runtime gets to another through
/// iokerneld's local switch, both sharing the one managed core, and the rate the sender
/// managed: flat out.
pub fn local_rate(args: &Args, binary: &Path, payload: usize, seconds: f64) -> (f64, f64) {
    LocalPair::start(args, binary).flood(payload, seconds, None)
}

/// The most datagrams of `payload` bytes per second one Corral runtime gets to another through
/// iokerneld's local switch at any offered rate, the two sharing the one managed core. Flat
/// out (`local_rate`), the sender keeps the core until iokerneld takes it, while the frames
/// it sent overflow the receiver's ring; paced, it sleeps between bursts (its kthread parks
/// and the receiver gets the core). Each rate of a ladder runs `seconds`; returns the best
/// received rate and the offered rate that gave it.
pub fn local_ceiling(args: &Args, binary: &Path, payload: usize, seconds: f64) -> (f64, f64) {
    let pair = LocalPair::start(args, binary);
    let best = climb_ladder(|rate| pair.flood(payload, seconds, Some(rate)));
    eprintln!(
        "local ceiling: {:.0} frames/s received of {:.0} offered",
        best.0, best.1
    );
    best
}
