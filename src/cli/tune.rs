//! `rtapi tune [--dry-run] [--cpu LIST] [--board ADDR [--only nic]] [--revert-file PATH] [--sysroot DIR]` and
//! `rtapi tune --revert [--force] [--revert-file PATH]`; `--persist` also installs the boot unit
//! (`tune::persist`), which `--revert` removes.

use super::{out, Failure};
use crate::detect::{ethtool, LiveProbe, SystemReport};
use crate::tune::{self, persist, Change};
use std::path::PathBuf;

use crate::tune::DEFAULT_REVERT_FILE;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Print the shell commands and the boot parameters; write nothing (no root needed).
    #[arg(long, conflicts_with_all = ["revert", "force"])]
    dry_run: bool,
    /// The RT CPUs to keep clear (default: detect's RT CPU and the isolated CPUs), e.g. 3 or 2-3.
    #[arg(long, value_name = "LIST", conflicts_with = "revert")]
    cpu: Option<String>,
    /// Put back every value an earlier `rtapi tune` recorded, last first; also removes the boot unit
    /// `--persist` installed.
    #[arg(long)]
    revert: bool,
    /// Also apply the same settings at every boot: installs and enables the systemd unit
    /// rtapi-tune.service, which runs this same command (these options) at boot. With --dry-run: shows
    /// the unit.
    #[arg(long, conflicts_with = "revert")]
    persist: bool,
    /// Where --persist writes the unit and --revert looks for it (an image's or a test's unit directory;
    /// systemd itself is told only for the default).
    #[arg(long, value_name = "DIR", default_value = persist::DEFAULT_UNIT_DIR, hide = true)]
    unit_dir: PathBuf,
    /// Run by the boot unit: with --revert, the values only (the unit stays installed).
    #[arg(long, hide = true, conflicts_with = "persist")]
    from_unit: bool,
    /// With --revert: also restore files whose value someone else changed since tune.
    #[arg(long, requires = "revert")]
    force: bool,
    /// Where the old values are recorded.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_REVERT_FILE)]
    revert_file: PathBuf,
    /// Also tune the NIC to the Mesa Ethernet card at ADDR (e.g. 10.10.10.10): interrupt coalescing
    /// off, energy-efficient Ethernet off, its IRQs off the RT CPUs; recorded for --revert like the rest.
    #[arg(long, value_name = "ADDR", conflicts_with = "revert")]
    board: Option<String>,
    /// Plan only this part: `nic` (with --board) tunes the NIC to the card and nothing machine-wide.
    #[arg(long, value_enum, value_name = "PART", requires = "board")]
    only: Option<OnlyArg>,
    /// Read and write proc/ and sys/ under DIR instead of / (fixture trees).
    #[arg(long, value_name = "DIR", conflicts_with = "revert")]
    sysroot: Option<PathBuf>,
}

/// The parts `--only` names.
#[derive(Clone, Copy, clap::ValueEnum)]
enum OnlyArg {
    /// The NIC to the card (`--board`): coalescing, EEE, its IRQs; nothing machine-wide.
    Nic,
}

const NEEDS_ROOT: &str = "rtapi tune needs root: run it with sudo (`rtapi tune --dry-run` shows what it would do without root)";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let cpus = args
        .cpu
        .as_deref()
        .map(|s| {
            crate::rt::cpulist::parse_checked(s).map_err(|e| Failure::usage(format!("--cpu: {e}")))
        })
        .transpose()?;
    let board = args
        .board
        .as_deref()
        .map(super::detect::board_address)
        .transpose()?;
    // Before anything is read or written: without root every write would fail.
    if !args.dry_run && !is_root() {
        return Err(Failure::usage(NEEDS_ROOT));
    }
    let revert_file = args.revert_file.display().to_string();
    if args.revert {
        let had_unit = remove_unit(&args)?;
        // The unit's stop at shutdown after a manual revert, or a revert that removed the unit:
        // nothing else to do.
        if (had_unit || args.from_unit) && !args.revert_file.exists() {
            return out::println(&format!(
                "rtapi tune --revert: no values to put back ({revert_file} does not exist)"
            ));
        }
        return revert(&args, &revert_file);
    }
    if !args.dry_run && args.revert_file.exists() {
        return Err(Failure::usage(
            tune::ApplyError::RevertFileExists(args.revert_file.clone()).to_string(),
        ));
    }
    let root = super::sysroot(args.sysroot.as_deref())?;
    let mut report = SystemReport::detect(&root, &LiveProbe);
    if let Some(addr) = board {
        report
            .detect_board(&root, &*ethtool::for_root(&root), addr)
            .map_err(|e| Failure::usage(format!("--board {addr}: {e}")))?;
    }
    let plan = tune::plan_board(
        &report,
        &root,
        cpus.as_deref(),
        args.only.map(|OnlyArg::Nic| tune::Only::Nic),
    )
    .map_err(|e| Failure::usage(e.to_string()))?;
    let unit = if args.persist {
        Some(unit_for(&args, board.is_some())?)
    } else {
        None
    };
    if args.dry_run {
        let mut text = plan.render(&revert_file);
        if args.revert_file.exists() {
            text.push_str(&format!(
                "\n# {revert_file} exists: `rtapi tune` would refuse until `rtapi tune --revert` has put the recorded values back\n"
            ));
        }
        if let Some(unit) = &unit {
            text.push_str(&format!(
                "\n# --persist writes {} and links it in {}:\n",
                persist::unit_path(&args.unit_dir).display(),
                persist::wants_link(&args.unit_dir)
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ));
            for line in unit.lines() {
                text.push_str(&format!("#   {line}\n"));
            }
        }
        return out::print(&text);
    }

    out::println(&format!(
        "rtapi tune: RT CPU {}, housekeeping CPU {}; old values recorded in {revert_file}",
        crate::rt::cpulist::format(&plan.rt_cpus),
        crate::rt::cpulist::format(&plan.housekeeping)
    ))?;
    let mut printing: Result<(), Failure> = Ok(());
    let mut progress = |c: &Change, r: Result<(), &str>| {
        let line = match r {
            Ok(()) if c.format.same(&c.current, &c.value) => {
                format!("  already {} = {}", c.path, c.value)
            }
            Ok(()) => format!(
                "  set {} {} -> {}   ({}{})",
                c.path,
                c.format
                    .normalize(&c.current)
                    .unwrap_or_else(|| c.current.clone()),
                c.value,
                c.why,
                c.cost
                    .as_deref()
                    .map(|l| format!("; loses {l}"))
                    .unwrap_or_default()
            ),
            Err(e) => format!("  FAILED {}: {e} (wanted {})", c.path, c.value),
        };
        if printing.is_ok() {
            printing = out::println(&line);
        }
    };
    let outcome =
        tune::apply(&root, &plan, &args.revert_file, &mut progress).map_err(|e| match e {
            tune::ApplyError::RevertFileExists(_) => Failure::usage(e.to_string()),
            tune::ApplyError::RevertFile(..) => Failure::runtime(e.to_string()),
        })?;
    printing?;
    for l in &outcome.nic_applied {
        out::println(&format!("  set {l}   (the NIC to the card)"))?;
    }
    for l in &outcome.nic_already {
        out::println(&format!("  already {l}"))?;
    }
    for l in &outcome.nic_refused {
        out::println(&format!("  not changed: {l}"))?;
    }
    if plan.changes.is_empty() && plan.nic.is_empty() {
        out::println("  nothing to change: every run-time setting is already right")?;
    }
    out::print(&plan.render_rest())?;
    if outcome.revert_file_kept {
        out::println(&format!(
            "\n{} value(s) changed; undo with: rtapi tune --revert{}",
            outcome.applied.len() + outcome.nic_applied.len(),
            if revert_file == DEFAULT_REVERT_FILE {
                String::new()
            } else {
                format!(" --revert-file {revert_file}")
            }
        ))?;
    }
    let not_persisted = if args.persist {
        "; --persist: no boot unit installed"
    } else {
        ""
    };
    if let Some(why) = outcome.stopped {
        return Err(Failure::runtime(format!("{why}{not_persisted}")));
    }
    if !outcome.failed.is_empty() {
        let list: Vec<String> = outcome
            .failed
            .iter()
            .map(|f| format!("{} ({})", f.path, f.error))
            .collect();
        return Err(Failure::runtime(format!(
            "{} of {} write(s) failed: {}; everything else is applied and recorded in {revert_file}{not_persisted}",
            outcome.failed.len(),
            plan.changes.len() + plan.nic.len(),
            list.join(", ")
        )));
    }
    if let Some(unit) = unit {
        install_unit(&args, &unit)?;
    }
    Ok(())
}

/// Whether a running systemd is told about the unit: only for the system's unit directory.
fn systemd_told(args: &Args) -> bool {
    args.unit_dir == std::path::Path::new(persist::DEFAULT_UNIT_DIR)
        && std::path::Path::new("/run/systemd/system").is_dir()
}

fn systemctl(words: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("systemctl")
        .args(words)
        .output()
        .map_err(|e| format!("systemctl {}: {e}", words.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "systemctl {}: {} {}",
        words.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// The boot unit for this command line: the same options (paths made absolute: a unit runs in `/`).
fn unit_for(args: &Args, network: bool) -> Result<String, Failure> {
    let absolute = |p: &std::path::Path| -> Result<String, Failure> {
        let p =
            std::path::absolute(p).map_err(|e| Failure::usage(format!("{}: {e}", p.display())))?;
        p.to_str().map(str::to_string).ok_or_else(|| {
            Failure::usage(format!(
                "{}: not UTF-8, which a unit file cannot hold",
                p.display()
            ))
        })
    };
    let mut start: Vec<String> = Vec::new();
    let mut stop: Vec<String> = Vec::new();
    if let Some(cpu) = &args.cpu {
        start.extend(["--cpu".to_string(), cpu.clone()]);
    }
    if let Some(board) = &args.board {
        start.extend(["--board".to_string(), board.clone()]);
    }
    if args.only.is_some() {
        start.extend(["--only".to_string(), "nic".to_string()]);
    }
    if let Some(root) = &args.sysroot {
        start.extend(["--sysroot".to_string(), absolute(root)?]);
    }
    if args.revert_file != std::path::Path::new(DEFAULT_REVERT_FILE) {
        let rf = ["--revert-file".to_string(), absolute(&args.revert_file)?];
        start.extend(rf.clone());
        stop.extend(rf);
    }
    if args.unit_dir != std::path::Path::new(persist::DEFAULT_UNIT_DIR) {
        // Where the unit is, for its stop (which must find and keep it); the default needs no word.
        stop.extend(["--unit-dir".to_string(), absolute(&args.unit_dir)?]);
    }
    let exe = std::env::current_exe()
        .map_err(|e| Failure::runtime(format!("--persist: where is this rtapi? {e}")))?;
    persist::unit_text(&exe, &start, &stop, network).map_err(|e| Failure::usage(e.to_string()))
}

fn install_unit(args: &Args, unit: &str) -> Result<(), Failure> {
    let path = persist::install(&args.unit_dir, unit).map_err(|e| {
        Failure::runtime(format!(
            "--persist: writing {}: {e}; the settings are applied now, but not at boot",
            persist::unit_path(&args.unit_dir).display()
        ))
    })?;
    out::println(&format!(
        "installed {} and enabled it ({}): every boot applies the same settings; `rtapi tune --revert` removes it",
        path.display(),
        persist::wants_link(&args.unit_dir).display()
    ))?;
    if systemd_told(args) {
        systemctl(&["daemon-reload"]).map_err(Failure::runtime)?;
    } else if args.unit_dir == std::path::Path::new(persist::DEFAULT_UNIT_DIR) {
        out::println(
            "  (systemd is not running here: the unit takes effect at the next boot under systemd)",
        )?;
    }
    Ok(())
}

/// `--revert`'s first part: the boot unit stopped (its stop reverts what it applied), disabled and
/// removed. `Ok(true)` when there was one.
fn remove_unit(args: &Args) -> Result<bool, Failure> {
    if args.from_unit || !persist::installed(&args.unit_dir) {
        return Ok(false);
    }
    let told = systemd_told(args);
    if told {
        if let Err(e) = systemctl(&["stop", persist::UNIT_NAME]) {
            out::println(&format!(
                "  stopping {}: {e}; its values are reverted below instead",
                persist::UNIT_NAME
            ))?;
        }
    }
    persist::remove(&args.unit_dir).map_err(|e| Failure::runtime(format!("--revert: {e}")))?;
    out::println(&format!(
        "removed {} and its link {}: nothing is applied at boot any more",
        persist::unit_path(&args.unit_dir).display(),
        persist::wants_link(&args.unit_dir).display()
    ))?;
    if told {
        systemctl(&["daemon-reload"]).map_err(Failure::runtime)?;
    }
    Ok(true)
}

fn revert(args: &Args, revert_file: &str) -> Result<(), Failure> {
    let outcome = tune::revert(&args.revert_file, args.force).map_err(|e| match e {
        tune::RevertError::Missing(_) => Failure::usage(e.to_string()),
        _ => Failure::runtime(e.to_string()),
    })?;
    for e in &outcome.restored {
        out::println(&format!(
            "  restored {} {} -> {}",
            e.path, e.written, e.before
        ))?;
    }
    for e in &outcome.already {
        out::println(&format!(
            "  already {} = {} (as before tune)",
            e.path, e.before
        ))?;
    }
    for l in &outcome.nic_restored {
        out::println(&format!("  restored {l}"))?;
    }
    for l in &outcome.nic_already {
        out::println(&format!("  already {l} (as before tune)"))?;
    }
    for s in &outcome.skipped {
        out::println(&format!(
            "  left alone {}: it is now {}, not the {} rtapi tune wrote, so someone else changed it (before tune it was {}; --force restores that)",
            s.entry.path, s.now, s.entry.written, s.entry.before
        ))?;
    }
    for f in &outcome.failed {
        out::println(&format!("  FAILED {}: {}", f.path, f.error))?;
    }
    if outcome.file_removed {
        out::println(&format!(
            "rtapi tune --revert: {} value(s) restored, {} already as before; {revert_file} removed",
            outcome.restored.len() + outcome.nic_restored.len(),
            outcome.already.len() + outcome.nic_already.len()
        ))?;
        return Ok(());
    }
    Err(Failure::runtime(format!(
        "{} value(s) not restored ({} changed by someone else, {} failed); they stay listed in {revert_file}",
        outcome.skipped.len() + outcome.failed.len(),
        outcome.skipped.len(),
        outcome.failed.len()
    )))
}
