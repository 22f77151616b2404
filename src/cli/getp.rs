//! `rtapi getp NAME [--instance NAME]`: prints the value of a pin, param or signal, as halcmd's getp
//! does (floats `%.7g`; `rtapi show --json` has the exact value).

use rtapi_hal::Access;

use super::instance::{self, Target};
use super::Failure;

#[derive(clap::Args)]
pub(super) struct Args {
    /// A pin, param or signal name, e.g. pid.0.Pgain.
    name: String,
    #[command(flatten)]
    target: Target,
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let reader = instance::open(&args.target, Access::ReadOnly)?;
    let value = reader
        .get(&args.name)
        .map_err(|e| instance::failure_in(&reader, e))?;
    super::out::println(&crate::render::value_text(value))?;
    Ok(())
}
