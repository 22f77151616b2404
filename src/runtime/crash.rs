//! Crash reports. A LinuxCNC module is C in rtapi's address space (issue 16): a bad pointer in it
//! kills the process, and no Rust code can stop that. What rtapi can do is say where it happened and
//! leave nothing behind: on SIGSEGV, SIGBUS, SIGILL or SIGFPE a handler writes one line to stderr —
//! the signal, the faulting address, the RT thread, the function it was in and, for a hosted
//! module's function, the module — removes the instance's segment file, and re-raises the signal with
//! its default action (the process dies by it, with a core dump where enabled; the exit status says
//! which signal).
//!
//! The handler runs on the faulting thread, possibly on its alternate signal stack (a stack overflow),
//! so it only reads what was set up before: a thread-local pointer to the RT thread's context (its
//! name, heartbeat and slot table, which the thread keeps alive while it runs), the module
//! thread-local the host of LinuxCNC modules sets ([`set_module`]), and a fixed table of file paths. It formats into a stack buffer (`core::fmt`, no
//! allocation), and calls only `unlink`, `shmctl`, `write` and `raise`, which are async-signal-safe.
//!
//! Besides files ([`remove_on_crash`]) it removes SysV segments by id ([`rmid_on_crash`]: LinuxCNC's
//! segments when rtapi is LinuxCNC's realtime master): `IPC_RMID` frees the key at once and the memory
//! when the last attached program (milltask, a GUI) detaches.

use std::cell::Cell;
use std::ffi::{c_int, c_void, CString};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

use super::slots::Slots;
use super::thread::Heartbeat;

/// What the handler needs to name an RT thread's place.
pub(crate) struct ThreadCtx {
    name: Box<str>,
    /// The thread's task id (LinuxCNC's `rtapi_task_self`): 1, 2, … in the order RT threads start.
    task: i32,
    heartbeat: Arc<Heartbeat>,
    slots: Arc<Slots>,
}

thread_local! {
    static CTX: Cell<*const ThreadCtx> = const { Cell::new(std::ptr::null()) };
    /// The foreign module whose code the thread runs now ("" outside any); set by the host of
    /// LinuxCNC modules around each call. Const-initialised, no destructor: reading it from the
    /// handler never allocates or registers anything.
    static MODULE: Cell<&'static str> = const { Cell::new("") };
}

/// Marks the calling thread as running code of module `name` ("" when it leaves it), for the report.
#[inline]
pub(crate) fn set_module(name: &'static str) {
    MODULE.with(|m| m.set(name));
}

/// Files removed on a crash: the segments of the instances this process owns.
const MAX_PATHS: usize = 16;
static PATHS: [AtomicPtr<libc::c_char>; MAX_PATHS] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; MAX_PATHS];

const SIGNALS: [c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

static INSTALL: Once = Once::new();

/// Installs the handler for the fault signals (once per process). Called when a runtime starts.
pub(crate) fn install() {
    INSTALL.call_once(|| {
        for sig in SIGNALS {
            // SAFETY: a zeroed sigaction is a valid starting value (empty mask, no flags); the handler
            // is an `extern "C"` function of the SA_SIGINFO signature, which stays valid for the
            // process's life, and `sigaction` is given valid pointers.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_fault as *const () as usize;
                sa.sa_flags =
                    libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESETHAND | libc::SA_NODEFER;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                    log::warn!(
                        "cannot install the crash report for signal {sig}: {}",
                        std::io::Error::last_os_error()
                    );
                }
            }
        }
    });
}

/// The file of `hal`'s segment.
fn segment_path(hal: &rtapi_hal::Hal) -> String {
    format!("/dev/shm{}", hal.instance().shm_name())
}

/// An instance's start, once its segment exists: a fault signal (a hosted C module's bad pointer)
/// is reported with the thread and function, and the segment file does not outlive the process.
pub(crate) fn guard_segment(hal: &rtapi_hal::Hal) {
    install();
    remove_on_crash(&segment_path(hal));
}

/// An instance's stop: from here on it removes its segment itself.
pub(crate) fn forget_segment(hal: &rtapi_hal::Hal) {
    forget_path(&segment_path(hal));
}

/// Removes `path` (a file, or an empty directory such as a tracefs instance) if the process
/// crashes (until [`forget_path`]).
pub(crate) fn remove_on_crash(path: &str) {
    let Ok(c) = CString::new(path) else {
        return;
    };
    let raw = c.into_raw();
    for slot in &PATHS {
        if slot
            .compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            return;
        }
    }
    // The table is full: this path is not removed on a crash (a later start reclaims a stale
    // segment anyway).
    // SAFETY: `raw` came from `into_raw` just above and was not published.
    drop(unsafe { CString::from_raw(raw) });
}

/// Stops removing `path` on a crash (the instance ended and removed it itself). The string stays
/// allocated: a crash on another thread may be reading it right now.
pub(crate) fn forget_path(path: &str) {
    for slot in &PATHS {
        let p = slot.load(Ordering::Acquire);
        // SAFETY: a non-null entry is a CString leaked by `remove_on_crash`, never freed.
        if !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes() == path.as_bytes() {
            let _ =
                slot.compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// The code of a loaded shared object: the report names the module a faulting instruction is in
/// (a LinuxCNC thread hosted by the realtime master runs hal_lib's loop, which calls the modules'
/// functions itself: the instruction pointer is all that says whose code faulted).
struct CodeRange {
    start: AtomicUsize,
    end: AtomicUsize,
    name: AtomicPtr<libc::c_char>,
}

const MAX_CODE: usize = 256;
static CODE: [CodeRange; MAX_CODE] = [const {
    CodeRange {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        name: AtomicPtr::new(std::ptr::null_mut()),
    }
}; MAX_CODE];

/// Names the loaded object whose file is `path` as module `name` in crash reports, until
/// [`forget_code`]; false if the object is not loaded or the table is full.
pub(crate) fn note_code(name: &str, path: &std::path::Path) -> bool {
    let Some((start, end)) = object_range(path) else {
        return false;
    };
    let Ok(c) = CString::new(name) else {
        return false;
    };
    for r in &CODE {
        if r.end
            .compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            // The slot is ours (end = MAX marks it taken, start 0 keeps it unmatched meanwhile).
            r.name.store(c.into_raw(), Ordering::Release);
            r.start.store(start, Ordering::Release);
            r.end.store(end, Ordering::Release);
            return true;
        }
    }
    false
}

/// Stops naming module `name` (it is unloaded; its addresses may be reused).
pub(crate) fn forget_code(name: &str) {
    for r in &CODE {
        let p = r.name.load(Ordering::Acquire);
        // SAFETY: a non-null name is a CString leaked by note_code, never freed.
        if !p.is_null() && unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes() == name.as_bytes() {
            r.start.store(0, Ordering::Release);
            r.end.store(0, Ordering::Release);
        }
    }
}

/// The lowest and highest address of the loadable segments of the loaded object `path`.
fn object_range(path: &std::path::Path) -> Option<(usize, usize)> {
    struct Find<'a> {
        path: &'a [u8],
        range: Option<(usize, usize)>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Find the caller passed; `info` is the loader's, valid during the
        // call, with dlpi_phnum headers at dlpi_phdr.
        unsafe {
            let find = &mut *data.cast::<Find>();
            let info = &*info;
            if info.dlpi_name.is_null()
                || std::ffi::CStr::from_ptr(info.dlpi_name).to_bytes() != find.path
            {
                return 0;
            }
            let (mut lo, mut hi) = (usize::MAX, 0);
            for i in 0..usize::from(info.dlpi_phnum) {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD {
                    let a = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    lo = lo.min(a);
                    hi = hi.max(a + ph.p_memsz as usize);
                }
            }
            if lo < hi {
                find.range = Some((lo, hi));
            }
            1
        }
    }
    let mut find = Find {
        path: path.as_os_str().as_encoded_bytes(),
        range: None,
    };
    // SAFETY: the callback only reads the loader's records and writes `find`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.range
}

/// The module whose code holds `ip`, from the table (async-signal-safe: atomic loads only).
fn code_module(ip: usize) -> Option<&'static str> {
    CODE.iter().find_map(|r| {
        let (start, end) = (
            r.start.load(Ordering::Acquire),
            r.end.load(Ordering::Acquire),
        );
        if start == 0 || ip < start || ip >= end {
            return None;
        }
        let p = r.name.load(Ordering::Acquire);
        (!p.is_null()).then(|| {
            // SAFETY: a non-null name is a CString leaked by note_code, never freed.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_str()
                .unwrap_or("?")
        })
    })
}

/// The faulting instruction's address from the handler's context.
fn fault_ip(uc: *mut c_void) -> usize {
    if uc.is_null() {
        return 0;
    }
    // SAFETY: the kernel passes its ucontext_t as an SA_SIGINFO handler's third argument.
    #[cfg(target_arch = "x86_64")]
    return unsafe { (*uc.cast::<libc::ucontext_t>()).uc_mcontext.gregs[libc::REG_RIP as usize] }
        as usize;
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    return unsafe { (*uc.cast::<libc::ucontext_t>()).uc_mcontext.pc } as usize;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    0
}

/// SysV segment ids removed on a crash (-1: a free slot).
static SHM_IDS: [AtomicI32; MAX_PATHS] = [const { AtomicI32::new(-1) }; MAX_PATHS];

/// Removes SysV segment `id` (`IPC_RMID`) if the process crashes (until [`forget_rmid`]).
pub(crate) fn rmid_on_crash(id: i32) {
    for slot in &SHM_IDS {
        if slot
            .compare_exchange(-1, id, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
    }
    log::warn!("more than {MAX_PATHS} SysV segments: segment {id} is not removed on a crash");
}

/// Stops removing SysV segment `id` on a crash (it was removed: the id may be reused).
pub(crate) fn forget_rmid(id: i32) {
    for slot in &SHM_IDS {
        let _ = slot.compare_exchange(id, -1, Ordering::AcqRel, Ordering::Relaxed);
    }
}

/// Marks the calling thread as RT thread `name` for crash reports; the context lives until the
/// returned guard is dropped (at the end of the thread's run).
pub(crate) fn enter_thread(
    name: &str,
    heartbeat: Arc<Heartbeat>,
    slots: Arc<Slots>,
) -> ThreadGuard {
    static NEXT_TASK: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);
    let ctx = Box::new(ThreadCtx {
        name: name.into(),
        task: NEXT_TASK.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        heartbeat,
        slots,
    });
    let raw = Box::into_raw(ctx);
    CTX.with(|c| c.set(raw));
    ThreadGuard(raw)
}

/// The task id of the calling RT thread (> 0), or `None` off the RT threads. Reads a thread-local:
/// no allocation, no lock (callable from the RT path).
pub(crate) fn task_self() -> Option<i32> {
    let p = CTX.with(|c| c.get());
    // SAFETY: a non-null CTX points at this thread's live ThreadCtx (set in `enter_thread`, cleared
    // by `ThreadGuard::drop` before it is freed); only this thread reads it here.
    (!p.is_null()).then(|| unsafe { (*p).task })
}

/// See [`enter_thread`].
pub(crate) struct ThreadGuard(*mut ThreadCtx);

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        CTX.with(|c| c.set(std::ptr::null()));
        // SAFETY: the pointer came from `Box::into_raw` in `enter_thread`, and the thread-local no
        // longer refers to it (a signal handler running after this line sees null).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// A fixed buffer that `write!` fills, cutting what does not fit.
struct Line {
    buf: [u8; 1024],
    len: usize,
}

impl std::fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

fn signal_name(sig: c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV (invalid memory access)",
        libc::SIGBUS => "SIGBUS (bus error)",
        libc::SIGILL => "SIGILL (illegal instruction)",
        libc::SIGFPE => "SIGFPE (arithmetic fault)",
        _ => "a fault signal",
    }
}

extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let mut line = Line {
        buf: [0; 1024],
        len: 0,
    };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; si_addr is defined for
    // the four fault signals.
    let addr = if info.is_null() {
        0
    } else {
        // SAFETY: the kernel's siginfo for this signal, non-null, valid for the handler's run.
        unsafe { (*info).si_addr() as usize }
    };
    let _ = write!(line, "rtapi: {} at address {addr:#x}", signal_name(sig));
    let module = MODULE.try_with(|m| m.get()).unwrap_or("");
    // hal_lib's own loop calls the modules' functions: the instruction says whose code it was.
    let by_ip = if module.is_empty() {
        code_module(fault_ip(uc))
    } else {
        None
    };
    let ctx = CTX.try_with(|c| c.get()).unwrap_or(std::ptr::null());
    if ctx.is_null() {
        let _ = write!(line, " on a thread that is not an RT thread");
    } else {
        // SAFETY: a non-null CTX points at the context `enter_thread` leaked for this thread, freed
        // only after CTX is reset by the guard on this same thread.
        let ctx = unsafe { &*ctx };
        let _ = write!(line, " on RT thread {}", ctx.name);
        match ctx.heartbeat.in_function() {
            Some(n) => {
                let _ = write!(line, ", in function {}", ctx.slots.name(n));
            }
            None if by_ip.is_none() => {
                let _ = write!(line, ", outside its functions");
            }
            None => {}
        }
    }
    if let Some(m) = by_ip {
        let _ = write!(
            line,
            ", in the code of LinuxCNC module {m} (C code in rtapi's address space)"
        );
    } else if !module.is_empty() {
        let _ = write!(
            line,
            " of LinuxCNC module {module} (C code in rtapi's address space)"
        );
    }
    let _ = write!(line, "; the process ends by this signal.");
    for slot in &PATHS {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: a non-null entry is a NUL-terminated CString leaked by `remove_on_crash`; unlink
        // and rmdir (a directory: a trace instance) are async-signal-safe.
        if unsafe { libc::unlink(p) } == 0 || unsafe { libc::rmdir(p) } == 0 {
            // SAFETY: as above.
            let path = unsafe { std::ffi::CStr::from_ptr(p) };
            let _ = write!(
                line,
                " Removed {}.",
                std::str::from_utf8(path.to_bytes()).unwrap_or("?")
            );
        }
    }
    for slot in &SHM_IDS {
        let id = slot.load(Ordering::Acquire);
        // SAFETY: IPC_RMID takes no buffer; shmctl is a plain system call, async-signal-safe.
        if id >= 0 && unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) } == 0 {
            let _ = write!(line, " Removed SysV segment {id}.");
        }
    }
    let _ = line.write_str("\n");
    // SAFETY: write(2) and raise(3) are async-signal-safe; the buffer is valid for `len` bytes. With
    // SA_RESETHAND the disposition is back to the default, and SA_NODEFER leaves the signal
    // unblocked, so raise ends the process with it.
    unsafe {
        libc::write(2, line.buf.as_ptr().cast(), line.len);
        libc::raise(sig);
    }
}
