//! No byte lost or corrupted under faults: data both ways between Corral and Linux (through
//! the TAP device) and between two Corral runtimes (through iokerneld's local switch), with
//! iokerneld's seeded fault injection dropping, reordering, duplicating and corrupting 1%, 5%
//! and 10% of the TCP frames, checked with SHA-256 on both ends; the counters show the
//! retransmissions that repaired it.
//!
//! CI moves `CI_BYTES` each way per case; the 100 MB each way runs in the ignored
//! `hundred_megabytes_each_way_under_faults` (run by hand: `cargo test --profile ci -p
//! corral-iokerneld --test tcp_faults -- --ignored`).

mod common;
mod tcp_common;

use std::net::SocketAddr;
use std::time::Duration;

use common::serial;
use corral_app_tcppeer::{CorralNet, LinuxNet, Service, client, hex, pattern};
use tcp_common::{SEED, SINK, SOURCE, TcpDaemon, retransmissions, start_corral_server, tcp_stats};

const FAMILY: u8 = 2;
const CI_BYTES: u64 = 4 << 20;
const RATES: [f64; 3] = [0.01, 0.05, 0.10];
/// Each connect and read; a stalled transfer fails rather than hangs.
const LIMIT: Duration = Duration::from_secs(120);

fn faults(rate: f64, seed: u64) -> String {
    format!("all:loss={rate},reorder={rate},dup={rate},corrupt={rate},only=tcp,seed={seed}")
}

/// The injector's counters for `direction` (`rx`, `tx`, `local`).
fn injected(daemon: &TcpDaemon, direction: &str) -> serde_json::Value {
    daemon.stats()["faults"][direction].clone()
}

fn assert_injected(daemon: &TcpDaemon, direction: &str) {
    let f = injected(daemon, direction);
    for counter in ["dropped", "duplicated", "corrupted", "reordered"] {
        assert!(
            f[counter].as_u64().unwrap_or(0) > 0,
            "{direction}: no frame {counter}: {f}"
        );
    }
}

/// Linux's own count of retransmitted segments (all sockets).
fn linux_retransmits() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "RetransSegs")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

/// Corral's server and a Linux client, `bytes` each way, at `rate`.
fn corral_and_linux(test: u8, rate: f64, bytes: u64) {
    let start = std::time::Instant::now();
    let mut daemon = TcpDaemon::start(FAMILY, test, &["--faults", &faults(rate, test as u64)]);
    let server = start_corral_server(&daemon, "faulty", daemon.ip(2), bytes);
    let linux_before = linux_retransmits();
    let sink: SocketAddr = server.addr(SINK).into();
    let digest = client::upload::<LinuxNet>(sink, bytes, 3, LIMIT)
        .unwrap_or_else(|e| panic!("upload at {rate}: {e}; {:?}", tcp_stats(&server).counters));
    assert_eq!(
        digest,
        hex(&pattern::sha256(bytes, 3)),
        "upload corrupted at {rate}"
    );
    let (len, sha) = client::download::<LinuxNet>(server.addr(SOURCE).into(), LIMIT)
        .unwrap_or_else(|e| panic!("download at {rate}: {e}; {:?}", tcp_stats(&server).counters));
    assert_eq!(len, bytes, "download at {rate}");
    assert_eq!(
        sha,
        pattern::sha256(bytes, SEED),
        "download corrupted at {rate}"
    );
    server.wait_finished(2, LIMIT);
    for o in server.served.outcomes() {
        assert_eq!(o.error, None, "{o:?}");
        if o.service == Service::Sink {
            assert_eq!((o.received, o.sha256), (bytes, pattern::sha256(bytes, 3)));
        }
    }
    let tcp = tcp_stats(&server);
    // Corral repaired what it sent (the download); Linux what it sent (the upload).
    assert!(retransmissions(&tcp) > 0, "{:?}", tcp.counters);
    assert!(
        linux_retransmits() > linux_before,
        "Linux never retransmitted"
    );
    assert!(tcp.drop_count("bad_checksum") > 0, "{:?}", tcp.counters);
    assert_injected(&daemon, "rx");
    assert_injected(&daemon, "tx");
    eprintln!(
        "corral<->linux at {rate}, {bytes} B each way, {:?}: corral retransmissions {} (rto, fast: {:?}), bad checksums {}",
        start.elapsed(),
        retransmissions(&tcp),
        (
            tcp.counters.conns.rto_retransmits,
            tcp.counters.conns.fast_retransmits
        ),
        tcp.drop_count("bad_checksum")
    );
    daemon.assert_alive();
}

/// Two Corral runtimes through the local switch, `bytes` each way, at `rate`.
fn corral_and_corral(test: u8, rate: f64, bytes: u64) {
    let start = std::time::Instant::now();
    let mut daemon = TcpDaemon::start(FAMILY, test, &["--faults", &faults(rate, test as u64)]);
    let server = start_corral_server(&daemon, "faulty-server", daemon.ip(2), bytes);
    let client_rt = tcp_common::runtime(&daemon, "faulty-client", daemon.ip(3));
    let sink: SocketAddr = server.addr(SINK).into();
    let source: SocketAddr = server.addr(SOURCE).into();
    let (digest, download) = client_rt.block_on(move || {
        let digest = client::upload::<CorralNet>(sink, bytes, 4, LIMIT);
        let download = client::download::<CorralNet>(source, LIMIT);
        (digest, download)
    });
    let digest = digest.unwrap_or_else(|e| panic!("upload at {rate}: {e}"));
    assert_eq!(
        digest,
        hex(&pattern::sha256(bytes, 4)),
        "upload corrupted at {rate}"
    );
    let (len, sha) = download.unwrap_or_else(|e| panic!("download at {rate}: {e}"));
    assert_eq!(len, bytes);
    assert_eq!(
        sha,
        pattern::sha256(bytes, SEED),
        "download corrupted at {rate}"
    );
    server.wait_finished(2, LIMIT);
    for o in server.served.outcomes() {
        assert_eq!(o.error, None, "{o:?}");
    }
    let server_tcp = tcp_stats(&server);
    let client_tcp = client_rt.net_stats().unwrap().tcp;
    assert!(
        retransmissions(&server_tcp) > 0,
        "{:?}",
        server_tcp.counters
    );
    assert!(
        retransmissions(&client_tcp) > 0,
        "{:?}",
        client_tcp.counters
    );
    assert_injected(&daemon, "local");
    eprintln!(
        "corral<->corral at {rate}, {bytes} B each way, {:?}: retransmissions server {} client {}",
        start.elapsed(),
        retransmissions(&server_tcp),
        retransmissions(&client_tcp)
    );
    daemon.assert_alive();
}

#[test]
fn corral_and_linux_lose_nothing_under_faults() {
    let _serial = serial();
    for (i, rate) in RATES.into_iter().enumerate() {
        corral_and_linux(1 + i as u8, rate, CI_BYTES);
    }
}

#[test]
fn two_corral_runtimes_lose_nothing_under_faults() {
    let _serial = serial();
    for (i, rate) in RATES.into_iter().enumerate() {
        corral_and_corral(11 + i as u8, rate, CI_BYTES);
    }
}

#[test]
#[ignore = "100 MB each way per case: minutes; run by hand"]
fn hundred_megabytes_each_way_under_faults() {
    let _serial = serial();
    for (i, rate) in RATES.into_iter().enumerate() {
        corral_and_linux(21 + i as u8, rate, 100_000_000);
        corral_and_corral(31 + i as u8, rate, 100_000_000);
    }
}
