//! A child process on a pseudo-terminal, driven like a person at a keyboard: type, wait for text.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A child whose stdin, stdout and stderr are the slave side of a new pseudo-terminal.
pub(crate) struct Pty {
    child: Child,
    /// `None` once [`Pty::hangup`] closed it.
    master: Option<std::fs::File>,
    /// Tells the reader thread to let go of its copy of the master (for a hangup).
    closing: Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Everything the child wrote so far (escape sequences included).
    seen: Arc<Mutex<Vec<u8>>>,
    /// Where the next `expect` starts looking.
    cursor: usize,
}

impl Pty {
    /// Starts `rtapi ARGS` on a new terminal (80×24), errors-only logging, HOME in `home`.
    pub(crate) fn rtapi(args: &[&str], home: &std::path::Path) -> Pty {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtapi"));
        cmd.args(args)
            .env("RUST_LOG", "error")
            .env("HOME", home)
            .env("TERM", "xterm");
        Pty::spawn(cmd)
    }

    /// Starts `cmd` on a new terminal.
    pub(crate) fn spawn(mut cmd: Command) -> Pty {
        let winsize = nix::pty::Winsize {
            ws_row: 24,
            ws_col: 80,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(Some(&winsize), None).expect("openpty");
        // openpty's descriptors are inherited across exec: the child (and every process the test
        // starts later) would hold the master too, and closing ours would never hang up.
        for fd in [&pty.master, &pty.slave] {
            nix::fcntl::fcntl(
                fd.as_raw_fd(),
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            )
            .expect("FD_CLOEXEC");
        }
        let slave: OwnedFd = pty.slave;
        let io = |fd: &OwnedFd| Stdio::from(fd.try_clone().expect("dup slave"));
        cmd.stdin(io(&slave)).stdout(io(&slave)).stderr(io(&slave));
        // SAFETY: setsid, ioctl(TIOCSCTTY) and signal are async-signal-safe and touch only the child: a new
        // session whose controlling terminal is the pty (stdin, fd 0, after the redirection).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if nix::libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // A terminal's program starts with SIGHUP at its default, whatever the test
                // suite was started with (under nohup it is ignored, and a child inherits that).
                nix::libc::signal(nix::libc::SIGHUP, nix::libc::SIG_DFL);
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on the pty");
        drop(slave);
        let master = std::fs::File::from(pty.master);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (mut reader, sink) = (master.try_clone().unwrap(), seen.clone());
        let closing = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop = closing.clone();
        let reader = std::thread::spawn(move || {
            use std::os::fd::AsFd;
            let mut buf = [0u8; 4096];
            // EIO when the child side closes: the end. Looks at `stop` every 50 ms (a hangup
            // needs every copy of the master closed).
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut fds = [nix::poll::PollFd::new(
                    reader.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16)) {
                    Ok(0) => continue,
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break,
                }
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        });
        let _ = master.as_raw_fd();
        Pty {
            child,
            master: Some(master),
            closing,
            reader: Some(reader),
            seen,
            cursor: 0,
        }
    }

    /// Closes the terminal, as closing a terminal window does: every copy of the master goes, so
    /// the child's terminal hangs up (SIGHUP to it, EIO on its reads).
    pub(crate) fn hangup(&mut self) {
        self.closing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.master = None;
    }

    /// Types `text` (use "\r" for Enter, "\t" for Tab).
    pub(crate) fn send(&mut self, text: &str) {
        let master = self.master.as_mut().expect("the terminal was hung up");
        master.write_all(text.as_bytes()).unwrap();
        master.flush().unwrap();
    }

    /// Everything seen so far, escape sequences and carriage returns included.
    pub(crate) fn raw(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }

    /// Everything seen so far, as text with escape sequences removed.
    pub(crate) fn screen(&self) -> String {
        strip_escapes(&String::from_utf8_lossy(&self.seen.lock().unwrap()))
    }

    /// Waits until `what` appears after the previous match (escape sequences ignored); returns the
    /// text from the previous match to the end of this one. Panics with the whole transcript on
    /// timeout.
    pub(crate) fn expect(&mut self, what: &str, timeout: Duration) -> String {
        let until = Instant::now() + timeout;
        loop {
            let raw = self.seen.lock().unwrap().clone();
            let text = strip_escapes(&String::from_utf8_lossy(&raw));
            if let Some(i) = text.get(self.cursor..).and_then(|t| t.find(what)) {
                let end = self.cursor + i + what.len();
                let part = text[self.cursor..end].to_string();
                self.cursor = end;
                return part;
            }
            if Instant::now() >= until {
                panic!(
                    "did not see {what:?} within {timeout:?}; transcript after the last match:\n{}",
                    text.get(self.cursor..).unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the child to exit (bounded), killing it on timeout; then for its last output: the
    /// reader thread ends at the terminal's EOF (EIO once no process has the child side open), so
    /// what the child wrote before it exited is all in [`raw`](Self::raw) (a loaded host can leave
    /// the reader behind the exit).
    pub(crate) fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let until = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.drain(Instant::now() + Duration::from_secs(10));
                return Some(status);
            }
            if Instant::now() >= until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Joins the reader once it has read to the terminal's EOF, waiting until `until` at most (a
    /// process the child left behind may keep the terminal open: then what was read so far stays).
    fn drain(&mut self, until: Instant) {
        while self.reader.as_ref().is_some_and(|r| !r.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(r) = self.reader.take_if(|r| r.is_finished()) {
            let _ = r.join();
        }
    }

    /// The child's pid.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            if self.wait(Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
            }
        }
    }
}

/// Removes ANSI escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL`, two-byte `ESC x`) and
/// carriage returns.
pub(crate) fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                Some('[') => {
                    while let Some(&n) = chars.peek() {
                        chars.next();
                        if ('@'..='~').contains(&n) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    for n in chars.by_ref() {
                        if n == '\u{7}' {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}
