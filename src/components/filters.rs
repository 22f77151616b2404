//! Float filters with state, as in LinuxCNC: `ddt`, `integ` and `lowpass`.
//!
//! Names, types, defaults and functions are LinuxCNC 2.9's (one function per instance, named as the
//! instance: `ddt.0`), and the arithmetic is LinuxCNC's, checked against records of its modules in
//! `halrun`. Time is LinuxCNC's `fperiod` (the thread's nominal period in seconds), times the
//! periods elapsed when a period comes late — see [`fperiod`](super::timing::fperiod).
//!
//! NaN: like LinuxCNC these pass a NaN input on. `ddt` recovers one period after the input is finite
//! again; `integ` and `lowpass` keep NaN until `reset` / `load` (a NaN `min`/`max` clamps nothing).
//!
//! # `ddt` (`loadrt ddt [count=N|names=…]`)
//!
//! `out = (in − in of the previous period) / fperiod`; the input before the first period is 0.
//!
//! | name        | kind     | type  | dir | default | meaning                         |
//! |-------------|----------|-------|-----|---------|---------------------------------|
//! | `ddt.N.in`  | pin      | float | IN  | 0       | the input                       |
//! | `ddt.N.out` | pin      | float | OUT | 0       | its rate of change, per second  |
//! | `ddt.N`     | function |       |     |         | one step                        |
//!
//! # `integ` (`loadrt integ [count=N|names=…]`)
//!
//! `out += gain × in × fperiod`, or `out = 0` while `reset` is TRUE; then `out` is limited to `max`,
//! then to `min` (so `min` wins if they cross).
//!
//! | name           | kind     | type  | dir | default | meaning                          |
//! |----------------|----------|-------|-----|---------|----------------------------------|
//! | `integ.N.in`   | pin      | float | IN  | 0       | the input                        |
//! | `integ.N.gain` | pin      | float | IN  | 1.0     | multiplies the input             |
//! | `integ.N.out`  | pin      | float | OUT | 0       | the integral of `gain × in`      |
//! | `integ.N.reset`| pin      | bit   | IN  | FALSE   | TRUE holds `out` at 0            |
//! | `integ.N.max`  | pin      | float | IN  | 1e20    | upper limit of `out`             |
//! | `integ.N.min`  | pin      | float | IN  | −1e20   | lower limit of `out`             |
//! | `integ.N`      | function |       |     |         | one step                         |
//!
//! # `lowpass` (`loadrt lowpass [count=N|names=…]`)
//!
//! `out += (in − out) × gain` each period (not scaled by the period, as in LinuxCNC: for a pole at
//! `a` rad/s and a period `T`, `gain = 1 − e^(−aT)`), or `out = in` while `load` is TRUE.
//!
//! | name             | kind     | type  | dir | default | meaning                           |
//! |------------------|----------|-------|-----|---------|-----------------------------------|
//! | `lowpass.N.in`   | pin      | float | IN  | 0       | the input                         |
//! | `lowpass.N.out`  | pin      | float | OUT | 0       | the filtered input                |
//! | `lowpass.N.load` | pin      | bit   | IN  | FALSE   | TRUE copies `in` to `out`         |
//! | `lowpass.N.gain` | param    | float | RW  | 0       | fraction of the gap closed per period |
//! | `lowpass.N`      | function |       |     |         | one step                          |

use rtapi_hal::{In, Out, ParamAccess};

use super::timing::fperiod;
use super::{Component, LoadContext, LoadError};

/// The `ddt` component.
pub(crate) struct Ddt;

impl Component for Ddt {
    const NAME: &'static str = "ddt";
    const SUMMARY: &'static str = "derivative of the input, per second";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, f64>("out")?;
        ctx.instance_function(move |hal| {
            let (input, out) = (hal.pin(input), hal.pin(out));
            let mut last = 0.0;
            Box::new(move |cycle| {
                let x = input.get();
                out.set((x - last) / fperiod(cycle));
                last = x;
            })
        })
    }
}

/// One step of `integ`: the new `out`.
pub(crate) fn integ_step(
    out: f64,
    input: f64,
    gain: f64,
    reset: bool,
    min: f64,
    max: f64,
    dt: f64,
) -> f64 {
    let mut o = if reset { 0.0 } else { out + gain * input * dt };
    if o > max {
        o = max;
    }
    if o < min {
        o = min;
    }
    o
}

/// The `integ` component.
pub(crate) struct Integ;

impl Component for Integ {
    const NAME: &'static str = "integ";
    const SUMMARY: &'static str = "integrator with gain, reset and limits";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let gain = ctx.pin_with_default::<In, f64>("gain", 1.0)?;
        let out = ctx.pin::<Out, f64>("out")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let max = ctx.pin_with_default::<In, f64>("max", 1e20)?;
        let min = ctx.pin_with_default::<In, f64>("min", -1e20)?;
        ctx.instance_function(move |hal| {
            let (input, gain, out) = (hal.pin(input), hal.pin(gain), hal.pin(out));
            let (reset, max, min) = (hal.pin(reset), hal.pin(max), hal.pin(min));
            let mut o = 0.0;
            Box::new(move |cycle| {
                o = integ_step(
                    o,
                    input.get(),
                    gain.get(),
                    reset.get(),
                    min.get(),
                    max.get(),
                    fperiod(cycle),
                );
                out.set(o);
            })
        })
    }
}

/// The `lowpass` component.
pub(crate) struct Lowpass;

impl Component for Lowpass {
    const NAME: &'static str = "lowpass";
    const SUMMARY: &'static str = "first-order low-pass filter: out += (in - out) * gain";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let load = ctx.pin::<In, bool>("load")?;
        let gain = ctx.param("gain", ParamAccess::Rw, 0.0f64)?;
        ctx.instance_function(move |hal| {
            let (input, out, load, gain) =
                (hal.pin(input), hal.pin(out), hal.pin(load), hal.param(gain));
            let mut o = 0.0;
            Box::new(move |_| {
                let x = input.get();
                o = if load.get() {
                    x
                } else {
                    o + (x - o) * gain.get()
                };
                out.set(o);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::test_util::{bench, get, set, table};

    #[test]
    fn ddt_integ_lowpass_match_linuxcnc() {
        let mut h = bench("filters");
        h.loadrt("ddt").unwrap();
        h.loadrt("integ").unwrap();
        h.loadrt("lowpass").unwrap();
        h.start().unwrap();
        assert_eq!(
            h.functions().collect::<Vec<_>>(),
            ["ddt.0", "integ.0", "lowpass.0"]
        );
        assert_eq!(get(&h, "integ.0.gain"), 1.0);
        assert_eq!(get(&h, "integ.0.max"), 1e20);
        assert_eq!(get(&h, "integ.0.min"), -1e20);
        set(&h, "lowpass.0.gain", 0.25);
        // Recorded from LinuxCNC 2.9 at 1 ms: in (to all three), integ gain, max, min, reset,
        // lowpass load → ddt out, integ out, lowpass out.
        let rows: [[f64; 9]; 12] = [
            [1., 1., 1e20, -1e20, 0., 0., 1000., 0.001, 0.25],
            [1., 1., 1e20, -1e20, 0., 0., 0., 0.002, 0.4375],
            [3., 1., 1e20, -1e20, 0., 0., 2000., 0.005, 1.078125],
            [2., 2., 1e20, -1e20, 0., 0., -1000., 0.009, 1.30859375],
            [2., 2., 0.01, -1e20, 0., 0., 0., 0.01, 1.4814453125],
            [-5., 1., 0.01, -1e20, 0., 0., -7000., 0.005, -0.138916015625],
            [-5., 1., 0.01, -1e20, 0., 0., 0., 0., -1.35418701171875],
            [
                -5.,
                1.,
                0.01,
                -0.001,
                0.,
                0.,
                0.,
                -0.001,
                -2.2656402587890625,
            ],
            [4., 1., 0.01, -0.001, 1., 1., 9000., 0., 4.],
            [4., 1., 0.01, -0.001, 0., 0., 0., 0.004, 4.],
            [0., 1., 0.01, 0.02, 0., 0., -4000., 0.02, 3.],
            [0., 1., 0.01, 0.02, 0., 0., 0., 0.02, 2.25],
        ];
        let rows: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| {
                let mut v = vec![r[0], r[0], r[0]];
                v.extend_from_slice(&r[1..]);
                v
            })
            .collect();
        let rows: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        table(
            &mut h,
            1_000_000,
            &[
                "ddt.0.in",
                "integ.0.in",
                "lowpass.0.in",
                "integ.0.gain",
                "integ.0.max",
                "integ.0.min",
                "integ.0.reset",
                "lowpass.0.load",
            ],
            &["ddt.0.out", "integ.0.out", "lowpass.0.out"],
            &rows,
        );
    }

    #[test]
    fn filters_with_late_periods_and_nan() {
        let mut h = bench("filters");
        h.loadrt("ddt").unwrap();
        h.loadrt("integ").unwrap();
        h.start().unwrap();
        set(&h, "ddt.0.in", 1.0);
        set(&h, "integ.0.in", 1.0);
        h.step(1_000_000);
        // A period 4 ms late: the derivative over 4 ms, the integral of 4 ms.
        set(&h, "ddt.0.in", 5.0);
        h.step_late(1_000_000, 3);
        assert!((get(&h, "ddt.0.out") - 1000.0).abs() < 1e-9);
        assert!((get(&h, "integ.0.out") - 0.005).abs() < 1e-15);
        // NaN cannot be set with setp, so the arithmetic is checked directly: a NaN input sticks
        // in the integral until reset, and a NaN limit does not clamp.
        let o = integ_step(1.0, f64::NAN, 1.0, false, -1.0, 1.0, 0.001);
        assert!(o.is_nan());
        assert_eq!(integ_step(o, 1.0, 1.0, true, -1.0, 1.0, 0.001), 0.0);
        assert_eq!(
            integ_step(2.0, 0.0, 1.0, false, f64::NAN, f64::NAN, 0.001),
            2.0
        );
        assert_eq!(integ_step(2.0, 0.0, 1.0, false, 0.0, 1.0, 0.001), 1.0);
    }

    #[test]
    fn lowpass_converges_and_gain_changes_apply_mid_run() {
        let mut h = bench("filters");
        h.loadrt("lowpass").unwrap();
        h.start().unwrap();
        set(&h, "lowpass.0.in", 2.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "lowpass.0.out"), 0.0, "gain 0 holds");
        set(&h, "lowpass.0.gain", 0.5);
        for _ in 0..60 {
            h.step(1_000_000);
        }
        assert!((get(&h, "lowpass.0.out") - 2.0).abs() < 1e-12);
        set(&h, "lowpass.0.gain", 1.0);
        set(&h, "lowpass.0.in", -3.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "lowpass.0.out"), -3.0);
    }
}
