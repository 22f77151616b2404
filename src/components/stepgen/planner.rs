//! The servo-thread half of stepgen: picks the step rate for the next servo period so the counted
//! position follows the commanded one, within the velocity and acceleration limits.
//!
//! Each period, with `e` = command − counted position and `vc` the command's velocity:
//! - the rate that would close `e` in one period is `vc + e/dt` (dead-beat);
//! - the part that closes `e` is capped at the speed `v` from which the axis can still stop on the
//!   target at `maxaccel` after running one more period at `v` (`v·dt + v²/2·maxaccel = |e|`) — so a
//!   big step is a trapezoid, not an overshoot;
//! - the result is clamped to ±`maxvel`, then the rate moves toward it by at most `maxaccel·dt`.
//!
//! Everything is in steps; the component converts with `position-scale`.

/// Limits in steps/s and steps/s²; `f64::INFINITY` means "none".
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateLimits {
    pub(crate) maxvel: f64,
    pub(crate) maxaccel: f64,
}

impl RateLimits {
    /// From LinuxCNC-style params, where 0 (or less) means "no limit". `max_rate` is the step rate
    /// the pulse timing allows (see `StepTiming::max_rate`), which bounds `maxvel` whatever it says.
    pub(crate) fn from_params(maxvel: f64, maxaccel: f64, max_rate: f64) -> Self {
        let or_none = |v: f64| if v > 0.0 { v } else { f64::INFINITY };
        let cap = if max_rate > 0.0 {
            max_rate
        } else {
            f64::INFINITY
        };
        RateLimits {
            maxvel: or_none(maxvel).min(cap),
            maxaccel: or_none(maxaccel),
        }
    }
}

/// The planner's state.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct RatePlanner {
    rate: f64,
    prev_command: Option<f64>,
}

impl RatePlanner {
    /// The rate of the current plan, steps/s.
    #[cfg(test)]
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// One servo period: `command` and `position` in steps, `dt_s` since the previous period.
    /// While `enable` is FALSE the rate ramps down to 0 at `maxaccel`. Returns the new rate.
    pub(crate) fn update(
        &mut self,
        command: f64,
        position: f64,
        enable: bool,
        dt_s: f64,
        lim: &RateLimits,
    ) -> f64 {
        if dt_s.is_nan() || dt_s <= 0.0 {
            return self.rate;
        }
        let vc = self
            .prev_command
            .map_or(0.0, |prev| (command - prev) / dt_s);
        self.prev_command = Some(command);
        let wanted = if enable {
            let e = command - position;
            let mut closing = e.abs() / dt_s;
            if lim.maxaccel.is_finite() {
                // The largest v with v·dt (this period) + v²/2a (braking) ≤ |e|.
                let a = lim.maxaccel;
                closing = closing.min(a * ((dt_s * dt_s + 2.0 * e.abs() / a).sqrt() - dt_s));
            }
            vc + closing.copysign(e)
        } else {
            0.0
        };
        let wanted = wanted.clamp(-lim.maxvel, lim.maxvel);
        let dv = lim.maxaccel * dt_s;
        let next = self.rate + (wanted - self.rate).clamp(-dv, dv);
        self.rate = if next.is_finite() { next } else { 0.0 };
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: f64 = 0.001;

    /// The planner against an ideal motor (the position integrates the rate exactly).
    fn run(commands: impl Fn(usize) -> f64, n: usize, lim: &RateLimits) -> Vec<(f64, f64)> {
        let mut p = RatePlanner::default();
        let mut pos = 0.0;
        let mut out = Vec::new();
        for k in 0..n {
            let rate = p.update(commands(k), pos, true, DT, lim);
            pos += rate * DT;
            out.push((rate, pos));
        }
        out
    }

    #[test]
    fn a_step_becomes_a_limited_trapezoid_that_lands_on_target() {
        let lim = RateLimits::from_params(5_000.0, 50_000.0, 0.0);
        let trace = run(|_| 1_000.0, 2_000, &lim);
        let mut prev_rate = 0.0;
        let mut peak: f64 = 0.0;
        for &(rate, pos) in &trace {
            assert!(rate.abs() <= 5_000.0 + 1e-9);
            assert!((rate - prev_rate).abs() <= 50_000.0 * DT + 1e-9);
            assert!(pos <= 1_000.0 + 1.0, "overshoot to {pos}");
            peak = peak.max(rate);
            prev_rate = rate;
        }
        assert_eq!(peak, 5_000.0);
        let (rate, pos) = *trace.last().unwrap();
        assert!(
            (pos - 1_000.0).abs() < 0.5 && rate.abs() < 1.0,
            "{pos} {rate}"
        );
    }

    #[test]
    fn follows_a_ramp_with_no_lag_once_up_to_speed() {
        let lim = RateLimits::from_params(0.0, 0.0, 0.0);
        let trace = run(|k| 3.0 * k as f64, 100, &lim);
        // Dead-beat: after two periods the position is where the command was one period earlier.
        for (k, &(_, pos)) in trace.iter().enumerate().skip(2) {
            assert!((pos - 3.0 * (k + 1) as f64).abs() < 1e-9, "{k}: {pos}");
        }
    }

    #[test]
    fn disable_ramps_down_and_timing_caps_maxvel() {
        let lim = RateLimits::from_params(100_000.0, 10_000.0, 2_000.0);
        assert_eq!(lim.maxvel, 2_000.0);
        let mut p = RatePlanner::default();
        for _ in 0..1_000 {
            p.update(1e9, 0.0, true, DT, &lim);
        }
        assert_eq!(p.rate(), 2_000.0);
        let r = p.update(1e9, 0.0, false, DT, &lim);
        assert_eq!(r, 2_000.0 - 10.0);
        for _ in 0..300 {
            p.update(1e9, 0.0, false, DT, &lim);
        }
        assert_eq!(p.rate(), 0.0);
        // A zero dt changes nothing; NaN never sticks.
        assert_eq!(p.update(5.0, 0.0, true, 0.0, &lim), 0.0);
        let mut p = RatePlanner::default();
        p.update(
            f64::NAN,
            0.0,
            true,
            DT,
            &RateLimits::from_params(0.0, 0.0, 0.0),
        );
        assert_eq!(p.rate(), 0.0);
    }
}
