//! Bit logic, LinuxCNC's names and pins: `and2`, `or2`, `xor2`, `not`, `select8`, `demux`.
//!
//! Each instance exports one function named as the instance itself (`and2.0`), as LinuxCNC's
//! halcompile components do. `N` below is the instance (`and2.0`, or a name from `names=`).
//!
//! | name              | kind     | type | dir | default | meaning                                   |
//! |-------------------|----------|------|-----|---------|-------------------------------------------|
//! | `and2.N.in0`, `in1` | pin    | bit  | IN  | FALSE   | inputs                                    |
//! | `and2.N.out`      | pin      | bit  | OUT |         | `in0 AND in1`                             |
//! | `or2.N.in0`, `in1` | pin     | bit  | IN  | FALSE   | inputs                                    |
//! | `or2.N.out`       | pin      | bit  | OUT |         | `in0 OR in1`                              |
//! | `xor2.N.in0`, `in1` | pin    | bit  | IN  | FALSE   | inputs                                    |
//! | `xor2.N.out`      | pin      | bit  | OUT |         | TRUE when exactly one input is TRUE       |
//! | `not.N.in`        | pin      | bit  | IN  | FALSE   | input                                     |
//! | `not.N.out`       | pin      | bit  | OUT |         | `NOT in`                                  |
//! | `select8.N.sel`   | pin      | s32  | IN  | 0       | which output to raise, 0…7                |
//! | `select8.N.enable` | pin     | bit  | IN  | TRUE    | FALSE lowers every output                 |
//! | `select8.N.out0`…`out7` | pin | bit | OUT |         | `outM` is TRUE iff enabled and `sel == M` (none for `sel` outside 0…7) |
//! | `demux.N.sel-bit-00`…`04` | pin | bit | IN | FALSE  | a binary number, bit 00 the least significant |
//! | `demux.N.sel-u32` | pin      | u32  | IN  | 0       | added to the binary number: the selection |
//! | `demux.N.out-00`… | pin      | bit  | OUT |         | `personality` outputs (default 32, at most 32) |
//! | `demux.N.time`    | pin      | s32  | OUT |         | see below                                 |
//! | `demux.N.bargraph` | param   | bit  | RW  | FALSE   | FALSE: only output `sel` is TRUE; TRUE: every output below `sel` is |
//! | `<instance>`      | function |      |     |         | one update                                |
//!
//! `demux` takes `loadrt demux personality=P[,P…]`: the number of outputs of each instance (0…32, as
//! LinuxCNC accepts). The selection is `sel-u32` plus the bit number, as LinuxCNC computes it (checked
//! in halrun): the sum wraps around 2³² and is then read as an s32, so `sel-u32` ≥ 0x80000000 selects
//! nothing (a negative selection), while a selection past the last output selects the last one. In
//! bargraph mode the outputs `out-MM` with `MM < selection` are TRUE, so selection 0 lights nothing and
//! 3 lights `out-00`…`out-02`. `demux.N.time` (LinuxCNC lists it too) is the function's execution
//! time, which every function has (see `runtime::health`).

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};

/// The outputs of `select8`: bit `M` set iff `enable` and `sel == M`.
pub(crate) fn select8(sel: i32, enable: bool) -> u8 {
    match u32::try_from(sel) {
        Ok(s) if enable && s < 8 => 1 << s,
        _ => 0,
    }
}

/// `demux`'s selection among `outputs` outputs: `sel_u32 + binary` wrapped to 32 bits and read as
/// signed (negative selects nothing), capped at the last output.
pub(crate) fn demux_selection(sel_u32: u32, binary: u32, outputs: usize) -> i64 {
    let s = i64::from(sel_u32.wrapping_add(binary) as i32);
    let last = outputs as i64 - 1;
    s.min(last)
}

/// Whether `demux` output `index` is TRUE for selection `selection`.
pub(crate) fn demux_out(index: i64, selection: i64, bargraph: bool) -> bool {
    if bargraph {
        index < selection
    } else {
        index == selection
    }
}

/// Most `demux` outputs per instance (LinuxCNC refuses more).
pub(crate) const DEMUX_MAX: usize = 32;

/// Declares a two-input bit gate `out = op(in0, in1)`.
fn gate2(ctx: &mut LoadContext<'_>, op: fn(bool, bool) -> bool) -> Result<(), LoadError> {
    let in0 = ctx.pin::<In, bool>("in0")?;
    let in1 = ctx.pin::<In, bool>("in1")?;
    let out = ctx.pin::<Out, bool>("out")?;
    ctx.function("", move |hal| {
        let (in0, in1, out) = (hal.pin(in0), hal.pin(in1), hal.pin(out));
        Box::new(move |_| out.set(op(in0.get(), in1.get())))
    })
}

/// `and2`: two-input AND.
pub(crate) struct And2;

impl Component for And2 {
    const NAME: &'static str = "and2";
    const SUMMARY: &'static str = "two-input AND gate";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        gate2(ctx, |a, b| a && b)
    }
}

/// `or2`: two-input OR.
pub(crate) struct Or2;

impl Component for Or2 {
    const NAME: &'static str = "or2";
    const SUMMARY: &'static str = "two-input OR gate";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        gate2(ctx, |a, b| a || b)
    }
}

/// `xor2`: two-input exclusive OR.
pub(crate) struct Xor2;

impl Component for Xor2 {
    const NAME: &'static str = "xor2";
    const SUMMARY: &'static str = "two-input XOR gate";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        gate2(ctx, |a, b| a != b)
    }
}

/// `not`: inverter.
pub(crate) struct Not;

impl Component for Not {
    const NAME: &'static str = "not";
    const SUMMARY: &'static str = "inverter";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, bool>("in")?;
        let out = ctx.pin::<Out, bool>("out")?;
        ctx.function("", move |hal| {
            let (input, out) = (hal.pin(input), hal.pin(out));
            Box::new(move |_| out.set(!input.get()))
        })
    }
}

/// `select8`: raises one of eight outputs.
pub(crate) struct Select8;

impl Component for Select8 {
    const NAME: &'static str = "select8";
    const SUMMARY: &'static str = "one of eight outputs TRUE, chosen by an s32";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let enable = ctx.pin_with_default::<In, bool>("enable", true)?;
        let sel = ctx.pin::<In, i32>("sel")?;
        let mut outs = Vec::with_capacity(8);
        for m in 0..8 {
            outs.push(ctx.pin::<Out, bool>(&format!("out{m}"))?);
        }
        ctx.function("", move |hal| {
            let (enable, sel) = (hal.pin(enable), hal.pin(sel));
            let outs: Vec<_> = outs.into_iter().map(|k| hal.pin(k)).collect();
            Box::new(move |_| {
                let bits = select8(sel.get(), enable.get());
                for (m, o) in outs.iter().enumerate() {
                    o.set(bits & (1 << m) != 0);
                }
            })
        })
    }
}

/// `demux`: a selection number to one (or, as a bargraph, several) of up to 32 outputs.
pub(crate) struct Demux;

impl Component for Demux {
    const NAME: &'static str = "demux";
    const SUMMARY: &'static str = "selects one of up to 32 outputs by a binary number plus a u32";
    const ARGS: &'static [&'static str] = &["personality"];
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let n: usize = ctx.arg("personality")?.unwrap_or(DEMUX_MAX);
        if n > DEMUX_MAX {
            return Err(LoadError::new(format!(
                "{}: personality={n}: demux has at most {DEMUX_MAX} outputs",
                ctx.instance()
            )));
        }
        let mut bits = Vec::with_capacity(5);
        for b in 0..5 {
            bits.push(ctx.pin::<In, bool>(&format!("sel-bit-{b:02}"))?);
        }
        let sel_u32 = ctx.pin::<In, u32>("sel-u32")?;
        let mut outs = Vec::with_capacity(n);
        for m in 0..n {
            outs.push(ctx.pin::<Out, bool>(&format!("out-{m:02}"))?);
        }
        let bargraph = ctx.param::<bool>("bargraph", ParamAccess::Rw, false)?;
        ctx.function("", move |hal| {
            let bits: Vec<_> = bits.into_iter().map(|k| hal.pin(k)).collect();
            let outs: Vec<_> = outs.into_iter().map(|k| hal.pin(k)).collect();
            let (sel_u32, bargraph) = (hal.pin(sel_u32), hal.param(bargraph));
            Box::new(move |_| {
                let binary: u32 = bits
                    .iter()
                    .enumerate()
                    .map(|(b, p)| u32::from(p.get()) << b)
                    .sum();
                let selection = demux_selection(sel_u32.get(), binary, outs.len());
                let bargraph = bargraph.get();
                for (m, o) in (0i64..).zip(outs.iter()) {
                    o.set(demux_out(m, selection, bargraph));
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
    fn gates_follow_their_truth_tables() {
        let mut h = Harness::new("cat-a-gates").unwrap();
        h.loadrt("and2").unwrap();
        h.loadrt("or2").unwrap();
        h.loadrt("xor2").unwrap();
        h.loadrt("not").unwrap();
        h.start().unwrap();
        let names: Vec<&str> = h.functions().collect();
        assert_eq!(names, ["and2.0", "or2.0", "xor2.0", "not.0"]);
        for (a, b) in [(false, false), (false, true), (true, false), (true, true)] {
            for g in ["and2.0", "or2.0", "xor2.0"] {
                h.set(&format!("{g}.in0"), if a { "1" } else { "0" })
                    .unwrap();
                h.set(&format!("{g}.in1"), if b { "TRUE" } else { "FALSE" })
                    .unwrap();
            }
            h.set("not.0.in", if a { "1" } else { "0" }).unwrap();
            h.step(P);
            assert_eq!(h.get("and2.0.out").unwrap(), Value::Bit(a && b), "{a} {b}");
            assert_eq!(h.get("or2.0.out").unwrap(), Value::Bit(a || b), "{a} {b}");
            assert_eq!(h.get("xor2.0.out").unwrap(), Value::Bit(a ^ b), "{a} {b}");
            assert_eq!(h.get("not.0.out").unwrap(), Value::Bit(!a), "{a}");
        }
    }

    #[test]
    fn count_and_names_make_separate_gates() {
        let mut h = Harness::new("cat-a-gate-names").unwrap();
        h.loadrt("and2 count=2").unwrap();
        h.loadrt("not names=inv,inv2").unwrap();
        h.start().unwrap();
        let names: Vec<&str> = h.functions().collect();
        assert_eq!(names, ["and2.0", "and2.1", "inv", "inv2"]);
        h.set("and2.1.in0", "1").unwrap();
        h.set("and2.1.in1", "1").unwrap();
        h.set("inv2.in", "1").unwrap();
        h.step(P);
        assert_eq!(h.get("and2.0.out").unwrap(), Value::Bit(false));
        assert_eq!(h.get("and2.1.out").unwrap(), Value::Bit(true));
        assert_eq!(h.get("inv.out").unwrap(), Value::Bit(true));
        assert_eq!(h.get("inv2.out").unwrap(), Value::Bit(false));
    }

    #[test]
    fn select8_raises_one_output_and_none_out_of_range() {
        assert_eq!(select8(0, true), 0b1);
        assert_eq!(select8(7, true), 0b1000_0000);
        assert_eq!(select8(7, false), 0);
        for s in [8, -1, i32::MIN, i32::MAX] {
            assert_eq!(select8(s, true), 0, "{s}");
        }
        let mut h = Harness::new("cat-a-select8").unwrap();
        h.loadrt("select8").unwrap();
        h.start().unwrap();
        assert_eq!(h.get("select8.0.enable").unwrap(), Value::Bit(true));
        let outs = |h: &Harness| -> Vec<bool> {
            (0..8)
                .map(|m| h.get(&format!("select8.0.out{m}")).unwrap() == Value::Bit(true))
                .collect()
        };
        h.set("select8.0.sel", "3").unwrap();
        h.step(P);
        let want: Vec<bool> = (0..8).map(|m| m == 3).collect();
        assert_eq!(outs(&h), want);
        h.set("select8.0.enable", "0").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false; 8]);
        h.set("select8.0.enable", "1").unwrap();
        h.set("select8.0.sel", "8").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false; 8]);
    }

    #[test]
    fn demux_adds_bits_to_the_u32_and_draws_bargraphs() {
        assert!(demux_out(3, 3, false) && !demux_out(2, 3, false));
        assert!(demux_out(2, 3, true) && !demux_out(3, 3, true));
        assert_eq!(demux_selection(3, 4, 32), 7);
        assert_eq!(demux_selection(7, 0, 5), 4, "capped at the last output");
        assert_eq!(demux_selection(31, 22, 32), 31);
        assert_eq!(demux_selection(u32::MAX, 14, 32), 13, "wraps at 2^32");
        assert_eq!(demux_selection(0x8000_0000, 0, 32), -2_147_483_648);
        assert_eq!(demux_selection(u32::MAX, 0, 32), -1);
        assert_eq!(demux_selection(0, 0, 0), -1, "no outputs");
        assert!((0..32).all(|i| !demux_out(i, -1, false) && !demux_out(i, -1, true)));
        let mut h = Harness::new("cat-a-demux").unwrap();
        h.loadrt("demux names=d,e personality=5,32").unwrap();
        h.loadrt("demux").unwrap();
        h.start().unwrap();
        let d = h.declared();
        assert!(d.pins.contains_key("d.out-04") && !d.pins.contains_key("d.out-05"));
        assert!(d.pins.contains_key("e.out-31") && d.pins.contains_key("demux.0.out-31"));
        assert!(d.pins.contains_key("d.sel-bit-04") && d.pins.contains_key("d.time"));
        assert!(d.params.contains_key("d.bargraph"));
        let outs = |h: &Harness| -> Vec<bool> {
            (0..5)
                .map(|m| h.get(&format!("d.out-{m:02}")).unwrap() == Value::Bit(true))
                .collect()
        };
        h.step(P);
        assert_eq!(outs(&h), [true, false, false, false, false]);
        h.set("d.sel-u32", "3").unwrap();
        h.set("d.sel-bit-00", "1").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false, false, false, false, true]);
        h.set("d.sel-bit-00", "0").unwrap();
        h.set("d.sel-bit-01", "1").unwrap(); // 3 + 2 = 5: past the last output, so the last
        h.step(P);
        assert_eq!(outs(&h), [false, false, false, false, true]);
        h.set("d.sel-bit-01", "0").unwrap();
        h.set("d.bargraph", "1").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [true, true, true, false, false]);
        h.set("d.sel-u32", "0").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false; 5]);
        // 32-bit wraparound: 0xffffffff + 3 is 2.
        h.set("d.bargraph", "0").unwrap();
        h.set("d.sel-u32", "0xffffffff").unwrap();
        h.set("d.sel-bit-00", "1").unwrap();
        h.set("d.sel-bit-01", "1").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false, false, true, false, false]);
        // 0xffffffff alone is −1: nothing, in either mode.
        h.set("d.sel-bit-00", "0").unwrap();
        h.set("d.sel-bit-01", "0").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false; 5]);
        h.set("d.bargraph", "1").unwrap();
        h.step(P);
        assert_eq!(outs(&h), [false; 5]);
    }

    #[test]
    fn demux_refuses_bad_personalities() {
        let mut h = Harness::new("cat-a-demux-bad").unwrap();
        for (i, p) in ["33", "x"].iter().enumerate() {
            let e = h
                .loadrt(&format!("demux names=bad{i} personality={p}"))
                .unwrap_err();
            assert!(e.message.contains("personality"), "{e}");
        }
        // LinuxCNC accepts 0: the selection pins and no outputs.
        h.loadrt("demux names=none personality=0").unwrap();
        let d = h.declared();
        assert!(d.pins.contains_key("none.sel-u32") && !d.pins.contains_key("none.out-00"));
    }
}
