//! Shielding: keeps iokerneld's CPU for iokerneld alone, and lets latency-critical kthreads run
//! unpreempted by ordinary Linux threads.
//!
//! On the kept CPUs, [`Shield::apply`]:
//! - moves every other movable thread off them with `sched_setaffinity` (its mask minus the kept
//!   CPUs). User threads pinned there are moved off all the same. Per-CPU kernel threads stay,
//!   and those in a fair class are raised to SCHED_FIFO [`WORKER_PRIORITY`], above the loop,
//!   so that work the kernel must do on that CPU is not held up behind it. Affinity rather than a cpuset cgroup: this machine class has
//!   cgroup v1, where attaching a task to a cpuset overwrites its affinity, so the threads that
//!   pinned themselves (runtimes' kthreads, load generators) would lose their pinning;
//! - moves the unbound workqueues and every IRQ that can go elsewhere off them;
//! - lifts real-time throttling (`sched_rt_runtime_us = -1`), which would otherwise idle the
//!   loop's CPU 50 ms of every second, and shrinks the kept CPUs' fair servers (the deadline
//!   servers that give the fair class time on a CPU a real-time thread occupies) to
//!   [`plan::FAIR_SERVER_RUNTIME_NS`] per [`plan::FAIR_SERVER_PERIOD_NS`] where debugfs allows
//!   it. The managed CPUs keep the default fair server (50 ms per second), which is what keeps
//!   a FIFO kthread that runs away from shutting every fair thread out of its CPU.
//!
//! Every change is written to a journal in /run/corral before it is made; [`Shield::undo`] (or
//! dropping the shield, or the next [`Shield::apply`] after a crash, or [`undo_stale`]) puts
//! back what the journal names, and only where the value is still the one the shield set.
//! A lock file keeps a second shield from fighting the first.

mod machine;
pub mod plan;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use log::{debug, info, warn};

use self::plan::{Entry, Lineage, Move, Unjournaled};
use crate::cpus::format_cpu_list;

/// SCHED_FIFO priority of iokerneld's loop: just below the threaded interrupt handlers
/// (priority 50), so that an interrupt that cannot leave the loop's CPU is still handled.
pub const LOOP_PRIORITY: u32 = 49;
/// SCHED_FIFO priority shielding gives the per-CPU kernel threads of the kept CPUs (kworkers,
/// `ksoftirqd`): just above the loop, so that work the kernel must do on that CPU runs at once
/// instead of after the fair server's wait of up to most of a second; level with the threaded
/// interrupt handlers, which keep their turn.
pub const WORKER_PRIORITY: u32 = LOOP_PRIORITY + 1;
/// SCHED_FIFO priority of latency-critical kthreads on the managed cores: above every fair
/// thread, below the loop and the interrupt handlers.
pub const KTHREAD_PRIORITY: u32 = 1;

/// The lock a shield holds for its life; it names the holder's pid.
pub const LOCK_PATH: &str = "/run/corral/shield.lock";
/// The journal of what a shield changed.
pub const JOURNAL_PATH: &str = "/run/corral/shield.state";

/// How many times the threads are swept: threads started during a sweep by a process not
/// swept yet are caught by the next.
const SWEEPS: usize = 4;
/// Names of threads left on the kept CPUs that the summary lists.
const NAMES_SHOWN: usize = 6;

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
    /// A file or system call shielding cannot do without failed.
    Io { what: String, error: io::Error },
    /// The journal cannot be read: what it changed must be put back by hand.
    Journal { path: PathBuf, problem: String },
    /// The spec asks for nothing that can be done.
    Invalid { problem: String },
    /// Undone as far as possible; these could not be put back.
    Incomplete { done: String, failures: Vec<String> },
}

impl fmt::Display for ShieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Busy { holder: Some(pid) } => write!(
                f,
                "another process (pid {pid}) holds the shield ({LOCK_PATH}); it is undone when \
                 that process exits"
            ),
            Self::Busy { holder: None } => {
                write!(f, "another process holds the shield ({LOCK_PATH})")
            }
            Self::Io { what, error } => write!(f, "cannot {what}: {error}"),
            Self::Journal { path, problem } => write!(
                f,
                "the shield journal {} is unreadable ({problem}); restore what it lists by \
                 hand, then remove it",
                path.display()
            ),
            Self::Invalid { problem } => write!(f, "invalid shield: {problem}"),
            Self::Incomplete { done, failures } => {
                write!(f, "{done}; could not restore: {}", failures.join("; "))
            }
        }
    }
}

impl std::error::Error for ShieldError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { error, .. } => Some(error),
            _ => None,
        }
    }
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> ShieldError {
    move |error| ShieldError::Io {
        what: what.into(),
        error,
    }
}

/// The journal file and what it holds so far.
#[derive(Debug)]
struct Journal {
    file: File,
    entries: Vec<Entry>,
}

impl Journal {
    /// Writes `batch` to the file in one write, then remembers it: a change is recorded before
    /// it is made.
    fn record(&mut self, batch: Vec<Entry>) -> Result<(), ShieldError> {
        if batch.is_empty() {
            return Ok(());
        }
        let text: String = batch.iter().map(|e| format!("{e}\n")).collect();
        self.file
            .write_all(text.as_bytes())
            .map_err(io_error(format!("write the shield journal {JOURNAL_PATH}")))?;
        self.entries.extend(batch);
        Ok(())
    }
}

/// An applied shield: holds the lock and the journal of what was changed.
#[derive(Debug)]
pub struct Shield {
    /// Holds the flock for the shield's life.
    _lock: File,
    journal: Journal,
    summary: String,
    undone: bool,
    keep: Vec<usize>,
    exempt: Vec<u32>,
    online: Vec<usize>,
    /// Threads moved so far, by tid: their start time (a recycled tid is another thread) and
    /// journaled original mask.
    moved: HashMap<u32, (u64, Vec<usize>)>,
    /// Threads the kernel would not move.
    refused: HashSet<u32>,
    /// Kernel threads raised to [`WORKER_PRIORITY`] so far, by tid: their start time.
    raised: HashMap<u32, u64>,
}

/// What one sweep of the threads did.
#[derive(Debug, Default)]
pub struct Sweep {
    /// Threads moved off the kept CPUs.
    pub moved: usize,
    /// Of those, user threads that were allowed only on the kept CPUs: `comm[tid]`.
    pub evicted: Vec<String>,
    /// Per-CPU kernel threads raised above the loop (born since the last sweep): `comm[tid]`.
    pub raised: Vec<String>,
}

/// What applying did, for the summary.
#[derive(Debug, Default)]
struct Applied {
    moved: usize,
    /// Threads that can run only on kept CPUs, by tid: their names.
    stayed: HashMap<u32, (bool, String)>,
    refused: HashSet<u32>,
    /// User threads allowed only on kept CPUs, moved off all the same: `comm[tid]`.
    evicted: Vec<String>,
    /// Kernel threads allowed only on kept CPUs, raised to [`WORKER_PRIORITY`]: their names.
    raised: Vec<String>,
    /// Kernel threads that could not be raised: `comm: error`.
    not_raised: Vec<String>,
    failed: Vec<String>,
    irqs_moved: usize,
    irqs_refused: usize,
    notes: Vec<String>,
}

impl Shield {
    /// Takes /run/corral/shield.lock (flock, non-blocking), undoes a journal a crashed holder
    /// left, then applies, journaling each change in /run/corral/shield.state before making it.
    pub fn apply(spec: &ShieldSpec) -> Result<Shield, ShieldError> {
        if spec.keep.is_empty() {
            return Err(ShieldError::Invalid {
                problem: "no CPUs to keep".into(),
            });
        }
        let online = crate::cpus::Sysfs::default()
            .online()
            .map_err(|e| ShieldError::Invalid {
                problem: e.to_string(),
            })?;
        if let Some(cpu) = spec.keep.iter().find(|c| !online.contains(c)) {
            return Err(ShieldError::Invalid {
                problem: format!("CPU {cpu} is not online"),
            });
        }
        if online.iter().all(|c| spec.keep.contains(c)) {
            return Err(ShieldError::Invalid {
                problem: format!(
                    "keeping CPUs {} would leave no CPU for every other thread",
                    format_cpu_list(&spec.keep)
                ),
            });
        }
        let lock = take_lock()?;
        if let Some(report) = undo_journal_file()? {
            info!("undid a shield its holder left behind: {report}");
        }
        let file = File::options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(JOURNAL_PATH)
            .map_err(io_error(format!("create {JOURNAL_PATH}")))?;
        let mut journal = Journal {
            file,
            entries: Vec::new(),
        };
        journal
            .file
            .write_all(format!("{}\n", plan::JOURNAL_HEADER).as_bytes())
            .map_err(io_error(format!("write {JOURNAL_PATH}")))?;
        let own = std::process::id();
        let mut exempt = vec![own];
        exempt.extend(spec.exempt_pids.iter().filter(|&&p| p != own));
        let began = machine::ticks_since_boot().map_err(io_error("read /proc/uptime"))?;
        journal.record(vec![
            Entry::Holder { pid: own },
            Entry::Keep {
                cpus: spec.keep.clone(),
            },
            Entry::Exempt {
                pids: exempt.clone(),
            },
            Entry::Began { ticks: began },
        ])?;
        let mut shield = Shield {
            _lock: lock,
            journal,
            summary: String::new(),
            undone: false,
            keep: spec.keep.clone(),
            exempt,
            online,
            moved: HashMap::new(),
            refused: HashSet::new(),
            raised: HashMap::new(),
        };
        // On an error the shield is dropped, which undoes what was journaled.
        let applied = shield.shield()?;
        shield.summary = summarize(&spec.keep, &applied);
        Ok(shield)
    }

    fn shield(&mut self) -> Result<Applied, ShieldError> {
        let keep = self.keep.clone();
        let mut applied = Applied::default();
        self.lift_rt_throttling(&mut applied)?;
        self.shrink_fair_servers(&keep, &mut applied)?;
        self.move_masks(&keep, &mut applied)?;
        self.move_irqs(&keep, &mut applied)?;
        self.move_threads(&mut applied)?;
        Ok(applied)
    }

    /// Moves off the kept CPUs the threads that came onto them since the last sweep: threads
    /// started by exempt processes' children, a process pinned there by hand, a thread someone
    /// moved back. [`Keeper`] calls this often enough that none of them ever runs there: the
    /// kernel's fair server lets a fair thread starved by the loop run only after it has waited
    /// most of a second.
    pub fn sweep(&mut self) -> Result<Sweep, ShieldError> {
        let mut applied = Applied::default();
        self.move_threads(&mut applied)?;
        Ok(Sweep {
            moved: applied.moved,
            evicted: applied.evicted,
            raised: applied.raised,
        })
    }

    fn lift_rt_throttling(&mut self, applied: &mut Applied) -> Result<(), ShieldError> {
        let text = match machine::read_trimmed(machine::RT_RUNTIME) {
            Ok(text) => text,
            Err(e) => {
                applied.notes.push(format!(
                    "RT throttling left alone ({}: {e})",
                    machine::RT_RUNTIME
                ));
                return Ok(());
            }
        };
        let Ok(us) = text.parse::<i64>() else {
            applied.notes.push(format!(
                "RT throttling left alone ({} reads {text:?})",
                machine::RT_RUNTIME
            ));
            return Ok(());
        };
        if us < 0 {
            applied.notes.push("RT throttling already off".into());
            return Ok(());
        }
        self.journal.record(vec![Entry::RtRuntime { us }])?;
        match machine::write_value(machine::RT_RUNTIME, "-1") {
            Ok(()) => applied.notes.push(format!(
                "RT throttling lifted (sched_rt_runtime_us was {us})"
            )),
            Err(e) => applied
                .notes
                .push(format!("RT throttling could not be lifted: {e}")),
        }
        Ok(())
    }

    fn shrink_fair_servers(
        &mut self,
        keep: &[usize],
        applied: &mut Applied,
    ) -> Result<(), ShieldError> {
        let debugfs = machine::DEBUGFS;
        let mounted_here = !machine::debugfs_mounted(debugfs);
        if mounted_here {
            self.journal.record(vec![Entry::DebugfsMounted {
                path: debugfs.into(),
            }])?;
            if let Err(e) = machine::mount_debugfs(debugfs) {
                applied
                    .notes
                    .push(format!("fair server unchanged: cannot mount debugfs: {e}"));
                return Ok(());
            }
        }
        let mut shrunk = Vec::new();
        let mut problem = None;
        for &cpu in keep {
            let runtime = machine::fair_server_file(debugfs, cpu, "runtime");
            let period = machine::fair_server_file(debugfs, cpu, "period");
            let old = machine::read_number(&runtime)
                .and_then(|r| Ok((r, machine::read_number(&period)?)));
            let (old_runtime, old_period) = match old {
                Ok(old) => old,
                Err(e) => {
                    problem = Some(describe_debugfs_error(&runtime, &e));
                    break;
                }
            };
            if old_runtime <= plan::FAIR_SERVER_RUNTIME_NS
                && old_period <= plan::FAIR_SERVER_PERIOD_NS
            {
                continue;
            }
            self.journal.record(vec![Entry::FairServer {
                cpu,
                runtime_ns: old_runtime,
                period_ns: old_period,
            }])?;
            let writes = plan::fair_server_writes(
                old_period,
                plan::FAIR_SERVER_RUNTIME_NS,
                plan::FAIR_SERVER_PERIOD_NS,
            );
            let result = writes.iter().try_for_each(|&(name, value)| {
                machine::write_value(
                    machine::fair_server_file(debugfs, cpu, name),
                    &value.to_string(),
                )
            });
            match result {
                Ok(()) => shrunk.push(cpu),
                Err(e) => {
                    problem = Some(format!("CPU {cpu}: {e}"));
                    break;
                }
            }
        }
        if !shrunk.is_empty() {
            applied.notes.push(format!(
                "fair server on CPU {} shrunk to {} us per {} us",
                format_cpu_list(&shrunk),
                plan::FAIR_SERVER_RUNTIME_NS / 1000,
                plan::FAIR_SERVER_PERIOD_NS / 1000
            ));
        }
        if let Some(problem) = problem {
            applied.notes.push(format!(
                "fair server left at the kernel's setting ({problem}): a fair thread that must \
                 run on the kept CPUs can take them for up to its runtime per period"
            ));
        }
        // The servers keep their settings without debugfs: it is only needed to change them.
        if mounted_here && let Err(e) = machine::unmount(debugfs) {
            warn!("cannot unmount {debugfs}: {e}");
        }
        Ok(())
    }

    fn move_masks(&mut self, keep: &[usize], applied: &mut Applied) -> Result<(), ShieldError> {
        for (path, what) in [
            (machine::WORKQUEUE_MASK, "unbound workqueues"),
            (machine::IRQ_DEFAULT, "new IRQs"),
        ] {
            let cpus = match machine::read_hex_mask(path) {
                Ok(cpus) => cpus,
                Err(e) => {
                    applied
                        .notes
                        .push(format!("{what} left alone ({path}: {e})"));
                    continue;
                }
            };
            let Move::To(left) = plan::plan_move(&cpus, keep) else {
                continue;
            };
            self.journal
                .record(vec![if path == machine::WORKQUEUE_MASK {
                    Entry::WorkqueueMask { cpus }
                } else {
                    Entry::IrqDefault { cpus }
                }])?;
            match machine::write_value(path, &plan::format_hex_mask(&left)) {
                Ok(()) => applied
                    .notes
                    .push(format!("{what} on CPUs {}", format_cpu_list(&left))),
                Err(e) => applied
                    .notes
                    .push(format!("{what} could not be moved ({path}: {e})")),
            }
        }
        Ok(())
    }

    fn move_irqs(&mut self, keep: &[usize], applied: &mut Applied) -> Result<(), ShieldError> {
        let mut batch = Vec::new();
        for irq in machine::irqs().map_err(io_error(format!("list {}", machine::IRQ_ROOT)))? {
            let Ok(cpus) = machine::read_cpu_list(machine::irq_affinity_path(irq)) else {
                continue;
            };
            if let Move::To(left) = plan::plan_move(&cpus, keep) {
                batch.push((Entry::Irq { irq, cpus }, irq, left));
            }
        }
        self.journal
            .record(batch.iter().map(|(e, _, _)| e.clone()).collect())?;
        for (_, irq, left) in batch {
            match machine::write_cpu_list(machine::irq_affinity_path(irq), &left) {
                Ok(()) => applied.irqs_moved += 1,
                // Interrupts whose controller cannot route them elsewhere refuse with EIO.
                Err(_) => applied.irqs_refused += 1,
            }
        }
        Ok(())
    }

    fn move_threads(&mut self, applied: &mut Applied) -> Result<(), ShieldError> {
        let keep = self.keep.clone();
        for _ in 0..SWEEPS {
            // (entry to journal, if the thread is new to the shield; tid; target; evicted name)
            let mut batch = Vec::new();
            // Kernel threads that stay on the kept CPUs and go above the loop: (tgid, tid, stat).
            let mut raises = Vec::new();
            let processes = machine::processes().map_err(io_error("list /proc"))?;
            for pid in processes.into_iter().filter(|p| !self.exempt.contains(p)) {
                for tid in machine::threads(pid) {
                    if self.refused.contains(&tid) {
                        continue;
                    }
                    // The affinity alone first: a sweep reads the stat of only the threads it
                    // moves, which keeps a sweep of an unchanged machine cheap.
                    let Ok(cpus) = machine::affinity(tid) else {
                        continue;
                    };
                    if plan::plan_move(&cpus, &keep) == Move::Unaffected {
                        continue;
                    }
                    let Ok(stat) = machine::thread_stat(pid, tid) else {
                        continue;
                    };
                    let user = stat.flags & plan::PF_KTHREAD == 0;
                    let only_on_kept = plan::plan_move(&cpus, &keep) == Move::OnlyOnKept;
                    // Per-CPU kernel threads (bound by the kernel, which refuses to move them)
                    // stay where they are, above the loop.
                    if only_on_kept
                        && plan::raises_class(&stat)
                        && self.raised.get(&tid) != Some(&stat.starttime)
                    {
                        raises.push((pid, tid, stat.clone()));
                    }
                    if stat.flags & plan::PF_NO_SETAFFINITY != 0 {
                        self.refused.insert(tid);
                        continue;
                    }
                    let known = self
                        .moved
                        .get(&tid)
                        .filter(|(starttime, _)| *starttime == stat.starttime);
                    // A thread moved before that came back keeps its first original.
                    let original = known.map_or(&cpus, |(_, original)| original);
                    // Kernel threads allowed only on kept CPUs are per-CPU workers: they stay.
                    let target = if user || !only_on_kept {
                        plan::thread_target(&cpus, &keep, &self.online)
                    } else {
                        None
                    };
                    let Some(target) = target else {
                        let name = if user {
                            format!("{}[{tid}]", stat.comm)
                        } else {
                            stat.comm
                        };
                        applied.stayed.insert(tid, (user, name));
                        continue;
                    };
                    let evicted = only_on_kept.then(|| format!("{}[{tid}]", stat.comm));
                    let entry = known.is_none().then(|| Entry::Thread {
                        tgid: pid,
                        tid,
                        starttime: stat.starttime,
                        cpus: cpus.clone(),
                    });
                    let original = original.clone();
                    batch.push((entry, tid, stat.starttime, original, target, evicted));
                }
            }
            self.raise(raises, applied)?;
            if batch.is_empty() {
                break;
            }
            self.journal
                .record(batch.iter().filter_map(|b| b.0.clone()).collect())?;
            for (_, tid, starttime, original, target, evicted) in batch {
                self.moved.insert(tid, (starttime, original));
                match machine::set_affinity(tid, &target) {
                    Ok(()) => {
                        applied.moved += 1;
                        applied.evicted.extend(evicted);
                    }
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                        self.refused.insert(tid);
                        applied.refused.insert(tid);
                    }
                    Err(e) if crate::cpus::is_gone(&e) => {}
                    Err(e) => applied.failed.push(format!("thread {tid}: {e}")),
                }
            }
        }
        applied.refused.extend(self.refused.iter().copied());
        Ok(())
    }

    /// Raises kernel threads that must stay on the kept CPUs to [`WORKER_PRIORITY`],
    /// journaling each class first.
    fn raise(
        &mut self,
        raises: Vec<(u32, u32, plan::ThreadStat)>,
        applied: &mut Applied,
    ) -> Result<(), ShieldError> {
        self.journal.record(
            raises
                .iter()
                .map(|(tgid, tid, stat)| Entry::Class {
                    tgid: *tgid,
                    tid: *tid,
                    starttime: stat.starttime,
                    policy: stat.policy,
                    rt_priority: stat.rt_priority,
                    raised_to: WORKER_PRIORITY,
                })
                .collect(),
        )?;
        for (_, tid, stat) in raises {
            self.raised.insert(tid, stat.starttime);
            let Ok(raw) = i32::try_from(tid) else {
                continue;
            };
            match set_realtime(raw, WORKER_PRIORITY) {
                Ok(()) => applied.raised.push(format!("{}[{tid}]", stat.comm)),
                Err(e) if crate::cpus::is_gone(&e) => {}
                Err(e) => applied.not_raised.push(format!("{}: {e}", stat.comm)),
            }
        }
        Ok(())
    }

    /// One line: what was done and what could not be.
    pub fn summary(&self) -> String {
        self.summary.clone()
    }

    /// Undoes everything in reverse; also done on drop (logging failures).
    pub fn undo(mut self) -> Result<String, ShieldError> {
        self.undone = true;
        let result = undo_entries(&self.journal.entries);
        if let Err(e) = std::fs::remove_file(JOURNAL_PATH) {
            warn!("cannot remove {JOURNAL_PATH}: {e}");
        }
        result
    }
}

impl Drop for Shield {
    fn drop(&mut self) {
        if self.undone {
            return;
        }
        self.undone = true;
        match undo_entries(&self.journal.entries) {
            Ok(report) => info!("{report}"),
            Err(e) => warn!("{e}"),
        }
        if let Err(e) = std::fs::remove_file(JOURNAL_PATH) {
            warn!("cannot remove {JOURNAL_PATH}: {e}");
        }
    }
}

fn describe_debugfs_error(path: &Path, e: &io::Error) -> String {
    if e.raw_os_error() == Some(libc::EPERM) {
        format!(
            "{} cannot be read: {e}; the kernel's lockdown restricts debugfs",
            path.display()
        )
    } else {
        format!("{}: {e}", path.display())
    }
}

fn summarize(keep: &[usize], applied: &Applied) -> String {
    let mut stayed: Vec<&(bool, String)> = applied.stayed.values().collect();
    // User threads first: they are the ones someone can do something about.
    stayed.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut names: Vec<&str> = stayed
        .iter()
        .take(NAMES_SHOWN)
        .map(|(_, n)| n.as_str())
        .collect();
    let more = stayed.len().saturating_sub(NAMES_SHOWN);
    let more = format!("and {more} more");
    if stayed.len() > NAMES_SHOWN {
        names.push(&more);
    }
    let evicted = if applied.evicted.is_empty() {
        String::new()
    } else {
        format!(
            " (of which {} were pinned there: {})",
            applied.evicted.len(),
            applied.evicted.join(", ")
        )
    };
    let mut parts = vec![format!(
        "shielded CPU {}: moved {} threads off it{evicted}; {} threads can run only there and \
         stay{}; {} refused to move",
        format_cpu_list(keep),
        applied.moved,
        stayed.len(),
        if names.is_empty() {
            String::new()
        } else {
            format!(" ({})", names.join(", "))
        },
        applied.refused.len()
    )];
    if !applied.failed.is_empty() {
        parts.push(format!(
            "{} threads could not be moved ({})",
            applied.failed.len(),
            applied.failed.join(", ")
        ));
    }
    if !applied.raised.is_empty() {
        parts.push(format!(
            "{} of those (kernel workers) raised above the loop to SCHED_FIFO {WORKER_PRIORITY}: {}",
            applied.raised.len(),
            applied.raised.join(", ")
        ));
    }
    if !applied.not_raised.is_empty() {
        parts.push(format!(
            "{} kernel workers keep their class ({})",
            applied.not_raised.len(),
            applied.not_raised.join(", ")
        ));
    }
    parts.push(format!(
        "{} IRQs moved off, {} refused",
        applied.irqs_moved, applied.irqs_refused
    ));
    parts.extend(applied.notes.iter().cloned());
    parts.join("; ")
}

/// Takes the shield lock, or says who holds it.
fn take_lock() -> Result<File, ShieldError> {
    let dir = Path::new(LOCK_PATH).parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(io_error(format!("create {}", dir.display())))?;
    let mut lock = File::options()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(LOCK_PATH)
        .map_err(io_error(format!("open {LOCK_PATH}")))?;
    match rustix::fs::flock(
        lock.as_fd(),
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    ) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let mut text = String::new();
            let _ = lock.read_to_string(&mut text);
            return Err(ShieldError::Busy {
                holder: text.trim().parse().ok(),
            });
        }
        Err(e) => return Err(io_error(format!("lock {LOCK_PATH}"))(e.into())),
    }
    lock.set_len(0)
        .and_then(|()| lock.rewind())
        .and_then(|()| writeln!(lock, "{}", std::process::id()))
        .map_err(io_error(format!("write {LOCK_PATH}")))?;
    Ok(lock)
}

/// Undoes and removes a journal left by a holder that died; `None` if there is none.
fn undo_journal_file() -> Result<Option<String>, ShieldError> {
    let text = match std::fs::read_to_string(JOURNAL_PATH) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(format!("read {JOURNAL_PATH}"))(e)),
    };
    let entries = plan::parse_journal(&text).map_err(|problem| ShieldError::Journal {
        path: JOURNAL_PATH.into(),
        problem,
    })?;
    let result = undo_entries(&entries);
    std::fs::remove_file(JOURNAL_PATH).map_err(io_error(format!("remove {JOURNAL_PATH}")))?;
    match result {
        Ok(report) => Ok(Some(report)),
        Err(ShieldError::Incomplete { done, failures }) => {
            warn!("{done}; could not restore: {}", failures.join("; "));
            Ok(Some(done))
        }
        Err(e) => Err(e),
    }
}

/// Undoes a shield that a process which died left behind, without applying one: for operators
/// after a crash. `Ok(None)`: there was none. `Busy` if a live process holds the shield.
pub fn undo_stale() -> Result<Option<String>, ShieldError> {
    // Without a journal there is nothing to undo, and no lock to take (which a user other than
    // root could not).
    if !Path::new(JOURNAL_PATH).exists() {
        return Ok(None);
    }
    let _lock = take_lock()?;
    undo_journal_file()
}

/// What undoing did.
#[derive(Debug, Default)]
struct Undone {
    threads: usize,
    newborns: usize,
    /// Threads changed by someone else since, left as they are.
    changed: usize,
    irqs: usize,
    /// Raised kernel threads put back in their class.
    classes: usize,
    notes: Vec<String>,
    failures: Vec<String>,
}

/// Puts back what `entries` changed, last change first, wherever the value is still the one
/// the shield set.
fn undo_entries(entries: &[Entry]) -> Result<String, ShieldError> {
    let mut keep = Vec::new();
    let mut exempt = HashSet::new();
    let mut began = 0;
    for entry in entries {
        match entry {
            Entry::Keep { cpus } => keep = cpus.clone(),
            Entry::Exempt { pids } => exempt.extend(pids.iter().copied()),
            Entry::Holder { pid } => {
                exempt.insert(*pid);
            }
            Entry::Began { ticks } => began = *ticks,
            _ => {}
        }
    }
    let mut undone = Undone::default();
    undo_classes(entries, &mut undone);
    undo_threads(entries, &keep, exempt, began, &mut undone);
    let mut mounted_here = false;
    for entry in entries.iter().rev() {
        match entry {
            Entry::Irq { irq, cpus } => {
                let path = machine::irq_affinity_path(*irq);
                match machine::read_cpu_list(&path) {
                    Ok(now) if plan::restore_journaled(&now, cpus, &keep) => {
                        match machine::write_cpu_list(&path, cpus) {
                            Ok(()) => undone.irqs += 1,
                            Err(e) => undone.failures.push(format!("IRQ {irq}: {e}")),
                        }
                    }
                    _ => {}
                }
            }
            Entry::WorkqueueMask { cpus } | Entry::IrqDefault { cpus } => {
                let (path, what) = if matches!(entry, Entry::WorkqueueMask { .. }) {
                    (machine::WORKQUEUE_MASK, "unbound workqueues")
                } else {
                    (machine::IRQ_DEFAULT, "new IRQs")
                };
                match machine::read_hex_mask(path) {
                    Ok(now) if plan::restore_journaled(&now, cpus, &keep) => {
                        match machine::write_value(path, &plan::format_hex_mask(cpus)) {
                            Ok(()) => undone
                                .notes
                                .push(format!("{what} back on CPUs {}", format_cpu_list(cpus))),
                            Err(e) => undone.failures.push(format!("{path}: {e}")),
                        }
                    }
                    Ok(_) => {}
                    Err(e) => undone.failures.push(format!("{path}: {e}")),
                }
            }
            Entry::FairServer {
                cpu,
                runtime_ns,
                period_ns,
            } => {
                let debugfs = machine::DEBUGFS;
                if !mounted_here && !machine::debugfs_mounted(debugfs) {
                    if let Err(e) = machine::mount_debugfs(debugfs) {
                        undone.failures.push(format!(
                            "fair server of CPU {cpu}: cannot mount debugfs: {e}"
                        ));
                        continue;
                    }
                    mounted_here = true;
                }
                let now_period =
                    machine::read_number(machine::fair_server_file(debugfs, *cpu, "period"))
                        .unwrap_or(plan::FAIR_SERVER_PERIOD_NS);
                let result = plan::fair_server_writes(now_period, *runtime_ns, *period_ns)
                    .iter()
                    .try_for_each(|&(name, value)| {
                        machine::write_value(
                            machine::fair_server_file(debugfs, *cpu, name),
                            &value.to_string(),
                        )
                    });
                match result {
                    Ok(()) => undone.notes.push(format!(
                        "fair server of CPU {cpu} back to {} us per {} us",
                        runtime_ns / 1000,
                        period_ns / 1000
                    )),
                    Err(e) => undone
                        .failures
                        .push(format!("fair server of CPU {cpu}: {e}")),
                }
            }
            Entry::DebugfsMounted { path } if machine::debugfs_mounted(path) => {
                match machine::unmount(path) {
                    Ok(()) => mounted_here = false,
                    Err(e) => undone.failures.push(format!("unmount {path}: {e}")),
                }
            }
            Entry::RtRuntime { us } => {
                let now = machine::read_trimmed(machine::RT_RUNTIME);
                if now.is_ok_and(|now| now == "-1") {
                    match machine::write_value(machine::RT_RUNTIME, &us.to_string()) {
                        Ok(()) => undone
                            .notes
                            .push(format!("RT throttling back (sched_rt_runtime_us {us})")),
                        Err(e) => undone
                            .failures
                            .push(format!("{}: {e}", machine::RT_RUNTIME)),
                    }
                }
            }
            _ => {}
        }
    }
    if mounted_here && let Err(e) = machine::unmount(machine::DEBUGFS) {
        undone
            .failures
            .push(format!("unmount {}: {e}", machine::DEBUGFS));
    }
    let mut parts = vec![format!(
        "unshielded: restored {} threads and {} born during the shield ({} changed since by \
         others, left as they are); {} kernel workers back in their class; {} IRQs restored",
        undone.threads, undone.newborns, undone.changed, undone.classes, undone.irqs
    )];
    parts.extend(undone.notes);
    let done = parts.join("; ");
    if undone.failures.is_empty() {
        Ok(done)
    } else {
        Err(ShieldError::Incomplete {
            done,
            failures: undone.failures,
        })
    }
}

/// Puts the raised kernel threads that are still alive and still in the class the shield gave
/// them back in their journaled class.
fn undo_classes(entries: &[Entry], undone: &mut Undone) {
    for entry in entries.iter().rev() {
        let Entry::Class {
            tgid,
            tid,
            starttime,
            policy,
            rt_priority,
            raised_to,
        } = entry
        else {
            continue;
        };
        let Ok(now) = machine::thread_stat(*tgid, *tid) else {
            continue;
        };
        if now.starttime != *starttime || !plan::restore_class(&now, *raised_to) {
            continue;
        }
        let (Ok(raw), Ok(policy)) = (i32::try_from(*tid), i32::try_from(*policy)) else {
            continue;
        };
        match crate::sys::set_scheduler(raw, policy, *rt_priority) {
            Ok(()) => undone.classes += 1,
            Err(e) if crate::cpus::is_gone(&e) => {}
            Err(e) => undone
                .failures
                .push(format!("class of {} [{tid}]: {e}", now.comm)),
        }
    }
}

/// Restores the journaled threads still as the shield left them, then the threads born during
/// the shield that inherited a reduced mask.
fn undo_threads(
    entries: &[Entry],
    keep: &[usize],
    exempt: HashSet<u32>,
    began: u64,
    undone: &mut Undone,
) {
    let online = crate::cpus::Sysfs::default().online().unwrap_or_default();
    let mut journaled: HashMap<u32, u64> = HashMap::new();
    let mut originals: HashMap<u32, Vec<Vec<usize>>> = HashMap::new();
    for entry in entries.iter().rev() {
        let Entry::Thread {
            tgid,
            tid,
            starttime,
            cpus,
        } = entry
        else {
            continue;
        };
        journaled.insert(*tid, *starttime);
        originals.entry(*tgid).or_default().push(cpus.clone());
        // The same thread (tid and start time) and still as the shield left it.
        let same = machine::thread_stat(*tgid, *tid).is_ok_and(|s| s.starttime == *starttime);
        let Ok(now) = machine::affinity(*tid) else {
            continue;
        };
        if !same {
            continue;
        }
        if plan::restore_thread(&now, cpus, keep, &online) {
            match machine::set_affinity(*tid, cpus) {
                Ok(()) => undone.threads += 1,
                Err(e) if crate::cpus::is_gone(&e) => {}
                Err(e) => undone.failures.push(format!("thread {tid}: {e}")),
            }
        } else if now != *cpus {
            undone.changed += 1;
        }
    }
    let Ok(processes) = machine::processes() else {
        undone.failures.push("cannot list /proc".into());
        return;
    };
    let parents = processes
        .iter()
        .filter_map(|&pid| Some((pid, machine::process_stat(pid).ok()?.ppid)))
        .collect();
    let lineage = Lineage {
        originals,
        parents,
        exempt,
        began,
        online,
        keep: keep.to_vec(),
    };
    for pid in processes {
        for tid in machine::threads(pid) {
            let Ok(stat) = machine::thread_stat(pid, tid) else {
                continue;
            };
            // Kernel threads that refuse affinity changes were never moved: new kernel workers
            // follow the workqueues' mask, which is put back with the rest.
            if journaled.get(&tid) == Some(&stat.starttime)
                || stat.flags & plan::PF_NO_SETAFFINITY != 0
            {
                continue;
            }
            let Ok(cpus) = machine::affinity(tid) else {
                continue;
            };
            let thread = Unjournaled {
                tgid: pid,
                starttime: stat.starttime,
                cpus,
            };
            if let Some(original) = lineage.restore_newborn(&thread) {
                match machine::set_affinity(tid, &original) {
                    Ok(()) => undone.newborns += 1,
                    Err(e) if crate::cpus::is_gone(&e) => {}
                    Err(e) => undone.failures.push(format!("thread {tid}: {e}")),
                }
            }
        }
    }
}

/// How often a [`Keeper`] sweeps. The kernel's default fair server lets a fair thread that a
/// real-time thread keeps off its CPU wait up to 950 ms, then run there for 50 ms; a thread
/// that comes onto a kept CPU is moved off long before that, so it never runs there, even if
/// the sweeping thread (in the fair class, on the managed cores) waits a while for its turn.
/// (Where debugfs allows it, the kept CPUs' fair servers are shrunk as well; this does not rely
/// on it.) A sweep of this machine's ~200 threads costs about 1 ms of CPU, so 0.25% of one
/// managed core goes to sweeping.
pub const SWEEP_PERIOD: Duration = Duration::from_millis(400);

/// Keeps a shield in force from a thread of its own, off the kept CPUs, sweeping the threads
/// every [`SWEEP_PERIOD`]; stopping or dropping it undoes the shield.
#[derive(Debug)]
pub struct Keeper {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Shield>>,
}

impl Keeper {
    /// Starts the sweeping thread. If it cannot be started, the shield is undone (it was moved
    /// into the thread that was never created) and the error returned.
    pub fn start(shield: Shield) -> io::Result<Keeper> {
        let stop = Arc::new(AtomicBool::new(false));
        let off_kept = plan::without(&shield.online, &shield.keep);
        let (settled, on_its_cpus) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("corral-shield".into())
            .spawn({
                let stop = stop.clone();
                move || keep_shield(shield, &off_kept, &stop, settled)
            })?;
        // Returns once the thread has left the kept CPUs, so that a shield that is reported
        // applied does not change any further by itself.
        let _ = on_its_cpus.recv();
        Ok(Keeper {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops sweeping and undoes the shield.
    pub fn undo(mut self) -> Result<String, ShieldError> {
        match self.join() {
            Some(shield) => shield.undo(),
            None => Err(ShieldError::Incomplete {
                done: "the shield's sweeping thread panicked".into(),
                failures: vec![format!("run `iokerneld --unshield` to undo {JOURNAL_PATH}")],
            }),
        }
    }

    fn join(&mut self) -> Option<Shield> {
        let thread = self.thread.take()?;
        self.stop.store(true, Ordering::Release);
        thread.thread().unpark();
        thread.join().ok()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // The shield undoes itself as it drops.
        drop(self.join());
    }
}

fn keep_shield(
    mut shield: Shield,
    off_kept: &[usize],
    stop: &AtomicBool,
    settled: std::sync::mpsc::Sender<()>,
) -> Shield {
    // Off the kept CPUs (it was started from the loop's thread, pinned to one), and in the
    // fair class, whatever the thread that started it runs at.
    if let Err(e) = corral_affinity::set_thread_affinity(0, off_kept) {
        warn!("the shield's sweeping thread stays on the kept CPUs: {e}");
    }
    if let Err(e) = crate::sys::set_idle_policy(0, false) {
        warn!("the shield's sweeping thread keeps its class: {e}");
    }
    let _ = settled.send(());
    let mut failing = false;
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(SWEEP_PERIOD);
        if stop.load(Ordering::Acquire) {
            break;
        }
        match shield.sweep() {
            Ok(sweep) => {
                failing = false;
                if !sweep.raised.is_empty() {
                    debug!(
                        "raised kernel workers born on shielded CPU {} to SCHED_FIFO \
                         {WORKER_PRIORITY}: {}",
                        format_cpu_list(&shield.keep),
                        sweep.raised.join(", ")
                    );
                }
                if !sweep.evicted.is_empty() {
                    warn!(
                        "moved off shielded CPU {}, where they were pinned: {}",
                        format_cpu_list(&shield.keep),
                        sweep.evicted.join(", ")
                    );
                }
            }
            // Said once until it works again: a sweep that fails keeps failing the same way.
            Err(e) if !failing => {
                failing = true;
                warn!("cannot sweep the shielded CPUs: {e}");
            }
            Err(_) => {}
        }
    }
    shield
}

/// Puts thread `tid` (0: the caller) under SCHED_FIFO at `priority`.
pub fn set_realtime(tid: i32, priority: u32) -> io::Result<()> {
    crate::sys::set_scheduler(tid, libc::SCHED_FIFO, priority)
}
