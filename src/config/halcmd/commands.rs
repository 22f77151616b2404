//! What each halcmd command does to the model: the dry loads that learn a component's pins, the
//! command dispatch (`exec`), name lookups with their "did you mean", and the structural commands
//! (loadrt, unloadrt, net, link, setp, sets, addf, delf, alias).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use rtapi_hal::{ParamAccess, PinDir, Value, ValueType};

use super::backend::Backend;
use super::model::{LoadSpec, Loaded, Origin, PinInfo, SigInfo};
use super::parse::{AliasKind, Arrow, Command, NetPin};
use super::{
    output, CommandError, CommandErrorKind, Flow, Session, Step, Word, MAX_COMPONENT_INSTANCES,
};
use crate::components::linuxcnc;
use crate::components::{Declared, Instances, LoadArgs, Presets, Validation};
use crate::config::invalid_name;
use crate::rt::clock::Nanos;
use crate::rt::units::{check_period, clip, quote};
use crate::runtime::ThreadSpec;

impl<H: Backend> Session<H> {
    /// Loads a component (native or a LinuxCNC module) into a scratch HAL that is never built, to
    /// learn the instance names and the pins and params it declares.
    fn dry_load(
        &self,
        spec: LoadSpec<'_>,
    ) -> Result<(Vec<String>, Declared), crate::components::LoadError> {
        let mut scratch = Validation::new(&self.instance)?;
        let mut declared = Declared::default();
        let names = spec.load_into(
            &self.registry,
            &self.modules,
            &mut scratch,
            &mut declared,
            &Presets::new(),
        )?;
        Ok((names, declared))
    }

    /// A `loadrt` may not reuse a component name (real-time or user-space) or a pin or param name.
    fn check_new_names(
        &self,
        line: usize,
        c: &str,
        names: &[String],
        declared: &Declared,
    ) -> Result<(), CommandError> {
        for name in names {
            if self.model.loaded.iter().any(|l| l.names.contains(name))
                || self.model.user.iter().any(|u| &u.name == name)
            {
                return Err(CommandError::rule(
                    line,
                    format!(
                        "loadrt {c}: a component named '{name}' already exists; give this one \
                         another name (names=…) or unloadrt that one first"
                    ),
                ));
            }
        }
        if let Some(dup) = declared
            .pins
            .keys()
            .chain(declared.params.keys())
            .find(|n| self.model.pins.contains_key(*n) || self.model.params.contains_key(*n))
        {
            return Err(CommandError::rule(
                line,
                format!("loadrt {c}: a pin or param named '{dup}' already exists"),
            ));
        }
        Ok(())
    }
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

    fn signal<'w>(&self, name: &'w Word, cmd: &str) -> Result<&'w str, CommandError> {
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

    fn pin(&self, name: &Word, cmd: &str) -> Result<String, CommandError> {
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
    fn pin_or_param(&self, name: &Word, cmd: &str) -> Result<(String, bool), CommandError> {
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
    fn unknown(&self, what: &str, name: &str) -> String {
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

    // ---- structural commands ------------------------------------------------------------------

    fn loadrt(
        &mut self,
        component: &Word,
        instances: &Instances,
        args: &BTreeMap<String, String>,
        text: &str,
        origin: Origin,
    ) -> Result<(), CommandError> {
        let line = origin.line;
        let c = clip(&component.text);
        if component.text == "threads" {
            return self.loadrt_threads(instances, args, origin);
        }
        let native = self.registry.get(&component.text).is_some();
        match self
            .modules
            .resolve(&component.text, native, self.dir.as_deref())
        {
            linuxcnc::Resolved::Module { path, explicit } => {
                return self
                    .loadrt_module(component, &path, instances, args, text, origin, explicit)
            }
            linuxcnc::Resolved::Missing { message } => {
                return Err(CommandError::rule(
                    component.line,
                    format!("loadrt {c}: {message}"),
                ))
            }
            linuxcnc::Resolved::Native | linuxcnc::Resolved::Unknown => {}
        }
        if let Some(e) = invalid_name("component", &component.text) {
            return Err(CommandError::rule(component.line, format!("loadrt: {e}")));
        }
        let Some(entry) = self.registry.get(&component.text) else {
            return Err(CommandError::rule(
                component.line,
                output::not_available(&self.registry, &self.modules, &component.text),
            ));
        };
        let (instances, args) = linuxcnc_args(&component.text, entry.args, instances, args)
            .map_err(|m| CommandError::rule(line, format!("loadrt {c}: {m}")))?;
        let n = match &instances {
            Instances::Count(n) => *n,
            Instances::Names(names) => names.len(),
        };
        if self.model.instances + n > MAX_COMPONENT_INSTANCES {
            return Err(CommandError::rule(
                line,
                format!(
                    "loadrt {c}: {n} more instances would make {}; a machine may load at most {MAX_COMPONENT_INSTANCES} component instances",
                    self.model.instances + n
                ),
            ));
        }
        let (names, declared) = self
            .dry_load(LoadSpec {
                component: &component.text,
                module: None,
                instances: &instances,
                args: &args,
            })
            .map_err(|e| CommandError::rule(line, format!("loadrt {c}: {}", e.message)))?;
        self.check_new_names(line, &c, &names, &declared)?;
        self.model.merge(declared, &names, "");
        self.model.instances += n;
        self.model.loaded.push(Loaded {
            component: component.text.clone(),
            instances,
            args,
            names,
            text: text.to_string(),
            origin,
            module: None,
        });
        Ok(())
    }

    /// `loadrt` of a LinuxCNC module (`components::linuxcnc`): its arguments, `count=`/`names=`
    /// included, are its own; its `rtapi_app_main` says which components, pins and functions it makes.
    /// Found by fallback (`explicit` false), a module that cannot run here is reported as a component
    /// rtapi does not have, with the reason.
    #[allow(clippy::too_many_arguments)]
    fn loadrt_module(
        &mut self,
        component: &Word,
        path: &Path,
        instances: &Instances,
        args: &BTreeMap<String, String>,
        text: &str,
        origin: Origin,
        explicit: bool,
    ) -> Result<(), CommandError> {
        let line = origin.line;
        let c = clip(&component.text);
        let args = LoadArgs { args: args.clone() };
        if self
            .model
            .loaded
            .iter()
            .any(|l| l.module.as_deref() == Some(path))
        {
            let module = path.file_stem().unwrap_or_default().to_string_lossy();
            return Err(CommandError::rule(
                line,
                format!(
                    "loadrt {c}: LinuxCNC module {module} is already loaded (unloadrt it first)"
                ),
            ));
        }
        let loaded = if self.check_only {
            self.modules
                .check_static(path, instances, &args)
                .map(|()| (Vec::new(), Declared::default()))
        } else {
            self.dry_load(LoadSpec {
                component: &component.text,
                module: Some(path),
                instances,
                args: &args,
            })
        };
        let (names, declared) = loaded.map_err(|e| {
            if e.is_unavailable() && !explicit {
                CommandError::rule(
                    component.line,
                    format!(
                        "{}; {}",
                        output::not_available(&self.registry, &self.modules, &component.text),
                        e.message
                    ),
                )
            } else {
                CommandError::rule(line, format!("loadrt {c}: {}", e.message))
            }
        })?;
        let n = names.len();
        if self.model.instances + n > MAX_COMPONENT_INSTANCES {
            return Err(CommandError::rule(
                line,
                format!(
                    "loadrt {c}: {n} more components would make {}; a machine may load at most {MAX_COMPONENT_INSTANCES} component instances",
                    self.model.instances + n
                ),
            ));
        }
        self.check_new_names(line, &c, &names, &declared)?;
        let fallback = names.first().cloned().unwrap_or_default();
        self.model.merge(declared, &names, &fallback);
        self.model.instances += n;
        self.model.loaded.push(Loaded {
            component: component.text.clone(),
            instances: instances.clone(),
            args,
            names,
            text: text.to_string(),
            origin,
            module: Some(path.to_path_buf()),
        });
        Ok(())
    }

    /// `loadrt threads name1=… period1=… [fp1=…] name2=…`: up to three threads, periods in ns.
    fn loadrt_threads(
        &mut self,
        instances: &Instances,
        args: &BTreeMap<String, String>,
        origin: Origin,
    ) -> Result<(), CommandError> {
        let line = origin.line;
        if *instances != Instances::Count(0) {
            return Err(CommandError::rule(
                line,
                "loadrt threads: takes name1= period1= [fp1=] … name3= period3=, not count= or names="
                    .to_string(),
            ));
        }
        if let Some(bad) = args.keys().find(|k| {
            !matches!(
                k.as_str(),
                "name1"
                    | "name2"
                    | "name3"
                    | "period1"
                    | "period2"
                    | "period3"
                    | "fp1"
                    | "fp2"
                    | "fp3"
            )
        }) {
            return Err(CommandError::rule(
                line,
                format!("loadrt threads: unknown argument {}; it takes name1= period1= [fp1=] up to name3= period3=", quote(bad)),
            ));
        }
        let mut specs = Vec::new();
        for i in 1..=3 {
            let name = args.get(&format!("name{i}"));
            let period = args.get(&format!("period{i}"));
            match (name, period) {
                (None, None) => {}
                (Some(_), None) | (None, Some(_)) => {
                    return Err(CommandError::rule(
                        line,
                        format!("loadrt threads: give both name{i}= and period{i}= (nanoseconds)"),
                    ))
                }
                (Some(name), Some(period)) => {
                    let ns: i64 = period.trim().parse().map_err(|_| {
                        CommandError::rule(
                            line,
                            format!(
                                "loadrt threads: period{i}={} is not a whole number of nanoseconds",
                                quote(period)
                            ),
                        )
                    })?;
                    let p = check_period(Nanos::from_nanos(ns)).map_err(|m| {
                        CommandError::rule(line, format!("loadrt threads: thread {name}: {m}"))
                    })?;
                    specs.push(ThreadSpec::new(name, p));
                }
            }
        }
        if specs.is_empty() {
            return Err(CommandError::rule(
                line,
                "loadrt threads: name at least one thread: name1=servo-thread period1=1000000"
                    .to_string(),
            ));
        }
        for spec in specs {
            self.add_thread(spec, origin.clone(), true)
                .map_err(|m| CommandError::rule(line, format!("loadrt threads: {m}")))?;
        }
        Ok(())
    }

    fn unloadrt(&mut self, component: &Word) -> Result<(), CommandError> {
        let all = component.text == "all";
        let mut found = false;
        if all || component.text == "threads" {
            let gone: Vec<String> = self
                .model
                .threads
                .iter()
                .filter(|t| t.from_loadrt)
                .map(|t| t.spec.name.clone())
                .collect();
            found |= !gone.is_empty();
            for t in gone {
                self.model.remove_thread(&t);
            }
        }
        let gone: Vec<Loaded> = self
            .model
            .loaded
            .iter()
            .filter(|l| {
                all || l.component == component.text
                    // A module checked without running it: its components are not known, its name is.
                    || (l.names.is_empty()
                        && l.module.as_deref().and_then(Path::file_stem)
                            == Some(std::ffi::OsStr::new(&component.text)))
            })
            .cloned()
            .collect();
        found |= !gone.is_empty();
        for l in gone {
            self.model.unload(&l);
        }
        if !found && !all {
            return Err(CommandError::rule(
                component.line,
                format!(
                    "unloadrt: no component {} is loaded",
                    quote(&component.text)
                ),
            ));
        }
        Ok(())
    }

    fn net(&mut self, signal: &Word, pins: &[NetPin], origin: Origin) -> Result<(), CommandError> {
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
    fn link(
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

    fn setp(&mut self, name: &Word, value: &Word) -> Result<(), CommandError> {
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

    fn sets(&mut self, signal: &Word, value: &Word) -> Result<(), CommandError> {
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

    fn addf(
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

    fn delf(&mut self, function: &Word, thread: Option<&Word>) -> Result<(), CommandError> {
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

    fn alias(&mut self, kind: AliasKind, name: &Word, alias: &Word) -> Result<(), CommandError> {
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

/// LinuxCNC's `loadrt` arguments mapped onto rtapi's: `num_chan=N` is `count=N` for components that
/// take it; stepgen's `step_type=` and `ctrl_type=` give one instance per value (rtapi's stepgen is
/// step/dir in position mode: type 0, `p`).
fn linuxcnc_args(
    component: &str,
    known: &[&str],
    instances: &Instances,
    args: &BTreeMap<String, String>,
) -> Result<(Instances, LoadArgs), String> {
    let mut args = args.clone();
    let mut instances = instances.clone();
    // `Count(0)`: no count=/names= given (see the parser).
    let explicit = instances != Instances::Count(0);
    let set_count = |key: &str, n: usize, instances: &mut Instances| -> Result<(), String> {
        if explicit && *instances != Instances::Count(n) {
            if let Instances::Names(names) = instances {
                if names.len() == n {
                    return Ok(());
                }
            }
            return Err(format!("{key}= gives {n} channels, but count=/names= gives another number; give one of them"));
        }
        if !explicit {
            *instances = Instances::Count(n);
        }
        Ok(())
    };
    if !known.contains(&"num_chan") {
        if let Some(v) = args.remove("num_chan") {
            let n = v
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=crate::components::MAX_INSTANCES).contains(n))
                .ok_or_else(|| {
                    format!("num_chan={}: give a positive number of channels", quote(&v))
                })?;
            set_count("num_chan", n, &mut instances)?;
        }
    }
    if component == "stepgen" {
        for key in ["step_type", "ctrl_type"] {
            if let Some(v) = args.remove(key) {
                let values: Vec<&str> = v.split(',').map(str::trim).collect();
                let ok = |x: &str| match key {
                    "step_type" => x == "0",
                    _ => x.eq_ignore_ascii_case("p"),
                };
                if let Some(bad) = values.iter().find(|x| !ok(x)) {
                    return Err(format!(
                        "{key}={}: rtapi's stepgen makes step/dir pulses in position mode only (step_type=0, ctrl_type=p); {} is not available",
                        quote(&v),
                        quote(bad)
                    ));
                }
                set_count(key, values.len(), &mut instances)?;
            }
        }
    }
    if instances == Instances::Count(0) {
        instances = Instances::Count(default_count(component));
    }
    Ok((instances, LoadArgs { args }))
}

/// How many instances `loadrt COMP` makes without count=/names=/num_chan=: LinuxCNC's `pid` and
/// `encoder` make three (their man pages), every other component one.
fn default_count(component: &str) -> usize {
    match component {
        "pid" | "encoder" => 3,
        _ => 1,
    }
}
