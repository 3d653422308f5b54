//! The experiments: what runs in which order, what is printed while it runs, and what is
//! written at the end.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_loadgen::queueing;
use corral_loadgen::{Arrivals, ScheduleConfig, ServiceDist};
use serde_json::json;

use crate::batch::Clock;
use crate::charts;
use crate::cli::{Args, DemoNic, Experiment, Plan};
use crate::error::{Error, Result};
use crate::plot;
use crate::report::{self, fmt_pct, fmt_us};
use crate::results::{BatchAlone, BoundPoint, Burst, CpuSteal, Point, System, SystemRun};
use crate::systems::{Bins, Corral, Env, Linux};
use crate::{machine, procs};

/// Loads at or below this are held to the targets (the paper's claims stop short of saturation).
pub const TARGET_MAX_LOAD: f64 = 0.8;

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

/// Local time as `YYYYMMDD-HHMMSS`, for the default output directory.
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as libc::time_t;
    // SAFETY: tm is plain data; localtime_r writes it from a valid time_t.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        tm
    };
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

fn online_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Runs the experiment the arguments ask for; everything it starts is stopped before it
/// returns, on every path.
pub fn run(args: &Args) -> Result<()> {
    if let Some(dir) = &args.replot {
        return replot(args, dir);
    }
    let wall = Instant::now();
    let plan = args.plan().map_err(Error::Failed)?;
    let needs_iokerneld =
        plan.systems.contains(&System::Corral) || plan.systems.contains(&System::Dedicated);
    // SAFETY: geteuid has no preconditions.
    if needs_iokerneld && unsafe { libc::geteuid() } != 0 {
        return Err(Error::msg(
            "corral-demo must run as root: iokerneld pins itself, moves the runtimes' kthreads \
             between cores and signals them. Run it with sudo (or pass --systems linux for the \
             Linux half alone).",
        ));
    }
    for cpu in [plan.iokernel_cpu, plan.app_cpu] {
        if cpu >= online_cpus() {
            return Err(Error::msg(format!(
                "CPU {cpu} is not available here ({} online); choose others with \
                 --iokernel-cpu / --app-cpu",
                online_cpus()
            )));
        }
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .ok_or_else(|| Error::msg("cannot find the runner's own executable"))?;
    let bin_dir = args.bin_dir.as_deref().unwrap_or(&exe_dir);
    let bins = if plan.experiment == Experiment::Kv {
        Bins::locate_kv(
            bin_dir,
            &plan.systems,
            plan.batch_cmd.is_some(),
            &plan.kv.memcached,
        )?
    } else if plan.experiment == Experiment::Dns {
        Bins::locate_dns(
            bin_dir,
            &plan.systems,
            plan.batch_cmd.is_some(),
            plan.dns.linux_server,
        )?
    } else {
        Bins::locate(bin_dir, &plan.systems, plan.batch_cmd.is_some())?
    };
    // Fail on a missing font now, not after minutes of measuring.
    plot::load_font(&args.font)?;
    let out = match &args.out {
        Some(d) => d.clone(),
        None => exe_dir
            .parent()
            .unwrap_or(&exe_dir)
            .join("demo")
            .join(timestamp()),
    };
    let logs = out.join("logs");
    let raw = out.join("raw");
    for d in [&out, &logs, &raw] {
        std::fs::create_dir_all(d)
            .map_err(|e| Error::msg(format!("cannot create {}: {e}", d.display())))?;
    }
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("/run/corral/demo-{}.sock", std::process::id())));
    let others = machine::other_iokernelds();
    for (pid, cmd) in &others {
        say(format!(
            "WARNING: another iokerneld is running (pid {pid}: {cmd}); it competes for the same \
             CPUs and will disturb the measurements"
        ));
    }
    // The server experiments run no spin server.
    let spin_iterations_per_us = if plan.experiment.is_server_ladder() {
        f64::NAN
    } else {
        let rate = crate::systems::calibrate_spin(&bins.spin, plan.app_cpu)?;
        say(format!(
            "spin servers' burn rate: {rate:.1} iterations per microsecond, measured once on \
             CPU {} and used by both systems",
            plan.app_cpu
        ));
        rate
    };
    let veth = match plan.nic {
        DemoNic::Gen => None,
        DemoNic::Xdp => {
            let veth = crate::veth::Veth::create()?;
            say(format!(
                "--nic xdp: the load generator runs in the network namespace {} on CPU {}, over \
                 a veth pair to {} (iokerneld's XDP backend for Corral, Linux's stack for \
                 Linux); Corral's spin server is {}, Linux's {}",
                veth.namespace,
                plan.client_cpu,
                crate::veth::HOST_LINK,
                plan.corral_addr,
                plan.linux_addr
            ));
            if plan.client_cpu == plan.iokernel_cpu {
                say(format!(
                    "--nic xdp: the load generator shares CPU {} with iokerneld's loop in the \
                     Corral runs (no third CPU was given with --client-cpu), so nothing is \
                     shielded; on this machine the client's CPU time is taken from the \
                     dataplane, which a second machine would not do",
                    plan.client_cpu
                ));
            }
            Some(veth)
        }
    };
    let env = Env {
        plan,
        bins,
        out,
        logs,
        raw,
        socket,
        clock: Clock::start(),
        spin_iterations_per_us,
        veth,
    };
    let p = &env.plan;
    let loads = p
        .loads
        .iter()
        .map(|l| fmt_pct(*l))
        .collect::<Vec<_>>()
        .join(",");
    let what = match p.experiment {
        Experiment::Sweep => format!(
            "sweep of {} at loads {loads}, {} s per point",
            p.systems
                .iter()
                .map(|s| s.title())
                .collect::<Vec<_>>()
                .join(" and "),
            p.point_secs
        ),
        Experiment::Intervals => format!(
            "Corral at allocation intervals {}, loads {loads}, {} s per point",
            p.intervals
                .iter()
                .map(|&iv| report::interval_label(iv))
                .collect::<Vec<_>>()
                .join(","),
            p.point_secs
        ),
        Experiment::Burst => format!(
            "Corral load step {} -> {} -> {}, {} s each",
            fmt_pct(p.burst_base),
            fmt_pct(p.burst_peak),
            fmt_pct(p.burst_base),
            p.burst_secs
        ),
        Experiment::Kv | Experiment::Dns => format!(
            "{} co-location sweep of {} at an unloaded {}/s then {} requests/s until \
             saturation, {} s per point",
            match p.experiment {
                Experiment::Dns => "DNS",
                _ => "memcached",
            },
            p.systems
                .iter()
                .map(|s| s.title())
                .collect::<Vec<_>>()
                .join(", "),
            crate::kvreport::fmt_rate(p.kv.unloaded_rate),
            p.kv.rates
                .iter()
                .map(|r| crate::kvreport::fmt_rate(*r))
                .collect::<Vec<_>>()
                .join(","),
            p.point_secs
        ),
    };
    if p.experiment.is_server_ladder() {
        say(format!(
            "corral-demo: {what}; results in {}",
            env.out.display()
        ));
    } else {
        say(format!(
            "corral-demo: {what}; service {}; results in {}",
            report::service_label(&p.service),
            env.out.display()
        ));
    }
    if let Some(mode) = p.handover {
        say(format!(
            "iokerneld core hand-over: --handover {}",
            mode.name()
        ));
    }
    if let Some(policy) = &p.policy {
        say(format!(
            "iokerneld core allocation policy: --policy {policy}"
        ));
    }
    let mut record = json!({
        "experiment": p.experiment,
        "plan": p,
        "runner_command": std::env::args().collect::<Vec<_>>(),
        "bin_dir": env.bins.dir,
        "host": { "online_cpus": online_cpus(), "kernel": kernel() },
        "other_iokernelds": others.iter().map(|(pid, cmd)| json!({"pid": pid, "cmdline": cmd})).collect::<Vec<_>>(),
        "started_unix_s": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    });
    let (text, csv, plots) = match p.experiment {
        Experiment::Sweep => sweep(&env, &mut record)?,
        Experiment::Intervals => intervals(&env, &mut record)?,
        Experiment::Burst => burst(&env, &mut record)?,
        Experiment::Kv | Experiment::Dns => crate::kv::sweep(&env, &mut record)?,
    };
    let csv_path = env.out.join("results.csv");
    std::fs::write(&csv_path, csv)
        .map_err(|e| Error::msg(format!("cannot write {}: {e}", csv_path.display())))?;
    let json_path = env.out.join("results.json");
    let mut files = vec![json_path.clone(), csv_path.clone()];
    files.extend(plots);
    record["files"] = json!(files);
    record["wall_s"] = json!(wall.elapsed().as_secs_f64());
    record["summary_text"] = json!(text);
    let pretty = serde_json::to_string_pretty(&record)
        .map_err(|e| Error::msg(format!("cannot encode results: {e}")))?;
    std::fs::write(&json_path, pretty + "\n")
        .map_err(|e| Error::msg(format!("cannot write {}: {e}", json_path.display())))?;
    say("");
    say(text);
    say(format!(
        "wall time {:.0} s. Files:",
        wall.elapsed().as_secs_f64()
    ));
    for f in &files {
        say(format!("  {}", f.display()));
    }
    say(format!("  {} (each process's output)", env.logs.display()));
    Ok(())
}

/// `--replot DIR`: the plots of an earlier run, drawn again from its results.
fn replot(args: &Args, dir: &Path) -> Result<()> {
    plot::load_font(&args.font)?;
    let out = args.out.as_deref().unwrap_or(dir);
    std::fs::create_dir_all(out)
        .map_err(|e| Error::msg(format!("cannot create {}: {e}", out.display())))?;
    let files = crate::replot::replot(dir, out, &args.service)?;
    say(format!(
        "plots of {} drawn again from its results:",
        dir.display()
    ));
    for f in &files {
        say(format!("  {}", f.display()));
    }
    Ok(())
}

/// The zero-overhead FCFS bound at each load, simulated for the same schedule as the runs
/// (two threads; run when the measurements are over, so it disturbs nothing).
fn bounds(plan: &Plan, loads: &[f64]) -> Result<Vec<BoundPoint>> {
    say(format!(
        "computing the zero-overhead FCFS bound at {} loads ...",
        loads.len()
    ));
    let one = |load: f64| -> std::result::Result<Option<BoundPoint>, String> {
        let rate = plan.rate(load);
        let cfg = ScheduleConfig::new(rate, Duration::from_secs_f64(plan.point_secs))
            .arrivals(Arrivals::Poisson)
            .service(plan.service)
            .clients(plan.clients)
            .seed(plan.seed);
        let b = queueing::bound(&cfg).map_err(|e| format!("bound at load {load}: {e}"))?;
        Ok(b.simulated.map(|s| BoundPoint {
            load,
            rate_rps: rate,
            p50_ns: s.sojourn.p50_ns,
            p99_ns: s.sojourn.p99_ns,
            p999_ns: s.sojourn.p999_ns,
            mm1_p999_ns: b.mm1_p999_ns,
            simulated_requests: s.requests,
        }))
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let mut pending = Vec::new();
        for chunk in loads.chunks(loads.len().div_ceil(2).max(1)) {
            pending.push(s.spawn(move || chunk.iter().map(|&l| one(l)).collect::<Vec<_>>()));
        }
        pending
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![Err("bound thread panicked".into())])
            })
            .collect()
    });
    let mut out = Vec::new();
    for r in results {
        if let Some(b) = r.map_err(Error::Failed)? {
            out.push(b);
        }
    }
    Ok(out)
}

/// Runs one point and notes what else used the machine meanwhile: any iokerneld the runner
/// did not start (seen at its start or end), the CPU time of processes it did not start, and
/// the time the host machine took from the plan's two CPUs (steal).
fn watched(plan: &Plan, run: impl FnOnce() -> Result<Point>) -> Result<Point> {
    let (mut pt, seen) = watch(plan, run)?;
    pt.foreign_cpus = seen.foreign_cpus;
    pt.steal = seen.steal;
    pt.interference = seen.interference;
    Ok(pt)
}

/// What else used the machine while one point ran.
pub(crate) struct Watched {
    /// CPUs' worth of time used by processes the runner did not start.
    pub foreign_cpus: Option<f64>,
    /// Time the host took from the plan's two CPUs.
    pub steal: Option<CpuSteal>,
    /// Every iokerneld the runner did not start, seen at the start or the end.
    pub interference: Vec<String>,
}

/// Runs `run` and notes what else used the machine meanwhile.
pub(crate) fn watch<T>(plan: &Plan, run: impl FnOnce() -> Result<T>) -> Result<(T, Watched)> {
    let cpus = [plan.iokernel_cpu, plan.app_cpu];
    let before = machine::other_iokernelds();
    let cpu_before = machine::snapshot();
    let steal_before = machine::steal_ms(&cpus);
    let out = run()?;
    let steal_after = machine::steal_ms(&cpus);
    let cpu_after = machine::snapshot();
    let mut interference: Vec<String> = before
        .into_iter()
        .chain(machine::other_iokernelds())
        .map(|(pid, cmd)| format!("pid {pid}: {cmd}"))
        .collect();
    interference.sort();
    interference.dedup();
    let seen = Watched {
        foreign_cpus: cpu_before
            .zip(cpu_after)
            .and_then(|(a, b)| machine::foreign_cpus(&a, &b)),
        steal: steal_before.zip(steal_after).map(|(a, b)| CpuSteal {
            iokernel_cpu_ms: (b[0] - a[0]).max(0.0),
            app_cpu_ms: (b[1] - a[1]).max(0.0),
        }),
        interference,
    };
    Ok((out, seen))
}

/// `cpu_units`: the batch job is `--batch-cmd`, whose units are its CPU microseconds.
fn point_line(system: System, p: &Point, cpu_units: bool) -> String {
    let s = &p.summary;
    let mut line = format!(
        "  {:<9} {:>4} {:>6.0}/s: achieved {:.0}/s  p50 {}  p99 {}  p99.9 {} us",
        system.title(),
        fmt_pct(p.load),
        p.rate_rps,
        s.achieved_rps,
        fmt_us(s.latency.p50_ns),
        fmt_us(s.latency.p99_ns),
        fmt_us(s.latency.p999_ns),
    );
    if let Some(f) = p.batch_fraction {
        line.push_str(&format!("  batch {f:.2} of alone"));
    }
    if let Some(cpu_us_per_s) = p.batch_units_per_s.filter(|_| cpu_units) {
        line.push_str(&format!(
            "  batch CPU share {}",
            fmt_pct(cpu_us_per_s / 1e6)
        ));
    }
    if let Some(r) = p.reallocations_per_s {
        line.push_str(&format!("  {r:.0} realloc/s"));
    }
    if let Some([n, ns]) = p.iokerneld_stalls.filter(|[n, _]| *n > 0) {
        line.push_str(&format!(
            "  iokerneld lost its CPU {n}x ({:.1} ms)",
            ns as f64 / 1e6
        ));
    }
    if let Some(s) = p
        .steal
        .filter(|s| s.iokernel_cpu_ms > 0.0 || s.app_cpu_ms > 0.0)
    {
        line.push_str(&format!(
            "  host stole {:.0} ms of CPU {} and {:.0} ms of CPU {}",
            s.iokernel_cpu_ms,
            p_cpus(system).0,
            s.app_cpu_ms,
            p_cpus(system).1
        ));
    }
    if let Some(d) = p.demotions.as_ref().filter(|d| d.total > 0) {
        line.push_str(&format!("  {} demotion(s)", d.total));
    }
    if s.lost > 0 {
        line.push_str(&format!("  LOST {}/{}", s.lost, s.sent));
    }
    if s.fell_behind {
        line.push_str(&format!(
            "  GENERATOR FELL BEHIND ({})",
            s.fell_behind_reason.as_deref().unwrap_or("?")
        ));
    }
    if !p.interference.is_empty() {
        line.push_str(&format!(
            "  ANOTHER IOKERNELD WAS RUNNING ({})",
            p.interference.join("; ")
        ));
    }
    if let Some(x) = p.foreign_cpus.filter(|&x| x > report::FOREIGN_CPU_FLAG) {
        line.push_str(&format!("  OTHER PROCESSES USED {x:.2} CPU"));
    }
    line
}

/// What the two CPUs are called in a point line: iokerneld's (or the load generator's) and
/// the application CPU.
fn p_cpus(system: System) -> (&'static str, &'static str) {
    match system {
        System::Linux => ("gen", "app"),
        System::Corral | System::Dedicated => ("iok", "app"),
    }
}

fn alone_line(system: System, a: &BatchAlone, cpu_units: bool) -> String {
    let mut line = format!(
        "  {:<6} batch alone: {:.0} {} over {:.1} s",
        system.title(),
        a.units_per_s,
        if cpu_units { "CPU us/s" } else { "units/s" },
        a.window_s[1] - a.window_s[0]
    );
    if let Some(x) = a.foreign_cpus.filter(|&x| x > report::FOREIGN_CPU_FLAG) {
        line.push_str(&format!("  OTHER PROCESSES USED {x:.2} CPU"));
    }
    line
}

/// The batch job alone, with the CPU time other processes took meanwhile.
pub(crate) fn alone_watched(measure: impl FnOnce() -> Result<BatchAlone>) -> Result<BatchAlone> {
    let a = machine::snapshot();
    let mut alone = measure()?;
    let b = machine::snapshot();
    alone.foreign_cpus = a.zip(b).and_then(|(a, b)| machine::foreign_cpus(&a, &b));
    Ok(alone)
}

/// Says how many warnings iokerneld logged, with the first, so that they are not missed.
fn note_warnings(run: &SystemRun) {
    if let Some(first) = run.daemon_warnings.first() {
        say(format!(
            "  iokerneld logged {} warning(s) during this run; the first: {first}",
            run.daemon_warnings.len()
        ));
    }
}

fn warnings_text(runs: &[SystemRun]) -> String {
    let mut text = String::new();
    for r in runs.iter().filter(|r| !r.daemon_warnings.is_empty()) {
        text.push_str(&format!(
            "note: iokerneld{} logged {} warning(s); the first: {}\n",
            r.interval_us
                .map(|iv| format!(" (interval {})", report::interval_label(iv)))
                .unwrap_or_default(),
            r.daemon_warnings.len(),
            r.daemon_warnings[0]
        ));
    }
    text
}

/// One line saying how many measurements other work on the machine may have disturbed.
fn interference_text(runs: &[SystemRun]) -> String {
    let disturbed = |foreign: Option<f64>, others: bool| {
        others || foreign.is_some_and(|x| x > report::FOREIGN_CPU_FLAG)
    };
    let points: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            r.points
                .iter()
                .filter(|p| disturbed(p.foreign_cpus, !p.interference.is_empty()))
                .map(move |p| format!("{} {}", r.system.title(), fmt_pct(p.load)))
        })
        .collect();
    let alone: Vec<&str> = runs
        .iter()
        .filter(|r| {
            r.batch_alone
                .as_ref()
                .is_some_and(|a| disturbed(a.foreign_cpus, false))
        })
        .map(|r| r.system.title())
        .collect();
    if points.is_empty() && alone.is_empty() {
        return String::new();
    }
    format!(
        "note: other processes used the CPUs during {} measurement(s) ({}{}): those numbers are \
         disturbed; rerun on a quiet machine\n",
        points.len() + alone.len(),
        points.join(", "),
        if alone.is_empty() {
            String::new()
        } else {
            format!(
                "{}batch alone of {}",
                if points.is_empty() { "" } else { ", " },
                alone.join(" and ")
            )
        }
    )
}

/// Where a Corral run's load comes from, for its heading.
fn load_source(p: &Plan) -> String {
    match p.nic {
        DemoNic::Gen => "nic gen".to_owned(),
        DemoNic::Xdp => format!(
            "nic xdp on {}; corral-loadgen-linux in the client namespace on CPU {}",
            crate::veth::HOST_LINK,
            p.client_cpu
        ),
    }
}

/// Runs Corral at one allocation interval over the plan's loads; `dedicated`: the floor, spin
/// alone with a spinning kthread on a guaranteed core.
fn corral_sweep(env: &Env, interval_us: u64, dedicated: bool) -> Result<SystemRun> {
    let p = &env.plan;
    let system = if dedicated {
        System::Dedicated
    } else {
        System::Corral
    };
    if dedicated {
        say(format!(
            "== Dedicated (Corral, allocation interval {}): iokerneld on CPU {} ({}), spin \
             alone with a spinning kthread on CPU {} as a guaranteed core, no batch job",
            report::interval_label(interval_us),
            p.iokernel_cpu,
            load_source(p),
            p.app_cpu
        ));
    } else {
        say(format!(
            "== Corral (allocation interval {}): iokerneld on CPU {} ({}), spin and batch \
             sharing CPU {}",
            report::interval_label(interval_us),
            p.iokernel_cpu,
            load_source(p),
            p.app_cpu
        ));
    }
    let mut c = Corral::start(env, interval_us, dedicated)?;
    let alone = if dedicated {
        None
    } else {
        let alone = alone_watched(|| c.batch_alone())?;
        say(alone_line(
            System::Corral,
            &alone,
            env.plan.batch_cmd.is_some(),
        ));
        Some(alone)
    };
    let mut points = Vec::new();
    let mut classes = Vec::new();
    for &load in &p.loads {
        let name = format!("load{}", fmt_pct(load).trim_end_matches('%'));
        let pt = watched(p, || {
            c.run_point(load, &[(p.rate(load), p.point_secs)], &name, alone.as_ref())
        })?;
        say(point_line(system, &pt, env.plan.batch_cmd.is_some()));
        points.push(pt);
        if classes.is_empty() {
            classes = c.classes();
            say(report::setup_line(system, &classes, &c.shield_said()));
        }
    }
    let stats = c.daemon_stats().ok();
    let run = SystemRun {
        system,
        interval_us: Some(interval_us),
        commands: c.commands(),
        spin_iterations_per_us: c.spin_calibration(),
        batch_alone: alone,
        points,
        daemon_stats: stats,
        daemon_warnings: c.daemon_warnings(),
        classes,
        shield: Some(c.shield_said()),
    };
    note_warnings(&run);
    drop(c);
    Ok(run)
}

fn linux_sweep(env: &Env) -> Result<SystemRun> {
    let p = &env.plan;
    say(format!(
        "== Linux: spin (UDP socket) and batch (SCHED_IDLE threads) pinned to CPU {}, \
         corral-loadgen-linux on CPU {}{}",
        p.app_cpu,
        if p.nic == DemoNic::Xdp {
            p.client_cpu
        } else {
            p.iokernel_cpu
        },
        if p.nic == DemoNic::Xdp {
            format!(
                " in the client namespace, over the veth pair to {}",
                p.linux_addr
            )
        } else {
            String::new()
        }
    ));
    let mut l = Linux::start(env)?;
    let alone = alone_watched(|| l.batch_alone())?;
    say(alone_line(
        System::Linux,
        &alone,
        env.plan.batch_cmd.is_some(),
    ));
    let mut points = Vec::new();
    let mut classes = Vec::new();
    for &load in &p.loads {
        let pt = watched(p, || l.run_point(load, p.rate(load), Some(&alone)))?;
        say(point_line(System::Linux, &pt, env.plan.batch_cmd.is_some()));
        points.push(pt);
        if classes.is_empty() {
            classes = l.classes();
            say(report::setup_line(
                System::Linux,
                &classes,
                &l.shield_said(),
            ));
        }
    }
    let run = SystemRun {
        system: System::Linux,
        interval_us: None,
        commands: l.commands(),
        spin_iterations_per_us: l.spin_calibration(),
        batch_alone: Some(alone),
        points,
        daemon_stats: None,
        daemon_warnings: Vec::new(),
        classes,
        shield: Some(l.shield_said()),
    };
    if let Some(undone) = l.finish() {
        say(format!("  Linux shield undone: {undone}"));
    }
    Ok(run)
}

pub(crate) type Written = (String, String, Vec<PathBuf>);

fn sweep(env: &Env, record: &mut serde_json::Value) -> Result<Written> {
    let p = &env.plan;
    let mut runs: Vec<SystemRun> = Vec::new();
    for &sys in &p.systems {
        procs::check_interrupt()?;
        let run = match sys {
            System::Corral => corral_sweep(env, p.interval_us, false)?,
            System::Linux => linux_sweep(env)?,
            System::Dedicated => corral_sweep(env, p.interval_us, true)?,
        };
        runs.push(run);
    }
    let bounds = bounds(p, &p.loads)?;
    procs::check_interrupt()?;
    let measured = report::SweepRuns::of(&runs);
    let rates: Vec<f64> = p.loads.iter().map(|&l| p.rate(l)).collect();
    let rows = report::sweep_rows(&p.loads, &rates, measured, &bounds);
    let checks = report::check_targets(&rows, TARGET_MAX_LOAD);

    let mut text = format!(
        "Spin server ({} service) and batch job sharing one core: Corral vs Linux\n\
         C = Corral, L = Linux, D = dedicated (spin alone on Corral, spinning on a guaranteed \
         core: the core-wasting floor); latencies in us from each request's scheduled send \
         time; batch = batch throughput as a fraction of the batch job alone; realloc/s = core \
         reallocations per second; bound = zero-overhead FCFS server fed the same schedule\n\n",
        report::service_label(&p.service)
    );
    text.push_str(
        &report::sweep_table(
            &rows,
            measured.corral.is_some(),
            measured.linux.is_some(),
            measured.dedicated.is_some(),
        )
        .render(),
    );
    text.push_str(
        "\nTail split: each stage's median over the requests above p99 and above p99.9 (us); \
         send-late = scheduled to sent, deliver+wake = sent to the server's receipt, queue = \
         receipt to service start, service = the work, return = service end to the response \
         seen; from = the quantile's latency\n",
    );
    text.push_str(&report::tail_split_table(&runs).render());
    text.push_str(
        "\nCPU lost to the host machine during each point, and demotions: iokerneld gaps = \
         its loop went over 50 us without its CPU (corral-loadgen-linux counts no gaps of its \
         own: its lateness shows in the send-late column above); steal = /proc/stat steal of iokerneld's \
         (Linux: the load generator's) CPU and of the application CPU, 10 ms resolution; \
         demotions = kthreads demoted for ignoring a preemption\n",
    );
    text.push_str(&report::lost_cpu_table(&runs).render());
    for r in &runs {
        if let Some(a) = &r.batch_alone {
            text.push_str(&format!(
                "batch alone: {} {:.0} units/s\n",
                r.system.title(),
                a.units_per_s
            ));
        }
    }
    text.push_str(&report::setup_text(
        runs.iter().map(|r| (r.system, &r.classes, &r.shield)),
    ));
    for r in &runs {
        for pt in &r.points {
            if let Some(reason) = &pt.summary.fell_behind_reason {
                text.push_str(&format!(
                    "note: {} at {}: the generator fell behind: {reason}\n",
                    r.system.title(),
                    fmt_pct(pt.load)
                ));
            }
        }
    }
    text.push_str(&warnings_text(&runs));
    text.push_str(&interference_text(&runs));
    text.push_str(&format!(
        "\nTargets at loads up to {} (p99.9 unbounded when over 0.1% of requests were lost, \
         p99 when over 1%; batch in units/s):\n",
        fmt_pct(TARGET_MAX_LOAD)
    ));
    text.push_str(&report::render_checks(&checks));

    let csv = report::sweep_csv(&rows);
    let plots = sweep_plots(&env.out, &p.service, &p.loads, &runs, &bounds)?;
    record["systems"] = json!(runs);
    record["bounds"] = json!(bounds);
    record["rows"] = json!(rows);
    record["checks"] = json!(checks);
    Ok((text, csv, plots))
}

/// The bound's p99.9 at each load, as the plots take it.
pub(crate) fn bound_p999(bounds: &[BoundPoint]) -> Vec<charts::BoundP999> {
    bounds
        .iter()
        .map(|b| charts::BoundP999 {
            load: b.load,
            p999_us: b.p999_ns as f64 / 1e3,
        })
        .collect()
}

/// Writes the sweep's `latency` and `batch` plots into `out`.
pub(crate) fn sweep_plots(
    out: &Path,
    service: &ServiceDist,
    loads: &[f64],
    runs: &[SystemRun],
    bounds: &[BoundPoint],
) -> Result<Vec<PathBuf>> {
    let systems: Vec<charts::Series> = runs.iter().map(charts::Series::of_run).collect();
    charts::save_sweep(
        out,
        &report::service_label(service),
        loads,
        &systems,
        &bound_p999(bounds),
    )
}

/// Writes the interval sweep's `intervals` and `intervals-batch` plots into `out`.
pub(crate) fn intervals_plots(
    out: &Path,
    service: &ServiceDist,
    loads: &[f64],
    runs: &[SystemRun],
    bounds: &[BoundPoint],
) -> Result<Vec<PathBuf>> {
    let series: Vec<charts::Series> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| charts::Series {
            name: charts::interval_name(r.interval_us.unwrap_or(0)),
            color: plot::PALETTE[i % plot::PALETTE.len()],
            ..charts::Series::of_run(r)
        })
        .collect();
    let [latency, batch] = charts::intervals(
        &report::service_label(service),
        charts::load_range(loads),
        &series,
        &bound_p999(bounds),
    );
    let mut files = plot::save(out, "intervals", &[latency])?;
    files.extend(plot::save(out, "intervals-batch", &[batch])?);
    Ok(files)
}

fn intervals(env: &Env, record: &mut serde_json::Value) -> Result<Written> {
    let p = &env.plan;
    let mut runs = Vec::new();
    for &iv in &p.intervals {
        procs::check_interrupt()?;
        runs.push(corral_sweep(env, iv, false)?);
    }
    let bounds = bounds(p, &p.loads)?;
    procs::check_interrupt()?;
    let mut text = format!(
        "Corral at several allocation intervals ({} service; spin and batch sharing one core)\n\n",
        report::service_label(&p.service)
    );
    text.push_str(&report::intervals_tables(&runs, &p.loads, &bounds));
    text.push_str(&warnings_text(&runs));
    text.push_str(&interference_text(&runs));
    let csv = report::intervals_csv(&runs, &bounds);
    let plots = intervals_plots(&env.out, &p.service, &p.loads, &runs, &bounds)?;
    record["systems"] = json!(runs);
    record["bounds"] = json!(bounds);
    Ok((text, csv, plots))
}

fn burst(env: &Env, record: &mut serde_json::Value) -> Result<Written> {
    let p = &env.plan;
    say(format!(
        "== Corral burst: {} for {} s, then {} for {} s, then {} for {} s; and {} s steady at {}",
        fmt_pct(p.burst_base),
        p.burst_secs,
        fmt_pct(p.burst_peak),
        p.burst_secs,
        fmt_pct(p.burst_base),
        p.burst_secs,
        p.steady_secs,
        fmt_pct(p.burst_peak)
    ));
    say(
        "   (Linux is not measured: corral-loadgen-linux cannot change rate mid-run or report windows)",
    );
    let mut c = Corral::start(env, p.interval_us, false)?;
    let alone = alone_watched(|| c.batch_alone())?;
    say(alone_line(
        System::Corral,
        &alone,
        env.plan.batch_cmd.is_some(),
    ));
    let (base, peak) = (p.rate(p.burst_base), p.rate(p.burst_peak));
    let burst_pt = watched(p, || {
        c.run_point(
            p.burst_base,
            &[
                (base, p.burst_secs),
                (peak, p.burst_secs),
                (base, p.burst_secs),
            ],
            "burst",
            Some(&alone),
        )
    })?;
    say(point_line(
        System::Corral,
        &burst_pt,
        env.plan.batch_cmd.is_some(),
    ));
    let steady = c.run_point(
        p.burst_peak,
        &[(peak, p.steady_secs)],
        "steady",
        Some(&alone),
    )?;
    say(point_line(
        System::Corral,
        &steady,
        env.plan.batch_cmd.is_some(),
    ));
    let run = SystemRun {
        system: System::Corral,
        interval_us: Some(p.interval_us),
        commands: c.commands(),
        spin_iterations_per_us: c.spin_calibration(),
        batch_alone: Some(alone),
        points: Vec::new(),
        daemon_stats: c.daemon_stats().ok(),
        daemon_warnings: c.daemon_warnings(),
        classes: c.classes(),
        shield: Some(c.shield_said()),
    };
    note_warnings(&run);
    drop(c);
    if burst_pt.windows.is_empty() {
        return Err(Error::msg(
            "iokerneld gen reported no latency windows for the burst run (see raw/)",
        ));
    }
    let b = Burst {
        system: System::Corral,
        base_load: p.burst_base,
        peak_load: p.burst_peak,
        base_rps: base,
        peak_rps: peak,
        phase_secs: p.burst_secs,
        window_ms: p.window_ms as f64,
        burst: burst_pt,
        steady,
    };
    let check = report::check_burst(&b);
    let mut text = format!(
        "Corral under a load step {} -> {} -> {} ({} service, {} ms windows)\n\
         windows around the step up and the step down; vs steady = window p99.9 over the \
         p99.9 of a steady run at {}\n\n",
        fmt_pct(p.burst_base),
        fmt_pct(p.burst_peak),
        fmt_pct(p.burst_base),
        report::service_label(&p.service),
        p.window_ms,
        fmt_pct(p.burst_peak)
    );
    text.push_str(&report::burst_table(&b, check.steady_p999_ns).render());
    text.push_str(&format!(
        "\nsteady p99.9 at {}: {}; worst window p99.9 in the high phase: {}\n",
        fmt_pct(p.burst_peak),
        check.steady_p999_ns.map_or_else(
            || "unbounded (lost requests)".into(),
            |n| format!("{} us", fmt_us(n))
        ),
        check
            .worst_peak_window_ns
            .map_or_else(|| "-".into(), |n| format!("{} us", fmt_us(n)))
    ));
    text.push_str(&format!(
        "Target: every high-phase window within 2x the steady p99.9: {} ({})\n",
        match check.verdict {
            report::Verdict::Met => "MET",
            report::Verdict::Missed => "MISSED",
            report::Verdict::NotMeasured => "not measured",
        },
        check.reason
    ));
    text.push_str(&warnings_text(std::slice::from_ref(&run)));
    let csv = report::burst_csv(&b);
    let plots = burst_plots(&env.out, &b)?;
    record["systems"] = json!([run]);
    record["burst"] = json!(b);
    record["burst_check"] = json!(check);
    Ok((text, csv, plots))
}

/// Writes the burst experiment's `burst` plot into `out`.
pub(crate) fn burst_plots(out: &Path, b: &Burst) -> Result<Vec<PathBuf>> {
    let steady = report::check_burst(b).steady_p999_ns;
    let panels = charts::burst(
        b.window_ms,
        3.0 * b.phase_secs,
        &charts::burst_windows(b),
        steady.map(|ns| ns as f64 / 1e3),
    );
    plot::save(out, "burst", &panels)
}
