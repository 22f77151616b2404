//! `rtapi linuxcnc`'s launcher: a whole LinuxCNC 2.9 machine with rtapi as its realtime master.
//!
//! It starts the master first (listening on LinuxCNC's socket before anything else), then
//! LinuxCNC's own `linuxcnc` script with `RTAPI_FIFO_PATH` naming that socket: every `halcmd loadrt`
//! runs LinuxCNC's `/usr/bin/rtapi_app load …`, which finds the master listening, forwards the
//! command and exits with the master's answer. Nothing of LinuxCNC is replaced. When the script ends
//! (the display closed, Ctrl-C, SIGTERM) the master is told `exit` and everything is checked gone.
//! It never falls back silently to LinuxCNC's own realtime: a master that dies while LinuxCNC runs
//! ends the session at once (before a `rtapi_app` could take the socket over), and a session whose
//! loads never reached the master fails. `cli::linuxcnc` gives it its arguments and turns a
//! [`LaunchError`] into the exit status.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::session::{session_user, SessionUser};
use super::{protocol, say, shmem};
use crate::config::halcmd::Ini;
use crate::rt::clock::Nanos;
use crate::rt::process::ProcStat;

/// The master binary's name, installed next to `rtapi`.
pub const MASTER_BIN: &str = "rtapi-lcnc-master";

/// Why `rtapi linuxcnc` failed.
#[derive(Debug)]
pub enum LaunchError {
    /// What it was given cannot work (no INI file, no LinuxCNC, no HOME): a usage error.
    Usage(String),
    /// The session failed: the master did not start or died, LinuxCNC's realtime was not rtapi's,
    /// LinuxCNC was killed.
    Failed(String),
    /// LinuxCNC itself exited with `code` (the launcher exits with it).
    Exited {
        /// LinuxCNC's exit status.
        code: u8,
        /// What to say.
        message: String,
    },
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::Usage(m) | LaunchError::Failed(m) => f.write_str(m),
            LaunchError::Exited { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for LaunchError {}

/// `[EMCMOT]SHMEM_KEY` of an INI file (LinuxCNC reads it with strtol base 0), or the default.
fn motion_key(ini: &Path) -> i32 {
    let ini = Ini::load(ini).unwrap_or_default();
    ini.get("EMCMOT", "SHMEM_KEY")
        .and_then(
            |v| match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
                Some(h) => i64::from_str_radix(h, 16).ok(),
                None => v.parse().ok(),
            },
        )
        .and_then(|n| i32::try_from(n).ok())
        .unwrap_or(shmem::DEFAULT_MOTION_KEY)
}

/// The `[SECTION]KEY` a LinuxCNC message names, and the value it names for `[HAL]HALFILE`.
fn named_key(message: &str) -> Option<(String, String, Option<String>)> {
    for prefix in [
        "CANNOT FIND FILE FOR:",
        "ILLFORMED LIB:file:",
        "CANNOT READ LIB:file:",
    ] {
        if let Some(rest) = message.split(prefix).nth(1) {
            let file = rest.trim().trim_matches(['<', '>']).to_string();
            return Some(("HAL".into(), "HALFILE".into(), Some(file)));
        }
    }
    let open = message.find('[')?;
    let (section, rest) = message[open + 1..].split_once(']')?;
    let key: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!section.is_empty() && !key.is_empty()).then(|| (section.to_string(), key, None))
}

/// Whether a line of LinuxCNC's output is a complaint about its INI file that ends LinuxCNC (the
/// script's own messages, `check_config`'s; not `#INCLUDE` expansion's, after which it goes on).
fn ini_complaint(line: &str) -> bool {
    const SAID: [&str; 11] = [
        "INI file",
        "Missing [",
        "Can't find",
        "CANNOT FIND FILE FOR:",
        "ILLFORMED LIB:",
        "CANNOT READ LIB:",
        "Unknown [KINS]",
        "INCONSISTENT coordinates",
        "MIN_LIMIT >",
        "MAX_LIMIT <",
        "Could not find INI file",
    ];
    SAID.iter().any(|s| line.contains(s))
}

/// LinuxCNC's words about the INI file `ini` when its failure was the INI's, each with the file
/// and the line it is about (`axis.ini:142: Missing [KINS]KINEMATICS=`), or none. From what
/// LinuxCNC left of this session: its script copies its output to `$HOME/linuxcnc_print.txt` and
/// `linuxcnc_debug.txt` when it fails off a terminal. On a terminal the user saw that output above;
/// with `recheck` (LinuxCNC ended before its first load) the checks its script makes before it
/// loads anything are made again: `[EMC]VERSION` 1.1 and LinuxCNC's own `check_config.tcl`, as the
/// session's user.
fn ini_trouble(
    ini: &Path,
    home: Option<&Path>,
    since: i64,
    user: &SessionUser,
    recheck: bool,
) -> Vec<String> {
    let fresh =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.mtime() >= since && m.uid() == user.uid);
    let mut said: Vec<String> = Vec::new();
    for name in ["linuxcnc_print.txt", "linuxcnc_debug.txt"] {
        let Some(p) = home.map(|h| h.join(name)).filter(|p| fresh(p)) else {
            continue;
        };
        let text = std::fs::read_to_string(p).unwrap_or_default();
        said.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| ini_complaint(l))
                .map(str::to_string),
        );
    }
    // Unreadable or broken, the INI file still gets LinuxCNC's words, without a line.
    let parsed = Ini::load(ini).unwrap_or_default();
    if said.is_empty() && recheck {
        let version = parsed.get("EMC", "VERSION");
        if version != Some("1.1") {
            said.push(format!(
                "[EMC]VERSION is {} where LinuxCNC 2.9 needs 1.1 (LinuxCNC's update_ini converts an \
                 older INI file)",
                version.map_or("missing".to_string(), |v| format!("{v:?}"))
            ));
        }
    }
    if said.is_empty() && recheck {
        said.extend(check_config(ini, user));
    }
    said.into_iter()
        .take(8)
        .map(|s| {
            let place = named_key(&s)
                .and_then(|(sec, key, value)| parsed.place(&sec, &key, value.as_deref()));
            match place {
                Some((file, n)) => format!("{file}:{n}: {s}"),
                None => format!("{}: {s}", ini.display()),
            }
        })
        .collect()
}

/// What LinuxCNC's `check_config.tcl` says against `ini` (run as the session's user), if it fails.
fn check_config(ini: &Path, user: &SessionUser) -> Vec<String> {
    let tcl = Path::new("/usr/share/linuxcnc/hallib/check_config.tcl");
    if !tcl.is_file() {
        return Vec::new();
    }
    let mut c = Command::new("tclsh8.6");
    c.arg(tcl)
        .arg(ini)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    if user.as_root {
        c.uid(user.uid).gid(user.gid);
    }
    match c.output() {
        Ok(o) if o.status.code() == Some(1) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.ends_with(':'))
            .map(|l| format!("check_config: {l}"))
            .collect(),
        _ => Vec::new(),
    }
}

fn sibling(name: &str) -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("where is rtapi? {e}"))?;
    let p = me.with_file_name(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} is missing: `rtapi linuxcnc` needs the master binary next to rtapi (cargo build \
             --release builds both; install both)",
            p.display()
        ))
    }
}

/// Asks the master to exit, over its socket (LinuxCNC's framing).
fn send_exit(path: &Path) -> Result<i32, String> {
    let mut s = UnixStream::connect(path).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    s.write_all(&protocol::encode_request(&["exit"]))
        .map_err(|e| e.to_string())?;
    protocol::read_reply(&mut s)
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if t0.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The environment variable that marks the processes of one `rtapi linuxcnc` session (the
/// launcher's pid).
const SESSION_MARK: &str = "RTAPI_LINUXCNC_SESSION";

/// How long LinuxCNC has to end after a SIGINT before it gets SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Sends `sig` to every process (but this one) whose environment marks it as this session's;
/// returns them as `pid name`.
fn end_session(sig: i32) -> Vec<String> {
    let me = std::process::id();
    let mark = format!("{SESSION_MARK}={me}");
    let mut hit = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return hit;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|v| v == mark.as_bytes()) {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            signal(pid, sig);
            hit.push(format!("{pid} {}", name.trim()));
        }
    }
    hit
}

fn sweep_session_segments(uid: u32, since: i64) -> Vec<String> {
    let Ok(table) = std::fs::read_to_string("/proc/sysvipc/shm") else {
        return Vec::new();
    };
    let alive = |pid: i64| i32::try_from(pid).is_ok_and(shmem::alive);
    let mut notes = Vec::new();
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<i64>().ok());
        let (Some(key), Some(id), Some(cpid), Some(lpid), Some(nattch), Some(owner), Some(ctime)) =
            (num(0), num(1), num(4), num(5), num(6), num(7), num(13))
        else {
            continue;
        };
        if nattch != 0 || owner != i64::from(uid) || ctime < since || alive(cpid) || alive(lpid) {
            continue;
        }
        // SAFETY: IPC_RMID takes no buffer.
        if unsafe { libc::shmctl(id as i32, libc::IPC_RMID, std::ptr::null_mut()) } == 0 {
            notes.push(format!(
                "removed shared memory segment 0x{:08x} (id {id}) the session left (made by pid {cpid}, gone)",
                key as u32
            ));
        }
    }
    notes
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) has no memory effects; the pid is a child we spawned (not reaped) or a
    // process of this session found by its mark.
    unsafe { libc::kill(pid as i32, sig) };
}

fn signal_group(pgid: u32, sig: i32) {
    // SAFETY: signalling the process group we created for LinuxCNC.
    unsafe { libc::kill(-(pgid as i32), sig) };
}

// The launcher's descendants. The launcher is a child subreaper (`PR_SET_CHILD_SUBREAPER`): a
// process of the session whose parent ends is reparented to the launcher instead of init, so every
// process the session starts stays in the launcher's descendant tree (`/proc`'s ppid links),
// however it detaches, as long as the launcher lives. At the end the launcher ends that whole tree
// (and, as before, every process carrying the session's environment mark). Why this and not
// another handle on the session:
// - process groups and session ids are left by `setsid`/`setpgid` (`setsid env -i helper` leaves the
//   group, the session and the environment mark at once); nobody leaves the ppid tree of a living
//   subreaper;
// - it works rootless and needs nothing from the system: a cgroup of the session's own needs a
//   cgroup subtree delegated to the user (systemd's `Delegate=`), which an ordinary user's terminal
//   does not have, nor a container without cgroup namespaces;
// - a pid is signalled through a pidfd after checking its start time, so a process that ended and
//   whose pid was reused is never signalled.
// What it cannot hold: processes of a launcher that was itself killed (SIGKILL ends the subreaper;
// orphans then go to init). Its master ends then (its report pipe's reader is gone), and LinuxCNC's
// rtapi_app slaves with it.

/// Makes the launcher a child subreaper (see above).
fn become_subreaper() -> Result<(), String> {
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) sets a flag of this process; no memory is involved.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "prctl(PR_SET_CHILD_SUBREAPER): {} (Linux 3.4 or later is needed to keep the session's \
             processes together)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The launcher's descendants, but `except` and its own descendants (the master, which ends its
/// own).
fn descendants(except: Option<u32>) -> Vec<ProcStat> {
    let all = ProcStat::all();
    let mut found = Vec::new();
    let mut parents = vec![std::process::id()];
    while let Some(parent) = parents.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            if Some(p.pid) != except && !found.iter().any(|f: &ProcStat| f.pid == p.pid) {
                parents.push(p.pid);
                found.push(p.clone());
            }
        }
    }
    found
}

/// Sends `sig` to `p` if it is still the process seen (the same start time), through a pidfd so
/// that a pid freed and reused meanwhile is never signalled. Whether it was sent.
fn signal_exact(p: &ProcStat, sig: i32) -> bool {
    let same = || ProcStat::read(p.pid).is_some_and(|q| q.start == p.start);
    // SAFETY: pidfd_open(2) takes a pid and flags, returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p.pid as libc::pid_t, 0) } as i32;
    if fd < 0 {
        // Without pidfds (Linux < 5.3) only a race of microseconds is left open.
        let nosys = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS);
        return nosys && same() && {
            signal(p.pid, sig);
            true
        };
    }
    // The descriptor holds whatever process has this pid now: the one seen if it started then.
    // SAFETY: pidfd_send_signal(2) on the descriptor just opened, no siginfo; then close(2) of it.
    let sent = same()
        && unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        } == 0;
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    sent
}

/// Sends `sig` to every running descendant of the launcher but `except` (and those below it);
/// returns them as `pid name`.
fn end_descendants(sig: i32, except: Option<u32>) -> Vec<String> {
    descendants(except)
        .into_iter()
        .filter(|p| !p.ended && signal_exact(p, sig))
        .map(|p| format!("{} {}", p.pid, p.comm))
        .collect()
}

/// Reaps the launcher's children that ended, but `keep` (the master and LinuxCNC's script, whose
/// handles take their status): a process reparented to the subreaper ends as its zombie.
fn reap_orphans(keep: &[u32]) {
    let me = std::process::id();
    for p in ProcStat::all() {
        if p.ppid == me && p.ended && !keep.contains(&p.pid) {
            // SAFETY: waitpid(2) of a child of ours that has ended, status not wanted.
            unsafe { libc::waitpid(p.pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }
}

/// Drains what the master's reader thread still has (the master has ended, so the pipe is closing).
fn reader_done(rx: &mpsc::Receiver<String>, f: &mut dyn FnMut(String)) -> usize {
    let mut n = 0;
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
        f(l);
        n += 1;
    }
    n
}

/// Stale segments of the session's keys left when something died: removed if nobody has them.
fn sweep_segments(keys: &[i32], uid: u32) -> Vec<String> {
    match shmem::reclaim_stale(keys, uid) {
        Ok(v) => v,
        Err(e) => vec![format!("left behind: {e}")],
    }
}

/// Runs `rtapi linuxcnc` with LinuxCNC's arguments `args` (the INI file last).
pub fn run(args: &[OsString], trace: Option<Nanos>) -> Result<(), LaunchError> {
    let user = session_user().map_err(LaunchError::Usage)?;
    let Some(ini) = args.last().map(PathBuf::from) else {
        return Err(LaunchError::Usage("give LinuxCNC's INI file".into()));
    };
    if !ini.is_file() {
        return Err(LaunchError::Usage(format!(
            "{}: no such INI file (rtapi linuxcnc [LINUXCNC-OPTIONS] INI)",
            ini.display()
        )));
    }
    let script = std::env::var_os("RTAPI_LINUXCNC")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/linuxcnc"));
    if !script.is_file() {
        return Err(LaunchError::Usage(format!(
            "{} not found: install LinuxCNC 2.9 (package linuxcnc-uspace), or set RTAPI_LINUXCNC to \
             its linuxcnc script",
            script.display()
        )));
    }
    // The master refuses a LinuxCNC it does not know; say so before LinuxCNC starts at all.
    let allow = std::env::var("RTAPI_LINUXCNC_ALLOW").ok();
    super::layout::check_release(Path::new("/"), allow.as_deref()).map_err(LaunchError::Usage)?;
    let master_bin = sibling(MASTER_BIN).map_err(LaunchError::Failed)?;
    // HOME: as given, unless we are root for another user and it is not theirs.
    let home = match std::env::var_os("HOME").map(PathBuf::from) {
        Some(h) if !user.as_root => Some(h),
        Some(h) if std::fs::metadata(&h).is_ok_and(|m| m.uid() == user.uid) => Some(h),
        _ => user.home.clone(),
    };
    let fifo = match std::env::var_os("RTAPI_FIFO_PATH").filter(|p| !p.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => match &home {
            Some(h) => h.join(".rtapi_fifo"),
            None => {
                return Err(LaunchError::Usage(
                    "no HOME for the socket: set RTAPI_FIFO_PATH or HOME".into(),
                ))
            }
        },
    };
    let key = motion_key(&ini);
    let keys = [shmem::HAL_KEY, shmem::RTAPI_KEY, key];

    // Every process of the session stays below the launcher, however it detaches (see
    // `become_subreaper`): ended with the session at the end.
    if let Err(e) = become_subreaper() {
        say(&format!(
            "rtapi: warn: {e}; the session's processes that leave its process group and drop \
             {SESSION_MARK} may outlive it"
        ));
    }
    // 1. The master, listening before anything of LinuxCNC starts.
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| LaunchError::Failed(format!("pipe: {e}")))?;
    let wfd = w.as_raw_fd();
    let mut cmd = Command::new(&master_bin);
    cmd.args([
        "--stay",
        "--report-fd",
        "3",
        "--motion-key",
        &key.to_string(),
    ])
    .env("RTAPI_FIFO_PATH", &fifo)
    .stdin(Stdio::null());
    if let Some(t) = trace {
        cmd.arg(format!("--trace={t}"));
    }
    if let Some(h) = &home {
        cmd.env("HOME", h);
    }
    // SAFETY: between fork and exec only async-signal-safe calls: setsid (the master keeps running
    // through a terminal's Ctrl-C until LinuxCNC's own shutdown has unloaded everything) and dup2 of
    // the report pipe onto descriptor 3 (dup2 clears close-on-exec on the copy).
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            if libc::dup2(wfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut master_child = cmd
        .spawn()
        .map_err(|e| LaunchError::Failed(format!("starting {}: {e}", master_bin.display())))?;
    drop(w);
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        // The read end of the pipe, owned by this thread from now on.
        let f = std::fs::File::from(r);
        for line in BufReader::new(f).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let ready = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.starts_with("ready") => break true,
            Ok(_) => {}
            Err(_) => break false,
        }
    };
    if !ready {
        let status = wait_timeout(&mut master_child, Duration::from_secs(5));
        if status.is_none() {
            let _ = master_child.kill();
            let _ = master_child.wait();
        }
        let _ = reader.join();
        return Err(LaunchError::Failed(format!(
            "rtapi's LinuxCNC master did not start ({}): LinuxCNC was not started",
            status.map_or("no answer in 60 s".to_string(), |s| s.to_string())
        )));
    }

    let session_start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    // 2. LinuxCNC's own script, as the session's user, in a process group of its own.
    let stop = crate::rt::signals::shutdown_flag().clone();
    let mut lc = Command::new(&script);
    lc.args(args)
        .env("RTAPI_FIFO_PATH", &fifo)
        // Every process of the session inherits it, also those that leave the process group
        // (linuxcncsvr, `loadusr` helpers): the launcher ends what carries it.
        .env(SESSION_MARK, std::process::id().to_string())
        .process_group(0);
    if let Some(h) = &home {
        lc.env("HOME", h);
    }
    if user.as_root {
        lc.uid(user.uid).gid(user.gid);
        if let Ok(Some(u)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(user.uid)) {
            lc.env("USER", &u.name).env("LOGNAME", &u.name);
        }
    }
    let mut linuxcnc = match lc.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = send_exit(&fifo);
            let _ = wait_timeout(&mut master_child, Duration::from_secs(15));
            return Err(LaunchError::Failed(format!(
                "starting {}: {e}",
                script.display()
            )));
        }
    };
    let pgid = linuxcnc.id();
    let mut loads = 0usize;
    let mut done = false;
    let mut forwarded: Option<std::time::Instant> = None;
    let mut escalated = false;
    let mut master_gone = None;
    let mut master_exited = None;
    let mut ticks = 0u32;
    let tally = |l: String, loads: &mut usize, done: &mut bool| {
        if l.starts_with("served load ") {
            *loads += 1;
        } else if l == "done" {
            *done = true;
        }
    };
    let lc_status = loop {
        while let Ok(l) = rx.try_recv() {
            tally(l, &mut loads, &mut done);
        }
        if let Ok(Some(s)) = linuxcnc.try_wait() {
            break s;
        }
        if master_exited.is_none() {
            if let Ok(Some(s)) = master_child.try_wait() {
                let _ = reader_done(&rx, &mut |l| tally(l, &mut loads, &mut done));
                if done && s.success() {
                    // Told `exit` (LinuxCNC's `realtime stop`) and cleaned up: its shutdown goes on.
                    master_exited = Some(s);
                } else {
                    // The master died under a running LinuxCNC: end it all now, before an rtapi_app
                    // slave gives up on the dead socket and becomes master itself.
                    signal_group(pgid, libc::SIGKILL);
                    end_session(libc::SIGKILL);
                    end_descendants(libc::SIGKILL, None);
                    let s2 = linuxcnc.wait().ok();
                    master_gone = Some(s);
                    break s2.unwrap_or(s);
                }
            }
        }
        if forwarded.is_none() && stop.load(std::sync::atomic::Ordering::Relaxed) {
            forwarded = Some(std::time::Instant::now());
            // What Ctrl-C in LinuxCNC's terminal does: SIGINT to the whole group. The display ends
            // (the script waits for it before its trap runs), then the script's Cleanup (task, io,
            // unload, realtime stop).
            signal_group(pgid, libc::SIGINT);
        }
        if let Some(t) = forwarded {
            if !escalated && t.elapsed() > STOP_GRACE {
                escalated = true;
                say(&format!(
                    "rtapi: LinuxCNC did not end within {} s of SIGINT: SIGTERM to it",
                    STOP_GRACE.as_secs()
                ));
                signal_group(pgid, libc::SIGTERM);
                end_session(libc::SIGTERM);
                // The master is ended below, by `exit` as LinuxCNC's `realtime stop` would.
                end_descendants(libc::SIGTERM, Some(master_child.id()));
            }
        }
        // Processes reparented to the launcher that ended: reaped once a second.
        ticks += 1;
        if ticks % 20 == 0 {
            reap_orphans(&[master_child.id(), linuxcnc.id()]);
        }
        std::thread::sleep(Duration::from_millis(50));
    };

    // 3. The master: LinuxCNC's `realtime stop` has normally sent it `exit` already.
    let mut notes = Vec::new();
    if master_gone.is_none() && master_exited.is_none() {
        if wait_timeout(&mut master_child, Duration::from_millis(500)).is_none() {
            let _ = send_exit(&fifo);
        }
        if wait_timeout(&mut master_child, Duration::from_secs(20)).is_none() {
            notes.push("the master did not exit when told to: SIGTERM".to_string());
            signal(master_child.id(), libc::SIGTERM);
            if wait_timeout(&mut master_child, Duration::from_secs(10)).is_none() {
                notes.push("the master did not end on SIGTERM: SIGKILL".to_string());
                let _ = master_child.kill();
                let _ = master_child.wait();
            }
        }
    }
    let _ = reader.join();
    while let Ok(l) = rx.try_recv() {
        tally(l, &mut loads, &mut done);
    }
    // LinuxCNC's process group: anything left of it is ended (the script's Cleanup normally did),
    // and every other process of the session (a helper LinuxCNC started and left running): those
    // that carry the session's mark, and every descendant of the launcher (the master has ended,
    // so its leftovers are among them), also one that dropped the mark and left the group.
    signal_group(pgid, libc::SIGKILL);
    let mut left = end_session(libc::SIGKILL);
    let killed_more = |left: &mut Vec<String>| {
        let more = end_descendants(libc::SIGKILL, None);
        let n = more.len();
        for p in more {
            if !left.contains(&p) {
                left.push(p);
            }
        }
        n
    };
    killed_more(&mut left);
    // Killed is not yet gone: the segments they hold are detached when they have exited. Those
    // reparented to the launcher are reaped here; one forked meanwhile is killed too.
    let t0 = std::time::Instant::now();
    loop {
        reap_orphans(&[]);
        let running = killed_more(&mut left) > 0 || !end_session(0).is_empty();
        if !running || t0.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if !left.is_empty() {
        notes.push(format!(
            "ended {} process(es) LinuxCNC left running: {}",
            left.len(),
            left.join(", ")
        ));
    }
    // Our master removes its socket when it ends; one there now was made by someone else: LinuxCNC's
    // own rtapi_app, become master after ours had gone.
    let foreign = done && std::fs::symlink_metadata(&fifo).is_ok_and(|m| m.file_type().is_socket());
    if std::fs::symlink_metadata(&fifo).is_ok_and(|m| m.file_type().is_socket()) {
        super::socket::remove(&fifo);
        notes.push(format!("removed the socket {} left behind", fifo.display()));
    }
    // rtapi's own segment of LinuxCNC's threads: the master removes it when it ends; a killed one
    // leaves it (its owner dead, so it is stale and removed here; one whose owner lives stays).
    let instance = std::env::var("RTAPI_INSTANCE")
        .unwrap_or_else(|_| crate::runtime::hosted::DEFAULT_HOSTED_INSTANCE.to_string());
    match rtapi_hal::remove_stale(&instance) {
        Ok(true) => notes.push(format!(
            "removed /dev/shm/rtapi-{instance}, which the master left behind"
        )),
        Ok(false) => {}
        Err(e) => notes.push(format!("left behind: /dev/shm/rtapi-{instance} ({e})")),
    }
    // A process of the session killed just now may still be exiting (its attachments go last):
    // what is still attached is looked at again for a few seconds before it is reported.
    let t0 = std::time::Instant::now();
    let swept = loop {
        let v = sweep_segments(&keys, user.uid);
        if !v.iter().any(|m| m.starts_with("left behind")) || t0.elapsed() > Duration::from_secs(5)
        {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    notes.extend(swept);
    notes.extend(sweep_session_segments(user.uid, session_start));
    for n in &notes {
        say(&format!("rtapi: {n}"));
    }
    if let Some(s) = master_gone {
        return Err(LaunchError::Failed(format!(
            "rtapi's LinuxCNC master ended while LinuxCNC ran ({s}): LinuxCNC was stopped at once \
             rather than let LinuxCNC's own rtapi_app take over"
        )));
    }
    if foreign {
        return Err(LaunchError::Failed(format!(
            "after rtapi's master had exited, something else (LinuxCNC's own rtapi_app?) listened on \
             {}: part of this session's realtime was not rtapi's",
            fifo.display()
        )));
    }
    if loads == 0 && !lc_status.success() {
        // Before its first load LinuxCNC's script checks its INI file: a broken one is the cause,
        // not the script.
        let trouble = ini_trouble(&ini, home.as_deref(), session_start, &user, true);
        if !trouble.is_empty() {
            return Err(LaunchError::Failed(format!(
                "LinuxCNC refused its INI file before it started anything (it exited with \
                 {lc_status}): {}; fix the INI file and run again (rtapi's master and LinuxCNC's \
                 script were not the cause)",
                trouble.join("; ")
            )));
        }
    }
    if loads == 0 {
        return Err(LaunchError::Failed(format!(
            "LinuxCNC never asked rtapi's master to load a module (LinuxCNC exited with {lc_status}): \
             its realtime was not rtapi's; is {} a LinuxCNC 2.9 script that uses $RTAPI_FIFO_PATH?",
            script.display()
        )));
    }
    say(&format!(
        "rtapi: LinuxCNC ended ({lc_status}); the master served {loads} load(s)"
    ));
    match lc_status.code() {
        Some(0) => Ok(()),
        Some(c) => {
            // A HAL file the INI file names that LinuxCNC could not find, say: name the INI's line.
            let trouble = ini_trouble(&ini, home.as_deref(), session_start, &user, false);
            Err(LaunchError::Exited {
                code: u8::try_from(c).unwrap_or(1),
                message: if trouble.is_empty() {
                    format!("LinuxCNC exited with {c}")
                } else {
                    format!(
                        "LinuxCNC exited with {c} because of its INI file: {}; fix the INI file \
                         and run again",
                        trouble.join("; ")
                    )
                },
            })
        }
        None => Err(LaunchError::Failed(format!(
            "LinuxCNC ended by {lc_status}, not by its own exit (it was killed, or crashed): \
             its last messages are above; `rtapi linuxcnc -v -d INI` shows LinuxCNC's verbose and \
             debug output"
        ))),
    }
}
