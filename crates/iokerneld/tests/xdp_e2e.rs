//! iokerneld on a real interface through AF_XDP (`--nic xdp`), driven by Linux from another
//! network namespace over a veth pair: the root namespace's end carries the XDP program and
//! iokerneld's sockets, the namespace's end stands in for the rest of the network.
//!
//! What is checked: Linux programs reach runtimes (ping flood, UDP, TCP both ways with a
//! SHA-256 over the bytes), while the host's own address on the interface keeps serving, and a
//! packet socket on the interface never sees a frame for a runtime; `kill -9` of iokerneld
//! gives the interface back to Linux; a second iokerneld on the interface is refused; a runtime
//! that dies gives its address back to Linux, and a new runtime gets it again; malformed frames
//! from the wire are counted and harm no one; with four queues, flows spread over the sockets.
//!
//! Each test makes its own veth pair and namespace (named and addressed by pid, see
//! `corral_xdp::testnet`) and its own iokerneld; tests run one at a time, as they hand out the
//! same CPU. Waits are bounded only so that a broken build fails instead of hanging.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::packet::PacketSocket;
use common::{IOKERNELD, Launch, WAIT, serial, wait_until};
use corral::net::{NetConfig, UdpSpawner};
use corral::{Config, IokernelSettings, Runtime};
use corral_app_tcppeer::{CorralNet, Service, serve};
use corral_xdp::testnet::VethPair;
use serde_json::Value;

const ECHO: u16 = 7;
const SOURCE: u16 = 19;
const UDP_ECHO: u16 = 7;
const SOURCE_LEN: u64 = 8 << 20;
const SEED: u64 = 5;

/// Set in a child copy of this binary that is to be a runtime and nothing else (see
/// [`child_runtime`]): `SOCKET IP`.
const CHILD: &str = "CORRAL_XDP_TEST_CHILD";

fn veth(queues: u32) -> VethPair {
    let pair = VethPair::create(queues).expect("create a veth pair and a namespace");
    pair.full_checksums()
        .expect("turn off the namespace end's checksum offload (ethtool: scripts/setup.sh)");
    pair
}

fn start_daemon(pair: &VethPair, extra: &[&str]) -> common::Daemon {
    let mut args = vec![
        "--log-level",
        "info",
        "--nic",
        "xdp",
        "--interface",
        &pair.host,
    ];
    args.extend_from_slice(extra);
    common::Daemon::launch(Launch {
        args: &args,
        socket: "iokerneld.sock",
        extra: &[],
        log: true,
    })
}

/// A runtime at `ip` (in the pair's /29) with the TCP echo and source services and a UDP echo.
fn start_runtime(daemon: &common::Daemon, name: &str, ip: Ipv4Addr) -> (Runtime, UdpSpawner) {
    let rt = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(&daemon.socket, name))
            .net(NetConfig::new(ip, 29)),
    )
    .expect("start a runtime under iokerneld");
    let at = |port| SocketAddr::V4(SocketAddrV4::new(ip, port));
    let services = vec![
        (at(ECHO), Service::Echo),
        (
            at(SOURCE),
            Service::Source {
                len: SOURCE_LEN,
                seed: SEED,
            },
        ),
    ];
    rt.block_on(move || serve::<CorralNet>(&services))
        .expect("start the TCP services");
    let udp = rt.block_on(move || {
        UdpSpawner::bind(SocketAddrV4::new(ip, UDP_ECHO), |payload, _src, reply| {
            reply.send(&payload).expect("echo");
        })
        .expect("bind the UDP echo")
    });
    (rt, udp)
}

/// Runs a program inside the pair's namespace; its output, or the test fails.
fn in_namespace(pair: &VethPair, program: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.namespace])
        .args(program)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program:?} failed:\n{text}");
    text
}

/// Whether `ping -c 1` from the namespace gets an answer from `ip` within two seconds. (The
/// very first echo to a newly registered runtime can go unanswered until the next frame, over
/// TAP as well: tests that start a runtime wait for a first answer.)
fn answers_ping(pair: &VethPair, ip: Ipv4Addr) -> bool {
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &pair.namespace,
            "ping",
            "-c",
            "1",
            "-W",
            "2",
        ])
        .arg(ip.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `N packets transmitted, M received` from ping's summary.
fn ping_counts(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .unwrap_or_else(|| panic!("no summary in ping's output:\n{text}"));
    let mut numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<u64>().unwrap());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

fn nic(stats: &Value) -> &Value {
    &stats["nic"]
}

fn counter(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {v:#}"))
}

/// Frames seen by a packet socket on an interface (which the kernel shows only frames that XDP
/// passed to Linux): how many were addressed to `watched` (IPv4 destination, or an ARP
/// packet's target), and how many to anything else.
struct Sniffer {
    stop: Arc<AtomicBool>,
    watched_frames: Arc<AtomicU64>,
    other_frames: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sniffer {
    fn start(interface: &str, watched: Ipv4Addr) -> Sniffer {
        let socket = PacketSocket::bind(interface, true, Duration::from_millis(50));
        let stop = Arc::new(AtomicBool::new(false));
        let watched_frames = Arc::new(AtomicU64::new(0));
        let other_frames = Arc::new(AtomicU64::new(0));
        let (s, w, o) = (stop.clone(), watched_frames.clone(), other_frames.clone());
        let target = watched.octets();
        let thread = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            while !s.load(Ordering::Relaxed) {
                let Some(n) = socket.recv(&mut buf).filter(|&n| n >= 14) else {
                    continue;
                };
                let f = &buf[..n];
                let to_watched = match [f[12], f[13]] {
                    [0x08, 0x00] => f.len() >= 34 && f[30..34] == target,
                    [0x08, 0x06] => f.len() >= 42 && f[38..42] == target,
                    _ => false,
                };
                let c = if to_watched { &w } else { &o };
                c.fetch_add(1, Ordering::Relaxed);
            }
        });
        Sniffer {
            stop,
            watched_frames,
            other_frames,
            thread: Some(thread),
        }
    }

    /// (frames to the watched address, other frames) so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.watched_frames.load(Ordering::Relaxed),
            self.other_frames.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads everything from `stream` until it closes; the bytes' SHA-256.
fn sha256_of_stream(mut stream: TcpStream) -> ([u8; 32], u64) {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                hash.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) => panic!("reading the source after {total} bytes: {e}"),
        }
    }
    (hash.finalize().into(), total)
}

#[test]
fn linux_reaches_runtimes_through_xdp_while_the_host_keeps_its_own_traffic() {
    let _serial = serial();
    let pair = veth(1);
    // The host's own server on the interface's address, in the root namespace.
    let host_server = TcpListener::bind((pair.host_ip, 0)).expect("bind on the host end");
    let host_port = host_server.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in host_server.incoming().flatten() {
            let mut line = [0u8; 64];
            let n = conn.read(&mut line).unwrap_or(0);
            let _ = conn.write_all(&line[..n]);
        }
    });
    let mut daemon = start_daemon(&pair, &[]);
    let stats = daemon.stats();
    assert_eq!(nic(&stats)["backend"], "xdp", "{:#}", nic(&stats));
    assert_eq!(
        nic(&stats)["mode"],
        "native copy",
        "veth runs XDP natively, without zero-copy"
    );
    let ip = pair.spare[0];
    let sniffer = Sniffer::start(&pair.host, ip);
    let (rt, _udp) = start_runtime(&daemon, "served", ip);

    // ping -f: every echo comes back.
    let text = in_namespace(
        &pair,
        &["ping", "-f", "-c", "2000", "-s", "1000", &ip.to_string()],
    );
    let (sent, received) = ping_counts(&text);
    assert_eq!(
        (sent, received),
        (2000, 2000),
        "ping -f:\n{text}\n{}",
        daemon.log()
    );

    // UDP: a thousand datagrams from Linux's stack in the namespace, each echoed intact.
    pair.inside(|| {
        let socket = UdpSocket::bind((pair.peer_ip, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut buf = [0u8; 1500];
        for i in 0..1000u32 {
            let payload: Vec<u8> = (0..(i % 1400 + 4))
                .map(|j| (i.wrapping_mul(7) + j) as u8)
                .collect();
            socket.send_to(&payload, (ip, UDP_ECHO)).unwrap();
            let (n, from) = socket
                .recv_from(&mut buf)
                .unwrap_or_else(|e| panic!("datagram {i}: no echo: {e}"));
            assert_eq!(from, SocketAddr::V4(SocketAddrV4::new(ip, UDP_ECHO)));
            assert_eq!(&buf[..n], &payload[..], "datagram {i}");
        }
    });

    // TCP from the runtime to Linux: the source's bytes, checked by SHA-256.
    let (digest, len) = pair.inside(|| {
        let stream = TcpStream::connect_timeout(&SocketAddr::from((ip, SOURCE)), WAIT)
            .expect("connect to the source");
        sha256_of_stream(stream)
    });
    assert_eq!(len, SOURCE_LEN);
    assert_eq!(
        digest,
        corral_app_tcppeer::pattern::sha256(SOURCE_LEN, SEED),
        "the source's bytes arrived changed"
    );

    // TCP from Linux to the runtime: nc sends a file to the echo service and gets it back.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    corral_app_tcppeer::pattern::write_file(&file, 2 << 20, 9).unwrap();
    let back = dir.path().join("back");
    let script = format!(
        "nc -N {ip} {ECHO} < {} > {}",
        file.display(),
        back.display()
    );
    in_namespace(&pair, &["sh", "-c", &script]);
    assert!(
        std::fs::read(&file).unwrap() == std::fs::read(&back).unwrap(),
        "the echo service's reply differs from what nc sent"
    );

    // The host's own address keeps working for the namespace.
    let reply = pair.inside(|| {
        let mut s = TcpStream::connect((pair.host_ip, host_port)).expect("connect to the host");
        s.write_all(b"host?").unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        buf
    });
    assert_eq!(&reply, b"host?");
    assert!(
        answers_ping(&pair, pair.host_ip),
        "the host stopped answering ping"
    );

    let (to_runtime, other) = sniffer.counts();
    assert_eq!(
        to_runtime, 0,
        "Linux saw {to_runtime} frames for the runtime's address (and {other} others)"
    );
    assert!(other > 0, "Linux saw none of its own traffic");
    let stats = daemon.stats();
    let n = nic(&stats);
    assert!(counter(n, "rx_frames") > 4000, "{n:#}");
    assert_eq!(counter(n, "rx_errors"), 0, "{n:#}");
    assert_eq!(counter(n, "tx_errors"), 0, "{n:#}");
    assert_eq!(counter(n, "rx_device_drops"), 0, "{n:#}");
    for (reason, count) in stats["net"]["drops"].as_object().unwrap() {
        assert_eq!(
            count, 0,
            "iokerneld dropped frames as {reason}: {:#}",
            stats["net"]
        );
    }
    daemon.assert_alive();
    drop(rt);
}

#[test]
fn kill_9_gives_the_interface_back_and_a_second_iokerneld_is_refused() {
    let _serial = serial();
    let pair = veth(1);
    let mut daemon = start_daemon(&pair, &[]);
    let ip = pair.spare[0];
    // In a child process: a runtime ends its process when iokerneld goes.
    let mut child = spawn_child_runtime(&daemon, ip);
    wait_until("the runtime to answer ping", WAIT, || {
        answers_ping(&pair, ip)
    });
    assert!(pair.xdp_attached());

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(IOKERNELD)
        .args(["--core", "0", "--managed-cores", "1", "--shield", "off"])
        .args(["--nic", "xdp", "--interface", &pair.host])
        .arg("--socket")
        .arg(dir.path().join("second.sock"))
        .stdin(Stdio::null())
        .output()
        .expect("run a second iokerneld");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("already has an XDP program"),
        "a second iokerneld on {} was not refused as it should be: {}\n{text}",
        pair.host,
        out.status
    );
    assert!(
        answers_ping(&pair, ip),
        "the refused start disturbed the first"
    );

    daemon.stop_with(libc::SIGKILL);
    wait_until("the XDP program to go", WAIT, || !pair.xdp_attached());
    // Linux answers for the address now that it is given to it.
    let cidr = format!("{ip}/29");
    corral_xdp::testnet::run(&["ip", "addr", "add", &cidr, "dev", &pair.host]).unwrap();
    pair.flush_neighbors().unwrap();
    assert!(
        answers_ping(&pair, ip),
        "Linux does not answer on the interface"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Not a test by itself: in a child copy of this binary started with [`CHILD`] set, this is a
/// runtime registered with the given iokerneld, serving until it is killed.
#[test]
fn child_runtime() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (socket, ip) = spec.split_once(' ').expect("SOCKET IP");
    let _runtime = Runtime::new(
        Config::default()
            .kthreads(1)
            .iokernel(IokernelSettings::new(socket, "child"))
            .net(NetConfig::new(ip.parse().unwrap(), 29)),
    )
    .expect("start the child runtime");
    println!("registered");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::park();
    }
}

fn spawn_child_runtime(daemon: &common::Daemon, ip: Ipv4Addr) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_runtime",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD, format!("{} {ip}", daemon.socket.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a child runtime")
}

fn runtimes(stats: &Value) -> usize {
    stats["runtimes"].as_array().map_or(0, Vec::len)
}

#[test]
fn a_runtime_that_dies_gives_its_address_back_and_a_new_one_gets_it() {
    let _serial = serial();
    let pair = veth(1);
    let mut daemon = start_daemon(&pair, &[]);
    let ip = pair.spare[1];
    let mut child = spawn_child_runtime(&daemon, ip);
    wait_until("the child runtime to answer ping", WAIT, || {
        answers_ping(&pair, ip)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    daemon.wait_for("the dead runtime to be gone", |s| runtimes(s) == 0);

    // Its address now goes to Linux: with the address on the host end, Linux answers.
    let cidr = format!("{ip}/29");
    corral_xdp::testnet::run(&["ip", "addr", "add", &cidr, "dev", &pair.host]).unwrap();
    pair.flush_neighbors().unwrap();
    let before = counter(nic(&daemon.stats()), "rx_frames");
    assert!(
        answers_ping(&pair, ip),
        "Linux does not answer for the released address"
    );
    assert_eq!(
        counter(nic(&daemon.stats()), "rx_frames"),
        before,
        "iokerneld still takes the released address's frames"
    );
    corral_xdp::testnet::run(&["ip", "addr", "del", &cidr, "dev", &pair.host]).unwrap();
    pair.flush_neighbors().unwrap();

    // A new runtime registers the address again and is served.
    let mut child = spawn_child_runtime(&daemon, ip);
    wait_until("the new runtime to answer ping", WAIT, || {
        answers_ping(&pair, ip)
    });
    assert!(counter(nic(&daemon.stats()), "rx_frames") > before);
    child.kill().unwrap();
    child.wait().unwrap();
    daemon.assert_alive();
}

/// A raw frame of Ethernet, IPv4 and UDP to `dst_mac`/`dst_ip` from the namespace's end, its
/// IPv4 checksum right and its UDP checksum zero (none).
fn udp_frame(pair: &VethPair, dst_mac: [u8; 6], dst_ip: Ipv4Addr, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&pair.peer_mac);
    f.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + payload.len()) as u16;
    f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
    f[16..18].copy_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&pair.peer_ip.octets());
    f.extend_from_slice(&dst_ip.octets());
    f.extend_from_slice(&4242u16.to_be_bytes());
    f.extend_from_slice(&UDP_ECHO.to_be_bytes());
    f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    fix_ip_checksum(&mut f);
    f
}

fn fix_ip_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    f[24..26].fill(0);
    let mut sum = 0u32;
    for pair in f[14..(14 + ihl).min(f.len())].chunks(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// Sums a JSON object of counters.
fn sum(v: &Value) -> u64 {
    v.as_object()
        .map_or(0, |o| o.values().filter_map(Value::as_u64).sum())
}

#[test]
fn malformed_frames_from_the_wire_are_counted_and_harm_no_one() {
    let _serial = serial();
    let pair = veth(1);
    let mut daemon = start_daemon(&pair, &[]);
    let ip = pair.spare[0];
    let (rt, _udp) = start_runtime(&daemon, "target", ip);
    wait_until("the runtime to answer ping", WAIT, || {
        answers_ping(&pair, ip)
    });
    let mac = {
        let stats = daemon.stats();
        let text = stats["runtimes"][0]["net"]["mac"]
            .as_str()
            .unwrap()
            .to_owned();
        corral_xdp::parse_mac(&text).unwrap_or_else(|| panic!("MAC {text:?}"))
    };
    let good = udp_frame(&pair, mac, ip, b"0123456789abcdef");
    let mut frames = Vec::new();
    // Header damage the XDP program lets through (it reads only the destination), which
    // iokerneld must refuse: a wrong checksum, a total length past the frame, a bad header
    // length, a fragment, a UDP length past the datagram, and frames cut short.
    let mut f = good.clone();
    f[24] ^= 0xff;
    frames.push(f);
    let mut f = good.clone();
    f[16..18].copy_from_slice(&900u16.to_be_bytes());
    fix_ip_checksum(&mut f);
    frames.push(f);
    let mut f = good.clone();
    f[14] = 0x4f;
    frames.push(f);
    let mut f = good.clone();
    f[20] = 0x20;
    fix_ip_checksum(&mut f);
    frames.push(f);
    let mut f = good.clone();
    f[38..40].copy_from_slice(&600u16.to_be_bytes());
    frames.push(f);
    for cut in [34, 38, 41] {
        frames.push(good[..cut].to_vec());
    }
    // Random bytes behind a valid header to the runtime, of random lengths.
    let mut rng = fastrand::Rng::with_seed(27);
    for _ in 0..500 {
        let mut f = good[..34].to_vec();
        f.extend((0..rng.usize(0..1400)).map(|_| rng.u8(..)));
        if rng.bool() {
            // A consistent IPv4 header over the random rest.
            let total = (f.len() - 14) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            f[23] = rng.u8(..);
            fix_ip_checksum(&mut f);
        }
        frames.push(f);
    }
    let before = daemon.stats();
    let sent = pair.inside(|| {
        PacketSocket::bind(&pair.peer, false, Duration::ZERO).send_all(&mut frames.clone())
    });
    assert_eq!(
        sent,
        frames.len(),
        "the packet socket sent only {sent} frames"
    );
    let rx = |s: &Value| counter(nic(s), "rx_frames");
    // Delivered, refused by the parser, or dropped for a reason: the switch's own totals.
    let accounted = |s: &Value| {
        let n = &s["net"];
        counter(n, "rx_packets") + sum(&n["rx_parse_drops"]) + sum(&n["drops"])
    };
    let stats = daemon.wait_for("every frame to reach iokerneld", |s| {
        rx(s) - rx(&before) >= frames.len() as u64
    });
    let got = rx(&stats) - rx(&before);
    assert_eq!(
        got,
        frames.len() as u64,
        "iokerneld received more than was sent"
    );
    assert_eq!(
        accounted(&stats) - accounted(&before),
        got,
        "a frame from the wire was neither delivered nor counted as dropped: {:#}",
        stats["net"]
    );
    assert!(
        sum(&stats["net"]["rx_parse_drops"]) - sum(&before["net"]["rx_parse_drops"]) >= 8,
        "the damaged headers were not refused: {:#}",
        stats["net"]
    );
    daemon.assert_alive();
    // The runtime still answers, over UDP and ping.
    pair.inside(|| {
        let socket = UdpSocket::bind((pair.peer_ip, 0)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        socket.send_to(b"still here", (ip, UDP_ECHO)).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = socket
            .recv_from(&mut buf)
            .expect("an echo after the garbage");
        assert_eq!(&buf[..n], b"still here");
    });
    assert!(answers_ping(&pair, ip));
    drop(rt);
}

/// scapy in the namespace, as another host on the wire would be: TCP segments with malformed
/// options (an option list longer than its header, a zero-length option) open nothing and
/// deliver nothing, and the connection they were sent on still echoes.
#[test]
fn malformed_tcp_options_from_scapy_over_the_wire_harm_no_connection() {
    let _serial = serial();
    let pair = veth(1);
    let mut daemon = start_daemon(&pair, &[]);
    let ip = pair.spare[0];
    let (rt, _udp) = start_runtime(&daemon, "scapy-target", ip);
    wait_until("the runtime to answer ping", WAIT, || {
        answers_ping(&pair, ip)
    });
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/scapy/bad_options.py");
    let o = ip.octets();
    let target_mac = format!("02:43:{:02x}:{:02x}:{:02x}:{:02x}", o[0], o[1], o[2], o[3]);
    let fake_ip = pair.spare[2].to_string();
    let text = in_namespace(
        &pair,
        &[
            "/usr/bin/python3",
            script.to_str().unwrap(),
            &pair.peer,
            &fake_ip,
            "02:99:00:00:00:78",
            &ip.to_string(),
            &target_mac,
            &ECHO.to_string(),
        ],
    );
    let report: Value = serde_json::from_str(text.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("bad_options.py printed no report ({e}): {text}"));
    assert_ne!(report["overrun"], "syn-ack", "{report}");
    assert_ne!(report["zero_length"], "syn-ack", "{report}");
    assert_eq!(report["established"], "ignored", "{report}");
    daemon.assert_alive();
    drop(rt);
}

#[test]
fn with_four_queues_flows_spread_over_the_sockets_and_each_is_served() {
    let _serial = serial();
    let pair = veth(4);
    let mut daemon = start_daemon(&pair, &[]);
    let stats = daemon.stats();
    assert!(
        nic(&stats)["description"]
            .as_str()
            .is_some_and(|d| d.contains("4 queue(s)")),
        "{:#}",
        nic(&stats)
    );
    let ip = pair.spare[0];
    let (rt, _udp) = start_runtime(&daemon, "multi", ip);
    pair.inside(|| {
        for flow in 0..64u32 {
            let mut s = TcpStream::connect_timeout(&SocketAddr::from((ip, ECHO)), WAIT)
                .unwrap_or_else(|e| panic!("flow {flow}: {e}"));
            let msg = format!("flow {flow}");
            s.write_all(msg.as_bytes()).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut back = String::new();
            s.read_to_string(&mut back).unwrap();
            assert_eq!(back, msg);
        }
    });
    let stats = daemon.stats();
    let queues: Vec<u64> = nic(&stats)["queue_rx_frames"]
        .as_array()
        .expect("per-queue counts")
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(queues.len(), 4);
    let used = queues.iter().filter(|&&n| n > 0).count();
    assert!(used >= 2, "64 flows all arrived on one queue: {queues:?}");
    daemon.assert_alive();
    drop(rt);
}
