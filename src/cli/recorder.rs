//! `rtapi recorder dump [--instance NAME] [--out DIR]`: asks a running instance's flight recorder
//! (`[recorder]` in its machine TOML) to write a dump now, over the instance's control socket (same
//! trust rules as `rtapi halcmd`), and prints the files (the JSON first).

use std::path::PathBuf;

use super::instance::Target;
use super::Failure;
use crate::instance::control::ClientError;

#[derive(clap::Args)]
pub(super) struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Freeze the recorder now and write its dump (CSV, JSON, SVG).
    Dump {
        #[command(flatten)]
        target: Target,
        /// Write the dump here instead of the recorder's configured directory.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let Sub::Dump { target, out } = args.command;
    let (_reader, mut client) = super::halcmd::connect(&target)?;
    let out = out.map(|d| std::path::absolute(&d).unwrap_or(d));
    let reply = client
        .recorder_dump(out.as_deref())
        .map_err(|e: ClientError| Failure::runtime(e.to_string()))?;
    let _ = super::out::print(&reply.out);
    match reply.error {
        Some(e) if !reply.ok => Err(Failure::runtime(e)),
        _ => Ok(()),
    }
}
