//! `rtapi setp NAME VALUE [--force] [--instance NAME]`: sets a param or an unconnected IN pin of a running
//! instance.

use super::instance::{self, Force, Target};
use super::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// A param (e.g. stepgen.0.maxvel) or an unconnected input pin (e.g. pid.0.Pgain).
    name: String,
    /// The new value: a number, or 0/1/true/false for a bit.
    #[arg(allow_hyphen_values = true)]
    value: String,
    #[command(flatten)]
    force: Force,
    #[command(flatten)]
    target: Target,
}

pub fn run(args: Args) -> Result<(), Failure> {
    instance::write(&args.target, &args.force, |r, opts| {
        r.setp_with(&args.name, &args.value, opts)
    })
}
