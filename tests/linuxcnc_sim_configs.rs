//! The survey of LinuxCNC's sim configs (issue 24's README table: config, stock, rtapi): every
//! `.ini` under `sample-configs/sim/` is brought up with its display replaced by `drive.py` in
//! "up only" mode — `linuxcnc.stat()` answers, estop reset, machine on — then it exits; the rest of
//! the config (its HAL files, its X clients under a private Xvfb) is as shipped.
//! `[HAL]POSTGUI_HALFILE` is not run (only a GUI runs it, after building its panel).
//!
//! Ignored: it runs ~220 LinuxCNC sessions one after the other (about 15 minutes). Each test writes
//! its column as `config<TAB>result<TAB>reason` lines to `target/lcnc-sim-configs-<launcher>.tsv` and
//! prints the table; the rtapi one also prints the two columns side by side when the stock file is
//! there. `LCNC_SURVEY_ONLY=<substring>` limits the survey to the configs whose path contains it,
//! `LCNC_SURVEY_LIST=<file>` to the configs listed in the file (one path a line, as in the table);
//! the `.tsv` then has only those. `LCNC_SURVEY_TAG=<tag>` names the files `…-<launcher>-<tag>.tsv`
//! (tests/linuxcnc_releases.rs runs the survey inside reference roots of other releases).

mod common;
use common::lcnc_machine;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lcnc_machine::{run, Launcher, Machine, EXAMPLES, SIM};

/// Every `.ini` under the sim configs, relative to the examples tree, sorted.
fn sim_inis() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "ini") {
                out.push(p);
            }
        }
    }
    let root = Path::new(EXAMPLES);
    let mut out = Vec::new();
    walk(&root.join(SIM), &mut out);
    let only = std::env::var("LCNC_SURVEY_ONLY").unwrap_or_default();
    let list: Option<Vec<String>> = std::env::var("LCNC_SURVEY_LIST")
        .ok()
        .map(|f| std::fs::read_to_string(f).expect("LCNC_SURVEY_LIST file"))
        .map(|t| {
            t.lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        });
    let mut v: Vec<String> = out
        .iter()
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .filter(|p| p.contains(&only))
        .filter(|p| list.as_ref().is_none_or(|l| l.contains(p)))
        .collect();
    v.sort();
    v
}

/// One row per config: (config, passed, reason or the time it took).
fn survey(launcher: &Launcher, label: &str) -> Vec<(String, bool, String)> {
    let inis = sim_inis();
    assert!(!inis.is_empty(), "no .ini under {EXAMPLES}/{SIM}");
    let mut rows = Vec::new();
    let t0 = Instant::now();
    for (i, ini) in inis.iter().enumerate() {
        let mut m = Machine::up_only(&format!("survey-{label}-{i}"), ini);
        m.stage_seconds = 20.0;
        let t = Instant::now();
        let row = match run(launcher, &m) {
            Ok(r) if r.ended_after.is_empty() => {
                (ini.clone(), true, format!("up in {:.1} s", r.seconds))
            }
            Ok(r) => (
                ini.clone(),
                true,
                format!(
                    "up in {:.1} s; left running after exit: {}",
                    r.seconds,
                    r.ended_after.join(", ")
                ),
            ),
            Err(e) => (ini.clone(), false, e.reason()),
        };
        eprintln!(
            "[{:4.0} s] {}/{} {}: {} ({:.1} s with the lock wait) {}",
            t0.elapsed().as_secs_f64(),
            i + 1,
            inis.len(),
            row.0,
            if row.1 { "PASS" } else { "FAIL" },
            t.elapsed().as_secs_f64(),
            if row.1 { "" } else { &row.2 }
        );
        rows.push(row);
    }
    let tsv: String = rows
        .iter()
        .map(|(c, ok, why)| {
            format!(
                "{c}\t{}\t{}\n",
                if *ok { "pass" } else { "fail" },
                why.replace('\t', " ")
            )
        })
        .collect();
    let out = tsv_path(label);
    std::fs::write(&out, tsv).unwrap();
    let pass = rows.iter().filter(|r| r.1).count();
    eprintln!(
        "{launcher}: {pass} of {} sim configs come up ({:.0} s); table in {}",
        rows.len(),
        t0.elapsed().as_secs_f64(),
        out.display()
    );
    rows
}

/// `target/lcnc-sim-configs-<label>.tsv`, or `…-<label>-<tag>.tsv` with `LCNC_SURVEY_TAG=<tag>` (a
/// survey inside a reference root of another release: tests/linuxcnc_releases.rs).
fn tsv_path(label: &str) -> PathBuf {
    let tag = std::env::var("LCNC_SURVEY_TAG")
        .map(|t| format!("-{t}"))
        .unwrap_or_default();
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("target/lcnc-sim-configs-{label}{tag}.tsv"))
}

fn read_tsv(label: &str) -> Option<Vec<(String, String, String)>> {
    let text = std::fs::read_to_string(tsv_path(label)).ok()?;
    Some(
        text.lines()
            .filter_map(|l| {
                let mut w = l.splitn(3, '\t');
                Some((
                    w.next()?.into(),
                    w.next()?.into(),
                    w.next().unwrap_or("").into(),
                ))
            })
            .collect(),
    )
}

#[test]
#[ignore = "runs every sim config of LinuxCNC (about 15 minutes)"]
fn sim_configs_on_stock_linuxcnc() {
    if !lcnc_machine::ready("linuxcnc_sim_configs") {
        return;
    }
    let rows = survey(&Launcher::Stock, "stock");
    // The reference works: the config issue 24 names comes up on stock.
    let axis = rows.iter().find(|r| r.0.ends_with("sim/axis/axis.ini"));
    assert!(
        axis.is_none_or(|r| r.1),
        "sim/axis/axis.ini does not come up on stock: {axis:?}"
    );
}

#[test]
#[ignore = "runs every sim config on rtapi linuxcnc (about 25 minutes)"]
fn sim_configs_on_rtapi_linuxcnc() {
    if !lcnc_machine::ready("linuxcnc_sim_configs") {
        return;
    }
    let rows = survey(
        &Launcher::Rtapi(env!("CARGO_BIN_EXE_rtapi").into()),
        "rtapi",
    );
    let Some(stock) = read_tsv("stock") else {
        eprintln!(
            "(no {}: run sim_configs_on_stock_linuxcnc for the stock column)",
            tsv_path("stock").display()
        );
        return;
    };
    let mut table = String::from("| config | stock | rtapi |\n|---|---|---|\n");
    let mut worse = Vec::new();
    for (c, ok, why) in &rows {
        let s = stock.iter().find(|r| &r.0 == c);
        let s_ok = s.map(|r| r.1 == "pass");
        let cell = |ok: bool, why: &str| {
            if ok {
                "pass".to_string()
            } else {
                format!("fail: {why}")
            }
        };
        let _ = writeln!(
            table,
            "| {} | {} | {} |",
            c.trim_start_matches("sample-configs/sim/"),
            s.map(|r| cell(r.1 == "pass", &r.2))
                .unwrap_or_else(|| "not run".into()),
            cell(*ok, why)
        );
        if s_ok == Some(true) && !ok {
            worse.push(c.clone());
        }
    }
    eprintln!("{table}");
    assert!(
        worse.is_empty(),
        "configs that come up on stock but not on rtapi: {worse:?}"
    );
}
