//! A server on Corral's runtime behind its own iokerneld: the daemon on CPU 0 managing CPU 1
//! (never shielded: tests run beside others, and a test killed mid-run would leave the
//! machine-wide shield in place), a directory of its own for the control socket and the logs,
//! and both processes killed, and the directory removed, on drop.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long iokerneld or the server may take to come up.
const START: Duration = Duration::from_secs(20);

/// Lines of each log a failure message shows.
const LOG_TAIL_LINES: usize = 40;

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds CPU 1 for the calling test, even after another test failed while holding it: every
/// [`Behind`] hands it out.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The binary `name` next to `binary` (a test's `CARGO_BIN_EXE_`; a binary of another package
/// has none), or a failure saying how to build it.
pub fn sibling_binary(binary: &str, name: &str, package: &str) -> PathBuf {
    let path = Path::new(binary).with_file_name(name);
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p {package}` and the same profile",
        path.display()
    );
    path
}

/// Resident memory of process `pid`, from /proc.
pub fn rss_bytes(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read its status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS line");
    let kb: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// A TAP device and subnet of one test's own: the device `<prefix><pid>t<test>` and the subnet
/// `10.<octet_base + pid % 10>.<test>.0/24`, Linux's side at `.1` and the server at `.2`.
/// Each test binary family takes its own second-octet range, so that test binaries run at the
/// same time (two checkouts on one machine) never hold one host address twice.
pub struct TapSubnet {
    pub tap: String,
    /// Linux's side, `a.b.c.1/24`, as iokerneld's `--host-ip` takes it.
    pub host_cidr: String,
    pub server: Ipv4Addr,
}

impl TapSubnet {
    pub fn for_test(prefix: &str, octet_base: u8, test: u8) -> TapSubnet {
        let pid = std::process::id();
        let second = octet_base + (pid % 10) as u8;
        TapSubnet {
            tap: format!("{prefix}{}t{test}", pid % 10_000),
            host_cidr: format!("10.{second}.{test}.1/24"),
            server: Ipv4Addr::new(10, second, test, 2),
        }
    }

    /// iokerneld's flags for this device.
    pub fn nic_args(&self) -> [&str; 6] {
        [
            "--nic",
            "tap",
            "--tap-name",
            &self.tap,
            "--host-ip",
            &self.host_cidr,
        ]
    }
}

/// iokerneld and, once started, one server registered with it.
pub struct Behind {
    iokerneld_binary: PathBuf,
    iokerneld: Child,
    server: Option<(String, Child)>,
    /// Holds the control socket and the logs.
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl Behind {
    /// Starts `iokerneld_binary` with `nic` flags in a fresh directory `corral-<tag>` under the
    /// temporary directory, and waits until its control socket answers.
    pub fn start(iokerneld_binary: PathBuf, tag: &str, nic: &[&str]) -> Behind {
        let dir = std::env::temp_dir().join(format!("corral-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the test directory");
        let socket = dir.join("iokerneld.sock");
        let iokerneld = Command::new(&iokerneld_binary)
            .args(["--core", "0", "--managed-cores", "1", "--log-level", "warn"])
            .args(["--shield", "off"])
            .args(nic)
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&dir, "iokerneld.log"))
            .spawn()
            .expect("start iokerneld");
        let mut me = Behind {
            iokerneld_binary,
            iokerneld,
            server: None,
            dir,
            socket,
        };
        // The control socket is a SOCK_SEQPACKET one: ask it for statistics as an operator
        // would.
        let mut stats = me.stats_command();
        stats.stdout(Stdio::null()).stderr(Stdio::null());
        me.wait_for("iokerneld's control socket", || {
            stats.status().is_ok_and(|s| s.success())
        });
        me
    }

    /// `iokerneld stats` against this daemon.
    pub fn stats_command(&self) -> Command {
        let mut c = Command::new(&self.iokerneld_binary);
        c.arg("stats").arg("--socket").arg(&self.socket);
        c
    }

    /// Starts the server `name` from `cmd`, given `--iokerneld SOCKET` and its output in
    /// `name.out` and `name.log`.
    pub fn start_server(&mut self, name: &str, mut cmd: Command) {
        assert!(self.server.is_none(), "one server per iokerneld");
        let child = cmd
            .arg("--iokerneld")
            .arg(&self.socket)
            .stdin(Stdio::null())
            .stdout(log_file(&self.dir, &format!("{name}.out")))
            .stderr(log_file(&self.dir, &format!("{name}.log")))
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        self.server = Some((name.to_owned(), child));
    }

    /// The server's process id.
    pub fn server_pid(&self) -> u32 {
        self.server.as_ref().expect("the server was started").1.id()
    }

    /// The last lines of what iokerneld and the server have logged, for failure messages.
    pub fn logs(&self) -> String {
        let read = |name: &str| {
            let text = std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        };
        let mut out = format!("iokerneld.log:\n{}\n", read("iokerneld.log"));
        if let Some((name, _)) = &self.server {
            out.push_str(&format!("{name}.log:\n{}\n", read(&format!("{name}.log"))));
        }
        out
    }

    /// Fails the test if either process has exited.
    pub fn assert_alive(&mut self) {
        let server = self.server.as_mut().map(|(n, c)| (n.as_str(), c));
        let exited = [Some(("iokerneld", &mut self.iokerneld)), server]
            .into_iter()
            .flatten()
            .find_map(|(what, child)| {
                let status = child.try_wait().expect("check on a child")?;
                Some((what.to_owned(), status))
            });
        if let Some((what, status)) = exited {
            panic!("{what} exited with {status}\n{}", self.logs());
        }
    }

    /// Waits until `ready`, failing the test if a process exits or it takes too long.
    pub fn wait_for(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            self.assert_alive();
            assert!(
                start.elapsed() < START,
                "timed out waiting for {what}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Behind {
    fn drop(&mut self) {
        let server = self.server.as_mut().map(|(_, c)| c);
        for child in [server, Some(&mut self.iokerneld)].into_iter().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn log_file(dir: &Path, name: &str) -> std::fs::File {
    std::fs::File::create(dir.join(name)).expect("create a log file")
}
