//! Opening a running instance's segment under the trust rule, with errors that say what to do; the
//! nearest names after an unknown one.

use rtapi_hal::{Access, HalError, HalReader, Trust};

/// Why an instance could not be opened. Its text is what every front end prints (the CLI after
/// `rtapi: `, the Python module in its exception).
#[derive(Debug)]
pub enum OpenError {
    /// No segment by that name: the text names the running ones, or how to start one.
    NoSuchInstance {
        /// The name asked for.
        instance: String,
        /// What to say about it ([`no_such_instance`]).
        message: String,
    },
    /// The name is no valid instance name.
    BadName(HalError),
    /// A `--trust-owner` user that does not exist.
    BadTrustOwner(String),
    /// The trust rule refused the segment (symlink, another owner, loose mode).
    Untrusted(HalError),
    /// Anything else about the segment (foreign or corrupt layout, mapping failed).
    Segment(HalError),
}

impl OpenError {
    /// Whether the fault is in what was asked (a name, a user) rather than in the machine's state.
    pub fn is_usage(&self) -> bool {
        matches!(self, OpenError::BadName(_) | OpenError::BadTrustOwner(_))
    }
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NoSuchInstance { message, .. } => f.write_str(message),
            OpenError::BadName(e) => write!(f, "--instance: {e}"),
            OpenError::BadTrustOwner(e) => write!(f, "--trust-owner: {e}"),
            OpenError::Untrusted(e) | OpenError::Segment(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// The trust rule with the `owners` users (names or uids) added.
pub fn trust(owners: &[String]) -> Result<Trust, OpenError> {
    let mut trust = Trust::new();
    for user in owners {
        trust = trust
            .also_user(user)
            .map_err(|e| OpenError::BadTrustOwner(e.to_string()))?;
    }
    Ok(trust)
}

/// Opens `/rtapi-<instance>`, believing it under `trust`. A segment whose owner died is opened all
/// the same ([`HalReader::owner_alive`] tells; a writer gets [`HalError::OwnerGone`] when it writes).
pub fn open(instance: &str, access: Access, trust: &Trust) -> Result<HalReader, OpenError> {
    HalReader::open_with(instance, access, trust).map_err(|e| match e {
        HalError::NoSuchInstance { .. } => OpenError::NoSuchInstance {
            instance: instance.to_string(),
            message: no_such_instance(instance),
        },
        HalError::InvalidName { .. } => OpenError::BadName(e),
        HalError::Untrusted { .. } => OpenError::Untrusted(e),
        other => OpenError::Segment(other),
    })
}

/// "dead (owner pid N gone; stale segment)", the state of a segment whose owner's lock is free.
pub fn dead_state(pid: u32) -> String {
    format!("dead (owner pid {pid} gone; stale segment)")
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

/// The message for an unknown name with the instance's nearest names after it, as every front end
/// says it: `no pin named 'pid.0.Pgian'; did you mean 'pid.0.Pgain'?`. `None` for any other error,
/// or when no name is near.
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
