//! The sim-axis machine as a child process: `rtapi run config/sim-axis.toml`, for the tests that
//! drive it from other processes as an operator would: [`SimAxis`] (its errors logged to a file,
//! stalls only reported, the caller waits for what it needs) and [`Running`] (quiet, up once its
//! servo thread runs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `rtapi run config/sim-axis.toml --duration DURATION --instance INSTANCE` with errors-only
/// logging: the command every sim-axis child starts from.
pub(crate) fn command(instance: &str, duration: &str) -> Command {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args(["run", config.to_str().unwrap(), "--duration", duration])
        .args(["--instance", instance])
        .env("RUST_LOG", "error");
    c
}

/// A running `rtapi run config/sim-axis.toml --instance <tag>-<pid>` (a stall is only reported, so
/// that a stopped process is not also demoted); continued if stopped, then ended, on drop. Its
/// standard error (errors only: stalls, faults) goes to a file, [`SimAxis::log`].
pub(crate) struct SimAxis {
    pub child: Child,
    pub instance: String,
    dir: tempfile::TempDir,
}

impl SimAxis {
    /// Starts it for `duration` (e.g. `"20s"`); the caller waits until it is up.
    pub(crate) fn spawn(tag: &str, duration: &str) -> SimAxis {
        let instance = format!("{tag}-{}", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let child = command(&instance, duration)
            .args(["--on-stall", "report"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        SimAxis {
            child,
            instance,
            dir,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("stderr")
    }

    /// What the run has written to its standard error so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Sends `s` to the whole process (SIGSTOP, SIGCONT, …).
    pub(crate) fn signal(&self, s: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), s).unwrap();
    }
}

impl Drop for SimAxis {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = self.child.wait();
        }
    }
}

/// A sim-axis run whose output is discarded, up once its servo thread has run more than 10 periods;
/// SIGTERM on drop, so that it shuts down cleanly and removes its segment.
pub(crate) struct Running {
    child: Child,
    pub(crate) name: String,
}

impl Running {
    /// Starts instance `name` for `duration` ([`command`], then `prepare`: an environment to
    /// change, …) and waits (10 s at the most) until its servo thread has run.
    pub(crate) fn start(
        name: String,
        duration: &str,
        prepare: impl FnOnce(&mut Command),
    ) -> Running {
        let mut cmd = command(&name, duration);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        prepare(&mut cmd);
        let child = cmd.spawn().unwrap();
        let i = Running { child, name };
        let t0 = Instant::now();
        while i.json(&["show", "thread"])["threads"][1]["cycles"]
            .as_u64()
            .is_none_or(|c| c <= 10)
        {
            assert!(t0.elapsed() < Duration::from_secs(10), "instance never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
        i
    }

    /// `rtapi ARGS --instance NAME`.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        let mut all = args.to_vec();
        all.extend(["--instance", &self.name]);
        super::rtapi(&all)
    }

    /// `rtapi ARGS --json --instance NAME`, parsed; `Null` if it failed.
    pub(crate) fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.run(&all);
        if !out.status.success() {
            return serde_json::Value::Null;
        }
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}
