//! `rtapi show/getp/setp/sets/watch` against a live sim-axis instance, from other processes, and their
//! errors (unknown names and refused writes exit 2; no running instance exits 1 and says how to start one).

mod common;
use common::sim_axis::Running as Instance;
use common::{rtapi, text};

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A sim-axis instance of its own (`halcmd-<n>-<pid>`), for 20 s.
fn start() -> Instance {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Instance::start(format!("halcmd-{}-{n}", std::process::id()), "20s", |_| {})
}

/// This file reads values as text.
impl Instance {
    fn getp(&self, name: &str) -> String {
        let out = self.run(&["getp", name]);
        assert!(out.status.success(), "{:?}", text(&out));
        text(&out).0.trim().to_string()
    }
}

#[test]
fn show_getp_setp_sets_watch_against_a_live_instance() {
    let i = start();

    // show, text: every section, halcmd-like.
    let out = i.run(&["show"]);
    let (stdout, _) = text(&out);
    for s in [
        "Components:",
        "Pins:",
        "Parameters:",
        "Signals:",
        "Exported Functions:",
        "Realtime Threads:",
        "pid.0.do-pid-calcs",
        "<== pos-cmd",
    ] {
        assert!(stdout.contains(s), "missing {s}:\n{stdout}");
    }

    // Functions: thread, position in addf order, timing.
    let f = i.json(&["show", "funct"]);
    let pid = f["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "pid.0.do-pid-calcs")
        .unwrap();
    // Its position is the number of servo functions added before it in config/sim-axis.hal.
    let hal = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/sim-axis.hal"))
        .unwrap();
    let before = hal
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 3 && w[0] == "addf" && w[2] == "servo")
        .take_while(|w| w[1] != "pid.0.do-pid-calcs")
        .count() as u64;
    assert_eq!(
        (pid["thread"].as_str(), pid["position"].as_u64()),
        (Some("servo"), Some(before))
    );
    assert!(pid["calls"].as_u64().unwrap() > 0 && pid["max_ns"].as_u64().unwrap() > 0);

    // Threads: periods, flavor, stats.
    let t = i.json(&["show", "thread"]);
    let threads = t["threads"].as_array().unwrap();
    assert_eq!(threads[0]["name"], "base");
    assert_eq!(threads[0]["period_ns"], 50_000);
    assert_eq!(threads[1]["period_ns"], 1_000_000);
    for th in threads {
        assert!(!th["flavor"].as_str().unwrap().is_empty());
        assert!(th["overruns"].is_u64() && th["latency_ns"]["max"].is_i64());
    }

    // Signals with their writer and readers; a glob on pins.
    let s = i.json(&["show", "sig", "pos-cmd"]);
    assert_eq!(s["signals"][0]["writer"], "cmd-limit.out");
    assert!(s["signals"][0]["readers"]
        .as_array()
        .unwrap()
        .contains(&Value::from("pid.0.command")));
    let p = i.json(&["show", "pin", "pid.0.?gain"]);
    let names: Vec<&str> = p["pins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pid.0.Pgain", "pid.0.Igain", "pid.0.Dgain"]);

    // getp reads pins, params and signals; setp writes params and unconnected inputs.
    assert_eq!(i.getp("pid.0.Pgain"), "2000");
    assert_eq!(i.getp("machine-enable"), "TRUE");
    assert!(i.run(&["setp", "stepgen.0.maxvel", "40"]).status.success());
    assert_eq!(i.getp("stepgen.0.maxvel"), "40");
    assert!(i.run(&["setp", "encoder.0.reset", "1"]).status.success());
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(i.getp("encoder.0.counts"), "0");
    assert!(i.run(&["setp", "encoder.0.reset", "0"]).status.success());

    // Refusals: exit 2 with the reason.
    for (args, says) in [
        (vec!["setp", "pid.0.output", "1"], "OUT pin"),
        (vec!["setp", "pid.0.command", "1"], "sets pos-cmd"),
        (
            vec!["setp", "pid.0.Pgian", "1"],
            "no pin or param named 'pid.0.Pgian'",
        ),
        (vec!["setp", "pid.0.Pgain", "lots"], "not a valid float"),
        (vec!["setp", "stepgen.0.frequency", "3"], "read-only"),
        (
            vec!["sets", "pos-cmd", "1"],
            "driven by OUT pin 'cmd-limit.out'",
        ),
        (
            vec!["getp", "nothing.here"],
            "no pin, param or signal named",
        ),
        (
            vec!["watch", "nothing.here", "--count", "1"],
            "no pin, param or signal",
        ),
        // Non-finite floats (typed, or overflowing to infinity) need --force.
        (vec!["setp", "pid.0.Pgain", "nan"], "is NaN"),
        (vec!["setp", "pid.0.Pgain", "inf"], "is infinite"),
        (vec!["setp", "pid.0.Pgain", "-Infinity"], "is infinite"),
        (
            vec!["setp", "pid.0.Pgain", "1e309"],
            "overflows a float to infinity",
        ),
        (vec!["setp", "pid.0.Pgain", "-1e309"], "pass --force"),
        // --count 0 used to print one sample.
        (
            vec!["watch", "pid.0.error", "--count", "0"],
            "--count must be at least 1; omit it to watch until Ctrl-C",
        ),
    ] {
        let out = i.run(&args);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(text(&out).0.is_empty(), "{args:?}: {}", text(&out).0);
    }
    assert_eq!(
        i.getp("pid.0.Pgain"),
        "2000",
        "no refused value was written"
    );

    // watch: one line per sample when not on a terminal.
    let out = i.run(&[
        "watch",
        "pid.0.error",
        "siggen.0.sine",
        "--interval",
        "20ms",
        "--count",
        "5",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    for l in lines {
        assert!(
            l.starts_with("t=") && l.contains(" pid.0.error=") && l.contains(" siggen.0.sine="),
            "{l}"
        );
    }

    // Forced, a non-finite value is written (last: it wrecks the loop, which is the point of refusing it).
    assert!(i
        .run(&["setp", "pid.0.Pgain", "inf", "--force"])
        .status
        .success());
    assert_eq!(i.getp("pid.0.Pgain"), "inf");
}

#[test]
fn commands_without_a_running_instance_say_how_to_start_one() {
    let name = format!("nobody-{}", std::process::id());
    for args in [
        vec!["show"],
        vec!["getp", "pid.0.Pgain"],
        vec!["setp", "pid.0.Pgain", "1"],
        vec!["sets", "x", "1"],
        vec!["watch", "x"],
    ] {
        let mut all = args.clone();
        all.extend(["--instance", &name]);
        let out = rtapi(&all);
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        // Then either how to start one, or (other tests' instances running) which ones run.
        let head = format!("no rtapi instance '{name}' is running (no /dev/shm/rtapi-{name})");
        assert!(
            stderr.contains(&format!(
                "{head}, nor any other; start one with `rtapi run CONFIG.toml --instance {name}`"
            )) || stderr.contains(&format!("{head}; running: ")),
            "{args:?}: {stderr}"
        );
    }
    let out = rtapi(&["show", "--instance", "bad/name"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn sigterm_stops_a_run_cleanly() {
    // A run that would go on for 10 minutes, stopped by SIGTERM once it runs: it ends by itself
    // (not by the signal's default action), exit code 0 — or 1 when the host stalled a thread,
    // which the log then says — with its summary printed and its segment removed.
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let name = format!("halcmd-term-{}", std::process::id());
    let mut child = common::sim_axis::command(&name, "600s")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let cycles = || -> u64 {
        let o = rtapi(&["show", "thread", "--json", "--instance", &name]);
        serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v["threads"][1]["cycles"].as_u64())
            .unwrap_or(0)
    };
    while cycles() < 10 {
        assert!(t0.elapsed() < Duration::from_secs(30), "instance never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t1.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("still running 60 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!("stopped {:?} after SIGTERM: {status:?}", t1.elapsed());
    let (out, err) = (
        std::fs::read_to_string(out).unwrap(),
        std::fs::read_to_string(err).unwrap(),
    );
    match status.code() {
        Some(0) => {}
        Some(1) if err.contains("STALLED") => eprintln!("the host stalled a thread: {err}"),
        other => panic!(
            "exit {other:?} (signal {:?}); stderr: {err}",
            std::os::unix::process::ExitStatusExt::signal(&status)
        ),
    }
    assert!(
        out.contains("rtapi ran") && out.contains("servo") && out.contains("base"),
        "the summary: {out}"
    );
    assert!(!Path::new(&format!("/dev/shm/rtapi-{name}")).exists());
}
