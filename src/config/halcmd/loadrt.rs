//! The commands that load and unload real-time components: `loadrt` (a native component, a LinuxCNC
//! module, or `threads`), learning what a component makes from a dry load into a scratch HAL, and
//! `unloadrt`; LinuxCNC's `loadrt` arguments mapped onto rtapi's.

use std::collections::BTreeMap;
use std::path::Path;

use super::backend::Backend;
use super::model::{LoadSpec, Loaded, Origin};
use super::{output, CommandError, Session, Word, MAX_COMPONENT_INSTANCES};
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

    pub(super) fn loadrt(
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

    pub(super) fn unloadrt(&mut self, component: &Word) -> Result<(), CommandError> {
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
