//! `loadusr [-W | -Wn NAME] [-w] [-i] PROGRAM ARGS…`: a user-space program started by the backend as
//! a child of the instance's owner, with `RTAPI_INSTANCE` set to the instance so that
//! `rtapi.component()` (the Python module) joins it without being told. `-W`/`-Wn NAME` waits until
//! the component NAME is ready (at most [`READY_TIMEOUT`]), `-w` until the program exits (`-i`:
//! whatever its status). The programs are stopped with the instance: SIGTERM, then SIGKILL after
//! [`PROGRAM_GRACE`]. `waitusr NAME` waits until user-space component NAME is gone, `unloadusr NAME
//! | all` ends its process (SIGTERM, then SIGKILL) and removes it; both know the process from the
//! control socket's peer credentials.
//!
//! A program joins a running instance, so `loadusr` comes after `start`; before it, it is refused with
//! that advice. While it waits, the session (locked by the caller) adds the components that ask to
//! join ([`Session::serve_user_inbox`]), so the program it waits for can become ready.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::backend::{Backend, ProgramState};
use super::output;
use super::parse::UsrFlags;
use super::{CommandError, CommandErrorKind, Session, Word};
use crate::rt::units::quote;

/// How long `loadusr -W` waits for the component.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a program has to end after SIGTERM before SIGKILL.
pub const PROGRAM_GRACE: Duration = Duration::from_secs(2);
/// How often a wait for a program looks again.
pub const PROGRAM_POLL: Duration = Duration::from_millis(5);

/// How long `waitusr` waits for the status of a program whose component's connection ended;
/// one whose component only said `exit()` gets [`EXIT_GRACE`].
const DISCONNECT_GRACE: Duration = Duration::from_secs(10);
const EXIT_GRACE: Duration = Duration::from_millis(50);

/// "exited with status 3" / "was killed by signal 9".
fn status_text(s: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("ended ({s})"),
    }
}

/// The end of `waitusr NAME` whose program ended with `status` (if read): a failing status is an
/// error unless `-i` (`ignore_status`).
fn waitusr_end(
    name: &Word,
    status: Option<ExitStatus>,
    ignore_status: bool,
) -> Result<(), CommandError> {
    match status {
        Some(status) if !status.success() && !ignore_status => Err(CommandError::program(
            name.line,
            format!(
                "waitusr {}: its program {}",
                quote(&name.text),
                status_text(status)
            ),
        )),
        _ => Ok(()),
    }
}

impl<H: Backend> Session<H> {
    pub(super) fn loadusr(
        &mut self,
        flags: &UsrFlags,
        program: &Word,
        args: &[Word],
    ) -> Result<(), CommandError> {
        let line = program.line;
        let name = quote(&program.text);
        if self.backend.live().is_none() {
            return Err(CommandError::rule(
                line,
                output::loadusr_refusal(flags, &program.text),
            ));
        }
        let args: Vec<String> = args.iter().map(|a| a.text.clone()).collect();
        let pid = self
            .backend
            .spawn(
                &self.instance,
                &program.text,
                &args,
                flags.wait_component.as_deref(),
            )
            .map_err(|e| {
                CommandError::program(line, format!("loadusr: cannot start {name}: {e}"))
            })?;
        if let Some(comp) = &flags.wait_component {
            let until = Instant::now() + READY_TIMEOUT;
            loop {
                self.serve_user_inbox();
                if self.model.user.iter().any(|u| &u.name == comp) {
                    break;
                }
                match self.backend.program(pid) {
                    ProgramState::NotOurs => break,
                    ProgramState::Alive => {}
                    // Ended (its status unreadable, or read): not ready, whatever it said.
                    ProgramState::Ended(status) => {
                        return Err(CommandError::program(
                            line,
                            format!(
                                "loadusr: {name} {} before its component {} was ready",
                                status.map_or("ended".to_string(), status_text),
                                quote(comp)
                            ),
                        ));
                    }
                }
                if Instant::now() >= until || self.aborted() {
                    self.backend.terminate(pid);
                    return Err(CommandError::program(
                        line,
                        format!(
                            "loadusr: {name} did not make component {} ready within {} s; it was stopped",
                            quote(comp),
                            READY_TIMEOUT.as_secs()
                        ),
                    ));
                }
                std::thread::sleep(PROGRAM_POLL);
            }
        }
        if flags.wait_exit {
            loop {
                if self.aborted() {
                    return Err(CommandError::stopping(
                        line,
                        format!("loadusr -w {name}: {}", super::STOPPING),
                    ));
                }
                self.serve_user_inbox();
                match self.backend.program(pid) {
                    ProgramState::NotOurs | ProgramState::Ended(None) => break,
                    ProgramState::Alive => {}
                    ProgramState::Ended(Some(status)) => {
                        if !status.success() && !flags.ignore_status {
                            return Err(CommandError::program(
                                line,
                                format!("loadusr: {name} {}", status_text(status)),
                            ));
                        }
                        break;
                    }
                }
                std::thread::sleep(PROGRAM_POLL);
            }
        }
        Ok(())
    }

    /// Whether process `pid` has ended — a program `loadusr` started is reaped by the backend (a
    /// zombie has ended) and gives its status; another process is asked with `kill(pid, 0)`.
    fn process_ended(&mut self, pid: u32) -> Option<Option<ExitStatus>> {
        match self.backend.program(pid) {
            ProgramState::Alive => None,
            ProgramState::Ended(status) => Some(status),
            ProgramState::NotOurs => {
                let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None)
                    == Err(nix::errno::Errno::ESRCH);
                gone.then_some(None)
            }
        }
    }

    /// The end of program `pid`, whose component has left: waited for up to [`DISCONNECT_GRACE`]
    /// when the component's connection ended (the process is ending), [`EXIT_GRACE`] when it only
    /// said `exit()`; `None` if it still runs then (or the instance stops meanwhile).
    fn program_status(&mut self, pid: u32) -> Option<Option<ExitStatus>> {
        let disconnected = self.backend.is_disconnected(pid);
        let until = Instant::now()
            + if disconnected {
                DISCONNECT_GRACE
            } else {
                EXIT_GRACE
            };
        loop {
            let ended = self.process_ended(pid);
            if ended.is_some() || Instant::now() >= until || self.aborted() {
                return ended;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Notes that user-space component `name`'s connection ended: its program (started here) is
    /// ending. Call before the component is removed from the model.
    pub(super) fn program_disconnected(&mut self, name: &str) {
        let pid = self
            .model
            .user
            .iter()
            .find(|u| u.name == name)
            .and_then(|u| u.pid);
        self.backend.disconnected(pid, name);
    }

    /// The pid of user-space component `name`, or the error `what` reports.
    fn user_pid(&self, what: &str, name: &Word) -> Result<Option<u32>, CommandError> {
        match self.model.user.iter().find(|u| u.name == name.text) {
            Some(u) => Ok(u.pid),
            None => Err(CommandError::rule(
                name.line,
                format!(
                    "{what} {}: no user-space component of that name is loaded{}",
                    quote(&name.text),
                    if self.model.user.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (there are: {})",
                            self.model
                                .user
                                .iter()
                                .map(|u| u.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ),
            )),
        }
    }

    /// `waitusr [-i] NAME`: waits until user-space component NAME is gone — its process said
    /// `exit()`, ended, or was killed. When its program was started by `loadusr`, a failing exit
    /// status is an error (unless `-i`).
    pub(super) fn waitusr(&mut self, name: &Word, ignore_status: bool) -> Result<(), CommandError> {
        self.serve_user_inbox();
        let pid = match self.user_pid("waitusr", name) {
            Ok(pid) => pid,
            Err(e) => {
                // Started here for that component (`loadusr -Wn NAME`) and already gone: LinuxCNC's
                // "not found or already exited" is no error, and neither is it here; only a failing
                // exit status of its program is (unless -i).
                let Some(pid) = self.backend.started_for(&name.text) else {
                    return Err(e);
                };
                return waitusr_end(name, self.program_status(pid).flatten(), ignore_status);
            }
        };
        loop {
            if self.aborted() {
                return Err(CommandError::stopping(
                    name.line,
                    format!("waitusr {}: {}", quote(&name.text), super::STOPPING),
                ));
            }
            // Departures (and arrivals) that came while this command holds the session.
            self.serve_user_inbox();
            let mut ended = pid.and_then(|p| self.process_ended(p));
            if ended.is_none() && !self.model.user.iter().any(|u| u.name == name.text) {
                // It left. If its program is ending (its connection ended), take its status; a
                // program that only said `exit()` goes on.
                let ours = pid.filter(|p| self.backend.knows(*p));
                ended = ours.and_then(|p| self.program_status(p));
                if ended.is_none() {
                    return Ok(());
                }
            }
            if let Some(ended) = ended {
                // Its connection's end may not have reached us yet: remove it now.
                let _ = self.remove_user_component(&name.text);
                return waitusr_end(name, ended, ignore_status);
            }
            std::thread::sleep(PROGRAM_POLL);
        }
    }

    /// `unloadusr NAME | all`: asks the process of user-space component NAME (every one for `all`) to
    /// end — SIGTERM, then SIGKILL after the grace period — and removes the component.
    pub(super) fn unloadusr(&mut self, name: &Word) -> Result<(), CommandError> {
        self.serve_user_inbox();
        let targets: Vec<(String, Option<u32>)> = if name.text == "all" {
            self.model
                .user
                .iter()
                .map(|u| (u.name.clone(), u.pid))
                .collect()
        } else {
            vec![(name.text.clone(), self.user_pid("unloadusr", name)?)]
        };
        let me = std::process::id();
        for (comp, pid) in &targets {
            // Never ourselves (a component declared through our own socket by this process).
            if let Some(pid) = pid.filter(|&p| p != me) {
                let target = nix::unistd::Pid::from_raw(pid as i32);
                let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGTERM);
                // Gone: the process ended, or its connection closed (a process whose parent has
                // not reaped it yet is a zombie that `kill(pid, 0)` still finds).
                let gone = |s: &mut Session<H>| {
                    s.serve_user_inbox();
                    s.process_ended(pid).is_some() || !s.model.user.iter().any(|u| &u.name == comp)
                };
                let until = Instant::now() + PROGRAM_GRACE;
                while !gone(self) {
                    if Instant::now() >= until {
                        let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
                        let until = Instant::now() + PROGRAM_GRACE;
                        while !gone(self) && Instant::now() < until {
                            std::thread::sleep(PROGRAM_POLL);
                        }
                        break;
                    }
                    std::thread::sleep(PROGRAM_POLL);
                }
            }
            self.serve_user_inbox();
            self.remove_user_component(comp).map_err(|e| {
                CommandError::new(
                    name.line,
                    CommandErrorKind::LiveHal,
                    format!("unloadusr: {e}"),
                )
            })?;
        }
        Ok(())
    }
}
