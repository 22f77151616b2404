//! The base-thread half of stepgen: turns a step rate into step/dir edges that respect the driver's
//! timing, in real nanoseconds.
//!
//! Invariants (checked by the tests below on recorded waveforms):
//! - a step pulse stays high at least `steplen` ns and the line stays low at least `stepspace` ns
//!   (and at least one period) between pulses;
//! - `dir` changes only while `step` is low, at least `dirhold` ns after the last falling edge;
//! - a rising edge comes at least `dirsetup` ns after the last `dir` change (same period only if
//!   `dirsetup` is 0);
//! - `counts` changes by exactly ±1 at each rising edge, in the direction `dir` shows.
//!
//! Times come from the thread's wake time (`Cycle::now_ns`), not from counting periods, so a late or
//! early wake can only make a pulse longer, never shorter than asked.

/// Driver timing, in ns (LinuxCNC's `steplen`, `stepspace`, `dirsetup`, `dirhold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct StepTiming {
    pub(crate) steplen: u64,
    pub(crate) stepspace: u64,
    pub(crate) dirsetup: u64,
    pub(crate) dirhold: u64,
}

impl StepTiming {
    /// The fastest step rate (steps/s) a thread of period `period_ns` can produce with this timing:
    /// high for `ceil(steplen / period)` periods, low for `ceil(stepspace / period)`, each at least 1.
    pub(crate) fn max_rate(&self, period_ns: u64) -> f64 {
        if period_ns == 0 {
            return 0.0;
        }
        let periods = |ns: u64| ns.div_ceil(period_ns).max(1);
        1e9 / ((periods(self.steplen) + periods(self.stepspace)) * period_ns) as f64
    }
}

/// Pending steps are capped here: when timing holds steps back, the rate planner (which closes its
/// loop on `counts`) asks again, so a large backlog would only cause overshoot.
const MAX_PENDING: f64 = 2.0;

/// Long enough ago that every timing constraint is met at start.
const LONG_AGO: i64 = i64::MIN / 4;

/// The pulse generator's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PulseGen {
    /// Steps owed (signed, fractional): the integral of the rate not yet turned into steps.
    accum: f64,
    step: bool,
    /// TRUE while moving negative (LinuxCNC's convention).
    dir: bool,
    last_rise: i64,
    last_fall: i64,
    last_dir_change: i64,
    counts: i64,
}

impl Default for PulseGen {
    fn default() -> Self {
        PulseGen {
            accum: 0.0,
            step: false,
            dir: false,
            last_rise: LONG_AGO,
            last_fall: LONG_AGO,
            last_dir_change: LONG_AGO,
            counts: 0,
        }
    }
}

/// The outputs after one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PulseOut {
    pub(crate) step: bool,
    pub(crate) dir: bool,
    pub(crate) counts: i64,
}

impl PulseGen {
    fn out(&self) -> PulseOut {
        PulseOut {
            step: self.step,
            dir: self.dir,
            counts: self.counts,
        }
    }

    /// Steps counted so far (up minus down).
    #[cfg(test)]
    pub(crate) fn counts(&self) -> i64 {
        self.counts
    }

    /// One base period at wake time `now_ns`, `dt_s` after the previous one, asked to run at `rate`
    /// steps/s (negative = backwards).
    pub(crate) fn update(&mut self, t: &StepTiming, now_ns: i64, dt_s: f64, rate: f64) -> PulseOut {
        let owed = self.accum + rate * dt_s;
        if owed.is_finite() {
            self.accum = owed.clamp(-MAX_PENDING, MAX_PENDING);
        }
        let since = |then: i64| u64::try_from(now_ns.saturating_sub(then)).unwrap_or(0);
        if self.step {
            if since(self.last_rise) >= t.steplen {
                self.step = false;
                self.last_fall = now_ns;
            }
            return self.out();
        }
        let wanted_dir = if self.accum >= 1.0 {
            false
        } else if self.accum <= -1.0 {
            true
        } else {
            return self.out();
        };
        if wanted_dir != self.dir {
            if since(self.last_fall) < t.dirhold {
                return self.out();
            }
            self.dir = wanted_dir;
            self.last_dir_change = now_ns;
        }
        if since(self.last_fall) >= t.stepspace && since(self.last_dir_change) >= t.dirsetup {
            self.step = true;
            self.last_rise = now_ns;
            let delta = if self.dir { -1 } else { 1 };
            self.counts += delta;
            self.accum -= delta as f64;
        }
        self.out()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Checks every timing invariant on a waveform sampled at the given times.
    pub(crate) fn check_waveform(t: &StepTiming, samples: &[(i64, PulseOut)]) -> u64 {
        let mut rises = 0;
        let (mut last_rise, mut last_fall, mut last_dir) = (LONG_AGO, LONG_AGO, LONG_AGO);
        let mut prev = PulseOut {
            step: false,
            dir: false,
            counts: 0,
        };
        for &(now, s) in samples {
            if s.dir != prev.dir {
                assert!(!s.step && !prev.step, "dir changed during a pulse at {now}");
                assert!(
                    now - last_fall >= t.dirhold as i64,
                    "dirhold broken at {now}"
                );
                last_dir = now;
            }
            if s.step && !prev.step {
                rises += 1;
                assert!(
                    now - last_fall >= t.stepspace as i64,
                    "stepspace broken at {now}"
                );
                assert!(
                    now - last_dir >= t.dirsetup as i64,
                    "dirsetup broken at {now}"
                );
                assert_eq!(s.counts - prev.counts, if s.dir { -1 } else { 1 });
                last_rise = now;
            } else {
                assert_eq!(
                    s.counts, prev.counts,
                    "count without a rising edge at {now}"
                );
            }
            if !s.step && prev.step {
                assert!(
                    now - last_rise >= t.steplen as i64,
                    "pulse shorter than steplen at {now}"
                );
                last_fall = now;
            }
            prev = s;
        }
        rises
    }

    const P: i64 = 50_000;

    #[test]
    fn max_rate_rounds_timing_up_to_whole_periods() {
        let t = StepTiming {
            steplen: 1,
            stepspace: 1,
            ..Default::default()
        };
        assert_eq!(t.max_rate(50_000), 10_000.0);
        let t = StepTiming {
            steplen: 60_000,
            stepspace: 50_000,
            ..Default::default()
        };
        assert_eq!(t.max_rate(50_000), 1e9 / 150_000.0);
        assert_eq!(t.max_rate(0), 0.0);
    }

    #[test]
    fn constant_rate_gives_the_right_step_count() {
        let t = StepTiming {
            steplen: 5_000,
            stepspace: 5_000,
            dirsetup: 10_000,
            dirhold: 10_000,
        };
        let mut g = PulseGen::default();
        let mut samples = Vec::new();
        // 2 000 steps/s for 1 s at 50 µs.
        for k in 1..=20_000 {
            let now = k * P;
            samples.push((now, g.update(&t, now, 50e-6, 2_000.0)));
        }
        let rises = check_waveform(&t, &samples);
        // Within one step of rate × time (the last fraction may still be owed).
        assert!((g.counts() - 2_000).abs() <= 1, "{}", g.counts());
        assert_eq!(rises as i64, g.counts());
        // Backwards too.
        let mut g = PulseGen::default();
        for k in 1..=20_000 {
            g.update(&t, k * P, 50e-6, -1_234.0);
        }
        assert!((g.counts() + 1_234).abs() <= 1, "{}", g.counts());
    }

    #[test]
    fn timing_holds_under_random_rates_and_jittery_wakes() {
        let t = StepTiming {
            steplen: 120_000,
            stepspace: 70_000,
            dirsetup: 90_000,
            dirhold: 160_000,
        };
        let mut g = PulseGen::default();
        let mut samples = Vec::new();
        // Deterministic xorshift: rates that reverse often, wakes ±20 µs off the timeline.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut rate = 0.0;
        let mut prev_now = 0;
        for k in 1..=200_000i64 {
            if k % 20 == 0 {
                rate = (rnd() % 8_000) as f64 - 4_000.0;
            }
            let now = k * P + (rnd() % 40_000) as i64 - 20_000;
            let now = now.max(prev_now + 1);
            let dt = (now - prev_now) as f64 * 1e-9;
            prev_now = now;
            samples.push((now, g.update(&t, now, dt, rate)));
        }
        let rises = check_waveform(&t, &samples);
        assert!(rises > 1_000, "{rises}");
    }

    #[test]
    fn an_impossible_rate_is_capped_by_timing_not_by_losing_steps() {
        let t = StepTiming {
            steplen: 50_000,
            stepspace: 50_000,
            ..Default::default()
        };
        let mut g = PulseGen::default();
        let mut samples = Vec::new();
        for k in 1..=2_000 {
            samples.push((k * P, g.update(&t, k * P, 50e-6, 1e6)));
        }
        check_waveform(&t, &samples);
        // One step every 2 periods: the timing limit, exactly.
        assert!((g.counts() - 1_000).abs() <= 1, "{}", g.counts());
    }
}
