//! The latency histogram: bin arithmetic (writer side) and percentiles (reader side).
//!
//! Bins are independent atomic counters outside the seqlock: a reader may see a histogram one sample
//! ahead or behind the seqlocked totals, which is harmless for a distribution and keeps the writer's
//! seqlock section short.

/// Where one latency sample is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bin {
    /// Negative latency (woke before the deadline: only possible with spin/hybrid wake or a clock step).
    Underflow,
    /// In bin `i`: `[i * bin_ns, (i + 1) * bin_ns)`.
    Index(usize),
    /// At or beyond `bin_ns * bins`.
    Overflow,
}

/// The bin of `latency_ns` for bins of width `bin_ns` (≥ 1), `bins` of them.
#[inline]
pub(crate) fn bin_of(latency_ns: i64, bin_ns: u64, bins: usize) -> Bin {
    if latency_ns < 0 {
        return Bin::Underflow;
    }
    let index = latency_ns as u64 / bin_ns;
    if index < bins as u64 {
        Bin::Index(index as usize)
    } else {
        Bin::Overflow
    }
}

/// A percentile as far as a histogram can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Percentile {
    /// In the underflow counter: below 0 ns.
    Below0,
    /// In a bin: at most this many ns (the bin's upper edge), the conservative reading for latency.
    AtMost(u64),
    /// In the overflow counter: beyond the histogram's range, which starts at this many ns.
    Beyond(u64),
}

impl Percentile {
    /// A single number for reports: the bin's upper edge, clamped to the observed `[min, max]` (the true
    /// value can't lie outside it, and below/beyond the range the observed extreme is the best bound).
    pub fn clamp_ns(self, observed_min: i64, observed_max: i64) -> i64 {
        let v = match self {
            Percentile::Below0 => observed_min,
            Percentile::AtMost(ns) => i64::try_from(ns).unwrap_or(i64::MAX),
            Percentile::Beyond(_) => observed_max,
        };
        v.clamp(observed_min.min(observed_max), observed_max)
    }
}

/// p50, p99 and p99.9, the figures latency-test reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentiles {
    /// The median.
    pub p50: Percentile,
    /// The 99th percentile.
    pub p99: Percentile,
    /// The 99.9th percentile.
    pub p999: Percentile,
}

/// A copy of one thread's latency histogram, from [`HalReader::histogram`](crate::HalReader::histogram).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Bin width in ns.
    pub bin_ns: u64,
    /// `counts[i]` = samples in `[i * bin_ns, (i + 1) * bin_ns)`.
    pub counts: Vec<u64>,
    /// Samples with a negative latency (woken before the deadline).
    pub underflow: u64,
    /// Samples at or beyond `counts.len() * bin_ns`.
    pub overflow: u64,
}

impl HistogramSnapshot {
    /// Samples counted, including under- and overflow (saturating: a corrupt segment can't make it wrap).
    pub fn total(&self) -> u64 {
        self.counts
            .iter()
            .fold(self.underflow.saturating_add(self.overflow), |a, &c| {
                a.saturating_add(c)
            })
    }

    /// The `q`-quantile (`0.0 < q <= 1.0`, e.g. 0.999), or `None` if empty or `q` out of range.
    /// It is the smallest bin at which the cumulative count reaches `ceil(q * total)`.
    pub fn percentile(&self, q: f64) -> Option<Percentile> {
        let total = self.total();
        if total == 0 || !(q > 0.0 && q <= 1.0) {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = self.underflow;
        if seen >= rank {
            return Some(Percentile::Below0);
        }
        for (i, &c) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(c);
            if seen >= rank {
                return Some(Percentile::AtMost(
                    (i as u64 + 1).saturating_mul(self.bin_ns),
                ));
            }
        }
        Some(Percentile::Beyond(
            (self.counts.len() as u64).saturating_mul(self.bin_ns),
        ))
    }

    /// p50/p99/p99.9 in one call.
    pub fn percentiles(&self) -> Option<Percentiles> {
        Some(Percentiles {
            p50: self.percentile(0.5)?,
            p99: self.percentile(0.99)?,
            p999: self.percentile(0.999)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_edges() {
        assert_eq!(bin_of(-1, 1000, 10), Bin::Underflow);
        assert_eq!(bin_of(0, 1000, 10), Bin::Index(0));
        assert_eq!(bin_of(999, 1000, 10), Bin::Index(0));
        assert_eq!(bin_of(1000, 1000, 10), Bin::Index(1));
        assert_eq!(bin_of(9_999, 1000, 10), Bin::Index(9));
        assert_eq!(bin_of(10_000, 1000, 10), Bin::Overflow);
        assert_eq!(
            bin_of(i64::MAX, 1, usize::MAX),
            Bin::Index(i64::MAX as usize)
        );
        assert_eq!(bin_of(i64::MIN, 1, 1), Bin::Underflow);
    }

    fn hist(counts: &[u64], under: u64, over: u64) -> HistogramSnapshot {
        HistogramSnapshot {
            bin_ns: 1000,
            counts: counts.to_vec(),
            underflow: under,
            overflow: over,
        }
    }

    #[test]
    fn percentiles_walk_the_cumulative_count() {
        // 1000 samples: 900 in bin 0, 90 in bin 1, 9 in bin 5, 1 overflow.
        let mut c = vec![0; 10];
        c[0] = 900;
        c[1] = 90;
        c[5] = 9;
        let h = hist(&c, 0, 1);
        let p = h.percentiles().unwrap();
        assert_eq!(p.p50, Percentile::AtMost(1000));
        assert_eq!(p.p99, Percentile::AtMost(2000));
        assert_eq!(p.p999, Percentile::AtMost(6000));
        assert_eq!(h.percentile(1.0), Some(Percentile::Beyond(10_000)));
        assert_eq!(
            hist(&[0, 0], 5, 0).percentile(0.5),
            Some(Percentile::Below0)
        );
    }

    #[test]
    fn percentile_edge_cases() {
        assert_eq!(hist(&[0; 4], 0, 0).percentiles(), None);
        let h = hist(&[1], 0, 0);
        assert_eq!(h.percentile(0.0), None);
        assert_eq!(h.percentile(f64::NAN), None);
        assert_eq!(h.percentile(1.5), None);
        assert_eq!(h.percentile(1e-300), Some(Percentile::AtMost(1000)));
        // Saturating with absurd counts from a corrupt segment.
        let h = hist(&[u64::MAX, u64::MAX], u64::MAX, u64::MAX);
        assert_eq!(h.total(), u64::MAX);
        assert!(h.percentile(0.999).is_some());
        let h = HistogramSnapshot {
            bin_ns: u64::MAX,
            counts: vec![0, 1],
            underflow: 0,
            overflow: 0,
        };
        assert_eq!(h.percentile(0.5), Some(Percentile::AtMost(u64::MAX)));
    }

    #[test]
    fn clamp_to_observed_range() {
        assert_eq!(Percentile::AtMost(2000).clamp_ns(10, 1500), 1500);
        assert_eq!(Percentile::AtMost(2000).clamp_ns(10, 5000), 2000);
        assert_eq!(Percentile::Beyond(10_000).clamp_ns(10, 123_456), 123_456);
        assert_eq!(Percentile::Below0.clamp_ns(-42, 100), -42);
        assert_eq!(Percentile::AtMost(u64::MAX).clamp_ns(0, i64::MAX), i64::MAX);
    }
}
