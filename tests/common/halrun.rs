//! An instance started by `rtapi halrun -f` (a real RT thread, real shared memory) in a child process,
//! for tests that drive it from other processes; and `rtapi halcmd` against it.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a fixture waits for the instance to come up or go.
pub(crate) const T: Duration = Duration::from_secs(10);

/// `rtapi halcmd --instance INSTANCE ARGS`: (success, stdout, stderr).
pub(crate) fn halcmd(instance: &str, args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["halcmd", "--instance", instance];
    all.extend_from_slice(args);
    let o = super::rtapi(&all);
    let (out, err) = super::text(&o);
    (o.status.success(), out, err)
}

/// The arguments of `rtapi halrun` that runs `file` as `instance` and keeps it running after the
/// file's end (halrun -f stops there, as LinuxCNC's does, unless told to go on: `--duration`).
pub(crate) fn kept_running<'a>(instance: &'a str, file: &'a str) -> [&'a str; 7] {
    [
        "halrun",
        "--duration",
        "1h",
        "--instance",
        instance,
        "-f",
        file,
    ]
}

/// `rtapi halrun -f` of a file whose text ends with `start`, running until [`Halrun::stop`] (or drop,
/// which also lets a SIGSTOPped instance go on first).
pub(crate) struct Halrun {
    /// The instance name: `<tag>-<test pid>`.
    pub name: String,
    child: Option<Child>,
    _dir: tempfile::TempDir,
}

impl Halrun {
    /// Writes `body` to a file, starts `rtapi halrun` on it and waits until it takes commands.
    pub(crate) fn start(tag: &str, body: &str) -> Halrun {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.hal");
        std::fs::write(&file, body).unwrap();
        let name = format!("{tag}-{}", std::process::id());
        let child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
            .args(kept_running(&name, file.to_str().unwrap()))
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let until = Instant::now() + T;
        while !halcmd(&name, &["status"]).0 {
            assert!(Instant::now() < until, "halrun {name} did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Halrun {
            name,
            child: Some(child),
            _dir: dir,
        }
    }

    /// Sends `signal` to the halrun process.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(c) = &self.child {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), signal).unwrap();
        }
    }

    /// `rtapi show WHAT --instance NAME`, its standard output.
    pub(crate) fn show(&self, what: &str) -> String {
        let o = super::rtapi(&["show", what, "--instance", &self.name]);
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// SIGTERM, then waits (bounded) for the exit; its output.
    pub(crate) fn stop(&mut self) -> std::process::Output {
        let mut child = self.child.take().unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let until = Instant::now() + T;
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < until, "halrun did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    }
}

impl Halrun {
    /// [`Halrun::stop`], and the end was clean: exit 0, or 1 only for a stall the host caused (a
    /// thread that missed its periods for a while, named in the log; README: a stalled thread exits 1,
    /// whatever followed), which is printed.
    pub(crate) fn stop_cleanly(&mut self) {
        let out = self.stop();
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) => {}
            Some(1) if err.contains("STALLED") => eprintln!("the host stalled a thread: {err}"),
            _ => panic!("halrun {} ended {:?}: {err}", self.name, out.status),
        }
    }
}

impl Drop for Halrun {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}
