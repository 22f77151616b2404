//! Hosting LinuxCNC 2.9's compiled real-time modules (`/usr/lib/linuxcnc/modules/*.so`).
//!
//! **Which `loadrt` loads a module.** `loadrt NAME` loads rtapi's native component when there is one;
//! otherwise it falls back to the LinuxCNC module `NAME.so` found on the module search path: the
//! directories given by the config ([`ModuleLoader::set_module_path`]), then `$RTAPI_LINUXCNC_MODULES` (a `:`
//! list), then Debian's `/usr/lib/linuxcnc/modules`. A module is asked for explicitly with the prefix
//! `linuxcnc:` (`loadrt linuxcnc:pid`, even though rtapi has a native pid: a name only) or by a path
//! (`loadrt ./my_comp.so`, from the `.hal` file's directory; `loadrt /opt/x.so`). Every module file
//! must pass [`trust::check_owner`] and [`trust::inspect`] before it is opened.
//!
//! **Loading** (as LinuxCNC's `rtapi_app`): `dlopen(RTLD_NOW | RTLD_GLOBAL)` in load order, so a module
//! resolves every symbol at once — one rtapi does not provide fails the `loadrt`, naming it, instead
//! of crashing later — and later modules can use earlier ones' symbols. The arguments are written
//! through the module's `rtapi_info_*` symbols (`args`), `count=`/`names=` included (they are the
//! module's own arguments). Then `rtapi_app_main` runs; its components, pins, params and functions go
//! into the target through the C interface of `capi`. A non-zero return fails the `loadrt` with the
//! module's own error messages. `rtapi_app_exit` runs at `unloadrt` and when the instance stops:
//! the module is a [`KeptModule`] of the target it was loaded into, which a runtime keeps as a
//! resident and releases at its stop ([`crate::runtime::Resident`]).
//!
//! **Dry runs.** A config is checked on a [`Validation`](super::Validation) before anything real
//! happens (`halrun --check` instead checks modules from their files only: `ModuleLoader::check_static`);
//! learning a module's pins means running its `rtapi_app_main`, so a dry run loads the
//! module, runs it, then calls `rtapi_app_exit`. Its handle stays open while the dry run goes on (a
//! module loaded after it may use its symbols) and is closed before a real load, or before the next
//! dry run of the same module, so that each load starts from fresh statics.
//!
//! **Pins.** A pin's value lives in its segment cell with its C width; the module's `T *` (the
//! `T **` given to `hal_pin_*_new`) is the pin's pointer slot's mirror ([`Hal::attach_pin_pointer`]),
//! so `net`/`unlinkp` re-point it exactly as LinuxCNC re-points a pin to its signal, and the module
//! reads and writes the signal's cell itself. Loaded into a running instance, an unlinked pin's
//! pointer is its own segment cell from the start. Loaded before the segment exists (a config read
//! before `start`), it is a staging cell, and stays that cell whenever the pin is unlinked: modules
//! compare their pointer with the one they got to learn whether a pin is linked (LinuxCNC's pid
//! computes `command-deriv` itself only while that pin is unlinked), so it must not change under
//! them. The module's defaults written there become the pins' initial values, and while unlinked the
//! staging cell and the pin's segment cell are copied around each call (`setp` in, the module's
//! writes out). **Params** live in the module's own variables (LinuxCNC's ABI) and are copied the same
//! way, so `setp` and `getp` work on them (one compare per cell and direction).
//!
//! A module is C code in the process: it can crash it. What it does in its functions (allocate, lock,
//! print) is its business; rtapi's side of a call allocates, locks and logs nothing.
//!
//! **Files.** This one: the [`ModuleLoader`] (which `loadrt` is a module, the search path, the
//! static check); `load`: `dlopen`, arguments, `rtapi_app_main`, dry-run probes, `rtapi_app_exit`;
//! `registry`: what the C interface finds from a callback (the process-wide registry, the load in
//! progress, kept modules) and declaring into the target; `capi/`: the C entry points themselves.

pub(crate) mod args;
mod capi;
mod load;
pub mod personality;
mod registry;
#[cfg(test)]
mod tests;
pub mod trust;

use std::ffi::{c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::rt::lock;

use rtapi_hal::{
    CellRef, ComponentKey, Hal, HalError, HalType, In, Io, Out, ParamAccess, PinDir, Value,
    ValueType,
};

use super::target::HalSide;
use super::{Declared, Instances, LoadArgs, LoadError, Presets, Target};

/// The environment variable of module directories (`:`-separated), searched after the config's.
pub const MODULE_PATH_ENV: &str = "RTAPI_LINUXCNC_MODULES";
/// Where Debian's `linuxcnc-uspace` installs the modules; searched last.
pub const DEBIAN_MODULE_DIR: &str = "/usr/lib/linuxcnc/modules";
/// `loadrt linuxcnc:NAME` asks for the LinuxCNC module even when rtapi has a native `NAME`.
pub const EXPLICIT_PREFIX: &str = "linuxcnc:";

/// One interpreter's LinuxCNC module loader: the one place that decides whether `loadrt NAME` is
/// rtapi's component or a module ([`resolve`](Self::resolve)), its module search path, and what
/// its dry runs and static checks leave for the modules checked after them. The modules it loads
/// for real belong to the target they were loaded into ([`Target::keep_module`]: a runtime
/// releases them at its stop).
#[derive(Default)]
pub struct ModuleLoader {
    /// The config's directories (`[RTAPI]LINUXCNC_MODULES`), searched first.
    config_path: Mutex<Vec<PathBuf>>,
    /// Modules a dry run loaded: `rtapi_app_exit` ran, the handle stays open while the dry run goes
    /// on (a module checked after it may use its symbols); closed before a real load, before a new
    /// dry run of the same module, and with the loader.
    probes: Mutex<Vec<Probe>>,
    /// Symbols exported by the modules [`check_static`](Self::check_static) accepted (later ones
    /// may use them, as after `RTLD_GLOBAL`).
    static_exports: Mutex<Vec<(PathBuf, Vec<String>)>>,
}

impl Drop for ModuleLoader {
    fn drop(&mut self) {
        self.close_probes_from(0);
    }
}

impl ModuleLoader {
    /// A loader searching `$RTAPI_LINUXCNC_MODULES`, then Debian's directory.
    pub fn new() -> Self {
        ModuleLoader::default()
    }

    /// Sets the config's module directories, searched before `$RTAPI_LINUXCNC_MODULES` and Debian's.
    pub fn set_module_path(&self, dirs: Vec<PathBuf>) {
        *lock(&self.config_path) = dirs;
    }

    /// The module search path in order: the config's, the environment's, Debian's.
    pub fn search_path(&self) -> Vec<PathBuf> {
        let mut dirs = lock(&self.config_path).clone();
        if let Some(env) = std::env::var_os(MODULE_PATH_ENV) {
            dirs.extend(std::env::split_paths(&env).filter(|p| !p.as_os_str().is_empty()));
        }
        dirs.push(PathBuf::from(DEBIAN_MODULE_DIR));
        dirs
    }

    /// The names `loadrt NAME` finds on the module search path (each `NAME.so` of its directories,
    /// sorted, once each), for suggestions.
    pub fn module_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .search_path()
            .iter()
            .filter_map(|d| std::fs::read_dir(d).ok())
            .flatten()
            .filter_map(|e| {
                let name = e.ok()?.file_name().into_string().ok()?;
                let stem = name.strip_suffix(".so")?;
                plain_name(stem).then(|| stem.to_string())
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// The modules of [`module_names`](Self::module_names) that `loadrt` would load here, as far as can be told without
    /// running them: owned and moded as [`trust::check_owner`] wants, a real-time module for this
    /// machine ([`trust::inspect`]), and every `hal_*`/`rtapi_*` symbol it needs provided by this
    /// process. For the prompt's completion of `loadrt`.
    pub fn loadable_module_names(&self) -> Vec<String> {
        self.module_names()
            .into_iter()
            .filter(|name| {
                let Resolved::Module { path, .. } = self.search(name, false) else {
                    return false;
                };
                let Ok(info) = trust::inspect(&path) else {
                    return false;
                };
                info.needs
                    .iter()
                    .filter(|s| s.starts_with("hal_") || s.starts_with("rtapi_"))
                    .all(|s| {
                        CString::new(s.as_str()).is_ok_and(|c| {
                            // SAFETY: RTLD_DEFAULT looks a NUL-terminated name up in the objects
                            // already loaded; nothing is loaded or run.
                            !unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) }.is_null()
                        })
                    })
            })
            .collect()
    }
}

/// What `loadrt TEXT` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// rtapi's own component.
    Native,
    /// A LinuxCNC module file; `explicit` when asked for by prefix or path rather than by fallback.
    Module {
        /// The `.so` file, canonical, its owners checked ([`trust::check_owner`]).
        path: PathBuf,
        /// Asked for with `linuxcnc:` or a path.
        explicit: bool,
    },
    /// Asked for explicitly, but no such file; or a file that is refused (its owner or mode, a
    /// `linuxcnc:` name that is a path).
    Missing {
        /// What was looked for, or why it is refused, for the message.
        message: String,
    },
    /// Not native, no module either (the caller says the component is unknown).
    Unknown,
}

/// Whether `name` is a module name (`[A-Za-z0-9_-]+`): the only names looked up on the search path.
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl ModuleLoader {
    /// Resolves `loadrt TEXT`; `native` tells whether rtapi has a component of that name, `base` is the
    /// directory of the `.hal` file that says it (a relative path is taken from there, as `source`
    /// does; `None`: the working directory, for a command typed at a prompt).
    ///
    /// A **name** (`pid`, `linuxcnc:pid`) is looked up only on the module search path; `linuxcnc:` with
    /// anything but a name (`linuxcnc:../x`, `linuxcnc:/opt/x.so`) is refused, as LinuxCNC's `rtapi_app`
    /// refuses a name with `/` or `..`. A **path** — a word with a `/`, without the prefix
    /// (`./triple.so`, `/opt/m/x.so`) — is the explicit way to load a file. Either way the file found
    /// must pass [`trust::check_owner`].
    pub fn resolve(&self, text: &str, native: bool, base: Option<&Path>) -> Resolved {
        if let Some(name) = text.strip_prefix(EXPLICIT_PREFIX) {
            if !plain_name(name) {
                return Resolved::Missing {
                    message: format!(
                    "'{text}': loadrt {EXPLICIT_PREFIX} takes a module name ([A-Za-z0-9_-], looked \
                     up in the module search path), not a path; to load a module file, give its \
                     path without the prefix: loadrt ./NAME.so (relative to the .hal file's \
                     directory) or loadrt /full/path/NAME.so"
                ),
                };
            }
            return self.search(name, true);
        }
        if text.contains('/') {
            let given = Path::new(text);
            let path = match base {
                Some(d) if given.is_relative() => d.join(given),
                _ => given.to_path_buf(),
            };
            if std::fs::symlink_metadata(&path).is_err() {
                return Resolved::Missing {
                    message: format!(
                        "LinuxCNC module file {} does not exist{}",
                        path.display(),
                        if given.is_relative() {
                            " (a relative path is taken from the directory of the .hal file that says it)"
                        } else {
                            ""
                        }
                    ),
                };
            }
            return match trust::check_owner(&path) {
                Ok(path) => Resolved::Module {
                    path,
                    explicit: true,
                },
                Err(e) => Resolved::Missing {
                    message: e.to_string(),
                },
            };
        }
        if native {
            return Resolved::Native;
        }
        if plain_name(text) {
            self.search(text, false)
        } else {
            Resolved::Unknown
        }
    }

    /// `NAME.so` on the search path.
    fn search(&self, name: &str, explicit: bool) -> Resolved {
        let dirs = self.search_path();
        for d in &dirs {
            let p = d.join(format!("{name}.so"));
            if p.is_file() {
                return match trust::check_owner(&p) {
                    Ok(path) => Resolved::Module { path, explicit },
                    Err(e) => Resolved::Missing {
                        message: e.to_string(),
                    },
                };
            }
        }
        if explicit {
            let shown: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
            Resolved::Missing {
                message: format!(
                    "no LinuxCNC module {name}.so in {} (add a directory with ${MODULE_PATH_ENV})",
                    shown.join(":")
                ),
            }
        } else {
            Resolved::Unknown
        }
    }
}

/// Libraries every process of rtapi has loaded: a module needing only these has every symbol it
/// needs either in them, in rtapi, or in a module loaded before it.
const PROCESS_LIBRARIES: &[&str] = &[
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libgcc_s.so.1",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
];

impl ModuleLoader {
    /// `loadrt` of module file `path` checked **without loading it** (`halrun --check`): its owners and
    /// mode, that it is a LinuxCNC real-time module for this machine, its arguments (names, types, array
    /// sizes; `count=`/`names=` are its own), and the symbols it needs from rtapi (every `hal_*` /
    /// `rtapi_*` one) and, when it names no library beyond the C library's, every other one (rtapi's, a
    /// module's checked before it). What its `rtapi_app_main` would make is not known.
    pub(crate) fn check_static(
        &self,
        path: &Path,
        instances: &Instances,
        args: &LoadArgs,
    ) -> Result<(), LoadError> {
        let path = trust::check_owner(path).map_err(|e| LoadError::new(e.to_string()))?;
        let module = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let info = trust::inspect(&path).map_err(|e| LoadError::new(e.to_string()))?;
        let pairs = arg_pairs(instances, args);
        for (k, v) in &pairs {
            args::check_static(&info, &module, k, v).map_err(|e| LoadError::new(e.to_string()))?;
        }
        let only_process_libraries = info
            .libraries
            .iter()
            .all(|l| PROCESS_LIBRARIES.contains(&l.as_str()));
        let mut exports = lock(&self.static_exports);
        exports.retain(|(p, _)| *p != path);
        for sym in &info.needs {
            let ours = sym.starts_with("hal_") || sym.starts_with("rtapi_");
            if !ours && !only_process_libraries {
                continue;
            }
            if exports.iter().any(|(_, e)| e.contains(sym)) {
                continue;
            }
            let Ok(c) = CString::new(sym.as_str()) else {
                continue;
            };
            // SAFETY: RTLD_DEFAULT looks a NUL-terminated name up in the objects already loaded (rtapi
            // and its libraries); nothing is loaded or run.
            if unsafe { libc::dlsym(libc::RTLD_DEFAULT, c.as_ptr()) }.is_null() {
                return Err(open_error(
                    &module,
                    &path,
                    &format!("undefined symbol: {sym}"),
                ));
            }
        }
        exports.push((path, info.exports));
        Ok(())
    }
}

pub use self::load::*;
pub use self::registry::*;
