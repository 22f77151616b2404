//! `rtapi sets SIGNAL VALUE [--instance NAME]`: sets a signal that no OUT pin drives.

use rtapi_hal::Access;

use super::{instance, Failure};

#[derive(clap::Args)]
pub struct Args {
    /// A signal without a writer, e.g. one that only feeds enable inputs.
    signal: String,
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
        .sets(&args.signal, &args.value)
        .map_err(instance::failure)?;
    Ok(())
}
