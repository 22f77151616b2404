//! One rendering of tables and of thread statistics, for every place that prints them (`rtapi show`,
//! the latency-test live lines and report, the `run` summary).
//!
//! [`Table`] sizes each column from its content: numbers right-aligned, text left-aligned, and
//! always `SEP` (two spaces) between two columns, so a value of any size never runs into its
//! neighbour.
//! [`ThreadRow`] holds the figures shown for a thread (from a [`ThreadStatsSnapshot`], optionally
//! a histogram's percentiles) and gives the cell of each [`Col`], and the JSON of the same figures.
//!
//! ```
//! use rtapi::render::{Col, ThreadRow};
//! let cols = [Col::Name, Col::Period, Col::Cycles, Col::LatMax];
//! let mut table = ThreadRow::table(&cols);
//! let row = ThreadRow::new("servo", 1_000_000);
//! table.row(row.cells(&cols));
//! table.note("  STALLED in function pid.0.do-pid-calcs");
//! assert_eq!(
//!     table.to_string(),
//!     "name   period  cycles  lat max(us)\n\
//!      servo     1ms       0            -\n  STALLED in function pid.0.do-pid-calcs\n"
//! );
//! ```
//!
//! It depends on nothing but `rtapi_hal`'s snapshot types, [`Nanos`] and [`us`], so that every layer
//! (runtime included) can use it.

pub mod log;

use std::fmt;

use rtapi_hal::{HistogramSnapshot, IoErrors, ThreadStatsSnapshot};
use serde_json::{json, Value as Json};

use crate::rt::clock::Nanos;
use crate::rt::units::us;

/// Between two columns, always.
pub(crate) const SEP: &str = "  ";

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

enum Line {
    Cells(Vec<String>),
    /// A line of its own (under the row before it) that does not size the columns.
    Note(String),
}

/// Columns sized from their content. Rows with fewer cells than columns are padded with empty
/// cells; trailing spaces are trimmed from every line.
pub struct Table {
    columns: Vec<(String, Align)>,
    lines: Vec<Line>,
}

impl Table {
    pub(crate) fn new<S: Into<String>>(columns: impl IntoIterator<Item = (S, Align)>) -> Table {
        Table {
            columns: columns.into_iter().map(|(h, a)| (h.into(), a)).collect(),
            lines: Vec::new(),
        }
    }

    /// Appends a row (one cell per column; extra cells are dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        self.lines.push(Line::Cells(cells));
    }

    /// Appends a free line under the last row (e.g. `  STALLED in function …`).
    pub fn note(&mut self, text: impl Into<String>) {
        self.lines.push(Line::Note(text.into()));
    }

    /// Rows added so far (notes not counted).
    #[cfg(test)]
    pub(crate) fn rows(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| matches!(l, Line::Cells(_)))
            .count()
    }

    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self.columns.iter().map(|(h, _)| width(h)).collect();
        for l in &self.lines {
            if let Line::Cells(cells) = l {
                for (w, c) in widths.iter_mut().zip(cells) {
                    *w = (*w).max(width(c));
                }
            }
        }
        widths
    }

    fn format(&self, widths: &[usize], cells: &[String]) -> String {
        let mut s = String::new();
        for (i, ((_, align), w)) in self.columns.iter().zip(widths).enumerate() {
            let cell = cells.get(i).map_or("", String::as_str);
            if i > 0 {
                s.push_str(SEP);
            }
            let pad = " ".repeat(w.saturating_sub(width(cell)));
            match align {
                Align::Left => {
                    s.push_str(cell);
                    s.push_str(&pad);
                }
                Align::Right => {
                    s.push_str(&pad);
                    s.push_str(cell);
                }
            }
        }
        s.trim_end().to_string()
    }

    /// The heading line, then one line per row and note.
    pub(crate) fn lines(&self) -> Vec<String> {
        let widths = self.widths();
        let headings: Vec<String> = self.columns.iter().map(|(h, _)| h.clone()).collect();
        let mut out = vec![self.format(&widths, &headings)];
        for l in &self.lines {
            out.push(match l {
                Line::Cells(cells) => self.format(&widths, cells),
                Line::Note(text) => text.clone(),
            });
        }
        out
    }
}

/// Every line followed by a newline.
impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in self.lines() {
            writeln!(f, "{l}")?;
        }
        Ok(())
    }
}

/// Terminal columns of a cell (`µs` is one).
fn width(s: &str) -> usize {
    s.chars().count()
}

/// The thread columns every view draws from. Times are in µs with one decimal (`us`), a period as
/// it is written on the command line (`25us`, `1ms`), `-` where there is no figure (no cycle yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
///
/// Each variant's doc gives its heading and the JSON key of the same figure (in ns there) in a
/// thread's object (`threads[]` of the `--json` report, see docs/guide/reference.md, "JSON
/// (`--json`)").
pub enum Col {
    /// `name`: the thread's name (`base`, `servo`, …), left-aligned. JSON `name`.
    Name,
    /// `period`: the thread's period as written on the command line (`25us`, `1ms`). JSON
    /// `period_ns`.
    Period,
    /// `cpu`: the CPU the thread is pinned to; `-` when none is known. JSON `cpu` (null then).
    Cpu,
    /// `prio`: the thread's SCHED_FIFO priority; `-` when unknown. JSON `priority` (null then).
    Prio,
    /// `cycles`: periods recorded so far, a count. JSON `cycles`.
    Cycles,
    /// `overruns`: periods missed (skipped because their deadline had already passed), a count.
    /// JSON `overruns`.
    Overruns,
    /// `lat min(us)`: smallest wake-up latency, µs; `-` before the first period. JSON
    /// `latency_ns.min`.
    LatMin,
    /// `lat mean(us)`: mean wake-up latency, µs; `-` before the first period. JSON
    /// `latency_ns.mean`.
    LatMean,
    /// `stddev(us)`: standard deviation of the wake-up latency, µs; `-` before the first period.
    LatStddev,
    /// `p50(us)`: median latency from the histogram, µs; `-` without a histogram or before the
    /// first period. JSON `latency_ns.p50`.
    P50,
    /// `p99(us)`: 99th percentile latency, µs; `-` as for [`Col::P50`]. JSON `latency_ns.p99`.
    P99,
    /// `p99.9(us)`: 99.9th percentile latency, µs; `-` as for [`Col::P50`]. JSON
    /// `latency_ns.p999`.
    P999,
    /// `lat max(us)`: worst wake-up latency, µs; `-` before the first period. JSON
    /// `latency_ns.max`.
    LatMax,
    /// `lat min/mean/max(us)`: min/mean/max in one cell (`1.0/2.5/9.0`), µs; `-` before the first
    /// period.
    LatMinMeanMax,
    /// `jitter(us)`: worst jitter, max |interval between two wake-ups − period|, µs. JSON
    /// `max_jitter_ns`.
    Jitter,
    /// `exec mean(us)`: mean execution time of the thread's function list per period, µs; `-`
    /// before the first period. JSON `exec_ns.mean` (null then).
    ExecMean,
    /// `exec max(us)`: longest execution time of the thread's function list, µs. JSON
    /// `exec_ns.max`.
    ExecMax,
    /// `drift(us)`: drift of the thread's timeline (against its ideal start + n·period) as its
    /// loop last reported it, µs, signed. JSON `drift_ns` in the latency-test report.
    Drift,
}

impl Col {
    pub(crate) fn heading(self) -> &'static str {
        match self {
            Col::Name => "name",
            Col::Period => "period",
            Col::Cpu => "cpu",
            Col::Prio => "prio",
            Col::Cycles => "cycles",
            Col::Overruns => "overruns",
            Col::LatMin => "lat min(us)",
            Col::LatMean => "lat mean(us)",
            Col::LatStddev => "stddev(us)",
            Col::P50 => "p50(us)",
            Col::P99 => "p99(us)",
            Col::P999 => "p99.9(us)",
            Col::LatMax => "lat max(us)",
            Col::LatMinMeanMax => "lat min/mean/max(us)",
            Col::Jitter => "jitter(us)",
            Col::ExecMean => "exec mean(us)",
            Col::ExecMax => "exec max(us)",
            Col::Drift => "drift(us)",
        }
    }

    /// The heading without its unit and `lat ` (`max`, `p99.9`, `exec max`), for a table that says
    /// once that its times are in µs.
    pub(crate) fn short_heading(self) -> &'static str {
        match self {
            Col::LatMin => "min",
            Col::LatMean => "mean",
            Col::LatStddev => "stddev",
            Col::P50 => "p50",
            Col::P99 => "p99",
            Col::P999 => "p99.9",
            Col::LatMax => "max",
            Col::LatMinMeanMax => "min/mean/max",
            Col::Jitter => "jitter",
            Col::ExecMean => "exec mean",
            Col::ExecMax => "exec max",
            Col::Drift => "drift",
            other => other.heading(),
        }
    }

    pub(crate) fn align(self) -> Align {
        match self {
            Col::Name => Align::Left,
            _ => Align::Right,
        }
    }

    /// `(heading, align)`, for [`Table::new`] when thread columns are mixed with others.
    pub(crate) fn column(self) -> (&'static str, Align) {
        (self.heading(), self.align())
    }
}

/// Latency of the periods run, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Latency {
    pub(crate) min: i64,
    pub(crate) mean: f64,
    pub(crate) stddev: f64,
    pub(crate) max: i64,
}

/// p50, p99, p99.9 of the latency, ns (bin upper edges clamped to the observed range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Percentiles {
    pub(crate) p50: i64,
    pub(crate) p99: i64,
    pub(crate) p999: i64,
}

/// The figures shown for one thread. Build it with [`ThreadRow::new`] and the `with_*` methods, or
/// (inside the crate) set its fields from figures kept elsewhere (the latency-test report does).
/// Figures are kept in ns; [`ThreadRow::cells`] shows them in µs.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadRow {
    pub(crate) name: String,
    pub(crate) period_ns: u64,
    pub(crate) cpu: Option<usize>,
    pub(crate) priority: Option<i32>,
    pub(crate) cycles: u64,
    pub(crate) overruns: u64,
    /// `None` before the first period completed.
    pub(crate) latency: Option<Latency>,
    pub(crate) percentiles: Option<Percentiles>,
    pub(crate) jitter_max_ns: u64,
    pub(crate) exec_mean_ns: Option<f64>,
    pub(crate) exec_max_ns: u64,
    pub(crate) drift_ns: i64,
    /// The thread's I/O time (hm2 read/write), when it ran I/O functions.
    pub(crate) io: Option<IoRow>,
}

/// A thread's I/O time per period (the stats block's I/O section), ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IoRow {
    pub(crate) periods: u64,
    pub(crate) calls: u64,
    pub(crate) last: u64,
    pub(crate) min: u64,
    pub(crate) mean: f64,
    pub(crate) max: u64,
    /// p50/p99/p99.9 from the I/O histogram, clamped to [min, max].
    pub(crate) percentiles: Option<Percentiles>,
    /// Errors the drivers counted during the calls and the periods with any (layout 2.3; `None`
    /// from an older segment).
    pub(crate) errors: Option<IoErrors>,
}

impl ThreadRow {
    /// A thread with no figures yet: `period_ns` is its period in ns, every count is 0 and every
    /// latency figure absent (shown as `-`).
    pub fn new(name: impl Into<String>, period_ns: u64) -> ThreadRow {
        ThreadRow {
            name: name.into(),
            period_ns,
            cpu: None,
            priority: None,
            cycles: 0,
            overruns: 0,
            latency: None,
            percentiles: None,
            jitter_max_ns: 0,
            exec_mean_ns: None,
            exec_max_ns: 0,
            drift_ns: 0,
            io: None,
        }
    }

    /// Everything a stats snapshot says (its own period is kept if it has one).
    pub(crate) fn with_stats(mut self, s: &ThreadStatsSnapshot) -> ThreadRow {
        if s.period_ns != 0 {
            self.period_ns = s.period_ns;
        }
        self.cycles = s.cycles;
        self.overruns = s.overruns;
        self.latency = s
            .latency_min()
            .zip(s.latency_max())
            .map(|(min, max)| Latency {
                min,
                mean: s.latency_mean().unwrap_or(0.0),
                stddev: s.latency_stddev().unwrap_or(0.0),
                max,
            });
        self.jitter_max_ns = s.jitter_max_ns;
        self.exec_mean_ns = s.exec_mean();
        self.exec_max_ns = s.exec_max_ns;
        self.drift_ns = s.drift_ns;
        self.io = s.io.filter(|io| io.periods > 0).map(|io| IoRow {
            periods: io.periods,
            calls: io.calls,
            last: io.last_ns,
            min: io.min_ns,
            mean: io.mean().unwrap_or(0.0),
            max: io.max_ns,
            percentiles: None,
            errors: io.errors,
        });
        self
    }

    /// One line for a thread that ran I/O functions (hm2 read/write), in µs: `I/O (hm2 read/write)
    /// per period: 1234 periods, 2468 calls, min/mean/max 210.0/575.2/1141.0 us, 0 packet errors`;
    /// `None` without. Packet errors: see [`IoErrors`].
    pub fn io_note(&self) -> Option<String> {
        let io = self.io.as_ref()?;
        let t = |ns: f64| us(ns);
        let errors = match io.errors {
            Some(e) if e.count > 0 => format!(
                ", {} packet errors in {} periods (replies late or lost, or writes unconfirmed:                  LinuxCNC's `error finishing read`)",
                e.count, e.periods
            ),
            Some(_) => ", 0 packet errors".into(),
            None => String::new(),
        };
        Some(format!(
            "I/O (hm2 read/write) per period: {} periods, {} calls, min/mean/max {}/{}/{} us{errors}",
            io.periods,
            io.calls,
            t(io.min as f64),
            t(io.mean),
            t(io.max as f64)
        ))
    }

    /// I/O-time p50/p99/p99.9 from the I/O histogram, clamped to the observed min/max (after
    /// `with_stats`).
    pub fn with_io_histogram(mut self, h: Option<&HistogramSnapshot>) -> ThreadRow {
        if let (Some(io), Some(h)) = (self.io.as_mut(), h) {
            let (min, max) = (io.min as i64, io.max as i64);
            let p = |q| h.percentile(q).map(|p| p.clamp_ns(min, max));
            io.percentiles = (|| {
                Some(Percentiles {
                    p50: p(0.5)?,
                    p99: p(0.99)?,
                    p999: p(0.999)?,
                })
            })();
        }
        self
    }

    /// p50/p99/p99.9 from the histogram, clamped to the observed min/max (call after
    /// [`with_stats`](Self::with_stats); without a period run there are none).
    pub(crate) fn with_histogram(mut self, h: &HistogramSnapshot) -> ThreadRow {
        self.percentiles = self.latency.and_then(|l| {
            let p = |q| h.percentile(q).map(|p| p.clamp_ns(l.min, l.max));
            Some(Percentiles {
                p50: p(0.5)?,
                p99: p(0.99)?,
                p999: p(0.999)?,
            })
        });
        self
    }

    pub(crate) fn with_cpu(mut self, cpu: Option<usize>) -> ThreadRow {
        self.cpu = cpu;
        self
    }

    pub(crate) fn with_priority(mut self, priority: i32) -> ThreadRow {
        self.priority = Some(priority);
        self
    }

    /// An empty table with these columns' headings.
    pub fn table(cols: &[Col]) -> Table {
        Table::new(cols.iter().map(|c| c.column()))
    }

    /// An empty table with these columns' [short headings](Col::short_heading).
    pub(crate) fn short_table(cols: &[Col]) -> Table {
        Table::new(cols.iter().map(|c| (c.short_heading(), c.align())))
    }

    /// The cell of one column.
    pub(crate) fn cell(&self, col: Col) -> String {
        let t = |ns: f64| us(ns);
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), t);
        let lat = |f: fn(&Latency) -> f64| opt(self.latency.as_ref().map(f));
        let pct = |f: fn(&Percentiles) -> i64| opt(self.percentiles.as_ref().map(|p| f(p) as f64));
        match col {
            Col::Name => self.name.clone(),
            Col::Period => {
                Nanos::from_nanos(i64::try_from(self.period_ns).unwrap_or(i64::MAX)).to_string()
            }
            Col::Cpu => self.cpu.map_or_else(|| "-".into(), |c| c.to_string()),
            Col::Prio => self.priority.map_or_else(|| "-".into(), |p| p.to_string()),
            Col::Cycles => self.cycles.to_string(),
            Col::Overruns => self.overruns.to_string(),
            Col::LatMin => lat(|l| l.min as f64),
            Col::LatMean => lat(|l| l.mean),
            Col::LatStddev => lat(|l| l.stddev),
            Col::P50 => pct(|p| p.p50),
            Col::P99 => pct(|p| p.p99),
            Col::P999 => pct(|p| p.p999),
            Col::LatMax => lat(|l| l.max as f64),
            Col::LatMinMeanMax => self.latency.map_or_else(
                || "-".into(),
                |l| format!("{}/{}/{}", t(l.min as f64), t(l.mean), t(l.max as f64)),
            ),
            Col::Jitter => t(self.jitter_max_ns as f64),
            Col::ExecMean => opt(self.exec_mean_ns),
            Col::ExecMax => t(self.exec_max_ns as f64),
            Col::Drift => t(self.drift_ns as f64),
        }
    }

    /// The cells of these columns, in order, for [`Table::row`]: times in µs with one decimal, `-`
    /// where there is no figure (see [`Col`]).
    pub fn cells(&self, cols: &[Col]) -> Vec<String> {
        cols.iter().map(|&c| self.cell(c)).collect()
    }

    /// The same figures as JSON, in ns: `name`, `period_ns`, `cpu`, `priority`, `cycles`,
    /// `overruns`, `latency_ns` {`min`, `mean`, `max`, and `p50`/`p99`/`p999` when known; null
    /// before the first period}, `max_jitter_ns`, `exec_ns` {`mean`, `max`}.
    pub(crate) fn json(&self) -> Json {
        let l = self.latency.as_ref();
        let mut latency = json!({
            "min": l.map(|l| l.min),
            "mean": l.map(|l| l.mean),
            "max": l.map(|l| l.max),
        });
        if let Some(p) = &self.percentiles {
            latency["p50"] = json!(p.p50);
            latency["p99"] = json!(p.p99);
            latency["p999"] = json!(p.p999);
        }
        let mut j = json!({
            "name": self.name,
            "period_ns": self.period_ns,
            "cpu": self.cpu,
            "priority": self.priority,
            "cycles": self.cycles,
            "overruns": self.overruns,
            "latency_ns": latency,
            "max_jitter_ns": self.jitter_max_ns,
            "exec_ns": {"mean": self.exec_mean_ns, "max": self.exec_max_ns},
        });
        if let Some(io) = &self.io {
            let mut o = json!({
                "periods": io.periods,
                "calls": io.calls,
                "last": io.last,
                "min": io.min,
                "mean": io.mean,
                "max": io.max,
            });
            if let Some(p) = &io.percentiles {
                o["p50"] = json!(p.p50);
                o["p99"] = json!(p.p99);
                o["p999"] = json!(p.p999);
            }
            j["io_ns"] = o;
            if let Some(e) = io.errors {
                j["io_errors"] = json!({"count": e.count, "periods": e.periods});
            }
        }
        j
    }
}

/// A float as people read it everywhere rtapi prints one for them (`getp`, `show`, `watch`, halcmd,
/// the scope preview): C's `printf("%.7g", x)`, LinuxCNC's halcmd format (`0.1234568`,
/// `1.234568e+08`). JSON, CSV and halcmd's `save` write the exact value instead (Rust's shortest
/// round-trip form), so that what a program reads back is the value itself.
pub fn float_text(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rounded to 7 significant digits first: the exponent is the rounded number's.
    let sci = format!("{x:.6e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let trim = |t: &str| -> String {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t.to_string()
        }
    };
    if !(-4..7).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{x:.*}", (6 - exp) as usize))
    }
}

/// A HAL value as people read it: floats by [`float_text`], bits `TRUE`/`FALSE`, integers as they are.
pub fn value_text(v: rtapi_hal::Value) -> String {
    match v {
        rtapi_hal::Value::Float(f) => float_text(f),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_show_as_c_percent_7g() {
        let cases = [
            (1e-7, "1e-07"),
            (0.1, "0.1"),
            (123456789.123, "1.234568e+08"),
            (-2.5e12, "-2.5e+12"),
            (1.23456789, "1.234568"),
            (4.0, "4"),
            (9999999.5, "1e+07"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (1234567.0, "1234567"),
        ];
        for (x, want) in cases {
            assert_eq!(float_text(x), want, "{x}");
        }
    }

    const ALL: [Col; 18] = [
        Col::Name,
        Col::Period,
        Col::Cpu,
        Col::Prio,
        Col::Cycles,
        Col::Overruns,
        Col::LatMin,
        Col::LatMean,
        Col::LatStddev,
        Col::P50,
        Col::P99,
        Col::P999,
        Col::LatMax,
        Col::LatMinMeanMax,
        Col::Jitter,
        Col::ExecMean,
        Col::ExecMax,
        Col::Drift,
    ];

    /// The cells of a line: what stands between runs of [`SEP`].
    fn fields(line: &str) -> Vec<&str> {
        line.split(SEP)
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect()
    }

    fn huge() -> ThreadRow {
        ThreadRow {
            name: "a-very-long-thread-name".into(),
            period_ns: 10_000_000_000,
            cpu: Some(1023),
            priority: Some(99),
            cycles: 1_000_000_000_000,
            overruns: 999_999_999_999,
            latency: Some(Latency {
                min: 40_000_000_000,
                mean: 43_030_004_409.3,
                stddev: 427_200_000_000.0,
                max: 40_930_004_272_000,
            }),
            percentiles: Some(Percentiles {
                p50: 40_000_000_000,
                p99: 41_000_000_000,
                p999: 42_000_000_000,
            }),
            jitter_max_ns: 40_930_004_272_000,
            exec_mean_ns: Some(40e9),
            exec_max_ns: 40_000_000_000,
            drift_ns: -40_000_000_000,
            io: None,
        }
    }

    /// The old fixed-width formats printed `43030004.440930004.3` for two large neighbours; every
    /// column of every line must now stand apart, huge and small values in the same table.
    #[test]
    fn huge_values_never_run_together() {
        let mut t = ThreadRow::table(&ALL);
        t.row(huge().cells(&ALL));
        t.row(ThreadRow::new("b", 25_000).cells(&ALL));
        let lines = t.lines();
        assert_eq!(lines.len(), 3);
        for l in &lines {
            assert_eq!(fields(l).len(), ALL.len(), "{l}\n{}", lines.join("\n"));
        }
        let big = fields(&lines[1]);
        assert_eq!(big[0], "a-very-long-thread-name");
        assert_eq!(big[1], "10s");
        assert_eq!(big[4], "1000000000000");
        assert_eq!(big[5], "999999999999");
        assert_eq!(big[6], "40000000.0");
        assert_eq!(big[7], "43030004.4");
        assert_eq!(big[12], "40930004272.0");
        assert_eq!(big[13], "40000000.0/43030004.4/40930004272.0");
        assert_eq!(big[17], "-40000000.0");
        let small = fields(&lines[2]);
        assert_eq!(small[..6], ["b", "25us", "-", "-", "0", "0"]);
        // Numbers end where their heading ends (right-aligned), the name starts where its heading does.
        for (col, heading) in ALL.iter().zip(fields(&lines[0])) {
            let end = lines[0].find(heading).unwrap() + heading.len();
            if col.align() == Align::Right {
                for l in &lines[1..] {
                    let before = &l[..end];
                    assert!(!before.ends_with(' '), "{col:?} not right-aligned: {l}");
                    assert!(l[end..].is_empty() || l[end..].starts_with(SEP), "{l}");
                }
            }
        }
    }

    #[test]
    fn widths_come_from_content_and_notes_do_not_count() {
        let mut t = Table::new([("name", Align::Left), ("n", Align::Right)]);
        t.row(vec!["x".into(), "12345".into()]);
        t.note("  a long note that is wider than the whole table");
        t.row(vec!["longer".into()]);
        assert_eq!(
            t.to_string(),
            "name        n\n\
             x       12345\n  a long note that is wider than the whole table\nlonger\n"
        );
        assert_eq!(t.rows(), 2);
        // µs is one column wide.
        let mut t = Table::new([("a", Align::Right), ("b", Align::Left)]);
        t.row(vec!["µs".into(), "x".into()]);
        assert_eq!(t.lines(), [" a  b", "µs  x"]);
    }

    #[test]
    fn a_row_from_stats_and_histogram() {
        let mut s: ThreadStatsSnapshot = zero_stats();
        s.period_ns = 1_000_000;
        s.cycles = 4;
        s.overruns = 1;
        s.latency_min_ns = 1_000;
        s.latency_max_ns = 9_000;
        s.latency_sum_ns = 16_000;
        s.latency_sum_sq_ns2 = 4 * 4_000u128 * 4_000;
        s.jitter_max_ns = 2_500;
        s.exec_max_ns = 700;
        s.exec_sum_ns = 2_000;
        let h = HistogramSnapshot {
            bin_ns: 1_000,
            counts: vec![0, 1, 2, 0, 0, 0, 0, 0, 0, 1],
            underflow: 0,
            overflow: 0,
        };
        let r = ThreadRow::new("servo", 0)
            .with_stats(&s)
            .with_histogram(&h)
            .with_cpu(Some(1))
            .with_priority(80);
        assert_eq!(
            r.cells(&[
                Col::Period,
                Col::Cpu,
                Col::Prio,
                Col::LatMin,
                Col::LatMean,
                Col::P50,
                Col::P99,
                Col::LatMax,
                Col::ExecMean,
                Col::Jitter
            ]),
            ["1ms", "1", "80", "1.0", "4.0", "3.0", "9.0", "9.0", "0.5", "2.5"]
        );
        let j = r.json();
        assert_eq!(j["latency_ns"]["max"], 9_000);
        assert_eq!(j["latency_ns"]["p50"], 3_000);
        assert_eq!(j["exec_ns"]["max"], 700);
        assert_eq!(j["priority"], 80);
        // No period yet: dashes and nulls, not zeros.
        let empty = ThreadRow::new("base", 25_000)
            .with_stats(&zero_stats())
            .with_histogram(&h);
        assert_eq!(
            empty.cells(&[Col::LatMin, Col::P99, Col::LatMinMeanMax, Col::ExecMean]),
            ["-", "-", "-", "-"]
        );
        assert!(empty.json()["latency_ns"]["max"].is_null());
        assert_eq!(empty.cell(Col::Period), "25us");
    }

    /// A zeroed snapshot, built field by field.
    fn zero_stats() -> ThreadStatsSnapshot {
        ThreadStatsSnapshot {
            period_ns: 0,
            cycles: 0,
            overruns: 0,
            latency_min_ns: 0,
            latency_max_ns: 0,
            latency_sum_ns: 0,
            latency_sum_sq_ns2: 0,
            jitter_max_ns: 0,
            exec_last_ns: 0,
            exec_max_ns: 0,
            exec_sum_ns: 0,
            drift_ns: 0,
            last_wake_ns: 0,
            spikes_total: 0,
            spike_ring: Default::default(),
            io: None,
        }
    }
}
