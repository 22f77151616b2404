//! The crate's layers point only down (docs/ARCHITECTURE.md, "Layers"): this test reads every source
//! file of `src/` and fails on a `crate::…` path from a module to a module above it, so a new arrow
//! upward is caught at `cargo test`, not in review. Items marked `#[cfg(test)]` are not counted (a
//! unit test may use anything); the code after them is.

use std::collections::BTreeSet;
use std::path::Path;

/// Bottom to top; a module may use the ones before it.
const LAYERS: [&str; 16] = [
    "rt",
    "mesa",
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
    "instance",
    "master",
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

/// `text` with comments, string and char literals blanked (same length, newlines kept), so that
/// braces and `crate::` inside them count for nothing.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            // Block comments nest in Rust.
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if (rest.starts_with(b"r#") || rest.starts_with(b"r\""))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let hashes = rest[1..].iter().take_while(|c| **c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                i += 1; // a raw identifier (`r#type`)
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let body = i + 2 + hashes;
            let end = text[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, (j + 1).min(b.len()));
            i = j + 1;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the first is blanked.
            let lit = if rest.get(1) == Some(&b'\\') {
                text[i + 2..].find('\'').map(|n| i + 2 + n + 1)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match lit {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

/// `code` without each `#[cfg(test)]` item: the attribute, and the item it is on up to its `;` or
/// its balanced `{…}`. Production code after a test-only item is still read.
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let b = item.as_bytes();
        let (mut depth, mut end) = (0usize, b.len());
        for (j, c) in b.iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = j + 1;
                        break;
                    }
                }
                b';' if depth == 0 => {
                    end = j + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// `crate::NAME` occurrences in `text`'s code, test-only items left out.
fn uses(text: &str) -> BTreeSet<String> {
    let code = without_test_items(&code_only(text));
    let mut found = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        // `$crate::…` in a macro is the crate's root, not a module; `rtapi_hal::crate…` never occurs,
        // but a path that merely ends in "crate::" is not ours either.
        if i > 0
            && (code.as_bytes()[i - 1] == b'$' || code.as_bytes()[i - 1].is_ascii_alphanumeric())
        {
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
        if top == "lib" || top == "main" || top == "lcnc_master" {
            continue; // the crate root and the binaries' entry points
        }
        let Some(height) = LAYERS.iter().position(|l| *l == top) else {
            panic!(
                "src/{} is in no layer: add its module to LAYERS",
                rel.display()
            );
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
    // Production code after a test-only item is read; comments and strings are not.
    let text = r#"
#[cfg(test)]
fn helper() { let _ = "}"; let _ = '{'; crate::cli::x(); }
// crate::latency in a comment
const S: &str = "crate::config";
/* crate::components /* nested */ */
pub fn f<'a>(x: &'a str) { crate::trace::y(x); }
#[cfg(test)]
mod tests { use crate::cli; fn g() { if true { crate::cli::z(); } } }
fn after() { crate::runtime::w(); }
"#;
    let found: Vec<_> = uses(text).into_iter().collect();
    assert_eq!(found, vec!["runtime", "trace"]);
}

/// Names that only a holder of a running instance uses: the started runtime and the target that
/// loads into it.
const RUNNING_INSTANCE: [&str; 3] = ["Running", "LiveTarget", "linuxcnc::unloaded"];

/// The words of `code` (identifiers and `::` paths), for [`RUNNING_INSTANCE`].
fn names_in(code: &str) -> Vec<&str> {
    code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// The lines of `text`'s production code that name a running instance.
fn running_instance_uses(text: &str) -> Vec<String> {
    let code = without_test_items(&code_only(text));
    code.lines()
        .enumerate()
        .filter(|(_, l)| {
            names_in(l).iter().any(|w| {
                RUNNING_INSTANCE
                    .iter()
                    .any(|n| w == n || w.ends_with(&format!("::{n}")))
            })
        })
        .map(|(i, l)| format!("{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn the_config_layer_holds_no_running_instance() {
    // A running instance lives in `instance` (docs/ARCHITECTURE.md, "A running instance"): the
    // halcmd interpreter emits its changes to a host and never names the started runtime.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 5, "found config's sources ({})", files.len());
    let mut found = Vec::new();
    for f in &files {
        for l in running_instance_uses(&std::fs::read_to_string(f).unwrap()) {
            found.push(format!("{}:{l}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "the config layer names a running instance (move it to src/instance):\n{}",
        found.join("\n")
    );
    // The check itself sees one, and not a word that only contains the name.
    let text = "use crate::runtime::{Running, Runtime};\nfn f(r: &Runtime<Running>) {}\n\
                enum Why { NotRunning }\n// Runtime<Running> in a comment\n";
    assert_eq!(running_instance_uses(text).len(), 2);
}
