//! The server co-location experiments: a server and the batch job sharing one core, driven by
//! the same workload at rising offered rates. Two servers, one procedure ([`Service`]): the
//! key-value experiment (described below) and the DNS experiment, where corral-dns stands for
//! corral-kv, a Linux DNS server from Debian (gdnsd by default) for memcached, and both
//! generators ask the same query file over UDP (`--protocol dns`), checking every answer's ID
//! and question.
//!
//! - Corral: `iokerneld --nic gen` on the iokernel CPU; `corral-kv` (one kthread, one
//!   guaranteed core, so that its wake-ups preempt the batch job at once) and the batch job as
//!   Corral runtimes sharing the application CPU; each point is one `iokerneld gen --protocol
//!   memcache-tcp` run, whose connections reach corral-kv through iokerneld's switch.
//! - Linux: Debian's memcached 1.6.18 with one worker thread pinned to the application CPU and
//!   the batch job at SCHED_IDLE on it; each point is one `corral-loadgen-linux --protocol
//!   memcache-tcp` run pinned to the iokernel CPU, over loopback.
//! - Dedicated: corral-kv alone with a spinning kthread on a guaranteed core: the floor a
//!   core-wasting kernel-bypass server sets.
//!
//! Each system first plays a light unloaded point, then the ladder of rates until two points in a
//! row show it saturated (short of the offered rate, losing requests, or failing). One p99
//! objective holds for every system, as a service's objective does not depend on who serves it:
//! `--slo-factor` times memcached's unloaded median, so memcached runs first. The objective
//! decides each system's capacity, not where its ladder stops, since a host stall can put one
//! point's p99 over the objective well below saturation. Both generators check every reply and
//! play the same key space, sizes, get ratio, connection count and seed.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::SocketAddrV4;
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use corral_loadgen::Summary;
use serde_json::{Value, json};

use crate::batch::BatchReader;
use crate::charts;
use crate::cli::{Experiment, Plan};
use crate::error::{Error, Result};
use crate::experiments;
use crate::kvreport::{self, fmt_rate};
use crate::plot;
use crate::procs::{self, Proc, Spec};
use crate::report::fmt_us;
use crate::results::{BatchAlone, Demotions, KvPoint, KvSystemRun, System};
use crate::shielding::{self, BaselineShield};
use crate::systems::{
    Env, PointBatch, START_TIMEOUT, daemon_stats, demotions_between, gen_timeout, loadgen_spec,
    measure_alone, observed, point_batch, read_json, start_batch, start_batch_command,
    start_corral_batch, start_iokerneld, wait_registered,
};

/// Which server the experiment measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// corral-kv against memcached, over TCP.
    Kv,
    /// corral-dns against a Linux DNS server, over UDP.
    Dns,
}

impl Service {
    pub fn of(plan: &Plan) -> Service {
        match plan.experiment {
            Experiment::Dns => Service::Dns,
            _ => Service::Kv,
        }
    }

    /// Corral's server, also the name it registers with iokerneld under.
    pub fn corral_server(self) -> &'static str {
        match self {
            Service::Kv => "corral-kv",
            Service::Dns => "corral-dns",
        }
    }

    /// The Linux server it is compared with.
    pub fn linux_server(self, plan: &Plan) -> &'static str {
        match self {
            Service::Kv => "memcached",
            Service::Dns => plan.dns.linux_server.name(),
        }
    }

    /// The prefix of the experiment's log and result files.
    fn tag(self) -> &'static str {
        match self {
            Service::Kv => "kv",
            Service::Dns => "dns",
        }
    }

    fn corral_addr(self, plan: &Plan) -> SocketAddrV4 {
        match self {
            Service::Kv => plan.kv.corral_addr,
            Service::Dns => plan.dns.corral_addr,
        }
    }

    fn throughput_target(self) -> f64 {
        match self {
            Service::Kv => kvreport::KV_THROUGHPUT_TARGET_RATIO,
            Service::Dns => kvreport::DNS_THROUGHPUT_TARGET_RATIO,
        }
    }

    /// The title of the latency plot.
    pub fn latency_title(self) -> &'static str {
        match self {
            Service::Kv => "memcached over TCP: latency",
            Service::Dns => "DNS over UDP: latency",
        }
    }

    /// Where a generator's result keeps its reply checks.
    fn checks_in(self, raw: &Value, linux: bool) -> Value {
        match (self, linux) {
            (Service::Kv, false) => raw["kv"]["checks"].clone(),
            (Service::Kv, true) => raw["checks"].clone(),
            (Service::Dns, _) => raw["dns"].clone(),
        }
    }

    /// The failures among a generator's reply checks.
    fn errors_in(self, checks: &Value) -> u64 {
        match self {
            Service::Kv => errors_in(checks),
            Service::Dns => dns_errors_in(checks),
        }
    }

    /// The generators' flags that say what to ask, the same for both.
    fn workload_args(self, env: &Env) -> Vec<String> {
        match self {
            Service::Kv => workload_args(env),
            Service::Dns => vec![
                "--queries".into(),
                DnsFiles::of(env).queries.display().to_string(),
                "--seed".into(),
                env.plan.seed.to_string(),
                "--grace-ms".into(),
                env.plan.grace_ms.to_string(),
            ],
        }
    }

    /// The generators' `--protocol`.
    fn protocol(self) -> &'static str {
        match self {
            Service::Kv => "memcache-tcp",
            Service::Dns => "dns",
        }
    }
}

/// The DNS experiment's zone and query file, written once per run into its output directory.
pub struct DnsFiles {
    pub dir: PathBuf,
    pub zone: PathBuf,
    pub queries: PathBuf,
}

impl DnsFiles {
    pub fn of(env: &Env) -> DnsFiles {
        let dir = env.out.join("dns");
        DnsFiles {
            zone: dir.join("bench.example.zone"),
            queries: dir.join("queries.txt"),
            dir,
        }
    }

    /// Writes the zone and the query file; says what they hold.
    fn write(&self, plan: &Plan) -> Result<String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::msg(format!("cannot create {}: {e}", self.dir.display())))?;
        let (records, mix) = corral_bench_dns::workload::write_zone(&self.zone, plan.dns.names)
            .map_err(Error::msg)?;
        corral_bench_dns::workload::write_queries(&self.queries, plan.dns.names, plan.dns.queries)
            .map_err(Error::msg)?;
        Ok(format!(
            "zone {} ({records} records, {} names), {} queries asked in order, round and round \
             ({mix})",
            corral_bench_dns::ORIGIN,
            plan.dns.names,
            plan.dns.queries
        ))
    }
}

/// The DNS answers that count as errors: an answer to no query asked (or to another question),
/// SERVFAIL, and any RCODE other than NOERROR, NXDOMAIN and REFUSED (FORMERR, NOTIMP: the
/// queries are well formed).
pub fn dns_errors_in(counts: &Value) -> u64 {
    ["mismatched", "servfail", "other_rcode"]
        .iter()
        .filter_map(|k| counts[*k].as_u64())
        .sum()
}

/// The ladder stops for a system after this many points in a row show it saturated.
const SATURATED_TO_STOP: usize = 2;

/// Memory (MB) and connection limit given to both servers, far above what the workload needs,
/// so that neither evicts nor refuses.
const SERVER_MEMORY_MB: &str = "1024";
const SERVER_MAX_CONNECTIONS: &str = "4096";

/// The reply-check counters that count as errors: a wrong value or reply, an error the server
/// sent, an unparsable reply, a connection that failed with requests in flight.
const ERROR_CHECKS: [&str; 6] = [
    "wrong_value",
    "wrong_reply",
    "client_errors",
    "server_errors",
    "unparsable",
    "connection_failures",
];

fn say(line: impl AsRef<str>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", line.as_ref());
    let _ = out.flush();
}

/// The sum of the error counters of a generator's `checks` object.
pub fn errors_in(checks: &Value) -> u64 {
    ERROR_CHECKS
        .iter()
        .filter_map(|k| checks[*k].as_u64())
        .sum()
}

/// The workload flags both generators take in the same form.
fn workload_args(env: &Env) -> Vec<String> {
    let p = &env.plan;
    vec![
        "--keys".into(),
        p.kv.keys.to_string(),
        "--key-size".into(),
        p.kv.key_size.to_string(),
        "--value-size".into(),
        p.kv.value_size.to_string(),
        "--get-fraction".into(),
        p.kv.get_fraction.to_string(),
        "--seed".into(),
        p.seed.to_string(),
        "--grace-ms".into(),
        p.grace_ms.to_string(),
    ]
}

/// What one `iokerneld gen` point measured: the generator's report and the runner's own readings.
struct Measured {
    command: Vec<String>,
    raw: Value,
    summary: Summary,
    checks: Value,
    batch: PointBatch,
    server_cpus: Option<f64>,
    demotions: Option<Demotions>,
}

/// A system under test: a server (with or without the batch job) that plays points.
trait KvServer {
    /// Plays `rate` requests per second for `secs`; `alone` is the batch job alone, for its
    /// share.
    fn run_point(
        &mut self,
        rate: f64,
        secs: f64,
        name: &str,
        alone: Option<&BatchAlone>,
    ) -> Result<KvPoint>;
    /// Whether the system runs the batch job.
    fn has_batch(&self) -> bool;
    /// The batch job alone, the server idle.
    fn batch_alone(&mut self) -> Result<BatchAlone>;
    fn commands(&self) -> BTreeMap<String, Vec<String>>;
    /// iokerneld's statistics and warnings, for the systems that have one.
    fn daemon_report(&self) -> (Option<Value>, Vec<String>);
    /// Each process's class and CPUs (see [`KvSystemRun::classes`]).
    fn classes(&self) -> Vec<String>;
    /// The shielding the system has.
    fn shield_said(&self) -> String;
}

/// How often the server's CPU time is read.
const SERVER_CPU_SAMPLE: Duration = Duration::from_millis(100);

/// The server's CPUs' worth of time over the point's measured span (the batch job's window:
/// from the warm-up after the schedule's start, which follows the preload, to its end).
fn server_cpus_in(
    env: &Env,
    server_cpu: &BatchReader,
    schedule_start: f64,
    secs: f64,
    alive: impl FnMut() -> Result<()>,
) -> Result<Option<f64>> {
    let (t0, t1) = (schedule_start + env.plan.warmup_secs, schedule_start + secs);
    if t1 <= t0 {
        return Ok(None);
    }
    let cpu_us_per_s = server_cpu.rate(t0, t1, Duration::from_secs(10), alive)?;
    Ok(Some(cpu_us_per_s / 1e6))
}

// ---------------------------------------------------------------------------------------------
// Corral

/// Corral's server on a guaranteed core, with the batch job (or alone, the dedicated floor).
struct CorralServer<'e> {
    env: &'e Env,
    service: Service,
    // Stopped in this order on drop: the runtimes before the daemon they registered with.
    batch: Option<(Proc, BatchReader)>,
    /// Samples the server's CPU time.
    server_cpu: BatchReader,
    server: Proc,
    iokerneld: Proc,
    tag: String,
}

/// The flags corral-kv, corral-dns and memcached share: one worker thread on `addr`.
fn one_thread_on(addr: SocketAddrV4) -> [String; 6] {
    [
        "-t".into(),
        "1".into(),
        "-l".into(),
        addr.ip().to_string(),
        "-p".into(),
        addr.port().to_string(),
    ]
}

/// memcached's limits, which corral-kv takes with the same flags: no UDP, its memory, its
/// connections.
fn memcached_limits() -> [String; 6] {
    [
        "-U".into(),
        "0".into(),
        "-m".into(),
        SERVER_MEMORY_MB.into(),
        "-c".into(),
        SERVER_MAX_CONNECTIONS.into(),
    ]
}

/// Corral's server's own flags, before the ones every Corral server takes.
fn corral_server_args(env: &Env, service: Service) -> Vec<String> {
    let mut args: Vec<String> = vec!["--runtime".into(), "corral".into()];
    args.extend(one_thread_on(service.corral_addr(&env.plan)));
    match service {
        Service::Kv => args.extend(memcached_limits()),
        Service::Dns => args.push(format!(
            "{}={}",
            corral_bench_dns::ORIGIN,
            DnsFiles::of(env).zone.display()
        )),
    }
    args
}

impl<'e> CorralServer<'e> {
    /// Starts iokerneld, the server (and waits until it registered), the batch job unless
    /// `dedicated` (and waits for its first report), then checks that the server answers a
    /// light generated load.
    fn start(env: &'e Env, service: Service, dedicated: bool) -> Result<CorralServer<'e>> {
        let plan = &env.plan;
        let tag = format!(
            "{}-{}",
            service.tag(),
            if dedicated { "dedicated" } else { "corral" }
        );
        let mut iokerneld = start_iokerneld(env, plan.interval_us, &tag)?;
        let socket = env.socket.display().to_string();
        let mut args = corral_server_args(env, service);
        args.extend([
            "--iokerneld".into(),
            socket.clone(),
            // A guaranteed core: the server's wake-ups preempt the batch job at once.
            "--guaranteed".into(),
            "1".into(),
        ]);
        if dedicated {
            args.extend(["--spinning".into(), "1".into()]);
        }
        if let Some(us) = plan.spin_before_park_us {
            args.extend(["--spin-before-park-us".into(), us.to_string()]);
        }
        let program = match service {
            Service::Kv => &env.bins.kv,
            Service::Dns => &env.bins.dns,
        };
        let mut server = Proc::spawn(Spec::new(
            service.corral_server(),
            program,
            args,
            env.log(&format!("{tag}-server")),
        ))?;
        wait_registered(
            env,
            service.corral_server(),
            &mut [&mut iokerneld, &mut server],
        )?;
        let batch = if dedicated {
            None
        } else {
            Some(start_corral_batch(env, &tag, &socket)?)
        };
        let server_cpu = BatchReader::process_cpu_time(server.pid(), SERVER_CPU_SAMPLE, env.clock);
        let mut me = CorralServer {
            env,
            service,
            batch,
            server_cpu,
            server,
            iokerneld,
            tag,
        };
        if let Some((batch, reader)) = me.batch.as_mut() {
            let (server, iokerneld) = (&mut me.server, &mut me.iokerneld);
            reader.wait_working(START_TIMEOUT, || {
                batch.check_running()?;
                server.check_running()?;
                iokerneld.check_running()
            })?;
        }
        me.probe()?;
        Ok(me)
    }

    fn alive(&mut self) -> Result<()> {
        self.iokerneld.check_running()?;
        self.server.check_running()?;
        match self.batch.as_mut() {
            Some((batch, _)) => batch.check_running(),
            None => Ok(()),
        }
    }

    /// `iokerneld gen`'s arguments for `rate` requests per second over `secs`.
    fn gen_args(&self, rate: f64, secs: f64, name: &str) -> (Vec<String>, PathBuf) {
        let plan = &self.env.plan;
        let json = self.env.raw.join(format!("{}-{name}.json", self.tag));
        let mut args: Vec<String> = vec![
            "gen".into(),
            "--socket".into(),
            self.env.socket.display().to_string(),
            "--target".into(),
            self.service.corral_addr(plan).to_string(),
            "--protocol".into(),
            self.service.protocol().into(),
            "--rate".into(),
            format!("{rate}"),
            "--duration".into(),
            format!("{secs}"),
            "--arrivals".into(),
            "poisson".into(),
            "--clients".into(),
            plan.clients.to_string(),
        ];
        args.extend(self.service.workload_args(self.env));
        args.extend(["--json".into(), json.display().to_string()]);
        (args, json)
    }

    /// Runs one `iokerneld gen` to completion and returns what it wrote.
    fn run_gen(&mut self, args: Vec<String>, json: &std::path::Path, secs: f64) -> Result<Value> {
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
        let status = gen_proc.wait_timeout(gen_timeout(&self.env.plan, secs), || self.alive())?;
        if !status.success() {
            return Err(Error::msg(format!(
                "iokerneld gen failed ({status}): {}",
                gen_proc.log_tail()
            )));
        }
        read_json(json)
    }

    /// Checks that the server answers: a short, light generated load must get answers.
    fn probe(&mut self) -> Result<()> {
        let end = Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < end {
            let (args, json) = self.gen_args(1000.0, 0.2, "probe");
            match self.run_gen(args, &json, 0.2) {
                Ok(raw) if raw["summary"]["matched"].as_u64() > Some(0) => return Ok(()),
                Ok(raw) => {
                    last = format!(
                        "{} requests sent, none answered",
                        raw["summary"]["sent"].as_u64().unwrap_or(0)
                    )
                }
                Err(Error::Interrupted) => return Err(Error::Interrupted),
                Err(e) => last = e.to_string(),
            }
            procs::sleep(Duration::from_millis(200))?;
        }
        Err(Error::msg(format!(
            "{} does not answer generated requests: {last}; its log: {}",
            self.service.corral_server(),
            self.server.log_tail()
        )))
    }

    fn measure(
        &mut self,
        rate: f64,
        secs: f64,
        name: &str,
        alone: Option<&BatchAlone>,
    ) -> Result<Measured> {
        let (args, json) = self.gen_args(rate, secs, name);
        let command: Vec<String> = std::iter::once(self.env.bins.iokerneld.display().to_string())
            .chain(args.iter().cloned())
            .collect();
        let stats_before = self.daemon_stats().ok();
        let started = self.env.clock.now_s();
        let raw = self.run_gen(args, &json, secs)?;
        let demotions = stats_before
            .zip(self.daemon_stats().ok())
            .and_then(|(a, b)| demotions_between(&a, &b));
        let summary: Summary = serde_json::from_value(raw["summary"].clone()).map_err(|e| {
            Error::msg(format!(
                "cannot read iokerneld gen's summary in {}: {e}",
                json.display()
            ))
        })?;
        // The key space is set before the schedule starts; the batch window starts after it.
        let schedule_start = started + raw["kv"]["preload_s"].as_f64().unwrap_or(0.0);
        let server_cpus = {
            let (env, server, iokerneld) = (self.env, &mut self.server, &mut self.iokerneld);
            server_cpus_in(env, &self.server_cpu, schedule_start, secs, || {
                iokerneld.check_running()?;
                server.check_running()
            })?
        };
        let batch = match self.batch.as_mut() {
            Some((batch, reader)) => {
                let (env, server, iokerneld) = (self.env, &mut self.server, &mut self.iokerneld);
                point_batch(env, reader, schedule_start, secs, alone, || {
                    iokerneld.check_running()?;
                    server.check_running()?;
                    batch.check_running()
                })?
            }
            None => PointBatch::default(),
        };
        Ok(Measured {
            command,
            checks: self.service.checks_in(&raw, false),
            raw,
            summary,
            batch,
            server_cpus,
            demotions,
        })
    }

    fn daemon_stats(&self) -> Result<Value> {
        daemon_stats(&self.env.bins.iokerneld, &self.env.socket)
    }
}

/// CPUs' worth of iokerneld's time its generator spent: `gen_cost.busy_fraction` where the
/// generator reports it, else its mean cost per request times requests, over the point.
fn generator_cpus(raw: &Value, secs: f64) -> Option<f64> {
    let cost = &raw["gen_cost"];
    if let Some(busy) = cost["busy_fraction"].as_f64() {
        return Some(busy);
    }
    let ns = cost["ns_per_request"].as_f64()? * cost["requests"].as_f64()?;
    (secs > 0.0).then(|| ns / 1e9 / secs)
}

impl KvServer for CorralServer<'_> {
    fn run_point(
        &mut self,
        rate: f64,
        secs: f64,
        name: &str,
        alone: Option<&BatchAlone>,
    ) -> Result<KvPoint> {
        let m = self.measure(rate, secs, name, alone)?;
        let daemon = &m.raw["daemon"];
        Ok(KvPoint {
            rate_rps: rate,
            unloaded: false,
            command: m.command,
            errors: self.service.errors_in(&m.checks),
            checks: m.checks,
            batch_units_per_s: m.batch.units_per_s,
            batch_fraction: m.batch.fraction,
            batch_window_s: m.batch.window_s,
            reallocations_per_s: daemon["reallocations_per_s"].as_f64(),
            iokerneld_stalls: daemon["loop_stalls"]
                .as_u64()
                .zip(daemon["loop_stall_ns"].as_u64())
                .map(|(n, ns)| [n, ns]),
            demotions: m.demotions,
            server_cpus: m.server_cpus,
            generator_cpus: generator_cpus(&m.raw, secs),
            foreign_cpus: None,
            interference: Vec::new(),
            steal: None,
            summary: m.summary,
            raw: m.raw,
        })
    }

    fn has_batch(&self) -> bool {
        self.batch.is_some()
    }

    fn batch_alone(&mut self) -> Result<BatchAlone> {
        let Some((batch, reader)) = self.batch.as_mut() else {
            return Err(Error::msg("the dedicated floor runs no batch job"));
        };
        let (env, server, iokerneld) = (self.env, &mut self.server, &mut self.iokerneld);
        measure_alone(env, reader, || {
            iokerneld.check_running()?;
            server.check_running()?;
            batch.check_running()
        })
    }

    fn commands(&self) -> BTreeMap<String, Vec<String>> {
        [
            ("iokerneld", Some(&self.iokerneld)),
            (self.service.corral_server(), Some(&self.server)),
            ("batch", self.batch.as_ref().map(|b| &b.0)),
        ]
        .into_iter()
        .filter_map(|(n, p)| Some((n.to_owned(), p?.spec.command_line())))
        .collect()
    }

    fn daemon_report(&self) -> (Option<Value>, Vec<String>) {
        let warnings = std::fs::read_to_string(&self.iokerneld.spec.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .map(str::to_owned)
            .collect();
        (self.daemon_stats().ok(), warnings)
    }
    fn classes(&self) -> Vec<String> {
        let mut procs = vec![
            ("iokerneld", &self.iokerneld),
            (self.service.corral_server(), &self.server),
        ];
        if let Some((batch, _)) = &self.batch {
            procs.push(("batch", batch));
        }
        procs.into_iter().map(|(n, p)| observed(n, p)).collect()
    }

    fn shield_said(&self) -> String {
        shielding::iokerneld_said(&self.env.plan, &self.iokerneld.spec.log)
    }
}

// ---------------------------------------------------------------------------------------------
// Linux

/// The Linux server pinned to the application CPU, with the batch job at SCHED_IDLE there.
struct LinuxServer<'e> {
    env: &'e Env,
    service: Service,
    batch: Proc,
    reader: BatchReader,
    /// Samples the server's CPU time (all its threads).
    server_cpu: BatchReader,
    server: Proc,
    /// Undone after the processes have stopped (fields drop in order).
    shield: BaselineShield,
    loadgen_class: String,
}

/// Connects to memcached and asks for its version until it answers, or fails naming why.
fn probe_memcached(addr: std::net::SocketAddrV4, server: &mut Proc) -> Result<String> {
    let end = Instant::now() + START_TIMEOUT;
    let mut last = String::new();
    while Instant::now() < end {
        procs::check_interrupt()?;
        server.check_running()?;
        let answer = (|| -> std::io::Result<String> {
            let mut s = TcpStream::connect_timeout(&addr.into(), Duration::from_millis(200))?;
            s.set_read_timeout(Some(Duration::from_millis(500)))?;
            s.write_all(b"version\r\n")?;
            let mut buf = [0u8; 128];
            let n = s.read(&mut buf)?;
            Ok(String::from_utf8_lossy(&buf[..n]).trim().to_owned())
        })();
        match answer {
            Ok(a) if a.starts_with("VERSION ") => return Ok(a["VERSION ".len()..].to_owned()),
            Ok(a) => last = format!("it answered {a:?}"),
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::msg(format!(
        "memcached at {addr} did not answer `version` within {} s ({last}): {}",
        START_TIMEOUT.as_secs(),
        server.log_tail()
    )))
}

/// Starts memcached pinned to the application CPU with `shield`'s priority, and waits until it
/// answers.
fn start_memcached(env: &Env, shield: &BaselineShield) -> Result<Proc> {
    let plan = &env.plan;
    {
        let addr = plan.kv.memcached_addr;
        if let Err(e) = std::net::TcpListener::bind(addr) {
            return Err(Error::msg(format!(
                "cannot use {addr} for memcached: {e} (another server there? pick another with \
                 --memcached-addr)"
            )));
        }
        let mut args: Vec<String> = one_thread_on(addr)
            .into_iter()
            .chain(memcached_limits())
            .collect();
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // memcached refuses to run as root unless told which user to be.
            args.extend(["-u".into(), "root".into()]);
        }
        let mut spec = Spec::new(
            "memcached",
            &env.bins.memcached,
            args,
            env.log("kv-linux-server"),
        );
        spec.pin_to_cpu = Some(plan.app_cpu);
        spec.fifo_priority = shield.server_priority();
        let mut memcached = Proc::spawn(spec)?;
        let version = probe_memcached(addr, &mut memcached)?;
        say(format!("  memcached {version} answers at {addr}"));
        Ok(memcached)
    }
}

/// Starts the Linux DNS server on the zone, pinned to the application CPU with `shield`'s
/// priority, and waits until it answers the zone's SOA.
fn start_linux_dns(env: &Env, shield: &BaselineShield) -> Result<Proc> {
    let plan = &env.plan;
    let server = plan.dns.linux_server;
    let addr = plan.dns.linux_addr;
    if let Err(e) = std::net::UdpSocket::bind(addr) {
        return Err(Error::msg(format!(
            "cannot use {addr} for {server}: {e} (another server there? pick another with \
             --linux-dns-addr)"
        )));
    }
    let files = DnsFiles::of(env);
    let dir = files.dir.join(server.name());
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::msg(format!("cannot create {}: {e}", dir.display())))?;
    let args = server
        .configure(&dir, &files.zone, addr.into())
        .map_err(Error::msg)?;
    let mut spec = Spec::new(
        server.name(),
        &env.bins.linux_dns,
        args,
        env.log("dns-linux-server"),
    );
    spec.pin_to_cpu = Some(plan.app_cpu);
    spec.fifo_priority = shield.server_priority();
    let mut proc = Proc::spawn(spec)?;
    let waited = corral_bench_dns::linux::wait_answering(addr.into(), START_TIMEOUT, || {
        procs::check_interrupt().map_err(|e| e.to_string())?;
        proc.check_running().map_err(|e| e.to_string())
    });
    if let Err(e) = waited {
        return Err(Error::msg(format!("{server}: {e}: {}", proc.log_tail())));
    }
    // Knot binds each UDP worker to a CPU of its own choosing (worker i to CPU i), which on
    // two CPUs puts the only one on the load generator's: every thread goes back to the
    // application CPU, as the experiment gives each server one core.
    pin_threads(proc.pid(), plan.app_cpu)
        .map_err(|e| Error::msg(format!("cannot keep {server} on CPU {}: {e}", plan.app_cpu)))?;
    say(format!("  {server} answers at {addr}"));
    Ok(proc)
}

/// Pins every thread process `pid` has now to `cpu`.
fn pin_threads(pid: u32, cpu: usize) -> std::io::Result<()> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = task?.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        match corral_affinity::set_thread_affinity(tid, &[cpu]) {
            // A thread that ended meanwhile has nothing to pin.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            other => other?,
        }
    }
    Ok(())
}

impl<'e> LinuxServer<'e> {
    /// Shields the load generator's CPU, starts the server pinned to the application CPU (and
    /// waits until it answers), then the batch job at SCHED_IDLE on the same CPU (and waits for
    /// its first report).
    fn start(env: &'e Env, service: Service) -> Result<LinuxServer<'e>> {
        let plan = &env.plan;
        let shield = BaselineShield::apply(plan, "the Linux baseline");
        let server = match service {
            Service::Kv => start_memcached(env, &shield)?,
            Service::Dns => start_linux_dns(env, &shield)?,
        };
        let cpu = plan.app_cpu.to_string();
        let batch_tag = format!("{}-linux-batch", service.tag());
        let (batch, reader) = match &plan.batch_cmd {
            Some(command) => start_batch_command(env, &batch_tag, command, None)?,
            None => start_batch(env, &batch_tag, &["--runtime", "linux", "--cpu", &cpu])?,
        };
        let server_cpu = BatchReader::process_cpu_time(server.pid(), SERVER_CPU_SAMPLE, env.clock);
        let loadgen_class = loadgen_spec(env, &shield, Vec::new(), "class").class();
        let mut me = LinuxServer {
            env,
            service,
            batch,
            reader,
            server_cpu,
            server,
            shield,
            loadgen_class,
        };
        me.reader.wait_working(START_TIMEOUT, || {
            me.batch.check_running()?;
            me.server.check_running()
        })?;
        Ok(me)
    }

    /// corral-loadgen-linux's flags for the server's protocol.
    fn loadgen_protocol_args(&self) -> Vec<String> {
        let plan = &self.env.plan;
        match self.service {
            Service::Kv => vec![
                "--protocol".into(),
                "memcache-tcp".into(),
                "--server".into(),
                plan.kv.memcached_addr.to_string(),
                "--connections".into(),
                plan.clients.to_string(),
                "--threads".into(),
                "1".into(),
            ],
            Service::Dns => vec![
                "--protocol".into(),
                "dns".into(),
                "--server".into(),
                plan.dns.linux_addr.to_string(),
            ],
        }
    }
}

impl KvServer for LinuxServer<'_> {
    fn run_point(
        &mut self,
        rate: f64,
        secs: f64,
        name: &str,
        alone: Option<&BatchAlone>,
    ) -> Result<KvPoint> {
        let plan = &self.env.plan;
        let tag = format!("{}-linux-{name}", self.service.tag());
        let json = self.env.raw.join(format!("{tag}.json"));
        let _ = std::fs::remove_file(&json);
        let gen_cpu = plan.iokernel_cpu.to_string();
        let mut args = self.loadgen_protocol_args();
        args.extend([
            "--rate".into(),
            format!("{rate}"),
            "--duration".into(),
            format!("{secs}"),
            "--arrivals".into(),
            "poisson".into(),
            "--clients".into(),
            plan.clients.to_string(),
            "--cpu".into(),
            gen_cpu.clone(),
            "--cpus".into(),
            gen_cpu,
        ]);
        args.extend(self.service.workload_args(self.env));
        args.extend(["--json".into(), json.display().to_string()]);
        let spec = loadgen_spec(self.env, &self.shield, args, &tag);
        let command = spec.command_line();
        let started = self.env.clock.now_s();
        let mut lg = Proc::spawn(spec)?;
        let service = self.service;
        let LinuxServer {
            env,
            reader,
            server_cpu,
            batch,
            server,
            ..
        } = self;
        let mut alive = || {
            server.check_running()?;
            batch.check_running()
        };
        let status = lg.wait_timeout(gen_timeout(&env.plan, secs), &mut alive)?;
        if !status.success() {
            return Err(Error::msg(format!(
                "corral-loadgen-linux failed ({status}): {}",
                lg.log_tail()
            )));
        }
        let raw = read_json(&json)?;
        let summary: Summary = serde_json::from_value(raw["summary"].clone()).map_err(|e| {
            Error::msg(format!(
                "cannot read corral-loadgen-linux's summary in {}: {e}",
                json.display()
            ))
        })?;
        // The key space is set before the schedule starts; the batch window starts with it.
        let schedule_start = started + raw["preload_s"].as_f64().unwrap_or(0.0);
        let server_cpus = server_cpus_in(env, server_cpu, schedule_start, secs, &mut alive)?;
        let batch = point_batch(env, reader, schedule_start, secs, alone, alive)?;
        let checks = service.checks_in(&raw, true);
        Ok(KvPoint {
            rate_rps: rate,
            unloaded: false,
            command,
            summary,
            errors: service.errors_in(&checks),
            checks,
            batch_units_per_s: batch.units_per_s,
            batch_fraction: batch.fraction,
            batch_window_s: batch.window_s,
            reallocations_per_s: None,
            iokerneld_stalls: None,
            demotions: None,
            // The server's threads together (memcached's worker, listener and maintenance).
            server_cpus,
            generator_cpus: None,
            foreign_cpus: None,
            interference: Vec::new(),
            steal: None,
            raw,
        })
    }

    fn has_batch(&self) -> bool {
        true
    }

    fn batch_alone(&mut self) -> Result<BatchAlone> {
        let LinuxServer {
            env,
            reader,
            batch,
            server,
            ..
        } = self;
        measure_alone(env, reader, || {
            server.check_running()?;
            batch.check_running()
        })
    }

    fn commands(&self) -> BTreeMap<String, Vec<String>> {
        [
            (self.service.linux_server(&self.env.plan), &self.server),
            ("batch", &self.batch),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_owned(), p.spec.command_line()))
        .collect()
    }

    fn daemon_report(&self) -> (Option<Value>, Vec<String>) {
        (None, Vec::new())
    }
    fn classes(&self) -> Vec<String> {
        vec![
            format!("corral-loadgen-linux: {}", self.loadgen_class),
            observed(self.service.linux_server(&self.env.plan), &self.server),
            observed("batch", &self.batch),
        ]
    }

    fn shield_said(&self) -> String {
        self.shield.said.clone()
    }
}

// ---------------------------------------------------------------------------------------------
// The sweep

/// Runs one point and notes what else used the machine meanwhile (as the spin sweep does).
fn watched(env: &Env, run: impl FnOnce() -> Result<KvPoint>) -> Result<KvPoint> {
    let (mut pt, seen) = experiments::watch(&env.plan, run)?;
    pt.foreign_cpus = seen.foreign_cpus;
    pt.steal = seen.steal;
    pt.interference = seen.interference;
    Ok(pt)
}

fn point_line(system: System, p: &KvPoint, slo_ns: Option<u64>) -> String {
    let s = &p.summary;
    let mut line = format!(
        "  {:<9} {:>6}/s{}: achieved {:.0}/s  p50 {}  p99 {}  p99.9 {} us  errors {}",
        system.title(),
        fmt_rate(p.rate_rps),
        if p.unloaded { " (unloaded)" } else { "" },
        s.achieved_rps,
        fmt_us(s.latency.p50_ns),
        fmt_us(s.latency.p99_ns),
        fmt_us(s.latency.p999_ns),
        p.errors,
    );
    if let Some(f) = p.batch_fraction {
        line.push_str(&format!("  batch {f:.2} of alone"));
    }
    if let Some(r) = p.reallocations_per_s {
        line.push_str(&format!("  {r:.0} realloc/s"));
    }
    if let Some(c) = p.server_cpus {
        line.push_str(&format!("  server {c:.2} CPU"));
    }
    if let Some(g) = p.generator_cpus {
        line.push_str(&format!("  generator {g:.2} CPU"));
    }
    if let Some([n, ns]) = p.iokerneld_stalls.filter(|[n, _]| *n > 0) {
        line.push_str(&format!(
            "  iokerneld lost its CPU {n}x ({:.1} ms)",
            ns as f64 / 1e6
        ));
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
    if let Some(x) = p
        .foreign_cpus
        .filter(|&x| x > crate::report::FOREIGN_CPU_FLAG)
    {
        line.push_str(&format!("  OTHER PROCESSES USED {x:.2} CPU"));
    }
    if !p.interference.is_empty() {
        line.push_str(&format!(
            "  ANOTHER IOKERNELD WAS RUNNING ({})",
            p.interference.join("; ")
        ));
    }
    if let Some(slo) = slo_ns {
        match kvreport::miss_reason(p, slo) {
            None => line.push_str("  [within objective]"),
            Some(why) => line.push_str(&format!("  [MISSED: {why}]")),
        }
    }
    line
}

/// The name of a point's files: `unloaded`, or the rate.
fn point_name(rate: f64, unloaded: bool) -> String {
    if unloaded {
        "unloaded".into()
    } else {
        format!("{:.0}rps", rate)
    }
}

/// The p99 objective every system is held to.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Objective {
    pub p99_ns: u64,
    /// The system whose unloaded median set it (the Linux server's when it runs).
    pub from: System,
    /// That system's server.
    pub from_server: String,
    pub unloaded_median_ns: u64,
    pub factor: f64,
}

impl Objective {
    fn of(system: System, server: &str, unloaded: &KvPoint, factor: f64) -> Objective {
        let median = unloaded.summary.latency.p50_ns;
        Objective {
            p99_ns: (factor * median as f64).round() as u64,
            from: system,
            from_server: server.to_owned(),
            unloaded_median_ns: median,
            factor,
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "p99 <= {} us for every system ({}x {}'s unloaded median of {} us)",
            fmt_us(self.p99_ns),
            self.factor,
            match self.from {
                System::Linux => &self.from_server,
                other => other.title(),
            },
            fmt_us(self.unloaded_median_ns)
        )
    }
}

/// The order the systems run in: the Linux server first, as its unloaded median sets the
/// objective the others are held to; the rest as the plan lists them.
fn run_order(systems: &[System]) -> Vec<System> {
    let mut order = systems.to_vec();
    order.sort_by_key(|s| *s != System::Linux);
    order
}

/// Sets one system up, measures its batch job alone, its unloaded point, and its ladder, judged
/// against `objective`, or, for the first system, against the objective its own unloaded point
/// sets.
fn run_system(
    env: &Env,
    system: System,
    objective: Option<Objective>,
) -> Result<(KvSystemRun, Objective)> {
    let p = &env.plan;
    let service = Service::of(p);
    let corral = service.corral_server();
    let mut server: Box<dyn KvServer + '_> = match system {
        System::Corral => {
            say(format!(
                "== Corral: iokerneld on CPU {} (nic gen, generating {}), {corral} (guaranteed \
                 core) and the batch job sharing CPU {}",
                p.iokernel_cpu,
                match service {
                    Service::Kv => "memcached over TCP",
                    Service::Dns => "DNS over UDP",
                },
                p.app_cpu
            ));
            Box::new(CorralServer::start(env, service, false)?)
        }
        System::Dedicated => {
            say(format!(
                "== Dedicated: iokerneld on CPU {} (nic gen), {corral} alone spinning on CPU {} \
                 as a guaranteed core, no batch job",
                p.iokernel_cpu, p.app_cpu
            ));
            Box::new(CorralServer::start(env, service, true)?)
        }
        System::Linux => {
            say(format!(
                "== Linux: {} with one server thread pinned to CPU {} with the batch job at \
                 SCHED_IDLE on it, corral-loadgen-linux on CPU {} over loopback",
                service.linux_server(p),
                p.app_cpu,
                p.iokernel_cpu
            ));
            Box::new(LinuxServer::start(env, service)?)
        }
    };
    let alone = match server.has_batch() {
        true => {
            let alone = experiments::alone_watched(|| server.batch_alone())?;
            say(format!(
                "  {} batch alone: {:.0} {} over {:.1} s",
                system.title(),
                alone.units_per_s,
                if p.batch_cmd.is_some() {
                    "CPU us/s"
                } else {
                    "units/s"
                },
                alone.window_s[1] - alone.window_s[0]
            ));
            Some(alone)
        }
        false => None,
    };
    let mut unloaded = watched(env, || {
        server.run_point(
            p.kv.unloaded_rate,
            p.point_secs,
            &point_name(p.kv.unloaded_rate, true),
            alone.as_ref(),
        )
    })?;
    unloaded.unloaded = true;
    say(point_line(system, &unloaded, None));
    let objective = match objective {
        Some(o) => o,
        None => {
            let o = Objective::of(
                system,
                match system {
                    System::Linux => service.linux_server(p),
                    _ => corral,
                },
                &unloaded,
                p.kv.slo_factor,
            );
            say(format!("  objective: {}", o.describe()));
            o
        }
    };
    let slo_p99_ns = objective.p99_ns;
    let classes = server.classes();
    let shield = server.shield_said();
    say(crate::report::setup_line(system, &classes, &shield));
    let mut points = Vec::new();
    let mut saturated_in_a_row = 0;
    for &rate in &p.kv.rates {
        procs::check_interrupt()?;
        let pt = watched(env, || {
            server.run_point(rate, p.point_secs, &point_name(rate, false), alone.as_ref())
        })?;
        say(point_line(system, &pt, Some(slo_p99_ns)));
        if kvreport::saturation_reason(&pt).is_some() {
            saturated_in_a_row += 1;
        } else {
            saturated_in_a_row = 0;
        }
        points.push(pt);
        if saturated_in_a_row >= SATURATED_TO_STOP {
            say(format!(
                "  {}: saturated at {SATURATED_TO_STOP} points in a row; its ladder stops here",
                system.title()
            ));
            break;
        }
    }
    let (daemon_stats, daemon_warnings) = server.daemon_report();
    if let Some(first) = daemon_warnings.first() {
        say(format!(
            "  iokerneld logged {} warning(s) during this run; the first: {first}",
            daemon_warnings.len()
        ));
    }
    let run = KvSystemRun {
        system,
        commands: server.commands(),
        batch_alone: alone,
        unloaded,
        slo_p99_ns,
        points,
        daemon_stats,
        daemon_warnings,
        classes,
        shield: Some(shield),
    };
    Ok((run, objective))
}

/// Writes a server experiment's plot into `out` (`kv` or `dns`, as `service`); `unloaded_rate`
/// is the rate of the light point every system starts with.
pub(crate) fn kv_plots(
    out: &std::path::Path,
    service: Service,
    unloaded_rate: f64,
    runs: &[KvSystemRun],
) -> Result<Vec<PathBuf>> {
    let max_krps = runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.rate_rps / 1e3))
        .fold(unloaded_rate / 1e3, f64::max);
    let systems: Vec<charts::Series> = runs.iter().map(charts::Series::of_kv_run).collect();
    plot::save(
        out,
        service.tag(),
        &charts::kv(&systems, max_krps, service.latency_title()),
    )
}

/// A server experiment: each system in turn, then the analysis, table, CSV and plots.
pub fn sweep(env: &Env, record: &mut Value) -> Result<experiments::Written> {
    let p = &env.plan;
    let service = Service::of(p);
    let linux = service.linux_server(p);
    let workload = match service {
        Service::Kv => None,
        Service::Dns => {
            let said = DnsFiles::of(env).write(p)?;
            say(format!("  {said}"));
            Some(said)
        }
    };
    let mut runs: Vec<KvSystemRun> = Vec::new();
    let mut objective: Option<Objective> = None;
    for sys in run_order(&p.systems) {
        procs::check_interrupt()?;
        let (run, o) = run_system(env, sys, objective.clone())?;
        objective = Some(o);
        runs.push(run);
    }
    runs.sort_by_key(|r| p.systems.iter().position(|s| *s == r.system));
    let ceilings: Vec<kvreport::Ceiling> = runs
        .iter()
        .map(|r| kvreport::ceiling(r, p.point_secs))
        .collect();
    let throughput = kvreport::throughput_checks(&runs, service.throughput_target());
    let colocation = kvreport::colocation_checks(&runs);
    let mut text = match service {
        Service::Kv => format!(
            "memcached over TCP ({} keys, {} keys, {} values, {:.0}% gets, {} connections) on one \
         core: Corral KV and the batch job vs memcached {} and the batch job at SCHED_IDLE\n\
         C = Corral, L = Linux (memcached), D = dedicated (corral-kv alone, spinning on a \
         guaranteed core); latencies in us from each request's scheduled send time; batch = \
         batch throughput as a fraction of the batch job alone; errors = wrong replies and \
         failed connections (+ requests lost); slo = p99 within the objective, {}\n\n",
            p.kv.keys,
            p.kv.key_size,
            p.kv.value_size,
            p.kv.get_fraction * 100.0,
            p.clients,
            p.kv.memcached.display(),
            objective
                .as_ref()
                .map_or_else(|| "not set".into(), |o| o.describe()),
        ),
        Service::Dns => format!(
            "DNS over UDP ({}) on one core: corral-dns and the batch job on Corral vs {linux} \
             and the batch job at SCHED_IDLE\n\
             C = Corral, L = Linux ({linux}), D = dedicated (corral-dns alone, spinning on a \
             guaranteed core); latencies in us from each query's scheduled send time; batch = \
             batch throughput as a fraction of the batch job alone; errors = answers to no \
             query asked, SERVFAIL and unexpected RCODEs (+ queries lost); slo = p99 within \
             the objective, {}\n\n",
            workload.as_deref().unwrap_or_default(),
            objective
                .as_ref()
                .map_or_else(|| "not set".into(), |o| o.describe()),
        ),
    };
    text.push_str(&kvreport::kv_table(&runs).render());
    text.push('\n');
    text.push_str(&kvreport::capacity_text(&runs, &ceilings));
    for r in &runs {
        if let Some(a) = &r.batch_alone {
            text.push_str(&format!(
                "batch alone: {} {:.0} {}\n",
                r.system.title(),
                a.units_per_s,
                if p.batch_cmd.is_some() {
                    "CPU us/s"
                } else {
                    "units/s"
                }
            ));
        }
        if !r.daemon_warnings.is_empty() {
            text.push_str(&format!(
                "note: iokerneld ({}) logged {} warning(s); the first: {}\n",
                r.system.title(),
                r.daemon_warnings.len(),
                r.daemon_warnings[0]
            ));
        }
    }
    let disturbed: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            std::iter::once(&r.unloaded)
                .chain(&r.points)
                .filter(|p| {
                    !p.interference.is_empty()
                        || p.foreign_cpus
                            .is_some_and(|x| x > crate::report::FOREIGN_CPU_FLAG)
                })
                .map(move |p| format!("{} {}/s", r.system.title(), fmt_rate(p.rate_rps)))
        })
        .collect();
    if !disturbed.is_empty() {
        text.push_str(&format!(
            "note: other processes (or another iokerneld) used the CPUs during {} point(s) \
             ({}): those numbers are disturbed; rerun on a quiet machine\n",
            disturbed.len(),
            disturbed.join(", ")
        ));
    }
    text.push_str(&crate::report::setup_text(
        runs.iter().map(|r| (r.system, &r.classes, &r.shield)),
    ));
    text.push_str("\nTargets:\n");
    text.push_str(&kvreport::render_targets(&throughput, &colocation, linux));

    let csv = kvreport::kv_csv(&runs);
    let plots = kv_plots(&env.out, service, p.kv.unloaded_rate, &runs)?;
    record["objective"] = json!(objective);
    record["systems"] = json!(runs);
    record["ceilings"] = json!(ceilings);
    record["checks"] = json!({"throughput": throughput, "colocation": colocation});
    Ok((text, csv, plots))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_count_every_failed_check_and_no_other() {
        let checks = json!({
            "gets": 90, "sets": 10, "preloaded": 10000, "hits": 80, "misses": 10, "stored": 10,
            "wrong_value": 1, "wrong_reply": 2, "client_errors": 3, "server_errors": 4,
            "unparsable": 5, "connection_failures": 6
        });
        assert_eq!(errors_in(&checks), 21);
        assert_eq!(errors_in(&Value::Null), 0);
    }

    #[test]
    fn dns_errors_are_unmatched_answers_and_server_failures_not_nxdomain() {
        let counts = json!({
            "noerror": 800, "nxdomain": 150, "refused": 0, "servfail": 2, "other_rcode": 3,
            "truncated": 1, "mismatched": 4
        });
        assert_eq!(dns_errors_in(&counts), 9);
        assert_eq!(Service::Dns.errors_in(&counts), 9);
        assert_eq!(dns_errors_in(&Value::Null), 0);
        // Each generator's result keeps its DNS counts in the same place.
        let raw = json!({"dns": counts});
        assert_eq!(Service::Dns.checks_in(&raw, true), counts);
        assert_eq!(Service::Dns.checks_in(&raw, false), counts);
    }

    #[test]
    fn generator_time_is_its_busy_fraction_or_its_cost_per_request_times_requests() {
        let raw = json!({"gen_cost": {"requests": 50_000, "ns_per_request": 2000.0}});
        let g = generator_cpus(&raw, 1.0).unwrap();
        assert!((g - 0.1).abs() < 1e-9, "{g}");
        let raw = json!({"gen_cost": {"requests": 50_000, "ns_per_request": 2000.0,
                                      "busy_fraction": 0.25}});
        assert_eq!(generator_cpus(&raw, 1.0), Some(0.25));
        assert_eq!(generator_cpus(&json!({}), 1.0), None);
    }

    #[test]
    fn memcached_runs_first_and_its_median_sets_one_objective() {
        assert_eq!(
            run_order(&[System::Corral, System::Linux, System::Dedicated]),
            [System::Linux, System::Corral, System::Dedicated]
        );
        assert_eq!(
            run_order(&[System::Corral, System::Dedicated]),
            [System::Corral, System::Dedicated]
        );
        let mut unloaded = kvreport::tests::point(1e3, 1e3, 100, None);
        unloaded.summary.latency.p50_ns = 26_300;
        let o = Objective::of(System::Linux, "memcached", &unloaded, 10.0);
        assert_eq!(o.p99_ns, 263_000);
        let said = o.describe();
        assert!(said.contains("263"), "{said}");
        assert!(
            said.contains("memcached's unloaded median of 26.3"),
            "{said}"
        );
        unloaded.summary.latency.p50_ns = 5_000;
        assert_eq!(
            Objective::of(System::Corral, "corral-kv", &unloaded, 3.0).p99_ns,
            15_000
        );
    }

    #[test]
    fn both_generators_get_the_same_workload() {
        use clap::Parser;
        let args = crate::cli::Args::try_parse_from([
            "corral-demo",
            "--experiment",
            "kv",
            "--value-size",
            "fb_value",
            "--get-fraction",
            "0.7",
        ])
        .unwrap();
        let plan = args.plan().unwrap();
        assert_eq!(plan.systems.len(), 3);
        assert_eq!(plan.kv.corral_addr.port(), 11211);
        let env = Env {
            bins: crate::systems::Bins::locate_kv(
                std::path::Path::new("/nonexistent"),
                &[],
                true,
                std::path::Path::new("/bin/true"),
            )
            .unwrap(),
            plan,
            out: PathBuf::new(),
            logs: PathBuf::new(),
            raw: PathBuf::new(),
            socket: PathBuf::new(),
            clock: crate::batch::Clock::start(),
            spin_iterations_per_us: f64::NAN,
            veth: None,
        };
        let w = workload_args(&env);
        // fb_value is written in its explicit form, which both generators parse back.
        let value_size = w.windows(2).find(|p| p[0] == "--value-size").unwrap()[1].clone();
        assert_eq!(
            value_size.parse::<corral_loadgen::kv::SizeDist>().unwrap(),
            "fb_value".parse().unwrap()
        );
        assert!(
            w.windows(2).any(|p| p == ["--get-fraction", "0.7"]),
            "{w:?}"
        );
        assert!(w.windows(2).any(|p| p == ["--keys", "10000"]), "{w:?}");
        assert_eq!(Service::Kv.workload_args(&env), w);
    }

    #[test]
    fn dns_generators_ask_the_one_query_file_and_corral_dns_serves_the_one_zone() {
        use clap::Parser;
        let plan = crate::cli::Args::try_parse_from(["corral-demo", "--experiment", "dns"])
            .unwrap()
            .plan()
            .unwrap();
        let env = Env {
            bins: crate::systems::Bins::locate_dns(
                std::path::Path::new("/nonexistent"),
                &[],
                true,
                plan.dns.linux_server,
            )
            .unwrap(),
            plan,
            out: PathBuf::from("/out"),
            logs: PathBuf::new(),
            raw: PathBuf::new(),
            socket: PathBuf::new(),
            clock: crate::batch::Clock::start(),
            spin_iterations_per_us: f64::NAN,
            veth: None,
        };
        assert_eq!(Service::of(&env.plan), Service::Dns);
        let w = Service::Dns.workload_args(&env);
        assert!(
            w.windows(2)
                .any(|p| p == ["--queries", "/out/dns/queries.txt"]),
            "{w:?}"
        );
        assert!(w.windows(2).any(|p| p == ["--seed", "1"]), "{w:?}");
        let args = corral_server_args(&env, Service::Dns);
        assert!(args.windows(2).any(|p| p == ["-p", "53"]), "{args:?}");
        assert_eq!(
            args.last().unwrap(),
            "bench.example.=/out/dns/bench.example.zone"
        );
        assert_eq!(Service::Dns.linux_server(&env.plan), "gdnsd");
        assert_eq!(Service::Dns.corral_server(), "corral-dns");
    }
}
