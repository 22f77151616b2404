//! The C interface rtapi offers LinuxCNC modules: `hal_*` and `rtapi_*` entry points with LinuxCNC
//! 2.9's signatures (hal.h, rtapi.h), exported from the `rtapi` binary (build.rs's dynamic symbol
//! list) so `dlopen` resolves modules against them. The printf-style ones are in `shim.c` and call
//! back into the functions here.
//!
//! Making things (components, pins, params, functions) is accepted only while a module's
//! `rtapi_app_main` runs (the load in [`LOADING`]); elsewhere it fails with a message. Errors are
//! negative errno values, as LinuxCNC's, and each is logged with the module's name.
//!
//! The entry points are grouped by family: [`hal`] (memory, components, pins, params, functions),
//! [`rtapi`] (messages, time, shared memory, tasks) and [`os`] (argument strings, firmware,
//! parallel ports). This file holds what they share (the loading context, held messages, C
//! strings) and keeps every one of them linked into the binary.

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

mod hal;
mod os;
mod rtapi;
#[cfg(test)]
mod tests;

use self::{hal::*, os::*, rtapi::*};

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
