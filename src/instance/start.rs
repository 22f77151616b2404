//! The one start sequence of an instance built from a session: the dry run (a HAL that is never
//! built, so a bad configuration touches nothing), then the real runtime configured with the same
//! session, then its threads started. `rtapi run`, `rtapi halrun` and halcmd's `start` all use it.

use crate::components::Validation;
use crate::config::halcmd::{Apply, Backend, Session};
use crate::config::StartError;
use crate::runtime::{Configuring, Running, Runtime, RuntimeOptions};

/// The dry run, then the runtime configured with `options` and `session`'s HAL: built, not started.
pub fn build<H: Backend>(
    session: &Session<H>,
    options: RuntimeOptions,
) -> Result<Runtime<Configuring>, StartError> {
    build_with(&|target| session.apply_to(target), options)
}

/// [`build`], then the threads started.
pub fn start<H: Backend>(
    session: &Session<H>,
    options: RuntimeOptions,
) -> Result<Runtime<Running>, StartError> {
    start_with(&|target| session.apply_to(target), options)
}

/// [`build`] of what `apply` emits (a session's model).
pub(crate) fn build_with(
    apply: Apply<'_>,
    options: RuntimeOptions,
) -> Result<Runtime<Configuring>, StartError> {
    let mut dry =
        Validation::new(&options.instance).map_err(|e| StartError::Name(e.to_string()))?;
    apply(&mut dry).map_err(StartError::Config)?;
    let mut rt = Runtime::configure(options).map_err(StartError::Runtime)?;
    apply(&mut rt).map_err(StartError::Config)?;
    Ok(rt)
}

/// [`start`] of what `apply` emits.
pub(crate) fn start_with(
    apply: Apply<'_>,
    options: RuntimeOptions,
) -> Result<Runtime<Running>, StartError> {
    build_with(apply, options)?
        .start()
        .map_err(StartError::Runtime)
}
