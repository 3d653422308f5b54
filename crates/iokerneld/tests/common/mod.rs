//! The harness shared by the tests that run the real `iokerneld`: a lock that runs a test
//! binary's daemon tests one at a time, an iokerneld with a temporary directory and socket of
//! its own that is killed when dropped, and bounded waits.
//!
//! Every daemon runs on CPU 0 and manages CPU 1. The tests of one binary share CPU 1, so those
//! that start a daemon hold `serial()` while they run.
//!
//! Test binaries that create TAP devices may run at the same time (two checkouts on one
//! machine), and two devices holding one host address confuse the kernel's routes, so each
//! binary draws its subnets `10.X.test.0/24` from a second octet range of its own (varied by
//! its pid): `net_e2e` 120-139, corral-kv's TAP tests 140-149, corral-dns's TAP tests 150-159,
//! the TCP tests 170-199 (`tcp_common`, by family), `spinning_net` 200-219, `faults_e2e`
//! 220-239. The XDP tests (`xdp_e2e`, corral-kv's `corral_xdp`) take their /29s from
//! 10.64.0.0/12 through `corral_xdp::testnet::VethPair`.

pub mod client;
pub mod packet;

use std::fmt::Debug;
use std::marker::PhantomData;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use corral_abi::control::{Reply, Request};
use corral_iokernel::control;
use serde::de::DeserializeOwned;

pub const IOKERNELD: &str = env!("CARGO_BIN_EXE_iokerneld");

/// The `corral-abi-client` binary of package corral-testclient, found next to iokerneld (where
/// `cargo test --workspace` builds it): a binary of another package has no `CARGO_BIN_EXE_`.
#[allow(dead_code, reason = "only the tests that start ABI clients use it")]
pub fn client_binary() -> PathBuf {
    binary_beside_iokerneld("corral-abi-client", "corral-testclient")
}

/// Binary `name` of package `package`, found next to iokerneld, as [`client_binary`].
#[allow(
    dead_code,
    reason = "only the tests that start other packages' programs use it"
)]
pub fn binary_beside_iokerneld(name: &str, package: &str) -> PathBuf {
    let path = Path::new(IOKERNELD).with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p {package} --bin {name}` and the same \
         profile",
        path.display()
    );
    path
}

/// How long iokerneld may take to start or to answer, and the default bound of other waits.
pub const WAIT: Duration = Duration::from_secs(10);

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds CPU 1 for the calling test until the guard is dropped, even after another test failed
/// while holding it.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Polls `done` every millisecond until it holds, failing the test after `limit`.
#[allow(dead_code, reason = "not every test binary waits this way")]
pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How `Daemon::launch` runs iokerneld: `iokerneld --core 0 --managed-cores 1 [--shield off]
/// ARGS --socket DIR/SOCKET EXTRA`, with DIR a fresh temporary directory. `--shield off` unless
/// ARGS or EXTRA give `--shield`: the suite runs as root, where iokerneld would shield its CPU,
/// and most tests must neither reshape the machine nor start several shielding daemons.
pub struct Launch<'a> {
    pub args: &'a [&'a str],
    /// The socket's path inside the temporary directory.
    pub socket: &'a str,
    pub extra: &'a [&'a str],
    /// Whether iokerneld's standard error goes to `iokerneld.log` in the temporary directory
    /// (and its standard output nowhere), so that failures can show it; otherwise both are the
    /// test's own.
    pub log: bool,
}

/// A running iokerneld whose statistics read as `S`; killed on drop, its directory removed.
pub struct Daemon<S = serde_json::Value> {
    child: Child,
    dir: tempfile::TempDir,
    pub socket: PathBuf,
    logged: bool,
    stats: PhantomData<fn() -> S>,
}

impl<S: DeserializeOwned + Debug> Daemon<S> {
    /// Starts iokerneld and waits until its socket accepts connections.
    pub fn launch(launch: Launch<'_>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join(launch.socket);
        let mut command = Command::new(IOKERNELD);
        command.args(["--core", "0", "--managed-cores", "1"]);
        if !launch
            .args
            .iter()
            .chain(launch.extra)
            .any(|a| a.starts_with("--shield"))
        {
            command.args(["--shield", "off"]);
        }
        command
            .args(launch.args)
            .arg("--socket")
            .arg(&socket)
            .args(launch.extra)
            .stdin(Stdio::null());
        if launch.log {
            let log = std::fs::File::create(dir.path().join("iokerneld.log")).unwrap();
            command.stdout(Stdio::null()).stderr(log);
        }
        let child = command.spawn().expect("start iokerneld");
        let mut daemon = Daemon {
            child,
            dir,
            socket,
            logged: launch.log,
            stats: PhantomData,
        };
        let deadline = Instant::now() + WAIT;
        while control::connect(&daemon.socket).is_err() {
            if let Some(status) = daemon.exited() {
                panic!("iokerneld exited with {status}: {}", daemon.log());
            }
            assert!(
                Instant::now() < deadline,
                "iokerneld did not open {} within {WAIT:?}: {}",
                daemon.socket.display(),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        daemon
    }

    /// The daemon's own temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where iokerneld's standard error goes, if `Launch::log` was set.
    pub fn log_file(&self) -> PathBuf {
        self.dir().join("iokerneld.log")
    }

    /// What iokerneld has logged so far, or where to look for it.
    pub fn log(&self) -> String {
        if self.logged {
            std::fs::read_to_string(self.log_file()).unwrap_or_default()
        } else {
            "(iokerneld's standard error is the test's)".into()
        }
    }

    /// iokerneld's statistics, asked for over its control socket as `iokerneld stats` does.
    pub fn stats(&self) -> S {
        let conn = control::connect(&self.socket).unwrap_or_else(|e| {
            panic!(
                "cannot connect to {} for statistics: {e}\nlog:\n{}",
                self.socket.display(),
                self.log()
            )
        });
        let reply = control::request_on(conn.as_fd(), &Request::Stats.encode(), &[], WAIT);
        match reply {
            Ok(Reply::Stats { json }) => serde_json::from_str(&json)
                .unwrap_or_else(|e| panic!("iokerneld's statistics do not parse ({e}): {json}")),
            other => panic!("expected statistics, got {other:?}\nlog:\n{}", self.log()),
        }
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("check on iokerneld")
    }
}

/// What some test binaries use and others do not.
#[allow(dead_code)]
impl<S: DeserializeOwned + Debug> Daemon<S> {
    /// Polls the statistics until `check` holds.
    pub fn wait_for(&self, what: &str, check: impl Fn(&S) -> bool) -> S {
        let deadline = Instant::now() + WAIT;
        loop {
            let stats = self.stats();
            if check(&stats) {
                return stats;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last statistics: {stats:#?}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn assert_alive(&mut self) {
        if let Some(status) = self.exited() {
            panic!("iokerneld exited with {status}: {}", self.log());
        }
    }

    /// Sends `signal` and waits for iokerneld to exit: its exit status.
    pub fn stop_with(&mut self, signal: i32) -> ExitStatus {
        // SAFETY: kill takes two integers; the child is ours and not reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "iokerneld did not exit on signal {signal}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl<S> Daemon<S> {
    /// Its process id, to kill it where no destructor will run (before an abort).
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl<S> Drop for Daemon<S> {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
