//! Machine configuration: a TOML file (runtime options, threads, which `.hal` files, an optional INI
//! file) plus `.hal` files in halcmd's language ([`halcmd`]: every halcmd command, `[SECTION]KEY`
//! from the INI file, `$VAR` from the environment).
//!
//! Everything is checked before anything runs, in three steps that each report `file:line: message`
//! (the file as the user named it, the 1-based line):
//! 1. [`Machine::load`] reads and parses the TOML and every `.hal` file — all syntax errors at once;
//! 2. [`Machine::session`] executes the commands into a [`halcmd::Session`]'s netlist model (the
//!    first error stops it, like halcmd), and [`halcmd::Session::apply_to`] emits the result to a
//!    [`Validation`](crate::components::Validation) target (a HAL that is never built);
//! 3. only then does `rtapi run` apply the same session to the real runtime and start it.
//!
//! Between 1 and 2, [`Machine::check_cpus`] checks every `cpu =` against this machine's CPUs.
//!
//! Files must be UTF-8 (a leading byte-order mark is skipped); user input echoed in a message is
//! shown through [`crate::rt::units::quote`] (control characters escaped, long text cut), and
//! [`ConfigError`]'s `Display` escapes any control character left.
//!
//! ```no_run
//! use rtapi::components::{Registry, Validation};
//! use rtapi::config::Machine;
//!
//! let machine = Machine::load("config/sim-axis.toml".as_ref()).map_err(|errors| errors[0].clone())?;
//! let mut dry = Validation::new(&machine.runtime.instance).map_err(|e| e.to_string()).unwrap();
//! machine.apply(&mut dry, &Registry::builtin())?;
//! # Ok::<(), rtapi::config::ConfigError>(())
//! ```

pub mod halcmd;
mod machine;
mod start;

pub use start::StartError;

use std::fmt;
use std::path::{Path, PathBuf};

use halcmd::parse::Located;
use halcmd::{CommandErrorKind, Ini, Session};

use crate::rt::units::{quote, tame};
use crate::runtime::{RuntimeOptions, ThreadSpec};

/// A configuration error at a place in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as the user named it (a `.hal` file: joined to the TOML's directory).
    pub(crate) file: String,
    /// 1-based; `None` when the whole file is at fault (e.g. it cannot be read).
    pub line: Option<usize>,
    /// What is wrong and, where there is one, the fix; echoed user input is quoted and cut short.
    pub message: String,
    /// What kind of failure it is (a halcmd command's [`CommandErrorKind`]; a file's own error, a
    /// syntax error or a TOML error is [`CommandErrorKind::Rule`]): whose fault, for the exit code
    /// and the control socket's reply.
    pub(crate) kind: CommandErrorKind,
}

impl ConfigError {
    pub(crate) fn at(file: &str, line: usize, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line: Some(line),
            message: message.into(),
            kind: CommandErrorKind::Rule,
        }
    }

    pub(crate) fn file(file: &str, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line: None,
            message: message.into(),
            kind: CommandErrorKind::Rule,
        }
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> CommandErrorKind {
        self.kind
    }

    /// Whether the command was abandoned, or failed, because the instance is stopping
    /// ([`CommandErrorKind::Stopping`]).
    pub fn is_stopping(&self) -> bool {
        self.kind == CommandErrorKind::Stopping
    }

    /// Whether the runtime failed at this line, the command (`start`) being right
    /// ([`CommandErrorKind::RuntimeStart`]).
    pub fn is_runtime(&self) -> bool {
        self.kind == CommandErrorKind::RuntimeStart
    }
}

impl fmt::Display for ConfigError {
    /// `file:line: message`, through [`tame`]: control characters escaped, echoed input kept short.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = tame(&self.file);
        let message = tame(&self.message);
        match self.line {
            Some(line) => write!(f, "{file}:{line}: {message}"),
            None => write!(f, "{file}: {message}"),
        }
    }
}

/// Why `name` is not a valid HAL name, as a message starting with `what` (`thread name`), or `None`.
/// The name is shown through [`quote`].
pub(crate) fn invalid_name(what: &str, name: &str) -> Option<String> {
    let instance = what.contains("instance");
    let checked = if instance {
        rtapi_hal::name::validate_instance(name)
    } else {
        rtapi_hal::name::validate(name)
    };
    let charset = if instance {
        "A-Z a-z 0-9 . _ -, like mill"
    } else {
        "A-Z a-z 0-9 . _ - :, like pid.0.command"
    };
    match checked {
        Ok(()) => None,
        Err(rtapi_hal::HalError::InvalidName { reason, .. }) => Some(format!(
            "{what} {} is not a valid name: {reason} (names are 1-47 characters of {charset})",
            quote(name)
        )),
        Err(e) => Some(format!("{what} {}: {e}", quote(name))),
    }
}

/// The largest config file read (TOML or `.hal`): far above any machine's, and a bound on what a
/// wrong path (`/dev/zero`, a disk image) can make `rtapi run` read.
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads a config file as UTF-8. A byte that is not UTF-8 is reported at its line and column, with
/// the fix. `shown` names the file in messages.
pub(crate) fn read_text(path: &Path, shown: &str) -> Result<String, ConfigError> {
    let bytes = read_bytes(path).map_err(|e| match e {
        ReadError::Io(e) => ConfigError::file(shown, format!("cannot read: {e}")),
        ReadError::TooLarge => ConfigError::file(shown, TOO_LARGE),
    })?;
    decode(shown, bytes)
}

const TOO_LARGE: &str =
    "the file is larger than 16 MiB, the most a config file may be; is this the right file?";

enum ReadError {
    Io(std::io::Error),
    TooLarge,
}

thread_local! {
    static REGULAR_ONLY: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// While one lives, every config, `.hal` and INI file this thread opens must be a regular file: a
/// FIFO, a device or a terminal is refused before it is opened. The owner of an instance reads the
/// files its control clients name under it, so that no client can make it wait forever on a pipe
/// nobody writes, or on its own standard input (`/dev/stdin`).
pub struct RegularOnly(());

impl RegularOnly {
    /// Starts refusing (nests).
    #[allow(clippy::new_without_default)]
    pub fn new() -> RegularOnly {
        REGULAR_ONLY.with(|c| c.set(c.get() + 1));
        RegularOnly(())
    }
}

impl Drop for RegularOnly {
    fn drop(&mut self) {
        REGULAR_ONLY.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// What a non-regular file is, for the refusal.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device (a terminal, /dev/stdin?)"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading; under [`RegularOnly`] only a regular file (checked before the open,
/// and again on the descriptor, so that a swap in between is caught too).
fn open_for_reading(path: &Path) -> std::io::Result<std::fs::File> {
    if REGULAR_ONLY.with(|c| c.get()) == 0 {
        return std::fs::File::open(path);
    }
    let refuse = |t: std::fs::FileType| {
        std::io::Error::other(format!(
            "it is {}: an instance reads only regular files for other processes (a pipe or a \
             terminal could block it); `rtapi halcmd -f FILE` reads pipes and standard input \
             itself",
            kind_of(t)
        ))
    };
    let t = std::fs::metadata(path)?.file_type();
    if !t.is_file() {
        return Err(refuse(t));
    }
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: if it became a FIFO since, the open does not wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(refuse(t));
    }
    Ok(f)
}

/// A file's bytes, at most [`MAX_FILE_BYTES`].
fn read_bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_for_reading(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ReadError::TooLarge);
    }
    Ok(bytes)
}

/// `bytes` as UTF-8 text, or `file:LINE: not UTF-8 (byte 0xE9 at column N); save the file as UTF-8`.
pub fn decode(file: &str, bytes: Vec<u8>) -> Result<String, ConfigError> {
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let line_start = bytes[..at]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
        // The prefix is valid UTF-8, so the column counts characters.
        let column = std::str::from_utf8(&bytes[line_start..at])
            .map_or(at - line_start, |s| s.chars().count())
            + 1;
        ConfigError::at(
            file,
            line,
            format!(
                "not UTF-8 (byte 0x{:02X} at column {column}); save the file as UTF-8",
                bytes[at]
            ),
        )
    })
}

impl std::error::Error for ConfigError {}

/// One parsed `.hal` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HalFile {
    /// As shown in messages.
    pub(crate) name: String,
    /// Its directory (`source` is relative to it); `None` for text given directly.
    pub(crate) dir: Option<PathBuf>,
    pub(crate) commands: Vec<Located>,
}

/// A whole machine, parsed and syntax-checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The TOML file as given.
    pub(crate) file: String,
    /// The `[runtime]` table, defaults applied.
    pub runtime: RuntimeOptions,
    /// The `[[thread]]` tables in file order, each already checked (name, period range, priority,
    /// timer and wake mode); `cpu` is checked against this computer only by [`Machine::check_cpus_available`].
    pub threads: Vec<ThreadSpec>,
    /// The TOML line of each `[[thread]]` table.
    pub(crate) thread_lines: Vec<usize>,
    /// The TOML line of each thread's `cpu =` key, if it has one.
    pub(crate) cpu_lines: Vec<Option<usize>>,
    /// `ini = "FILE"`, read.
    pub(crate) ini: Option<Ini>,
    pub(crate) hal_files: Vec<HalFile>,
}

/// A session that substitutes from `ini` (for parsing only).
fn parser(ini: Option<Ini>) -> Session {
    let mut s = Session::new(crate::components::Registry::default(), "parse")
        .expect("a valid instance name");
    s.set_ini(ini);
    s
}

/// Reads and parses each `.hal` file named at `(path, line)` of `file` (line 0: the file is itself
/// the one given). Every error, in order.
fn read_hal_files(
    file: &str,
    named: &[(PathBuf, usize)],
    ini: Option<Ini>,
) -> Result<Vec<HalFile>, Vec<ConfigError>> {
    let parser = parser(ini);
    let mut hal_files = Vec::new();
    let mut errors = Vec::new();
    for (hal_path, line) in named {
        let name = hal_path.display().to_string();
        let bytes = match read_bytes(hal_path) {
            Ok(bytes) => bytes,
            Err(e) => {
                let message = match e {
                    ReadError::Io(e) => format!("cannot read hal file {name}: {e}"),
                    ReadError::TooLarge => format!("hal file {name}: {TOO_LARGE}"),
                };
                errors.push(match line {
                    0 => ConfigError::file(&name, message),
                    l => ConfigError::at(file, *l, message),
                });
                continue;
            }
        };
        match decode(&name, bytes) {
            Err(e) => errors.push(e),
            Ok(text) => match parser.parse(&name, &text) {
                Ok(commands) => hal_files.push(HalFile {
                    name,
                    dir: hal_path.parent().map(Path::to_path_buf),
                    commands,
                }),
                Err(mut e) => errors.append(&mut e),
            },
        }
    }
    if errors.is_empty() {
        Ok(hal_files)
    } else {
        Err(errors)
    }
}

impl Machine {
    /// Reads the TOML at `path`, its INI file and every `.hal` file it names (relative to the TOML's
    /// directory). Returns every syntax error found, in file order.
    pub fn load(path: &Path) -> Result<Machine, Vec<ConfigError>> {
        let file = path.display().to_string();
        let text = read_text(path, &file).map_err(|e| vec![e])?;
        let mut toml = machine::parse(&file, &text)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        if let Some(r) = &mut toml.runtime.recorder {
            r.dir = dir.join(&r.dir);
        }
        let ini = match &toml.ini {
            None => None,
            Some(i) => Some(
                Ini::load(&dir.join(&i.path))
                    .map_err(|e| vec![ConfigError::at(&file, i.line, format!("ini file: {e}"))])?,
            ),
        };
        let named: Vec<(PathBuf, usize)> = toml
            .hal
            .iter()
            .map(|h| (dir.join(&h.path), h.line))
            .collect();
        let hal_files = read_hal_files(&file, &named, ini.clone())?;
        Ok(Machine {
            file,
            runtime: toml.runtime,
            threads: toml.threads,
            thread_lines: toml.thread_lines,
            cpu_lines: toml.cpu_lines,
            ini,
            hal_files,
        })
    }

    /// A machine that is one `.hal` file (`rtapi run FILE.hal`): the runtime's defaults, the threads
    /// the file makes (`loadrt threads`), `[SECTION]KEY` substituted from `ini`.
    pub fn hal_file(path: &Path, ini: Option<&Path>) -> Result<Machine, Vec<ConfigError>> {
        let file = path.display().to_string();
        let ini = match ini {
            None => None,
            Some(i) => Some(Ini::load(i).map_err(|e| vec![e])?),
        };
        let hal_files = read_hal_files(&file, &[(path.to_path_buf(), 0)], ini.clone())?;
        Ok(Machine {
            file,
            runtime: RuntimeOptions::default(),
            threads: Vec::new(),
            thread_lines: Vec::new(),
            cpu_lines: Vec::new(),
            ini,
            hal_files,
        })
    }

    /// Parses a machine from text (the `.hal` files given as `(name, text)`), for tests and tools.
    pub fn from_texts(
        toml_name: &str,
        toml_text: &str,
        hal: &[(&str, &str)],
    ) -> Result<Machine, Vec<ConfigError>> {
        let toml = machine::parse(toml_name, toml_text)?;
        let parser = parser(None);
        let mut hal_files = Vec::new();
        let mut errors = Vec::new();
        for (name, text) in hal {
            match parser.parse(name, text) {
                Ok(commands) => hal_files.push(HalFile {
                    name: name.to_string(),
                    dir: None,
                    commands,
                }),
                Err(mut e) => errors.append(&mut e),
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Machine {
            file: toml_name.to_string(),
            runtime: toml.runtime,
            threads: toml.threads,
            thread_lines: toml.thread_lines,
            cpu_lines: toml.cpu_lines,
            ini: None,
            hal_files,
        })
    }

    /// Executes the machine into a session: the TOML's threads, then every `.hal` command in order
    /// (output commands print to `out`). Stops at the first error, naming its file and line.
    pub fn session(
        &self,
        registry: &crate::components::Registry,
        out: &mut dyn std::io::Write,
    ) -> Result<Session, ConfigError> {
        self.session_on(halcmd::NoInstance, registry, out)
    }

    /// [`session`](Self::session) whose changes also go to `backend` (the owner's, to start it).
    pub fn session_on<H: halcmd::Backend>(
        &self,
        backend: H,
        registry: &crate::components::Registry,
        out: &mut dyn std::io::Write,
    ) -> Result<Session<H>, ConfigError> {
        let mut s = Session::with_backend(registry.clone(), &self.runtime.instance, backend)
            .map_err(|e| ConfigError::file(&self.file, e.message))?;
        s.set_ini(self.ini.clone());
        for (t, line) in self.threads.iter().zip(&self.thread_lines) {
            s.toml_thread(t, &self.file, *line)?;
        }
        for f in &self.hal_files {
            if s.run_commands(&f.name, f.dir.as_deref(), &f.commands, out)? == halcmd::Flow::Quit {
                break;
            }
        }
        Ok(s)
    }

    /// [`session`](Self::session) (output discarded), then the result applied to `target`.
    pub fn apply(
        &self,
        target: &mut dyn crate::components::Target,
        registry: &crate::components::Registry,
    ) -> Result<(), ConfigError> {
        self.session(registry, &mut std::io::sink())?
            .apply_to(target)
    }

    /// Checks every thread's `cpu =` against this machine: it must be online and allowed for this
    /// process. Run before anything starts, so the error names the config line.
    pub fn check_cpus_available(&self) -> Result<(), Vec<ConfigError>> {
        let online = crate::rt::sched::online_cpus().unwrap_or_default();
        let allowed = crate::rt::sched::allowed_cpus().ok();
        self.check_cpus(&online, allowed.as_deref())
    }

    /// [`Machine::check_cpus_available`] against given CPU lists (`allowed`: `None` = unknown, not checked).
    pub fn check_cpus(
        &self,
        online: &[usize],
        allowed: Option<&[usize]>,
    ) -> Result<(), Vec<ConfigError>> {
        let list = crate::rt::cpulist::format;
        let mut errors = Vec::new();
        for (i, t) in self.threads.iter().enumerate() {
            let Some(cpu) = t.cpu else {
                continue;
            };
            let line = self
                .cpu_lines
                .get(i)
                .copied()
                .flatten()
                .or_else(|| self.thread_lines.get(i).copied())
                .unwrap_or(1);
            let problem = if !online.is_empty() && !online.contains(&cpu) {
                format!(
                    "this machine has no online CPU {cpu} (online CPUs: {})",
                    list(online)
                )
            } else if let Some(allowed) = allowed.filter(|a| !a.contains(&cpu)) {
                format!(
                    "this process may not run on CPU {cpu} (allowed: {}; see taskset or the cgroup's cpuset)",
                    list(allowed)
                )
            } else {
                continue;
            };
            errors.push(ConfigError::at(
                &self.file,
                line,
                format!(
                    "thread {}: cpu = {cpu}, but {problem}; change `cpu` in this file, or remove it to let rtapi choose",
                    quote(&t.name)
                ),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}
