//! Hosted threads' health as pins of LinuxCNC's own HAL (issue 24), so that a LinuxCNC config can
//! wire thread health into its estop chain:
//!
//! ```text
//! loadrt … (the master made component `rtapi` with this module)
//! addf rtapi.update servo-thread
//! net base-late rtapi.base-thread.late => estop-latch.0.fault-in
//! ```
//!
//! The component is made through `hal_lib`'s own API — entry points the master finds with `dlsym` in
//! the `hal_lib.so` it loaded ([`HalLib::from_dlsym`]); the master process must not export `hal_*`
//! symbols itself (the executable comes first in symbol lookup and would shadow hal_lib's). For every
//! hosted thread, [`LcncHealth::add_thread`] makes five OUT pins of component `rtapi` (the component
//! is made unready around the additions: hal_lib refuses pins of a ready component):
//!
//! | pin | type | value |
//! |-----|------|-------|
//! | `rtapi.<thread>.latency` | s32 | ns the last finished period's wake came after its deadline (`<thread>.latency`) |
//! | `rtapi.<thread>.latency-max` | s32 | the most it has been |
//! | `rtapi.<thread>.missed` | u32 | deadlines missed (skipped periods) in all |
//! | `rtapi.<thread>.late` | bit | TRUE when `missed` grew since the last update, or the thread's own `late` is TRUE |
//! | `rtapi.<thread>.stalled` | bit | TRUE while rtapi's watchdog says the thread stalled |
//!
//! and one function, `rtapi.update`, that copies the values of every thread into its pins; add it to
//! the thread whose functions act on them (`addf rtapi.update servo-thread`). `late` is latched per
//! update from the miss count, so a one-period `late` of a faster thread is not lost between two
//! updates of a slower one. The function is a few relaxed loads and plain stores per thread: no
//! allocation, lock or system call (it runs on a LinuxCNC RT thread).
//!
//! Call [`LcncHealth::create`] and [`add_thread`](LcncHealth::add_thread) outside hal_lib's own
//! calls — never from inside `rtapi_task_new`/`rtapi_task_start`, which `hal_create_thread` calls
//! with the HAL mutex held (`hal_set_unready` would wait for it forever): after the `loadrt` that
//! made the thread returned.

use crate::runtime::health::HealthReader;
use std::ffi::{c_char, c_int, c_long, c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

/// LinuxCNC's `HAL_OUT` (hal.h, `hal_pin_dir_t`).
const HAL_OUT: c_int = 32;

/// Threads the component has room for (LinuxCNC's `RTAPI_MAX_TASKS` is 64).
pub const MAX_THREADS: usize = 64;

/// The name of the component and the prefix of its pins and function.
pub const COMPONENT: &str = "rtapi";

/// `int hal_init(const char *name)`
pub type HalInit = unsafe extern "C" fn(*const c_char) -> c_int;
/// `int hal_ready(int comp_id)`, `hal_set_unready`, `hal_exit`
pub type HalCompFn = unsafe extern "C" fn(c_int) -> c_int;
/// `void *hal_malloc(long size)`
pub type HalMalloc = unsafe extern "C" fn(c_long) -> *mut c_void;
/// `int hal_pin_<T>_new(const char *name, hal_pin_dir_t dir, hal_<T>_t **ptr, int comp_id)`
pub type HalPinNew<T> = unsafe extern "C" fn(*const c_char, c_int, *mut *mut T, c_int) -> c_int;
/// `int hal_export_funct(const char *name, void (*funct)(void *, long), void *arg, int uses_fp,
/// int reentrant, int comp_id)`
pub type HalExportFunct = unsafe extern "C" fn(
    *const c_char,
    unsafe extern "C" fn(*mut c_void, c_long),
    *mut c_void,
    c_int,
    c_int,
    c_int,
) -> c_int;

/// hal_lib's entry points this module calls (LinuxCNC 2.9 `hal.h` signatures).
#[derive(Clone, Copy)]
pub struct HalLib {
    /// `hal_init`
    pub hal_init: HalInit,
    /// `hal_ready`
    pub hal_ready: HalCompFn,
    /// `hal_set_unready`
    pub hal_set_unready: HalCompFn,
    /// `hal_exit`
    pub hal_exit: HalCompFn,
    /// `hal_malloc`
    pub hal_malloc: HalMalloc,
    /// `hal_pin_s32_new`
    pub hal_pin_s32_new: HalPinNew<i32>,
    /// `hal_pin_u32_new`
    pub hal_pin_u32_new: HalPinNew<u32>,
    /// `hal_pin_bit_new` (`hal_bit_t` is a one-byte `bool`)
    pub hal_pin_bit_new: HalPinNew<u8>,
    /// `hal_export_funct`
    pub hal_export_funct: HalExportFunct,
}

impl HalLib {
    /// The entry points from `handle`, a `dlopen` handle of LinuxCNC's `hal_lib.so`; the name of
    /// the first one missing otherwise.
    ///
    /// # Safety
    /// `handle` must be a live `dlopen` handle of a library whose symbols of these names have the
    /// signatures above (LinuxCNC 2.9's hal_lib), and stay loaded while the result is used.
    pub unsafe fn from_dlsym(handle: *mut c_void) -> Result<HalLib, HealthError> {
        let sym = |name: &'static str| {
            let c = CString::new(name).expect("no NUL in a symbol name");
            // SAFETY: `handle` is a live dlopen handle (the caller's contract); `c` is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
            if p.is_null() {
                Err(HealthError::NoSymbol(name))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each pointer is the symbol of that name, whose signature the caller vouches for;
        // a function pointer and a data pointer have the same size and representation here.
        unsafe {
            Ok(HalLib {
                hal_init: std::mem::transmute::<*mut c_void, HalInit>(sym("hal_init")?),
                hal_ready: std::mem::transmute::<*mut c_void, HalCompFn>(sym("hal_ready")?),
                hal_set_unready: std::mem::transmute::<*mut c_void, HalCompFn>(sym(
                    "hal_set_unready",
                )?),
                hal_exit: std::mem::transmute::<*mut c_void, HalCompFn>(sym("hal_exit")?),
                hal_malloc: std::mem::transmute::<*mut c_void, HalMalloc>(sym("hal_malloc")?),
                hal_pin_s32_new: std::mem::transmute::<*mut c_void, HalPinNew<i32>>(sym(
                    "hal_pin_s32_new",
                )?),
                hal_pin_u32_new: std::mem::transmute::<*mut c_void, HalPinNew<u32>>(sym(
                    "hal_pin_u32_new",
                )?),
                hal_pin_bit_new: std::mem::transmute::<*mut c_void, HalPinNew<u8>>(sym(
                    "hal_pin_bit_new",
                )?),
                hal_export_funct: std::mem::transmute::<*mut c_void, HalExportFunct>(sym(
                    "hal_export_funct",
                )?),
            })
        }
    }
}

/// One thread's pins (pointers hal_lib filled in) and where its values come from. Lives in
/// hal_malloc'ed memory: hal_lib requires the pin pointers to be in its shared memory.
#[repr(C)]
struct Entry {
    latency: *mut i32,
    latency_max: *mut i32,
    missed: *mut u32,
    late: *mut u8,
    stalled: *mut u8,
    /// A leaked `Box<HealthReader>`: never freed (the update may run until the process ends).
    source: *const HealthReader,
    /// `missed` at the previous update (written by the update only).
    last_missed: u32,
}

/// The function's argument: the threads published so far.
#[repr(C)]
struct Table {
    /// Entries `0..count` are complete (release store after each is written).
    count: AtomicUsize,
    entries: [Entry; MAX_THREADS],
}

/// The `rtapi` component in LinuxCNC's HAL.
pub struct LcncHealth {
    api: HalLib,
    comp_id: c_int,
    table: *mut Table,
    names: Vec<String>,
}

// SAFETY: the table is only written by the owner of this value (add_thread, under &mut self) and
// read by the update function through atomics-published entries; HalLib is a set of fn pointers.
unsafe impl Send for LcncHealth {}

/// Why the health component or a thread's pins could not be made in LinuxCNC's HAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthError {
    /// The library has no symbol of this name (not LinuxCNC 2.9's hal_lib).
    NoSymbol(&'static str),
    /// A hal_lib call returned a negative errno.
    Call {
        /// The call and what it was for, e.g. `hal_pin_s32_new(latency)`.
        call: &'static str,
        /// Its errno.
        errno: nix::errno::Errno,
    },
    /// `hal_malloc` returned null.
    OutOfMemory,
    /// A name LinuxCNC's HAL cannot hold (longer than 47 characters, or with a NUL).
    Name(String),
    /// The thread has its pins already.
    Duplicate(String),
    /// The component has pins for the most threads it can.
    Full,
}

impl std::fmt::Display for HealthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HealthError::NoSymbol(name) => write!(f, "hal_lib has no symbol {name}"),
            HealthError::Call { call, errno } => write!(f, "{call} failed: {errno}"),
            HealthError::OutOfMemory => f.write_str("hal_malloc: the HAL's shared memory is full"),
            HealthError::Name(n) if n.contains('\0') => {
                write!(f, "HAL name '{}' contains a NUL", n.escape_debug())
            }
            HealthError::Name(n) => write!(
                f,
                "HAL name '{}' is longer than LinuxCNC's 47 characters",
                n.escape_debug()
            ),
            HealthError::Duplicate(t) => write!(f, "thread {t} has rtapi health pins already"),
            HealthError::Full => write!(
                f,
                "component {COMPONENT} has pins for {MAX_THREADS} threads already"
            ),
        }
    }
}

impl std::error::Error for HealthError {}

/// hal_lib's negative errno as an error.
fn check(call: &'static str, rc: c_int) -> Result<c_int, HealthError> {
    if rc < 0 {
        Err(HealthError::Call {
            call,
            errno: nix::errno::Errno::from_raw(-rc),
        })
    } else {
        Ok(rc)
    }
}

fn cname(s: &str) -> Result<CString, HealthError> {
    if s.len() > 47 {
        return Err(HealthError::Name(s.to_string()));
    }
    CString::new(s).map_err(|_| HealthError::Name(s.to_string()))
}

impl LcncHealth {
    /// Makes component [`COMPONENT`] with its function `rtapi.update` (no pins yet) and readies it.
    ///
    /// # Safety
    /// `api` must be hal_lib's entry points (see [`HalLib::from_dlsym`]), called in the process that
    /// hosts hal_lib as its RTAPI (so the component is a realtime one), outside hal_lib's own calls.
    pub unsafe fn create(api: HalLib) -> Result<LcncHealth, HealthError> {
        let name = cname(COMPONENT)?;
        // SAFETY: hal_lib's entry point with a NUL-terminated name (the caller's contract).
        let comp_id = check("hal_init(rtapi)", unsafe { (api.hal_init)(name.as_ptr()) })?;
        let fail = |e: HealthError| {
            // SAFETY: the component made just above.
            unsafe { (api.hal_exit)(comp_id) };
            e
        };
        // SAFETY: hal_lib's allocator; the block is never freed (HAL memory lives with the HAL).
        let table =
            unsafe { (api.hal_malloc)(std::mem::size_of::<Table>() as c_long) }.cast::<Table>();
        if table.is_null() {
            return Err(fail(HealthError::OutOfMemory));
        }
        // SAFETY: a fresh block of the table's size, aligned as hal_malloc aligns (8 bytes on
        // 64-bit, enough for every field); all-zero is a valid Table (null pointers, count 0).
        unsafe { std::ptr::write_bytes(table.cast::<u8>(), 0, std::mem::size_of::<Table>()) };
        let funct = cname(&format!("{COMPONENT}.update"))?;
        // SAFETY: `update` has the signature hal_lib calls; its argument is the table, which lives
        // as long as the HAL; uses_fp 0 (no floating point), not reentrant.
        check("hal_export_funct(rtapi.update)", unsafe {
            (api.hal_export_funct)(funct.as_ptr(), update, table.cast(), 0, 0, comp_id)
        })
        .map_err(fail)?;
        // SAFETY: the component made above.
        check("hal_ready(rtapi)", unsafe { (api.hal_ready)(comp_id) }).map_err(fail)?;
        Ok(LcncHealth {
            api,
            comp_id,
            table,
            names: Vec::new(),
        })
    }

    /// hal_lib's id of the component.
    pub fn comp_id(&self) -> c_int {
        self.comp_id
    }

    /// The threads that have pins, in the order they were added.
    pub fn threads(&self) -> &[String] {
        &self.names
    }

    /// Makes `rtapi.<thread>.latency`, `.latency-max`, `.missed`, `.late`, `.stalled` fed by
    /// `source` (from [`HostedHandle::health`](crate::runtime::hosted::HostedHandle::health) or
    /// [`HostedThreads::health`](crate::runtime::hosted::HostedThreads::health)); `rtapi.update`
    /// copies them from its next call on. The component is unready while the pins are made.
    pub fn add_thread(&mut self, thread: &str, source: HealthReader) -> Result<(), HealthError> {
        if self.names.iter().any(|n| n == thread) {
            return Err(HealthError::Duplicate(thread.to_string()));
        }
        // SAFETY: the table made in `create`; only this (&mut self) writes it.
        let table = unsafe { &mut *self.table };
        let i = table.count.load(Ordering::Relaxed);
        if i >= MAX_THREADS {
            return Err(HealthError::Full);
        }
        let names = ["latency", "latency-max", "missed", "late", "stalled"]
            .map(|p| cname(&format!("{COMPONENT}.{thread}.{p}")));
        let [latency, latency_max, missed, late, stalled] = names;
        let (latency, latency_max, missed, late, stalled) =
            (latency?, latency_max?, missed?, late?, stalled?);
        let api = self.api;
        let e = &mut table.entries[i];
        // SAFETY: the component is ours; every name is NUL-terminated; each pointer slot lies in
        // hal_malloc'ed memory (the table) and is null, as hal_lib requires; hal_lib fills it with a
        // pin cell that lives as long as the HAL.
        unsafe {
            check(
                "hal_set_unready(rtapi)",
                (api.hal_set_unready)(self.comp_id),
            )?;
            let made = (|| {
                check(
                    "hal_pin_s32_new(latency)",
                    (api.hal_pin_s32_new)(latency.as_ptr(), HAL_OUT, &mut e.latency, self.comp_id),
                )?;
                check(
                    "hal_pin_s32_new(latency-max)",
                    (api.hal_pin_s32_new)(
                        latency_max.as_ptr(),
                        HAL_OUT,
                        &mut e.latency_max,
                        self.comp_id,
                    ),
                )?;
                check(
                    "hal_pin_u32_new(missed)",
                    (api.hal_pin_u32_new)(missed.as_ptr(), HAL_OUT, &mut e.missed, self.comp_id),
                )?;
                check(
                    "hal_pin_bit_new(late)",
                    (api.hal_pin_bit_new)(late.as_ptr(), HAL_OUT, &mut e.late, self.comp_id),
                )?;
                check(
                    "hal_pin_bit_new(stalled)",
                    (api.hal_pin_bit_new)(stalled.as_ptr(), HAL_OUT, &mut e.stalled, self.comp_id),
                )
            })();
            check("hal_ready(rtapi)", (api.hal_ready)(self.comp_id))?;
            if let Err(err) = made {
                // Not published: the slot is reused by the next thread, with null pin pointers.
                std::ptr::write_bytes(
                    std::ptr::from_mut(e).cast::<u8>(),
                    0,
                    std::mem::size_of::<Entry>(),
                );
                return Err(err);
            }
        }
        let source = Box::into_raw(Box::new(source));
        e.last_missed = 0;
        e.source = source;
        // The update sees the entry complete or not at all.
        table.count.store(i + 1, Ordering::Release);
        self.names.push(thread.to_string());
        Ok(())
    }

    /// Removes the component (hal_exit); its function leaves every thread. The readers stay
    /// allocated (an update under way may still read them).
    pub fn exit(self) {
        // SAFETY: the component made in `create`.
        unsafe { (self.api.hal_exit)(self.comp_id) };
    }
}

/// `rtapi.update`: every thread's health into its pins. Runs on a LinuxCNC RT thread: relaxed
/// loads, plain stores, no allocation, no lock, no panic.
unsafe extern "C" fn update(arg: *mut c_void, _period: c_long) {
    let table = arg.cast::<Table>();
    // SAFETY: `arg` is the table given to hal_export_funct, alive as long as the HAL; `count` is
    // only read here (atomic).
    let n = unsafe { (*table).count.load(Ordering::Acquire) }.min(MAX_THREADS);
    for i in 0..n {
        // SAFETY: entries below the published count are complete and no longer written by
        // add_thread; this function is not reentrant (exported so), so `last_missed` has one writer.
        let e = unsafe { &mut (*table).entries[i] };
        // SAFETY: a leaked Box, never freed.
        let v = unsafe { &*e.source }.read();
        let late = v.late || v.missed != e.last_missed;
        e.last_missed = v.missed;
        // SAFETY: pin cells hal_lib gave (aligned, in the HAL's shared memory, alive with the HAL);
        // volatile as LinuxCNC's own `hal_*_t` are.
        unsafe {
            std::ptr::write_volatile(e.latency, v.latency);
            std::ptr::write_volatile(e.latency_max, v.latency_max);
            std::ptr::write_volatile(e.missed, v.missed);
            std::ptr::write_volatile(e.late, u8::from(late));
            std::ptr::write_volatile(e.stalled, u8::from(v.stalled));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Against a recording double of hal_lib's entry points that enforces the hal_lib rules this
    //! module relies on (pins only while unready, null pointer slots, functions before ready). The
    //! real hal_lib runs in the LinuxCNC master's tests.
    use super::*;
    use crate::runtime::health;
    use rtapi_hal::HalBuilder;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Fake {
        calls: Vec<String>,
        ready: bool,
        funct: Option<(unsafe extern "C" fn(*mut c_void, c_long), usize)>,
        /// pin name → cell address
        pins: Vec<(String, usize)>,
    }

    /// Test-only: the fake hal_lib's entry points are C functions called without context (as
    /// hal_lib's are), so they find the fake here.
    static FAKE: Mutex<Option<Fake>> = Mutex::new(None);

    fn with<T>(f: impl FnOnce(&mut Fake) -> T) -> T {
        f(FAKE.lock().unwrap().as_mut().expect("the fake is set up"))
    }

    fn name(p: *const c_char) -> String {
        // SAFETY: the module passes NUL-terminated names.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    unsafe extern "C" fn init(n: *const c_char) -> c_int {
        with(|f| f.calls.push(format!("init {}", name(n))));
        7
    }
    unsafe extern "C" fn ready(id: c_int) -> c_int {
        with(|f| {
            f.calls.push(format!("ready {id}"));
            if f.ready {
                return -libc::EINVAL;
            }
            f.ready = true;
            0
        })
    }
    unsafe extern "C" fn unready(id: c_int) -> c_int {
        with(|f| {
            f.calls.push(format!("unready {id}"));
            f.ready = false;
            0
        })
    }
    unsafe extern "C" fn exit(id: c_int) -> c_int {
        with(|f| f.calls.push(format!("exit {id}")));
        0
    }
    unsafe extern "C" fn malloc(size: c_long) -> *mut c_void {
        Box::leak(vec![0u64; (size as usize).div_ceil(8)].into_boxed_slice())
            .as_mut_ptr()
            .cast()
    }
    fn pin<T>(n: *const c_char, dir: c_int, ptr: *mut *mut T, id: c_int) -> c_int {
        with(|f| {
            // SAFETY: the module passes its entry's pointer slot.
            if f.ready || dir != HAL_OUT || id != 7 || !unsafe { *ptr }.is_null() {
                return -libc::EINVAL;
            }
            let cell = Box::leak(Box::new(0u64)) as *mut u64;
            // SAFETY: as above.
            unsafe { *ptr = cell.cast() };
            f.pins.push((name(n), cell as usize));
            0
        })
    }
    unsafe extern "C" fn pin_s32(n: *const c_char, d: c_int, p: *mut *mut i32, id: c_int) -> c_int {
        pin(n, d, p, id)
    }
    unsafe extern "C" fn pin_u32(n: *const c_char, d: c_int, p: *mut *mut u32, id: c_int) -> c_int {
        pin(n, d, p, id)
    }
    unsafe extern "C" fn pin_bit(n: *const c_char, d: c_int, p: *mut *mut u8, id: c_int) -> c_int {
        pin(n, d, p, id)
    }
    unsafe extern "C" fn export(
        n: *const c_char,
        funct: unsafe extern "C" fn(*mut c_void, c_long),
        arg: *mut c_void,
        _fp: c_int,
        _reentrant: c_int,
        _id: c_int,
    ) -> c_int {
        with(|f| {
            f.calls.push(format!("export {}", name(n)));
            if f.ready {
                return -libc::EINVAL;
            }
            f.funct = Some((funct, arg as usize));
            0
        })
    }

    fn cell(pin: &str) -> u64 {
        let addr = with(|f| f.pins.iter().find(|(n, _)| n == pin).map(|p| p.1));
        // SAFETY: a cell leaked by the fake.
        unsafe {
            std::ptr::read_volatile(addr.unwrap_or_else(|| panic!("no pin {pin}")) as *const u64)
        }
    }

    fn run_update() {
        let (funct, arg) = with(|f| f.funct).expect("rtapi.update exported");
        // SAFETY: the function and argument the module exported.
        unsafe { funct(arg as *mut c_void, 1_000_000) };
    }

    #[test]
    fn pins_per_thread_are_made_unready_and_the_update_latches_late_from_the_miss_count() {
        *FAKE.lock().unwrap() = Some(Fake::default());
        let mut b = HalBuilder::new(&format!("lcnc-health-{}", std::process::id())).unwrap();
        let owner = b.component(health::OWNER).unwrap();
        let keys = health::declare_thread(&mut b, owner, "servo-thread").unwrap();
        let hal = b.build().unwrap();
        let mut writer = health::ThreadHealth::new(&hal, &keys);
        let api = HalLib {
            hal_init: init,
            hal_ready: ready,
            hal_set_unready: unready,
            hal_exit: exit,
            hal_malloc: malloc,
            hal_pin_s32_new: pin_s32,
            hal_pin_u32_new: pin_u32,
            hal_pin_bit_new: pin_bit,
            hal_export_funct: export,
        };
        // SAFETY: the fake keeps hal_lib's contract for these calls.
        let mut comp = unsafe { LcncHealth::create(api) }.unwrap();
        comp.add_thread("servo-thread", HealthReader::new(&hal, &keys))
            .unwrap();
        assert_eq!(
            comp.add_thread("servo-thread", HealthReader::new(&hal, &keys)),
            Err(HealthError::Duplicate("servo-thread".into()))
        );
        let pins: Vec<String> = with(|f| f.pins.iter().map(|p| p.0.clone()).collect());
        assert_eq!(
            pins,
            [
                "rtapi.servo-thread.latency",
                "rtapi.servo-thread.latency-max",
                "rtapi.servo-thread.missed",
                "rtapi.servo-thread.late",
                "rtapi.servo-thread.stalled"
            ]
        );
        assert_eq!(
            with(|f| f.calls.clone()),
            [
                "init rtapi",
                "export rtapi.update",
                "ready 7",
                "unready 7",
                "ready 7"
            ]
        );

        // A period whose wake was 1.5 µs late ended with 2 deadlines gone by.
        writer.period_end(10_000, 1500, 2);
        hal.pin(keys.stalled).set(true);
        run_update();
        assert_eq!(cell("rtapi.servo-thread.latency") as u32, 1500);
        assert_eq!(cell("rtapi.servo-thread.latency-max") as u32, 1500);
        assert_eq!(cell("rtapi.servo-thread.missed") as u32, 2);
        assert_eq!(cell("rtapi.servo-thread.late") as u8, 1);
        assert_eq!(cell("rtapi.servo-thread.stalled") as u8, 1);
        // Two more periods on time: the thread's late is FALSE again, and no new miss.
        writer.period_end(10_000, 200, 0);
        writer.period_end(10_000, 300, 0);
        hal.pin(keys.stalled).set(false);
        run_update();
        assert_eq!(cell("rtapi.servo-thread.latency") as u32, 300);
        assert_eq!(cell("rtapi.servo-thread.latency-max") as u32, 1500);
        assert_eq!(cell("rtapi.servo-thread.late") as u8, 0);
        assert_eq!(cell("rtapi.servo-thread.stalled") as u8, 0);
        // A miss whose one-period `late` is over by the update: still seen, from the count.
        writer.period_end(10_000, 100, 1);
        writer.period_end(10_000, 100, 0);
        run_update();
        assert_eq!(cell("rtapi.servo-thread.missed") as u32, 3);
        assert_eq!(
            cell("rtapi.servo-thread.late") as u8,
            1,
            "latched from the count"
        );
        comp.exit();
        assert_eq!(with(|f| f.calls.last().cloned()), Some("exit 7".into()));
    }
}
