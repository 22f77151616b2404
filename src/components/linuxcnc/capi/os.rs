//! What LinuxCNC's RTAPI offers modules from the operating system: argument strings, firmware
//! files and parallel ports.

use super::*;

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
    pub(super) size: usize,
    pub(super) data: *const u8,
}

/// Where firmware is looked for, as LinuxCNC's uspace: the running kernel's directory first.
pub(super) const FIRMWARE_DIR: &str = "/lib/firmware";

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

// ---- parallel ports ---------------------------------------------------------------------------------

/// LinuxCNC's uspace `rtapi_parport_t` (rtapi_parport.h).
#[repr(C)]
pub struct RtapiParport {
    pub(super) base: u16,
    pub(super) base_hi: u16,
    pub(super) fd: c_int,
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
