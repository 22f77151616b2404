//! The control socket of a running instance: halcmd lines from other processes (`rtapi halcmd`).
//!
//! The owner of an instance (`rtapi run`, `rtapi halrun`) listens on the abstract Unix socket
//! `@rtapi-control-<instance>` (no file to squat or leave behind; it vanishes with the process). Both
//! ends check who is on the other side with `SO_PEERCRED`:
//!
//! * the owner serves only root and its own user;
//! * the client believes the socket only if the process behind it is the owner recorded in the
//!   instance's segment (which the client has opened with the usual trust rules), so a process that
//!   bound the name first cannot answer for the instance.
//!
//! Protocol: one JSON object per line each way. A request is `{"line": "show pin"}` (one halcmd
//! command) or `{"script": "TEXT", "file": "/abs/file.hal", "first_line": 1, "ini": "/abs/m.ini",
//! "keep_going": false}` (lines of a file the client read, in pieces below [`MAX_REQUEST_BYTES`]:
//! `rtapi halcmd -f`) or `{"source": "/abs/file.hal", "ini": "/abs/machine.ini", "keep_going":
//! false}` (a whole file, read by the owner; only a regular file) or `{"recorder": "dump", "dir": "/abs/dir"}` (a flight-recorder dump
//! now) or `{"user_component": "panel", "pins": [{"name": "panel.button", "type": "bit", "dir":
//! "out"}], "params": [{"name": "panel.gain", "type": "float", "access": "rw"}]}` (a user-space
//! component joins the instance, tied to this connection: when the connection closes, however the
//! client ends, the owner removes it) or `{"user_exit": "panel"}` (it leaves now); the answer is `{"ok": true, "out": "…"}`, or `{"ok": false, "out": "…",
//! "error": "…"}`, with `"quit": true` when the command ends the session. Commands from all clients
//! and the owner's own prompt go through one [`Executor`] behind a mutex, one at a time, outside the
//! real-time threads: the clients' on one executor thread, fed by connection threads with small
//! stacks that only read, parse and write (at most [`MAX_CLIENTS`], lines of at most
//! [`MAX_REQUEST_BYTES`]). A stop of the server abandons a running command sequence between two
//! commands ([`Executor::abort_when`]).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::config::halcmd::{
    Departure, UserComponent, UserError, UserInbox, UserParam, UserPin, UserWhy,
};
use crate::config::ConfigError;
use rtapi_hal::{ParamAccess, PinDir, ValueType};

/// What a command asks of the session after it ran: the interpreter's own (one type from the
/// halcmd line to the socket's answer).
pub use crate::config::halcmd::Flow;

/// Why a request to an instance failed. On the wire, and so in every client, it is its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecError {
    /// A command failed where it stands (`file:line: message` when it came from a file).
    Command(ConfigError),
    /// `keep_going`: every command of the file that failed, in order.
    Commands(Vec<ConfigError>),
    /// What this instance does not do (no flight recorder, no user-space components, no client
    /// files), or a request the protocol does not know.
    Unsupported(String),
    /// The flight recorder could not write its dump.
    Recorder(crate::runtime::recorder::dump::DumpError),
    /// A user-space component was refused (a name taken, a bad pin), or the instance is stopping.
    UserComponent(UserError),
}

impl ExecError {
    /// Whether the failure is the owner stopping, not the request's fault.
    pub fn is_stopping(&self) -> bool {
        match self {
            ExecError::UserComponent(e) => e.why == UserWhy::Stopping,
            other => is_stopping(&other.to_string()),
        }
    }
}

impl From<ConfigError> for ExecError {
    fn from(e: ConfigError) -> Self {
        ExecError::Command(e)
    }
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Command(e) => write!(f, "{e}"),
            ExecError::Commands(all) => {
                for (i, e) in all.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{e}")?;
                }
                Ok(())
            }
            ExecError::Recorder(e) => write!(f, "{e}"),
            ExecError::UserComponent(e) => write!(f, "{e}"),
            ExecError::Unsupported(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ExecError {}

/// Runs halcmd commands against an instance. Implemented by the halcmd interpreter's session.
pub trait Executor: Send {
    /// One command line; its output goes to `out`. `Err` carries the message of a failed command.
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ExecError>;
    /// A whole file, with `[SECTION]KEY` taken from `ini`; `keep_going` runs past failed commands
    /// (their messages are joined in the error).
    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError>;
    /// Lines `first_line…` of the file `file` that a client read and sent (`rtapi halcmd -f`):
    /// run as that file's lines would be (`source` relative to its directory, errors at its
    /// lines), with `[SECTION]KEY` from `ini` and `keep_going` for these lines only.
    fn script(
        &mut self,
        file: &Path,
        first_line: usize,
        text: &str,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        let _ = (file, first_line, text, ini, keep_going, out);
        Err(ExecError::Unsupported(
            "this instance cannot run a client's file".into(),
        ))
    }
    /// From now on, a command sequence stops between two commands once `flag` is set (the owner is
    /// stopping), abandoning the rest with an error that says so.
    fn abort_when(&mut self, flag: Arc<AtomicBool>) {
        let _ = flag;
    }
    /// `rtapi recorder dump`: the instance's flight recorder writes a dump now (into `dir`, or its
    /// configured directory); the answer lists the files.
    fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<String, ExecError> {
        let _ = dir;
        Err(ExecError::Unsupported(NO_RECORDER.into()))
    }
    /// A user-space component joins the running instance with its pins and params.
    fn add_user_component(&mut self, component: &UserComponent) -> Result<(), ExecError> {
        Err(ExecError::Unsupported(format!(
            "user component {}: this instance cannot host user-space components",
            crate::rt::units::quote(&component.name)
        )))
    }
    /// A user-space component leaves (its pins are unlinked); `Ok(false)` if there is none.
    fn remove_user_component(&mut self, name: &str) -> Result<bool, ExecError> {
        let _ = name;
        Ok(false)
    }
    /// Where user-space components wait while the executor is busy (a `loadusr -W` waiting for
    /// one holds it); `None`: requests wait for the executor itself.
    fn user_inbox(&self) -> Option<Arc<UserInbox>> {
        None
    }
    /// Adds the components waiting in the inbox.
    fn serve_user_inbox(&mut self) {}
}

/// What an instance without a flight recorder answers `rtapi recorder dump`.
const NO_RECORDER: &str = "this instance has no flight recorder ([recorder] in the machine TOML)";

/// The shared executor of an instance.
pub type SharedExecutor = Arc<Mutex<dyn Executor>>;

/// The halcmd interpreter's session is what runs the commands of an instance.
impl Executor for super::Owned {
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ExecError> {
        Ok(super::Owned::execute(self, line, out)?)
    }

    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        self.with_file_settings(ini, keep_going, |s| super::Owned::source(s, file, out))
    }

    fn script(
        &mut self,
        file: &Path,
        first_line: usize,
        text: &str,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        self.with_file_settings(ini, keep_going, |s| {
            super::Owned::run_script(s, file, first_line, text, out)
        })
    }

    fn abort_when(&mut self, flag: Arc<AtomicBool>) {
        super::Owned::abort_when(self, flag)
    }

    fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<String, ExecError> {
        let recorder = self
            .runtime()
            .and_then(|rt| rt.recorder())
            .ok_or(ExecError::Unsupported(NO_RECORDER.into()))?;
        let files = recorder
            .dump_now(dir.map(Path::to_path_buf), Duration::from_secs(5))
            .map_err(ExecError::Recorder)?;
        Ok(files.iter().map(|f| format!("{}\n", f.display())).collect())
    }

    fn add_user_component(&mut self, component: &UserComponent) -> Result<(), ExecError> {
        super::Owned::add_user_component(self, component).map_err(ExecError::UserComponent)
    }

    fn remove_user_component(&mut self, name: &str) -> Result<bool, ExecError> {
        super::Owned::remove_user_component(self, name).map_err(ExecError::UserComponent)
    }

    fn user_inbox(&self) -> Option<Arc<UserInbox>> {
        Some(super::Owned::user_inbox(self))
    }

    fn serve_user_inbox(&mut self) {
        super::Owned::serve_user_inbox(self)
    }
}

trait FileSettings {
    fn with_file_settings(
        &mut self,
        ini: Option<&Path>,
        keep_going: bool,
        run: impl FnOnce(&mut Self) -> Result<Flow, crate::config::ConfigError>,
    ) -> Result<Flow, ExecError>;
}

impl FileSettings for super::Owned {
    /// Runs `run` with the file's own INI and -k, for this file only; a failure under -k joins
    /// every message.
    fn with_file_settings(
        &mut self,
        ini: Option<&Path>,
        keep_going: bool,
        run: impl FnOnce(&mut Self) -> Result<Flow, crate::config::ConfigError>,
    ) -> Result<Flow, ExecError> {
        use crate::config::halcmd::Ini;
        let ini = match ini {
            Some(p) => Some(Ini::load(p)?),
            None => None,
        };
        let saved = (self.take_ini(), self.keep_going);
        self.set_ini(ini);
        self.keep_going = keep_going;
        let errors_before = self.errors().len();
        let result = run(self);
        let errors: Vec<ConfigError> = self.errors()[errors_before..].to_vec();
        self.set_ini(saved.0);
        self.keep_going = saved.1;
        match result {
            Ok(flow) => Ok(flow),
            Err(_) if errors.len() > 1 => Err(ExecError::Commands(errors)),
            Err(e) => Err(ExecError::Command(e)),
        }
    }
}

/// The socket name of an instance's control socket (abstract namespace).
pub fn socket_name(instance: &str) -> String {
    format!("rtapi-control-{instance}")
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
enum Request {
    Line {
        line: String,
    },
    /// Lines of a file the client read (`rtapi halcmd -f`), in pieces below
    /// [`MAX_REQUEST_BYTES`]: `{"script": "TEXT", "file": "/abs/x.hal", "first_line": 1, "ini":
    /// "/abs/m.ini", "keep_going": false}`.
    Script {
        script: String,
        file: PathBuf,
        #[serde(default = "one")]
        first_line: usize,
        #[serde(default)]
        ini: Option<PathBuf>,
        #[serde(default)]
        keep_going: bool,
    },
    Source {
        source: PathBuf,
        #[serde(default)]
        ini: Option<PathBuf>,
        #[serde(default)]
        keep_going: bool,
    },
    /// `{"recorder": "dump", "dir": "/abs/dir"}`: the flight recorder dumps now.
    Recorder {
        recorder: String,
        #[serde(default)]
        dir: Option<PathBuf>,
    },
    /// A user-space component joins, tied to this connection.
    UserComponent {
        user_component: String,
        #[serde(default)]
        pins: Vec<WireObject>,
        #[serde(default)]
        params: Vec<WireObject>,
    },
    /// A user-space component of this connection leaves.
    UserExit {
        user_exit: String,
    },
}

fn one() -> usize {
    1
}

/// A pin (`dir`: in, out, io) or a param (`access`: ro, rw) of a user-space component on the wire.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct WireObject {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    access: Option<String>,
}

fn wire_type(o: &WireObject) -> Result<ValueType, String> {
    Ok(match o.ty.to_ascii_lowercase().as_str() {
        "bit" => ValueType::Bit,
        "float" => ValueType::Float,
        "s32" => ValueType::S32,
        "u32" => ValueType::U32,
        "s64" => ValueType::S64,
        "u64" => ValueType::U64,
        _ => {
            return Err(format!(
                "{}: type {} is not one of bit, float, s32, u32, s64, u64",
                crate::rt::units::quote(&o.name),
                crate::rt::units::quote(&o.ty)
            ))
        }
    })
}

/// The wire form of a user-space component into the session's.
fn user_component(
    name: &str,
    pins: &[WireObject],
    params: &[WireObject],
) -> Result<UserComponent, String> {
    let q = crate::rt::units::quote;
    let mut c = UserComponent {
        name: name.to_string(),
        ..UserComponent::default()
    };
    for p in pins {
        let dir = match p.dir.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("in") => PinDir::In,
            Some("out") => PinDir::Out,
            Some("io") => PinDir::Io,
            other => {
                return Err(format!(
                    "pin {}: direction {} is not one of in, out, io",
                    q(&p.name),
                    q(other.unwrap_or(""))
                ))
            }
        };
        c.pins.push(UserPin {
            name: p.name.clone(),
            ty: wire_type(p)?,
            dir,
        });
    }
    for p in params {
        let access = match p.access.as_deref().map(str::to_ascii_lowercase).as_deref() {
            Some("ro") => ParamAccess::Ro,
            Some("rw") | None => ParamAccess::Rw,
            Some(other) => {
                return Err(format!(
                    "param {}: access {} is not one of ro, rw",
                    q(&p.name),
                    q(other)
                ))
            }
        };
        c.params.push(UserParam {
            name: p.name.clone(),
            ty: wire_type(p)?,
            access,
        });
    }
    Ok(c)
}

/// The owner's answer to one request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reply {
    /// Whether the command succeeded.
    pub ok: bool,
    /// What it printed.
    #[serde(default)]
    pub out: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether it ended the session.
    #[serde(default)]
    pub quit: bool,
}

/// The longest request line the owner reads (1 MiB): a longer one is refused and its connection
/// closed, so a client cannot make the owner hold (and, under `mlockall`, lock) its memory.
/// `rtapi halcmd -f` sends a file in pieces well below it.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// How many clients may be connected at once. When full, the connection idle longest (holding no
/// user-space component) is closed with a message to make room; when none is, the newcomer is
/// refused with one. Every `loadusr`'d program with a user-space component holds one while it runs.
pub const MAX_CLIENTS: usize = 32;
/// The stack of a client's connection thread. It only reads, parses and writes: the commands run
/// on the one executor thread. Under `mlockall(MCL_FUTURE)` every stack is locked whole, so it is
/// small and explicit (the default would be 2 MiB per idle client).
const CLIENT_STACK: usize = 64 << 10;
/// How often a waiting thread looks at the stop flag.
const LOOK: Duration = Duration::from_millis(100);

/// The listening side, in the instance's owner. Dropping it stops listening; the command being run
/// for a client is told to stop between its commands ([`Executor::abort_when`]) and connections end.
pub struct ControlServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// CPUs the control threads should move to, with a version each thread compares with its own.
    affinity: Arc<Mutex<(u64, Option<Vec<usize>>)>>,
}

/// The credentials of the process at the other end of a Unix stream socket.
fn peer(stream: &UnixStream) -> io::Result<nix::libc::ucred> {
    let cred =
        nix::sys::socket::getsockopt(&stream.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
            .map_err(io::Error::from)?;
    Ok(nix::libc::ucred {
        pid: cred.pid(),
        uid: cred.uid(),
        gid: cred.gid(),
    })
}

/// Work for the executor thread: it runs with the session locked.
type Job = Box<dyn FnOnce(&mut dyn Executor) + Send>;

/// What the connection threads share.
#[derive(Clone)]
struct Shared {
    jobs: mpsc::Sender<Job>,
    inbox: Option<Arc<UserInbox>>,
    stop: Arc<AtomicBool>,
}

impl Shared {
    /// Runs `f` on the executor thread and waits for its result; `None` when the server stops
    /// first (the job may still run, and is told to stop between its commands).
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Executor) -> T + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Box::new(move |e| {
                let _ = tx.send(f(e));
            }))
            .ok()?;
        loop {
            match rx.recv_timeout(LOOK) {
                Ok(v) => return Some(v),
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) if self.stop.load(Ordering::Relaxed) => {
                    return None
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Asks the executor thread to add/remove the components waiting in the inbox (a command it
    /// is running serves them itself, between commands or while it waits).
    fn nudge(&self) {
        let _ = self.jobs.send(Box::new(|e| e.serve_user_inbox()));
    }
}

/// Applies a new affinity if its version is newer than `seen`.
fn follow_affinity(affinity: &Mutex<(u64, Option<Vec<usize>>)>, seen: &mut u64, who: &str) {
    let (version, cpus) = affinity.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if version != *seen {
        *seen = version;
        if let Some(cpus) = cpus {
            if let Err(e) = crate::rt::sched::set_current_affinity(&cpus) {
                log::warn!("cannot move the {who} thread off the RT CPUs: {e}");
            }
        }
    }
}

impl ControlServer {
    /// Listens for `instance`'s clients and serves them with `executor`. Fails when another process
    /// already holds the name (another owner of the same instance, or a squatter: either way this
    /// instance cannot be controlled from outside, which the caller reports).
    pub fn start(instance: &str, executor: SharedExecutor) -> io::Result<ControlServer> {
        let addr = SocketAddr::from_abstract_name(socket_name(instance).as_bytes())?;
        let listener = UnixListener::bind_addr(&addr)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let inbox = {
            let mut exec = executor.lock().unwrap_or_else(|p| p.into_inner());
            // A stop abandons whatever a client's command is doing, between its commands.
            exec.abort_when(Arc::clone(&stop));
            exec.user_inbox()
        };
        let affinity = Arc::new(Mutex::new((0, None)));
        let (jobs, queue) = mpsc::channel::<Job>();
        {
            let (affinity, stop) = (Arc::clone(&affinity), Arc::clone(&stop));
            // One thread runs every client's commands (default stack: commands may go deep, e.g.
            // a LinuxCNC module's init); it ends when the server and its connections are gone.
            std::thread::Builder::new()
                .name("rtapi-control-exec".into())
                .spawn(move || {
                    let mut seen = 0;
                    while let Ok(job) = queue.recv() {
                        follow_affinity(&affinity, &mut seen, "control");
                        if stop.load(Ordering::Relaxed) {
                            // Nobody waits any more: drop what is queued.
                            continue;
                        }
                        let mut exec = executor.lock().unwrap_or_else(|p| p.into_inner());
                        job(&mut *exec);
                    }
                })?;
        }
        let shared = Shared {
            jobs,
            inbox,
            stop: Arc::clone(&stop),
        };
        let moves = Arc::clone(&affinity);
        let thread = std::thread::Builder::new()
            .name("rtapi-control".into())
            .stack_size(CLIENT_STACK)
            .spawn(move || accept_loop(listener, shared, moves))?;
        Ok(ControlServer {
            stop,
            thread: Some(thread),
            affinity,
        })
    }

    /// Moves the control threads to `cpus` (within their next look, ≤ 250 ms, or next command),
    /// and so every client thread started after: for a server that listened before the instance
    /// started (halrun), once its RT CPUs are known. Empty: no change.
    pub fn keep_off_rt_cpus(&self, cpus: &[usize]) {
        if !cpus.is_empty() {
            let mut a = self.affinity.lock().unwrap_or_else(|p| p.into_inner());
            *a = (a.0 + 1, Some(cpus.to_vec()));
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The connections being served: at most [`MAX_CLIENTS`]. When full, the one idle longest that
/// holds no user-space component is closed (told why) to make room; if every one is busy or holds
/// a component, the newcomer is refused.
#[derive(Default)]
struct Connections {
    next_id: u64,
    list: Vec<Conn>,
}

struct Conn {
    id: u64,
    /// To close it from the accept loop (shutdown ends its thread's read).
    stream: UnixStream,
    /// Since when it waits for a request; `None` while one of its requests runs.
    idle_since: Option<std::time::Instant>,
    /// It declared user-space components (a `loadusr`'d program): never closed to make room.
    holds_components: bool,
}

type Registry = Arc<Mutex<Connections>>;

fn registry(r: &Registry) -> std::sync::MutexGuard<'_, Connections> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

impl Connections {
    /// Makes room for one more: `false` if it cannot.
    fn make_room(&mut self) -> bool {
        if self.list.len() < MAX_CLIENTS {
            return true;
        }
        let victim = self
            .list
            .iter()
            .filter(|c| !c.holds_components)
            .filter_map(|c| c.idle_since.map(|t| (t, c.id)))
            .min()
            .map(|(_, id)| id);
        let Some(id) = victim else { return false };
        let i = self.list.iter().position(|c| c.id == id).expect("listed");
        let conn = self.list.remove(i);
        let _ = refuse(
            conn.stream,
            &format!(
                "closed: {MAX_CLIENTS} clients were connected to this instance, the most it \
                 serves at once, and this connection was the one idle longest"
            ),
        );
        true
    }

    fn update(&mut self, id: u64, f: impl FnOnce(&mut Conn)) {
        if let Some(c) = self.list.iter_mut().find(|c| c.id == id) {
            f(c);
        }
    }
}

/// A connection's place in the registry while its thread lives.
struct Slot {
    id: u64,
    registry: Registry,
}

impl Slot {
    fn set(&self, f: impl FnOnce(&mut Conn)) {
        registry(&self.registry).update(self.id, f);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        registry(&self.registry).list.retain(|c| c.id != self.id);
    }
}

fn accept_loop(
    listener: UnixListener,
    shared: Shared,
    affinity: Arc<Mutex<(u64, Option<Vec<usize>>)>>,
) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { nix::libc::geteuid() };
    let clients: Registry = Arc::default();
    let mut seen = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        follow_affinity(&affinity, &mut seen, "control");
        match listener.accept() {
            Ok((stream, _)) => {
                let allowed = peer(&stream).is_ok_and(|c| c.uid == 0 || c.uid == me);
                if !allowed {
                    let _ = refuse(
                        stream,
                        "refused: this instance takes commands only from root and the user that \
                         runs it",
                    );
                    continue;
                }
                let slot = {
                    let mut r = registry(&clients);
                    let (Ok(closer), true) = (stream.try_clone(), r.make_room()) else {
                        drop(r);
                        let _ = refuse(
                            stream,
                            &format!(
                                "refused: {MAX_CLIENTS} clients are connected to this instance, \
                                 the most it serves at once, and none is idle; close one and try \
                                 again"
                            ),
                        );
                        continue;
                    };
                    r.next_id += 1;
                    let id = r.next_id;
                    r.list.push(Conn {
                        id,
                        stream: closer,
                        idle_since: Some(std::time::Instant::now()),
                        holds_components: false,
                    });
                    Slot {
                        id,
                        registry: Arc::clone(&clients),
                    }
                };
                let shared = shared.clone();
                let spawned = std::thread::Builder::new()
                    .name("rtapi-control-client".into())
                    .stack_size(CLIENT_STACK)
                    .spawn(move || serve(stream, shared, slot));
                if let Err(e) = spawned {
                    log::warn!("cannot serve a control client: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Asleep in the kernel until a client comes (or a look at the stop flag is due).
                let mut fds = [nix::poll::PollFd::new(
                    listener.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(250u16));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Answers `why` and hangs up. The answer is sent without waiting (`MSG_DONTWAIT`): a client that
/// reads nothing cannot hold the accept loop. The shutdown also ends the read of the thread that
/// serves it, if one does.
fn refuse(stream: UnixStream, why: &str) -> io::Result<()> {
    let reply = Reply {
        ok: false,
        out: String::new(),
        error: Some(why.to_string()),
        quit: true,
    };
    let text = format!("{}\n", serde_json::to_string(&reply).unwrap_or_default());
    let sent = nix::sys::socket::send(
        std::os::fd::AsRawFd::as_raw_fd(&stream),
        text.as_bytes(),
        nix::sys::socket::MsgFlags::MSG_DONTWAIT | nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
    );
    let _ = stream.shutdown(std::net::Shutdown::Both);
    sent.map(|_| ()).map_err(io::Error::from)
}

/// The user-space components a connection declared: removed when it ends, however it ends (the
/// client exits, crashes or is killed: the kernel closes its socket and our read sees the end).
struct Owned {
    names: Vec<String>,
    shared: Shared,
}

impl Drop for Owned {
    fn drop(&mut self) {
        for name in std::mem::take(&mut self.names) {
            if let Err(e) = leave(&name, Departure::Disconnected, &self.shared) {
                log::warn!("removing user component {name}: {e}");
            }
        }
    }
}

/// One request line, at most [`MAX_REQUEST_BYTES`]: `Ok(None)` at the end of the connection,
/// `Err` for a line too long (or a read error). Looks at the stop flag between reads.
fn read_request(
    reader: &mut BufReader<UnixStream>,
    buf: &mut Vec<u8>,
    stop: &AtomicBool,
) -> Result<Option<()>, Option<String>> {
    buf.clear();
    while !stop.load(Ordering::Relaxed) {
        let room = (MAX_REQUEST_BYTES + 1).saturating_sub(buf.len()) as u64;
        match (&mut *reader).take(room).read_until(b'\n', buf) {
            Ok(0) if buf.is_empty() => return Ok(None),
            Ok(0) => return Ok(None), // a last line without its newline: dropped
            Ok(_) if buf.ends_with(b"\n") => return Ok(Some(())),
            Ok(_) if buf.len() > MAX_REQUEST_BYTES => {
                return Err(Some(format!(
                    "refused: a request longer than {} MiB; send a file with `rtapi halcmd -f \
                     FILE` (it goes in pieces), not as one line",
                    MAX_REQUEST_BYTES >> 20
                )))
            }
            Ok(_) => {} // a timeout cut the line: read the rest
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return Err(None),
        }
    }
    Ok(None)
}

/// One client: requests in, replies out, until it hangs up, quits, or the server stops.
fn serve(stream: UnixStream, shared: Shared, slot: Slot) {
    let mut owned = Owned {
        names: Vec::new(),
        shared: shared.clone(),
    };
    // The client's process: a user-space component it declares belongs to it (waitusr, unloadusr).
    let pid = peer(&stream).ok().map(|c| c.pid as u32);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    // A client that stops reading cannot hold this thread for long either.
    let _ = stream.set_write_timeout(Some(Duration::from_secs(10)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        match read_request(&mut reader, &mut line, &shared.stop) {
            Ok(Some(())) => {}
            Ok(None) | Err(None) => return,
            Err(Some(why)) => {
                // Not worth keeping what it sent.
                line = Vec::new();
                let reply = Reply {
                    ok: false,
                    out: String::new(),
                    error: Some(why),
                    quit: true,
                };
                let _ = writeln!(
                    writer,
                    "{}",
                    serde_json::to_string(&reply).unwrap_or_default()
                );
                drop(line);
                return;
            }
        }
        slot.set(|c| c.idle_since = None);
        let text = String::from_utf8_lossy(&line);
        let answered = answer(text.trim_end(), &shared, (&mut owned.names, pid));
        let holds = !owned.names.is_empty();
        slot.set(|c| {
            c.idle_since = Some(std::time::Instant::now());
            c.holds_components = holds;
        });
        let Some(reply) = answered else {
            // The instance is stopping.
            let reply = Reply {
                ok: false,
                out: String::new(),
                error: Some("the instance is stopping; the request was not run".into()),
                quit: true,
            };
            let _ = writeln!(
                writer,
                "{}",
                serde_json::to_string(&reply).unwrap_or_default()
            );
            return;
        };
        // A big request's buffer goes back; a small one is reused.
        if line.capacity() > 64 << 10 {
            line = Vec::new();
        }
        let quit = reply.quit;
        let text = serde_json::to_string(&reply).unwrap_or_default();
        if writeln!(writer, "{text}").is_err() || quit {
            return;
        }
    }
}

/// Adds a user-space component through the inbox when there is one: the session's holder may be
/// busy for a while (a `loadusr -W` waiting for this very component), so the request waits there
/// and whoever runs commands adds it between them.
fn join(c: UserComponent, shared: &Shared) -> Result<(), ExecError> {
    let name = c.name.clone();
    let stopping = || ExecError::UserComponent(UserError::new(&name, UserWhy::Stopping));
    let Some(inbox) = shared.inbox.as_deref() else {
        return shared
            .run(move |e| e.add_user_component(&c))
            .unwrap_or_else(|| Err(stopping()));
    };
    let answer = inbox.post(c);
    shared.nudge();
    loop {
        match answer.recv_timeout(LOOK) {
            Ok(r) => return r.map_err(ExecError::UserComponent),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(ExecError::UserComponent(UserError::new(
                    &name,
                    UserWhy::Dropped,
                )))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if shared.stop.load(Ordering::Relaxed) && inbox.withdraw(&name) {
            return Err(stopping());
        }
    }
}

/// Removes a user-space component through the inbox when there is one (the session's holder may be
/// a `waitusr` waiting for exactly this); whether it was there.
fn leave(name: &str, how: Departure, shared: &Shared) -> Result<bool, ExecError> {
    let Some(inbox) = shared.inbox.as_deref() else {
        let name = name.to_string();
        return shared
            .run(move |e| e.remove_user_component(&name))
            .unwrap_or(Ok(false));
    };
    let answer = inbox.post_leave(name, how);
    shared.nudge();
    loop {
        match answer.recv_timeout(LOOK) {
            Ok(r) => return r.map_err(ExecError::UserComponent),
            Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(false),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        // A stopping instance deletes everything itself.
        if shared.stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
    }
}

fn reply_of(result: Result<(), ExecError>) -> Reply {
    Reply {
        ok: result.is_ok(),
        out: String::new(),
        error: result.err().map(|e| e.to_string()),
        quit: false,
    }
}

/// The answer to one request; `None` when the instance stops before it is answered.
fn answer(
    request: &str,
    shared: &Shared,
    (owned, pid): (&mut Vec<String>, Option<u32>),
) -> Option<Reply> {
    let request: Request = match serde_json::from_str(request) {
        Ok(r) => r,
        Err(e) => {
            return Some(Reply {
                ok: false,
                out: String::new(),
                error: Some(format!(
                    "bad request ({e}); expected {{\"line\": \"COMMAND\"}}"
                )),
                quit: false,
            })
        }
    };
    match request {
        Request::UserComponent {
            user_component: name,
            pins,
            params,
        } => {
            let result = user_component(&name, &pins, &params)
                .map_err(|e| {
                    ExecError::UserComponent(UserError::new(&name, UserWhy::Declaration(e)))
                })
                .and_then(|mut c| {
                    c.pid = pid;
                    join(c, shared)
                });
            if result.is_ok() {
                owned.push(name);
            }
            Some(reply_of(result))
        }
        Request::UserExit { user_exit: name } => {
            let result = if owned.contains(&name) {
                owned.retain(|n| n != &name);
                leave(&name, Departure::Exit, shared).map(|_| ())
            } else {
                Err(ExecError::UserComponent(UserError::new(
                    &name,
                    UserWhy::NotDeclaredHere,
                )))
            };
            Some(reply_of(result))
        }
        request => {
            // A piece of a file that a stop keeps from running: the client is told where it ended.
            let at = match &request {
                Request::Script {
                    file, first_line, ..
                } => Some(format!("{}:{first_line}: ", file.display())),
                _ => None,
            };
            shared
                .run(move |exec| run_request(exec, request))
                .or_else(|| {
                    at.map(|at| Reply {
                        ok: false,
                        out: String::new(),
                        error: Some(format!("{at}{}", crate::config::halcmd::STOPPING)),
                        quit: true,
                    })
                })
        }
    }
}

/// A request that runs commands, on the executor thread. Every file the owner opens for it must be
/// a regular file ([`crate::config::RegularOnly`]): a FIFO or a device could block it forever.
fn run_request(exec: &mut dyn Executor, request: Request) -> Reply {
    let _regular = crate::config::RegularOnly::new();
    let mut out = Vec::new();
    let result = match &request {
        Request::Line { line } => exec.execute(line, &mut out),
        Request::Source {
            source,
            ini,
            keep_going,
        } => exec.source(source, ini.as_deref(), *keep_going, &mut out),
        Request::Script {
            script,
            file,
            first_line,
            ini,
            keep_going,
        } => exec.script(
            file,
            *first_line,
            script,
            ini.as_deref(),
            *keep_going,
            &mut out,
        ),
        Request::Recorder { recorder, dir } if recorder == "dump" => {
            exec.recorder_dump(dir.as_deref()).map(|files| {
                out.extend_from_slice(files.as_bytes());
                Flow::Continue
            })
        }
        Request::Recorder { recorder, .. } => Err(ExecError::Unsupported(format!(
            "unknown recorder request {}; the recorder understands \"dump\"",
            crate::rt::units::quote(recorder)
        ))),
        Request::UserComponent { .. } | Request::UserExit { .. } => {
            unreachable!("answered by the connection")
        }
    };
    let out = String::from_utf8_lossy(&out).into_owned();
    match result {
        Ok(flow) => Reply {
            ok: true,
            out,
            error: None,
            quit: flow == Flow::Quit,
        },
        Err(error) => Reply {
            ok: false,
            out,
            error: Some(error.to_string()),
            quit: false,
        },
    }
}

/// A connection to an instance's owner.
pub struct ControlClient {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
}

/// Why a client could not talk to an instance.
#[derive(Debug)]
pub enum ClientError {
    /// Nothing listens: the owner is not running, or it is an owner without a control socket.
    NotListening(io::Error),
    /// Something else holds the name: not the instance's owner.
    Impostor {
        /// The process behind the socket.
        pid: i32,
        /// The owner the segment names.
        owner: u32,
    },
    /// The connection failed while talking.
    Io(io::Error),
    /// The owner refused us, or answered nonsense.
    Refused(String),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NotListening(e) => write!(f, "the instance takes no commands ({e})"),
            ClientError::Impostor { pid, owner } => write!(
                f,
                "refused: the control socket is held by pid {pid}, not by the instance's owner (pid \
                 {owner}); do not trust that process"
            ),
            ClientError::Io(e) => write!(
                f,
                "lost the connection to the instance: {e}; if its owner ended, `rtapi show` \
                 says so (and lists the instances that run)"
            ),
            ClientError::Refused(m) => write!(f, "{m}"),
        }
    }
}

impl ControlClient {
    /// Connects to `instance`'s control socket and checks that the process behind it is `owner_pid`
    /// (the pid in the instance's trusted segment).
    pub fn connect(instance: &str, owner_pid: u32) -> Result<ControlClient, ClientError> {
        let addr = SocketAddr::from_abstract_name(socket_name(instance).as_bytes())
            .map_err(ClientError::NotListening)?;
        let stream = UnixStream::connect_addr(&addr).map_err(ClientError::NotListening)?;
        let cred = peer(&stream).map_err(ClientError::Io)?;
        if u32::try_from(cred.pid).ok() != Some(owner_pid) {
            return Err(ClientError::Impostor {
                pid: cred.pid,
                owner: owner_pid,
            });
        }
        let reader = BufReader::new(stream.try_clone().map_err(ClientError::Io)?);
        Ok(ControlClient {
            writer: stream,
            reader,
        })
    }

    fn request(&mut self, request: &Request) -> Result<Reply, ClientError> {
        let text =
            serde_json::to_string(request).map_err(|e| ClientError::Refused(e.to_string()))?;
        writeln!(self.writer, "{text}").map_err(ClientError::Io)?;
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).map_err(ClientError::Io)?;
        if n == 0 {
            return Err(ClientError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the instance closed the connection (it stopped?)",
            )));
        }
        let reply: Reply = serde_json::from_str(line.trim_end()).map_err(|e| {
            ClientError::Refused(format!("unreadable answer from the instance: {e}"))
        })?;
        Ok(reply)
    }

    /// Runs one command line in the instance.
    pub fn execute(&mut self, line: &str) -> Result<Reply, ClientError> {
        self.request(&Request::Line { line: line.into() })
    }

    /// Asks the instance's flight recorder for a dump now (into `dir`, absolute, or its own directory).
    pub fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<Reply, ClientError> {
        self.request(&Request::Recorder {
            recorder: "dump".into(),
            dir: dir.map(Path::to_path_buf),
        })
    }

    /// Declares a user-space component with its pins and params; it stays in the instance while
    /// this connection is open (or until [`user_exit`](Self::user_exit)).
    pub fn user_component(&mut self, component: &UserComponent) -> Result<Reply, ClientError> {
        let pins = component
            .pins
            .iter()
            .map(|p| WireObject {
                name: p.name.clone(),
                ty: p.ty.as_str().to_string(),
                dir: Some(
                    match p.dir {
                        PinDir::In => "in",
                        PinDir::Out => "out",
                        PinDir::Io => "io",
                    }
                    .to_string(),
                ),
                access: None,
            })
            .collect();
        let params = component
            .params
            .iter()
            .map(|p| WireObject {
                name: p.name.clone(),
                ty: p.ty.as_str().to_string(),
                dir: None,
                access: Some(
                    match p.access {
                        ParamAccess::Ro => "ro",
                        ParamAccess::Rw => "rw",
                    }
                    .to_string(),
                ),
            })
            .collect();
        self.request(&Request::UserComponent {
            user_component: component.name.clone(),
            pins,
            params,
        })
    }

    /// Removes a user-space component this connection declared.
    pub fn user_exit(&mut self, name: &str) -> Result<Reply, ClientError> {
        self.request(&Request::UserExit {
            user_exit: name.to_string(),
        })
    }

    /// Runs lines `first_line…` of `file`, read here, in the instance (the owner opens nothing but
    /// the INI, which must be a regular file); see [`send_file`].
    pub fn script(
        &mut self,
        file: &Path,
        first_line: usize,
        text: &str,
        ini: Option<&Path>,
        keep_going: bool,
    ) -> Result<Reply, ClientError> {
        self.request(&Request::Script {
            script: text.to_string(),
            file: file.to_path_buf(),
            first_line,
            ini: ini.map(Path::to_path_buf),
            keep_going,
        })
    }

    /// Runs a whole file in the instance (the owner reads it; it must be a regular file).
    pub fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
    ) -> Result<Reply, ClientError> {
        self.request(&Request::Source {
            source: file.to_path_buf(),
            ini: ini.map(Path::to_path_buf),
            keep_going,
        })
    }
}

/// The most text one [`ControlClient::script`] request carries (whole lines; a longer line goes
/// alone): with JSON's escapes it stays below [`MAX_REQUEST_BYTES`].
pub const SCRIPT_PIECE: usize = 128 << 10;

/// What [`send_file`] did.
#[derive(Debug, Default)]
pub struct Sent {
    /// Replies that failed (with `keep_going`, every failed piece; else the first ends it).
    pub failed: usize,
    /// The file asked to end the session (`quit`).
    pub quit: bool,
}

/// Reads halcmd lines from `input` (a file, a pipe, standard input: this process reads it, with
/// its own permissions) and runs them in the instance in pieces of at most [`SCRIPT_PIECE`],
/// `shown` naming the file in messages and `source` resolving against its directory. A piece is
/// sent when it is full or, from a pipe, when nothing more has come yet (so a slow writer's
/// commands run as they come). Each reply goes to `on_reply`. Without `keep_going` the first
/// failure ends it, as a stop of the instance does.
pub fn send_file(
    client: &mut ControlClient,
    input: &mut dyn Read,
    shown: &Path,
    ini: Option<&Path>,
    keep_going: bool,
    on_reply: &mut dyn FnMut(&Reply),
) -> Result<Sent, ClientError> {
    let mut reader = BufReader::with_capacity(SCRIPT_PIECE, input);
    let mut sent = Sent::default();
    let mut piece = String::new();
    let (mut first, mut next) = (1usize, 1usize);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        let n = reader
            .read_until(b'\n', &mut raw)
            .map_err(ClientError::Io)?;
        if n > 0 {
            let line = std::str::from_utf8(&raw).map_err(|e| {
                ClientError::Refused(format!(
                    "{}:{next}: not UTF-8 (byte {} of the line); save the file as UTF-8",
                    shown.display(),
                    e.valid_up_to() + 1
                ))
            })?;
            piece.push_str(line);
            if !line.ends_with('\n') {
                piece.push('\n');
            }
            next += 1;
        }
        let continued = piece.trim_end().ends_with('\\');
        let full = piece.len() >= SCRIPT_PIECE;
        let waiting = reader.buffer().is_empty();
        if !piece.is_empty() && (n == 0 || (!continued && (full || waiting))) {
            let reply = client.script(shown, first, &piece, ini, keep_going)?;
            on_reply(&reply);
            piece.clear();
            first = next;
            if !reply.ok {
                sent.failed += reply
                    .error
                    .as_deref()
                    .map_or(1, |e| e.lines().count().max(1));
                if !keep_going || reply.error.as_deref().is_some_and(is_stopping) {
                    return Ok(sent);
                }
            }
            if reply.quit {
                sent.quit = true;
                return Ok(sent);
            }
        }
        if n == 0 {
            return Ok(sent);
        }
    }
}

/// Whether an error says the instance is stopping.
pub fn is_stopping(error: &str) -> bool {
    error.contains(crate::config::halcmd::STOPPING) || error.contains("the instance is stopping")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it was asked; `fail` fails, `quit` quits, anything else echoes.
    struct Echo {
        seen: Vec<String>,
    }

    /// Hosts user-space components in a list.
    struct Users {
        present: Vec<String>,
    }

    impl Executor for Users {
        fn execute(&mut self, _: &str, _: &mut dyn Write) -> Result<Flow, ExecError> {
            Ok(Flow::Continue)
        }
        fn source(
            &mut self,
            _: &Path,
            _: Option<&Path>,
            _: bool,
            _: &mut dyn Write,
        ) -> Result<Flow, ExecError> {
            Ok(Flow::Continue)
        }
        fn add_user_component(&mut self, c: &UserComponent) -> Result<(), ExecError> {
            if self.present.contains(&c.name) {
                return Err(ExecError::UserComponent(UserError::new(
                    &c.name,
                    UserWhy::Taken,
                )));
            }
            self.present.push(c.name.clone());
            Ok(())
        }
        fn remove_user_component(&mut self, name: &str) -> Result<bool, ExecError> {
            let had = self.present.iter().any(|n| n == name);
            self.present.retain(|n| n != name);
            Ok(had)
        }
    }

    #[test]
    fn a_user_component_lives_as_long_as_its_connection() {
        let name = unique("users");
        let exec = Arc::new(Mutex::new(Users {
            present: Vec::new(),
        }));
        let _server = ControlServer::start(&name, exec.clone()).unwrap();
        let me = std::process::id();
        let decl = |n: &str| UserComponent {
            name: n.into(),
            pins: vec![UserPin {
                name: format!("{n}.out"),
                ty: ValueType::Float,
                dir: PinDir::Out,
            }],
            params: vec![UserParam {
                name: format!("{n}.gain"),
                ty: ValueType::S32,
                access: ParamAccess::Ro,
            }],
            pid: None,
        };
        let mut a = ControlClient::connect(&name, me).unwrap();
        let mut b = ControlClient::connect(&name, me).unwrap();
        assert!(a.user_component(&decl("one")).unwrap().ok);
        assert!(a.user_component(&decl("two")).unwrap().ok);
        assert!(!b.user_component(&decl("one")).unwrap().ok, "taken");
        // b cannot remove a's component; a can.
        assert!(!b.user_exit("one").unwrap().ok);
        assert!(a.user_exit("one").unwrap().ok);
        assert_eq!(exec.lock().unwrap().present, ["two"]);
        // A bad declaration is refused before it reaches the executor.
        let mut bad = decl("three");
        bad.pins[0].name = "three.x".into();
        let r = b
            .request(&Request::UserComponent {
                user_component: "three".into(),
                pins: vec![WireObject {
                    name: "three.x".into(),
                    ty: "complex".into(),
                    dir: Some("out".into()),
                    access: None,
                }],
                params: vec![],
            })
            .unwrap();
        assert!(r.error.unwrap().contains("'complex' is not one of"));
        // The connection closes: what it declared goes.
        drop(a);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !exec.lock().unwrap().present.is_empty() {
            assert!(std::time::Instant::now() < until, "two was not removed");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(b.user_component(&bad).unwrap().ok);
    }

    impl Executor for Echo {
        fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ExecError> {
            self.seen.push(line.to_string());
            match line {
                "fail" => Err(ExecError::Unsupported("it failed".into())),
                "quit" => Ok(Flow::Quit),
                _ => {
                    writeln!(out, "did {line}").unwrap();
                    Ok(Flow::Continue)
                }
            }
        }
        fn source(
            &mut self,
            file: &Path,
            ini: Option<&Path>,
            keep_going: bool,
            out: &mut dyn Write,
        ) -> Result<Flow, ExecError> {
            write!(out, "{} {:?} {keep_going}", file.display(), ini).unwrap();
            Ok(Flow::Continue)
        }
    }

    fn unique(tag: &str) -> String {
        format!("ctl-{tag}-{}", std::process::id())
    }

    #[test]
    fn commands_go_through_one_executor_and_answers_come_back() {
        let name = unique("echo");
        let exec = Arc::new(Mutex::new(Echo { seen: Vec::new() }));
        let server = ControlServer::start(&name, exec.clone()).unwrap();
        let me = std::process::id();
        let mut a = ControlClient::connect(&name, me).unwrap();
        let mut b = ControlClient::connect(&name, me).unwrap();
        let r = a.execute("show pin").unwrap();
        assert!(r.ok && r.out == "did show pin\n" && !r.quit, "{r:?}");
        let r = b.execute("fail").unwrap();
        assert!(!r.ok && r.error.as_deref() == Some("it failed"), "{r:?}");
        let r = b
            .source(Path::new("/x/y.hal"), Some(Path::new("/x/m.ini")), true)
            .unwrap();
        assert_eq!(r.out, "/x/y.hal Some(\"/x/m.ini\") true");
        let r = a.execute("quit").unwrap();
        assert!(r.ok && r.quit);
        // The server hung up on a, b still works.
        assert!(a.execute("show").is_err());
        assert!(b.execute("list pin").unwrap().ok);
        assert_eq!(
            exec.lock().unwrap().seen,
            ["show pin", "fail", "quit", "list pin"]
        );
        drop(server);
        assert!(matches!(
            ControlClient::connect(&name, me),
            Err(ClientError::NotListening(_))
        ));
    }

    #[test]
    fn a_socket_not_held_by_the_owner_is_refused() {
        let name = unique("impostor");
        let exec = Arc::new(Mutex::new(Echo { seen: Vec::new() }));
        let _server = ControlServer::start(&name, exec.clone()).unwrap();
        // The segment says the owner is pid 1: we (the server) are an impostor.
        match ControlClient::connect(&name, 1) {
            Err(ClientError::Impostor { pid, owner: 1 }) => {
                assert_eq!(pid as u32, std::process::id())
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert!(exec.lock().unwrap().seen.is_empty());
        // A second owner of the same name cannot listen.
        assert!(ControlServer::start(&name, exec).is_err());
    }

    #[test]
    fn garbage_gets_an_error_not_a_hang() {
        let name = unique("garbage");
        let exec = Arc::new(Mutex::new(Echo { seen: Vec::new() }));
        let _server = ControlServer::start(&name, exec).unwrap();
        let addr = SocketAddr::from_abstract_name(socket_name(&name).as_bytes()).unwrap();
        let mut s = UnixStream::connect_addr(&addr).unwrap();
        writeln!(s, "show pin").unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        let r: Reply = serde_json::from_str(&line).unwrap();
        assert!(!r.ok && r.error.unwrap().contains("bad request"));
    }
}
