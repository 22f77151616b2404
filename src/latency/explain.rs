//! Following every spike while a latency test runs (issue 11): a thread of the test's own (never an
//! RT thread) reads each new spike from the HAL segment's ring of the latest spikes, explains it while
//! the trace still holds its window, counts its causes over the whole run and keeps the
//! [`KEEP_WORST`] worst spikes of each thread with their causes.
//!
//! - With a trace session, each RT CPU's `trace_pipe` is consumed as it comes (so a long run is
//!   followed from its start, not just its last seconds) and each spike gets the causes
//!   [`crate::trace::attribute()`] names.
//! - Without one (no tracefs, no privileges), each spike gets *suspects*: the interrupts and
//!   softirqs `/proc/interrupts` and `/proc/softirqs` counted on its CPU in the few ms around it
//!   (deltas between samples taken every [`POLL`], next to their usual rate), plus the thread's own
//!   rusage deltas that the segment already records.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rtapi_hal::{HalReader, Spike};

use crate::trace::{
    attribute, Cause, CauseKind, CpuReader, Formats, MergedReader, PipeReader, RawReader,
    TraceSession,
};

/// Spikes kept per thread, the worst by latency.
pub(crate) const KEEP_WORST: usize = 32;

/// How often the follower reads the segment, the trace pipes and (without a trace) the counters.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Trace text kept in memory behind the newest event: a spike is read within a few polls, so a
/// second is plenty; the window of a spike reaches 2 ms before its deadline.
const KEEP_TRACE_NS: u64 = 1_500_000_000;

/// Window of a spike: from this long before its deadline (who was already running), to this long
/// after its wake (attribution looks one event ahead).
const BEFORE_NS: u64 = 2_000_000;
const AFTER_NS: u64 = 1_000_000;

/// A spike older than this is explained with whatever the trace has, even if no later event came.
const PATIENCE_NS: u64 = 300_000_000;

/// The stretch of trace a spike is explained from: [`BEFORE_NS`] before its deadline to
/// [`AFTER_NS`] after its wake.
fn window_of(sp: &Spike) -> (u64, u64) {
    let deadline = sp.time_ns.saturating_sub(sp.latency_ns.max(0) as u64);
    (deadline.saturating_sub(BEFORE_NS), sp.time_ns + AFTER_NS)
}

/// One RT thread to follow.
#[derive(Debug, Clone)]
pub(crate) struct Followed {
    pub(crate) name: String,
    pub(crate) cpu: usize,
    /// Kernel thread id (the trace names tasks by it).
    pub(crate) tid: u32,
    /// SCHED_FIFO priority.
    pub(crate) priority: i32,
}

impl Followed {
    /// Thread `t` as the runtime started it.
    pub(crate) fn new(t: &crate::runtime::StartedThread) -> Followed {
        Followed {
            name: t.name.clone(),
            cpu: t.cpu,
            tid: t.tid.unwrap_or(0).max(0) as u32,
            priority: t.priority,
        }
    }
}

/// What the fixes need to know about the machine.
#[derive(Debug, Clone, Default)]
pub(crate) struct FixContext {
    /// The CPUs the RT threads run on.
    pub(crate) rt_cpus: Vec<usize>,
    /// The other online CPUs.
    pub(crate) housekeeping: Vec<usize>,
    /// IRQs that are (probably) kernel-managed: no run-time move.
    pub(crate) managed_irqs: BTreeSet<u32>,
    /// This test's own RT threads: kernel tid → name (one may delay another on a shared CPU).
    pub(crate) own_threads: BTreeMap<u32, String>,
    /// The kernel's preemption model (`none`, `voluntary`, `full`, `lazy`, `rt`), if known.
    pub(crate) preemption: Option<&'static str>,
    /// Whether it is PREEMPT_DYNAMIC (`preempt=full` on the command line changes it).
    pub(crate) preempt_dynamic: bool,
    /// Whether the kernel has CONFIG_NO_HZ_FULL (`Some(false)`: `nohz_full=` would do nothing and
    /// is left out of the advice, as `detect` and `tune` leave it out).
    pub(crate) no_hz_full: Option<bool>,
}

impl FixContext {
    /// The kernel command line that isolates the RT CPUs, which several fixes refer to.
    pub(crate) fn isolation_boot_line(&self) -> String {
        crate::detect::isolation_params(&self.rt_cpus, self.no_hz_full).join(" ")
    }
}

/// An interrupt or softirq counted on the spike's CPU around it (no trace).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Suspect {
    /// `irq` or `softirq`.
    pub(crate) kind: &'static str,
    /// `IRQ 36 (virtio1-req.0)` or `softirq NET_RX`.
    pub(crate) label: String,
    /// The IRQ number, for an IRQ.
    pub(crate) irq: Option<u32>,
    /// Counted between the samples around the spike.
    pub(crate) count: u64,
    /// What the same span counts on average over the run.
    pub(crate) usual: f64,
    /// The span of those samples, ns.
    pub(crate) span_ns: u64,
}

/// A spike with what explains it.
#[derive(Debug, Clone)]
pub(crate) struct Explained {
    pub(crate) spike: Spike,
    /// The trace's causes; `None` when no trace covered the spike.
    pub(crate) causes: Option<Vec<Cause>>,
    /// Without a trace: the counters that moved around it, most unusual first.
    pub(crate) suspects: Vec<Suspect>,
    /// Traced with the wake path's events off (`--trace-light` before they came on): no switches,
    /// wakeups, timer expiries or priorities in its causes.
    pub(crate) without_switches: bool,
}

/// One row of the causes table: a cause over the whole run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tally {
    /// `IRQ 36 (virtio1-req.0)`, `softirq NET_RX`, `task spinner (SCHED_FIFO 99)`, ….
    pub(crate) label: String,
    /// The JSON kind (`irq`, `softirq`, `vector`, `task`, `kernel-thread`, `timer-late`, `outside`).
    pub(crate) kind: &'static str,
    /// Spikes it took part in.
    pub(crate) count: u64,
    /// Spikes where it was the longest cause.
    pub(crate) main: u64,
    /// The most it took in one spike, ns (0 for counted suspects).
    pub(crate) worst_ns: u64,
    /// All it took, ns.
    pub(crate) total_ns: u64,
    /// Process ids seen for a task or kernel thread (at most 8).
    pub(crate) pids: Vec<u32>,
    /// What to do about it.
    pub(crate) fix: Option<String>,
}

/// Everything followed for one thread.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThreadExplained {
    pub(crate) name: String,
    /// Spikes read from the segment.
    pub(crate) seen: u64,
    /// Spikes the follower was too slow for (gone from the segment's ring before it read them).
    pub(crate) lost: u64,
    /// Spikes read but not covered by the trace (before it started, or its text was gone).
    pub(crate) untraced: u64,
    /// Spikes explained from a trace with the wake path's events off (`--trace-light`).
    pub(crate) without_switches: u64,
    /// The worst [`KEEP_WORST`], worst first.
    pub(crate) worst: Vec<Explained>,
    /// By cause, most total time first.
    pub(crate) tallies: Vec<Tally>,
}

/// How the follower explained things.
#[derive(Debug, Clone, Default)]
pub(crate) struct FollowSummary {
    pub(crate) threads: Vec<ThreadExplained>,
    /// `trace` (tracefs), `counters` (/proc deltas) or `none`.
    pub(crate) method: &'static str,
    /// Why there is no trace, when there is none.
    pub(crate) no_trace_reason: Option<String>,
    /// Events the kernel dropped because the follower fell behind.
    pub(crate) trace_lost_events: u64,
    /// Trace text read, bytes.
    pub(crate) trace_bytes: u64,
    /// Events of the list this kernel does not have.
    pub(crate) missing_events: Vec<&'static str>,
    /// [`FixContext::isolation_boot_line`].
    pub(crate) isolation_boot_line: String,
    /// With `--trace-light`: how the wake path's events (the scheduler's and the timer's) were
    /// switched.
    pub(crate) light: Option<LightSummary>,
}

/// What `--trace-light` did: the wake path's events on from each spike read until
/// [`LIGHT_HOLD`] passed without one.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LightSummary {
    /// How long they stayed on after the last spike, ns.
    pub(crate) hold_ns: u64,
    /// Times they were turned on.
    pub(crate) turned_on: u64,
    /// Time they were on in all, ns.
    pub(crate) on_ns: u64,
    /// Time traced in all, ns.
    pub(crate) traced_ns: u64,
}

/// `--trace-light`: how long the wake path's events stay on after the last spike read. Spikes
/// come in bursts (a device's interrupt storm, a task that runs now and then); the burst's later
/// spikes are then explained whole. `rtapi latency-test --trace-light` without `=HOLD` gives
/// the same (its `default_missing_value`, "10s"): change both together.
pub(crate) const LIGHT_HOLD: Duration = Duration::from_secs(10);

/// The follower thread; [`finish`](Self::finish) stops it and returns what it found.
pub(crate) struct Follower {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<FollowSummary>,
}

impl Follower {
    /// Starts following the threads `threads` names in the segment `reader` reads; it is asked
    /// again at every poll, so threads started later are followed from their start (LinuxCNC's,
    /// made while the master runs). `session` (with `--trace`) gives causes (a light one with its
    /// wake path's events on for `light_hold` after each spike read); `counters` (with `--trace`
    /// but no session) gives suspects; with neither, only the worst spikes are kept. The
    /// follower runs on `fix.housekeeping` (when there are such CPUs), never on an RT CPU.
    pub(crate) fn spawn(
        reader: HalReader,
        threads: Box<dyn FnMut() -> Vec<Followed> + Send>,
        session: Option<TraceSession>,
        light_hold: Duration,
        counters: bool,
        no_trace_reason: Option<String>,
        fix: FixContext,
    ) -> std::io::Result<Follower> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name("rtapi-spikes".into())
            .spawn(move || {
                if !fix.housekeeping.is_empty() {
                    if let Err(e) = crate::rt::sched::set_current_affinity(&fix.housekeeping) {
                        log::debug!("spike follower: {e}");
                    }
                }
                // Reading the trace must keep up with the RT CPUs' events even when the housekeeping
                // CPUs are loaded (the test's own --load): the lowest real-time priority, off the RT
                // CPUs (the affinity is inherited), well below the RT threads.
                if session.is_some() {
                    if let Err(e) =
                        crate::rt::sched::set_current_policy(crate::rt::sched::Policy::Fifo {
                            priority: 1,
                        })
                    {
                        log::debug!("spike follower stays SCHED_OTHER: {e}");
                    }
                }
                let mut st = State::new(reader, threads, session, counters, fix);
                st.no_trace_reason = no_trace_reason;
                st.light_hold_ns = light_hold.as_nanos() as u64;
                st.run(&s);
                st.summary()
            })?;
        Ok(Follower { stop, handle })
    }

    /// Reads what is left, explains it, and returns the summary.
    pub(crate) fn finish(self) -> FollowSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_else(|_| FollowSummary {
            method: "none",
            no_trace_reason: Some("the spike follower panicked".into()),
            ..FollowSummary::default()
        })
    }
}

struct PerThread {
    spec: Followed,
    since: u64,
    out: ThreadExplained,
    tallies: BTreeMap<String, Tally>,
}

/// `/proc/interrupts` and `/proc/softirqs` counts of the followed CPUs at one time.
struct Sample {
    ts_ns: u64,
    /// (label, irq, cpu) → count.
    counts: BTreeMap<(String, Option<u32>, usize), u64>,
}

/// The followed threads whose switches the trace keeps ([`TraceSession::skip_own_wakes`]): each
/// one another followed thread with a higher priority shares a CPU with.
fn under_a_faster_thread<'a>(threads: impl Iterator<Item = &'a Followed> + Clone) -> Vec<u32> {
    threads
        .clone()
        .filter(|t| {
            t.tid != 0
                && threads.clone().any(|o| {
                    o.tid != 0 && o.tid != t.tid && o.cpu == t.cpu && o.priority > t.priority
                })
        })
        .map(|t| t.tid)
        .collect()
}

struct State {
    reader: HalReader,
    /// Who to follow, asked at every step.
    roster: Box<dyn FnMut() -> Vec<Followed> + Send>,
    threads: Vec<PerThread>,
    session: Option<TraceSession>,
    pipes: Vec<Box<dyn CpuReader>>,
    counters: bool,
    samples: VecDeque<Sample>,
    first_sample: Option<Sample>,
    pending: Vec<(usize, Spike)>,
    fix: FixContext,
    no_trace_reason: Option<String>,
    /// With a light session: when the last spike was read.
    last_spike_ns: u64,
    /// With a light session: how long its wake path's events stay on after a spike, ns.
    light_hold_ns: u64,
    /// With a light session: a switch failed (said once; not tried again).
    light_failed: bool,
}

fn now_ns() -> u64 {
    crate::rt::clock::now().as_nanos().max(0) as u64
}

impl State {
    fn new(
        reader: HalReader,
        roster: Box<dyn FnMut() -> Vec<Followed> + Send>,
        session: Option<TraceSession>,
        counters: bool,
        fix: FixContext,
    ) -> State {
        let mut pipes = Vec::new();
        if let Some(s) = &session {
            // The binary pages when their format can be read, else the kernel's text.
            let formats = Formats::load(s)
                .map(Arc::new)
                .map_err(|e| log::info!("--trace: reading the trace as text ({e})"))
                .ok();
            let open = |s: &TraceSession, cpu: usize| match &formats {
                Some(f) => {
                    RawReader::open(s, cpu, f.clone()).map(|r| Box::new(r) as Box<dyn CpuReader>)
                }
                None => PipeReader::open(s, cpu).map(|r| Box::new(r) as Box<dyn CpuReader>),
            };
            for &cpu in s.cpus() {
                // The CPU's events are in the session's instances together.
                let r = s
                    .parts()
                    .into_iter()
                    .map(|p| open(p, cpu))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|parts| Box::new(MergedReader::new(parts)) as Box<dyn CpuReader>);
                match r {
                    Ok(p) => pipes.push(p),
                    Err(e) => log::warn!("--trace: {e}"),
                }
            }
        }
        let mut st = State {
            reader,
            roster,
            threads: Vec::new(),
            session,
            pipes,
            counters,
            samples: VecDeque::new(),
            first_sample: None,
            pending: Vec::new(),
            fix,
            no_trace_reason: None,
            last_spike_ns: 0,
            light_hold_ns: LIGHT_HOLD.as_nanos() as u64,
            light_failed: false,
        };
        st.learn_threads();
        st
    }

    /// Starts following the threads the roster names that are not followed yet (an RT thread of
    /// the same instance may delay another: each is also one of `fix.own_threads`).
    fn learn_threads(&mut self) {
        for spec in (self.roster)() {
            if self.threads.iter().any(|t| t.spec.name == spec.name) {
                continue;
            }
            if spec.tid != 0 {
                self.fix.own_threads.insert(spec.tid, spec.name.clone());
            }
            self.threads.push(PerThread {
                out: ThreadExplained {
                    name: spec.name.clone(),
                    ..ThreadExplained::default()
                },
                spec,
                since: 0,
                tallies: BTreeMap::new(),
            });
        }
        // The RT threads' own wakes are not recorded (the cost of `--trace` on the latency it
        // measures); the switches of a thread that a faster one of this test shares its CPU with
        // are: the switch from that one to it names the delay ("rtapi's own base thread").
        if let Some(s) = &mut self.session {
            let tids: Vec<u32> = self.fix.own_threads.keys().copied().collect();
            let watched = under_a_faster_thread(self.threads.iter().map(|t| &t.spec));
            if let Err(e) = s.skip_own_wakes(&tids, &watched) {
                log::warn!("--trace: the RT threads' own wakes stay recorded: {e}");
            }
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            self.step(stopping);
            if stopping {
                break;
            }
            std::thread::sleep(POLL);
        }
    }

    fn step(&mut self, all: bool) {
        for p in &mut self.pipes {
            if let Err(e) = p.pump(256 << 20) {
                log::warn!("--trace: {e}");
            }
        }
        if self.counters {
            self.sample_counters();
        }
        self.learn_threads();
        for (i, t) in self.threads.iter_mut().enumerate() {
            match self.reader.spikes_since(&t.spec.name, t.since) {
                Ok(r) => {
                    if !r.spikes.is_empty() {
                        self.last_spike_ns = now_ns();
                    }
                    t.since = r.total;
                    t.out.lost += r.lost;
                    t.out.seen += r.spikes.len() as u64;
                    self.pending.extend(r.spikes.into_iter().map(|s| (i, s)));
                }
                Err(e) => log::debug!("spikes of {}: {e}", t.spec.name),
            }
        }
        let now = now_ns();
        self.switch_sched(now);
        let pending = std::mem::take(&mut self.pending);
        let mut ready = Vec::new();
        for (i, sp) in pending {
            if all || self.ready(i, &sp, now) {
                ready.push((i, sp));
            } else {
                self.pending.push((i, sp));
            }
        }
        // Spikes close in time on one CPU share one decoded stretch of its trace (a burst of
        // spikes would otherwise decode the same events again for each).
        let mut cache: Option<(usize, u64, u64, Vec<crate::trace::Event>)> = None;
        for (i, sp) in ready {
            let cpu = self.threads[i].spec.cpu;
            let (from, to) = window_of(&sp);
            let covered = cache
                .as_ref()
                .is_some_and(|(c, a, b, _)| *c == cpu && *a <= from && to <= *b);
            if !covered {
                cache = self.pipes.iter().find(|p| p.cpu() == cpu).map(|p| {
                    // Everything ready on this CPU within the next 100 ms, in one piece.
                    let end = to.max(from + 100_000_000).min(now);
                    let end = end.max(to);
                    (cpu, from, end, p.window(from, end).events)
                });
            }
            let events = cache.as_ref().map(|(_, _, _, e)| {
                let a = e.partition_point(|x| x.ts_ns < from);
                let b = e.partition_point(|x| x.ts_ns <= to);
                &e[a..b]
            });
            self.explain(i, sp, events);
        }
        let keep_from = now.saturating_sub(KEEP_TRACE_NS);
        for p in &mut self.pipes {
            p.forget_before(keep_from);
        }
        while self.samples.len() > 2 && self.samples[1].ts_ns < keep_from {
            self.samples.pop_front();
        }
    }

    /// A light session: the wake path's events on while spikes come, off once its hold has
    /// passed without one (a full session's stay on). After a failed switch it is not tried again.
    fn switch_sched(&mut self, now: u64) {
        let Some(s) = self.session.as_mut().filter(|_| !self.light_failed) else {
            return;
        };
        let wanted =
            self.last_spike_ns != 0 && now.saturating_sub(self.last_spike_ns) < self.light_hold_ns;
        if let Err(e) = s.set_sched_events(wanted) {
            log::warn!(
                "--trace-light: the wake path's events could not be switched ({e}); they stay \
                 as they are for the rest of the run"
            );
            self.light_failed = true;
        }
    }

    /// Whether a spike's window is whole: the trace (or the counters) reach past it.
    fn ready(&self, i: usize, sp: &Spike, now: u64) -> bool {
        let end = sp.time_ns + AFTER_NS;
        if now > sp.time_ns + PATIENCE_NS {
            return true;
        }
        let cpu = self.threads[i].spec.cpu;
        if let Some(p) = self.pipes.iter().find(|p| p.cpu() == cpu) {
            // An event after the window, or a read that emptied the ring after it (a CPU whose RT
            // threads' own wakes are not recorded may have no newer event to show).
            let c = p.coverage();
            return c.latest_ns.is_some_and(|l| l >= end)
                || c.drained_at_ns.is_some_and(|d| d >= end);
        }
        if self.counters {
            return self.samples.back().is_some_and(|s| s.ts_ns >= end);
        }
        true
    }

    /// Explains one spike from `events` (its CPU's trace over [`window_of`] it, when traced).
    fn explain(&mut self, i: usize, sp: Spike, events: Option<&[crate::trace::Event]>) {
        let spec = self.threads[i].spec.clone();
        let lat = sp.latency_ns.max(0) as u64;
        let deadline = sp.time_ns.saturating_sub(lat);
        let mut causes = None;
        let mut without_switches = false;
        if let (Some(p), Some(events)) = (self.pipes.iter().find(|p| p.cpu() == spec.cpu), events) {
            let (from, to) = window_of(&sp);
            if p.coverage().covered_from_ns <= from {
                causes = Some(attribute(events, deadline, sp.time_ns, spec.tid));
                without_switches = self
                    .session
                    .as_ref()
                    .is_some_and(|s| !s.sched_covers(from, to));
            }
        }
        let suspects = if self.counters {
            self.suspects(spec.cpu, deadline, sp.time_ns)
        } else {
            Vec::new()
        };
        let t = &mut self.threads[i];
        if !self.pipes.is_empty() && causes.is_none() {
            t.out.untraced += 1;
        }
        t.out.without_switches += u64::from(without_switches);
        if let Some(cs) = &causes {
            let main = cs
                .iter()
                .find(|c| !matches!(c.kind, CauseKind::TimerLate { .. }))
                .map(|c| c.kind.clone());
            for c in cs {
                let (label, kind) = label(&c.kind, &self.fix);
                let e = t.tallies.entry(label.clone()).or_insert_with(|| Tally {
                    label,
                    kind,
                    count: 0,
                    main: 0,
                    worst_ns: 0,
                    total_ns: 0,
                    pids: Vec::new(),
                    fix: fix(&c.kind, &self.fix, spec.priority),
                });
                e.count += 1;
                e.main += u64::from(main.as_ref() == Some(&c.kind));
                e.worst_ns = e.worst_ns.max(c.dur_ns);
                e.total_ns += c.dur_ns;
                if let CauseKind::Task { task } | CauseKind::KernelThread { task, .. } = &c.kind {
                    if e.pids.len() < 8 && !e.pids.contains(&task.pid) {
                        e.pids.push(task.pid);
                    }
                }
            }
        }
        for (n, s) in suspects.iter().enumerate() {
            let e = t.tallies.entry(s.label.clone()).or_insert_with(|| Tally {
                label: s.label.clone(),
                kind: s.kind,
                count: 0,
                main: 0,
                worst_ns: 0,
                total_ns: 0,
                pids: Vec::new(),
                fix: match (s.irq, s.label.strip_prefix("softirq ")) {
                    (Some(irq), _) => irq_fix(irq, &self.fix),
                    (None, Some(vector)) => softirq_fix(vector, &self.fix),
                    // LOC, RES, CAL, TLB…: per-CPU interrupts, which only isolation reduces.
                    (None, None) => Some(isolate(&self.fix)),
                },
            });
            e.count += 1;
            e.main += u64::from(n == 0);
        }
        let e = Explained {
            spike: sp,
            causes,
            suspects,
            without_switches,
        };
        // Worst first; among equals the older stays.
        let w = &mut t.out.worst;
        let at = w.partition_point(|k| k.spike.latency_ns >= e.spike.latency_ns);
        if at < KEEP_WORST {
            w.insert(at, e);
            w.truncate(KEEP_WORST);
        }
    }

    fn sample_counters(&mut self) {
        let cpus: BTreeSet<usize> = self.threads.iter().map(|t| t.spec.cpu).collect();
        let mut counts = BTreeMap::new();
        if let Ok(text) = std::fs::read_to_string("/proc/interrupts") {
            for line in crate::detect::parse_interrupts(&text) {
                let label = match line.irq {
                    Some(irq) => format!("IRQ {irq} ({})", line.name),
                    None => format!("{} ({})", line.key, line.name),
                };
                for (cpu, n) in line.counts {
                    if cpus.contains(&cpu) {
                        counts.insert((label.clone(), line.irq, cpu), n);
                    }
                }
            }
        }
        if let Ok(text) = std::fs::read_to_string("/proc/softirqs") {
            for (vector, per_cpu) in crate::detect::parse_softirqs(&text) {
                for (cpu, n) in per_cpu {
                    if cpus.contains(&cpu) {
                        counts.insert((format!("softirq {vector}"), None, cpu), n);
                    }
                }
            }
        }
        let s = Sample {
            ts_ns: now_ns(),
            counts,
        };
        if self.first_sample.is_none() {
            self.first_sample = Some(Sample {
                ts_ns: s.ts_ns,
                counts: s.counts.clone(),
            });
        }
        self.samples.push_back(s);
    }

    /// The counters of `cpu` that moved between the last sample before `deadline` and the first
    /// after `wake`, most unusual first.
    fn suspects(&self, cpu: usize, deadline: u64, wake: u64) -> Vec<Suspect> {
        let before = self.samples.iter().rev().find(|s| s.ts_ns <= deadline);
        let after = self.samples.iter().find(|s| s.ts_ns >= wake);
        let (Some(a), Some(b), Some(first), Some(last)) = (
            before,
            after,
            self.first_sample.as_ref(),
            self.samples.back(),
        ) else {
            return Vec::new();
        };
        let span = b.ts_ns - a.ts_ns;
        let run = last.ts_ns.saturating_sub(first.ts_ns).max(1) as f64;
        let mut out: Vec<Suspect> = b
            .counts
            .iter()
            .filter(|((_, _, c), _)| *c == cpu)
            .filter_map(|(key, &n)| {
                let d = n.saturating_sub(a.counts.get(key).copied().unwrap_or(n));
                if d == 0 {
                    return None;
                }
                let total = last.counts.get(key).copied().unwrap_or(n)
                    - first.counts.get(key).copied().unwrap_or(0).min(n);
                Some(Suspect {
                    kind: if key.0.starts_with("softirq ") {
                        "softirq"
                    } else {
                        "irq"
                    },
                    label: key.0.clone(),
                    irq: key.1,
                    count: d,
                    usual: total as f64 * span as f64 / run,
                    span_ns: span,
                })
            })
            .collect();
        out.sort_by(|x, y| {
            let r = |s: &Suspect| s.count as f64 / s.usual.max(0.01);
            r(y).total_cmp(&r(x)).then(y.count.cmp(&x.count))
        });
        out
    }

    fn summary(self) -> FollowSummary {
        let method = if !self.pipes.is_empty() {
            "trace"
        } else if self.counters {
            "counters"
        } else {
            "none"
        };
        let trace_lost_events = self.pipes.iter().map(|p| p.lost_events()).sum();
        let trace_bytes = self.pipes.iter().map(|p| p.bytes_read()).sum();
        let missing_events = self
            .session
            .as_ref()
            .map(|s| s.missing().to_vec())
            .unwrap_or_default();
        let light = self.session.as_ref().filter(|s| s.is_light()).map(|s| {
            let now = now_ns();
            let (turned_on, on_ns) = s.sched_time(now);
            LightSummary {
                hold_ns: self.light_hold_ns,
                turned_on,
                on_ns,
                traced_ns: now.saturating_sub(s.started_ns()),
            }
        });
        // The pipes are open files in the instance: close them before the session removes it.
        drop(self.pipes);
        drop(self.session);
        FollowSummary {
            method,
            isolation_boot_line: self.fix.isolation_boot_line(),
            no_trace_reason: self.no_trace_reason,
            trace_lost_events,
            trace_bytes,
            missing_events,
            light,
            threads: self
                .threads
                .into_iter()
                .map(|t| {
                    let mut out = t.out;
                    out.tallies = t.tallies.into_values().collect();
                    out.tallies.sort_by(|a, b| {
                        let symptom = |t: &Tally| t.kind == "timer-late";
                        symptom(a)
                            .cmp(&symptom(b))
                            .then(b.total_ns.cmp(&a.total_ns))
                            .then(b.count.cmp(&a.count))
                            .then(a.label.cmp(&b.label))
                    });
                    out
                })
                .collect(),
        }
    }
}

/// The table row a cause counts in, and its JSON kind. Tasks are grouped by name and policy (a
/// workload's many pids are one cause); kernel threads by name; this test's own RT threads are
/// named as such.
pub(crate) fn label(kind: &CauseKind, ctx: &FixContext) -> (String, &'static str) {
    match kind {
        CauseKind::Irq { irq, name } => (format!("IRQ {irq} ({name})"), "irq"),
        CauseKind::Vector { name } => (format!("{name} interrupt"), "vector"),
        CauseKind::Softirq { vector } => (format!("softirq {vector}"), "softirq"),
        CauseKind::Task { task } => match ctx.own_threads.get(&task.pid) {
            Some(name) => (
                format!("rtapi's own {name} thread ({})", task.policy()),
                "task",
            ),
            None => (format!("task {} ({})", task.comm, task.policy()), "task"),
        },
        CauseKind::KernelThread { task, .. } => {
            (format!("kernel thread {}", task.comm), "kernel-thread")
        }
        CauseKind::TimerLate { .. } => ("wakeup timer fired late (a symptom)".into(), "timer-late"),
        CauseKind::Outside => (
            "outside this kernel (hypervisor, SMI, firmware)".into(),
            "outside",
        ),
    }
}

/// The JSON kind of a cause.
pub(crate) fn kind_name(kind: &CauseKind) -> &'static str {
    label(kind, &FixContext::default()).1
}

fn cpus(c: &[usize]) -> String {
    crate::rt::cpulist::format(c)
}

fn isolate(ctx: &FixContext) -> String {
    format!("isolate CPU {} (boot line below)", cpus(&ctx.rt_cpus))
}

fn irq_fix(irq: u32, ctx: &FixContext) -> Option<String> {
    if ctx.managed_irqs.contains(&irq) || ctx.housekeeping.is_empty() {
        Some(format!(
            "kernel-managed, cannot be moved at run time: boot with isolcpus=managed_irq,domain,{} (or give the device fewer queues)",
            cpus(&ctx.rt_cpus)
        ))
    } else {
        Some(format!(
            "echo {} > /proc/irq/{irq}/smp_affinity_list (rtapi tune does it), and keep irqbalance off the RT CPU",
            cpus(&ctx.housekeeping)
        ))
    }
}

fn softirq_fix(vector: &str, ctx: &FixContext) -> Option<String> {
    let rt = cpus(&ctx.rt_cpus);
    Some(match vector {
        "NET_RX" | "NET_TX" => format!(
            "network processing on CPU {rt}: move the NIC's IRQs off it and clear it from /sys/class/net/*/queues/rx-*/rps_cpus; keep network senders off it"
        ),
        "BLOCK" => format!("disk completions on CPU {rt}: move the disk's IRQ off it (a kernel-managed one: boot with isolcpus=managed_irq,domain,{rt})"),
        "RCU" => format!("RCU callbacks on CPU {rt}: boot with rcu_nocbs={rt}"),
        "TIMER" | "HRTIMER" => format!("other tasks' timers on CPU {rt}: {}", isolate(ctx)),
        "SCHED" => format!("load balancing on CPU {rt}: boot with isolcpus=domain,{rt}"),
        _ => isolate(ctx),
    })
}

/// What to do about a cause (`None` for a symptom).
pub(crate) fn fix(kind: &CauseKind, ctx: &FixContext, rt_priority: i32) -> Option<String> {
    let rt = cpus(&ctx.rt_cpus);
    let hk = cpus(&ctx.housekeeping);
    match kind {
        CauseKind::Irq { irq, .. } => irq_fix(*irq, ctx),
        CauseKind::Softirq { vector } => softirq_fix(vector, ctx),
        CauseKind::Vector { name } => Some(match name.as_str() {
            "local_timer" => format!(
                "the timer interrupt that wakes the RT thread took long: it also runs the tick and other tasks' timers on CPU {rt} (and on a VM each one exits to the hypervisor): {}",
                isolate(ctx)
            ),
            "call_function" | "call_function_single" => format!(
                "IPIs sent by other CPUs (TLB shootdowns, cache flushes, …): {} and avoid mapping/unmapping memory in the machine's processes",
                isolate(ctx)
            ),
            "reschedule" => format!("other tasks woken onto CPU {rt}: {}", isolate(ctx)),
            _ => isolate(ctx),
        }),
        CauseKind::Task { task } if ctx.own_threads.contains_key(&task.pid) => Some(
            "by design: the faster thread has the higher priority and runs first on a shared CPU; to keep this thread's latency free of it, give each thread its own CPU (latency-test --cpu BASE,SERVO; a [[thread]]'s cpu in the machine config)".to_string(),
        ),
        CauseKind::Task { task } => Some(if (0..=98).contains(&task.prio) && 99 - task.prio >= rt_priority {
            format!(
                "it runs at real-time priority {} (≥ the RT thread's {rt_priority}) on CPU {rt}: lower its priority or move it (taskset -a -p -c {hk} {})",
                99 - task.prio,
                task.pid
            )
        } else if task.prio >= 100 {
            // A normal task cannot preempt a SCHED_FIFO thread: it held the CPU in the kernel,
            // where the kernel did not let the woken RT thread in.
            let why = match ctx.preemption {
                Some(m @ ("none" | "voluntary")) => format!(
                    "it was in the kernel, which this kernel's preemption model ('{m}') does not interrupt for a woken real-time thread: {}; ",
                    if ctx.preempt_dynamic {
                        "boot with preempt=full (this PREEMPT_DYNAMIC kernel supports it) or use a PREEMPT_RT kernel"
                    } else {
                        "use a kernel with full preemption, better PREEMPT_RT"
                    }
                ),
                Some("rt") => "it was in one of the kernel's few non-preemptible sections; ".to_string(),
                _ => "it was in a non-preemptible section of the kernel (a PREEMPT_RT kernel has far fewer); ".to_string(),
            };
            format!(
                "a normal task held off a real-time thread: {why}move it off CPU {rt} (taskset -a -p -c {hk} {}) or {}",
                task.pid,
                isolate(ctx)
            )
        } else {
            format!(
                "it shares CPU {rt} with the RT thread: move it (taskset -a -p -c {hk} {}), or {}",
                task.pid,
                isolate(ctx)
            )
        }),
        CauseKind::KernelThread { task, .. } => Some(
            if task.comm.starts_with("kworker/") {
                format!(
                    "workqueue work on CPU {rt}: echo {} > /sys/devices/virtual/workqueue/cpumask{}",
                    crate::detect::format_hex_mask(&ctx.housekeeping),
                    if ctx.no_hz_full == Some(false) {
                        String::new()
                    } else {
                        format!(", and nohz_full={rt}")
                    }
                )
            } else if task.comm.starts_with("ksoftirqd/") {
                format!("softirqs deferred to a thread on CPU {rt}: move the IRQs that raise them off it")
            } else if task.comm.starts_with("rcu") {
                format!("RCU work on CPU {rt}: boot with rcu_nocbs={rt}")
            } else if task.comm.starts_with("irq/") {
                format!("a threaded IRQ handler on CPU {rt}: move that IRQ off it")
            } else {
                isolate(ctx)
            },
        ),
        CauseKind::TimerLate { .. } => None,
        CauseKind::Outside => Some(
            "the hypervisor (a virtual machine) or the firmware (SMIs) took the CPU: commission on the bare-metal machine; on bare metal, disable SMI sources in the BIOS (power management, legacy USB)".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_a_faster_one_shares_its_cpu_with_keeps_its_switches_recorded() {
        let f = |name: &str, cpu, tid, priority| Followed {
            name: name.into(),
            cpu,
            tid,
            priority,
        };
        let threads = [
            f("base", 1, 10, 98),
            f("servo", 1, 11, 97),
            f("alone", 0, 12, 50),
            f("not started", 0, 0, 90),
        ];
        assert_eq!(under_a_faster_thread(threads.iter()), [11]);
        assert_eq!(under_a_faster_thread(threads[1..2].iter()), [] as [u32; 0]);
    }
    use crate::trace::TaskRef;

    #[test]
    fn fixes_name_the_command() {
        let ctx = FixContext {
            rt_cpus: vec![1],
            housekeeping: vec![0],
            managed_irqs: [36].into(),
            own_threads: [(500, "base".to_string())].into(),
            preemption: Some("none"),
            preempt_dynamic: true,
            no_hz_full: None,
        };
        let f = |k: CauseKind| fix(&k, &ctx, 98).unwrap();
        assert!(f(CauseKind::Irq {
            irq: 42,
            name: "virtio3-tx".into()
        })
        .starts_with("echo 0 > /proc/irq/42/smp_affinity_list"));
        assert!(f(CauseKind::Irq {
            irq: 36,
            name: "virtio1-req.0".into()
        })
        .contains("isolcpus=managed_irq,domain,1"));
        let spinner = TaskRef {
            comm: "spinner".into(),
            pid: 77,
            prio: 0,
        };
        assert!(f(CauseKind::Task { task: spinner }).contains("real-time priority 99"));
        assert!(fix(
            &CauseKind::TimerLate {
                function: "hrtimer_wakeup".into()
            },
            &ctx,
            98
        )
        .is_none());
        let (l, k) = label(
            &CauseKind::Task {
                task: TaskRef {
                    comm: "stress-ng".into(),
                    pid: 5,
                    prio: 120,
                },
            },
            &ctx,
        );
        assert_eq!((l.as_str(), k), ("task stress-ng (normal, nice 0)", "task"));
        let io = f(CauseKind::Task {
            task: TaskRef {
                comm: "load-io-1".into(),
                pid: 9,
                prio: 120,
            },
        });
        assert!(
            io.contains("preemption model ('none')") && io.contains("preempt=full"),
            "{io}"
        );
        assert!(io.contains("taskset -a -p -c 0 9"), "{io}");
        let base = CauseKind::Task {
            task: TaskRef {
                comm: "rtapi-base".into(),
                pid: 500,
                prio: 1,
            },
        };
        assert_eq!(
            label(&base, &ctx).0,
            "rtapi's own base thread (SCHED_FIFO/RR 98)"
        );
        assert!(f(base).contains("--cpu BASE,SERVO"));
        assert_eq!(
            ctx.isolation_boot_line(),
            "isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1"
        );
        // A kernel without CONFIG_NO_HZ_FULL: no nohz_full= anywhere in the advice.
        let ctx = FixContext {
            no_hz_full: Some(false),
            ..ctx
        };
        assert_eq!(
            ctx.isolation_boot_line(),
            "isolcpus=managed_irq,domain,1 rcu_nocbs=1"
        );
        let kworker = CauseKind::KernelThread {
            task: TaskRef {
                comm: "kworker/1:0H".into(),
                pid: 77,
                prio: 100,
            },
            work: Vec::new(),
        };
        assert!(
            !fix(&kworker, &ctx, 98).unwrap().contains("nohz_full"),
            "{:?}",
            fix(&kworker, &ctx, 98)
        );
    }
}
