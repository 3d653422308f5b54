//! `corral-gapmeter`: how much of one CPU a busy loop loses, and in what gaps, first in the fair
//! class with nothing moved, then shielded as iokerneld shields its core (every other movable
//! thread and interrupt moved off the CPU, the loop at SCHED_FIFO), in the same run. `--stray`
//! adds a busy process pinned to the CPU during both: the stand-in for whatever a user or a cron
//! job starts there. `--attribute` traces the CPU meanwhile and says what had the time of the
//! gaps: which interrupts, softirqs and threads, and how much no activity of the guest covers
//! (the host's).

mod trace;

use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};

use clap::{Parser, ValueEnum};
use corral_gapmeter::attribution::{self, Attribution};
use corral_gapmeter::{GapReport, LONG_GAP_NS, parse_cpu_list, spin, spin_logged};
use corral_iokernel::shield::{self, Shield, ShieldError, ShieldSpec};
use serde_json::json;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Condition {
    /// SCHED_OTHER, nothing moved.
    Fair,
    /// The CPU shielded (needs root), the loop at SCHED_FIFO.
    Shielded,
}

impl Condition {
    fn name(self) -> &'static str {
        match self {
            Condition::Fair => "fair",
            Condition::Shielded => "shielded",
        }
    }
}

/// Measures the gaps a clock-reading busy loop pinned to one CPU sees, unshielded and shielded.
#[derive(Debug, Parser)]
#[command(name = "corral-gapmeter", version, about)]
struct Args {
    /// The CPU to measure (iokerneld's core).
    #[arg(long)]
    cpu: usize,

    /// Seconds the loop runs in each condition.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,

    /// Gaps between two clock reads longer than this count, in microseconds.
    #[arg(long, default_value_t = 10.0)]
    threshold_us: f64,

    /// Conditions to measure, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fair,shielded"
    )]
    conditions: Vec<Condition>,

    /// Keep a busy shell loop pinned to the CPU during every condition.
    #[arg(long)]
    stray: bool,

    /// Trace the CPU during each condition (tracefs, needs root) and say what had the gaps'
    /// time: interrupts, softirqs, other threads, and what the guest did not see (the host).
    #[arg(long)]
    attribute: bool,

    /// With --attribute: the most causes listed per condition.
    #[arg(long, default_value_t = 10)]
    causes: usize,

    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Gaps kept for attribution: a minute of the fair class's gaps is some 30,000.
const LOGGED_GAPS: usize = 4_000_000;

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("corral-gapmeter: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One condition's result.
struct Measured {
    condition: Condition,
    gaps: GapReport,
    /// CPUs' worth of time the stray process got meanwhile.
    stray_cpus: Option<f64>,
    /// What shielding did, and what undoing it said.
    shield: Option<(String, String)>,
    /// With `--attribute`: what had the gaps' time.
    attributed: Option<Attributed>,
}

/// What took the CPU during one condition.
struct Attributed {
    attribution: Attribution,
    /// Events the trace's ring lost (the attribution is then partial).
    overrun: u64,
    /// Gaps beyond [`LOGGED_GAPS`], not attributed.
    unlogged: u64,
    /// The steal time the guest kernel accounted to the CPU meanwhile.
    steal_ns: Option<u64>,
}

/// One run of the loop, traced if asked.
fn looped(
    args: &Args,
    duration_ns: u64,
    threshold_ns: u64,
) -> Result<(GapReport, Option<Attributed>), String> {
    if !args.attribute {
        return Ok((spin(duration_ns, threshold_ns), None));
    }
    let tracing = trace::CpuTrace::start(args.cpu)?;
    let steal_before = trace::steal_ns(args.cpu);
    let (gaps, logged) = spin_logged(duration_ns, threshold_ns, LOGGED_GAPS);
    let steal_after = trace::steal_ns(args.cpu);
    // The loop runs on the main thread, whose tid is the pid.
    let (events, overrun) = tracing.finish(std::process::id())?;
    let segments = attribution::segments(&events);
    Ok((
        gaps.clone(),
        Some(Attributed {
            attribution: attribution::attribute(&logged, &segments, LONG_GAP_NS),
            overrun,
            unlogged: gaps.gaps.saturating_sub(logged.len() as u64),
            steal_ns: steal_before
                .zip(steal_after)
                .map(|(b, a)| a.saturating_sub(b)),
        }),
    ))
}

fn run(args: &Args) -> Result<(), String> {
    check(args)?;
    let mut stray = args.stray.then(|| Stray::start(args.cpu)).transpose()?;
    pin_to(args.cpu)?;
    let duration_ns = (args.seconds * 1e9) as u64;
    let threshold_ns = (args.threshold_us * 1e3) as u64;
    if !args.json {
        println!("{}", heading(args, stray.as_ref()));
    }
    let mut measured = Vec::new();
    for &condition in &args.conditions {
        let stray_before = stray.as_mut().map(Stray::cpu_seconds).transpose()?;
        let m = match condition {
            Condition::Fair => {
                let (gaps, attributed) = looped(args, duration_ns, threshold_ns)?;
                Measured {
                    condition,
                    gaps,
                    stray_cpus: None,
                    shield: None,
                    attributed,
                }
            }
            Condition::Shielded => shielded(args.cpu, || looped(args, duration_ns, threshold_ns))?,
        };
        let stray_cpus = match (stray.as_mut(), stray_before) {
            (Some(s), Some(before)) => {
                Some((s.cpu_seconds()? - before) / (m.gaps.span_ns as f64 / 1e9))
            }
            _ => None,
        };
        let m = Measured { stray_cpus, ..m };
        if !args.json {
            if measured.is_empty() {
                println!("{}", header());
            }
            println!("{}", row(&m));
        }
        measured.push(m);
    }
    if args.json {
        println!("{}", to_json(args, stray.as_ref(), &measured));
    } else {
        print!("{}", notes(&measured, args.causes));
    }
    Ok(())
}

/// Fails, before anything runs, on a CPU that is not there or a condition that cannot be had.
fn check(args: &Args) -> Result<(), String> {
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 86_400.0) {
        return Err(format!(
            "invalid --seconds {}: expected (0, 86400]",
            args.seconds
        ));
    }
    if !(args.threshold_us.is_finite() && args.threshold_us > 0.0) {
        return Err(format!(
            "invalid --threshold-us {}: expected a positive number of microseconds",
            args.threshold_us
        ));
    }
    if args.conditions.is_empty() {
        return Err("--conditions names none: expected fair, shielded or both".into());
    }
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(|e| format!("cannot read /sys/devices/system/cpu/online: {e}"))?;
    let cpus = parse_cpu_list(&online)
        .ok_or_else(|| format!("cannot parse the online CPUs {:?}", online.trim()))?;
    if !cpus.contains(&args.cpu) {
        return Err(format!(
            "CPU {} is not online here (online: {})",
            args.cpu,
            online.trim()
        ));
    }
    // SAFETY: geteuid has no preconditions.
    if args.attribute && unsafe { libc::geteuid() } != 0 {
        return Err("--attribute needs root: it traces the CPU through tracefs".into());
    }
    // SAFETY: geteuid has no preconditions.
    if args.conditions.contains(&Condition::Shielded) && unsafe { libc::geteuid() } != 0 {
        return Err(
            "the shielded condition needs root: it moves other processes' threads and interrupts \
             off the CPU and runs the loop at SCHED_FIFO. Run it with sudo, or measure \
             --conditions fair alone."
                .into(),
        );
    }
    Ok(())
}

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) -> Result<(), String> {
    corral_affinity::pin_current_thread(cpu)
        .map_err(|e| format!("cannot pin the loop to CPU {cpu}: {e}"))
}

/// Back to SCHED_OTHER at nice 0.
fn normal_class() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system call on the calling thread with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The loop with `cpu` shielded and itself at SCHED_FIFO; everything undone before it returns.
fn shielded(
    cpu: usize,
    run_loop: impl FnOnce() -> Result<(GapReport, Option<Attributed>), String>,
) -> Result<Measured, String> {
    let spec = ShieldSpec {
        keep: vec![cpu],
        exempt_pids: vec![std::process::id()],
    };
    let shield = Shield::apply(&spec).map_err(|e| shield_failed(&e))?;
    let applied = shield.summary();
    if let Err(e) = shield::set_realtime(0, shield::LOOP_PRIORITY) {
        let undone = undo(shield);
        return Err(format!(
            "cannot run the loop at SCHED_FIFO {}: {e} (shield undone: {undone})",
            shield::LOOP_PRIORITY
        ));
    }
    let looped = run_loop();
    let back = normal_class();
    let undone = undo(shield);
    back.map_err(|e| format!("cannot return the loop to SCHED_OTHER: {e}"))?;
    let (gaps, attributed) = looped?;
    Ok(Measured {
        condition: Condition::Shielded,
        gaps,
        stray_cpus: None,
        shield: Some((applied, undone)),
        attributed,
    })
}

fn undo(shield: Shield) -> String {
    match shield.undo() {
        Ok(said) => said,
        Err(e) => format!("FAILED: {e}"),
    }
}

/// Why the shield could not be had, naming the process that holds it.
fn shield_failed(e: &ShieldError) -> String {
    match e {
        ShieldError::Busy { holder: Some(pid) } => format!(
            "cannot shield: the shield is held by pid {pid} ({}); stop it, or measure \
             --conditions fair alone",
            describe(*pid)
        ),
        ShieldError::Busy { holder: None } => "cannot shield: another process holds the shield \
             (/run/corral/shield.lock); stop it, or measure --conditions fair alone"
            .into(),
        other => format!("cannot shield: {other}"),
    }
}

/// A process's command line, for messages.
fn describe(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_owned()
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "command line unknown".into())
}

/// A busy shell loop pinned to the measured CPU, killed when dropped (or when the meter dies).
struct Stray {
    child: Child,
}

impl Stray {
    fn start(cpu: usize) -> Result<Stray, String> {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: between fork and exec the closure calls only prctl and sched_setaffinity on
        // the child itself, with a set built on its stack; both are async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the stray busy loop (sh): {e}"))?;
        Ok(Stray { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its CPU time so far (utime + stime from /proc/PID/stat).
    fn cpu_seconds(&mut self) -> Result<f64, String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Err(format!("the stray busy loop exited ({status})"));
        }
        let path = format!("/proc/{}/stat", self.pid());
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
        // Fields after the command name, which ends at the last ')': utime and stime are the
        // 14th and 15th of the line.
        let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
        let (utime, stime) = ticks(11)
            .zip(ticks(12))
            .ok_or_else(|| format!("{path} does not have the expected fields"))?;
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        Ok((utime + stime) as f64 / hz)
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn heading(args: &Args, stray: Option<&Stray>) -> String {
    format!(
        "corral-gapmeter: a clock-reading loop on CPU {} for {} s per condition, gaps over {} us \
         (kernel {}){}",
        args.cpu,
        args.seconds,
        args.threshold_us,
        kernel(),
        stray.map_or_else(String::new, |s| format!(
            "; a stray busy loop (pid {}) pinned to CPU {} throughout",
            s.pid(),
            args.cpu
        ))
    )
}

fn us(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), |ns| format!("{:.1}", ns as f64 / 1e3))
}

fn header() -> String {
    format!(
        "{:<9} {:>12} {:>8} {:>8} {:>9} {:>7} {:>9} {:>8} {:>8} {:>10}",
        "condition",
        "reads",
        "gaps",
        format!(">{}us", LONG_GAP_NS / 1000),
        "lost ms",
        "lost %",
        "max us",
        "p50 us",
        "p99 us",
        "stray CPU"
    )
}

fn row(m: &Measured) -> String {
    let g = &m.gaps;
    format!(
        "{:<9} {:>12} {:>8} {:>8} {:>9.2} {:>7.3} {:>9} {:>8} {:>8} {:>10}",
        m.condition.name(),
        g.reads,
        g.gaps,
        g.long_gaps,
        g.lost_ns as f64 / 1e6,
        g.lost_fraction * 100.0,
        us(g.max_ns),
        us(g.p50_ns),
        us(g.p99_ns),
        m.stray_cpus
            .map_or_else(|| "-".into(), |c| format!("{:.1}%", c * 100.0))
    )
}

fn notes(measured: &[Measured], causes: usize) -> String {
    let mut out = String::new();
    for m in measured {
        if let Some(a) = &m.attributed {
            out.push_str(&attributed_table(m.condition, a, causes));
        }
    }
    for m in measured {
        if let Some((applied, undone)) = &m.shield {
            let _ = writeln!(out, "shield: {applied}");
            let _ = writeln!(out, "shield undone: {undone}");
        }
    }
    out
}

/// What had the gaps' time in one condition, most first.
fn attributed_table(condition: Condition, a: &Attributed, causes: usize) -> String {
    let at = &a.attribution;
    let mut out = format!(
        "\n{}: what had the time of {} gaps ({:.2} ms lost){}; the guest kernel accounted {} of \
         steal time to the CPU\n",
        condition.name(),
        at.gaps,
        at.lost_ns as f64 / 1e6,
        match (a.unlogged, a.overrun) {
            (0, 0) => String::new(),
            (u, o) => format!(" (not attributed: {u} gaps past the log, {o} trace events lost)"),
        },
        a.steal_ns.map_or_else(
            || "an unknown amount".into(),
            |ns| format!("{:.1} ms", ns as f64 / 1e6)
        ),
    );
    let _ = writeln!(
        out,
        "  {:<48} {:>10} {:>8} {:>8} {:>12}",
        "cause",
        "ms",
        "% lost",
        "gaps",
        format!("led >{}us", LONG_GAP_NS / 1000)
    );
    for (cause, total) in at.causes.iter().take(causes) {
        let _ = writeln!(
            out,
            "  {:<48} {:>10.3} {:>8.1} {:>8} {:>12}",
            cause,
            total.ns as f64 / 1e6,
            at.share(cause) * 100.0,
            total.gaps,
            total.long_gaps_led
        );
    }
    if at.causes.len() > causes {
        let _ = writeln!(out, "  and {} more causes", at.causes.len() - causes);
    }
    for (gap, causes) in &at.longest {
        let parts: Vec<String> = causes
            .iter()
            .map(|(c, ns)| format!("{c} {:.1}", *ns as f64 / 1e3))
            .collect();
        let _ = writeln!(
            out,
            "  a gap of {:.1} us: {} (us)",
            (gap.end_ns - gap.start_ns) as f64 / 1e3,
            parts.join(", ")
        );
    }
    out
}

fn to_json(args: &Args, stray: Option<&Stray>, measured: &[Measured]) -> serde_json::Value {
    json!({
        "cpu": args.cpu,
        "seconds": args.seconds,
        "threshold_us": args.threshold_us,
        "kernel": kernel(),
        "stray_pid": stray.map(Stray::pid),
        "conditions": measured.iter().map(|m| {
            let mut v = m.gaps.to_json();
            v["condition"] = json!(m.condition.name());
            v["stray_cpus"] = json!(m.stray_cpus);
            if let Some((applied, undone)) = &m.shield {
                v["shield"] = json!(applied);
                v["shield_undone"] = json!(undone);
            }
            if let Some(a) = &m.attributed {
                let mut at = a.attribution.to_json();
                at["trace_events_lost"] = json!(a.overrun);
                at["gaps_not_attributed"] = json!(a.unlogged);
                at["steal_ns"] = json!(a.steal_ns);
                v["attribution"] = at;
            }
            v
        }).collect::<Vec<_>>(),
    })
}
