//! The raw AF_XDP floor that iokerneld's XDP backend will be compared with: how fast frames
//! can come off a NIC queue into user space, and go back out, with nothing but corral-xdp in
//! between.
//!
//! A veth pair stands in for the NIC: its root-namespace end gets corral-xdp's steering
//! program (native mode by default, as iokerneld would use it) with one AF_XDP socket per
//! queue, and one address registered. A sender in the namespace at the other end (standing in
//! for the other hosts) floods 64-byte UDP frames to that address through a raw `AF_PACKET`
//! socket (`sendmmsg`, 64 frames a call, bypassing the queueing discipline), from 16 source
//! ports so that a multi-queue pair spreads them. This program, on another CPU, busy-polls the
//! sockets:
//!
//! * `--drop`: receives each frame and drops it (returns it to the fill ring);
//! * `--reflect`: swaps each frame's MACs, IPv4 addresses and UDP ports and transmits it back
//!   out of the same queue, in place (no copy) or, with `--copy`, copied into a free frame as a
//!   daemon forwarding a runtime's frame would;
//! * `--rtt N`: N closed-loop round trips from a Linux UDP socket in the namespace, reflected
//!   in place: the echo round trip with no daemon between the socket and its answerer (what a
//!   runtime polling its own queue would see).
//!
//! It prints, per run and as medians over the runs: frames sent per second, frames received
//! per second, frames reflected per second (TX completions) and arrived back in the namespace
//! (the peer end's received count), and the system calls the sockets made per received frame.
//! With neither flag, both modes run.
//!
//! Note: on veth the sender's frames and the program's run share the sender's CPU (veth runs
//! its receive side in the sending CPU's softirq), so the floor measured here is the slower of
//! the sender and the receiver; the sent and received rates, and the share of receive calls
//! that found nothing, tell which. Frames the kernel drops at the socket because the fill ring
//! ran dry come when the receiver was off its CPU for longer than the lent frames last (2048
//! frames: about 2.5 ms at 0.8 Mpps); each run prints its longest stall.

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use corral_wire::MacAddr;
use corral_wire::frame::{Ipv4FrameSpec, UDP_PAYLOAD_OFFSET};
use corral_xdp::testnet::{UdpFlood, VethPair};
use corral_xdp::{AttachMode, Counters, Port, PortConfig, SocketConfig, Verdict};

#[derive(Parser, Debug)]
#[command(
    about = "The raw AF_XDP floor: a flood of 64-byte UDP frames over veth, dropped or \
                   reflected by corral-xdp's sockets"
)]
struct Args {
    /// Receive and drop.
    #[arg(long)]
    drop: bool,
    /// Swap MACs, addresses and ports, and transmit back.
    #[arg(long)]
    reflect: bool,
    /// Instead of rates: this many closed-loop UDP round trips from a Linux socket in the
    /// namespace (on the sender's CPU, at `SCHED_FIFO` priority 1) to a receiver that reflects
    /// each frame in place, a socket that a runtime would own under direct polling; prints
    /// p50 / p99 / p99.9.
    #[arg(long, value_name = "N")]
    rtt: Option<u64>,
    /// Reflect by copying each frame into a free UMEM frame instead of in place.
    #[arg(long)]
    copy: bool,
    /// Seconds measured per run.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Seconds of flooding before each run's measurement starts.
    #[arg(long, default_value_t = 0.5)]
    warmup: f64,
    /// Runs per mode; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Queues of the veth pair (one socket each, polled round-robin by one thread).
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// Frames per receive call at most (up to 64).
    #[arg(long, default_value_t = 32)]
    burst: usize,
    /// Bytes per frame on the wire (no FCS on veth): 64 by default, at least 42.
    #[arg(long, default_value_t = 64)]
    frame_len: usize,
    /// Where the program runs.
    #[arg(long, value_enum, default_value_t = Attach::Native)]
    attach: Attach,
    /// Entries of the completion, RX and TX rings, and frames lent for receiving; the fill
    /// ring and the UMEM have twice as many.
    #[arg(long, default_value_t = 2048)]
    ring_size: u32,
    /// UMEM frame size: 2048 or 4096.
    #[arg(long, default_value_t = 2048)]
    frame_size: u32,
    /// The sender's CPU.
    #[arg(long, default_value_t = 0)]
    sender_cpu: usize,
    /// The receiver's CPU.
    #[arg(long, default_value_t = 1)]
    receiver_cpu: usize,
    /// Run the sender and the receiver at `SCHED_FIFO` priority 1, so that other tasks on
    /// their CPUs cannot take them off for a time slice (the kernel's real-time throttling
    /// still leaves those tasks 5% of each second).
    #[arg(long)]
    fifo: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Attach {
    Native,
    Generic,
    Auto,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Drop,
    Reflect,
}

/// Source ports the flood comes from: 16 flows.
const FLOWS: u16 = 16;
const FIRST_PORT: u16 = 20_000;
const DST_PORT: u16 = 9;

/// One run's figures, per second over the measured window.
#[derive(Clone, Copy, Debug, Default)]
struct Figures {
    sent: f64,
    received: f64,
    reflected: f64,
    arrived: f64,
    syscalls_per_frame: f64,
    /// Frames the kernel dropped at the sockets (not per second): fill ring empty, RX full.
    fill_empty: u64,
    rx_full: u64,
    /// Share of receive calls that found nothing: the receiver's slack.
    empty_polls: f64,
    /// Share of the machine's CPU time the hypervisor took (steal).
    steal: f64,
    /// The longest time the receiver went without polling (taken off its CPU, most likely).
    longest_stall: Duration,
}

fn main() {
    let mut args = Args::parse();
    if !args.drop && !args.reflect {
        args.drop = true;
        args.reflect = true;
    }
    assert!(
        (1..=corral_xdp::MAX_BURST).contains(&args.burst),
        "--burst between 1 and {}",
        corral_xdp::MAX_BURST
    );
    assert!(
        args.frame_len >= UDP_PAYLOAD_OFFSET,
        "--frame-len of at least {UDP_PAYLOAD_OFFSET}"
    );

    let pair = VethPair::create(args.queues).expect("a veth pair into a fresh namespace");
    let config = PortConfig {
        attach: match args.attach {
            Attach::Native => AttachMode::Native,
            Attach::Generic => AttachMode::Generic,
            Attach::Auto => AttachMode::Auto,
        },
        socket: SocketConfig {
            frame_size: args.frame_size,
            frame_count: 2 * args.ring_size,
            rx_frames: args.ring_size,
            fill_size: 2 * args.ring_size,
            completion_size: args.ring_size,
            rx_size: args.ring_size,
            tx_size: args.ring_size,
            ..SocketConfig::default()
        },
        ..PortConfig::default()
    };
    let mut port = Port::open(&pair.host, &config).expect("attach to the veth pair");
    let target = pair.spare[0];
    port.register(target).expect("register the target address");
    pair.static_neighbor(target)
        .expect("a static neighbor entry");
    // Sockets on the flood's source ports, so that reflected frames end in a socket buffer
    // (full soon, then dropped there) rather than drawing ICMP errors.
    let peer_ip = pair.peer_ip;
    let _sinks: Vec<UdpSocket> = pair.inside(|| {
        (0..FLOWS)
            .map(|f| UdpSocket::bind((peer_ip, FIRST_PORT + f)).expect("bind a sink"))
            .collect()
    });

    println!(
        "corral-bench-xdp-floor: {} ({}), {}-byte UDP frames from {FLOWS} flows, sender on \
         CPU {}, receiver on CPU {}{}, burst {}, {} run(s) of {} s after {} s of warm-up",
        port.describe(),
        pair.host,
        args.frame_len,
        args.sender_cpu,
        args.receiver_cpu,
        if args.fifo { " (both SCHED_FIFO)" } else { "" },
        args.burst,
        args.runs,
        args.seconds,
        args.warmup
    );
    pin(args.receiver_cpu, args.fifo);
    if let Some(n) = args.rtt {
        round_trips(&args, &pair, &mut port, target, n);
        return;
    }
    let modes = [(args.drop, Mode::Drop), (args.reflect, Mode::Reflect)];
    for mode in modes.into_iter().filter(|m| m.0).map(|m| m.1) {
        let name = match (mode, args.copy) {
            (Mode::Drop, _) => "drop",
            (Mode::Reflect, false) => "reflect",
            (Mode::Reflect, true) => "reflect (copy)",
        };
        let mut runs = Vec::new();
        for run in 1..=args.runs {
            let f = measure(&args, &pair, &mut port, mode, target);
            println!(
                "{name} run {run}: sent {}, received {}, reflected {}, arrived back {}; \
                 {:.4} syscalls/frame; dropped at the socket: {} (fill ring empty), {} (RX \
                 ring full); {:.0}% of polls empty; longest receiver stall {:.1} ms; steal \
                 {:.1}%",
                mpps(f.sent),
                mpps(f.received),
                mpps(f.reflected),
                mpps(f.arrived),
                f.syscalls_per_frame,
                f.fill_empty,
                f.rx_full,
                f.empty_polls * 100.0,
                f.longest_stall.as_secs_f64() * 1e3,
                f.steal * 100.0
            );
            runs.push(f);
        }
        let med = |get: fn(&Figures) -> f64| median(runs.iter().map(get).collect());
        println!(
            "{name} median of {}: sent {}, received {}, reflected {}, arrived back {}; \
             {:.4} syscalls/frame",
            args.runs,
            mpps(med(|f| f.sent)),
            mpps(med(|f| f.received)),
            mpps(med(|f| f.reflected)),
            mpps(med(|f| f.arrived)),
            med(|f| f.syscalls_per_frame)
        );
    }
}

/// `n` closed-loop round trips of a 64-byte UDP payload from a socket in the namespace to
/// `target`, reflected by this thread polling the sockets: the round trip with nothing but
/// AF_XDP between the wire and its answerer.
fn round_trips(args: &Args, pair: &VethPair, port: &mut Port, target: Ipv4Addr, n: u64) {
    // The reflected frame carries the client's checksums: they must be whole ones.
    pair.full_checksums()
        .expect("turn the namespace end's checksum offload off (ethtool)");
    let stop = Arc::new(AtomicBool::new(false));
    let (peer_ip, cpu, stopped) = (pair.peer_ip, args.sender_cpu, stop.clone());
    let client = pair.spawn_inside(move || {
        pin(cpu, true);
        let socket = UdpSocket::bind((peer_ip, 0)).expect("bind the client");
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut times = Vec::with_capacity(n as usize);
        let (mut request, mut buf) = ([0u8; 64], [0u8; 2048]);
        let warmup = n / 10;
        for seq in 0..warmup + n {
            request[..8].copy_from_slice(&seq.to_le_bytes());
            let start = Instant::now();
            socket.send_to(&request, (target, DST_PORT)).unwrap();
            loop {
                let (len, _) = socket.recv_from(&mut buf).expect("a reflection within 2 s");
                if len >= 8 && buf[..8] == request[..8] {
                    break;
                }
            }
            if seq >= warmup {
                times.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        stopped.store(true, Ordering::Relaxed);
        times
    });
    let mut scratch = vec![[0u8; 2048]; args.burst];
    // Until the client is done, or has died (its panic then comes out of the join below).
    while !stop.load(Ordering::Relaxed) && !client.is_finished() {
        poll_for(
            port,
            Mode::Reflect,
            args,
            &mut scratch,
            Duration::from_millis(10),
        );
    }
    let mut times = client.join().expect("the client");
    times.sort_by(f64::total_cmp);
    let q = |f: f64| times[((times.len() - 1) as f64 * f) as usize];
    println!(
        "round trip to a bare AF_XDP reflector, {n} samples: p50 {:.1} us, p99 {:.1} us, \
         p99.9 {:.1} us",
        q(0.5),
        q(0.99),
        q(0.999)
    );
}

/// Pins the calling thread to `cpu`, at `SCHED_FIFO` priority 1 if `fifo`.
fn pin(cpu: usize, fifo: bool) {
    if let Err(e) = corral_affinity::pin_current_thread(cpu) {
        panic!("pinning to CPU {cpu}: {e}");
    }
    if fifo {
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: changes the calling thread's own policy, with a valid parameter.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
    }
}

fn mpps(per_second: f64) -> String {
    format!("{:.3} Mpps", per_second / 1e6)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The sum of every socket's counters, and of the kernel's: frames dropped with the fill
/// ring empty, and with the RX ring full.
fn totals(port: &Port) -> (Counters, u64, u64) {
    let t = port.counters();
    let (mut fill_empty, mut rx_full) = (0, 0);
    for socket in port.sockets() {
        let k = socket.kernel_stats().expect("XDP_STATISTICS");
        fill_empty += k.rx_fill_ring_empty;
        rx_full += k.rx_ring_full;
    }
    (t, fill_empty, rx_full)
}

/// One run: the flood starts, the receiver polls through the warm-up and then the measured
/// window, the flood stops.
fn measure(args: &Args, pair: &VethPair, port: &mut Port, mode: Mode, target: Ipv4Addr) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let stop = stop.clone();
        let (cpu, fifo, len, peer, frame_spec) = (
            args.sender_cpu,
            args.fifo,
            args.frame_len,
            pair.peer.clone(),
            Ipv4FrameSpec {
                src_mac: MacAddr(pair.peer_mac),
                dst_mac: MacAddr(pair.host_mac),
                src_ip: pair.peer_ip,
                dst_ip: target,
                ttl: 64,
                ident: 0,
                tos: 0,
            },
        );
        pair.spawn_inside(move || {
            pin(cpu, fifo);
            flood(&peer, &frame_spec, len, &stop)
        })
    };
    let mut scratch = vec![[0u8; 2048]; args.burst];
    poll_for(
        port,
        mode,
        args,
        &mut scratch,
        Duration::from_secs_f64(args.warmup),
    );
    let ((before, fill_before, full_before), peer_before) =
        (totals(port), pair.peer_rx_packets().unwrap_or(0));
    let start = Instant::now();
    let steal_before = steal_and_total();
    let (polls, empty, longest_stall) = poll_for(
        port,
        mode,
        args,
        &mut scratch,
        Duration::from_secs_f64(args.seconds),
    );
    let window = start.elapsed().as_secs_f64();
    let steal_after = steal_and_total();
    let ((after, fill_after, full_after), peer_after) =
        (totals(port), pair.peer_rx_packets().unwrap_or(0));
    stop.store(true, Ordering::Relaxed);
    let (sent, sending) = sender.join().expect("the sender");
    // Let what is in flight land before the next run.
    poll_for(port, mode, args, &mut scratch, Duration::from_millis(100));

    let received = after.rx_frames - before.rx_frames;
    Figures {
        sent: sent as f64 / sending,
        received: received as f64 / window,
        reflected: (after.tx_completed - before.tx_completed) as f64 / window,
        arrived: if mode == Mode::Reflect {
            peer_after.saturating_sub(peer_before) as f64 / window
        } else {
            0.0
        },
        syscalls_per_frame: (after.syscalls() - before.syscalls()) as f64 / received.max(1) as f64,
        fill_empty: fill_after - fill_before,
        rx_full: full_after - full_before,
        empty_polls: empty as f64 / polls.max(1) as f64,
        longest_stall,
        steal: (steal_after.0 - steal_before.0) as f64
            / (steal_after.1 - steal_before.1).max(1) as f64,
    }
}

/// The machine's steal time and all its CPU time so far, in ticks (`/proc/stat`).
fn steal_and_total() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total = ticks.iter().take(8).sum();
    (ticks.get(7).copied().unwrap_or(0), total)
}

/// Busy-polls every socket for `how_long`; returns how many receive calls it made, how many
/// of them found nothing, and the longest time between two rounds of calls.
fn poll_for(
    port: &mut Port,
    mode: Mode,
    args: &Args,
    scratch: &mut [[u8; 2048]],
    how_long: Duration,
) -> (u64, u64, Duration) {
    let mut last = Instant::now();
    let deadline = last + how_long;
    let (mut polls, mut empty, mut longest) = (0u64, 0u64, Duration::ZERO);
    loop {
        for _ in 0..64 {
            for socket in port.sockets_mut() {
                let got = match (mode, args.copy) {
                    (Mode::Drop, _) => socket.recv_burst(args.burst, |_| Verdict::Release),
                    (Mode::Reflect, false) => {
                        let got = socket.recv_burst(args.burst, |frame| {
                            reflect(frame);
                            Verdict::Transmit(frame.len())
                        });
                        socket.reap();
                        got
                    }
                    (Mode::Reflect, true) => {
                        let mut n = 0;
                        let mut lens = [0usize; corral_xdp::MAX_BURST];
                        socket.recv_burst(args.burst, |frame| {
                            reflect(frame);
                            scratch[n][..frame.len()].copy_from_slice(frame);
                            lens[n] = frame.len();
                            n += 1;
                            Verdict::Release
                        });
                        socket.send_burst(scratch[..n].iter().zip(lens).map(|(b, l)| &b[..l]));
                        n
                    }
                };
                polls += 1;
                empty += u64::from(got == 0);
            }
        }
        let now = Instant::now();
        longest = longest.max(now - last);
        last = now;
        if now >= deadline {
            return (polls, empty, longest);
        }
    }
}

/// Swaps a UDP frame's MACs, IPv4 addresses and ports (an option-less IPv4 header, as the
/// flood's); the checksums, being sums, stay right.
fn reflect(frame: &mut [u8]) {
    for (a, b, n) in [(0, 6, 6), (26, 30, 4), (34, 36, 2)] {
        let (left, right) = frame.split_at_mut(b);
        left[a..a + n].swap_with_slice(&mut right[..n]);
    }
}

/// From inside the namespace: sends `len`-byte UDP frames on `interface` until `stop`;
/// returns how many went and over how many seconds.
fn flood(interface: &str, spec: &Ipv4FrameSpec, len: usize, stop: &AtomicBool) -> (u64, f64) {
    let mut flood = UdpFlood::new(interface, spec, len, FIRST_PORT, FLOWS, DST_PORT)
        .expect("a raw socket on the namespace's end");
    let start = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        sent += flood.send_batch() as u64;
    }
    (sent, start.elapsed().as_secs_f64())
}
