//! `compare-timers`: the same period through every wake-up mechanism in turn, on the real runtime —
//! the seeds' experiments (lost itimer ticks, relative sleeps that drift, select() outliers) reproduced
//! on today's kernel in one command. After them, the CPU-clock timers ([`super::cpu_clock`]), which
//! are no wake mechanism at all: their rows say what they count instead.

use super::cpu_clock::CpuClockSection;
use super::report::LatencySummary;
use crate::render::{Align, Table};
use crate::rt::clock::{self, Nanos};
use crate::rt::units::us;
use crate::rt::wake::{TimerKind, WakeMode};
use crate::runtime::{Runtime, RuntimeOptions, ThreadSpec};
use serde::Serialize;
use std::fmt::Write;
use std::time::Duration;

/// One mechanism: a timer driver and a wake mode.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Mechanism {
    pub(crate) timer: TimerKind,
    pub(crate) wake: WakeMode,
}

impl Mechanism {
    pub(crate) fn label(&self) -> String {
        match self.wake {
            WakeMode::Sleep => self.timer.to_string(),
            wake => format!("{} ({wake})", self.timer),
        }
    }
}

/// The machine-grade drivers, hybrid wake, then the comparison-only mechanisms.
pub(crate) fn all_mechanisms() -> Vec<Mechanism> {
    let sleep = |timer| Mechanism {
        timer,
        wake: WakeMode::Sleep,
    };
    vec![
        sleep(TimerKind::Nanosleep),
        sleep(TimerKind::PosixTimer),
        sleep(TimerKind::Timerfd),
        Mechanism {
            timer: TimerKind::Nanosleep,
            wake: WakeMode::Hybrid { margin: None },
        },
        sleep(TimerKind::RelativeNanosleep),
        sleep(TimerKind::Select),
        sleep(TimerKind::Itimer),
    ]
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) mechanism: String,
    pub(crate) comparison_only: bool,
    /// Periods that fell due between the first deadline and the end of the run.
    pub(crate) periods_expected: u64,
    /// Periods the thread woke for.
    pub(crate) periods_got: u64,
    /// Periods it woke too late for, and skipped.
    pub(crate) overruns: u64,
    pub(crate) drift_ns: i64,
    pub(crate) max_jitter_ns: u64,
    pub(crate) latency_ns: LatencySummary,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison {
    pub(crate) tool: &'static str,
    pub(crate) period_ns: u64,
    pub(crate) duration_s: f64,
    pub(crate) flavor: String,
    pub(crate) rows: Vec<Row>,
    /// The CPU-clock timers (`--cpu-clock-periods`), absent with `--cpu-clock-duration 0`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_clock: Option<CpuClockSection>,
}

/// The CPU-clock section's settings: its periods and how long each spins.
#[derive(Debug, Clone)]
pub(crate) struct CpuClockPlan {
    pub(crate) periods: Vec<Nanos>,
    pub(crate) duration: Duration,
}

/// Runs each mechanism for `duration` at `period`, one after the other, on the RT CPU; then, with a
/// plan, the CPU-clock timers for a spinning SCHED_OTHER thread.
pub(crate) fn run(
    period: Nanos,
    duration: Duration,
    cpu_clock: Option<&CpuClockPlan>,
    flavor: Option<String>,
    instance: &str,
) -> Result<Comparison, super::Error> {
    // itimer's SIGALRM is process-directed: it must be blocked in every thread but the one waiting
    // for it, which is only possible when the mask is set before any thread exists.
    crate::rt::wake::block_sigalrm().map_err(super::Error::Setup)?;
    let mut rows = Vec::new();
    let mut flavor_name = String::new();
    for m in all_mechanisms() {
        let mut rt = Runtime::configure(RuntimeOptions {
            instance: instance.to_string(),
            flavor: flavor.clone(),
            ..RuntimeOptions::default()
        })?;
        rt.allow_comparison_timers();
        // 20 ms of 1 µs bins: drifting mechanisms go far past the default 1 ms range.
        rt.histogram(rtapi_hal::HistogramConfig {
            bin_ns: 1000,
            bins: 20_000,
        });
        rt.thread(ThreadSpec {
            timer: m.timer,
            wake: m.wake,
            ..ThreadSpec::new("timer", period)
        })?;
        let running = rt.start()?;
        flavor_name = running.flavor().to_string();
        let first = running.origin() + period;
        running.wait(Some(duration));
        let end = clock::now();
        let summary = running.stop();
        let t = &summary.threads[0];
        let (Some(s), Some(h)) = (t.stats, t.histogram.as_ref()) else {
            return Err(super::Error::NoStatistics(m.label().to_string()));
        };
        rows.push(Row {
            mechanism: m.label(),
            comparison_only: m.timer.is_comparison_only(),
            periods_expected: ((end - first).as_nanos().max(0) / period.as_nanos()) as u64 + 1,
            periods_got: s.cycles,
            overruns: s.overruns,
            drift_ns: s.drift_ns,
            max_jitter_ns: s.jitter_max_ns,
            latency_ns: LatencySummary::new(&s, h),
        });
    }
    let cpu_clock = match cpu_clock {
        Some(plan) if !crate::rt::signals::stop_requested_if_watched() => Some(
            super::cpu_clock::measure(&plan.periods, plan.duration).map_err(super::Error::Setup)?,
        ),
        _ => None,
    };
    Ok(Comparison {
        tool: "rtapi compare-timers",
        period_ns: period.as_nanos() as u64,
        duration_s: duration.as_secs_f64(),
        flavor: flavor_name,
        rows,
        cpu_clock,
    })
}

impl Comparison {
    pub(crate) fn render_text(&self) -> String {
        let mut s = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(
            s,
            "rtapi compare-timers: period {}, {:.0} s each, flavor {}\n",
            Nanos::from_nanos(self.period_ns as i64),
            self.duration_s,
            self.flavor
        );
        let mut table = Table::new([
            ("mechanism", Align::Left),
            ("expected", Align::Right),
            ("got", Align::Right),
            ("missed", Align::Right),
            ("drift µs", Align::Right),
            ("p50 µs", Align::Right),
            ("p99 µs", Align::Right),
            ("max µs", Align::Right),
        ]);
        for r in &self.rows {
            let l = &r.latency_ns;
            table.row(vec![
                format!(
                    "{}{}",
                    r.mechanism,
                    if r.comparison_only { " *" } else { "" }
                ),
                r.periods_expected.to_string(),
                r.periods_got.to_string(),
                r.overruns.to_string(),
                us(r.drift_ns as f64),
                us(l.p50 as f64),
                us(l.p99 as f64),
                us(l.max as f64),
            ]);
        }
        let _ = write!(s, "{table}");
        let _ = writeln!(
            s,
            "\n* for comparison only, never for running a machine. Latency is measured against the absolute\n  timeline start + k·period; drift is the smallest latency of the last 8 periods."
        );
        if let Some(c) = &self.cpu_clock {
            s.push_str(&c.render_text());
        }
        s
    }
}
