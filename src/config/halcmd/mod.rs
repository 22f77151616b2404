//! The `.hal` language as halcmd reads it, and a [`Session`] that executes it.
//!
//! - `lex`: comments, continuations, `$VAR`/`[SECTION]KEY` substitution, quoting;
//! - [`ini`]: LinuxCNC INI files;
//! - `parse`: every halcmd command into a `Command` (`command`: the type, and every command's name);
//! - `model`: the **netlist model** kept in the config layer — which components are loaded (their
//!   pins, params and functions learnt from a dry load), pin → signal links, signal types and
//!   values, each thread's function list, aliases. The model can unlink, delete and reorder
//!   (unlinkp, delsig, delf, unloadrt), which the append-only HAL builder cannot;
//! - what each command does to the model: `exec` (the dispatch, the name lookups and their "did you
//!   mean"), `loadrt` (loadrt, unloadrt: the dry loads that learn what a component makes), `netlist`
//!   (net, link, setp, sets, addf, delf, alias);
//! - `error`: how a command fails, a [`CommandErrorKind`] beside its line and message: a rule
//!   broken (or a name the model does not know), a `loadusr` program's failure, the runtime's `start`,
//!   the live HAL's refusal, the instance stopping. A [`ConfigError`] keeps the kind;
//! - this module: the [`Session`] — reading files and lines, `-k`, rollback, `source` — and
//!   [`Session::apply_to`], which emits the final model to a [`Target`] (threads, `loadrt`s with
//!   every `setp` value as the initial value, signals and links, `sets` values, run lists);
//! - [`backend`]: where changes go beyond the model once an instance runs (`sync`: the model diff
//!   emitted as [`Live`] operations; `usr`: `loadusr` programs through the backend; `user`: user-space
//!   components). The config layer's own backend, [`NoInstance`], runs nothing; the running instance's
//!   backend is the `instance` layer's.
//!
//! Output commands (show, list, getp, gets, ptype, stype, echo, print, status, save without a file,
//! help) write to the `out` given to [`Session::execute`] / [`Session::source`].

pub mod backend;
mod command;
mod error;
mod exec;
pub mod ini;
mod lex;
mod loadrt;
mod model;
mod netlist;
mod output;
pub(crate) mod parse;
mod sync;
mod user;
mod usr;

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{invalid_name, read_text, ConfigError};
use crate::components::linuxcnc::ModuleLoader;
use crate::components::{Declared, Presets, Registry, Target};
use crate::rt::units::quote;
use crate::runtime::ThreadSpec;
pub use backend::{Apply, Backend, Live, LiveLoad, NoInstance, ProgramState};
pub(crate) use error::CommandError;
pub use error::CommandErrorKind;
pub use ini::Ini;
pub(crate) use lex::{process_env, Subst, Word};
use model::{Model, Origin, ThreadInfo};
pub use parse::COMMANDS;
use parse::{AliasKind, Command, Located};
pub use user::{Departure, UserComponent, UserError, UserInbox, UserParam, UserPin, UserWhy};
pub use usr::{PROGRAM_GRACE, PROGRAM_POLL};

/// The most component instances (all `loadrt` lines together) a session may load: far above any
/// real machine, and low enough that every pin, param and statistic fits the HAL segment.
pub const MAX_COMPONENT_INSTANCES: usize = 4096;

/// How deep `source` may nest before a file is taken to include itself.
const MAX_SOURCE_DEPTH: usize = 16;

/// What the caller does after a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the next command.
    Continue,
    /// `quit` / `exit`: stop reading commands.
    Quit,
}

/// Kinds of object names, for listings and tab completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// Component instances.
    Comp,
    /// Pins (and pin aliases).
    Pin,
    /// Params (and param aliases).
    Param,
    /// Signals.
    Signal,
    /// Functions.
    Funct,
    /// Threads.
    Thread,
}

type Step = Result<Flow, CommandError>;

/// The error of a command abandoned because the instance is stopping.
pub const STOPPING: &str =
    "not run: the instance is stopping (SIGTERM, SIGINT, SIGHUP or a stall); this command and the \
     ones after it were abandoned";

/// A halcmd session: executes `.hal` commands into a netlist model, then emits it to a [`Target`].
///
/// ```
/// use rtapi::components::{Registry, Validation};
/// use rtapi::config::halcmd::{Flow, Session};
///
/// let mut s = Session::new(Registry::builtin(), "doc")?;
/// let mut out = Vec::new();
/// s.execute("loadrt threads name1=servo period1=1000000", &mut out)?;
/// s.execute("loadrt pid", &mut out)?;
/// s.execute("setp pid.0.Pgain 50", &mut out)?;
/// s.execute("addf pid.0.do-pid-calcs servo", &mut out)?;
/// assert_eq!(s.execute("getp pid.0.Pgain", &mut out)?, Flow::Continue);
/// assert_eq!(String::from_utf8(out).unwrap(), "50\n");
/// s.apply_to(&mut Validation::new("doc").unwrap())?;
/// # Ok::<(), rtapi::config::ConfigError>(())
/// ```
pub struct Session<H = NoInstance> {
    registry: Registry,
    /// LinuxCNC modules: the search path, what dry runs leave open; native or module is decided
    /// there.
    modules: ModuleLoader,
    instance: String,
    ini: Option<Ini>,
    /// Continue after a failed command (halrun `-k`); the errors are kept in [`Session::errors`].
    pub keep_going: bool,
    /// Script-friendly output (halrun `-s`): no titles in `show`.
    pub script_friendly: bool,
    /// The machine TOML the threads came from, for messages.
    toml: Option<String>,
    model: Model,
    errors: Vec<ConfigError>,
    echo: bool,
    started: bool,
    depth: usize,
    /// Whether a failed command must leave the model as it was (interactive use, `-k`): each
    /// command then runs on a copy kept for the rollback.
    rollback: bool,
    /// Where changes go besides the model: the running instance, once there is one.
    backend: H,
    /// User-space components waiting to join while the session is busy (`user.rs`).
    inbox: std::sync::Arc<user::UserInbox>,
    /// The directory of the file whose commands run now (relative module paths start there).
    dir: Option<PathBuf>,
    /// Only checking (`halrun --check`): LinuxCNC modules are checked from their files, never run.
    check_only: bool,
    /// Commands a check could not check (they name what a LinuxCNC module would have made).
    unchecked: Vec<ConfigError>,
    /// Set when the instance is stopping: a command sequence (a file, a client's script) stops
    /// between two commands, and a waiting command (`loadusr -w`, `waitusr`) stops waiting.
    abort: Vec<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Session {
    /// An empty session for instance `instance` (checked as a HAL name) that only models: nothing
    /// it runs starts an instance.
    pub fn new(registry: Registry, instance: &str) -> Result<Session, ConfigError> {
        Session::with_backend(registry, instance, NoInstance)
    }
}

impl<H: Backend> Session<H> {
    /// An empty session for instance `instance` (checked as a HAL name) whose changes also go to
    /// `backend`.
    pub fn with_backend(
        registry: Registry,
        instance: &str,
        backend: H,
    ) -> Result<Self, ConfigError> {
        if let Some(e) = invalid_name("instance", instance) {
            return Err(ConfigError::file("<session>", e));
        }
        Ok(Session {
            registry,
            modules: ModuleLoader::new(),
            instance: instance.to_string(),
            ini: None,
            keep_going: false,
            script_friendly: false,
            toml: None,
            model: Model::default(),
            errors: Vec::new(),
            echo: false,
            started: false,
            depth: 0,
            rollback: false,
            backend,
            inbox: Default::default(),
            dir: None,
            check_only: false,
            unchecked: Vec::new(),
            abort: Vec::new(),
        })
    }

    /// The session's LinuxCNC module loader (its search path, for completion and messages).
    pub fn modules(&self) -> &ModuleLoader {
        &self.modules
    }

    /// Takes the INI file out of the session (to put it back later with [`set_ini`](Self::set_ini)).
    pub fn take_ini(&mut self) -> Option<Ini> {
        self.ini.take()
    }

    /// Uses `ini` for `[SECTION]KEY` substitution from now on.
    pub fn set_ini(&mut self, ini: Option<Ini>) {
        // Its [RTAPI]LINUXCNC_MODULES is the config's part of the LinuxCNC module search path.
        if let Some(dirs) = ini.as_ref().map(Ini::linuxcnc_module_dirs) {
            if !dirs.is_empty() {
                self.modules.set_module_path(dirs);
            }
        }
        self.ini = ini;
    }

    /// Declares a thread of the machine TOML (`file:line` of its table).
    pub(crate) fn toml_thread(
        &mut self,
        spec: &ThreadSpec,
        file: &str,
        line: usize,
    ) -> Result<(), ConfigError> {
        self.toml = Some(file.to_string());
        let origin = Origin {
            file: file.to_string(),
            line,
        };
        self.add_thread(spec.clone(), origin, false)
            .map_err(|m| ConfigError::at(file, line, m))
    }

    /// The backend the session's changes go to.
    pub fn backend(&self) -> &H {
        &self.backend
    }

    /// The backend, to change.
    pub fn backend_mut(&mut self) -> &mut H {
        &mut self.backend
    }

    /// Marks the script as started (an instance started from this session's model by its owner,
    /// then attached to the backend): halrun then keeps running.
    pub fn mark_started(&mut self) {
        self.started = true;
    }

    /// Only checks (`halrun --check`): a LinuxCNC module's `loadrt` is checked from its file (owners,
    /// symbols, arguments) and its code never runs, so what it would make is unknown; a later command
    /// that fails only on a name the model does not know is not an error then but listed in
    /// [`unchecked`](Self::unchecked). [`apply_to`](Self::apply_to) leaves modules out.
    pub fn set_check_only(&mut self, on: bool) {
        self.check_only = on;
    }

    /// The commands a check-only session could not check (with why), in order.
    pub fn unchecked(&self) -> &[ConfigError] {
        &self.unchecked
    }

    /// Whether the script ran `start` (and no `stop` after it): halrun then keeps running.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Errors of failed commands skipped under [`keep_going`](Self::keep_going), in order.
    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }

    /// The names of one kind of object, sorted (for tab completion and `list`).
    pub fn names(&self, kind: NameKind) -> Vec<String> {
        let m = &self.model;
        let mut v: Vec<String> = match kind {
            NameKind::Comp => m
                .loaded
                .iter()
                .flat_map(|l| l.names.clone())
                .chain(m.user.iter().map(|u| u.name.clone()))
                .collect(),
            NameKind::Pin => m
                .pins
                .keys()
                .cloned()
                .chain(
                    m.aliases
                        .keys()
                        .filter(|(k, _)| *k == AliasKind::Pin)
                        .map(|(_, a)| a.clone()),
                )
                .collect(),
            NameKind::Param => m
                .params
                .keys()
                .cloned()
                .chain(
                    m.aliases
                        .keys()
                        .filter(|(k, _)| *k == AliasKind::Param)
                        .map(|(_, a)| a.clone()),
                )
                .collect(),
            NameKind::Signal => m.signals.keys().cloned().collect(),
            NameKind::Funct => m.functions.keys().cloned().collect(),
            NameKind::Thread => m.threads.iter().map(|t| t.spec.name.clone()).collect(),
        };
        v.sort();
        v
    }

    /// Executes one line of halcmd text (as typed at a prompt: errors name `<command line>:1`).
    pub fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ConfigError> {
        // A session that takes lines one by one goes on after an error: from the state before it.
        self.rollback = true;
        self.run_text("<command line>", None, line, 1, out)
    }

    /// Executes the file at `path` (`source`; `[SECTION]KEY` from the session's INI file).
    pub fn source(&mut self, path: &Path, out: &mut dyn Write) -> Result<Flow, ConfigError> {
        let shown = path.display().to_string();
        let text = read_text(path, &shown)?;
        self.run_text(&shown, path.parent(), &text, 1, out)
    }

    /// Lines `first_line…` of `file` (a piece of it another process read, e.g. `rtapi halcmd -f`):
    /// run as that file's lines, `source` relative to its directory, errors at its line numbers.
    pub fn run_script(
        &mut self,
        file: &Path,
        first_line: usize,
        text: &str,
        out: &mut dyn Write,
    ) -> Result<Flow, ConfigError> {
        let shown = file.display().to_string();
        self.run_text(&shown, file.parent(), text, first_line, out)
    }

    /// From now on a command sequence stops between two commands once `flag` is set, and a
    /// waiting command stops waiting (see `aborted`).
    pub fn abort_when(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.abort.push(flag);
    }

    /// Whether the instance is stopping: what runs now should give up.
    pub(crate) fn aborted(&self) -> bool {
        self.abort
            .iter()
            .any(|f| f.load(std::sync::atomic::Ordering::Relaxed))
            // A signal or a stall's stop, seen here too: the thread that watches for them may be
            // waiting for this session (a client's command, or halrun's own file, holds it).
            || self.backend.live().is_some_and(|l| l.stopping())
    }

    /// Parses `text` (all syntax errors at once) with this session's substitutions.
    pub(crate) fn parse(&self, file: &str, text: &str) -> Result<Vec<Located>, Vec<ConfigError>> {
        parse::parse(
            file,
            text,
            &Subst {
                ini: self.ini.as_ref(),
                env: &process_env,
            },
        )
    }

    /// Runs `text`, file `file`'s lines from `first_line` on (in directory `dir`, for `source`).
    fn run_text(
        &mut self,
        file: &str,
        dir: Option<&Path>,
        text: &str,
        first_line: usize,
        out: &mut dyn Write,
    ) -> Result<Flow, ConfigError> {
        // Syntax first, every error at once (nothing else kept); then each command runs as it is
        // parsed again: memory does not grow with the file beyond its text and the model.
        let ini = self.ini.clone();
        let subst = Subst {
            ini: ini.as_ref(),
            env: &process_env,
        };
        let mut errors = Vec::new();
        parse::each_command(file, text, first_line, &subst, &mut |c| {
            if let Err(e) = c {
                errors.push(e);
            }
            std::ops::ControlFlow::Continue(())
        });
        // Without -k the first error ends the file, so nothing runs; with -k (as LinuxCNC's
        // halcmd -k) the commands that parsed run, each error reported at its line in order.
        if !errors.is_empty() && !self.keep_going {
            return Err(errors.remove(0));
        }
        let outer = std::mem::replace(&mut self.dir, dir.map(Path::to_path_buf));
        let mut first_error = None;
        let mut done = None;
        parse::each_command(file, text, first_line, &subst, &mut |c| {
            let c = match c {
                Ok(c) => c,
                Err(e) => {
                    self.errors.push(e.clone());
                    first_error.get_or_insert(e);
                    return std::ops::ControlFlow::Continue(());
                }
            };
            match self.run_one(file, dir, &c, out, &mut first_error) {
                Some(r) => {
                    done = Some(r);
                    std::ops::ControlFlow::Break(())
                }
                None => std::ops::ControlFlow::Continue(()),
            }
        });
        self.dir = outer;
        match (done, first_error) {
            (Some(r), _) => r,
            (None, Some(e)) => Err(e),
            (None, None) => Ok(Flow::Continue),
        }
    }

    /// Runs parsed commands of file `file` (in directory `dir`, for `source`).
    pub(crate) fn run_commands(
        &mut self,
        file: &str,
        dir: Option<&Path>,
        commands: &[Located],
        out: &mut dyn Write,
    ) -> Result<Flow, ConfigError> {
        let outer = std::mem::replace(&mut self.dir, dir.map(Path::to_path_buf));
        let r = self.run_commands_in(file, dir, commands, out);
        self.dir = outer;
        r
    }

    fn run_commands_in(
        &mut self,
        file: &str,
        dir: Option<&Path>,
        commands: &[Located],
        out: &mut dyn Write,
    ) -> Result<Flow, ConfigError> {
        let mut first_error = None;
        for c in commands {
            if let Some(done) = self.run_one(file, dir, c, out, &mut first_error) {
                return done;
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(Flow::Continue),
        }
    }

    /// Runs one command; `Some` when the file ends here (`quit`, or an error without `-k`).
    fn run_one(
        &mut self,
        file: &str,
        dir: Option<&Path>,
        c: &Located,
        out: &mut dyn Write,
        first_error: &mut Option<ConfigError>,
    ) -> Option<Result<Flow, ConfigError>> {
        // A stop wins over the rest of the file (whoever sent it is told where it ended).
        if self.aborted() {
            let e = CommandError::stopping(c.line, STOPPING).in_file(file);
            if self.keep_going {
                self.errors.push(e.clone());
            }
            return Some(Err(e));
        }
        // User-space components that asked to join while this file runs join between its
        // commands (its lines after `loadusr PROG` may use them).
        self.serve_user_inbox();
        if self.echo {
            let _ = writeln!(out, "{}", c.text);
        }
        let result = match &c.command {
            Command::Source { file: f } => self.run_source(file, dir, f, out),
            command => {
                // A failed command changes nothing (halcmd checks a whole `net` before
                // linking any pin), so an interactive session or `-k` goes on from a clean state.
                let live = self.backend.live().is_some();
                let opaque =
                    self.check_only && self.model.loaded.iter().any(|l| l.module.is_some());
                // (Checking only after a module, a failed lookup below changed nothing either.)
                let before = (self.rollback || self.keep_going || live).then(|| self.model.clone());
                let mut done = self.exec(file, c.line, command, out);
                // Checking only, after a LinuxCNC module: a name the model does not know may be
                // one the module makes. Not checked, listed, and the model stays as it was.
                match &done {
                    Err(e) if opaque && e.kind == CommandErrorKind::UnknownName => {
                        self.unchecked.push(ConfigError::at(
                            file,
                            e.line,
                            format!(
                                "not checked: {} (it may be made by a LinuxCNC module loaded \
                                 above: --check does not run module code)",
                                e.message
                            ),
                        ));
                        if let Some(b) = &before {
                            self.model = b.clone();
                        }
                        done = Ok(Flow::Continue);
                    }
                    _ => {}
                }
                // Attached to a running instance: make the same change there.
                if let (Ok(_), Some(b), true) = (&done, &before, live) {
                    if let Err(e) = self.sync(b, c.line) {
                        done = Err(e);
                    }
                }
                done.map_err(|mut e| {
                    if let Some(mut before) = before {
                        before.keep_users_from(&self.model);
                        self.model = before;
                    }
                    // A command that failed once the instance was stopping (`loadusr -w` and
                    // `waitusr` give up then) failed because of the stop; a runtime that could not
                    // start says why itself.
                    if e.kind != CommandErrorKind::RuntimeStart && self.aborted() {
                        e.kind = CommandErrorKind::Stopping;
                    }
                    e.in_file(file)
                })
            }
        };
        match result {
            Ok(Flow::Quit) => return Some(Ok(Flow::Quit)),
            Ok(Flow::Continue) => {}
            Err(e) if self.keep_going => {
                if !self.errors.contains(&e) {
                    self.errors.push(e.clone());
                }
                first_error.get_or_insert(e);
            }
            Err(e) => return Some(Err(e)),
        }
        None
    }

    fn run_source(
        &mut self,
        file: &str,
        dir: Option<&Path>,
        name: &Word,
        out: &mut dyn Write,
    ) -> Result<Flow, ConfigError> {
        let at = |m: String| ConfigError::at(file, name.line, m);
        if self.depth >= MAX_SOURCE_DEPTH {
            return Err(at(format!(
                "source {}: files nested more than {MAX_SOURCE_DEPTH} deep; does a file source itself?",
                quote(&name.text)
            )));
        }
        let path: PathBuf = match dir {
            Some(d) if Path::new(&name.text).is_relative() => d.join(&name.text),
            _ => PathBuf::from(&name.text),
        };
        let shown = path.display().to_string();
        let text = read_text(&path, &shown)
            .map_err(|e| at(format!("source {}: {}", quote(&name.text), e.message)))?;
        self.depth += 1;
        let result = self.run_text(&shown, path.parent(), &text, 1, out);
        self.depth -= 1;
        result
    }

    /// Emits the model to `target`: threads, components (every `setp` value as the initial value),
    /// signals and links, `sets` values, and each thread's run list in its final order.
    pub fn apply_to(&self, target: &mut dyn Target) -> Result<(), ConfigError> {
        let m = &self.model;
        let err = |o: &Origin, message: String| ConfigError::at(&o.file, o.line, message);
        for t in &m.threads {
            target
                .thread(&t.spec)
                .map_err(|e| err(&t.origin, e.message))?;
        }
        let mut presets = Presets::new();
        for (name, value) in &m.values {
            if !m.pin_signal.contains_key(name) {
                presets.insert(name.clone(), value.to_string());
            }
        }
        for l in &m.loaded {
            // A check runs no module code.
            if self.check_only && l.module.is_some() {
                continue;
            }
            let loaded = l.load_into(&self.registry, &self.modules, target, &presets);
            loaded.map_err(|e| err(&l.origin, format!("loadrt {}: {}", l.component, e.message)))?;
        }
        for (name, s) in &m.signals {
            let hal = target.hal();
            if s.pins.is_empty() {
                hal.signal(name, s.ty)
                    .map_err(|e| err(&s.origin, e.to_string()))?;
            }
            for p in &s.pins {
                hal.net(name, p)
                    .map_err(|e| err(&s.origin, format!("net {name}: {e}")))?;
            }
            if let Some(v) = s.value {
                if m.writer(name).is_none() {
                    hal.set_signal(name, v)
                        .map_err(|e| err(&s.origin, format!("sets {name}: {e}")))?;
                }
            }
        }
        for t in &m.threads {
            for f in &t.functs {
                target
                    .addf(f, &t.spec.name, None)
                    .map_err(|e| err(&t.origin, format!("addf {f}: {}", e.message)))?;
            }
        }
        Ok(())
    }

    fn add_thread(
        &mut self,
        spec: ThreadSpec,
        origin: Origin,
        from_loadrt: bool,
    ) -> Result<(), String> {
        if let Some(e) = invalid_name("thread name", &spec.name) {
            return Err(e);
        }
        if self.model.threads.iter().any(|t| t.spec.name == spec.name) {
            return Err(format!("duplicate thread name '{}'", spec.name));
        }
        let mut d = Declared::default();
        d.thread_health(&spec.name);
        self.model.merge(d, &[], "rtapi");
        self.model.threads.push(ThreadInfo {
            spec,
            origin,
            functs: Vec::new(),
            from_loadrt,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
