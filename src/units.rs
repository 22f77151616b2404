//! Durations as users write them on the command line and in configs: `25us`, `1ms`, `60s`, `2m`,
//! `500ns`, a decimal such as `1.5ms`, or a bare integer of nanoseconds (the HAL habit for periods).
//! Parsing gives an [`rt::clock::Nanos`](crate::rt::clock::Nanos); its `Display` prints the form back.

use crate::rt::clock::Nanos;

const UNITS: [(&str, u64); 6] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
];

/// Parses a non-negative duration; the error says what a valid one looks like.
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    let bad = || {
        format!("invalid duration '{text}': write a number with a unit, e.g. 25us, 1ms, 60s, 2m")
    };
    if let Ok(ns) = t.parse::<u64>() {
        return i64::try_from(ns).map(Nanos::from_nanos).map_err(|_| bad());
    }
    // The shortest remaining number is the longest matching suffix, so "ms" is not read as "m".
    let (number, scale) = UNITS
        .iter()
        .filter_map(|&(suffix, scale)| t.strip_suffix(suffix).map(|n| (n.trim(), scale)))
        .min_by_key(|(n, _)| n.len())
        .ok_or_else(bad)?;
    if number.is_empty() || !number.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(bad());
    }
    let value: f64 = number.parse().map_err(|_| bad())?;
    let ns = value * scale as f64;
    if !ns.is_finite() || ns >= i64::MAX as f64 {
        return Err(format!("invalid duration '{text}': too large"));
    }
    Ok(Nanos::from_nanos(ns.round() as i64))
}

impl std::str::FromStr for Nanos {
    type Err = String;

    fn from_str(s: &str) -> Result<Nanos, String> {
        parse_duration(s)
    }
}

/// Formats nanoseconds for tables as microseconds with one decimal: `12.3`.
pub fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    fn p(s: &str) -> Result<i64, String> {
        parse_duration(s).map(|n| n.as_nanos())
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
        for bad in [
            "",
            "ms",
            "-1ms",
            "1h",
            "1.2.3s",
            "abc",
            "1e400s",
            "+5s",
            ".5s",
            "99999999999999999999",
        ] {
            let e = p(bad).unwrap_err();
            assert!(e.contains("invalid duration"), "{bad}: {e}");
        }
        assert!(p("1h").unwrap_err().contains("e.g. 25us"));
    }

    #[test]
    fn round_trips_through_display() {
        for s in ["25us", "1ms", "1500ns", "60s"] {
            assert_eq!(parse_duration(s).unwrap().to_string(), s);
        }
    }
}
