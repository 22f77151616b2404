//! Running a latency test: the real runtime with empty base and servo threads, load after warm-up, a
//! live display each second, and the final [`Report`].

use super::load::{self, Load, LoadFailure, LoadKind};
use super::monitor::{self, Monitor};
use super::report::{
    ExecSummary, HistogramOut, LatencySummary, Report, Settings, Spike, SystemSummary, ThreadResult,
};
use super::verdict::{self, Trust};
use crate::detect::Severity;
use crate::rt::clock::Nanos;
use crate::rt::wake::{TimerKind, WakeMode};
use crate::runtime::{Runtime, RuntimeOptions, StopReason, Summary, ThreadSpec, ThreadSummary};
use rtapi_hal::HistogramConfig;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// What to run (the `latency-test` flags).
#[derive(Debug, Clone)]
pub(crate) struct TestConfig {
    /// Base thread period; zero = servo only.
    pub(crate) base: Nanos,
    pub(crate) servo: Nanos,
    pub(crate) duration: Duration,
    /// CPUs: one for both threads, or `[base, servo]`.
    pub(crate) cpus: Vec<usize>,
    pub(crate) timer: TimerKind,
    pub(crate) wake: WakeMode,
    pub(crate) flavor: Option<String>,
    pub(crate) load: Vec<LoadKind>,
    pub(crate) instance: String,
    pub(crate) dma_latency: bool,
    /// Print nothing live (only the final report).
    pub(crate) quiet: bool,
    /// Live lines go to standard error (standard output carries a JSON document).
    pub(crate) live_to_stderr: bool,
    /// Histogram range in 1 µs bins.
    pub(crate) histogram_bins: usize,
    /// Trace the RT CPUs and attribute each kept spike to its causes (`--trace`).
    pub(crate) trace: bool,
}

impl Default for TestConfig {
    fn default() -> Self {
        TestConfig {
            base: Nanos::from_micros(25),
            servo: Nanos::from_millis(1),
            duration: Duration::from_secs(60),
            cpus: Vec::new(),
            timer: TimerKind::Nanosleep,
            wake: WakeMode::Sleep,
            flavor: None,
            load: Vec::new(),
            instance: rtapi_hal::DEFAULT_INSTANCE.to_string(),
            dma_latency: true,
            quiet: false,
            live_to_stderr: false,
            histogram_bins: 10_000,
            trace: false,
        }
    }
}

/// Time the threads run before the load starts, so the first numbers show the quiet machine.
fn warm_up(duration: Duration) -> Duration {
    (duration / 10).min(Duration::from_secs(2))
}

/// Runs the test to its end (duration or Ctrl-C) and reports. A load that cannot start at all
/// (stress-ng missing or refusing its arguments, no private directory for io) is a configuration error
/// before anything runs.
pub(crate) fn run(cfg: &TestConfig) -> Result<Report, super::Error> {
    load::preflight(&cfg.load).map_err(super::Error::Load)?;
    let mut rt = Runtime::configure(RuntimeOptions {
        instance: cfg.instance.clone(),
        flavor: cfg.flavor.clone(),
        lock_memory: true,
        dma_latency: cfg.dma_latency,
        ..RuntimeOptions::default()
    })?;
    rt.histogram(HistogramConfig {
        bin_ns: 1000,
        bins: cfg.histogram_bins,
    });
    let cpu = |i: usize| cfg.cpus.get(i).or(cfg.cpus.first()).copied();
    let mut names = Vec::new();
    if cfg.base.is_positive() {
        rt.thread(ThreadSpec {
            cpu: cpu(0),
            timer: cfg.timer,
            wake: cfg.wake,
            ..ThreadSpec::new("base", cfg.base)
        })?;
        names.push("base".to_string());
    }
    rt.thread(ThreadSpec {
        cpu: cpu(1),
        timer: cfg.timer,
        wake: cfg.wake,
        ..ThreadSpec::new("servo", cfg.servo)
    })?;
    names.push("servo".to_string());

    // Tracing starts before the threads, so the first spikes are covered too.
    let mut tracing = cfg
        .trace
        .then(|| Tracing::start(&trace_cpus(cfg, rt.system())));
    let running = rt.start()?;
    if let Some(t) = &mut tracing {
        t.threads = running
            .threads()
            .into_iter()
            .map(|t| (t.name, t.cpu, t.tid))
            .collect();
    }
    let flavor = running.flavor();
    let system = running.system().clone();
    let reader = running.hal().reader().map_err(super::Error::Segment)?;
    let load_names: Vec<String> = cfg.load.iter().map(ToString::to_string).collect();
    let mut monitor = Monitor::new(&names);
    let tty = if cfg.live_to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    // On a terminal the table is redrawn in place and already shows overruns; the runtime's
    // once-a-second overrun warnings would tear it, so only errors are logged while it runs.
    let log_level = log::max_level();
    if tty && !cfg.quiet {
        log::set_max_level(log::LevelFilter::Error.min(log_level));
    }
    let mut drawn = 0usize;
    // The live lines' reader went away (`| head`): the run goes on, silently, to its end.
    let mut live_closed = false;
    let mut load: Option<Load> = None;
    let mut load_failures: Vec<LoadFailure> = Vec::new();
    let mut load_tried = false;
    let cpus_online = system.cpus.online.clone().unwrap_or_else(|| vec![0]);
    running.keep_caller_off_rt_cpus();

    let reason = running.wait_with(Some(cfg.duration), Duration::from_secs(1), |r| {
        if !load_tried && !cfg.load.is_empty() && r.elapsed() >= warm_up(cfg.duration) {
            load_tried = true;
            match Load::start(&cfg.load, &cpus_online, r.elapsed()) {
                Ok(l) => load = Some(l),
                Err(what) => load_failures.push(LoadFailure {
                    load: load_names.join(","),
                    at_s: r.elapsed().as_secs_f64(),
                    what,
                    stderr_tail: None,
                }),
            }
        }
        let load_failed =
            !load_failures.is_empty() || load.as_mut().is_some_and(|l| !l.poll().is_empty());
        let lines = monitor.tick(&reader);
        if cfg.quiet || live_closed {
            return;
        }
        let header = format!(
            "rtapi latency-test | flavor {flavor} | timer {} wake {} | load {} | {:.0}/{:.0} s",
            cfg.timer,
            cfg.wake,
            match (&load, load_failed) {
                (_, true) => format!("{} FAILED", load_names.join(",")),
                (Some(_), false) => load_names.join(","),
                (None, false) => "none".into(),
            },
            r.elapsed().as_secs_f64(),
            cfg.duration.as_secs_f64()
        );
        let block = monitor::render(&lines, &header);
        let mut out: Box<dyn Write> = if cfg.live_to_stderr {
            Box::new(std::io::stderr().lock())
        } else {
            Box::new(std::io::stdout().lock())
        };
        let mut text = String::new();
        if tty {
            // Redraw in place: up over the previous block, clear each line.
            if drawn > 0 {
                text.push_str(&format!("\x1b[{drawn}A"));
            }
            for l in &block {
                text.push_str(&format!("\x1b[2K{l}\n"));
            }
            drawn = block.len();
        } else {
            for l in &block[2..] {
                text.push_str(&format!("{:.0}s {l}\n", r.elapsed().as_secs_f64()));
            }
        }
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            live_closed = e.kind() == std::io::ErrorKind::BrokenPipe;
        }
    });
    // Stopping the load also removes its files; a Drop guard does the same on every other path.
    if let Some(mut l) = load.take() {
        load_failures.extend(l.stop());
    }
    // The load must run to the end of the measurement: a run shorter than the warm-up never loaded.
    if !load_tried && !cfg.load.is_empty() {
        load_failures.push(LoadFailure {
            load: load_names.join(","),
            at_s: running.elapsed().as_secs_f64(),
            what: "the run ended before the load started (it starts after the warm-up)".into(),
            stderr_tail: None,
        });
    }
    log::set_max_level(log_level);
    // The last, partial second belongs in the per-second series too.
    monitor.tick(&reader);
    let interrupted = reason == StopReason::Signal;
    let elapsed = running.elapsed();
    let per_second = monitor.max_per_interval();
    if let Some(t) = &tracing {
        t.stop();
    }
    let summary = running.stop();
    if reason == StopReason::ThreadsEnded {
        return Err(super::Error::ThreadsEnded);
    }
    let mut report = report(
        cfg,
        &system,
        flavor,
        summary,
        per_second,
        elapsed,
        interrupted,
        load_names,
        load_failures,
    );
    if let Some(t) = &tracing {
        t.explain(&mut report);
    }
    Ok(report)
}

/// `--trace`: a tracefs session on the RT CPUs for the whole run, read after it to explain the
/// spikes the segment kept. Nothing of it runs on the RT threads.
struct Tracing {
    session: Option<crate::trace::TraceSession>,
    /// When the session started (CLOCK_MONOTONIC ns): spikes before it are not explained.
    since_ns: u64,
    /// name → (CPU, kernel tid) of each RT thread.
    threads: Vec<(String, usize, Option<i32>)>,
}

/// The CPUs the threads will run on: `--cpu`, else the RT CPU detection chose.
fn trace_cpus(cfg: &TestConfig, system: &crate::detect::SystemReport) -> Vec<usize> {
    let mut cpus = if cfg.cpus.is_empty() {
        system.cpus.rt_cpu.into_iter().collect()
    } else {
        cfg.cpus.clone()
    };
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

impl Tracing {
    fn start(cpus: &[usize]) -> Tracing {
        let session =
            crate::trace::TraceSession::start(cpus, &crate::trace::TraceSession::default_name())
                .map_err(|e| log::warn!("--trace: {e}; the spikes are reported without causes"))
                .ok();
        if let Some(s) = &session {
            if !s.missing().is_empty() {
                log::warn!(
                    "--trace: this kernel lacks the events {:?}; causes they would show stay unnamed",
                    s.missing()
                );
            }
        }
        Tracing {
            session,
            since_ns: crate::rt::clock::now().as_nanos().max(0) as u64,
            threads: Vec::new(),
        }
    }

    fn stop(&self) {
        if let Some(s) = &self.session {
            let _ = s.stop();
        }
    }

    /// Each kept spike's causes, from the trace window between its deadline and its wake.
    fn explain(&self, report: &mut Report) {
        let Some(session) = &self.session else {
            return;
        };
        for t in &mut report.threads {
            let Some((_, cpu, tid)) = self.threads.iter().find(|(n, _, _)| *n == t.name) else {
                continue;
            };
            // Each spike's window: from 2 ms before its deadline (who was already running when it
            // passed) to 1 ms past the wake (attribution looks one event ahead); causes count inside
            // [deadline, wake].
            let window = |sp: &Spike| {
                let deadline = sp.wake_ns.saturating_sub(sp.latency_ns);
                (
                    deadline,
                    deadline.saturating_sub(2_000_000),
                    sp.wake_ns + 1_000_000,
                )
            };
            let traced = |sp: &&mut Spike| sp.wake_ns > self.since_ns;
            let spikes: Vec<&mut Spike> = t.spikes.iter_mut().filter(traced).collect();
            let (Some(from), Some(to)) = (
                spikes.iter().map(|sp| window(sp).1).min(),
                spikes.iter().map(|sp| window(sp).2).max(),
            ) else {
                continue;
            };
            // The per-CPU buffer is read (and parsed) once for all of this thread's spikes.
            let Ok(w) = session.read_window(*cpu, from, to) else {
                continue;
            };
            for sp in spikes {
                let (deadline, from, to) = window(sp);
                let a = w.events.partition_point(|e| e.ts_ns < from);
                let b = w.events.partition_point(|e| e.ts_ns <= to);
                let causes = crate::trace::attribute(
                    &w.events[a..b],
                    deadline,
                    sp.wake_ns,
                    tid.unwrap_or(0).max(0) as u32,
                );
                sp.causes = Some(causes.iter().map(ToString::to_string).collect());
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn report(
    cfg: &TestConfig,
    system: &crate::detect::SystemReport,
    flavor: crate::flavor::Flavor,
    summary: Summary,
    per_second: Vec<Vec<u64>>,
    elapsed: Duration,
    interrupted: bool,
    load: Vec<String>,
    load_failures: Vec<LoadFailure>,
) -> Report {
    let threads: Vec<ThreadResult> = summary
        .threads
        .iter()
        .zip(per_second)
        .map(|(t, ps)| thread_result(t, ps))
        .collect();
    let find = |name: &str| {
        threads
            .iter()
            .find(|t| t.name == name)
            .map(|t| (t.period_ns, t.max_jitter_ns))
    };
    let overruns = threads.iter().map(|t| t.overruns).sum();
    let trust = Trust {
        // The few cycles a zero-length run gets while its threads start and stop are not a
        // measurement.
        no_data: cfg
            .duration
            .is_zero()
            .then(|| "--duration 0 measures nothing".to_string())
            .into_iter()
            .chain(
                threads
                    .iter()
                    .filter(|t| t.cycles == 0)
                    .map(|t| format!("the {} thread completed no cycle", t.name)),
            )
            .collect(),
        not_real_time: (!flavor.real_time()).then(|| flavor.name().to_string()),
        load_failures: load_failures.iter().map(ToString::to_string).collect(),
    };
    let system_advice = system
        .advice()
        .into_iter()
        .filter(|f| f.severity >= Severity::Warn)
        .map(|f| match f.fix {
            Some(fix) => format!("{} — {fix}", f.message),
            None => f.message,
        })
        .collect();
    Report {
        tool: "rtapi latency-test",
        version: env!("CARGO_PKG_VERSION"),
        system: SystemSummary::new(system, flavor.name()),
        settings: Settings {
            duration_s: elapsed.as_secs_f64(),
            timer: cfg.timer.to_string(),
            wake: cfg.wake.to_string(),
            load,
            interrupted,
        },
        verdict: verdict::judge(find("base"), find("servo"), overruns, &trust, system_advice),
        threads,
        load_failures,
    }
}

fn thread_result(t: &ThreadSummary, max_latency_per_second_ns: Vec<u64>) -> ThreadResult {
    let s = t.stats;
    let h = t.histogram.clone();
    let first_wake = s.map(|s| {
        s.last_wake_ns
            .saturating_sub(s.period_ns * (s.cycles + s.overruns).saturating_sub(1))
    });
    ThreadResult {
        name: t.info.name.clone(),
        period_ns: t.info.period.as_nanos() as u64,
        cpu: Some(t.info.cpu),
        priority: t.info.priority,
        cycles: s.map_or(0, |s| s.cycles),
        overruns: s.map_or(0, |s| s.overruns),
        max_jitter_ns: s.map_or(0, |s| s.jitter_max_ns),
        drift_ns: s.map_or(0, |s| s.drift_ns),
        latency_ns: match (&s, &h) {
            (Some(s), Some(h)) => LatencySummary::new(s, h),
            _ => LatencySummary::default(),
        },
        exec_ns: ExecSummary {
            mean: s.and_then(|s| s.exec_mean()).unwrap_or(0.0),
            max: s.map_or(0, |s| s.exec_max_ns),
        },
        histogram: h.map_or_else(HistogramOut::default, |h| HistogramOut {
            bin_ns: h.bin_ns,
            // A negative latency cannot happen with these wake modes; if the clock ever says so, it
            // is counted in bin 0 so that counts + overflow still equal cycles.
            counts: {
                let mut c = h.counts;
                if let Some(first) = c.first_mut() {
                    *first += h.underflow;
                }
                c
            },
            overflow: h.overflow,
        }),
        max_latency_per_second_ns,
        spikes: s
            .map(|s| {
                s.worst_spikes()
                    .map(|sp| Spike {
                        wake_ns: sp.time_ns,
                        causes: None,
                        cycle: sp.cycle,
                        at_s: sp.time_ns.saturating_sub(first_wake.unwrap_or(0)) as f64 / 1e9,
                        latency_ns: sp.latency_ns.max(0) as u64,
                        involuntary_switches: sp.involuntary_ctx_switches,
                        page_faults: sp.page_faults,
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}
