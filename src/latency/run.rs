//! Running a latency test: the real runtime with empty base and servo threads, load after warm-up, a
//! live display each second, and the final [`Report`].

use super::board;
use super::explain::{FixContext, FollowSummary, Followed, Follower, LIGHT_HOLD};
use super::load::{self, Load, LoadFailure, LoadKind};
use super::monitor::{self, Monitor};
use super::report::{
    CauseOut, CauseTally, ExecSummary, HistogramOut, LatencySummary, LightOut, Report, Settings,
    Spike, SuspectOut, SystemSummary, ThreadResult, TraceInfo,
};
use super::verdict::{self, Trust};
use crate::detect::Severity;
use crate::rt::clock::Nanos;
use crate::rt::wake::{TimerKind, WakeMode};
use crate::runtime::{Runtime, RuntimeOptions, StopReason, Summary, ThreadSpec, ThreadSummary};
use rtapi_hal::HistogramConfig;
use std::collections::BTreeMap;
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
    /// `--trace[=THRESHOLD]`: trace the RT CPUs and explain every spike at or over the threshold.
    pub(crate) trace: Option<Nanos>,
    /// `--trace-light[=HOLD]`: the wake path's events only from a spike on, until HOLD passes
    /// without one ([`TraceSession::start_light`]).
    pub(crate) trace_light: Option<Nanos>,
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
            trace: None,
            trace_light: None,
        }
    }
}

/// Time the threads run before the load starts, so the first numbers show the quiet machine.
fn warm_up(duration: Duration) -> Duration {
    (duration / 10).min(Duration::from_secs(2))
}

/// `--board`: the card found at the address, its socket, and the round-trip budget.
pub(crate) struct BoardRun {
    pub(crate) addr: std::net::SocketAddrV4,
    pub(crate) found: board::Found,
    pub(crate) sock: std::net::UdpSocket,
    pub(crate) budget: Nanos,
}

/// The board's side of a run while it runs: what the servo thread counts into, the end's drain.
struct BoardSide {
    addr: std::net::SocketAddrV4,
    found: board::Found,
    budget: Nanos,
    drainer: board::Drainer,
    shared: std::sync::Arc<board::Shared>,
    watch: board::Watch,
}

/// Runs the test to its end (duration or Ctrl-C) and reports. A load that cannot start at all
/// (stress-ng missing or refusing its arguments, no private directory for io) is a configuration error
/// before anything runs. With `board`, the servo thread runs one read-only round trip to the card
/// each period (`board.rs`).
pub(crate) fn run(cfg: &TestConfig, board: Option<BoardRun>) -> Result<Report, super::Error> {
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
            spike_threshold: cfg.trace,
            ..ThreadSpec::new("base", cfg.base)
        })?;
        names.push("base".to_string());
    }
    rt.thread(ThreadSpec {
        cpu: cpu(1),
        timer: cfg.timer,
        wake: cfg.wake,
        spike_threshold: cfg.trace,
        ..ThreadSpec::new("servo", cfg.servo)
    })?;
    names.push("servo".to_string());
    let mut board = match board {
        Some(b) => Some(board_function(&mut rt, b, cfg.histogram_bins)?),
        None => None,
    };

    // Tracing starts before the threads, so the first spikes are covered too.
    let rt_cpus = trace_cpus(cfg, rt.system());
    let session = cfg
        .trace
        .map(|_| start_trace(&rt_cpus, cfg.trace_light.is_some()));
    // With --board, a second session follows the network path on every CPU (filtered in the
    // kernel to IRQs, NET_RX/NET_TX and ksoftirqd: `TraceSession::start_network`).
    let net_session = (cfg.trace.is_some() && board.is_some())
        .then(|| {
            let cpus = rt.system().cpus.online.clone().unwrap_or_default();
            crate::trace::TraceSession::start_network(
                &cpus,
                &format!("{}-net", crate::trace::TraceSession::default_name()),
            )
            .map_err(|e| log::warn!("--trace: the network path cannot be traced: {e}"))
            .ok()
        })
        .flatten();
    let running = rt.start()?;
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
    // What is still logged goes above the table at its next redraw, not into it.
    let held = crate::render::log::Queue::default();
    let diverted = (tty && !cfg.quiet).then(|| held.divert());
    let mut drawn = 0usize;
    // The live lines' reader went away (`| head`): the run goes on, silently, to its end.
    let mut live_closed = false;
    let mut load: Option<Load> = None;
    let mut load_failures: Vec<LoadFailure> = Vec::new();
    let mut load_tried = false;
    let cpus_online = system.cpus.online.clone().unwrap_or_else(|| vec![0]);
    running.keep_caller_off_rt_cpus();
    // The follower reads every spike from the segment and explains it while the trace holds it; it
    // runs off the RT CPUs (it inherits the affinity just set).
    let follower = {
        let (session, no_trace) = match session {
            Some(Ok(s)) => (Some(s), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        let counters = cfg.trace.is_some() && session.is_none();
        let followed: Vec<Followed> = running.threads().iter().map(Followed::new).collect();
        let reader = running.hal().reader().map_err(super::Error::Segment)?;
        Follower::spawn(
            reader,
            Box::new(move || followed.clone()),
            session,
            cfg.trace_light.map_or(LIGHT_HOLD, |h| {
                std::time::Duration::from_nanos(h.as_nanos().max(0) as u64)
            }),
            counters,
            no_trace,
            FixContext {
                own_threads: running
                    .threads()
                    .into_iter()
                    .filter_map(|t| Some((u32::try_from(t.tid?).ok()?, t.name)))
                    .collect(),
                ..fix_context(&system, &rt_cpus)
            },
        )
        .map_err(|e| {
            super::Error::Setup(crate::rt::SysError::new(
                "spawning the spike follower",
                nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EAGAIN)),
            ))
        })?
    };

    let reason = running.wait_with(Some(cfg.duration), Duration::from_secs(1), |r| {
        if !load_tried && !cfg.load.is_empty() && r.elapsed() >= warm_up(cfg.duration) {
            load_tried = true;
            match Load::start(&cfg.load, &cpus_online, r.elapsed()) {
                Ok(l) => load = Some(l),
                Err(e) => load_failures.push(LoadFailure {
                    load: load_names.join(","),
                    at_s: r.elapsed().as_secs_f64(),
                    what: e.to_string(),
                    stderr_tail: None,
                }),
            }
        }
        let load_failed =
            !load_failures.is_empty() || load.as_mut().is_some_and(|l| !l.poll().is_empty());
        let lines = monitor.tick(&reader);
        let board_line = board.as_mut().map(|b| b.watch.tick(&b.shared));
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
        let mut block = monitor::render(&lines, &header);
        block.extend(board_line);
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
            for l in held.take() {
                text.push_str(&format!("\x1b[2K{l}\n"));
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
    // Lines logged after the last redraw.
    drop(diverted);
    for l in held.take() {
        let _ = writeln!(std::io::stderr().lock(), "{l}");
    }
    // The last, partial second belongs in the per-second series too.
    monitor.tick(&reader);
    if let Some(b) = board.as_mut() {
        b.watch.tick(&b.shared);
    }
    let interrupted = reason == StopReason::Signal;
    let elapsed = running.elapsed();
    let per_second = monitor.max_per_interval();
    // The measuring threads' ids, for `--trace --board` (their own softirq work is the
    // request's path, not a cause).
    let own: Vec<u32> = running
        .threads()
        .iter()
        .filter_map(|t| u32::try_from(t.tid?).ok())
        .collect();
    let summary = running.stop();
    // The servo thread is stopped: the last late replies get their grace, the rest are lost.
    let board = board.map(|b| {
        let per_second = b.watch.max_per_second();
        b.drainer.finish();
        let io = summary
            .threads
            .iter()
            .find(|t| t.info.name == "servo")
            .and_then(|t| t.stats.as_ref()?.io.as_ref().map(board::IoRecorded::of));
        let mut r = board::result(
            b.addr, &b.found, &b.shared, cfg.servo, b.budget, per_second, io,
        );
        if let Some(net) = &net_session {
            let _ = net.stop();
            let (misses, total) = b.shared.misses();
            r.network_causes = Some(board::explain_misses(net, &misses, total, &own));
        }
        r
    });
    // After the threads stopped: the follower reads the last spikes too (its reader keeps the
    // segment mapped).
    let followed = follower.finish();
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
    apply_follow(&mut report, followed, cfg.trace);
    if let Some(b) = board {
        report.verdict.board = Some(b.verdict.clone());
        report.board = Some(b);
    }
    Ok(report)
}

/// The board's round trip as a function of the servo thread (`board.round-trip`), before the
/// runtime starts: the prober is made (and allocated) here and moved onto the thread.
fn board_function(
    rt: &mut Runtime<crate::runtime::Configuring>,
    b: BoardRun,
    bins: usize,
) -> Result<BoardSide, super::Error> {
    let (prober, drainer, shared) =
        board::Prober::new(b.sock, &b.found, b.budget, bins).map_err(|e| {
            super::Error::Setup(crate::rt::SysError::new(
                "duplicating the board's socket",
                nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EMFILE)),
            ))
        })?;
    let comp = rt
        .hal()
        .component("board")
        .map_err(crate::runtime::RuntimeError::from)?;
    rt.function(
        comp,
        "board.round-trip",
        Box::new(move |_hal| {
            let mut prober = prober;
            Box::new(move |_cycle| prober.period())
        }),
    )?;
    rt.addf("board.round-trip", "servo", None)?;
    Ok(BoardSide {
        addr: b.addr,
        found: b.found,
        budget: b.budget,
        drainer,
        shared,
        watch: board::Watch::default(),
    })
}

/// `--trace` for threads that another part of rtapi starts while it runs (the LinuxCNC master's
/// hosted threads): a trace session on the RT CPUs made before the first thread, the follower
/// learning of each thread as it starts, and at the end the causes as latency-test prints them.
/// The threads must keep their spikes in the segment (`HostedOptions::spike_threshold`).
pub(crate) struct SpikeWatch {
    follower: Follower,
    threshold: Nanos,
    system: crate::detect::SystemReport,
    /// The trace instances' directories, removed on a crash.
    traced: Vec<String>,
}

impl SpikeWatch {
    /// Starts tracing `cpus` (as root; otherwise the interrupt counters around each spike are
    /// kept instead, and the reason is given at the end) and following the threads `threads`
    /// names in `reader`'s segment.
    pub(crate) fn start(
        threshold: Nanos,
        system: &crate::detect::SystemReport,
        cpus: &[usize],
        reader: rtapi_hal::HalReader,
        threads: Box<dyn FnMut() -> Vec<Followed> + Send>,
    ) -> std::io::Result<SpikeWatch> {
        let (session, no_trace) = match start_trace(cpus, false) {
            Ok(s) => (Some(s), None),
            Err(why) => (None, Some(why)),
        };
        // All of the session's instances.
        let traced: Vec<String> = session.as_ref().map_or(Vec::new(), |s| {
            s.parts()
                .iter()
                .map(|p| p.dir().to_string_lossy().into_owned())
                .collect()
        });
        for dir in &traced {
            crate::runtime::crash::remove_on_crash(dir);
        }
        let counters = session.is_none();
        let follower = Follower::spawn(
            reader,
            threads,
            session,
            LIGHT_HOLD,
            counters,
            no_trace,
            fix_context(system, cpus),
        )?;
        Ok(SpikeWatch {
            follower,
            threshold,
            system: system.clone(),
            traced,
        })
    }

    /// Reads the last spikes (call after the threads stopped: `summary` is the run's) and returns
    /// the causes text, one section per thread that had spikes.
    pub(crate) fn finish(self, summary: &Summary) -> String {
        let followed = self.follower.finish();
        for dir in &self.traced {
            crate::runtime::crash::forget_path(dir);
        }
        let cfg = TestConfig {
            duration: summary.run_time,
            trace: Some(self.threshold),
            ..TestConfig::default()
        };
        let mut r = report(
            &cfg,
            &self.system,
            summary.flavor,
            summary.clone(),
            vec![Vec::new(); summary.threads.len()],
            summary.run_time,
            false,
            Vec::new(),
            Vec::new(),
        );
        apply_follow(&mut r, followed, Some(self.threshold));
        r.causes_text()
    }
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

/// `--trace`: a tracefs session on the RT CPUs for the whole run, or why there is none.
fn start_trace(cpus: &[usize], light: bool) -> Result<crate::trace::TraceSession, String> {
    let name = crate::trace::TraceSession::default_name();
    let s = if light {
        crate::trace::TraceSession::start_light(cpus, &name)
    } else {
        crate::trace::TraceSession::start(cpus, &name)
    };
    let s = s.map_err(|e| {
        log::warn!(
            "--trace: {e}; each spike gets the interrupt counters around it instead of causes"
        );
        e.to_string()
    })?;
    if !s.missing().is_empty() {
        log::warn!(
            "--trace: this kernel lacks the events {:?}; causes they would show stay unnamed",
            s.missing()
        );
    }
    Ok(s)
}

/// What the fixes need: the RT and housekeeping CPUs and which IRQs cannot move.
fn fix_context(system: &crate::detect::SystemReport, rt_cpus: &[usize]) -> FixContext {
    use crate::detect::Movability;
    let online = system.cpus.online.clone().unwrap_or_default();
    FixContext {
        rt_cpus: rt_cpus.to_vec(),
        housekeeping: online
            .into_iter()
            .filter(|c| !rt_cpus.contains(c))
            .collect(),
        managed_irqs: system
            .tuning
            .irqs_on_rt_cpus
            .iter()
            .flatten()
            .filter(|i| i.managed != Movability::Movable)
            .map(|i| i.irq)
            .collect(),
        own_threads: BTreeMap::new(),
        preemption: system.kernel.preemption.map(|p| p.name()),
        preempt_dynamic: system.kernel.preempt_dynamic,
        no_hz_full: system.kernel.no_hz_full,
    }
}

/// Puts what the follower found into the report: each thread's worst spikes (with causes or
/// suspects), its causes table, and how the spikes were explained.
fn apply_follow(report: &mut Report, f: FollowSummary, trace: Option<Nanos>) {
    for t in &mut report.threads {
        let Some(e) = f.threads.iter().find(|e| e.name == t.name) else {
            continue;
        };
        let first_wake = t
            .spikes
            .first()
            .map(|s| s.wake_ns.saturating_sub((s.at_s * 1e9) as u64))
            .unwrap_or(0);
        t.spikes_seen = e.seen;
        t.spikes_lost = e.lost;
        // The follower saw every spike it could; the segment's ring of the 8 worst is the fallback
        // when it saw none (e.g. it could not read them).
        if !e.worst.is_empty() {
            t.spikes = e
                .worst
                .iter()
                .map(|x| Spike {
                    cycle: x.spike.cycle,
                    at_s: x.spike.time_ns.saturating_sub(first_wake) as f64 / 1e9,
                    wake_ns: x.spike.time_ns,
                    latency_ns: x.spike.latency_ns.max(0) as u64,
                    involuntary_switches: x.spike.involuntary_ctx_switches,
                    page_faults: x.spike.page_faults,
                    causes: x
                        .causes
                        .as_ref()
                        .map(|cs| cs.iter().map(CauseOut::new).collect()),
                    suspects: x
                        .suspects
                        .iter()
                        .map(|s| SuspectOut {
                            kind: s.kind,
                            what: s.label.clone(),
                            count: s.count,
                            usual: s.usual,
                            span_ns: s.span_ns,
                        })
                        .collect(),
                    without_switches: x.without_switches,
                })
                .collect();
        }
        if trace.is_some() {
            t.spikes_untraced = (f.method == "trace").then_some(e.untraced);
            t.spikes_without_switches = f.light.as_ref().map(|_| e.without_switches);
            t.causes = Some(
                e.tallies
                    .iter()
                    .map(|x| CauseTally {
                        cause: x.label.clone(),
                        kind: x.kind,
                        count: x.count,
                        main: x.main,
                        worst_ns: x.worst_ns,
                        total_ns: x.total_ns,
                        pids: x.pids.clone(),
                        fix: x.fix.clone(),
                    })
                    .collect(),
            );
        }
    }
    if let Some(threshold) = trace {
        report.trace = Some(TraceInfo {
            method: f.method,
            no_trace_reason: f.no_trace_reason,
            threshold_ns: threshold.as_nanos().max(0) as u64,
            lost_events: f.trace_lost_events,
            bytes_read: f.trace_bytes,
            missing_events: f.missing_events,
            isolation_boot_line: f.isolation_boot_line,
            light: f.light.map(|l| LightOut {
                hold_ns: l.hold_ns,
                sched_turned_on: l.turned_on,
                sched_on_ns: l.on_ns,
                traced_ns: l.traced_ns,
            }),
        });
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
    // The IRQ counts of the advice: those of the run, not since boot.
    let mut system = system.clone();
    if let Ok(text) = std::fs::read_to_string("/proc/interrupts") {
        system.tuning.recount_irqs(
            &crate::detect::parse_interrupts(&text),
            &format!("during the {:.0} s run", elapsed.as_secs_f64()),
        );
    }
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
        system: SystemSummary::new(&system, flavor.name()),
        settings: Settings {
            duration_s: elapsed.as_secs_f64(),
            timer: cfg.timer.to_string(),
            wake: cfg.wake.to_string(),
            load,
            interrupted,
        },
        verdict: verdict::judge(find("base"), find("servo"), overruns, &trust, system_advice),
        threads,
        trace: None,
        load_failures,
        board: None,
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
        spikes_total: s.map_or(0, |s| s.spikes_total),
        spikes_seen: 0,
        spikes_lost: 0,
        spikes_untraced: None,
        spikes_without_switches: None,
        causes: None,
        spikes: s
            .map(|s| {
                s.worst_spikes()
                    .map(|sp| Spike {
                        wake_ns: sp.time_ns,
                        causes: None,
                        suspects: Vec::new(),
                        without_switches: false,
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
