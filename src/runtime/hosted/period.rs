//! The hosted thread's own side: its start on the new thread ([`run`]: set up, timer armed on the
//! instance's timeline, the body run), its period boundary ([`Period::wait`], what the body calls
//! once per period) and foreign tasks that never return ([`Period::run_foreign`], the
//! `rtapi_hosted_wait` entry point C calls). What the owner sees of the thread is in the module
//! above (`hosted/mod.rs`). Nothing here allocates, locks or logs once the thread runs its body.

use super::super::health;
use super::super::panic::PanicReport;
use super::super::slots::Slots;
use super::super::thread::{self, Heartbeat, Ledger, SetupError};
use crate::rt::clock::{self, Nanos};
use crate::rt::sched::Policy;
use crate::rt::wake::{CycleTimer, TimerDriver, WakeError};
use rtapi_hal::StatsWriter;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc};

/// What [`Period::wait`] tells the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the body must return when wait() says Stop"]
pub enum Flow {
    /// The thread woke for its next period: do the period's work, then wait again.
    Continue,
    /// The owner asked the thread to end (or its timer failed): return from the body.
    Stop,
}

/// The period boundary of one hosted thread, handed to its body. Lives on the thread's stack;
/// nothing in it allocates after the thread started.
pub struct Period {
    ledger: Ledger,
    timer: CycleTimer,
    stats: StatsWriter,
    period: Nanos,
    control: Arc<Control>,
    heartbeat: Arc<Heartbeat>,
    /// The wake of the period whose work runs now: (time, latency, periodic timer's overruns).
    woke: Option<(Nanos, i64, u64)>,
    /// `wait()` said Stop once: it says so from then on.
    ended: bool,
}

/// What the owner and a hosted thread share, besides the heartbeat.
pub(super) struct Control {
    /// The owner asks the thread to end.
    pub(super) stop: Arc<AtomicBool>,
    /// The errno of a failed timer wait (0: none).
    pub(super) wait_error: AtomicI32,
    /// The body panicked (a Rust body: the panic was caught at the thread's top).
    pub(super) panicked: AtomicBool,
}

impl Period {
    /// The period boundary, called once per period by the body: records the period whose work just
    /// ended, sleeps to the next deadline on the absolute timeline (deadlines already gone by are
    /// skipped and counted as missed, never run back to back), and measures the wake. Returns
    /// [`Flow::Stop`] without sleeping once the owner asked the thread to end, or when a stop
    /// interrupts the sleep; then the body should return. No allocation, lock, log or I/O: the
    /// timer's wait, `clock_gettime`, stores into the segment and, in a spike period only, one
    /// `getrusage`.
    #[inline]
    pub fn wait(&mut self) -> Flow {
        let end = clock::now();
        self.complete(end);
        if self.ended || self.control.stop.load(Ordering::Relaxed) {
            self.ended = true;
            return Flow::Stop;
        }
        let deadline = self.ledger.deadline();
        self.heartbeat.set_waiting(true);
        // Read after `waiting` is set (SeqCst both): a stopper that set the flag before sees this
        // thread waiting and interrupts it until it ends, so the request cannot be slept through.
        let result = if self.control.stop.load(Ordering::SeqCst) {
            Err(WakeError::Interrupted)
        } else {
            self.timer.wait_until(deadline)
        };
        // Release, not SeqCst: only the store of `true` above pairs with the stopper's reads. A
        // stopper can read `true` just after the wake under any ordering (before this store runs);
        // release ordering widens that window by the store buffer's drain, and keeps a fence off
        // the wake path.
        self.heartbeat.set_waiting_released();
        match result {
            Ok(info) => {
                let now = clock::now();
                // A wake after the stop request is not a period of the run (as in the cycle loop).
                if self.control.stop.load(Ordering::Relaxed) {
                    self.ended = true;
                    return Flow::Stop;
                }
                let latency = self.ledger.woke(now);
                self.woke = Some((now, latency, info.kernel_overruns.unwrap_or(0)));
                Flow::Continue
            }
            Err(WakeError::Interrupted) => {
                self.ended = true;
                Flow::Stop
            }
            Err(e) => {
                let errno = match &e {
                    WakeError::Sys(sys) => sys.errno as i32,
                    _ => libc::EINVAL,
                };
                self.control.wait_error.store(errno, Ordering::Relaxed);
                self.ended = true;
                Flow::Stop
            }
        }
    }

    /// The period whose work ended at `end` is recorded; before the first wake, deadlines that the
    /// body's first pass overran are passed over (the timeline starts at the next one).
    #[inline]
    fn complete(&mut self, end: Nanos) {
        match self.woke.take() {
            Some((wake, latency, overruns)) => {
                self.ledger
                    .finished(wake, latency, end, overruns, false, &self.stats);
                // The I/O the period's foreign code noted (`runtime::io::note_io`).
                super::super::io::record(super::super::io::take(), &self.stats);
            }
            None if !self.ended && self.ledger.prev_wake().is_none() => {
                self.ledger.skip_to(end);
            }
            None => {}
        }
        // I/O noted outside a woken period (before the first wake) belongs to no period.
        let _ = super::super::io::take();
    }

    /// The number of the current period on the thread's timeline (skipped periods included): after
    /// a `wait()` that returned [`Flow::Continue`], the period just woken for.
    pub fn number(&self) -> u64 {
        self.ledger.number()
    }

    /// The deadline of the current period (after `Continue`: the one just woken for).
    pub fn deadline(&self) -> Nanos {
        self.ledger.deadline()
    }

    /// Periods missed (skipped) right before the current one.
    pub fn missed(&self) -> u64 {
        self.ledger.missed_before()
    }

    /// The thread's period.
    pub fn period(&self) -> Nanos {
        self.period
    }

    /// Whether the owner asked the thread to end (the next `wait()` returns [`Flow::Stop`]).
    pub fn stop_requested(&self) -> bool {
        self.ended || self.control.stop.load(Ordering::Relaxed)
    }
}

// ---- foreign loops that never return (LinuxCNC's thread_task) -----------------------------------

std::thread_local! {
    /// The Period of the foreign task this thread runs in [`Period::run_foreign`] (null outside).
    static CURRENT: std::cell::Cell<*mut Period> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

extern "C" {
    /// hosted_exit.c: calls `task(arg)` after a setjmp; 1 if `rtapi_hosted_wait` left it.
    fn rtapi_hosted_call(
        task: unsafe extern "C" fn(*mut std::ffi::c_void),
        arg: *mut std::ffi::c_void,
    ) -> std::ffi::c_int;
}

/// The deadline of the current period of the foreign task this thread runs in
/// [`Period::run_foreign`] (LinuxCNC's `rtapi_task_pll_get_reference`); `None` off such a task.
pub fn foreign_deadline() -> Option<Nanos> {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return None;
    }
    // SAFETY: as in rtapi_hosted_period_wait: the Period run_foreign borrows for the task's whole
    // run on this thread, read only (the task is in a call of its own, not in wait()).
    Some(unsafe { &*p }.deadline())
}

/// How a foreign task run by [`Period::run_foreign`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForeignExit {
    /// It returned by itself.
    Returned,
    /// Its `rtapi_hosted_wait()` said Stop and left it (longjmp between C frames).
    Left,
}

/// Called by `rtapi_hosted_wait` (C): this thread's [`Period::wait`]; 0 continue, 1 stop (also
/// when no task runs in [`Period::run_foreign`] on this thread). Never unwinds.
#[no_mangle]
extern "C" fn rtapi_hosted_period_wait() -> std::ffi::c_int {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        return 1;
    }
    // SAFETY: CURRENT is set by run_foreign on this thread to the Period it borrows mutably for the
    // task's whole run, and cleared before that borrow ends; only this thread reads it.
    match unsafe { &mut *p }.wait() {
        Flow::Continue => 0,
        Flow::Stop => 1,
    }
}

impl Period {
    /// Runs a foreign (C) task that calls `rtapi_hosted_wait()` once per period and may never
    /// return — LinuxCNC's `thread_task(arg)`: when this thread is asked to stop,
    /// `rtapi_hosted_wait()` does not return into the task but `longjmp`s from C back into C
    /// (`hosted_exit.c`), skipping only the task's C frames, and this returns
    /// [`ForeignExit::Left`]. No cancellation, no unwinding through Rust frames. A master whose
    /// modules call `rtapi_wait()` makes that symbol `rtapi_hosted_wait` itself (an alias:
    /// `-Wl,--defsym=rtapi_wait=rtapi_hosted_wait` and the dynamic list), not a Rust function
    /// calling it — a Rust frame between the task and the jump would be skipped.
    ///
    /// # Safety
    /// `task` must be safe to call with `arg` on this thread, and its frames (and any frame between
    /// it and `rtapi_hosted_wait`) must be C frames that hold no resource a `longjmp` over them
    /// would leak or leave locked.
    pub unsafe fn run_foreign(
        &mut self,
        task: unsafe extern "C" fn(*mut std::ffi::c_void),
        arg: *mut std::ffi::c_void,
    ) -> ForeignExit {
        let outer = CURRENT.with(|c| c.replace(std::ptr::from_mut(self)));
        // SAFETY: forwarded from the caller's contract; hosted_exit.c's setjmp/longjmp stay in C.
        let left = unsafe { rtapi_hosted_call(task, arg) };
        CURRENT.with(|c| c.set(outer));
        if left == 0 {
            ForeignExit::Returned
        } else {
            ForeignExit::Left
        }
    }
}

/// Everything a hosted thread needs, made before it starts.
pub(super) struct HostedPlan {
    pub(super) name: String,
    pub(super) period: Nanos,
    pub(super) policy: Policy,
    pub(super) cpu: usize,
    pub(super) origin: Nanos,
    pub(super) timer: CycleTimer,
    pub(super) stats: StatsWriter,
    pub(super) health: health::ThreadHealth,
    pub(super) heartbeat: Arc<Heartbeat>,
    pub(super) control: Arc<Control>,
    pub(super) stack_prefault: usize,
    pub(super) panics: mpsc::SyncSender<PanicReport>,
}

/// On the new thread: set up, arm the timer on the instance's timeline, report, run the body,
/// record its last period.
pub(super) fn run(
    plan: HostedPlan,
    body: Box<dyn FnOnce(&mut Period) + Send>,
    ready: mpsc::Sender<Result<usize, SetupError>>,
) {
    let setup = thread::setup_current(plan.policy, Some(plan.cpu), plan.stack_prefault);
    // SAFETY: gettid has no preconditions and cannot fail.
    plan.heartbeat.set_tid(unsafe { libc::gettid() });
    super::super::panic::route_panics_of_current_thread(
        &plan.name,
        plan.panics.clone(),
        plan.heartbeat.clone(),
    );
    let _crash = super::super::crash::enter_thread(
        &plan.name,
        plan.heartbeat.clone(),
        Arc::new(Slots::with_capacity(0)),
    );
    if let Err(e) = setup {
        let _ = ready.send(Err(e));
        return;
    }
    let mut timer = plan.timer;
    // The first point of the instance's timeline at least one period away: the body's first pass
    // runs before it, as LinuxCNC's first period does.
    let (_, first) = clock::next_on_timeline(plan.origin, plan.period, clock::now() + plan.period);
    if let Err(error) = timer.arm(first, plan.period) {
        let _ = ready.send(Err(SetupError::Arm {
            timer: timer.kind(),
            error,
        }));
        return;
    }
    // A stop request also interrupts the wait itself (the stopper signals the thread).
    timer.stop_on(Arc::clone(&plan.control.stop));
    let mut ledger = Ledger::new(first, plan.period);
    ledger.set_heartbeat(plan.heartbeat.clone());
    ledger.set_health(plan.health);
    ledger.start_usage_count();
    let mut period = Period {
        ledger,
        timer,
        stats: plan.stats,
        period: plan.period,
        control: plan.control.clone(),
        heartbeat: plan.heartbeat.clone(),
        woke: None,
        ended: false,
    };
    period.stats.set_running(true);
    plan.heartbeat.set_looping(true);
    let _ = ready.send(Ok(plan.cpu));
    // A Rust body's panic ends the thread, not the process; foreign code never unwinds into here.
    let returned =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut period))).is_ok();
    if !returned {
        plan.control.panicked.store(true, Ordering::Relaxed);
    }
    // The work after the last wake is the last period.
    period.complete(clock::now());
    plan.heartbeat.set_looping(false);
    period.stats.set_running(false);
}
