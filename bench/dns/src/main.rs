//! corral-dns on Corral against the authoritative servers people run, in one sitting.
//!
//! One zone and one query file (written here: existing names and types, CNAMEs, names that
//! exist without the type asked for, and missing names, in the proportions of dnsperf's usual
//! files) go to every server:
//!
//! - `corral`: corral-dns on Corral behind its own iokerneld (`--core 0 --managed-cores 1
//!   --shield off`) and TAP device; Linux reaches it through the TAP's host side.
//! - `nsd`, `knot`, `gdnsd`: Debian's servers on Linux sockets on loopback, pinned to CPU 1
//!   with one server thread or process each (NSD `server-count: 1`; Knot `udp-workers`,
//!   `tcp-workers` and `background-workers: 1`; gdnsd `udp_threads` and `tcp_threads 1`).
//! - `corral-linux`: corral-dns `--runtime linux -t 1` on loopback, pinned to CPU 1.
//!
//! For each repetition, each server is started afresh and swept with `corral-loadgen-linux
//! --protocol dns` (open loop, Poisson arrivals, latency from each query's scheduled send time)
//! at every rate of `--rates`, then loaded closed-loop by `dnsperf` for its capacity. The
//! clients are pinned to CPU 0 in the ordinary scheduling class: with two CPUs there is no
//! other, so for Corral they share it with iokerneld's busy loop (unshielded, also in the
//! ordinary class) and stand in for clients on another machine. (Not `SCHED_FIFO`: without
//! the shield real-time throttling stays on, and a spinning real-time client would take all
//! but 50 ms a second of the CPU from iokerneld and from itself stall 50 ms a second.)
//!
//! The report gives, per server, the medians over the repetitions at each rate (p50, p99,
//! p99.9, lost queries), the throughput at a p99 objective (`--objective-factor` times the
//! best unloaded median of all servers; the highest rate whose median p99 meets it with no
//! query lost in the median), the first rate at which the median run lost queries, and
//! dnsperf's capacity; ratios are to the best of NSD, Knot and gdnsd.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use corral_bench_dns::ORIGIN;
use corral_bench_dns::linux::{LinuxDns, wait_answering};
use corral_bench_dns::workload::{write_queries, write_zone};

/// Queries in the query file.
const QUERIES: usize = 20_000;

const START: Duration = Duration::from_secs(30);

#[derive(Parser, Debug)]
#[command(about = "corral-dns on Corral against NSD, Knot and gdnsd on Linux, one core each")]
struct Args {
    /// Servers, in the order run: corral, nsd, knot, gdnsd, corral-linux.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "corral,nsd,knot,gdnsd,corral-linux"
    )]
    servers: Vec<String>,
    /// Offered rates (queries per second) of the open-loop sweep.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000,20000,50000,100000,150000,200000"
    )]
    rates: Vec<f64>,
    /// Seconds per open-loop point.
    #[arg(long, default_value_t = 2.0)]
    duration: f64,
    /// Repetitions of everything; the report takes medians.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// The p99 objective, as a multiple of the best unloaded (lowest rate) median.
    #[arg(long, default_value_t = 10.0)]
    objective_factor: f64,
    /// Seconds of dnsperf per server and repetition (0: no dnsperf).
    #[arg(long, default_value_t = 2)]
    dnsperf_seconds: u32,
    /// Names in the zone.
    #[arg(long, default_value_t = 10_000)]
    names: usize,
    /// CPU of the clients (and of iokerneld).
    #[arg(long, default_value_t = 0)]
    client_cpu: usize,
    /// CPU of the Linux servers (and iokerneld's managed core).
    #[arg(long, default_value_t = 1)]
    server_cpu: usize,
    /// Directory holding iokerneld, corral-dns and corral-loadgen-linux [default: this
    /// binary's].
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where to keep configurations, logs and the loadgen's JSON [default: a new directory
    /// under /tmp].
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("corral-bench-dns: {e}");
            ExitCode::from(2)
        }
    }
}

type Result<T> = std::result::Result<T, String>;

struct Bins {
    iokerneld: PathBuf,
    dns: PathBuf,
    loadgen: PathBuf,
}

/// One open-loop point.
#[derive(Clone, Debug, Default)]
struct Point {
    sent: u64,
    lost: u64,
    achieved: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    fell_behind: bool,
}

/// One dnsperf run.
#[derive(Clone, Debug, Default)]
struct Perf {
    qps: f64,
    lost: u64,
    sent: u64,
    avg_latency_us: f64,
}

fn run(args: &Args) -> Result<()> {
    let bin_dir = match &args.bin_dir {
        Some(d) => d.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("where is this binary: {e}"))?
            .parent()
            .ok_or("this binary has no directory")?
            .to_path_buf(),
    };
    let bins = Bins {
        iokerneld: bin_dir.join("iokerneld"),
        dns: bin_dir.join("corral-dns"),
        loadgen: bin_dir.join("corral-loadgen-linux"),
    };
    for b in [&bins.iokerneld, &bins.dns, &bins.loadgen] {
        if !b.is_file() {
            return Err(format!(
                "{} is missing: cargo build --release -p corral-iokerneld -p corral-app-dns -p corral-loadgen",
                b.display()
            ));
        }
    }
    for s in &args.servers {
        if !["corral", "nsd", "knot", "gdnsd", "corral-linux"].contains(&s.as_str()) {
            return Err(format!(
                "unknown server {s}: expected corral, nsd, knot, gdnsd or corral-linux"
            ));
        }
    }
    let out = match &args.out {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("corral-bench-dns-{}", std::process::id())),
    };
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let zone = out.join("bench.example.zone");
    let queries = out.join("queries.txt");
    let (records, mix) = write_zone(&zone, args.names)?;
    write_queries(&queries, args.names, QUERIES)?;
    println!(
        "corral-bench-dns: zone {ORIGIN} ({records} records, {} names), {} queries ({mix}); \
         rates {:?} q/s, {} s each, {} repetitions; clients on CPU {} (SCHED_OTHER), \
         servers on CPU {}; output in {}",
        args.names,
        QUERIES,
        args.rates,
        args.duration,
        args.reps,
        args.client_cpu,
        args.server_cpu,
        out.display()
    );
    for (name, cmd) in [
        ("nsd", "nsd -v"),
        ("knotd", "knotd -V"),
        ("gdnsd", "gdnsd -h"),
        ("dnsperf", "dnsperf -h"),
    ] {
        let parts: Vec<&str> = cmd.split(' ').collect();
        let o = Command::new(parts[0]).args(&parts[1..]).output();
        let text = o
            .map(|o| {
                let s = String::from_utf8_lossy(&o.stdout).to_string()
                    + &String::from_utf8_lossy(&o.stderr);
                s.lines()
                    .find(|l| l.to_lowercase().contains("version"))
                    .unwrap_or("")
                    .trim()
                    .to_string()
            })
            .unwrap_or_else(|e| format!("not runnable: {e}"));
        println!("  {name}: {text}");
    }

    // results[server][rep][rate]
    let mut points: Vec<Vec<Vec<Point>>> = vec![Vec::new(); args.servers.len()];
    let mut perfs: Vec<Vec<Perf>> = vec![Vec::new(); args.servers.len()];
    for rep in 0..args.reps {
        for (si, name) in args.servers.iter().enumerate() {
            let dir = out.join(format!("{name}-{rep}"));
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let server = Server::start(name, args, &bins, &dir, &zone, rep)?;
            println!("== rep {rep}: {name} at {}", server.addr);
            let mut row = Vec::new();
            for (ri, &rate) in args.rates.iter().enumerate() {
                let json = dir.join(format!("point-{ri}.json"));
                let p = loadgen(args, &bins, server.addr, &queries, rate, rep, &json)?;
                println!(
                    "  {:>8.0} q/s offered: {:>8.0} answered/s, sent {}, lost {}, p50 {:.1} \
                     p99 {:.1} p99.9 {:.1} µs{}",
                    rate,
                    p.achieved,
                    p.sent,
                    p.lost,
                    p.p50_us,
                    p.p99_us,
                    p.p999_us,
                    if p.fell_behind {
                        " (the generator fell behind)"
                    } else {
                        ""
                    }
                );
                row.push(p);
            }
            points[si].push(row);
            if args.dnsperf_seconds > 0 {
                let p = dnsperf(args, server.addr, &queries, &dir)?;
                println!(
                    "  dnsperf: {:.0} q/s, {} sent, {} lost, average latency {:.1} µs",
                    p.qps, p.sent, p.lost, p.avg_latency_us
                );
                perfs[si].push(p);
            }
            server.stop()?;
        }
    }
    report(args, &points, &perfs);
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn report(args: &Args, points: &[Vec<Vec<Point>>], perfs: &[Vec<Perf>]) {
    let med = |si: usize, ri: usize, f: &dyn Fn(&Point) -> f64| {
        median(points[si].iter().map(|rep| f(&rep[ri])).collect())
    };
    let best_unloaded = (0..args.servers.len())
        .map(|si| med(si, 0, &|p| p.p50_us))
        .fold(f64::INFINITY, f64::min);
    let objective = best_unloaded * args.objective_factor;
    println!(
        "\n== Medians over {} repetitions (latency in µs from the scheduled send time)",
        args.reps
    );
    println!(
        "{:<13} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "server", "offered", "answered/s", "p50", "p99", "p99.9", "lost", "behind"
    );
    for (si, name) in args.servers.iter().enumerate() {
        for (ri, rate) in args.rates.iter().enumerate() {
            let behind = points[si].iter().filter(|r| r[ri].fell_behind).count();
            println!(
                "{:<13} {:>9.0} {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>8.0} {:>6}",
                name,
                rate,
                med(si, ri, &|p| p.achieved),
                med(si, ri, &|p| p.p50_us),
                med(si, ri, &|p| p.p99_us),
                med(si, ri, &|p| p.p999_us),
                med(si, ri, &|p| p.lost as f64),
                format!("{behind}/{}", args.reps),
            );
        }
    }
    println!(
        "\n== Summary: p99 objective {:.1} µs ({} x the best unloaded median, {:.1} µs at {:.0} q/s)",
        objective, args.objective_factor, best_unloaded, args.rates[0]
    );
    // Throughput at the objective: the highest offered rate whose median p99 meets it with no
    // query lost in the median run; its median answered rate.
    let at_objective: Vec<(f64, f64)> = (0..args.servers.len())
        .map(|si| {
            let mut best = (0.0, 0.0);
            for (ri, rate) in args.rates.iter().enumerate() {
                if med(si, ri, &|p| p.p99_us) <= objective && med(si, ri, &|p| p.lost as f64) == 0.0
                {
                    best = (*rate, med(si, ri, &|p| p.achieved));
                }
            }
            best
        })
        .collect();
    let first_loss: Vec<Option<f64>> = (0..args.servers.len())
        .map(|si| {
            args.rates
                .iter()
                .enumerate()
                .find(|(ri, _)| med(si, *ri, &|p| p.lost as f64) > 0.0)
                .map(|(_, r)| *r)
        })
        .collect();
    let perf_med: Vec<f64> = perfs
        .iter()
        .map(|v| median(v.iter().map(|p| p.qps).collect()))
        .collect();
    let linux_peers: Vec<usize> = args
        .servers
        .iter()
        .enumerate()
        .filter(|(_, n)| ["nsd", "knot", "gdnsd"].contains(&n.as_str()))
        .map(|(i, _)| i)
        .collect();
    let best_peer = |v: &dyn Fn(usize) -> f64| {
        linux_peers
            .iter()
            .map(|&i| (v(i), args.servers[i].as_str()))
            .fold((0.0, "none"), |a, b| if b.0 > a.0 { b } else { a })
    };
    let (best_obj, best_obj_name) = best_peer(&|i| at_objective[i].1);
    let (best_perf, best_perf_name) = best_peer(&|i| perf_med[i]);
    println!(
        "{:<13} {:>22} {:>9} {:>16} {:>14} {:>9}",
        "server", "at objective: offered", "answered", "ratio to best", "first loss at", "dnsperf"
    );
    for (si, name) in args.servers.iter().enumerate() {
        println!(
            "{:<13} {:>22.0} {:>9.0} {:>16} {:>14} {:>9.0}",
            name,
            at_objective[si].0,
            at_objective[si].1,
            if best_obj > 0.0 {
                format!("{:.2}x", at_objective[si].1 / best_obj)
            } else {
                "-".into()
            },
            first_loss[si].map_or("none".to_string(), |r| format!("{r:.0}")),
            perf_med[si],
        );
    }
    println!(
        "best Linux server at the objective: {best_obj_name} ({best_obj:.0} q/s); by dnsperf: \
         {best_perf_name} ({best_perf:.0} q/s)"
    );
    for (si, name) in args.servers.iter().enumerate() {
        if best_perf > 0.0 && !linux_peers.contains(&si) {
            println!(
                "{name}: {:.2}x the best Linux server at the objective, {:.2}x by dnsperf",
                at_objective[si].1 / best_obj.max(f64::MIN_POSITIVE),
                perf_med[si] / best_perf
            );
        }
    }
}

/// Runs one open-loop point and reads its JSON.
fn loadgen(
    args: &Args,
    bins: &Bins,
    server: SocketAddr,
    queries: &Path,
    rate: f64,
    rep: usize,
    json: &Path,
) -> Result<Point> {
    let log = json.with_extension("log");
    let status = Command::new("taskset")
        .args(["-c", &args.client_cpu.to_string()])
        .arg(&bins.loadgen)
        .args(["--protocol", "dns", "--server", &server.to_string()])
        .args(["--rate", &rate.to_string()])
        .args(["--duration", &args.duration.to_string()])
        .args(["--seed", &(rep + 1).to_string()])
        .args(["--cpu", &args.client_cpu.to_string()])
        .arg("--queries")
        .arg(queries)
        .arg("--json")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(log_file(&log)?)
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("run corral-loadgen-linux: {e}"))?;
    if !status.success() {
        return Err(format!(
            "corral-loadgen-linux failed ({status}); see {}",
            log.display()
        ));
    }
    let text = std::fs::read_to_string(json).map_err(|e| format!("{}: {e}", json.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let s = &v["summary"];
    let u = |k: &str| s[k].as_u64().unwrap_or(0);
    let us = |k: &str| s["latency"][k].as_u64().unwrap_or(0) as f64 / 1e3;
    Ok(Point {
        sent: u("sent"),
        lost: u("lost"),
        achieved: s["achieved_rps"].as_f64().unwrap_or(0.0),
        p50_us: us("p50_ns"),
        p99_us: us("p99_ns"),
        p999_us: us("p999_ns"),
        fell_behind: s["fell_behind"].as_bool().unwrap_or(false),
    })
}

/// dnsperf closed-loop (100 queries outstanding, one client thread) for its capacity.
fn dnsperf(args: &Args, server: SocketAddr, queries: &Path, dir: &Path) -> Result<Perf> {
    let out = Command::new("taskset")
        .args(["-c", &args.client_cpu.to_string()])
        .args(["dnsperf", "-s", &server.ip().to_string()])
        .args(["-p", &server.port().to_string()])
        .arg("-d")
        .arg(queries)
        .args([
            "-l",
            &args.dnsperf_seconds.to_string(),
            "-c",
            "1",
            "-T",
            "1",
        ])
        .args(["-q", "100", "-t", "1"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run dnsperf: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    std::fs::write(dir.join("dnsperf.txt"), &text).map_err(|e| format!("dnsperf.txt: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "dnsperf failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // "  Queries sent:         123", "  Queries lost:         0 (0.00%)",
    // "  Queries per second:   1234.5", "  Average Latency (s):  0.000080 (min ...".
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(Perf {
        qps: field("Queries per second:"),
        lost: field("Queries lost:") as u64,
        sent: field("Queries sent:") as u64,
        avg_latency_us: field("Average Latency (s):") * 1e6,
    })
}

/// Starts `cmd` with no input, its output dropped and its errors to `log`.
fn spawn(cmd: &mut Command, log: &Path, what: &str) -> Result<Child> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file(log)?)
        .spawn()
        .map_err(|e| format!("start {what}: {e}"))
}

fn log_file(path: &Path) -> Result<std::fs::File> {
    std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// A running server (and its iokerneld), killed on drop.
struct Server {
    name: String,
    children: Vec<Child>,
    addr: SocketAddr,
}

/// Loopback ports of the Linux servers.
fn port_of(name: &str) -> u16 {
    match name {
        "nsd" => 5391,
        "knot" => 5392,
        "gdnsd" => 5393,
        _ => 5394,
    }
}

impl Server {
    fn start(
        name: &str,
        args: &Args,
        bins: &Bins,
        dir: &Path,
        zone: &Path,
        rep: usize,
    ) -> Result<Server> {
        let cpu = args.server_cpu.to_string();
        let pinned = |program: &str| {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu, program]);
            c
        };
        let d = dir.display();
        let z = zone.display();
        let mut me = Server {
            name: name.to_string(),
            children: Vec::new(),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port_of(name))),
        };
        let port = port_of(name);
        match name {
            "corral" => {
                let tap = format!("cdnsb{}", std::process::id() % 100_000);
                let subnet = 200 + rep as u8 % 50;
                let socket = dir.join("iokerneld.sock");
                let child = spawn(
                    Command::new(&bins.iokerneld)
                        .args(["--core", &args.client_cpu.to_string()])
                        .args(["--managed-cores", &cpu, "--log-level", "warn"])
                        .args(["--shield", "off", "--nic", "tap", "--tap-name", &tap])
                        .args(["--host-ip", &format!("10.159.{subnet}.1/24")])
                        .arg("--socket")
                        .arg(&socket),
                    &dir.join("iokerneld.log"),
                    "iokerneld",
                )?;
                me.children.push(child);
                let t0 = Instant::now();
                loop {
                    let ok = Command::new(&bins.iokerneld)
                        .arg("stats")
                        .arg("--socket")
                        .arg(&socket)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .is_ok_and(|s| s.success());
                    if ok {
                        break;
                    }
                    me.check_alive()?;
                    if t0.elapsed() > START {
                        return Err(format!("iokerneld did not come up; see {d}"));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let ip = Ipv4Addr::new(10, 159, subnet, 2);
                let child = spawn(
                    Command::new(&bins.dns)
                        .args(["--runtime", "corral", "-t", "1", "-l", &ip.to_string()])
                        .args(["-p", "53", "--stats-every", "1"])
                        .arg("--iokerneld")
                        .arg(&socket)
                        .arg(format!("{ORIGIN}={z}")),
                    &dir.join("corral-dns.log"),
                    "corral-dns",
                )?;
                me.children.push(child);
                me.addr = SocketAddr::from((ip, 53));
            }
            "corral-linux" => {
                let child = spawn(
                    pinned(&bins.dns.display().to_string())
                        .args(["--runtime", "linux", "-t", "1", "-l", "127.0.0.1"])
                        .args(["-p", &port.to_string()])
                        .arg(format!("{ORIGIN}={z}")),
                    &dir.join("corral-dns.log"),
                    "corral-dns",
                )?;
                me.children.push(child);
            }
            linux => {
                let server: LinuxDns = linux.parse()?;
                let args = server.configure(dir, zone, me.addr)?;
                let child = spawn(
                    pinned(server.program()).args(args),
                    &dir.join(format!("{}.stderr", server.program())),
                    server.program(),
                )?;
                me.children.push(child);
            }
        }
        me.wait_answering(dir)?;
        Ok(me)
    }

    fn check_alive(&mut self) -> Result<()> {
        for c in &mut self.children {
            if let Ok(Some(status)) = c.try_wait() {
                return Err(format!("{}: a process exited ({status})", self.name));
            }
        }
        Ok(())
    }

    /// Waits until the server answers an SOA query for the zone with its SOA.
    fn wait_answering(&mut self, dir: &Path) -> Result<()> {
        let addr = self.addr;
        let name = self.name.clone();
        wait_answering(addr, START, || self.check_alive())
            .map_err(|e| format!("{name}: {e}; see {}", dir.display()))
    }

    fn stop(mut self) -> Result<()> {
        self.check_alive()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // corral-dns before its iokerneld; the Linux servers stop on SIGTERM through taskset's
        // exec, which leaves the server's pid as the child's.
        for c in self.children.iter_mut().rev() {
            // SAFETY: sending SIGTERM to our own child by its pid.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in self.children.iter_mut().rev() {
            let t0 = Instant::now();
            while matches!(c.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
