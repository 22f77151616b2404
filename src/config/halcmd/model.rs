//! The netlist model a session's commands change: which components are loaded (their pins, params
//! and functions learnt from a dry load), pin → signal links, signal types and values, each thread's
//! function list, aliases, and the user-space components present.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rtapi_hal::{ParamAccess, PinDir, Value, ValueType};

use super::parse::AliasKind;
use super::user;
use crate::components::linuxcnc::ModuleLoader;
use crate::components::{Declared, Instances, LoadArgs, LoadError, Presets, Registry, Target};
use crate::runtime::ThreadSpec;

/// Where a model object came from (for errors found when it is emitted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Origin {
    pub(super) file: String,
    pub(super) line: usize,
}

/// One live `loadrt`.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub(super) component: String,
    pub(super) instances: Instances,
    pub(super) args: LoadArgs,
    pub(super) names: Vec<String>,
    /// The arguments as written (for `save`).
    pub(super) text: String,
    pub(super) origin: Origin,
    /// A LinuxCNC module: its file, resolved where the `loadrt` was (the `.hal` file's directory).
    pub(super) module: Option<PathBuf>,
}

impl Loaded {
    /// What it loads.
    pub(super) fn spec(&self) -> LoadSpec<'_> {
        LoadSpec {
            component: &self.component,
            module: self.module.as_deref(),
            instances: &self.instances,
            args: &self.args,
        }
    }

    /// Loads it into `target` (see [`LoadSpec::load_into`]).
    pub(super) fn load_into(
        &self,
        registry: &Registry,
        modules: &ModuleLoader,
        target: &mut dyn Target,
        presets: &Presets,
    ) -> Result<Vec<String>, LoadError> {
        let declared = &mut Declared::default();
        self.spec()
            .load_into(registry, modules, target, declared, presets)
    }
}

/// One `loadrt`: a native component by name, or a LinuxCNC module at its resolved path.
pub(super) struct LoadSpec<'a> {
    pub(super) component: &'a str,
    pub(super) module: Option<&'a Path>,
    pub(super) instances: &'a Instances,
    pub(super) args: &'a LoadArgs,
}

impl LoadSpec<'_> {
    /// Loads it into `target`, its pins and params declared into `declared`: the one place a
    /// `loadrt` goes to the LinuxCNC module loader or to the native registry.
    pub(super) fn load_into(
        &self,
        registry: &Registry,
        modules: &ModuleLoader,
        target: &mut dyn Target,
        declared: &mut Declared,
        presets: &Presets,
    ) -> Result<Vec<String>, LoadError> {
        match self.module {
            Some(path) => modules.load(target, declared, presets, path, self.instances, self.args),
            None => registry.load(
                target,
                declared,
                presets,
                self.component,
                self.instances,
                self.args,
            ),
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct PinInfo {
    pub(super) ty: ValueType,
    pub(super) dir: PinDir,
    pub(super) owner: String,
    pub(super) default: Value,
}

#[derive(Debug, Clone)]
pub(super) struct ParamInfo {
    pub(super) ty: ValueType,
    pub(super) access: ParamAccess,
    pub(super) owner: String,
    pub(super) default: Value,
}

#[derive(Debug, Clone)]
pub(super) struct SigInfo {
    pub(super) ty: ValueType,
    /// Set by `sets` (or inherited from an IO pin's value); cleared when an OUT pin joins.
    pub(super) value: Option<Value>,
    /// Linked pins in link order.
    pub(super) pins: Vec<String>,
    pub(super) origin: Origin,
}

#[derive(Debug, Clone)]
pub(super) struct ThreadInfo {
    pub(super) spec: ThreadSpec,
    pub(super) origin: Origin,
    pub(super) functs: Vec<String>,
    /// Created by `loadrt threads` (unloadrt threads removes it; save writes it).
    pub(super) from_loadrt: bool,
}

/// The netlist model.
#[derive(Debug, Clone, Default)]
pub(super) struct Model {
    pub(super) loaded: Vec<Loaded>,
    pub(super) pins: BTreeMap<String, PinInfo>,
    pub(super) params: BTreeMap<String, ParamInfo>,
    /// Function → owner instance.
    pub(super) functions: BTreeMap<String, String>,
    /// Own values of pins and params given by setp (or kept by unlinkp).
    pub(super) values: HashMap<String, Value>,
    pub(super) pin_signal: HashMap<String, String>,
    pub(super) signals: BTreeMap<String, SigInfo>,
    pub(super) threads: Vec<ThreadInfo>,
    /// (kind, alias) → original name.
    pub(super) aliases: BTreeMap<(AliasKind, String), String>,
    pub(super) instances: usize,
    /// User-space components present in the running instance (`user.rs`), in arrival order.
    pub(super) user: Vec<user::UserComponent>,
}

impl Model {
    /// Adds a dry load's pins, params and functions, each owned by the longest of `instances` that
    /// prefixes it (or `fallback`).
    pub(super) fn merge(&mut self, d: Declared, instances: &[String], fallback: &str) {
        let owner = |name: &str| -> String {
            instances
                .iter()
                .filter(|i| name == i.as_str() || name.starts_with(&format!("{i}.")))
                .max_by_key(|i| i.len())
                .cloned()
                .unwrap_or_else(|| fallback.to_string())
        };
        // A declared default, else the type's zero.
        let default = |name: &str, ty: ValueType| {
            d.values
                .get(name)
                .copied()
                .unwrap_or(Value::from_bits(ty, 0))
        };
        for (name, &(ty, dir)) in &d.pins {
            let default = default(name, ty);
            let owner = owner(name);
            let name = name.clone();
            self.pins.insert(
                name,
                PinInfo {
                    ty,
                    dir,
                    owner,
                    default,
                },
            );
        }
        for (name, &(ty, access)) in &d.params {
            let default = default(name, ty);
            let owner = owner(name);
            let name = name.clone();
            self.params.insert(
                name,
                ParamInfo {
                    ty,
                    access,
                    owner,
                    default,
                },
            );
        }
        for (name, instance) in d.functions {
            self.functions.insert(name, instance);
        }
    }

    pub(super) fn writer(&self, signal: &str) -> Option<&str> {
        self.signals[signal]
            .pins
            .iter()
            .find(|p| self.pins[*p].dir == PinDir::Out)
            .map(String::as_str)
    }

    /// A pin's or param's value: a linked pin reads its signal.
    pub(super) fn value_of(&self, name: &str) -> Value {
        if let Some(sig) = self.pin_signal.get(name) {
            return self.signal_value(sig);
        }
        if let Some(v) = self.values.get(name) {
            return *v;
        }
        self.pins
            .get(name)
            .map(|p| p.default)
            .or_else(|| self.params.get(name).map(|p| p.default))
            .unwrap_or(Value::Bit(false))
    }

    /// A signal's value before anything runs: its writer's, else the one set, else zero.
    pub(super) fn signal_value(&self, signal: &str) -> Value {
        let s = &self.signals[signal];
        if let Some(w) = self.writer(signal) {
            return self.values.get(w).copied().unwrap_or(self.pins[w].default);
        }
        s.value.unwrap_or(Value::from_bits(s.ty, 0))
    }

    /// Unlinks a pin; it keeps the signal's last value, as in LinuxCNC.
    pub(super) fn unlink(&mut self, pin: &str) {
        let Some(sig) = self.pin_signal.get(pin).cloned() else {
            return;
        };
        let v = self.signal_value(&sig);
        self.pin_signal.remove(pin);
        if let Some(s) = self.signals.get_mut(&sig) {
            s.pins.retain(|p| p != pin);
        }
        if self.pins[pin].dir != PinDir::Out {
            self.values.insert(pin.to_string(), v);
        }
    }

    pub(super) fn delete_signal(&mut self, name: &str) {
        let pins = self
            .signals
            .get(name)
            .map(|s| s.pins.clone())
            .unwrap_or_default();
        for p in pins {
            self.unlink(&p);
        }
        self.signals.remove(name);
    }

    pub(super) fn remove_thread(&mut self, name: &str) {
        self.threads.retain(|t| t.spec.name != name);
        let prefix = format!("{name}.");
        let health: Vec<String> = self
            .pins
            .keys()
            .chain(self.params.keys())
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect();
        for n in health {
            self.forget(&n);
        }
    }

    /// Drops a pin or param and everything that refers to it.
    pub(super) fn forget(&mut self, name: &str) {
        self.unlink(name);
        self.pins.remove(name);
        self.params.remove(name);
        self.values.remove(name);
        self.aliases.retain(|_, orig| orig != name);
    }

    pub(super) fn unload(&mut self, l: &Loaded) {
        let owned = |owner: &str| l.names.iter().any(|n| n == owner);
        let names: Vec<String> = self
            .pins
            .iter()
            .filter(|(_, p)| owned(&p.owner))
            .map(|(n, _)| n.clone())
            .chain(
                self.params
                    .iter()
                    .filter(|(_, p)| owned(&p.owner))
                    .map(|(n, _)| n.clone()),
            )
            .collect();
        let functs: Vec<String> = self
            .functions
            .iter()
            .filter(|(_, o)| owned(o))
            .map(|(f, _)| f.clone())
            .collect();
        for f in &functs {
            self.functions.remove(f);
            for t in &mut self.threads {
                t.functs.retain(|x| x != f);
            }
            // The function's health objects (`<funct>.time`, `.tmax`, …).
            let prefix = format!("{f}.");
            let health: Vec<String> = self
                .pins
                .keys()
                .chain(self.params.keys())
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect();
            for n in health {
                self.forget(&n);
            }
        }
        for n in names {
            self.forget(&n);
        }
        self.instances -= l.names.len();
        self.loaded
            .retain(|x| x.origin != l.origin || x.component != l.component);
    }
}
