//! The programs `loadusr` started, as children of the instance's owner: started with
//! `RTAPI_INSTANCE` set and a death signal tied to the owner, reaped while the instance runs, and
//! stopped with it (SIGTERM to all, then SIGKILL after the grace period). The halcmd interpreter
//! decides when (`config::halcmd`'s `usr.rs`); this is the process side.

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
}

impl Programs {
    /// Starts `program` with `args` for `instance` (its component `component`, if named).
    pub(super) fn spawn(
        &mut self,
        instance: &str,
        program: &str,
        args: &[String],
        component: Option<&str>,
    ) -> std::io::Result<u32> {
        let mut command = Command::new(program);
        command
            .args(args)
            .env("RTAPI_INSTANCE", instance)
            .stdin(Stdio::null());
        end_with_parent(&mut command);
        let child = command.spawn()?;
        let pid = child.id();
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

    /// Stops program `pid` (SIGTERM, then SIGKILL after the grace period) and forgets it.
    pub(super) fn terminate(&mut self, pid: u32) {
        if let Some(i) = self.list.iter().position(|p| p.child.id() == pid) {
            let mut p = self.list.remove(i);
            terminate(&mut p.child);
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

    /// Stops every program (SIGTERM to all, then SIGKILL to those still there after the grace
    /// period).
    pub(super) fn stop_all(&mut self) {
        let mut programs = std::mem::take(&mut self.list);
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

impl Drop for Programs {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// SIGTERM, then SIGKILL after the grace period; reaps it.
fn terminate(child: &mut Child) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let until = Instant::now() + PROGRAM_GRACE;
    while Instant::now() < until {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(PROGRAM_POLL);
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
