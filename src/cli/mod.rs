//! The `rtapi` command line: one module per subcommand; `main.rs` only calls [`main`].

mod compare_timers;
mod detect;
mod divert;
mod export;
mod generate_docs;
mod getp;
mod halcmd;
mod halrun;
mod instance;
mod latency_survey;
mod latency_test;
pub mod linuxcnc;
mod mesa_sim;
mod out;
pub(crate) mod prompt;
mod recorder;
mod run;
mod sample;
mod scope;
mod setp;
mod show;
mod tune;
mod watch;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Exit codes of the CLI contract (docs/guide/reference.md, "Exit codes").
pub(crate) mod exit {
    /// Done.
    pub(crate) const OK: u8 = 0;
    /// A failure while running (start, an output that could not be written, a stall, a dead owner).
    pub(crate) const RUNTIME: u8 = 1;
    /// Bad usage, bad config, or a flavor this machine cannot run.
    pub(crate) const USAGE: u8 = 2;
    /// `latency-test --fail-above` exceeded.
    pub(crate) const FAIL_ABOVE: u8 = 3;
}

/// A failure that ends the command: its message and exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    /// One of [`exit`].
    pub code: u8,
    /// Printed after `rtapi: `, escaped.
    pub message: String,
}

impl Failure {
    /// Bad usage or input (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
    }

    /// A failure while running (exit 1).
    pub(crate) fn runtime(message: impl Into<String>) -> Self {
        Failure {
            code: exit::RUNTIME,
            message: message.into(),
        }
    }
}

/// The CLI alone decides exit codes: a configuration, registration or flavor problem is bad usage
/// (2); a failure while starting is a runtime failure (1).
impl From<crate::runtime::RuntimeError> for Failure {
    fn from(e: crate::runtime::RuntimeError) -> Self {
        use crate::runtime::RuntimeError as E;
        let code = match &e {
            E::Flavor(_) | E::Hal(_) | E::Config(_) | E::Spec { .. } => exit::USAGE,
            E::Segment(_)
            | E::Harden { .. }
            | E::Signals(_)
            | E::Spawn { .. }
            | E::Thread { .. } => exit::RUNTIME,
        };
        Failure {
            code,
            message: e.to_string(),
        }
    }
}

/// `--sysroot DIR` (`detect`, `tune`): the tree read instead of `/`.
fn sysroot(dir: Option<&std::path::Path>) -> Result<crate::detect::SysRoot, Failure> {
    match dir {
        Some(dir) if !dir.is_dir() => Err(Failure::usage(format!(
            "--sysroot {}: not a directory",
            dir.display()
        ))),
        Some(dir) => Ok(crate::detect::SysRoot::new(dir)),
        None => Ok(crate::detect::SysRoot::default()),
    }
}

impl From<crate::latency::Error> for Failure {
    fn from(e: crate::latency::Error) -> Self {
        match e {
            crate::latency::Error::Runtime(e) => e.into(),
            crate::latency::Error::Load(e) => Failure::usage(e.to_string()),
            other => Failure::runtime(other.to_string()),
        }
    }
}

impl From<crate::master::start::StartError> for Failure {
    fn from(e: crate::master::start::StartError) -> Self {
        use crate::master::start::StartError as E;
        match e {
            E::Usage(m) => Failure::usage(m),
            E::Flavor(e) => e.into(),
            E::Runtime(e) => e.into(),
            E::Failed(m) => Failure::runtime(m),
        }
    }
}

impl From<crate::flavor::FlavorError> for Failure {
    fn from(e: crate::flavor::FlavorError) -> Self {
        Failure::usage(e.to_string())
    }
}

/// `rtapi -V`: the package version and the build (commit, `-dirty` when the tree differed from it,
/// `unknown` outside a git checkout; build date), from build.rs.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("RTAPI_GIT"),
    ", built ",
    env!("RTAPI_BUILD_DATE"),
    ")"
);

/// The LinuxCNC releases rtapi was verified with, from [`crate::detect::linuxcnc::VERIFIED`]:
/// `verified with LinuxCNC 2.9.0~pre1 on Debian 12 (bookworm); 2.9.4 on …`.
fn verified_line() -> String {
    let releases: Vec<String> = crate::detect::linuxcnc::VERIFIED
        .iter()
        .map(|(release, systems)| format!("{release} on {systems}"))
        .collect();
    format!("verified with LinuxCNC {}", releases.join("; "))
}

/// `rtapi --version`: [`VERSION`], then the verified LinuxCNC releases.
fn long_version() -> String {
    format!("{VERSION}\n{}", verified_line())
}

#[derive(Parser)]
#[command(
    name = "rtapi",
    version = VERSION,
    long_version = long_version(),
    about = "Real-time thread runtime for CNC motion control on Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what this machine is, the flavor rtapi would use, and what to fix.
    Detect(detect::Args),
    /// Commission this PC: measure base and servo thread latency, optionally under load, and judge.
    LatencyTest(latency_test::Args),
    /// Run one period through every wake-up mechanism and compare drift, lost ticks and latency.
    CompareTimers(compare_timers::Args),
    /// Run a machine configuration (TOML + .hal files) until Ctrl-C or --duration.
    Run(run::Args),
    /// Run a .hal file as LinuxCNC's halrun -f does (--check: only validate it).
    Halrun(halrun::Args),
    /// List a running instance's components, pins, params, signals, functions and threads.
    Show(show::Args),
    /// Print the value of a pin, param or signal of a running instance.
    Getp(getp::Args),
    /// Set a param or an unconnected input pin of a running instance.
    Setp(setp::Args),
    /// Set a signal that no output pin drives.
    Sets(setp::Args),
    /// Watch values live, like halmeter.
    Watch(watch::Args),
    /// Serve the running instances' thread statistics, latency histograms and chosen pins on
    /// http://ADDR/metrics for Prometheus (OpenMetrics text format).
    Export(export::Args),
    /// Print a sampler's FIFO, one line per sample, like halsampler (-c CHAN, -n COUNT, -t, --csv).
    Sample(sample::SampleArgs),
    /// Capture pins and signals of a running instance around a trigger, one sample per period: CSV, JSON, SVG.
    Scope(scope::Args),
    /// Feed a streamer's FIFO from a file or standard input, one line per sample, like halstreamer.
    Stream(sample::StreamArgs),
    /// Run halcmd commands in a running instance: one, a file (-f), or an interactive prompt.
    Halcmd(halcmd::Args),
    /// Ask a running instance's flight recorder for a dump now (`rtapi recorder dump`).
    Recorder(recorder::Args),
    /// Run a whole LinuxCNC 2.9 machine with rtapi as its realtime master (in rtapi_app's place):
    /// `rtapi linuxcnc [LINUXCNC-OPTIONS] INI`.
    Linuxcnc(linuxcnc::Args),
    /// Apply detect's run-time fixes to the RT CPUs (IRQs, workqueues, watchdogs, idle states…) with a
    /// revert file, print the boot parameters for the rest; --revert undoes it.
    Tune(tune::Args),
    /// Serve a simulated Mesa HostMot2 Ethernet card (7I96S- or 7I76E-like) that LinuxCNC's hm2_eth
    /// drives, until Ctrl-C: rehearse a Mesa config before the card arrives.
    MesaSim(mesa_sim::Args),
    /// Make LinuxCNC's own `linuxcnc`, `halrun` and icons run on rtapi: `on` puts rtapi's master in
    /// /usr/bin/rtapi_app's place (a dpkg diversion), `off` puts LinuxCNC's own back, `status` says which.
    Divert(divert::Args),
}

/// Parses the command line, runs the subcommand, and maps failures to the contract's exit codes.
pub fn main() -> ExitCode {
    // Packaging's `rtapi generate-docs`: parsed on its own, outside `Cli`, so that the pages and
    // completions it makes from `Cli` do not offer it to users.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "generate-docs")
    {
        return finish(generate_docs::run(generate_docs::Args::parse_from(
            std::env::args_os().skip(1),
        )));
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            if e.use_stderr() {
                // clap echoes a bad value raw: print the message tamed (control characters
                // escaped, a huge value cut), plain.
                let plain = e.to_string();
                let tamed: Vec<String> = plain.lines().map(crate::rt::units::tame).collect();
                out::eprintln(&tamed.join("\n"));
            } else {
                let _ = e.print();
            }
            return ExitCode::from(code);
        }
    };
    // `latency-test --quiet` prints only its report (and errors): no once-a-second overrun
    // warnings. An explicit RUST_LOG still wins.
    // `run` and `halrun` take --quiet too: the once-a-second overrun lines are for a person watching.
    let quiet = match &cli.command {
        Command::LatencyTest(a) => a.quiet,
        Command::Run(a) => a.quiet,
        Command::Halrun(a) => a.quiet,
        _ => false,
    };
    // Through the sink a prompt or a live display takes the lines from while it holds the terminal.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(if quiet {
        "error"
    } else {
        "warn"
    }))
    .target(env_logger::Target::Pipe(Box::new(
        crate::render::log::LogSink,
    )))
    .init();
    if matches!(
        cli.command,
        Command::Run(_)
            | Command::Halrun(_)
            | Command::LatencyTest(_)
            | Command::CompareTimers(_)
            | Command::Sample(_)
            | Command::Scope(_)
            | Command::Linuxcnc(_)
            | Command::MesaSim(_)
    ) {
        // Before anything else: a Ctrl-C or SIGTERM from now on is a stop request the command answers
        // (stop, report, remove the segment), not the default action that leaves the segment behind.
        crate::rt::signals::shutdown_flag();
    }
    let result = match cli.command {
        Command::Detect(args) => detect::run(args),
        Command::LatencyTest(args) => latency_test::run(args),
        Command::CompareTimers(args) => compare_timers::run(args),
        Command::Run(args) => run::run(args),
        Command::Halrun(args) => halrun::run(args),
        Command::Show(args) => show::run(args),
        Command::Getp(args) => getp::run(args),
        Command::Setp(args) => setp::setp(args),
        Command::Sets(args) => setp::sets(args),
        Command::Watch(args) => watch::run(args),
        Command::Export(args) => export::run(args),
        Command::Sample(args) => sample::sample(args),
        Command::Scope(args) => scope::run(args),
        Command::Stream(args) => sample::stream(args),
        Command::Halcmd(args) => halcmd::run(args),
        Command::Tune(args) => tune::run(args),
        Command::Linuxcnc(args) => linuxcnc::run(args),
        Command::Recorder(args) => recorder::run(args),
        Command::MesaSim(args) => mesa_sim::run(args),
        Command::Divert(args) => divert::run(args),
    };
    finish(result)
}

/// A command's result as the exit code, a failure's message printed first.
fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::from(exit::OK),
        Err(f) => {
            out::eprintln(&format!("rtapi: {}", crate::rt::units::tame(&f.message)));
            ExitCode::from(f.code)
        }
    }
}
