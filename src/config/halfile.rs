//! `.hal` files: halcmd-style commands, parsed into [`Command`]s with the line of every word.
//!
//! Syntax, line by line:
//! - `#` starts a comment that runs to the end of the physical line;
//! - a line whose last non-blank character is `\` continues on the next line (a `\` on the last line
//!   of the file is an error: the command would silently lose its end);
//! - words are separated by blanks; the first word is the command;
//! - a leading UTF-8 byte-order mark (as some Windows editors write) is skipped.
//!
//! | command  | form                                            |
//! |----------|-------------------------------------------------|
//! | `loadrt` | `loadrt COMP [count=N \| names=a,b] [key=value …]` |
//! | `addf`   | `addf FUNCT THREAD [POSITION]` (1 = first, −1 = last, −2 = before the last, …) |
//! | `net`    | `net SIGNAL PIN [PIN …]`, optionally with `=>`, `<=`, `<=>` between pins |
//! | `setp`   | `setp NAME VALUE` (a pin or param)              |
//! | `sets`   | `sets SIGNAL VALUE`                             |
//!
//! Parsing only checks the shape of each command; whether names exist and types fit is checked when
//! the commands are applied (see `apply`), still before anything runs.

use std::collections::BTreeMap;

use super::ConfigError;
use crate::components::{Instances, MAX_INSTANCES};
use crate::rt::units::{clip, quote};

/// A word and the 1-based line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) text: String,
    pub(crate) line: usize,
}

/// A `net` arrow: which way data flows between the neighbouring pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrow {
    /// `=>`: from the pin before (a writer) to the pin after (a reader).
    Out,
    /// `<=`: into the pin before (a reader) from the pin after (a writer).
    In,
    /// `<=>`: both are bidirectional.
    Both,
}

impl Arrow {
    fn parse(text: &str) -> Option<Arrow> {
        match text {
            "=>" => Some(Arrow::Out),
            "<=" => Some(Arrow::In),
            "<=>" => Some(Arrow::Both),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Arrow::Out => "=>",
            Arrow::In => "<=",
            Arrow::Both => "<=>",
        }
    }
}

/// A pin in a `net` command with the arrows on either side of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NetPin {
    pub(crate) pin: Word,
    pub(crate) arrow_before: Option<Arrow>,
    pub(crate) arrow_after: Option<Arrow>,
}

/// One command of a `.hal` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Loadrt {
        component: Word,
        instances: Instances,
        args: BTreeMap<String, String>,
    },
    Addf {
        function: Word,
        thread: Word,
        /// As written: 1-based from the start, or negative from the end.
        position: Option<i64>,
    },
    Net {
        signal: Word,
        pins: Vec<NetPin>,
    },
    Setp {
        name: Word,
        value: Word,
    },
    Sets {
        signal: Word,
        value: Word,
    },
}

/// A command and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) line: usize,
    pub(crate) command: Command,
}

/// Splits `text` into logical lines of words, joining continuations and dropping comments.
fn logical_lines(file: &str, text: &str) -> Result<Vec<Vec<Word>>, Vec<ConfigError>> {
    let mut lines = Vec::new();
    let mut current: Vec<Word> = Vec::new();
    let mut continued_from: Option<usize> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let code = raw.split('#').next().unwrap_or("");
        let code = code.trim_end();
        let (code, continues) = match code.strip_suffix('\\') {
            Some(rest) => (rest, true),
            None => (code, false),
        };
        current.extend(code.split_whitespace().map(|w| Word {
            text: w.to_string(),
            line,
        }));
        if continues {
            continued_from.get_or_insert(line);
        } else {
            continued_from = None;
            if !current.is_empty() {
                lines.push(std::mem::take(&mut current));
            }
        }
    }
    if let Some(start) = continued_from {
        let last = text.lines().count().max(1);
        return Err(vec![ConfigError::at(
            file,
            last,
            format!(
                "the file ends inside a continued line (started at line {start}): remove the final `\\` or finish the command"
            ),
        )]);
    }
    Ok(lines)
}

/// Parses a whole file; every malformed command gives one error, all of them are returned.
pub(crate) fn parse(file: &str, text: &str) -> Result<Vec<Located>, Vec<ConfigError>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut commands = Vec::new();
    let mut errors = Vec::new();
    for words in logical_lines(file, text)? {
        let line = words[0].line;
        match parse_command(&words) {
            Ok(command) => commands.push(Located { line, command }),
            Err((line, message)) => errors.push(ConfigError::at(file, line, message)),
        }
    }
    if errors.is_empty() {
        Ok(commands)
    } else {
        Err(errors)
    }
}

type ParseResult<T> = Result<T, (usize, String)>;

fn parse_command(words: &[Word]) -> ParseResult<Command> {
    let cmd = &words[0];
    let args = &words[1..];
    let need = |min: usize, max: usize, usage: &str| -> ParseResult<()> {
        if args.len() < min || args.len() > max {
            let at = args.get(max).map_or(cmd.line, |w| w.line);
            Err((at, format!("{}: usage: {usage}", cmd.text)))
        } else {
            Ok(())
        }
    };
    match cmd.text.as_str() {
        "loadrt" => {
            need(
                1,
                usize::MAX,
                "loadrt COMP [count=N | names=a,b] [key=value ...]",
            )?;
            parse_loadrt(&args[0], &args[1..])
        }
        "addf" => {
            need(2, 3, "addf FUNCT THREAD [POSITION]")?;
            let position = match args.get(2) {
                None => None,
                Some(w) => match w.text.parse::<i64>() {
                    Ok(0) | Err(_) => {
                        return Err((
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
            Ok(Command::Addf {
                function: args[0].clone(),
                thread: args[1].clone(),
                position,
            })
        }
        "net" => {
            need(2, usize::MAX, "net SIGNAL PIN [PIN ...]")?;
            parse_net(&args[0], &args[1..])
        }
        "setp" => {
            need(2, 2, "setp NAME VALUE")?;
            Ok(Command::Setp {
                name: args[0].clone(),
                value: args[1].clone(),
            })
        }
        "sets" => {
            need(2, 2, "sets SIGNAL VALUE")?;
            Ok(Command::Sets {
                signal: args[0].clone(),
                value: args[1].clone(),
            })
        }
        other => Err((
            cmd.line,
            format!(
                "unknown command {}; a .hal file holds loadrt, addf, net, setp and sets",
                quote(other)
            ),
        )),
    }
}

fn parse_loadrt(component: &Word, rest: &[Word]) -> ParseResult<Command> {
    let mut count: Option<(usize, usize)> = None;
    let mut names: Option<(Vec<String>, usize)> = None;
    let mut args = BTreeMap::new();
    for w in rest {
        let Some((key, value)) = w.text.split_once('=') else {
            return Err((
                w.line,
                format!(
                    "loadrt: {} is not key=value (e.g. count=2, names=x,y)",
                    quote(&w.text)
                ),
            ));
        };
        if key.is_empty() || value.is_empty() {
            return Err((
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
                    .ok_or((
                        w.line,
                        format!(
                            "loadrt: count={}: give a positive number of instances, at most {MAX_INSTANCES}",
                            clip(value)
                        ),
                    ))?;
                count = Some((n, w.line));
            }
            "names" => {
                let list: Vec<String> = value.split(',').map(str::to_string).collect();
                if let Some(bad) = list.iter().find(|n| rtapi_hal::name::validate(n).is_err()) {
                    return Err((
                        w.line,
                        format!(
                            "loadrt: names=: {} is not a valid name (1-47 characters of A-Z a-z 0-9 . _ -)",
                            quote(bad)
                        ),
                    ));
                }
                let mut seen = std::collections::HashSet::new();
                if let Some(dup) = list.iter().find(|n| !seen.insert(n.as_str())) {
                    return Err((
                        w.line,
                        format!("loadrt: names=: {} is given twice", quote(dup)),
                    ));
                }
                names = Some((list, w.line));
            }
            _ => {
                if args.insert(key.to_string(), value.to_string()).is_some() {
                    return Err((
                        w.line,
                        format!("loadrt: argument {} is given twice", quote(key)),
                    ));
                }
            }
        }
    }
    let instances = match (count, names) {
        (Some(_), Some((_, line))) => {
            return Err((
                line,
                "loadrt: give either count= or names=, not both".to_string(),
            ))
        }
        (Some((n, _)), None) => Instances::Count(n),
        (None, Some((list, _))) => Instances::Names(list),
        (None, None) => Instances::Count(1),
    };
    Ok(Command::Loadrt {
        component: component.clone(),
        instances,
        args,
    })
}

fn parse_net(signal: &Word, rest: &[Word]) -> ParseResult<Command> {
    if Arrow::parse(&signal.text).is_some() {
        return Err((
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
                    return Err((
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
    if let Some((arrow, line)) = pending {
        return Err((
            line,
            format!(
                "net {}: '{}' at the end has no pin after it",
                clip(&signal.text),
                arrow.as_str()
            ),
        ));
    }
    if pins.is_empty() {
        return Err((
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
    use super::*;

    fn one(text: &str) -> Command {
        let mut v = parse("t.hal", text).unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0).command
    }

    fn err(text: &str) -> String {
        parse("t.hal", text).unwrap_err()[0].to_string()
    }

    #[test]
    fn comments_blank_lines_and_continuations() {
        let text = "# header\n\nloadrt pid \\\n   count=2   # two loops\n\\\n";
        assert!(err(text).starts_with("t.hal:5: the file ends inside a continued line"));
        let text = "# header\n\nloadrt pid \\\n   count=2   # two loops\nsetp pid.0.Pgain 3 # \\ not a continuation\n";
        let v = parse("t.hal", text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].line, 3);
        assert_eq!(
            v[0].command,
            Command::Loadrt {
                component: Word {
                    text: "pid".into(),
                    line: 3
                },
                instances: Instances::Count(2),
                args: BTreeMap::new()
            }
        );
        assert_eq!(v[1].line, 5);
    }

    #[test]
    fn loadrt_forms() {
        match one("loadrt stepgen names=x,y maxvel=1,2") {
            Command::Loadrt {
                instances, args, ..
            } => {
                assert_eq!(instances, Instances::Names(vec!["x".into(), "y".into()]));
                assert_eq!(args["maxvel"], "1,2");
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
                assert_eq!(pins[2].arrow_before, None);
            }
            c => panic!("{c:?}"),
        }
        match one("net fb <= sim.pos") {
            Command::Net { pins, .. } => assert_eq!(pins[0].arrow_before, Some(Arrow::In)),
            c => panic!("{c:?}"),
        }
        assert!(err("net s a =>").contains("has no pin after it"));
        assert!(err("net s a => <= b").contains("two arrows"));
        assert!(err("net => a").contains("signal name"));
        assert!(err("net s").contains("usage"));
    }

    #[test]
    fn other_commands_and_errors_point_at_their_line() {
        assert_eq!(
            one("addf pid.0.do-pid-calcs servo -1"),
            Command::Addf {
                function: Word {
                    text: "pid.0.do-pid-calcs".into(),
                    line: 1
                },
                thread: Word {
                    text: "servo".into(),
                    line: 1
                },
                position: Some(-1)
            }
        );
        assert!(err("addf f t 0").contains("non-zero"));
        assert!(err("addf f t x").contains("non-zero"));
        assert!(err("addf f t 1 2").starts_with("t.hal:1: addf: usage"));
        assert!(err("setp a").contains("setp NAME VALUE"));
        assert!(err("sets a b c").contains("sets SIGNAL VALUE"));
        let e = err("\n\nfrobnicate x");
        assert!(
            e.starts_with("t.hal:3: unknown command 'frobnicate'"),
            "{e}"
        );
        // A leading byte-order mark is not a command.
        assert_eq!(parse("t.hal", "\u{feff}loadrt pid\n").unwrap().len(), 1);
        let e = err("\u{feff}\nbogus\u{1b}");
        assert!(
            e.starts_with("t.hal:2: unknown command 'bogus\\u{1b}'"),
            "{e}"
        );
        // Every bad line is reported, not just the first.
        let errors = parse("t.hal", "bogus\nsetp x\nnet\n").unwrap_err();
        assert_eq!(errors.len(), 3);
        assert_eq!(
            errors.iter().map(|e| e.line).collect::<Vec<_>>(),
            [Some(1), Some(2), Some(3)]
        );
    }
}
