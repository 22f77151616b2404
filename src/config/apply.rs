//! Executing a machine's commands against a [`Target`], checking each with the line it came from.
//!
//! The HAL builder enforces the HAL's own rules (one writer per signal, equal types, unique names);
//! this layer adds what only a config knows — which file and line — and the checks halcmd makes on top:
//! `net` arrows against pin directions, a signal name that is really a pin, `setp` on an output or a
//! connected pin, `sets` on a driven signal, `addf` positions.
//!
//! `setp` values become the initial values of their pins and params (collected before any component
//! loads), and `sets` values the initial values of their signals ([`HalBuilder::set_signal`]), so no
//! thread ever runs a period with a default instead.

use std::collections::HashMap;

use rtapi_hal::{ParamAccess, PinDir, Value, ValueType};

use super::halfile::{Arrow, Command, NetPin, Word};
use super::{invalid_name, ConfigError, Machine};
use crate::components::{Declared, Instances, LoadArgs, Presets, Registry, Target};
use crate::rt::units::{clip, quote};

/// The most component instances (all `loadrt` lines together) a machine may load: far above any
/// real machine, and low enough that every pin, param and statistic fits the HAL segment.
pub const MAX_COMPONENT_INSTANCES: usize = 4096;

struct SignalState {
    ty: ValueType,
    writer: Option<String>,
}

struct Applier<'a> {
    target: &'a mut dyn Target,
    registry: &'a Registry,
    toml: &'a str,
    declared: Declared,
    presets: Presets,
    /// Thread name → functions added so far (for relative `addf` positions).
    threads: Vec<(String, usize)>,
    pin_signal: HashMap<String, String>,
    signals: HashMap<String, SignalState>,
    /// Component instances loaded so far.
    instances: usize,
}

type Step = Result<(), (usize, String)>;

impl Machine {
    /// Declares the threads, then executes every `.hal` command in order against `target`. Stops at
    /// the first error.
    pub fn apply(&self, target: &mut dyn Target, registry: &Registry) -> Result<(), ConfigError> {
        let mut a = Applier {
            target,
            registry,
            toml: &self.file,
            declared: Declared::default(),
            presets: Presets::new(),
            threads: Vec::new(),
            pin_signal: HashMap::new(),
            signals: HashMap::new(),
            instances: 0,
        };
        for (t, line) in self.threads.iter().zip(&self.thread_lines) {
            a.target
                .thread(t)
                .map_err(|e| ConfigError::at(&self.file, *line, e.message))?;
            a.declared.thread_health(&t.name);
            a.threads.push((t.name.clone(), 0));
        }
        // Every setp, in order (the last one for a name wins), before any component loads.
        for f in &self.hal_files {
            for c in &f.commands {
                if let Command::Setp { name, value } = &c.command {
                    a.presets.insert(name.text.clone(), value.text.clone());
                }
            }
        }
        for f in &self.hal_files {
            for c in &f.commands {
                a.execute(&c.command, c.line)
                    .map_err(|(line, message)| ConfigError::at(&f.name, line, message))?;
            }
        }
        Ok(())
    }
}

fn dir_word(dir: PinDir) -> &'static str {
    match dir {
        PinDir::In => "an IN pin",
        PinDir::Out => "an OUT pin",
        PinDir::Io => "an I/O pin",
    }
}

impl Applier<'_> {
    fn execute(&mut self, command: &Command, line: usize) -> Step {
        match command {
            Command::Loadrt {
                component,
                instances,
                args,
            } => {
                let c = clip(&component.text);
                if let Some(e) = invalid_name("component", &component.text) {
                    return Err((component.line, format!("loadrt: {e}")));
                }
                let n = match instances {
                    Instances::Count(n) => *n,
                    Instances::Names(names) => names.len(),
                };
                if self.instances + n > MAX_COMPONENT_INSTANCES {
                    return Err((
                        line,
                        format!(
                            "loadrt {c}: {n} more instances would make {}; a machine may load at most {MAX_COMPONENT_INSTANCES} component instances",
                            self.instances + n
                        ),
                    ));
                }
                let args = LoadArgs { args: args.clone() };
                self.registry
                    .load(
                        self.target,
                        &mut self.declared,
                        &self.presets,
                        &component.text,
                        instances,
                        &args,
                    )
                    .map_err(|e| (line, format!("loadrt {c}: {}", e.message)))?;
                self.instances += n;
                Ok(())
            }
            Command::Addf {
                function,
                thread,
                position,
            } => self.addf(function, thread, *position),
            Command::Net { signal, pins } => {
                for p in pins {
                    self.net(signal, p)?;
                }
                Ok(())
            }
            Command::Setp { name, value } => self.setp(name, value),
            Command::Sets { signal, value } => self.sets(signal, value),
        }
    }

    /// "no pin X" with what does exist next to it.
    fn unknown(&self, what: &str, name: &str) -> String {
        let prefix = name.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
        let mut siblings: Vec<&str> = self
            .declared
            .pins
            .keys()
            .chain(self.declared.params.keys())
            .filter_map(|n| n.strip_prefix(prefix)?.strip_prefix('.'))
            .collect();
        siblings.sort_unstable();
        if prefix.is_empty() || siblings.is_empty() {
            format!(
                "no {what} named {}; is its component loaded (loadrt) above this line?",
                quote(name)
            )
        } else {
            format!(
                "no {what} named {}; {} has: {}",
                quote(name),
                clip(prefix),
                siblings.join(", ")
            )
        }
    }

    fn addf(&mut self, function: &Word, thread: &Word, position: Option<i64>) -> Step {
        if !self.declared.functions.contains_key(&function.text) {
            let mut known: Vec<&str> = self.declared.functions.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err((
                function.line,
                format!(
                    "addf: no function named {}; loaded functions: {}",
                    quote(&function.text),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        }
        let Some(index) = self.threads.iter().position(|(n, _)| *n == thread.text) else {
            let known: Vec<&str> = self.threads.iter().map(|(n, _)| n.as_str()).collect();
            return Err((
                thread.line,
                format!(
                    "addf {}: no thread named {}; threads are the [[thread]] tables of {}: {}",
                    function.text,
                    quote(&thread.text),
                    self.toml,
                    if known.is_empty() {
                        "none declared".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let len = self.threads[index].1;
        let at = match position {
            None | Some(-1) => None,
            Some(p) if p > 0 && p.unsigned_abs() - 1 <= len as u64 => Some(p as usize - 1),
            // -1 is the end (handled above), -2 before the last function, ...
            Some(p) if p < 0 && p.unsigned_abs() - 1 <= len as u64 => {
                Some(len + 1 - p.unsigned_abs() as usize)
            }
            Some(p) => {
                return Err((
                    thread.line,
                    format!(
                        "addf {}: position {p} is outside thread '{}', which has {len} function(s) so far",
                        function.text, thread.text
                    ),
                ))
            }
        };
        self.target
            .addf(&function.text, &thread.text, at)
            .map_err(|e| (function.line, format!("addf: {}", e.message)))?;
        self.threads[index].1 += 1;
        Ok(())
    }

    fn net(&mut self, signal: &Word, p: &NetPin) -> Step {
        let name = &p.pin.text;
        if let Some(e) = invalid_name("signal", &signal.text) {
            return Err((signal.line, format!("net: {e}")));
        }
        if self.declared.pins.contains_key(&signal.text) {
            return Err((
                signal.line,
                format!(
                    "net: '{}' is a pin, but the first word names the signal: net SIGNAL PIN [PIN ...]",
                    signal.text
                ),
            ));
        }
        let Some(&(ty, dir)) = self.declared.pins.get(name) else {
            let message = if self.declared.params.contains_key(name) {
                format!(
                    "net {}: '{name}' is a param, not a pin; params are set with setp",
                    signal.text
                )
            } else {
                format!("net {}: {}", signal.text, self.unknown("pin", name))
            };
            return Err((p.pin.line, message));
        };
        let reader = matches!(dir, PinDir::In | PinDir::Io);
        let writer = matches!(dir, PinDir::Out | PinDir::Io);
        let check = |arrow: Option<Arrow>, before: bool| -> Option<String> {
            let (ok, role) = match (arrow?, before) {
                (Arrow::Out, true) | (Arrow::In, false) => (reader, "a reader (IN or I/O)"),
                (Arrow::Out, false) | (Arrow::In, true) => (writer, "a writer (OUT or I/O)"),
                (Arrow::Both, _) => (dir == PinDir::Io, "an I/O pin"),
            };
            (!ok).then(|| {
                let side = if before { "before" } else { "after" };
                format!(
                    "net {}: '{name}' is {} but the '{}' {side} it needs {role}",
                    signal.text,
                    dir_word(dir),
                    arrow.map_or("", Arrow::as_str),
                )
            })
        };
        if let Some(m) = check(p.arrow_before, true).or_else(|| check(p.arrow_after, false)) {
            return Err((p.pin.line, m));
        }
        self.target
            .hal()
            .net(&signal.text, name)
            .map_err(|e| (p.pin.line, format!("net {}: {e}", signal.text)))?;
        let s = self
            .signals
            .entry(signal.text.clone())
            .or_insert(SignalState { ty, writer: None });
        if dir == PinDir::Out {
            s.writer = Some(name.clone());
        }
        self.pin_signal.insert(name.clone(), signal.text.clone());
        Ok(())
    }

    /// A value a config may set: it parses as the target's type, and a float is finite (a NaN or
    /// infinite gain or limit is never what a machine builder meant; `rtapi setp --force` exists for a
    /// deliberate one on a live instance).
    fn parse_value(ty: ValueType, value: &Word, name: &str) -> Step {
        match Value::parse(ty, &value.text, name) {
            Ok(Value::Float(f)) if !f.is_finite() => Err((
                value.line,
                format!(
                    "{} for {name} is not a finite number; give a finite value",
                    crate::rt::units::quote(&value.text)
                ),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err((value.line, e.to_string())),
        }
    }

    fn setp(&mut self, name: &Word, value: &Word) -> Step {
        let n = &name.text;
        if let Some(&(ty, dir)) = self.declared.pins.get(n) {
            if dir == PinDir::Out {
                return Err((
                    name.line,
                    format!("setp {n}: it is an OUT pin, written by its component every period; setp sets IN pins and params"),
                ));
            }
            if let Some(sig) = self.pin_signal.get(n) {
                return Err((
                    name.line,
                    format!("setp {n}: it is connected to signal '{sig}'; set the signal with `sets {sig} VALUE` instead"),
                ));
            }
            return Self::parse_value(ty, value, n).map_err(|(l, m)| (l, format!("setp: {m}")));
        }
        if let Some(&(ty, access)) = self.declared.params.get(n) {
            if access == ParamAccess::Ro {
                return Err((name.line, format!("setp {n}: the param is read-only")));
            }
            return Self::parse_value(ty, value, n).map_err(|(l, m)| (l, format!("setp: {m}")));
        }
        Err((
            name.line,
            format!("setp: {}", self.unknown("pin or param", n)),
        ))
    }

    fn sets(&mut self, signal: &Word, value: &Word) -> Step {
        let n = &signal.text;
        let Some(s) = self.signals.get(n) else {
            return Err((
                signal.line,
                format!(
                    "sets: no signal named {}; signals are created by net above this line",
                    quote(n)
                ),
            ));
        };
        if let Some(w) = &s.writer {
            return Err((
                signal.line,
                format!("sets {n}: the signal is driven by OUT pin '{w}' every period; sets only works on signals without a writer"),
            ));
        }
        Self::parse_value(s.ty, value, n).map_err(|(l, m)| (l, format!("sets: {m}")))?;
        let v = Value::parse(s.ty, &value.text, n).map_err(|e| (value.line, e.to_string()))?;
        self.target
            .hal()
            .set_signal(n, v)
            .map_err(|e| (signal.line, format!("sets: {e}")))
    }
}
