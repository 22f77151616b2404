//! The runtime: configure (flavor, HAL structure, threads, functions) → [`Runtime::start`] → run → stop.
//!
//! The type follows the life cycle: a `Runtime<Configuring>` registers things and cannot run;
//! `start()` consumes it and gives a `Runtime<Running>`, which can only be waited on and stopped.
//!
//! ```no_run
//! use rtapi::rt::clock::Nanos;
//! use rtapi::runtime::{Runtime, RuntimeOptions, ThreadSpec};
//!
//! let mut rt = Runtime::configure(RuntimeOptions::default())?;
//! rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))?;
//! let comp = rt.hal().component("counter")?;
//! let count = rt.hal().pin::<rtapi_hal::Out, u64>(comp, "counter.count")?;
//! rt.function(comp, "counter.update", Box::new(move |hal: &rtapi_hal::Hal| {
//!     let count = hal.pin(count);
//!     Box::new(move |_cycle: &rtapi::runtime::function::Cycle| count.set(count.get() + 1))
//! }))?;
//! rt.addf("counter.update", "servo", None)?;
//! let running = rt.start()?;
//! running.wait(Some(std::time::Duration::from_secs(1)));
//! println!("{}", running.stop());
//! # Ok::<(), rtapi::runtime::RuntimeError>(())
//! ```

pub(crate) mod crash;
pub mod function;
pub(crate) mod health;
pub mod hosted;
mod housekeeping;
pub mod io;
mod live;
mod neighbours;
pub(crate) mod panic;
pub mod recorder;
mod resident;
pub(crate) mod runlist;
pub(crate) mod slots;
mod start;
mod stop;
pub(crate) mod thread;
pub mod watchdog;

use self::function::FunctionFactory;
pub use self::resident::Resident;
pub use self::stop::{Summary, ThreadSummary, STOP_GRACE};
use self::thread::{Heartbeat, SetupError};
use self::watchdog::WatchdogOptions;
use crate::detect::SystemReport;
use crate::flavor::{self, Flavor, FlavorError, Selection};
use crate::rt::clock::Nanos;
use crate::rt::harden::{Hardening, StepFailure};
use crate::rt::sched;
use crate::rt::wake::{TimerKind, WakeMode};
use crate::rt::SysError;
use rtapi_hal::{
    ComponentKey, FunctionKey, Hal, HalBuilder, HalError, HistogramConfig, Permissions,
};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeOptions {
    /// The HAL instance: the segment is `/rtapi-<instance>`.
    pub instance: String,
    /// A forced flavor (`--flavor`); `None` = `RTAPI_FLAVOR`, else autodetection.
    pub flavor: Option<String>,
    /// `mlockall` and prefault (a failure is fatal under rt-preempt and posix).
    pub lock_memory: bool,
    /// Hold `/dev/cpu_dma_latency` at 0 while running.
    pub dma_latency: bool,
    /// Make the segment readable by the owner's group (otherwise 0600).
    pub group_readable: bool,
    /// When a thread is stalled and what follows (see [`watchdog`]).
    pub watchdog: WatchdogOptions,
    /// Start the threads with their functions stopped, as LinuxCNC does until halcmd's `start`
    /// ([`Runtime::set_functions_running`]); the threads keep time and measure from the start.
    pub functions_stopped: bool,
    /// Keep a flight recorder of every thread's last periods (see [`recorder`]).
    pub recorder: Option<recorder::RecorderConfig>,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        RuntimeOptions {
            instance: rtapi_hal::DEFAULT_INSTANCE.to_string(),
            flavor: None,
            lock_memory: true,
            dma_latency: true,
            group_readable: false,
            watchdog: WatchdogOptions::default(),
            functions_stopped: false,
            recorder: None,
        }
    }
}

/// One periodic thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSpec {
    /// The thread's name (`addf` refers to it; a valid HAL name, unique in the runtime).
    pub name: String,
    /// The period: from [`MIN_PERIOD`](crate::rt::units::MIN_PERIOD) to
    /// [`MAX_PERIOD`](crate::rt::units::MAX_PERIOD), the same rule as the CLI's and configs'.
    pub period: Nanos,
    /// SCHED_FIFO priority; `None` = rate-monotonic (fastest thread 98, next 97, …).
    pub priority: Option<i32>,
    /// CPU to pin to; `None` = the RT CPU detection chose.
    pub cpu: Option<usize>,
    /// How the thread sleeps until each deadline (`nanosleep`, `posix-timer`, `timerfd`).
    pub timer: TimerKind,
    /// How it spends the end of the wait (`sleep`, `hybrid[:MARGIN]`, `spin`).
    pub wake: WakeMode,
    /// Latency at or above which a period is recorded as a spike; `None` = half the period.
    pub spike_threshold: Option<Nanos>,
}

/// A thread spec that breaks one of the rules every thread passes (the runtime's, a machine
/// config's and the command line's: one set of checks, one message each).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecProblem {
    /// The period breaks the one period rule (its message says which way).
    Period(String),
    /// A timer that only compare-timers may use.
    ComparisonTimer(TimerKind),
    /// A priority outside SCHED_FIFO's range.
    Priority(i64),
}

impl std::fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecProblem::Period(m) => f.write_str(m),
            SpecProblem::ComparisonTimer(t) => write!(
                f,
                "timer '{t}' is for compare-timers only (it drifts or jitters); use nanosleep, posix-timer or timerfd"
            ),
            SpecProblem::Priority(p) => write!(
                f,
                "priority {p} is outside SCHED_FIFO's 1..=99 (leave it out for rate-monotonic)"
            ),
        }
    }
}

impl SpecProblem {
    /// A SCHED_FIFO priority: 1..=99.
    pub(crate) fn check_priority(p: i64) -> Result<i32, SpecProblem> {
        match p {
            1..=99 => Ok(p as i32),
            _ => Err(SpecProblem::Priority(p)),
        }
    }

    /// A production timer, unless `comparison` allows compare-timers' drivers.
    pub(crate) fn check_timer(t: TimerKind, comparison: bool) -> Result<TimerKind, SpecProblem> {
        if t.is_comparison_only() && !comparison {
            Err(SpecProblem::ComparisonTimer(t))
        } else {
            Ok(t)
        }
    }
}

impl ThreadSpec {
    /// The checks every thread passes before it is placed, configured or hosted: the one period
    /// rule (the command line's and the configs'), a valid HAL name, a production timer (unless
    /// `comparison` allows compare-timers' drivers), a SCHED_FIFO priority in 1..=99.
    pub(crate) fn check(&self, comparison: bool) -> Result<(), RuntimeError> {
        let problem = |problem| RuntimeError::Spec {
            name: self.name.clone(),
            problem,
        };
        crate::rt::units::check_period(self.period).map_err(|e| problem(SpecProblem::Period(e)))?;
        rtapi_hal::name::validate(&self.name).map_err(RuntimeError::Hal)?;
        SpecProblem::check_timer(self.timer, comparison).map_err(problem)?;
        if let Some(p) = self.priority {
            SpecProblem::check_priority(p.into()).map_err(problem)?;
        }
        Ok(())
    }

    /// A thread with the defaults: rate-monotonic priority, detect's RT CPU, `nanosleep`, `sleep`.
    pub fn new(name: &str, period: Nanos) -> ThreadSpec {
        ThreadSpec {
            name: name.to_string(),
            period,
            priority: None,
            cpu: None,
            timer: TimerKind::default(),
            wake: WakeMode::default(),
            spike_threshold: None,
        }
    }
}

/// Why configuring or starting a runtime failed. The CLI maps each kind to its exit code.
#[derive(Debug)]
pub enum RuntimeError {
    /// The flavor asked for cannot run here, or is unknown.
    Flavor(FlavorError),
    /// A HAL registration was refused (bad name, duplicate, type mismatch, …).
    Hal(HalError),
    /// The configuration is inconsistent (unknown thread, spin without a CPU, …).
    Config(String),
    /// A thread's spec breaks a rule (period, timer, priority).
    Spec {
        /// The thread.
        name: String,
        /// The rule it breaks.
        problem: SpecProblem,
    },
    /// The segment could not be built or published (name in use, squatted, no memory, …).
    Segment(HalError),
    /// An essential hardening step failed under a flavor that requires it.
    Harden {
        /// The failed step and what to do.
        failure: StepFailure,
        /// The flavor that requires it.
        flavor: Flavor,
    },
    /// The signal handlers the runtime needs could not be installed.
    Signals(SysError),
    /// An RT thread could not be created.
    Spawn {
        /// Its name.
        thread: String,
        /// What the OS said.
        error: std::io::Error,
    },
    /// An RT thread could not set itself up (policy, CPU, stack, timer).
    Thread {
        /// Its name.
        thread: String,
        /// What failed.
        error: SetupError,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Flavor(e) => e.fmt(f),
            RuntimeError::Hal(e) | RuntimeError::Segment(e) => e.fmt(f),
            RuntimeError::Config(m) => f.write_str(m),
            RuntimeError::Spec { name, problem } => write!(f, "thread '{name}': {problem}"),
            RuntimeError::Harden { failure, flavor } => {
                write!(f, "{} (flavor {flavor})", failure.message)
            }
            RuntimeError::Signals(e) => {
                write!(f, "cannot install the runtime's signal handlers: {e}")
            }
            RuntimeError::Spawn { thread, error } => {
                write!(f, "cannot spawn thread {thread}: {error}")
            }
            RuntimeError::Thread { thread, error } => write!(f, "thread {thread}: {error}"),
        }
    }
}

impl std::error::Error for RuntimeError {}

impl From<HalError> for RuntimeError {
    fn from(e: HalError) -> Self {
        RuntimeError::Hal(e)
    }
}

impl From<FlavorError> for RuntimeError {
    fn from(e: FlavorError) -> Self {
        RuntimeError::Flavor(e)
    }
}

/// The flavor an instance runs under (its own threads' or hosted ones'): `forced` (`--flavor`),
/// then `RTAPI_FLAVOR`, then autodetection; its warnings logged.
pub(super) fn select_flavor(
    system: &SystemReport,
    forced: Option<&str>,
) -> Result<Selection, RuntimeError> {
    let env = std::env::var("RTAPI_FLAVOR").ok();
    let selection = flavor::select(system, forced, env.as_deref())?;
    for w in &selection.warnings {
        log::warn!("{w}");
    }
    Ok(selection)
}

/// A running runtime's stop requests, readable without the runtime ([`Runtime::stop_probe`]).
#[derive(Clone)]
pub struct StopProbe {
    signal: &'static Arc<AtomicBool>,
    stalled: Arc<AtomicBool>,
}

impl StopProbe {
    /// A stop request (signal or stall), if one came.
    pub fn poll(&self) -> Option<StopReason> {
        if self.signal.load(Ordering::Relaxed) {
            Some(StopReason::Signal)
        } else if self.stalled.load(Ordering::Relaxed) {
            Some(StopReason::Stalled)
        } else {
            None
        }
    }
}

/// The configuring state: registrations only.
pub struct Configuring {
    system: SystemReport,
    selection: Selection,
    opts: RuntimeOptions,
    hal: HalBuilder,
    threads: Vec<ThreadSpec>,
    factories: Vec<(FunctionKey, String, FunctionFactory)>,
    addf: Vec<(String, String, Option<usize>)>,
    histogram: HistogramConfig,
    allow_comparison_timers: bool,
    /// The `rtapi` component owning the threads' health objects, once a thread exists.
    health_owner: Option<ComponentKey>,
    /// Each thread's and each function's health objects (see [`health`]).
    thread_health: std::collections::HashMap<String, health::ThreadKeys>,
    function_health: std::collections::HashMap<String, health::FunctionKeys>,
    /// Hosted code loaded into this runtime ([`resident`]); last, so it goes after the factories.
    residents: resident::Kept,
}

/// The running state.
pub struct Running {
    hal: Hal,
    threads: Vec<RunningThread>,
    stop: Arc<AtomicBool>,
    /// The event drainer, the watchdog and the recorder's writer, on the housekeeping CPUs.
    housekeeping: housekeeping::Housekeeping,
    /// Set by the watchdog when a stall should end the run.
    stalled_stop: Arc<AtomicBool>,
    signal: &'static Arc<AtomicBool>,
    selection: Selection,
    system: SystemReport,
    started: Instant,
    origin: Nanos,
    _hardening: Hardening,
    /// Every function's code (slot table), each thread's published run list (same order as
    /// `threads`), the slot of each function key; structural changes hold `live`.
    slots: Arc<slots::Slots>,
    lists: Vec<Arc<runlist::RunListCell>>,
    thread_keys: Vec<rtapi_hal::ThreadKey>,
    slot_of: std::sync::Mutex<std::collections::HashMap<rtapi_hal::FunctionKey, u32>>,
    live: std::sync::Mutex<()>,
    /// The flight recorder, if configured (its `rtapi-recorder` thread is housekeeping's).
    recorder: Option<Arc<recorder::Recorder>>,
    /// Hosted code its threads call into ([`resident`]): released by `stop` only.
    residents: resident::Residents,
}

/// A thread as it was started.
#[derive(Debug, Clone)]
pub struct StartedThread {
    /// Its name.
    pub name: String,
    /// Its period.
    pub period: Nanos,
    /// The SCHED_FIFO priority it got (0 under `sim`).
    pub priority: i32,
    /// The CPU it is pinned to.
    pub cpu: usize,
    /// Its timer driver.
    pub timer: TimerKind,
    /// Its wake mode.
    pub wake: WakeMode,
    /// Its functions, in run order.
    pub functions: Vec<String>,
    /// Its kernel thread id, once it has set itself up (for tracing and `sched_setscheduler`).
    pub tid: Option<i32>,
}

pub(super) struct RunningThread {
    info: StartedThread,
    handle: JoinHandle<()>,
    heartbeat: Arc<Heartbeat>,
}

/// The runtime, in its life-cycle state `S`: [`Configuring`] (register threads, functions, HAL
/// objects) or [`Running`] (wait, watch, stop).
pub struct Runtime<S> {
    state: S,
}

/// Events a thread can queue before the drainer catches up.
pub(super) const EVENT_CAPACITY: usize = 256;

impl Runtime<Configuring> {
    /// Detects the machine, chooses the flavor (`opts.flavor`, then `RTAPI_FLAVOR`, then autodetection)
    /// and starts an empty HAL.
    pub fn configure(opts: RuntimeOptions) -> Result<Self, RuntimeError> {
        Self::configure_with(opts, SystemReport::detect_live())
    }

    /// As [`configure`](Self::configure), with an already made detection report.
    pub fn configure_with(
        opts: RuntimeOptions,
        system: SystemReport,
    ) -> Result<Self, RuntimeError> {
        let selection = select_flavor(&system, opts.flavor.as_deref())?;
        let mut hal = HalBuilder::new(&opts.instance)?;
        if opts.group_readable {
            // SAFETY: getegid has no preconditions and cannot fail.
            let gid = unsafe { libc::getegid() };
            hal = hal.permissions(Permissions::GroupReadable { gid });
        }
        Ok(Runtime {
            state: Configuring {
                system,
                selection,
                opts,
                hal,
                threads: Vec::new(),
                factories: Vec::new(),
                health_owner: None,
                thread_health: Default::default(),
                function_health: Default::default(),
                addf: Vec::new(),
                histogram: HistogramConfig::default(),
                allow_comparison_timers: false,
                residents: resident::Kept::default(),
            },
        })
    }

    /// The flavor chosen (forced or detected).
    pub fn flavor(&self) -> Flavor {
        self.state.selection.flavor
    }

    /// What detection found about this machine.
    pub fn system(&self) -> &SystemReport {
        &self.state.system
    }

    /// Keeps hosted code this runtime's threads will call into (a LinuxCNC module): dropped with a
    /// runtime that never starts, else released by [`stop`](Runtime::stop) once no thread can be
    /// inside it (see `resident`).
    pub fn keep_resident(&mut self, r: Resident) {
        self.state.residents.push(r);
    }

    /// The HAL under construction: components register their pins, params and signals here.
    pub fn hal(&mut self) -> &mut HalBuilder {
        &mut self.state.hal
    }

    /// The latency histogram shape of every thread (default 1 µs bins up to 1 ms).
    pub fn histogram(&mut self, histogram: HistogramConfig) {
        self.state.histogram = histogram;
    }

    /// Lets threads use the comparison-only timers (`relative-nanosleep`, `select`, `itimer`); only
    /// `compare-timers` does this, to show what goes wrong with them.
    pub fn allow_comparison_timers(&mut self) {
        self.state.allow_comparison_timers = true;
    }

    /// Declares a periodic thread.
    pub fn thread(&mut self, spec: ThreadSpec) -> Result<(), RuntimeError> {
        let s = &self.state;
        if s.threads.iter().any(|t| t.name == spec.name) {
            return Err(RuntimeError::Config(format!(
                "thread '{}' is declared twice",
                spec.name
            )));
        }
        spec.check(s.allow_comparison_timers)?;
        let st = &mut self.state;
        let owner = health::owner(&mut st.hal, &mut st.health_owner)?;
        let keys = health::declare_thread(&mut st.hal, owner, &spec.name)?;
        st.thread_health.insert(spec.name.clone(), keys);
        st.threads.push(spec);
        Ok(())
    }

    /// Registers a function of `component` and the factory that makes its per-period body.
    pub fn function(
        &mut self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), RuntimeError> {
        let key = self.state.hal.function(component, name)?;
        let health = health::declare_function(&mut self.state.hal, component, name)?;
        self.state.function_health.insert(name.to_string(), health);
        self.state.factories.push((key, name.to_string(), factory));
        Ok(())
    }

    /// Adds a function to a thread, at `position` (0-based) or at the end.
    pub fn addf(
        &mut self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), RuntimeError> {
        let s = &self.state;
        if !s.threads.iter().any(|t| t.name == thread) {
            let known: Vec<&str> = s.threads.iter().map(|t| t.name.as_str()).collect();
            return Err(RuntimeError::Config(format!(
                "addf {function}: no thread '{thread}' (threads: {})",
                if known.is_empty() {
                    "none declared".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
        if !s.factories.iter().any(|(_, n, _)| n == function) {
            return Err(RuntimeError::Config(format!(
                "addf: no function '{function}'"
            )));
        }
        if s.addf.iter().any(|(f, _, _)| f == function) {
            return Err(RuntimeError::Config(format!(
                "addf: function '{function}' is already added to a thread"
            )));
        }
        self.state
            .addf
            .push((function.to_string(), thread.to_string(), position));
        Ok(())
    }
}

/// Why [`Runtime::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The duration passed.
    Elapsed,
    /// SIGINT or SIGTERM.
    Signal,
    /// Every RT thread ended on its own (a timer failure; see the log).
    ThreadsEnded,
    /// The watchdog found a stalled thread and its action is `stop`.
    Stalled,
}

impl Runtime<Running> {
    /// The live HAL (pins, params, the threads' stats) of this process.
    pub fn hal(&self) -> &Hal {
        &self.state.hal
    }

    /// The flavor the threads run under.
    pub fn flavor(&self) -> Flavor {
        self.state.selection.flavor
    }

    /// What detection found about this machine.
    pub fn system(&self) -> &SystemReport {
        &self.state.system
    }

    /// Every thread as it was started (CPU, priority, functions).
    pub fn threads(&self) -> Vec<StartedThread> {
        // Slot names are read under the live lock: a slot that leaves every list may be freed.
        let _guard = self.state.live.lock().unwrap_or_else(|p| p.into_inner());
        self.state
            .threads
            .iter()
            .zip(&self.state.lists)
            .map(|(t, list)| StartedThread {
                tid: t.heartbeat.tid(),
                functions: list
                    .current()
                    .into_iter()
                    .map(|n| self.state.slots.name(n).to_string())
                    .collect(),
                ..t.info.clone()
            })
            .collect()
    }

    /// The common timeline origin: period `k` of a thread with period `p` is due at `origin + (k+1)·p`.
    pub fn origin(&self) -> Nanos {
        self.state.origin
    }

    /// The CPUs without RT threads, for the process's other threads (empty: no restriction).
    pub fn housekeeping_cpus(&self) -> &[usize] {
        &self.state.housekeeping.cpus
    }

    /// Moves the calling thread (and the threads it spawns later) off the RT CPUs, when there is
    /// another CPU. A command that only watches and waits should do this.
    pub fn keep_caller_off_rt_cpus(&self) {
        if !self.state.housekeeping.cpus.is_empty() {
            if let Err(e) = sched::set_current_affinity(&self.state.housekeeping.cpus) {
                log::warn!("cannot move the main thread off the RT CPUs: {e}");
            }
        }
    }

    /// halcmd's `start` (`true`) and `stop` (`false`) for every thread: from its next period on, a
    /// thread runs its functions or skips them; its timeline, statistics and health pins go on. The
    /// segment's state follows (`RUNNING` or `READY`).
    pub fn set_functions_running(&self, on: bool) {
        for t in &self.state.threads {
            t.heartbeat.set_functions_running(on);
        }
        self.state.hal.set_running(on);
    }

    /// Whether the threads run their functions (see [`set_functions_running`](Self::set_functions_running)).
    pub fn functions_running(&self) -> bool {
        self.state
            .threads
            .iter()
            .all(|t| t.heartbeat.functions_running())
    }

    /// The flight recorder, if configured.
    pub fn recorder(&self) -> Option<&Arc<recorder::Recorder>> {
        self.state.recorder.as_ref()
    }

    /// Time since the threads started.
    pub fn elapsed(&self) -> Duration {
        self.state.started.elapsed()
    }

    /// The stop requests as a handle of their own, to look at without holding what holds the
    /// runtime (a session another thread may keep busy): SIGINT/SIGTERM/SIGHUP and a stall's stop.
    /// The end of every thread is only [`poll_stop`](Self::poll_stop)'s.
    pub fn stop_probe(&self) -> StopProbe {
        StopProbe {
            signal: self.state.signal,
            stalled: Arc::clone(&self.state.stalled_stop),
        }
    }

    /// Why the run should end now, if it should: SIGINT/SIGTERM/SIGHUP, a stall whose action is `stop`, or
    /// every thread ended. Never blocks (for a caller that waits while serving other requests).
    pub fn poll_stop(&self) -> Option<StopReason> {
        if self.state.signal.load(Ordering::Relaxed) {
            Some(StopReason::Signal)
        } else if self.state.stalled_stop.load(Ordering::Relaxed) {
            Some(StopReason::Stalled)
        } else if self.state.threads.iter().all(|t| t.handle.is_finished()) {
            Some(StopReason::ThreadsEnded)
        } else {
            None
        }
    }

    /// Blocks until SIGINT/SIGTERM, the `limit`, or the end of every thread.
    pub fn wait(&self, limit: Option<Duration>) -> StopReason {
        self.wait_with(limit, Duration::from_secs(3600), |_| {})
    }

    /// As [`wait`](Self::wait), calling `on_tick` every `tick` (a live display, a monitor).
    pub fn wait_with(
        &self,
        limit: Option<Duration>,
        tick: Duration,
        mut on_tick: impl FnMut(&Self),
    ) -> StopReason {
        let start = Instant::now();
        let mut next_tick = start + tick;
        loop {
            if self.state.signal.load(Ordering::Relaxed) {
                return StopReason::Signal;
            }
            if self.state.stalled_stop.load(Ordering::Relaxed) {
                return StopReason::Stalled;
            }
            if limit.is_some_and(|l| start.elapsed() >= l) {
                return StopReason::Elapsed;
            }
            if self.state.threads.iter().all(|t| t.handle.is_finished()) {
                return StopReason::ThreadsEnded;
            }
            if Instant::now() >= next_tick {
                on_tick(self);
                next_tick += tick;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Keeps hosted code loaded while running (a live `loadrt`), as
    /// [`Runtime::<Configuring>::keep_resident`].
    pub fn keep_resident(&self, r: Resident) {
        self.state.residents.keep(r);
    }

    /// Releases (drops, last kept first) the residents `pick` chooses; the caller has made sure no
    /// thread runs their code any more (their functions left every run list). Returns how many.
    pub fn release_residents(&self, pick: &dyn Fn(&(dyn std::any::Any + Send)) -> bool) -> usize {
        self.state.residents.release(pick)
    }
}
