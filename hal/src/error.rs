//! The one error type of the crate.
//!
//! Every message says what went wrong *and* what the user can do about it, because these errors end up
//! printed by `rtapi show`, `rtapi setp` or `rtapi run` in front of someone commissioning a machine.

use std::fmt;
use std::io;

use crate::value::ValueType;

/// Shorthand used throughout the crate.
pub type Result<T, E = HalError> = std::result::Result<T, E>;

/// What kind of HAL object a name refers to (used in messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    /// A component.
    Component,
    /// A pin.
    Pin,
    /// A param.
    Param,
    /// A signal.
    Signal,
    /// A function.
    Function,
    /// A thread.
    Thread,
    /// A pin or a param: they share one namespace so that `getp`/`setp` are unambiguous.
    PinOrParam,
    /// Anything `get` can read: pin, param or signal.
    Any,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Component => "component",
            ObjectKind::Pin => "pin",
            ObjectKind::Param => "param",
            ObjectKind::Signal => "signal",
            ObjectKind::Function => "function",
            ObjectKind::Thread => "thread",
            ObjectKind::PinOrParam => "pin or param",
            ObjectKind::Any => "pin, param or signal",
        })
    }
}

/// Why a write from another process was refused (`setp`/`sets` rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// OUT pins are written by their component every period; a foreign write would be overwritten.
    OutputPin {
        /// The component that writes it.
        component: String,
    },
    /// A connected input reads its signal; the pin's own cell is not used.
    ConnectedPin {
        /// The signal it reads.
        signal: String,
    },
    /// The component declared this param read-only.
    ReadOnlyParam,
    /// The signal's value comes from its OUT pin every period.
    SignalHasWriter {
        /// The OUT pin that drives it.
        writer: String,
    },
    /// The reader mapped the segment read-only.
    ReadOnlyMapping,
    /// A user-space component writes only its own pins and params ([`HalReader::write_own`](crate::HalReader::write_own)).
    OtherComponent {
        /// The component that owns the object.
        owner: String,
        /// The component that tried to write it.
        writer: String,
    },
}

impl fmt::Display for WriteRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteRefusal::OutputPin { component } => write!(
                f,
                "it is an OUT pin written by component '{component}' every period; \
                 set one of that component's inputs or params instead"
            ),
            WriteRefusal::ConnectedPin { signal } => write!(
                f,
                "it is connected to signal '{signal}'; use `sets {signal} VALUE` if that signal has no writer"
            ),
            WriteRefusal::ReadOnlyParam => f.write_str("the param is read-only (declared ro by its component)"),
            WriteRefusal::SignalHasWriter { writer } => write!(
                f,
                "it is driven by OUT pin '{writer}' every period; change that pin's component instead"
            ),
            WriteRefusal::ReadOnlyMapping => f.write_str(
                "the segment was opened read-only; open it with Access::ReadWrite (and write permission on the segment)",
            ),
            WriteRefusal::OtherComponent { owner, writer } => write!(
                f,
                "it belongs to component '{owner}', and component '{writer}' writes only its own pins and params"
            ),
        }
    }
}

/// Everything that can go wrong building, owning or reading a HAL segment.
#[derive(Debug)]
#[non_exhaustive]
pub enum HalError {
    /// A HAL or instance name broke the naming rules.
    InvalidName {
        /// The name as given.
        name: String,
        /// Which rule it broke.
        reason: &'static str,
    },
    /// A name was registered twice.
    Duplicate {
        /// The namespace it was registered in.
        kind: ObjectKind,
        /// The name.
        name: String,
    },
    /// No object with that name exists.
    NotFound {
        /// What was looked for.
        kind: ObjectKind,
        /// The name looked up.
        name: String,
    },
    /// `net`: the pin's type differs from the signal's.
    TypeMismatch {
        /// The signal.
        signal: String,
        /// Its type.
        signal_type: ValueType,
        /// The pin being netted.
        pin: String,
        /// Its type.
        pin_type: ValueType,
    },
    /// `net`: a second OUT pin on one signal.
    SecondWriter {
        /// The signal.
        signal: String,
        /// Its existing OUT pin.
        writer: String,
        /// The OUT pin being netted.
        pin: String,
    },
    /// `net`: OUT and IO pins cannot share a signal (who would win?).
    OutWithIo {
        /// The signal.
        signal: String,
        /// The pin being netted.
        pin: String,
    },
    /// `net`: a pin can be on one signal only.
    AlreadyNetted {
        /// The pin.
        pin: String,
        /// The signal it is already on.
        signal: String,
    },
    /// `addf`: a function runs in one thread only.
    AlreadyAdded {
        /// The function.
        function: String,
        /// The thread it already runs in.
        thread: String,
    },
    /// A configuration value is out of its range (histogram, period, size cap...).
    InvalidConfig {
        /// Which setting, e.g. `thread period`.
        what: &'static str,
        /// What is wrong with it and what is accepted.
        reason: String,
    },
    /// The registered objects need more room than the configured cap.
    SegmentFull {
        /// Bytes the segment would need.
        needed: u64,
        /// The cap ([`HalBuilder::max_size`](crate::HalBuilder::max_size)).
        cap: u64,
    },
    /// Another live process owns this instance.
    InstanceInUse {
        /// The instance.
        instance: String,
        /// The owner's process id.
        pid: u32,
    },
    /// No segment exists for this instance.
    NoSuchInstance {
        /// The instance.
        instance: String,
    },
    /// The owner has created the segment but not yet published it (`pid` 0: not yet known).
    NotReady {
        /// The instance.
        instance: String,
        /// The owner's process id, 0 if not yet written.
        pid: u32,
    },
    /// The shm object exists but is not an rtapi HAL segment (or is damaged beyond recognition).
    Foreign {
        /// The file, e.g. `/dev/shm/rtapi-default`.
        path: String,
        /// What did not match.
        reason: String,
    },
    /// The file at the segment's name is not one this process believes: a symlink or other non-regular
    /// file, owned by an untrusted user, or with a mode that lets others write or read it. Nothing of it
    /// was read or written. See [`Trust`](crate::Trust).
    Untrusted {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
        /// Its owner, e.g. `nobody (uid 65534)`.
        owner: String,
        /// Its permission bits (`st_mode & 0o7777`).
        mode: u32,
        /// For a reader refusing a foreign owner: the user to name in `--trust-owner` to accept it.
        trust_owner: Option<String>,
    },
    /// The segment's owner process is gone (its lock is free): the segment is stale and nothing reads a
    /// value written into it.
    OwnerGone {
        /// The instance.
        instance: String,
        /// The dead owner's process id, from the header.
        pid: u32,
    },
    /// `setp`/`sets` of NaN or an infinity (typed, or a number too large for a float) without force.
    NonFinite {
        /// The object written.
        name: String,
        /// The value as given.
        text: String,
    },
    /// The segment looked like ours but failed validation.
    Corrupt {
        /// The first check that failed.
        reason: String,
    },
    /// The segment was written by a newer, incompatible rtapi.
    UnsupportedVersion {
        /// The segment's major version.
        found_major: u16,
        /// The segment's minor version.
        found_minor: u16,
        /// The major version this reader reads.
        supported_major: u16,
    },
    /// A table of the live segment is full: no room to add another record at run time.
    TableFull {
        /// Which table, e.g. `pin`.
        table: &'static str,
        /// Records it has room for.
        capacity: usize,
    },
    /// A key of an object that was deleted since (its record's slot may hold another object now).
    StaleKey {
        /// What the key was for.
        kind: ObjectKind,
    },
    /// The segment's structure generation stayed odd (mid-change) for longer than any real change
    /// takes (`stuck`), or kept changing for the whole retry budget.
    StructureBusy {
        /// Odd the whole time: the owner probably died in the middle of a change.
        stuck: bool,
    },
    /// A seqlocked record stayed mid-update for longer than any real writer takes.
    Busy {
        /// What was being read, e.g. `the stats of thread 'servo'`.
        what: String,
    },
    /// A write from another process broke the `setp`/`sets` rules.
    NotWritable {
        /// The object.
        name: String,
        /// Which rule refused it.
        reason: WriteRefusal,
    },
    /// The text could not be parsed as the object's type.
    BadValue {
        /// The object.
        name: String,
        /// Its type.
        ty: ValueType,
        /// The text given.
        text: String,
    },
    /// A typed value of the wrong type for the object it was given to (e.g. [`HalBuilder::set_signal`](crate::HalBuilder::set_signal)).
    WrongType {
        /// The object's name.
        name: String,
        /// The object's type.
        expected: ValueType,
        /// The type of the value given.
        found: ValueType,
    },
    /// Each thread's stats have exactly one writer; it was already handed out.
    StatsWriterTaken {
        /// The thread.
        thread: String,
    },
    /// The operating system refused a call.
    Os {
        /// The call, e.g. `shm_open`.
        op: &'static str,
        /// What it was called on.
        target: String,
        /// The error it returned.
        source: io::Error,
    },
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use HalError::*;
        match self {
            InvalidName { name, reason } => write!(
                f,
                "invalid name '{name}': {reason} (names are 1-47 characters of A-Z a-z 0-9 . _ -, like pid.0.command)"
            ),
            Duplicate { kind, name } => write!(f, "a {kind} named '{name}' already exists; choose another name"),
            NotFound { kind, name } => {
                write!(f, "no {kind} named '{name}'; `rtapi show` lists what exists")
            }
            TypeMismatch { signal, signal_type, pin, pin_type } => write!(
                f,
                "cannot net pin '{pin}' ({pin_type}) to signal '{signal}' ({signal_type}): types must match; \
                 use a conversion component between them"
            ),
            SecondWriter { signal, writer, pin } => write!(
                f,
                "cannot net OUT pin '{pin}' to signal '{signal}': it already has writer '{writer}'; \
                 a signal has exactly one OUT pin"
            ),
            OutWithIo { signal, pin } => write!(
                f,
                "cannot net pin '{pin}' to signal '{signal}': a signal may have one OUT pin or any number \
                 of IO pins, not both"
            ),
            AlreadyNetted { pin, signal } => write!(
                f,
                "pin '{pin}' is already connected to signal '{signal}'; a pin is on at most one signal"
            ),
            AlreadyAdded { function, thread } => write!(
                f,
                "function '{function}' is already added to thread '{thread}'; a function runs in one thread"
            ),
            InvalidConfig { what, reason } => write!(f, "invalid {what}: {reason}"),
            SegmentFull { needed, cap } => write!(
                f,
                "the HAL segment needs {needed} bytes but the cap is {cap}; raise the size cap \
                 (HalBuilder::max_size) or register fewer objects"
            ),
            InstanceInUse { instance, pid } => write!(
                f,
                "HAL instance '{instance}' is in use by live process {pid}; stop it first \
                 or pick another instance with --instance NAME"
            ),
            NoSuchInstance { instance } => write!(
                f,
                "no HAL instance '{instance}' (no /dev/shm/rtapi-{instance}); is `rtapi run` running, \
                 and with the same --instance?"
            ),
            NotReady { instance, pid } => {
                write!(f, "HAL instance '{instance}' is still being built by ")?;
                match pid {
                    0 => f.write_str("its owner")?,
                    pid => write!(f, "process {pid}")?,
                }
                f.write_str("; retry in a moment")
            }
            Foreign { path, reason } => write!(
                f,
                "{path} is not a usable rtapi HAL segment ({reason}); if no rtapi process is running, remove it"
            ),
            Untrusted { path, reason, owner, mode, trust_owner } => {
                write!(
                    f,
                    "refusing {path}: {reason} (owner {owner}, mode {mode:04o}); another user may have \
                     planted it to impersonate this instance, so nothing in it is believed. Check it \
                     (`ls -l {path}`); if no rtapi you trust is using it, remove it as root \
                     (`rm {path}`), or use another instance with --instance NAME"
                )?;
                if let Some(user) = trust_owner {
                    write!(
                        f,
                        "; if it is a segment of user '{user}' that you mean to use, pass --trust-owner {user}"
                    )?;
                }
                Ok(())
            }
            OwnerGone { instance, pid } => write!(
                f,
                "HAL instance '{instance}' is dead (owner pid {pid} gone; stale segment): nothing would read \
                 the value, so nothing was written; start it again with `rtapi run CONFIG.toml --instance \
                 {instance}` (that reclaims the stale segment) or remove it (`rm /dev/shm/rtapi-{instance}`)"
            ),
            NonFinite { name, text } => {
                let t = text.trim().to_ascii_lowercase();
                let what = if t.contains("nan") {
                    "is NaN"
                } else if t.contains("inf") {
                    "is infinite"
                } else {
                    "overflows a float to infinity"
                };
                write!(
                    f,
                    "'{text}' for '{name}' {what}: a non-finite value poisons every computation that \
                     reads it, so it was refused; give a finite number, or pass --force to write it anyway"
                )
            }
            Corrupt { reason } => write!(
                f,
                "the HAL segment is corrupt, refused: {reason}; restart the owning rtapi process"
            ),
            StaleKey { kind } => write!(
                f,
                "a key of a {kind} that was deleted was used (its place may hold another {kind} \
                 now); get a new key from the object's owner"
            ),
            TableFull { table, capacity } => write!(
                f,
                "the HAL segment has no room for another {table} (its {table} table holds \
                 {capacity}); build it with more spare capacity ({})",
                if *table == "thread" {
                    "HalBuilder::thread_room"
                } else {
                    "HalBuilder::capacity"
                }
            ),
            StructureBusy { stuck: true } => write!(
                f,
                "refused: structure being changed for too long (owner died mid-change?); restart \
                 the owning rtapi process"
            ),
            StructureBusy { stuck: false } => write!(
                f,
                "refused: structure changing continuously, no consistent read possible; try again"
            ),
            UnsupportedVersion { found_major, found_minor, supported_major } => write!(
                f,
                "the HAL segment has layout version {found_major}.{found_minor} but this program reads \
                 {supported_major}.x; use the rtapi tools from the same release as the running rtapi"
            ),
            Busy { what } => write!(
                f,
                "{what} stayed mid-update while reading; its writer may have died — restart the owning rtapi process"
            ),
            NotWritable { name, reason } => write!(f, "cannot write '{name}': {reason}"),
            BadValue { name, ty, text } => write!(
                f,
                "'{text}' is not a valid {ty} value for '{name}'{}",
                ty.value_hint()
            ),
            WrongType { name, expected, found } => write!(
                f,
                "'{name}' is a {expected}; a {found} value cannot be stored in it; give a {expected} value"
            ),
            StatsWriterTaken { thread } => write!(
                f,
                "the stats writer of thread '{thread}' was already taken; only the thread itself writes its stats"
            ),
            Os { op, target, source } => write!(f, "{op} {target} failed: {source}{}", os_hint(source)),
        }
    }
}

fn os_hint(e: &io::Error) -> &'static str {
    match e.kind() {
        io::ErrorKind::PermissionDenied => {
            " (the segment belongs to another user or group; run as that user, or configure the group)"
        }
        _ => "",
    }
}

impl std::error::Error for HalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HalError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl HalError {
    pub(crate) fn corrupt(reason: impl Into<String>) -> Self {
        HalError::Corrupt {
            reason: reason.into(),
        }
    }

    pub(crate) fn os(op: &'static str, target: impl Into<String>) -> Self {
        HalError::Os {
            op,
            target: target.into(),
            source: io::Error::last_os_error(),
        }
    }
}
