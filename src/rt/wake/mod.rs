//! Timer drivers: how a periodic thread is put to sleep until its next deadline.
//!
//! A cycle loop keeps an **absolute timeline** — deadline *k* is `first + k·period` — and asks
//! its timer to wake it at each deadline. Never `now + period`: every wake is a little late, and
//! a relative sleep adds that lateness to every following period, so the thread drifts (the
//! seeds show it, and [`TimerKind::RelativeNanosleep`] is kept to demonstrate it).
//!
//! Three drivers are fit to run a machine, chosen by name (a CLI/config **contract**):
//!
//! | name          | mechanism                                                   | kernel overruns |
//! |---------------|-------------------------------------------------------------|-----------------|
//! | `nanosleep`   | `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` (default) | no              |
//! | `posix-timer` | `timer_create` + `SIGEV_THREAD_ID` + `sigwaitinfo`          | `timer_getoverrun` |
//! | `timerfd`     | absolute `timerfd`, blocking `read`                         | expiration count |
//!
//! and three exist only so `compare-timers` can show why they are not used:
//! `relative-nanosleep` (drifts), `select` (microsecond timeout, jitter), `itimer`
//! (`setitimer` + process-wide `SIGALRM`, lost ticks).
//!
//! On top of any driver a [`WakeMode`] decides how the last stretch is spent: `sleep`,
//! `hybrid[:MARGIN]` (sleep to deadline − margin, then spin) or `spin`. [`CycleTimer`] is the
//! pair the cycle loop owns.
//!
//! Lifecycle: construct anywhere (no resources), move into the RT thread, [`TimerDriver::arm`]
//! there — kernel objects are created at arm time, in the thread whose tid they target — then
//! call [`TimerDriver::wait_until`] once per period. `wait_until` does not allocate, lock or log.

mod itimer;
mod mode;
mod nanosleep;
mod posix_timer;
mod relative;
mod select;
mod signal;
mod ticks;
mod timerfd;

use std::fmt;
use std::str::FromStr;

use crate::rt::clock::Nanos;
use crate::rt::SysError;

pub use itimer::{block_sigalrm, Itimer};
pub use mode::{spin_until, CycleTimer, WakeMode, DEFAULT_HYBRID_MARGIN};
pub use nanosleep::{sleep_until, AbsoluteNanosleep};
pub use posix_timer::PosixTimer;
pub use relative::RelativeNanosleep;
pub use select::SelectTimeout;
pub use timerfd::Timerfd;

/// What a wake learned from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WakeInfo {
    /// For drivers backed by a periodic kernel timer (`posix-timer`, `timerfd`): how many
    /// expirations **after** the requested deadline had also passed when the thread woke —
    /// the periods this wake was so late that it missed them, as the kernel counted them.
    /// Expirations the caller skipped on purpose (it asked for a later deadline) are not
    /// counted. `None` for drivers that cannot tell; the loop then relies on the clock alone
    /// ([`crate::rt::clock::missed_periods`]), which gives the same number when both exist.
    pub kernel_overruns: Option<u64>,
}

/// One way of sleeping until an absolute deadline on `CLOCK_MONOTONIC`.
pub trait TimerDriver {
    /// Prepare to wake on the timeline `first_deadline + k·period`: allocate the kernel
    /// timer if the driver uses one, and start it. Call it **in the thread that will wait**
    /// (the POSIX timer targets the caller's tid, signals are blocked per thread), before the
    /// loop starts. Arming again replaces the previous timeline.
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError>;

    /// Block until `deadline` (an instant on the armed timeline, non-decreasing from call to
    /// call; the loop may skip deadlines it missed). Drivers with a periodic kernel timer wake
    /// at the timer's expiration at or after `deadline`, the others at `deadline` itself.
    /// A deadline already past returns at once. A handled signal ends the wait early with
    /// [`WakeError::Interrupted`]. Never allocates, locks or logs.
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError>;
}

/// The timer driver names (a **contract** shared by `--timer`, configs and JSON reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimerKind {
    /// Absolute `clock_nanosleep` on `CLOCK_MONOTONIC`: no kernel object, nothing to leak,
    /// re-computes nothing — the default.
    #[default]
    Nanosleep,
    /// A POSIX timer delivering a real-time signal to the RT thread only.
    PosixTimer,
    /// An absolute `timerfd`; the read count reports overruns.
    Timerfd,
    /// Comparison only: `nanosleep(period)` relative to the wake — drifts.
    RelativeNanosleep,
    /// Comparison only: `select()` with a timeout to the deadline.
    Select,
    /// Comparison only: `setitimer(ITIMER_REAL)` + `SIGALRM`.
    Itimer,
}

impl TimerKind {
    /// Every driver, machine-grade first.
    pub const ALL: [TimerKind; 6] = [
        TimerKind::Nanosleep,
        TimerKind::PosixTimer,
        TimerKind::Timerfd,
        TimerKind::RelativeNanosleep,
        TimerKind::Select,
        TimerKind::Itimer,
    ];

    /// The contract name.
    pub const fn name(self) -> &'static str {
        match self {
            TimerKind::Nanosleep => "nanosleep",
            TimerKind::PosixTimer => "posix-timer",
            TimerKind::Timerfd => "timerfd",
            TimerKind::RelativeNanosleep => "relative-nanosleep",
            TimerKind::Select => "select",
            TimerKind::Itimer => "itimer",
        }
    }

    /// `true` for the drivers kept only to show, in `compare-timers`, what goes wrong
    /// with them. The runtime refuses them for running a machine.
    pub const fn is_comparison_only(self) -> bool {
        matches!(
            self,
            TimerKind::RelativeNanosleep | TimerKind::Select | TimerKind::Itimer
        )
    }
}

impl fmt::Display for TimerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TimerKind {
    type Err = ParseNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TimerKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| ParseNameError {
                what: "timer driver",
                given: s.to_owned(),
                expected: "nanosleep (default), posix-timer, timerfd; \
                           for compare-timers only: relative-nanosleep, select, itimer",
            })
    }
}

/// An unknown driver or wake-mode name, with the list of valid ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseNameError {
    what: &'static str,
    given: String,
    expected: &'static str,
}

impl fmt::Display for ParseNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown {} `{}`; valid: {}",
            self.what, self.given, self.expected
        )
    }
}

impl std::error::Error for ParseNameError {}

/// Why arming or waiting failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WakeError {
    /// A system call failed.
    Sys(SysError),
    /// `wait_until` before `arm`.
    NotArmed,
    /// A handled signal interrupted the wait (`EINTR`) before the deadline: normally the runtime's
    /// stop request ([`crate::rt::signals::interrupt`]). The caller decides whether to wait again.
    Interrupted,
    /// `arm` with a period that is not positive, or a first deadline at or before the
    /// clock's epoch (which the kernel would read as "disarm").
    InvalidTimeline {
        /// The first deadline given.
        first_deadline: Nanos,
        /// The period given.
        period: Nanos,
    },
    /// `itimer` needs `SIGALRM` blocked in every thread, otherwise the kernel may deliver it
    /// to a thread that does not wait for it and its default action kills the process.
    SigalrmNotBlocked {
        /// The threads (tids) that have it unblocked.
        tids: Vec<i32>,
    },
}

impl From<SysError> for WakeError {
    fn from(e: SysError) -> Self {
        WakeError::Sys(e)
    }
}

impl fmt::Display for WakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WakeError::Sys(e) => e.fmt(f),
            WakeError::NotArmed => f.write_str("timer waited on before it was armed"),
            WakeError::Interrupted => f.write_str("the wait was interrupted by a signal"),
            WakeError::InvalidTimeline {
                first_deadline,
                period,
            } => write!(
                f,
                "invalid timeline: first deadline {first_deadline}, period {period} \
                 (the period must be positive and the deadline after boot)"
            ),
            WakeError::SigalrmNotBlocked { tids } => write!(
                f,
                "the itimer driver needs SIGALRM blocked in every thread, but threads {tids:?} \
                 have it unblocked; call rt::wake::block_sigalrm() in main before spawning threads"
            ),
        }
    }
}

impl std::error::Error for WakeError {}

pub(crate) fn check_timeline(first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
    if period.is_positive() && first_deadline.is_positive() {
        Ok(())
    } else {
        Err(WakeError::InvalidTimeline {
            first_deadline,
            period,
        })
    }
}

/// Any of the drivers, chosen at run time by [`TimerKind`]: an enum, not a `Box`, so nothing is
/// allocated to pick one. The per-period [`TimerDriver::wait_until`] is a `match` to the concrete
/// driver (static dispatch, inlinable); the one-time `arm` goes through a `dyn` reference.
#[derive(Debug)]
pub enum Driver {
    /// `nanosleep`
    Nanosleep(AbsoluteNanosleep),
    /// `posix-timer`
    PosixTimer(PosixTimer),
    /// `timerfd`
    Timerfd(Timerfd),
    /// `relative-nanosleep`
    RelativeNanosleep(RelativeNanosleep),
    /// `select`
    Select(SelectTimeout),
    /// `itimer`
    Itimer(Itimer),
}

impl Driver {
    /// An unarmed driver of the given kind (no kernel resources yet).
    pub fn new(kind: TimerKind) -> Self {
        match kind {
            TimerKind::Nanosleep => Driver::Nanosleep(AbsoluteNanosleep::new()),
            TimerKind::PosixTimer => Driver::PosixTimer(PosixTimer::new()),
            TimerKind::Timerfd => Driver::Timerfd(Timerfd::new()),
            TimerKind::RelativeNanosleep => Driver::RelativeNanosleep(RelativeNanosleep::new()),
            TimerKind::Select => Driver::Select(SelectTimeout::new()),
            TimerKind::Itimer => Driver::Itimer(Itimer::new()),
        }
    }

    /// Which driver this is.
    pub fn kind(&self) -> TimerKind {
        match self {
            Driver::Nanosleep(_) => TimerKind::Nanosleep,
            Driver::PosixTimer(_) => TimerKind::PosixTimer,
            Driver::Timerfd(_) => TimerKind::Timerfd,
            Driver::RelativeNanosleep(_) => TimerKind::RelativeNanosleep,
            Driver::Select(_) => TimerKind::Select,
            Driver::Itimer(_) => TimerKind::Itimer,
        }
    }

    fn as_dyn(&mut self) -> &mut dyn TimerDriver {
        match self {
            Driver::Nanosleep(d) => d,
            Driver::PosixTimer(d) => d,
            Driver::Timerfd(d) => d,
            Driver::RelativeNanosleep(d) => d,
            Driver::Select(d) => d,
            Driver::Itimer(d) => d,
        }
    }
}

impl TimerDriver for Driver {
    fn arm(&mut self, first_deadline: Nanos, period: Nanos) -> Result<(), WakeError> {
        self.as_dyn().arm(first_deadline, period)
    }

    #[inline]
    fn wait_until(&mut self, deadline: Nanos) -> Result<WakeInfo, WakeError> {
        match self {
            Driver::Nanosleep(d) => d.wait_until(deadline),
            Driver::PosixTimer(d) => d.wait_until(deadline),
            Driver::Timerfd(d) => d.wait_until(deadline),
            Driver::RelativeNanosleep(d) => d.wait_until(deadline),
            Driver::Select(d) => d.wait_until(deadline),
            Driver::Itimer(d) => d.wait_until(deadline),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_names_round_trip() {
        for k in TimerKind::ALL {
            assert_eq!(k.to_string().parse::<TimerKind>().unwrap(), k);
            assert_eq!(Driver::new(k).kind(), k);
        }
        assert_eq!(TimerKind::default(), TimerKind::Nanosleep);
    }

    #[test]
    fn the_contract_names_are_exact() {
        let names: Vec<_> = TimerKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "nanosleep",
                "posix-timer",
                "timerfd",
                "relative-nanosleep",
                "select",
                "itimer"
            ]
        );
        let comparison: Vec<_> = TimerKind::ALL
            .into_iter()
            .filter(|k| k.is_comparison_only())
            .collect();
        assert_eq!(
            comparison,
            [
                TimerKind::RelativeNanosleep,
                TimerKind::Select,
                TimerKind::Itimer
            ]
        );
    }

    #[test]
    fn unknown_timer_lists_the_valid_names() {
        let e = "posix_timer".parse::<TimerKind>().unwrap_err().to_string();
        assert!(e.contains("`posix_timer`"), "{e}");
        for k in TimerKind::ALL {
            assert!(e.contains(k.name()), "{e} lacks {k}");
        }
    }

    #[test]
    fn bad_timelines_are_refused() {
        let mut d = Driver::new(TimerKind::Nanosleep);
        assert!(matches!(
            d.arm(Nanos::from_secs(1), Nanos::ZERO),
            Err(WakeError::InvalidTimeline { .. })
        ));
        assert!(matches!(
            d.arm(Nanos::ZERO, Nanos::from_millis(1)),
            Err(WakeError::InvalidTimeline { .. })
        ));
    }
}
