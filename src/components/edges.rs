//! Bit logic with memory, as in LinuxCNC: `edge`, `toggle` and `flipflop`.
//!
//! Names, types, defaults and functions are LinuxCNC 2.9's (one function per instance, named as the
//! instance: `edge.0`). The behaviour where the man pages say little was measured period by period on
//! LinuxCNC's own modules in `halrun` (`streamer` → module → `sampler`); the tests replay those records.
//!
//! # `edge` (`loadrt edge [count=N|names=…]`)
//!
//! A pulse on `out` for each chosen edge of `in` (the first period only reads `in`, so an input TRUE
//! from the start is no rising edge, as measured on LinuxCNC). In a period with a chosen edge `out` goes TRUE and
//! `time-left-ns` restarts at `out-width-ns`; in the others `time-left-ns` goes down by the period
//! (not below 0) and `out` is TRUE while it is still above 0. So a width of 0, or of up to one
//! period, gives a one-period pulse, and 2.5 periods give three. Time is the thread's nominal period
//! (LinuxCNC's `period`), times the periods elapsed after an overrun.
//!
//! | name                  | kind     | type | dir | default | meaning                                     |
//! |-----------------------|----------|------|-----|---------|---------------------------------------------|
//! | `edge.N.in`           | pin      | bit  | IN  | FALSE   | the input                                   |
//! | `edge.N.out`          | pin      | bit  | OUT | FALSE   | TRUE during a pulse                         |
//! | `edge.N.out-invert`   | pin      | bit  | OUT | TRUE after the first period | `!out`                  |
//! | `edge.N.both`         | param    | bit  | RW  | FALSE   | TRUE: both edges                            |
//! | `edge.N.in-edge`      | param    | bit  | RW  | TRUE    | if not `both`: TRUE falling, FALSE rising   |
//! | `edge.N.out-width-ns` | param    | s32  | RW  | 0       | pulse length, ns                            |
//! | `edge.N.time-left-ns` | param    | s32  | RO  | 0       | ns left in the pulse                        |
//! | `edge.N.last-in`      | param    | bit  | RO  | FALSE   | `in` in the previous period                 |
//! | `edge.N`              | function |      |     |         | one step                                    |
//!
//! # `toggle` (`loadrt toggle [count=N|names=…]`)
//!
//! Push-on, push-off from a momentary button, debounced both ways: a counter goes up (to `debounce`)
//! in periods where `in` is TRUE and down (to 0) where it is FALSE. Reaching `debounce` is a press,
//! which flips `out` once; the button must come back down to 0 (a release) before the next press.
//! A `debounce` outside 1…10000 is set back to 2, as LinuxCNC does. `out` is I/O: the state is the
//! pin's value, so something else writing the signal changes what the next press flips.
//!
//! | name                | kind     | type | dir | default | meaning                               |
//! |---------------------|----------|------|-----|---------|---------------------------------------|
//! | `toggle.N.in`       | pin      | bit  | IN  | FALSE   | the button                            |
//! | `toggle.N.out`      | pin      | bit  | I/O | FALSE   | flips at each debounced press         |
//! | `toggle.N.debounce` | param    | u32  | RW  | 2       | periods a press (and release) must last |
//! | `toggle.N`          | function |      |     |         | one step                              |
//!
//! # `flipflop` (`loadrt flipflop [count=N|names=…]`)
//!
//! A D flip-flop: `reset` forces `out` FALSE, else `set` forces it TRUE, else a rising edge of `clk`
//! copies `data` to `out`; otherwise `out` keeps its value (read back from the I/O pin, so a signal
//! written elsewhere is the state). `out-not` is always `!out`.
//!
//! | name                | kind     | type | dir | default | meaning                                 |
//! |---------------------|----------|------|-----|---------|-----------------------------------------|
//! | `flipflop.N.data`   | pin      | bit  | IN  | FALSE   | copied on a rising edge of `clk`        |
//! | `flipflop.N.clk`    | pin      | bit  | IN  | FALSE   | the clock                               |
//! | `flipflop.N.set`    | pin      | bit  | IN  | FALSE   | TRUE forces `out` TRUE                  |
//! | `flipflop.N.reset`  | pin      | bit  | IN  | FALSE   | TRUE forces `out` FALSE; beats `set`    |
//! | `flipflop.N.out`    | pin      | bit  | I/O | FALSE   | the state                               |
//! | `flipflop.N.out-not`| pin      | bit  | I/O | FALSE   | `!out` (TRUE after the first period)    |
//! | `flipflop.N`        | function |      |     |         | one step                                |

use rtapi_hal::{In, Io, Out, ParamAccess};

use super::safety::nominal_ns;
use super::{Component, LoadContext, LoadError};

/// The edge detector and its pulse timer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Edge {
    /// `in` in the previous period.
    pub(crate) last_in: bool,
    /// ns left in the pulse.
    pub(crate) time_left_ns: i64,
    started: bool,
}

impl Edge {
    /// One period of `elapsed_ns`; returns `out`.
    pub(crate) fn step(
        &mut self,
        input: bool,
        both: bool,
        falling: bool,
        width_ns: i64,
        elapsed_ns: u64,
    ) -> bool {
        // The first period only takes the input (LinuxCNC: an input TRUE from the start is no edge).
        let first = !self.started;
        self.started = true;
        let rise = !first && input && !self.last_in;
        let fall = !first && !input && self.last_in;
        let wanted = if both {
            rise || fall
        } else if falling {
            fall
        } else {
            rise
        };
        self.last_in = input;
        if wanted {
            self.time_left_ns = width_ns;
            return true;
        }
        if self.time_left_ns > 0 {
            let elapsed = i64::try_from(elapsed_ns).unwrap_or(i64::MAX);
            self.time_left_ns = self.time_left_ns.saturating_sub(elapsed).max(0);
        }
        self.time_left_ns > 0
    }
}

/// The `edge` component.
pub(crate) struct EdgeComp;

impl Component for EdgeComp {
    const NAME: &'static str = "edge";
    const SUMMARY: &'static str = "a pulse of out-width-ns on rising, falling or both edges";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, bool>("in")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let out_invert = ctx.pin::<Out, bool>("out-invert")?;
        let both = ctx.param("both", ParamAccess::Rw, false)?;
        let in_edge = ctx.param("in-edge", ParamAccess::Rw, true)?;
        let width = ctx.param("out-width-ns", ParamAccess::Rw, 0i32)?;
        let time_left = ctx.param("time-left-ns", ParamAccess::Ro, 0i32)?;
        let last_in = ctx.param("last-in", ParamAccess::Ro, false)?;
        ctx.instance_function(move |hal| {
            let (input, out, out_invert) = (hal.pin(input), hal.pin(out), hal.pin(out_invert));
            let (both, in_edge, width) = (hal.param(both), hal.param(in_edge), hal.param(width));
            let (time_left, last_in) = (hal.param(time_left), hal.param(last_in));
            let mut edge = Edge::default();
            Box::new(move |cycle| {
                let o = edge.step(
                    input.get(),
                    both.get(),
                    in_edge.get(),
                    i64::from(width.get()),
                    nominal_ns(cycle),
                );
                out.set(o);
                out_invert.set(!o);
                let tl = edge
                    .time_left_ns
                    .clamp(i64::from(i32::MIN), i64::from(i32::MAX));
                time_left.set(tl as i32);
                last_in.set(edge.last_in);
            })
        })
    }
}

/// The debounced button of `toggle`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Toggle {
    count: u32,
    pressed: bool,
}

/// `toggle.N.debounce` outside 1…`TOGGLE_MAX_DEBOUNCE` is set back to 2.
pub(crate) const TOGGLE_MAX_DEBOUNCE: u32 = 10_000;

impl Toggle {
    /// The usable debounce for a param value (LinuxCNC resets a bad one to 2).
    pub(crate) fn sane_debounce(debounce: u32) -> u32 {
        if (1..=TOGGLE_MAX_DEBOUNCE).contains(&debounce) {
            debounce
        } else {
            2
        }
    }

    /// One period; TRUE when this period is a press (the output flips).
    pub(crate) fn step(&mut self, input: bool, debounce: u32) -> bool {
        if input {
            self.count = self.count.saturating_add(1);
            if self.count >= debounce {
                self.count = debounce;
                let press = !self.pressed;
                self.pressed = true;
                return press;
            }
        } else {
            self.count = self.count.saturating_sub(1);
            if self.count == 0 {
                self.pressed = false;
            }
        }
        false
    }
}

/// The `toggle` component.
pub(crate) struct ToggleComp;

impl Component for ToggleComp {
    const NAME: &'static str = "toggle";
    const SUMMARY: &'static str = "push-on, push-off from a momentary button, debounced";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, bool>("in")?;
        let out = ctx.pin::<Io, bool>("out")?;
        let debounce = ctx.param("debounce", ParamAccess::Rw, 2u32)?;
        ctx.instance_function(move |hal| {
            let (input, out, debounce) = (hal.pin(input), hal.pin(out), hal.param(debounce));
            let mut toggle = Toggle::default();
            Box::new(move |_| {
                let d = debounce.get();
                let sane = Toggle::sane_debounce(d);
                if sane != d {
                    debounce.set(sane);
                }
                if toggle.step(input.get(), sane) {
                    out.set(!out.get());
                }
            })
        })
    }
}

/// The `flipflop` component.
pub(crate) struct FlipflopComp;

impl Component for FlipflopComp {
    const NAME: &'static str = "flipflop";
    const SUMMARY: &'static str = "D flip-flop with set and reset";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let data = ctx.pin::<In, bool>("data")?;
        let clk = ctx.pin::<In, bool>("clk")?;
        let set = ctx.pin::<In, bool>("set")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let out = ctx.pin::<Io, bool>("out")?;
        let out_not = ctx.pin::<Io, bool>("out-not")?;
        ctx.instance_function(move |hal| {
            let (data, clk, set, reset) =
                (hal.pin(data), hal.pin(clk), hal.pin(set), hal.pin(reset));
            let (out, out_not) = (hal.pin(out), hal.pin(out_not));
            let mut last_clk = false;
            Box::new(move |_| {
                let c = clk.get();
                let o = flipflop(
                    out.get(),
                    data.get(),
                    c && !last_clk,
                    set.get(),
                    reset.get(),
                );
                last_clk = c;
                out.set(o);
                out_not.set(!o);
            })
        })
    }
}

/// The next state of a D flip-flop: `reset` beats `set`, which beats a clock edge.
pub(crate) fn flipflop(out: bool, data: bool, clock_edge: bool, set: bool, reset: bool) -> bool {
    if reset {
        false
    } else if set {
        true
    } else if clock_edge {
        data
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::components::test_util::{bench, get, set, table};

    #[test]
    fn edge_pulses_match_linuxcnc() {
        let mut h = bench("edges");
        assert_eq!(h.loadrt("edge count=3").unwrap().len(), 3);
        h.start().unwrap();
        assert_eq!(
            h.functions().collect::<Vec<_>>(),
            ["edge.0", "edge.1", "edge.2"]
        );
        assert_eq!(get(&h, "edge.0.in-edge"), 1.0);
        set(&h, "edge.1.out-width-ns", 2_500_000.0);
        set(&h, "edge.1.both", 1.0);
        set(&h, "edge.2.out-width-ns", 1_000_000.0);
        set(&h, "edge.2.in-edge", 0.0);
        // Recorded from LinuxCNC 2.9 at 1 ms: in → (out, out-invert) of edge.0 (falling, width 0),
        // edge.1 (both, 2.5 ms), edge.2 (rising, 1 ms).
        let ins = [
            0, 1, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1,
        ];
        let outs = [
            "010101", "011010", "011001", "101001", "011001", "011001", "010101", "010101",
            "011010", "101001", "011010", "011001", "011001", "010101", "010101", "101001",
            "011010", "101001", "011001", "011001", "010101", "010101", "010101", "011010",
            "011001", "011001",
        ];
        let rows: Vec<Vec<f64>> = ins
            .iter()
            .zip(outs)
            .map(|(&i, o)| {
                let mut r = vec![f64::from(i); 3];
                r.extend(o.bytes().map(|b| f64::from(b - b'0')));
                r
            })
            .collect();
        let rows: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        table(
            &mut h,
            1_000_000,
            &["edge.0.in", "edge.1.in", "edge.2.in"],
            &[
                "edge.0.out",
                "edge.0.out-invert",
                "edge.1.out",
                "edge.1.out-invert",
                "edge.2.out",
                "edge.2.out-invert",
            ],
            &rows,
        );
        // edge.1's last edge was at row 24: 2.5 - 2 ms left, then none (not negative).
        assert_eq!(get(&h, "edge.1.time-left-ns"), 500_000.0);
        assert_eq!(get(&h, "edge.1.last-in"), 1.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "edge.1.time-left-ns"), 0.0);
    }

    #[test]
    fn edge_sees_no_edge_in_the_first_period() {
        // Recorded from LinuxCNC 2.9: rising edges, `in` TRUE from the first period.
        let mut h = bench("edges");
        h.loadrt("edge").unwrap();
        h.start().unwrap();
        set(&h, "edge.0.in-edge", 0.0);
        let rows: [[f64; 2]; 4] = [[1., 0.], [1., 0.], [0., 0.], [1., 1.]];
        let rows: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
        table(&mut h, 1_000_000, &["edge.0.in"], &["edge.0.out"], &rows);
    }

    #[test]
    fn edge_width_changes_and_late_periods() {
        let mut h = bench("edges");
        h.loadrt("edge").unwrap();
        h.start().unwrap();
        set(&h, "edge.0.in-edge", 0.0);
        set(&h, "edge.0.out-width-ns", 5_000_000.0);
        h.step(1_000_000);
        set(&h, "edge.0.in", 1.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "edge.0.time-left-ns"), 5_000_000.0);
        // A period 3 ms late takes 3 ms off the pulse; the next one ends it.
        h.step_late(1_000_000, 2);
        assert_eq!(get(&h, "edge.0.time-left-ns"), 2_000_000.0);
        assert_eq!(get(&h, "edge.0.out"), 1.0);
        h.step(1_000_000);
        h.step(1_000_000);
        assert_eq!(get(&h, "edge.0.out"), 0.0);
        assert_eq!(get(&h, "edge.0.out-invert"), 1.0);
        // A width change applies from the next edge; a held input makes no new pulse.
        set(&h, "edge.0.out-width-ns", 2_000_000.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "edge.0.out"), 0.0);
        set(&h, "edge.0.in", 0.0);
        h.step(1_000_000);
        set(&h, "edge.0.in", 1.0);
        let mut pulse = 0;
        for _ in 0..10 {
            h.step(1_000_000);
            pulse += get(&h, "edge.0.out") as i32;
        }
        assert_eq!(pulse, 2);
    }

    #[test]
    fn toggle_matches_linuxcnc_and_resets_a_bad_debounce() {
        let mut h = bench("edges");
        h.loadrt("toggle count=3").unwrap();
        h.start().unwrap();
        assert_eq!(get(&h, "toggle.0.debounce"), 2.0);
        set(&h, "toggle.1.debounce", 3.0);
        set(&h, "toggle.2.debounce", 0.0);
        // Recorded from LinuxCNC 2.9: in → out of debounce 2, 3, 0 (taken as 2).
        let ins = [
            1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1,
            1,
        ];
        let outs = [
            "000", "101", "111", "111", "111", "111", "111", "111", "111", "111", "010", "010",
            "010", "010", "010", "010", "010", "010", "010", "010", "010", "010", "010", "010",
            "010", "010", "010", "010", "010", "111",
        ];
        let rows: Vec<Vec<f64>> = ins
            .iter()
            .zip(outs)
            .map(|(&i, o)| {
                let mut r = vec![f64::from(i); 3];
                r.extend(o.bytes().map(|b| f64::from(b - b'0')));
                r
            })
            .collect();
        let rows: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        table(
            &mut h,
            1_000_000,
            &["toggle.0.in", "toggle.1.in", "toggle.2.in"],
            &["toggle.0.out", "toggle.1.out", "toggle.2.out"],
            &rows,
        );
        assert_eq!(get(&h, "toggle.2.debounce"), 2.0);
        set(&h, "toggle.1.debounce", 10_000.0);
        set(&h, "toggle.2.debounce", 10_001.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "toggle.1.debounce"), 10_000.0);
        assert_eq!(get(&h, "toggle.2.debounce"), 2.0);
    }

    #[test]
    fn toggle_out_is_the_state() {
        let mut h = bench("edges");
        h.loadrt("toggle").unwrap();
        h.start().unwrap();
        // Something else turns the output on: the next press turns it off.
        h.set("toggle.0.out", "1").unwrap();
        set(&h, "toggle.0.in", 1.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "toggle.0.out"), 1.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "toggle.0.out"), 0.0);
    }

    #[test]
    fn flipflop_matches_linuxcnc() {
        let mut h = bench("edges");
        h.loadrt("flipflop").unwrap();
        h.start().unwrap();
        assert_eq!(h.functions().collect::<Vec<_>>(), ["flipflop.0"]);
        // Recorded from LinuxCNC 2.9: data clk set reset → out out-not.
        let rows: [[u8; 6]; 26] = [
            [1, 0, 0, 0, 0, 1],
            [1, 1, 0, 0, 1, 0],
            [1, 0, 0, 0, 1, 0],
            [1, 0, 0, 0, 1, 0],
            [0, 1, 0, 0, 0, 1],
            [0, 1, 0, 0, 0, 1],
            [0, 0, 0, 0, 0, 1],
            [1, 1, 0, 0, 1, 0],
            [1, 0, 0, 0, 1, 0],
            [0, 1, 0, 0, 0, 1],
            [0, 1, 0, 0, 0, 1],
            [0, 0, 0, 0, 0, 1],
            [1, 0, 0, 0, 0, 1],
            [1, 0, 0, 0, 0, 1],
            [1, 0, 0, 0, 0, 1],
            [1, 1, 0, 0, 1, 0],
            [0, 1, 0, 0, 1, 0],
            [0, 1, 0, 0, 1, 0],
            [0, 0, 1, 0, 1, 0],
            [0, 0, 1, 1, 0, 1],
            [1, 1, 1, 1, 0, 1],
            [1, 0, 0, 1, 0, 1],
            [1, 1, 0, 0, 1, 0],
            [1, 0, 0, 0, 1, 0],
            [1, 1, 1, 1, 0, 1],
            [1, 0, 0, 0, 0, 1],
        ];
        let rows: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| r.iter().map(|&b| f64::from(b)).collect())
            .collect();
        let rows: Vec<&[f64]> = rows.iter().map(Vec::as_slice).collect();
        let p = |s: &str| format!("flipflop.0.{s}");
        let (ins, outs) = (
            ["data", "clk", "set", "reset"].map(p),
            ["out", "out-not"].map(p),
        );
        table(
            &mut h,
            1_000_000,
            &ins.each_ref().map(String::as_str),
            &outs.each_ref().map(String::as_str),
            &rows,
        );
    }
}
