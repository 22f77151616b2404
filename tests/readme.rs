//! README and the user guide are the binary's (issue 25: "the README's commands and outputs are
//! re-run and still true"; issue 47: "the guide checked by tests"). The documents are README.md and
//! every chapter of docs/guide/:
//!
//! - every `rtapi SUBCOMMAND …` they write names a subcommand the binary has, and every `--option`
//!   written after it is one that subcommand's `--help` lists: a renamed or dropped option fails here
//!   instead of in a user's terminal;
//! - every relative link points at a file that exists, and every `#anchor` at a heading of its file
//!   (GitHub's rule for a heading's anchor);
//! - README is a front page: at most 250 lines, the quick start's two commands its first code, the
//!   second one the test command `.ci/run` runs;
//! - the guide's index links every chapter.

mod common;

use common::{commands_of, help_text, help_text_if, long_options_of};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The quick start's two commands, in README's order.
const QUICK_START: [&str; 2] = [
    "cargo run --release -- latency-test --duration 60s --load cpu,mem,io --plot latency.svg",
    "cargo test --workspace --release",
];

/// The documents: README.md, then docs/guide/*.md by name, as (path from the repository, text).
fn documents() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_string(), read("README.md"))];
    let mut chapters: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs/guide"))
        .expect("docs/guide/")
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".md"))
        .collect();
    chapters.sort();
    for name in chapters {
        let path = format!("docs/guide/{name}");
        docs.push((path.clone(), read(&path)));
    }
    docs
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn subcommands() -> Vec<String> {
    commands_of(&help_text(&[]))
}

/// Whether `line` opens or closes a fenced code block.
fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// `text` with everything that is code blanked out (each character a space, line breaks kept):
/// fenced blocks, indented blocks and inline code spans (a run of N backticks up to the next run of
/// exactly N, within a paragraph, as Markdown reads them). What is left is the prose, where links are.
/// Returns the prose and the code pieces: (line, code) — a block's line, or a span's text.
fn split_code(text: &str) -> (String, Vec<(usize, String)>) {
    let mut prose = String::new();
    let mut code = Vec::new();
    let mut fenced = false;
    // The paragraph being gathered: its first line's number and its text.
    let mut para: Vec<(usize, String)> = Vec::new();
    fn flush(para: &mut Vec<(usize, String)>, prose: &mut String, code: &mut Vec<(usize, String)>) {
        let text: String = para.iter().map(|(_, l)| l.as_str()).collect();
        let chars: Vec<char> = text.chars().collect();
        // The line number of each char.
        let mut line_of = Vec::with_capacity(chars.len());
        for (n, l) in para.iter() {
            line_of.extend(std::iter::repeat_n(*n, l.chars().count()));
        }
        let mut out: Vec<char> = chars.clone();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] != '`' {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len() && chars[j] == '`' {
                j += 1;
            }
            let run = j - i;
            // The closing run: exactly `run` backticks.
            let mut k = j;
            let mut close = None;
            while k < chars.len() {
                if chars[k] == '`' {
                    let mut e = k;
                    while e < chars.len() && chars[e] == '`' {
                        e += 1;
                    }
                    if e - k == run {
                        close = Some((k, e));
                        break;
                    }
                    k = e;
                } else {
                    k += 1;
                }
            }
            match close {
                Some((k, e)) => {
                    let span: String = chars[j..k].iter().collect();
                    code.push((line_of[i], span.replace('\n', " ")));
                    for c in out.iter_mut().take(e).skip(i) {
                        if *c != '\n' {
                            *c = ' ';
                        }
                    }
                    i = e;
                }
                None => i = j,
            }
        }
        prose.extend(out);
        para.clear();
    }
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let blank = " ".repeat(line.chars().count()) + "\n";
        if is_fence(line) {
            flush(&mut para, &mut prose, &mut code);
            fenced = !fenced;
            prose.push_str(&blank);
            continue;
        }
        if fenced || (para.is_empty() && line.starts_with("    ")) {
            flush(&mut para, &mut prose, &mut code);
            // A shell comment is prose about the command, not the command.
            let command = line.split(" #").next().unwrap_or("");
            code.push((n, command.to_string()));
            prose.push_str(&blank);
            continue;
        }
        if line.trim().is_empty() {
            flush(&mut para, &mut prose, &mut code);
            prose.push('\n');
            continue;
        }
        para.push((n, format!("{line}\n")));
    }
    flush(&mut para, &mut prose, &mut code);
    (prose, code)
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

/// The subcommand words of the code in `text` where `rtapi` stands as a command — first in a code
/// span or line, or after `sudo `, `exec `, `$ `, `&& ` or `| ` — with their lines. Quoted messages
/// (`… rtapi refuses …`) are not commands.
fn command_words(text: &str) -> Vec<(usize, String)> {
    let (_, code) = split_code(text);
    let mut words = Vec::new();
    for (line, piece) in code {
        let mut from = 0;
        while let Some(at) = piece[from..].find("rtapi ") {
            let at = from + at;
            from = at + "rtapi ".len();
            let before = piece[..at].trim_start();
            let commanding = before.is_empty()
                || ["sudo ", "exec ", "$ ", "&& ", "| "]
                    .iter()
                    .any(|p| before.ends_with(p));
            if !commanding {
                continue;
            }
            let word: String = piece[from..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if !word.is_empty() {
                words.push((line, word));
            }
        }
    }
    words
}

/// The options of `text`'s `rtapi SUB` mentions: (line, SUB, option) for each the SUB's help does
/// not define, and how many were checked. A SUB with subcommands of its own (`recorder dump`) is read
/// with that one's help.
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

/// The `--options` written in a mention's tail (`[--cpu N|BASE,SERVO]` → `--cpu`).
fn options(tail: &str) -> Vec<&str> {
    tail.split(|c: char| c.is_whitespace() || "[]|(),=".contains(c))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(['.', ':', ';', '"', '\'']))
        .filter(|w| w[2..].starts_with(|c: char| c.is_ascii_lowercase()))
        .collect()
}

/// The subcommands the documents name: those `rtapi --help` lists, and those it does not list but
/// the binary takes (`rtapi generate-docs --help` works); and the command words it does not take at
/// all, as (document, line, word).
fn known_and_unknown(docs: &[(String, String)]) -> (Vec<String>, Vec<(String, usize, String)>) {
    let mut subs = subcommands();
    let mut unknown = Vec::new();
    let mut refused: BTreeSet<String> = BTreeSet::new();
    for (path, text) in docs {
        for (line, word) in command_words(text) {
            if subs.contains(&word) {
                continue;
            }
            if !refused.contains(&word) && help_text_if(&[word.as_str()]).is_some() {
                subs.push(word);
                continue;
            }
            refused.insert(word.clone());
            unknown.push((path.clone(), line, word));
        }
    }
    (subs, unknown)
}

/// GitHub's anchor of a heading: its text lowercased, links reduced to their text, every character
/// but letters, digits, `-`, `_` and spaces dropped, spaces made `-`.
fn anchor_of(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](target)` → `text`.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|close| {
            let end = after[close..].find(')')? + close;
            Some((close, end))
        }) {
            Some((close, end)) => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of `text`'s headings (ATX headings outside code blocks); a repeated one gets `-1`,
/// `-2`, … as GitHub numbers them.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if is_fence(line) {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        let base = anchor_of(title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The link targets of `text`'s prose (`[text](target)`, `![alt](target)`; not in code), with lines.
fn links(text: &str) -> Vec<(usize, String)> {
    let (prose, _) = split_code(text);
    let mut out = Vec::new();
    for (n, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].trim().to_string()));
            rest = &after[end..];
        }
    }
    out
}

/// The relative links of the document at `path` (from `root`) that point at nothing: a file that
/// does not exist, or an `#anchor` that no heading of its Markdown file has. (line, target, why).
fn broken_links(root: &Path, path: &str, text: &str) -> Vec<(usize, String, String)> {
    let dir = Path::new(path).parent().unwrap_or(Path::new(""));
    let mut wrong = Vec::new();
    for (line, target) in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (target.as_str(), None),
        };
        let rel: PathBuf = if file.is_empty() {
            PathBuf::from(path)
        } else {
            dir.join(file)
        };
        let full = root.join(&rel);
        if !full.exists() {
            wrong.push((line, target.clone(), format!("no file {}", rel.display())));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if !file.is_empty() && !file.ends_with(".md") {
            wrong.push((
                line,
                target.clone(),
                "an anchor into a file that is not Markdown".into(),
            ));
            continue;
        }
        let headings = anchors(&std::fs::read_to_string(&full).unwrap());
        if !headings.contains(anchor) {
            wrong.push((
                line,
                target.clone(),
                format!("{} has no heading with the anchor #{anchor}", rel.display()),
            ));
        }
    }
    wrong
}

/// The chapters (docs/guide/*.md but the index) that the index `index` does not link.
fn unlinked_chapters(index: &str, chapters: &[String]) -> Vec<String> {
    let linked: BTreeSet<String> = links(index)
        .into_iter()
        .map(|(_, t)| t.split('#').next().unwrap_or("").to_string())
        .collect();
    chapters
        .iter()
        .filter(|c| !linked.contains(c.as_str()))
        .cloned()
        .collect()
}

#[test]
fn every_command_and_option_the_documents_give_is_the_binarys() {
    let docs = documents();
    assert!(
        docs.len() >= 10,
        "README and the guide's chapters: {:?}",
        docs.iter().map(|d| &d.0).collect::<Vec<_>>()
    );
    let (subs, unknown) = known_and_unknown(&docs);
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
    assert!(
        unknown.is_empty(),
        "commands the binary does not have (document, line, word): {unknown:#?}"
    );
    let mut mentioned = 0;
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (path, text) in &docs {
        mentioned += mentions(text, &subs).len();
        let (c, w) = unknown_options(text, &subs);
        checked += c;
        wrong.extend(w.into_iter().map(|(l, s, o)| (format!("{path}:{l}"), s, o)));
    }
    // A floor: a scanner that found nothing would pass anything.
    assert!(
        mentioned >= 200 && checked >= 100,
        "only {checked} options in {mentioned} mentions found"
    );
    assert!(
        wrong.is_empty(),
        "options the subcommand does not take (where, command, option): {wrong:#?}"
    );
}

#[test]
fn every_link_of_the_documents_points_at_a_file_and_heading_that_exist() {
    let root = Path::new(ROOT);
    let mut count = 0;
    let mut wrong = Vec::new();
    for (path, text) in documents() {
        count += links(&text).len();
        wrong.extend(
            broken_links(root, &path, &text)
                .into_iter()
                .map(|(l, t, why)| (format!("{path}:{l}"), t, why)),
        );
    }
    assert!(count >= 60, "only {count} links found");
    assert!(
        wrong.is_empty(),
        "broken links (where, target, why): {wrong:#?}"
    );
}

#[test]
fn readme_is_a_front_page_with_the_quick_start_first() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; a front page has at most 250"
    );
    // The first code block is the quick start's two commands, under the first section.
    let mut blocks = readme.split("```").skip(1).step_by(2);
    let first = blocks.next().expect("README has no code block");
    let commands: Vec<&str> = first
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(commands, QUICK_START, "README's first code block");
    let first_section = readme.lines().find(|l| l.starts_with("## "));
    assert_eq!(first_section, Some("## Quick start"));
    assert!(
        readme.find("## Quick start").unwrap() < readme.find("```").unwrap(),
        "the quick start's commands come under its heading"
    );
    // `.ci/run` runs README's test command (with options added after it).
    let ci = read(".ci/run");
    assert!(
        ci.lines()
            .any(|l| l.starts_with(&format!("{} ", QUICK_START[1]))),
        ".ci/run does not run README's test command `{}`",
        QUICK_START[1]
    );
    // Where to read on: the guide's index and the design.
    let targets: Vec<String> = links(&readme).into_iter().map(|(_, t)| t).collect();
    for want in ["docs/guide/README.md", "docs/ARCHITECTURE.md"] {
        assert!(targets.iter().any(|t| t == want), "README links no {want}");
    }
}

#[test]
fn the_guides_index_links_every_chapter() {
    let index = read("docs/guide/README.md");
    let chapters: Vec<String> = documents()
        .into_iter()
        .filter_map(|(p, _)| Some(p.strip_prefix("docs/guide/")?.to_string()))
        // The index itself, and texts other helpers write to be merged into the chapters.
        .filter(|n| n != "README.md" && !n.starts_with("NEW-"))
        .collect();
    assert!(chapters.len() >= 10, "chapters: {chapters:?}");
    let missing = unlinked_chapters(&index, &chapters);
    assert!(
        missing.is_empty(),
        "chapters docs/guide/README.md does not link: {missing:?}"
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

#[test]
fn the_check_catches_a_command_the_binary_does_not_have() {
    let text = "Run `rtapi detcet --json`, or:\n\n```sh\nsudo rtapi tnue --dry-run   # rtapi fixes it\n\
                rtapi generate-docs --out d\n```\n\n\
                A quoted message `… 2.9 has it; rtapi refuses …` and prose where rtapi explains are not \
                commands; `sudo rtapi divert on` is pending.\n";
    let docs = vec![("x.md".to_string(), text.to_string())];
    let (subs, unknown) = known_and_unknown(&docs);
    assert_eq!(
        unknown,
        vec![
            ("x.md".to_string(), 1, "detcet".to_string()),
            ("x.md".to_string(), 4, "tnue".to_string())
        ]
    );
    assert!(
        subs.iter().any(|s| s == "generate-docs"),
        "a subcommand --help does not list, but the binary takes: {subs:?}"
    );
    let (_, wrong) = unknown_options("`rtapi generate-docs --out d --no-out`", &subs);
    assert_eq!(
        wrong,
        vec![(1, "generate-docs".to_string(), "--no-out".to_string())]
    );
}

#[test]
fn anchors_follow_githubs_rule() {
    for (heading, anchor) in [
        (
            "Which LinuxCNC: the releases verified, and what happens with others",
            "which-linuxcnc-the-releases-verified-and-what-happens-with-others",
        ),
        (
            "Why is it late? (spike causes)",
            "why-is-it-late-spike-causes",
        ),
        ("JSON (`--json`)", "json---json"),
        (
            "LinuxCNC's servo thread on rtapi and on its own `rtapi_app`",
            "linuxcncs-servo-thread-on-rtapi-and-on-its-own-rtapi_app",
        ),
        (
            "A Mesa machine config: `config/mesa-7i96s/`",
            "a-mesa-machine-config-configmesa-7i96s",
        ),
        ("See [the guide](docs/guide/README.md)", "see-the-guide"),
        ("Kernel µs", "kernel-µs"),
    ] {
        assert_eq!(anchor_of(heading), anchor, "{heading}");
    }
    let text = "# Top\n\n## Usage\n\n```\n# not a heading\n```\n\n## Usage\n\n#nospace\n";
    assert_eq!(
        anchors(text),
        ["top", "usage", "usage-1"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

#[test]
fn the_check_catches_a_broken_link() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("docs/guide")).unwrap();
    std::fs::write(root.join("docs/guide/b.md"), "# B\n\n## Real heading\n").unwrap();
    std::fs::write(root.join("docs/pic.png"), "").unwrap();
    let a = "# A\n\n## Here\n\n\
             [ok](b.md#real-heading), [ok](#here), ![ok](../pic.png), [ok](https://x.org/#y)\n\
             [no heading](b.md#unreal-heading), [no file](c.md), [no local](#there)\n\
             [not md](../pic.png#x)\n\
             `[in code](nowhere.md)` and\n\n```\n[in a block](nowhere.md)\n```\n";
    std::fs::write(root.join("docs/guide/a.md"), a).unwrap();
    let wrong: Vec<(usize, String)> = broken_links(root, "docs/guide/a.md", a)
        .into_iter()
        .map(|(l, t, _)| (l, t))
        .collect();
    assert_eq!(
        wrong,
        vec![
            (6, "b.md#unreal-heading".to_string()),
            (6, "c.md".to_string()),
            (6, "#there".to_string()),
            (7, "../pic.png#x".to_string()),
        ]
    );
    assert_eq!(
        unlinked_chapters(
            "[a](a.md) [b](b.md#x)",
            &["a.md".into(), "b.md".into(), "c.md".into()]
        ),
        vec!["c.md".to_string()]
    );
}
