//! The crate's layers point only down (docs/ARCHITECTURE.md, "Layers"): this test reads every source
//! file of `src/` and fails on a `crate::…` path from a module to a module above it, so a new arrow
//! upward is caught at `cargo test`, not in review. Test modules (`#[cfg(test)]` and below) are not
//! counted: a unit test may use anything.

use std::collections::BTreeSet;
use std::path::Path;

/// Bottom to top; a module may use the ones before it.
const LAYERS: [&str; 13] = [
    "rt",
    "render",
    "plot",
    "suggest",
    "detect",
    "tune",
    "trace",
    "flavor",
    "runtime",
    "components",
    "config",
    "latency",
    "cli",
];

/// Modules of the same height that must not use each other either.
const SIBLINGS: [(&str, &str); 2] = [("config", "latency"), ("latency", "config")];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `crate::NAME` occurrences in `text`, before its first `#[cfg(test)]`.
fn uses(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        // Skip `rtapi_hal::…`-style paths that merely end in "crate::" (none today) and `$crate`.
        if i > 0 && code.as_bytes()[i - 1] == b'$' {
            continue;
        }
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        found.insert(name);
    }
    found
}

#[test]
fn every_crate_path_points_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 50, "found the sources ({})", files.len());
    let mut violations = Vec::new();
    let mut edges = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let Some(height) = LAYERS.iter().position(|l| *l == top) else {
            continue; // lib.rs, main.rs
        };
        for used in uses(&std::fs::read_to_string(f).unwrap()) {
            let Some(h) = LAYERS.iter().position(|l| *l == used) else {
                continue;
            };
            if used == top {
                continue;
            }
            edges.insert((top.clone(), used.clone()));
            if h > height || SIBLINGS.contains(&(top.as_str(), used.as_str())) {
                violations.push(format!("{} uses crate::{used}", rel.display()));
            }
        }
    }
    eprintln!("module arrows found:");
    for (from, to) in &edges {
        eprintln!("  {from} -> {to}");
    }
    assert!(
        violations.is_empty(),
        "arrows pointing up (see docs/ARCHITECTURE.md):\n{}",
        violations.join("\n")
    );
    // The primitives use nothing else in the crate.
    assert!(
        !edges.iter().any(|(from, _)| from == "rt"),
        "rt must not use another module"
    );
}

#[test]
fn the_scan_sees_an_upward_arrow() {
    // The detector itself: a file in `rt` naming `crate::runtime` would be reported.
    let found = uses("use crate::runtime::Runtime;\n#[cfg(test)]\nuse crate::cli;");
    assert_eq!(found.into_iter().collect::<Vec<_>>(), vec!["runtime"]);
}
