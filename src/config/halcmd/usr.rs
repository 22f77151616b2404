//! `loadusr [-W | -Wn NAME] [-w] [-i] PROGRAM ARGS…`: a user-space program started as a child of
//! the instance's owner, with `RTAPI_INSTANCE` set to the instance so that `rtapi.component()` (the
//! Python module) joins it without being told. `-W`/`-Wn NAME` waits until the component NAME is
//! ready (at most [`READY_TIMEOUT`]), `-w` until the program exits (`-i`: whatever its status). The
//! programs are stopped with the instance: SIGTERM, then SIGKILL after [`GRACE`]. `waitusr NAME`
//! waits until user-space component NAME is gone, `unloadusr NAME | all` ends its process (SIGTERM,
//! then SIGKILL) and removes it; both know the process from the control socket's peer credentials.
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
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a program has to end after SIGTERM before SIGKILL.
pub(super) const GRACE: Duration = Duration::from_secs(2);
/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(5);

/// A program `loadusr` started.
pub(super) struct Program {
    name: String,
    /// The component it was started for (`loadusr -Wn NAME`), if named.
    component: Option<String>,
    child: Child,
    /// Its component's connection ended: the process is ending, and `waitusr` waits for its
    /// status (a process still finishing, say Python's own teardown on a loaded machine, is
    /// not one that only said `exit()`).
    disconnected: bool,
}

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

/// The program gets SIGTERM when its parent ends, however it ends (SIGKILL included):
/// `PR_SET_PDEATHSIG`, set in the child between fork and exec. The kernel sends it when the
/// *thread* that forked ends, so programs are started only from threads that live as long as the
/// instance: the owner's main thread (its files, its prompt) and the control socket's one executor
/// thread (every client's commands; it ends only when the instance stops, when the programs are
/// stopped anyway).
fn end_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // calls are allowed: prctl and getppid are system calls that allocate nothing and take no lock.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
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

impl Session {
    /// Reaps the `loadusr` programs that ended (no zombies while the instance runs); their status
    /// stays known to `waitusr` and `loadusr -w`.
    pub fn reap_programs(&mut self) {
        for p in &mut self.programs {
            // A reaped child keeps its status in its handle.
            let _ = p.child.try_wait();
        }
    }

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
        let mut command = Command::new(&program.text);
        command
            .args(args.iter().map(|a| a.text.as_str()))
            .env("RTAPI_INSTANCE", &self.instance)
            .stdin(Stdio::null());
        end_with_parent(&mut command);
        let child = command
            .spawn()
            .map_err(|e| (line, format!("loadusr: cannot start {name}: {e}")))?;
        let pid = child.id();
        self.programs.push(Program {
            name: program.text.clone(),
            component: flags.wait_component.clone(),
            child,
            disconnected: false,
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
                if Instant::now() >= until || self.aborted() {
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
                if self.aborted() {
                    return Err((line, format!("loadusr -w {name}: {}", super::STOPPING)));
                }
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

    /// Whether process `pid` has ended — a program `loadusr` started is reaped here (a zombie has
    /// ended) and gives its status; another process is asked with `kill(pid, 0)`.
    fn process_ended(&mut self, pid: u32) -> Option<Option<ExitStatus>> {
        if let Some(i) = self.programs.iter().position(|p| p.child.id() == pid) {
            return match self.programs[i].child.try_wait() {
                Ok(None) => None,
                Ok(Some(status)) => {
                    self.programs.remove(i);
                    Some(Some(status))
                }
                Err(_) => {
                    self.programs.remove(i);
                    Some(None)
                }
            };
        }
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None)
            == Err(nix::errno::Errno::ESRCH);
        gone.then_some(None)
    }

    /// The end of program `pid`, whose component has left: waited for up to [`DISCONNECT_GRACE`]
    /// when the component's connection ended (the process is ending), [`EXIT_GRACE`] when it only
    /// said `exit()`; `None` if it still runs then (or the instance stops meanwhile).
    fn program_status(&mut self, pid: u32) -> Option<Option<ExitStatus>> {
        let disconnected = self
            .programs
            .iter()
            .any(|p| p.child.id() == pid && p.disconnected);
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
        for p in &mut self.programs {
            if Some(p.child.id()) == pid || p.component.as_deref() == Some(name) {
                p.disconnected = true;
            }
        }
    }

    /// The pid of user-space component `name`, or the error `what` reports.
    fn user_pid(&self, what: &str, name: &Word) -> Result<Option<u32>, (usize, String)> {
        match self.model.user.iter().find(|u| u.name == name.text) {
            Some(u) => Ok(u.pid),
            None => Err((
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
    pub(super) fn waitusr(
        &mut self,
        name: &Word,
        ignore_status: bool,
    ) -> Result<(), (usize, String)> {
        self.serve_user_inbox();
        let pid = match self.user_pid("waitusr", name) {
            Ok(pid) => pid,
            Err(e) => {
                // Started here for that component (`loadusr -Wn NAME`) and already gone: LinuxCNC's
                // "not found or already exited" is no error, and neither is it here; only a failing
                // exit status of its program is (unless -i).
                let Some(i) = self
                    .programs
                    .iter()
                    .position(|p| p.component.as_deref() == Some(&name.text))
                else {
                    return Err(e);
                };
                let pid = self.programs[i].child.id();
                return match self.program_status(pid) {
                    Some(Some(status)) if !status.success() && !ignore_status => Err((
                        name.line,
                        format!(
                            "waitusr {}: its program {}",
                            quote(&name.text),
                            status_text(status)
                        ),
                    )),
                    _ => Ok(()),
                };
            }
        };
        loop {
            if self.aborted() {
                return Err((
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
                let ours = pid.filter(|p| self.programs.iter().any(|x| x.child.id() == *p));
                ended = ours.and_then(|p| self.program_status(p));
                if ended.is_none() {
                    return Ok(());
                }
            }
            if let Some(ended) = ended {
                // Its connection's end may not have reached us yet: remove it now.
                let _ = self.remove_user_component(&name.text);
                return match ended {
                    Some(status) if !status.success() && !ignore_status => Err((
                        name.line,
                        format!(
                            "waitusr {}: its program {}",
                            quote(&name.text),
                            status_text(status)
                        ),
                    )),
                    _ => Ok(()),
                };
            }
            std::thread::sleep(POLL);
        }
    }

    /// `unloadusr NAME | all`: asks the process of user-space component NAME (every one for `all`) to
    /// end — SIGTERM, then SIGKILL after the grace period — and removes the component.
    pub(super) fn unloadusr(&mut self, name: &Word) -> Result<(), (usize, String)> {
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
                let gone = |s: &mut Session| {
                    s.serve_user_inbox();
                    s.process_ended(pid).is_some() || !s.model.user.iter().any(|u| &u.name == comp)
                };
                let until = Instant::now() + GRACE;
                while !gone(self) {
                    if Instant::now() >= until {
                        let _ = nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGKILL);
                        let until = Instant::now() + GRACE;
                        while !gone(self) && Instant::now() < until {
                            std::thread::sleep(POLL);
                        }
                        break;
                    }
                    std::thread::sleep(POLL);
                }
            }
            self.serve_user_inbox();
            self.remove_user_component(comp)
                .map_err(|e| (name.line, format!("unloadusr: {e}")))?;
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
