//! The master's life as a process: who it serves, its flavor and findings, stale segments
//! reclaimed, its socket, the rtapi instance its threads run in, `--trace`, hal_lib, the serve loop,
//! and the shutdown with its summary. `rtapi-lcnc-master`'s `main` (in `cli`) parses the arguments
//! into [`Options`], calls [`run`] and turns a [`StartError`] into its exit status.

use std::io::Write;
use std::os::fd::FromRawFd;
use std::path::PathBuf;

use super::session::session_user;
use super::{say, shmem, End, MasterConfig, Reporter};
use crate::detect::SystemReport;
use crate::flavor;
use crate::latency::explain::Followed;
use crate::latency::run::SpikeWatch;
use crate::rt::clock::Nanos;

/// What the master is told at its start (its command line).
#[derive(Clone, Debug)]
pub struct Options {
    /// The flavor asked for (overrides `RTAPI_FLAVOR`).
    pub flavor: Option<String>,
    /// Keep serving when the last module is unloaded, until `exit` or SIGTERM.
    pub stay: bool,
    /// Report `ready` and each command served on this descriptor (the launcher's pipe).
    pub report_fd: Option<i32>,
    /// Motion's `[EMCMOT]SHMEM_KEY`, reclaimed with the HAL and RTAPI segments if stale.
    pub motion_key: i32,
    /// The rtapi instance LinuxCNC's threads run in.
    pub instance: String,
    /// `--trace`'s threshold.
    pub trace: Option<Nanos>,
}

/// Why the master did not run.
#[derive(Debug)]
pub enum StartError {
    /// What it was given cannot work (no socket path): a usage error.
    Usage(String),
    /// The flavor asked for cannot run here.
    Flavor(flavor::FlavorError),
    /// rtapi's instance for LinuxCNC's threads did not open.
    Runtime(crate::runtime::RuntimeError),
    /// Something of the session refused it (a segment, the socket, hal_lib, the trace).
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Usage(m) | StartError::Failed(m) => f.write_str(m),
            StartError::Flavor(e) => write!(f, "{e}"),
            StartError::Runtime(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// Prints the flavor, kernel and privilege findings at start, from `rtapi detect`'s report.
fn print_findings(report: &SystemReport, sel: &flavor::Selection) {
    let k = &report.kernel;
    say(&format!(
        "rtapi: LinuxCNC realtime master, flavor {} ({}; from {:?}); kernel {} ({}); SCHED_FIFO {}; RT CPU {}",
        sel.flavor,
        sel.flavor.descriptor().summary,
        sel.source,
        k.release.as_deref().unwrap_or("unknown"),
        match k.preempt_rt {
            Some(true) => "PREEMPT_RT",
            Some(false) => "not PREEMPT_RT",
            None => "PREEMPT_RT unknown",
        },
        match report.privileges.sched_fifo {
            Some(true) => "granted",
            Some(false) => "refused",
            None => "unknown",
        },
        report
            .cpus
            .rt_cpu
            .map_or("none".to_string(), |c| c.to_string()),
    ));
    for w in &sel.warnings {
        say(&format!("rtapi: warning: {w}"));
    }
    // Every BAD finding and the machine-wide warnings in full; IRQ findings (often many) as a count.
    let mut irqs = 0;
    for f in report.advice() {
        if f.severity < crate::detect::Severity::Warn {
            continue;
        }
        if f.severity < crate::detect::Severity::Bad && f.id.contains("irq") {
            irqs += 1;
            continue;
        }
        say(&format!(
            "rtapi: {}: {}{}",
            f.severity.label(),
            f.message,
            f.fix
                .as_ref()
                .map_or(String::new(), |x| format!(" — fix: {x}"))
        ));
    }
    if irqs > 0 {
        say(&format!(
            "rtapi: warn: {irqs} interrupt(s) hit the RT CPU: `rtapi detect` lists them with their fixes"
        ));
    }
}

/// Runs the master until `exit`, a signal, its launcher's end or (without `stay`) its last
/// module's unload; everything it made is gone when it returns, an error included.
pub fn run(args: Options) -> Result<(), StartError> {
    run_with(args, None, &[]).map(|_| ())
}

/// The master as LinuxCNC 2.9's `rtapi_app` ([`super::app`]): on `listener`, already bound at
/// [`super::socket_path`], it runs `first` (its own command line) before serving, and does not
/// serve when that fails, was `exit`, or left no module loaded (2.9's `master()`). Its status:
/// `first`'s answer. The socket goes when it returns, an error included.
pub fn run_as_app(
    args: Options,
    listener: std::os::unix::net::UnixListener,
    first: &[String],
) -> Result<i32, StartError> {
    let path = super::socket_path().map_err(StartError::Usage)?;
    let r = run_with(args, Some(listener), first);
    if r.is_err() {
        super::socket::remove(&path);
    }
    r
}

fn run_with(
    args: Options,
    bound: Option<std::os::unix::net::UnixListener>,
    first: &[String],
) -> Result<i32, StartError> {
    // First: from now on SIGINT/SIGTERM are requests the serve loop answers (unload, remove the
    // segments and the socket), never the default action that would leave them behind.
    let stop = crate::rt::signals::shutdown_flag().clone();
    // Before anything starts: a LinuxCNC whose HAL structures rtapi does not know is refused.
    let allow = std::env::var("RTAPI_LINUXCNC_ALLOW").ok();
    let release = super::layout::check_release(std::path::Path::new("/"), allow.as_deref())
        .map_err(StartError::Failed)?;
    super::say(&format!(
        "rtapi: LinuxCNC {} ({})",
        release.text,
        release_note(&release)
    ));
    let user = session_user().map_err(StartError::Failed)?;
    let path = super::socket_path().map_err(StartError::Usage)?;
    let report = SystemReport::detect_live();
    let env = std::env::var("RTAPI_FLAVOR").ok();
    let sel = flavor::select(&report, args.flavor.as_deref(), env.as_deref())
        .map_err(StartError::Flavor)?;
    print_findings(&report, &sel);
    let keys = [shmem::HAL_KEY, shmem::RTAPI_KEY, args.motion_key];
    // As rtapi_app the socket was free, so no master runs; LinuxCNC's halcmd may hold the HAL
    // segment it made before it started this one.
    let in_use_ok = bound.is_some();
    for m in shmem::reclaim_stale_of(&keys, user.uid, in_use_ok).map_err(StartError::Failed)? {
        super::say(&format!("rtapi: {m}"));
    }
    let owner = super::socket::SocketOwner {
        uid: user.uid,
        gid: user.gid,
        as_root: user.as_root,
    };
    let listener = match bound {
        Some(l) => l,
        None => super::socket::bind(&path, &owner).map_err(StartError::Failed)?,
    };
    // A module's crash (C in this process) ends the process: the socket goes with it, as do the
    // SysV segments (shmem.rs registers each) and the instance's segment.
    crate::runtime::crash::remove_on_crash(&path.to_string_lossy());
    // The instance LinuxCNC's threads run in: hardening (locked memory under a real-time flavor,
    // fatal if that fails), rtapi's segment, the watchdog.
    let opts = crate::runtime::hosted::HostedOptions {
        flavor: Some(sel.flavor.name().to_string()),
        // As root for a session user: the user's group reads the segment (0640, root's, so that a
        // later master reclaims it after a crash and root's readers trust it).
        reader_gid: user.as_root.then_some(user.gid),
        spike_threshold: args.trace,
        ..Default::default()
    };
    let flavor = match super::tasks::open(&args.instance, opts, report.clone()) {
        Ok(f) => f,
        Err(e) => {
            super::socket::remove(&path);
            return Err(StartError::Runtime(e));
        }
    };
    super::say(&format!(
        "rtapi: LinuxCNC's threads run in rtapi instance {} (rtapi show thread --instance {0})",
        args.instance
    ));
    // --trace: the trace runs before the first thread starts, and the follower learns of each
    // thread hal_lib makes.
    let spikes = match args.trace {
        Some(t) => Some(start_spike_watch(t, &report).map_err(|e| {
            let _ = super::shut_down();
            super::socket::remove(&path);
            StartError::Failed(e)
        })?),
        None => None,
    };
    let real_time = flavor.real_time();
    shmem::configure(shmem::ShmConfig {
        owner: user.as_root.then_some((user.uid, user.gid)),
        lock: real_time,
    });
    super::become_master(MasterConfig {
        real_time,
        module_dir: PathBuf::from(crate::components::linuxcnc::DEBIAN_MODULE_DIR),
        release: release.text.clone(),
    });
    if let Err(e) = super::load_hal_lib() {
        let _ = super::shut_down();
        super::socket::remove(&path);
        return Err(StartError::Failed(e));
    }
    let mut reporter = Reporter::new(args.report_fd.map(|fd| {
        // SAFETY: the launcher passes a descriptor it opened for us and nothing else uses it.
        unsafe { std::fs::File::from_raw_fd(fd) }
    }));
    reporter.line(&format!("ready {}", std::process::id()));
    super::say(&format!(
        "rtapi: listening on {} (hal_lib loaded)",
        path.display()
    ));
    // As rtapi_app: its own command first; the socket is served only if that leaves work.
    let mut status = 0;
    let mut told_exit = false;
    if !first.is_empty() {
        status = super::handle(first, &mut told_exit);
    }
    let end = if status != 0 || told_exit || (!first.is_empty() && super::module_count() == 0) {
        End::Command
    } else {
        super::serve(&listener, user.uid, args.stay, &mut reporter, &|| {
            stop.load(std::sync::atomic::Ordering::Relaxed)
        })
    };
    drop(listener);
    super::socket::remove(&path);
    let left: Vec<String> = super::module_names()
        .into_iter()
        .filter(|m| m != super::HAL_LIB)
        .collect();
    let summary = super::shut_down();
    if let Some(summary) = &summary {
        let mut text = summary.to_string();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        if let Some(w) = spikes {
            text.push_str(&w.finish(summary));
        }
        // The network verdict of each thread that ran a Mesa card's I/O functions.
        for t in &summary.threads {
            let io = t.stats.as_ref().and_then(|s| s.io.as_ref());
            let period = t.info.period.as_nanos() as u64;
            if let Some(v) =
                io.and_then(|io| crate::latency::board::machine_verdict(&t.info.name, period, io))
            {
                text.push_str(&v);
                text.push('\n');
            }
        }
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
    let threads = summary.as_ref().map_or(0, |s| s.threads.len());
    super::say(&format!(
        "rtapi: master done ({}): {} module(s) unloaded at exit, {threads} thread(s) ran",
        match end {
            End::Exit => "exit",
            End::NoModules => "no module left",
            End::Signal => "signal",
            End::LauncherGone => "its launcher is gone",
            End::Command => "its own command left nothing to serve",
        },
        left.len(),
    ));
    reporter.line("done");
    Ok(status)
}

/// What rtapi knows of LinuxCNC release `v`, for the line the master starts with.
fn release_note(v: &crate::detect::linuxcnc::Version) -> String {
    use crate::detect::linuxcnc::{Support, VERIFIED};
    match v.support() {
        Support::Verified => {
            let from = VERIFIED
                .iter()
                .find(|(p, _)| v.text.starts_with(p))
                .map_or("", |(_, from)| from);
            format!("verified with rtapi: {from}")
        }
        Support::SameLayout => {
            "not run with rtapi yet; its HAL structures are those of the verified 2.9 releases, \
             checked now"
                .into()
        }
        Support::Protocol210 | Support::Unknown => {
            "not known to rtapi, accepted by RTAPI_LINUXCNC_ALLOW; its HAL's layout is checked now"
                .into()
        }
    }
}

/// `--trace`: the trace session on the RT CPU and the spike follower of the master's instance.
fn start_spike_watch(threshold: Nanos, report: &SystemReport) -> Result<SpikeWatch, String> {
    let Some((reader, roster)) = super::tasks::with(|h| (h.hal().reader(), h.roster())) else {
        return Err("--trace: the master's rtapi instance is not open".into());
    };
    let reader = reader.map_err(|e| format!("--trace: reading the instance's segment: {e}"))?;
    let cpus: Vec<usize> = report.cpus.rt_cpu.into_iter().collect();
    let watch = SpikeWatch::start(
        threshold,
        report,
        &cpus,
        reader,
        Box::new(move || roster.started().iter().map(Followed::new).collect()),
    )
    .map_err(|e| format!("--trace: starting the spike follower: {e}"))?;
    say(&format!(
        "rtapi: --trace: every period of LinuxCNC's threads at or over {threshold} late is explained in the summary at exit"
    ));
    Ok(watch)
}
