//! Type conversions, LinuxCNC's ten `conv_*`: `loadrt conv_float_s32` makes instance
//! `conv-float-s32.0` (hyphens, as in LinuxCNC), whose one function is named as the instance.
//!
//! | name                   | kind     | type   | dir | default | meaning                                   |
//! |------------------------|----------|--------|-----|---------|-------------------------------------------|
//! | `conv-A-B.N.in`        | pin      | A      | IN  | 0       | the value to convert                      |
//! | `conv-A-B.N.out`       | pin      | B      | OUT |         | the converted value                       |
//! | `conv-A-B.N.out-of-range` | pin   | bit    | OUT |         | see below (only conversions that can overflow) |
//! | `conv-A-B.N.clamp`     | param    | bit    | RW  | FALSE   | TRUE: clamp to B's range; FALSE: wrap     |
//! | `conv-A-B.N`           | function |        |     |         | one conversion                            |
//!
//! The ten: `conv_bit_s32`, `conv_bit_u32`, `conv_s32_float`, `conv_u32_float` (always exact, so no
//! `out-of-range` or `clamp`), and `conv_float_s32`, `conv_float_u32`, `conv_s32_bit`, `conv_s32_u32`,
//! `conv_u32_bit`, `conv_u32_s32`, which behave as LinuxCNC 2.9's on x86-64 (checked by running its
//! modules in halrun), quirks included:
//!
//! * **clamp TRUE:** an input above the maximum gives the maximum, one below the minimum the minimum,
//!   both with `out-of-range` TRUE; anything else converts normally and clears `out-of-range`. NaN is
//!   neither above nor below, so it converts (see the next point) with `out-of-range` FALSE. The
//!   maximum of `conv_float_u32` is **2147483647**, not 4294967295, as in LinuxCNC; `conv_s32_bit`
//!   and `conv_u32_bit` clamp to 0…1.
//! * **clamp FALSE:** the value wraps: float→s32 truncates toward zero, and any value outside the s32
//!   range (NaN and infinities too) gives −2147483648; float→u32 truncates through a 64-bit integer and
//!   keeps its low 32 bits (−1 → 4294967295, 5e9 → 705032704; NaN, infinities and |x| ≥ 2⁶³ give 0);
//!   s32↔u32 reinterpret the bits; s32/u32→bit is `in != 0`. `out-of-range` is then set TRUE when the
//!   output does not equal the input (fractions included: 2.5 → 2 sets it) and **stays TRUE** until
//!   a clamped conversion clears it. As in LinuxCNC's C comparison of a signed with an unsigned
//!   integer, s32→u32 and u32→s32 never set it.

use rtapi_hal::{HalType, In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};

/// float → s32 as an x86-64 `cvttsd2si`: truncation, and −2³¹ for NaN and anything out of range.
pub(crate) fn float_to_s32(x: f64) -> i32 {
    if x > -2_147_483_649.0 && x < 2_147_483_648.0 {
        x as i32
    } else {
        i32::MIN
    }
}

/// float → u32 as C on x86-64: truncation to a 64-bit integer (2⁶³'s bit pattern, low half 0, for
/// NaN and anything out of its range), then its low 32 bits.
pub(crate) fn float_to_u32(x: f64) -> u32 {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
        (x as i64) as u32
    } else {
        0
    }
}

/// A conversion that can overflow: its wrap, its clamp limits and its "differs" test.
pub(crate) struct Checked<I, O> {
    /// The conversion without clamping.
    pub(crate) wrap: fn(I) -> O,
    /// Whether the input is above the clamp maximum, and that maximum.
    pub(crate) above: fn(I) -> bool,
    pub(crate) max: O,
    /// Whether the input is below the clamp minimum (never, for a u32 input), and that minimum.
    pub(crate) below: fn(I) -> bool,
    pub(crate) min: O,
    /// Whether the wrapped output differs from the input (sets `out-of-range` when not clamping).
    pub(crate) differs: fn(I, O) -> bool,
}

impl<I: Copy, O: Copy> Checked<I, O> {
    /// One conversion: the output and the new `out-of-range` (given its previous value).
    pub(crate) fn convert(&self, input: I, clamp: bool, out_of_range: bool) -> (O, bool) {
        if clamp {
            if (self.above)(input) {
                (self.max, true)
            } else if (self.below)(input) {
                (self.min, true)
            } else {
                ((self.wrap)(input), false)
            }
        } else {
            let out = (self.wrap)(input);
            (out, out_of_range || (self.differs)(input, out))
        }
    }
}

pub(crate) const FLOAT_S32: Checked<f64, i32> = Checked {
    wrap: float_to_s32,
    above: |x| x > 2_147_483_647.0,
    max: i32::MAX,
    below: |x| x < -2_147_483_648.0,
    min: i32::MIN,
    differs: |x, o| f64::from(o) != x,
};

pub(crate) const FLOAT_U32: Checked<f64, u32> = Checked {
    wrap: float_to_u32,
    // LinuxCNC's limit, not u32::MAX.
    above: |x| x > 2_147_483_647.0,
    max: 2_147_483_647,
    below: |x| x < 0.0,
    min: 0,
    differs: |x, o| f64::from(o) != x,
};

pub(crate) const S32_BIT: Checked<i32, bool> = Checked {
    wrap: |x| x != 0,
    above: |x| x > 1,
    max: true,
    below: |x| x < 0,
    min: false,
    differs: |x, o| i32::from(o) != x,
};

pub(crate) const S32_U32: Checked<i32, u32> = Checked {
    wrap: |x| x as u32,
    above: |_| false,
    max: u32::MAX,
    below: |x| x < 0,
    min: 0,
    // C compares an int with an unsigned int as unsigned: the bits always match.
    differs: |_, _| false,
};

pub(crate) const U32_BIT: Checked<u32, bool> = Checked {
    wrap: |x| x != 0,
    above: |x| x > 1,
    max: true,
    below: |_| false,
    min: false,
    differs: |x, o| u32::from(o) != x,
};

pub(crate) const U32_S32: Checked<u32, i32> = Checked {
    wrap: |x| x as i32,
    above: |x| x > 2_147_483_647,
    max: i32::MAX,
    below: |_| false,
    min: 0,
    differs: |_, _| false,
};

/// Declares a conversion with `out-of-range` and `clamp`.
fn load_checked<I: HalType, O: HalType>(
    ctx: &mut LoadContext<'_>,
    conv: &'static Checked<I, O>,
) -> Result<(), LoadError> {
    let input = ctx.pin::<In, I>("in")?;
    let out = ctx.pin::<Out, O>("out")?;
    let oor = ctx.pin::<Out, bool>("out-of-range")?;
    let clamp = ctx.param::<bool>("clamp", ParamAccess::Rw, false)?;
    ctx.function("", move |hal| {
        let (input, out, oor, clamp) =
            (hal.pin(input), hal.pin(out), hal.pin(oor), hal.param(clamp));
        Box::new(move |_| {
            let (o, range) = conv.convert(input.get(), clamp.get(), oor.get());
            out.set(o);
            oor.set(range);
        })
    })
}

/// Declares an exact conversion (no `out-of-range`, no `clamp`).
fn load_plain<I: HalType, O: HalType>(
    ctx: &mut LoadContext<'_>,
    conv: fn(I) -> O,
) -> Result<(), LoadError> {
    let input = ctx.pin::<In, I>("in")?;
    let out = ctx.pin::<Out, O>("out")?;
    ctx.function("", move |hal| {
        let (input, out) = (hal.pin(input), hal.pin(out));
        Box::new(move |_| out.set(conv(input.get())))
    })
}

macro_rules! conv {
    ($ty:ident, $name:literal, $prefix:literal, $summary:literal, checked $conv:ident) => {
        #[doc = concat!("`", $name, "`: ", $summary, ".")]
        pub(crate) struct $ty;
        impl Component for $ty {
            const NAME: &'static str = $name;
            const PREFIX: &'static str = $prefix;
            const SUMMARY: &'static str = $summary;
            fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
                load_checked(ctx, &$conv)
            }
        }
    };
    ($ty:ident, $name:literal, $prefix:literal, $summary:literal, plain $conv:expr) => {
        #[doc = concat!("`", $name, "`: ", $summary, ".")]
        pub(crate) struct $ty;
        impl Component for $ty {
            const NAME: &'static str = $name;
            const PREFIX: &'static str = $prefix;
            const SUMMARY: &'static str = $summary;
            fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
                load_plain(ctx, $conv)
            }
        }
    };
}

conv!(ConvBitS32, "conv_bit_s32", "conv-bit-s32", "converts bit to s32", plain |b: bool| i32::from(b));
conv!(ConvBitU32, "conv_bit_u32", "conv-bit-u32", "converts bit to u32", plain |b: bool| u32::from(b));
conv!(ConvS32Float, "conv_s32_float", "conv-s32-float", "converts s32 to float", plain |x: i32| f64::from(x));
conv!(ConvU32Float, "conv_u32_float", "conv-u32-float", "converts u32 to float", plain |x: u32| f64::from(x));
conv!(ConvFloatS32, "conv_float_s32", "conv-float-s32", "converts float to s32", checked FLOAT_S32);
conv!(ConvFloatU32, "conv_float_u32", "conv-float-u32", "converts float to u32", checked FLOAT_U32);
conv!(ConvS32Bit, "conv_s32_bit", "conv-s32-bit", "converts s32 to bit", checked S32_BIT);
conv!(ConvS32U32, "conv_s32_u32", "conv-s32-u32", "converts s32 to u32", checked S32_U32);
conv!(ConvU32Bit, "conv_u32_bit", "conv-u32-bit", "converts u32 to bit", checked U32_BIT);
conv!(ConvU32S32, "conv_u32_s32", "conv-u32-s32", "converts u32 to s32", checked U32_S32);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::Harness;
    use rtapi_hal::Value;

    const P: u64 = 1_000_000;

    #[test]
    fn float_to_s32_truncates_and_overflows_like_cvttsd2si() {
        assert_eq!(float_to_s32(2.7), 2);
        assert_eq!(float_to_s32(-2.7), -2);
        assert_eq!(float_to_s32(2_147_483_647.5), i32::MAX);
        assert_eq!(float_to_s32(-2_147_483_648.5), i32::MIN);
        for x in [2_147_483_648.0, 3e9, -3e9, 1e300, f64::NAN, f64::INFINITY] {
            assert_eq!(float_to_s32(x), i32::MIN, "{x}");
        }
    }

    #[test]
    fn float_to_u32_keeps_the_low_half_of_an_i64() {
        assert_eq!(float_to_u32(2.7), 2);
        assert_eq!(float_to_u32(-0.5), 0);
        assert_eq!(float_to_u32(-1.0), u32::MAX);
        // 5e9 − 2³² and −3e9 + 2³².
        assert_eq!(float_to_u32(5e9), 705_032_704);
        assert_eq!(float_to_u32(-3e9), 1_294_967_296);
        for x in [
            9.3e18,
            -1e20,
            1e20,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(float_to_u32(x), 0, "{x}");
        }
    }

    #[test]
    fn clamping_sets_and_clears_out_of_range() {
        assert_eq!(FLOAT_S32.convert(3e9, true, false), (i32::MAX, true));
        assert_eq!(FLOAT_S32.convert(-3e9, true, false), (i32::MIN, true));
        assert_eq!(
            FLOAT_S32.convert(f64::INFINITY, true, false),
            (i32::MAX, true)
        );
        assert_eq!(FLOAT_S32.convert(2.7, true, true), (2, false));
        assert_eq!(FLOAT_S32.convert(f64::NAN, true, true), (i32::MIN, false));
        assert_eq!(FLOAT_U32.convert(3e9, true, false), (2_147_483_647, true));
        assert_eq!(
            FLOAT_U32.convert(2_147_483_647.0, true, true),
            (2_147_483_647, false)
        );
        assert_eq!(FLOAT_U32.convert(-1.0, true, false), (0, true));
        assert_eq!(FLOAT_U32.convert(f64::NAN, true, true), (0, false));
        assert_eq!(S32_BIT.convert(2, true, false), (true, true));
        assert_eq!(S32_BIT.convert(-1, true, false), (false, true));
        assert_eq!(S32_BIT.convert(1, true, true), (true, false));
        assert_eq!(S32_U32.convert(-1, true, false), (0, true));
        assert_eq!(U32_BIT.convert(2, true, false), (true, true));
        assert_eq!(U32_S32.convert(u32::MAX, true, false), (i32::MAX, true));
        assert_eq!(U32_S32.convert(5, true, true), (5, false));
    }

    #[test]
    fn wrapping_sets_out_of_range_for_good() {
        assert_eq!(FLOAT_S32.convert(2.0, false, false), (2, false));
        assert_eq!(FLOAT_S32.convert(2.5, false, false), (2, true));
        assert_eq!(FLOAT_S32.convert(2.0, false, true), (2, true), "sticky");
        assert_eq!(FLOAT_S32.convert(f64::NAN, false, false), (i32::MIN, true));
        assert_eq!(FLOAT_U32.convert(-1.0, false, false), (u32::MAX, true));
        assert_eq!(S32_BIT.convert(2, false, false), (true, true));
        assert_eq!(S32_BIT.convert(1, false, false), (true, false));
        assert_eq!(U32_BIT.convert(3, false, false), (true, true));
        // The sign reinterpretations never report (LinuxCNC's unsigned comparison).
        assert_eq!(S32_U32.convert(-1, false, false), (u32::MAX, false));
        assert_eq!(
            U32_S32.convert(0x8000_0000, false, false),
            (i32::MIN, false)
        );
    }

    #[test]
    fn all_ten_load_with_linuxcnc_names() {
        let mut h = Harness::new("cat-a-conv-names").unwrap();
        let all = [
            ("conv_bit_s32", false),
            ("conv_bit_u32", false),
            ("conv_float_s32", true),
            ("conv_float_u32", true),
            ("conv_s32_bit", true),
            ("conv_s32_float", false),
            ("conv_s32_u32", true),
            ("conv_u32_bit", true),
            ("conv_u32_float", false),
            ("conv_u32_s32", true),
        ];
        for (name, _) in all {
            h.loadrt(&format!("{name} count=2")).unwrap();
        }
        h.start().unwrap();
        let d = h.declared();
        for (name, checked) in all {
            let inst = format!("{}.1", name.replace('_', "-"));
            assert!(d.functions.contains_key(&inst), "{inst}");
            assert!(d.pins.contains_key(&format!("{inst}.in")), "{inst}");
            assert!(d.pins.contains_key(&format!("{inst}.out")), "{inst}");
            assert_eq!(
                d.pins.contains_key(&format!("{inst}.out-of-range")),
                checked
            );
            assert_eq!(d.params.contains_key(&format!("{inst}.clamp")), checked);
        }
    }

    #[test]
    fn conversions_run_through_the_hal() {
        let mut h = Harness::new("cat-a-conv-run").unwrap();
        for name in [
            "conv_bit_s32",
            "conv_bit_u32",
            "conv_s32_float",
            "conv_u32_float",
            "conv_float_s32",
            "conv_float_u32",
            "conv_s32_u32 names=su",
        ] {
            h.loadrt(name).unwrap();
        }
        h.start().unwrap();
        h.set("conv-bit-s32.0.in", "1").unwrap();
        h.set("conv-bit-u32.0.in", "1").unwrap();
        h.set("conv-s32-float.0.in", "-2147483648").unwrap();
        h.set("conv-u32-float.0.in", "0xffffffff").unwrap();
        h.set("conv-float-s32.0.in", "-2.7").unwrap();
        h.set("conv-float-u32.0.in", "5e9").unwrap();
        h.set("su.in", "-1").unwrap();
        h.step(P);
        assert_eq!(h.get("conv-bit-s32.0.out").unwrap(), Value::S32(1));
        assert_eq!(h.get("conv-bit-u32.0.out").unwrap(), Value::U32(1));
        assert_eq!(h.get_f64("conv-s32-float.0.out").unwrap(), -2_147_483_648.0);
        assert_eq!(h.get_f64("conv-u32-float.0.out").unwrap(), 4_294_967_295.0);
        assert_eq!(h.get("conv-float-s32.0.out").unwrap(), Value::S32(-2));
        assert_eq!(
            h.get("conv-float-s32.0.out-of-range").unwrap(),
            Value::Bit(true)
        );
        assert_eq!(
            h.get("conv-float-u32.0.out").unwrap(),
            Value::U32(705_032_704)
        );
        assert_eq!(h.get("su.out").unwrap(), Value::U32(u32::MAX));
        assert_eq!(h.get("su.out-of-range").unwrap(), Value::Bit(false));
        // Switching clamp on mid-run: the next conversion clamps and decides out-of-range afresh.
        h.set("conv-float-s32.0.in", "2").unwrap();
        h.step(P);
        assert_eq!(
            h.get("conv-float-s32.0.out-of-range").unwrap(),
            Value::Bit(true)
        );
        h.set("conv-float-s32.0.clamp", "1").unwrap();
        h.step(P);
        assert_eq!(
            h.get("conv-float-s32.0.out-of-range").unwrap(),
            Value::Bit(false)
        );
        h.set_forced("conv-float-s32.0.in", "inf").unwrap();
        h.step(P);
        assert_eq!(h.get("conv-float-s32.0.out").unwrap(), Value::S32(i32::MAX));
        assert_eq!(
            h.get("conv-float-s32.0.out-of-range").unwrap(),
            Value::Bit(true)
        );
        h.set("su.clamp", "1").unwrap();
        h.step(P);
        assert_eq!(h.get("su.out").unwrap(), Value::U32(0));
        assert_eq!(h.get("su.out-of-range").unwrap(), Value::Bit(true));
    }
}
