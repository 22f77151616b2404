//! `pwmgen`: software PWM / PDM, as in LinuxCNC (`loadrt pwmgen output_type=T0[,T1…]`).
//!
//! One channel per value of `output_type=` (`pwmgen.0`, `pwmgen.1`, …; no `count=`/`names=`):
//! type 0 has one output `pwm` (negative commands give 0 %), type 1 `pwm` and `dir` (TRUE for
//! negative commands), type 2 `up` and `down` (the wave on one of them by the command's sign).
//!
//! **Functions.** LinuxCNC has `pwmgen.make-pulses` and `pwmgen.update` for all channels; here each
//! channel has its own, `pwmgen.N.make-pulses` (fast thread) and `pwmgen.N.update` (servo thread),
//! which share their state through atomics.
//!
//! **update** first checks the limits, writing the corrected values back to the I/O pins as LinuxCNC
//! does: `max-dc` at most 1, `min-dc` within 0 … `max-dc`; a `scale` within ±1e-20 becomes 1. The
//! duty cycle is `value / scale + offset`, 0 if negative on type 0, then its size is held within
//! `min-dc` … `max-dc`. The mode is *disabled* (`enable` FALSE), *PDM* (`pwm-freq` 0), *dithered PWM*
//! (`dither-pwm`) or *PWM*. When the mode or `pwm-freq` changes, `pwm-freq` is brought within 0.5 Hz
//! … half the make-pulses rate; plain PWM then rounds its period to a whole number of make-pulses
//! periods and writes the resulting frequency back (300 Hz at 1 ms becomes 333.33 Hz). Plain PWM
//! also rounds the high time to whole periods, and `curr-dc` shows that rounded duty cycle (0.35 with
//! 10 periods shows 0.4); in the other modes `curr-dc` is the limited duty cycle itself.
//!
//! **make-pulses**, each period of `dt` (the nominal period, times the periods elapsed when late):
//! - PWM: the output goes high at the start of each PWM period (if the high time is above 0) and low
//!   once it has been high for the high time; timers restart every PWM period.
//! - dithered PWM: the same, but the period and high time keep their remainders, so the high time
//!   alternates between the two nearest whole numbers of periods with the right average.
//! - PDM: an accumulator gains the high time (duty × period) every period and loses one period while
//!   the output is high; the output is high while it is above 0.
//! - disabled: every output low, timers cleared.
//!
//! These rules were checked period by period against LinuxCNC 2.9's module in `halrun`, with
//! `make-pulses` before `update` in one 1 ms thread (the test replays the record). One difference:
//! `update` computes nothing until `make-pulses` has run once and so told it its period; LinuxCNC
//! then computes with an unknown period (and was seen to reset `pwm-freq` to 0).
//!
//! | name                  | kind     | type  | dir | default | meaning                                 |
//! |-----------------------|----------|-------|-----|---------|-----------------------------------------|
//! | `pwmgen.N.enable`     | pin      | bit   | IN  | FALSE   | FALSE holds every output low            |
//! | `pwmgen.N.value`      | pin      | float | IN  | 0       | the command                             |
//! | `pwmgen.N.pwm`        | pin      | bit   | OUT | FALSE   | the wave (types 0 and 1)                |
//! | `pwmgen.N.dir`        | pin      | bit   | OUT | FALSE   | TRUE for negative commands (type 1)     |
//! | `pwmgen.N.up`         | pin      | bit   | OUT | FALSE   | the wave for positive commands (type 2) |
//! | `pwmgen.N.down`       | pin      | bit   | OUT | FALSE   | the wave for negative commands (type 2) |
//! | `pwmgen.N.curr-dc`    | pin      | float | OUT | 0       | the duty cycle output, −1 … 1           |
//! | `pwmgen.N.max-dc`     | pin      | float | I/O | 1.0     | largest duty cycle                      |
//! | `pwmgen.N.min-dc`     | pin      | float | I/O | 0       | smallest duty cycle (when enabled)      |
//! | `pwmgen.N.scale`      | pin      | float | I/O | 1.0     | `value` giving 100 %                    |
//! | `pwmgen.N.offset`     | pin      | float | I/O | 0       | added to the duty cycle                 |
//! | `pwmgen.N.pwm-freq`   | pin      | float | I/O | 0       | PWM frequency, Hz; 0 for PDM            |
//! | `pwmgen.N.dither-pwm` | pin      | bit   | I/O | FALSE   | dither the high time                    |
//! | `pwmgen.N.make-pulses`| function |       |     |         | the wave (fast thread)                  |
//! | `pwmgen.N.update`     | function |       |     |         | scaling, limits, mode (servo thread)    |

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

use rtapi_hal::{In, Io, Out};

use super::safety::nominal_ns;
use super::{Component, LoadContext, LoadError};

/// The generator's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Mode {
    Disabled = 0,
    Pure = 1,
    Dither = 2,
    Pdm = 3,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Pure,
            2 => Mode::Dither,
            3 => Mode::Pdm,
            _ => Mode::Disabled,
        }
    }
}

/// What update hands make-pulses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) mode: Mode,
    /// PWM period, ns.
    pub(crate) period_ns: i64,
    /// High time per PWM period (PDM: per make-pulses period), ns.
    pub(crate) high_ns: i64,
    /// TRUE for a negative command.
    pub(crate) reverse: bool,
}

/// The I/O pins update reads and may correct.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Settings {
    pub(crate) enable: bool,
    pub(crate) value: f64,
    pub(crate) max_dc: f64,
    pub(crate) min_dc: f64,
    pub(crate) scale: f64,
    pub(crate) offset: f64,
    pub(crate) freq: f64,
    pub(crate) dither: bool,
}

/// update's own state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Update {
    output_type: u8,
    mode: Mode,
    old_freq: f64,
    old_scale: f64,
    scale_recip: f64,
    periods: f64,
    period_ns: i64,
}

impl Update {
    pub(crate) fn new(output_type: u8) -> Self {
        Update {
            output_type,
            mode: Mode::Disabled,
            old_freq: 0.0,
            // NaN: the first update always checks the scale.
            old_scale: f64::NAN,
            scale_recip: 1.0,
            periods: 1.0,
            period_ns: 0,
        }
    }

    /// One update with make-pulses running every `base_ns`: corrects `s` in place and returns the plan
    /// and `curr-dc`.
    pub(crate) fn step(&mut self, s: &mut Settings, base_ns: i64) -> (Plan, f64) {
        if s.max_dc > 1.0 {
            s.max_dc = 1.0;
        }
        if s.min_dc > s.max_dc {
            s.min_dc = s.max_dc;
        }
        if s.min_dc < 0.0 {
            s.min_dc = 0.0;
        }
        if s.max_dc < s.min_dc {
            s.max_dc = s.min_dc;
        }
        if s.scale != self.old_scale {
            self.old_scale = s.scale;
            if s.scale.abs() < 1e-20 {
                s.scale = 1.0;
            }
            self.scale_recip = 1.0 / s.scale;
        }
        let base = base_ns as f64;
        let new_mode = if !s.enable {
            Mode::Disabled
        } else if s.freq == 0.0 {
            Mode::Pdm
        } else if s.dither {
            Mode::Dither
        } else {
            Mode::Pure
        };
        if s.freq != self.old_freq || self.mode != new_mode {
            if s.freq == 0.0 {
                self.period_ns = base_ns;
            } else {
                let top = 0.5e9 / base;
                if s.freq < 0.5 {
                    s.freq = 0.5;
                } else if s.freq > top {
                    s.freq = top;
                }
                if new_mode == Mode::Pure {
                    self.periods = (1e9 / s.freq / base + 0.5).floor().max(1.0);
                    self.period_ns = (self.periods * base) as i64;
                    s.freq = 1e9 / self.period_ns as f64;
                } else {
                    self.period_ns = (1e9 / s.freq) as i64;
                }
            }
            self.old_freq = s.freq;
        }
        let mut dc = s.value * self.scale_recip + s.offset;
        if self.output_type == 0 && dc < 0.0 {
            dc = 0.0;
        }
        let (reverse, size) = if dc >= 0.0 {
            if dc > s.max_dc {
                dc = s.max_dc;
            } else if dc < s.min_dc {
                dc = s.min_dc;
            }
            (false, dc)
        } else {
            if dc < -s.max_dc {
                dc = -s.max_dc;
            } else if dc > -s.min_dc {
                dc = -s.min_dc;
            }
            (true, -dc)
        };
        let mut curr_dc = dc;
        let high_ns = if new_mode == Mode::Pure {
            let high_periods = (size * self.periods + 0.5).floor();
            curr_dc = high_periods / self.periods * if reverse { -1.0 } else { 1.0 };
            (high_periods * base) as i64
        } else {
            (self.period_ns as f64 * size + 0.5) as i64
        };
        self.mode = new_mode;
        let plan = Plan {
            mode: new_mode,
            period_ns: self.period_ns,
            high_ns,
            reverse,
        };
        (plan, curr_dc)
    }
}

/// make-pulses' timers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pulses {
    period_timer: i64,
    high_timer: i64,
    /// The wave.
    pub(crate) out: bool,
}

impl Pulses {
    /// One period of `dt` ns under `plan`; returns the wave.
    pub(crate) fn step(&mut self, plan: &Plan, dt: i64) -> bool {
        match plan.mode {
            Mode::Pure => {
                if self.out {
                    self.high_timer = self.high_timer.saturating_add(dt);
                    if self.high_timer >= plan.high_ns {
                        self.out = false;
                    }
                }
                self.period_timer = self.period_timer.saturating_add(dt);
                if self.period_timer >= plan.period_ns {
                    self.period_timer = 0;
                    self.high_timer = 0;
                    if plan.high_ns > 0 {
                        self.out = true;
                    }
                }
            }
            Mode::Dither => {
                if self.out {
                    self.high_timer = self.high_timer.saturating_sub(dt);
                    if self.high_timer <= 0 {
                        self.out = false;
                    }
                }
                self.period_timer = self.period_timer.saturating_add(dt);
                if self.period_timer >= plan.period_ns {
                    self.period_timer = self.period_timer.saturating_sub(plan.period_ns);
                    self.high_timer = self.high_timer.saturating_add(plan.high_ns);
                    if self.high_timer > 0 {
                        self.out = true;
                    }
                }
            }
            Mode::Pdm => {
                self.high_timer = self.high_timer.saturating_add(plan.high_ns);
                if self.out {
                    self.high_timer = self.high_timer.saturating_sub(dt);
                }
                self.out = self.high_timer > 0;
            }
            Mode::Disabled => *self = Pulses::default(),
        }
        self.out
    }
}

/// The plan, shared from update to make-pulses (they may run in different threads).
#[derive(Default)]
struct Shared {
    mode: AtomicU8,
    period_ns: AtomicI64,
    high_ns: AtomicI64,
    reverse: AtomicBool,
    /// make-pulses' period, 0 until it has run.
    base_ns: AtomicU64,
}

/// The `pwmgen` component: one instance per value of `output_type=`.
pub(crate) struct Pwmgen;

impl Component for Pwmgen {
    const NAME: &'static str = "pwmgen";
    const SUMMARY: &'static str = "software PWM / PDM generator (output_type=0,1,2 per channel)";
    const ARGS: &'static [&'static str] = &["output_type"];
    const INSTANCES_ARG: Option<&'static str> = Some("output_type");

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let output_type: u8 = ctx.arg("output_type")?.unwrap_or(u8::MAX);
        if output_type > 2 {
            return Err(LoadError::new(format!(
                "{}: output_type must be 0 (pwm), 1 (pwm, dir) or 2 (up, down)",
                ctx.instance()
            )));
        }
        let enable = ctx.pin::<In, bool>("enable")?;
        let value = ctx.pin::<In, f64>("value")?;
        let (a, b) = match output_type {
            0 => (ctx.pin::<Out, bool>("pwm")?, None),
            1 => (
                ctx.pin::<Out, bool>("pwm")?,
                Some(ctx.pin::<Out, bool>("dir")?),
            ),
            _ => (
                ctx.pin::<Out, bool>("up")?,
                Some(ctx.pin::<Out, bool>("down")?),
            ),
        };
        let curr_dc = ctx.pin::<Out, f64>("curr-dc")?;
        let max_dc = ctx.pin_with_default::<Io, f64>("max-dc", 1.0)?;
        let min_dc = ctx.pin::<Io, f64>("min-dc")?;
        let scale = ctx.pin_with_default::<Io, f64>("scale", 1.0)?;
        let offset = ctx.pin::<Io, f64>("offset")?;
        let freq = ctx.pin::<Io, f64>("pwm-freq")?;
        let dither = ctx.pin::<Io, bool>("dither-pwm")?;
        let shared = Arc::new(Shared::default());
        let for_update = shared.clone();
        ctx.function("make-pulses", move |hal| {
            let (a, b) = (hal.pin(a), b.map(|k| hal.pin(k)));
            let mut pulses = Pulses::default();
            Box::new(move |cycle| {
                shared.base_ns.store(cycle.period_ns, Relaxed);
                let plan = Plan {
                    mode: Mode::from_u8(shared.mode.load(Relaxed)),
                    period_ns: shared.period_ns.load(Relaxed),
                    high_ns: shared.high_ns.load(Relaxed),
                    reverse: shared.reverse.load(Relaxed),
                };
                let dt = i64::try_from(nominal_ns(cycle)).unwrap_or(i64::MAX);
                let out = pulses.step(&plan, dt);
                match (output_type, &b) {
                    (2, Some(down)) => {
                        a.set(out && !plan.reverse);
                        down.set(out && plan.reverse);
                    }
                    _ => a.set(out),
                }
            })
        })?;
        ctx.function("update", move |hal| {
            let (enable, value, curr_dc) = (hal.pin(enable), hal.pin(value), hal.pin(curr_dc));
            let (max_dc, min_dc, scale) = (hal.pin(max_dc), hal.pin(min_dc), hal.pin(scale));
            let (offset, freq, dither) = (hal.pin(offset), hal.pin(freq), hal.pin(dither));
            let dir = b.filter(|_| output_type == 1).map(|k| hal.pin(k));
            let shared = for_update;
            let mut update = Update::new(output_type);
            Box::new(move |_| {
                let base = i64::try_from(shared.base_ns.load(Relaxed)).unwrap_or(i64::MAX);
                if base == 0 {
                    return;
                }
                let mut s = Settings {
                    enable: enable.get(),
                    value: value.get(),
                    max_dc: max_dc.get(),
                    min_dc: min_dc.get(),
                    scale: scale.get(),
                    offset: offset.get(),
                    freq: freq.get(),
                    dither: dither.get(),
                };
                let before = s;
                let (plan, dc) = update.step(&mut s, base);
                for (pin, old, new) in [
                    (&max_dc, before.max_dc, s.max_dc),
                    (&min_dc, before.min_dc, s.min_dc),
                    (&scale, before.scale, s.scale),
                    (&freq, before.freq, s.freq),
                ] {
                    if old.to_bits() != new.to_bits() {
                        pin.set(new);
                    }
                }
                shared.period_ns.store(plan.period_ns, Relaxed);
                shared.high_ns.store(plan.high_ns, Relaxed);
                shared.reverse.store(plan.reverse, Relaxed);
                shared.mode.store(plan.mode as u8, Relaxed);
                curr_dc.set(dc);
                if let Some(dir) = &dir {
                    dir.set(plan.reverse);
                }
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::test_util::{bench, get, set};

    /// Recorded from LinuxCNC 2.9 (make-pulses then update, 1 ms): value, enable →
    /// ch0 pwm (type 0, 100 Hz), ch1 pwm, dir (type 1, 100 Hz dithered), ch2 up, down (type 2, PDM),
    /// ch3 pwm (type 0, 300 Hz), ch4 pwm (type 0, PDM, min-dc 0.2, max-dc 0.8), curr-dc of ch0, ch1, ch4.
    const RECORD: &str = include_str!("pwmgen_record.txt");

    #[test]
    fn pwmgen_matches_linuxcnc_period_by_period() {
        let mut h = bench("pwmgen");
        assert_eq!(h.loadrt("pwmgen output_type=0,1,2,0,0").unwrap().len(), 5);
        h.start().unwrap();
        assert_eq!(h.functions().count(), 10);
        for (n, f) in [(0, 100.0), (1, 100.0), (2, 0.0), (3, 300.0), (4, 0.0)] {
            set(&h, &format!("pwmgen.{n}.pwm-freq"), f);
        }
        set(&h, "pwmgen.1.dither-pwm", 1.0);
        set(&h, "pwmgen.4.min-dc", 0.2);
        set(&h, "pwmgen.4.max-dc", 0.8);
        let outs = [
            "pwmgen.0.pwm",
            "pwmgen.1.pwm",
            "pwmgen.1.dir",
            "pwmgen.2.up",
            "pwmgen.2.down",
            "pwmgen.3.pwm",
            "pwmgen.4.pwm",
            "pwmgen.0.curr-dc",
            "pwmgen.1.curr-dc",
            "pwmgen.4.curr-dc",
        ];
        let mut rows = 0;
        for (i, line) in RECORD.lines().enumerate() {
            let v: Vec<f64> = line
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            for n in 0..5 {
                set(&h, &format!("pwmgen.{n}.value"), v[0]);
                set(&h, &format!("pwmgen.{n}.enable"), v[1]);
            }
            h.step(1_000_000);
            for (name, want) in outs.iter().zip(&v[2..]) {
                let got = get(&h, name);
                // The record has 6 decimals.
                assert!(
                    (got - want).abs() < 1e-6,
                    "row {}: {name} = {got}, LinuxCNC {want}",
                    i + 1
                );
            }
            rows += 1;
        }
        assert_eq!(rows, 120);
        assert!((get(&h, "pwmgen.3.pwm-freq") - 1e9 / 3e6).abs() < 1e-9);
        assert_eq!(get(&h, "pwmgen.0.pwm-freq"), 100.0);
    }

    #[test]
    fn pwmgen_corrects_limits_and_refuses_bad_types() {
        let mut h = bench("pwmgen");
        h.loadrt("pwmgen output_type=1").unwrap();
        assert!(h.declared().pins.contains_key("pwmgen.0.dir"));
        assert!(!h.declared().pins.contains_key("pwmgen.0.up"));
        h.start().unwrap();
        set(&h, "pwmgen.0.max-dc", 1.5);
        set(&h, "pwmgen.0.min-dc", -0.1);
        set(&h, "pwmgen.0.scale", 0.0);
        set(&h, "pwmgen.0.pwm-freq", 5000.0);
        set(&h, "pwmgen.0.enable", 1.0);
        set(&h, "pwmgen.0.value", -2.0);
        h.step(1_000_000);
        assert_eq!(get(&h, "pwmgen.0.max-dc"), 1.0);
        assert_eq!(get(&h, "pwmgen.0.min-dc"), 0.0);
        assert_eq!(get(&h, "pwmgen.0.scale"), 1.0);
        // At most half the make-pulses rate.
        assert_eq!(get(&h, "pwmgen.0.pwm-freq"), 500.0);
        assert_eq!(get(&h, "pwmgen.0.curr-dc"), -1.0);
        assert_eq!(get(&h, "pwmgen.0.dir"), 1.0);
        for bad in [
            "pwmgen",
            "pwmgen output_type=3",
            "pwmgen output_type=0 count=2",
        ] {
            assert!(bench("pwmgen").loadrt(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pdm_average_matches_the_duty_cycle_with_late_periods_and_nan() {
        let plan = Plan {
            mode: Mode::Pdm,
            period_ns: 1_000_000,
            high_ns: 300_000,
            reverse: false,
        };
        let mut p = Pulses::default();
        let mut high = 0;
        for i in 0..1000 {
            high += i64::from(p.step(&plan, if i % 7 == 0 { 2_000_000 } else { 1_000_000 }));
        }
        // Each late period counts double while high, so the high count is a little below 300.
        assert!((250..=300).contains(&high), "{high}");
        // A NaN command gives no output (high time 0) and a NaN curr-dc.
        let mut u = Update::new(1);
        let mut s = Settings {
            enable: true,
            value: f64::NAN,
            max_dc: 1.0,
            min_dc: 0.0,
            scale: 1.0,
            offset: 0.0,
            freq: 0.0,
            dither: false,
        };
        let (plan, dc) = u.step(&mut s, 1_000_000);
        assert_eq!(plan.high_ns, 0);
        assert!(dc.is_nan());
    }
}
