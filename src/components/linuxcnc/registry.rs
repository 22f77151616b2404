//! The process's modules and components: what the C interface finds from a module's callback (the
//! process-wide [`Registry`], the thread-local load in progress), the kept modules a target
//! releases, and declaring a module's pins, params and functions into the target.

use super::*;

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
    pub(super) next_serial: u64,
    /// The module files loaded and kept (by a runtime or a harness), canonical.
    pub(super) kept: Vec<PathBuf>,
}

/// The one process-wide record of the module loaders, because the C interface and the dynamic loader
/// are process-wide: `hal_ready`, `hal_exit` and `hal_comp_name` name a component by an int id and
/// carry no other context, and a module file is mapped once per process (a second load would share
/// the first one's statics, so it is refused whichever loader asks). Reached only through
/// [`Registry::comp`], [`Registry::add_comp`] and the loading code of this module.
pub(super) static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
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
    pub(super) serial: u64,
    pub(super) name: &'static str,
    pub(super) path: PathBuf,
    pub(super) handle: usize,
    pub(super) exit: Option<unsafe extern "C" fn()>,
    /// Argument strings the module points at.
    pub(super) _strings: Vec<CString>,
    pub(super) components: Vec<String>,
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
    pub(super) target: *mut (dyn Target + 'static),
    pub(super) declared: *mut Declared,
    pub(super) presets: *const Presets,
    pub(crate) serial: u64,
    pub(crate) module: &'static str,
    /// Components made by this load.
    pub(crate) comps: Vec<Arc<Comp>>,
    /// Error messages the module printed while loading (for the `loadrt` error).
    pub(crate) errors: Vec<String>,
    /// Every message it printed while loading, logged once `rtapi_app_main` succeeded.
    pub(crate) held: Vec<(c_int, String)>,
    pub(super) live: bool,
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
