//! Live probes: what this process can really do, proven by trying it. These cannot come from files, so
//! detection takes them through the [`Probe`] trait: [`LiveProbe`] tries things on this machine, and
//! tests pass a fake.

use crate::rt::clock::{self, Nanos};
use crate::rt::sched::{set_current_affinity, set_current_policy, Policy};
use crate::rt::wake::sleep_until;
use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
use serde::Serialize;
use std::sync::mpsc;
use std::time::Duration;

/// A resource limit: a number or unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Limit {
    /// `RLIM_INFINITY`; serialised as the string `"unlimited"`.
    #[serde(serialize_with = "unlimited")]
    Unlimited,
    /// The soft limit, in the resource's unit (bytes for RLIMIT_MEMLOCK, a priority for RLIMIT_RTPRIO).
    Value(u64),
}

fn unlimited<S: serde::Serializer>(s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str("unlimited")
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::Unlimited => f.write_str("unlimited"),
            Limit::Value(v) => write!(f, "{v}"),
        }
    }
}

/// What this process may do for real-time work.
#[derive(Debug, Clone, Serialize)]
pub struct Privileges {
    /// A probe thread switched itself to SCHED_FIFO (and back). `None` if the probe could not run.
    pub sched_fifo: Option<bool>,
    /// Why SCHED_FIFO was refused, when it was.
    pub sched_fifo_error: Option<String>,
    /// The highest SCHED_FIFO priority this process can actually set.
    pub max_priority: Option<i32>,
    /// Soft RLIMIT_RTPRIO: the highest SCHED_FIFO priority allowed without CAP_SYS_NICE.
    pub rlimit_rtprio: Option<Limit>,
    /// CAP_SYS_NICE is in the effective set (any RT priority allowed); `None` when it could not be read.
    pub cap_sys_nice: Option<bool>,
    /// `mlockall(MCL_CURRENT|MCL_FUTURE)` of a whole process is possible: CAP_IPC_LOCK or an unlimited
    /// RLIMIT_MEMLOCK (a small limit lets a few pages be locked, not the process).
    pub mlock: Option<bool>,
    /// Soft RLIMIT_MEMLOCK, bytes.
    pub rlimit_memlock: Option<Limit>,
    /// CAP_IPC_LOCK is in the effective set (no memory-lock limit); `None` when it could not be read.
    pub cap_ipc_lock: Option<bool>,
    /// `/dev/cpu_dma_latency` can be opened for writing (keeps CPUs out of deep idle states).
    pub dma_latency: Option<bool>,
    /// Port I/O (`ioperm`) is allowed: what a parallel port driven from user space (`hal_parport`)
    /// needs. `None` if not asked.
    pub port_io: Option<bool>,
    /// Why port I/O was refused, with what to do ([`crate::rt::portio::advice`]).
    pub port_io_error: Option<String>,
}

/// The facts that only trying can tell.
pub trait Probe {
    /// Resolution of CLOCK_MONOTONIC in ns.
    fn clock_resolution_ns(&self) -> Option<u64>;
    /// What this process may do, found by trying (SCHED_FIFO on a probe thread) and by reading its
    /// limits and capabilities.
    fn privileges(&self) -> Privileges;
    /// Whether a SCHED_FIFO thread on `cpu` gets to run: it sleeps to an absolute deadline and must
    /// report back in time (a cgroup with no RT budget accepts the policy and then never runs it).
    fn rt_thread_runs(&self, cpu: Option<usize>) -> Option<bool>;
}

/// Probes the real machine for this process.
pub struct LiveProbe;

impl Probe for LiveProbe {
    #[doc(alias = "clock_getres")]
    fn clock_resolution_ns(&self) -> Option<u64> {
        nix::time::clock_getres(nix::time::ClockId::CLOCK_MONOTONIC)
            .ok()
            .map(|ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
    }

    fn privileges(&self) -> Privileges {
        let caps = effective_caps();
        let fifo = on_probe_thread(None, |_| try_fifo());
        let (sched_fifo, sched_fifo_error, max_priority) = match fifo {
            Some(Ok(max)) => (Some(true), None, Some(max)),
            Some(Err(e)) => (Some(false), Some(e), None),
            None => (
                None,
                Some("probe thread could not be started".to_string()),
                None,
            ),
        };
        let rlimit_memlock = rlimit(Resource::RLIMIT_MEMLOCK);
        // On a thread of its own: the permission is per thread, and is given back at once.
        let port_io = std::thread::spawn(crate::rt::portio::probe).join().ok();
        let cap_ipc_lock = caps.map(|c| c & (1 << CAP_IPC_LOCK) != 0);
        Privileges {
            sched_fifo,
            sched_fifo_error,
            max_priority,
            rlimit_rtprio: rlimit(Resource::RLIMIT_RTPRIO),
            cap_sys_nice: caps.map(|c| c & (1 << CAP_SYS_NICE) != 0),
            mlock: match (cap_ipc_lock, rlimit_memlock) {
                (Some(true), _) | (_, Some(Limit::Unlimited)) => Some(true),
                (Some(false), Some(_)) => Some(false),
                _ => None,
            },
            rlimit_memlock,
            cap_ipc_lock,
            dma_latency: Some(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/cpu_dma_latency")
                    .is_ok(),
            ),
            port_io: port_io.as_ref().map(Result::is_ok),
            port_io_error: port_io
                .and_then(|r| r.err())
                .map(|e| format!("ioperm: {e}; {}", crate::rt::portio::advice(&e))),
        }
    }

    fn rt_thread_runs(&self, cpu: Option<usize>) -> Option<bool> {
        on_probe_thread(cpu, |_| {
            set_current_policy(Policy::Fifo { priority: 1 }).ok()?;
            let woke = sleep_until(clock::now() + Nanos::from_millis(1)).is_ok();
            let _ = set_current_policy(Policy::Other);
            Some(woke)
        })
        .flatten()
    }
}

const CAP_IPC_LOCK: u32 = 14;
const CAP_SYS_NICE: u32 = 23;

/// The effective capability set from `/proc/self/status` (`CapEff:` in hex).
fn effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))?
        .trim();
    u64::from_str_radix(hex, 16).ok()
}

#[doc(alias = "getrlimit")]
fn rlimit(resource: Resource) -> Option<Limit> {
    let (soft, _) = getrlimit(resource).ok()?;
    Some(if soft == RLIM_INFINITY {
        Limit::Unlimited
    } else {
        Limit::Value(soft)
    })
}

/// Runs `f` on a fresh thread (pinned to `cpu` when given) so that whatever it does to its own
/// scheduling never touches the caller. Gives up after two seconds: a thread that never runs is an answer.
fn on_probe_thread<T: Send + 'static>(
    cpu: Option<usize>,
    f: impl FnOnce(()) -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rtapi-probe".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                let _ = set_current_affinity(&[cpu]);
            }
            let _ = tx.send(f(()));
        })
        .ok()?;
    rx.recv_timeout(Duration::from_secs(2)).ok()
}

/// Tries SCHED_FIFO at the highest priority the system allows, then at the RLIMIT_RTPRIO ceiling;
/// returns the priority that worked, after restoring SCHED_OTHER.
fn try_fifo() -> Result<i32, String> {
    // SAFETY: sched_get_priority_max only reads its integer argument.
    let max = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    let ceiling = match rlimit(Resource::RLIMIT_RTPRIO) {
        Some(Limit::Value(v)) => (v as i32).min(max),
        _ => max,
    };
    let fifo = |priority| set_current_policy(Policy::Fifo { priority }).map(|_| priority);
    let result = fifo(max).or_else(|e| {
        if ceiling >= 1 && ceiling < max {
            fifo(ceiling)
        } else {
            Err(e)
        }
    });
    let _ = set_current_policy(Policy::Other);
    result.map_err(|e| e.to_string())
}
