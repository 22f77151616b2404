//! The cycle loop of one periodic thread (docs/ARCHITECTURE.md, "The hot path"):
//!
//! 1. wait until the deadline through the thread's timer driver;
//! 2. `now = clock_gettime(CLOCK_MONOTONIC)`, `latency = now − deadline`, `interval = now − previous wake`;
//! 3. run the functions in `addf` order, timing each (a panicking function is disabled and reported);
//! 4. if the work ended past the next deadline(s), those periods are **missed**: counted as overruns and
//!    skipped — never run back to back to catch up; the functions get the real `dt` and the count;
//! 5. record into the thread's stats block; the next deadline is `origin + k·period` on the absolute
//!    timeline (never `now + period`, which drifts).
//!
//! Nothing inside the loop allocates, locks, logs or does I/O: the timer wait, `clock_gettime`,
//! atomic stores into the HAL segment, and — only in a spike period — one `getrusage`.

use super::function::{Cycle, RtFn};
use super::runlist::RunListCell;
use super::slots::{Called, FunctionSlot, Slots};
use crate::rt::clock::{self, Nanos};
use crate::rt::harden::HardenError;
use crate::rt::msg::{Producer, RtEvent};
use crate::rt::sched::{self, Policy, SchedError};
use crate::rt::wake::{CycleTimer, TimerDriver, TimerKind, WakeError};
use crate::rt::SysError;
use rtapi_hal::{PeriodSample, StatsWriter, ThreadRusage};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

/// Everything one RT thread needs, prepared (and allocated) before it starts.
pub(crate) struct ThreadPlan {
    pub name: String,
    pub period: Nanos,
    pub policy: Policy,
    pub cpu: Option<usize>,
    pub timer: CycleTimer,
    /// The instance's functions, and this thread's run list of slot numbers.
    pub slots: Arc<Slots>,
    pub list: Arc<RunListCell>,
    pub stats: StatsWriter,
    pub events: Producer,
    pub stack_prefault: usize,
    /// What the watchdog and the panic hook read.
    pub heartbeat: Arc<Heartbeat>,
    /// Where a panic's message goes (logged by the non-RT side).
    pub panics: std::sync::mpsc::SyncSender<super::panic::PanicReport>,
    /// The thread's health pins and params in the HAL.
    pub health: Option<super::health::ThreadHealth>,
    /// The thread's flight-recorder tap, if the instance records.
    pub recorder: Option<super::recorder::Tap>,
}

/// What a thread shows of itself to its supervisor, outside the HAL: written with relaxed stores
/// by the loop (one per period, two per function), read by the watchdog on another CPU.
#[derive(Debug, Default)]
pub struct Heartbeat {
    /// The period number the loop will wait for next; moves once per completed period.
    progress: AtomicU64,
    /// 0 outside the functions; position + 1 of the function running now.
    in_function: AtomicU32,
    /// The kernel thread id, once set up (0 before).
    tid: AtomicI32,
    /// Whether the loop runs (after arming, until it ends).
    looping: AtomicBool,
    /// halcmd's `stop`: the thread keeps its timeline and its statistics but runs no function.
    paused: AtomicBool,
    /// A hosted thread is in its period wait (`Period::wait`), not in its hosted code.
    waiting: AtomicBool,
}

impl Heartbeat {
    /// Periods completed so far, as the loop's period number (skipped periods included).
    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// The function (position in run order) the thread is in now, if any.
    pub fn in_function(&self) -> Option<u32> {
        match self.in_function.load(Ordering::Relaxed) {
            0 => None,
            p => Some(p - 1),
        }
    }

    /// The thread's kernel tid (for `sched_setscheduler` from outside), once known.
    pub fn tid(&self) -> Option<i32> {
        Some(self.tid.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    /// Whether the cycle loop is running.
    pub fn looping(&self) -> bool {
        self.looping.load(Ordering::Acquire)
    }

    /// Whether the thread runs its functions (halcmd's `start`) or only keeps time (`stop`).
    pub fn functions_running(&self) -> bool {
        !self.paused.load(Ordering::Relaxed)
    }

    /// halcmd's `start` (`true`) and `stop` (`false`): from the next period on, the thread runs its
    /// functions or skips them (its wake, latency statistics and health pins go on either way).
    pub fn set_functions_running(&self, on: bool) {
        self.paused.store(!on, Ordering::Relaxed);
    }

    /// Whether a hosted thread is in its period wait (false while its hosted code runs).
    pub fn waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst)
    }

    /// A hosted thread enters (`true`) or leaves its period wait. Sequentially consistent: its
    /// stopper reads it after setting the stop flag, and the thread reads the flag after this.
    pub(crate) fn set_waiting(&self, on: bool) {
        self.waiting.store(on, Ordering::SeqCst);
    }

    /// `waiting` back to false after the wake, with release ordering: no fence on the wake path
    /// (the Dekker pair is the SeqCst store of `true` and the stop flag's SeqCst load after it).
    #[inline]
    pub(crate) fn set_waiting_released(&self) {
        self.waiting.store(false, Ordering::Release);
    }

    /// The thread's kernel tid, published by the thread itself once it runs.
    pub(crate) fn set_tid(&self, tid: i32) {
        self.tid.store(tid, Ordering::Relaxed);
    }

    /// The loop (or a hosted thread's body) runs from `true` until `false`.
    pub(crate) fn set_looping(&self, on: bool) {
        self.looping.store(on, Ordering::Release);
    }
}

/// What a thread tells the starter: once after its setup (the CPU it runs on), once after arming its
/// timer; any failure ends the thread and makes `start()` fail.
pub(crate) type SetupResult = Result<usize, SetupError>;

/// Why an RT thread could not start; [`crate::runtime::RuntimeError::Thread`] carries it with the
/// thread's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetupError {
    /// Blocking SIGINT/SIGTERM in the thread failed.
    Signals(SysError),
    /// The scheduling policy or priority was refused (privileges: the message says which).
    Policy(SchedError),
    /// Pinning to the CPU failed, or the CPU could not be read back.
    Cpu(SchedError),
    /// The stack could not be prefaulted.
    Stack(HardenError),
    /// The timer could not be armed.
    Arm {
        /// The timer driver.
        timer: TimerKind,
        /// What the driver said.
        error: WakeError,
    },
    /// The thread did not answer the starter within its deadline.
    NoAnswer,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Signals(e) => write!(f, "cannot block SIGINT/SIGTERM: {e}"),
            SetupError::Policy(e) | SetupError::Cpu(e) => e.fmt(f),
            SetupError::Stack(e) => write!(f, "cannot prefault the stack: {e}"),
            SetupError::Arm { timer, error } => write!(f, "cannot arm the {timer} timer: {error}"),
            SetupError::NoAnswer => f.write_str("did not finish its setup within 5 s"),
        }
    }
}

/// Drift is the smallest wake latency among this many recent periods: how far the wakes sit from the
/// absolute timeline with one-off spikes filtered out. For an absolute timer it stays near the typical
/// wake latency; for a timeline that slips (a relative sleep) it grows every period.
pub(crate) const DRIFT_WINDOW: usize = 8;

/// Runs on the new thread: set up (policy, CPU, stack), report, wait for the common origin, loop.
pub(crate) fn run(
    mut plan: ThreadPlan,
    stop: Arc<AtomicBool>,
    ready: mpsc::Sender<SetupResult>,
    origin: mpsc::Receiver<Option<Nanos>>,
) {
    let setup = setup(&plan);
    // SAFETY: gettid has no preconditions and cannot fail.
    plan.heartbeat
        .tid
        .store(unsafe { libc::gettid() }, Ordering::Relaxed);
    super::panic::route_panics_of_current_thread(
        &plan.name,
        plan.panics.clone(),
        plan.heartbeat.clone(),
    );
    let _crash =
        super::crash::enter_thread(&plan.name, plan.heartbeat.clone(), Arc::clone(&plan.slots));
    let (ok, setup_cpu) = (setup.is_ok(), setup.clone().unwrap_or(0));
    let _ = ready.send(setup);
    // The starter sends the origin once every thread is set up, or None to abort.
    let Ok(Some(origin)) = origin.recv() else {
        return;
    };
    if !ok {
        return;
    }
    let first = origin + plan.period;
    let armed = plan
        .timer
        .arm(first, plan.period)
        .map_err(|error| SetupError::Arm {
            timer: plan.timer.kind(),
            error,
        });
    let armed_ok = armed.is_ok();
    let _ = ready.send(armed.map(|_| setup_cpu));
    if !armed_ok {
        return;
    }
    plan.stats.set_running(true);
    plan.heartbeat.looping.store(true, Ordering::Release);
    cycle_loop(&mut plan, first, &stop);
    plan.heartbeat.looping.store(false, Ordering::Release);
    plan.stats.set_running(false);
}

fn setup(plan: &ThreadPlan) -> SetupResult {
    setup_current(plan.policy, plan.cpu, plan.stack_prefault)
}

/// Sets the calling thread up as an RT thread: SIGINT/SIGTERM blocked (the process's main thread
/// answers them), `policy`, pinned to `cpu` (else where it runs), `stack_prefault` bytes of stack
/// touched. Returns the CPU.
pub(crate) fn setup_current(
    policy: Policy,
    cpu: Option<usize>,
    stack_prefault: usize,
) -> SetupResult {
    crate::rt::signals::block_stop_signals_in_current_thread().map_err(SetupError::Signals)?;
    sched::set_current_policy(policy).map_err(SetupError::Policy)?;
    let cpu = match cpu {
        Some(cpu) => {
            sched::pin_current_thread(cpu).map_err(SetupError::Cpu)?;
            cpu
        }
        None => sched::current_cpu().map_err(|e| SetupError::Cpu(e.into()))?,
    };
    if stack_prefault > 0 {
        crate::rt::harden::prefault_stack(stack_prefault).map_err(SetupError::Stack)?;
    }
    Ok(cpu)
}

/// The loop itself. `first` is the deadline of period 0.
fn cycle_loop(plan: &mut ThreadPlan, first: Nanos, stop: &Arc<AtomicBool>) {
    let mut cycler = Cycler::with_slots(
        first,
        plan.period,
        Arc::clone(&plan.slots),
        Arc::clone(&plan.list),
    )
    .watched_by(plan.heartbeat.clone());
    if let Some(h) = plan.health.take() {
        cycler = cycler.with_health(h);
    }
    if let Some(tap) = plan.recorder.take() {
        cycler = cycler.with_recorder(tap);
    }
    cycler.start_usage_count();
    let mut deadline = first;
    // A stop request also interrupts the wait itself (Runtime::stop signals the thread), so the loop
    // ends within microseconds whatever the period.
    plan.timer.stop_on(Arc::clone(stop));
    while !stop.load(Ordering::Relaxed) {
        let info = match plan.timer.wait_until(deadline) {
            Ok(info) => info,
            Err(WakeError::Interrupted) => break,
            Err(e) => {
                plan.events.push(RtEvent::WaitFailed {
                    errno: errno_of(&e),
                });
                return;
            }
        };
        let now = clock::now();
        // A wake that comes after the stop request is not a period of the run: the counts then cover
        // exactly the periods that fell due before the stop.
        if stop.load(Ordering::Relaxed) {
            break;
        }
        deadline = cycler.period(
            now,
            info.kernel_overruns.unwrap_or(0),
            &plan.stats,
            &plan.events,
        );
    }
}

/// A thread's timeline and the accounting of its periods: the one place of the rules for latency,
/// missed periods (skipped, counted), drift, spikes, the stats record, the health pins written at
/// the wake and after the work, the flight-recorder tap and the heartbeat. Two loops use it: the
/// runtime's own cycle loop ([`Cycler`], which runs the functions between [`woke`](Ledger::woke) and
/// [`finished`](Ledger::finished)) and a hosted thread, whose foreign code runs between them
/// (`hosted/period.rs`, [`Period::wait`](super::hosted::Period::wait)). Nothing in it allocates, locks or
/// logs.
pub(crate) struct Ledger {
    first: Nanos,
    period: Nanos,
    /// Latencies of the last [`DRIFT_WINDOW`] periods, for the drift estimate.
    recent: [i64; DRIFT_WINDOW],
    /// Period number of the current deadline.
    k: u64,
    prev_wake: Option<Nanos>,
    missed_before: u64,
    heartbeat: Arc<Heartbeat>,
    /// The thread's usage at the previous spike sample (or the loop's start).
    usage_base: Option<sched::ThreadUsage>,
    /// Health pins and params to write, if the thread has them in the HAL.
    health: Option<super::health::ThreadHealth>,
    /// Writes each period into the flight recorder.
    recorder: Option<super::recorder::Tap>,
}

impl Ledger {
    /// A timeline whose period 0 is due at `first`.
    pub(crate) fn new(first: Nanos, period: Nanos) -> Ledger {
        Ledger {
            first,
            period,
            recent: [i64::MAX; DRIFT_WINDOW],
            k: 0,
            prev_wake: None,
            missed_before: 0,
            heartbeat: Arc::default(),
            usage_base: None,
            health: None,
            recorder: None,
        }
    }

    pub(crate) fn set_heartbeat(&mut self, heartbeat: Arc<Heartbeat>) {
        self.heartbeat = heartbeat;
    }

    pub(crate) fn set_health(&mut self, health: super::health::ThreadHealth) {
        self.health = Some(health);
    }

    pub(crate) fn heartbeat(&self) -> &Arc<Heartbeat> {
        &self.heartbeat
    }

    /// Takes the thread's current usage as the base of the first spike's counts (on the thread).
    pub(crate) fn start_usage_count(&mut self) {
        self.usage_base = sched::thread_usage().ok();
    }

    /// The deadline the next wait is for.
    #[inline]
    pub(crate) fn deadline(&self) -> Nanos {
        self.first + self.period * self.k as i64
    }

    /// The period number of [`deadline`](Self::deadline) (skipped periods included).
    #[inline]
    pub(crate) fn number(&self) -> u64 {
        self.k
    }

    /// Periods missed (skipped) right before the current one.
    #[inline]
    pub(crate) fn missed_before(&self) -> u64 {
        self.missed_before
    }

    /// The wake before the current one.
    #[inline]
    pub(crate) fn prev_wake(&self) -> Option<Nanos> {
        self.prev_wake
    }

    /// Deadlines already gone by at `t`, from the current one on, are passed over before the first
    /// wake (the first work of a hosted thread ended after its first deadline): the timeline starts
    /// at the first deadline still ahead, as LinuxCNC re-anchors its threads after their init pass.
    /// They are not periods of the run, so not counted as missed; returns how many.
    #[inline]
    pub(crate) fn skip_to(&mut self, t: Nanos) -> u64 {
        let passed = match clock::missed_periods(self.deadline(), t, self.period) {
            0 if t < self.deadline() => 0,
            n => n + 1,
        };
        self.k += passed;
        self.heartbeat.progress.store(self.k, Ordering::Relaxed);
        passed
    }

    /// The thread woke at `now` for [`deadline`](Self::deadline): the wake latency. Nothing is
    /// written here — the health pins the period's work sees were written at the previous period's
    /// end ([`finished`](Self::finished)), so the wake goes straight to the work.
    #[inline]
    pub(crate) fn woke(&self, now: Nanos) -> i64 {
        (now - self.deadline()).as_nanos()
    }

    /// A function of the thread faulted in this period (counted in the health pins).
    #[inline]
    pub(crate) fn fault(&mut self) {
        if let Some(h) = &mut self.health {
            h.fault();
        }
    }

    /// The period woken at `now` (with `latency`) ended its work at `end`: deadlines that went by
    /// meanwhile are skipped and counted (never run back to back; a periodic kernel timer's own
    /// count, `kernel_overruns`, can only confirm the clock's), the period is recorded, and the
    /// next deadline on the absolute timeline is returned.
    #[inline]
    pub(crate) fn finished(
        &mut self,
        now: Nanos,
        latency: i64,
        end: Nanos,
        kernel_overruns: u64,
        any_fault: bool,
        stats: &StatsWriter,
    ) -> Nanos {
        let exec = (end - now).as_nanos().max(0) as u64;
        let missed = clock::missed_periods(self.deadline(), end, self.period).max(kernel_overruns);
        // Before the sleep: what the next period's functions must see (`late` among it).
        if let Some(h) = &mut self.health {
            h.period_end(exec, latency, missed);
        }
        self.recent[(self.k % DRIFT_WINDOW as u64) as usize] = latency;
        let drift = self.recent.iter().copied().min().unwrap_or(latency);
        // A spike's preemptions and page faults: counted since the previous spike sample (or the
        // loop's start), so that a figure belongs to the spike, not to the thread's whole life.
        let rusage = if stats.is_spike(latency, missed) {
            sched::thread_usage().ok().map(|u| {
                let d = self.usage_base.map_or(u, |b| u.since(&b));
                self.usage_base = Some(u);
                ThreadRusage {
                    involuntary_ctx_switches: d.involuntary_switches,
                    page_faults: d.minor_faults + d.major_faults,
                }
            })
        } else {
            None
        };
        stats.record(&PeriodSample {
            now_ns: now.as_nanos().max(0) as u64,
            latency_ns: latency,
            interval_ns: self
                .prev_wake
                .map_or(0, |p| (now - p).as_nanos().max(0) as u64),
            exec_ns: exec,
            missed,
            drift_ns: drift,
            rusage,
        });
        if let Some(tap) = &mut self.recorder {
            tap.record(self.k, now, latency, exec, missed, any_fault);
        }
        self.prev_wake = Some(now);
        self.missed_before = missed;
        self.k += 1 + missed;
        self.heartbeat.progress.store(self.k, Ordering::Relaxed);
        self.deadline()
    }
}

/// The bookkeeping of one period after the wake — everything of the cycle loop but the wait: build the
/// [`Cycle`], run and time the functions, account missed periods, record the stats, and give the next
/// deadline on the absolute timeline. Public so that its cost can be benchmarked on its own.
pub struct Cycler {
    /// The functions (the instance's slot table) and this thread's published run list.
    slots: Arc<Slots>,
    list: Arc<RunListCell>,
    /// The run list this thread took last (slot numbers; capacity reserved: adopting never allocates).
    local: Vec<u32>,
    /// The published word of `local`.
    seen: u64,
    /// The timeline and the accounting of every period.
    ledger: Ledger,
    /// Times the functions.
    clock: clock::IntervalClock,
}

impl Cycler {
    /// A timeline whose period 0 is due at `first`, running `functions` in this order (untimed in
    /// the HAL: no timing records). Allocates here, never in [`Cycler::period`].
    pub fn new(first: Nanos, period: Nanos, functions: Vec<RtFn>) -> Cycler {
        let slots = Slots::with_capacity(functions.len());
        let list: Vec<u32> = functions
            .into_iter()
            .enumerate()
            .filter_map(|(i, f)| slots.put(FunctionSlot::new(format!("f{i}"), f, None, None)))
            .collect();
        let cell = RunListCell::new(&list).expect("a run list longer than MAX_RUN_LIST");
        Cycler::with_slots(first, period, Arc::new(slots), Arc::new(cell))
    }

    /// A timeline whose period 0 is due at `first`, running the run list published in `list` from
    /// `slots` (changes to the list are taken at the start of a period).
    pub fn with_slots(
        first: Nanos,
        period: Nanos,
        slots: Arc<Slots>,
        list: Arc<RunListCell>,
    ) -> Cycler {
        let mut local = Vec::with_capacity(super::runlist::MAX_RUN_LIST);
        local.extend(list.current());
        Cycler {
            slots,
            list,
            local,
            seen: 0,
            ledger: Ledger::new(first, period),
            clock: clock::IntervalClock::get(),
        }
    }

    /// Writes one record per period into a flight recorder (see [`super::recorder`]).
    pub fn with_recorder(mut self, tap: super::recorder::Tap) -> Cycler {
        self.ledger.recorder = Some(tap);
        self
    }

    /// Writes the thread's health into the HAL each period (see [`super::health`]).
    pub fn with_health(mut self, health: super::health::ThreadHealth) -> Cycler {
        self.ledger.set_health(health);
        self
    }

    /// Takes the thread's current usage as the base of the first spike's counts; call it on the
    /// thread that runs the periods, before the first one.
    pub fn start_usage_count(&mut self) {
        self.ledger.start_usage_count();
    }

    /// Publishes progress and the function running into `heartbeat` (the runtime's watchdog reads it).
    pub fn watched_by(mut self, heartbeat: Arc<Heartbeat>) -> Cycler {
        self.ledger.set_heartbeat(heartbeat);
        self
    }

    /// The heartbeat this cycler writes.
    pub fn heartbeat(&self) -> &Arc<Heartbeat> {
        self.ledger.heartbeat()
    }

    /// The deadline the next wait is for.
    pub fn deadline(&self) -> Nanos {
        self.ledger.deadline()
    }

    /// One period: the thread woke at `now` for [`Cycler::deadline`]; `kernel_overruns` is what a
    /// periodic kernel timer reported (0 if none). Returns the next deadline.
    #[inline]
    pub fn period(
        &mut self,
        now: Nanos,
        kernel_overruns: u64,
        stats: &StatsWriter,
        events: &Producer,
    ) -> Nanos {
        // The interval clock's reading at the wake: the first function starts from it, and the end
        // of the period is measured from it (one read per function, none extra).
        let clk = self.clock;
        // A run list changed by addf/delf is taken here, whole (no allocation, no wait).
        self.list.adopt(&mut self.seen, &mut self.local);
        let run_functions = !self.local.is_empty() && self.ledger.heartbeat.functions_running();
        let start = if run_functions { clk.read() } else { 0 };
        let period_ns = self.ledger.period.as_nanos() as u64;
        let cycle = Cycle {
            number: self.ledger.number(),
            period_ns,
            dt_ns: self
                .ledger
                .prev_wake()
                .map_or(period_ns, |p| (now - p).as_nanos().max(0) as u64),
            missed: self.ledger.missed_before(),
            now_ns: now.as_nanos(),
        };

        // The wake's latency (its health pins are written at the period's end, with `late`).
        let latency = self.ledger.woke(now);
        // One interval-clock read per function (the TSC where the kernel keeps time with it):
        // each function's end is the next one's start.
        let mut t0 = start;
        let mut any_fault = false;
        if run_functions {
            for &n in &self.local {
                let Some(slot) = self.slots.get(n) else {
                    continue;
                };
                self.ledger
                    .heartbeat
                    .in_function
                    .store(n + 1, Ordering::Relaxed);
                // SAFETY: this thread's adopted run list holds `n`: the slot is this thread's alone
                // (slots.rs, ownership).
                let called = unsafe { slot.call(&cycle) };
                if called == Called::Disabled {
                    continue;
                }
                let t1 = clk.read();
                let faulted = called == Called::Panicked;
                any_fault |= faulted;
                if faulted {
                    self.ledger.fault();
                    events.push(RtEvent::FunctionFaulted {
                        function: n.min(u32::from(u16::MAX)) as u16,
                    });
                }
                // SAFETY: as above.
                unsafe { slot.record(clk.ns(t0, t1), faulted) };
                t0 = t1;
            }
        }
        // The end, for missed deadlines: the wake plus the interval clock's time since it. Only the
        // few instructions between the wake's own clock read and `start` are not counted.
        let end = if !run_functions {
            now
        } else {
            now + Nanos::from_nanos(clk.ns(start, t0).min(i64::MAX as u64) as i64)
        };
        self.ledger
            .heartbeat
            .in_function
            .store(0, Ordering::Relaxed);
        let next = self
            .ledger
            .finished(now, latency, end, kernel_overruns, any_fault, stats);
        // The I/O the period's functions noted (`runtime::io::note_io`), after its latency and
        // execution time, as a hosted thread records it.
        super::io::record(super::io::take(), stats);
        next
    }
}

/// The errno behind a failed wait (EINVAL for a misuse the driver caught itself).
fn errno_of(e: &WakeError) -> i32 {
    match e {
        WakeError::Sys(sys) => sys.errno as i32,
        _ => libc::EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::msg;
    use rtapi_hal::{HalBuilder, ThreadConfig};

    /// Touches `pages` fresh pages of a new anonymous mapping: that many minor page faults on this
    /// thread (heap memory could be pages another test already touched).
    fn fault_pages(pages: usize) {
        let len = pages * 4096;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        for i in (0..len).step_by(4096) {
            // SAFETY: `i < len`, inside the mapping made above; volatile so the touch stays.
            unsafe { std::ptr::write_volatile(p.cast::<u8>().add(i), 1) };
        }
        // SAFETY: exactly the mapping made above, no longer used.
        unsafe { libc::munmap(p, len) };
    }

    #[test]
    fn a_spike_counts_the_page_faults_since_the_previous_spike_not_since_start() {
        let mut b = HalBuilder::new(&format!("cycler-rusage-{}", std::process::id())).unwrap();
        let t = b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
        let hal = b.build().unwrap();
        let stats = hal.stats_writer(t).unwrap();
        let (events, _c) = msg::channel(4);
        let period = Nanos::from_millis(1);
        let mut cycler = Cycler::new(clock::now(), period, Vec::new());
        cycler.start_usage_count();
        // Latency of 0.9 periods: a spike (the threshold is half a period).
        let spike = |c: &mut Cycler| {
            let now = c.deadline() + Nanos::from_micros(900);
            c.period(now, 0, &stats, &events);
        };
        fault_pages(300);
        spike(&mut cycler); // ≥ 300 faults since the start
        spike(&mut cycler); // (almost) none since the previous spike
        let s = hal.reader().unwrap().thread_stats("servo").unwrap();
        let mut by_cycle: Vec<_> = s.worst_spikes().collect();
        by_cycle.sort_by_key(|sp| sp.cycle);
        assert_eq!(by_cycle.len(), 2);
        assert!(by_cycle[0].page_faults >= 300, "{:?}", by_cycle[0]);
        assert!(by_cycle[1].page_faults < 100, "{:?}", by_cycle[1]);
    }
}
