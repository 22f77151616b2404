//! Opening a running instance's segment from the halcmd-style commands, with errors that say what to do,
//! and what `setp` and `sets` share.

use rtapi_hal::{Access, HalError, HalReader, Trust, Value, WriteOptions};

use super::Failure;

/// `--instance NAME` and `--trust-owner USER`, shared by every command that opens a running instance.
#[derive(clap::Args)]
pub struct Target {
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
pub struct Force {
    /// Write NaN or an infinity into a float too (refused otherwise).
    #[arg(long)]
    pub force: bool,
}

/// "dead (owner pid N gone; stale segment)", the state of a segment whose owner's lock is free.
pub fn dead_state(pid: u32) -> String {
    format!("dead (owner pid {pid} gone; stale segment)")
}

/// The trust rule with the `--trust-owner` users added (a user that does not exist: exit 2).
pub fn trust(owners: &[String]) -> Result<Trust, Failure> {
    let mut trust = Trust::new();
    for user in owners {
        trust = trust
            .also_user(user)
            .map_err(|e| Failure::usage(format!("--trust-owner: {e}")))?;
    }
    Ok(trust)
}

/// Opens `/rtapi-<instance>`. A missing instance is a runtime failure (exit 1) with the command that
/// would start one; an untrusted file is refused (exit 1) with what to do. A segment whose owner died is
/// opened anyway; a reader is warned (its values are the last ones written), a writer gets
/// [`HalError::OwnerGone`] when it writes.
pub fn open(target: &Target, access: Access) -> Result<HalReader, Failure> {
    open_telling_trust(target, access).map_err(|(f, _)| f)
}

/// [`open`], also telling whether a failure was the trust rule's refusal (for the Python module's
/// `rtapi.Untrusted`).
pub fn open_telling_trust(target: &Target, access: Access) -> Result<HalReader, (Failure, bool)> {
    let instance = &target.instance;
    let trust = trust(&target.trust_owner).map_err(|f| (f, false))?;
    let reader = HalReader::open_with(instance, access, &trust).map_err(|e| match e {
        HalError::NoSuchInstance { .. } => (Failure::runtime(no_such_instance(instance)), false),
        HalError::InvalidName { .. } => (Failure::usage(format!("--instance: {e}")), false),
        HalError::Untrusted { .. } => (Failure::runtime(e.to_string()), true),
        other => (Failure::runtime(other.to_string()), false),
    })?;
    if access == Access::ReadOnly && !reader.owner_alive() {
        super::out::eprintln(&format!(
            "rtapi: warning: instance '{instance}' is {}: these are its last values; `rtapi run` with \
             --instance {instance} reclaims it, or remove it (`rm /dev/shm/rtapi-{instance}`)",
            dead_state(reader.header().owner_pid)
        ));
    }
    Ok(reader)
}

/// The pid of the live process that owns `instance`, if one does (a stale segment has none).
pub fn live_owner(instance: &str) -> Option<u32> {
    HalReader::open(instance, Access::ReadOnly)
        .ok()
        .filter(HalReader::owner_alive)
        .map(|r| r.header().owner_pid)
}

/// The message for an instance with no segment: the ones that are running (by the suggestion rule
/// first if one is near the name), or how to start one.
pub fn no_such_instance(instance: &str) -> String {
    let running: Vec<String> = rtapi_hal::instance_names()
        .unwrap_or_default()
        .into_iter()
        .filter(|n| live_owner(n).is_some())
        .collect();
    let head = format!("no rtapi instance '{instance}' is running (no /dev/shm/rtapi-{instance})");
    if running.is_empty() {
        return format!(
            "{head}, nor any other; start one with `rtapi run CONFIG.toml --instance {instance}`"
        );
    }
    let near = crate::suggest::did_you_mean(instance, running.iter().map(String::as_str));
    format!(
        "{head}{}; running: {} (give one with --instance NAME)",
        near.map(|s| format!("; {s}")).unwrap_or_default(),
        running.join(", ")
    )
}

/// Maps an error about a name or a value (unknown pin, refused write, bad number) to exit 2, and
/// anything else (the segment itself, a dead owner) to exit 1.
pub fn failure(e: HalError) -> Failure {
    match e {
        HalError::NotFound { .. }
        | HalError::NotWritable { .. }
        | HalError::BadValue { .. }
        | HalError::NonFinite { .. } => Failure::usage(e.to_string()),
        other => Failure::runtime(other.to_string()),
    }
}

/// [`failure`], with the nearest names of the instance ([`crate::suggest`]) after an unknown one.
pub fn failure_in(reader: &HalReader, e: HalError) -> Failure {
    match unknown_name_text(reader, &e) {
        Some(text) => Failure::usage(text),
        None => failure(e),
    }
}

/// The message for an unknown name with the instance's nearest names after it, as every command
/// (and the Python module) says it: `no pin named 'pid.0.Pgian'; did you mean 'pid.0.Pgain'?`.
/// `None` for any other error, or when no name is near.
pub fn unknown_name_text(reader: &HalReader, e: &HalError) -> Option<String> {
    let HalError::NotFound { kind, name } = e else {
        return None;
    };
    let snap = reader.snapshot().ok()?;
    use rtapi_hal::ObjectKind as K;
    let pins = snap.pins.iter().map(|p| p.name.as_str());
    let params = snap.params.iter().map(|p| p.name.as_str());
    let signals = snap.signals.iter().map(|s| s.name.as_str());
    let known: Vec<&str> = match kind {
        K::Pin => pins.collect(),
        K::Param => params.collect(),
        K::Signal => signals.collect(),
        K::PinOrParam => pins.chain(params).collect(),
        K::Any => pins.chain(params).chain(signals).collect(),
        _ => return None,
    };
    crate::suggest::did_you_mean(name, known)
        .map(|hint| format!("no {kind} named '{name}'; {hint}"))
}

/// The body of `setp` and `sets`: open read-write, then `write` with the options.
pub fn write(
    target: &Target,
    force: &Force,
    write: impl FnOnce(&HalReader, WriteOptions) -> rtapi_hal::Result<Value>,
) -> Result<(), Failure> {
    let reader = open(target, Access::ReadWrite)?;
    write(&reader, WriteOptions { force: force.force }).map_err(|e| failure_in(&reader, e))?;
    Ok(())
}
