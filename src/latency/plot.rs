//! `--plot FILE.svg`: the latency histogram of each thread on a log axis, and the worst latency of each
//! second over the run.

use super::report::ThreadResult;
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

/// Writes the SVG atomically (see [`super::output`]). `title` goes on top (kernel, flavor, load).
pub(crate) fn write_svg(path: &Path, title: &str, threads: &[ThreadResult]) -> Result<(), String> {
    let svg = render_svg(title, threads)
        .map_err(|e| format!("--plot {}: cannot draw: {e}", path.display()))?;
    super::output::write_text("--plot", path, &svg)
}

/// The SVG document as text.
pub(crate) fn render_svg(title: &str, threads: &[ThreadResult]) -> Result<String, String> {
    let mut svg = String::new();
    draw(&mut svg, title, threads).map_err(|e| e.to_string())?;
    Ok(svg)
}

fn draw(
    svg: &mut String,
    title: &str,
    threads: &[ThreadResult],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (1000, 800)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let (top, bottom) = root.split_vertically(390);

    // Histogram: x in µs up to the last non-empty bin, y = cycles (log); empty bins are left out.
    let last_bin = threads
        .iter()
        .filter_map(|t| t.histogram.counts.iter().rposition(|&c| c > 0))
        .max()
        .unwrap_or(0);
    let max_count = threads
        .iter()
        .flat_map(|t| t.histogram.counts.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    let x_max = (last_bin as f64 + 2.0) * bin_us(threads);
    let mut chart = ChartBuilder::on(&top)
        .caption(
            "Latency histogram (cycles per 1 µs bin; both axes log scale)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (0.4f64..x_max.max(2.0)).log_scale(),
            (0.8f64..max_count as f64 * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("latency (µs)")
        .y_desc("cycles")
        .draw()?;
    for (i, t) in threads.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let w = t.histogram.bin_ns as f64 / 1000.0;
        let points: Vec<(f64, f64)> = t
            .histogram
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(b, &c)| (b as f64 * w, c as f64))
            .collect();
        // One stem per non-empty bin: a sparse tail stays readable, and no line pretends there are
        // samples between two far-apart bins.
        chart
            .draw_series(points.iter().map(|&(x, y)| {
                PathElement::new(
                    vec![(x + w * 0.5, 0.8), (x + w * 0.5, y)],
                    color.stroke_width(2),
                )
            }))?
            .label(format!("{} (overflow {})", t.name, t.histogram.overflow))
            .legend(legend_line(color));
    }
    draw_legend(&mut chart)?;

    // Worst latency per second over time.
    let seconds = threads
        .iter()
        .map(|t| t.max_latency_per_second_ns.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let worst = threads
        .iter()
        .flat_map(|t| t.max_latency_per_second_ns.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64
        / 1000.0;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("Max latency per second (µs, log scale)", ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..seconds as f64, (0.5f64..worst * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("max latency (µs)")
        .draw()?;
    for (i, t) in threads.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = t
            .max_latency_per_second_ns
            .iter()
            .enumerate()
            .map(|(s, &ns)| (s as f64 + 0.5, (ns as f64 / 1000.0).max(0.5)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(t.name.clone())
            .legend(legend_line(color));
    }
    draw_legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// The legend's sample of a series: a short line in its colour.
fn legend_line(color: RGBColor) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
}

/// The legend box, black on white.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}

fn bin_us(threads: &[ThreadResult]) -> f64 {
    threads
        .first()
        .map_or(1.0, |t| t.histogram.bin_ns.max(1) as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::report::HistogramOut;

    #[test]
    fn svg_shows_both_threads_and_both_panels() {
        let thread = |name: &str, peak: usize| ThreadResult {
            name: name.into(),
            histogram: HistogramOut {
                bin_ns: 1000,
                counts: (0..100usize)
                    .map(|b| {
                        if b.abs_diff(peak) < 5 {
                            1000 >> b.abs_diff(peak)
                        } else {
                            0
                        }
                    })
                    .collect(),
                overflow: 3,
            },
            max_latency_per_second_ns: vec![12_000, 15_000, 90_000],
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plot.svg");
        write_svg(
            &path,
            "test run",
            &[thread("base", 10), thread("servo", 20)],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        for text in [
            "base (overflow 3)",
            "servo (overflow 3)",
            "Latency histogram",
            "Max latency per second",
            "test run",
        ] {
            assert!(svg.contains(text), "missing {text}");
        }
        assert!(
            svg.matches("<polyline").count() >= 4,
            "a line per thread per panel"
        );
        assert!(write_svg(Path::new("/nonexistent/dir/x.svg"), "t", &[]).is_err());
    }
}
