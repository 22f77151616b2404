//! This repository's own test binaries run inside a reference root of another LinuxCNC release
//! (issue 45), or of a clean Debian release (issue 47: tests/package.rs installs the package into a
//! writable overlay of one, [`Job::overlay`]): `scripts/lcnc-root build SUITE` makes (or finds cached) a debootstrap root of Debian
//! SUITE with its `linuxcnc-uspace` and `-dev`; [`run_in_root`] runs a sibling test binary (one
//! `cargo build --release --tests` built beside the running one) inside it, so the tests meet that
//! release's `/usr/bin/rtapi_app`, `halcmd`, `linuxcnc` script, modules, headers, `halcompile` and
//! Python module instead of the host's.
//!
//! # How a binary runs inside a root
//!
//! `unshare --mount --ipc --net --pid --fork --propagation private --kill-child` (the host's), then a
//! small `sh` script in those namespaces:
//!
//! * the root is bound onto itself (pivot_root needs a mount point); `/proc` is a new proc of the new
//!   PID namespace; `/dev` and `/sys` are the host's (`--rbind`: the tests need `/dev/null`, tracefs);
//!   `/dev/shm`, `/tmp`, `/run` and `/var/tmp` are empty tmpfs of this run (a test's segments, lock
//!   files and sockets are its own, and nothing is written into the cached root there);
//! * the checkout and the target directory are bound at the same paths inside (test binaries carry
//!   absolute paths from `env!`: `CARGO_MANIFEST_DIR`, `CARGO_BIN_EXE_*`, `CARGO_TARGET_TMPDIR`);
//! * `pivot_root` into the root, the old root unmounted (lazily): the tests see only the root and
//!   those binds. A chroot would not do: tests `nsenter --mount` into namespaces they made, which
//!   enter that namespace's root, not a chroot;
//! * `linuxcnc_var LINUXCNCVERSION` of the root is printed (`RTAPI-ROOT-VERSION=…`) before the
//!   binary runs: the caller checks the root is the release it asked for.
//!
//! Private propagation: none of those mounts is seen outside the namespace, and they all go when
//! its last process ends. The IPC and PID namespaces keep LinuxCNC's fixed SysV keys and its "another
//! rtapi_app is running" check (`ps`) apart from the host's sessions and the other root's. The
//! network namespace has only `lo` (up): LinuxCNC's NML port is the run's own.
//!
//! Tracefs is the machine's (through `/sys`): a master's `--trace` instance inside a root is named
//! with its PID namespace (`rtapi-<pid>-pidns<inode>`, `rtapi::trace::TraceSession::name_for`) and
//! only that namespace's stale instances are reclaimed, so a root's master never removes a host
//! session's. A kernel trace inside a root shows host pids, which the PID namespace hides: tests that
//! name processes from the trace are not run inside one.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A Debian release whose LinuxCNC the tests are run against.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Release {
    /// Debian suite, as `scripts/lcnc-root` names it.
    pub(crate) suite: &'static str,
    /// What `linuxcnc_var LINUXCNCVERSION` starts with in that root.
    pub(crate) version: &'static str,
}

/// Debian 13 (trixie): LinuxCNC 2.9.4.
pub(crate) const TRIXIE: Release = Release {
    suite: "trixie",
    version: "2.9.4",
};
/// Debian unstable (sid): LinuxCNC 2.9.9.
pub(crate) const SID: Release = Release {
    suite: "sid",
    version: "2.9.9",
};
/// Debian 12 (bookworm): LinuxCNC 2.9.0~pre1 (`2.9.0~pre1+git20230208.f1270d6ed7`), the host's
/// release here; its root is a clean Debian 12 for tests/package.rs.
pub(crate) const BOOKWORM: Release = Release {
    suite: "bookworm",
    version: "2.9.0~pre1",
};
/// Every release tests/linuxcnc_releases.rs runs against (not bookworm: the host has it).
pub(crate) const RELEASES: [Release; 2] = [TRIXIE, SID];

/// The root of `release`, built if it is not cached yet (`scripts/lcnc-root build SUITE`: a couple of
/// minutes, once). `None` when it cannot be had here (not root, no debootstrap, no network): then
/// `SKIPPED: <test>: <why>` was printed, or, under `CI` (whose `.ci/run` builds the roots), the test
/// failed.
pub(crate) fn ensure(test: &str, release: &Release) -> Option<PathBuf> {
    if !super::is_root() {
        super::skip(
            test,
            "a LinuxCNC reference root needs root (debootstrap, namespaces, pivot_root)",
            super::Prereq::Ci,
        );
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/lcnc-root");
    let t0 = Instant::now();
    let o = Command::new(&script)
        .args(["build", release.suite])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    let (out, err) = super::text(&o);
    if !o.status.success() {
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        super::skip(
            test,
            &format!(
                "no {} root (LinuxCNC {}): `scripts/lcnc-root build {}` failed: {}",
                release.suite,
                release.version,
                release.suite,
                tail.join(" | ")
            ),
            super::Prereq::Ci,
        );
        return None;
    }
    eprintln!("{} ({:.1} s)", out.trim(), t0.elapsed().as_secs_f64());
    let o = Command::new(&script)
        .args(["path", release.suite])
        .output()
        .unwrap();
    let dir = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    assert!(
        dir.join(".rtapi-root").is_file(),
        "{}: not a finished root",
        dir.display()
    );
    Some(dir)
}

/// The test binary `name` (`tests/<name>.rs`) built beside the running one: the newest executable
/// `<name>-<hash>` in the directory of [`std::env::current_exe`]. It must be no older than its
/// sources and this package's (not its binaries: cargo may link those after the tests): a stale
/// binary would test old code (build
/// them all first: `cargo build --release --tests`, or the workspace's `cargo test`, which builds
/// every test binary before it runs any).
pub(crate) fn sibling(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let me = std::env::current_exe().unwrap();
    let dir = me.parent().unwrap();
    let prefix = format!("{name}-");
    let found = fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_prefix(&prefix).is_some_and(|h| {
                !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()) && !n.ends_with(".d")
            })
        })
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let executable = m.is_file() && m.permissions().mode() & 0o111 != 0;
            executable.then_some((m.modified().ok()?, e.path()))
        })
        .max();
    let Some((built, bin)) = found else {
        panic!(
            "no test binary {name}-<hash> in {}: build it first (`cargo build --release --tests`)",
            dir.display()
        );
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![
        manifest.join(format!("tests/{name}.rs")),
        manifest.join("build.rs"),
    ];
    for d in ["tests/common", "src", "hal/src"] {
        walk(&manifest.join(d), &mut sources);
    }
    let newer: Vec<String> = sources
        .iter()
        .filter(|p| {
            fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > built)
        })
        .map(|p| p.display().to_string())
        .take(5)
        .collect();
    assert!(
        newer.is_empty(),
        "{} is older than {newer:?}: build the test binaries first (`cargo build --release --tests`)",
        bin.display()
    );
    bin
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// `<stem>.log`, or `<stem>-2.log`, `-3`… when this process has used that path already (two runs
/// of the same binary and first test in one root, in parallel threads, must not write one file).
fn unique_log_path(stem: &Path) -> PathBuf {
    static USED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
    let with = |suffix: &str| PathBuf::from(format!("{}{suffix}.log", stem.display()));
    let mut path = with("");
    let mut n = 1;
    while used.contains(&path) {
        n += 1;
        path = with(&format!("-{n}"));
    }
    used.push(path.clone());
    path
}

/// What to run inside a root.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    /// A sibling test binary's name (`linuxcnc_master`).
    pub(crate) binary: &'static str,
    /// The tests to run, by exact name (libtest `--exact`): the set is explicit.
    pub(crate) tests: Vec<&'static str>,
    /// They are `#[ignore]`d tests (run with `--ignored`).
    pub(crate) ignored: bool,
    /// libtest's `--test-threads`.
    pub(crate) threads: usize,
    /// `--nocapture` (the default): the tests' own output (their tables, counts, times) is in the
    /// run's output, and so in the evidence kept.
    pub(crate) nocapture: bool,
    /// More environment for the binary.
    pub(crate) env: Vec<(&'static str, String)>,
    /// The run is killed (the whole namespace) after this long.
    pub(crate) deadline: Duration,
    /// Run in a writable copy of the root instead of the root itself: an overlay whose lower layer
    /// is the cached root and whose upper layer (`DIR/upper`, with `DIR/work`, mounted on
    /// `DIR/root`) is this directory's, mounted inside the run's mount namespace only. What the run
    /// changes (a package installed, a group made) stays in `DIR/upper`; the cached root is never
    /// written. `DIR` must be on a filesystem an overlay's upper layer can be (not another overlay).
    pub(crate) overlay: Option<PathBuf>,
}

impl Job {
    pub(crate) fn new(binary: &'static str, tests: &[&'static str]) -> Job {
        Job {
            binary,
            tests: tests.to_vec(),
            ignored: false,
            threads: 1,
            nocapture: true,
            env: Vec::new(),
            deadline: Duration::from_secs(900),
            overlay: None,
        }
    }
}

/// What a binary did inside a root.
#[derive(Debug)]
pub(crate) struct RootRun {
    /// `suite: binary`, for messages.
    pub(crate) what: String,
    /// Its exit code (`None`: killed at the deadline, or by a signal).
    pub(crate) code: Option<i32>,
    /// Standard output and error, interleaved as written.
    pub(crate) output: String,
    /// `linuxcnc_var LINUXCNCVERSION` inside the root.
    pub(crate) version: String,
    /// libtest's counts (summed over its `test result:` lines).
    pub(crate) passed: usize,
    pub(crate) failed: usize,
    pub(crate) ignored: usize,
    pub(crate) filtered_out: usize,
    /// `SKIPPED: …` lines.
    pub(crate) skipped: Vec<String>,
    /// Wall time of the whole run (namespaces, mounts and the binary).
    pub(crate) seconds: f64,
    /// Where the output is kept (`<target tmp>/lcnc-releases/<suite>/<binary>-<first test>.log`,
    /// `…-2.log` for a second run of those in this process).
    pub(crate) log: PathBuf,
}

impl RootRun {
    /// Passed only if the binary exited 0, exactly `asked` tests ran and passed, none said SKIPPED,
    /// and the root is `release`. Otherwise why not.
    pub(crate) fn verdict(&self, release: &Release, asked: usize) -> Result<(), String> {
        let mut why = Vec::new();
        if !self.version.starts_with(release.version) {
            why.push(format!(
                "the root's LinuxCNC is {:?}, not {}",
                self.version, release.version
            ));
        }
        if self.code != Some(0) {
            why.push(format!("exit {:?}", self.code));
        }
        if self.passed != asked || self.failed != 0 {
            why.push(format!(
                "{} of {asked} test(s) passed, {} failed (ignored {}, filtered out {})",
                self.passed, self.failed, self.ignored, self.filtered_out
            ));
        }
        if !self.skipped.is_empty() {
            why.push(format!("skipped: {:?}", self.skipped));
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }
}

/// Runs `job` inside `root` (module docs) and returns what it did; its output is also kept in
/// [`RootRun::log`].
pub(crate) fn run_in_root(root: &Path, suite: &str, job: &Job) -> RootRun {
    let bin = sibling(job.binary);
    // What the binary's absolute paths point into: the checkout and the target directory (each
    // bound once: a path under another bound one is already there).
    let target_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let mut binds: Vec<PathBuf> = vec![
        PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        target_tmp.parent().unwrap_or(target_tmp).to_path_buf(),
        bin.parent().unwrap().to_path_buf(),
        Path::new(env!("CARGO_BIN_EXE_rtapi"))
            .parent()
            .unwrap()
            .to_path_buf(),
    ];
    binds.iter_mut().for_each(|p| {
        *p = fs::canonicalize(&*p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    });
    binds.sort();
    binds.dedup();
    let binds: Vec<PathBuf> = binds
        .iter()
        .filter(|p| !binds.iter().any(|q| q != *p && p.starts_with(q)))
        .cloned()
        .collect();
    for b in &binds {
        for bad in ["/", "/proc", "/dev", "/sys", "/tmp", "/run"] {
            assert_ne!(b, Path::new(bad), "cannot bind {bad} into a root");
        }
    }
    let logs = target_tmp.join("lcnc-releases").join(suite);
    fs::create_dir_all(&logs).unwrap();
    let log = unique_log_path(&logs.join(format!(
        "{}-{}",
        job.binary,
        job.tests.first().copied().unwrap_or("all")
    )));
    let out = fs::File::create(&log).unwrap();
    // $1 root, $2 working directory, $3 the overlay directory or "", $4 number of binds, then the
    // binds, then the command.
    let script = r#"
R=$1; cwd=$2; ov=$3; n=$4; shift 4
ip link set lo up
if [ -n "$ov" ]; then
    mkdir -p "$ov/upper" "$ov/work" "$ov/root"
    mount -t overlay overlay -o "lowerdir=$R,upperdir=$ov/upper,workdir=$ov/work" "$ov/root"
    R=$ov/root
fi
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=1777 tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
mount -t tmpfs -o mode=1777 tmpfs "$R/var/tmp"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mount --rbind /sys "$R/sys"
while [ "$n" -gt 0 ]; do
    mkdir -p "$R$1"
    mount --rbind "$1" "$R$1"
    shift; n=$((n - 1))
done
mkdir -p "$R/.old-root"
cd "$R"
pivot_root . .old-root
umount -l /.old-root
cd "$cwd"
echo "RTAPI-ROOT-VERSION=$(linuxcnc_var LINUXCNCVERSION)"
"$@"
"#;
    let mut c = Command::new("unshare");
    c.args([
        "--mount",
        "--ipc",
        "--net",
        "--pid",
        "--fork",
        "--kill-child",
        "--propagation",
        "private",
        "--",
        "sh",
        "-euc",
        script,
        "sh",
    ])
    .arg(root)
    .arg(env!("CARGO_MANIFEST_DIR"))
    .arg(job.overlay.as_deref().unwrap_or(Path::new("")))
    .arg(binds.len().to_string())
    .args(&binds)
    .arg(&bin)
    .args(&job.tests)
    .arg("--exact")
    .arg(format!("--test-threads={}", job.threads));
    if job.ignored {
        c.arg("--ignored");
    }
    if job.nocapture {
        c.arg("--nocapture");
    }
    // A test that cannot run inside fails there (CI's rule), and names what it missed.
    c.env("CI", "1")
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    let t0 = Instant::now();
    let mut child = c.spawn().expect("unshare (util-linux)");
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if t0.elapsed() > job.deadline {
            // unshare --kill-child: its child, the namespace's first process, gets SIGKILL, and
            // with it every process of the namespace.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let seconds = t0.elapsed().as_secs_f64();
    let output = fs::read_to_string(&log).unwrap_or_default();
    let mut r = RootRun {
        what: format!("{suite}: {}", job.binary),
        code,
        version: output
            .lines()
            .find_map(|l| l.strip_prefix("RTAPI-ROOT-VERSION="))
            .unwrap_or("")
            .trim()
            .to_string(),
        passed: 0,
        failed: 0,
        ignored: 0,
        filtered_out: 0,
        skipped: output
            .lines()
            .filter(|l| l.starts_with("SKIPPED:"))
            .map(String::from)
            .collect(),
        seconds,
        log,
        output,
    };
    for l in r.output.lines() {
        let Some(rest) = l.strip_prefix("test result: ") else {
            continue;
        };
        for w in rest.split_whitespace().collect::<Vec<_>>().windows(2) {
            let Ok(n) = w[0].parse::<usize>() else {
                continue;
            };
            match w[1].trim_end_matches(';') {
                "passed" => r.passed += n,
                "failed" => r.failed += n,
                "ignored" => r.ignored += n,
                "filtered" => r.filtered_out += n,
                _ => {}
            }
        }
    }
    // The run's own summary at the end of its log: the evidence kept says what was asked and how long
    // it took.
    if let Ok(mut f) = fs::OpenOptions::new().append(true).open(&r.log) {
        use std::io::Write as _;
        let _ = writeln!(
            f,
            "lcnc_root: {} in {}: exit {:?}, {} asked ({}), {} passed, {} failed, {} skipped, \
             LinuxCNC {:?}, {:.1} s with {} test thread(s)",
            job.binary,
            root.display(),
            r.code,
            job.tests.len(),
            job.tests.join(" "),
            r.passed,
            r.failed,
            r.skipped.len(),
            r.version,
            r.seconds,
            job.threads
        );
    }
    r
}
