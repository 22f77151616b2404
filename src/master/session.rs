//! Who a LinuxCNC session is for: the user LinuxCNC's programs run as, who owns the master's socket
//! and segments. LinuxCNC's rule: root only with `RTAPI_UID` naming the (non-root) user it acts for.

use std::path::PathBuf;

/// The session's user: who LinuxCNC's programs run as, who owns the socket and the segments.
#[derive(Clone, Debug)]
pub struct SessionUser {
    /// Their uid.
    pub uid: u32,
    /// Their group.
    pub gid: u32,
    /// We are root acting for `uid` (LinuxCNC's RTAPI_UID rule).
    pub as_root: bool,
    /// Their home directory, from the password database.
    pub home: Option<PathBuf>,
}

/// LinuxCNC's rule: root only with `RTAPI_UID` naming the (non-root) user it acts for.
pub fn session_user() -> Result<SessionUser, String> {
    let uid = nix::unistd::getuid().as_raw();
    let lookup = |uid: u32| {
        nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
            .ok()
            .flatten()
    };
    if uid != 0 {
        let u = lookup(uid);
        return Ok(SessionUser {
            uid,
            gid: u
                .as_ref()
                .map_or(nix::unistd::getgid().as_raw(), |u| u.gid.as_raw()),
            as_root: false,
            home: u.map(|u| u.dir),
        });
    }
    let text = std::env::var("RTAPI_UID").unwrap_or_default();
    let fallback: u32 = text.trim().parse().unwrap_or(0);
    if fallback == 0 {
        return Err(
            "refusing to run as root without RTAPI_UID: LinuxCNC's programs must run as an ordinary \
             user; as root, set RTAPI_UID to that user's uid (e.g. `sudo env RTAPI_UID=$(id -u) \
             rtapi linuxcnc …`), or run as that user with the file capabilities README gives"
                .into(),
        );
    }
    let u = lookup(fallback);
    Ok(SessionUser {
        uid: fallback,
        gid: u.as_ref().map_or(fallback, |u| u.gid.as_raw()),
        as_root: true,
        home: u.map(|u| u.dir),
    })
}
