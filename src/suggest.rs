//! The one "did you mean" rule, for every name a user can mistype (pins, params, signals,
//! components and modules, halcmd commands, threads): the nearest known names, at most three of them,
//! and only those within three edits — fewer for a short name (a third of its length, at least one),
//! so `pdi` finds `pid` but not `ddt`. An edit is an insertion, a deletion, a substitution or a swap
//! of two neighbouring characters (`Pgian` is one edit from `Pgain`); letter case is ignored.
//! Nothing near enough: no suggestion, and the message says where the names are listed instead.

/// How many edits `name` may be away from a suggestion.
fn allowed(name: &str) -> usize {
    (name.chars().count() / 3).clamp(1, 3)
}

/// Edits from `a` to `b` (optimal string alignment: insert, delete, substitute, swap neighbours),
/// ignoring case.
pub(crate) fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().flat_map(char::to_lowercase).collect();
    let b: Vec<char> = b.chars().flat_map(char::to_lowercase).collect();
    // Three rows: two before this one, for the swap.
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(prev2[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The names of `known` nearest to `name` under the rule (best first, then by name; none when
/// `name` itself is known).
pub(crate) fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let limit = allowed(name);
    let mut best: Vec<(usize, &str)> = known
        .into_iter()
        .map(|k| (distance(name, k), k))
        .filter(|&(d, _)| d <= limit)
        .collect();
    if best.iter().any(|&(d, k)| d == 0 && k == name) {
        return Vec::new();
    }
    best.sort_unstable();
    best.dedup_by(|a, b| a.1 == b.1);
    let Some(&(top, _)) = best.first() else {
        return Vec::new();
    };
    best.into_iter()
        .take_while(|&(d, _)| d == top)
        .take(3)
        .map(|(_, k)| k)
        .collect()
}

/// `did you mean 'X'?`, `did you mean 'X' or 'Y'?`, `did you mean 'X', 'Y' or 'Z'?`; `None` when
/// nothing is near enough.
pub(crate) fn did_you_mean<'a>(
    name: &str,
    known: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let near: Vec<String> = nearest(name, known)
        .into_iter()
        .map(crate::rt::units::quote)
        .collect();
    match near.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [init @ .., last] => Some(format!("did you mean {} or {last}?", init.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_rule_for_every_name() {
        let pid = ["pid.0.Pgain", "pid.0.Igain", "pid.0.Dgain", "pid.0.output"];
        assert_eq!(
            nearest("pid.0.Pgian", pid),
            ["pid.0.Pgain"],
            "a swap is one edit"
        );
        assert_eq!(nearest("pid.0.outptu", pid), ["pid.0.output"]);
        assert_eq!(
            nearest("pid.0.pgain", pid),
            ["pid.0.Pgain"],
            "case is ignored"
        );
        let comps = ["pid", "ddt", "comp", "mux2", "mux4", "mux8", "and2"];
        assert_eq!(nearest("pdi", comps), ["pid"], "a short name: one edit");
        assert!(
            nearest("nosuchcomp", comps).is_empty(),
            "'comp' is 6 edits away"
        );
        assert_eq!(
            nearest("mux3", comps),
            ["mux2", "mux4", "mux8"],
            "ties, at most three"
        );
        assert!(
            nearest("pid", comps).is_empty(),
            "a known name needs no suggestion"
        );
        assert_eq!(
            did_you_mean("mux3", comps).unwrap(),
            "did you mean 'mux2', 'mux4' or 'mux8'?"
        );
        assert_eq!(did_you_mean("adn2", comps).unwrap(), "did you mean 'and2'?");
        assert_eq!(did_you_mean("zzzzzzzzzzz", comps), None);
        // Three edits at most, however long the name.
        let long = ["motion.spindle-speed-out"];
        assert_eq!(nearest("motion.spindle-sped-otu", long).len(), 1);
        assert!(nearest("motion.spndl-sped-otu", long).is_empty());
        assert_eq!(distance("ab", "ba"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
    }
}
