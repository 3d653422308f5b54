//! What each experiment's plots show, built from a few plain numbers per point, so that the
//! plots of a finished run can be drawn again from its saved results (`--replot`).
//!
//! Every latency plot draws a percentile the same way: p99.9 solid with circles, p99 dashed with
//! triangles, p50 dotted with squares, in the colour of its system (or allocation interval).
//! A point whose p99.9 or p99 has no finite value, because more than 0.1% or 1% of its requests
//! were lost, is marked in a band above the plot instead: a cross for p99.9, a plus for p99.

use std::path::{Path, PathBuf};

use plotters::style::RGBColor;

use crate::error::Result;

use crate::kvreport;
use crate::plot::{self, Chart, Line, Marker};
use crate::report::{self, tail_p999_ns};
use crate::results::{Burst, KvPoint, KvSystemRun, Point, System, SystemRun};

/// The colour of a system in every plot.
pub fn color_of(system: System) -> RGBColor {
    match system {
        System::Corral => plot::BLUE,
        System::Linux => plot::ORANGE,
        System::Dedicated => plot::GREEN,
    }
}

/// A latency percentile the plots draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Percentile {
    P50,
    P99,
    P999,
}

impl Percentile {
    pub fn label(self) -> &'static str {
        match self {
            Percentile::P50 => "p50",
            Percentile::P99 => "p99",
            Percentile::P999 => "p99.9",
        }
    }

    /// The line of this percentile, named `{prefix} {label}`.
    pub fn line(self, prefix: &str, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        let line = Line::new(format!("{prefix} {}", self.label()), color, points);
        match self {
            Percentile::P50 => line.dotted().marker(Marker::Square),
            Percentile::P99 => line.dashed().marker(Marker::Triangle),
            Percentile::P999 => line,
        }
    }

    /// The marks where this percentile is unbounded by losses, with the share of lost requests
    /// that makes it so (see [`tail_p999_ns`] and [`kvreport::p99_bounded_ns`]); `None` for
    /// p50, which the results never call unbounded.
    pub fn unbounded(self, prefix: &str, color: RGBColor, xs: Vec<f64>) -> Option<Line> {
        let (lost, marker) = match self {
            Percentile::P50 => return None,
            Percentile::P99 => ("1%", Marker::Plus),
            Percentile::P999 => ("0.1%", Marker::Cross),
        };
        Some(
            Line::ceiling(
                format!("{prefix} {} unbounded (>{lost} lost)", self.label()),
                color,
                xs,
            )
            .marker(marker),
        )
    }
}

/// One point of one system (or interval), as the plots show it. Latencies in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct PlotPoint {
    /// Offered load as a fraction of one core, or offered thousand requests per second.
    pub x: f64,
    /// `None` when nothing was answered.
    pub p50_us: Option<f64>,
    /// `None` when unbounded: more than 1% of the requests lost, or none answered.
    pub p99_us: Option<f64>,
    /// `None` when unbounded: more than 0.1% of the requests lost, or none answered.
    pub p999_us: Option<f64>,
    pub achieved_krps: Option<f64>,
    pub batch_fraction: Option<f64>,
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

impl PlotPoint {
    /// A point of a spin-server sweep.
    pub fn of_point(p: &Point) -> PlotPoint {
        let s = &p.summary;
        PlotPoint {
            x: p.load,
            p50_us: (s.matched > 0).then(|| us(s.latency.p50_ns)),
            p99_us: kvreport::p99_bounded_ns(s).map(us),
            p999_us: tail_p999_ns(s).map(us),
            achieved_krps: Some(s.achieved_rps / 1e3),
            batch_fraction: p.batch_fraction,
        }
    }

    /// A point of the key-value experiment.
    pub fn of_kv_point(p: &KvPoint) -> PlotPoint {
        let s = &p.summary;
        PlotPoint {
            x: p.rate_rps / 1e3,
            p50_us: (s.matched > 0).then(|| us(s.latency.p50_ns)),
            p99_us: kvreport::p99_bounded_ns(s).map(us),
            p999_us: tail_p999_ns(s).map(us),
            achieved_krps: Some(s.achieved_rps / 1e3),
            batch_fraction: p.batch_fraction,
        }
    }
}

/// One system, or one allocation interval, across its points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub color: RGBColor,
    pub points: Vec<PlotPoint>,
}

impl Series {
    /// A system of a spin-server sweep.
    pub fn of_run(run: &SystemRun) -> Series {
        Series {
            name: run.system.title().to_owned(),
            color: color_of(run.system),
            points: run.points.iter().map(PlotPoint::of_point).collect(),
        }
    }

    /// A system of the key-value experiment: its unloaded point, then its ladder.
    pub fn of_kv_run(run: &KvSystemRun) -> Series {
        Series {
            name: run.system.title().to_owned(),
            color: color_of(run.system),
            points: std::iter::once(&run.unloaded)
                .chain(&run.points)
                .map(PlotPoint::of_kv_point)
                .collect(),
        }
    }

    fn line(&self, name: &str, f: impl Fn(&PlotPoint) -> Option<f64>) -> Line {
        Line::new(
            format!("{} {name}", self.name).trim_end(),
            self.color,
            self.points
                .iter()
                .filter_map(|p| f(p).map(|y| (p.x, y)))
                .collect(),
        )
    }

    fn has(&self, f: impl Fn(&PlotPoint) -> Option<f64>) -> bool {
        self.points.iter().any(|p| f(p).is_some())
    }

    /// Lines for these percentiles, each followed by its unbounded marks when it has any.
    fn percentile_lines(&self, percentiles: &[Percentile]) -> Vec<Line> {
        let value = |which: Percentile, p: &PlotPoint| match which {
            Percentile::P50 => p.p50_us,
            Percentile::P99 => p.p99_us,
            Percentile::P999 => p.p999_us,
        };
        let mut lines = Vec::new();
        for &which in percentiles {
            lines.push(
                which.line(
                    &self.name,
                    self.color,
                    self.points
                        .iter()
                        .filter_map(|p| value(which, p).map(|y| (p.x, y)))
                        .collect(),
                ),
            );
        }
        for &which in percentiles {
            let unbounded: Vec<f64> = self
                .points
                .iter()
                .filter(|p| value(which, p).is_none())
                .map(|p| p.x)
                .collect();
            if !unbounded.is_empty()
                && let Some(l) = which.unbounded(&self.name, self.color, unbounded)
            {
                lines.push(l);
            }
        }
        lines
    }
}

/// The zero-overhead bound's p99.9 at one load, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundP999 {
    pub load: f64,
    pub p999_us: f64,
}

/// The x axis of the load sweeps: from 0 to past the highest load, at least to a whole core.
pub fn load_range(loads: &[f64]) -> (f64, f64) {
    let hi = loads.iter().copied().fold(0.0, f64::max);
    (0.0, (hi + 0.1).max(1.0))
}

const LOAD_LABEL: &str = "offered load (fraction of one core)";

/// A latency chart on a log scale, in microseconds.
fn latency_chart(title: String, x_label: &str, x_range: (f64, f64), lines: Vec<Line>) -> Chart {
    Chart {
        title,
        x_label: x_label.into(),
        y_label: "latency (us, log)".into(),
        log_y: true,
        x_range,
        y_range: None,
        lines,
    }
}

fn batch_chart(title: &str, x_range: (f64, f64), mut lines: Vec<Line>) -> Chart {
    lines.push(
        Line::new("ideal: 1 - load", plot::GREY, vec![(0.0, 1.0), (1.0, 0.0)])
            .dashed()
            .no_markers(),
    );
    Chart {
        title: title.into(),
        x_label: LOAD_LABEL.into(),
        y_label: "batch units/s (fraction of batch alone)".into(),
        log_y: false,
        x_range,
        y_range: Some((0.0, 1.1)),
        lines,
    }
}

/// The sweep's `latency` and `batch` charts: every system's p99.9, p99 and p50, the bound's
/// p99.9 and twice it; and each co-located system's batch throughput.
pub fn sweep(
    service: &str,
    x_range: (f64, f64),
    systems: &[Series],
    bound: &[BoundP999],
) -> [Chart; 2] {
    let mut lat: Vec<Line> = systems
        .iter()
        .flat_map(|s| s.percentile_lines(&[Percentile::P999, Percentile::P99, Percentile::P50]))
        .collect();
    let bound_pts: Vec<(f64, f64)> = bound.iter().map(|b| (b.load, b.p999_us)).collect();
    lat.push(Percentile::P999.line("bound", plot::GREY, bound_pts.clone()));
    lat.push(
        Line::new(
            "2x bound p99.9",
            plot::LIGHT_GREY,
            bound_pts.iter().map(|&(x, y)| (x, 2.0 * y)).collect(),
        )
        .no_markers(),
    );
    let batch = systems
        .iter()
        .filter(|s| s.has(|p| p.batch_fraction))
        .map(|s| s.line("batch", |p| p.batch_fraction))
        .collect();
    [
        latency_chart(
            format!("Spin server latency ({service} service), batch job co-located"),
            LOAD_LABEL,
            x_range,
            lat,
        ),
        batch_chart("Batch throughput while the server runs", x_range, batch),
    ]
}

/// Writes the sweep's `latency` and `batch` plots into `out`.
pub fn save_sweep(
    out: &Path,
    service: &str,
    loads: &[f64],
    systems: &[Series],
    bound: &[BoundP999],
) -> Result<Vec<PathBuf>> {
    let [latency, batch] = sweep(service, load_range(loads), systems, bound);
    let mut files = plot::save(out, "latency", &[latency])?;
    files.extend(plot::save(out, "batch", &[batch])?);
    Ok(files)
}

/// The allocation-interval sweep's `intervals` and `intervals-batch` charts: p99.9 and p99 at
/// each interval against the bound's p99.9, and the batch throughput at each interval.
pub fn intervals(
    service: &str,
    x_range: (f64, f64),
    intervals: &[Series],
    bound: &[BoundP999],
) -> [Chart; 2] {
    let mut lat: Vec<Line> = intervals
        .iter()
        .flat_map(|s| s.percentile_lines(&[Percentile::P999, Percentile::P99]))
        .collect();
    lat.push(Percentile::P999.line(
        "bound",
        plot::GREY,
        bound.iter().map(|b| (b.load, b.p999_us)).collect(),
    ));
    let batch = intervals
        .iter()
        .map(|s| s.line("", |p| p.batch_fraction))
        .collect();
    [
        latency_chart(
            format!("Corral p99.9 and p99 by core allocation interval ({service} service)"),
            LOAD_LABEL,
            x_range,
            lat,
        ),
        batch_chart(
            "Batch throughput by core allocation interval",
            x_range,
            batch,
        ),
    ]
}

/// The allocation-interval series' name.
pub fn interval_name(interval_us: u64) -> String {
    format!("interval {}", report::interval_label(interval_us))
}

/// A server experiment's panels (`kv`, `dns`): p99 and p50 under `latency_title`, achieved
/// throughput and the batch share, against the offered rate.
pub fn kv(systems: &[Series], max_krps: f64, latency_title: &str) -> [Chart; 3] {
    let x_range = (0.0, max_krps * 1.05);
    let x_label = "offered load (thousand requests/s)".to_owned();
    let latency = systems
        .iter()
        .flat_map(|s| s.percentile_lines(&[Percentile::P99, Percentile::P50]))
        .collect();
    let achieved = systems
        .iter()
        .map(|s| s.line("achieved", |p| p.achieved_krps))
        .collect();
    let batch: Vec<Line> = systems
        .iter()
        .filter(|s| s.has(|p| p.batch_fraction))
        .map(|s| s.line("batch share", |p| p.batch_fraction))
        .collect();
    let batch_top = systems
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| p.batch_fraction))
        .fold(1.1_f64, |top, f| top.max(f * 1.05));
    [
        latency_chart(latency_title.into(), &x_label, x_range, latency),
        Chart {
            title: "Achieved throughput".into(),
            x_label: x_label.clone(),
            y_label: "thousand requests/s".into(),
            log_y: false,
            x_range,
            y_range: None,
            lines: achieved,
        },
        Chart {
            title: "Batch job's share of its throughput alone".into(),
            x_label,
            y_label: "fraction of alone".into(),
            log_y: false,
            x_range,
            // A batch job disturbed while measured alone can show more than its whole share.
            y_range: Some((0.0, batch_top)),
            lines: batch,
        },
    ]
}

/// One latency window of the burst run. Latencies in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstWindow {
    pub start_s: f64,
    /// `None` when the window answered nothing.
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub offered_krps: f64,
    pub answered_krps: f64,
}

/// The burst run's windows.
pub fn burst_windows(b: &Burst) -> Vec<BurstWindow> {
    let window_s = b.window_ms / 1e3;
    b.burst
        .windows
        .iter()
        .map(|w| {
            let answered = w.matched > 0;
            BurstWindow {
                start_s: w.start_ms / 1e3,
                p99_us: answered.then(|| us(w.latency.p99_ns)),
                p999_us: answered.then(|| us(w.latency.p999_ns)),
                offered_krps: report::burst_rate_at(b, w.start_ms) / 1e3,
                answered_krps: w.matched as f64 / window_s / 1e3,
            }
        })
        .collect()
}

/// The burst experiment's `burst` panels: p99.9 and p99 per window through the step, against
/// the steady run's p99.9 and twice it; and the offered and answered rates.
pub fn burst(
    window_ms: f64,
    secs: f64,
    windows: &[BurstWindow],
    steady_p999_us: Option<f64>,
) -> [Chart; 2] {
    let per_window = |name: &str, color, f: fn(&BurstWindow) -> Option<f64>| {
        Line::new(
            name,
            color,
            windows
                .iter()
                .filter_map(|w| f(w).map(|y| (w.start_s, y)))
                .collect(),
        )
        .no_markers()
    };
    // A window series is too dense for dashes: here the percentiles differ by colour.
    let mut lat = vec![
        per_window("p99.9 per window", plot::BLUE, |w| w.p999_us),
        per_window("p99 per window", plot::ORANGE, |w| w.p99_us),
    ];
    if let Some(s) = steady_p999_us {
        lat.push(
            Line::new(
                "steady p99.9 at the high rate",
                plot::GREY,
                vec![(0.0, s), (secs, s)],
            )
            .no_markers(),
        );
        lat.push(
            Line::new(
                "2x steady p99.9",
                plot::RED,
                vec![(0.0, 2.0 * s), (secs, 2.0 * s)],
            )
            .dashed()
            .no_markers(),
        );
    }
    let rate = vec![
        Line::new(
            "offered",
            plot::GREY,
            windows
                .iter()
                .map(|w| (w.start_s, w.offered_krps))
                .collect(),
        )
        .no_markers(),
        Line::new(
            "answered",
            plot::GREEN,
            windows
                .iter()
                .map(|w| (w.start_s, w.answered_krps))
                .collect(),
        )
        .no_markers(),
    ];
    [
        latency_chart(
            format!("Corral: p99.9 and p99 per {window_ms} ms window through a load step"),
            "time (s)",
            (0.0, secs),
            lat,
        ),
        Chart {
            title: "Offered and answered rate".into(),
            x_label: "time (s)".into(),
            y_label: "thousand requests/s".into(),
            log_y: false,
            x_range: (0.0, secs),
            y_range: None,
            lines: rate,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(x: f64, p50: f64, p99: Option<f64>, p999: Option<f64>) -> PlotPoint {
        PlotPoint {
            x,
            p50_us: Some(p50),
            p99_us: p99,
            p999_us: p999,
            achieved_krps: None,
            batch_fraction: None,
        }
    }

    fn names(chart: &Chart) -> Vec<&str> {
        chart.lines.iter().map(|l| l.name.as_str()).collect()
    }

    #[test]
    fn each_percentile_has_its_own_look() {
        let l = |p: Percentile| p.line("C", plot::BLUE, vec![(0.1, 1.0)]);
        let looks: Vec<_> = [Percentile::P50, Percentile::P99, Percentile::P999]
            .into_iter()
            .map(|p| (l(p).stroke, l(p).marker))
            .collect();
        assert_eq!(looks.len(), 3);
        for (i, a) in looks.iter().enumerate() {
            for b in &looks[i + 1..] {
                assert!(a.0 != b.0 && a.1 != b.1, "{looks:?}");
            }
        }
        let u99 = Percentile::P99
            .unbounded("C", plot::BLUE, vec![0.5])
            .unwrap();
        let u999 = Percentile::P999
            .unbounded("C", plot::BLUE, vec![0.5])
            .unwrap();
        assert!(u99.ceiling && u999.ceiling);
        assert_ne!(u99.marker, u999.marker);
        assert_eq!(u99.name, "C p99 unbounded (>1% lost)");
        assert_eq!(u999.name, "C p99.9 unbounded (>0.1% lost)");
        assert!(
            Percentile::P50
                .unbounded("C", plot::BLUE, vec![0.5])
                .is_none()
        );
    }

    #[test]
    fn the_sweep_draws_p99_and_marks_where_each_tail_is_unbounded() {
        let corral = Series {
            name: "Corral".into(),
            color: plot::BLUE,
            points: vec![
                point(0.1, 20.0, Some(100.0), Some(1000.0)),
                // Over 0.1% but not over 1% lost: p99 is finite, p99.9 is not.
                point(0.5, 30.0, Some(900.0), None),
                point(0.9, 40.0, None, None),
            ],
        };
        let [lat, batch] = sweep(
            "exp:10us",
            load_range(&[0.1, 0.5, 0.9]),
            &[corral],
            &[BoundP999 {
                load: 0.1,
                p999_us: 70.0,
            }],
        );
        assert_eq!(
            names(&lat),
            [
                "Corral p99.9",
                "Corral p99",
                "Corral p50",
                "Corral p99.9 unbounded (>0.1% lost)",
                "Corral p99 unbounded (>1% lost)",
                "bound p99.9",
                "2x bound p99.9"
            ]
        );
        let pts = |name: &str| {
            lat.lines
                .iter()
                .find(|l| l.name == name)
                .unwrap()
                .points
                .clone()
        };
        assert_eq!(pts("Corral p99"), [(0.1, 100.0), (0.5, 900.0)]);
        assert_eq!(pts("Corral p99.9"), [(0.1, 1000.0)]);
        assert_eq!(
            pts("Corral p99.9 unbounded (>0.1% lost)"),
            [(0.5, 0.0), (0.9, 0.0)]
        );
        assert_eq!(pts("Corral p99 unbounded (>1% lost)"), [(0.9, 0.0)]);
        // No batch numbers, no batch line: only the ideal.
        assert_eq!(names(&batch), ["ideal: 1 - load"]);
    }

    /// A fixed sequence in [0, 1), for window series that look measured.
    fn jitter(n: usize) -> Vec<f64> {
        let mut x = 12345u64;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 11) as f64 / (1u64 << 53) as f64
            })
            .collect()
    }

    /// Every experiment's plots from a small fixed data set, written as PNG and SVG. Set
    /// `CORRAL_DEMO_PLOT_DIR` to keep them there for a look.
    #[test]
    fn every_experiments_plots_render() {
        let font = Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
        assert!(font.exists(), "install fonts-dejavu-core");
        plot::load_font(font).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let out = std::env::var_os("CORRAL_DEMO_PLOT_DIR")
            .map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
        std::fs::create_dir_all(&out).unwrap();
        let loads = [0.1, 0.3, 0.5];
        let ivs: Vec<Series> = [(5, 1.0), (25, 1.1), (50, 1.3), (100, 1.8), (1000, 3.0)]
            .into_iter()
            .enumerate()
            .map(|(i, (iv, k))| Series {
                name: interval_name(iv),
                color: plot::PALETTE[i],
                points: loads
                    .iter()
                    .map(|&l| PlotPoint {
                        x: l,
                        p50_us: Some(25.0 * k),
                        p99_us: (l < 0.5 || iv < 1000).then_some(300.0 * k / (1.0 - l)),
                        p999_us: (l < 0.5 || iv < 50).then_some(1200.0 * k / (1.0 - l)),
                        achieved_krps: None,
                        batch_fraction: Some((1.0 - l) * 0.8 / k),
                    })
                    .collect(),
            })
            .collect();
        let bound: Vec<BoundP999> = loads
            .iter()
            .map(|&l| BoundP999 {
                load: l,
                p999_us: 69.0 / (1.0 - l),
            })
            .collect();
        let [lat, batch] = intervals("exp:10us", load_range(&loads), &ivs, &bound);
        plot::save(&out, "intervals", &[lat]).unwrap();
        plot::save(&out, "intervals-batch", &[batch]).unwrap();

        let noise = jitter(600);
        let windows: Vec<BurstWindow> = (0..300)
            .map(|i| {
                let t = i as f64 * 0.01;
                let high = (1.0..2.0).contains(&t);
                let base = if high { 400.0 } else { 90.0 };
                BurstWindow {
                    start_s: t,
                    p99_us: Some(base * 0.6 * (1.0 + noise[2 * i])),
                    p999_us: Some(base * (1.0 + 3.0 * noise[2 * i + 1].powi(4))),
                    offered_krps: if high { 70.0 } else { 10.0 },
                    answered_krps: (if high { 70.0 } else { 10.0 }) * (0.9 + 0.2 * noise[i]),
                }
            })
            .collect();
        plot::save(&out, "burst", &burst(10.0, 3.0, &windows, Some(450.0))).unwrap();

        let rates = [1.0, 10.0, 40.0, 100.0, 200.0, 300.0];
        let kv_systems: Vec<Series> = [
            (System::Corral, 300.0, 1.0),
            (System::Linux, 200.0, 2.5),
            (System::Dedicated, 300.0, 0.6),
        ]
        .into_iter()
        .map(|(s, capacity, k)| Series {
            name: s.title().to_owned(),
            color: color_of(s),
            points: rates
                .iter()
                .map(|&r| PlotPoint {
                    x: r,
                    p50_us: Some(k * (20.0 + r / 4.0)),
                    p99_us: (r < capacity).then_some(k * (60.0 + r * 2.0)),
                    p999_us: None,
                    achieved_krps: Some(r.min(capacity * 0.95)),
                    batch_fraction: (s != System::Dedicated).then_some(1.0 - r / 350.0),
                })
                .collect(),
        })
        .collect();
        plot::save(
            &out,
            "kv",
            &kv(&kv_systems, 300.0, "memcached over TCP: latency"),
        )
        .unwrap();

        for stem in ["intervals", "intervals-batch", "burst", "kv"] {
            let png = std::fs::read(out.join(format!("{stem}.png"))).unwrap();
            assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{stem}");
            let svg = std::fs::read_to_string(out.join(format!("{stem}.svg"))).unwrap();
            assert!(svg.trim_end().ends_with("</svg>"), "{stem}");
        }
    }

    #[test]
    fn the_kv_latency_panel_draws_p99_and_p50_only() {
        let s = Series {
            name: "Linux".into(),
            color: plot::ORANGE,
            points: vec![point(1.0, 20.0, Some(50.0), None)],
        };
        let [lat, _, _] = kv(&[s], 1.0, "latency");
        assert_eq!(names(&lat), ["Linux p99", "Linux p50"]);
    }
}
