//! `rtapi tune` on this machine, as a user runs it: the dry run writes nothing, tune + revert leave
//! every file byte-for-byte as it was, an unprivileged user is refused before anything is written, a
//! value changed by someone else is left alone, a second tune refuses.
//!
//! These change the live kernel settings for a moment, so they run one at a time (a lock), each with
//! its revert file in a temporary directory, and a guard reverts (with --force) if a test fails halfway.

mod common;

use common::is_root;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static LIVE: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

use common::{rtapi_command as rtapi, run};

fn glob(dir: &str, keep: &dyn Fn(&str) -> bool, file: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                let e = e.ok()?;
                let name = e.file_name().into_string().ok()?;
                keep(&name).then(|| e.path().join(file))
            })
            .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Every file `rtapi tune` may write, with its bytes (`None` when it cannot be read).
fn snapshot() -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut files: Vec<PathBuf> = glob(
        "/proc/irq",
        &|n| n.bytes().all(|b| b.is_ascii_digit()),
        "smp_affinity_list",
    );
    for f in [
        "/proc/irq/default_smp_affinity",
        "/proc/sys/kernel/timer_migration",
        "/proc/sys/kernel/watchdog",
        "/proc/sys/kernel/nmi_watchdog",
        "/sys/devices/virtual/workqueue/cpumask",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ] {
        files.push(f.into());
    }
    let cpu = |n: &str| {
        n.strip_prefix("cpu")
            .is_some_and(|r| r.parse::<u32>().is_ok())
    };
    for c in glob("/sys/devices/system/cpu", &cpu, "") {
        files.push(c.join("cpufreq/scaling_governor"));
        for s in glob(
            &c.join("cpuidle").display().to_string(),
            &|n| n.starts_with("state"),
            "disable",
        ) {
            files.push(s);
        }
    }
    files
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).ok();
            (f, bytes)
        })
        .collect()
}

fn diff(
    a: &BTreeMap<PathBuf, Option<Vec<u8>>>,
    b: &BTreeMap<PathBuf, Option<Vec<u8>>>,
) -> Vec<String> {
    let show = |v: Option<&Option<Vec<u8>>>| match v {
        Some(Some(b)) => String::from_utf8_lossy(b).trim().to_string(),
        Some(None) => "<unreadable>".into(),
        None => "<absent>".into(),
    };
    let keys: std::collections::BTreeSet<&PathBuf> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("{}: {} -> {}", k.display(), show(a.get(k)), show(b.get(k))))
        .collect()
}

/// Reverts with --force when dropped while the revert file still exists (a test that failed halfway).
struct Undo(PathBuf);

impl Drop for Undo {
    fn drop(&mut self) {
        if self.0.exists() {
            let (code, out, err) = run(&mut rtapi(&[
                "tune",
                "--revert",
                "--force",
                "--revert-file",
                &self.0.display().to_string(),
            ]));
            eprintln!("cleanup revert: exit {code}\n{out}{err}");
        }
    }
}

fn revert_file(dir: &Path) -> (PathBuf, String) {
    let p = dir.join("run/tune-revert.json");
    let s = p.display().to_string();
    (p, s)
}

/// `tuning.rt_cpus` and `cpus.online` from `rtapi detect --json`.
fn rt_and_online() -> (Vec<usize>, Vec<usize>) {
    let (code, out, err) = run(&mut rtapi(&["detect", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let list = |v: &serde_json::Value| -> Vec<usize> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap() as usize)
            .collect()
    };
    (list(&v["tuning"]["rt_cpus"]), list(&v["cpus"]["online"]))
}

fn parse_list(s: &str) -> Vec<usize> {
    s.trim()
        .split(',')
        .filter(|p| !p.is_empty())
        .flat_map(|r| match r.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![r.parse().unwrap()],
        })
        .collect()
}

fn format_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[test]
fn dry_run_prints_the_commands_and_the_boot_line_and_writes_nothing() {
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let (rf, rf_s) = revert_file(dir.path());
    let (rt, online) = rt_and_online();
    let housekeeping: Vec<usize> = online.iter().copied().filter(|c| !rt.contains(c)).collect();
    let before = snapshot();
    let (code, out, err) = run(&mut rtapi(&["tune", "--dry-run", "--revert-file", &rf_s]));
    assert_eq!(code, 0, "{err}");
    let after = snapshot();
    assert!(
        diff(&before, &after).is_empty(),
        "{:?}",
        diff(&before, &after)
    );
    assert!(!rf.exists(), "a dry run created the revert file");
    assert!(
        out.contains(&format!("# rtapi tune for RT CPU {}", format_list(&rt))),
        "{out}"
    );

    // Every IRQ whose affinity includes an RT CPU, found here, and whether the kernel lets it move
    // found by trying (its affinity written back unchanged): a movable one is moved to its other
    // CPUs; one the kernel refuses to move is never written, and the plan says why.
    let (mut moved, mut refused) = (0, 0);
    let mut managed_named = false;
    if is_root() {
        for line in common::proc_interrupts().expect("/proc/interrupts") {
            let n = line.irq;
            let Some(aff) = common::irq_cpus(n, "smp_affinity_list") else {
                continue;
            };
            if !aff.iter().any(|c| rt.contains(c)) {
                continue;
            }
            let file = format!("/proc/irq/{n}/smp_affinity_list");
            let read_before = before
                .get(&PathBuf::from(&file))
                .and_then(|b| b.as_deref())
                .and_then(|b| common::parse_cpu_list(&String::from_utf8_lossy(b)));
            if read_before.as_ref() != Some(&aff) {
                continue; // moved by someone else while the dry run read it
            }
            match common::affinity_write_refused(n) {
                Some(false) => {
                    moved += 1;
                    let mut off: Vec<usize> =
                        aff.iter().copied().filter(|c| !rt.contains(c)).collect();
                    if off.is_empty() {
                        off = housekeeping.clone();
                    }
                    let line = format!("echo {} > {file}", format_list(&off));
                    assert!(out.contains(&line), "no `{line}` in\n{out}");
                }
                Some(true) => {
                    refused += 1;
                    assert!(!out.contains(&file), "IRQ {n} cannot be moved:\n{out}");
                    let said = out
                        .lines()
                        .find(|l| l.contains(&format!("IRQ {n} ")) && l.contains(&line.last_word))
                        .unwrap_or_else(|| {
                            panic!("IRQ {n} ({}) is not named in\n{out}", line.rest)
                        });
                    assert!(
                        said.contains("kernel-managed") || said.contains("refuses to move it"),
                        "{said}"
                    );
                    managed_named |= said.contains("kernel-managed");
                }
                None => {}
            }
        }
    }
    // A managed IRQ on the RT CPUs is a boot parameter.
    if managed_named {
        let boot = out
            .lines()
            .skip_while(|l| !l.starts_with("# add to GRUB_CMDLINE_LINUX"))
            .nth(1)
            .unwrap_or_else(|| panic!("no boot line in\n{out}"));
        assert!(
            boot.split_whitespace()
                .any(|w| w == format!("isolcpus=managed_irq,domain,{}", format_list(&rt))),
            "{boot}"
        );
    }
    // Every sysctl printed is in its `sysctl -w` form, and each one's current value is not the target.
    for line in out.lines().filter(|l| l.starts_with("sysctl -w kernel.")) {
        let (key, value) = line["sysctl -w kernel.".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('=')
            .unwrap();
        let now = std::fs::read_to_string(format!("/proc/sys/kernel/{key}")).unwrap();
        assert_ne!(now.trim(), value, "{line}");
    }
    if !is_root() {
        return skip!(
            Ci,
            "the IRQ lines are not checked: finding which IRQs move by trying needs root"
        );
    }
    eprintln!("IRQs with an RT CPU in their affinity: {moved} movable (moved), {refused} refused");
    if moved == 0 {
        skip!(
            Machine,
            "no movable IRQ has an RT CPU {rt:?} in its affinity here"
        );
    }
    if refused == 0 {
        skip!(
            Machine,
            "no IRQ the kernel refuses to move has an RT CPU {rt:?} in its affinity here"
        );
    }
}

#[test]
fn tune_then_revert_leaves_every_file_as_it_was() {
    if !is_root() {
        return skip!(
            Ci,
            "tune writes kernel settings; only root can run this test"
        );
    }
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let (rf, rf_s) = revert_file(dir.path());
    let _undo = Undo(rf.clone());
    let before = snapshot();
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert-file", &rf_s]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("undo with: rtapi tune --revert --revert-file"),
        "{out}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rf).expect("a revert file")).unwrap();
    let entries = record["entries"].as_array().unwrap();
    assert!(!entries.is_empty(), "tune changed nothing here:\n{out}");
    let tuned = snapshot();
    for e in entries {
        let path = PathBuf::from(e["path"].as_str().unwrap());
        assert!(
            before.contains_key(&path),
            "{} was written but is not in the test's snapshot",
            path.display()
        );
        assert_eq!(e["applied"], true, "{e}");
        assert!(out.contains(&format!("set {}", path.display())), "{out}");
        // Each recorded file did change (a test that compares unchanged files proves nothing).
        assert_ne!(before[&path], tuned[&path], "{}", path.display());
    }
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert", "--revert-file", &rf_s]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{} value(s) restored", entries.len())),
        "{out}"
    );
    assert!(!rf.exists());
    let after = snapshot();
    assert!(
        diff(&before, &after).is_empty(),
        "{:?}",
        diff(&before, &after)
    );
}

#[test]
fn an_unprivileged_user_is_refused_before_anything_is_written() {
    if !is_root() {
        return skip!(
            Ci,
            "only root can start a child as the unprivileged user 'nobody'"
        );
    }
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let (rf, rf_s) = revert_file(dir.path());
    let before = snapshot();
    for args in [
        vec!["tune", "--revert-file", &rf_s],
        vec!["tune", "--revert", "--revert-file", &rf_s],
    ] {
        let mut c = rtapi(&args);
        // std drops the supplementary groups when root sets the uid.
        c.uid(65534).gid(65534);
        let (code, out, err) = run(&mut c);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            err.contains("rtapi tune needs root: run it with sudo"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{out}");
    }
    assert!(!rf.exists() && !rf.parent().unwrap().exists());
    assert!(diff(&before, &snapshot()).is_empty());
    // The dry run needs no root.
    let mut c = rtapi(&["tune", "--dry-run", "--revert-file", &rf_s]);
    // std drops the supplementary groups when root sets the uid.
    c.uid(65534).gid(65534);
    let (code, out, err) = run(&mut c);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("# rtapi tune for RT CPU"), "{out}");
}

#[test]
fn revert_leaves_a_value_someone_else_changed_and_says_so() {
    if !is_root() {
        return skip!(
            Ci,
            "tune writes kernel settings; only root can run this test"
        );
    }
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let (rf, rf_s) = revert_file(dir.path());
    let _undo = Undo(rf.clone());
    let before = snapshot();
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert-file", &rf_s]));
    assert_eq!(code, 0, "{out}{err}");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&rf).unwrap()).unwrap();
    // A third party moves an IRQ tune moved to a CPU of its own choosing: one of the CPUs tune took
    // it off.
    let (path, theirs) = record["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| {
            let path = e["path"].as_str()?;
            if !path.ends_with("smp_affinity_list") {
                return None;
            }
            let written = parse_list(e["written"].as_str()?);
            let taken: Vec<usize> = parse_list(e["before"].as_str()?)
                .into_iter()
                .filter(|c| !written.contains(c))
                .collect();
            (!taken.is_empty()).then(|| (path.to_string(), format_list(&taken)))
        })
        .expect("tune moved no IRQ here");
    std::fs::write(&path, format!("{theirs}\n")).unwrap();
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert", "--revert-file", &rf_s]));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("left alone {path}: it is now {theirs}, not the")),
        "{out}"
    );
    assert!(out.contains("someone else changed it"), "{out}");
    assert!(
        err.contains("1 value(s) not restored (1 changed by someone else"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), theirs);
    assert!(rf.exists(), "the value not restored must stay recorded");
    // Everything else is back.
    let mid = snapshot();
    let changed = diff(&before, &mid);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with(&path), "{changed:?}");
    // --force puts back the value from before tune.
    let (code, out, err) = run(&mut rtapi(&[
        "tune",
        "--revert",
        "--force",
        "--revert-file",
        &rf_s,
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!rf.exists());
    assert!(diff(&before, &snapshot()).is_empty());
}

#[test]
fn a_second_tune_refuses_while_a_revert_file_exists() {
    if !is_root() {
        return skip!(
            Ci,
            "tune writes kernel settings; only root can run this test"
        );
    }
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let (rf, rf_s) = revert_file(dir.path());
    let _undo = Undo(rf.clone());
    let before = snapshot();
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert-file", &rf_s]));
    assert_eq!(code, 0, "{out}{err}");
    let recorded = std::fs::read(&rf).unwrap();
    let tuned = snapshot();
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert-file", &rf_s]));
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("exists")
            && err.contains(&format!("rtapi tune --revert --revert-file {rf_s}")),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&rf).unwrap(),
        recorded,
        "the original values were touched"
    );
    assert!(diff(&tuned, &snapshot()).is_empty());
    let (dry_code, dry, _) = run(&mut rtapi(&["tune", "--dry-run", "--revert-file", &rf_s]));
    assert_eq!(dry_code, 0);
    assert!(
        dry.contains("would refuse until `rtapi tune --revert`"),
        "{dry}"
    );
    let (code, out, err) = run(&mut rtapi(&["tune", "--revert", "--revert-file", &rf_s]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(diff(&before, &snapshot()).is_empty());
}

#[test]
fn bad_cpu_lists_and_a_missing_revert_file_are_usage_errors() {
    let (_, online) = rt_and_online();
    let beyond = (online.iter().max().unwrap() + 1).to_string();
    let all = format_list(&online);
    for (cpu, says) in [
        ("x", "--cpu: CPU list"),
        (beyond.as_str(), "is not online"),
        (all.as_str(), "every online CPU"),
    ] {
        let (code, out, err) = run(&mut rtapi(&["tune", "--dry-run", "--cpu", cpu]));
        assert_eq!(code, 2, "{cpu}: {out}{err}");
        assert!(err.contains(says), "{cpu}: {err}");
        assert!(out.is_empty(), "{out}");
    }
    if !is_root() {
        return skip!(
            Ci,
            "a missing revert file is not checked: --revert needs root"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let rf = dir.path().join("none.json").display().to_string();
    let (code, _, err) = run(&mut rtapi(&["tune", "--revert", "--revert-file", &rf]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing to revert"), "{err}");
}

/// The words of a unit's `KEY=` line as systemd reads them: double quotes group, a backslash escapes
/// the next character inside them, `%%` is `%` and `$$` is `$`.
fn unit_command(unit: &str, key: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in\n{unit}"));
    let line = line.replace("%%", "%").replace("$$", "$");
    let mut words = Vec::new();
    let mut chars = line.chars();
    let mut word: Option<String> = None;
    while let Some(c) = chars.next() {
        match c {
            ' ' => words.extend(word.take()),
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') | None => break,
                        Some('\\') => w.extend(chars.next()),
                        Some(c) => w.push(c),
                    }
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The (path, value written) pairs of a revert file: the plan that was applied.
fn applied(rf: &Path) -> Vec<(String, String)> {
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(rf).expect("a revert file")).unwrap();
    record["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["written"].to_string(),
            )
        })
        .collect()
}

#[test]
fn persist_installs_a_boot_unit_that_applies_the_same_plan_and_revert_removes_it() {
    if !is_root() {
        return skip!(
            Ci,
            "tune writes kernel settings; only root can run this test"
        );
    }
    let (rt, online) = rt_and_online();
    // A CPU other than detect's default, so that a unit which lost `--cpu` would plan differently.
    let Some(cpu) = online.iter().copied().find(|c| !rt.contains(c)) else {
        return skip!(Machine, "one CPU only: no choice of RT CPU to persist");
    };
    if online.len() < 2 {
        return skip!(Machine, "one CPU only");
    }
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let (rf, rf_s) = revert_file(dir.path());
    let _undo = Undo(rf.clone());
    let units = dir.path().join("systemd");
    let units_s = units.display().to_string();
    let unit_file = units.join("rtapi-tune.service");
    let link = units.join("multi-user.target.wants/rtapi-tune.service");
    let before = snapshot();

    // The dry run shows the unit and writes nothing.
    let cpu_s = cpu.to_string();
    let tune_args = [
        "--cpu",
        &cpu_s,
        "--revert-file",
        &rf_s,
        "--unit-dir",
        &units_s,
    ];
    let mut dry = vec!["tune", "--persist", "--dry-run"];
    dry.extend(tune_args);
    let (code, out, err) = run(&mut rtapi(&dry));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("#   ExecStart="), "{out}");
    assert!(!unit_file.exists() && !rf.exists());

    // --persist applies now and installs the unit, enabled.
    let mut persist = vec!["tune", "--persist"];
    persist.extend(tune_args);
    let (code, out, err) = run(&mut rtapi(&persist));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("installed {}", unit_file.display())),
        "{out}"
    );
    assert_eq!(std::fs::read_link(&link).unwrap(), unit_file);
    let now = applied(&rf);
    assert!(!now.is_empty(), "tune changed nothing here:\n{out}");
    let unit = std::fs::read_to_string(&unit_file).unwrap();

    // systemd reads it as it is meant (the executable exists, every key is known).
    match std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit_file)
        .output()
    {
        Ok(o) => assert!(
            o.status.success(),
            "systemd-analyze verify: {}{}\n{unit}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => skip!(Ci, "systemd-analyze: {e}: the unit's syntax is not checked"),
    }

    // A reboot, by hand: the unit's stop puts the values back and keeps the unit; its start at the
    // next boot applies the same plan.
    let stop = unit_command(&unit, "ExecStop=");
    let (code, out, err) = run(std::process::Command::new(&stop[0]).args(&stop[1..]));
    assert_eq!(code, 0, "{stop:?}: {out}{err}");
    assert!(
        diff(&before, &snapshot()).is_empty(),
        "{:?}",
        diff(&before, &snapshot())
    );
    assert!(
        unit_file.exists() && link.exists(),
        "the stop removed the unit"
    );
    let start = unit_command(&unit, "ExecStart=");
    let (code, out, err) = run(std::process::Command::new(&start[0]).args(&start[1..]));
    assert_eq!(code, 0, "{start:?}: {out}{err}");
    assert_eq!(applied(&rf), now, "the boot applied another plan");

    // --revert puts the values back and removes the unit.
    let (code, out, err) = run(&mut rtapi(&[
        "tune",
        "--revert",
        "--revert-file",
        &rf_s,
        "--unit-dir",
        &units_s,
    ]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("removed {}", unit_file.display())),
        "{out}"
    );
    assert!(!unit_file.exists() && std::fs::symlink_metadata(&link).is_err());
    assert!(!rf.exists());
    assert!(
        diff(&before, &snapshot()).is_empty(),
        "{:?}",
        diff(&before, &snapshot())
    );
}
