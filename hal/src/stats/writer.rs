//! The real-time side of the stats: one [`StatsWriter`] per thread, called once per period.
//!
//! Invariants: exactly one writer per stats block (the Hal hands each out once, and the type is not
//! `Sync`, so it cannot be shared between threads); every method is allocation-free, lock-free and
//! syscall-free, a bounded number of atomic loads and stores; the writer never waits for a reader.

use crate::thread::ThreadState;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::Ordering::{Relaxed, Release};

use super::arith;
use super::histogram::{bin_of, Bin};
use crate::layout::{function as f, stats as s};
use crate::segment::Block;
use crate::seqlock;

/// What the cycle loop measured in one period (see the cycle loop in docs/ARCHITECTURE.md, "The hot path").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeriodSample {
    /// Wake time, `CLOCK_MONOTONIC` ns.
    pub now_ns: u64,
    /// `now - deadline`: the wake latency (negative only when woken early).
    pub latency_ns: i64,
    /// `now - previous wake`; 0 on the first period (no previous wake: no jitter is counted).
    pub interval_ns: u64,
    /// Execution time of the whole function list this period.
    pub exec_ns: u64,
    /// Periods skipped because `now` was already past their deadlines (overruns).
    pub missed: u64,
    /// Drift of the thread's timeline as the loop measures it (e.g. against the ideal start + n·period).
    pub drift_ns: i64,
    /// The thread's `getrusage(RUSAGE_THREAD)` counters **since its previous spike sample** (or since the
    /// thread started), when the loop sampled them: normally only when [`StatsWriter::is_spike`] said so,
    /// since it costs a syscall. Recorded with the spike if it is among the worst kept; ignored otherwise.
    pub rusage: Option<ThreadRusage>,
}

/// Counters that explain a spike: a context switch or a page fault in a period is the usual culprit.
///
/// Both are **deltas**: what the thread's `getrusage(RUSAGE_THREAD)` counted since the previous spike
/// sample of that thread (or since the thread started, for its first spike), not the cumulative totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadRusage {
    /// Involuntary context switches (`ru_nivcsw`) since the previous spike sample.
    pub involuntary_ctx_switches: u64,
    /// Page faults (`ru_minflt + ru_majflt`) since the previous spike sample.
    pub page_faults: u64,
}

/// Where a new spike of latency `latency_ns` goes in the ring of the worst spikes, or `None` if it is not
/// worse than any kept one. `total` is the number of spikes recorded before this one, `entry(i)` reads
/// entry `i`'s `(latency, cycle)`.
///
/// While the ring is not full, entries fill in order. Then the new spike replaces the entry with the
/// smallest latency if it is strictly larger (ties keep the older spike); among several entries with that
/// smallest latency, the newest goes. Constant time: [`SPIKE_RING`](s::SPIKE_RING) reads and compares.
#[inline]
fn worst_kept_slot(
    total: u64,
    latency_ns: i64,
    entry: impl Fn(usize) -> (i64, u64),
) -> Option<usize> {
    if total < s::SPIKE_RING as u64 {
        return Some(total as usize);
    }
    let mut victim = 0;
    let (mut min_lat, mut min_cycle) = entry(0);
    for i in 1..s::SPIKE_RING {
        let (lat, cycle) = entry(i);
        if lat < min_lat || (lat == min_lat && cycle > min_cycle) {
            (victim, min_lat, min_cycle) = (i, lat, cycle);
        }
    }
    (latency_ns > min_lat).then_some(victim)
}

/// Single writer of one thread's stats block and of its functions' timing records, from
/// [`Hal::stats_writer`](crate::Hal::stats_writer), to be moved into that thread.
///
/// RT-safe: every method is allocation-free, lock-free and syscall-free, a bounded number of relaxed
/// atomic loads and stores; it never waits for a reader (readers retry). It is `Send` but not `Sync`:
/// exactly one thread writes a block, which is what the seqlock needs.
pub struct StatsWriter {
    stats: Block,
    /// The thread record's `running` cell.
    running: Block,
    /// Function records in `addf` order: index = position in the thread.
    functions: Vec<Block>,
    period_ns: u64,
    bin_ns: u64,
    bins: usize,
    spike_threshold_ns: i64,
    /// Offset of the ring of the latest spikes in the stats block.
    recent: usize,
    /// Offset of the I/O section (2.2) in the stats block.
    io: usize,
    /// Offset of the I/O errors (2.3) in the stats block.
    io_errors: usize,
    /// Not Sync: two threads writing one block would break the seqlock.
    _single_writer: PhantomData<Cell<()>>,
}

pub(crate) struct StatsWriterParts {
    pub stats: Block,
    pub running: Block,
    pub functions: Vec<Block>,
    pub period_ns: u64,
    pub bin_ns: u64,
    pub bins: usize,
    pub spike_threshold_ns: i64,
}

impl StatsWriter {
    pub(crate) fn new(p: StatsWriterParts) -> Self {
        debug_assert!(p.bin_ns > 0);
        StatsWriter {
            stats: p.stats,
            running: p.running,
            functions: p.functions,
            period_ns: p.period_ns,
            bin_ns: p.bin_ns,
            bins: p.bins,
            spike_threshold_ns: p.spike_threshold_ns,
            recent: s::recent(p.bins),
            io: s::io(p.bins),
            io_errors: s::io_errors(p.bins),
            _single_writer: PhantomData,
        }
    }

    /// The thread's period in ns.
    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    /// Number of functions added to this thread (valid `position`s for [`record_function`](Self::record_function)).
    pub fn function_count(&self) -> usize {
        self.functions.len()
    }

    /// The latency in ns at or above which a period is a spike.
    pub fn spike_threshold_ns(&self) -> i64 {
        self.spike_threshold_ns
    }

    /// Whether a period with this latency (ns) and this many missed periods is a spike (at or above the
    /// threshold, or any missed period): ask before deciding to pay for `getrusage`. Pure arithmetic.
    #[inline]
    pub fn is_spike(&self, latency_ns: i64, missed: u64) -> bool {
        latency_ns >= self.spike_threshold_ns || missed > 0
    }

    /// Publishes whether the thread's loop is running (readers show it; outside the seqlock).
    pub fn set_running(&self, running: bool) {
        let state = if running {
            ThreadState::Running
        } else {
            ThreadState::Stopped
        };
        self.running.at(0).store(state.encode(), Release);
    }

    /// Records one period. Call once per period, after the functions ran.
    ///
    /// Under the seqlock: cycles, overruns, latency min/max/sums, jitter, execution times, drift, last wake;
    /// and, for a spike ([`is_spike`](Self::is_spike)), `spikes_total` and the spike ring, which keeps the
    /// [`SPIKES_KEPT`](crate::SPIKES_KEPT) largest latencies seen: a spike replaces the kept one with the
    /// smallest latency if its own is strictly larger (ties keep the older), in constant time. Then one
    /// histogram counter. Allocation-free, lock-free, syscall-free.
    #[inline]
    pub fn record(&self, sample: &PeriodSample) {
        let b = &self.stats;
        let get = |off: usize| b.at(off).load(Relaxed);
        let set = |off: usize, v: u64| b.at(off).store(v, Relaxed);
        seqlock::write(b.at(s::SEQ), || {
            set(s::CYCLES, get(s::CYCLES).saturating_add(1));
            set(s::OVERRUNS, get(s::OVERRUNS).saturating_add(sample.missed));
            let lat = sample.latency_ns;
            set(s::LATENCY_MIN, (get(s::LATENCY_MIN) as i64).min(lat) as u64);
            set(s::LATENCY_MAX, (get(s::LATENCY_MAX) as i64).max(lat) as u64);
            let sum = arith::join_i128(get(s::LATENCY_SUM_LO), get(s::LATENCY_SUM_HI));
            let sq = arith::join_u128(get(s::LATENCY_SQ_LO), get(s::LATENCY_SQ_HI));
            let (sum, sq) = arith::accumulate(sum, sq, lat);
            let (lo, hi) = arith::split_i128(sum);
            set(s::LATENCY_SUM_LO, lo);
            set(s::LATENCY_SUM_HI, hi);
            let (lo, hi) = arith::split_u128(sq);
            set(s::LATENCY_SQ_LO, lo);
            set(s::LATENCY_SQ_HI, hi);
            if sample.interval_ns != 0 {
                let j = arith::interval_jitter(sample.interval_ns, self.period_ns);
                set(s::JITTER_MAX, get(s::JITTER_MAX).max(j));
            }
            set(s::EXEC_LAST, sample.exec_ns);
            set(s::EXEC_MAX, get(s::EXEC_MAX).max(sample.exec_ns));
            set(s::EXEC_SUM, get(s::EXEC_SUM).saturating_add(sample.exec_ns));
            set(s::DRIFT, sample.drift_ns as u64);
            set(s::LAST_WAKE_NS, sample.now_ns);
            if self.is_spike(lat, sample.missed) {
                let total = get(s::SPIKES_TOTAL);
                if let Some(slot) = worst_kept_slot(total, lat, |i| {
                    let e = s::SPIKES + i * s::spike::SIZE;
                    (
                        get(e + s::spike::LATENCY_NS) as i64,
                        get(e + s::spike::CYCLE),
                    )
                }) {
                    let e = s::SPIKES + slot * s::spike::SIZE;
                    let usage = sample.rusage.unwrap_or_default();
                    set(e + s::spike::CYCLE, get(s::CYCLES));
                    set(e + s::spike::TIME_NS, sample.now_ns);
                    set(e + s::spike::LATENCY_NS, lat as u64);
                    set(
                        e + s::spike::INVOLUNTARY_CTX_SWITCHES,
                        usage.involuntary_ctx_switches,
                    );
                    set(e + s::spike::PAGE_FAULTS, usage.page_faults);
                }
                // Every spike also goes to the ring of the latest ones (1.3), for a reader that
                // follows them all (latency-test --trace explains each one as it comes).
                let usage = sample.rusage.unwrap_or_default();
                let e = self.recent + (total % s::RECENT_RING as u64) as usize * s::spike::SIZE;
                set(e + s::spike::CYCLE, get(s::CYCLES));
                set(e + s::spike::TIME_NS, sample.now_ns);
                set(e + s::spike::LATENCY_NS, lat as u64);
                set(
                    e + s::spike::INVOLUNTARY_CTX_SWITCHES,
                    usage.involuntary_ctx_switches,
                );
                set(e + s::spike::PAGE_FAULTS, usage.page_faults);
                set(s::SPIKES_TOTAL, total.saturating_add(1));
            }
        });
        let counter = match bin_of(sample.latency_ns, self.bin_ns, self.bins) {
            Bin::Underflow => s::UNDERFLOW,
            Bin::Index(i) => s::BINS + i * 8,
            Bin::Overflow => s::OVERFLOW,
        };
        // Single writer: a load and a store, no locked read-modify-write needed.
        let c = b.at(counter);
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Records the I/O time of one period: `io_ns`, the time the thread's I/O functions took in it
    /// (summed), `calls`, how many of them ran, and `errors`, the errors their drivers counted
    /// during them (layout 2.3's I/O errors). Call once per period with I/O, after
    /// [`record`](Self::record). Under the block's seqlock: count, last, min, max, sum, calls,
    /// errors; then one counter of the I/O histogram (the thread's bin width). Allocation-, lock-
    /// and syscall-free, like `record`.
    #[inline]
    pub fn record_io(&self, io_ns: u64, calls: u64, errors: u64) {
        let b = &self.stats;
        let io = self.io;
        let get = |off: usize| b.at(io + off).load(Relaxed);
        let set = |off: usize, v: u64| b.at(io + off).store(v, Relaxed);
        seqlock::write(b.at(s::SEQ), || {
            let n = get(s::io::COUNT);
            set(s::io::LAST, io_ns);
            set(
                s::io::MIN,
                if n == 0 {
                    io_ns
                } else {
                    get(s::io::MIN).min(io_ns)
                },
            );
            set(s::io::MAX, get(s::io::MAX).max(io_ns));
            set(s::io::SUM, get(s::io::SUM).saturating_add(io_ns));
            set(s::io::CALLS, get(s::io::CALLS).saturating_add(calls));
            if errors > 0 {
                let e = |off: usize| b.at(self.io_errors + off);
                for (off, add) in [(s::io_errors::COUNT, errors), (s::io_errors::PERIODS, 1)] {
                    e(off).store(e(off).load(Relaxed).saturating_add(add), Relaxed);
                }
            }
            set(s::io::COUNT, n.saturating_add(1));
        });
        let counter = match bin_of(io_ns.min(i64::MAX as u64) as i64, self.bin_ns, self.bins) {
            Bin::Underflow | Bin::Overflow => s::io::OVERFLOW,
            Bin::Index(i) => s::io::BINS + i * 8,
        };
        let c = b.at(io + counter);
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// Records one call of the function at `position` in this thread: its execution time and its fault
    /// code (0 = ok). An unknown position is ignored (the RT path must not panic).
    #[inline]
    pub fn record_function(&self, position: usize, exec_ns: u64, fault_code: u32) {
        let Some(b) = self.functions.get(position) else {
            debug_assert!(
                false,
                "record_function({position}) but the thread has {}",
                self.functions.len()
            );
            return;
        };
        record_call(b, exec_ns, fault_code);
    }

    /// Clears the thread's and its functions' statistics (e.g. after a warm-up), keeping the config.
    pub fn reset(&self) {
        let b = &self.stats;
        seqlock::write(b.at(s::SEQ), || {
            for off in (s::CYCLES..s::BINS).step_by(8) {
                b.at(off).store(0, Relaxed);
            }
            b.at(s::LATENCY_MIN).store(i64::MAX as u64, Relaxed);
            b.at(s::LATENCY_MAX).store(i64::MIN as u64, Relaxed);
        });
        seqlock::write(b.at(s::SEQ), || {
            for off in (s::io::COUNT..s::io::OVERFLOW)
                .step_by(8)
                .map(|off| self.io + off)
                .chain([s::io_errors::COUNT, s::io_errors::PERIODS].map(|off| self.io_errors + off))
            {
                b.at(off).store(0, Relaxed);
            }
        });
        for off in [s::UNDERFLOW, s::OVERFLOW, self.io + s::io::OVERFLOW]
            .into_iter()
            .chain((0..self.bins).map(|i| s::BINS + i * 8))
            .chain((0..self.bins).map(|i| self.io + s::io::BINS + i * 8))
        {
            b.at(off).store(0, Relaxed);
        }
        for fb in &self.functions {
            seqlock::write(fb.at(f::SEQ), || {
                for off in (f::LAST_NS..f::SIZE).step_by(8) {
                    fb.at(off).store(0, Relaxed);
                }
            });
        }
    }
}

/// One function call into a function record's seqlocked timing fields.
#[inline]
fn record_call(b: &Block, exec_ns: u64, fault_code: u32) {
    let get = |off: usize| b.at(off).load(Relaxed);
    let set = |off: usize, v: u64| b.at(off).store(v, Relaxed);
    seqlock::write(b.at(f::SEQ), || {
        set(f::LAST_NS, exec_ns);
        set(f::MAX_NS, get(f::MAX_NS).max(exec_ns));
        set(f::SUM_NS, get(f::SUM_NS).saturating_add(exec_ns));
        set(f::CALLS, get(f::CALLS).saturating_add(1));
        if fault_code != 0 {
            set(f::FAULTS, get(f::FAULTS).saturating_add(1));
        }
        set(f::FAULT_CODE, fault_code as u64);
    });
}

/// The single writer of one function's timing record, from
/// [`Hal::function_timer`](crate::Hal::function_timer): moved into whichever thread runs the function.
/// A function runs in at most one thread at a time (the runtime hands it over only after the thread
/// that ran it has let go), so the record keeps exactly one writer. RT-safe like [`StatsWriter`].
pub struct FunctionTimer {
    record: Block,
    _single_writer: PhantomData<Cell<()>>,
}

impl FunctionTimer {
    pub(crate) fn new(record: Block) -> Self {
        FunctionTimer {
            record,
            _single_writer: PhantomData,
        }
    }

    /// Records one call: its execution time and its fault code (0 = ok).
    #[inline]
    pub fn record(&self, exec_ns: u64, fault_code: u32) {
        record_call(&self.record, exec_ns, fault_code);
    }
}
