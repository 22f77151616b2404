//! Bookkeeping shared by the drivers whose kernel timer keeps its own periodic timeline
//! (`posix-timer`, `timerfd`): which expiration a requested deadline corresponds to, and how
//! many expirations the kernel has reported so far.
//!
//! Why it is needed: after the loop skipped missed periods and asks for deadline *k*, the
//! kernel timer has already expired for the skipped ones, so a naive "wait for the next
//! expiration" would return at once — early, off the timeline. Counting expirations lets the
//! driver keep waiting until expiration *k* itself, and report how far past it the kernel was.

use crate::rt::clock::{next_on_timeline, Nanos};

/// Expirations are numbered 0, 1, 2, … at `origin + k·period`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticks {
    origin: Nanos,
    period: Nanos,
    /// How many expirations the kernel has reported (indices `0..seen` have passed).
    seen: u64,
}

impl Ticks {
    pub(crate) fn new(origin: Nanos, period: Nanos) -> Self {
        Ticks {
            origin,
            period,
            seen: 0,
        }
    }

    /// The index of the expiration that serves `deadline`: the first at or after it.
    #[inline]
    pub(crate) fn index_for(&self, deadline: Nanos) -> u64 {
        next_on_timeline(self.origin, self.period, deadline).0
    }

    /// Has expiration `index` been reported?
    #[inline]
    pub(crate) fn reached(&self, index: u64) -> bool {
        self.seen > index
    }

    /// Record `count` more expirations (a timerfd read, or 1 + the overrun of a signal).
    #[inline]
    pub(crate) fn add(&mut self, count: u64) {
        self.seen += count;
    }

    /// Expirations reported beyond `index`: periods the wake for `index` was too late for.
    #[inline]
    pub(crate) fn overruns_after(&self, index: u64) -> u64 {
        self.seen.saturating_sub(index + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_expirations_are_not_overruns() {
        let p = Nanos::from_millis(10);
        let o = Nanos::from_secs(1);
        let mut t = Ticks::new(o, p);
        let i0 = t.index_for(o);
        assert_eq!(i0, 0);
        assert!(!t.reached(i0));
        t.add(1);
        assert!(t.reached(i0));
        assert_eq!(t.overruns_after(i0), 0);
        // The loop overran and now asks for deadline 4: expirations 1..=3 are already
        // reported (count 3), which does not reach 4, so the driver keeps waiting.
        let i4 = t.index_for(o + p * 4);
        t.add(3);
        assert!(!t.reached(i4));
        t.add(1);
        assert!(t.reached(i4));
        assert_eq!(t.overruns_after(i4), 0);
        // A wake so late that two more expirations had passed.
        let i5 = t.index_for(o + p * 5);
        t.add(3);
        assert_eq!(t.overruns_after(i5), 2);
    }
}
