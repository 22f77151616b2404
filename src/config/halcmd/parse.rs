//! Commands of the `.hal` language: every command halcmd has, parsed into [`Command`]s (the type is
//! in `command.rs`) with the line of every word. Parsing checks only the shape of a command; names,
//! types and directions are checked when it runs (`exec`), still before anything starts.

use std::collections::BTreeMap;

use rtapi_hal::ValueType;

pub use super::command::COMMANDS;
pub(crate) use super::command::{AliasKind, Arrow, Command, Located, NetPin, UsrFlags};
use super::lex::{Subst, Word};
use super::CommandError;
use crate::components::{Instances, MAX_INSTANCES};
use crate::config::ConfigError;
use crate::rt::units::{clip, quote};

/// Parses a whole file; every malformed line gives one error, all of them are returned.
pub(crate) fn parse(
    file: &str,
    text: &str,
    subst: &Subst<'_>,
) -> Result<Vec<Located>, Vec<ConfigError>> {
    parse_from(file, text, 1, subst)
}

/// [`parse`] of text whose first line is line `first` of `file`.
pub(crate) fn parse_from(
    file: &str,
    text: &str,
    first: usize,
    subst: &Subst<'_>,
) -> Result<Vec<Located>, Vec<ConfigError>> {
    let mut commands = Vec::new();
    let mut errors = Vec::new();
    each_command(file, text, first, subst, &mut |c| {
        match c {
            Ok(c) => commands.push(c),
            Err(e) => errors.push(e),
        }
        std::ops::ControlFlow::Continue(())
    });
    if errors.is_empty() {
        Ok(commands)
    } else {
        Err(errors)
    }
}

/// Parses `text` command by command, giving each to `f` as it is read (nothing is kept); `f` may
/// stop early. `text`'s first line is line `first` of `file`.
pub(crate) fn each_command(
    file: &str,
    text: &str,
    first: usize,
    subst: &Subst<'_>,
    f: &mut dyn FnMut(Result<Located, ConfigError>) -> std::ops::ControlFlow<()>,
) {
    super::lex::each_logical_line(text, first, subst, &mut |words| {
        let c = words.and_then(|words| {
            let line = words[0].line;
            parse_command(&words).map(|command| Located {
                line,
                command,
                text: words
                    .iter()
                    .map(|w| save_word(&w.text))
                    .collect::<Vec<_>>()
                    .join(" "),
            })
        });
        f(c.map_err(|e| e.in_file(file)))
    });
}

type ParseResult<T> = Result<T, CommandError>;

fn value_type(w: &Word) -> ParseResult<ValueType> {
    match w.text.to_ascii_lowercase().as_str() {
        "bit" => Ok(ValueType::Bit),
        "float" => Ok(ValueType::Float),
        "s32" => Ok(ValueType::S32),
        "u32" => Ok(ValueType::U32),
        "s64" => Ok(ValueType::S64),
        "u64" => Ok(ValueType::U64),
        _ => Err(CommandError::rule(
            w.line,
            format!(
                "newsig: type {} is not one of bit, float, s32, u32, s64, u64",
                quote(&w.text)
            ),
        )),
    }
}

fn alias_kind(w: &Word, cmd: &str) -> ParseResult<AliasKind> {
    match w.text.as_str() {
        "pin" => Ok(AliasKind::Pin),
        "param" => Ok(AliasKind::Param),
        _ => Err(CommandError::rule(
            w.line,
            format!("{cmd}: the type is pin or param, not {}", quote(&w.text)),
        )),
    }
}

/// Drops one optional arrow in the middle of a two-name link command.
/// `cmd`'s two names, optionally with an arrow between; `cmd` gives the line of a bad one.
fn two_names<'w>(args: &'w [Word], cmd: &Word, usage: &str) -> ParseResult<(&'w Word, &'w Word)> {
    match args {
        [a, b] if Arrow::parse(&b.text).is_none() && Arrow::parse(&a.text).is_none() => Ok((a, b)),
        [a, arrow, b] if Arrow::parse(&arrow.text).is_some() => Ok((a, b)),
        _ => Err(CommandError::rule(
            args.first().map_or(cmd.line, |w| w.line),
            format!("{}: usage: {usage}", cmd.text),
        )),
    }
}

fn parse_command(words: &[Word]) -> ParseResult<Command> {
    let cmd = &words[0];
    let args = &words[1..];
    // halcmd's shorthand: `NAME = VALUE` is `setp NAME VALUE`.
    if args.len() == 2 && args[0].text == "=" {
        return Ok(Command::Setp {
            name: cmd.clone(),
            value: args[1].clone(),
        });
    }
    let need = |min: usize, max: usize, usage: &str| -> ParseResult<()> {
        if args.len() < min || args.len() > max {
            let at = args.get(max).map_or(cmd.line, |w| w.line);
            Err(CommandError::rule(
                at,
                format!("{}: usage: {usage}", cmd.text),
            ))
        } else {
            Ok(())
        }
    };
    let w = |i: usize| args[i].clone();
    let rest =
        |from: usize| -> Vec<String> { args[from..].iter().map(|w| w.text.clone()).collect() };
    let command = match cmd.text.as_str() {
        "loadrt" => {
            need(
                1,
                usize::MAX,
                "loadrt COMP [count=N | names=a,b] [key=value ...]",
            )?;
            parse_loadrt(&args[0], &args[1..])?
        }
        "unloadrt" => {
            need(1, 1, "unloadrt COMP | all")?;
            Command::Unloadrt { component: w(0) }
        }
        "loadusr" => parse_loadusr(cmd, args)?,
        "waitusr" => {
            // `waitusr [-i] NAME`
            let ignore_status = args.iter().any(|w| w.text == "-i");
            let args: Vec<&Word> = args.iter().filter(|w| w.text != "-i").collect();
            if args.len() != 1 {
                return Err(CommandError::rule(
                    cmd.line,
                    "waitusr: usage: waitusr [-i] NAME".to_string(),
                ));
            }
            Command::Waitusr {
                name: args[0].clone(),
                ignore_status,
            }
        }
        "unloadusr" => {
            need(1, 1, "unloadusr NAME | all")?;
            Command::Unloadusr { name: w(0) }
        }
        "unload" => {
            need(1, 1, "unload NAME | all")?;
            Command::Unload { name: w(0) }
        }
        "newsig" => {
            need(2, 2, "newsig SIGNAL TYPE")?;
            Command::Newsig {
                name: w(0),
                ty: value_type(&args[1])?,
            }
        }
        "delsig" => {
            need(1, 1, "delsig SIGNAL | all")?;
            Command::Delsig { name: w(0) }
        }
        "sets" => {
            need(2, 2, "sets SIGNAL VALUE")?;
            Command::Sets {
                signal: w(0),
                value: w(1),
            }
        }
        "gets" => {
            need(1, 1, "gets SIGNAL")?;
            Command::Gets { signal: w(0) }
        }
        "stype" => {
            need(1, 1, "stype SIGNAL")?;
            Command::Stype { name: w(0) }
        }
        "linkps" => {
            let (pin, signal) = two_names(args, cmd, "linkps PIN [ARROW] SIGNAL")?;
            Command::Link {
                pin: pin.clone(),
                signal: signal.clone(),
            }
        }
        "linksp" => {
            let (signal, pin) = two_names(args, cmd, "linksp SIGNAL [ARROW] PIN")?;
            Command::Link {
                pin: pin.clone(),
                signal: signal.clone(),
            }
        }
        "linkpp" => {
            let (first, second) = two_names(args, cmd, "linkpp PIN1 [ARROW] PIN2")?;
            Command::Linkpp {
                first: first.clone(),
                second: second.clone(),
            }
        }
        "net" => {
            need(2, usize::MAX, "net SIGNAL PIN [PIN ...]")?;
            parse_net(&args[0], &args[1..])?
        }
        "unlinkp" => {
            need(1, 1, "unlinkp PIN")?;
            Command::Unlinkp { pin: w(0) }
        }
        "setp" => {
            need(2, 2, "setp NAME VALUE")?;
            Command::Setp {
                name: w(0),
                value: w(1),
            }
        }
        "getp" => {
            need(1, 1, "getp NAME")?;
            Command::Getp { name: w(0) }
        }
        "ptype" => {
            need(1, 1, "ptype NAME")?;
            Command::Ptype { name: w(0) }
        }
        "addf" => {
            need(2, 3, "addf FUNCT THREAD [POSITION]")?;
            let position = match args.get(2) {
                None => None,
                Some(w) => match w.text.parse::<i64>() {
                    Ok(0) | Err(_) => {
                        return Err(CommandError::rule(
                            w.line,
                            format!(
                            "addf: position {} must be a non-zero integer (1 = first, -1 = last)",
                            quote(&w.text)
                        ),
                        ))
                    }
                    Ok(p) => Some(p),
                },
            };
            Command::Addf {
                function: w(0),
                thread: w(1),
                position,
            }
        }
        "delf" => {
            need(1, 2, "delf FUNCT [THREAD]")?;
            Command::Delf {
                function: w(0),
                thread: args.get(1).cloned(),
            }
        }
        "alias" => {
            need(3, 3, "alias pin|param NAME ALIAS")?;
            Command::Alias {
                kind: alias_kind(&args[0], "alias")?,
                name: w(1),
                alias: w(2),
            }
        }
        "unalias" => {
            need(2, 2, "unalias pin|param ALIAS")?;
            Command::Unalias {
                kind: alias_kind(&args[0], "unalias")?,
                alias: w(1),
            }
        }
        "show" => Command::Show {
            kind: args.first().cloned(),
            patterns: if args.is_empty() { Vec::new() } else { rest(1) },
        },
        "list" => {
            need(
                1,
                usize::MAX,
                "list comp|pin|sig|param|funct|thread [PATTERN ...]",
            )?;
            Command::List {
                kind: w(0),
                patterns: rest(1),
            }
        }
        "save" => {
            need(0, 2, "save [ITEM] [FILE]")?;
            Command::Save {
                item: args.first().cloned(),
                file: args.get(1).cloned(),
            }
        }
        "source" => {
            need(1, 1, "source FILE")?;
            Command::Source { file: w(0) }
        }
        "echo" => Command::Echo,
        "unecho" => Command::Unecho,
        "print" => Command::Print {
            message: rest(0).join(" "),
        },
        "status" => {
            need(0, 1, "status [lock|mem|all]")?;
            Command::Status
        }
        "lock" => {
            need(0, 1, "lock [all|tune|none]")?;
            Command::Lock
        }
        "unlock" => {
            need(0, 1, "unlock [all|tune]")?;
            Command::Unlock
        }
        "start" => {
            need(0, 0, "start")?;
            Command::Start
        }
        "stop" => {
            need(0, 0, "stop")?;
            Command::Stop
        }
        "help" => Command::Help {
            command: args.first().map(|w| w.text.clone()),
        },
        "debug" => {
            need(0, 1, "debug [LEVEL]")?;
            Command::Debug
        }
        "quit" | "exit" => Command::Quit,
        other => {
            return Err(CommandError::rule(
                cmd.line,
                match crate::suggest::did_you_mean(other, COMMANDS.iter().copied()) {
                    Some(hint) => format!("unknown command {}; {hint}", quote(other)),
                    None => format!(
                        "unknown command {}; halcmd's commands are: {}",
                        quote(other),
                        COMMANDS.join(" ")
                    ),
                },
            ))
        }
    };
    Ok(command)
}

fn parse_loadusr(cmd: &Word, args: &[Word]) -> ParseResult<Command> {
    let mut flags = UsrFlags::default();
    let mut i = 0;
    while let Some(w) = args.get(i) {
        match w.text.as_str() {
            "-W" => flags.wait_component = Some(String::new()),
            "-Wn" => {
                let name = args.get(i + 1).ok_or_else(|| {
                    CommandError::rule(
                        w.line,
                        "loadusr: -Wn needs the component name: loadusr -Wn NAME PROGRAM",
                    )
                })?;
                flags.wait_component = Some(name.text.clone());
                i += 1;
            }
            "-w" => flags.wait_exit = true,
            "-i" => flags.ignore_status = true,
            // halcmd also accepts the flags joined (`-Wi`) and -n NAME; take what is meant.
            "-n" => i += 1,
            t if t.starts_with('-') && t.len() > 1 && !t.contains('=') => {
                for c in t[1..].chars() {
                    match c {
                        'W' => flags.wait_component = Some(String::new()),
                        'w' => flags.wait_exit = true,
                        'i' => flags.ignore_status = true,
                        _ => {
                            return Err(CommandError::rule(
                                w.line,
                                format!(
                                    "loadusr: unknown flag {}; the flags are -W, -Wn NAME, -w, -i",
                                    quote(t)
                                ),
                            ))
                        }
                    }
                }
            }
            _ => break,
        }
        i += 1;
    }
    let Some(program) = args.get(i) else {
        return Err(CommandError::rule(
            cmd.line,
            "loadusr: usage: loadusr [-W | -Wn NAME | -w | -i] PROGRAM [ARGS ...]".to_string(),
        ));
    };
    if flags.wait_component.as_deref() == Some("") {
        let base = program.text.rsplit('/').next().unwrap_or(&program.text);
        flags.wait_component = Some(base.to_string());
    }
    Ok(Command::Loadusr {
        flags,
        program: program.clone(),
        args: args[i + 1..].to_vec(),
    })
}

fn parse_loadrt(component: &Word, rest: &[Word]) -> ParseResult<Command> {
    let mut count: Option<(usize, usize)> = None;
    let mut names: Option<(Vec<String>, usize)> = None;
    let mut args = BTreeMap::new();
    for w in rest {
        let Some((key, value)) = w.text.split_once('=') else {
            return Err(CommandError::rule(
                w.line,
                format!(
                    "loadrt: {} is not key=value (e.g. count=2, names=x,y)",
                    quote(&w.text)
                ),
            ));
        };
        if key.is_empty() {
            return Err(CommandError::rule(
                w.line,
                format!("loadrt: {} needs a key and a value", quote(&w.text)),
            ));
        }
        match key {
            "count" => {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_INSTANCES).contains(n))
                    .ok_or_else(|| {
                        CommandError::rule(
                            w.line,
                            format!(
                                "loadrt: count={}: give a positive number of instances, at most {MAX_INSTANCES}",
                                clip(value)
                            ),
                        )
                    })?;
                count = Some((n, w.line));
            }
            "names" => {
                let list: Vec<String> = value.split(',').map(str::to_string).collect();
                if let Some(bad) = list.iter().find(|n| rtapi_hal::name::validate(n).is_err()) {
                    return Err(CommandError::rule(
                        w.line,
                        format!(
                            "loadrt: names=: {} is not a valid name (1-47 characters of A-Z a-z 0-9 . _ -)",
                            quote(bad)
                        ),
                    ));
                }
                let mut seen = std::collections::HashSet::new();
                if let Some(dup) = list.iter().find(|n| !seen.insert(n.as_str())) {
                    return Err(CommandError::rule(
                        w.line,
                        format!("loadrt: names=: {} is given twice", quote(dup)),
                    ));
                }
                names = Some((list, w.line));
            }
            _ => {
                if args.insert(key.to_string(), value.to_string()).is_some() {
                    return Err(CommandError::rule(
                        w.line,
                        format!("loadrt: argument {} is given twice", quote(key)),
                    ));
                }
            }
        }
    }
    let instances = match (count, names) {
        (Some(_), Some((_, line))) => {
            return Err(CommandError::rule(
                line,
                "loadrt: give either count= or names=, not both".to_string(),
            ))
        }
        (Some((n, _)), None) => Instances::Count(n),
        (None, Some((list, _))) => Instances::Names(list),
        // Neither: the component's default number of instances (LinuxCNC's pid and encoder make
        // three, the others one), decided by `loadrt` — `Count(0)` stands for it until then.
        (None, None) => Instances::Count(0),
    };
    let text = rest
        .iter()
        .map(|w| save_word(&w.text))
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Command::Loadrt {
        component: component.clone(),
        instances,
        args,
        text,
    })
}

/// A word as `save` writes it: quoted when it holds blanks or characters halcmd reads specially.
pub(crate) fn save_word(text: &str) -> String {
    if text.is_empty() || text.contains(|c: char| c.is_whitespace() || "#$['\"".contains(c)) {
        if text.contains('"') {
            format!("'{text}'")
        } else {
            format!("\"{text}\"")
        }
    } else {
        text.to_string()
    }
}

fn parse_net(signal: &Word, rest: &[Word]) -> ParseResult<Command> {
    if Arrow::parse(&signal.text).is_some() {
        return Err(CommandError::rule(
            signal.line,
            "net: the first word must be the signal name, not an arrow".to_string(),
        ));
    }
    let mut pins: Vec<NetPin> = Vec::new();
    let mut pending: Option<(Arrow, usize)> = None;
    for w in rest {
        match Arrow::parse(&w.text) {
            Some(arrow) => {
                if pending.is_some() {
                    return Err(CommandError::rule(
                        w.line,
                        format!("net {}: two arrows in a row", clip(&signal.text)),
                    ));
                }
                if let Some(last) = pins.last_mut() {
                    last.arrow_after = Some(arrow);
                }
                pending = Some((arrow, w.line));
            }
            None => {
                pins.push(NetPin {
                    pin: w.clone(),
                    arrow_before: pending.take().map(|(a, _)| a),
                    arrow_after: None,
                });
            }
        }
    }
    // A trailing arrow (`net SIG PIN =>`, continued by the next `net SIG …` line) is valid halcmd:
    // it only documents the direction of the pin before it.
    let _ = pending;
    if pins.is_empty() {
        return Err(CommandError::rule(
            signal.line,
            format!("net {}: name at least one pin", clip(&signal.text)),
        ));
    }
    Ok(Command::Net {
        signal: signal.clone(),
        pins,
    })
}

#[cfg(test)]
mod tests {
    use super::super::lex::process_env;
    use super::*;

    fn all(text: &str) -> Result<Vec<Located>, Vec<ConfigError>> {
        parse(
            "t.hal",
            text,
            &Subst {
                ini: None,
                env: &process_env,
            },
        )
    }

    fn one(text: &str) -> Command {
        let mut v = all(text).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).command
    }

    fn err(text: &str) -> String {
        all(text).unwrap_err()[0].to_string()
    }

    #[test]
    fn comments_blank_lines_and_continuations() {
        let text = "# header\n\nloadrt pid \\\n   count=2   # two loops\n\\\n";
        assert!(err(text).starts_with("t.hal:5: the file ends inside a continued line"));
        let text = "# header\n\nloadrt pid \\\n   count=2   # two loops\nsetp pid.0.Pgain 3 # \\ not a continuation\n";
        let v = all(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].line, 3);
        match &v[0].command {
            Command::Loadrt { instances, .. } => assert_eq!(*instances, Instances::Count(2)),
            c => panic!("{c:?}"),
        }
        assert_eq!(v[1].line, 5);
    }

    #[test]
    fn loadrt_forms() {
        match one("loadrt stepgen names=x,y maxvel=1,2 cfg=\"bit s32\"") {
            Command::Loadrt {
                instances,
                args,
                text,
                ..
            } => {
                assert_eq!(instances, Instances::Names(vec!["x".into(), "y".into()]));
                assert_eq!(args["maxvel"], "1,2");
                assert_eq!(args["cfg"], "bit s32");
                assert_eq!(text, "names=x,y maxvel=1,2 \"cfg=bit s32\"");
            }
            c => panic!("{c:?}"),
        }
        assert!(err("loadrt pid count=2 names=a,b").contains("either count= or names="));
        assert!(err("loadrt pid count=0").contains("positive number"));
        assert!(err("loadrt pid count=99999999999").contains("at most 256"));
        assert!(err("loadrt pid names=a,a").contains("'a' is given twice"));
        assert!(err("loadrt pid names=a,b/c").contains("not a valid name"));
        assert!(err("loadrt pid stuff").contains("not key=value"));
        assert!(err("loadrt").starts_with("t.hal:1: loadrt: usage"));
    }

    #[test]
    fn every_halcmd_command_parses() {
        let text = "loadrt threads name1=base period1=50000 name2=servo period2=1000000\n\
            unloadrt all\nloadusr -W hal_manualtoolchange\nloadusr -Wn ui pyvcp -c ui x.xml\n\
            loadusr -w -i true\nwaitusr -i ui\nunloadusr all\nunload all\nnewsig s float\n\
            delsig s\nsets s 1\ngets s\nstype s\nlinkps a.b => s\nlinksp s a.b\nlinkpp a.b b.c\n\
            linkpp a.b <= b.c\nnet s a.b <=> c.d e.f\nunlinkp a.b\nsetp a.b 1\na.b = 2\ngetp a.b\n\
            ptype a.b\naddf f t\naddf f t -2\ndelf f t\ndelf f\nalias pin a.b c\nalias param a.b c\n\
            unalias pin c\nshow\nshow pin pid*\nshow all\nlist pin -tfloat p\nsave\nsave all x.hal\n\
            source other.hal\necho\nunecho\nprint hello there\nstatus\nstatus lock\nlock\nlock tune\n\
            unlock all\nstart\nstop\nhelp\nhelp net\ndebug 3\nquit\nexit\n";
        let v = all(text).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(v.len(), text.lines().count());
        match &v[2].command {
            Command::Loadusr { flags, program, .. } => {
                assert_eq!(
                    flags.wait_component.as_deref(),
                    Some("hal_manualtoolchange")
                );
                assert_eq!(program.text, "hal_manualtoolchange");
            }
            c => panic!("{c:?}"),
        }
        match &v[3].command {
            Command::Loadusr {
                flags,
                program,
                args,
            } => {
                assert_eq!(flags.wait_component.as_deref(), Some("ui"));
                assert_eq!(program.text, "pyvcp");
                let args: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
                assert_eq!(args, ["-c", "ui", "x.xml"]);
            }
            c => panic!("{c:?}"),
        }
        assert!(
            matches!(&v[20].command, Command::Setp { name, value } if name.text == "a.b" && value.text == "2")
        );
        assert!(err("newsig s double").contains("not one of bit"));
        assert!(err("alias pins a b").contains("pin or param"));
        assert!(err("linkps a b c d").contains("usage"));
        assert!(err("loadusr -Wn").contains("-Wn needs"));
    }

    #[test]
    fn net_arrows() {
        match one("net cmd siggen.0.sine => pid.0.command stepgen.0.position-cmd") {
            Command::Net { signal, pins } => {
                assert_eq!(signal.text, "cmd");
                assert_eq!(pins.len(), 3);
                assert_eq!(
                    (pins[0].arrow_before, pins[0].arrow_after),
                    (None, Some(Arrow::Out))
                );
                assert_eq!(
                    (pins[1].arrow_before, pins[1].arrow_after),
                    (Some(Arrow::Out), None)
                );
            }
            c => panic!("{c:?}"),
        }
        match one("net s a.b =>") {
            Command::Net { pins, .. } => assert_eq!(pins[0].arrow_after, Some(Arrow::Out)),
            c => panic!("{c:?}"),
        }
        assert!(err("net s a => <= b").contains("two arrows"));
        assert!(err("net => a").contains("signal name"));
        assert!(err("net s").contains("usage"));
    }

    #[test]
    fn errors_point_at_their_line() {
        assert!(err("addf f t 0").contains("non-zero"));
        assert!(err("addf f t 1 2").starts_with("t.hal:1: addf: usage"));
        assert!(err("setp a").contains("setp NAME VALUE"));
        let e = err("\n\nfrobnicate x");
        assert!(
            e.starts_with("t.hal:3: unknown command 'frobnicate'"),
            "{e}"
        );
        assert_eq!(all("\u{feff}loadrt pid\n").unwrap().len(), 1);
        let errors = all("bogus\nsetp x\nnet\n").unwrap_err();
        assert_eq!(
            errors.iter().map(|e| e.line).collect::<Vec<_>>(),
            [Some(1), Some(2), Some(3)]
        );
    }
}
