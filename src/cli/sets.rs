//! `rtapi sets SIGNAL VALUE [--force] [--instance NAME]`: sets a signal that no OUT pin drives.

use super::instance::{self, Force, Target};
use super::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// A signal without a writer, e.g. one that only feeds enable inputs.
    signal: String,
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
        r.sets_with(&args.signal, &args.value, opts)
    })
}
