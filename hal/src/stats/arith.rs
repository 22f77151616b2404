//! The arithmetic of the stats block, as small pure functions tested at their extremes.
//!
//! Why this care: LinuxCNC's latency tool squared 32-bit values and overflowed above ~46 µs. Here a latency
//! is an `i64` of nanoseconds, its running sum an `i128` and its sum of squares a `u128`: 1 ms latencies
//! over 10^9 cycles give a sum of 10^15 and a sum of squares of 10^21, far inside both. Even the absurd
//! (i64::MAX every cycle) saturates instead of wrapping.

/// Splits an i128 into the (low, high) u64 words stored in the segment.
pub(super) fn split_i128(v: i128) -> (u64, u64) {
    (v as u64, (v >> 64) as u64)
}

/// Inverse of [`split_i128`].
pub(super) fn join_i128(lo: u64, hi: u64) -> i128 {
    ((hi as i128) << 64) | lo as i128
}

/// Splits a u128 into (low, high) u64 words.
pub(super) fn split_u128(v: u128) -> (u64, u64) {
    (v as u64, (v >> 64) as u64)
}

/// Inverse of [`split_u128`].
pub(super) fn join_u128(lo: u64, hi: u64) -> u128 {
    ((hi as u128) << 64) | lo as u128
}

/// Adds one latency sample to the running sum and sum of squares, saturating.
pub(super) fn accumulate(sum: i128, sum_sq: u128, x: i64) -> (i128, u128) {
    let sq = (x.unsigned_abs() as u128) * (x.unsigned_abs() as u128); // < 2^126: cannot overflow
    (sum.saturating_add(x as i128), sum_sq.saturating_add(sq))
}

/// Mean of `n` samples whose sum is `sum`; `None` without samples.
pub(super) fn mean(sum: i128, n: u64) -> Option<f64> {
    (n > 0).then(|| sum as f64 / n as f64)
}

/// Population variance from the running sums; `None` without samples.
///
/// Exact in integers while `n·Σx² − (Σx)²` fits a u128 (always, for realistic latencies: 1 ms over 10^9
/// cycles is 10^30 < 3.4·10^38), which avoids the catastrophic cancellation of the textbook float formula;
/// beyond that it falls back to floats. Never negative.
pub(super) fn variance(sum: i128, sum_sq: u128, n: u64) -> Option<f64> {
    if n == 0 {
        return None;
    }
    let abs_sum = sum.unsigned_abs();
    let exact = (n as u128)
        .checked_mul(sum_sq)
        .zip(abs_sum.checked_mul(abs_sum))
        .map(|(n_sq, sum2)| n_sq.saturating_sub(sum2));
    let nf = n as f64;
    Some(match exact {
        Some(num) => num as f64 / (nf * nf),
        None => {
            let m = sum as f64 / nf;
            (sum_sq as f64 / nf - m * m).max(0.0)
        }
    })
}

/// Standard deviation from the running sums; `None` without samples.
pub(super) fn stddev(sum: i128, sum_sq: u128, n: u64) -> Option<f64> {
    variance(sum, sum_sq, n).map(f64::sqrt)
}

/// Interval jitter of one period: how far the time between two wakes strayed from the period.
pub(super) fn interval_jitter(interval_ns: u64, period_ns: u64) -> u64 {
    interval_ns.abs_diff(period_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_join_round_trip_extremes() {
        for v in [
            0i128,
            -1,
            1,
            i128::MIN,
            i128::MAX,
            i64::MIN as i128,
            (u64::MAX as i128) + 1,
        ] {
            let (lo, hi) = split_i128(v);
            assert_eq!(join_i128(lo, hi), v);
        }
        for v in [0u128, 1, u128::MAX, u64::MAX as u128 + 1] {
            let (lo, hi) = split_u128(v);
            assert_eq!(join_u128(lo, hi), v);
        }
    }

    #[test]
    fn one_ms_latency_for_a_billion_cycles_does_not_overflow() {
        let n = 1_000_000_000u64;
        let x = 1_000_000i64; // 1 ms in ns
                              // What accumulate() would reach after n identical samples:
        let sum = x as i128 * n as i128;
        let sum_sq = (x as u128 * x as u128) * n as u128;
        assert_eq!(sum, 1_000_000_000_000_000);
        assert_eq!(sum_sq, 1_000_000_000_000_000_000_000);
        assert_eq!(mean(sum, n), Some(1e6));
        assert_eq!(variance(sum, sum_sq, n), Some(0.0));
        // One more sample still accumulates exactly.
        let (s2, q2) = accumulate(sum, sum_sq, x);
        assert_eq!(s2, sum + x as i128);
        assert_eq!(q2, sum_sq + (x as u128).pow(2));
    }

    #[test]
    fn variance_matches_the_definition() {
        let xs = [-3i64, 10, 10, 25, 100_000, 7];
        let (mut s, mut q) = (0i128, 0u128);
        for &x in &xs {
            (s, q) = accumulate(s, q, x);
        }
        let n = xs.len() as f64;
        let m = xs.iter().map(|&x| x as f64).sum::<f64>() / n;
        let v = xs.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n;
        let got = variance(s, q, xs.len() as u64).unwrap();
        assert!((got - v).abs() / v < 1e-12, "{got} vs {v}");
        assert!((stddev(s, q, xs.len() as u64).unwrap() - v.sqrt()).abs() < 1e-6);
    }

    #[test]
    fn large_constant_offset_keeps_small_variance_exact() {
        // 1e9 samples alternating 1_000_000 ± 1: variance exactly 1. The float formula would lose it.
        let n = 1_000_000_000u64;
        let sum = 1_000_000i128 * n as i128;
        let sum_sq = (n as u128 / 2) * (999_999u128.pow(2) + 1_000_001u128.pow(2));
        assert_eq!(variance(sum, sum_sq, n), Some(1.0));
    }

    #[test]
    fn extremes_saturate_and_never_go_negative_or_panic() {
        let (s, q) = accumulate(i128::MAX, u128::MAX, i64::MAX);
        assert_eq!((s, q), (i128::MAX, u128::MAX));
        let (s, q) = accumulate(i128::MIN, 0, i64::MIN);
        assert_eq!(s, i128::MIN);
        assert_eq!(q, (1u128 << 63).pow(2));
        for (s, q, n) in [
            (i128::MAX, u128::MAX, 1),
            (i128::MIN, 0, u64::MAX),
            (0, u128::MAX, u64::MAX),
            (5, 0, 1),
        ] {
            let v = variance(s, q, n).unwrap();
            assert!(v >= 0.0 && !v.is_nan(), "{s} {q} {n}: {v}");
        }
        assert_eq!(mean(0, 0), None);
        assert_eq!(variance(0, 0, 0), None);
        assert_eq!(stddev(0, 0, 0), None);
        assert_eq!(mean(i128::MIN, 1), Some(i128::MIN as f64));
    }

    #[test]
    fn jitter_is_symmetric() {
        assert_eq!(interval_jitter(1_000_050, 1_000_000), 50);
        assert_eq!(interval_jitter(999_950, 1_000_000), 50);
        assert_eq!(interval_jitter(0, u64::MAX), u64::MAX);
    }
}
