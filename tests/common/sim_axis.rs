//! The sim-axis machine as a child process: `rtapi run config/sim-axis.toml`, for the tests that
//! drive it from other processes as an operator would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
        let dir = tempfile::tempdir().unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
            .args(["run", config.to_str().unwrap(), "--duration", duration])
            .args(["--instance", &instance, "--on-stall", "report"])
            .env("RUST_LOG", "error")
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
