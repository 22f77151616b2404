//! `rtapi halrun [-i INI] [-k] [-s] [--check] -f FILE` (or `rtapi halrun FILE`): runs a `.hal` file
//! as LinuxCNC's `halrun -f` does, through [`crate::config::halcmd::Session`].
//!
//! The file's commands run into the session's netlist model first; every error is `file:line:
//! message` and exit 2, with nothing created. `--check` stops there. Otherwise the HAL is emitted to
//! a dry run and then to the real runtime; if the file ran `start`, the threads start and run until
//! Ctrl-C/SIGTERM (or `--duration`), like `rtapi run`. A file that never ran `start` is, as with
//! halrun without `-I`, unloaded when it ends: its HAL is built into a configured runtime (every
//! check made) and dropped, and no thread runs.

use std::path::PathBuf;

use super::run::{config_failure, start};
use super::{out, Failure};
use crate::components::Registry;
use crate::config::halcmd::{Ini, Session};
use crate::rt::clock::Nanos;
use crate::runtime::{Runtime, RuntimeOptions};

#[derive(clap::Args)]
#[command(
    after_help = "Without --check: a file that runs `start` keeps its threads running until \
Ctrl-C or SIGTERM (or --duration), then stops and prints the summary; a file without `start` is \
checked, built and unloaded when it ends, as LinuxCNC's halrun does without -I.\n\
loadusr is refused at its line: rtapi cannot host LinuxCNC user-space programs yet.\n\
Exit codes: 0 ok, 1 runtime failure, 2 a file:line error (nothing started)."
)]
pub struct Args {
    /// The INI file for [SECTION]KEY substitutions.
    #[arg(short = 'i', value_name = "INI")]
    ini: Option<PathBuf>,
    /// Keep going after a failed command (all errors are printed; the exit code is still 2).
    #[arg(short = 'k')]
    keep_going: bool,
    /// Script-friendly output of show (no titles, one line per signal and per thread).
    #[arg(short = 's')]
    script_friendly: bool,
    /// Only check the file: run it into the model and a dry-run HAL, start nothing.
    #[arg(long)]
    check: bool,
    /// The .hal file.
    #[arg(short = 'f', value_name = "FILE", conflicts_with = "file")]
    file_flag: Option<PathBuf>,
    /// The .hal file (same as -f).
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// The instance name (segment /rtapi-NAME).
    #[arg(long, value_name = "NAME", default_value = rtapi_hal::DEFAULT_INSTANCE)]
    instance: String,
    /// Stop a started file after this long (e.g. 5s); default: until Ctrl-C.
    #[arg(long, value_parser = super::run::parse_run_duration)]
    duration: Option<Nanos>,
}

pub fn run(args: Args) -> Result<(), Failure> {
    let Some(file) = args.file_flag.or(args.file) else {
        return Err(Failure::usage(
            "halrun: give the .hal file: rtapi halrun [-i INI] -f FILE",
        ));
    };
    if let Some(e) = crate::config::invalid_name("--instance", &args.instance) {
        return Err(Failure::usage(e));
    }
    let ini = match &args.ini {
        None => None,
        Some(p) => Some(Ini::load(p).map_err(|e| config_failure(&[e]))?),
    };
    let mut session =
        Session::new(Registry::builtin(), &args.instance).map_err(|e| config_failure(&[e]))?;
    session.set_ini(ini);
    session.keep_going = args.keep_going;
    session.script_friendly = args.script_friendly;
    let mut stdout = std::io::stdout();
    if let Err(e) = session.source(&file, &mut stdout) {
        let errors = if session.errors().is_empty() {
            vec![e]
        } else {
            session.errors().to_vec()
        };
        return Err(config_failure(&errors));
    }
    if args.check {
        // The model accepted it; the dry-run HAL must too.
        let mut dry = crate::components::Validation::new(&args.instance)
            .map_err(|e| Failure::usage(e.to_string()))?;
        return session.apply_to(&mut dry).map_err(|e| config_failure(&[e]));
    }
    let options = RuntimeOptions {
        instance: args.instance.clone(),
        ..RuntimeOptions::default()
    };
    if !session.started() {
        let mut dry = crate::components::Validation::new(&args.instance)
            .map_err(|e| Failure::usage(e.to_string()))?;
        session
            .apply_to(&mut dry)
            .map_err(|e| config_failure(&[e]))?;
        let mut rt = Runtime::configure(options).map_err(Failure::from)?;
        session
            .apply_to(&mut rt)
            .map_err(|e| config_failure(&[e]))?;
        drop(rt);
        out::eprintln(&format!(
            "rtapi halrun: {} ran no `start`: its HAL was built and unloaded, no thread ran",
            file.display()
        ));
        return Ok(());
    }
    start(&session, options)?.run(&args.instance, args.duration)
}
