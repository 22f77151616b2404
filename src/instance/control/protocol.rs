//! The wire: the socket's name, who is at the other end, and the JSON lines both ends exchange.
//!
//! A request is one of [`Request`]'s forms, one JSON object on one line (at most
//! [`MAX_REQUEST_BYTES`]); the answer is one [`Reply`] on one line. The server parses requests and
//! turns a declared user-space component into the session's form ([`user_component`]); the client
//! builds them. Both ends learn the process behind the socket with [`peer`] (`SO_PEERCRED`).

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{UserComponent, UserParam, UserPin};
use rtapi_hal::{ParamAccess, PinDir, ValueType};

/// The socket name of an instance's control socket (abstract namespace).
pub fn socket_name(instance: &str) -> String {
    format!("rtapi-control-{instance}")
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub(super) enum Request {
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
pub(super) struct WireObject {
    pub(super) name: String,
    #[serde(rename = "type")]
    pub(super) ty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) access: Option<String>,
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
pub(super) fn user_component(
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
    /// Whether it failed because the instance is stopping (not the request's fault): the client
    /// stops sending the rest of a file.
    #[serde(default)]
    pub stopping: bool,
}

/// The longest request line the owner reads (1 MiB): a longer one is refused and its connection
/// closed, so a client cannot make the owner hold (and, under `mlockall`, lock) its memory.
/// `rtapi halcmd -f` sends a file in pieces well below it.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;

/// The credentials of the process at the other end of a Unix stream socket.
pub(super) fn peer(stream: &UnixStream) -> io::Result<nix::libc::ucred> {
    let cred =
        nix::sys::socket::getsockopt(&stream.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
            .map_err(io::Error::from)?;
    Ok(nix::libc::ucred {
        pid: cred.pid(),
        uid: cred.uid(),
        gid: cred.gid(),
    })
}
