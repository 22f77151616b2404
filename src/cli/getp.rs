//! `rtapi getp NAME [--instance NAME]`: prints the value of a pin, param or signal.

use rtapi_hal::Access;

use super::{instance, Failure};

#[derive(clap::Args)]
pub struct Args {
    /// A pin, param or signal name, e.g. pid.0.Pgain.
    name: String,
    /// The rtapi instance (segment /rtapi-NAME).
    #[arg(long, default_value = rtapi_hal::DEFAULT_INSTANCE, value_name = "NAME")]
    instance: String,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let reader = instance::open(&args.instance, Access::ReadOnly)?;
    let value = reader.get(&args.name).map_err(instance::failure)?;
    println!("{value}");
    Ok(())
}
