//! The kernel's CPU list syntax (`0-3,5,8-15:2`), used by `online`, `isolated`, `nohz_full=` and friends.

/// Parses a CPU list. Returns `None` for garbage rather than guessing; an empty string is an empty list.
pub fn parse(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text
        .trim()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        // Drop a trailing "/N" group suffix from `isolcpus=0-3/2`-like forms we do not use, and
        // accept the stride form `a-b:stride`.
        let (range, stride) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<usize>().ok().filter(|&s| s > 0)?),
            None => (part, 1),
        };
        match range.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
                // A reversed or absurd range is garbage, not a reason to allocate gigabytes.
                if a > b || b >= 65_536 {
                    return None;
                }
                cpus.extend((a..=b).step_by(stride));
            }
            None => cpus.push(range.parse::<usize>().ok().filter(|&c| c < 65_536)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
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
    fn formats_compactly() {
        assert_eq!(format(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(format(&[]), "");
    }
}
