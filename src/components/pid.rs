//! `pid`: the PID loop with feed-forward that closes a position loop (LinuxCNC semantics, own code).
//!
//! Each period, with `e` the error after the `maxerror` limit and the `deadband`:
//!
//! ```text
//! output = bias + Pgain·e + Igain·∫e dt + Dgain·errorD + FF0·command + FF1·command' + FF2·command''
//! ```
//!
//! where `errorD = command' − feedback'` is the derivative of the raw error (before `maxerror` and the
//! deadband, which shape only P and I), limited to ±`maxerrorD`, as in LinuxCNC 2.9; the whole is
//! clamped to ±`maxoutput`. `dt` is the real time since the previous period (several periods after an
//! overrun), so the integral and the derivatives stay right when the thread is late. Derivatives are 0
//! on the first enabled period (and `command''` on the second) instead of a spike from stale history.
//! **Anti-windup:** while the output is saturated, the integrator only integrates errors that drive
//! it out of saturation; it is also clamped to ±`maxerrorI`. A limit of 0 means "no limit", as in
//! LinuxCNC. While `enable` is FALSE the output is 0 and the integrator and history are cleared.
//!
//! | name              | kind | type  | dir | default | meaning                                          |
//! |-------------------|------|-------|-----|---------|--------------------------------------------------|
//! | `pid.N.command`   | pin  | float | IN  | 0       | desired value                                    |
//! | `pid.N.feedback`  | pin  | float | IN  | 0       | measured value                                   |
//! | `pid.N.enable`    | pin  | bit   | IN  | FALSE   | run the loop; FALSE forces output 0              |
//! | `pid.N.Pgain`     | pin  | float | IN  | 1.0     | proportional gain                                |
//! | `pid.N.Igain`     | pin  | float | IN  | 0       | integral gain (per second)                       |
//! | `pid.N.Dgain`     | pin  | float | IN  | 0       | derivative gain (seconds)                        |
//! | `pid.N.bias`      | pin  | float | IN  | 0       | constant added to the output                     |
//! | `pid.N.FF0`       | pin  | float | IN  | 0       | feed-forward of the command                      |
//! | `pid.N.FF1`       | pin  | float | IN  | 0       | feed-forward of the command's derivative (velocity) |
//! | `pid.N.FF2`       | pin  | float | IN  | 0       | feed-forward of its second derivative (acceleration) |
//! | `pid.N.deadband`  | pin  | float | IN  | 0       | errors this small count as 0 (larger ones shrink by it) |
//! | `pid.N.maxoutput` | pin  | float | IN  | 0       | output limit (0 = none)                          |
//! | `pid.N.maxerror`  | pin  | float | IN  | 0       | error limit before the gains (0 = none)          |
//! | `pid.N.maxerrorI` | pin  | float | IN  | 0       | integrator limit (0 = none)                      |
//! | `pid.N.maxerrorD` | pin  | float | IN  | 0       | error-derivative limit (0 = none)                |
//! | `pid.N.maxcmdD`   | pin  | float | IN  | 0       | command-derivative limit (0 = none)              |
//! | `pid.N.maxcmdDD`  | pin  | float | IN  | 0       | command second-derivative limit (0 = none)       |
//! | `pid.N.error`     | pin  | float | OUT |         | command − feedback (the following error)         |
//! | `pid.N.output`    | pin  | float | OUT |         | the loop output                                  |
//! | `pid.N.saturated` | pin  | bit   | OUT |         | TRUE while the output is at ±maxoutput           |
//! | `pid.N.errorI`    | pin  | float | OUT |         | the integrator                                   |
//! | `pid.N.errorD`    | pin  | float | OUT |         | the error derivative                             |
//! | `pid.N.commandD`  | pin  | float | OUT |         | the command derivative                           |
//! | `pid.N.commandDD` | pin  | float | OUT |         | the command second derivative                    |
//! | `pid.N.do-pid-calcs` | function |  |   |         | one loop iteration (servo thread)                |

use rtapi_hal::{In, Out};

use super::{Component, LoadContext, LoadError};

/// The tuning, as read from the pins each period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PidGains {
    pub(crate) pgain: f64,
    pub(crate) igain: f64,
    pub(crate) dgain: f64,
    pub(crate) bias: f64,
    pub(crate) ff0: f64,
    pub(crate) ff1: f64,
    pub(crate) ff2: f64,
    pub(crate) deadband: f64,
    pub(crate) maxoutput: f64,
    pub(crate) maxerror: f64,
    pub(crate) maxerror_i: f64,
    pub(crate) maxerror_d: f64,
    pub(crate) maxcmd_d: f64,
    pub(crate) maxcmd_dd: f64,
}

impl Default for PidGains {
    /// LinuxCNC's defaults: Pgain 1, everything else 0 (no limits).
    fn default() -> Self {
        PidGains {
            pgain: 1.0,
            igain: 0.0,
            dgain: 0.0,
            bias: 0.0,
            ff0: 0.0,
            ff1: 0.0,
            ff2: 0.0,
            deadband: 0.0,
            maxoutput: 0.0,
            maxerror: 0.0,
            maxerror_i: 0.0,
            maxerror_d: 0.0,
            maxcmd_d: 0.0,
            maxcmd_dd: 0.0,
        }
    }
}

/// What one period computes.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct PidOutput {
    pub(crate) output: f64,
    /// `command − feedback`, before limits and deadband.
    pub(crate) error: f64,
    pub(crate) error_i: f64,
    pub(crate) error_d: f64,
    pub(crate) command_d: f64,
    pub(crate) command_dd: f64,
    pub(crate) saturated: bool,
}

/// `v` clamped to ±`limit`, or unchanged when `limit` is 0 (or negative): "no limit".
fn limit(v: f64, limit: f64) -> f64 {
    if limit > 0.0 {
        v.clamp(-limit, limit)
    } else {
        v
    }
}

/// The error after the deadband: 0 inside it, reduced by it outside (so the output has no step at the
/// edge of the band).
pub(crate) fn apply_deadband(e: f64, deadband: f64) -> f64 {
    if deadband <= 0.0 {
        e
    } else if e > deadband {
        e - deadband
    } else if e < -deadband {
        e + deadband
    } else {
        0.0
    }
}

/// The loop's memory between periods.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct PidState {
    error_i: f64,
    prev_feedback: f64,
    prev_command: f64,
    prev_command_d: f64,
    /// Enabled periods seen so far, up to 2: how many derivatives have real history.
    primed: u8,
    /// Sign of the last output's saturation: +1, −1, or 0 when not saturated.
    saturation: i8,
}

impl PidState {
    /// One period. `dt_s` is the real time since the previous one.
    pub(crate) fn step(
        &mut self,
        g: &PidGains,
        command: f64,
        feedback: f64,
        enable: bool,
        dt_s: f64,
    ) -> PidOutput {
        let raw_error = command - feedback;
        if !enable {
            *self = PidState::default();
            return PidOutput {
                error: raw_error,
                ..PidOutput::default()
            };
        }
        let e = apply_deadband(limit(raw_error, g.maxerror), g.deadband);
        let rate = |now: f64, before: f64| {
            if dt_s > 0.0 {
                (now - before) / dt_s
            } else {
                0.0
            }
        };
        let (error_d, command_d) = if self.primed >= 1 {
            (
                // LinuxCNC: the raw error's derivative, command' − feedback', before maxerror and
                // the deadband (they shape P and I only).
                limit(
                    rate(command, self.prev_command) - rate(feedback, self.prev_feedback),
                    g.maxerror_d,
                ),
                limit(rate(command, self.prev_command), g.maxcmd_d),
            )
        } else {
            (0.0, 0.0)
        };
        let command_dd = if self.primed >= 2 {
            limit(rate(command_d, self.prev_command_d), g.maxcmd_dd)
        } else {
            0.0
        };
        // Conditional integration: never push further into the saturation we are in. Written as
        // LinuxCNC's product test, so that a non-finite error (∞·0, NaN) is never integrated: one
        // infinite command must not leave the integrator at ∞ (and the output NaN) for good.
        let integrate = e * f64::from(self.saturation) <= 0.0;
        if integrate && dt_s > 0.0 {
            self.error_i += e * dt_s;
        }
        // Every enabled period, as LinuxCNC: a lowered maxerrorI takes effect at once, even while
        // the integrator is frozen by saturation.
        self.error_i = limit(self.error_i, g.maxerror_i);
        let unclamped = g.bias
            + g.pgain * e
            + g.igain * self.error_i
            + g.dgain * error_d
            + g.ff0 * command
            + g.ff1 * command_d
            + g.ff2 * command_dd;
        let output = limit(unclamped, g.maxoutput);
        let saturated = g.maxoutput > 0.0 && unclamped.abs() >= g.maxoutput;
        self.saturation = if saturated {
            if unclamped > 0.0 {
                1
            } else {
                -1
            }
        } else {
            0
        };
        self.prev_feedback = feedback;
        self.prev_command = command;
        self.prev_command_d = command_d;
        self.primed = (self.primed + 1).min(2);
        PidOutput {
            output,
            error: raw_error,
            error_i: self.error_i,
            error_d,
            command_d,
            command_dd,
            saturated,
        }
    }
}

/// The `pid` component.
pub(crate) struct Pid;

impl Component for Pid {
    const NAME: &'static str = "pid";
    const SUMMARY: &'static str = "PID loop with feed-forward, limits, deadband and anti-windup";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let command = ctx.pin::<In, f64>("command")?;
        let feedback = ctx.pin::<In, f64>("feedback")?;
        let enable = ctx.pin::<In, bool>("enable")?;
        let d = PidGains::default();
        let mut gain = |name: &str, init: f64| ctx.pin_with_default::<In, f64>(name, init);
        let gains = [
            gain("Pgain", d.pgain)?,
            gain("Igain", d.igain)?,
            gain("Dgain", d.dgain)?,
            gain("bias", d.bias)?,
            gain("FF0", d.ff0)?,
            gain("FF1", d.ff1)?,
            gain("FF2", d.ff2)?,
            gain("deadband", d.deadband)?,
            gain("maxoutput", d.maxoutput)?,
            gain("maxerror", d.maxerror)?,
            gain("maxerrorI", d.maxerror_i)?,
            gain("maxerrorD", d.maxerror_d)?,
            gain("maxcmdD", d.maxcmd_d)?,
            gain("maxcmdDD", d.maxcmd_dd)?,
        ];
        let error = ctx.pin::<Out, f64>("error")?;
        let output = ctx.pin::<Out, f64>("output")?;
        let saturated = ctx.pin::<Out, bool>("saturated")?;
        let error_i = ctx.pin::<Out, f64>("errorI")?;
        let error_d = ctx.pin::<Out, f64>("errorD")?;
        let command_d = ctx.pin::<Out, f64>("commandD")?;
        let command_dd = ctx.pin::<Out, f64>("commandDD")?;
        ctx.function("do-pid-calcs", move |hal| {
            let (command, feedback, enable) =
                (hal.pin(command), hal.pin(feedback), hal.pin(enable));
            let g = gains.map(|k| hal.pin(k));
            let (error, output, saturated) = (hal.pin(error), hal.pin(output), hal.pin(saturated));
            let (error_i, error_d) = (hal.pin(error_i), hal.pin(error_d));
            let (command_d, command_dd) = (hal.pin(command_d), hal.pin(command_dd));
            let mut state = PidState::default();
            Box::new(move |cycle| {
                let gains = PidGains {
                    pgain: g[0].get(),
                    igain: g[1].get(),
                    dgain: g[2].get(),
                    bias: g[3].get(),
                    ff0: g[4].get(),
                    ff1: g[5].get(),
                    ff2: g[6].get(),
                    deadband: g[7].get(),
                    maxoutput: g[8].get(),
                    maxerror: g[9].get(),
                    maxerror_i: g[10].get(),
                    maxerror_d: g[11].get(),
                    maxcmd_d: g[12].get(),
                    maxcmd_dd: g[13].get(),
                };
                let out = state.step(
                    &gains,
                    command.get(),
                    feedback.get(),
                    enable.get(),
                    cycle.dt_s(),
                );
                error.set(out.error);
                output.set(out.output);
                saturated.set(out.saturated);
                error_i.set(out.error_i);
                error_d.set(out.error_d);
                command_d.set(out.command_d);
                command_dd.set(out.command_dd);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT: f64 = 0.001;

    fn gains(p: f64, i: f64, d: f64) -> PidGains {
        PidGains {
            pgain: p,
            igain: i,
            dgain: d,
            ..PidGains::default()
        }
    }

    #[test]
    fn one_period_by_hand() {
        let g = gains(2.0, 10.0, 0.01);
        let mut s = PidState::default();
        // First period: no derivative history, so only P and I: 2·1 + 10·(1·0.001).
        let o = s.step(&g, 1.0, 0.0, true, DT);
        assert!((o.output - 2.01).abs() < 1e-12, "{o:?}");
        // Error steps from 1 to 3: D adds 0.01·(2/0.001) = 20; I is now 0.001 + 0.003.
        let o = s.step(&g, 3.0, 0.0, true, DT);
        assert!((o.error_d - 2000.0).abs() < 1e-9);
        assert!(
            (o.output - (2.0 * 3.0 + 10.0 * 0.004 + 20.0)).abs() < 1e-9,
            "{o:?}"
        );
        assert_eq!(o.error, 3.0);
    }

    #[test]
    fn p_step_response_on_an_integrating_plant_is_the_known_exponential() {
        // Velocity-mode drive: x' = u. With u = Kp·(1 − x), x_k = 1 − (1 − Kp·dt)^k.
        let kp = 50.0;
        let g = gains(kp, 0.0, 0.0);
        let mut s = PidState::default();
        let mut x = 0.0;
        for k in 1..=200 {
            let u = s.step(&g, 1.0, x, true, DT).output;
            x += u * DT;
            let expected = 1.0 - (1.0 - kp * DT).powi(k);
            assert!((x - expected).abs() < 1e-9, "k={k}: {x} vs {expected}");
        }
        // ~63 % after one time constant (20 ms), settled after 10.
        assert!((1.0 - (1.0f64 - kp * DT).powi(20) - 0.64).abs() < 0.01);
        assert!((x - 1.0).abs() < 1e-4);
    }

    #[test]
    fn pi_removes_the_steady_state_error_against_a_constant_load() {
        // x' = u − 0.5 (a constant disturbance): P alone settles at an offset, PI at zero.
        let run = |g: PidGains| {
            let mut s = PidState::default();
            let mut x = 0.0;
            for _ in 0..5_000 {
                let u = s.step(&g, 1.0, x, true, DT).output;
                x += (u - 0.5) * DT;
            }
            x
        };
        let p_only = run(gains(20.0, 0.0, 0.0));
        assert!((p_only - (1.0 - 0.5 / 20.0)).abs() < 1e-6, "{p_only}");
        let pi = run(gains(20.0, 100.0, 0.0));
        assert!((pi - 1.0).abs() < 1e-6, "{pi}");
    }

    #[test]
    fn ff1_tracks_a_ramp_without_error() {
        let g = PidGains {
            ff1: 1.0,
            ..gains(100.0, 0.0, 0.0)
        };
        let mut s = PidState::default();
        let mut x = 0.0;
        let mut worst: f64 = 0.0;
        for k in 0..2_000 {
            let cmd = 5.0 * k as f64 * DT;
            let o = s.step(&g, cmd, x, true, DT);
            x += o.output * DT;
            if k > 500 {
                worst = worst.max(o.error.abs());
            }
        }
        assert!(worst < 1e-9, "{worst}");
    }

    #[test]
    fn limits_deadband_and_anti_windup() {
        let g = PidGains {
            maxoutput: 1.0,
            ..gains(10.0, 100.0, 0.0)
        };
        let mut s = PidState::default();
        let mut o = PidOutput::default();
        for _ in 0..1_000 {
            o = s.step(&g, 1.0, 0.0, true, DT);
        }
        assert_eq!(o.output, 1.0);
        assert!(o.saturated);
        // The integrator froze after the first period: output went straight to the limit.
        assert!(o.error_i <= 2.0 * DT, "{}", o.error_i);
        // Errors that pull out of saturation still integrate.
        let o2 = s.step(&g, -1.0, 0.0, true, DT);
        assert!(o2.error_i < o.error_i);

        let g = PidGains {
            maxerror_i: 0.01,
            ..gains(0.0, 1.0, 0.0)
        };
        let mut s = PidState::default();
        for _ in 0..1_000 {
            o = s.step(&g, 1.0, 0.0, true, DT);
        }
        assert_eq!(o.error_i, 0.01);

        assert_eq!(apply_deadband(0.05, 0.1), 0.0);
        assert!((apply_deadband(0.15, 0.1) - 0.05).abs() < 1e-12);
        assert!((apply_deadband(-0.15, 0.1) + 0.05).abs() < 1e-12);
        let g = PidGains {
            maxerror: 0.5,
            ..gains(1.0, 0.0, 0.0)
        };
        let o = PidState::default().step(&g, 3.0, 0.0, true, DT);
        assert_eq!((o.output, o.error), (0.5, 3.0));
    }

    #[test]
    fn disable_zeroes_output_and_history_and_late_periods_use_real_dt() {
        let g = gains(1.0, 1.0, 1.0);
        let mut s = PidState::default();
        s.step(&g, 1.0, 0.0, true, DT);
        let o = s.step(&g, 1.0, 0.0, false, DT);
        assert_eq!((o.output, o.error), (0.0, 1.0));
        assert_eq!(s, PidState::default());
        // After re-enabling, no derivative kick from the history before the disable.
        let o = s.step(&g, 5.0, 0.0, true, DT);
        assert_eq!(o.error_d, 0.0);
        // A period 3× as long integrates 3× as much and differentiates over 3 ms.
        let mut a = PidState::default();
        a.step(&gains(0.0, 1.0, 0.0), 0.0, 0.0, true, DT);
        let o = a.step(&gains(0.0, 1.0, 1.0), 3.0, 0.0, true, 3.0 * DT);
        assert!((o.error_i - 0.009).abs() < 1e-12);
        assert!((o.error_d - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn command_derivatives_feed_forward() {
        let g = PidGains {
            ff2: 1.0,
            ..gains(0.0, 0.0, 0.0)
        };
        let mut s = PidState::default();
        // cmd = t²/2 → cmd'' = 1 from the third period on.
        let mut outs = Vec::new();
        for k in 0..5 {
            let t = k as f64 * DT;
            outs.push(s.step(&g, 0.5 * t * t, 0.0, true, DT).command_dd);
        }
        assert_eq!(outs[0], 0.0);
        assert_eq!(outs[1], 0.0);
        for v in &outs[2..] {
            assert!((v - 1.0).abs() < 1e-6, "{outs:?}");
        }
    }
}
