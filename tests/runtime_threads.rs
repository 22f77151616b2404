//! The runtime with real SCHED_FIFO threads on this machine: timeline accounting, overruns, faults,
//! and the RT-path rules (no allocation, no page faults). Every assertion is a property that holds on a
//! noisy 2-core VM; latency itself is never asserted.

use rtapi::rt::clock::{self, Nanos};
use rtapi::rt::wake::{sleep_until, TimerKind, WakeMode};
use rtapi::runtime::function::{Cycle, RtFn};
use rtapi::runtime::{Runtime, RuntimeError, RuntimeOptions, ThreadSpec};
use rtapi_hal::{Hal, HalReader};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// Counts allocations made on threads that have opted in (the RT thread, from inside a function).
struct CountingAlloc;
static ALLOCS: AtomicU64 = AtomicU64::new(0);
thread_local!(static COUNTING: Cell<bool> = const { Cell::new(false) });

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.try_with(Cell::get).unwrap_or(false) {
            ALLOCS.fetch_add(1, SeqCst);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

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

/// Seed 000: a 10 ms thread for 5 s must account for 500 periods (Linux 2.6's setitimer gave 455),
/// and must not drift, for every machine-grade timer driver.
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
                // Stop between deadline 499 and 500: periods 0..=499 have been due.
                let first = running.origin() + period;
                sleep_until(first + Nanos::from_millis(4_995)).unwrap();
                let summary = running.stop();
                let s = summary.threads[0].stats.unwrap();
                (timer, s.cycles, s.overruns, s.drift_ns)
            })
        })
        .collect();
    for h in handles {
        let (timer, cycles, overruns, drift) = h.join().unwrap();
        eprintln!("{timer}: cycles {cycles} overruns {overruns} drift {drift} ns");
        assert!(
            (cycles + overruns).abs_diff(500) <= 1,
            "{timer}: {cycles} + {overruns} != 500 ± 1"
        );
        assert!(drift.abs() < 1_000_000, "{timer}: drift {drift} ns");
    }
}

/// Seed 002: a 2 ms thread runs 60 cycles in 120 ms (± 2 ms).
#[test]
fn two_ms_thread_runs_60_cycles_in_120_ms() {
    let (t0, t60) = (Arc::new(AtomicI64::new(0)), Arc::new(AtomicI64::new(0)));
    let (a, b) = (t0.clone(), t60.clone());
    let running = one_thread(
        "60in120",
        ThreadSpec::new("servo", Nanos::from_millis(2)),
        move |_| {
            Box::new(move |c: &Cycle| match c.number {
                0 => a.store(c.now_ns, SeqCst),
                60 => b.store(c.now_ns, SeqCst),
                _ => {}
            })
        },
    )
    .unwrap();
    running.wait(Some(Duration::from_millis(300)));
    running.stop();
    let elapsed = t60.load(SeqCst) - t0.load(SeqCst);
    eprintln!("60 cycles took {} µs", elapsed / 1000);
    assert!(
        t60.load(SeqCst) > 0,
        "cycle 60 was reached (not skipped as an overrun)"
    );
    assert!(
        (elapsed - 120_000_000).abs() <= 2_000_000,
        "60 periods took {elapsed} ns"
    );
}

/// A function that sleeps 3.5 periods once: 3 periods missed and skipped, the next wake is on the
/// original timeline, and the functions see the real dt and the missed count.
#[test]
fn a_long_function_costs_three_skipped_periods_and_keeps_the_timeline() {
    let period = Nanos::from_millis(20);
    let seen = Arc::new((
        AtomicU64::new(u64::MAX),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicI64::new(0),
    ));
    let calls = Arc::new(AtomicU64::new(0));
    let (s, n) = (seen.clone(), calls.clone());
    let running = one_thread("overrun", ThreadSpec::new("servo", period), move |_| {
        Box::new(move |c: &Cycle| {
            n.fetch_add(1, SeqCst);
            if c.number == 10 {
                std::thread::sleep(Duration::from_millis(70));
            }
            if c.number > 10 && s.0.load(SeqCst) == u64::MAX {
                // The first wake after the long one.
                s.0.store(c.number, SeqCst);
                s.1.store(c.missed, SeqCst);
                s.2.store(c.dt_ns, SeqCst);
                s.3.store(c.now_ns, SeqCst);
            }
        })
    })
    .unwrap();
    let origin = running.origin();
    running.wait(Some(Duration::from_millis(600)));
    let summary = running.stop();
    let stats = summary.threads[0].stats.unwrap();
    let (number, missed, dt, now) = (
        seen.0.load(SeqCst),
        seen.1.load(SeqCst),
        seen.2.load(SeqCst),
        seen.3.load(SeqCst),
    );
    eprintln!(
        "after the long call: number {number} missed {missed} dt {dt} overruns {}",
        stats.overruns
    );
    assert_eq!(missed, 3, "70 ms of work in a 20 ms period skips 3 periods");
    assert_eq!(number, 14, "the next period run is 10 + 1 + 3");
    assert!(dt.abs_diff(80_000_000) < 10_000_000, "dt {dt} ≈ 4 periods");
    let due = origin + period * 15; // period k is due at origin + (k+1)·period
    let late = Nanos::from_nanos(now) - due;
    assert!(
        late.as_nanos() >= 0 && late < Nanos::from_millis(10),
        "on the original timeline: {late}"
    );
    assert!(stats.overruns >= 3);
    assert_eq!(
        stats.cycles,
        calls.load(SeqCst),
        "every woken period ran the function once"
    );
    assert!(stats.cycles > 16, "the thread went on");
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
    rt.function(
        comp,
        "bad.explode",
        Box::new(|_: &Hal| {
            Box::new(|c: &Cycle| assert!(c.number < 20, "deliberate test panic")) as RtFn
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
    running.wait(Some(Duration::from_millis(300)));
    let reader = running.hal().reader().unwrap();
    let f = reader.function_named("bad.explode").unwrap();
    assert_ne!(f.timing.fault_code, 0, "marked faulted in the segment");
    assert_eq!(f.timing.calls, 21, "called until it panicked, never again");
    let summary = running.stop();
    assert_eq!(summary.threads[0].faulted, vec!["bad.explode".to_string()]);
    assert!(
        counter.load(SeqCst) > 100,
        "the other function kept running: {}",
        counter.load(SeqCst)
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
        // allocations, faults, voluntary switches, involuntary switches, done
        let result = Arc::new([(); 5].map(|_| AtomicU64::new(u64::MAX)));
        let r = result.clone();
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
                if c.number >= FROM && !COUNTING.with(Cell::get) {
                    start = (
                        ALLOCS.load(SeqCst),
                        rtapi::rt::sched::thread_usage().unwrap(),
                    );
                    COUNTING.with(|f| f.set(true));
                } else if c.number >= TO && r[4].load(SeqCst) == u64::MAX {
                    let u = rtapi::rt::sched::thread_usage().unwrap().since(&start.1);
                    r[0].store(ALLOCS.load(SeqCst) - start.0, SeqCst);
                    r[1].store(u.minor_faults + u.major_faults, SeqCst);
                    r[2].store(u.voluntary_switches, SeqCst);
                    r[3].store(u.involuntary_switches, SeqCst);
                    r[4].store(c.number - FROM, SeqCst);
                }
            })
        })
        .unwrap();
        running.wait(Some(Duration::from_millis(1500)));
        running.stop();
        let _ = std::fs::remove_dir_all(&dumps);
        let [allocs, faults, voluntary, involuntary, periods] =
            result.each_ref().map(|a| a.load(SeqCst));
        eprintln!("{timer}: {periods} periods, {allocs} allocations, {faults} faults, {voluntary} voluntary / {involuntary} involuntary switches");
        assert_ne!(periods, u64::MAX, "{timer}: the measurement finished");
        assert_eq!(allocs, 0, "{timer}: allocations on the RT thread");
        assert_eq!(faults, 0, "{timer}: page faults on the RT thread");
        assert!(
            voluntary <= periods,
            "{timer}: at most one sleep per period"
        );
        assert_eq!(
            involuntary, 0,
            "{timer}: a SCHED_FIFO thread is never preempted by ordinary work"
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
        running.wait(Some(Duration::from_millis(100)));
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
    assert!(matches!(e, RuntimeError::Config(_)), "a usage error: {e:?}");
    let e = rt.thread(ThreadSpec::new("x", Nanos::ZERO)).unwrap_err();
    assert!(e.to_string().contains("period 0ns is not positive"), "{e}");
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
    running.wait(Some(Duration::from_millis(100)));
    assert!(std::path::Path::new(&path).exists());
    let reader = HalReader::open(&opts.instance, rtapi_hal::Access::ReadOnly).unwrap();
    let a = reader.thread_stats("servo").unwrap().cycles;
    std::thread::sleep(Duration::from_millis(50));
    let b = reader.thread_stats("servo").unwrap().cycles;
    assert!(b > a && a > 0, "stats move while running: {a} -> {b}");
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
    std::thread::sleep(Duration::from_millis(100));
    assert!(!running.functions_running());
    assert_eq!(calls.load(SeqCst), 0, "no call before start");
    assert!(
        cycles() >= 20,
        "the thread keeps time: {} periods",
        cycles()
    );
    let stopped_state = state();

    running.set_functions_running(true);
    std::thread::sleep(Duration::from_millis(100));
    let after_start = calls.load(SeqCst);
    assert!(after_start >= 20, "calls after start: {after_start}");
    assert!(running.functions_running());
    assert_ne!(state(), stopped_state, "the segment's state follows");

    running.set_functions_running(false);
    std::thread::sleep(Duration::from_millis(20)); // a period to take effect
    let at_stop = calls.load(SeqCst);
    let cycles_at_stop = cycles();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(calls.load(SeqCst), at_stop, "no call after stop");
    assert!(cycles() >= cycles_at_stop + 20, "periods go on after stop");
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
    std::thread::sleep(Duration::from_millis(50));
    assert!(count(0) > 10);
    assert_eq!((count(1), count(2)), (0, 0), "not added: never called");

    // Add f1 first and f2 last in servo.
    running.addf("probe.f1", "servo", Some(0)).unwrap();
    running.addf("probe.f2", "servo", None).unwrap();
    assert_eq!(
        running.thread_functions("servo").unwrap(),
        ["probe.f1", "probe.f0", "probe.f2"]
    );
    assert_eq!(segment_list("servo"), ["probe.f1", "probe.f0", "probe.f2"]);
    std::thread::sleep(Duration::from_millis(50));
    assert!(count(1) > 10 && count(2) > 10, "{} {}", count(1), count(2));

    // Twice is refused; so is an unknown thread; nothing changes.
    assert!(running.addf("probe.f1", "slow", None).is_err());
    assert!(running.addf("probe.f1", "nosuch", None).is_err());
    assert_eq!(
        running.thread_functions("slow").unwrap(),
        Vec::<String>::new()
    );

    // Remove f0: once delf returns, it is not called again.
    running.delf("probe.f0", "servo").unwrap();
    let at = count(0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(count(0), at, "f0 called after delf returned");

    // Move f2 to the slow thread: it keeps running, at the slow rate, in one thread only.
    running.delf("probe.f2", "servo").unwrap();
    running.addf("probe.f2", "slow", None).unwrap();
    assert_eq!(segment_list("servo"), ["probe.f1"]);
    assert_eq!(segment_list("slow"), ["probe.f2"]);
    let (a1, a2) = (count(1), count(2));
    std::thread::sleep(Duration::from_millis(200));
    let (d1, d2) = (count(1) - a1, count(2) - a2);
    assert!(d2 > 20, "f2 runs in slow: {d2}");
    assert!(
        d1 > d2,
        "servo (1 ms) calls f1 more often than slow (2 ms) calls f2: {d1} vs {d2}"
    );
    let summary = running.stop();
    let slow = summary
        .threads
        .iter()
        .find(|t| t.info.name == "slow")
        .unwrap();
    assert_eq!(slow.info.functions, ["probe.f2"]);
}
