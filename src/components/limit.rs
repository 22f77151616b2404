//! Limiters, LinuxCNC's names and pins: `limit1` (range), `limit2` (range and slew rate) and
//! `limit3` (range, velocity and acceleration).
//!
//! | name               | kind     | type  | dir | default | meaning                                   |
//! |--------------------|----------|-------|-----|---------|-------------------------------------------|
//! | `limitK.N.in`      | pin      | float | IN  | 0       | the value to limit                        |
//! | `limitK.N.out`     | pin      | float | OUT |         | the limited value                         |
//! | `limitK.N.min`     | pin      | float | IN  | −1e20   | lower bound                               |
//! | `limitK.N.max`     | pin      | float | IN  | 1e20    | upper bound                               |
//! | `limit2.N.maxv`    | pin      | float | IN  | 1e20    | largest change of `out` per second        |
//! | `limit2.N.load`    | pin      | bit   | IN  | FALSE   | TRUE: `out` jumps to `in` (within min…max), ignoring `maxv` |
//! | `limit3.N.maxa`    | pin      | float | IN  | 1e20    | largest change of the velocity per second |
//! | `limit3.N.enable`  | pin      | bit   | IN  | TRUE    | FALSE: `out` heads for 0 instead of `in`, within the same limits |
//! | `limit3.N.smooth-steps` | pin | u32   | IN  | 2       | periods over which the landing on a goal is eased |
//! | `<instance>`       | function |       |     |         | one update                                |
//!
//! `limit3` has the same `in`, `out`, `load`, `min`, `max` and `maxv` pins as `limit2`.
//!
//! The comparisons are LinuxCNC's, which matters only for odd inputs (checked in halrun):
//!
//! * `limit1` raises a value below `min` to `min`, *then* lowers one above `max` to `max`, so with
//!   `min > max` the output is always `max`.
//! * `limit2` gives `min` for a value below `min`, otherwise `max` for one above `max` (so with
//!   `min > max` a value below `min` gives `min`), and the same for the slew window
//!   `previous ± maxv·period`. `period` is the thread's nominal period. The previous output starts at 0,
//!   so the first periods ramp from 0 toward `in` (even when 0 is outside `min…max`).
//! * A NaN input passes through (every comparison with NaN is false), and the next finite input is
//!   taken as is, since the window around a NaN previous output lets everything through. A NaN bound
//!   limits nothing.

use rtapi_hal::{In, Out};

mod limit3;
pub(crate) use limit3::Limit3;

use super::{Component, LoadContext, LoadError};

/// `limit1`'s rule: up to `min`, then down to `max` (`max` wins when they cross).
pub(crate) fn limit1(x: f64, min: f64, max: f64) -> f64 {
    let mut y = x;
    if y < min {
        y = min;
    }
    if y > max {
        y = max;
    }
    y
}

/// `limit2`'s clamp: `lo` if below it, else `hi` if above it.
pub(crate) fn clamp_low_first(x: f64, lo: f64, hi: f64) -> f64 {
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

/// `limit2`'s state: the previous output.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct SlewLimit {
    pub(crate) last: f64,
}

impl SlewLimit {
    /// One period: `in` within `min…max`, then within `maxdelta` of the previous output (or taken as
    /// is when `load`).
    pub(crate) fn step(&mut self, x: f64, min: f64, max: f64, maxdelta: f64, load: bool) -> f64 {
        let target = clamp_low_first(x, min, max);
        self.last = if load {
            target
        } else {
            clamp_low_first(target, self.last - maxdelta, self.last + maxdelta)
        };
        self.last
    }
}

/// `limit1`: keeps a float within `min…max`.
pub(crate) struct Limit1;

impl Component for Limit1 {
    const NAME: &'static str = "limit1";
    const SUMMARY: &'static str = "limits a float to a range";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let min = ctx.pin_with_default::<In, f64>("min", -1e20)?;
        let max = ctx.pin_with_default::<In, f64>("max", 1e20)?;
        ctx.function("", move |hal| {
            let (input, out, min, max) = (hal.pin(input), hal.pin(out), hal.pin(min), hal.pin(max));
            Box::new(move |_| out.set(limit1(input.get(), min.get(), max.get())))
        })
    }
}

/// `limit2`: range and slew-rate limit.
pub(crate) struct Limit2;

impl Component for Limit2 {
    const NAME: &'static str = "limit2";
    const SUMMARY: &'static str = "limits a float to a range and its rate of change";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let load = ctx.pin::<In, bool>("load")?;
        let min = ctx.pin_with_default::<In, f64>("min", -1e20)?;
        let max = ctx.pin_with_default::<In, f64>("max", 1e20)?;
        let maxv = ctx.pin_with_default::<In, f64>("maxv", 1e20)?;
        ctx.function("", move |hal| {
            let (input, out, load) = (hal.pin(input), hal.pin(out), hal.pin(load));
            let (min, max, maxv) = (hal.pin(min), hal.pin(max), hal.pin(maxv));
            let mut state = SlewLimit::default();
            Box::new(move |cycle| {
                let maxdelta = maxv.get() * (cycle.period_ns as f64 * 1e-9);
                out.set(state.step(input.get(), min.get(), max.get(), maxdelta, load.get()));
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::Harness;

    const P: u64 = 1_000_000;

    #[test]
    fn limit1_clamps_and_lets_max_win() {
        assert_eq!(limit1(5.0, 0.0, 2.0), 2.0);
        assert_eq!(limit1(-5.0, 0.0, 2.0), 0.0);
        assert_eq!(limit1(1.5, 0.0, 2.0), 1.5);
        for x in [-5.0, 1.0, 5.0] {
            assert_eq!(limit1(x, 3.0, 0.0), 0.0, "{x}");
        }
        assert!(limit1(f64::NAN, 0.0, 2.0).is_nan());
        assert_eq!(limit1(5.0, f64::NAN, 2.0), 2.0);
        assert_eq!(limit1(5.0, 0.0, f64::NAN), 5.0);
    }

    #[test]
    fn limit2_ramps_from_zero_and_load_jumps() {
        let mut s = SlewLimit::default();
        let outs: Vec<f64> = (0..6)
            .map(|_| s.step(10.0, -1e20, 5.0, 1.0, false))
            .collect();
        assert_eq!(outs, [1.0, 2.0, 3.0, 4.0, 5.0, 5.0]);
        // The ramp comes first even when 0 is below min.
        let mut s = SlewLimit::default();
        assert_eq!(s.step(10.0, 3.0, 1e20, 1.0, false), 1.0);
        // load jumps to the limited input, and the ramp continues from there.
        assert_eq!(s.step(100.0, -1e20, 5.0, 1.0, true), 5.0);
        assert_eq!(s.step(0.0, -1e20, 5.0, 1.0, false), 4.0);
        // Crossed bounds: below min gives min, otherwise above max gives max.
        assert_eq!(clamp_low_first(1.0, 3.0, 0.0), 3.0);
        assert_eq!(clamp_low_first(5.0, 3.0, 0.0), 0.0);
        // A negative maxv crosses the window the same way: the output walks away from 0.
        let mut s = SlewLimit::default();
        let outs: Vec<f64> = (0..3)
            .map(|_| s.step(0.0, -1e20, 1e20, -1.0, false))
            .collect();
        assert_eq!(outs, [1.0, 2.0, 3.0]);
        // NaN passes and does not stick.
        let mut s = SlewLimit::default();
        assert!(s.step(f64::NAN, -1e20, 1e20, 1.0, false).is_nan());
        assert_eq!(s.step(7.0, -1e20, 1e20, 1.0, false), 7.0);
        assert_eq!(s.step(9.0, -1e20, 1e20, 1.0, false), 8.0);
    }

    #[test]
    fn limits_through_the_hal() {
        let mut h = Harness::new("cat-a-limit").unwrap();
        h.loadrt("limit1").unwrap();
        h.loadrt("limit2 count=2").unwrap();
        h.start().unwrap();
        let f: Vec<&str> = h.functions().collect();
        assert_eq!(f, ["limit1.0", "limit2.0", "limit2.1"]);
        assert_eq!(h.get_f64("limit1.0.min").unwrap(), -1e20);
        assert_eq!(h.get_f64("limit2.0.maxv").unwrap(), 1e20);
        h.set("limit1.0.in", "5e20").unwrap();
        h.set("limit2.0.in", "10").unwrap();
        h.set("limit2.0.maxv", "500").unwrap(); // 0.5 per 1 ms period
        h.step(P);
        assert_eq!(h.get_f64("limit1.0.out").unwrap(), 1e20);
        assert!((h.get_f64("limit2.0.out").unwrap() - 0.5).abs() < 1e-12);
        h.step(P);
        assert!((h.get_f64("limit2.0.out").unwrap() - 1.0).abs() < 1e-12);
        // maxv changed mid-run; the nominal period counts, not the late dt.
        h.set("limit2.0.maxv", "1000").unwrap();
        h.step_late(P, 3);
        assert!((h.get_f64("limit2.0.out").unwrap() - 2.0).abs() < 1e-12);
        h.set("limit2.0.load", "1").unwrap();
        h.step(P);
        assert_eq!(h.get_f64("limit2.0.out").unwrap(), 10.0);
        assert_eq!(h.get_f64("limit2.1.out").unwrap(), 0.0);
    }
}
