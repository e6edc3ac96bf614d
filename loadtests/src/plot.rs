//! Plots of a run, each as SVG and as PNG: latency percentiles over time, throughput over time, and the share
//! of answers per model version over time with the configured weights drawn beside it as dashed lines.
//!
//! plotters draws the SVG; the PNG is that SVG rasterised by resvg, so the two are one picture. The PNG's text
//! uses the system's fonts (a sans-serif one such as DejaVu Sans); without any, the PNG has lines and no text.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use plotters::prelude::*;
use thiserror::Error;

use crate::record::Summary;

/// A plot could not be drawn or written.
#[derive(Debug, Error)]
#[error("plot {path}: {reason}")]
pub struct PlotError {
    path: String,
    reason: String,
}

const COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Draws `<stem>-latency`, `<stem>-throughput` and, when versions answered, `<stem>-versions`, each as `.svg`
/// and `.png`, into `dir`. `weights` are the configured shares per version (in percent), drawn as dashed lines.
/// Returns the files written.
pub fn draw(
    dir: &Path,
    stem: &str,
    title: &str,
    s: &Summary,
    weights: &BTreeMap<String, f64>,
) -> Result<Vec<String>, PlotError> {
    let mut written = Vec::new();
    let t_max = s.timeline.last().map_or(1.0, |p| p.t_s).max(1e-3);
    let lat = dir.join(format!("{stem}-latency.svg"));
    let series = [
        (
            "p50",
            s.timeline.iter().map(|p| (p.t_s, p.p50_ms)).collect::<Vec<_>>(),
        ),
        ("p90", s.timeline.iter().map(|p| (p.t_s, p.p90_ms)).collect()),
        ("p99", s.timeline.iter().map(|p| (p.t_s, p.p99_ms)).collect()),
    ];
    lines(
        &lat,
        &format!("{title}: latency"),
        "ms",
        t_max,
        &series,
        &[],
        "seconds",
    )?;
    written.push(lat.display().to_string());
    written.push(png_beside(&lat)?.display().to_string());
    let thr = dir.join(format!("{stem}-throughput.svg"));
    let series = [(
        "req/s",
        s.timeline
            .iter()
            .map(|p| (p.t_s, p.throughput_rps))
            .collect::<Vec<_>>(),
    )];
    lines(
        &thr,
        &format!("{title}: throughput"),
        "requests/s",
        t_max,
        &series,
        &[],
        "seconds",
    )?;
    written.push(thr.display().to_string());
    written.push(png_beside(&thr)?.display().to_string());
    let named: Vec<&String> = s.versions.keys().filter(|v| v.as_str() != "-").collect();
    if !named.is_empty() {
        let ver = dir.join(format!("{stem}-versions.svg"));
        let series: Vec<(String, Vec<(f64, f64)>)> = named
            .iter()
            .map(|v| {
                let pts = s
                    .timeline
                    .iter()
                    .map(|p| {
                        let answered: u64 = p.versions.values().sum();
                        let n = p.versions.get(*v).copied().unwrap_or(0);
                        let share = if answered == 0 {
                            0.0
                        } else {
                            100.0 * n as f64 / answered as f64
                        };
                        (p.t_s, share)
                    })
                    .collect();
                (format!("v{v}"), pts)
            })
            .collect();
        let series: Vec<(&str, Vec<(f64, f64)>)> =
            series.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
        let marks: Vec<(String, f64)> = weights
            .iter()
            .map(|(v, w)| (format!("v{v} configured"), *w))
            .collect();
        lines(
            &ver,
            &format!("{title}: share per version"),
            "% of answers",
            t_max,
            &series,
            &marks,
            "seconds",
        )?;
        written.push(ver.display().to_string());
        written.push(png_beside(&ver)?.display().to_string());
    }
    Ok(written)
}

pub(crate) fn lines(
    path: &Path,
    title: &str,
    y_label: &str,
    t_max: f64,
    series: &[(&str, Vec<(f64, f64)>)],
    marks: &[(String, f64)],
    x_label: &str,
) -> Result<(), PlotError> {
    let fail = |e: &dyn std::fmt::Display| PlotError {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let y_max = series
        .iter()
        .flat_map(|(_, pts)| pts.iter().map(|p| p.1))
        .chain(marks.iter().map(|m| m.1))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()
        .map_err(|e| fail(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), colour.stroke_width(2)))
            .map_err(|e| fail(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
    }
    for (i, (name, y)) in marks.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let dashes: Vec<(f64, f64)> = (0..40)
            .filter(|k| k % 2 == 0)
            .flat_map(|k| [(t_max * k as f64 / 40.0, *y), (t_max * (k + 1) as f64 / 40.0, *y)])
            .collect();
        for pair in dashes.chunks(2) {
            chart
                .draw_series(LineSeries::new(pair.iter().copied(), colour.stroke_width(1)))
                .map_err(|e| fail(&e))?;
        }
        chart
            .draw_series(std::iter::empty::<PathElement<(f64, f64)>>())
            .map_err(|e| fail(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 6, y), (x + 10, y), (x + 16, y)], colour)
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

/// The system's fonts, loaded once per process, with `sans-serif` pointed at the first common sans-serif
/// family found (fontdb's own default, Arial, is missing from most Linux machines).
fn fonts() -> Arc<resvg::usvg::fontdb::Database> {
    static FONTS: OnceLock<Arc<resvg::usvg::fontdb::Database>> = OnceLock::new();
    Arc::clone(FONTS.get_or_init(|| {
        let mut db = resvg::usvg::fontdb::Database::new();
        db.load_system_fonts();
        let families: Vec<String> = db
            .faces()
            .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
            .collect();
        if let Some(sans) = [
            "DejaVu Sans",
            "Liberation Sans",
            "Noto Sans",
            "Arial",
            "Helvetica",
        ]
        .into_iter()
        .find(|want| families.iter().any(|have| have == want))
        {
            db.set_sans_serif_family(sans);
        } else {
            tracing::warn!(
                "no sans-serif font found: the PNG plots have no text (install fonts-dejavu-core)"
            );
        }
        Arc::new(db)
    }))
}

/// Rasterises the SVG at `svg` into a PNG of the same size and name beside it; returns the PNG's path.
fn png_beside(svg: &Path) -> Result<PathBuf, PlotError> {
    let png = svg.with_extension("png");
    let fail = |e: &dyn std::fmt::Display| PlotError {
        path: png.display().to_string(),
        reason: e.to_string(),
    };
    let data = std::fs::read(svg).map_err(|e| fail(&e))?;
    let options = resvg::usvg::Options {
        fontdb: fonts(),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_data(&data, &options).map_err(|e| fail(&e))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| fail(&format!("cannot hold a {}x{} image", size.width(), size.height())))?;
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::default(),
        &mut pixmap.as_mut(),
    );
    pixmap.save_png(&png).map_err(|e| fail(&e))?;
    Ok(png)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Outcome;
    use crate::record::Recorder;
    use std::time::Duration;

    #[test]
    fn each_plot_is_written_as_svg_and_as_a_png_of_the_same_size() {
        let mut r = Recorder::new(Duration::from_millis(100));
        for i in 0..50u64 {
            let version = if i % 4 == 0 { "2" } else { "1" };
            r.record(
                Duration::from_millis(i * 10),
                Duration::from_micros(500 + i * 20),
                &Outcome::Ok(Some(version.to_owned())),
            );
        }
        let summary = r.summary(Duration::from_millis(500));
        let dir = tempfile::tempdir().unwrap();
        let weights = BTreeMap::from([("1".to_owned(), 75.0), ("2".to_owned(), 25.0)]);
        let written = draw(dir.path(), "run", "test", &summary, &weights).unwrap();
        for stem in ["run-latency", "run-throughput", "run-versions"] {
            let svg = dir.path().join(format!("{stem}.svg"));
            let png = dir.path().join(format!("{stem}.png"));
            assert!(written.contains(&svg.display().to_string()), "{written:?}");
            assert!(written.contains(&png.display().to_string()), "{written:?}");
            let bytes = std::fs::read(&png).unwrap();
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{stem}: not a PNG");
            // IHDR: width and height, big-endian, right after the chunk's length and type.
            let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
            let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
            assert_eq!((width, height), (900, 420), "{stem}: the SVG's size");
            let pixmap = resvg::tiny_skia::Pixmap::decode_png(&bytes).unwrap();
            let coloured = pixmap
                .pixels()
                .iter()
                .filter(|p| p.red() != p.green() || p.green() != p.blue())
                .count();
            assert!(
                coloured > 100,
                "{stem}: the series' coloured lines are drawn ({coloured} pixels)"
            );
        }
    }
}
