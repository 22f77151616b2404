//! Opening a running instance's segment from the halcmd-style commands, with errors that say what to do,
//! and what `setp` and `sets` share.

use rtapi_hal::{Access, HalError, HalReader, Trust, Value, WriteOptions};

use super::Failure;

/// `--instance NAME` and `--trust-owner USER`, shared by every command that opens a running instance.
#[derive(clap::Args)]
pub(super) struct Target {
    /// The rtapi instance (segment /rtapi-NAME).
    #[arg(long, default_value = rtapi_hal::DEFAULT_INSTANCE, value_name = "NAME")]
    pub instance: String,
    /// Also believe a segment owned by this user (name or uid). By default only segments owned by
    /// root or by yourself are opened, so another user cannot plant a forged instance.
    #[arg(long, value_name = "USER")]
    pub trust_owner: Vec<String>,
}

/// `--force` of `setp`/`sets`.
#[derive(clap::Args)]
pub(super) struct Force {
    /// Write NaN or an infinity into a float too (refused otherwise).
    #[arg(long)]
    pub force: bool,
}

pub(super) use crate::instance::open::{dead_state, live_owner, unknown_name_text};

/// The trust rule with the `--trust-owner` users added (a user that does not exist: exit 2).
pub(super) fn trust(owners: &[String]) -> Result<Trust, Failure> {
    crate::instance::trust(owners).map_err(Failure::from)
}

/// The CLI's exit code for an instance that could not be opened: a bad name or user is bad usage
/// (2); a missing, refused or broken segment is a runtime failure (1).
impl From<crate::instance::OpenError> for Failure {
    fn from(e: crate::instance::OpenError) -> Self {
        if e.is_usage() {
            Failure::usage(e.to_string())
        } else {
            Failure::runtime(e.to_string())
        }
    }
}

/// Opens `/rtapi-<instance>`. A missing instance is a runtime failure (exit 1) with the command that
/// would start one; an untrusted file is refused (exit 1) with what to do. A segment whose owner died is
/// opened anyway; a reader is warned (its values are the last ones written), a writer gets
/// [`HalError::OwnerGone`] when it writes.
pub(super) fn open(target: &Target, access: Access) -> Result<HalReader, Failure> {
    let instance = &target.instance;
    let reader = crate::instance::open(instance, access, &trust(&target.trust_owner)?)?;
    if access == Access::ReadOnly && !reader.owner_alive() {
        super::out::eprintln(&format!(
            "rtapi: warning: instance '{instance}' is {}: these are its last values; `rtapi run` with \
             --instance {instance} reclaims it, or remove it (`rm /dev/shm/rtapi-{instance}`)",
            dead_state(reader.header().owner_pid)
        ));
    }
    Ok(reader)
}

/// Maps an error about a name or a value (unknown pin, refused write, bad number) to exit 2, and
/// anything else (the segment itself, a dead owner) to exit 1.
pub(super) fn failure(e: HalError) -> Failure {
    match e {
        HalError::NotFound { .. }
        | HalError::NotWritable { .. }
        | HalError::BadValue { .. }
        | HalError::NonFinite { .. } => Failure::usage(e.to_string()),
        other => Failure::runtime(other.to_string()),
    }
}

/// [`failure`], with the nearest names of the instance ([`crate::suggest`]) after an unknown one.
pub(super) fn failure_in(reader: &HalReader, e: HalError) -> Failure {
    match unknown_name_text(reader, &e) {
        Some(text) => Failure::usage(text),
        None => failure(e),
    }
}

/// The body of `setp` and `sets`: open read-write, then `write` with the options.
pub(super) fn write(
    target: &Target,
    force: &Force,
    write: impl FnOnce(&HalReader, WriteOptions) -> rtapi_hal::Result<Value>,
) -> Result<(), Failure> {
    let reader = open(target, Access::ReadWrite)?;
    write(&reader, WriteOptions { force: force.force }).map_err(|e| failure_in(&reader, e))?;
    Ok(())
}
