//! Hosted threads: an rtapi instance whose threads are added while it runs and whose period loop is
//! someone else's code (LinuxCNC 2.9's `hal_lib`, issue 24).
//!
//! LinuxCNC's `hal_lib` makes its threads (`servo-thread`, `base-thread`) at `loadrt` time with
//! `rtapi_task_new`/`rtapi_task_start`, and the thread's body is `hal_lib`'s own loop: run the
//! thread's functions, then call `rtapi_wait()` once per period. [`HostedThreads`] is the instance
//! those threads live in — rtapi's own segment (`/dev/shm/rtapi-linuxcnc` by default, read by `rtapi
//! show`, `watch`, `export` like any instance), the hardened process, the watchdog — and
//! [`HostedThreads::spawn`] starts one of them: a hardened thread (the flavor's policy and the
//! rate-monotonic or given SCHED_FIFO priority, pinned as rtapi's placement chooses, its stack
//! prefaulted, rtapi's timer driver and wake mode) that runs the body it is given. The body calls
//! [`Period::wait`] once per period — the period boundary:
//!
//! ```text
//!  body: initial work ── wait ──► work ── wait ──► work ── wait ──► … ── return
//!                        │                 │
//!                        │  end of the work = now; exec = end − wake; deadlines passed by the end
//!                        │  are skipped and counted (missed); the period is recorded (stats block,
//!                        │  histogram, spikes, <thread>.time/tmax) — rtapi's Ledger, as its own loop
//!                        │  stop requested? → Flow::Stop (no sleep)
//!                        │  sleep to the next deadline on the absolute timeline (the thread's timer)
//!                        └► wake: latency = now − deadline; <thread>.latency, .latency-max, .missed,
//!                           .late written; heartbeat for the watchdog → Flow::Continue
//! ```
//!
//! **Late periods are skipped, not caught up.** LinuxCNC 2.9's POSIX `rtapi_wait` advances its
//! deadline by one period per call and does not sleep while it is behind, so after a stall of n
//! periods it runs n periods back to back, each given the nominal period — a servo loop then
//! computes n periods' worth of motion within microseconds, and a long stall (a SIGSTOP) becomes a
//! burst of thousands of periods at SCHED_FIFO. rtapi keeps its own rule here too (the one of
//! `Cycler::period`): the deadlines that went by while the thread was late are counted as missed
//! (the stats block's `overruns`, `<thread>.missed`, `<thread>.late` in the next period) and the next
//! wait sleeps to the first deadline still ahead. So `wait()` returns once per wake, never twice for
//! one deadline, and every deadline of the timeline is either a wake or a missed period:
//! `wakes + missed = deadlines elapsed` (tested in `tests/hosted_threads.rs`).
//!
//! **Ending a thread without cancelling it.** Nothing here uses `pthread_cancel` or unwinds through
//! foreign frames: [`HostedHandle::stop`] sets the thread's stop flag and interrupts its wait if it is
//! in one; `wait()` then returns [`Flow::Stop`] (and so does every later call), and the body is
//! expected to return. A body of C code that cannot return on its own (hal_lib's `thread_task` loops
//! forever) is left by its host with a `longjmp` from C code back to a `setjmp` in C code around the
//! task call, so that no Rust frame is skipped — `wait()` itself returns normally. A body that does
//! not come back within the grace period is left behind (demoted to SCHED_OTHER, named in the
//! summary), as [`Runtime::stop`](super::Runtime::stop) does with a function that never returns.
//!
//! **The watchdog** watches every hosted thread from its start as it watches the runtime's own: a
//! thread whose periods stop completing (stuck in foreign code, in a loop that no longer calls
//! `wait`) is marked stalled in the segment and in `<thread>.stalled`, and the configured
//! [`StallAction`](super::watchdog::StallAction) follows: the same one as for rtapi's threads.
//! Demoting (the default) changes only the scheduling class of the thread through
//! `sched_setscheduler` on its tid; it does not interrupt, signal or touch the code it runs, so it is
//! as safe for foreign code mid-function as for rtapi's own functions, and the policy comes back when
//! periods complete again.
//!
//! **Health for LinuxCNC's HAL.** [`HostedHandle::health`] gives a `HealthReader` of the thread's
//! `latency`, `latency-max`, `missed`, `late`, `stalled` (relaxed loads, callable from an RT thread);
//! `master::lcnc_health` turns them into pins of a LinuxCNC HAL
//! component through `hal_lib`'s own API.
//!
//! What a hosted thread does not have: rtapi's function slots (its functions are the host's), the
//! flight recorder, pause/resume (LinuxCNC 2.9's POSIX `rtapi_task_pause` is `-ENOSYS` too) and a
//! period change while it runs (the segment's thread record fixes the period, LAYOUT.md §7a; a
//! thread with another period is another thread).
//!
//! The owner's side is here (the instance, a thread's handle, the bounded stop); the thread's side —
//! its start, [`Period`], foreign tasks — is `period.rs`. The lifecycle is the runtime's own: the
//! same placement, hardening, housekeeping rule and watchdog start (`housekeeping.rs`) and bounded
//! join (`stop.rs`) as [`Runtime::start`](super::Runtime::start) and its stop; only who owns the
//! period loop differs (`stop::LoopOwner::Foreign`).

mod period;

pub use self::period::{foreign_deadline, Flow, ForeignExit, Period};
use self::period::{run, Control, HostedPlan};
use super::health::{self, HealthReader};
use super::housekeeping::{housekeeping_cpus, start_watchdog, Housekeeping, WatchCmd};
pub use super::io::note_io;
use super::panic::PanicReport;
use super::slots::Slots;
use super::start;
use super::stop::{join_bounded, LoopOwner};
use super::thread::{Heartbeat, SetupError};
use super::watchdog::{Watchdog, WatchdogOptions, Watched};
use super::{RuntimeError, StartedThread, Summary, ThreadSpec, ThreadSummary};
use crate::detect::SystemReport;
use crate::flavor::{self, Selection};
use crate::rt::clock::{self, Nanos};
use crate::rt::harden::{self, Hardening};
use crate::rt::wake::CycleTimer;
use rtapi_hal::{
    ComponentKey, Hal, HalBuilder, HalReader, HistogramConfig, Permissions, ThreadConfig,
    ThreadRoom,
};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The instance LinuxCNC's threads live in unless told otherwise.
pub const DEFAULT_HOSTED_INSTANCE: &str = "linuxcnc";

/// How a hosted instance runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedOptions {
    /// A forced flavor (`--flavor`); `None` = `RTAPI_FLAVOR`, else autodetection.
    pub flavor: Option<String>,
    /// `mlockall` and prefault (a failure is fatal under rt-preempt and posix).
    pub lock_memory: bool,
    /// Hold `/dev/cpu_dma_latency` at 0 while the instance lives.
    pub dma_latency: bool,
    /// Make the segment readable by the owner's group (otherwise 0600).
    pub group_readable: bool,
    /// Make the segment readable by this group instead (mode 0640, still owned by this process's
    /// user, so that readers keep trusting it and a later instance can reclaim it after a crash): a
    /// master running as root for a session user gives its segment to the user's group.
    pub reader_gid: Option<u32>,
    /// When a thread is stalled and what follows.
    pub watchdog: WatchdogOptions,
    /// Threads the segment keeps room for (each with its stats block); LinuxCNC allows 64 tasks.
    pub max_threads: usize,
    /// Every hosted thread's latency histogram.
    pub histogram: HistogramConfig,
    /// Every thread keeps its periods at or over this latency in the segment's spike ring (for a
    /// follower that explains them: `rtapi linuxcnc --trace`), unless its spec sets its own.
    pub spike_threshold: Option<Nanos>,
}

impl Default for HostedOptions {
    fn default() -> Self {
        HostedOptions {
            flavor: None,
            lock_memory: true,
            dma_latency: true,
            group_readable: false,
            reader_gid: None,
            watchdog: WatchdogOptions::default(),
            max_threads: 16,
            histogram: HistogramConfig::default(),
            spike_threshold: None,
        }
    }
}

/// One hosted thread as its owner sees it.
struct Hosted {
    info: Mutex<StartedThread>,
    control: Arc<Control>,
    heartbeat: Arc<Heartbeat>,
    handle: Mutex<Option<JoinHandle<()>>>,
    panics: Mutex<mpsc::Receiver<PanicReport>>,
    health: health::ThreadKeys,
    /// Its end of run, once stopped.
    summary: Mutex<Option<ThreadSummary>>,
}

/// A hosted thread started by [`HostedThreads::spawn`]: ask it to end, join it, read its health.
/// Dropping the handle does not stop the thread ([`HostedThreads::stop`] stops every thread).
pub struct HostedHandle {
    hosted: Arc<Hosted>,
    hal: HalReader,
    watch: mpsc::Sender<WatchCmd>,
    health: HealthReader,
}

/// An rtapi instance whose threads are added while it runs (see the module documentation).
pub struct HostedThreads {
    hal: Hal,
    system: SystemReport,
    selection: Selection,
    opts: HostedOptions,
    origin: Nanos,
    started: Instant,
    owner: ComponentKey,
    threads: Arc<Mutex<Vec<Arc<Hosted>>>>,
    watch: mpsc::Sender<WatchCmd>,
    /// The watchdog, on the housekeeping CPUs.
    housekeeping: Housekeeping,
    stalled_stop: Arc<AtomicBool>,
    _hardening: Hardening,
}

impl HostedThreads {
    /// Creates instance `instance` with no thread yet: detects the machine, chooses the flavor
    /// (`opts.flavor`, then `RTAPI_FLAVOR`, then autodetection), builds and publishes the segment
    /// with room for `opts.max_threads` threads, hardens the process and starts the watchdog.
    pub fn open(instance: &str, opts: HostedOptions) -> Result<Self, RuntimeError> {
        Self::open_with(instance, opts, SystemReport::detect_live())
    }

    /// As [`open`](Self::open), with an already made detection report.
    pub fn open_with(
        instance: &str,
        opts: HostedOptions,
        system: SystemReport,
    ) -> Result<Self, RuntimeError> {
        let selection = super::select_flavor(&system, opts.flavor.as_deref())?;
        if opts.max_threads == 0 {
            return Err(RuntimeError::Config(
                "a hosted instance needs room for at least one thread (max_threads ≥ 1)".into(),
            ));
        }
        start::install_handlers()?;
        let mut b = HalBuilder::new(instance)?
            .capacity(rtapi_hal::Capacity {
                factor: 4,
                floor: start::LIVE_SPARE_RECORDS,
            })
            .thread_room(ThreadRoom {
                threads: opts.max_threads,
                max_bins: opts.histogram.bins,
            });
        if let Some(gid) = opts.reader_gid {
            b = b.permissions(Permissions::GroupReadable { gid });
        } else if opts.group_readable {
            // SAFETY: getegid has no preconditions and cannot fail.
            let gid = unsafe { libc::getegid() };
            b = b.permissions(Permissions::GroupReadable { gid });
        }
        let owner = b.component(health::OWNER)?;
        let hal = b.build().map_err(RuntimeError::Segment)?;
        super::crash::guard_segment(&hal);
        let hardening = start::harden(opts.lock_memory, opts.dma_latency, selection.flavor)?;
        let mut housekeeping = Housekeeping::on(housekeeping_cpus(
            &system.cpus,
            &start::unpinned_cpus(&system.cpus),
        ));
        let (watch, commands) = mpsc::channel();
        let stalled_stop = Arc::new(AtomicBool::new(false));
        housekeeping.watchdog = start_watchdog(
            Watchdog::new(opts.watchdog, Vec::new(), stalled_stop.clone()),
            Some(commands),
            &housekeeping.stop,
            &housekeeping.cpus,
            selection.flavor.real_time(),
        );
        hal.set_running(true);
        Ok(HostedThreads {
            hal,
            system,
            selection,
            opts,
            origin: clock::now(),
            started: Instant::now(),
            owner,
            threads: Arc::new(Mutex::new(Vec::new())),
            watch,
            housekeeping,
            stalled_stop,
            _hardening: hardening,
        })
    }

    /// The instance's own segment.
    pub fn hal(&self) -> &Hal {
        &self.hal
    }

    /// The flavor the threads run under.
    pub fn flavor(&self) -> flavor::Flavor {
        self.selection.flavor
    }

    /// The CPUs without RT threads (where the watchdog runs; empty: no restriction).
    pub fn housekeeping_cpus(&self) -> &[usize] {
        &self.housekeeping.cpus
    }

    /// Whether a stall whose action is `stop` asked for the run to end (see
    /// [`StallAction::Stop`](super::watchdog::StallAction::Stop)).
    pub fn stall_requests_stop(&self) -> bool {
        self.stalled_stop.load(Ordering::Relaxed)
    }

    /// Starts thread `spec.name` running `body`: placed as rtapi places a thread (its CPU, or the RT
    /// CPU detection chose; its priority, or rate-monotonic among the instance's threads), its record
    /// and health pins added to the segment, set up (policy, CPU, stack, timer armed) before this
    /// returns, and watched by the watchdog. Its first deadline is the first point of the instance's
    /// timeline (`origin + n·period`) at least one period after its start; `body`'s work before its
    /// first `wait()` is LinuxCNC's first pass. Fails with nothing running (but the segment's
    /// records: a thread record is never removed) if the thread cannot be set up.
    pub fn spawn(
        &self,
        spec: ThreadSpec,
        body: Box<dyn FnOnce(&mut Period) + Send>,
    ) -> Result<HostedHandle, RuntimeError> {
        // The same checks as a configured thread's (hosted threads never take compare-timers' drivers).
        spec.check(false)?;
        let mut threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        // Placement among the instance's threads (rate-monotonic priorities, CPU checks, spin).
        let mut specs: Vec<ThreadSpec> = threads
            .iter()
            .map(|h| {
                let i = h.info.lock().unwrap_or_else(|p| p.into_inner());
                ThreadSpec {
                    priority: Some(i.priority).filter(|&p| p > 0),
                    cpu: Some(i.cpu),
                    ..ThreadSpec::new(&i.name, i.period)
                }
            })
            .collect();
        if specs.iter().any(|s| s.name == spec.name) {
            return Err(RuntimeError::Config(format!(
                "thread '{}' exists already in instance '{}'; give the new thread another name",
                spec.name,
                self.hal.instance()
            )));
        }
        specs.push(spec.clone());
        let fifo = self.selection.flavor.real_time();
        let placed = start::place(&self.system, &specs, fifo)?;
        let p = placed.last().expect("the new thread was placed");
        let (cpu, priority, policy) = (p.cpu, p.priority, p.policy);

        let mut config = ThreadConfig::new(&spec.name, spec.period.as_nanos() as u64)
            .cpu(cpu as u32)
            .priority(priority)
            .flavor(self.selection.flavor.name())
            .timer(spec.timer.name())
            .histogram(self.opts.histogram);
        if let Some(t) = spec.spike_threshold.or(self.opts.spike_threshold) {
            config = config.spike_threshold_ns(t.as_nanos().max(1));
        }
        let key = self.hal.add_thread(config)?;
        let keys = health::add_thread(&self.hal, self.owner, &spec.name)?;
        let stats = self.hal.stats_writer(key)?;
        let heartbeat = Arc::new(Heartbeat::default());
        let control = Arc::new(Control {
            stop: Arc::new(AtomicBool::new(false)),
            wait_error: AtomicI32::new(0),
            panicked: AtomicBool::new(false),
        });
        let (panic_tx, panics) = mpsc::sync_channel(4);
        let plan = HostedPlan {
            name: spec.name.clone(),
            period: spec.period,
            policy,
            cpu,
            origin: self.origin,
            timer: CycleTimer::new(spec.timer, spec.wake),
            stats,
            health: health::ThreadHealth::new(&self.hal, &keys),
            heartbeat: heartbeat.clone(),
            control: control.clone(),
            stack_prefault: if self.opts.lock_memory {
                harden::DEFAULT_STACK_PREFAULT
            } else {
                0
            },
            panics: panic_tx,
        };
        let (ready_tx, ready) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(format!("rtapi-{}", spec.name))
            .spawn(move || run(plan, body, ready_tx))
            .map_err(|error| RuntimeError::Spawn {
                thread: spec.name.clone(),
                error,
            })?;
        let failed = |error: SetupError| RuntimeError::Thread {
            thread: spec.name.clone(),
            error,
        };
        match ready.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let _ = handle.join();
                return Err(failed(e));
            }
            Err(_) => {
                // It never answered: leave it (it is told to end, should it get that far).
                control.stop.store(true, Ordering::SeqCst);
                return Err(failed(SetupError::NoAnswer));
            }
        }
        let info = StartedThread {
            name: spec.name.clone(),
            period: spec.period,
            priority,
            cpu,
            timer: spec.timer,
            wake: spec.wake,
            functions: Vec::new(),
            tid: heartbeat.tid(),
        };
        let _ = self.watch.send(WatchCmd::Add(Box::new(
            Watched::new(
                spec.name.clone(),
                Arc::new(Slots::with_capacity(0)),
                spec.period,
                policy,
                heartbeat.clone(),
                self.hal.thread_state_cell(key),
            )
            .with_stalled_pin(Some(self.hal.pin(keys.stalled)))
            .hosted(),
        )));
        let hosted = Arc::new(Hosted {
            info: Mutex::new(info),
            control,
            heartbeat,
            handle: Mutex::new(Some(handle)),
            panics: Mutex::new(panics),
            health: keys,
            summary: Mutex::new(None),
        });
        threads.push(Arc::clone(&hosted));
        Ok(HostedHandle {
            health: HealthReader::new(&self.hal, &hosted.health),
            hosted,
            hal: self.hal.reader()?,
            watch: self.watch.clone(),
        })
    }

    /// Every thread started so far, as started (with its tid).
    pub fn threads(&self) -> Vec<StartedThread> {
        self.roster().started()
    }

    /// The list of the instance's threads, readable from another thread while threads are added
    /// (a spike follower learns of each new one from it).
    pub fn roster(&self) -> Roster {
        Roster(Arc::clone(&self.threads))
    }

    /// A reader of thread `name`'s health pins (for LinuxCNC HAL pins), if it exists.
    pub fn health(&self, name: &str) -> Option<HealthReader> {
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        threads
            .iter()
            .find(|h| h.info.lock().unwrap_or_else(|p| p.into_inner()).name == name)
            .map(|h| HealthReader::new(&self.hal, &h.health))
    }

    /// Ends every thread still running (as [`HostedHandle::stop`]), stops the watchdog and returns
    /// the whole run's summary — every thread ever started, in start order — for a latency-test-style
    /// report ([`Summary`]'s `Display`, `latency::verdict`). The segment goes when this returns.
    pub fn stop(self) -> Summary {
        let threads: Vec<Arc<Hosted>> =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        let reader = self.hal.reader().ok();
        for h in &threads {
            request_stop(h);
        }
        let mut summaries: Vec<ThreadSummary> = threads
            .iter()
            .map(|h| match reader.as_ref() {
                Some(r) => finish(h, r, &self.watch),
                None => h
                    .summary
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
                    .unwrap_or_else(|| {
                        let info = h.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
                        ThreadSummary::read(info, None)
                    }),
            })
            .collect();
        // Every stall of the run, recovered or not, also of threads stopped before this.
        if let Some(dog) = self.housekeeping.stop() {
            let history = dog.history();
            for t in &mut summaries {
                t.count_stalls(&history);
            }
        }
        self.hal.set_running(false);
        super::crash::forget_segment(&self.hal);
        Summary {
            flavor: self.selection.flavor,
            run_time: self.started.elapsed(),
            threads: summaries,
        }
    }
}

/// The threads of a [`HostedThreads`] instance, shared: see [`HostedThreads::roster`].
#[derive(Clone)]
pub struct Roster(Arc<Mutex<Vec<Arc<Hosted>>>>);

impl Roster {
    /// Every thread started so far, as started (with its tid); the stopped ones too until the
    /// instance stops.
    pub fn started(&self) -> Vec<StartedThread> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|h| h.info.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect()
    }
}

impl HostedHandle {
    /// The thread as started (name, period, priority, CPU, tid).
    pub fn info(&self) -> StartedThread {
        self.hosted
            .info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The thread's health pins, read from any thread (see `HealthReader`).
    pub fn health(&self) -> &HealthReader {
        &self.health
    }

    /// Asks the thread to end without waiting: its next (or current) `wait()` returns
    /// [`Flow::Stop`]. Callable from any thread (a `rtapi_task_delete` from another one).
    pub fn request_stop(&self) {
        request_stop(&self.hosted);
    }

    /// Whether the body has returned.
    pub fn is_finished(&self) -> bool {
        self.hosted
            .handle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_none_or(|h| h.is_finished())
    }

    /// Ends the thread: asks it to stop (its wait is interrupted if it is in one), joins it — bounded
    /// by [`STOP_GRACE`](super::STOP_GRACE) plus one period, the longest a body's work may take
    /// before its next `wait()` — and returns its end of run. A thread that does not come back is left behind:
    /// demoted to SCHED_OTHER, `abandoned` and `stalled` in the summary. Its record stays in the
    /// segment (stopped) until the instance ends. A second call returns the same summary.
    pub fn stop(&self) -> ThreadSummary {
        request_stop(&self.hosted);
        finish(&self.hosted, &self.hal, &self.watch)
    }
}

fn request_stop(h: &Hosted) {
    h.control.stop.store(true, Ordering::SeqCst);
}

/// Joins a thread asked to stop (interrupting its wait while it waits), bounded; its summary.
fn finish(h: &Hosted, reader: &HalReader, watch: &mpsc::Sender<WatchCmd>) -> ThreadSummary {
    let mut summary = h.summary.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = summary.as_ref() {
        return s.clone();
    }
    let info = h.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let handle = h.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
    // Foreign code owns the loop: the thread is signalled only while in its wait.
    let owner = LoopOwner::Foreign {
        period: info.period,
    };
    let abandoned = handle.is_some_and(|handle| {
        join_bounded(vec![(handle, Arc::clone(&h.heartbeat))], owner) == [true]
    });
    if abandoned {
        log::error!(
            "thread {}: did not return within {} ms of the stop request; left behind",
            info.name,
            owner.grace().as_millis()
        );
    }
    let _ = watch.send(WatchCmd::Forget(info.name.clone()));
    let errno = h.control.wait_error.load(Ordering::Relaxed);
    if errno != 0 {
        log::error!(
            "thread {}: its timer wait failed ({}); wait() told the body to stop",
            info.name,
            nix::errno::Errno::from_raw(errno)
        );
    }
    let panicked = h.control.panicked.load(Ordering::Relaxed);
    for r in h
        .panics
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .try_iter()
    {
        log::error!(
            "thread {}: its body panicked{}: {}; the thread ended",
            info.name,
            r.location.map_or(String::new(), |l| format!(" at {l}")),
            r.message
        );
    }
    let mut s = ThreadSummary::read(info, Some(reader));
    if panicked {
        s.faulted = vec![format!("{} (its body panicked)", s.info.name)];
    }
    s.stalled = abandoned.then(|| {
        if h.heartbeat.waiting() {
            "in its period wait".to_string()
        } else {
            "in its hosted code (it never called wait again)".to_string()
        }
    });
    s.abandoned = abandoned;
    // Stalls the thread recovered from are counted from the watchdog's history by
    // `HostedThreads::stop`; here only one that lasted to the end is known.
    s.count_stalls(&[]);
    *summary = Some(s.clone());
    s
}
