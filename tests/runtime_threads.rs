//! The runtime with real SCHED_FIFO threads on this machine: timeline accounting, overruns, faults,
//! and the RT-path rules (no allocation, no page faults). Every assertion is a property that holds on a
//! noisy 2-core VM; latency itself is never asserted.

mod common;
use common::{alloc_count, eventually};

use rtapi::rt::clock::{self, Nanos};
use rtapi::rt::wake::{sleep_until, TimerKind, WakeMode};
use rtapi::runtime::function::{Cycle, RtFn};
use rtapi::runtime::{Runtime, RuntimeError, RuntimeOptions, SpecProblem, ThreadSpec};
use rtapi_hal::{Hal, HalReader};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

// Counts the allocations of the threads that watch themselves (the RT thread, from inside a function).
#[global_allocator]
static GLOBAL: common::alloc_count::CountingAlloc = common::alloc_count::CountingAlloc;

fn options(test: &str) -> RuntimeOptions {
    RuntimeOptions {
        instance: format!("t-{test}-{}", std::process::id()),
        flavor: Some("posix".into()),
        ..RuntimeOptions::default()
    }
}

/// A runtime with one thread and one function made by `body`.
fn one_thread(
    test: &str,
    spec: ThreadSpec,
    body: impl FnOnce(&Hal) -> RtFn + 'static,
) -> Result<rtapi::runtime::Runtime<rtapi::runtime::Running>, RuntimeError> {
    one_thread_with(options(test), spec, body)
}

/// As [`one_thread`], with these options.
fn one_thread_with(
    options: RuntimeOptions,
    spec: ThreadSpec,
    body: impl FnOnce(&Hal) -> RtFn + 'static,
) -> Result<rtapi::runtime::Runtime<rtapi::runtime::Running>, RuntimeError> {
    let mut rt = Runtime::configure(options)?;
    let thread = spec.name.clone();
    rt.thread(spec)?;
    let comp = rt.hal().component("probe")?;
    rt.function(comp, "probe.run", Box::new(body))?;
    rt.addf("probe.run", &thread, None)?;
    rt.start()
}

/// Every call of a function as the function saw it — (number, missed, now_ns) — in call order, with
/// room for `cap` calls reserved up front (nothing allocates on the RT thread).
struct Calls {
    n: AtomicUsize,
    rows: Vec<[AtomicU64; 3]>,
}

impl Calls {
    fn new(cap: usize) -> Arc<Calls> {
        Arc::new(Calls {
            n: AtomicUsize::new(0),
            rows: (0..cap)
                .map(|_| [(); 3].map(|_| AtomicU64::new(0)))
                .collect(),
        })
    }

    fn record(&self, c: &Cycle) {
        let i = self.n.fetch_add(1, SeqCst);
        if let Some(r) = self.rows.get(i) {
            r[0].store(c.number, SeqCst);
            r[1].store(c.missed, SeqCst);
            r[2].store(c.now_ns as u64, SeqCst);
        }
    }

    /// How many calls were made (also past the room kept).
    fn count(&self) -> u64 {
        self.n.load(SeqCst) as u64
    }

    /// The calls recorded, as (number, missed, now).
    fn rows(&self) -> Vec<(u64, u64, Nanos)> {
        let n = self.n.load(SeqCst).min(self.rows.len());
        self.rows[..n]
            .iter()
            .map(|r| {
                (
                    r[0].load(SeqCst),
                    r[1].load(SeqCst),
                    Nanos::from_nanos(r[2].load(SeqCst) as i64),
                )
            })
            .collect()
    }
}

/// The timeline properties every run has, however the host delays it: period `k` is due at
/// `first + k·period`; no call comes before its deadline; each call's number is the previous one's
/// plus one plus the periods it says were missed in between (skipped, never run back to back).
/// Returns each call's lateness behind its deadline on that absolute grid.
fn assert_on_the_timeline(rows: &[(u64, u64, Nanos)], first: Nanos, period: Nanos) -> Vec<Nanos> {
    assert!(!rows.is_empty(), "no call at all");
    assert_eq!(
        (rows[0].0, rows[0].1),
        (0, 0),
        "the first call is period 0, nothing missed before it"
    );
    for w in rows.windows(2) {
        assert_eq!(
            w[1].0,
            w[0].0 + 1 + w[1].1,
            "period {} follows {} with {} missed in between",
            w[1].0,
            w[0].0,
            w[1].1
        );
    }
    rows.iter()
        .map(|&(k, _, now)| {
            let due = first + period * k as i64;
            assert!(
                now >= due,
                "period {k} woke at {now}, before its deadline {due}"
            );
            now - due
        })
        .collect()
}

/// The number of deadlines of the timeline `first + k·period` at or before `t`.
fn due_by(first: Nanos, period: Nanos, t: Nanos) -> u64 {
    if t < first {
        0
    } else {
        ((t - first).as_nanos() / period.as_nanos()) as u64 + 1
    }
}

/// Seed 000: a 10 ms thread for 5 s must account for 500 periods (Linux 2.6's setitimer gave 455),
/// and must not drift, for every machine-grade timer driver. On a noisy machine the thread may be
/// late or skip periods, but what it has accounted (periods run + periods missed) is never more than
/// the deadlines gone by, and catches up with them as soon as it runs: a drifting timer falls behind
/// for good (45 periods in 5 s).
#[test]
fn ten_ms_for_five_seconds_accounts_500_periods_without_drift_on_every_driver() {
    let drivers = [
        TimerKind::Nanosleep,
        TimerKind::PosixTimer,
        TimerKind::Timerfd,
    ];
    let handles: Vec<_> = drivers
        .into_iter()
        .map(|timer| {
            std::thread::spawn(move || {
                let period = Nanos::from_millis(10);
                let spec = ThreadSpec {
                    timer,
                    ..ThreadSpec::new("servo", period)
                };
                let running =
                    one_thread(&format!("500-{timer}"), spec, |_| Box::new(|_: &Cycle| {}))
                        .unwrap();
                let reader = running.hal().reader().unwrap();
                let first = running.origin() + period;
                sleep_until(first + Nanos::from_millis(4_995)).unwrap();
                // Read between two clock reads: accounted ≤ due at the later one; caught up when
                // at most the period that is just being woken for is not accounted yet.
                let mut samples = 0u64;
                let (accounted, due) = eventually::until(
                    &format!("{timer}: the thread accounts every deadline of 5 s"),
                    eventually::GENEROUS,
                    || {
                        let before = clock::now();
                        let s = reader.thread_stats("servo").unwrap();
                        let after = clock::now();
                        let k = s.cycles + s.overruns;
                        samples += 1;
                        assert!(
                            k <= due_by(first, period, after),
                            "{timer}: {k} periods accounted, only {} due",
                            due_by(first, period, after)
                        );
                        let due = due_by(first, period, before);
                        (due >= 500 && k + 1 >= due).then_some((k, due))
                    },
                );
                let summary = running.stop();
                let stopped = clock::now();
                let s = summary.threads[0].stats.unwrap();
                (
                    timer,
                    s,
                    accounted,
                    due,
                    samples,
                    due_by(first, period, stopped),
                )
            })
        })
        .collect();
    for h in handles {
        let (timer, s, accounted, due, samples, due_at_stop) = h.join().unwrap();
        let total = s.cycles + s.overruns;
        eprintln!(
            "{timer}: {accounted} accounted of {due} due after {samples} reads; at stop {} cycles + {} overruns of {due_at_stop} due; drift {} ns",
            s.cycles, s.overruns, s.drift_ns
        );
        assert!(
            total >= accounted && total <= due_at_stop,
            "{timer}: {total} accounted at stop, {accounted} before, {due_at_stop} due"
        );
        // The wakes stay on the grid: the least lateness of the last 8 wakes (a floor, not a
        // latency: a host stall delays one or two of them, a timer re-armed from its wake drifts
        // through the whole period) is a tenth of a period.
        assert!(
            s.drift_ns >= 0 && s.drift_ns < s.period_ns as i64 / 10,
            "{timer}: drift {} ns",
            s.drift_ns
        );
    }
}

/// Seed 002: a 2 ms thread runs cycle 60 on the deadline 120 ms after cycle 0's — every call on the
/// absolute grid (never early, numbers jumping only by the periods missed), and the lateness does not
/// accumulate: the least lateness of the last 20 wakes is under half a period (a thread that
/// re-armed from its wake would be a whole sum of wake latencies behind).
#[test]
fn two_ms_thread_runs_60_cycles_in_120_ms() {
    let period = Nanos::from_millis(2);
    let calls = Calls::new(4096);
    let c = calls.clone();
    let running = one_thread("60in120", ThreadSpec::new("servo", period), move |_| {
        Box::new(move |cy: &Cycle| c.record(cy))
    })
    .unwrap();
    let first = running.origin() + period;
    eventually::until_true("period 100 is due and passed", eventually::GENEROUS, || {
        calls.rows().last().is_some_and(|r| r.0 >= 100)
    });
    running.stop();
    let rows = calls.rows();
    let late = assert_on_the_timeline(&rows, first, period);
    let at60 = rows.iter().position(|r| r.0 >= 60).unwrap();
    eprintln!(
        "{} calls; period {} (the first at or after 60) woke {} after period 0's deadline, {} late",
        rows.len(),
        rows[at60].0,
        rows[at60].2 - first,
        late[at60]
    );
    let last20 = late[late.len() - 20..].iter().min().unwrap();
    eprintln!("least lateness of the last 20 wakes: {last20}");
    assert!(
        *last20 < Nanos::from_nanos(period.as_nanos() / 2),
        "the wakes fell behind the grid: {last20}"
    );
}

/// A function that sleeps 3.5 periods once: at least 3 periods missed and skipped (a host stall can
/// add more), the next wake is on the original timeline, and the functions see the real dt and the
/// missed count; every period is accounted for as run or missed.
#[test]
fn a_long_function_costs_three_skipped_periods_and_keeps_the_timeline() {
    let period = Nanos::from_millis(20);
    let calls = Calls::new(4096);
    let c = calls.clone();
    let dt_after = Arc::new(AtomicU64::new(0));
    let d = dt_after.clone();
    let running = one_thread("overrun", ThreadSpec::new("servo", period), move |_| {
        let mut long_done = false;
        Box::new(move |cy: &Cycle| {
            c.record(cy);
            if long_done && d.load(SeqCst) == 0 {
                d.store(cy.dt_ns, SeqCst); // the first wake after the long one
            }
            if cy.number >= 10 && !long_done {
                long_done = true;
                std::thread::sleep(Duration::from_millis(70));
            }
        })
    })
    .unwrap();
    let first = running.origin() + period;
    eventually::until_true(
        "15 periods after the long one",
        eventually::GENEROUS,
        || calls.rows().last().is_some_and(|r| r.0 >= 40),
    );
    let summary = running.stop();
    let stats = summary.threads[0].stats.unwrap();
    let rows = calls.rows();
    let late = assert_on_the_timeline(&rows, first, period);
    let long = rows.iter().position(|r| r.0 >= 10).unwrap();
    let (number, missed, _) = rows[long + 1];
    let dt = dt_after.load(SeqCst);
    eprintln!(
        "long call in period {}; the next: number {number} missed {missed} dt {dt} late {}; overruns {}",
        rows[long].0, late[long + 1], stats.overruns
    );
    assert!(
        missed >= 3,
        "70 ms of work in a 20 ms period skips at least 3 periods: {missed}"
    );
    assert_eq!(number, rows[long].0 + 1 + missed, "skipped, not run");
    assert!(dt >= 70_000_000, "the function sees the real dt: {dt}");
    // The wakes after it are on the original grid, not re-armed from the long call's end (that
    // would put every one of them ~10 ms off it).
    let least = late[long + 1..].iter().min().unwrap();
    assert!(
        *least < Nanos::from_nanos(period.as_nanos() / 4),
        "on the original timeline after the long call: least lateness {least}"
    );
    // Accounting: every call is a period run; every period up to the last call is run or missed.
    assert_eq!(
        stats.cycles,
        calls.count(),
        "every period run called it once"
    );
    let missed_seen: u64 = rows.iter().map(|r| r.1).sum();
    assert_eq!(
        rows.len() as u64 + missed_seen,
        rows.last().unwrap().0 + 1,
        "periods run + missed = the timeline's periods"
    );
    assert!(
        stats.overruns >= missed_seen && stats.overruns >= 3,
        "overruns {} ≥ the missed periods the calls saw ({missed_seen})",
        stats.overruns
    );
}

/// A panicking function is disabled and marked faulted; its thread and the other function go on.
#[test]
fn a_panicking_function_is_disabled_and_the_thread_goes_on() {
    let mut rt = Runtime::configure(options("panic")).unwrap();
    rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))
        .unwrap();
    let comp = rt.hal().component("bad").unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let c2 = counter.clone();
    let explode_calls = Arc::new(AtomicU64::new(0));
    let e2 = explode_calls.clone();
    rt.function(
        comp,
        "bad.explode",
        Box::new(move |_: &Hal| {
            Box::new(move |c: &Cycle| {
                e2.fetch_add(1, SeqCst);
                assert!(c.number < 20, "deliberate test panic")
            }) as RtFn
        }),
    )
    .unwrap();
    rt.function(
        comp,
        "bad.count",
        Box::new(move |_: &Hal| {
            Box::new(move |_: &Cycle| {
                c2.fetch_add(1, SeqCst);
            }) as RtFn
        }),
    )
    .unwrap();
    rt.addf("bad.explode", "servo", None).unwrap();
    rt.addf("bad.count", "servo", None).unwrap();
    let running = rt.start().unwrap();
    let reader = running.hal().reader().unwrap();
    let f = eventually::until("bad.explode marked faulted", eventually::GENEROUS, || {
        let f = reader.function_named("bad.explode").unwrap();
        (f.timing.fault_code != 0).then_some(f)
    });
    // Periods the host made the thread miss are never called: the count is what it was called.
    let made = explode_calls.load(SeqCst);
    assert!((1..=21).contains(&made), "{made} calls");
    assert_eq!(
        f.timing.calls, made,
        "every call counted, up to the one that panicked"
    );
    let at_fault = counter.load(SeqCst);
    let cycles_at_fault = reader.thread_stats("servo").unwrap().cycles;
    eventually::until_true("100 more periods", eventually::GENEROUS, || {
        reader.thread_stats("servo").unwrap().cycles >= cycles_at_fault + 100
    });
    assert_eq!(explode_calls.load(SeqCst), made, "never called again");
    let summary = running.stop();
    assert_eq!(summary.threads[0].faulted, vec!["bad.explode".to_string()]);
    let after = counter.load(SeqCst);
    assert!(
        after >= at_fault + 100,
        "the other function kept running, once a period: {at_fault} -> {after}"
    );
    assert!(summary.to_string().contains("bad.explode FAULTED"));
}

/// After warm-up, 1000 periods of the loop (wait, clock, stats, function call, the flight recorder's
/// record with two pins and a trigger pin, its ring wrapping several times) allocate nothing, take no
/// page fault, and switch context only to wait — once per period, never preempted — for every
/// machine-grade driver. The function itself measures from inside the RT thread.
#[test]
fn the_cycle_loop_allocates_nothing_faults_nothing_and_only_sleeps() {
    const FROM: u64 = 50;
    const TO: u64 = FROM + 1000;
    for timer in [
        TimerKind::Nanosleep,
        TimerKind::PosixTimer,
        TimerKind::Timerfd,
    ] {
        // allocations, faults, voluntary switches, involuntary switches, done, policy
        let result = Arc::new([(); 6].map(|_| AtomicU64::new(u64::MAX)));
        let r = result.clone();
        let r_done = &result[4];
        let spec = ThreadSpec {
            timer,
            ..ThreadSpec::new("servo", Nanos::from_millis(1))
        };
        let dumps = std::env::temp_dir().join(format!("rtapi-noalloc-{}", std::process::id()));
        let options = RuntimeOptions {
            recorder: Some(rtapi::runtime::recorder::RecorderConfig {
                window: Nanos::from_millis(200),
                post: Nanos::from_millis(20),
                pins: vec![
                    ("servo.latency".into(), String::new()),
                    ("servo.missed".into(), String::new()),
                ],
                dir: dumps.clone(),
                on_overrun: 1,
                holdoff: Nanos::ZERO,
                max_dumps: 10,
                on_stall: true,
                on_fault: true,
                triggers: vec![rtapi::runtime::recorder::PinTrigger {
                    name: "servo.stalled".into(),
                    rising: true,
                    origin: String::new(),
                }],
            }),
            ..options(&format!("noalloc-{timer}"))
        };
        let running = one_thread_with(options, spec, move |_| {
            let mut start = (0u64, rtapi::rt::sched::thread_usage().unwrap());
            Box::new(move |c: &Cycle| {
                if c.number >= FROM && !alloc_count::watched() {
                    // SAFETY: sched_getscheduler(0) only reads the calling thread's policy.
                    let policy = unsafe { libc::sched_getscheduler(0) };
                    r[5].store(policy as u64, SeqCst);
                    start = (
                        alloc_count::allocations(),
                        rtapi::rt::sched::thread_usage().unwrap(),
                    );
                    alloc_count::watch(true);
                } else if c.number >= TO && r[4].load(SeqCst) == u64::MAX {
                    let u = rtapi::rt::sched::thread_usage().unwrap().since(&start.1);
                    r[0].store(alloc_count::allocations() - start.0, SeqCst);
                    r[1].store(u.minor_faults + u.major_faults, SeqCst);
                    r[2].store(u.voluntary_switches, SeqCst);
                    r[3].store(u.involuntary_switches, SeqCst);
                    r[4].store(c.number - FROM, SeqCst);
                }
            })
        })
        .unwrap();
        eventually::until_true(
            &format!("{timer}: {} periods measured", TO - FROM),
            eventually::GENEROUS,
            || r_done.load(SeqCst) != u64::MAX,
        );
        running.stop();
        let _ = std::fs::remove_dir_all(&dumps);
        let [allocs, faults, voluntary, involuntary, periods, policy] =
            result.each_ref().map(|a| a.load(SeqCst));
        eprintln!("{timer}: {periods} periods, {allocs} allocations, {faults} faults, {voluntary} voluntary / {involuntary} involuntary switches");
        assert_ne!(periods, u64::MAX, "{timer}: the measurement finished");
        assert_eq!(allocs, 0, "{timer}: allocations on the RT thread");
        assert_eq!(faults, 0, "{timer}: page faults on the RT thread");
        assert!(
            voluntary <= periods,
            "{timer}: at most one sleep per period"
        );
        // Ordinary work cannot preempt it: it runs SCHED_FIFO. What can (the kernel's stopper
        // thread, a higher real-time priority, RT throttling) is rare: ci5 of stop 39 saw one
        // involuntary switch in 1000 periods on a quiet machine.
        assert_eq!(
            policy,
            libc::SCHED_FIFO as u64,
            "{timer}: the loop runs SCHED_FIFO"
        );
        assert!(
            involuntary <= periods / 100,
            "{timer}: a SCHED_FIFO thread is preempted only rarely ({involuntary} involuntary \
             switches in {periods} periods)"
        );
    }
}

/// posix: SCHED_FIFO at the rate-monotonic priority on the chosen CPU; sim: SCHED_OTHER.
#[test]
fn flavors_set_the_policy_priority_and_cpu() {
    for (flavor, want_policy) in [("posix", libc::SCHED_FIFO), ("sim", libc::SCHED_OTHER)] {
        let seen = Arc::new((AtomicI64::new(-1), AtomicI64::new(-1), AtomicI64::new(-1)));
        let s = seen.clone();
        let mut rt = Runtime::configure(RuntimeOptions {
            flavor: Some(flavor.into()),
            // A host stall must not make the watchdog demote the thread to SCHED_OTHER for a while
            // (it restores the policy once periods complete again): a full stressed run read the
            // policy in that window.
            watchdog: rtapi::runtime::watchdog::WatchdogOptions {
                action: rtapi::runtime::watchdog::StallAction::Report,
                ..Default::default()
            },
            ..options(&format!("flv-{flavor}"))
        })
        .unwrap();
        rt.thread(ThreadSpec::new("base", Nanos::from_micros(100)))
            .unwrap();
        rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))
            .unwrap();
        let comp = rt.hal().component("probe").unwrap();
        rt.function(
            comp,
            "probe.run",
            Box::new(move |_: &Hal| {
                Box::new(move |_: &Cycle| {
                    // SAFETY: sched_getscheduler(0), sched_getparam(0, &mut p) and sched_getcpu only query the
                    // calling thread; `p` is a valid, exclusively borrowed sched_param.
                    unsafe {
                        let mut p = libc::sched_param { sched_priority: -1 };
                        libc::sched_getparam(0, &mut p);
                        s.0.store(libc::sched_getscheduler(0) as i64, SeqCst);
                        s.1.store(p.sched_priority as i64, SeqCst);
                        s.2.store(libc::sched_getcpu() as i64, SeqCst);
                    }
                }) as RtFn
            }),
        )
        .unwrap();
        rt.addf("probe.run", "servo", None).unwrap();
        let rt_cpu = rt.system().cpus.rt_cpu.unwrap() as i64;
        let running = rt.start().unwrap();
        let threads = running.threads();
        eventually::until_true(
            &format!("{flavor}: the function ran"),
            eventually::GENEROUS,
            || seen.2.load(SeqCst) != -1,
        );
        running.stop();
        assert_eq!(seen.0.load(SeqCst), want_policy as i64, "{flavor}");
        if flavor == "posix" {
            assert_eq!(
                seen.1.load(SeqCst),
                97,
                "servo is the second-fastest thread"
            );
            assert_eq!(threads[0].priority, 98, "base is the fastest");
        }
        assert_eq!(
            seen.2.load(SeqCst),
            rt_cpu,
            "{flavor}: pinned to detect's RT CPU"
        );
    }
}

#[test]
fn bad_specs_are_refused_with_what_to_do() {
    let mut rt = Runtime::configure(options("bad")).unwrap();
    let e = rt
        .thread(ThreadSpec {
            timer: TimerKind::Select,
            ..ThreadSpec::new("x", Nanos::from_millis(1))
        })
        .unwrap_err();
    assert!(e.to_string().contains("compare-timers only"), "{e}");
    assert!(
        matches!(
            &e,
            RuntimeError::Spec {
                problem: SpecProblem::ComparisonTimer(TimerKind::Select),
                ..
            }
        ),
        "{e:?}"
    );
    let e = rt.thread(ThreadSpec::new("x", Nanos::ZERO)).unwrap_err();
    assert!(e.to_string().contains("period 0ns is not positive"), "{e}");
    let e = rt
        .thread(ThreadSpec {
            priority: Some(0),
            ..ThreadSpec::new("x", Nanos::from_millis(1))
        })
        .unwrap_err();
    assert!(
        matches!(
            &e,
            RuntimeError::Spec {
                problem: SpecProblem::Priority(0),
                ..
            }
        ),
        "{e:?}"
    );
    rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))
        .unwrap();
    assert!(rt
        .thread(ThreadSpec::new("servo", Nanos::from_millis(2)))
        .unwrap_err()
        .to_string()
        .contains("twice"));
    let e = rt.addf("nothing.here", "base", None).unwrap_err();
    assert!(e.to_string().contains("no thread 'base'"), "{e}");

    let mut rt = Runtime::configure(options("badcpu")).unwrap();
    rt.thread(ThreadSpec {
        cpu: Some(4095),
        ..ThreadSpec::new("servo", Nanos::from_millis(1))
    })
    .unwrap();
    let e = rt.start().err().unwrap();
    assert!(
        e.to_string().contains("CPU 4095") && e.to_string().contains("--cpu"),
        "{e}"
    );
    assert!(matches!(e, RuntimeError::Config(_)), "a usage error: {e:?}");

    let mut rt = Runtime::configure(options("spin")).unwrap();
    let not_isolated = rt
        .system()
        .cpus
        .online
        .clone()
        .unwrap()
        .into_iter()
        .find(|c| !rt.system().cpus.isolated.contains(c));
    rt.thread(ThreadSpec {
        wake: WakeMode::Spin,
        cpu: not_isolated,
        ..ThreadSpec::new("servo", Nanos::from_millis(1))
    })
    .unwrap();
    let e = rt.start().err().unwrap();
    assert!(e.to_string().contains("spin needs a CPU to itself"), "{e}");
}

/// The segment exists while running, with the thread's live stats, and is gone after stop.
#[test]
fn the_segment_lives_exactly_as_long_as_the_run() {
    let opts = options("segment");
    let path = format!("/dev/shm/rtapi-{}", opts.instance);
    let running = one_thread(
        "segment",
        ThreadSpec::new("servo", Nanos::from_millis(1)),
        |_| Box::new(|_: &Cycle| {}),
    )
    .unwrap();
    assert!(std::path::Path::new(&path).exists());
    let reader = HalReader::open(&opts.instance, rtapi_hal::Access::ReadOnly).unwrap();
    let cycles = || reader.thread_stats("servo").unwrap().cycles;
    let a = eventually::until("a period counted", eventually::GENEROUS, || {
        let a = cycles();
        (a > 0).then_some(a)
    });
    let b = eventually::until("the stats move while running", eventually::GENEROUS, || {
        let b = cycles();
        (b > a).then_some(b)
    });
    let summary = running.stop();
    assert!(!std::path::Path::new(&path).exists(), "unlinked on stop");
    assert!(summary.threads[0].stats.unwrap().cycles >= b);
    let _ = clock::now();
}

/// halcmd's `stop` and `start`: a runtime started with its functions stopped keeps time (periods are
/// counted) but calls nothing until `start`; `stop` halts the calls again while periods go on.
#[test]
fn functions_stopped_until_start_and_after_stop_while_the_thread_keeps_time() {
    let calls = Arc::new(AtomicU64::new(0));
    let c = calls.clone();
    let mut rt = Runtime::configure(RuntimeOptions {
        functions_stopped: true,
        ..options("startstop")
    })
    .unwrap();
    rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))
        .unwrap();
    let comp = rt.hal().component("probe").unwrap();
    rt.function(
        comp,
        "probe.run",
        Box::new(move |_| {
            Box::new(move |_: &Cycle| {
                c.fetch_add(1, SeqCst);
            })
        }),
    )
    .unwrap();
    rt.addf("probe.run", "servo", None).unwrap();
    let running = rt.start().unwrap();
    let reader = running.hal().reader().unwrap();
    let cycles = || reader.thread_stats("servo").unwrap().cycles;
    let state = || format!("{:?}", reader.header().state);
    eventually::until_true(
        "the thread keeps time: 20 periods",
        eventually::GENEROUS,
        || cycles() >= 20,
    );
    assert!(!running.functions_running());
    assert_eq!(calls.load(SeqCst), 0, "no call before start");
    let stopped_state = state();

    running.set_functions_running(true);
    eventually::until_true("20 calls after start", eventually::GENEROUS, || {
        calls.load(SeqCst) >= 20
    });
    assert!(running.functions_running());
    assert_ne!(state(), stopped_state, "the segment's state follows");

    running.set_functions_running(false);
    // The period under way may still call; from the next one on, none does.
    let set_at = cycles();
    eventually::until_true("two periods after stop", eventually::GENEROUS, || {
        cycles() >= set_at + 2
    });
    let at_stop = calls.load(SeqCst);
    let cycles_at_stop = cycles();
    eventually::until_true("20 periods after stop", eventually::GENEROUS, || {
        cycles() >= cycles_at_stop + 20
    });
    assert_eq!(calls.load(SeqCst), at_stop, "no call after stop");
    running.stop();
}

/// halcmd's `addf`/`delf` on a running instance: a function loaded but not added starts running
/// when added (at the position asked), stops when removed, and can move to another thread; the
/// segment's run lists follow, and a function in one thread cannot be added to a second.
#[test]
fn functions_are_added_removed_and_moved_while_threads_run() {
    let counters: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut rt = Runtime::configure(options("liveaddf")).unwrap();
    rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))
        .unwrap();
    rt.thread(ThreadSpec::new("slow", Nanos::from_millis(2)))
        .unwrap();
    let comp = rt.hal().component("probe").unwrap();
    for (i, c) in counters.iter().enumerate() {
        let c = c.clone();
        rt.function(
            comp,
            &format!("probe.f{i}"),
            Box::new(move |_| {
                Box::new(move |_: &Cycle| {
                    c.fetch_add(1, SeqCst);
                })
            }),
        )
        .unwrap();
    }
    rt.addf("probe.f0", "servo", None).unwrap();
    let running = rt.start().unwrap();
    let reader = running.hal().reader().unwrap();
    let count = |i: usize| counters[i].load(SeqCst);
    let segment_list = |t: &str| -> Vec<String> {
        let mut fs: Vec<_> = reader
            .functions()
            .unwrap()
            .into_iter()
            .filter(|f| f.thread.as_ref().is_some_and(|(n, _)| n == t))
            .collect();
        fs.sort_by_key(|f| f.thread.as_ref().map(|(_, p)| *p));
        fs.into_iter().map(|f| f.name).collect()
    };
    let cycles = |t: &str| reader.thread_stats(t).unwrap().cycles;
    eventually::until_true("f0 called 10 times", eventually::GENEROUS, || count(0) > 10);
    assert_eq!((count(1), count(2)), (0, 0), "not added: never called");

    // Add f1 first and f2 last in servo.
    running.addf("probe.f1", "servo", Some(0)).unwrap();
    running.addf("probe.f2", "servo", None).unwrap();
    assert_eq!(
        running.thread_functions("servo").unwrap(),
        ["probe.f1", "probe.f0", "probe.f2"]
    );
    assert_eq!(segment_list("servo"), ["probe.f1", "probe.f0", "probe.f2"]);
    eventually::until_true("f1 and f2 called 10 times", eventually::GENEROUS, || {
        count(1) > 10 && count(2) > 10
    });

    // Twice is refused; so is an unknown thread; nothing changes.
    assert!(running.addf("probe.f1", "slow", None).is_err());
    assert!(running.addf("probe.f1", "nosuch", None).is_err());
    assert_eq!(
        running.thread_functions("slow").unwrap(),
        Vec::<String>::new()
    );

    // Remove f0: once delf returns, it is not called again.
    running.delf("probe.f0", "servo").unwrap();
    let (at, servo_at) = (count(0), cycles("servo"));
    eventually::until_true("50 servo periods after delf", eventually::GENEROUS, || {
        cycles("servo") >= servo_at + 50
    });
    assert_eq!(count(0), at, "f0 called after delf returned");

    // Move f2 to the slow thread: it keeps running, at the slow rate, in one thread only.
    running.delf("probe.f2", "servo").unwrap();
    running.addf("probe.f2", "slow", None).unwrap();
    assert_eq!(segment_list("servo"), ["probe.f1"]);
    assert_eq!(segment_list("slow"), ["probe.f2"]);
    // From here on each function is called once in every period its thread runs (a call comes
    // just before its period is counted: the two counts differ by at most one).
    let (s1, s2) = (cycles("servo"), cycles("slow"));
    let (a1, a2) = (count(1), count(2));
    eventually::until_true("50 slow periods", eventually::GENEROUS, || {
        cycles("slow") >= s2 + 50
    });
    let (e1, e2) = (cycles("servo") - s1, cycles("slow") - s2);
    let (d1, d2) = (count(1) - a1, count(2) - a2);
    eprintln!("servo: {d1} calls of f1 in {e1} periods; slow: {d2} calls of f2 in {e2} periods");
    assert!(
        d2.abs_diff(e2) <= 1,
        "f2 runs in slow, once a period: {d2} vs {e2}"
    );
    assert!(
        d1.abs_diff(e1) <= 1,
        "f1 runs in servo, once a period: {d1} vs {e1}"
    );
    let summary = running.stop();
    let slow = summary
        .threads
        .iter()
        .find(|t| t.info.name == "slow")
        .unwrap();
    assert_eq!(slow.info.functions, ["probe.f2"]);
}
