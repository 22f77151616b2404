//! Built-in machine load for the latency test: ordinary (SCHED_OTHER) workers on every CPU that keep
//! the caches, memory bus and block layer busy while the RT threads are measured, or stress-ng when the
//! user asks for it. Every worker is stopped and joined (or killed and reaped) before [`Load`] is dropped.
//! A worker that fails, or stress-ng ending before the run does, is recorded as a [`LoadFailure`] for
//! the report: a run whose load failed is not evidence of behaviour under load.

use serde::Serialize;
use std::fmt;
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LoadKind {
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

/// Why a load cannot run, or why one of its workers stopped.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// `--load stress-ng:` without arguments.
    NoStressNgArgs,
    /// A `--load` word that names no load.
    Unknown(String),
    /// stress-ng is not on `PATH`.
    NoStressNg,
    /// stress-ng could not be started.
    StressNgSpawn(std::io::Error),
    /// `stress-ng --dry-run` refused the arguments: its exit status and the end of its standard error.
    StressNgRefused {
        /// The `--load` item.
        kind: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The last lines it wrote to its standard error.
        stderr: String,
    },
    /// The io workers' private directory could not be made.
    PrivateDir {
        /// The `mkdtemp` template.
        template: PathBuf,
        /// Why.
        errno: nix::errno::Errno,
    },
    /// A worker thread could not be started.
    Thread {
        /// The worker's name.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// An io worker's file operation failed.
    File {
        /// `create`, `write` or `remove`.
        verb: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NoStressNgArgs => f.write_str(
                "--load stress-ng: needs stress-ng arguments, e.g. --load 'stress-ng:--cpu 2 --io 1'",
            ),
            LoadError::Unknown(word) => write!(
                f,
                "unknown load '{word}': use any of cpu,mem,io (e.g. --load cpu,mem,io) or stress-ng:ARGS"
            ),
            LoadError::NoStressNg => f.write_str(
                "stress-ng is not installed: apt-get install stress-ng, or use the built-in --load cpu,mem,io",
            ),
            LoadError::StressNgSpawn(e) => write!(f, "cannot start stress-ng: {e}"),
            LoadError::StressNgRefused {
                kind,
                status,
                stderr,
            } => write!(
                f,
                "--load {kind}: stress-ng refuses these arguments ({status}): {stderr}"
            ),
            LoadError::PrivateDir { template, errno } => write!(
                f,
                "--load io: cannot create a private directory {}: {errno}",
                template.display()
            ),
            LoadError::Thread { name, source } => {
                write!(f, "cannot start load worker {name}: {source}")
            }
            LoadError::File { verb, path, source } => {
                write!(f, "cannot {verb} {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Parses `--load`: `cpu,mem,io` (any subset), or `stress-ng:ARGS` (ARGS split on spaces).
pub(crate) fn parse(spec: &str) -> Result<Vec<LoadKind>, LoadError> {
    if let Some(args) = spec.strip_prefix("stress-ng:") {
        let args: Vec<String> = args.split_whitespace().map(str::to_string).collect();
        if args.is_empty() {
            return Err(LoadError::NoStressNgArgs);
        }
        return Ok(vec![LoadKind::StressNg(args)]);
    }
    let mut kinds = Vec::new();
    for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let kind = match word {
            "cpu" => LoadKind::Cpu,
            "mem" => LoadKind::Mem,
            "io" => LoadKind::Io,
            other => return Err(LoadError::Unknown(other.to_string())),
        };
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    Ok(kinds)
}

/// A load that stopped working before the run ended: it was not loading the machine for the rest of
/// the measurement, so the numbers are not "under load".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LoadFailure {
    /// The `--load` item (`io`, `stress-ng:ARGS`, …) and, for built-in workers, the worker.
    pub(crate) load: String,
    /// Seconds since the test started.
    pub(crate) at_s: f64,
    /// What happened: an exit status, an I/O error, …
    pub(crate) what: String,
    /// The last lines stress-ng wrote to its standard error.
    pub(crate) stderr_tail: Option<String>,
}

impl fmt::Display for LoadFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "load {} failed (seen at {:.1} s): {}",
            self.load, self.at_s, self.what
        )?;
        if let Some(tail) = self.stderr_tail.as_deref().filter(|t| !t.is_empty()) {
            let last = tail.lines().last().unwrap_or_default();
            write!(f, " ({last})")?;
        }
        Ok(())
    }
}

/// Checks, before anything runs, that the load can start: stress-ng exists and accepts the arguments
/// (`--dry-run`), and a private directory for the io workers can be created.
pub(crate) fn preflight(kinds: &[LoadKind]) -> Result<(), LoadError> {
    for kind in kinds {
        match kind {
            LoadKind::StressNg(args) => {
                let out = Command::new("stress-ng")
                    .args(args)
                    .arg("--dry-run")
                    .stdin(Stdio::null())
                    .output()
                    .map_err(stress_ng_spawn_error)?;
                if !out.status.success() {
                    return Err(LoadError::StressNgRefused {
                        kind: kind.to_string(),
                        status: out.status,
                        stderr: tail(&out.stderr),
                    });
                }
            }
            LoadKind::Io => {
                TempDir::new()?;
            }
            LoadKind::Cpu | LoadKind::Mem => {}
        }
    }
    Ok(())
}

/// A directory this process created itself (`mkdtemp`: `rtapi-load-<pid>-` and a fresh random name,
/// mode 0700, under `$TMPDIR` or `/tmp`), removed with everything in it when dropped — also when the
/// run ends by a signal or an error. Nobody else can plant a file or a symlink in it. A run that was
/// SIGKILLed cannot remove its own: the next one does ([`sweep_stale`]).
pub(crate) struct TempDir(PathBuf);

const TEMP_PREFIX: &str = "rtapi-load-";

/// Removes the io directories of earlier runs whose process is gone (SIGKILLed, or the machine lost
/// power): a directory named `rtapi-load-<pid>-…` in `dir`, a real directory (not a symlink) owned
/// by this user with mode 0700 — what [`TempDir::new`] makes — whose pid is no running process.
/// Anything else there is left alone. Returns the directories removed.
pub(crate) fn sweep_stale(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let me = nix::unistd::geteuid().as_raw();
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
            .filter(|&p| p > 0)
        else {
            continue;
        };
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let ours = meta.file_type().is_dir()
            && meta.uid() == me
            && meta.permissions().mode() & 0o777 == 0o700;
        // kill(pid, 0): ESRCH is the only answer that says the process is gone.
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if ours && gone && std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
    }
    removed
}

impl TempDir {
    pub(crate) fn new() -> Result<TempDir, LoadError> {
        for stale in sweep_stale(&std::env::temp_dir()) {
            log::info!(
                "removed {}, left by an earlier run that was killed",
                stale.display()
            );
        }
        let template =
            std::env::temp_dir().join(format!("{TEMP_PREFIX}{}-XXXXXX", std::process::id()));
        nix::unistd::mkdtemp(&template)
            .map(TempDir)
            .map_err(|errno| LoadError::PrivateDir { template, errno })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // remove_dir_all does not follow symlinks.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Worker {
    name: String,
    load: String,
    handle: Option<JoinHandle<Result<(), LoadError>>>,
}

struct StressNg {
    spec: String,
    child: Child,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// Running load. Dropping it stops everything.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<Worker>,
    child: Option<StressNg>,
    tempdir: Option<TempDir>,
    failures: Vec<LoadFailure>,
    /// Test time at start, and when the load started: failures are timed on the test's clock.
    offset: Duration,
    started: Instant,
}

/// Load threads need little stack (their buffers are on the heap); under `mlockall` every stack page
/// is locked, so they get a small one.
const WORKER_STACK: usize = 128 << 10;

/// How long stress-ng must stay alive after its start before the run counts as loaded.
const STRESS_NG_SETTLE: Duration = Duration::from_millis(200);

impl Load {
    /// Starts `kinds` on every CPU of `cpus` (one worker of each kind per CPU, pinned to it). `at` is
    /// the test's elapsed time, for the timestamps of failures. A load that cannot start or dies at once
    /// is reported by [`Load::poll`] / [`Load::stop`], not here; only a setup error fails the start.
    pub(crate) fn start(
        kinds: &[LoadKind],
        cpus: &[usize],
        at: Duration,
    ) -> Result<Load, LoadError> {
        let mut load = Load {
            stop: Arc::new(AtomicBool::new(false)),
            workers: Vec::new(),
            child: None,
            tempdir: None,
            failures: Vec::new(),
            offset: at,
            started: Instant::now(),
        };
        for kind in kinds {
            match kind {
                LoadKind::StressNg(_) => load.child = Some(spawn_stress_ng(kind)?),
                LoadKind::Io => {
                    let dir = TempDir::new()?;
                    for &i in cpus {
                        let (stop, path) =
                            (load.stop.clone(), dir.path().join(format!("worker-{i}")));
                        load.spawn("io", &format!("load-io-{i}"), i, move || {
                            io_worker(&stop, &path)
                        })?;
                    }
                    load.tempdir = Some(dir);
                }
                LoadKind::Cpu => {
                    for &i in cpus {
                        let stop = load.stop.clone();
                        load.spawn("cpu", &format!("load-cpu-{i}"), i, move || {
                            cpu_worker(&stop);
                            Ok(())
                        })?;
                    }
                }
                LoadKind::Mem => {
                    let bytes = mem_buffer_bytes();
                    for &i in cpus {
                        let stop = load.stop.clone();
                        load.spawn("mem", &format!("load-mem-{i}"), i, move || {
                            mem_worker(&stop, bytes);
                            Ok(())
                        })?;
                    }
                }
            }
        }
        if load.child.is_some() {
            std::thread::sleep(STRESS_NG_SETTLE);
        }
        load.poll();
        Ok(load)
    }

    fn spawn(
        &mut self,
        load: &str,
        name: &str,
        cpu: usize,
        f: impl FnOnce() -> Result<(), LoadError> + Send + 'static,
    ) -> Result<(), LoadError> {
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .stack_size(WORKER_STACK)
            .spawn(move || {
                // The load belongs on every CPU, the RT ones included, whatever the caller's affinity.
                let _ = crate::rt::sched::set_current_affinity(&[cpu]);
                f()
            })
            .map_err(|source| LoadError::Thread {
                name: name.to_string(),
                source,
            })?;
        self.workers.push(Worker {
            name: name.to_string(),
            load: load.to_string(),
            handle: Some(handle),
        });
        Ok(())
    }

    /// Number of worker threads plus the stress-ng child, if any.
    #[cfg(test)]
    pub(crate) fn workers(&self) -> usize {
        self.workers.len() + usize::from(self.child.is_some())
    }

    /// The private directory of the io workers, if any.
    #[cfg(test)]
    pub(crate) fn io_dir(&self) -> Option<&Path> {
        self.tempdir.as_ref().map(TempDir::path)
    }

    fn now_s(&self) -> f64 {
        (self.offset + self.started.elapsed()).as_secs_f64()
    }

    /// Records every worker or stress-ng process that has ended since the last call: while the load
    /// is meant to run, any end is a failure.
    pub(crate) fn poll(&mut self) -> &[LoadFailure] {
        let at_s = self.now_s();
        for w in &mut self.workers {
            if w.handle.as_ref().is_some_and(JoinHandle::is_finished) {
                let what = match w.handle.take().map(JoinHandle::join) {
                    Some(Ok(Err(e))) => e.to_string(),
                    Some(Err(_)) => "the worker panicked".to_string(),
                    _ => "the worker ended early".to_string(),
                };
                self.failures.push(LoadFailure {
                    load: format!("{} ({})", w.load, w.name),
                    at_s,
                    what,
                    stderr_tail: None,
                });
            }
        }
        if let Some(s) = &mut self.child {
            if let Ok(Some(status)) = s.child.try_wait() {
                // Let the reader take what stress-ng wrote last.
                std::thread::sleep(Duration::from_millis(50));
                let stderr = tail(&s.stderr.lock().unwrap_or_else(|e| e.into_inner()));
                self.failures.push(LoadFailure {
                    load: s.spec.clone(),
                    at_s,
                    what: format!("stress-ng ended before the run did ({status})"),
                    stderr_tail: Some(stderr),
                });
                let mut s = self.child.take().expect("checked above");
                // Its workers, if any are left, go with it.
                stop_process_group(&mut s.child);
            }
        }
        &self.failures
    }

    /// Stops and joins every worker, ends stress-ng (its whole process group), removes the io
    /// directory, and returns every failure seen (also a worker that failed while stopping).
    pub(crate) fn stop(&mut self) -> Vec<LoadFailure> {
        self.poll();
        self.stop.store(true, Ordering::Relaxed);
        let at_s = self.now_s();
        for w in self.workers.drain(..) {
            if let Some(Ok(Err(what))) = w.handle.map(JoinHandle::join) {
                self.failures.push(LoadFailure {
                    load: format!("{} ({})", w.load, w.name),
                    at_s,
                    what: what.to_string(),
                    stderr_tail: None,
                });
            }
        }
        if let Some(mut s) = self.child.take() {
            stop_process_group(&mut s.child);
        }
        self.tempdir = None;
        std::mem::take(&mut self.failures)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last lines of a process's output, at most ten lines and 1000 characters.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut out = lines[lines.len().saturating_sub(10)..].join("\n");
    if out.len() > 1000 {
        let cut = out.len() - 1000;
        let cut = (cut..out.len())
            .find(|&i| out.is_char_boundary(i))
            .unwrap_or(0);
        out = out[cut..].to_string();
    }
    out
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

/// The mem worker's unit of allocation and copy: a stop is seen within one chunk's work.
const MEM_CHUNK: usize = 1 << 20;

/// Copies one half of `bytes` to the other and back, until stopped. The buffer can be GiBs (four
/// times a VM's reported last-level cache) and, under `mlockall(MCL_FUTURE)`, each allocation is
/// faulted in and locked at once: it is allocated and copied in [`MEM_CHUNK`]s, the stop flag checked
/// before each, so a stop ends the worker within one chunk instead of one whole pass (seconds: a
/// stopped latency-test took 4–11 s to exit on a loaded 2-core VM).
fn mem_worker(stop: &AtomicBool, bytes: usize) {
    let stopped = || stop.load(Ordering::Relaxed);
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    for _ in 0..(bytes / MEM_CHUNK).max(2) {
        if stopped() {
            return;
        }
        chunks.push(vec![1u8; MEM_CHUNK]);
    }
    let half = chunks.len() / 2;
    while !stopped() {
        let (a, b) = chunks.split_at_mut(half);
        for (x, y) in a.iter().zip(b.iter_mut()) {
            if stopped() {
                return;
            }
            y.copy_from_slice(x);
        }
        for (x, y) in a.iter_mut().zip(b.iter()) {
            if stopped() {
                return;
            }
            x.copy_from_slice(y);
        }
        std::hint::black_box(&chunks);
    }
}

/// Writes 4 MiB, fsyncs and removes the file, until stopped. The file is always created new
/// (`O_CREAT|O_EXCL|O_NOFOLLOW`): a path that already exists — a file or a symlink somebody planted —
/// is refused, never written through. An error ends the worker and is its result.
pub(crate) fn io_worker(stop: &AtomicBool, path: &Path) -> Result<(), LoadError> {
    let failed = |verb| {
        move |source| LoadError::File {
            verb,
            path: path.to_path_buf(),
            source,
        }
    };
    let block = vec![0x5au8; 256 << 10];
    while !stop.load(Ordering::Relaxed) {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .mode(0o600)
            .open(path)
            .map_err(failed("create"))?;
        let written = (0..16)
            .take_while(|_| !stop.load(Ordering::Relaxed))
            .try_for_each(|_| f.write_all(&block))
            .and_then(|()| f.sync_all());
        drop(f);
        // The file is ours (created above): remove it also after a failed write.
        let removed = std::fs::remove_file(path);
        written.map_err(failed("write"))?;
        removed.map_err(failed("remove"))?;
    }
    Ok(())
}

fn stress_ng_spawn_error(e: std::io::Error) -> LoadError {
    if e.kind() == std::io::ErrorKind::NotFound {
        LoadError::NoStressNg
    } else {
        LoadError::StressNgSpawn(e)
    }
}

/// Starts stress-ng in its own process group; its standard error is kept (the last 4 KiB) for the
/// report.
fn spawn_stress_ng(kind: &LoadKind) -> Result<StressNg, LoadError> {
    let LoadKind::StressNg(args) = kind else {
        unreachable!("only called for stress-ng")
    };
    let mut cmd = Command::new("stress-ng");
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
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
    let mut child = cmd.spawn().map_err(stress_ng_spawn_error)?;
    let buf = Arc::new(Mutex::new(Vec::new()));
    if let Some(mut pipe) = child.stderr.take() {
        let buf = buf.clone();
        // Ends at end of file, when stress-ng and its workers are gone; never joined.
        let _ = std::thread::Builder::new()
            .name("stress-ng-err".into())
            .stack_size(WORKER_STACK)
            .spawn(move || {
                let mut chunk = [0u8; 1024];
                while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                    let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                    b.extend_from_slice(&chunk[..n]);
                    let excess = b.len().saturating_sub(4096);
                    b.drain(..excess);
                }
            });
    }
    Ok(StressNg {
        spec: kind.to_string(),
        child,
        stderr: buf,
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
        assert!(parse("gpu").unwrap_err().to_string().contains("cpu,mem,io"));
        assert!(parse("stress-ng:").is_err());
    }

    /// The tests that start load run one at a time: they count this process's load threads.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
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
        let _serial = serial();
        let dir;
        {
            let load = Load::start(
                &[LoadKind::Cpu, LoadKind::Mem, LoadKind::Io],
                &[0, 1],
                Duration::ZERO,
            )
            .unwrap();
            assert_eq!(load.workers(), 6);
            dir = load.io_dir().unwrap().to_path_buf();
            std::thread::sleep(Duration::from_millis(200));
            assert_eq!(load_threads(), 6);
            let meta = std::fs::symlink_metadata(&dir).unwrap();
            assert!(meta.is_dir());
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
                0o700,
                "private directory"
            );
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with("rtapi-load-") && !name.ends_with(&std::process::id().to_string()),
                "random name, not the pid: {name}"
            );
        }
        assert_eq!(load_threads(), 0, "every worker joined");
        assert!(!dir.exists(), "io load leaves no files behind");
    }

    /// The finding: the io worker wrote through whatever was at its path. Now a pre-existing file or
    /// symlink is refused and left alone.
    #[test]
    fn io_worker_refuses_a_pre_existing_path_or_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let stop = AtomicBool::new(false);
        let link = dir.path().join("worker-0");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = io_worker(&stop, &link).unwrap_err();
        assert!(
            matches!(&err, LoadError::File { verb: "create", source, .. }
                if source.kind() == std::io::ErrorKind::AlreadyExists),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        // A dangling symlink is refused too (O_EXCL): nothing is created at its target.
        let target = dir.path().join("target");
        let dangling = dir.path().join("worker-1");
        std::os::unix::fs::symlink(&target, &dangling).unwrap();
        assert!(io_worker(&stop, &dangling).is_err());
        assert!(!target.exists());
        let err = io_worker(&stop, &victim).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn io_directories_of_dead_runs_are_swept_and_nothing_else() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        // A pid that is no process: beyond pid_max.
        let dead = 4_194_304 + 17;
        let mk = |name: &str, mode: u32| {
            let p = tmp.path().join(name);
            std::fs::create_dir(&p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            std::fs::write(p.join("worker-0"), b"data").unwrap();
            p
        };
        let stale = mk(&format!("rtapi-load-{dead}-abc123"), 0o700);
        let alive = mk(&format!("rtapi-load-{}-abc123", std::process::id()), 0o700);
        let open = mk(&format!("rtapi-load-{dead}-opened"), 0o755);
        let other = mk("rtapi-load-notapid-x", 0o700);
        // A symlink with the right name pointing at a directory that must survive.
        let victim = mk("victim", 0o700);
        let link = tmp.path().join(format!("rtapi-load-{dead}-link"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let removed = sweep_stale(tmp.path());
        assert_eq!(removed, vec![stale.clone()]);
        assert!(!stale.exists());
        for kept in [&alive, &open, &other, &victim] {
            assert!(kept.join("worker-0").exists(), "{}", kept.display());
        }
        assert!(std::fs::symlink_metadata(&link).is_ok());
    }

    #[test]
    fn a_worker_that_fails_is_reported_with_its_error() {
        let _serial = serial();
        let mut load = Load::start(&[LoadKind::Io], &[0], Duration::from_secs(3)).unwrap();
        let dir = load.io_dir().unwrap().to_path_buf();
        // Take the directory away: the worker's next create (or remove) fails, and it ends.
        std::fs::remove_dir_all(&dir).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while load.poll().is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let failures = load.stop();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert_eq!(failures[0].load, "io (load-io-0)");
        assert!(
            failures[0].what.contains("No such file"),
            "{:?}",
            failures[0]
        );
        assert!(failures[0].at_s >= 3.0);
    }

    #[test]
    fn stress_ng_that_exits_is_reported_with_its_status_and_stderr() {
        if Command::new("stress-ng").arg("--version").output().is_err() {
            eprintln!("SKIPPED: stress-ng is not installed");
            return;
        }
        let _serial = serial();
        let kinds = parse("stress-ng:--cpu 1 --timeout 1s").unwrap();
        preflight(&kinds).unwrap();
        let mut load = Load::start(&kinds, &[0], Duration::ZERO).unwrap();
        assert!(load.poll().is_empty(), "alive after the settle time");
        std::thread::sleep(Duration::from_millis(1500));
        let failures = load.stop();
        assert_eq!(failures.len(), 1, "{failures:?}");
        let f = &failures[0];
        assert!(f.what.contains("exit status: 0"), "{f:?}");
        assert!(
            f.stderr_tail.as_deref().unwrap_or("").contains("stress-ng"),
            "{f:?}"
        );
        let err = preflight(&parse("stress-ng:--bogus 3").unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("refuses") && err.contains("bogus"), "{err}");
    }
}
