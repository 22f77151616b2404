//! Durations as users write them on the command line and in configs: `25us`, `1ms`, `60s`, `2m`, `8h`,
//! `500ns`, or a decimal such as `1.5ms`. On the command line a number needs its unit (`25` is refused
//! with "write a unit"), except a literal `0`; machine configs also take an unquoted integer of nanoseconds
//! for a period (the HAL habit: `period = 25000`), but not a quoted one, see [`parse_config_period`].
//! Parsing gives an [`rt::clock::Nanos`](crate::rt::clock::Nanos); its `Display` prints the form back.
//!
//! Thread periods have one rule everywhere ([`check_period`]): from [`MIN_PERIOD`] to [`MAX_PERIOD`].
//! And user input shown in a message goes through [`quote`]: control characters escaped, long text cut.

use crate::rt::clock::Nanos;

/// The shortest thread period accepted: below this no timer on any kernel keeps up.
pub const MIN_PERIOD: Nanos = Nanos::from_micros(1);

/// The longest thread period accepted: a CNC thread runs every few µs to ms; 10 s is already a typo.
pub const MAX_PERIOD: Nanos = Nanos::from_secs(10);

const UNITS: [(&str, u64); 7] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a non-negative duration with its unit (`25us`, `1.5ms`, `60s`); a literal `0` needs none.
/// The error says what a valid one looks like.
pub fn parse_duration(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Nanos::ZERO);
    }
    if t.bytes().any(|b| b.is_ascii_digit()) && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!(
            "invalid duration {}: write a unit, e.g. {t}us, {t}ms or {t}s",
            quote(text)
        ));
    }
    with_unit(text)
}

/// Parses a thread period given on the command line: a duration with its unit, within
/// [`MIN_PERIOD`]..=[`MAX_PERIOD`] (see [`check_period`]).
pub fn parse_period(text: &str) -> Result<Nanos, String> {
    check_period(parse_duration(text)?)
}

/// Like [`parse_period`], but a literal `0` is accepted and means "no such thread" (`--base 0`).
pub fn parse_period_or_off(text: &str) -> Result<Nanos, String> {
    match parse_duration(text)? {
        Nanos::ZERO => Ok(Nanos::ZERO),
        p => check_period(p),
    }
}

/// Parses a period written as a string in a machine config: a duration with its unit
/// (`"25us"`, `"1ms"`), then [`check_period`]. A string of bare digits is refused: `"1000"` could be
/// meant as µs as easily as ns; the message offers both spellings, and the unquoted integer (a TOML
/// integer is nanoseconds, as LinuxCNC's `period1=25000`).
pub fn parse_config_period(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "period {} has no unit: write \"{t}ns\" or \"{t}us\" (or {t} without quotes: an integer is nanoseconds)",
            quote(text)
        ));
    }
    check_period(with_unit(text)?)
}

/// The one rule for a thread period, used by configs and the command line alike.
pub fn check_period(period: Nanos) -> Result<Nanos, String> {
    if !period.is_positive() {
        Err(format!(
            "period {period} is not positive; a thread needs a period like 25us or 1ms"
        ))
    } else if period < MIN_PERIOD {
        Err(format!(
            "period {period} is shorter than {MIN_PERIOD}, which no timer keeps; use e.g. 25us (base) or 1ms (servo)"
        ))
    } else if period > MAX_PERIOD {
        Err(format!(
            "period {period} is longer than {MAX_PERIOD}; a machine's threads run every few µs to ms, e.g. 1ms"
        ))
    } else {
        Ok(period)
    }
}

/// A number followed by one of [`UNITS`].
fn with_unit(text: &str) -> Result<Nanos, String> {
    let t = text.trim();
    let bad = || {
        format!(
            "invalid duration {}: write a number with a unit, e.g. 25us, 1ms, 60s, 2m, 8h",
            quote(text)
        )
    };
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
        return Err(format!("invalid duration {}: too large", quote(text)));
    }
    Ok(Nanos::from_nanos(ns.round() as i64))
}

impl std::str::FromStr for Nanos {
    type Err = String;

    fn from_str(s: &str) -> Result<Nanos, String> {
        parse_duration(s)
    }
}

/// At most this many characters of user input are shown by [`quote`].
pub const QUOTE_MAX_CHARS: usize = 60;

/// Shows user input in a message: in single quotes, with control and invisible formatting characters
/// escaped (`\u{1b}`, `\t`, `\u{feff}`) so nothing reaches the terminal raw, and cut to
/// [`QUOTE_MAX_CHARS`] characters with the full length after it: `'aaaa…' (10485760 bytes)`.
pub fn quote(text: &str) -> String {
    let (head, cut) = escaped_head(text);
    match cut {
        None => format!("'{head}'"),
        Some(note) => format!("'{head}…' {note}"),
    }
}

/// [`quote`] without the quotes, for a word that heads a message (`net cmd: …`):
/// `aaaa… (10485760 bytes)`.
pub fn clip(text: &str) -> String {
    let (head, cut) = escaped_head(text);
    match cut {
        None => head,
        Some(note) => format!("{head}… {note}"),
    }
}

/// The first [`QUOTE_MAX_CHARS`] characters, escaped, and `(N bytes)` if that is not all of them.
fn escaped_head(text: &str) -> (String, Option<String>) {
    let mut out = String::new();
    let mut chars = text.chars();
    for c in chars.by_ref().take(QUOTE_MAX_CHARS) {
        push_escaped(&mut out, c);
    }
    let cut = chars
        .next()
        .is_some()
        .then(|| format!("({} bytes)", text.len()));
    (out, cut)
}

/// The last guard before a message that may contain user input is printed: control characters
/// escaped (as [`escape_controls`]), and any run of more than 200 non-blank characters — only echoed
/// input is that long — cut like [`clip`].
pub fn tame(message: &str) -> String {
    const LONG: usize = 200;
    if message.len() <= LONG {
        return escape_controls(message);
    }
    let mut out = String::new();
    let mut rest = message;
    while !rest.is_empty() {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        if word.chars().count() > LONG {
            out.push_str(&clip(word));
        } else {
            out.push_str(&escape_controls(word));
        }
        let blank = after
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(after.len());
        out.push_str(&escape_controls(&after[..blank]));
        rest = &after[blank..];
    }
    out
}

/// Escapes control and invisible formatting characters in a whole message (no quoting, no cut).
pub fn escape_controls(text: &str) -> String {
    if !text.chars().any(needs_escape) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

fn push_escaped(out: &mut String, c: char) {
    if needs_escape(c) {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

/// Formats nanoseconds for tables as microseconds with one decimal: `12.3`.
pub fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(p("1h"), Ok(3_600_000_000_000));
        assert_eq!(p(" 10 ms "), Ok(10_000_000));
        assert_eq!(p("0"), Ok(0));
    }

    #[test]
    fn a_number_without_a_unit_is_refused_except_zero() {
        for bare in ["25", "1000000", "1.5", "99999999999999999999"] {
            let e = p(bare).unwrap_err();
            assert!(
                e.contains("write a unit") && e.contains(&format!("e.g. {bare}us")),
                "{bare}: {e}"
            );
        }
        assert_eq!(p("0"), Ok(0));
    }

    #[test]
    fn rejects_garbage_with_a_hint() {
        for bad in [
            "",
            "ms",
            "-1ms",
            "1d",
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
        assert!(p("1d").unwrap_err().contains("e.g. 25us"));
    }

    #[test]
    fn round_trips_through_display() {
        for s in ["25us", "1ms", "1500ns", "60s"] {
            assert_eq!(parse_duration(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn one_period_rule_for_the_cli_and_configs() {
        assert_eq!(parse_period("25us"), Ok(Nanos::from_micros(25)));
        assert_eq!(parse_period("1us"), Ok(MIN_PERIOD));
        assert_eq!(parse_period("10s"), Ok(MAX_PERIOD));
        let short = parse_period("1ns").unwrap_err();
        assert_eq!(
            short,
            "period 1ns is shorter than 1us, which no timer keeps; use e.g. 25us (base) or 1ms (servo)"
        );
        assert_eq!(parse_config_period("1ns").unwrap_err(), short);
        assert_eq!(check_period(Nanos::from_nanos(1)).unwrap_err(), short);
        assert!(parse_period("100s")
            .unwrap_err()
            .contains("longer than 10s"));
        assert!(parse_period("0").unwrap_err().contains("not positive"));
        assert!(parse_period("25")
            .unwrap_err()
            .contains("write a unit, e.g. 25us"));
        // "0" means "off" only where asked for.
        assert_eq!(parse_period_or_off("0"), Ok(Nanos::ZERO));
        assert_eq!(parse_period_or_off("25us"), Ok(Nanos::from_micros(25)));
        assert!(parse_period_or_off("1ns").is_err());
        assert!(parse_period_or_off("25").is_err());
        // Configs: a string needs its unit (digits alone are ambiguous), with the same limits.
        assert_eq!(parse_config_period("1ms"), Ok(Nanos::from_millis(1)));
        assert_eq!(
            parse_config_period("1000").unwrap_err(),
            "period '1000' has no unit: write \"1000ns\" or \"1000us\" (or 1000 without quotes: an integer is nanoseconds)"
        );
        assert!(parse_config_period("99999999999999999999")
            .unwrap_err()
            .contains("has no unit"));
        assert!(parse_config_period("0ns")
            .unwrap_err()
            .contains("not positive"));
    }

    #[test]
    fn quote_escapes_controls_and_cuts_long_input() {
        assert_eq!(quote("pid.0"), "'pid.0'");
        assert_eq!(quote("a\u{1b}[2Jb"), "'a\\u{1b}[2Jb'");
        assert_eq!(quote("\u{feff}x\t"), "'\\u{feff}x\\t'");
        let long = "x".repeat(10 << 20);
        let q = quote(&long);
        assert_eq!(q, format!("'{}…' (10485760 bytes)", "x".repeat(60)));
        assert_eq!(quote(&"é".repeat(60)), format!("'{}'", "é".repeat(60)));
        assert!(quote(&"é".repeat(61)).ends_with("…' (122 bytes)"));
        assert_eq!(escape_controls("a\u{1b}b\u{202e}c"), "a\\u{1b}b\\u{202e}c");
        assert_eq!(escape_controls("plain: 'x'"), "plain: 'x'");
        assert_eq!(clip("pid.0\n"), "pid.0\\n");
        let huge = format!("no pin 'a{}' here\t", "b".repeat(1 << 20));
        assert_eq!(
            tame(&huge),
            format!("no pin 'a{}… (1048579 bytes) here\\t", "b".repeat(58))
        );
        assert_eq!(tame("short\u{1b}"), "short\\u{1b}");
        assert_eq!(
            clip(&"y".repeat(100)),
            format!("{}… (100 bytes)", "y".repeat(60))
        );
    }
}
