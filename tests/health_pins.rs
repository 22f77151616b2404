//! Thread and function health as HAL objects (issue 12, part 1), on a live sim-axis run in a child
//! process, read and written from other processes as a user would: `rtapi watch servo.tmax
//! servo.overruns`, `getp`, `setp servo.tmax 0`; and the process stopped (SIGSTOP) for 300 ms, which
//! the thread must show as missed periods and a latency of about that much.

mod common;
use common::eventually;
use common::sim_axis;
use common::{rtapi, text};
use sim_axis::SimAxis;

use std::process::Command;
use std::time::{Duration, Instant};

struct Run(SimAxis);

impl std::ops::Deref for Run {
    type Target = SimAxis;
    fn deref(&self) -> &SimAxis {
        &self.0
    }
}

impl Run {
    fn start(tag: &str) -> Run {
        let run = Run(SimAxis::spawn(tag, "20s"));
        let t0 = Instant::now();
        while run.try_getp("servo.time").is_none_or(|v| v == 0.0) {
            assert!(t0.elapsed() < Duration::from_secs(10), "never came up");
            std::thread::sleep(Duration::from_millis(20));
        }
        run
    }

    fn try_getp(&self, name: &str) -> Option<f64> {
        let out = rtapi(&["getp", name, "--instance", &self.instance]);
        if !out.status.success() {
            return None;
        }
        let t = text(&out).0;
        let t = t.trim();
        Some(match t {
            "TRUE" => 1.0,
            "FALSE" => 0.0,
            n => n.parse().unwrap_or_else(|_| panic!("getp {name}: {t}")),
        })
    }

    fn getp(&self, name: &str) -> f64 {
        self.try_getp(name)
            .unwrap_or_else(|| panic!("getp {name} failed"))
    }
}

#[test]
fn health_is_readable_resettable_and_shows_a_stopped_process() {
    let run = Run::start("health");
    let i = run.instance.as_str();

    // The LinuxCNC names: thread and function time/tmax, in ns here.
    for name in [
        "servo.time",
        "servo.tmax",
        "base.time",
        "pid.0.do-pid-calcs.time",
        "pid.0.do-pid-calcs.tmax",
    ] {
        let v = run.getp(name);
        assert!(v > 0.0 && v < 1e9, "{name} = {v}");
    }
    // The thread's time covers its functions'.
    assert!(run.getp("servo.tmax") >= run.getp("pid.0.do-pid-calcs.tmax"));
    // `show` lists them with their owner.
    let (shown, _) = text(&rtapi(&["show", "pin", "servo", "--instance", i]));
    for pin in [
        "servo.latency",
        "servo.latency-max",
        "servo.overruns",
        "servo.missed",
        "servo.late",
        "servo.stalled",
    ] {
        assert!(
            shown.lines().any(|l| l.contains("rtapi") && l.ends_with(pin)
                || l.contains(&format!(" {pin} "))),
            "{pin} in {shown}"
        );
    }

    // `rtapi watch servo.tmax servo.overruns` works against the running instance.
    let w = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["watch", "servo.tmax", "servo.overruns", "--instance", i])
        .args(["--count", "3"])
        .output()
        .unwrap();
    let (out, err) = text(&w);
    assert!(w.status.success(), "{err}");
    assert!(
        out.lines()
            .filter(|l| l.contains("servo.tmax=") && l.contains("servo.overruns="))
            .count()
            >= 3,
        "{out}"
    );

    // tmax is writable: 0 resets it, and it grows back from what the thread does now.
    let out = rtapi(&["setp", "servo.tmax", "0", "--instance", i]);
    assert!(out.status.success(), "{}", text(&out).1);
    // time is read-only.
    let out = rtapi(&["setp", "servo.time", "0", "--instance", i]);
    assert!(!out.status.success(), "servo.time must be read-only");
    eventually::until_true(
        "tmax grows again after a reset",
        eventually::GENEROUS,
        || run.getp("servo.tmax") > 0.0,
    );

    // Stop the whole process for 300 ms: the servo thread's next wake is ~300 ms late and the
    // deadlines in between are missed, which its pins keep.
    let missed0 = run.getp("servo.missed");
    let overruns0 = run.getp("servo.overruns");
    run.signal(nix::sys::signal::Signal::SIGSTOP);
    // The stimulus: 300 ms at least (a busy host only makes it longer).
    std::thread::sleep(Duration::from_millis(300));
    run.signal(nix::sys::signal::Signal::SIGCONT);
    let missed = eventually::until(
        "the servo thread's pins show the stop",
        eventually::GENEROUS,
        || {
            let m = run.getp("servo.missed") - missed0;
            (m >= 250.0).then_some(m)
        },
    );
    let overruns = run.getp("servo.overruns") - overruns0;
    let latency_max = run.getp("servo.latency-max");
    eprintln!("a 300 ms stop: {missed} servo periods missed");
    assert!(
        missed < 30_000.0,
        "a 300 ms stop of a 1 ms thread misses ~300 periods, not {missed}"
    );
    assert!(overruns >= 1.0, "{overruns}");
    // The stop fell in the wait (a late wake) or in the functions' work (a long period).
    let tmax = run.getp("servo.tmax");
    assert!(
        latency_max >= 250e6 || tmax >= 250e6,
        "latency-max {latency_max} ns, tmax {tmax} ns"
    );
    // The base thread too.
    eventually::until_true("the base thread's too", eventually::GENEROUS, || {
        run.getp("base.missed") >= 250.0 * 20.0
    });
    // Not stalled now (the watchdog's pin follows the thread, which runs again).
    assert_eq!(run.getp("servo.stalled"), 0.0);
}
