//! `stepgen`: software step generator in position mode (LinuxCNC semantics, own code).
//!
//! Two functions per instance, in two threads, as on a real machine:
//! - `stepgen.N.make-pulses` (base thread, e.g. 50 µs) toggles `step` and `dir` with the driver's
//!   timing ([`pulses`]) and counts the steps;
//! - `stepgen.N.update-freq` (servo thread, e.g. 1 ms) plans the step rate from `position-cmd` and the
//!   counted position within `maxvel`/`maxaccel` ([`planner`]), and publishes `counts`,
//!   `position-fb` and `frequency`.
//!
//! They share three numbers — the planned rate, the step count, and the fastest rate the timing
//! allows at the base period — through atomics in one `Arc` (each has a single writer), so neither
//! thread ever waits for the other.
//!
//! | name                      | kind  | type  | dir/access | default | meaning                                  |
//! |---------------------------|-------|-------|------------|---------|------------------------------------------|
//! | `stepgen.N.position-cmd`  | pin   | float | IN         | 0       | commanded position, machine units        |
//! | `stepgen.N.enable`        | pin   | bit   | IN         | FALSE   | FALSE ramps the rate down to 0           |
//! | `stepgen.N.step`          | pin   | bit   | OUT        |         | step output                              |
//! | `stepgen.N.dir`           | pin   | bit   | OUT        |         | direction output, TRUE = negative        |
//! | `stepgen.N.counts`        | pin   | s32   | OUT        |         | steps counted (up − down)                |
//! | `stepgen.N.position-fb`   | pin   | float | OUT        |         | `counts / position-scale`                |
//! | `stepgen.N.position-scale`| param | float | RW         | 1.0     | steps per machine unit                   |
//! | `stepgen.N.maxvel`        | param | float | RW         | 0       | units/s (0 = only the timing limit)      |
//! | `stepgen.N.maxaccel`      | param | float | RW         | 0       | units/s² (0 = none)                      |
//! | `stepgen.N.steplen`       | param | u32   | RW         | 1       | ns the step pulse stays high (at least)  |
//! | `stepgen.N.stepspace`     | param | u32   | RW         | 1       | ns low between pulses (at least)         |
//! | `stepgen.N.dirsetup`      | param | u32   | RW         | 1       | ns from a dir change to the next step    |
//! | `stepgen.N.dirhold`       | param | u32   | RW         | 1       | ns from a step's end to a dir change     |
//! | `stepgen.N.frequency`     | param | float | RO         |         | the planned step rate, steps/s           |
//! | `stepgen.N.make-pulses`   | function |    |            |         | base thread                              |
//! | `stepgen.N.update-freq`   | function |    |            |         | servo thread                             |
//!
//! Timing is honoured in whole base periods: the fastest rate is `1 / ((ceil(steplen/P) +
//! ceil(stepspace/P)) · P)` (10 kHz at P = 50 µs with the defaults), and `maxvel` is capped to it.

mod planner;
mod pulses;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};
pub(crate) use planner::{RateLimits, RatePlanner};
pub(crate) use pulses::{PulseGen, StepTiming};

/// What the two functions of one instance share (single writer each, relaxed atomics: each value is
/// meaningful on its own).
#[derive(Debug, Default)]
struct Shared {
    /// f64 bits, steps/s; written by `update-freq`.
    rate: AtomicU64,
    /// Written by `make-pulses`.
    counts: AtomicI64,
    /// f64 bits, steps/s (0 = not known yet); written by `make-pulses`.
    max_rate: AtomicU64,
}

/// The `stepgen` component.
pub(crate) struct Stepgen;

impl Component for Stepgen {
    const NAME: &'static str = "stepgen";
    const SUMMARY: &'static str =
        "step/dir generator, position mode: pulses in the base thread, planning in the servo thread";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let position_cmd = ctx.pin::<In, f64>("position-cmd")?;
        let enable = ctx.pin::<In, bool>("enable")?;
        let step = ctx.pin::<Out, bool>("step")?;
        let dir = ctx.pin::<Out, bool>("dir")?;
        let counts = ctx.pin::<Out, i32>("counts")?;
        let position_fb = ctx.pin::<Out, f64>("position-fb")?;
        let scale = ctx.param("position-scale", ParamAccess::Rw, 1.0f64)?;
        let maxvel = ctx.param("maxvel", ParamAccess::Rw, 0.0f64)?;
        let maxaccel = ctx.param("maxaccel", ParamAccess::Rw, 0.0f64)?;
        let steplen = ctx.param("steplen", ParamAccess::Rw, 1u32)?;
        let stepspace = ctx.param("stepspace", ParamAccess::Rw, 1u32)?;
        let dirsetup = ctx.param("dirsetup", ParamAccess::Rw, 1u32)?;
        let dirhold = ctx.param("dirhold", ParamAccess::Rw, 1u32)?;
        let frequency = ctx.param("frequency", ParamAccess::Ro, 0.0f64)?;
        let shared = Arc::new(Shared::default());

        let s = shared.clone();
        ctx.function("make-pulses", move |hal| {
            let (step, dir) = (hal.pin(step), hal.pin(dir));
            let timing = [
                hal.param(steplen),
                hal.param(stepspace),
                hal.param(dirsetup),
                hal.param(dirhold),
            ];
            let mut gen = PulseGen::default();
            Box::new(move |cycle| {
                let t = StepTiming {
                    steplen: timing[0].get().into(),
                    stepspace: timing[1].get().into(),
                    dirsetup: timing[2].get().into(),
                    dirhold: timing[3].get().into(),
                };
                s.max_rate
                    .store(t.max_rate(cycle.period_ns).to_bits(), Relaxed);
                let rate = f64::from_bits(s.rate.load(Relaxed));
                let out = gen.update(&t, cycle.now_ns, cycle.dt_s(), rate);
                step.set(out.step);
                dir.set(out.dir);
                s.counts.store(out.counts, Relaxed);
            })
        })?;

        ctx.function("update-freq", move |hal| {
            let (position_cmd, enable) = (hal.pin(position_cmd), hal.pin(enable));
            let (counts, position_fb) = (hal.pin(counts), hal.pin(position_fb));
            let (scale, maxvel, maxaccel) =
                (hal.param(scale), hal.param(maxvel), hal.param(maxaccel));
            let frequency = hal.param(frequency);
            let mut planner = RatePlanner::default();
            Box::new(move |cycle| {
                let raw = shared.counts.load(Relaxed);
                let k = scale.get();
                // A zero or non-finite scale would make every position infinite: hold still.
                let usable = k.is_finite() && k != 0.0;
                let position = if usable { raw as f64 / k } else { 0.0 };
                counts.set(raw as i32);
                position_fb.set(position);
                let max_rate = f64::from_bits(shared.max_rate.load(Relaxed));
                let lim = RateLimits::from_params(
                    maxvel.get() * k.abs(),
                    maxaccel.get() * k.abs(),
                    max_rate,
                );
                let rate = planner.update(
                    position_cmd.get() * k,
                    raw as f64,
                    enable.get() && usable,
                    cycle.dt_s(),
                    &lim,
                );
                shared.rate.store(rate.to_bits(), Relaxed);
                frequency.set(rate);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::pulses::tests::check_waveform;
    use super::*;

    /// Base thread at 50 µs, servo at 1 ms, as in the sim-axis config: the two halves together.
    #[test]
    fn base_and_servo_halves_move_the_axis_to_the_command_within_every_limit() {
        let timing = StepTiming {
            steplen: 20_000,
            stepspace: 20_000,
            dirsetup: 40_000,
            dirhold: 40_000,
        };
        let scale = 200.0; // steps per unit
        let (maxvel, maxaccel) = (20.0, 400.0);
        let mut gen = PulseGen::default();
        let mut planner = RatePlanner::default();
        let mut samples = Vec::new();
        let mut rates = Vec::new();
        let base_ns = 50_000i64;
        let command = |t: f64| if t < 1.0 { 10.0 } else { -5.0 };
        for k in 1..=60_000i64 {
            let now = k * base_ns;
            if k % 20 == 0 {
                let lim = RateLimits::from_params(
                    maxvel * scale,
                    maxaccel * scale,
                    timing.max_rate(50_000),
                );
                let cmd = command(now as f64 * 1e-9) * scale;
                rates.push(planner.update(cmd, gen.counts() as f64, true, 0.001, &lim));
            }
            samples.push((now, gen.update(&timing, now, 50e-6, planner.rate())));
        }
        let rises = check_waveform(&timing, &samples);
        // Ends on -5 units exactly, having travelled 10 up and 15 down.
        assert_eq!(gen.counts(), -1_000);
        assert!(rises >= 5_000, "{rises}");
        let mut prev = 0.0;
        for r in rates {
            assert!(r.abs() <= maxvel * scale + 1e-9);
            assert!((r - prev).abs() <= maxaccel * scale * 0.001 + 1e-9);
            prev = r;
        }
    }
}
