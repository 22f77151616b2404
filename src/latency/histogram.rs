//! cyclictest's `-h` histogram text format, so existing plot scripts (OSADL's among them) read our
//! files unchanged: one row per 1 µs bin (`%06d` bin, then one `%06d` count per thread, tab-separated),
//! then the `# Total`, `# Min/Avg/Max Latencies`, `# Histogram Overflows` and overflow-cycle trailer.

use super::report::ThreadResult;
use std::fmt::Write;

/// Renders the threads' histograms (all must share the 1 µs bin width) in cyclictest's format.
pub(crate) fn render(threads: &[ThreadResult]) -> String {
    let bins = threads
        .iter()
        .map(|t| t.histogram.counts.len())
        .max()
        .unwrap_or(0);
    let mut s = String::from("# Histogram\n");
    let row = |label: &str, cells: Vec<String>| format!("{label}{}\n", cells.join(" "));
    // Writing to a String cannot fail.
    for bin in 0..bins {
        let counts: Vec<String> = threads
            .iter()
            .map(|t| format!("{:06}", t.histogram.counts.get(bin).copied().unwrap_or(0)))
            .collect();
        let _ = writeln!(s, "{bin:06} {}", counts.join("\t"));
    }
    let per = |f: &dyn Fn(&ThreadResult) -> String| threads.iter().map(f).collect::<Vec<_>>();
    s += &row(
        "# Total: ",
        per(&|t| format!("{:09}", t.histogram.counts.iter().sum::<u64>())),
    );
    s += &row(
        "# Min Latencies: ",
        per(&|t| format!("{:05}", t.latency_ns.min / 1000)),
    );
    s += &row(
        "# Avg Latencies: ",
        per(&|t| format!("{:05}", (t.latency_ns.mean / 1000.0).round() as u64)),
    );
    s += &row(
        "# Max Latencies: ",
        per(&|t| format!("{:05}", t.latency_ns.max / 1000)),
    );
    s += &row(
        "# Histogram Overflows: ",
        per(&|t| format!("{:05}", t.histogram.overflow)),
    );
    s += "# Histogram Overflow at cycle number:\n";
    for (i, t) in threads.iter().enumerate() {
        let limit = t.histogram.bin_ns * t.histogram.counts.len() as u64;
        let cycles: Vec<String> = t
            .spikes
            .iter()
            .filter(|sp| sp.latency_ns >= limit)
            .map(|sp| format!("{:05}", sp.cycle))
            .collect();
        let others = t.histogram.overflow.saturating_sub(cycles.len() as u64);
        let _ = write!(s, "# Thread {i}:");
        for c in &cycles {
            let _ = write!(s, " {c}");
        }
        if others > 0 {
            let _ = write!(s, " # {others:05} others");
        }
        s.push('\n');
    }
    s
}

/// What a cyclictest-format reader sees in a file: per-thread bin counts and the trailer values.
#[derive(Debug, Default, PartialEq)]
///
/// Every field has one entry per thread (histogram column), in the file's column order; a field
/// whose trailer line is missing is empty.
pub struct Parsed {
    /// Per thread, the sample count of each 1 µs bin: `counts[thread][bin]`, bin `b` holding the
    /// latencies from `b` µs to just under `b + 1` µs.
    pub counts: Vec<Vec<u64>>,
    /// Per thread, the `# Total:` trailer: samples in the bins (overflows not included).
    pub total: Vec<u64>,
    /// Per thread, the `# Max Latencies:` trailer: worst latency, whole µs (ns / 1000, truncated).
    pub max_us: Vec<u64>,
    /// Per thread, the `# Histogram Overflows:` trailer: samples at or above the last bin's end.
    pub overflows: Vec<u64>,
}

/// Parses the format the way plot scripts do (rows that do not start with `#` are bins); used by the
/// tests to prove the file is readable, and handy for comparing against a real cyclictest run.
pub fn parse(text: &str) -> Result<Parsed, String> {
    let mut p = Parsed::default();
    let nums = |rest: &str| -> Result<Vec<u64>, String> {
        rest.split_whitespace()
            .map(|w| w.parse::<u64>().map_err(|_| format!("bad number '{w}'")))
            .collect()
    };
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if let Some(rest) = line.strip_prefix("# Total:") {
            p.total = nums(rest)?;
        } else if let Some(rest) = line.strip_prefix("# Max Latencies:") {
            p.max_us = nums(rest)?;
        } else if let Some(rest) = line.strip_prefix("# Histogram Overflows:") {
            p.overflows = nums(rest)?;
        } else if line.starts_with('#') || line.trim().is_empty() {
            continue;
        } else {
            let mut cells = nums(line).map_err(|e| format!("line {line_no}: {e}"))?;
            if cells.is_empty() {
                continue;
            }
            let bin = cells.remove(0) as usize;
            if bin != p.counts.first().map_or(0, Vec::len) {
                return Err(format!("line {line_no}: bin {bin} out of order"));
            }
            if p.counts.is_empty() {
                p.counts = vec![Vec::new(); cells.len()];
            }
            if cells.len() != p.counts.len() {
                return Err(format!(
                    "line {line_no}: {} columns, expected {}",
                    cells.len(),
                    p.counts.len()
                ));
            }
            for (col, c) in p.counts.iter_mut().zip(cells) {
                col.push(c);
            }
        }
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::report::{HistogramOut, LatencySummary, Spike};

    fn thread(counts: Vec<u64>, overflow: u64, max: u64, spikes: Vec<Spike>) -> ThreadResult {
        ThreadResult {
            latency_ns: LatencySummary {
                min: 2_400,
                mean: 5_600.0,
                max,
                ..Default::default()
            },
            histogram: HistogramOut {
                bin_ns: 1000,
                counts,
                overflow,
            },
            spikes,
            ..Default::default()
        }
    }

    #[test]
    fn matches_cyclictest_layout_and_round_trips() {
        let spike = Spike {
            cycle: 42,
            at_s: 0.1,
            latency_ns: 9_000,
            involuntary_switches: 1,
            page_faults: 0,
            wake_ns: 0,
            causes: None,
            suspects: vec![],
            without_switches: false,
        };
        let t = [
            thread(vec![0, 3, 5], 2, 9_000, vec![spike]),
            thread(vec![1, 1, 0], 0, 2_000, vec![]),
        ];
        let text = render(&t);
        assert!(text.contains("000001 000003\t000001\n"), "{text}");
        assert!(text.contains("# Total: 000000008 000000002\n"));
        assert!(text.contains("# Max Latencies: 00009 00002\n"));
        assert!(text.contains("# Avg Latencies: 00006 00006\n"));
        assert!(text.contains("# Histogram Overflows: 00002 00000\n"));
        assert!(text.contains("# Thread 0: 00042 # 00001 others\n"));
        assert!(text.contains("# Thread 1:\n"));
        let p = parse(&text).unwrap();
        assert_eq!(p.counts, vec![vec![0, 3, 5], vec![1, 1, 0]]);
        assert_eq!(p.total, vec![8, 2]);
        assert_eq!(p.overflows, vec![2, 0]);
    }

    #[test]
    fn parses_real_cyclictest_output_shape() {
        let cyclictest = "# /dev/cpu_dma_latency set to 0us\n# Histogram\n000000 000000\t000000\n000001 000004\t000002\n# Total: 000000004 000000002\n# Min Latencies: 00001 00001\n# Avg Latencies: 00001 00001\n# Max Latencies: 07525 07519\n# Histogram Overflows: 00483 00469\n# Histogram Overflow at cycle number:\n# Thread 0: 00000 00003 # 00463 others\n";
        let p = parse(cyclictest).unwrap();
        assert_eq!(p.counts, vec![vec![0, 4], vec![0, 2]]);
        assert_eq!(p.max_us, vec![7525, 7519]);
        assert!(parse("000003 1\n").is_err(), "bins must start at 0");
    }
}
