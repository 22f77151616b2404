//! `posix-timer`: `timer_create` on `CLOCK_MONOTONIC` with `SIGEV_THREAD_ID`, so that each
//! expiration raises a real-time signal in **one** thread — the RT thread that armed it —
//! which takes it synchronously with `sigwaitinfo`.
//!
//! Why thread-directed: a process-directed signal (plain `SIGEV_SIGNAL`, or `setitimer`) goes to
//! whichever thread the kernel picks, possibly a non-RT one. Why a real-time signal
//! (`SIGRTMIN+n`): it cannot be confused with job-control or user signals, and the kernel keeps
//! one pending instance per timer and counts the rest as overruns, read with
//! `timer_getoverrun`. Each driver takes the next `SIGRTMIN+n` in turn: delivery is per thread,
//! so sharing a number would work, but distinct numbers make `/proc/<tid>/status` (SigPnd,
//! SigBlk) say which thread a signal belongs to.

use std::sync::atomic::{AtomicI32, Ordering};

use super::signal::BlockedSignal;
use super::ticks::Ticks;
use super::{check_timeline, TimerDriver, WakeError, WakeInfo};
use crate::rt::clock::Nanos;
use crate::rt::SysError;

/// The `posix-timer` driver. The timer and its signal are set up at [`TimerDriver::arm`],
/// which must run in the thread that then calls [`TimerDriver::wait_until`].
#[derive(Debug, Default)]
pub struct PosixTimer {
    armed: Option<Armed>,
}

#[derive(Debug)]
struct Armed {
    timer: TimerId,
    signal: BlockedSignal,
    ticks: Ticks,
}

/// The kernel's timer id (glibc's `timer_t` is an opaque pointer-sized handle).
#[derive(Debug)]
struct TimerId(libc::timer_t);

// SAFETY: a POSIX timer id names a process-wide kernel object, valid from any thread until
// timer_delete; it points to no thread-local or Rust-owned memory.
unsafe impl Send for TimerId {}

impl Drop for TimerId {
    #[doc(alias = "timer_delete")]
    fn drop(&mut self) {
        // SAFETY: the id came from a successful timer_create and is deleted exactly once.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// Offsets from `SIGRTMIN` handed out in turn, one per armed driver.
static NEXT_SIGNAL: AtomicI32 = AtomicI32::new(0);

fn next_realtime_signal() -> libc::c_int {
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    min + NEXT_SIGNAL
        .fetch_add(1, Ordering::Relaxed)
        .rem_euclid(max - min) // SIGRTMAX is the runtime's wake signal (rt::signals)
}

impl PosixTimer {
    /// A new, unarmed driver (no timer, no signal yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// The real-time signal this driver uses, once armed.
    pub fn signal(&self) -> Option<libc::c_int> {
        self.armed.as_ref().map(|a| a.signal.signo())
    }
}

impl TimerDriver for PosixTimer {
    #[doc(alias = "timer_create")]
    #[doc(alias = "timer_settime")]
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        check_timeline(first_deadline, period)?;
        // Delete the old timer first so that it raises nothing more.
        self.armed = None;
        let signo = next_realtime_signal();
        let signal = BlockedSignal::block_in_current_thread(signo)?;
        signal.drain();

        // SAFETY: sigevent is plain data; all-zero is a valid starting value (the union
        // members we do not set must be zero for SIGEV_THREAD_ID).
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev.sigev_notify_thread_id = nix::unistd::gettid().as_raw();
        let mut raw: libc::timer_t = std::ptr::null_mut();
        // SAFETY: `sev` and `raw` are valid for the call; `raw` is written on success.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut raw) } != 0 {
            return Err(SysError::last("timer_create").into());
        }
        let timer = TimerId(raw);
        let spec = libc::itimerspec {
            it_interval: period.to_timespec(),
            it_value: first_deadline.to_timespec(),
        };
        // SAFETY: `timer.0` is a live timer id, `spec` a valid itimerspec; null old value.
        let rc = unsafe {
            libc::timer_settime(timer.0, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(SysError::last("timer_settime").into());
        }
        self.armed = Some(Armed {
            timer,
            signal,
            ticks: Ticks::new(first_deadline, period),
        });
        Ok(())
    }

    /// Takes the timer's signal until the expiration serving `deadline` has been reported;
    /// each signal stands for `1 + timer_getoverrun()` expirations.
    #[doc(alias = "sigwaitinfo")]
    #[doc(alias = "timer_getoverrun")]
    #[inline]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        let a = self.armed.as_mut().ok_or(WakeError::NotArmed)?;
        let target = a.ticks.index_for(deadline);
        while !a.ticks.reached(target) {
            if !a.signal.wait()? {
                return Err(WakeError::Interrupted);
            }
            // SAFETY: `a.timer.0` is a live timer id owned by this driver.
            let overrun = unsafe { libc::timer_getoverrun(a.timer.0) };
            if overrun < 0 {
                return Err(SysError::last("timer_getoverrun").into());
            }
            a.ticks.add(1 + overrun as u64);
        }
        Ok(WakeInfo {
            kernel_overruns: Some(a.ticks.overruns_after(target)),
        })
    }
}

impl Drop for PosixTimer {
    fn drop(&mut self) {
        if let Some(a) = self.armed.take() {
            let signal = a.signal;
            drop(a.timer);
            // The signal stays blocked in the arming thread (unblocking with one still
            // pending would run its default action: terminate). Drain what is left.
            signal.drain();
        }
    }
}
