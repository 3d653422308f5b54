//! The Linux DNS servers Corral is compared against, each configured the same way: serve the
//! benchmark zone at one address with one server thread or process (NSD `server-count: 1`;
//! Knot `udp-workers`, `tcp-workers` and `background-workers: 1`; gdnsd `udp_threads` and
//! `tcp_threads: 1`), no rate limiting, and nothing written outside its directory.

use std::fmt;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::ORIGIN;

/// A Linux DNS server from Debian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinuxDns {
    Nsd,
    Knot,
    Gdnsd,
}

impl LinuxDns {
    pub const ALL: [LinuxDns; 3] = [LinuxDns::Nsd, LinuxDns::Knot, LinuxDns::Gdnsd];

    pub fn name(self) -> &'static str {
        match self {
            LinuxDns::Nsd => "nsd",
            LinuxDns::Knot => "knot",
            LinuxDns::Gdnsd => "gdnsd",
        }
    }

    /// The executable, as Debian installs it on the `PATH`.
    pub fn program(self) -> &'static str {
        match self {
            LinuxDns::Nsd => "nsd",
            LinuxDns::Knot => "knotd",
            LinuxDns::Gdnsd => "gdnsd",
        }
    }

    /// Writes the server's configuration into `dir` (which must exist) to serve `zone`, a
    /// master file for [`ORIGIN`], at `addr`; returns the arguments to start it in the
    /// foreground with. It stops on `SIGTERM`.
    pub fn configure(
        self,
        dir: &Path,
        zone: &Path,
        addr: SocketAddr,
    ) -> Result<Vec<String>, String> {
        let d = dir.display();
        let z = zone.display();
        let (ip, port) = (addr.ip(), addr.port());
        let write = |path: &Path, text: String| {
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
        };
        match self {
            LinuxDns::Nsd => {
                let path = dir.join("nsd.conf");
                write(
                    &path,
                    format!(
                        "server:\n  ip-address: {ip}@{port}\n  port: {port}\n  username: \"\"\n  \
                         chroot: \"\"\n  database: \"\"\n  zonelistfile: \"{d}/zone.list\"\n  \
                         xfrdfile: \"{d}/xfrd.state\"\n  xfrdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  \
                         logfile: \"{d}/nsd.log\"\n  server-count: 1\n  minimal-responses: yes\n  \
                         hide-version: yes\n  hide-identity: yes\n  rrl-ratelimit: 0\n  verbosity: 0\n\
                         remote-control:\n  control-enable: no\n\
                         zone:\n  name: {ORIGIN}\n  zonefile: \"{z}\"\n"
                    ),
                )?;
                Ok(vec!["-d".into(), "-c".into(), path.display().to_string()])
            }
            LinuxDns::Knot => {
                let path = dir.join("knot.conf");
                write(
                    &path,
                    format!(
                        "server:\n  rundir: \"{d}\"\n  listen: {ip}@{port}\n  udp-workers: 1\n  \
                         tcp-workers: 1\n  background-workers: 1\n  identity: \"\"\n  version: \"\"\n\
                         database:\n  storage: \"{d}\"\n\
                         log:\n  - target: stderr\n    any: warning\n\
                         zone:\n  - domain: {ORIGIN}\n    file: \"{z}\"\n    storage: \"{d}\"\n    \
                         zonefile-sync: -1\n    journal-content: none\n"
                    ),
                )?;
                Ok(vec!["-c".into(), path.display().to_string()])
            }
            LinuxDns::Gdnsd => {
                let root = dir.join("gdnsd");
                let zones = root.join("zones");
                std::fs::create_dir_all(&zones).map_err(|e| format!("{}: {e}", zones.display()))?;
                std::fs::copy(zone, zones.join(ORIGIN.trim_end_matches('.')))
                    .map_err(|e| format!("copy the zone for gdnsd: {e}"))?;
                write(
                    &root.join("config"),
                    format!(
                        "options => {{\n  listen => [ {ip} ]\n  dns_port => {port}\n  \
                         udp_threads => 1\n  tcp_threads => 1\n  run_dir => \"{d}/run\"\n  \
                         state_dir => \"{d}/state\"\n}}\n"
                    ),
                )?;
                Ok(vec![
                    "-c".into(),
                    root.display().to_string(),
                    "start".into(),
                ])
            }
        }
    }
}

impl fmt::Display for LinuxDns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for LinuxDns {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        LinuxDns::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| format!("unknown DNS server {s:?}: expected nsd, knot or gdnsd"))
    }
}

/// A query for the SOA of [`ORIGIN`] with DNS ID `id`.
pub fn soa_query(id: u16) -> Vec<u8> {
    let mut q = id.to_be_bytes().to_vec();
    q.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in ORIGIN.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 6, 0, 1]);
    q
}

/// Whether `reply` answers [`soa_query`]`(id)` with data, authoritatively and without error
/// (Knot answers SERVFAIL while it still loads the zone).
pub fn is_soa_answer(reply: &[u8], id: u16) -> bool {
    reply.len() >= 12
        && reply[..2] == id.to_be_bytes()
        && reply[2] & 0x80 != 0
        && reply[2] & 0x04 != 0
        && reply[3] & 0x0f == 0
        && reply[6..8] != [0, 0]
}

/// Asks `server` for the zone's SOA until it answers it (see [`is_soa_answer`]), for at most
/// `patience`; `alive` is checked between tries and its error ends the wait.
pub fn wait_answering(
    server: SocketAddr,
    patience: Duration,
    mut alive: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let sock = UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    })
    .map_err(|e| format!("probe socket: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| format!("probe socket: {e}"))?;
    let id = 0x1234;
    let q = soa_query(id);
    let t0 = Instant::now();
    let mut buf = [0u8; 1500];
    loop {
        alive()?;
        let _ = sock.send_to(&q, server);
        if let Ok((n, _)) = sock.recv_from(&mut buf)
            && is_soa_answer(&buf[..n], id)
        {
            return Ok(());
        }
        if t0.elapsed() > patience {
            return Err(format!(
                "no answer to an SOA query for {ORIGIN} at {server} within {} s",
                patience.as_secs()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for d in LinuxDns::ALL {
            assert_eq!(d.name().parse::<LinuxDns>().unwrap(), d);
        }
        let err = "bind".parse::<LinuxDns>().unwrap_err();
        assert!(err.contains("nsd, knot or gdnsd"), "{err}");
    }

    #[test]
    fn only_an_authoritative_answer_with_data_counts() {
        let q = soa_query(7);
        assert_eq!(&q[..2], &[0, 7]);
        // The question is the origin's labels, type SOA, class IN.
        assert!(q.ends_with(&[0, 0, 6, 0, 1]));
        let mut a = q.clone();
        a[2] = 0x84;
        a[7] = 1;
        assert!(is_soa_answer(&a, 7));
        assert!(!is_soa_answer(&a, 8));
        let mut servfail = a.clone();
        servfail[3] = 2;
        assert!(!is_soa_answer(&servfail, 7));
        let mut not_aa = a.clone();
        not_aa[2] = 0x80;
        assert!(!is_soa_answer(&not_aa, 7));
        assert!(!is_soa_answer(&q, 7));
        assert!(!is_soa_answer(&a[..5], 7));
    }

    #[test]
    fn each_server_gets_its_configuration_in_its_directory() {
        let dir = std::env::temp_dir().join(format!("corral-dns-peers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let zone = dir.join("zone");
        crate::workload::write_zone(&zone, 10).unwrap();
        let addr: SocketAddr = "127.0.0.1:5399".parse().unwrap();
        for d in LinuxDns::ALL {
            let args = d.configure(&dir, &zone, addr).unwrap();
            assert!(!args.is_empty());
        }
        let nsd = std::fs::read_to_string(dir.join("nsd.conf")).unwrap();
        assert!(nsd.contains("ip-address: 127.0.0.1@5399"), "{nsd}");
        let knot = std::fs::read_to_string(dir.join("knot.conf")).unwrap();
        assert!(knot.contains("listen: 127.0.0.1@5399"), "{knot}");
        let gdnsd = std::fs::read_to_string(dir.join("gdnsd/config")).unwrap();
        assert!(gdnsd.contains("dns_port => 5399"), "{gdnsd}");
        assert!(dir.join("gdnsd/zones/bench.example").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
