//! The one start sequence of an instance built from a session: the dry run (a HAL that is never
//! built, so a bad configuration touches nothing), then the real runtime configured with the same
//! session, then its threads started. `rtapi run`, `rtapi halrun` and halcmd's `start` all use it.

use crate::components::Validation;
use crate::runtime::{Configuring, Running, Runtime, RuntimeError, RuntimeOptions};

use super::halcmd::Session;
use super::ConfigError;

/// Why an instance did not start.
#[derive(Debug)]
pub enum StartError {
    /// The instance name is not a valid one.
    Name(String),
    /// The configuration: a command the dry run or the real HAL refused.
    Config(ConfigError),
    /// The runtime: it could not be configured or started (flavor, segment, privileges, threads).
    Runtime(RuntimeError),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Name(m) => f.write_str(m),
            StartError::Config(e) => write!(f, "{e}"),
            StartError::Runtime(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// The dry run, then the runtime configured with `options` and `session`'s HAL: built, not started.
pub fn build(
    session: &Session,
    options: RuntimeOptions,
) -> Result<Runtime<Configuring>, StartError> {
    let mut dry =
        Validation::new(&options.instance).map_err(|e| StartError::Name(e.to_string()))?;
    session.apply_to(&mut dry).map_err(StartError::Config)?;
    let mut rt = Runtime::configure(options).map_err(StartError::Runtime)?;
    session.apply_to(&mut rt).map_err(StartError::Config)?;
    Ok(rt)
}

/// [`build`], then the threads started.
pub fn start(session: &Session, options: RuntimeOptions) -> Result<Runtime<Running>, StartError> {
    build(session, options)?
        .start()
        .map_err(StartError::Runtime)
}
