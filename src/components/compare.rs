//! Comparators, LinuxCNC's names and pins: `comp`, `wcomp`, `near`. Each instance exports one
//! function named as the instance itself (`comp.0`).
//!
//! | name                | kind     | type  | dir | default | meaning                                    |
//! |---------------------|----------|-------|-----|---------|--------------------------------------------|
//! | `comp.N.in0`        | pin      | float | IN  | 0       | inverting input                            |
//! | `comp.N.in1`        | pin      | float | IN  | 0       | non-inverting input                        |
//! | `comp.N.hyst`       | param    | float | RW  | 0.0     | hysteresis width around `in1 = in0`        |
//! | `comp.N.out`        | pin      | bit   | OUT |         | TRUE once `in1 − in0 > hyst/2`, FALSE once it is `< −hyst/2`, else unchanged |
//! | `comp.N.equal`      | pin      | bit   | OUT |         | TRUE while `in1 − in0` is within ±`hyst/2` (or NaN) |
//! | `wcomp.N.in`        | pin      | float | IN  | 0       | value to compare                           |
//! | `wcomp.N.min`       | pin      | float | IN  | 0       | low boundary                               |
//! | `wcomp.N.max`       | pin      | float | IN  | 0       | high boundary                              |
//! | `wcomp.N.under`     | pin      | bit   | OUT |         | `in ≤ min`                                 |
//! | `wcomp.N.over`      | pin      | bit   | OUT |         | `in ≥ max`                                 |
//! | `wcomp.N.out`       | pin      | bit   | OUT |         | neither `under` nor `over`                 |
//! | `near.N.in1`, `in2` | pin      | float | IN  | 0       | the two values                             |
//! | `near.N.scale`      | param    | float | RW  | 1       | ratio allowed between them (used only when > 1) |
//! | `near.N.difference` | param    | float | RW  | 0       | absolute difference allowed                |
//! | `near.N.out`        | pin      | bit   | OUT |         | see below                                  |
//! | `<instance>`        | function |       |     |         | one update                                 |
//!
//! As LinuxCNC 2.9's modules (checked in halrun):
//!
//! * `comp` with `d = in1 − in0` and `h = hyst/2`: `d < −h` sets `out` and `equal` FALSE; otherwise
//!   `d > h` sets `out` TRUE and `equal` FALSE; otherwise (NaN included) `equal` is TRUE and `out`
//!   keeps its value. With `hyst` 0 and equal inputs, `out` therefore holds its last value.
//! * `wcomp`'s `out` is TRUE for a NaN input (neither test holds) and FALSE whenever `min ≥ max` makes
//!   both hold.
//! * `near` is TRUE when `|in1 − in2| ≤ difference`, or when `scale > 1` and `in2` lies between
//!   `in1 / scale` and `in1 × scale` (ends included, in whichever order the sign of `in1` puts them).
//!   So the default `scale` 1 compares by difference only, and with `scale > 1` two zeros are near.

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};

/// `comp`'s rule: the new `(out, equal)` given the previous `out`.
pub(crate) fn comp(in0: f64, in1: f64, hyst: f64, out: bool) -> (bool, bool) {
    let d = in1 - in0;
    let h = 0.5 * hyst;
    if d < -h {
        (false, false)
    } else if d > h {
        (true, false)
    } else {
        (out, true)
    }
}

/// `wcomp`'s outputs: `(out, under, over)`.
pub(crate) fn wcomp(x: f64, min: f64, max: f64) -> (bool, bool, bool) {
    let under = x <= min;
    let over = x >= max;
    (!under && !over, under, over)
}

/// `near`'s rule.
pub(crate) fn near(in1: f64, in2: f64, scale: f64, difference: f64) -> bool {
    if (in1 - in2).abs() <= difference {
        return true;
    }
    // NaN is not above 1 either.
    if scale.is_nan() || scale <= 1.0 {
        return false;
    }
    let (lo, hi) = if in1 >= 0.0 {
        (in1 / scale, in1 * scale)
    } else {
        (in1 * scale, in1 / scale)
    };
    lo <= in2 && in2 <= hi
}

/// `comp`: comparator with hysteresis.
pub(crate) struct Comp;

impl Component for Comp {
    const NAME: &'static str = "comp";
    const SUMMARY: &'static str = "two-input comparator with hysteresis";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let in0 = ctx.pin::<In, f64>("in0")?;
        let in1 = ctx.pin::<In, f64>("in1")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let equal = ctx.pin::<Out, bool>("equal")?;
        let hyst = ctx.param::<f64>("hyst", ParamAccess::Rw, 0.0)?;
        ctx.function("", move |hal| {
            let (in0, in1, out, equal) = (hal.pin(in0), hal.pin(in1), hal.pin(out), hal.pin(equal));
            let hyst = hal.param(hyst);
            let mut last = false;
            Box::new(move |_| {
                let (o, e) = comp(in0.get(), in1.get(), hyst.get(), last);
                last = o;
                out.set(o);
                equal.set(e);
            })
        })
    }
}

/// `wcomp`: window comparator.
pub(crate) struct Wcomp;

impl Component for Wcomp {
    const NAME: &'static str = "wcomp";
    const SUMMARY: &'static str = "window comparator";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let min = ctx.pin::<In, f64>("min")?;
        let max = ctx.pin::<In, f64>("max")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let under = ctx.pin::<Out, bool>("under")?;
        let over = ctx.pin::<Out, bool>("over")?;
        ctx.function("", move |hal| {
            let (input, min, max) = (hal.pin(input), hal.pin(min), hal.pin(max));
            let (out, under, over) = (hal.pin(out), hal.pin(under), hal.pin(over));
            Box::new(move |_| {
                let (o, u, v) = wcomp(input.get(), min.get(), max.get());
                out.set(o);
                under.set(u);
                over.set(v);
            })
        })
    }
}

/// `near`: are two values close (by ratio or by difference)?
pub(crate) struct Near;

impl Component for Near {
    const NAME: &'static str = "near";
    const SUMMARY: &'static str = "TRUE when two floats are within a ratio or a difference";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let in1 = ctx.pin::<In, f64>("in1")?;
        let in2 = ctx.pin::<In, f64>("in2")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let scale = ctx.param::<f64>("scale", ParamAccess::Rw, 1.0)?;
        let difference = ctx.param::<f64>("difference", ParamAccess::Rw, 0.0)?;
        ctx.function("", move |hal| {
            let (in1, in2, out) = (hal.pin(in1), hal.pin(in2), hal.pin(out));
            let (scale, difference) = (hal.param(scale), hal.param(difference));
            Box::new(move |_| out.set(near(in1.get(), in2.get(), scale.get(), difference.get())))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::Harness;
    use rtapi_hal::Value;

    const P: u64 = 1_000_000;

    #[test]
    fn comp_switches_outside_the_band_and_holds_inside() {
        // hyst 0: strictly above / below switch; equal inputs hold.
        assert_eq!(comp(0.0, 0.0, 0.0, false), (false, true));
        assert_eq!(comp(0.0, 1.0, 0.0, false), (true, false));
        assert_eq!(comp(0.0, 0.0, 0.0, true), (true, true));
        assert_eq!(comp(0.0, -1.0, 0.0, true), (false, false));
        // hyst 1: ±0.5 around equality; the edges are inside.
        assert_eq!(comp(0.0, 0.5, 1.0, false), (false, true));
        assert_eq!(comp(0.0, 0.6, 1.0, false), (true, false));
        assert_eq!(comp(0.0, -0.4, 1.0, true), (true, true));
        assert_eq!(comp(0.0, -0.6, 1.0, true), (false, false));
        // NaN holds and reports equal; a negative hyst tests "below" first.
        assert_eq!(comp(0.0, f64::NAN, 1.0, true), (true, true));
        assert_eq!(comp(0.0, 0.0, -1.0, true), (false, false));
    }

    #[test]
    fn wcomp_window_edges_nan_and_crossed_bounds() {
        assert_eq!(wcomp(1.5, 1.0, 2.0), (true, false, false));
        assert_eq!(wcomp(1.0, 1.0, 2.0), (false, true, false));
        assert_eq!(wcomp(2.0, 1.0, 2.0), (false, false, true));
        assert_eq!(wcomp(f64::NAN, 1.0, 2.0), (true, false, false));
        assert_eq!(wcomp(1.5, 3.0, 0.0), (false, true, true));
    }

    #[test]
    fn near_by_difference_or_by_ratio_above_one() {
        assert!(near(1.0, 1.0, 1.0, 0.0), "difference 0 includes equality");
        assert!(!near(1.0, 1.0, 1.0, -1.0), "scale 1 is off");
        assert!(near(0.0, 0.1, 1.0, 0.1) && !near(0.0, 0.11, 1.0, 0.1));
        assert!(near(1.0, 2.0, 2.0, 0.0) && near(2.0, 1.0, 2.0, 0.0));
        assert!(!near(1.0, 2.1, 2.0, 0.0) && !near(2.0, 0.99, 2.0, 0.0));
        assert!(near(-2.0, -4.0, 2.0, 0.0) && near(-2.0, -1.0, 2.0, 0.0));
        assert!(!near(-2.0, -4.01, 2.0, 0.0) && !near(-1.0, 1.0, 2.0, 0.0));
        assert!(near(0.0, 0.0, 2.0, -1.0) && !near(0.0, 0.0, 0.5, -1.0));
        assert!(near(0.0, 0.0, 1.0001, -1.0) && !near(0.0, 0.0, f64::NAN, -1.0));
        assert!(!near(2.0, 1.5, 0.5, 0.0), "scale below 1 never matches");
        assert!(near(1.0, f64::INFINITY, f64::INFINITY, 0.0));
        assert!(!near(f64::INFINITY, f64::INFINITY, 1.0, 0.0));
        assert!(near(f64::INFINITY, f64::INFINITY, 2.0, 0.0));
        assert!(!near(0.0, 1.0, f64::INFINITY, 0.0));
        assert!(!near(1.0, f64::NAN, 2.0, 1e30) && !near(f64::NAN, f64::NAN, 2.0, 1e30));
    }

    #[test]
    fn comparators_through_the_hal() {
        let mut h = Harness::new("cat-a-compare").unwrap();
        h.loadrt("comp names=c").unwrap();
        h.loadrt("wcomp").unwrap();
        h.loadrt("near").unwrap();
        h.start().unwrap();
        let f: Vec<&str> = h.functions().collect();
        assert_eq!(f, ["c", "wcomp.0", "near.0"]);
        assert_eq!(h.get_f64("near.0.scale").unwrap(), 1.0);
        assert!(h.declared().params.contains_key("c.hyst"));
        h.step(P);
        assert_eq!(h.get("c.out").unwrap(), Value::Bit(false));
        assert_eq!(h.get("c.equal").unwrap(), Value::Bit(true));
        assert_eq!(h.get("near.0.out").unwrap(), Value::Bit(true));
        // wcomp with min = max = 0 and in = 0: both under and over.
        assert_eq!(h.get("wcomp.0.under").unwrap(), Value::Bit(true));
        assert_eq!(h.get("wcomp.0.over").unwrap(), Value::Bit(true));
        assert_eq!(h.get("wcomp.0.out").unwrap(), Value::Bit(false));
        // The hysteresis state lives across periods; hyst changes mid-run.
        h.set("c.hyst", "1").unwrap();
        h.set("c.in1", "0.6").unwrap();
        h.step(P);
        assert_eq!(h.get("c.out").unwrap(), Value::Bit(true));
        h.set("c.in1", "-0.4").unwrap();
        h.step(P);
        assert_eq!(h.get("c.out").unwrap(), Value::Bit(true));
        assert_eq!(h.get("c.equal").unwrap(), Value::Bit(true));
        h.set("c.hyst", "0.5").unwrap();
        h.step(P);
        assert_eq!(h.get("c.out").unwrap(), Value::Bit(false));
        h.set("near.0.in2", "1.5").unwrap();
        h.set("near.0.in1", "1").unwrap();
        h.step(P);
        assert_eq!(h.get("near.0.out").unwrap(), Value::Bit(false));
        h.set("near.0.scale", "2").unwrap();
        h.step(P);
        assert_eq!(h.get("near.0.out").unwrap(), Value::Bit(true));
    }
}
