//! What the output commands print (show, list, save, status, help) and the messages about what
//! rtapi lacks (components, user-space programs, pins made by LinuxCNC's other programs).

use std::fmt::Write as _;

use rtapi_hal::{PinDir, Value};

use super::backend::Backend;
use super::lex::Word;
use super::parse::{AliasKind, UsrFlags, COMMANDS};
use super::Session;
use crate::components::Registry;
use crate::rt::units::quote;

pub(super) fn dir_word(dir: PinDir) -> &'static str {
    match dir {
        PinDir::In => "an IN pin",
        PinDir::Out => "an OUT pin",
        PinDir::Io => "an I/O pin",
    }
}

fn dir_short(dir: PinDir) -> &'static str {
    match dir {
        PinDir::In => "IN",
        PinDir::Out => "OUT",
        PinDir::Io => "I/O",
    }
}

fn link_arrow(dir: PinDir) -> &'static str {
    match dir {
        PinDir::In => "<==",
        PinDir::Out => "==>",
        PinDir::Io => "<=>",
    }
}

/// A value as halcmd shows it (getp, gets, show): [`crate::render::value_text`]. `save` writes full
/// precision instead, so that it recreates the exact value.
pub(super) fn shown_value(v: Value) -> String {
    crate::render::value_text(v)
}

/// Who makes pins and params of this name in LinuxCNC, for objects rtapi has no component for.
pub(super) fn linuxcnc_creator(name: &str) -> Option<String> {
    const CREATORS: &[(&str, &str)] = &[
        ("motion.", "the motion controller (loadrt motmod)"),
        ("axis.", "the motion controller (loadrt motmod)"),
        ("joint.", "the motion controller (loadrt motmod)"),
        ("spindle.", "the motion controller (loadrt motmod)"),
        ("iocontrol.", "the I/O controller (loadusr io)"),
        ("halui.", "halui (loadusr halui)"),
        ("ini.", "the task controller (milltask)"),
        ("pyvcp.", "a PyVCP panel of the GUI"),
        ("gladevcp.", "a GladeVCP panel of the GUI"),
        ("qtvcp.", "a QtVCP panel of the GUI"),
        ("axisui.", "the AXIS GUI"),
        ("gmoccapy.", "the gmoccapy GUI"),
        ("touchy.", "the touchy GUI"),
        ("gscreen.", "the gscreen GUI"),
        ("qtdragon.", "the QtDragon GUI"),
        ("classicladder.", "classicladder (loadrt classicladder_rt)"),
        ("hal_manualtoolchange.", "hal_manualtoolchange (loadusr)"),
        ("hm2_", "the Mesa hostmot2 driver (loadrt hostmot2)"),
        ("parport.", "the parallel port driver (loadrt hal_parport)"),
        ("kins.", "the kinematics module"),
        ("tpmod.", "the trajectory planner (tpmod)"),
        ("sim-hardware.", "sim_home_switch / sim-hardware"),
    ];
    if let Some(who) = CREATORS
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|(_, who)| *who)
    {
        return Some(who.to_string());
    }
    // Kinematics modules name their pins after themselves: pumakins.A2, genserkins.A-0.
    let first = name.split('.').next().unwrap_or("");
    (first.ends_with("kins") && first.len() > 4)
        .then(|| format!("the kinematics module {first} (loadrt {first})"))
}

/// `loadrt X` for a component rtapi does not have, nor a LinuxCNC module on the search path: the
/// nearest names of both ([`crate::suggest`]), else rtapi's components and where modules are looked
/// for.
pub(super) fn not_available(
    registry: &Registry,
    loader: &crate::components::linuxcnc::ModuleLoader,
    name: &str,
) -> String {
    let modules = loader.module_names();
    let known = registry
        .entries()
        .map(|e| e.name)
        .chain(modules.iter().map(String::as_str));
    let hint = match name {
        "motmod" | "tpmod" | "homemod" => " (LinuxCNC's motion controller)",
        n if n.ends_with("kins") => " (a LinuxCNC kinematics module)",
        n if n.starts_with("hm2") || n == "hostmot2" => " (Mesa hardware driver)",
        "hal_parport" | "parport" => " (parallel port driver)",
        _ => "",
    };
    let mut m = format!("component {}{hint} is not available in rtapi", quote(name));
    match crate::suggest::did_you_mean(name, known) {
        Some(near) => {
            let _ = write!(m, "; {near}");
        }
        None => {
            let all: Vec<&str> = registry.entries().map(|e| e.name).collect();
            let dirs: Vec<String> = loader
                .search_path()
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            let _ = write!(
                m,
                "; rtapi has: {}; and it loads LinuxCNC's modules NAME.so from {}",
                all.join(", "),
                dirs.join(":")
            );
        }
    }
    m
}

/// A `loadusr` before the instance runs: a program joins a running instance (`usr.rs`).
pub(super) fn loadusr_refusal(flags: &UsrFlags, program: &str) -> String {
    let what = match &flags.wait_component {
        Some(c) => format!(
            "user-space component {} (program {})",
            quote(c),
            quote(program)
        ),
        None => format!("user-space program {}", quote(program)),
    };
    format!(
        "loadusr: {what} cannot start before the instance runs: a user-space program joins a running instance (put loadusr after `start`); LinuxCNC's own user-space programs attach to LinuxCNC's HAL and cannot run under rtapi"
    )
}

/// A shell-style glob (`*`, `?`, `[…]`) against `name`.
fn glob(pattern: &[char], name: &[char]) -> bool {
    match pattern.first() {
        None => name.is_empty(),
        Some('*') => (0..=name.len()).any(|i| glob(&pattern[1..], &name[i..])),
        Some('?') => !name.is_empty() && glob(&pattern[1..], &name[1..]),
        Some('[') => {
            let Some(end) = pattern.iter().position(|&c| c == ']') else {
                return name.first() == Some(&'[') && glob(&pattern[1..], &name[1..]);
            };
            let Some(&c) = name.first() else {
                return false;
            };
            let set = &pattern[1..end];
            let (negate, set) = match set.first() {
                Some('!' | '^') => (true, &set[1..]),
                _ => (false, set),
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == '-' {
                    hit |= set[i] <= c && c <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob(&pattern[end + 1..], &name[1..])
        }
        Some(&p) => name.first() == Some(&p) && glob(&pattern[1..], &name[1..]),
    }
}

/// halcmd's matching: no pattern matches all; a pattern matches a name it prefixes or globs.
pub(super) fn matches(patterns: &[String], name: &str) -> bool {
    patterns.is_empty()
        || patterns.iter().any(|p| {
            name.starts_with(p.as_str()) || {
                let p: Vec<char> = p.chars().collect();
                let n: Vec<char> = name.chars().collect();
                glob(&p, &n)
            }
        })
}

const SHOW_KINDS: &str = "comp, pin, sig, param, funct, thread, alias or all";

pub(super) fn show<H: Backend>(
    s: &Session<H>,
    kind: Option<&Word>,
    patterns: &[String],
) -> Result<String, String> {
    let kind = kind.map_or("all", |w| w.text.as_str());
    let mut out = String::new();
    match kind {
        "comp" => show_comps(s, patterns, &mut out),
        "pin" => show_pins(s, patterns, &mut out),
        "param" | "parameter" => show_params(s, patterns, &mut out),
        "sig" | "signal" => show_signals(s, patterns, &mut out),
        "funct" | "function" => show_functs(s, patterns, &mut out),
        "thread" => show_threads(s, patterns, &mut out),
        "alias" => show_aliases(s, patterns, &mut out),
        "all" => {
            show_comps(s, patterns, &mut out);
            show_pins(s, patterns, &mut out);
            show_params(s, patterns, &mut out);
            show_signals(s, patterns, &mut out);
            show_functs(s, patterns, &mut out);
            show_threads(s, patterns, &mut out);
            if !s.model.aliases.is_empty() {
                show_aliases(s, patterns, &mut out);
            }
        }
        other => {
            // halcmd: `show NAME` with no type shows everything matching NAME.
            let p = [other.to_string()];
            let patterns = if patterns.is_empty() {
                &p[..]
            } else {
                patterns
            };
            if !patterns.iter().any(|p| !p.is_empty()) {
                return Err(format!(
                    "show: unknown type {}; use {SHOW_KINDS}",
                    quote(other)
                ));
            }
            show_comps(s, patterns, &mut out);
            show_pins(s, patterns, &mut out);
            show_params(s, patterns, &mut out);
            show_signals(s, patterns, &mut out);
            show_functs(s, patterns, &mut out);
            show_threads(s, patterns, &mut out);
        }
    }
    Ok(out)
}

fn title<H: Backend>(s: &Session<H>, out: &mut String, title: &str, header: &str) {
    if !s.script_friendly {
        let _ = writeln!(out, "{title}:\n{header}");
    }
}

fn end<H: Backend>(s: &Session<H>, out: &mut String) {
    if !s.script_friendly {
        out.push('\n');
    }
}

fn show_comps<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Loaded HAL Components",
        "  Component            Instance",
    );
    for l in &s.model.loaded {
        for n in l.names.iter().filter(|n| matches(patterns, n)) {
            let _ = writeln!(out, "  {:<20} {n}", l.component);
        }
    }
    for u in s.model.user.iter().filter(|u| matches(patterns, &u.name)) {
        let _ = writeln!(out, "  {:<20} {}", "(user)", u.name);
    }
    end(s, out);
}

/// The name `show` prints: the alias when there is one.
fn shown_name<H: Backend>(s: &Session<H>, kind: AliasKind, name: &str) -> String {
    s.model
        .aliases
        .iter()
        .find(|((k, _), orig)| *k == kind && *orig == name)
        .map_or_else(|| name.to_string(), |((_, a), _)| a.clone())
}

fn show_pins<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Component Pins",
        "  Owner                Type   Dir  Value                    Name",
    );
    for (name, p) in &s.model.pins {
        let shown = shown_name(s, AliasKind::Pin, name);
        if !matches(patterns, name) && !matches(patterns, &shown) {
            continue;
        }
        let link = s
            .model
            .pin_signal
            .get(name)
            .map_or(String::new(), |sig| format!(" {} {sig}", link_arrow(p.dir)));
        let _ = writeln!(
            out,
            "  {:<20} {:<6} {:<4} {:<24} {shown}{link}",
            if p.owner.is_empty() { "-" } else { &p.owner },
            p.ty.to_string(),
            dir_short(p.dir),
            shown_value(s.value_of(name))
        );
    }
    end(s, out);
}

fn show_params<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Parameters",
        "  Owner                Type   Dir  Value                    Name",
    );
    for (name, p) in &s.model.params {
        let shown = shown_name(s, AliasKind::Param, name);
        if !matches(patterns, name) && !matches(patterns, &shown) {
            continue;
        }
        let access = match p.access {
            rtapi_hal::ParamAccess::Ro => "RO",
            rtapi_hal::ParamAccess::Rw => "RW",
        };
        let _ = writeln!(
            out,
            "  {:<20} {:<6} {access:<4} {:<24} {shown}",
            if p.owner.is_empty() { "-" } else { &p.owner },
            p.ty.to_string(),
            shown_value(s.value_of(name))
        );
    }
    end(s, out);
}

fn show_signals<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Signals",
        "  Type   Value                    Name     (linked to)",
    );
    for (name, sig) in &s.model.signals {
        if !matches(patterns, name) {
            continue;
        }
        let value = shown_value(s.signal_value(name));
        if s.script_friendly {
            let _ = write!(out, "{} {value} {name}", sig.ty);
            for p in &sig.pins {
                let arrow = match s.model.pins[p].dir {
                    PinDir::In => "==>",
                    PinDir::Out => "<==",
                    PinDir::Io => "<=>",
                };
                let _ = write!(out, " {arrow} {p}");
            }
            out.push('\n');
        } else {
            let _ = writeln!(out, "  {:<6} {value:<24} {name}", sig.ty.to_string());
            for p in &sig.pins {
                let arrow = match s.model.pins[p].dir {
                    PinDir::In => "==>",
                    PinDir::Out => "<==",
                    PinDir::Io => "<=>",
                };
                let _ = writeln!(out, "{:36}{arrow} {p}", "");
            }
        }
    }
    end(s, out);
}

fn show_functs<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Exported Functions",
        "  Owner                Thread               Name",
    );
    for (name, owner) in &s.model.functions {
        if !matches(patterns, name) {
            continue;
        }
        let thread = s
            .model
            .threads
            .iter()
            .find(|t| t.functs.contains(name))
            .map_or("-", |t| t.spec.name.as_str());
        let _ = writeln!(out, "  {owner:<20} {thread:<20} {name}");
    }
    end(s, out);
}

fn show_threads<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Realtime Threads",
        "  Period (ns)  Name     (functions in run order)",
    );
    for t in &s.model.threads {
        if !matches(patterns, &t.spec.name) {
            continue;
        }
        let period = t.spec.period.as_nanos();
        if s.script_friendly {
            let _ = writeln!(out, "{period} {} {}", t.spec.name, t.functs.join(" "));
        } else {
            let _ = writeln!(out, "  {period:<12} {}", t.spec.name);
            for (i, f) in t.functs.iter().enumerate() {
                let _ = writeln!(out, "  {:12} {:>4} {f}", "", i + 1);
            }
        }
    }
    end(s, out);
}

fn show_aliases<H: Backend>(s: &Session<H>, patterns: &[String], out: &mut String) {
    title(
        s,
        out,
        "Aliases",
        "  Type   Alias                    Original",
    );
    for ((kind, alias), orig) in &s.model.aliases {
        if matches(patterns, alias) || matches(patterns, orig) {
            let _ = writeln!(out, "  {:<6} {alias:<24} {orig}", kind.as_str());
        }
    }
    end(s, out);
}

pub(super) fn list<H: Backend>(
    s: &Session<H>,
    kind: &Word,
    patterns: &[String],
) -> Result<String, String> {
    use super::NameKind as K;
    // `-tTYPE` or `-t TYPE` first; `signed`/`unsigned` are s32/u32, as in halcmd.
    let (ty, patterns) = match patterns.first().and_then(|p| p.strip_prefix("-t")) {
        Some("") if patterns.len() > 1 => (Some(patterns[1].clone()), &patterns[2..]),
        Some(t) => (Some(t.to_string()), &patterns[1..]),
        None => (None, patterns),
    };
    let ty = ty.map(|t| match t.as_str() {
        "signed" => "s32".to_string(),
        "unsigned" => "u32".to_string(),
        _ => t,
    });
    let names = match kind.text.as_str() {
        "comp" => s.names(K::Comp),
        "pin" => s.names(K::Pin),
        "param" | "parameter" => s.names(K::Param),
        "sig" | "signal" => s.names(K::Signal),
        "funct" | "function" => s.names(K::Funct),
        "thread" => s.names(K::Thread),
        other => {
            return Err(format!(
                "list: unknown type {}; use comp, pin, sig, param, funct or thread",
                quote(other)
            ))
        }
    };
    let m = &s.model;
    let type_of = |n: &String| -> Option<String> {
        let pin = s.resolve(AliasKind::Pin, n);
        let param = s.resolve(AliasKind::Param, n);
        m.pins
            .get(&pin)
            .map(|p| p.ty)
            .or_else(|| m.params.get(&param).map(|p| p.ty))
            .or_else(|| m.signals.get(n).map(|sig| sig.ty))
            .map(|t| t.to_string())
    };
    Ok(names
        .into_iter()
        .filter(|n| matches(patterns, n))
        .filter(|n| ty.as_ref().is_none_or(|t| type_of(n).as_ref() == Some(t)))
        // Each name followed by a blank, as halcmd prints them.
        .map(|n| n + " ")
        .collect::<String>())
}

/// `save [ITEM]`: halcmd text that recreates the HAL (`all`, the default: threads, comp, alias,
/// sigu, netla with sets values, param, unconnected IN pins that were set, thread).
pub(super) fn save<H: Backend>(s: &Session<H>, item: Option<&Word>) -> Result<String, String> {
    let item = item.map_or("all", |w| w.text.as_str());
    let m = &s.model;
    let mut out = String::new();
    let all = matches!(item, "all" | "allu");
    const ITEMS: &[&str] = &[
        "all",
        "allu",
        "comp",
        "alias",
        "sig",
        "signal",
        "sigu",
        "net",
        "neta",
        "netl",
        "netla",
        "netal",
        "link",
        "linka",
        "param",
        "parameter",
        "thread",
        "unconnectedinpins",
    ];
    if !ITEMS.contains(&item) {
        return Err(format!(
            "save: unknown item {}; use comp, alias, sig, sigu, net, netla, param, thread, unconnectedinpins, all or allu",
            quote(item)
        ));
    }
    if all || item == "comp" {
        out.push_str("# components\n");
        let threads: Vec<_> = m.threads.iter().filter(|t| t.from_loadrt).collect();
        if !threads.is_empty() {
            for chunk in threads.chunks(3) {
                out.push_str("loadrt threads");
                for (i, t) in chunk.iter().enumerate() {
                    let _ = write!(
                        out,
                        " name{n}={} period{n}={}",
                        t.spec.name,
                        t.spec.period.as_nanos(),
                        n = i + 1
                    );
                }
                out.push('\n');
            }
        }
        for l in &m.loaded {
            if l.text.is_empty() {
                let _ = writeln!(out, "loadrt {}", l.component);
            } else {
                let _ = writeln!(out, "loadrt {} {}", l.component, l.text);
            }
        }
    }
    if all || item == "alias" {
        for kind in [AliasKind::Pin, AliasKind::Param] {
            let _ = writeln!(out, "# {} aliases", kind.as_str());
            for ((k, alias), orig) in &m.aliases {
                if *k == kind {
                    let _ = writeln!(out, "alias {} {orig} {alias}", kind.as_str());
                }
            }
        }
    }
    if all || matches!(item, "sig" | "signal" | "sigu") {
        out.push_str("# signals\n");
        for (name, sig) in &m.signals {
            if item == "sig" || item == "signal" || sig.pins.is_empty() {
                let _ = writeln!(out, "newsig {name} {}", sig.ty);
            }
        }
    }
    if all
        || matches!(
            item,
            "net" | "neta" | "netl" | "netla" | "netal" | "link" | "linka"
        )
    {
        out.push_str("# nets\n");
        for (name, sig) in &m.signals {
            if sig.pins.is_empty() {
                continue;
            }
            let writer = m.writer(name);
            let mut line = format!("net {name}");
            if let Some(w) = writer {
                let _ = write!(line, " {w}");
                if sig.pins.len() > 1 {
                    line.push_str(" =>");
                }
            }
            for p in sig.pins.iter().filter(|p| Some(p.as_str()) != writer) {
                let _ = write!(line, " {p}");
            }
            let _ = writeln!(out, "{line}");
        }
    }
    if all || matches!(item, "sig" | "signal" | "sigu") {
        for (name, sig) in &m.signals {
            if let (Some(v), None) = (sig.value, m.writer(name)) {
                let _ = writeln!(out, "sets {name} {v}");
            }
        }
    }
    if all || matches!(item, "param" | "parameter") {
        out.push_str("# parameter values\n");
        for (name, p) in &m.params {
            if p.access == rtapi_hal::ParamAccess::Rw && p.owner != "rtapi" {
                let _ = writeln!(out, "setp {name} {}", s.value_of(name));
            }
        }
    }
    if all || item == "unconnectedinpins" {
        out.push_str("# unconnected pin values\n");
        for (name, p) in &m.pins {
            let set = m.values.contains_key(name) || item != "all";
            if p.dir == PinDir::In && !m.pin_signal.contains_key(name) && set {
                let _ = writeln!(out, "setp {name} {}", s.value_of(name));
            }
        }
    }
    if all || item == "thread" {
        out.push_str("# realtime thread/function links\n");
        for t in &m.threads {
            for f in &t.functs {
                let _ = writeln!(out, "addf {f} {}", t.spec.name);
            }
        }
    }
    if s.started && all {
        out.push_str("start\n");
    }
    Ok(out)
}

pub(super) fn status<H: Backend>(s: &Session<H>) -> String {
    let m = &s.model;
    format!(
        "HAL locking: none\ncomponents: {} instances of {} loadrt\npins: {}  params: {}  signals: {}  functions: {}  threads: {}\nthreads started: {}\n",
        m.instances,
        m.loaded.len(),
        m.pins.len(),
        m.params.len(),
        m.signals.len(),
        m.functions.len(),
        m.threads.len(),
        if s.started { "yes" } else { "no" }
    )
}

const HELP: &[(&str, &str)] = &[
    ("loadrt", "loadrt COMP [count=N | names=a,b] [ARG=VALUE ...]: load a component (rtapi's built-ins); loadrt threads name1=N period1=NS ..."),
    ("unloadrt", "unloadrt COMP | all: unload a component"),
    ("loadusr", "loadusr [-W | -Wn NAME | -w | -i] PROGRAM [ARGS]: start a program with RTAPI_INSTANCE set, once the instance runs; -W/-Wn NAME wait (10 s) for its component, -w for its exit"),
    ("waitusr", "waitusr [-i] NAME: wait until user-space component NAME is gone"),
    ("unloadusr", "unloadusr NAME | all"),
    ("unload", "unload NAME | all: unload a component"),
    ("newsig", "newsig SIGNAL TYPE: create a signal (bit, float, s32, u32, s64, u64)"),
    ("delsig", "delsig SIGNAL | all: delete a signal, unlinking its pins"),
    ("sets", "sets SIGNAL VALUE: set a signal without a writer"),
    ("gets", "gets SIGNAL: print a signal's value"),
    ("stype", "stype SIGNAL: print a signal's type"),
    ("linkps", "linkps PIN [ARROW] SIGNAL: link a pin to a signal"),
    ("linksp", "linksp SIGNAL [ARROW] PIN: link a signal to a pin"),
    ("linkpp", "linkpp PIN1 [ARROW] PIN2: link two pins through a signal named as PIN1"),
    ("net", "net SIGNAL PIN [ARROW] PIN ...: create (if needed) and link a signal"),
    ("unlinkp", "unlinkp PIN: unlink a pin (it keeps the signal's last value)"),
    ("setp", "setp NAME VALUE (or NAME = VALUE): set a param or an unlinked IN pin"),
    ("getp", "getp NAME: print a pin's or param's value"),
    ("ptype", "ptype NAME: print a pin's or param's type"),
    ("addf", "addf FUNCT THREAD [POSITION]: add a function to a thread (1 = first, -1 = last)"),
    ("delf", "delf FUNCT [THREAD]: remove a function from its thread"),
    ("alias", "alias pin|param NAME ALIAS: a second name"),
    ("unalias", "unalias pin|param ALIAS"),
    ("show", "show [comp|pin|sig|param|funct|thread|alias|all] [PATTERN ...]"),
    ("list", "list comp|pin|sig|param|funct|thread [-tTYPE] [PATTERN ...]: names on one line"),
    ("save", "save [comp|alias|sig|sigu|net|netla|param|thread|unconnectedinpins|all|allu] [FILE]: halcmd text that recreates the HAL"),
    ("source", "source FILE: run a file's commands (relative to the file that sources it)"),
    ("echo", "echo: print each command before it runs"),
    ("unecho", "unecho: stop echo"),
    ("print", "print [MESSAGE]: print file:line and a message"),
    ("status", "status [lock|mem|all]: counts of objects"),
    ("lock", "lock [all|tune|none]: accepted; rtapi has no HAL lock yet"),
    ("unlock", "unlock [all|tune]: accepted"),
    ("start", "start: run the threads (halrun keeps running until Ctrl-C)"),
    ("stop", "stop: do not run the threads"),
    ("help", "help [COMMAND]"),
    ("debug", "debug [LEVEL]: accepted"),
    ("quit", "quit: stop reading commands"),
    ("exit", "exit: stop reading commands"),
];

pub(super) fn help(command: Option<&str>) -> String {
    match command {
        Some(c) => match HELP.iter().find(|(n, _)| *n == c) {
            Some((_, text)) => format!("{text}\n"),
            None => format!(
                "no command {}; commands: {}\n",
                quote(c),
                COMMANDS.join(" ")
            ),
        },
        None => HELP.iter().map(|(_, t)| format!("{t}\n")).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_prefixes() {
        let m = |p: &str, n: &str| matches(&[p.to_string()], n);
        assert!(m("pid", "pid.0.Pgain"));
        assert!(m("pid.*.Pgain", "pid.12.Pgain"));
        assert!(m("pid.?.P*", "pid.1.Pgain"));
        assert!(m("pid.[0-2].x", "pid.2.x"));
        assert!(!m("pid.[!0-2].x", "pid.2.x"));
        assert!(!m("pidx", "pid.0"));
        assert!(matches(&[], "anything"));
    }

    #[test]
    fn help_covers_every_command() {
        for c in COMMANDS {
            assert!(HELP.iter().any(|(n, _)| n == c), "{c}");
        }
    }
}
