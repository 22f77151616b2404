//! The `rtapi_*` entry points of the RTAPI proper: messages, time, shared memory, the task's
//! own id and spawning as root.

use super::*;

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
    if let Some(m) = super::super::personality::master() {
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
    if let Some(m) = super::super::personality::master() {
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
    if let Some(m) = super::super::personality::master() {
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
/// in the master, one use of the SysV segment less (its [`super::super::personality::MasterHooks`]).
#[no_mangle]
pub extern "C" fn rtapi_shmem_delete(id: c_int, _module_id: c_int) -> c_int {
    if let Some(m) = super::super::personality::master() {
        return (m.shmem_delete)(id);
    }
    0
}

// ---- tasks and processes ----------------------------------------------------------------------------

/// `int rtapi_task_self(void)`: the calling RT thread's task id (> 0), or `-EINVAL` off the RT
/// threads (while loading, in the non-RT side). A thread-local read: callable on the RT path.
#[no_mangle]
pub extern "C" fn rtapi_task_self() -> c_int {
    if let Some(m) = super::super::personality::master() {
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
