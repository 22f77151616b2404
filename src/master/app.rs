//! The master binary as LinuxCNC 2.9's `rtapi_app` (its personality when its `argv[0]`'s basename
//! is `rtapi_app`, as through `/usr/bin/rtapi_app -> rtapi-lcnc-master`, which `rtapi divert on`
//! makes). What 2.9's uspace `rtapi_app` `main()` does, in the same order:
//!
//! * as root, only with `RTAPI_UID` naming the user it acts for ([`super::session::session_user`]);
//! * the socket is `$RTAPI_FIFO_PATH`, else `$HOME/.rtapi_fifo`; bound, the process becomes the
//!   master in a session of its own (`setsid`), runs its own command line first and serves the
//!   socket until `exit` or the last module's unload ([`super::start::run_as_app`]), exiting with
//!   its own command's answer;
//! * in use, it connects (at least 3 tries and 3 s, a random pause of up to 100 ms between them),
//!   sends its command line in 2.9's framing ([`super::protocol`]), prints nothing and exits with
//!   the master's answer (its low 8 bits, as a C `main` returning it);
//! * nobody answering after those tries, the stale socket is removed ("Waited 3 seconds for
//!   master.  giving up.", as 2.9 says it) and it becomes the master.
//!
//! Everything the master made (its threads, modules, SysV segments, rtapi's instance segment and
//! the socket) goes when it ends, since no launcher is around to sweep after it: by `exit`, the
//! last unload, SIGINT/SIGTERM, or a module's crash ([`crate::runtime::crash`]); segments a killed
//! master left are reclaimed by the next one ([`super::shmem::reclaim_stale`]).

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::session::session_user;
use super::socket::{self, SocketOwner};
use super::{protocol, shmem};

/// The name LinuxCNC runs its realtime by (`EMC2_BIN_DIR "/rtapi_app"`, `ps -C rtapi_app`).
pub const APP_NAME: &str = "rtapi_app";

/// Whether this process was started as `rtapi_app` (its `argv[0]`'s basename).
pub fn invoked_as_app() -> bool {
    std::env::args_os()
        .next()
        .is_some_and(|a| Path::new(&a).file_name() == Some(std::ffi::OsStr::new(APP_NAME)))
}

/// One line on standard error, as `rtapi_app: …`.
fn complain(text: &str) {
    let _ = writeln!(std::io::stderr(), "{APP_NAME}: {text}");
}

/// A small pseudo-random pause of up to 100 ms (2.9's `lrand48() % 100000` µs), seeded by the
/// time and the pid.
fn pause(seed: &mut u64) {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    std::thread::sleep(Duration::from_micros((*seed >> 33) % 100_000));
}

/// What connecting to the socket in use gave.
enum Connect {
    /// A master answered.
    Master(UnixStream),
    /// Nobody listens (refused after every try): the socket is stale.
    Stale,
    /// Something else (its text).
    Failed(String),
}

/// 2.9's loop: at least three tries and at least three seconds.
fn connect(path: &Path) -> Connect {
    let t0 = Instant::now();
    let mut seed = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let mut i = 0;
    loop {
        let err = match UnixStream::connect(path) {
            Ok(s) => return Connect::Master(s),
            Err(e) => e,
        };
        i += 1;
        if i >= 3 && t0.elapsed() >= Duration::from_secs(3) {
            return if err.kind() == std::io::ErrorKind::ConnectionRefused {
                Connect::Stale
            } else {
                Connect::Failed(format!("connect {}: {err}", path.display()))
            };
        }
        pause(&mut seed);
    }
}

/// Forwards `args` to the master on `conn`; its answer (2.9's `slave()`: a failed write is said,
/// and the answer is still read; no answer is -1).
fn forward(mut conn: UnixStream, args: &[String]) -> i32 {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Err(e) = conn.write_all(&protocol::encode_request(&words)) {
        complain(&format!("failed to write to master: {e}"));
    }
    protocol::read_reply(&mut conn).unwrap_or(-1)
}

/// An `int` returned from C's `main`: its low 8 bits.
fn status(rc: i32) -> ExitCode {
    ExitCode::from(rc as u8)
}

/// `rtapi_app`'s `main` (see the module docs).
pub fn main() -> ExitCode {
    let user = match session_user() {
        Ok(u) => u,
        Err(e) => {
            // 2.9's words first (scripts may look for them), then rtapi's.
            complain("Refusing to run as root without fallback UID specified");
            complain(&e);
            return ExitCode::from(1);
        }
    };
    let path = match super::socket_path() {
        Ok(p) => p,
        Err(e) => {
            complain(&e);
            return ExitCode::from(1);
        }
    };
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let owner = SocketOwner {
        uid: user.uid,
        gid: user.gid,
        as_root: user.as_root,
    };
    loop {
        match socket::bind_new(&path, &owner) {
            Ok(Some(listener)) => {
                // A session of its own (2.9: "create a new session if we can"): the terminal's
                // Ctrl-C and hangup reach halcmd, not the master it started.
                let _ = nix::unistd::setsid();
                return master(listener, &args);
            }
            Ok(None) => match connect(&path) {
                Connect::Master(conn) => return status(forward(conn, &args)),
                Connect::Stale => {
                    if let Err(e) = socket::remove_stale(&path, &owner) {
                        complain(&e);
                        return ExitCode::from(1);
                    }
                    let _ = writeln!(
                        std::io::stderr(),
                        "Waited 3 seconds for master.  giving up."
                    );
                }
                Connect::Failed(e) => {
                    complain(&e);
                    return ExitCode::from(1);
                }
            },
            Err(e) => {
                complain(&e);
                return ExitCode::from(1);
            }
        }
    }
}

/// The master: rtapi's, with its flavor from `RTAPI_FLAVOR` (as every rtapi command), its
/// instance from `RTAPI_INSTANCE`, and motion's default segment key.
fn master(listener: std::os::unix::net::UnixListener, args: &[String]) -> ExitCode {
    let options = super::start::Options {
        flavor: None,
        stay: false,
        report_fd: None,
        motion_key: shmem::DEFAULT_MOTION_KEY,
        instance: std::env::var("RTAPI_INSTANCE")
            .ok()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| crate::runtime::hosted::DEFAULT_HOSTED_INSTANCE.to_string()),
        trace: None,
    };
    match super::start::run_as_app(options, listener, args) {
        Ok(rc) => status(rc),
        Err(e) => {
            complain(&e.to_string());
            ExitCode::from(1)
        }
    }
}
