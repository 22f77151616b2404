//! README's commands are the binary's (issue 25: "the README's commands and outputs are re-run and
//! still true"): every `rtapi SUBCOMMAND …` the README writes names a subcommand the binary has, and
//! every `--option` written after it is one that subcommand's `--help` lists. A renamed or dropped
//! option fails here instead of in a user's terminal.

mod common;

use common::{commands_of, help_text, long_options_of};
use std::collections::BTreeMap;

fn subcommands() -> Vec<String> {
    commands_of(&help_text(&[]))
}

/// Each `rtapi SUB REST` in `text`, REST running to the end of the line or the closing backtick,
/// with the line it is on.
fn mentions<'a>(text: &'a str, subs: &'a [String]) -> Vec<(usize, &'a str, &'a str)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("rtapi ") {
            let before = &rest[..at];
            let after = &rest[at + "rtapi ".len()..];
            rest = after;
            // `rtapi-hal`, `/rtapi `: not the command.
            if before.ends_with(|c: char| c.is_alphanumeric() || c == '-' || c == '/') {
                continue;
            }
            let word: &str = after
                .split(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                .next()
                .unwrap_or("");
            let Some(sub) = subs.iter().find(|s| s.as_str() == word) else {
                continue;
            };
            let tail = &after[sub.len()..];
            let end = tail.find('`').unwrap_or(tail.len());
            found.push((n + 1, sub.as_str(), &tail[..end]));
        }
    }
    found
}

/// The `--options` written in a mention's tail (`[--cpu N|BASE,SERVO]` → `--cpu`).
fn options(tail: &str) -> Vec<&str> {
    tail.split(|c: char| c.is_whitespace() || "[]|(),=".contains(c))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(['.', ':', ';', '"', '\'']))
        .filter(|w| w[2..].starts_with(|c: char| c.is_ascii_lowercase()))
        .collect()
}

/// Every option of `text`'s `rtapi SUB` mentions that SUB's help does not define: (line, SUB,
/// option). A SUB with subcommands of its own (`recorder dump`) is read with that one's help.
fn unknown_options(text: &str, subs: &[String]) -> (usize, Vec<(usize, String, String)>) {
    let mut defined: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    let mut nested_of: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (line, sub, tail) in mentions(text, subs) {
        let mut path = vec![sub.to_string()];
        let nested = nested_of
            .entry(sub)
            .or_insert_with(|| commands_of(&help_text(&[sub])));
        if let Some(first) = tail.split_whitespace().next() {
            if nested.iter().any(|n| n == first) {
                path.push(first.to_string());
            }
        }
        let known = defined.entry(path.clone()).or_insert_with(|| {
            let args: Vec<&str> = path.iter().map(String::as_str).collect();
            long_options_of(&help_text(&args))
        });
        for opt in options(tail) {
            checked += 1;
            if !known.iter().any(|k| k == opt) {
                wrong.push((line, path.join(" "), opt.to_string()));
            }
        }
    }
    (checked, wrong)
}

#[test]
fn every_option_the_readme_gives_a_subcommand_is_one_it_takes() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let subs = subcommands();
    assert!(
        [
            "run",
            "halrun",
            "latency-test",
            "detect",
            "linuxcnc",
            "export"
        ]
        .iter()
        .all(|s| subs.iter().any(|x| x == s)),
        "rtapi --help's commands: {subs:?}"
    );
    let (checked, wrong) = unknown_options(&readme, &subs);
    // A floor: a scanner that found nothing would pass anything.
    assert!(
        mentions(&readme, &subs).len() >= 60 && checked >= 60,
        "only {checked} options in {} mentions found",
        mentions(&readme, &subs).len()
    );
    assert!(
        wrong.is_empty(),
        "README lines whose options the subcommand does not take (line, command, option): {wrong:#?}"
    );
}

#[test]
fn the_check_catches_an_option_a_subcommand_does_not_take() {
    let subs = subcommands();
    let text =
        "Run `rtapi latency-test --duration 5s --no-such-option 3` then `rtapi show thread`.\n\
                rtapi-hal is a crate; `rtapi detect --json`; `rtapi run x.toml [--quiet]`;\n\
                `rtapi linuxcnc --trace=20us INI`, `rtapi recorder dump --instance m`.\n";
    let (checked, wrong) = unknown_options(text, &subs);
    assert_eq!(
        checked, 6,
        "--duration, --no-such-option, --json, --quiet, --trace, --instance"
    );
    assert_eq!(
        wrong,
        vec![(
            1,
            "latency-test".to_string(),
            "--no-such-option".to_string()
        )]
    );
}
