//! Starting servers on free ports and talking raw memcached protocol to them.
#![allow(dead_code)]

pub mod bad_input;
pub mod clients;
pub mod differential;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A server process, killed when dropped.
pub struct Running {
    pub child: Child,
    pub port: u16,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    pub fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    /// Resident memory of the process, from /proc.
    pub fn rss_bytes(&self) -> usize {
        rss_bytes(self.child.id())
    }

    /// Whether the server still listens on its port, for a failure message.
    pub fn describe(&self) -> String {
        let pid = self.child.id();
        let listens = corral_testserver::process_listens(pid, self.port);
        format!(
            "server pid {pid} on port {}: still listening: {listens}",
            self.port
        )
    }
}

pub use corral_testserver::rss_bytes;

/// A server under test, whichever backend serves it.
pub trait KvServer {
    /// A connection with a 20 s read timeout and Nagle off.
    fn connect(&self) -> TcpStream;
    /// The server process's resident memory.
    fn rss_bytes(&self) -> usize;
    /// Names the server in failure messages.
    fn label(&self) -> String;
}

impl KvServer for Running {
    fn connect(&self) -> TcpStream {
        Running::connect(self)
    }

    fn rss_bytes(&self) -> usize {
        Running::rss_bytes(self)
    }

    fn label(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

use corral_testserver::spawn_listening;

/// How long a server may take to listen.
const STARTUP: Duration = Duration::from_secs(20);

/// Starts `corral-kv` on a free port with extra flags.
pub fn start_kv(extra: &[&str]) -> Running {
    let (child, port) = spawn_listening("corral-kv", STARTUP, |port| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_corral-kv"));
        c.args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(extra)
            .stdin(Stdio::null());
        c
    });
    Running { child, port }
}

pub fn memcached_path() -> &'static str {
    let p = "/usr/bin/memcached";
    assert!(
        Path::new(p).exists(),
        "memcached 1.6.18 is not installed (scripts/setup.sh installs it)"
    );
    p
}

/// Starts the real memcached on a free port.
pub fn start_memcached(extra: &[&str]) -> Running {
    let (child, port) = spawn_listening("memcached", STARTUP, |port| {
        let mut c = Command::new(memcached_path());
        c.args([
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-u",
            "root",
            "-p",
            &port.to_string(),
        ])
        .args(extra)
        .stdin(Stdio::null())
        // `verbosity` in a test stream makes memcached log every command.
        .stderr(Stdio::null());
        c
    });
    Running { child, port }
}

/// Sends `request`, then `mn`, and returns every byte the server answered before its `MN`.
pub fn roundtrip(stream: &mut TcpStream, request: &[u8]) -> Vec<u8> {
    let mut req = request.to_vec();
    req.extend_from_slice(b"mn\r\n");
    stream.write_all(&req).unwrap();
    let mut got = read_until(stream, |got| {
        got.ends_with(b"MN\r\n") && (got.len() == 4 || got[..got.len() - 4].ends_with(b"\r\n"))
    });
    got.truncate(got.len() - 4);
    got
}

/// Reads until what the server sent satisfies `done`; returns it all.
pub fn read_until(stream: &mut TcpStream, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    try_read_until(stream, done)
        .unwrap_or_else(|(e, got)| panic!("{e}; got so far {:?}", String::from_utf8_lossy(&got)))
}

/// As [`read_until`], but a read error, a time-out or the server closing the connection first
/// is returned with what had arrived.
#[allow(dead_code, reason = "not every test binary asks")]
pub fn try_read_until(
    stream: &mut TcpStream,
    done: impl Fn(&[u8]) -> bool,
) -> Result<Vec<u8>, (std::io::Error, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    while !done(&got) {
        match stream.read(&mut buf) {
            Ok(0) => {
                let closed = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                );
                return Err((closed, got));
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => return Err((e, got)),
        }
    }
    Ok(got)
}

/// Reads until the server closes the connection (or 20 s pass); returns what it sent.
pub fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (got, true),
            Err(_) => return (got, false),
        }
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
