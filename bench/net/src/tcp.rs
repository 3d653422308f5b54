//! TCP: a Linux client against a Corral server through iokerneld's TAP device, and the same
//! client against a Linux server in a namespace behind a veth pair, in one run. Request and
//! response round trips on one connection, bulk transfer, and connections per second; and
//! bulk transfer between two Corral runtimes through iokerneld's local switch.
//!
//! The Linux client shares iokerneld's CPU (there is no third one); the servers get the other.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use corral::Runtime;
use corral::net::{TcpListener as CorralListener, TcpStream as CorralStream};
use hdrhistogram::Histogram;

use crate::setup::{
    Daemon, Namespace, TAP_ARGS, TAP_RUNTIME, VETH_PEER, Wire, as_remote_client, pin,
};
use crate::{Args, Tails};

const PORT: u16 = 7;
/// Bytes per write of a bulk sender.
const CHUNK: usize = 64 * 1024;

/// What a server does with each accepted connection.
#[derive(Clone, Copy)]
pub enum Service {
    /// Echoes whatever arrives, until end of stream.
    Echo,
    /// Reads to end of stream, then answers with the byte count (8 bytes, little-endian).
    Sink,
    /// Keeps the connection open and idle, with no thread or uthread of its own.
    Hold,
}

/// Serves one connection, generic over the two stacks' streams.
fn serve(service: Service, stream: &mut (impl Read + Write)) {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        total += n as u64;
        if let Service::Echo = service
            && stream.write_all(&buf[..n]).is_err()
        {
            return;
        }
    }
    if let Service::Sink = service {
        let _ = stream.write_all(&total.to_le_bytes());
    }
}

/// A Corral server on `addr`: each connection served by a uthread of its own.
fn corral_server(rt: &Runtime, addr: SocketAddrV4, service: Service) {
    let listener = rt.block_on(move || CorralListener::bind(addr).expect("bind the Corral server"));
    rt.spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Service::Hold = service {
                held.push(stream);
                continue;
            }
            stream.set_nodelay(true).expect("nodelay");
            corral::spawn(move || serve(service, &mut stream));
        }
    });
}

/// A Linux server in `ns`, pinned to `cpu`: each connection served by a thread of its own,
/// pinned there too.
fn linux_server(ns: &Namespace, cpu: usize, service: Service) {
    let listener = ns
        .spawn(cpu, || {
            TcpListener::bind((VETH_PEER, PORT)).expect("bind in the namespace")
        })
        .join()
        .expect("bind thread");
    ns.spawn(cpu, move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Service::Hold = service {
                held.push(stream);
                continue;
            }
            stream.set_nodelay(true).expect("nodelay");
            std::thread::spawn(move || {
                pin(cpu);
                serve(service, &mut stream)
            });
        }
    });
}

/// One connection, `args.samples` closed-loop round trips of `args.payload` bytes each way.
fn round_trips(server: SocketAddrV4, args: &Args) -> Tails {
    as_remote_client(args.iokernel_cpu, || {
        let mut stream = TcpStream::connect_timeout(&server.into(), Duration::from_secs(5))
            .expect("connect to the server");
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut hist = Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).unwrap();
        let mut request = vec![0u8; args.payload.max(8)];
        let mut response = vec![0u8; request.len()];
        let warmup = args.samples / 10;
        for seq in 0..warmup + args.samples {
            request[..8].copy_from_slice(&seq.to_le_bytes());
            let start = Instant::now();
            stream.write_all(&request).unwrap();
            stream
                .read_exact(&mut response)
                .expect("an echo within 5 s");
            assert_eq!(response, request, "the echo differs");
            if seq >= warmup {
                hist.record(start.elapsed().as_nanos() as u64).unwrap();
            }
        }
        crate::tails(&hist)
    })
}

/// Connections per second, one at a time: connect, `args.payload` bytes each way, close.
fn connection_rate(server: SocketAddrV4, args: &Args) -> f64 {
    as_remote_client(args.iokernel_cpu, || {
        let mut request = vec![7u8; args.payload];
        let mut response = vec![0u8; args.payload];
        let count = args.samples;
        let start = Instant::now();
        for seq in 0..count {
            request[..8].copy_from_slice(&seq.to_le_bytes());
            let mut stream = TcpStream::connect_timeout(&server.into(), Duration::from_secs(5))
                .expect("connect to the server");
            stream.set_nodelay(true).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            stream.write_all(&request).unwrap();
            stream
                .read_exact(&mut response)
                .expect("an echo within 5 s");
            assert_eq!(response, request, "the echo differs");
        }
        count as f64 / start.elapsed().as_secs_f64()
    })
}

/// Bytes per second a Linux sender on `cpu` gets to a sink at `server` over `seconds`,
/// counted by the sink (the time runs until the sink's count arrives).
fn bulk_from_linux(server: SocketAddrV4, cpu: usize, seconds: f64) -> f64 {
    as_remote_client(cpu, || {
        let stream = TcpStream::connect_timeout(&server.into(), Duration::from_secs(5))
            .expect("connect to the sink");
        bulk(
            stream,
            |s| s.shutdown(Shutdown::Write).expect("shutdown"),
            seconds,
        )
    })
}

/// Sends for `seconds`, closes its side with `close_write`, and returns what the sink counted
/// per second.
fn bulk<S: Read + Write>(mut stream: S, close_write: impl FnOnce(&S), seconds: f64) -> f64 {
    let chunk = vec![0x5au8; CHUNK];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        stream.write_all(&chunk).expect("send");
        sent += CHUNK as u64;
    }
    close_write(&stream);
    let mut count = [0u8; 8];
    stream.read_exact(&mut count).expect("the sink's count");
    let counted = u64::from_le_bytes(count);
    assert_eq!(counted, sent, "the sink counted other than what was sent");
    counted as f64 / start.elapsed().as_secs_f64()
}

/// Round trips to a Linux echo server over veth, and to a Corral one behind each wire.
pub fn round_trip(args: &Args, binary: &Path, wires: &[Wire]) -> (Vec<Tails>, Vec<Vec<Tails>>) {
    let linux = {
        let ns = Namespace::create();
        linux_server(&ns, args.server_cpu, Service::Echo);
        let server = SocketAddrV4::new(VETH_PEER, PORT);
        (0..args.reps).map(|_| round_trips(server, args)).collect()
    };
    let corral = wires
        .iter()
        .map(|wire| {
            let daemon = Daemon::start(args, binary, wire.nic_args, "tcp-rr");
            let rt = daemon.runtime("tcp-echo", wire.runtime, 1, true);
            let server = SocketAddrV4::new(wire.runtime, PORT);
            corral_server(&rt, server, Service::Echo);
            (0..args.reps)
                .map(|_| wire.client(|| round_trips(server, args)))
                .collect()
        })
        .collect();
    (linux, corral)
}

/// Connections per second to a Linux server over veth and to a Corral server behind the TAP
/// device, `args.reps` runs of `args.samples` connections each.
pub fn connections(args: &Args, binary: &Path) -> (Vec<f64>, Vec<f64>) {
    let linux = {
        let ns = Namespace::create();
        linux_server(&ns, args.server_cpu, Service::Echo);
        let server = SocketAddrV4::new(VETH_PEER, PORT);
        (0..args.reps)
            .map(|_| connection_rate(server, args))
            .collect()
    };
    let daemon = Daemon::start(args, binary, &TAP_ARGS, "tcp-cps");
    let rt = daemon.runtime("tcp-accept", TAP_RUNTIME, 1, true);
    let server = SocketAddrV4::new(TAP_RUNTIME, PORT);
    corral_server(&rt, server, Service::Echo);
    let corral = (0..args.reps)
        .map(|_| connection_rate(server, args))
        .collect();
    (linux, corral)
}

/// Bulk TCP from a Linux sender to a Linux sink over veth, bytes per second per repetition.
pub fn bulk_linux(args: &Args, seconds: f64) -> Vec<f64> {
    let ns = Namespace::create();
    linux_server(&ns, args.server_cpu, Service::Sink);
    let server = SocketAddrV4::new(VETH_PEER, PORT);
    (0..args.reps)
        .map(|_| bulk_from_linux(server, args.iokernel_cpu, seconds))
        .collect()
}

/// Bulk TCP from a Linux sender to a Corral sink behind `wire`, bytes per second per
/// repetition.
pub fn bulk_corral(args: &Args, binary: &Path, wire: &Wire, seconds: f64) -> Vec<f64> {
    let daemon = Daemon::start(args, binary, wire.nic_args, "tcp-bulk");
    let rt = daemon.runtime("tcp-sink", wire.runtime, 1, true);
    let server = SocketAddrV4::new(wire.runtime, PORT);
    corral_server(&rt, server, Service::Sink);
    let retrans_before = wire.client(linux_retransmissions);
    let system = daemon.system_seconds();
    let corral = (0..args.reps)
        .map(|_| wire.client(|| bulk_from_linux(server, args.iokernel_cpu, seconds)))
        .collect();
    let system = daemon.system_seconds() - system;
    let device_drops = daemon.stats().nic.map_or(0, |n| n.counters.rx_device_drops);
    let c = rt
        .net_stats()
        .expect("a networked runtime")
        .tcp
        .counters
        .conns;
    eprintln!(
        "Corral sink ({}): {} segments in, {} out, {} out of order, {} duplicate, {} drops; \
         Linux sender: {} retransmissions; frames the kernel dropped before iokerneld read \
         them: {device_drops}; iokerneld's system time {:.2} us per segment in",
        wire.name,
        c.segments_in,
        c.segments_out,
        c.ooo_segments,
        c.duplicate_segments,
        c.drops.iter().sum::<u64>(),
        wire.client(linux_retransmissions)
            .saturating_sub(retrans_before),
        system / c.segments_in.max(1) as f64 * 1e6
    );
    corral
}

/// Memory per idle established connection: opens `args.samples` connections from a Linux
/// client to a server that holds them (no thread or uthread per connection) and reads what
/// grew. With a Linux server both ends' sockets live in the kernel's slab caches, so Linux's
/// figure is the pair's; the Corral server's is the growth of this process's resident memory
/// (the Linux client's sockets add nothing there).
pub fn idle_memory(args: &Args, binary: &Path) -> IdleMemory {
    raise_file_limit(4 * args.samples + 1024);
    let linux_pair = {
        let ns = Namespace::create();
        linux_server(&ns, args.server_cpu, Service::Hold);
        hold_connections(SocketAddrV4::new(VETH_PEER, PORT), args.samples).0
    };
    let daemon = Daemon::start(args, binary, &TAP_ARGS, "tcp-idle");
    let rt = daemon.runtime("tcp-idle", TAP_RUNTIME, 1, true);
    corral_server(&rt, SocketAddrV4::new(TAP_RUNTIME, PORT), Service::Hold);
    let corral_server = hold_connections(SocketAddrV4::new(TAP_RUNTIME, PORT), args.samples).1;
    let live = rt.net_stats().expect("a networked runtime").tcp.connections;
    assert!(
        live >= args.samples,
        "the Corral server holds {live} connections, not {}",
        args.samples
    );
    let per = |bytes: i64| bytes as f64 / args.samples as f64;
    IdleMemory {
        linux_pair: per(linux_pair),
        corral_server: per(corral_server),
    }
}

/// Bytes per idle connection.
pub struct IdleMemory {
    /// Both ends' sockets in Linux's kernel.
    pub linux_pair: f64,
    /// The Corral server's resident memory.
    pub corral_server: f64,
}

/// Opens `n` connections to `server` and keeps them open while it reads how much the kernel's
/// slab caches and this process's resident memory grew (bytes).
fn hold_connections(server: SocketAddrV4, n: u64) -> (i64, i64) {
    let (slab, rss) = (slab_bytes(), rss_bytes());
    let held: Vec<TcpStream> = (0..n)
        .map(|_| {
            TcpStream::connect_timeout(&server.into(), Duration::from_secs(5))
                .expect("connect to the server")
        })
        .collect();
    // The server accepts at its own pace; let it take the last ones.
    std::thread::sleep(Duration::from_millis(500));
    let grown = (slab_bytes() - slab, rss_bytes() - rss);
    drop(held);
    grown
}

/// Bytes of the kernel's slab objects in use (`/proc/slabinfo`: active objects times object
/// size, over every cache). Unlike the slab pages in `/proc/meminfo`, this does not depend on
/// whether new objects found room in pages that earlier frees left partly empty.
fn slab_bytes() -> i64 {
    let slabinfo = std::fs::read_to_string("/proc/slabinfo").expect("/proc/slabinfo (as root)");
    slabinfo
        .lines()
        .skip(2)
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1);
            let active: i64 = fields.next()?.parse().ok()?;
            let size: i64 = fields.nth(1)?.parse().ok()?;
            Some(active * size)
        })
        .sum()
}

fn rss_bytes() -> i64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: i64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("resident pages in statm");
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64
}

/// Lets this process hold `n` file descriptors, within its hard limit.
fn raise_file_limit(n: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid resource and a place for the limit.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(rc, 0, "RLIMIT_NOFILE: {}", std::io::Error::last_os_error());
    assert!(
        limit.rlim_max >= n,
        "{n} file descriptors are needed and the hard limit is {}: use fewer --samples",
        limit.rlim_max
    );
    limit.rlim_cur = limit.rlim_cur.max(n);
    // SAFETY: a valid resource and limit, within the hard limit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(rc, 0, "RLIMIT_NOFILE: {}", std::io::Error::last_os_error());
}

/// Segments Linux's TCP has retransmitted since boot (`/proc/net/snmp`).
fn linux_retransmissions() -> u64 {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap_or_default();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RetransSegs")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Bulk throughput between two Corral runtimes through iokerneld's local switch, both sharing
/// the one managed core; bytes per second over one run of `seconds`.
pub fn bulk_between_runtimes(args: &Args, binary: &Path, seconds: f64) -> f64 {
    let daemon = Daemon::start(args, binary, &["--nic", "none"], "tcp-local");
    let (a_ip, b_ip) = (Ipv4Addr::new(10, 95, 0, 2), Ipv4Addr::new(10, 95, 0, 3));
    let b = daemon.runtime("tcp-local-sink", b_ip, 1, false);
    let server = SocketAddrV4::new(b_ip, PORT);
    corral_server(&b, server, Service::Sink);
    let a = daemon.runtime("tcp-local-source", a_ip, 1, false);
    a.block_on(move || {
        let stream = CorralStream::connect(server).expect("connect to the sink");
        bulk(
            stream,
            |s| s.shutdown(Shutdown::Write).expect("shutdown"),
            seconds,
        )
    })
}

/// One incast burst as the clients saw it.
#[derive(Clone, Copy, Debug)]
pub struct Burst {
    /// From the first request written to the last answer read, in microseconds.
    pub all_answered_us: f64,
    /// A new connection opened right after the burst was written: its connect and one round
    /// trip, in microseconds.
    pub probe_us: f64,
    /// Segments the clients' kernel retransmitted during the burst and the probe.
    pub retransmits: u64,
}

/// Segments the kernel has retransmitted on `stream` over its lifetime (`TCP_INFO`).
fn total_retransmits(stream: &TcpStream) -> u64 {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of `len` bytes; the descriptor is open.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    u64::from(info.tcpi_total_retrans)
}

/// `args.samples` connections held open to an echo server; `args.reps` times, after a pause
/// long enough for a Corral server to park, one request of `args.payload` bytes on every
/// connection at once, then a probe on a new connection, then every answer read.
fn incast_bursts(server: SocketAddrV4, args: &Args) -> Vec<Burst> {
    raise_file_limit(args.samples + 1024);
    as_remote_client(args.iokernel_cpu, || {
        let connect = || {
            let s = TcpStream::connect_timeout(&server.into(), Duration::from_secs(10))
                .expect("connect to the server");
            s.set_nodelay(true).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s
        };
        let mut streams: Vec<TcpStream> = (0..args.samples).map(|_| connect()).collect();
        let mut request = vec![0x42u8; args.payload.max(8)];
        let mut answer = vec![0u8; request.len()];
        (0..args.reps)
            .map(|rep| {
                std::thread::sleep(Duration::from_millis(200));
                let before: u64 = streams.iter().map(total_retransmits).sum();
                request[..8].copy_from_slice(&(rep as u64).to_le_bytes());
                let start = Instant::now();
                for s in &mut streams {
                    s.write_all(&request).expect("send a request");
                }
                let probe_start = Instant::now();
                let mut probe = connect();
                probe.write_all(&request).expect("send the probe");
                probe.read_exact(&mut answer).expect("the probe's echo");
                let probe_us = probe_start.elapsed().as_secs_f64() * 1e6;
                for s in &mut streams {
                    s.read_exact(&mut answer).expect("an echo within 30 s");
                    assert_eq!(answer, request, "the echo differs");
                }
                let all_answered_us = start.elapsed().as_secs_f64() * 1e6;
                let after: u64 = streams.iter().map(total_retransmits).sum();
                Burst {
                    all_answered_us,
                    probe_us,
                    retransmits: after - before + total_retransmits(&probe),
                }
            })
            .collect()
    })
}

/// Incast against a Linux echo server over veth (a thread per connection) and a parked Corral
/// one behind the TAP device (a uthread per connection, its kthread parked between bursts).
pub fn incast(args: &Args, binary: &Path) -> (Vec<Burst>, Vec<Burst>) {
    let linux = {
        let ns = Namespace::create();
        linux_server(&ns, args.server_cpu, Service::Echo);
        incast_bursts(SocketAddrV4::new(VETH_PEER, PORT), args)
    };
    let daemon = Daemon::start(args, binary, &TAP_ARGS, "tcp-incast");
    let rt = daemon.runtime("tcp-incast", TAP_RUNTIME, 1, false);
    let server = SocketAddrV4::new(TAP_RUNTIME, PORT);
    corral_server(&rt, server, Service::Echo);
    let corral = incast_bursts(server, args);
    (linux, corral)
}
