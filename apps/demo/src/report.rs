//! Turning measurements into what a reader sees: the side-by-side table, the target checks and
//! the CSV. Plain functions of the results, so that they are tested on known inputs.

use std::fmt::Write as _;

use corral_loadgen::{ServiceDist, Stage, Summary, TailSplit};
use serde::{Deserialize, Serialize};

use crate::results::{BoundPoint, Burst, Point, System, SystemRun};

/// A latency p99.9 that counts lost requests as infinitely late: when more than 0.1% of the
/// requests sent were never answered, no finite p99.9 is honest. `None` also when nothing at
/// all was answered.
pub fn tail_p999_ns(s: &Summary) -> Option<u64> {
    if s.matched == 0 || s.lost.saturating_mul(1000) > s.sent {
        None
    } else {
        Some(s.latency.p999_ns)
    }
}

/// Microseconds with as many decimals as are meaningful at that size.
pub fn fmt_us(ns: u64) -> String {
    let us = ns as f64 / 1e3;
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 100.0 {
        format!("{us:.1}")
    } else {
        format!("{us:.0}")
    }
}

fn fmt_opt_us(ns: Option<u64>) -> String {
    ns.map_or_else(|| "-".into(), fmt_us)
}

/// A tail that may be unbounded because of losses.
fn fmt_tail(s: &Summary) -> String {
    match tail_p999_ns(s) {
        Some(ns) => fmt_us(ns),
        None if s.matched == 0 => "none".into(),
        None => format!(">{} lost", fmt_us(s.latency.p999_ns)),
    }
}

fn fmt_frac(f: Option<f64>) -> String {
    f.map_or_else(|| "-".into(), |f| format!("{f:.2}"))
}

/// A service-time distribution the way a person writes it (`exp:10us`), where the
/// generators' own form is in nanoseconds.
pub fn service_label(d: &ServiceDist) -> String {
    let us = |ns: f64| {
        let v = ns / 1e3;
        if (v - v.round()).abs() < 1e-9 {
            format!("{v:.0}us")
        } else {
            format!("{v}us")
        }
    };
    match *d {
        ServiceDist::Constant { ns } => format!("const:{}", us(ns as f64)),
        ServiceDist::Exponential { mean_ns } => format!("exp:{}", us(mean_ns)),
        ServiceDist::Bimodal {
            short_ns,
            long_ns,
            long_fraction,
        } => format!(
            "bimodal:{}:{}:{long_fraction}",
            us(short_ns as f64),
            us(long_ns as f64)
        ),
    }
}

pub fn fmt_pct(load: f64) -> String {
    let pct = load * 100.0;
    if (pct - pct.round()).abs() < 1e-6 {
        format!("{pct:.0}%")
    } else {
        format!("{pct:.1}%")
    }
}

/// A text table: right-aligned columns, except those marked left-aligned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    pub left: Vec<bool>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            left: vec![false; headers.len()],
        }
    }

    pub fn left_align(mut self, col: usize) -> Table {
        self.left[col] = true;
        self
    }

    pub fn push(&mut self, row: Vec<String>) {
        assert_eq!(row.len(), self.headers.len(), "row width");
        self.rows.push(row);
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let width: Vec<usize> = (0..n)
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (c, cell) in cells.iter().enumerate() {
                let pad = width[c] - cell.chars().count();
                if c > 0 {
                    s.push_str("  ");
                }
                if self.left[c] {
                    s.push_str(cell);
                    if c + 1 < n {
                        s.push_str(&" ".repeat(pad));
                    }
                } else {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(cell);
                }
            }
            s.trim_end().to_owned()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        let total: usize = width.iter().sum::<usize>() + 2 * n.saturating_sub(1);
        out.push_str(&"-".repeat(total));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// One system's numbers at one load, as the table shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cols {
    pub achieved_rps: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// p99.9 with losses counted (see [`tail_p999_ns`]).
    pub tail_p999_ns: Option<u64>,
    pub matched: u64,
    pub sent: u64,
    pub lost: u64,
    pub fell_behind: Option<String>,
    pub batch_units_per_s: Option<f64>,
    pub batch_fraction: Option<f64>,
    pub reallocations_per_s: Option<f64>,
    /// Another iokerneld was running during the point.
    pub interference: bool,
    /// CPUs' worth of other processes' time during the point.
    pub foreign_cpus: Option<f64>,
}

impl Cols {
    /// The p99 with losses counted: unbounded when more than 1% of the requests sent were
    /// never answered.
    pub fn tail_p99_ns(&self) -> Option<u64> {
        (self.matched > 0 && self.lost.saturating_mul(100) <= self.sent).then_some(self.p99_ns)
    }

    pub fn of(p: &Point) -> Cols {
        let s = &p.summary;
        Cols {
            achieved_rps: s.achieved_rps,
            p50_ns: s.latency.p50_ns,
            p99_ns: s.latency.p99_ns,
            p999_ns: s.latency.p999_ns,
            tail_p999_ns: tail_p999_ns(s),
            matched: s.matched,
            sent: s.sent,
            lost: s.lost,
            fell_behind: s
                .fell_behind
                .then(|| s.fell_behind_reason.clone().unwrap_or_default()),
            batch_units_per_s: p.batch_units_per_s,
            batch_fraction: p.batch_fraction,
            reallocations_per_s: p.reallocations_per_s,
            interference: !p.interference.is_empty(),
            foreign_cpus: p.foreign_cpus,
        }
    }
}

/// One line of the side-by-side table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    pub load: f64,
    pub rate_rps: f64,
    pub corral: Option<Cols>,
    pub linux: Option<Cols>,
    /// The dedicated-core floor.
    #[serde(default)]
    pub dedicated: Option<Cols>,
    pub bound_p999_ns: Option<u64>,
    /// Corral p99.9 over Linux p99.9 (as measured, losses aside).
    pub ratio_p999: Option<f64>,
    /// Corral p99.9 over the dedicated floor's p99.9 (as measured, losses aside).
    #[serde(default)]
    pub ratio_dedicated_p999: Option<f64>,
    /// Lost requests, generators that fell behind, missing data: never hidden.
    pub flags: Vec<String>,
}

/// Other processes' CPU use during a point above which the point is flagged: 5% of a CPU.
pub const FOREIGN_CPU_FLAG: f64 = 0.05;

fn same_load(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

pub fn find_point(run: Option<&SystemRun>, load: f64) -> Option<&Point> {
    run?.points.iter().find(|p| same_load(p.load, load))
}

pub fn find_bound(bounds: &[BoundPoint], load: f64) -> Option<&BoundPoint> {
    bounds.iter().find(|b| same_load(b.load, load))
}

fn flags_of(prefix: &str, c: &Cols) -> Vec<String> {
    let mut f = Vec::new();
    if c.lost > 0 {
        f.push(format!("{prefix} lost {}/{}", c.lost, c.sent));
    }
    if c.fell_behind.is_some() {
        f.push(format!("{prefix} gen behind"));
    }
    if c.batch_units_per_s.is_none() {
        f.push(format!("{prefix} no batch data"));
    }
    if c.interference {
        f.push(format!("{prefix} other iokerneld running"));
    }
    if let Some(x) = c.foreign_cpus.filter(|&x| x > FOREIGN_CPU_FLAG) {
        f.push(format!("{prefix} other load {x:.2} CPU"));
    }
    f
}

/// The measured runs of a sweep, by system.
#[derive(Clone, Copy, Debug, Default)]
pub struct SweepRuns<'a> {
    pub corral: Option<&'a SystemRun>,
    pub linux: Option<&'a SystemRun>,
    pub dedicated: Option<&'a SystemRun>,
}

impl<'a> SweepRuns<'a> {
    pub fn of(runs: &'a [SystemRun]) -> Self {
        let find = |s: System| runs.iter().find(|r| r.system == s);
        SweepRuns {
            corral: find(System::Corral),
            linux: find(System::Linux),
            dedicated: find(System::Dedicated),
        }
    }
}

/// `a` p99.9 over `b` p99.9, as measured.
fn p999_ratio(a: &Option<Cols>, b: &Option<Cols>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a.matched > 0 && b.matched > 0 && b.p999_ns > 0 => {
            Some(a.p999_ns as f64 / b.p999_ns as f64)
        }
        _ => None,
    }
}

pub fn sweep_rows(
    loads: &[f64],
    rates: &[f64],
    runs: SweepRuns<'_>,
    bounds: &[BoundPoint],
) -> Vec<SweepRow> {
    loads
        .iter()
        .zip(rates)
        .map(|(&load, &rate_rps)| {
            let c = find_point(runs.corral, load).map(Cols::of);
            let l = find_point(runs.linux, load).map(Cols::of);
            let d = find_point(runs.dedicated, load).map(Cols::of);
            let mut flags = Vec::new();
            for (system, cols, run) in [
                (System::Corral, &c, runs.corral),
                (System::Linux, &l, runs.linux),
                (System::Dedicated, &d, runs.dedicated),
            ] {
                let letter = system.letter();
                if let Some(cols) = cols {
                    let mut f = flags_of(letter, cols);
                    // The floor runs no batch job: no batch data is expected.
                    if system == System::Dedicated {
                        f.retain(|f| !f.ends_with("no batch data"));
                    }
                    flags.extend(f);
                } else if run.is_some() {
                    flags.push(format!("{letter} not measured"));
                }
            }
            SweepRow {
                load,
                rate_rps,
                ratio_p999: p999_ratio(&c, &l),
                ratio_dedicated_p999: p999_ratio(&c, &d),
                corral: c,
                linux: l,
                dedicated: d,
                bound_p999_ns: find_bound(bounds, load).map(|b| b.p999_ns),
                flags,
            }
        })
        .collect()
}

fn tail_cell(c: &Cols) -> String {
    match c.tail_p999_ns {
        Some(ns) => fmt_us(ns),
        None if c.matched == 0 => "none".into(),
        None => format!(">{} lost", fmt_us(c.p999_ns)),
    }
}

/// The side-by-side table; latencies in µs.
pub fn sweep_table(rows: &[SweepRow], corral: bool, linux: bool, dedicated: bool) -> Table {
    let mut h = vec!["load", "rate/s"];
    if corral {
        h.extend([
            "C achieved",
            "C p50",
            "C p99",
            "C p99.9",
            "C batch",
            "C realloc/s",
        ]);
    }
    if linux {
        h.extend(["L achieved", "L p50", "L p99", "L p99.9", "L batch"]);
    }
    if dedicated {
        h.extend(["D p50", "D p99", "D p99.9"]);
    }
    h.extend(["bound p99.9", "2x bound"]);
    if corral && linux {
        h.push("C/L p99.9");
    }
    if corral && dedicated {
        h.push("C/D p99.9");
    }
    h.push("flags");
    let flags_col = h.len() - 1;
    let mut t = Table::new(&h).left_align(flags_col);
    for r in rows {
        let mut row = vec![fmt_pct(r.load), format!("{:.0}", r.rate_rps)];
        let dash = || "-".to_string();
        if corral {
            match &r.corral {
                Some(c) => row.extend([
                    format!("{:.0}", c.achieved_rps),
                    fmt_us(c.p50_ns),
                    fmt_us(c.p99_ns),
                    tail_cell(c),
                    fmt_frac(c.batch_fraction),
                    c.reallocations_per_s
                        .map_or_else(dash, |r| format!("{r:.0}")),
                ]),
                None => row.extend((0..6).map(|_| dash())),
            }
        }
        if linux {
            match &r.linux {
                Some(l) => row.extend([
                    format!("{:.0}", l.achieved_rps),
                    fmt_us(l.p50_ns),
                    fmt_us(l.p99_ns),
                    tail_cell(l),
                    fmt_frac(l.batch_fraction),
                ]),
                None => row.extend((0..5).map(|_| dash())),
            }
        }
        if dedicated {
            match &r.dedicated {
                Some(d) => row.extend([fmt_us(d.p50_ns), fmt_us(d.p99_ns), tail_cell(d)]),
                None => row.extend((0..3).map(|_| dash())),
            }
        }
        row.push(fmt_opt_us(r.bound_p999_ns));
        row.push(fmt_opt_us(r.bound_p999_ns.map(|b| 2 * b)));
        if corral && linux {
            row.push(r.ratio_p999.map_or_else(dash, |x| format!("{x:.2}")));
        }
        if corral && dedicated {
            row.push(
                r.ratio_dedicated_p999
                    .map_or_else(dash, |x| format!("{x:.2}")),
            );
        }
        row.push(r.flags.join("; "));
        t.push(row);
    }
    t
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Met,
    Missed,
    /// A number the check needs was not measured (a system not run, no batch data).
    NotMeasured,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Met => "met",
            Verdict::Missed => "MISSED",
            Verdict::NotMeasured => "n/a",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Corral p99.9 at most half of Linux's.
    HalfOfLinuxP999,
    /// Corral p99.9 at most twice the zero-overhead bound.
    TwiceBoundP999,
    /// Corral's batch job does at least as many units per second as Linux's.
    BatchAtLeastLinux,
    /// Corral p99.9 at most 1.5 times the dedicated-core floor's.
    NearDedicatedP999,
    /// Corral p99 at most Linux's.
    P99AtMostLinux,
    /// The dedicated floor's p99.9 at most five times the zero-overhead bound.
    DedicatedFiveBoundP999,
}

impl Target {
    pub const ALL: [Target; 6] = [
        Target::HalfOfLinuxP999,
        Target::TwiceBoundP999,
        Target::BatchAtLeastLinux,
        Target::NearDedicatedP999,
        Target::P99AtMostLinux,
        Target::DedicatedFiveBoundP999,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Target::HalfOfLinuxP999 => "C p99.9 <= 0.5x L p99.9",
            Target::TwiceBoundP999 => "C p99.9 <= 2x bound",
            Target::BatchAtLeastLinux => "C batch >= L batch",
            Target::NearDedicatedP999 => "C p99.9 <= 1.5x D p99.9",
            Target::P99AtMostLinux => "C p99 <= L p99",
            Target::DedicatedFiveBoundP999 => "D p99.9 <= 5x bound",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub load: f64,
    pub target: Target,
    pub verdict: Verdict,
    /// The numbers compared, for the reader.
    pub detail: String,
}

fn tail_text(t: Option<u64>) -> String {
    t.map_or_else(
        || "unbounded (lost)".into(),
        |ns| format!("{} us", fmt_us(ns)),
    )
}

/// Whether a system's p99.9 (losses counted) is within `factor` times the bound's.
fn within_bound(
    cols: Option<&Cols>,
    bound_ns: Option<u64>,
    factor: u64,
    needs: &str,
) -> (Verdict, String) {
    match (cols, bound_ns) {
        (Some(c), Some(b)) => (
            if c.tail_p999_ns.is_some_and(|t| t <= factor * b) {
                Verdict::Met
            } else {
                Verdict::Missed
            },
            format!(
                "{} vs {factor}x {} us",
                tail_text(c.tail_p999_ns),
                fmt_us(b)
            ),
        ),
        _ => (Verdict::NotMeasured, needs.into()),
    }
}

/// The targets at every load up to `max_load`. Latency comparisons use the p99.9 with
/// losses counted ([`tail_p999_ns`]); batch compares units per second, the same work in both
/// systems.
pub fn check_targets(rows: &[SweepRow], max_load: f64) -> Vec<Check> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.load <= max_load + 1e-9) {
        let c = r.corral.as_ref();
        let l = r.linux.as_ref();
        let d = r.dedicated.as_ref();
        for target in Target::ALL {
            let (verdict, detail) = match target {
                Target::NearDedicatedP999 => match (c, d) {
                    (Some(c), Some(d)) => {
                        // Within 1.5x, in integers: 2c <= 3d. A floor that lost requests
                        // bounds nothing; a Corral that did is over any finite floor.
                        let ok = match (c.tail_p999_ns, d.tail_p999_ns) {
                            (Some(c), Some(d)) => 2 * c <= 3 * d,
                            (Some(_), None) => true,
                            (None, _) => false,
                        };
                        (
                            if ok { Verdict::Met } else { Verdict::Missed },
                            format!(
                                "{} vs 1.5x {}",
                                tail_text(c.tail_p999_ns),
                                tail_text(d.tail_p999_ns)
                            ),
                        )
                    }
                    _ => (Verdict::NotMeasured, "needs Corral and dedicated".into()),
                },
                Target::HalfOfLinuxP999 => match (c, l) {
                    (Some(c), Some(l)) => {
                        let ok = match (c.tail_p999_ns, l.tail_p999_ns) {
                            (Some(c), Some(l)) => 2 * c <= l,
                            (Some(_), None) => true,
                            (None, _) => false,
                        };
                        (
                            if ok { Verdict::Met } else { Verdict::Missed },
                            format!(
                                "{} vs {}",
                                tail_text(c.tail_p999_ns),
                                tail_text(l.tail_p999_ns)
                            ),
                        )
                    }
                    _ => (Verdict::NotMeasured, "needs both systems".into()),
                },
                Target::P99AtMostLinux => match (c, l) {
                    (Some(c), Some(l)) => {
                        let ok = match (c.tail_p99_ns(), l.tail_p99_ns()) {
                            (Some(c), Some(l)) => c <= l,
                            (Some(_), None) => true,
                            (None, _) => false,
                        };
                        (
                            if ok { Verdict::Met } else { Verdict::Missed },
                            format!(
                                "{} vs {}",
                                tail_text(c.tail_p99_ns()),
                                tail_text(l.tail_p99_ns())
                            ),
                        )
                    }
                    _ => (Verdict::NotMeasured, "needs both systems".into()),
                },
                Target::DedicatedFiveBoundP999 => {
                    within_bound(d, r.bound_p999_ns, 5, "needs dedicated and the bound")
                }
                Target::TwiceBoundP999 => {
                    within_bound(c, r.bound_p999_ns, 2, "needs Corral and the bound")
                }
                Target::BatchAtLeastLinux => {
                    match (
                        c.and_then(|c| c.batch_units_per_s),
                        l.and_then(|l| l.batch_units_per_s),
                    ) {
                        (Some(cb), Some(lb)) => (
                            if cb >= lb {
                                Verdict::Met
                            } else {
                                Verdict::Missed
                            },
                            format!("{cb:.0} vs {lb:.0} units/s"),
                        ),
                        _ => (
                            Verdict::NotMeasured,
                            "needs batch throughput of both systems".into(),
                        ),
                    }
                }
            };
            out.push(Check {
                load: r.load,
                target,
                verdict,
                detail,
            });
        }
    }
    out
}

/// The checks as a table (one row per load) and one summary line per target.
pub fn render_checks(checks: &[Check]) -> String {
    let mut loads: Vec<f64> = checks.iter().map(|c| c.load).collect();
    loads.dedup_by(|a, b| same_load(*a, *b));
    let mut h = vec!["load"];
    h.extend(Target::ALL.iter().map(|t| t.title()));
    let mut t = Table::new(&h);
    for c in 1..h.len() {
        t = t.left_align(c);
    }
    for &load in &loads {
        let mut row = vec![fmt_pct(load)];
        for target in Target::ALL {
            row.push(
                checks
                    .iter()
                    .find(|c| same_load(c.load, load) && c.target == target)
                    .map_or_else(
                        || "-".into(),
                        |c| format!("{} ({})", c.verdict.word(), c.detail),
                    ),
            );
        }
        t.push(row);
    }
    let mut out = t.render();
    for target in Target::ALL {
        let of: Vec<&Check> = checks.iter().filter(|c| c.target == target).collect();
        let met = of.iter().filter(|c| c.verdict == Verdict::Met).count();
        let measured = of
            .iter()
            .filter(|c| c.verdict != Verdict::NotMeasured)
            .count();
        let missed: Vec<String> = of
            .iter()
            .filter(|c| c.verdict == Verdict::Missed)
            .map(|c| fmt_pct(c.load))
            .collect();
        let _ = writeln!(
            out,
            "{}: {}",
            target.title(),
            if measured == 0 {
                "not measured".to_owned()
            } else if missed.is_empty() {
                format!("MET at all {measured} points")
            } else {
                format!(
                    "met at {met} of {measured} points; MISSED at {}",
                    missed.join(", ")
                )
            }
        );
    }
    out
}

/// Quotes a CSV field when it needs it.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

pub fn csv(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = headers.join(",");
    out.push('\n');
    for r in rows {
        let fields: Vec<String> = r.iter().map(|f| csv_field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}

fn us_num(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e3)
}

const SYS_CSV: [&str; 12] = [
    "achieved_rps",
    "p50_us",
    "p99_us",
    "p999_us",
    "p999_with_losses_us",
    "matched",
    "sent",
    "lost",
    "fell_behind",
    "batch_units_per_s",
    "batch_fraction",
    "reallocations_per_s",
];

fn sys_csv(c: Option<&Cols>) -> Vec<String> {
    match c {
        None => vec![String::new(); SYS_CSV.len()],
        Some(c) => vec![
            format!("{:.1}", c.achieved_rps),
            us_num(c.p50_ns),
            us_num(c.p99_ns),
            us_num(c.p999_ns),
            opt(c.tail_p999_ns.map(us_num)),
            c.matched.to_string(),
            c.sent.to_string(),
            c.lost.to_string(),
            c.fell_behind.clone().unwrap_or_default(),
            opt(c.batch_units_per_s.map(|v| format!("{v:.1}"))),
            opt(c.batch_fraction.map(|v| format!("{v:.4}"))),
            opt(c.reallocations_per_s.map(|v| format!("{v:.1}"))),
        ],
    }
}

/// One CSV row per load point, both systems side by side.
pub fn sweep_csv(rows: &[SweepRow]) -> String {
    let mut headers: Vec<String> = vec!["load".into(), "rate_rps".into()];
    for sys in [System::Corral, System::Linux, System::Dedicated] {
        headers.extend(SYS_CSV.iter().map(|h| format!("{}_{h}", sys.name())));
    }
    headers.extend([
        "bound_p999_us".into(),
        "bound_2x_p999_us".into(),
        "corral_over_linux_p999".into(),
        "corral_over_dedicated_p999".into(),
        "flags".into(),
    ]);
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![format!("{}", r.load), format!("{:.1}", r.rate_rps)];
            row.extend(sys_csv(r.corral.as_ref()));
            row.extend(sys_csv(r.linux.as_ref()));
            row.extend(sys_csv(r.dedicated.as_ref()));
            row.push(opt(r.bound_p999_ns.map(us_num)));
            row.push(opt(r.bound_p999_ns.map(|b| us_num(2 * b))));
            row.push(opt(r.ratio_p999.map(|x| format!("{x:.4}"))));
            row.push(opt(r.ratio_dedicated_p999.map(|x| format!("{x:.4}"))));
            row.push(r.flags.join("; "));
            row
        })
        .collect();
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    csv(&h, &body)
}

/// The median split of the requests above p99 and above p99.9, per system and load, in µs:
/// where the slowest requests' time went. `from` is the fastest of them (the quantile itself);
/// `unsplit` counts answered requests whose stamps were missing or bad.
pub fn tail_split_table(runs: &[SystemRun]) -> Table {
    let mut h = vec!["system", "load", "tail", "requests", "from"];
    h.extend(Stage::ALL.iter().map(|s| s.title()));
    h.push("unsplit");
    let mut t = Table::new(&h).left_align(0).left_align(2);
    for r in runs {
        for p in &r.points {
            let tail = &p.summary.tail;
            for (label, split) in [(">p99", tail.above_p99), (">p99.9", tail.above_p999)] {
                let mut row = vec![r.system.title().to_owned(), fmt_pct(p.load), label.into()];
                match split {
                    Some(TailSplit {
                        requests,
                        threshold_ns,
                        median,
                        ..
                    }) => {
                        row.push(requests.to_string());
                        row.push(fmt_us(threshold_ns));
                        row.extend(Stage::ALL.iter().map(|&s| fmt_us(median.get(s))));
                    }
                    None => row.extend((0..2 + Stage::ALL.len()).map(|_| "-".to_owned())),
                }
                row.push(tail.unsplit.to_string());
                t.push(row);
            }
        }
    }
    t
}

/// One line on how a system ran: each process's class and CPUs, and its shielding.
pub fn setup_line(system: System, classes: &[String], shield: &str) -> String {
    format!(
        "  {} classes: {}; shielding: {shield}",
        system.title(),
        classes.join("; ")
    )
}

/// The classes and shielding of every system, one line each, under a heading.
pub fn setup_text<'a>(
    runs: impl Iterator<Item = (System, &'a Vec<String>, &'a Option<String>)>,
) -> String {
    let mut out = String::from(
        "\nClasses and shielding (each process's threads as seen after the first point):\n",
    );
    for (system, classes, shield) in runs {
        out.push_str(&setup_line(
            system,
            classes,
            shield.as_deref().unwrap_or("not recorded"),
        ));
        out.push('\n');
    }
    out
}

/// Per system and load: CPU time lost to the host machine (iokerneld's loop gaps on its own
/// CPU; steal on iokerneld's or the load generator's CPU and on the application CPU) and
/// kthreads demoted for ignoring a preemption.
pub fn lost_cpu_table(runs: &[SystemRun]) -> Table {
    let mut t = Table::new(&[
        "system",
        "load",
        "iokerneld gaps",
        "gap ms",
        "steal iok/gen CPU ms",
        "steal app CPU ms",
        "demotions",
    ])
    .left_align(0);
    let dash = || "-".to_owned();
    for r in runs {
        for p in &r.points {
            let mut row = vec![r.system.title().to_owned(), fmt_pct(p.load)];
            match p.iokerneld_stalls {
                Some([n, ns]) => {
                    row.push(n.to_string());
                    row.push(format!("{:.1}", ns as f64 / 1e6));
                }
                None => row.extend([dash(), dash()]),
            }
            match p.steal {
                Some(s) => {
                    row.push(format!("{:.0}", s.iokernel_cpu_ms));
                    row.push(format!("{:.0}", s.app_cpu_ms));
                }
                None => row.extend([dash(), dash()]),
            }
            row.push(p.demotions.as_ref().map_or_else(dash, |d| {
                let by: Vec<String> = d
                    .by_runtime
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(name, n)| format!("{name} {n}"))
                    .collect();
                if by.is_empty() {
                    d.total.to_string()
                } else {
                    format!("{} ({})", d.total, by.join(", "))
                }
            }));
            t.push(row);
        }
    }
    t
}

/// The interval sweep: p99.9 per interval, then batch fraction and reallocations per interval.
pub fn intervals_tables(runs: &[SystemRun], loads: &[f64], bounds: &[BoundPoint]) -> String {
    let label = |r: &SystemRun| interval_label(r.interval_us.unwrap_or(0));
    let mut h: Vec<String> = vec!["load".into(), "rate/s".into()];
    h.extend(runs.iter().map(|r| format!("p99.9 {}", label(r))));
    h.push("bound p99.9".into());
    h.push("2x bound".into());
    let hs: Vec<&str> = h.iter().map(String::as_str).collect();
    let mut lat = Table::new(&hs);
    let mut h2: Vec<String> = vec!["load".into()];
    h2.extend(runs.iter().map(|r| format!("batch {}", label(r))));
    h2.extend(runs.iter().map(|r| format!("realloc/s {}", label(r))));
    let hs2: Vec<&str> = h2.iter().map(String::as_str).collect();
    let mut eff = Table::new(&hs2);
    // Flags by interval, one line each.
    let mut notes: Vec<Vec<String>> = vec![Vec::new(); runs.len()];
    for &load in loads {
        let rate = runs
            .iter()
            .find_map(|r| find_point(Some(r), load).map(|p| p.rate_rps))
            .unwrap_or(0.0);
        let mut row = vec![fmt_pct(load), format!("{rate:.0}")];
        let mut row2 = vec![fmt_pct(load)];
        let mut reallocs = Vec::new();
        for (i, r) in runs.iter().enumerate() {
            match find_point(Some(r), load) {
                Some(p) => {
                    row.push(fmt_tail(&p.summary));
                    row2.push(fmt_frac(p.batch_fraction));
                    reallocs.push(
                        p.reallocations_per_s
                            .map_or_else(|| "-".into(), |x| format!("{x:.0}")),
                    );
                    let flags = flags_of("", &Cols::of(p));
                    if !flags.is_empty() {
                        let flags: Vec<&str> = flags.iter().map(|f| f.trim()).collect();
                        notes[i].push(format!("{} {}", fmt_pct(load), flags.join(", ")));
                    }
                }
                None => {
                    row.push("-".into());
                    row2.push("-".into());
                    reallocs.push("-".into());
                }
            }
        }
        let b = find_bound(bounds, load).map(|b| b.p999_ns);
        row.push(fmt_opt_us(b));
        row.push(fmt_opt_us(b.map(|b| 2 * b)));
        row2.extend(reallocs);
        lat.push(row);
        eff.push(row2);
    }
    let mut out = String::from("p99.9 latency (us) by allocation interval\n");
    out.push_str(&lat.render());
    out.push_str(
        "\nbatch throughput (fraction of batch alone) and core reallocations per second\n",
    );
    out.push_str(&eff.render());
    if notes.iter().any(|n| !n.is_empty()) {
        out.push_str("\nflags:\n");
        for (r, n) in runs.iter().zip(&notes).filter(|(_, n)| !n.is_empty()) {
            out.push_str(&format!("  {}: {}\n", label(r), n.join("; ")));
        }
    }
    out
}

pub fn interval_label(us: u64) -> String {
    if us >= 1000 && us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

pub fn intervals_csv(runs: &[SystemRun], bounds: &[BoundPoint]) -> String {
    let headers = [
        "interval_us",
        "load",
        "rate_rps",
        "achieved_rps",
        "p50_us",
        "p99_us",
        "p999_us",
        "p999_with_losses_us",
        "matched",
        "sent",
        "lost",
        "fell_behind",
        "batch_units_per_s",
        "batch_fraction",
        "reallocations_per_s",
        "bound_p999_us",
    ];
    let mut rows = Vec::new();
    for r in runs {
        for p in &r.points {
            let c = Cols::of(p);
            let mut row = vec![
                opt(r.interval_us),
                format!("{}", p.load),
                format!("{:.1}", p.rate_rps),
            ];
            let sys = sys_csv(Some(&c));
            row.extend(sys[..sys.len()].iter().cloned());
            row.push(opt(find_bound(bounds, p.load).map(|b| us_num(b.p999_ns))));
            rows.push(row);
        }
    }
    csv(&headers, &rows)
}

/// Offered rate at `t_ms` into the burst schedule: base, then peak, then base again.
pub fn burst_rate_at(b: &Burst, t_ms: f64) -> f64 {
    let p = b.phase_secs * 1e3;
    if (p..2.0 * p).contains(&t_ms) {
        b.peak_rps
    } else {
        b.base_rps
    }
}

/// What the burst check found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BurstCheck {
    pub steady_p999_ns: Option<u64>,
    /// Highest window p99.9 during the high phase.
    pub worst_peak_window_ns: Option<u64>,
    /// Windows of the high phase whose p99.9 exceeds twice the steady p99.9 (their starts, ms).
    pub over_windows_ms: Vec<f64>,
    /// Windows of the high phase with no answered request.
    pub empty_windows: usize,
    pub verdict: Verdict,
    /// Why the verdict is what it is, in words.
    pub reason: String,
}

/// Every window of the high phase must stay within twice the steady-state p99.9 at the high
/// rate.
pub fn check_burst(b: &Burst) -> BurstCheck {
    let steady = tail_p999_ns(&b.steady.summary);
    let p = b.phase_secs * 1e3;
    let peak: Vec<_> = b
        .burst
        .windows
        .iter()
        .filter(|w| w.start_ms >= p - 1e-9 && w.start_ms < 2.0 * p - 1e-9)
        .collect();
    let worst = peak
        .iter()
        .filter(|w| w.matched > 0)
        .map(|w| w.latency.p999_ns)
        .max();
    let empty_windows = peak.iter().filter(|w| w.matched == 0).count();
    let over_windows_ms: Vec<f64> = match steady {
        Some(s) => peak
            .iter()
            .filter(|w| w.matched > 0 && w.latency.p999_ns > 2 * s)
            .map(|w| w.start_ms)
            .collect(),
        None => Vec::new(),
    };
    let s = &b.steady.summary;
    let burst_lossy = tail_p999_ns(&b.burst.summary).is_none();
    let (verdict, reason) = match steady {
        None => (
            Verdict::NotMeasured,
            format!(
                "the steady run lost {} of {} requests (over 0.1%), so it has no finite p99.9 \
                 to compare with",
                s.lost, s.sent
            ),
        ),
        Some(_) if peak.is_empty() => (
            Verdict::NotMeasured,
            "the generator reported no windows in the high phase".into(),
        ),
        Some(limit) => {
            let mut why = Vec::new();
            if !over_windows_ms.is_empty() {
                why.push(format!(
                    "{} of {} windows above 2x {} us, the first at {:.0} ms",
                    over_windows_ms.len(),
                    peak.len(),
                    fmt_us(limit),
                    over_windows_ms[0]
                ));
            }
            if empty_windows > 0 {
                why.push(format!("{empty_windows} windows with nothing answered"));
            }
            if burst_lossy {
                why.push(format!(
                    "the burst run lost {} of {} requests",
                    b.burst.summary.lost, b.burst.summary.sent
                ));
            }
            if why.is_empty() {
                (
                    Verdict::Met,
                    format!("all {} windows within 2x {} us", peak.len(), fmt_us(limit)),
                )
            } else {
                (Verdict::Missed, why.join("; "))
            }
        }
    };
    BurstCheck {
        steady_p999_ns: steady,
        worst_peak_window_ns: worst,
        over_windows_ms,
        empty_windows,
        verdict,
        reason,
    }
}

/// The windows around the step up and the step down.
pub fn burst_table(b: &Burst, steady_p999_ns: Option<u64>) -> Table {
    let p = b.phase_secs * 1e3;
    let near =
        |t: f64| (t >= p - 50.0 && t < p + 250.0) || (t >= 2.0 * p - 30.0 && t < 2.0 * p + 100.0);
    let mut t = Table::new(&[
        "t (ms)",
        "offered/s",
        "scheduled",
        "matched",
        "p50",
        "p99.9",
        "vs steady",
        "",
    ])
    .left_align(7);
    for w in b.burst.windows.iter().filter(|w| near(w.start_ms)) {
        let ratio = steady_p999_ns
            .filter(|_| w.matched > 0)
            .map(|s| w.latency.p999_ns as f64 / s as f64);
        let in_peak = w.start_ms >= p && w.start_ms < 2.0 * p;
        let mark = if in_peak && w.matched == 0 {
            "nothing answered"
        } else if in_peak && ratio.is_some_and(|r| r > 2.0) {
            "> 2x"
        } else {
            ""
        };
        t.push(vec![
            format!("{:.0}", w.start_ms),
            format!("{:.0}", burst_rate_at(b, w.start_ms)),
            w.scheduled.to_string(),
            w.matched.to_string(),
            if w.matched > 0 {
                fmt_us(w.latency.p50_ns)
            } else {
                "-".into()
            },
            if w.matched > 0 {
                fmt_us(w.latency.p999_ns)
            } else {
                "-".into()
            },
            ratio.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
            mark.into(),
        ]);
    }
    t
}

pub fn burst_csv(b: &Burst) -> String {
    let headers = [
        "run",
        "start_ms",
        "offered_rps",
        "scheduled",
        "matched",
        "p50_us",
        "p99_us",
        "p999_us",
        "max_us",
    ];
    let mut rows = Vec::new();
    for (name, point) in [("burst", &b.burst), ("steady", &b.steady)] {
        for w in &point.windows {
            rows.push(vec![
                name.to_owned(),
                format!("{}", w.start_ms),
                format!(
                    "{:.1}",
                    if name == "burst" {
                        burst_rate_at(b, w.start_ms)
                    } else {
                        b.peak_rps
                    }
                ),
                w.scheduled.to_string(),
                w.matched.to_string(),
                us_num(w.latency.p50_ns),
                us_num(w.latency.p99_ns),
                us_num(w.latency.p999_ns),
                us_num(w.latency.max_ns),
            ]);
        }
    }
    csv(&headers, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{BatchAlone, CpuSteal, Demotions, Window};
    use corral_loadgen::{Percentiles, Split, TailReport};
    use std::collections::BTreeMap;

    fn summary(p50: u64, p999: u64, sent: u64, lost: u64) -> Summary {
        Summary {
            target_rps: 1000.0,
            duration_s: 1.0,
            scheduled: sent,
            offered_rps: sent as f64,
            sent,
            send_errors: 0,
            sent_rps: sent as f64,
            received: sent - lost,
            matched: sent - lost,
            duplicates: 0,
            unknown: 0,
            malformed: 0,
            late: 0,
            lost,
            achieved_rps: (sent - lost) as f64,
            latency: Percentiles {
                count: sent - lost,
                min_ns: 1000,
                mean_ns: p50 as f64,
                p50_ns: p50,
                p90_ns: p50,
                p99_ns: p999 / 2,
                p999_ns: p999,
                max_ns: p999 * 2,
            },
            lateness: Percentiles::default(),
            fell_behind: false,
            fell_behind_reason: None,
            tail: TailReport::default(),
        }
    }

    fn point(load: f64, s: Summary, batch: Option<f64>, frac: Option<f64>) -> Point {
        Point {
            load,
            rate_rps: load * 100_000.0,
            command: vec!["gen".into()],
            summary: s,
            batch_units_per_s: batch,
            batch_fraction: frac,
            batch_window_s: None,
            reallocations_per_s: Some(1234.0),
            iokerneld_stalls: None,
            windows: Vec::new(),
            interference: Vec::new(),
            foreign_cpus: None,
            steal: None,
            demotions: None,
            raw: serde_json::Value::Null,
        }
    }

    fn run(system: System, points: Vec<Point>) -> SystemRun {
        SystemRun {
            system,
            interval_us: Some(5),
            commands: BTreeMap::new(),
            spin_iterations_per_us: None,
            batch_alone: Some(BatchAlone {
                units_per_s: 1000.0,
                window_s: [0.0, 1.0],
                foreign_cpus: None,
            }),
            points,
            daemon_stats: None,
            daemon_warnings: Vec::new(),
            classes: Vec::new(),
            shield: None,
        }
    }

    fn bound(load: f64, p999: u64) -> BoundPoint {
        BoundPoint {
            load,
            rate_rps: load * 100_000.0,
            p50_ns: 0,
            p99_ns: 0,
            p999_ns: p999,
            mm1_p999_ns: None,
            simulated_requests: 1,
        }
    }

    fn rows() -> Vec<SweepRow> {
        let corral = run(
            System::Corral,
            vec![
                point(
                    0.1,
                    summary(12_000, 80_000, 10_000, 0),
                    Some(880.0),
                    Some(0.88),
                ),
                // Corral lost 0.5%: its tail is unbounded whatever the histogram says.
                point(
                    0.5,
                    summary(20_000, 150_000, 50_000, 250),
                    Some(400.0),
                    Some(0.4),
                ),
                point(0.9, summary(40_000, 900_000, 90_000, 0), None, None),
            ],
        );
        let linux = run(
            System::Linux,
            vec![
                point(
                    0.1,
                    summary(30_000, 2_000_000, 10_000, 3),
                    Some(850.0),
                    Some(0.85),
                ),
                point(
                    0.5,
                    summary(40_000, 3_000_000, 50_000, 0),
                    Some(450.0),
                    Some(0.45),
                ),
                point(
                    0.9,
                    summary(50_000, 5_000_000, 90_000, 9_000),
                    Some(50.0),
                    Some(0.05),
                ),
            ],
        );
        let dedicated = run(
            System::Dedicated,
            vec![
                // Corral's 80 us is within 1.5x of 60 us.
                point(0.1, summary(10_000, 60_000, 10_000, 0), None, None),
                // 150 us (but lost) against 90 us.
                point(0.5, summary(15_000, 90_000, 50_000, 0), None, None),
            ],
        );
        let bounds = [bound(0.1, 77_000), bound(0.5, 140_000), bound(0.9, 690_000)];
        sweep_rows(
            &[0.1, 0.5, 0.9],
            &[10_000.0, 50_000.0, 90_000.0],
            SweepRuns {
                corral: Some(&corral),
                linux: Some(&linux),
                dedicated: Some(&dedicated),
            },
            &bounds,
        )
    }

    #[test]
    fn unanswered_requests_make_the_tail_unbounded() {
        assert_eq!(tail_p999_ns(&summary(1, 500, 10_000, 10)), Some(500));
        assert_eq!(tail_p999_ns(&summary(1, 500, 10_000, 11)), None);
        assert_eq!(tail_p999_ns(&summary(1, 500, 10, 10)), None);
    }

    #[test]
    fn formats() {
        assert_eq!(fmt_us(1_234), "1.23");
        assert_eq!(fmt_us(12_345), "12.3");
        assert_eq!(fmt_us(123_456), "123");
        assert_eq!(fmt_pct(0.1), "10%");
        assert_eq!(fmt_pct(0.125), "12.5%");
        assert_eq!(interval_label(5), "5us");
        assert_eq!(service_label(&"exp:10us".parse().unwrap()), "exp:10us");
        assert_eq!(
            service_label(&"const:2.5us".parse().unwrap()),
            "const:2.5us"
        );
        assert_eq!(
            service_label(&"bimodal".parse().unwrap()),
            "bimodal:5us:55us:0.1"
        );
        assert_eq!(interval_label(1000), "1ms");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("plain"), "plain");
    }

    #[test]
    fn rows_pair_the_systems_and_flag_problems() {
        let r = rows();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].ratio_p999, Some(0.04));
        assert_eq!(r[0].flags, vec!["L lost 3/10000"]);
        assert_eq!(r[1].flags, vec!["C lost 250/50000"]);
        assert!(
            r[2].flags.contains(&"C no batch data".to_string()),
            "{:?}",
            r[2].flags
        );
        assert!(r[2].flags.contains(&"L lost 9000/90000".to_string()));
        // The floor has no batch job, which is not flagged; a point it lacks is.
        assert!(r[2].flags.contains(&"D not measured".to_string()));
        assert!(
            !r[0].flags.iter().any(|f| f.starts_with('D')),
            "{:?}",
            r[0].flags
        );
        assert_eq!(r[0].ratio_dedicated_p999, Some(80.0 / 60.0));
        assert_eq!(r[1].bound_p999_ns, Some(140_000));
        let mut p = point(0.1, summary(1, 1, 10, 0), Some(1.0), Some(1.0));
        p.foreign_cpus = Some(0.3);
        p.interference = vec!["pid 7: iokerneld".into()];
        assert_eq!(
            flags_of("C", &Cols::of(&p)),
            vec!["C other iokerneld running", "C other load 0.30 CPU"]
        );
        p.foreign_cpus = Some(0.01);
        p.interference.clear();
        assert!(flags_of("C", &Cols::of(&p)).is_empty());
    }

    #[test]
    fn table_lines_up() {
        let mut t = Table::new(&["a", "long header", "note"]).left_align(2);
        t.push(vec!["1".into(), "2".into(), "x".into()]);
        t.push(vec!["100".into(), "3".into(), "yy".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "  a  long header  note");
        assert_eq!(lines[1], "-".repeat(3 + 2 + 11 + 2 + 4));
        assert_eq!(lines[2], "  1            2  x");
        assert_eq!(lines[3], "100            3  yy");
    }

    #[test]
    fn sweep_table_shows_every_column_and_flag() {
        let text = sweep_table(&rows(), true, true, true).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 3, "{text}");
        assert!(
            lines[0].contains("C p99.9") && lines[0].contains("L p99.9"),
            "{text}"
        );
        assert!(lines[0].contains("C/L p99.9") && lines[0].contains("2x bound"));
        assert!(lines[0].contains("D p99.9") && lines[0].contains("C/D p99.9"));
        // 10%: Corral 80 us, Linux 2000 us, floor 60 us, bound 77 and 154 us, ratios 0.04
        // and 1.33.
        for cell in [
            "10%", "10000", "80.0", "2000", "60.0", "77.0", "154", "0.04", "1.33", "0.88", "0.85",
            "1234",
        ] {
            assert!(lines[2].contains(cell), "{cell} missing: {}", lines[2]);
        }
        assert!(lines[3].contains(">150 lost"), "{}", lines[3]);
        assert!(lines[3].ends_with("C lost 250/50000"), "{}", lines[3]);
        // Only one system: its columns alone, no ratio.
        let only = sweep_table(&rows(), true, false, false).render();
        assert!(
            !only.contains("L p99.9") && !only.contains("C/L") && !only.contains("D p99.9"),
            "{only}"
        );
    }

    #[test]
    fn targets_are_checked_honestly() {
        let checks = check_targets(&rows(), 0.8);
        // Two loads up to 80%, six targets each.
        assert_eq!(checks.len(), 12);
        let at = |load: f64, t: Target| {
            checks
                .iter()
                .find(|c| same_load(c.load, load) && c.target == t)
                .unwrap()
                .verdict
        };
        assert_eq!(at(0.1, Target::HalfOfLinuxP999), Verdict::Met);
        assert_eq!(at(0.1, Target::TwiceBoundP999), Verdict::Met);
        assert_eq!(at(0.1, Target::BatchAtLeastLinux), Verdict::Met);
        // Corral lost 0.5% at 50%: both latency targets missed; and its batch did less.
        assert_eq!(at(0.5, Target::HalfOfLinuxP999), Verdict::Missed);
        assert_eq!(at(0.5, Target::TwiceBoundP999), Verdict::Missed);
        assert_eq!(at(0.5, Target::BatchAtLeastLinux), Verdict::Missed);
        // 80 us within 1.5x of 60 us; a Corral that lost requests is not near any floor.
        assert_eq!(at(0.1, Target::NearDedicatedP999), Verdict::Met);
        assert_eq!(at(0.5, Target::NearDedicatedP999), Verdict::Missed);
        // Corral's 0.5% lost still leaves its p99 bounded: 75 us against Linux's 1.5 ms.
        assert_eq!(at(0.1, Target::P99AtMostLinux), Verdict::Met);
        assert_eq!(at(0.5, Target::P99AtMostLinux), Verdict::Met);
        // The floor: 60 us within 5x 77 us, 90 us within 5x 140 us.
        assert_eq!(at(0.1, Target::DedicatedFiveBoundP999), Verdict::Met);
        assert_eq!(at(0.5, Target::DedicatedFiveBoundP999), Verdict::Met);
        let text = render_checks(&checks);
        assert!(
            text.contains("C p99 <= L p99: MET at all 2 points"),
            "{text}"
        );
        assert!(text.contains("met (90.0 us vs 5x 140 us)"), "{text}");
        assert!(
            text.contains("C p99.9 <= 1.5x D p99.9: met at 1 of 2 points"),
            "{text}"
        );
        assert!(text.contains("met (80.0 us vs 1.5x 60.0 us)"), "{text}");
        assert!(
            text.contains("met at 1 of 2 points; MISSED at 50%"),
            "{text}"
        );
        // Without Linux and the floor, the comparisons are not measured rather than met.
        let mut only = rows();
        for r in &mut only {
            r.linux = None;
            r.dedicated = None;
        }
        let c = check_targets(&only, 0.8);
        assert!(
            c.iter()
                .filter(|c| c.target != Target::TwiceBoundP999)
                .all(|c| c.verdict == Verdict::NotMeasured)
        );
        // A Linux that lost over 1% has no finite p99 for Corral to lose to.
        let mut lossy = rows();
        let l = lossy[0].linux.as_mut().unwrap();
        l.lost = l.sent / 50;
        let c = check_targets(&lossy, 0.8);
        assert!(
            c.iter()
                .find(|c| c.target == Target::P99AtMostLinux)
                .is_some_and(|c| c.verdict == Verdict::Met && c.detail.contains("unbounded"))
        );
        // Exactly 1.5x passes; a nanosecond more does not.
        let mut edge = rows();
        edge.truncate(1);
        let c = edge[0].corral.as_mut().unwrap();
        c.tail_p999_ns = Some(90_000);
        let verdict = |rows: &[SweepRow]| {
            check_targets(rows, 0.8)
                .into_iter()
                .find(|c| c.target == Target::NearDedicatedP999)
                .unwrap()
                .verdict
        };
        assert_eq!(verdict(&edge), Verdict::Met);
        edge[0].corral.as_mut().unwrap().tail_p999_ns = Some(90_001);
        assert_eq!(verdict(&edge), Verdict::Missed);
    }

    #[test]
    fn bound_check_uses_twice_the_bound() {
        let mut r = rows();
        r.truncate(1);
        r[0].bound_p999_ns = Some(39_999);
        let c = check_targets(&r, 0.8);
        let v = c
            .iter()
            .find(|c| c.target == Target::TwiceBoundP999)
            .unwrap();
        assert_eq!(v.verdict, Verdict::Missed, "{v:?}");
        r[0].bound_p999_ns = Some(40_000);
        let c = check_targets(&r, 0.8);
        let v = c
            .iter()
            .find(|c| c.target == Target::TwiceBoundP999)
            .unwrap();
        assert_eq!(v.verdict, Verdict::Met, "{v:?}");
    }

    #[test]
    fn csv_has_a_header_and_a_row_per_point() {
        let text = sweep_csv(&rows());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        let header: Vec<&str> = lines[0].split(',').collect();
        assert_eq!(header[0], "load");
        assert!(header.contains(&"corral_p999_us") && header.contains(&"linux_batch_fraction"));
        assert!(
            header.contains(&"dedicated_p999_us") && header.contains(&"corral_over_dedicated_p999")
        );
        for l in &lines[1..] {
            // Flags hold no commas here, so a plain split counts the fields.
            assert_eq!(l.split(',').count(), header.len(), "{l}");
        }
        assert!(
            lines[1].starts_with("0.1,10000.0,10000.0,12.000,40.000,80.000,80.000,"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn tail_split_table_shows_each_stage_of_the_slowest_requests() {
        let split = |queue_ns| Split {
            send_late_ns: 300,
            deliver_ns: 4_500,
            queue_ns,
            service_ns: 12_000,
            return_ns: 1_250,
        };
        let mut p = point(0.5, summary(1, 1, 10_000, 0), None, None);
        p.summary.tail = TailReport {
            split: 9_990,
            unsplit: 10,
            unstamped: 10,
            out_of_order: Default::default(),
            above_p99: Some(TailSplit {
                quantile: 0.99,
                requests: 100,
                threshold_ns: 95_000,
                median: split(80_000),
            }),
            above_p999: None,
        };
        let corral = run(System::Corral, vec![p]);
        let text = tail_split_table(&[corral]).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2 + 2, "{text}");
        for h in [
            "system",
            "requests",
            "from",
            "send-late",
            "deliver+wake",
            "queue",
            "service",
            "return",
            "unsplit",
        ] {
            assert!(lines[0].contains(h), "{h}: {text}");
        }
        let cells: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            cells,
            vec![
                "Corral", "50%", ">p99", "100", "95.0", "0.30", "4.50", "80.0", "12.0", "1.25",
                "10"
            ],
            "{text}"
        );
        // A tail that was not kept is shown as such, not as zeros.
        let cells: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            cells,
            vec![
                "Corral", "50%", ">p99.9", "-", "-", "-", "-", "-", "-", "-", "10"
            ],
            "{text}"
        );
    }

    #[test]
    fn lost_cpu_table_shows_gaps_steal_and_demotions() {
        let mut c = point(0.2, summary(1, 1, 100, 0), None, None);
        c.iokerneld_stalls = Some([3, 4_500_000]);
        c.steal = Some(CpuSteal {
            iokernel_cpu_ms: 20.0,
            app_cpu_ms: 130.0,
        });
        c.demotions = Some(Demotions {
            total: 2,
            by_runtime: [("batch".to_owned(), 2), ("spin".to_owned(), 0)].into(),
        });
        let mut l = point(0.2, summary(1, 1, 100, 0), None, None);
        l.iokerneld_stalls = None;
        l.steal = Some(CpuSteal {
            iokernel_cpu_ms: 0.0,
            app_cpu_ms: 10.0,
        });
        let text =
            lost_cpu_table(&[run(System::Corral, vec![c]), run(System::Linux, vec![l])]).render();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("steal app CPU ms") && lines[0].contains("demotions"));
        let corral: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            corral,
            vec![
                "Corral", "20%", "3", "4.5", "20", "130", "2", "(batch", "2)"
            ],
            "{text}"
        );
        let linux: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(
            linux,
            vec!["Linux", "20%", "-", "-", "0", "10", "-"],
            "{text}"
        );
    }

    #[test]
    fn interval_tables_have_a_column_per_interval_and_flags_per_line() {
        let mut fast = run(
            System::Corral,
            vec![
                point(
                    0.1,
                    summary(12_000, 80_000, 10_000, 0),
                    Some(880.0),
                    Some(0.88),
                ),
                point(
                    0.5,
                    summary(20_000, 150_000, 50_000, 250),
                    Some(400.0),
                    Some(0.4),
                ),
            ],
        );
        fast.interval_us = Some(5);
        let mut slow = fast.clone();
        slow.interval_us = Some(1000);
        slow.points[0].summary.latency.p999_ns = 900_000;
        let text = intervals_tables(
            &[fast.clone(), slow.clone()],
            &[0.1, 0.5],
            &[bound(0.1, 77_000)],
        );
        assert!(
            text.contains("p99.9 5us") && text.contains("p99.9 1ms"),
            "{text}"
        );
        assert!(
            text.contains("batch 1ms") && text.contains("realloc/s 5us"),
            "{text}"
        );
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with("10%"))
            .unwrap();
        for cell in ["10000", "80.0", "900", "77.0", "154"] {
            assert!(row.contains(cell), "{cell}: {row}");
        }
        assert!(text.contains("  5us: 50% lost 250/50000\n"), "{text}");
        assert!(text.contains("  1ms: 50% lost 250/50000\n"), "{text}");
        let csv = intervals_csv(&[fast, slow], &[bound(0.1, 77_000)]);
        assert_eq!(csv.lines().count(), 1 + 4);
        assert!(
            csv.lines().nth(1).unwrap().starts_with("5,0.1,10000.0,"),
            "{csv}"
        );
    }

    fn burst(window_p999: &[(f64, u64)], steady_p999: u64) -> Burst {
        let windows = window_p999
            .iter()
            .map(|&(start_ms, p)| Window {
                start_ms,
                scheduled: 10,
                matched: if p == 0 { 0 } else { 10 },
                latency: Percentiles {
                    p999_ns: p,
                    ..Percentiles::default()
                },
            })
            .collect();
        let mut b = point(0.1, summary(1, 1, 100, 0), None, None);
        b.windows = windows;
        Burst {
            system: System::Corral,
            base_load: 0.1,
            peak_load: 0.7,
            base_rps: 10_000.0,
            peak_rps: 70_000.0,
            phase_secs: 1.0,
            window_ms: 10.0,
            burst: b,
            steady: point(0.7, summary(1, steady_p999, 1000, 0), None, None),
        }
    }

    #[test]
    fn burst_check_looks_at_the_high_phase_only() {
        // Steady 100 us: high-phase windows up to 200 us pass; base-phase windows are ignored.
        let b = burst(
            &[
                (990.0, 900_000),
                (1000.0, 150_000),
                (1010.0, 200_000),
                (2000.0, 900_000),
            ],
            100_000,
        );
        let c = check_burst(&b);
        assert_eq!(c.verdict, Verdict::Met, "{c:?}");
        assert_eq!(c.worst_peak_window_ns, Some(200_000));
        let b = burst(&[(1000.0, 150_000), (1010.0, 200_001)], 100_000);
        let c = check_burst(&b);
        assert_eq!(c.verdict, Verdict::Missed);
        assert_eq!(c.over_windows_ms, vec![1010.0]);
        // A high-phase window with nothing answered is a miss, not a pass.
        let b = burst(&[(1000.0, 150_000), (1010.0, 0)], 100_000);
        assert_eq!(check_burst(&b).verdict, Verdict::Missed);
        assert_eq!(burst_rate_at(&b, 999.0), 10_000.0);
        assert_eq!(burst_rate_at(&b, 1000.0), 70_000.0);
        assert_eq!(burst_rate_at(&b, 2000.0), 10_000.0);
        let t = burst_table(&b, Some(100_000)).render();
        assert!(t.contains("nothing answered"), "{t}");
        // A steady run that lost requests leaves nothing to compare with.
        let mut lossy = burst(&[(1000.0, 150_000)], 100_000);
        lossy.steady.summary.lost = 2;
        let c = check_burst(&lossy);
        assert_eq!(c.verdict, Verdict::NotMeasured);
        assert!(
            c.reason.contains("steady run lost 2 of 1000"),
            "{}",
            c.reason
        );
        assert_eq!(burst_csv(&b).lines().count(), 1 + 2);
    }
}
