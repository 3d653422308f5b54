//! What the TCP end-to-end tests share: an iokerneld with its own TAP device and subnet (and
//! optional fault injection), the test peer's server on the stack under test, and helpers to
//! run Linux programs against it.
//!
//! The stack under test is chosen in [`start_server`]: Corral's TCP in a runtime at
//! `subnet.2`, reached through the TAP device and iokerneld. Linux's own stack at `subnet.1`
//! (the TAP's host side) stands in while Corral's is being built, to check the harness itself.

#![allow(dead_code, reason = "each tcp_* test binary uses part of it")]

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ops::{Deref, DerefMut};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::net::{NetConfig, TcpSettings, TcpStats};
use corral::{Config, IokernelSettings, Runtime};
use corral_app_tcppeer::{CorralNet, LinuxNet, Served, Service, serve};

use crate::common;

/// An iokerneld with a TAP device `tap` whose host side is `subnet.1/24`.
pub struct TcpDaemon {
    iokerneld: common::Daemon,
    pub subnet: [u8; 3],
    pub tap: String,
}

impl Deref for TcpDaemon {
    type Target = common::Daemon;

    fn deref(&self) -> &common::Daemon {
        &self.iokerneld
    }
}

impl DerefMut for TcpDaemon {
    fn deref_mut(&mut self) -> &mut common::Daemon {
        &mut self.iokerneld
    }
}

impl TcpDaemon {
    /// `family` tells test binaries apart (their names and subnets must not collide), `test`
    /// the tests of one binary; `extra` goes to iokerneld's command line (e.g. `--faults`).
    pub fn start(family: u8, test: u8, extra: &[&str]) -> TcpDaemon {
        let pid = std::process::id();
        let tap = format!("crt{}{family}t{test}", pid % 10_000);
        let subnet = [10, 160 + family * 10 + (pid % 10) as u8, test];
        let cidr = format!("{}.{}.{}.1/24", subnet[0], subnet[1], subnet[2]);
        let mut args = vec![
            "--log-level",
            "warn",
            "--nic",
            "tap",
            "--tap-name",
            &tap,
            "--host-ip",
            &cidr,
        ];
        args.extend_from_slice(extra);
        let iokerneld = common::Daemon::launch(common::Launch {
            args: &args,
            socket: "iokerneld.sock",
            extra: &[],
            log: true,
        });
        TcpDaemon {
            iokerneld,
            subnet,
            tap,
        }
    }

    pub fn host(&self) -> Ipv4Addr {
        self.ip(1)
    }

    pub fn ip(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], last)
    }

    /// The counters of the TAP device's host side, as Linux keeps them.
    pub fn tap_counter(&self, name: &str) -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{}/statistics/{name}", self.tap))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// The test peer's services on the stack under test.
pub struct Server {
    /// The runtime serving, when the stack under test is Corral's.
    pub runtime: Option<Runtime>,
    pub ip: Ipv4Addr,
    pub served: Arc<Served>,
}

impl Server {
    pub fn addr(&self, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new(self.ip, port)
    }

    /// Waits until `n` connections have finished on the server side.
    pub fn wait_finished(&self, n: u64, limit: Duration) {
        common::wait_until(
            &format!("{n} connections to finish on the server"),
            limit,
            || self.served.finished() >= n,
        );
    }
}

pub const ECHO: u16 = 7;
pub const SINK: u16 = 9;
pub const SOURCE: u16 = 19;
pub const SOCKPERF: u16 = 11111;

/// Which stack serves: Corral's, or Linux's standing in to check the harness.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    Corral,
    Linux,
}

/// The stack under test.
pub const STACK: Stack = Stack::Corral;

/// TIME-WAIT in the test runtimes: short, so that tests see the tables empty soon after close.
pub const TIME_WAIT: Duration = Duration::from_secs(1);

/// The test runtimes' TCP settings: the defaults with a short TIME-WAIT.
pub fn test_tcp_settings() -> TcpSettings {
    let mut tcp = TcpSettings::default();
    tcp.tcp.time_wait = TIME_WAIT.as_nanos() as u64;
    tcp
}

/// A runtime with one kthread at `ip` under `daemon`, with a short TIME-WAIT.
pub fn runtime(daemon: &TcpDaemon, name: &str, ip: Ipv4Addr) -> Runtime {
    runtime_with(daemon, name, ip, test_tcp_settings())
}

/// A runtime with one kthread at `ip` under `daemon`, with TCP settings `tcp`.
pub fn runtime_with(daemon: &TcpDaemon, name: &str, ip: Ipv4Addr, tcp: TcpSettings) -> Runtime {
    Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(&daemon.socket, name))
            .net(NetConfig::new(ip, 24).tcp(tcp)),
    )
    .expect("start a networked runtime under iokerneld")
}

/// Starts the test peer with echo, sink, source (`source_len` bytes of the pattern for
/// `SEED`) and sockperf on the stack under test: a runtime called `name` at `subnet.2`.
pub fn start_server(daemon: &TcpDaemon, name: &str, source_len: u64) -> Server {
    match STACK {
        Stack::Corral => start_corral_server(daemon, name, daemon.ip(2), source_len),
        Stack::Linux => start_linux_server(daemon, source_len),
    }
}

/// The test peer in a new runtime called `name` at `ip`.
pub fn start_corral_server(
    daemon: &TcpDaemon,
    name: &str,
    ip: Ipv4Addr,
    source_len: u64,
) -> Server {
    start_corral_server_with(daemon, name, ip, source_len, test_tcp_settings())
}

/// The test peer in a new runtime called `name` at `ip`, with TCP settings `tcp`.
pub fn start_corral_server_with(
    daemon: &TcpDaemon,
    name: &str,
    ip: Ipv4Addr,
    source_len: u64,
    tcp: TcpSettings,
) -> Server {
    let rt = runtime_with(daemon, name, ip, tcp);
    let services = services(ip, source_len);
    let (_, served) = rt
        .block_on(move || serve::<CorralNet>(&services))
        .expect("start the test peer");
    Server {
        runtime: Some(rt),
        ip,
        served,
    }
}

fn start_linux_server(daemon: &TcpDaemon, source_len: u64) -> Server {
    let ip = daemon.host();
    let services = services(ip, source_len);
    // The TAP's host address may be assigned a moment after iokerneld's socket opens.
    let start = Instant::now();
    let served = loop {
        match serve::<LinuxNet>(&services) {
            Ok((_, served)) => break served,
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
                assert!(start.elapsed() < common::WAIT, "{ip} never appeared: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("start the test peer: {e}"),
        }
    };
    Server {
        runtime: None,
        ip,
        served,
    }
}

pub const SEED: u64 = 11;

fn services(ip: Ipv4Addr, source_len: u64) -> Vec<(SocketAddr, Service)> {
    let at = |port| SocketAddr::V4(SocketAddrV4::new(ip, port));
    vec![
        (at(ECHO), Service::Echo),
        (at(SINK), Service::Sink),
        (
            at(SOURCE),
            Service::Source {
                len: source_len,
                seed: SEED,
            },
        ),
        (at(SOCKPERF), Service::Sockperf),
    ]
}

/// Runs a Linux program with `stdin` from a file (or nothing), killing it after `limit`, and
/// returns its output; a program that fails or is killed fails the test.
pub fn run_tool(
    program: &str,
    args: &[&str],
    stdin: Option<&std::path::Path>,
    limit: Duration,
) -> Output {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match stdin {
        Some(path) => command.stdin(std::fs::File::open(path).expect("open the input")),
        None => command.stdin(Stdio::null()),
    };
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
    // Drain stdout and stderr on threads so a large output cannot block the program.
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{program} {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let output = Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(
        output.status.success(),
        "{program} {args:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// SHA-256 of `data`, in hex.
pub fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    corral_app_tcppeer::hex(&sha2::Sha256::digest(data))
}

/// A file of `len` pattern bytes for `seed` in a fresh temporary directory, and its SHA-256.
pub fn pattern_file(len: u64, seed: u64) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("input.bin");
    corral_app_tcppeer::pattern::write_file(&path, len, seed).unwrap();
    let sha = corral_app_tcppeer::hex(&corral_app_tcppeer::pattern::sha256(len, seed));
    (dir, path, sha)
}

/// The message counts sockperf reports for its valid duration.
#[derive(Debug)]
pub struct SockperfCounts {
    pub sent: u64,
    pub received: u64,
}

/// Reads `SentMessages=N; ReceivedMessages=M` from sockperf's `[Valid Duration]` line.
pub fn sockperf_counts(text: &str) -> SockperfCounts {
    let line = text
        .lines()
        .find(|l| l.contains("[Valid Duration]"))
        .unwrap_or_else(|| panic!("no [Valid Duration] line in sockperf's output:\n{text}"));
    let field = |name: &str| -> u64 {
        let start = line
            .find(name)
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            + name.len();
        line[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or_else(|_| panic!("bad {name} in {line}"))
    };
    SockperfCounts {
        sent: field("SentMessages="),
        received: field("ReceivedMessages="),
    }
}

/// Waits until the stack under test holds no connection any more (every one closed by both
/// sides has left its tables; TIME-WAIT, if any, has ended), within `limit`.
pub fn assert_connections_released(server: &Server, limit: Duration) {
    if server.runtime.is_none() {
        // Linux's stack: the server's handlers returned and dropped their sockets, which is
        // all a process can see of Linux's tables.
        assert_eq!(server.served.live(), 0);
        return;
    }
    let start = Instant::now();
    loop {
        let tcp = tcp_stats(server);
        if tcp.connections == 0 && tcp.live.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{} connections still in the table after {limit:?}: {:?}",
            tcp.connections,
            tcp.live.iter().take(5).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The TCP part of the serving runtime's `net_stats()`.
pub fn tcp_stats(server: &Server) -> TcpStats {
    server
        .runtime
        .as_ref()
        .expect("a Corral server")
        .net_stats()
        .expect("net stats")
        .tcp
}

/// Retransmissions of every kind in `tcp`.
pub fn retransmissions(tcp: &TcpStats) -> u64 {
    let c = &tcp.counters.conns;
    c.rto_retransmits + c.fast_retransmits + c.syn_retransmits
}

/// Segments the kernel has retransmitted on the TCP socket `fd` over its lifetime.
pub fn kernel_retransmits(fd: std::os::fd::RawFd) -> u64 {
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of `len` bytes; the descriptor is open.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    u64::from(info.tcpi_total_retrans)
}
