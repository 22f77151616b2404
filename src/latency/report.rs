//! The latency-test report: the JSON document of the CLI contract and the final text table.

use super::load::LoadFailure;
use super::verdict::Verdict;
use crate::detect::SystemReport;
use crate::render::{Col, Latency, Percentiles, ThreadRow};
use rtapi_hal::{HistogramSnapshot, ThreadStatsSnapshot};
use serde::Serialize;
use std::fmt::Write;

/// Latency distribution of one thread, in ns. Percentiles come from the 1 µs histogram (upper bin edge),
/// so they are exact to the bin width; min, max and mean are exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct LatencySummary {
    pub(crate) min: u64,
    pub(crate) mean: f64,
    pub(crate) stddev: f64,
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) p999: u64,
    pub(crate) max: u64,
}

impl LatencySummary {
    /// From a thread's final statistics and histogram: exact min/mean/stddev/max, percentiles from
    /// the bins clamped to the observed range.
    pub(crate) fn new(
        stats: &ThreadStatsSnapshot,
        histogram: &HistogramSnapshot,
    ) -> LatencySummary {
        let (min, max) = (
            stats.latency_min().unwrap_or(0),
            stats.latency_max().unwrap_or(0),
        );
        let pct = |q| {
            histogram
                .percentile(q)
                .map_or(0, |p| p.clamp_ns(min, max).max(0) as u64)
        };
        LatencySummary {
            min: min.max(0) as u64,
            mean: stats.latency_mean().unwrap_or(0.0),
            stddev: stats.latency_stddev().unwrap_or(0.0),
            p50: pct(0.5),
            p99: pct(0.99),
            p999: pct(0.999),
            max: max.max(0) as u64,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct ExecSummary {
    pub(crate) mean: f64,
    pub(crate) max: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct HistogramOut {
    pub(crate) bin_ns: u64,
    pub(crate) counts: Vec<u64>,
    /// Samples at or above `bin_ns × counts.len()`.
    pub(crate) overflow: u64,
}

/// One latency spike from the thread's spike ring.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Spike {
    /// Wake time, CLOCK_MONOTONIC ns (the trace window; lets a caller match a spike to events it
    /// timed itself with `clock_gettime(CLOCK_MONOTONIC)`).
    pub(crate) wake_ns: u64,
    /// With `--trace`: what took the time between the deadline and the wake, longest first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) causes: Option<Vec<String>>,
    pub(crate) cycle: u64,
    /// Seconds since the test started.
    pub(crate) at_s: f64,
    pub(crate) latency_ns: u64,
    pub(crate) involuntary_switches: u64,
    pub(crate) page_faults: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct ThreadResult {
    pub(crate) name: String,
    pub(crate) period_ns: u64,
    pub(crate) cpu: Option<usize>,
    pub(crate) priority: i32,
    /// Periods in which the thread woke and ran.
    pub(crate) cycles: u64,
    /// Periods missed entirely (the thread woke too late for them and skipped them).
    pub(crate) overruns: u64,
    /// LinuxCNC's "max jitter": the largest |interval − period|.
    pub(crate) max_jitter_ns: u64,
    /// Last wake time minus its ideal time on the absolute timeline.
    pub(crate) drift_ns: i64,
    pub(crate) latency_ns: LatencySummary,
    pub(crate) exec_ns: ExecSummary,
    pub(crate) histogram: HistogramOut,
    /// The worst latency in each second of the run (index = second).
    pub(crate) max_latency_per_second_ns: Vec<u64>,
    pub(crate) spikes: Vec<Spike>,
}

impl ThreadResult {
    /// The figures of the final table (`-` for latencies when no period was run).
    pub(crate) fn row(&self) -> ThreadRow {
        let l = &self.latency_ns;
        let ran = self.cycles > 0;
        ThreadRow {
            name: self.name.clone(),
            period_ns: self.period_ns,
            cpu: self.cpu,
            priority: Some(self.priority),
            cycles: self.cycles,
            overruns: self.overruns,
            latency: ran.then_some(Latency {
                min: l.min as i64,
                mean: l.mean,
                stddev: l.stddev,
                max: l.max as i64,
            }),
            percentiles: ran.then_some(Percentiles {
                p50: l.p50 as i64,
                p99: l.p99 as i64,
                p999: l.p999 as i64,
            }),
            jitter_max_ns: self.max_jitter_ns,
            exec_mean_ns: ran.then_some(self.exec_ns.mean),
            exec_max_ns: self.exec_ns.max,
            drift_ns: self.drift_ns,
        }
    }
}

/// The final table's columns.
const REPORT_COLS: [Col; 14] = [
    Col::Name,
    Col::Period,
    Col::Cycles,
    Col::LatMin,
    Col::LatMean,
    Col::LatStddev,
    Col::P50,
    Col::P99,
    Col::P999,
    Col::LatMax,
    Col::Jitter,
    Col::Overruns,
    Col::Drift,
    Col::ExecMax,
];

#[derive(Debug, Clone, Serialize)]
pub(crate) struct SystemSummary {
    pub(crate) kernel: String,
    pub(crate) kernel_version: String,
    pub(crate) preempt_rt: Option<bool>,
    pub(crate) preemption: Option<&'static str>,
    pub(crate) flavor: String,
    pub(crate) virtualized: Option<bool>,
    pub(crate) rt_cpu: Option<usize>,
    pub(crate) isolated_cpus: Vec<usize>,
    pub(crate) rt_throttled: Option<bool>,
}

impl SystemSummary {
    pub(crate) fn new(r: &SystemReport, flavor: &str) -> SystemSummary {
        SystemSummary {
            kernel: r.kernel.release.clone().unwrap_or_else(|| "unknown".into()),
            kernel_version: r.kernel.version.clone().unwrap_or_else(|| "unknown".into()),
            preempt_rt: r.kernel.preempt_rt,
            preemption: r.kernel.preemption.map(|p| p.name()),
            flavor: flavor.to_string(),
            virtualized: r.virtualized,
            rt_cpu: r.cpus.rt_cpu,
            isolated_cpus: r.cpus.isolated.clone(),
            rt_throttled: r.throttling.throttled,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Settings {
    pub(crate) duration_s: f64,
    pub(crate) timer: String,
    pub(crate) wake: String,
    pub(crate) load: Vec<String>,
    /// The run ended early (Ctrl-C / SIGTERM) after this many seconds.
    pub(crate) interrupted: bool,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) tool: &'static str,
    pub(crate) version: &'static str,
    pub(crate) system: SystemSummary,
    pub(crate) settings: Settings,
    pub(crate) threads: Vec<ThreadResult>,
    /// Loads that stopped before the run ended (exit status, error, stress-ng's last stderr lines).
    pub(crate) load_failures: Vec<LoadFailure>,
    pub(crate) verdict: Verdict,
}

impl Report {
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report holds only plain data")
    }

    /// The final table: one row per thread, then the system line and the verdict.
    pub(crate) fn render_text(&self) -> String {
        let mut s = String::new();
        let sys = &self.system;
        // Writing to a String cannot fail.
        let _ = writeln!(
            s,
            "rtapi latency-test: {:.0} s, timer {}, wake {}, load {}{}",
            self.settings.duration_s,
            self.settings.timer,
            self.settings.wake,
            if self.settings.load.is_empty() {
                "none".to_string()
            } else {
                self.settings.load.join(",")
            },
            if self.settings.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            s,
            "system: kernel {} ({}), PREEMPT_RT {}, flavor {}, {}RT CPU {}",
            sys.kernel,
            sys.preemption.unwrap_or("preemption unknown"),
            match sys.preempt_rt {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            },
            sys.flavor,
            if sys.virtualized == Some(true) {
                "virtual machine, "
            } else {
                ""
            },
            sys.rt_cpu.map_or("-".into(), |c| c.to_string())
        );
        let mut table = ThreadRow::short_table(&REPORT_COLS);
        for t in &self.threads {
            table.row(t.row().cells(&REPORT_COLS));
        }
        let _ = write!(s, "\nall times in µs\n{table}");
        for f in &self.load_failures {
            let _ = writeln!(
                s,
                "\nLOAD FAILED: {} (seen at {:.1} s): {}",
                f.load, f.at_s, f.what
            );
            for l in f.stderr_tail.iter().flat_map(|t| t.lines()) {
                let _ = writeln!(s, "  stderr: {l}");
            }
        }
        let traced: Vec<(&str, &Spike)> = self
            .threads
            .iter()
            .flat_map(|t| t.spikes.iter().map(move |sp| (t.name.as_str(), sp)))
            .filter(|(_, sp)| sp.causes.is_some())
            .collect();
        if !traced.is_empty() {
            let _ = writeln!(s, "\nWorst spikes and their causes (traced):");
            for (thread, sp) in traced {
                let causes = sp.causes.as_deref().unwrap_or_default();
                let _ = writeln!(
                    s,
                    "  {thread:<6} at {:>7.2} s  {:>9} us late: {}",
                    sp.at_s,
                    crate::rt::units::us(sp.latency_ns as f64),
                    if causes.is_empty() {
                        "(no cause in the trace)".to_string()
                    } else {
                        causes
                            .iter()
                            .take(3)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("; ")
                    }
                );
            }
        }
        let v = &self.verdict;
        let _ = writeln!(s, "\nVERDICT: {}", v.summary);
        for p in &v.problems {
            let _ = writeln!(s, "  ! {p}");
        }
        for a in &v.advice {
            let _ = writeln!(s, "  - {a}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::verdict::Rating;

    fn report(threads: Vec<ThreadResult>) -> Report {
        Report {
            tool: "rtapi latency-test",
            version: "test",
            system: SystemSummary {
                kernel: "k".into(),
                kernel_version: "v".into(),
                preempt_rt: Some(false),
                preemption: None,
                flavor: "posix".into(),
                virtualized: Some(true),
                rt_cpu: Some(1),
                isolated_cpus: vec![],
                rt_throttled: None,
            },
            settings: Settings {
                duration_s: 60.0,
                timer: "nanosleep".into(),
                wake: "sleep".into(),
                load: vec![],
                interrupted: false,
            },
            threads,
            load_failures: vec![],
            verdict: Verdict {
                rating: Rating::Unusable,
                summary: "unusable".into(),
                judged_thread: "base".into(),
                max_jitter_ns: 0,
                max_step_rate_hz: None,
                evidence: true,
                problems: vec![],
                advice: vec![],
            },
        }
    }

    /// The cells of a table line: what stands between runs of two spaces.
    fn fields(line: &str) -> Vec<&str> {
        line.split("  ")
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect()
    }

    /// The fixed-width table printed `40000000.040930004.3` for a 40 s latency next to a larger
    /// one; every column now stands apart, whatever the values.
    #[test]
    fn huge_values_keep_their_columns_apart() {
        let s = 40_000_000_000u64;
        let huge = ThreadResult {
            name: "base".into(),
            period_ns: 10_000_000_000,
            cycles: 1_000_000_000_000,
            overruns: 1_000_000_000_000,
            max_jitter_ns: 40_930_004_272,
            drift_ns: -(s as i64),
            latency_ns: LatencySummary {
                min: s,
                mean: 43_030_004_409.0,
                stddev: 427_200_000_000.0,
                p50: s,
                p99: 41 * s,
                p999: 42 * s,
                max: 43 * s,
            },
            exec_ns: ExecSummary { mean: 1e9, max: s },
            ..ThreadResult::default()
        };
        let idle = ThreadResult {
            name: "servo".into(),
            period_ns: 1_000_000,
            ..ThreadResult::default()
        };
        let text = report(vec![huge, idle]).render_text();
        let line = |start: &str| {
            text.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no line {start}:\n{text}"))
        };
        let heading = fields(line("name"));
        assert_eq!(heading.len(), REPORT_COLS.len(), "{text}");
        assert_eq!(heading[3..5], ["min", "mean"]);
        let base = fields(line("base"));
        assert_eq!(
            base,
            [
                "base",
                "10s",
                "1000000000000",
                "40000000.0",
                "43030004.4",
                "427200000.0",
                "40000000.0",
                "1640000000.0",
                "1680000000.0",
                "1720000000.0",
                "40930004.3",
                "1000000000000",
                "-40000000.0",
                "40000000.0"
            ],
            "{text}"
        );
        // No period run: dashes for the latencies, not zeros; still one cell per column.
        let servo = fields(line("servo"));
        assert_eq!(servo.len(), REPORT_COLS.len(), "{text}");
        assert_eq!(servo[..5], ["servo", "1ms", "0", "-", "-"]);
    }
}
