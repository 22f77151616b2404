//! Counting components, as in LinuxCNC: `debounce` and `updown`.
//!
//! Names, types, defaults and functions are LinuxCNC 2.9's. Where the man pages say little, the
//! behaviour was measured period by period on LinuxCNC's own modules in `halrun` (`streamer` → module
//! → `sampler`); the tests replay those records. Both count periods, not time.
//!
//! # `debounce` (`loadrt debounce cfg=S0[,S1…]`)
//!
//! `cfg=` makes one **group** per value, `debounce.0`, `debounce.1`, …, with that many filters each
//! (1 … 64); there is no `count=`/`names=`. All filters of a group share its `delay`. Each filter has a
//! counter: in a period where `in` is TRUE it goes up by one if below `delay`, else `out` goes TRUE;
//! where `in` is FALSE it goes down by one if above 0, else `out` goes FALSE. So `out` follows a
//! steady input `delay` + 1 periods later (as measured: LinuxCNC's man page says `delay` periods),
//! and at once with `delay` 0. A negative `delay` is set to 1, as LinuxCNC does.
//!
//! | name                 | kind     | type | dir | default | meaning                                 |
//! |----------------------|----------|------|-----|---------|-----------------------------------------|
//! | `debounce.G.F.in`    | pin      | bit  | IN  | FALSE   | input of filter F of group G            |
//! | `debounce.G.F.out`   | pin      | bit  | OUT | FALSE   | its debounced output                    |
//! | `debounce.G.delay`   | param    | s32  | RW  | 5       | periods of filtering for the group      |
//! | `debounce.G`         | function |      |     |         | one step of every filter of the group   |
//!
//! # `updown` (`loadrt updown [count=N|names=…]`)
//!
//! An up/down counter: each rising edge of `countup` adds one, of `countdown` takes one (both in one
//! period cancel). While `reset` is TRUE the count is 0 and edges are not counted (LinuxCNC's man page
//! says a rising edge; the module resets on the level). Then, with `wrap`, a count above `max` becomes
//! `min` and one below `min` becomes `max`; else with `clamp` it is held within `min`…`max`; the limits
//! apply every period, so a count of 0 outside them moves at once. Inputs that are TRUE in the first
//! period are not edges.
//!
//! | name                 | kind     | type | dir | default    | meaning                              |
//! |----------------------|----------|------|-----|------------|--------------------------------------|
//! | `updown.N.countup`   | pin      | bit  | IN  | FALSE      | a rising edge counts up              |
//! | `updown.N.countdown` | pin      | bit  | IN  | FALSE      | a rising edge counts down            |
//! | `updown.N.reset`     | pin      | bit  | IN  | FALSE      | TRUE holds the count at 0            |
//! | `updown.N.count`     | pin      | s32  | OUT | 0          | the count                            |
//! | `updown.N.clamp`     | param    | bit  | RW  | FALSE      | hold the count within min … max      |
//! | `updown.N.wrap`      | param    | bit  | RW  | FALSE      | wrap around min … max (beats clamp)  |
//! | `updown.N.max`       | param    | s32  | RW  | 2147483647 | upper limit                          |
//! | `updown.N.min`       | param    | s32  | RW  | 0          | lower limit                          |
//! | `updown.N`           | function |      |     |            | one step                             |

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};

/// The most filters in one `debounce` group.
pub(crate) const DEBOUNCE_MAX_FILTERS: usize = 64;

/// One debounce filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Debounce {
    count: i32,
    /// The output.
    pub(crate) out: bool,
}

impl Debounce {
    /// The usable delay for a param value (LinuxCNC sets a negative one to 1).
    pub(crate) fn sane_delay(delay: i32) -> i32 {
        if delay < 0 {
            1
        } else {
            delay
        }
    }

    /// One period; returns `out`.
    pub(crate) fn step(&mut self, input: bool, delay: i32) -> bool {
        if input {
            if self.count < delay {
                self.count += 1;
            } else {
                self.out = true;
            }
        } else if self.count > 0 {
            self.count -= 1;
        } else {
            self.out = false;
        }
        self.out
    }
}

/// The `debounce` component: one instance per filter group.
pub(crate) struct DebounceComp;

impl Component for DebounceComp {
    const NAME: &'static str = "debounce";
    const SUMMARY: &'static str = "debounce filters for noisy bit inputs, in groups (cfg=2,3)";
    const ARGS: &'static [&'static str] = &["cfg"];
    const INSTANCES_ARG: Option<&'static str> = Some("cfg");

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let size: usize = ctx.arg("cfg")?.unwrap_or(0);
        if !(1..=DEBOUNCE_MAX_FILTERS).contains(&size) {
            return Err(LoadError::new(format!(
                "{}: cfg= gives {size} filters; a group has 1..{DEBOUNCE_MAX_FILTERS}",
                ctx.instance()
            )));
        }
        let mut pins = Vec::with_capacity(size);
        for f in 0..size {
            let i = ctx.pin::<In, bool>(&format!("{f}.in"))?;
            let o = ctx.pin::<Out, bool>(&format!("{f}.out"))?;
            pins.push((i, o));
        }
        let delay = ctx.param("delay", ParamAccess::Rw, 5i32)?;
        ctx.instance_function(move |hal| {
            let pins: Vec<_> = pins
                .iter()
                .map(|&(i, o)| (hal.pin(i), hal.pin(o)))
                .collect();
            let delay = hal.param(delay);
            let mut filters = vec![Debounce::default(); pins.len()];
            Box::new(move |_| {
                let d = delay.get();
                let sane = Debounce::sane_delay(d);
                if sane != d {
                    delay.set(sane);
                }
                for (f, (i, o)) in filters.iter_mut().zip(&pins) {
                    o.set(f.step(i.get(), sane));
                }
            })
        })
    }
}

/// The up/down counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct UpDown {
    /// The count.
    pub(crate) count: i32,
    last_up: bool,
    last_down: bool,
    started: bool,
}

/// `updown`'s limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) clamp: bool,
    pub(crate) wrap: bool,
    pub(crate) min: i32,
    pub(crate) max: i32,
}

impl UpDown {
    /// One period; returns the count.
    pub(crate) fn step(&mut self, up: bool, down: bool, reset: bool, lim: &Limits) -> i32 {
        let up_edge = self.started && up && !self.last_up;
        let down_edge = self.started && down && !self.last_down;
        (self.last_up, self.last_down, self.started) = (up, down, true);
        if reset {
            self.count = 0;
        } else {
            self.count = self
                .count
                .wrapping_add(i32::from(up_edge))
                .wrapping_sub(i32::from(down_edge));
        }
        if lim.wrap {
            if self.count > lim.max {
                self.count = lim.min;
            } else if self.count < lim.min {
                self.count = lim.max;
            }
        } else if lim.clamp {
            if self.count > lim.max {
                self.count = lim.max;
            }
            if self.count < lim.min {
                self.count = lim.min;
            }
        }
        self.count
    }
}

/// The `updown` component.
pub(crate) struct UpDownComp;

impl Component for UpDownComp {
    const NAME: &'static str = "updown";
    const SUMMARY: &'static str = "up/down counter of rising edges, with clamp or wrap limits";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let up = ctx.pin::<In, bool>("countup")?;
        let down = ctx.pin::<In, bool>("countdown")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let count = ctx.pin::<Out, i32>("count")?;
        let clamp = ctx.param("clamp", ParamAccess::Rw, false)?;
        let wrap = ctx.param("wrap", ParamAccess::Rw, false)?;
        let max = ctx.param("max", ParamAccess::Rw, i32::MAX)?;
        let min = ctx.param("min", ParamAccess::Rw, 0i32)?;
        ctx.instance_function(move |hal| {
            let (up, down, reset, count) =
                (hal.pin(up), hal.pin(down), hal.pin(reset), hal.pin(count));
            let (clamp, wrap, max, min) = (
                hal.param(clamp),
                hal.param(wrap),
                hal.param(max),
                hal.param(min),
            );
            let mut counter = UpDown::default();
            Box::new(move |_| {
                let lim = Limits {
                    clamp: clamp.get(),
                    wrap: wrap.get(),
                    min: min.get(),
                    max: max.get(),
                };
                count.set(counter.step(up.get(), down.get(), reset.get(), &lim));
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::test_util::{bench, get, set, table};

    /// Rows of 0/1 and integers as text, for compact records.
    fn rows(text: &[&str]) -> Vec<Vec<f64>> {
        text.iter()
            .map(|r| r.split_whitespace().map(|v| v.parse().unwrap()).collect())
            .collect()
    }

    #[test]
    fn debounce_groups_come_from_cfg() {
        let mut h = bench("counters");
        assert_eq!(
            h.loadrt("debounce cfg=2,3").unwrap(),
            ["debounce.0", "debounce.1"]
        );
        for p in ["debounce.0.1.in", "debounce.0.1.out", "debounce.1.2.out"] {
            assert!(h.declared().pins.contains_key(p), "{p}");
        }
        assert!(!h.declared().pins.contains_key("debounce.0.2.in"));
        assert!(h.declared().params.contains_key("debounce.1.delay"));
        h.start().unwrap();
        assert_eq!(
            h.functions().collect::<Vec<_>>(),
            ["debounce.0", "debounce.1"]
        );
        assert_eq!(get(&h, "debounce.0.delay"), 5.0);
        for bad in [
            "debounce",
            "debounce cfg=0",
            "debounce cfg=2 count=2",
            "debounce cfg=65",
        ] {
            assert!(bench("counters").loadrt(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn debounce_matches_linuxcnc() {
        let mut h = bench("counters");
        h.loadrt("debounce cfg=1,1,1,1").unwrap();
        h.start().unwrap();
        set(&h, "debounce.1.delay", 2.0);
        set(&h, "debounce.2.delay", 0.0);
        set(&h, "debounce.3.delay", -1.0);
        // Recorded from LinuxCNC 2.9: in → out with delay 5, 2, 0, -1 (taken as 1).
        let ins = [
            1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0,
            0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1,
        ];
        let outs = [
            "0010", "0011", "0111", "0111", "0111", "1111", "1111", "1101", "1111", "1101", "1100",
            "1000", "1000", "1000", "0000", "0010", "0011", "0001", "0011", "0111", "0111", "0111",
            "1111", "1111", "1101", "1100", "1000", "1000", "1000", "0000", "0000", "0000", "0010",
            "0000", "0010", "0000", "0010", "0000", "0010", "0011",
        ];
        let rows: Vec<Vec<f64>> = ins
            .iter()
            .zip(outs)
            .map(|(&i, o)| {
                let mut r = vec![f64::from(i); 4];
                r.extend(o.bytes().map(|b| f64::from(b - b'0')));
                r
            })
            .collect();
        let rows: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        let ins: Vec<String> = (0..4).map(|g| format!("debounce.{g}.0.in")).collect();
        let outs: Vec<String> = (0..4).map(|g| format!("debounce.{g}.0.out")).collect();
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
        table(&mut h, 1_000_000, &ins, &outs, &rows);
        assert_eq!(get(&h, "debounce.3.delay"), 1.0);
        set(&h, "debounce.3.delay", -3.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "debounce.3.delay"), 1.0);
    }

    #[test]
    fn updown_matches_linuxcnc() {
        let mut h = bench("counters");
        h.loadrt("updown count=4").unwrap();
        h.start().unwrap();
        assert_eq!(get(&h, "updown.0.max"), f64::from(i32::MAX));
        for (i, clamp, wrap, min, max) in [(1, 1, 0, -2, 3), (2, 0, 1, -2, 3), (3, 1, 1, 5, 7)] {
            set(&h, &format!("updown.{i}.clamp"), f64::from(clamp));
            set(&h, &format!("updown.{i}.wrap"), f64::from(wrap));
            set(&h, &format!("updown.{i}.min"), f64::from(min));
            set(&h, &format!("updown.{i}.max"), f64::from(max));
        }
        // Recorded from LinuxCNC 2.9: countup countdown reset → count of .0 (no limits),
        // .1 (clamp -2..3), .2 (wrap -2..3), .3 (wrap and clamp 5..7).
        let rec = rows(&[
            "1 0 0 0 0 0 7",
            "0 0 0 0 0 0 7",
            "1 0 0 1 1 1 5",
            "0 0 0 1 1 1 5",
            "1 0 0 2 2 2 6",
            "0 0 0 2 2 2 6",
            "1 0 0 3 3 3 7",
            "0 0 0 3 3 3 7",
            "1 0 0 4 3 -2 5",
            "0 0 0 4 3 -2 5",
            "1 0 0 5 3 -1 6",
            "1 0 0 5 3 -1 6",
            "1 0 0 5 3 -1 6",
            "1 0 0 5 3 -1 6",
            "0 1 0 4 2 -2 5",
            "0 0 0 4 2 -2 5",
            "0 1 0 3 1 3 7",
            "0 0 0 3 1 3 7",
            "0 1 0 2 0 2 6",
            "0 0 0 2 0 2 6",
            "1 1 0 2 0 2 6",
            "1 0 0 2 0 2 6",
            "0 1 0 1 -1 1 5",
            "0 0 0 1 -1 1 5",
            "0 1 0 0 -2 0 7",
            "1 0 0 1 -1 1 5",
            "0 1 0 0 -2 0 7",
            "1 0 0 1 -1 1 5",
            "0 1 0 0 -2 0 7",
            "1 0 0 1 -1 1 5",
            "0 1 0 0 -2 0 7",
            "1 0 0 1 -1 1 5",
            "0 1 0 0 -2 0 7",
            "0 0 1 0 0 0 7",
            "0 1 1 0 0 0 7",
            "0 0 0 0 0 0 7",
            "1 0 0 1 1 1 5",
            "0 0 1 0 0 0 7",
            "1 1 0 0 0 0 7",
            "0 0 0 0 0 0 7",
        ]);
        let expanded: Vec<Vec<f64>> = rec
            .iter()
            .map(|r| {
                let mut v: Vec<f64> = (0..4).flat_map(|_| r[..3].to_vec()).collect();
                v.extend_from_slice(&r[3..]);
                v
            })
            .collect();
        let expanded: Vec<&[f64]> = expanded.iter().map(Vec::as_slice).collect();
        let ins: Vec<String> = (0..4)
            .flat_map(|i| ["countup", "countdown", "reset"].map(|p| format!("updown.{i}.{p}")))
            .collect();
        let outs: Vec<String> = (0..4).map(|i| format!("updown.{i}.count")).collect();
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
        table(&mut h, 1_000_000, &ins, &outs, &expanded);
    }

    #[test]
    fn updown_without_limits_goes_negative_and_wraps_the_s32() {
        let lim = Limits {
            clamp: false,
            wrap: false,
            min: 0,
            max: i32::MAX,
        };
        let mut c = UpDown::default();
        c.step(false, false, false, &lim);
        assert_eq!(c.step(false, true, false, &lim), -1);
        c.count = i32::MAX;
        c.step(false, false, false, &lim);
        assert_eq!(c.step(true, false, false, &lim), i32::MIN);
    }
}
