//! Starting corral-dns and NSD on free ports over the same zones, and talking DNS to them.
#![allow(dead_code)]

pub mod diff;

pub use corral_testserver::free_port;
use corral_testserver::spawn_listening;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The test zones, as `corral-dns` arguments take them and NSD's config names them.
pub const ZONES: &[(&str, &str)] = &[
    ("example.com", "example.com.zone"),
    ("example.org", "example.org.zone"),
    ("child.example.com", "child.example.com.zone"),
    ("2.0.192.in-addr.arpa", "2.0.192.in-addr.arpa.zone"),
];

pub fn zones_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zones")
}

/// A server process, killed when dropped.
pub struct Running {
    pub child: Child,
    pub port: u16,
    pub name: &'static str,
    _dir: Option<TempDir>,
}

impl Running {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "corral-dns-{tag}-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How long a server may take to listen.
const STARTUP: Duration = Duration::from_secs(30);

/// Starts `corral-dns --runtime linux` with the test zones and one UDP thread, so that it
/// answers datagrams in the order they come (as NSD with one server process does).
pub fn start_corral_dns(extra: &[&str]) -> Running {
    let (child, port) = spawn_listening("corral-dns", STARTUP, |port| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_corral-dns"));
        c.current_dir(zones_dir())
            .args([
                "--runtime",
                "linux",
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-t",
                "1",
            ])
            .args(ZONES.iter().map(|(o, f)| format!("{o}={f}")))
            .args(extra)
            .stdin(Stdio::null());
        c
    });
    Running {
        child,
        port,
        name: "corral-dns",
        _dir: None,
    }
}

pub fn nsd_path() -> &'static str {
    let p = "/usr/sbin/nsd";
    assert!(
        Path::new(p).exists(),
        "NSD is not installed at {p}: the differential test needs it (scripts/setup.sh installs it)"
    );
    p
}

/// Starts NSD on the same zones with one server process, minimal responses (see the
/// differential test for why), and no rate limiting.
pub fn start_nsd() -> Running {
    let nsd = nsd_path();
    let dir = TempDir::new("nsd");
    let (child, port) = spawn_listening("nsd", STARTUP, |port| {
        let d = dir.0.display();
        let mut conf = format!(
            "server:\n  ip-address: 127.0.0.1@{port}\n  port: {port}\n  username: \"\"\n  chroot: \"\"\n  \
             zonesdir: \"{zones}\"\n  database: \"\"\n  zonelistfile: \"{d}/zone.list\"\n  \
             xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  \
             logfile: \"{d}/nsd.log\"\n  server-count: 1\n  minimal-responses: yes\n  \
             hide-version: yes\n  hide-identity: yes\n  rrl-ratelimit: 0\n  verbosity: 0\n\
             remote-control:\n  control-enable: no\n",
            zones = zones_dir().display()
        );
        for (origin, file) in ZONES {
            conf.push_str(&format!("zone:\n  name: {origin}\n  zonefile: {file}\n"));
        }
        let conf_path = dir.0.join("nsd.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let mut c = Command::new(nsd);
        c.args(["-d", "-c"])
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    });
    Running {
        child,
        port,
        name: "nsd",
        _dir: Some(dir),
    }
}

/// A UDP client of one server. Each exchange sends the message and a probe query, waits for
/// the probe's answer, then sends a second probe and waits for that: a server that reads
/// datagrams in batches (NSD) may answer within a batch out of order, but has answered the
/// whole batch holding the message before it reads the second probe. Every other datagram
/// that came back is the answer to the message, and silence is known to be silence without
/// waiting for a time-out.
pub struct UdpClient {
    sock: UdpSocket,
    probe_id: u16,
}

pub const PROBE_NAME: &[u8] = b"\x05probe\x07example\x03com\x00";

impl UdpClient {
    pub fn new(server: SocketAddr) -> UdpClient {
        let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
        sock.connect(server).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        UdpClient { sock, probe_id: 0 }
    }

    pub fn exchange(&mut self, msg: &[u8]) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        self.sock.send(msg).unwrap();
        for _ in 0..2 {
            self.probe(&mut got);
        }
        got
    }

    /// Sends `msg`, whose answer is known to be due (the other server gave `n` datagrams),
    /// and reads until `n` datagrams with its ID are in. A datagram with another ID is a late
    /// answer to something earlier, which the caller should see: it is returned too.
    pub fn exchange_expecting(&mut self, msg: &[u8], n: usize) -> Vec<Vec<u8>> {
        self.sock.send(msg).unwrap();
        let mut got = Vec::new();
        let mut matching = 0;
        let mut buf = [0u8; 65536];
        while matching < n {
            // Nothing in 20 s: the caller reports the difference with the message.
            let Ok(len) = self.sock.recv(&mut buf) else {
                break;
            };
            let d = &buf[..len];
            if d.len() >= 2 && d[..2] == msg[..2] {
                matching += 1;
            }
            got.push(d.to_vec());
        }
        got
    }

    fn probe(&mut self, got: &mut Vec<Vec<u8>>) {
        self.probe_id = self.probe_id.wrapping_add(1);
        let id = self.probe_id.to_be_bytes();
        let probe = corral_dns_proto::message::query(self.probe_id, PROBE_NAME, 16, None);
        self.sock.send(&probe).unwrap();
        let mut buf = [0u8; 65536];
        loop {
            let n = self
                .sock
                .recv(&mut buf)
                .expect("an answer to the probe query");
            let d = &buf[..n];
            if n >= 12 && d[..2] == id && d[12..].starts_with(PROBE_NAME) {
                return;
            }
            got.push(d.to_vec());
        }
    }
}

/// A TCP connection to one server, several queries on it in turn.
pub struct TcpClient {
    stream: TcpStream,
}

impl TcpClient {
    pub fn new(server: SocketAddr) -> TcpClient {
        let stream = TcpStream::connect(server).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        TcpClient { stream }
    }

    pub fn exchange(&mut self, msg: &[u8]) -> Vec<u8> {
        let mut framed = (msg.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(msg);
        self.stream.write_all(&framed).unwrap();
        let mut len = [0u8; 2];
        self.stream.read_exact(&mut len).expect("a framed response");
        let mut resp = vec![0u8; usize::from(u16::from_be_bytes(len))];
        self.stream.read_exact(&mut resp).expect("a whole response");
        resp
    }
}

/// A small seeded generator (xorshift64*), so a failing stream can be replayed from its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Runs `dig` or `kdig` against `server` without recursion and with a 10 s time-out; returns
/// what it printed, failing the test if it failed.
pub fn dig(tool: &str, server: SocketAddr, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args([
            &format!("@{}", server.ip()),
            "-p",
            &server.port().to_string(),
            "+norecurse",
            "+time=10",
        ])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} ({e}); scripts/setup.sh installs it"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{tool} {args:?} failed: {text}");
    text
}

/// `tests/dnspython_check.py` against the server at `addr`: dnspython, a resolver library,
/// asks each kind of question and reads every answer through its own parser.
pub fn dnspython_checks(addr: SocketAddr) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dnspython_check.py");
    // Debian's interpreter, where python3-dnspython is installed (scripts/setup.sh).
    let out = Command::new("/usr/bin/python3")
        .arg(script)
        .args([addr.ip().to_string(), addr.port().to_string()])
        .output()
        .expect("run /usr/bin/python3 (scripts/setup.sh installs python3-dnspython)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("all checks passed"),
        "dnspython_check.py against {addr}:\n{text}"
    );
}

/// `dig` over UDP and TCP, an NXDOMAIN, and an answer too big for 512 bytes that dig retries
/// over TCP by itself (and, told not to, shows truncated).
pub fn dig_answers_over_udp_and_tcp(server: SocketAddr) {
    let short = dig("dig", server, &["+short", "www.example.com", "A"]);
    assert_eq!(
        short,
        "web.example.com.\nhost.example.com.\n192.0.2.80\n192.0.2.81\n"
    );
    let tcp = dig("dig", server, &["+tcp", "+short", "mail.example.com", "A"]);
    assert_eq!(tcp, "192.0.2.25\n");
    let nx = dig("dig", server, &["nothing.example.com", "A"]);
    assert!(
        nx.contains("status: NXDOMAIN") && nx.contains("flags: qr aa;"),
        "{nx}"
    );
    // 36 A records do not fit 512 bytes: dig sees TC and asks again over TCP by itself.
    let big = dig("dig", server, &["+bufsize=512", "big.example.com", "A"]);
    assert!(big.contains("Truncated, retrying in TCP mode"), "{big}");
    assert!(big.contains("ANSWER: 36"), "{big}");
    // Told not to retry, it shows the truncated answer itself.
    let tc = dig(
        "dig",
        server,
        &["+ignore", "+bufsize=512", "big.example.com", "A"],
    );
    assert!(
        tc.contains("flags: qr aa tc;") && tc.contains("ANSWER: 0"),
        "{tc}"
    );
}
