//! The machine TOML: which `.hal` files to run, the runtime options and the threads.
//!
//! ```toml
//! hal = ["sim-axis.hal"]          # relative to this file, run in order
//! # ini = "machine.ini"           # [SECTION]KEY in the .hal files comes from it (relative too)
//!
//! [runtime]
//! instance = "sim"                # segment /rtapi-sim (default "default"; --instance overrides)
//! flavor = "posix"                # rt-preempt | posix | sim (default: detect, or RTAPI_FLAVOR)
//! lock_memory = true              # mlockall + prefault (default true)
//! dma_latency = true              # hold /dev/cpu_dma_latency at 0 (default true)
//! group_readable = false          # segment mode 0640 instead of 0600 (default false)
//! on_stall = "demote"             # report | demote | stop: what follows a stalled thread
//! stall_periods = 5               # periods without progress (and at least 100 ms) = stalled
//!
//! [[thread]]
//! name = "base"
//! period = "50us"                 # "1ms", "25us", … or integer nanoseconds
//! # cpu = 1                       # default: the RT CPU detection picks
//! # priority = 98                 # SCHED_FIFO 1..=99; default: rate-monotonic
//! # timer = "nanosleep"           # nanosleep | posix-timer | timerfd
//! # wake = "sleep"                # sleep | hybrid | hybrid:MARGIN | spin
//! ```
//!
//! Every value is checked here, with the line it is on: the runtime sees only valid threads. A period
//! is a string with a unit or an integer of nanoseconds, within
//! [`MIN_PERIOD`](crate::rt::units::MIN_PERIOD)..=[`MAX_PERIOD`](crate::rt::units::MAX_PERIOD)
//! (the same rule as the command line's, [`crate::rt::units::check_period`]); at most [`MAX_THREADS`]
//! threads. A leading UTF-8 byte-order mark is skipped.

use std::ops::Range;
use std::str::FromStr;

use serde::Deserialize;
use toml::Spanned;

use super::{invalid_name, ConfigError};
use crate::flavor::Flavor;
use crate::rt::clock::Nanos;
use crate::rt::units::{check_period, parse_config_period, quote};
use crate::rt::wake::{TimerKind, WakeMode};
use crate::runtime::recorder::RecorderConfig;
use crate::runtime::watchdog::{StallAction, WatchdogOptions};
use crate::runtime::{RuntimeOptions, SpecProblem, ThreadSpec};

/// The most `[[thread]]` tables a machine may declare. Each is a SCHED_FIFO thread with its own
/// priority and statistics block; a CNC machine has two or three (base, servo, maybe a slow one).
pub(crate) const MAX_THREADS: usize = 64;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMachine {
    #[serde(default)]
    hal: Vec<Spanned<String>>,
    ini: Option<Spanned<String>>,
    #[serde(default)]
    runtime: RawRuntime,
    #[serde(default)]
    thread: Vec<Spanned<RawThread>>,
    recorder: Option<Spanned<RawRecorder>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecorder {
    seconds: Option<Spanned<toml::Value>>,
    post: Option<Spanned<String>>,
    dir: Spanned<String>,
    #[serde(default)]
    pins: Vec<Spanned<String>>,
    freeze_on: Option<Vec<Spanned<String>>>,
    holdoff: Option<Spanned<String>>,
    max_dumps: Option<Spanned<i64>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRuntime {
    instance: Option<Spanned<String>>,
    flavor: Option<Spanned<String>>,
    lock_memory: Option<bool>,
    dma_latency: Option<bool>,
    group_readable: Option<bool>,
    on_stall: Option<Spanned<String>>,
    stall_periods: Option<Spanned<i64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawThread {
    name: Spanned<String>,
    period: Spanned<toml::Value>,
    cpu: Option<Spanned<i64>>,
    priority: Option<Spanned<i64>>,
    timer: Option<Spanned<String>>,
    wake: Option<Spanned<String>>,
}

/// A `.hal` file named by the TOML, and the TOML line naming it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HalRef {
    pub(crate) path: String,
    pub(crate) line: usize,
}

/// The TOML, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MachineToml {
    pub(crate) hal: Vec<HalRef>,
    /// `ini = "FILE"`: the INI file for `[SECTION]KEY` substitution.
    pub(crate) ini: Option<HalRef>,
    pub(crate) runtime: RuntimeOptions,
    pub(crate) threads: Vec<ThreadSpec>,
    /// The line of each `[[thread]]` table.
    pub(crate) thread_lines: Vec<usize>,
    /// The line of each thread's `cpu =` key, if it has one.
    pub(crate) cpu_lines: Vec<Option<usize>>,
}

/// The 1-based line of byte `offset` in `text`.
pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The `[recorder]` table:
///
/// ```toml
/// [recorder]
/// dir = "recorder"        # where dumps go (relative to the TOML file)
/// seconds = 5             # history kept per thread (default 5, at most 600)
/// post = "100ms"          # recording after the event, then freeze (default 100ms)
/// pins = ["x-pos-fb"]     # up to 8 pins or signals recorded each period
/// freeze_on = ["overrun", "stall", "fault", "falling:estop-ok", "rising:limit"]  # (default: the first three)
/// holdoff = "10s"         # after a dump, events are ignored this long (default 10s; requests are not)
/// max_dumps = 20          # dumps of events per run (default 20; requests always dump)
/// ```
///
/// `overrun:N` freezes only on a period that missed at least N deadlines.
fn recorder(
    file: &str,
    text: &str,
    r: &RawRecorder,
    err: &mut dyn FnMut(Range<usize>, String),
) -> RecorderConfig {
    use crate::runtime::recorder::{PinTrigger, MAX_PINS, MAX_SECONDS};
    let origin = |span: Range<usize>| format!("{file}:{}: ", line_of(text, span.start));
    let window = match &r.seconds {
        None => Nanos::from_secs(5),
        Some(v) => {
            let secs = match v.get_ref() {
                toml::Value::Integer(i) => Some(*i as f64),
                toml::Value::Float(f) => Some(*f),
                _ => None,
            };
            match secs {
                Some(s) if s > 0.0 && s <= MAX_SECONDS => Nanos::from_nanos((s * 1e9) as i64),
                _ => {
                    err(
                        v.span(),
                        format!("seconds = {} must be a number of seconds above 0 and at most {MAX_SECONDS}", v.get_ref()),
                    );
                    Nanos::from_secs(5)
                }
            }
        }
    };
    let post = match &r.post {
        None => Nanos::from_millis(100),
        Some(p) => match crate::rt::units::parse_duration(p.get_ref()) {
            Ok(d) if d >= Nanos::ZERO && d <= Nanos::from_secs(10) => d,
            Ok(_) => {
                err(
                    p.span(),
                    format!("post {} must be from 0 to 10s", quote(p.get_ref())),
                );
                Nanos::ZERO
            }
            Err(e) => {
                err(p.span(), format!("post: {e}"));
                Nanos::ZERO
            }
        },
    };
    if r.dir.get_ref().trim().is_empty() {
        err(r.dir.span(), "dir: an empty directory name".into());
    }
    if r.pins.len() > MAX_PINS {
        err(
            r.pins[MAX_PINS].span(),
            format!(
                "pins: {} pins; a recorder records at most {MAX_PINS}",
                r.pins.len()
            ),
        );
    }
    let mut pins = Vec::new();
    for p in &r.pins {
        if let Some(e) = super::invalid_name("recorder pin", p.get_ref()) {
            err(p.span(), format!("pins: {e}"));
        }
        pins.push((p.get_ref().clone(), origin(p.span())));
    }
    let (mut on_overrun, mut on_stall, mut on_fault) = (0, false, false);
    let mut triggers = Vec::new();
    match &r.freeze_on {
        None => (on_overrun, on_stall, on_fault) = (1, true, true),
        Some(list) => {
            for w in list {
                match w.get_ref().as_str() {
                    "overrun" => on_overrun = 1,
                    "stall" => on_stall = true,
                    "fault" => on_fault = true,
                    other => match other.split_once(':') {
                        Some(("overrun", n)) if n.parse::<u64>().is_ok_and(|n| n >= 1) => {
                            on_overrun = n.parse().unwrap_or(1)
                        }
                        Some((edge @ ("rising" | "falling"), name))
                            if super::invalid_name("pin", name).is_none() =>
                        {
                            triggers.push(PinTrigger {
                                name: name.to_string(),
                                rising: edge == "rising",
                                origin: origin(w.span()),
                            })
                        }
                        _ => err(
                            w.span(),
                            format!(
                                "freeze_on: {} is unknown; use overrun, overrun:N (at least N missed periods), stall, fault, rising:PIN (a bit becoming TRUE) or falling:PIN (an estop going FALSE)",
                                quote(other)
                            ),
                        ),
                    },
                }
            }
        }
    }
    let duration = |d: &Option<Spanned<String>>,
                    key: &str,
                    default: Nanos,
                    err: &mut dyn FnMut(Range<usize>, String)| match d {
        None => default,
        Some(p) => match crate::rt::units::parse_duration(p.get_ref()) {
            Ok(d) if d >= Nanos::ZERO && d <= Nanos::from_secs(3600) => d,
            Ok(_) => {
                err(
                    p.span(),
                    format!("{key} {} must be from 0 to 1h", quote(p.get_ref())),
                );
                default
            }
            Err(e) => {
                err(p.span(), format!("{key}: {e}"));
                default
            }
        },
    };
    let holdoff = duration(&r.holdoff, "holdoff", Nanos::from_secs(10), err);
    let max_dumps = match &r.max_dumps {
        None => 20,
        Some(n) => match u32::try_from(*n.get_ref()) {
            Ok(v) if (1..=100_000).contains(&v) => v,
            _ => {
                err(
                    n.span(),
                    format!("max_dumps = {} must be from 1 to 100000", n.get_ref()),
                );
                20
            }
        },
    };
    RecorderConfig {
        holdoff,
        max_dumps,
        window,
        post,
        pins,
        dir: r.dir.get_ref().into(),
        on_overrun,
        on_stall,
        on_fault,
        triggers,
    }
}

/// Parses and checks a machine TOML; `file` names it in errors.
pub(crate) fn parse(file: &str, text: &str) -> Result<MachineToml, Vec<ConfigError>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let raw: RawMachine = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        vec![ConfigError::at(file, line, e.message().trim().to_string())]
    })?;
    let mut errors = Vec::new();
    let at = |span: Range<usize>| line_of(text, span.start);
    let mut err = |span: Range<usize>, message: String| {
        errors.push(ConfigError::at(file, line_of(text, span.start), message))
    };

    let mut hal = Vec::new();
    for h in &raw.hal {
        if h.get_ref().trim().is_empty() {
            err(h.span(), "hal: an empty file name".into());
        }
        hal.push(HalRef {
            path: h.get_ref().clone(),
            line: at(h.span()),
        });
    }

    let ini = raw.ini.as_ref().map(|i| HalRef {
        path: i.get_ref().clone(),
        line: at(i.span()),
    });
    if ini.as_ref().is_some_and(|i| i.path.trim().is_empty()) {
        err(
            raw.ini.as_ref().expect("some").span(),
            "ini: an empty file name".into(),
        );
    }

    let r = &raw.runtime;
    let instance = match &r.instance {
        None => rtapi_hal::DEFAULT_INSTANCE.to_string(),
        Some(i) => {
            if let Some(e) = invalid_name("runtime.instance", i.get_ref()) {
                err(i.span(), e);
            }
            i.get_ref().clone()
        }
    };
    if let Some(f) = &r.flavor {
        if Flavor::from_name(f.get_ref()).is_none() {
            err(
                f.span(),
                format!(
                    "runtime.flavor {} is unknown; use rt-preempt, posix or sim (or leave it out to detect)",
                    quote(f.get_ref())
                ),
            );
        }
    }
    let mut watchdog = WatchdogOptions::default();
    if let Some(a) = &r.on_stall {
        match a.get_ref().parse::<StallAction>() {
            Ok(action) => watchdog.action = action,
            Err(_) => err(
                a.span(),
                format!(
                    "runtime.on_stall {} is unknown; use report, demote or stop",
                    quote(a.get_ref())
                ),
            ),
        }
    }
    if let Some(n) = &r.stall_periods {
        match u32::try_from(*n.get_ref()) {
            Ok(p) if (1..=1_000_000).contains(&p) => watchdog.periods = p,
            _ => err(
                n.span(),
                format!(
                    "runtime.stall_periods = {} is out of range; give a number of periods from 1 to 1000000 (default {})",
                    n.get_ref(),
                    WatchdogOptions::default().periods
                ),
            ),
        }
    }
    let recorder = raw.recorder.as_ref().map(|r| {
        let mut fail = |span: Range<usize>, m: String| err(span, format!("recorder.{m}"));
        recorder(file, text, r.get_ref(), &mut fail)
    });
    let runtime = RuntimeOptions {
        instance,
        flavor: r.flavor.as_ref().map(|f| f.get_ref().clone()),
        lock_memory: r.lock_memory.unwrap_or(true),
        dma_latency: r.dma_latency.unwrap_or(true),
        group_readable: r.group_readable.unwrap_or(false),
        watchdog,
        functions_stopped: false,
        recorder,
    };

    let mut threads: Vec<ThreadSpec> = Vec::new();
    let mut thread_lines = Vec::new();
    let mut cpu_lines = Vec::new();
    let mut first_line = std::collections::HashMap::new();
    for (index, t) in raw.thread.iter().enumerate() {
        let table_line = at(t.span());
        if index == MAX_THREADS {
            err(
                t.span(),
                format!(
                    "thread {} is thread {} of {}; a machine has at most {MAX_THREADS} threads (a CNC machine usually has two, base and servo)",
                    quote(t.get_ref().name.get_ref()),
                    index + 1,
                    raw.thread.len()
                ),
            );
            break;
        }
        thread_lines.push(table_line);
        let t = t.get_ref();
        let name = t.name.get_ref().clone();
        let shown = quote(&name);
        if let Some(e) = invalid_name("thread name", &name) {
            err(t.name.span(), e);
        }
        if let Some(first) = first_line.insert(name.clone(), table_line) {
            err(
                t.name.span(),
                format!("duplicate thread name {shown} (first declared at line {first}); thread names must be unique"),
            );
        }
        let period = match t.period.get_ref() {
            toml::Value::Integer(ns) => check_period(Nanos::from_nanos(*ns)),
            toml::Value::String(s) => parse_config_period(s),
            other => Err(format!(
                "period must be a string with a unit like \"1ms\" (or an integer of nanoseconds), not a {}",
                other.type_str()
            )),
        };
        let period = period.unwrap_or_else(|e| {
            err(t.period.span(), format!("thread {shown}: {e}"));
            Nanos::ZERO
        });
        cpu_lines.push(t.cpu.as_ref().map(|c| at(c.span())));
        let cpu = t
            .cpu
            .as_ref()
            .and_then(|c| match u32::try_from(*c.get_ref()) {
                Ok(v) if v < 4096 => Some(v),
                _ => {
                    err(
                        c.span(),
                        format!("thread {shown}: cpu {} is not a CPU number", c.get_ref()),
                    );
                    None
                }
            });
        let priority = t.priority.as_ref().and_then(|p| {
            SpecProblem::check_priority(*p.get_ref())
                .map_err(|e| err(p.span(), format!("thread {shown}: {e}")))
                .ok()
        });
        let timer = match &t.timer {
            None => TimerKind::default(),
            Some(s) => match TimerKind::from_str(s.get_ref()) {
                Ok(k) => SpecProblem::check_timer(k, false).unwrap_or_else(|e| {
                    err(s.span(), format!("thread {shown}: {e}"));
                    k
                }),
                Err(e) => {
                    err(s.span(), format!("thread {shown}: {e}"));
                    TimerKind::default()
                }
            },
        };
        let wake = match &t.wake {
            None => WakeMode::default(),
            Some(s) => WakeMode::from_str(s.get_ref()).unwrap_or_else(|e| {
                err(s.span(), format!("thread {shown}: {e}"));
                WakeMode::default()
            }),
        };
        threads.push(ThreadSpec {
            name,
            period,
            cpu: cpu.map(|c| c as usize),
            priority,
            timer,
            wake,
            spike_threshold: None,
        });
    }
    // In file order, whatever order the keys were checked in.
    errors.sort_by_key(|e| e.line);
    if errors.is_empty() {
        Ok(MachineToml {
            hal,
            ini,
            runtime,
            threads,
            thread_lines,
            cpu_lines,
        })
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errs(text: &str) -> Vec<String> {
        parse("m.toml", text)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn a_full_machine() {
        let m = parse(
            "m.toml",
            r#"
hal = ["a.hal", "sub/b.hal"]
[runtime]
instance = "mill"
flavor = "posix"
lock_memory = false
[[thread]]
name = "base"
period = "25us"
cpu = 1
wake = "hybrid:5us"
[[thread]]
name = "servo"
period = 1000000
priority = 90
timer = "timerfd"
"#,
        )
        .unwrap();
        assert_eq!(m.hal[1].path, "sub/b.hal");
        assert_eq!(m.hal[1].line, 2);
        assert_eq!(m.runtime.instance, "mill");
        assert!(!m.runtime.lock_memory && m.runtime.dma_latency);
        assert_eq!(m.threads[0].period, Nanos::from_micros(25));
        assert_eq!(m.threads[0].cpu, Some(1));
        assert_eq!(m.threads[1].period, Nanos::from_millis(1));
        assert_eq!(m.threads[1].priority, Some(90));
        assert_eq!(m.threads[1].timer, TimerKind::Timerfd);
        // Defaults.
        let m = parse("m.toml", "").unwrap();
        assert_eq!(m.runtime.instance, "default");
        assert!(m.threads.is_empty() && m.hal.is_empty());
    }

    #[test]
    fn errors_carry_the_line() {
        let e = errs("hal = [\"a.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = 0\n");
        assert!(
            e[0].starts_with("m.toml:4: thread 'servo': period 0"),
            "{e:?}"
        );
        let e = errs("[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n[[thread]]\nname = \"servo\"\nperiod = \"2ms\"\n");
        assert!(
            e[0].starts_with("m.toml:5: duplicate thread name 'servo' (first declared at line 1)"),
            "{e:?}"
        );
        let e = errs("[[thread]]\nname = \"t\"\nperiod = \"1 fortnight\"\n");
        assert!(
            e[0].starts_with("m.toml:3: thread 't': invalid duration"),
            "{e:?}"
        );
        let e = errs("[runtime]\nflavour = \"sim\"\n");
        assert!(
            e[0].starts_with("m.toml:2: unknown field `flavour`"),
            "{e:?}"
        );
        let e = errs("[[thread]]\nname = \"t\"\n");
        assert!(
            e[0].starts_with("m.toml:1: missing field `period`"),
            "{e:?}"
        );
        let e = errs("hal = [\"a.hal\"\n");
        assert!(e[0].starts_with("m.toml:"), "{e:?}");
        let e = errs("[runtime]\nflavor = \"fast\"\ninstance = \"a/b\"\n");
        assert_eq!(e.len(), 2, "{e:?}");
        // In line order.
        assert!(
            e[0].starts_with("m.toml:2: runtime.flavor 'fast' is unknown"),
            "{e:?}"
        );
        assert!(e[1].starts_with("m.toml:3: runtime.instance"), "{e:?}");
        let e = errs(
            "[[thread]]\nname = \"t\"\nperiod = \"1ms\"\npriority = 100\ntimer = \"select\"\nwake = \"nap\"\ncpu = -1\n",
        );
        assert_eq!(e.len(), 4, "{e:?}");
        assert!(e
            .iter()
            .any(|m| m.starts_with("m.toml:4: thread 't': priority 100")));
        assert!(e
            .iter()
            .any(|m| m.starts_with("m.toml:5: thread 't': timer 'select'")));
        assert!(e.iter().any(|m| m.starts_with("m.toml:6: thread 't':")));
        assert!(e
            .iter()
            .any(|m| m.starts_with("m.toml:7: thread 't': cpu -1")));
        let e = errs("[[thread]]\nname = \"t\"\nperiod = \"100ns\"\n");
        assert!(e[0].contains("shorter than"), "{e:?}");
    }

    #[test]
    fn periods_follow_the_one_rule() {
        let one = |period: &str| {
            parse(
                "m.toml",
                &format!("[[thread]]\nname = \"t\"\nperiod = {period}\n"),
            )
            .map(|m| m.threads[0].period)
            .map_err(|e| e[0].to_string())
        };
        // A TOML integer is nanoseconds (the HAL habit); digits in a string are ambiguous.
        assert_eq!(one("25000"), Ok(Nanos::from_micros(25)));
        assert_eq!(
            one("\"1000\""),
            Err("m.toml:3: thread 't': period '1000' has no unit: write \"1000ns\" or \"1000us\" (or 1000 without quotes: an integer is nanoseconds)".into())
        );
        assert_eq!(one("\"1.5ms\""), Ok(Nanos::from_micros(1500)));
        assert_eq!(
            one("1.5"),
            Err("m.toml:3: thread 't': period must be a string with a unit like \"1ms\" (or an integer of nanoseconds), not a float".into())
        );
        assert!(one("true").unwrap_err().contains("not a boolean"));
        assert_eq!(
            one("999"),
            Err(format!(
                "m.toml:3: thread 't': {}",
                crate::rt::units::check_period(Nanos::from_nanos(999)).unwrap_err()
            ))
        );
        assert!(one("\"11s\"").unwrap_err().contains("longer than 10s"));
        assert!(one("-5")
            .unwrap_err()
            .contains("period -5ns is not positive"));
    }

    #[test]
    fn a_byte_order_mark_is_skipped_and_errors_come_in_line_order() {
        let m = parse(
            "m.toml",
            "\u{feff}[[thread]]\nname = \"t\"\nperiod = \"1ms\"\n",
        )
        .unwrap();
        assert_eq!(m.thread_lines, [1]);
        let e = errs(
            "[[thread]]\nname = \"t\"\nperiod = \"1ms\"\nwake = \"nap\"\ntimer = \"x\"\ncpu = 1\n",
        );
        assert!(
            e[0].starts_with("m.toml:4:") && e[1].starts_with("m.toml:5:"),
            "{e:?}"
        );
        let m = parse(
            "m.toml",
            "[[thread]]\nname = \"t\"\nperiod = \"1ms\"\n\ncpu = 1\n",
        )
        .unwrap();
        assert_eq!(m.cpu_lines, [Some(5)]);
    }

    #[test]
    fn the_recorder_table() {
        let m = parse(
            "m.toml",
            "[recorder]\ndir = \"d\"\npins = [\"a\", \"b.c\"]\nfreeze_on = [\"overrun:5\", \"falling:estop-ok\"]\nholdoff = \"1s\"\n",
        )
        .unwrap();
        let r = m.runtime.recorder.unwrap();
        assert_eq!(r.window, Nanos::from_secs(5));
        assert_eq!(r.post, Nanos::from_millis(100));
        assert_eq!(r.on_overrun, 5);
        assert!(!r.on_stall && !r.on_fault);
        assert_eq!(r.triggers[0].name, "estop-ok");
        assert!(!r.triggers[0].rising);
        assert_eq!(r.triggers[0].origin, "m.toml:4: ");
        assert_eq!(r.pins[1], ("b.c".to_string(), "m.toml:3: ".to_string()));
        assert_eq!((r.holdoff, r.max_dumps), (Nanos::from_secs(1), 20));
        let r = parse("m.toml", "[recorder]\ndir = \"d\"\n")
            .unwrap()
            .runtime
            .recorder
            .unwrap();
        assert!(r.on_overrun == 1 && r.on_stall && r.on_fault);
        assert!(parse("m.toml", "").unwrap().runtime.recorder.is_none());
        let e = errs("[recorder]\ndir = \"d\"\npins = [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]\npost = \"1 fortnight\"\nfreeze_on = [\"overrun:0\"]\n");
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].starts_with("m.toml:3: recorder.pins: 9 pins"), "{e:?}");
        assert!(e[1].starts_with("m.toml:4: recorder.post:"), "{e:?}");
        assert!(
            e[2].starts_with("m.toml:5: recorder.freeze_on: 'overrun:0'"),
            "{e:?}"
        );
        let e = errs("[recorder]\nseconds = 5\n");
        assert!(e[0].starts_with("m.toml:1: missing field `dir`"), "{e:?}");
    }

    #[test]
    fn line_of_counts_newlines() {
        assert_eq!(line_of("a\nb\nc", 0), 1);
        assert_eq!(line_of("a\nb\nc", 2), 2);
        assert_eq!(line_of("a\nb\nc", 99), 3);
    }
}
