//! rtapi as LinuxCNC 2.9's realtime **master**: the process `rtapi_app` would be. It owns the socket
//! LinuxCNC's `rtapi_app` slaves talk to, hosts LinuxCNC's own `hal_lib.so` and the modules
//! `halcmd loadrt` asks for, and runs hal_lib's threads on rtapi's hardened threads ([`tasks`]).
//!
//! **Personality.** The library holds one definition of each C symbol for two hosts: the standalone
//! host (`rtapi halrun`/`run`: rtapi's own HAL behind LinuxCNC's `hal_*` API) and this master (LinuxCNC's
//! HAL in `hal_lib.so`, rtapi only below it). Where the two differ for the same symbol
//! (`rtapi_shmem_*`: a private block there, a real SysV segment here; `rtapi_task_self`; where module
//! messages go), the entry point asks `components::linuxcnc::personality`, where [`become_master`]
//! registers the master's own entry points in its `main` before anything is `dlopen`ed (the master
//! is a layer above the C interface: it is called through those hooks, never by name). The master binary exports
//! only `rtapi_*` symbols (build.rs): an exported `hal_*` of the executable would come first in
//! global lookup and shadow hal_lib.so's for every module.
//!
//! **Commands** (LinuxCNC 2.9's, [`protocol`]): `load NAME ARGS…`, `unload NAME`, `newinst TYPE NAME
//! [ARG]`, `exit`. A module is a name only (no `/`, no `..`), loaded from LinuxCNC's module directory
//! after rtapi's trust checks ([`crate::components::linuxcnc::trust`]: owner, mode, an ELF LinuxCNC
//! module). As 2.9, the master ends after a command that leaves no module loaded, unless told to stay (the launcher keeps it
//! until `exit`, so LinuxCNC's own `realtime stop` finds rtapi, not a new `rtapi_app`).

pub mod app;
pub mod capi;
pub mod io_time;
pub mod launcher;
pub mod layout;
pub mod lcnc_health;
pub mod pci;
pub mod protocol;
pub mod session;
pub mod shmem;
pub mod socket;
pub mod start;
mod state;
pub mod tasks;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io::{Read as _, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::components::linuxcnc::personality;
use crate::rt::lock;
use state::STATE;

/// Whether this process is the LinuxCNC master (see the module docs).
#[inline]
pub fn is_master() -> bool {
    personality::master().is_some()
}

/// The master's settings.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// Tasks run SCHED_FIFO (a real-time flavor): what `rtapi_is_realtime` says.
    pub real_time: bool,
    /// LinuxCNC's module directory (`/usr/lib/linuxcnc/modules`).
    pub module_dir: PathBuf,
    /// The LinuxCNC release installed, as [`layout::check_release`] accepted it (named when its
    /// hal_lib's layout is refused).
    pub release: String,
}

fn config() -> &'static MasterConfig {
    STATE.config.get_or_init(|| MasterConfig {
        real_time: false,
        module_dir: PathBuf::from(crate::components::linuxcnc::DEBIAN_MODULE_DIR),
        release: String::new(),
    })
}

/// Makes this process the master: its settings, and its entry points registered with the C
/// interface below it ([`personality`]). Call once, first.
pub fn become_master(cfg: MasterConfig) {
    let _ = STATE.config.set(cfg);
    personality::become_master(personality::MasterHooks {
        module_message: capi::module_message,
        shmem_new: shmem::new,
        shmem_getptr: shmem::getptr,
        shmem_delete: shmem::delete,
        task_self: capi::task_self,
        say,
    });
    capi::keep_linked();
    crate::components::linuxcnc::capi_keep_linked();
}

/// One line to standard error (the master's own messages; not for RT threads).
pub fn say(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "{}", text.trim_end());
}

/// A loaded module: kept in [`state::State::modules`] until it is unloaded.
struct Module {
    name: String,
    handle: usize,
    exit: Option<unsafe extern "C" fn()>,
    /// String arguments the module points at.
    _strings: Vec<CString>,
}

/// hal_lib's module name.
pub const HAL_LIB: &str = "hal_lib";

/// The modules loaded by commands (hal_lib not counted).
pub fn module_count() -> usize {
    lock(&STATE.modules)
        .iter()
        .filter(|m| m.name != HAL_LIB)
        .count()
}

/// Names of the loaded modules, in load order.
pub fn module_names() -> Vec<String> {
    lock(&STATE.modules)
        .iter()
        .map(|m| m.name.clone())
        .collect()
}

/// Why a name is not a module name, if it is not (LinuxCNC's rule: no `/`, no `..`).
pub fn refuse_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("an empty module name".into());
    }
    if name.contains('/') || name.contains("..") {
        return Some(format!(
            "{}: not allowed as a module name: a name may contain neither '/' nor '..'; modules come \
             from {} only",
            crate::rt::units::quote(name),
            config().module_dir.display()
        ));
    }
    if name.bytes().any(|b| b.is_ascii_control()) {
        return Some(format!(
            "{}: not allowed as a module name (control characters)",
            crate::rt::units::quote(name)
        ));
    }
    None
}

fn dlerror_text() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string, copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-null, NUL-terminated.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

fn sym(handle: usize, name: &str) -> *mut c_void {
    let c = CString::new(name).expect("symbol names have no NUL");
    // SAFETY: a live dlopen handle and a C string.
    unsafe { libc::dlsym(handle as *mut c_void, c.as_ptr()) }
}

/// `load NAME ARGS…`: 0, or a negative number after a message (as 2.9: -1, or the module's own
/// `rtapi_app_main` result).
pub fn load(name: &str, args: &[String]) -> i32 {
    if let Some(why) = refuse_name(name) {
        say(&format!("rtapi: load refused: {why}"));
        return -1;
    }
    if lock(&STATE.modules).iter().any(|m| m.name == name) {
        say(&format!("rtapi: {name}: already loaded"));
        return -1;
    }
    let path = config().module_dir.join(format!("{name}.so"));
    let canonical = match crate::components::linuxcnc::trust::check_owner(&path) {
        Ok(c) => c,
        Err(e) => {
            say(&format!("rtapi: {name}: {e}"));
            return -1;
        }
    };
    if let Err(e) = crate::components::linuxcnc::trust::inspect(&canonical) {
        say(&format!("rtapi: {name}: {e}"));
        return -1;
    }
    let c = CString::new(canonical.as_os_str().as_encoded_bytes()).expect("a path has no NUL");
    // SAFETY: a trusted module file (checked above); its constructors run here, as under rtapi_app.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        say(&format!("rtapi: {name}: dlopen: {}", dlerror_text()));
        return -1;
    }
    let handle = handle as usize;
    // From here a fault in the module's code (its rtapi_app_main too) is reported by its name.
    crate::runtime::crash::note_code(name, &canonical);
    let close = || {
        crate::runtime::crash::forget_code(name);
        // SAFETY: the handle from dlopen above, closed once.
        unsafe { libc::dlclose(handle as *mut c_void) };
    };
    let main = sym(handle, "rtapi_app_main");
    if main.is_null() {
        say(&format!("rtapi: {name}: no rtapi_app_main"));
        close();
        return -1;
    }
    let mut strings = Vec::new();
    for a in args {
        let a: String = a.chars().filter(|&c| c != '"').collect();
        let Some((key, value)) = a.split_once('=') else {
            say(&format!(
                "rtapi: {name}: invalid argument {} (KEY=VALUE)",
                crate::rt::units::quote(&a)
            ));
            close();
            return -1;
        };
        if let Err(e) = crate::components::linuxcnc::args::write(
            handle as *mut c_void,
            name,
            &canonical,
            key,
            value,
            &mut strings,
        ) {
            say(&format!("rtapi: {e}"));
            close();
            return -1;
        }
    }
    // SAFETY: the module's `int rtapi_app_main(void)`.
    let main: unsafe extern "C" fn() -> c_int = unsafe { std::mem::transmute(main) };
    let exit = sym(handle, "rtapi_app_exit");
    let exit: Option<unsafe extern "C" fn()> = if exit.is_null() {
        None
    } else {
        // SAFETY: the module's `void rtapi_app_exit(void)`.
        Some(unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn()>(exit) })
    };
    // SAFETY: calling the module's entry point, as rtapi_app does, on the master's main thread.
    let rc = unsafe { main() };
    if rc < 0 {
        say(&format!(
            "rtapi: {name}: rtapi_app_main: {} ({rc})",
            std::io::Error::from_raw_os_error(-rc)
        ));
        close();
        return rc;
    }
    lock(&STATE.modules).push(Module {
        name: name.to_string(),
        handle,
        exit,
        _strings: strings,
    });
    // Threads the module made (hal_lib's `hal_create_thread` at its load) get their health pins
    // now that hal_lib's mutex is free again; its I/O functions get timed (io_time.rs).
    if let Some(hal) = hal_lib_handle() {
        let loaded: Vec<String> = lock(&STATE.modules)
            .iter()
            .map(|m| m.name.clone())
            .collect();
        // SAFETY: hal_lib's handle from this master's dlopen, still in MODULES; on the main
        // thread, after the module's rtapi_app_main returned.
        if let Err(e) = unsafe { io_time::wrap_module(hal, &loaded) } {
            say(&format!("rtapi: {name}: I/O time: {e}"));
        }
        // SAFETY: hal_lib's handle from this master's dlopen, still in MODULES; the load that
        // called into hal_lib has returned.
        for p in unsafe { tasks::sync_health(hal as *mut c_void) } {
            say(&format!("rtapi: {p}"));
        }
    }
    0
}

fn hal_lib_handle() -> Option<usize> {
    lock(&STATE.modules)
        .iter()
        .find(|m| m.name == HAL_LIB)
        .map(|m| m.handle)
}

fn unload_module(m: Module) {
    if let Some(exit) = m.exit {
        // SAFETY: the module's exit, once, on the main thread (as rtapi_app's unload).
        unsafe { exit() };
    }
    crate::runtime::crash::forget_code(&m.name);
    // SAFETY: the module's handle, closed once.
    unsafe { libc::dlclose(m.handle as *mut c_void) };
}

/// `unload NAME`.
pub fn unload(name: &str) -> i32 {
    if name == HAL_LIB {
        say("rtapi: hal_lib is the master's own: it goes when the master exits");
        return -1;
    }
    // The health component is a realtime component without a module of its own: `halcmd unload
    // all` names it like any other.
    if name == lcnc_health::COMPONENT && tasks::drop_health() {
        return 0;
    }
    let m = {
        let mut mods = lock(&STATE.modules);
        let Some(i) = mods.iter().position(|m| m.name == name) else {
            drop(mods);
            say(&format!("rtapi: {name}: not loaded"));
            return -1;
        };
        mods.remove(i)
    };
    unload_module(m);
    0
}

/// `newinst TYPE NAME [ARG]`: hal_lib's constructor of component TYPE.
pub fn newinst(ty: &str, name: &str, arg: &str) -> i32 {
    let Some(hal) = hal_lib_handle() else {
        say("rtapi: newinst: hal_lib is not loaded");
        return -1;
    };
    let find = sym(hal, "halpr_find_comp_by_name");
    if find.is_null() {
        say("rtapi: newinst: hal_lib has no halpr_find_comp_by_name");
        return -1;
    }
    // SAFETY: hal_lib's `hal_comp_t *halpr_find_comp_by_name(const char *)`.
    let find: unsafe extern "C" fn(*const c_char) -> *mut u8 = unsafe { std::mem::transmute(find) };
    let (Ok(t), Ok(n), Ok(a)) = (CString::new(ty), CString::new(name), CString::new(arg)) else {
        return -1;
    };
    // SAFETY: a C string; the result is null or a component in the HAL segment.
    let comp = unsafe { find(t.as_ptr()) };
    if comp.is_null() {
        say(&format!("rtapi: newinst: component {ty} not found"));
        return -1;
    }
    // SAFETY: `comp` is a hal_comp_t in the HAL block, whose layout layout::verify checked at
    // start; its name field is read first and must be the type looked up.
    let named =
        unsafe { std::slice::from_raw_parts(comp.add(layout::comp::NAME), layout::NAME_LEN) };
    if CStr::from_bytes_until_nul(named).map(CStr::to_bytes) != Ok(t.as_bytes()) {
        say(&format!(
            "rtapi: newinst: hal_lib's component {ty} is not laid out as 2.9's; not called"
        ));
        return -1;
    }
    // SAFETY: as above: the field is a function pointer or null.
    let make = unsafe { comp.add(layout::comp::MAKE).cast::<usize>().read() };
    if make == 0 {
        say(&format!(
            "rtapi: newinst: component {ty} makes no instances"
        ));
        return -1;
    }
    // SAFETY: `int (*constructor)(char *prefix, char *arg)` of that component.
    let make: unsafe extern "C" fn(*mut c_char, *mut c_char) -> c_int =
        unsafe { std::mem::transmute(make) };
    // SAFETY: C strings that live across the call.
    unsafe { make(n.as_ptr().cast_mut(), a.as_ptr().cast_mut()) }
}

/// Loads hal_lib, first and RTLD_GLOBAL (every module after it resolves `hal_*` there).
pub fn load_hal_lib() -> Result<(), String> {
    match load(HAL_LIB, &[]) {
        0 => {
            let hal = hal_lib_handle().ok_or("hal_lib loaded but not kept")?;
            layout::verify(hal, shmem::size_of_key(shmem::HAL_KEY)).map_err(|e| {
                format!(
                    "LinuxCNC {}'s hal_lib ({}): {e}; rtapi refuses to run LinuxCNC's modules on \
                     a HAL it would misread (nothing was loaded into it)",
                    config().release,
                    config().module_dir.join("hal_lib.so").display()
                )
            })
        }
        rc => Err(format!(
            "LinuxCNC's hal_lib ({}) did not load ({rc}): the master cannot run without it",
            config().module_dir.join("hal_lib.so").display()
        )),
    }
}

/// Unloads every module (last loaded first), then the health component and hal_lib, ends any task
/// left, closes the rtapi instance and marks the session's segments for removal; the run's summary
/// (`None` if the instance never opened).
pub fn shut_down() -> Option<crate::runtime::Summary> {
    loop {
        let m = {
            let mut mods = lock(&STATE.modules);
            match mods.iter().rposition(|m| m.name != HAL_LIB) {
                Some(i) => mods.remove(i),
                None => break,
            }
        };
        unload_module(m);
    }
    tasks::drop_health();
    let hal = {
        let mut mods = lock(&STATE.modules);
        mods.iter()
            .position(|m| m.name == HAL_LIB)
            .map(|i| mods.remove(i))
    };
    if let Some(m) = hal {
        unload_module(m);
    }
    capi::stop_all();
    let summary = tasks::close();
    shmem::remove_session();
    summary
}

/// How the serve loop ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// An `exit` command.
    Exit,
    /// The last module went (and the master was not told to stay).
    NoModules,
    /// SIGINT/SIGTERM.
    Signal,
    /// The launcher that reads the report is gone (killed: it can no longer end the session).
    LauncherGone,
    /// As `rtapi_app`: the command it was started with failed, was `exit`, or left no module
    /// loaded, so the socket was never served (2.9's `master()`).
    Command,
}

/// What the master tells its launcher, one line each (`--report-fd`).
pub struct Reporter(Option<std::fs::File>);

impl Reporter {
    /// Reports to `file`, or nowhere.
    pub fn new(file: Option<std::fs::File>) -> Self {
        Reporter(file)
    }

    /// Whether the report has a descriptor and nobody reads it any more: the launcher died (a
    /// pipe's write end polls POLLERR once its last reader closed).
    pub fn reader_gone(&self) -> bool {
        use std::os::fd::AsFd;
        let Some(f) = &self.0 else {
            return false;
        };
        let mut fds = [nix::poll::PollFd::new(
            f.as_fd(),
            nix::poll::PollFlags::POLLOUT,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(_) => fds[0].revents().is_some_and(|r| {
                r.intersects(nix::poll::PollFlags::POLLERR | nix::poll::PollFlags::POLLHUP)
            }),
            Err(_) => false,
        }
    }

    /// One line.
    pub fn line(&mut self, text: &str) {
        if let Some(f) = &mut self.0 {
            let _ = writeln!(f, "{text}");
            let _ = f.flush();
        }
    }
}

fn handle(args: &[String], exit: &mut bool) -> i32 {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        [] => 0,
        ["exit"] => {
            *exit = true;
            0
        }
        ["load", name, rest @ ..] => load(name, &args[2..2 + rest.len()]),
        ["unload", name] => unload(name),
        ["newinst", ty, name] => newinst(ty, name, ""),
        ["newinst", ty, name, arg] => newinst(ty, name, arg),
        [cmd, ..] => {
            say(&format!(
                "rtapi: unknown command {} (the master serves load, unload, newinst, exit)",
                crate::rt::units::quote(cmd)
            ));
            -1
        }
    }
}

/// How long a connection has to send its whole request (LinuxCNC's `rtapi_app` sends it in one
/// write as soon as it connects). One that has not is closed, unanswered.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// The most connections whose requests are being read at once; one more is closed at once.
pub const MAX_CONNECTIONS: usize = 32;
/// The most connections of refused peers being answered at once, apart from the others (a
/// flood of them takes no place of the session's); one more is closed at once.
pub const MAX_REFUSED: usize = 8;
/// How long a refused peer has to send its request before it is closed unanswered.
pub const REFUSED_DEADLINE: Duration = Duration::from_secs(1);
/// How often the serve loop looks at its stop flag, its launcher and its threads' deadlines.
const TICK: Duration = Duration::from_millis(200);

/// One connection whose request is being read.
struct Pending {
    conn: UnixStream,
    peer: socket::Peer,
    buf: Vec<u8>,
    since: Instant,
    /// A peer [`socket::allowed`] refuses: its request is read only to answer it `-EACCES`
    /// (closing on it unread would break its pipe before it could read the answer).
    refused: bool,
}

impl Pending {
    /// How long it may take to send its whole request.
    fn deadline(&self) -> Duration {
        if self.refused {
            REFUSED_DEADLINE
        } else {
            REQUEST_DEADLINE
        }
    }
}

/// What reading a connection gave.
enum Read {
    /// The whole request.
    Request(Vec<String>),
    /// Not yet: wait for more.
    More,
    /// Closed, or a request refused: why.
    Gone(String),
}

impl Pending {
    /// Reads what has come (the connection is non-blocking), at most up to the request bound.
    fn read(&mut self) -> Read {
        let mut chunk = [0u8; 4096];
        loop {
            let room = (protocol::MAX_REQUEST_BYTES + 1 - self.buf.len()).min(chunk.len());
            match self.conn.read(&mut chunk[..room]) {
                Ok(0) => {
                    return Read::Gone(format!(
                        "it closed after {} byte(s), before its request was whole",
                        self.buf.len()
                    ))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Read::Gone(format!("reading its request: {e}")),
            }
            if self.buf.len() > protocol::MAX_REQUEST_BYTES {
                break;
            }
        }
        match protocol::parse_request(&self.buf) {
            Ok(protocol::Parsed::Request(a)) => Read::Request(a),
            Ok(protocol::Parsed::Incomplete) => Read::More,
            Err(e) => Read::Gone(format!("a bad request: {e}")),
        }
    }
}

/// Says something about connections at most once a second, with how many more there were
/// since: a flood of refused connections does not flood the master's standard error.
#[derive(Default)]
struct Limited {
    last: Option<Instant>,
    more: u64,
}

impl Limited {
    fn say(&mut self, text: &str) {
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            self.more += 1;
            return;
        }
        let more = std::mem::take(&mut self.more);
        self.last = Some(Instant::now());
        if more > 0 {
            say(&format!("{text} ({more} more like it not shown)"));
        } else {
            say(text);
        }
    }
}

/// One argument of a served command as a word of the launcher's report: no spaces, no line
/// breaks or other control characters (a refused module name cannot forge a report line).
fn report_word(a: &str) -> String {
    a.escape_debug().to_string().replace(' ', "_")
}

/// Serves commands on `listener` until `exit`, the last module's unload (unless `stay`), or
/// `stop()` says so. Connections are read together, none blocking another: each has
/// [`REQUEST_DEADLINE`] for its whole request of at most [`protocol::MAX_REQUEST_BYTES`], and
/// only the session's user (`session_uid`), root and the master's own uid are served
/// ([`socket::allowed`]). Commands run one at a time on this thread, as `rtapi_app`'s do. At
/// least every 200 ms (and after each command) it looks at `stop()` and the launcher, and
/// reports, once per task, the first missed deadline.
pub fn serve(
    listener: &UnixListener,
    session_uid: u32,
    stay: bool,
    report: &mut Reporter,
    stop: &dyn Fn() -> bool,
) -> End {
    let _ = listener.set_nonblocking(true);
    let mut said_late: Vec<c_int> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut refused = Limited::default();
    let mut dropped = Limited::default();
    loop {
        if stop() {
            return End::Signal;
        }
        if report.reader_gone() {
            return End::LauncherGone;
        }
        for (id, name, missed) in capi::running() {
            if missed > 0 && !said_late.contains(&id) {
                said_late.push(id);
                say(&format!(
                    "rtapi: thread {name} missed {missed} deadline(s) (late periods are skipped, not \
                     run back to back); said once per thread, counted on: `rtapi show thread \
                     --instance {}` and the pin rtapi.{name}.missed; run rtapi latency-test and fix \
                     what rtapi detect reports",
                    tasks::with(|h| h.hal().instance().to_string()).unwrap_or_default()
                ));
            }
        }
        // Everyone waiting to connect: refused at once if not the session's, or if too many.
        loop {
            match listener.accept() {
                Ok((conn, _)) => {
                    let peer = match socket::peer(&conn) {
                        Ok(p) => p,
                        Err(e) => {
                            refused.say(&format!(
                                "rtapi: refused a connection whose peer cannot be read: {e}"
                            ));
                            continue;
                        }
                    };
                    let refuse = !socket::allowed(&peer, session_uid);
                    if refuse {
                        refused.say(&format!(
                            "rtapi: refused a connection from pid {} (uid {}): only the session's \
                             user (uid {session_uid}) and root may command this master",
                            peer.pid, peer.uid
                        ));
                        if pending.iter().filter(|p| p.refused).count() >= MAX_REFUSED {
                            continue;
                        }
                    } else if pending.iter().filter(|p| !p.refused).count() >= MAX_CONNECTIONS {
                        dropped.say(&format!(
                            "rtapi: closed a connection from pid {}: {MAX_CONNECTIONS} others are \
                             still sending their requests",
                            peer.pid
                        ));
                        continue;
                    }
                    if conn.set_nonblocking(true).is_err() {
                        continue;
                    }
                    pending.push(Pending {
                        conn,
                        peer,
                        buf: Vec::new(),
                        since: Instant::now(),
                        refused: refuse,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Out of descriptors, say: the pending connections' deadlines free some.
                    dropped.say(&format!("rtapi: accept on the master's socket: {e}"));
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
            }
        }
        pending.retain(|p| {
            let late = p.since.elapsed() > p.deadline();
            if late && !p.refused {
                dropped.say(&format!(
                    "rtapi: closed a connection from pid {}: no whole request within {} s ({} \
                     byte(s) came)",
                    p.peer.pid,
                    REQUEST_DEADLINE.as_secs(),
                    p.buf.len()
                ));
            }
            !late
        });
        // Wait for a connection or a byte, until the next tick or the first deadline.
        let wait = pending
            .iter()
            .map(|p| p.deadline().saturating_sub(p.since.elapsed()))
            .fold(TICK, Duration::min)
            .max(Duration::from_millis(1));
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(pending.iter().map(|p| p.conn.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a vector of valid pollfd entries, its length given with it.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as c_int,
            )
        };
        if n <= 0 {
            continue;
        }
        // The ready connections, last first so that removing one keeps the others' places.
        for i in (0..pending.len()).rev() {
            if fds[i + 1].revents == 0 {
                continue;
            }
            let args = match pending[i].read() {
                Read::More => continue,
                Read::Gone(why) => {
                    let p = pending.swap_remove(i);
                    dropped.say(&format!(
                        "rtapi: a connection from pid {} on the master's socket: {why}",
                        p.peer.pid
                    ));
                    continue;
                }
                Read::Request(a) => a,
            };
            let mut p = pending.swap_remove(i);
            if p.refused {
                let _ = protocol::write_reply(&mut p.conn, -libc::EACCES);
                continue;
            }
            let mut exit = false;
            let rc = handle(&args, &mut exit);
            let _ = protocol::write_reply(&mut p.conn, rc);
            drop(p);
            let shown: Vec<String> = args.iter().take(2).map(|a| report_word(a)).collect();
            report.line(&format!("served {} {rc}", shown.join(" ")));
            if exit {
                return End::Exit;
            }
            if !stay && module_count() == 0 {
                return End::NoModules;
            }
            // A command may take long (a module's rtapi_app_main): the stop flag comes first.
            break;
        }
    }
}

/// The socket path LinuxCNC 2.9 uses: `$RTAPI_FIFO_PATH`, else `$HOME/.rtapi_fifo`.
pub fn socket_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("RTAPI_FIFO_PATH").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    match std::env::var_os("HOME").filter(|p| !p.is_empty()) {
        Some(h) => Ok(Path::new(&h).join(".rtapi_fifo")),
        None => Err(
            "RTAPI_FIFO_PATH and HOME are both unset: set one (LinuxCNC's rtapi_app socket \
                     is $RTAPI_FIFO_PATH, else $HOME/.rtapi_fifo)"
                .into(),
        ),
    }
}
