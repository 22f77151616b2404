//! `relative-nanosleep` — for `compare-timers` only: the naive loop `sleep(period)`.
//!
//! Kept to show the drift DESIGN.md forbids: each period lasts `period` **plus** that wake's
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
        let mut request = self.period.ok_or(WakeError::NotArmed)?.to_timespec();
        if let Some(first) = self.first.take() {
            super::sleep_until(first)?;
            return Ok(WakeInfo::default());
        }
        loop {
            let mut remain = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: both timespecs are valid for the call; the kernel writes `remain`
            // only when interrupted.
            let rc =
                unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &request, &mut remain) };
            match rc {
                0 => return Ok(WakeInfo::default()),
                libc::EINTR => request = remain,
                e => return Err(SysError::new("clock_nanosleep", Errno::from_raw(e)).into()),
            }
        }
    }
}
