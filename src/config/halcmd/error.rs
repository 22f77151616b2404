//! How a halcmd command fails: a [`CommandError`] — its line, what [kind](CommandErrorKind) of
//! failure it is, and the message the user reads.
//!
//! The lexer, the parser and every command return it; the session ([`super::Session`]) locates it in
//! its file as a [`ConfigError`], which keeps the kind: whoever handles the error (`rtapi halrun`'s
//! exit code, the control socket's `stopping` reply) reads the kind, never the message. The message
//! is exactly what halcmd prints: the kind adds nothing to it.

use crate::config::ConfigError;

/// What kind of failure a halcmd command's error is: whose fault, and whether the instance is going
/// away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandErrorKind {
    /// The command breaks a halcmd or HAL rule: its syntax or usage, a bad or taken name, a type or
    /// direction, a value, a file that cannot be read or written. The file's fault.
    Rule,
    /// A rule broken on a name the model does not know (no such pin, param, signal, function). A
    /// check that did not run a LinuxCNC module's code lists it as unchecked instead: the module
    /// may have made it.
    UnknownName,
    /// A program `loadusr` starts could not be started, failed, or did not make its component
    /// ready in time (`loadusr`, `waitusr`).
    Program,
    /// `start`: the command is right, but the runtime could not be configured or started (a
    /// segment in use, a thread refused). A failure of the machine, not of the file.
    RuntimeStart,
    /// The running instance's HAL refused a change the command made to the model (or the removal
    /// of a user-space component): the model goes back to what it was before the command.
    LiveHal,
    /// The command was abandoned, or failed, because the instance is stopping (a signal, a stall):
    /// the fault of neither the file nor the runtime.
    Stopping,
}

/// A halcmd command's failure: at `line` (1-based, of the file the command came from), of `kind`,
/// with the `message` halcmd shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandError {
    pub(crate) line: usize,
    pub(crate) kind: CommandErrorKind,
    pub(crate) message: String,
}

impl CommandError {
    pub(crate) fn new(line: usize, kind: CommandErrorKind, message: impl Into<String>) -> Self {
        CommandError {
            line,
            kind,
            message: message.into(),
        }
    }

    /// A rule broken ([`CommandErrorKind::Rule`]).
    pub(crate) fn rule(line: usize, message: impl Into<String>) -> Self {
        CommandError::new(line, CommandErrorKind::Rule, message)
    }

    /// A name the model does not know ([`CommandErrorKind::UnknownName`]).
    pub(crate) fn unknown(line: usize, message: impl Into<String>) -> Self {
        CommandError::new(line, CommandErrorKind::UnknownName, message)
    }

    /// A `loadusr` program's failure ([`CommandErrorKind::Program`]).
    pub(crate) fn program(line: usize, message: impl Into<String>) -> Self {
        CommandError::new(line, CommandErrorKind::Program, message)
    }

    /// Abandoned because the instance is stopping ([`CommandErrorKind::Stopping`]).
    pub(crate) fn stopping(line: usize, message: impl Into<String>) -> Self {
        CommandError::new(line, CommandErrorKind::Stopping, message)
    }

    /// The same failure, its message after `prefix` (`setp: `).
    pub(crate) fn prefixed(mut self, prefix: &str) -> Self {
        self.message.insert_str(0, prefix);
        self
    }

    /// The error located in `file`, its kind kept.
    pub(crate) fn in_file(self, file: &str) -> ConfigError {
        let mut e = ConfigError::at(file, self.line, self.message);
        e.kind = self.kind;
        e
    }
}
