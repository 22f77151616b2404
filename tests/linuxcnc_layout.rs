//! The master runs LinuxCNC's modules only on a release whose HAL structures it knows (issue 45):
//! a release it does not know is refused before hal_lib is loaded, a hal_lib whose structures are
//! laid out otherwise is refused at start with nothing written into its HAL, and `rtapi detect`
//! says which LinuxCNC is installed and whether its own `rtapi_app` runs realtime here.
//!
//! The master runs in a test's own IPC and mount namespaces (`common::master_ns`), where a test
//! mounts a `linuxcnc_var` of another version or a stand-in hal_lib (`common/lcnc/fake_hal_lib.c`,
//! whose HAL block is a file) over the installed ones; only the master of that test sees them.

mod common;

use common::master_ns::{missing, wait_exit, Ipc, Master, HAL_KEY};
use common::skipping::{skip, Prereq};

fn skip_or_fail(test: &str, why: &str) {
    skip(test, why, Prereq::Ci);
}
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION_FILE: &str = "/usr/bin/linuxcnc_var";
const HAL_LIB: &str = "/usr/lib/linuxcnc/modules/hal_lib.so";

/// Whether this test can run here; prints why not (and fails under CI) when it cannot.
fn can_run(test: &str) -> bool {
    match missing() {
        None => true,
        Some(why) => {
            skip_or_fail(test, &why);
            false
        }
    }
}

/// A `linuxcnc_var` that says LinuxCNC `version`, as LinuxCNC's own script does.
fn version_script(dir: &Path, version: &str) -> PathBuf {
    let p = dir.join("linuxcnc_var");
    std::fs::write(
        &p,
        format!(
            "#!/bin/bash\ncase \"$1\" in\n    LINUXCNCVERSION) echo {version};;\n    *) exit 1;;\nesac\n"
        ),
    )
    .unwrap();
    p
}

/// The stand-in hal_lib, with LinuxCNC 2.9's `hal_comp_t` or one with a field moved.
fn fake_hal_lib(dir: &Path, moved: bool) -> PathBuf {
    let out = dir
        .join(if moved { "moved" } else { "same" })
        .join("hal_lib.so");
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/lcnc/fake_hal_lib.c");
    let mut c = Command::new("gcc");
    c.args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src);
    if moved {
        c.arg("-DMOVED");
    }
    let o = c.output().expect("gcc (a C compiler) runs");
    assert!(
        o.status.success(),
        "gcc {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Mounts `file` over `target` in the test's mount namespace.
fn mount_over(ipc: &Ipc, file: &Path, target: &str) {
    let o = ipc
        .enter()
        .args(["mount", "--bind"])
        .arg(file)
        .arg(target)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mount --bind {} {target}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The master in `ipc`, with the stand-in hal_lib's files under `dir`; it has exited or is
/// listening when this returns (`listening` says which the test expects).
fn master(ipc: &Ipc, dir: &Path, env: &[(&str, &str)], listening: bool) -> Master {
    let mut c = ipc.master_command(0, &[]);
    c.env("FAKE_HAL_BLOCK", dir.join("block"))
        .env("FAKE_HAL_LOADED", dir.join("loaded"));
    for (k, v) in env {
        c.env(k, v);
    }
    let mut m = Master(c.spawn().unwrap());
    if listening {
        common::eventually::until_true(
            "the master listening",
            common::eventually::GENEROUS,
            || ipc.master_log(0).contains("listening on"),
        );
    } else {
        let status = wait_exit(&mut m);
        assert!(
            !status.success(),
            "the master ran: {status}\n{}",
            ipc.master_log(0)
        );
    }
    m
}

/// Ends a listening master with SIGTERM and waits for it.
fn stop(ipc: &Ipc, m: &mut Master) {
    // SAFETY: kill(2) of our own child, still running.
    unsafe { libc::kill(m.id() as i32, libc::SIGTERM) };
    let status = wait_exit(m);
    assert!(status.success(), "{status}\n{}", ipc.master_log(0));
}

#[test]
fn a_release_rtapi_does_not_know_is_refused_before_hal_lib_is_loaded() {
    if !can_run("a_release_rtapi_does_not_know_is_refused_before_hal_lib_is_loaded") {
        return;
    }
    for (version, says) in [
        ("2.9.11", "RTAPI_LINUXCNC_ALLOW=2.9.11"),
        ("2.10.0~pre0", "2.10 (development)"),
        ("2.8.4", "verified for 2.9.0 to 2.9.10 only"),
    ] {
        let ipc = Ipc::new();
        let dir = ipc.dir.path().to_path_buf();
        mount_over(&ipc, &version_script(&dir, version), VERSION_FILE);
        mount_over(&ipc, &fake_hal_lib(&dir, false), HAL_LIB);
        let _m = master(&ipc, &dir, &[], false);
        let log = ipc.master_log(0);
        assert!(
            log.contains(&format!("LinuxCNC {version}"))
                && log.contains(says)
                && log.contains("nothing was started"),
            "{version}: {log}"
        );
        // Refused before hal_lib: never loaded, no HAL segment, no socket.
        assert!(
            !dir.join("loaded").exists() && !log.contains("listening"),
            "{version}: hal_lib was loaded: {log}"
        );
        assert_eq!(ipc.seg(HAL_KEY), None, "{version}: {log}");
        assert!(!ipc.fifo().exists(), "{version}: the socket was made");

        // `rtapi linuxcnc` refuses too, before LinuxCNC or the master start.
        let ini = dir.join("machine.ini");
        std::fs::write(&ini, "[EMC]\nMACHINE = none\n").unwrap();
        let t0 = std::time::Instant::now();
        let o = ipc
            .enter()
            .arg(env!("CARGO_BIN_EXE_rtapi"))
            .arg("linuxcnc")
            .arg(&ini)
            .env("RTAPI_FIFO_PATH", ipc.fifo())
            .env("RTAPI_UID", common::master_ns::NOBODY.to_string())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success()
                && err.contains(&format!("LinuxCNC {version}"))
                && err.contains(says),
            "rtapi linuxcnc with {version}: {}\n{err}",
            o.status
        );
        assert!(
            !dir.join("loaded").exists() && t0.elapsed() < std::time::Duration::from_secs(20),
            "rtapi linuxcnc with {version} started something: {err}"
        );
    }
}

#[test]
fn a_release_named_by_rtapi_linuxcnc_allow_runs_and_its_layout_is_still_checked() {
    if !can_run("a_release_named_by_rtapi_linuxcnc_allow_runs_and_its_layout_is_still_checked") {
        return;
    }
    // The real hal_lib (2.9's layout) under a version rtapi does not know, allowed by name.
    let ipc = Ipc::new();
    let dir = ipc.dir.path().to_path_buf();
    mount_over(&ipc, &version_script(&dir, "2.9.11"), VERSION_FILE);
    let mut m = master(&ipc, &dir, &[("RTAPI_LINUXCNC_ALLOW", "2.9.11")], true);
    let log = ipc.master_log(0);
    assert!(
        log.contains("LinuxCNC 2.9.11 (not known to rtapi, accepted by RTAPI_LINUXCNC_ALLOW"),
        "{log}"
    );
    ipc.ok(&["loadrt", "siggen"]);
    stop(&ipc, &mut m);

    // Allowing one release allows no other.
    let ipc = Ipc::new();
    let dir = ipc.dir.path().to_path_buf();
    mount_over(&ipc, &version_script(&dir, "2.9.12"), VERSION_FILE);
    let _m = master(&ipc, &dir, &[("RTAPI_LINUXCNC_ALLOW", "2.9.11")], false);
    assert!(ipc
        .master_log(0)
        .contains("LinuxCNC 2.9.12 is not a release rtapi knows"));

    // Allowed, but its hal_lib laid out otherwise: refused all the same.
    let ipc = Ipc::new();
    let dir = ipc.dir.path().to_path_buf();
    mount_over(&ipc, &version_script(&dir, "2.9.11"), VERSION_FILE);
    mount_over(&ipc, &fake_hal_lib(&dir, true), HAL_LIB);
    let _m = master(&ipc, &dir, &[("RTAPI_LINUXCNC_ALLOW", "2.9.11")], false);
    let log = ipc.master_log(0);
    assert!(
        log.contains("LinuxCNC 2.9.11's hal_lib") && log.contains("hal_comp_t.name"),
        "{log}"
    );
}

#[test]
fn a_hal_lib_with_a_moved_field_is_refused_naming_the_release_and_nothing_is_written() {
    if !can_run("a_hal_lib_with_a_moved_field_is_refused_naming_the_release_and_nothing_is_written")
    {
        return;
    }
    let ipc = Ipc::new();
    let dir = ipc.dir.path().to_path_buf();
    mount_over(&ipc, &version_script(&dir, "2.9.4"), VERSION_FILE);
    mount_over(&ipc, &fake_hal_lib(&dir, true), HAL_LIB);
    let _m = master(&ipc, &dir, &[], false);
    let log = ipc.master_log(0);
    assert!(dir.join("loaded").exists(), "hal_lib was not loaded: {log}");
    assert!(
        log.contains("LinuxCNC 2.9.4's hal_lib")
            && log.contains("hal_comp_t.name")
            && log.contains("hal_comp_t.make")
            && log.contains("refuses")
            && !log.contains("listening"),
        "{log}"
    );
    // Every byte of the HAL block is what hal_lib itself last wrote there.
    let (block, mine) = (
        std::fs::read(dir.join("block")).unwrap(),
        std::fs::read(dir.join("block.mine")).unwrap(),
    );
    assert_eq!(block.len(), mine.len());
    let changed: Vec<usize> = (0..block.len()).filter(|&i| block[i] != mine[i]).collect();
    assert!(
        changed.is_empty(),
        "the master wrote into the HAL at {changed:?}"
    );
    assert!(!ipc.fifo().exists(), "the socket is left");

    // The control: the same stand-in with 2.9's layout is accepted.
    let ipc = Ipc::new();
    let dir = ipc.dir.path().to_path_buf();
    mount_over(&ipc, &version_script(&dir, "2.9.4"), VERSION_FILE);
    mount_over(&ipc, &fake_hal_lib(&dir, false), HAL_LIB);
    let mut m = master(&ipc, &dir, &[], true);
    assert!(
        ipc.master_log(0)
            .contains("LinuxCNC 2.9.4 (verified with rtapi: Debian 13 (trixie)"),
        "{}",
        ipc.master_log(0)
    );
    stop(&ipc, &mut m);
    let (block, mine) = (
        std::fs::read(dir.join("block")).unwrap(),
        std::fs::read(dir.join("block.mine")).unwrap(),
    );
    assert!(block == mine, "the master wrote into the stand-in's HAL");
}

/// `linuxcnc_var LINUXCNCVERSION` of the installed LinuxCNC, run as LinuxCNC's users run it.
fn installed_version() -> Option<String> {
    let o = Command::new(VERSION_FILE)
        .arg("LINUXCNCVERSION")
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

#[test]
fn detect_names_the_installed_linuxcnc_and_whether_its_rtapi_app_runs_realtime_here() {
    let Some(version) = installed_version() else {
        skip_or_fail(
            "detect_names_the_installed_linuxcnc_and_whether_its_rtapi_app_runs_realtime_here",
            "LinuxCNC (linuxcnc-uspace) is not installed",
        );
        return;
    };
    let kernel = std::fs::read_to_string("/proc/sys/kernel/version").unwrap();
    let rt_kernel = kernel.to_uppercase().contains("PREEMPT_RT")
        || kernel.to_uppercase().contains("PREEMPT RT");
    let (code, out, err) = common::run(&mut common::rtapi_command(&["detect", "--json"]));
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let l = &v["linuxcnc"];
    assert_eq!(l["version"]["text"], version.as_str(), "{l}");
    if !rt_kernel {
        assert_eq!(l["stock_realtime"], false, "{l}");
        assert!(
            l["stock_reason"]
                .as_str()
                .is_some_and(|r| r.contains("not PREEMPT_RT") && r.contains(&version)),
            "{l}"
        );
    }
    let (code, out, err) = common::run(&mut common::rtapi_command(&["detect"]));
    assert_eq!(code, 0, "{err}");
    let section = out
        .split("\nLinuxCNC\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no LinuxCNC section: {out}"));
    assert!(
        section.contains(&format!("installed      {version} (")),
        "{section}"
    );
    if !rt_kernel {
        assert!(section.contains("its rtapi_app  NOT realtime: the kernel is not PREEMPT_RT"));
    }
    // Where this process may use SCHED_FIFO, rtapi's master will: the reason to use it, in one line.
    if v["privileges"]["sched_fifo"] == true {
        assert!(
            section.contains("rtapi linuxcnc runs LinuxCNC's threads SCHED_FIFO here"),
            "{section}"
        );
    }
}

/// A fixture root: LinuxCNC `version`, its rtapi_app setuid root, a kernel whose version string is
/// `kernel`, `/sys/kernel/realtime` present or not.
fn fixture(version: &str, kernel: &str, sys_realtime: bool) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = d.path();
    for sub in ["usr/bin", "proc/sys/kernel", "sys/kernel"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    version_script(&root.join("usr/bin"), version);
    let app = root.join("usr/bin/rtapi_app");
    std::fs::write(&app, "").unwrap();
    std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o4755)).unwrap();
    std::fs::write(root.join("proc/sys/kernel/version"), format!("{kernel}\n")).unwrap();
    std::fs::write(
        root.join("proc/sys/kernel/osrelease"),
        "6.12.38+deb13-rt-amd64\n",
    )
    .unwrap();
    if sys_realtime {
        std::fs::write(root.join("sys/kernel/realtime"), "1\n").unwrap();
    }
    d
}

#[test]
fn detect_applies_each_releases_own_realtime_rule_to_a_mainline_preempt_rt_kernel() {
    if !common::is_root() {
        skip_or_fail(
            "detect_applies_each_releases_own_realtime_rule_to_a_mainline_preempt_rt_kernel",
            "a setuid-root rtapi_app in the fixture needs root",
        );
        return;
    }
    let rt = "#1 SMP PREEMPT_RT Debian 6.12.38-1 (2025-07-16)";
    let linuxcnc = |version: &str, sys_realtime: bool| {
        let d = fixture(version, rt, sys_realtime);
        let root = d.path().to_str().unwrap();
        let (code, out, err) = common::run(&mut common::rtapi_command(&[
            "detect",
            "--json",
            "--sysroot",
            root,
        ]));
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["linuxcnc"].clone()
    };
    // Debian 13's RT kernel has no /sys/kernel/realtime: 2.9.4 runs non-realtime (#3262).
    let l = linuxcnc("2.9.4", false);
    assert_eq!(l["stock_realtime"], false, "{l}");
    assert!(l["stock_reason"].as_str().unwrap().contains("#3262"), "{l}");
    assert_eq!(l["support"], "verified", "{l}");
    // 2.9.8 is the last release with the file test (LinuxCNC's source, v2.9.8 against v2.9.9).
    assert_eq!(linuxcnc("2.9.8", false)["stock_realtime"], false);
    // 2.9.9 needs the version string only.
    let l = linuxcnc("2.9.9", false);
    assert_eq!(l["stock_realtime"], true, "{l}");
    // A kernel that still has the file: 2.9.4 runs realtime.
    assert_eq!(linuxcnc("2.9.4", true)["stock_realtime"], true);
    // What the master does with other releases.
    assert_eq!(linuxcnc("2.9.7", false)["support"], "same-layout");
    assert_eq!(linuxcnc("2.10.0~pre0", false)["support"], "protocol210");
    assert_eq!(linuxcnc("3.0.0", false)["support"], "unknown");
}
