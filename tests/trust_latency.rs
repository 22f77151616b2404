//! Issue "Trust", the latency-test side: each finding reproduced as it was found, against the real
//! binary, real processes and real files. A test that cannot run here says `SKIPPED: <test>: <why>` on
//! stderr (and fails under CI when what is missing is root or stress-ng).

mod common;

use common::{is_root, Prereq};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::eventually;

const NOBODY: u32 = 65534;

/// A command asked to run for 15 minutes that is refused must end long before that; this only tells
/// "refused before running" from "ran", whatever this shared machine's scheduling noise.
const REFUSED_BEFORE_RUNNING: Duration = Duration::from_secs(60);

/// `rtapi latency-test` on its own HAL instance; no `--quiet` (tests add it where wanted).
fn latency_test(instance: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.arg("latency-test")
        .args([
            "--instance",
            &format!("trust-{instance}-{}", std::process::id()),
        ])
        .args(args)
        .env_remove("RTAPI_FLAVOR")
        .env("RUST_LOG", "error")
        .stdin(Stdio::null());
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn has_stress_ng() -> bool {
    Command::new("stress-ng").arg("--version").output().is_ok()
}

/// Directories planted by "the attacker"; removed (as root, never following a link) when dropped.
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// As user nobody, in one child process: `/tmp/rtapi-load-<pid>/worker-{0..3}` → `victim` for every
/// pid in `pids`. Returns the directories that were planted.
fn plant_as_nobody(victim: &Path, pids: std::ops::RangeInclusive<u32>) -> Planted {
    let target = CString::new(victim.as_os_str().as_bytes()).unwrap();
    let mut planted = Vec::new();
    let mut paths: Vec<(CString, Vec<CString>)> = Vec::new();
    for pid in pids {
        let dir = PathBuf::from(format!("/tmp/rtapi-load-{pid}"));
        if dir.exists() {
            continue; // somebody else's; leave it alone
        }
        let links = (0..4)
            .map(|i| CString::new(format!("{}/worker-{i}", dir.display())).unwrap())
            .collect();
        paths.push((CString::new(dir.as_os_str().as_bytes()).unwrap(), links));
        planted.push(dir);
    }
    let mut c = Command::new("true");
    c.uid(NOBODY).gid(NOBODY);
    // SAFETY: runs in the forked child after it became nobody, before exec; it only calls mkdir and
    // symlink (async-signal-safe system calls) on C strings prepared before the fork, and allocates
    // nothing.
    unsafe {
        c.pre_exec(move || {
            for (dir, links) in &paths {
                if libc::mkdir(dir.as_ptr(), 0o755) == 0 {
                    for l in links {
                        libc::symlink(target.as_ptr(), l.as_ptr());
                    }
                }
            }
            Ok(())
        });
    }
    assert!(c.status().unwrap().success());
    let planted = Planted(planted);
    for d in &planted.0 {
        let meta = std::fs::symlink_metadata(d).expect("planted");
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&meta),
            NOBODY,
            "planted by nobody"
        );
    }
    planted
}

fn ns_last_pid() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Finding 1 as found: an unprivileged user pre-creates `/tmp/rtapi-load-<pid>/worker-N` → a root
/// file for the next few hundred pids; root runs the commissioning command with io load. The victim
/// must stay byte for byte as it was, and the run must succeed.
#[test]
fn io_load_never_writes_through_planted_symlinks() {
    if !is_root() {
        return skip!(Ci, "planting as 'nobody' and running as root needs root");
    }
    let victim = PathBuf::from(format!("/tmp/rtapi-trust-victim-{}", std::process::id()));
    let content: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&victim, &content).unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _victim_guard = Remove(victim.clone());

    // Plant, start, and make sure the run got a pid in the trap (other processes on the machine
    // may take pids meanwhile: plant again if it did not).
    let mut attempt = 0;
    let (child, planted, pid) = loop {
        attempt += 1;
        let last = ns_last_pid();
        let range = last + 1..=last + 300;
        let planted = plant_as_nobody(&victim, range.clone());
        let child = latency_test(
            "symlink",
            &["--duration", "10s", "--load", "cpu,mem,io", "--quiet"],
        )
        .env_remove("TMPDIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let pid = child.id();
        if planted
            .0
            .contains(&PathBuf::from(format!("/tmp/rtapi-load-{pid}")))
            || attempt == 3
        {
            break (child, planted, pid);
        }
        eprintln!("pid {pid} fell outside the planted range {range:?}; again");
        let mut child = child;
        let _ = child.kill();
        let _ = child.wait();
    };
    let trap = PathBuf::from(format!("/tmp/rtapi-load-{pid}"));
    assert!(
        planted.0.contains(&trap),
        "rtapi (pid {pid}) ran with {} planted for it",
        trap.display()
    );
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    eprintln!("10 s run with cpu,mem,io load took {took:?}");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("load cpu,mem,io"), "{stdout}");
    assert!(!stdout.contains("LOAD FAILED"), "{stdout}");
    assert!(
        std::fs::read(&victim).unwrap() == content,
        "the victim was overwritten through {}",
        trap.display()
    );
    // The trap is as the attacker left it: four links, nothing created or removed there.
    let mut names: Vec<String> = std::fs::read_dir(&trap)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["worker-0", "worker-1", "worker-2", "worker-3"]);
}

/// The io load's private directory is gone after Ctrl-C or SIGTERM (the run ends normally through a
/// signal flag), and it was private (0700) while it existed.
#[test]
fn io_load_directory_is_removed_on_sigint_and_sigterm() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let tmp = tempfile::tempdir().unwrap();
        let child = latency_test(
            &format!("sig{signal}"),
            &[
                "--duration",
                "60s",
                "--base",
                "0",
                "--load",
                "io",
                "--quiet",
            ],
        )
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(8);
        let dir = loop {
            if let Some(d) = io_dirs(tmp.path()).pop() {
                break d;
            }
            assert!(Instant::now() < deadline, "the io load never started");
            std::thread::sleep(Duration::from_millis(50));
        };
        let mode = std::fs::symlink_metadata(&dir)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o700, "{}", dir.display());
        assert!(
            !dir.to_string_lossy().ends_with(&child.id().to_string()),
            "not named after the pid: {}",
            dir.display()
        );
        // A worker's file is in it before the signal.
        eventually::until_true("an io worker's file", eventually::GENEROUS, || {
            dir.read_dir().is_ok_and(|mut d| d.next().is_some())
        });
        // SAFETY: kill sends a signal to our own child; no memory is involved.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("(interrupted)"));
        let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert!(left.is_empty(), "signal {signal}: left behind {left:?}");
    }
}

/// The io load's directories (`rtapi-load-…`) in `dir`.
fn io_dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("rtapi-load-")
        })
        .collect()
}

/// A SIGKILLed run cannot remove its io directory; the next run with `--load io` does (the directory's
/// name carries its pid, and that process is gone), before it makes its own.
#[test]
fn a_sigkilled_runs_io_directory_is_removed_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let io_dirs = || io_dirs(tmp.path());
    let args = [
        "--duration",
        "60s",
        "--base",
        "0",
        "--load",
        "io",
        "--quiet",
    ];
    let mut child = latency_test("killed", &args)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(8);
    while io_dirs().is_empty() {
        assert!(Instant::now() < deadline, "the io load never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    eventually::until_true("an io worker's file", eventually::GENEROUS, || {
        io_dirs()
            .first()
            .is_some_and(|d| d.read_dir().is_ok_and(|mut e| e.next().is_some()))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let left = io_dirs();
    assert_eq!(left.len(), 1, "{left:?}");
    // A worker removes its file between rounds, so the kill may or may not leave one: a file of the
    // test's own makes sure the directory the next run must remove is not empty.
    std::fs::write(left[0].join("leftover"), "x").unwrap();
    let short = ["--duration", "1s", "--base", "0", "--load", "io", "--quiet"];
    let out = latency_test("sweeper", &short)
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert!(out.status.code().is_some(), "{}", text(&out.stderr));
    assert!(io_dirs().is_empty(), "left behind: {:?}", io_dirs());
    // The killed run's segment (stale: its owner is gone) is not this test's concern.
    let _ = std::fs::remove_file(format!(
        "/dev/shm/rtapi-trust-killed-{}",
        std::process::id()
    ));
}

/// Finding 2: an unwritable output failed only after the whole run. Now every output path is checked
/// first: exit 2 at once, naming the flag, the path and why; nothing runs.
#[test]
fn unwritable_outputs_are_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().to_str().unwrap().to_string();
    let cases: Vec<(&str, String, &str)> = vec![
        ("--json", "/nonexistent/x.json".into(), "does not exist"),
        (
            "--histogram",
            "/etc/hostname/x.hist".into(),
            "is not a directory",
        ),
        ("--plot", dir_path.clone(), "is a directory"),
        ("--json", "/proc/x.json".into(), "cannot create a file"),
        ("--histogram", "/dev/full".into(), "not a regular file"),
    ];
    for (flag, path, why) in &cases {
        let started = Instant::now();
        let out = latency_test("unwritable", &["--duration", "15m", "--quiet", flag, path])
            .output()
            .unwrap();
        let took = started.elapsed();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {path}: {err}");
        // Refused before the 15 min run: the bound only tells that from running.
        assert!(
            took < REFUSED_BEFORE_RUNNING,
            "{flag} {path}: took {took:?}"
        );
        assert!(
            err.contains(&format!("{flag} {path}")) && err.contains(why),
            "{flag} {path}: {err}"
        );
        assert!(out.stdout.is_empty(), "nothing ran: {}", text(&out.stdout));
    }
    // Permission bits, for a user they apply to.
    if is_root() {
        let locked = dir.path().join("root-only");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let target = locked.join("x.json");
        let out = latency_test("perm", &["--duration", "15m", "--json"])
            .arg(&target)
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("Permission denied"), "{err}");
    } else {
        skip!(
            Ci,
            "(part) the permission case runs the child as 'nobody', which needs root"
        );
    }
    // compare-timers writes a file too.
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args([
            "compare-timers",
            "--duration",
            "15m",
            "--json",
            "/nonexistent/c.json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(started.elapsed() < REFUSED_BEFORE_RUNNING);
    assert!(text(&out.stderr)
        .contains("--json /nonexistent/c.json: directory /nonexistent does not exist"));
}

/// Finding 2, at the end of a run: an output whose directory disappeared while the test ran. The
/// report and verdict are still printed, the other outputs are written, and the exit code is 1 — also
/// when `--fail-above` is exceeded (1 takes precedence over 3).
#[test]
fn an_output_that_fails_at_the_end_loses_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let doomed = dir.path().join("doomed");
    std::fs::create_dir(&doomed).unwrap();
    let (json, hist, svg) = (
        doomed.join("r.json"),
        dir.path().join("h.txt"),
        dir.path().join("p.svg"),
    );
    let child = latency_test(
        "late",
        &[
            "--duration",
            "3s",
            "--base",
            "0",
            "--quiet",
            "--fail-above",
            "1ns",
        ],
    )
    .args(["--json".as_ref(), json.as_os_str()])
    .args(["--histogram".as_ref(), hist.as_os_str()])
    .args(["--plot".as_ref(), svg.as_os_str()])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // After the start-up check (the servo thread runs), before the end.
    let instance = format!("trust-late-{}", std::process::id());
    eventually::until_true("the servo thread runs", eventually::GENEROUS, || {
        rtapi_hal::HalReader::open(&instance, rtapi_hal::Access::ReadOnly)
            .and_then(|r| r.thread_stats("servo"))
            .is_ok_and(|s| s.cycles > 0)
    });
    std::fs::remove_dir_all(&doomed).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("VERDICT:"),
        "the report is printed: {stdout}"
    );
    assert!(
        stderr.contains(&format!("--json {}", json.display())),
        "{stderr}"
    );
    assert!(stderr.contains("could not be written"), "{stderr}");
    // Read with the test's own reader of cyclictest's layout (not the crate's parser).
    let hist = std::fs::read_to_string(&hist).unwrap();
    let parsed = common::cyclictest::parse(&hist).unwrap_or_else(|e| panic!("{e}\n{hist}"));
    parsed.check_sums().unwrap();
    assert_eq!(parsed.bins.len(), 1, "one thread");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
}

/// A mounted tmpfs of a few KiB: a real full disk. Unmounted when dropped.
struct TinyFs(tempfile::TempDir);

impl TinyFs {
    /// The mount, or why there is none (and whether `.ci/run` provides what is missing).
    fn mount() -> Result<TinyFs, (Prereq, String)> {
        if !is_root() {
            return Err((Prereq::Ci, "mounting a tmpfs needs root".into()));
        }
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| (Prereq::Machine, format!("mount: {e}")))?;
        if !out.status.success() {
            // As root, refused only where mounting is not allowed (a container without CAP_SYS_ADMIN).
            return Err((
                Prereq::Machine,
                format!("mount -t tmpfs: {}", text(&out.stderr).trim()),
            ));
        }
        Ok(TinyFs(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// Finding 2 with a full disk: the old file is not truncated (the JSON does not fit), the other
/// outputs are written, the report is printed, exit 1.
#[test]
fn a_full_disk_keeps_the_old_file_and_the_other_outputs() {
    let fs = match TinyFs::mount() {
        Ok(fs) => fs,
        Err((prereq, why)) => return common::skip(test_name!(), &why, prereq),
    };
    let json = fs.path().join("latency.json");
    std::fs::write(&json, "the previous commissioning run").unwrap();
    let other = tempfile::tempdir().unwrap();
    let hist = other.path().join("latency.hist");
    let out = latency_test("full", &["--duration", "1s", "--base", "0", "--quiet"])
        .args(["--json".as_ref(), json.as_os_str()])
        .args(["--histogram".as_ref(), hist.as_os_str()])
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(stdout.contains("VERDICT:"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&json).unwrap(),
        "the previous commissioning run"
    );
    let names: Vec<_> = std::fs::read_dir(fs.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "no temporary file left: {names:?}");
    assert!(std::fs::read_to_string(&hist).unwrap().contains("# Total:"));
}

/// Finding 3: `--duration 0 --fail-above 1ns` said `good … 20 kHz step rate` and exited 0.
#[test]
fn no_cycles_is_no_data_and_fails_the_gate() {
    let out = latency_test(
        "zero",
        &["--duration", "0", "--fail-above", "1ns", "--json", "-"],
    )
    .output()
    .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let v = json_of(&out);
    assert_eq!(v["verdict"]["rating"], "no-data", "{}", v["verdict"]);
    assert_eq!(v["verdict"]["evidence"], false);
    assert!(v["verdict"]["max_step_rate_hz"].is_null());
    assert!(
        v["verdict"]["problems"][0]
            .as_str()
            .unwrap()
            .contains("--duration 0 measures nothing"),
        "{}",
        v["verdict"]
    );
    assert!(!stderr.contains("kHz"), "{stderr}");
    assert!(stderr.contains("VERDICT: no-data"), "{stderr}");
    assert!(stderr.contains("cannot pass without evidence"), "{stderr}");
    // Without a gate the run is still reported, as no data.
    let out = latency_test("zero2", &["--duration", "0"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("VERDICT: no-data"), "{stdout}");
}

/// Finding 3: a run on flavor sim (SCHED_OTHER) got a normal verdict.
#[test]
fn sim_is_not_real_time_evidence() {
    let out = latency_test(
        "sim",
        &[
            "--duration",
            "1s",
            "--base",
            "0",
            "--flavor",
            "sim",
            "--fail-above",
            "10s",
            "--json",
            "-",
        ],
    )
    .output()
    .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let v = json_of(&out);
    assert_eq!(v["system"]["flavor"], "sim");
    assert!(
        v["threads"][0]["cycles"].as_u64().unwrap() > 100,
        "it measured"
    );
    assert_eq!(v["verdict"]["rating"], "not-real-time");
    assert_eq!(v["verdict"]["evidence"], false);
    assert!(
        v["verdict"]["summary"]
            .as_str()
            .unwrap()
            .contains("not real-time evidence"),
        "{}",
        v["verdict"]
    );
    assert!(stderr.contains("SCHED_OTHER"), "{stderr}");
}

/// Finding 3: `--load "stress-ng:--bogus 3"` was reported as load although stress-ng exited at once.
/// Now it is refused before anything is measured.
#[test]
fn stress_ng_that_cannot_start_is_refused_before_measuring() {
    if !has_stress_ng() {
        return skip!(Ci, "stress-ng is not installed (.ci/run installs it)");
    }
    let started = Instant::now();
    let out = latency_test(
        "bogus",
        &[
            "--duration",
            "15m",
            "--load",
            "stress-ng:--bogus 3",
            "--quiet",
        ],
    )
    .output()
    .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(started.elapsed() < REFUSED_BEFORE_RUNNING);
    assert!(err.contains("--load stress-ng:--bogus 3"), "{err}");
    assert!(
        err.contains("unrecognized option"),
        "stress-ng's own words: {err}"
    );
    assert!(out.stdout.is_empty());
}

/// Finding 3: stress-ng that dies during the run is reported with its status and stderr, in the
/// text and the JSON, and the gate does not pass.
#[test]
fn stress_ng_that_dies_during_the_run_is_reported() {
    if !has_stress_ng() {
        return skip!(Ci, "stress-ng is not installed (.ci/run installs it)");
    }
    let out = latency_test(
        "dies",
        &[
            "--duration",
            "4s",
            "--base",
            "0",
            "--load",
            "stress-ng:--cpu 1 --timeout 1s",
            "--fail-above",
            "10s",
            "--json",
            "-",
        ],
    )
    .output()
    .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let v = json_of(&out);
    let f = &v["load_failures"][0];
    assert_eq!(f["load"], "stress-ng:--cpu 1 --timeout 1s", "{v}");
    assert!(
        f["what"].as_str().unwrap().contains("exit status: 0"),
        "{f}"
    );
    assert!(
        f["stderr_tail"].as_str().unwrap().contains("stress-ng"),
        "{f}"
    );
    assert_eq!(v["verdict"]["evidence"], false);
    assert!(v["verdict"]["problems"][0]
        .as_str()
        .unwrap()
        .contains("not under the requested load"));
    assert!(
        stderr.contains("LOAD FAILED: stress-ng:--cpu 1 --timeout 1s"),
        "{stderr}"
    );
    assert!(stderr.contains("stderr: stress-ng"), "{stderr}");
}

/// Finding 3, built-in load: the io workers fail on a full disk; that is reported the same way.
#[test]
fn a_failing_builtin_worker_is_reported() {
    let fs = match TinyFs::mount() {
        Ok(fs) => fs,
        Err((prereq, why)) => return common::skip(test_name!(), &why, prereq),
    };
    let out = latency_test(
        "iofail",
        &[
            "--duration",
            "3s",
            "--base",
            "0",
            "--load",
            "io",
            "--fail-above",
            "10s",
            "--json",
            "-",
        ],
    )
    .env("TMPDIR", fs.path())
    .output()
    .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let v = json_of(&out);
    let failures = v["load_failures"].as_array().unwrap();
    assert!(!failures.is_empty(), "{v}");
    for f in failures {
        assert!(
            f["load"].as_str().unwrap().starts_with("io (load-io-"),
            "{f}"
        );
        assert!(f["what"].as_str().unwrap().contains("No space left"), "{f}");
    }
    assert_eq!(v["verdict"]["evidence"], false);
    assert!(stderr.contains("LOAD FAILED: io"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(fs.path()).unwrap().count(),
        0,
        "the private directory is removed"
    );
}

/// Finding 4: `--json -` without `--quiet` mixed the live lines into stdout.
#[test]
fn json_to_stdout_is_one_clean_document() {
    let out = latency_test("clean", &["--duration", "3s", "--base", "0", "--json", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = json_of(&out);
    assert_eq!(v["tool"], "rtapi latency-test");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("1s servo"),
        "live lines on stderr: {stderr}"
    );
    assert!(
        stderr.contains("VERDICT:"),
        "the report on stderr: {stderr}"
    );
}
