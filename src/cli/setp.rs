//! `rtapi setp NAME VALUE` (a param or an unconnected IN pin) and `rtapi sets SIGNAL VALUE` (a signal
//! that no OUT pin drives) on a running instance: one argument shape, one write path
//! ([`instance::write`]), two targets.

use super::instance::{self, Force, Target};
use super::Failure;

#[derive(clap::Args)]
pub(super) struct Args {
    /// setp: a param (e.g. stepgen.0.maxvel) or an unconnected input pin (e.g. pid.0.Pgain);
    /// sets: a signal without a writer (e.g. one that only feeds enable inputs).
    name: String,
    /// The new value: a number, or 0/1/true/false for a bit.
    #[arg(allow_hyphen_values = true)]
    value: String,
    #[command(flatten)]
    force: Force,
    #[command(flatten)]
    target: Target,
}

/// `setp`: a param or an unconnected IN pin.
pub(super) fn setp(args: Args) -> Result<(), Failure> {
    instance::write(&args.target, &args.force, |r, opts| {
        r.setp_with(&args.name, &args.value, opts)
    })
}

/// `sets`: a signal no OUT pin drives.
pub(super) fn sets(args: Args) -> Result<(), Failure> {
    instance::write(&args.target, &args.force, |r, opts| {
        r.sets_with(&args.name, &args.value, opts)
    })
}
