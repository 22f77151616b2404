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
//! command) or `{"source": "/abs/file.hal", "ini": "/abs/machine.ini", "keep_going": false}` (a whole
//! file, read by the owner) or `{"recorder": "dump", "dir": "/abs/dir"}` (a flight-recorder dump
//! now) or `{"user_component": "panel", "pins": [{"name": "panel.button", "type": "bit", "dir":
//! "out"}], "params": [{"name": "panel.gain", "type": "float", "access": "rw"}]}` (a user-space
//! component joins the instance, tied to this connection: when the connection closes, however the
//! client ends, the owner removes it) or `{"user_exit": "panel"}` (it leaves now); the answer is `{"ok": true, "out": "…"}`, or `{"ok": false, "out": "…",
//! "error": "…"}`, with `"quit": true` when the command ends the session. Commands from all clients
//! and the owner's own prompt go through one [`Executor`] behind a mutex, one at a time, outside the
//! real-time threads.

use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::config::halcmd::{UserComponent, UserInbox, UserParam, UserPin};
use rtapi_hal::{ParamAccess, PinDir, ValueType};

/// What a command asks of the session after it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Go on reading commands.
    Continue,
    /// `quit`/`exit`: end this session (a client's connection, or the prompt).
    Quit,
}

/// Runs halcmd commands against an instance. Implemented by the halcmd interpreter's session.
pub trait Executor: Send {
    /// One command line; its output goes to `out`. `Err` carries the message of a failed command.
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, String>;
    /// A whole file, with `[SECTION]KEY` taken from `ini`; `keep_going` runs past failed commands
    /// (their messages are joined in the error).
    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, String>;
    /// `rtapi recorder dump`: the instance's flight recorder writes a dump now (into `dir`, or its
    /// configured directory); the answer lists the files.
    fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<String, String> {
        let _ = dir;
        Err("this instance has no flight recorder ([recorder] in the machine TOML)".into())
    }
    /// A user-space component joins the running instance with its pins and params.
    fn add_user_component(&mut self, component: &UserComponent) -> Result<(), String> {
        Err(format!(
            "user component {}: this instance cannot host user-space components",
            crate::rt::units::quote(&component.name)
        ))
    }
    /// A user-space component leaves (its pins are unlinked); `Ok(false)` if there is none.
    fn remove_user_component(&mut self, name: &str) -> Result<bool, String> {
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

/// The shared executor of an instance.
pub type SharedExecutor = Arc<Mutex<dyn Executor>>;

/// The halcmd interpreter's session is what runs the commands of an instance.
impl Executor for crate::config::halcmd::Session {
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, String> {
        use crate::config::halcmd::Flow as F;
        match crate::config::halcmd::Session::execute(self, line, out) {
            Ok(F::Quit) => Ok(Flow::Quit),
            Ok(F::Continue) => Ok(Flow::Continue),
            Err(e) => Err(e.to_string()),
        }
    }

    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, String> {
        use crate::config::halcmd::{Flow as F, Ini};
        let ini = match ini {
            Some(p) => Some(Ini::load(p).map_err(|e| e.to_string())?),
            None => None,
        };
        // The file's own INI and -k, for this file only.
        let saved = (self.take_ini(), self.keep_going);
        self.set_ini(ini);
        self.keep_going = keep_going;
        let errors_before = self.errors().len();
        let result = crate::config::halcmd::Session::source(self, file, out);
        let errors: Vec<String> = self.errors()[errors_before..]
            .iter()
            .map(|e| e.to_string())
            .collect();
        self.set_ini(saved.0);
        self.keep_going = saved.1;
        match result {
            Ok(F::Quit) => Ok(Flow::Quit),
            Ok(F::Continue) => Ok(Flow::Continue),
            Err(_) if errors.len() > 1 => Err(errors.join("\n")),
            Err(e) => Err(e.to_string()),
        }
    }

    fn recorder_dump(&mut self, dir: Option<&Path>) -> Result<String, String> {
        let recorder = self
            .runtime()
            .and_then(|rt| rt.recorder())
            .ok_or("this instance has no flight recorder ([recorder] in the machine TOML)")?;
        let files = recorder.dump_now(dir.map(Path::to_path_buf), Duration::from_secs(5))?;
        Ok(files.iter().map(|f| format!("{}\n", f.display())).collect())
    }

    fn add_user_component(&mut self, component: &UserComponent) -> Result<(), String> {
        crate::config::halcmd::Session::add_user_component(self, component)
    }

    fn remove_user_component(&mut self, name: &str) -> Result<bool, String> {
        crate::config::halcmd::Session::remove_user_component(self, name)
    }

    fn user_inbox(&self) -> Option<Arc<UserInbox>> {
        Some(crate::config::halcmd::Session::user_inbox(self))
    }

    fn serve_user_inbox(&mut self) {
        crate::config::halcmd::Session::serve_user_inbox(self)
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

/// The listening side, in the instance's owner. Dropping it stops listening; connections being served
/// end after their current command.
pub struct ControlServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// CPUs the listening thread (and so the client threads it starts) should move to.
    affinity: Arc<Mutex<Option<Vec<usize>>>>,
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

impl ControlServer {
    /// Listens for `instance`'s clients and serves them with `executor`. Fails when another process
    /// already holds the name (another owner of the same instance, or a squatter: either way this
    /// instance cannot be controlled from outside, which the caller reports).
    pub fn start(instance: &str, executor: SharedExecutor) -> io::Result<ControlServer> {
        let addr = SocketAddr::from_abstract_name(socket_name(instance).as_bytes())?;
        let listener = UnixListener::bind_addr(&addr)?;
        listener.set_nonblocking(true)?;
        let inbox = executor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .user_inbox();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let affinity = Arc::new(Mutex::new(None));
        let moves = Arc::clone(&affinity);
        let thread = std::thread::Builder::new()
            .name("rtapi-control".into())
            .spawn(move || accept_loop(listener, executor, inbox, stop_flag, moves))?;
        Ok(ControlServer {
            stop,
            thread: Some(thread),
            affinity,
        })
    }

    /// Moves the listening thread to `cpus` (within its next look at the stop flag, ≤ 250 ms), and
    /// so every client thread started after: for a server that listened before the instance
    /// started (halrun), once its RT CPUs are known. Empty: no change.
    pub fn keep_off_rt_cpus(&self, cpus: &[usize]) {
        if !cpus.is_empty() {
            *self.affinity.lock().unwrap_or_else(|p| p.into_inner()) = Some(cpus.to_vec());
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

fn accept_loop(
    listener: UnixListener,
    executor: SharedExecutor,
    inbox: Option<Arc<UserInbox>>,
    stop: Arc<AtomicBool>,
    affinity: Arc<Mutex<Option<Vec<usize>>>>,
) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { nix::libc::geteuid() };
    while !stop.load(Ordering::Relaxed) {
        let moved = affinity.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(cpus) = moved {
            if let Err(e) = crate::rt::sched::set_current_affinity(&cpus) {
                log::warn!("cannot move the control thread off the RT CPUs: {e}");
            }
        }
        match listener.accept() {
            Ok((stream, _)) => {
                let allowed = peer(&stream).is_ok_and(|c| c.uid == 0 || c.uid == me);
                if !allowed {
                    let _ = refuse(stream);
                    continue;
                }
                let (executor, stop) = (Arc::clone(&executor), Arc::clone(&stop));
                let inbox = inbox.clone();
                let _ = std::thread::Builder::new()
                    .name("rtapi-control-client".into())
                    .spawn(move || serve(stream, executor, inbox, stop));
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

fn refuse(mut stream: UnixStream) -> io::Result<()> {
    let reply = Reply {
        ok: false,
        out: String::new(),
        error: Some(
            "refused: this instance takes commands only from root and the user that runs it".into(),
        ),
        quit: true,
    };
    writeln!(
        stream,
        "{}",
        serde_json::to_string(&reply).unwrap_or_default()
    )
}

/// The user-space components a connection declared: removed when it ends, however it ends (the
/// client exits, crashes or is killed: the kernel closes its socket and our read sees the end).
struct Owned {
    names: Vec<String>,
    executor: SharedExecutor,
    inbox: Option<Arc<UserInbox>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        for name in std::mem::take(&mut self.names) {
            if let Err(e) = leave(&name, &self.executor, self.inbox.as_deref(), &self.stop) {
                log::warn!("removing user component {name}: {e}");
            }
        }
    }
}

/// One client: requests in, replies out, until it hangs up, quits, or the server stops.
fn serve(
    stream: UnixStream,
    executor: SharedExecutor,
    inbox: Option<Arc<UserInbox>>,
    stop: Arc<AtomicBool>,
) {
    let mut owned = Owned {
        names: Vec::new(),
        executor: Arc::clone(&executor),
        inbox: inbox.clone(),
        stop: Arc::clone(&stop),
    };
    // The client's process: a user-space component it declares belongs to it (waitusr, unloadusr).
    let pid = peer(&stream).ok().map(|c| c.pid as u32);
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    while !stop.load(Ordering::Relaxed) {
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) if !line.ends_with('\n') => continue, // a timeout cut the line; read the rest
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
        let reply = answer(
            line.trim_end(),
            &executor,
            inbox.as_deref(),
            &stop,
            (&mut owned.names, pid),
        );
        line.clear();
        let quit = reply.quit;
        let text = serde_json::to_string(&reply).unwrap_or_default();
        if writeln!(writer, "{text}").is_err() || quit {
            return;
        }
    }
}

/// Adds a user-space component through the inbox when there is one: the session's holder may be
/// busy for a while (a `loadusr -W` waiting for this very component), so the request waits there
/// and whoever holds the session — or this thread, once it gets it — adds it.
fn join(
    c: UserComponent,
    executor: &SharedExecutor,
    inbox: Option<&UserInbox>,
    stop: &AtomicBool,
) -> Result<(), String> {
    let Some(inbox) = inbox else {
        let mut exec = executor.lock().unwrap_or_else(|p| p.into_inner());
        return exec.add_user_component(&c);
    };
    let name = c.name.clone();
    let answer = inbox.post(c);
    loop {
        // An idle session is taken at once; a busy one serves the inbox itself meanwhile.
        serve_if_idle(executor);
        match answer.recv_timeout(Duration::from_millis(2)) {
            Ok(r) => return r,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err("the instance dropped the request".into())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if stop.load(Ordering::Relaxed) && inbox.withdraw(&name) {
            return Err("the instance is stopping".into());
        }
    }
}

/// Removes a user-space component through the inbox when there is one (the session's holder may be
/// a `waitusr` waiting for exactly this); whether it was there.
fn leave(
    name: &str,
    executor: &SharedExecutor,
    inbox: Option<&UserInbox>,
    stop: &AtomicBool,
) -> Result<bool, String> {
    let Some(inbox) = inbox else {
        let mut exec = executor.lock().unwrap_or_else(|p| p.into_inner());
        return exec.remove_user_component(name);
    };
    let answer = inbox.post_leave(name);
    loop {
        serve_if_idle(executor);
        match answer.recv_timeout(Duration::from_millis(2)) {
            Ok(r) => return r,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(false),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        // A stopping instance deletes everything itself.
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
    }
}

/// Serves the user-component inbox when nobody holds the session (whoever holds it serves it).
fn serve_if_idle(executor: &SharedExecutor) {
    match executor.try_lock() {
        Ok(mut exec) => exec.serve_user_inbox(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().serve_user_inbox(),
        Err(std::sync::TryLockError::WouldBlock) => {}
    }
}

fn answer(
    request: &str,
    executor: &SharedExecutor,
    inbox: Option<&UserInbox>,
    stop: &AtomicBool,
    (owned, pid): (&mut Vec<String>, Option<u32>),
) -> Reply {
    let request: Request = match serde_json::from_str(request) {
        Ok(r) => r,
        Err(e) => {
            return Reply {
                ok: false,
                out: String::new(),
                error: Some(format!(
                    "bad request ({e}); expected {{\"line\": \"COMMAND\"}}"
                )),
                quit: false,
            }
        }
    };
    if let Request::UserComponent {
        user_component: name,
        pins,
        params,
    } = &request
    {
        let result = user_component(name, pins, params)
            .map_err(|e| format!("user component {}: {e}", crate::rt::units::quote(name)))
            .and_then(|mut c| {
                c.pid = pid;
                join(c, executor, inbox, stop)
            });
        if result.is_ok() {
            owned.push(name.clone());
        }
        return Reply {
            ok: result.is_ok(),
            out: String::new(),
            error: result.err(),
            quit: false,
        };
    }
    if let Request::UserExit { user_exit: name } = &request {
        let result = if owned.contains(name) {
            owned.retain(|n| n != name);
            leave(name, executor, inbox, stop).map(|_| ())
        } else {
            Err(format!(
                "user component {}: not declared on this connection",
                crate::rt::units::quote(name)
            ))
        };
        return Reply {
            ok: result.is_ok(),
            out: String::new(),
            error: result.err(),
            quit: false,
        };
    }
    let mut out = Vec::new();
    let result = {
        // A command that panicked poisoned nothing we rely on: the interpreter checks its own state.
        let mut exec = executor.lock().unwrap_or_else(|p| p.into_inner());
        match &request {
            Request::Line { line } => exec.execute(line, &mut out),
            Request::Source {
                source,
                ini,
                keep_going,
            } => exec.source(source, ini.as_deref(), *keep_going, &mut out),
            Request::Recorder { recorder, dir } if recorder == "dump" => {
                exec.recorder_dump(dir.as_deref()).map(|files| {
                    out.extend_from_slice(files.as_bytes());
                    Flow::Continue
                })
            }
            Request::Recorder { recorder, .. } => Err(format!(
                "unknown recorder request {}; the recorder understands \"dump\"",
                crate::rt::units::quote(recorder)
            )),
            Request::UserComponent { .. } => unreachable!("answered above"),
            Request::UserExit { .. } => unreachable!("answered above"),
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
            error: Some(error),
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
            ClientError::Io(e) => write!(f, "lost the connection to the instance: {e}"),
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

    /// Runs a whole file in the instance (the owner reads it).
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
        fn execute(&mut self, _: &str, _: &mut dyn Write) -> Result<Flow, String> {
            Ok(Flow::Continue)
        }
        fn source(
            &mut self,
            _: &Path,
            _: Option<&Path>,
            _: bool,
            _: &mut dyn Write,
        ) -> Result<Flow, String> {
            Ok(Flow::Continue)
        }
        fn add_user_component(&mut self, c: &UserComponent) -> Result<(), String> {
            if self.present.contains(&c.name) {
                return Err("taken".into());
            }
            self.present.push(c.name.clone());
            Ok(())
        }
        fn remove_user_component(&mut self, name: &str) -> Result<bool, String> {
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
        fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, String> {
            self.seen.push(line.to_string());
            match line {
                "fail" => Err("it failed".into()),
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
        ) -> Result<Flow, String> {
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
