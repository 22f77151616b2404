//! A session attached to a running instance: after `start`, each command's change to the netlist
//! model is made in the running HAL too, as halcmd changes LinuxCNC's.
//!
//! Commands keep working on the model (every check, every message is the same before and after
//! `start`); what a command changed is then found by comparing the model before and after it, and
//! emitted to the backend's [`Live`] instance in an order that never breaks a rule on the way:
//! components loaded, signals created, pins unlinked, pins linked, signals deleted, values set,
//! functions removed from threads and added at their positions, components unloaded. If the
//! instance refuses a step, the model goes back to what it was before the command and the error is
//! the command's (the steps already made stay: each is a whole halcmd operation of its own; a
//! `loadrt` refused part-way changes nothing, room included).
//!
//! Values read by `getp`, `gets`, `show` and `save` come from the segment while attached, so `save`
//! writes back values tuned while running.

use std::collections::{BTreeSet, HashSet};

use rtapi_hal::Value;

use super::backend::Backend;
use super::{CommandError, CommandErrorKind, Model, Session};
use crate::components::Presets;

impl<H: Backend> Session<H> {
    /// A pin's or param's value: the segment's while attached, else the model's.
    pub(super) fn value_of(&self, name: &str) -> Value {
        self.backend
            .live()
            .and_then(|l| l.read(name))
            .unwrap_or_else(|| self.model.value_of(name))
    }

    /// A signal's value: the segment's while attached, else the model's.
    pub(super) fn signal_value(&self, name: &str) -> Value {
        self.backend
            .live()
            .and_then(|l| l.read(name))
            .unwrap_or_else(|| self.model.signal_value(name))
    }

    /// `start`/`stop` while attached: the threads run their functions or only keep time.
    pub(super) fn run_functions(&self, on: bool) {
        if let Some(l) = self.backend.live() {
            l.run_functions(on);
        }
    }

    /// Makes in the running instance what changed in the model since `before`, by the command at
    /// `line`: a step the instance refuses is a [`CommandErrorKind::LiveHal`] error.
    pub(super) fn sync(&self, before: &Model, line: usize) -> Result<(), CommandError> {
        let Some(live) = self.backend.live() else {
            return Ok(());
        };
        let after = &self.model;
        let refused = |m: String| CommandError::new(line, CommandErrorKind::LiveHal, m);
        let err = |what: String| move |e: rtapi_hal::HalError| refused(format!("{what}: {e}"));

        let threads =
            |m: &Model| -> Vec<String> { m.threads.iter().map(|t| t.spec.name.clone()).collect() };
        if threads(before) != threads(after) {
            return Err(CommandError::rule(
                line,
                "threads cannot be created or removed while the instance runs; stop it, change \
                 the file, start again",
            ));
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
            live.load(&|target| l.load_into(&self.registry, &self.modules, target, &presets))
                .map_err(|e| refused(format!("loadrt {}: {}", l.component, e.message)))?;
        }

        // Signals created.
        for (name, s) in &after.signals {
            if !before.signals.contains_key(name) {
                live.new_signal(name, s.ty)
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
                live.unlink(p).map_err(err(format!("unlinkp {p}")))?;
            }
        }
        // In each signal's link order (the first pin may give the signal its value).
        for (name, s) in &after.signals {
            for p in &s.pins {
                if changed.contains(&p) {
                    live.link(p, name).map_err(err(format!("net {name} {p}")))?;
                }
            }
        }
        for name in before.signals.keys() {
            if !after.signals.contains_key(name) {
                live.delete_signal(name)
                    .map_err(err(format!("delsig {name}")))?;
            }
        }

        // Values: sets of undriven signals, setp of params and unconnected pins.
        for (name, s) in &after.signals {
            let old = before.signals.get(name).and_then(|b| b.value);
            if let (Some(v), true) = (s.value, s.value != old) {
                if after.writer(name).is_none() {
                    live.sets(name, v).map_err(err(format!("sets {name}")))?;
                }
            }
        }
        for (name, v) in &after.values {
            if before.values.get(name) != Some(v) && !after.pin_signal.contains_key(name) {
                live.setp(name, *v).map_err(err(format!("setp {name}")))?;
            }
        }

        // Run lists: functions leave first, then join at their place in the new order.
        for (t_before, t_after) in before.threads.iter().zip(&after.threads) {
            let thread = &t_after.spec.name;
            for f in &t_before.functs {
                if !t_after.functs.contains(f) {
                    live.delf(f, thread)
                        .map_err(|e| refused(format!("delf {f} {thread}: {e}")))?;
                }
            }
            for (i, f) in t_after.functs.iter().enumerate() {
                if !t_before.functs.contains(f) {
                    live.addf(f, thread, i)
                        .map_err(|e| refused(format!("addf {f} {thread}: {e}")))?;
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
            let functions: Vec<String> = before
                .functions
                .iter()
                .filter(|(_, owner)| l.names.contains(owner))
                .map(|(f, _)| f.clone())
                .collect();
            live.unload(&l.component, &l.names, &functions)
                .map_err(err(format!("unloadrt {}", l.component)))?;
        }
        Ok(())
    }
}
