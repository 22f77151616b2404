//! The flight recorder (`[recorder]` in the machine TOML): the last seconds of every RT thread's
//! periods, kept in memory and written to files when something goes wrong.
//!
//! Each RT thread owns a ring of records (period number, wake time, latency, execution time, missed
//! periods, function fault, the chosen pins' values), preallocated before the threads start. The
//! thread writes one record per period with relaxed atomic stores and a release store of the ring's
//! head: no allocation, no lock, no wait ([`Tap::record`]); it never stops recording. A freeze event — an overrun, a function
//! fault, a trigger pin's edge (seen by the RT thread), a stall (seen by the watchdog) or a dump
//! request (`rtapi recorder dump`) — claims the recorder once (compare-and-swap); every thread keeps
//! recording for the post-trigger stretch after the event's wake and then marks its freeze point (the
//! ring's head then). The `rtapi-recorder` thread (not real time) waits for every freeze point
//! (bounded: a stalled thread marks none, and its ring is copied as it is), copies the window before
//! each point — the ring has a quarter of a second of slack beyond the window for that, and a record
//! overwritten during the copy is left out — re-arms the recorder and writes the dump ([`dump`]).
//! The rings record all along, so a later dump has no hole where an earlier one was taken.

pub mod dump;

use crate::rt::clock::{self, Nanos};
use rtapi_hal::Probe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The most pins a recorder records besides the per-period figures.
pub const MAX_PINS: usize = 8;
/// The most seconds of history a recorder keeps.
pub const MAX_SECONDS: f64 = 600.0;

/// A pin or signal edge that freezes the recorder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinTrigger {
    /// The pin or signal (pins first, like `getp`).
    pub name: String,
    /// `true`: on FALSE → TRUE (`rising:NAME`); `false`: on TRUE → FALSE (`falling:NAME`, an estop).
    pub rising: bool,
    /// Where the config named it (`file:line: `), for the error if it does not exist.
    pub origin: String,
}

/// The recorder of a machine, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecorderConfig {
    /// History kept per thread.
    pub window: Nanos,
    /// How long recording goes on after a freeze event.
    pub post: Nanos,
    /// Pins or signals recorded each period (at most [`MAX_PINS`]), each with where it was named.
    pub pins: Vec<(String, String)>,
    /// Where dumps go.
    pub dir: PathBuf,
    /// Freeze on a period with at least this many missed deadlines (0: never).
    pub on_overrun: u64,
    /// Freeze when the watchdog finds a thread stalled.
    pub on_stall: bool,
    /// Freeze when a function panics.
    pub on_fault: bool,
    /// Freeze on these edges.
    pub triggers: Vec<PinTrigger>,
    /// After a dump, events other than a request are ignored this long (a noisy machine would
    /// otherwise dump many times a second).
    pub holdoff: Nanos,
    /// Dumps of events other than requests in one run; then only requests dump.
    pub max_dumps: u32,
}

/// What froze the recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Missed deadlines.
    Overrun = 1,
    /// A function panicked.
    Fault = 2,
    /// The watchdog found a thread stalled.
    Stall = 3,
    /// A trigger pin's edge.
    Pin = 4,
    /// `rtapi recorder dump`.
    Request = 5,
}

impl Event {
    fn from_code(c: u32) -> Event {
        match c {
            1 => Event::Overrun,
            2 => Event::Fault,
            3 => Event::Stall,
            4 => Event::Pin,
            _ => Event::Request,
        }
    }

    /// The name in the dump's JSON.
    pub fn name(self) -> &'static str {
        match self {
            Event::Overrun => "overrun",
            Event::Fault => "fault",
            Event::Stall => "stall",
            Event::Pin => "pin",
            Event::Request => "request",
        }
    }
}

/// Fields of a record, in the ring, before the pins.
const FIELDS: usize = 6;
const F_PERIOD: usize = 0;
const F_WAKE: usize = 1;
const F_LATENCY: usize = 2;
const F_EXEC: usize = 3;
const F_MISSED: usize = 4;
const F_FAULT: usize = 5;

/// One thread's ring.
pub(crate) struct Ring {
    name: String,
    period: Nanos,
    cells: Box<[AtomicU64]>,
    width: usize,
    capacity: usize,
    /// Records a dump holds: the window and the post-trigger stretch.
    keep: usize,
    /// Records written so far (the next one goes to `head % capacity`).
    head: AtomicU64,
    /// The head at the end of the post-trigger stretch ([`NOT_FROZEN`] before); cleared at re-arm.
    frozen_at: AtomicU64,
}

const NOT_FROZEN: u64 = u64::MAX;

/// One period as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The period number on the thread's timeline.
    pub period: u64,
    /// The wake time (CLOCK_MONOTONIC ns).
    pub wake_ns: i64,
    /// The wake latency.
    pub latency_ns: i64,
    /// The work's duration.
    pub exec_ns: u64,
    /// Deadlines passed by the end of the work (the next `missed` periods were skipped).
    pub missed: u64,
    /// A function panicked in this period.
    pub faulted: bool,
    /// The recorded pins' values.
    pub pins: Vec<f64>,
}

impl Ring {
    /// The `keep` records before the freeze point (or the head, if the thread marked none), oldest
    /// first; records the thread may have overwritten while they were copied are left out.
    fn snapshot(&self) -> Vec<Record> {
        let end = match self.frozen_at.load(Ordering::Acquire) {
            NOT_FROZEN => self.head.load(Ordering::Acquire),
            at => at,
        };
        let start = end.saturating_sub(self.keep as u64);
        let mut out = Vec::with_capacity((end - start) as usize);
        for i in start..end {
            let base = (i % self.capacity as u64) as usize * self.width;
            let c = |f: usize| self.cells[base + f].load(Ordering::Relaxed);
            out.push(Record {
                period: c(F_PERIOD),
                wake_ns: c(F_WAKE) as i64,
                latency_ns: c(F_LATENCY) as i64,
                exec_ns: c(F_EXEC),
                missed: c(F_MISSED),
                faulted: c(F_FAULT) != 0,
                pins: (FIELDS..self.width).map(|f| f64::from_bits(c(f))).collect(),
            });
        }
        // A record is sound if the writer had not come round to its place again by the end.
        let after = self.head.load(Ordering::Acquire);
        let lost = after
            .saturating_sub(self.capacity as u64)
            .saturating_sub(start) as usize;
        out.drain(..lost.min(out.len()));
        out
    }
}

const ARMED: u32 = 0;
const CLAIMING: u32 = 1;
const TRIGGERED: u32 = 2;
/// After a dump, for the hold-off (or for good after `max_dumps`): only a request claims it.
const RESTING: u32 = 3;

/// The recorder of a running instance: the rings, the freeze state, the dumps written.
pub struct Recorder {
    config: RecorderConfig,
    instance: String,
    rings: Vec<Ring>,
    state: AtomicU32,
    event: AtomicU32,
    thread: AtomicU32,
    period: AtomicU64,
    wake: AtomicU64,
    missed: AtomicU64,
    pin: AtomicU32,
    /// Dumps of events other than requests so far.
    automatic_dumps: AtomicU32,
    /// `rtapi recorder dump --out DIR`.
    request_dir: Mutex<Option<PathBuf>>,
    /// Dumps written (count, last result), with a condition for the requester.
    done: Mutex<(u64, Result<Vec<PathBuf>, dump::DumpError>)>,
    done_cv: Condvar,
}

/// Where a freeze came from, as the dump names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// What happened.
    pub event: Event,
    /// The thread it happened in (none for a request).
    pub thread: Option<String>,
    /// The thread's period number.
    pub period: u64,
    /// When (CLOCK_MONOTONIC ns).
    pub wake_ns: i64,
    /// Missed periods (an overrun).
    pub missed: u64,
    /// The trigger pin (a pin edge).
    pub pin: Option<String>,
}

impl Recorder {
    /// Allocates every thread's ring (`threads`: name and period).
    pub fn new(config: RecorderConfig, instance: &str, threads: &[(String, Nanos)]) -> Recorder {
        let width = FIELDS + config.pins.len();
        let rings = threads
            .iter()
            .map(|(name, period)| {
                let p = period.as_nanos().max(1);
                let keep =
                    ((config.window.as_nanos() + config.post.as_nanos()) / p + 1).max(16) as usize;
                let capacity = keep + (250_000_000 / p).max(64) as usize;
                let mut cells = Vec::with_capacity(capacity * width);
                cells.resize_with(capacity * width, || AtomicU64::new(0));
                Ring {
                    name: name.clone(),
                    period: *period,
                    cells: cells.into_boxed_slice(),
                    width,
                    capacity,
                    keep,
                    head: AtomicU64::new(0),
                    frozen_at: AtomicU64::new(NOT_FROZEN),
                }
            })
            .collect();
        Recorder {
            config,
            instance: instance.to_string(),
            rings,
            state: AtomicU32::new(ARMED),
            event: AtomicU32::new(0),
            thread: AtomicU32::new(u32::MAX),
            period: AtomicU64::new(0),
            wake: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            pin: AtomicU32::new(u32::MAX),
            automatic_dumps: AtomicU32::new(0),
            request_dir: Mutex::new(None),
            done: Mutex::new((0, Ok(Vec::new()))),
            done_cv: Condvar::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RecorderConfig {
        &self.config
    }

    /// Claims the recorder for an event, if armed (a request also while resting). RT-safe: one
    /// compare-and-swap and a few stores.
    fn trigger(&self, event: Event, thread: u32, period: u64, wake: Nanos, missed: u64, pin: u32) {
        let claim = |from| {
            self.state
                .compare_exchange(from, CLAIMING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        };
        let claimed = claim(ARMED) || (event == Event::Request && claim(RESTING));
        if !claimed {
            return;
        }
        self.event.store(event as u32, Ordering::Relaxed);
        self.thread.store(thread, Ordering::Relaxed);
        self.period.store(period, Ordering::Relaxed);
        self.wake.store(wake.as_nanos() as u64, Ordering::Relaxed);
        self.missed.store(missed, Ordering::Relaxed);
        self.pin.store(pin, Ordering::Relaxed);
        self.state.store(TRIGGERED, Ordering::Release);
    }

    /// The watchdog found thread `index` stalled.
    pub fn stalled(&self, index: usize) {
        if self.config.on_stall {
            self.trigger(Event::Stall, index as u32, 0, clock::now(), 0, u32::MAX);
        }
    }

    /// Whether an event has claimed the recorder (its dump is not written yet).
    pub fn triggered(&self) -> bool {
        self.state.load(Ordering::Acquire) == TRIGGERED
    }

    fn current_trigger(&self) -> Trigger {
        let thread = self.thread.load(Ordering::Relaxed) as usize;
        let pin = self.pin.load(Ordering::Relaxed) as usize;
        Trigger {
            event: Event::from_code(self.event.load(Ordering::Relaxed)),
            thread: self.rings.get(thread).map(|r| r.name.clone()),
            period: self.period.load(Ordering::Relaxed),
            wake_ns: self.wake.load(Ordering::Relaxed) as i64,
            missed: self.missed.load(Ordering::Relaxed),
            pin: self.config.triggers.get(pin).map(|t| t.name.clone()),
        }
    }

    /// `rtapi recorder dump`: freezes now (or joins a freeze under way), waits for the dump (at most
    /// `limit`) and gives its files. `dir` replaces the configured directory for this dump.
    pub fn dump_now(
        &self,
        dir: Option<PathBuf>,
        limit: Duration,
    ) -> Result<Vec<PathBuf>, dump::DumpError> {
        let seen = self.lock_done().0;
        if dir.is_some() {
            *self.request_dir.lock().unwrap_or_else(|p| p.into_inner()) = dir;
        }
        self.trigger(Event::Request, u32::MAX, 0, clock::now(), 0, u32::MAX);
        let deadline = Instant::now() + limit;
        let mut done = self.lock_done();
        while done.0 == seen {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(dump::DumpError::Timeout { limit });
            }
            done = self
                .done_cv
                .wait_timeout(done, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        done.1.clone()
    }

    fn lock_done(&self) -> std::sync::MutexGuard<'_, (u64, Result<Vec<PathBuf>, dump::DumpError>)> {
        self.done.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether every ring is frozen.
    fn all_frozen(&self) -> bool {
        self.rings
            .iter()
            .all(|r| r.frozen_at.load(Ordering::Acquire) != NOT_FROZEN)
    }

    /// Copies the current freeze, re-arms, writes the dump and publishes the result.
    fn write_dump(&self) {
        let trigger = self.current_trigger();
        let threads: Vec<dump::ThreadRecords> = self
            .rings
            .iter()
            .map(|r| dump::ThreadRecords {
                name: r.name.clone(),
                period: r.period,
                records: r.snapshot(),
            })
            .collect();
        // Re-arm (after the hold-off): the next event is caught while this dump is written.
        for r in &self.rings {
            r.frozen_at.store(NOT_FROZEN, Ordering::Release);
        }
        let automatic = trigger.event != Event::Request;
        let dumps = self
            .automatic_dumps
            .fetch_add(u32::from(automatic), Ordering::Relaxed)
            + u32::from(automatic);
        let rest =
            automatic && (self.config.holdoff > Nanos::ZERO || dumps >= self.config.max_dumps);
        if automatic && dumps == self.config.max_dumps {
            log::warn!(
                "recorder: {dumps} dumps in this run (max_dumps); from now on only `rtapi recorder dump` writes one"
            );
        }
        self.state
            .store(if rest { RESTING } else { ARMED }, Ordering::Release);
        let dir = self
            .request_dir
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_else(|| self.config.dir.clone());
        let pins: Vec<String> = self.config.pins.iter().map(|(n, _)| n.clone()).collect();
        let result = dump::write(
            &dir,
            &self.instance,
            &trigger,
            &pins,
            &self.config,
            &threads,
        );
        match &result {
            Ok(files) => log::warn!(
                "recorder: {} froze it; dump written: {}",
                trigger.event.name(),
                files
                    .first()
                    .map_or(String::new(), |f| f.display().to_string())
            ),
            Err(e) => log::error!("recorder: cannot write the dump: {e}"),
        }
        let mut done = self.lock_done();
        done.0 += 1;
        done.1 = result;
        self.done_cv.notify_all();
    }

    /// The body of the `rtapi-recorder` thread: every 10 ms, a freeze whose rings are all frozen
    /// (or that waited the post-trigger stretch plus a second) is dumped; at `stop`, a freeze under
    /// way is dumped at once.
    pub(crate) fn serve(&self, stop: &AtomicBool) {
        let mut since: Option<Instant> = None;
        let mut resting_since: Option<Instant> = None;
        let holdoff = Duration::from_nanos(self.config.holdoff.as_nanos().max(0) as u64);
        let patience = Duration::from_nanos(self.config.post.as_nanos().max(0) as u64)
            + Duration::from_secs(1);
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            if self.triggered() {
                let t = *since.get_or_insert_with(Instant::now);
                if stopping || self.all_frozen() || t.elapsed() >= patience {
                    self.write_dump();
                    since = None;
                }
            }
            if self.state.load(Ordering::Acquire) == RESTING {
                let t = *resting_since.get_or_insert_with(Instant::now);
                if t.elapsed() >= holdoff
                    && self.automatic_dumps.load(Ordering::Relaxed) < self.config.max_dumps
                {
                    // Only a request may have claimed it meanwhile: then this fails, fine.
                    let _ = self.state.compare_exchange(
                        RESTING,
                        ARMED,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                    resting_since = None;
                }
            } else {
                resting_since = None;
            }
            if stopping {
                return;
            }
            std::thread::park_timeout(Duration::from_millis(10));
        }
    }

    /// The tap of thread `index` (its RT side), with the probes of the recorded and trigger pins.
    pub fn tap(self: &Arc<Recorder>, index: usize, hal: &rtapi_hal::Hal) -> Result<Tap, String> {
        let probe = |name: &str, origin: &str| {
            hal.probe(name)
                .map_err(|_| format!("{origin}recorder: no pin or signal {name:?}"))
        };
        let pins = self
            .config
            .pins
            .iter()
            .map(|(n, o)| probe(n, o))
            .collect::<Result<Vec<_>, _>>()?;
        let triggers = self
            .config
            .triggers
            .iter()
            .map(|t| probe(&t.name, &t.origin).map(|p| (p, t.rising, None)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tap {
            recorder: Arc::clone(self),
            index,
            pins,
            triggers,
            post: self.config.post,
        })
    }
}

/// The RT side of one thread's recording (owned by its cycle loop).
pub struct Tap {
    recorder: Arc<Recorder>,
    index: usize,
    pins: Vec<Probe>,
    /// Probe, rising edge or falling, the level last period.
    triggers: Vec<(Probe, bool, Option<bool>)>,
    post: Nanos,
}

impl Tap {
    /// One period's record, the freeze events it shows, and the freeze point at the end of the
    /// post-trigger stretch. RT-safe: relaxed atomic stores, release stores, no allocation.
    #[inline]
    pub fn record(
        &mut self,
        period: u64,
        wake: Nanos,
        latency_ns: i64,
        exec_ns: u64,
        missed: u64,
        faulted: bool,
    ) {
        let rec = &*self.recorder;
        let ring = &rec.rings[self.index];
        let h = ring.head.load(Ordering::Relaxed);
        {
            let base = (h % ring.capacity as u64) as usize * ring.width;
            let cells = &ring.cells[base..base + ring.width];
            cells[F_PERIOD].store(period, Ordering::Relaxed);
            cells[F_WAKE].store(wake.as_nanos() as u64, Ordering::Relaxed);
            cells[F_LATENCY].store(latency_ns as u64, Ordering::Relaxed);
            cells[F_EXEC].store(exec_ns, Ordering::Relaxed);
            cells[F_MISSED].store(missed, Ordering::Relaxed);
            cells[F_FAULT].store(u64::from(faulted), Ordering::Relaxed);
            for (cell, p) in cells[FIELDS..].iter().zip(&self.pins) {
                cell.store(p.get_f64().to_bits(), Ordering::Relaxed);
            }
            ring.head.store(h + 1, Ordering::Release);
        }
        let state = rec.state.load(Ordering::Acquire);
        if state == ARMED {
            let c = &rec.config;
            let i = self.index as u32;
            if c.on_overrun > 0 && missed >= c.on_overrun {
                rec.trigger(Event::Overrun, i, period, wake, missed, u32::MAX);
            } else if faulted && c.on_fault {
                rec.trigger(Event::Fault, i, period, wake, missed, u32::MAX);
            }
        }
        // Edges are followed every period, so that a level that was already there when the
        // recorder re-armed is no edge.
        for (j, (probe, rising, last)) in self.triggers.iter_mut().enumerate() {
            let level = probe.get_f64() != 0.0;
            let edge = last.is_some_and(|l| l != level && level == *rising);
            *last = Some(level);
            if edge && state == ARMED {
                rec.trigger(Event::Pin, self.index as u32, period, wake, 0, j as u32);
            }
        }
        if rec.state.load(Ordering::Acquire) == TRIGGERED
            && ring.frozen_at.load(Ordering::Relaxed) == NOT_FROZEN
        {
            let at = Nanos::from_nanos(rec.wake.load(Ordering::Relaxed) as i64);
            if wake >= at + self.post {
                ring.frozen_at.store(h + 1, Ordering::Release);
            }
        }
    }
}

#[cfg(test)]
pub(crate) fn tests_config(dir: &std::path::Path) -> RecorderConfig {
    RecorderConfig {
        window: Nanos::from_millis(20),
        post: Nanos::from_millis(3),
        pins: Vec::new(),
        dir: dir.to_path_buf(),
        on_overrun: 1,
        on_stall: true,
        on_fault: true,
        triggers: Vec::new(),
        holdoff: Nanos::ZERO,
        max_dumps: 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(post: Nanos) -> RecorderConfig {
        RecorderConfig {
            window: Nanos::from_millis(20),
            post,
            pins: Vec::new(),
            dir: std::env::temp_dir(),
            on_overrun: 1,
            on_stall: true,
            on_fault: true,
            triggers: Vec::new(),
            holdoff: Nanos::ZERO,
            max_dumps: 10,
        }
    }

    #[test]
    fn the_ring_keeps_the_latest_records_and_freezes_after_the_post_stretch() {
        let ms = Nanos::from_millis(1);
        let rec = Arc::new(Recorder::new(
            config(Nanos::from_millis(3)),
            "t",
            &[("servo".into(), ms)],
        ));
        let mut tap = Tap {
            recorder: Arc::clone(&rec),
            index: 0,
            pins: Vec::new(),
            triggers: Vec::new(),
            post: rec.config.post,
        };
        let cap = rec.rings[0].capacity as u64;
        let keep = rec.rings[0].keep as u64;
        let mut k = 0;
        while k < 3 * cap {
            tap.record(k, ms * k as i64, 1000, 500, 0, false);
            k += 1;
        }
        let s = rec.rings[0].snapshot();
        assert_eq!(s.len() as u64, keep);
        assert_eq!(s.last().unwrap().period, k - 1);
        assert!(s.windows(2).all(|w| w[1].period == w[0].period + 1));
        // An overrun of 300 periods, then three more periods of post-trigger stretch: frozen.
        tap.record(k, ms * k as i64, 300_000_000, 500, 300, false);
        assert!(rec.triggered());
        k += 301;
        for _ in 0..4 {
            tap.record(k, ms * k as i64, 1000, 500, 0, false);
            k += 1;
        }
        assert_ne!(rec.rings[0].frozen_at.load(Ordering::Relaxed), NOT_FROZEN);
        let last = rec.rings[0].snapshot().last().unwrap().period;
        // Recording goes on; the dump ends at the freeze point.
        tap.record(k, ms * k as i64, 1000, 500, 0, false);
        assert_eq!(rec.rings[0].snapshot().last().unwrap().period, last);
        assert_eq!(rec.current_trigger().event, Event::Overrun);
        assert_eq!(rec.current_trigger().missed, 300);
    }

    #[test]
    fn after_a_dump_only_a_request_claims_it_during_the_holdoff() {
        let ms = Nanos::from_millis(1);
        let dir = std::env::temp_dir().join(format!("rtapi-rec-holdoff-{}", std::process::id()));
        let mut c = tests_config(&dir);
        c.holdoff = Nanos::from_secs(60);
        let rec = Arc::new(Recorder::new(c, "t", &[("servo".into(), ms)]));
        let mut tap = Tap {
            recorder: Arc::clone(&rec),
            index: 0,
            pins: Vec::new(),
            triggers: Vec::new(),
            post: rec.config.post,
        };
        for k in 0..10 {
            tap.record(k, ms * k as i64, 1000, 500, u64::from(k == 5), false);
        }
        assert!(rec.all_frozen());
        rec.write_dump();
        assert!(!rec.triggered());
        // An overrun while resting is ignored; a request is not.
        tap.record(20, ms * 20, 1000, 500, 3, false);
        assert!(!rec.triggered());
        rec.trigger(Event::Request, u32::MAX, 0, ms * 21, 0, u32::MAX);
        assert!(rec.triggered());
        assert_eq!(rec.current_trigger().event, Event::Request);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
