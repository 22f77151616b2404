//! Thread and function statistics: written once per period by the RT thread, read by anyone.

mod arith;
mod histogram;
mod snapshot;
mod writer;

pub use histogram::{HistogramSnapshot, Percentile, Percentiles};
pub(crate) use snapshot::{
    read_function, read_histogram, read_io_histogram, read_recent, read_stats, IoAt,
};
pub use snapshot::{FunctionTiming, IoErrors, IoStats, RecentSpikes, Spike, ThreadStatsSnapshot};
pub(crate) use writer::StatsWriterParts;
pub use writer::{FunctionTimer, PeriodSample, StatsWriter, ThreadRusage};

/// Histogram shape of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistogramConfig {
    /// Bin width in ns (≥ 1).
    pub bin_ns: u64,
    /// Number of bins (1 ..= [`MAX_BINS`]).
    pub bins: usize,
}

/// How many spikes each thread keeps: the worst ones by latency (see [`StatsWriter::record`]).
pub const SPIKES_KEPT: usize = crate::layout::stats::SPIKE_RING;
/// How many of the latest spikes each thread keeps for readers that follow every spike
/// ([`HalReader::spikes_since`](crate::HalReader::spikes_since)).
pub const RECENT_SPIKES: usize = crate::layout::stats::RECENT_RING;

/// Upper bound on bins per thread: 1 M bins is 8 MiB, far past any useful latency histogram.
pub const MAX_BINS: usize = 1 << 20;

impl Default for HistogramConfig {
    /// 1 µs bins up to 1 ms, cyclictest's usual shape.
    fn default() -> Self {
        HistogramConfig {
            bin_ns: 1000,
            bins: 1000,
        }
    }
}
