//! The paper's Figure 1, extended: at each offered load (in cores' worth of work), the bound on
//! a 1 ms allocator's CPU efficiency ([`crate::bound`]) beside Corral's, simulated.
//!
//! Corral's point is one run of the simulator ([`crate::run_point`]) with the Shenango policy,
//! the configured costs (the measured set by default), one latency-critical runtime
//! (guaranteed 1 core, up to every core) serving `exp` service times of the bound's mean, and
//! by default no batch runtime. Its efficiency is the paper's, cycles of application work over
//! cycles allocated to the application: service time run over the core time the runtime held,
//! from each wake decision to its kthread's park (the wake-up, the spin before parking and the
//! per-request dispatch count as held, not as work). Without a batch runtime a core comes from
//! the idle pool, as for the paper's runtime running alone. With one (`batch_runtimes: 1`) the
//! hand-over and the batch kthread's preemption are charged too, but the policy then shares
//! the cores above the guarantee with the batch runtime a share quantum (1 ms) at a time, so
//! the latency-critical runtime waits for cores and its p99.9 leaves the bound's limit far
//! behind: its efficiency would not be one that meets the limit.
//!
//! The machine has as many cores as the bound needs at the highest load (at least
//! `max_cores`), so that Corral may hold as many cores as the 1 ms allocator is given.

use crate::bound::{self, BoundParams, BoundPoint};
use crate::config::SimConfig;
use crate::costs::Costs;
use crate::workload::{LoadSchedule, ServiceDist};

/// What a Figure 1 sweep runs.
#[derive(Clone, Debug)]
pub struct Figure1Config {
    /// Offered loads in cores' worth of work, each positive and at most `max_cores`.
    pub loads: Vec<f64>,
    pub max_cores: u16,
    pub bound: BoundParams,
    pub costs: Costs,
    /// Batch runtimes beside the latency-critical one (0 or more).
    pub batch_runtimes: u16,
    /// Simulated time of arrivals per Corral point.
    pub duration_ns: u64,
    pub seed: u64,
}

impl Figure1Config {
    /// The default loads: 0.1, then every quarter core up to `max_cores`.
    pub fn default_loads(max_cores: u16) -> Vec<f64> {
        let quarters = u32::from(max_cores) * 4;
        std::iter::once(0.1)
            .chain((1..=quarters).map(|q| f64::from(q) / 4.0))
            .collect()
    }
}

/// One load of the figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure1Row {
    pub bound: BoundPoint,
    /// Service time run / core time held by the latency-critical runtime.
    pub corral_efficiency: f64,
    pub corral_p999_ns: u64,
    /// Mean cores the latency-critical runtime held.
    pub corral_cores: f64,
    /// Requests that had not completed when the run stopped (0 unless overloaded).
    pub corral_unfinished: u64,
}

/// The cores of the simulated machine: enough for the bound's largest `n`.
pub fn machine_cores(max_cores: u16, bound: &[BoundPoint]) -> u16 {
    let needed = bound.iter().map(|point| point.cores).max().unwrap_or(0);
    u16::try_from(needed).unwrap_or(u16::MAX).max(max_cores)
}

/// Runs the bound and Corral at every load.
pub fn run(config: &Figure1Config) -> Result<Vec<Figure1Row>, String> {
    if config.max_cores == 0 {
        return Err("--max-cores must be at least 1".into());
    }
    if let Some(&bad) = config
        .loads
        .iter()
        .find(|&&load| !(load > 0.0 && load <= f64::from(config.max_cores)))
    {
        return Err(format!(
            "load {bad}: each load must be above 0 and at most --max-cores ({})",
            config.max_cores
        ));
    }
    let bounds = bound::sweep(&config.bound, &config.loads);
    let cores = machine_cores(config.max_cores, &bounds);
    let mut rows = Vec::with_capacity(bounds.len());
    for point in bounds {
        let mut sim = SimConfig::simple(cores, 1, 1, config.batch_runtimes, 0.0);
        sim.costs = config.costs.clone();
        sim.service = ServiceDist::Exponential {
            mean_ns: config.bound.service_mean_ns,
        };
        // The simulator's load is a fraction of the machine's capacity.
        sim.load = LoadSchedule::constant(point.load / f64::from(cores));
        sim.duration_ns = config.duration_ns;
        sim.seed = config.seed;
        let result = crate::run_point(sim)?;
        rows.push(Figure1Row {
            bound: point,
            corral_efficiency: result.efficiency,
            corral_p999_ns: result.p999_ns,
            corral_cores: result.lc_cores_mean,
            corral_unfinished: result.unfinished,
        });
    }
    Ok(rows)
}

pub const CSV_HEADER: &str =
    "load,bound_cores,bound_efficiency,corral_efficiency,corral_p999_ns,corral_cores_held";

/// One row per load.
pub fn csv(rows: &[Figure1Row]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for row in rows {
        out.push_str(&format!(
            "{},{},{},{},{},{}\n",
            row.bound.load,
            row.bound.cores,
            row.bound.efficiency,
            row.corral_efficiency,
            row.corral_p999_ns,
            row.corral_cores
        ));
    }
    out
}

/// The table printed on stdout.
pub fn table(rows: &[Figure1Row]) -> String {
    let mut out = format!(
        "{:>6} {:>7} {:>9} {:>10} {:>12} {:>12}\n",
        "load", "bound n", "bound eff", "Corral eff", "Corral p99.9", "Corral cores"
    );
    for row in rows {
        out.push_str(&format!(
            "{:>6.2} {:>7} {:>9.3} {:>10.3} {:>9.1} us {:>12.2}\n",
            row.bound.load,
            row.bound.cores,
            row.bound.efficiency,
            row.corral_efficiency,
            row.corral_p999_ns as f64 / 1e3,
            row.corral_cores
        ));
    }
    out
}

/// One load of Corral measured on a real machine: a row of `corral-bench-figure1 --csv`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeasuredPoint {
    /// Offered load in cores' worth of work (the bench's load times its managed cores).
    pub load: f64,
    /// The managed cores the runtime had.
    pub cores: u32,
    pub requests: u64,
    /// Service time spun / CPU time of the runtime's threads.
    pub efficiency: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    /// Requests that started more than the bench's `--late-us` after their arrival time.
    pub late_arrivals: u64,
}

/// The columns of the bench's CSV this reads; others may come and go.
const MEASURED_COLUMNS: [&str; 9] = [
    "offered_cores",
    "cores",
    "requests",
    "completed",
    "efficiency",
    "p50_us",
    "p99_us",
    "p999_us",
    "late_arrivals",
];

/// Reads the CSV `corral-bench-figure1 --csv` writes; `source` names it in errors. Refuses a
/// file without the bench's columns, with a malformed or out-of-range value, with a request
/// that did not complete, or with no row.
pub fn parse_measured(text: &str, source: &str) -> Result<Vec<MeasuredPoint>, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| format!("{source}: empty; expected corral-bench-figure1's CSV"))?;
    let names: Vec<&str> = header.split(',').map(str::trim).collect();
    let mut at = [0usize; MEASURED_COLUMNS.len()];
    for (slot, column) in at.iter_mut().zip(MEASURED_COLUMNS) {
        *slot = names.iter().position(|n| *n == column).ok_or_else(|| {
            format!(
                "{source}: the header has no {column} column; expected corral-bench-figure1's \
                 CSV (columns {})",
                MEASURED_COLUMNS.join(",")
            )
        })?;
    }
    let mut points = Vec::new();
    for (index, line) in lines {
        let line_no = index + 1;
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != names.len() {
            return Err(format!(
                "{source}:{line_no}: {} fields where the header has {}",
                fields.len(),
                names.len()
            ));
        }
        let number = |column: usize| -> Result<f64, String> {
            let text = fields[at[column]];
            text.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| {
                    format!(
                        "{source}:{line_no}: {} {text:?} is not a non-negative number",
                        MEASURED_COLUMNS[column]
                    )
                })
        };
        let count = |column: usize| -> Result<u64, String> {
            let value = number(column)?;
            if value.fract() != 0.0 {
                return Err(format!(
                    "{source}:{line_no}: {} {value} is not a whole number",
                    MEASURED_COLUMNS[column]
                ));
            }
            Ok(value as u64)
        };
        let point = MeasuredPoint {
            load: number(0)?,
            cores: u32::try_from(count(1)?).unwrap_or(u32::MAX),
            requests: count(2)?,
            efficiency: number(4)?,
            p50_us: number(5)?,
            p99_us: number(6)?,
            p999_us: number(7)?,
            late_arrivals: count(8)?,
        };
        let completed = count(3)?;
        let refuse = |what: String| Err(format!("{source}:{line_no}: {what}"));
        if point.load <= 0.0 {
            return refuse(format!("offered_cores {} must be above 0", point.load));
        }
        if point.cores == 0 {
            return refuse("cores must be at least 1".into());
        }
        if point.requests == 0 || completed != point.requests {
            return refuse(format!(
                "{completed} of {} requests completed; a measurement counts only when every \
                 request completed once",
                point.requests
            ));
        }
        if !(point.efficiency > 0.0 && point.efficiency <= 1.0) {
            return refuse(format!(
                "efficiency {} must lie above 0 and at most 1",
                point.efficiency
            ));
        }
        if !(point.p50_us <= point.p99_us && point.p99_us <= point.p999_us) {
            return refuse("p50_us, p99_us and p999_us must not decrease".into());
        }
        points.push(point);
    }
    if points.is_empty() {
        return Err(format!("{source}: a header and no measured load"));
    }
    Ok(points)
}

/// `loads` with every measured load added once, in increasing order.
pub fn with_measured_loads(loads: &[f64], measured: &[MeasuredPoint]) -> Vec<f64> {
    let mut all: Vec<f64> = loads
        .iter()
        .copied()
        .chain(measured.iter().map(|m| m.load))
        .collect();
    all.sort_by(f64::total_cmp);
    all.dedup_by(|a, b| same_load(*a, *b));
    all
}

/// Loads written by the bench as `load x cores` may differ from the typed ones in the last bit.
fn same_load(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Each measured point with the sweep's row at its load (`None` if the sweep skipped it).
pub fn pair_measured<'a>(
    rows: &'a [Figure1Row],
    measured: &'a [MeasuredPoint],
) -> Vec<(&'a MeasuredPoint, Option<&'a Figure1Row>)> {
    measured
        .iter()
        .map(|m| (m, rows.iter().find(|r| same_load(r.bound.load, m.load))))
        .collect()
}

pub const MEASURED_CSV_HEADER: &str = "load,bound_cores,bound_efficiency,simulated_efficiency,\
simulated_p999_ns,measured_cores,measured_efficiency,measured_p50_us,measured_p99_us,\
measured_p999_us,measured_requests,measured_late_arrivals";

/// The measured points beside the bound and the simulated Corral at the same loads.
pub fn measured_csv(rows: &[Figure1Row], measured: &[MeasuredPoint]) -> String {
    let mut out = format!("{MEASURED_CSV_HEADER}\n");
    for (m, row) in pair_measured(rows, measured) {
        let sweep = row.map_or_else(
            || ",,,".to_owned(),
            |r| {
                format!(
                    "{},{},{},{}",
                    r.bound.cores, r.bound.efficiency, r.corral_efficiency, r.corral_p999_ns
                )
            },
        );
        out.push_str(&format!(
            "{},{sweep},{},{},{},{},{},{},{}\n",
            m.load,
            m.cores,
            m.efficiency,
            m.p50_us,
            m.p99_us,
            m.p999_us,
            m.requests,
            m.late_arrivals
        ));
    }
    out
}

/// The table of [`measured_csv`], printed beside the sweep's.
pub fn measured_table(rows: &[Figure1Row], measured: &[MeasuredPoint]) -> String {
    let mut out = format!(
        "{:>6} {:>7} {:>9} {:>9} {:>12} {:>9} {:>13} {:>9}\n",
        "load", "bound n", "bound eff", "sim eff", "sim p99.9", "meas eff", "meas p99.9", "late"
    );
    for (m, row) in pair_measured(rows, measured) {
        let sweep = row.map_or_else(
            || format!("{:>7} {:>9} {:>9} {:>12}", "-", "-", "-", "-"),
            |r| {
                format!(
                    "{:>7} {:>9.3} {:>9.3} {:>9.1} us",
                    r.bound.cores,
                    r.bound.efficiency,
                    r.corral_efficiency,
                    r.corral_p999_ns as f64 / 1e3
                )
            },
        );
        out.push_str(&format!(
            "{:>6.2} {sweep} {:>9.3} {:>10.1} us {:>9}\n",
            m.load, m.efficiency, m.p999_us, m.late_arrivals
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_loads_reach_max_cores() {
        let loads = Figure1Config::default_loads(2);
        assert_eq!(loads, vec![0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]);
    }

    const BENCH_CSV: &str = "load,cores,offered_cores,requests,completed,efficiency,p50_us,\
p99_us,p999_us,core_seconds_held,service_seconds,wall_seconds,grants_per_s,parks_per_s,late_arrivals
0.1,1,0.1,20000,20000,0.612,21.5,60.2,95.0,0.327,0.2,2.0,7000.0,7000.0,0
0.3,1,0.3,60000,60000,0.8,30.0,120.5,180.25,0.75,0.6,2.0,900.0,900.0,3
";

    #[test]
    fn the_bench_csv_is_read() {
        let points = parse_measured(BENCH_CSV, "bench.csv").unwrap();
        assert_eq!(points.len(), 2);
        assert_eq!(
            points[1],
            MeasuredPoint {
                load: 0.3,
                cores: 1,
                requests: 60000,
                efficiency: 0.8,
                p50_us: 30.0,
                p99_us: 120.5,
                p999_us: 180.25,
                late_arrivals: 3,
            }
        );
        assert_eq!(
            with_measured_loads(&[0.1, 0.5], &points),
            vec![0.1, 0.3, 0.5]
        );
    }

    fn refusal(text: &str) -> String {
        parse_measured(text, "bad.csv").unwrap_err()
    }

    #[test]
    fn a_bad_measured_file_is_refused_naming_what_is_wrong() {
        assert!(refusal("").contains("bad.csv: empty"));
        assert!(refusal("load,bound_cores\n0.1,1\n").contains("no offered_cores column"));
        let header = BENCH_CSV.lines().next().unwrap();
        assert!(refusal(header).contains("no measured load"));
        let rows = [
            (
                "0.1,1,0.1,100,100,0.5,1,2,3,1,1,1,1,1",
                "bad.csv:2: 14 fields where the header has 15",
            ),
            (
                "0.1,1,0.1,100,100,high,1,2,3,1,1,1,1,1,0",
                "efficiency \"high\" is not a non-negative number",
            ),
            (
                "0.1,1,0.1,100,100,1.2,1,2,3,1,1,1,1,1,0",
                "efficiency 1.2 must lie above 0 and at most 1",
            ),
            (
                "0.1,1,0.1,100,99,0.5,1,2,3,1,1,1,1,1,0",
                "99 of 100 requests completed",
            ),
            (
                "0.1,1,0.1,100,100,0.5,1,9,3,1,1,1,1,1,0",
                "must not decrease",
            ),
            ("0,1,0,100,100,0.5,1,2,3,1,1,1,1,1,0", "must be above 0"),
        ];
        for (row, reason) in rows {
            let message = refusal(&format!("{header}\n{row}\n"));
            assert!(message.contains(reason), "{row}: {message}");
        }
    }

    #[test]
    fn measured_points_are_tabled_beside_the_sweep() {
        let measured = parse_measured(BENCH_CSV, "bench.csv").unwrap();
        let config = Figure1Config {
            loads: with_measured_loads(&[], &measured),
            max_cores: 1,
            bound: BoundParams {
                requests: 20_000,
                ..BoundParams::default()
            },
            costs: Costs::measured(),
            batch_runtimes: 0,
            duration_ns: 2_000_000,
            seed: 1,
        };
        let rows = run(&config).unwrap();
        let csv = measured_csv(&rows, &measured);
        assert_eq!(csv.lines().count(), 3);
        let columns = MEASURED_CSV_HEADER.split(',').count();
        assert!(csv.lines().all(|line| line.split(',').count() == columns));
        assert!(csv.lines().nth(2).unwrap().starts_with("0.3,"));
        assert_eq!(measured_table(&rows, &measured).lines().count(), 3);
    }

    #[test]
    fn loads_beyond_the_machine_are_refused() {
        let config = Figure1Config {
            loads: vec![3.0],
            max_cores: 2,
            bound: BoundParams::default(),
            costs: Costs::measured(),
            batch_runtimes: 1,
            duration_ns: 1_000_000,
            seed: 1,
        };
        assert!(run(&config).unwrap_err().contains("at most --max-cores"));
    }
}
