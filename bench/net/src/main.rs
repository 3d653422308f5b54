//! UDP echo round trips from a Linux client, measured in one run against two servers:
//!
//! * **Corral**: an echo server in a Corral runtime under iokerneld (TAP device backend), its
//!   kthread spinning on a guaranteed core (`--parked` instead lets it park between requests,
//!   so that each request must first wake it);
//! * **Linux**: a plain UDP echo server thread in its own network namespace, reached over a
//!   veth pair, pinned to the same CPU.
//!
//! The client runs closed-loop (one request in flight), pinned to iokerneld's CPU, and records
//! each round trip in an HDR histogram. On a 2-CPU machine there is no other CPU for it: it
//! stands in for a client on another machine, so it runs at `SCHED_FIFO` priority 1 in both
//! runs (it sleeps in `recv` between requests), which lets it take the CPU from iokerneld's
//! busy loop the moment its answer arrives instead of waiting up to a CFS slice. The servers
//! both get the other CPU.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use corral::net::{NetConfig, UdpSocket as CorralUdp};
use corral::{Config, IokernelSettings, Runtime};
use hdrhistogram::Histogram;

#[derive(Parser, Debug)]
#[command(about = "UDP echo round trips: Corral through iokerneld vs Linux over veth")]
struct Args {
    /// Round trips per server per repetition.
    #[arg(long, default_value_t = 20_000)]
    samples: u64,
    /// Repetitions; medians of the per-repetition percentiles are reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Payload bytes.
    #[arg(long, default_value_t = 64)]
    payload: usize,
    /// iokerneld's CPU (the client shares it).
    #[arg(long, default_value_t = 0)]
    iokernel_cpu: usize,
    /// The servers' CPU.
    #[arg(long, default_value_t = 1)]
    server_cpu: usize,
    /// Let the Corral server's kthread park between requests (each request wakes it), with
    /// this many microseconds between requests; 0 = a spinning kthread, back-to-back requests.
    #[arg(long, default_value_t = 0)]
    parked_gap_us: u64,
    /// The iokerneld binary; default: next to this program.
    #[arg(long)]
    iokerneld: Option<PathBuf>,
    /// Instead of round trips, measure one-way packet rates for this many seconds: a Linux
    /// sender flooding a Corral receiver through the TAP device, and one Corral runtime
    /// flooding another through iokerneld's local switch.
    #[arg(long)]
    rates: Option<f64>,
}

/// A benchmark pinned somewhere else than asked measures something else: stop.
fn pin(cpu: usize) {
    if let Err(e) = corral_affinity::pin_current_thread(cpu) {
        panic!("{e}");
    }
}

fn run(cmd: &[&str]) {
    let status = Command::new(cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(status.success(), "{cmd:?} failed");
}

/// Percentiles in microseconds: p50, p99, p99.9.
type Tails = [f64; 3];

/// Closed-loop round trips from a socket bound to `local` to `server`.
fn client(local: Ipv4Addr, server: SocketAddrV4, args: &Args, cpu: usize) -> Tails {
    // Its own thread, so that the real-time policy is not inherited by anything else (such as
    // iokerneld, started later from the main thread).
    std::thread::scope(|scope| {
        scope
            .spawn(|| client_thread(local, server, args, cpu))
            .join()
            .expect("client thread")
    })
}

fn client_thread(local: Ipv4Addr, server: SocketAddrV4, args: &Args, cpu: usize) -> Tails {
    pin(cpu);
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: changing the calling thread's own policy with a valid parameter.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    assert_eq!(rc, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
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
    [0.5, 0.99, 0.999].map(|q| hist.value_at_quantile(q) as f64 / 1e3)
}

/// Starts iokerneld with `nic_args`; returns it and its socket path.
fn start_daemon(args: &Args, binary: &PathBuf, nic_args: &[&str], tag: &str) -> (Daemon, PathBuf) {
    let dir = std::env::temp_dir().join(format!("corral-bench-net-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("iokerneld.sock");
    let child = Command::new(binary)
        .args(["--core", &args.iokernel_cpu.to_string()])
        .args(["--managed-cores", &args.server_cpu.to_string()])
        .args(nic_args)
        .args(["--log-level", "warn"])
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .spawn()
        .expect("start iokerneld");
    let daemon = Daemon(child, dir);
    let start = Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "iokerneld did not start"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (daemon, socket)
}

/// A runtime with one kthread and the address `ip`; `spinning`: on a guaranteed core.
fn net_runtime(socket: &PathBuf, name: &str, ip: Ipv4Addr, spinning: bool) -> Runtime {
    let mut settings = IokernelSettings::new(socket, name);
    if spinning {
        settings = settings.guaranteed_cores(1).spinning_kthreads(1);
    }
    Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(settings)
            .net(NetConfig::new(ip, 24)),
    )
    .expect("start a Corral runtime")
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

/// Datagrams per second a Linux sender gets through the TAP device to a Corral receiver
/// spinning on the managed core, and the rate it offered.
fn tap_rate(args: &Args, binary: &PathBuf, seconds: f64) -> (f64, f64) {
    let (_daemon, socket) = start_daemon(args, binary, &TAP_ARGS, "tap");
    let ip = Ipv4Addr::new(10, 97, 0, 2);
    let rt = net_runtime(&socket, "tap-sink", ip, true);
    let count = start_sink(&rt, SocketAddrV4::new(ip, 9));
    let to = SocketAddrV4::new(ip, 9);
    // Let ARP settle before timing.
    let sender = UdpSocket::bind("10.97.0.1:0").unwrap();
    sender.send_to(&[0u8; 64], to).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let before = count.load(Ordering::Relaxed);
    let cpu = args.iokernel_cpu;
    let (sent, elapsed) = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                pin(cpu);
                let payload = vec![0u8; args.payload];
                let start = Instant::now();
                let mut sent = 0u64;
                while start.elapsed().as_secs_f64() < seconds {
                    for _ in 0..64 {
                        if sender.send_to(&payload, to).is_ok() {
                            sent += 1;
                        }
                    }
                }
                (sent, start.elapsed().as_secs_f64())
            })
            .join()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    let received = count.load(Ordering::Relaxed) - before;
    (received as f64 / elapsed, sent as f64 / elapsed)
}

/// Datagrams per second one Corral runtime gets to another through iokerneld's local switch,
/// both sharing the one managed core, and the rate the sender managed.
fn local_rate(args: &Args, binary: &PathBuf, seconds: f64) -> (f64, f64) {
    let (_daemon, socket) = start_daemon(args, binary, &["--nic", "none"], "local");
    let (a_ip, b_ip) = (Ipv4Addr::new(10, 95, 0, 2), Ipv4Addr::new(10, 95, 0, 3));
    let b = net_runtime(&socket, "local-sink", b_ip, false);
    let count = start_sink(&b, SocketAddrV4::new(b_ip, 9));
    let a = net_runtime(&socket, "local-source", a_ip, false);
    let to = SocketAddrV4::new(b_ip, 9);
    let payload = args.payload;
    // One datagram first, so that ARP is resolved before timing.
    a.block_on(move || {
        let s = CorralUdp::bind(SocketAddrV4::new(a_ip, 0)).unwrap();
        s.send_to(&[0u8; 64], to).unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    let before = count.load(Ordering::Relaxed);
    let (sent, elapsed) = a.block_on(move || {
        let s = CorralUdp::bind(SocketAddrV4::new(a_ip, 0)).unwrap();
        let buf = vec![0u8; payload];
        let start = Instant::now();
        let mut sent = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            for _ in 0..64 {
                if s.send_to(&buf, to).is_ok() {
                    sent += 1;
                }
            }
        }
        (sent, start.elapsed().as_secs_f64())
    });
    std::thread::sleep(Duration::from_millis(100));
    let received = count.load(Ordering::Relaxed) - before;
    (received as f64 / elapsed, sent as f64 / elapsed)
}

struct Daemon(Child, PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

/// The TAP device and host address both Corral experiments use.
const TAP_ARGS: [&str; 6] = [
    "--nic",
    "tap",
    "--tap-name",
    "crlbench0",
    "--host-ip",
    "10.97.0.1/24",
];

fn corral_side(args: &Args, binary: &PathBuf) -> Vec<Tails> {
    let (_daemon, socket) = start_daemon(args, binary, &TAP_ARGS, "echo");
    let server_ip = Ipv4Addr::new(10, 97, 0, 2);
    let rt = net_runtime(&socket, "echo-bench", server_ip, args.parked_gap_us == 0);
    let server = SocketAddrV4::new(server_ip, 7);
    let _server = rt.spawn(move || {
        let socket = CorralUdp::bind(server).expect("bind the echo port");
        let mut buf = vec![0u8; 2048];
        loop {
            let (n, from) = socket.recv_from(&mut buf).expect("receive");
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    (0..args.reps)
        .map(|_| client(Ipv4Addr::new(10, 97, 0, 1), server, args, args.iokernel_cpu))
        .collect()
}

fn linux_side(args: &Args) -> Vec<Tails> {
    let ns = format!("crlbench{}", std::process::id() % 100_000);
    // A namespace left by an interrupted run.
    let _ = Command::new("ip")
        .args(["netns", "del", &ns])
        .stderr(Stdio::null())
        .status();
    run(&["ip", "netns", "add", &ns]);
    let cleanup = NetnsGuard(ns.clone());
    run(&[
        "ip", "link", "add", "crlveth0", "type", "veth", "peer", "name", "crlveth1",
    ]);
    run(&["ip", "link", "set", "crlveth1", "netns", &ns]);
    run(&["ip", "addr", "add", "10.96.0.1/24", "dev", "crlveth0"]);
    run(&["ip", "link", "set", "crlveth0", "up"]);
    run(&[
        "ip",
        "netns",
        "exec",
        &ns,
        "ip",
        "addr",
        "add",
        "10.96.0.2/24",
        "dev",
        "crlveth1",
    ]);
    run(&[
        "ip", "netns", "exec", &ns, "ip", "link", "set", "crlveth1", "up",
    ]);
    let server_cpu = args.server_cpu;
    let ns_path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&ns_path).expect("open the namespace");
        // SAFETY: moving only this thread into the namespace; the fd is valid.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&file), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        pin(server_cpu);
        let socket = UdpSocket::bind("10.96.0.2:7").expect("bind in the namespace");
        let mut buf = vec![0u8; 2048];
        loop {
            let (n, from) = socket.recv_from(&mut buf).unwrap();
            let _ = socket.send_to(&buf[..n], from);
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let server = SocketAddrV4::new(Ipv4Addr::new(10, 96, 0, 2), 7);
    let tails = (0..args.reps)
        .map(|_| client(Ipv4Addr::new(10, 96, 0, 1), server, args, args.iokernel_cpu))
        .collect();
    drop(cleanup);
    tails
}

struct NetnsGuard(String);

impl Drop for NetnsGuard {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", "crlveth0"])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = Args::parse();
    let binary = args.iokerneld.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("iokerneld")
    });
    if let Some(seconds) = args.rates {
        let (tap_rx, tap_tx) = tap_rate(&args, &binary, seconds);
        let (local_rx, local_tx) = local_rate(&args, &binary, seconds);
        println!(
            "one-way UDP rates, {} B payload, {seconds} s each",
            args.payload
        );
        println!(
            "Linux sender -> TAP -> iokerneld -> Corral receiver: {tap_rx:.0} received/s \
             ({tap_tx:.0} sent/s)"
        );
        println!(
            "Corral runtime -> iokerneld local switch -> Corral runtime: {local_rx:.0} \
             received/s ({local_tx:.0} sent/s)"
        );
        return;
    }
    let linux = linux_side(&args);
    let corral = corral_side(&args, &binary);
    let mode = if args.parked_gap_us == 0 {
        "spinning kthread, back-to-back requests".to_string()
    } else {
        format!("parked kthread, {} us between requests", args.parked_gap_us)
    };
    println!(
        "UDP echo round trip, {} B payload, {} samples x {} reps ({mode})",
        args.payload, args.samples, args.reps
    );
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "server", "p50 us", "p99 us", "p99.9 us"
    );
    for (name, tails) in [("linux", &linux), ("corral", &corral)] {
        let m = |i: usize| median(tails.iter().map(|t| t[i]).collect());
        println!("{name:<10} {:>10.1} {:>10.1} {:>10.1}", m(0), m(1), m(2));
    }
    let ratio = |i: usize| {
        median(corral.iter().map(|t| t[i]).collect()) / median(linux.iter().map(|t| t[i]).collect())
    };
    println!(
        "{:<10} {:>9.2}x {:>9.2}x {:>9.2}x",
        "ratio",
        ratio(0),
        ratio(1),
        ratio(2)
    );
}
