//! Line charts as PNG and SVG with plotters.
//!
//! Text is drawn with ab_glyph from a TrueType file read at run time, so that nothing links
//! against fontconfig or freetype. The legend gets a strip of its own on the right, as wide as
//! its widest label measured in that font (labels wrap at word boundaries past a share of the
//! width), and a panel grows taller when its legend needs the room: no entry is ever cut off.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};

/// How a line is stroked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stroke {
    Solid,
    Dashed,
    Dotted,
}

/// The mark drawn at each point of a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    None,
    Circle,
    Triangle,
    Square,
    /// A diagonal cross.
    Cross,
    /// An upright cross.
    Plus,
}

/// One line of a chart.
#[derive(Clone, Debug)]
pub struct Line {
    pub name: String,
    pub color: RGBColor,
    pub stroke: Stroke,
    pub marker: Marker,
    /// Drawn as marks in a band above the plot, one row per such line, whatever their y:
    /// values that have no finite place on the axis (a tail made unbounded by lost requests).
    pub ceiling: bool,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    /// A solid line with a circle at each point; points that are not finite are left out.
    pub fn new(name: impl Into<String>, color: RGBColor, points: Vec<(f64, f64)>) -> Line {
        Line {
            name: name.into(),
            color,
            stroke: Stroke::Solid,
            marker: Marker::Circle,
            ceiling: false,
            points: points
                .into_iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
        }
    }

    pub fn dashed(mut self) -> Line {
        self.stroke = Stroke::Dashed;
        self
    }

    pub fn dotted(mut self) -> Line {
        self.stroke = Stroke::Dotted;
        self
    }

    pub fn marker(mut self, marker: Marker) -> Line {
        self.marker = marker;
        self
    }

    pub fn no_markers(self) -> Line {
        self.marker(Marker::None)
    }

    /// Crosses in the chart's band of unbounded values at these x values.
    pub fn ceiling(name: impl Into<String>, color: RGBColor, xs: Vec<f64>) -> Line {
        let mut l = Line::new(name, color, xs.into_iter().map(|x| (x, 0.0)).collect());
        l.ceiling = true;
        l.marker = Marker::Cross;
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
pub const LIGHT_GREY: RGBColor = RGBColor(165, 165, 165);
pub const PURPLE: RGBColor = RGBColor(148, 103, 189);
pub const RED: RGBColor = RGBColor(214, 39, 40);
pub const BROWN: RGBColor = RGBColor(140, 86, 75);
pub const PALETTE: [RGBColor; 6] = [BLUE, ORANGE, GREEN, PURPLE, RED, BROWN];

const FAMILY: &str = "sans-serif";

/// Width of the image, and the least height of a panel.
const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 560;
/// A panel's title, above its plot and legend (the 22 px title and plotters' padding).
const TITLE_HEIGHT: i32 = 40;

const LEGEND_FONT_SIZE: u32 = 15;
/// The legend strip is at most this share of the width; longer labels wrap.
const LEGEND_MAX_SHARE: f64 = 0.36;
/// Where an entry's text starts, right of its line sample.
const LEGEND_TEXT_X: i32 = 42;
const LEGEND_SAMPLE: (i32, i32) = (4, 34);
const LEGEND_TOP: i32 = 22;
const LEGEND_LINE_HEIGHT: i32 = 19;
const LEGEND_ENTRY_GAP: i32 = 6;
const LEGEND_RIGHT_PAD: i32 = 14;
/// Headroom on measured text: a viewer showing the SVG may substitute a wider font.
const TEXT_SLACK: f64 = 1.08;

/// Plot-area margins of the chart builder, and its axis label areas.
const CHART_MARGIN: i32 = 12;
const X_LABEL_AREA: i32 = 45;
const Y_LABEL_AREA: i32 = 76;
/// Pixels per row of the band of unbounded values, and its padding above and below.
const BAND_ROW: i32 = 15;
const BAND_PAD: i32 = 6;
const BAND_FILL: RGBColor = RGBColor(246, 246, 246);

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

/// Pixel width of `text` at `size` in the registered font, with headroom.
fn text_width(text: &str, size: u32) -> Result<i32> {
    let (w, _) = (FAMILY, size)
        .into_font()
        .box_size(text)
        .map_err(|e| Error::msg(format!("measuring plot text {text:?}: {e}")))?;
    Ok((f64::from(w) * TEXT_SLACK).ceil() as i32)
}

/// Splits `text` into lines no wider than `max` pixels at word boundaries; a word wider than
/// that on its own is split between characters.
fn wrap(text: &str, max: i32, size: u32) -> Result<Vec<String>> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split_whitespace() {
        let joined = if current.is_empty() {
            word.to_owned()
        } else {
            format!("{current} {word}")
        };
        if text_width(&joined, size)? <= max {
            current = joined;
            continue;
        }
        if !current.is_empty() {
            lines.push(std::mem::take(&mut current));
        }
        for c in word.chars() {
            let longer = format!("{current}{c}");
            if !current.is_empty() && text_width(&longer, size)? > max {
                lines.push(std::mem::replace(&mut current, c.to_string()));
            } else {
                current = longer;
            }
        }
    }
    if !current.is_empty() || lines.is_empty() {
        lines.push(current);
    }
    Ok(lines)
}

/// Where a chart's legend goes and what it says, measured before anything is drawn.
#[derive(Clone, Debug)]
struct Legend {
    /// The strip's width, at the right of the panel.
    width: i32,
    /// Each line's name, wrapped to the strip.
    entries: Vec<Vec<String>>,
    /// From the top of the strip to below its last entry.
    height: i32,
}

impl Legend {
    fn layout(chart: &Chart, panel_width: u32) -> Result<Legend> {
        if chart.lines.is_empty() {
            return Ok(Legend {
                width: LEGEND_RIGHT_PAD,
                entries: Vec::new(),
                height: 0,
            });
        }
        let widest =
            (f64::from(panel_width) * LEGEND_MAX_SHARE) as i32 - LEGEND_TEXT_X - LEGEND_RIGHT_PAD;
        let mut entries = Vec::new();
        let mut text_w = 0;
        for line in &chart.lines {
            let lines = wrap(&line.name, widest, LEGEND_FONT_SIZE)?;
            for l in &lines {
                text_w = text_w.max(text_width(l, LEGEND_FONT_SIZE)?);
            }
            entries.push(lines);
        }
        let rows: i32 = entries.iter().map(|e| e.len() as i32).sum();
        Ok(Legend {
            width: LEGEND_TEXT_X + text_w + LEGEND_RIGHT_PAD,
            height: LEGEND_TOP
                + rows * LEGEND_LINE_HEIGHT
                + entries.len() as i32 * LEGEND_ENTRY_GAP,
            entries,
        })
    }

    /// The panel height that holds the plot and the whole legend.
    fn panel_height(&self) -> u32 {
        PANEL_HEIGHT.max((TITLE_HEIGHT + self.height + CHART_MARGIN) as u32)
    }
}

/// Draws `marker` centred on `at`, in whatever coordinates `area` has.
fn draw_marker<DB, CT>(
    area: &DrawingArea<DB, CT>,
    marker: Marker,
    at: CT::From,
    color: RGBColor,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    CT: CoordTranslate,
{
    let at = EmptyElement::at(at);
    let stroke = color.stroke_width(2);
    match marker {
        Marker::None => Ok(()),
        Marker::Circle => area.draw(&(at + Circle::new((0, 0), 3, color.filled()))),
        Marker::Triangle => area.draw(&(at + TriangleMarker::new((0, 0), 5, color.filled()))),
        Marker::Square => area.draw(&(at + Rectangle::new([(-3, -3), (3, 3)], color.filled()))),
        Marker::Cross => area.draw(
            &(at + PathElement::new(vec![(-5, -5), (5, 5)], stroke)
                + PathElement::new(vec![(-5, 5), (5, -5)], stroke)),
        ),
        Marker::Plus => area.draw(
            &(at + PathElement::new(vec![(-6, 0), (6, 0)], stroke)
                + PathElement::new(vec![(0, -6), (0, 6)], stroke)),
        ),
    }
}

/// Dash and gap lengths in pixels.
fn dash(stroke: Stroke) -> Option<(i32, i32)> {
    match stroke {
        Stroke::Solid => None,
        Stroke::Dashed => Some((8, 5)),
        Stroke::Dotted => Some((2, 4)),
    }
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    legend: &Legend,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::msg(format!("drawing a plot: {e}"));
    let font = (FAMILY, LEGEND_FONT_SIZE).into_font().color(&BLACK);
    let mut y = LEGEND_TOP + LEGEND_LINE_HEIGHT / 2;
    for (line, text) in chart.lines.iter().zip(&legend.entries) {
        let style = line.color.stroke_width(2);
        let (x0, x1) = LEGEND_SAMPLE;
        if !line.ceiling {
            match dash(line.stroke) {
                None => area.draw(&PathElement::new(vec![(x0, y), (x1, y)], style)),
                Some((on, off)) => area.draw(&DashedPathElement::new(
                    vec![(x0, y), (x1, y)],
                    on,
                    off,
                    style,
                )),
            }
            .map_err(err)?;
        }
        draw_marker(area, line.marker, ((x0 + x1) / 2, y), line.color).map_err(err)?;
        for (i, l) in text.iter().enumerate() {
            area.draw(&Text::new(
                l.clone(),
                (LEGEND_TEXT_X, y - 8 + i as i32 * LEGEND_LINE_HEIGHT),
                font.clone(),
            ))
            .map_err(err)?;
        }
        y += text.len() as i32 * LEGEND_LINE_HEIGHT + LEGEND_ENTRY_GAP;
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

/// The y axis: the data's range, and above it a band with a row for each line of unbounded
/// values, so that those marks never sit on a line or on each other.
#[derive(Clone, Debug, PartialEq)]
struct YAxis {
    /// The data's range.
    lo: f64,
    hi: f64,
    /// The top of the axis: `hi` when there is no band.
    top: f64,
    /// The y of each band row, top row first, in the order of the chart's ceiling lines.
    rows: Vec<f64>,
}

fn data_range(chart: &Chart) -> (f64, f64) {
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

/// `plot_px` is the plot's height in pixels, which sets how much of the axis a band row takes.
fn y_axis(chart: &Chart, plot_px: i32) -> YAxis {
    let (lo, hi) = data_range(chart);
    let rows = chart
        .lines
        .iter()
        .filter(|l| l.ceiling && !l.points.is_empty())
        .count() as i32;
    if rows == 0 {
        return YAxis {
            lo,
            hi,
            top: hi,
            rows: Vec::new(),
        };
    }
    // Axis units: decades on a log axis.
    let log = chart.log_y;
    let to_u = |y: f64| if log { y.log10() } else { y };
    let from_u = |u: f64| if log { 10f64.powf(u) } else { u };
    let band_px = rows * BAND_ROW + 2 * BAND_PAD;
    let data_px = (plot_px - band_px).max(plot_px / 2);
    let per_px = (to_u(hi) - to_u(lo)) / f64::from(data_px);
    let top_u = to_u(hi) + f64::from(band_px) * per_px;
    YAxis {
        lo,
        hi,
        top: from_u(top_u),
        rows: (0..rows)
            .map(|i| from_u(top_u - f64::from(BAND_PAD + i * BAND_ROW + BAND_ROW / 2) * per_px))
            .collect(),
    }
}

fn draw_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    legend: &Legend,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::msg(format!("drawing a plot: {e}"));
    let (x0, x1) = chart.x_range;
    let titled = area.titled(&chart.title, (FAMILY, 22)).map_err(err)?;
    // The legend gets a strip of its own, so that it never hides a line.
    let (width, height) = titled.dim_in_pixel();
    let (plot_area, legend_area) = titled.split_horizontally(width as i32 - legend.width);
    draw_legend(&legend_area, chart, legend)?;
    let axis = y_axis(chart, height as i32 - 2 * CHART_MARGIN - X_LABEL_AREA);
    let (y0, y1, top) = (axis.lo, axis.hi, axis.top);
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .margin(CHART_MARGIN)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(Y_LABEL_AREA);
    // Tick labels stop at the data's top: the band above it has no scale.
    let y_labels = |v: &f64| {
        if *v > y1 * (1.0 + 1e-9) + 1e-12 {
            String::new()
        } else {
            axis_number(*v)
        }
    };
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_label_formatter(&|v: &f64| axis_number(*v))
                .y_label_formatter(&y_labels)
                .x_desc(chart.x_label.as_str())
                .y_desc(chart.y_label.as_str())
                .label_style((FAMILY, 14))
                .axis_desc_style((FAMILY, 16))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(err)?;
            if !axis.rows.is_empty() {
                ctx.draw_series(std::iter::once(Rectangle::new(
                    [(x0, y1), (x1, top)],
                    BAND_FILL.filled(),
                )))
                .map_err(err)?;
                ctx.draw_series(std::iter::once(PathElement::new(
                    vec![(x0, y1), (x1, y1)],
                    GREY.stroke_width(1),
                )))
                .map_err(err)?;
                let (axis_x, top_y) = ctx.backend_coord(&(x0, top));
                let (base_x, base_y) = plot_area.get_base_pixel();
                // The band has no scale: blank the unlabelled ticks the mesh drew beside it.
                let (_, data_top_y) = ctx.backend_coord(&(x0, y1));
                plot_area
                    .draw(&Rectangle::new(
                        [
                            (axis_x - base_x - 12, top_y - base_y - 2),
                            (axis_x - base_x - 1, data_top_y - base_y - 4),
                        ],
                        WHITE.filled(),
                    ))
                    .map_err(err)?;
                plot_area
                    .draw(&Text::new(
                        "unbounded",
                        // At the band's top, clear of the data's top tick label.
                        (axis_x - base_x - 8, top_y - base_y + 3),
                        (FAMILY, 13)
                            .into_font()
                            .color(&GREY)
                            .pos(Pos::new(HPos::Right, VPos::Top)),
                    ))
                    .map_err(err)?;
            }
            let mut row = axis.rows.iter();
            for line in &chart.lines {
                let color = line.color;
                let stroke = color.stroke_width(2);
                if line.ceiling {
                    // Rows go to the ceiling lines with points, in order (see `y_axis`).
                    if line.points.is_empty() {
                        continue;
                    }
                    let Some(&y) = row.next() else { continue };
                    for &(x, _) in &line.points {
                        draw_marker(ctx.plotting_area(), line.marker, (x, y), color)
                            .map_err(err)?;
                    }
                    continue;
                }
                let points = line.points.iter().copied();
                match dash(line.stroke) {
                    None => ctx.draw_series(LineSeries::new(points, stroke)),
                    Some((on, off)) => {
                        ctx.draw_series(DashedLineSeries::new(points, on, off, stroke))
                    }
                }
                .map_err(err)?;
                for &p in &line.points {
                    draw_marker(ctx.plotting_area(), line.marker, p, color).map_err(err)?;
                }
            }
        }};
    }
    if chart.log_y {
        body!(
            builder
                .build_cartesian_2d(x0..x1, (y0..top).log_scale())
                .map_err(err)?
        );
    } else {
        body!(builder.build_cartesian_2d(x0..x1, y0..top).map_err(err)?);
    }
    Ok(())
}

fn draw_panels<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    panels: &[Chart],
    legends: &[Legend],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| Error::msg(format!("drawing a plot: {e}"));
    root.fill(&WHITE).map_err(err)?;
    let mut rest = root;
    for (chart, legend) in panels.iter().zip(legends) {
        let (area, below) = rest.split_vertically(legend.panel_height());
        draw_chart(&area, chart, legend)?;
        rest = below;
    }
    rest.present().map_err(err)?;
    Ok(())
}

/// Writes `dir/stem.png` and `dir/stem.svg`, panels stacked vertically; returns both paths.
pub fn save(dir: &Path, stem: &str, panels: &[Chart]) -> Result<Vec<PathBuf>> {
    let mut legends = panels
        .iter()
        .map(|c| Legend::layout(c, WIDTH))
        .collect::<Result<Vec<_>>>()?;
    // One strip width for every panel, so that stacked panels share their x axis's place.
    let strip = legends.iter().map(|l| l.width).max().unwrap_or(0);
    for l in &mut legends {
        l.width = strip;
    }
    let height = legends
        .iter()
        .map(Legend::panel_height)
        .sum::<u32>()
        .max(PANEL_HEIGHT);
    let size = (WIDTH, height);
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    draw_panels(
        BitMapBackend::new(&png, size).into_drawing_area(),
        panels,
        &legends,
    )
    .map_err(|e| Error::msg(format!("{}: {e}", png.display())))?;
    draw_panels(
        SVGBackend::new(&svg, size).into_drawing_area(),
        panels,
        &legends,
    )
    .map_err(|e| Error::msg(format!("{}: {e}", svg.display())))?;
    Ok(vec![png, svg])
}

#[cfg(test)]
mod tests {
    use super::*;

    const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

    fn font() {
        if !Path::new(FONT).exists() {
            panic!("{FONT} is missing: install fonts-dejavu-core (scripts/setup.sh does)");
        }
        load_font(Path::new(FONT)).unwrap();
    }

    fn chart(lines: Vec<Line>) -> Chart {
        Chart {
            title: "test".into(),
            x_label: "load".into(),
            y_label: "us".into(),
            log_y: true,
            x_range: (0.0, 1.0),
            y_range: None,
            lines,
        }
    }

    #[test]
    fn a_missing_font_is_named() {
        let msg = read_font(Path::new("/nonexistent/font.ttf")).unwrap_err();
        assert!(msg.contains("/nonexistent/font.ttf"), "{msg}");
        assert!(msg.contains("fonts-dejavu-core"), "{msg}");
    }

    /// Also draws a legend that wraps and outgrows its panel. Set `CORRAL_DEMO_PLOT_DIR` to
    /// keep the files there for a look.
    #[test]
    fn plots_are_written_as_png_and_svg() {
        font();
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::env::var_os("CORRAL_DEMO_PLOT_DIR")
            .map_or_else(|| tmp.path().to_path_buf(), PathBuf::from);
        std::fs::create_dir_all(&dir).unwrap();
        let mut lines = vec![Line::new(
            "a legend label long enough that it has to wrap onto more than one line of the \
                 strip, since the strip never takes more than about a third of the width",
            RED,
            vec![(0.2, 50.0), (0.8, 60.0)],
        )];
        lines.extend((0..24).map(|i| {
            Line::new(
                format!("line {i}"),
                PALETTE[i % PALETTE.len()],
                vec![(0.1, 10.0 + i as f64), (0.9, 20.0 + 3.0 * i as f64)],
            )
        }));
        save(&dir, "t-long-legend", &[chart(lines)]).unwrap();
        let chart = chart(vec![
            Line::new("a", BLUE, vec![(0.1, 10.0), (0.5, 100.0), (0.9, f64::NAN)]),
            Line::new("b", ORANGE, vec![(0.1, 20.0), (0.9, 2000.0)]).dashed(),
            Line::new("c", GREEN, vec![(0.1, 15.0), (0.9, 30.0)])
                .dotted()
                .marker(Marker::Square),
            Line::ceiling("a unbounded", BLUE, vec![0.9]),
            Line::ceiling("b unbounded", ORANGE, vec![0.5, 0.9]).marker(Marker::Plus),
        ]);
        let mut lin = chart.clone();
        lin.log_y = false;
        let files = save(&dir, "t", &[chart, lin]).unwrap();
        let png = std::fs::read(&files[0]).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = std::fs::read_to_string(&files[1]).unwrap();
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn the_legend_strip_is_as_wide_as_its_widest_label() {
        font();
        let short = Legend::layout(&chart(vec![Line::new("a", BLUE, vec![])]), WIDTH).unwrap();
        let name = "Dedicated p99.9 unbounded (>0.1% lost)";
        let long = Legend::layout(&chart(vec![Line::new(name, BLUE, vec![])]), WIDTH).unwrap();
        assert_eq!(long.entries, vec![vec![name.to_owned()]]);
        let text = text_width(name, LEGEND_FONT_SIZE).unwrap();
        assert_eq!(long.width, LEGEND_TEXT_X + text + LEGEND_RIGHT_PAD);
        assert!(short.width < long.width, "{short:?} {long:?}");
    }

    #[test]
    fn a_label_too_long_for_the_strip_wraps_and_keeps_every_word() {
        font();
        let name = "a very long legend label that says far more than a legend entry ever should \
                    and then adds a word without a break: ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJ";
        let legend = Legend::layout(&chart(vec![Line::new(name, BLUE, vec![])]), WIDTH).unwrap();
        let lines = &legend.entries[0];
        assert!(lines.len() > 2, "{lines:?}");
        assert!(legend.width <= (f64::from(WIDTH) * LEGEND_MAX_SHARE) as i32);
        for l in lines {
            let w = text_width(l, LEGEND_FONT_SIZE).unwrap();
            assert!(LEGEND_TEXT_X + w + LEGEND_RIGHT_PAD <= legend.width, "{l}");
        }
        assert_eq!(lines.concat().replace(' ', ""), name.replace(' ', ""));
    }

    #[test]
    fn a_panel_grows_to_hold_a_long_legend() {
        font();
        let few = Legend::layout(&chart(vec![Line::new("a", BLUE, vec![])]), WIDTH).unwrap();
        assert_eq!(few.panel_height(), PANEL_HEIGHT);
        let many: Vec<Line> = (0..40)
            .map(|i| Line::new(format!("line {i}"), BLUE, vec![]))
            .collect();
        let legend = Legend::layout(&chart(many), WIDTH).unwrap();
        assert!(legend.panel_height() > PANEL_HEIGHT);
        assert!(legend.panel_height() as i32 >= TITLE_HEIGHT + legend.height);
    }

    #[test]
    fn unbounded_marks_get_a_row_each_above_the_data() {
        let c = chart(vec![
            Line::new("a", BLUE, vec![(0.1, 20.0), (0.5, 900.0)]),
            Line::ceiling("a unbounded", BLUE, vec![0.9]),
            Line::ceiling("nothing unbounded", ORANGE, vec![]),
            Line::ceiling("b unbounded", ORANGE, vec![0.9]),
        ]);
        let axis = y_axis(&c, 450);
        assert_eq!((axis.lo, axis.hi), (10.0, 1000.0));
        assert_eq!(axis.rows.len(), 2);
        assert!(axis.rows[0] > axis.rows[1], "{axis:?}");
        assert!(
            axis.rows[1] > axis.hi && axis.top > axis.rows[0],
            "{axis:?}"
        );
        let plain = y_axis(&chart(vec![Line::new("a", BLUE, vec![(0.1, 20.0)])]), 450);
        assert_eq!(plain.top, plain.hi);
        assert!(plain.rows.is_empty());
    }
}
