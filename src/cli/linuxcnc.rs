//! `rtapi linuxcnc [LINUXCNC-OPTIONS] INI` and `rtapi-lcnc-master` ([`master_main`]): their
//! arguments and exit statuses. What they do is `crate::master`'s: the launcher
//! (`master::launcher`) and the master's own life (`master::start`).

use std::ffi::OsString;
use std::process::ExitCode;

use super::Failure;
use crate::master::launcher::{self, LaunchError};
use crate::master::{self, shmem};
use crate::rt::clock::Nanos;

// ---- the master ------------------------------------------------------------------------------------

#[derive(clap::Parser)]
#[command(
    name = "rtapi-lcnc-master",
    version,
    about = "rtapi as LinuxCNC 2.9's realtime master (rtapi_app's place); `rtapi linuxcnc` starts it"
)]
struct MasterArgs {
    /// The flavor (rt-preempt, posix, sim); overrides RTAPI_FLAVOR; default: the best this machine runs.
    #[arg(long, value_name = "F")]
    flavor: Option<String>,
    /// Keep serving when the last module is unloaded, until `exit` or SIGTERM (LinuxCNC 2.9's
    /// rtapi_app ends then).
    #[arg(long)]
    stay: bool,
    /// Report `ready` and each command served, one line each, on this descriptor (for the launcher).
    #[arg(long, value_name = "FD")]
    report_fd: Option<i32>,
    /// Motion's [EMCMOT]SHMEM_KEY, reclaimed with the HAL and RTAPI segments if stale.
    #[arg(long, value_name = "KEY", default_value_t = shmem::DEFAULT_MOTION_KEY)]
    motion_key: i32,
    /// The rtapi instance LinuxCNC's threads run in (`rtapi show thread --instance NAME`).
    #[arg(long, value_name = "NAME", env = "RTAPI_INSTANCE", default_value = crate::runtime::hosted::DEFAULT_HOSTED_INSTANCE)]
    instance: String,
    /// Trace the RT CPU (tracefs, root) and name what caused every period of LinuxCNC's threads
    /// that woke THRESHOLD or more late, in the summary at exit (latency-test's `--trace`).
    #[arg(long, value_name = "THRESHOLD", value_parser = trace_threshold)]
    trace: Option<Nanos>,
}

/// `--trace`'s threshold: a positive duration with its unit.
fn trace_threshold(s: &str) -> Result<Nanos, String> {
    let t = crate::rt::units::parse_duration(s)?;
    if t.is_positive() {
        Ok(t)
    } else {
        Err(
            "--trace=THRESHOLD must be positive (every period would be a spike), e.g. --trace=50us"
                .into(),
        )
    }
}

/// `rtapi-lcnc-master`'s main.
pub fn master_main() -> ExitCode {
    use clap::Parser;
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = match MasterArgs::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let options = master::start::Options {
        flavor: args.flavor,
        stay: args.stay,
        report_fd: args.report_fd,
        motion_key: args.motion_key,
        instance: args.instance,
        trace: args.trace,
    };
    match master::start::run(options).map_err(Failure::from) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            master::say(&format!("rtapi-lcnc-master: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}

// ---- the launcher -----------------------------------------------------------------------------------

/// `rtapi linuxcnc`'s arguments: LinuxCNC's own, passed through.
#[derive(clap::Args)]
pub struct Args {
    /// Trace the RT CPU (tracefs, root) and name what caused every period of LinuxCNC's threads
    /// that woke THRESHOLD (default 50us) or more late, in the summary at exit; without tracefs or
    /// root, the interrupt counters around each such period. Give it before LinuxCNC's options.
    #[arg(long, value_name = "THRESHOLD", num_args = 0..=1, require_equals = true,
          default_missing_value = "50us", value_parser = trace_threshold)]
    trace: Option<Nanos>,
    /// LinuxCNC's options and the INI file, as `linuxcnc` takes them (e.g. `-v configs/sim/axis/axis.ini`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "LINUXCNC-ARGS"
    )]
    args: Vec<OsString>,
}

/// Runs `rtapi linuxcnc`: the launcher ([`launcher::run`]) and its exit status.
pub(crate) fn run(args: Args) -> Result<(), Failure> {
    launcher::run(&args.args, args.trace).map_err(|e| match e {
        LaunchError::Usage(m) => Failure::usage(m),
        LaunchError::Failed(m) => Failure::runtime(m),
        LaunchError::Exited { code, message } => Failure { code, message },
    })
}
