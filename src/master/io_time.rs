//! I/O time of LinuxCNC's threads (issue 43): how long a Mesa card's driver functions take each
//! period, measured around the calls and recorded beside the thread's latency and execution time
//! (the stats block's I/O section, hal/LAYOUT.md §6; `rtapi show thread`, `watch`, `export`).
//!
//! **Which functions are I/O** is decided here and nowhere else ([`is_io_funct`]): a function whose
//! name starts `hm2_` and ends `.read`, `.write` or `.read-request` — hostmot2's per-board
//! functions (`hm2_7i96s.0.read`, `hm2_7i76e.0.write`, hm2_eth's `hm2_7i96s.0.read-request`),
//! whichever low-level driver (hm2_eth, hm2_pci, hm2_spi…) exported them.
//!
//! **How they are measured.** hal_lib's `thread_task` calls a thread's functions itself, so rtapi
//! sees no function boundary. Right after a module's `rtapi_app_main` returned ([`wrap_module`],
//! on the master's main thread, with hal_lib's mutex held), each I/O function of the loaded
//! modules' components that no thread uses yet gets a wrapper: its `hal_funct_t`'s `funct`/`arg` become `io_call`
//! and a leaked [`IoWrap`] holding the originals. `addf` copies the wrapper into the thread's list,
//! so every call runs `clock_gettime` (vDSO), the driver's function, `clock_gettime`, and adds
//! the difference to the hosted thread's current period ([`note_io`]); the thread records the sum
//! at its `rtapi_wait` ([`Period::wait`](crate::runtime::hosted::Period::wait)). Exact (the call
//! itself, on rtapi's clock, in ns), and two clock reads and a thread-local add per I/O call: no
//! allocation, lock or log on the RT path.
//!
//! **Errors.** The same wrapper reads the board's error counter before and after the call
//! (hm2_eth's `hm2_<board>.<n>.packet-error-total`, [`ERROR_COUNTER`], found at wrap time; four
//! loads) and adds the increase to the period: the stats block's I/O errors. hm2_eth counts a reply
//! that was not there at its read deadline — late or lost, which it cannot tell apart when it gives
//! up — and a write the card did not confirm; hm2_pci has no counter and adds nothing. hal_lib's own `<funct>.time` pin is in CPU clocks
//! (`rtapi_get_clocks`: the TSC) and is left as it is.

use crate::rt::clock;
use crate::runtime::hosted::note_io;
use std::ffi::{c_char, c_long, c_void, CStr, CString};

/// The suffixes of hostmot2's I/O functions, after the `hm2_` prefix.
pub const IO_SUFFIXES: [&str; 3] = [".read", ".write", ".read-request"];
/// The prefix of hostmot2's board functions.
pub const IO_PREFIX: &str = "hm2_";

/// Whether the LinuxCNC function `name` is an I/O function (the one rule, module doc).
pub fn is_io_funct(name: &str) -> bool {
    name.strip_prefix(IO_PREFIX).is_some_and(|rest| {
        IO_SUFFIXES
            .iter()
            .any(|s| rest.len() > s.len() && rest.ends_with(s))
    })
}

/// The suffix of hm2_eth's error counter pin after the board's prefix (`hm2_7i96s.0`): a `u32`
/// that counts every soft error (a reply not there at the read deadline, a write not confirmed).
pub const ERROR_COUNTER: &str = ".packet-error-total";

/// The driver's function and argument a wrapped `hal_funct_t` had, and where its board's error
/// counter pin points (null: the driver has none, e.g. hm2_pci).
#[repr(C)]
pub struct IoWrap {
    funct: unsafe extern "C" fn(*mut c_void, c_long),
    arg: *mut c_void,
    /// The pin's data pointer: the `hal_u32_t *` the driver keeps in HAL memory, which hal_lib
    /// repoints when the pin is linked to a signal (so it is read through every call).
    errors: *const *const u32,
}

impl IoWrap {
    /// The board's error counter now (0 without one). Two loads.
    fn errors(&self) -> u32 {
        if self.errors.is_null() {
            return 0;
        }
        // SAFETY: wrap_module checked the pin (2.9's hal_pin_t, a u32, its data pointer's address
        // inside the HAL block); the pointer there is hal_lib's, always to a live u32 in HAL memory
        // (the pin's own dummy or its signal's value), written by the driver on this very thread.
        unsafe {
            let cell = std::ptr::read_volatile(self.errors);
            if cell.is_null() {
                0
            } else {
                std::ptr::read_volatile(cell)
            }
        }
    }
}

/// What an I/O function's `hal_funct_t` calls instead: the driver's function, timed, and the
/// errors its driver counted during the call (a user resetting the counter meanwhile adds 0).
///
/// # Safety
/// `arg` is an [`IoWrap`] [`wrap_module`] leaked; called as hal_lib calls a function.
unsafe extern "C" fn io_call(arg: *mut c_void, period: c_long) {
    // SAFETY: hal_lib passes the arg wrap_module stored beside this function: a leaked IoWrap.
    let w = unsafe { &*arg.cast::<IoWrap>() };
    let before = w.errors();
    let start = clock::now();
    // SAFETY: the driver's own function and argument, called as hal_lib would have.
    unsafe { (w.funct)(w.arg, period) };
    let ns = (clock::now() - start).as_nanos().max(0) as u64;
    let after = w.errors();
    note_io(ns, u64::from(after.saturating_sub(before)));
}

// The 2.9 structures read and written here (hal_funct_t, hal_pin_t, hal_data_t) are laid out as
// super::layout says, checked at the master's start; each is checked again at use below: a
// function's name read at its offset must find the same struct by name and its pointer must be
// code of the module just loaded; a pin's name must be the one looked up, its type HAL_U32, its
// data offset inside the HAL block.
use super::layout::{funct, pin, HalMutex, HAL_SIZE, HAL_U32, NAME_LEN};

/// Wraps the I/O functions not wrapped yet of the components named like `modules` (the modules
/// loaded, the one just loaded among them: a module's component has its name; hostmot2's board
/// functions belong to the low-level driver's component, `hm2_eth`, their code to `hostmot2`) in
/// hal_lib `hal` (the master's handle); returns the names wrapped, or why one could not be.
///
/// # Safety
/// `hal` is the master's live dlopen handle of LinuxCNC 2.9's hal_lib.so; on the main thread,
/// outside any hal_lib call, after a module's `rtapi_app_main` returned.
pub unsafe fn wrap_module(hal: usize, modules: &[String]) -> Result<Vec<String>, String> {
    let sym = |n: &str| super::sym(hal, n);
    let (find_comp, by_owner, by_name, find_pin) = (
        sym("halpr_find_comp_by_name"),
        sym("halpr_find_funct_by_owner"),
        sym("halpr_find_funct_by_name"),
        sym("halpr_find_pin_by_name"),
    );
    if [find_comp, by_owner, by_name, find_pin]
        .iter()
        .any(|p| p.is_null())
    {
        return Err("hal_lib lacks halpr_find_*".into());
    }
    type Find = unsafe extern "C" fn(*const c_char) -> *mut u8;
    type ByOwner = unsafe extern "C" fn(*mut u8, *mut u8) -> *mut u8;
    // SAFETY: 2.9's hal_priv.h signatures of these exported functions.
    let (find_comp, by_owner, by_name, find_pin) = unsafe {
        (
            std::mem::transmute::<*mut c_void, Find>(find_comp),
            std::mem::transmute::<*mut c_void, ByOwner>(by_owner),
            std::mem::transmute::<*mut c_void, Find>(by_name),
            std::mem::transmute::<*mut c_void, Find>(find_pin),
        )
    };
    let data = super::layout::hal_block(hal).map_err(|e| format!("{e}; not timed"))?;
    let cnames: Vec<CString> = modules
        .iter()
        .filter_map(|m| CString::new(m.as_str()).ok())
        .collect();
    // SAFETY: the HAL block's base, its version word checked by hal_block.
    let lock = unsafe { HalMutex::take(data)? };
    let mut wrapped = Vec::new();
    let mut problem = None;
    // SAFETY: under hal_lib's mutex, as its halpr_* functions require; the structs they return are
    // hal_funct_t of 2.9's layout in the HAL segment, checked per function below before a write.
    unsafe {
        for cname in &cnames {
            let comp = find_comp(cname.as_ptr());
            let mut f = if comp.is_null() {
                std::ptr::null_mut()
            } else {
                by_owner(comp, std::ptr::null_mut())
            };
            while !f.is_null() {
                let raw = std::slice::from_raw_parts(f.add(funct::NAME), NAME_LEN);
                let name = CStr::from_bytes_until_nul(raw)
                    .ok()
                    .and_then(|c| c.to_str().ok());
                if let Some(name) = name.filter(|n| is_io_funct(n)) {
                    let funct = f.add(funct::FUNCT).cast::<usize>().read();
                    let cn = CString::new(name).expect("from a CStr");
                    if funct == io_call as *const () as usize {
                        // Wrapped already.
                    } else if by_name(cn.as_ptr()) != f || !code_of(funct, modules) {
                        problem = Some(format!(
                            "function {name}: hal_lib's hal_funct_t is not 2.9's; not timed"
                        ));
                    } else if f.add(funct::USERS).cast::<i32>().read() == 0 {
                        let errors = match error_counter(data, name, find_pin) {
                            Ok(p) => p,
                            Err(e) => {
                                problem = Some(e);
                                std::ptr::null()
                            }
                        };
                        let wrap = Box::leak(Box::new(IoWrap {
                            funct: std::mem::transmute::<
                                usize,
                                unsafe extern "C" fn(*mut c_void, c_long),
                            >(funct),
                            arg: f.add(funct::ARG).cast::<*mut c_void>().read(),
                            errors,
                        }));
                        f.add(funct::ARG)
                            .cast::<*mut c_void>()
                            .write(std::ptr::from_mut(wrap).cast());
                        f.add(funct::FUNCT)
                            .cast::<usize>()
                            .write(io_call as *const () as usize);
                        wrapped.push(name.to_string());
                    }
                }
                f = by_owner(comp, f);
            }
        }
    }
    drop(lock);
    match problem {
        Some(p) => Err(p),
        None => Ok(wrapped),
    }
}

/// The error counter pin of the board I/O function `funct` belongs to (`hm2_7i96s.0.read` →
/// `hm2_7i96s.0.packet-error-total`): the address of its data pointer, null when the driver made
/// none (hm2_pci), or why the pin found is not 2.9's layout.
///
/// # Safety
/// Under hal_lib's mutex; `data` is the HAL block's base, `find_pin` hal_lib's
/// `halpr_find_pin_by_name`.
unsafe fn error_counter(
    data: *mut u8,
    funct: &str,
    find_pin: unsafe extern "C" fn(*const c_char) -> *mut u8,
) -> Result<*const *const u32, String> {
    let Some(board) = IO_SUFFIXES.iter().find_map(|s| funct.strip_suffix(s)) else {
        return Ok(std::ptr::null());
    };
    let name = format!("{board}{ERROR_COUNTER}");
    let cname = CString::new(name.as_str()).map_err(|e| e.to_string())?;
    // SAFETY: under hal_lib's mutex (the caller), as halpr_find_pin_by_name requires.
    let pin = unsafe { find_pin(cname.as_ptr()) };
    if pin.is_null() {
        return Ok(std::ptr::null());
    }
    // SAFETY: a hal_pin_t in the HAL block (hal_lib found it); the reads stay inside its 2.9 size
    // (56 + 48 bytes) and are checked against what was looked up before anything else is used.
    let (found, kind, off) = unsafe {
        let raw = std::slice::from_raw_parts(pin.add(pin::NAME), NAME_LEN);
        (
            CStr::from_bytes_until_nul(raw).ok().map(CStr::to_bytes),
            pin.add(pin::TYPE).cast::<i32>().read(),
            pin.add(pin::DATA_PTR_ADDR).cast::<isize>().read(),
        )
    };
    let off = usize::try_from(off).unwrap_or(usize::MAX);
    if found != Some(name.as_bytes())
        || kind != HAL_U32
        || off == 0
        || off >= HAL_SIZE
        || off % std::mem::align_of::<usize>() != 0
    {
        return Err(format!(
            "pin {name}: hal_lib's hal_pin_t is not 2.9's; its errors not counted"
        ));
    }
    // SAFETY: inside the HAL block (bounded above), where the component's data pointer lives.
    Ok(unsafe { data.add(off) }.cast::<*const u32>())
}

/// Whether `addr` is code of one of the module files `<module>.so`.
fn code_of(addr: usize, modules: &[String]) -> bool {
    // SAFETY: Dl_info is plain data, filled by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if addr == 0 {
        return false;
    }
    // SAFETY: dladdr only reads the address's mapping; info is a valid out-pointer.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    let base = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
    modules
        .iter()
        .any(|m| base.strip_suffix(b".so") == Some(m.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::is_io_funct;

    #[test]
    fn the_io_rule() {
        for yes in [
            "hm2_7i96s.0.read",
            "hm2_7i96s.0.write",
            "hm2_7i76e.0.read-request",
            "hm2_5i25.0.read",
        ] {
            assert!(is_io_funct(yes), "{yes}");
        }
        for no in [
            "hm2_7i96s.0.pet_watchdog",
            "hm2_7i96s.0.read_gpio",
            "hm2_.read",
            "pid.0.do-pid-calcs",
            "motion-command-handler",
            "xhm2_7i96s.0.read",
        ] {
            assert!(!is_io_funct(no), "{no}");
        }
    }
}
