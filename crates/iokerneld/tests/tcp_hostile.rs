//! Hostile input against Corral's TCP, from the scapy scripts in `scripts/scapy/` run against
//! the live stack through iokerneld's TAP device: a SYN flood, an out-of-window RST, an ACK of
//! unsent data, malformed options and a zero window held shut. Each script checks the answers
//! on the wire (the same scripts pass against Linux's stack in a network namespace); the tests
//! here check Corral's counters and that established connections survive.
//!
//! The scripts speak from `subnet.77` with a MAC the host does not own, so the host kernel
//! drops the replies as "other host" instead of resetting connections it never opened: no
//! firewall rule is needed and nothing is left behind.

mod common;
mod tcp_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use common::serial;
use tcp_common::{ECHO, SOURCE, Server, TcpDaemon, run_tool, start_server, tcp_stats};

const FAMILY: u8 = 3;
const LIMIT: Duration = Duration::from_secs(120);
const FAKE_MAC: &str = "02:99:00:00:00:77";

/// Runs `scripts/scapy/NAME.py` against the server and returns its JSON report.
fn scapy(daemon: &TcpDaemon, server: &Server, name: &str, args: &[&str]) -> serde_json::Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts/scapy")
        .join(format!("{name}.py"));
    let ip = server.ip.octets();
    let target_mac = format!(
        "02:43:{:02x}:{:02x}:{:02x}:{:02x}",
        ip[0], ip[1], ip[2], ip[3]
    );
    let fake_ip = daemon.ip(77).to_string();
    let target_ip = server.ip.to_string();
    let mut all = vec![
        script.to_str().unwrap(),
        &daemon.tap,
        &fake_ip,
        FAKE_MAC,
        &target_ip,
        &target_mac,
    ];
    all.extend_from_slice(args);
    // Debian's scapy is installed for the system Python.
    let out = run_tool("/usr/bin/python3", &all, None, LIMIT);
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim().lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{name}.py printed no report ({e}): {text}"))
}

fn drops(server: &Server, name: &str) -> u64 {
    tcp_stats(server).drop_count(name)
}

#[test]
fn an_out_of_window_rst_does_not_kill_a_connection() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 1, &[]);
    let server = start_server(&daemon, "rst", 0);
    let report = scapy(&daemon, &server, "oow_rst", &[&ECHO.to_string()]);
    assert_eq!(report["echoed"], "still alive?", "{report}");
    assert!(drops(&server, "rst_out_of_window") >= 1);
    assert!(drops(&server, "rst_challenged") >= 1);
    assert!(tcp_stats(&server).counters.conns.challenge_acks >= 1);
    daemon.assert_alive();
}

#[test]
fn an_ack_of_unsent_data_is_dropped_and_answered() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 2, &[]);
    let server = start_server(&daemon, "ack", 0);
    let report = scapy(&daemon, &server, "ack_unsent", &[&ECHO.to_string()]);
    assert_eq!(report["echoed"], "fine", "{report}");
    assert!(drops(&server, "ack_of_unsent_data") >= 1);
    daemon.assert_alive();
}

#[test]
fn malformed_options_are_dropped_and_counted() {
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 3, &[]);
    let server = start_server(&daemon, "options", 0);
    let before = drops(&server, "bad_header");
    let report = scapy(&daemon, &server, "bad_options", &[&ECHO.to_string()]);
    // A SYN whose options lie about their length opens nothing (RFC 9293 MUST-7: the length
    // is not trusted; the segment is dropped), and data with such options is not delivered.
    assert_ne!(report["overrun"], "syn-ack", "{report}");
    assert_ne!(report["zero_length"], "syn-ack", "{report}");
    assert_eq!(report["established"], "ignored", "{report}");
    assert!(
        drops(&server, "bad_header") >= before + 3,
        "{report}: {:?} {:?}",
        tcp_stats(&server).drops(),
        server.runtime.as_ref().unwrap().net_stats().unwrap().drops
    );
    daemon.assert_alive();
}

#[test]
fn a_zero_window_held_forever_is_probed_and_kept() {
    const PROBES: &str = "6";
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 4, &[]);
    let server = start_server(&daemon, "zerowindow", 1 << 20);
    let report = scapy(
        &daemon,
        &server,
        "zero_window",
        &[&SOURCE.to_string(), PROBES],
    );
    assert_eq!(report["probes"], 6, "{report}");
    assert!(tcp_stats(&server).counters.conns.zero_window_probes >= 6);
    daemon.assert_alive();
}

#[test]
fn a_syn_flood_is_bounded_and_spares_established_connections() {
    const FLOOD: u64 = 3000;
    let _serial = serial();
    let mut daemon = TcpDaemon::start(FAMILY, 5, &[]);
    let server = start_server(&daemon, "flood", 0);
    let settings = corral::net::TcpSettings::default();
    let mut established = TcpStream::connect_timeout(&server.addr(ECHO).into(), LIMIT).unwrap();
    established.set_read_timeout(Some(LIMIT)).unwrap();
    let mut echo = |msg: &[u8]| {
        established.write_all(msg).unwrap();
        let mut back = vec![0u8; msg.len()];
        established.read_exact(&mut back).unwrap();
        assert_eq!(back, msg);
    };
    echo(b"before");
    let report = scapy(
        &daemon,
        &server,
        "syn_flood",
        &[&ECHO.to_string(), &FLOOD.to_string()],
    );
    assert_eq!(report["sent"], FLOOD);
    echo(b"after the flood");
    let tcp = tcp_stats(&server);
    // Half-open connections stop at the SYN backlog; beyond it the listener answers with
    // cookies and keeps nothing.
    assert!(
        tcp.connections <= settings.syn_backlog as u64 + 1,
        "{} connections after {FLOOD} SYNs",
        tcp.connections
    );
    assert!(tcp.counters.syn_cookies_sent > 0, "{:?}", tcp.counters);
    let memory: usize = tcp.live.iter().map(|c| c.memory).sum();
    eprintln!(
        "after {FLOOD} SYNs: {} connections, {memory} B held, {} cookies sent",
        tcp.connections, tcp.counters.syn_cookies_sent
    );
    daemon.assert_alive();
}
