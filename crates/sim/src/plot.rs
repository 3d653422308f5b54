//! The `figure1` chart as PNG and SVG with plotters, in the demo's style (`apps/demo`): text
//! drawn with ab_glyph from a TrueType file read at run time, so nothing links against
//! fontconfig or freetype. Only the binary uses it; the simulation never plots.

use std::path::{Path, PathBuf};

use corral_sim::bound::BoundParams;
use corral_sim::figure1::{Figure1Row, MeasuredPoint};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The family name the font is registered under.
pub const FAMILY: &str = "corral-sim";
const SIZE: (u32, u32) = (1000, 600);
const BOUND_COLOR: RGBColor = RGBColor(31, 119, 180);
const CORRAL_COLOR: RGBColor = RGBColor(214, 39, 40);
const MEASURED_COLOR: RGBColor = RGBColor(44, 160, 44);

/// Registers the font plotters draws text with; the error names the file and how to get it.
pub fn load_font(path: &Path) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the plot font {}: {e} (install the Debian package fonts-dejavu-core, \
             or name another TrueType file with --font)",
            path.display()
        )
    })?;
    // plotters keeps fonts for the life of the program; this runs once per process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| format!("{} is not a TrueType/OpenType font", path.display()))
}

/// Runs of loads with the same bound `n`: (n, first load, last load, highest efficiency).
fn segments(rows: &[Figure1Row]) -> Vec<(u32, f64, f64, f64)> {
    let mut out: Vec<(u32, f64, f64, f64)> = Vec::new();
    for row in rows {
        let point = row.bound;
        match out.last_mut() {
            Some(last) if last.0 == point.cores => {
                last.2 = point.load;
                last.3 = last.3.max(point.efficiency);
            }
            _ => out.push((point.cores, point.load, point.load, point.efficiency)),
        }
    }
    out
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    rows: &[Figure1Row],
    measured: &[MeasuredPoint],
    bound: &BoundParams,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let x_max = rows
        .iter()
        .map(|row| row.bound.load)
        .chain(measured.iter().map(|point| point.load))
        .fold(1.0_f64, f64::max)
        .ceil();
    let title = format!(
        "CPU efficiency: 1 ms allocator bound (p{} <= {} us) vs Corral (hollow: p{0} over)",
        bound.quantile * 100.0,
        bound.latency_limit_ns / 1e3
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 22))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..1.05)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("offered load (cores)")
        .y_desc("CPU efficiency")
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(err)?;
    // One line per n, broken where a core is added: the paper's sawtooth.
    let mut runs: Vec<(u32, Vec<(f64, f64)>)> = Vec::new();
    for row in rows {
        let point = (row.bound.load, row.bound.efficiency);
        match runs.last_mut() {
            Some((cores, points)) if *cores == row.bound.cores => points.push(point),
            _ => runs.push((row.bound.cores, vec![point])),
        }
    }
    for (index, (_, points)) in runs.into_iter().enumerate() {
        let series = chart
            .draw_series(LineSeries::new(points, BOUND_COLOR.stroke_width(2)))
            .map_err(err)?;
        if index == 0 {
            series
                .label("bound, 1 ms allocator (M/M/n, label: n)")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], BOUND_COLOR.stroke_width(2))
                });
        }
    }
    // A point whose p99.9 misses the bound's limit is drawn hollow: its efficiency is not one
    // that meets the limit.
    let limit_us = bound.latency_limit_ns / 1e3;
    let mut series = |points: Vec<(f64, f64, f64)>, color: RGBColor, label: String, radius: i32| {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|&(x, y, _)| (x, y)),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&(x, y, tail_us)| {
                let style = if tail_us <= limit_us {
                    color.filled()
                } else {
                    WHITE.filled()
                };
                Circle::new((x, y), radius, style)
            }))
            .map_err(err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y, _)| Circle::new((x, y), radius, color.stroke_width(2))),
            )
            .map_err(err)
            .map(drop)
    };
    series(
        rows.iter()
            .filter(|row| row.corral_efficiency.is_finite())
            .map(|row| {
                let tail_us = row.corral_p999_ns as f64 / 1e3;
                (row.bound.load, row.corral_efficiency, tail_us)
            })
            .collect(),
        CORRAL_COLOR,
        "Corral (simulated, Shenango policy)".into(),
        3,
    )?;
    if let Some(cores) = measured.iter().map(|point| point.cores).max() {
        series(
            measured
                .iter()
                .map(|point| (point.load, point.efficiency, point.p999_us))
                .collect(),
            MEASURED_COLOR,
            format!(
                "Corral, measured on this machine ({cores} core{})",
                if cores == 1 { "" } else { "s" }
            ),
            5,
        )?;
    }
    // Each run of loads with the same n gets its n above it, as in the paper.
    let label = (FAMILY, 13)
        .into_font()
        .color(&BOUND_COLOR)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (cores, first, last, top) in segments(rows) {
        chart
            .draw_series(std::iter::once(Text::new(
                cores.to_string(),
                ((first + last) / 2.0, (top + 0.02).min(1.04)),
                label.clone(),
            )))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FAMILY, 14))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Writes `dir/figure1.png` and `dir/figure1.svg`, with the `measured` points as a third series
/// when there are any; returns both paths.
pub fn figure1(
    dir: &Path,
    rows: &[Figure1Row],
    measured: &[MeasuredPoint],
    bound: &BoundParams,
) -> Result<Vec<PathBuf>, String> {
    let png = dir.join("figure1.png");
    let svg = dir.join("figure1.svg");
    draw(
        BitMapBackend::new(&png, SIZE).into_drawing_area(),
        rows,
        measured,
        bound,
    )
    .map_err(|e| format!("{}: {e}", png.display()))?;
    draw(
        SVGBackend::new(&svg, SIZE).into_drawing_area(),
        rows,
        measured,
        bound,
    )
    .map_err(|e| format!("{}: {e}", svg.display()))?;
    Ok(vec![png, svg])
}
