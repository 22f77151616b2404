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

pub(crate) mod args;
mod capi;
pub mod personality;
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

// ---- the process's modules and components ----------------------------------------------------

/// A component a module made with `hal_init` (its id is its index in the [`Registry`] + 1).
pub(crate) struct Comp {
    pub(crate) name: String,
    /// For `hal_comp_name`: lives as long as the process.
    pub(crate) cname: CString,
    /// The module that made it (its load's serial).
    pub(crate) module: u64,
    pub(crate) key: ComponentKey,
    /// Pins and params made by the module for this component.
    pub(crate) objects: Mutex<Objects>,
    /// Set once the component's params are bound to the segment (and its pins re-pointed at it).
    pub(crate) bound: OnceLock<Box<[CellSync]>>,
    pub(crate) exited: AtomicBool,
}

/// A component's pins and params as the module made them.
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) pins: Vec<PinRec>,
    pub(crate) params: Vec<ParamRec>,
}

pub(crate) struct PinRec {
    pub(crate) name: String,
    pub(crate) ty: ValueType,
    pub(crate) dir: PinDir,
    /// The module's `T **` (address of its pin pointer), in hal_malloc memory (never freed).
    pub(crate) pointer: usize,
    /// The staging cell the pointer points at before the segment exists (0 when loaded live).
    pub(crate) staging: usize,
}

pub(crate) struct ParamRec {
    pub(crate) name: String,
    pub(crate) ty: ValueType,
    /// The module's variable.
    pub(crate) addr: usize,
}

/// A module-side cell bound to its segment cell, copied around each call: a param (the module's
/// variable), or a pin loaded before the segment existed while it is unlinked (its staging cell,
/// which stays the pin's own address for the module; see `Hal::attach_pin_pointer`).
pub(crate) struct CellSync {
    cell: CellRef,
    ty: ValueType,
    /// The module-side cell.
    addr: usize,
    /// A pin's `T **`: synced only while it holds `addr` (unlinked). 0 for a param.
    pointer: usize,
    /// Whether others may change the segment cell (`setp`): params, IN and IO pins. An OUT pin's
    /// own cell changes only by the copy out (and by an unlink, which fills the staging cell too).
    copy_in: bool,
    /// The value both sides last agreed on.
    last: AtomicU64,
}

impl CellSync {
    /// Whether the module uses `addr` now (a param always; a pin while unlinked).
    #[inline]
    fn active(&self) -> bool {
        if self.pointer == 0 {
            return true;
        }
        // SAFETY: `pointer` is the module's `T **` in never-freed hal_malloc memory, aligned for a
        // pointer; the owner stores into it atomically (`PinSlot::update_mirror`).
        let p = unsafe { &*(self.pointer as *const std::sync::atomic::AtomicPtr<u8>) };
        p.load(Ordering::Relaxed) as usize == self.addr
    }
}

/// What this process must know of hosted modules, whoever loaded them.
pub(crate) struct Registry {
    /// Every component made by a module, by id − 1 (never removed: ids stay valid, and
    /// `hal_comp_name` hands out its name for the life of the process).
    comps: Vec<Arc<Comp>>,
    /// The next load's serial (components name their module by it).
    next_serial: u64,
    /// The module files loaded and kept (by a runtime or a harness), canonical.
    kept: Vec<PathBuf>,
}

/// The one process-wide record of the module loaders, because the C interface and the dynamic loader
/// are process-wide: `hal_ready`, `hal_exit` and `hal_comp_name` name a component by an int id and
/// carry no other context, and a module file is mapped once per process (a second load would share
/// the first one's statics, so it is refused whichever loader asks). Reached only through
/// [`Registry::comp`], [`Registry::add_comp`] and the loading code of this module.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    comps: Vec::new(),
    next_serial: 1,
    kept: Vec::new(),
});

impl Registry {
    /// Component `id` (as `hal_init` returned it).
    pub(crate) fn comp(id: c_int) -> Option<Arc<Comp>> {
        let i = usize::try_from(id).ok()?.checked_sub(1)?;
        lock(&REGISTRY).comps.get(i).cloned()
    }

    /// Registers a component; returns its id.
    pub(crate) fn add_comp(c: Arc<Comp>) -> usize {
        let mut r = lock(&REGISTRY);
        r.comps.push(c);
        r.comps.len()
    }

    fn comps_of(serial: u64) -> Vec<Arc<Comp>> {
        lock(&REGISTRY)
            .comps
            .iter()
            .filter(|c| c.module == serial)
            .cloned()
            .collect()
    }
}

/// A LinuxCNC module loaded and kept by a target that runs it (a runtime, a harness). Dropping it
/// is the module's end: `rtapi_app_exit`, then `dlclose` — drop it only once none of its functions
/// can be called (a runtime keeps it as a [`Resident`](crate::runtime::Resident) for that).
pub struct KeptModule {
    serial: u64,
    name: &'static str,
    path: PathBuf,
    handle: usize,
    exit: Option<unsafe extern "C" fn()>,
    /// Argument strings the module points at.
    _strings: Vec<CString>,
    components: Vec<String>,
}

impl KeptModule {
    /// The module's name (its file's stem).
    pub fn name(&self) -> &str {
        self.name
    }

    /// Whether it made any of `components`.
    pub fn made_any(&self, components: &[String]) -> bool {
        self.components.iter().any(|c| components.contains(c))
    }
}

impl Drop for KeptModule {
    fn drop(&mut self) {
        exit_module(self.name, self.exit, &Registry::comps_of(self.serial));
        // SAFETY: the handle from `load`, closed once (here); the module's functions are no longer
        // called (see the type's documentation).
        unsafe { libc::dlclose(self.handle as *mut c_void) };
        lock(&REGISTRY).kept.retain(|p| *p != self.path);
    }
}

/// The load in progress on this thread, for the C interface's callbacks.
pub(crate) struct Loading {
    target: *mut (dyn Target + 'static),
    declared: *mut Declared,
    presets: *const Presets,
    pub(crate) serial: u64,
    pub(crate) module: &'static str,
    /// Components made by this load.
    pub(crate) comps: Vec<Arc<Comp>>,
    /// Error messages the module printed while loading (for the `loadrt` error).
    pub(crate) errors: Vec<String>,
    /// Every message it printed while loading, logged once `rtapi_app_main` succeeded.
    pub(crate) held: Vec<(c_int, String)>,
    live: bool,
}

thread_local! {
    /// The load under way on this thread: a module's `hal_init`/`hal_export_funct` callbacks made
    /// by `rtapi_app_main` carry no loader or target, so they find them here (the loading context).
    pub(crate) static LOADING: std::cell::RefCell<Option<Loading>> = const { std::cell::RefCell::new(None) };
    /// The module whose code runs on this thread now (for its messages).
    pub(crate) static CURRENT: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

impl Loading {
    /// The target being loaded into.
    pub(crate) fn target(&mut self) -> &mut dyn Target {
        // SAFETY: `load` stores a pointer to the `&mut dyn Target` it was given and clears `LOADING`
        // before that borrow ends; nothing else uses the target during `rtapi_app_main`.
        unsafe { &mut *self.target }
    }

    pub(crate) fn declared(&mut self) -> &mut Declared {
        // SAFETY: as for `target`: the `&mut Declared` given to `load` outlives this `Loading`.
        unsafe { &mut *self.declared }
    }

    pub(crate) fn preset(&self, name: &str, ty: ValueType) -> Option<u64> {
        // SAFETY: as for `target`: the `&Presets` given to `load` outlives this `Loading`.
        let presets = unsafe { &*self.presets };
        let text = presets.get(name)?;
        Value::parse(ty, text, name).ok().map(Value::to_bits)
    }

    pub(crate) fn is_live(&self) -> bool {
        self.live
    }
}

/// A raw pointer handed to an RT closure (the module's `void *arg`).
#[derive(Clone, Copy)]
struct SendPtr(*mut c_void);
// SAFETY: the pointer is the module's own argument, only ever passed back to the module's function;
// LinuxCNC calls it from its RT threads the same way.
unsafe impl Send for SendPtr {}

/// Reads a value of type `ty` from C memory at `addr` (a module variable or pin cell).
///
/// # Safety
/// `addr` must be valid for reads of the type's C width and aligned for it.
pub(crate) unsafe fn read_c(addr: usize, ty: ValueType) -> u64 {
    // SAFETY: forwarded; volatile because the module and other threads may change it (C `volatile`).
    unsafe {
        match ty {
            ValueType::Bit => u64::from(std::ptr::read_volatile(addr as *const u8) != 0),
            ValueType::S32 => std::ptr::read_volatile(addr as *const i32) as i64 as u64,
            ValueType::U32 => u64::from(std::ptr::read_volatile(addr as *const u32)),
            _ => std::ptr::read_volatile(addr as *const u64),
        }
    }
}

/// Writes canonical bits of type `ty` into C memory at `addr`.
///
/// # Safety
/// `addr` must be valid for writes of the type's C width and aligned for it.
pub(crate) unsafe fn write_c(addr: usize, ty: ValueType, bits: u64) {
    // SAFETY: forwarded.
    unsafe {
        match ty {
            ValueType::Bit => std::ptr::write_volatile(addr as *mut u8, u8::from(bits != 0)),
            ValueType::S32 | ValueType::U32 => {
                std::ptr::write_volatile(addr as *mut u32, bits as u32)
            }
            _ => std::ptr::write_volatile(addr as *mut u64, bits),
        }
    }
}

impl Comp {
    /// Binds the component to the segment once: re-points pins still on staging cells (a config
    /// loaded before the segment existed) and pairs each param with its cell.
    pub(crate) fn bind(&self, hal: &Hal) -> &[CellSync] {
        self.bound.get_or_init(|| {
            let objects = lock(&self.objects);
            let mut syncs = Vec::new();
            for p in objects.pins.iter().filter(|p| p.staging != 0) {
                // SAFETY: `pointer` is the module's `T **` inside hal_malloc memory, which is never
                // freed, aligned for a pointer (checked in `hal_pin_new`), and written only by us;
                // `staging` an 8-byte arena cell, never freed either.
                let r = unsafe {
                    hal.attach_pin_pointer(&p.name, p.pointer as *mut *mut u8, p.staging as *mut u8)
                };
                match r {
                    Ok(cell) => {
                        let bits = cell.load_bits(p.ty);
                        // SAFETY: the staging cell (above).
                        unsafe { write_c(p.staging, p.ty, bits) };
                        syncs.push(CellSync {
                            cell,
                            ty: p.ty,
                            addr: p.staging,
                            pointer: p.pointer,
                            copy_in: p.dir != PinDir::Out,
                            last: AtomicU64::new(bits),
                        });
                    }
                    Err(e) => log::warn!("{}: pin {}: {e}", self.name, p.name),
                }
            }
            for p in &objects.params {
                match hal.param_cell(&p.name) {
                    Ok((cell, _)) => {
                        let bits = cell.load_bits(p.ty);
                        // SAFETY: `addr` is the module's param variable, checked non-null and aligned
                        // in `hal_param_new`; the module is loaded while its component is bound.
                        unsafe { write_c(p.addr, p.ty, bits) };
                        syncs.push(CellSync {
                            cell,
                            ty: p.ty,
                            addr: p.addr,
                            pointer: 0,
                            copy_in: true,
                            last: AtomicU64::new(bits),
                        });
                    }
                    Err(e) => log::warn!("{}: param {}: {e}", self.name, p.name),
                }
            }
            syncs.into_boxed_slice()
        })
    }
}

/// Copies `setp`s of the segment into the module's cells (before a call).
#[inline]
fn cells_in(syncs: &[CellSync]) {
    for s in syncs.iter().filter(|s| s.copy_in && s.active()) {
        let v = s.cell.load_bits(s.ty);
        if v != s.last.load(Ordering::Relaxed) {
            // SAFETY: `addr` is the module's live param variable (see `Comp::bind`).
            unsafe { write_c(s.addr, s.ty, v) };
            s.last.store(v, Ordering::Relaxed);
        }
    }
}

/// Publishes the module's changes of its cells in the segment (after a call).
#[inline]
fn cells_out(syncs: &[CellSync]) {
    for s in syncs.iter().filter(|s| s.active()) {
        // SAFETY: as in `params_in`.
        let v = unsafe { read_c(s.addr, s.ty) };
        if v != s.last.load(Ordering::Relaxed) {
            s.cell.store_bits(s.ty, v);
            s.last.store(v, Ordering::Relaxed);
        }
    }
}

/// The factory of a module's exported function: binds the component on the first call made from the
/// segment, then calls `funct(arg, period_ns)` each period with the params copied around it.
pub(crate) fn function_factory(
    comp: Arc<Comp>,
    funct: unsafe extern "C" fn(*mut c_void, std::ffi::c_long),
    arg: *mut c_void,
    module: &'static str,
    live: bool,
) -> crate::runtime::function::FunctionFactory {
    let arg = SendPtr(arg);
    Box::new(move |hal: &Hal| {
        // Loaded live, the component is bound when `rtapi_app_main` returns (its params may not
        // exist yet while it exports this function).
        if !live {
            comp.bind(hal);
        }
        Box::new(move |cycle: &crate::runtime::function::Cycle| {
            let arg = arg;
            let syncs = comp.bound.get().map_or(&[][..], |b| &b[..]);
            cells_in(syncs);
            CURRENT.with(|c| c.set(module));
            let period =
                std::ffi::c_long::try_from(cycle.period_ns).unwrap_or(std::ffi::c_long::MAX);
            // A crash in the call names the module.
            crate::runtime::crash::set_module(module);
            // SAFETY: `funct` and `arg` are what the module gave `hal_export_funct`; the module stays
            // loaded while its functions are in the function table (it is unloaded only after its
            // functions left every thread, or after the threads stopped).
            unsafe { funct(arg.0, period) };
            crate::runtime::crash::set_module("");
            cells_out(syncs);
        })
    })
}

// ---- declaring into the target ------------------------------------------------------------------

/// Declares a pin of runtime type and direction (the C interface's `hal_pin_new`).
pub(crate) fn declare_pin(
    side: &mut HalSide<'_>,
    comp: ComponentKey,
    name: &str,
    ty: ValueType,
    dir: PinDir,
    init: u64,
) -> Result<(), String> {
    macro_rules! go {
        ($d:ty, $t:ty) => {
            side.pin_with_default::<$d, $t>(comp, name, <$t as HalType>::from_bits(init))
                .map(|_| ())
                .map_err(|e: HalError| e.to_string())
        };
    }
    match (dir, ty) {
        (PinDir::In, ValueType::Bit) => go!(In, bool),
        (PinDir::In, ValueType::Float) => go!(In, f64),
        (PinDir::In, ValueType::S32) => go!(In, i32),
        (PinDir::In, ValueType::U32) => go!(In, u32),
        (PinDir::Out, ValueType::Bit) => go!(Out, bool),
        (PinDir::Out, ValueType::Float) => go!(Out, f64),
        (PinDir::Out, ValueType::S32) => go!(Out, i32),
        (PinDir::Out, ValueType::U32) => go!(Out, u32),
        (PinDir::Io, ValueType::Bit) => go!(Io, bool),
        (PinDir::Io, ValueType::Float) => go!(Io, f64),
        (PinDir::Io, ValueType::S32) => go!(Io, i32),
        (PinDir::Io, ValueType::U32) => go!(Io, u32),
        (_, other) => Err(format!(
            "pin {name}: type {} is not one a LinuxCNC module can make",
            other.as_str()
        )),
    }
}

/// Declares a param of runtime type (the C interface's `hal_param_new`).
pub(crate) fn declare_param(
    side: &mut HalSide<'_>,
    comp: ComponentKey,
    name: &str,
    ty: ValueType,
    access: ParamAccess,
    init: u64,
) -> Result<(), String> {
    let r = match ty {
        ValueType::Bit => side
            .param(comp, name, access, bool::from_bits(init))
            .map(|_| ()),
        ValueType::Float => side
            .param(comp, name, access, f64::from_bits(init))
            .map(|_| ()),
        ValueType::S32 => side
            .param(comp, name, access, <i32 as HalType>::from_bits(init))
            .map(|_| ()),
        ValueType::U32 => side
            .param(comp, name, access, <u32 as HalType>::from_bits(init))
            .map(|_| ()),
        other => {
            return Err(format!(
                "param {name}: type {} is not one a LinuxCNC module can make",
                other.as_str()
            ))
        }
    };
    r.map_err(|e| e.to_string())
}

/// Keeps the shared entry points of [`capi`] in the binary (the master calls it too).
pub(crate) fn capi_keep_linked() {
    capi::keep_linked();
}

/// LinuxCNC's `RTAPI_MSG_ALL` level.
pub(crate) fn capi_msg_all() -> c_int {
    capi::MSG_ALL
}

// ---- loading --------------------------------------------------------------------------------------

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl* call on this
    // thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".to_string()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Explains a `dlopen` failure: an unresolved symbol is named.
fn open_error(module: &str, path: &Path, text: &str) -> LoadError {
    if let Some((_, sym)) = text.split_once("undefined symbol: ") {
        let sym = sym.trim();
        LoadError::unavailable(format!(
            "its LinuxCNC module {} needs symbol '{sym}', which rtapi does not provide{}",
            path.display(),
            if sym.starts_with("hal_") || sym.starts_with("rtapi_") {
                " (not in rtapi's LinuxCNC C interface yet)"
            } else {
                " (another module's: load that one first, if rtapi can)"
            }
        ))
    } else {
        LoadError::unavailable(format!(
            "LinuxCNC module {module} ({}) cannot be loaded: {text}",
            path.display()
        ))
    }
}

/// Strings of errno values a module returns (`-ENODEV`…), for messages.
fn errno_text(rc: c_int) -> String {
    let e = std::io::Error::from_raw_os_error(rc.saturating_abs());
    format!("{rc} ({e})")
}

impl ModuleLoader {
    /// `loadrt` of a LinuxCNC module into `target`. Returns the components it made.
    pub(crate) fn load(
        &self,
        target: &mut dyn Target,
        declared: &mut Declared,
        presets: &Presets,
        path: &Path,
        instances: &Instances,
        args: &LoadArgs,
    ) -> Result<Vec<String>, LoadError> {
        capi::keep_linked();
        let keep = target.keeps_modules();
        let live = matches!(target.hal_side(), HalSide::Live(_));
        let module = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        // Its owners and mode, and that it is a LinuxCNC module, before any of its code can run (a
        // shared object's constructors run inside dlopen).
        let canonical = trust::check_owner(path).map_err(|e| LoadError::new(e.to_string()))?;
        trust::inspect(&canonical).map_err(|e| LoadError::new(e.to_string()))?;
        // A real load reserves the file (until its `KeptModule` goes); a dry run only checks.
        let reserved = {
            let mut r = lock(&REGISTRY);
            if r.kept.contains(&canonical) {
                return Err(LoadError::new(format!(
                    "LinuxCNC module {module} is already loaded (unloadrt it first)"
                )));
            }
            if keep {
                r.kept.push(canonical.clone());
            }
            Reservation(keep.then(|| canonical.clone()))
        };
        // Dry-run leftovers: all go before a real load; from this module on before a new dry run of it.
        let from = if keep {
            Some(0)
        } else {
            lock(&self.probes).iter().position(|p| p.path == canonical)
        };
        if let Some(i) = from {
            self.close_probes_from(i);
        }
        let cpath = CString::new(canonical.as_os_str().as_encoded_bytes()).map_err(|_| {
            LoadError::new(format!("module path {} has a NUL byte", path.display()))
        })?;
        // SAFETY: a NUL-terminated path; RTLD_NOW resolves every symbol now (failing on a missing one),
        // RTLD_GLOBAL lets modules loaded later use this one's symbols. Running the module's
        // constructors is what loading a module means: the file passed `trust::check_owner` (only root
        // or the caller could have written it) and `trust::inspect` (a LinuxCNC module) just above.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            return Err(open_error(&module, path, &dlerror_text()));
        }
        let close = |h: *mut c_void| {
            // SAFETY: `h` is the live handle from the dlopen above, closed once.
            unsafe { libc::dlclose(h) };
        };
        let sym = |name: &CStr| {
            // SAFETY: live handle, NUL-terminated name.
            unsafe { libc::dlsym(handle, name.as_ptr()) }
        };
        let main_ptr = sym(c"rtapi_app_main");
        if main_ptr.is_null() {
            close(handle);
            return Err(LoadError::new(format!(
                "{} is not a LinuxCNC real-time module (it has no rtapi_app_main); {}",
                path.display(),
                trust::NOT_A_MODULE_FIX
            )));
        }
        // SAFETY: rtapi_app.h declares `int rtapi_app_main(void)` and `void rtapi_app_exit(void)`.
        let main: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(main_ptr) };
        let exit_ptr = sym(c"rtapi_app_exit");
        let exit: Option<unsafe extern "C" fn()> = if exit_ptr.is_null() {
            None
        } else {
            // SAFETY: as above.
            Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn()>(exit_ptr) })
        };

        // Arguments: count=/names= are the module's own.
        let mut strings = Vec::new();
        let pairs = arg_pairs(instances, args);
        for (k, v) in &pairs {
            if let Err(m) = args::write(handle, &module, path, k, v, &mut strings) {
                close(handle);
                return Err(LoadError::new(m));
            }
        }

        let serial = {
            let mut r = lock(&REGISTRY);
            r.next_serial += 1;
            r.next_serial - 1
        };
        let name: &'static str = Box::leak(module.clone().into_boxed_str());
        // SAFETY: only the lifetime of the trait object is erased; `LOADING` is cleared below, before
        // the `&mut dyn Target` borrow ends, and nothing keeps the pointer.
        let target_ptr: *mut (dyn Target + 'static) =
            unsafe { std::mem::transmute::<*mut (dyn Target + '_), _>(target as *mut dyn Target) };
        LOADING.with(|l| {
            *l.borrow_mut() = Some(Loading {
                target: target_ptr,
                declared,
                presets,
                serial,
                module: name,
                comps: Vec::new(),
                errors: Vec::new(),
                held: Vec::new(),
                live,
            })
        });
        let previous = CURRENT.with(|c| c.replace(name));
        // SAFETY: the module's entry point, called once after its arguments were written, as rtapi_app
        // does; its callbacks find this load in `LOADING`.
        let rc = unsafe { main() };
        let loading = LOADING
            .with(|l| l.borrow_mut().take())
            .expect("LOADING set above");
        if rc == 0 {
            for (level, text) in &loading.held {
                capi::log_message(*level, text);
            }
        }
        CURRENT.with(|c| c.set(previous));
        let comps = loading.comps;
        let names: Vec<String> = comps.iter().map(|c| c.name.clone()).collect();

        if rc != 0 {
            if let HalSide::Live(hal) = target.hal_side() {
                for c in &comps {
                    let _ = hal.delete_component(&c.name);
                }
            }
            for c in &comps {
                c.exited.store(true, Ordering::Relaxed);
            }
            close(handle);
            // Its error messages; a module that prints its errors with `rtapi_print` (hm2_eth), which
            // LinuxCNC always shows, has what it printed that way instead.
            let said: Vec<&str> = if loading.errors.is_empty() {
                loading
                    .held
                    .iter()
                    .filter(|(level, _)| *level == capi::MSG_ALL)
                    .map(|(_, t)| t.as_str())
                    .collect()
            } else {
                loading.errors.iter().map(String::as_str).collect()
            };
            let said = if said.is_empty() {
                String::new()
            } else {
                format!("; it said: {}", said.join(" / "))
            };
            // Not "unavailable": the module is here and ran; what it said is the cause, first.
            return Err(LoadError::new(format!(
                "LinuxCNC module {module}: rtapi_app_main failed with {}{said}",
                errno_text(rc)
            )));
        }

        // The module's defaults, written through its pointers after it made them, become the initial
        // values (unless the config setp's them); live, params go to their cells now.
        for c in &comps {
            let objects = lock(&c.objects);
            for p in objects.pins.iter().filter(|p| p.staging != 0) {
                let bits = presets
                    .get(&p.name)
                    .and_then(|t| Value::parse(p.ty, t, &p.name).ok())
                    .map(Value::to_bits)
                    // SAFETY: the staging cell is an 8-byte arena cell made for this pin.
                    .unwrap_or_else(|| unsafe { read_c(p.staging, p.ty) });
                if let HalSide::Building(b) = target.hal_side() {
                    let _ = b.set_init(&p.name, bits);
                }
                declared
                    .values
                    .insert(p.name.clone(), Value::from_bits(p.ty, bits));
            }
            for p in &objects.params {
                let preset = presets
                    .get(&p.name)
                    .and_then(|t| Value::parse(p.ty, t, &p.name).ok())
                    .map(Value::to_bits);
                if let Some(bits) = preset {
                    // SAFETY: the module's param variable (checked in `hal_param_new`).
                    unsafe { write_c(p.addr, p.ty, bits) };
                }
                // SAFETY: as above.
                let bits = unsafe { read_c(p.addr, p.ty) };
                if let HalSide::Building(b) = target.hal_side() {
                    let _ = b.set_init(&p.name, bits);
                }
                declared
                    .values
                    .insert(p.name.clone(), Value::from_bits(p.ty, bits));
            }
            drop(objects);
            if let HalSide::Live(hal) = target.hal_side() {
                for p in lock(&c.objects).params.iter() {
                    // SAFETY: as above.
                    let bits = unsafe { read_c(p.addr, p.ty) };
                    if let Ok((cell, _)) = hal.param_cell(&p.name) {
                        cell.store_bits(p.ty, bits);
                    }
                }
                c.bind(hal);
            }
        }

        if keep {
            // The reservation becomes the kept module's (its drop frees the file).
            std::mem::forget(reserved);
            target.keep_module(KeptModule {
                serial,
                name,
                path: canonical,
                handle: handle as usize,
                exit,
                _strings: strings,
                components: names.clone(),
            });
        } else {
            // A dry run: the module's rtapi_app_exit runs at once; it stays open (modules loaded after it
            // in the same dry run may need its symbols) until a real load, or a new dry run of it, closes
            // it so that the next load starts from fresh statics.
            exit_module(name, exit, &comps);
            lock(&self.probes).push(Probe {
                path: canonical,
                handle: handle as usize,
                _strings: strings,
            });
        }
        Ok(names)
    }
}

/// A module file reserved in the [`Registry`] by a real load under way: freed if the load fails.
struct Reservation(Option<PathBuf>);

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            lock(&REGISTRY).kept.retain(|k| *k != p);
        }
    }
}

/// A module a dry run loaded: its `rtapi_app_exit` ran, the handle is still open.
struct Probe {
    path: PathBuf,
    handle: usize,
    _strings: Vec<CString>,
}

/// Closes the dry-run modules from position `i` on, last first (a module is closed before the ones
/// whose symbols it uses), and warns if one stays mapped (its statics would carry over).
impl ModuleLoader {
    fn close_probes_from(&self, i: usize) {
        let gone: Vec<Probe> = {
            let mut p = lock(&self.probes);
            let n = p.len();
            p.drain(i.min(n)..).collect()
        };
        for p in gone.into_iter().rev() {
            // SAFETY: a handle from `load`'s dlopen, closed once; its functions were never called (a dry
            // run makes no closures) and its rtapi_app_exit ran.
            unsafe { libc::dlclose(p.handle as *mut c_void) };
            if let Ok(c) = CString::new(p.path.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path; RTLD_NOLOAD only looks the library up.
                let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
                if !h.is_null() {
                    log::warn!(
                        "LinuxCNC module {} stays mapped after its dry run; its next load starts \
                     from the statics the dry run left",
                        p.path.display()
                    );
                    // SAFETY: the reference the NOLOAD lookup just took.
                    unsafe { libc::dlclose(h) };
                }
            }
        }
    }
}

fn exit_module(name: &'static str, exit: Option<unsafe extern "C" fn()>, comps: &[Arc<Comp>]) {
    if let Some(exit) = exit {
        let previous = CURRENT.with(|c| c.replace(name));
        // SAFETY: the module's exit hook, called once, after its functions stopped being called.
        unsafe { exit() };
        CURRENT.with(|c| c.set(previous));
    }
    for c in comps {
        c.exited.store(true, Ordering::Relaxed);
    }
}

/// `unloadrt` in running instance `running`: the modules that made any of `components` (whose
/// functions have left their threads) get `rtapi_app_exit` and are closed.
pub fn unloaded(running: &crate::runtime::Runtime<crate::runtime::Running>, components: &[String]) {
    running.release_residents(&|r| {
        r.downcast_ref::<KeptModule>()
            .is_some_and(|m| m.made_any(components))
    });
}

/// A module's arguments as `name=value` pairs: `count=`/`names=` first (they are the module's own),
/// then the line's.
fn arg_pairs(instances: &Instances, args: &LoadArgs) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    match instances {
        Instances::Count(0) => {}
        Instances::Count(n) => pairs.push(("count".into(), n.to_string())),
        Instances::Names(names) => pairs.push(("names".into(), names.join(","))),
    }
    pairs.extend(args.args.iter().map(|(k, v)| (k.clone(), v.clone())));
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadrt_text_resolves_to_native_module_or_nothing() {
        assert_eq!(
            ModuleLoader::new().resolve("pid", true, None),
            Resolved::Native
        );
        assert_eq!(
            ModuleLoader::new().resolve("frobnicator", false, None),
            Resolved::Unknown
        );
        match ModuleLoader::new().resolve("/nonexistent/x.so", false, None) {
            Resolved::Missing { message } => {
                assert!(message.contains("does not exist"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        match ModuleLoader::new().resolve("linuxcnc:frobnicator", false, None) {
            Resolved::Missing { message } => {
                assert!(message.contains("frobnicator.so") && message.contains(MODULE_PATH_ENV))
            }
            other => panic!("{other:?}"),
        }
        // A relative path is taken from the .hal file's directory.
        assert_eq!(
            ModuleLoader::new().resolve("../x.so", false, Some(Path::new("/rtapi-test-no-such-dir/sub"))),
            Resolved::Missing {
                message: "LinuxCNC module file /rtapi-test-no-such-dir/sub/../x.so does not exist \
                          (a relative path is taken from the directory of the .hal file that says it)"
                    .into()
            }
        );
        assert_eq!(
            ModuleLoader::new().resolve("a b", false, None),
            Resolved::Unknown
        );
        assert_eq!(
            ModuleLoader::new().resolve("x.so", false, None),
            Resolved::Unknown
        );
        // `linuxcnc:` takes a name only (rtapi_app refuses `/` and `..` in a name).
        for text in [
            "linuxcnc:../../tmp/x.so",
            "linuxcnc:/usr/lib/linuxcnc/modules/and2.so",
            "linuxcnc:..",
        ] {
            match ModuleLoader::new().resolve(text, false, None) {
                Resolved::Missing { message } => {
                    assert!(
                        message.contains("takes a module name")
                            && message.contains("loadrt ./NAME.so"),
                        "{message}"
                    )
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn search_path_is_config_then_environment_then_debian() {
        let p = ModuleLoader::new().search_path();
        assert_eq!(p.last().unwrap(), Path::new(DEBIAN_MODULE_DIR));
    }
}
