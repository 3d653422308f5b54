//! Unmodified memcached clients against corral-kv on Linux sockets: libmemcached's conformance
//! tester (`memccapable`, text protocol), its load generator (`memcslap`), and a Python check
//! through pymemcache.

mod common;

use std::process::Command;

use common::start_kv;

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (scripts/setup.sh installs it)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn memccapable_text_protocol_passes() {
    let kv = start_kv(&[]);
    let (ok, text) = run(Command::new("memccapable").args([
        "-h",
        "127.0.0.1",
        "-p",
        &kv.port.to_string(),
        "-a",
        "-t",
        "10",
    ]));
    let passed = text.lines().filter(|l| l.contains("[pass]")).count();
    assert!(
        ok && text.contains("All tests passed") && passed == 27,
        "memccapable -a:\n{text}"
    );
}

#[test]
fn memcslap_load_has_no_errors() {
    let kv = start_kv(&["-t", "4"]);
    let server = format!("127.0.0.1:{}", kv.port);
    for test in ["set", "get", "mget"] {
        let (ok, text) = run(Command::new("memcslap")
            .args(["-s", &server, "-t", test, "-c", "4", "-e", "5000", "-F"]));
        let lower = text.to_lowercase();
        assert!(
            ok && !lower.contains("error") && !lower.contains("fail"),
            "memcslap -t {test}:\n{text}"
        );
        assert!(
            text.contains("Time total"),
            "memcslap -t {test} did not finish:\n{text}"
        );
    }
}

#[test]
fn pymemcache_checks_pass() {
    let kv = start_kv(&[]);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kv_check.py");
    // Debian's interpreter, where python3-pymemcache is installed.
    let (ok, text) = run(Command::new("/usr/bin/python3").args([script, &kv.port.to_string()]));
    assert!(
        ok && text.contains("all checks passed"),
        "kv_check.py:\n{text}"
    );
}
