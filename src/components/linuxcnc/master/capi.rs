//! The `rtapi_*` entry points only the master offers (LinuxCNC 2.9's `rtapi_app` has them; the
//! standalone host has no tasks of LinuxCNC's, since rtapi's own runtime runs the functions there):
//! tasks, priorities, the clock period, `rtapi_init`/`rtapi_exit` on the RTAPI counter segment,
//! `rtapi_is_realtime`, PLL, port I/O, `kstrndup`, `spawnp`/`open_as_root`, and PCI (refused).
//! `rtapi_wait`, the message handler pair and `inb`/`outb` are C (shim.c). Exported from the master
//! binary only (build.rs's master list).

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_long, c_longlong, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::shmem;
use super::tasks::{self, HostedThread, Period, ThreadSpec, Wake};
use crate::rt::clock::Nanos;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A task's code (`void (*)(void *)`).
type TaskCode = unsafe extern "C" fn(*mut c_void);

/// LinuxCNC's `MAX_TASKS`.
const MAX_TASKS: usize = 64;

struct TaskRec {
    code: TaskCode,
    arg: usize,
    prio: i32,
    stack: usize,
    thread: Option<HostedThread>,
}

static TASKS: Mutex<Vec<Option<TaskRec>>> = Mutex::new(Vec::new());

/// The base period set by `rtapi_clock_set_period` (0: not yet).
static CLOCK_PERIOD: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// The task the calling thread runs (-1: none). Const-initialised: no allocation, no destructor.
    static SELF_ID: Cell<c_int> = const { Cell::new(-1) };
    /// The calling task's period boundary, while its code runs.
    static PERIOD: Cell<*mut Period> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" {
    /// shim.c: runs `code(arg)`; returns when the code returns or when `rtapi_wait` is told to end
    /// the task (it then `longjmp`s back here over the module's C frames only).
    fn rtapi_master_run_task(code: TaskCode, arg: *mut c_void);
}

/// Called by shim.c's `rtapi_wait` at the end of each period: 0 to run the next, 1 to end the task.
/// Off a task thread (a module calling `rtapi_wait` where LinuxCNC would crash) it returns 0 at once.
#[no_mangle]
pub extern "C" fn rtapi_master_period_end() -> c_int {
    let p = PERIOD.with(Cell::get);
    if p.is_null() {
        return 0;
    }
    // SAFETY: PERIOD points at the Period on this thread's own stack frame in `tasks::spawn`'s thread
    // function, which outlives the task's code (it is cleared before that frame returns); only this
    // thread uses it.
    match unsafe { (*p).wait() } {
        Wake::Run => 0,
        Wake::Stop => 1,
    }
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
    let cur = CLOCK_PERIOD.load(Ordering::Acquire);
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
    CLOCK_PERIOD.store(nsecs, Ordering::Release);
    nsecs
}

/// `int rtapi_task_new(void (*taskcode)(void *), void *arg, int prio, int owner,
/// unsigned long stacksize, int uses_fp)`: a task id (0..63), not running yet.
#[no_mangle]
pub extern "C" fn rtapi_task_new(
    taskcode: Option<TaskCode>,
    arg: *mut c_void,
    prio: c_int,
    _owner: c_int,
    stacksize: c_ulong,
    _uses_fp: c_int,
) -> c_int {
    let Some(code) = taskcode else {
        return -libc::EINVAL;
    };
    if prio < rtapi_prio_lowest() || prio > rtapi_prio_highest() {
        return -libc::EINVAL;
    }
    let mut t = lock(&TASKS);
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
        // LinuxCNC's minimum: 1 MiB (hal_lib asks for 16 KiB).
        stack: (stacksize as usize).max(1 << 20),
        thread: None,
    });
    i as c_int
}

/// `int rtapi_task_start(int task_id, unsigned long period_nsec)`: the task's thread starts, its
/// period rounded to a whole multiple of the clock period (as LinuxCNC does).
#[no_mangle]
pub extern "C" fn rtapi_task_start(task_id: c_int, period_nsec: c_ulong) -> c_int {
    let Some(i) = task(task_id) else {
        return -libc::EINVAL;
    };
    let base = CLOCK_PERIOD.load(Ordering::Acquire);
    if base <= 0 {
        super::say("rtapi: rtapi_task_start: no clock period (rtapi_clock_set_period first)");
        return -libc::EINVAL;
    }
    let mut t = lock(&TASKS);
    let Some(Some(rec)) = t.get_mut(i) else {
        return -libc::EINVAL;
    };
    if rec.thread.is_some() {
        return -libc::EINVAL;
    }
    let asked = (period_nsec as i64).max(base);
    let period = (asked / base) * base;
    let cfg = super::config();
    let spec = ThreadSpec {
        name: format!("lcnc-task-{i}"),
        period: Nanos::from_nanos(period),
        priority: rec.prio,
        real_time: cfg.real_time,
        cpu: cfg.rt_cpu,
        stack_size: rec.stack,
    };
    let (code, arg) = (rec.code, rec.arg);
    let id = i as c_int;
    let body = Box::new(move |p: &mut Period| {
        SELF_ID.with(|s| s.set(id));
        PERIOD.with(|c| c.set(p as *mut Period));
        // SAFETY: the task's code and argument as the module gave them to rtapi_task_new; the code
        // runs until rtapi_wait ends it (shim.c's longjmp returns here over C frames only).
        unsafe { rtapi_master_run_task(code, arg as *mut c_void) };
        PERIOD.with(|c| c.set(std::ptr::null_mut()));
        SELF_ID.with(|s| s.set(-1));
    });
    match tasks::spawn(spec, body) {
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
/// the thread) and joins it.
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
        let mut t = lock(&TASKS);
        match t.get_mut(i) {
            Some(slot) => slot.take(),
            None => None,
        }
    };
    let Some(rec) = rec else {
        return -libc::EINVAL;
    };
    if let Some(h) = rec.thread {
        TOTALS.record(h.periods(), h.missed());
        h.stop();
    }
    0
}

fn with_thread(task_id: c_int, f: impl FnOnce(&HostedThread)) -> c_int {
    let Some(i) = task(task_id) else {
        return -libc::EINVAL;
    };
    match lock(&TASKS).get(i) {
        Some(Some(TaskRec {
            thread: Some(h), ..
        })) => {
            f(h);
            0
        }
        _ => -libc::EINVAL,
    }
}

/// `int rtapi_task_pause(int task_id)`: the task holds at its next period boundary.
#[no_mangle]
pub extern "C" fn rtapi_task_pause(task_id: c_int) -> c_int {
    with_thread(task_id, HostedThread::pause)
}

/// `int rtapi_task_resume(int task_id)`.
#[no_mangle]
pub extern "C" fn rtapi_task_resume(task_id: c_int) -> c_int {
    with_thread(task_id, HostedThread::resume)
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

/// `long long rtapi_task_pll_get_reference(void)`: when the calling task's period began (ns).
#[no_mangle]
pub extern "C" fn rtapi_task_pll_get_reference() -> c_longlong {
    let p = PERIOD.with(Cell::get);
    if p.is_null() {
        return 0;
    }
    // SAFETY: as in rtapi_master_period_end: this thread's own live Period.
    unsafe { (*p).reference() }
}

/// `int rtapi_task_pll_set_correction(long value)`: ns added to each period, within ±1 %.
#[no_mangle]
pub extern "C" fn rtapi_task_pll_set_correction(value: c_long) -> c_int {
    let p = PERIOD.with(Cell::get);
    if p.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: as in rtapi_master_period_end.
    unsafe { (*p).set_correction(value) };
    0
}

/// Per-task counts of what ran, kept when a task is deleted (for the exit summary).
pub struct Totals {
    tasks: AtomicU64,
    periods: AtomicU64,
    missed: AtomicU64,
}

impl Totals {
    fn record(&self, periods: u64, missed: u64) {
        self.tasks.fetch_add(1, Ordering::Relaxed);
        self.periods.fetch_add(periods, Ordering::Relaxed);
        self.missed.fetch_add(missed, Ordering::Relaxed);
    }

    /// (tasks ended, periods they ran, deadlines they missed).
    pub fn get(&self) -> (u64, u64, u64) {
        (
            self.tasks.load(Ordering::Relaxed),
            self.periods.load(Ordering::Relaxed),
            self.missed.load(Ordering::Relaxed),
        )
    }
}

/// What the ended tasks did.
pub static TOTALS: Totals = Totals {
    tasks: AtomicU64::new(0),
    periods: AtomicU64::new(0),
    missed: AtomicU64::new(0),
};

/// The running tasks: (id, periods run, deadlines missed).
pub fn running() -> Vec<(c_int, u64, u64)> {
    lock(&TASKS)
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let h = t.as_ref()?.thread.as_ref()?;
            Some((i as c_int, h.periods(), h.missed()))
        })
        .collect()
}

/// Ends every task still running (at exit, after the modules' own exits).
pub fn stop_all() {
    for i in 0..MAX_TASKS {
        if lock(&TASKS).get(i).is_some_and(Option::is_some) {
            rtapi_task_delete(i as c_int);
        }
    }
}

// ---- rtapi_init / rtapi_exit: the RTAPI counter segment --------------------------------------------

/// The handle of the counter segment the last `rtapi_init` used (LinuxCNC keeps the last one too).
static UUID_HANDLE: AtomicI32 = AtomicI32::new(0);

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
    UUID_HANDLE.store(h, Ordering::Relaxed);
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
    shmem::delete(UUID_HANDLE.load(Ordering::Relaxed));
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

// ---- PCI: not driven ------------------------------------------------------------------------------

const NO_PCI: &str =
    "rtapi: this master does not drive PCI devices (LinuxCNC's uspace PCI layer for \
     hm2_pci and friends is not implemented): use LinuxCNC's own rtapi_app for PCI cards";

/// `int rtapi_pci_register_driver(struct rtapi_pci_driver *)`: refused with a message.
#[no_mangle]
pub extern "C" fn rtapi_pci_register_driver(_driver: *mut c_void) -> c_int {
    super::say(NO_PCI);
    -libc::ENODEV
}

/// `void rtapi_pci_unregister_driver(struct rtapi_pci_driver *)`: nothing was registered.
#[no_mangle]
pub extern "C" fn rtapi_pci_unregister_driver(_driver: *mut c_void) {}

/// `int rtapi_pci_enable_device(struct rtapi_pci_dev *)`: refused.
#[no_mangle]
pub extern "C" fn rtapi_pci_enable_device(_dev: *mut c_void) -> c_int {
    super::say(NO_PCI);
    -libc::ENODEV
}

/// `int rtapi_pci_disable_device(struct rtapi_pci_dev *)`.
#[no_mangle]
pub extern "C" fn rtapi_pci_disable_device(_dev: *mut c_void) -> c_int {
    -libc::ENODEV
}

/// `void *rtapi_pci_ioremap_bar(struct rtapi_pci_dev *, int bar)`: null.
#[no_mangle]
pub extern "C" fn rtapi_pci_ioremap_bar(_dev: *mut c_void, _bar: c_int) -> *mut c_void {
    super::say(NO_PCI);
    std::ptr::null_mut()
}

/// `void rtapi_iounmap(volatile void *)`: nothing was mapped.
#[no_mangle]
pub extern "C" fn rtapi_iounmap(_addr: *mut c_void) {}

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
    let all: [*const (); 32] = [
        rtapi_master_period_end as *const (),
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
        rtapi_master_run_task as *const (),
    ];
    std::hint::black_box(all);
}
