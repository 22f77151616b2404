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

/// One latency spike: one of the thread's worst.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Spike {
    pub(crate) cycle: u64,
    /// Seconds since the test started.
    pub(crate) at_s: f64,
    /// Wake time, CLOCK_MONOTONIC ns (the trace's clock).
    pub(crate) wake_ns: u64,
    pub(crate) latency_ns: u64,
    pub(crate) involuntary_switches: u64,
    pub(crate) page_faults: u64,
    /// With `--trace`: what took the time between the deadline and the wake, longest first (a late
    /// timer, a symptom, last); `null` when the trace did not cover the spike.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) causes: Option<Vec<CauseOut>>,
    /// With `--trace` but no trace: the interrupts and softirqs counted on the CPU around the spike.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) suspects: Vec<SuspectOut>,
    /// With `--trace-light`: explained while the wake path's events were off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) without_switches: bool,
}

/// One cause of a spike, as the JSON has it: `kind` and the fields of that kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CauseOut {
    /// `irq`, `vector`, `softirq`, `task`, `kernel-thread`, `timer-late` or `outside`.
    pub(crate) kind: &'static str,
    /// The cause in words, with its duration.
    pub(crate) text: String,
    /// Time it took inside the spike (for `timer-late`, how late the expiry ran).
    pub(crate) dur_ns: u64,
    /// Separate intervals summed.
    pub(crate) count: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) irq: Option<u32>,
    /// IRQ handler or system vector name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// Softirq vector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) vector: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) comm: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pid: Option<u32>,
    /// The kernel's prio (0..=98 real time, 100..=139 normal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prio: Option<i32>,
    /// Work functions a kworker ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) work: Option<Vec<String>>,
    /// The late timer's callback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) function: Option<String>,
}

impl CauseOut {
    pub(crate) fn new(c: &crate::trace::Cause) -> CauseOut {
        use crate::trace::CauseKind as K;
        let mut out = CauseOut {
            kind: super::explain::kind_name(&c.kind),
            text: c.to_string(),
            dur_ns: c.dur_ns,
            count: c.count,
            irq: None,
            name: None,
            vector: None,
            comm: None,
            pid: None,
            prio: None,
            work: None,
            function: None,
        };
        match &c.kind {
            K::Irq { irq, name } => {
                out.irq = Some(*irq);
                out.name = Some(name.clone());
            }
            K::Vector { name } => out.name = Some(name.clone()),
            K::Softirq { vector } => out.vector = Some(vector.clone()),
            K::Task { task } | K::KernelThread { task, .. } => {
                out.comm = Some(task.comm.clone());
                out.pid = Some(task.pid);
                out.prio = Some(task.prio);
                if let K::KernelThread { work, .. } = &c.kind {
                    out.work = Some(work.clone());
                }
            }
            K::TimerLate { function } => out.function = Some(function.clone()),
            K::Outside => {}
        }
        out
    }
}

/// A counter that moved on the spike's CPU around it (no trace).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SuspectOut {
    /// `irq` or `softirq`.
    pub(crate) kind: &'static str,
    pub(crate) what: String,
    /// Counted between the samples around the spike.
    pub(crate) count: u64,
    /// What such a span counts on average over the run.
    pub(crate) usual: f64,
    /// The span of the samples, ns.
    pub(crate) span_ns: u64,
}

/// A row of a thread's causes table: one cause over the whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CauseTally {
    pub(crate) cause: String,
    pub(crate) kind: &'static str,
    /// Spikes it took part in.
    pub(crate) count: u64,
    /// Spikes where it was the longest cause.
    pub(crate) main: u64,
    pub(crate) worst_ns: u64,
    pub(crate) total_ns: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) pids: Vec<u32>,
    pub(crate) fix: Option<String>,
}

/// How `--trace` explained the spikes (the report's `trace` object).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TraceInfo {
    /// `trace` (tracefs events), `counters` (/proc deltas: no tracefs or no privileges).
    pub(crate) method: &'static str,
    /// Why there is no trace, when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) no_trace_reason: Option<String>,
    /// A period this late or later is a spike, ns.
    pub(crate) threshold_ns: u64,
    /// Events the kernel dropped because the reader fell behind (causes of spikes then may be missing).
    pub(crate) lost_events: u64,
    /// Trace text read, bytes.
    pub(crate) bytes_read: u64,
    /// Trace events this kernel does not have (their causes stay unnamed).
    pub(crate) missing_events: Vec<&'static str>,
    /// The kernel command line that isolates the RT CPUs (the fixes that say "isolate" mean it).
    pub(crate) isolation_boot_line: String,
    /// With `--trace-light`: when the wake path's events were on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) light: Option<LightOut>,
}

/// `--trace-light` in the JSON: the wake path's events (switches, wakeups, timer expiries) are off
/// until a spike is read and stay on until `hold_ns` passes without one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LightOut {
    pub(crate) hold_ns: u64,
    /// Times they were turned on.
    pub(crate) sched_turned_on: u64,
    /// Time they were on, ns, of `traced_ns`.
    pub(crate) sched_on_ns: u64,
    pub(crate) traced_ns: u64,
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
    /// Spikes recorded over the run (periods at or over the spike threshold, or that missed periods).
    pub(crate) spikes_total: u64,
    /// Spikes the follower read (all of them unless it fell behind by more than the segment's ring).
    pub(crate) spikes_seen: u64,
    /// Spikes gone from the segment's ring of the latest before they were read (counted, not
    /// explained): `spikes_seen + spikes_lost = spikes_total`.
    pub(crate) spikes_lost: u64,
    /// With `--trace`: spikes read but not covered by the trace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) spikes_untraced: Option<u64>,
    /// With `--trace-light`: spikes explained while the wake path's events were off (no switches,
    /// wakeups, timer expiries or priorities in their causes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) spikes_without_switches: Option<u64>,
    /// The worst spikes (up to 32), worst first.
    pub(crate) spikes: Vec<Spike>,
    /// With `--trace`: every cause over the whole run, most time first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) causes: Option<Vec<CauseTally>>,
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
            io: None,
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
    /// With `--trace`: how the spikes were explained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trace: Option<TraceInfo>,
    /// Loads that stopped before the run ended (exit status, error, stress-ng's last stderr lines).
    pub(crate) load_failures: Vec<LoadFailure>,
    /// With `--board`: the card's round trips, counts and verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) board: Option<super::board::BoardResult>,
    pub(crate) verdict: Verdict,
}

impl Report {
    /// With `--trace`: per thread, the causes table over the whole run (with the fixes), then its
    /// worst spikes and what made each late.
    fn render_causes(&self, s: &mut String) {
        let Some(tr) = &self.trace else {
            return;
        };
        let us = |ns: u64| crate::rt::units::us(ns as f64);
        let how = match (tr.method, &tr.light) {
            ("trace", Some(l)) => format!(
                "explained from the kernel trace (--trace-light: the full trace on {} time{}, {:.1} s of {:.1} s)",
                l.sched_turned_on,
                if l.sched_turned_on == 1 { "" } else { "s" },
                l.sched_on_ns as f64 / 1e9,
                l.traced_ns as f64 / 1e9
            ),
            ("trace", None) => "explained from the kernel trace".to_string(),
            _ => format!(
                "NOT traced ({}): the interrupt and softirq counters of the CPU around each spike are shown instead",
                tr.no_trace_reason.as_deref().unwrap_or("no trace")
            ),
        };
        for t in &self.threads {
            let Some(causes) = &t.causes else {
                continue;
            };
            let _ = writeln!(
                s,
                "\nSpike causes, {} thread (CPU {}): {} spike{} at or over {} us, {}",
                t.name,
                t.cpu.map_or("-".into(), |c| c.to_string()),
                t.spikes_total,
                if t.spikes_total == 1 { "" } else { "s" },
                us(tr.threshold_ns),
                how
            );
            if t.spikes_seen < t.spikes_total {
                let _ = writeln!(
                    s,
                    "  ({} spikes came faster than they could be read and are not counted below)",
                    t.spikes_total - t.spikes_seen
                );
            }
            if let Some(n) = t.spikes_untraced.filter(|n| *n > 0) {
                let _ = writeln!(s, "  ({n} spikes were not covered by the trace)");
            }
            if let Some(n) = t.spikes_without_switches.filter(|n| *n > 0) {
                let _ = writeln!(
                    s,
                    "  ({n} spikes came while --trace-light had the wake path's events off: named from interrupts, softirqs, IPIs and work items, tasks without priorities; the rest shows as time outside the kernel)"
                );
            }
            if causes.is_empty() {
                continue;
            }
            let _ = writeln!(
                s,
                "  {:>6} {:>5} {:>10} {:>10}  cause",
                "spikes", "main", "worst us", "total us"
            );
            // The late timer (a symptom) is sorted last; the table keeps the first rows.
            const ROWS: usize = 12;
            for c in causes.iter().take(ROWS) {
                let (worst, total) = if tr.method == "trace" {
                    (us(c.worst_ns), us(c.total_ns))
                } else {
                    ("-".to_string(), "-".to_string())
                };
                let _ = writeln!(
                    s,
                    "  {:>6} {:>5} {:>10} {:>10}  {}",
                    c.count, c.main, worst, total, c.cause
                );
                if let Some(fix) = &c.fix {
                    let _ = writeln!(s, "  {:>35}  fix: {fix}", "");
                }
            }
            if causes.len() > ROWS {
                let rest = &causes[ROWS..];
                let _ = writeln!(
                    s,
                    "  … and {} more (causes {} us in all{}; every one is in the JSON)",
                    rest.len(),
                    us(rest
                        .iter()
                        .filter(|c| c.kind != "timer-late")
                        .map(|c| c.total_ns)
                        .sum()),
                    if rest.iter().any(|c| c.kind == "timer-late") {
                        ", and the late-timer symptom"
                    } else {
                        ""
                    }
                );
            }
            if causes.iter().take(ROWS).any(|c| {
                c.fix
                    .as_deref()
                    .is_some_and(|f| f.contains("boot line below"))
            }) {
                let _ = writeln!(
                    s,
                    "  boot line that isolates the RT CPU: add `{}` to the kernel command line (GRUB_CMDLINE_LINUX), update-grub, reboot",
                    tr.isolation_boot_line
                );
            }
            let shown: Vec<&Spike> = t.spikes.iter().take(8).collect();
            if shown.is_empty() {
                continue;
            }
            let _ = writeln!(s, "  worst spikes:");
            for sp in shown {
                let what = match (&sp.causes, sp.suspects.is_empty()) {
                    (Some(cs), _) if !cs.is_empty() => cs
                        .iter()
                        .take(3)
                        .map(|c| c.text.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                    (_, false) => sp
                        .suspects
                        .iter()
                        .take(3)
                        .map(|x| format!("{} ×{} (usual {:.1})", x.what, x.count, x.usual))
                        .collect::<Vec<_>>()
                        .join("; "),
                    (Some(_), true) => "(nothing in the trace)".into(),
                    (None, true) if tr.method == "trace" => "(not covered by the trace)".into(),
                    (None, true) => "(no counter moved)".into(),
                };
                let _ = writeln!(
                    s,
                    "    at {:>7.2} s {:>9} us late: {what}",
                    sp.at_s,
                    us(sp.latency_ns)
                );
            }
        }
    }

    /// Only the `--trace` part of [`render_text`](Self::render_text): the causes tables and worst
    /// spikes (empty without `--trace`).
    pub(crate) fn causes_text(&self) -> String {
        let mut s = String::new();
        self.render_causes(&mut s);
        s
    }

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
        if let Some(b) = &self.board {
            let _ = write!(s, "{b}");
            if let Some(servo) = self.threads.iter().find(|t| t.name == "servo") {
                let _ = writeln!(
                    s,
                    "  beside it, the servo thread's own wake latency us: p99.9 {}  max {}",
                    crate::rt::units::us(servo.latency_ns.p999 as f64),
                    crate::rt::units::us(servo.latency_ns.max as f64)
                );
            }
        }
        self.render_causes(&mut s);
        let v = &self.verdict;
        let _ = writeln!(s, "\nVERDICT: {}", v.summary);
        for p in &v.problems {
            let _ = writeln!(s, "  ! {p}");
        }
        for a in &v.advice {
            let _ = writeln!(s, "  - {a}");
        }
        if let Some(b) = &v.board {
            let _ = writeln!(s, "VERDICT (network): {}", b.summary);
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
            trace: None,
            load_failures: vec![],
            board: None,
            verdict: Verdict {
                rating: Rating::Unusable,
                summary: "unusable".into(),
                judged_thread: "base".into(),
                max_jitter_ns: 0,
                max_step_rate_hz: None,
                evidence: true,
                problems: vec![],
                advice: vec![],
                board: None,
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
