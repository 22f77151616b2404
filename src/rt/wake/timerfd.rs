//! `timerfd`: an absolute, periodic timer read as a file descriptor.
//!
//! Why offer it: the kernel keeps the periodic timeline itself (`it_interval = period`) and
//! the 8-byte read returns how many expirations happened since the last read, so a late wake
//! is *counted by the kernel* — the overruns are a fact, not an inference from the clock. A fd
//! is also what an application that multiplexes I/O would want to poll on.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::ticks::Ticks;
use super::{check_timeline, TimerDriver, WakeError, WakeInfo};
use crate::rt::clock::Nanos;
use crate::rt::SysError;
use nix::errno::Errno;

/// The `timerfd` driver. The fd is created at [`TimerDriver::arm`] and closed on drop.
#[derive(Debug, Default)]
pub struct Timerfd {
    armed: Option<(OwnedFd, Ticks)>,
}

impl Timerfd {
    /// A new, unarmed driver (no fd yet).
    pub fn new() -> Self {
        Self::default()
    }
}

impl TimerDriver for Timerfd {
    #[doc(alias = "timerfd_create")]
    #[doc(alias = "timerfd_settime")]
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)?;
        self.armed = None;
        // SAFETY: plain syscall wrapper with constant flags; the returned fd is checked.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(SysError::last("timerfd_create").into());
        }
        // SAFETY: `raw` is a freshly created fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let spec = libc::itimerspec {
            it_interval: period.to_timespec(),
            it_value: first_deadline.to_timespec(),
        };
        // SAFETY: `fd` is a valid timerfd, `spec` a valid itimerspec; null old value allowed.
        let rc = unsafe {
            libc::timerfd_settime(
                fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(SysError::last("timerfd_settime").into());
        }
        self.armed = Some((fd, Ticks::new(first_deadline, period)));
        Ok(())
    }

    /// Reads the expiration count until the expiration serving `deadline` has been reported.
    #[doc(alias = "read")]
    #[inline]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        let (fd, ticks) = self.armed.as_mut().ok_or(WakeError::NotArmed)?;
        let target = ticks.index_for(deadline);
        while !ticks.reached(target) {
            let mut count: u64 = 0;
            // SAFETY: `count` is 8 writable bytes, exactly what a timerfd read returns.
            let n = unsafe {
                libc::read(
                    fd.as_raw_fd(),
                    (&mut count as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
            if n == std::mem::size_of::<u64>() as isize {
                ticks.add(count);
            } else {
                let e = Errno::last();
                if n < 0 && e == Errno::EINTR {
                    return Err(WakeError::Interrupted);
                }
                return Err(SysError::new("read(timerfd)", e).into());
            }
        }
        Ok(WakeInfo {
            kernel_overruns: Some(ticks.overruns_after(target)),
        })
    }
}
