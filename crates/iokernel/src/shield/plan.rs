//! The pure half of shielding: CPU mask arithmetic, the kernel's text formats (hex masks,
//! `/proc/TID/stat`), the journal's lines, and the decisions of what to move and what to put
//! back. Nothing here reads or writes the machine, so all of it is tested off it.

use std::collections::{HashMap, HashSet};
use std::fmt;

use crate::cpus::{MAX_CPU, format_cpu_list, parse_cpu_list};

/// `PF_KTHREAD` in `/proc/TID/stat`'s flags: a kernel thread.
pub const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_NO_SETAFFINITY`: the kernel refuses to change this thread's affinity.
pub const PF_NO_SETAFFINITY: u64 = 0x0400_0000;

/// The fair server given to each kept CPU: the fair class may run there at most
/// `FAIR_SERVER_RUNTIME_NS` in every `FAIR_SERVER_PERIOD_NS` while a real-time thread is
/// runnable. 30 us per 10 ms (0.3% of the CPU) is plenty for the per-CPU kernel workers that
/// must run there (vmstat, RCU callbacks and timers take microseconds at a time), and keeps
/// the gap a stray thread pinned there can make in the loop under iokerneld's 50 us stall
/// threshold; the kernel's default, 50 ms every second, lets such a thread stop the loop for
/// 50 ms at a time.
pub const FAIR_SERVER_RUNTIME_NS: u64 = 30_000;
pub const FAIR_SERVER_PERIOD_NS: u64 = 10_000_000;

/// `mask` without the `keep` CPUs, sorted.
pub fn without(mask: &[usize], keep: &[usize]) -> Vec<usize> {
    let mut left: Vec<usize> = mask.iter().copied().filter(|c| !keep.contains(c)).collect();
    left.sort_unstable();
    left.dedup();
    left
}

fn same_set(a: &[usize], b: &[usize]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    a.dedup();
    b.sort_unstable();
    b.dedup();
    a == b
}

/// What shielding does with a thread (or an IRQ, or a mask) allowed on `mask`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Move {
    /// It does not use the kept CPUs: nothing to do.
    Unaffected,
    /// It may run only on kept CPUs: it stays (a per-CPU kernel thread, or one pinned there).
    OnlyOnKept,
    /// Restrict it to these CPUs.
    To(Vec<usize>),
}

pub fn plan_move(mask: &[usize], keep: &[usize]) -> Move {
    if !mask.iter().any(|c| keep.contains(c)) {
        return Move::Unaffected;
    }
    let left = without(mask, keep);
    if left.is_empty() {
        Move::OnlyOnKept
    } else {
        Move::To(left)
    }
}

/// Where shielding puts a user thread allowed on `mask`: off the kept CPUs, or, for one allowed
/// only there (pinned by hand, or by a stray process), on every online CPU that is not kept,
/// since a thread left there would take the kept CPU from the loop whenever the kernel's fair
/// server lets it. `None`: nothing to do, or nowhere to go.
pub fn thread_target(mask: &[usize], keep: &[usize], online: &[usize]) -> Option<Vec<usize>> {
    match plan_move(mask, keep) {
        Move::Unaffected => None,
        Move::To(left) => Some(left),
        Move::OnlyOnKept => Some(without(online, keep)).filter(|left| !left.is_empty()),
    }
}

/// Whether undo puts a journaled user thread back on `original`: it is still where
/// [`thread_target`] put it.
pub fn restore_thread(
    current: &[usize],
    original: &[usize],
    keep: &[usize],
    online: &[usize],
) -> bool {
    thread_target(original, keep, online)
        .is_some_and(|target| !same_set(current, original) && same_set(current, &target))
}

/// Parses a kernel hex CPU mask such as `3`, `ff,ffffffff` or `00000000,00000001` (32-bit
/// groups, highest first).
pub fn parse_hex_mask(text: &str) -> Result<Vec<usize>, String> {
    let digits: String = text.trim().chars().filter(|&c| c != ',').collect();
    if digits.is_empty() {
        return Err(format!("{text:?} is not a hex CPU mask"));
    }
    let mut cpus = Vec::new();
    for (position, digit) in digits.chars().rev().enumerate() {
        let value = digit
            .to_digit(16)
            .ok_or_else(|| format!("{text:?} is not a hex CPU mask"))?;
        for bit in 0..4 {
            if value & (1 << bit) != 0 {
                let cpu = position * 4 + bit;
                if cpu > MAX_CPU {
                    return Err(format!("{text:?} names a CPU above {MAX_CPU}"));
                }
                cpus.push(cpu);
            }
        }
    }
    cpus.sort_unstable();
    Ok(cpus)
}

/// Formats CPUs as a kernel hex mask: 32-bit groups, highest first, separated by commas; `0`
/// for none.
pub fn format_hex_mask(cpus: &[usize]) -> String {
    let Some(&highest) = cpus.iter().max() else {
        return "0".into();
    };
    let mut groups = vec![0u32; highest / 32 + 1];
    for &cpu in cpus {
        groups[cpu / 32] |= 1 << (cpu % 32);
    }
    let mut out = String::new();
    for (i, group) in groups.iter().rev().enumerate() {
        if i == 0 {
            out.push_str(&format!("{group:x}"));
        } else {
            out.push_str(&format!(",{group:08x}"));
        }
    }
    out
}

/// The fields of `/proc/PID/task/TID/stat` shielding needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadStat {
    pub comm: String,
    /// The parent of the thread's process.
    pub ppid: u32,
    pub flags: u64,
    /// Clock ticks after boot at which it started: with the tid, names one thread for good.
    pub starttime: u64,
    /// Its real-time priority (0 outside the real-time classes).
    pub rt_priority: u32,
    /// Its scheduling policy (`SCHED_OTHER` 0, `SCHED_FIFO` 1, ...).
    pub policy: u32,
}

/// Parses a stat line. The name (field 2) may hold spaces and parentheses, so the fields are
/// counted from its last `)`.
pub fn parse_stat(text: &str) -> Result<ThreadStat, String> {
    let open = text.find('(').ok_or("no '(' before the name")?;
    let close = text.rfind(')').ok_or("no ')' after the name")?;
    if close < open {
        return Err("')' before '('".into());
    }
    let comm = text[open + 1..close].to_owned();
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |number: usize| -> Result<u64, String> {
        fields
            .get(number - 3)
            .ok_or_else(|| format!("field {number} is missing"))?
            .parse()
            .map_err(|_| format!("field {number} is not a number"))
    };
    Ok(ThreadStat {
        comm,
        ppid: u32::try_from(field(4)?).map_err(|_| "field 4 is out of range")?,
        flags: field(9)?,
        starttime: field(22)?,
        rt_priority: u32::try_from(field(40)?).map_err(|_| "field 40 is out of range")?,
        policy: u32::try_from(field(41)?).map_err(|_| "field 41 is out of range")?,
    })
}

/// `SCHED_OTHER`, `SCHED_FIFO`, `SCHED_BATCH` and `SCHED_IDLE`, as `/proc/TID/stat` numbers them.
pub const SCHED_OTHER: u32 = 0;
pub const SCHED_FIFO: u32 = 1;
pub const SCHED_BATCH: u32 = 3;
pub const SCHED_IDLE: u32 = 5;

/// Whether shielding raises a thread that stays on the kept CPUs into the real-time class:
/// a kernel thread (a per-CPU worker: `kworker/N:*`, `ksoftirqd/N`, `cpuhp/N`) in one of the
/// fair classes. Left below the loop, such a worker waits until the kernel's fair server runs
/// it, up to most of a second, and whatever waits for its work (a softirq's packets, a
/// `lru_add_drain_all` on every CPU, a vmstat flush) waits as long. Above the loop it runs the
/// moment it has work and the loop loses only that work's own time. User threads never: they
/// are moved off instead.
pub fn raises_class(stat: &ThreadStat) -> bool {
    stat.flags & PF_KTHREAD != 0 && matches!(stat.policy, SCHED_OTHER | SCHED_BATCH | SCHED_IDLE)
}

/// Whether undo puts a raised thread back in its journaled class: it is still in the class
/// shielding gave it (`priority` under `SCHED_FIFO`); one someone changed since is left alone.
pub fn restore_class(now: &ThreadStat, priority: u32) -> bool {
    now.policy == SCHED_FIFO && now.rt_priority == priority
}

/// One change, as the journal records it before it is made: what to put back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The process that applied the shield.
    Holder { pid: u32 },
    /// The kept CPUs.
    Keep { cpus: Vec<usize> },
    /// Processes whose threads were not moved.
    Exempt { pids: Vec<u32> },
    /// Clock ticks after boot when shielding began: threads started since were born into it.
    Began { ticks: u64 },
    /// `/proc/sys/kernel/sched_rt_runtime_us` was this.
    RtRuntime { us: i64 },
    /// debugfs was mounted here by the shield.
    DebugfsMounted { path: String },
    /// CPU `cpu`'s fair server had this runtime and period.
    FairServer {
        cpu: usize,
        runtime_ns: u64,
        period_ns: u64,
    },
    /// The unbound workqueues' CPUs.
    WorkqueueMask { cpus: Vec<usize> },
    /// `/proc/irq/default_smp_affinity`.
    IrqDefault { cpus: Vec<usize> },
    /// `/proc/irq/IRQ/smp_affinity_list`.
    Irq { irq: u32, cpus: Vec<usize> },
    /// A thread's affinity.
    Thread {
        tgid: u32,
        tid: u32,
        starttime: u64,
        cpus: Vec<usize>,
    },
    /// A thread's scheduling class, before shielding raised it to `SCHED_FIFO` at `raised_to`.
    Class {
        tgid: u32,
        tid: u32,
        starttime: u64,
        policy: u32,
        rt_priority: u32,
        raised_to: u32,
    },
}

/// First line of every journal.
pub const JOURNAL_HEADER: &str = "corral-shield-journal 1";

fn list(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        "-".into()
    } else {
        format_cpu_list(cpus)
    }
}

fn parse_list(text: &str) -> Result<Vec<usize>, String> {
    if text == "-" {
        Ok(Vec::new())
    } else {
        parse_cpu_list(text)
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Holder { pid } => write!(f, "holder {pid}"),
            Entry::Keep { cpus } => write!(f, "keep {}", list(cpus)),
            Entry::Exempt { pids } => {
                write!(f, "exempt")?;
                for pid in pids {
                    write!(f, " {pid}")?;
                }
                Ok(())
            }
            Entry::Began { ticks } => write!(f, "began {ticks}"),
            Entry::RtRuntime { us } => write!(f, "rt_runtime_us {us}"),
            Entry::DebugfsMounted { path } => write!(f, "debugfs_mounted {path}"),
            Entry::FairServer {
                cpu,
                runtime_ns,
                period_ns,
            } => write!(f, "fair_server {cpu} {runtime_ns} {period_ns}"),
            Entry::WorkqueueMask { cpus } => write!(f, "workqueue {}", list(cpus)),
            Entry::IrqDefault { cpus } => write!(f, "irq_default {}", list(cpus)),
            Entry::Irq { irq, cpus } => write!(f, "irq {irq} {}", list(cpus)),
            Entry::Thread {
                tgid,
                tid,
                starttime,
                cpus,
            } => write!(f, "thread {tgid} {tid} {starttime} {}", list(cpus)),
            Entry::Class {
                tgid,
                tid,
                starttime,
                policy,
                rt_priority,
                raised_to,
            } => write!(
                f,
                "class {tgid} {tid} {starttime} {policy} {rt_priority} {raised_to}"
            ),
        }
    }
}

impl Entry {
    /// Parses one journal line (without its newline).
    pub fn parse(line: &str) -> Result<Entry, String> {
        let words: Vec<&str> = line.split(' ').collect();
        let number = |i: usize| -> Result<u64, String> {
            words
                .get(i)
                .ok_or_else(|| format!("word {} is missing", i + 1))?
                .parse()
                .map_err(|_| format!("word {} is not a number", i + 1))
        };
        let cpus = |i: usize| -> Result<Vec<usize>, String> {
            parse_list(
                words
                    .get(i)
                    .ok_or_else(|| format!("word {} is missing", i + 1))?,
            )
        };
        let small = |i: usize| -> Result<u32, String> {
            u32::try_from(number(i)?).map_err(|_| format!("word {} is out of range", i + 1))
        };
        let (entry, length) = match words[0] {
            "holder" => (Entry::Holder { pid: small(1)? }, 2),
            "keep" => (Entry::Keep { cpus: cpus(1)? }, 2),
            "exempt" => (
                Entry::Exempt {
                    pids: (1..words.len()).map(small).collect::<Result<_, _>>()?,
                },
                words.len(),
            ),
            "began" => (Entry::Began { ticks: number(1)? }, 2),
            "rt_runtime_us" => {
                let us = words
                    .get(1)
                    .and_then(|w| w.parse().ok())
                    .ok_or("word 2 is not a number")?;
                (Entry::RtRuntime { us }, 2)
            }
            "debugfs_mounted" => {
                let path = words.get(1).ok_or("word 2 is missing")?;
                if path.is_empty() {
                    return Err("empty path".into());
                }
                let path = (*path).to_owned();
                (Entry::DebugfsMounted { path }, 2)
            }
            "fair_server" => (
                Entry::FairServer {
                    cpu: number(1)? as usize,
                    runtime_ns: number(2)?,
                    period_ns: number(3)?,
                },
                4,
            ),
            "workqueue" => (Entry::WorkqueueMask { cpus: cpus(1)? }, 2),
            "irq_default" => (Entry::IrqDefault { cpus: cpus(1)? }, 2),
            "irq" => (
                Entry::Irq {
                    irq: small(1)?,
                    cpus: cpus(2)?,
                },
                3,
            ),
            "thread" => (
                Entry::Thread {
                    tgid: small(1)?,
                    tid: small(2)?,
                    starttime: number(3)?,
                    cpus: cpus(4)?,
                },
                5,
            ),
            "class" => (
                Entry::Class {
                    tgid: small(1)?,
                    tid: small(2)?,
                    starttime: number(3)?,
                    policy: small(4)?,
                    rt_priority: small(5)?,
                    raised_to: small(6)?,
                },
                7,
            ),
            other => return Err(format!("unknown record {other:?}")),
        };
        if words.len() != length {
            return Err(format!(
                "{} words where {length} were expected",
                words.len()
            ));
        }
        Ok(entry)
    }
}

/// Parses a journal. A last line without its newline is a record the writer did not finish
/// (it died mid-write, before making that change) and is ignored.
pub fn parse_journal(text: &str) -> Result<Vec<Entry>, String> {
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if first.trim_end_matches('\n') == JOURNAL_HEADER => {}
        Some(first) if !first.ends_with('\n') && JOURNAL_HEADER.starts_with(first) => {
            return Ok(Vec::new());
        }
        None => return Ok(Vec::new()),
        Some(first) => {
            return Err(format!(
                "line 1 is {:?}, not {JOURNAL_HEADER:?}",
                first.trim_end()
            ));
        }
    }
    let mut entries = Vec::new();
    for (number, line) in lines.enumerate() {
        let Some(line) = line.strip_suffix('\n') else {
            break;
        };
        entries.push(Entry::parse(line).map_err(|e| format!("line {}: {e}", number + 2))?);
    }
    Ok(entries)
}

/// The journal's text for `entries`, header included.
pub fn format_journal(entries: &[Entry]) -> String {
    let mut out = format!("{JOURNAL_HEADER}\n");
    for entry in entries {
        out.push_str(&format!("{entry}\n"));
    }
    out
}

/// Restoring a journaled thread: its original CPUs, if its mask is still what shielding set.
/// Anything else was changed by someone since and is theirs.
pub fn restore_journaled(current: &[usize], original: &[usize], keep: &[usize]) -> bool {
    !same_set(current, original) && same_set(current, &without(original, keep))
}

/// A thread found at undo time that the journal does not name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unjournaled {
    pub tgid: u32,
    pub starttime: u64,
    pub cpus: Vec<usize>,
}

/// What undo knows to decide on threads born during the shield.
#[derive(Debug, Default)]
pub struct Lineage {
    /// Journaled original masks, by process.
    pub originals: HashMap<u32, Vec<Vec<usize>>>,
    /// Each process's parent.
    pub parents: HashMap<u32, u32>,
    pub exempt: HashSet<u32>,
    pub began: u64,
    pub online: Vec<usize>,
    pub keep: Vec<usize>,
}

/// How many ancestors undo looks through for one whose threads were journaled.
const ANCESTRY_DEPTH: usize = 64;

impl Lineage {
    /// What a thread born during the shield gets back, if anything: a new thread inherits its
    /// creator's mask, so one whose mask is a journaled original of its own process (or of its
    /// nearest ancestor process that has one) minus the kept CPUs gets that original; one whose
    /// mask is the online CPUs minus the kept ones gets every online CPU. A thread that pinned
    /// itself to exactly such a mask cannot be told apart, and is widened too.
    pub fn restore_newborn(&self, thread: &Unjournaled) -> Option<Vec<usize>> {
        if thread.starttime < self.began || self.exempt.contains(&thread.tgid) {
            return None;
        }
        let mut process = thread.tgid;
        for _ in 0..ANCESTRY_DEPTH {
            if self.exempt.contains(&process) {
                return None;
            }
            if let Some(originals) = self.originals.get(&process) {
                if let Some(original) = originals
                    .iter()
                    .find(|original| restore_journaled(&thread.cpus, original, &self.keep))
                {
                    return Some(original.clone());
                }
                break;
            }
            match self.parents.get(&process) {
                Some(&parent) if parent != 0 && parent != process => process = parent,
                _ => break,
            }
        }
        restore_journaled(&thread.cpus, &self.online, &self.keep).then(|| self.online.clone())
    }
}

/// The order of the writes that set a fair server to `runtime`/`period` from `old`: the
/// kernel refuses a runtime above the period, so a shrinking server gets its runtime first and
/// a growing one its period first.
pub fn fair_server_writes(
    old_period_ns: u64,
    runtime_ns: u64,
    period_ns: u64,
) -> [(&'static str, u64); 2] {
    if period_ns < old_period_ns {
        [("runtime", runtime_ns), ("period", period_ns)]
    } else {
        [("period", period_ns), ("runtime", runtime_ns)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_to_the_kept_cpus_goes_to_every_other_online_one_and_comes_back() {
        let online = [0, 1, 2, 3];
        assert_eq!(thread_target(&[0], &[0], &online), Some(vec![1, 2, 3]));
        assert_eq!(thread_target(&[0, 2], &[0], &online), Some(vec![2]));
        assert_eq!(thread_target(&[1, 2], &[0], &online), None);
        assert_eq!(thread_target(&[0], &[0], &[0]), None);
        assert!(restore_thread(&[1, 2, 3], &[0], &[0], &online));
        assert!(restore_thread(&[2], &[0, 2], &[0], &online));
        // Changed by someone else since: left as it is.
        assert!(!restore_thread(&[3], &[0], &[0], &online));
        assert!(!restore_thread(&[0], &[0], &[0], &online));
    }
    use proptest::prelude::*;

    #[test]
    fn moves_leave_the_kept_cpus() {
        assert_eq!(plan_move(&[0, 1, 2], &[0]), Move::To(vec![1, 2]));
        assert_eq!(plan_move(&[1, 2], &[0]), Move::Unaffected);
        assert_eq!(plan_move(&[0], &[0]), Move::OnlyOnKept);
        assert_eq!(plan_move(&[0, 3], &[0, 3]), Move::OnlyOnKept);
        assert_eq!(plan_move(&[], &[0]), Move::Unaffected);
    }

    #[test]
    fn hex_masks_read_like_the_kernel_writes_them() {
        assert_eq!(parse_hex_mask("3\n").unwrap(), vec![0, 1]);
        assert_eq!(parse_hex_mask("00000000,00000002").unwrap(), vec![1]);
        assert_eq!(
            parse_hex_mask("1,00000001").unwrap(),
            vec![0, 32],
            "groups are 32 bits, highest first"
        );
        assert_eq!(parse_hex_mask("0").unwrap(), Vec::<usize>::new());
        assert!(parse_hex_mask("").is_err());
        assert!(parse_hex_mask("xyz").unwrap_err().contains("\"xyz\""));
        assert_eq!(format_hex_mask(&[0, 1]), "3");
        assert_eq!(format_hex_mask(&[1, 32]), "1,00000002");
        assert_eq!(format_hex_mask(&[]), "0");
    }

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "1234 (a (b) c) S 77 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 \
                    987654 1000 10 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 \
                    0 49 1 0 0 0 0 0 0 0 0 0 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            stat,
            ThreadStat {
                comm: "a (b) c".into(),
                ppid: 77,
                flags: 4194560,
                starttime: 987654,
                rt_priority: 49,
                policy: SCHED_FIFO,
            }
        );
        assert!(parse_stat("12 (x) S 1").unwrap_err().contains("field 9"));
        assert!(parse_stat("12 x S").is_err());
        let short = "1234 (a) S 77 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 987654";
        assert!(parse_stat(short).unwrap_err().contains("field 40"));
    }

    /// `/proc/14/stat` of `ksoftirqd/0` on this machine class, with its flags, policy and
    /// real-time priority replaced.
    fn kernel_stat(flags: u64, policy: u32, rt_priority: u32) -> ThreadStat {
        let line = format!(
            "14 (ksoftirqd/0) S 2 0 0 0 -1 {flags} 0 0 0 0 40 116 0 0 20 0 1 0 21 0 0 \
             18446744073709551615 0 0 0 0 0 0 0 2147483647 0 1 0 0 17 0 {rt_priority} {policy} \
             0 0 0 0 0 0 0 0 0 0 0"
        );
        parse_stat(&line).unwrap()
    }

    #[test]
    fn only_kernel_threads_in_a_fair_class_are_raised() {
        // 69238848 is ksoftirqd's flags here: PF_KTHREAD among them.
        assert_ne!(69238848 & PF_KTHREAD, 0);
        assert!(raises_class(&kernel_stat(69238848, SCHED_OTHER, 0)));
        assert!(raises_class(&kernel_stat(69238848, SCHED_BATCH, 0)));
        assert!(raises_class(&kernel_stat(69238848, SCHED_IDLE, 0)));
        // Already real-time (migration/N at 99, threaded IRQs at 50), or a user thread.
        assert!(!raises_class(&kernel_stat(69238848, SCHED_FIFO, 99)));
        assert!(!raises_class(&kernel_stat(69238848, 2, 50)));
        assert!(!raises_class(&kernel_stat(
            69238848 & !PF_KTHREAD,
            SCHED_OTHER,
            0
        )));
        // Undo puts back only what is still as the shield left it.
        assert!(restore_class(&kernel_stat(69238848, SCHED_FIFO, 50), 50));
        assert!(!restore_class(&kernel_stat(69238848, SCHED_FIFO, 60), 50));
        assert!(!restore_class(&kernel_stat(69238848, SCHED_OTHER, 0), 50));
    }

    #[test]
    fn a_journal_reads_back_and_ignores_an_unfinished_last_line() {
        let entries = vec![
            Entry::Holder { pid: 42 },
            Entry::Keep { cpus: vec![0] },
            Entry::Exempt { pids: vec![42, 7] },
            Entry::Began { ticks: 1000 },
            Entry::RtRuntime { us: 950000 },
            Entry::DebugfsMounted {
                path: "/sys/kernel/debug".into(),
            },
            Entry::FairServer {
                cpu: 0,
                runtime_ns: 50_000_000,
                period_ns: 1_000_000_000,
            },
            Entry::WorkqueueMask { cpus: vec![0, 1] },
            Entry::IrqDefault { cpus: vec![0, 1] },
            Entry::Irq {
                irq: 36,
                cpus: vec![0, 1],
            },
            Entry::Thread {
                tgid: 1,
                tid: 1,
                starttime: 3,
                cpus: vec![0, 1],
            },
            Entry::Class {
                tgid: 2,
                tid: 14,
                starttime: 21,
                policy: SCHED_OTHER,
                rt_priority: 0,
                raised_to: 50,
            },
        ];
        let text = format_journal(&entries);
        assert_eq!(parse_journal(&text).unwrap(), entries);
        assert_eq!(
            parse_journal(&format!("{text}thread 5 6 7 0-")).unwrap(),
            entries
        );
        assert_eq!(parse_journal("").unwrap(), vec![]);
        assert_eq!(parse_journal("corral-shield").unwrap(), vec![]);
        let err = parse_journal(&format!("{text}thread 5 6\n")).unwrap_err();
        assert!(err.starts_with("line 14: "), "{err}");
        let err = parse_journal("something else\n").unwrap_err();
        assert!(err.contains("line 1"), "{err}");
        assert!(parse_journal(&format!("{JOURNAL_HEADER}\nfrobnicate 1\n")).is_err());
        assert!(parse_journal(&format!("{JOURNAL_HEADER}\nkeep 0 1\n")).is_err());
    }

    #[test]
    fn only_threads_still_as_the_shield_left_them_are_restored() {
        assert!(restore_journaled(&[1, 2], &[0, 1, 2], &[0]));
        // Someone pinned it elsewhere since: theirs.
        assert!(!restore_journaled(&[2], &[0, 1, 2], &[0]));
        // Already back.
        assert!(!restore_journaled(&[0, 1, 2], &[0, 1, 2], &[0]));
    }

    fn lineage() -> Lineage {
        Lineage {
            originals: HashMap::from([(1, vec![vec![0, 1, 2, 3]]), (50, vec![vec![0, 2]])]),
            parents: HashMap::from([(50, 1), (60, 50), (70, 60), (80, 1), (90, 1)]),
            exempt: HashSet::from([90]),
            began: 100,
            online: vec![0, 1, 2, 3],
            keep: vec![0],
        }
    }

    #[test]
    fn threads_born_into_the_shield_get_their_ancestors_mask_back() {
        let l = lineage();
        let born = |tgid, cpus: &[usize]| Unjournaled {
            tgid,
            starttime: 200,
            cpus: cpus.to_vec(),
        };
        // A new thread of a journaled process, and a grandchild process of it.
        assert_eq!(l.restore_newborn(&born(50, &[2])), Some(vec![0, 2]));
        assert_eq!(l.restore_newborn(&born(70, &[2])), Some(vec![0, 2]));
        // Online minus kept.
        assert_eq!(
            l.restore_newborn(&born(80, &[1, 2, 3])),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(
            l.restore_newborn(&born(12345, &[1, 2, 3])),
            Some(vec![0, 1, 2, 3])
        );
        // Pinned elsewhere, exempt, or older than the shield: left alone.
        assert_eq!(l.restore_newborn(&born(80, &[3])), None);
        assert_eq!(l.restore_newborn(&born(90, &[1, 2, 3])), None);
        let old = Unjournaled {
            starttime: 99,
            ..born(80, &[1, 2, 3])
        };
        assert_eq!(l.restore_newborn(&old), None);
    }

    #[test]
    fn fair_server_writes_keep_runtime_at_most_period() {
        assert_eq!(
            fair_server_writes(1_000_000_000, 50_000, 10_000_000),
            [("runtime", 50_000), ("period", 10_000_000)]
        );
        assert_eq!(
            fair_server_writes(10_000_000, 50_000_000, 1_000_000_000),
            [("period", 1_000_000_000), ("runtime", 50_000_000)]
        );
    }

    fn cpu_set() -> impl Strategy<Value = Vec<usize>> {
        proptest::collection::btree_set(0usize..300, 0..20).prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #[test]
        fn hex_masks_round_trip(cpus in cpu_set()) {
            prop_assert_eq!(parse_hex_mask(&format_hex_mask(&cpus)).unwrap(), cpus);
        }

        #[test]
        fn hex_mask_parsing_never_panics(text in "[0-9a-fA-F,x ]{0,40}") {
            let _ = parse_hex_mask(&text);
        }

        #[test]
        fn stat_names_never_confuse_the_fields(
            comm in "[ -~]{0,16}",
            ppid in 0u32..1_000_000,
            flags in any::<u32>(),
            starttime in any::<u64>(),
        ) {
            let line = format!(
                "99 ({comm}) R {ppid} 1 1 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 {starttime} 0 0 \
                 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"
            );
            let stat = parse_stat(&line).unwrap();
            prop_assert_eq!(stat.comm, comm);
            prop_assert_eq!(stat.ppid, ppid);
            prop_assert_eq!(stat.flags, u64::from(flags));
            prop_assert_eq!(stat.starttime, starttime);
        }

        #[test]
        fn journal_lines_round_trip(
            tgid in any::<u32>(),
            tid in any::<u32>(),
            starttime in any::<u64>(),
            cpus in cpu_set(),
            us in any::<i64>(),
            policy in any::<u32>(),
            rt_priority in any::<u32>(),
        ) {
            let entries = vec![
                Entry::Thread { tgid, tid, starttime, cpus: cpus.clone() },
                Entry::Class { tgid, tid, starttime, policy, rt_priority, raised_to: rt_priority / 2 },
                Entry::Irq { irq: tid, cpus },
                Entry::RtRuntime { us },
            ];
            prop_assert_eq!(parse_journal(&format_journal(&entries)).unwrap(), entries);
        }

        #[test]
        fn journal_parsing_never_panics(text in "[a-z_0-9 ,\\-\n]{0,200}") {
            let _ = parse_journal(&format!("{JOURNAL_HEADER}\n{text}"));
        }

        #[test]
        fn a_move_never_leaves_a_kept_cpu_nor_adds_one(mask in cpu_set(), keep in cpu_set()) {
            match plan_move(&mask, &keep) {
                Move::To(left) => {
                    prop_assert!(!left.is_empty());
                    prop_assert!(left.iter().all(|c| mask.contains(c) && !keep.contains(c)));
                    prop_assert!(restore_journaled(&left, &mask, &keep));
                }
                Move::OnlyOnKept => prop_assert!(mask.iter().all(|c| keep.contains(c))),
                Move::Unaffected => prop_assert!(mask.iter().all(|c| !keep.contains(c))),
            }
        }
    }
}
