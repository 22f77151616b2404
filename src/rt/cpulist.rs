//! The kernel's CPU list syntax (`0-3,5,8-15:2`), used by `online`, `isolated`, `nohz_full=` and friends.

/// CPU numbers at or above this are garbage (Linux's NR_CPUS tops out at 8192; 65536 leaves room).
const CPU_LIMIT: usize = 65_536;

/// Parses a CPU list. Returns `None` for garbage rather than guessing; an empty string (or only
/// whitespace, e.g. an empty sysfs file's newline) is an empty list. See [`parse_checked`] for why.
pub fn parse(text: &str) -> Option<Vec<usize>> {
    parse_checked(text).ok()
}

/// Parses a CPU list; the error says what is wrong with it (for the command line). Surrounding
/// whitespace (a sysfs file's trailing newline) is fine; an empty element (`0,`, `1,,2`) is not.
pub fn parse_checked(text: &str) -> Result<Vec<usize>, String> {
    let text = text.trim();
    let mut cpus = Vec::new();
    if text.is_empty() {
        return Ok(cpus);
    }
    let bad = |part: &str, why: &str| {
        format!(
            "CPU list {}: {} {why}; write CPUs like 1, 2,3 or 0-3",
            crate::rt::units::quote(text),
            crate::rt::units::quote(part)
        )
    };
    let number = |s: &str, part: &str| -> Result<usize, String> {
        match s.trim().parse::<usize>() {
            Ok(c) if c < CPU_LIMIT => Ok(c),
            Ok(_) => Err(bad(part, "is beyond any CPU number")),
            Err(_) => Err(bad(part, "is not a CPU number or range")),
        }
    };
    for part in text.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!(
                "CPU list {} has an empty element (a stray comma?); write CPUs like 1, 2,3 or 0-3",
                crate::rt::units::quote(text)
            ));
        }
        // The stride form `a-b:stride`.
        let (range, stride) = match part.split_once(':') {
            Some((r, s)) => match s.parse::<usize>() {
                Ok(s) if s > 0 => (r, s),
                _ => return Err(bad(part, "has a stride that is not a positive number")),
            },
            None => (part, 1),
        };
        match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a, part)?, number(b, part)?);
                // A reversed range is garbage, not a reason to guess.
                if a > b {
                    return Err(bad(part, "is a reversed range"));
                }
                cpus.extend((a..=b).step_by(stride));
            }
            None => cpus.push(number(range, part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats a sorted list back into the kernel's compact form (`0-3,5`).
pub fn format(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_singles_and_strides() {
        assert_eq!(parse("0-3,5"), Some(vec![0, 1, 2, 3, 5]));
        assert_eq!(parse("1"), Some(vec![1]));
        assert_eq!(parse(""), Some(vec![]));
        assert_eq!(parse("0-6:2"), Some(vec![0, 2, 4, 6]));
        assert_eq!(parse("3,1,1"), Some(vec![1, 3]));
    }

    #[test]
    fn garbage_is_unknown() {
        assert_eq!(parse("abc"), None);
        assert_eq!(parse("3-1"), None);
        assert_eq!(parse("0-99999999"), None);
        assert_eq!(parse("1-"), None);
        assert_eq!(parse("0-3:0"), None);
    }

    #[test]
    fn a_trailing_newline_is_fine_but_an_empty_element_is_not() {
        assert_eq!(parse("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse("\n"), Some(vec![]));
        for bad in ["0,", ",1", "1,,2", "0, ,1", ","] {
            assert_eq!(parse(bad), None, "{bad}");
            let e = parse_checked(bad).unwrap_err();
            assert!(e.contains("has an empty element"), "{bad}: {e}");
        }
        let e = parse_checked("1-x").unwrap_err();
        assert!(e.contains("'1-x' is not a CPU number or range"), "{e}");
        assert!(parse_checked("3-1").unwrap_err().contains("reversed range"));
        assert!(parse_checked("70000")
            .unwrap_err()
            .contains("beyond any CPU"));
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(format(&[]), "");
    }
}
