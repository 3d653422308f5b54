//! The two systems under test, each a set of long-running processes on the application CPU
//! plus a load generator run once per load point.
//!
//! - Corral: `iokerneld --nic gen` on the iokernel CPU, `spin` and `batch` as Corral runtimes
//!   registered with it (no guaranteed cores) sharing the application CPU; each point is one
//!   `iokerneld gen` run, which makes iokerneld itself play the schedule onto its RX path.
//! - Linux: `spin` on a loopback UDP socket and `batch` threads at SCHED_IDLE, both pinned to the
//!   application CPU; each point is one `corral-loadgen-linux` run pinned to the other CPU.
//! - Dedicated: Corral's setup with `spin` holding the application CPU as a guaranteed core
//!   with a spinning kthread, and no batch job: the floor a core-wasting kernel-bypass server
//!   sets.
//!
//! Corral and Linux keep the batch job running across all points, and measure its throughput
//! over each point's window from its report stream.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral_loadgen::Summary;
use corral_loadgen::wire::Message;
use serde::Deserialize;

use crate::batch::{BatchReader, Clock};
use crate::cli::{BatchPreemption, DemoNic, Plan};
use crate::error::{Error, Result};
use crate::machine;
use crate::procs::{self, Proc, Spec};
use crate::report::fmt_pct;
use crate::results::{BatchAlone, Demotions, Point, System, Window};
use crate::shielding;
use crate::shielding::BaselineShield;

/// Sibling executables.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Bins {
    pub dir: PathBuf,
    pub iokerneld: PathBuf,
    pub spin: PathBuf,
    pub batch: PathBuf,
    pub loadgen_linux: PathBuf,
    /// The launcher that runs `--batch-cmd` as a Corral runtime.
    pub corral_run: PathBuf,
    /// The key-value server (key-value experiment).
    pub kv: PathBuf,
    /// memcached 1.6.18 (key-value experiment, Linux).
    pub memcached: PathBuf,
    /// The DNS server (DNS experiment).
    pub dns: PathBuf,
    /// The Linux DNS server's executable (DNS experiment, Linux).
    pub linux_dns: PathBuf,
}

impl Bins {
    /// The binaries in `dir`, whether there or not.
    fn in_dir(dir: &Path) -> Bins {
        Bins {
            dir: dir.to_owned(),
            iokerneld: dir.join("iokerneld"),
            spin: dir.join("spin"),
            batch: dir.join("batch"),
            loadgen_linux: dir.join("corral-loadgen-linux"),
            corral_run: dir.join("corral-run"),
            kv: dir.join("corral-kv"),
            memcached: PathBuf::from("memcached"),
            dns: dir.join("corral-dns"),
            linux_dns: PathBuf::from("gdnsd"),
        }
    }

    /// The batch job's binaries and the load generators `systems` need, before their servers.
    fn common_needs<'b>(
        &'b self,
        systems: &[System],
        batch_cmd: bool,
    ) -> Vec<(&'b PathBuf, &'static str)> {
        let mut need = Vec::new();
        if !batch_cmd {
            need.push((&self.batch, "corral-app-batch"));
        } else if systems.contains(&System::Corral) {
            need.push((&self.corral_run, "corral-run"));
        }
        if systems.contains(&System::Corral) || systems.contains(&System::Dedicated) {
            need.push((&self.iokerneld, "corral-iokerneld"));
        }
        if systems.contains(&System::Linux) {
            need.push((&self.loadgen_linux, "corral-loadgen"));
        }
        need
    }

    /// Finds the binaries in `dir`; the error names each missing one and how to build it.
    /// `batch_cmd`: the batch job is a command of the user's (`--batch-cmd`), not `batch`.
    pub fn locate(dir: &Path, systems: &[System], batch_cmd: bool) -> Result<Bins> {
        let bins = Bins::in_dir(dir);
        let mut need = vec![(&bins.spin, "corral-app-spin")];
        need.extend(bins.common_needs(systems, batch_cmd));
        check_present(&need)?;
        Ok(bins)
    }

    /// Finds the key-value experiment's binaries: corral-kv in `dir` (for Corral and the
    /// dedicated floor) and `memcached` (for Linux) where the plan says.
    pub fn locate_kv(
        dir: &Path,
        systems: &[System],
        batch_cmd: bool,
        memcached: &Path,
    ) -> Result<Bins> {
        let mut bins = Bins::in_dir(dir);
        bins.memcached = memcached.to_owned();
        let mut need = Vec::new();
        if systems.contains(&System::Corral) || systems.contains(&System::Dedicated) {
            need.push((&bins.kv, "corral-app-kv"));
        }
        need.extend(bins.common_needs(systems, batch_cmd));
        check_present(&need)?;
        if systems.contains(&System::Linux) && !bins.memcached.is_file() {
            return Err(Error::msg(format!(
                "missing {} (memcached 1.6.18, Debian's package: `bash scripts/setup.sh` or \
                 `apt-get install memcached`; or name it with --memcached)",
                bins.memcached.display()
            )));
        }
        Ok(bins)
    }

    /// Finds the DNS experiment's binaries: corral-dns in `dir` (for Corral and the dedicated
    /// floor) and the Linux server's executable on the `PATH` (for Linux).
    pub fn locate_dns(
        dir: &Path,
        systems: &[System],
        batch_cmd: bool,
        linux: corral_bench_dns::linux::LinuxDns,
    ) -> Result<Bins> {
        let mut bins = Bins::in_dir(dir);
        let mut need = Vec::new();
        if systems.contains(&System::Corral) || systems.contains(&System::Dedicated) {
            need.push((&bins.dns, "corral-app-dns"));
        }
        need.extend(bins.common_needs(systems, batch_cmd));
        check_present(&need)?;
        if systems.contains(&System::Linux) {
            bins.linux_dns = on_path(linux.program()).ok_or_else(|| {
                Error::msg(format!(
                    "missing {} ({linux}, Debian's package: `bash scripts/setup.sh` installs \
                     it) on the PATH or in /usr/sbin",
                    linux.program()
                ))
            })?;
        }
        Ok(bins)
    }
}

/// Where `program` is: the first directory of the `PATH`, then /usr/sbin and /sbin (servers
/// live there, and a user's `PATH` may leave them out), that holds it.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Fails naming each missing binary and the package that builds it.
fn check_present(need: &[(&PathBuf, &str)]) -> Result<()> {
    let missing: Vec<&(&PathBuf, &str)> = need.iter().filter(|(p, _)| !p.is_file()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::msg(format!(
        "missing {}; build with `cargo build --release -p {}` (or point --bin-dir at the \
         directory that has them)",
        missing
            .iter()
            .map(|(p, pkg)| format!("{} (package {pkg})", p.display()))
            .collect::<Vec<_>>()
            .join(", "),
        missing
            .iter()
            .map(|(_, pkg)| *pkg)
            .collect::<Vec<_>>()
            .join(" -p ")
    )))
}

/// Where a run writes, and what every system needs to know.
pub struct Env {
    pub plan: Plan,
    pub bins: Bins,
    pub out: PathBuf,
    pub logs: PathBuf,
    pub raw: PathBuf,
    pub socket: PathBuf,
    pub clock: Clock,
    /// The spin servers' burn rate, measured once on the application CPU and given to both
    /// systems' servers, so that a requested microsecond is the same work in each; NaN in the
    /// key-value experiment, which runs no spin server.
    pub spin_iterations_per_us: f64,
    /// `--nic xdp`'s veth pair and client namespace.
    pub veth: Option<crate::veth::Veth>,
}

/// Measures the spin servers' burn rate once, with `spin --calibrate-only` pinned to `cpu`.
pub fn calibrate_spin(spin: &std::path::Path, cpu: usize) -> Result<f64> {
    let out = std::process::Command::new(spin)
        .args(["--calibrate-only", "--cpu", &cpu.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            Error::msg(format!(
                "cannot run {} --calibrate-only: {e}",
                spin.display()
            ))
        })?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .strip_prefix("iterations_per_us=")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| {
            Error::msg(format!(
                "spin --calibrate-only printed {:?} ({}): expected iterations_per_us=RATE",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })
}

impl Env {
    pub(crate) fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }
}

/// Time a child gets to come up (calibrate, register, bind) before the runner gives up.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Batch runs far longer than any experiment; the runner stops it.
const BATCH_FOREVER_S: &str = "86400";

/// Extra time a generator gets beyond its schedule and grace period before it is declared hung.
pub(crate) fn gen_timeout(plan: &Plan, schedule_secs: f64) -> Duration {
    Duration::from_secs_f64(schedule_secs + plan.grace_ms as f64 / 1e3 + 30.0)
}

/// Reads "spin: 123.4 iterations per microsecond" from spin's log.
fn spin_calibration(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines().find_map(|l| {
        let rest = l.strip_prefix("spin: ")?;
        let (num, tail) = rest.split_once(' ')?;
        tail.starts_with("iterations per microsecond")
            .then(|| num.parse().ok())
            .flatten()
    })
}

/// Starts the batch job of a Corral system tagged `tag` as a runtime of the iokerneld at
/// `socket`: the plan's batch command under corral-run, or else the Monte Carlo job.
pub(crate) fn start_corral_batch(
    env: &Env,
    tag: &str,
    socket: &str,
) -> Result<(Proc, BatchReader)> {
    let name = format!("{tag}-batch");
    match &env.plan.batch_cmd {
        Some(command) => start_batch_command(env, &name, command, Some(socket)),
        None => start_batch(
            env,
            &name,
            &[
                "--runtime",
                "corral",
                "--iokerneld",
                socket,
                "--kthreads",
                "1",
                "--preemption",
                match env.plan.batch_preemption {
                    BatchPreemption::IdleClass => "idle-class",
                    BatchPreemption::Asked => "cooperative",
                },
            ],
        ),
    }
}

/// Starts the batch job with `extra` arguments, reporting as JSON lines every 100 ms, and the
/// reader that collects its reports.
pub(crate) fn start_batch(env: &Env, name: &str, extra: &[&str]) -> Result<(Proc, BatchReader)> {
    let mut batch = Proc::spawn(batch_spec(env, name, extra))?;
    let stdout = batch
        .take_stdout()
        .ok_or_else(|| Error::msg("batch: no stdout pipe"))?;
    Ok((batch, BatchReader::start(stdout, env.clock)))
}

/// Starts `--batch-cmd`: as a Corral runtime under iokerneld (`socket`), or, without one, at
/// SCHED_IDLE on the application CPU; the reader samples the CPU time it receives.
pub(crate) fn start_batch_command(
    env: &Env,
    name: &str,
    command: &[String],
    socket: Option<&str>,
) -> Result<(Proc, BatchReader)> {
    let (program, args, idle_on_cpu) = match socket {
        Some(socket) => {
            let mut args: Vec<String> = [
                "--iokerneld",
                socket,
                "--name",
                "batch",
                "--kthreads",
                "1",
                "--preemption",
                match env.plan.batch_preemption {
                    BatchPreemption::IdleClass => "idle-class",
                    BatchPreemption::Asked => "signal",
                },
                "--",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            args.extend_from_slice(command);
            (env.bins.corral_run.clone(), args, None)
        }
        None => (
            PathBuf::from(&command[0]),
            command[1..].to_vec(),
            Some(env.plan.app_cpu),
        ),
    };
    let mut spec = Spec::new("batch", &program, args, env.log(name));
    spec.discard_stdout = true;
    spec.idle_on_cpu = idle_on_cpu;
    spec.stop_group = true;
    let batch = Proc::spawn(spec)?;
    let reader = BatchReader::cpu_time(batch.pid(), BATCH_CPU_SAMPLE, env.clock);
    Ok((batch, reader))
}

/// How often a `--batch-cmd` job's CPU time is read (as often as `batch` reports).
const BATCH_CPU_SAMPLE: Duration = Duration::from_millis(100);

fn batch_spec(env: &Env, name: &str, extra: &[&str]) -> Spec {
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "--duration",
            BATCH_FOREVER_S,
            "--report-ms",
            "100",
            "--json",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut spec = Spec::new("batch", &env.bins.batch, args, env.log(name));
    spec.pipe_stdout = true;
    spec
}

/// Measures the batch job with the server idle: `settle` seconds to let it reach its pace,
/// then `secs` seconds measured.
pub(crate) fn measure_alone(
    env: &Env,
    reader: &BatchReader,
    mut alive: impl FnMut() -> Result<()>,
) -> Result<BatchAlone> {
    let settle = if env.plan.quick { 0.2 } else { 0.5 };
    let t0 = env.clock.now_s() + settle;
    let t1 = t0 + env.plan.alone_secs;
    while env.clock.now_s() < t1 {
        alive()?;
        procs::sleep(procs::POLL)?;
    }
    let units_per_s = reader.rate(t0, t1, Duration::from_secs(10), alive)?;
    Ok(BatchAlone {
        units_per_s,
        window_s: [t0, t1],
        foreign_cpus: None,
    })
}

/// Batch throughput during one point.
#[derive(Default)]
pub(crate) struct PointBatch {
    pub units_per_s: Option<f64>,
    pub fraction: Option<f64>,
    pub window_s: Option<[f64; 2]>,
}

/// Batch throughput over a point's measured span: from `warmup` after the generator started to
/// the end of its schedule.
pub(crate) fn point_batch(
    env: &Env,
    reader: &BatchReader,
    started: f64,
    schedule_secs: f64,
    alone: Option<&BatchAlone>,
    alive: impl FnMut() -> Result<()>,
) -> Result<PointBatch> {
    let t0 = started + env.plan.warmup_secs;
    let t1 = started + schedule_secs;
    if t1 <= t0 {
        return Ok(PointBatch::default());
    }
    let rate = reader.rate(t0, t1, Duration::from_secs(10), alive)?;
    Ok(PointBatch {
        units_per_s: Some(rate),
        fraction: alone
            .filter(|a| a.units_per_s > 0.0)
            .map(|a| rate / a.units_per_s),
        window_s: Some([t0, t1]),
    })
}

// ---------------------------------------------------------------------------------------------
// Corral

/// What `iokerneld gen` prints (the fields the runner uses; the rest is kept raw).
#[derive(Debug, Deserialize)]
pub struct GenResult {
    pub summary: Summary,
    #[serde(default)]
    pub windows: Vec<Window>,
    #[serde(default)]
    pub daemon: Option<GenDaemon>,
}

#[derive(Debug, Deserialize)]
pub struct GenDaemon {
    #[serde(default)]
    pub reallocations_per_s: Option<f64>,
    #[serde(default)]
    pub loop_stalls: u64,
    #[serde(default)]
    pub loop_stall_ns: u64,
}

pub struct Corral<'e> {
    env: &'e Env,
    pub interval_us: u64,
    // Stopped in this order on drop: the runtimes before the daemon they registered with.
    /// The batch job and its report reader; `None` for the dedicated floor.
    batch: Option<(Proc, BatchReader)>,
    spin: Proc,
    iokerneld: Proc,
    tag: String,
}

/// iokerneld's command line: its CPU, the application CPU to manage, the control socket, the
/// generator (or, with `--nic xdp`, the veth pair's end) as its NIC, the allocation interval, the cede grace period, the shield on or off,
/// and `--handover` and `--policy` only when the plan names them.
pub(crate) fn iokerneld_args(plan: &Plan, socket: &str, interval_us: u64) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--core".into(),
        plan.iokernel_cpu.to_string(),
        "--managed-cores".into(),
        plan.app_cpu.to_string(),
        "--socket".into(),
        socket.into(),
    ];
    match plan.nic {
        DemoNic::Gen => args.extend(["--nic".into(), "gen".into()]),
        DemoNic::Xdp => args.extend([
            "--nic".into(),
            "xdp".into(),
            "--interface".into(),
            crate::veth::HOST_LINK.into(),
        ]),
    }
    args.extend([
        "--interval-us".into(),
        interval_us.to_string(),
        // Info: the line saying what it shielded; the few others come at start and exit.
        "--log-level".into(),
        "info".into(),
        "--cede-grace-us".into(),
        plan.cede_grace_us.to_string(),
        "--shield".into(),
        if plan.shield { "on" } else { "off" }.into(),
    ]);
    if let Some(mode) = plan.handover {
        args.extend(["--handover".into(), mode.name().into()]);
    }
    for option in &plan.policy_options {
        args.extend(["--policy-option".into(), option.clone()]);
    }
    if let Some(policy) = &plan.policy {
        args.extend(["--policy".into(), policy.clone()]);
    }
    args
}

/// The demotion counters of an `iokerneld stats` dump: global, and by runtime name.
fn demotion_counters(stats: &serde_json::Value) -> Option<(u64, BTreeMap<String, u64>)> {
    let total = stats["global"]["demotions"].as_u64()?;
    let by_runtime = stats["runtimes"]
        .as_array()?
        .iter()
        .filter_map(|r| Some((r["name"].as_str()?.to_owned(), r["demotions"].as_u64()?)))
        .collect();
    Some((total, by_runtime))
}

/// Demotions between two `iokerneld stats` dumps; runtimes registered at both.
pub fn demotions_between(
    before: &serde_json::Value,
    after: &serde_json::Value,
) -> Option<Demotions> {
    let (t0, r0) = demotion_counters(before)?;
    let (t1, r1) = demotion_counters(after)?;
    Some(Demotions {
        total: t1.saturating_sub(t0),
        by_runtime: r1
            .into_iter()
            .filter_map(|(name, n1)| {
                let n0 = *r0.get(&name)?;
                Some((name, n1.saturating_sub(n0)))
            })
            .collect(),
    })
}

/// Starts iokerneld on the plan's CPUs with the generator as its NIC, and waits for its control
/// socket; `tag` names its log. A socket left by a daemon that died is removed; one a live
/// daemon listens on is an error.
pub(crate) fn start_iokerneld(env: &Env, interval_us: u64, tag: &str) -> Result<Proc> {
    let socket = env.socket.display().to_string();
    if env.socket.exists() {
        if daemon_stats(&env.bins.iokerneld, &env.socket).is_ok() {
            return Err(Error::msg(format!(
                "an iokerneld is already listening on {}; stop it or pick another --socket",
                env.socket.display()
            )));
        }
        // Left by a daemon that died without cleaning up.
        std::fs::remove_file(&env.socket).map_err(|e| {
            Error::msg(format!(
                "cannot remove the stale socket {}: {e}",
                env.socket.display()
            ))
        })?;
    }
    let mut spec = Spec::new(
        "iokerneld",
        &env.bins.iokerneld,
        iokerneld_args(&env.plan, &socket, interval_us),
        env.log(&format!("{tag}-iokerneld")),
    );
    spec.stop_signal = libc::SIGTERM;
    let mut iokerneld = Proc::spawn(spec)?;
    let end = Instant::now() + START_TIMEOUT;
    while !env.socket.exists() {
        procs::check_interrupt()?;
        iokerneld.check_running()?;
        if Instant::now() > end {
            return Err(Error::msg(format!(
                "iokerneld did not create its socket {} within {} s: {}",
                socket,
                START_TIMEOUT.as_secs(),
                iokerneld.log_tail()
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(iokerneld)
}

impl<'e> Corral<'e> {
    /// Starts iokerneld, then spin (and waits until it registered), then batch (and waits for
    /// its first report), then checks that spin answers a short generated load. `dedicated`:
    /// spin holds the application CPU as a guaranteed core with a spinning kthread, and no
    /// batch job runs.
    pub fn start(env: &'e Env, interval_us: u64, dedicated: bool) -> Result<Corral<'e>> {
        let plan = &env.plan;
        let tag = if dedicated {
            format!("dedicated-{interval_us}us")
        } else {
            format!("corral-{interval_us}us")
        };
        let socket = env.socket.display().to_string();
        let mut iokerneld = start_iokerneld(env, interval_us, &tag)?;

        let mut spin = Proc::spawn(Spec::new(
            "spin",
            &env.bins.spin,
            vec![
                "--runtime".into(),
                "corral".into(),
                "--iokerneld".into(),
                socket.clone(),
                "--addr".into(),
                plan.corral_addr.to_string(),
                "--kthreads".into(),
                "1".into(),
                // Below its guarantee it preempts the batch job at once, not after a quantum.
                "--guaranteed".into(),
                "1".into(),
                "--iterations-per-us".into(),
                env.spin_iterations_per_us.to_string(),
            ]
            .into_iter()
            .chain(
                plan.spin_before_park_us
                    .map(|us| ["--spin-before-park-us".into(), us.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .chain(
                dedicated
                    .then(|| ["--spinning".into(), "1".into()])
                    .into_iter()
                    .flatten(),
            )
            .collect(),
            env.log(&format!("{tag}-spin")),
        ))?;
        wait_registered(env, "spin", &mut [&mut iokerneld, &mut spin])?;

        let batch = if dedicated {
            None
        } else {
            Some(start_corral_batch(env, &tag, &socket)?)
        };
        let mut me = Corral {
            env,
            interval_us,
            batch,
            spin,
            iokerneld,
            tag,
        };
        if let Some((batch, reader)) = me.batch.as_mut() {
            let (spin, iokerneld) = (&mut me.spin, &mut me.iokerneld);
            reader.wait_working(START_TIMEOUT, || {
                batch.check_running()?;
                spin.check_running()?;
                iokerneld.check_running()
            })?;
        }
        me.probe()?;
        Ok(me)
    }

    pub fn alive(&mut self) -> Result<()> {
        self.iokerneld.check_running()?;
        self.spin.check_running()?;
        match self.batch.as_mut() {
            Some((batch, _)) => batch.check_running(),
            None => Ok(()),
        }
    }

    pub fn commands(&self) -> BTreeMap<String, Vec<String>> {
        [
            ("iokerneld", Some(&self.iokerneld)),
            ("spin", Some(&self.spin)),
            ("batch", self.batch.as_ref().map(|b| &b.0)),
        ]
        .into_iter()
        .filter_map(|(n, p)| Some((n.to_owned(), p?.spec.command_line())))
        .collect()
    }

    pub fn spin_calibration(&self) -> Option<f64> {
        spin_calibration(&self.spin.spec.log)
    }

    /// Each process's threads' classes and CPUs now.
    pub fn classes(&self) -> Vec<String> {
        let mut procs = vec![("iokerneld", &self.iokerneld), ("spin", &self.spin)];
        if let Some((batch, _)) = &self.batch {
            procs.push(("batch", batch));
        }
        procs.into_iter().map(|(n, p)| observed(n, p)).collect()
    }

    /// What iokerneld said it shielded.
    pub fn shield_said(&self) -> String {
        shielding::iokerneld_said(&self.env.plan, &self.iokerneld.spec.log)
    }

    /// Checks that spin answers: a short, light generated load must get answers.
    fn probe(&mut self) -> Result<()> {
        let end = Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < end {
            let probed = match self.env.plan.nic {
                DemoNic::Gen => {
                    let args = self.gen_args(&[(1000.0, 0.2)], "probe");
                    self.run_gen(args.0, &args.1, 0.2).map(|r| r.summary)
                }
                DemoNic::Xdp => self.run_loadgen(1000.0, 0.2, "probe").map(|r| r.1.summary),
            };
            match probed {
                Ok(r) if r.matched > 0 => return Ok(()),
                Ok(r) => last = format!("{} requests sent, none answered", r.sent),
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => last = e.to_string(),
            }
            procs::sleep(Duration::from_millis(200))?;
        }
        Err(Error::msg(format!(
            "spin (Corral) does not answer generated requests: {last}; spin's log: {}",
            self.spin.log_tail()
        )))
    }

    /// `iokerneld gen`'s arguments for a run of `phases` (requests per second, seconds): one
    /// phase as --rate/--duration, several as --phase RPS@SECONDS each.
    fn gen_args(&self, phases: &[(f64, f64)], name: &str) -> (Vec<String>, PathBuf) {
        let plan = &self.env.plan;
        let json = self.env.raw.join(format!("{}-{name}.json", self.tag));
        let mut args: Vec<String> = vec![
            "gen".into(),
            "--socket".into(),
            self.env.socket.display().to_string(),
            "--target".into(),
            plan.corral_addr.to_string(),
        ];
        match phases {
            [(rate, secs)] => args.extend([
                "--rate".into(),
                format!("{rate}"),
                "--duration".into(),
                format!("{secs}"),
            ]),
            _ => {
                for (rps, secs) in phases {
                    args.push("--phase".into());
                    args.push(format!("{rps}@{secs}"));
                }
            }
        }
        args.extend(schedule_args(plan));
        args.extend([
            "--window-ms".into(),
            plan.window_ms.to_string(),
            "--json".into(),
            json.display().to_string(),
        ]);
        (args, json)
    }

    /// Runs one `iokerneld gen` to completion and parses what it wrote.
    fn run_gen(&mut self, args: Vec<String>, json: &Path, schedule_secs: f64) -> Result<GenResult> {
        let raw = self.run_gen_raw(args, json, schedule_secs)?;
        serde_json::from_value(raw).map_err(|e| {
            Error::msg(format!(
                "cannot read iokerneld gen's result {}: {e}",
                json.display()
            ))
        })
    }

    fn run_gen_raw(
        &mut self,
        args: Vec<String>,
        json: &Path,
        schedule_secs: f64,
    ) -> Result<serde_json::Value> {
        let _ = std::fs::remove_file(json);
        let name = json
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let spec = Spec::new(
            "iokerneld gen",
            &self.env.bins.iokerneld,
            args,
            self.env.logs.join(format!("{name}.log")),
        );
        let mut gen_proc = Proc::spawn(spec)?;
        let timeout = gen_timeout(&self.env.plan, schedule_secs);
        let status = gen_proc.wait_timeout(timeout, || self.alive())?;
        if !status.success() {
            return Err(Error::msg(format!(
                "iokerneld gen failed ({status}): {}",
                gen_proc.log_tail()
            )));
        }
        read_json(json)
    }

    /// One load point: `phases` of (requests per second, seconds) played back to back; a
    /// sweep point has one. `load` and the recorded rate are the first phase's.
    pub fn run_point(
        &mut self,
        load: f64,
        phases: &[(f64, f64)],
        name: &str,
        alone: Option<&BatchAlone>,
    ) -> Result<Point> {
        let rate = phases.first().map_or(0.0, |p| p.0);
        let total_secs: f64 = phases.iter().map(|p| p.1).sum();
        if self.env.plan.nic == DemoNic::Xdp {
            return self.run_point_over_veth(load, rate, total_secs, name, alone);
        }
        let (args, json) = self.gen_args(phases, name);
        let command: Vec<String> = std::iter::once(self.env.bins.iokerneld.display().to_string())
            .chain(args.iter().cloned())
            .collect();
        let stats_before = self.daemon_stats().ok();
        let started = self.env.clock.now_s();
        let mut raw = self.run_gen_raw(args, &json, total_secs)?;
        let demotions = stats_before
            .zip(self.daemon_stats().ok())
            .and_then(|(a, b)| demotions_between(&a, &b));
        let parsed: GenResult = serde_json::from_value(raw.clone()).map_err(|e| {
            Error::msg(format!(
                "cannot read iokerneld gen's result {}: {e}",
                json.display()
            ))
        })?;
        // The windows are kept once, in the point's `windows`; the file in raw/ has them too.
        if let Some(obj) = raw.as_object_mut() {
            obj.remove("windows");
        }
        let batch = self.point_batch(started, total_secs, alone)?;
        Ok(Point {
            load,
            rate_rps: rate,
            command,
            summary: parsed.summary,
            batch_units_per_s: batch.units_per_s,
            batch_fraction: batch.fraction,
            batch_window_s: batch.window_s,
            reallocations_per_s: parsed.daemon.as_ref().and_then(|d| d.reallocations_per_s),
            iokerneld_stalls: parsed
                .daemon
                .as_ref()
                .map(|d| [d.loop_stalls, d.loop_stall_ns]),
            windows: parsed.windows,
            interference: Vec::new(),
            foreign_cpus: None,
            steal: None,
            demotions,
            raw,
        })
    }

    /// The batch job's share over a point that started at `started` and lasted `secs`; none
    /// for the dedicated floor.
    fn point_batch(
        &mut self,
        started: f64,
        secs: f64,
        alone: Option<&BatchAlone>,
    ) -> Result<PointBatch> {
        let Some((batch, reader)) = self.batch.as_mut() else {
            return Ok(PointBatch::default());
        };
        let (env, spin, iokerneld) = (self.env, &mut self.spin, &mut self.iokerneld);
        point_batch(env, reader, started, secs, alone, || {
            iokerneld.check_running()?;
            spin.check_running()?;
            batch.check_running()
        })
    }

    /// Runs corral-loadgen-linux in the client namespace against spin through the veth pair
    /// and iokerneld's XDP backend, at `rate` for `secs`: its command line and result.
    fn run_loadgen(
        &mut self,
        rate: f64,
        secs: f64,
        name: &str,
    ) -> Result<(Vec<String>, LinuxGenResult, serde_json::Value)> {
        let env = self.env;
        let json = env.raw.join(format!("{}-{name}.json", self.tag));
        let _ = std::fs::remove_file(&json);
        let args = loadgen_args(&env.plan, env.plan.corral_addr, rate, secs, &json);
        let spec = loadgen_spec_with(env, None, args, &format!("{}-{name}", self.tag));
        let command = spec.command_line();
        let mut lg = Proc::spawn(spec)?;
        let status = lg.wait_timeout(gen_timeout(&env.plan, secs), || self.alive())?;
        let (parsed, raw) = loadgen_result(&lg, status, &json)?;
        Ok((command, parsed, raw))
    }

    /// A sweep point with the load from the client namespace (`--nic xdp`).
    fn run_point_over_veth(
        &mut self,
        load: f64,
        rate: f64,
        secs: f64,
        name: &str,
        alone: Option<&BatchAlone>,
    ) -> Result<Point> {
        let stats_before = self.daemon_stats().ok();
        let started = self.env.clock.now_s();
        let (command, parsed, raw) = self.run_loadgen(rate, secs, name)?;
        let demotions = stats_before
            .zip(self.daemon_stats().ok())
            .and_then(|(a, b)| demotions_between(&a, &b));
        let batch = self.point_batch(started, secs, alone)?;
        Ok(loadgen_point(
            load, rate, command, parsed, batch, demotions, raw,
        ))
    }

    /// The batch job's throughput with the server idle; an error for the dedicated floor,
    /// which has no batch job.
    pub fn batch_alone(&mut self) -> Result<BatchAlone> {
        let Some((batch, reader)) = self.batch.as_mut() else {
            return Err(Error::msg("the dedicated floor runs no batch job"));
        };
        let (env, spin, iokerneld) = (self.env, &mut self.spin, &mut self.iokerneld);
        measure_alone(env, reader, || {
            iokerneld.check_running()?;
            spin.check_running()?;
            batch.check_running()
        })
    }

    /// The warning and error lines iokerneld has logged so far.
    pub fn daemon_warnings(&self) -> Vec<String> {
        std::fs::read_to_string(&self.iokerneld.spec.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .map(str::to_owned)
            .collect()
    }

    /// iokerneld's statistics now.
    pub fn daemon_stats(&self) -> Result<serde_json::Value> {
        daemon_stats(&self.env.bins.iokerneld, &self.env.socket)
    }
}

/// `name: ` and the classes and CPUs of a process's threads now.
pub(crate) fn observed(name: &str, p: &Proc) -> String {
    format!(
        "{name}: {}",
        machine::thread_classes(p.pid()).unwrap_or_else(|| "exited".into())
    )
}

pub(crate) fn daemon_stats(iokerneld: &Path, socket: &Path) -> Result<serde_json::Value> {
    let text = procs::run_capture(
        iokerneld,
        &["stats", "--socket", &socket.display().to_string()],
        Duration::from_secs(10),
    )?;
    serde_json::from_str(&text).map_err(|e| {
        Error::msg(format!(
            "iokerneld stats printed invalid JSON ({e}): {text}"
        ))
    })
}

/// Waits until iokerneld lists a runtime called `name`.
pub(crate) fn wait_registered(env: &Env, name: &str, procs_: &mut [&mut Proc]) -> Result<()> {
    let end = Instant::now() + START_TIMEOUT;
    loop {
        procs::check_interrupt()?;
        for p in procs_.iter_mut() {
            p.check_running()?;
        }
        if let Ok(stats) = daemon_stats(&env.bins.iokerneld, &env.socket)
            && stats["runtimes"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["name"] == name))
        {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(Error::msg(format!(
                "{name} did not register with iokerneld within {} s: {}",
                START_TIMEOUT.as_secs(),
                procs_
                    .iter()
                    .map(|p| format!("{}: {}", p.spec.name, p.log_tail()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        procs::sleep(Duration::from_millis(100))?;
    }
}

pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::msg(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::msg(format!("{} is not valid JSON: {e}", path.display())))
}

// ---------------------------------------------------------------------------------------------
// Linux

/// What `corral-loadgen-linux --json` writes (the summary; the rest is kept raw).
#[derive(Debug, Deserialize)]
struct LinuxGenResult {
    summary: Summary,
}

pub struct Linux<'e> {
    env: &'e Env,
    batch: Proc,
    reader: BatchReader,
    spin: Proc,
    /// Undone after the processes have stopped (fields drop in order).
    shield: BaselineShield,
    /// The class and CPU each point's load generator starts with.
    loadgen_class: String,
}

impl<'e> Linux<'e> {
    /// Shields the load generator's CPU, starts spin (and waits until it answers), then batch
    /// (and waits for its first report).
    pub fn start(env: &'e Env) -> Result<Linux<'e>> {
        let plan = &env.plan;
        let cpu = plan.app_cpu.to_string();
        let shield = BaselineShield::apply(plan, "the Linux baseline");
        // The port must be free, or spin fails to bind; say which port and why.
        if let Err(e) = UdpSocket::bind(plan.linux_addr) {
            return Err(Error::msg(format!(
                "cannot use {} for the Linux spin server: {e} (another server there? pick \
                 another with --linux-addr)",
                plan.linux_addr
            )));
        }
        let mut spin_spec = Spec::new(
            "spin",
            &env.bins.spin,
            vec![
                "--runtime".into(),
                "linux".into(),
                "--addr".into(),
                plan.linux_addr.to_string(),
                "--cpu".into(),
                cpu.clone(),
                "--iterations-per-us".into(),
                env.spin_iterations_per_us.to_string(),
            ],
            env.log("linux-spin"),
        );
        spin_spec.pin_to_cpu = Some(plan.app_cpu);
        spin_spec.fifo_priority = shield.server_priority();
        let mut spin = Proc::spawn(spin_spec)?;
        probe_udp(plan.linux_addr.into(), &mut spin)?;
        let (batch, reader) = match &plan.batch_cmd {
            Some(command) => start_batch_command(env, "linux-batch", command, None)?,
            None => start_batch(env, "linux-batch", &["--runtime", "linux", "--cpu", &cpu])?,
        };
        let loadgen_class = loadgen_spec(env, &shield, Vec::new(), "class").class();
        let mut me = Linux {
            env,
            batch,
            reader,
            spin,
            shield,
            loadgen_class,
        };
        me.reader.wait_working(START_TIMEOUT, || {
            me.batch.check_running()?;
            me.spin.check_running()
        })?;
        Ok(me)
    }

    pub fn commands(&self) -> BTreeMap<String, Vec<String>> {
        [("spin", &self.spin), ("batch", &self.batch)]
            .into_iter()
            .map(|(n, p)| (n.to_owned(), p.spec.command_line()))
            .collect()
    }

    pub fn spin_calibration(&self) -> Option<f64> {
        spin_calibration(&self.spin.spec.log)
    }

    /// The load generator's class as started, and spin's and batch's threads' now.
    pub fn classes(&self) -> Vec<String> {
        vec![
            format!("corral-loadgen-linux: {}", self.loadgen_class),
            observed("spin", &self.spin),
            observed("batch", &self.batch),
        ]
    }

    pub fn shield_said(&self) -> String {
        self.shield.said.clone()
    }

    /// Stops spin and batch, then undoes the shield, saying what undoing did.
    pub fn finish(mut self) -> Option<String> {
        self.spin.stop();
        self.batch.stop();
        self.shield.undo()
    }

    pub fn batch_alone(&mut self) -> Result<BatchAlone> {
        let Linux {
            env,
            reader,
            batch,
            spin,
            ..
        } = self;
        measure_alone(env, reader, || {
            spin.check_running()?;
            batch.check_running()
        })
    }

    pub fn run_point(&mut self, load: f64, rate: f64, alone: Option<&BatchAlone>) -> Result<Point> {
        let plan = &self.env.plan;
        let name = format!("linux-load{}", fmt_pct(load).trim_end_matches('%'));
        let json = self.env.raw.join(format!("{name}.json"));
        let _ = std::fs::remove_file(&json);
        let args = loadgen_args(plan, plan.linux_addr, rate, plan.point_secs, &json);
        let spec = loadgen_spec(self.env, &self.shield, args, &name);
        let command = spec.command_line();
        let started = self.env.clock.now_s();
        let mut lg = Proc::spawn(spec)?;
        let Linux {
            env,
            reader,
            batch,
            spin,
            ..
        } = self;
        let mut alive = || {
            spin.check_running()?;
            batch.check_running()
        };
        let status = lg.wait_timeout(gen_timeout(&env.plan, env.plan.point_secs), &mut alive)?;
        let (parsed, raw) = loadgen_result(&lg, status, &json)?;
        let batch = point_batch(env, reader, started, env.plan.point_secs, alone, alive)?;
        Ok(loadgen_point(load, rate, command, parsed, batch, None, raw))
    }
}

/// What a point's corral-loadgen-linux wrote, once it exited with `status`.
fn loadgen_result(
    lg: &Proc,
    status: std::process::ExitStatus,
    json: &Path,
) -> Result<(LinuxGenResult, serde_json::Value)> {
    if !status.success() {
        return Err(Error::msg(format!(
            "corral-loadgen-linux failed ({status}): {}",
            lg.log_tail()
        )));
    }
    let raw = read_json(json)?;
    let parsed = serde_json::from_value(raw.clone()).map_err(|e| {
        Error::msg(format!(
            "cannot read corral-loadgen-linux's result {}: {e}",
            json.display()
        ))
    })?;
    Ok((parsed, raw))
}

/// A sweep point measured by corral-loadgen-linux, which reports no windows and knows nothing
/// of iokerneld.
fn loadgen_point(
    load: f64,
    rate: f64,
    command: Vec<String>,
    parsed: LinuxGenResult,
    batch: PointBatch,
    demotions: Option<Demotions>,
    raw: serde_json::Value,
) -> Point {
    Point {
        load,
        rate_rps: rate,
        command,
        summary: parsed.summary,
        batch_units_per_s: batch.units_per_s,
        batch_fraction: batch.fraction,
        batch_window_s: batch.window_s,
        reallocations_per_s: None,
        iokerneld_stalls: None,
        windows: Vec::new(),
        interference: Vec::new(),
        foreign_cpus: None,
        steal: None,
        demotions,
        raw,
    }
}

/// corral-loadgen-linux's arguments for a sweep point of `rate` requests per second over
/// `secs` at `server`, its result written to `json`.
fn loadgen_args(
    plan: &Plan,
    server: std::net::SocketAddrV4,
    rate: f64,
    secs: f64,
    json: &Path,
) -> Vec<String> {
    let cpu = match plan.nic {
        DemoNic::Gen => plan.iokernel_cpu,
        DemoNic::Xdp => plan.client_cpu,
    };
    let mut args: Vec<String> = vec![
        "--server".into(),
        server.to_string(),
        "--rate".into(),
        format!("{rate}"),
        "--duration".into(),
        format!("{secs}"),
    ];
    args.extend(schedule_args(plan));
    args.extend([
        "--cpu".into(),
        cpu.to_string(),
        "--json".into(),
        json.display().to_string(),
    ]);
    args
}

/// The schedule both generators play, as their shared flags: service times, Poisson arrivals,
/// clients, seed, payload and the grace period for late answers.
fn schedule_args(plan: &Plan) -> [String; 12] {
    [
        "--service".into(),
        plan.service.to_string(),
        "--arrivals".into(),
        "poisson".into(),
        "--clients".into(),
        plan.clients.to_string(),
        "--seed".into(),
        plan.seed.to_string(),
        "--payload".into(),
        plan.payload.to_string(),
        "--grace-ms".into(),
        plan.grace_ms.to_string(),
    ]
}

/// A point's `corral-loadgen-linux` with `args`, logging to `name`.log: pinned to the CPU
/// iokerneld has in the Corral run, at SCHED_FIFO `LOOP_PRIORITY` when that CPU is shielded, as
/// iokerneld's loop is.
pub(crate) fn loadgen_spec(
    env: &Env,
    shield: &BaselineShield,
    args: Vec<String>,
    name: &str,
) -> Spec {
    loadgen_spec_with(env, shield.loop_priority(), args, name)
}

/// [`loadgen_spec`] at `fifo` priority (none: the fair class), inside the client namespace
/// with `--nic xdp` (pinned to `--client-cpu` then).
fn loadgen_spec_with(env: &Env, fifo: Option<u32>, args: Vec<String>, name: &str) -> Spec {
    let (program, args, cpu) = match &env.veth {
        Some(veth) => {
            let (program, args) = veth.wrap(&env.bins.loadgen_linux.display().to_string(), args);
            (PathBuf::from(program), args, env.plan.client_cpu)
        }
        None => (env.bins.loadgen_linux.clone(), args, env.plan.iokernel_cpu),
    };
    let mut spec = Spec::new(
        "corral-loadgen-linux",
        &program,
        args,
        env.logs.join(format!("{name}.log")),
    );
    spec.pin_to_cpu = Some(cpu);
    spec.fifo_priority = fifo;
    spec
}

/// Sends a tiny request to a Linux UDP spin server until it echoes it, or fails naming why.
fn probe_udp(addr: SocketAddr, spin: &mut Proc) -> Result<()> {
    let sock = UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| Error::msg(format!("cannot open a UDP socket to probe spin: {e}")))?;
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .map_err(|e| Error::msg(format!("probe socket: {e}")))?;
    let mut req = [0u8; corral_loadgen::wire::HEADER_LEN];
    let probe = Message {
        id: 1,
        scheduled_send_ns: 0,
        service_ns: 1_000,
        client: 0,
        sent_ns: 0,
    };
    probe
        .encode(&mut req)
        .map_err(|e| Error::msg(format!("probe request: {e}")))?;
    let end = Instant::now() + START_TIMEOUT;
    let mut buf = [0u8; 256];
    while Instant::now() < end {
        procs::check_interrupt()?;
        spin.check_running()?;
        let _ = sock.send_to(&req, addr);
        // The answer is the request with the server's stamps filled in.
        if let Ok((n, _)) = sock.recv_from(&mut buf)
            && Message::decode(&buf[..n]) == Ok(probe)
        {
            return Ok(());
        }
    }
    Err(Error::msg(format!(
        "spin (Linux) at {addr} did not answer within {} s: {}",
        START_TIMEOUT.as_secs(),
        spin.log_tail()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_read_from_spins_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("spin.log");
        std::fs::write(
            &log,
            "spin: 312.5 iterations per microsecond; serving 127.0.0.1:5000 on Linux\n",
        )
        .unwrap();
        assert_eq!(spin_calibration(&log), Some(312.5));
        std::fs::write(&log, "something else\n").unwrap();
        assert_eq!(spin_calibration(&log), None);
    }

    #[test]
    fn handover_reaches_iokerneld_only_when_asked_for() {
        use clap::Parser;
        let plan = |extra: &[&str]| {
            let mut v = vec!["corral-demo"];
            v.extend_from_slice(extra);
            crate::cli::Args::try_parse_from(v).unwrap().plan().unwrap()
        };
        let args = iokerneld_args(&plan(&[]), "/run/x.sock", 5);
        assert!(!args.iter().any(|a| a == "--handover"), "{args:?}");
        assert!(args.windows(2).any(|w| w == ["--interval-us", "5"]));
        assert!(args.windows(2).any(|w| w == ["--cede-grace-us", "20"]));
        assert!(args.windows(2).any(|w| w == ["--shield", "on"]));
        let args = iokerneld_args(&plan(&["--no-shield"]), "/run/x.sock", 5);
        assert!(args.windows(2).any(|w| w == ["--shield", "off"]));
        assert!(!args.iter().any(|a| a == "--policy"), "{args:?}");
        let args = iokerneld_args(
            &plan(&["--policy", "static", "--systems", "dedicated"]),
            "/run/x.sock",
            5,
        );
        assert!(args.windows(2).any(|w| w == ["--policy", "static"]));
        let args = iokerneld_args(
            &plan(&["--policy", "arachne", "--policy-option", "interval_us=5000"]),
            "/run/x.sock",
            5,
        );
        assert!(
            args.windows(2)
                .any(|w| w == ["--policy-option", "interval_us=5000"]),
            "{args:?}"
        );
        for mode in ["local", "remote"] {
            let args = iokerneld_args(&plan(&["--handover", mode]), "/run/x.sock", 5);
            assert!(
                args.windows(2).any(|w| w == ["--handover", mode]),
                "{args:?}"
            );
        }
    }

    #[test]
    fn demotions_are_the_counters_difference() {
        let before = serde_json::json!({
            "global": {"demotions": 3},
            "runtimes": [{"name": "spin", "demotions": 1}, {"name": "batch", "demotions": 2}],
        });
        let after = serde_json::json!({
            "global": {"demotions": 7},
            "runtimes": [
                {"name": "spin", "demotions": 1},
                {"name": "batch", "demotions": 5},
                {"name": "late", "demotions": 1},
            ],
        });
        let d = demotions_between(&before, &after).unwrap();
        assert_eq!(d.total, 4);
        assert_eq!(
            d.by_runtime.into_iter().collect::<Vec<_>>(),
            vec![("batch".to_owned(), 3), ("spin".to_owned(), 0)]
        );
        assert_eq!(
            demotions_between(&before, &serde_json::json!({"global": {}})),
            None
        );
    }

    #[test]
    fn missing_binaries_are_named_with_their_package() {
        let dir = tempfile::tempdir().unwrap();
        let err = Bins::locate(dir.path(), &[System::Corral, System::Linux], false)
            .unwrap_err()
            .to_string();
        for want in [
            "iokerneld (package corral-iokerneld)",
            "spin (package corral-app-spin)",
            "batch (package corral-app-batch)",
            "corral-loadgen-linux (package corral-loadgen)",
            "cargo build --release -p",
        ] {
            assert!(err.contains(want), "{want}: {err}");
        }
    }
}
