//! The asking side: [`ControlClient`], a connection to an instance's owner that it checks is the
//! owner, and [`send_file`], which runs a file this process reads in the instance, in pieces.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;

use super::protocol::{peer, socket_name, Reply, Request, WireObject};
use super::UserComponent;
use rtapi_hal::{ParamAccess, PinDir};

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

    pub(super) fn request(&mut self, request: &Request) -> Result<Reply, ClientError> {
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
/// alone): with JSON's escapes it stays below [`MAX_REQUEST_BYTES`](super::MAX_REQUEST_BYTES).
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
                if !keep_going || reply.stopping {
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
