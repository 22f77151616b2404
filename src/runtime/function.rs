//! Functions: the unit of work a thread runs each period, in `addf` order (LinuxCNC's `funct`).
//!
//! A component exports a function as a **factory**: a closure that runs once, after the HAL segment is
//! built, turns the component's pin keys into typed pin handles and returns the per-period closure.
//! The per-period closure lives on the RT thread from then on: it must not allocate, lock, log or do
//! I/O — it reads and writes pins (single atomic operations) and its own state.

use rtapi_hal::Hal;

/// What a function is told each period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cycle {
    /// Period number on the thread's timeline, from 0. Skipped (missed) periods are counted too, so
    /// `number` jumps by `missed + 1` after an overrun.
    pub number: u64,
    /// The thread's nominal period.
    pub period_ns: u64,
    /// The real time since the previous wake (the nominal period on the first one). Integrators
    /// and differentiators use this, not the period: after an overrun it is several periods.
    pub dt_ns: u64,
    /// Periods skipped just before this one because the thread woke too late for them.
    pub missed: u64,
    /// Wake time, CLOCK_MONOTONIC ns.
    pub now_ns: i64,
}

impl Cycle {
    /// `dt` in seconds, the unit control laws are written in.
    #[inline]
    pub fn dt_s(&self) -> f64 {
        self.dt_ns as f64 * 1e-9
    }
}

/// The per-period body of a function.
pub type RtFn = Box<dyn FnMut(&Cycle) + Send + 'static>;

/// Builds an [`RtFn`] from the finished HAL (pin keys → pin handles). Runs once, before threads start.
pub type FunctionFactory = Box<dyn FnOnce(&Hal) -> RtFn + 'static>;
