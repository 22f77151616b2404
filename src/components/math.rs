//! Float arithmetic, LinuxCNC's names and pins: `scale`, `sum2`, `mult2`, `div2`, `abs`, `deadzone`,
//! `constant`. Each instance exports one function named as the instance itself (`scale.0`).
//!
//! | name                    | kind     | type  | dir | default | meaning                              |
//! |-------------------------|----------|-------|-----|---------|--------------------------------------|
//! | `scale.N.in`            | pin      | float | IN  | 0       | input                                |
//! | `scale.N.gain`          | pin      | float | IN  | 0       | factor (0 by default, as in LinuxCNC) |
//! | `scale.N.offset`        | pin      | float | IN  | 0       | added after the factor               |
//! | `scale.N.out`           | pin      | float | OUT |         | `in × gain + offset`                 |
//! | `sum2.N.in0`, `in1`     | pin      | float | IN  | 0       | inputs                               |
//! | `sum2.N.gain0`, `gain1` | param    | float | RW  | 1.0     | their factors                        |
//! | `sum2.N.offset`         | param    | float | RW  | 0       | added at the end                     |
//! | `sum2.N.out`            | pin      | float | OUT |         | `in0 × gain0 + in1 × gain1 + offset` |
//! | `mult2.N.in0`, `in1`    | pin      | float | IN  | 0       | factors                              |
//! | `mult2.N.out`           | pin      | float | OUT |         | `in0 × in1`                          |
//! | `div2.N.in0`            | pin      | float | IN  | 0       | dividend                             |
//! | `div2.N.in1`            | pin      | float | IN  | 0       | divisor                              |
//! | `div2.N.deadband`       | param    | float | RW  | 0       | smallest divisor magnitude, see below |
//! | `div2.N.out`            | pin      | float | OUT |         | `in0 / in1`                          |
//! | `abs.N.in`              | pin      | float | IN  | 0       | input                                |
//! | `abs.N.out`             | pin      | float | OUT |         | its magnitude                        |
//! | `abs.N.sign`            | pin      | bit   | OUT |         | TRUE unless `in ≥ 0` (so TRUE for NaN) |
//! | `abs.N.is-positive`     | pin      | bit   | OUT |         | `in > 1e-6` (see below)              |
//! | `abs.N.is-negative`     | pin      | bit   | OUT |         | `in < −1e-6`                         |
//! | `deadzone.N.in`         | pin      | float | IN  | 0       | input                                |
//! | `deadzone.N.center`     | param    | float | RW  | 0.0     | middle of the dead zone              |
//! | `deadzone.N.threshold`  | param    | float | RW  | 1.0     | width of the dead zone               |
//! | `deadzone.N.out`        | pin      | float | OUT |         | see below                            |
//! | `constant.N.value`      | param    | float | RW  | 0       | the value                            |
//! | `constant.N.out`        | pin      | float | OUT |         | `value`                              |
//! | `<instance>`            | function |       |     |         | one update                           |
//!
//! Details, as LinuxCNC 2.9's modules do them (checked in halrun):
//!
//! * `div2`: a divisor closer to zero than the dead band is replaced by ±dead band (+ for 0 and −0),
//!   and the dead band is never taken smaller than 1e-12, so `1 / 0` gives 1e12 rather than infinity.
//!   A NaN dead band disables this (`1 / 0` is then infinity). LinuxCNC also prints a message each
//!   time the replacement starts; a real-time function does not log, so here it is silent.
//! * `abs`: `is-positive` and `is-negative` ignore magnitudes up to 1e-6 (LinuxCNC's tolerance), while
//!   `sign` is exact: −1e-9 gives `sign` TRUE and both others FALSE. ±0 give +0 with every bit output
//!   FALSE; NaN gives NaN with `sign` TRUE.
//! * `deadzone`: with `h = threshold / 2`, an input below `center − h` gives `in + h`, otherwise one
//!   above `center + h` gives `in − h`, and anything else (NaN included) gives `center`.

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};

/// The smallest dead band `div2` uses.
pub(crate) const DIV2_MIN_DEADBAND: f64 = 1e-12;

/// `div2`: `num / den`, with `den` pushed out of the dead band.
pub(crate) fn div2(num: f64, den: f64, deadband: f64) -> f64 {
    let db = if deadband < DIV2_MIN_DEADBAND {
        DIV2_MIN_DEADBAND
    } else {
        deadband
    };
    let den = if den >= 0.0 && den < db {
        db
    } else if den < 0.0 && den > -db {
        -db
    } else {
        den
    };
    num / den
}

/// How far from 0 `abs` needs a value to call it positive or negative.
pub(crate) const ABS_TOLERANCE: f64 = 1e-6;

/// `abs`'s outputs: `(out, sign, is_positive, is_negative)`.
pub(crate) fn abs(x: f64) -> (f64, bool, bool, bool) {
    let (out, sign) = if x >= 0.0 {
        (x.abs(), false)
    } else {
        (-x, true)
    };
    (out, sign, x > ABS_TOLERANCE, x < -ABS_TOLERANCE)
}

/// `deadzone`'s rule (see the module docs).
pub(crate) fn deadzone(x: f64, center: f64, threshold: f64) -> f64 {
    let h = threshold / 2.0;
    if x < center - h {
        x + h
    } else if x > center + h {
        x - h
    } else {
        center
    }
}

/// `scale`: `in × gain + offset`.
pub(crate) struct Scale;

impl Component for Scale {
    const NAME: &'static str = "scale";
    const SUMMARY: &'static str = "out = in * gain + offset";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let gain = ctx.pin::<In, f64>("gain")?;
        let offset = ctx.pin::<In, f64>("offset")?;
        let out = ctx.pin::<Out, f64>("out")?;
        ctx.function("", move |hal| {
            let (input, gain, offset, out) =
                (hal.pin(input), hal.pin(gain), hal.pin(offset), hal.pin(out));
            Box::new(move |_| out.set(input.get() * gain.get() + offset.get()))
        })
    }
}

/// `sum2`: weighted sum of two inputs.
pub(crate) struct Sum2;

impl Component for Sum2 {
    const NAME: &'static str = "sum2";
    const SUMMARY: &'static str = "out = in0 * gain0 + in1 * gain1 + offset";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let in0 = ctx.pin::<In, f64>("in0")?;
        let in1 = ctx.pin::<In, f64>("in1")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let gain0 = ctx.param::<f64>("gain0", ParamAccess::Rw, 1.0)?;
        let gain1 = ctx.param::<f64>("gain1", ParamAccess::Rw, 1.0)?;
        let offset = ctx.param::<f64>("offset", ParamAccess::Rw, 0.0)?;
        ctx.function("", move |hal| {
            let (in0, in1, out) = (hal.pin(in0), hal.pin(in1), hal.pin(out));
            let (gain0, gain1, offset) = (hal.param(gain0), hal.param(gain1), hal.param(offset));
            Box::new(move |_| {
                out.set(in0.get() * gain0.get() + in1.get() * gain1.get() + offset.get())
            })
        })
    }
}

/// `mult2`: product of two inputs.
pub(crate) struct Mult2;

impl Component for Mult2 {
    const NAME: &'static str = "mult2";
    const SUMMARY: &'static str = "out = in0 * in1";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let in0 = ctx.pin::<In, f64>("in0")?;
        let in1 = ctx.pin::<In, f64>("in1")?;
        let out = ctx.pin::<Out, f64>("out")?;
        ctx.function("", move |hal| {
            let (in0, in1, out) = (hal.pin(in0), hal.pin(in1), hal.pin(out));
            Box::new(move |_| out.set(in0.get() * in1.get()))
        })
    }
}

/// `div2`: quotient with a divisor dead band.
pub(crate) struct Div2;

impl Component for Div2 {
    const NAME: &'static str = "div2";
    const SUMMARY: &'static str = "out = in0 / in1, the divisor kept out of a dead band around 0";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let in0 = ctx.pin::<In, f64>("in0")?;
        let in1 = ctx.pin::<In, f64>("in1")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let deadband = ctx.param::<f64>("deadband", ParamAccess::Rw, 0.0)?;
        ctx.function("", move |hal| {
            let (in0, in1, out) = (hal.pin(in0), hal.pin(in1), hal.pin(out));
            let deadband = hal.param(deadband);
            Box::new(move |_| out.set(div2(in0.get(), in1.get(), deadband.get())))
        })
    }
}

/// `abs`: magnitude and sign.
pub(crate) struct Abs;

impl Component for Abs {
    const NAME: &'static str = "abs";
    const SUMMARY: &'static str = "absolute value and sign of a float";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let sign = ctx.pin::<Out, bool>("sign")?;
        let is_pos = ctx.pin::<Out, bool>("is-positive")?;
        let is_neg = ctx.pin::<Out, bool>("is-negative")?;
        ctx.function("", move |hal| {
            let (input, out, sign) = (hal.pin(input), hal.pin(out), hal.pin(sign));
            let (is_pos, is_neg) = (hal.pin(is_pos), hal.pin(is_neg));
            Box::new(move |_| {
                let (o, s, p, n) = abs(input.get());
                out.set(o);
                sign.set(s);
                is_pos.set(p);
                is_neg.set(n);
            })
        })
    }
}

/// `deadzone`: zero band around a center.
pub(crate) struct Deadzone;

impl Component for Deadzone {
    const NAME: &'static str = "deadzone";
    const SUMMARY: &'static str = "dead zone around a center value";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, f64>("out")?;
        let center = ctx.param::<f64>("center", ParamAccess::Rw, 0.0)?;
        let threshold = ctx.param::<f64>("threshold", ParamAccess::Rw, 1.0)?;
        ctx.function("", move |hal| {
            let (input, out) = (hal.pin(input), hal.pin(out));
            let (center, threshold) = (hal.param(center), hal.param(threshold));
            Box::new(move |_| out.set(deadzone(input.get(), center.get(), threshold.get())))
        })
    }
}

/// `constant`: a param on a pin.
pub(crate) struct Constant;

impl Component for Constant {
    const NAME: &'static str = "constant";
    const SUMMARY: &'static str = "puts a param's value on an output pin";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let out = ctx.pin::<Out, f64>("out")?;
        let value = ctx.param::<f64>("value", ParamAccess::Rw, 0.0)?;
        ctx.function("", move |hal| {
            let (out, value) = (hal.pin(out), hal.param(value));
            Box::new(move |_| out.set(value.get()))
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
    fn div2_keeps_the_divisor_out_of_the_dead_band() {
        assert_eq!(div2(3.0, 2.0, 1.0), 1.5);
        assert_eq!(div2(3.0, -1.5, 1.0), -2.0);
        assert_eq!(div2(1.0, 0.5, 1.0), 1.0, "0.5 → +deadband");
        assert_eq!(div2(3.0, -0.99, 1.0), -3.0, "−0.99 → −deadband");
        assert_eq!(div2(3.0, -0.0, 1.0), 3.0, "−0 counts as positive");
        // The floor of 1e-12, also for negative dead bands.
        assert_eq!(div2(1.0, 0.0, 0.0), 1e12);
        assert_eq!(div2(-1.0, 0.0, 0.0), -1e12);
        assert_eq!(div2(3.0, -1e-13, 0.0), -3e12);
        assert_eq!(div2(3.0, 0.0, -1.0), 3e12);
        assert_eq!(div2(0.0, 0.0, 0.0), 0.0);
        assert_eq!(div2(3.0, 2e-12, 0.0), 1.5e12);
        // NaN: a NaN divisor or dividend gives NaN; a NaN dead band disables the band.
        assert!(div2(3.0, f64::NAN, 1.0).is_nan());
        assert!(div2(f64::NAN, 2.0, 0.0).is_nan());
        assert_eq!(div2(3.0, 0.0, f64::NAN), f64::INFINITY);
        assert_eq!(div2(3.0, 0.5, f64::NAN), 6.0);
        assert_eq!(div2(3.0, f64::INFINITY, 0.0), 0.0);
    }

    #[test]
    fn abs_gives_magnitude_and_flags() {
        assert_eq!(abs(-2.0), (2.0, true, false, true));
        assert_eq!(abs(2.0), (2.0, false, true, false));
        for z in [0.0, -0.0] {
            let (o, s, p, n) = abs(z);
            assert!(o == 0.0 && o.is_sign_positive() && !s && !p && !n, "{z}");
        }
        let (o, s, p, n) = abs(f64::NAN);
        assert!(o.is_nan() && s && !p && !n);
        assert_eq!(abs(f64::NEG_INFINITY).0, f64::INFINITY);
        // The flags have a ±1e-6 tolerance (limit excluded); sign has none.
        assert_eq!(abs(1e-6), (1e-6, false, false, false));
        assert_eq!(abs(1.000001e-6), (1.000001e-6, false, true, false));
        assert_eq!(abs(-1e-9), (1e-9, true, false, false));
        assert_eq!(abs(-1.000001e-6), (1.000001e-6, true, false, true));
    }

    #[test]
    fn deadzone_shifts_outside_and_holds_center_inside() {
        assert_eq!(deadzone(0.4, 0.0, 1.0), 0.0);
        assert_eq!(deadzone(0.5, 0.0, 1.0), 0.0, "the edge is inside");
        assert!((deadzone(0.7, 0.0, 1.0) - 0.2).abs() < 1e-12);
        assert!((deadzone(-0.7, 0.0, 1.0) + 0.2).abs() < 1e-12);
        // The shift is by half the threshold, not to the center.
        assert!((deadzone(1.7, 1.0, 1.0) - 1.2).abs() < 1e-12);
        assert!((deadzone(0.2, 1.0, 1.0) - 0.7).abs() < 1e-12);
        assert_eq!(deadzone(1.2, 1.0, 1.0), 1.0);
        assert_eq!(deadzone(f64::NAN, 1.0, 1.0), 1.0);
        // A negative threshold: the "below" test comes first.
        assert!((deadzone(1.2, 1.0, -1.0) - 0.7).abs() < 1e-12);
        assert!((deadzone(1.7, 1.0, -1.0) - 2.2).abs() < 1e-12);
    }

    #[test]
    fn arithmetic_through_the_hal() {
        let mut h = Harness::new("cat-a-math").unwrap();
        for c in [
            "scale",
            "sum2",
            "mult2",
            "div2",
            "abs",
            "deadzone",
            "constant count=2",
        ] {
            h.loadrt(c).unwrap();
        }
        h.start().unwrap();
        let f: Vec<&str> = h.functions().collect();
        assert_eq!(
            f,
            [
                "scale.0",
                "sum2.0",
                "mult2.0",
                "div2.0",
                "abs.0",
                "deadzone.0",
                "constant.0",
                "constant.1"
            ]
        );
        let d = h.declared();
        for p in [
            "sum2.0.gain0",
            "sum2.0.offset",
            "div2.0.deadband",
            "deadzone.0.threshold",
            "constant.0.value",
        ] {
            assert!(d.params.contains_key(p), "{p} is a param");
        }
        assert_eq!(h.get_f64("sum2.0.gain1").unwrap(), 1.0);
        assert_eq!(h.get_f64("deadzone.0.threshold").unwrap(), 1.0);
        h.set("scale.0.in", "2").unwrap();
        h.step(P);
        assert_eq!(h.get_f64("scale.0.out").unwrap(), 0.0, "gain defaults to 0");
        h.set("scale.0.gain", "3").unwrap();
        h.set("scale.0.offset", "0.5").unwrap();
        h.set("sum2.0.in0", "1").unwrap();
        h.set("sum2.0.in1", "2").unwrap();
        h.set("sum2.0.gain0", "3").unwrap();
        h.set("sum2.0.offset", "0.5").unwrap();
        h.set("mult2.0.in0", "-1.5").unwrap();
        h.set("mult2.0.in1", "4").unwrap();
        h.set("div2.0.in0", "3").unwrap();
        h.set("div2.0.in1", "0").unwrap();
        h.set("div2.0.deadband", "1").unwrap();
        h.set("abs.0.in", "-2.5").unwrap();
        h.set("deadzone.0.in", "0.7").unwrap();
        h.set("constant.1.value", "3.5").unwrap();
        h.step(P);
        assert_eq!(h.get_f64("scale.0.out").unwrap(), 6.5);
        assert_eq!(h.get_f64("sum2.0.out").unwrap(), 5.5);
        assert_eq!(h.get_f64("mult2.0.out").unwrap(), -6.0);
        assert_eq!(h.get_f64("div2.0.out").unwrap(), 3.0);
        assert_eq!(h.get_f64("abs.0.out").unwrap(), 2.5);
        assert_eq!(h.get("abs.0.sign").unwrap(), Value::Bit(true));
        assert_eq!(h.get("abs.0.is-negative").unwrap(), Value::Bit(true));
        assert!((h.get_f64("deadzone.0.out").unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(h.get_f64("constant.0.out").unwrap(), 0.0);
        assert_eq!(h.get_f64("constant.1.out").unwrap(), 3.5);
        // Params changed mid-run act on the next period.
        h.set("div2.0.deadband", "0").unwrap();
        h.set("constant.1.value", "-1").unwrap();
        h.step(P);
        assert_eq!(h.get_f64("div2.0.out").unwrap(), 3e12);
        assert_eq!(h.get_f64("constant.1.out").unwrap(), -1.0);
        h.set_forced("mult2.0.in1", "inf").unwrap();
        h.set("mult2.0.in0", "0").unwrap();
        h.step(P);
        assert!(h.get_f64("mult2.0.out").unwrap().is_nan(), "0 × inf");
    }
}
