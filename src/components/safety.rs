//! The software safety chain, as in LinuxCNC: `estop_latch`, `watchdog` and `charge_pump`.
//!
//! Names, types, defaults and functions are LinuxCNC 2.9's; where its man pages say little, the
//! behaviour below was measured by running LinuxCNC's own modules in `halrun` (period by period, with
//! `streamer` driving the inputs and `sampler` recording the outputs).
//!
//! # `estop_latch` (`loadrt estop_latch [count=N|names=…]`, instances `estop-latch.N`)
//!
//! Two states, *faulted* (the initial one) and *OK*. Each period:
//! - if `fault-in` is TRUE or `ok-in` is FALSE, the latch faults (`ok-out` FALSE, `fault-out` TRUE);
//! - otherwise a rising edge of `reset` (FALSE in the previous period, TRUE now) makes it OK, and while
//!   OK `watchdog` toggles every period (also in the period of the reset edge).
//!
//! The previous `reset` is remembered every period, faulted or not: holding `reset` TRUE while the
//! fault clears does not reset the latch; it takes a new FALSE→TRUE edge.
//!
//! | name                       | kind     | type | dir | default | meaning                           |
//! |----------------------------|----------|------|-----|---------|-----------------------------------|
//! | `estop-latch.N.ok-in`      | pin      | bit  | IN  | TRUE    | FALSE faults the latch            |
//! | `estop-latch.N.fault-in`   | pin      | bit  | IN  | FALSE   | TRUE faults the latch             |
//! | `estop-latch.N.reset`      | pin      | bit  | IN  | FALSE   | a rising edge clears a fault whose causes are gone |
//! | `estop-latch.N.ok-out`     | pin      | bit  | OUT | FALSE   | TRUE while OK                     |
//! | `estop-latch.N.fault-out`  | pin      | bit  | OUT | TRUE    | TRUE while faulted                |
//! | `estop-latch.N.watchdog`   | pin      | bit  | OUT | FALSE   | toggles every period while OK, still while faulted |
//! | `estop-latch.N`            | function |      |     |         | one step of the latch             |
//!
//! # `watchdog` (`loadrt watchdog num_inputs=N`, one instance named `watchdog`)
//!
//! Checks that every `input-i` keeps changing: after a rising edge of `enable-in`, `ok-out` is TRUE
//! until some input has not changed for more than its `timeout-i` seconds; then `ok-out` is FALSE
//! until `enable-in` goes FALSE and TRUE again. While `enable-in` is FALSE nothing is checked and
//! `ok-out` keeps its value (LinuxCNC 2.9 does not clear it there, whatever its man page says; this
//! follows the module).
//!
//! The two functions split the work as in LinuxCNC:
//! - `watchdog.set-timeouts` (servo thread) converts each `timeout-i` to nanoseconds (a negative
//!   timeout counts as 0) and, on a rising edge of `enable-in`, restarts every input's timer and sets
//!   `ok-out` TRUE;
//! - `watchdog.process` (fast thread), while `enable-in` is TRUE: an input that differs from its value
//!   in the previous enabled period restarts its timer at `timeout-i`; otherwise the timer goes down by
//!   the period and, when below 0, `ok-out` goes FALSE. So an input must change within
//!   `timeout-i` seconds: `timeout-0 = 0.0035` at 1 ms faults on the 4th period without a change, and
//!   `timeout = 0.003` on the 4th too (3 ms is still in time).
//!
//! Time is the thread's **nominal** period, as LinuxCNC counts it, times the periods elapsed (1 + the
//! periods skipped by an overrun), so a stalled thread's lost time counts against the inputs.
//!
//! | name                      | kind     | type  | dir | default | meaning                             |
//! |---------------------------|----------|-------|-----|---------|-------------------------------------|
//! | `watchdog.input-i`        | pin      | bit   | IN  | FALSE   | heartbeat *i* (0 … num_inputs−1)    |
//! | `watchdog.enable-in`      | pin      | bit   | IN  | FALSE   | a rising edge (re)starts monitoring |
//! | `watchdog.ok-out`         | pin      | bit   | OUT | FALSE   | TRUE while no input has timed out   |
//! | `watchdog.timeout-i`      | param    | float | RW  | 0       | seconds input *i* may stay unchanged |
//! | `watchdog.process`        | function |       |     |         | checks the inputs (fast thread)     |
//! | `watchdog.set-timeouts`   | function |       |     |         | timeouts, `enable-in` edge (servo thread) |
//!
//! # `charge_pump` (`loadrt charge_pump`, one instance named `charge-pump`)
//!
//! A counter that goes up by one in every period while `enable` is TRUE (and keeps its value while
//! FALSE): `out`, `out-2`, `out-4` are its bits 0, 1 and 2, so square waves of 1/2, 1/4 and 1/8 of the
//! thread's rate; all are FALSE while `enable` is FALSE. The first enabled period gives `out` TRUE.
//! The count is per call: a late period makes one longer half-wave, as in LinuxCNC.
//!
//! | name                  | kind     | type | dir | default | meaning                               |
//! |-----------------------|----------|------|-----|---------|---------------------------------------|
//! | `charge-pump.out`     | pin      | bit  | OUT | FALSE   | toggles every period                  |
//! | `charge-pump.out-2`   | pin      | bit  | OUT | FALSE   | toggles every 2 periods               |
//! | `charge-pump.out-4`   | pin      | bit  | OUT | FALSE   | toggles every 4 periods               |
//! | `charge-pump.enable`  | pin      | bit  | IN  | TRUE    | FALSE holds every output low          |
//! | `charge-pump`         | function |      |     |         | one step (put it in the base thread)  |
//!
//! LinuxCNC also exports a `.time` pin and `.tmax` params per function; this runtime keeps function
//! timing in its own statistics instead.

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};
use crate::runtime::function::Cycle;

/// Nanoseconds of the period just run as LinuxCNC's time-based components count them: the nominal
/// period, times the periods elapsed (a late period covers the skipped ones too). Deterministic,
/// unlike the measured `dt`, and equal to LinuxCNC's `period` whenever the thread is on time.
pub(super) fn nominal_ns(cycle: &Cycle) -> u64 {
    cycle
        .period_ns
        .saturating_mul(cycle.missed.saturating_add(1))
}

/// The estop latch's state machine (starts faulted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct EstopLatch {
    /// TRUE while OK.
    pub(crate) ok: bool,
    /// The `watchdog` output.
    pub(crate) watchdog: bool,
    last_reset: bool,
}

impl EstopLatch {
    /// One period.
    pub(crate) fn step(&mut self, ok_in: bool, fault_in: bool, reset: bool) {
        if ok_in && !fault_in {
            if reset && !self.last_reset {
                self.ok = true;
            }
            if self.ok {
                self.watchdog = !self.watchdog;
            }
        } else {
            self.ok = false;
        }
        self.last_reset = reset;
    }
}

/// The `estop_latch` component.
pub(crate) struct EstopLatchComp;

impl Component for EstopLatchComp {
    const NAME: &'static str = "estop_latch";
    const PREFIX: &'static str = "estop-latch";
    const SUMMARY: &'static str =
        "software estop latch: faults on fault-in/ok-in, resets on a reset edge";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let ok_in = ctx.pin_with_default::<In, bool>("ok-in", true)?;
        let fault_in = ctx.pin::<In, bool>("fault-in")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let ok_out = ctx.pin::<Out, bool>("ok-out")?;
        let fault_out = ctx.pin_with_default::<Out, bool>("fault-out", true)?;
        let watchdog = ctx.pin::<Out, bool>("watchdog")?;
        ctx.instance_function(move |hal| {
            let (ok_in, fault_in, reset) = (hal.pin(ok_in), hal.pin(fault_in), hal.pin(reset));
            let (ok_out, fault_out, watchdog) =
                (hal.pin(ok_out), hal.pin(fault_out), hal.pin(watchdog));
            let mut latch = EstopLatch::default();
            Box::new(move |_| {
                latch.step(ok_in.get(), fault_in.get(), reset.get());
                ok_out.set(latch.ok);
                fault_out.set(!latch.ok);
                watchdog.set(latch.watchdog);
            })
        })
    }
}

/// The most inputs `watchdog` takes, as in LinuxCNC.
pub(crate) const WATCHDOG_MAX_INPUTS: usize = 32;

/// `timeout-i` in seconds → ns: negative and NaN count as 0, huge values saturate.
pub(crate) fn timeout_ns(seconds: f64) -> i64 {
    let ns = seconds * 1e9;
    if ns > 0.0 {
        ns as i64
    } else {
        0
    }
}

/// One watched input of `watchdog`: its value in the last enabled period.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Heartbeat {
    last: bool,
}

impl Heartbeat {
    /// One enabled period of `elapsed_ns`: a change restarts `left_ns` (the time left before a
    /// fault) at `timeout_ns`, no change takes `elapsed_ns` off it. FALSE when the input timed out.
    pub(crate) fn check(
        &mut self,
        input: bool,
        timeout_ns: i64,
        left_ns: &mut i64,
        elapsed_ns: u64,
    ) -> bool {
        if input != self.last {
            *left_ns = timeout_ns;
        } else {
            *left_ns = left_ns.saturating_sub(i64::try_from(elapsed_ns).unwrap_or(i64::MAX));
        }
        self.last = input;
        *left_ns >= 0
    }
}

/// The `watchdog` component.
pub(crate) struct Watchdog;

impl Component for Watchdog {
    const NAME: &'static str = "watchdog";
    const SUMMARY: &'static str = "ok-out goes FALSE when a heartbeat input stops changing";
    const ARGS: &'static [&'static str] = &["num_inputs"];
    const SINGLETON: bool = true;

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let n: usize = ctx.arg("num_inputs")?.unwrap_or(0);
        if !(1..=WATCHDOG_MAX_INPUTS).contains(&n) {
            return Err(LoadError::new(format!(
                "watchdog: give num_inputs=1..{WATCHDOG_MAX_INPUTS} (the number of heartbeat inputs)"
            )));
        }
        let mut inputs = Vec::with_capacity(n);
        let mut timeouts = Vec::with_capacity(n);
        for i in 0..n {
            inputs.push(ctx.pin::<In, bool>(&format!("input-{i}"))?);
        }
        let enable = ctx.pin::<In, bool>("enable-in")?;
        let ok = ctx.pin::<Out, bool>("ok-out")?;
        for i in 0..n {
            timeouts.push(ctx.param(&format!("timeout-{i}"), ParamAccess::Rw, 0.0f64)?);
        }
        // Each input's timeout and time left are shared by the two functions, which may run in
        // different threads: atomics, each written by one function at a time as in LinuxCNC
        // (set-timeouts writes the time left only on the enable edge).
        let timeouts_ns: Arc<[AtomicI64]> = (0..n).map(|_| AtomicI64::new(0)).collect();
        let left_ns: Arc<[AtomicI64]> = (0..n).map(|_| AtomicI64::new(0)).collect();
        let (timeouts_p, left_p) = (timeouts_ns.clone(), left_ns.clone());
        ctx.function("process", move |hal| {
            let inputs: Vec<_> = inputs.iter().map(|&k| hal.pin(k)).collect();
            let (enable, ok) = (hal.pin(enable), hal.pin(ok));
            let mut beats = vec![Heartbeat::default(); inputs.len()];
            Box::new(move |cycle| {
                // As LinuxCNC: nothing runs while disabled or once faulted (the timers hold).
                if !enable.get() || !ok.get() {
                    return;
                }
                let elapsed = nominal_ns(cycle);
                let mut all_ok = true;
                for (((beat, input), timeout), left) in beats
                    .iter_mut()
                    .zip(&inputs)
                    .zip(&*timeouts_p)
                    .zip(&*left_p)
                {
                    let mut l = left.load(Relaxed);
                    all_ok &= beat.check(input.get(), timeout.load(Relaxed), &mut l, elapsed);
                    left.store(l, Relaxed);
                }
                if !all_ok {
                    ok.set(false);
                }
            })
        })?;
        ctx.function("set-timeouts", move |hal| {
            let timeouts: Vec<_> = timeouts.iter().map(|&k| hal.param(k)).collect();
            let (enable, ok) = (hal.pin(enable), hal.pin(ok));
            let mut last_enable = false;
            Box::new(move |_| {
                for (param, ns) in timeouts.iter().zip(&*timeouts_ns) {
                    ns.store(timeout_ns(param.get()), Relaxed);
                }
                let en = enable.get();
                // A rising enable restarts a faulted watchdog only (LinuxCNC): re-enabling one
                // that is still OK resumes its held timers.
                if en && !last_enable && !ok.get() {
                    for (t, left) in timeouts_ns.iter().zip(&*left_ns) {
                        left.store(t.load(Relaxed), Relaxed);
                    }
                    ok.set(true);
                }
                last_enable = en;
            })
        })
    }
}

/// The charge pump's counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ChargePump {
    count: u32,
}

impl ChargePump {
    /// One period: `(out, out-2, out-4)`.
    pub(crate) fn step(&mut self, enable: bool) -> (bool, bool, bool) {
        if !enable {
            return (false, false, false);
        }
        self.count = self.count.wrapping_add(1);
        let c = self.count;
        (c & 1 != 0, c & 2 != 0, c & 4 != 0)
    }
}

/// The `charge_pump` component.
pub(crate) struct ChargePumpComp;

impl Component for ChargePumpComp {
    const NAME: &'static str = "charge_pump";
    const PREFIX: &'static str = "charge-pump";
    const SUMMARY: &'static str = "square waves at 1/2, 1/4, 1/8 of the thread rate while enabled";
    const SINGLETON: bool = true;

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let out = ctx.pin::<Out, bool>("out")?;
        let out2 = ctx.pin::<Out, bool>("out-2")?;
        let out4 = ctx.pin::<Out, bool>("out-4")?;
        let enable = ctx.pin_with_default::<In, bool>("enable", true)?;
        ctx.instance_function(move |hal| {
            let (out, out2, out4, enable) =
                (hal.pin(out), hal.pin(out2), hal.pin(out4), hal.pin(enable));
            let mut pump = ChargePump::default();
            Box::new(move |_| {
                let (a, b, c) = pump.step(enable.get());
                out.set(a);
                out2.set(b);
                out4.set(c);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::Harness;

    /// A harness on a segment of its own (tests run in parallel).
    fn bench() -> Harness {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Harness::new(&format!("test-safety-{}-{n}", std::process::id())).unwrap()
    }

    fn bit(h: &Harness, name: &str) -> bool {
        h.get_f64(name).unwrap() != 0.0
    }

    fn set(h: &Harness, name: &str, v: bool) {
        h.set(name, if v { "1" } else { "0" }).unwrap();
    }

    /// Runs `rows` of inputs through the harness, one period each, returning the outputs per row.
    fn run(h: &mut Harness, ins: &[&str], outs: &[&str], rows: &[&[u8]]) -> Vec<Vec<u8>> {
        rows.iter()
            .map(|row| {
                for (name, v) in ins.iter().zip(row.iter()) {
                    set(h, name, *v != 0);
                }
                h.step(1_000_000);
                outs.iter().map(|o| u8::from(bit(h, o))).collect()
            })
            .collect()
    }

    #[test]
    fn estop_latch_matches_linuxcnc_period_by_period() {
        let mut h = bench();
        assert_eq!(h.loadrt("estop_latch").unwrap(), ["estop-latch.0"]);
        h.start().unwrap();
        assert_eq!(h.functions().collect::<Vec<_>>(), ["estop-latch.0"]);
        // Defaults before any period.
        assert!(bit(&h, "estop-latch.0.ok-in") && bit(&h, "estop-latch.0.fault-out"));
        assert!(!bit(&h, "estop-latch.0.ok-out") && !bit(&h, "estop-latch.0.fault-in"));
        let p = "estop-latch.0.";
        let ins = [
            p.to_owned() + "ok-in",
            p.to_owned() + "fault-in",
            p.to_owned() + "reset",
        ];
        let outs = [
            p.to_owned() + "ok-out",
            p.to_owned() + "fault-out",
            p.to_owned() + "watchdog",
        ];
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
        // Recorded from LinuxCNC 2.9's estop_latch with streamer/sampler, 1 ms thread.
        let table: [(&[u8], &[u8]); 17] = [
            (&[1, 0, 0], &[0, 1, 0]),
            (&[1, 0, 1], &[1, 0, 1]), // reset edge: OK, watchdog toggles at once
            (&[1, 0, 1], &[1, 0, 0]),
            (&[1, 0, 0], &[1, 0, 1]),
            (&[1, 1, 0], &[0, 1, 1]), // fault-in: faulted, watchdog frozen
            (&[1, 1, 1], &[0, 1, 1]), // reset edge during the fault: ignored
            (&[1, 0, 1], &[0, 1, 1]), // fault gone, reset still held: no edge
            (&[1, 0, 0], &[0, 1, 1]),
            (&[1, 0, 1], &[1, 0, 0]),
            (&[0, 0, 0], &[0, 1, 0]), // ok-in FALSE faults too
            (&[0, 0, 1], &[0, 1, 0]),
            (&[1, 0, 1], &[0, 1, 0]),
            (&[1, 0, 0], &[0, 1, 0]),
            (&[1, 1, 1], &[0, 1, 0]),
            (&[0, 1, 0], &[0, 1, 0]),
            (&[1, 0, 1], &[1, 0, 1]),
            (&[1, 0, 1], &[1, 0, 0]),
        ];
        let rows: Vec<&[u8]> = table.iter().map(|r| r.0).collect();
        let got = run(&mut h, &ins, &outs, &rows);
        for (i, ((_, want), got)) in table.iter().zip(&got).enumerate() {
            assert_eq!(&got[..], *want, "row {}", i + 1);
        }
    }

    #[test]
    fn inputs_true_from_the_first_period_are_edges_as_in_linuxcnc() {
        // Recorded from LinuxCNC 2.9: reset and enable-in TRUE from the first period latch OK at once.
        let mut h = bench();
        h.loadrt("estop_latch").unwrap();
        h.loadrt("watchdog num_inputs=1").unwrap();
        h.start().unwrap();
        h.set("watchdog.timeout-0", "0.01").unwrap();
        set(&h, "estop-latch.0.reset", true);
        set(&h, "watchdog.enable-in", true);
        h.call("estop-latch.0", 1_000_000).unwrap();
        h.call("watchdog.set-timeouts", 1_000_000).unwrap();
        h.call("watchdog.process", 1_000_000).unwrap();
        assert!(bit(&h, "estop-latch.0.ok-out") && bit(&h, "estop-latch.0.watchdog"));
        assert!(bit(&h, "watchdog.ok-out"));
    }

    #[test]
    fn estop_latch_names_and_counts_make_linuxcnc_instances() {
        let mut h = bench();
        assert_eq!(
            h.loadrt("estop_latch count=2").unwrap(),
            ["estop-latch.0", "estop-latch.1"]
        );
        assert_eq!(h.loadrt("estop_latch names=a,b").unwrap(), ["a", "b"]);
        h.start().unwrap();
        assert_eq!(
            h.functions().collect::<Vec<_>>(),
            ["estop-latch.0", "estop-latch.1", "a", "b"]
        );
        // Instances are independent.
        h.set("b.reset", "1").unwrap();
        h.step(1_000_000);
        assert!(bit(&h, "b.ok-out") && !bit(&h, "a.ok-out") && !bit(&h, "estop-latch.1.ok-out"));
    }

    /// A watchdog with 2 inputs, both functions in one thread (set-timeouts first, as measured).
    fn watchdog(t0: &str, t1: &str) -> Harness {
        let mut h = bench();
        assert_eq!(h.loadrt("watchdog num_inputs=2").unwrap(), ["watchdog"]);
        h.start().unwrap();
        h.set("watchdog.timeout-0", t0).unwrap();
        h.set("watchdog.timeout-1", t1).unwrap();
        h
    }

    /// One period of `watchdog`: set-timeouts then process, like `addf` in that order.
    fn wd_step(h: &mut Harness, enable: u8, i0: u8, i1: u8) -> u8 {
        set(h, "watchdog.enable-in", enable != 0);
        set(h, "watchdog.input-0", i0 != 0);
        set(h, "watchdog.input-1", i1 != 0);
        h.call("watchdog.set-timeouts", 1_000_000).unwrap();
        h.call("watchdog.process", 1_000_000).unwrap();
        u8::from(bit(h, "watchdog.ok-out"))
    }

    fn wd_table(h: &mut Harness, rows: &[(u8, u8, u8, u8)]) {
        for (i, &(e, a, b, want)) in rows.iter().enumerate() {
            assert_eq!(wd_step(h, e, a, b), want, "row {}: in {e} {a} {b}", i + 1);
        }
    }

    #[test]
    fn watchdog_load_declares_linuxcnc_names_and_refuses_bad_counts() {
        let mut h = bench();
        h.loadrt("watchdog num_inputs=3").unwrap();
        for p in ["input-0", "input-2", "enable-in", "ok-out"] {
            assert!(
                h.declared().pins.contains_key(&format!("watchdog.{p}")),
                "{p}"
            );
        }
        assert!(h.declared().params.contains_key("watchdog.timeout-2"));
        assert!(!h.declared().pins.contains_key("watchdog.input-3"));
        h.start().unwrap();
        assert_eq!(
            h.functions().collect::<Vec<_>>(),
            ["watchdog.process", "watchdog.set-timeouts"]
        );
        for bad in [
            "watchdog",
            "watchdog num_inputs=0",
            "watchdog num_inputs=33",
        ] {
            let e = bench().loadrt(bad).unwrap_err();
            assert!(e.message.contains("num_inputs=1..32"), "{bad}: {e}");
        }
        let e = bench().loadrt("watchdog num_inputs=1 count=2").unwrap_err();
        assert!(e.message.contains("single instance"), "{e}");
    }

    #[test]
    fn watchdog_times_out_as_linuxcnc_does() {
        // Recorded from LinuxCNC 2.9: timeouts 3.5 ms, 1 ms thread; input-0 stops after row 9 and
        // ok-out drops on the 4th period without a change (3 ms ≤ 3.5 ms, 4 ms is not).
        let mut h = watchdog("0.0035", "0.0035");
        let mut rows = Vec::new();
        let mut a = 0;
        for _ in 0..3 {
            a ^= 1;
            rows.push((0, a, a, 0)); // disabled: ok-out stays FALSE
        }
        for _ in 0..6 {
            a ^= 1;
            rows.push((1, a, a, 1)); // enable edge: OK
        }
        for (i, want) in [1, 1, 1, 0, 0, 0, 0, 0].into_iter().enumerate() {
            rows.push((1, a, (i % 2) as u8, want));
        }
        for _ in 0..4 {
            a ^= 1;
            rows.push((1, a, a, 0)); // toggling again does not clear the fault
        }
        for _ in 0..2 {
            a ^= 1;
            rows.push((0, a, a, 0));
        }
        for _ in 0..6 {
            a ^= 1;
            rows.push((1, a, a, 1)); // a new enable edge does
        }
        for want in [1, 1, 1, 0, 0] {
            rows.push((1, a, a, want));
        }
        wd_table(&mut h, &rows);
    }

    #[test]
    fn watchdog_timeout_boundary_enable_edge_and_disabled_periods() {
        // Recorded from LinuxCNC 2.9 (runs A, E, F of the notes): timeout 3 ms.
        // A: input-0 never changes; the enable edge starts its timer; 3 ms is in time, 4 is not.
        let mut h = watchdog("0.003", "1");
        wd_table(
            &mut h,
            &[
                (0, 0, 1, 0),
                (0, 0, 0, 0),
                (1, 0, 1, 1),
                (1, 0, 0, 1),
                (1, 0, 1, 1),
                (1, 0, 0, 0),
                (1, 0, 1, 0),
                (0, 0, 0, 0),
                (1, 1, 0, 1), // enable edge and an input-0 edge at once
                (1, 1, 1, 1),
                (1, 1, 0, 1),
                (1, 1, 1, 1),
                (1, 1, 0, 0),
            ],
        );
        // E: while enable-in is FALSE nothing is checked and ok-out keeps TRUE.
        let mut h = watchdog("0.003", "0");
        let mut rows = vec![(0, 1, 1, 0), (0, 0, 0, 0)];
        let mut b = 0;
        for _ in 0..4 {
            b ^= 1;
            rows.push((1, b, b, 1));
        }
        for _ in 0..8 {
            b ^= 1;
            rows.push((0, 0, b, 1));
        }
        wd_table(&mut h, &rows);
        // F: the input's previous value is the last *enabled* period's: a change while disabled
        // counts as an edge at the next enabled period (fault on row 10, not 9).
        let mut h = watchdog("0.003", "0");
        wd_table(
            &mut h,
            &[
                (0, 0, 0, 0),
                (1, 0, 1, 1),
                (1, 0, 0, 1),
                (0, 1, 1, 1),
                (0, 1, 0, 1),
                (1, 1, 1, 1),
                (1, 1, 0, 1),
                (1, 1, 1, 1),
                (1, 1, 0, 1),
                (1, 1, 1, 0),
            ],
        );
    }

    #[test]
    fn watchdog_negative_timeouts_count_as_zero_and_changes_apply_mid_run() {
        // A negative timeout (LinuxCNC: toggling every period never faults) is 0.
        // NaN cannot be given with setp; the conversion takes it as 0 too.
        assert_eq!(timeout_ns(f64::NAN), 0);
        assert_eq!(timeout_ns(1e300), i64::MAX);
        assert_eq!(timeout_ns(0.0035), 3_500_000);
        let mut h = watchdog("-1", "-0.5");
        let mut b = 0;
        for i in 0..10 {
            b ^= 1;
            assert_eq!(wd_step(&mut h, 1, b, b), 1, "period {i}");
        }
        // Holding one period is more than 0 s.
        assert_eq!(wd_step(&mut h, 1, b, b), 0);
        // A longer timeout set mid-run applies from the next edge on.
        h.set("watchdog.timeout-0", "0.010").unwrap();
        h.set("watchdog.timeout-1", "0.010").unwrap();
        wd_step(&mut h, 0, b, b);
        b ^= 1;
        assert_eq!(wd_step(&mut h, 1, b, b), 1);
        for i in 0..10 {
            assert_eq!(wd_step(&mut h, 1, b, b), 1, "period {i} of 10 ms");
        }
        assert_eq!(wd_step(&mut h, 1, b, b), 0);
    }

    #[test]
    fn watchdog_counts_skipped_periods_and_runs_split_across_threads() {
        let mut h = watchdog("0.0035", "1");
        // step() runs both functions in load order: process, then set-timeouts. The enable edge is
        // seen by set-timeouts after process, so ok-out is TRUE from the end of the first period.
        set(&h, "watchdog.enable-in", true);
        h.step(1_000_000);
        assert!(bit(&h, "watchdog.ok-out"));
        set(&h, "watchdog.input-0", true);
        h.step(1_000_000);
        // 3 ms late in one period (2 skipped + this one): still in time; one more ms is not.
        h.step_late(1_000_000, 2);
        assert!(bit(&h, "watchdog.ok-out"));
        h.step(1_000_000);
        assert!(!bit(&h, "watchdog.ok-out"));
        // A stall of 4 periods at once faults in one step.
        let mut h = watchdog("0.0035", "1");
        set(&h, "watchdog.enable-in", true);
        h.step(1_000_000);
        set(&h, "watchdog.input-0", true);
        set(&h, "watchdog.input-1", true);
        h.step(1_000_000);
        h.step_late(1_000_000, 3);
        assert!(!bit(&h, "watchdog.ok-out"));
    }

    #[test]
    fn charge_pump_matches_linuxcnc_and_freezes_its_count_while_disabled() {
        let mut h = bench();
        assert_eq!(h.loadrt("charge_pump").unwrap(), ["charge-pump"]);
        h.start().unwrap();
        assert_eq!(h.functions().collect::<Vec<_>>(), ["charge-pump"]);
        assert!(bit(&h, "charge-pump.enable"));
        // Recorded from LinuxCNC 2.9 (enable, out, out-2, out-4).
        let table: [[u8; 4]; 21] = [
            [1, 1, 0, 0],
            [1, 0, 1, 0],
            [1, 1, 1, 0],
            [1, 0, 0, 1],
            [1, 1, 0, 1],
            [1, 0, 1, 1],
            [1, 1, 1, 1],
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 0, 1, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [1, 1, 1, 0], // resumes at count 11, not from 0
            [1, 0, 0, 1],
            [1, 1, 0, 1],
            [1, 0, 1, 1],
            [1, 1, 1, 1],
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [1, 0, 1, 0],
            [1, 1, 1, 0],
        ];
        for (i, row) in table.iter().enumerate() {
            set(&h, "charge-pump.enable", row[0] != 0);
            // A late period is one call, as in LinuxCNC.
            if i == 5 {
                h.step_late(1_000_000, 3);
            } else {
                h.step(1_000_000);
            }
            let got = [
                bit(&h, "charge-pump.out"),
                bit(&h, "charge-pump.out-2"),
                bit(&h, "charge-pump.out-4"),
            ]
            .map(u8::from);
            assert_eq!(got, row[1..], "row {}", i + 1);
        }
        let e = bench().loadrt("charge_pump count=2").unwrap_err();
        assert!(e.message.contains("single instance"), "{e}");
    }

    #[test]
    fn nominal_time_counts_skipped_periods() {
        let c = Cycle {
            period_ns: 1_000_000,
            dt_ns: 3_000_123,
            missed: 2,
            ..Cycle::default()
        };
        assert_eq!(nominal_ns(&c), 3_000_000);
        assert_eq!(
            nominal_ns(&Cycle {
                period_ns: 250_000,
                ..Cycle::default()
            }),
            250_000
        );
    }
}
