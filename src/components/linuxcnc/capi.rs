//! The C interface rtapi offers LinuxCNC modules: `hal_*` and `rtapi_*` entry points with LinuxCNC
//! 2.9's signatures (hal.h, rtapi.h), exported from the `rtapi` binary (build.rs's dynamic symbol
//! list) so `dlopen` resolves modules against them. The printf-style ones are in `shim.c` and call
//! back into the functions here.
//!
//! Making things (components, pins, params, functions) is accepted only while a module's
//! `rtapi_app_main` runs (the load in [`LOADING`]); elsewhere it fails with a message. Errors are
//! negative errno values, as LinuxCNC's, and each is logged with the module's name.

use std::ffi::{c_char, c_int, c_long, c_longlong, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rtapi_hal::{ParamAccess, PinDir, ValueType};

use super::{
    declare_param, declare_pin, function_factory, lock, read_c, Comp, Loading, Objects, ParamRec,
    PinRec, COMPS, CURRENT, LOADING,
};
use crate::components::target::HalSide;

/// LinuxCNC's message levels (rtapi.h `msg_level_t`).
const MSG_NONE: c_int = 0;
const MSG_ERR: c_int = 1;
const MSG_WARN: c_int = 2;
const MSG_INFO: c_int = 3;
const MSG_ALL: c_int = 5;

/// `rtapi_set_msg_level`: messages above it are dropped. LinuxCNC's default shows errors only.
static MSG_LEVEL: AtomicI32 = AtomicI32::new(MSG_ERR);

/// The longest `rtapi_delay` (ns), as `rtapi_delay_max` reports.
const DELAY_MAX_NS: c_long = 10_000;

fn module_name() -> &'static str {
    let m = CURRENT.with(|c| c.get());
    if m.is_empty() {
        "linuxcnc"
    } else {
        m
    }
}

/// Logs a message of a module at LinuxCNC level `level`.
pub(super) fn log_message(level: c_int, text: &str) {
    let text = text.trim_end_matches('\n');
    let module = module_name();
    let level = match level {
        MSG_ERR => log::Level::Error,
        MSG_WARN => log::Level::Warn,
        MSG_INFO | MSG_ALL => log::Level::Info,
        _ => log::Level::Debug,
    };
    log::log!(target: "linuxcnc", level, "{module}: {text}");
}

/// A message of the module being loaded is held (not logged) until its `rtapi_app_main` returns:
/// its errors then become the `loadrt` error, or everything is logged. False: no load in progress
/// on this thread (log it now).
fn hold(level: c_int, text: &str) -> bool {
    LOADING.with(|l| {
        let Ok(mut g) = l.try_borrow_mut() else {
            return false;
        };
        let Some(ld) = g.as_mut() else {
            return false;
        };
        let text = text.trim_end().to_string();
        if level == MSG_ERR {
            ld.errors.push(text.clone());
        }
        ld.held.push((level, text));
        true
    })
}

/// Logs a message now, or holds it while a module loads (see [`hold`]).
fn message(level: c_int, text: &str) {
    if !hold(level, text) {
        log_message(level, text);
    }
}

/// A failed call: logged (or held), remembered for the `loadrt` error, returned as `-errno`.
fn fail(errno: c_int, text: String) -> c_int {
    message(MSG_ERR, &text);
    -errno
}

/// Runs `f` on the load in progress (making things is only allowed while loading).
fn with_loading<R>(
    what: &str,
    f: impl FnOnce(&mut Loading) -> Result<R, String>,
) -> Result<R, String> {
    LOADING.with(|l| {
        let mut g = l.try_borrow_mut().map_err(|_| {
            format!("{what}: called again from inside another HAL call; rtapi does not allow that")
        })?;
        match g.as_mut() {
            Some(ld) => f(ld),
            None => Err(format!(
                "{what}: rtapi accepts it only while a module's rtapi_app_main runs"
            )),
        }
    })
}

/// A C string argument, or `None` for null / not UTF-8.
///
/// # Safety
/// `p` must be null or a NUL-terminated string valid for the call.
unsafe fn text<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: forwarded from the caller.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

fn comp(id: c_int) -> Option<Arc<Comp>> {
    let i = usize::try_from(id).ok()?.checked_sub(1)?;
    lock(&COMPS).get(i).cloned()
}

// ---- memory ---------------------------------------------------------------------------------------

/// `hal_malloc`'s memory: chunks mapped once and never freed (modules keep pointers into it for the
/// life of the process, and pin pointers written by link/unlink stay valid targets).
struct Arena {
    next: usize,
    end: usize,
}

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
        let id = {
            let mut comps = lock(&COMPS);
            comps.push(c.clone());
            comps.len()
        };
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
    // The name lives in `COMPS`, which never drops a component.
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
            let cell = super::capi::arena_alloc(8);
            if cell.is_null() {
                return Err(format!("pin {name}: out of memory"));
            }
            // SAFETY: a fresh 8-byte, 16-aligned arena cell.
            unsafe { super::write_c(cell as usize, ty, init) };
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

// ---- messages -------------------------------------------------------------------------------------

/// Called by shim.c with a formatted message of `rtapi_print_msg` (or `rtapi_print`, level ALL).
///
/// # Safety
/// `text` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rtapi_host_message(level: c_int, text: *const c_char, truncated: c_int) {
    if level != MSG_ALL && (level <= MSG_NONE || level > MSG_LEVEL.load(Ordering::Relaxed)) {
        return;
    }
    if text.is_null() {
        return;
    }
    // SAFETY: shim.c passes its NUL-terminated buffer.
    let t = unsafe { CStr::from_ptr(text) }.to_string_lossy();
    let t = if truncated != 0 {
        format!("{t}… (cut)")
    } else {
        t.into_owned()
    };
    message(level, &t);
}

/// Called by shim.c when a `_newf` name does not fit LinuxCNC's 47 characters.
///
/// # Safety
/// `what` and `fmt` must be NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn rtapi_host_name_too_long(what: *const c_char, fmt: *const c_char) {
    // SAFETY: shim.c passes string literals and the module's format string.
    let (what, fmt) = unsafe { (text(what).unwrap_or("name"), text(fmt).unwrap_or("?")) };
    fail(
        libc::EINVAL,
        format!("a {what} name made from '{fmt}' is longer than 47 characters"),
    );
}

/// `int rtapi_get_msg_level(void)`.
#[no_mangle]
pub extern "C" fn rtapi_get_msg_level() -> c_int {
    MSG_LEVEL.load(Ordering::Relaxed)
}

/// `int rtapi_set_msg_level(int level)`: 0 (none) … 5 (all).
#[no_mangle]
pub extern "C" fn rtapi_set_msg_level(level: c_int) -> c_int {
    if !(MSG_NONE..=MSG_ALL).contains(&level) {
        return -libc::EINVAL;
    }
    MSG_LEVEL.store(level, Ordering::Relaxed);
    0
}

// ---- time -----------------------------------------------------------------------------------------

/// `long long rtapi_get_time(void)`: CLOCK_MONOTONIC in ns.
#[no_mangle]
pub extern "C" fn rtapi_get_time() -> c_longlong {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists (vDSO, no allocation).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as c_longlong * 1_000_000_000 + ts.tv_nsec as c_longlong
}

/// `long long rtapi_get_clocks(void)`: the CPU's time-stamp counter (ns elsewhere).
#[no_mangle]
pub extern "C" fn rtapi_get_clocks() -> c_longlong {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU.
        unsafe { std::arch::x86_64::_rdtsc() as c_longlong }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        rtapi_get_time()
    }
}

/// `void rtapi_delay(long ns)`: busy-waits, at most [`rtapi_delay_max`].
#[no_mangle]
pub extern "C" fn rtapi_delay(nsec: c_long) {
    let ns = nsec.clamp(0, DELAY_MAX_NS) as c_longlong;
    let end = rtapi_get_time() + ns;
    while rtapi_get_time() < end {
        std::hint::spin_loop();
    }
}

/// `long rtapi_delay_max(void)`.
#[no_mangle]
pub extern "C" fn rtapi_delay_max() -> c_long {
    DELAY_MAX_NS
}

// ---- shared memory ----------------------------------------------------------------------------------

/// `rtapi_shmem_*` blocks: by key, from the arena (private to this process: rtapi's modules all live
/// in it).
static SHMEM: Mutex<Vec<(c_int, usize, usize)>> = Mutex::new(Vec::new());

/// `int rtapi_shmem_new(int key, int module_id, unsigned long size)`: an id (> 0); the same key
/// gives the same block.
#[no_mangle]
pub extern "C" fn rtapi_shmem_new(key: c_int, _module_id: c_int, size: c_ulong) -> c_int {
    let mut s = lock(&SHMEM);
    if let Some(i) = s.iter().position(|b| b.0 == key) {
        if s[i].2 < size as usize {
            drop(s);
            return fail(
                libc::EINVAL,
                format!("rtapi_shmem_new: key {key} exists with a smaller size"),
            );
        }
        return i as c_int + 1;
    }
    let p = arena_alloc(size as usize);
    if p.is_null() {
        drop(s);
        return fail(
            libc::ENOMEM,
            format!("rtapi_shmem_new: no memory for {size} bytes"),
        );
    }
    s.push((key, p as usize, size as usize));
    s.len() as c_int
}

/// `int rtapi_shmem_getptr(int id, void **ptr)`.
///
/// # Safety
/// `ptr` must be valid for a pointer write.
#[no_mangle]
pub unsafe extern "C" fn rtapi_shmem_getptr(id: c_int, ptr: *mut *mut c_void) -> c_int {
    let s = lock(&SHMEM);
    let Some(b) = usize::try_from(id)
        .ok()
        .and_then(|i| i.checked_sub(1))
        .and_then(|i| s.get(i))
    else {
        return -libc::EINVAL;
    };
    if ptr.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: the caller gives a writable pointer slot (checked non-null).
    unsafe { *ptr = b.1 as *mut c_void };
    0
}

/// `int rtapi_shmem_delete(int id, int module_id)`: the block stays (arena memory is never freed).
#[no_mangle]
pub extern "C" fn rtapi_shmem_delete(_id: c_int, _module_id: c_int) -> c_int {
    0
}

// ---- keeping the symbols in the binary ----------------------------------------------------------------

extern "C" {
    fn rtapi_print(fmt: *const c_char, ...);
    fn rtapi_print_msg(level: c_int, fmt: *const c_char, ...);
    fn rtapi_snprintf(buf: *mut c_char, size: c_ulong, fmt: *const c_char, ...) -> c_int;
    fn rtapi_vsnprintf(
        buf: *mut c_char,
        size: c_ulong,
        fmt: *const c_char,
        ap: *mut c_void,
    ) -> c_int;
    fn hal_pin_bit_newf(
        dir: c_int,
        p: *mut *mut c_void,
        id: c_int,
        fmt: *const c_char,
        ...
    ) -> c_int;
    fn hal_pin_float_newf(
        dir: c_int,
        p: *mut *mut c_void,
        id: c_int,
        fmt: *const c_char,
        ...
    ) -> c_int;
    fn hal_pin_s32_newf(
        dir: c_int,
        p: *mut *mut c_void,
        id: c_int,
        fmt: *const c_char,
        ...
    ) -> c_int;
    fn hal_pin_u32_newf(
        dir: c_int,
        p: *mut *mut c_void,
        id: c_int,
        fmt: *const c_char,
        ...
    ) -> c_int;
    fn hal_param_bit_newf(dir: c_int, p: *mut c_void, id: c_int, fmt: *const c_char, ...) -> c_int;
    fn hal_param_float_newf(
        dir: c_int,
        p: *mut c_void,
        id: c_int,
        fmt: *const c_char,
        ...
    ) -> c_int;
    fn hal_param_s32_newf(dir: c_int, p: *mut c_void, id: c_int, fmt: *const c_char, ...) -> c_int;
    fn hal_param_u32_newf(dir: c_int, p: *mut c_void, id: c_int, fmt: *const c_char, ...) -> c_int;
}

/// Takes the address of every entry point so the linker keeps them all in the binary, where the
/// dynamic symbol list (build.rs) exports them to modules.
pub(super) fn keep_linked() {
    let all: [*const (); 38] = [
        hal_init as *const (),
        hal_ready as *const (),
        hal_set_unready as *const (),
        hal_exit as *const (),
        hal_malloc as *const (),
        hal_comp_name as *const (),
        hal_export_funct as *const (),
        hal_pin_new as *const (),
        hal_pin_bit_new as *const (),
        hal_pin_float_new as *const (),
        hal_pin_s32_new as *const (),
        hal_pin_u32_new as *const (),
        hal_pin_bit_newf as *const (),
        hal_pin_float_newf as *const (),
        hal_pin_s32_newf as *const (),
        hal_pin_u32_newf as *const (),
        hal_param_new as *const (),
        hal_param_bit_new as *const (),
        hal_param_float_new as *const (),
        hal_param_s32_new as *const (),
        hal_param_u32_new as *const (),
        hal_param_bit_newf as *const (),
        hal_param_float_newf as *const (),
        hal_param_s32_newf as *const (),
        hal_param_u32_newf as *const (),
        rtapi_print as *const (),
        rtapi_print_msg as *const (),
        rtapi_snprintf as *const (),
        rtapi_vsnprintf as *const (),
        rtapi_get_msg_level as *const (),
        rtapi_set_msg_level as *const (),
        rtapi_get_time as *const (),
        rtapi_get_clocks as *const (),
        rtapi_delay as *const (),
        rtapi_delay_max as *const (),
        rtapi_shmem_new as *const (),
        rtapi_shmem_getptr as *const (),
        rtapi_shmem_delete as *const (),
    ];
    std::hint::black_box(all);
}
