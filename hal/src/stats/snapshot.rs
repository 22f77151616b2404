//! The reader side of the stats: consistent copies of a stats block and of a function's timing.

use std::sync::atomic::Ordering::Relaxed;

use super::arith;
use super::histogram::HistogramSnapshot;
use crate::error::{HalError, Result};
use crate::layout::{function as f, stats as s};
use crate::segment::Mapping;
use crate::seqlock;

/// One spike a thread kept: a period whose latency reached the thread's spike threshold or that missed
/// periods. Each thread keeps its [`SPIKES_KEPT`](crate::SPIKES_KEPT) worst by latency
/// ([`ThreadStatsSnapshot::worst_spikes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spike {
    /// Cycle number (1-based) of the period.
    pub cycle: u64,
    /// Wake time, `CLOCK_MONOTONIC` ns.
    pub time_ns: u64,
    /// Wake latency of the period in ns.
    pub latency_ns: i64,
    /// The thread's involuntary context switches (`ru_nivcsw`) since the previous spike sample of that
    /// thread (or since it started, for its first spike); 0 if the loop did not sample them.
    pub involuntary_ctx_switches: u64,
    /// The thread's minor + major page faults over the same span; 0 if not sampled.
    pub page_faults: u64,
}

/// A consistent copy of a thread's stats (everything under the seqlock, taken in one read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadStatsSnapshot {
    /// The thread's period in ns.
    pub period_ns: u64,
    /// Periods recorded.
    pub cycles: u64,
    /// Periods missed (skipped) in total.
    pub overruns: u64,
    /// Meaningful only when `cycles > 0`; see [`latency_min`](Self::latency_min).
    pub latency_min_ns: i64,
    /// Largest wake latency in ns; meaningful only when `cycles > 0` (see [`latency_max`](Self::latency_max)).
    pub latency_max_ns: i64,
    /// Sum of the wake latencies in ns (for the mean; saturating).
    pub latency_sum_ns: i128,
    /// Sum of the squared wake latencies in ns² (for the standard deviation; saturating).
    pub latency_sum_sq_ns2: u128,
    /// max |interval − period|.
    pub jitter_max_ns: u64,
    /// Execution time of the whole function list in the last period, ns.
    pub exec_last_ns: u64,
    /// Longest execution time of the function list, ns.
    pub exec_max_ns: u64,
    /// Sum of the execution times, ns (saturating).
    pub exec_sum_ns: u64,
    /// Drift of the thread's timeline as its loop last reported it, ns.
    pub drift_ns: i64,
    /// `CLOCK_MONOTONIC` ns of the last wake.
    pub last_wake_ns: u64,
    /// Spikes ever recorded; the ring keeps the worst [`SPIKES_KEPT`](crate::SPIKES_KEPT) of them.
    pub spikes_total: u64,
    /// The kept spikes as stored, in no particular order, the first `min(spikes_total, SPIKES_KEPT)`
    /// valid; use [`worst_spikes`](Self::worst_spikes) for them worst first.
    pub spike_ring: [Spike; s::SPIKE_RING],
    /// The thread's I/O time (layout 2.2; `None` from an older segment): see [`IoStats`].
    pub io: Option<IoStats>,
}

/// The time a thread's I/O functions (a Mesa card's `hm2_<board>.<n>.read`, `.write`,
/// `.read-request`) took per period, summed over the period, in the periods where any of them ran;
/// one consistent copy with the rest of the thread's stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Periods with I/O recorded.
    pub periods: u64,
    /// I/O function calls recorded (several per period: read, write, …).
    pub calls: u64,
    /// I/O time of the last such period, ns.
    pub last_ns: u64,
    /// Least I/O time of a period, ns (meaningful when `periods > 0`).
    pub min_ns: u64,
    /// Most I/O time of a period, ns.
    pub max_ns: u64,
    /// Sum over the periods, ns (saturating).
    pub sum_ns: u64,
    /// What the I/O drivers counted as errors during the calls (layout 2.3; `None` from an older
    /// segment): see [`IoErrors`].
    pub errors: Option<IoErrors>,
}

/// The errors a thread's I/O drivers counted during its I/O calls: for hm2_eth, its
/// `packet-error-total` — a reply not there at the read deadline (late or lost: the driver cannot
/// tell them apart when it gives up) or a write the card did not confirm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoErrors {
    /// Errors counted in all.
    pub count: u64,
    /// Periods with at least one.
    pub periods: u64,
}

impl IoStats {
    /// Least I/O time of a period, `None` before the first.
    pub fn min(&self) -> Option<u64> {
        (self.periods > 0).then_some(self.min_ns)
    }
    /// Mean I/O time of a period, `None` before the first.
    pub fn mean(&self) -> Option<f64> {
        arith::mean(self.sum_ns as i128, self.periods)
    }
}

impl ThreadStatsSnapshot {
    /// Smallest wake latency in ns, `None` before the first period.
    pub fn latency_min(&self) -> Option<i64> {
        (self.cycles > 0).then_some(self.latency_min_ns)
    }
    /// Largest wake latency in ns, `None` before the first period.
    pub fn latency_max(&self) -> Option<i64> {
        (self.cycles > 0).then_some(self.latency_max_ns)
    }
    /// Mean wake latency in ns, `None` before the first period.
    pub fn latency_mean(&self) -> Option<f64> {
        arith::mean(self.latency_sum_ns, self.cycles)
    }
    /// Population standard deviation of the wake latency in ns, `None` before the first period.
    pub fn latency_stddev(&self) -> Option<f64> {
        arith::stddev(self.latency_sum_ns, self.latency_sum_sq_ns2, self.cycles)
    }
    /// Mean execution time of the function list in ns, `None` before the first period.
    pub fn exec_mean(&self) -> Option<f64> {
        arith::mean(self.exec_sum_ns as i128, self.cycles)
    }
    /// The worst spikes recorded (up to [`SPIKES_KEPT`](crate::SPIKES_KEPT) of them), worst
    /// (largest latency) first; equal latencies in the order they happened. Allocation-free.
    pub fn worst_spikes(&self) -> impl Iterator<Item = Spike> {
        let kept = self.spikes_total.min(s::SPIKE_RING as u64) as usize;
        let mut worst = self.spike_ring;
        worst[..kept].sort_unstable_by_key(|sp| (std::cmp::Reverse(sp.latency_ns), sp.cycle));
        worst.into_iter().take(kept)
    }
}

/// A consistent copy of one function's timing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionTiming {
    /// Execution time of the last call, ns.
    pub last_ns: u64,
    /// Longest execution time, ns.
    pub max_ns: u64,
    /// Sum of the execution times, ns (saturating).
    pub sum_ns: u64,
    /// Calls recorded.
    pub calls: u64,
    /// Calls that reported a fault.
    pub faults: u64,
    /// The last call's fault code, 0 = ok.
    pub fault_code: u64,
}

impl FunctionTiming {
    /// Mean execution time in ns, `None` before the first call.
    pub fn mean_ns(&self) -> Option<f64> {
        arith::mean(self.sum_ns as i128, self.calls)
    }
}

/// Where a stats block has its I/O section (2.2) and its I/O errors (2.3), offsets from the block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IoAt {
    pub section: usize,
    pub errors: Option<usize>,
}

/// Reads the stats block at `base` (the caller validated `base .. base + s::BINS` is in bounds and aligned).
pub(crate) fn read_stats(
    m: &Mapping,
    base: usize,
    period_ns: u64,
    io: Option<IoAt>,
    what: &str,
) -> Result<ThreadStatsSnapshot> {
    let g = |off: usize| m.word(base + off).load(Relaxed);
    let io_g = |io: usize, off: usize| m.word(base + io + off).load(Relaxed);
    seqlock::read(m.word(base + s::SEQ), || {
        let mut spike_ring = [Spike::default(); s::SPIKE_RING];
        for (i, sp) in spike_ring.iter_mut().enumerate() {
            let e = s::SPIKES + i * s::spike::SIZE;
            *sp = Spike {
                cycle: g(e + s::spike::CYCLE),
                time_ns: g(e + s::spike::TIME_NS),
                latency_ns: g(e + s::spike::LATENCY_NS) as i64,
                involuntary_ctx_switches: g(e + s::spike::INVOLUNTARY_CTX_SWITCHES),
                page_faults: g(e + s::spike::PAGE_FAULTS),
            };
        }
        ThreadStatsSnapshot {
            period_ns,
            cycles: g(s::CYCLES),
            overruns: g(s::OVERRUNS),
            latency_min_ns: g(s::LATENCY_MIN) as i64,
            latency_max_ns: g(s::LATENCY_MAX) as i64,
            latency_sum_ns: arith::join_i128(g(s::LATENCY_SUM_LO), g(s::LATENCY_SUM_HI)),
            latency_sum_sq_ns2: arith::join_u128(g(s::LATENCY_SQ_LO), g(s::LATENCY_SQ_HI)),
            jitter_max_ns: g(s::JITTER_MAX),
            exec_last_ns: g(s::EXEC_LAST),
            exec_max_ns: g(s::EXEC_MAX),
            exec_sum_ns: g(s::EXEC_SUM),
            drift_ns: g(s::DRIFT) as i64,
            last_wake_ns: g(s::LAST_WAKE_NS),
            spikes_total: g(s::SPIKES_TOTAL),
            spike_ring,
            io: io.map(|at| {
                let io = at.section;
                IoStats {
                    periods: io_g(io, s::io::COUNT),
                    calls: io_g(io, s::io::CALLS),
                    last_ns: io_g(io, s::io::LAST),
                    min_ns: io_g(io, s::io::MIN),
                    max_ns: io_g(io, s::io::MAX),
                    sum_ns: io_g(io, s::io::SUM),
                    errors: at.errors.map(|e| IoErrors {
                        count: io_g(e, s::io_errors::COUNT),
                        periods: io_g(e, s::io_errors::PERIODS),
                    }),
                }
            }),
        }
    })
    .ok_or_else(|| HalError::Busy {
        what: format!("the stats of thread '{what}'"),
    })
    .and_then(|snap| {
        // Every recorded cycle updates both: min ≤ max once there is one (LAYOUT.md section 6).
        if snap.cycles > 0 && snap.latency_min_ns > snap.latency_max_ns {
            return Err(HalError::corrupt(format!(
                "the stats of thread '{what}' have latency min {} > max {}",
                snap.latency_min_ns, snap.latency_max_ns
            )));
        }
        Ok(snap)
    })
}

/// The spikes a thread recorded since a count a reader saw before, from the ring of the latest
/// spikes (layout 1.3): what a reader that follows every spike needs
/// ([`HalReader::spikes_since`](crate::HalReader::spikes_since)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentSpikes {
    /// Spikes ever recorded (pass it as `since` next time).
    pub total: u64,
    /// The spikes numbered `since..total` that the ring still holds, oldest first.
    pub spikes: Vec<Spike>,
    /// Spikes numbered at or after `since` that the ring no longer holds: they came faster than the
    /// reader read (the ring keeps the latest [`RECENT_SPIKES`](crate::RECENT_SPIKES)).
    pub lost: u64,
}

/// Reads the spikes numbered `since..` from the ring of the latest spikes of the stats block at `base`
/// (the caller validated a 1.3 block with `bins` bins).
pub(crate) fn read_recent(
    m: &Mapping,
    base: usize,
    bins: usize,
    since: u64,
    what: &str,
) -> Result<RecentSpikes> {
    let g = |off: usize| m.word(base + off).load(Relaxed);
    let ring = base + s::recent(bins);
    let len = s::RECENT_RING as u64;
    let mut spikes = Vec::with_capacity(s::RECENT_RING);
    seqlock::read(m.word(base + s::SEQ), || {
        spikes.clear();
        let total = g(s::SPIKES_TOTAL);
        let first = since.max(total.saturating_sub(len)).min(total);
        for n in first..total {
            let e = ring - base + (n % len) as usize * s::spike::SIZE;
            spikes.push(Spike {
                cycle: g(e + s::spike::CYCLE),
                time_ns: g(e + s::spike::TIME_NS),
                latency_ns: g(e + s::spike::LATENCY_NS) as i64,
                involuntary_ctx_switches: g(e + s::spike::INVOLUNTARY_CTX_SWITCHES),
                page_faults: g(e + s::spike::PAGE_FAULTS),
            });
        }
        (total, first.saturating_sub(since))
    })
    .map(|(total, lost)| RecentSpikes {
        total,
        spikes: std::mem::take(&mut spikes),
        lost,
    })
    .ok_or_else(|| HalError::Busy {
        what: format!("the latest spikes of thread '{what}'"),
    })
}

/// Reads the histogram of the stats block at `base` (caller validated the whole block incl. `bins`).
pub(crate) fn read_histogram(
    m: &Mapping,
    base: usize,
    bin_ns: u64,
    bins: usize,
) -> HistogramSnapshot {
    HistogramSnapshot {
        bin_ns,
        counts: (0..bins).map(|i| m.load(base + s::BINS + i * 8)).collect(),
        underflow: m.load(base + s::UNDERFLOW),
        overflow: m.load(base + s::OVERFLOW),
    }
}

/// Reads the I/O-time histogram of the stats block at `base` whose I/O section is at `io` (caller
/// validated a 2.2 block with `bins` bins). The thread's bin width; no underflow (a time is ≥ 0).
pub(crate) fn read_io_histogram(
    m: &Mapping,
    base: usize,
    io: usize,
    bin_ns: u64,
    bins: usize,
) -> HistogramSnapshot {
    HistogramSnapshot {
        bin_ns,
        counts: (0..bins)
            .map(|i| m.load(base + io + s::io::BINS + i * 8))
            .collect(),
        underflow: 0,
        overflow: m.load(base + io + s::io::OVERFLOW),
    }
}

/// Reads a function record's timing (caller validated the record).
pub(crate) fn read_function(m: &Mapping, base: usize, what: &str) -> Result<FunctionTiming> {
    let g = |off: usize| m.word(base + off).load(Relaxed);
    seqlock::read(m.word(base + f::SEQ), || FunctionTiming {
        last_ns: g(f::LAST_NS),
        max_ns: g(f::MAX_NS),
        sum_ns: g(f::SUM_NS),
        calls: g(f::CALLS),
        faults: g(f::FAULTS),
        fault_code: g(f::FAULT_CODE),
    })
    .ok_or_else(|| HalError::Busy {
        what: format!("the timing of function '{what}'"),
    })
}
