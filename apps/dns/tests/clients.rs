//! Real DNS clients against corral-dns: `dig` (and `kdig` where installed) over UDP and TCP,
//! and a small answer that truncates over UDP and comes whole over TCP, as a resolver retries;
//! dnspython, a resolver library, through its own parser (`dnspython_check.py`).

mod common;

use std::process::Command;

use common::{dig, dig_answers_over_udp_and_tcp, dnspython_checks, start_corral_dns};

#[test]
fn dig_answers_over_udp_and_tcp_and_retries_truncated_answers_over_tcp() {
    let s = start_corral_dns(&[]);
    dig_answers_over_udp_and_tcp(s.addr());
}

#[test]
fn kdig_answers_when_installed() {
    if !std::path::Path::new("/usr/bin/kdig").exists() {
        // scripts/setup.sh installs knot-dnsutils; say so rather than pass quietly.
        panic!("kdig is not installed (scripts/setup.sh installs knot-dnsutils)");
    }
    let s = start_corral_dns(&[]);
    let udp = dig(
        "kdig",
        s.addr(),
        &["+short", "_sip._tcp.example.com", "SRV"],
    );
    assert_eq!(udp, "10 60 5060 sipserver.example.com.\n");
    let tcp = dig("kdig", s.addr(), &["+tcp", "+short", "example.com", "CAA"]);
    // kdig ends each record with a space.
    let mut lines: Vec<&str> = tcp.lines().map(str::trim_end).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "0 issue \"letsencrypt.org\"",
            "128 iodef \"mailto:security@example.com\""
        ]
    );
}

#[test]
fn dnspython_reads_every_kind_of_answer() {
    let s = start_corral_dns(&[]);
    dnspython_checks(s.addr());
}

#[test]
fn a_bad_zone_file_is_refused_with_its_file_line_and_reason() {
    let dir = common::TempDir::new("badzone");
    let path = dir.0.join("bad.zone");
    std::fs::write(
        &path,
        "$TTL 60\n@ SOA ns hm 1 2 3 4 5\n@ NS ns\nns A 192.0.2.300\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_corral-dns"))
        .args(["-l", "127.0.0.1", "-p", "0"])
        .arg(format!("example.com={}", path.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4: A record: bad IPv4 address", path.display())),
        "{err}"
    );
}
