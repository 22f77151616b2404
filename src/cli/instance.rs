//! Opening a running instance's segment from the halcmd-style commands, with errors that say what to do.

use rtapi_hal::{Access, HalError, HalReader};

use super::Failure;

/// Opens `/rtapi-<instance>`. A missing instance is a runtime failure (exit 1) with the command that
/// would start one; a segment whose owner died is opened anyway with a warning (its values are the
/// last ones written).
pub fn open(instance: &str, access: Access) -> Result<HalReader, Failure> {
    let reader = HalReader::open(instance, access).map_err(|e| match e {
        HalError::NoSuchInstance { .. } => Failure::runtime(format!(
            "no rtapi instance '{instance}' is running (no /dev/shm/rtapi-{instance}); start one with \
             `rtapi run CONFIG.toml --instance {instance}`"
        )),
        HalError::InvalidName { .. } => Failure::usage(format!("--instance: {e}")),
        other => Failure::runtime(other.to_string()),
    })?;
    if !reader.owner_alive() {
        eprintln!(
            "rtapi: warning: instance '{instance}' is not running (owner pid {} is gone); these are its last values",
            reader.header().owner_pid
        );
    }
    Ok(reader)
}

/// Maps an error about a name or a value (unknown pin, refused write, bad number) to exit 2, and
/// anything else (the segment itself) to exit 1.
pub fn failure(e: HalError) -> Failure {
    match e {
        HalError::NotFound { .. } | HalError::NotWritable { .. } | HalError::BadValue { .. } => {
            Failure::usage(e.to_string())
        }
        other => Failure::runtime(other.to_string()),
    }
}
