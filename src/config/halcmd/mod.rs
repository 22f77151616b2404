//! The `.hal` language as halcmd reads it, and a [`Session`] that executes it.
//!
//! - `lex`: comments, continuations, `$VAR`/`[SECTION]KEY` substitution, quoting;
//! - [`ini`]: LinuxCNC INI files;
//! - `parse`: every halcmd command into a `Command`;
//! - this module: executing commands against a **netlist model** kept in the config layer — which
//!   components are loaded (their pins, params and functions learnt from a dry load), pin → signal
//!   links, signal types and values, each thread's function list, aliases. The model can unlink,
//!   delete and reorder (unlinkp, delsig, delf, unloadrt), which the append-only HAL builder cannot;
//!   [`Session::apply_to`] emits the final model to a [`Target`] (threads, `loadrt`s with every
//!   `setp` value as the initial value, signals and links, `sets` values, run lists) once the script
//!   is done.
//!
//! Output commands (show, list, getp, gets, ptype, stype, echo, print, status, save without a file,
//! help) write to the `out` given to [`Session::execute`] / [`Session::source`].

pub mod host;
pub mod ini;
mod lex;
mod output;
pub(crate) mod parse;
mod sync;
mod user;
mod usr;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use rtapi_hal::{ParamAccess, PinDir, Value, ValueType};

use super::{invalid_name, read_text, ConfigError};
use crate::components::linuxcnc::{self, ModuleHost};
use crate::components::{
    Declared, Instances, LoadArgs, LoadError, Presets, Registry, Target, Validation,
};
use crate::rt::clock::Nanos;
use crate::rt::units::{check_period, clip, quote};
use crate::runtime::ThreadSpec;
pub use host::{Apply, Host, Live, LiveLoad, NoInstance, ProgramState};
pub use ini::Ini;
pub(crate) use lex::{process_env, Subst, Word};
pub use parse::COMMANDS;
use parse::{AliasKind, Arrow, Command, Located, NetPin};
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

/// Where a model object came from (for errors found when it is emitted).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    file: String,
    line: usize,
}

/// One live `loadrt`.
#[derive(Debug, Clone)]
struct Loaded {
    component: String,
    instances: Instances,
    args: LoadArgs,
    names: Vec<String>,
    /// The arguments as written (for `save`).
    text: String,
    origin: Origin,
    /// A LinuxCNC module: its file, resolved where the `loadrt` was (the `.hal` file's directory).
    module: Option<PathBuf>,
}

impl Loaded {
    /// Loads it into `target`: the LinuxCNC module at its resolved path, or the component by name.
    fn load_into(
        &self,
        registry: &Registry,
        modules: &ModuleHost,
        target: &mut dyn Target,
        presets: &Presets,
    ) -> Result<Vec<String>, LoadError> {
        let declared = &mut Declared::default();
        match &self.module {
            Some(path) => {
                modules.load(target, declared, presets, path, &self.instances, &self.args)
            }
            None => registry.load(
                target,
                declared,
                presets,
                &self.component,
                &self.instances,
                &self.args,
            ),
        }
    }
}

#[derive(Debug, Clone)]
struct PinInfo {
    ty: ValueType,
    dir: PinDir,
    owner: String,
    default: Value,
}

#[derive(Debug, Clone)]
struct ParamInfo {
    ty: ValueType,
    access: ParamAccess,
    owner: String,
    default: Value,
}

#[derive(Debug, Clone)]
struct SigInfo {
    ty: ValueType,
    /// Set by `sets` (or inherited from an IO pin's value); cleared when an OUT pin joins.
    value: Option<Value>,
    /// Linked pins in link order.
    pins: Vec<String>,
    origin: Origin,
}

#[derive(Debug, Clone)]
struct ThreadInfo {
    spec: ThreadSpec,
    origin: Origin,
    functs: Vec<String>,
    /// Created by `loadrt threads` (unloadrt threads removes it; save writes it).
    from_loadrt: bool,
}

/// The netlist model.
#[derive(Debug, Clone, Default)]
struct Model {
    loaded: Vec<Loaded>,
    pins: BTreeMap<String, PinInfo>,
    params: BTreeMap<String, ParamInfo>,
    /// Function → owner instance.
    functions: BTreeMap<String, String>,
    /// Own values of pins and params given by setp (or kept by unlinkp).
    values: HashMap<String, Value>,
    pin_signal: HashMap<String, String>,
    signals: BTreeMap<String, SigInfo>,
    threads: Vec<ThreadInfo>,
    /// (kind, alias) → original name.
    aliases: BTreeMap<(AliasKind, String), String>,
    instances: usize,
    /// User-space components present in the running instance (`user.rs`), in arrival order.
    user: Vec<user::UserComponent>,
}

type Step = Result<Flow, (usize, String)>;

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
    modules: ModuleHost,
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
    host: H,
    /// User-space components waiting to join while the session is busy (`user.rs`).
    inbox: std::sync::Arc<user::UserInbox>,
    /// The directory of the file whose commands run now (relative module paths start there).
    dir: Option<PathBuf>,
    /// Only checking (`halrun --check`): LinuxCNC modules are checked from their files, never run.
    check_only: bool,
    /// Set when a command failed on a name the model does not know (see [`Session::unchecked`]).
    unknown_name: std::cell::Cell<bool>,
    /// Set by a `start` whose runtime failed: its error is a runtime failure, not the file's.
    start_failed_at_run_time: std::cell::Cell<bool>,
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
        Session::with_host(registry, instance, NoInstance)
    }
}

impl<H: Host> Session<H> {
    /// Loads a component (native or a LinuxCNC module) into a scratch HAL that is never built, to
    /// learn the instance names and the pins and params it declares.
    fn dry_load(
        &self,
        component: &str,
        instances: &Instances,
        args: &LoadArgs,
    ) -> Result<(Vec<String>, Declared), crate::components::LoadError> {
        let mut scratch = Validation::new(&self.instance)?;
        let mut declared = Declared::default();
        let names = self.registry.load(
            &mut scratch,
            &mut declared,
            &Presets::new(),
            component,
            instances,
            args,
        )?;
        Ok((names, declared))
    }

    /// [`dry_load`](Self::dry_load) of a LinuxCNC module file.
    fn dry_load_module(
        &self,
        path: &Path,
        instances: &Instances,
        args: &LoadArgs,
    ) -> Result<(Vec<String>, Declared), crate::components::LoadError> {
        let mut scratch = Validation::new(&self.instance)?;
        let mut declared = Declared::default();
        let names = self.modules.load(
            &mut scratch,
            &mut declared,
            &Presets::new(),
            path,
            instances,
            args,
        )?;
        Ok((names, declared))
    }

    /// A `loadrt` may not reuse a component name (real-time or user-space) or a pin or param name.
    fn check_new_names(
        &self,
        line: usize,
        c: &str,
        names: &[String],
        declared: &Declared,
    ) -> Result<(), (usize, String)> {
        for name in names {
            if self.model.loaded.iter().any(|l| l.names.contains(name))
                || self.model.user.iter().any(|u| &u.name == name)
            {
                return Err((
                    line,
                    format!(
                        "loadrt {c}: a component named '{name}' already exists; give this one \
                         another name (names=…) or unloadrt that one first"
                    ),
                ));
            }
        }
        if let Some(dup) = declared
            .pins
            .keys()
            .chain(declared.params.keys())
            .find(|n| self.model.pins.contains_key(*n) || self.model.params.contains_key(*n))
        {
            return Err((
                line,
                format!("loadrt {c}: a pin or param named '{dup}' already exists"),
            ));
        }
        Ok(())
    }
    /// An empty session for instance `instance` (checked as a HAL name) whose changes also go to
    /// `host`.
    pub fn with_host(registry: Registry, instance: &str, host: H) -> Result<Self, ConfigError> {
        if let Some(e) = invalid_name("instance", instance) {
            return Err(ConfigError::file("<session>", e));
        }
        Ok(Session {
            registry,
            modules: ModuleHost::new(),
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
            host,
            inbox: Default::default(),
            dir: None,
            check_only: false,
            unknown_name: std::cell::Cell::new(false),
            start_failed_at_run_time: std::cell::Cell::new(false),
            unchecked: Vec::new(),
            abort: Vec::new(),
        })
    }

    /// The session's LinuxCNC module host (its search path, for completion and messages).
    pub fn modules(&self) -> &ModuleHost {
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

    /// The host the session's changes go to.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The host, to change.
    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// Marks the script as started (an instance started from this session's model by its owner,
    /// then attached to the host): halrun then keeps running.
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
    /// waiting command stops waiting (see [`aborted`](Self::aborted)).
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
            || self.host.live().is_some_and(|l| l.stopping())
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
            let e = ConfigError::at(file, c.line, STOPPING);
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
                let live = self.host.live().is_some();
                let opaque =
                    self.check_only && self.model.loaded.iter().any(|l| l.module.is_some());
                // (Checking only after a module, a failed lookup below changed nothing either.)
                let before = (self.rollback || self.keep_going || live).then(|| self.model.clone());
                self.unknown_name.set(false);
                let mut done = self.exec(file, c.line, command, out);
                // Checking only, after a LinuxCNC module: a name the model does not know may be
                // one the module makes. Not checked, listed, and the model stays as it was.
                if let (Err((line, m)), true, true) = (&done, opaque, self.unknown_name.get()) {
                    self.unchecked.push(ConfigError::at(
                        file,
                        *line,
                        format!(
                            "not checked: {m} (it may be made by a LinuxCNC module loaded above: \
                             --check does not run module code)"
                        ),
                    ));
                    if let Some(b) = &before {
                        self.model = b.clone();
                    }
                    done = Ok(Flow::Continue);
                }
                // Attached to a running instance: make the same change there.
                if let (Ok(_), Some(b), true) = (&done, &before, live) {
                    if let Err(m) = self.sync(b) {
                        done = Err((c.line, m));
                    }
                }
                done.map_err(|(line, m)| {
                    if let Some(mut before) = before {
                        before.keep_users_from(&self.model);
                        self.model = before;
                    }
                    let mut e = ConfigError::at(file, line, m);
                    e.runtime = self.start_failed_at_run_time.take();
                    e
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

    fn exec(&mut self, file: &str, line: usize, command: &Command, out: &mut dyn Write) -> Step {
        let origin = Origin {
            file: file.to_string(),
            line,
        };
        let done = Ok(Flow::Continue);
        match command {
            Command::Loadrt {
                component,
                instances,
                args,
                text,
            } => self.loadrt(component, instances, args, text, origin)?,
            Command::Unloadrt { component } => self.unloadrt(component)?,
            Command::Loadusr {
                flags,
                program,
                args,
            } => self.loadusr(flags, program, args)?,
            Command::Waitusr {
                name,
                ignore_status,
            } => self.waitusr(name, *ignore_status)?,
            Command::Unloadusr { name } => self.unloadusr(name)?,
            // `unload`: a user-space component's program, or a real-time component; `all` both.
            Command::Unload { name } => {
                if name.text == "all" {
                    self.unloadusr(name)?;
                    self.unloadrt(name)?;
                } else if self.model.user.iter().any(|u| u.name == name.text) {
                    self.unloadusr(name)?;
                } else {
                    self.unloadrt(name)?;
                }
            }
            Command::Newsig { name, ty } => {
                if let Some(e) = invalid_name("signal", &name.text) {
                    return Err((name.line, format!("newsig: {e}")));
                }
                if self.model.signals.contains_key(&name.text) {
                    return Err((
                        name.line,
                        format!(
                            "newsig: a signal named {} already exists; pick another name, or \
                             delsig it first",
                            quote(&name.text)
                        ),
                    ));
                }
                self.model.signals.insert(
                    name.text.clone(),
                    SigInfo {
                        ty: *ty,
                        value: None,
                        pins: Vec::new(),
                        origin,
                    },
                );
            }
            Command::Delsig { name } => {
                let names: Vec<String> = if name.text == "all" {
                    self.model.signals.keys().cloned().collect()
                } else {
                    self.signal(name, "delsig")?;
                    vec![name.text.clone()]
                };
                for n in names {
                    self.model.delete_signal(&n);
                }
            }
            Command::Sets { signal, value } => self.sets(signal, value)?,
            Command::Gets { signal } => {
                let v = output::shown_value(self.signal_value(self.signal(signal, "gets")?));
                let _ = writeln!(out, "{v}");
            }
            Command::Stype { name } => {
                let ty = self.model.signals[self.signal(name, "stype")?].ty;
                let _ = writeln!(out, "{ty}");
            }
            Command::Link { pin, signal } => {
                let sig = self.signal(signal, "linkps")?.to_string();
                let p = self.pin(pin, "linkps")?;
                // LinuxCNC 2.9 refuses to move a linked pin (whatever its man page says).
                if let Some(on) = self.model.pin_signal.get(&p).filter(|on| **on != sig) {
                    return Err((
                        pin.line,
                        format!("linkps: pin '{p}' is linked to '{on}'; unlinkp it first to link it to '{sig}'"),
                    ));
                }
                self.link(&sig, &p, None, None, pin.line)?;
            }
            Command::Linkpp { first, second } => {
                let a = self.pin(first, "linkpp")?;
                let b = self.pin(second, "linkpp")?;
                for (p, w) in [(&a, first), (&b, second)] {
                    if let Some(on) = self.model.pin_signal.get(p).filter(|on| **on != a) {
                        return Err((
                            w.line,
                            format!("linkpp: pin '{p}' is linked to '{on}'; unlinkp it first"),
                        ));
                    }
                }
                let ty = self.model.pins[&a].ty;
                if !self.model.signals.contains_key(&a) {
                    self.model.signals.insert(
                        a.clone(),
                        SigInfo {
                            ty,
                            value: None,
                            pins: Vec::new(),
                            origin,
                        },
                    );
                }
                self.link(&a, &a, None, None, first.line)?;
                self.link(&a, &b, None, None, second.line)?;
            }
            Command::Net { signal, pins } => self.net(signal, pins, origin)?,
            Command::Unlinkp { pin } => {
                let p = self.pin(pin, "unlinkp")?;
                self.model.unlink(&p);
            }
            Command::Setp { name, value } => self.setp(name, value)?,
            Command::Getp { name } => {
                let (full, _) = self.pin_or_param(name, "getp")?;
                let v = output::shown_value(self.value_of(&full));
                let _ = writeln!(out, "{v}");
            }
            Command::Ptype { name } => {
                let (full, is_param) = self.pin_or_param(name, "ptype")?;
                let ty = if is_param {
                    self.model.params[&full].ty
                } else {
                    self.model.pins[&full].ty
                };
                let _ = writeln!(out, "{ty}");
            }
            Command::Addf {
                function,
                thread,
                position,
            } => self.addf(function, thread, *position)?,
            Command::Delf { function, thread } => self.delf(function, thread.as_ref())?,
            Command::Alias { kind, name, alias } => self.alias(*kind, name, alias)?,
            Command::Unalias { kind, alias } => {
                if self
                    .model
                    .aliases
                    .remove(&(*kind, alias.text.clone()))
                    .is_none()
                {
                    return Err((
                        alias.line,
                        format!(
                            "unalias: no {} alias named {} (`list alias` shows the aliases)",
                            kind.as_str(),
                            quote(&alias.text)
                        ),
                    ));
                }
            }
            Command::Show { kind, patterns } => {
                let text = output::show(self, kind.as_ref(), patterns)
                    .map_err(|m| (kind.as_ref().map_or(line, |w| w.line), m))?;
                let _ = out.write_all(text.as_bytes());
            }
            Command::List { kind, patterns } => {
                let text = output::list(self, kind, patterns).map_err(|m| (kind.line, m))?;
                let _ = writeln!(out, "{text}");
            }
            Command::Save { item, file } => {
                let text = output::save(self, item.as_ref())
                    .map_err(|m| (item.as_ref().map_or(line, |w| w.line), m))?;
                match file {
                    None => {
                        let _ = out.write_all(text.as_bytes());
                    }
                    Some(f) => std::fs::write(&f.text, text).map_err(|e| {
                        (
                            f.line,
                            format!("save: cannot write {}: {e}", quote(&f.text)),
                        )
                    })?,
                }
            }
            Command::Source { file: f } => {
                return Err((
                    f.line,
                    "source: only runs inside a session's file list".to_string(),
                ))
            }
            Command::Echo => self.echo = true,
            Command::Unecho => self.echo = false,
            Command::Print { message } => {
                let _ = writeln!(out, "{file}:{line}: {message}");
            }
            Command::Status => {
                let _ = out.write_all(output::status(self).as_bytes());
            }
            Command::Lock | Command::Unlock | Command::Debug => {}
            Command::Start => {
                if self.host.live().is_none() {
                    // The host builds the instance from the model and starts it (halrun's way).
                    let mut host = std::mem::take(&mut self.host);
                    let started = host.start(&|target| self.apply_to(target));
                    self.host = host;
                    if let Some(Err(e)) = started {
                        // The file is right; the runtime could not do it: not bad usage.
                        let at_run_time = matches!(e, crate::config::StartError::Runtime(_));
                        self.start_failed_at_run_time.set(at_run_time);
                        return Err((line, format!("start: {e}")));
                    }
                }
                self.run_functions(true);
                self.started = true;
            }
            Command::Stop => {
                self.run_functions(false);
                self.started = false;
            }
            Command::Help { command } => {
                let _ = out.write_all(output::help(command.as_deref()).as_bytes());
            }
            Command::Quit => return Ok(Flow::Quit),
        }
        done
    }

    // ---- name lookups -------------------------------------------------------------------------

    fn signal<'w>(&self, name: &'w Word, cmd: &str) -> Result<&'w str, (usize, String)> {
        if self.model.signals.contains_key(&name.text) {
            Ok(&name.text)
        } else {
            self.unknown_name.set(true);
            let known = self.model.signals.keys().map(String::as_str);
            let hint = crate::suggest::did_you_mean(&name.text, known).unwrap_or_else(|| {
                "signals are created by net (or newsig) above this line".to_string()
            });
            Err((
                name.line,
                format!("{cmd}: no signal named {}; {hint}", quote(&name.text)),
            ))
        }
    }

    fn resolve(&self, kind: AliasKind, name: &str) -> String {
        self.model
            .aliases
            .get(&(kind, name.to_string()))
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    fn pin(&self, name: &Word, cmd: &str) -> Result<String, (usize, String)> {
        let full = self.resolve(AliasKind::Pin, &name.text);
        if self.model.pins.contains_key(&full) {
            return Ok(full);
        }
        let message = if self.model.params.contains_key(&full) {
            format!(
                "{cmd}: {} is a param, not a pin; params are set with setp",
                quote(&name.text)
            )
        } else {
            format!("{cmd}: {}", self.unknown("pin", &name.text))
        };
        Err((name.line, message))
    }

    /// A param (preferred, as halcmd does) or a pin: the full name and whether it is a param.
    fn pin_or_param(&self, name: &Word, cmd: &str) -> Result<(String, bool), (usize, String)> {
        let param = self.resolve(AliasKind::Param, &name.text);
        if self.model.params.contains_key(&param) {
            return Ok((param, true));
        }
        let pin = self.resolve(AliasKind::Pin, &name.text);
        if self.model.pins.contains_key(&pin) {
            return Ok((pin, false));
        }
        Err((
            name.line,
            format!("{cmd}: {}", self.unknown("pin or param", &name.text)),
        ))
    }

    /// "no pin X" with the nearest names ([`crate::suggest`]), else where to see what its component
    /// has, or who creates it in LinuxCNC.
    fn unknown(&self, what: &str, name: &str) -> String {
        self.unknown_name.set(true);
        let pins = self.model.pins.keys().filter(|_| what != "param");
        let params = self.model.params.keys().filter(|_| what != "pin");
        let known = pins.chain(params).map(String::as_str);
        if let Some(hint) = crate::suggest::did_you_mean(name, known) {
            return format!("no {what} named {}; {hint}", quote(name));
        }
        let prefix = name.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
        let has = |n: &&String| {
            n.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('.'))
        };
        if !prefix.is_empty()
            && (self.model.pins.keys().any(|n| has(&n))
                || self.model.params.keys().any(|n| has(&n)))
        {
            return format!(
                "no {what} named {}; `show pin {p}` and `show param {p}` list what {p} has",
                quote(name),
                p = clip(prefix),
            );
        }
        match output::linuxcnc_creator(name) {
            Some(who) => format!(
                "no {what} named {}; in LinuxCNC it is created by {who}, which rtapi's halrun does not host: run the whole machine with `rtapi linuxcnc INI`",
                quote(name)
            ),
            None => format!(
                "no {what} named {}; is its component loaded (loadrt) above this line?",
                quote(name)
            ),
        }
    }

    // ---- structural commands ------------------------------------------------------------------

    fn loadrt(
        &mut self,
        component: &Word,
        instances: &Instances,
        args: &BTreeMap<String, String>,
        text: &str,
        origin: Origin,
    ) -> Result<(), (usize, String)> {
        let line = origin.line;
        let c = clip(&component.text);
        if component.text == "threads" {
            return self.loadrt_threads(instances, args, origin);
        }
        let native = self.registry.get(&component.text).is_some();
        match self
            .modules
            .resolve(&component.text, native, self.dir.as_deref())
        {
            linuxcnc::Resolved::Module { path, explicit } => {
                return self
                    .loadrt_module(component, &path, instances, args, text, origin, explicit)
            }
            linuxcnc::Resolved::Missing { message } => {
                return Err((component.line, format!("loadrt {c}: {message}")))
            }
            linuxcnc::Resolved::Native | linuxcnc::Resolved::Unknown => {}
        }
        if let Some(e) = invalid_name("component", &component.text) {
            return Err((component.line, format!("loadrt: {e}")));
        }
        let Some(entry) = self.registry.get(&component.text) else {
            return Err((
                component.line,
                output::not_available(&self.registry, &self.modules, &component.text),
            ));
        };
        let (instances, args) = linuxcnc_args(&component.text, entry.args, instances, args)
            .map_err(|m| (line, format!("loadrt {c}: {m}")))?;
        let n = match &instances {
            Instances::Count(n) => *n,
            Instances::Names(names) => names.len(),
        };
        if self.model.instances + n > MAX_COMPONENT_INSTANCES {
            return Err((
                line,
                format!(
                    "loadrt {c}: {n} more instances would make {}; a machine may load at most {MAX_COMPONENT_INSTANCES} component instances",
                    self.model.instances + n
                ),
            ));
        }
        let (names, declared) = self
            .dry_load(&component.text, &instances, &args)
            .map_err(|e| (line, format!("loadrt {c}: {}", e.message)))?;
        self.check_new_names(line, &c, &names, &declared)?;
        self.model.merge(declared, &names, "");
        self.model.instances += n;
        self.model.loaded.push(Loaded {
            component: component.text.clone(),
            instances,
            args,
            names,
            text: text.to_string(),
            origin,
            module: None,
        });
        Ok(())
    }

    /// `loadrt` of a LinuxCNC module (`components::linuxcnc`): its arguments, `count=`/`names=`
    /// included, are its own; its `rtapi_app_main` says which components, pins and functions it makes.
    /// Found by fallback (`explicit` false), a module that cannot run here is reported as a component
    /// rtapi does not have, with the reason.
    #[allow(clippy::too_many_arguments)]
    fn loadrt_module(
        &mut self,
        component: &Word,
        path: &Path,
        instances: &Instances,
        args: &BTreeMap<String, String>,
        text: &str,
        origin: Origin,
        explicit: bool,
    ) -> Result<(), (usize, String)> {
        let line = origin.line;
        let c = clip(&component.text);
        let args = LoadArgs { args: args.clone() };
        if self
            .model
            .loaded
            .iter()
            .any(|l| l.module.as_deref() == Some(path))
        {
            let module = path.file_stem().unwrap_or_default().to_string_lossy();
            return Err((
                line,
                format!(
                    "loadrt {c}: LinuxCNC module {module} is already loaded (unloadrt it first)"
                ),
            ));
        }
        let loaded = if self.check_only {
            self.modules
                .check_static(path, instances, &args)
                .map(|()| (Vec::new(), Declared::default()))
        } else {
            self.dry_load_module(path, instances, &args)
        };
        let (names, declared) = loaded.map_err(|e| {
            if e.is_unavailable() && !explicit {
                (
                    component.line,
                    format!(
                        "{}; {}",
                        output::not_available(&self.registry, &self.modules, &component.text),
                        e.message
                    ),
                )
            } else {
                (line, format!("loadrt {c}: {}", e.message))
            }
        })?;
        let n = names.len();
        if self.model.instances + n > MAX_COMPONENT_INSTANCES {
            return Err((
                line,
                format!(
                    "loadrt {c}: {n} more components would make {}; a machine may load at most {MAX_COMPONENT_INSTANCES} component instances",
                    self.model.instances + n
                ),
            ));
        }
        self.check_new_names(line, &c, &names, &declared)?;
        let fallback = names.first().cloned().unwrap_or_default();
        self.model.merge(declared, &names, &fallback);
        self.model.instances += n;
        self.model.loaded.push(Loaded {
            component: component.text.clone(),
            instances: instances.clone(),
            args,
            names,
            text: text.to_string(),
            origin,
            module: Some(path.to_path_buf()),
        });
        Ok(())
    }

    /// `loadrt threads name1=… period1=… [fp1=…] name2=…`: up to three threads, periods in ns.
    fn loadrt_threads(
        &mut self,
        instances: &Instances,
        args: &BTreeMap<String, String>,
        origin: Origin,
    ) -> Result<(), (usize, String)> {
        let line = origin.line;
        if *instances != Instances::Count(0) {
            return Err((
                line,
                "loadrt threads: takes name1= period1= [fp1=] … name3= period3=, not count= or names="
                    .to_string(),
            ));
        }
        if let Some(bad) = args.keys().find(|k| {
            !matches!(
                k.as_str(),
                "name1"
                    | "name2"
                    | "name3"
                    | "period1"
                    | "period2"
                    | "period3"
                    | "fp1"
                    | "fp2"
                    | "fp3"
            )
        }) {
            return Err((
                line,
                format!("loadrt threads: unknown argument {}; it takes name1= period1= [fp1=] up to name3= period3=", quote(bad)),
            ));
        }
        let mut specs = Vec::new();
        for i in 1..=3 {
            let name = args.get(&format!("name{i}"));
            let period = args.get(&format!("period{i}"));
            match (name, period) {
                (None, None) => {}
                (Some(_), None) | (None, Some(_)) => {
                    return Err((
                        line,
                        format!("loadrt threads: give both name{i}= and period{i}= (nanoseconds)"),
                    ))
                }
                (Some(name), Some(period)) => {
                    let ns: i64 = period.trim().parse().map_err(|_| {
                        (
                            line,
                            format!(
                                "loadrt threads: period{i}={} is not a whole number of nanoseconds",
                                quote(period)
                            ),
                        )
                    })?;
                    let p = check_period(Nanos::from_nanos(ns))
                        .map_err(|m| (line, format!("loadrt threads: thread {name}: {m}")))?;
                    specs.push(ThreadSpec::new(name, p));
                }
            }
        }
        if specs.is_empty() {
            return Err((
                line,
                "loadrt threads: name at least one thread: name1=servo-thread period1=1000000"
                    .to_string(),
            ));
        }
        for spec in specs {
            self.add_thread(spec, origin.clone(), true)
                .map_err(|m| (line, format!("loadrt threads: {m}")))?;
        }
        Ok(())
    }

    fn unloadrt(&mut self, component: &Word) -> Result<(), (usize, String)> {
        let all = component.text == "all";
        let mut found = false;
        if all || component.text == "threads" {
            let gone: Vec<String> = self
                .model
                .threads
                .iter()
                .filter(|t| t.from_loadrt)
                .map(|t| t.spec.name.clone())
                .collect();
            found |= !gone.is_empty();
            for t in gone {
                self.model.remove_thread(&t);
            }
        }
        let gone: Vec<Loaded> = self
            .model
            .loaded
            .iter()
            .filter(|l| {
                all || l.component == component.text
                    // A module checked without running it: its components are not known, its name is.
                    || (l.names.is_empty()
                        && l.module.as_deref().and_then(Path::file_stem)
                            == Some(std::ffi::OsStr::new(&component.text)))
            })
            .cloned()
            .collect();
        found |= !gone.is_empty();
        for l in gone {
            self.model.unload(&l);
        }
        if !found && !all {
            return Err((
                component.line,
                format!(
                    "unloadrt: no component {} is loaded",
                    quote(&component.text)
                ),
            ));
        }
        Ok(())
    }

    fn net(
        &mut self,
        signal: &Word,
        pins: &[NetPin],
        origin: Origin,
    ) -> Result<(), (usize, String)> {
        if let Some(e) = invalid_name("signal", &signal.text) {
            return Err((signal.line, format!("net: {e}")));
        }
        if self
            .model
            .pins
            .contains_key(&self.resolve(AliasKind::Pin, &signal.text))
        {
            return Err((
                signal.line,
                format!(
                    "net: '{}' is a pin, but the first word names the signal: net SIGNAL PIN [PIN ...]",
                    signal.text
                ),
            ));
        }
        for p in pins {
            let name = self.pin(&p.pin, &format!("net {}", signal.text))?;
            if !self.model.signals.contains_key(&signal.text) {
                let ty = self.model.pins[&name].ty;
                self.model.signals.insert(
                    signal.text.clone(),
                    SigInfo {
                        ty,
                        value: None,
                        pins: Vec::new(),
                        origin: origin.clone(),
                    },
                );
            }
            if let Some(on) = self.model.pin_signal.get(&name) {
                if *on == signal.text {
                    continue;
                }
                return Err((
                    p.pin.line,
                    format!(
                        "net {}: pin '{name}' is already connected to signal '{on}'; a pin is on at most one signal (unlinkp it first)",
                        signal.text
                    ),
                ));
            }
            self.link(
                &signal.text,
                &name,
                p.arrow_before,
                p.arrow_after,
                p.pin.line,
            )?;
        }
        Ok(())
    }

    /// Links pin `name` to existing signal `signal`, with the checks the HAL builder makes and the
    /// `net` arrows against the pin's direction.
    fn link(
        &mut self,
        signal: &str,
        name: &str,
        before: Option<Arrow>,
        after: Option<Arrow>,
        line: usize,
    ) -> Result<(), (usize, String)> {
        if self.model.pin_signal.get(name).map(String::as_str) == Some(signal) {
            return Ok(());
        }
        let PinInfo { ty, dir, .. } = self.model.pins[name].clone();
        let reader = matches!(dir, PinDir::In | PinDir::Io);
        let writer = matches!(dir, PinDir::Out | PinDir::Io);
        let check = |arrow: Option<Arrow>, before: bool| -> Option<String> {
            let (ok, role) = match (arrow?, before) {
                (Arrow::Out, true) | (Arrow::In, false) => (reader, "a reader (IN or I/O)"),
                (Arrow::Out, false) | (Arrow::In, true) => (writer, "a writer (OUT or I/O)"),
                (Arrow::Both, _) => (dir == PinDir::Io, "an I/O pin"),
            };
            (!ok).then(|| {
                let side = if before { "before" } else { "after" };
                format!(
                    "net {signal}: '{name}' is {} but the '{}' {side} it needs {role}",
                    output::dir_word(dir),
                    arrow.map_or("", Arrow::as_str),
                )
            })
        };
        if let Some(m) = check(before, true).or_else(|| check(after, false)) {
            return Err((line, m));
        }
        let s = &self.model.signals[signal];
        if s.ty != ty {
            return Err((
                line,
                format!(
                    "cannot net pin '{name}' ({ty}) to signal '{signal}' ({}): types must match; use a conversion component between them",
                    s.ty
                ),
            ));
        }
        let writer_pin = self.model.writer(signal);
        let has_io = s.pins.iter().any(|p| self.model.pins[p].dir == PinDir::Io);
        match dir {
            PinDir::Out => {
                if let Some(w) = writer_pin {
                    return Err((
                        line,
                        format!("cannot net OUT pin '{name}' to signal '{signal}': it already has writer '{w}'; a signal has exactly one OUT pin"),
                    ));
                }
                if has_io {
                    return Err((
                        line,
                        format!("cannot net pin '{name}' to signal '{signal}': a signal may have one OUT pin or any number of IO pins, not both"),
                    ));
                }
            }
            PinDir::Io if writer_pin.is_some() => {
                return Err((
                    line,
                    format!("cannot net pin '{name}' to signal '{signal}': a signal may have one OUT pin or any number of IO pins, not both"),
                ))
            }
            _ => {}
        }
        // As in LinuxCNC: the first pin linked gives the signal its value (a `sets` before it is
        // replaced); an OUT pin owns the value from then on.
        let own = self.model.value_of(name);
        let s = self.model.signals.get_mut(signal).expect("checked above");
        if dir == PinDir::Out {
            s.value = None;
        } else if s.pins.is_empty() {
            s.value = Some(own);
        }
        s.pins.push(name.to_string());
        self.model
            .pin_signal
            .insert(name.to_string(), signal.to_string());
        Ok(())
    }

    /// A value a config may set: it parses as the target's type, and a float is finite.
    fn parse_value(ty: ValueType, value: &Word, name: &str) -> Result<Value, (usize, String)> {
        match Value::parse(ty, &value.text, name) {
            Ok(Value::Float(f)) if !f.is_finite() => Err((
                value.line,
                format!(
                    "{} for {name} is not a finite number; give a finite value",
                    quote(&value.text)
                ),
            )),
            Ok(v) => Ok(v),
            Err(e) => Err((value.line, e.to_string())),
        }
    }

    fn setp(&mut self, name: &Word, value: &Word) -> Result<(), (usize, String)> {
        let (n, is_param) = self.pin_or_param(name, "setp")?;
        let ty = if is_param {
            let p = &self.model.params[&n];
            if p.access == ParamAccess::Ro {
                return Err((
                    name.line,
                    format!(
                        "setp {n}: the param is read-only (its component reports through it); \
                     `show param {n}` lists the params that are RW"
                    ),
                ));
            }
            p.ty
        } else {
            let p = &self.model.pins[&n];
            if p.dir == PinDir::Out {
                return Err((
                    name.line,
                    format!("setp {n}: it is an OUT pin, written by its component every period; setp sets IN pins and params"),
                ));
            }
            if let Some(sig) = self.model.pin_signal.get(&n) {
                return Err((
                    name.line,
                    format!("setp {n}: it is connected to signal '{sig}'; set the signal with `sets {sig} VALUE` instead"),
                ));
            }
            p.ty
        };
        let v = Self::parse_value(ty, value, &n).map_err(|(l, m)| (l, format!("setp: {m}")))?;
        self.model.values.insert(n, v);
        Ok(())
    }

    fn sets(&mut self, signal: &Word, value: &Word) -> Result<(), (usize, String)> {
        let n = self.signal(signal, "sets")?.to_string();
        if let Some(w) = self.model.writer(&n) {
            return Err((
                signal.line,
                format!("sets {n}: the signal is driven by OUT pin '{w}' every period; sets only works on signals without a writer"),
            ));
        }
        let ty = self.model.signals[&n].ty;
        let v = Self::parse_value(ty, value, &n).map_err(|(l, m)| (l, format!("sets: {m}")))?;
        self.model.signals.get_mut(&n).expect("checked").value = Some(v);
        Ok(())
    }

    /// The functions `addf NAME` means: NAME itself, or — LinuxCNC's one function for all channels
    /// (`stepgen.make-pulses`) — every instance's `<instance>.<suffix>` of that component, in order.
    fn functions_named(&self, name: &str) -> Vec<String> {
        if self.model.functions.contains_key(name) {
            return vec![name.to_string()];
        }
        let Some((prefix, suffix)) = name.split_once('.') else {
            return Vec::new();
        };
        self.model
            .loaded
            .iter()
            .filter(|l| self.registry.get(&l.component).map(|e| e.prefix) == Some(prefix))
            .flat_map(|l| l.names.iter().map(|i| format!("{i}.{suffix}")))
            .filter(|f| self.model.functions.contains_key(f))
            .collect()
    }

    fn addf(
        &mut self,
        function: &Word,
        thread: &Word,
        position: Option<i64>,
    ) -> Result<(), (usize, String)> {
        let functs = self.functions_named(&function.text);
        if functs.is_empty() {
            self.unknown_name.set(true);
            let known: Vec<&str> = self.model.functions.keys().map(String::as_str).collect();
            let hint = crate::suggest::did_you_mean(&function.text, known.iter().copied())
                .unwrap_or_else(|| {
                    if known.is_empty() {
                        "no component loaded above this line has a function".to_string()
                    } else {
                        format!("loaded functions: {}", known.join(", "))
                    }
                });
            return Err((
                function.line,
                format!("addf: no function named {}; {hint}", quote(&function.text)),
            ));
        }
        let Some(index) = self
            .model
            .threads
            .iter()
            .position(|t| t.spec.name == thread.text)
        else {
            let known: Vec<&str> = self
                .model
                .threads
                .iter()
                .map(|t| t.spec.name.as_str())
                .collect();
            let from = match &self.toml {
                Some(toml) => format!("the [[thread]] tables of {toml}"),
                None => "made by `loadrt threads name1=NAME period1=NS`".to_string(),
            };
            let linuxcnc = if thread.text.ends_with("-thread") {
                "; in LinuxCNC the motion controller (loadrt motmod) creates servo-thread and base-thread, which rtapi's halrun does not host: run the whole machine with `rtapi linuxcnc INI`"
            } else {
                ""
            };
            let listed = if known.is_empty() {
                "none declared".to_string()
            } else {
                known.join(", ")
            };
            let hint = match crate::suggest::did_you_mean(&thread.text, known.iter().copied()) {
                Some(h) => format!("{h} (threads are {from}: {listed})"),
                None => format!("threads are {from}: {listed}{linuxcnc}"),
            };
            return Err((
                thread.line,
                format!(
                    "addf {}: no thread named {}; {hint}",
                    function.text,
                    quote(&thread.text),
                ),
            ));
        };
        for f in &functs {
            if let Some(t) = self.model.threads.iter().find(|t| t.functs.contains(f)) {
                return Err((
                    function.line,
                    format!("addf: function '{f}' is already added to thread '{}'; a function runs in one thread", t.spec.name),
                ));
            }
        }
        let t = &mut self.model.threads[index];
        let len = t.functs.len();
        let at = match position {
            None | Some(-1) => len,
            Some(p) if p > 0 && p.unsigned_abs() - 1 <= len as u64 => p as usize - 1,
            Some(p) if p < 0 && p.unsigned_abs() - 1 <= len as u64 => len + 1 - p.unsigned_abs() as usize,
            Some(p) => {
                return Err((
                    thread.line,
                    format!(
                        "addf {}: position {p} is outside thread '{}', which has {len} function(s) so far",
                        function.text, thread.text
                    ),
                ))
            }
        };
        // What `start` refuses (a thread's run list is fixed-size), refused here, in the same words.
        let n = len + functs.len();
        if n > crate::runtime::runlist::MAX_RUN_LIST {
            return Err((
                function.line,
                format!(
                    "addf {}: thread {}: {}",
                    function.text,
                    thread.text,
                    crate::runtime::runlist::PublishError::TooLong(n)
                ),
            ));
        }
        for (i, f) in functs.into_iter().enumerate() {
            t.functs.insert(at + i, f);
        }
        Ok(())
    }

    fn delf(&mut self, function: &Word, thread: Option<&Word>) -> Result<(), (usize, String)> {
        let functs = self.functions_named(&function.text);
        if functs.is_empty() {
            self.unknown_name.set(true);
            return Err((
                function.line,
                format!(
                    "delf: no function named {} (`show funct` lists them)",
                    quote(&function.text)
                ),
            ));
        }
        for f in functs {
            let t = self
                .model
                .threads
                .iter_mut()
                .find(|t| t.functs.contains(&f));
            match (t, thread) {
                (Some(t), Some(want)) if t.spec.name != want.text => {
                    return Err((
                        want.line,
                        format!(
                            "delf: function '{f}' is in thread '{}', not '{}'",
                            t.spec.name, want.text
                        ),
                    ))
                }
                (Some(t), _) => t.functs.retain(|x| *x != f),
                (None, _) => {
                    return Err((
                        function.line,
                        format!("delf: function '{f}' is not in any thread"),
                    ))
                }
            }
        }
        Ok(())
    }

    fn alias(&mut self, kind: AliasKind, name: &Word, alias: &Word) -> Result<(), (usize, String)> {
        let full = self.resolve(kind, &name.text);
        let exists = match kind {
            AliasKind::Pin => self.model.pins.contains_key(&full),
            AliasKind::Param => self.model.params.contains_key(&full),
        };
        if !exists {
            return Err((
                name.line,
                format!("alias: {}", self.unknown(kind.as_str(), &name.text)),
            ));
        }
        if let Some(e) = invalid_name("alias", &alias.text) {
            return Err((alias.line, format!("alias: {e}")));
        }
        if self.model.pins.contains_key(&alias.text)
            || self.model.params.contains_key(&alias.text)
            || self.model.aliases.keys().any(|(_, a)| *a == alias.text)
        {
            return Err((
                alias.line,
                format!("alias: the name {} is already taken", quote(&alias.text)),
            ));
        }
        // One alias per object: a new one replaces the old.
        self.model
            .aliases
            .retain(|(k, _), orig| !(*k == kind && *orig == full));
        self.model.aliases.insert((kind, alias.text.clone()), full);
        Ok(())
    }
}

impl Model {
    /// Adds a dry load's pins, params and functions, each owned by the longest of `instances` that
    /// prefixes it (or `fallback`).
    fn merge(&mut self, d: Declared, instances: &[String], fallback: &str) {
        let owner = |name: &str| -> String {
            instances
                .iter()
                .filter(|i| name == i.as_str() || name.starts_with(&format!("{i}.")))
                .max_by_key(|i| i.len())
                .cloned()
                .unwrap_or_else(|| fallback.to_string())
        };
        // A declared default, else the type's zero.
        let default = |name: &str, ty: ValueType| {
            d.values
                .get(name)
                .copied()
                .unwrap_or(Value::from_bits(ty, 0))
        };
        for (name, &(ty, dir)) in &d.pins {
            let default = default(name, ty);
            let owner = owner(name);
            let name = name.clone();
            self.pins.insert(
                name,
                PinInfo {
                    ty,
                    dir,
                    owner,
                    default,
                },
            );
        }
        for (name, &(ty, access)) in &d.params {
            let default = default(name, ty);
            let owner = owner(name);
            let name = name.clone();
            self.params.insert(
                name,
                ParamInfo {
                    ty,
                    access,
                    owner,
                    default,
                },
            );
        }
        for (name, instance) in d.functions {
            self.functions.insert(name, instance);
        }
    }

    fn writer(&self, signal: &str) -> Option<&str> {
        self.signals[signal]
            .pins
            .iter()
            .find(|p| self.pins[*p].dir == PinDir::Out)
            .map(String::as_str)
    }

    /// A pin's or param's value: a linked pin reads its signal.
    fn value_of(&self, name: &str) -> Value {
        if let Some(sig) = self.pin_signal.get(name) {
            return self.signal_value(sig);
        }
        if let Some(v) = self.values.get(name) {
            return *v;
        }
        self.pins
            .get(name)
            .map(|p| p.default)
            .or_else(|| self.params.get(name).map(|p| p.default))
            .unwrap_or(Value::Bit(false))
    }

    /// A signal's value before anything runs: its writer's, else the one set, else zero.
    fn signal_value(&self, signal: &str) -> Value {
        let s = &self.signals[signal];
        if let Some(w) = self.writer(signal) {
            return self.values.get(w).copied().unwrap_or(self.pins[w].default);
        }
        s.value.unwrap_or(Value::from_bits(s.ty, 0))
    }

    /// Unlinks a pin; it keeps the signal's last value, as in LinuxCNC.
    fn unlink(&mut self, pin: &str) {
        let Some(sig) = self.pin_signal.get(pin).cloned() else {
            return;
        };
        let v = self.signal_value(&sig);
        self.pin_signal.remove(pin);
        if let Some(s) = self.signals.get_mut(&sig) {
            s.pins.retain(|p| p != pin);
        }
        if self.pins[pin].dir != PinDir::Out {
            self.values.insert(pin.to_string(), v);
        }
    }

    fn delete_signal(&mut self, name: &str) {
        let pins = self
            .signals
            .get(name)
            .map(|s| s.pins.clone())
            .unwrap_or_default();
        for p in pins {
            self.unlink(&p);
        }
        self.signals.remove(name);
    }

    fn remove_thread(&mut self, name: &str) {
        self.threads.retain(|t| t.spec.name != name);
        let prefix = format!("{name}.");
        let health: Vec<String> = self
            .pins
            .keys()
            .chain(self.params.keys())
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect();
        for n in health {
            self.forget(&n);
        }
    }

    /// Drops a pin or param and everything that refers to it.
    fn forget(&mut self, name: &str) {
        self.unlink(name);
        self.pins.remove(name);
        self.params.remove(name);
        self.values.remove(name);
        self.aliases.retain(|_, orig| orig != name);
    }

    fn unload(&mut self, l: &Loaded) {
        let owned = |owner: &str| l.names.iter().any(|n| n == owner);
        let names: Vec<String> = self
            .pins
            .iter()
            .filter(|(_, p)| owned(&p.owner))
            .map(|(n, _)| n.clone())
            .chain(
                self.params
                    .iter()
                    .filter(|(_, p)| owned(&p.owner))
                    .map(|(n, _)| n.clone()),
            )
            .collect();
        let functs: Vec<String> = self
            .functions
            .iter()
            .filter(|(_, o)| owned(o))
            .map(|(f, _)| f.clone())
            .collect();
        for f in &functs {
            self.functions.remove(f);
            for t in &mut self.threads {
                t.functs.retain(|x| x != f);
            }
            // The function's health objects (`<funct>.time`, `.tmax`, …).
            let prefix = format!("{f}.");
            let health: Vec<String> = self
                .pins
                .keys()
                .chain(self.params.keys())
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect();
            for n in health {
                self.forget(&n);
            }
        }
        for n in names {
            self.forget(&n);
        }
        self.instances -= l.names.len();
        self.loaded
            .retain(|x| x.origin != l.origin || x.component != l.component);
    }
}

/// LinuxCNC's `loadrt` arguments mapped onto rtapi's: `num_chan=N` is `count=N` for components that
/// take it; stepgen's `step_type=` and `ctrl_type=` give one instance per value (rtapi's stepgen is
/// step/dir in position mode: type 0, `p`).
fn linuxcnc_args(
    component: &str,
    known: &[&str],
    instances: &Instances,
    args: &BTreeMap<String, String>,
) -> Result<(Instances, LoadArgs), String> {
    let mut args = args.clone();
    let mut instances = instances.clone();
    // `Count(0)`: no count=/names= given (see the parser).
    let explicit = instances != Instances::Count(0);
    let set_count = |key: &str, n: usize, instances: &mut Instances| -> Result<(), String> {
        if explicit && *instances != Instances::Count(n) {
            if let Instances::Names(names) = instances {
                if names.len() == n {
                    return Ok(());
                }
            }
            return Err(format!("{key}= gives {n} channels, but count=/names= gives another number; give one of them"));
        }
        if !explicit {
            *instances = Instances::Count(n);
        }
        Ok(())
    };
    if !known.contains(&"num_chan") {
        if let Some(v) = args.remove("num_chan") {
            let n = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=crate::components::MAX_INSTANCES).contains(n))
                .ok_or_else(|| {
                    format!("num_chan={}: give a positive number of channels", quote(&v))
                })?;
            set_count("num_chan", n, &mut instances)?;
        }
    }
    if component == "stepgen" {
        for key in ["step_type", "ctrl_type"] {
            if let Some(v) = args.remove(key) {
                let values: Vec<&str> = v.split(',').map(str::trim).collect();
                let ok = |x: &str| match key {
                    "step_type" => x == "0",
                    _ => x.eq_ignore_ascii_case("p"),
                };
                if let Some(bad) = values.iter().find(|x| !ok(x)) {
                    return Err(format!(
                        "{key}={}: rtapi's stepgen makes step/dir pulses in position mode only (step_type=0, ctrl_type=p); {} is not available",
                        quote(&v),
                        quote(bad)
                    ));
                }
                set_count(key, values.len(), &mut instances)?;
            }
        }
    }
    if instances == Instances::Count(0) {
        instances = Instances::Count(default_count(component));
    }
    Ok((instances, LoadArgs { args }))
}

/// How many instances `loadrt COMP` makes without count=/names=/num_chan=: LinuxCNC's `pid` and
/// `encoder` make three (their man pages), every other component one.
fn default_count(component: &str) -> usize {
    match component {
        "pid" | "encoder" => 3,
        _ => 1,
    }
}

#[cfg(test)]
mod tests;
