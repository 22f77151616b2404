//! What each halcmd command does to the model: the command dispatch (`exec`) and the name lookups
//! with their "did you mean"; the commands that load and unload components are in `loadrt.rs`, the
//! ones that wire and set what is loaded (net, link, setp, sets, addf, delf, alias) in `netlist.rs`.

use std::io::Write;

use super::backend::Backend;
use super::model::{Origin, SigInfo};
use super::parse::{AliasKind, Command};
use super::{output, CommandError, CommandErrorKind, Flow, Session, Step, Word};
use crate::config::invalid_name;
use crate::rt::units::{clip, quote};

impl<H: Backend> Session<H> {
    pub(super) fn exec(
        &mut self,
        file: &str,
        line: usize,
        command: &Command,
        out: &mut dyn Write,
    ) -> Step {
        let origin = Origin {
            file: file.to_string(),
            line,
        };
        let done = Ok(Flow::Continue);
        match command {
            Command::Loadrt {
                component,
                instances,
                args,
                text,
            } => self.loadrt(component, instances, args, text, origin)?,
            Command::Unloadrt { component } => self.unloadrt(component)?,
            Command::Loadusr {
                flags,
                program,
                args,
            } => self.loadusr(flags, program, args)?,
            Command::Waitusr {
                name,
                ignore_status,
            } => self.waitusr(name, *ignore_status)?,
            Command::Unloadusr { name } => self.unloadusr(name)?,
            // `unload`: a user-space component's program, or a real-time component; `all` both.
            Command::Unload { name } => {
                if name.text == "all" {
                    self.unloadusr(name)?;
                    self.unloadrt(name)?;
                } else if self.model.user.iter().any(|u| u.name == name.text) {
                    self.unloadusr(name)?;
                } else {
                    self.unloadrt(name)?;
                }
            }
            Command::Newsig { name, ty } => {
                if let Some(e) = invalid_name("signal", &name.text) {
                    return Err(CommandError::rule(name.line, format!("newsig: {e}")));
                }
                if self.model.signals.contains_key(&name.text) {
                    return Err(CommandError::rule(
                        name.line,
                        format!(
                            "newsig: a signal named {} already exists; pick another name, or \
                             delsig it first",
                            quote(&name.text)
                        ),
                    ));
                }
                self.model.signals.insert(
                    name.text.clone(),
                    SigInfo {
                        ty: *ty,
                        value: None,
                        pins: Vec::new(),
                        origin,
                    },
                );
            }
            Command::Delsig { name } => {
                let names: Vec<String> = if name.text == "all" {
                    self.model.signals.keys().cloned().collect()
                } else {
                    self.signal(name, "delsig")?;
                    vec![name.text.clone()]
                };
                for n in names {
                    self.model.delete_signal(&n);
                }
            }
            Command::Sets { signal, value } => self.sets(signal, value)?,
            Command::Gets { signal } => {
                let v = output::shown_value(self.signal_value(self.signal(signal, "gets")?));
                let _ = writeln!(out, "{v}");
            }
            Command::Stype { name } => {
                let ty = self.model.signals[self.signal(name, "stype")?].ty;
                let _ = writeln!(out, "{ty}");
            }
            Command::Link { pin, signal } => {
                let sig = self.signal(signal, "linkps")?.to_string();
                let p = self.pin(pin, "linkps")?;
                // LinuxCNC 2.9 refuses to move a linked pin (whatever its man page says).
                if let Some(on) = self.model.pin_signal.get(&p).filter(|on| **on != sig) {
                    return Err(CommandError::rule(
                        pin.line,
                        format!("linkps: pin '{p}' is linked to '{on}'; unlinkp it first to link it to '{sig}'"),
                    ));
                }
                self.link(&sig, &p, None, None, pin.line)?;
            }
            Command::Linkpp { first, second } => {
                let a = self.pin(first, "linkpp")?;
                let b = self.pin(second, "linkpp")?;
                for (p, w) in [(&a, first), (&b, second)] {
                    if let Some(on) = self.model.pin_signal.get(p).filter(|on| **on != a) {
                        return Err(CommandError::rule(
                            w.line,
                            format!("linkpp: pin '{p}' is linked to '{on}'; unlinkp it first"),
                        ));
                    }
                }
                let ty = self.model.pins[&a].ty;
                if !self.model.signals.contains_key(&a) {
                    self.model.signals.insert(
                        a.clone(),
                        SigInfo {
                            ty,
                            value: None,
                            pins: Vec::new(),
                            origin,
                        },
                    );
                }
                self.link(&a, &a, None, None, first.line)?;
                self.link(&a, &b, None, None, second.line)?;
            }
            Command::Net { signal, pins } => self.net(signal, pins, origin)?,
            Command::Unlinkp { pin } => {
                let p = self.pin(pin, "unlinkp")?;
                self.model.unlink(&p);
            }
            Command::Setp { name, value } => self.setp(name, value)?,
            Command::Getp { name } => {
                let (full, _) = self.pin_or_param(name, "getp")?;
                let v = output::shown_value(self.value_of(&full));
                let _ = writeln!(out, "{v}");
            }
            Command::Ptype { name } => {
                let (full, is_param) = self.pin_or_param(name, "ptype")?;
                let ty = if is_param {
                    self.model.params[&full].ty
                } else {
                    self.model.pins[&full].ty
                };
                let _ = writeln!(out, "{ty}");
            }
            Command::Addf {
                function,
                thread,
                position,
            } => self.addf(function, thread, *position)?,
            Command::Delf { function, thread } => self.delf(function, thread.as_ref())?,
            Command::Alias { kind, name, alias } => self.alias(*kind, name, alias)?,
            Command::Unalias { kind, alias } => {
                if self
                    .model
                    .aliases
                    .remove(&(*kind, alias.text.clone()))
                    .is_none()
                {
                    return Err(CommandError::rule(
                        alias.line,
                        format!(
                            "unalias: no {} alias named {} (`list alias` shows the aliases)",
                            kind.as_str(),
                            quote(&alias.text)
                        ),
                    ));
                }
            }
            Command::Show { kind, patterns } => {
                let text = output::show(self, kind.as_ref(), patterns)
                    .map_err(|m| CommandError::rule(kind.as_ref().map_or(line, |w| w.line), m))?;
                let _ = out.write_all(text.as_bytes());
            }
            Command::List { kind, patterns } => {
                let text = output::list(self, kind, patterns)
                    .map_err(|m| CommandError::rule(kind.line, m))?;
                let _ = writeln!(out, "{text}");
            }
            Command::Save { item, file } => {
                let text = output::save(self, item.as_ref())
                    .map_err(|m| CommandError::rule(item.as_ref().map_or(line, |w| w.line), m))?;
                match file {
                    None => {
                        let _ = out.write_all(text.as_bytes());
                    }
                    Some(f) => std::fs::write(&f.text, text).map_err(|e| {
                        CommandError::rule(
                            f.line,
                            format!("save: cannot write {}: {e}", quote(&f.text)),
                        )
                    })?,
                }
            }
            Command::Source { file: f } => {
                return Err(CommandError::rule(
                    f.line,
                    "source: only runs inside a session's file list".to_string(),
                ))
            }
            Command::Echo => self.echo = true,
            Command::Unecho => self.echo = false,
            Command::Print { message } => {
                let _ = writeln!(out, "{file}:{line}: {message}");
            }
            Command::Status => {
                let _ = out.write_all(output::status(self).as_bytes());
            }
            Command::Lock | Command::Unlock | Command::Debug => {}
            Command::Start => {
                if self.backend.live().is_none() {
                    // The backend builds the instance from the model and starts it (halrun's way).
                    let mut backend = std::mem::take(&mut self.backend);
                    let started = backend.start(&|target| self.apply_to(target));
                    self.backend = backend;
                    if let Some(Err(e)) = started {
                        // When the runtime failed, the file is right: not bad usage.
                        let kind = match e {
                            crate::config::StartError::Runtime(_) => CommandErrorKind::RuntimeStart,
                            _ => CommandErrorKind::Rule,
                        };
                        return Err(CommandError::new(line, kind, format!("start: {e}")));
                    }
                }
                self.run_functions(true);
                self.started = true;
            }
            Command::Stop => {
                self.run_functions(false);
                self.started = false;
            }
            Command::Help { command } => {
                let _ = out.write_all(output::help(command.as_deref()).as_bytes());
            }
            Command::Quit => return Ok(Flow::Quit),
        }
        done
    }

    // ---- name lookups -------------------------------------------------------------------------

    pub(super) fn signal<'w>(&self, name: &'w Word, cmd: &str) -> Result<&'w str, CommandError> {
        if self.model.signals.contains_key(&name.text) {
            Ok(&name.text)
        } else {
            let known = self.model.signals.keys().map(String::as_str);
            let hint = crate::suggest::did_you_mean(&name.text, known).unwrap_or_else(|| {
                "signals are created by net (or newsig) above this line".to_string()
            });
            Err(CommandError::unknown(
                name.line,
                format!("{cmd}: no signal named {}; {hint}", quote(&name.text)),
            ))
        }
    }

    pub(super) fn resolve(&self, kind: AliasKind, name: &str) -> String {
        self.model
            .aliases
            .get(&(kind, name.to_string()))
            .cloned()
            .unwrap_or_else(|| name.to_string())
    }

    pub(super) fn pin(&self, name: &Word, cmd: &str) -> Result<String, CommandError> {
        let full = self.resolve(AliasKind::Pin, &name.text);
        if self.model.pins.contains_key(&full) {
            return Ok(full);
        }
        Err(if self.model.params.contains_key(&full) {
            CommandError::rule(
                name.line,
                format!(
                    "{cmd}: {} is a param, not a pin; params are set with setp",
                    quote(&name.text)
                ),
            )
        } else {
            CommandError::unknown(
                name.line,
                format!("{cmd}: {}", self.unknown("pin", &name.text)),
            )
        })
    }

    /// A param (preferred, as halcmd does) or a pin: the full name and whether it is a param.
    pub(super) fn pin_or_param(
        &self,
        name: &Word,
        cmd: &str,
    ) -> Result<(String, bool), CommandError> {
        let param = self.resolve(AliasKind::Param, &name.text);
        if self.model.params.contains_key(&param) {
            return Ok((param, true));
        }
        let pin = self.resolve(AliasKind::Pin, &name.text);
        if self.model.pins.contains_key(&pin) {
            return Ok((pin, false));
        }
        Err(CommandError::unknown(
            name.line,
            format!("{cmd}: {}", self.unknown("pin or param", &name.text)),
        ))
    }

    /// "no pin X" with the nearest names ([`crate::suggest`]), else where to see what its component
    /// has, or who creates it in LinuxCNC (the message of a [`CommandError::unknown`]).
    pub(super) fn unknown(&self, what: &str, name: &str) -> String {
        let pins = self.model.pins.keys().filter(|_| what != "param");
        let params = self.model.params.keys().filter(|_| what != "pin");
        let known = pins.chain(params).map(String::as_str);
        if let Some(hint) = crate::suggest::did_you_mean(name, known) {
            return format!("no {what} named {}; {hint}", quote(name));
        }
        let prefix = name.rsplit_once('.').map(|(p, _)| p).unwrap_or("");
        let has = |n: &&String| {
            n.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('.'))
        };
        if !prefix.is_empty()
            && (self.model.pins.keys().any(|n| has(&n))
                || self.model.params.keys().any(|n| has(&n)))
        {
            return format!(
                "no {what} named {}; `show pin {p}` and `show param {p}` list what {p} has",
                quote(name),
                p = clip(prefix),
            );
        }
        match output::linuxcnc_creator(name) {
            Some(who) => format!(
                "no {what} named {}; in LinuxCNC it is created by {who}, which rtapi's halrun does not host: run the whole machine with `rtapi linuxcnc INI`",
                quote(name)
            ),
            None => format!(
                "no {what} named {}; is its component loaded (loadrt) above this line?",
                quote(name)
            ),
        }
    }
}
