//! The exposition: metric families and samples, written in the OpenMetrics 1.0 text format or in the
//! Prometheus text format 0.0.4 (the two differ in the counter's family name, `# UNIT`, HELP escaping
//! and the closing `# EOF`).

use std::fmt::Write as _;

/// The media type of each format, as sent in `Content-Type`.
pub(super) const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// See [`OPENMETRICS`].
pub(super) const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Which text format to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    OpenMetrics,
    Prometheus,
}

impl Format {
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => OPENMETRICS,
            Format::Prometheus => PROMETHEUS,
        }
    }
}

/// A metric family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Gauge,
    /// Its samples are named `<family>_total`.
    Counter,
    /// Its samples are `<family>_bucket{le}`, `<family>_count` and `<family>_sum`.
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// A sample's value: integers are written exactly, floats in their shortest round-trip form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn write(self, out: &mut String) {
        match self {
            Num::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Num::Float(f) => out.push_str(&float(f)),
        }
    }
}

/// A float as both formats spell it: `NaN`, `+Inf`, `-Inf`, else the shortest text that reads back
/// as the same number (`0.001`, `5e-6`, `2.0`).
pub(super) fn float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{f:?}")
    }
}

/// Nanoseconds as seconds (the Prometheus convention is base units).
pub(super) fn seconds(ns: impl Into<f64>) -> Num {
    Num::Float(ns.into() / 1e9)
}

/// One line of a family: a suffix of the family's name (`_total`, `_bucket`, or none), labels, value.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Sample {
    pub suffix: &'static str,
    pub labels: Vec<(&'static str, String)>,
    pub value: Num,
}

/// A metric family: its name (without `_total` for a counter), type, unit, help text and samples.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Family {
    pub name: &'static str,
    pub kind: Kind,
    /// `seconds` for the families whose name ends in `_seconds`.
    pub unit: Option<&'static str>,
    pub help: &'static str,
    pub samples: Vec<Sample>,
}

impl Family {
    pub(super) fn new(name: &'static str, kind: Kind, help: &'static str) -> Family {
        Family {
            name,
            kind,
            unit: name.ends_with("_seconds").then_some("seconds"),
            help,
            samples: Vec::new(),
        }
    }

    /// Adds the family's main sample (`<name>_total` for a counter, `<name>` for a gauge).
    pub(super) fn push(&mut self, labels: Vec<(&'static str, String)>, value: Num) {
        let suffix = if self.kind == Kind::Counter {
            "_total"
        } else {
            ""
        };
        self.samples.push(Sample {
            suffix,
            labels,
            value,
        });
    }
}

/// An empty, nameless gauge (what `std::mem::take` leaves behind).
impl Default for Family {
    fn default() -> Family {
        Family::new("", Kind::Gauge, "")
    }
}

/// Escapes a label value: backslash, double quote and line feed (both formats).
pub(super) fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a HELP text: backslash and line feed, and in OpenMetrics the double quote too.
fn escape_help(text: &str, format: Format) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if format == Format::OpenMetrics => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// Writes the families, in order, each as one block; a family with no sample is left out (a
/// Prometheus server does not need the metadata of series that do not exist). OpenMetrics ends with
/// `# EOF`.
pub(super) fn render(families: &[Family], format: Format) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        // The name metadata is about: OpenMetrics names the counter family without `_total`.
        let meta = match (format, f.kind) {
            (Format::Prometheus, Kind::Counter) => format!("{}_total", f.name),
            _ => f.name.to_string(),
        };
        let _ = writeln!(out, "# TYPE {meta} {}", f.kind.as_str());
        if let (Format::OpenMetrics, Some(unit)) = (format, f.unit) {
            let _ = writeln!(out, "# UNIT {meta} {unit}");
        }
        let _ = writeln!(out, "# HELP {meta} {}", escape_help(f.help, format));
        for s in &f.samples {
            out.push_str(f.name);
            out.push_str(s.suffix);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            out.push(' ');
            s.value.write(&mut out);
            out.push('\n');
        }
    }
    if format == Format::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// The bucket edges exported for a histogram of `bins` bins `bin_ns` wide, as bin counts `k` (the edge
/// is `k * bin_ns`): the 1-2-5 steps of each decade from one bin to the histogram's range, each
/// rounded to a whole number of bins, and the range's end. A bin `[i·w, (i+1)·w)` lies wholly below the
/// edge `(i+1)·w`, so every bucket counts exactly the samples below its `le` (Prometheus' `le` is "at
/// most"; no sample can sit on an edge and be counted in the wrong bucket by more than one ns).
pub(super) fn bucket_edges(bin_ns: u64, bins: usize) -> Vec<usize> {
    let bin_ns = bin_ns.max(1);
    let range = (bins as u128) * bin_ns as u128;
    // The first bin is always an edge of its own.
    let mut edges: Vec<usize> = if bins > 1 { vec![1] } else { Vec::new() };
    let mut decade: u128 = 1;
    while decade * 10 <= bin_ns as u128 {
        decade *= 10;
    }
    'outer: loop {
        for step in [1u128, 2, 5] {
            let ns = decade * step;
            if ns >= range {
                break 'outer;
            }
            if ns < bin_ns as u128 {
                continue;
            }
            let k = ns.div_ceil(bin_ns as u128) as usize;
            if edges.last() != Some(&k) && k < bins {
                edges.push(k);
            }
        }
        decade *= 10;
    }
    if bins > 0 {
        edges.push(bins);
    }
    edges
}

/// The samples of a latency histogram: cumulative `_bucket`s at [`bucket_edges`] and `+Inf`, `_count`,
/// and `_sum` (given only when no sample was negative: a sum that can shrink is no counter).
pub(super) fn histogram_samples(
    labels: &[(&'static str, String)],
    h: &rtapi_hal::HistogramSnapshot,
    sum_ns: Option<i128>,
) -> Vec<Sample> {
    let mut out = Vec::new();
    let bucket = |le: String, n: u64| {
        let mut l = labels.to_vec();
        l.push(("le", le));
        Sample {
            suffix: "_bucket",
            labels: l,
            value: Num::Int(n as i128),
        }
    };
    // Negative latencies are below every edge.
    let mut seen = h.underflow;
    let mut i = 0;
    for k in bucket_edges(h.bin_ns, h.counts.len()) {
        while i < k {
            seen = seen.saturating_add(h.counts[i]);
            i += 1;
        }
        let le = (k as u128 * h.bin_ns as u128) as f64 / 1e9;
        out.push(bucket(float(le), seen));
    }
    let total = h.total();
    out.push(bucket("+Inf".into(), total));
    out.push(Sample {
        suffix: "_count",
        labels: labels.to_vec(),
        value: Num::Int(total as i128),
    });
    if let Some(sum) = sum_ns.filter(|s| *s >= 0 && h.underflow == 0) {
        out.push(Sample {
            suffix: "_sum",
            labels: labels.to_vec(),
            value: Num::Float(sum as f64 / 1e9),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtapi_hal::HistogramSnapshot;

    #[test]
    fn floats_read_back() {
        assert_eq!(float(0.001), "0.001");
        assert_eq!(float(5e-6), "5e-6");
        assert_eq!(float(2.0), "2.0");
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(float(f64::NAN), "NaN");
        for v in [1e-9, 123.456e-7, 0.1 + 0.2, 1e300] {
            assert_eq!(float(v).parse::<f64>().unwrap(), v);
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_label("pid.0.out"), "pid.0.out");
    }

    #[test]
    fn the_default_histogram_gets_decade_buckets() {
        // 1 µs × 1000 bins: 1, 2, 5, 10, …, 500 µs and the 1 ms end.
        assert_eq!(
            bucket_edges(1000, 1000),
            vec![1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
        );
        // Odd widths round up to whole bins, without duplicates, and end at the range.
        assert_eq!(bucket_edges(3000, 10), vec![1, 2, 4, 7, 10]);
        assert_eq!(bucket_edges(1, 3), vec![1, 2, 3]);
        assert_eq!(bucket_edges(1000, 1), vec![1]);
    }

    #[test]
    fn buckets_are_cumulative_and_end_at_the_count() {
        let h = HistogramSnapshot {
            bin_ns: 1000,
            counts: (0..1000).map(|i| (i % 7) as u64).collect(),
            underflow: 2,
            overflow: 5,
        };
        let s = histogram_samples(&[("thread", "servo".into())], &h, Some(123));
        let buckets: Vec<&Sample> = s.iter().filter(|s| s.suffix == "_bucket").collect();
        let mut last = 0;
        for b in &buckets {
            let Num::Int(n) = b.value else { panic!() };
            assert!(n >= last);
            last = n;
        }
        assert_eq!(last, h.total() as i128);
        // The 10 µs bucket: underflow plus bins 0..10.
        let ten = buckets
            .iter()
            .find(|b| b.labels.iter().any(|(k, v)| *k == "le" && v == "1e-5"))
            .unwrap();
        assert_eq!(
            ten.value,
            Num::Int(2 + h.counts[..10].iter().sum::<u64>() as i128)
        );
        // A negative sample: no _sum.
        assert!(!s.iter().any(|s| s.suffix == "_sum"));
        let h0 = HistogramSnapshot { underflow: 0, ..h };
        let s = histogram_samples(&[], &h0, Some(2_500_000_000));
        assert_eq!(s.last().unwrap().suffix, "_sum");
        assert_eq!(s.last().unwrap().value, Num::Float(2.5));
    }

    #[test]
    fn the_two_formats() {
        let mut c = Family::new("rtapi_thread_cycles", Kind::Counter, "Periods \"done\".");
        c.push(vec![("instance", "a\"b".into())], Num::Int(7));
        let mut g = Family::new("rtapi_thread_latency_max_seconds", Kind::Gauge, "Worst.");
        g.push(vec![], seconds(1500.0));
        let empty = Family::new("rtapi_nothing", Kind::Gauge, "Not written.");
        let fams = [c, g, empty];
        assert_eq!(
            render(&fams, Format::OpenMetrics),
            "# TYPE rtapi_thread_cycles counter\n\
             # HELP rtapi_thread_cycles Periods \\\"done\\\".\n\
             rtapi_thread_cycles_total{instance=\"a\\\"b\"} 7\n\
             # TYPE rtapi_thread_latency_max_seconds gauge\n\
             # UNIT rtapi_thread_latency_max_seconds seconds\n\
             # HELP rtapi_thread_latency_max_seconds Worst.\n\
             rtapi_thread_latency_max_seconds 1.5e-6\n\
             # EOF\n"
        );
        assert_eq!(
            render(&fams, Format::Prometheus),
            "# TYPE rtapi_thread_cycles_total counter\n\
             # HELP rtapi_thread_cycles_total Periods \"done\".\n\
             rtapi_thread_cycles_total{instance=\"a\\\"b\"} 7\n\
             # TYPE rtapi_thread_latency_max_seconds gauge\n\
             # HELP rtapi_thread_latency_max_seconds Worst.\n\
             rtapi_thread_latency_max_seconds 1.5e-6\n"
        );
    }
}
