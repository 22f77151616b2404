//! `rtapi detect [--json] [--sysroot DIR] [--flavor F]`

use super::{out, Failure};
use crate::detect::{LiveProbe, SystemReport};
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
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let root = super::sysroot(args.sysroot.as_deref())?;
    let report = SystemReport::detect(&root, &LiveProbe);
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
