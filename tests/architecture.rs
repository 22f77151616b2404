//! docs/ARCHITECTURE.md names the code it describes, and those names are the code's (issue 47): a
//! renamed function, a dropped type or a moved file fails here instead of leaving the map pointing at
//! nothing. Reads files only; no binary is built or run.
//!
//! What is checked: every inline code span (text between single backticks, outside fenced blocks)
//! that looks like code.
//!
//! * **Paths** — a span with a `/` (`src/runtime/thread.rs`, `runtime/hosted/`, `hal/src/reader`) or
//!   a file name ending in `.rs`, `.c`, `.py`, `.toml` or `.sh` (`shim.c`, `trust.rs`): some file or
//!   folder of the repository must be that path or end with `/` + it (the document writes paths
//!   relative to `src/` or to the repository, and shortens them where the section says the folder).
//!   A `::` after a file name (`session.rs::PipeReader`) checks the file and then the item.
//! * **Identifiers** — `snake_case`, `CamelCase`, `SCREAMING_CASE`, plain words (`loadrt`, `u32`) and
//!   Rust paths (`Type::method`, `crate::module::item`, `rt::units::{parse_duration, tame}`): each
//!   segment (but `crate`, `self`, `super`, `std`) must be a whole word somewhere in the sources:
//!   `src/`, `hal/`, `tests/`, `benches/`, `python/`, `scripts/`, `.ci/` and `build.rs`, comments
//!   included. Generic arguments and call arguments are dropped first (`Runtime<Running>` →
//!   `Runtime`, `HostedThreads::open(instance, HostedOptions)` → `HostedThreads::open`,
//!   `write(2)` → `write`). This covers C symbols (`rtapi_task_start`) and environment variables
//!   (`RTAPI_INSTANCE`) too.
//! * **Prefixes** — `hal_*`, `rtapi_shmem_*`, `hm2_`: some word must start with the prefix.
//! * **Item paths inside modules** — in `outer::inner`, when `outer` is a module (a file `outer.rs`
//!   or a folder `outer/` in the sources) `inner` must be a word of that module's files, so a function
//!   named under the wrong module fails; when `outer` is a type, `inner` must be a word of a file that
//!   also names the type. The crates' roots (`rtapi::…`) are not modules here.
//! * **Diagrams** (fenced blocks), where plain words are prose: only names that can only be code —
//!   item paths (`Ledger::finished`), names with an underscore (`build_segment`, `SCHED_FIFO`) and
//!   `.rs`/`.c` files — under the same rules.
//!
//! What is not checked, because it is not a name the code spells as a word:
//! * a span with a space: a shell command (`rtapi run`), an expression (`on time + late = sent`),
//!   prose;
//! * options and values: a span starting with `-` (`--trace`, `-W`, `-ENOSYS`), or holding `=`
//!   (`isolcpus=…`, `names=`);
//! * dotted names that are not files: HAL pin and parameter names (`rtapi.servo.late`, `.late`,
//!   `<funct>.time`), which the code builds at run time from pieces, and attribute accesses in
//!   Python (`Instance.get`);
//! * names with a placeholder or an ellipsis in them (`rtapi-<pid>`, `hm2_….read`,
//!   `ethtool/IF.json`), hyphenated program, crate and thread names (`rtapi-lcnc-master`), and
//!   all-capital slash pairs (`G/SEEE`, ethtool's get/set commands);
//! * absolute paths (`/proc/interrupts`, `/dev/shm/…`): the machine's, not the repository's;
//! * LinuxCNC's own files, named for where they come from: `.h` and `.so` file names
//!   without a folder (`hal_priv.h`, `hostmot2.so`);
//! * Rust attributes (`#[cfg(test)]`), TOML tables (`[recorder]`), and spans with other
//!   punctuation (`c["led"]`, `linuxcnc:NAME`, `O_EXCL|O_NOFOLLOW` is split at `|`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const SOURCES: &[&str] = &[
    "src", "hal", "tests", "benches", "python", "scripts", ".ci", "build.rs",
];

/// What the repository holds: its files' and folders' paths (relative, `/`-separated) and the words
/// of its sources.
struct Repo {
    paths: BTreeSet<String>,
    words: BTreeSet<String>,
    /// Each source file's path and words.
    files: Vec<(String, BTreeSet<String>)>,
}

impl Repo {
    fn read(root: &Path) -> Repo {
        let mut repo = Repo {
            paths: BTreeSet::new(),
            words: BTreeSet::new(),
            files: Vec::new(),
        };
        for top in SOURCES {
            repo.walk(root, &root.join(top));
        }
        // Paths may also name files outside the source folders (docs/, config/, Cargo.toml).
        for entry in std::fs::read_dir(root).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !SOURCES.contains(&name.as_str()) && !["target", ".git"].contains(&name.as_str()) {
                repo.walk_paths(root, &entry.path());
            }
        }
        repo
    }

    fn relative(root: &Path, path: &Path) -> String {
        path.strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// Records `path` and everything under it; reads the words of its text files.
    fn walk(&mut self, root: &Path, path: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        self.paths.insert(Self::relative(root, path));
        if meta.is_dir() {
            let name = path.file_name().unwrap_or_default();
            if name == "target" || name == "__pycache__" || name == ".pytest_cache" {
                return;
            }
            for entry in std::fs::read_dir(path).unwrap() {
                self.walk(root, &entry.unwrap().path());
            }
        } else if meta.is_file() && !path.ends_with("tests/architecture.rs") {
            // This file's words (the made-up names of its own test) would vouch for themselves.
            let Ok(bytes) = std::fs::read(path) else {
                return;
            };
            let text = String::from_utf8_lossy(&bytes);
            let words: BTreeSet<String> = text
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect();
            self.words.extend(words.iter().cloned());
            self.files.push((Self::relative(root, path), words));
        }
    }

    /// Records `path` and everything under it, reading nothing.
    fn walk_paths(&mut self, root: &Path, path: &Path) {
        self.paths.insert(Self::relative(root, path));
        if path.is_dir() && !path.is_symlink() {
            for entry in std::fs::read_dir(path).unwrap() {
                self.walk_paths(root, &entry.unwrap().path());
            }
        }
    }

    fn has_path(&self, path: &str) -> bool {
        let path = path.trim_end_matches('/');
        let suffix = format!("/{path}");
        self.paths.iter().any(|p| p == path || p.ends_with(&suffix))
    }

    fn has_word(&self, word: &str) -> bool {
        self.words.contains(word)
    }

    /// `outer::inner`: when `outer` is a module (a file `outer.rs` or a folder `outer/` in the
    /// sources), `inner` is a word of that module's files; otherwise (a type, a trait) `inner` is a
    /// word of a file that names `outer` too.
    fn has_inner(&self, outer: &str, inner: &str) -> bool {
        let file = format!("{outer}.rs");
        let in_module = |path: &str| {
            let mut parts: Vec<&str> = path.split('/').collect();
            let name = parts.pop().unwrap_or("");
            name == file || parts.contains(&outer)
        };
        let modules: Vec<_> = self.files.iter().filter(|(p, _)| in_module(p)).collect();
        if !modules.is_empty() {
            return modules.iter().any(|(_, words)| words.contains(inner));
        }
        self.files
            .iter()
            .any(|(_, words)| words.contains(outer) && words.contains(inner))
    }

    fn has_prefix(&self, prefix: &str) -> bool {
        self.words
            .range(prefix.to_string()..)
            .next()
            .is_some_and(|w| w.starts_with(prefix))
    }
}

/// The lines of a Markdown text, numbered, each with whether it is inside a fenced block.
fn lines(markdown: &str) -> Vec<(usize, bool, &str)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        out.push((n + 1, fenced, line));
    }
    out
}

/// The inline code spans of a Markdown text outside fenced blocks, with their line numbers.
fn code_spans(markdown: &str) -> Vec<(usize, String)> {
    let mut spans = Vec::new();
    for (n, fenced, line) in lines(markdown) {
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            spans.push((n, inside.to_string()));
        }
        // A last `inside` with no closing backtick is not a span; split's pairing drops it.
    }
    spans
}

/// One thing a span asks of the repository.
#[derive(Debug, PartialEq, Eq)]
enum Claim {
    Path(String),
    Word(String),
    /// `outer::inner` (see [`Repo::has_inner`]).
    Inner(String, String),
    Prefix(String),
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

const FILE_EXTENSIONS: &[&str] = &[".rs", ".c", ".py", ".toml", ".sh"];

fn is_file_name(s: &str) -> bool {
    FILE_EXTENSIONS
        .iter()
        .any(|e| s.len() > e.len() && s.ends_with(e))
        && is_ident(&s[..s.rfind('.').unwrap()].replace('-', "_"))
}

/// Drops `<…>` (balanced) from `s`.
fn without_generics(s: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// What the span claims, or nothing when it is not code by the module's rules.
fn claims(span: &str) -> Vec<Claim> {
    let span = span.trim();
    // An environment variable written as the shell does: `$RTAPI_INSTANCE`.
    let span = span.strip_prefix('$').unwrap_or(span);
    if span.is_empty()
        || span.starts_with('-')
        || span.starts_with('#')
        || span.starts_with('[')
        || span.starts_with('/')
        || span.contains('=')
        || span.contains('…')
    {
        return Vec::new();
    }
    // A placeholder: `rtapi-<pid>`, `<thread>.latency` (generics follow an identifier: `Runtime<R>`).
    if span.starts_with('<') || span.contains("-<") || span.contains("/<") || span.contains(".<") {
        return Vec::new();
    }
    let mut s = without_generics(span);
    // Call arguments: `spawn(ThreadSpec, body)` → `spawn`, `write(2)` → `write`.
    if let Some(open) = s.find('(') {
        if s.ends_with(')') && is_ident_path(&s[..open]) {
            s.truncate(open);
        }
    }
    // `Runtime::{addf, delf}` → `Runtime::addf`, `Runtime::delf`.
    if let (Some(open), true) = (s.find("::{"), s.ends_with('}')) {
        let head = s[..open].to_string();
        return s[open + 3..s.len() - 1]
            .split(',')
            .flat_map(|item| claims(&format!("{head}::{}", item.trim())))
            .collect();
    }
    if s.contains(char::is_whitespace) {
        return Vec::new();
    }
    if s.contains('|') {
        return s.split('|').flat_map(claims).collect();
    }
    // A path.
    if s.contains('/') {
        let all_caps = s
            .chars()
            .all(|c| c.is_ascii_uppercase() || c == '/' || c == '_');
        let placeholder = s.split('/').any(|seg| {
            seg.split('.')
                .next()
                .is_some_and(|stem| stem.len() > 1 && stem.chars().all(|c| c.is_ascii_uppercase()))
        });
        let pathish = s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
        if all_caps || placeholder || !pathish {
            return Vec::new();
        }
        return vec![Claim::Path(s)];
    }
    // An item path, perhaps starting at a file: `session.rs::PipeReader`.
    let mut out = Vec::new();
    let segments: Vec<&str> = s.split("::").collect();
    for pair in segments.windows(2) {
        // The crates' roots (`rtapi::bench_internals`) are `lib.rs`es: only the word is checked.
        let root = ["crate", "self", "super", "std", "rtapi", "rtapi_hal"].contains(&pair[0]);
        if is_ident(pair[0]) && is_ident(pair[1]) && !root {
            out.push(Claim::Inner(pair[0].to_string(), pair[1].to_string()));
        }
    }
    for seg in segments {
        if ["crate", "self", "super", "std"].contains(&seg) {
            continue;
        }
        if is_file_name(seg) {
            out.push(Claim::Path(seg.to_string()));
        } else if seg.ends_with('*') && is_ident(seg.trim_end_matches('*')) {
            out.push(Claim::Prefix(seg.trim_end_matches('*').to_string()));
        } else if seg.ends_with('_') && is_ident(seg) && !s.contains("::") {
            out.push(Claim::Prefix(seg.to_string()));
        } else if is_ident(seg) {
            out.push(Claim::Word(seg.to_string()));
        } else {
            // A dotted name (`rtapi.servo.late`, `hal_priv.h`), a hyphenated one, other punctuation.
            return Vec::new();
        }
    }
    out
}

/// The names in fenced blocks (diagrams) that can only be code, with their line numbers: item paths
/// (`Ledger::finished`, `tasks.rs::spawn`), names with an underscore (`build_segment`, `SCHED_FIFO`)
/// and `.rs`/`.c` files (a `machine.toml` there stands for the user's file); a `a_b/c_d` pair is
/// read as two names. Plain words are prose there.
fn fenced_names(markdown: &str) -> Vec<(usize, String)> {
    let mut names = Vec::new();
    for (n, fenced, line) in lines(markdown) {
        if !fenced {
            continue;
        }
        let tokens = line.split(|c: char| !(c.is_ascii_alphanumeric() || "_:./*".contains(c)));
        for token in tokens {
            let token = token.trim_matches(|c: char| ".:/".contains(c));
            if token.contains('/') && !is_file_name(token.rsplit('/').next().unwrap_or("")) {
                for part in token.split('/') {
                    if part.contains('_') && is_ident(part) {
                        names.push((n, part.to_string()));
                    }
                }
                continue;
            }
            // Source files only: `machine.toml` in a diagram stands for the user's file.
            let last = token.rsplit('/').next().unwrap_or("");
            let source_file = is_file_name(last) && (last.ends_with(".rs") || last.ends_with(".c"));
            let code = token.contains("::")
                || source_file
                || (token.contains('_')
                    && !token.starts_with('_')
                    && is_ident(token.trim_end_matches('*').trim_end_matches('_')));
            if code {
                names.push((n, token.to_string()));
            }
        }
    }
    names
}

fn is_ident_path(s: &str) -> bool {
    !s.is_empty() && s.split("::").all(is_ident)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every claim of `markdown` the repository does not hold: (line, span, claim).
fn drifts(markdown: &str, repo: &Repo) -> Vec<(usize, String, Claim)> {
    let mut wrong = Vec::new();
    for (line, span) in code_spans(markdown)
        .into_iter()
        .chain(fenced_names(markdown))
    {
        for claim in claims(&span) {
            let holds = match &claim {
                Claim::Path(p) => repo.has_path(p),
                Claim::Word(w) => repo.has_word(w),
                Claim::Inner(o, i) => repo.has_inner(o, i),
                Claim::Prefix(p) => repo.has_prefix(p),
            };
            if !holds {
                wrong.push((line, span.clone(), claim));
            }
        }
    }
    wrong
}

#[test]
fn every_code_name_in_architecture_md_is_in_the_sources() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let repo = Repo::read(&root);
    let checked: usize = code_spans(&doc).iter().map(|(_, s)| claims(s).len()).sum();
    // The document names hundreds of items; a parser that finds none checks nothing.
    assert!(
        checked > 300,
        "only {checked} names checked: the span parser is broken"
    );
    let wrong = drifts(&doc, &repo);
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md names code the repository does not have (line, span, claim):\n{}",
        wrong
            .iter()
            .map(|(l, s, c)| format!("  {l}: `{s}` → {c:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The rules themselves, on spans of each kind: what is checked and what is left alone.
#[test]
fn the_rules_sort_spans_as_documented() {
    use Claim::*;
    let w = |s: &str| Word(s.to_string());
    assert_eq!(claims("rtapi_task_start"), [w("rtapi_task_start")]);
    assert_eq!(claims("RTAPI_INSTANCE"), [w("RTAPI_INSTANCE")]);
    assert_eq!(claims("$RTAPI_INSTANCE"), [w("RTAPI_INSTANCE")]);
    let inner = |o: &str, i: &str| Inner(o.to_string(), i.to_string());
    assert_eq!(
        claims("Period::wait"),
        [inner("Period", "wait"), w("Period"), w("wait")]
    );
    assert_eq!(
        claims("rtapi::bench_internals"),
        [w("rtapi"), w("bench_internals")]
    );
    assert_eq!(claims("crate::NAME"), [w("NAME")]);
    assert_eq!(claims("Runtime<Configuring | Running>"), [w("Runtime")]);
    assert_eq!(
        claims("HostedThreads::open(instance, HostedOptions)"),
        [
            inner("HostedThreads", "open"),
            w("HostedThreads"),
            w("open")
        ]
    );
    assert_eq!(claims("wait()"), [w("wait")]);
    assert_eq!(
        claims("Runtime::{addf, delf}"),
        [
            inner("Runtime", "addf"),
            w("Runtime"),
            w("addf"),
            inner("Runtime", "delf"),
            w("Runtime"),
            w("delf")
        ]
    );
    assert_eq!(claims("O_EXCL|O_NOFOLLOW"), [w("O_EXCL"), w("O_NOFOLLOW")]);
    assert_eq!(claims("hal_*"), [Prefix("hal_".into())]);
    assert_eq!(claims("hm2_"), [Prefix("hm2_".into())]);
    assert_eq!(
        claims("runtime/thread.rs"),
        [Path("runtime/thread.rs".into())]
    );
    assert_eq!(claims("shim.c"), [Path("shim.c".into())]);
    assert_eq!(
        claims("session.rs::PipeReader"),
        [Path("session.rs".into()), w("PipeReader")]
    );
    let fenced = "```\n Runtime::start: place → build_segment (runtime/start.rs, shim.c)\n \
                  rtapi_request/release_firmware → /lib/firmware/NAME; rtapi_task_* → prose\n```\n";
    let names: Vec<(usize, String)> = fenced_names(fenced);
    let names: Vec<&str> = names.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "Runtime::start",
            "build_segment",
            "runtime/start.rs",
            "shim.c",
            "rtapi_request",
            "release_firmware",
            "rtapi_task_*"
        ]
    );
    for not_code in [
        "rtapi run",
        "--trace",
        "-W",
        "rtapi.servo.late",
        ".late",
        "<thread>.latency",
        "rtapi-<pid>",
        "rtapi-lcnc-master",
        "hal_priv.h",
        "hostmot2.so",
        "/proc/interrupts",
        "G/SEEE",
        "ethtool/IF.json",
        "isolcpus=managed_irq,domain,…",
        "#[cfg(test)]",
        "[recorder]",
        "linuxcnc:NAME",
        "Instance.get",
    ] {
        assert_eq!(claims(not_code), [], "{not_code}");
    }
}

/// The check catches a name that is not there, a file that is not there, and passes real ones.
#[test]
fn a_made_up_name_is_a_drift() {
    let repo = Repo::read(&root());
    let doc = "Real: `Runtime::start`, `src/cli/mod.rs`, `VERIFIED`, `start::harden`.\n\
               Made up: `Runtime::launch_rockets`, `src/cli/nowhere.rs`, `RTAPI_NO_SUCH_VAR`.\n\
               Misplaced: `detect::harden` (a real function, in another module).\n\
               ```\n Runtime::start → place → build_segment → made_up_phase\n```\n";
    let found: Vec<String> = drifts(doc, &repo)
        .into_iter()
        .map(|(line, _, claim)| format!("{line} {claim:?}"))
        .collect();
    assert_eq!(
        found,
        [
            "2 Inner(\"Runtime\", \"launch_rockets\")",
            "2 Word(\"launch_rockets\")",
            "2 Path(\"src/cli/nowhere.rs\")",
            "2 Word(\"RTAPI_NO_SUCH_VAR\")",
            "3 Inner(\"detect\", \"harden\")",
            "5 Word(\"made_up_phase\")",
        ]
    );
}
