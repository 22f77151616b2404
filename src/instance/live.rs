//! The running instance as its owner process holds it: the halcmd session (the interpreter and its
//! netlist model, `config::halcmd`) over a [`LiveBackend`], which keeps the started runtime and makes
//! each change the interpreter emits in its segment and threads.
//!
//! `rtapi run`, `rtapi halrun` and the control socket's executor hold an [`LiveSession`] session; the
//! config layer below never sees the runtime, only the [`Live`] operations.

use std::collections::HashSet;

use rtapi_hal::{HalError, HalReader, ParamDecl, PinDecl, Value, ValueType, WriteOptions};

use super::programs::Programs;
use crate::components::{LiveTarget, LoadError};
use crate::config::halcmd::{Apply, Backend, Live, LiveLoad, ProgramState, Session, UserComponent};
use crate::config::StartError;
use crate::runtime::{Running, Runtime, RuntimeError, RuntimeOptions};

/// A halcmd session whose `start` starts a real instance and whose later commands change it.
pub type LiveSession = Session<LiveBackend>;

/// Where an owner's session sends its changes: the started runtime, once there is one.
#[derive(Default)]
pub struct LiveBackend {
    attached: Option<Attached>,
    /// Start the instance with these options at the first `start` (halrun's way).
    start_options: Option<RuntimeOptions>,
    /// The programs `loadusr` started, stopped with the instance.
    programs: Programs,
}

/// A started runtime and a reader of its segment.
struct Attached {
    runtime: Runtime<Running>,
    reader: HalReader,
}

impl Backend for LiveBackend {
    fn live(&self) -> Option<&dyn Live> {
        self.attached.as_ref().map(|a| a as &dyn Live)
    }

    fn start(&mut self, apply: Apply<'_>) -> Option<Result<(), StartError>> {
        let options = self.start_options.clone()?;
        let started = super::start::start_with(apply, options).and_then(|running| {
            // The thread that asked (a prompt, a control connection) does not belong on an RT CPU.
            running.keep_caller_off_rt_cpus();
            self.attach(running)
                .map_err(|e| StartError::Runtime(RuntimeError::Segment(e)))
        });
        Some(started)
    }

    fn spawn(
        &mut self,
        instance: &str,
        program: &str,
        args: &[String],
        component: Option<&str>,
    ) -> std::io::Result<u32> {
        self.programs.spawn(instance, program, args, component)
    }

    fn program(&mut self, pid: u32) -> ProgramState {
        self.programs.state(pid)
    }

    fn knows(&self, pid: u32) -> bool {
        self.programs.knows(pid)
    }

    fn terminate(&mut self, pid: u32) {
        self.programs.terminate(pid);
    }

    fn disconnected(&mut self, pid: Option<u32>, component: &str) {
        self.programs.disconnected(pid, component);
    }

    fn is_disconnected(&self, pid: u32) -> bool {
        self.programs.is_disconnected(pid)
    }

    fn started_for(&self, component: &str) -> Option<u32> {
        self.programs.started_for(component)
    }
}

impl LiveBackend {
    fn attach(&mut self, runtime: Runtime<Running>) -> Result<(), HalError> {
        let reader = runtime.hal().reader()?;
        self.attached = Some(Attached { runtime, reader });
        Ok(())
    }
}

impl Session<LiveBackend> {
    /// An empty owner's session for instance `instance`: nothing runs until
    /// [`attach`](Self::attach), or a `start` after [`start_on_start`](Self::start_on_start).
    pub fn owner(
        registry: crate::components::Registry,
        instance: &str,
    ) -> Result<Self, crate::config::ConfigError> {
        Session::with_backend(registry, instance, LiveBackend::default())
    }

    /// From now on, `start` builds and starts the instance with `options` when it is not running
    /// yet, and every later command changes the running instance (halrun's way).
    pub fn start_on_start(&mut self, options: RuntimeOptions) {
        self.backend_mut().start_options = Some(options);
    }

    /// Attaches a started runtime whose HAL was made from this session's model
    /// ([`Session::apply_to`]): commands from now on change it.
    pub fn attach(&mut self, runtime: Runtime<Running>) -> Result<(), HalError> {
        self.backend_mut().attach(runtime)?;
        self.mark_started();
        Ok(())
    }

    /// The running instance, when attached.
    pub fn runtime(&self) -> Option<&Runtime<Running>> {
        self.backend().attached.as_ref().map(|a| &a.runtime)
    }

    /// Reaps the `loadusr` programs that ended (no zombies while the instance runs); their status
    /// stays known to `waitusr` and `loadusr -w`.
    pub fn reap_programs(&mut self) {
        self.backend_mut().programs.reap();
    }

    /// Detaches and returns the running instance (to stop it); the programs `loadusr` started
    /// are stopped first (SIGTERM, then SIGKILL after a grace period).
    pub fn detach(&mut self) -> Option<Runtime<Running>> {
        self.backend_mut().programs.stop_all();
        self.backend_mut().attached.take().map(|a| a.runtime)
    }
}

impl Live for Attached {
    fn load(&self, load: LiveLoad<'_>) -> Result<(), LoadError> {
        let rt = &self.runtime;
        let existing = component_names(&self.reader).map_err(LoadError::from)?;
        let mut target = LiveTarget::new(rt)?;
        if let Err(e) = load(&mut target) {
            // A refused loadrt changes nothing: what it made before it was refused (the first
            // instances of a `count=256` that ran out of room) goes again, room included.
            let undo = unload_new_components(rt, &self.reader, &existing);
            let undo = undo.err().map_or(String::new(), |u| {
                format!(" (and what it made could not all be removed: {u})")
            });
            return Err(LoadError::new(format!("{}{undo}", e.message)));
        }
        Ok(())
    }

    fn new_signal(&self, name: &str, ty: ValueType) -> Result<(), HalError> {
        self.runtime.hal().new_signal(name, ty)
    }

    fn unlink(&self, pin: &str) -> Result<(), HalError> {
        self.runtime.hal().unlink(pin)
    }

    fn link(&self, pin: &str, signal: &str) -> Result<(), HalError> {
        self.runtime.hal().link(pin, signal)
    }

    fn delete_signal(&self, name: &str) -> Result<(), HalError> {
        self.runtime.hal().delete_signal(name)
    }

    fn sets(&self, name: &str, value: Value) -> Result<(), HalError> {
        let force = WriteOptions { force: true };
        self.reader
            .sets_with(name, &value.to_string(), force)
            .map(|_| ())
    }

    fn setp(&self, name: &str, value: Value) -> Result<(), HalError> {
        let force = WriteOptions { force: true };
        self.reader
            .setp_with(name, &value.to_string(), force)
            .map(|_| ())
    }

    fn delf(&self, function: &str, thread: &str) -> Result<(), RuntimeError> {
        self.runtime.delf(function, thread)
    }

    fn addf(&self, function: &str, thread: &str, position: usize) -> Result<(), RuntimeError> {
        self.runtime.addf(function, thread, Some(position))
    }

    fn unload(
        &self,
        component: &str,
        names: &[String],
        functions: &[String],
    ) -> Result<(), HalError> {
        let rt = &self.runtime;
        // Their closures go now (a sampler's FIFO file with them), not at exit.
        if let Err(e) = rt.retire_functions(functions) {
            log::warn!("unloadrt {component}: its functions are kept until the instance ends: {e}");
        }
        for name in names {
            rt.hal().delete_component(name)?;
        }
        // A LinuxCNC module's functions have left their threads: its rtapi_app_exit runs.
        crate::components::linuxcnc::unloaded(rt, names);
        Ok(())
    }

    fn read(&self, name: &str) -> Option<Value> {
        self.reader.get(name).ok()
    }

    fn run_functions(&self, on: bool) {
        self.runtime.set_functions_running(on);
    }

    fn stopping(&self) -> bool {
        self.runtime.stop_probe().poll().is_some()
    }

    fn add_user(&self, c: &UserComponent) -> Result<(), HalError> {
        let pins: Vec<PinDecl> = c
            .pins
            .iter()
            .map(|p| PinDecl {
                name: p.name.clone(),
                dir: p.dir,
                init: Value::from_bits(p.ty, 0),
            })
            .collect();
        let params: Vec<ParamDecl> = c
            .params
            .iter()
            .map(|p| ParamDecl {
                name: p.name.clone(),
                access: p.access,
                init: Value::from_bits(p.ty, 0),
            })
            .collect();
        self.runtime
            .hal()
            .add_component_with(&c.name, &pins, &params)
            .map(|_| ())
    }

    fn delete_component(&self, name: &str) -> Result<(), HalError> {
        self.runtime.hal().delete_component(name)
    }
}

/// The names of the components in the running instance's segment.
fn component_names(reader: &HalReader) -> Result<HashSet<String>, HalError> {
    Ok(reader.components()?.into_iter().map(|c| c.name).collect())
}

/// Removes from the running instance the components not in `existing` (made by a `loadrt` that was
/// then refused): their functions' slots are freed (no thread runs them: a load adds none to a
/// thread) and the components deleted, pins, params and functions with them.
fn unload_new_components(
    rt: &Runtime<Running>,
    reader: &HalReader,
    existing: &HashSet<String>,
) -> Result<(), RuntimeError> {
    let made: Vec<String> = component_names(reader)?
        .into_iter()
        .filter(|n| !existing.contains(n))
        .collect();
    if made.is_empty() {
        return Ok(());
    }
    let functions: Vec<String> = reader
        .functions()?
        .into_iter()
        .filter(|f| made.contains(&f.component))
        .map(|f| f.name)
        .collect();
    rt.retire_functions(&functions)?;
    for name in &made {
        rt.hal().delete_component(name)?;
    }
    // A LinuxCNC module kept after its load: its rtapi_app_exit runs, as for `unloadrt`.
    crate::components::linuxcnc::unloaded(rt, &made);
    Ok(())
}
