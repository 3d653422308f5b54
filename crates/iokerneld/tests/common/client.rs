//! A `corral-abi-client` process whose output lines are collected; killed on drop.
//!
//! Its lines come from its main thread and from its kthreads, in whatever order they run (a
//! kthread may report it is done before the main thread reports the registration), so
//! [`AbiClient::expect`] keeps the lines it skips for later calls instead of dropping them.

#![allow(dead_code, reason = "each test binary uses part of it")]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Instant;

use super::{WAIT, client_binary};

pub struct AbiClient {
    child: Child,
    lines: Receiver<String>,
    /// Lines taken by `expect`.
    seen: Vec<String>,
    /// Lines received and not taken yet.
    pending: Vec<String>,
    /// Shown when an expected line does not come.
    daemon_log: Option<PathBuf>,
}

impl AbiClient {
    /// Starts the client against the daemon at `socket` as runtime `name`; `daemon_log`, if
    /// given, is printed when an expected line does not come.
    pub fn start(socket: &Path, name: &str, args: &[&str], daemon_log: Option<PathBuf>) -> Self {
        let mut child = Command::new(client_binary())
            .arg("--socket")
            .arg(socket)
            .args(["--name", name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        AbiClient {
            child,
            lines,
            seen: Vec::new(),
            pending: Vec::new(),
            daemon_log,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Takes the earliest line starting with `prefix` that no earlier call took, waiting for
    /// it if need be.
    pub fn expect(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(at) = self.pending.iter().position(|l| l.starts_with(prefix)) {
                let line = self.pending.remove(at);
                self.seen.push(line.clone());
                return line;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.pending.push(line),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "no line starting with {prefix:?} within {WAIT:?}; taken so far: {:?}, \
                     not taken: {:?}\niokerneld's log:\n{}",
                    self.seen,
                    self.pending,
                    self.daemon_log
                        .as_ref()
                        .and_then(|p| std::fs::read_to_string(p).ok())
                        .unwrap_or_default()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "client exited before printing {prefix:?}; taken: {:?}, not taken: {:?}",
                    self.seen, self.pending
                ),
            }
        }
    }

    /// The runtime id from the `registered ID` line.
    pub fn registered(&mut self) -> u64 {
        let line = self.expect("registered ");
        line["registered ".len()..].parse().unwrap()
    }

    /// The tid of kthread `index`, found by thread name.
    pub fn kthread_tid(&self, index: usize) -> i32 {
        let task = format!("/proc/{}/task", self.pid());
        for entry in std::fs::read_dir(&task).unwrap() {
            let path = entry.unwrap().path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.trim() == format!("kthread-{index}") {
                return path.file_name().unwrap().to_str().unwrap().parse().unwrap();
            }
        }
        panic!("no thread kthread-{index} in {task}");
    }

    /// Waits for the process to end by itself.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    /// Kills the process and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for AbiClient {
    fn drop(&mut self) {
        self.kill();
    }
}
