//! `limit3`: follows `in` within a range, a velocity limit and an acceleration limit.
//!
//! The output must agree with LinuxCNC 2.9's `limit3` period by period (the differential test in
//! `tests/linuxcnc_diff.rs` drives both), so the planner below makes the same decisions, in the same
//! order, with the same floating-point operations. What it does each period, in words:
//!
//! 1. The goal is `in` (or 0 while `enable` is FALSE). With `load` the output jumps to the goal clamped
//!    to `min…max` and nothing else happens.
//! 2. From the output's current velocity it works out the window of positions reachable this period
//!    (`maxa` and `maxv` permitting), where the output would come to rest braking at `maxa` from either
//!    edge of that window, and where output and goal would be once their velocities match.
//! 3. It picks what to steer for: a bound it would otherwise overrun, a bound the goal is beyond and
//!    still moving away from, or else the goal itself (position *and* velocity).
//! 4. It then lands on that target exactly when the target is within reach and the velocities nearly
//!    agree; accelerates flat out toward it while that cannot overshoot; eases in with a uniform
//!    acceleration when the landing is less than `smooth-steps` periods away; brakes flat out when
//!    it would overshoot; and otherwise coasts in the middle of the window.
//!
//! Odd inputs behave as LinuxCNC's on x86-64: a NaN anywhere makes every comparison false, so the
//! planner falls through to coasting; the whole-period count in step 4 is converted the way the
//! x86 `cvttsd2si` instruction does (NaN and out-of-range values become `i32::MIN`).

use rtapi_hal::{In, Out};

use crate::components::{Component, LoadContext, LoadError};

/// Slack for the rounding of the divisions, as LinuxCNC uses it.
const SLACK: f64 = 1e-9;

/// The limits and switches of one period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits3 {
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) maxv: f64,
    pub(crate) maxa: f64,
    pub(crate) smooth_steps: u32,
    pub(crate) enable: bool,
    pub(crate) load: bool,
}

impl Default for Limits3 {
    fn default() -> Self {
        Limits3 {
            min: -1e20,
            max: 1e20,
            maxv: 1e20,
            maxa: 1e20,
            smooth_steps: 2,
            enable: true,
            load: false,
        }
    }
}

/// `limit3`'s memory: the output of the period before and the goal of the period before.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Planner3 {
    prev_out: f64,
    prev_goal: f64,
}

/// A double truncated to an `int` the way x86-64 does it: out-of-range and NaN give `i32::MIN`.
fn truncate_like_x86(x: f64) -> i32 {
    if x.is_nan() || x >= 2_147_483_648.0 || x <= -2_147_483_649.0 {
        i32::MIN
    } else {
        x as i32
    }
}

/// +1 for zero and positive values, −1 otherwise (NaN included), as LinuxCNC's sign helper.
fn sign(x: f64) -> i32 {
    if x >= 0.0 {
        1
    } else {
        -1
    }
}

impl Planner3 {
    /// One period of `dt` seconds. `out` is the output pin as it stands (last period's result).
    pub(crate) fn step(&mut self, input: f64, out: f64, lim: &Limits3, dt: f64) -> f64 {
        let goal = if lim.enable { input } else { 0.0 };
        let next = if lim.load {
            let held = lim.max.min(lim.min.max(goal));
            self.prev_out = out;
            self.prev_goal = held;
            return held;
        } else {
            self.plan(goal, out, lim, dt)
        };
        self.prev_out = out;
        self.prev_goal = goal;
        next
    }

    fn plan(&self, goal: f64, out: f64, lim: &Limits3, dt: f64) -> f64 {
        let (maxv, maxa) = (lim.maxv, lim.maxa);
        let goal_vel = (goal - self.prev_goal) / dt;
        let vel = (out - self.prev_out) / dt;

        // The velocities and positions reachable by the end of this period.
        let vel_lo = (vel + -maxa * dt).max(-maxv);
        let vel_hi = (vel + maxa * dt).min(maxv);
        let pos_lo = out + vel_lo * dt;
        let pos_hi = out + vel_hi * dt;
        let reachable = |p: f64| p <= pos_hi && p >= pos_lo;

        // Where the output comes to rest braking at maxa from either edge (one period late).
        let brake_hi = ((0.0 - vel_hi) / maxa).abs() + dt;
        let brake_lo = ((0.0 - vel_lo) / maxa).abs() + dt;
        let rest_hi = out + (0.0 + vel_hi) / 2.0 * brake_hi;
        let rest_lo = out + (0.0 + vel_lo) / 2.0 * brake_lo;

        // Where output and goal are once the output's velocity has matched the goal's (one period
        // early: the output trails the goal by a period).
        let match_hi = ((goal_vel - vel_hi) / maxa).abs() - dt;
        let match_lo = ((goal_vel - vel_lo) / maxa).abs() - dt;
        let out_at_match_hi = pos_hi + (goal_vel + vel_hi) / 2.0 * match_hi;
        let out_at_match_lo = pos_lo + (goal_vel + vel_lo) / 2.0 * match_lo;
        let goal_at_match_hi = goal + goal_vel * match_hi;
        let goal_at_match_lo = goal + goal_vel * match_lo;

        // What to steer for: a bound, at rest; or the goal, at its velocity.
        struct Target {
            lo: f64,
            hi: f64,
            now: f64,
            before: f64,
            vel_gap: f64,
            ends_lo: f64,
            ends_hi: f64,
        }
        let at_bound = |b: f64| Target {
            lo: b,
            hi: b,
            now: b,
            before: b,
            vel_gap: -vel,
            ends_lo: rest_lo,
            ends_hi: rest_hi,
        };
        let tgt = if rest_hi > lim.max + SLACK && !reachable(lim.max) {
            at_bound(lim.max)
        } else if rest_lo < lim.min - SLACK && !reachable(lim.min) {
            at_bound(lim.min)
        } else if goal >= lim.max && goal_at_match_hi > out_at_match_hi {
            at_bound(lim.max)
        } else if goal <= lim.min && goal_at_match_lo < out_at_match_lo {
            at_bound(lim.min)
        } else {
            Target {
                lo: goal_at_match_lo,
                hi: goal_at_match_hi,
                now: goal,
                before: self.prev_goal,
                vel_gap: vel - goal_vel,
                ends_lo: out_at_match_lo,
                ends_hi: out_at_match_hi,
            }
        };

        // Time to close the position gap at the mean of the velocity gap.
        let gap = out - tgt.before;
        let t = if tgt.vel_gap.abs() < SLACK {
            0.0
        } else {
            gap / ((tgt.vel_gap + 0.0) / 2.0)
        };

        if reachable(tgt.now) && t.abs() <= dt {
            return tgt.now;
        }
        if tgt.ends_hi < tgt.hi + SLACK {
            return pos_hi;
        }
        if tgt.ends_lo > tgt.lo - SLACK {
            return pos_lo;
        }
        if t.abs() < dt * f64::from(lim.smooth_steps) {
            // Whole periods to the landing, rounded away from zero; one uniform acceleration.
            let s = sign(t);
            let periods = truncate_like_x86((t - SLACK * f64::from(s)) / dt + f64::from(s));
            let ti = f64::from(periods) * dt;
            let acc = (tgt.vel_gap - 0.0) / ti;
            let v = vel + acc * dt;
            return pos_hi.min(pos_lo.max(out + v * dt));
        }
        if tgt.hi + SLACK < tgt.ends_hi && tgt.before > out {
            return pos_lo;
        }
        if tgt.lo - SLACK > tgt.ends_lo && tgt.before < out {
            return pos_hi;
        }
        (pos_lo + pos_hi) / 2.0
    }
}

/// `limit3`: position, velocity and acceleration limits.
pub(crate) struct Limit3;

impl Component for Limit3 {
    const NAME: &'static str = "limit3";
    const SUMMARY: &'static str =
        "follows a float within a range, a velocity and an acceleration limit";
    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let d = Limits3::default();
        let input = ctx.pin::<In, f64>("in")?;
        let enable = ctx.pin_with_default::<In, bool>("enable", d.enable)?;
        let out = ctx.pin::<Out, f64>("out")?;
        let load = ctx.pin::<In, bool>("load")?;
        let min = ctx.pin_with_default::<In, f64>("min", d.min)?;
        let max = ctx.pin_with_default::<In, f64>("max", d.max)?;
        let maxv = ctx.pin_with_default::<In, f64>("maxv", d.maxv)?;
        let maxa = ctx.pin_with_default::<In, f64>("maxa", d.maxa)?;
        let smooth = ctx.pin_with_default::<In, u32>("smooth-steps", d.smooth_steps)?;
        ctx.function("", move |hal| {
            let (input, enable, out, load) =
                (hal.pin(input), hal.pin(enable), hal.pin(out), hal.pin(load));
            let (min, max, maxv, maxa) = (hal.pin(min), hal.pin(max), hal.pin(maxv), hal.pin(maxa));
            let smooth = hal.pin(smooth);
            let mut planner = Planner3::default();
            Box::new(move |cycle| {
                let lim = Limits3 {
                    min: min.get(),
                    max: max.get(),
                    maxv: maxv.get(),
                    maxa: maxa.get(),
                    smooth_steps: smooth.get(),
                    enable: enable.get(),
                    load: load.get(),
                };
                let dt = cycle.period_ns as f64 * 1e-9;
                out.set(planner.step(input.get(), out.get(), &lim, dt));
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::components::Harness;

    const DT: f64 = 1e-3;

    fn run(planner: &mut Planner3, out: &mut f64, input: f64, lim: &Limits3, n: usize) -> Vec<f64> {
        (0..n)
            .map(|_| {
                *out = planner.step(input, *out, lim, DT);
                *out
            })
            .collect()
    }

    /// Velocities and accelerations of a trace of outputs, per second.
    fn derivatives(xs: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let v: Vec<f64> = xs.windows(2).map(|w| (w[1] - w[0]) / DT).collect();
        let a: Vec<f64> = v.windows(2).map(|w| (w[1] - w[0]) / DT).collect();
        (v, a)
    }

    #[test]
    fn a_step_is_followed_within_maxv_and_maxa_and_lands_exactly() {
        let lim = Limits3 {
            maxv: 100.0,
            maxa: 10_000.0,
            ..Limits3::default()
        };
        let (mut p, mut out) = (Planner3::default(), 0.0);
        let mut xs = vec![0.0];
        xs.extend(run(&mut p, &mut out, 5.0, &lim, 400));
        let (v, a) = derivatives(&xs);
        let vmax = v.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let amax = a.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        assert!(vmax <= 100.0 * (1.0 + 1e-9), "velocity {vmax}");
        assert!(vmax > 99.0, "reaches maxv: {vmax}");
        assert!(amax <= 10_000.0 * (1.0 + 1e-6), "acceleration {amax}");
        assert_eq!(*xs.last().unwrap(), 5.0, "lands on the input exactly");
        // Never past the target.
        assert!(xs.iter().all(|&x| x <= 5.0 + 1e-12));
    }

    #[test]
    fn bounds_hold_and_disable_returns_to_zero() {
        let mut lim = Limits3 {
            min: -1.0,
            max: 2.0,
            maxv: 50.0,
            maxa: 5_000.0,
            ..Limits3::default()
        };
        let (mut p, mut out) = (Planner3::default(), 0.0);
        let xs = run(&mut p, &mut out, 10.0, &lim, 300);
        assert!(
            xs.iter().all(|&x| x <= 2.0 + 1e-9),
            "max {:?}",
            xs.iter().cloned().fold(f64::MIN, f64::max)
        );
        assert_eq!(out, 2.0);
        lim.enable = false;
        let xs = run(&mut p, &mut out, 10.0, &lim, 300);
        assert!(xs.iter().all(|&x| x >= -1e-9));
        assert_eq!(out, 0.0);
        // load jumps, clamped, ignoring maxv and maxa.
        lim.enable = true;
        lim.load = true;
        assert_eq!(p.step(-7.0, out, &lim, DT), -1.0);
    }

    #[test]
    fn truncation_matches_x86() {
        assert_eq!(truncate_like_x86(2.9), 2);
        assert_eq!(truncate_like_x86(-2.9), -2);
        assert_eq!(truncate_like_x86(f64::NAN), i32::MIN);
        assert_eq!(truncate_like_x86(3e9), i32::MIN);
        assert_eq!(truncate_like_x86(-3e9), i32::MIN);
        assert_eq!(truncate_like_x86(-2_147_483_648.5), i32::MIN);
        assert_eq!(truncate_like_x86(2_147_483_647.5), i32::MAX);
    }

    #[test]
    fn limit3_through_the_hal() {
        let mut h = Harness::new("cat-limit3").unwrap();
        h.loadrt("limit3 names=lim").unwrap();
        h.start().unwrap();
        assert_eq!(h.functions().collect::<Vec<_>>(), ["lim"]);
        assert_eq!(h.get_f64("lim.maxa").unwrap(), 1e20);
        assert_eq!(h.get("lim.smooth-steps").unwrap(), rtapi_hal::Value::U32(2));
        assert_eq!(h.get("lim.enable").unwrap(), rtapi_hal::Value::Bit(true));
        h.set("lim.maxv", "10").unwrap();
        h.set("lim.maxa", "1000").unwrap();
        h.set("lim.in", "1").unwrap();
        let mut last = 0.0;
        for _ in 0..500 {
            h.step(1_000_000);
            let x = h.get_f64("lim.out").unwrap();
            assert!((x - last).abs() <= 10.0 * 1e-3 * (1.0 + 1e-9));
            last = x;
        }
        assert_eq!(last, 1.0);
    }
}
