//! `rtapi tune [--dry-run] [--cpu LIST] [--board ADDR [--only nic]] [--revert-file PATH] [--sysroot DIR]` and
//! `rtapi tune --revert [--force] [--revert-file PATH]`

use super::{out, Failure};
use crate::detect::{ethtool, LiveProbe, SystemReport};
use crate::tune::{self, Change};
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
    /// Put back every value an earlier `rtapi tune` recorded, last first.
    #[arg(long)]
    revert: bool,
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
    if args.dry_run {
        let mut text = plan.render(&revert_file);
        if args.revert_file.exists() {
            text.push_str(&format!(
                "\n# {revert_file} exists: `rtapi tune` would refuse until `rtapi tune --revert` has put the recorded values back\n"
            ));
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
    if let Some(why) = outcome.stopped {
        return Err(Failure::runtime(why));
    }
    if !outcome.failed.is_empty() {
        let list: Vec<String> = outcome
            .failed
            .iter()
            .map(|f| format!("{} ({})", f.path, f.error))
            .collect();
        return Err(Failure::runtime(format!(
            "{} of {} write(s) failed: {}; everything else is applied and recorded in {revert_file}",
            outcome.failed.len(),
            plan.changes.len() + plan.nic.len(),
            list.join(", ")
        )));
    }
    Ok(())
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
