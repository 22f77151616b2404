//! Trusting segments, end to end with real processes, real shm and real users:
//!
//! - another user (`nobody`) builds a valid segment under root's instance name with the real builder and
//!   holds its owner lock: root's `show`, `getp`, `setp`, `sets`, `watch` and `rtapi run` all refuse it,
//!   naming the file, its owner and mode and saying how to clear it, and `setp` writes nothing into it;
//! - an owner SIGKILLed mid-run: `show` says dead, `getp` warns, `setp`/`sets`/`watch` exit 1.

mod common;
use common::{is_root, rtapi, text};

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const ROLE: &str = "RTAPI_TRUST_TEST_ROLE";
const INSTANCE: &str = "RTAPI_TRUST_TEST_INSTANCE";
const NOBODY: u32 = 65534;

fn shm_path(instance: &str) -> PathBuf {
    format!("/dev/shm/rtapi-{instance}").into()
}

fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("trust-{tag}-{}-{n}", std::process::id())
}

/// Removes what a test left in /dev/shm, even on failure.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Kills a child on every way out of a test.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The entry point of the child processes; a no-op in a normal test run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let instance = std::env::var(INSTANCE).unwrap();
    match role.as_str() {
        "squat" => squat(&instance),
        other => panic!("unknown role {other}"),
    }
}

/// As another user: builds a valid-looking HAL under `instance` with the real builder (so it holds the
/// owner lock, like a live rtapi would), says so, and holds it until stdin closes.
fn squat(instance: &str) {
    use rtapi_hal::{HalBuilder, In, ParamAccess, ValueType};
    let mut b = HalBuilder::new(instance).unwrap();
    let c = b.component("pid.0").unwrap();
    b.param(c, "pid.0.Pgain", ParamAccess::Rw, 666.0f64)
        .unwrap();
    b.pin::<In, f64>(c, "pid.0.command").unwrap();
    b.signal("machine-enable", ValueType::Bit).unwrap();
    let hal = b.build().unwrap();
    hal.set_running(true);
    println!("SQUAT-READY");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    drop(hal);
}

#[test]
fn a_segment_planted_by_another_user_is_refused_everywhere() {
    if !is_root() {
        return skip!(Ci, "only root can start the squatter as user nobody");
    }
    let inst = unique("forged");
    let path = shm_path(&inst);
    let _c = Cleanup(path.clone());
    let exe = std::env::current_exe().unwrap();
    let mut squatter = Command::new(&exe);
    squatter
        .args(["--exact", "child", "--nocapture"])
        .env(ROLE, "squat")
        .env(INSTANCE, &inst)
        .current_dir("/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut squatter = Killed(squatter.spawn().unwrap());
    let mut out = BufReader::new(squatter.0.stdout.take().unwrap());
    let t0 = Instant::now();
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line).unwrap() == 0 {
            // The test binary must be reachable by nobody (target/ world-readable).
            return skip!(
                Machine,
                "the squatter (user nobody) could not start; is the test binary readable by nobody?"
            );
        }
        if line.trim() == "SQUAT-READY" {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o777),
        (NOBODY, 0o600),
        "a real segment of nobody's"
    );
    let before = std::fs::read(&path).unwrap();
    let p = path.display().to_string();

    // Every reader and writer of root's refuses it: exit 1, nothing on stdout (no forged numbers), and
    // the message names the file, its owner and mode, and what to do.
    for args in [
        vec!["show"],
        vec!["show", "--json"],
        vec!["show", "thread"],
        vec!["getp", "pid.0.Pgain"],
        vec!["setp", "pid.0.Pgain", "1"],
        vec!["setp", "pid.0.command", "2", "--force"],
        vec!["sets", "machine-enable", "1"],
        vec!["watch", "pid.0.Pgain", "--count", "1"],
    ] {
        let mut all = args.clone();
        all.extend(["--instance", &inst]);
        let o = rtapi(&all);
        let (stdout, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?} showed: {stdout}");
        for says in [
            format!("refusing {p}"),
            "belongs to nobody (uid 65534)".to_string(),
            "owner nobody (uid 65534), mode 0600".to_string(),
            "trusts only segments owned by root".to_string(),
            format!("rm {p}"),
            "--instance NAME".to_string(),
            "--trust-owner nobody".to_string(),
        ] {
            assert!(stderr.contains(&says), "{args:?}: no '{says}' in: {stderr}");
        }
    }

    // The owner side: `rtapi run` does not take the forged pid for a live rtapi ("in use by live
    // process"), does not remove the file, and does not start.
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
    let o = rtapi(&[
        "run",
        config.to_str().unwrap(),
        "--duration",
        "1s",
        "--instance",
        &inst,
    ]);
    let (_, stderr) = text(&o);
    assert!(!o.status.success(), "run started: {stderr}");
    assert!(
        stderr.contains(&format!("refusing {p}"))
            && stderr.contains("nobody (uid 65534)")
            && stderr.contains(&format!("rm {p}"))
            && !stderr.contains("in use by live process")
            && !stderr.contains("--trust-owner"),
        "{stderr}"
    );
    // The library's owner path, in this process, likewise.
    let e = rtapi_hal::HalBuilder::new(&inst)
        .unwrap()
        .build()
        .err()
        .unwrap();
    assert!(matches!(e, rtapi_hal::HalError::Untrusted { .. }), "{e}");

    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "root wrote into nobody's file"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().uid(),
        NOBODY,
        "left alone"
    );

    // Believing that user on purpose works, and the squatter is indeed alive and holding its lock.
    let o = rtapi(&[
        "getp",
        "pid.0.Pgain",
        "--instance",
        &inst,
        "--trust-owner",
        "nobody",
    ]);
    assert_eq!(text(&o).0.trim(), "666", "{}", text(&o).1);
    let o = rtapi(&[
        "show",
        "--json",
        "--instance",
        &inst,
        "--trust-owner",
        "65534",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["owner_alive"].as_bool()),
        (Some("running"), Some(true))
    );
    let o = rtapi(&[
        "show",
        "--instance",
        &inst,
        "--trust-owner",
        "no-such-user-here",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);

    drop(squatter.0.stdin.take()); // EOF: the squatter drops its HAL, which unlinks its segment
    let _ = squatter.0.wait();
}

/// A root-owned world-writable file and a symlink at the name, through the CLI.
#[test]
fn loose_modes_and_symlinks_are_refused_by_the_cli() {
    let real = unique("real");
    let link = unique("link");
    let (_c1, _c2) = (Cleanup(shm_path(&real)), Cleanup(shm_path(&link)));
    let hal = {
        let mut b = rtapi_hal::HalBuilder::new(&real).unwrap();
        let c = b.component("c").unwrap();
        b.param(c, "c.gain", rtapi_hal::ParamAccess::Rw, 1.0f64)
            .unwrap();
        b.build().unwrap()
    };
    std::os::unix::fs::symlink(shm_path(&real), shm_path(&link)).unwrap();
    for args in [vec!["getp", "c.gain"], vec!["setp", "c.gain", "2"]] {
        let mut all = args.clone();
        all.extend(["--instance", &link]);
        let o = rtapi(&all);
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("it is a symbolic link"), "{stderr}");
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(shm_path(&real), std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = rtapi(&["setp", "c.gain", "2", "--instance", &real]);
    let (_, stderr) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("mode 0666") && stderr.contains("other users can access it"),
        "{stderr}"
    );
    assert_eq!(
        hal.reader().unwrap().get("c.gain").unwrap(),
        rtapi_hal::Value::Float(1.0)
    );
}

#[test]
fn a_sigkilled_owner_is_shown_dead_and_refuses_writes() {
    let inst = unique("dead");
    let _c = Cleanup(shm_path(&inst));
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
    let owner = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["run", config.to_str().unwrap(), "--duration", "30s"])
        .args(["--instance", &inst])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut owner = Killed(owner);
    let pid = owner.0.id();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--instance", &inst]);
        rtapi(&all)
    };
    let t0 = Instant::now();
    loop {
        let o = run(&["show", "thread", "--json"]);
        if o.status.success() {
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            if v["threads"][1]["cycles"].as_u64().is_some_and(|c| c > 10) {
                assert_eq!(
                    (v["state"].as_str(), v["owner_alive"].as_bool()),
                    (Some("running"), Some(true))
                );
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "instance never ran");
        std::thread::sleep(Duration::from_millis(20));
    }

    owner.0.kill().unwrap(); // SIGKILL: no cleanup, the segment stays with "running" in its words
    owner.0.wait().unwrap();
    assert!(shm_path(&inst).exists());
    let dead = format!("dead (owner pid {pid} gone; stale segment)");

    // show: the stale values, but the header line says dead, on every view.
    for args in [
        vec!["show"],
        vec!["show", "thread"],
        vec!["show", "pin", "pid.0"],
    ] {
        let o = run(&args);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{args:?}: {stderr}");
        assert!(
            stdout.lines().next().unwrap().contains(&dead),
            "{args:?}: {stdout}"
        );
        assert!(stderr.contains(&dead), "{args:?}: {stderr}");
    }
    let v: Value = serde_json::from_slice(&run(&["show", "--json"]).stdout).unwrap();
    assert_eq!(
        (v["state"].as_str(), v["owner_alive"].as_bool()),
        (Some("dead"), Some(false))
    );

    // getp: the last value, with the warning.
    let o = run(&["getp", "pid.0.Pgain"]);
    assert_eq!(text(&o).0.trim(), "2000");
    assert!(text(&o).1.contains(&dead), "{}", text(&o).1);

    // setp/sets: exit 1, the owner is gone, how to clean up; nothing written.
    for args in [
        vec!["setp", "pid.0.Pgain", "5"],
        vec!["sets", "estop-stop", "1"],
    ] {
        let o = run(&args);
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&dead)
                && stderr.contains("nothing was written")
                && stderr.contains(&format!("rm /dev/shm/rtapi-{inst}"))
                && stderr.contains(&format!("rtapi run CONFIG.toml --instance {inst}")),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(text(&run(&["getp", "pid.0.Pgain"])).0.trim(), "2000");
    assert_eq!(text(&run(&["getp", "estop-stop"])).0.trim(), "FALSE");

    // watch: nothing to watch.
    let o = run(&["watch", "pid.0.Pgain", "--count", "3"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).0.is_empty() && text(&o).1.contains(&dead),
        "{:?}",
        text(&o)
    );
}
