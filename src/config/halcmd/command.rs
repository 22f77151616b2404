//! What the parser makes of a `.hal` line and the interpreter runs: a [`Command`] with the line of
//! every word (its parts: `net` arrows and pins, `alias` kinds, `loadusr` flags), [`Located`] at the
//! line it starts on; and [`COMMANDS`], every command name the language knows.

use std::collections::BTreeMap;

use rtapi_hal::ValueType;

use super::lex::Word;
use crate::components::Instances;

/// Every command name the language knows (for `help` and tab completion).
pub const COMMANDS: &[&str] = &[
    "addf",
    "alias",
    "debug",
    "delf",
    "delsig",
    "echo",
    "exit",
    "getp",
    "gets",
    "help",
    "linkpp",
    "linkps",
    "linksp",
    "list",
    "loadrt",
    "loadusr",
    "lock",
    "net",
    "newsig",
    "print",
    "ptype",
    "quit",
    "save",
    "setp",
    "sets",
    "show",
    "source",
    "start",
    "status",
    "stop",
    "stype",
    "unalias",
    "unecho",
    "unlinkp",
    "unload",
    "unloadrt",
    "unloadusr",
    "unlock",
    "waitusr",
];

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
    pub(crate) fn parse(text: &str) -> Option<Arrow> {
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

/// `pin` or `param` in `alias`/`unalias`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AliasKind {
    Pin,
    Param,
}

impl AliasKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AliasKind::Pin => "pin",
            AliasKind::Param => "param",
        }
    }
}

/// `loadusr` flags.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct UsrFlags {
    /// `-W` (the program's name) or `-Wn NAME`: wait for this component to be ready.
    pub(crate) wait_component: Option<String>,
    /// `-w`: wait for the program to exit.
    pub(crate) wait_exit: bool,
    /// `-i`: ignore its exit status.
    pub(crate) ignore_status: bool,
}

/// One command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Loadrt {
        component: Word,
        instances: Instances,
        /// Other `key=value` arguments, as written.
        args: BTreeMap<String, String>,
        /// The arguments after the component as written (for `save`).
        text: String,
    },
    Unloadrt {
        component: Word,
    },
    Loadusr {
        flags: UsrFlags,
        program: Word,
        /// The program's arguments.
        args: Vec<Word>,
    },
    Waitusr {
        name: Word,
        /// `-i`: a program's failing exit status is not an error.
        ignore_status: bool,
    },
    Unloadusr {
        name: Word,
    },
    Unload {
        name: Word,
    },
    Newsig {
        name: Word,
        ty: ValueType,
    },
    Delsig {
        name: Word,
    },
    Sets {
        signal: Word,
        value: Word,
    },
    Gets {
        signal: Word,
    },
    Stype {
        name: Word,
    },
    /// `linkps PIN [arrow] SIG` and `linksp SIG [arrow] PIN`.
    Link {
        pin: Word,
        signal: Word,
    },
    Linkpp {
        first: Word,
        second: Word,
    },
    Net {
        signal: Word,
        pins: Vec<NetPin>,
    },
    Unlinkp {
        pin: Word,
    },
    /// `setp NAME VALUE` and `NAME = VALUE`.
    Setp {
        name: Word,
        value: Word,
    },
    Getp {
        name: Word,
    },
    Ptype {
        name: Word,
    },
    Addf {
        function: Word,
        thread: Word,
        /// As written: 1-based from the start, or negative from the end.
        position: Option<i64>,
    },
    Delf {
        function: Word,
        thread: Option<Word>,
    },
    Alias {
        kind: AliasKind,
        name: Word,
        alias: Word,
    },
    Unalias {
        kind: AliasKind,
        alias: Word,
    },
    Show {
        kind: Option<Word>,
        patterns: Vec<String>,
    },
    List {
        kind: Word,
        patterns: Vec<String>,
    },
    Save {
        item: Option<Word>,
        file: Option<Word>,
    },
    Source {
        file: Word,
    },
    Echo,
    Unecho,
    Print {
        message: String,
    },
    Status,
    Lock,
    Unlock,
    Start,
    Stop,
    Help {
        command: Option<String>,
    },
    Debug,
    Quit,
}

/// A command and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    pub(crate) line: usize,
    pub(crate) command: Command,
    /// The words as read (after substitution), for `echo`.
    pub(crate) text: String,
}
