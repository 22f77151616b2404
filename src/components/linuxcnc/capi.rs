//! The C interface rtapi offers LinuxCNC modules: `hal_*` and `rtapi_*` entry points with LinuxCNC
//! 2.9's signatures (hal.h, rtapi.h), exported from the `rtapi` binary (build.rs's dynamic symbol
//! list) so `dlopen` resolves modules against them. The printf-style ones are in `shim.c` and call
//! back into the functions here.
//!
//! Making things (components, pins, params, functions) is accepted only while a module's
//! `rtapi_app_main` runs (the load in [`LOADING`]); elsewhere it fails with a message. Errors are
//! negative errno values, as LinuxCNC's, and each is logged with the module's name.

// The entry points are reached from C (`#[no_mangle]`, the binary's dynamic symbol list), not from
// Rust: `pub` says they are an interface, which `unreachable_pub` cannot see.
#![allow(unreachable_pub)]

use std::ffi::{c_char, c_int, c_long, c_longlong, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rtapi_hal::{ParamAccess, PinDir, ValueType};

use super::{
    declare_param, declare_pin, function_factory, lock, read_c, Comp, Loading, Objects, ParamRec,
    PinRec, Registry, CURRENT, LOADING,
};
use crate::components::target::HalSide;
use crate::rt::portio::access as io_access;

/// LinuxCNC's message levels (rtapi.h `msg_level_t`).
const MSG_NONE: c_int = 0;
const MSG_ERR: c_int = 1;
const MSG_WARN: c_int = 2;
const MSG_INFO: c_int = 3;
pub(super) const MSG_ALL: c_int = 5;

/// `rtapi_set_msg_level`: messages above it are dropped. LinuxCNC's default shows errors only.
/// Process-wide as in LinuxCNC: the C call carries no context, and every module of the process shares it.
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
    Registry::comp(id)
}

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
    if let Some(m) = super::personality::master() {
        // SAFETY: shim.c passes its NUL-terminated buffer.
        let t = unsafe { CStr::from_ptr(text) };
        (m.module_message)(level, t, truncated != 0);
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
/// in it). Process-wide: a key names the same block for every module of the process, whichever
/// host loaded it (the C calls carry only the key).
static SHMEM: Mutex<Vec<(c_int, usize, usize)>> = Mutex::new(Vec::new());

/// `int rtapi_shmem_new(int key, int module_id, unsigned long size)`: an id (> 0); the same key
/// gives the same block.
#[no_mangle]
pub extern "C" fn rtapi_shmem_new(key: c_int, _module_id: c_int, size: c_ulong) -> c_int {
    if let Some(m) = super::personality::master() {
        return match (m.shmem_new)(key, size as usize) {
            Ok(h) => h,
            Err((rc, text)) => {
                (m.say)(&format!("rtapi: {text}"));
                rc
            }
        };
    }
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
    if let Some(m) = super::personality::master() {
        let Some(p) = (m.shmem_getptr)(id) else {
            return -libc::EINVAL;
        };
        if ptr.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: the caller gives a writable pointer slot (checked non-null).
        unsafe { *ptr = p };
        return 0;
    }
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

/// `int rtapi_shmem_delete(int id, int module_id)`: the block stays (arena memory is never freed);
/// in the master, one use of the SysV segment less (its [`super::personality::MasterHooks`]).
#[no_mangle]
pub extern "C" fn rtapi_shmem_delete(id: c_int, _module_id: c_int) -> c_int {
    if let Some(m) = super::personality::master() {
        return (m.shmem_delete)(id);
    }
    0
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

// ---- argument strings -----------------------------------------------------------------------------

/// `long simple_strtol(const char *nptr, char **endptr, int base)` (rtapi.h, user space): `strtol`.
///
/// # Safety
/// As `strtol`: `nptr` a C string, `endptr` null or writable.
#[no_mangle]
pub unsafe extern "C" fn simple_strtol(
    nptr: *const c_char,
    endptr: *mut *mut c_char,
    base: c_int,
) -> c_long {
    // SAFETY: forwarded from the caller, whose contract is strtol's.
    unsafe { libc::strtol(nptr, endptr, base) }
}

/// `char **rtapi_argv_split(rtapi_gfp_t, const char *argstr, int *argc)`: the words of `argstr`
/// (split on whitespace) as a NULL-terminated array, `*argc` their count (when `argc` is not null);
/// null when out of memory. One `malloc`ed block holds the array and the strings:
/// [`rtapi_argv_free`] frees it.
///
/// # Safety
/// `argstr` must be null or a C string; `argc` null or writable.
#[no_mangle]
pub unsafe extern "C" fn rtapi_argv_split(
    _gfp: c_ulong,
    argstr: *const c_char,
    argc: *mut c_int,
) -> *mut *mut c_char {
    let bytes: &[u8] = if argstr.is_null() {
        &[]
    } else {
        // SAFETY: a C string (the caller's contract).
        unsafe { CStr::from_ptr(argstr) }.to_bytes()
    };
    let words: Vec<&[u8]> = bytes
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .collect();
    let n = words.len();
    let table = (n + 1) * std::mem::size_of::<*mut c_char>();
    let strings: usize = words.iter().map(|w| w.len() + 1).sum();
    // SAFETY: malloc of a non-zero size; the result is checked before use.
    let block = unsafe { libc::malloc(table + strings) }.cast::<u8>();
    if block.is_null() {
        fail(libc::ENOMEM, "rtapi_argv_split: out of memory".to_string());
        return std::ptr::null_mut();
    }
    let argv = block.cast::<*mut c_char>();
    let mut at = table;
    for (i, w) in words.iter().enumerate() {
        // SAFETY: `block` has `table + strings` bytes: slot `i` < n+1 of the table, and the word and
        // its NUL end at most at `table + strings` (the sum counts every word's length + 1); malloc
        // aligns the block for pointers.
        unsafe {
            let dst = block.add(at);
            std::ptr::copy_nonoverlapping(w.as_ptr(), dst, w.len());
            *dst.add(w.len()) = 0;
            *argv.add(i) = dst.cast();
        }
        at += w.len() + 1;
    }
    // SAFETY: slot n of the table (n + 1 slots), and `argc` is null or writable (the contract).
    unsafe {
        *argv.add(n) = std::ptr::null_mut();
        if !argc.is_null() {
            *argc = c_int::try_from(n).unwrap_or(c_int::MAX);
        }
    }
    argv
}

/// `void rtapi_argv_free(char **argv)`: frees what [`rtapi_argv_split`] returned (null: nothing).
///
/// # Safety
/// `argv` must be null or a result of `rtapi_argv_split` not freed yet.
#[no_mangle]
pub unsafe extern "C" fn rtapi_argv_free(argv: *mut *mut c_char) {
    // SAFETY: one malloc'ed block (or null), freed once (the caller's contract).
    unsafe { libc::free(argv.cast()) }
}

// ---- firmware ---------------------------------------------------------------------------------------

/// LinuxCNC's `struct rtapi_firmware` (rtapi_firmware.h).
#[repr(C)]
pub struct RtapiFirmware {
    size: usize,
    data: *const u8,
}

/// Where firmware is looked for, as LinuxCNC's uspace: the running kernel's directory first.
const FIRMWARE_DIR: &str = "/lib/firmware";

fn kernel_release() -> Option<String> {
    // SAFETY: a zeroed utsname is a valid output buffer for uname.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    // SAFETY: uname NUL-terminates its fields.
    let r = unsafe { CStr::from_ptr(u.release.as_ptr()) };
    r.to_str().ok().map(String::from)
}

/// `int rtapi_request_firmware(const struct rtapi_firmware **fw, const char *name, struct
/// rtapi_device *device)`: reads `/lib/firmware/<kernel release>/<name>`, else
/// `/lib/firmware/<name>`, into `*fw` (0), or says which files it tried (`-ENOENT`, `-EINVAL` for
/// a name that is not relative, `-ENOMEM`). The caller releases it with [`rtapi_release_firmware`].
///
/// # Safety
/// `fw` must be writable; `name` null or a C string.
#[no_mangle]
pub unsafe extern "C" fn rtapi_request_firmware(
    fw: *mut *const RtapiFirmware,
    name: *const c_char,
    _device: *mut c_void,
) -> c_int {
    if fw.is_null() {
        return fail(
            libc::EINVAL,
            "rtapi_request_firmware: no result pointer".into(),
        );
    }
    // SAFETY: writable (checked non-null; the caller's contract).
    unsafe { *fw = std::ptr::null() };
    // SAFETY: the caller passes a C string (or null, refused).
    let Some(name) = (unsafe { text(name) }) else {
        return fail(libc::EINVAL, "rtapi_request_firmware: no file name".into());
    };
    if name.is_empty() || name.starts_with('/') || name.split('/').any(|p| p == "..") {
        return fail(
            libc::EINVAL,
            format!("rtapi_request_firmware: '{name}' is not a file name under {FIRMWARE_DIR}"),
        );
    }
    let mut tried = Vec::new();
    if let Some(rel) = kernel_release() {
        tried.push(format!("{FIRMWARE_DIR}/{rel}/{name}"));
    }
    tried.push(format!("{FIRMWARE_DIR}/{name}"));
    let mut last = String::new();
    for path in &tried {
        match std::fs::read(path) {
            Ok(bytes) => {
                let head = std::mem::size_of::<RtapiFirmware>();
                // SAFETY: malloc of a non-zero size; checked before use.
                let block = unsafe { libc::malloc(head + bytes.len()) }.cast::<u8>();
                if block.is_null() {
                    return fail(
                        libc::ENOMEM,
                        format!("rtapi_request_firmware({name}): out of memory"),
                    );
                }
                // SAFETY: the block holds the struct (malloc aligns it) followed by the file's
                // bytes; `*fw` is writable.
                unsafe {
                    let data = block.add(head);
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len());
                    block.cast::<RtapiFirmware>().write(RtapiFirmware {
                        size: bytes.len(),
                        data,
                    });
                    *fw = block.cast();
                }
                return 0;
            }
            Err(e) => last = e.to_string(),
        }
    }
    fail(
        libc::ENOENT,
        format!(
            "Could not locate firmware \"{name}\" ({}: {last})",
            tried.join(" or ")
        ),
    )
}

/// `void rtapi_release_firmware(const struct rtapi_firmware *fw)`: frees what
/// [`rtapi_request_firmware`] gave (null: nothing).
///
/// # Safety
/// `fw` must be null or a result of `rtapi_request_firmware` not released yet.
#[no_mangle]
pub unsafe extern "C" fn rtapi_release_firmware(fw: *const RtapiFirmware) {
    // SAFETY: one malloc'ed block (or null), freed once (the caller's contract).
    unsafe { libc::free(fw.cast_mut().cast()) }
}

// ---- tasks and processes ----------------------------------------------------------------------------

/// `int rtapi_task_self(void)`: the calling RT thread's task id (> 0), or `-EINVAL` off the RT
/// threads (while loading, in the non-RT side). A thread-local read: callable on the RT path.
#[no_mangle]
pub extern "C" fn rtapi_task_self() -> c_int {
    if let Some(m) = super::personality::master() {
        return (m.task_self)();
    }
    crate::runtime::crash::task_self().unwrap_or(-libc::EINVAL)
}

/// `int rtapi_spawn_as_root(pid_t *pid, const char *path, const posix_spawn_file_actions_t *,
/// const posix_spawnattr_t *, char *const argv[], char *const envp[])`: `posix_spawn` with the
/// process's own credentials (LinuxCNC's setuid `rtapi_app` switches to root for it; rtapi runs as
/// the user it was started as). Returns `posix_spawn`'s result: 0, or an error number. hm2_eth
/// runs `iptables` with it (changing the firewall of the network namespace rtapi runs in).
///
/// # Safety
/// The arguments must be valid for `posix_spawn`.
#[no_mangle]
pub unsafe extern "C" fn rtapi_spawn_as_root(
    pid: *mut libc::pid_t,
    path: *const c_char,
    file_actions: *const libc::posix_spawn_file_actions_t,
    attrp: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: forwarded from the caller, whose contract is posix_spawn's.
    let r = unsafe { libc::posix_spawn(pid, path, file_actions, attrp, argv, envp) };
    if r != 0 {
        // SAFETY: null or a C string (posix_spawn's contract).
        let p = unsafe { text(path) }.unwrap_or("?");
        message(
            MSG_ERR,
            &format!(
                "rtapi_spawn_as_root({p}): {}",
                std::io::Error::from_raw_os_error(r)
            ),
        );
    }
    r
}

// ---- parallel ports ---------------------------------------------------------------------------------

/// LinuxCNC's uspace `rtapi_parport_t` (rtapi_parport.h).
#[repr(C)]
pub struct RtapiParport {
    base: u16,
    base_hi: u16,
    fd: c_int,
}

/// The I/O address of Linux parport `n` (`/proc/sys/dev/parport/parportN/base-addr`).
fn linux_parport_base(n: u16) -> Result<u16, String> {
    let p = format!("/proc/sys/dev/parport/parport{n}/base-addr");
    let t = std::fs::read_to_string(&p).map_err(|e| format!("parport {n}: {p}: {e}"))?;
    t.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("parport {n}: {p} has no address"))
}

/// `int rtapi_parport_get(const char *mod_name, rtapi_parport_t *port, unsigned short base,
/// unsigned short base_hi, unsigned int modes)`: the port at I/O address `base` (below 16: Linux
/// parport `base`, its address from /proc), with `base_hi` (0: none, 0xffff: `base + 0x400`) for the
/// ECR. Access to the ports is granted with `ioperm` (needs root with CAP_SYS_RAWIO): the thread that
/// loads the module, and the threads it starts later (rtapi's RT threads, at `start`), may then use
/// the module's `inb`/`outb`. Without the access it fails with `-EPERM` and a message; the module's
/// port I/O would otherwise fault. `fd` is -1 (no ppdev claim).
///
/// # Safety
/// `port` must be null or writable; `mod_name` null or a C string.
#[no_mangle]
pub unsafe extern "C" fn rtapi_parport_get(
    mod_name: *const c_char,
    port: *mut RtapiParport,
    base: u16,
    base_hi: u16,
    _modes: std::ffi::c_uint,
) -> c_int {
    // SAFETY: the caller passes a C string (or null).
    let who = unsafe { text(mod_name) }.unwrap_or("?");
    if port.is_null() {
        return fail(libc::EINVAL, format!("PARPORT: {who}: no port structure"));
    }
    // SAFETY: writable (checked non-null; the caller's contract).
    unsafe {
        port.write(RtapiParport {
            base: 0,
            base_hi: 0,
            fd: -1,
        })
    };
    let base = if base < 16 {
        match linux_parport_base(base) {
            Ok(b) => b,
            Err(e) => return fail(libc::ENODEV, format!("PARPORT: ERROR: {who}: {e}")),
        }
    } else {
        base
    };
    let base_hi = match base_hi {
        0xffff => base.wrapping_add(0x400),
        b => b,
    };
    if let Err(e) = io_access(base, 8, true) {
        return fail(
            libc::EPERM,
            format!(
                "PARPORT: ERROR: {who}: no access to I/O ports 0x{base:x}-0x{:x} (ioperm: {e}); {}",
                base + 7,
                crate::rt::portio::advice(&e)
            ),
        );
    }
    if base_hi != 0 {
        if let Err(e) = io_access(base_hi, 3, true) {
            let _ = io_access(base, 8, false);
            return fail(
                libc::EPERM,
                format!(
                    "PARPORT: ERROR: {who}: no access to I/O ports 0x{base_hi:x}-0x{:x} (ioperm: {e}); \
                     {}",
                    base_hi + 2,
                    crate::rt::portio::advice(&e)
                ),
            );
        }
    }
    // SAFETY: writable (checked above).
    unsafe {
        (*port).base = base;
        (*port).base_hi = base_hi;
    }
    0
}

/// `void rtapi_parport_release(rtapi_parport_t *port)`: drops the port access
/// [`rtapi_parport_get`] granted and clears `port`.
///
/// # Safety
/// `port` must be null or a port structure `rtapi_parport_get` filled.
#[no_mangle]
pub unsafe extern "C" fn rtapi_parport_release(port: *mut RtapiParport) {
    if port.is_null() {
        return;
    }
    // SAFETY: a readable, writable port structure (the caller's contract).
    let p = unsafe { &mut *port };
    if p.base != 0 {
        let _ = io_access(p.base, 8, false);
    }
    if p.base_hi != 0 {
        let _ = io_access(p.base_hi, 3, false);
    }
    if p.fd > 0 {
        // SAFETY: a descriptor the port owns, closed once.
        unsafe { libc::close(p.fd) };
    }
    *p = RtapiParport {
        base: 0,
        base_hi: 0,
        fd: -1,
    };
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
    let all: [*const (); 48] = [
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
        hal_param_alias as *const (),
        rtapi_argv_split as *const (),
        rtapi_argv_free as *const (),
        rtapi_request_firmware as *const (),
        rtapi_release_firmware as *const (),
        rtapi_task_self as *const (),
        rtapi_spawn_as_root as *const (),
        rtapi_parport_get as *const (),
        rtapi_parport_release as *const (),
        simple_strtol as *const (),
    ];
    std::hint::black_box(all);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn split(s: &str) -> (Vec<String>, c_int) {
        let c = CString::new(s).unwrap();
        let mut argc = -1;
        // SAFETY: a C string and a writable count.
        let argv = unsafe { rtapi_argv_split(0, c.as_ptr(), &mut argc) };
        assert!(!argv.is_null());
        let mut words = Vec::new();
        // SAFETY: a NULL-terminated array of C strings from rtapi_argv_split, freed once below.
        unsafe {
            let mut i = 0;
            while !(*argv.add(i)).is_null() {
                words.push(CStr::from_ptr(*argv.add(i)).to_str().unwrap().to_string());
                i += 1;
            }
            rtapi_argv_free(argv);
        }
        (words, argc)
    }

    #[test]
    fn argv_split_splits_on_whitespace_into_a_null_terminated_array() {
        assert_eq!(
            split("  num_encoders=2 \t num_stepgens=3\nsserial_port_0=0000  "),
            (
                vec![
                    "num_encoders=2".to_string(),
                    "num_stepgens=3".into(),
                    "sserial_port_0=0000".into()
                ],
                3
            )
        );
        assert_eq!(split(""), (vec![], 0));
        assert_eq!(split(" \t "), (vec![], 0));
        // A null string is no words; a null count is allowed.
        // SAFETY: null arguments are part of the contract.
        let argv = unsafe { rtapi_argv_split(0, std::ptr::null(), std::ptr::null_mut()) };
        assert!(!argv.is_null());
        // SAFETY: the array from rtapi_argv_split: its first slot, then freed once.
        unsafe {
            assert!((*argv).is_null());
            rtapi_argv_free(argv);
            rtapi_argv_free(std::ptr::null_mut());
        }
    }

    fn request(name: &str) -> (c_int, *const RtapiFirmware) {
        let c = CString::new(name).unwrap();
        let mut fw: *const RtapiFirmware = std::ptr::NonNull::dangling().as_ptr();
        // SAFETY: a writable result pointer and a C string.
        let r = unsafe { rtapi_request_firmware(&mut fw, c.as_ptr(), std::ptr::null_mut()) };
        (r, fw)
    }

    #[test]
    fn firmware_is_read_from_lib_firmware_or_named_missing() {
        let (r, fw) = request("rtapi-test/no-such-firmware.bit");
        assert_eq!(r, -libc::ENOENT);
        assert!(fw.is_null());
        for bad in ["/etc/passwd", "../etc/passwd", "hm2/../../etc/passwd", ""] {
            assert_eq!(request(bad).0, -libc::EINVAL, "{bad}");
        }
        // Any file Debian ships under /lib/firmware, read back whole.
        let Some(file) = std::fs::read_dir(FIRMWARE_DIR)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_file()))
        else {
            eprintln!("no file under {FIRMWARE_DIR}: the read is not checked");
            return;
        };
        let name = file.file_name().to_string_lossy().into_owned();
        let (r, fw) = request(&name);
        assert_eq!(r, 0, "{name}");
        let want = std::fs::read(file.path()).unwrap();
        // SAFETY: a firmware from rtapi_request_firmware: `size` bytes at `data`; released once.
        unsafe {
            let got = std::slice::from_raw_parts((*fw).data, (*fw).size);
            assert_eq!(got, &want[..]);
            rtapi_release_firmware(fw);
            rtapi_release_firmware(std::ptr::null());
        }
    }

    #[test]
    fn task_self_off_the_rt_threads_is_einval() {
        assert_eq!(rtapi_task_self(), -libc::EINVAL);
    }

    #[test]
    fn param_alias_removal_succeeds_and_an_alias_is_refused() {
        let n = CString::new("x.param").unwrap();
        let a = CString::new("x.alias").unwrap();
        // SAFETY: C strings, or null for "remove the alias".
        unsafe {
            assert_eq!(hal_param_alias(n.as_ptr(), std::ptr::null()), 0);
            assert_eq!(hal_param_alias(n.as_ptr(), a.as_ptr()), -libc::ENOSYS);
        }
    }

    #[test]
    fn parport_without_a_structure_or_a_linux_port_fails() {
        let m = CString::new("test").unwrap();
        // SAFETY: a C string; a null port is refused before any use.
        let r = unsafe { rtapi_parport_get(m.as_ptr(), std::ptr::null_mut(), 0x378, 0, 0) };
        assert_eq!(r, -libc::EINVAL);
        let mut port = RtapiParport {
            base: 1,
            base_hi: 1,
            fd: 7,
        };
        // Linux parport 15: no such port on any test machine.
        // SAFETY: a C string and a writable port structure.
        let r = unsafe { rtapi_parport_get(m.as_ptr(), &mut port, 15, 0, 0) };
        assert_eq!(r, -libc::ENODEV);
        assert_eq!((port.base, port.base_hi, port.fd), (0, 0, -1));
        // SAFETY: a cleared port structure; releasing it does nothing.
        unsafe { rtapi_parport_release(&mut port) };
    }

    #[test]
    fn simple_strtol_is_strtol() {
        let s = CString::new("0x7i92").unwrap();
        let mut end: *mut c_char = std::ptr::null_mut();
        // SAFETY: a C string and a writable end pointer.
        let v = unsafe { simple_strtol(s.as_ptr(), &mut end, 0) };
        assert_eq!(v, 7);
        // SAFETY: `end` points into `s`.
        assert_eq!(unsafe { end.offset_from(s.as_ptr()) }, 3);
    }
}
