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
//! allocation), and calls only `unlink`, `write` and `raise`, which are async-signal-safe.

use std::cell::Cell;
use std::ffi::{c_int, c_void, CString};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, Ordering};
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
pub fn set_module(name: &'static str) {
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
pub(crate) fn segment_path(hal: &rtapi_hal::Hal) -> String {
    format!("/dev/shm{}", hal.instance().shm_name())
}

/// Removes `path` if the process crashes (until [`forget_path`]).
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

extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, _uc: *mut c_void) {
    let mut line = Line {
        buf: [0; 1024],
        len: 0,
    };
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; si_addr is defined for
    // the four fault signals.
    let addr = if info.is_null() {
        0
    } else {
        unsafe { (*info).si_addr() as usize }
    };
    let _ = write!(line, "rtapi: {} at address {addr:#x}", signal_name(sig));
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
            None => {
                let _ = write!(line, ", outside its functions");
            }
        }
    }
    let module = MODULE.try_with(|m| m.get()).unwrap_or("");
    if !module.is_empty() {
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
        // is async-signal-safe.
        if unsafe { libc::unlink(p) } == 0 {
            // SAFETY: as above.
            let path = unsafe { std::ffi::CStr::from_ptr(p) };
            let _ = write!(
                line,
                " Removed {}.",
                std::str::from_utf8(path.to_bytes()).unwrap_or("?")
            );
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
