//! The master's hosted threads: threads created while the master runs (at a module's load, by
//! hal_lib's `hal_create_thread`), whose loop is driven by foreign code calling `wait()` once per
//! period. **This file is the whole loop**, behind a small interface shaped like the runtime's planned
//! `rtapi::runtime::hosted::{HostedThreads, Period}`, so it can be swapped for that facility:
//!
//! * [`spawn`]`(ThreadSpec, body)` starts a thread and returns its [`HostedThread`] handle;
//! * the body gets a [`Period`] and calls [`Period::wait`] at each period boundary; `wait` answers
//!   [`Wake::Stop`] once the thread is to end, and the body must then return;
//! * [`HostedThread::stop`] asks for the end and joins; `pause`/`resume`; `missed()` counts periods.
//!
//! Each thread hardens itself first: stop signals blocked (SIGINT/SIGTERM go to the main thread),
//! pinned to the RT CPU, SCHED_FIFO at its priority (real-time flavors), its stack prefaulted (the
//! process is `mlockall`ed by the master before any thread exists). The timeline is absolute: the
//! k-th deadline is `origin + k·period` (plus any PLL correction), slept to with `clock_nanosleep`
//! (`TIMER_ABSTIME`, `rt::wake::nanosleep`).
//!
//! **Late periods are skipped, not caught up** (rtapi's rule, unlike 2.9's `rtapi_app`, whose
//! `wait` returns at once for every deadline already passed and so runs late periods back to back):
//! every deadline already gone by when the work ends is counted in `missed` and the thread sleeps
//! to the next deadline still ahead. A motion controller fed a burst of back-to-back periods after a
//! stall gets commands computed for times that have already passed; skipping keeps every period
//! that runs on its own deadline. Functions still get the nominal period (hal_lib passes it).
//!
//! Nothing in `wait` allocates, locks or logs: atomics, `clock_gettime` (vDSO), `clock_nanosleep`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::rt::clock::{self, Nanos};
use crate::rt::sched::{self, Policy};

/// What a hosted thread is.
#[derive(Clone, Debug)]
pub struct ThreadSpec {
    /// Its OS thread name (at most 15 bytes are kept by the kernel).
    pub name: String,
    /// Its period.
    pub period: Nanos,
    /// SCHED_FIFO priority (1..=99) when `real_time`; ignored otherwise.
    pub priority: i32,
    /// Run SCHED_FIFO (true) or SCHED_OTHER (the `sim` flavor).
    pub real_time: bool,
    /// The CPU to pin it to (rtapi's RT CPU), if any.
    pub cpu: Option<usize>,
    /// Its stack size in bytes.
    pub stack_size: usize,
}

/// What [`Period::wait`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The next period has begun: run it.
    Run,
    /// The thread is to end: return from the body.
    Stop,
}

/// State shared by a thread and its handle.
#[derive(Debug, Default)]
struct Control {
    stop: AtomicBool,
    paused: AtomicBool,
    /// Deadlines passed by the end of a period's work (skipped).
    missed: AtomicU64,
    /// Periods run.
    periods: AtomicU64,
    /// The thread's PLL correction (ns added to each period), set from inside the thread.
    correction: AtomicI64,
    /// The thread's pthread_t, for waking it from its sleep (0 before it runs).
    pthread: AtomicU64,
    /// Set when the body has returned (the thread is about to end).
    done: AtomicBool,
}

/// The period boundary given to a hosted thread's body.
pub struct Period {
    control: Arc<Control>,
    period: i64,
    next: i64,
}

impl Period {
    /// Ends the current period and sleeps to the next deadline on the timeline. Deadlines already
    /// passed are skipped and counted. Returns [`Wake::Stop`] when the thread is to end (at once, even
    /// mid-sleep: [`HostedThread::stop`] interrupts the sleep). While paused, it keeps sleeping period
    /// by period without returning.
    #[inline]
    pub fn wait(&mut self) -> Wake {
        loop {
            if self.control.stop.load(Ordering::Acquire) {
                return Wake::Stop;
            }
            let step = self.period + self.control.correction.load(Ordering::Relaxed);
            let step = step.max(1);
            self.next += step;
            let now = clock::now().as_nanos();
            if now >= self.next {
                // Late: every deadline up to now is gone; sleep to the first one still ahead.
                let passed = (now - self.next) / step + 1;
                self.control
                    .missed
                    .fetch_add(passed as u64, Ordering::Relaxed);
                self.next += passed * step;
            }
            // EINTR: a wake-up from `stop` (checked at the top of the loop) or a stray signal (sleep
            // again to the same deadline).
            while !matches!(
                crate::rt::wake::sleep_until_once(Nanos::from_nanos(self.next)),
                Ok(true) | Err(_)
            ) {
                if self.control.stop.load(Ordering::Acquire) {
                    return Wake::Stop;
                }
            }
            if self.control.paused.load(Ordering::Acquire) {
                continue;
            }
            self.control.periods.fetch_add(1, Ordering::Relaxed);
            return Wake::Run;
        }
    }

    /// The deadline the current period started at (CLOCK_MONOTONIC ns): LinuxCNC's
    /// `rtapi_task_pll_get_reference`.
    pub fn reference(&self) -> i64 {
        self.next
    }

    /// Adds `ns` to every following period, within ±1 % of the period (LinuxCNC's PLL limit);
    /// returns the value kept.
    pub fn set_correction(&mut self, ns: i64) -> i64 {
        let limit = self.period / 100;
        let ns = ns.clamp(-limit, limit);
        self.control.correction.store(ns, Ordering::Relaxed);
        ns
    }
}

/// A running hosted thread.
pub struct HostedThread {
    control: Arc<Control>,
    join: Option<JoinHandle<()>>,
    name: String,
}

impl HostedThread {
    /// Deadlines missed (skipped) so far.
    pub fn missed(&self) -> u64 {
        self.control.missed.load(Ordering::Relaxed)
    }

    /// Periods run so far.
    pub fn periods(&self) -> u64 {
        self.control.periods.load(Ordering::Relaxed)
    }

    /// Holds the thread at its period boundary (its timeline goes on) until [`Self::resume`].
    pub fn pause(&self) {
        self.control.paused.store(true, Ordering::Release);
    }

    /// Lets a paused thread run its periods again.
    pub fn resume(&self) {
        self.control.paused.store(false, Ordering::Release);
    }

    /// Asks the thread to end at its next `wait` (interrupting its sleep) and joins it. A thread
    /// stuck in foreign code never reaches `wait`: this then waits on, saying so every 5 s (the
    /// thread's code may still be running, so its module must not go away).
    pub fn stop(mut self) {
        self.control.stop.store(true, Ordering::Release);
        let started = Instant::now();
        let mut said = Duration::ZERO;
        while !self.control.done.load(Ordering::Acquire) {
            let t = self.control.pthread.load(Ordering::Acquire);
            if t != 0 {
                let _ = crate::rt::signals::interrupt(t as libc::pthread_t);
            }
            std::thread::sleep(Duration::from_millis(1));
            let waited = started.elapsed();
            if waited >= said + Duration::from_secs(5) {
                said = waited;
                eprintln!(
                    "rtapi: thread {} has not reached its period boundary for {} s (stuck in a \
                     module's function?); still waiting for it to end",
                    self.name,
                    waited.as_secs()
                );
            }
        }
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Sets the calling (new) thread up as `spec` says; each failure is a message (the thread still
/// runs: a flavor that needs FIFO was checked by the master at start).
fn harden_self(spec: &ThreadSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if let Err(e) = crate::rt::signals::block_stop_signals_in_current_thread() {
        problems.push(format!("blocking SIGINT/SIGTERM: {e}"));
    }
    if let Some(cpu) = spec.cpu {
        if let Err(e) = sched::pin_current_thread(cpu) {
            problems.push(format!("pinning to CPU {cpu}: {e}"));
        }
    }
    let policy = if spec.real_time {
        Policy::Fifo {
            priority: spec.priority,
        }
    } else {
        Policy::Other
    };
    if let Err(e) = sched::set_current_policy(policy) {
        problems.push(format!("{policy}: {e}"));
    }
    if let Err(e) = crate::rt::harden::prefault_stack(spec.stack_size.saturating_sub(64 << 10)) {
        problems.push(format!("stack prefault: {e}"));
    }
    problems
}

/// Starts a hosted thread running `body` with its [`Period`]. The body's first period starts at once;
/// each `wait` ends one.
pub fn spawn(
    spec: ThreadSpec,
    body: Box<dyn FnOnce(&mut Period) + Send>,
) -> Result<HostedThread, String> {
    if !spec.period.is_positive() {
        return Err(format!("thread {}: the period must be positive", spec.name));
    }
    crate::rt::signals::install_wake_handler().map_err(|e| format!("thread {}: {e}", spec.name))?;
    let control = Arc::new(Control::default());
    let c = control.clone();
    let s = spec.clone();
    let join = std::thread::Builder::new()
        .name(spec.name.clone())
        .stack_size(spec.stack_size.max(256 << 10))
        .spawn(move || {
            // SAFETY: pthread_self is always valid for the calling thread.
            c.pthread
                .store(unsafe { libc::pthread_self() } as u64, Ordering::Release);
            for p in harden_self(&s) {
                eprintln!("rtapi: thread {}: {p}", s.name);
            }
            let mut period = Period {
                control: c.clone(),
                period: s.period.as_nanos(),
                next: clock::now().as_nanos(),
            };
            body(&mut period);
            c.done.store(true, Ordering::Release);
        })
        .map_err(|e| format!("thread {}: cannot start it: {e}", spec.name))?;
    Ok(HostedThread {
        control,
        join: Some(join),
        name: spec.name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(period_ms: i64) -> ThreadSpec {
        ThreadSpec {
            name: "hosted-test".into(),
            period: Nanos::from_millis(period_ms),
            priority: 1,
            real_time: false,
            cpu: None,
            stack_size: 256 << 10,
        }
    }

    #[test]
    fn a_late_period_is_skipped_and_counted_not_run_back_to_back() {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = spawn(
            spec(5),
            Box::new(move |p: &mut Period| {
                let mut wakes = Vec::new();
                // Two quick periods, then work that overruns by more than 3 periods.
                for i in 0..6 {
                    if i == 2 {
                        std::thread::sleep(Duration::from_millis(18));
                    }
                    if p.wait() == Wake::Stop {
                        break;
                    }
                    wakes.push(clock::now().as_nanos());
                }
                tx.send(wakes).unwrap();
                while p.wait() == Wake::Run {}
            }),
        )
        .unwrap();
        let wakes = rx.recv().unwrap();
        let missed = t.missed();
        t.stop();
        assert!(missed >= 3, "missed {missed}");
        // No two wakes closer than half a period: nothing ran back to back.
        for w in wakes.windows(2) {
            assert!(w[1] - w[0] >= 2_500_000, "{wakes:?}");
        }
    }

    #[test]
    fn stop_interrupts_a_long_sleep() {
        let t = spawn(
            spec(5_000),
            Box::new(|p: &mut Period| while p.wait() == Wake::Run {}),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let t0 = Instant::now();
        t.stop();
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    }
}
