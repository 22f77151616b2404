//! The `rtapi_*` entry points only the master offers (LinuxCNC 2.9's `rtapi_app` has them; the
//! standalone host has no tasks of LinuxCNC's, since rtapi's own runtime runs the functions there):
//! tasks, priorities, the clock period, `rtapi_init`/`rtapi_exit` on the RTAPI counter segment,
//! `rtapi_is_realtime`, PLL, port I/O, `kstrndup`, `spawnp`/`open_as_root` (PCI is [`super::pci`]).
//! `rtapi_wait`, the message handler pair and `inb`/`outb` are C (shim.c). Exported from the master
//! binary only (build.rs's master list).
//!
//! A task is an rtapi hosted thread ([`super::tasks`]): `rtapi_task_start` starts it, named as
//! hal_lib named the HAL thread, its code run by [`Period::run_foreign`] so that `rtapi_wait`
//! (shim.c, calling hosted_exit.c's `rtapi_hosted_wait`) is its period boundary and a delete leaves
//! its never-returning loop with a `longjmp` between C frames, never a cancellation. As LinuxCNC
//! 2.9's POSIX RTAPI, `rtapi_task_pause`/`resume` are `-ENOSYS`; unlike it, late periods are skipped
//! and counted, not run back to back (see [`crate::runtime::hosted`]).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_long, c_longlong, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use super::pci::{
    rtapi_iounmap, rtapi_pci_disable_device, rtapi_pci_enable_device, rtapi_pci_ioremap_bar,
    rtapi_pci_register_driver, rtapi_pci_unregister_driver,
};
use super::shmem;
use super::state::STATE;
use super::tasks;
use crate::rt::clock::Nanos;
use crate::rt::lock;
use crate::runtime::hosted::{self, HostedHandle, Period};

/// A task's code (`void (*)(void *)`).
type TaskCode = unsafe extern "C" fn(*mut c_void);

/// LinuxCNC's `MAX_TASKS`.
const MAX_TASKS: usize = 64;

/// A task (in [`super::state::State::tasks`]).
pub(super) struct TaskRec {
    code: TaskCode,
    arg: usize,
    prio: i32,
    thread: Option<HostedHandle>,
}

thread_local! {
    /// The task the calling thread runs (-1: none). Const-initialised: no allocation, no destructor.
    static SELF_ID: Cell<c_int> = const { Cell::new(-1) };
}

fn task(id: c_int) -> Option<usize> {
    usize::try_from(id).ok().filter(|&i| i < MAX_TASKS)
}

/// `int rtapi_prio_highest(void)`: the top of the SCHED_FIFO range (99).
#[no_mangle]
pub extern "C" fn rtapi_prio_highest() -> c_int {
    // SAFETY: a plain query with a valid policy.
    unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) }
}

/// `int rtapi_prio_lowest(void)`: the bottom of the SCHED_FIFO range (1).
#[no_mangle]
pub extern "C" fn rtapi_prio_lowest() -> c_int {
    // SAFETY: a plain query with a valid policy.
    unsafe { libc::sched_get_priority_min(libc::SCHED_FIFO) }
}

fn prio_bound(p: c_int) -> c_int {
    p.clamp(rtapi_prio_lowest(), rtapi_prio_highest())
}

/// `int rtapi_prio_next_higher(int prio)`.
#[no_mangle]
pub extern "C" fn rtapi_prio_next_higher(prio: c_int) -> c_int {
    let p = prio_bound(prio);
    if p < rtapi_prio_highest() {
        p + 1
    } else {
        p
    }
}

/// `int rtapi_prio_next_lower(int prio)`.
#[no_mangle]
pub extern "C" fn rtapi_prio_next_lower(prio: c_int) -> c_int {
    let p = prio_bound(prio);
    if p > rtapi_prio_lowest() {
        p - 1
    } else {
        p
    }
}

/// `long rtapi_clock_set_period(long nsecs)`: 0 asks for the period; a period is set once.
#[no_mangle]
pub extern "C" fn rtapi_clock_set_period(nsecs: c_long) -> c_long {
    let cur = STATE.clock_period.load(Ordering::Acquire);
    if nsecs == 0 {
        return cur as c_long;
    }
    if cur != 0 {
        super::say("rtapi: rtapi_clock_set_period: the period is already set (it is set once)");
        return -libc::EINVAL as c_long;
    }
    if nsecs < 0 {
        return -libc::EINVAL as c_long;
    }
    STATE.clock_period.store(nsecs, Ordering::Release);
    nsecs
}

/// `int rtapi_task_new(void (*taskcode)(void *), void *arg, int prio, int owner,
/// unsigned long stacksize, int uses_fp)`: a task id (0..63), not running yet. (The stack is
/// rtapi's: a hosted thread's stack is the runtime's size, prefaulted.)
#[no_mangle]
pub extern "C" fn rtapi_task_new(
    taskcode: Option<TaskCode>,
    arg: *mut c_void,
    prio: c_int,
    _owner: c_int,
    _stacksize: c_ulong,
    _uses_fp: c_int,
) -> c_int {
    let Some(code) = taskcode else {
        return -libc::EINVAL;
    };
    if prio < rtapi_prio_lowest() || prio > rtapi_prio_highest() {
        return -libc::EINVAL;
    }
    let mut t = lock(&STATE.tasks);
    if t.is_empty() {
        t.resize_with(MAX_TASKS, || None);
    }
    let Some(i) = t.iter().position(Option::is_none) else {
        return -libc::ENOSPC;
    };
    t[i] = Some(TaskRec {
        code,
        arg: arg as usize,
        prio,
        thread: None,
    });
    i as c_int
}

/// `int rtapi_task_start(int task_id, unsigned long period_nsec)`: the task's thread starts, its
/// period rounded to a whole multiple of the clock period (as LinuxCNC does). Its SCHED_FIFO
/// priority is rtapi's rate-monotonic one among the instance's threads (the order hal_lib's
/// priorities give too), its CPU rtapi's RT CPU.
#[no_mangle]
pub extern "C" fn rtapi_task_start(task_id: c_int, period_nsec: c_ulong) -> c_int {
    let Some(i) = task(task_id) else {
        return -libc::EINVAL;
    };
    let base = STATE.clock_period.load(Ordering::Acquire);
    if base <= 0 {
        super::say("rtapi: rtapi_task_start: no clock period (rtapi_clock_set_period first)");
        return -libc::EINVAL;
    }
    let mut t = lock(&STATE.tasks);
    let Some(Some(rec)) = t.get_mut(i) else {
        return -libc::EINVAL;
    };
    if rec.thread.is_some() {
        return -libc::EINVAL;
    }
    let asked = (period_nsec as i64).max(base);
    let period = (asked / base) * base;
    let (code, arg) = (rec.code, rec.arg);
    // SAFETY: `code` and `arg` are what the module gave rtapi_task_new; hal_thread_name reads `arg`
    // only when `code` is hal_lib's thread_task, whose argument is its hal_thread_t.
    let name =
        unsafe { tasks::hal_thread_name(code, arg as *const c_void, rec.prio, period_nsec as i64) }
            .unwrap_or_else(|| format!("task-{i}"));
    let id = i as c_int;
    let body = Box::new(move |p: &mut Period| {
        SELF_ID.with(|s| s.set(id));
        // SAFETY: the task's code and argument as the module gave them to rtapi_task_new, run on
        // this hosted thread; its frames down to rtapi_wait are C (hal_lib's thread_task), left by
        // hosted_exit.c's longjmp when the task is deleted.
        let _ = unsafe { p.run_foreign(code, arg as *mut c_void) };
        SELF_ID.with(|s| s.set(-1));
    });
    match tasks::spawn(&name, Nanos::from_nanos(period), body) {
        Ok(h) => {
            rec.thread = Some(h);
            0
        }
        Err(e) => {
            super::say(&format!("rtapi: rtapi_task_start: {e}"));
            -libc::ENOMEM
        }
    }
}

/// `int rtapi_task_delete(int task_id)`: ends the task at its period boundary (never by cancelling
/// the thread) and joins it (bounded: a task stuck in a function is left behind, demoted, and named
/// in the summary).
#[no_mangle]
pub extern "C" fn rtapi_task_delete(task_id: c_int) -> c_int {
    let Some(i) = task(task_id) else {
        return -libc::EINVAL;
    };
    if SELF_ID.with(Cell::get) == task_id {
        // A task deleting itself would wait for itself.
        return -libc::EINVAL;
    }
    let rec = {
        let mut t = lock(&STATE.tasks);
        match t.get_mut(i) {
            Some(slot) => slot.take(),
            None => None,
        }
    };
    let Some(rec) = rec else {
        return -libc::EINVAL;
    };
    if let Some(h) = rec.thread {
        let _ = h.stop();
    }
    0
}

/// `int rtapi_task_pause(int task_id)`: `-ENOSYS`, as LinuxCNC 2.9's POSIX RTAPI (hal_lib calls it
/// before a delete and ignores the answer).
#[no_mangle]
pub extern "C" fn rtapi_task_pause(_task_id: c_int) -> c_int {
    -libc::ENOSYS
}

/// `int rtapi_task_resume(int task_id)`: `-ENOSYS`, as LinuxCNC 2.9's POSIX RTAPI.
#[no_mangle]
pub extern "C" fn rtapi_task_resume(_task_id: c_int) -> c_int {
    -libc::ENOSYS
}

/// The calling task's id, or `-EINVAL` off the tasks (`rtapi_task_self` in the master).
pub fn task_self() -> c_int {
    let id = SELF_ID.with(Cell::get);
    if id < 0 {
        -libc::EINVAL
    } else {
        id
    }
}

/// `long long rtapi_task_pll_get_reference(void)`: the deadline of the calling task's current
/// period (ns, CLOCK_MONOTONIC), 0 off a task.
#[no_mangle]
pub extern "C" fn rtapi_task_pll_get_reference() -> c_longlong {
    hosted::foreign_deadline().map_or(0, Nanos::as_nanos)
}

/// `int rtapi_task_pll_set_correction(long value)`: `-ENOSYS`: a hosted thread's timeline is
/// fixed (no installed module calls this; hostmot2's DPLL would need it).
#[no_mangle]
pub extern "C" fn rtapi_task_pll_set_correction(_value: c_long) -> c_int {
    -libc::ENOSYS
}

/// The running tasks: (id, thread name, deadlines missed so far).
pub fn running() -> Vec<(c_int, String, u64)> {
    lock(&STATE.tasks)
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let h = t.as_ref()?.thread.as_ref()?;
            Some((
                i as c_int,
                h.info().name,
                u64::from(h.health().read().missed),
            ))
        })
        .collect()
}

/// Ends every task still running (at exit, after the modules' own exits).
pub fn stop_all() {
    for i in 0..MAX_TASKS {
        if lock(&STATE.tasks).get(i).is_some_and(Option::is_some) {
            rtapi_task_delete(i as c_int);
        }
    }
}

// ---- rtapi_init / rtapi_exit: the RTAPI counter segment --------------------------------------------

/// `int rtapi_init(const char *modname)`: a new module id from the counter in segment
/// `0x48484c34` (`{unsigned long mutex; int uuid;}`, shared with LinuxCNC's user-space programs,
/// under its bit-0 spin lock, as rtapi_mutex.h).
#[no_mangle]
pub extern "C" fn rtapi_init(_modname: *const c_char) -> c_int {
    let h = match shmem::new(shmem::RTAPI_KEY, 16) {
        Ok(h) => h,
        Err((_, m)) => {
            super::say(&format!("rtapi: rtapi_init: {m}"));
            return -libc::EINVAL;
        }
    };
    STATE.uuid_handle.store(h, Ordering::Relaxed);
    let Some(p) = shmem::getptr(h) else {
        return -libc::EINVAL;
    };
    // SAFETY: the segment is at least 16 bytes, page-aligned: a u64 lock word at 0 and the i32
    // counter at 8, which other processes change only under the same lock.
    unsafe {
        let mutex = &*(p as *const AtomicU64);
        while mutex.fetch_or(1, Ordering::Acquire) & 1 != 0 {
            libc::sched_yield();
        }
        let uuid = (p as *mut u8).add(8).cast::<c_int>();
        let id = uuid.read_volatile() + 1;
        uuid.write_volatile(id);
        mutex.fetch_and(!1, Ordering::Release);
        id
    }
}

/// `int rtapi_exit(int module_id)`: one use of the counter segment less.
#[no_mangle]
pub extern "C" fn rtapi_exit(_module_id: c_int) -> c_int {
    shmem::delete(STATE.uuid_handle.load(Ordering::Relaxed));
    0
}

/// `int rtapi_is_realtime(void)`: whether the tasks run SCHED_FIFO (rtapi's flavor choice).
#[no_mangle]
pub extern "C" fn rtapi_is_realtime() -> c_int {
    c_int::from(super::config().real_time)
}

/// `int rtapi_is_kernelspace(void)`: 0.
#[no_mangle]
pub extern "C" fn rtapi_is_kernelspace() -> c_int {
    0
}

/// `char *rtapi_kstrndup(const char *s, size_t len, rtapi_gfp_t gfp)`: `strndup`.
///
/// # Safety
/// `s` must be a C string (or at least `len` readable bytes).
#[no_mangle]
pub unsafe extern "C" fn rtapi_kstrndup(s: *const c_char, len: usize, _gfp: c_uint) -> *mut c_char {
    if s.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: forwarded from the caller (strndup's contract).
    unsafe { libc::strndup(s, len) }
}

/// `int rtapi_spawnp_as_root(...)`: `posix_spawnp` with the master's credentials.
///
/// # Safety
/// As `posix_spawnp`.
#[no_mangle]
pub unsafe extern "C" fn rtapi_spawnp_as_root(
    pid: *mut libc::pid_t,
    file: *const c_char,
    file_actions: *const libc::posix_spawn_file_actions_t,
    attrp: *const libc::posix_spawnattr_t,
    argv: *const *mut c_char,
    envp: *const *mut c_char,
) -> c_int {
    // SAFETY: forwarded from the caller, whose contract is posix_spawnp's.
    unsafe { libc::posix_spawnp(pid, file, file_actions, attrp, argv, envp) }
}

/// `int rtapi_open_as_root(const char *filename, int mode)`: `open` with the master's credentials; a
/// descriptor or `-errno`.
///
/// # Safety
/// `filename` must be a C string.
#[no_mangle]
pub unsafe extern "C" fn rtapi_open_as_root(filename: *const c_char, mode: c_int) -> c_int {
    if filename.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: a C string (the caller's contract).
    let fd = unsafe { libc::open(filename, mode | libc::O_CLOEXEC) };
    if fd < 0 {
        -std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    } else {
        fd
    }
}

/// A module's message in the master: written straight to standard error (`RTAPI_MSG_ALL`: standard
/// output), as LinuxCNC's rtapi_app prints them; one `write`, no allocation, no lock (it may come
/// from a task).
pub fn module_message(level: c_int, text: &CStr, truncated: bool) {
    let fd = if level == crate::components::linuxcnc::capi_msg_all() {
        1
    } else {
        2
    };
    let b = text.to_bytes();
    // SAFETY: writing bytes we borrow to a standard descriptor.
    unsafe {
        libc::write(fd, b.as_ptr().cast(), b.len());
        if truncated {
            let cut = b"... (cut)\n";
            libc::write(fd, cut.as_ptr().cast(), cut.len());
        }
    }
}

extern "C" {
    fn rtapi_wait();
    fn rtapi_get_msg_handler() -> *const c_void;
    fn rtapi_set_msg_handler(h: *const c_void);
    fn rtapi_inb(port: c_uint) -> u8;
    fn rtapi_outb(byte: u8, port: c_uint);
}

/// Takes the address of every master-only entry point so the linker keeps them (build.rs's master
/// list exports them).
pub fn keep_linked() {
    let all: [*const (); 30] = [
        rtapi_prio_highest as *const (),
        rtapi_prio_lowest as *const (),
        rtapi_prio_next_higher as *const (),
        rtapi_prio_next_lower as *const (),
        rtapi_clock_set_period as *const (),
        rtapi_task_new as *const (),
        rtapi_task_start as *const (),
        rtapi_task_delete as *const (),
        rtapi_task_pause as *const (),
        rtapi_task_resume as *const (),
        rtapi_task_pll_get_reference as *const (),
        rtapi_task_pll_set_correction as *const (),
        rtapi_init as *const (),
        rtapi_exit as *const (),
        rtapi_is_realtime as *const (),
        rtapi_is_kernelspace as *const (),
        rtapi_kstrndup as *const (),
        rtapi_spawnp_as_root as *const (),
        rtapi_open_as_root as *const (),
        rtapi_pci_register_driver as *const (),
        rtapi_pci_unregister_driver as *const (),
        rtapi_pci_enable_device as *const (),
        rtapi_pci_disable_device as *const (),
        rtapi_pci_ioremap_bar as *const (),
        rtapi_iounmap as *const (),
        rtapi_wait as *const (),
        rtapi_get_msg_handler as *const (),
        rtapi_set_msg_handler as *const (),
        rtapi_inb as *const (),
        rtapi_outb as *const (),
    ];
    std::hint::black_box(all);
}
