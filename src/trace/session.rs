//! A tracefs instance of our own: created with `mkdir`, configured, removed on drop. The global
//! buffer (and any other tool's instance) is never touched.

use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use super::parse::{parse_line, Event, Line};

/// Where tracefs is mounted on current kernels.
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// The events a session enables, `system/event`, when the kernel has them.
pub const EVENTS: [&str; 20] = [
    "sched/sched_switch",
    "sched/sched_wakeup",
    "sched/sched_wakeup_new",
    "sched/sched_waking",
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
    "timer/hrtimer_expire_exit",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
];

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

/// A running trace of some CPUs in a tracefs instance of its own; stopped and removed on drop.
#[derive(Debug)]
pub struct TraceSession {
    dir: PathBuf,
    cpus: Vec<usize>,
    missing: Vec<&'static str>,
}

impl TraceSession {
    /// The instance name this process uses by default: `rtapi-<pid>`.
    pub fn default_name() -> String {
        format!("rtapi-{}", std::process::id())
    }

    /// Creates `instances/<instance_name>` under tracefs, with trace_clock `mono` (timestamps are
    /// CLOCK_MONOTONIC, as [`crate::rt::clock::now`]), tracing only `cpus`, a
    /// [`BUFFER_KB_PER_CPU`] overwriting ring on each of them, and the [`EVENTS`] this kernel has
    /// ([`missing`](Self::missing) lists the others), and starts tracing.
    pub fn start(cpus: &[usize], instance_name: &str) -> Result<TraceSession, TraceError> {
        Self::start_in(Path::new(TRACEFS), cpus, instance_name)
    }

    fn start_in(root: &Path, cpus: &[usize], name: &str) -> Result<TraceSession, TraceError> {
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
                &BUFFER_KB_PER_CPU.to_string(),
            )?;
        }
        for ev in EVENTS {
            let enable = format!("events/{ev}/enable");
            if s.dir.join(&enable).exists() {
                s.write(&enable, "1")?;
            } else {
                s.missing.push(ev);
            }
        }
        s.write("trace", "")?;
        s.write("tracing_on", "1")?;
        Ok(s)
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

    /// Stops recording (the buffer stays readable until drop).
    pub fn stop(&self) -> Result<(), TraceError> {
        self.write("tracing_on", "0")
    }

    /// The events of `cpu` with `from_ns <= ts_ns <= to_ns` (CLOCK_MONOTONIC ns), read from
    /// `per_cpu/cpuN/trace` — which does not consume them, so windows may overlap or repeat. Read
    /// after [`stop`](Self::stop), or expect the ring to move underneath.
    pub fn read_window(&self, cpu: usize, from_ns: u64, to_ns: u64) -> Result<Window, TraceError> {
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

impl Drop for TraceSession {
    fn drop(&mut self) {
        let _ = self.write("tracing_on", "0");
        // rmdir of an instance disables its events and frees its buffers.
        if let Err(e) = fs::remove_dir(&self.dir) {
            log::warn!("trace instance {} not removed: {e}", self.dir.display());
        }
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
    fn no_tracefs_is_refused_with_the_fix() {
        let d = tempfile::tempdir().unwrap();
        let e = TraceSession::start_in(d.path(), &[0], "x").unwrap_err();
        assert!(matches!(e, TraceError::NotMounted(_)));
        assert!(e.to_string().contains("mount -t tracefs nodev"), "{e}");
        assert!(TraceError::Permission(d.path().into())
            .to_string()
            .contains("root"));
    }
}
