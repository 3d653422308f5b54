//! A Corral runtime whose iokerneld dies exits with a clear error instead of waiting forever
//! for a core, and an orderly shutdown does not trip that.
//!
//! The runtime runs in a process of its own: this test binary, started again with
//! `RUNTIME_SOCKET` set, which makes the test below play the runtime.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use common::{Daemon, Launch, WAIT, serial};

use corral::{Config, IokernelSettings, Runtime};

const SOCKET_VAR: &str = "RUNTIME_SOCKET";
const TEST: &str = "a_runtime_exits_with_a_clear_error_when_iokerneld_dies";

/// The runtime process: registers a runtime and shuts it down in order, then registers another
/// whose only uthread sleeps for an hour (its kthread parked, waiting for iokerneld to wake it)
/// while the main thread waits for it.
fn play_the_runtime(socket: &str) -> ! {
    let runtime = |name: &str| {
        Runtime::new(
            Config::default()
                .kthreads(1)
                .iokernel(IokernelSettings::new(socket, name)),
        )
        .expect("register with iokerneld")
    };
    let first = runtime("orderly");
    assert_eq!(first.block_on(|| 6 * 7), 42);
    drop(first);
    println!("disconnected");
    let second = runtime("abandoned");
    println!("registered");
    second.block_on(|| corral::sleep(Duration::from_secs(3600)));
    println!("woke up after an hour");
    std::process::exit(0)
}

#[test]
fn a_runtime_exits_with_a_clear_error_when_iokerneld_dies() {
    if let Ok(socket) = std::env::var(SOCKET_VAR) {
        play_the_runtime(&socket);
    }
    let _serial = serial();
    let daemon: Daemon = Daemon::launch(Launch {
        args: &["--log-level", "warn", "--nic", "none"],
        socket: "iokerneld.sock",
        extra: &[],
        log: true,
    });
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads", "1"])
        .env(SOCKET_VAR, &daemon.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, lines) = channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let wait_for = |expected: &str| loop {
        match lines.recv_timeout(WAIT) {
            // The test harness may have started the line.
            Ok(line) if line.ends_with(expected) => break,
            Ok(_) => {}
            Err(e) => panic!("no {expected:?} from the runtime ({e}): {}", daemon.log()),
        }
    };
    // The orderly shutdown did not end the process: it goes on to register again.
    wait_for("disconnected");
    wait_for("registered");
    let runtimes = daemon.stats()["runtimes"].as_array().unwrap().len();
    assert_eq!(runtimes, 1, "only the second runtime is registered");

    // SIGKILL, as `kill -9` does.
    drop(daemon);
    let killed = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if killed.elapsed() > WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the runtime still ran {WAIT:?} after iokerneld died; its standard error: {}",
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let took = killed.elapsed();
    let stderr = stderr.join().unwrap();
    assert_eq!(
        status.code(),
        Some(69),
        "the runtime ended with {status}; its standard error: {stderr}"
    );
    assert!(
        stderr.contains(
            "corral: iokerneld closed the control connection: it exited or crashed; exiting"
        ),
        "{stderr}"
    );
    assert!(
        took < Duration::from_secs(1),
        "the runtime took {took:?} to notice that iokerneld died"
    );
    assert!(
        lines
            .try_iter()
            .all(|l| !l.ends_with("woke up after an hour")),
        "the sleeping uthread cannot have finished"
    );
}
