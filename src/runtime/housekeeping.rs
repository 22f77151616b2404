//! What runs beside an instance's RT threads — the event drainer, the watchdog, the recorder's
//! writer — for the runtime's own threads ([`Runtime::start`](super::Runtime::start)) and hosted
//! ones ([`HostedThreads`](super::hosted::HostedThreads)) alike:
//!
//! - [`housekeeping_cpus`]: the one rule of where they run — every CPU no RT thread runs on;
//! - [`start_watchdog`]: the one watchdog start (SCHED_FIFO 99 under a real-time flavor, on the
//!   housekeeping CPUs, every [`WATCHDOG_TICK`], taking threads added and removed while it runs);
//! - [`Housekeeping`]: the threads and the flag that ends them; [`Housekeeping::stop`] ends them in
//!   one order for both kinds of instance;
//! - [`drain`]: the event drainer's loop (faults, panics, overruns once a second).

use super::panic::PanicReport;
use super::slots::Slots;
use super::watchdog::{Watchdog, Watched};
use crate::detect::Cpus;
use crate::rt::msg::{Consumer, RtEvent};
use crate::rt::sched::{self, Policy};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the watchdog looks.
pub(super) const WATCHDOG_TICK: Duration = Duration::from_millis(20);

/// Where an instance's housekeeping runs: every online CPU this process may use that no RT thread
/// runs on (`placed`: the CPUs of the runtime's threads; for hosted threads, every CPU one may be
/// placed on). On a kernel without full preemption a normal thread in a system call holds its CPU
/// until it returns, delaying an RT wake-up there. Isolation plays no part: an isolated CPU without
/// an RT thread is as good a place as any. Empty — no restriction: the threads go where the
/// scheduler puts them — when no CPU is left or the online CPUs are unknown.
pub(super) fn housekeeping_cpus(cpus: &Cpus, placed: &[usize]) -> Vec<usize> {
    cpus.online
        .as_deref()
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(|c| !placed.contains(c) && cpus.allowed.as_ref().is_none_or(|a| a.contains(c)))
        .collect()
}

/// Starts housekeeping thread `name` on `cpus` (anywhere when empty), SCHED_FIFO `fifo_priority`
/// when given; `None` if the OS refused the thread.
pub(super) fn spawn<T: Send + 'static>(
    name: &str,
    cpus: &[usize],
    fifo_priority: Option<i32>,
    body: impl FnOnce() -> T + Send + 'static,
) -> Option<JoinHandle<T>> {
    let cpus = cpus.to_vec();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Some(priority) = fifo_priority {
                let _ = sched::set_current_policy(Policy::Fifo { priority });
            }
            if !cpus.is_empty() {
                let _ = sched::set_current_affinity(&cpus);
            }
            body()
        })
        .ok()
}

/// Changes of the watchdog's list while the instance runs (hosted threads come and go).
pub(super) enum WatchCmd {
    /// Watch this thread from now on.
    Add(Box<Watched>),
    /// Stop watching the thread of this name.
    Forget(String),
}

/// The watchdog thread, `rtapi-watchdog`: SCHED_FIFO 99 when the flavor is real time (so that a
/// thread spinning on the only CPU cannot starve it), on `cpus`, every [`WATCHDOG_TICK`] until
/// `stop`; takes the `commands` sent meanwhile (none for the runtime's threads, all known at the
/// start). Returns the watchdog (its stalls and history) when it ends.
pub(super) fn start_watchdog(
    mut dog: Watchdog,
    commands: Option<mpsc::Receiver<WatchCmd>>,
    stop: &Arc<AtomicBool>,
    cpus: &[usize],
    fifo: bool,
) -> Option<JoinHandle<Watchdog>> {
    let stop = Arc::clone(stop);
    spawn("rtapi-watchdog", cpus, fifo.then_some(99), move || {
        while !stop.load(Ordering::Relaxed) {
            for c in commands.iter().flat_map(|c| c.try_iter()) {
                match c {
                    WatchCmd::Add(t) => dog.add(*t),
                    WatchCmd::Forget(name) => dog.forget(&name),
                }
            }
            dog.check();
            std::thread::park_timeout(WATCHDOG_TICK);
        }
        dog
    })
}

/// An instance's housekeeping threads (those it has), where they run, and the flag that ends them.
pub(super) struct Housekeeping {
    /// The CPUs they run on ([`housekeeping_cpus`]; empty: no restriction).
    pub(super) cpus: Vec<usize>,
    /// Set to end them; each one reads it at least once per [`WATCHDOG_TICK`] or 100 ms and is
    /// unparked by [`stop`](Self::stop).
    pub(super) stop: Arc<AtomicBool>,
    pub(super) drainer: Option<JoinHandle<()>>,
    pub(super) watchdog: Option<JoinHandle<Watchdog>>,
    pub(super) recorder: Option<JoinHandle<()>>,
}

impl Housekeeping {
    /// None started yet, on `cpus`.
    pub(super) fn on(cpus: Vec<usize>) -> Self {
        Housekeeping {
            cpus,
            stop: Arc::new(AtomicBool::new(false)),
            drainer: None,
            watchdog: None,
            recorder: None,
        }
    }

    /// Ends them, after the RT threads: the recorder's writer first (a freeze under way is dumped
    /// before it ends), the drainer (it logs what the threads reported to the end), the watchdog
    /// last. Returns the watchdog, for its stalls and history.
    pub(super) fn stop(self) -> Option<Watchdog> {
        self.stop.store(true, Ordering::Relaxed);
        for t in [self.recorder, self.drainer].into_iter().flatten() {
            t.thread().unpark();
            let _ = t.join();
        }
        self.watchdog.and_then(|d| {
            d.thread().unpark();
            d.join().ok()
        })
    }
}

/// Empties the RT threads' event rings and logs, one line per second at most for overruns.
pub(super) fn drain(
    consumers: Vec<(String, Arc<Slots>, Consumer)>,
    panics: mpsc::Receiver<PanicReport>,
    reader: Option<rtapi_hal::HalReader>,
    stop: &AtomicBool,
) {
    let mut reports: Vec<PanicReport> = Vec::new();
    // Overruns come from the segment's own counters (exact, whatever the rate), compared once a
    // second: (periods missed, periods run) at the start of the window.
    let counters = |thread: &str| {
        reader
            .as_ref()
            .and_then(|r| r.thread_stats(thread).ok())
            .map(|s| (s.overruns, s.cycles))
    };
    let mut last: Vec<Option<(u64, u64)>> = consumers.iter().map(|(t, _, _)| counters(t)).collect();
    let mut window = Instant::now();
    loop {
        let done = stop.load(Ordering::Relaxed);
        // Before the events: a panic's report is sent before its FunctionFaulted event is queued.
        reports.extend(panics.try_iter());
        for (thread, functions, c) in &consumers {
            while let Some(e) = c.pop() {
                match e {
                    RtEvent::FunctionFaulted { function } => {
                        let name = functions.name(u32::from(function));
                        let find = |reports: &mut Vec<PanicReport>| {
                            reports
                                .iter()
                                .position(|r| {
                                    r.thread == *thread && r.function == Some(function as u32)
                                })
                                .map(|i| reports.remove(i))
                        };
                        // The report was sent before the event was queued, but may have come
                        // after this round's look at the queue: look once more.
                        let report = find(&mut reports).or_else(|| {
                            reports.extend(panics.try_iter());
                            find(&mut reports)
                        });
                        log_fault(thread, name, report);
                    }
                    RtEvent::WaitFailed { errno } => log::error!(
                        "thread {thread}: its timer wait failed ({}); the thread stopped",
                        nix::errno::Errno::from_raw(errno)
                    ),
                }
            }
        }
        if done || window.elapsed() >= Duration::from_secs(1) {
            let secs = window.elapsed().as_secs_f64();
            for (i, (thread, _, c)) in consumers.iter().enumerate() {
                let now = counters(thread);
                if let (Some((o0, c0)), Some((o1, c1))) = (last[i], now) {
                    let (missed, ran) = (o1.saturating_sub(o0), c1.saturating_sub(c0));
                    if missed > 0 {
                        log::warn!(
                            "thread {thread}: {missed} period(s) missed and {ran} run in the last {secs:.1} s ({:.2} % missed; {o1} missed since start)",
                            100.0 * missed as f64 / (missed + ran).max(1) as f64
                        );
                    }
                }
                last[i] = now;
                if c.dropped() > 0 && done {
                    log::warn!(
                        "thread {thread}: {} event(s) dropped (queue full)",
                        c.dropped()
                    );
                }
            }
            window = Instant::now();
        }
        if done {
            // Panics outside any function (none expected) or whose event was dropped.
            for r in reports.drain(..) {
                let name = r
                    .function
                    .map_or("(outside its functions)".to_string(), |f| {
                        consumers
                            .iter()
                            .find(|(t, _, _)| *t == r.thread)
                            .map_or_else(|| "?".into(), |(_, fs, _)| fs.name(f).to_string())
                    });
                let thread = r.thread.clone();
                log_fault(&thread, &name, Some(r));
            }
            return;
        }
        // Woken early by `stop`.
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// One log entry for a function that panicked: message, place, backtrace if one was captured.
fn log_fault(thread: &str, function: &str, report: Option<PanicReport>) {
    let (message, location, backtrace) = match report {
        Some(r) => (
            r.message,
            r.location.map_or(String::new(), |l| format!(" at {l}")),
            r.backtrace
                .map_or(String::new(), |b| format!("\nstack backtrace:\n{b}")),
        ),
        None => (
            "(message not received)".to_string(),
            String::new(),
            String::new(),
        ),
    };
    log::error!(
        "thread {thread}: function {function} panicked{location}: {message}; it is disabled (marked faulted in the HAL), the thread goes on{backtrace}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(online: Option<&[usize]>, allowed: Option<&[usize]>, isolated: &[usize]) -> Cpus {
        Cpus {
            online: online.map(<[usize]>::to_vec),
            offline: Vec::new(),
            allowed: allowed.map(<[usize]>::to_vec),
            isolated: isolated.to_vec(),
            isolcpus: None,
            nohz_full: None,
            rcu_nocbs: None,
            smt_active: None,
            per_cpu: Vec::new(),
            rt_cpu: isolated.last().copied(),
            rt_cpu_reason: String::new(),
        }
    }

    /// The one rule, for the runtime's threads and hosted ones: every CPU no RT thread runs on.
    #[test]
    fn housekeeping_goes_to_every_cpu_without_an_rt_thread() {
        let four: &[usize] = &[0, 1, 2, 3];
        #[rustfmt::skip]
        let cases: &[(&str, Cpus, &[usize], &[usize])] = &[
            ("one RT CPU", cpus(Some(four), None, &[]), &[3], &[0, 1, 2]),
            ("isolated CPUs without an RT thread are housekeeping's too",
                cpus(Some(four), None, &[2, 3]), &[3], &[0, 1, 2]),
            ("several placed CPUs", cpus(Some(four), None, &[]), &[1, 3], &[0, 2]),
            ("the same CPU placed twice", cpus(Some(four), None, &[]), &[3, 3], &[0, 1, 2]),
            ("no thread placed: every CPU", cpus(Some(four), None, &[]), &[], &[0, 1, 2, 3]),
            ("only the CPUs this process may use", cpus(Some(four), Some(&[0, 2, 3]), &[]), &[3], &[0, 2]),
            ("a placed CPU that is not online changes nothing", cpus(Some(&[0, 1]), None, &[]), &[5], &[0, 1]),
            ("every CPU placed: no restriction", cpus(Some(&[0, 1]), None, &[]), &[0, 1], &[]),
            ("every allowed CPU placed: no restriction", cpus(Some(four), Some(&[2, 3]), &[]), &[2, 3], &[]),
            ("online CPUs unknown: no restriction", cpus(None, None, &[]), &[0], &[]),
        ];
        for (case, system, placed, want) in cases {
            assert_eq!(housekeeping_cpus(system, placed), *want, "{case}");
        }
    }

    /// Hosted threads come later, one by one: housekeeping keeps off every CPU one may be placed on
    /// (`start::unpinned_cpus`) — the RT CPU, or, with none chosen, any CPU: no restriction.
    #[test]
    fn hosted_housekeeping_keeps_off_every_cpu_a_hosted_thread_may_run_on() {
        let four: &[usize] = &[0, 1, 2, 3];
        let cases: &[(&str, Cpus, &[usize])] = &[
            ("RT CPU 3", cpus(Some(four), None, &[3]), &[0, 1, 2]),
            ("RT CPU 2", cpus(Some(four), Some(&[1, 2]), &[2]), &[1]),
            ("no RT CPU chosen", cpus(Some(four), None, &[]), &[]),
            ("nothing known", cpus(None, None, &[]), &[]),
        ];
        for (case, system, want) in cases {
            let placed = super::super::start::unpinned_cpus(system);
            assert_eq!(housekeeping_cpus(system, &placed), *want, "{case}");
        }
    }
}
