//! rtapi as LinuxCNC 2.9's realtime master (`rtapi-lcnc-master`, `rtapi linuxcnc`), driven by
//! LinuxCNC's own programs: `halcmd`, `/usr/bin/rtapi_app` (as the slave it is), the `linuxcnc` script,
//! its Python `linuxcnc` module.
//!
//! LinuxCNC's HAL lives in fixed SysV keys and its NML server on TCP port 5005, one session per
//! machine, and this machine is shared. So every test runs in namespaces of its own: an IPC namespace
//! (held by a `sleep` holder process, entered with `nsenter`) for the master tests; IPC + mount (a
//! private `/tmp` for LinuxCNC's lock file) + PID (`pidof` in its Cleanup sees only the session) +
//! network (its own loopback) for the whole machine. The segments a test looks at are exactly the
//! namespace's, and nothing of it can touch another session's.
//!
//! The master runs as root with `RTAPI_UID` = nobody (LinuxCNC's rule), LinuxCNC's programs as
//! nobody (`runuser`), HOME and the socket in a directory the test made.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::eventually;
use eventually::{until, until_true, GENEROUS};

use common::master_ns;
use master_ns::*;

/// (thread name, SCHED policy number, allowed CPUs) of each thread of `pid`.
fn threads(pid: u32) -> Vec<(String, i32, String)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|t| {
            let p = t.path();
            let comm = std::fs::read_to_string(p.join("comm"))
                .ok()?
                .trim()
                .to_string();
            let sched = std::fs::read_to_string(p.join("sched")).ok()?;
            let policy = sched
                .lines()
                .find(|l| l.starts_with("policy"))?
                .split(':')
                .nth(1)?
                .trim()
                .parse()
                .ok()?;
            let status = std::fs::read_to_string(p.join("status")).ok()?;
            let cpus = status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list"))?
                .split(':')
                .nth(1)?
                .trim()
                .to_string();
            Some((comm, policy, cpus))
        })
        .collect()
}

/// One `GET /metrics` of `rtapi export --instance INST` on a loopback port of its choosing.
fn scrape_once(inst: &str) -> String {
    use std::io::{Read, Write};
    let exp = common::exporter::Exporter::start(&["--instance", inst]);
    let mut c = std::net::TcpStream::connect(&exp.addr).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    body
}

/// Compiles `source` with LinuxCNC's halcompile into the test's own directory and lays that directory
/// over LinuxCNC's module directory by an overlay mount only the test's mount namespace sees, so the
/// master finds module `name` where it finds LinuxCNC's own.
fn compile_into_modules(ns: &Ipc, name: &str, source: &str) {
    let extra = ns.dir.path().join("modules");
    std::fs::create_dir_all(&extra).unwrap();
    let comp = format!("{name}.comp");
    std::fs::write(extra.join(&comp), source).unwrap();
    let o = Command::new("/usr/bin/halcompile")
        .args(["--compile", &comp])
        .current_dir(&extra)
        .output()
        .unwrap();
    assert!(
        extra.join(format!("{name}.so")).is_file(),
        "halcompile: {o:?}"
    );
    std::fs::remove_file(extra.join(&comp)).unwrap();
    let modules = "/usr/lib/linuxcnc/modules";
    let o = ns
        .enter()
        .args(["mount", "-t", "overlay", "overlay", "-o"])
        .arg(format!("lowerdir={}:{modules}", extra.display()))
        .arg(modules)
        .output()
        .unwrap();
    assert!(o.status.success(), "overlay mount: {:?}", common::text(&o));
}

fn getp(ns: &Ipc, name: &str) -> f64 {
    ns.ok(&["getp", name]).trim().parse().unwrap()
}

#[test]
fn linuxcnc_hal_runs_on_the_masters_fifo_threads_and_leaves_nothing() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &[]));
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["loadrt", "siggen"]);
    ns.ok(&["addf", "siggen.0.update", "servo"]);
    ns.ok(&["start"]);
    // The sine moves: hal_lib's thread runs siggen on our task, period after period.
    let first = getp(&ns, "siggen.0.sine");
    until_true("siggen.0.sine moving", GENEROUS, || {
        (getp(&ns, "siggen.0.sine") - first).abs() > 1e-6
    });
    let show = ns.ok(&["show", "thread"]);
    assert!(
        show.contains("servo") && show.contains("siggen.0.update"),
        "{show}"
    );
    // The task thread: SCHED_FIFO (policy 1), pinned to one CPU; the master's main thread is not.
    let ts = threads(m.id());
    // hal_lib's thread `servo` is rtapi's hosted thread `servo` (its OS name `rtapi-servo`).
    let task: Vec<_> = ts.iter().filter(|t| t.0 == "rtapi-servo").collect();
    assert_eq!(task.len(), 1, "{ts:?}");
    assert_eq!(task[0].1, 1, "the task's policy is SCHED_FIFO: {ts:?}");
    assert!(!task[0].2.contains([',', '-']), "pinned to one CPU: {ts:?}");
    assert!(
        ts.iter().any(|t| t.0.starts_with("rtapi-lcnc") && t.1 == 0),
        "{ts:?}"
    );
    // rtapi's own view of it: the thread under its LinuxCNC name in the master's instance, counting.
    let j = ns.show_threads();
    let t = j["threads"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == "servo"))
        .unwrap_or_else(|| panic!("no thread servo in instance {}: {j}", ns.inst));
    assert_eq!(t["flavor"], "posix", "{t}");
    assert_eq!(t["period_ns"], 1_000_000, "{t}");
    assert!(t["priority"].as_i64().is_some_and(|p| p > 0), "{t}");
    assert!(t["cycles"].as_u64().is_some_and(|c| c > 0), "{t}");
    // `rtapi watch`, as the session's user, follows the thread's health pins as they move.
    let o = Command::new("runuser")
        .args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_rtapi")])
        .args([
            "watch",
            "servo.latency",
            "servo.missed",
            "--instance",
            &ns.inst,
        ])
        .args(["--count", "3", "--interval", "20ms"])
        .output()
        .unwrap();
    let (out, err) = common::text(&o);
    assert!(o.status.success(), "rtapi watch: {err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains(" servo.latency=") && l.contains(" servo.missed=")),
        "{out}"
    );
    // ... and `rtapi export` serves its series (one scrape over loopback).
    let metrics = scrape_once(&ns.inst);
    let cycles = metrics
        .lines()
        .find(|l| {
            l.starts_with("rtapi_thread_cycles_total{")
                && l.contains(&format!("instance=\"{}\"", ns.inst))
                && l.contains("thread=\"servo\"")
        })
        .unwrap_or_else(|| panic!("no cycles of servo: {metrics}"));
    let n: f64 = cycles.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n > 0.0, "{cycles}");
    // The instance's segment: root's (a later master reclaims it after a crash), the session user's
    // group reads it.
    let st = nix::sys::stat::stat(format!("/dev/shm/rtapi-{}", ns.inst).as_str()).unwrap();
    assert_eq!(
        (st.st_uid, st.st_gid, st.st_mode & 0o777),
        (0, NOBODY, 0o640)
    );
    // ... and its health pins in LinuxCNC's HAL, made by the master at the `loadrt` that made it.
    let pins = ns.ok(&["show", "pin", "rtapi.servo"]);
    for p in ["latency", "latency-max", "missed", "late", "stalled"] {
        assert!(pins.contains(&format!("rtapi.servo.{p}")), "{p}: {pins}");
    }
    // LinuxCNC's segments: real SysV, given to the session's user, 0600, locked (SHM_LOCKED 02000).
    for key in [HAL_KEY, RTAPI_KEY] {
        let s = ns
            .seg(key)
            .unwrap_or_else(|| panic!("{key:x}: {:?}", ns.segments()));
        assert_eq!(s.uid, NOBODY, "{s:?}");
        assert_eq!(s.perms & 0o777, 0o600, "{s:?}");
        assert_ne!(s.perms & 0o2000, 0, "SHM_LOCK: {s:?}");
    }
    // Unloading everything ends the task, and (2.9's rule) the master: nothing is left.
    ns.ok(&["stop"]);
    ns.ok(&["unload", "all"]);
    let st = wait_exit(&mut m);
    assert!(st.success(), "{st}\n{}", ns.master_log(1));
    let log = ns.master_log(1);
    assert!(log.contains("1 thread(s) ran"), "{log}");
    assert!(!ns.fifo().exists(), "the socket is gone");
    assert_eq!(ns.segments(), vec![], "no segment left");
    assert!(
        !Path::new(&format!("/dev/shm/rtapi-{}", ns.inst)).exists(),
        "the instance's segment is gone"
    );
}

/// The health pins wired into LinuxCNC's own estop latch: a master held still for 300 ms (SIGSTOP, as
/// a long host stall or an SMI would hold it) misses periods; `rtapi.servo.late` trips the latch, and
/// it stays tripped.
#[test]
fn a_stalled_servo_thread_trips_linuxcncs_estop_latch_through_rtapi_late() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &[]));
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["loadrt", "estop_latch"]);
    ns.ok(&["addf", "rtapi.update", "servo"]);
    ns.ok(&["addf", "estop-latch.0", "servo"]);
    ns.ok(&[
        "net",
        "late",
        "rtapi.servo.late",
        "=>",
        "estop-latch.0.fault-in",
    ]);
    ns.ok(&["setp", "estop-latch.0.ok-in", "1"]);
    ns.ok(&["start"]);
    // The operator's reset: a rising edge. A host stall may trip the latch before the test's own
    // stall does; then reset again (bounded): what is tested is the trip that follows.
    let bit = |p: &str| ns.ok(&["getp", p]).trim() == "TRUE";
    until_true("estop-latch.0.ok-out TRUE after a reset", GENEROUS, || {
        // Each halcmd is a process of many servo periods: the latch sees the 0, then the 1.
        ns.ok(&["setp", "estop-latch.0.reset", "0"]);
        ns.ok(&["setp", "estop-latch.0.reset", "1"]);
        bit("estop-latch.0.ok-out")
    });
    ns.ok(&["setp", "estop-latch.0.reset", "0"]);
    let missed_before = ns
        .ok(&["getp", "rtapi.servo.missed"])
        .trim()
        .parse::<u64>()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(m.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let missed = until("rtapi.servo.missed to count the stall", GENEROUS, || {
        let n = ns
            .ok(&["getp", "rtapi.servo.missed"])
            .trim()
            .parse::<u64>()
            .unwrap();
        (n >= missed_before + 100).then_some(n)
    });
    assert!(
        !bit("estop-latch.0.ok-out"),
        "the latch tripped (missed {missed_before} -> {missed})"
    );
    assert!(bit("estop-latch.0.fault-out"));
    // Latched: the thread runs on and `late` falls again, but ok-out stays FALSE until a reset.
    until_true("rtapi.servo.late FALSE again", GENEROUS, || {
        !bit("rtapi.servo.late")
    });
    assert!(!bit("estop-latch.0.ok-out"));
    ns.ok(&["stop"]);
    ns.ok(&["unload", "all"]);
    assert!(wait_exit(&mut m).success(), "{}", ns.master_log(1));
}

/// `--trace` on the master: a SCHED_FIFO 99 task of this test spinning 3 ms at a time on the servo
/// thread's CPU makes LinuxCNC's thread late; the summary at exit names it (command and pid) among
/// the causes, from the kernel trace, with the fix.
#[test]
fn trace_names_what_made_linuxcncs_thread_late() {
    use rtapi::rt::sched::{pin_current_thread, set_current_policy, Policy};
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    if !Path::new("/sys/kernel/tracing/instances").is_dir() {
        return skip!(Ci, "no tracefs at /sys/kernel/tracing");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &["--trace=500us"]));
    assert!(
        ns.master_log(1).contains("--trace: every period"),
        "{}",
        ns.master_log(1)
    );
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["start"]);
    let cpu = until("the servo thread counting", GENEROUS, || {
        let j = ns.show_threads();
        let t = j["threads"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == "servo")?
            .clone();
        (t["cycles"].as_u64()? > 50).then(|| t["cpu"].as_u64())?
    }) as usize;
    const BURSTS: usize = 5;
    let spinner = std::thread::Builder::new()
        .name("lcnc-spinner".into())
        .spawn(move || {
            set_current_policy(Policy::Fifo { priority: 99 }).expect("SCHED_FIFO 99");
            pin_current_thread(cpu).expect("pin to the servo thread's CPU");
            for _ in 0..BURSTS {
                // 3 ms: at least two of the 1 ms deadlines fall inside each burst.
                let start = std::time::Instant::now();
                while start.elapsed() < Duration::from_millis(3) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            // SAFETY: gettid has no preconditions.
            unsafe { libc::gettid() }
        })
        .unwrap();
    let tid = spinner.join().unwrap();
    ns.ok(&["stop"]);
    ns.ok(&["unload", "all"]);
    let st = wait_exit(&mut m);
    let log = ns.master_log(1);
    assert!(st.success(), "{st}\n{log}");
    let head = format!("Spike causes, servo thread (CPU {cpu}): ");
    let section = log
        .split_once(&head)
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no {head:?} in the master's summary:\n{log}"));
    eprintln!("{head}{section}");
    assert!(
        section
            .lines()
            .next()
            .is_some_and(|l| l.contains("at or over 500.0 us, explained from the kernel trace")),
        "{log}"
    );
    let row = section
        .lines()
        .find(|l| l.contains("task lcnc-spinner (SCHED_FIFO/RR 99)"))
        .unwrap_or_else(|| panic!("the spinner is not among the causes:\n{log}"));
    let spikes: u64 = row.split_whitespace().next().unwrap().parse().unwrap();
    assert!((1..=(BURSTS as u64) * 4).contains(&spikes), "{row}\n{log}");
    assert!(
        section.contains(&format!("task lcnc-spinner (pid {tid}, SCHED_FIFO/RR 99)")),
        "the worst spikes name the spinner's pid {tid}:\n{log}"
    );
    // The trace instances (`-wake`, `-switch` beside the first) went with the master.
    let name = rtapi::trace::TraceSession::name_for(m.id());
    let left: Vec<_> = std::fs::read_dir("/sys/kernel/tracing/instances")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n == name || n.starts_with(&format!("{name}-")))
        })
        .collect();
    assert!(left.is_empty(), "trace instance left: {left:?}");
}

/// README's way for an ordinary user: a copy of the master with `cap_sys_nice,cap_ipc_lock=ep`, run
/// as nobody (no root anywhere in the process): its thread is SCHED_FIFO, its memory and LinuxCNC's
/// segments locked.
/// README's `setcap` line on a copy of the master, run as nobody (no supplementary group) in the
/// test's namespaces; `grant_dma_latency`: first, in the test's mount namespace, a node of
/// `/dev/cpu_dma_latency`'s number with group nogroup and mode 0660 bound over it — what
/// `packaging/udev/60-rtapi.rules` does for its group. Runs a servo thread, checks it, unloads.
/// Returns the master's standard error and whether its process held `/dev/cpu_dma_latency` open.
fn nobody_master_with_capabilities(grant_dma_latency: bool) -> Option<(String, bool)> {
    if let Some(why) = missing() {
        skip!(Ci, "{why}");
        return None;
    }
    for p in ["/usr/sbin/setcap", "/usr/bin/setpriv", "/usr/bin/mknod"] {
        if !Path::new(p).exists() {
            skip!(Ci, "{p} is missing (libcap2-bin, util-linux, coreutils)");
            return None;
        }
    }
    let ns = Ipc::new();
    let bin = ns.dir.path().join("rtapi-lcnc-master");
    std::fs::copy(master_bin(), &bin).unwrap();
    let o = Command::new("/usr/sbin/setcap")
        .args(["cap_sys_nice,cap_ipc_lock=ep"])
        .arg(&bin)
        .output()
        .unwrap();
    assert!(o.status.success(), "setcap: {:?}", common::text(&o));
    if grant_dma_latency {
        use std::os::unix::fs::MetadataExt;
        let rdev = std::fs::metadata("/dev/cpu_dma_latency").unwrap().rdev();
        let dev = ns.dir.path().join("dev");
        std::fs::create_dir(&dev).unwrap();
        let sh = format!(
            "set -e; mount -t tmpfs -o mode=0755 lcnc-test-dev {d}; \
             mknod -m 0660 {d}/cpu_dma_latency c {} {}; chgrp {NOBODY} {d}/cpu_dma_latency; \
             mount --bind {d}/cpu_dma_latency /dev/cpu_dma_latency",
            libc::major(rdev),
            libc::minor(rdev),
            d = dev.display()
        );
        let o = ns.enter().args(["sh", "-c", &sh]).output().unwrap();
        assert!(o.status.success(), "granting: {:?}", common::text(&o));
    }
    let log = ns.dir.path().join("master.1.err");
    // setpriv execs the master itself (its pid is the child's): nobody, no supplementary group.
    let mut m = Master(
        ns.enter()
            .args([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "env",
            ])
            .arg(format!("HOME={}", ns.dir.path().display()))
            .arg(format!("RTAPI_FIFO_PATH={}", ns.fifo().display()))
            .arg(format!("RTAPI_INSTANCE={}", ns.inst))
            .arg("RTAPI_FLAVOR=posix")
            .arg(&bin)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let exited = until("the master listening (or exiting)", GENEROUS, || {
        if std::fs::read_to_string(&log).is_ok_and(|t| t.contains("listening on")) {
            return Some(None);
        }
        m.try_wait().unwrap().map(Some)
    });
    if let Some(st) = exited {
        panic!(
            "{st}: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    // The master's process (env exec'd it): the one whose executable is the copy.
    let pid = until("the master's process", GENEROUS, || {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            (exe == bin).then_some(pid)
        })
    });
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| -> String {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    assert!(
        field("Uid:").split_whitespace().all(|u| u == "65534"),
        "{status}"
    );
    let locked: u64 = field("VmLck:")
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    assert!(locked > 0, "mlockall: {status}");
    let held = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .any(|e| {
            std::fs::read_link(e.path()).is_ok_and(|t| t == Path::new("/dev/cpu_dma_latency"))
        });
    let ts = threads(pid);
    let task: Vec<_> = ts.iter().filter(|t| t.0 == "rtapi-servo").collect();
    assert_eq!(task.len(), 1, "{ts:?}");
    assert_eq!(task[0].1, 1, "SCHED_FIFO: {ts:?}");
    for key in [HAL_KEY, RTAPI_KEY] {
        let s = ns.seg(key).unwrap();
        assert_eq!(s.uid, NOBODY, "{s:?}");
        assert_ne!(s.perms & 0o2000, 0, "SHM_LOCK: {s:?}");
    }
    let j = ns.show_threads();
    assert!(
        j["threads"]
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t["name"] == "servo")),
        "{j}"
    );
    ns.ok(&["unload", "all"]);
    let st = wait_exit(&mut m);
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(st.success(), "{st}\n{log}");
    assert!(log.contains("SCHED_FIFO granted"), "{log}");
    assert_eq!(ns.segments(), vec![]);
    Some((log, held))
}

/// README's `setcap` line alone: SCHED_FIFO, locked memory, `SHM_LOCK`ed segments. The idle-state
/// hold (`/dev/cpu_dma_latency`, root's) is not granted by it: the master says so, and what to do.
#[test]
fn an_ordinary_user_with_file_capabilities_gets_fifo_threads_and_locked_memory() {
    let Some((log, held)) = nobody_master_with_capabilities(false) else {
        return;
    };
    assert!(!held, "/dev/cpu_dma_latency is root's here: {log}");
    assert!(
        log.contains("cpu_dma_latency: opening /dev/cpu_dma_latency: Permission denied")
            && log.contains("packaging/udev/60-rtapi.rules"),
        "the master names the missing hold and its remedy: {log}"
    );
}

/// With the device given to the user's group (the udev rule's effect), the master holds
/// `/dev/cpu_dma_latency` at 0 as stock 2.9's setuid `rtapi_app` does: an idle CPU then wakes the
/// servo thread without leaving a slow idle state (docs/guide/commission-pc.md, "Idle states": the
/// median it moves).
#[test]
fn a_master_whose_group_may_open_cpu_dma_latency_holds_it() {
    let Some((log, held)) = nobody_master_with_capabilities(true) else {
        return;
    };
    assert!(held, "the master holds /dev/cpu_dma_latency: {log}");
    assert!(!log.contains("cpu_dma_latency"), "no warning: {log}");
}

/// A LinuxCNC module that writes through a null pointer on the servo thread kills the master (C code
/// in its process): the report names the signal, the thread, the function and the module, and the
/// crash handler removes what the session had — LinuxCNC's SysV segments, the socket, rtapi's
/// segment. The module reaches the modules directory through an overlay mount only this test's
/// namespace sees.
#[test]
fn a_module_crash_in_the_master_is_named_and_leaves_nothing() {
    use std::os::unix::process::ExitStatusExt;
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    if !Path::new("/usr/bin/halcompile").exists() {
        return skip!(Ci, "halcompile is missing (linuxcnc-uspace-dev)");
    }
    let ns = Ipc::new();
    compile_into_modules(
        &ns,
        "crashy",
        "component crashy \"writes through a null pointer when fire is TRUE\";\n\
         pin in bit fire;\n\
         function _;\n\
         license \"GPL\";\n\
         ;;\n\
         if (fire) { *(volatile int *)0 = 1; }\n",
    );
    // With --trace (where tracefs is), the crash also leaves the master's trace instance, which the
    // kernel will not let a dying process remove: the next master must.
    let instances = Path::new("/sys/kernel/tracing/instances");
    let trace: &[&str] = if instances.is_dir() {
        &["--trace=1ms"]
    } else {
        &[]
    };
    let mut m = Master(ns.master(1, trace));
    let traced = instances.join(rtapi::trace::TraceSession::name_for(m.id()));
    assert_eq!(traced.is_dir(), !trace.is_empty(), "{}", traced.display());
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["loadrt", "crashy"]);
    ns.ok(&["addf", "crashy.0", "servo"]);
    ns.ok(&["start"]);
    assert_eq!(ns.segments().len(), 2, "{:?}", ns.segments());
    let shm = format!("/dev/shm/rtapi-{}", ns.inst);
    assert!(Path::new(&shm).exists());
    // halcmd's setp returns before the next period; the master dies in it.
    let _ = ns.halcmd(&["setp", "crashy.0.fire", "1"]);
    let st = wait_exit(&mut m);
    let log = ns.master_log(1);
    assert_eq!(st.signal(), Some(libc::SIGSEGV), "{st}: {log}");
    for want in [
        "SIGSEGV",
        "at address 0x0",
        "on RT thread servo",
        "in the code of LinuxCNC module crashy",
        &format!("Removed {shm}."),
        "Removed SysV segment",
    ] {
        assert!(log.contains(want), "'{want}' not in: {log}");
    }
    assert_eq!(ns.segments(), vec![], "{log}");
    assert!(!ns.fifo().exists(), "the socket is left: {log}");
    assert!(!Path::new(&shm).exists());
    // A new master starts on the clean slate, with nothing to reclaim but the trace instance.
    let mut m2 = Master(ns.master(2, trace));
    assert!(
        !traced.exists(),
        "{} left after the second master started",
        traced.display()
    );
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["unload", "all"]);
    assert!(wait_exit(&mut m2).success());
    assert!(!ns.master_log(2).contains("stale"), "{}", ns.master_log(2));
    assert!(!instances
        .join(rtapi::trace::TraceSession::name_for(m2.id()))
        .exists());
}

#[test]
fn module_paths_are_refused_and_nothing_of_them_is_opened() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    // A real module file where a path would find it.
    let x = ns.dir.path().join("x.so");
    std::fs::copy("/usr/lib/linuxcnc/modules/siggen.so", &x).unwrap();
    let mut m = Master(ns.master(1, &["--stay"]));
    let o = ns.halcmd(&["loadrt", "../x"]);
    assert!(!o.status.success(), "{:?}", common::text(&o));
    let o = ns.as_user("/usr/bin/rtapi_app", &["load", x.to_str().unwrap()]);
    assert!(!o.status.success(), "{:?}", common::text(&o));
    let log = ns.master_log(1);
    assert_eq!(
        log.matches("not allowed as a module name").count(),
        2,
        "{log}"
    );
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", m.id())).unwrap();
    assert!(!maps.contains("x.so"), "the refused file was not mapped");
    assert!(maps.contains("hal_lib.so"), "{maps}");
    // The master still serves (it stays): a module by name loads.
    ns.ok(&["loadrt", "siggen"]);
    assert!(ns.ok(&["show", "comp"]).contains("siggen"));
    // `exit` (LinuxCNC's `realtime stop` sends it): everything goes.
    let o = ns.as_user("/usr/bin/rtapi_app", &["exit"]);
    assert!(o.status.success(), "{:?}", common::text(&o));
    assert!(wait_exit(&mut m).success());
    assert!(!ns.fifo().exists());
    assert_eq!(ns.segments(), vec![]);
}

#[test]
fn a_new_master_reclaims_what_a_killed_master_left() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &[]));
    ns.ok(&["loadrt", "threads", "name1=t", "period1=1000000"]);
    let before: Vec<Seg> = [HAL_KEY, RTAPI_KEY]
        .iter()
        .filter_map(|k| ns.seg(*k))
        .collect();
    assert_eq!(before.len(), 2, "{:?}", ns.segments());
    m.kill().unwrap();
    m.wait().unwrap();
    // What a crash leaves: both segments (nobody attached) and the socket file.
    let stale: Vec<Seg> = ns.segments();
    assert!(stale.iter().all(|s| s.nattch == 0), "{stale:?}");
    assert_eq!(stale.len(), 2, "{stale:?}");
    assert!(ns.fifo().exists());
    let mut m2 = Master(ns.master(2, &[]));
    let log = ns.master_log(2);
    assert_eq!(
        log.matches("removed the stale LinuxCNC shared memory")
            .count(),
        2,
        "{log}"
    );
    assert!(log.contains("removed the stale socket"), "{log}");
    // The new session works, on new segments.
    ns.ok(&["loadrt", "threads", "name1=t", "period1=1000000"]);
    let hal = ns.seg(HAL_KEY).unwrap();
    assert!(before.iter().all(|s| s.id != hal.id), "{before:?} {hal:?}");
    ns.ok(&["unload", "all"]);
    assert!(wait_exit(&mut m2).success(), "{}", ns.master_log(2));
    assert_eq!(ns.segments(), vec![]);
    assert!(!ns.fifo().exists());
}

#[test]
fn a_segment_in_use_by_another_session_stops_the_master_from_starting() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let ns = Ipc::new();
    let mut m = Master(ns.master(1, &[]));
    ns.ok(&["loadrt", "threads", "name1=t", "period1=1000000"]);
    // A second master for the same keys while the first one has them.
    let mut second = Master(
        ns.enter()
            .arg("env")
            .arg(format!("RTAPI_UID={NOBODY}"))
            .arg(format!(
                "RTAPI_FIFO_PATH={}",
                ns.dir.path().join("fifo2").display()
            ))
            .arg(format!("RTAPI_INSTANCE={}", unique_instance()))
            .arg(master_bin())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // It must refuse, not serve: bounded, so a master that serves fails the test instead of hanging it.
    let t0 = std::time::Instant::now();
    while second.try_wait().unwrap().is_none() {
        if t0.elapsed() > GENEROUS {
            let _ = second.kill();
            let _ = second.wait();
            panic!("the second master did not refuse to start (it is serving)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = second.output_after_exit();
    let (_, err) = common::text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("another LinuxCNC session is running"), "{err}");
    assert!(!ns.dir.path().join("fifo2").exists());
    ns.ok(&["unload", "all"]);
    assert!(wait_exit(&mut m).success());
}

#[test]
fn root_without_rtapi_uid_is_refused() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let d = session_dir();
    let o = Command::new(master_bin())
        .env_remove("RTAPI_UID")
        .env("RTAPI_INSTANCE", unique_instance())
        .env("RTAPI_FIFO_PATH", d.path().join("fifo"))
        .output()
        .unwrap();
    let (_, err) = common::text(&o);
    assert!(!o.status.success());
    assert!(err.contains("RTAPI_UID"), "{err}");
    assert!(!d.path().join("fifo").exists());
}

// ---- the whole machine: rtapi linuxcnc configs/sim/axis ------------------------------------------

const SIM_AXIS: &str = "/usr/share/doc/linuxcnc/examples/sample-configs/sim/axis";

/// The display program: leaves estop, turns on, homes all, one MDI move, checks the position, reports
/// the master's task threads, exits (which shuts LinuxCNC down).
const DISPLAY: &str = r#"#!/usr/bin/python3
import linuxcnc, os, sys, time
out = open(os.environ["RESULT"], "w")
def say(*a):
    print(*a, file=out, flush=True)
s = linuxcnc.stat(); c = linuxcnc.command()
def wait(what, cond, t=60):
    t0 = time.time()
    while time.time() - t0 < t:
        s.poll()
        if cond():
            return
        time.sleep(0.05)
    say("TIMEOUT", what); sys.exit(3)
c.state(linuxcnc.STATE_ESTOP_RESET); wait("estop reset", lambda: s.task_state == linuxcnc.STATE_ESTOP_RESET)
c.state(linuxcnc.STATE_ON); wait("machine on", lambda: s.task_state == linuxcnc.STATE_ON)
c.mode(linuxcnc.MODE_MANUAL); c.wait_complete()
c.home(-1); wait("homed", lambda: all(s.homed[i] for i in range(s.joints)), 120)
c.mode(linuxcnc.MODE_MDI); c.wait_complete()
c.mdi("G0 X1.5 Y-0.5 Z-1"); c.wait_complete(60)
wait("at the target", lambda: s.inpos and abs(s.actual_position[0] - 1.5) < 5e-7 and abs(s.actual_position[1] + 0.5) < 5e-7 and abs(s.actual_position[2] + 1) < 5e-7)
say("POSITION %.6f %.6f %.6f" % tuple(s.actual_position[:3]))
for p in os.listdir("/proc"):
    if not p.isdigit(): continue
    try: comm = open("/proc/%s/comm" % p).read().strip()
    except OSError: continue
    if comm.startswith("rtapi-lcnc") or comm == "rtapi_app":
        say("PROC", comm)
        for t in os.listdir("/proc/%s/task" % p):
            tc = open("/proc/%s/task/%s/comm" % (p, t)).read().strip()
            pol = [l for l in open("/proc/%s/task/%s/sched" % (p, t)) if l.startswith("policy")][0].split(":")[1].strip()
            say("TASK", tc, pol)
say("DONE")
"#;

/// What one `rtapi linuxcnc` session of sim/axis printed and left.
struct Session {
    out: String,
    err: String,
    res: String,
    /// The rtapi instance of the session's master.
    inst: String,
}

impl Session {
    fn all(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}\n--- result\n{}",
            self.out, self.err, self.res
        )
    }

    fn section(&self, from: &str, to: &str) -> String {
        self.out
            .split(from)
            .nth(1)
            .unwrap_or("")
            .split(to)
            .next()
            .unwrap_or("")
            .trim()
            .to_string()
    }

    /// No process but the shell, no SysV segment, no socket, no rtapi segment of the master.
    fn assert_nothing_left(&self) {
        let all = self.all();
        let seg = format!("/dev/shm/rtapi-{}", self.inst);
        assert!(!Path::new(&seg).exists(), "{seg} left behind: {all}");
        assert_eq!(self.section("LEFT_PROCS", "LEFT_SHM"), "", "{all}");
        assert_eq!(self.section("LEFT_SHM", "LEFT_SOCKET"), "", "{all}");
        assert!(
            !self.section("LEFT_SOCKET", "\u{0}").contains(".rtapi_fifo"),
            "{all}"
        );
    }

    /// The launcher's exit status as the script saw it.
    fn rc(&self) -> Option<i32> {
        self.out
            .split("LAUNCHER_RC=")
            .nth(1)?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

/// A shell command that gives a new mount namespace a private, empty `/tmp` in which each of
/// `keep` that lives under `/tmp` (the checkout's binaries, the session's directory) is still there:
/// the old `/tmp` is bound under a tmpfs on `/mnt` first (both only in this namespace), then each
/// kept path's top directory is bound back into the new `/tmp`. Without it a checkout under `/tmp`
/// (a CI clone may live anywhere) vanishes under the private `/tmp` with the binaries it runs.
fn private_tmp(keep: &[&Path]) -> String {
    let mut tops: Vec<String> = keep
        .iter()
        .filter_map(|p| p.strip_prefix("/tmp").ok()?.components().next())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    tops.sort();
    tops.dedup();
    if tops.is_empty() {
        return "mount -t tmpfs tmpfs /tmp".into();
    }
    let binds: Vec<String> = tops
        .iter()
        .map(|t| format!("mkdir -p '/tmp/{t}' && mount --rbind '/mnt/oldtmp/{t}' '/tmp/{t}'"))
        .collect();
    format!(
        "mount -t tmpfs tmpfs /mnt && mkdir /mnt/oldtmp && mount --rbind /tmp /mnt/oldtmp && \
         mount -t tmpfs tmpfs /tmp && {}",
        binds.join(" && ")
    )
}

/// A copy of sim/axis with `display` (Python) as its display, run by `launch` (a shell fragment:
/// `{rtapi}` and `{ini}` are replaced; it must echo `LAUNCHER_RC=$?`) as root for nobody in
/// namespaces of its own (IPC, network, mount with a private /tmp, PID); then what is left.
fn sim_axis_session(display_src: &str, launch: &str) -> Session {
    let d = session_dir();
    let inst = unique_instance();
    let cfg = d.path().join("axis");
    let o = Command::new("cp")
        .args(["-r", SIM_AXIS])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(o.status.success());
    let display = d.path().join("display.py");
    std::fs::write(&display, display_src).unwrap();
    std::fs::set_permissions(&display, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Our display instead of axis; no hal_manualtoolchange (a Tk window: there is no X here).
    let ini = std::fs::read_to_string(cfg.join("axis.ini")).unwrap();
    let ini: String = ini
        .lines()
        .filter(|l| !l.contains("axis_manualtoolchange.hal"))
        .map(|l| {
            if l.trim_start().starts_with("DISPLAY =") {
                format!("DISPLAY = {}\n", display.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    std::fs::write(cfg.join("axis.ini"), ini).unwrap();
    let o = Command::new("chown")
        .args(["-R", "nobody:nogroup"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success());
    let result = d.path().join("result.txt");
    let launch = launch
        .replace("{rtapi}", env!("CARGO_BIN_EXE_rtapi"))
        .replace("{ini}", &cfg.join("axis.ini").display().to_string());
    // Inside: a private /tmp (LinuxCNC's lock file) that still shows the checkout and the session's
    // directory if they live under /tmp ([`private_tmp`]), loopback up (its NML server's TCP
    // port), then the launcher; afterwards what is left: processes, segments, the socket.
    let script = format!(
        "{private_tmp} && ip link set lo up && {launch}; \
         echo LEFT_PROCS; ps -e -o comm= | grep -v -x -e sh -e ps -e grep -e cat; \
         echo LEFT_SHM; tail -n +2 /proc/sysvipc/shm; echo LEFT_SOCKET; ls -a {home}",
        home = d.path().display(),
        private_tmp = private_tmp(&[
            Path::new(env!("CARGO_BIN_EXE_rtapi")),
            Path::new(&master_bin()),
            d.path(),
        ]),
    );
    let o = Command::new("unshare")
        .args([
            "--ipc",
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
        ])
        .arg(&script)
        .env("RTAPI_UID", NOBODY.to_string())
        .env("HOME", d.path())
        .env("RESULT", &result)
        .env("RTAPI_FLAVOR", "posix")
        .env("RTAPI_INSTANCE", &inst)
        .env_remove("DISPLAY")
        .env_remove("RTAPI_FIFO_PATH")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (out, err) = common::text(&o);
    Session {
        out,
        err,
        res: std::fs::read_to_string(&result).unwrap_or_default(),
        inst,
    }
}

fn sim_axis_missing() -> Option<String> {
    if let Some(why) = missing() {
        return Some(why);
    }
    if !Path::new(SIM_AXIS).join("axis.ini").exists() || !Path::new("/usr/bin/linuxcnc").exists() {
        return Some("LinuxCNC's sim/axis sample config or linuxcnc script is missing".into());
    }
    None
}

#[test]
fn rtapi_linuxcnc_runs_sim_axis_and_leaves_nothing_behind() {
    if let Some(why) = sim_axis_missing() {
        return skip!(Ci, "{why}");
    }
    let s = sim_axis_session(DISPLAY, "{rtapi} linuxcnc {ini}; echo LAUNCHER_RC=$?");
    let (err, res, all) = (&s.err, &s.res, s.all());
    assert_eq!(s.rc(), Some(0), "{all}");
    assert!(
        res.contains("POSITION 1.500000 -0.500000 -1.000000"),
        "{all}"
    );
    assert!(res.contains("DONE"), "{all}");
    // The realtime was ours: our master ran, its task threads SCHED_FIFO, no rtapi_app master.
    assert!(res.contains("PROC rtapi-lcnc-mast"), "{all}");
    assert!(!res.contains("PROC rtapi_app"), "{all}");
    let tasks: Vec<&str> = res
        .lines()
        .filter(|l| l.starts_with("TASK rtapi-servo-thr"))
        .collect();
    assert!(!tasks.is_empty(), "the servo thread: {all}");
    assert!(tasks.iter().all(|l| l.ends_with(" 1")), "SCHED_FIFO: {all}");
    assert!(err.contains("the master served"), "{all}");
    // The master named the LinuxCNC it runs on, as that LinuxCNC records its own version.
    let version = Command::new("/usr/bin/linuxcnc_var")
        .arg("LINUXCNCVERSION")
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    assert!(
        !version.is_empty()
            && err.contains(&format!("rtapi: LinuxCNC {version} (verified with rtapi")),
        "LinuxCNC {version}: {all}"
    );
    // ... and the master cleaned up itself: the launcher's final sweep found nothing to remove.
    assert!(!err.contains("removed the stale"), "{all}");
    assert!(!err.contains("left behind"), "{all}");
    s.assert_nothing_left();
}

/// A display that brings the machine on, says `UP`, and stays until it is ended.
const DISPLAY_UP: &str = r#"#!/usr/bin/python3
import linuxcnc, os, sys, time
out = open(os.environ["RESULT"], "w")
s = linuxcnc.stat(); c = linuxcnc.command()
def wait(cond, t=60):
    t0 = time.time()
    while time.time() - t0 < t:
        s.poll()
        if cond():
            return
        time.sleep(0.05)
    print("TIMEOUT", file=out, flush=True); sys.exit(3)
c.state(linuxcnc.STATE_ESTOP_RESET); wait(lambda: s.task_state == linuxcnc.STATE_ESTOP_RESET)
c.state(linuxcnc.STATE_ON); wait(lambda: s.task_state == linuxcnc.STATE_ON)
print("UP", file=out, flush=True)
while True:
    time.sleep(1)
"#;

/// The launcher in the background until the display says UP (bounded), then `action` (shell).
fn launch_then(action: &str) -> String {
    format!(
        "{{rtapi}} linuxcnc {{ini}} & L=$!; i=0; \
         until grep -q UP \"$RESULT\" 2>/dev/null || [ $i -gt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         {action}; timeout -s KILL 120 tail --pid=$L -f /dev/null \
         || {{ kill -KILL $L; echo LAUNCHER_HUNG; }}; wait $L; echo LAUNCHER_RC=$?"
    )
}

/// SIGTERM to the launcher (a desktop session ending, `kill`): LinuxCNC's own Cleanup runs, the
/// master is told `exit`, nothing is left.
#[test]
fn sigterm_of_the_launcher_ends_the_machine_and_leaves_nothing() {
    if let Some(why) = sim_axis_missing() {
        return skip!(Ci, "{why}");
    }
    let s = sim_axis_session(DISPLAY_UP, &launch_then("kill -TERM $L"));
    let all = s.all();
    assert!(s.res.contains("UP"), "the machine came on first: {all}");
    assert!(s.err.contains("the master served"), "{all}");
    assert!(!s.err.contains("left behind"), "{all}");
    assert!(s.rc().is_some(), "{all}");
    assert!(!s.out.contains("LAUNCHER_HUNG"), "{all}");
    // Ended by the SIGINT (as Ctrl-C in LinuxCNC's terminal), not by the escalation after it.
    assert!(!s.err.contains("did not end within"), "{all}");
    s.assert_nothing_left();
}

/// The master killed under a running machine: the launcher stops LinuxCNC at once (no rtapi_app
/// may take over), says so, exits non-zero, and its sweep leaves nothing.
#[test]
fn a_killed_master_stops_the_machine_and_leaves_nothing() {
    if let Some(why) = sim_axis_missing() {
        return skip!(Ci, "{why}");
    }
    let s = sim_axis_session(DISPLAY_UP, &launch_then("pkill -KILL -x rtapi-lcnc-mast"));
    let all = s.all();
    assert!(s.res.contains("UP"), "the machine came on first: {all}");
    assert!(s.rc().is_some_and(|c| c != 0), "{all}");
    assert!(s.err.contains("master ended while LinuxCNC ran"), "{all}");
    s.assert_nothing_left();
}

/// The launcher killed (SIGKILL: it can clean nothing up): its master sees the report pipe's
/// reader gone, ends as on `exit` — threads stopped, modules unloaded — and removes its rtapi
/// segment and socket, instead of serving a HAL nobody will end.
#[test]
fn a_killed_launcher_ends_its_master_with_its_segment_and_socket() {
    if let Some(why) = sim_axis_missing() {
        return skip!(Ci, "{why}");
    }
    let s = sim_axis_session(
        DISPLAY_UP,
        &launch_then(
            "kill -KILL $L; i=0; \
             while pgrep -x rtapi-lcnc-mast >/dev/null && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
             echo MASTER_WAITED=$i",
        ),
    );
    let all = s.all();
    assert!(s.res.contains("UP"), "the machine came on first: {all}");
    let waited: u32 = s
        .out
        .split("MASTER_WAITED=")
        .nth(1)
        .and_then(|t| t.lines().next())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("no MASTER_WAITED: {all}"));
    assert!(
        waited < 1200,
        "the master still ran 60 s after its launcher was killed: {all}"
    );
    assert!(
        s.err.contains("master done (its launcher is gone)"),
        "{all}"
    );
    let seg = format!("/dev/shm/rtapi-{}", s.inst);
    assert!(!Path::new(&seg).exists(), "{seg} left behind: {all}");
    assert!(
        !s.section("LEFT_SOCKET", "\u{0}").contains(".rtapi_fifo"),
        "{all}"
    );
    eprintln!(
        "the master ended {:.2} s after its launcher was killed",
        f64::from(waited) * 0.05
    );
}

// ---------------------------------------------------------------------------------------------
// Issue 41 ("Trust, round three"): a helper that left the session, and a broken INI file.

/// A helper of the session that drops the session's environment mark and leaves its process
/// group and session (`setsid env -i helper`, as a display may start one) outlived `rtapi
/// linuxcnc`. Now the launcher is a child subreaper and ends its whole descendant tree. LinuxCNC's
/// script is a small stand-in here (`RTAPI_LINUXCNC`) that starts the helper and exits; the
/// launcher runs in an IPC namespace of its own (its sweep looks at SysV segments).
#[test]
fn a_helper_that_left_the_session_ends_with_the_launcher() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    let d = session_dir();
    let helper = format!("1099.{}", std::process::id());
    let script = d.path().join("linuxcnc");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             setsid env -i sleep {helper} </dev/null >/dev/null 2>&1 &\n\
             # until the helper runs (bounded): then it surely exists when this script ends\n\
             i=0; while [ \"$(cat /proc/$!/comm 2>/dev/null)\" != sleep ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done\n\
             echo HELPER_PID=$!\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let ini = d.path().join("m.ini");
    std::fs::write(&ini, "[EMC]\nVERSION = 1.1\n").unwrap();
    // Kill the helper whatever happens below (it is this test's: its duration holds our pid).
    struct Kill(String);
    impl Drop for Kill {
        fn drop(&mut self) {
            for pid in common::processes_running(&["sleep", &self.0]) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    let _kill = Kill(helper.clone());
    // Its output to files: a helper that outlived it would hold a pipe open, and the test would
    // wait for it instead of failing.
    let (out_file, err_file) = (d.path().join("out"), d.path().join("err"));
    let status = Command::new("unshare")
        .arg("--ipc")
        .arg(env!("CARGO_BIN_EXE_rtapi"))
        .arg("linuxcnc")
        .arg(&ini)
        .env("RTAPI_UID", NOBODY.to_string())
        .env("HOME", d.path())
        .env("RTAPI_LINUXCNC", &script)
        .env("RTAPI_FLAVOR", "posix")
        .env("RTAPI_INSTANCE", unique_instance())
        .env_remove("RTAPI_FIFO_PATH")
        .env_remove("DISPLAY")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .status()
        .unwrap();
    let out = std::fs::read_to_string(&out_file).unwrap();
    let err = std::fs::read_to_string(&err_file).unwrap();
    let all = format!("--- {status}\n--- stdout\n{out}\n--- stderr\n{err}");
    assert!(out.contains("HELPER_PID="), "the helper started: {all}");
    // The launcher waited for what it killed; the bound only absorbs a loaded machine's reaping.
    let t0 = std::time::Instant::now();
    while !common::processes_running(&["sleep", &helper]).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the helper (setsid env -i) outlived rtapi linuxcnc: {all}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("the helper was gone {:?} after the launcher", t0.elapsed());
    assert!(
        err.contains("process(es) LinuxCNC left running") && err.contains(" sleep"),
        "the launcher says what it ended: {all}"
    );
}

/// A broken INI file (here: `[KINS]KINEMATICS` missing, which LinuxCNC's check_config refuses
/// before anything is loaded) made the launcher blame LinuxCNC's script ("is … a LinuxCNC 2.9
/// script that uses $RTAPI_FIFO_PATH?"). Now it names the INI file, the line and LinuxCNC's words.
#[test]
fn a_broken_ini_file_is_named_as_the_cause() {
    if let Some(why) = sim_axis_missing() {
        return skip!(Ci, "{why}");
    }
    let s = sim_axis_session(
        DISPLAY,
        "sed -i '/^KINEMATICS *=/d' {ini} && {rtapi} linuxcnc {ini}; echo LAUNCHER_RC=$?",
    );
    let all = s.all();
    assert!(s.rc().is_some_and(|c| c != 0), "{all}");
    assert!(!s.err.contains("LinuxCNC 2.9 script"), "{all}");
    // `…/axis/axis.ini:<line of [KINS]>: … Missing [KINS]KINEMATICS=`
    let said = s
        .err
        .lines()
        .find(|l| l.contains("Missing [KINS]KINEMATICS="))
        .unwrap_or_else(|| panic!("LinuxCNC's words: {all}"));
    let at = said
        .split("axis.ini:")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.parse::<usize>().ok());
    // The session's copy has no axis_manualtoolchange.hal line (see `sim_axis_session`).
    let kins = std::fs::read_to_string(Path::new(SIM_AXIS).join("axis.ini"))
        .unwrap()
        .lines()
        .filter(|l| !l.contains("axis_manualtoolchange.hal"))
        .position(|l| l.trim() == "[KINS]")
        .map(|i| i + 1);
    assert_eq!(at, kins, "the line of [KINS]: {all}");
    assert!(said.contains("fix the INI file"), "{all}");
    s.assert_nothing_left();
}

/// The value of the series `name{…thread="servo"…}` of instance `inst` in a scrape.
fn series(metrics: &str, name: &str, inst: &str) -> f64 {
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!("{name}{{"))
                && l.contains(&format!("instance=\"{inst}\""))
                && l.contains("thread=\"servo\"")
        })
        .unwrap_or_else(|| panic!("no {name} of servo: {metrics}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// Issue 43 item 4: a Mesa card's I/O functions (`hm2_<board>.<n>.read`/`.write`) are timed per
/// period in the servo thread's statistics. A module compiled with halcompile whose functions are
/// named like hostmot2's (`names=hm2_fake.0`) counts its own `read` calls: the I/O periods rtapi
/// recorded are exactly those calls, its calls twice that (read + write), and `update` (not I/O)
/// is not among them; `show --json`, the text table and `export` carry them.
#[test]
fn hm2_read_and_write_are_timed_per_period_in_the_threads_statistics() {
    if let Some(why) = missing() {
        return skip!(Ci, "{why}");
    }
    if !Path::new("/usr/bin/halcompile").exists() {
        return skip!(Ci, "halcompile is missing (linuxcnc-uspace-dev)");
    }
    let ns = Ipc::new();
    compile_into_modules(
        &ns,
        "hm2_fake",
        "component hm2_fake \"functions named like hostmot2's\";\n\
         pin out u32 reads;\n\
         pin out u32 updates;\n\
         function read nofp;\n\
         function write nofp;\n\
         function update nofp;\n\
         license \"GPL\";\n\
         ;;\n\
         FUNCTION(read) { reads++; }\n\
         FUNCTION(write) { }\n\
         FUNCTION(update) { updates++; }\n",
    );
    let mut m = Master(ns.master(1, &[]));
    ns.ok(&["loadrt", "threads", "name1=servo", "period1=1000000"]);
    ns.ok(&["loadrt", "hm2_fake", "names=hm2_fake.0"]);
    for f in ["read", "update", "write"] {
        ns.ok(&["addf", &format!("hm2_fake.0.{f}"), "servo"]);
    }
    ns.ok(&["start"]);
    let io = |j: &serde_json::Value| {
        j["threads"]
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == "servo"))
            .map(|t| t["io_ns"].clone())
            .unwrap_or_default()
    };
    until_true("100 periods with I/O", GENEROUS, || {
        io(&ns.show_threads())["periods"]
            .as_u64()
            .is_some_and(|n| n >= 100)
    });
    // hal_lib runs no function once stopped (the thread still counts its periods): the figures
    // hold still and can be compared with the module's own count.
    ns.ok(&["stop"]);
    let j = ns.show_threads();
    let t = j["threads"]
        .as_array()
        .and_then(|a| a.iter().find(|t| t["name"] == "servo"))
        .unwrap_or_else(|| panic!("{j}"))
        .clone();
    let io = io(&j);
    let reads = getp(&ns, "hm2_fake.0.reads") as u64;
    assert_eq!(getp(&ns, "hm2_fake.0.updates") as u64, reads);
    assert!(reads >= 100, "{reads}");
    let n = |k: &str| io[k].as_u64().unwrap_or_else(|| panic!("io_ns.{k}: {t}"));
    assert_eq!(n("periods"), reads, "one I/O sample per period run: {t}");
    assert_eq!(n("calls"), 2 * reads, "read and write, not update: {t}");
    assert!(n("periods") <= t["cycles"].as_u64().unwrap(), "{t}");
    assert!(
        n("min") <= n("p50") && n("p50") <= n("p99") && n("p99") <= n("max"),
        "{t}"
    );
    assert!(n("min") <= n("last") && n("last") <= n("max"), "{t}");
    let mean = io["mean"].as_f64().unwrap();
    assert!(n("min") as f64 <= mean && mean <= n("max") as f64, "{t}");
    // The text table.
    let o = Command::new("runuser")
        .args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_rtapi")])
        .args(["show", "thread", "--instance", &ns.inst])
        .output()
        .unwrap();
    let (out, err) = common::text(&o);
    assert!(o.status.success(), "rtapi show: {err}");
    let row = out
        .lines()
        .skip_while(|l| !l.starts_with("Thread I/O"))
        .find(|l| l.starts_with("servo "))
        .unwrap_or_else(|| panic!("no I/O row of servo: {out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[1..3],
        [reads.to_string(), (2 * reads).to_string()],
        "{out}"
    );
    // The Prometheus series.
    let metrics = scrape_once(&ns.inst);
    let count = series(&metrics, "rtapi_thread_io_seconds_count", &ns.inst);
    assert_eq!(count as u64, reads, "{metrics}");
    let calls = series(&metrics, "rtapi_thread_io_calls_total", &ns.inst);
    assert_eq!(calls as u64, 2 * reads, "{metrics}");
    let max = series(&metrics, "rtapi_thread_io_max_seconds", &ns.inst);
    let min = series(&metrics, "rtapi_thread_io_min_seconds", &ns.inst);
    assert!(min <= max && max > 0.0, "{metrics}");
    ns.ok(&["unload", "all"]);
    let st = wait_exit(&mut m);
    assert!(st.success(), "{st}\n{}", ns.master_log(1));
    let log = ns.master_log(1);
    assert!(!log.contains("I/O time:"), "{log}");
    // The summary at exit.
    let want = format!(
        "I/O (hm2 read/write) per period: {reads} periods, {} calls",
        2 * reads
    );
    assert!(log.contains(&want), "'{want}' not in: {log}");
}
