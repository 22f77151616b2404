//! A tracefs instance of our own: created with `mkdir`, configured, removed on drop. The global
//! buffer (and any other tool's instance) is never touched.

use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::parse::{parse_line, Event, Line};

/// Where tracefs is mounted on current kernels.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// The events a session enables, `system/event`, when the kernel has them. Each costs the RT CPU
/// its recording (a few hundred ns on the test VM) and several lie on the path from the RT thread's
/// timer to its running, so only what attribution reads is enabled: not `sched_waking` (the wakeup
/// says the same), not `hrtimer_expire_exit` nor `workqueue_execute_end` (the next event bounds them).
pub const EVENTS: [&str; 17] = [
    "sched/sched_switch",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "irq_vectors/local_timer_entry",
    "irq_vectors/local_timer_exit",
    "irq_vectors/call_function_entry",
    "irq_vectors/call_function_exit",
    "irq_vectors/call_function_single_entry",
    "irq_vectors/call_function_single_exit",
    "irq_vectors/reschedule_entry",
    "irq_vectors/reschedule_exit",
    "timer/hrtimer_expire_entry",
    "workqueue/workqueue_execute_start",
];

/// The [`EVENTS`] that lie on an RT thread's own periodic wake — its timer interrupt, the expiry,
/// the wakeup, the switches from and to the idle task — kept in the session's second tracefs
/// instance, `<name>-wake` ([`TraceSession::wake`]), whose `set_event_notrace_pid`
/// [`TraceSession::skip_own_wakes`] fills with the idle task (pid 0) and the RT threads. The kernel
/// then drops such an event while the CPU is idle or running a listed thread (a switch or a wakeup:
/// when both tasks are listed) at the tracepoint, before it builds the record: no ring write and no
/// filter evaluation, which is what per-event `filter`s still cost (the kernel's share on the test
/// VM, 100 µs base thread, traced ÷ untraced base p50: 1.10 with filters on these events, 1.11 with
/// a filter on the switches only, 0.96–1.06 with the pid list on all of them; docs/guide/
/// benchmarks.md). A pid list is per instance, hence the second one: in the first, device
/// interrupts while the CPU is idle must stay recorded; and the third ([`SWITCH_SUFFIX`]) for the
/// switches a listed pair would lose.
///
/// What the pid list keeps: all of these while another task is current — the RT thread's timer
/// expiring under it and the wakeup and switch that follow (a late timer is still named there), and
/// the local timer interrupt, which is the tick as well. What it drops: the local timer interrupt
/// while the CPU is idle or running a listed thread, so the time of the RT thread's own timer
/// interrupt (and of a tick that shares it) is no longer told apart from time outside the kernel.
pub const WAKE_EVENTS: [&str; 5] = [
    "sched/sched_switch",
    "sched/sched_wakeup",
    "timer/hrtimer_expire_entry",
    "irq_vectors/local_timer_entry",
    "irq_vectors/local_timer_exit",
];

/// What [`TraceSession::skip_own_wakes`] writes to the wake instance's `set_event_notrace_pid`:
/// the idle task and `tids`, one line.
pub fn notrace_pids(tids: &[u32]) -> String {
    let mut all = vec![0u32];
    all.extend_from_slice(tids);
    pid_list(&all)
}

/// The events of a session's instances as one stream: in time order (stable: one instance's events
/// with the same time keep theirs), each once — a switch between another task and a watched thread
/// is in both the wake instance and the switches' (the current task's name may differ between
/// readers, the rest does not).
fn in_order(events: &mut Vec<Event>) {
    events.sort_by_key(|e| e.ts_ns);
    events.dedup_by(|a, b| {
        a.ts_ns == b.ts_ns && a.cpu == b.cpu && a.pid == b.pid && a.kind == b.kind
    });
}

/// A pid list as tracefs reads one: the pids, space-separated.
fn pid_list(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The events of a network session ([`TraceSession::start_network`]), each with the in-kernel filter
/// that keeps only the network path's share (`None`: all of it): device interrupts, the `NET_TX` (2)
/// and `NET_RX` (3) softirqs, and switches to or from `ksoftirqd`.
pub const NETWORK_EVENTS: [(&str, Option<&str>); 5] = [
    ("irq/irq_handler_entry", None),
    ("irq/irq_handler_exit", None),
    ("irq/softirq_entry", Some("vec == 2 || vec == 3")),
    ("irq/softirq_exit", Some("vec == 2 || vec == 3")),
    (
        "sched/sched_switch",
        Some("prev_comm ~ \"ksoftirqd/*\" || next_comm ~ \"ksoftirqd/*\""),
    ),
];

/// Ring buffer per CPU of a network session, KiB: a few events per packet burst, and the windows
/// read are the last second's.
pub const NETWORK_BUFFER_KB_PER_CPU: u64 = 32 * 1024;

/// The name of a session's second instance is its first's with this appended ([`WAKE_EVENTS`]).
pub const WAKE_SUFFIX: &str = "-wake";

/// The name of a session's third instance: only `sched_switch`, for the threads whose switches must
/// stay visible ([`TraceSession::skip_own_wakes`]).
pub const SWITCH_SUFFIX: &str = "-switch";

/// Ring buffer per traced CPU of the wake instance, KiB: with the RT threads' own wakes dropped it
/// records only what happens under other tasks, and the follower drains it as it goes.
pub const WAKE_BUFFER_KB_PER_CPU: u64 = 8 * 1024;

/// Ring buffer per traced CPU of the switches' instance, KiB: a few switches a period of the
/// threads watched.
pub const SWITCH_BUFFER_KB_PER_CPU: u64 = 4 * 1024;

/// Ring buffer per traced CPU, KiB. An RT CPU at a 1 kHz period writes ~8 events a period
/// (switch in/out, wakeup, local timer, hrtimer) of ~40–60 bytes: ~0.5 MB/s, so 32 MiB keeps a
/// 60 s run whole; a busier CPU keeps its last tens of seconds (the buffer overwrites the oldest).
pub const BUFFER_KB_PER_CPU: u64 = 32 * 1024;

/// Why a session could not be started or read.
#[derive(Debug)]
pub enum TraceError {
    /// tracefs is not mounted (or the kernel has none).
    NotMounted(PathBuf),
    /// Not allowed to create an instance.
    Permission(PathBuf),
    /// The instance directory already exists (another process, or a crashed earlier run).
    InstanceExists(PathBuf),
    /// A CPU outside the machine, or no CPU.
    BadCpus(String),
    /// Any other I/O failure, with the file it was on.
    Io(PathBuf, std::io::Error),
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceError::NotMounted(p) => write!(
                f,
                "tracefs is not mounted at {} (no instances/ there): run `mount -t tracefs nodev {}` \
                 as root, on a kernel built with CONFIG_FTRACE",
                p.display(),
                p.display()
            ),
            TraceError::Permission(p) => write!(
                f,
                "not allowed to create a trace instance at {}: tracing needs root (or CAP_SYS_ADMIN \
                 with write access to tracefs); run as root",
                p.display()
            ),
            TraceError::InstanceExists(p) => write!(
                f,
                "trace instance {} already exists (another session, or a crashed one: remove it \
                 with `rmdir {}`)",
                p.display(),
                p.display()
            ),
            TraceError::BadCpus(s) => write!(f, "cannot trace CPUs {s}"),
            TraceError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for TraceError {}

/// What [`TraceSession::read_window`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// The events with `from_ns <= ts_ns <= to_ns`, in time order.
    pub events: Vec<Event>,
    /// Lines that could not be parsed (in the part of the buffer read).
    pub skipped: usize,
}

/// The inode of the initial PID namespace (the kernel's `PROC_PID_INIT_INO`).
const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// This process's PID namespace (the inode of `/proc/self/ns/pid`) when it is not the initial one.
fn own_pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let ino = fs::metadata("/proc/self/ns/pid").ok()?.ino();
    (ino != INITIAL_PID_NAMESPACE).then_some(ino)
}

/// The pid in an instance name made by [`TraceSession::name_for`] in `namespace` (`None`: the
/// initial one), if `name` is one.
fn pid_of_instance(name: &str, namespace: Option<u64>) -> Option<i32> {
    let rest = name.strip_prefix("rtapi-")?;
    let rest = rest
        .strip_suffix(WAKE_SUFFIX)
        .or_else(|| rest.strip_suffix(SWITCH_SUFFIX))
        .unwrap_or(rest);
    let pid = match namespace {
        None => rest,
        Some(ns) => rest.strip_suffix(&format!("-pidns{ns}"))?,
    };
    pid.parse::<i32>().ok().filter(|&p| p > 0)
}

/// Removes the instances `rtapi-<pid>` ([`TraceSession::default_name`]) of processes that are
/// gone: a crash (a LinuxCNC module's, under `rtapi linuxcnc --trace`) or a SIGKILL leaves its
/// instance, and with it a large ring buffer per traced CPU, behind. Tracefs is one for the whole
/// machine, but pids are per PID namespace: only the instances named in this process's namespace are
/// judged (a container's `rtapi-<pid>-pidns<inode>`, the host's `rtapi-<pid>`), so that a process in
/// one namespace never takes another's live instance for a dead one.
fn reclaim_stale(instances: &Path) {
    reclaim_stale_in(instances, own_pid_namespace())
}

fn reclaim_stale_in(instances: &Path, namespace: Option<u64>) {
    let Ok(entries) = fs::read_dir(instances) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| pid_of_instance(n, namespace)) else {
            continue;
        };
        let gone = matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        if gone && fs::remove_dir(e.path()).is_ok() {
            log::info!(
                "removed trace instance {} left by process {pid}, which is gone",
                e.path().display()
            );
        }
    }
}

/// A running trace of some CPUs in a tracefs instance of its own; stopped and removed on drop.
#[derive(Debug)]
pub struct TraceSession {
    dir: PathBuf,
    cpus: Vec<usize>,
    missing: Vec<&'static str>,
    /// CLOCK_MONOTONIC ns when recording started.
    started_ns: u64,
    /// The RT threads whose own wakes are dropped ([`TraceSession::skip_own_wakes`]).
    own: Vec<u32>,
    /// The instance of the [`WAKE_EVENTS`], when this kernel has per-instance pid lists.
    wake: Option<Box<TraceSession>>,
    /// The instance of the switches of the threads given as watched, with the wake instance.
    switches: Option<Box<TraceSession>>,
    /// Those threads ([`TraceSession::skip_own_wakes`]).
    watched: Vec<u32>,
    /// The wake path's events (the scheduler's, the timer's) this instance holds back while they
    /// are off ([`set_sched_events`](Self::set_sched_events)).
    sched_held: Vec<&'static str>,
    /// When the held events were on: (from, until) CLOCK_MONOTONIC ns, the last one open
    /// while they are on.
    sched_on: Vec<(u64, Option<u64>)>,
}

impl TraceSession {
    /// The instance name this process uses by default: [`TraceSession::name_for`] its pid.
    pub fn default_name() -> String {
        Self::name_for(std::process::id())
    }

    /// The default instance name of process `pid` of this process's PID namespace: `rtapi-<pid>`
    /// in the initial namespace, `rtapi-<pid>-pidns<inode>` in another (a container's pids repeat the
    /// host's, and tracefs is shared).
    pub fn name_for(pid: u32) -> String {
        match own_pid_namespace() {
            None => format!("rtapi-{pid}"),
            Some(ns) => format!("rtapi-{pid}-pidns{ns}"),
        }
    }

    /// Creates `instances/<instance_name>` under tracefs, with trace_clock `mono` (timestamps are
    /// CLOCK_MONOTONIC, as [`crate::rt::clock::now`]), tracing only `cpus`, a
    /// [`BUFFER_KB_PER_CPU`] overwriting ring on each of them, and the [`EVENTS`] this kernel has
    /// ([`missing`](Self::missing) lists the others), and starts tracing.
    ///
    /// tracefs is looked for where `RTAPI_TRACEFS` says (only there, when set), else at
    /// [`TRACEFS`], then at the older `/sys/kernel/debug/tracing`; if neither has it, it is
    /// mounted at [`TRACEFS`] (root only; it stays mounted, as it would after boot on most
    /// distributions).
    ///
    /// The [`WAKE_EVENTS`] go to a second instance, `<instance_name>-wake` ([`wake`](Self::wake)),
    /// when the kernel has `set_event_notrace_pid` (5.8+); on an older one they stay in the first.
    ///
    /// `RTAPI_TRACE_RING_KB`, when set, is the ring size per CPU of both instances instead (for
    /// tests that need the kernel's ring to overwrite what was not read).
    pub fn start(cpus: &[usize], instance_name: &str) -> Result<TraceSession, TraceError> {
        Self::start_rt(cpus, instance_name, false)
    }

    /// As [`start`](Self::start), with the events of the RT threads' wake path — the scheduler's
    /// (`sched/*`: the switches and wakeups) and the [`WAKE_EVENTS`]' timer events — off until
    /// [`set_sched_events`](Self::set_sched_events) turns them on, and no pid list meanwhile. Each
    /// live scheduler tracepoint, and a pid list's probes, run on every switch and wakeup of the RT
    /// CPU, recorded or not; the timer events would be recorded every period without the list.
    /// What stays on (device interrupts, softirqs, IPIs, work items) costs the RT threads' wake
    /// little more than no trace (ARCHITECTURE, "What the RT CPU records").
    pub fn start_light(cpus: &[usize], instance_name: &str) -> Result<TraceSession, TraceError> {
        Self::start_rt(cpus, instance_name, true)
    }

    fn start_rt(
        cpus: &[usize],
        instance_name: &str,
        light: bool,
    ) -> Result<TraceSession, TraceError> {
        let ring_kb = std::env::var("RTAPI_TRACE_RING_KB").ok().and_then(|v| {
            let kb = v.trim().parse::<u64>().ok().filter(|&kb| kb > 0);
            if kb.is_none() {
                log::warn!(
                    "RTAPI_TRACE_RING_KB={v:?} is not a size in KiB (a whole number > 0): \
                     the default rings are used; unset it or give e.g. 256"
                );
            }
            kb
        });
        Self::start_rt_in(&tracefs_root()?, cpus, instance_name, ring_kb, light)
    }

    fn start_rt_in(
        root: &Path,
        cpus: &[usize],
        instance_name: &str,
        ring_kb: Option<u64>,
        light: bool,
    ) -> Result<TraceSession, TraceError> {
        // A light session holds back the RT wake path's events: the scheduler's, and the timer
        // events whose RT threads' own share only the wake instance's pid list drops (a pid list
        // keeps the scheduler's tracepoints live, so it is not written while they are off).
        let held = |e: &&str| light && (e.starts_with("sched/") || WAKE_EVENTS.contains(e));
        let wake_events: Vec<(&str, Option<&str>)> = WAKE_EVENTS
            .iter()
            .filter(|e| !held(e))
            .map(|e| (*e, None))
            .collect();
        // The wake instance first: the first's start is then the later, and both cover from it.
        let wake = Self::start_in(
            root,
            cpus,
            &format!("{instance_name}{WAKE_SUFFIX}"),
            &wake_events,
            ring_kb.unwrap_or(WAKE_BUFFER_KB_PER_CPU),
        )?;
        let split = wake.dir.join("set_event_notrace_pid").exists();
        let mut wake = wake;
        wake.hold(WAKE_EVENTS.iter().copied().filter(|e| held(e)));
        let (wake, switches) = if split {
            // No event yet: `sched_switch` is enabled once a thread is watched, after its pid list.
            let switches = Self::start_in(
                root,
                cpus,
                &format!("{instance_name}{SWITCH_SUFFIX}"),
                &[],
                ring_kb.unwrap_or(SWITCH_BUFFER_KB_PER_CPU),
            )?;
            (Some(Box::new(wake)), Some(Box::new(switches)))
        } else {
            log::info!(
                "--trace: this kernel has no per-instance notrace pid list: the RT threads' timer \
                 interrupts and wakeups stay recorded"
            );
            drop(wake);
            (None, None)
        };
        let mine = |e: &&str| wake.is_none() || !WAKE_EVENTS.contains(e);
        let events: Vec<(&str, Option<&str>)> = EVENTS
            .iter()
            .filter(|e| mine(e) && !held(e))
            .map(|e| (*e, None))
            .collect();
        let mut s = Self::start_in(
            root,
            cpus,
            instance_name,
            &events,
            ring_kb.unwrap_or(BUFFER_KB_PER_CPU),
        )?;
        s.hold(EVENTS.iter().copied().filter(|e| mine(e) && held(e)));
        if let Some(w) = &wake {
            s.missing.extend(w.missing.iter().copied());
        }
        if !light {
            s.sched_on.push((s.started_ns, None));
        }
        s.wake = wake;
        s.switches = switches;
        Ok(s)
    }

    /// Notes `events` as held back in this instance (those this kernel lacks: as missing).
    fn hold(&mut self, events: impl Iterator<Item = &'static str>) {
        for ev in events {
            if self.dir.join(format!("events/{ev}/enable")).exists() {
                self.sched_held.push(ev);
            } else {
                self.missing.push(ev);
            }
        }
    }

    /// Turns the events a [`start_light`](Self::start_light) session holds back (the scheduler's
    /// and the wake path's timer events) on or off, in every instance (the switch instance's only
    /// while a thread is watched), with the pid lists; nothing changes when they already are so.
    /// Spikes in a time they were on throughout are explained with the switches and priorities
    /// ([`sched_covers`](Self::sched_covers)).
    pub fn set_sched_events(&mut self, on: bool) -> Result<(), TraceError> {
        fn parts(s: &TraceSession) -> Vec<&TraceSession> {
            std::iter::once(s).chain(s.wake.as_deref()).collect()
        }
        if self.sched_events_on() == on || parts(self).iter().all(|p| p.sched_held.is_empty()) {
            // Already so, or not a light session (its scheduler's events stay on).
            return Ok(());
        }
        let value = if on { "1" } else { "0" };
        if !on {
            // Closed before the first write: nothing after this is taken as traced.
            if let Some(last) = self.sched_on.last_mut() {
                last.1 = Some(crate::rt::clock::now().as_nanos().max(0) as u64);
            }
        }
        // The wake instance's pid list before its events go on, and after they go off: its
        // scheduler events never record the RT threads' own wakes.
        if on {
            self.apply_notrace(true)?;
        }
        for p in parts(self) {
            for ev in &p.sched_held {
                p.write(&format!("events/{ev}/enable"), value)?;
            }
        }
        if !on {
            self.apply_notrace(false)?;
        }
        self.apply_switches(on)?;
        if on {
            let now = crate::rt::clock::now().as_nanos().max(0) as u64;
            self.sched_on.push((now, None));
        }
        Ok(())
    }

    /// Whether it was started [`light`](Self::start_light) (and this kernel has scheduler events).
    pub fn is_light(&self) -> bool {
        std::iter::once(self)
            .chain(self.wake.as_deref())
            .any(|p| !p.sched_held.is_empty())
    }

    /// Whether the wake path's events (held back by a light session) are being recorded now.
    pub fn sched_events_on(&self) -> bool {
        self.sched_on.last().is_some_and(|r| r.1.is_none())
    }

    /// Whether the wake path's events were on for the whole of `[from_ns, to_ns]`.
    pub fn sched_covers(&self, from_ns: u64, to_ns: u64) -> bool {
        self.sched_on
            .iter()
            .any(|&(a, b)| a <= from_ns && b.is_none_or(|b| to_ns <= b))
    }

    /// How often the wake path's events were turned on, and for how long in all up to `now_ns`.
    pub fn sched_time(&self, now_ns: u64) -> (u64, u64) {
        let on_ns = self
            .sched_on
            .iter()
            .map(|&(a, b)| b.unwrap_or(now_ns).saturating_sub(a))
            .sum();
        (self.sched_on.len() as u64, on_ns)
    }

    /// This instance and the session's others ([`wake`](Self::wake), then the switches' one): read
    /// them all for a CPU's whole trace.
    pub fn parts(&self) -> Vec<&TraceSession> {
        std::iter::once(self)
            .chain(self.wake.as_deref())
            .chain(self.switches.as_deref())
            .collect()
    }

    /// The second instance, holding the [`WAKE_EVENTS`] (none on a kernel without per-instance pid
    /// lists: they are in this one then). Read both for a CPU's whole trace.
    pub fn wake(&self) -> Option<&TraceSession> {
        self.wake.as_deref()
    }

    /// A second session for the network path of a reply ([`super::network`]): on `cpus` (the CPUs
    /// the RT session does not trace), only [`NETWORK_EVENTS`] with their in-kernel filters, into
    /// [`NETWORK_BUFFER_KB_PER_CPU`] rings. Otherwise as [`start`](Self::start); nothing of it runs
    /// on the RT CPUs.
    pub fn start_network(cpus: &[usize], instance_name: &str) -> Result<TraceSession, TraceError> {
        Self::start_in(
            &tracefs_root()?,
            cpus,
            instance_name,
            &NETWORK_EVENTS,
            NETWORK_BUFFER_KB_PER_CPU,
        )
    }

    fn start_in(
        root: &Path,
        cpus: &[usize],
        name: &str,
        events: &[(&'static str, Option<&str>)],
        buffer_kb: u64,
    ) -> Result<TraceSession, TraceError> {
        let instances = root.join("instances");
        match fs::metadata(&instances) {
            Ok(m) if m.is_dir() => {}
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(TraceError::Permission(instances))
            }
            _ => return Err(TraceError::NotMounted(root.to_path_buf())),
        }
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(TraceError::Io(
                instances.join(name),
                std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad instance name"),
            ));
        }
        let online = crate::rt::sched::online_cpus().unwrap_or_default();
        if cpus.is_empty()
            || cpus
                .iter()
                .any(|c| !online.is_empty() && !online.contains(c))
        {
            return Err(TraceError::BadCpus(format!(
                "{cpus:?} (online: {online:?})"
            )));
        }
        reclaim_stale(&instances);
        let dir = instances.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(TraceError::InstanceExists(dir))
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(TraceError::Permission(dir))
            }
            Err(e) => return Err(TraceError::Io(dir, e)),
        }
        // From here on, drop removes the directory whatever fails.
        let mut s = TraceSession {
            dir,
            cpus: cpus.to_vec(),
            missing: Vec::new(),
            started_ns: 0,
            own: Vec::new(),
            wake: None,
            switches: None,
            watched: Vec::new(),
            sched_held: Vec::new(),
            sched_on: Vec::new(),
        };
        s.write("tracing_on", "0")?;
        s.write("trace_clock", "mono")?;
        s.write("tracing_cpumask", &cpumask(cpus))?;
        s.write("options/overwrite", "1")?;
        // Small rings on the CPUs not traced, big ones on the traced.
        s.write("buffer_size_kb", "16")?;
        for c in cpus {
            s.write(
                &format!("per_cpu/cpu{c}/buffer_size_kb"),
                &buffer_kb.to_string(),
            )?;
        }
        for &(ev, filter) in events {
            let enable = format!("events/{ev}/enable");
            if s.dir.join(&enable).exists() {
                if let Some(f) = filter {
                    s.write(&format!("events/{ev}/filter"), f)?;
                }
                s.write(&enable, "1")?;
            } else {
                s.missing.push(ev);
            }
        }
        s.write("trace", "")?;
        s.write("tracing_on", "1")?;
        s.started_ns = crate::rt::clock::now().as_nanos().max(0) as u64;
        Ok(s)
    }

    /// Drops the RT threads `tids`' own periodic wakes in the kernel: the wake instance's
    /// `set_event_notrace_pid` becomes the idle task and `tids` ([`WAKE_EVENTS`]). With a short
    /// period these are most of what the RT CPU records, and each event on the path from the timer
    /// interrupt to the thread running adds to the latency measured.
    ///
    /// A switch is dropped there when both sides are listed, so the switches of `watched` (those of
    /// `tids` whose delays by another RT thread must stay visible: one sharing its CPU with a
    /// faster, higher-priority thread of the same test) are recorded in the third instance, whose
    /// `set_event_pid` lists them: every switch to or from them — two a period, and two each time
    /// the faster thread preempts one — and nothing else. The switch from the faster thread to the
    /// watched one names the delay ("rtapi's own base thread").
    ///
    /// Call again with the whole sets when they change (the lists are replaced). Not for a network
    /// session; on a kernel without per-instance pid lists nothing is dropped.
    pub fn skip_own_wakes(&mut self, tids: &[u32], watched: &[u32]) -> Result<(), TraceError> {
        let sorted = |v: &[u32]| {
            let mut v: Vec<u32> = v.iter().copied().filter(|&t| t != 0).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (own, watched) = (sorted(tids), sorted(watched));
        if own != self.own {
            self.own = own;
            self.apply_notrace(self.sched_events_on())?;
        }
        if watched != self.watched {
            self.watched = watched;
            self.apply_switches(self.sched_events_on())?;
        }
        Ok(())
    }

    /// The wake instance's `set_event_notrace_pid` as `own` and the scheduler's events say: the
    /// idle task and `own` while they are on, empty while they are off. A pid list, notrace or not,
    /// registers the kernel's pid-filter probes on every switch and wakeup (a light session's
    /// timer events are off meanwhile, so nothing needs it).
    fn apply_notrace(&self, on: bool) -> Result<(), TraceError> {
        match &self.wake {
            Some(w) if on => w.write("set_event_notrace_pid", &notrace_pids(&self.own)),
            Some(w) => w.write("set_event_notrace_pid", ""),
            None => Ok(()),
        }
    }

    /// The switch instance as `watched` and the scheduler's events say: its pid list and its
    /// `sched_switch` while they are on and a thread is watched, neither otherwise. A pid list
    /// alone registers the kernel's pid-filter probes on every switch and wakeup, so a light
    /// session's stays empty while they are off.
    fn apply_switches(&self, on: bool) -> Result<(), TraceError> {
        let Some(sw) = &self.switches else {
            return Ok(());
        };
        let enable = "events/sched/sched_switch/enable";
        if on && !self.watched.is_empty() {
            sw.write("set_event_pid", &pid_list(&self.watched))?;
            sw.write(enable, "1")
        } else {
            // An empty pid list traces every task: the event goes first.
            sw.write(enable, "0")?;
            sw.write("set_event_pid", "")
        }
    }

    /// The threads whose switches stay recorded ([`skip_own_wakes`](Self::skip_own_wakes)).
    pub fn watched_threads(&self) -> &[u32] {
        &self.watched
    }

    /// The RT threads whose own wakes are not recorded ([`skip_own_wakes`](Self::skip_own_wakes)).
    pub fn own_threads(&self) -> &[u32] {
        &self.own
    }

    /// CLOCK_MONOTONIC ns when recording started: the ring holds every event since (unless it
    /// overwrote some, see [`overruns`](Self::overruns)).
    pub fn started_ns(&self) -> u64 {
        self.started_ns
    }

    fn write(&self, file: &str, value: &str) -> Result<(), TraceError> {
        let p = self.dir.join(file);
        fs::write(&p, value).map_err(|e| TraceError::Io(p, e))
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CPUs traced.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// The [`EVENTS`] this kernel does not have (not enabled).
    pub fn missing(&self) -> &[&'static str] {
        &self.missing
    }

    /// Stops recording, in both instances (the buffers stay readable until drop).
    pub fn stop(&self) -> Result<(), TraceError> {
        for p in self.parts() {
            p.write("tracing_on", "0")?;
        }
        Ok(())
    }

    /// Events the ring of `cpu` overwrote (`per_cpu/cpuN/stats`, `overrun:`): 0 means it still
    /// holds everything since the session started; `None` if the kernel does not say.
    pub fn overruns(&self, cpu: usize) -> Option<u64> {
        let text = fs::read_to_string(self.dir.join(format!("per_cpu/cpu{cpu}/stats"))).ok()?;
        let own: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("overrun:"))
            .and_then(|v| v.trim().parse().ok())?;
        let mut all = own;
        for p in self.parts().into_iter().skip(1) {
            all += p.overruns(cpu)?;
        }
        Some(all)
    }

    /// The events of `cpu` with `from_ns <= ts_ns <= to_ns` (CLOCK_MONOTONIC ns), read from
    /// `per_cpu/cpuN/trace` — which does not consume them, so windows may overlap or repeat. Read
    /// after [`stop`](Self::stop), or expect the ring to move underneath.
    /// Both instances' events, merged in time order.
    pub fn read_window(&self, cpu: usize, from_ns: u64, to_ns: u64) -> Result<Window, TraceError> {
        let mut out = self.read_own_window(cpu, from_ns, to_ns)?;
        for p in self.parts().into_iter().skip(1) {
            let more = p.read_own_window(cpu, from_ns, to_ns)?;
            out.events.extend(more.events);
            out.skipped += more.skipped;
        }
        in_order(&mut out.events);
        Ok(out)
    }

    fn read_own_window(&self, cpu: usize, from_ns: u64, to_ns: u64) -> Result<Window, TraceError> {
        let p = self.dir.join(format!("per_cpu/cpu{cpu}/trace"));
        let f = fs::File::open(&p).map_err(|e| TraceError::Io(p.clone(), e))?;
        let mut out = Window::default();
        for line in BufReader::new(f).lines() {
            let line = line.map_err(|e| TraceError::Io(p.clone(), e))?;
            match parse_line(&line) {
                Line::Event(e) if e.ts_ns > to_ns => break,
                Line::Event(e) if e.ts_ns >= from_ns => out.events.push(e),
                Line::Event(_) | Line::Header => {}
                Line::Garbage => out.skipped += 1,
            }
        }
        Ok(out)
    }
}

/// One RT CPU's events as they come, kept for a while and cut into windows on demand: what the
/// spike follower reads, from the binary pages ([`RawReader`](super::RawReader)) or from the text
/// ([`PipeReader`]).
pub trait CpuReader: Send {
    /// The CPU it reads.
    fn cpu(&self) -> usize;
    /// Reads what the kernel has for this CPU now (at most `max_bytes`); returns the bytes read.
    fn pump(&mut self, max_bytes: usize) -> Result<usize, TraceError>;
    /// The kept events with `from_ns <= ts_ns <= to_ns`, in time order.
    fn window(&self, from_ns: u64, to_ns: u64) -> Window;
    /// Times the kernel reported events lost (the reader fell behind its ring) so far.
    fn lost_events(&self) -> u64;
    /// Bytes read so far.
    fn bytes_read(&self) -> u64;
    /// Drops what only holds events older than `ts_ns`.
    fn forget_before(&mut self, ts_ns: u64);
    /// What the kept events cover.
    fn coverage(&self) -> Coverage;
}

/// What a [`CpuReader`] has kept and read (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    /// The newest event's time read so far.
    pub latest_ns: Option<u64>,
    /// Since when every event the kernel recorded is kept: the session's start, or the last
    /// [`forget_before`](CpuReader::forget_before). With the RT threads' own wakes dropped a quiet
    /// CPU records little, so the oldest event kept says nothing of this.
    pub covered_from_ns: u64,
    /// When the last [`pump`](CpuReader::pump) that emptied the kernel's ring began: every event
    /// recorded before then has been read (a quiet CPU may have nothing newer to show it).
    pub drained_at_ns: Option<u64>,
}

/// Time-ordered stretches of raw trace data (text chunks, binary pages), each with the time of its
/// first and last event; the store both readers keep.
#[derive(Debug, Default)]
pub struct Stretches {
    items: std::collections::VecDeque<(u64, u64, Vec<u8>)>,
    covered_from_ns: u64,
    drained_at_ns: Option<u64>,
}

impl Stretches {
    /// An empty store of what a reader reads from a session that started recording at
    /// `started_ns`.
    pub fn since(started_ns: u64) -> Stretches {
        Stretches {
            covered_from_ns: started_ns,
            ..Stretches::default()
        }
    }
    /// What it covers ([`Coverage`]).
    pub fn coverage(&self) -> Coverage {
        Coverage {
            latest_ns: self.latest_ns(),
            covered_from_ns: self.covered_from_ns,
            drained_at_ns: self.drained_at_ns,
        }
    }
    /// Since when every event is kept (see [`Coverage::covered_from_ns`]).
    pub fn covered_from_ns(&self) -> u64 {
        self.covered_from_ns
    }
    /// When the last read that emptied the kernel's ring began (see [`Coverage::drained_at_ns`]).
    pub fn drained_at_ns(&self) -> Option<u64> {
        self.drained_at_ns
    }
    /// Notes that a read begun at `ts_ns` emptied the kernel's ring.
    pub fn drained_at(&mut self, ts_ns: u64) {
        self.drained_at_ns = Some(ts_ns);
    }
    /// Appends a stretch whose events run from `first_ns` to `last_ns`.
    pub fn push(&mut self, first_ns: u64, last_ns: u64, data: Vec<u8>) {
        self.items.push_back((first_ns, last_ns, data));
    }
    /// The newest event's time.
    pub fn latest_ns(&self) -> Option<u64> {
        self.items.back().map(|s| s.1)
    }
    /// The oldest event's time.
    pub fn oldest_ns(&self) -> Option<u64> {
        self.items.front().map(|s| s.0)
    }
    /// Drops the stretches whose events are all older than `ts_ns`.
    pub fn forget_before(&mut self, ts_ns: u64) {
        while self.items.front().is_some_and(|s| s.1 < ts_ns) {
            self.items.pop_front();
        }
        self.covered_from_ns = self.covered_from_ns.max(ts_ns);
    }
    /// The stretches with an event in `[from_ns, to_ns]`, oldest first.
    pub fn overlapping(&self, from_ns: u64, to_ns: u64) -> impl Iterator<Item = &[u8]> {
        self.items
            .iter()
            .filter(move |s| s.1 >= from_ns && s.0 <= to_ns)
            .map(|s| s.2.as_slice())
    }
}

/// One CPU's events consumed as they come from `per_cpu/cpuN/trace_pipe` (non-blocking), the text of
/// the last [`keep`](Self::forget_before) kept in memory and cut into windows on demand. Reading the
/// pipe frees the kernel's ring as it goes, so a long run is followed from its start; parsing is
/// done only for the windows asked for.
#[derive(Debug)]
pub struct PipeReader {
    cpu: usize,
    path: PathBuf,
    file: fs::File,
    /// The end of the last read, up to its last complete line.
    partial: Vec<u8>,
    chunks: Stretches,
    lost_events: u64,
    bytes: u64,
}

/// The timestamp of the first (`rev` false) or last event line in `text` that parses.
fn edge_ts(text: &str, rev: bool) -> Option<u64> {
    let ts = |l: &str| match parse_line(l) {
        Line::Event(e) => Some(e.ts_ns),
        _ => None,
    };
    if rev {
        text.lines().rev().find_map(ts)
    } else {
        text.lines().find_map(ts)
    }
}

/// `CPU:1 [LOST 1234 EVENTS]`: events the kernel dropped because the reader fell behind.
fn lost_in(text: &str) -> u64 {
    text.match_indices("[LOST ")
        .filter_map(|(i, _)| {
            text[i + 6..]
                .split(' ')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

impl PipeReader {
    /// Opens `per_cpu/cpu<cpu>/trace_pipe` of `session`, non-blocking.
    pub fn open(session: &TraceSession, cpu: usize) -> Result<PipeReader, TraceError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = session.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe"));
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| TraceError::Io(path.clone(), e))?;
        Ok(PipeReader {
            cpu,
            path,
            file,
            partial: Vec::new(),
            chunks: Stretches::since(session.started_ns()),
            lost_events: 0,
            bytes: 0,
        })
    }
}

impl CpuReader for PipeReader {
    /// The CPU it reads.
    fn cpu(&self) -> usize {
        self.cpu
    }

    /// Reads what the kernel has for this CPU now (at most `max_bytes`); returns the bytes read.
    fn pump(&mut self, max_bytes: usize) -> Result<usize, TraceError> {
        use std::io::Read;
        let mut buf = vec![0u8; 1 << 20];
        let mut got = 0;
        let began = crate::rt::clock::now().as_nanos().max(0) as u64;
        while got < max_bytes {
            let n = match self.file.read(&mut buf) {
                Ok(0) => {
                    self.chunks.drained_at(began);
                    break;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.chunks.drained_at(began);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(TraceError::Io(self.path.clone(), e)),
            };
            got += n;
            self.partial.extend_from_slice(&buf[..n]);
            let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
                continue;
            };
            let rest = self.partial.split_off(end + 1);
            let whole = std::mem::replace(&mut self.partial, rest);
            let text = String::from_utf8_lossy(&whole).into_owned();
            self.lost_events += lost_in(&text);
            if let (Some(first_ns), Some(last_ns)) = (edge_ts(&text, false), edge_ts(&text, true)) {
                self.chunks.push(first_ns, last_ns, text.into_bytes());
            }
        }
        self.bytes += got as u64;
        Ok(got)
    }

    /// Events the kernel reported lost (the reader fell behind its ring) so far.
    fn lost_events(&self) -> u64 {
        self.lost_events
    }

    /// Bytes of trace text read so far.
    fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Drops the text of events older than `ts_ns`.
    fn forget_before(&mut self, ts_ns: u64) {
        self.chunks.forget_before(ts_ns);
    }

    /// The kept events with `from_ns <= ts_ns <= to_ns`, in time order.
    fn window(&self, from_ns: u64, to_ns: u64) -> Window {
        let mut out = Window::default();
        for c in self.chunks.overlapping(from_ns, to_ns) {
            for line in String::from_utf8_lossy(c).lines() {
                match parse_line(line) {
                    Line::Event(e) if e.ts_ns > to_ns => break,
                    Line::Event(e) if e.ts_ns >= from_ns => out.events.push(e),
                    Line::Event(_) | Line::Header => {}
                    Line::Garbage if line.contains("[LOST ") => {}
                    Line::Garbage => out.skipped += 1,
                }
            }
        }
        out
    }

    fn coverage(&self) -> Coverage {
        self.chunks.coverage()
    }
}

/// One CPU's readers of both of a session's instances ([`TraceSession::wake`]) as one: pumped
/// together, windows merged in time order, coverage what both have.
pub struct MergedReader {
    parts: Vec<Box<dyn CpuReader>>,
}

impl MergedReader {
    /// `parts` read the same CPU; the first is what [`CpuReader::kept`] shows.
    pub fn new(parts: Vec<Box<dyn CpuReader>>) -> MergedReader {
        assert!(!parts.is_empty(), "a merged reader of nothing");
        MergedReader { parts }
    }
}

impl CpuReader for MergedReader {
    fn cpu(&self) -> usize {
        self.parts[0].cpu()
    }

    fn pump(&mut self, max_bytes: usize) -> Result<usize, TraceError> {
        let mut got = 0;
        for p in &mut self.parts {
            got += p.pump(max_bytes)?;
        }
        Ok(got)
    }

    fn window(&self, from_ns: u64, to_ns: u64) -> Window {
        let mut out = Window::default();
        for p in &self.parts {
            let w = p.window(from_ns, to_ns);
            out.events.extend(w.events);
            out.skipped += w.skipped;
        }
        in_order(&mut out.events);
        out
    }

    fn lost_events(&self) -> u64 {
        self.parts.iter().map(|p| p.lost_events()).sum()
    }

    fn bytes_read(&self) -> u64 {
        self.parts.iter().map(|p| p.bytes_read()).sum()
    }

    fn forget_before(&mut self, ts_ns: u64) {
        for p in &mut self.parts {
            p.forget_before(ts_ns);
        }
    }

    /// The newest event of any part; everything since the latest part's coverage start; every
    /// part's ring emptied by the earliest of their last drains.
    fn coverage(&self) -> Coverage {
        let parts: Vec<Coverage> = self.parts.iter().map(|p| p.coverage()).collect();
        Coverage {
            latest_ns: parts.iter().filter_map(|c| c.latest_ns).max(),
            covered_from_ns: parts.iter().map(|c| c.covered_from_ns).max().unwrap_or(0),
            drained_at_ns: parts.iter().map(|c| c.drained_at_ns).min().flatten(),
        }
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        let _ = self.write("tracing_on", "0");
        // rmdir of an instance disables its events and frees its buffers.
        if let Err(e) = fs::remove_dir(&self.dir) {
            log::warn!("trace instance {} not removed: {e}", self.dir.display());
        }
    }
}

/// Where tracefs is (see [`TraceSession::start`]), mounting it if needed.
pub fn tracefs_root() -> Result<PathBuf, TraceError> {
    if let Some(p) = std::env::var_os("RTAPI_TRACEFS") {
        return Ok(PathBuf::from(p));
    }
    let has = |p: &str| Path::new(p).join("instances").is_dir();
    for p in [TRACEFS, "/sys/kernel/debug/tracing"] {
        if has(p) {
            return Ok(PathBuf::from(p));
        }
    }
    let target = std::ffi::CString::new(TRACEFS).expect("no NUL in a constant path");
    let fstype = c"tracefs";
    let source = c"nodev";
    // SAFETY: three valid NUL-terminated strings that outlive the call and a null data pointer (no
    // options); mount(2) only reads them.
    let r = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r == 0 && has(TRACEFS) {
        log::info!("mounted tracefs at {TRACEFS}");
        return Ok(PathBuf::from(TRACEFS));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            Err(TraceError::Permission(PathBuf::from(TRACEFS)))
        }
        _ => Err(TraceError::NotMounted(PathBuf::from(TRACEFS))),
    }
}

/// `tracing_cpumask` text: hex, comma-separated 32-bit groups, most significant first.
fn cpumask(cpus: &[usize]) -> String {
    let max = cpus.iter().copied().max().unwrap_or(0);
    let mut words = vec![0u32; max / 32 + 1];
    for &c in cpus {
        words[c / 32] |= 1 << (c % 32);
    }
    words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpumasks() {
        assert_eq!(cpumask(&[1]), "00000002");
        assert_eq!(cpumask(&[0, 3]), "00000009");
        assert_eq!(cpumask(&[33]), "00000002,00000000");
    }

    #[test]
    fn the_notrace_list_names_the_idle_task_and_every_rt_thread() {
        assert_eq!(notrace_pids(&[7, 9]), "0 7 9");
        assert_eq!(notrace_pids(&[]), "0");
    }

    /// A quiet CPU's reader: coverage is the session's start, then what was forgotten, whatever the
    /// oldest event kept.
    #[test]
    fn coverage_does_not_wait_for_an_event() {
        let mut s = Stretches::since(100);
        assert_eq!((s.covered_from_ns(), s.oldest_ns()), (100, None));
        s.push(5_000, 6_000, vec![1]);
        assert_eq!((s.covered_from_ns(), s.oldest_ns()), (100, Some(5_000)));
        s.forget_before(3_000);
        assert_eq!(
            s.covered_from_ns(),
            3_000,
            "forgetting nothing still moves coverage"
        );
        assert_eq!(s.oldest_ns(), Some(5_000));
        s.forget_before(7_000);
        assert_eq!((s.covered_from_ns(), s.oldest_ns()), (7_000, None));
        assert_eq!(s.drained_at_ns(), None);
        s.drained_at(8_000);
        assert_eq!(s.drained_at_ns(), Some(8_000));
    }

    #[test]
    fn no_tracefs_is_refused_with_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let e = TraceSession::start_in(d.path(), &[0], "x", &[], 16).unwrap_err();
        assert!(matches!(e, TraceError::NotMounted(_)));
        assert!(e.to_string().contains("mount -t tracefs nodev"), "{e}");
        assert!(TraceError::Permission(d.path().into())
            .to_string()
            .contains("root"));
    }

    #[test]
    fn instances_of_processes_that_are_gone_are_removed() {
        let d = tempfile::tempdir().unwrap();
        let inst = d.path().join("instances");
        // 999999999 is above the kernel's pid_max (at most 2^22): never a live process.
        for n in [
            "rtapi-999999999",
            "rtapi-999999999-wake",
            "rtapi-1",
            "rtapi-1-wake",
            "rtapi-x",
            "someone-else-999999999",
        ] {
            fs::create_dir_all(inst.join(n)).unwrap();
        }
        reclaim_stale(&inst);
        let mut left: Vec<String> = fs::read_dir(&inst)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "rtapi-1",
                "rtapi-1-wake",
                "rtapi-x",
                "someone-else-999999999"
            ]
        );
    }

    /// In a PID namespace other than the initial one, only that namespace's instances are judged:
    /// the host's `rtapi-<pid>` (a pid this namespace cannot see) and another namespace's are left.
    #[test]
    fn another_pid_namespaces_instances_are_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let inst = d.path().join("instances");
        for n in [
            "rtapi-999999999",
            "rtapi-999999999-pidns4026532001",
            "rtapi-999999999-pidns4026532002",
            "rtapi-1-pidns4026532001",
        ] {
            fs::create_dir_all(inst.join(n)).unwrap();
        }
        reclaim_stale_in(&inst, Some(4026532001));
        let mut left: Vec<String> = fs::read_dir(&inst)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "rtapi-1-pidns4026532001",
                "rtapi-999999999",
                "rtapi-999999999-pidns4026532002"
            ]
        );
        // ... and the initial namespace's judge leaves every namespaced one.
        reclaim_stale_in(&inst, None);
        assert_eq!(fs::read_dir(&inst).unwrap().count(), 2);
        assert_eq!(pid_of_instance("rtapi-42", None), Some(42));
        assert_eq!(pid_of_instance("rtapi-42-pidns7", Some(7)), Some(42));
        assert_eq!(pid_of_instance("rtapi-42-pidns7", None), None);
        assert_eq!(pid_of_instance("rtapi-42-pidns7-wake", Some(7)), Some(42));
        assert_eq!(pid_of_instance("rtapi-42-wake", None), Some(42));
        assert_eq!(pid_of_instance("rtapi-42", Some(7)), None);
        assert!(!TraceSession::name_for(42).is_empty());
    }
}
