//! The master's socket: LinuxCNC 2.9's filesystem socket at `$RTAPI_FIFO_PATH` (else
//! `$HOME/.rtapi_fifo`), where its `rtapi_app` slaves connect — and who may use it.
//!
//! A command on this socket loads code into the master and steers its real-time threads, so the
//! file's mode is not trusted to keep others out:
//! * the socket is made in a directory that only the session's user (or root) can change — one
//!   that others may write without the sticky bit would let them put their own socket in its place
//!   between sessions;
//! * it is bound under umask 0177 and then set 0600 explicitly (and given to the session's user
//!   when the master runs as root for them);
//! * every connection's peer is read with `SO_PEERCRED` and served only if it runs as the
//!   session's user, as root, or as the master's own uid; any other is answered `-EACCES` for its
//!   request, which is never run (the serve loop reads it apart from the session's connections), and
//!   said on the master's standard error.

use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use super::say;

/// Who the socket is for.
#[derive(Clone, Copy, Debug)]
pub struct SocketOwner {
    /// The session's user.
    pub uid: u32,
    /// Their group.
    pub gid: u32,
    /// The master runs as root for that user (`RTAPI_UID`): the socket is given to them.
    pub as_root: bool,
}

/// Why the socket's directory is not one only the session may change, if it is not.
fn refuse_directory(dir: &Path, owner: &SocketOwner) -> Option<String> {
    let meta = match std::fs::metadata(dir) {
        Ok(m) => m,
        Err(e) => {
            return Some(format!(
                "its directory {} cannot be read: {e}",
                dir.display()
            ))
        }
    };
    let mode = meta.permissions().mode();
    if meta.uid() != owner.uid && meta.uid() != 0 {
        return Some(format!(
            "its directory {} belongs to uid {}, neither the session's user (uid {}) nor root",
            dir.display(),
            meta.uid(),
            owner.uid
        ));
    }
    if mode & 0o022 != 0 && mode & 0o1000 == 0 {
        return Some(format!(
            "its directory {} (mode {:03o}) may be written by other users without the sticky bit: \
             they could put their own socket in its place",
            dir.display(),
            mode & 0o7777
        ));
    }
    None
}

/// What both binds check first: a path a Unix socket can have, in a directory only the session's
/// user (or root) can write.
fn check_path(path: &Path, owner: &SocketOwner) -> Result<(), String> {
    if path.as_os_str().len() >= 108 {
        return Err(format!(
            "the socket path {} is too long for a Unix socket (at most 107 bytes): set RTAPI_FIFO_PATH \
             to a shorter path",
            path.display()
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Some(why) = refuse_directory(dir, owner) {
        return Err(format!(
            "not making the master's socket {}: {why}; set RTAPI_FIFO_PATH to a path in a directory \
             only you can write (LinuxCNC's default is $HOME/.rtapi_fifo)",
            path.display()
        ));
    }
    Ok(())
}

/// Binds LinuxCNC's socket at `path` for `owner`; a stale socket file (nobody listening) of the
/// session's user or root is replaced.
pub fn bind(path: &Path, owner: &SocketOwner) -> Result<UnixListener, String> {
    check_path(path, owner)?;
    match bind_private(path) {
        Ok(l) => return finish(l, path, owner),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {}
        Err(e) => return Err(format!("cannot bind the socket {}: {e}", path.display())),
    }
    if UnixStream::connect(path).is_ok() {
        return Err(format!(
            "a realtime master (rtapi's, or LinuxCNC's rtapi_app) already listens on {}: another \
             LinuxCNC session is running; stop it first",
            path.display()
        ));
    }
    remove_stale(path, owner)?;
    say(&format!(
        "rtapi: removed the stale socket {} (nobody listened on it)",
        path.display()
    ));
    let l = bind_private(path)
        .map_err(|e| format!("cannot bind the socket {}: {e}", path.display()))?;
    finish(l, path, owner)
}

/// Binds LinuxCNC's socket at `path` for `owner` as 2.9's `rtapi_app` does: `Ok(None)` when the
/// address is in use (a master may listen there: the caller connects, and removes the file only
/// when nobody answers, as 2.9). The directory is checked as [`bind`] checks it.
pub fn bind_new(path: &Path, owner: &SocketOwner) -> Result<Option<UnixListener>, String> {
    check_path(path, owner)?;
    match bind_private(path) {
        Ok(l) => finish(l, path, owner).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(format!("cannot bind the socket {}: {e}", path.display())),
    }
}

/// Removes a socket nobody answers on, if it is a socket of `owner`'s or root's (2.9's
/// `rtapi_app` unlinks whatever is there; rtapi leaves another user's file, and anything but a socket, alone).
pub fn remove_stale(path: &Path, owner: &SocketOwner) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.file_type().is_socket() || (meta.uid() != owner.uid && meta.uid() != 0) {
        return Err(format!(
            "{} exists and is not a stale socket of this user's: not replacing it (remove it, or set \
             RTAPI_FIFO_PATH elsewhere)",
            path.display()
        ));
    }
    std::fs::remove_file(path).map_err(|e| format!("removing {}: {e}", path.display()))
}

/// `bind` with umask 0177: the socket file is never, even for a moment, open to others. The
/// master is single-threaded here (its socket is the first thing it makes), so the process-wide
/// umask changes for nobody else.
fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    use nix::sys::stat::{umask, Mode};
    let old = umask(Mode::from_bits_truncate(0o177));
    let r = UnixListener::bind(path);
    umask(old);
    r
}

fn finish(l: UnixListener, path: &Path, owner: &SocketOwner) -> Result<UnixListener, String> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("setting {} to mode 0600: {e}", path.display()))?;
    if owner.as_root {
        std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid))
            .map_err(|e| format!("giving {} to uid {}: {e}", path.display(), owner.uid))?;
    }
    Ok(l)
}

/// Removes the socket file if it is still a socket (ours).
pub fn remove(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
    crate::runtime::crash::forget_path(&path.to_string_lossy());
}

/// A connection's peer as `SO_PEERCRED` gives it.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    /// Its process.
    pub pid: i32,
    /// Its effective uid when it connected.
    pub uid: u32,
}

/// The peer of `conn`.
pub fn peer(conn: &UnixStream) -> std::io::Result<Peer> {
    let c = nix::sys::socket::getsockopt(&conn.as_fd(), nix::sys::socket::sockopt::PeerCredentials)
        .map_err(std::io::Error::from)?;
    Ok(Peer {
        pid: c.pid(),
        uid: c.uid(),
    })
}

/// Whether `peer` may command a master serving `session_uid`: that user, root, or the master's
/// own uid.
pub fn allowed(peer: &Peer, session_uid: u32) -> bool {
    peer.uid == session_uid || peer.uid == 0 || peer.uid == nix::unistd::geteuid().as_raw()
}
