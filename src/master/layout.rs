//! The places inside LinuxCNC's HAL structures the master reads or writes, in one table, and the
//! check at start that the installed hal_lib really lays them out so (issue 45).
//!
//! LinuxCNC does not install `hal_priv.h`, where `hal_comp_t`, `hal_pin_t`, `hal_funct_t`,
//! `hal_thread_t` and `hal_data_t` are declared, so the master cannot take their layout from the
//! installed headers. The offsets below are those of LinuxCNC's own source, LP64: the tags v2.9.0
//! to v2.9.10 hold one and the same `hal_priv.h` (2.9.0~pre1's differs in a comment), `HAL_VER`
//! 0x10 throughout. Two gates stand before any of them is used:
//!
//! 1. **The release** ([`check_release`], before anything starts): LinuxCNC's version as
//!    `linuxcnc_var` records it must be one rtapi verified or one of the 2.9 releases with these
//!    structures; 2.10 (another master protocol) and anything unknown are refused with the version
//!    named, before hal_lib is loaded.
//! 2. **The layout** ([`verify`], right after hal_lib loads, before any module): a probe component
//!    made through hal_lib's own API — a constructor, a `u32` pin, a function — is looked up with
//!    hal_lib's `halpr_find_*`, and every field the master relies on is read back at its offset and
//!    compared with what was given: ids, names, types, directions, owners, data pointer offsets,
//!    function and argument pointers. The HAL block's version word and size are checked too. The
//!    probe only reads; it is removed (`hal_exit`) before the master goes on. A mismatch refuses the
//!    run, naming the release, before the master writes anything into the HAL.
//!
//! `hal_thread_t` cannot be probed without starting a thread; its fields are read only when
//! hal_lib's own `thread_task` is the task's code and the period and priority read back equal the
//! ones hal_lib passed ([`super::tasks::hal_thread_name`]), and a mismatch only costs the name.

use crate::detect::linuxcnc::{self, Support, Version};
use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `HAL_VER`: the version word at the base of the HAL block.
pub const HAL_VER: i32 = 0x10;
/// `HAL_SIZE`: the HAL block's size (an offset into it is checked against it).
pub const HAL_SIZE: usize = 256 * 4096;
/// `HAL_NAME_LEN + 1`: the size of every name field.
pub const NAME_LEN: usize = 48;
/// hal.h's `HAL_U32`.
pub const HAL_U32: i32 = 4;
/// hal.h's `HAL_OUT`.
pub const HAL_OUT: i32 = 32;
/// hal_priv.h's `TYPE_RT` (`component_type_t`): a realtime component.
pub const TYPE_RT: i32 = 1;

/// `hal_data_t`, at the base of the HAL block (`hal_shmem_base`).
pub mod data {
    /// `int version` (`HAL_VER`).
    pub const VERSION: usize = 0;
    /// `rtapi_mutex_t mutex` (an unsigned long; bit 0 held).
    pub const MUTEX: usize = 8;
}

/// `struct hal_comp_t`: next_ptr (0), comp_id, mem_id, type, ready, pid (8 to 28), shmem_base
/// (32), name (40), make (88), insmod_args (96).
pub mod comp {
    /// `int comp_id`.
    pub const COMP_ID: usize = 8;
    /// `component_type_t type`.
    pub const TYPE: usize = 16;
    /// `int ready`.
    pub const READY: usize = 20;
    /// `char name[HAL_NAME_LEN + 1]`.
    pub const NAME: usize = 40;
    /// `constructor make`: the component's instance constructor (`newinst`), or null.
    pub const MAKE: usize = 88;
}

/// `struct hal_pin_t`: next_ptr (0), data_ptr_addr (8), owner_ptr (16), signal (24), dummysig
/// (32), oldname (40), type (48), dir (52), name (56).
pub mod pin {
    /// `SHMFIELD(void *) data_ptr_addr`: where, as an offset in the HAL block, the owner keeps
    /// its pointer to the pin's value.
    pub const DATA_PTR_ADDR: usize = 8;
    /// `SHMFIELD(hal_comp_t) owner_ptr`.
    pub const OWNER: usize = 16;
    /// `hal_type_t type`.
    pub const TYPE: usize = 48;
    /// `hal_pin_dir_t dir`.
    pub const DIR: usize = 52;
    /// `char name[HAL_NAME_LEN + 1]`.
    pub const NAME: usize = 56;
}

/// `struct hal_funct_t`: next_ptr (0), uses_fp (8), owner_ptr (16), reentrant (24), users (28),
/// arg (32), funct (40), runtime (48), maxtime (56), maxtime_increased (60), name (61).
pub mod funct {
    /// `SHMFIELD(hal_comp_t) owner_ptr`.
    pub const OWNER: usize = 16;
    /// `int reentrant`.
    pub const REENTRANT: usize = 24;
    /// `int users`: threads that run it.
    pub const USERS: usize = 28;
    /// `void *arg`.
    pub const ARG: usize = 32;
    /// `void (*funct)(void *, long)`.
    pub const FUNCT: usize = 40;
    /// `char name[HAL_NAME_LEN + 1]`.
    pub const NAME: usize = 61;
}

/// `struct hal_thread_t`: next_ptr (0), uses_fp (8), period (16), priority (24), task_id (28),
/// runtime (32), maxtime (40), funct_list (48), name (64).
pub mod thread {
    /// `long period`.
    pub const PERIOD: usize = 16;
    /// `int priority`.
    pub const PRIORITY: usize = 24;
    /// `char name[HAL_NAME_LEN + 1]`.
    pub const NAME: usize = 64;
}

/// Lets the master run LinuxCNC's modules only on a release whose structures it knows: the
/// release installed under `root` (`/`), or a refusal that names it and says what to do.
/// `allow` (`RTAPI_LINUXCNC_ALLOW`) names one release the user accepts anyway; its layout is still
/// checked by [`verify`].
pub fn check_release(root: &Path, allow: Option<&str>) -> Result<Version, String> {
    let file = root.join(linuxcnc::VERSION_FILE);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        format!(
            "{}: {e}: rtapi cannot tell which LinuxCNC is installed, so it does not know the \
             layout of its HAL; install LinuxCNC 2.9 (Debian's linuxcnc-uspace)",
            file.display()
        )
    })?;
    let version = linuxcnc::version_text(&text)
        .and_then(|t| Version::parse(&t))
        .ok_or_else(|| {
            format!(
                "{}: no LINUXCNCVERSION rtapi can read: it cannot tell which LinuxCNC is installed \
                 nor the layout of its HAL; nothing was started",
                file.display()
            )
        })?;
    let verified = linuxcnc::VERIFIED
        .iter()
        .map(|(v, _)| *v)
        .collect::<Vec<_>>()
        .join(", ");
    match version.support() {
        Support::Verified | Support::SameLayout => Ok(version),
        Support::Protocol210 => Err(format!(
            "LinuxCNC {} is 2.10 (development), which rtapi does not support: its rtapi_app speaks \
             another master protocol (an abstract socket, binary framing, new commands) and keeps \
             its HAL in structures rtapi has not verified; nothing was started. Run LinuxCNC 2.9 \
             (verified: {verified}), or LinuxCNC 2.10's own rtapi_app",
            version.text
        )),
        Support::Unknown if allow.is_some_and(|a| a.trim() == version.text) => Ok(version),
        Support::Unknown => Err(format!(
            "LinuxCNC {} is not a release rtapi knows: the master reads and writes inside \
             LinuxCNC's HAL structures, whose layout rtapi has verified for 2.9.0 to 2.9.10 only \
             (run: {verified}); nothing was started. To try it anyway, set \
             RTAPI_LINUXCNC_ALLOW={0} (hal_lib's layout is still checked at start and a \
             difference refused)",
            version.text
        )),
    }
}

/// hal_lib's mutex, held: taken as every hal_lib caller takes it (`rtapi_mutex_get`: an atomic
/// test-and-set of bit 0), released on drop.
pub struct HalMutex(&'static AtomicUsize);

impl HalMutex {
    /// Takes the mutex of the HAL block at `data`, waiting up to 1 s.
    ///
    /// # Safety
    /// `data` is the base of the mapped HAL block of a 2.9 hal_lib (its version word checked).
    pub unsafe fn take(data: *mut u8) -> Result<HalMutex, String> {
        // SAFETY: the mutex word of hal_data_t, 8-aligned in the HAL segment, which lives as long
        // as the master (the caller's contract).
        let mutex = unsafe { &*data.add(data::MUTEX).cast::<AtomicUsize>() };
        let start = std::time::Instant::now();
        while mutex.fetch_or(1, Ordering::Acquire) & 1 != 0 {
            if start.elapsed() > std::time::Duration::from_secs(1) {
                return Err("hal_lib's mutex stayed held for 1 s".into());
            }
            std::thread::yield_now();
        }
        Ok(HalMutex(mutex))
    }
}

impl Drop for HalMutex {
    fn drop(&mut self) {
        self.0.fetch_and(!1, Ordering::Release);
    }
}

/// The base of hal_lib's HAL block (`hal_shmem_base`), its version word checked.
pub fn hal_block(hal: usize) -> Result<*mut u8, String> {
    let base = super::sym(hal, "hal_shmem_base");
    if base.is_null() {
        return Err("hal_lib exports no hal_shmem_base".into());
    }
    // SAFETY: hal_lib's `char *hal_shmem_base`, set by its rtapi_app_main before any other call.
    let data = unsafe { *base.cast::<*mut u8>() };
    if data.is_null() {
        return Err("hal_lib's hal_shmem_base is not set".into());
    }
    // SAFETY: the first int of hal_data_t, in the mapped HAL block.
    let version = unsafe { data.add(data::VERSION).cast::<i32>().read() };
    if version != HAL_VER {
        return Err(format!(
            "the HAL block's version word is {version:#x}, not 2.9's {HAL_VER:#x}"
        ));
    }
    Ok(data)
}

/// A name field read at `at` (NUL-terminated within [`NAME_LEN`] bytes).
///
/// # Safety
/// `at` points to [`NAME_LEN`] readable bytes.
unsafe fn name_at(at: *const u8) -> Option<&'static [u8]> {
    // SAFETY: the caller's contract.
    let raw = unsafe { std::slice::from_raw_parts(at, NAME_LEN) };
    CStr::from_bytes_until_nul(raw).ok().map(CStr::to_bytes)
}

/// The probe's constructor: never called (hal_lib calls a constructor only for `newinst`).
unsafe extern "C" fn probe_make(_prefix: *mut c_char, _arg: *mut c_char) -> c_int {
    -1
}

/// The probe's function: never called (it is in no thread).
unsafe extern "C" fn probe_funct(_arg: *mut c_void, _period: c_long) {}

/// Checks, through a probe component made with hal_lib's own API, that the installed hal_lib lays
/// out its structures as the table above says (module doc). `hal` is the master's dlopen handle of
/// hal_lib, just loaded; `size` the HAL block's size as hal_lib asked the master for it. A
/// mismatch names the field.
pub fn verify(hal: usize, size: Option<usize>) -> Result<(), String> {
    if size != Some(HAL_SIZE) {
        return Err(format!(
            "hal_lib's HAL block is {} bytes, not 2.9's {HAL_SIZE}",
            size.map_or("of unknown size".into(), |s| s.to_string())
        ));
    }
    let data = hal_block(hal)?;
    let sym = |n: &str| {
        let p = super::sym(hal, n);
        if p.is_null() {
            Err(format!("hal_lib exports no {n}"))
        } else {
            Ok(p)
        }
    };
    type Init = unsafe extern "C" fn(*const c_char) -> c_int;
    type Exit = unsafe extern "C" fn(c_int) -> c_int;
    type Make = unsafe extern "C" fn(*mut c_char, *mut c_char) -> c_int;
    type SetMake = unsafe extern "C" fn(c_int, Make) -> c_int;
    type Malloc = unsafe extern "C" fn(c_long) -> *mut c_void;
    type PinU32 = unsafe extern "C" fn(*const c_char, c_int, *mut *mut u32, c_int) -> c_int;
    type Funct = unsafe extern "C" fn(*mut c_void, c_long);
    type Export =
        unsafe extern "C" fn(*const c_char, Funct, *mut c_void, c_int, c_int, c_int) -> c_int;
    type Find = unsafe extern "C" fn(*const c_char) -> *mut u8;
    // SAFETY: hal.h's and hal_priv.h's signatures of these exported functions (unchanged from
    // 2.9.0 to 2.9.10).
    let (init, exit, set_make, malloc, pin_u32, export, find_comp, find_pin, find_funct) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Init>(sym("hal_init")?),
            std::mem::transmute::<*mut c_void, Exit>(sym("hal_exit")?),
            std::mem::transmute::<*mut c_void, SetMake>(sym("hal_set_constructor")?),
            std::mem::transmute::<*mut c_void, Malloc>(sym("hal_malloc")?),
            std::mem::transmute::<*mut c_void, PinU32>(sym("hal_pin_u32_new")?),
            std::mem::transmute::<*mut c_void, Export>(sym("hal_export_funct")?),
            std::mem::transmute::<*mut c_void, Find>(sym("halpr_find_comp_by_name")?),
            std::mem::transmute::<*mut c_void, Find>(sym("halpr_find_pin_by_name")?),
            std::mem::transmute::<*mut c_void, Find>(sym("halpr_find_funct_by_name")?),
        )
    };
    let name = format!("rtapi-layout-{}", std::process::id());
    let cname = CString::new(name.as_str()).expect("no NUL");
    let pin_name = CString::new(format!("{name}.probe")).expect("no NUL");
    let funct_name = CString::new(format!("{name}.update")).expect("no NUL");
    // SAFETY: hal_lib's API, on the main thread, as a module's rtapi_app_main would call it.
    let id = unsafe { init(cname.as_ptr()) };
    if id < 0 {
        return Err(format!("hal_init of the layout probe failed ({id})"));
    }
    // The probe goes whatever the outcome.
    struct Probe(Exit, c_int);
    impl Drop for Probe {
        fn drop(&mut self) {
            // SAFETY: the probe's own component id, removed once.
            unsafe { (self.0)(self.1) };
        }
    }
    let _probe = Probe(exit, id);
    // SAFETY: hal_lib's API with a live component id; the pin's pointer slot in HAL memory, as
    // hal_pin_new requires.
    let slot = unsafe { malloc(std::mem::size_of::<*mut u32>() as c_long) }.cast::<*mut u32>();
    if slot.is_null() {
        return Err("hal_malloc of the layout probe failed".into());
    }
    let arg = slot.cast::<c_void>();
    // SAFETY: as above.
    let rcs = unsafe {
        [
            set_make(id, probe_make),
            pin_u32(pin_name.as_ptr(), HAL_OUT, slot, id),
            export(funct_name.as_ptr(), probe_funct, arg, 0, 0, id),
        ]
    };
    if let Some(rc) = rcs.iter().find(|rc| **rc != 0) {
        return Err(format!(
            "hal_lib refused the layout probe's constructor, pin or function ({rc})"
        ));
    }
    // SAFETY: the HAL block's base, its version checked by hal_block.
    let _lock = unsafe { HalMutex::take(data)? };
    // SAFETY: under hal_lib's mutex, as its halpr_* functions require.
    let (c, p, f) = unsafe {
        (
            find_comp(cname.as_ptr()),
            find_pin(pin_name.as_ptr()),
            find_funct(funct_name.as_ptr()),
        )
    };
    if c.is_null() || p.is_null() || f.is_null() {
        return Err("hal_lib does not find the layout probe's component, pin or function".into());
    }
    let inside = |ptr: *mut u8| (ptr as usize).wrapping_sub(data as usize);
    let (comp_off, slot_off) = (inside(c), inside(slot.cast()));
    if comp_off >= HAL_SIZE
        || inside(p) >= HAL_SIZE
        || inside(f) >= HAL_SIZE
        || slot_off >= HAL_SIZE
    {
        return Err("hal_lib's structures are not inside its HAL block".into());
    }
    let mut wrong: Vec<&str> = Vec::new();
    // SAFETY: a hal_comp_t, a hal_pin_t and a hal_funct_t in the HAL block (found above, under the
    // mutex), read within their 2.9 sizes (comp 104, pin 104, funct 109 bytes), inside the block
    // (the offsets are checked above and every structure fits before HAL_SIZE's end in 2.9).
    unsafe {
        let read_i32 = |base: *mut u8, off: usize| base.add(off).cast::<i32>().read_unaligned();
        let read_usize = |base: *mut u8, off: usize| base.add(off).cast::<usize>().read_unaligned();
        if read_i32(c, comp::COMP_ID) != id {
            wrong.push("hal_comp_t.comp_id");
        }
        if read_i32(c, comp::TYPE) != TYPE_RT {
            wrong.push("hal_comp_t.type");
        }
        if read_i32(c, comp::READY) != 0 {
            wrong.push("hal_comp_t.ready");
        }
        if name_at(c.add(comp::NAME)) != Some(name.as_bytes()) {
            wrong.push("hal_comp_t.name");
        }
        if read_usize(c, comp::MAKE) != probe_make as *const () as usize {
            wrong.push("hal_comp_t.make");
        }
        if name_at(p.add(pin::NAME)) != Some(pin_name.as_bytes()) {
            wrong.push("hal_pin_t.name");
        }
        if read_i32(p, pin::TYPE) != HAL_U32 {
            wrong.push("hal_pin_t.type");
        }
        if read_i32(p, pin::DIR) != HAL_OUT {
            wrong.push("hal_pin_t.dir");
        }
        if read_usize(p, pin::DATA_PTR_ADDR) != slot_off {
            wrong.push("hal_pin_t.data_ptr_addr");
        }
        if read_usize(p, pin::OWNER) != comp_off {
            wrong.push("hal_pin_t.owner_ptr");
        }
        if name_at(f.add(funct::NAME)) != Some(funct_name.to_bytes()) {
            wrong.push("hal_funct_t.name");
        }
        if read_usize(f, funct::FUNCT) != probe_funct as *const () as usize {
            wrong.push("hal_funct_t.funct");
        }
        if read_usize(f, funct::ARG) != arg as usize {
            wrong.push("hal_funct_t.arg");
        }
        if read_i32(f, funct::USERS) != 0 || read_i32(f, funct::REENTRANT) != 0 {
            wrong.push("hal_funct_t.users/reentrant");
        }
        if read_usize(f, funct::OWNER) != comp_off {
            wrong.push("hal_funct_t.owner_ptr");
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "hal_lib does not lay out its structures as 2.9 does: {} not where 2.9 has it",
            wrong.join(", ")
        ))
    }
}
