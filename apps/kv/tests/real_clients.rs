//! Unmodified memcached clients against corral-kv on Linux sockets: libmemcached's conformance
//! tester (`memccapable`, text protocol), its load generator (`memcslap`), and a Python check
//! through pymemcache.

mod common;

use std::process::Command;

use common::clients::{memccapable_passes, memcslap_without_errors, run};
use common::start_kv;

#[test]
fn memccapable_text_protocol_passes() {
    let kv = start_kv(&[]);
    memccapable_passes(|p| Command::new(p), "127.0.0.1", kv.port, || kv.describe());
}

#[test]
fn memcslap_load_has_no_errors() {
    let kv = start_kv(&["-t", "4"]);
    let server = format!("127.0.0.1:{}", kv.port);
    memcslap_without_errors(|p| Command::new(p), &server, 4, || kv.describe());
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
