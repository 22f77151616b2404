//! The low-level real-time primitives: the clock, the timer drivers that wake a periodic
//! thread, the scheduling policy and CPU pinning of that thread, and the process hardening
//! that keeps page faults and deep C-states away from it.
//!
//! Everything here is Linux-specific and is the only place in the crate that talks to the
//! kernel about time and scheduling (the rest of the crate — the cycle loop, stats, the
//! runtime — is built on these pieces and stays portable Rust).
//!
//! Two rules shape every API below:
//!
//! * **Set up before, never during.** Whatever needs memory, a file descriptor or a kernel
//!   object is done in a constructor or in an `arm`/`harden` step that runs before the first
//!   period. The calls made once per period ([`wake::TimerDriver::wait_until`],
//!   [`clock::now`], [`sched::thread_usage`]) do not allocate, lock or log.
//! * **Report, don't decide.** Hardening and scheduling return what worked and what did not;
//!   whether a failure is fatal depends on the flavor, which the caller knows and we do not.

pub(crate) mod civil_date;
pub mod clock;
pub mod cpulist;
pub mod harden;
pub(crate) mod msg;
pub mod portio;
pub mod process;
pub mod sched;
pub mod signals;
pub mod units;
pub mod wake;

/// Locks `m`, and takes its data even if a holder panicked (a poisoned lock): the tables behind
/// the process-wide locks (the C interface's blocks and tasks, the master's modules and segments)
/// are left whole by every operation, and the process must go on serving — and cleaning up at its
/// end — after a module's bad call panicked inside one. Not for the RT path (it may block).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

use std::fmt;

use nix::errno::Errno;

/// A failed system call: which C function, and the `errno` it gave.
///
/// `Copy` and allocation-free on purpose, so that it can be returned from the RT path
/// (a failed `clock_nanosleep` inside the cycle loop) without breaking the no-allocation rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysError {
    /// The C call that failed, e.g. `"timer_create"`.
    pub call: &'static str,
    /// The error it reported.
    pub errno: Errno,
}

impl SysError {
    /// Build from a call name and an errno value.
    pub fn new(call: &'static str, errno: Errno) -> Self {
        SysError { call, errno }
    }

    /// The current thread's `errno` after `call` returned -1.
    pub fn last(call: &'static str) -> Self {
        SysError {
            call,
            errno: Errno::last(),
        }
    }
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.call, self.errno)
    }
}

impl std::error::Error for SysError {}
