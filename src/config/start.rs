//! Why an instance built from a session did not start (the start sequence itself is the instance
//! layer's: `instance::start`).

use super::ConfigError;
use crate::runtime::RuntimeError;

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
