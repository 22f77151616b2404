//! `finite`: TRUE while a float is a number (not NaN, not ±∞) — rtapi's own, for safety chains.
//!
//! LinuxCNC's comparators let a NaN through (`wcomp`'s `out` is TRUE for NaN, as in LinuxCNC 2.9), so
//! a NaN on a float signal — a gain set to NaN, a division by zero upstream — would not drop an enable
//! chain built from them. Put `finite` on the signals that matter and AND its `out` into the chain.
//!
//! | name              | kind     | type  | dir | meaning                                      |
//! |-------------------|----------|-------|-----|----------------------------------------------|
//! | `finite.N.in`     | pin      | float | IN  | the value checked                            |
//! | `finite.N.out`    | pin      | bit   | OUT | TRUE while `in` is finite                    |
//! | `finite.N.count`  | pin      | u32   | OUT | periods `in` was not finite, in all          |
//! | `finite.N`        | function |       |     | checks `in` (any thread)                     |

use rtapi_hal::{In, Out};

use super::{Component, LoadContext, LoadError};

/// See the module docs.
pub(crate) struct Finite;

impl Component for Finite {
    const NAME: &'static str = "finite";
    const SUMMARY: &'static str = "TRUE while a float is finite (not NaN or infinite)";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, f64>("in")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let count = ctx.pin::<Out, u32>("count")?;
        ctx.function("", move |hal| {
            let (input, out, count) = (hal.pin(input), hal.pin(out), hal.pin(count));
            let mut bad = 0u32;
            Box::new(move |_| {
                let ok = input.get().is_finite();
                if !ok {
                    bad = bad.saturating_add(1);
                    count.set(bad);
                }
                out.set(ok);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::components::Harness;

    #[test]
    fn nan_and_infinities_are_not_finite_and_are_counted() {
        let mut h = Harness::new(&format!("finite-{}", std::process::id())).unwrap();
        h.loadrt("finite names=check").unwrap();
        h.start().unwrap();
        assert_eq!(h.functions().collect::<Vec<_>>(), ["check"]);
        let mut seen = Vec::new();
        for v in ["1.5", "nan", "inf", "-inf", "-1e300", "0"] {
            h.set_forced("check.in", v).unwrap();
            h.step(1_000_000);
            seen.push((
                h.get_f64("check.out").unwrap(),
                h.get_f64("check.count").unwrap(),
            ));
        }
        assert_eq!(
            seen,
            [
                (1.0, 0.0),
                (0.0, 1.0),
                (0.0, 2.0),
                (0.0, 3.0),
                (1.0, 3.0),
                (1.0, 3.0)
            ]
        );
    }
}
