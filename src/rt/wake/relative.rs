//! `relative-nanosleep` — for `compare-timers` only: the naive loop `sleep(period)`.
//!
//! Kept to show the drift the absolute timeline exists to prevent (docs/ARCHITECTURE.md): each period lasts `period` **plus** that wake's
//! latency plus the loop's own work, and nothing ever takes the excess back, so the thread falls
//! further behind the absolute timeline every cycle (seed 003's histogram is of this loop).

use super::{check_timeline, TimerDriver, WakeError, WakeInfo};
use crate::rt::clock::Nanos;
use crate::rt::SysError;
use nix::errno::Errno;

/// The `relative-nanosleep` driver: ignores the deadline, sleeps one period from now. Only its first
/// wait goes to the first deadline, so the naive loop starts on the timeline and every microsecond it
/// falls behind afterwards is its own drift.
#[derive(Debug, Default)]
pub struct RelativeNanosleep {
    period: Option<Nanos>,
    first: Option<Nanos>,
}

impl RelativeNanosleep {
    /// A new, unarmed driver.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TimerDriver for RelativeNanosleep {
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)?;
        self.period = Some(period);
        self.first = Some(first_deadline);
        Ok(())
    }

    /// Sleeps `period` relative to now, whatever `deadline` says — that is the point.
    #[doc(alias = "clock_nanosleep")]
    fn wait_until(&mut self, _deadline: Nanos) -> Result<WakeInfo, WakeError> {
        let request = self.period.ok_or(WakeError::NotArmed)?.to_timespec();
        if let Some(first) = self.first {
            if !super::nanosleep::sleep_until_once(first)? {
                return Err(WakeError::Interrupted);
            }
            self.first = None;
            return Ok(WakeInfo::default());
        }
        // SAFETY: `request` is a valid timespec; a null remainder is allowed (an interrupted sleep
        // is not resumed: the caller waits again, one more whole period, which only adds to the drift
        // this driver exists to show).
        let rc = unsafe {
            libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &request, std::ptr::null_mut())
        };
        match rc {
            0 => Ok(WakeInfo::default()),
            libc::EINTR => Err(WakeError::Interrupted),
            e => Err(SysError::new("clock_nanosleep", Errno::from_raw(e)).into()),
        }
    }
}
