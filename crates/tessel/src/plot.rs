//! `tessel bench --plot`: the per-kernel times a bench measured, drawn against their floors
//! as a horizontal bar chart (plotters), SVG or PNG by the file's extension.
//!
//! The drawing is a function of plain data ([`BenchPlot`]: a title and one [`PlotRow`] per
//! timed kernel), so it is tested on the CPU from made-up rows; `bench` fills it from what
//! it measured. Each kernel gets two bars from 0: its measured time (blue, [`MEASURED`]) and
//! its floor (orange, [`FLOOR`]: bytes at the measured copy bandwidth, or the multiply-adds
//! at the datasheet peak, whichever is longer), and, where cuBLAS ran the same product, a
//! black tick at cuBLAS's time. Text is drawn with DejaVu Sans embedded in the binary, so a
//! PNG needs no system font.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};

/// The fill of the measured bars, `#1F77B4`.
pub const MEASURED: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
/// The fill of the floor bars, `#FF7F0E`.
pub const FLOOR: RGBColor = RGBColor(0xff, 0x7f, 0x0e);

/// One timed kernel (a fusion group's kernels, timed together).
#[derive(Clone, Debug, PartialEq)]
pub struct PlotRow {
    /// The kernel's name as `bench` prints it (`k_0 + k_1` for a split-K pair).
    pub name: String,
    /// The median measured time, µs.
    pub measured_us: f64,
    /// The physical floor, µs.
    pub floor_us: f64,
    /// cuBLAS's median time on the same product, µs, where it ran.
    pub baseline_us: Option<f64>,
}

/// What one chart shows.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchPlot {
    /// The chart's caption: the step, the card and the totals.
    pub title: String,
    /// The kernels, drawn top to bottom in this order.
    pub rows: Vec<PlotRow>,
}

/// The file formats `--plot` writes, chosen by the extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

impl PlotFormat {
    /// The format of `path`'s extension (`.svg` or `.png`, any case), or None.
    pub fn of(path: &Path) -> Option<PlotFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "svg" => Some(PlotFormat::Svg),
            "png" => Some(PlotFormat::Png),
            _ => None,
        }
    }
}

/// Parses `--plot`: a path ending `.svg` or `.png`.
pub fn parse_plot_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    match PlotFormat::of(&path) {
        Some(_) => Ok(path),
        None => Err(format!(
            "`{s}`: the extension chooses the format; the allowed extensions are .svg and .png"
        )),
    }
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// There is nothing to draw, or a time is not a finite, non-negative number.
    #[error("cannot plot {what}")]
    BadData { what: String },
    /// The path's extension is neither `.svg` nor `.png`.
    #[error("{path}: the allowed extensions are .svg and .png")]
    Extension { path: String },
    /// plotters failed to draw or to write the file.
    #[error("cannot draw {path}: {message}")]
    Draw { path: String, message: String },
}

/// Registers the embedded font as plotters' `sans-serif`, once per process.
fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans is a valid TrueType font: registration cannot fail on it, and if it
        // somehow did, drawing text reports `FontUnavailable` as an error, not a panic.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Draws `plot` to `path` as SVG or PNG (by its extension), 1000 pixels wide and 44 a row
/// plus the margins high. The file is replaced; its directory must exist.
///
/// # Errors
/// [`PlotError::BadData`] for no rows or a time that is negative, NaN or infinite;
/// [`PlotError::Extension`] for another extension; [`PlotError::Draw`] when plotters
/// cannot draw or write the file.
pub fn draw(plot: &BenchPlot, path: &Path) -> Result<(), PlotError> {
    if plot.rows.is_empty() {
        return Err(PlotError::BadData {
            what: "a bench without kernels".into(),
        });
    }
    for r in &plot.rows {
        let times = [Some(r.measured_us), Some(r.floor_us), r.baseline_us];
        if times.iter().flatten().any(|t| !t.is_finite() || *t < 0.0) {
            return Err(PlotError::BadData {
                what: format!(
                    "kernel `{}`: its times must be finite and non-negative (measured {} µs, floor {} µs, cuBLAS {:?} µs)",
                    r.name, r.measured_us, r.floor_us, r.baseline_us
                ),
            });
        }
    }
    let size = (1000u32, 120 + 44 * plot.rows.len() as u32);
    let shown = path.display().to_string();
    let draw_error = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: shown.clone(),
        message: e.to_string(),
    };
    register_font();
    match PlotFormat::of(path) {
        Some(PlotFormat::Svg) => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw_on(&root, plot).map_err(|e| draw_error(&e))?;
            root.present().map_err(|e| draw_error(&e))
        }
        Some(PlotFormat::Png) => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw_on(&root, plot).map_err(|e| draw_error(&e))?;
            root.present().map_err(|e| draw_error(&e))
        }
        None => Err(PlotError::Extension { path: shown }),
    }
}

/// The chart on `root`, whatever the backend.
fn draw_on<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    plot: &BenchPlot,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let n = plot.rows.len();
    let longest = plot
        .rows
        .iter()
        .map(|r| {
            r.measured_us
                .max(r.floor_us)
                .max(r.baseline_us.unwrap_or(0.0))
        })
        .fold(0.0, f64::max);
    let x_max = if longest > 0.0 { longest * 1.08 } else { 1.0 };
    // Row i (from the top) occupies [n - 1 - i, n - i) on the y axis; its name is drawn
    // left of the axis at the middle of that band.
    let label_width = plot
        .rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(6, 60) as u32
        * 8
        + 16;
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .caption(&plot.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(label_width)
        .build_cartesian_2d(0f64..x_max, 0f64..n as f64)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(2)
        .y_label_formatter(&|_| String::new())
        .set_tick_mark_size(LabelAreaPosition::Left, 0)
        .x_desc("µs — blue: measured; orange: floor; black tick: cuBLAS")
        .label_style(("sans-serif", 13))
        .draw()?;
    let name_style = TextStyle::from(("sans-serif", 13).into_font())
        .pos(Pos::new(HPos::Right, VPos::Center))
        .color(&BLACK);
    for (i, r) in plot.rows.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(0.0, (n - i) as f64 - 0.5));
        root.draw(&Text::new(r.name.clone(), (x - 8, y), name_style.clone()))?;
    }
    for (i, r) in plot.rows.iter().enumerate() {
        let top = (n - i) as f64;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, top - 0.12), (r.measured_us, top - 0.55)],
            MEASURED.filled(),
        )))?;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(0.0, top - 0.58), (r.floor_us, top - 0.88)],
            FLOOR.filled(),
        )))?;
        if let Some(b) = r.baseline_us {
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(b, top - 0.05), (b, top - 0.62)],
                BLACK.stroke_width(3),
            )))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<PlotRow> {
        vec![
            PlotRow {
                name: "rms_norm_0".into(),
                measured_us: 12.5,
                floor_us: 9.0,
                baseline_us: None,
            },
            PlotRow {
                name: "gate_proj_1 + gate_proj_2".into(),
                measured_us: 301.0,
                floor_us: 250.0,
                baseline_us: Some(280.0),
            },
            PlotRow {
                name: "swiglu_3".into(),
                measured_us: 40.0,
                floor_us: 41.5,
                baseline_us: None,
            },
        ]
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tessel-plot-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        d
    }

    /// The widths of the `<rect>`s of `svg` filled with `color`, in document order.
    fn rect_widths(svg: &str, color: RGBColor) -> Vec<f64> {
        let fill = format!("fill=\"#{:02X}{:02X}{:02X}\"", color.0, color.1, color.2);
        svg.split("<rect")
            .skip(1)
            .map(|r| &r[..r.find('>').unwrap_or(r.len())])
            .filter(|r| r.contains(&fill))
            .map(|r| {
                let w = r.split("width=\"").nth(1).expect("a width");
                w[..w.find('"').expect("closing quote")]
                    .parse::<f64>()
                    .expect("a number")
            })
            .collect()
    }

    #[test]
    fn svg_names_every_kernel_and_its_bars_are_as_long_as_the_times() {
        let d = scratch("svg");
        let path = d.join("bench.svg");
        let plot = BenchPlot {
            title: "step mlp on NVIDIA H100: 353.5 µs".into(),
            rows: rows(),
        };
        draw(&plot, &path).expect("draws");
        let svg = std::fs::read_to_string(&path).expect("an SVG");
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        for r in &plot.rows {
            assert!(svg.contains(&r.name), "no label `{}`", r.name);
        }
        assert!(svg.contains("step mlp on NVIDIA H100"), "no title");
        for (color, time) in [
            (
                MEASURED,
                (|r: &PlotRow| r.measured_us) as fn(&PlotRow) -> f64,
            ),
            (FLOOR, |r: &PlotRow| r.floor_us),
        ] {
            let widths = rect_widths(&svg, color);
            assert_eq!(widths.len(), plot.rows.len(), "{widths:?}");
            // Drawn in row order, each as long as its time on one scale (to the pixel).
            let scale = widths[1] / time(&plot.rows[1]);
            for (w, r) in widths.iter().zip(&plot.rows) {
                assert!(
                    (w - time(r) * scale).abs() <= 1.5,
                    "{}: width {w} for {} µs at {scale} px/µs",
                    r.name,
                    time(r)
                );
            }
            let mut by_width: Vec<usize> = (0..widths.len()).collect();
            by_width.sort_by(|&a, &b| widths[a].total_cmp(&widths[b]));
            let mut by_time: Vec<usize> = (0..widths.len()).collect();
            by_time.sort_by(|&a, &b| time(&plot.rows[a]).total_cmp(&time(&plot.rows[b])));
            assert_eq!(by_width, by_time);
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn png_has_the_chart_size() {
        let d = scratch("png");
        let path = d.join("bench.PNG");
        let plot = BenchPlot {
            title: "step s".into(),
            rows: rows(),
        };
        draw(&plot, &path).expect("draws");
        let png = std::fs::read(&path).expect("a PNG");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "the PNG signature");
        // IHDR first: width and height big-endian at bytes 16..24.
        assert_eq!(&png[12..16], b"IHDR");
        let w = u32::from_be_bytes(png[16..20].try_into().expect("4 bytes"));
        let h = u32::from_be_bytes(png[20..24].try_into().expect("4 bytes"));
        assert_eq!((w, h), (1000, 120 + 44 * 3));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn bad_data_and_extensions_are_errors() {
        let d = scratch("bad");
        let empty = BenchPlot {
            title: "t".into(),
            rows: vec![],
        };
        assert!(matches!(
            draw(&empty, &d.join("a.svg")),
            Err(PlotError::BadData { .. })
        ));
        let mut nan = rows();
        nan[2].floor_us = f64::NAN;
        let e = draw(
            &BenchPlot {
                title: "t".into(),
                rows: nan,
            },
            &d.join("a.svg"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("swiglu_3"), "{e}");
        assert!(matches!(
            draw(
                &BenchPlot {
                    title: "t".into(),
                    rows: rows()
                },
                &d.join("a.jpg")
            ),
            Err(PlotError::Extension { .. })
        ));
        assert!(parse_plot_path("x.jpg")
            .unwrap_err()
            .contains(".svg and .png"));
        assert_eq!(parse_plot_path("x.Svg"), Ok(PathBuf::from("x.Svg")));
        assert!(parse_plot_path("noext").is_err());
        let _ = std::fs::remove_dir_all(&d);
    }
}
