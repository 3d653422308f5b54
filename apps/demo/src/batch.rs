//! The batch job's throughput over a window of the runner's time, from its stream of
//! cumulative-unit reports.
//!
//! `batch --json` prints, every `report-ms`, the units done since it started and its own
//! elapsed time. Reports reach the runner a little late and by a variable amount (the batch
//! job's reporter thread has to be scheduled, and the pipe read), so the runner does not use
//! arrival times as sample times. It maps the batch job's clock onto its own with the smallest
//! observed `arrival - elapsed` (the least delayed report), then interpolates the cumulative
//! count at both ends of a window. A window's throughput is then exact up to one report's
//! worth of interpolation error at each end, whatever the delivery jitter.

use std::io::{BufRead, BufReader, Read};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::procs;

/// One report, stamped with the runner's time of arrival.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Runner time (seconds since the runner's epoch) at which the line was read.
    pub recv_s: f64,
    /// The batch job's own time of the report.
    pub elapsed_s: f64,
    /// Units completed since the batch job started (cumulative).
    pub units: u64,
}

/// `runner time - batch time`, from the least delayed report.
pub fn clock_offset(samples: &[Sample]) -> Option<f64> {
    samples
        .iter()
        .map(|s| s.recv_s - s.elapsed_s)
        .min_by(f64::total_cmp)
}

/// Cumulative units at batch time `t`, interpolated linearly between the reports around it;
/// `None` outside the reported span.
pub fn units_at(samples: &[Sample], t: f64) -> Option<f64> {
    let i = samples.partition_point(|s| s.elapsed_s < t);
    let after = samples.get(i)?;
    if after.elapsed_s == t {
        return Some(after.units as f64);
    }
    let before = samples.get(i.checked_sub(1)?)?;
    let span = after.elapsed_s - before.elapsed_s;
    if span <= 0.0 {
        return Some(before.units as f64);
    }
    let frac = (t - before.elapsed_s) / span;
    Some(before.units as f64 + frac * (after.units as f64 - before.units as f64))
}

/// Mean units per second over the runner-time window `[t0, t1]`; `None` if the reports do not
/// cover it (or it is empty).
pub fn rate_in_window(samples: &[Sample], t0: f64, t1: f64) -> Option<f64> {
    if t1 <= t0 {
        return None;
    }
    let offset = clock_offset(samples)?;
    let u0 = units_at(samples, t0 - offset)?;
    let u1 = units_at(samples, t1 - offset)?;
    Some((u1 - u0) / (t1 - t0))
}

/// The runner's clock: seconds since it started.
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    pub fn now_s(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Report {
        elapsed_s: f64,
        units: u64,
    },
    Total {
        #[serde(flatten)]
        fields: serde_json::Map<String, serde_json::Value>,
    },
}

/// How a wait on the feed ended.
enum Waited {
    Done,
    Closed,
    TimedOut,
}

#[derive(Default)]
struct Feed {
    samples: Vec<Sample>,
    total: Option<serde_json::Value>,
    /// Lines that were not reports, for error messages.
    unparsed: Vec<String>,
    closed: bool,
}

/// Reads a batch job's JSON lines on a thread of its own, so that the runner can sleep while
/// reports accumulate.
pub struct BatchReader {
    feed: Arc<Mutex<Feed>>,
    thread: Option<JoinHandle<()>>,
    clock: Clock,
}

impl BatchReader {
    pub fn start(stdout: impl Read + Send + 'static, clock: Clock) -> BatchReader {
        let feed = Arc::new(Mutex::new(Feed::default()));
        let shared = Arc::clone(&feed);
        let thread = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let recv_s = clock.now_s();
                let mut feed = shared.lock().unwrap_or_else(|e| e.into_inner());
                match serde_json::from_str::<Line>(&line) {
                    Ok(Line::Report { elapsed_s, units }) => feed.samples.push(Sample {
                        recv_s,
                        elapsed_s,
                        units,
                    }),
                    Ok(Line::Total { fields }) => {
                        feed.total = Some(serde_json::Value::Object(fields));
                    }
                    Err(_) => {
                        if feed.unparsed.len() < 20 {
                            feed.unparsed.push(line);
                        }
                    }
                }
            }
            shared.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        });
        BatchReader {
            feed,
            thread: Some(thread),
            clock,
        }
    }

    /// Samples the CPU time of process `root` and its descendants every `every`, as the
    /// cumulative count of CPU microseconds at the runner's time of reading: any program, with
    /// no reports of its own. The rate of that count is the CPU share it receives (1e6 per
    /// second is one whole CPU). Ends when `root` is gone.
    pub fn cpu_time(root: u32, every: Duration, clock: Clock) -> BatchReader {
        BatchReader::sample_cpu(move || tree_cpu_us(root), every, clock)
    }

    /// Samples the CPU time of process `pid` alone (all its threads) every `every`, as
    /// [`BatchReader::cpu_time`] does for a tree; one file read a sample, for a server that
    /// starts no processes.
    pub fn process_cpu_time(pid: u32, every: Duration, clock: Clock) -> BatchReader {
        BatchReader::sample_cpu(move || process_cpu_us(pid), every, clock)
    }

    /// Samples `read` (cumulative CPU microseconds) every `every` until it returns `None`.
    fn sample_cpu(
        read: impl Fn() -> Option<u64> + Send + 'static,
        every: Duration,
        clock: Clock,
    ) -> BatchReader {
        let feed = Arc::new(Mutex::new(Feed::default()));
        let shared = Arc::clone(&feed);
        let thread = std::thread::spawn(move || {
            while let Some(cpu_us) = read() {
                let t = clock.now_s();
                shared
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .samples
                    .push(Sample {
                        recv_s: t,
                        elapsed_s: t,
                        units: cpu_us,
                    });
                std::thread::sleep(every);
            }
            shared.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
        });
        BatchReader {
            feed,
            thread: Some(thread),
            clock,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&Feed) -> T) -> T {
        f(&self.feed.lock().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn samples(&self) -> Vec<Sample> {
        self.with(|f| f.samples.clone())
    }

    pub fn sample_count(&self) -> usize {
        self.with(|f| f.samples.len())
    }

    /// Waits until a report covers runner time `t` (so that a window ending at `t` can be
    /// integrated), checking `alive` meanwhile.
    pub fn wait_past(
        &self,
        t: f64,
        timeout: Duration,
        alive: impl FnMut() -> Result<()>,
    ) -> Result<()> {
        let covered = |f: &Feed| match (clock_offset(&f.samples), f.samples.last()) {
            (Some(off), Some(last)) => last.elapsed_s + off >= t,
            _ => false,
        };
        match self.wait_for(covered, timeout, alive)? {
            Waited::Done => Ok(()),
            Waited::Closed => Err(Error::msg(format!(
                "batch closed its output before reporting past {t:.1} s{}",
                self.printed(" (it printed: ", ")")
            ))),
            Waited::TimedOut => Err(Error::msg(format!(
                "batch sent no throughput report for {:.0} s (at runner time {:.1} s){}",
                timeout.as_secs_f64(),
                self.clock.now_s(),
                self.printed("; it printed: ", "")
            ))),
        }
    }

    /// Waits until the reports show work done since the first one (units grew), checking
    /// `alive` meanwhile: the job is running, not still starting. A job under iokerneld gets a
    /// core only once registered, which may take a while; a window measured before that would
    /// count its start-up as lost throughput.
    pub fn wait_working(&self, timeout: Duration, alive: impl FnMut() -> Result<()>) -> Result<()> {
        let working = |f: &Feed| match (f.samples.first(), f.samples.last()) {
            (Some(first), Some(last)) => last.units > first.units,
            _ => false,
        };
        let reports = || self.sample_count();
        match self.wait_for(working, timeout, alive)? {
            Waited::Done => Ok(()),
            Waited::Closed => Err(Error::msg(format!(
                "batch closed its output before doing any work ({} reports){}",
                reports(),
                self.printed("; it printed: ", "")
            ))),
            Waited::TimedOut => Err(Error::msg(format!(
                "batch did no work in its first {:.0} s ({} reports, none showing progress){}",
                timeout.as_secs_f64(),
                reports(),
                self.printed("; it printed: ", "")
            ))),
        }
    }

    /// Polls until `done` holds for the feed, the output closes, or `timeout` passes, checking
    /// for an interrupt and `alive` between polls.
    fn wait_for(
        &self,
        done: impl Fn(&Feed) -> bool,
        timeout: Duration,
        mut alive: impl FnMut() -> Result<()>,
    ) -> Result<Waited> {
        let end = Instant::now() + timeout;
        loop {
            let (done, closed) = self.with(|f| (done(f), f.closed));
            if done {
                return Ok(Waited::Done);
            }
            procs::check_interrupt()?;
            alive()?;
            if closed {
                return Ok(Waited::Closed);
            }
            if Instant::now() >= end {
                return Ok(Waited::TimedOut);
            }
            std::thread::sleep(procs::POLL);
        }
    }

    /// The lines the job printed that were not reports, between `before` and `after`; empty if
    /// there were none.
    fn printed(&self, before: &str, after: &str) -> String {
        let unparsed = self.with(|f| f.unparsed.join(" | "));
        if unparsed.is_empty() {
            unparsed
        } else {
            format!("{before}{unparsed}{after}")
        }
    }

    /// Units per second over `[t0, t1]` of runner time, waiting for the report after `t1`.
    pub fn rate(
        &self,
        t0: f64,
        t1: f64,
        timeout: Duration,
        alive: impl FnMut() -> Result<()>,
    ) -> Result<f64> {
        self.wait_past(t1, timeout, alive)?;
        let samples = self.samples();
        rate_in_window(&samples, t0, t1).ok_or_else(|| {
            Error::msg(format!(
                "batch reports do not cover the window {t0:.2}..{t1:.2} s ({} reports)",
                samples.len()
            ))
        })
    }
}

/// From `/proc/PID/stat`: the parent, and the CPU time in clock ticks of the process (all its
/// threads) and of its children that it has waited for.
fn stat_of(text: &str) -> Option<(u32, u64)> {
    // Fields after the command name, which is in parentheses and may contain anything.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks = fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((ppid, ticks))
}

/// Whether a `/proc/PID/stat` line is a zombie's: it has exited, and its line no longer counts
/// the children it waited for (a shell that ran the job reads as the shell's own few ticks), so
/// the job's time would seem to fall to nothing.
fn is_zombie(text: &str) -> bool {
    text.rfind(')')
        .and_then(|i| text[i + 1..].split_whitespace().next())
        == Some("Z")
}

/// Clock ticks to microseconds.
fn ticks_to_us(ticks: u64) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000 / hz
}

/// CPU microseconds used so far by process `pid` (all its threads, and the children it waited
/// for); `None` once it is gone.
pub fn process_cpu_us(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    if is_zombie(&stat) {
        return None;
    }
    let (_, ticks) = stat_of(&stat)?;
    Some(ticks_to_us(ticks))
}

/// CPU microseconds used so far by `root` and every live descendant, with the children each of
/// them waited for; `None` once `root` is gone.
pub fn tree_cpu_us(root: u32) -> Option<u64> {
    let root_stat = std::fs::read_to_string(format!("/proc/{root}/stat")).ok()?;
    if is_zombie(&root_stat) {
        return None;
    }
    let (_, root_ticks) = stat_of(&root_stat)?;
    let mut parent_of = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == root {
            continue;
        }
        if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|t| stat_of(&t))
        {
            parent_of.insert(pid, stat);
        }
    }
    let in_tree = |mut pid: u32| {
        // Walk up to init; a chain longer than the table is a loop (pids reused mid-scan).
        for _ in 0..=parent_of.len() {
            match parent_of.get(&pid) {
                Some(&(ppid, _)) if ppid == root => return true,
                Some(&(ppid, _)) if ppid > 1 => pid = ppid,
                _ => return false,
            }
        }
        false
    };
    let ticks = root_ticks
        + parent_of
            .iter()
            .filter(|(pid, _)| in_tree(**pid))
            .map(|(_, (_, t))| t)
            .sum::<u64>();
    Some(ticks_to_us(ticks))
}

impl Drop for BatchReader {
    fn drop(&mut self) {
        // The thread ends when the batch process's pipe closes, which stopping the process
        // does; the owner stops it before dropping this.
        if let Some(t) = self.thread.take()
            && t.is_finished()
        {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_that_never_progresses_is_not_working() {
        let text = "{\"type\":\"report\",\"elapsed_s\":0.1,\"units\":5}\n\
                    {\"type\":\"report\",\"elapsed_s\":0.2,\"units\":5}\n";
        let reader = BatchReader::start(std::io::Cursor::new(text), Clock::start());
        let err = reader
            .wait_working(Duration::from_secs(5), || Ok(()))
            .unwrap_err();
        assert!(err.to_string().contains("before doing any work"), "{err}");
        let silent = BatchReader::sample_cpu(|| Some(7), Duration::from_millis(10), Clock::start());
        let err = silent
            .wait_working(Duration::from_millis(200), || Ok(()))
            .unwrap_err();
        assert!(
            err.to_string().contains("did no work in its first"),
            "{err}"
        );
    }

    fn s(recv_s: f64, elapsed_s: f64, units: u64) -> Sample {
        Sample {
            recv_s,
            elapsed_s,
            units,
        }
    }

    /// Steady 1000 units/s, reports every 0.1 s, delivered 2-9 ms late; the batch job started
    /// at runner time 5.0.
    fn steady() -> Vec<Sample> {
        (1..=50)
            .map(|k| {
                let t = k as f64 * 0.1;
                let delay = 0.002 + 0.007 * ((k * 37 % 11) as f64 / 10.0);
                s(5.0 + t + delay, t, (t * 1000.0).round() as u64)
            })
            .collect()
    }

    #[test]
    fn offset_comes_from_the_least_delayed_report() {
        let off = clock_offset(&steady()).unwrap();
        assert!((off - 5.002).abs() < 1e-9, "{off}");
        assert_eq!(clock_offset(&[]), None);
    }

    #[test]
    fn units_are_interpolated_between_reports() {
        let v = vec![s(0.0, 1.0, 100), s(0.0, 2.0, 300)];
        assert_eq!(units_at(&v, 1.0), Some(100.0));
        assert_eq!(units_at(&v, 1.5), Some(200.0));
        assert_eq!(units_at(&v, 2.0), Some(300.0));
        assert_eq!(units_at(&v, 0.99), None);
        assert_eq!(units_at(&v, 2.01), None);
    }

    #[test]
    fn window_rate_of_a_steady_stream() {
        let v = steady();
        // Runner time 6.0..9.0 is batch time ~1.0..4.0.
        let r = rate_in_window(&v, 6.0, 9.0).unwrap();
        assert!((r - 1000.0).abs() < 1.0, "{r}");
        // Windows not covered by reports, or empty, give nothing.
        assert_eq!(rate_in_window(&v, 4.0, 6.0), None);
        assert_eq!(rate_in_window(&v, 9.0, 11.0), None);
        assert_eq!(rate_in_window(&v, 7.0, 7.0), None);
    }

    #[test]
    fn window_rate_sees_a_change_of_pace() {
        // 1000 units/s for the first 2 s, then 250 units/s.
        let v: Vec<Sample> = (1..=40)
            .map(|k| {
                let t = k as f64 * 0.1;
                let units = if t <= 2.0 {
                    t * 1000.0
                } else {
                    2000.0 + (t - 2.0) * 250.0
                };
                s(t + 0.01, t, units.round() as u64)
            })
            .collect();
        let fast = rate_in_window(&v, 0.51, 2.01).unwrap();
        let slow = rate_in_window(&v, 2.51, 3.91).unwrap();
        let both = rate_in_window(&v, 1.01, 3.01).unwrap();
        assert!((fast - 1000.0).abs() < 1.0, "{fast}");
        assert!((slow - 250.0).abs() < 1.0, "{slow}");
        assert!((both - 625.0).abs() < 1.0, "{both}");
    }

    #[test]
    fn cpu_time_counts_the_process_tree() {
        let line = "1234 (a (weird) name) R 77 1 1 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0";
        assert_eq!(stat_of(line), Some((77, 310)));
        assert!(!is_zombie(line));
        assert!(is_zombie(
            "1234 (a (Z) name) Z 77 1 1 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0"
        ));
        // A shell whose child burns CPU until told to stop: the child's time counts while it
        // runs. It is stopped once two samples were taken and the last counts some of its time
        // (a clock tick's worth at least), however fast or slow the machine gets there.
        let dir = tempfile::tempdir().unwrap();
        let stop = dir.path().join("stop");
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "while [ ! -e \"$1\" ]; do :; done & wait", "sh"])
            .arg(&stop)
            .spawn()
            .unwrap();
        let reader = BatchReader::cpu_time(sh.id(), Duration::from_millis(20), Clock::start());
        let end = Instant::now() + Duration::from_secs(60);
        while !reader.with(|f| f.samples.len() >= 2 && f.samples.last().unwrap().units > 0) {
            if Instant::now() >= end {
                std::fs::write(&stop, b"").unwrap();
                panic!("the child's CPU time never showed: {:?}", reader.samples());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        std::fs::write(&stop, b"").unwrap();
        sh.wait().unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while !reader.with(|f| f.closed) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        let samples = reader.samples();
        assert!(samples.len() >= 2, "{samples:?}");
        assert!(samples.last().unwrap().units > 0, "{samples:?}");
        assert_eq!(tree_cpu_us(sh.id()), None);
    }

    #[test]
    fn process_cpu_time_grows_while_it_computes() {
        let me = std::process::id();
        let before = process_cpu_us(me).unwrap();
        let mut after = before;
        let mut x = 0u64;
        for i in 0..20_000_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            if i % 1_000_000 == 0 {
                after = process_cpu_us(me).unwrap();
                if after > before {
                    break;
                }
            }
        }
        assert!(after > before, "{before} -> {after}");
        assert_eq!(process_cpu_us(u32::MAX), None);
    }

    #[test]
    fn reader_parses_reports_and_the_total() {
        let text = concat!(
            "{\"type\":\"report\",\"elapsed_s\":0.1,\"units\":10,\"units_per_s\":100.0}\n",
            "not json\n",
            "{\"type\":\"report\",\"elapsed_s\":0.2,\"units\":30,\"units_per_s\":200.0}\n",
            "{\"type\":\"total\",\"runtime\":\"linux\",\"total_units\":31}\n",
        );
        let reader = BatchReader::start(std::io::Cursor::new(text), Clock::start());
        let end = Instant::now() + Duration::from_secs(5);
        while !reader.with(|f| f.closed) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        let samples = reader.samples();
        assert_eq!(samples.len(), 2);
        assert_eq!((samples[1].elapsed_s, samples[1].units), (0.2, 30));
        reader.with(|f| {
            assert_eq!(f.total.as_ref().unwrap()["total_units"], 31);
            assert_eq!(f.unparsed, vec!["not json".to_owned()]);
        });
        // Closed without covering a later time: a clear error, not a hang.
        let err = reader
            .wait_past(1e9, Duration::from_secs(5), || Ok(()))
            .unwrap_err();
        assert!(err.to_string().contains("closed its output"), "{err}");
        // Units grew between its two reports: it was working.
        reader
            .wait_working(Duration::from_secs(5), || Ok(()))
            .unwrap();
    }
}
