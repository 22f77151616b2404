//! `rtapi halrun`: a `.hal` file run as LinuxCNC's `halrun -f` runs it — `--check`, `-i INI`, `-k`,
//! a file that starts its threads, one that does not — and `rtapi run` with a TOML `ini =` key.

use std::path::Path;
use std::process::{Command, Output};

fn rtapi(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .current_dir(dir)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

fn segment(instance: &str) -> bool {
    Path::new(&format!("/dev/shm/rtapi-{instance}")).exists()
}

const SERVO: &str = "\
# a servo thread, a sine into a pid loop
loadrt threads name1=servo period1=[EMCMOT]SERVO_PERIOD
loadrt siggen
loadrt pid
net cmd siggen.0.sine => pid.0.command
setp pid.0.Pgain [AXIS_X]P_GAIN
addf siggen.0.update servo
addf pid.0.do-pid-calcs servo
";

fn write_config(dir: &Path) {
    std::fs::write(
        dir.join("m.ini"),
        "[EMCMOT]\nSERVO_PERIOD = 1000000\n[AXIS_X]\nP_GAIN = 40\n",
    )
    .unwrap();
    std::fs::write(dir.join("m.hal"), SERVO).unwrap();
}

#[test]
fn check_validates_with_the_ini_file_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    std::fs::write(
        dir.path().join("show.hal"),
        "source m.hal\ngetp pid.0.Pgain\nshow thread\n",
    )
    .unwrap();
    let instance = format!("halrun-check-{}", std::process::id());
    let out = rtapi(
        dir.path(),
        &[
            "halrun",
            "--check",
            "-s",
            "-i",
            "m.ini",
            "-f",
            "show.hal",
            "--instance",
            &instance,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "40\n1000000 servo siggen.0.update pid.0.do-pid-calcs\n"
    );
    assert!(!segment(&instance));
    // Without the INI file: the first [SECTION]KEY is a file:line error, exit 2.
    let out = rtapi(dir.path(), &["halrun", "--check", "m.hal"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("m.hal:2: [EMCMOT]SERVO_PERIOD needs an INI file"),
        "{stderr}"
    );
    // A key the INI file lacks.
    std::fs::write(
        dir.path().join("short.ini"),
        "[EMCMOT]\nSERVO_PERIOD = 1000000\n",
    )
    .unwrap();
    let out = rtapi(
        dir.path(),
        &["halrun", "--check", "-i", "short.ini", "m.hal"],
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("m.hal:6: short.ini has no section [AXIS_X] (for key P_GAIN)"),
        "{stderr}"
    );
}

#[test]
fn keep_going_reports_every_failed_command() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.hal"),
        "loadrt motmod\nloadrt pid\nsetp pid.0.nope 1\nloadusr -W halui\nsetp pid.0.Pgain 3\n",
    )
    .unwrap();
    let out = rtapi(dir.path(), &["halrun", "--check", "-k", "-f", "bad.hal"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with("bad.hal:1: component 'motmod'"),
        "{stderr}"
    );
    assert!(
        lines[1].starts_with("bad.hal:3: setp: no pin or param named 'pid.0.nope'"),
        "{stderr}"
    );
    assert!(
        lines[2].starts_with("bad.hal:4: loadusr: user-space component 'halui'"),
        "{stderr}"
    );
    assert!(
        lines[3].contains("3 configuration error(s); nothing was started"),
        "{stderr}"
    );
    // Without -k: the first error only.
    let out = rtapi(dir.path(), &["halrun", "--check", "-f", "bad.hal"]);
    assert_eq!(text(&out.stderr).lines().count(), 2);
}

#[test]
fn a_file_that_starts_runs_its_threads_and_one_that_does_not_is_unloaded() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    std::fs::write(dir.path().join("run.hal"), "source m.hal\nstart\n").unwrap();
    let instance = format!("halrun-run-{}", std::process::id());
    let out = rtapi(
        dir.path(),
        &[
            "halrun",
            "-i",
            "m.ini",
            "-f",
            "run.hal",
            "--duration",
            "300ms",
            "--instance",
            &instance,
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("instance '{instance}' running")),
        "{stderr}"
    );
    // The run summary names the thread that ran.
    assert!(text(&out.stdout).contains("servo"), "{}", text(&out.stdout));
    assert!(!segment(&instance));
    // No `start`: built, unloaded, nothing ran.
    let out = rtapi(
        dir.path(),
        &["halrun", "-i", "m.ini", "m.hal", "--instance", &instance],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("m.hal ran no `start`"), "{stderr}");
    assert!(text(&out.stdout).is_empty());
    assert!(!segment(&instance));
}

#[test]
fn rtapi_run_takes_the_ini_file_from_the_toml() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    // The TOML declares no thread: `loadrt threads` in the .hal file does.
    std::fs::write(
        dir.path().join("m.toml"),
        "hal = [\"m.hal\"]\nini = \"m.ini\"\n",
    )
    .unwrap();
    let instance = format!("halrun-toml-{}", std::process::id());
    let out = rtapi(
        dir.path(),
        &[
            "run",
            "m.toml",
            "--duration",
            "200ms",
            "--instance",
            &instance,
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(!segment(&instance));
    std::fs::write(
        dir.path().join("bad.toml"),
        "hal = [\"m.hal\"]\nini = \"none.ini\"\n",
    )
    .unwrap();
    let out = rtapi(dir.path(), &["run", "bad.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("bad.toml:2: ini file: none.ini: cannot read"),
        "{stderr}"
    );
}

/// Issue 25: `rtapi run FILE.hal` runs a `.hal` file (its `-i` INI substituted) until SIGTERM, as
/// `rtapi run` does a TOML: the threads keep running after the file's end, and SIGTERM stops them
/// with the summary and exit 0, nothing left.
#[test]
fn rtapi_run_runs_a_hal_file_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    let instance = format!("run-hal-{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .current_dir(dir.path())
        .args(["run", "-i", "m.ini", "--instance", &instance, "m.hal"])
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Running after the file: the thread's cycle count goes on rising, seen twice.
    let cycles = || -> Option<u64> {
        let o = rtapi(
            dir.path(),
            &["show", "thread", "--instance", &instance, "--json"],
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).ok()?;
        v["threads"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == "servo")?["cycles"]
            .as_u64()
    };
    let t = std::time::Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(30),
            "rtapi run m.hal: its servo thread's cycles did not rise 3 times in 30 s ({seen:?}); \
             exited: {:?}",
            child.try_wait()
        );
        if let Some(c) = cycles() {
            if seen.last().is_none_or(|l| c > *l) {
                seen.push(c);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(child.try_wait().unwrap().is_none());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("servo"), "{}", text(&o.stdout));
    assert!(!segment(&instance));
}

/// Issue 25: a file of the wrong kind is refused before anything is read as the other kind, with
/// the command that takes it: an INI to `run` or `halrun`, a TOML to `halrun`; `-i` with a TOML.
#[test]
fn a_file_of_the_wrong_kind_names_the_command_that_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    std::fs::write(
        dir.path().join("m.toml"),
        "[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n",
    )
    .unwrap();
    for (args, want) in [
        (&["run", "m.ini"][..], "rtapi linuxcnc m.ini"),
        (&["run", "m.ini"][..], "rtapi run -i m.ini FILE.hal"),
        (
            &["halrun", "m.toml"][..],
            "this is a machine TOML: run it with `rtapi run m.toml`",
        ),
        (
            &["halrun", "-f", "m.ini"][..],
            "rtapi halrun -i INI -f FILE.hal",
        ),
        (
            &["run", "-i", "m.ini", "m.toml"][..],
            "a machine TOML names its INI itself",
        ),
    ] {
        let o = rtapi(dir.path(), args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: '{want}' not in: {err}");
        // Refused on its kind, not read as the other: no TOML or halcmd syntax error.
        assert!(!err.contains("expected"), "{args:?}: {err}");
    }
}

/// A `start` that the runtime cannot do (here a planted segment the trust rule refuses) is a
/// failure while running, exit 1, in `rtapi halrun` as in `rtapi run`, with the same reason; a
/// fault in the file stays bad usage, exit 2.
#[test]
fn a_start_the_runtime_refuses_exits_1_in_halrun_as_in_run() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path());
    std::fs::write(dir.path().join("start.hal"), "source m.hal\nstart\n").unwrap();
    let instance = format!("halrun-planted-{}", std::process::id());
    let planted = format!("/dev/shm/rtapi-{instance}");
    std::fs::write(&planted, vec![0x5a; 4096]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = rtapi(
        dir.path(),
        &[
            "run",
            "-i",
            "m.ini",
            "start.hal",
            "--instance",
            &instance,
            "--duration",
            "1s",
        ],
    );
    let halrun = rtapi(
        dir.path(),
        &[
            "halrun",
            "-i",
            "m.ini",
            "start.hal",
            "--instance",
            &instance,
        ],
    );
    // The same file with a fault in it: the configuration's fault, exit 2.
    std::fs::write(
        dir.path().join("bad.hal"),
        "source m.hal\nsetp pid.0.Pgian 1\nstart\n",
    )
    .unwrap();
    let bad = rtapi(
        dir.path(),
        &["halrun", "-i", "m.ini", "bad.hal", "--instance", &instance],
    );
    let _ = std::fs::remove_file(&planted);
    for (what, out) in [("run", &run), ("halrun", &halrun)] {
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "rtapi {what}:\n{err}");
        assert!(
            err.contains(&format!("refusing {planted}")),
            "rtapi {what}:\n{err}"
        );
    }
    let err = text(&halrun.stderr);
    assert!(err.contains("start.hal:2: start: refusing"), "{err}");
    assert!(
        err.contains("could not start; nothing was started"),
        "{err}"
    );
    let err = text(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{err}");
    assert!(
        err.contains("bad.hal:2:") && err.contains("configuration error"),
        "{err}"
    );
}
