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

#[cfg(test)]
mod tests {
    //! Each kind where it carries meaning, from the command that makes it to the [`ConfigError`]
    //! its callers read (`is_runtime`: halrun's exit code; `is_stopping`: the control reply).

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use rtapi_hal::{HalError, ObjectKind, Value, ValueType};

    use super::CommandErrorKind::{self, *};
    use crate::components::{LoadError, Registry};
    use crate::config::halcmd::{Apply, Backend, Live, LiveLoad, Session, UserComponent, STOPPING};
    use crate::config::{ConfigError, StartError};
    use crate::runtime::RuntimeError;

    /// A running instance that refuses every new signal; with `stop_on_refusal`, a refusal is the
    /// instance stopping (as a segment being torn down refuses).
    #[derive(Default)]
    struct FakeLive {
        stopping: AtomicBool,
        stop_on_refusal: bool,
    }

    impl Live for FakeLive {
        fn load(&self, _: LiveLoad<'_>) -> Result<(), LoadError> {
            Ok(())
        }
        fn new_signal(&self, name: &str, _: ValueType) -> Result<(), HalError> {
            if self.stop_on_refusal {
                self.stopping.store(true, Ordering::Relaxed);
            }
            Err(HalError::Duplicate {
                kind: ObjectKind::Signal,
                name: name.to_string(),
            })
        }
        fn unlink(&self, _: &str) -> Result<(), HalError> {
            Ok(())
        }
        fn link(&self, _: &str, _: &str) -> Result<(), HalError> {
            Ok(())
        }
        fn delete_signal(&self, _: &str) -> Result<(), HalError> {
            Ok(())
        }
        fn sets(&self, _: &str, _: Value) -> Result<(), HalError> {
            Ok(())
        }
        fn setp(&self, _: &str, _: Value) -> Result<(), HalError> {
            Ok(())
        }
        fn delf(&self, _: &str, _: &str) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn addf(&self, _: &str, _: &str, _: usize) -> Result<(), RuntimeError> {
            Ok(())
        }
        fn unload(&self, _: &str, _: &[String], _: &[String]) -> Result<(), HalError> {
            Ok(())
        }
        fn read(&self, _: &str) -> Option<Value> {
            None
        }
        fn run_functions(&self, _: bool) {}
        fn stopping(&self) -> bool {
            self.stopping.load(Ordering::Relaxed)
        }
        fn add_user(&self, _: &UserComponent) -> Result<(), HalError> {
            Ok(())
        }
        fn delete_component(&self, _: &str) -> Result<(), HalError> {
            Ok(())
        }
    }

    /// `start` fails with `fail_start`'s error, or starts a [`FakeLive`].
    #[derive(Default)]
    struct FakeBackend {
        fail_start: Option<fn() -> StartError>,
        stop_on_refusal: bool,
        live: Option<FakeLive>,
    }

    impl Backend for FakeBackend {
        fn live(&self) -> Option<&dyn Live> {
            self.live.as_ref().map(|l| l as &dyn Live)
        }
        fn start(&mut self, _: Apply<'_>) -> Option<Result<(), StartError>> {
            if let Some(fail) = self.fail_start {
                return Some(Err(fail()));
            }
            self.live = Some(FakeLive {
                stop_on_refusal: self.stop_on_refusal,
                ..FakeLive::default()
            });
            Some(Ok(()))
        }
    }

    fn session(backend: FakeBackend) -> Session<FakeBackend> {
        Session::with_backend(Registry::builtin(), "kinds-test", backend).unwrap()
    }

    /// Runs `text` as file `t.hal`: its error.
    fn fails<H: Backend>(s: &mut Session<H>, text: &str) -> ConfigError {
        let run = |s: &mut Session<H>| {
            let commands = s.parse("t.hal", text).map_err(|mut e| e.remove(0))?;
            s.run_commands("t.hal", None, &commands, &mut Vec::new())
        };
        run(s).expect_err(text)
    }

    fn kind_of(text: &str) -> CommandErrorKind {
        fails(&mut session(FakeBackend::default()), text).kind()
    }

    #[test]
    fn a_start_whose_runtime_fails_is_the_runtimes_failure_not_the_files() {
        let mut s = session(FakeBackend {
            fail_start: Some(|| StartError::Runtime(RuntimeError::Config("segment in use".into()))),
            ..FakeBackend::default()
        });
        let e = fails(&mut s, "loadrt pid\nstart\n");
        assert_eq!(e.to_string(), "t.hal:2: start: segment in use");
        assert_eq!(e.kind(), RuntimeStart);
        assert!(e.is_runtime() && !e.is_stopping());
        // The next failure is the file's again: nothing is left over from the failed start.
        let e = fails(&mut s, "setp pid.0.Pgain x\n");
        assert_eq!(e.kind(), Rule);
        assert!(!e.is_runtime());
    }

    #[test]
    fn a_start_the_configuration_refuses_is_the_files_fault() {
        let mut s = session(FakeBackend {
            fail_start: Some(|| StartError::Config(ConfigError::at("t.hal", 1, "refused"))),
            ..FakeBackend::default()
        });
        let e = fails(&mut s, "start\n");
        assert_eq!(e.to_string(), "t.hal:1: start: t.hal:1: refused");
        assert_eq!(e.kind(), Rule);
        assert!(!e.is_runtime());
    }

    #[test]
    fn commands_after_the_instance_stops_are_abandoned_as_stopping() {
        let mut s = session(FakeBackend::default());
        let stop = Arc::new(AtomicBool::new(false));
        s.abort_when(stop.clone());
        stop.store(true, Ordering::Relaxed);
        let e = fails(&mut s, "loadrt pid\n");
        assert_eq!(e.to_string(), format!("t.hal:1: {STOPPING}"));
        assert_eq!(e.kind(), Stopping);
        assert!(e.is_stopping() && !e.is_runtime());
    }

    #[test]
    fn a_change_the_running_hal_refuses_is_live_hal_or_stopping_if_it_stops() {
        let mut s = session(FakeBackend::default());
        let e = fails(&mut s, "start\nnewsig x float\n");
        assert_eq!(e.kind(), LiveHal);
        assert!(e.message.starts_with("newsig x: "), "{}", e.message);
        assert!(!e.is_stopping() && !e.is_runtime());
        // The same refusal by an instance that is stopping meanwhile: the stop's.
        let mut s = session(FakeBackend {
            stop_on_refusal: true,
            ..FakeBackend::default()
        });
        let e = fails(&mut s, "start\nnewsig x float\n");
        assert_eq!(e.kind(), Stopping);
        assert!(e.is_stopping());
    }

    #[test]
    fn rules_and_unknown_names() {
        let cases = [
            ("loadrt pid\nsetp pid.0.nosuch 1\n", UnknownName),
            ("loadrt pid\nsets nosuch 1\n", UnknownName),
            ("loadrt pid\nnet s pid.0.nosuch\n", UnknownName),
            ("loadrt pid\naddf nosuch servo\n", UnknownName),
            ("loadrt pid\ndelf nosuch\n", UnknownName),
            ("loadrt pid\nalias pin nosuch x\n", UnknownName),
            ("loadrt pid\nlinkps pid.0.command s\n", UnknownName),
            // A param where a pin is meant is known, only misused.
            (
                "loadrt pid\nnewsig s s32\nlinkps pid.0.do-pid-calcs.tmax s\n",
                Rule,
            ),
            ("loadrt pid\nsetp pid.0.Pgain x\n", Rule),
            ("loadrt pid\naddf pid.0.do-pid-calcs nosuch\n", Rule),
            ("bogus\n", Rule),
            ("loadusr prog\n", Rule),
        ];
        for (text, kind) in cases {
            assert_eq!(kind_of(text), kind, "{text}");
        }
    }
}
