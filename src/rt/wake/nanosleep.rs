//! `nanosleep`: absolute `clock_nanosleep` on `CLOCK_MONOTONIC` — the default driver.
//!
//! Why it is the default: the deadline is absolute, so lateness never accumulates; there is no
//! kernel object to create, leak or target at the right thread; and an `EINTR` is harmless —
//! sleeping again to the same absolute instant loses nothing (a relative sleep would have to
//! recompute the remainder, and each recomputation adds error).

use super::{check_timeline, TimerDriver, WakeError, WakeInfo};
use crate::rt::clock::Nanos;
use crate::rt::SysError;
use nix::errno::Errno;

/// The `nanosleep` driver. Stateless: arming only validates the timeline.
#[derive(Debug, Default)]
pub struct AbsoluteNanosleep {
    _private: (),
}

impl AbsoluteNanosleep {
    /// A new driver.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TimerDriver for AbsoluteNanosleep {
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)
    }

    #[inline]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        match sleep_until_once(deadline)? {
            true => Ok(WakeInfo::default()),
            false => Err(WakeError::Interrupted),
        }
    }
}

/// One absolute `clock_nanosleep`: `Ok(true)` at the deadline, `Ok(false)` when a handled signal
/// interrupted it first.
#[inline]
pub(crate) fn sleep_until_once(deadline: Nanos) -> Result<bool, SysError> {
    let ts = deadline.to_timespec();
    // SAFETY: `ts` is a valid normalized timespec; the remainder pointer may be null for
    // TIMER_ABSTIME (the kernel never writes it for absolute sleeps).
    let rc = unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    };
    match rc {
        0 => Ok(true),
        libc::EINTR => Ok(false),
        e => Err(SysError::new("clock_nanosleep", Errno::from_raw(e))),
    }
}

/// Sleep until the absolute instant `deadline` on `CLOCK_MONOTONIC`, retrying on `EINTR`
/// with the same deadline. Returns at once if it is already past.
#[doc(alias = "clock_nanosleep")]
#[inline]
pub fn sleep_until(deadline: Nanos) -> Result<(), SysError> {
    while !sleep_until_once(deadline)? {}
    Ok(())
}
