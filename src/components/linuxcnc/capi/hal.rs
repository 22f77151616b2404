//! The `hal_*` entry points: HAL memory, components, pins, params, functions and param aliases,
//! accepted only while a module's `rtapi_app_main` runs.

use super::*;

// ---- memory ---------------------------------------------------------------------------------------

/// `hal_malloc`'s memory: chunks mapped once and never freed (modules keep pointers into it for the
/// life of the process, and pin pointers written by link/unlink stay valid targets).
struct Arena {
    next: usize,
    end: usize,
}

/// Process-wide: `hal_malloc` carries no context, and its memory outlives any one host (modules
/// keep pointers into it until the process ends; it is never freed).
static ARENA: Mutex<Arena> = Mutex::new(Arena { next: 0, end: 0 });
const CHUNK: usize = 1 << 20;
const ALIGN: usize = 16;

/// `size` zeroed bytes, 16-aligned; null when the system has no memory left.
pub(super) fn arena_alloc(size: usize) -> *mut u8 {
    let size = size.max(1).next_multiple_of(ALIGN);
    let mut a = lock(&ARENA);
    if a.end - a.next < size {
        let len = size.max(CHUNK).next_multiple_of(4096);
        // SAFETY: an anonymous private mapping, no address hint; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        a.next = p as usize;
        a.end = p as usize + len;
    }
    let p = a.next;
    a.next += size;
    p as *mut u8
}

/// `void *hal_malloc(long size)`: zeroed memory that lives as long as the process.
#[no_mangle]
pub extern "C" fn hal_malloc(size: c_long) -> *mut c_void {
    match usize::try_from(size) {
        Ok(n) if n > 0 => arena_alloc(n).cast(),
        _ => {
            fail(
                libc::EINVAL,
                format!("hal_malloc({size}): give a positive size"),
            );
            std::ptr::null_mut()
        }
    }
}

// ---- components -----------------------------------------------------------------------------------

/// `int hal_init(const char *name)`: a component; returns its id (> 0).
///
/// # Safety
/// `name` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn hal_init(name: *const c_char) -> c_int {
    // SAFETY: the caller passes a C string (or null, refused).
    let Some(name) = (unsafe { text(name) }) else {
        return fail(libc::EINVAL, "hal_init: no component name".into());
    };
    let r = with_loading("hal_init", |l| {
        let key = l
            .target()
            .hal_side()
            .component(name)
            .map_err(|e| format!("hal_init({name}): {e}"))?;
        let c = Arc::new(Comp {
            name: name.to_string(),
            cname: std::ffi::CString::new(name).expect("from a C string"),
            module: l.serial,
            key,
            objects: Mutex::new(Objects::default()),
            bound: OnceLock::new(),
            exited: Default::default(),
        });
        let id = Registry::add_comp(c.clone());
        l.comps.push(c);
        c_int::try_from(id).map_err(|_| "hal_init: too many components".to_string())
    });
    r.unwrap_or_else(|m| fail(libc::EINVAL, m))
}

/// `int hal_ready(int comp_id)`.
#[no_mangle]
pub extern "C" fn hal_ready(comp_id: c_int) -> c_int {
    match comp(comp_id) {
        Some(_) => 0,
        None => fail(libc::EINVAL, format!("hal_ready: no component {comp_id}")),
    }
}

/// `int hal_set_unready(int comp_id)`.
#[no_mangle]
pub extern "C" fn hal_set_unready(comp_id: c_int) -> c_int {
    hal_ready(comp_id)
}

/// `int hal_exit(int comp_id)`: the component is done (its objects go with the instance, or with
/// `unloadrt`, which deletes them first).
#[no_mangle]
pub extern "C" fn hal_exit(comp_id: c_int) -> c_int {
    match comp(comp_id) {
        Some(c) => {
            c.exited.store(true, Ordering::Relaxed);
            0
        }
        None => fail(libc::EINVAL, format!("hal_exit: no component {comp_id}")),
    }
}

/// `char *hal_comp_name(int comp_id)`: null for an unknown id.
#[no_mangle]
pub extern "C" fn hal_comp_name(comp_id: c_int) -> *const c_char {
    // The name lives in the `Registry`, which never drops a component.
    comp(comp_id).map_or(std::ptr::null(), |c| c.cname.as_ptr())
}

/// The component `comp_id` if the module being loaded made it.
fn own_comp(l: &Loading, comp_id: c_int, what: &str) -> Result<Arc<Comp>, String> {
    l.comps
        .iter()
        .find(|c| comp(comp_id).is_some_and(|k| Arc::ptr_eq(c, &k)))
        .cloned()
        .ok_or_else(|| {
            format!("{what}: component id {comp_id} is not one this module made with hal_init")
        })
}

fn value_type(code: c_int) -> Option<ValueType> {
    match code {
        1 => Some(ValueType::Bit),
        2 => Some(ValueType::Float),
        3 => Some(ValueType::S32),
        4 => Some(ValueType::U32),
        _ => None,
    }
}

fn width(ty: ValueType) -> usize {
    match ty {
        ValueType::Bit => 1,
        ValueType::S32 | ValueType::U32 => 4,
        _ => 8,
    }
}

// ---- pins -----------------------------------------------------------------------------------------

fn pin_new(
    name: *const c_char,
    ty: c_int,
    dir: c_int,
    ptr: *mut *mut c_void,
    comp_id: c_int,
) -> c_int {
    // SAFETY: every caller passes the module's C string (or null, refused).
    let Some(name) = (unsafe { text(name) }) else {
        return fail(libc::EINVAL, "hal_pin_new: no pin name".into());
    };
    let Some(ty) = value_type(ty) else {
        return fail(
            libc::EINVAL,
            format!(
                "pin {name}: type {ty} is not bit, float, s32 or u32 (port pins are not supported)"
            ),
        );
    };
    let dir = match dir {
        16 => PinDir::In,
        32 => PinDir::Out,
        48 => PinDir::Io,
        d => {
            return fail(
                libc::EINVAL,
                format!("pin {name}: direction {d} is not HAL_IN, HAL_OUT or HAL_IO"),
            )
        }
    };
    if ptr.is_null() || (ptr as usize) % std::mem::align_of::<*mut c_void>() != 0 {
        return fail(
            libc::EINVAL,
            format!("pin {name}: the pointer's address is null or misaligned"),
        );
    }
    let r = with_loading("hal_pin_new", |l| {
        let c = own_comp(l, comp_id, &format!("pin {name}"))?;
        let init = l.preset(name, ty).unwrap_or(0);
        let live = l.is_live();
        let staging = if live {
            0
        } else {
            let cell = arena_alloc(8);
            if cell.is_null() {
                return Err(format!("pin {name}: out of memory"));
            }
            // SAFETY: a fresh 8-byte, 16-aligned arena cell.
            unsafe { super::super::write_c(cell as usize, ty, init) };
            cell as usize
        };
        let mut side = l.target().hal_side();
        declare_pin(&mut side, c.key, name, ty, dir, init)?;
        match &side {
            HalSide::Live(hal) => {
                // SAFETY: `ptr` is the module's `T **`, non-null and aligned (checked above), in
                // memory the module got from hal_malloc (never freed); only we write it.
                unsafe { hal.attach_pin_pointer(name, ptr.cast(), std::ptr::null_mut()) }
                    .map_err(|e| e.to_string())?;
            }
            HalSide::Building(_) => {
                // SAFETY: as above; the staging cell lives forever in the arena.
                unsafe { *ptr = staging as *mut c_void };
            }
        }
        lock(&c.objects).pins.push(PinRec {
            name: name.to_string(),
            ty,
            dir,
            pointer: ptr as usize,
            staging,
        });
        l.declared().pins.insert(name.to_string(), (ty, dir));
        Ok(0)
    });
    r.unwrap_or_else(|m| fail(libc::EINVAL, m))
}

/// `int hal_pin_new(const char *name, hal_type_t type, hal_pin_dir_t dir, void **data_ptr_addr, int comp_id)`.
///
/// # Safety
/// `name` must be a C string; `data_ptr_addr` must point into memory from `hal_malloc`.
#[no_mangle]
pub unsafe extern "C" fn hal_pin_new(
    name: *const c_char,
    ty: c_int,
    dir: c_int,
    data_ptr_addr: *mut *mut c_void,
    comp_id: c_int,
) -> c_int {
    pin_new(name, ty, dir, data_ptr_addr, comp_id)
}

macro_rules! typed_pin_new {
    ($fname:ident, $code:expr) => {
        /// `int hal_pin_<type>_new(const char *name, hal_pin_dir_t dir, T **data_ptr_addr, int comp_id)`.
        ///
        /// # Safety
        /// `name` must be a C string; `data_ptr_addr` must point into memory from `hal_malloc`.
        #[no_mangle]
        pub unsafe extern "C" fn $fname(
            name: *const c_char,
            dir: c_int,
            data_ptr_addr: *mut *mut c_void,
            comp_id: c_int,
        ) -> c_int {
            pin_new(name, $code, dir, data_ptr_addr, comp_id)
        }
    };
}
typed_pin_new!(hal_pin_bit_new, 1);
typed_pin_new!(hal_pin_float_new, 2);
typed_pin_new!(hal_pin_s32_new, 3);
typed_pin_new!(hal_pin_u32_new, 4);

// ---- params ---------------------------------------------------------------------------------------

fn param_new(
    name: *const c_char,
    ty: c_int,
    dir: c_int,
    addr: *mut c_void,
    comp_id: c_int,
) -> c_int {
    // SAFETY: every caller passes the module's C string (or null, refused).
    let Some(name) = (unsafe { text(name) }) else {
        return fail(libc::EINVAL, "hal_param_new: no param name".into());
    };
    let Some(ty) = value_type(ty) else {
        return fail(
            libc::EINVAL,
            format!("param {name}: type {ty} is not bit, float, s32 or u32"),
        );
    };
    let access = match dir {
        64 => ParamAccess::Ro,
        192 => ParamAccess::Rw,
        d => {
            return fail(
                libc::EINVAL,
                format!("param {name}: direction {d} is not HAL_RO or HAL_RW"),
            )
        }
    };
    if addr.is_null() || (addr as usize) % width(ty) != 0 {
        return fail(
            libc::EINVAL,
            format!("param {name}: the variable's address is null or misaligned"),
        );
    }
    let r = with_loading("hal_param_new", |l| {
        let c = own_comp(l, comp_id, &format!("param {name}"))?;
        // SAFETY: the module's variable of the type's width, non-null and aligned (checked above).
        let init = unsafe { read_c(addr as usize, ty) };
        let mut side = l.target().hal_side();
        declare_param(&mut side, c.key, name, ty, access, init)?;
        lock(&c.objects).params.push(ParamRec {
            name: name.to_string(),
            ty,
            addr: addr as usize,
        });
        l.declared().params.insert(name.to_string(), (ty, access));
        Ok(0)
    });
    r.unwrap_or_else(|m| fail(libc::EINVAL, m))
}

/// `int hal_param_new(const char *name, hal_type_t type, hal_param_dir_t dir, void *data_addr, int comp_id)`.
///
/// # Safety
/// `name` must be a C string; `data_addr` the module's variable of that type, alive while loaded.
#[no_mangle]
pub unsafe extern "C" fn hal_param_new(
    name: *const c_char,
    ty: c_int,
    dir: c_int,
    data_addr: *mut c_void,
    comp_id: c_int,
) -> c_int {
    param_new(name, ty, dir, data_addr, comp_id)
}

macro_rules! typed_param_new {
    ($fname:ident, $code:expr) => {
        /// `int hal_param_<type>_new(const char *name, hal_param_dir_t dir, T *data_addr, int comp_id)`.
        ///
        /// # Safety
        /// `name` must be a C string; `data_addr` the module's variable of that type.
        #[no_mangle]
        pub unsafe extern "C" fn $fname(
            name: *const c_char,
            dir: c_int,
            data_addr: *mut c_void,
            comp_id: c_int,
        ) -> c_int {
            param_new(name, $code, dir, data_addr, comp_id)
        }
    };
}
typed_param_new!(hal_param_bit_new, 1);
typed_param_new!(hal_param_float_new, 2);
typed_param_new!(hal_param_s32_new, 3);
typed_param_new!(hal_param_u32_new, 4);

// ---- functions ------------------------------------------------------------------------------------

/// A module's realtime function.
type Funct = unsafe extern "C" fn(*mut c_void, c_long);

/// `int hal_export_funct(const char *name, void (*funct)(void *, long), void *arg, int uses_fp,
/// int reentrant, int comp_id)`: a function in rtapi's table, called as `funct(arg, period_ns)` by
/// the thread it is `addf`ed to, timed and watched like a native one.
///
/// # Safety
/// `name` must be a C string; `funct` a function of the module that stays loaded.
#[no_mangle]
pub unsafe extern "C" fn hal_export_funct(
    name: *const c_char,
    funct: Option<Funct>,
    arg: *mut c_void,
    _uses_fp: c_int,
    _reentrant: c_int,
    comp_id: c_int,
) -> c_int {
    // SAFETY: the module's C string (or null, refused).
    let Some(name) = (unsafe { text(name) }) else {
        return fail(libc::EINVAL, "hal_export_funct: no function name".into());
    };
    let Some(funct) = funct else {
        return fail(
            libc::EINVAL,
            format!("function {name}: null function pointer"),
        );
    };
    let r = with_loading("hal_export_funct", |l| {
        let c = own_comp(l, comp_id, &format!("function {name}"))?;
        let factory = function_factory(c.clone(), funct, arg, l.module, l.is_live());
        l.target()
            .function(c.key, name, factory)
            .map_err(|e| format!("function {name}: {}", e.message))?;
        let d = l.declared();
        d.function_health(name);
        d.functions.insert(name.to_string(), c.name.clone());
        Ok(0)
    });
    r.unwrap_or_else(|m| fail(libc::EINVAL, m))
}

// ---- param aliases ----------------------------------------------------------------------------------

/// `int hal_param_alias(const char *param_name, const char *alias)`: LinuxCNC renames the param to
/// `alias` (its old name still finds it). rtapi's HAL has no aliases: removing one (`alias` null) is
/// a no-op that succeeds; giving one fails with `-ENOSYS` and says so (the param keeps its name).
///
/// # Safety
/// `param_name` and `alias` must be null or C strings.
#[no_mangle]
pub unsafe extern "C" fn hal_param_alias(param_name: *const c_char, alias: *const c_char) -> c_int {
    if alias.is_null() {
        return 0;
    }
    // SAFETY: the caller passes C strings (or null).
    let (name, alias) = unsafe { (text(param_name), text(alias)) };
    fail(
        libc::ENOSYS,
        format!(
            "hal_param_alias({}, {}): rtapi's HAL has no param aliases; the param keeps its name",
            name.unwrap_or("?"),
            alias.unwrap_or("?")
        ),
    )
}
