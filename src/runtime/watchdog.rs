//! The watchdog: a thread whose periods stop completing is **stalled**, and someone outside the RT
//! threads notices, says where it is stuck, and acts.
//!
//! A function that never returns keeps its SCHED_FIFO thread spinning: nothing below its priority
//! runs on that CPU again (RT throttling aside), its counters freeze, and without a watchdog every
//! reader keeps reporting it as running. The runtime's housekeeping thread (SCHED_OTHER, on a CPU
//! without RT threads) looks at every thread's heartbeat every 20 ms. A thread whose period number has not
//! moved for [`WatchdogOptions::limit`] (`periods` × its period, and at least `min`) is marked
//! stalled — in the HAL (`rtapi show thread`), in the log with the function it is in — and the
//! configured [`StallAction`] follows. When its periods complete again it is marked running (and
//! given its policy back if it was demoted).
//!
//! A tick that itself came late (the whole process stopped, the host froze the VM) proves nothing
//! about the RT threads: the watchdog then restarts its observation instead of judging.

use super::thread::Heartbeat;
use crate::rt::clock::Nanos;
use crate::rt::sched::{self, Policy};
use rtapi_hal::{ThreadState, ThreadStateCell};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What follows a stall (`--on-stall`, `on_stall` in a machine config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StallAction {
    /// Mark it and log it; nothing else.
    Report,
    /// Also move the thread to SCHED_OTHER while it is stalled, so that the rest of the machine (a
    /// shell, ssh, the other threads on that CPU) gets CPU time again; restored when it recovers.
    #[default]
    Demote,
    /// Also end the run: [`Runtime::wait`](crate::runtime::Runtime::wait) returns
    /// [`StopReason::Stalled`](crate::runtime::StopReason::Stalled). The stalled thread is demoted
    /// first, since it cannot be joined and the process must be able to exit.
    Stop,
}

impl StallAction {
    /// The contract names.
    pub const fn name(self) -> &'static str {
        match self {
            StallAction::Report => "report",
            StallAction::Demote => "demote",
            StallAction::Stop => "stop",
        }
    }
}

impl fmt::Display for StallAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StallAction {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "report" => Ok(StallAction::Report),
            "demote" => Ok(StallAction::Demote),
            "stop" => Ok(StallAction::Stop),
            other => Err(format!(
                "unknown stall action '{}': use report, demote or stop",
                other.escape_debug()
            )),
        }
    }
}

/// When a thread counts as stalled, and what follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchdogOptions {
    /// Periods without progress before a thread is stalled.
    pub periods: u32,
    /// And at least this long (a host hiccup of a few milliseconds is not a stall).
    pub min: Duration,
    /// What follows a stall.
    pub action: StallAction,
}

impl Default for WatchdogOptions {
    /// 5 periods and at least 100 ms; demote.
    fn default() -> Self {
        WatchdogOptions {
            periods: 5,
            min: Duration::from_millis(100),
            action: StallAction::Demote,
        }
    }
}

impl WatchdogOptions {
    /// How long a thread with this period may go without completing a period.
    pub fn limit(&self, period: Nanos) -> Duration {
        let periods = Duration::from_nanos(period.as_nanos().max(0) as u64)
            .saturating_mul(self.periods.max(1));
        periods.max(self.min)
    }
}

/// One watched thread.
pub(crate) struct Watched {
    pub name: String,
    /// The instance's functions: the heartbeat's function number is a slot number.
    pub functions: std::sync::Arc<super::slots::Slots>,
    pub period: Nanos,
    /// The policy to give back after a demotion.
    pub policy: Policy,
    pub heartbeat: Arc<Heartbeat>,
    pub state: ThreadStateCell,
    last: u64,
    seen: Instant,
    stalled_since: Option<Instant>,
    /// Stalls seen during the run (a stall that is still going on counts), and the longest.
    stalls: u32,
    longest_stall: Duration,
    demoted: bool,
    /// `<thread>.stalled` in the HAL.
    stalled_pin: Option<rtapi_hal::Pin<rtapi_hal::Out, bool>>,
    /// A hosted thread: foreign code runs between its period waits (no function slots).
    hosted: bool,
}

impl Watched {
    pub(crate) fn new(
        name: String,
        functions: std::sync::Arc<super::slots::Slots>,
        period: Nanos,
        policy: Policy,
        heartbeat: Arc<Heartbeat>,
        state: ThreadStateCell,
    ) -> Self {
        Watched {
            name,
            functions,
            period,
            policy,
            last: heartbeat.progress(),
            heartbeat,
            state,
            seen: Instant::now(),
            stalled_since: None,
            stalls: 0,
            longest_stall: Duration::ZERO,
            demoted: false,
            stalled_pin: None,
            hosted: false,
        }
    }

    /// A hosted thread (see `runtime::hosted`): its place is its hosted code or its wait.
    pub(crate) fn hosted(mut self) -> Self {
        self.hosted = true;
        self
    }

    /// Also sets and clears `<thread>.stalled` in the HAL.
    pub(crate) fn with_stalled_pin(
        mut self,
        pin: Option<rtapi_hal::Pin<rtapi_hal::Out, bool>>,
    ) -> Self {
        self.stalled_pin = pin;
        self
    }

    fn place(&self, function: Option<u32>) -> String {
        if self.hosted {
            return if self.heartbeat.waiting() {
                "in its period wait".to_string()
            } else {
                "in its hosted code (between two period waits: it does not call wait)".to_string()
            };
        }
        match function {
            Some(i) => format!("in function {}", self.functions.name(i)),
            None => "outside its functions (in its timer wait or bookkeeping)".to_string(),
        }
    }
}

/// The watchdog over every thread of a runtime.
pub(crate) struct Watchdog {
    opts: WatchdogOptions,
    threads: Vec<Watched>,
    last_tick: Instant,
    /// Set when a stall should end the run (action `stop`).
    stop_run: Arc<AtomicBool>,
    /// The flight recorder a stall freezes.
    recorder: Option<Arc<super::recorder::Recorder>>,
    /// The stall history of threads no longer watched (hosted threads that ended): name, stalls,
    /// longest.
    forgotten: Vec<(String, u32, Duration)>,
}

impl Watchdog {
    pub(crate) fn new(
        opts: WatchdogOptions,
        threads: Vec<Watched>,
        stop_run: Arc<AtomicBool>,
    ) -> Self {
        Watchdog {
            opts,
            threads,
            last_tick: Instant::now(),
            stop_run,
            recorder: None,
            forgotten: Vec::new(),
        }
    }

    /// Freezes `recorder` when a thread stalls (threads in the recorder's order).
    pub(crate) fn with_recorder(
        mut self,
        recorder: Option<Arc<super::recorder::Recorder>>,
    ) -> Self {
        self.recorder = recorder;
        self
    }

    /// Watches one more thread from the next look on (a hosted thread started while running).
    pub(crate) fn add(&mut self, thread: Watched) {
        self.threads.push(thread);
    }

    /// Stops watching thread `name` (a hosted thread that ended and was joined); its stalls stay in
    /// [`history`](Self::history).
    pub(crate) fn forget(&mut self, name: &str) {
        let (gone, kept): (Vec<Watched>, Vec<Watched>) = std::mem::take(&mut self.threads)
            .into_iter()
            .partition(|t| t.name == name);
        self.threads = kept;
        for t in gone.iter().filter(|t| t.stalls > 0) {
            let now = t.stalled_since.map_or(Duration::ZERO, |s| s.elapsed());
            self.forgotten
                .push((t.name.clone(), t.stalls, t.longest_stall.max(now)));
        }
    }

    /// One look at every thread; call it every few tens of milliseconds.
    pub(crate) fn check(&mut self) {
        let now = Instant::now();
        let gap = now - std::mem::replace(&mut self.last_tick, now);
        let late = gap > self.opts.min / 2;
        for (index, t) in self.threads.iter_mut().enumerate() {
            let progress = t.heartbeat.progress();
            let moved = progress != t.last;
            if moved || late || !t.heartbeat.looping() {
                t.last = progress;
                t.seen = now;
                if !t.heartbeat.looping() {
                    t.stalled_since = None; // ended: the thread itself published "stopped"
                } else if let Some(since) = t.stalled_since.filter(|_| moved) {
                    t.stalled_since = None;
                    t.longest_stall = t.longest_stall.max(since.elapsed());
                    t.state.set(ThreadState::Running);
                    if let Some(p) = &t.stalled_pin {
                        p.set(false);
                    }
                    log::warn!(
                        "thread {}: periods complete again after a stall of {} ms",
                        t.name,
                        since.elapsed().as_millis()
                    );
                    if std::mem::take(&mut t.demoted) {
                        if let Some(Err(e)) = t
                            .heartbeat
                            .tid()
                            .map(|tid| sched::set_thread_policy(tid, t.policy))
                        {
                            log::error!("thread {}: cannot restore {}: {e}", t.name, t.policy);
                        }
                    }
                }
                continue;
            }
            let limit = self.opts.limit(t.period);
            if t.stalled_since.is_some() || now - t.seen < limit {
                continue;
            }
            let function = t.heartbeat.in_function();
            t.stalled_since = Some(t.seen);
            t.stalls += 1;
            if let Some(r) = &self.recorder {
                r.stalled(index);
            }
            t.state.set(ThreadState::Stalled { function });
            if let Some(p) = &t.stalled_pin {
                p.set(true);
            }
            let demote = self.opts.action != StallAction::Report && t.policy != Policy::Other;
            let mut what = String::new();
            if demote {
                match t
                    .heartbeat
                    .tid()
                    .map(|tid| sched::set_thread_policy(tid, Policy::Other))
                {
                    Some(Ok(())) => {
                        t.demoted = true;
                        what = "; demoted to SCHED_OTHER so the machine stays reachable".into();
                    }
                    Some(Err(e)) => what = format!("; cannot demote it: {e}"),
                    None => what = "; cannot demote it: its tid is unknown".into(),
                }
            }
            if self.opts.action == StallAction::Stop {
                what.push_str("; stopping the run");
                self.stop_run.store(true, Ordering::Relaxed);
            }
            log::error!(
                "thread {}: STALLED — no period completed for {} ms (limit {} ms = {} periods of {}, at least {} ms), {}{what}",
                t.name,
                (now - t.seen).as_millis(),
                limit.as_millis(),
                self.opts.periods,
                t.period,
                self.opts.min.as_millis(),
                t.place(function),
            );
        }
    }

    /// Per thread that stalled during the run: its name, how many times, and the longest stall (one
    /// still going on counts with its length so far).
    pub(crate) fn history(&self) -> Vec<(String, u32, Duration)> {
        let mut h = self.forgotten.clone();
        h.extend(self.threads.iter().filter(|t| t.stalls > 0).map(|t| {
            let now = t.stalled_since.map_or(Duration::ZERO, |s| s.elapsed());
            (t.name.clone(), t.stalls, t.longest_stall.max(now))
        }));
        h
    }

    /// The threads stalled now, with where they are stuck.
    pub(crate) fn stalled(&self) -> Vec<(String, String)> {
        self.threads
            .iter()
            .filter(|t| t.stalled_since.is_some())
            .map(|t| (t.name.clone(), t.place(t.heartbeat.in_function())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_is_periods_with_a_floor() {
        let o = WatchdogOptions::default();
        assert_eq!(o.limit(Nanos::from_micros(25)), Duration::from_millis(100));
        assert_eq!(o.limit(Nanos::from_secs(1)), Duration::from_secs(5));
        // Saturates instead of overflowing for absurd periods.
        assert!(o.limit(Nanos::from_nanos(i64::MAX)) >= Duration::from_secs(9_000_000_000));
    }

    #[test]
    fn actions_parse_and_print() {
        for a in [StallAction::Report, StallAction::Demote, StallAction::Stop] {
            assert_eq!(a.name().parse::<StallAction>(), Ok(a));
        }
        assert!("kill"
            .parse::<StallAction>()
            .unwrap_err()
            .contains("report, demote or stop"));
    }
}
