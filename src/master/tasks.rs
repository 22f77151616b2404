//! The master's threads: LinuxCNC's tasks run as rtapi **hosted threads**
//! ([`crate::runtime::hosted`]) of one rtapi instance, `linuxcnc` unless `--instance` or
//! `RTAPI_INSTANCE` names another. So a LinuxCNC machine's `servo-thread` is an rtapi thread like any
//! other: its per-period latency, execution time, missed periods and histogram are in the instance's
//! segment under its LinuxCNC name (`rtapi show thread --instance linuxcnc`, `watch`, `export`), the
//! watchdog watches it, and the master's summary at exit is `rtapi run`'s.
//!
//! * [`open`] makes the instance (flavor, hardening, segment, watchdog) before hal_lib is loaded;
//! * `rtapi_task_start` ([`super::capi`]) calls [`spawn`] with the HAL thread's name, read from the
//!   `hal_thread_t` hal_lib passes as the task's argument ([`hal_thread_name`], checked against
//!   what hal_lib said of it), or `task-N` when it is not one of hal_lib's threads;
//! * after each `load`, [`sync_health`] gives every new thread its pins in LinuxCNC's HAL (component
//!   `rtapi`, [`super::lcnc_health`]) — not inside `rtapi_task_start`, which hal_lib calls
//!   with its HAL mutex held;
//! * [`close`] ends what is left and returns the run's summary.
//!
//! The instance's state is behind a mutex that only the master's main thread takes (loads, unloads,
//! the serve loop, the exit); the tasks themselves never touch it: their period boundary is their
//! own [`Period`].

use std::ffi::{c_int, c_void, CStr};

use super::layout;
use super::lcnc_health::{self, HalLib, LcncHealth};
use super::state::STATE;
use crate::detect::SystemReport;
use crate::flavor::Flavor;
use crate::rt::lock;
use crate::runtime::hosted::{HostedHandle, HostedOptions, HostedThreads, Period};
use crate::runtime::{RuntimeError, Summary, ThreadSpec};

/// Makes instance `name`, where every task will run; the flavor it chose.
pub fn open(name: &str, opts: HostedOptions, system: SystemReport) -> Result<Flavor, RuntimeError> {
    let hosted = HostedThreads::open_with(name, opts, system)?;
    let flavor = hosted.flavor();
    *lock(&STATE.hosted) = Some(hosted);
    Ok(flavor)
}

/// Runs `f` on the instance, if it is open.
pub fn with<R>(f: impl FnOnce(&HostedThreads) -> R) -> Option<R> {
    lock(&STATE.hosted).as_ref().map(f)
}

/// Starts thread `name` of `period` running `body` in the instance.
pub fn spawn(
    name: &str,
    period: crate::rt::clock::Nanos,
    body: Box<dyn FnOnce(&mut Period) + Send>,
) -> Result<HostedHandle, String> {
    let guard = lock(&STATE.hosted);
    let Some(hosted) = guard.as_ref() else {
        return Err("the master's rtapi instance is not open".into());
    };
    hosted
        .spawn(ThreadSpec::new(name, period), body)
        .map_err(|e| e.to_string())
}

/// The name hal_lib gave the thread whose `hal_thread_t` is `arg`, if `arg` is one: LinuxCNC 2.9's
/// `struct hal_thread_t` (hal_priv.h, LP64) holds `period` (long) at byte 16, `priority` (int) at
/// 24 and `name[HAL_NAME_LEN + 1]` at 64; hal_lib fills all three before `rtapi_task_new`. `code`
/// must be hal_lib's (its `thread_task`) and the period and priority must be those hal_lib passed,
/// so a module's own task with some other argument is never read as one.
///
/// # Safety
/// When `code` lies in hal_lib.so, `arg` must be what hal_lib passed with it (a `hal_thread_t` in
/// the HAL segment).
pub unsafe fn hal_thread_name(
    code: unsafe extern "C" fn(*mut c_void),
    arg: *const c_void,
    prio: c_int,
    period: i64,
) -> Option<String> {
    if arg.is_null() || !in_hal_lib(code as *const c_void) {
        return None;
    }
    let base = arg.cast::<u8>();
    // SAFETY: hal_lib's thread_task is only ever given its hal_thread_t (the caller's contract),
    // which is at least 116 bytes of readable HAL memory.
    let (p, q, name) = unsafe {
        (
            base.add(layout::thread::PERIOD)
                .cast::<i64>()
                .read_unaligned(),
            base.add(layout::thread::PRIORITY)
                .cast::<c_int>()
                .read_unaligned(),
            std::slice::from_raw_parts(base.add(layout::thread::NAME), layout::NAME_LEN),
        )
    };
    if p != period || q != prio {
        return None;
    }
    let name = CStr::from_bytes_until_nul(name).ok()?.to_str().ok()?;
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    valid.then(|| name.to_string())
}

/// Whether `addr` is code of LinuxCNC's hal_lib.so.
fn in_hal_lib(addr: *const c_void) -> bool {
    // SAFETY: Dl_info is plain data, filled by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address's mapping; info is a valid out-pointer.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes();
    file.rsplit(|&b| b == b'/').next() == Some(b"hal_lib.so".as_slice())
}

/// Gives every thread of the instance that has none its health pins in LinuxCNC's HAL (component
/// `rtapi`, made at the first thread): call after a `load` returned, with hal_lib's handle. Returns
/// what went wrong, one message each (the thread runs on without pins).
///
/// # Safety
/// `hal_lib` is the handle of the master's own `dlopen` of hal_lib.so, still loaded, and no hal_lib
/// call is in progress on this thread.
pub unsafe fn sync_health(hal_lib: *mut c_void) -> Vec<String> {
    let mut problems = Vec::new();
    let names: Vec<String> =
        with(|h| h.threads().into_iter().map(|t| t.name).collect()).unwrap_or_default();
    if names.is_empty() {
        return problems;
    }
    let mut health = lock(&STATE.health);
    if health.is_none() {
        // SAFETY: hal_lib's handle from the master's own dlopen (this function's contract).
        let made = unsafe { HalLib::from_dlsym(hal_lib) }
            // SAFETY: hal_lib's entry points, in the master (hal_lib's RTAPI), outside hal_lib's
            // own calls (a load has returned).
            .and_then(|api| unsafe { LcncHealth::create(api) });
        match made {
            Ok(h) => *health = Some(h),
            Err(e) => {
                problems.push(format!(
                    "component {}: {e}; the threads have no health pins in LinuxCNC's HAL",
                    lcnc_health::COMPONENT
                ));
                return problems;
            }
        }
    }
    let Some(h) = health.as_mut() else {
        return problems;
    };
    for name in names {
        if h.threads().contains(&name) {
            continue;
        }
        let Some(reader) = with(|i| i.health(&name)).flatten() else {
            continue;
        };
        if let Err(e) = h.add_thread(&name, reader) {
            problems.push(format!("thread {name}: {e}"));
        }
    }
    problems
}

/// Whether component `rtapi` (the health pins) exists in LinuxCNC's HAL.
pub fn has_health() -> bool {
    lock(&STATE.health).is_some()
}

/// Removes component `rtapi` from LinuxCNC's HAL (`halcmd unload rtapi`, or `unload all`, which
/// unloads every realtime component by name); false if there is none.
pub fn drop_health() -> bool {
    match lock(&STATE.health).take() {
        Some(h) => {
            h.exit();
            true
        }
        None => false,
    }
}

/// Ends every thread left, closes the instance (its segment goes) and returns the run's summary;
/// `None` if it was not open.
pub fn close() -> Option<Summary> {
    let hosted = lock(&STATE.hosted).take()?;
    Some(hosted.stop())
}
