//! corral-dns on Corral's runtime, behind iokerneld and a TAP device, queried from Linux: `dig`
//! over UDP and TCP (and a truncated answer that dig retries over TCP by itself), dnspython's
//! checks, and a slice of
//! the differential stream compared with NSD's answers on Linux sockets, with the same
//! intentional differences as `differential.rs`.

mod common;
mod tap;

use std::net::SocketAddr;

use common::diff::{compare, env_or};
use common::{dig_answers_over_udp_and_tcp, dnspython_checks, start_nsd};
use tap::{TapDns, serial};

#[test]
fn dig_and_dnspython_get_corral_dns_answers_over_tap_on_udp_and_tcp() {
    let _serial = serial();
    let mut dns = TapDns::start(1, &[]);
    dig_answers_over_udp_and_tcp(SocketAddr::V4(dns.addr()));
    dnspython_checks(SocketAddr::V4(dns.addr()));
    let c = dns.settled_counters();
    // dig's queries arrived by both transports; the retried one over TCP was the truncated one.
    assert!(c.get("udp_queries") >= 4, "{c:?}");
    assert!(c.get("tcp_queries") >= 2, "{c:?}");
    assert!(c.get("truncated") >= 2, "{c:?}");
    dns.assert_alive();
}

/// `DNS_TAP_DIFF_QUERIES` (default 1500) messages of seed 7, UDP and TCP, through the TAP
/// device.
#[test]
fn the_differential_stream_over_tap_matches_nsd() {
    let _serial = serial();
    let mut dns = TapDns::start(2, &[]);
    let nsd = start_nsd();
    let n = env_or("DNS_TAP_DIFF_QUERIES", 1500);
    let compared = compare(7, n, SocketAddr::V4(dns.addr()), nsd.addr());
    eprintln!("{compared} answers compared through iokerneld, 0 differences");
    assert!(compared * 10 >= n * 8, "only {compared} answers");
    dns.assert_alive();
}
