//! Selectors and holds, LinuxCNC's names and pins: `mux2`, `mux4`, `mux8`, `sample_hold`.
//!
//! Each instance exports one function named as the instance itself (`mux4.0`; `sample-hold.0`:
//! LinuxCNC names `sample_hold`'s instances with a hyphen).
//!
//! | name                     | kind     | type  | dir | default | meaning                          |
//! |--------------------------|----------|-------|-----|---------|----------------------------------|
//! | `muxK.N.in0`…`in(K−1)`   | pin      | float | IN  | 0       | the candidates (K = 2, 4, 8)     |
//! | `mux2.N.sel`             | pin      | bit   | IN  | FALSE   | FALSE: `in0`, TRUE: `in1`        |
//! | `mux4.N.sel0`, `sel1`    | pin      | bit   | IN  | FALSE   | the binary index, `sel0` least significant |
//! | `mux8.N.sel0`…`sel2`     | pin      | bit   | IN  | FALSE   | the binary index, `sel0` least significant |
//! | `muxK.N.out`             | pin      | float | OUT |         | a copy of the selected input     |
//! | `sample-hold.N.in`       | pin      | s32   | IN  | 0       | the value to track               |
//! | `sample-hold.N.hold`     | pin      | bit   | IN  | FALSE   | TRUE freezes `out`               |
//! | `sample-hold.N.out`      | pin      | s32   | OUT |         | `in` while `hold` is FALSE, else its last value |
//! | `<instance>`             | function |       |     |         | one update                       |
//!
//! A mux copies its input bit for bit (NaN included).

use rtapi_hal::{In, Out};

use super::{Component, LoadContext, LoadError};

/// The index that select bits `sel` (least significant first) form.
pub(crate) fn mux_index(sel: impl IntoIterator<Item = bool>) -> usize {
    sel.into_iter()
        .enumerate()
        .map(|(b, s)| usize::from(s) << b)
        .sum()
}

/// Declares a mux of `2^sel_names.len()` float inputs.
fn mux(ctx: &mut LoadContext<'_>, sel_names: &[&str]) -> Result<(), LoadError> {
    let n = 1usize << sel_names.len();
    let mut sels = Vec::with_capacity(sel_names.len());
    for s in sel_names {
        sels.push(ctx.pin::<In, bool>(s)?);
    }
    let mut ins = Vec::with_capacity(n);
    for i in 0..n {
        ins.push(ctx.pin::<In, f64>(&format!("in{i}"))?);
    }
    let out = ctx.pin::<Out, f64>("out")?;
    ctx.function("", move |hal| {
        let sels: Vec<_> = sels.into_iter().map(|k| hal.pin(k)).collect();
        let ins: Vec<_> = ins.into_iter().map(|k| hal.pin(k)).collect();
        let out = hal.pin(out);
        Box::new(move |_| {
            let index = mux_index(sels.iter().map(|s| s.get()));
            if let Some(input) = ins.get(index) {
                out.set(input.get());
            }
        })
    })
}

/// `mux2`: one of two floats.
pub(crate) struct Mux2;

impl Component for Mux2 {
    const NAME: &'static str = "mux2";
    const SUMMARY: &'static str = "selects one of two floats";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        mux(ctx, &["sel"])
    }
}

/// `mux4`: one of four floats.
pub(crate) struct Mux4;

impl Component for Mux4 {
    const NAME: &'static str = "mux4";
    const SUMMARY: &'static str = "selects one of four floats";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        mux(ctx, &["sel0", "sel1"])
    }
}

/// `mux8`: one of eight floats.
pub(crate) struct Mux8;

impl Component for Mux8 {
    const NAME: &'static str = "mux8";
    const SUMMARY: &'static str = "selects one of eight floats";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        mux(ctx, &["sel0", "sel1", "sel2"])
    }
}

/// `sample_hold`: an s32 that tracks its input unless held.
pub(crate) struct SampleHold;

impl Component for SampleHold {
    const NAME: &'static str = "sample_hold";
    const PREFIX: &'static str = "sample-hold";
    const SUMMARY: &'static str = "s32 sample and hold";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, i32>("in")?;
        let hold = ctx.pin::<In, bool>("hold")?;
        let out = ctx.pin::<Out, i32>("out")?;
        ctx.function("", move |hal| {
            let (input, hold, out) = (hal.pin(input), hal.pin(hold), hal.pin(out));
            Box::new(move |_| {
                if !hold.get() {
                    out.set(input.get());
                }
            })
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
    fn the_index_is_binary_with_sel0_least_significant() {
        assert_eq!(mux_index([]), 0);
        assert_eq!(mux_index([true]), 1);
        assert_eq!(mux_index([false, true]), 2);
        assert_eq!(mux_index([true, false, true]), 5);
        assert_eq!(mux_index([true, true, true]), 7);
    }

    #[test]
    fn each_mux_copies_the_selected_input() {
        let mut h = Harness::new("cat-a-mux").unwrap();
        h.loadrt("mux2").unwrap();
        h.loadrt("mux4").unwrap();
        h.loadrt("mux8 names=m8").unwrap();
        h.start().unwrap();
        let names: Vec<&str> = h.functions().collect();
        assert_eq!(names, ["mux2.0", "mux4.0", "m8"]);
        // Input i of every mux holds 10 + i, so out tells which one was picked.
        for (mux, n) in [("mux2.0", 2), ("mux4.0", 4), ("m8", 8)] {
            for i in 0..n {
                h.set(&format!("{mux}.in{i}"), &format!("{}", 10 + i))
                    .unwrap();
            }
        }
        for sel in 0..2 {
            h.set("mux2.0.sel", &sel.to_string()).unwrap();
            h.step(P);
            assert_eq!(h.get_f64("mux2.0.out").unwrap(), f64::from(10 + sel));
        }
        for sel in 0..4 {
            h.set("mux4.0.sel0", &(sel & 1).to_string()).unwrap();
            h.set("mux4.0.sel1", &(sel >> 1).to_string()).unwrap();
            h.step(P);
            assert_eq!(h.get_f64("mux4.0.out").unwrap(), f64::from(10 + sel));
        }
        for sel in 0..8 {
            for b in 0..3 {
                h.set(&format!("m8.sel{b}"), &((sel >> b) & 1).to_string())
                    .unwrap();
            }
            h.step(P);
            assert_eq!(h.get_f64("m8.out").unwrap(), f64::from(10 + sel));
        }
        // NaN and infinities pass through untouched.
        h.set_forced("mux2.0.in1", "nan").unwrap();
        h.set_forced("mux2.0.in0", "-inf").unwrap();
        h.step(P);
        assert!(h.get_f64("mux2.0.out").unwrap().is_nan());
        h.set("mux2.0.sel", "0").unwrap();
        h.step(P);
        assert_eq!(h.get_f64("mux2.0.out").unwrap(), f64::NEG_INFINITY);
    }

    #[test]
    fn sample_hold_freezes_while_held() {
        let mut h = Harness::new("cat-a-sh").unwrap();
        assert_eq!(
            h.loadrt("sample_hold count=2").unwrap(),
            ["sample-hold.0", "sample-hold.1"]
        );
        h.start().unwrap();
        assert_eq!(h.functions().next(), Some("sample-hold.0"));
        h.set("sample-hold.0.in", "5").unwrap();
        h.step(P);
        assert_eq!(h.get("sample-hold.0.out").unwrap(), Value::S32(5));
        h.set("sample-hold.0.hold", "1").unwrap();
        h.set("sample-hold.0.in", "-7").unwrap();
        h.step(P);
        h.step(P);
        assert_eq!(h.get("sample-hold.0.out").unwrap(), Value::S32(5));
        h.set("sample-hold.0.hold", "0").unwrap();
        h.step(P);
        assert_eq!(h.get("sample-hold.0.out").unwrap(), Value::S32(-7));
        assert_eq!(h.get("sample-hold.1.out").unwrap(), Value::S32(0));
    }
}
