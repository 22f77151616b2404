//! Scheduling of the calling thread: policy and priority, CPU pinning, and the thread's own
//! resource counters.
//!
//! Everything acts on the **calling** thread on purpose: an RT thread sets itself up as the
//! first thing it does, so that the settings are verified from inside (the CPU it actually
//! runs on, the policy it actually has) and no other thread needs its handle.

use std::fmt;
use std::fs;

use nix::errno::Errno;
use nix::sys::resource::{getrusage, UsageWho};

use crate::rt::clock::Nanos;
use crate::rt::cpulist;
use crate::rt::SysError;

/// The priority LinuxCNC gives its fastest thread; slower ones get one less each. 99 is left
/// free for the kernel's own threads that must preempt everything (e.g. a watchdog).
pub const FASTEST_THREAD_PRIORITY: i32 = 98;

/// A scheduling policy with its priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// `SCHED_FIFO`: runs until it blocks or a higher priority preempts it — what RT threads
    /// use under the `rt-preempt` and `posix` flavors. Priority 1..=99.
    Fifo {
        /// 1 (lowest) ..= 99 (highest).
        priority: i32,
    },
    /// `SCHED_OTHER`: the normal time-sharing policy, used under the `sim` flavor.
    Other,
    /// Any other policy as the kernel reported it (`SCHED_RR`, `SCHED_BATCH`, …), kept so that
    /// a policy read with [`current_policy`] can always be restored.
    Raw {
        /// The `SCHED_*` value.
        policy: i32,
        /// The static priority.
        priority: i32,
    },
}

impl Policy {
    fn to_raw(self) -> (i32, i32) {
        match self {
            Policy::Fifo { priority } => (libc::SCHED_FIFO, priority),
            Policy::Other => (libc::SCHED_OTHER, 0),
            Policy::Raw { policy, priority } => (policy, priority),
        }
    }

    fn from_raw(policy: i32, priority: i32) -> Self {
        match policy {
            libc::SCHED_FIFO => Policy::Fifo { priority },
            libc::SCHED_OTHER => Policy::Other,
            _ => Policy::Raw { policy, priority },
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Fifo { priority } => write!(f, "SCHED_FIFO priority {priority}"),
            Policy::Other => f.write_str("SCHED_OTHER"),
            Policy::Raw { policy, priority } => write!(f, "policy {policy} priority {priority}"),
        }
    }
}

/// Why a scheduling change failed, worded so that the user knows what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedError {
    /// The priority is outside what the kernel accepts for the policy.
    InvalidPriority {
        /// The priority asked for.
        priority: i32,
        /// The valid range.
        min: i32,
        /// The valid range.
        max: i32,
    },
    /// `EPERM` while setting a real-time policy.
    NotPermitted(Policy),
    /// The CPU does not exist or is offline.
    CpuNotOnline {
        /// The CPU asked for.
        cpu: usize,
        /// The online CPUs, as a kernel CPU list (`0-3,6`).
        online: String,
    },
    /// The CPU is online but outside the process's allowed set (taskset, cgroup cpuset).
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs this process may use, as a CPU list.
        allowed: String,
    },
    /// After pinning, `sched_getcpu` reported another CPU.
    NotMigrated {
        /// The CPU asked for.
        cpu: usize,
        /// Where the thread actually runs.
        running_on: usize,
    },
    /// A system call failed.
    Sys(SysError),
}

impl From<SysError> for SchedError {
    fn from(e: SysError) -> Self {
        SchedError::Sys(e)
    }
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::InvalidPriority { priority, min, max } => write!(
                f,
                "priority {priority} is out of range {min}..={max} for SCHED_FIFO"
            ),
            SchedError::NotPermitted(p) => write!(
                f,
                "not permitted to set {p}: run as root, or grant CAP_SYS_NICE \
                 (setcap cap_sys_nice+ep), or raise the rtprio limit (ulimit -r / \
                 /etc/security/limits.conf); or use the sim flavor"
            ),
            SchedError::CpuNotOnline { cpu, online } => write!(
                f,
                "cannot pin to CPU {cpu}: it does not exist or is offline (online CPUs: {online})"
            ),
            SchedError::CpuNotAllowed { cpu, allowed } => write!(
                f,
                "cannot pin to CPU {cpu}: this process may only use CPUs {allowed} \
                 (check taskset and the cgroup cpuset)"
            ),
            SchedError::NotMigrated { cpu, running_on } => write!(
                f,
                "pinned to CPU {cpu} but still running on CPU {running_on}"
            ),
            SchedError::Sys(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SchedError {}

/// Set the calling thread's scheduling policy and priority.
///
/// Done per thread (`pthread_setschedparam` on `pthread_self()`), never per process: only the
/// RT threads should be SCHED_FIFO, not the main thread that reads configs and prints.
#[doc(alias = "pthread_setschedparam")]
pub fn set_current_policy(policy: Policy) -> Result<(), SchedError> {
    let (raw, priority) = policy.to_raw();
    if let Policy::Fifo { priority } = policy {
        // SAFETY: plain queries with a constant, valid policy.
        let (min, max) = unsafe {
            (
                libc::sched_get_priority_min(libc::SCHED_FIFO),
                libc::sched_get_priority_max(libc::SCHED_FIFO),
            )
        };
        if !(min..=max).contains(&priority) {
            return Err(SchedError::InvalidPriority { priority, min, max });
        }
    }
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pthread_self() is always a valid handle for the caller; `param` is valid.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), raw, &param) };
    match rc {
        0 => Ok(()),
        libc::EPERM => Err(SchedError::NotPermitted(policy)),
        e => Err(SysError::new("pthread_setschedparam", Errno::from_raw(e)).into()),
    }
}

/// Set another thread's policy and priority by its kernel tid (`sched_setscheduler`): how a supervisor
/// demotes a stalled RT thread to SCHED_OTHER, and restores it.
#[doc(alias = "sched_setscheduler")]
pub fn set_thread_policy(tid: i32, policy: Policy) -> Result<(), SchedError> {
    let (raw, priority) = policy.to_raw();
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is valid for the call; a tid that no longer exists gives ESRCH, nothing worse.
    if unsafe { libc::sched_setscheduler(tid, raw, &param) } == 0 {
        return Ok(());
    }
    match Errno::last() {
        Errno::EPERM => Err(SchedError::NotPermitted(policy)),
        e => Err(SysError::new("sched_setscheduler", e).into()),
    }
}

/// The calling thread's policy and priority, e.g. to restore them later.
#[doc(alias = "pthread_getschedparam")]
pub fn current_policy() -> Result<Policy, SysError> {
    let mut raw = 0;
    let mut param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pthread_self() is valid; both out-pointers are valid and writable.
    let rc = unsafe { libc::pthread_getschedparam(libc::pthread_self(), &mut raw, &mut param) };
    if rc != 0 {
        return Err(SysError::new("pthread_getschedparam", Errno::from_raw(rc)));
    }
    Ok(Policy::from_raw(raw, param.sched_priority))
}

/// Default priorities by rate-monotonic order, the LinuxCNC habit: the thread with the
/// shortest period gets [`FASTEST_THREAD_PRIORITY`] (98), the next distinct period 97, and so
/// on (never below 1). Rate-monotonic is optimal for fixed priorities when deadlines equal
/// periods, and it is what LinuxCNC users expect to see. Threads with **equal periods get equal
/// priorities** (a rate-monotonic tie: neither has a reason to preempt the other), so the order
/// threads are listed in does not change who preempts whom.
///
/// Returns one priority per entry of `periods`, in the same order.
pub fn rate_monotonic_priorities(periods: &[Nanos]) -> Vec<i32> {
    let mut distinct: Vec<Nanos> = periods.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    periods
        .iter()
        .map(|p| {
            // `p` is in `distinct`, so the search finds it; its index is the rate-monotonic rank.
            let rank = distinct.binary_search(p).unwrap_or(distinct.len());
            let rank = i32::try_from(rank).unwrap_or(i32::MAX);
            FASTEST_THREAD_PRIORITY.saturating_sub(rank).max(1)
        })
        .collect()
}

/// The online CPUs, from `/sys/devices/system/cpu/online`; if that cannot be read (a
/// container without sysfs), the CPUs the process may run on.
pub fn online_cpus() -> Result<Vec<usize>, SysError> {
    match fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| cpulist::parse(&s))
    {
        Some(cpus) if !cpus.is_empty() => Ok(cpus),
        _ => allowed_cpus(),
    }
}

/// The CPUs the **process** may run on (its main thread's affinity: taskset, cgroup cpuset).
#[doc(alias = "sched_getaffinity")]
pub fn allowed_cpus() -> Result<Vec<usize>, SysError> {
    let set = nix::sched::sched_getaffinity(nix::unistd::getpid())
        .map_err(|e| SysError::new("sched_getaffinity", e))?;
    Ok((0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// The CPU the calling thread runs on right now.
#[doc(alias = "sched_getcpu")]
pub fn current_cpu() -> Result<usize, SysError> {
    nix::sched::sched_getcpu().map_err(|e| SysError::new("sched_getcpu", e))
}

/// Restricts the calling thread to `cpus` (unlike [`pin_current_thread`], a set, and unverified): used to
/// keep housekeeping threads off the RT CPUs.
#[doc(alias = "sched_setaffinity")]
pub fn set_current_affinity(cpus: &[usize]) -> Result<(), SysError> {
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)
            .map_err(|e| SysError::new("sched_setaffinity", e))?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .map_err(|e| SysError::new("sched_setaffinity", e))
}

/// Pin the calling thread to `cpu` and verify, with `sched_getcpu`, that it now runs there.
///
/// The CPU is checked first against the online CPUs and the process's allowed set, so that a
/// typo or a CPU hidden by a cpuset gives an error that says which CPUs exist, instead of a
/// bare `EINVAL` from `sched_setaffinity`.
#[doc(alias = "sched_setaffinity")]
pub fn pin_current_thread(cpu: usize) -> Result<(), SchedError> {
    let online = online_cpus()?;
    if !online.contains(&cpu) {
        return Err(SchedError::CpuNotOnline {
            cpu,
            online: cpulist::format(&online),
        });
    }
    let allowed = allowed_cpus()?;
    if !allowed.contains(&cpu) {
        return Err(SchedError::CpuNotAllowed {
            cpu,
            allowed: cpulist::format(&allowed),
        });
    }
    set_current_affinity(&[cpu])?;
    // sched_setaffinity migrates the calling thread before it returns, so the check is
    // immediate; a mismatch means something else (a cpuset change) interfered.
    let running_on = current_cpu()?;
    if running_on != cpu {
        return Err(SchedError::NotMigrated { cpu, running_on });
    }
    Ok(())
}

/// The calling thread's own fault and context-switch counters (`getrusage(RUSAGE_THREAD)`).
///
/// The cycle loop reads them around a period to attribute a latency spike (a page fault, a
/// preemption), and tests read them to prove that the RT path takes no faults and no
/// switches beyond its waits. Allocation-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadUsage {
    /// Page faults served without I/O (`ru_minflt`).
    pub minor_faults: u64,
    /// Page faults that needed I/O (`ru_majflt`).
    pub major_faults: u64,
    /// Times the thread was preempted (`ru_nivcsw`).
    pub involuntary_switches: u64,
    /// Times the thread blocked — each sleeping wait is one (`ru_nvcsw`).
    pub voluntary_switches: u64,
}

impl ThreadUsage {
    /// The counts accumulated since `earlier` (a previous reading on the same thread).
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
        }
    }
}

/// Read the calling thread's [`ThreadUsage`].
#[doc(alias = "getrusage")]
#[inline]
pub fn thread_usage() -> Result<ThreadUsage, SysError> {
    let u = getrusage(UsageWho::RUSAGE_THREAD).map_err(|e| SysError::new("getrusage", e))?;
    let n = |v: libc::c_long| u64::try_from(v).unwrap_or(0);
    Ok(ThreadUsage {
        minor_faults: n(u.minor_page_faults()),
        major_faults: n(u.major_page_faults()),
        involuntary_switches: n(u.involuntary_context_switches()),
        voluntary_switches: n(u.voluntary_context_switches()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_monotonic_gives_the_fastest_98() {
        let base = Nanos::from_micros(25);
        let servo = Nanos::from_millis(1);
        assert_eq!(rate_monotonic_priorities(&[servo, base]), [97, 98]);
        assert_eq!(rate_monotonic_priorities(&[base, servo]), [98, 97]);
        assert_eq!(
            rate_monotonic_priorities(&[servo, Nanos::from_millis(10), base]),
            [97, 96, 98]
        );
        assert!(rate_monotonic_priorities(&[]).is_empty());
    }

    #[test]
    fn rate_monotonic_ties_get_equal_priorities_and_floor_at_one() {
        let p = Nanos::from_millis(1);
        assert_eq!(rate_monotonic_priorities(&[p, p, p]), [98, 98, 98]);
        let base = Nanos::from_micros(25);
        let slow = Nanos::from_millis(10);
        // Ranks count distinct periods: two servo threads tie at 97, the slow one is next.
        assert_eq!(
            rate_monotonic_priorities(&[p, base, slow, p, base]),
            [97, 98, 96, 97, 98]
        );
        let many: Vec<Nanos> = (1..=120).map(Nanos::from_micros).collect();
        let prio = rate_monotonic_priorities(&many);
        assert_eq!(prio[0], 98);
        assert_eq!(prio[96], 2);
        assert_eq!(prio[97], 1);
        assert_eq!(*prio.last().unwrap(), 1);
    }

    #[test]
    fn policy_round_trips_through_raw() {
        for p in [
            Policy::Fifo { priority: 50 },
            Policy::Other,
            Policy::Raw {
                policy: libc::SCHED_RR,
                priority: 3,
            },
        ] {
            let (raw, prio) = p.to_raw();
            assert_eq!(Policy::from_raw(raw, prio), p);
        }
    }

    #[test]
    fn invalid_fifo_priority_is_refused_before_the_kernel() {
        for priority in [0, 100, -1] {
            assert!(matches!(
                set_current_policy(Policy::Fifo { priority }),
                Err(SchedError::InvalidPriority { .. })
            ));
        }
    }
}
