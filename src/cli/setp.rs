//! `rtapi setp NAME VALUE [--instance NAME]`: sets a param or an unconnected IN pin of a running instance.

use rtapi_hal::Access;

use super::{instance, Failure};

#[derive(clap::Args)]
pub struct Args {
    /// A param (e.g. stepgen.0.maxvel) or an unconnected input pin (e.g. pid.0.Pgain).
    name: String,
    /// The new value: a number, or 0/1/true/false for a bit.
    #[arg(allow_hyphen_values = true)]
    value: String,
    /// The rtapi instance (segment /rtapi-NAME).
    #[arg(long, default_value = rtapi_hal::DEFAULT_INSTANCE, value_name = "NAME")]
    instance: String,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let reader = instance::open(&args.instance, Access::ReadWrite)?;
    reader
        .setp(&args.name, &args.value)
        .map_err(instance::failure)?;
    Ok(())
}
