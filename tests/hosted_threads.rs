//! Hosted threads (issue 24): threads added to a running instance whose period loop is foreign code
//! calling `Period::wait` once per period, as LinuxCNC's hal_lib calls `rtapi_wait()`. Real
//! SCHED_FIFO threads, the real segment, `rtapi show` in another process. Every assertion is a
//! count, an order or an accounting identity; latency itself is never asserted.

mod common;
use common::{alloc_count, eventually};

use rtapi::rt::clock::Nanos;
use rtapi::rt::wake::TimerKind;
use rtapi::runtime::hosted::{Flow, ForeignExit, HostedOptions, HostedThreads, Period};
use rtapi::runtime::watchdog::{StallAction, WatchdogOptions};
use rtapi::runtime::{RuntimeError, ThreadSpec};
use rtapi_hal::{Access, HalReader, ThreadState, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

// Counts the allocations of the threads that watch themselves (a hosted thread, around its waits).
#[global_allocator]
static GLOBAL: common::alloc_count::CountingAlloc = common::alloc_count::CountingAlloc;

fn instance(test: &str) -> String {
    format!("t-hosted-{test}-{}", std::process::id())
}

/// posix flavor (SCHED_FIFO without PREEMPT_RT), watchdog `action`.
fn open(test: &str, action: StallAction) -> HostedThreads {
    HostedThreads::open(
        &instance(test),
        HostedOptions {
            flavor: Some("posix".into()),
            watchdog: WatchdogOptions {
                action,
                ..WatchdogOptions::default()
            },
            max_threads: 4,
            ..HostedOptions::default()
        },
    )
    .unwrap()
}

/// `(policy, rt_priority)` of one of our threads, from `/proc` (fields 41 and 40 of its `stat`).
fn proc_policy(tid: i32) -> (i64, i64) {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // `after` starts at field 3 (state): field n is f[n - 3].
    (f[41 - 3].parse().unwrap(), f[40 - 3].parse().unwrap())
}

/// `rtapi show thread --instance NAME --json` in another process.
fn show_threads(instance: &str) -> Vec<serde_json::Value> {
    let out = common::rtapi(&["show", "thread", "--instance", instance, "--json"]);
    let (stdout, stderr) = common::text(&out);
    assert!(out.status.success(), "rtapi show: {stderr}");
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    j["threads"].as_array().unwrap().clone()
}

fn shown<'a>(threads: &'a [serde_json::Value], name: &str) -> &'a serde_json::Value {
    threads
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("thread {name} not in {threads:?}"))
}

/// A body that counts its `wait()` returns until `release`, then returns.
fn counting_body(
    count: &Arc<AtomicU64>,
    release: &Arc<AtomicBool>,
) -> Box<dyn FnOnce(&mut Period) + Send> {
    let (count, release) = (count.clone(), release.clone());
    Box::new(move |p: &mut Period| {
        while !release.load(SeqCst) {
            if p.wait() == Flow::Stop {
                return;
            }
            count.fetch_add(1, SeqCst);
        }
    })
}

/// Two threads started one after the other while the instance runs: each appears in the segment
/// under its name with its period, SCHED_FIFO at the priority the segment names, its cycle count
/// rising while it runs and, once the body returned, exactly the number of `wait()` returns the
/// body counted — seen by `rtapi show` in another process and in the end-of-run summary.
#[test]
fn threads_started_while_running_appear_by_name_with_sched_fifo_and_the_bodys_own_count() {
    let inst = instance("two");
    let hosted = open("two", StallAction::Report);
    assert!(
        show_threads(&inst).is_empty(),
        "no thread before the first spawn"
    );
    let release = Arc::new(AtomicBool::new(false));
    let (servo_n, base_n) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let servo = hosted
        .spawn(
            ThreadSpec {
                priority: Some(80),
                ..ThreadSpec::new("servo-thread", Nanos::from_millis(2))
            },
            counting_body(&servo_n, &release),
        )
        .unwrap();
    eventually::until_true("servo-thread runs", eventually::GENEROUS, || {
        servo_n.load(SeqCst) >= 10
    });
    // The second one while the first runs, without a priority: placement gives it one.
    let base = hosted
        .spawn(
            ThreadSpec::new("base-thread", Nanos::from_millis(1)),
            counting_body(&base_n, &release),
        )
        .unwrap();
    assert!(matches!(
        hosted.spawn(
            ThreadSpec::new("servo-thread", Nanos::from_millis(1)),
            Box::new(|_| {})
        ),
        Err(RuntimeError::Config(m)) if m.contains("exists already") && m.contains("another name")
    ));

    let mut first = std::collections::HashMap::new();
    let during = show_threads(&inst);
    for (h, period) in [(&servo, 2_000_000), (&base, 1_000_000)] {
        let info = h.info();
        let t = shown(&during, &info.name);
        assert_eq!(t["period_ns"], period);
        assert_eq!(t["state"], "running");
        assert_eq!(t["priority"], info.priority);
        assert_eq!(t["cpu"], info.cpu);
        let (policy, prio) = proc_policy(info.tid.unwrap());
        assert_eq!(policy, libc::SCHED_FIFO as i64, "{}", info.name);
        assert_eq!(prio, i64::from(info.priority), "{}", info.name);
        first.insert(info.name, t["cycles"].as_u64().unwrap());
    }
    assert_eq!(servo.info().priority, 80);
    assert!((1..=99).contains(&base.info().priority));
    eventually::until_true("cycles rise in the segment", eventually::GENEROUS, || {
        let now = show_threads(&inst);
        first
            .iter()
            .all(|(n, c)| shown(&now, n)["cycles"].as_u64().unwrap() > *c)
    });

    release.store(true, SeqCst);
    eventually::until_true("both bodies return", eventually::GENEROUS, || {
        servo.is_finished() && base.is_finished()
    });
    let after = show_threads(&inst);
    for (h, n) in [(&servo, &servo_n), (&base, &base_n)] {
        let name = h.info().name;
        let t = shown(&after, &name);
        assert_eq!(
            t["cycles"].as_u64().unwrap(),
            n.load(SeqCst),
            "{name}: one recorded period per wait() return"
        );
        assert_eq!(t["state"], "stopped");
        let s = h.stop();
        assert!(!s.abandoned);
        assert_eq!(s.stats.unwrap().cycles, n.load(SeqCst));
    }
    let summary = hosted.stop();
    let names: Vec<&str> = summary
        .threads
        .iter()
        .map(|t| t.info.name.as_str())
        .collect();
    assert_eq!(names, ["servo-thread", "base-thread"]);
    assert!(summary.to_string().contains("base-thread"));
    assert!(!common::segment_exists(&inst), "the segment goes with stop");
}

/// A body late by three periods once: the deadlines that went by are skipped and counted (rtapi's
/// rule), not caught up back to back (LinuxCNC 2.9's). Counted by the body itself: its `wait()`
/// returns are strictly increasing period numbers, the jump after the late period is 1 + its
/// misses, and wakes + misses = every deadline from the first wake to the last — in the body's
/// view, in the stats block and in `<thread>.missed`.
#[test]
fn late_periods_are_skipped_and_counted_not_caught_up() {
    const WAKES: usize = 40;
    const LATE_AT: usize = 20;
    let inst = instance("late");
    let hosted = open("late", StallAction::Report);
    let period = Nanos::from_millis(10);
    // (period number, missed before it) of every wake, in order; room reserved up front.
    let rows = Arc::new(
        (0..WAKES)
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect::<Vec<_>>(),
    );
    let r = rows.clone();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let h = hosted
        .spawn(
            ThreadSpec::new("late-thread", period),
            Box::new(move |p: &mut Period| {
                for (i, row) in r.iter().enumerate() {
                    if p.wait() == Flow::Stop {
                        return;
                    }
                    row[0].store(p.number(), SeqCst);
                    row[1].store(p.missed(), SeqCst);
                    if i == LATE_AT {
                        // 3.5 periods of work: three deadlines go by before the next wait.
                        std::thread::sleep(Duration::from_millis(35));
                    }
                }
                d.store(true, SeqCst);
            }),
        )
        .unwrap();
    eventually::until_true("the body ran its wakes", eventually::GENEROUS, || {
        h.is_finished()
    });
    assert!(done.load(SeqCst), "the body ran to its end");
    let rows: Vec<(u64, u64)> = rows
        .iter()
        .map(|r| (r[0].load(SeqCst), r[1].load(SeqCst)))
        .collect();
    let mut skipped = 0;
    for w in rows.windows(2) {
        let ((k0, _), (k1, missed)) = (w[0], w[1]);
        assert!(
            k1 > k0,
            "one wait() return per deadline, in order: {rows:?}"
        );
        assert_eq!(
            k1 - k0 - 1,
            missed,
            "the jump is the misses it reports: {rows:?}"
        );
        skipped += missed;
    }
    let jump = rows[LATE_AT + 1].0 - rows[LATE_AT].0;
    assert!(
        jump > 3,
        "3.5 periods late: at least 3 deadlines skipped, not run back to back (jump {jump}): {rows:?}"
    );
    let span = rows[WAKES - 1].0 - rows[0].0 + 1;
    assert_eq!(
        WAKES as u64 + skipped,
        span,
        "wakes + missed = deadlines elapsed"
    );

    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    let s = r.thread_stats("late-thread").unwrap();
    assert_eq!(s.cycles, WAKES as u64);
    // The stats count every miss, also any the host caused before the first recorded wake.
    assert!(s.overruns >= skipped, "{} < {skipped}", s.overruns);
    assert_eq!(
        r.get("late-thread.missed").unwrap(),
        Value::U32(s.overruns as u32),
        "the health pin counts what the stats count"
    );
    drop(r);
    h.stop();
    hosted.stop();
}

/// `stop()` reaches a thread asleep in a long period at once (its wait is interrupted, well before
/// the deadline), the body gets `Flow::Stop` and returns by itself, and every later `wait()` says
/// Stop too; a body busy in its work when asked ends at its next `wait()`.
#[test]
fn stop_ends_the_body_through_wait_and_joins_it() {
    let hosted = open("stop", StallAction::Report);
    // (wait() returns Continue, returned Stop, later waits also Stop)
    let seen = Arc::new([(); 3].map(|_| AtomicU64::new(0)));
    let in_wait = Arc::new(AtomicBool::new(false));
    let (s, w) = (seen.clone(), in_wait.clone());
    let sleeper = hosted
        .spawn(
            ThreadSpec::new("slow-thread", Nanos::from_secs(5)),
            Box::new(move |p: &mut Period| {
                loop {
                    w.store(true, SeqCst);
                    if p.wait() == Flow::Stop {
                        break;
                    }
                    s[0].fetch_add(1, SeqCst);
                }
                s[1].store(1, SeqCst);
                if p.wait() == Flow::Stop && p.stop_requested() {
                    s[2].store(1, SeqCst);
                }
            }),
        )
        .unwrap();
    eventually::until_true(
        "the body is at its first wait",
        eventually::GENEROUS,
        || in_wait.load(SeqCst),
    );
    let t = Instant::now();
    let summary = sleeper.stop();
    let took = t.elapsed();
    assert!(
        took < Duration::from_millis(2500),
        "a 5 s sleep is interrupted, not waited out ({took:?})"
    );
    assert_eq!(
        seen.each_ref().map(|a| a.load(SeqCst)),
        [0, 1, 1],
        "no period woke; wait() said Stop, and again after"
    );
    assert!(!summary.abandoned && summary.stalled.is_none());
    assert!(sleeper.is_finished());

    // Busy in its work (not waiting) when asked: ends at its next wait.
    let wakes = Arc::new(AtomicU64::new(0));
    let n = wakes.clone();
    let busy = hosted
        .spawn(
            ThreadSpec::new("busy-thread", Nanos::from_millis(10)),
            Box::new(move |p: &mut Period| {
                while p.wait() == Flow::Continue {
                    n.fetch_add(1, SeqCst);
                    let until = Instant::now() + Duration::from_millis(4);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                }
            }),
        )
        .unwrap();
    eventually::until_true("busy-thread runs", eventually::GENEROUS, || {
        wakes.load(SeqCst) >= 5
    });
    let s = busy.stop();
    assert!(!s.abandoned);
    assert_eq!(s.stats.unwrap().cycles, wakes.load(SeqCst));
    hosted.stop();
}

extern "C" {
    /// hosted_exit.c: a C loop like LinuxCNC's `thread_task` — `rtapi_hosted_wait()` once per
    /// period, forever — counting its periods.
    fn rtapi_hosted_loop_forever(counter: *mut std::ffi::c_void);
}

/// A foreign loop that never returns (C code shaped like hal_lib's `thread_task`) ends on `stop()`:
/// its `rtapi_hosted_wait()` leaves it by a longjmp between C frames, the body returns normally
/// (the thread is joined, not abandoned), and the C loop's own period count is the segment's.
#[test]
fn a_foreign_loop_that_never_returns_is_left_without_cancelling_it() {
    let hosted = open("foreign", StallAction::Report);
    let counter = Arc::new(AtomicU64::new(0));
    let exit = Arc::new(AtomicU64::new(0));
    let (c, e) = (counter.clone(), exit.clone());
    let h = hosted
        .spawn(
            ThreadSpec::new("servo-thread", Nanos::from_millis(1)),
            Box::new(move |p: &mut Period| {
                // SAFETY: the C loop only counts into the AtomicU64 (same size and alignment as an
                // unsigned long here) and holds nothing a longjmp over it could leak.
                let how = unsafe { p.run_foreign(rtapi_hosted_loop_forever, c.as_ptr().cast()) };
                e.store(if how == ForeignExit::Left { 1 } else { 2 }, SeqCst);
            }),
        )
        .unwrap();
    eventually::until_true("the C loop runs", eventually::GENEROUS, || {
        counter.load(SeqCst) >= 20
    });
    let s = h.stop();
    assert_eq!(
        exit.load(SeqCst),
        1,
        "left by rtapi_hosted_wait, body returned"
    );
    assert!(!s.abandoned && h.is_finished());
    assert_eq!(s.stats.unwrap().cycles, counter.load(SeqCst));
    hosted.stop();
}

/// A body that stops calling `wait()` (stuck in its hosted code) is seen by the watchdog like any
/// rtapi thread: stalled in the segment (`rtapi show` says where), `<thread>.stalled` TRUE, demoted
/// to SCHED_OTHER (the default action); when it calls `wait()` again it is running again, with
/// SCHED_FIFO back.
#[test]
fn a_body_that_stops_calling_wait_is_stalled_demoted_and_recovers() {
    let inst = instance("stall");
    let hosted = open("stall", StallAction::Demote);
    let (stuck, unstick) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (s, u) = (stuck.clone(), unstick.clone());
    let wakes = Arc::new(AtomicU64::new(0));
    let n = wakes.clone();
    let h = hosted
        .spawn(
            ThreadSpec::new("stuck-thread", Nanos::from_millis(5)),
            Box::new(move |p: &mut Period| {
                while p.wait() == Flow::Continue {
                    if n.fetch_add(1, SeqCst) == 20 {
                        s.store(true, SeqCst);
                        // Foreign code that does not come back for a while (it sleeps: the
                        // machine stays usable even before the demotion).
                        while !u.load(SeqCst) {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
            }),
        )
        .unwrap();
    let tid = h.info().tid.unwrap();
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    eventually::until_true(
        "the watchdog marks it stalled",
        eventually::GENEROUS,
        || {
            matches!(
                r.thread_named("stuck-thread").unwrap().state,
                ThreadState::Stalled { .. }
            )
        },
    );
    assert!(stuck.load(SeqCst));
    assert_eq!(r.get("stuck-thread.stalled").unwrap(), Value::Bit(true));
    assert!(h.health().read().stalled);
    let t = show_threads(&inst);
    let t = shown(&t, "stuck-thread");
    assert_eq!(t["state"], "stalled");
    eventually::until_true("demoted to SCHED_OTHER", eventually::GENEROUS, || {
        proc_policy(tid).0 == libc::SCHED_OTHER as i64
    });

    unstick.store(true, SeqCst);
    eventually::until_true("running again", eventually::GENEROUS, || {
        r.thread_named("stuck-thread").unwrap().state == ThreadState::Running
    });
    assert_eq!(r.get("stuck-thread.stalled").unwrap(), Value::Bit(false));
    eventually::until_true("SCHED_FIFO back", eventually::GENEROUS, || {
        proc_policy(tid).0 == libc::SCHED_FIFO as i64
    });
    let s = h.stop();
    assert!(!s.abandoned);
    assert!(
        s.stats.unwrap().overruns > 0,
        "the stuck periods were missed"
    );
    drop(r);
    hosted.stop();
}

/// After warm-up, 1000 periods of a hosted thread — `wait()` with its accounting, stats record and
/// health pins, for every machine-grade timer driver — allocate nothing, take no page fault, and
/// switch context only to sleep (at most once per period, never preempted). Measured by the body
/// itself around its waits.
#[test]
fn wait_allocates_nothing_faults_nothing_and_only_sleeps() {
    const WARM: u64 = 50;
    const PERIODS: u64 = 1000;
    let hosted = open("noalloc", StallAction::Report);
    for timer in [
        TimerKind::Nanosleep,
        TimerKind::PosixTimer,
        TimerKind::Timerfd,
    ] {
        // allocations, faults, voluntary switches, involuntary switches, periods
        let result = Arc::new([(); 5].map(|_| AtomicU64::new(u64::MAX)));
        let r = result.clone();
        let h = hosted
            .spawn(
                ThreadSpec {
                    timer,
                    ..ThreadSpec::new(&format!("noalloc-{timer}"), Nanos::from_millis(1))
                },
                Box::new(move |p: &mut Period| {
                    for _ in 0..WARM {
                        if p.wait() == Flow::Stop {
                            return;
                        }
                    }
                    let usage = rtapi::rt::sched::thread_usage().unwrap();
                    let allocs = alloc_count::allocations();
                    alloc_count::watch(true);
                    let mut n = 0;
                    while n < PERIODS && p.wait() == Flow::Continue {
                        n += 1;
                    }
                    let allocs = alloc_count::allocations() - allocs;
                    alloc_count::watch(false);
                    let u = rtapi::rt::sched::thread_usage().unwrap().since(&usage);
                    r[0].store(allocs, SeqCst);
                    r[1].store(u.minor_faults + u.major_faults, SeqCst);
                    r[2].store(u.voluntary_switches, SeqCst);
                    r[3].store(u.involuntary_switches, SeqCst);
                    r[4].store(n, SeqCst);
                }),
            )
            .unwrap();
        eventually::until_true(
            &format!("{timer}: {PERIODS} periods"),
            eventually::GENEROUS,
            || h.is_finished(),
        );
        h.stop();
        let [allocs, faults, voluntary, involuntary, periods] =
            result.each_ref().map(|a| a.load(SeqCst));
        eprintln!("{timer}: {periods} periods, {allocs} allocations, {faults} faults, {voluntary} voluntary / {involuntary} involuntary switches");
        assert_eq!(periods, PERIODS, "{timer}: the measurement finished");
        assert_eq!(allocs, 0, "{timer}: allocations in wait()");
        assert_eq!(faults, 0, "{timer}: page faults in wait()");
        assert!(
            voluntary <= periods,
            "{timer}: at most one sleep per period"
        );
        assert_eq!(
            involuntary, 0,
            "{timer}: a SCHED_FIFO thread is never preempted by ordinary work"
        );
    }
    hosted.stop();
}
