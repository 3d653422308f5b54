//! Real DNS clients against corral-dns: `dig` (and `kdig` where installed) over UDP and TCP,
//! and a small answer that truncates over UDP and comes whole over TCP, as a resolver retries.

mod common;

use std::process::Command;

use common::start_corral_dns;

fn dig(tool: &str, port: u16, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args([
            "@127.0.0.1",
            "-p",
            &port.to_string(),
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

#[test]
fn dig_answers_over_udp_and_tcp_and_retries_truncated_answers_over_tcp() {
    let s = start_corral_dns(&[]);
    let short = dig("dig", s.port, &["+short", "www.example.com", "A"]);
    assert_eq!(
        short,
        "web.example.com.\nhost.example.com.\n192.0.2.80\n192.0.2.81\n"
    );
    let tcp = dig("dig", s.port, &["+tcp", "+short", "mail.example.com", "A"]);
    assert_eq!(tcp, "192.0.2.25\n");
    let nx = dig("dig", s.port, &["nothing.example.com", "A"]);
    assert!(
        nx.contains("status: NXDOMAIN") && nx.contains("flags: qr aa;"),
        "{nx}"
    );
    // 36 A records do not fit 512 bytes: dig sees TC and asks again over TCP by itself.
    let big = dig("dig", s.port, &["+bufsize=512", "big.example.com", "A"]);
    assert!(big.contains("Truncated, retrying in TCP mode"), "{big}");
    assert!(big.contains("ANSWER: 36"), "{big}");
    // Told not to retry, it shows the truncated answer itself.
    let tc = dig(
        "dig",
        s.port,
        &["+ignore", "+bufsize=512", "big.example.com", "A"],
    );
    assert!(
        tc.contains("flags: qr aa tc;") && tc.contains("ANSWER: 0"),
        "{tc}"
    );
}

#[test]
fn kdig_answers_when_installed() {
    if !std::path::Path::new("/usr/bin/kdig").exists() {
        // scripts/setup.sh installs knot-dnsutils; say so rather than pass quietly.
        panic!("kdig is not installed (scripts/setup.sh installs knot-dnsutils)");
    }
    let s = start_corral_dns(&[]);
    let udp = dig("kdig", s.port, &["+short", "_sip._tcp.example.com", "SRV"]);
    assert_eq!(udp, "10 60 5060 sipserver.example.com.\n");
    let tcp = dig("kdig", s.port, &["+tcp", "+short", "example.com", "CAA"]);
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
