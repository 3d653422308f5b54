//! Who else is using the machine: another iokerneld, or any CPU time spent by processes the
//! runner did not start. Both make a point's numbers suspect on a 2-CPU machine where the
//! experiment owns both CPUs, so each point records them and the table flags them.

use std::time::Instant;

/// iokerneld processes on this machine that the runner did not start: they would compete for
/// the same CPUs.
pub fn other_iokernelds() -> Vec<(u32, String)> {
    let me = std::process::id();
    processes()
        .into_iter()
        .filter(|p| p.comm == "iokerneld" && p.pid != me && p.ppid != me)
        .map(|p| {
            let cmd = std::fs::read(format!("/proc/{}/cmdline", p.pid))
                .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                .unwrap_or_default();
            (p.pid, cmd.trim().to_owned())
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq)]
struct ProcStat {
    pid: u32,
    comm: String,
    ppid: u32,
    /// utime + stime, clock ticks.
    ticks: u64,
    /// cutime + cstime: reaped children's, clock ticks.
    child_ticks: u64,
}

/// Parses `/proc/PID/stat`. The command name is in parentheses and may itself hold spaces
/// and parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text[open + 1..close].to_owned();
    // After ")": state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { rest.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        pid,
        comm,
        ppid: field(4)? as u32,
        ticks: field(14)? + field(15)?,
        child_ticks: field(16)? + field(17)?,
    })
}

fn processes() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        e.file_name().to_str()?.parse::<u32>().ok()?;
        parse_stat(&std::fs::read_to_string(e.path().join("stat")).ok()?)
    })
    .collect()
}

/// Busy clock ticks of all CPUs (user, nice, system) from `/proc/stat`'s first line.
fn parse_total_busy(text: &str) -> Option<u64> {
    let line = text.lines().next()?;
    let mut f = line.split_whitespace();
    if f.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = f.take(3).filter_map(|x| x.parse().ok()).collect();
    (v.len() == 3).then(|| v.iter().sum())
}

/// CPU time of the whole machine, of the runner's own processes and of kernel threads at one
/// moment.
#[derive(Clone, Copy, Debug)]
pub struct CpuSnapshot {
    at: Instant,
    total: u64,
    /// The runner's own (itself, its reaped children and its live children, which is every
    /// process it starts) and the kernel threads'.
    ours: u64,
}

/// Kernel threads are pid 2 (kthreadd) and its children.
const KTHREADD: u32 = 2;

/// Takes a snapshot. Kernel threads count with the runner's own processes: the Linux baseline
/// has them (ksoftirqd, kworkers) process its loopback traffic, which is the system under test
/// at work, not somebody else's.
pub fn snapshot() -> Option<CpuSnapshot> {
    let total = parse_total_busy(&std::fs::read_to_string("/proc/stat").ok()?)?;
    let me = std::process::id();
    let ours = processes()
        .iter()
        .map(|p| {
            if p.pid == me {
                p.ticks + p.child_ticks
            } else if p.ppid == me || p.pid == KTHREADD || p.ppid == KTHREADD {
                p.ticks
            } else {
                0
            }
        })
        .sum();
    Some(CpuSnapshot {
        at: Instant::now(),
        total,
        ours,
    })
}

/// CPUs' worth of time (0.25 = a quarter of one CPU) spent by other processes between two
/// snapshots. Time the kernel spends in interrupts, and in its own threads, is left out, so
/// loopback networking is not blamed on others.
pub fn foreign_cpus(a: &CpuSnapshot, b: &CpuSnapshot) -> Option<f64> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let secs = b.at.duration_since(a.at).as_secs_f64();
    if hz <= 0 || secs <= 0.0 {
        return None;
    }
    let total = b.total.saturating_sub(a.total) as f64;
    let ours = b.ours.saturating_sub(a.ours) as f64;
    Some(((total - ours) / hz as f64 / secs).max(0.0))
}

/// The steal column (clock ticks) of CPU `cpu`'s line in `/proc/stat`: time the host ran
/// something else while this CPU wanted to run. `None` when the line or column is missing.
fn parse_cpu_steal(text: &str, cpu: usize) -> Option<u64> {
    let name = format!("cpu{cpu}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    // cpuN user nice system idle iowait irq softirq steal ...
    line.split_whitespace().nth(8)?.parse().ok()
}

/// Steal time of each of `cpus` so far, in milliseconds (the kernel counts it in clock
/// ticks, 10 ms each at the usual 100 Hz).
pub fn steal_ms(cpus: &[usize]) -> Option<Vec<f64>> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    cpus.iter()
        .map(|&c| parse_cpu_steal(&text, c).map(|t| t as f64 * 1e3 / hz as f64))
        .collect()
}

/// A thread's scheduling policy and real-time priority from its `/proc/.../stat` line:
/// the 41st and 40th fields, counted from the last `)` as in [`parse_stat`].
fn parse_policy(text: &str) -> Option<(u32, u32)> {
    let close = text.rfind(')')?;
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let field = |n: usize| -> Option<u32> { rest.get(n - 3)?.parse().ok() };
    Some((field(41)?, field(40)?))
}

fn policy_name(policy: u32, priority: u32) -> String {
    match policy {
        0 => "SCHED_OTHER".into(),
        1 => format!("SCHED_FIFO {priority}"),
        2 => format!("SCHED_RR {priority}"),
        3 => "SCHED_BATCH".into(),
        5 => "SCHED_IDLE".into(),
        6 => "SCHED_DEADLINE".into(),
        other => format!("policy {other}"),
    }
}

/// The classes and allowed CPUs of a process's threads as they are now, grouped: `SCHED_FIFO
/// 49 on CPU 0` for one thread, `2 threads SCHED_OTHER on CPU 1` for more. `None` once it has
/// exited.
pub fn thread_classes(pid: u32) -> Option<String> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut groups: Vec<(String, usize)> = Vec::new();
    for task in dir.flatten() {
        let path = task.path();
        let Some((policy, priority)) = std::fs::read_to_string(path.join("stat"))
            .ok()
            .as_deref()
            .and_then(parse_policy)
        else {
            continue;
        };
        let cpus = std::fs::read_to_string(path.join("status"))
            .ok()
            .and_then(|st| {
                st.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .map(|v| v.trim().to_owned())
            })
            .unwrap_or_else(|| "?".into());
        let class = format!(
            "{} on CPU{} {cpus}",
            policy_name(policy, priority),
            if cpus.contains([',', '-']) { "s" } else { "" }
        );
        match groups.iter_mut().find(|(c, _)| *c == class) {
            Some((_, n)) => *n += 1,
            None => groups.push((class, 1)),
        }
    }
    if groups.is_empty() {
        return None;
    }
    Some(
        groups
            .iter()
            .map(|(class, n)| match n {
                1 => class.clone(),
                n => format!("{n} threads {class}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threads_class_is_read_from_its_stat_line() {
        // A thread at SCHED_FIFO 49 (fields 40 and 41).
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[40 - 3] = "49".into();
        fields[41 - 3] = "1".into();
        let line = format!("77 (iokerneld (x)) {}", fields.join(" "));
        assert_eq!(parse_policy(&line), Some((1, 49)));
        assert_eq!(policy_name(1, 49), "SCHED_FIFO 49");
        assert_eq!(policy_name(5, 0), "SCHED_IDLE");
        assert_eq!(parse_policy("77 (short) S 1 2"), None);
        // This process: its threads are in the fair class here, unless the test runner is not.
        let mine = thread_classes(std::process::id()).unwrap();
        assert!(mine.contains(" on CPU"), "{mine}");
        assert_eq!(thread_classes(u32::MAX), None);
    }

    #[test]
    fn steal_is_the_eighth_value_of_the_cpus_line() {
        let text = "cpu  100 2 30 5000 7 8 9 10 0 0\ncpu0 50 1 15 2500 3 4 4 5 0 0\n\
                    cpu1 50 1 15 2500 4 4 5 17 0 0\ncpu10 1 1 1 1 1 1 1 99 0 0\nintr 5\n";
        assert_eq!(parse_cpu_steal(text, 0), Some(5));
        assert_eq!(parse_cpu_steal(text, 1), Some(17));
        assert_eq!(parse_cpu_steal(text, 10), Some(99));
        assert_eq!(parse_cpu_steal(text, 2), None);
        assert_eq!(parse_cpu_steal("cpu0 1 2 3\n", 0), None);
        // This machine's own file has a steal column for CPU 0.
        assert!(steal_ms(&[0]).is_some_and(|v| v.len() == 1 && v[0] >= 0.0));
    }

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let line = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 \
                    1 0 100 1000 10";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.pid, 1234);
        assert_eq!(s.comm, "a (weird) name");
        assert_eq!(s.ppid, 1);
        assert_eq!(s.ticks, 300);
        assert_eq!(s.child_ticks, 10);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn machine_busy_time_is_user_nice_system() {
        let text = "cpu  100 2 30 5000 7 8 9 10 0 0\ncpu0 50 1 15 2500 3 4 4 5 0 0\n";
        assert_eq!(parse_total_busy(text), Some(132));
        assert_eq!(parse_total_busy("intr 5\n"), None);
    }

    #[test]
    fn our_own_work_is_not_foreign() {
        /// This thread's CPU time.
        fn thread_cpu() -> std::time::Duration {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec to a valid pointer.
            let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            assert_eq!(rc, 0);
            std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
        }
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let a = snapshot().unwrap();
        // Burn 200 ms of CPU in this process: CPU time, however long a busy machine takes to
        // give it.
        let start = thread_cpu();
        let wall = Instant::now();
        let mut x = 0u64;
        while thread_cpu() - start < std::time::Duration::from_millis(200) {
            assert!(wall.elapsed().as_secs() < 60, "no 200 ms of CPU in 60 s");
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        }
        let burnt = (thread_cpu() - start).as_secs_f64() * hz;
        let b = snapshot().unwrap();
        let foreign = foreign_cpus(&a, &b).unwrap();
        // Whatever the other processes did meanwhile, the machine's busy time less our burn is
        // all that can be theirs (with a clock tick of rounding at each end).
        let secs = b.at.duration_since(a.at).as_secs_f64();
        let others_at_most = ((b.total - a.total) as f64 - burnt + 2.0).max(0.0);
        assert!(
            foreign * secs * hz <= others_at_most,
            "foreign {foreign} CPUs over {secs} s ({} ticks), our burn {burnt} ticks, busy {} ticks",
            foreign * secs * hz,
            b.total - a.total
        );
    }
}
