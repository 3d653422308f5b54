//! The same treatment for every system: iokerneld shields its own core (Corral and the
//! dedicated floor), and the runner shields the Linux baseline's load-generator CPU the same way
//! for as long as the baseline runs, with the load generator at SCHED_FIFO `LOOP_PRIORITY` and
//! the server at SCHED_FIFO `KTHREAD_PRIORITY`, as iokerneld runs its loop and the
//! latency-critical kthreads. A shield that cannot be had is said, and the system runs
//! unshielded.

use std::path::Path;

use corral_iokernel::shield::{Shield, ShieldError, ShieldSpec};

pub use corral_iokernel::shield::{KTHREAD_PRIORITY, LOOP_PRIORITY};

use crate::cli::Plan;

/// The Linux baseline's shield of its load generator's CPU, held while the baseline runs and
/// undone when dropped.
pub struct BaselineShield {
    shield: Option<Shield>,
    /// What was done, or why nothing was.
    pub said: String,
}

impl BaselineShield {
    /// Shields the plan's load-generator CPU unless `--no-shield`. Every thread already running
    /// leaves it, the runner's included; the load generators started later pin themselves there.
    /// A failure is printed as a warning and leaves the baseline unshielded.
    pub fn apply(plan: &Plan, who: &str) -> BaselineShield {
        let cpu = plan.iokernel_cpu;
        if !plan.shield {
            return BaselineShield {
                shield: None,
                said: "off (--no-shield, or --nic xdp with the client on iokerneld's CPU): every \
                       process in the fair class but the batch job"
                    .into(),
            };
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return BaselineShield::failed(
                who,
                cpu,
                "shielding needs root (it moves other processes' threads and interrupts)".into(),
            );
        }
        let spec = ShieldSpec {
            keep: vec![cpu],
            exempt_pids: Vec::new(),
        };
        match Shield::apply(&spec) {
            Ok(shield) => BaselineShield {
                said: format!("CPU {cpu} shielded by the runner: {}", shield.summary()),
                shield: Some(shield),
            },
            Err(e) => BaselineShield::failed(who, cpu, why_not(&e)),
        }
    }

    fn failed(who: &str, cpu: usize, why: String) -> BaselineShield {
        let said = format!("NOT SHIELDED: cannot shield CPU {cpu}: {why}; {who} runs unshielded");
        println!("  WARNING: {said}");
        BaselineShield { shield: None, said }
    }

    /// Whether the CPU is shielded, and so the load generator and server run at SCHED_FIFO.
    pub fn applied(&self) -> bool {
        self.shield.is_some()
    }

    /// The load generator's SCHED_FIFO priority, when shielded.
    pub fn loop_priority(&self) -> Option<u32> {
        self.applied().then_some(LOOP_PRIORITY)
    }

    /// The server's SCHED_FIFO priority, when shielded.
    pub fn server_priority(&self) -> Option<u32> {
        self.applied().then_some(KTHREAD_PRIORITY)
    }

    /// Undoes the shield now, saying what undoing did.
    pub fn undo(&mut self) -> Option<String> {
        let shield = self.shield.take()?;
        Some(match shield.undo() {
            Ok(said) => said,
            Err(e) => format!("FAILED to undo the shield: {e}"),
        })
    }
}

/// Why the shield was refused, naming the process that holds it.
fn why_not(e: &ShieldError) -> String {
    match e {
        ShieldError::Busy { holder: Some(pid) } => {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .replace('\0', " ")
                        .trim()
                        .to_owned()
                })
                .unwrap_or_default();
            format!("the shield is held by pid {pid} ({cmd})")
        }
        other => other.to_string(),
    }
}

/// The starts of iokerneld's log lines that say what it shielded or why it could not.
const IOKERNELD_SHIELD_LINES: [&str; 2] = ["shielded CPU", "running unshielded"];

/// What iokerneld said it shielded (its log line), or why there is no such line.
pub fn iokerneld_said(plan: &Plan, log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            IOKERNELD_SHIELD_LINES
                .iter()
                .find_map(|start| l.find(start))
                .map(|at| l[at..].trim())
        })
        .collect();
    match (lines.is_empty(), plan.shield) {
        (false, _) => format!("iokerneld: {}", lines.join(" | ")),
        (true, true) => format!(
            "iokerneld --shield on logged no shield line (see {})",
            log.display()
        ),
        (true, false) => {
            "off (--no-shield, or --nic xdp with the client on iokerneld's CPU: iokerneld \
             --shield off)"
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iokernelds_shield_line_is_taken_from_its_log() {
        use clap::Parser;
        let plan = |extra: &[&str]| {
            let mut v = vec!["corral-demo"];
            v.extend_from_slice(extra);
            crate::cli::Args::try_parse_from(v).unwrap().plan().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("iokerneld.log");
        std::fs::write(
            &log,
            "1.000001 WARN  something else\n1.000002 INFO  shielded CPU 0: moved 41 threads off \
             it; loop at SCHED_FIFO priority 49\n",
        )
        .unwrap();
        assert_eq!(
            iokerneld_said(&plan(&[]), &log),
            "iokerneld: shielded CPU 0: moved 41 threads off it; loop at SCHED_FIFO priority 49"
        );
        std::fs::write(
            &log,
            "1.1 WARN  running unshielded: another process (pid 7) holds the shield\n",
        )
        .unwrap();
        assert!(
            iokerneld_said(&plan(&[]), &log).ends_with("holds the shield"),
            "{}",
            iokerneld_said(&plan(&[]), &log)
        );
        std::fs::write(&log, "nothing\n").unwrap();
        assert!(iokerneld_said(&plan(&[]), &log).contains("logged no"));
        assert!(iokerneld_said(&plan(&["--no-shield"]), &log).starts_with("off"));
        let off = BaselineShield::apply(&plan(&["--no-shield"]), "Linux");
        assert!(
            !off.applied() && off.said.starts_with("off"),
            "{}",
            off.said
        );
        assert_eq!((off.loop_priority(), off.server_priority()), (None, None));
    }
}
