//! What every SVG rtapi draws shares: axis labels people read (`1M`, `100k`, `0.5`, never
//! `1000000.0`), and recorded channels drawn one panel each, on a common time axis, each on its own
//! y scale (a µm following error beside ±10 mm positions is a line you can read, not a flat one).
//! Used by `latency-test --plot`, `rtapi scope` and the recorder's dumps.

use plotters::coord::Shift;
use plotters::prelude::*;

/// An axis label: at most three significant digits, thousands as `k`, millions as `M`, billions as
/// `G`, no trailing zeros (`1M`, `250k`, `1.5k`, `12`, `0.5`, `-0.002`, `1e-06`).
pub(crate) fn tick(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    // Rounded first, so that 999.7 is 1k, not 1000.
    let v = round_sig(v, 3);
    let a = v.abs();
    let (scaled, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if scaled == 0.0 {
        return "0".to_string();
    }
    let trim = |t: String| -> String {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t
        }
    };
    let r = scaled;
    if r.abs() < 1e-3 {
        // Too small for decimals to read: the exponent form, three digits at most.
        let e = format!("{r:.2e}");
        let (m, x) = e.split_once('e').expect("{:e} has an exponent");
        return format!("{}e{x}", trim(m.to_string()));
    }
    let decimals = (2 - r.abs().log10().floor() as i32).max(0) as usize;
    format!("{}{suffix}", trim(format!("{r:.decimals$}")))
}

/// [`tick`] on an axis spanning `span`: a value that is zero but for the rounding of the axis'
/// steps (`6.78e-21` on a 0..1e-4 axis) is `0`.
pub(crate) fn tick_on(v: f64, span: f64) -> String {
    if v.abs() < span.abs() * 1e-9 {
        return "0".to_string();
    }
    tick(v)
}

fn round_sig(x: f64, digits: i32) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    let e = x.abs().log10().floor() as i32;
    let f = 10f64.powi(digits - 1 - e);
    (x * f).round() / f
}

/// One channel of a stacked plot: its name and its (time, value) points. Non-finite values are
/// gaps: they are left out of the line and of the scale, and the panel's caption counts them.
pub(crate) struct Channel<'a> {
    pub name: &'a str,
    pub points: Vec<(f64, f64)>,
}

/// The y range a channel is drawn on: its finite values' span with 5 % room, a unit either side of
/// a constant, -1..1 when it has none.
fn y_range(points: &[(f64, f64)]) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for &(_, y) in points.iter().filter(|(_, y)| y.is_finite()) {
        lo = lo.min(y);
        hi = hi.max(y);
    }
    if !lo.is_finite() {
        return (-1.0, 1.0);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        return (lo - 1.0, hi + 1.0);
    }
    let pad = (hi - lo) * 0.05;
    (lo - pad, hi + pad)
}

/// Draws each channel in its own panel of `areas` (one area per channel), all on the x range
/// `x`, with a red line at `marker` (the trigger, the event) when given. The caption of a panel is
/// its channel's name and range.
pub(crate) fn channel_panels<DB: DrawingBackend>(
    areas: &[DrawingArea<DB, Shift>],
    x: (f64, f64),
    x_desc: &str,
    channels: &[Channel],
    color: impl Fn(usize) -> RGBColor,
    marker: Option<f64>,
) -> Result<(), Box<dyn std::error::Error>>
where
    DB::ErrorType: 'static,
{
    for (i, (area, ch)) in areas.iter().zip(channels).enumerate() {
        let (lo, hi) = y_range(&ch.points);
        let gaps = ch.points.iter().filter(|(_, y)| !y.is_finite()).count();
        let caption = if gaps > 0 {
            format!("{} ({gaps} non-finite values left out)", ch.name)
        } else {
            ch.name.to_string()
        };
        let last = i + 1 == channels.len();
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 13))
            .margin(8)
            .x_label_area_size(if last { 34 } else { 20 })
            .y_label_area_size(64)
            .build_cartesian_2d(x.0..x.1, lo..hi)?;
        let (xspan, yspan) = (x.1 - x.0, hi - lo);
        let x_label = |v: &f64| tick_on(*v, xspan);
        let y_label = |v: &f64| tick_on(*v, yspan);
        let mut mesh = chart.configure_mesh();
        mesh.x_label_formatter(&x_label)
            .y_label_formatter(&y_label)
            .y_labels(5);
        if last {
            mesh.x_desc(x_desc);
        }
        mesh.draw()?;
        let c = color(i);
        // A non-finite value breaks the line, so nothing is drawn across a gap.
        let mut run: Vec<(f64, f64)> = Vec::new();
        for &(t, y) in ch
            .points
            .iter()
            .chain(std::iter::once(&(f64::NAN, f64::NAN)))
        {
            if y.is_finite() && t.is_finite() {
                run.push((t, y));
            } else if !run.is_empty() {
                chart.draw_series(LineSeries::new(std::mem::take(&mut run), c.stroke_width(2)))?;
            }
        }
        if let Some(m) = marker.filter(|m| (x.0..=x.1).contains(m)) {
            chart.draw_series(LineSeries::new([(m, lo), (m, hi)], RED.stroke_width(1)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The texts of an SVG, in order.
    pub(crate) fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let body = t.split_once('>')?.1;
                Some(body.split("</text>").next()?.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn ticks_read_as_people_write_them() {
        for (v, want) in [
            (1_000_000.0, "1M"),
            (100_000.0, "100k"),
            (2_500_000_000.0, "2.5G"),
            (1500.0, "1.5k"),
            (999.0, "999"),
            (999.7, "1k"),
            (12.0, "12"),
            (0.5, "0.5"),
            (1.0, "1"),
            (0.0, "0"),
            (-0.002, "-0.002"),
            (-20_000.0, "-20k"),
            (1e-6, "1e-6"),
            (1.5e-5, "1.5e-5"),
            (0.0015, "0.0015"),
            (0.12345, "0.123"),
            (123.45, "123"),
            (12.345, "12.3"),
        ] {
            assert_eq!(tick(v), want, "{v}");
        }
    }

    #[test]
    fn each_channel_has_its_own_scale_and_gaps_are_counted() {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (600, 400)).into_drawing_area();
            let areas = root.split_evenly((2, 1));
            let error: Vec<(f64, f64)> = (0..50)
                .map(|i| (i as f64, if i == 7 { f64::NAN } else { i as f64 * 2e-6 }))
                .collect();
            let pos: Vec<(f64, f64)> = (0..50).map(|i| (i as f64, i as f64 * 400.0)).collect();
            channel_panels(
                &areas,
                (0.0, 49.0),
                "time (ms)",
                &[
                    Channel {
                        name: "pid.0.error",
                        points: error,
                    },
                    Channel {
                        name: "pos",
                        points: pos,
                    },
                ],
                |_| BLUE,
                Some(10.0),
            )
            .unwrap();
            root.present().unwrap();
        }
        let texts = texts(&svg);
        let at = |t: &str| {
            texts
                .iter()
                .position(|x| x == t)
                .unwrap_or_else(|| panic!("no {t:?} in {texts:?}"))
        };
        // Each panel: its caption, then its own y axis: the error's up to ~1e-4, the position's in k.
        let (error, pos) = (at("pid.0.error (1 non-finite values left out)"), at("pos"));
        let error_axis = &texts[error..pos];
        assert!(error_axis.iter().any(|t| t == "1e-4"), "{error_axis:?}");
        assert!(
            !error_axis.iter().any(|t| t.ends_with('k')),
            "{error_axis:?}"
        );
        assert!(texts[pos..].iter().any(|t| t == "10k"), "{texts:?}");
        assert!(
            texts
                .iter()
                .all(|t| !t.contains("e-2") && !t.contains("000")),
            "no rounding residue, no long numbers: {texts:?}"
        );
        // The error's line in two pieces (broken at its NaN), the position's in one; a marker each.
        let lines = |stroke: &str| {
            svg.matches(&format!(
                "<polyline fill=\"none\" opacity=\"1\" stroke=\"{stroke}\""
            ))
            .count()
        };
        assert_eq!(lines("#0000FF"), 3, "{svg}");
        assert_eq!(lines("#FF0000"), 2, "{svg}");
    }
}
