//! The I/O time of an RT thread's period, for both kinds of thread (one design): code that does a
//! period's I/O — LinuxCNC's Mesa read/write through the master's timing wrapper
//! (`master/io_time.rs`), latency-test's board round trip (`latency/board.rs`) — measures it
//! itself and adds it here with [`note_io`]; the thread's period boundary takes the sum with
//! `take` and records it after the period's latency and execution time
//! (`StatsWriter::record_io`, the stats block's I/O section, LAYOUT.md §6): rtapi's own cycle loop
//! in `Cycler::period` (`thread.rs`), a hosted thread in `Period::wait` (`hosted/period.rs`).
//!
//! One thread-local cell per thread, initialised without allocation (`const`): a note is one
//! thread-local access and three additions, no allocation, lock or log. A note made on a thread
//! that is not an RT thread of the runtime is never taken, and so never recorded.

use std::cell::Cell;

/// The I/O of one period so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Time the I/O calls took, summed, ns.
    pub(crate) ns: u64,
    /// I/O calls noted.
    pub(crate) calls: u64,
    /// Errors the I/O counted during them (lost or late packets).
    pub(crate) errors: u64,
}

std::thread_local! {
    static PERIOD_IO: Cell<Tally> = const { Cell::new(Tally { ns: 0, calls: 0, errors: 0 }) };
}

/// Adds one I/O call of `ns` nanoseconds with `errors` errors to the calling thread's current
/// period; recorded with that period at its end. No allocation, lock or log.
#[inline]
pub fn note_io(ns: u64, errors: u64) {
    PERIOD_IO.with(|c| {
        let t = c.get();
        c.set(Tally {
            ns: t.ns.saturating_add(ns),
            calls: t.calls.saturating_add(1),
            errors: t.errors.saturating_add(errors),
        });
    });
}

/// The calling thread's I/O since the last take, reset to none.
#[inline]
pub(crate) fn take() -> Tally {
    PERIOD_IO.with(|c| c.replace(Tally::default()))
}

/// Records `tally` into the thread's stats block when the period did any I/O.
#[inline]
pub(crate) fn record(tally: Tally, stats: &rtapi_hal::StatsWriter) {
    if tally.calls > 0 {
        stats.record_io(tally.ns, tally.calls, tally.errors);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_add_up_per_thread_and_a_take_resets() {
        let _ = take();
        note_io(100, 0);
        note_io(50, 2);
        std::thread::spawn(|| note_io(7, 7)).join().unwrap();
        assert_eq!(
            take(),
            Tally {
                ns: 150,
                calls: 2,
                errors: 2
            }
        );
        assert_eq!(take(), Tally::default());
    }
}
