//! `rtapi scope` against a running sim-axis-like loop: a command step made with `sets` is captured
//! one row per servo period with the step at the pre-trigger position; an overrun (the owner stopped
//! for 50 ms) triggers a capture whose period numbers jump by the missed periods; a trigger that never
//! fires times out. Every time the scope leaves the instance as it found it.

mod common;
use common::halrun;
use common::rtapi;
use halrun::Halrun as Owner;

use common::eventually;

use std::io::BufRead;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const AXIS: &str = "\
loadrt threads name1=servo period1=1000000
loadrt pid num_chan=1
loadrt sim_axis
net cmd pid.0.command
net pos-fb sim_axis.0.position-fb => pid.0.feedback
net torque pid.0.output => sim_axis.0.torque-cmd
net enable pid.0.enable sim_axis.0.enable
sets enable 1
setp pid.0.Pgain 2000
setp pid.0.Igain 40000
setp pid.0.Dgain 15
setp pid.0.maxoutput 500
setp sim_axis.0.max-torque 500
addf sim_axis.0.update servo
addf pid.0.do-pid-calcs servo
start
";

/// A running `rtapi scope`, its standard error read as it comes.
struct Scope {
    child: Child,
    stderr: std::thread::JoinHandle<String>,
}

impl Scope {
    /// Waits for the end: (status, stdout, stderr).
    fn output(mut self) -> (ExitStatus, String, String) {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut self.child.stdout.take().unwrap(), &mut out).unwrap();
        let status = self.child.wait().unwrap();
        (status, out, self.stderr.join().unwrap())
    }
}

/// Starts `rtapi scope ARGS` and waits until it says it is ready: attached, the pre-trigger share
/// full, the trigger able to fire from the next period on.
fn scope(owner: &Owner, args: &[&str]) -> Scope {
    let mut all = vec!["scope", "--instance", &owner.name, "--thread", "servo"];
    all.extend_from_slice(args);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(&all)
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = std::thread::spawn(move || {
        let mut all = String::new();
        for line in std::io::BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let t0 = Instant::now();
    let mut seen = String::new();
    loop {
        let left = eventually::GENEROUS.saturating_sub(t0.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("rtapi scope: ready:") => break,
            Ok(line) => seen.push_str(&(line + "\n")),
            Err(e) => panic!("the scope never said it was ready ({e:?}): {seen}"),
        }
    }
    eprintln!("scope ready after {:?}", t0.elapsed());
    Scope { child, stderr }
}

fn finish(scope: Scope) -> (bool, String) {
    let (status, _, err) = scope.output();
    (status.success(), err)
}

/// (period, values) rows of a scope CSV.
fn rows(csv: &str) -> Vec<(u64, Vec<f64>)> {
    csv.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[2..].iter().map(|x| x.parse().unwrap()).collect(),
            )
        })
        .collect()
}

fn untouched(owner: &Owner, functs_before: &str, sigs_before: &str) {
    // The scope's ring file went with its sampler (not at the instance's end).
    let rings: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("rtapi-{}:scope-", owner.name)))
        .collect();
    assert!(rings.is_empty(), "left behind: {rings:?}");
    assert!(
        !owner.show("comp").contains("scope-"),
        "{}",
        owner.show("comp")
    );
    // Owner, thread, position and name of every function (not its timing).
    let layout = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                if w.len() >= 8 {
                    format!("{} {} {} {}", w[0], w[1], w[2], w[w.len() - 1])
                } else {
                    w.join(" ")
                }
            })
            .collect()
    };
    assert_eq!(
        layout(&owner.show("funct")),
        layout(functs_before),
        "the thread's functions are back"
    );
    assert_eq!(
        owner.show("sig").lines().count(),
        sigs_before.lines().count(),
        "no signal left behind: {}",
        owner.show("sig")
    );
}

#[test]
fn a_command_step_is_captured_one_row_per_period_with_the_step_at_the_pre_trigger_position() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Owner::start("scope-step", AXIS);
    let (functs, sigs) = (owner.show("funct"), owner.show("sig"));
    let out = dir.path().join("step");
    let overruns = || -> u64 {
        let o = rtapi(&["getp", "--instance", &owner.name, "servo.overruns"]);
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    };
    let overruns_before = overruns();
    let child = scope(
        &owner,
        &[
            "pid.0.command",
            "pid.0.feedback",
            "pid.0.error",
            "--trigger",
            "rise:pid.0.command:0.5",
            "--pre",
            "25",
            "--length",
            "400",
            "--out",
            out.to_str().unwrap(),
            "--preview",
        ],
    );
    let set = rtapi(&["sets", "--instance", &owner.name, "cmd", "1"]);
    assert!(set.status.success());
    let (status, preview, err) = child.output();
    assert!(status.success(), "{err}");
    // The preview: the command's line low then high from the trigger column on (64 columns, row 100
    // of 400 is column 16), and the trigger marked under it.
    let lines: Vec<&str> = preview.lines().collect();
    assert_eq!(lines.len(), 4, "{preview}");
    assert!(
        lines[0].starts_with(&format!(
            " pid.0.command {}{}",
            "▁".repeat(16),
            "█".repeat(48)
        )),
        "{preview}"
    );
    assert_eq!(lines[3], format!("{}^ trigger", " ".repeat(15 + 16)));
    let csv = std::fs::read_to_string(out.with_extension("csv")).unwrap();
    assert!(csv.starts_with("period,time_ms,pid.0.command,pid.0.feedback,pid.0.error\n"));
    let rows = rows(&csv);
    assert_eq!(rows.len(), 400);
    // One row per period the thread ran; a period it missed (the host stalled it) is a jump in the
    // numbers, and only then.
    let gaps = rows.windows(2).filter(|w| w[1].0 != w[0].0 + 1).count();
    assert!(rows.windows(2).all(|w| w[1].0 > w[0].0));
    if gaps > 0 {
        eprintln!("scope: {gaps} gap(s): the host made the servo thread miss periods");
        assert!(overruns() > overruns_before, "a gap with no missed period");
    }
    // The step: 0 before row 100, 1 from it on; the loop then moves the axis toward it.
    assert!(rows[..100].iter().all(|r| r.1[0] == 0.0));
    assert!(rows[100..].iter().all(|r| r.1[0] == 1.0));
    assert_eq!(
        rows[100].1[2],
        1.0 - rows[100].1[1],
        "error = command − feedback"
    );
    assert!(rows[399].1[1] > 0.5, "the axis followed: {:?}", rows[399]);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.with_extension("json")).unwrap())
            .unwrap();
    assert_eq!(json["trigger"]["row"], 100);
    assert_eq!(json["gaps"], gaps);
    let svg = std::fs::read_to_string(out.with_extension("svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("pid.0.error") && svg.contains("trigger"));
    untouched(&owner, &functs, &sigs);
}

#[test]
fn an_overrun_triggers_and_its_missed_periods_show_as_a_jump_in_the_period_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Owner::start("scope-overrun", AXIS);
    // A host stall can fire the trigger first: then the jump is small, and the test tries again.
    for attempt in 1..=3 {
        let out = dir.path().join(format!("overrun{attempt}"));
        let child = scope(
            &owner,
            &[
                "pid.0.error",
                "--trigger",
                "overrun",
                "--pre",
                "50",
                "--length",
                "200",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        owner.signal(nix::sys::signal::Signal::SIGSTOP);
        std::thread::sleep(Duration::from_millis(50));
        owner.signal(nix::sys::signal::Signal::SIGCONT);
        let (ok, err) = finish(child);
        assert!(ok, "{err}");
        let rows = rows(&std::fs::read_to_string(out.with_extension("csv")).unwrap());
        assert_eq!(rows.len(), 200);
        let jump = rows[100].0 - rows[99].0;
        assert!(jump >= 2, "the trigger row follows missed periods: +{jump}");
        if jump >= 30 {
            return;
        }
        eprintln!("scope: attempt {attempt} fired on a host stall (+{jump} periods); again");
    }
    panic!("the 50 ms stop never showed as the trigger");
}

#[test]
fn a_trigger_that_never_fires_times_out_and_leaves_the_instance_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Owner::start("scope-timeout", AXIS);
    let (functs, sigs) = (owner.show("funct"), owner.show("sig"));
    let out = dir.path().join("never");
    let child = scope(
        &owner,
        &[
            "pid.0.command",
            "--trigger",
            "above:pid.0.command:5",
            "--timeout",
            "1s",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let (ok, err) = finish(child);
    // The message says what the channel did while the trigger waited, and what to change: `cmd`
    // has no writer, so it stayed at 0 all along.
    assert!(!ok, "{err}");
    let why = err
        .split_once("the trigger above:pid.0.command:5 did not fire within 1s: pid.0.command stayed at 0 over ")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("{err}"));
    let (samples, rest) = why.split_once(' ').unwrap();
    assert!(samples.parse::<u64>().is_ok_and(|n| n > 0), "{err}");
    assert!(
        rest.starts_with("samples; the level 5 is outside that: give a level inside it, or give another --trigger, or a longer --timeout"),
        "{err}"
    );
    assert!(!out.with_extension("csv").exists());
    untouched(&owner, &functs, &sigs);
    // Bad input is refused before anything is attached.
    let o = rtapi(&[
        "scope",
        "--instance",
        &owner.name,
        "nosuch.pin",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("nosuch.pin"));
    untouched(&owner, &functs, &sigs);
}

#[test]
fn a_manual_trigger_fires_on_enter() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let owner = Owner::start("scope-manual", AXIS);
    let out = dir.path().join("manual");
    let mut child = scope(
        &owner,
        &[
            "pid.0.feedback",
            "--trigger",
            "manual",
            "--length",
            "50",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    // Ready and waiting: 200 periods go by and nothing fires before Enter.
    let reader = rtapi_hal::HalReader::open(&owner.name, rtapi_hal::Access::ReadOnly).unwrap();
    let cycles = || reader.thread_stats("servo").unwrap().cycles;
    let at = cycles();
    eventually::until_true("200 servo periods", eventually::GENEROUS, || {
        cycles() >= at + 200
    });
    assert!(
        child.child.try_wait().unwrap().is_none(),
        "it must wait for Enter"
    );
    writeln!(child.child.stdin.take().unwrap()).unwrap();
    let (ok, err) = finish(child);
    assert!(ok, "{err}");
    assert_eq!(
        rows(&std::fs::read_to_string(out.with_extension("csv")).unwrap()).len(),
        50
    );
}

#[test]
fn a_function_fault_triggers_and_the_faulted_function_stops_at_the_trigger_row() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Owner::start(
        "scope-fault",
        "loadrt threads name1=servo period1=1000000\nloadrt fault_drill\nloadrt siggen\n\
         net fire fault_drill.0.fire\naddf siggen.0.update servo\naddf fault_drill.0 servo\nstart\n",
    );
    let (functs, sigs) = (owner.show("funct"), owner.show("sig"));
    let getp = |name: &str| -> f64 {
        let o = rtapi(&["getp", "--instance", &owner.name, name]);
        let v = String::from_utf8_lossy(&o.stdout).trim().to_string();
        match v.as_str() {
            "TRUE" => 1.0,
            "FALSE" => 0.0,
            v => v.parse().unwrap(),
        }
    };
    assert_eq!((getp("servo.faults"), getp("servo.faulted")), (0.0, 0.0));
    let out = dir.path().join("fault");
    let child = scope(
        &owner,
        &[
            "fault_drill.0.calls",
            "siggen.0.sine",
            "--trigger",
            "fault",
            "--pre",
            "50",
            "--length",
            "100",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let set = rtapi(&["sets", "--instance", &owner.name, "fire", "1"]);
    assert!(set.status.success());
    let (ok, err) = finish(child);
    assert!(ok, "{err}");
    let rows = rows(&std::fs::read_to_string(out.with_extension("csv")).unwrap());
    assert_eq!(rows.len(), 100);
    // The drill's call count rose by one in every row before the trigger row (a row is a period
    // that ran; periods the host made the thread miss are jumps in the period numbers, with no call)
    // and stops there: the function faulted in that period and is no longer called; the thread goes
    // on (siggen moves).
    let calls: Vec<f64> = rows.iter().map(|r| r.1[0]).collect();
    assert!(
        calls[..50].windows(2).all(|w| w[1] - w[0] == 1.0),
        "{calls:?}"
    );
    assert!(calls[50..].iter().all(|&c| c == calls[49]), "{calls:?}");
    assert!(rows[50..].windows(2).any(|w| w[1].1[1] != w[0].1[1]));
    assert_eq!((getp("servo.faults"), getp("servo.faulted")), (1.0, 1.0));
    let shown = owner.show("funct");
    assert!(shown.contains("fault_drill.0"), "{shown}");
    untouched(&owner, &functs, &sigs);
}
