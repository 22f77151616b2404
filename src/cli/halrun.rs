//! `rtapi halrun [-i INI] [-k] [-s] [--check] -f FILE` (or `rtapi halrun FILE`): runs a `.hal` file
//! as LinuxCNC's `halrun -f` does, through [`crate::config::halcmd::Session`].
//!
//! The file's commands run into the session's netlist model first; every error is `file:line:
//! message` and exit 2, with nothing created. `--check` stops there. Otherwise the HAL is emitted to
//! a dry run and then to the real runtime; if the file ran `start`, the threads start there and run
//! while the rest of the file runs. At the file's end it is as LinuxCNC's `halrun -f`: `stop`,
//! `unload all`, exit (with the run's summary) — unless `--duration` keeps it running that long, or
//! `-I` gives a prompt. (`rtapi run FILE.hal` runs a file until Ctrl-C.) A file that never ran
//! `start` has its HAL built into a configured runtime (every check made) and dropped; no thread runs.

use std::path::PathBuf;

use std::sync::{Arc, Mutex};

use super::prompt::{self, Outcome};
use super::run::{config_failure, config_failure_then, finish, listen, serve_shared};
use super::{out, Failure};
use crate::components::Registry;
use crate::config::halcmd::{Ini, NameKind};
use crate::instance::control::{ControlServer, Executor, Flow};
use crate::instance::LiveSession as Session;
use crate::rt::clock::Nanos;
use crate::runtime::{RuntimeOptions, StopReason};

#[derive(clap::Args)]
#[command(
    after_help = "As LinuxCNC's halrun: at the end of the file the instance stops and is unloaded \
(threads started by `start` run while the rest of the file runs), and the summary is printed. \
--duration D keeps a started file running for D, -I gives a prompt; `rtapi run FILE.hal` runs it \
until Ctrl-C or SIGTERM.\n\
loadusr after `start` starts the program with RTAPI_INSTANCE set (-W/-Wn NAME: waits up to 10 s \
for its component, e.g. one made with the rtapi Python module); the programs are stopped with the \
instance. Before `start` it is refused.\n\
loadrt of a component rtapi lacks loads LinuxCNC's compiled module (loadrt linuxcnc:NAME asks for it \
explicitly), searched in the INI's [RTAPI]LINUXCNC_MODULES, $RTAPI_LINUXCNC_MODULES, then \
/usr/lib/linuxcnc/modules.\n\
Exit codes: 0 ok, 1 runtime failure, 2 a file:line error (nothing started; after `start`, the \
instance is stopped and unloaded)."
)]
pub(super) struct Args {
    /// The INI file for [SECTION]KEY substitutions.
    #[arg(short = 'i', value_name = "INI")]
    ini: Option<PathBuf>,
    /// Keep going after a failed command (all errors are printed; the exit code is still 2).
    #[arg(short = 'k')]
    keep_going: bool,
    /// Script-friendly output of show (no titles, one line per signal and per thread).
    #[arg(short = 's')]
    script_friendly: bool,
    /// Only check the file: run it into the model and a dry-run HAL, start nothing. LinuxCNC
    /// modules are checked from their files (owners, symbols, arguments), never run: commands on
    /// what they would make are listed as not checked.
    #[arg(long)]
    check: bool,
    /// Stay at an interactive halcmd prompt after the file (or without one): line editing,
    /// history, tab completion; `start` starts the instance, later commands change it while it
    /// runs; `quit` (or Ctrl-D) stops and unloads it.
    #[arg(short = 'I')]
    interactive: bool,
    /// The .hal file.
    #[arg(short = 'f', value_name = "FILE", conflicts_with = "file")]
    file_flag: Option<PathBuf>,
    /// The .hal file (same as -f).
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// The instance name (segment /rtapi-NAME).
    #[arg(long, value_name = "NAME", default_value = rtapi_hal::DEFAULT_INSTANCE)]
    instance: String,
    /// Keep a started file running this long after its end (e.g. 5s, 2m), then stop; default: stop
    /// at the end of the file, as LinuxCNC's halrun does.
    #[arg(long, value_parser = super::run::parse_run_duration)]
    duration: Option<Nanos>,
    /// Log only errors (no once-a-second overrun lines), as halcmd's -q; RUST_LOG still wins.
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,
    /// Do not hold /dev/cpu_dma_latency at 0 while the instance runs.
    #[arg(long)]
    no_dma_latency: bool,
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let file = args.file_flag.clone().or(args.file.clone());
    if file.is_none() && !args.interactive {
        return Err(Failure::usage(
            "halrun: give the .hal file (rtapi halrun [-i INI] -f FILE), or -I for a prompt",
        ));
    }
    if args.check && args.interactive {
        return Err(Failure::usage("halrun: --check and -I do not go together"));
    }
    if let Some(e) = crate::config::invalid_name("--instance", &args.instance) {
        return Err(Failure::usage(e));
    }
    if let Some(f) = &file {
        not_a_hal_file(f)?;
    }
    // Said now, not at `start` after a session of typing (a check creates no instance).
    if !args.check {
        if let Some(pid) = super::instance::live_owner(&args.instance) {
            // The message `rtapi run` gives for the same instance (the segment's own refusal).
            return Err(Failure::runtime(
                rtapi_hal::HalError::InstanceInUse {
                    instance: args.instance.clone(),
                    pid,
                }
                .to_string(),
            ));
        }
    }
    let ini = match &args.ini {
        None => None,
        Some(p) => Some(Ini::load(p).map_err(|e| config_failure(&[e]))?),
    };
    let mut session =
        Session::owner(Registry::builtin(), &args.instance).map_err(|e| config_failure(&[e]))?;
    session.set_ini(ini);
    session.set_check_only(args.check);
    session.keep_going = args.keep_going;
    session.script_friendly = args.script_friendly;
    let options = RuntimeOptions {
        instance: args.instance.clone(),
        dma_latency: !args.no_dma_latency,
        ..RuntimeOptions::default()
    };
    if !args.check {
        // `start` starts the instance where it stands in the file; what follows changes it live.
        session.start_on_start(options.clone());
    }
    // The control socket listens while the file runs: a program `loadusr` starts after `start`
    // joins the instance through it. (Nobody can use it before the instance exists: clients check
    // the process behind it against the owner in the segment.)
    let shared = Arc::new(Mutex::new(session));
    let server = if args.check {
        None
    } else {
        listen(&args.instance, &shared)
    };
    let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
    let mut stdout = std::io::stdout();
    if let Some(file) = &file {
        let mut session = lock();
        if let Err(e) = session.source(file, &mut stdout) {
            let errors = if session.errors().is_empty() {
                vec![e]
            } else {
                session.errors().to_vec()
            };
            // A file that failed after its `start`: the instance goes, with its summary.
            let Some(running) = session.detach() else {
                return Err(config_failure(&errors));
            };
            drop(session);
            drop(server);
            // A stop (SIGTERM, SIGINT, SIGHUP, a stall) that cut the file short is the run's
            // end, as it is after the file: no configuration error.
            if let Some(reason) = running.stop_probe().poll() {
                if errors.iter().all(crate::config::ConfigError::is_stopping) {
                    out::eprintln(&format!(
                        "rtapi halrun: the stop abandoned {} from line {}",
                        file.display(),
                        errors[0].line.unwrap_or(0)
                    ));
                    return finish(running, reason);
                }
            }
            let _ = finish(running, StopReason::Elapsed);
            return Err(config_failure_then(
                &errors,
                "the instance the file's `start` started was stopped and unloaded (its summary is above)",
            ));
        }
    }
    if args.interactive {
        return interactive(shared, server);
    }
    let Some(file) = file else {
        return Ok(());
    };
    if args.check {
        // The model accepted it; the dry-run HAL must too (LinuxCNC modules left out: a check never
        // runs their code). What could not be checked without them is listed.
        let session = lock();
        for e in session.unchecked() {
            out::eprintln(&e.to_string());
        }
        let mut dry = crate::components::Validation::new(&args.instance)
            .map_err(|e| Failure::usage(e.to_string()))?;
        return session.apply_to(&mut dry).map_err(|e| config_failure(&[e]));
    }
    if lock().runtime().is_none() {
        drop(server);
        drop(crate::instance::build(&*lock(), options)?);
        out::eprintln(&format!(
            "rtapi halrun: {} ran no `start`: its HAL was built and unloaded, no thread ran",
            file.display()
        ));
        return Ok(());
    }
    if args.duration.is_none() {
        // LinuxCNC's halrun -f: the file's end is the run's end.
        drop(server);
        let running = lock()
            .detach()
            .expect("a started session stays attached until here");
        let result = finish(running, StopReason::Elapsed);
        out::eprintln(&format!(
            "rtapi halrun: stopped and unloaded at the end of {}, as LinuxCNC's halrun does; to \
             keep it running: --duration D, -I, or rtapi run {0}",
            file.display()
        ));
        return result;
    }
    if let Some(rt) = lock().runtime() {
        rt.keep_caller_off_rt_cpus();
        // The control thread started before the RT CPUs were known.
        if let Some(server) = &server {
            server.keep_off_rt_cpus(rt.housekeeping_cpus());
        }
    }
    serve_shared(shared, server, &args.instance, args.duration)
}

/// A machine TOML or an INI given where the `.hal` file goes: which command takes it.
fn not_a_hal_file(path: &std::path::Path) -> Result<(), Failure> {
    let what = match super::run::extension(path).as_deref() {
        Some("toml") => "a machine TOML: run it with `rtapi run",
        Some("ini") => {
            "an INI file: give it as -i INI with the .hal file (rtapi halrun -i INI -f FILE.hal), \
             or run the LinuxCNC machine it describes with `rtapi linuxcnc"
        }
        _ => return Ok(()),
    };
    Err(Failure::usage(format!(
        "{0}: halrun takes a .hal file; this is {what} {0}`",
        path.display()
    )))
}

/// halrun -I: the prompt, in this process, and the control socket for other terminals, on one
/// session; `quit`, Ctrl-D or SIGTERM end it, stopping the instance if it was started.
fn interactive(shared: Arc<Mutex<Session>>, server: Option<ControlServer>) -> Result<(), Failure> {
    let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
    let names = {
        let shared = shared.clone();
        Box::new(move || {
            let s = shared.lock().unwrap_or_else(|p| p.into_inner());
            [
                NameKind::Comp,
                NameKind::Pin,
                NameKind::Param,
                NameKind::Signal,
                NameKind::Funct,
                NameKind::Thread,
            ]
            .into_iter()
            .flat_map(|k| s.names(k))
            .collect()
        })
    };
    let modules = lock().modules().loadable_module_names();
    let result = prompt::interactive("halcmd: ", names, modules, &mut |line| {
        let mut out = Vec::new();
        let r = Executor::execute(&mut *lock(), line, &mut out);
        let out = String::from_utf8_lossy(&out).into_owned();
        match r {
            Ok(flow) => Outcome {
                out,
                error: None,
                flow,
            },
            Err(e) => Outcome {
                out,
                error: Some(e.to_string()),
                flow: Flow::Continue,
            },
        }
    });
    drop(server);
    let running = lock().detach();
    let stopped = match running {
        Some(r) => finish(r, StopReason::Elapsed),
        None => Ok(()),
    };
    result.map_err(|e| Failure::runtime(format!("the prompt failed: {e}")))?;
    stopped
}
