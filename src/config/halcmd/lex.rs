//! From text to words, as halcmd reads a line: comments, continuations, substitution, quoting.
//!
//! Per physical line, in halcmd's order:
//! 1. `#` outside quotes starts a comment to the end of the line; a quote left open is an error;
//! 2. a line whose last non-blank character is `\` continues on the next line (a `\` on the last
//!    line of the file is an error: the command would silently lose its end);
//! 3. substitution: `$VAR` and `$(VAR)` from the environment, `[SECTION]KEY` and `[SECTION](KEY)`
//!    from the INI file (`[]KEY`: any section). An unparenthesized name is the longest run of
//!    `A-Z a-z 0-9 . _ -`, so `[AXIS_0]SCALE` works inside a word (`x[AXIS_0]SCALE.y`);
//! 4. words are separated by blanks; `"…"` and `'…'` keep blanks inside one word (the quotes are
//!    dropped).
//!
//! A leading UTF-8 byte-order mark is skipped.

use super::ini::Ini;
use super::CommandError;
use crate::rt::units::quote;

/// A word and the 1-based line it is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub(crate) text: String,
    pub(crate) line: usize,
}

/// Where substitution values come from.
pub(crate) struct Subst<'a> {
    pub(crate) ini: Option<&'a Ini>,
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
}

/// The process environment.
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

type LexResult<T> = Result<T, CommandError>;

/// Strips a comment outside quotes; errors on a quote left open.
fn strip_comment(line: &str) -> Result<&str, String> {
    let mut quote_char: Option<char> = None;
    for (i, c) in line.char_indices() {
        match (quote_char, c) {
            (None, '#') => return Ok(&line[..i]),
            (None, '"' | '\'') => quote_char = Some(c),
            (Some(q), c) if c == q => quote_char = None,
            _ => {}
        }
    }
    match quote_char {
        Some(q) => Err(format!(
            "a {q} quote is not closed on this line; close it (a quoted word cannot span lines)"
        )),
        None => Ok(line),
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// The name after a `$` or `]`: `(NAME)` or the longest run of name characters. Returns the name and
/// the rest of the text after it.
fn var_name<'t>(text: &'t str, what: &str) -> Result<(&'t str, &'t str), String> {
    if let Some(inner) = text.strip_prefix('(') {
        let end = inner.find(')').ok_or_else(|| {
            format!("{what}: a '(' without its ')'; write $(NAME) or [SECTION](KEY)")
        })?;
        let name = &inner[..end];
        if name.is_empty() {
            return Err(format!("{what}: the name in () is empty"));
        }
        Ok((name, &inner[end + 1..]))
    } else {
        let end = text.find(|c| !is_name_char(c)).unwrap_or(text.len());
        if end == 0 {
            return Err(format!(
                "{what}: no name follows; write $NAME, $(NAME), [SECTION]KEY or [SECTION](KEY)"
            ));
        }
        Ok((&text[..end], &text[end..]))
    }
}

/// Replaces every `$VAR`, `$(VAR)`, `[SECTION]KEY` and `[SECTION](KEY)` in `line`.
pub(crate) fn substitute(line: &str, subst: &Subst<'_>) -> Result<String, String> {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(['$', '[']) {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if rest[at..].starts_with('$') {
            let (name, tail) = var_name(after, "$")?;
            let value = (subst.env)(name).ok_or_else(|| {
                format!(
                    "environment variable {} is not set; set it, or write the value here",
                    quote(name)
                )
            })?;
            out.push_str(&value);
            rest = tail;
        } else {
            let end = after.find(']').ok_or_else(|| {
                "a '[' without its ']'; INI values are written [SECTION]KEY".to_string()
            })?;
            let section = &after[..end];
            let (key, tail) = var_name(&after[end + 1..], &format!("[{section}]"))?;
            let Some(ini) = subst.ini else {
                return Err(format!(
                    "[{section}]{key} needs an INI file; give one with -i FILE (rtapi halrun) or ini = \"FILE\" (machine TOML)"
                ));
            };
            let value = ini.get(section, key).ok_or_else(|| {
                if section.is_empty() || ini.has_section(section) {
                    format!("{} has no key {key} in section [{section}]; add it, or fix the name here", ini.name)
                } else {
                    format!(
                        "{} has no section [{section}] (for key {key}); add it, or fix the name here",
                        ini.name
                    )
                }
            })?;
            out.push_str(value);
            rest = tail;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Splits a line into words at blanks outside quotes; quotes are dropped.
fn tokenize(line: &str, number: usize, words: &mut Vec<Word>) {
    let mut current: Option<String> = None;
    let mut quote_char: Option<char> = None;
    for c in line.chars() {
        match quote_char {
            Some(q) if c == q => quote_char = None,
            Some(_) => current.get_or_insert_with(String::new).push(c),
            None if c == '"' || c == '\'' => {
                quote_char = Some(c);
                current.get_or_insert_with(String::new);
            }
            None if c.is_whitespace() => {
                if let Some(w) = current.take() {
                    words.push(Word {
                        text: w,
                        line: number,
                    });
                }
            }
            None => current.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(w) = current {
        words.push(Word {
            text: w,
            line: number,
        });
    }
}

#[cfg(test)]
/// Splits `text` into logical lines of words. Errors carry their line.
pub(crate) fn logical_lines(text: &str, subst: &Subst<'_>) -> Vec<LexResult<Vec<Word>>> {
    let mut lines = Vec::new();
    each_logical_line(text, 1, subst, &mut |l| {
        lines.push(l);
        std::ops::ControlFlow::Continue(())
    });
    lines
}

/// Gives `text`'s logical lines to `f` one by one, as they are read (nothing is kept: memory does
/// not grow with the file); `f` may stop early. `text`'s first line is line `first` of its file (a
/// piece of it, as a control client sends a file).
pub(crate) fn each_logical_line(
    text: &str,
    first: usize,
    subst: &Subst<'_>,
    f: &mut dyn FnMut(LexResult<Vec<Word>>) -> std::ops::ControlFlow<()>,
) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = Emit { f, stopped: false };
    let mut current: Vec<Word> = Vec::new();
    let mut continued_from: Option<usize> = None;
    let mut failed = false;
    let mut count = 0;
    for (i, raw) in text.lines().enumerate() {
        if lines.stopped {
            return;
        }
        let number = i + first.max(1);
        count = number;
        let code = match strip_comment(raw) {
            Ok(code) => code.trim_end(),
            Err(m) => {
                lines.push(Err(CommandError::rule(number, m)));
                failed = true;
                ""
            }
        };
        let (code, continues) = match code.strip_suffix('\\') {
            Some(rest) => (rest, true),
            None => (code, false),
        };
        if !failed {
            match substitute(code, subst) {
                Ok(code) => tokenize(&code, number, &mut current),
                Err(m) => {
                    lines.push(Err(CommandError::rule(number, m)));
                    failed = true;
                }
            }
        }
        if continues {
            continued_from.get_or_insert(number);
        } else {
            continued_from = None;
            let words = std::mem::take(&mut current);
            if !failed && !words.is_empty() {
                lines.push(Ok(words));
            }
            failed = false;
        }
    }
    if let Some(start) = continued_from {
        lines.push(Err(CommandError::rule(
            count.max(first.max(1)),
            format!(
                "the file ends inside a continued line (started at line {start}): remove the final `\\` or finish the command"
            ),
        )));
    }
}

/// [`each_logical_line`]'s sink.
struct Emit<'a> {
    f: &'a mut dyn FnMut(LexResult<Vec<Word>>) -> std::ops::ControlFlow<()>,
    stopped: bool,
}

impl Emit<'_> {
    fn push(&mut self, l: LexResult<Vec<Word>>) {
        if !self.stopped {
            self.stopped = (self.f)(l).is_break();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "A.B" => Some("dotted".into()),
            _ => None,
        }
    }

    fn ini() -> Ini {
        Ini::parse(
            "m.ini",
            "[AXIS_0]\nSCALE = 200\n[EMCMOT]\nSERVO_PERIOD = 1000000\n",
        )
        .unwrap()
    }

    fn sub(line: &str) -> Result<String, String> {
        let ini = ini();
        substitute(
            line,
            &Subst {
                ini: Some(&ini),
                env: &env,
            },
        )
    }

    #[test]
    fn substitution_forms() {
        assert_eq!(
            sub("setp s.position-scale [AXIS_0]SCALE").unwrap(),
            "setp s.position-scale 200"
        );
        assert_eq!(sub("x[AXIS_0]SCALE/2").unwrap(), "x200/2");
        assert_eq!(sub("[AXIS_0](SCALE)0").unwrap(), "2000");
        assert_eq!(sub("[]SERVO_PERIOD").unwrap(), "1000000");
        assert_eq!(sub("$HOME/x $(HOME)y").unwrap(), "/home/u/x /home/uy");
        assert_eq!(sub("$A.B").unwrap(), "dotted");
        assert!(sub("[AXIS_0]NOPE")
            .unwrap_err()
            .contains("m.ini has no key NOPE in section [AXIS_0]"));
        assert!(sub("[AXIS_9]SCALE")
            .unwrap_err()
            .contains("has no section [AXIS_9]"));
        assert!(sub("$NOPE").unwrap_err().contains("'NOPE' is not set"));
        assert!(sub("$(HOME").unwrap_err().contains("without its ')'"));
        assert!(sub("[AXIS_0").unwrap_err().contains("without its ']'"));
        assert!(sub("$ x").unwrap_err().contains("no name follows"));
        let none = Subst {
            ini: None,
            env: &env,
        };
        assert!(substitute("[A]B", &none)
            .unwrap_err()
            .contains("needs an INI file"));
    }

    #[test]
    fn quotes_comments_and_continuations() {
        let s = Subst {
            ini: None,
            env: &env,
        };
        let lines = logical_lines(
            "loadrt x cfg=\"a b # c\" 'q r' # comment\nnet s \\\n  a.b # x\n",
            &s,
        );
        let words: Vec<Vec<(String, usize)>> = lines
            .into_iter()
            .map(|l| l.unwrap().into_iter().map(|w| (w.text, w.line)).collect())
            .collect();
        assert_eq!(
            words[0],
            [
                ("loadrt".to_string(), 1),
                ("x".into(), 1),
                ("cfg=a b # c".into(), 1),
                ("q r".into(), 1)
            ]
        );
        assert_eq!(
            words[1],
            [("net".to_string(), 2), ("s".into(), 2), ("a.b".into(), 3)]
        );
        let lines = logical_lines("setp a \"open\nsetp b 1\n", &s);
        assert!(lines[0]
            .as_ref()
            .unwrap_err()
            .message
            .contains("not closed"));
        assert!(lines[1].is_ok());
    }
}
