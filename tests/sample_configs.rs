//! Every `.hal` file of LinuxCNC's sample configs through `rtapi halrun --check` (a real child
//! process), with each INI file that names it in `[HAL]HALFILE` / `POSTGUI_HALFILE` (a file that no
//! INI file names and that needs one: with each INI file of its directory).
//!
//! Every outcome must be one of: it loads; or it stops with a `file:line` error naming the first
//! thing rtapi lacks — a component that is not available, a pin/signal/function/thread that another
//! LinuxCNC program (motion, a GUI, halui…) or another file of the config would create, a `loadusr`,
//! a name with characters rtapi's HAL names do not allow, `[SECTION]KEY` in a file that no INI
//! file names, a key its INI file lacks (old-format INI files that LinuxCNC's `update_ini`
//! converts before running them), or a quote left open (invalid for LinuxCNC's halcmd too). Anything else (a parse error on valid syntax, a panic, an error without `file:line`,
//! a "missing" component that rtapi's own list has) fails the test, listing the files; so do fewer
//! files loading than [`LOADED_AT_LEAST`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const SAMPLES: &str = "/usr/share/doc/linuxcnc/examples/sample-configs";

/// The sample `.hal` files that pass `rtapi halrun --check` (README: 35 of 321): fewer is a
/// regression. Raise it when more pass.
const LOADED_AT_LEAST: usize = 35;

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() && !p.is_symlink() {
            walk(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// `[HAL]HALFILE` and `POSTGUI_HALFILE` values of an INI file (LinuxCNC's rules: first `[HAL]`
/// section wins nothing here — every value is a file to run).
fn halfiles(ini: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(ini).unwrap_or_default();
    let mut section = String::new();
    let mut files = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            if let Some(end) = rest.find(']') {
                section = rest[..end].to_string();
                continue;
            }
        }
        if section != "HAL" {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let k = k.trim();
            if k == "HALFILE" || k == "POSTGUI_HALFILE" {
                let v = v.trim();
                let v = v.strip_prefix("LIB:").unwrap_or(v);
                files.push(ini.parent().unwrap().join(v));
            }
        }
    }
    files
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Loaded,
    MissingComponent,
    ModuleRefused,
    MissingPin,
    Loadusr,
    UnsupportedName,
    NoIni,
    IniKeyMissing,
    InvalidSyntax,
    Other,
}

fn classify(code: Option<i32>, stderr: &str, file: &Path) -> Outcome {
    if code == Some(0) {
        return Outcome::Loaded;
    }
    let first = stderr.lines().next().unwrap_or("");
    // The error must name a file and a line: `path:N: message`.
    let located = first
        .split_once(": ")
        .and_then(|(place, _)| place.rsplit_once(':'))
        .is_some_and(|(path, line)| {
            line.parse::<usize>().is_ok() && Path::new(path).extension().is_some()
        });
    if code != Some(2) || !located || stderr.contains("panicked") {
        return Outcome::Other;
    }
    let _ = file;
    if first.contains("is not available in rtapi") {
        // The component named must really be missing: not in the list the message gives of those
        // rtapi has (all of them, or the ones with a close name — which would include itself).
        let name = first.split('\'').nth(1).unwrap_or("");
        let listed = ["rtapi has: ", "close: "]
            .iter()
            .find_map(|k| first.split_once(k))
            .map_or("", |(_, l)| l.split(';').next().unwrap_or(""));
        if name.is_empty() || listed.is_empty() || listed.split(", ").any(|c| c == name) {
            return Outcome::Other;
        }
        Outcome::MissingComponent
    } else if first.contains("LinuxCNC module") {
        // A LinuxCNC module rtapi hosts refused the line's arguments (issue 16).
        Outcome::ModuleRefused
    } else if first.contains("loadusr") {
        Outcome::Loadusr
    } else if first.contains("no pin named")
        || first.contains("no pin or param named")
        || first.contains("no signal named")
        || first.contains("no function named")
        || first.contains("no thread named")
    {
        // "no pin named 'pid.0.x'; pid.0 has: a, b": the missing name is not among those listed.
        let name = first.split('\'').nth(1).unwrap_or("");
        let leaf = name.rsplit_once('.').map_or(name, |(_, l)| l);
        if let Some((_, has)) = first.split_once(" has: ") {
            if name.is_empty() || has.split(", ").any(|n| n == leaf) {
                return Outcome::Other;
            }
        }
        Outcome::MissingPin
    } else if first.contains("is not a valid name") {
        Outcome::UnsupportedName
    } else if first.contains("needs an INI file") {
        Outcome::NoIni
    } else if first.contains("has no section [") || first.contains("has no key ") {
        Outcome::IniKeyMissing
    } else if first.contains("quote is not closed on this line") {
        // Invalid halcmd too: LinuxCNC 2.9's halcmd stops there with "unterminated quoted string".
        Outcome::InvalidSyntax
    } else {
        Outcome::Other
    }
}

fn check(hal: &Path, ini: Option<&Path>) -> (Outcome, String) {
    // `loadrt` of a component rtapi lacks runs LinuxCNC's module's rtapi_app_main, even in a check
    // (issue 16). As root, without CAP_SYS_RAWIO: a hardware driver of a sample config cannot reach
    // the test machine's I/O ports.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let setpriv = Path::new("/usr/bin/setpriv");
    let mut cmd = if root && setpriv.is_file() {
        let mut c = Command::new(setpriv);
        c.args(["--bounding-set", "-sys_rawio", "--"])
            .arg(env!("CARGO_BIN_EXE_rtapi"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_rtapi"))
    };
    cmd.arg("halrun").arg("--check");
    if let Some(ini) = ini {
        cmd.arg("-i").arg(ini);
    }
    // As LinuxCNC runs them: from the INI file's directory.
    cmd.arg("-f").arg(hal).current_dir(hal.parent().unwrap());
    let out = cmd.output().expect("run rtapi");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (classify(out.status.code(), &stderr, hal), stderr)
}

#[test]
fn every_sample_hal_file_loads_or_names_what_rtapi_lacks() {
    let root = Path::new(SAMPLES);
    if !root.is_dir() {
        panic!(
            "{SAMPLES} is missing: install LinuxCNC's sample configs (apt-get install linuxcnc-uspace) to run this test"
        );
    }
    let mut files = Vec::new();
    walk(root, &mut files);
    let hals: Vec<&PathBuf> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "hal"))
        .collect();
    let mut named_by: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for ini in files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ini"))
    {
        for h in halfiles(ini) {
            if let Ok(h) = h.canonicalize() {
                named_by.entry(h).or_default().push(ini.clone());
            }
        }
    }
    assert!(
        hals.len() > 300,
        "only {} .hal files under {SAMPLES}",
        hals.len()
    );
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut file_counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut runs = 0;
    for hal in &hals {
        let key = hal.canonicalize().unwrap();
        let inis: Vec<Option<&Path>> = match named_by.get(&key) {
            Some(inis) => inis.iter().map(|p| Some(p.as_path())).collect(),
            None => vec![None],
        };
        let mut best = Outcome::Other;
        let mut inis = inis;
        // A file no INI file names, that needs one: try each INI file of its directory.
        if inis == [None] && check(hal, None).0 == Outcome::NoIni {
            let dir = hal.parent().unwrap();
            let here: Vec<&PathBuf> = files
                .iter()
                .filter(|p| p.parent() == Some(dir) && p.extension().is_some_and(|e| e == "ini"))
                .collect();
            if !here.is_empty() {
                inis = here.iter().map(|p| Some(p.as_path())).collect();
            }
        }
        for ini in inis {
            let (outcome, stderr) = check(hal, ini);
            runs += 1;
            *counts.entry(outcome).or_default() += 1;
            if outcome == Outcome::Other {
                bad.push(format!(
                    "{} (ini {}):\n{}",
                    hal.display(),
                    ini.map_or("none".to_string(), |i| i.display().to_string()),
                    stderr.trim_end()
                ));
            }
            best = best.min(outcome);
        }
        *file_counts.entry(best).or_default() += 1;
    }
    let show = |c: &BTreeMap<Outcome, usize>| {
        format!(
            "loaded {}, stopped by a missing component {}, by a LinuxCNC module refusing its arguments {}, by a missing pin/signal/function/thread {}, by loadusr {}, by a name rtapi's HAL does not allow {}, needing an INI file none names {}, by a key its INI file lacks {}, by a quote left open (halcmd refuses it too) {}, other {}",
            c.get(&Outcome::Loaded).unwrap_or(&0),
            c.get(&Outcome::MissingComponent).unwrap_or(&0),
            c.get(&Outcome::ModuleRefused).unwrap_or(&0),
            c.get(&Outcome::MissingPin).unwrap_or(&0),
            c.get(&Outcome::Loadusr).unwrap_or(&0),
            c.get(&Outcome::UnsupportedName).unwrap_or(&0),
            c.get(&Outcome::NoIni).unwrap_or(&0),
            c.get(&Outcome::IniKeyMissing).unwrap_or(&0),
            c.get(&Outcome::InvalidSyntax).unwrap_or(&0),
            c.get(&Outcome::Other).unwrap_or(&0),
        )
    };
    eprintln!(
        "sample configs: {} .hal files, {runs} runs (file × INI naming it)\n  runs:  {}\n  files (best outcome over its INI files): {}",
        hals.len(),
        show(&counts),
        show(&file_counts)
    );
    let loaded = file_counts.get(&Outcome::Loaded).copied().unwrap_or(0);
    assert!(
        loaded >= LOADED_AT_LEAST,
        "only {loaded} sample .hal files load (at least {LOADED_AT_LEAST} did)"
    );
    assert!(
        bad.is_empty(),
        "{} run(s) ended in neither a load nor a file:line error naming what rtapi lacks:\n{}",
        bad.len(),
        bad.join("\n\n")
    );
}
