//! What a [`Session`](super::Session) emits to beyond its netlist model: the interpreter keeps the
//! model and decides every change; a [`Backend`] is where the changes go once an instance runs.
//!
//! The config layer never holds a running instance. Parsing a machine's `.hal` files,
//! `Machine::apply` and the unit tests use [`NoInstance`] (a session that only models); the owner of
//! a running instance uses the backend of the `instance` layer, which keeps the started runtime and
//! makes each change in its segment and threads through [`Live`]. The interpreter calls these in
//! the order that never breaks a HAL rule (`sync.rs`), so an implementation does each step as asked
//! and reports what it refused.

use std::process::ExitStatus;

use rtapi_hal::{HalError, Value, ValueType};

use super::user::UserComponent;
use crate::components::{LoadError, Target};
use crate::config::{ConfigError, StartError};
use crate::runtime::RuntimeError;

/// A `loadrt` made in a running instance: loads into the target given (the live segment).
pub type LiveLoad<'a> = &'a dyn Fn(&mut dyn Target) -> Result<Vec<String>, LoadError>;

/// Emits the session's model to a target (the dry run's, then the real runtime's).
pub type Apply<'a> = &'a dyn Fn(&mut dyn Target) -> Result<(), ConfigError>;

/// A running instance as the interpreter changes it: each method is one whole HAL operation.
pub trait Live {
    /// Loads a component (one `loadrt`): all of it or, refused part-way, nothing (what it made
    /// before the refusal is removed again, room included).
    fn load(&self, load: LiveLoad<'_>) -> Result<(), LoadError>;
    /// Creates an unlinked signal.
    fn new_signal(&self, name: &str, ty: ValueType) -> Result<(), HalError>;
    /// Unlinks a pin from its signal.
    fn unlink(&self, pin: &str) -> Result<(), HalError>;
    /// Links a pin to a signal.
    fn link(&self, pin: &str, signal: &str) -> Result<(), HalError>;
    /// Deletes a signal (its pins are unlinked already).
    fn delete_signal(&self, name: &str) -> Result<(), HalError>;
    /// Sets an undriven signal's value.
    fn sets(&self, name: &str, value: Value) -> Result<(), HalError>;
    /// Sets a param or an unlinked pin.
    fn setp(&self, name: &str, value: Value) -> Result<(), HalError>;
    /// Removes a function from a thread's run list.
    fn delf(&self, function: &str, thread: &str) -> Result<(), RuntimeError>;
    /// Adds a function to a thread's run list at `position`.
    fn addf(&self, function: &str, thread: &str, position: usize) -> Result<(), RuntimeError>;
    /// Unloads the components `names` of one `loadrt` (`component`), whose `functions` have left
    /// every thread: the functions go now, then the components, then a LinuxCNC module's exit.
    fn unload(
        &self,
        component: &str,
        names: &[String],
        functions: &[String],
    ) -> Result<(), HalError>;
    /// A pin's, param's or signal's value in the segment.
    fn read(&self, name: &str) -> Option<Value>;
    /// `start` / `stop`: the threads run their functions or only keep time.
    fn run_functions(&self, on: bool);
    /// Whether the instance is stopping (a signal, a stall): what runs now gives up.
    fn stopping(&self) -> bool;
    /// Makes a user-space component in the segment with every pin and param, in one change.
    fn add_user(&self, component: &UserComponent) -> Result<(), HalError>;
    /// Deletes a component from the segment (a user-space one leaving).
    fn delete_component(&self, name: &str) -> Result<(), HalError>;
}

/// Where a session's changes go besides its model.
pub trait Backend: Default + Send {
    /// The running instance, once started.
    fn live(&self) -> Option<&dyn Live> {
        None
    }
    /// halcmd's `start` while nothing runs: build the instance from `apply` and start it. `None`:
    /// this backend starts nothing (`start` then only marks the file as started).
    fn start(&mut self, apply: Apply<'_>) -> Option<Result<(), StartError>> {
        let _ = apply;
        None
    }
    /// `loadusr`: starts `program` with `args` as a child of the instance's owner, for instance
    /// `instance` (and its component `component`, if named); its pid.
    fn spawn(
        &mut self,
        instance: &str,
        program: &str,
        args: &[String],
        component: Option<&str>,
    ) -> std::io::Result<u32> {
        let _ = (instance, program, args, component);
        Err(std::io::Error::other("nothing runs programs here"))
    }
    /// Whether program `pid` (one [`spawn`](Self::spawn) started) has ended; an ended one is
    /// forgotten.
    fn program(&mut self, pid: u32) -> ProgramState {
        let _ = pid;
        ProgramState::NotOurs
    }
    /// Whether program `pid` is one [`spawn`](Self::spawn) started and not yet forgotten.
    fn knows(&self, pid: u32) -> bool {
        let _ = pid;
        false
    }
    /// Stops program `pid` (SIGTERM, then SIGKILL after [`PROGRAM_GRACE`](super::PROGRAM_GRACE))
    /// and forgets it.
    fn terminate(&mut self, pid: u32) {
        let _ = pid;
    }
    /// The connection of user-space component `component` (declared by process `pid`) ended: its
    /// program is ending.
    fn disconnected(&mut self, pid: Option<u32>, component: &str) {
        let _ = (pid, component);
    }
    /// Whether program `pid`'s component's connection ended.
    fn is_disconnected(&self, pid: u32) -> bool {
        let _ = pid;
        false
    }
    /// The program started for component `component` (`loadusr -Wn`), while it is known.
    fn started_for(&self, component: &str) -> Option<u32> {
        let _ = component;
        None
    }
}

/// A program's state, as its backend knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramState {
    /// Not a program this backend started (or one already forgotten).
    NotOurs,
    /// Still running.
    Alive,
    /// Ended: its status, if it could be read.
    Ended(Option<ExitStatus>),
}

/// A session that only models: nothing runs, nothing is started.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoInstance;

impl Backend for NoInstance {}
