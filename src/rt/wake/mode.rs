//! Wake modes — how the last stretch before a deadline is spent — and [`CycleTimer`], the
//! driver + mode pair a cycle loop owns.
//!
//! * `sleep`: the driver's wait ends at the deadline; wake latency is the kernel's (timer
//!   interrupt, scheduler, C-state exit, context switch).
//! * `hybrid[:MARGIN]`: the driver sleeps until `deadline − margin`, then the thread spins on
//!   `clock_gettime` until the deadline. If the margin exceeds the kernel's typical wake
//!   latency, the thread is already running when the deadline comes and the wake latency is
//!   the spin loop's (tens of nanoseconds), at the cost of burning `margin` of CPU per period.
//! * `spin`: never sleep; busy-wait for every deadline. Only for a CPU the thread has to
//!   itself — and under RT throttling (`sched_rt_runtime_us` < period) a SCHED_FIFO spinner is
//!   stopped for the rest of each second. The runtime decides whether to allow it; this
//!   module only implements it. The driver is not armed in this mode.
//!
//! # The default hybrid margin
//!
//! The rule is: **the margin is the wake latency the sleeping driver typically shows on the
//! target kernel**, so that the sleep ends just before the deadline and the spin absorbs the
//! variation. [`DEFAULT_HYBRID_MARGIN`] is 100 µs, which covers the 50–100 µs typical of a
//! SCHED_FIFO thread on a non-RT (PREEMPT_DYNAMIC / voluntary) kernel, including VMs; on
//! PREEMPT_RT 20–30 µs is enough and can be given as `hybrid:25us` (run `latency-test` with
//! `--wake sleep` and use its p99). Whatever the value, it is clamped at arm time to half the
//! period, so hybrid never spins for most of a period (a 25 µs base thread gets 12.5 µs).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{check_timeline, Driver, TimerDriver, TimerKind, WakeError, WakeInfo};
use crate::rt::clock::{now, Nanos};
use crate::rt::units::{clip, parse_duration};

/// The margin `hybrid` uses when none is given. See the module documentation for the rule.
pub const DEFAULT_HYBRID_MARGIN: Nanos = Nanos::from_micros(100);

/// How a thread spends the time up to its deadline (names are a **contract**: `--wake`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WakeMode {
    /// Sleep in the driver until the deadline (default).
    #[default]
    Sleep,
    /// Sleep until `deadline − margin`, then spin. `None` means [`DEFAULT_HYBRID_MARGIN`].
    Hybrid {
        /// The margin asked for, before clamping to half the period.
        margin: Option<Nanos>,
    },
    /// Busy-wait for every deadline.
    Spin,
}

impl fmt::Display for WakeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WakeMode::Sleep => f.write_str("sleep"),
            WakeMode::Hybrid { margin: None } => f.write_str("hybrid"),
            WakeMode::Hybrid { margin: Some(m) } => write!(f, "hybrid:{m}"),
            WakeMode::Spin => f.write_str("spin"),
        }
    }
}

impl FromStr for WakeMode {
    type Err = String;

    /// `sleep`, `spin`, `hybrid`, or `hybrid:MARGIN` with MARGIN a positive duration with its unit
    /// (e.g. `hybrid:50us`, see [`crate::rt::units::parse_duration`]). A malformed margin gets its own
    /// message (what is wrong with the margin), anything else the list of valid modes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // User input, shown escaped and cut (see `units::clip`).
        let shown = clip(s);
        match s {
            "sleep" => Ok(WakeMode::Sleep),
            "spin" => Ok(WakeMode::Spin),
            "hybrid" => Ok(WakeMode::Hybrid { margin: None }),
            _ => {
                let Some(margin) = s.strip_prefix("hybrid:") else {
                    return Err(format!(
                        "unknown wake mode `{shown}`; valid: sleep (default), hybrid, hybrid:MARGIN (e.g. hybrid:50us), spin"
                    ));
                };
                let problem = if margin.trim().is_empty() {
                    "give a margin after the colon".to_string()
                } else if margin.trim().starts_with('-') {
                    "the hybrid margin must be positive".to_string()
                } else {
                    match parse_duration(margin) {
                        Ok(m) if m.is_positive() => {
                            return Ok(WakeMode::Hybrid { margin: Some(m) })
                        }
                        Ok(_) => "the hybrid margin must be positive".to_string(),
                        Err(e) => format!("the hybrid margin: {e}"),
                    }
                };
                Err(format!(
                    "wake mode `{shown}`: {problem}, e.g. hybrid:50us (or plain hybrid for the default {DEFAULT_HYBRID_MARGIN})"
                ))
            }
        }
    }
}

/// Busy-wait until `CLOCK_MONOTONIC` reaches `deadline`; returns the first reading at or
/// after it (so a caller can skip one more clock read).
#[inline]
pub fn spin_until(deadline: Nanos) -> Nanos {
    loop {
        let t = now();
        if t >= deadline {
            return t;
        }
        std::hint::spin_loop();
    }
}

/// A timer driver with a wake mode: what one periodic thread waits with.
///
/// Create it before the loop ([`CycleTimer::new`] allocates nothing), move it into the RT
/// thread, [`TimerDriver::arm`] it there, then [`TimerDriver::wait_until`] every period.
#[derive(Debug)]
pub struct CycleTimer {
    driver: Driver,
    mode: WakeMode,
    /// The effective margin (clamped) once armed; zero for `sleep` and `spin`.
    margin: Nanos,
    /// Set by the runtime's stop request: an interrupted wait or a spin then ends early.
    stop: Option<Arc<AtomicBool>>,
}

impl CycleTimer {
    /// An unarmed timer with the given driver and mode.
    pub fn new(kind: TimerKind, mode: WakeMode) -> Self {
        CycleTimer {
            driver: Driver::new(kind),
            mode,
            margin: Nanos::ZERO,
            stop: None,
        }
    }

    /// Makes the waits stoppable: once `stop` is set, an interrupted wait (the runtime sends
    /// [`crate::rt::signals::wake_signal`]) and a spin return [`WakeError::Interrupted`] instead of
    /// going on to the deadline. Without it, and while `stop` is clear, a stray signal's `EINTR`
    /// is simply waited through.
    pub fn stop_on(&mut self, stop: Arc<AtomicBool>) {
        self.stop = Some(stop);
    }

    #[inline]
    fn stopping(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The driver's wait, waiting again after a signal unless a stop was requested.
    #[inline]
    fn driver_wait(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        loop {
            match self.driver.wait_until(deadline) {
                Err(WakeError::Interrupted) if !self.stopping() => continue,
                other => return other,
            }
        }
    }

    /// Spins to `deadline`, or until a stop is requested.
    #[inline]
    fn spin(&self, deadline: Nanos) -> Result<(), WakeError> {
        match &self.stop {
            None => {
                spin_until(deadline);
                Ok(())
            }
            Some(stop) => loop {
                if now() >= deadline {
                    return Ok(());
                }
                if stop.load(Ordering::Relaxed) {
                    return Err(WakeError::Interrupted);
                }
                std::hint::spin_loop();
            },
        }
    }

    /// The driver kind.
    pub fn kind(&self) -> TimerKind {
        self.driver.kind()
    }

    /// The wake mode.
    pub fn mode(&self) -> WakeMode {
        self.mode
    }

    /// The margin in effect for `hybrid` after arming (the requested or default margin,
    /// clamped to half the period); zero otherwise.
    pub fn margin(&self) -> Nanos {
        self.margin
    }
}

impl TimerDriver for CycleTimer {
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)?;
        match self.mode {
            WakeMode::Sleep => {
                self.margin = Nanos::ZERO;
                self.driver.arm(first_deadline, period)
            }
            WakeMode::Hybrid { margin } => {
                let half = Nanos::from_nanos(period.as_nanos() / 2);
                self.margin = margin.unwrap_or(DEFAULT_HYBRID_MARGIN).min(half);
                // The driver's whole timeline is shifted by the margin, so that periodic
                // kernel timers (posix-timer, timerfd) expire `margin` before each deadline.
                self.driver.arm(first_deadline - self.margin, period)
            }
            WakeMode::Spin => {
                self.margin = Nanos::ZERO;
                Ok(())
            }
        }
    }

    #[inline]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        match self.mode {
            WakeMode::Sleep => self.driver_wait(deadline),
            WakeMode::Hybrid { .. } => {
                let info = self.driver_wait(deadline - self.margin)?;
                self.spin(deadline)?;
                Ok(info)
            }
            WakeMode::Spin => {
                self.spin(deadline)?;
                Ok(WakeInfo::default())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_modes_parse_and_print() {
        for (s, m) in [
            ("sleep", WakeMode::Sleep),
            ("spin", WakeMode::Spin),
            ("hybrid", WakeMode::Hybrid { margin: None }),
            (
                "hybrid:50us",
                WakeMode::Hybrid {
                    margin: Some(Nanos::from_micros(50)),
                },
            ),
            (
                "hybrid:1ms",
                WakeMode::Hybrid {
                    margin: Some(Nanos::from_millis(1)),
                },
            ),
            (
                "hybrid:750ns",
                WakeMode::Hybrid {
                    margin: Some(Nanos::from_nanos(750)),
                },
            ),
        ] {
            assert_eq!(s.parse::<WakeMode>().unwrap(), m, "{s}");
            assert_eq!(m.to_string(), s);
        }
        assert_eq!(
            "hybrid:20µs".parse::<WakeMode>().unwrap(),
            WakeMode::Hybrid {
                margin: Some(Nanos::from_micros(20))
            }
        );
    }

    #[test]
    fn bad_wake_modes_say_what_is_valid() {
        for bad in ["Sleep", "busy", "hybrid50us"] {
            let e = bad.parse::<WakeMode>().unwrap_err();
            assert!(e.starts_with(&format!("unknown wake mode `{bad}`")), "{e}");
            assert!(
                e.contains("sleep") && e.contains("hybrid:MARGIN") && e.contains("spin"),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_hybrid_margins_say_what_is_wrong_with_the_margin() {
        for (bad, says) in [
            (
                "hybrid:0",
                "the hybrid margin must be positive, e.g. hybrid:50us",
            ),
            (
                "hybrid:0us",
                "the hybrid margin must be positive, e.g. hybrid:50us",
            ),
            (
                "hybrid:-5us",
                "the hybrid margin must be positive, e.g. hybrid:50us",
            ),
            ("hybrid:", "give a margin after the colon, e.g. hybrid:50us"),
            ("hybrid:5d", "the hybrid margin: invalid duration '5d'"),
            ("hybrid:50", "write a unit, e.g. 50us"),
        ] {
            let e = bad.parse::<WakeMode>().unwrap_err();
            assert!(e.starts_with(&format!("wake mode `{bad}`: ")), "{e}");
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("plain hybrid for the default 100us"), "{e}");
        }
        // Control characters and huge input are not echoed raw.
        let e = "hybrid:\u{1b}[2J".parse::<WakeMode>().unwrap_err();
        assert!(!e.contains('\u{1b}') && e.contains("\\u{1b}"), "{e}");
        let e = "x".repeat(1 << 20).parse::<WakeMode>().unwrap_err();
        assert!(e.len() < 300 && e.contains("(1048576 bytes)"), "{e}");
    }

    #[test]
    fn hybrid_margin_defaults_and_is_clamped_to_half_a_period() {
        let start = now() + Nanos::from_millis(1);
        let mut t = CycleTimer::new(TimerKind::Nanosleep, WakeMode::Hybrid { margin: None });
        t.arm(start, Nanos::from_millis(1)).unwrap();
        assert_eq!(t.margin(), DEFAULT_HYBRID_MARGIN);
        t.arm(start, Nanos::from_micros(25)).unwrap();
        assert_eq!(t.margin(), Nanos::from_nanos(12_500));
        let mut t = CycleTimer::new(
            TimerKind::Nanosleep,
            WakeMode::Hybrid {
                margin: Some(Nanos::from_micros(30)),
            },
        );
        t.arm(start, Nanos::from_millis(1)).unwrap();
        assert_eq!(t.margin(), Nanos::from_micros(30));
    }

    #[test]
    fn spin_and_hybrid_never_wake_early() {
        let period = Nanos::from_micros(500);
        for mode in [WakeMode::Spin, WakeMode::Hybrid { margin: None }] {
            let mut t = CycleTimer::new(TimerKind::Nanosleep, mode);
            let first = now() + period;
            t.arm(first, period).unwrap();
            for k in 0..5 {
                let d = first + period * k;
                t.wait_until(d).unwrap();
                assert!(now() >= d, "{mode}");
            }
        }
    }
}
