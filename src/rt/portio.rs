//! Port I/O for a program (x86 `inb`/`outb` after `ioperm`): what a parallel port driven from user
//! space needs, LinuxCNC's `hal_parport` above all. Two things can stand in the way, and they are
//! fixed differently: a kernel without `ioperm` for programs (ENOSYS: built without
//! `CONFIG_X86_IOPL_IOPERM`, or not x86), and a process without CAP_SYS_RAWIO (EPERM).

use std::io;

/// The port [`probe`] asks for: 0x80, the POST diagnostic port, which nothing here reads or
/// writes (only the permission is asked for, and given back).
const PROBE_PORT: u16 = 0x80;

/// Asks for, and gives back, access to one I/O port: whether this process may do port I/O here.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub fn probe() -> io::Result<()> {
    access(PROBE_PORT, 1, true)?;
    access(PROBE_PORT, 1, false)
}

/// No I/O ports outside x86.
#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
pub fn probe() -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// `ioperm(from, len, on)` for the calling thread.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub fn access(from: u16, len: u16, on: bool) -> io::Result<()> {
    // SAFETY: ioperm only changes the thread's I/O permission bitmap; failure is reported.
    let r = unsafe {
        libc::ioperm(
            libc::c_ulong::from(from),
            libc::c_ulong::from(len),
            libc::c_int::from(on),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// No I/O ports outside x86.
#[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
pub fn access(_from: u16, _len: u16, _on: bool) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// What to do about a refused `ioperm`, by its error.
pub fn advice(e: &io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSYS) => {
            "this kernel gives programs no port I/O (ioperm is not implemented: built without \
             CONFIG_X86_IOPL_IOPERM, or not x86), so a parallel port cannot be driven from here; \
             boot a kernel that has it (Debian's x86 kernels do), or use an interface that needs \
             no port I/O (a Mesa Ethernet card, hm2_eth)"
        }
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "port I/O needs root or CAP_SYS_RAWIO: run rtapi as root, or give it the capability \
             (setcap cap_sys_rawio+ep on the rtapi binary)"
        }
        _ => "port I/O was refused; `rtapi detect` checks it",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_has_its_own_way_out() {
        let enosys = advice(&io::Error::from_raw_os_error(libc::ENOSYS));
        assert!(enosys.contains("CONFIG_X86_IOPL_IOPERM") && !enosys.contains("CAP_SYS_RAWIO"));
        let eperm = advice(&io::Error::from_raw_os_error(libc::EPERM));
        assert!(eperm.contains("CAP_SYS_RAWIO") && !eperm.contains("kernel"));
        // The probe agrees with what the kernel says to this process (root here or not).
        match probe() {
            Ok(()) => {}
            Err(e) => assert!(
                matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)),
                "{e}"
            ),
        }
    }
}
