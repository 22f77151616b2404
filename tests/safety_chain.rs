//! The sim-axis safety chain end to end (issue 12, part 2): `rtapi run config/sim-axis.toml` in a
//! child process, driven from other processes as an operator would. The chain in
//! `config/sim-axis.hal`: servo latency ≥ 10 ms, a stalled servo thread, |following error| ≥ 1 mm or a
//! torque command that is not finite → `estop` (estop_latch) → machine-enable (pid, amp, stepgen).
//!
//! - Stopping the process for 300 ms (SIGSTOP … SIGCONT) shows in the health pins, latches the
//!   estop, drops the amp enable, and the axis holds; an operator reset (a rising edge of
//!   `estop-reset`) brings it back, the command re-synchronised so the axis follows again.
//! - A NaN in the loop (`setp pid.0.Pgain nan --force`) faults the chain through `finite`.
//! - A function of the servo thread that faults (a `fault_drill` loaded live with `rtapi halcmd`)
//!   trips it through `servo.faulted`, and the reset is refused while the fault stands.
//!
//! This shared VM can stall the servo thread for tens of milliseconds at any time, also in its
//! first periods; the chain is then right to trip. So every wait here is for a whole state (the
//! pins of one period are written one after another: a reader can see the latch's `fault-out`
//! before its `ok-out`), a reset is a rising edge the latch is known to have seen (the servo thread
//! ran periods after each write), and a trip the test did not cause is accepted only when the run
//! itself recorded the disturbance (new overruns, a higher latency-max, a STALLED line in its log).
//!
//! Why the whole state: a CI run failed with `sim_axis.0.enable` still TRUE in the same read that
//! showed `estop.fault-out` TRUE and `machine-enable` FALSE (read a moment later). The chain was
//! right; the read was torn between the latch's two stores. And a start whose first servo periods
//! came after a 100 ms host stall never enabled: `servo.stalled` was TRUE when the `.hal`'s initial
//! reset edge arrived, so the latch (correctly) stayed faulted until an operator reset.

mod common;
use common::halrun;
use common::sim_axis;
use common::{rtapi, text};
use sim_axis::SimAxis;

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The following-error bound documented in config/sim-axis.toml, mm.
const FOLLOWING_ERROR_BOUND: f64 = 0.25;

/// How long anything here may take on a loaded machine; every wait returns as soon as it holds.
const T: Duration = Duration::from_secs(20);

/// Resets the host may force (each one explained by the run's own records) before a test gives up.
const MAX_RESETS: u32 = 4;

struct Run(SimAxis);

impl std::ops::Deref for Run {
    type Target = SimAxis;
    fn deref(&self) -> &SimAxis {
        &self.0
    }
}

/// What the run records of host disturbances: the servo thread's overruns and worst latency, and
/// the STALLED lines in its log.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Disturbances {
    overruns: f64,
    latency_max: f64,
    stalls: usize,
}

impl Run {
    /// Starts sim-axis and waits until the machine is enabled: at once (the `.hal` file's initial
    /// reset edge) or after operator resets, each needed one explained by a recorded disturbance.
    fn start(tag: &str) -> Run {
        let run = Run(SimAxis::spawn(tag, "600s"));
        let t0 = Instant::now();
        run.wait_periods(5);
        run.enable_after_disturbances("the start");
        eprintln!("{tag}: enabled {:?} after the spawn", t0.elapsed());
        run
    }

    /// Every pin's and signal's value as f64 (bits as 0/1; a non-finite float — JSON null — as NaN,
    /// which fails every comparison below).
    fn values(&self) -> HashMap<String, f64> {
        // One snapshot of pins and signals: two processes a few milliseconds apart can see a trip
        // between them (a pin TRUE, its signal FALSE).
        let mut all = HashMap::new();
        let out = rtapi(&["show", "all", "--json", "--instance", &self.instance]);
        if !out.status.success() {
            return all;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for (what, key) in [("pin", "pins"), ("sig", "signals")] {
            for p in v[key].as_array().into_iter().flatten() {
                let value = match &p["value"] {
                    serde_json::Value::Bool(b) => f64::from(u8::from(*b)),
                    serde_json::Value::Null => f64::NAN,
                    other => other
                        .as_f64()
                        .unwrap_or_else(|| panic!("{what} {}: value {other}", p["name"])),
                };
                all.insert(p["name"].as_str().unwrap().to_string(), value);
            }
        }
        all
    }

    fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        ok: impl Fn(&HashMap<String, f64>) -> bool,
    ) -> HashMap<String, f64> {
        let t0 = Instant::now();
        loop {
            let v = self.values();
            if !v.is_empty() && ok(&v) {
                return v;
            }
            assert!(
                t0.elapsed() < limit,
                "{what}: not within {limit:?}; last {v:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The servo thread's period count.
    fn servo_cycles(&self) -> Option<u64> {
        let out = rtapi(&["show", "thread", "--json", "--instance", &self.instance]);
        if !out.status.success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["threads"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == "servo")?["cycles"]
            .as_u64()
    }

    /// Waits until the servo thread has run `n` more periods: whatever was written before the call
    /// has been seen by every function of at least `n - 1` whole periods.
    fn wait_periods(&self, n: u64) {
        let t0 = Instant::now();
        let mut first = None;
        loop {
            if let Some(c) = self.servo_cycles() {
                let from = *first.get_or_insert(c);
                if c >= from + n {
                    return;
                }
            }
            assert!(
                t0.elapsed() < T,
                "the servo thread did not run {n} periods within {T:?} (from {first:?})"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn disturbances(&self, v: &HashMap<String, f64>) -> Disturbances {
        Disturbances {
            overruns: v["servo.overruns"],
            latency_max: v["servo.latency-max"],
            stalls: self.log().matches("STALLED").count(),
        }
    }

    /// An operator reset: `estop-reset` FALSE, seen by the latch for whole periods, then TRUE, seen.
    fn reset(&self) {
        self.cmd(&["sets", "estop-reset", "0"]);
        self.wait_periods(3);
        self.cmd(&["sets", "estop-reset", "1"]);
        self.wait_periods(3);
    }

    /// Enables the machine if the latch is faulted although every input of the chain is good, as
    /// an operator would — only when the run recorded a disturbance that explains the trip.
    fn enable_after_disturbances(&self, what: &str) -> HashMap<String, f64> {
        let mut seen = Disturbances {
            overruns: 0.0,
            latency_max: 0.0,
            stalls: 0,
        };
        for resets in 0..=MAX_RESETS {
            let v = self.wait_for("the chain's inputs settled", T, |p| {
                p["estop.ok-out"] == 1.0 || p["estop.ok-in"] == 1.0
            });
            if v["estop.ok-out"] == 1.0 && v["machine-enable"] == 1.0 {
                return v;
            }
            // Faulted with good inputs: look again some periods later (one look can straddle a trip).
            self.wait_periods(3);
            let v = self.values();
            if v["estop.ok-out"] == 1.0 && v["machine-enable"] == 1.0 {
                return v;
            }
            if v["estop.ok-in"] != 1.0 {
                continue;
            }
            let now = self.disturbances(&v);
            // The chain trips on a wake ≥ 10 ms late (latency-max shows it, and new overruns
            // follow it) or a stall (logged); every other input is good again now.
            let late = now.latency_max >= 10e6
                && (now.latency_max > seen.latency_max || now.overruns > seen.overruns);
            assert!(
                late || now.stalls > seen.stalls,
                "{what}: the latch is faulted with no disturbance recorded since {seen:?} \
                 ({now:?}); {v:?}\nlog:\n{}",
                self.log()
            );
            assert!(resets < MAX_RESETS, "{what}: {resets} resets; {now:?}");
            eprintln!("safety_chain: {what}: the host disturbed the servo thread ({now:?}); reset");
            seen = now;
            self.reset();
        }
        unreachable!()
    }

    fn cmd(&self, args: &[&str]) {
        let mut all = args.to_vec();
        all.extend(["--instance", &self.instance]);
        let out = rtapi(&all);
        assert!(out.status.success(), "rtapi {args:?}: {}", text(&out).1);
    }
}

#[test]
fn a_stopped_process_latches_the_estop_drops_the_amp_and_a_reset_brings_it_back() {
    let run = Run::start("chain");
    // Running normally: enabled, following.
    let before = run.wait_for("following within the bound", T, |p| {
        p["pid.0.error"].abs() < FOLLOWING_ERROR_BOUND && p["estop.ok-out"] == 1.0
    });
    assert_eq!(before["estop.fault-out"], 0.0);

    // 300 ms stopped (the sleep is the length of the stop, not a wait for something).
    run.signal(nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(300));
    run.signal(nix::sys::signal::Signal::SIGCONT);

    // The health pins show it, the latch is set, the enable is down and the loop outputs nothing:
    // one whole state, written over one period.
    let tripped = run.wait_for("the estop latched, everything disabled", T, |p| {
        p["estop.fault-out"] == 1.0
            && p["estop.ok-out"] == 0.0
            && p["machine-enable"] == 0.0
            && p["sim_axis.0.enable"] == 0.0
            && p["pid.0.output"] == 0.0
    });
    assert!(
        tripped["servo.missed"] >= 250.0,
        "{}",
        tripped["servo.missed"]
    );
    // The latency shows it only when the stop came while the thread slept (the next wake is then
    // 300 ms late); a stop inside its functions makes that period end late instead, and the
    // following deadlines are skipped: counted in `missed` above either way (seen: 1 run in 150).
    eprintln!(
        "stopped 300 ms: servo missed {}, latency-max {} ns",
        tripped["servo.missed"], tripped["servo.latency-max"]
    );
    // The axis holds: with no torque, friction stops it and it stays.
    std::thread::sleep(Duration::from_millis(300));
    let held: Vec<f64> = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(20));
            run.values()["sim_axis.0.position-fb"]
        })
        .collect();
    assert!(
        held.iter().all(|x| x.is_finite()),
        "positions while disabled: {held:?}"
    );
    let (lo, hi) = held
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    assert!(
        hi - lo < 0.01,
        "the axis moved {} mm while disabled: {held:?}",
        hi - lo
    );
    // Still latched although every input is good again: only a reset clears it.
    let latched = run.values();
    assert_eq!(
        (latched["estop.ok-out"], latched["estop.ok-in"]),
        (0.0, 1.0),
        "{latched:?}"
    );

    // The operator resets: a rising edge. The host can stall the servo thread past the chain's
    // limits again at any time; the chain is then right to trip, and the operator resets again —
    // only a trip the run's records do not explain fails the test.
    let mut seen = run.disturbances(&latched);
    let mut resets = 0;
    let after = loop {
        resets += 1;
        run.reset();
        let enabled = run.wait_for("enabled again (or tripped)", T, |p| {
            p["estop.ok-out"] == 1.0 && p["machine-enable"] == 1.0
                || p["estop.fault-out"] == 1.0 && p["estop.ok-in"] == 1.0
        });
        // The command comes back to the sine within the limits and the axis follows it again.
        let after = if enabled["estop.ok-out"] == 1.0 {
            run.wait_for("following again (or tripped)", T, |p| {
                p["estop.fault-out"] == 1.0
                    || (p["pos-cmd"] - p["sine"]).abs() < 1e-6
                        && p["pid.0.error"].abs() < FOLLOWING_ERROR_BOUND
            })
        } else {
            enabled
        };
        if after["estop.fault-out"] == 0.0 {
            break after;
        }
        // Tripped again: it must be a new disturbance the run recorded.
        let now = run.disturbances(&after);
        assert!(
            now.overruns > seen.overruns || now.stalls > seen.stalls,
            "the latch tripped after the reset with no new late period: {after:?}"
        );
        eprintln!(
            "safety_chain: the host stalled the servo thread again after reset {resets} \
             ({seen:?} → {now:?}); resetting again"
        );
        seen = now;
        assert!(
            resets < MAX_RESETS,
            "tripped by host stalls after {resets} resets"
        );
    };
    assert_eq!(after["estop.fault-out"], 0.0, "the reset held");
    assert_eq!(after["sim_axis.0.enable"], 1.0, "the amp is enabled again");
}

#[test]
fn a_nan_in_the_loop_faults_the_chain() {
    let run = Run::start("chain-nan");
    // A NaN gain makes the loop's output — the torque command — NaN; the plant shrugs it off (it
    // keeps its state finite), `wcomp` would let it through (as LinuxCNC's does); `finite` catches it.
    run.cmd(&["setp", "pid.0.Pgain", "nan", "--force"]);
    let tripped = run.wait_for("the estop latched through finite", T, |p| {
        p["estop.fault-out"] == 1.0
            && p["machine-enable"] == 0.0
            && p["sim_axis.0.enable"] == 0.0
            && p["torque-finite.count"] >= 1.0
    });
    assert!(
        tripped["sim_axis.0.position-fb"].is_finite(),
        "the plant keeps its state finite: {tripped:?}"
    );
}

#[test]
fn a_function_fault_in_the_servo_thread_trips_the_chain_for_good() {
    let run = Run::start("chain-fault");
    // `enable-edges` counts the rising edges of machine-enable in every servo period (after the
    // latch): an enable of a single period, which no look from another process would catch, counts.
    for line in [
        "loadrt fault_drill",
        "net drill fault_drill.0.fire",
        "addf fault_drill.0 servo",
        "loadrt updown names=enable-edges",
        "net machine-enable enable-edges.countup",
        "addf enable-edges servo",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let (ok, _, err) = halrun::halcmd(&run.instance, &args);
        assert!(ok, "halcmd {line}: {err}");
    }
    // The drill runs (its calls go up) and nothing has faulted yet.
    let before = run.wait_for("the drill running", T, |p| {
        p.get("fault_drill.0.calls").is_some_and(|&c| c >= 1.0)
            && p.get("enable-edges.count").is_some()
    });
    assert_eq!(
        (before["servo.faults"], before["servo.faulted"]),
        (0.0, 0.0)
    );
    // The host may have tripped the chain since the start: enabled again first.
    run.enable_after_disturbances("before the drill");

    run.cmd(&["sets", "drill", "1"]);
    let tripped = run.wait_for("the fault latched the estop", T, |p| {
        p["servo.faulted"] == 1.0
            && p["not-faulted.out"] == 0.0
            && p["estop.fault-out"] == 1.0
            && p["estop.ok-out"] == 0.0
            && p["machine-enable"] == 0.0
            && p["sim_axis.0.enable"] == 0.0
    });
    assert_eq!(tripped["servo.faults"], 1.0, "{tripped:?}");
    assert_eq!(tripped["estop.ok-in"], 0.0, "{tripped:?}");

    // The faulted function stays disabled: an operator reset — a rising edge the latch saw — is
    // refused (the latch's input is bad), in every period after it.
    run.reset();
    let (calls, edges) = (
        tripped["fault_drill.0.calls"],
        tripped["enable-edges.count"],
    );
    let t0 = Instant::now();
    let mut looks = 0;
    while looks < 10 || t0.elapsed() < Duration::from_millis(200) {
        let after = run.values();
        assert_eq!(after["estop.reset"], 1.0, "the reset reached the latch");
        assert_eq!(
            (
                after["estop.ok-out"],
                after["machine-enable"],
                after["servo.faulted"],
                after["servo.faults"]
            ),
            (0.0, 0.0, 1.0, 1.0),
            "the reset must not clear the latch while the fault stands: {after:?}"
        );
        assert_eq!(
            after["fault_drill.0.calls"], calls,
            "the drill stays disabled"
        );
        assert_eq!(
            after["enable-edges.count"], edges,
            "the reset enabled the machine for a period while the fault stands: {after:?}"
        );
        looks += 1;
    }
}
