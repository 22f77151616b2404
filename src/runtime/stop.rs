//! How an instance ends: the bounded join of RT threads asked to stop ([`join_bounded`], one for
//! the runtime's threads and hosted ones: the only difference is who owns the period loop,
//! [`LoopOwner`]), [`Runtime::stop`], and what a run leaves behind ([`Summary`], [`ThreadSummary`]).

use super::crash;
use super::thread::Heartbeat;
use super::watchdog::Watchdog;
use super::{Running, RunningThread, Runtime, StartedThread};
use crate::flavor::Flavor;
use crate::rt::clock::Nanos;
use crate::rt::sched::{self, Policy};
use crate::rt::signals;
use rtapi_hal::{HalReader, HistogramSnapshot, ThreadStatsSnapshot};
use std::fmt;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a stop waits for a thread to end after interrupting its wait (a hosted thread: plus one
/// period, the longest a foreign loop's work may take before its next wait). A thread in its timer
/// wait ends within microseconds; one still running after this is stuck in a function.
pub const STOP_GRACE: Duration = Duration::from_millis(500);

/// Who runs an RT thread's period loop: the one difference in how a stop reaches the thread.
#[derive(Debug, Clone, Copy)]
pub(super) enum LoopOwner {
    /// rtapi's cycle loop (`thread::run`): it checks the stop flag every period and takes a stray
    /// EINTR as "wait again", so it is interrupted whatever it is doing; [`STOP_GRACE`].
    Runtime,
    /// Foreign code that calls `Period::wait` once per period (LinuxCNC's `thread_task`): interrupted
    /// only while in that wait — foreign code in a system call must not see an EINTR it does not
    /// expect — and given [`STOP_GRACE`] plus the period, the longest its work may take before its
    /// next wait.
    Foreign {
        /// The thread's period.
        period: Nanos,
    },
}

impl LoopOwner {
    pub(super) fn grace(self) -> Duration {
        match self {
            LoopOwner::Runtime => STOP_GRACE,
            LoopOwner::Foreign { period } => {
                STOP_GRACE + Duration::from_nanos(period.as_nanos().max(0) as u64)
            }
        }
    }

    fn may_interrupt(self, heartbeat: &Heartbeat) -> bool {
        match self {
            LoopOwner::Runtime => true,
            LoopOwner::Foreign { .. } => heartbeat.waiting(),
        }
    }
}

/// Ends threads already asked to stop (their stop flag set): each is interrupted as its loop's owner
/// allows, again and again — a signal landing just before its wait must not be lost — until it ends
/// or its grace passes. Joins the ones that ended; one that did not is left running, detached and
/// demoted to SCHED_OTHER (the exit path needs CPU time too: never leave a spinning SCHED_FIFO
/// thread behind). Returns, in order, whether each was left behind.
pub(super) fn join_bounded(
    threads: Vec<(JoinHandle<()>, Arc<Heartbeat>)>,
    owner: LoopOwner,
) -> Vec<bool> {
    let (start, grace) = (Instant::now(), owner.grace());
    loop {
        let mut pending = threads.iter().filter(|(h, _)| !h.is_finished()).peekable();
        if pending.peek().is_none() || start.elapsed() >= grace {
            break;
        }
        for (handle, heartbeat) in pending {
            if owner.may_interrupt(heartbeat) {
                let _ = signals::interrupt(handle.as_pthread_t());
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    threads
        .into_iter()
        .map(|(handle, heartbeat)| {
            if handle.is_finished() {
                let _ = handle.join();
                false
            } else {
                if let Some(tid) = heartbeat.tid() {
                    let _ = sched::set_thread_policy(tid, Policy::Other);
                }
                true
            }
        })
        .collect()
}

/// [`join_bounded`] for the runtime's own threads: the names of those left behind.
pub(super) fn join_runtime_threads(threads: Vec<RunningThread>) -> Vec<String> {
    let (ending, names): (Vec<_>, Vec<_>) = threads
        .into_iter()
        .map(|t| ((t.handle, t.heartbeat), t.info.name))
        .unzip();
    join_bounded(ending, LoopOwner::Runtime)
        .into_iter()
        .zip(names)
        .filter_map(|(left, name)| left.then_some(name))
        .collect()
}

impl Runtime<Running> {
    /// Stops every thread and returns their final statistics; bounded in time whatever the periods:
    /// a thread waiting for its next deadline is woken at once, and one stuck in a function is left
    /// behind after [`STOP_GRACE`] (demoted, marked stalled, named in the summary; the process exits
    /// without it). The segment is unlinked and the dma-latency request released when this returns.
    pub fn stop(self) -> Summary {
        let s = self.state;
        // From here on the instance removes its segment itself.
        crash::forget_segment(&s.hal);
        s.stop.store(true, Ordering::Relaxed);
        // Each thread with the functions it ran last (addf/delf may have changed them).
        let infos: Vec<StartedThread> = s
            .threads
            .iter()
            .zip(&s.lists)
            .map(|(t, list)| StartedThread {
                functions: list
                    .current()
                    .into_iter()
                    .map(|n| s.slots.name(n).to_string())
                    .collect(),
                ..t.info.clone()
            })
            .collect();
        let abandoned = join_runtime_threads(s.threads);
        s.hal.set_running(false);
        // A freeze under way is dumped before the recorder thread ends.
        let dog = s.housekeeping.stop();
        // Hosted code (LinuxCNC modules' `rtapi_app_exit`, then closed), last kept first, once no
        // thread can be inside it; a thread left behind may be: then it stays, and goes with the
        // process.
        let kept = s.residents.len();
        if abandoned.is_empty() {
            s.residents.release_all();
        } else if kept != 0 {
            log::warn!(
                "{kept} hosted module(s) stay loaded: a thread left behind may still be running their code"
            );
        }
        let mut stalled = dog.as_ref().map(Watchdog::stalled).unwrap_or_default();
        let history = dog.as_ref().map(Watchdog::history).unwrap_or_default();
        for name in &abandoned {
            if !stalled.iter().any(|(n, _)| n == name) {
                stalled.push((name.clone(), "in a function that does not return".into()));
            }
            log::error!(
                "thread {name}: did not stop within {} ms ({}); left behind, the process exits without it",
                STOP_GRACE.as_millis(),
                stalled.iter().find(|(n, _)| n == name).map_or("", |(_, w)| w.as_str())
            );
        }
        let reader = s.hal.reader().ok();
        let threads = infos
            .into_iter()
            .map(|info| {
                let faulted = reader
                    .as_ref()
                    .map(|r| {
                        info.functions
                            .iter()
                            .filter(|f| {
                                r.function_named(f)
                                    .is_ok_and(|fi| fi.timing.fault_code != 0)
                            })
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
                let mut t = ThreadSummary::read(info, reader.as_ref());
                t.faulted = faulted;
                t.stalled = stalled
                    .iter()
                    .find(|(n, _)| *n == t.info.name)
                    .map(|(_, w)| w.clone());
                t.abandoned = abandoned.contains(&t.info.name);
                t.count_stalls(&history);
                t
            })
            .collect();
        Summary {
            flavor: s.selection.flavor,
            run_time: s.started.elapsed(),
            threads,
        }
    }
}

/// What a run did, per thread.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The flavor it ran under.
    pub flavor: Flavor,
    /// From the start of the threads to the stop.
    pub run_time: Duration,
    /// Per thread, in declaration order.
    pub threads: Vec<ThreadSummary>,
}

#[derive(Debug, Clone)]
/// One thread's end of run.
pub struct ThreadSummary {
    /// How it was started.
    pub info: StartedThread,
    /// Its final statistics (`None` if the segment could not be read back).
    pub stats: Option<ThreadStatsSnapshot>,
    /// Its final latency histogram.
    pub histogram: Option<HistogramSnapshot>,
    /// Functions that panicked and were disabled.
    pub faulted: Vec<String>,
    /// Where the thread was stuck if it was stalled when the run ended.
    pub stalled: Option<String>,
    /// How many times it stalled during the run (recovered or not).
    pub stalls: u32,
    /// The longest of those stalls (one still going on at the stop: its length so far).
    pub longest_stall: Duration,
    /// It did not end within [`STOP_GRACE`] and was left behind.
    pub abandoned: bool,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::render::{Col, ThreadRow};
        const COLS: [Col; 10] = [
            Col::Name,
            Col::Period,
            Col::Cpu,
            Col::Prio,
            Col::Cycles,
            Col::Overruns,
            Col::LatMin,
            Col::LatMean,
            Col::LatMax,
            Col::Jitter,
        ];
        writeln!(
            f,
            "rtapi ran {:.1} s, flavor {}",
            self.run_time.as_secs_f64(),
            self.flavor
        )?;
        let mut table = ThreadRow::table(&COLS);
        for t in &self.threads {
            let mut row = ThreadRow::new(t.info.name.clone(), t.info.period.as_nanos() as u64)
                .with_cpu(Some(t.info.cpu))
                .with_priority(t.info.priority);
            if let Some(s) = &t.stats {
                row = row.with_stats(s);
            }
            table.row(row.cells(&COLS));
            if let Some(io) = row.io_note() {
                table.note(format!("  {io}"));
            }
            for fun in &t.faulted {
                table.note(format!("  function {fun} FAULTED (panicked; disabled)"));
            }
            if let Some(place) = &t.stalled {
                table.note(format!(
                    "  STALLED {place}{}",
                    if t.abandoned {
                        " (did not stop; left behind)"
                    } else {
                        ""
                    }
                ));
            } else if t.stalls > 0 {
                table.note(format!(
                    "  STALLED {} time(s) during the run (longest {} ms), recovered",
                    t.stalls,
                    t.longest_stall.as_millis()
                ));
            }
        }
        write!(f, "{table}")?;
        let mut trouble = Vec::new();
        for t in &self.threads {
            if t.stalls > 0 {
                trouble.push(format!("{} stalled {} time(s)", t.info.name, t.stalls));
            }
            if !t.faulted.is_empty() {
                trouble.push(format!(
                    "{} has {} faulted function(s)",
                    t.info.name,
                    t.faulted.len()
                ));
            }
        }
        if trouble.is_empty() {
            writeln!(f, "health: no stall, no faulted function")
        } else {
            writeln!(f, "health: {}", trouble.join("; "))
        }
    }
}

impl ThreadSummary {
    /// Thread `info`'s end of run as the segment has it (its statistics and histogram; none
    /// without a reader), nothing faulted or stalled yet.
    pub(super) fn read(info: StartedThread, reader: Option<&HalReader>) -> ThreadSummary {
        ThreadSummary {
            stats: reader.and_then(|r| r.thread_stats(&info.name).ok()),
            histogram: reader.and_then(|r| r.histogram(&info.name).ok()),
            info,
            faulted: Vec::new(),
            stalled: None,
            stalls: 0,
            longest_stall: Duration::ZERO,
            abandoned: false,
        }
    }

    /// Its stalls over the run from the watchdog's `history`; a thread still stalled at the end
    /// that the watchdog never saw (none watched) stalled once.
    pub(super) fn count_stalls(&mut self, history: &[(String, u32, Duration)]) {
        let (stalls, longest) = history
            .iter()
            .find(|(n, _, _)| *n == self.info.name)
            .map_or((0, Duration::ZERO), |(_, k, l)| (*k, *l));
        self.stalls = self
            .stalls
            .max(stalls)
            .max(u32::from(self.stalled.is_some()));
        self.longest_stall = self.longest_stall.max(longest);
    }
}
