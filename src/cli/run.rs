//! `rtapi run CONFIG.toml [--duration D] [--instance NAME]`: runs a machine configuration; `rtapi
//! run [-i INI] FILE.hal` runs one `.hal` file the same way (the runtime's defaults, the file's own
//! threads).
//!
//! The whole configuration is checked before anything happens (see [`crate::config`]): every error is
//! printed as `file:line: message` and the exit code is 2, with no segment created and no thread
//! started. Then the runtime is configured, the same commands applied to it, and the threads start.
//! It runs until SIGINT/SIGTERM or `--duration`, then prints each thread's summary.
//!
//! Between loading and the dry run, every `cpu =` is checked against this machine's online CPUs
//! ([`Machine::check_cpus_available`]), so a wrong CPU is a config error at its line, not a runtime one.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{exit, out, Failure};
use crate::components::Registry;
use crate::config::{ConfigError, Machine};
use crate::instance::control::ControlServer;
use crate::instance::LiveSession as Session;
use crate::rt::clock::Nanos;
use crate::rt::units::parse_duration;
use crate::runtime::watchdog::StallAction;
use crate::runtime::{Running, Runtime, RuntimeOptions, StopReason};

#[derive(clap::Args)]
pub(super) struct Args {
    /// The machine configuration: a TOML that names the .hal files, or one .hal file.
    config: PathBuf,
    /// The INI file for a .hal file's [SECTION]KEY substitutions (a TOML names its own: ini =).
    #[arg(short = 'i', long = "ini", value_name = "INI")]
    ini: Option<PathBuf>,
    /// Stop after this long (e.g. 5s, 2m); default: until Ctrl-C.
    #[arg(long, value_parser = parse_run_duration)]
    duration: Option<Nanos>,
    /// The instance name (segment /rtapi-NAME); overrides the config's runtime.instance.
    #[arg(long, value_name = "NAME")]
    instance: Option<String>,
    /// What follows a stalled thread: report, demote (to SCHED_OTHER while stalled) or stop the run;
    /// overrides the config's runtime.on_stall (default demote).
    #[arg(long, value_name = "ACTION")]
    on_stall: Option<StallAction>,
    /// Log only errors (no once-a-second overrun lines); RUST_LOG still wins.
    #[arg(long, short = 'q')]
    pub(crate) quiet: bool,
    /// Do not hold /dev/cpu_dma_latency at 0 (overrides the config's runtime.dma_latency).
    #[arg(long)]
    no_dma_latency: bool,
}

/// `--duration`: a positive duration with its unit (0 would stop before the first period).
pub(crate) fn parse_run_duration(text: &str) -> Result<Nanos, String> {
    match parse_duration(text)? {
        d if d.is_positive() => Ok(d),
        _ => Err("--duration must be positive; omit it to run until Ctrl-C".to_string()),
    }
}

/// A start that failed: the configuration's fault is bad usage (2) with its located error printed,
/// the runtime's a runtime failure (1), as everywhere.
impl From<crate::config::StartError> for Failure {
    fn from(e: crate::config::StartError) -> Self {
        use crate::config::StartError as E;
        match e {
            E::Name(m) => Failure::usage(m),
            E::Config(e) => config_failure(&[e]),
            E::Runtime(e) => e.into(),
        }
    }
}

pub(crate) fn config_failure(errors: &[ConfigError]) -> Failure {
    config_failure_then(errors, "nothing was started")
}

/// The errors printed, and what became of the instance (`then`) in the failure's message. Where the
/// runtime failed at a right command (halcmd's `start`), it is a runtime failure (exit 1), as the
/// same failure is in `rtapi run`.
pub(crate) fn config_failure_then(errors: &[ConfigError], then: &str) -> Failure {
    for e in errors {
        out::eprintln(&e.to_string());
    }
    if errors.iter().any(ConfigError::is_runtime) {
        return Failure::runtime(format!("the instance could not start; {then}"));
    }
    Failure::usage(format!("{} configuration error(s); {then}", errors.len()))
}

/// The run's failure for threads that stalled and did not recover, each with where the watchdog
/// placed it: a function that did not return, or a thread that did not come back to its period (a
/// stall outside its functions: the host, its timer wait).
fn stall_message(stalled: &[(&str, &str)]) -> String {
    let what = if !stalled.is_empty() && stalled.iter().all(|(_, p)| p.starts_with("in function")) {
        "a function did not return"
    } else {
        "the thread did not come back to its period"
    };
    let list: Vec<String> = stalled.iter().map(|(t, p)| format!("{t} ({p})")).collect();
    format!(
        "stalled thread(s): {}; {what} (see the messages above)",
        list.join(", ")
    )
}

/// A file's extension, lower case: how `run` and `halrun` tell a TOML, a `.hal` and an INI apart.
pub(crate) fn extension(path: &std::path::Path) -> Option<String> {
    path.extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
}

/// What kind of file `path` is, by its extension: `rtapi run` takes a TOML or a `.hal` file; an INI
/// is LinuxCNC's and is refused with the commands that take it.
fn load_machine(path: &std::path::Path, ini: Option<&std::path::Path>) -> Result<Machine, Failure> {
    match extension(path).as_deref() {
        Some("hal") => Machine::hal_file(path, ini).map_err(|e| config_failure(&e)),
        Some("ini") => Err(Failure::usage(format!(
            "{}: an INI file (LinuxCNC's machine description) is not a config `rtapi run` takes: \
             give it a machine TOML or a .hal file (rtapi run -i {0} FILE.hal), or run the \
             LinuxCNC machine with `rtapi linuxcnc {0}`",
            path.display()
        ))),
        _ if ini.is_some() => Err(Failure::usage(format!(
            "{}: -i INI goes with a .hal file; a machine TOML names its INI itself (ini = \"FILE\")",
            path.display()
        ))),
        _ => Machine::load(path).map_err(|e| config_failure(&e)),
    }
}

pub(super) fn run(args: Args) -> Result<(), Failure> {
    let mut machine = load_machine(&args.config, args.ini.as_deref())?;
    if let Some(i) = args.instance {
        if let Some(e) = crate::config::invalid_name("--instance", &i) {
            return Err(Failure::usage(e));
        }
        machine.runtime.instance = i;
    }
    if let Some(action) = args.on_stall {
        machine.runtime.watchdog.action = action;
    }
    if args.no_dma_latency {
        machine.runtime.dma_latency = false;
    }
    machine
        .check_cpus_available()
        .map_err(|e| config_failure(&e))?;
    let registry = Registry::builtin();

    // The .hal files run once, into the session's netlist model (output commands print here).
    let mut session = machine
        .session_on(
            crate::instance::LiveBackend::default(),
            &registry,
            &mut std::io::stdout(),
        )
        .map_err(|e| config_failure(&[e]))?;
    let Started(running) = start(&session, machine.runtime.clone())?;
    session
        .attach(running)
        .map_err(|e| Failure::runtime(e.to_string()))?;
    serve(session, &machine.runtime.instance, args.duration)
}

/// Runs an attached session's instance until SIGINT/SIGTERM, `duration` or the end of its threads,
/// taking halcmd commands from other terminals meanwhile (`rtapi halcmd`, over the control socket);
/// then stops it and prints the summary.
pub(crate) fn serve(
    session: Session,
    instance: &str,
    duration: Option<Nanos>,
) -> Result<(), Failure> {
    // Off the RT CPUs first: the control thread started next inherits it.
    if let Some(rt) = session.runtime() {
        rt.keep_caller_off_rt_cpus();
    }
    let shared = Arc::new(Mutex::new(session));
    let server = listen(instance, &shared);
    serve_shared(shared, server, instance, duration)
}

/// The control socket of `instance` over `shared` (a warning and `None` when its name is taken).
pub(crate) fn listen(instance: &str, shared: &Arc<Mutex<Session>>) -> Option<ControlServer> {
    match ControlServer::start(instance, shared.clone()) {
        Ok(s) => Some(s),
        Err(e) => {
            log::warn!(
                "instance '{instance}' takes no halcmd commands from other terminals: its control \
                 socket is taken ({e})"
            );
            None
        }
    }
}

/// [`serve`] for a session already shared with its control socket (halrun listens while its file
/// runs, for the programs `loadusr` starts).
pub(crate) fn serve_shared(
    shared: Arc<Mutex<Session>>,
    server: Option<ControlServer>,
    instance: &str,
    duration: Option<Nanos>,
) -> Result<(), Failure> {
    let lock = || shared.lock().unwrap_or_else(|p| p.into_inner());
    {
        let s = lock();
        let running = s.runtime().expect("serve takes an attached session");
        banner(running, instance, duration);
    }
    let limit = duration.map(|d| Duration::from_nanos(d.as_nanos().max(0) as u64));
    let begun = std::time::Instant::now();
    // Signals and stalls are seen without the session: a client's command may hold it (a long
    // file, a `loadusr -w`), and a stop must win within one tick whatever it does. Once seen, the
    // server's stop flag makes that command give up between its commands.
    let probe = lock().runtime().map(Runtime::stop_probe);
    let reason = loop {
        if let Some(reason) = probe.as_ref().and_then(|p| p.poll()) {
            break reason;
        }
        // The session is only tried: commands from other terminals take it meanwhile.
        let stop = match shared.try_lock() {
            Ok(mut s) => look(&mut s),
            Err(std::sync::TryLockError::Poisoned(p)) => look(&mut p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(reason) = stop {
            break reason;
        }
        if limit.is_some_and(|l| begun.elapsed() >= l) {
            break StopReason::Elapsed;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(server);
    let running = lock()
        .detach()
        .expect("the session stays attached while serving");
    finish(running, reason)
}

/// One look at a session not otherwise busy: reaps the `loadusr` programs that ended, and whether
/// the run should end.
fn look(session: &mut Session) -> Option<StopReason> {
    session.reap_programs();
    match session.runtime() {
        Some(rt) => rt.poll_stop(),
        None => Some(StopReason::ThreadsEnded),
    }
}

fn banner(running: &Runtime<Running>, instance: &str, duration: Option<Nanos>) {
    let threads: Vec<String> = running
        .threads()
        .iter()
        .map(|t| {
            format!(
                "{} {} (cpu {}, prio {})",
                t.name, t.period, t.cpu, t.priority
            )
        })
        .collect();
    out::eprintln(&format!(
        "rtapi: instance '{}' running, flavor {}: {}; {}",
        instance,
        running.flavor(),
        threads.join(", "),
        match duration {
            Some(d) => format!("stopping after {d}"),
            None => "Ctrl-C to stop".to_string(),
        }
    ));
}

/// The dry run (a HAL that is never built, so a bad config touches nothing), then the real runtime
/// configured with the same session, started.
pub(crate) fn start(session: &Session, options: RuntimeOptions) -> Result<Started, Failure> {
    Ok(Started(crate::instance::start(session, options)?))
}

/// A started runtime.
pub(crate) struct Started(pub(crate) Runtime<Running>);

/// Stops the instance, prints the summary, and maps faults, stalls and ended threads to failures.
pub(crate) fn finish(running: Runtime<Running>, reason: StopReason) -> Result<(), Failure> {
    // The stop also ends the LinuxCNC modules loaded into it (their rtapi_app_exit), once no
    // thread can be running their code.
    let summary = running.stop();
    let mut text = summary.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    // After the stop: a closed standard output cannot skip the clean-up, only the summary.
    let printed = out::print(&text);
    let faulted: Vec<&str> = summary
        .threads
        .iter()
        .flat_map(|t| t.faulted.iter().map(String::as_str))
        .collect();
    if !faulted.is_empty() {
        return Err(Failure::runtime(format!(
            "functions faulted and were disabled: {}",
            faulted.join(", ")
        )));
    }
    let stalled: Vec<(&str, &str)> = summary
        .threads
        .iter()
        .filter_map(|t| {
            t.stalled
                .as_deref()
                .map(|place| (t.info.name.as_str(), place))
        })
        .collect();
    if reason == StopReason::Stalled || !stalled.is_empty() {
        return Err(Failure::runtime(stall_message(&stalled)));
    }
    // A stall the thread recovered from is trouble too: for that time the machine's periods did
    // not happen (README: a stalled thread exits 1, whatever followed it).
    let recovered: Vec<String> = summary
        .threads
        .iter()
        .filter(|t| t.stalls > 0)
        .map(|t| {
            format!(
                "{} {} time(s), longest {} ms",
                t.info.name,
                t.stalls,
                t.longest_stall.as_millis()
            )
        })
        .collect();
    if !recovered.is_empty() {
        return Err(Failure::runtime(format!(
            "thread(s) stalled during the run and recovered: {}; the machine did not keep its \
             periods then (see the STALLED messages above; `rtapi detect` and `latency-test` \
             show whether this PC can keep them)",
            recovered.join("; ")
        )));
    }
    if reason == StopReason::ThreadsEnded {
        return Err(Failure {
            code: exit::RUNTIME,
            message: "every thread ended on its own (a timer failed; see the messages above)"
                .into(),
        });
    }
    printed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--on-stall stop` said "a function did not return" after the watchdog had placed the stall
    /// outside the thread's functions.
    #[test]
    fn a_stall_is_told_where_the_watchdog_placed_it() {
        let m = stall_message(&[("servo", "in function pid.0.do-pid-calcs")]);
        assert!(
            m.ends_with("a function did not return (see the messages above)"),
            "{m}"
        );
        let outside = "outside its functions (in its timer wait or bookkeeping)";
        let m = stall_message(&[("servo", outside)]);
        assert!(
            m.contains(&format!("servo ({outside})"))
                && m.ends_with(
                    "the thread did not come back to its period (see the messages above)"
                ),
            "{m}"
        );
        let m = stall_message(&[("servo", "in function f"), ("base", outside)]);
        assert!(m.contains("did not come back"), "{m}");
    }
}
