//! `siggen`: a signal generator, the usual source of test commands (as in LinuxCNC).
//!
//! Every output is `offset + amplitude × wave`, where each wave spans −1…+1 and all are aligned on one
//! phase `p` in [0, 1) that advances by `frequency × dt` each period (the real `dt`, so a late period
//! does not slow the generator down):
//!
//! | wave       | at p = 0 | shape                                                      |
//! |------------|----------|------------------------------------------------------------|
//! | `sine`     | 0        | sin 2πp                                                     |
//! | `cosine`   | +1       | cos 2πp                                                     |
//! | `square`   | +1       | +1 while p < ½, then −1 (the sign of the sine)              |
//! | `triangle` | 0        | straight lines through 0, +1 (p = ¼), 0, −1 (p = ¾), like the sine |
//! | `sawtooth` | −1       | rises linearly to +1 and jumps back                         |
//!
//! | name                  | kind | type  | dir | default | meaning                                   |
//! |-----------------------|------|-------|-----|---------|-------------------------------------------|
//! | `siggen.N.sine`       | pin  | float | OUT |         | sine wave                                 |
//! | `siggen.N.cosine`     | pin  | float | OUT |         | cosine wave                               |
//! | `siggen.N.square`     | pin  | float | OUT |         | square wave                               |
//! | `siggen.N.triangle`   | pin  | float | OUT |         | triangle wave                             |
//! | `siggen.N.sawtooth`   | pin  | float | OUT |         | sawtooth wave                             |
//! | `siggen.N.clock`      | pin  | bit   | OUT |         | TRUE while the square wave is positive    |
//! | `siggen.N.frequency`  | pin  | float | IN  | 1.0     | Hz (negative runs the phase backwards)    |
//! | `siggen.N.amplitude`  | pin  | float | IN  | 1.0     | peak value of each wave                   |
//! | `siggen.N.offset`     | pin  | float | IN  | 0.0     | added to each wave                        |
//! | `siggen.N.reset`      | pin  | bit   | IN  | FALSE   | while TRUE, the phase is held at 0        |
//! | `siggen.N.update`     | function |   |     |         | advances the phase by the real dt, sets the outputs |

use std::f64::consts::TAU;

use rtapi_hal::{In, Out};

use super::{Component, LoadContext, LoadError};

/// The five waves at one phase, each in −1…+1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Waves {
    pub(crate) sine: f64,
    pub(crate) cosine: f64,
    pub(crate) square: f64,
    pub(crate) triangle: f64,
    pub(crate) sawtooth: f64,
}

impl Waves {
    /// The waves at phase `p` (fraction of a period, any value; only its fractional part counts).
    pub(crate) fn at(p: f64) -> Waves {
        let p = p.rem_euclid(1.0);
        let triangle = if p < 0.25 {
            4.0 * p
        } else if p < 0.75 {
            2.0 - 4.0 * p
        } else {
            4.0 * p - 4.0
        };
        Waves {
            sine: (TAU * p).sin(),
            cosine: (TAU * p).cos(),
            square: if p < 0.5 { 1.0 } else { -1.0 },
            triangle,
            sawtooth: 2.0 * p - 1.0,
        }
    }
}

/// The phase accumulator.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Oscillator {
    /// In [0, 1).
    pub(crate) phase: f64,
}

impl Oscillator {
    /// Advances the phase by `frequency_hz × dt_s` (the time since the previous period), then gives
    /// the waves there: the output is the value *now*, even after a late period.
    pub(crate) fn step(&mut self, frequency_hz: f64, dt_s: f64, reset: bool) -> Waves {
        if reset {
            self.phase = 0.0;
            return Waves::at(0.0);
        }
        let next = (self.phase + frequency_hz * dt_s).rem_euclid(1.0);
        // A NaN frequency must not poison the phase forever.
        self.phase = if next.is_finite() { next } else { 0.0 };
        Waves::at(self.phase)
    }
}

/// The `siggen` component.
pub(crate) struct Siggen;

impl Component for Siggen {
    const NAME: &'static str = "siggen";
    const SUMMARY: &'static str = "signal generator: sine, cosine, square, triangle, sawtooth";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let sine = ctx.pin::<Out, f64>("sine")?;
        let cosine = ctx.pin::<Out, f64>("cosine")?;
        let square = ctx.pin::<Out, f64>("square")?;
        let triangle = ctx.pin::<Out, f64>("triangle")?;
        let sawtooth = ctx.pin::<Out, f64>("sawtooth")?;
        let clock = ctx.pin::<Out, bool>("clock")?;
        let frequency = ctx.pin_with_default::<In, f64>("frequency", 1.0)?;
        let amplitude = ctx.pin_with_default::<In, f64>("amplitude", 1.0)?;
        let offset = ctx.pin::<In, f64>("offset")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        ctx.function("update", move |hal| {
            let (sine, cosine, square) = (hal.pin(sine), hal.pin(cosine), hal.pin(square));
            let (triangle, sawtooth, clock) =
                (hal.pin(triangle), hal.pin(sawtooth), hal.pin(clock));
            let (frequency, amplitude, offset, reset) = (
                hal.pin(frequency),
                hal.pin(amplitude),
                hal.pin(offset),
                hal.pin(reset),
            );
            let mut osc = Oscillator::default();
            Box::new(move |cycle| {
                let w = osc.step(frequency.get(), cycle.dt_s(), reset.get());
                let (a, o) = (amplitude.get(), offset.get());
                sine.set(o + a * w.sine);
                cosine.set(o + a * w.cosine);
                square.set(o + a * w.square);
                triangle.set(o + a * w.triangle);
                sawtooth.set(o + a * w.sawtooth);
                clock.set(w.square > 0.0);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn waves_at_the_quarter_points() {
        let table = [
            // p, sine, cosine, square, triangle, sawtooth
            (0.0, 0.0, 1.0, 1.0, 0.0, -1.0),
            (0.25, 1.0, 0.0, 1.0, 1.0, -0.5),
            (0.5, 0.0, -1.0, -1.0, 0.0, 0.0),
            (0.75, -1.0, 0.0, -1.0, -1.0, 0.5),
        ];
        for (p, s, c, sq, tr, sa) in table {
            let w = Waves::at(p);
            assert!(close(w.sine, s), "sine at {p}: {}", w.sine);
            assert!(close(w.cosine, c), "cosine at {p}: {}", w.cosine);
            assert_eq!(w.square, sq, "square at {p}");
            assert!(close(w.triangle, tr), "triangle at {p}: {}", w.triangle);
            assert!(close(w.sawtooth, sa), "sawtooth at {p}: {}", w.sawtooth);
        }
        // Only the fractional part matters, negative phases included.
        assert!(close(Waves::at(1.25).sine, 1.0));
        assert!(close(Waves::at(-0.25).sine, -1.0));
    }

    #[test]
    fn every_wave_stays_in_range_and_triangle_is_continuous() {
        let mut prev = Waves::at(0.0).triangle;
        for i in 1..=10_000 {
            let w = Waves::at(i as f64 / 10_000.0);
            for v in [w.sine, w.cosine, w.square, w.triangle, w.sawtooth] {
                assert!((-1.0..=1.0).contains(&v));
            }
            assert!((w.triangle - prev).abs() <= 4.0 / 10_000.0 + 1e-12);
            prev = w.triangle;
        }
    }

    #[test]
    fn the_phase_advances_with_the_real_dt() {
        let mut osc = Oscillator::default();
        // 2 Hz at 1 ms: a quarter period is 125 ms.
        for _ in 0..124 {
            osc.step(2.0, 0.001, false);
        }
        assert!(close(osc.step(2.0, 0.001, false).sine, 1.0));
        // One late period of 125 ms covers the next quarter at once.
        let mut osc = Oscillator { phase: 0.25 };
        osc.step(2.0, 0.125, false);
        assert!(close(osc.phase, 0.5));
        // Negative frequency runs backwards, reset holds at zero, NaN does not stick.
        let mut osc = Oscillator::default();
        osc.step(-1.0, 0.25, false);
        assert!(close(osc.phase, 0.75));
        assert_eq!(osc.step(1.0, 0.1, true), Waves::at(0.0));
        assert_eq!(osc.phase, 0.0);
        osc.step(f64::NAN, 0.001, false);
        assert_eq!(osc.phase, 0.0);
    }
}
