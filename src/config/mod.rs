//! Machine configuration: a TOML file (runtime options, threads, which `.hal` files) plus halcmd-style
//! `.hal` files (`loadrt`, `addf`, `net`, `setp`, `sets`).
//!
//! Everything is checked before anything runs, in three steps that each report `file:line: message`
//! (the file as the user named it, the 1-based line):
//! 1. [`Machine::load`] reads and parses the TOML and every `.hal` file — all syntax errors at once;
//! 2. [`Machine::apply`] against a [`Validation`](crate::components::Validation) target (a HAL that is
//!    never built) loads the
//!    components and executes the commands — the first error stops it, like halcmd;
//! 3. only then does `rtapi run` apply the same machine to the real runtime and start it.
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

mod apply;
pub mod halfile;
pub mod machine;

use std::fmt;
use std::path::Path;

pub use apply::Applied;
pub use halfile::{Command, Located};
pub use machine::{MachineToml, RuntimeSection};

use crate::components::ThreadDecl;

/// A configuration error at a place in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as the user named it (a `.hal` file: joined to the TOML's directory).
    pub file: String,
    /// 1-based; `None` when the whole file is at fault (e.g. it cannot be read).
    pub line: Option<usize>,
    pub message: String,
}

impl ConfigError {
    pub fn at(file: &str, line: usize, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line: Some(line),
            message: message.into(),
        }
    }

    pub fn file(file: &str, message: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_string(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One parsed `.hal` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HalFile {
    /// As shown in messages.
    pub name: String,
    pub commands: Vec<Located>,
}

/// A whole machine, parsed and syntax-checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The TOML file as given.
    pub file: String,
    pub runtime: RuntimeSection,
    pub threads: Vec<ThreadDecl>,
    /// The TOML line of each `[[thread]]` table.
    pub thread_lines: Vec<usize>,
    pub hal_files: Vec<HalFile>,
}

impl Machine {
    /// Reads the TOML at `path` and every `.hal` file it names (relative to the TOML's directory).
    /// Returns every syntax error found, in file order.
    pub fn load(path: &Path) -> Result<Machine, Vec<ConfigError>> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| vec![ConfigError::file(&file, format!("cannot read: {e}"))])?;
        let toml = machine::parse(&file, &text)?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut hal_files = Vec::new();
        let mut errors = Vec::new();
        for h in &toml.hal {
            let hal_path = dir.join(&h.path);
            let name = hal_path.display().to_string();
            match std::fs::read_to_string(&hal_path) {
                Err(e) => errors.push(ConfigError::at(
                    &file,
                    h.line,
                    format!("cannot read hal file {name}: {e}"),
                )),
                Ok(text) => match halfile::parse(&name, &text) {
                    Ok(commands) => hal_files.push(HalFile { name, commands }),
                    Err(mut e) => errors.append(&mut e),
                },
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Machine {
            file,
            runtime: toml.runtime,
            threads: toml.threads,
            thread_lines: toml.thread_lines,
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
        let mut hal_files = Vec::new();
        let mut errors = Vec::new();
        for (name, text) in hal {
            match halfile::parse(name, text) {
                Ok(commands) => hal_files.push(HalFile {
                    name: name.to_string(),
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
            hal_files,
        })
    }
}
