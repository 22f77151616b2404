//! `select` — for `compare-timers` only: `select(0, NULL, NULL, NULL, timeout)` as a sleep.
//!
//! Kept because it is what event-loop code ends up using as its timer (seed 003: 240 ms
//! outliers where `nanosleep` had 52 µs; seed 002's reactor). The timeout is relative and in
//! whole microseconds, and the kernel applies the caller's timer slack to it.

use super::{check_timeline, TimerDriver, WakeError, WakeInfo};
use crate::rt::clock::{now, Nanos};
use crate::rt::SysError;
use nix::errno::Errno;

/// The `select` driver: recomputes a relative timeout to the deadline before each call.
#[derive(Debug, Default)]
pub struct SelectTimeout {
    _private: (),
}

impl SelectTimeout {
    /// A new driver.
    pub fn new() -> Self {
        Self::default()
    }
}

impl TimerDriver for SelectTimeout {
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)
    }

    /// Loops until the clock reaches `deadline` (an early or interrupted return sleeps again)
    /// so that all drivers share the "never before the deadline" rule and differ only in
    /// lateness.
    #[doc(alias = "select")]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        loop {
            let t = now();
            if t >= deadline {
                return Ok(WakeInfo::default());
            }
            let mut tv = (deadline - t).to_timeval_ceil();
            // SAFETY: no fd sets (null, nfds 0); `tv` is a valid, writable timeval.
            let rc = unsafe {
                libc::select(
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    &mut tv,
                )
            };
            if rc < 0 {
                let e = Errno::last();
                if e == Errno::EINTR {
                    return Err(WakeError::Interrupted);
                }
                return Err(SysError::new("select", e).into());
            }
        }
    }
}
