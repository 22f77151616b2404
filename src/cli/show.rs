//! `rtapi show [comp|pin|param|sig|funct|thread|all] [GLOB] [--instance NAME] [--json]`, like
//! `halcmd show`: what a running instance is made of and its values right now.
//!
//! `GLOB` filters by name: `*` and `?` are wildcards; without one it matches names that start with it
//! (`rtapi show pin pid.0` lists every pin of `pid.0`), as halcmd does.

use std::fmt::Write as _;

use rtapi_hal::{
    Access, HalReader, HalSnapshot, PinDir, SegmentState, ThreadInfo, ThreadState, Value,
};
use serde_json::{json, Map, Value as Json};

use super::{instance, out, Failure};
use crate::render::{self, Align, Col, Table, ThreadRow};
use crate::rt::units::us;

/// What to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Kind {
    #[value(alias = "component", alias = "components")]
    Comp,
    #[value(alias = "pins")]
    Pin,
    #[value(alias = "params", alias = "parameter")]
    Param,
    #[value(alias = "signal", alias = "signals")]
    Sig,
    #[value(alias = "function", alias = "functions")]
    Funct,
    #[value(alias = "threads")]
    Thread,
    All,
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// What to list (default: all).
    #[arg(value_enum)]
    kind: Option<Kind>,
    /// Only names matching this pattern (`*`, `?`; a plain word matches as a prefix).
    glob: Option<String>,
    #[command(flatten)]
    target: instance::Target,
    /// One JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// halcmd's matching: wildcards if the pattern has any, else a prefix match.
pub(super) fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return name.starts_with(pattern);
    }
    fn glob(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => glob(&p[1..], n) || (!n.is_empty() && glob(p, &n[1..])),
            (Some(b'?'), Some(_)) => glob(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => glob(&p[1..], &n[1..]),
            _ => false,
        }
    }
    glob(pattern.as_bytes(), name.as_bytes())
}

/// A HAL value as JSON: bit → bool, float → number (non-finite → null), integers → numbers.
pub(super) fn value_json(v: Value) -> Json {
    match v {
        Value::Bit(b) => json!(b),
        Value::Float(f) => serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number),
        Value::S32(i) => json!(i),
        Value::U32(i) => json!(i),
        Value::S64(i) => json!(i),
        Value::U64(i) => json!(i),
    }
}

/// A thread's state as `show thread` says it: `running`, `stopped`, or `STALLED in FUNCTION`.
fn thread_state_text(snap: &HalSnapshot, t: &ThreadInfo) -> String {
    match t.state {
        ThreadState::Running => "running".into(),
        ThreadState::Stopped => "stopped".into(),
        ThreadState::Stalled { function } => match stalled_in(snap, t, function) {
            Some(f) => format!("STALLED in {f}"),
            None => "STALLED (outside its functions)".into(),
        },
    }
}

/// The name of the function at `position` of thread `t`.
fn stalled_in(snap: &HalSnapshot, t: &ThreadInfo, position: Option<u32>) -> Option<String> {
    let p = position?;
    snap.functions
        .iter()
        .find(|f| {
            f.thread
                .as_ref()
                .is_some_and(|(n, pos)| *n == t.name && *pos == p)
        })
        .map(|f| f.name.clone())
}

fn state_name(s: SegmentState) -> &'static str {
    match s {
        SegmentState::Ready => "ready",
        SegmentState::Running => "running",
        SegmentState::Stopped => "stopped",
    }
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let reader = instance::open(&args.target, Access::ReadOnly)?;
    let snap = reader
        .snapshot()
        .map_err(|e| Failure::runtime(e.to_string()))?;
    let kind = args.kind.unwrap_or(Kind::All);
    let glob = args.glob.as_deref().unwrap_or("");
    if args.json {
        let mut out = to_json(&snap, kind, glob);
        // I/O-time percentiles come from the I/O histogram, which the snapshot does not hold.
        if let Some(threads) = out.get_mut("threads").and_then(Json::as_array_mut) {
            for j in threads.iter_mut().filter(|j| j.get("io_ns").is_some()) {
                let Some(t) = j["name"]
                    .as_str()
                    .and_then(|n| snap.threads.iter().find(|t| t.name == n))
                else {
                    continue;
                };
                let h = reader.io_histogram(&t.name).ok().flatten();
                j["io_ns"] = thread_row(t).with_io_histogram(h.as_ref()).json()["io_ns"].take();
            }
        }
        if !reader.owner_alive() {
            out["state"] = json!("dead");
        }
        out["owner_alive"] = json!(reader.owner_alive());
        out::println(
            &serde_json::to_string_pretty(&out).map_err(|e| Failure::runtime(e.to_string()))?,
        )?;
    } else {
        out::print(&render(&reader, &snap, kind, glob))?;
    }
    Ok(())
}

fn wants(kind: Kind, k: Kind) -> bool {
    kind == Kind::All || kind == k
}

/// The JSON form: `instance`, `state`, `owner_pid`, then one array per kind shown. (`run` sets `state` to
/// `dead` and adds `owner_alive` from the owner's lock, which a snapshot does not know.)
pub(super) fn to_json(snap: &HalSnapshot, kind: Kind, glob: &str) -> Json {
    let mut o = Map::new();
    o.insert("instance".into(), json!(snap.header.instance));
    o.insert("state".into(), json!(state_name(snap.header.state)));
    o.insert("owner_pid".into(), json!(snap.header.owner_pid));
    o.insert("generation".into(), json!(snap.generation));
    // The room of each table: what it holds, what is in use, what can still be added (a deleted
    // record's room is reused, so `free` comes back when components leave).
    let room: Map<String, Json> = snap
        .tables
        .iter()
        .map(|t| {
            (
                t.table.to_string(),
                json!({"capacity": t.capacity, "used": t.used, "free": t.free(),
                       "deleted": t.deleted}),
            )
        })
        .collect();
    o.insert("room".into(), Json::Object(room));
    let m = |name: &str| matches(glob, name);
    if wants(kind, Kind::Comp) {
        let v: Vec<Json> = snap
            .components
            .iter()
            .filter(|c| m(&c.name))
            .map(|c| json!({"name": c.name, "pins": c.pins, "params": c.params, "functions": c.functions}))
            .collect();
        o.insert("components".into(), Json::Array(v));
    }
    if wants(kind, Kind::Pin) {
        let v: Vec<Json> = snap
            .pins
            .iter()
            .filter(|p| m(&p.name))
            .map(|p| {
                json!({"name": p.name, "component": p.component, "type": p.ty.as_str(),
                       "dir": p.dir.as_str(), "value": value_json(p.value), "signal": p.signal})
            })
            .collect();
        o.insert("pins".into(), Json::Array(v));
    }
    if wants(kind, Kind::Param) {
        let v: Vec<Json> = snap
            .params
            .iter()
            .filter(|p| m(&p.name))
            .map(|p| {
                json!({"name": p.name, "component": p.component, "type": p.ty.as_str(),
                       "access": p.access.as_str(), "value": value_json(p.value)})
            })
            .collect();
        o.insert("params".into(), Json::Array(v));
    }
    if wants(kind, Kind::Sig) {
        let v: Vec<Json> = snap
            .signals
            .iter()
            .filter(|s| m(&s.name))
            .map(|s| {
                let readers: Vec<&str> = snap
                    .pins
                    .iter()
                    .filter(|p| p.signal.as_deref() == Some(&s.name) && p.dir != PinDir::Out)
                    .map(|p| p.name.as_str())
                    .collect();
                json!({"name": s.name, "type": s.ty.as_str(), "value": value_json(s.value),
                       "writer": s.writer, "readers": readers})
            })
            .collect();
        o.insert("signals".into(), Json::Array(v));
    }
    if wants(kind, Kind::Funct) {
        let v: Vec<Json> = snap
            .functions
            .iter()
            .filter(|f| m(&f.name))
            .map(|f| {
                json!({"name": f.name, "component": f.component,
                       "thread": f.thread.as_ref().map(|t| &t.0),
                       "position": f.thread.as_ref().map(|t| t.1),
                       "calls": f.timing.calls, "last_ns": f.timing.last_ns,
                       "max_ns": f.timing.max_ns, "mean_ns": f.timing.mean_ns(),
                       "faults": f.timing.faults})
            })
            .collect();
        o.insert("functions".into(), Json::Array(v));
    }
    if wants(kind, Kind::Thread) {
        let v: Vec<Json> = snap
            .threads
            .iter()
            .filter(|t| m(&t.name))
            .map(|t| {
                let mut j = thread_row(t).json();
                j["flavor"] = json!(t.flavor);
                j["timer"] = json!(t.timer);
                j["running"] = json!(t.running);
                j["state"] = json!(match t.state {
                    ThreadState::Running => "running",
                    ThreadState::Stopped => "stopped",
                    ThreadState::Stalled { .. } => "stalled",
                });
                j["stalled_in"] = json!(match t.state {
                    ThreadState::Stalled { function } => stalled_in(snap, t, function),
                    _ => None,
                });
                j["functions"] = json!(t.functions);
                j
            })
            .collect();
        o.insert("threads".into(), Json::Array(v));
    }
    Json::Object(o)
}

/// One section: its title, the table, a blank line.
fn table(out: &mut String, title: &str, columns: &[(&str, Align)], rows: Vec<Vec<String>>) {
    let mut t = Table::new(columns.iter().copied());
    for r in rows {
        t.row(r);
    }
    let _ = writeln!(out, "{title}:\n{t}");
}

/// The columns of the "Realtime Threads" table: the common thread columns around the HAL's own.
const THREAD_HEAD: [Col; 4] = [Col::Name, Col::Period, Col::Cpu, Col::Prio];
const THREAD_TAIL: [Col; 6] = [
    Col::Cycles,
    Col::Overruns,
    Col::LatMean,
    Col::LatMax,
    Col::Jitter,
    Col::ExecMax,
];

/// A thread's figures as `show` and `show --json` give them.
fn thread_row(t: &ThreadInfo) -> ThreadRow {
    ThreadRow::new(t.name.clone(), t.period_ns)
        .with_stats(&t.stats)
        .with_cpu(t.cpu.map(|c| c as usize))
        .with_priority(t.priority)
}

/// halcmd's capitalised headings for the common thread columns (`Lat max(us)`, `CPU`).
fn halcmd_heading(c: Col) -> (&'static str, Align) {
    let h = match c {
        Col::Name => "Name",
        Col::Period => "Period",
        Col::Cpu => "CPU",
        Col::Prio => "Prio",
        Col::Cycles => "Cycles",
        Col::Overruns => "Overruns",
        Col::LatMean => "Lat mean(us)",
        Col::LatMax => "Lat max(us)",
        Col::Jitter => "Jitter(us)",
        Col::ExecMax => "Exec max(us)",
        other => other.heading(),
    };
    (h, c.align())
}

/// `Room used: 42 of 170 components, 169 of 4241 pins, …` (threads are fixed, left out).
fn room_line(snap: &HalSnapshot) -> String {
    let parts: Vec<String> = snap
        .tables
        .iter()
        .filter(|t| t.table != "thread")
        .map(|t| format!("{} of {} {}s", t.used, t.capacity, t.table))
        .collect();
    format!("Room used: {}", parts.join(", "))
}

/// The halcmd-like text form.
pub(super) fn render(reader: &HalReader, snap: &HalSnapshot, kind: Kind, glob: &str) -> String {
    let mut out = String::new();
    let h = reader.header();
    let m = |name: &str| matches(glob, name);
    let alive = reader.owner_alive();
    // A dead owner's segment still says "running" in its words: the header line says dead on every view.
    if kind == Kind::All || !alive {
        let state = if alive {
            state_name(h.state).to_string()
        } else {
            instance::dead_state(h.owner_pid)
        };
        let _ = writeln!(
            out,
            "Instance '{}' (pid {}, {}, segment {} bytes)",
            h.instance, h.owner_pid, state, h.total_size
        );
        if kind == Kind::All {
            let _ = writeln!(out, "{}", room_line(snap));
        }
        let _ = writeln!(out);
    }
    if wants(kind, Kind::Comp) {
        let rows = snap
            .components
            .iter()
            .filter(|c| m(&c.name))
            .map(|c| {
                vec![
                    c.name.clone(),
                    c.pins.to_string(),
                    c.params.to_string(),
                    c.functions.to_string(),
                ]
            })
            .collect();
        table(
            &mut out,
            "Components",
            &[
                ("Name", Align::Left),
                ("Pins", Align::Right),
                ("Params", Align::Right),
                ("Functs", Align::Right),
            ],
            rows,
        );
    }
    if wants(kind, Kind::Pin) {
        // By name, as halcmd's show lists them.
        let mut pins: Vec<_> = snap.pins.iter().filter(|p| m(&p.name)).collect();
        pins.sort_by(|a, b| a.name.cmp(&b.name));
        let rows = pins
            .into_iter()
            .map(|p| {
                let link = p.signal.as_ref().map_or(String::new(), |s| {
                    let arrow = match p.dir {
                        PinDir::In => "<==",
                        PinDir::Out => "==>",
                        PinDir::Io => "<=>",
                    };
                    format!("{arrow} {s}")
                });
                vec![
                    p.component.clone(),
                    p.ty.to_string(),
                    p.dir.as_str().to_string(),
                    render::value_text(p.value),
                    p.name.clone(),
                    link,
                ]
            })
            .collect();
        table(
            &mut out,
            "Pins",
            &[
                ("Owner", Align::Left),
                ("Type", Align::Left),
                ("Dir", Align::Left),
                ("Value", Align::Left),
                ("Name", Align::Left),
                ("Signal", Align::Left),
            ],
            rows,
        );
    }
    if wants(kind, Kind::Param) {
        // By name, as halcmd's show lists them.
        let mut params: Vec<_> = snap.params.iter().filter(|p| m(&p.name)).collect();
        params.sort_by(|a, b| a.name.cmp(&b.name));
        let rows = params
            .into_iter()
            .map(|p| {
                vec![
                    p.component.clone(),
                    p.ty.to_string(),
                    p.access.as_str().to_string(),
                    render::value_text(p.value),
                    p.name.clone(),
                ]
            })
            .collect();
        table(
            &mut out,
            "Parameters",
            &[
                ("Owner", Align::Left),
                ("Type", Align::Left),
                ("Dir", Align::Left),
                ("Value", Align::Left),
                ("Name", Align::Left),
            ],
            rows,
        );
    }
    if wants(kind, Kind::Sig) {
        // By name, as halcmd's show lists them.
        let mut signals: Vec<_> = snap.signals.iter().filter(|s| m(&s.name)).collect();
        signals.sort_by(|a, b| a.name.cmp(&b.name));
        let rows = signals
            .into_iter()
            .map(|s| {
                let mut links: Vec<String> = s.writer.iter().map(|w| format!("<== {w}")).collect();
                for p in &snap.pins {
                    if p.signal.as_deref() == Some(&s.name) && p.dir != PinDir::Out {
                        let arrow = if p.dir == PinDir::Io { "<=>" } else { "==>" };
                        links.push(format!("{arrow} {}", p.name));
                    }
                }
                vec![
                    s.ty.to_string(),
                    render::value_text(s.value),
                    s.name.clone(),
                    links.join("  "),
                ]
            })
            .collect();
        table(
            &mut out,
            "Signals",
            &[
                ("Type", Align::Left),
                ("Value", Align::Left),
                ("Name", Align::Left),
                ("Linked to", Align::Left),
            ],
            rows,
        );
    }
    if wants(kind, Kind::Funct) {
        let rows = snap
            .functions
            .iter()
            .filter(|f| m(&f.name))
            .map(|f| {
                let (thread, pos) = f
                    .thread
                    .as_ref()
                    .map_or(("-".to_string(), "-".to_string()), |(t, p)| {
                        (t.clone(), (p + 1).to_string())
                    });
                vec![
                    f.component.clone(),
                    thread,
                    pos,
                    us(f.timing.last_ns as f64),
                    us(f.timing.max_ns as f64),
                    f.timing.mean_ns().map_or("-".into(), us),
                    f.timing.faults.to_string(),
                    f.name.clone(),
                ]
            })
            .collect();
        table(
            &mut out,
            "Exported Functions",
            &[
                ("Owner", Align::Left),
                ("Thread", Align::Left),
                ("Pos", Align::Right),
                ("Last(us)", Align::Right),
                ("Max(us)", Align::Right),
                ("Mean(us)", Align::Right),
                ("Faults", Align::Right),
                ("Name", Align::Left),
            ],
            rows,
        );
    }
    if wants(kind, Kind::Thread) {
        let rows = snap
            .threads
            .iter()
            .filter(|t| m(&t.name))
            .map(|t| {
                let row = thread_row(t);
                let mut cells = row.cells(&THREAD_HEAD);
                cells.extend([
                    t.flavor.clone(),
                    t.timer.clone(),
                    if alive {
                        thread_state_text(snap, t)
                    } else {
                        "dead".to_string()
                    },
                ]);
                cells.extend(row.cells(&THREAD_TAIL));
                cells
            })
            .collect();
        let mut columns: Vec<(&str, Align)> = THREAD_HEAD.map(halcmd_heading).to_vec();
        columns.extend([
            ("Flavor", Align::Left),
            ("Timer", Align::Left),
            ("State", Align::Left),
        ]);
        columns.extend(THREAD_TAIL.map(halcmd_heading));
        table(&mut out, "Realtime Threads", &columns, rows);
        // Threads that ran I/O functions (a Mesa card's hm2 read/write): their I/O time per period.
        let io: Vec<Vec<String>> = snap
            .threads
            .iter()
            .filter(|t| m(&t.name))
            .filter_map(|t| {
                let h = reader.io_histogram(&t.name).ok().flatten();
                let row = thread_row(t).with_io_histogram(h.as_ref());
                let io = row.io?;
                let us = |ns: u64| crate::rt::units::us(ns as f64);
                let pct = |f: fn(&crate::render::Percentiles) -> i64| {
                    io.percentiles
                        .as_ref()
                        .map_or_else(|| "-".to_string(), |p| us(f(p).max(0) as u64))
                };
                Some(vec![
                    t.name.clone(),
                    io.periods.to_string(),
                    io.calls.to_string(),
                    us(io.last),
                    us(io.min),
                    crate::rt::units::us(io.mean),
                    pct(|p| p.p50),
                    pct(|p| p.p99),
                    us(io.max),
                    io.errors
                        .map_or_else(|| "-".to_string(), |e| e.count.to_string()),
                ])
            })
            .collect();
        if !io.is_empty() {
            table(
                &mut out,
                "Thread I/O (hm2 read/write time per period)",
                &[
                    ("Name", Align::Left),
                    ("Periods", Align::Right),
                    ("Calls", Align::Right),
                    ("Last(us)", Align::Right),
                    ("Min(us)", Align::Right),
                    ("Mean(us)", Align::Right),
                    ("p50(us)", Align::Right),
                    ("p99(us)", Align::Right),
                    ("Max(us)", Align::Right),
                    ("PktErrors", Align::Right),
                ],
                io,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halcmd_matching() {
        assert!(matches("", "pid.0.command"));
        assert!(matches("pid.0", "pid.0.command"));
        assert!(!matches("pid.1", "pid.0.command"));
        assert!(matches("pid.*.command", "pid.12.command"));
        assert!(matches("*gain", "pid.0.Pgain"));
        assert!(matches("pid.?.P*", "pid.0.Pgain"));
        assert!(!matches("pid.?.P*", "pid.10.Pgain"));
        assert!(!matches("*gain", "pid.0.gains"));
    }

    #[test]
    fn values_as_text_are_halcmds() {
        let t = crate::render::value_text;
        assert_eq!(t(Value::Float(-9.89576568306503)), "-9.895766");
        assert_eq!(t(Value::Float(2000.0)), "2000");
        assert_eq!(t(Value::Float(0.0)), "0");
        assert_eq!(t(Value::Float(-1.23e-7)), "-1.23e-07");
        assert_eq!(t(Value::Bit(true)), "TRUE");
        assert_eq!(t(Value::S32(-990)), "-990");
    }

    #[test]
    fn values_as_json() {
        assert_eq!(value_json(Value::Bit(true)), json!(true));
        assert_eq!(value_json(Value::Float(1.5)), json!(1.5));
        assert_eq!(value_json(Value::Float(f64::NAN)), Json::Null);
        assert_eq!(value_json(Value::S32(-3)), json!(-3));
        assert_eq!(value_json(Value::U64(u64::MAX)), json!(u64::MAX));
    }
}
