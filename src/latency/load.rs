//! Built-in machine load for the latency test: ordinary (SCHED_OTHER) workers on every CPU that keep
//! the caches, memory bus and block layer busy while the RT threads are measured, or stress-ng when the
//! user asks for it. Every worker is stopped and joined (or killed and reaped) before [`Load`] is dropped.

use std::fmt;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadKind {
    /// Tight integer and floating-point arithmetic.
    Cpu,
    /// Streaming copies over a buffer larger than the last-level cache.
    Mem,
    /// Writes followed by fsync in a temporary directory.
    Io,
    /// `stress-ng` with these arguments.
    StressNg(Vec<String>),
}

impl fmt::Display for LoadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadKind::Cpu => f.write_str("cpu"),
            LoadKind::Mem => f.write_str("mem"),
            LoadKind::Io => f.write_str("io"),
            LoadKind::StressNg(args) => write!(f, "stress-ng:{}", args.join(" ")),
        }
    }
}

/// Parses `--load`: `cpu,mem,io` (any subset), or `stress-ng:ARGS` (ARGS split on spaces).
pub fn parse(spec: &str) -> Result<Vec<LoadKind>, String> {
    if let Some(args) = spec.strip_prefix("stress-ng:") {
        let args: Vec<String> = args.split_whitespace().map(str::to_string).collect();
        if args.is_empty() {
            return Err("--load stress-ng: needs stress-ng arguments, e.g. --load 'stress-ng:--cpu 2 --io 1'".into());
        }
        return Ok(vec![LoadKind::StressNg(args)]);
    }
    let mut kinds = Vec::new();
    for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let kind = match word {
            "cpu" => LoadKind::Cpu,
            "mem" => LoadKind::Mem,
            "io" => LoadKind::Io,
            other => {
                return Err(format!(
                    "unknown load '{other}': use any of cpu,mem,io (e.g. --load cpu,mem,io) or stress-ng:ARGS"
                ))
            }
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

/// Running load. Dropping it stops everything.
pub struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    child: Option<Child>,
    tempdir: Option<std::path::PathBuf>,
}

impl Load {
    /// Starts `kinds` on every CPU of `cpus` (one worker of each kind per CPU, pinned to it).
    pub fn start(kinds: &[LoadKind], cpus: &[usize]) -> Result<Load, String> {
        let mut load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            workers: Vec::new(),
            child: None,
            tempdir: None,
        };
        for kind in kinds {
            match kind {
                LoadKind::StressNg(args) => load.child = Some(spawn_stress_ng(args)?),
                LoadKind::Io => {
                    let dir =
                        std::env::temp_dir().join(format!("rtapi-load-{}", std::process::id()));
                    std::fs::create_dir_all(&dir)
                        .map_err(|e| format!("io load: {}: {e}", dir.display()))?;
                    load.tempdir = Some(dir.clone());
                    for &i in cpus {
                        let (stop, path) = (load.stop.clone(), dir.join(format!("worker-{i}")));
                        load.spawn(&format!("load-io-{i}"), i, move || io_worker(&stop, &path))?;
                    }
                }
                LoadKind::Cpu => {
                    for &i in cpus {
                        let stop = load.stop.clone();
                        load.spawn(&format!("load-cpu-{i}"), i, move || cpu_worker(&stop))?;
                    }
                }
                LoadKind::Mem => {
                    let bytes = mem_buffer_bytes();
                    for &i in cpus {
                        let stop = load.stop.clone();
                        load.spawn(&format!("load-mem-{i}"), i, move || {
                            mem_worker(&stop, bytes)
                        })?;
                    }
                }
            }
        }
        Ok(load)
    }

    fn spawn(
        &mut self,
        name: &str,
        cpu: usize,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<(), String> {
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                // The load belongs on every CPU, the RT ones included, whatever the caller's affinity.
                let _ = crate::rt::sched::set_current_affinity(&[cpu]);
                f()
            })
            .map_err(|e| format!("cannot start load worker {name}: {e}"))?;
        self.workers.push(handle);
        Ok(())
    }

    /// Number of worker threads plus the stress-ng child, if any.
    pub fn workers(&self) -> usize {
        self.workers.len() + usize::from(self.child.is_some())
    }

    /// Stops and joins every worker, ends stress-ng (its whole process group) and removes the temp dir.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(mut child) = self.child.take() {
            stop_process_group(&mut child);
        }
        if let Some(dir) = self.tempdir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop();
    }
}

fn cpu_worker(stop: &AtomicBool) {
    let (mut x, mut y) = (1u64, 1.000_001f64);
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            y = y * 1.000_000_1 + (x >> 40) as f64 * 1e-12;
        }
        std::hint::black_box((x, y));
    }
}

/// Four times the last-level cache, at least 32 MiB: large enough that every pass goes to memory.
fn mem_buffer_bytes() -> usize {
    let llc = (0..8)
        .filter_map(|i| {
            std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size"))
                .ok()
        })
        .filter_map(|s| {
            let s = s.trim();
            let (n, mult) = match s.strip_suffix('K') {
                Some(n) => (n, 1024),
                None => match s.strip_suffix('M') {
                    Some(n) => (n, 1 << 20),
                    None => (s, 1),
                },
            };
            n.parse::<usize>().ok().map(|n| n * mult)
        })
        .max()
        .unwrap_or(8 << 20);
    (4 * llc).max(32 << 20)
}

fn mem_worker(stop: &AtomicBool, bytes: usize) {
    let half = bytes / 2;
    let mut buf = vec![1u8; bytes];
    while !stop.load(Ordering::Relaxed) {
        let (a, b) = buf.split_at_mut(half);
        b[..half].copy_from_slice(a);
        a.copy_from_slice(&b[..half]);
        std::hint::black_box(&buf);
    }
}

fn io_worker(stop: &AtomicBool, path: &std::path::Path) {
    let block = vec![0x5au8; 256 << 10];
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut f) = std::fs::File::create(path) else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        for _ in 0..16 {
            if stop.load(Ordering::Relaxed) || f.write_all(&block).is_err() {
                break;
            }
        }
        let _ = f.sync_all();
    }
    let _ = std::fs::remove_file(path);
}

fn spawn_stress_ng(args: &[String]) -> Result<Child, String> {
    let mut cmd = Command::new("stress-ng");
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe calls:
    // a new process group (so stop() can end stress-ng's own workers too) and a parent-death signal
    // (so stress-ng never outlives an rtapi that was killed).
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "stress-ng is not installed: apt-get install stress-ng, or use the built-in --load cpu,mem,io".to_string()
        } else {
            format!("cannot start stress-ng: {e}")
        }
    })
}

/// SIGTERM to the whole group, a grace period, then SIGKILL; always reaps the child.
fn stop_process_group(child: &mut Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill with a negative pid signals the process group we created in pre_exec; no memory
    // is involved.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    for _ in 0..50 {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above; the group may already be gone, which kill reports as ESRCH and we ignore.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_stress_ng() {
        assert_eq!(
            parse("cpu,mem,io").unwrap(),
            vec![LoadKind::Cpu, LoadKind::Mem, LoadKind::Io]
        );
        assert_eq!(
            parse("io, cpu,cpu").unwrap(),
            vec![LoadKind::Io, LoadKind::Cpu]
        );
        assert_eq!(parse("").unwrap(), vec![]);
        assert_eq!(
            parse("stress-ng:--cpu 2 --io 1").unwrap(),
            vec![LoadKind::StressNg(vec![
                "--cpu".into(),
                "2".into(),
                "--io".into(),
                "1".into()
            ])]
        );
        assert!(parse("gpu").unwrap_err().contains("cpu,mem,io"));
        assert!(parse("stress-ng:").is_err());
    }

    /// Threads of this process whose name starts with `load-` (only this module names threads so).
    fn load_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.starts_with("load-"))
            .count()
    }

    #[test]
    fn builtin_workers_start_and_all_stop() {
        let dir;
        {
            let load = Load::start(&[LoadKind::Cpu, LoadKind::Mem, LoadKind::Io], &[0, 1]).unwrap();
            assert_eq!(load.workers(), 6);
            dir = load.tempdir.clone().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(load_threads(), 6);
            assert!(dir.exists());
        }
        assert_eq!(load_threads(), 0, "every worker joined");
        assert!(!dir.exists(), "io load leaves no files behind");
    }
}
