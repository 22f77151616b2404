//! rtapi's master as LinuxCNC 2.9's `/usr/bin/rtapi_app` (`rtapi divert on`), driven by LinuxCNC's
//! own unchanged `halcmd`, `halrun` and Python `hal` module, and `rtapi divert on|off|status` in a
//! throwaway copy of a reference Debian root.
//!
//! Nothing of the machine is changed: the personality tests bind a copy of the master (with the
//! file capabilities rtapi's package gives it) over `/usr/bin/rtapi_app` in a mount namespace of
//! the test's own (with its own IPC namespace: LinuxCNC's SysV keys are fixed); the divert tests
//! mount an overlay over the cached root (its upper directory a temporary one) in such a namespace
//! and run `rtapi divert` there, chrooted (that root's own `dpkg-divert`) and with `--root`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use common::eventually::{until_true, GENEROUS};
use common::lcnc_machine::proc_sched;
use common::master_ns::{self, Ipc, HAL_KEY, NOBODY, RTAPI_KEY};

const THREAD: &str = "divert-thread";

/// A test's namespaces with rtapi's master bound over `/usr/bin/rtapi_app` (`None`: the machine's
/// own LinuxCNC `rtapi_app`, the reference); every `rtapi_app` of the session ended when dropped.
struct Session {
    /// LinuxCNC's scripts refuse to start while any `rtapi_app` runs (`ps -C`): the machine's one
    /// LinuxCNC session is this test's while it lives.
    _lock: common::linuxcnc::SessionLock,
    ipc: Ipc,
    _copy: Option<tempfile::TempDir>,
    n: std::cell::Cell<u32>,
}

/// What a program printed and how it ended.
struct Ran {
    status: ExitStatus,
    out: String,
    err: String,
}

impl Session {
    fn new(diverted: bool) -> Session {
        let lock = common::linuxcnc::SessionLock::take();
        let ipc = Ipc::new();
        let copy = diverted.then(|| {
            let (d, bin) = master_copy();
            let o = ipc
                .enter()
                .args(["mount", "--bind"])
                .arg(&bin)
                .arg("/usr/bin/rtapi_app")
                .output()
                .unwrap();
            assert!(o.status.success(), "mount --bind: {}", common::text(&o).1);
            d
        });
        Session {
            _lock: lock,
            ipc,
            _copy: copy,
            n: std::cell::Cell::new(0),
        }
    }

    fn fifo(&self) -> PathBuf {
        self.ipc.fifo()
    }

    /// `prog args` in the namespaces as `user` (`nobody`, or `root`), with the session's HOME,
    /// socket, rtapi instance and flavor, and `extra` variables; its output through files (a
    /// master it starts keeps them open after it exits).
    fn run_as(&self, user: &str, extra: &[&str], prog: &str, args: &[&str]) -> Ran {
        self.run_in(false, user, extra, prog, args)
    }

    /// [`Session::run_as`], in a PID namespace of its own when `alone` (LinuxCNC's `realtime`
    /// script looks for `rtapi_app` machine-wide, `ps -C`; every process of it ends with it).
    fn run_in(&self, alone: bool, user: &str, extra: &[&str], prog: &str, args: &[&str]) -> Ran {
        let n = self.n.get();
        self.n.set(n + 1);
        let dir = self.ipc.dir.path();
        let (o, e) = (
            dir.join(format!("run.{n}.out")),
            dir.join(format!("run.{n}.err")),
        );
        let mut c = self.ipc.enter();
        if alone {
            c.args(["unshare", "--pid", "--fork", "--mount-proc"]);
        }
        c.args(["runuser", "-u", user, "--", "env"])
            .arg(format!("HOME={}", dir.display()))
            .arg(format!("RTAPI_FIFO_PATH={}", self.fifo().display()))
            .arg(format!("RTAPI_INSTANCE={}", self.ipc.inst))
            .arg("RTAPI_FLAVOR=posix")
            .args(extra)
            .arg(prog)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&o).unwrap())
            .stderr(std::fs::File::create(&e).unwrap());
        let status = c.status().unwrap();
        Ran {
            status,
            out: std::fs::read_to_string(&o).unwrap_or_default(),
            err: std::fs::read_to_string(&e).unwrap_or_default(),
        }
    }

    fn nobody(&self, prog: &str, args: &[&str]) -> Ran {
        self.run_as("nobody", &[], prog, args)
    }

    fn halcmd_ok(&self, args: &[&str]) -> String {
        let r = self.nobody("/usr/bin/halcmd", args);
        assert!(
            r.status.success(),
            "halcmd {args:?}: {}\n{}\n{}\nmaster: {}",
            r.status,
            r.out,
            r.err,
            self.masters_text()
        );
        r.out
    }

    /// The session's running `rtapi_app` processes: named so (what LinuxCNC's `ps -C rtapi_app`
    /// finds) and with this session's socket in their environment.
    fn masters(&self) -> Vec<u32> {
        let want = format!("RTAPI_FIFO_PATH={}", self.fifo().display());
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "rtapi_app")
                    && !common::ended(*pid)
                    && std::fs::read(format!("/proc/{pid}/environ"))
                        .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == want.as_bytes()))
            })
            .collect()
    }

    fn masters_text(&self) -> String {
        format!("{:?}", self.masters())
    }

    fn wait_no_master(&self) {
        until_true("no rtapi_app left", GENEROUS, || self.masters().is_empty());
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for pid in self.masters() {
            // SAFETY: kill(2) of a process this test's session started (its rtapi_app).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

/// A copy of this build's master with the file capabilities rtapi's package gives it, in a
/// directory of its own (removed with the guard).
fn master_copy() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::Builder::new()
        .prefix("rtapi-app-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = d.path().join("rtapi-lcnc-master");
    std::fs::copy(master_ns::master_bin(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new("setcap")
        .args(["cap_sys_nice,cap_ipc_lock=ep"])
        .arg(&bin)
        .output()
        .expect("setcap (libcap2-bin)");
    assert!(o.status.success(), "setcap: {}", common::text(&o).1);
    (d, bin)
}

/// Why these tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    master_ns::missing().or_else(|| {
        ["/usr/sbin/setcap", "/usr/bin/halrun"]
            .iter()
            .find(|p| !Path::new(p).exists())
            .map(|p| format!("{p} is missing (libcap2-bin, linuxcnc-uspace)"))
    })
}

/// The threads of `pid` as (name, policy).
fn thread_policies(pid: u32) -> Vec<(String, String)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| {
                    let (name, policy, _) =
                        proc_sched(&format!("{pid}/task/{}", t.file_name().to_string_lossy()))?;
                    Some((name, policy))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn real_uid(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every SysV segment of the session's LinuxCNC keys still there.
fn lcnc_segments(s: &Session) -> Vec<master_ns::Seg> {
    s.ipc
        .segments()
        .into_iter()
        .filter(|g| g.key == HAL_KEY || g.key == RTAPI_KEY)
        .collect()
}

#[test]
fn halcmd_drives_rtapi_as_rtapi_app_master_and_forwarder() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let s = Session::new(true);
    s.halcmd_ok(&[
        "loadrt",
        "threads",
        &format!("name1={THREAD}"),
        "period1=1000000",
    ]);
    // One master, named rtapi_app, the user's, in the foreground of nothing (setsid), its thread FIFO.
    let masters = s.masters();
    assert_eq!(masters.len(), 1, "one rtapi_app: {masters:?}");
    let pid = masters[0];
    assert_eq!(real_uid(pid), Some(NOBODY), "the master runs as the user");
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(
        exe.ends_with("rtapi_app") || exe.ends_with("rtapi-lcnc-master"),
        "{exe:?}"
    );
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(maps.contains("/hal_lib.so"), "LinuxCNC's hal_lib in it");
    until_true("the thread SCHED_FIFO", GENEROUS, || {
        thread_policies(pid).iter().any(|(_, p)| p == "SCHED_FIFO")
    });
    s.halcmd_ok(&["loadrt", "siggen"]);
    s.halcmd_ok(&["addf", "siggen.0.update", THREAD]);
    s.halcmd_ok(&["start"]);
    let shown = s.halcmd_ok(&["show", "thread"]);
    assert!(
        shown.contains(THREAD) && shown.contains("siggen.0.update"),
        "{shown}"
    );
    assert_eq!(s.masters(), vec![pid], "loads went to the one master");

    // A second rtapi_app forwards, prints nothing, and exits with the master's answer (-1 → 255).
    let r = s.nobody("/usr/bin/rtapi_app", &["load", "nosuchmodule"]);
    assert_eq!(r.status.code(), Some(255), "{}{}", r.out, r.err);
    assert_eq!(
        (r.out.as_str(), r.err.as_str()),
        ("", ""),
        "the forwarder is silent"
    );
    let r = s.nobody("/usr/bin/rtapi_app", &["unload", "siggen"]);
    assert_eq!(r.status.code(), Some(0), "{}", r.err);
    let r = s.nobody("/usr/bin/halcmd", &["loadrt", "nosuchmodule"]);
    assert!(!r.status.success(), "a failing loadrt fails halcmd");
    assert_eq!(s.masters(), vec![pid], "the master survives a failed load");

    // The last unload ends the master (2.9's rule), and it leaves nothing behind.
    s.halcmd_ok(&["unload", "all"]);
    s.wait_no_master();
    assert!(!s.fifo().exists(), "the socket is gone");
    assert!(
        !common::segment_exists(&s.ipc.inst),
        "rtapi's instance segment is gone"
    );
    let left: Vec<_> = lcnc_segments(&s)
        .into_iter()
        .filter(|g| g.nattch > 0)
        .collect();
    assert!(left.is_empty(), "segments still attached: {left:?}");

    // `rtapi_app exit` (LinuxCNC's `realtime stop`) ends a master that has modules.
    s.halcmd_ok(&["loadrt", "siggen"]);
    assert_eq!(s.masters().len(), 1);
    let r = s.nobody("/usr/bin/rtapi_app", &["exit"]);
    assert_eq!(r.status.code(), Some(0), "{}", r.err);
    s.wait_no_master();
    assert!(!s.fifo().exists(), "the socket is gone after exit");
    assert!(!common::segment_exists(&s.ipc.inst));
}

#[test]
fn halrun_runs_a_hal_file_on_rtapi_and_realtime_stop_ends_it() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    for diverted in [false, true] {
        let s = Session::new(diverted);
        let hal = s.ipc.dir.path().join("t.hal");
        std::fs::write(
            &hal,
            format!(
                "loadrt threads name1={THREAD} period1=1000000\nloadrt siggen\naddf siggen.0.update \
                 {THREAD}\nstart\nshow thread\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hal, std::fs::Permissions::from_mode(0o644)).unwrap();
        let r = s.run_in(
            true,
            "nobody",
            &[],
            "/usr/bin/halrun",
            &["-f", &hal.to_string_lossy()],
        );
        let which = if diverted { "rtapi" } else { "LinuxCNC's own" };
        assert!(
            r.status.success(),
            "halrun on {which}: {}\n{}\n{}",
            r.status,
            r.out,
            r.err
        );
        assert!(r.out.contains("siggen.0.update"), "{which}: {}", r.out);
        assert!(
            !r.err.contains("failed to die"),
            "{which}: realtime stop waited for rtapi_app in vain: {}",
            r.err
        );
        // halrun's `realtime stop` waited for it: no rtapi_app is left, nor its socket.
        assert!(s.masters().is_empty(), "{which}: rtapi_app left running");
        assert!(!s.fifo().exists(), "{which}: socket left");
        if diverted {
            assert!(
                r.err.contains("rtapi: LinuxCNC realtime master"),
                "halrun's realtime was rtapi's: {}",
                r.err
            );
        }
    }
}

#[test]
fn a_stale_socket_is_replaced_after_three_seconds_as_2_9_does() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let s = Session::new(true);
    // A socket nobody listens on, the user's.
    drop(std::os::unix::net::UnixListener::bind(s.fifo()).unwrap());
    std::os::unix::fs::chown(s.fifo(), Some(NOBODY), Some(NOBODY)).unwrap();
    let t0 = std::time::Instant::now();
    let r = s.nobody("/usr/bin/rtapi_app", &["exit"]);
    assert_eq!(r.status.code(), Some(0), "{}", r.err);
    assert!(
        r.err.contains("Waited 3 seconds for master.  giving up."),
        "{}",
        r.err
    );
    assert!(t0.elapsed() >= std::time::Duration::from_secs(3));
    assert!(
        !s.fifo().exists(),
        "the master it became removed its socket"
    );
}

#[test]
fn root_without_rtapi_uid_is_refused_as_2_9_does() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    for diverted in [false, true] {
        let s = Session::new(diverted);
        let r = s.run_as("root", &[], "/usr/bin/rtapi_app", &["load", "siggen"]);
        assert_eq!(r.status.code(), Some(1), "diverted {diverted}: {}", r.err);
        assert!(
            r.err
                .contains("Refusing to run as root without fallback UID specified"),
            "diverted {diverted}: {}",
            r.err
        );
        assert!(s.masters().is_empty() && !s.fifo().exists());
    }
}

/// LinuxCNC's user-space `rtapi_is_realtime()` (Python's `hal.is_rt`) looks at
/// `/usr/bin/rtapi_app`'s mode: root's and setuid, or not realtime at all. rtapi's master is not
/// setuid, so LinuxCNC's Python says "sim" with it even where its threads run SCHED_FIFO (the gap
/// the guide documents); with LinuxCNC's own, `LINUXCNC_FORCE_REALTIME=1` says "rt" on this
/// kernel.
#[test]
fn hal_is_rt_sees_a_non_setuid_rtapi_app_as_not_realtime() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let py = "import hal; print(hal.is_rt, hal.is_sim)";
    for (diverted, want) in [(false, "1 0"), (true, "0 1")] {
        let s = Session::new(diverted);
        let r = s.run_as(
            "nobody",
            &["LINUXCNC_FORCE_REALTIME=1"],
            "/usr/bin/python3",
            &["-c", py],
        );
        assert!(r.status.success(), "{}", r.err);
        assert_eq!(r.out.trim(), want, "diverted {diverted}");
    }
}

/// LinuxCNC's unchanged `linuxcnc` script runs sim/axis (estop reset, machine on, homed, held;
/// its display on Xvfb) with rtapi's master as `/usr/bin/rtapi_app`: the servo thread runs SCHED_FIFO in the
/// process named `rtapi_app` that maps motmod, and the script's shutdown leaves nothing.
#[test]
fn linuxcnc_sim_axis_runs_on_the_diverted_rtapi_app() {
    use common::lcnc_machine::{self, Launcher, Machine};
    if !lcnc_machine::ready("rtapi_app_divert") {
        return;
    }
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let (_dir, bin) = master_copy();
    let mut m = Machine::sim_axis("diverted", Vec::new());
    m.hold_seconds = 2.0;
    let run = lcnc_machine::run(&Launcher::Diverted(bin), &m)
        .unwrap_or_else(|e| panic!("{e}\n{}", e.log));
    assert!(
        run.log.contains("rtapi: LinuxCNC realtime master"),
        "LinuxCNC's realtime was rtapi's: {}",
        run.log
    );
    let t = run
        .servo_thread
        .as_ref()
        .unwrap_or_else(|| panic!("no servo thread found: {}", run.log));
    assert_eq!(t.process, "rtapi_app", "{t}");
    t.check(true, 1e6).unwrap_or_else(|e| panic!("{e}"));
}

// ---- rtapi divert on|off|status in a throwaway copy of a reference root ---------------------------

/// The cached trixie root (never written), or why not.
fn reference_root() -> Result<PathBuf, String> {
    let r = PathBuf::from("/var/cache/rtapi/lcnc-roots/trixie");
    if !r.join("usr/bin/rtapi_app").is_file() || !r.join("usr/bin/dpkg-divert").is_file() {
        return Err(format!(
            "{} is not a LinuxCNC reference root (scripts/lcnc-root build trixie)",
            r.display()
        ));
    }
    if !common::is_root() {
        return Err("needs root (mount namespace, overlayfs, chroot)".into());
    }
    Ok(r)
}

fn sha256(p: &Path, ipc: &Ipc) -> String {
    let o = ipc.enter().arg("sha256sum").arg(p).output().unwrap();
    assert!(o.status.success(), "sha256sum {}", p.display());
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A writable overlay of the reference root, seen only in `ipc`'s mount namespace, with this
/// build's `rtapi` and master installed in its `/usr/bin` (the master with its capabilities).
struct Overlay {
    ipc: Ipc,
    merged: PathBuf,
    _dir: tempfile::TempDir,
}

impl Overlay {
    fn new(lower: &Path) -> Overlay {
        let ipc = Ipc::new();
        let dir = tempfile::Builder::new()
            .prefix("divert-root-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let (upper, work, merged) = (
            dir.path().join("upper"),
            dir.path().join("work"),
            dir.path().join("merged"),
        );
        for d in [&upper, &work, &merged] {
            std::fs::create_dir(d).unwrap();
        }
        let o = ipc
            .enter()
            .args(["mount", "-t", "overlay", "overlay", "-o"])
            .arg(format!(
                "lowerdir={},upperdir={},workdir={}",
                lower.display(),
                upper.display(),
                work.display()
            ))
            .arg(&merged)
            .output()
            .unwrap();
        assert!(o.status.success(), "overlay: {}", common::text(&o).1);
        let ov = Overlay {
            ipc,
            merged,
            _dir: dir,
        };
        for (from, to) in [
            (env!("CARGO_BIN_EXE_rtapi"), "usr/bin/rtapi"),
            (
                env!("CARGO_BIN_EXE_rtapi-lcnc-master"),
                "usr/bin/rtapi-lcnc-master",
            ),
        ] {
            let o = ov
                .ipc
                .enter()
                .args(["install", "-m", "0755", from])
                .arg(ov.merged.join(to))
                .output()
                .unwrap();
            assert!(o.status.success(), "install {to}: {}", common::text(&o).1);
        }
        ov
    }

    fn here(&self, p: &str) -> PathBuf {
        self.merged.join(p.trim_start_matches('/'))
    }

    /// `prog args` chrooted in the root.
    fn chroot(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let o = self
            .ipc
            .enter()
            .arg("chroot")
            .arg(&self.merged)
            .args(args)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .output()
            .unwrap();
        let (out, err) = common::text(&o);
        (o.status, out, err)
    }

    /// Runs `args` in the namespace (not chrooted).
    fn ns(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let o = self.ipc.enter().args(args).output().unwrap();
        let (out, err) = common::text(&o);
        (o.status, out, err)
    }

    fn link(&self) -> Option<PathBuf> {
        let (st, out, _) = self.ns(&[
            "readlink",
            &self.here("/usr/bin/rtapi_app").to_string_lossy(),
        ]);
        st.success().then(|| PathBuf::from(out.trim()))
    }
}

fn divert_cycle(ov: &Overlay, divert: &dyn Fn(&str) -> (ExitStatus, String, String)) {
    let app = ov.here("/usr/bin/rtapi_app");
    let original = sha256(&app, &ov.ipc);
    let listed = |ov: &Overlay| ov.chroot(&["dpkg-divert", "--list"]).1;

    let (st, out, err) = divert("status");
    assert!(st.success() && out.starts_with("off:"), "{out}{err}");

    let (st, out, err) = divert("on");
    assert!(st.success(), "on: {out}{err}");
    assert_eq!(
        ov.link(),
        Some(PathBuf::from("/usr/bin/rtapi-lcnc-master")),
        "{out}{err}"
    );
    assert_eq!(
        sha256(&ov.here("/usr/bin/rtapi_app.linuxcnc"), &ov.ipc),
        original
    );
    let l = listed(ov);
    assert!(
        l.contains("diversion of /usr/bin/rtapi_app to /usr/bin/rtapi_app.linuxcnc by rtapi"),
        "{l}"
    );
    // No capabilities on the master installed here: said, with the setcap line.
    assert!(err.contains("setcap cap_sys_nice,cap_ipc_lock=ep"), "{err}");
    let (st, out, _) = divert("status");
    assert!(st.success() && out.starts_with("on:"), "{out}");

    // Idempotent.
    let (st, out, err) = divert("on");
    assert!(st.success() && out.contains("already on"), "{out}{err}");
    assert_eq!(
        listed(ov).matches("rtapi_app").count(),
        l.matches("rtapi_app").count()
    );

    let (st, out, err) = divert("off");
    assert!(st.success(), "off: {out}{err}");
    assert_eq!(ov.link(), None, "the link is gone");
    assert_eq!(sha256(&app, &ov.ipc), original, "LinuxCNC's own is back");
    let (st, out, _) = ov.ns(&["stat", "-c", "%U %a", &app.to_string_lossy()]);
    assert!(
        st.success() && out.trim() == "root 4755",
        "still setuid root: {out}"
    );
    assert!(!listed(ov).contains("rtapi"), "{}", listed(ov));
    let diverted = ov.here("/usr/bin/rtapi_app.linuxcnc");
    assert!(!ov
        .ns(&["test", "-e", &diverted.to_string_lossy()])
        .0
        .success());
    let (st, out, err) = divert("off");
    assert!(st.success() && out.contains("already off"), "{out}{err}");
    let (st, out, _) = divert("status");
    assert!(st.success() && out.starts_with("off:"), "{out}");
}

#[test]
fn divert_on_off_in_a_reference_root_puts_linuxcncs_own_back() {
    let lower = match reference_root() {
        Ok(r) => r,
        Err(why) => return skip!(Ci, "{why}"),
    };
    // Chrooted: the root's own dpkg-divert, as the package's maintainer scripts run it.
    let ov = Overlay::new(&lower);
    divert_cycle(&ov, &|a| ov.chroot(&["/usr/bin/rtapi", "divert", a]));
    // From outside with --root (the machine's dpkg-divert on the root's database).
    let ov = Overlay::new(&lower);
    let rtapi = ov.here("/usr/bin/rtapi").to_string_lossy().into_owned();
    let root = ov.merged.to_string_lossy().into_owned();
    divert_cycle(&ov, &|a| ov.ns(&[&rtapi, "divert", a, "--root", &root]));
}

#[test]
fn divert_refuses_what_is_not_linuxcncs_or_its_own() {
    let lower = match reference_root() {
        Ok(r) => r,
        Err(why) => return skip!(Ci, "{why}"),
    };
    let ov = Overlay::new(&lower);
    let app = ov.here("/usr/bin/rtapi_app");
    let app_s = app.to_string_lossy().into_owned();
    // A file of someone else's in rtapi_app's place (not setuid root): refused, left as it was.
    let (st, ..) = ov.ns(&["rm", &app_s]);
    assert!(st.success());
    let (st, ..) = ov.ns(&["cp", "/bin/true", &app_s]);
    assert!(st.success());
    let before = sha256(&app, &ov.ipc);
    for action in ["on", "off"] {
        let (st, out, err) = ov.chroot(&["/usr/bin/rtapi", "divert", action]);
        if action == "on" {
            assert_eq!(st.code(), Some(1), "{out}{err}");
            assert!(err.contains("not setuid root"), "{err}");
        } else {
            assert!(st.success() && out.contains("already off"), "{out}{err}");
        }
        assert_eq!(sha256(&app, &ov.ipc), before, "left as it was");
    }
    // A symlink elsewhere: refused by on and off, never removed.
    let (st, ..) = ov.ns(&["ln", "-sf", "/bin/true", &app_s]);
    assert!(st.success());
    for action in ["on", "off"] {
        let (st, out, err) = ov.chroot(&["/usr/bin/rtapi", "divert", action]);
        assert_eq!(st.code(), Some(1), "{action}: {out}{err}");
        assert!(err.contains("a symlink to /bin/true"), "{err}");
        assert_eq!(ov.link(), Some(PathBuf::from("/bin/true")));
    }
    // Not root: on and off refused with the sudo line; status answers.
    let (st, out, err) = ov.chroot(&[
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "/usr/bin/rtapi",
        "divert",
        "on",
    ]);
    assert_eq!(st.code(), Some(1), "{out}{err}");
    assert!(err.contains("sudo rtapi divert on"), "{err}");
}
