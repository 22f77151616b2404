//! Flavors: how the runtime runs its threads on this machine. One enum, one descriptor per flavor, and
//! one place ([`select`]) that decides, so no code compares flavor strings.
//!
//! | flavor       | scheduler  | memory lock failure | runs when                                  |
//! |--------------|------------|---------------------|--------------------------------------------|
//! | `rt-preempt` | SCHED_FIFO | error               | PREEMPT_RT kernel and SCHED_FIFO works     |
//! | `posix`      | SCHED_FIFO | error               | SCHED_FIFO works (any kernel)              |
//! | `sim`        | SCHED_OTHER| warning             | always; timing is not real time, and says so |

use crate::detect::SystemReport;
use serde::Serialize;
use std::fmt;

/// How the runtime runs its threads (see the module table). Serialised kebab-case, the same names as
/// `--flavor`, `RTAPI_FLAVOR` and `runtime.flavor` take (`rt-preempt`, `posix`, `sim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Flavor {
    /// `rt-preempt`: SCHED_FIFO threads on a PREEMPT_RT kernel.
    RtPreempt,
    /// `posix`: SCHED_FIFO threads on any kernel (latency as good as the kernel allows).
    Posix,
    /// `sim`: SCHED_OTHER threads; runs anywhere, timing is not real time.
    Sim,
}

/// What a flavor is and needs: the descriptor table behind [`Flavor`].
pub struct Descriptor {
    pub(crate) name: &'static str,
    /// One line for listings and reports, e.g. `SCHED_FIFO threads on a PREEMPT_RT kernel`.
    pub summary: &'static str,
    /// Its threads run SCHED_FIFO at their RT priorities (true), or SCHED_OTHER, priorities ignored.
    pub(crate) real_time: bool,
    /// Failing to lock memory stops the start (true) or only warns (false).
    pub memory_lock_required: bool,
    /// Checks this machine can honour the flavor; the error names what is missing and how to get it.
    pub(crate) can_run: fn(&SystemReport) -> Result<(), Unavailable>,
}

const DESCRIPTORS: [Descriptor; 3] = [
    Descriptor {
        name: "rt-preempt",
        summary: "SCHED_FIFO threads on a PREEMPT_RT kernel",
        real_time: true,
        memory_lock_required: true,
        can_run: |r| {
            if r.kernel.preempt_rt != Some(true) {
                return Err(Unavailable {
                    missing: format!(
                        "kernel {} is not PREEMPT_RT ({})",
                        r.kernel.release.as_deref().unwrap_or("(unknown release)"),
                        r.kernel.preempt_rt_evidence.join("; ")
                    ),
                    fix: "use --flavor posix to run SCHED_FIFO threads on this kernel, or boot a PREEMPT_RT kernel"
                        .into(),
                });
            }
            fifo_works(r)
        },
    },
    Descriptor {
        name: "posix",
        summary: "SCHED_FIFO threads on a kernel without PREEMPT_RT",
        real_time: true,
        memory_lock_required: true,
        can_run: fifo_works,
    },
    Descriptor {
        name: "sim",
        summary: "ordinary SCHED_OTHER threads: runs anywhere, timing is NOT real time",
        real_time: false,
        memory_lock_required: false,
        can_run: |_| Ok(()),
    },
];

/// How to gain the SCHED_FIFO privilege, in the words the user needs.
pub(crate) const FIFO_FIX: &str = "run as root, or `sudo setcap cap_sys_nice,cap_ipc_lock=ep <path to rtapi>`, or add \
     `@<group> - rtprio 99` and `@<group> - memlock unlimited` to /etc/security/limits.conf and log in again";

fn fifo_works(r: &SystemReport) -> Result<(), Unavailable> {
    match (r.privileges.sched_fifo, r.throttling.rt_thread_runs) {
        (Some(true), Some(false)) => Err(Unavailable {
            missing: format!(
                "SCHED_FIFO is granted but an RT thread never ran: cgroup {} has no RT budget (cpu.rt_runtime_us = {})",
                r.throttling.cgroup.as_deref().unwrap_or("?"),
                r.throttling.cgroup_rt_runtime_us.map_or("unknown".into(), |v| v.to_string())
            ),
            fix: "give that cgroup cpu.rt_runtime_us > 0, or start rtapi from the root cgroup".into(),
        }),
        (Some(true), _) => Ok(()),
        (answer, _) => Err(Unavailable {
            missing: format!(
                "this process may not use SCHED_FIFO ({}; needs CAP_SYS_NICE or RLIMIT_RTPRIO > 0, RLIMIT_RTPRIO is {})",
                match answer {
                    Some(false) => r.privileges.sched_fifo_error.as_deref().unwrap_or("refused"),
                    _ => "could not be probed",
                },
                r.privileges.rlimit_rtprio.map_or("unknown".into(), |l| l.to_string())
            ),
            fix: FIFO_FIX.into(),
        }),
    }
}

impl Flavor {
    pub(crate) const ALL: [Flavor; 3] = [Flavor::RtPreempt, Flavor::Posix, Flavor::Sim];

    /// The static description of this flavor: scheduler, memory-lock rule, availability check.
    pub fn descriptor(self) -> &'static Descriptor {
        &DESCRIPTORS[self as usize]
    }

    /// The contract name (`rt-preempt`, `posix`, `sim`): what `--flavor` takes and the JSON and
    /// reports show.
    pub fn name(self) -> &'static str {
        self.descriptor().name
    }

    /// Whether this flavor's threads run SCHED_FIFO (`rt-preempt`, `posix`) rather than SCHED_OTHER
    /// (`sim`): whether its numbers are real-time evidence.
    pub fn real_time(self) -> bool {
        self.descriptor().real_time
    }

    pub(crate) fn can_run(self, report: &SystemReport) -> Result<(), Unavailable> {
        (self.descriptor().can_run)(report)
    }

    /// The flavor with contract name `name` (surrounding whitespace ignored, case-sensitive); `None`
    /// for any other text.
    pub fn from_name(name: &str) -> Option<Flavor> {
        Flavor::ALL.into_iter().find(|f| f.name() == name.trim())
    }

    fn valid_names() -> String {
        Flavor::ALL.map(Flavor::name).join(", ")
    }
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a flavor cannot run here, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub(crate) missing: String,
    pub(crate) fix: String,
}

/// Where the chosen flavor came from. Serialised lowercase (`auto`, `flag`, `env`) as
/// `flavor_source` in `rtapi detect --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Chosen from the detection: the best flavor this machine can run.
    Auto,
    /// Forced by the `--flavor` command-line option (wins over the environment).
    Flag,
    /// Forced by the `RTAPI_FLAVOR` environment variable (ignored when empty).
    Env,
}

impl Source {
    fn origin(self) -> &'static str {
        match self {
            Source::Auto => "autodetection",
            Source::Flag => "--flavor",
            Source::Env => "RTAPI_FLAVOR",
        }
    }
}

/// The result of [`select`]: the flavor to run, why, and what to tell the user.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The flavor to run.
    pub flavor: Flavor,
    /// Where it came from (`flavor_source` in `rtapi detect --json`).
    pub source: Source,
    /// Said loudly at start (e.g. falling back to sim, and how to get real time).
    pub warnings: Vec<String>,
}

/// Why [`select`] refused a forced flavor. Its `Display` names the source and what to do; the CLI
/// exits 2 (bad usage) on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlavorError {
    /// The name given is not a flavor; the message lists the valid ones.
    Unknown {
        /// The text as given (by `--flavor` or `RTAPI_FLAVOR`).
        name: String,
        /// Which of `--flavor` or `RTAPI_FLAVOR` gave it.
        source: Source,
    },
    /// A valid flavor this machine cannot honour (e.g. `rt-preempt` on a vanilla kernel).
    Unavailable {
        /// The flavor asked for.
        flavor: Flavor,
        /// Where the demand for it came from.
        source: Source,
        /// What is missing and how to get it.
        why: Unavailable,
    },
}

impl fmt::Display for FlavorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlavorError::Unknown { name, source } => write!(
                f,
                "unknown flavor '{name}' (from {}); valid flavors are: {}",
                source.origin(),
                Flavor::valid_names()
            ),
            FlavorError::Unavailable {
                flavor,
                source,
                why,
            } => write!(
                f,
                "flavor {flavor} (from {}) cannot run on this machine: {}; what to do: {}",
                source.origin(),
                why.missing,
                why.fix
            ),
        }
    }
}

impl std::error::Error for FlavorError {}

/// Chooses the flavor: `--flavor` wins over `RTAPI_FLAVOR`, which wins over autodetection. A forced
/// flavor this machine cannot honour is an error; autodetection never fails (it ends at `sim`).
pub fn select(
    report: &SystemReport,
    flag: Option<&str>,
    env: Option<&str>,
) -> Result<Selection, FlavorError> {
    let forced = flag.map(|n| (n, Source::Flag)).or_else(|| {
        env.filter(|e| !e.trim().is_empty())
            .map(|n| (n, Source::Env))
    });
    if let Some((name, source)) = forced {
        let flavor = Flavor::from_name(name).ok_or_else(|| FlavorError::Unknown {
            name: name.to_string(),
            source,
        })?;
        flavor
            .can_run(report)
            .map_err(|why| FlavorError::Unavailable {
                flavor,
                source,
                why,
            })?;
        let mut warnings = Vec::new();
        if flavor == Flavor::Sim {
            warnings.push(
                "flavor sim: threads run as SCHED_OTHER; timing is NOT real time".to_string(),
            );
        }
        return Ok(Selection {
            flavor,
            source,
            warnings,
        });
    }

    let flavor = [Flavor::RtPreempt, Flavor::Posix]
        .into_iter()
        .find(|f| f.can_run(report).is_ok())
        .unwrap_or(Flavor::Sim);
    let mut warnings = Vec::new();
    if flavor == Flavor::Sim {
        let why = Flavor::Posix
            .can_run(report)
            .err()
            .map(|u| u.missing)
            .unwrap_or_default();
        warnings.push(format!(
            "NO REAL-TIME: running as flavor sim (SCHED_OTHER) because {why}. To get real time: {FIFO_FIX}"
        ));
    }
    Ok(Selection {
        flavor,
        source: Source::Auto,
        warnings,
    })
}
