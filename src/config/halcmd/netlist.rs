//! The commands that wire and set what is loaded: `net` and the links (`link` checks a pin against
//! its signal as the HAL builder does, and the `net` arrows against its direction), `setp` and
//! `sets`, `addf` and `delf` (a thread's run list), `alias`.

use rtapi_hal::{ParamAccess, PinDir, Value, ValueType};

use super::backend::Backend;
use super::model::{Origin, PinInfo, SigInfo};
use super::parse::{AliasKind, Arrow, NetPin};
use super::{output, CommandError, Session, Word};
use crate::config::invalid_name;
use crate::rt::units::quote;

impl<H: Backend> Session<H> {
    pub(super) fn net(
        &mut self,
        signal: &Word,
        pins: &[NetPin],
        origin: Origin,
    ) -> Result<(), CommandError> {
        if let Some(e) = invalid_name("signal", &signal.text) {
            return Err(CommandError::rule(signal.line, format!("net: {e}")));
        }
        if self
            .model
            .pins
            .contains_key(&self.resolve(AliasKind::Pin, &signal.text))
        {
            return Err(CommandError::rule(
                signal.line,
                format!(
                    "net: '{}' is a pin, but the first word names the signal: net SIGNAL PIN [PIN ...]",
                    signal.text
                ),
            ));
        }
        for p in pins {
            let name = self.pin(&p.pin, &format!("net {}", signal.text))?;
            if !self.model.signals.contains_key(&signal.text) {
                let ty = self.model.pins[&name].ty;
                self.model.signals.insert(
                    signal.text.clone(),
                    SigInfo {
                        ty,
                        value: None,
                        pins: Vec::new(),
                        origin: origin.clone(),
                    },
                );
            }
            if let Some(on) = self.model.pin_signal.get(&name) {
                if *on == signal.text {
                    continue;
                }
                return Err(CommandError::rule(
                    p.pin.line,
                    format!(
                        "net {}: pin '{name}' is already connected to signal '{on}'; a pin is on at most one signal (unlinkp it first)",
                        signal.text
                    ),
                ));
            }
            self.link(
                &signal.text,
                &name,
                p.arrow_before,
                p.arrow_after,
                p.pin.line,
            )?;
        }
        Ok(())
    }

    /// Links pin `name` to existing signal `signal`, with the checks the HAL builder makes and the
    /// `net` arrows against the pin's direction.
    pub(super) fn link(
        &mut self,
        signal: &str,
        name: &str,
        before: Option<Arrow>,
        after: Option<Arrow>,
        line: usize,
    ) -> Result<(), CommandError> {
        if self.model.pin_signal.get(name).map(String::as_str) == Some(signal) {
            return Ok(());
        }
        let PinInfo { ty, dir, .. } = self.model.pins[name].clone();
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
                    "net {signal}: '{name}' is {} but the '{}' {side} it needs {role}",
                    output::dir_word(dir),
                    arrow.map_or("", Arrow::as_str),
                )
            })
        };
        if let Some(m) = check(before, true).or_else(|| check(after, false)) {
            return Err(CommandError::rule(line, m));
        }
        let s = &self.model.signals[signal];
        if s.ty != ty {
            return Err(CommandError::rule(
                line,
                format!(
                    "cannot net pin '{name}' ({ty}) to signal '{signal}' ({}): types must match; use a conversion component between them",
                    s.ty
                ),
            ));
        }
        let writer_pin = self.model.writer(signal);
        let has_io = s.pins.iter().any(|p| self.model.pins[p].dir == PinDir::Io);
        match dir {
            PinDir::Out => {
                if let Some(w) = writer_pin {
                    return Err(CommandError::rule(
                        line,
                        format!("cannot net OUT pin '{name}' to signal '{signal}': it already has writer '{w}'; a signal has exactly one OUT pin"),
                    ));
                }
                if has_io {
                    return Err(CommandError::rule(
                        line,
                        format!("cannot net pin '{name}' to signal '{signal}': a signal may have one OUT pin or any number of IO pins, not both"),
                    ));
                }
            }
            PinDir::Io if writer_pin.is_some() => {
                return Err(CommandError::rule(
                    line,
                    format!("cannot net pin '{name}' to signal '{signal}': a signal may have one OUT pin or any number of IO pins, not both"),
                ))
            }
            _ => {}
        }
        // As in LinuxCNC: the first pin linked gives the signal its value (a `sets` before it is
        // replaced); an OUT pin owns the value from then on.
        let own = self.model.value_of(name);
        let s = self.model.signals.get_mut(signal).expect("checked above");
        if dir == PinDir::Out {
            s.value = None;
        } else if s.pins.is_empty() {
            s.value = Some(own);
        }
        s.pins.push(name.to_string());
        self.model
            .pin_signal
            .insert(name.to_string(), signal.to_string());
        Ok(())
    }

    /// A value a config may set: it parses as the target's type, and a float is finite.
    fn parse_value(ty: ValueType, value: &Word, name: &str) -> Result<Value, CommandError> {
        match Value::parse(ty, &value.text, name) {
            Ok(Value::Float(f)) if !f.is_finite() => Err(CommandError::rule(
                value.line,
                format!(
                    "{} for {name} is not a finite number; give a finite value",
                    quote(&value.text)
                ),
            )),
            Ok(v) => Ok(v),
            Err(e) => Err(CommandError::rule(value.line, e.to_string())),
        }
    }

    pub(super) fn setp(&mut self, name: &Word, value: &Word) -> Result<(), CommandError> {
        let (n, is_param) = self.pin_or_param(name, "setp")?;
        let ty = if is_param {
            let p = &self.model.params[&n];
            if p.access == ParamAccess::Ro {
                return Err(CommandError::rule(
                    name.line,
                    format!(
                        "setp {n}: the param is read-only (its component reports through it); \
                     `show param {n}` lists the params that are RW"
                    ),
                ));
            }
            p.ty
        } else {
            let p = &self.model.pins[&n];
            if p.dir == PinDir::Out {
                return Err(CommandError::rule(
                    name.line,
                    format!("setp {n}: it is an OUT pin, written by its component every period; setp sets IN pins and params"),
                ));
            }
            if let Some(sig) = self.model.pin_signal.get(&n) {
                return Err(CommandError::rule(
                    name.line,
                    format!("setp {n}: it is connected to signal '{sig}'; set the signal with `sets {sig} VALUE` instead"),
                ));
            }
            p.ty
        };
        let v = Self::parse_value(ty, value, &n).map_err(|e| e.prefixed("setp: "))?;
        self.model.values.insert(n, v);
        Ok(())
    }

    pub(super) fn sets(&mut self, signal: &Word, value: &Word) -> Result<(), CommandError> {
        let n = self.signal(signal, "sets")?.to_string();
        if let Some(w) = self.model.writer(&n) {
            return Err(CommandError::rule(
                signal.line,
                format!("sets {n}: the signal is driven by OUT pin '{w}' every period; sets only works on signals without a writer"),
            ));
        }
        let ty = self.model.signals[&n].ty;
        let v = Self::parse_value(ty, value, &n).map_err(|e| e.prefixed("sets: "))?;
        self.model.signals.get_mut(&n).expect("checked").value = Some(v);
        Ok(())
    }

    /// The functions `addf NAME` means: NAME itself, or — LinuxCNC's one function for all channels
    /// (`stepgen.make-pulses`) — every instance's `<instance>.<suffix>` of that component, in order.
    fn functions_named(&self, name: &str) -> Vec<String> {
        if self.model.functions.contains_key(name) {
            return vec![name.to_string()];
        }
        let Some((prefix, suffix)) = name.split_once('.') else {
            return Vec::new();
        };
        self.model
            .loaded
            .iter()
            .filter(|l| self.registry.get(&l.component).map(|e| e.prefix) == Some(prefix))
            .flat_map(|l| l.names.iter().map(|i| format!("{i}.{suffix}")))
            .filter(|f| self.model.functions.contains_key(f))
            .collect()
    }

    pub(super) fn addf(
        &mut self,
        function: &Word,
        thread: &Word,
        position: Option<i64>,
    ) -> Result<(), CommandError> {
        let functs = self.functions_named(&function.text);
        if functs.is_empty() {
            let known: Vec<&str> = self.model.functions.keys().map(String::as_str).collect();
            let hint = crate::suggest::did_you_mean(&function.text, known.iter().copied())
                .unwrap_or_else(|| {
                    if known.is_empty() {
                        "no component loaded above this line has a function".to_string()
                    } else {
                        format!("loaded functions: {}", known.join(", "))
                    }
                });
            return Err(CommandError::unknown(
                function.line,
                format!("addf: no function named {}; {hint}", quote(&function.text)),
            ));
        }
        let Some(index) = self
            .model
            .threads
            .iter()
            .position(|t| t.spec.name == thread.text)
        else {
            let known: Vec<&str> = self
                .model
                .threads
                .iter()
                .map(|t| t.spec.name.as_str())
                .collect();
            let from = match &self.toml {
                Some(toml) => format!("the [[thread]] tables of {toml}"),
                None => "made by `loadrt threads name1=NAME period1=NS`".to_string(),
            };
            let linuxcnc = if thread.text.ends_with("-thread") {
                "; in LinuxCNC the motion controller (loadrt motmod) creates servo-thread and base-thread, which rtapi's halrun does not host: run the whole machine with `rtapi linuxcnc INI`"
            } else {
                ""
            };
            let listed = if known.is_empty() {
                "none declared".to_string()
            } else {
                known.join(", ")
            };
            let hint = match crate::suggest::did_you_mean(&thread.text, known.iter().copied()) {
                Some(h) => format!("{h} (threads are {from}: {listed})"),
                None => format!("threads are {from}: {listed}{linuxcnc}"),
            };
            return Err(CommandError::rule(
                thread.line,
                format!(
                    "addf {}: no thread named {}; {hint}",
                    function.text,
                    quote(&thread.text),
                ),
            ));
        };
        for f in &functs {
            if let Some(t) = self.model.threads.iter().find(|t| t.functs.contains(f)) {
                return Err(CommandError::rule(
                    function.line,
                    format!("addf: function '{f}' is already added to thread '{}'; a function runs in one thread", t.spec.name),
                ));
            }
        }
        let t = &mut self.model.threads[index];
        let len = t.functs.len();
        let at = match position {
            None | Some(-1) => len,
            Some(p) if p > 0 && p.unsigned_abs() - 1 <= len as u64 => p as usize - 1,
            Some(p) if p < 0 && p.unsigned_abs() - 1 <= len as u64 => len + 1 - p.unsigned_abs() as usize,
            Some(p) => {
                return Err(CommandError::rule(
                    thread.line,
                    format!(
                        "addf {}: position {p} is outside thread '{}', which has {len} function(s) so far",
                        function.text, thread.text
                    ),
                ))
            }
        };
        // What `start` refuses (a thread's run list is fixed-size), refused here, in the same words.
        let n = len + functs.len();
        if n > crate::runtime::runlist::MAX_RUN_LIST {
            return Err(CommandError::rule(
                function.line,
                format!(
                    "addf {}: thread {}: {}",
                    function.text,
                    thread.text,
                    crate::runtime::runlist::PublishError::TooLong(n)
                ),
            ));
        }
        for (i, f) in functs.into_iter().enumerate() {
            t.functs.insert(at + i, f);
        }
        Ok(())
    }

    pub(super) fn delf(
        &mut self,
        function: &Word,
        thread: Option<&Word>,
    ) -> Result<(), CommandError> {
        let functs = self.functions_named(&function.text);
        if functs.is_empty() {
            return Err(CommandError::unknown(
                function.line,
                format!(
                    "delf: no function named {} (`show funct` lists them)",
                    quote(&function.text)
                ),
            ));
        }
        for f in functs {
            let t = self
                .model
                .threads
                .iter_mut()
                .find(|t| t.functs.contains(&f));
            match (t, thread) {
                (Some(t), Some(want)) if t.spec.name != want.text => {
                    return Err(CommandError::rule(
                        want.line,
                        format!(
                            "delf: function '{f}' is in thread '{}', not '{}'",
                            t.spec.name, want.text
                        ),
                    ))
                }
                (Some(t), _) => t.functs.retain(|x| *x != f),
                (None, _) => {
                    return Err(CommandError::rule(
                        function.line,
                        format!("delf: function '{f}' is not in any thread"),
                    ))
                }
            }
        }
        Ok(())
    }

    pub(super) fn alias(
        &mut self,
        kind: AliasKind,
        name: &Word,
        alias: &Word,
    ) -> Result<(), CommandError> {
        let full = self.resolve(kind, &name.text);
        let exists = match kind {
            AliasKind::Pin => self.model.pins.contains_key(&full),
            AliasKind::Param => self.model.params.contains_key(&full),
        };
        if !exists {
            return Err(CommandError::unknown(
                name.line,
                format!("alias: {}", self.unknown(kind.as_str(), &name.text)),
            ));
        }
        if let Some(e) = invalid_name("alias", &alias.text) {
            return Err(CommandError::rule(alias.line, format!("alias: {e}")));
        }
        if self.model.pins.contains_key(&alias.text)
            || self.model.params.contains_key(&alias.text)
            || self.model.aliases.keys().any(|(_, a)| *a == alias.text)
        {
            return Err(CommandError::rule(
                alias.line,
                format!("alias: the name {} is already taken", quote(&alias.text)),
            ));
        }
        // One alias per object: a new one replaces the old.
        self.model
            .aliases
            .retain(|(k, _), orig| !(*k == kind && *orig == full));
        self.model.aliases.insert((kind, alias.text.clone()), full);
        Ok(())
    }
}
