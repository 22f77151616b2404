//! The instances an exporter follows and what one scrape reads from them.
//!
//! Each instance's segment is opened read-only through `HalReader::open_with` (the trust rule every
//! reader applies: a symlink, a foreign owner or a loose mode is refused before a byte is read) and
//! kept open between scrapes. Reads are atomic loads and seqlock reads that retry on the reader's
//! side, so a scrape never writes the segment nor makes an RT thread wait. An instance whose owner
//! has gone, whose segment was removed or refused, reads as `rtapi_up 0` with no other series; it is
//! opened again at every scrape, so a restarted instance comes back by itself.
//!
//! Without `--instance`, an instance whose segment has vanished from `/dev/shm` stays `rtapi_up 0`
//! for a grace period (`--forget-after`, default [`FORGET_AFTER`]) and is then forgotten: its series
//! end and its state is dropped, so instances that come and go do not pile up in the exposition or in
//! the exporter's memory.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rtapi_hal::{Access, HalError, HalReader, ThreadState, Trust, Value};

use super::text::{histogram_samples, seconds, Family, Kind, Num};

/// Which instances to follow.
pub(super) enum Selection {
    /// The ones named with `--instance`.
    Named(Vec<String>),
    /// Every `/dev/shm/rtapi-NAME` found at each scrape (and every one seen before, as down once gone).
    All,
}

/// Where the segments live, for messages.
const SHM: &str = "/dev/shm";

/// How long an instance whose segment vanished from `/dev/shm` is still reported (`rtapi_up 0`)
/// before it is forgotten, unless `--forget-after` says otherwise.
pub(super) const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The instance names with a segment in `/dev/shm` now ([`rtapi_hal::instance_names`]).
pub(super) fn scan() -> std::io::Result<Vec<String>> {
    rtapi_hal::instance_names()
}

/// One followed instance: its open reader while it is up, and what was last said about it (so a
/// state is logged once when it changes, not at every scrape).
#[derive(Default)]
struct Followed {
    reader: Option<HalReader>,
    said: Option<String>,
    /// When its segment was last found in `/dev/shm` (`None`: not looked for yet).
    last_seen: Option<Instant>,
}

/// The exporter's state across scrapes.
pub(super) struct Sources {
    selection: Selection,
    trust: Trust,
    pins: Vec<String>,
    followed: BTreeMap<String, Followed>,
    forget_after: Duration,
    log: Box<dyn FnMut(&str) + Send>,
}

impl Sources {
    pub(super) fn new(
        selection: Selection,
        trust: Trust,
        pins: Vec<String>,
        forget_after: Duration,
        log: Box<dyn FnMut(&str) + Send>,
    ) -> Sources {
        Sources {
            selection,
            trust,
            pins,
            followed: BTreeMap::new(),
            forget_after,
            log,
        }
    }

    /// Adopts a reader opened before serving (the start-up checks), so the first scrape does not open
    /// it again.
    pub(super) fn adopt(&mut self, instance: &str, reader: HalReader) {
        let pid = reader.header().owner_pid;
        self.followed.insert(
            instance.to_string(),
            Followed {
                reader: Some(reader),
                said: Some(format!("is up (pid {pid})")),
                last_seen: None,
            },
        );
    }

    /// Logs `what` about `instance` if it differs from what was said last.
    fn say(&mut self, instance: &str, what: String, detail: &str) {
        let f = self.followed.entry(instance.to_string()).or_default();
        if f.said.as_deref() != Some(what.as_str()) {
            f.said = Some(what.clone());
            (self.log)(&format!("instance '{instance}' {what}{detail}"));
        }
    }

    /// The instances to report on this scrape.
    fn names(&mut self) -> Vec<String> {
        match &self.selection {
            Selection::Named(n) => n.clone(),
            Selection::All => {
                let found = match scan() {
                    Ok(found) => found,
                    Err(e) => {
                        // Nothing is forgotten on a listing that failed.
                        (self.log)(&format!("cannot list {SHM}: {e}"));
                        return self.followed.keys().cloned().collect();
                    }
                };
                self.forget_vanished(&found, Instant::now());
                let mut names: Vec<String> = self.followed.keys().cloned().collect();
                names.extend(found);
                names.sort();
                names.dedup();
                names
            }
        }
    }

    /// Drops the instances whose segment has been missing from `/dev/shm` (`found` lists what is
    /// there) for the grace period since it was last found, unless one is still up (an open reader
    /// of a live owner: its file was removed under it, yet it runs).
    fn forget_vanished(&mut self, found: &[String], now: Instant) {
        for name in found {
            self.followed.entry(name.clone()).or_default().last_seen = Some(now);
        }
        let present: BTreeSet<&str> = found.iter().map(String::as_str).collect();
        let grace = self.forget_after;
        let mut forgotten = Vec::new();
        self.followed.retain(|name, f| {
            if present.contains(name.as_str()) {
                return true;
            }
            let since = *f.last_seen.get_or_insert(now);
            let up = f.reader.as_ref().is_some_and(HalReader::owner_alive);
            let keep = up || now.duration_since(since) < grace;
            if !keep {
                forgotten.push(name.clone());
            }
            keep
        });
        for name in forgotten {
            (self.log)(&format!(
                "instance '{name}' is forgotten: no {SHM}/rtapi-{name} for {} s",
                grace.as_secs_f64()
            ));
        }
    }

    /// An open reader of `instance` whose owner is alive, opening it if needed; `None` (logged) if the
    /// instance is down or refused.
    fn reader(&mut self, instance: &str) -> Option<&HalReader> {
        let keep = self
            .followed
            .get(instance)
            .and_then(|f| f.reader.as_ref())
            .is_some_and(HalReader::owner_alive);
        if !keep {
            let old = self
                .followed
                .get_mut(instance)
                .and_then(|f| f.reader.take());
            if let Some(old) = old {
                let pid = old.header().owner_pid;
                self.say(
                    instance,
                    "is down".into(),
                    &format!(" (owner pid {pid} ended); rtapi_up 0 until it is back"),
                );
            }
            match HalReader::open_with(instance, Access::ReadOnly, &self.trust) {
                Ok(r) if r.owner_alive() => {
                    let pid = r.header().owner_pid;
                    self.say(instance, format!("is up (pid {pid})"), "");
                    self.followed
                        .entry(instance.to_string())
                        .or_default()
                        .reader = Some(r);
                }
                Ok(r) => {
                    let pid = r.header().owner_pid;
                    self.say(
                        instance,
                        "is down".into(),
                        &format!(": {}; rtapi_up 0", super::super::instance::dead_state(pid)),
                    );
                }
                Err(HalError::NotReady { .. }) => {
                    self.say(
                        instance,
                        "is starting".into(),
                        "; rtapi_up 0 until it has published its segment",
                    );
                }
                Err(HalError::NoSuchInstance { .. }) => {
                    self.say(
                        instance,
                        "is down".into(),
                        &format!(" (no {SHM}/rtapi-{instance}); rtapi_up 0 until it is back"),
                    );
                }
                Err(e) => {
                    // Refused (untrusted, foreign, corrupt, newer layout): never followed.
                    self.say(instance, format!("is refused: {e}"), "; rtapi_up 0");
                }
            }
        }
        self.followed.get(instance).and_then(|f| f.reader.as_ref())
    }

    /// One scrape: the families of every followed instance, in a fixed order.
    pub(super) fn collect(&mut self) -> Vec<Family> {
        let mut m = Metrics::new();
        for instance in self.names() {
            let pins = self.pins.clone();
            let read = match self.reader(&instance) {
                Some(r) => read_instance(r, &instance, &pins),
                None => {
                    m.up.push(vec![("instance", instance.clone())], Num::Int(0));
                    continue;
                }
            };
            match read {
                Ok(one) => {
                    m.up.push(vec![("instance", instance.clone())], Num::Int(1));
                    m.absorb(one);
                }
                Err(e) => {
                    // The owner went away during the read, or the structure could not be read
                    // consistently: report down this time, reopen next time.
                    if let Some(f) = self.followed.get_mut(&instance) {
                        f.reader = None;
                    }
                    self.say(&instance, format!("could not be read: {e}"), "; rtapi_up 0");
                    m.up.push(vec![("instance", instance.clone())], Num::Int(0));
                }
            }
        }
        m.families()
    }
}

/// The families of one scrape, filled instance by instance.
struct Metrics {
    up: Family,
    period: Family,
    cycles: Family,
    missed: Family,
    overruns: Family,
    latency: Family,
    latency_last: Family,
    latency_min: Family,
    latency_max: Family,
    jitter_max: Family,
    exec_last: Family,
    exec_max: Family,
    exec_total: Family,
    io: Family,
    io_last: Family,
    io_min: Family,
    io_max: Family,
    io_calls: Family,
    io_errors: Family,
    io_error_periods: Family,
    spikes: Family,
    running: Family,
    stalled: Family,
    late: Family,
    f_calls: Family,
    f_faults: Family,
    f_last: Family,
    f_max: Family,
    pin: Family,
}

impl Metrics {
    fn new() -> Metrics {
        use Kind::{Counter, Gauge, Histogram};
        Metrics {
            up: Family::new(
                "rtapi_up",
                Gauge,
                "1 while the instance's segment is open, trusted and its owner alive; 0 otherwise.",
            ),
            period: Family::new("rtapi_thread_period_seconds", Gauge, "The thread's period."),
            cycles: Family::new(
                "rtapi_thread_cycles",
                Counter,
                "Periods the thread completed.",
            ),
            missed: Family::new(
                "rtapi_thread_missed_periods",
                Counter,
                "Deadlines the thread missed (periods skipped).",
            ),
            overruns: Family::new(
                "rtapi_thread_overruns",
                Counter,
                "Periods after which the thread missed deadlines (its <thread>.overruns pin).",
            ),
            latency: Family::new(
                "rtapi_thread_latency_seconds",
                Histogram,
                "Wake latency: how late the thread woke after its deadline.",
            ),
            latency_last: Family::new(
                "rtapi_thread_latency_last_seconds",
                Gauge,
                "Wake latency of the last period (its <thread>.latency pin).",
            ),
            latency_min: Family::new(
                "rtapi_thread_latency_min_seconds",
                Gauge,
                "Smallest wake latency since the thread started.",
            ),
            latency_max: Family::new(
                "rtapi_thread_latency_max_seconds",
                Gauge,
                "Largest wake latency since the thread started.",
            ),
            jitter_max: Family::new(
                "rtapi_thread_jitter_max_seconds",
                Gauge,
                "Largest difference between a wake interval and the period.",
            ),
            exec_last: Family::new(
                "rtapi_thread_exec_last_seconds",
                Gauge,
                "Time the thread's functions took in the last period.",
            ),
            exec_max: Family::new(
                "rtapi_thread_exec_max_seconds",
                Gauge,
                "Longest time the thread's functions took in one period.",
            ),
            exec_total: Family::new(
                "rtapi_thread_exec_seconds",
                Counter,
                "Time the thread's functions took, summed over all periods.",
            ),
            io: Family::new(
                "rtapi_thread_io_seconds",
                Histogram,
                "Time the thread's I/O functions (hm2_*.read/.write/.read-request) took per period, in periods where any ran.",
            ),
            io_last: Family::new(
                "rtapi_thread_io_last_seconds",
                Gauge,
                "I/O time of the last period with I/O.",
            ),
            io_min: Family::new(
                "rtapi_thread_io_min_seconds",
                Gauge,
                "Least I/O time of a period.",
            ),
            io_max: Family::new(
                "rtapi_thread_io_max_seconds",
                Gauge,
                "Most I/O time of a period.",
            ),
            io_calls: Family::new(
                "rtapi_thread_io_calls",
                Counter,
                "Calls of the thread's I/O functions.",
            ),
            io_errors: Family::new(
                "rtapi_thread_io_errors",
                Counter,
                "Errors the I/O drivers counted during the thread's I/O calls (hm2_eth's packet errors: replies late or lost at the read deadline, writes unconfirmed).",
            ),
            io_error_periods: Family::new(
                "rtapi_thread_io_error_periods",
                Counter,
                "Periods with at least one I/O error.",
            ),
            spikes: Family::new(
                "rtapi_thread_spikes",
                Counter,
                "Periods whose latency reached the spike threshold or that missed deadlines.",
            ),
            running: Family::new(
                "rtapi_thread_running",
                Gauge,
                "1 while the thread's loop exists (running or stalled).",
            ),
            stalled: Family::new(
                "rtapi_thread_stalled",
                Gauge,
                "1 while the watchdog says the thread stalled.",
            ),
            late: Family::new(
                "rtapi_thread_late",
                Gauge,
                "1 in the period after a missed deadline (its <thread>.late pin).",
            ),
            f_calls: Family::new("rtapi_function_calls", Counter, "Calls of the function."),
            f_faults: Family::new(
                "rtapi_function_faults",
                Counter,
                "Calls of the function that reported a fault.",
            ),
            f_last: Family::new(
                "rtapi_function_exec_last_seconds",
                Gauge,
                "Time the function's last call took.",
            ),
            f_max: Family::new(
                "rtapi_function_exec_max_seconds",
                Gauge,
                "Longest time one call of the function took.",
            ),
            pin: Family::new(
                "rtapi_pin",
                Gauge,
                "A pin, param or signal chosen with --pin (bit: 0 or 1).",
            ),
        }
    }

    fn absorb(&mut self, one: Metrics) {
        for (into, from) in self.all_mut().into_iter().zip(one.into_all()) {
            into.samples.extend(from.samples);
        }
    }

    fn all_mut(&mut self) -> Vec<&mut Family> {
        vec![
            &mut self.up,
            &mut self.period,
            &mut self.cycles,
            &mut self.missed,
            &mut self.overruns,
            &mut self.latency,
            &mut self.latency_last,
            &mut self.latency_min,
            &mut self.latency_max,
            &mut self.jitter_max,
            &mut self.exec_last,
            &mut self.exec_max,
            &mut self.exec_total,
            &mut self.io,
            &mut self.io_last,
            &mut self.io_min,
            &mut self.io_max,
            &mut self.io_calls,
            &mut self.io_errors,
            &mut self.io_error_periods,
            &mut self.spikes,
            &mut self.running,
            &mut self.stalled,
            &mut self.late,
            &mut self.f_calls,
            &mut self.f_faults,
            &mut self.f_last,
            &mut self.f_max,
            &mut self.pin,
        ]
    }

    fn into_all(mut self) -> Vec<Family> {
        self.all_mut().into_iter().map(std::mem::take).collect()
    }

    fn families(self) -> Vec<Family> {
        self.into_all()
    }
}

/// A HAL value as a sample: bit → 0/1, numbers as they are.
fn number(v: Value) -> Num {
    match v {
        Value::Bit(b) => Num::Int(b as i128),
        Value::Float(f) => Num::Float(f),
        Value::S32(i) => Num::Int(i as i128),
        Value::U32(i) => Num::Int(i as i128),
        Value::S64(i) => Num::Int(i as i128),
        Value::U64(i) => Num::Int(i as i128),
    }
}

/// Reads one instance's series. Fails if a read fails or if the owner went away meanwhile (its last
/// values are not reported as if it were up).
fn read_instance(r: &HalReader, instance: &str, pins: &[String]) -> rtapi_hal::Result<Metrics> {
    let mut m = Metrics::new();
    let threads = r.threads()?;
    for t in &threads {
        let labels = || {
            vec![
                ("instance", instance.to_string()),
                ("thread", t.name.clone()),
            ]
        };
        let s = &t.stats;
        m.period.push(labels(), seconds(t.period_ns as f64));
        m.cycles.push(labels(), Num::Int(s.cycles as i128));
        m.missed.push(labels(), Num::Int(s.overruns as i128));
        if let Some(min) = s.latency_min() {
            m.latency_min.push(labels(), seconds(min as f64));
        }
        // The health pins (runtime/health.rs), where the instance has them. `latency` is written at
        // each wake, the stats block at each period's end, and the two are read one after the other:
        // a wake newer than the snapshot may be later than the snapshot's max. Both are observed
        // wakes, so the max reported is the larger of the two, and last ≤ max holds in every scrape.
        let health = |suffix: &str| r.get(&format!("{}.{suffix}", t.name)).ok();
        let last_ns = health("latency").map(|v| match number(v) {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        });
        if let Some(max) = s.latency_max() {
            let max = last_ns.map_or(max as f64, |l| l.max(max as f64));
            m.latency_max.push(labels(), seconds(max));
        }
        m.jitter_max.push(labels(), seconds(s.jitter_max_ns as f64));
        m.exec_last.push(labels(), seconds(s.exec_last_ns as f64));
        m.exec_max.push(labels(), seconds(s.exec_max_ns as f64));
        m.exec_total.push(labels(), seconds(s.exec_sum_ns as f64));
        m.spikes.push(labels(), Num::Int(s.spikes_total as i128));
        m.running.push(labels(), Num::Int(t.running as i128));
        let stalled = matches!(t.state, ThreadState::Stalled { .. });
        m.stalled.push(labels(), Num::Int(stalled as i128));
        let h = r.histogram(&t.name)?;
        m.latency
            .samples
            .extend(histogram_samples(&labels(), &h, Some(s.latency_sum_ns)));
        // I/O time (layout 2.2) and errors (2.3): only for threads that ran an I/O function.
        if let (Some(io), Some(h)) = (s.io.filter(|io| io.periods > 0), r.io_histogram(&t.name)?) {
            m.io.samples
                .extend(histogram_samples(&labels(), &h, Some(io.sum_ns as i128)));
            m.io_last.push(labels(), seconds(io.last_ns as f64));
            m.io_min.push(labels(), seconds(io.min_ns as f64));
            m.io_max.push(labels(), seconds(io.max_ns as f64));
            m.io_calls.push(labels(), Num::Int(io.calls as i128));
            if let Some(e) = io.errors {
                m.io_errors.push(labels(), Num::Int(e.count as i128));
                m.io_error_periods
                    .push(labels(), Num::Int(e.periods as i128));
            }
        }
        if let Some(ns) = last_ns {
            m.latency_last.push(labels(), seconds(ns));
        }
        if let Some(v) = health("overruns") {
            m.overruns.push(labels(), number(v));
        }
        if let Some(v) = health("late") {
            m.late.push(labels(), number(v));
        }
    }
    for f in r.functions()? {
        let labels = || {
            vec![
                ("instance", instance.to_string()),
                ("function", f.name.clone()),
                (
                    "thread",
                    f.thread.as_ref().map_or(String::new(), |t| t.0.clone()),
                ),
            ]
        };
        m.f_calls.push(labels(), Num::Int(f.timing.calls as i128));
        m.f_faults.push(labels(), Num::Int(f.timing.faults as i128));
        m.f_last.push(labels(), seconds(f.timing.last_ns as f64));
        m.f_max.push(labels(), seconds(f.timing.max_ns as f64));
    }
    for name in pins {
        // A name this instance does not have is left out (another instance may have it).
        if let Ok(v) = r.get(name) {
            m.pin.push(
                vec![("instance", instance.to_string()), ("name", name.clone())],
                number(v),
            );
        }
    }
    if !r.owner_alive() {
        return Err(HalError::OwnerGone {
            instance: instance.to_string(),
            pid: r.header().owner_pid,
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sampler's FIFO file (`rtapi-NAME:sampler.0`) is no instance: `:` is allowed in HAL object
    /// names, never in instance names.
    #[test]
    fn the_scan_finds_segments_and_skips_fifo_files() {
        let name = format!("exportscan-{}", std::process::id());
        let seg = format!("{SHM}/rtapi-{name}");
        let fifo = format!("{seg}:sampler.0");
        std::fs::write(&seg, b"").unwrap();
        std::fs::write(&fifo, b"").unwrap();
        let found = scan();
        let _ = std::fs::remove_file(&seg);
        let _ = std::fs::remove_file(&fifo);
        let found = found.unwrap();
        assert!(found.contains(&name), "{found:?}");
        assert!(!found.iter().any(|n| n.contains(':')), "{found:?}");
    }
}
