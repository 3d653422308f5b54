//! The bench's own iokerneld: started on a socket in a fresh temporary directory, asked for its
//! statistics, stopped (and the directory removed) on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corral_iokernel::daemon::Stats;

/// How long iokerneld may take to open its control socket (shielding walks every thread).
const START: Duration = Duration::from_secs(20);

pub struct Daemon {
    child: Child,
    pub socket: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    binary: PathBuf,
}

/// A runtime's counters in iokerneld's statistics.
#[derive(Clone, Copy, Debug, Default)]
pub struct RuntimeCounters {
    pub grants: u64,
    pub parks: u64,
}

impl Daemon {
    pub fn start(
        binary: &Path,
        iokernel_cpu: usize,
        managed: &str,
        shield: &str,
    ) -> Result<Daemon, String> {
        let dir = std::env::temp_dir().join(format!("corral-figure1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let socket = dir.join("iokerneld.sock");
        let log = dir.join("iokerneld.log");
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(binary)
            .arg("--core")
            .arg(iokernel_cpu.to_string())
            .args(["--managed-cores", managed])
            .arg("--socket")
            .arg(&socket)
            .args(["--log-level", "warn", "--nic", "none", "--shield", shield])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let mut daemon = Daemon {
            child,
            socket,
            dir,
            log,
            binary: binary.to_owned(),
        };
        let started = Instant::now();
        while !daemon.socket.exists() {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!(
                    "iokerneld exited ({status}): {}",
                    daemon.log_text()
                ));
            }
            if started.elapsed() > START {
                return Err(format!(
                    "iokerneld did not open its socket within {START:?}: {}",
                    daemon.log_text()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(daemon)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The counters iokerneld keeps for the runtime registered as `name`.
    pub fn counters(&self, name: &str) -> Result<RuntimeCounters, String> {
        let out = Command::new(&self.binary)
            .arg("stats")
            .arg("--socket")
            .arg(&self.socket)
            .output()
            .map_err(|e| format!("iokerneld stats: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "iokerneld stats failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stats: Stats = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("iokerneld stats printed no statistics: {e}"))?;
        let runtime = stats
            .runtimes
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| format!("iokerneld's statistics have no runtime {name:?}"))?;
        Ok(RuntimeCounters {
            grants: runtime.grants,
            parks: runtime.parks,
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM first, so that a shielding iokerneld undoes what it changed on the machine.
        corral_iokernel::sys::stop_child(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
