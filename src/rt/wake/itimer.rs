//! `itimer` — for `compare-timers` only: `setitimer(ITIMER_REAL)` and `SIGALRM`, taken with
//! `sigwaitinfo`.
//!
//! Kept because it is the oldest periodic timer in Unix and the one seed 000 shows losing
//! ticks (455 of 500 at 10 ms on 2.6). Its flaws are structural: the first expiry is relative
//! (so the timeline starts wherever arming happened to run), the interval is in microseconds,
//! `SIGALRM` is **process**-directed (any thread may get it), and coalesced signals are lost
//! without a count — so this driver reports no kernel overruns.

use std::fs;

use super::signal::BlockedSignal;
use super::{check_timeline, TimerDriver, WakeError, WakeInfo};
use crate::rt::clock::{now, Nanos};
use crate::rt::SysError;

/// The `itimer` driver. Needs `SIGALRM` blocked in every thread of the process: call
/// [`block_sigalrm`] in `main` before spawning any thread (threads inherit the mask).
#[derive(Debug, Default)]
pub struct Itimer {
    armed: Option<(BlockedSignal, Nanos)>,
}

impl Itimer {
    /// A new, unarmed driver.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Block `SIGALRM` in the calling thread. Called in `main` before threads are spawned, it
/// makes every thread inherit the block, which the `itimer` driver requires.
#[doc(alias = "pthread_sigmask")]
pub fn block_sigalrm() -> Result<(), SysError> {
    BlockedSignal::block_in_current_thread(libc::SIGALRM).map(|_| ())
}

/// The threads of this process, other than the caller, that do not block `SIGALRM`
/// (from the `SigBlk` mask in `/proc/self/task/<tid>/status`).
fn threads_accepting_sigalrm() -> Vec<i32> {
    let me = nix::unistd::gettid().as_raw();
    let bit = 1u64 << (libc::SIGALRM - 1);
    let Ok(dir) = fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut tids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&tid| tid != me)
        .filter(|tid| {
            // A thread that exited meanwhile has no status any more: it accepts nothing.
            let Ok(status) = fs::read_to_string(format!("/proc/self/task/{tid}/status")) else {
                return false;
            };
            status
                .lines()
                .find_map(|l| l.strip_prefix("SigBlk:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
                .is_some_and(|mask| mask & bit == 0)
        })
        .collect();
    tids.sort_unstable();
    tids
}

#[doc(alias = "setitimer")]
fn set_itimer(value: Nanos, interval: Nanos) -> Result<(), SysError> {
    let spec = libc::itimerval {
        it_interval: interval.to_timeval_ceil(),
        it_value: value.to_timeval_ceil(),
    };
    // SAFETY: `spec` is a valid itimerval; null old value is allowed.
    if unsafe { libc::setitimer(libc::ITIMER_REAL, &spec, std::ptr::null_mut()) } != 0 {
        return Err(SysError::last("setitimer"));
    }
    Ok(())
}

impl TimerDriver for Itimer {
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)?;
        let tids = threads_accepting_sigalrm();
        if !tids.is_empty() {
            return Err(WakeError::SigalrmNotBlocked { tids });
        }
        let signal = BlockedSignal::block_in_current_thread(libc::SIGALRM)?;
        set_itimer(Nanos::ZERO, Nanos::ZERO)?;
        signal.drain();
        // Relative first expiry (an itimer cannot be armed absolute); at least 1 µs, since a
        // zero value would disarm it.
        let first = (first_deadline - now()).max(Nanos::from_micros(1));
        set_itimer(first, period)?;
        self.armed = Some((signal, period));
        Ok(())
    }

    /// Takes `SIGALRM` until the clock is within half a period of `deadline`: a signal for a
    /// deadline the loop skipped (coalesced into one pending `SIGALRM`) must not end the wait.
    #[doc(alias = "sigwaitinfo")]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        let (signal, period) = self.armed.as_ref().ok_or(WakeError::NotArmed)?;
        let earliest = deadline - Nanos::from_nanos(period.as_nanos() / 2);
        loop {
            if !signal.wait()? {
                return Err(WakeError::Interrupted);
            }
            if now() >= earliest {
                return Ok(WakeInfo::default());
            }
        }
    }
}

impl Drop for Itimer {
    fn drop(&mut self) {
        if let Some((signal, _)) = self.armed.take() {
            // Best effort: a failure to disarm leaves a blocked, pending SIGALRM at worst.
            let _ = set_itimer(Nanos::ZERO, Nanos::ZERO);
            signal.drain();
        }
    }
}
