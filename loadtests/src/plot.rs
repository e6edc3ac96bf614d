//! SVG plots of a run: latency percentiles over time, throughput over time, and the share of answers per
//! model version over time with the configured weights drawn beside it as dashed lines.

use std::collections::BTreeMap;
use std::path::Path;

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

/// Draws `<stem>-latency.svg`, `<stem>-throughput.svg` and, when versions answered, `<stem>-versions.svg`
/// into `dir`. `weights` are the configured shares per version (in percent), drawn as dashed lines.
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
