//! Starting a server process for a test on a port of its own, and knowing when it serves.
//!
//! A connect to the port is not proof: the port was free when the test picked it, and until the
//! server binds it anything else on the machine may take it, a parallel test's `bind(0)` or a
//! client's ephemeral port among them. A connect then reaches that other socket (or, with the
//! test's own ephemeral port equal to the target, the test itself through a simultaneous open),
//! while the server has failed to bind and gone. So [`spawn_listening`] reads the kernel's socket
//! tables instead: the server serves once a TCP socket in `LISTEN` on the port belongs to the
//! server process or one of its descendants. A server that exits before that lost its port (or
//! failed outright); it is started again on a new port, a bounded number of times.
//!
//! [`Behind`] is the other half: a server on Corral's runtime behind an iokerneld of its own
//! (a TAP device or an interface through AF_XDP), as the end-to-end tests of every Corral
//! server start one.

mod behind;

pub use behind::{Behind, TapSubnet, rss_bytes, serial, sibling_binary};

use std::collections::HashSet;
use std::net::{TcpListener, UdpSocket};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many times a server that exits before it listens is started again on a new port.
const STARTS: usize = 3;

/// A port free for TCP and UDP on 127.0.0.1 now, and never one this process handed out before
/// (the kernel offers just-released ports again, and two tests must not share one).
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local address").port();
        if handed_out.contains(&port) || UdpSocket::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        handed_out.push(port);
        return port;
    }
}

/// Starts `command(port)` on a free port and waits up to `patience` until the process listens
/// on TCP `port`. Panics, naming `what`, if it keeps exiting first or never listens.
pub fn spawn_listening(
    what: &str,
    patience: Duration,
    mut command: impl FnMut(u16) -> Command,
) -> (Child, u16) {
    let mut exits = Vec::new();
    for _ in 0..STARTS {
        let port = free_port();
        let mut child = command(port)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        match wait_listening(&mut child, port, patience) {
            Ok(()) => return (child, port),
            Err(Waited::Exited(status)) => exits.push(format!("port {port}: {status}")),
            Err(Waited::TimedOut) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what} did not listen on port {port} within {patience:?}");
            }
        }
    }
    panic!(
        "{what} exited before listening, {STARTS} times: {}",
        exits.join("; ")
    );
}

enum Waited {
    Exited(std::process::ExitStatus),
    TimedOut,
}

fn wait_listening(child: &mut Child, port: u16, patience: Duration) -> Result<(), Waited> {
    let deadline = Instant::now() + patience;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Waited::Exited(status));
        }
        if process_listens(child.id(), port) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Waited::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a TCP socket in `LISTEN` on `port` (any address, IPv4 or IPv6) is held by process
/// `pid` or one of its descendants (servers that fork their workers).
pub fn process_listens(pid: u32, port: u16) -> bool {
    let listeners = listening_inodes(port);
    if listeners.is_empty() {
        return false;
    }
    family_of(pid)
        .into_iter()
        .any(|p| socket_inodes(p).iter().any(|i| listeners.contains(i)))
}

/// The inodes of TCP sockets in `LISTEN` on `port`, from the kernel's tables for this network
/// namespace.
fn listening_inodes(port: u16) -> HashSet<u64> {
    let mut inodes = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        inodes.extend(
            text.lines()
                .skip(1)
                .filter_map(|l| listening_inode(l, port)),
        );
    }
    inodes
}

/// One line of `/proc/net/tcp{,6}`: its socket's inode if it listens on `port`.
fn listening_inode(line: &str, port: u16) -> Option<u64> {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
    const LISTEN: &str = "0A";
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = fields.get(1)?;
    let (_, local_port) = local.rsplit_once(':')?;
    if u16::from_str_radix(local_port, 16).ok()? != port || *fields.get(3)? != LISTEN {
        return None;
    }
    fields.get(9)?.parse().ok()
}

/// The inodes of the sockets process `pid` has open.
fn socket_inodes(pid: u32) -> Vec<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    fds.filter_map(|fd| {
        let target = std::fs::read_link(fd.ok()?.path()).ok()?;
        socket_inode(target.to_str()?)
    })
    .collect()
}

/// `socket:[INODE]`, as a socket's descriptor reads under `/proc/PID/fd`.
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// `pid` and every process descended from it now.
fn family_of(pid: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| {
                let p: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
                Some((p, parent_of(p)?))
            })
            .collect()
        })
        .unwrap_or_default();
    let mut family = vec![pid];
    let mut i = 0;
    while i < family.len() {
        let p = family[i];
        family.extend(parents.iter().filter(|&&(_, pp)| pp == p).map(|&(c, _)| c));
        i += 1;
    }
    family
}

/// The parent of process `pid`, from `/proc/PID/stat` (whose second field, the command name in
/// parentheses, may itself hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listening_line_gives_its_inode() {
        let line = "   3: 0100007F:ABCD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 123456 1 0000000000000000 100 0 0 10 0";
        assert_eq!(listening_inode(line, 0xABCD), Some(123456));
        assert_eq!(listening_inode(line, 0xABCE), None);
        let established = line.replace(" 0A ", " 01 ");
        assert_eq!(listening_inode(&established, 0xABCD), None);
        assert_eq!(listening_inode("garbage", 1), None);
    }

    #[test]
    fn socket_links_parse() {
        assert_eq!(socket_inode("socket:[42]"), Some(42));
        assert_eq!(socket_inode("pipe:[42]"), None);
        assert_eq!(socket_inode("socket:[x]"), None);
    }

    #[test]
    fn this_process_listening_is_seen_and_a_connect_alone_is_not_enough() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(process_listens(std::process::id(), port));
        // A child does not hold its parent's sockets.
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        assert!(!process_listens(child.id(), port));
        // The child's family includes its own children, not its parent.
        assert!(!family_of(child.id()).contains(&std::process::id()));
        assert!(family_of(std::process::id()).contains(&child.id()));
        let _ = child.kill();
        let _ = child.wait();
        drop(listener);
        assert!(!process_listens(std::process::id(), port));
    }

    #[test]
    fn a_server_is_found_listening_and_one_that_exits_is_started_again() {
        let (mut child, port) = spawn_listening("python3 server", Duration::from_secs(20), |p| {
            let mut c = Command::new("python3");
            c.args([
                "-c",
                "import socket,sys,time\n\
                 s=socket.socket(); s.bind(('127.0.0.1',int(sys.argv[1]))); s.listen()\n\
                 time.sleep(30)",
            ])
            .arg(p.to_string());
            c
        });
        assert!(process_listens(child.id(), port));
        let _ = child.kill();
        let _ = child.wait();

        let mut starts = 0;
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            spawn_listening("false", Duration::from_secs(5), |_| {
                starts += 1;
                Command::new("false")
            })
        }));
        let message = *result.unwrap_err().downcast::<String>().unwrap();
        assert!(
            message.contains("exited before listening, 3 times"),
            "{message}"
        );
        assert_eq!(starts, STARTS);
    }
}
