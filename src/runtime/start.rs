//! [`Runtime::start`] in its phases, each a function a reviewer can read on its own:
//!
//! 1. [`place`]: every thread's CPU and priority (rate-monotonic unless given), checked against the
//!    machine (CPU online and allowed; `spin` only on an isolated CPU of its own);
//! 2. [`build_segment`]: the threads and their run order into the HAL, which is built and published;
//! 3. [`make_slots`]: every function's per-period closure, made from the finished HAL — the last
//!    allocation a function makes — in the slot table with its timing record writer and health
//!    handles (functions not added to a thread get theirs too: `addf` may add them while running);
//! 4. [`harden`]: lock memory, prefault, hold `/dev/cpu_dma_latency` (fatal or not by the flavor);
//! 5. [`spawn`]: one OS thread per RT thread with its plan (timer, functions, stats writer, heartbeat);
//! 6. [`synchronize`]: two handshakes — every thread set up (policy, CPU, stack), then every timer armed
//!    on one common origin — or a clean abort that ends what was spawned;
//! 7. [`start_housekeeping`]: the event drainer and the watchdog, on CPUs without RT threads.
//!
//! Any failure before phase 7 returns a [`RuntimeError`] and leaves nothing running: the segment is
//! unlinked when the `Hal` drops, spawned threads are told to abort and joined.

use super::housekeeping::{self, drain, housekeeping_cpus, start_watchdog, Housekeeping};
use super::panic::{self, PanicReport};
use super::runlist::RunListCell;
use super::slots::{FunctionSlot, Slots};
use super::stop::join_runtime_threads;
use super::thread::{self, Heartbeat, SetupError, ThreadPlan};
use super::watchdog::{Watchdog, WatchdogOptions, Watched};
use super::{
    Configuring, Running, RunningThread, Runtime, RuntimeError, StartedThread, ThreadSpec,
    EVENT_CAPACITY,
};
use crate::detect::SystemReport;
use crate::flavor;
use crate::rt::clock::{self, Nanos};
use crate::rt::harden::{self, HardenOptions, Hardening};
use crate::rt::msg::{self, Consumer};
use crate::rt::sched::{self, Policy};
use crate::rt::signals;
use crate::rt::wake::{CycleTimer, WakeMode};
use rtapi_hal::{FunctionKey, Hal, HistogramConfig, ThreadConfig, ThreadKey};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A thread with its place decided.
pub(super) struct Placement<'a> {
    pub(super) spec: &'a ThreadSpec,
    pub(super) cpu: usize,
    pub(super) priority: i32,
    pub(super) policy: Policy,
}

/// A spawned thread waiting in the handshakes.
struct Starting {
    thread: RunningThread,
    ready: mpsc::Receiver<thread::SetupResult>,
    origin: mpsc::Sender<Option<Nanos>>,
}

/// Per-thread pieces the housekeeping threads take over.
struct Supervision {
    consumers: Vec<(String, Arc<Slots>, Consumer)>,
    watched: Vec<Watched>,
    panics: mpsc::Receiver<PanicReport>,
}

impl Runtime<Configuring> {
    /// Builds the segment, hardens the process, starts every thread on a common timeline origin.
    /// Fails without leaving anything running.
    pub fn start(self) -> Result<Runtime<Running>, RuntimeError> {
        let c = self.state;
        // From here on SIGINT/SIGTERM are requests this run answers (if the command did not already
        // install the handlers).
        let signal = signals::shutdown_flag();
        install_handlers()?;

        let fifo = c.selection.flavor.real_time();
        let placed = place(&c.system, &c.threads, fifo)?;
        let planned: Vec<super::neighbours::Planned> = placed
            .iter()
            .map(|p| super::neighbours::Planned {
                name: &p.spec.name,
                cpu: p.cpu,
                priority: if fifo { p.priority } else { 0 },
            })
            .collect();
        for warning in super::neighbours::shared_cpus(&c.opts.instance, &planned) {
            log::warn!("{warning}");
        }
        let (hal, keys) = build_segment(c.hal, &placed, &c.addf, c.selection.flavor, c.histogram)?;
        super::crash::guard_segment(&hal);
        let recorder = c.opts.recorder.clone().map(|config| {
            let threads: Vec<(String, Nanos)> = placed
                .iter()
                .map(|p| (p.spec.name.clone(), p.spec.period))
                .collect();
            Arc::new(super::recorder::Recorder::new(
                config,
                &c.opts.instance,
                &threads,
            ))
        });
        let taps = match &recorder {
            Some(r) => (0..placed.len())
                .map(|i| r.tap(i, &hal).map(Some))
                .collect::<Result<Vec<_>, _>>()
                .map_err(RuntimeError::Config)?,
            None => placed.iter().map(|_| None).collect(),
        };
        let (slots, slot_of) = make_slots(c.factories, &hal, &c.function_health);
        let slots = Arc::new(slots);
        let hardening = harden(c.opts.lock_memory, c.opts.dma_latency, c.selection.flavor)?;
        let stop = Arc::new(AtomicBool::new(false));
        let health = Health {
            threads: &c.thread_health,
            taps,
        };
        let Spawned {
            starting,
            supervision,
            lists,
        } = spawn(
            &hal,
            &placed,
            &keys,
            (&slots, &slot_of),
            &stop,
            &c.opts,
            health,
        )?;
        let (threads, origin) = synchronize(starting, &stop)?;
        hal.set_running(!c.opts.functions_stopped);

        let placed_cpus: Vec<usize> = placed.iter().map(|p| p.cpu).collect();
        let stalled_stop = Arc::new(AtomicBool::new(false));
        let housekeeping = start_housekeeping(
            &hal,
            supervision,
            (c.opts.watchdog, recorder.as_ref()),
            &stalled_stop,
            housekeeping_cpus(&c.system.cpus, &placed_cpus),
            fifo,
        );
        Ok(Runtime {
            state: Running {
                hal,
                threads,
                stop,
                housekeeping,
                stalled_stop,
                signal,
                selection: c.selection,
                system: c.system,
                started: Instant::now(),
                origin,
                _hardening: hardening,
                slots,
                lists,
                thread_keys: keys,
                slot_of: std::sync::Mutex::new(slot_of),
                live: std::sync::Mutex::new(()),
                recorder,
                residents: c.residents.into_running(),
            },
        })
    }
}

/// Phase 1: CPU and priority of every thread, checked against the machine.
pub(super) fn place<'a>(
    system: &SystemReport,
    threads: &'a [ThreadSpec],
    fifo: bool,
) -> Result<Vec<Placement<'a>>, RuntimeError> {
    let periods: Vec<Nanos> = threads.iter().map(|t| t.period).collect();
    let rate_monotonic = sched::rate_monotonic_priorities(&periods);
    let mut placed = Vec::new();
    for (spec, rm) in threads.iter().zip(rate_monotonic) {
        let cpu = match spec.cpu.or(system.cpus.rt_cpu) {
            Some(cpu) => cpu,
            None => sched::current_cpu().map_err(|e| RuntimeError::Thread {
                thread: spec.name.clone(),
                error: SetupError::Cpu(e.into()),
            })?,
        };
        let (priority, policy) = if fifo {
            let priority = spec.priority.unwrap_or(rm);
            (priority, Policy::Fifo { priority })
        } else {
            (0, Policy::Other)
        };
        placed.push(Placement {
            spec,
            cpu,
            priority,
            policy,
        });
    }
    check_cpus(system, &placed)?;
    check_spin(system, &placed)?;
    Ok(placed)
}

/// The CPUs [`place`] may put a thread on whose spec names none: the RT CPU detection chose; without
/// one, the CPU its starter runs on at the time, which may be any online CPU. (Hosted threads are
/// placed one by one while the instance runs: these are the CPUs they may run on.)
pub(super) fn unpinned_cpus(cpus: &crate::detect::Cpus) -> Vec<usize> {
    match cpus.rt_cpu {
        Some(cpu) => vec![cpu],
        None => cpus.online.clone().unwrap_or_default(),
    }
}

/// Every thread's CPU must be online (and allowed): said before anything starts.
fn check_cpus(system: &SystemReport, placed: &[Placement]) -> Result<(), RuntimeError> {
    let online = system
        .cpus
        .online
        .clone()
        .or_else(|| sched::online_cpus().ok())
        .unwrap_or_default();
    for p in placed {
        let allowed = system
            .cpus
            .allowed
            .as_ref()
            .is_none_or(|a| a.contains(&p.cpu));
        if !online.contains(&p.cpu) || !allowed {
            return Err(RuntimeError::Config(format!(
                "thread '{}': CPU {} is {} (online CPUs: {}); choose another (latency-test --cpu, or `cpu =` in the machine config)",
                p.spec.name,
                p.cpu,
                if online.contains(&p.cpu) {
                    "not allowed for this process"
                } else {
                    "offline or does not exist"
                },
                crate::rt::cpulist::format(&online)
            )));
        }
    }
    Ok(())
}

/// `--wake spin` burns its CPU: it needs an isolated CPU with no other rtapi thread on it.
fn check_spin(system: &SystemReport, placed: &[Placement]) -> Result<(), RuntimeError> {
    for p in placed.iter().filter(|p| p.spec.wake == WakeMode::Spin) {
        let shared = placed
            .iter()
            .any(|o| o.spec.name != p.spec.name && o.cpu == p.cpu);
        if !system.cpus.isolated.contains(&p.cpu) || shared {
            return Err(RuntimeError::Config(format!(
                "thread '{}': --wake spin needs a CPU to itself, and CPU {} is {}: isolate one (isolcpus={} on the kernel command line) and give only this thread that CPU, or use --wake hybrid",
                p.spec.name,
                p.cpu,
                if shared { "shared with another rtapi thread" } else { "not isolated" },
                p.cpu
            )));
        }
        if system.throttling.throttled == Some(true) {
            log::warn!(
                "thread '{}' spins under RT throttling: the kernel will stop it for {:.0} ms every second (sysctl kernel.sched_rt_runtime_us=-1 lifts this)",
                p.spec.name,
                system.throttling.rt_period_us.unwrap_or(1_000_000) as f64 / 1000.0
                    * (1.0 - system.throttling.rt_share().unwrap_or(1.0))
            );
        }
    }
    Ok(())
}

/// Phase 2: the threads and their run order into the HAL; the segment is built and published.
fn build_segment(
    mut hal: rtapi_hal::HalBuilder,
    placed: &[Placement],
    addf: &[(String, String, Option<usize>)],
    flavor: flavor::Flavor,
    histogram: HistogramConfig,
) -> Result<(Hal, Vec<ThreadKey>), RuntimeError> {
    let mut keys = Vec::new();
    for p in placed {
        let mut config = ThreadConfig::new(&p.spec.name, p.spec.period.as_nanos() as u64)
            .cpu(p.cpu as u32)
            .priority(p.priority)
            .flavor(flavor.name())
            .timer(p.spec.timer.name())
            .histogram(histogram);
        if let Some(t) = p.spec.spike_threshold {
            config = config.spike_threshold_ns(t.as_nanos().max(1));
        }
        keys.push(hal.thread(config)?);
    }
    for (function, thread, position) in addf {
        hal.addf(function, thread, *position)?;
    }
    // Room for what halcmd may add while the instance runs (a deleted record's room is reused).
    let hal = hal.capacity(rtapi_hal::Capacity {
        factor: 4,
        floor: LIVE_SPARE_RECORDS,
    });
    Ok((hal.build().map_err(RuntimeError::Segment)?, keys))
}

/// Spare records per table of the segment for objects added while the instance runs (about 1.5 MiB).
pub(super) const LIVE_SPARE_RECORDS: usize = 4096;

/// Room in the slot table for functions loaded while the instance runs (an unloaded function's slot
/// goes to the next one).
pub(super) const SPARE_SLOTS: usize = 1024;

/// Phase 3: every function's per-period closure, with its timing writer and health handles, in the
/// slot table; and each function's slot number.
fn make_slots(
    factories: Vec<(FunctionKey, String, super::function::FunctionFactory)>,
    hal: &Hal,
    health: &HashMap<String, super::health::FunctionKeys>,
) -> (Slots, HashMap<FunctionKey, u32>) {
    let slots = Slots::with_capacity(factories.len() + SPARE_SLOTS);
    let mut slot_of = HashMap::new();
    for (key, name, factory) in factories {
        let body = factory(hal);
        let timer = hal.function_timer(key);
        let handles = health.get(&name).map(|k| k.handles(hal));
        if let Some(n) = slots.put(FunctionSlot::new(name, body, Some(timer), handles)) {
            slot_of.insert(key, n);
        }
    }
    (slots, slot_of)
}

/// Before an instance's first RT thread (its own or hosted): a stop can interrupt a waiting thread,
/// and panics of RT threads go to the log.
pub(super) fn install_handlers() -> Result<(), RuntimeError> {
    signals::install_wake_handler().map_err(RuntimeError::Signals)?;
    panic::install_hook();
    Ok(())
}

/// Phase 4: hardening; an essential step that failed is fatal when the flavor says so. The interval
/// clock is calibrated here too (20 ms, once per process), not on an RT thread.
pub(super) fn harden(
    lock_memory: bool,
    dma_latency: bool,
    flavor: flavor::Flavor,
) -> Result<Hardening, RuntimeError> {
    let hardening = harden::harden_process(&HardenOptions {
        lock_memory,
        dma_latency,
        ..HardenOptions::default()
    });
    for failure in hardening
        .report
        .failures(flavor.descriptor().memory_lock_required)
    {
        if failure.fatal {
            return Err(RuntimeError::Harden { failure, flavor });
        }
        log::warn!("{}", failure.message);
    }
    let _ = clock::IntervalClock::get();
    Ok(hardening)
}

/// The health objects declared while configuring (see [`super::health`]).
struct Health<'a> {
    threads: &'a HashMap<String, super::health::ThreadKeys>,
    /// Each thread's flight-recorder tap (in placement order), if the instance records.
    taps: Vec<Option<super::recorder::Tap>>,
}

/// Phase 5: one OS thread per RT thread, each waiting for the handshakes.
fn spawn(
    hal: &Hal,
    placed: &[Placement],
    keys: &[ThreadKey],
    (slots, slot_of): (&Arc<Slots>, &HashMap<FunctionKey, u32>),
    stop: &Arc<AtomicBool>,
    opts: &super::RuntimeOptions,
    health: Health<'_>,
) -> Result<Spawned, RuntimeError> {
    let (lock_memory, functions_stopped) = (opts.lock_memory, opts.functions_stopped);
    let mut starting = Vec::new();
    let (panic_tx, panics) = mpsc::sync_channel::<PanicReport>(16);
    let mut supervision = Supervision {
        consumers: Vec::new(),
        watched: Vec::new(),
        panics,
    };
    let mut lists = Vec::new();
    for ((p, &key), tap) in placed.iter().zip(keys).zip(health.taps) {
        let list: Vec<u32> = hal
            .thread_functions(key)
            .iter()
            .filter_map(|k| slot_of.get(k).copied())
            .collect();
        let names: Vec<String> = list.iter().map(|&n| slots.name(n).to_string()).collect();
        let list = Arc::new(
            RunListCell::new(&list)
                .map_err(|e| RuntimeError::Config(format!("thread {}: {e}", p.spec.name)))?,
        );
        lists.push(Arc::clone(&list));
        let (events, consumer) = msg::channel(EVENT_CAPACITY);
        let heartbeat = Arc::new(Heartbeat::default());
        heartbeat.set_functions_running(!functions_stopped);
        let thread_health = health.threads.get(&p.spec.name);
        supervision.watched.push(
            Watched::new(
                p.spec.name.clone(),
                Arc::clone(slots),
                p.spec.period,
                p.policy,
                heartbeat.clone(),
                hal.thread_state_cell(key),
            )
            .with_stalled_pin(thread_health.map(|k| hal.pin(k.stalled))),
        );
        let health = thread_health.map(|k| super::health::ThreadHealth::new(hal, k));
        let plan = ThreadPlan {
            name: p.spec.name.clone(),
            period: p.spec.period,
            policy: p.policy,
            cpu: Some(p.cpu),
            timer: CycleTimer::new(p.spec.timer, p.spec.wake),
            slots: Arc::clone(slots),
            list,
            stats: hal.stats_writer(key)?,
            events,
            stack_prefault: if lock_memory {
                harden::DEFAULT_STACK_PREFAULT
            } else {
                0
            },
            heartbeat: heartbeat.clone(),
            panics: panic_tx.clone(),
            health,
            recorder: tap,
        };
        let (ready_tx, ready) = mpsc::channel();
        let (origin, origin_rx) = mpsc::channel();
        let stop = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("rtapi-{}", p.spec.name))
            .spawn(move || thread::run(plan, stop, ready_tx, origin_rx))
            .map_err(|error| RuntimeError::Spawn {
                thread: p.spec.name.clone(),
                error,
            })?;
        let info = StartedThread {
            name: p.spec.name.clone(),
            period: p.spec.period,
            priority: p.priority,
            cpu: p.cpu,
            timer: p.spec.timer,
            wake: p.spec.wake,
            functions: names.clone(),
            tid: None,
        };
        supervision
            .consumers
            .push((p.spec.name.clone(), Arc::clone(slots), consumer));
        starting.push(Starting {
            thread: RunningThread {
                info,
                handle,
                heartbeat,
            },
            ready,
            origin,
        });
    }
    Ok(Spawned {
        starting,
        supervision,
        lists,
    })
}

/// What [`spawn`] made: the threads in their handshakes, what housekeeping takes over, and each
/// thread's run list.
struct Spawned {
    starting: Vec<Starting>,
    supervision: Supervision,
    lists: Vec<Arc<RunListCell>>,
}

/// Phase 6: every thread set up, then every timer armed on one origin; or abort them all.
fn synchronize(
    starting: Vec<Starting>,
    stop: &AtomicBool,
) -> Result<(Vec<RunningThread>, Nanos), RuntimeError> {
    let abort = |starting: Vec<Starting>, error: RuntimeError| {
        stop.store(true, Ordering::Relaxed);
        for s in &starting {
            let _ = s.origin.send(None);
        }
        let abandoned = join_runtime_threads(starting.into_iter().map(|s| s.thread).collect());
        if !abandoned.is_empty() {
            log::error!("threads {abandoned:?} did not end after the failed start");
        }
        error
    };
    if let Some(e) = first_failure(&starting) {
        return Err(abort(starting, e));
    }
    let origin = clock::now() + Nanos::from_millis(20);
    for s in &starting {
        let _ = s.origin.send(Some(origin));
    }
    if let Some(e) = first_failure(&starting) {
        return Err(abort(starting, e));
    }
    Ok((starting.into_iter().map(|s| s.thread).collect(), origin))
}

/// One answer from every starting thread; the first failure (or a thread that never answers).
fn first_failure(starting: &[Starting]) -> Option<RuntimeError> {
    for s in starting {
        let error = match s.ready.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => e,
            Err(_) => SetupError::NoAnswer,
        };
        return Some(RuntimeError::Thread {
            thread: s.thread.info.name.clone(),
            error,
        });
    }
    None
}

/// Phase 7: the event drainer (logs faults, panics, overruns once a second), the watchdog
/// ([`start_watchdog`]) and the recorder's writer (not real time), on `cpus`.
fn start_housekeeping(
    hal: &Hal,
    supervision: Supervision,
    (opts, recorder): (WatchdogOptions, Option<&Arc<super::recorder::Recorder>>),
    stalled_stop: &Arc<AtomicBool>,
    cpus: Vec<usize>,
    fifo: bool,
) -> Housekeeping {
    let Supervision {
        consumers,
        watched,
        panics,
    } = supervision;
    let mut h = Housekeeping::on(cpus);
    h.drainer = {
        let (stop, reader) = (h.stop.clone(), hal.reader().ok());
        housekeeping::spawn("rtapi-events", &h.cpus, None, move || {
            drain(consumers, panics, reader, &stop)
        })
    };
    let dog = Watchdog::new(opts, watched, stalled_stop.clone()).with_recorder(recorder.cloned());
    h.watchdog = start_watchdog(dog, None, &h.stop, &h.cpus, fifo);
    h.recorder = recorder.and_then(|r| {
        let (r, stop) = (Arc::clone(r), h.stop.clone());
        housekeeping::spawn("rtapi-recorder", &h.cpus, None, move || r.serve(&stop))
    });
    h
}
