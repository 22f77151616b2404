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
//!
//! # The parts
//!
//! The module is split where its pieces meet through a narrow interface, one idea a file:
//!
//! * `protocol.rs`, the wire, what both ends share: the socket's name, the peer's credentials
//!   (`SO_PEERCRED`, which both ends' trust checks read), the request and [`Reply`] lines,
//!   [`MAX_REQUEST_BYTES`], a reply's `stopping` (the owner stopping: a field of the wire, not
//!   text), and the reading of a declared user-space component into the session's
//!   [`UserComponent`].
//! * `executor.rs`, what runs the commands: the [`Executor`] trait, [`ExecError`], and the
//!   session's ([`crate::instance::LiveSession`]) implementation. It knows no socket.
//! * `server.rs`, [`ControlServer`], the owner's side: the accept loop with the root-or-owner rule,
//!   the registry of connections ([`MAX_CLIENTS`], making room), the connection threads, the one
//!   executor thread and the requests it runs, and the user-space components each connection
//!   holds. It reaches the session only through [`Executor`] and clients only through the
//!   protocol.
//! * `client.rs`, [`ControlClient`], the other side, with the check that the socket is held by the
//!   owner, and [`send_file`].
//!
//! The connection registry stays in `server.rs` rather than a file of its own: only the accept loop
//! adds to it, a connection's thread only marks itself busy or idle and leaves, and apart from them
//! it means nothing. Turning a request into [`Executor`] calls stays there too: it is what the
//! executor thread does with a job, and the executor itself knows no request. The tests
//! (`tests.rs`) run a server and its clients together over a real socket.

mod client;
mod executor;
mod protocol;
mod server;
#[cfg(test)]
mod tests;

pub use crate::config::halcmd::{
    Departure, UserComponent, UserError, UserInbox, UserParam, UserPin, UserWhy,
};

/// What a command asks of the session after it ran: the interpreter's own (one type from the
/// halcmd line to the socket's answer).
pub use crate::config::halcmd::Flow;

pub use client::{send_file, ClientError, ControlClient, Sent, SCRIPT_PIECE};
pub use executor::{ExecError, Executor, SharedExecutor};
pub use protocol::{socket_name, Reply, MAX_REQUEST_BYTES};
pub use server::{ControlServer, MAX_CLIENTS};
