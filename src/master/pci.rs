//! LinuxCNC 2.9's uspace PCI layer (`rtapi_pci.h`), as the master offers it to `hm2_pci` and
//! other PCI drivers: written from what 2.9's `src/rtapi/rtapi_pci.cc` does, reading sysfs directly
//! where 2.9 asks libudev.
//!
//! * `rtapi_pci_register_driver`: every directory of `/sys/bus/pci/devices` (in name order) whose
//!   `vendor`, `device`, `subsystem_vendor` and `subsystem_device` equal one entry of the driver's
//!   id table (exactly, as 2.9: no `PCI_ANY_ID`; the table ends at vendor 0) becomes an
//!   `rtapi_pci_dev` (its slot name, its canonical sysfs path, the four ids) handed to the driver's
//!   `probe` with the device's ids. A probe that fails ends the registration as 2.9's does: the
//!   devices probed before it are removed and the call returns -1.
//! * `rtapi_pci_enable_device`: writes `1` to the device's `enable` (`enabled` where the kernel
//!   named it so) and reads the first six lines of `resource` (start, end, flags of each BAR) into
//!   the device.
//! * `rtapi_pci_ioremap_bar`: `open(…/resourceN, O_RDWR|O_SYNC)` and `mmap(MAP_SHARED)` of the BAR's
//!   length; `rtapi_iounmap` unmaps what it mapped. `rtapi_pci_disable_device` writes `0`.
//! * `rtapi_pci_unregister_driver`: each device's `remove`, then the device is freed.
//!
//! Where it is stricter than 2.9: a device entry is used only if its name is a PCI slot name and
//! its canonical path lies under `/sys/`; the files read are opened without following a symbolic
//! link, bounded in size, and parsed strictly (a line that does not parse is a clear error naming
//! the file, never a guess); a `resourceN` that is not a regular file, or is shorter than the BAR
//! `resource` gives, is refused (a mapping past its end would fault in the driver). A device with an
//! I/O-port BAR (the PLX-bridged cards: 5i20, 5i22, 5i23, 4i65, 4i68, 3x20…) is refused before its
//! probe: their drivers use `inl`/`outl`, which need the `iopl(3)` 2.9's `rtapi_app` takes at start
//! and this master does not — such a card would fault the master at its first port access.
//!
//! All of it runs at `loadrt`/`unload` in the master's main thread, never on a task: allocation,
//! locks and messages are fine here. The struct layouts are 2.9's (checked below at compile time
//! against the offsets the installed `rtapi_pci.h` gives and `hm2_pci.so` uses).

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::io::Read as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where the kernel lists PCI devices. Not configurable: a test puts its fake device here in a
/// mount namespace of its own.
const DEVICES: &str = "/sys/bus/pci/devices";

/// `IORESOURCE_IO`: a BAR in I/O-port space.
const IORESOURCE_IO: u64 = 0x100;

/// Bytes read at most from one sysfs attribute (`resource` is 13 lines of 57 bytes).
const ATTR_MAX: usize = 4096;

/// `struct rtapi_pci_device_id`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PciDeviceId {
    /// Vendor id.
    pub vendor: u32,
    /// Device id.
    pub device: u32,
    /// Subsystem vendor id.
    pub subvendor: u32,
    /// Subsystem device id.
    pub subdevice: u32,
    /// Class (not compared, as in 2.9).
    pub class: u32,
    /// Class mask (not compared).
    pub class_mask: u32,
}

/// `struct rtapi_pci_resource`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PciResource {
    /// First address (as `resource` gives it).
    pub start: isize,
    /// Last address.
    pub end: isize,
    /// The kernel's `IORESOURCE_*` flags.
    pub flags: c_ulong,
    /// Not used (2.9 does not fill it either).
    pub mmio: *mut c_void,
}

/// `struct rtapi_pci_dev`.
#[repr(C)]
pub struct PciDev {
    /// The slot name, `0000:01:00.0`.
    pub dev_name: [c_char; 32],
    /// The device's sysfs directory.
    pub sys_path: [c_char; 256],
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Subsystem vendor id.
    pub subsystem_vendor: u16,
    /// Subsystem device id.
    pub subsystem_device: u16,
    /// Class (0: not read, as in 2.9).
    pub class: u32,
    /// The six BARs, filled by `rtapi_pci_enable_device`.
    pub resource: [PciResource; 6],
    /// The driver's (`rtapi_pci_set_drvdata`).
    pub driver_data: *mut c_void,
}

/// `struct rtapi_pci_driver`.
#[repr(C)]
pub struct PciDriver {
    /// The driver's name.
    pub name: *mut c_char,
    /// The devices it drives, ended by a vendor-0 entry.
    pub id_table: *const PciDeviceId,
    /// Called with each matching device.
    pub probe: Option<unsafe extern "C" fn(*mut PciDev, *const PciDeviceId) -> c_int>,
    /// Called with each probed device at unregister.
    pub remove: Option<unsafe extern "C" fn(*mut PciDev)>,
    /// The devices probed (ours).
    pub private_data: *mut c_void,
}

// 2.9's layouts on x86-64 (gcc, the installed /usr/include/linuxcnc/rtapi_pci.h: sizes 24, 32,
// 504, 40; `hm2_pci.so` reads device at 0x122, subsystem_device at 0x126, resource[0] at 0x130,
// driver_data at 0x1f0).
#[cfg(target_pointer_width = "64")]
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<PciDeviceId>() == 24);
    assert!(size_of::<PciResource>() == 32);
    assert!(size_of::<PciDev>() == 504);
    assert!(offset_of!(PciDev, sys_path) == 32);
    assert!(offset_of!(PciDev, vendor) == 288);
    assert!(offset_of!(PciDev, device) == 290);
    assert!(offset_of!(PciDev, subsystem_vendor) == 292);
    assert!(offset_of!(PciDev, subsystem_device) == 294);
    assert!(offset_of!(PciDev, class) == 296);
    assert!(offset_of!(PciDev, resource) == 304);
    assert!(offset_of!(PciDev, driver_data) == 496);
    assert!(size_of::<PciDriver>() == 40);
    assert!(offset_of!(PciDriver, id_table) == 8);
    assert!(offset_of!(PciDriver, probe) == 16);
    assert!(offset_of!(PciDriver, remove) == 24);
    assert!(offset_of!(PciDriver, private_data) == 32);
};

fn say(text: &str) {
    super::say(&format!("RTAPI_PCI: {text}"));
}

/// A PCI slot name as the kernel writes it: `DDDD:BB:DD.F` in lower-case hex.
fn is_slot_name(name: &str) -> bool {
    let b = name.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        b[r].iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    };
    b.len() == 12
        && hex(0..4)
        && b[4] == b':'
        && hex(5..7)
        && b[7] == b':'
        && hex(8..10)
        && b[10] == b'.'
        && (b'0'..=b'7').contains(&b[11])
}

/// Opens `path` for reading or writing without following a symbolic link; it must be a regular
/// file (a sysfs attribute is one).
fn open_attr(path: &Path, flags: c_int) -> Result<OwnedFd, String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    // SAFETY: a C string we own; the flags are plain open(2) flags.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(format!(
            "could not open \"{}\" ({})",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: a descriptor open(2) just gave us, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: fstat of a descriptor we own into a zeroed stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0
        || st.st_mode & libc::S_IFMT != libc::S_IFREG
    {
        return Err(format!(
            "\"{}\" is not a regular file: refused",
            path.display()
        ));
    }
    Ok(fd)
}

/// The text of a sysfs attribute, at most [`ATTR_MAX`] bytes.
fn read_attr(path: &Path) -> Result<String, String> {
    let fd = open_attr(path, libc::O_RDONLY)?;
    let mut buf = Vec::new();
    std::fs::File::from(fd)
        .take(ATTR_MAX as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("could not read \"{}\" ({e})", path.display()))?;
    if buf.len() > ATTR_MAX {
        return Err(format!(
            "\"{}\" is longer than {ATTR_MAX} bytes: not a sysfs attribute, refused",
            path.display()
        ));
    }
    String::from_utf8(buf).map_err(|_| format!("\"{}\" is not text: refused", path.display()))
}

/// `0x%x` as the kernel writes it, strictly.
fn hex(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// A 16-bit id attribute (`vendor`, `device`, `subsystem_*`): one `0xXXXX` line.
fn read_id(dir: &Path, attr: &str) -> Result<u16, String> {
    let path = dir.join(attr);
    let text = read_attr(&path)?;
    hex(text.strip_suffix('\n').unwrap_or(&text))
        .and_then(|v| u16::try_from(v).ok())
        .ok_or_else(|| {
            format!(
                "\"{}\" does not hold a 16-bit id in hex ({:?}): refused",
                path.display(),
                text.trim_end()
            )
        })
}

/// One BAR from `resource`: start, end, flags.
pub type Bar = (u64, u64, u64);

/// The six BARs of a `resource` file's text: its first six lines, each three `0x…` numbers with
/// start ≤ end (or both 0, an unused BAR). Further lines (ROM, bridge windows) are not read.
pub fn parse_resource(text: &str) -> Result<[Bar; 6], String> {
    let mut bars = [(0, 0, 0); 6];
    let mut lines = text.lines();
    for (i, bar) in bars.iter_mut().enumerate() {
        let line = lines
            .next()
            .ok_or_else(|| format!("has {i} lines, 6 BARs needed"))?;
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        let parsed = match f.as_slice() {
            [s, e, fl] => hex(s)
                .zip(hex(e))
                .zip(hex(fl))
                .map(|((s, e), fl)| (s, e, fl)),
            _ => None,
        };
        let (s, e, fl) =
            parsed.ok_or_else(|| format!("line {} does not parse: {line:?}", i + 1))?;
        if e < s || isize::try_from(e).is_err() {
            return Err(format!(
                "line {}: BAR {i} ends before it starts or beyond the address space: {line:?}",
                i + 1
            ));
        }
        *bar = (s, e, fl);
    }
    Ok(bars)
}

/// `rtapi_pci_resource_len`: 0 for an unused BAR, else end - start + 1.
fn bar_len(r: &PciResource) -> usize {
    if r.start == 0 && r.end == r.start {
        0
    } else {
        (r.end - r.start + 1) as usize
    }
}

/// The device's sysfs directory, from its `sys_path`.
fn sys_path(dev: &PciDev) -> PathBuf {
    // SAFETY: sys_path is NUL-terminated: we zeroed the device and wrote at most 255 bytes.
    let c = unsafe { CStr::from_ptr(dev.sys_path.as_ptr()) };
    PathBuf::from(std::ffi::OsStr::from_bytes(c.to_bytes()))
}

fn dev_name(dev: &PciDev) -> String {
    // SAFETY: dev_name is NUL-terminated: we zeroed the device and wrote at most 31 bytes.
    unsafe { CStr::from_ptr(dev.dev_name.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn copy_c(dst: &mut [c_char], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s as c_char;
    }
}

/// A device of the driver's table, found in sysfs.
struct Found {
    slot: String,
    path: PathBuf,
    id: PciDeviceId,
}

/// The entries of `table` up to the terminating vendor-0 one.
///
/// # Safety
/// `table` is a driver's id table: readable up to an entry whose vendor is 0.
unsafe fn id_table(table: *const PciDeviceId) -> Vec<PciDeviceId> {
    let mut v = Vec::new();
    if table.is_null() {
        return v;
    }
    for i in 0.. {
        // SAFETY: within the table (the caller's contract): we stop at its vendor-0 entry.
        let e = unsafe { *table.add(i) };
        if e.vendor == 0 {
            break;
        }
        v.push(e);
    }
    v
}

/// The devices in sysfs that one of `table`'s entries matches, in slot order. A device whose ids
/// or `resource` cannot be read is reported and left out; so is one with an I/O-port BAR.
fn find(table: &[PciDeviceId]) -> Vec<Found> {
    let mut names: Vec<String> = match std::fs::read_dir(DEVICES) {
        Ok(d) => d
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect(),
        Err(e) => {
            say(&format!("cannot list {DEVICES}: {e}"));
            return Vec::new();
        }
    };
    names.sort();
    let mut found = Vec::new();
    for slot in names {
        if !is_slot_name(&slot) {
            continue;
        }
        let link = Path::new(DEVICES).join(&slot);
        let Ok(path) = std::fs::canonicalize(&link) else {
            continue;
        };
        let (vendor, device) = match (read_id(&path, "vendor"), read_id(&path, "device")) {
            (Ok(v), Ok(d)) => (v, d),
            (Err(e), _) | (_, Err(e)) => {
                say(&e);
                continue;
            }
        };
        // 2.9 asks udev for the table's vendor:device pairs, then compares the subsystem ids.
        if !table
            .iter()
            .any(|t| t.vendor == u32::from(vendor) && t.device == u32::from(device))
        {
            continue;
        }
        let (subvendor, subdevice) = match (
            read_id(&path, "subsystem_vendor"),
            read_id(&path, "subsystem_device"),
        ) {
            (Ok(v), Ok(d)) => (v, d),
            (Err(e), _) | (_, Err(e)) => {
                say(&e);
                continue;
            }
        };
        let id = PciDeviceId {
            vendor: vendor.into(),
            device: device.into(),
            subvendor: subvendor.into(),
            subdevice: subdevice.into(),
            class: 0,
            class_mask: 0,
        };
        if !table.iter().any(|t| {
            t.vendor == id.vendor
                && t.device == id.device
                && t.subvendor == id.subvendor
                && t.subdevice == id.subdevice
        }) {
            continue;
        }
        if !path.starts_with("/sys/") || path.as_os_str().len() > 255 {
            say(&format!(
                "{slot}: its sysfs path {} is not under /sys or too long: refused",
                path.display()
            ));
            continue;
        }
        let res = path.join("resource");
        match read_attr(&res).and_then(|t| {
            parse_resource(&t).map_err(|e| format!("\"{}\" {e}: refused", res.display()))
        }) {
            Err(e) => {
                say(&e);
                continue;
            }
            Ok(bars) if bars.iter().any(|b| b.1 != 0 && b.2 & IORESOURCE_IO != 0) => {
                say(&format!(
                    "{slot} ({vendor:04x}:{device:04x} {subvendor:04x}:{subdevice:04x}) has I/O-port \
                     BARs (a PLX-bridged card): this master grants no port I/O (iopl) to drivers, \
                     so it is not probed; use LinuxCNC's own rtapi_app for this card"
                ));
                continue;
            }
            Ok(_) => {}
        }
        found.push(Found { slot, path, id });
    }
    found
}

/// The devices a registered driver probed, kept in its `private_data` as 2.9 keeps them.
type Devices = Vec<*mut PciDev>;

/// `int rtapi_pci_register_driver(struct rtapi_pci_driver *)`: probes every matching device; 0, or
/// -1 when a probe failed (the devices probed before it removed, as 2.9).
///
/// # Safety
/// `driver` is a module's `rtapi_pci_driver` with a vendor-0-terminated id table; it stays valid
/// until it is unregistered.
#[no_mangle]
pub unsafe extern "C" fn rtapi_pci_register_driver(driver: *mut PciDriver) -> c_int {
    if driver.is_null() {
        return -libc::EINVAL;
    }
    // SAFETY: the module's driver (the caller's contract); we are its only user during the call.
    let drv = unsafe { &mut *driver };
    drv.private_data = Box::into_raw(Box::<Devices>::default()).cast();
    // SAFETY: the driver's id table (the caller's contract).
    let table = unsafe { id_table(drv.id_table) };
    let Some(probe) = drv.probe else {
        return 0;
    };
    for f in find(&table) {
        // SAFETY: PciDev is plain data (integers, pointers, arrays): all zeroes is a valid value.
        let mut dev: Box<PciDev> = Box::new(unsafe { std::mem::zeroed() });
        copy_c(&mut dev.dev_name[..31], f.slot.as_bytes());
        copy_c(&mut dev.sys_path[..255], f.path.as_os_str().as_bytes());
        dev.vendor = f.id.vendor as u16;
        dev.device = f.id.device as u16;
        dev.subsystem_vendor = f.id.subvendor as u16;
        dev.subsystem_device = f.id.subdevice as u16;
        let dev = Box::into_raw(dev);
        // SAFETY: the module's probe, with a device we own and the device's ids (2.9 passes these,
        // not the table's entry), both alive for the call.
        let r = unsafe { probe(dev, &f.id) };
        if r != 0 {
            // SAFETY: from Box::into_raw above; the failed probe keeps no claim on it (2.9 frees it too).
            drop(unsafe { Box::from_raw(dev) });
            say(&format!("Driver probe function failed for {}!", f.slot));
            // SAFETY: the same driver, registered above.
            unsafe { rtapi_pci_unregister_driver(driver) };
            return -1;
        }
        // SAFETY: private_data is the Devices we put there above.
        unsafe { &mut *drv.private_data.cast::<Devices>() }.push(dev);
    }
    0
}

/// `void rtapi_pci_unregister_driver(struct rtapi_pci_driver *)`: each probed device's `remove`,
/// then the device is freed.
///
/// # Safety
/// `driver` is null or a driver given to [`rtapi_pci_register_driver`].
#[no_mangle]
pub unsafe extern "C" fn rtapi_pci_unregister_driver(driver: *mut PciDriver) {
    if driver.is_null() {
        return;
    }
    // SAFETY: a registered driver (the caller's contract).
    let drv = unsafe { &mut *driver };
    if drv.private_data.is_null() {
        return;
    }
    // SAFETY: the Devices register put there, taken back once (private_data is cleared).
    let devices = unsafe { Box::from_raw(drv.private_data.cast::<Devices>()) };
    drv.private_data = std::ptr::null_mut();
    for dev in *devices {
        if let Some(remove) = drv.remove {
            // SAFETY: the module's remove, with a device it probed successfully.
            unsafe { remove(dev) };
        }
        // SAFETY: from Box::into_raw in register; removed, so no longer the driver's.
        drop(unsafe { Box::from_raw(dev) });
    }
}

/// The device's `enable` attribute (`enabled` on kernels that named it so).
fn enable_path(dev: &PciDev) -> PathBuf {
    let p = sys_path(dev).join("enable");
    if p.exists() {
        p
    } else {
        sys_path(dev).join("enabled")
    }
}

fn write_enable(dev: &PciDev, value: &[u8]) -> Result<(), String> {
    let p = enable_path(dev);
    let fd = open_attr(&p, libc::O_WRONLY)?;
    // SAFETY: writing our bytes to a descriptor we own.
    let n = unsafe { libc::write(fd.as_raw_fd(), value.as_ptr().cast(), value.len()) };
    if n != value.len() as isize {
        return Err(format!(
            "could not write \"{}\" ({})",
            p.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// `int rtapi_pci_enable_device(struct rtapi_pci_dev *)`: writes `1` to `enable` and reads the
/// BARs from `resource`; 0 or -1.
///
/// # Safety
/// `dev` is a device this master gave a driver's probe.
#[no_mangle]
pub unsafe extern "C" fn rtapi_pci_enable_device(dev: *mut PciDev) -> c_int {
    if dev.is_null() {
        return -1;
    }
    // SAFETY: one of our devices (the caller's contract), not used elsewhere during the call.
    let dev = unsafe { &mut *dev };
    if let Err(e) = write_enable(dev, b"1") {
        say(&e);
        return -1;
    }
    let res = sys_path(dev).join("resource");
    let bars = match read_attr(&res).and_then(|t| {
        parse_resource(&t).map_err(|e| format!("failed to parse \"{}\": {e}", res.display()))
    }) {
        Ok(b) => b,
        Err(e) => {
            say(&e);
            return -1;
        }
    };
    for (r, (s, e, f)) in dev.resource.iter_mut().zip(bars) {
        r.start = s as isize;
        r.end = e as isize;
        r.flags = f as c_ulong;
    }
    0
}

/// `int rtapi_pci_disable_device(struct rtapi_pci_dev *)`: writes `0` to `enable`; 0 or -1.
///
/// # Safety
/// `dev` is a device this master gave a driver's probe.
#[no_mangle]
pub unsafe extern "C" fn rtapi_pci_disable_device(dev: *mut PciDev) -> c_int {
    if dev.is_null() {
        return -1;
    }
    // SAFETY: one of our devices (the caller's contract).
    match write_enable(unsafe { &*dev }, b"0") {
        Ok(()) => 0,
        Err(e) => {
            say(&e);
            -1
        }
    }
}

/// What [`rtapi_pci_ioremap_bar`] mapped: (address, length).
static MAPS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn map_bar(dev: &PciDev, bar: c_int) -> Result<*mut c_void, String> {
    let i = usize::try_from(bar)
        .ok()
        .filter(|&i| i < 6)
        .ok_or_else(|| format!("Invalid PCI BAR {bar}"))?;
    let len = bar_len(&dev.resource[i]);
    let path = sys_path(dev).join(format!("resource{i}"));
    if len == 0 {
        return Err(format!(
            "BAR {i} of {} is unused (or the device was not enabled): nothing to map",
            dev_name(dev)
        ));
    }
    let fd = open_attr(&path, libc::O_RDWR | libc::O_SYNC)?;
    // SAFETY: fstat of a descriptor we own into a zeroed stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || (st.st_size as u64) < len as u64 {
        return Err(format!(
            "\"{}\" is {} bytes but BAR {i} is {len} bytes in \"resource\": refused (a mapping past \
             its end would fault)",
            path.display(),
            st.st_size
        ));
    }
    // SAFETY: a new shared mapping of `len` bytes of a file we checked is at least that long; the
    // kernel chooses the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED || p.is_null() {
        return Err(format!(
            "Failed to remap MMIO {i} of PCI device {}: {}",
            dev_name(dev),
            std::io::Error::last_os_error()
        ));
    }
    crate::rt::lock(&MAPS).push((p as usize, len));
    Ok(p)
}

/// `void *rtapi_pci_ioremap_bar(struct rtapi_pci_dev *, int bar)`: the BAR mapped, or null.
///
/// # Safety
/// `dev` is a device this master gave a driver's probe.
#[no_mangle]
pub unsafe extern "C" fn rtapi_pci_ioremap_bar(dev: *mut PciDev, bar: c_int) -> *mut c_void {
    if dev.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: one of our devices (the caller's contract).
    match map_bar(unsafe { &*dev }, bar) {
        Ok(p) => p,
        Err(e) => {
            say(&e);
            std::ptr::null_mut()
        }
    }
}

/// `void rtapi_iounmap(volatile void *)`: unmaps what [`rtapi_pci_ioremap_bar`] mapped at `addr`.
#[no_mangle]
pub extern "C" fn rtapi_iounmap(addr: *mut c_void) {
    if addr.is_null() {
        return;
    }
    let mut maps = crate::rt::lock(&MAPS);
    let Some(k) = maps.iter().position(|&(a, _)| a == addr as usize) else {
        drop(maps);
        say(&format!("IO-unmap: Did not find PCI mapping {addr:p}"));
        return;
    };
    let (a, len) = maps.swap_remove(k);
    // SAFETY: a mapping of `len` bytes at `a` that ioremap_bar made and nothing unmapped since
    // (it was in MAPS); the driver gives it back, so nobody uses it after.
    unsafe { libc::munmap(a as *mut c_void, len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names() {
        assert!(is_slot_name("0000:01:00.0"));
        assert!(is_slot_name("0000:00:1f.3"));
        for bad in [
            "0000:01:00",
            "0000:01:00.8",
            "../../etc",
            "0000:01:00.0x",
            "0000:0G:00.0",
        ] {
            assert!(!is_slot_name(bad), "{bad}");
        }
    }

    #[test]
    fn resource_lines() {
        let line = |s: u64, e: u64, f: u64| format!("0x{s:016x} 0x{e:016x} 0x{f:016x}\n");
        let mut t = line(0xfe00_0000, 0xfe00_ffff, 0x40200);
        for _ in 0..12 {
            t += &line(0, 0, 0);
        }
        let bars = parse_resource(&t).unwrap();
        assert_eq!(bars[0], (0xfe00_0000, 0xfe00_ffff, 0x40200));
        assert_eq!(bars[5], (0, 0, 0));
        let r = PciResource {
            start: 0xfe00_0000,
            end: 0xfe00_ffff,
            flags: 0,
            mmio: std::ptr::null_mut(),
        };
        assert_eq!(bar_len(&r), 0x10000);
        // Too few lines, a field that is not hex, end before start: each a clear error.
        let e = parse_resource(&line(1, 2, 0)).unwrap_err();
        assert!(e.contains("1 lines"), "{e}");
        let bad = t.replacen("0x00000000fe00ffff", "fe00ffff", 1);
        let e = parse_resource(&bad).unwrap_err();
        assert!(e.contains("line 1 does not parse"), "{e}");
        let backwards = line(0x2000, 0x1000, 0) + &t;
        assert!(parse_resource(&backwards)
            .unwrap_err()
            .contains("ends before"));
    }
}
