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
    // With --board, the round trips (`board-rtt`) get a histogram panel of their own, between the
    // threads' histogram and the per-second panel (which shows all, the round trip too).
    let (board, measured): (Vec<&ThreadResult>, Vec<&ThreadResult>) =
        threads.iter().partition(|t| t.name == "board-rtt");
    let height = if board.is_empty() { 800 } else { 1100 };
    let root = SVGBackend::with_string(svg, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let (top, bottom) = root.split_vertically(390);
    histogram_panel(
        &top,
        "Latency histogram (cycles per 1 µs bin; both axes log scale)",
        "latency (µs)",
        "cycles",
        &measured,
        0,
        None,
    )?;
    let bottom = if let Some(b) = board.first() {
        let (mid, rest) = bottom.split_vertically(300);
        // Its "period" is the budget (`BoardResult::as_thread`).
        let budget_us = b.period_ns as f64 / 1000.0;
        histogram_panel(
            &mid,
            "Board round trip (replies per 1 µs bin, log; the dashed line: the budget)",
            "round trip (µs)",
            "replies",
            &board,
            measured.len(),
            Some(budget_us),
        )?;
        rest
    } else {
        bottom
    };
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
        .x_label_formatter(&|v| crate::plot::tick(*v))
        .y_label_formatter(&|v| crate::plot::tick(*v))
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
    // With --trace: each kept spike as a dot at its time and latency, coloured by its main cause.
    let mut by_kind: Vec<(&'static str, Vec<(f64, f64)>)> = Vec::new();
    for t in threads {
        for sp in &t.spikes {
            let kind = main_kind(sp);
            let Some(kind) = kind else { continue };
            let p = (sp.at_s, (sp.latency_ns as f64 / 1000.0).max(0.5));
            match by_kind.iter_mut().find(|(k, _)| *k == kind) {
                Some((_, v)) => v.push(p),
                None => by_kind.push((kind, vec![p])),
            }
        }
    }
    for (kind, points) in by_kind {
        let color = cause_color(kind);
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 4, color.filled())),
            )?
            .label(format!("spike: {kind}"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    draw_legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// One histogram panel: a stem per non-empty bin of each series, both axes log; `budget` (µs) a
/// dashed vertical line.
fn histogram_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    threads: &[&ThreadResult],
    color_from: usize,
    budget: Option<f64>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
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
    let x_max = (last_bin as f64 + 2.0) * bin_us_of(threads);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (0.4f64..x_max.max(budget.unwrap_or(0.0) * 1.5).max(2.0)).log_scale(),
            (0.8f64..max_count as f64 * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_label_formatter(&|v| crate::plot::tick(*v))
        .y_label_formatter(&|v| crate::plot::tick(*v))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    for (i, t) in threads.iter().enumerate() {
        let color = COLORS[(color_from + i) % COLORS.len()];
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

    if let Some(b) = budget {
        let red = RGBColor(0xd6, 0x27, 0x28);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(b, 0.8), (b, max_count as f64 * 2.0)],
                6,
                4,
                red.stroke_width(2),
            ))?
            .label(format!("budget {} µs", crate::plot::tick(b)))
            .legend(legend_line(red));
    }
    draw_legend(&mut chart)?;
    Ok(())
}

fn bin_us_of(threads: &[&ThreadResult]) -> f64 {
    threads
        .iter()
        .map(|t| t.histogram.bin_ns)
        .find(|&b| b > 0)
        .unwrap_or(1000) as f64
        / 1000.0
}

/// The kind of a traced spike's main cause (its longest, the late timer only when it is alone),
/// `untraced` when the trace did not cover it, `None` without `--trace`.
pub(crate) fn main_kind(sp: &super::report::Spike) -> Option<&'static str> {
    if let Some(cs) = &sp.causes {
        return Some(
            cs.iter()
                .find(|c| c.kind != "timer-late")
                .or(cs.first())
                .map_or("nothing traced", |c| c.kind),
        );
    }
    sp.suspects.first().map(|s| s.kind)
}

/// A colour per cause kind, distinct from the thread colours.
fn cause_color(kind: &str) -> RGBColor {
    match kind {
        "irq" => RGBColor(0xff, 0x7f, 0x0e),
        "softirq" => RGBColor(0x8c, 0x56, 0x4b),
        "vector" => RGBColor(0xe3, 0x77, 0xc2),
        "task" => RGBColor(0xbc, 0xbd, 0x22),
        "kernel-thread" => RGBColor(0x17, 0xbe, 0xcf),
        "outside" => RGBColor(0x7f, 0x7f, 0x7f),
        "timer-late" => RGBColor(0x00, 0x00, 0x00),
        _ => RGBColor(0xaa, 0xaa, 0xaa),
    }
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

    #[test]
    fn log_axes_read_1m_not_1000000() {
        let t = ThreadResult {
            name: "servo".into(),
            histogram: HistogramOut {
                bin_ns: 1000,
                counts: vec![2_000_000, 30_000, 400, 5],
                overflow: 0,
            },
            max_latency_per_second_ns: vec![12_000, 1_500_000],
            ..Default::default()
        };
        let texts = crate::plot::tests::texts(&render_svg("t", &[t]).unwrap());
        assert!(texts.iter().any(|t| t == "1M"), "{texts:?}");
        assert!(texts.iter().any(|t| t == "10k"), "{texts:?}");
        assert!(
            texts
                .iter()
                .all(|t| !t.contains("000") && !t.ends_with(".0")),
            "{texts:?}"
        );
    }

    #[test]
    fn traced_spikes_are_dots_coloured_by_their_main_cause() {
        use crate::latency::report::{CauseOut, Spike};
        use crate::trace::{Cause, CauseKind, TaskRef};
        let cause = |kind: CauseKind| {
            CauseOut::new(&Cause {
                kind,
                dur_ns: 300_000,
                count: 1,
            })
        };
        let late = cause(CauseKind::TimerLate {
            function: "hrtimer_wakeup".into(),
        });
        let spike = |at_s: f64, causes: Vec<CauseOut>| Spike {
            cycle: 1,
            at_s,
            wake_ns: 0,
            latency_ns: 400_000,
            involuntary_switches: 0,
            page_faults: 0,
            causes: Some(causes),
            suspects: vec![],
            without_switches: false,
        };
        let t = ThreadResult {
            name: "servo".into(),
            max_latency_per_second_ns: vec![12_000, 400_000, 90_000],
            spikes: vec![
                // The late timer is listed last: the IRQ is the main cause.
                spike(
                    1.2,
                    vec![
                        cause(CauseKind::Irq {
                            irq: 36,
                            name: "virtio1-req.0".into(),
                        }),
                        late.clone(),
                    ],
                ),
                spike(
                    2.5,
                    vec![
                        cause(CauseKind::Task {
                            task: TaskRef {
                                comm: "spinner".into(),
                                pid: 7,
                                prio: 0,
                            },
                        }),
                        late,
                    ],
                ),
            ],
            ..Default::default()
        };
        assert_eq!(main_kind(&t.spikes[0]), Some("irq"));
        let svg = render_svg("t", &[t]).unwrap();
        assert!(
            svg.contains("spike: irq") && svg.contains("spike: task"),
            "legend"
        );
        assert!(
            !svg.contains("spike: timer-late"),
            "a symptom is not a main cause"
        );
        // Two dots plus the two legend samples.
        assert!(
            svg.matches("<circle").count() >= 4,
            "{}",
            svg.matches("<circle").count()
        );
    }
}
