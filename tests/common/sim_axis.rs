//! The sim-axis machine as a child process: `rtapi run config/sim-axis.toml`, for the tests that
//! drive it from other processes as an operator would. (Included with `#[path]` by the tests that
//! use it.)

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `rtapi run config/sim-axis.toml --instance <tag>-<pid>` (a stall is only reported, so
/// that a stopped process is not also demoted); continued if stopped, then ended, on drop.
pub struct SimAxis {
    pub child: Child,
    pub instance: String,
}

impl SimAxis {
    /// Starts it for `duration` (e.g. `"20s"`); the caller waits until it is up.
    pub fn spawn(tag: &str, duration: &str) -> SimAxis {
        let instance = format!("{tag}-{}", std::process::id());
        let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
        let child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
            .args(["run", config.to_str().unwrap(), "--duration", duration])
            .args(["--instance", &instance, "--on-stall", "report"])
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        SimAxis { child, instance }
    }

    /// Sends `s` to the whole process (SIGSTOP, SIGCONT, …).
    pub fn signal(&self, s: nix::sys::signal::Signal) {
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
