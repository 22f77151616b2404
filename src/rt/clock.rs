//! Monotonic time as plain `i64` nanoseconds.
//!
//! Why not `std::time::Instant`? The cycle loop needs arithmetic that `Instant` does not
//! offer — signed differences (a wake can be *early* relative to a deadline under `spin`),
//! multiplication by a period count, a value that fits in one atomic cell of the HAL segment —
//! and it needs to hand the very same instants to `clock_nanosleep`, `timer_settime` and
//! `timerfd_settime`, which all speak `timespec` on `CLOCK_MONOTONIC`. One `i64` covers ±292
//! years, so overflow cannot happen for instants since boot plus any sane period; the operators
//! below rely on that (they panic on overflow in debug builds, like integer arithmetic does).
//!
//! [`Nanos`] is used both for instants on `CLOCK_MONOTONIC` and for durations: the loop
//! constantly moves between the two (`deadline + period`, `now - deadline`) and a second type
//! would only add conversions.

use std::fmt;
use std::ops::{Add, AddAssign, Mul, Neg, Sub, SubAssign};
use std::time::Duration;

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// Nanoseconds: an instant on `CLOCK_MONOTONIC` or a signed duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(i64);

impl Nanos {
    /// Zero: the epoch of `CLOCK_MONOTONIC` (boot), or an empty duration.
    pub const ZERO: Nanos = Nanos(0);

    /// From a count of nanoseconds.
    pub const fn from_nanos(ns: i64) -> Self {
        Nanos(ns)
    }

    /// From microseconds.
    pub const fn from_micros(us: i64) -> Self {
        Nanos(us * 1_000)
    }

    /// From milliseconds.
    pub const fn from_millis(ms: i64) -> Self {
        Nanos(ms * 1_000_000)
    }

    /// From seconds.
    pub const fn from_secs(s: i64) -> Self {
        Nanos(s * NANOS_PER_SEC)
    }

    /// The count of nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// The absolute value, for jitter (`|interval - period|`).
    pub const fn abs(self) -> Self {
        Nanos(self.0.abs())
    }

    /// `true` for a strictly positive duration (a usable period).
    pub const fn is_positive(self) -> bool {
        self.0 > 0
    }

    /// Convert to a `timespec`, always normalized: `0 <= tv_nsec < 1_000_000_000`, with a
    /// negative value carried in `tv_sec` (−1 ns is `{ tv_sec: -1, tv_nsec: 999_999_999 }`).
    ///
    /// The kernel rejects `tv_nsec == 1_000_000_000` with `EINVAL` — a classic RTAPI bug when
    /// a deadline is advanced by adding to `tv_nsec` and carrying with `>` instead of `>=`.
    /// Euclidean division makes that value unrepresentable here.
    pub fn to_timespec(self) -> libc::timespec {
        libc::timespec {
            tv_sec: self.0.div_euclid(NANOS_PER_SEC) as libc::time_t,
            tv_nsec: self.0.rem_euclid(NANOS_PER_SEC) as libc::c_long,
        }
    }

    /// Convert from a `timespec`, accepting unnormalized input (`tv_nsec` out of range or
    /// negative, as some hand-built values are). Saturates at the `i64` range.
    // `time_t` and `c_long` are `i64` here but `i32` on 32-bit ARM controller boards.
    #[allow(clippy::useless_conversion)]
    pub fn from_timespec(ts: libc::timespec) -> Self {
        let secs = i64::from(ts.tv_sec);
        let nsec = i64::from(ts.tv_nsec);
        Nanos(secs.saturating_mul(NANOS_PER_SEC).saturating_add(nsec))
    }

    /// Convert to a `timeval` for the microsecond APIs (`select`, `setitimer`), rounding
    /// **up** to the next microsecond: rounding down would ask those calls to return before
    /// the deadline. Normalized like [`Nanos::to_timespec`].
    pub fn to_timeval_ceil(self) -> libc::timeval {
        let us = self.0.div_euclid(1_000) + i64::from(self.0.rem_euclid(1_000) != 0);
        libc::timeval {
            tv_sec: us.div_euclid(1_000_000) as libc::time_t,
            tv_usec: us.rem_euclid(1_000_000) as libc::suseconds_t,
        }
    }
}

/// Read `CLOCK_MONOTONIC`.
///
/// The clock the whole runtime measures on: it never jumps (unlike `CLOCK_REALTIME` under NTP
/// or `settimeofday`) and it is the clock every timer driver arms, so a deadline computed here
/// means the same instant to the kernel. On Linux this is a vDSO call: no syscall, no
/// allocation, safe on the RT path.
#[doc(alias = "clock_gettime")]
#[inline]
pub fn now() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    // CLOCK_MONOTONIC always exists and the pointer is valid, so the only documented
    // errors (EINVAL, EFAULT) cannot occur.
    debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    Nanos::from_timespec(ts)
}

/// A cheap clock for short intervals (a function's execution time): the CPU's time-stamp counter,
/// scaled to ns, where the kernel itself keeps time with it; `CLOCK_MONOTONIC` elsewhere.
///
/// The TSC is used only when the kernel's clocksource is `tsc` (so the kernel trusts it: invariant,
/// synchronized across CPUs) and `/proc/cpuinfo` says `constant_tsc` and `nonstop_tsc`; its rate is
/// measured once against `CLOCK_MONOTONIC` over 20 ms. A read is then one `rdtsc` (about 7 ns on the
/// development VM, against 21 ns for `clock_gettime`), which is what LinuxCNC's `rtapi_get_clocks`
/// does too. Only differences of two reads mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalClock {
    /// ns per tick × 2^32, or 0 for `CLOCK_MONOTONIC`.
    scale: u64,
}

impl IntervalClock {
    /// `CLOCK_MONOTONIC`, always right, 21 ns a read.
    pub const MONOTONIC: IntervalClock = IntervalClock { scale: 0 };

    /// The process-wide choice (calibrated on first use, ~20 ms, never on the RT path when called
    /// while configuring).
    pub fn get() -> IntervalClock {
        static CHOICE: once_cell::sync::OnceCell<IntervalClock> = once_cell::sync::OnceCell::new();
        *CHOICE.get_or_init(|| Self::calibrate().unwrap_or(Self::MONOTONIC))
    }

    /// Whether this clock reads the TSC.
    pub fn is_tsc(self) -> bool {
        self.scale != 0
    }

    #[cfg(target_arch = "x86_64")]
    fn calibrate() -> Option<IntervalClock> {
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .ok()?;
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .unwrap_or_default();
        let has = |f: &str| flags.split_whitespace().any(|w| w == f);
        if source.trim() != "tsc" || !has("constant_tsc") || !has("nonstop_tsc") {
            return None;
        }
        let (m0, t0) = (now(), rdtsc());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (m1, t1) = (now(), rdtsc());
        let (ns, ticks) = ((m1 - m0).as_nanos(), t1.wrapping_sub(t0));
        if ns <= 0 || ticks == 0 {
            return None;
        }
        let scale = ((ns as u128) << 32) / ticks as u128;
        u64::try_from(scale)
            .ok()
            .filter(|s| *s > 0)
            .map(|scale| IntervalClock { scale })
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn calibrate() -> Option<IntervalClock> {
        None
    }

    /// A reading: TSC ticks, or `CLOCK_MONOTONIC` ns.
    #[inline]
    pub fn read(self) -> u64 {
        if self.scale != 0 {
            rdtsc()
        } else {
            now().as_nanos().max(0) as u64
        }
    }

    /// ns between two readings `a` then `b`.
    #[inline]
    pub fn ns(self, a: u64, b: u64) -> u64 {
        let d = b.wrapping_sub(a);
        if d > u64::MAX / 2 {
            return 0; // read out of order (another CPU's TSC a hair behind): no time
        }
        if self.scale != 0 {
            ((d as u128 * self.scale as u128) >> 32) as u64
        } else {
            d
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no preconditions on x86_64 (it exists on every x86_64 CPU; user-mode reads are
    // allowed unless the kernel set CR4.TSD, which Linux does not for normal processes, and
    // IntervalClock only uses it where the kernel's own clocksource is the TSC).
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    now().as_nanos().max(0) as u64
}

/// How many periods after `deadline` have also passed by `now`: the periods a thread that
/// was due at `deadline` and woke at `now` has **missed**.
///
/// Waking anywhere in `[deadline, deadline + period)` misses nothing; waking at
/// `deadline + period` or later means the next deadline has already gone by, and so on.
/// A wake before the deadline (possible with `spin` only if misused) misses nothing.
/// `period` must be positive.
#[inline]
pub fn missed_periods(deadline: Nanos, now: Nanos, period: Nanos) -> u64 {
    debug_assert!(period.is_positive());
    let late = now.0 - deadline.0;
    if late < period.0 {
        0
    } else {
        (late / period.0) as u64
    }
}

/// The first deadline on the timeline `origin + k·period` (k ≥ 0) that is at or after `t`,
/// with its index k. Used to resume a timeline after missed periods without drifting, and by
/// the periodic-timer drivers to map a requested deadline to the kernel's expiration count.
#[inline]
pub fn next_on_timeline(origin: Nanos, period: Nanos, t: Nanos) -> (u64, Nanos) {
    debug_assert!(period.is_positive());
    if t <= origin {
        return (0, origin);
    }
    let since = t.0 - origin.0;
    let k = since.div_euclid(period.0) + i64::from(since.rem_euclid(period.0) != 0);
    (k as u64, Nanos(origin.0 + k * period.0))
}

impl Add for Nanos {
    type Output = Nanos;
    #[inline]
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 + rhs.0)
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    #[inline]
    fn sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0 - rhs.0)
    }
}

impl AddAssign for Nanos {
    #[inline]
    fn add_assign(&mut self, rhs: Nanos) {
        self.0 += rhs.0;
    }
}

impl SubAssign for Nanos {
    #[inline]
    fn sub_assign(&mut self, rhs: Nanos) {
        self.0 -= rhs.0;
    }
}

impl Mul<i64> for Nanos {
    type Output = Nanos;
    #[inline]
    fn mul(self, rhs: i64) -> Nanos {
        Nanos(self.0 * rhs)
    }
}

impl Neg for Nanos {
    type Output = Nanos;
    #[inline]
    fn neg(self) -> Nanos {
        Nanos(-self.0)
    }
}

impl From<Duration> for Nanos {
    /// Saturates at `i64::MAX` ns (292 years).
    fn from(d: Duration) -> Self {
        Nanos(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

impl TryFrom<Nanos> for Duration {
    type Error = std::num::TryFromIntError;

    /// Fails for a negative value.
    fn try_from(n: Nanos) -> Result<Duration, Self::Error> {
        Ok(Duration::from_nanos(u64::try_from(n.0)?))
    }
}

impl fmt::Display for Nanos {
    /// The largest unit that shows the value exactly (`1ms`, `1500us`, `-7ns`), in the
    /// suffixes the CLI accepts, so a printed value can be pasted back as an argument.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        for (unit, scale) in [("s", NANOS_PER_SEC), ("ms", 1_000_000), ("us", 1_000)] {
            if v != 0 && v % scale == 0 {
                return write!(f, "{}{}", v / scale, unit);
            }
        }
        write!(f, "{}ns", v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(sec: i64, nsec: i64) -> libc::timespec {
        libc::timespec {
            tv_sec: sec as libc::time_t,
            tv_nsec: nsec as libc::c_long,
        }
    }

    #[test]
    fn timespec_is_normalized_at_the_second_boundary() {
        let t = Nanos::from_nanos(999_999_999).to_timespec();
        assert_eq!((t.tv_sec, t.tv_nsec), (0, 999_999_999));
        let t = Nanos::from_nanos(1_000_000_000).to_timespec();
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 0), "never tv_nsec == 1e9");
        let t = (Nanos::from_nanos(999_999_999) + Nanos::from_nanos(1)).to_timespec();
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 0));
    }

    #[test]
    fn negative_values_carry_into_seconds() {
        let t = Nanos::from_nanos(-1).to_timespec();
        assert_eq!((t.tv_sec, t.tv_nsec), (-1, 999_999_999));
        let t = Nanos::from_nanos(-1_000_000_000).to_timespec();
        assert_eq!((t.tv_sec, t.tv_nsec), (-1, 0));
        let t = Nanos::from_nanos(-1_500_000_000).to_timespec();
        assert_eq!((t.tv_sec, t.tv_nsec), (-2, 500_000_000));
    }

    #[test]
    #[allow(clippy::useless_conversion)] // c_long is i32 on 32-bit targets
    fn timespec_round_trips_for_many_values() {
        for v in [
            0,
            1,
            -1,
            999_999_999,
            1_000_000_000,
            -999_999_999,
            123_456_789_012,
            -123_456_789_012,
        ] {
            let n = Nanos::from_nanos(v);
            let t = n.to_timespec();
            assert!((0..1_000_000_000).contains(&i64::from(t.tv_nsec)), "{v}");
            assert_eq!(Nanos::from_timespec(t), n, "{v}");
        }
    }

    #[test]
    fn unnormalized_timespec_is_accepted() {
        assert_eq!(
            Nanos::from_timespec(ts(1, 1_000_000_000)),
            Nanos::from_secs(2)
        );
        assert_eq!(
            Nanos::from_timespec(ts(2, -1)),
            Nanos::from_nanos(1_999_999_999)
        );
        assert_eq!(
            Nanos::from_timespec(ts(i64::MAX, 0)),
            Nanos::from_nanos(i64::MAX)
        );
    }

    #[test]
    fn timeval_rounds_up_to_the_microsecond() {
        let t = Nanos::from_nanos(1).to_timeval_ceil();
        assert_eq!((t.tv_sec, t.tv_usec), (0, 1));
        let t = Nanos::from_nanos(999_999_001).to_timeval_ceil();
        assert_eq!((t.tv_sec, t.tv_usec), (1, 0), "never tv_usec == 1e6");
        let t = Nanos::from_micros(2_500_000).to_timeval_ceil();
        assert_eq!((t.tv_sec, t.tv_usec), (2, 500_000));
        let t = Nanos::from_nanos(-1).to_timeval_ceil();
        assert_eq!((t.tv_sec, t.tv_usec), (0, 0));
    }

    #[test]
    fn missed_periods_counts_whole_periods_after_the_deadline() {
        let d = Nanos::from_millis(100);
        let p = Nanos::from_millis(10);
        assert_eq!(missed_periods(d, d, p), 0);
        assert_eq!(missed_periods(d, d - Nanos::from_micros(5), p), 0);
        assert_eq!(missed_periods(d, d + p - Nanos::from_nanos(1), p), 0);
        assert_eq!(missed_periods(d, d + p, p), 1);
        // The seed-style case: a function that overran 3.5 periods.
        assert_eq!(missed_periods(d, d + Nanos::from_micros(35_000), p), 3);
    }

    #[test]
    fn next_on_timeline_rounds_up_to_the_grid() {
        let o = Nanos::from_secs(5);
        let p = Nanos::from_millis(10);
        assert_eq!(next_on_timeline(o, p, o - p), (0, o));
        assert_eq!(next_on_timeline(o, p, o), (0, o));
        assert_eq!(next_on_timeline(o, p, o + Nanos::from_nanos(1)), (1, o + p));
        assert_eq!(next_on_timeline(o, p, o + p * 7), (7, o + p * 7));
    }

    #[test]
    fn display_uses_the_largest_exact_unit() {
        assert_eq!(Nanos::from_millis(1).to_string(), "1ms");
        assert_eq!(Nanos::from_micros(1500).to_string(), "1500us");
        assert_eq!(Nanos::from_secs(2).to_string(), "2s");
        assert_eq!(Nanos::from_nanos(-7).to_string(), "-7ns");
        assert_eq!(Nanos::ZERO.to_string(), "0ns");
    }

    #[test]
    fn duration_conversions() {
        assert_eq!(
            Nanos::from(Duration::from_micros(25)),
            Nanos::from_micros(25)
        );
        assert_eq!(Nanos::from(Duration::MAX), Nanos::from_nanos(i64::MAX));
        assert!(Duration::try_from(Nanos::from_nanos(-1)).is_err());
        assert_eq!(
            Duration::try_from(Nanos::from_millis(3)).unwrap(),
            Duration::from_millis(3)
        );
    }

    #[test]
    fn now_is_monotonic_and_positive() {
        let a = now();
        let b = now();
        assert!(a.is_positive());
        assert!(b >= a);
    }

    #[test]
    fn the_interval_clock_agrees_with_clock_monotonic() {
        let c = IntervalClock::get();
        eprintln!(
            "interval clock: {}",
            if c.is_tsc() { "TSC" } else { "CLOCK_MONOTONIC" }
        );
        for ms in [1u64, 5] {
            let (m0, r0) = (now(), c.read());
            std::thread::sleep(std::time::Duration::from_millis(ms));
            let (r1, m1) = (c.read(), now());
            let (by_clock, by_mono) = (c.ns(r0, r1) as f64, (m1 - m0).as_nanos() as f64);
            // The interval read between the two monotonic reads is within them, give or take
            // the calibration's error (well under 1 %).
            assert!(
                by_clock <= by_mono * 1.01 && by_clock >= by_mono * 0.95 - 5_000.0,
                "{ms} ms: interval clock {by_clock} ns, CLOCK_MONOTONIC {by_mono} ns"
            );
        }
        assert_eq!(
            IntervalClock::MONOTONIC.ns(10, 5),
            0,
            "out of order is no time"
        );
    }
}
