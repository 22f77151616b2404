//! `rtapi detect [--json] [--sysroot DIR] [--flavor F] [--board ADDR]`

use super::{out, Failure};
use crate::detect::{ethtool, LiveProbe, SystemReport};
use crate::flavor;
use std::path::PathBuf;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Print one JSON object instead of the readable report.
    #[arg(long)]
    json: bool,
    /// Read /proc, /sys and /boot under DIR instead of / (fixture trees; privileges are still probed live).
    #[arg(long, value_name = "DIR")]
    sysroot: Option<PathBuf>,
    /// Check that this flavor can run here (rt-preempt, posix, sim); overrides RTAPI_FLAVOR.
    #[arg(long, value_name = "F")]
    flavor: Option<String>,
    /// Also report the NIC to the Mesa Ethernet card at ADDR (IPv4, e.g. 10.10.10.10): its route,
    /// driver, link, interrupt coalescing, EEE and IRQs against the RT CPU.
    #[arg(long, value_name = "ADDR")]
    board: Option<String>,
}

/// The card's address from `--board`, or a usage error that says what is expected.
pub(super) fn board_address(text: &str) -> Result<std::net::Ipv4Addr, Failure> {
    text.trim().parse().map_err(|_| {
        Failure::usage(format!(
            "--board {text:?}: not an IPv4 address; give the Mesa card's address, e.g. --board 10.10.10.10 (a 7i96S/7i76E answers on 10.10.10.10 or 192.168.1.121 as its jumpers say)"
        ))
    })
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let board = args.board.as_deref().map(board_address).transpose()?;
    let root = super::sysroot(args.sysroot.as_deref())?;
    let mut report = SystemReport::detect(&root, &LiveProbe);
    if let Some(addr) = board {
        report
            .detect_board(&root, &*ethtool::for_root(&root), addr)
            .map_err(|e| Failure::usage(format!("--board {addr}: {e}")))?;
    }
    let env = std::env::var("RTAPI_FLAVOR").ok();
    let selection = flavor::select(&report, args.flavor.as_deref(), env.as_deref())?;
    let advice = report.advice();

    if args.json {
        let mut value =
            serde_json::to_value(&report).map_err(|e| Failure::runtime(e.to_string()))?;
        value["flavor"] = serde_json::json!(selection.flavor);
        value["flavor_source"] = serde_json::json!(selection.source);
        value["warnings"] = serde_json::json!(selection.warnings);
        value["advice"] = serde_json::json!(advice);
        out::println(
            &serde_json::to_string_pretty(&value).map_err(|e| Failure::runtime(e.to_string()))?,
        )?;
    } else {
        for w in &selection.warnings {
            out::eprintln(&format!("rtapi: warning: {w}"));
        }
        out::print(&report.render_text(selection.flavor.name(), &advice))?;
    }
    Ok(())
}
