//! The interactive halcmd prompt of `rtapi halcmd` and `rtapi halrun -I`: line editing, history in
//! `~/.rtapi_history`, and tab completion of commands and of the live instance's object names.
//!
//! Without a terminal on stdin the same loop reads plain lines (no prompt, no editing), so a script can
//! pipe commands in.

use std::io::{BufRead, IsTerminal, Write};

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};

use crate::instance::control::Flow;

/// halcmd's commands, for completion (the interpreter's own list).
pub(crate) use crate::config::halcmd::COMMANDS;

/// What `show`, `list` and `save` take as their first argument.
pub(crate) const KINDS: &[&str] = &[
    "all",
    "alias",
    "comp",
    "funct",
    "param",
    "parameter",
    "pin",
    "sig",
    "signal",
    "thread",
];

/// The names a completion may offer, read fresh from the instance each time (its structure changes).
pub(crate) type NameSource = Box<dyn Fn() -> Vec<String>>;

struct HalHelper {
    names: NameSource,
    /// What `loadrt` can load.
    components: Vec<String>,
}

impl HalHelper {
    fn candidates(&self, line: &str, word_start: usize) -> Vec<String> {
        let before: Vec<&str> = line[..word_start].split_whitespace().collect();
        match before.as_slice() {
            [] => COMMANDS.iter().map(|c| c.to_string()).collect(),
            ["show" | "list" | "save"] => KINDS.iter().map(|k| k.to_string()).collect(),
            ["help"] => COMMANDS.iter().map(|c| c.to_string()).collect(),
            ["loadrt"] => self.components.clone(),
            ["loadrt", ..] => Vec::new(),
            _ => (self.names)(),
        }
    }
}

impl Completer for HalHelper {
    type Candidate = Pair;
    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let start = line[..pos].rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &line[start..pos];
        let mut found: Vec<String> = self
            .candidates(line, start)
            .into_iter()
            .filter(|c| c.starts_with(word))
            .collect();
        found.sort();
        found.dedup();
        let pairs = found
            .into_iter()
            .map(|c| Pair {
                display: c.clone(),
                replacement: c,
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for HalHelper {
    type Hint = String;
}
impl Highlighter for HalHelper {}
impl Validator for HalHelper {}
impl Helper for HalHelper {}

/// One command's result as the prompt shows it: output, and an error message if it failed.
pub(crate) struct Outcome {
    /// What the command printed.
    pub out: String,
    /// Why it failed.
    pub error: Option<String>,
    /// Whether it ended the session.
    pub flow: Flow,
}

fn history_file() -> Option<std::path::PathBuf> {
    std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".rtapi_history"))
}

/// Reads commands until `quit`/`exit`, end of input or a command that ends the session; runs each with
/// `run`; `modules` are the LinuxCNC modules `loadrt` completes to. Returns how many commands failed.
pub(crate) fn interactive(
    prompt: &str,
    names: NameSource,
    modules: Vec<String>,
    run: &mut dyn FnMut(&str) -> Outcome,
) -> std::io::Result<usize> {
    let mut failed = 0;
    let mut show = |o: Outcome| -> bool {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(o.out.as_bytes());
        let _ = stdout.flush();
        if let Some(e) = &o.error {
            failed += 1;
            super::out::eprintln(&format!("rtapi: {e}"));
        }
        o.flow == Flow::Quit
    };
    if !std::io::stdin().is_terminal() {
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            if show(run(&line)) {
                break;
            }
        }
        return Ok(failed);
    }
    let mut editor: Editor<HalHelper, rustyline::history::FileHistory> =
        Editor::new().map_err(std::io::Error::other)?;
    // rtapi's components and the LinuxCNC modules that would load (sorted, once each).
    let mut components: Vec<String> = crate::components::Registry::builtin()
        .entries()
        .map(|e| e.name.to_string())
        .chain(modules)
        .collect();
    components.sort_unstable();
    components.dedup();
    editor.set_helper(Some(HalHelper { names, components }));
    let history = history_file();
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    // Log lines (a thread's missed periods) are printed above the prompt, not into the line
    // being typed.
    let _diverted = editor.create_external_printer().ok().map(|mut printer| {
        crate::render::log::divert(Box::new(move |line| {
            let _ = rustyline::ExternalPrinter::print(&mut printer, line);
        }))
    });
    loop {
        match editor.readline(prompt) {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                let _ = editor.add_history_entry(line.as_str());
                if show(run(&line)) {
                    break;
                }
            }
            // Ctrl-C drops the line being typed, as a shell does.
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            // The terminal hung up (it was closed: EIO), or a stop request came with the error:
            // the end of input, as Ctrl-D is.
            Err(ReadlineError::Io(e)) if e.raw_os_error() == Some(libc::EIO) => break,
            // (rustyline reports some terminal errors as the errno itself.)
            Err(ReadlineError::Errno(e)) if e as i32 == libc::EIO => break,
            Err(_) if crate::rt::signals::stop_requested_if_watched() => break,
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper() -> HalHelper {
        HalHelper {
            names: Box::new(|| vec!["pid.0.Pgain".into(), "pid.0.command".into(), "servo".into()]),
            components: vec!["pid".into(), "pwmgen".into(), "and2".into()],
        }
    }

    fn complete(line: &str) -> Vec<String> {
        let h = helper();
        let start = line.rfind(' ').map_or(0, |i| i + 1);
        let word = &line[start..];
        let mut v: Vec<String> = h
            .candidates(line, start)
            .into_iter()
            .filter(|c| c.starts_with(word))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn completes_commands_kinds_and_names() {
        assert_eq!(complete("sh"), ["show"]);
        assert_eq!(
            complete("un"),
            [
                "unalias",
                "unecho",
                "unlinkp",
                "unload",
                "unloadrt",
                "unloadusr",
                "unlock"
            ]
        );
        assert_eq!(complete("show p"), ["param", "parameter", "pin"]);
        assert_eq!(complete("setp pid.0.P"), ["pid.0.Pgain"]);
        assert_eq!(complete("net x pid.0.c"), ["pid.0.command"]);
        assert_eq!(complete("loadrt p"), ["pid", "pwmgen"]);
        assert!(complete("loadrt pid c").is_empty());
    }
}
