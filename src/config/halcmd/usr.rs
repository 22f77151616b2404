//! `loadusr [-W | -Wn NAME] [-w] [-i] PROGRAM ARGS…`: a user-space program started as a child of
//! the instance's owner, with `RTAPI_INSTANCE` set to the instance so that `rtapi.component()` (the
//! Python module) joins it without being told. `-W`/`-Wn NAME` waits until the component NAME is
//! ready (at most [`READY_TIMEOUT`]), `-w` until the program exits (`-i`: whatever its status). The
//! programs are stopped with the instance: SIGTERM, then SIGKILL after [`GRACE`].
//!
//! A program joins a running instance, so `loadusr` comes after `start`; before it, it is refused with
//! that advice. While it waits, the session (locked by the caller) adds the components that ask to
//! join ([`Session::serve_user_inbox`]), so the program it waits for can become ready.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::output;
use super::parse::UsrFlags;
use super::{Session, Word};
use crate::rt::units::quote;

/// How long `loadusr -W` waits for the component.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a program has to end after SIGTERM before SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(5);

/// A program `loadusr` started.
pub(super) struct Program {
    name: String,
    child: Child,
}

/// "exited with status 3" / "was killed by signal 9".
fn status_text(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("ended ({s})"),
    }
}

/// SIGTERM, then SIGKILL after the grace period; reaps it.
fn terminate(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let until = Instant::now() + GRACE;
    while Instant::now() < until {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Session {
    pub(super) fn loadusr(
        &mut self,
        flags: &UsrFlags,
        program: &Word,
        args: &[Word],
    ) -> Result<(), (usize, String)> {
        let line = program.line;
        let name = quote(&program.text);
        if self.live.is_none() {
            return Err((line, output::loadusr_refusal(flags, &program.text)));
        }
        let child = Command::new(&program.text)
            .args(args.iter().map(|a| a.text.as_str()))
            .env("RTAPI_INSTANCE", &self.instance)
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| (line, format!("loadusr: cannot start {name}: {e}")))?;
        let pid = child.id();
        self.programs.push(Program {
            name: program.text.clone(),
            child,
        });
        let index = |s: &Session| s.programs.iter().position(|p| p.child.id() == pid);
        if let Some(comp) = &flags.wait_component {
            let until = Instant::now() + READY_TIMEOUT;
            loop {
                self.serve_user_inbox();
                if self.model.user.iter().any(|u| &u.name == comp) {
                    break;
                }
                let Some(i) = index(self) else { break };
                if let Ok(Some(status)) = self.programs[i].child.try_wait() {
                    self.programs.remove(i);
                    return Err((
                        line,
                        format!(
                            "loadusr: {name} {} before its component {} was ready",
                            status_text(status),
                            quote(comp)
                        ),
                    ));
                }
                if Instant::now() >= until {
                    let mut p = self.programs.remove(i);
                    terminate(&mut p.child);
                    return Err((
                        line,
                        format!(
                            "loadusr: {name} did not make component {} ready within {} s; it was stopped",
                            quote(comp),
                            READY_TIMEOUT.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(POLL);
            }
        }
        if flags.wait_exit {
            loop {
                self.serve_user_inbox();
                let Some(i) = index(self) else { break };
                if let Ok(Some(status)) = self.programs[i].child.try_wait() {
                    self.programs.remove(i);
                    if !status.success() && !flags.ignore_status {
                        return Err((line, format!("loadusr: {name} {}", status_text(status))));
                    }
                    break;
                }
                std::thread::sleep(POLL);
            }
        }
        Ok(())
    }

    /// Stops every program `loadusr` started (SIGTERM to all, then SIGKILL to those still there
    /// after the grace period).
    pub(super) fn stop_programs(&mut self) {
        let mut programs = std::mem::take(&mut self.programs);
        for p in &mut programs {
            if let Ok(None) = p.child.try_wait() {
                let pid = nix::unistd::Pid::from_raw(p.child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
        }
        for p in &mut programs {
            log::debug!("stopping loadusr program {}", p.name);
            terminate(&mut p.child);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop_programs();
    }
}
