//! `encoder`: software quadrature counter (LinuxCNC semantics, own code).
//!
//! `encoder.N.update-counters` runs in the base thread and samples `phase-A`/`phase-B` each period. The
//! two bits form a Gray code; one step forward (A leading B: 00 → 10 → 11 → 01 → 00) counts +1, one step
//! back −1 (×4 counting). A change of *both* bits between two samples is a **phase error**: the
//! direction is unknowable, so nothing is counted, the error is counted instead — it means the signal
//! moved faster than the base thread samples it (or noise).
//!
//! `encoder.N.capture-position` runs in the servo thread and publishes counts, position and velocity.
//! Velocity comes from the time of the last counted edge, not from the servo period: `Δcounts / Δt`
//! between the last edges of two servo periods, and while no edge arrives it decays as
//! `1 / (time since the last edge)`, the fastest speed consistent with seeing no count.
//!
//! The base thread publishes the count and the time of its last change packed in one atomic word,
//! so the servo thread reads a consistent pair without any lock.
//!
//! | name                        | kind  | type  | dir/access | default | meaning                                  |
//! |-----------------------------|-------|-------|------------|---------|------------------------------------------|
//! | `encoder.N.phase-A`         | pin   | bit   | IN         |         | quadrature input A                       |
//! | `encoder.N.phase-B`         | pin   | bit   | IN         |         | quadrature input B                       |
//! | `encoder.N.reset`           | pin   | bit   | IN         | FALSE   | while TRUE: counts read 0, errors clear  |
//! | `encoder.N.counts`          | pin   | s32   | OUT        |         | counts since the last reset              |
//! | `encoder.N.rawcounts`       | pin   | s32   | OUT        |         | counts since load, never reset           |
//! | `encoder.N.position`        | pin   | float | OUT        |         | `counts / position-scale`                |
//! | `encoder.N.velocity`        | pin   | float | OUT        |         | units/s                                  |
//! | `encoder.N.quad-error`      | pin   | bit   | OUT        |         | TRUE once a phase error is seen, until reset |
//! | `encoder.N.quad-error-count`| pin   | u32   | OUT        |         | phase errors since the last reset        |
//! | `encoder.N.position-scale`  | param | float | RW         | 1.0     | counts per machine unit                  |
//! | `encoder.N.update-counters` | function |    |            |         | base thread                              |
//! | `encoder.N.capture-position`| function |    |            |         | servo thread                             |

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rtapi_hal::{In, Out, ParamAccess};

use super::{Component, LoadContext, LoadError};

/// What one pair of samples means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    Up,
    Down,
    /// Both phases changed: a skipped state.
    Error,
}

/// Position in the Gray cycle 00 → 10 → 11 → 01 (A, B).
pub(crate) fn gray_index(a: bool, b: bool) -> u8 {
    match (a, b) {
        (false, false) => 0,
        (true, false) => 1,
        (true, true) => 2,
        (false, true) => 3,
    }
}

/// The transition from Gray index `from` to `to`.
pub(crate) fn decode(from: u8, to: u8) -> Transition {
    match to.wrapping_sub(from) & 3 {
        0 => Transition::None,
        1 => Transition::Up,
        3 => Transition::Down,
        _ => Transition::Error,
    }
}

/// The base-thread counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QuadCounter {
    state: Option<u8>,
    pub(crate) counts: i64,
    pub(crate) errors: u64,
}

impl QuadCounter {
    /// One sample. The first sample only sets the state.
    pub(crate) fn sample(&mut self, a: bool, b: bool) -> Transition {
        let now = gray_index(a, b);
        let t = match self.state {
            None => Transition::None,
            Some(prev) => decode(prev, now),
        };
        self.state = Some(now);
        match t {
            Transition::Up => self.counts += 1,
            Transition::Down => self.counts -= 1,
            Transition::Error => self.errors += 1,
            Transition::None => {}
        }
        t
    }
}

/// Edge timestamps are packed as `ns >> 10` (1.024 µs ticks) in 32 bits: they wrap after 73 minutes,
/// and only differences far shorter than that are ever taken.
pub(crate) const TICK_NS: f64 = 1024.0;

/// `counts` (low 32 bits) and the tick of its last change, in one word.
pub(crate) fn pack(counts: i64, edge_ns: i64) -> u64 {
    ((counts as u32 as u64) << 32) | ((edge_ns >> 10) as u32 as u64)
}

/// The inverse of [`pack`]: `(counts mod 2³², edge tick)`.
pub(crate) fn unpack(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// Velocity from edge times (see the module doc), in counts/s.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct VelocityEstimator {
    prev_edge: Option<u32>,
    velocity: f64,
}

impl VelocityEstimator {
    /// `delta` counts arrived since the last call, the latest at tick `edge`; `now` is the current tick.
    pub(crate) fn update(&mut self, delta: i64, edge: u32, now: u32) -> f64 {
        if delta != 0 {
            if let Some(prev) = self.prev_edge {
                let ticks = edge.wrapping_sub(prev).max(1);
                self.velocity = delta as f64 / (ticks as f64 * TICK_NS * 1e-9);
            }
            self.prev_edge = Some(edge);
        } else if let Some(prev) = self.prev_edge {
            // No edge: the speed is at most one count per time since the last one.
            let since = now.wrapping_sub(prev).max(1) as f64 * TICK_NS * 1e-9;
            let bound = 1.0 / since;
            if self.velocity.abs() > bound {
                self.velocity = bound.copysign(self.velocity);
            }
        }
        self.velocity
    }
}

#[derive(Debug, Default)]
struct Shared {
    /// [`pack`]ed counts and edge tick; written by `update-counters`.
    counts_and_edge: AtomicU64,
    /// Phase errors since load; written by `update-counters`.
    errors: AtomicU64,
}

/// The `encoder` component.
pub(crate) struct Encoder;

impl Component for Encoder {
    const NAME: &'static str = "encoder";
    const SUMMARY: &'static str =
        "quadrature counter: A/B sampled in the base thread, position and velocity in the servo thread";

    fn load(ctx: &mut LoadContext<'_>) -> Result<(), LoadError> {
        let phase_a = ctx.pin::<In, bool>("phase-A")?;
        let phase_b = ctx.pin::<In, bool>("phase-B")?;
        let reset = ctx.pin::<In, bool>("reset")?;
        let counts = ctx.pin::<Out, i32>("counts")?;
        let rawcounts = ctx.pin::<Out, i32>("rawcounts")?;
        let position = ctx.pin::<Out, f64>("position")?;
        let velocity = ctx.pin::<Out, f64>("velocity")?;
        let quad_error = ctx.pin::<Out, bool>("quad-error")?;
        let quad_error_count = ctx.pin::<Out, u32>("quad-error-count")?;
        let scale = ctx.param("position-scale", ParamAccess::Rw, 1.0f64)?;
        let shared = Arc::new(Shared::default());

        let s = shared.clone();
        ctx.function("update-counters", move |hal| {
            let (a, b) = (hal.pin(phase_a), hal.pin(phase_b));
            let mut counter = QuadCounter::default();
            Box::new(move |cycle| match counter.sample(a.get(), b.get()) {
                Transition::Up | Transition::Down => {
                    s.counts_and_edge
                        .store(pack(counter.counts, cycle.now_ns), Relaxed);
                }
                Transition::Error => s.errors.store(counter.errors, Relaxed),
                Transition::None => {}
            })
        })?;

        ctx.function("capture-position", move |hal| {
            let reset = hal.pin(reset);
            let (counts, rawcounts) = (hal.pin(counts), hal.pin(rawcounts));
            let (position, velocity) = (hal.pin(position), hal.pin(velocity));
            let (quad_error, quad_error_count) = (hal.pin(quad_error), hal.pin(quad_error_count));
            let scale = hal.param(scale);
            let mut total: i64 = 0;
            let mut prev_low: u32 = 0;
            let mut zero: i64 = 0;
            let mut errors_at_reset: u64 = 0;
            let mut estimator = VelocityEstimator::default();
            Box::new(move |cycle| {
                let (low, edge) = unpack(shared.counts_and_edge.load(Relaxed));
                // Wrapping difference of the low 32 bits: exact unless 2³¹ counts pass in one period.
                let delta = low.wrapping_sub(prev_low) as i32 as i64;
                prev_low = low;
                total += delta;
                let errors = shared.errors.load(Relaxed);
                if reset.get() {
                    zero = total;
                    errors_at_reset = errors;
                }
                let k = scale.get();
                let k = if k.is_finite() && k != 0.0 { k } else { 1.0 };
                let since_reset = total - zero;
                counts.set(since_reset as i32);
                rawcounts.set(total as i32);
                position.set(since_reset as f64 / k);
                let now_tick = (cycle.now_ns >> 10) as u32;
                velocity.set(estimator.update(delta, edge, now_tick) / k);
                let new_errors = errors - errors_at_reset;
                quad_error.set(new_errors > 0);
                quad_error_count.set(new_errors.min(u32::MAX as u64) as u32);
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (A, B) for count `n` along the forward Gray cycle.
    fn phases(n: i64) -> (bool, bool) {
        match n.rem_euclid(4) {
            0 => (false, false),
            1 => (true, false),
            2 => (true, true),
            _ => (false, true),
        }
    }

    #[test]
    fn counts_both_directions() {
        let mut c = QuadCounter::default();
        for n in 0..=400 {
            let (a, b) = phases(n);
            c.sample(a, b);
        }
        assert_eq!((c.counts, c.errors), (400, 0));
        for n in (-250..400).rev() {
            let (a, b) = phases(n);
            c.sample(a, b);
        }
        assert_eq!((c.counts, c.errors), (-250, 0));
        // Holding still counts nothing.
        for _ in 0..10 {
            c.sample(phases(-250).0, phases(-250).1);
        }
        assert_eq!(c.counts, -250);
    }

    #[test]
    fn a_skipped_state_is_a_phase_error_not_a_count() {
        let mut c = QuadCounter::default();
        c.sample(false, false);
        assert_eq!(c.sample(true, true), Transition::Error);
        assert_eq!((c.counts, c.errors), (0, 1));
        // Counting resumes from the new state.
        assert_eq!(c.sample(false, true), Transition::Up);
        assert_eq!(c.sample(true, true), Transition::Down);
        assert_eq!(c.sample(false, false), Transition::Error);
        assert_eq!((c.counts, c.errors), (0, 2));
        for (from, to, t) in [
            (0, 1, Transition::Up),
            (3, 0, Transition::Up),
            (0, 3, Transition::Down),
            (2, 1, Transition::Down),
            (1, 3, Transition::Error),
            (2, 2, Transition::None),
        ] {
            assert_eq!(decode(from, to), t, "{from}->{to}");
        }
    }

    #[test]
    fn packing_keeps_counts_and_time_consistent_across_wraps() {
        let (low, tick) = unpack(pack(-1, 5 * 1024));
        assert_eq!((low as i32, tick), (-1, 5));
        let (low, _) = unpack(pack(i64::from(u32::MAX) + 3, 0));
        assert_eq!(low, 2);
        // Wrapping differences recover small deltas across the 2³² boundary.
        let before = unpack(pack(-2, 0)).0;
        let after = unpack(pack(3, 0)).0;
        assert_eq!(after.wrapping_sub(before) as i32, 5);
    }

    #[test]
    fn velocity_from_edge_times_and_decay_when_stopped() {
        let mut v = VelocityEstimator::default();
        let tick = |ns: f64| (ns / TICK_NS) as u32;
        // First edges only set the reference.
        assert_eq!(v.update(1, tick(0.0), tick(0.0)), 0.0);
        // 100 counts over 10 ms of edge time: 10 000 counts/s.
        let got = v.update(100, tick(10e6), tick(10.2e6));
        assert!((got - 10_000.0).abs() / 10_000.0 < 0.001, "{got}");
        // Backwards.
        let got = v.update(-50, tick(20e6), tick(20.1e6));
        assert!((got + 5_000.0).abs() / 5_000.0 < 0.001, "{got}");
        // No edge for 100 ms: at most 10 counts/s, same sign.
        let got = v.update(0, tick(20e6), tick(120e6));
        assert!(got < 0.0 && got.abs() <= 10.0 + 0.01, "{got}");
    }
}
