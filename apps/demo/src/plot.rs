//! Line charts as PNG and SVG with plotters.
//!
//! Text is drawn with ab_glyph from a TrueType file read at run time, so that nothing links
//! against fontconfig or freetype.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::{Error, Result};

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Line {
    pub name: String,
    pub color: RGBColor,
    pub dashed: bool,
    pub markers: bool,
    /// Drawn as crosses along the top of the chart, whatever their y: values that have no
    /// finite place on the axis (a tail made unbounded by lost requests).
    pub ceiling: bool,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    pub fn new(name: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.into(),
            color,
            dashed: false,
            markers: true,
            ceiling: false,
            points: points
                .into_iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
        }
    }

    pub fn dashed(mut self) -> Line {
        self.dashed = true;
        self
    }

    pub fn no_markers(mut self) -> Line {
        self.markers = false;
        self
    }

    /// Crosses at the top of the chart at these x values.
    pub fn ceiling(name: impl Into<String>, color: RGBColor, xs: Vec<f64>) -> Line {
        let mut l = Line::new(name, color, xs.into_iter().map(|x| (x, 0.0)).collect());
        l.ceiling = true;
        l
    }
}

/// One panel: axes, labels and lines.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_y: bool,
    pub x_range: (f64, f64),
    /// Fixed y range; derived from the data when `None`.
    pub y_range: Option<(f64, f64)>,
    pub lines: Vec<Line>,
}

pub const BLUE: RGBColor = RGBColor(31, 119, 180);
pub const ORANGE: RGBColor = RGBColor(230, 97, 1);
pub const GREEN: RGBColor = RGBColor(44, 160, 44);
pub const GREY: RGBColor = RGBColor(110, 110, 110);
pub const PURPLE: RGBColor = RGBColor(148, 103, 189);
pub const RED: RGBColor = RGBColor(214, 39, 40);
pub const BROWN: RGBColor = RGBColor(140, 86, 75);
pub const PALETTE: [RGBColor; 6] = [BLUE, ORANGE, GREEN, PURPLE, RED, BROWN];

const FAMILY: &str = "sans-serif";

fn read_font(path: &Path) -> std::result::Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| {
        format!(
            "cannot read the plot font {}: {e} (install the Debian package fonts-dejavu-core, \
             or name another TrueType file with --font)",
            path.display()
        )
    })
}

/// Registers the font once; the error names the file and how to get it.
pub fn load_font(path: &Path) -> Result<()> {
    static LOADED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = read_font(path)?;
            // plotters keeps fonts for the life of the program.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
                .map_err(|_| format!("{} is not a TrueType/OpenType font", path.display()))
        })
        .clone()
        .map_err(Error::Failed)
}

fn y_range(chart: &Chart) -> (f64, f64) {
    if let Some(r) = chart.y_range {
        return r;
    }
    let ys = chart
        .lines
        .iter()
        .filter(|l| !l.ceiling)
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite() && (!chart.log_y || *y > 0.0));
    let (lo, hi) = ys.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), y| {
        (lo.min(y), hi.max(y))
    });
    if !lo.is_finite() {
        return if chart.log_y { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if chart.log_y {
        // Whole decades, so that the log axis has labelled ticks at both ends.
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf((hi * 1.05).log10().ceil()),
        )
    } else {
        (lo.min(0.0), if hi > 0.0 { hi * 1.1 } else { 1.0 })
    }
}

const LEGEND_WIDTH: i32 = 290;

fn draw_legend<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::msg(format!("drawing a plot: {e}"));
    for (i, line) in chart.lines.iter().enumerate() {
        let y = 30 + 24 * i as i32;
        let style = line.color.stroke_width(2);
        if line.ceiling {
            area.draw(&Cross::new((14, y), 5, style)).map_err(err)?;
        } else if line.dashed {
            area.draw(&PathElement::new(vec![(4, y), (11, y)], style))
                .map_err(err)?;
            area.draw(&PathElement::new(vec![(17, y), (24, y)], style))
                .map_err(err)?;
        } else {
            area.draw(&PathElement::new(vec![(4, y), (24, y)], style))
                .map_err(err)?;
        }
        // A marker would fill the gap that makes a dashed sample look dashed.
        if line.markers && !line.ceiling && !line.dashed {
            area.draw(&Circle::new((14, y), 3, line.color.filled()))
                .map_err(err)?;
        }
        area.draw(&Text::new(
            line.name.clone(),
            (32, y - 8),
            (FAMILY, 15).into_font().color(&BLACK),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// Axis numbers without needless decimals (log axes span decades: 10, 100, 1000).
fn axis_number(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if v.abs() >= 0.1 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn draw_chart<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, chart: &Chart) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::msg(format!("drawing a plot: {e}"));
    let (y0, y1) = y_range(chart);
    let (x0, x1) = chart.x_range;
    let titled = area.titled(&chart.title, (FAMILY, 22)).map_err(err)?;
    // The legend gets a strip of its own, so that it never hides a line.
    let width = titled.dim_in_pixel().0 as i32;
    let (plot_area, legend_area) = titled.split_horizontally(width - LEGEND_WIDTH);
    draw_legend(&legend_area, chart)?;
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70);
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .y_label_formatter(&|v: &f64| axis_number(*v))
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .label_style((FAMILY, 14))
                .axis_desc_style((FAMILY, 16))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(err)?;
            for line in &chart.lines {
                let color = line.color;
                let stroke = color.stroke_width(2);
                if line.ceiling {
                    let top = if chart.log_y {
                        y1 / 1.25
                    } else {
                        y1 - (y1 - y0) * 0.03
                    };
                    ctx.draw_series(
                        line.points
                            .iter()
                            .map(|&(x, _)| Cross::new((x, top), 6, color.stroke_width(2))),
                    )
                    .map_err(err)?;
                    continue;
                }
                if line.dashed {
                    ctx.draw_series(DashedLineSeries::new(
                        line.points.iter().copied(),
                        7,
                        7,
                        stroke,
                    ))
                    .map_err(err)?;
                } else {
                    ctx.draw_series(LineSeries::new(line.points.iter().copied(), stroke))
                        .map_err(err)?;
                }
                if line.markers {
                    ctx.draw_series(
                        line.points
                            .iter()
                            .map(|&p| Circle::new(p, 3, color.filled())),
                    )
                    .map_err(err)?;
                }
            }
        }};
    }
    if chart.log_y {
        body!(
            builder
                .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                .map_err(err)?
        );
    } else {
        body!(builder.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?);
    }
    Ok(())
}

fn draw_panels<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, panels: &[Chart]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::msg(format!("drawing a plot: {e}"));
    root.fill(&WHITE).map_err(err)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, chart) in areas.iter().zip(panels) {
        draw_chart(area, chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes `dir/stem.png` and `dir/stem.svg`, panels stacked vertically; returns both paths.
pub fn save(dir: &Path, stem: &str, panels: &[Chart]) -> Result<Vec<PathBuf>> {
    let size = (1200u32, 560 * panels.len().max(1) as u32);
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw_panels(BitMapBackend::new(&png, size).into_drawing_area(), panels)
        .map_err(|e| Error::msg(format!("{}: {e}", png.display())))?;
    draw_panels(SVGBackend::new(&svg, size).into_drawing_area(), panels)
        .map_err(|e| Error::msg(format!("{}: {e}", svg.display())))?;
    Ok(vec![png, svg])
}

#[cfg(test)]
mod tests {
    use super::*;

    const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

    #[test]
    fn a_missing_font_is_named() {
        let msg = read_font(Path::new("/nonexistent/font.ttf")).unwrap_err();
        assert!(msg.contains("/nonexistent/font.ttf"), "{msg}");
        assert!(msg.contains("fonts-dejavu-core"), "{msg}");
    }

    #[test]
    fn plots_are_written_as_png_and_svg() {
        if !Path::new(FONT).exists() {
            panic!("{FONT} is missing: install fonts-dejavu-core (scripts/setup.sh does)");
        }
        load_font(Path::new(FONT)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let chart = Chart {
            title: "test".into(),
            x_label: "load".into(),
            y_label: "us".into(),
            log_y: true,
            x_range: (0.0, 1.0),
            y_range: None,
            lines: vec![
                Line::new("a", BLUE, vec![(0.1, 10.0), (0.5, 100.0), (0.9, f64::NAN)]),
                Line::new("b", ORANGE, vec![(0.1, 20.0), (0.9, 2000.0)]).dashed(),
            ],
        };
        let mut lin = chart.clone();
        lin.log_y = false;
        let files = save(dir.path(), "t", &[chart, lin]).unwrap();
        let png = std::fs::read(&files[0]).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    }
}
