//! The man pages and shell completions `rtapi generate-docs --out DIR` writes (issue 47: installed as
//! LinuxCNC users install software) are the binary's command line: a page for every subcommand its
//! `--help` lists, each rendering with `man` and naming every option of that subcommand's `--help`;
//! a bash completion that completes subcommands and their options.

mod common;

use common::{commands_of, help_text, long_options_of};

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn rtapi() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rtapi"))
}

/// Every subcommand path `--help` shows, nested ones included: `["latency-test"]`,
/// `["recorder", "dump"]`.
fn subcommand_paths() -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for sub in commands_of(&help_text(&[])) {
        for nested in commands_of(&help_text(&[&sub])) {
            paths.push(vec![sub.clone(), nested]);
        }
        paths.push(vec![sub]);
    }
    paths
}

/// Runs `rtapi generate-docs --out DIR` into a new temporary directory.
fn generate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = rtapi()
        .args(["generate-docs", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "rtapi generate-docs: {out:?}");
    dir
}

/// `man -l PAGE` as plain text, wide and unhyphenated so an option is never cut; it must render
/// without a word on stderr (groff's warnings about the page).
fn render(page: &Path) -> String {
    let out = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANWIDTH", "250")
        .env("MANROFFOPT", "-rHY=0")
        .env("MANPAGER", "cat")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "man -l {}: {out:?}",
        page.display()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A rendered page's section `name`: the lines after its heading (a line alone at column 0) up to
/// the next heading.
fn section<'a>(page: &'a str, name: &str) -> Vec<&'a str> {
    page.lines()
        .skip_while(|l| l.trim_end() != name)
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect()
}

#[test]
fn every_subcommand_has_a_man_page_that_renders_and_names_its_options() {
    let dir = generate();
    let man1 = dir.path().join("man/man1");
    let paths = subcommand_paths();
    assert!(
        paths.iter().any(|p| p == &["latency-test"]) && paths.len() > 10,
        "the subcommands read from --help: {paths:?}"
    );
    if Command::new("man").arg("--version").output().is_err() {
        return skip!(Ci, "man (man-db) is not installed");
    }
    let mut expected = vec!["rtapi.1".to_string()];
    let mut pages = vec![(man1.join("rtapi.1"), Vec::new())];
    for path in &paths {
        let name = format!("rtapi-{}.1", path.join("-"));
        expected.push(name.clone());
        pages.push((man1.join(&name), path.clone()));
    }
    let mut written: Vec<String> = std::fs::read_dir(&man1)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    expected.sort();
    // Exactly these: one per subcommand, none for the hidden generate-docs or for `help`.
    assert_eq!(written, expected, "the pages in {}", man1.display());
    for (page, path) in pages {
        let text = render(&page);
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let title = format!(
            "rtapi{}",
            args.iter().map(|a| format!("-{a}")).collect::<String>()
        );
        assert!(
            text.starts_with(&format!("{title}(1)")),
            "{}: {}",
            page.display(),
            text.lines().next().unwrap_or("")
        );
        // The page's OPTIONS entries (`       --duration <DURATION> [default: 60s]`, `-q, --quiet`),
        // not options its prose mentions, are those of the subcommand's --help.
        let options: BTreeSet<String> = long_options_of(&help_text(&args)).into_iter().collect();
        assert!(!options.is_empty(), "rtapi {args:?} --help lists no option");
        let listed: BTreeSet<String> = long_options_of(&section(&text, "OPTIONS").join("\n"))
            .into_iter()
            .collect();
        assert_eq!(
            listed,
            options,
            "{}'s OPTIONS (left) against rtapi {} --help (right):\n{text}",
            page.display(),
            args.join(" ")
        );
    }
}

/// The top page's VERSION section names the releases rtapi was verified with.
#[test]
fn the_rtapi_page_names_the_verified_linuxcnc_releases() {
    let dir = generate();
    if Command::new("man").arg("--version").output().is_err() {
        return skip!(Ci, "man (man-db) is not installed");
    }
    let text = render(&dir.path().join("man/man1/rtapi.1"));
    let version = text.split("VERSION").nth(1).expect("a VERSION section");
    let version = version.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
    for (release, _) in rtapi::detect::linuxcnc::VERIFIED {
        assert!(version.contains(release), "{release} not in {version}");
    }
}

/// What bash offers for `words` (the last one being completed), through the generated file's own
/// completion function, as a shell does on TAB.
fn bash_completions(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        r#"source '{script}' || exit 9
spec=$(complete -p rtapi) || exit 8
fn=$(printf '%s\n' "$spec" | sed -E 's/.*-F ([^ ]+).*/\1/')
COMP_WORDS=({words})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"
COMP_POINT=${{#COMP_LINE}}
"$fn" rtapi "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        script = script.display(),
        words = quoted.join(" ")
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(out.status.success(), "bash: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_subcommands_and_their_options() {
    let dir = generate();
    let script = dir.path().join("completions/rtapi.bash");
    let subs = bash_completions(&script, &["rtapi", "lat"]);
    assert_eq!(subs, ["latency-test"], "rtapi lat<TAB>");
    let all = bash_completions(&script, &["rtapi", ""]);
    for sub in commands_of(&help_text(&[])) {
        assert!(
            all.contains(&sub),
            "rtapi <TAB> does not offer {sub}: {all:?}"
        );
    }
    assert!(
        !all.iter().any(|s| s == "generate-docs"),
        "rtapi <TAB> offers the hidden generate-docs: {all:?}"
    );
    let options = bash_completions(&script, &["rtapi", "latency-test", "--dur"]);
    assert_eq!(options, ["--duration"], "rtapi latency-test --dur<TAB>");
    // Another subcommand's options are not offered there.
    let other = bash_completions(&script, &["rtapi", "detect", "--dur"]);
    assert_eq!(other, Vec::<String>::new(), "rtapi detect --dur<TAB>");
}

/// zsh and fish get a completion file each that knows every subcommand (not run: neither shell is
/// on the build machines).
#[test]
fn zsh_and_fish_completions_name_every_subcommand() {
    let dir = generate();
    for file in ["_rtapi", "rtapi.fish"] {
        let text = std::fs::read_to_string(dir.path().join("completions").join(file)).unwrap();
        for sub in commands_of(&help_text(&[])) {
            assert!(text.contains(&sub), "{file} does not name {sub}");
        }
        assert!(
            text.contains("--duration"),
            "{file} has no latency-test options"
        );
    }
}
