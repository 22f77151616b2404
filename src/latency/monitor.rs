//! Watching the running threads once a second from outside the RT path: per-second figures come from
//! the difference of two histogram copies (bins are cumulative counters), so the RT loop does no extra
//! work for the live display or the per-second plot.

use crate::render::{Align, Col, Table, ThreadRow};
use crate::rt::units::us;
use rtapi_hal::{HalReader, HistogramSnapshot, ThreadStatsSnapshot};

/// One thread's figures for the last interval and the whole run so far.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// Whole run, with the histogram's percentiles.
    pub(crate) run: ThreadRow,
    /// Last interval: min/avg/max latency (ns); `None` when no period completed in it.
    pub(crate) last: Option<(u64, f64, u64)>,
}

/// Per-thread state between two ticks.
pub(crate) struct Monitor {
    threads: Vec<Watched>,
}

struct Watched {
    name: String,
    prev_hist: Option<HistogramSnapshot>,
    prev_stats: Option<ThreadStatsSnapshot>,
    /// Worst latency of each interval (ns).
    max_per_interval: Vec<u64>,
}

impl Monitor {
    pub(crate) fn new(names: &[String]) -> Monitor {
        Monitor {
            threads: names
                .iter()
                .map(|n| Watched {
                    name: n.clone(),
                    prev_hist: None,
                    prev_stats: None,
                    max_per_interval: Vec::new(),
                })
                .collect(),
        }
    }

    /// Reads every thread once and returns the live figures.
    pub(crate) fn tick(&mut self, reader: &HalReader) -> Vec<Live> {
        self.threads
            .iter_mut()
            .filter_map(|w| w.tick(reader))
            .collect()
    }

    /// The worst latency of each interval, per thread, in the order given to [`Monitor::new`].
    pub(crate) fn max_per_interval(&self) -> Vec<Vec<u64>> {
        self.threads
            .iter()
            .map(|w| w.max_per_interval.clone())
            .collect()
    }
}

impl Watched {
    fn tick(&mut self, reader: &HalReader) -> Option<Live> {
        let stats = reader.thread_stats(&self.name).ok()?;
        let hist = reader.histogram(&self.name).ok()?;
        let last = interval(
            self.prev_hist.as_ref(),
            &hist,
            self.prev_stats.as_ref(),
            &stats,
        );
        self.max_per_interval
            .push(last.map_or(0, |(_, _, max)| max));
        let live = Live {
            run: ThreadRow::new(self.name.clone(), stats.period_ns)
                .with_stats(&stats)
                .with_histogram(&hist),
            last,
        };
        self.prev_hist = Some(hist);
        self.prev_stats = Some(stats);
        Some(live)
    }
}

/// min/avg/max of the samples between two copies. Min and max come from the lowest and highest bin
/// that grew (bin resolution); a sample that overflowed the histogram is taken from the run maximum
/// when that grew in the interval, else from the histogram's range.
fn interval(
    prev: Option<&HistogramSnapshot>,
    now: &HistogramSnapshot,
    prev_stats: Option<&ThreadStatsSnapshot>,
    stats: &ThreadStatsSnapshot,
) -> Option<(u64, f64, u64)> {
    let before = |i: usize| prev.and_then(|p| p.counts.get(i)).copied().unwrap_or(0);
    let grew: Vec<(usize, u64)> = now
        .counts
        .iter()
        .enumerate()
        .map(|(i, &c)| (i, c.saturating_sub(before(i))))
        .filter(|&(_, d)| d > 0)
        .collect();
    let overflowed = now.overflow.saturating_sub(prev.map_or(0, |p| p.overflow));
    let cycles = stats
        .cycles
        .saturating_sub(prev_stats.map_or(0, |p| p.cycles));
    if cycles == 0 || (grew.is_empty() && overflowed == 0) {
        return None;
    }
    let sum = stats.latency_sum_ns - prev_stats.map_or(0, |p| p.latency_sum_ns);
    let avg = sum as f64 / cycles as f64;
    let range_end = now.bin_ns * now.counts.len() as u64;
    let min = grew
        .first()
        .map_or(range_end, |&(i, _)| i as u64 * now.bin_ns);
    let max = if overflowed > 0 {
        let run_max = stats.latency_max_ns.max(0) as u64;
        if prev_stats.is_none_or(|p| stats.latency_max_ns > p.latency_max_ns) {
            run_max
        } else {
            range_end
        }
    } else {
        grew.last().map_or(0, |&(i, _)| (i as u64 + 1) * now.bin_ns)
    };
    Some((min, avg, max))
}

/// The whole-run columns after the last interval's.
const RUN_COLS: [Col; 4] = [Col::LatMinMeanMax, Col::P99, Col::Jitter, Col::Overruns];

/// The live block: the header line, the column headings, one line per thread (times in µs).
pub(crate) fn render(lines: &[Live], header: &str) -> Vec<String> {
    let mut columns = vec![
        Col::Name.column(),
        Col::Period.column(),
        Col::Cycles.column(),
        ("last 1s min/mean/max", Align::Right),
        ("run min/mean/max", Align::Right),
    ];
    columns.extend(RUN_COLS[1..].iter().map(|c| (c.short_heading(), c.align())));
    let mut table = Table::new(columns);
    for l in lines {
        let r = &l.run;
        let mut cells = r.cells(&[Col::Name, Col::Period, Col::Cycles]);
        cells.push(l.last.map_or("-".into(), |(a, b, c)| {
            format!("{}/{}/{}", us(a as f64), us(b), us(c as f64))
        }));
        cells.extend(r.cells(&RUN_COLS));
        table.row(cells);
    }
    let mut out = vec![header.to_string()];
    out.extend(table.lines());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{Latency, Percentiles};

    /// The live lines' fixed widths ran `p99`, `jitter` and `overrun` together once a value passed
    /// 8 characters (a 40 s stall); each cell now stands apart.
    #[test]
    fn live_lines_keep_huge_values_apart() {
        let mut run = ThreadRow::new("base", 25_000);
        run.cycles = 1_000_000_000_000;
        run.overruns = 999_999_999_999;
        run.latency = Some(Latency {
            min: 12_000,
            mean: 40e9,
            stddev: 0.0,
            max: 40_000_000_000,
        });
        run.percentiles = Some(Percentiles {
            p50: 40_000_000_000,
            p99: 40_000_000_000,
            p999: 40_000_000_000,
        });
        run.jitter_max_ns = 40_000_000_000;
        let lines = [
            Live {
                run,
                last: Some((12_000, 40e9, 40_000_000_000)),
            },
            Live {
                run: ThreadRow::new("servo", 1_000_000),
                last: None,
            },
        ];
        let block = render(&lines, "header");
        assert_eq!(block[0], "header");
        let fields = |l: &str| -> Vec<String> {
            l.split("  ")
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .map(String::from)
                .collect()
        };
        assert_eq!(fields(&block[1]).len(), 8, "{block:#?}");
        assert_eq!(
            fields(&block[2]),
            [
                "base",
                "25us",
                "1000000000000",
                "12.0/40000000.0/40000000.0",
                "12.0/40000000.0/40000000.0",
                "40000000.0",
                "40000000.0",
                "999999999999"
            ]
        );
        assert_eq!(
            fields(&block[3]),
            ["servo", "1ms", "0", "-", "-", "-", "0.0", "0"]
        );
    }
}
