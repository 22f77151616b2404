//! Trust, round three: the LinuxCNC master (`rtapi-lcnc-master`) against another ordinary user and
//! against a slow or greedy client of its own session — each finding of the hostile probe replayed.
//!
//! * a HAL segment squatted by another uid in the moment between the master's start and hal_lib's
//!   `shmget` (raced, many tries) is refused, never adopted;
//! * motion's key squatted after the start is refused at `loadrt motmod`; one the session's user
//!   made is still adopted;
//! * another uid cannot command the master: not under `umask 000`, not when the socket's mode is
//!   opened behind the master's back (`SO_PEERCRED`), not from a directory others may write;
//! * a client that drips its request, and twenty idle ones, delay neither another client nor
//!   SIGTERM; a request announcing megabytes is refused before they are read;
//! * a refused module name cannot forge a line of the launcher's report.
//!
//! The clients and the attacker are small Python programs (ctypes for `shmget`) run with `setpriv`
//! as the attacker's uid (no account needed) or as nobody, in the test's IPC namespace.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::eventually;
use eventually::{until, until_true, GENEROUS};

use common::master_ns;
use master_ns::*;

/// The attacker: a uid of no account, neither root nor the session's user.
const ATTACKER: u32 = 4242;

const PYTHON: &str = "/usr/bin/python3";

fn skip_reason() -> Option<String> {
    if let Some(why) = missing() {
        return Some(why);
    }
    for p in [PYTHON, "/usr/bin/setpriv"] {
        if !std::path::Path::new(p).exists() {
            return Some(format!("{p} is missing (python3, util-linux)"));
        }
    }
    None
}

/// `script` (Python) with `args`, as `uid`, in the test's namespaces; its standard output piped.
fn python_as(ns: &Ipc, uid: u32, script: &str, args: &[&str]) -> Child {
    ns.enter()
        .arg("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .args([PYTHON, "-c", script])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The next line of a helper's standard output (bounded by the helper's own deadline).
fn line(out: &mut impl BufRead) -> String {
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    l.trim().to_string()
}

/// Waits for WATCH to exist, then makes the segment KEY of SIZE bytes, mode 0666, as its creator
/// (`IPC_EXCL`: it either makes it or finds it made). Says `ready`, then `created ID` or `lost
/// ERRNO`.
const SQUAT: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.restype = ctypes.c_int
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
watch, key, size = sys.argv[1], int(sys.argv[2], 0), int(sys.argv[3])
deadline = time.monotonic() + 60
print("ready", flush=True)
while not os.path.exists(watch):
    if time.monotonic() > deadline:
        print("timeout", flush=True)
        sys.exit(3)
i = libc.shmget(key, size, 0o1000 | 0o2000 | int(sys.argv[4], 8))
print("created %d" % i if i >= 0 else "lost %d" % ctypes.get_errno(), flush=True)
"#;

fn squat(ns: &Ipc, uid: u32, watch: &str, key: u32, size: usize, mode: &str) -> Child {
    python_as(
        ns,
        uid,
        SQUAT,
        &[watch, &format!("{key:#x}"), &size.to_string(), mode],
    )
}

fn sigterm(c: &Child) {
    // SAFETY: kill(2) of the master this test started (nsenter and env exec it: the child's pid
    // is the master's).
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
}

#[test]
fn a_hal_segment_squatted_at_start_is_refused_never_adopted() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    let (mut won, mut lost) = (0, 0);
    for attempt in 0..10 {
        if won >= 2 && lost + won >= 3 {
            break;
        }
        let ns = Ipc::new();
        let shm = format!("/dev/shm/rtapi-{}", ns.inst);
        // The probe's attack: the moment the master's own segment appears, the HAL key, 0666.
        let mut atk = squat(&ns, ATTACKER, &shm, HAL_KEY, 4 << 20, "666");
        let mut out = BufReader::new(atk.stdout.take().unwrap());
        assert_eq!(line(&mut out), "ready");
        let mut m = Master(ns.spawn_master(attempt, &[]));
        let said = line(&mut out);
        let _ = atk.wait();
        let served = until("the master serving or refusing", GENEROUS, || {
            if let Some(s) = m.try_wait().unwrap() {
                return Some(Err(s));
            }
            ns.master_log(attempt)
                .contains("listening on")
                .then_some(Ok(()))
        });
        let log = ns.master_log(attempt);
        let hal = ns.seg(HAL_KEY);
        eprintln!("attempt {attempt}: attacker {said:?}, master {served:?}, HAL {hal:?}");
        if said.starts_with("created") {
            won += 1;
            // The attacker made the key first: the master must not run on it.
            assert!(
                served.is_err(),
                "the master adopted the HAL segment uid {ATTACKER} made ({hal:?}): {log}"
            );
            assert!(
                log.contains("refused the SysV shared memory segment of key 0x48414c32")
                    && log.contains(&format!("made by uid {ATTACKER}")),
                "{log}"
            );
            let hal = hal.expect("the attacker's segment");
            assert_eq!((hal.cuid, hal.uid, hal.nattch), (ATTACKER, ATTACKER, 0));
            assert!(!std::path::Path::new(&shm).exists(), "{shm} left: {log}");
        } else {
            assert!(said.starts_with("lost"), "{said}");
            lost += 1;
            assert!(served.is_ok(), "{log}");
            let hal = hal.expect("the master's HAL segment");
            assert_eq!((hal.cuid, hal.uid, hal.perms & 0o777), (0, NOBODY, 0o600));
            sigterm(&m);
            assert!(wait_exit(&mut m).success(), "{}", ns.master_log(attempt));
        }
    }
    assert!(
        won > 0,
        "the attacker never made the HAL key before the master in 10 starts ({lost} lost): the \
         squat was not exercised"
    );
}

#[test]
fn a_motion_key_squatted_after_start_is_refused_and_the_sessions_own_is_adopted() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    const SQUATTED: u32 = 0x7e57;
    const USERS: u32 = 0x7e58;
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &["--stay"]));
    for (uid, key) in [(ATTACKER, SQUATTED), (NOBODY, USERS)] {
        let mode = if uid == ATTACKER { "666" } else { "600" };
        let mut c = squat(&ns, uid, "/", key, 1 << 20, mode);
        let mut out = BufReader::new(c.stdout.take().unwrap());
        assert_eq!(line(&mut out), "ready");
        let said = line(&mut out);
        assert!(said.starts_with("created"), "{said}");
        c.wait().unwrap();
    }
    for module in ["trivkins", "tpmod", "homemod"] {
        ns.ok(&["loadrt", module]);
    }
    let o = ns.halcmd(&[
        "loadrt",
        "motmod",
        &format!("key={SQUATTED}"),
        "num_joints=3",
    ]);
    let log = ns.master_log(1);
    let seg = ns.seg(SQUATTED).unwrap();
    assert!(
        !o.status.success(),
        "motmod loaded on the attacker's segment {seg:?}: {log}"
    );
    assert!(
        log.contains(&format!(
            "refused the SysV shared memory segment of key 0x{SQUATTED:08x}"
        )) && log.contains(&format!("made by uid {ATTACKER}"))
            && log.contains("ipcrm -m"),
        "{log}"
    );
    assert_eq!(seg.nattch, 0, "{seg:?}");
    // A segment the session's own user made first (mode 0600) is the session's: adopted.
    ns.ok(&["loadrt", "motmod", &format!("key={USERS}"), "num_joints=3"]);
    let seg = ns.seg(USERS).unwrap();
    assert_eq!((seg.cuid, seg.nattch), (NOBODY, 1), "{seg:?}");
    ns.ok(&["unload", "all"]);
    sigterm(&m);
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
}

/// Connects to PATH and sends REQUEST (Python bytes literal); says `refused ERRNO` if the connect
/// fails, else `reply TEXT` (empty if the master closed without one).
const CLIENT: &str = r#"
import socket, sys, ast
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print("refused %d" % e.errno, flush=True)
    sys.exit(0)
s.sendall(ast.literal_eval(sys.argv[2]))
try:
    r = s.recv(64)
except OSError:
    r = b""
print("reply " + r.decode(errors="replace").strip(), flush=True)
"#;

fn client(ns: &Ipc, uid: u32, request: &str) -> String {
    let mut c = python_as(ns, uid, CLIENT, &[&ns.fifo().to_string_lossy(), request]);
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let l = line(&mut out);
    c.wait().unwrap();
    l
}

#[test]
fn another_user_cannot_command_the_master_whatever_the_sockets_mode() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    // The master started under umask 000 (the probe's setting).
    let mut cmd = ns.master_command(1, &["--stay"]);
    // SAFETY: umask is async-signal-safe and has no memory effects.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    let mut m = Master(cmd.spawn().unwrap());
    until_true("the master listening", GENEROUS, || {
        ns.master_log(1).contains("listening on")
    });
    let meta = std::fs::symlink_metadata(ns.fifo()).unwrap();
    assert_eq!(
        (meta.mode() & 0o777, meta.uid()),
        (0o600, NOBODY),
        "the socket's mode under umask 000"
    );
    let exit = r#"b"1 4 exit""#;
    assert_eq!(
        client(&ns, ATTACKER, exit),
        format!("refused {}", libc::EACCES)
    );
    // The mode opened behind the master's back: the peer's uid still decides.
    std::fs::set_permissions(ns.fifo(), std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(
        client(&ns, ATTACKER, r#"b"2 6 unload7 hal_lib""#),
        format!("reply -{}", libc::EACCES)
    );
    assert_eq!(
        client(&ns, ATTACKER, exit),
        format!("reply -{}", libc::EACCES)
    );
    assert!(m.try_wait().unwrap().is_none(), "{}", ns.master_log(1));
    let log = ns.master_log(1);
    assert!(
        log.contains("refused a connection from pid") && log.contains(&format!("(uid {ATTACKER})")),
        "{log}"
    );
    // The session's user is served.
    ns.ok(&["loadrt", "threads", "name1=t", "period1=1000000"]);
    assert_eq!(client(&ns, NOBODY, exit), "reply 0");
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
}

#[test]
fn a_socket_in_a_directory_others_may_write_is_not_made() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let open = ns.dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Bounded: a master that makes its socket there serves, and the test must fail, not hang.
    let mut m = Master(
        ns.master_command_at(1, &open.join("fifo"), &[])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let status = until("the master refusing to start", GENEROUS, || {
        let s = m.try_wait().unwrap();
        if s.is_none() && open.join("fifo").exists() {
            sigterm(&m);
        }
        s
    });
    let o = std::process::Output {
        status,
        stdout: Vec::new(),
        stderr: {
            let mut e = Vec::new();
            m.stderr.take().unwrap().read_to_end(&mut e).unwrap();
            e
        },
    };
    let (_, err) = common::text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("may be written by other users without the sticky bit")
            && err.contains("RTAPI_FIFO_PATH"),
        "{err}"
    );
    assert!(!open.join("fifo").exists());
    assert!(!std::path::Path::new(&format!("/dev/shm/rtapi-{}", ns.inst)).exists());
}

/// Connects to PATH and drips `1 100000 ` then a byte a second for up to 60 s; says `connected`,
/// then `closed after N s` when the master closes it.
const DRIP: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
print("connected", flush=True)
t0 = time.monotonic()
try:
    for b in b"1 100000 " + b"a" * 60:
        s.send(bytes([b]))
        time.sleep(1)
    print("never closed", flush=True)
except OSError:
    print("closed after %.1f s" % (time.monotonic() - t0), flush=True)
"#;

/// Connects to PATH COUNT times and sends nothing; says `idle`, then holds them 60 s.
const IDLE: &str = r#"
import socket, sys, time
conns = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    conns.append(s)
print("idle", flush=True)
time.sleep(60)
"#;

fn kill(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}

#[test]
fn a_dripping_client_and_idle_ones_delay_neither_another_client_nor_sigterm() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &["--stay"]));
    let fifo = ns.fifo().to_string_lossy().into_owned();
    // The session's own user: the socket lets it in, so only the serve loop protects the others.
    let mut drip = python_as(&ns, NOBODY, DRIP, &[&fifo]);
    let mut drip_out = BufReader::new(drip.stdout.take().unwrap());
    assert_eq!(line(&mut drip_out), "connected");
    let mut idle = python_as(&ns, NOBODY, IDLE, &[&fifo, "20"]);
    let mut idle_out = BufReader::new(idle.stdout.take().unwrap());
    assert_eq!(line(&mut idle_out), "idle");
    // LinuxCNC's own halcmd, meanwhile: a master that waits for the drip (a byte a second for a
    // minute) would hold it for the whole minute.
    let t0 = Instant::now();
    let mut h = ns
        .enter()
        .args(["runuser", "-u", "nobody", "--", "env"])
        .arg(format!("RTAPI_FIFO_PATH={fifo}"))
        .args([
            "/usr/bin/halcmd",
            "loadrt",
            "threads",
            "name1=t",
            "period1=1000000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let bound = Duration::from_secs(40);
    let served = until(
        "halcmd served beside the drip",
        bound + Duration::from_secs(5),
        || {
            if let Some(s) = h.try_wait().unwrap() {
                return Some(Some(s));
            }
            (t0.elapsed() > bound).then_some(None)
        },
    );
    let Some(status) = served else {
        kill(&mut h);
        kill(&mut drip);
        kill(&mut idle);
        sigterm(&m);
        let _ = wait_exit(&mut m);
        panic!(
            "halcmd was not served within {bound:?} beside a dripping client: {}",
            ns.master_log(1)
        );
    };
    assert!(status.success(), "{}", ns.master_log(1));
    // SIGTERM ends the master while the idle connections are still open.
    assert!(idle.try_wait().unwrap().is_none());
    let t1 = Instant::now();
    sigterm(&m);
    let ended = until("the master's exit after SIGTERM", bound, || {
        m.try_wait().unwrap()
    });
    eprintln!("SIGTERM to exit: {:?}", t1.elapsed());
    assert!(ended.success(), "{}", ns.master_log(1));
    // The drip was closed by the master (its deadline, or the master's end), not served.
    let said = line(&mut drip_out);
    assert!(said.starts_with("closed after"), "{said}");
    kill(&mut drip);
    kill(&mut idle);
    assert!(!ns.fifo().exists());
}

/// Announces 4096 arguments of 1 MiB, then sends up to 64 MiB; says `closed after N bytes` when
/// the master closes the connection, or `sent N bytes`.
const FLOOD: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(20)
sent = 0
try:
    s.sendall(b"4096 1048576 ")
    chunk = b"a" * 65536
    while sent < 64 << 20:
        sent += s.send(chunk)
    print("sent %d bytes" % sent, flush=True)
except OSError:
    print("closed after %d bytes" % sent, flush=True)
"#;

fn vm_hwm_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn a_request_announcing_megabytes_is_refused_before_they_are_read() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &["--stay"]));
    let before = vm_hwm_kib(m.id());
    let mut f = python_as(&ns, NOBODY, FLOOD, &[&ns.fifo().to_string_lossy()]);
    let mut out = BufReader::new(f.stdout.take().unwrap());
    let said = line(&mut out);
    f.wait().unwrap();
    let after = vm_hwm_kib(m.id());
    let log = ns.master_log(1);
    let sent: u64 = said
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        said.starts_with("closed after") && sent < 4 << 20,
        "{said}: {log}"
    );
    assert!(
        log.contains("a request of 4096 arguments (at most 64)"),
        "{log}"
    );
    assert!(
        after < before + 16 * 1024,
        "the master's peak memory grew from {before} KiB to {after} KiB"
    );
    ns.ok(&["loadrt", "threads", "name1=t", "period1=1000000"]);
    ns.ok(&["unload", "all"]);
    sigterm(&m);
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
}

#[test]
fn a_refused_module_name_cannot_forge_a_report_line() {
    if let Some(why) = skip_reason() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let (r, w) = nix::unistd::pipe().unwrap();
    let wfd = std::os::fd::AsRawFd::as_raw_fd(&w);
    let mut cmd = ns.master_command(1, &["--stay", "--report-fd", "3"]);
    // SAFETY: dup2 is async-signal-safe; it puts the pipe's write end on descriptor 3 of the
    // master (nsenter and env keep it open across their execs).
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(wfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut m = Master(cmd.spawn().unwrap());
    drop(w);
    let mut report = BufReader::new(std::fs::File::from(r));
    assert!(line(&mut report).starts_with("ready"));
    // "load" of a name that ends a line, says "done", and ends another.
    // (A Python bytes literal: "evil\ndone\n" is 10 bytes.)
    assert_eq!(
        client(&ns, NOBODY, r#"b"2 4 load10 evil\ndone\n""#),
        "reply -1"
    );
    let served = line(&mut report);
    assert!(served.starts_with("served load evil"), "{served}");
    assert!(served.ends_with(" -1"), "one line, escaped: {served}");
    assert_eq!(client(&ns, NOBODY, r#"b"1 4 exit""#), "reply 0");
    let mut rest = String::new();
    report.read_to_string(&mut rest).unwrap();
    assert_eq!(
        rest.lines().collect::<Vec<_>>(),
        ["served exit 0", "done"],
        "{served}"
    );
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
}
