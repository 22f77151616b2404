//! A session attached to a running instance: after `start`, each command's change to the netlist
//! model is made in the running HAL too, as halcmd changes LinuxCNC's.
//!
//! Commands keep working on the model (every check, every message is the same before and after
//! `start`); what a command changed is then found by comparing the model before and after it, and
//! applied to the instance in an order that never breaks a rule on the way: components loaded
//! (`components::LiveTarget`), signals created, pins unlinked, pins linked, signals deleted, values
//! set, functions removed from threads and added at their positions, components unloaded. If the
//! instance refuses a step, the model goes back to what it was before the command and the error is
//! the command's (the steps already made stay: each is a whole halcmd operation of its own; a
//! `loadrt` refused part-way removes the instances it made, so it changes nothing, room included).
//!
//! Values read by `getp`, `gets`, `show` and `save` come from the segment while attached, so `save`
//! writes back values tuned while running.

use std::collections::{BTreeSet, HashSet};

use rtapi_hal::{HalReader, Value, WriteOptions};

use super::{Model, Session};
use crate::components::{LiveTarget, Presets};
use crate::runtime::{Running, Runtime, RuntimeOptions};

/// The running instance a session changes.
pub(super) struct Live {
    pub(super) runtime: Runtime<Running>,
    reader: HalReader,
}

impl Session {
    /// Builds the session's HAL (dry run first, then the real runtime with `options`) and starts
    /// its threads, then attaches to them: commands from now on change the running instance.
    pub fn start_live(&mut self, options: RuntimeOptions) -> Result<(), crate::config::StartError> {
        if self.live.is_some() {
            return Ok(());
        }
        let running = crate::config::start(self, options)?;
        // The thread that asked (a prompt, a control connection) does not belong on an RT CPU.
        running.keep_caller_off_rt_cpus();
        self.attach(running).map_err(|e| {
            crate::config::StartError::Runtime(crate::runtime::RuntimeError::Segment(e))
        })
    }

    /// Attaches a started runtime whose HAL was made from this session's model ([`Session::apply_to`]).
    pub fn attach(&mut self, runtime: Runtime<Running>) -> Result<(), rtapi_hal::HalError> {
        let reader = runtime.hal().reader()?;
        self.live = Some(Live { runtime, reader });
        self.started = true;
        Ok(())
    }

    /// The running instance, when attached.
    pub fn runtime(&self) -> Option<&Runtime<Running>> {
        self.live.as_ref().map(|l| &l.runtime)
    }

    /// Detaches and returns the running instance (to stop it); the programs `loadusr` started
    /// are stopped first (SIGTERM, then SIGKILL after a grace period).
    pub fn detach(&mut self) -> Option<Runtime<Running>> {
        self.stop_programs();
        self.live.take().map(|l| l.runtime)
    }

    /// A pin's or param's value: the segment's while attached, else the model's.
    pub(super) fn value_of(&self, name: &str) -> Value {
        self.live
            .as_ref()
            .and_then(|l| l.reader.get(name).ok())
            .unwrap_or_else(|| self.model.value_of(name))
    }

    /// A signal's value: the segment's while attached, else the model's.
    pub(super) fn signal_value(&self, name: &str) -> Value {
        self.live
            .as_ref()
            .and_then(|l| l.reader.get(name).ok())
            .unwrap_or_else(|| self.model.signal_value(name))
    }

    /// `start`/`stop` while attached: the threads run their functions or only keep time.
    pub(super) fn run_functions(&mut self, on: bool) {
        if let Some(l) = &self.live {
            l.runtime.set_functions_running(on);
        }
    }

    /// Makes in the running instance what changed in the model since `before`.
    pub(super) fn sync(&mut self, before: &Model) -> Result<(), String> {
        let Some(live) = &self.live else {
            return Ok(());
        };
        let (rt, reader) = (&live.runtime, &live.reader);
        let hal = rt.hal();
        let after = &self.model;
        let err = |what: String| move |e: rtapi_hal::HalError| format!("{what}: {e}");

        let threads =
            |m: &Model| -> Vec<String> { m.threads.iter().map(|t| t.spec.name.clone()).collect() };
        if threads(before) != threads(after) {
            return Err(
                "threads cannot be created or removed while the instance runs; stop it, change \
                 the file, start again"
                    .to_string(),
            );
        }

        // Components loaded by this command, with their setp values as initial values.
        let loaded_before: HashSet<&Vec<String>> = before.loaded.iter().map(|l| &l.names).collect();
        for l in after
            .loaded
            .iter()
            .filter(|l| !loaded_before.contains(&l.names))
        {
            let mut presets = Presets::new();
            for (name, value) in &after.values {
                presets.insert(name.clone(), value.to_string());
            }
            let existing = component_names(reader)?;
            let mut target = LiveTarget::new(rt).map_err(|e| e.message)?;
            let loaded = l.load_into(&self.registry, &self.modules, &mut target, &presets);
            if let Err(e) = loaded {
                // A refused loadrt changes nothing: what it made before it was refused (the first
                // instances of a `count=256` that ran out of room) goes again, room included.
                let undo = unload_new_components(rt, reader, &existing);
                let undo = undo.err().map_or(String::new(), |u| {
                    format!(" (and what it made could not all be removed: {u})")
                });
                return Err(format!("loadrt {}: {}{undo}", l.component, e.message));
            }
        }

        // Signals created.
        for (name, s) in &after.signals {
            if !before.signals.contains_key(name) {
                hal.new_signal(name, s.ty)
                    .map_err(err(format!("newsig {name}")))?;
            }
        }
        // Links: every pin whose signal changed is unlinked, then linked to its new signal.
        let pins: BTreeSet<&String> = before
            .pin_signal
            .keys()
            .chain(after.pin_signal.keys())
            .collect();
        let changed: Vec<&String> = pins
            .into_iter()
            .filter(|p| before.pin_signal.get(*p) != after.pin_signal.get(*p))
            .collect();
        for p in &changed {
            if before.pin_signal.contains_key(*p) && after.pins.contains_key(*p) {
                hal.unlink(p).map_err(err(format!("unlinkp {p}")))?;
            }
        }
        // In each signal's link order (the first pin may give the signal its value).
        for (name, s) in &after.signals {
            for p in &s.pins {
                if changed.contains(&p) {
                    hal.link(p, name).map_err(err(format!("net {name} {p}")))?;
                }
            }
        }
        for name in before.signals.keys() {
            if !after.signals.contains_key(name) {
                hal.delete_signal(name)
                    .map_err(err(format!("delsig {name}")))?;
            }
        }

        // Values: sets of undriven signals, setp of params and unconnected pins.
        let force = WriteOptions { force: true };
        for (name, s) in &after.signals {
            let old = before.signals.get(name).and_then(|b| b.value);
            if let (Some(v), true) = (s.value, s.value != old) {
                if after.writer(name).is_none() {
                    reader
                        .sets_with(name, &v.to_string(), force)
                        .map_err(err(format!("sets {name}")))?;
                }
            }
        }
        for (name, v) in &after.values {
            if before.values.get(name) != Some(v) && !after.pin_signal.contains_key(name) {
                reader
                    .setp_with(name, &v.to_string(), force)
                    .map_err(err(format!("setp {name}")))?;
            }
        }

        // Run lists: functions leave first, then join at their place in the new order.
        for (t_before, t_after) in before.threads.iter().zip(&after.threads) {
            let thread = &t_after.spec.name;
            for f in &t_before.functs {
                if !t_after.functs.contains(f) {
                    rt.delf(f, thread)
                        .map_err(|e| format!("delf {f} {thread}: {e}"))?;
                }
            }
            for (i, f) in t_after.functs.iter().enumerate() {
                if !t_before.functs.contains(f) {
                    rt.addf(f, thread, Some(i))
                        .map_err(|e| format!("addf {f} {thread}: {e}"))?;
                }
            }
        }

        // Components unloaded (their functions have left their threads above).
        let loaded_after: HashSet<&Vec<String>> = after.loaded.iter().map(|l| &l.names).collect();
        for l in before
            .loaded
            .iter()
            .filter(|l| !loaded_after.contains(&l.names))
        {
            // Their closures go now (a sampler's FIFO file with them), not at exit.
            let functions: Vec<String> = before
                .functions
                .iter()
                .filter(|(_, owner)| l.names.contains(owner))
                .map(|(f, _)| f.clone())
                .collect();
            if let Err(e) = rt.retire_functions(&functions) {
                log::warn!(
                    "unloadrt {}: its functions are kept until the instance ends: {e}",
                    l.component
                );
            }
            for name in &l.names {
                hal.delete_component(name)
                    .map_err(err(format!("unloadrt {name}")))?;
            }
            // A LinuxCNC module's functions have left their threads: its rtapi_app_exit runs.
            crate::components::linuxcnc::unloaded(rt, &l.names);
        }
        Ok(())
    }
}

/// The names of the components in the running instance's segment.
fn component_names(reader: &HalReader) -> Result<HashSet<String>, String> {
    Ok(reader
        .components()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|c| c.name)
        .collect())
}

/// Removes from the running instance the components not in `existing` (made by a `loadrt` that was
/// then refused): their functions' slots are freed (no thread runs them: a load adds none to a
/// thread) and the components deleted, pins, params and functions with them.
fn unload_new_components(
    rt: &Runtime<Running>,
    reader: &HalReader,
    existing: &HashSet<String>,
) -> Result<(), String> {
    let made: Vec<String> = component_names(reader)?
        .into_iter()
        .filter(|n| !existing.contains(n))
        .collect();
    if made.is_empty() {
        return Ok(());
    }
    let functions: Vec<String> = reader
        .functions()
        .map_err(|e| e.to_string())?
        .into_iter()
        .filter(|f| made.contains(&f.component))
        .map(|f| f.name)
        .collect();
    rt.retire_functions(&functions).map_err(|e| e.to_string())?;
    for name in &made {
        rt.hal().delete_component(name).map_err(|e| e.to_string())?;
    }
    // A LinuxCNC module kept after its load: its rtapi_app_exit runs, as for `unloadrt`.
    crate::components::linuxcnc::unloaded(rt, &made);
    Ok(())
}
