//! What runs the commands: the [`Executor`] trait, its error [`ExecError`], and its implementation
//! by the halcmd interpreter's session ([`LiveSession`]).
//!
//! The server holds one [`SharedExecutor`] and runs every client's request on it, one at a time; the
//! owner's own prompt runs its lines on the same one.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Flow, UserComponent, UserError, UserInbox, UserWhy};
use crate::config::ConfigError;
use crate::instance::LiveSession;

/// Why a request to an instance failed. On the wire, and so in every client, it is its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// A command failed where it stands (`file:line: message` when it came from a file).
    Command(ConfigError),
    /// `keep_going`: every command of the file that failed, in order.
    Commands(Vec<ConfigError>),
    /// What this instance does not do (no flight recorder, no user-space components, no client
    /// files), or a request the protocol does not know.
    Unsupported(String),
    /// The flight recorder could not write its dump.
    Recorder(crate::runtime::recorder::dump::DumpError),
    /// A user-space component was refused (a name taken, a bad pin), or the instance is stopping.
    UserComponent(UserError),
}

impl ExecError {
    /// Whether the failure is the owner stopping, not the request's fault.
    pub fn is_stopping(&self) -> bool {
        match self {
            ExecError::UserComponent(e) => e.why == UserWhy::Stopping,
            ExecError::Command(e) => e.is_stopping(),
            ExecError::Commands(v) => v.iter().any(ConfigError::is_stopping),
            ExecError::Unsupported(_) | ExecError::Recorder(_) => false,
        }
    }
}

impl From<ConfigError> for ExecError {
    fn from(e: ConfigError) -> Self {
        ExecError::Command(e)
    }
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Command(e) => write!(f, "{e}"),
            ExecError::Commands(all) => {
                for (i, e) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
            ExecError::Recorder(e) => write!(f, "{e}"),
            ExecError::UserComponent(e) => write!(f, "{e}"),
            ExecError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ExecError {}

/// Runs halcmd commands against an instance. Implemented by the halcmd interpreter's session.
pub trait Executor: Send {
    /// One command line; its output goes to `out`. `Err` carries the message of a failed command.
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ExecError>;
    /// A whole file, with `[SECTION]KEY` taken from `ini`; `keep_going` runs past failed commands
    /// (their messages are joined in the error).
    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError>;
    /// Lines `first_line…` of the file `file` that a client read and sent (`rtapi halcmd -f`):
    /// run as that file's lines would be (`source` relative to its directory, errors at its
    /// lines), with `[SECTION]KEY` from `ini` and `keep_going` for these lines only.
    fn script(
        &mut self,
        file: &Path,
        first_line: usize,
        text: &str,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        let _ = (file, first_line, text, ini, keep_going, out);
        Err(ExecError::Unsupported(
            "this instance cannot run a client's file".into(),
        ))
    }
    /// From now on, a command sequence stops between two commands once `flag` is set (the owner is
    /// stopping), abandoning the rest with an error that says so.
    fn abort_when(&mut self, flag: Arc<AtomicBool>) {
        let _ = flag;
    }
    /// `rtapi recorder dump`: the instance's flight recorder writes a dump now (into `dir`, or its
    /// configured directory); the answer lists the files.
    fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<String, ExecError> {
        let _ = dir;
        Err(ExecError::Unsupported(NO_RECORDER.into()))
    }
    /// A user-space component joins the running instance with its pins and params.
    fn add_user_component(&mut self, component: &UserComponent) -> Result<(), ExecError> {
        Err(ExecError::Unsupported(format!(
            "user component {}: this instance cannot host user-space components",
            crate::rt::units::quote(&component.name)
        )))
    }
    /// A user-space component leaves (its pins are unlinked); `Ok(false)` if there is none.
    fn remove_user_component(&mut self, name: &str) -> Result<bool, ExecError> {
        let _ = name;
        Ok(false)
    }
    /// Where user-space components wait while the executor is busy (a `loadusr -W` waiting for
    /// one holds it); `None`: requests wait for the executor itself.
    fn user_inbox(&self) -> Option<Arc<UserInbox>> {
        None
    }
    /// Adds the components waiting in the inbox.
    fn serve_user_inbox(&mut self) {}
}

/// What an instance without a flight recorder answers `rtapi recorder dump`.
const NO_RECORDER: &str = "this instance has no flight recorder ([recorder] in the machine TOML)";

/// The shared executor of an instance.
pub type SharedExecutor = Arc<Mutex<dyn Executor>>;

/// The halcmd interpreter's session is what runs the commands of an instance.
impl Executor for LiveSession {
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ExecError> {
        Ok(LiveSession::execute(self, line, out)?)
    }

    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        self.with_file_settings(ini, keep_going, |s| LiveSession::source(s, file, out))
    }

    fn script(
        &mut self,
        file: &Path,
        first_line: usize,
        text: &str,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        self.with_file_settings(ini, keep_going, |s| {
            LiveSession::run_script(s, file, first_line, text, out)
        })
    }

    fn abort_when(&mut self, flag: Arc<AtomicBool>) {
        LiveSession::abort_when(self, flag)
    }

    fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<String, ExecError> {
        let recorder = self
            .runtime()
            .and_then(|rt| rt.recorder())
            .ok_or(ExecError::Unsupported(NO_RECORDER.into()))?;
        let files = recorder
            .dump_now(dir.map(Path::to_path_buf), Duration::from_secs(5))
            .map_err(ExecError::Recorder)?;
        Ok(files.iter().map(|f| format!("{}\n", f.display())).collect())
    }

    fn add_user_component(&mut self, component: &UserComponent) -> Result<(), ExecError> {
        LiveSession::add_user_component(self, component).map_err(ExecError::UserComponent)
    }

    fn remove_user_component(&mut self, name: &str) -> Result<bool, ExecError> {
        LiveSession::remove_user_component(self, name).map_err(ExecError::UserComponent)
    }

    fn user_inbox(&self) -> Option<Arc<UserInbox>> {
        Some(LiveSession::user_inbox(self))
    }

    fn serve_user_inbox(&mut self) {
        LiveSession::serve_user_inbox(self)
    }
}

trait FileSettings {
    fn with_file_settings(
        &mut self,
        ini: Option<&Path>,
        keep_going: bool,
        run: impl FnOnce(&mut Self) -> Result<Flow, crate::config::ConfigError>,
    ) -> Result<Flow, ExecError>;
}

impl FileSettings for LiveSession {
    /// Runs `run` with the file's own INI and -k, for this file only; a failure under -k joins
    /// every message.
    fn with_file_settings(
        &mut self,
        ini: Option<&Path>,
        keep_going: bool,
        run: impl FnOnce(&mut Self) -> Result<Flow, crate::config::ConfigError>,
    ) -> Result<Flow, ExecError> {
        use crate::config::halcmd::Ini;
        let ini = match ini {
            Some(p) => Some(Ini::load(p)?),
            None => None,
        };
        let saved = (self.take_ini(), self.keep_going);
        self.set_ini(ini);
        self.keep_going = keep_going;
        let errors_before = self.errors().len();
        let result = run(self);
        let errors: Vec<ConfigError> = self.errors()[errors_before..].to_vec();
        self.set_ini(saved.0);
        self.keep_going = saved.1;
        match result {
            Ok(flow) => Ok(flow),
            Err(_) if errors.len() > 1 => Err(ExecError::Commands(errors)),
            Err(e) => Err(ExecError::Command(e)),
        }
    }
}
