//! libmemcached's command-line clients against a server, and how they must end: shared by the
//! Linux-socket, TAP and XDP test binaries, which differ only in where the clients run.

use std::process::Command;

/// Runs `cmd` to its end: whether it succeeded, and its standard output and error together.
pub fn run(cmd: &mut Command) -> (bool, String) {
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

/// `memccapable -a` (text protocol) against `host:port` through `runner`, which builds the
/// command for a program; every one of its 27 tests must pass. `context` goes with a failure.
pub fn memccapable_passes(
    runner: impl Fn(&str) -> Command,
    host: &str,
    port: u16,
    context: impl Fn() -> String,
) {
    let (ok, text) =
        run(runner("memccapable").args(["-h", host, "-p", &port.to_string(), "-a", "-t", "10"]));
    let passed = text.lines().filter(|l| l.contains("[pass]")).count();
    assert!(
        ok && text.contains("All tests passed") && passed == 27,
        "memccapable -a:\n{text}\n{}",
        context()
    );
}

/// `memcslap` set, get and mget with `connections` concurrent connections against `server`
/// (`host:port`) through `runner`: each must finish without an error.
pub fn memcslap_without_errors(
    runner: impl Fn(&str) -> Command,
    server: &str,
    connections: u32,
    context: impl Fn() -> String,
) {
    for test in ["set", "get", "mget"] {
        let (ok, text) = run(runner("memcslap").args([
            "-s",
            server,
            "-t",
            test,
            "-c",
            &connections.to_string(),
            "-e",
            "5000",
            "-F",
        ]));
        let lower = text.to_lowercase();
        assert!(
            ok && !lower.contains("error") && !lower.contains("fail"),
            "memcslap -t {test}:\n{text}\n{}",
            context()
        );
        assert!(
            text.contains("Time total"),
            "memcslap -t {test} did not finish:\n{text}"
        );
    }
}
