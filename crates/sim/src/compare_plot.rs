//! The `compare` charts as PNG and SVG, in `figure1`'s style (plot.rs: plotters, text drawn
//! with the font plot.rs registers): a grid of panels, one row per core count, one line per
//! policy.

use std::ops::Range;
use std::path::{Path, PathBuf};

use corral_sim::compare::{CompareConfig, Comparison, SweepPoint};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::plot::FAMILY;

const PANEL: (u32, u32) = (520, 400);
const GREY: RGBColor = RGBColor(120, 120, 120);
/// The burst chart's cores are means over this long.
const MEAN_OVER_NS: u64 = 10_000_000;

/// Each policy keeps its colour in every panel; names not listed share grey.
fn policy_color(policy: &str) -> RGBColor {
    match policy {
        "shenango" => RGBColor(214, 39, 40),
        "arachne" => RGBColor(31, 119, 180),
        "static" => RGBColor(44, 160, 44),
        _ => GREY,
    }
}

struct Line {
    label: String,
    color: RGBColor,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

struct Panel {
    title: String,
    x_desc: &'static str,
    y_desc: &'static str,
    x: Range<f64>,
    y: Range<f64>,
    log_y: bool,
    /// A dot at each point and thicker lines: for sweeps, whose points are few.
    markers: bool,
    lines: Vec<Line>,
}

/// Axis labels without trailing zeros: 100000, 0.5.
fn label(value: f64) -> String {
    if value >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

impl Panel {
    fn new(
        title: String,
        x_desc: &'static str,
        y_desc: &'static str,
        x: Range<f64>,
        lines: Vec<Line>,
    ) -> Self {
        Self {
            title,
            x_desc,
            y_desc,
            x,
            y: 0.0..1.0,
            log_y: false,
            markers: false,
            lines,
        }
    }

    /// A linear y axis from 0 with room above `top`.
    fn up_to(self, top: f64) -> Self {
        Self {
            y: 0.0..top * 1.05,
            ..self
        }
    }

    /// A log y axis spanning the lines' positive values.
    fn log(self) -> Self {
        Self {
            y: Self::log_range(&self.lines),
            log_y: true,
            ..self
        }
    }

    fn with_markers(self) -> Self {
        Self {
            markers: true,
            ..self
        }
    }

    /// A log axis cannot show 0: those points are left out, and the range spans the rest.
    fn log_range(lines: &[Line]) -> Range<f64> {
        let values = lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .filter(|v| *v > 0.0);
        let (low, high) = values.fold((f64::MAX, 0.0_f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        if high == 0.0 {
            1.0..10.0
        } else {
            low / 2.0..high * 2.0
        }
    }
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the plot: {e}");
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, (FAMILY, 17))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60);
    // The two coordinate types are different Rust types; the drawing is the same.
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(panel.x_desc)
                .y_desc(panel.y_desc)
                .label_style((FAMILY, 12))
                .axis_desc_style((FAMILY, 13))
                .light_line_style(RGBColor(235, 235, 235))
                .y_label_formatter(&|v| label(*v))
                .draw()
                .map_err(err)?;
            for line in &panel.lines {
                let points: Vec<(f64, f64)> = line
                    .points
                    .iter()
                    .copied()
                    .filter(|p| !panel.log_y || p.1 > 0.0)
                    .collect();
                let style = line.color.stroke_width(if panel.markers { 2 } else { 1 });
                if panel.markers {
                    chart
                        .draw_series(
                            points
                                .iter()
                                .map(|&p| Circle::new(p, 3, line.color.filled())),
                        )
                        .map_err(err)?;
                }
                let series = if line.dashed {
                    chart.draw_series(DashedLineSeries::new(points, 6, 4, style))
                } else {
                    chart.draw_series(LineSeries::new(points, style))
                }
                .map_err(err)?;
                let (color, dashed) = (line.color, line.dashed);
                series.label(line.label.as_str()).legend(move |(x, y)| {
                    let style = color.stroke_width(2);
                    if dashed {
                        PathElement::new(vec![(x, y), (x + 8, y)], style)
                    } else {
                        PathElement::new(vec![(x, y), (x + 20, y)], style)
                    }
                });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font((FAMILY, 11))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(err)?;
        }};
    }
    if panel.log_y {
        body!(
            builder
                .build_cartesian_2d(panel.x.clone(), panel.y.clone().log_scale())
                .map_err(err)?
        );
    } else {
        body!(
            builder
                .build_cartesian_2d(panel.x.clone(), panel.y.clone())
                .map_err(err)?
        );
    }
    Ok(())
}

fn draw_grid<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    rows: &[Vec<Panel>],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let columns = rows.iter().map(Vec::len).max().unwrap_or(1);
    let areas = root.split_evenly((rows.len(), columns));
    for (row, panels) in rows.iter().enumerate() {
        for (column, panel) in panels.iter().enumerate() {
            draw_panel(&areas[row * columns + column], panel)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes `dir/stem.png` and `dir/stem.svg`; returns both paths.
fn save(dir: &Path, stem: &str, rows: &[Vec<Panel>]) -> Result<Vec<PathBuf>, String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(1) as u32;
    let size = (PANEL.0 * columns, PANEL.1 * rows.len().max(1) as u32);
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw_grid(BitMapBackend::new(&png, size).into_drawing_area(), rows)
        .map_err(|e| format!("{}: {e}", png.display()))?;
    draw_grid(SVGBackend::new(&svg, size).into_drawing_area(), rows)
        .map_err(|e| format!("{}: {e}", svg.display()))?;
    Ok(vec![png, svg])
}

/// The sweep: per core count, p99.9 (log), batch share and latency-critical cores against the
/// offered load; solid lines over the whole run, dashed after settling.
pub fn sweep(dir: &Path, comparison: &Comparison) -> Result<Vec<PathBuf>, String> {
    let mut rows = Vec::new();
    for provision in &comparison.provisions {
        let cores = provision.cores;
        let mut policies: Vec<&str> = Vec::new();
        for point in comparison.sweep.iter().filter(|p| p.cores == cores) {
            if !policies.contains(&point.policy.as_str()) {
                policies.push(&point.policy);
            }
        }
        let lines = |whole: fn(&SweepPoint) -> f64, settled: fn(&SweepPoint) -> f64| {
            let mut lines = Vec::new();
            for &policy in &policies {
                let points: Vec<&SweepPoint> = comparison
                    .sweep
                    .iter()
                    .filter(|p| p.cores == cores && p.policy == policy)
                    .collect();
                for (dashed, value) in [(false, whole), (true, settled)] {
                    lines.push(Line {
                        label: if dashed {
                            format!("{policy}, settled")
                        } else {
                            policy.to_string()
                        },
                        color: policy_color(policy),
                        dashed,
                        points: points.iter().map(|p| (p.result.load, value(p))).collect(),
                    });
                }
            }
            lines
        };
        let latency = lines(
            |p| p.result.p999_ns as f64 / 1e3,
            |p| p.settled.worst_window_p999_ns as f64 / 1e3,
        );
        let x = 0.0..1.0;
        rows.push(vec![
            Panel::new(
                format!("{cores} cores: p99.9 (settled: worst window)"),
                "offered load",
                "latency (us)",
                x.clone(),
                latency,
            )
            .log()
            .with_markers(),
            Panel::new(
                format!("{cores} cores: batch share of all cores"),
                "offered load",
                "batch share",
                x.clone(),
                lines(|p| p.result.batch_share, |p| p.settled.batch_share),
            )
            .up_to(1.0)
            .with_markers(),
            Panel::new(
                format!("{cores} cores: cores held, latency-critical"),
                "offered load",
                "cores",
                x,
                lines(|p| p.result.lc_cores_mean, |p| p.settled.lc_cores),
            )
            .up_to(f64::from(cores))
            .with_markers(),
        ]);
    }
    save(dir, "compare", &rows)
}

/// The burst: per core count, cores held by latency-critical and by batch runtimes and the
/// p99.9 of each sample window (log) over time, one line per policy.
pub fn burst(
    dir: &Path,
    comparison: &Comparison,
    config: &CompareConfig,
) -> Result<Vec<PathBuf>, String> {
    let end_ms = config.burst_duration_ns as f64 / 1e6;
    let ms = |t: u64| t as f64 / 1e6;
    let mut rows = Vec::new();
    for provision in &comparison.provisions {
        let cores = provision.cores;
        let runs: Vec<_> = comparison
            .bursts
            .iter()
            .filter(|run| run.cores == cores)
            .collect();
        // Cores held at one instant swing between none and all as kthreads park and wake; a
        // mean over `group` samples shows where the allocation stands.
        let per_policy = |value: fn(&corral_sim::Sample) -> f64, group: usize| -> Vec<Line> {
            runs.iter()
                .map(|run| Line {
                    label: run.policy.clone(),
                    color: policy_color(&run.policy),
                    dashed: false,
                    points: run
                        .result
                        .series
                        .chunks(group)
                        .map(|chunk| {
                            let mean = chunk.iter().map(value).sum::<f64>() / chunk.len() as f64;
                            (ms(chunk[chunk.len() - 1].t_ns), mean)
                        })
                        .collect(),
                })
                .collect()
        };
        let group = (MEAN_OVER_NS / config.sample_every_ns).max(1) as usize;
        let means = if group > 1 {
            format!(" ({} ms means)", MEAN_OVER_NS / 1_000_000)
        } else {
            String::new()
        };
        // The offered load in cores, as a step line, for where the cores should be.
        let mut offered = Vec::new();
        let steps = config.burst.as_steps();
        for (index, &(from, load)) in steps.iter().enumerate() {
            let until = steps
                .get(index + 1)
                .map_or(config.burst_duration_ns, |s| s.0);
            let level = load * f64::from(cores);
            offered.push((ms(from), level));
            offered.push((ms(until.min(config.burst_duration_ns)), level));
        }
        let mut lc = per_policy(|s| f64::from(s.lc_cores), group);
        lc.push(Line {
            label: "offered load (cores)".into(),
            color: GREY,
            dashed: true,
            points: offered,
        });
        let mut latency = per_policy(|s| s.window_p999_ns as f64 / 1e3, 1);
        let threshold = config.burst_threshold_ns as f64 / 1e3;
        latency.push(Line {
            label: format!("{threshold} us"),
            color: GREY,
            dashed: true,
            points: vec![(0.0, threshold), (end_ms, threshold)],
        });
        let x = 0.0..end_ms;
        let cores_panel = |what: &str, lines| {
            Panel::new(
                format!("{cores} cores: cores held, {what}{means}"),
                "time (ms)",
                "cores",
                x.clone(),
                lines,
            )
            .up_to(f64::from(cores))
        };
        rows.push(vec![
            cores_panel("latency-critical", lc),
            cores_panel("batch", per_policy(|s| f64::from(s.batch_cores), group)),
            Panel::new(
                format!(
                    "{cores} cores: p99.9 per {} us window",
                    config.sample_every_ns / 1_000
                ),
                "time (ms)",
                "latency (us)",
                x.clone(),
                latency,
            )
            .log(),
        ]);
    }
    save(dir, "burst", &rows)
}
