//! The programs `loadusr` started, as children of the instance's owner: each started in a process
//! group of its own with `RTAPI_INSTANCE` set and a death signal (SIGKILL) tied to the owner, reaped
//! while the instance runs, and stopped with it: SIGTERM to every group `loadusr` made, then SIGKILL
//! to what is left after the grace period, so that what a program started (`sh -c "sleep 1 & sleep
//! 2"`) ends with it, also when the program itself ended earlier. An owner killed outright (SIGKILL)
//! stops nothing itself: its programs get the death signal, and a guard process it forked at the
//! first `loadusr` sees the owner's end (the guard's pipe reaches EOF) and SIGKILLs every group still
//! registered. The halcmd interpreter decides when (`config::halcmd`'s `usr.rs`); this is the
//! process side.
//!
//! A process group is not a jail: a program that calls `setsid` or `setpgid` itself leaves it (its
//! own pid still gets the signals). A group id is signalled only while a process of that group *in
//! the owner's session* runs (a scan of `/proc`): a group id freed and reused by another session's
//! process is never signalled.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::config::halcmd::{ProgramState, PROGRAM_GRACE, PROGRAM_POLL};

/// A program `loadusr` started.
struct Program {
    name: String,
    /// The component it was started for (`loadusr -Wn NAME`), if named.
    component: Option<String>,
    child: Child,
    /// Its component's connection ended: the process is ending, and `waitusr` waits for its
    /// status (a process still finishing, say Python's own teardown on a loaded machine, is
    /// not one that only said `exit()`).
    disconnected: bool,
}

/// The programs of one instance.
#[derive(Default)]
pub(super) struct Programs {
    list: Vec<Program>,
    /// The process groups `loadusr` made (each its program's pid), kept after the program is
    /// forgotten while a process of the group still runs: those are ended at the stop too.
    groups: Vec<u32>,
    /// Ends the groups if this process dies without stopping them; started at the first program.
    guard: Option<Guard>,
}

impl Programs {
    /// Starts `program` with `args` for `instance` (its component `component`, if named), in a
    /// process group of its own.
    pub(super) fn spawn(
        &mut self,
        instance: &str,
        program: &str,
        args: &[String],
        component: Option<&str>,
    ) -> std::io::Result<u32> {
        use std::os::unix::process::CommandExt;
        self.prune_groups();
        if self.guard.is_none() {
            // Without a guard the programs still get the death signal; only what they started
            // would outlive a killed owner.
            match Guard::start() {
                Ok(g) => self.guard = Some(g),
                Err(e) => log::warn!(
                    "no guard for the loadusr programs' process groups ({e}): if this process is \
                     killed, what the programs started may outlive it"
                ),
            }
        }
        let mut command = Command::new(program);
        command
            .args(args)
            .env("RTAPI_INSTANCE", instance)
            .stdin(Stdio::null())
            // setpgid(0, 0) in the child before exec: spawn returns once it has exec'd, so the
            // group exists before anyone signals it.
            .process_group(0);
        end_with_parent(&mut command);
        let child = command.spawn()?;
        let pid = child.id();
        self.groups.push(pid);
        if let Some(g) = &mut self.guard {
            g.register(pid);
        }
        self.list.push(Program {
            name: program.to_string(),
            component: component.map(str::to_string),
            child,
            disconnected: false,
        });
        Ok(pid)
    }

    /// Whether program `pid` has ended: reaped here (a zombie has ended) and forgotten once it has.
    pub(super) fn state(&mut self, pid: u32) -> ProgramState {
        let Some(i) = self.list.iter().position(|p| p.child.id() == pid) else {
            return ProgramState::NotOurs;
        };
        match self.list[i].child.try_wait() {
            Ok(None) => ProgramState::Alive,
            Ok(Some(status)) => {
                self.list.remove(i);
                ProgramState::Ended(Some(status))
            }
            Err(_) => {
                self.list.remove(i);
                ProgramState::Ended(None)
            }
        }
    }

    /// Whether program `pid` is one started here and not yet forgotten.
    pub(super) fn knows(&self, pid: u32) -> bool {
        self.list.iter().any(|p| p.child.id() == pid)
    }

    /// Stops program `pid` and its process group (SIGTERM, then SIGKILL after the grace period)
    /// and forgets it.
    pub(super) fn terminate(&mut self, pid: u32) {
        if let Some(i) = self.list.iter().position(|p| p.child.id() == pid) {
            let mut p = vec![self.list.remove(i)];
            let group: Vec<u32> = self.groups.iter().copied().filter(|&g| g == pid).collect();
            end(&mut p, &group);
            self.groups.retain(|&g| g != pid);
            if let Some(g) = &mut self.guard {
                g.unregister(pid);
            }
        }
    }

    /// Notes that the connection of component `component` (declared by process `pid`) ended.
    pub(super) fn disconnected(&mut self, pid: Option<u32>, component: &str) {
        for p in &mut self.list {
            if Some(p.child.id()) == pid || p.component.as_deref() == Some(component) {
                p.disconnected = true;
            }
        }
    }

    /// Whether program `pid`'s component's connection ended.
    pub(super) fn is_disconnected(&self, pid: u32) -> bool {
        self.list
            .iter()
            .any(|p| p.child.id() == pid && p.disconnected)
    }

    /// The program started for component `component` (`loadusr -Wn`), if it is still known.
    pub(super) fn started_for(&self, component: &str) -> Option<u32> {
        self.list
            .iter()
            .find(|p| p.component.as_deref() == Some(component))
            .map(|p| p.child.id())
    }

    /// Reaps the programs that ended (no zombies while the instance runs); their status stays in
    /// their handles for `waitusr` and `loadusr -w`.
    pub(super) fn reap(&mut self) {
        for p in &mut self.list {
            let _ = p.child.try_wait();
        }
    }

    /// Stops every program and every process group `loadusr` made (SIGTERM to all, then SIGKILL
    /// to what is still there after the grace period); the guard ends after them.
    pub(super) fn stop_all(&mut self) {
        let mut programs = std::mem::take(&mut self.list);
        let groups = std::mem::take(&mut self.groups);
        for p in &programs {
            log::debug!("stopping loadusr program {}", p.name);
        }
        end(&mut programs, &groups);
        if let Some(g) = self.guard.take() {
            g.end();
        }
    }

    /// Forgets the groups whose program is forgotten and in which nothing runs any more (the
    /// list stays as long as what still runs).
    fn prune_groups(&mut self) {
        let sid = session();
        let mut gone = Vec::new();
        let list = &self.list;
        self.groups.retain(|&g| {
            let keep = list.iter().any(|p| p.child.id() == g) || group_running(g, sid);
            if !keep {
                gone.push(g);
            }
            keep
        });
        if let Some(guard) = &mut self.guard {
            for g in gone {
                guard.unregister(g);
            }
        }
    }
}

impl Drop for Programs {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Ends `programs` and the process groups `groups` (of this session): SIGTERM to each group in
/// which something runs, and to each program that left its group; SIGKILL to all of them that
/// still run after the grace period; reaps the programs.
fn end(programs: &mut [Program], groups: &[u32]) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    let sid = session();
    let running = |g: &u32| group_running(*g, sid);
    // A program outside its group (it called setpgid or setsid) is signalled by its pid.
    let outside = |p: &mut Program| {
        let pid = Pid::from_raw(p.child.id() as i32);
        matches!(p.child.try_wait(), Ok(None)) && nix::unistd::getpgid(Some(pid)) != Ok(pid)
    };
    let signal_all = |programs: &mut [Program], sig: Signal| {
        for &g in groups.iter().filter(|g| running(g)) {
            let _ = killpg(Pid::from_raw(g as i32), sig);
        }
        for p in programs.iter_mut() {
            if outside(p) {
                let _ = kill(Pid::from_raw(p.child.id() as i32), sig);
            }
        }
    };
    let all_ended = |programs: &mut [Program]| {
        programs
            .iter_mut()
            .all(|p| !matches!(p.child.try_wait(), Ok(None)))
            && !groups.iter().any(running)
    };
    if all_ended(programs) {
        return;
    }
    signal_all(programs, Signal::SIGTERM);
    let until = Instant::now() + PROGRAM_GRACE;
    while Instant::now() < until {
        if all_ended(programs) {
            return;
        }
        std::thread::sleep(PROGRAM_POLL);
    }
    signal_all(programs, Signal::SIGKILL);
    for p in programs.iter_mut() {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
}

/// This process's session id.
fn session() -> i32 {
    // SAFETY: getsid(0) reads this process's session id; no memory is involved.
    unsafe { libc::getsid(0) }
}

/// Whether a process of process group `pgid` in session `sid` still runs (a zombie has ended):
/// a scan of `/proc/*/stat` by system calls into buffers on the stack, allocating nothing and
/// taking no lock, so that the guard (a forked child of a threaded process) may call it too.
/// `false` when `/proc` cannot be read: a group that cannot be seen is not signalled.
fn group_running(pgid: u32, sid: i32) -> bool {
    let Ok(pgid) = i32::try_from(pgid) else {
        return false;
    };
    // SAFETY: open(2) of a NUL-terminated literal path.
    let dir = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return false;
    }
    // linux_dirent64 records: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name (NUL-ended).
    let mut buf = [0u64; 1024];
    let mut found = false;
    'scan: loop {
        // SAFETY: getdents64 writes at most the buffer's size in bytes into the buffer.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                buf.as_mut_ptr(),
                std::mem::size_of_val(&buf),
            )
        };
        if n <= 0 {
            break;
        }
        // SAFETY: the buffer is plain memory of this size; getdents64 filled its first n bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), std::mem::size_of_val(&buf))
        };
        let bytes = &bytes[..n as usize];
        let mut off = 0;
        while off + 19 < bytes.len() {
            let reclen = usize::from(u16::from_ne_bytes([bytes[off + 16], bytes[off + 17]]));
            if reclen == 0 {
                break 'scan;
            }
            let rec = &bytes[off + 19..(off + reclen).min(bytes.len())];
            let name = &rec[..rec.iter().position(|&b| b == 0).unwrap_or(rec.len())];
            if stat_in_group(name, pgid, sid) {
                found = true;
                break 'scan;
            }
            off += reclen;
        }
    }
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(dir) };
    found
}

/// Whether `/proc/<pid>/stat` of the process named by `pid` (decimal digits) says it runs (not a
/// zombie) in group `pgid` of session `sid`. Allocates nothing.
fn stat_in_group(pid: &[u8], pgid: i32, sid: i32) -> bool {
    if pid.is_empty() || pid.len() > 10 || !pid.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let mut path = [0u8; 32];
    let parts: [&[u8]; 3] = [b"/proc/", pid, b"/stat\0"];
    let mut len = 0;
    for part in parts {
        path[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    // SAFETY: the path is NUL-terminated within the buffer.
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mut text = [0u8; 1024];
    // SAFETY: read(2) writes at most the buffer's length into it.
    let n = unsafe { libc::read(fd, text.as_mut_ptr().cast(), text.len()) };
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    if n <= 0 {
        return false;
    }
    let text = &text[..n as usize];
    // `pid (comm) state ppid pgrp session …`: comm may hold anything, the fields follow its last ')'.
    let Some(close) = text.iter().rposition(|&b| b == b')') else {
        return false;
    };
    let mut fields = text[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let state = fields.next().and_then(|f| f.first().copied());
    let _ppid = fields.next();
    let number = |f: Option<&[u8]>| -> Option<i32> {
        let f = f?;
        let mut v: i32 = 0;
        for &b in f {
            if !b.is_ascii_digit() {
                return None;
            }
            v = v.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
        }
        Some(v)
    };
    let group = number(fields.next());
    let session = number(fields.next());
    !matches!(state, None | Some(b'Z') | Some(b'X')) && group == Some(pgid) && session == Some(sid)
}

/// The guard: a forked child of the owner that holds the read end of a pipe whose write end only
/// the owner holds (close-on-exec: no program inherits it). The owner writes each group it makes
/// (`+pgid`, as an i32) and each it forgets (`-pgid`); the guard keeps the list. When the pipe
/// reaches EOF — the owner died, however (SIGKILL included), or stopped its programs and closed
/// it — the guard SIGKILLs every listed group in which a process of the owner's session still
/// runs, and exits. It is in a process group of its own and ignores the signals a terminal or a
/// session's end sends, so that what ends the owner does not end it first.
struct Guard {
    pid: libc::pid_t,
    /// The pipe's write end.
    tell: std::fs::File,
}

/// How many groups the guard keeps (more are not guarded: `loadusr` is not called thousands of
/// times, and groups in which nothing runs any more are forgotten at each `loadusr`).
const GUARD_GROUPS: usize = 1024;

impl Guard {
    fn start() -> std::io::Result<Guard> {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let sid = session();
        let (rfd, wfd) = (r.as_raw_fd(), w.as_raw_fd());
        // SAFETY: fork(2) in a threaded process: the child runs only `guard_main`, which makes
        // system calls into buffers on its stack, allocates nothing, takes no lock, and ends by
        // `_exit` (no destructor, no atexit handler runs in the child).
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()),
            0 => guard_main(rfd, wfd, sid),
            pid => {
                drop(r);
                Ok(Guard {
                    pid,
                    tell: std::fs::File::from(w),
                })
            }
        }
    }

    fn register(&mut self, pgid: u32) {
        self.tell_guard(pgid as i32);
    }

    fn unregister(&mut self, pgid: u32) {
        self.tell_guard(-(pgid as i32));
    }

    fn tell_guard(&mut self, v: i32) {
        // A guard that is gone (someone killed it) only guards nothing: EPIPE is not an error here.
        let _ = self.tell.write_all(&v.to_ne_bytes());
    }

    /// Closes the pipe (the guard ends whatever of its groups still runs, nothing after a stop)
    /// and reaps the guard (SIGKILL if it has not ended within a few seconds).
    fn end(self) {
        let Guard { pid, tell } = self;
        drop(tell);
        let until = Instant::now() + std::time::Duration::from_secs(5);
        let mut status = 0;
        loop {
            // SAFETY: waitpid(2) of our own child, writing its status into a local.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r != 0 {
                return;
            }
            if Instant::now() >= until {
                log::warn!("the loadusr guard (pid {pid}) did not end: SIGKILL");
                // SAFETY: kill(2) and a blocking waitpid(2) of our own child, not yet reaped.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return;
            }
            std::thread::sleep(PROGRAM_POLL);
        }
    }
}

/// The guard's whole life, in the forked child (see [`Guard`]): only system calls and code that
/// allocates nothing.
fn guard_main(r: i32, w: i32, sid: i32) -> ! {
    // SAFETY: in the forked child: close(2), prctl(2), setpgid(2), signal(2) (sigaction),
    // close_range(2), read(2), kill(2) and _exit(2) are system calls; the buffers are on the stack.
    unsafe {
        libc::close(w);
        libc::prctl(libc::PR_SET_NAME, c"rtapi-guard".as_ptr(), 0, 0, 0);
        libc::setpgid(0, 0);
        for sig in [
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGHUP,
            libc::SIGTERM,
            libc::SIGTSTP,
            libc::SIGTTIN,
            libc::SIGTTOU,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        // Nothing of the owner's but the pipe: a connection or socket it holds must close when
        // the owner closes it, not when the guard ends.
        if r > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, (r - 1) as u32, 0u32);
        }
        if libc::syscall(libc::SYS_close_range, (r + 1) as u32, u32::MAX, 0u32) != 0 {
            for fd in (r + 1)..4096 {
                libc::close(fd);
            }
        }
        let mut groups = [0i32; GUARD_GROUPS];
        let mut n = 0usize;
        'read: loop {
            let mut rec = [0u8; 4];
            let mut got = 0usize;
            while got < rec.len() {
                let k = libc::read(r, rec[got..].as_mut_ptr().cast(), rec.len() - got);
                if k > 0 {
                    got += k as usize;
                } else if k < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                } else {
                    // EOF: the owner is gone, or stopped its programs.
                    break 'read;
                }
            }
            let v = i32::from_ne_bytes(rec);
            if v > 0 && n < groups.len() {
                groups[n] = v;
                n += 1;
            } else if v < 0 {
                if let Some(i) = groups[..n].iter().position(|&g| g == -v) {
                    groups[i] = groups[n - 1];
                    n -= 1;
                }
            }
        }
        for &g in &groups[..n] {
            if group_running(g as u32, sid) {
                libc::kill(-g, libc::SIGKILL);
            }
        }
        libc::_exit(0)
    }
}

/// The program gets SIGKILL when its parent ends, however it ends (SIGKILL included):
/// `PR_SET_PDEATHSIG`, set in the child between fork and exec. SIGKILL, not SIGTERM: a program
/// that ignores SIGTERM must not outlive a killed owner (what it started is the guard's). The
/// kernel sends it when the *thread* that forked ends, so programs are started only from threads
/// that live as long as the instance: the owner's main thread (its files, its prompt) and the
/// control socket's one executor thread (every client's commands; it ends only when the instance
/// stops, when the programs are stopped anyway).
fn end_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed: prctl and getppid are system calls that allocate nothing and take no lock.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the prctl: then no signal comes; do not start.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "the instance ended while starting it",
                ));
            }
            Ok(())
        });
    }
}
