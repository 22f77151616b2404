//! The listening side, in the instance's owner: [`ControlServer`], its accept loop with the
//! registry of connections (at most [`MAX_CLIENTS`]), one thread per connection that reads, parses
//! and writes, and the one executor thread that runs the requests.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::protocol::{peer, socket_name, user_component, Reply, Request, MAX_REQUEST_BYTES};
use super::{
    Departure, ExecError, Executor, Flow, SharedExecutor, UserComponent, UserError, UserInbox,
    UserWhy,
};

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
        stopping: false,
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
struct ConnectionComponents {
    names: Vec<String>,
    shared: Shared,
}

impl Drop for ConnectionComponents {
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
    let mut owned = ConnectionComponents {
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
                    stopping: false,
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
                stopping: true,
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
        stopping: result.as_ref().err().is_some_and(ExecError::is_stopping),
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
                stopping: false,
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
                        stopping: true,
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
            stopping: false,
        },
        Err(error) => Reply {
            ok: false,
            out,
            stopping: error.is_stopping(),
            error: Some(error.to_string()),
            quit: false,
        },
    }
}
