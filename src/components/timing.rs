//! Timers, as in LinuxCNC: `oneshot`, `timedelay` and `timedelta`.
//!
//! Names, types, defaults and functions are LinuxCNC 2.9's (one function per instance, named as the
//! instance: `oneshot.0`). Where the man pages say little, the behaviour was measured period by period
//! on LinuxCNC's own modules in `halrun` (`streamer` → module → `sampler`); the tests replay those
//! records. Time is LinuxCNC's `fperiod`: the thread's nominal period in seconds (`period_ns × 1e-9`,
//! the same float), times the periods elapsed when a period comes late.
//!
//! # `oneshot` (`loadrt oneshot [count=N|names=…]`)
//!
//! A pulse of `width` seconds on an edge of `in` (rising if `rising`, falling if `falling`). In a
//! period with such an edge the timer restarts at `width` — if `retriggerable`, or if no pulse is
//! running; otherwise the edge is ignored. In the other periods a running timer goes down by the
//! period (not below 0). `out` is TRUE while the timer is above 0, and `time-left` shows it. A width
//! change applies from the next trigger.
//!
//! While `reset` is TRUE the timer is cleared and `out` is FALSE; `time-left` keeps its last value,
//! and the input is taken as FALSE, so an `in` still TRUE when `reset` ends counts as a rising edge
//! (all as measured on LinuxCNC).
//!
//! | name                      | kind     | type  | dir | default | meaning                          |
//! |---------------------------|----------|-------|-----|---------|----------------------------------|
//! | `oneshot.N.in`            | pin      | bit   | IN  | FALSE   | trigger input                    |
//! | `oneshot.N.reset`         | pin      | bit   | IN  | FALSE   | ends the pulse, holds it off     |
//! | `oneshot.N.out`           | pin      | bit   | OUT | FALSE   | TRUE during the pulse            |
//! | `oneshot.N.out-not`       | pin      | bit   | OUT | FALSE   | `!out` (TRUE after the first period) |
//! | `oneshot.N.width`         | pin      | float | IN  | 0       | pulse length, s                  |
//! | `oneshot.N.time-left`     | pin      | float | OUT | 0       | s left in the pulse              |
//! | `oneshot.N.retriggerable` | param    | bit   | RW  | TRUE    | an edge during a pulse restarts it |
//! | `oneshot.N.rising`        | param    | bit   | RW  | TRUE    | trigger on rising edges          |
//! | `oneshot.N.falling`       | param    | bit   | RW  | FALSE   | trigger on falling edges         |
//! | `oneshot.N`               | function |       |     |         | one step                         |
//!
//! # `timedelay` (`loadrt timedelay [count=N|names=…]`)
//!
//! A time-delay relay: `out` follows `in` once `in` has differed from `out` for `on-delay` seconds
//! (going TRUE) or `off-delay` seconds (going FALSE). While they differ the timer counts up and
//! `elapsed` shows it; when they agree the timer is cleared but `elapsed` keeps its last value (as in
//! LinuxCNC).
//!
//! | name                  | kind     | type  | dir | default | meaning                             |
//! |-----------------------|----------|-------|-----|---------|-------------------------------------|
//! | `timedelay.N.in`      | pin      | bit   | IN  | FALSE   | the input                           |
//! | `timedelay.N.out`     | pin      | bit   | OUT | FALSE   | `in`, delayed                       |
//! | `timedelay.N.on-delay`| pin      | float | IN  | 0.5     | s `in` must be TRUE before `out` is |
//! | `timedelay.N.off-delay`| pin     | float | IN  | 0.5     | s `in` must be FALSE before `out` is |
//! | `timedelay.N.elapsed` | pin      | float | OUT | 0       | the timer, s                        |
//! | `timedelay.N`         | function |       |     |         | one step                            |
//!
//! # `timedelta` (`loadrt timedelta [count=N|names=…]`)
//!
//! Measures the thread's scheduling: each run compares the time since the previous run, `out`, with
//! the nominal period. The time of a run is the thread's **wake time** (`Cycle::now_ns`, monotonic),
//! where LinuxCNC reads the clock when the function starts; so here the functions before it in the
//! thread do not add to the figures. The first run (and the first after a reset) only records the time.
//! In the runs after that: `current-error = out − period`, `current-jitter = |current-error|`; `min`
//! and `max` are the shortest and longest `out` and `jitter` the largest `current-jitter` since the
//! last reset; `err` sums every `current-error` and `avg-err` is `err` over the number of runs.
//! While `reset` is TRUE, `out`, `max`, `min` and `jitter` are 0 and start afresh at the next run;
//! `err` and `avg-err` keep going (as measured on LinuxCNC). Values beyond the s32 range saturate.
//!
//! | name                        | kind     | type  | dir | default | meaning                        |
//! |-----------------------------|----------|-------|-----|---------|--------------------------------|
//! | `timedelta.N.out`           | pin      | s32   | OUT | 0       | ns since the previous run      |
//! | `timedelta.N.current-error` | pin      | s32   | OUT | 0       | `out − period`, ns             |
//! | `timedelta.N.current-jitter`| pin      | s32   | OUT | 0       | `|out − period|`, ns           |
//! | `timedelta.N.min`           | pin      | s32   | OUT | 0       | shortest `out` since reset     |
//! | `timedelta.N.max`           | pin      | s32   | OUT | 0       | longest `out` since reset      |
//! | `timedelta.N.jitter`        | pin      | s32   | OUT | 0       | largest `current-jitter` since reset |
//! | `timedelta.N.err`           | pin      | s32   | OUT | 0       | sum of `current-error`, ns     |
//! | `timedelta.N.avg-err`       | pin      | float | OUT | 0       | `err` / runs, ns               |
//! | `timedelta.N.reset`         | pin      | bit   | IN  | FALSE   | TRUE clears min, max, jitter   |
//! | `timedelta.N`               | function |       |     |         | one measurement                |

use rtapi_hal::{In, Out, ParamAccess};

use super::safety::nominal_ns;
use super::{Component, LoadContext, LoadError};
use crate::runtime::function::Cycle;

/// LinuxCNC's `fperiod` for this cycle (see the module doc).
pub(super) fn fperiod(cycle: &Cycle) -> f64 {
    nominal_ns(cycle) as f64 * 1e-9
}

/// The oneshot's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OneshotConfig {
    pub(crate) width: f64,
    pub(crate) retriggerable: bool,
    pub(crate) rising: bool,
    pub(crate) falling: bool,
}

/// The oneshot's timer.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Oneshot {
    /// Seconds left in the pulse.
    pub(crate) timer: f64,
    last_in: bool,
}

impl Oneshot {
    /// One period of `dt` seconds; returns `out`.
    pub(crate) fn step(&mut self, input: bool, cfg: &OneshotConfig, dt: f64) -> bool {
        let edge =
            (cfg.rising && input && !self.last_in) || (cfg.falling && !input && self.last_in);
        self.last_in = input;
        let running = self.timer > 0.0;
        if edge && (cfg.retriggerable || !running) {
            self.timer = cfg.width;
        } else if running {
            self.timer = (self.timer - dt).max(0.0);
        }
        self.timer > 0.0
    }

    /// A period with `reset` TRUE: no pulse, and the input counts as FALSE.
    pub(crate) fn reset(&mut self) {
        self.timer = 0.0;
        self.last_in = false;
    }
}

/// The `oneshot` component.
pub(crate) struct OneshotComp;

impl Component for OneshotComp {
    const NAME: &'static str = "oneshot";
    const SUMMARY: &'static str = "a pulse of width seconds on an input edge";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, bool>("in")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let out_not = ctx.pin::<Out, bool>("out-not")?;
        let width = ctx.pin::<In, f64>("width")?;
        let time_left = ctx.pin::<Out, f64>("time-left")?;
        let retrig = ctx.param("retriggerable", ParamAccess::Rw, true)?;
        let rising = ctx.param("rising", ParamAccess::Rw, true)?;
        let falling = ctx.param("falling", ParamAccess::Rw, false)?;
        ctx.instance_function(move |hal| {
            let (input, reset, width) = (hal.pin(input), hal.pin(reset), hal.pin(width));
            let (out, out_not, time_left) = (hal.pin(out), hal.pin(out_not), hal.pin(time_left));
            let (retrig, rising, falling) =
                (hal.param(retrig), hal.param(rising), hal.param(falling));
            let mut shot = Oneshot::default();
            Box::new(move |cycle| {
                let o = if reset.get() {
                    shot.reset();
                    false
                } else {
                    let cfg = OneshotConfig {
                        width: width.get(),
                        retriggerable: retrig.get(),
                        rising: rising.get(),
                        falling: falling.get(),
                    };
                    let o = shot.step(input.get(), &cfg, fperiod(cycle));
                    time_left.set(shot.timer);
                    o
                };
                out.set(o);
                out_not.set(!o);
            })
        })
    }
}

/// The time-delay relay.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TimeDelay {
    /// `out`.
    pub(crate) out: bool,
    /// Seconds `in` has differed from `out`.
    pub(crate) timer: f64,
}

impl TimeDelay {
    /// One period of `dt` seconds; returns the timer to show while `in` differs from `out`.
    pub(crate) fn step(
        &mut self,
        input: bool,
        on_delay: f64,
        off_delay: f64,
        dt: f64,
    ) -> Option<f64> {
        if input == self.out {
            self.timer = 0.0;
            return None;
        }
        self.timer += dt;
        let shown = self.timer;
        if self.timer >= if input { on_delay } else { off_delay } {
            self.out = input;
            self.timer = 0.0;
        }
        Some(shown)
    }
}

/// The `timedelay` component.
pub(crate) struct TimeDelayComp;

impl Component for TimeDelayComp {
    const NAME: &'static str = "timedelay";
    const SUMMARY: &'static str = "time-delay relay: out follows in after on-delay / off-delay";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let input = ctx.pin::<In, bool>("in")?;
        let out = ctx.pin::<Out, bool>("out")?;
        let on_delay = ctx.pin_with_default::<In, f64>("on-delay", 0.5)?;
        let off_delay = ctx.pin_with_default::<In, f64>("off-delay", 0.5)?;
        let elapsed = ctx.pin::<Out, f64>("elapsed")?;
        ctx.instance_function(move |hal| {
            let (input, out, elapsed) = (hal.pin(input), hal.pin(out), hal.pin(elapsed));
            let (on_delay, off_delay) = (hal.pin(on_delay), hal.pin(off_delay));
            let mut relay = TimeDelay::default();
            Box::new(move |cycle| {
                let shown =
                    relay.step(input.get(), on_delay.get(), off_delay.get(), fperiod(cycle));
                if let Some(t) = shown {
                    elapsed.set(t);
                }
                out.set(relay.out);
            })
        })
    }
}

/// What `timedelta` shows after a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Delta {
    pub(crate) out: i64,
    pub(crate) current_error: i64,
    pub(crate) min: i64,
    pub(crate) max: i64,
    pub(crate) jitter: i64,
    pub(crate) err: i64,
    pub(crate) avg_err: f64,
}

/// The `timedelta` statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct TimeDeltaStats {
    last: Option<i64>,
    fresh: bool,
    runs: u64,
    /// The figures shown.
    pub(crate) shown: Delta,
}

impl TimeDeltaStats {
    /// One run at `now_ns` on a thread of `period_ns`.
    pub(crate) fn step(&mut self, now_ns: i64, period_ns: i64, reset: bool) {
        let d = &mut self.shown;
        if let Some(last) = self.last {
            let del = now_ns.saturating_sub(last);
            let e = del.saturating_sub(period_ns);
            d.out = del;
            d.current_error = e;
            d.err = d.err.saturating_add(e);
            self.runs += 1;
            d.avg_err = d.err as f64 / self.runs as f64;
            if self.fresh {
                (d.min, d.max, d.jitter) = (del, del, e.saturating_abs());
                self.fresh = false;
            } else {
                d.min = d.min.min(del);
                d.max = d.max.max(del);
                d.jitter = d.jitter.max(e.saturating_abs());
            }
        } else {
            self.fresh = true;
        }
        if reset {
            (d.out, d.min, d.max, d.jitter) = (0, 0, 0, 0);
            self.fresh = true;
        }
        self.last = Some(now_ns);
    }
}

/// `i64` → s32 pin, saturating.
fn s32(v: i64) -> i32 {
    v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// The `timedelta` component.
pub(crate) struct TimeDeltaComp;

impl Component for TimeDeltaComp {
    const NAME: &'static str = "timedelta";
    const SUMMARY: &'static str = "measures the time between runs of its thread (jitter, min, max)";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let jitter = ctx.pin::<Out, i32>("jitter")?;
        let current_jitter = ctx.pin::<Out, i32>("current-jitter")?;
        let current_error = ctx.pin::<Out, i32>("current-error")?;
        let min = ctx.pin::<Out, i32>("min")?;
        let max = ctx.pin::<Out, i32>("max")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let out = ctx.pin::<Out, i32>("out")?;
        let err = ctx.pin::<Out, i32>("err")?;
        let avg_err = ctx.pin::<Out, f64>("avg-err")?;
        ctx.instance_function(move |hal| {
            let (jitter, current_jitter, current_error) = (
                hal.pin(jitter),
                hal.pin(current_jitter),
                hal.pin(current_error),
            );
            let (min, max, reset, out) = (hal.pin(min), hal.pin(max), hal.pin(reset), hal.pin(out));
            let (err, avg_err) = (hal.pin(err), hal.pin(avg_err));
            let mut stats = TimeDeltaStats::default();
            Box::new(move |cycle| {
                let period = i64::try_from(cycle.period_ns).unwrap_or(i64::MAX);
                stats.step(cycle.now_ns, period, reset.get());
                let d = stats.shown;
                out.set(s32(d.out));
                current_error.set(s32(d.current_error));
                current_jitter.set(s32(d.current_error.saturating_abs()));
                min.set(s32(d.min));
                max.set(s32(d.max));
                jitter.set(s32(d.jitter));
                err.set(s32(d.err));
                avg_err.set(d.avg_err);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::test_util::{bench, get, set, table};

    #[test]
    fn oneshot_matches_linuxcnc() {
        let mut h = bench("timing");
        assert_eq!(h.loadrt("oneshot count=4").unwrap().len(), 4);
        h.start().unwrap();
        assert_eq!(get(&h, "oneshot.0.retriggerable"), 1.0);
        assert_eq!(get(&h, "oneshot.0.rising"), 1.0);
        assert_eq!(get(&h, "oneshot.0.falling"), 0.0);
        set(&h, "oneshot.1.retriggerable", 0.0);
        set(&h, "oneshot.2.falling", 1.0);
        set(&h, "oneshot.3.rising", 0.0);
        set(&h, "oneshot.3.falling", 1.0);
        // Recorded from LinuxCNC 2.9 at 1 ms: in, reset, width → out, time-left of oneshot.0
        // (default), .1 (not retriggerable), .2 (both edges), .3 (falling only).
        let rows: [[f64; 11]; 40] = [
            [0., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [1., 0., 0.0025, 1., 0.0025, 1., 0.0025, 1., 0.0025, 0., 0.],
            [1., 0., 0.0025, 1., 0.0015, 1., 0.0015, 1., 0.0015, 0., 0.],
            [
                0., 0., 0.0025, 1., 0.0005, 1., 0.0005, 1., 0.0025, 1., 0.0025,
            ],
            [0., 0., 0.0025, 0., 0., 0., 0., 1., 0.0015, 1., 0.0015],
            [0., 0., 0.0025, 0., 0., 0., 0., 1., 0.0005, 1., 0.0005],
            [0., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [1., 0., 0.0025, 1., 0.0025, 1., 0.0025, 1., 0.0025, 0., 0.],
            [
                0., 0., 0.0025, 1., 0.0015, 1., 0.0015, 1., 0.0025, 1., 0.0025,
            ],
            [
                1., 0., 0.0025, 1., 0.0025, 1., 0.0005, 1., 0.0025, 1., 0.0015,
            ],
            [0., 0., 0.0025, 1., 0.0015, 0., 0., 1., 0.0025, 1., 0.0025],
            [
                1., 0., 0.0025, 1., 0.0025, 1., 0.0025, 1., 0.0025, 1., 0.0015,
            ],
            [
                0., 0., 0.0025, 1., 0.0015, 1., 0.0015, 1., 0.0025, 1., 0.0025,
            ],
            [
                0., 0., 0.0025, 1., 0.0005, 1., 0.0005, 1., 0.0015, 1., 0.0015,
            ],
            [0., 0., 0.0025, 0., 0., 0., 0., 1., 0.0005, 1., 0.0005],
            [0., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [1., 0., 0.0025, 1., 0.0025, 1., 0.0025, 1., 0.0025, 0., 0.],
            [1., 0., 0.0025, 1., 0.0015, 1., 0.0015, 1., 0.0015, 0., 0.],
            [1., 0., 0.0025, 1., 0.0005, 1., 0.0005, 1., 0.0005, 0., 0.],
            [1., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [1., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.0025, 0., 0., 0., 0., 1., 0.0025, 1., 0.0025],
            [0., 0., 0.0025, 0., 0., 0., 0., 1., 0.0015, 1., 0.0015],
            [0., 0., 0.0025, 0., 0., 0., 0., 1., 0.0005, 1., 0.0005],
            [1., 0., 0.0025, 1., 0.0025, 1., 0.0025, 1., 0.0025, 0., 0.],
            [
                0., 0., 0.0025, 1., 0.0015, 1., 0.0015, 1., 0.0025, 1., 0.0025,
            ],
            [
                0., 1., 0.0025, 0., 0.0015, 0., 0.0015, 0., 0.0025, 0., 0.0025,
            ],
            [0., 0., 0.0025, 0., 0., 0., 0., 0., 0., 0., 0.],
            [1., 0., 0.004, 1., 0.004, 1., 0.004, 1., 0.004, 0., 0.],
            [0., 0., 0.004, 1., 0.003, 1., 0.003, 1., 0.004, 1., 0.004],
            [0., 0., 0.004, 1., 0.002, 1., 0.002, 1., 0.003, 1., 0.003],
            [0., 0., 0.001, 1., 0.001, 1., 0.001, 1., 0.002, 1., 0.002],
            [0., 0., 0.004, 0., 0., 0., 0., 1., 0.001, 1., 0.001],
            [0., 0., 0.004, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.004, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.004, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.004, 0., 0., 0., 0., 0., 0., 0., 0.],
            [0., 0., 0.004, 0., 0., 0., 0., 0., 0., 0., 0.],
        ];
        let rows: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
        let mut ins = Vec::new();
        for i in 0..4 {
            for p in ["in", "reset", "width"] {
                ins.push(format!("oneshot.{i}.{p}"));
            }
        }
        // Every instance gets the same inputs: expand each row.
        let outs: Vec<String> = (0..4)
            .flat_map(|i| [format!("oneshot.{i}.out"), format!("oneshot.{i}.time-left")])
            .collect();
        let expanded: Vec<Vec<f64>> = rows
            .iter()
            .map(|r| {
                let mut v: Vec<f64> = (0..4).flat_map(|_| r[..3].to_vec()).collect();
                v.extend_from_slice(&r[3..]);
                v
            })
            .collect();
        let expanded: Vec<&[f64]> = expanded.iter().map(Vec::as_slice).collect();
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
        table(&mut h, 1_000_000, &ins, &outs, &expanded);
        for i in 0..4 {
            let (o, n) = (
                get(&h, &format!("oneshot.{i}.out")),
                get(&h, &format!("oneshot.{i}.out-not")),
            );
            assert_eq!(o + n, 1.0, "out-not is !out");
        }
    }

    #[test]
    fn oneshot_reset_retrigger_and_odd_widths_match_linuxcnc() {
        let mut h = bench("timing");
        h.loadrt("oneshot count=3").unwrap();
        h.start().unwrap();
        set(&h, "oneshot.0.retriggerable", 0.0);
        let ins: Vec<String> = (0..3)
            .flat_map(|i| ["in", "reset", "width"].map(|p| format!("oneshot.{i}.{p}")))
            .collect();
        let outs: Vec<String> = (0..3)
            .flat_map(|i| ["out", "time-left"].map(|p| format!("oneshot.{i}.{p}")))
            .collect();
        // Recorded from LinuxCNC 2.9. .0: an edge when a non-retriggerable pulse would end is
        // ignored. .1: `in` held TRUE through a reset triggers when the reset ends. .2: a negative
        // width gives no pulse and time-left shows it.
        let rows: [[f64; 15]; 10] = [
            [
                1., 0., 0.002, 0., 0., 0.002, 1., 0., 0.004, 1., 0.002, 0., 0.0, 1., 0.004,
            ],
            [
                0., 0., 0.002, 1., 1., 0.002, 0., 0., 0.004, 1., 0.001, 0., 0.0, 1., 0.003,
            ],
            [
                1., 0., 0.002, 1., 0., 0.002, 0., 0., 0.001, 0., 0.0, 1., 0.002, 1., 0.002,
            ],
            [
                0., 0., 0.002, 0., 0., 0.002, 0., 0., 0.001, 0., 0.0, 1., 0.001, 1., 0.001,
            ],
            [
                1., 0., 0.002, 1., 0., 0.002, 0., 0., 0.001, 1., 0.002, 1., 0.002, 0., 0.0,
            ],
            [
                0., 0., 0.002, 1., 1., 0.002, 1., 0., 0.0005, 1., 0.001, 0., 0.002, 1., 0.0005,
            ],
            [
                0., 0., 0.002, 1., 1., 0.002, 0., 0., 0.0005, 0., 0.0, 0., 0.002, 0., 0.0,
            ],
            [
                0., 0., 0.002, 1., 0., 0.002, 0., 0., -1., 0., 0.0, 1., 0.002, 0., 0.0,
            ],
            [
                0., 0., 0.002, 0., 0., 0.002, 1., 0., -1., 0., 0.0, 1., 0.001, 0., -1.0,
            ],
            [
                0., 0., 0.002, 0., 0., 0.002, 0., 0., -1., 0., 0.0, 0., 0.0, 0., -1.0,
            ],
        ];
        let rows: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
        let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
        let outs: Vec<&str> = outs.iter().map(String::as_str).collect();
        table(&mut h, 1_000_000, &ins, &outs, &rows);
    }

    #[test]
    fn oneshot_late_periods_and_nan_width() {
        let mut h = bench("timing");
        h.loadrt("oneshot").unwrap();
        h.start().unwrap();
        set(&h, "oneshot.0.width", 0.005);
        set(&h, "oneshot.0.in", 1.0);
        h.step(1_000_000);
        h.step_late(1_000_000, 2);
        assert!((get(&h, "oneshot.0.time-left") - 0.002).abs() < 1e-12);
        h.step_late(1_000_000, 4);
        assert_eq!(get(&h, "oneshot.0.out"), 0.0);
        assert_eq!(get(&h, "oneshot.0.time-left"), 0.0);
        // NaN cannot be set with setp; a NaN width is no pulse, and the next edge recovers.
        let cfg = |width| OneshotConfig {
            width,
            retriggerable: false,
            rising: true,
            falling: false,
        };
        let mut s = Oneshot::default();
        assert!(!s.step(true, &cfg(f64::NAN), 0.001));
        assert!(!s.step(false, &cfg(0.002), 0.001));
        assert!(s.step(true, &cfg(0.002), 0.001));
    }

    #[test]
    fn timedelay_matches_linuxcnc() {
        let mut h = bench("timing");
        h.loadrt("timedelay").unwrap();
        h.start().unwrap();
        assert_eq!(h.functions().collect::<Vec<_>>(), ["timedelay.0"]);
        assert_eq!(get(&h, "timedelay.0.on-delay"), 0.5);
        assert_eq!(get(&h, "timedelay.0.off-delay"), 0.5);
        // Recorded from LinuxCNC 2.9 at 1 ms: in, on-delay, off-delay → out, elapsed.
        let rows: [[f64; 5]; 40] = [
            [0., 0.003, 0.002, 0., 0.0],
            [1., 0.003, 0.002, 0., 0.001],
            [1., 0.003, 0.002, 0., 0.002],
            [1., 0.003, 0.002, 1., 0.003],
            [1., 0.003, 0.002, 1., 0.003],
            [1., 0.003, 0.002, 1., 0.003],
            [1., 0.003, 0.002, 1., 0.003],
            [0., 0.003, 0.002, 1., 0.001],
            [0., 0.003, 0.002, 0., 0.002],
            [1., 0.003, 0.002, 0., 0.001],
            [0., 0.003, 0.002, 0., 0.001],
            [0., 0.003, 0.002, 0., 0.001],
            [0., 0.003, 0.002, 0., 0.001],
            [1., 0.003, 0.002, 0., 0.001],
            [1., 0.003, 0.002, 0., 0.002],
            [0., 0.003, 0.002, 0., 0.002],
            [1., 0.003, 0.002, 0., 0.001],
            [1., 0.003, 0.002, 0., 0.002],
            [1., 0.003, 0.002, 1., 0.003],
            [1., 0.003, 0.002, 1., 0.003],
            [1., 0.003, 0.002, 1., 0.003],
            [0., 0.003, 0.002, 1., 0.001],
            [0., 0.003, 0.002, 0., 0.002],
            [0., 0.003, 0.002, 0., 0.002],
            [1., 0.0015, 0.002, 0., 0.001],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [0., 0.0015, 0.002, 1., 0.001],
            [0., 0.0015, 0.002, 0., 0.002],
            [1., 0.0015, 0.002, 0., 0.001],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.01, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
            [1., 0.0015, 0.002, 1., 0.002],
        ];
        let rows: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
        table(
            &mut h,
            1_000_000,
            &[
                "timedelay.0.in",
                "timedelay.0.on-delay",
                "timedelay.0.off-delay",
            ],
            &["timedelay.0.out", "timedelay.0.elapsed"],
            &rows,
        );
    }

    #[test]
    fn timedelta_measures_late_periods_and_resets() {
        let mut h = bench("timing");
        h.loadrt("timedelta").unwrap();
        h.start().unwrap();
        let g = |h: &crate::components::Harness, p: &str| get(h, &format!("timedelta.0.{p}"));
        h.step(1_000_000);
        assert_eq!(g(&h, "out"), 0.0, "the first run only records the time");
        h.step(1_000_000);
        assert_eq!(
            ["out", "current-error", "min", "max", "jitter", "err"].map(|p| g(&h, p)),
            [1e6, 0.0, 1e6, 1e6, 0.0, 0.0]
        );
        // A run 2 periods late: 3 ms since the previous one.
        h.step_late(1_000_000, 2);
        assert_eq!(
            [
                "out",
                "current-error",
                "current-jitter",
                "min",
                "max",
                "jitter",
                "err"
            ]
            .map(|p| g(&h, p)),
            [3e6, 2e6, 2e6, 1e6, 3e6, 2e6, 2e6]
        );
        assert_eq!(g(&h, "avg-err"), 1e6);
        // Reset clears min, max, jitter, out; err and avg-err go on.
        set(&h, "timedelta.0.reset", 1.0);
        h.step(1_000_000);
        assert_eq!(["out", "min", "max", "jitter"].map(|p| g(&h, p)), [0.0; 4]);
        assert_eq!(g(&h, "err"), 2e6);
        set(&h, "timedelta.0.reset", 0.0);
        h.step(1_000_000);
        assert_eq!(["min", "max", "jitter"].map(|p| g(&h, p)), [1e6, 1e6, 0.0]);
        assert_eq!(g(&h, "avg-err"), 2e6 / 4.0);
        // A run 10 s late saturates the s32 pins instead of wrapping.
        h.step_late(1_000_000, 9_999);
        assert_eq!(g(&h, "out"), f64::from(i32::MAX));
    }

    #[test]
    fn timedelay_late_periods_and_nan_delays() {
        let mut h = bench("timing");
        h.loadrt("timedelay").unwrap();
        h.start().unwrap();
        set(&h, "timedelay.0.on-delay", 0.004);
        set(&h, "timedelay.0.in", 1.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "timedelay.0.out"), 0.0);
        // 3 ms at once: 4 ms reached.
        h.step_late(1_000_000, 2);
        assert_eq!(get(&h, "timedelay.0.out"), 1.0);
        assert!((get(&h, "timedelay.0.elapsed") - 0.004).abs() < 1e-12);
        // A NaN delay never switches; a finite one then does.
        let mut r = TimeDelay::default();
        for _ in 0..100 {
            r.step(true, f64::NAN, 0.0, 0.001);
        }
        assert!(!r.out);
        r.step(true, 0.05, 0.0, 0.001);
        assert!(r.out);
    }
}
