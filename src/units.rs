//! Durations as users write them: `25us`, `1ms`, `60s`, `2m`, `500ns`, or a bare integer of nanoseconds.

use std::fmt;

/// A non-negative duration in nanoseconds, parsed from the CLI and config files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Nanos(pub u64);

const UNITS: [(&str, u64); 6] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
];

impl Nanos {
    pub fn from_secs_f64(s: f64) -> Nanos {
        Nanos((s * 1e9).round().max(0.0) as u64)
    }

    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    pub fn as_std(self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.0)
    }
}

impl std::str::FromStr for Nanos {
    type Err = String;

    /// Accepts an integer or decimal number followed by `ns`, `us` (`µs`), `ms`, `s` or `m`; a bare
    /// integer is nanoseconds (the HAL habit for periods).
    fn from_str(text: &str) -> Result<Nanos, String> {
        let t = text.trim();
        let bad = || {
            format!(
                "invalid duration '{text}': write a number with a unit, e.g. 25us, 1ms, 60s, 2m"
            )
        };
        if let Ok(ns) = t.parse::<u64>() {
            return Ok(Nanos(ns));
        }
        // Longest suffix first so that "ms" is not read as "m" + "s".
        let (number, scale) = UNITS
            .iter()
            .filter_map(|&(suffix, scale)| t.strip_suffix(suffix).map(|n| (n.trim(), scale)))
            .max_by_key(|(n, _)| std::cmp::Reverse(n.len()))
            .ok_or_else(bad)?;
        if number.is_empty() || number.starts_with('-') || number.starts_with('+') {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        let ns = value * scale as f64;
        if !ns.is_finite() || ns > u64::MAX as f64 / 2.0 {
            return Err(format!("invalid duration '{text}': too large"));
        }
        Ok(Nanos(ns.round() as u64))
    }
}

impl fmt::Display for Nanos {
    /// The largest unit that shows the value exactly: `25us`, `1ms`, `1500ns`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        for (suffix, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
            if ns >= scale && ns % scale == 0 {
                return write!(f, "{}{suffix}", ns / scale);
            }
        }
        write!(f, "{ns}ns")
    }
}

/// Formats nanoseconds for tables as microseconds with one decimal: `12.3`.
pub fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::Nanos;

    fn p(s: &str) -> Result<u64, String> {
        s.parse::<Nanos>().map(|n| n.0)
    }

    #[test]
    fn parses_every_unit() {
        assert_eq!(p("500ns"), Ok(500));
        assert_eq!(p("25us"), Ok(25_000));
        assert_eq!(p("25µs"), Ok(25_000));
        assert_eq!(p("1ms"), Ok(1_000_000));
        assert_eq!(p("1.5ms"), Ok(1_500_000));
        assert_eq!(p("60s"), Ok(60_000_000_000));
        assert_eq!(p("2m"), Ok(120_000_000_000));
        assert_eq!(p("1000000"), Ok(1_000_000));
        assert_eq!(p(" 10 ms "), Ok(10_000_000));
        assert_eq!(p("0"), Ok(0));
    }

    #[test]
    fn rejects_garbage_with_a_hint() {
        for bad in ["", "ms", "-1ms", "1h", "1.2.3s", "abc", "1e400s", "+5s"] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("invalid duration"), "{bad}: {e}");
        }
        assert!(p("1h").unwrap_err().contains("e.g. 25us"));
    }

    #[test]
    fn displays_in_the_largest_exact_unit() {
        assert_eq!(Nanos(25_000).to_string(), "25us");
        assert_eq!(Nanos(1_000_000).to_string(), "1ms");
        assert_eq!(Nanos(1_500).to_string(), "1500ns");
        assert_eq!(Nanos(60_000_000_000).to_string(), "60s");
    }
}
