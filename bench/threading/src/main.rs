//! Thread-operation microbenchmarks (the Shenango paper's Table 2 and more): Corral uthreads
//! against Go goroutines and pinned pthreads, measured in the same invocation. Prints medians
//! and ratios; `--json` also writes every sample.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use corral::{Condvar, Config, Mutex, Runtime, WaitGroup};

#[derive(Parser, Debug)]
#[command(about = "Corral thread operations vs Go and pthreads (medians, same run)")]
struct Args {
    /// Timed repetitions per operation and system.
    #[arg(long, default_value_t = 11)]
    reps: usize,
    /// Multiplies iteration counts (0.01 for a quick smoke run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// CPU for single-CPU operations (and the first of two).
    #[arg(long, default_value_t = 0)]
    cpu0: usize,
    /// Second CPU for two-CPU operations.
    #[arg(long, default_value_t = 1)]
    cpu1: usize,
    /// Skip the Go and pthreads peers.
    #[arg(long)]
    no_peers: bool,
    /// Only these operations (comma-separated); default all.
    #[arg(long, value_delimiter = ',')]
    ops: Vec<String>,
    /// Write all samples and medians as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

impl Args {
    fn selected(&self, op: &str) -> bool {
        self.ops.is_empty() || self.ops.iter().any(|o| o == op)
    }
}

const OPS: [&str; 6] = [
    "yield",
    "spawn_join",
    "mutex",
    "condvar",
    "wake_latency",
    "spawn_throughput",
];

struct Results {
    /// (system, op) -> samples in ns per op
    samples: Vec<(String, String, Vec<f64>)>,
}

impl Results {
    fn median(&self, system: &str, op: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|(s, o, _)| s == system && o == op)
            .map(|(_, _, v)| median(v))
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn scaled(base: f64, scale: f64) -> u64 {
    ((base * scale).round() as u64).max(1)
}

/// Runs `batch(n)` once to warm up, then `reps` times; each returns ns per operation.
fn measure(reps: usize, n: u64, mut batch: impl FnMut(u64) -> f64) -> Vec<f64> {
    batch((n / 10).max(1));
    (0..reps).map(|_| batch(n)).collect()
}

fn runtime(cpus: Vec<usize>) -> Runtime {
    Runtime::new(Config::default().kthreads(cpus.len()).cpus(cpus)).expect("runtime starts")
}

fn corral_yield(rt: &Runtime, k: u64) -> f64 {
    rt.block_on(move || {
        let start = Instant::now();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                corral::spawn(move || {
                    for _ in 0..k {
                        corral::yield_now();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        start.elapsed().as_nanos() as f64 / (2 * k) as f64
    })
}

fn corral_spawn_join(rt: &Runtime, k: u64) -> f64 {
    rt.block_on(move || {
        let start = Instant::now();
        for i in 0..k {
            let h = corral::spawn(move || i + 1);
            assert_eq!(h.join().unwrap(), i + 1);
        }
        start.elapsed().as_nanos() as f64 / k as f64
    })
}

fn corral_mutex(rt: &Runtime, k: u64) -> f64 {
    rt.block_on(move || {
        let m = Mutex::new(0u64);
        let start = Instant::now();
        for _ in 0..k {
            let mut g = m.lock();
            *g += 1;
        }
        let el = start.elapsed();
        assert_eq!(*m.lock(), k);
        el.as_nanos() as f64 / k as f64
    })
}

fn corral_condvar(rt: &Runtime, n: u64) -> f64 {
    let n = n + n % 2;
    rt.block_on(move || {
        let shared = Arc::new((Mutex::new(0u8), Condvar::new()));
        let start = Instant::now();
        let hs: Vec<_> = (0..2u8)
            .map(|me| {
                let s = shared.clone();
                corral::spawn(move || {
                    let (m, cv) = &*s;
                    for _ in 0..n / 2 {
                        let mut turn = m.lock();
                        cv.wait_while(&mut turn, |t| *t != me);
                        *turn = 1 - me;
                        cv.notify_one();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        start.elapsed().as_nanos() as f64 / n as f64
    })
}

fn spin_until(deadline_ns: u64) {
    while corral::now_ns() < deadline_ns {
        std::hint::spin_loop();
    }
}

/// Waker stamps t0 and notifies a uthread blocked on a condvar whose kthread has parked; the
/// waiter stamps t1 when it returns. The waker keeps its own kthread busy so the other kthread
/// must pick the waiter up. Returns the median latency of `rounds`.
fn corral_wake_latency(rt: &Runtime, rounds: u64) -> f64 {
    rt.block_on(move || {
        let slot = Arc::new((Mutex::new(None::<u64>), Condvar::new()));
        let result = Arc::new(AtomicI64::new(-1));
        let (s2, r2) = (slot.clone(), result.clone());
        let waiter = corral::spawn(move || {
            let (m, cv) = &*s2;
            loop {
                let mut g = m.lock();
                cv.wait_while(&mut g, |v| v.is_none());
                let t1 = corral::now_ns();
                let t0 = g.take().unwrap();
                drop(g);
                if t0 == u64::MAX {
                    return;
                }
                r2.store((t1 - t0) as i64, Ordering::Release);
            }
        });
        let mut lat = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            result.store(-1, Ordering::Release);
            spin_until(corral::now_ns() + 200_000);
            let t0 = corral::now_ns();
            *slot.0.lock() = Some(t0);
            slot.1.notify_one();
            let min_end = t0 + 50_000;
            loop {
                let v = result.load(Ordering::Acquire);
                if v >= 0 && corral::now_ns() >= min_end {
                    lat.push(v as f64);
                    break;
                }
                if corral::now_ns() > t0 + 100_000_000 {
                    // Not picked up by the other kthread: let this one run it.
                    corral::yield_now();
                }
            }
        }
        *slot.0.lock() = Some(u64::MAX);
        slot.1.notify_one();
        waiter.join().unwrap();
        median(&lat)
    })
}

fn corral_spawn_throughput(rt: &Runtime, batches: u64) -> f64 {
    const BATCH: u64 = 1000;
    rt.block_on(move || {
        // Borrowed by every uthread, as Go's closures capture by reference: no reference
        // counts bouncing between cores.
        let counter: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
        let wg: &'static WaitGroup = Box::leak(Box::new(WaitGroup::new()));
        let start = Instant::now();
        for _ in 0..batches {
            wg.add(BATCH as usize);
            for _ in 0..BATCH {
                // Like `go f()`: nobody joins these, so no join slot is made.
                corral::spawn_detached(move || {
                    counter.fetch_add(1, Ordering::Relaxed);
                    wg.done();
                });
            }
            wg.wait();
        }
        let el = start.elapsed();
        assert_eq!(counter.load(Ordering::Relaxed), batches * BATCH);
        el.as_nanos() as f64 / (batches * BATCH) as f64
    })
}

/// One timed batch of an operation: runs `n` of it on the runtime, returns ns per operation.
type Batch = fn(&Runtime, u64) -> f64;

/// Measures one operation on Corral, on a runtime sized for it.
fn measure_corral(op: &str, args: &Args) -> Vec<f64> {
    let s = args.scale;
    let (cpus, n, f): (Vec<usize>, u64, Batch) = match op {
        "yield" => (vec![args.cpu0], scaled(1_000_000.0, s), corral_yield),
        "spawn_join" => (vec![args.cpu0], scaled(200_000.0, s), corral_spawn_join),
        "mutex" => (vec![args.cpu0], scaled(10_000_000.0, s), corral_mutex),
        "condvar" => (vec![args.cpu0], scaled(200_000.0, s), corral_condvar),
        "wake_latency" => (
            vec![args.cpu0, args.cpu1],
            ((200.0 * s.max(0.05)).round() as u64).max(10),
            corral_wake_latency,
        ),
        "spawn_throughput" => (
            vec![args.cpu0, args.cpu1],
            scaled(1_000.0, s),
            corral_spawn_throughput,
        ),
        _ => unreachable!("ops are validated in main"),
    };
    let rt = runtime(cpus);
    measure(args.reps, n, |n| f(&rt, n))
}

fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("bench/threading is two levels down")
}

fn build_peers() -> Result<(PathBuf, PathBuf), String> {
    let peers = repo_root().join("bench/peers");
    let go_dir = peers.join("go");
    let status = Command::new("go")
        .args(["build", "-o", "go-peer", "."])
        .current_dir(&go_dir)
        .status()
        .map_err(|e| format!("cannot run go: {e}"))?;
    if !status.success() {
        return Err("go build of the Go peer failed".into());
    }
    let c_dir = peers.join("pthreads");
    let status = Command::new("gcc")
        .args([
            "-O2",
            "-Wall",
            "-Wextra",
            "-pthread",
            "-o",
            "pthreads-peer",
            "peer.c",
        ])
        .current_dir(&c_dir)
        .status()
        .map_err(|e| format!("cannot run gcc: {e}"))?;
    if !status.success() {
        return Err("gcc build of the pthreads peer failed".into());
    }
    Ok((go_dir.join("go-peer"), c_dir.join("pthreads-peer")))
}

fn run_peer(bin: &Path, op: &str, args: &Args, results: &mut Results) -> Result<(), String> {
    let out = Command::new(bin)
        .args(["--ops", op])
        .args([
            "--reps",
            &args.reps.to_string(),
            "--scale",
            &args.scale.to_string(),
            "--cpu0",
            &args.cpu0.to_string(),
            "--cpu1",
            &args.cpu1.to_string(),
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let rec = parse_peer_line(line).ok_or_else(|| format!("bad peer output line: {line}"))?;
        results.samples.push(rec);
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct PeerLine {
    peer: String,
    op: String,
    unit: String,
    samples: Vec<f64>,
}

/// One line of peer output: `{"peer":..,"op":..,"unit":"ns_per_op","samples":[..]}`.
fn parse_peer_line(line: &str) -> Option<(String, String, Vec<f64>)> {
    let rec: PeerLine = serde_json::from_str(line).ok()?;
    (rec.unit == "ns_per_op" && !rec.samples.is_empty()).then_some((rec.peer, rec.op, rec.samples))
}

struct Target {
    op: &'static str,
    max_vs_go: Option<f64>,
    min_pthreads_over_corral: Option<f64>,
}

const TARGETS: [Target; 4] = [
    Target {
        op: "yield",
        max_vs_go: Some(0.4),
        min_pthreads_over_corral: Some(10.0),
    },
    Target {
        op: "spawn_join",
        max_vs_go: Some(0.5),
        min_pthreads_over_corral: Some(10.0),
    },
    Target {
        op: "mutex",
        max_vs_go: Some(1.0),
        min_pthreads_over_corral: None,
    },
    Target {
        op: "condvar",
        max_vs_go: Some(0.6),
        min_pthreads_over_corral: Some(10.0),
    },
];

fn fmt_ns(v: Option<f64>) -> String {
    match v {
        Some(ns) if ns >= 10_000.0 => format!("{:.1} us", ns / 1000.0),
        Some(ns) => format!("{ns:.1} ns"),
        None => "-".into(),
    }
}

fn print_table(results: &Results, args: &Args) {
    println!();
    println!(
        "{:<18} {:>11} {:>11} {:>11} {:>10} {:>14}  target",
        "op (median)", "corral", "go", "pthreads", "corral/go", "pthreads/corral"
    );
    for op in OPS.into_iter().filter(|op| args.selected(op)) {
        let c = results.median("corral", op);
        let g = results.median("go", op);
        let p = results.median("pthreads", op);
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "-".into(),
        };
        let target = TARGETS
            .iter()
            .find(|t| t.op == op)
            .map_or(String::new(), |t| {
                let verdict = |ok: Option<bool>| match ok {
                    Some(true) => "met",
                    Some(false) => "MISSED",
                    None => "not measured",
                };
                let mut parts = Vec::new();
                if let Some(max) = t.max_vs_go {
                    let ok = c.zip(g).map(|(c, g)| c / g <= max);
                    parts.push(format!("<= {max}x go {}", verdict(ok)));
                }
                if let Some(min) = t.min_pthreads_over_corral {
                    let ok = p.zip(c).map(|(p, c)| p / c >= min);
                    parts.push(format!(">= {min}x faster than pthreads {}", verdict(ok)));
                }
                parts.join("; ")
            });
        println!(
            "{:<18} {:>11} {:>11} {:>11} {:>10} {:>14}  {}",
            op,
            fmt_ns(c),
            fmt_ns(g),
            fmt_ns(p),
            ratio(c, g),
            ratio(p, c),
            target
        );
    }
    if let Some(c) = results.median("corral", "spawn_throughput") {
        println!(
            "\nspawn_throughput on 2 CPUs: corral {:.2} M threads/s",
            1000.0 / c
        );
    }
}

#[derive(serde::Serialize)]
struct JsonRow<'a> {
    system: &'a str,
    op: &'a str,
    median_ns: f64,
    samples_ns: &'a [f64],
}

fn write_json(path: &Path, results: &Results, args: &Args) -> std::io::Result<()> {
    let rows: Vec<JsonRow<'_>> = results
        .samples
        .iter()
        .map(|(system, op, v)| JsonRow {
            system,
            op,
            median_ns: median(v),
            samples_ns: v,
        })
        .collect();
    let doc = serde_json::json!({
        "reps": args.reps, "scale": args.scale, "cpu0": args.cpu0, "cpu1": args.cpu1, "results": rows,
    });
    std::fs::write(path, serde_json::to_string_pretty(&doc)?)
}

fn main() {
    let args = Args::parse();
    if args.reps == 0 || args.scale <= 0.0 {
        eprintln!("error: --reps must be at least 1 and --scale positive");
        std::process::exit(2);
    }
    if let Some(bad) = args.ops.iter().find(|o| !OPS.contains(&o.as_str())) {
        eprintln!(
            "error: unknown --ops entry {bad:?}; known: {}",
            OPS.join(",")
        );
        std::process::exit(2);
    }
    let mut results = Results {
        samples: Vec::new(),
    };
    let peers = if args.no_peers {
        Vec::new()
    } else {
        match build_peers() {
            Ok((go, pthreads)) => vec![("go", go), ("pthreads", pthreads)],
            Err(e) => {
                eprintln!("error: cannot build the peers: {e}");
                std::process::exit(1);
            }
        }
    };
    // One operation at a time on every system, so that a change in background load between
    // phases cannot skew a ratio.
    for op in OPS.into_iter().filter(|op| args.selected(op)) {
        eprintln!("{op}: corral ({} reps, scale {})", args.reps, args.scale);
        let samples = measure_corral(op, &args);
        results.samples.push(("corral".into(), op.into(), samples));
        for (name, bin) in &peers {
            eprintln!("{op}: {name}");
            if let Err(e) = run_peer(bin, op, &args, &mut results) {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
    print_table(&results, &args);
    if let Some(path) = &args.json
        && let Err(e) = write_json(path, &results, &args)
    {
        eprintln!("error: cannot write {}: {e}", path.display());
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_peer_lines() {
        let (p, o, s) = parse_peer_line(
            r#"{"peer":"go","op":"yield","unit":"ns_per_op","samples":[1.5, 2,3.25]}"#,
        )
        .unwrap();
        assert_eq!((p.as_str(), o.as_str()), ("go", "yield"));
        assert_eq!(s, vec![1.5, 2.0, 3.25]);
        assert!(
            parse_peer_line(r#"{"peer":"go","op":"yield","unit":"ns_per_op","samples":[]}"#)
                .is_none()
        );
        assert!(parse_peer_line("garbage").is_none());
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
