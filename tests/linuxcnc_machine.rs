//! LinuxCNC's sim/axis machine as the reference of `rtapi linuxcnc` (issue 24): the same config, the
//! same G-code programs, the joints' `pos-fb` sampled every servo period, compared move by move
//! (tests/common/lcnc_machine.rs says what a run is and what "equal" means).
//!
//! * Two runs of LinuxCNC's own `rtapi_app` are identical to the bit: the harness's reference holds.
//! * A feed rate changed by 1 in one program, one value off by one ulp, one period of delay inside a
//!   move: each is a difference the comparison reports (the comparison can fail).
//! * `rtapi linuxcnc` against stock: the same machine and programs with rtapi as the realtime master (issue 24): equal to the bit.
//!
//! # Why the display holds the feed
//!
//! LinuxCNC's planner starts the first queued segment in the period after it arrives, and how a
//! blended (`G64`) segment accelerates depends on what is queued behind it. Milltask queues the
//! program on its own wall clock (task cycle 1 ms), so a program that starts moving while it is still
//! being queued moves differently from run to run: two stock runs of these programs, started
//! straight away, differed from the second moving period of a `G64 P0.01` chain on (3.33e-5 vs
//! 3.75e-5 in after two periods); an exact-stop (`G61`) lead-in before the chain was not enough
//! (the lead-in's own ramp differed at its third period, 2.1667e-4 vs 2.1583e-4 in). So `drive.py`
//! starts each program with feed and rapid override at 0 and releases them once the motion queue
//! has stopped growing, and holds again during a dwell (milltask queues nothing after `G4` until its
//! delay is over): the planner then sees the same queue in every run.

mod common;
use common::lcnc_machine;
use common::linuxcnc;

use std::sync::OnceLock;

use lcnc_machine::{compare, moves, run, Launcher, Machine, Program, Run, MIN_REST};

/// Lines in three joints at exact stop (`G61`), rapids between them.
const LINES: &str = "G20 G90 G61
G0 X1 Y0.5
G1 F120 X2 Y1.5 Z-1
G1 X-1 Y1 Z-0.5
G0 X0 Y0 Z0
M2
";

/// `G2`/`G3` arcs in XY, one a helix (Z moves), a full circle, blended (`G64`).
const ARCS: &str = "G20 G90 G17 G64
G0 X1 Y0 Z0
G1 F180 X2
G2 X3 Y1 I0 J1
G3 X4 Y2 I1 J0 Z-0.5
G2 X4 Y2 I-1 J0
G0 X0 Y0 Z0
M2
";

/// Short segments blended within 0.01 in (`G64 P0.01`), a half-second dwell (`G4`), then more.
const BLENDS: &str = "G20 G90 G64 P0.01
G1 F240 X1 Y0.2
X1.5 Y0.8
X2 Y0.7
X2.5 Y1.3
G4 P0.5
G1 F240 X3 Y0 Z-0.3
X0 Y0 Z0
M2
";

fn programs(lines: &str) -> Vec<Program> {
    vec![
        Program::new("lines", lines),
        Program::new("arcs", ARCS),
        Program::new("blends", BLENDS),
    ]
}

fn machine(name: &str, lines: &str) -> Machine {
    Machine::sim_axis(name, programs(lines))
}

fn run_or_panic(launcher: &Launcher, m: &Machine) -> Run {
    let r = run(launcher, m).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "{}: {} ran in {:.1} s, {} samples; stages: {}",
        r.launcher,
        m.name,
        r.seconds,
        r.samples.len(),
        r.result["stages"]
            .as_array()
            .map(|a| a
                .iter()
                .map(|s| format!(
                    "{} {:.2} s",
                    s["stage"].as_str().unwrap_or("?"),
                    s["seconds"].as_f64().unwrap_or(0.0)
                ))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    );
    for l in r.log.lines().filter(|l| l.starts_with("drive.py")) {
        eprintln!("  {l}");
    }
    r
}

/// The stock run every comparison is against (run once per test binary).
fn baseline() -> &'static Run {
    static BASE: OnceLock<Run> = OnceLock::new();
    BASE.get_or_init(|| run_or_panic(&Launcher::Stock, &machine("stock-a", LINES)))
}

/// What any good run of the three programs looks like, whoever the master is.
fn check_shape(r: &Run) {
    let ms = moves(&r.samples);
    eprintln!("{}: moves {:?}", r.launcher, ms);
    for (phase, what) in [(1, "homing"), (2, "lines"), (3, "arcs"), (4, "blends")] {
        assert!(
            ms.iter().any(|m| m.phase == phase),
            "{}: no move in phase {phase} ({what}): {ms:?}",
            r.launcher
        );
    }
    // The dwell splits the blends program in two moves, at least 0.5 s apart (its wall-clock time).
    let blends: Vec<_> = ms.iter().filter(|m| m.phase == 4).collect();
    assert_eq!(
        blends.len(),
        2,
        "{}: blends program: {blends:?}",
        r.launcher
    );
    let dwell = blends[1].first - blends[0].last;
    assert!(dwell >= 500, "{}: dwell of {dwell} periods", r.launcher);
    // Every program returns to the origin: the machine ends there.
    let end = r.final_position("joint_actual_position");
    assert_eq!(end.len(), 3, "{}: final joints {end:?}", r.launcher);
    assert!(
        end.iter().all(|p| p.abs() < 1e-9),
        "{}: ends at {end:?}",
        r.launcher
    );
    assert!(ms.len() >= 5 && MIN_REST > 1);
    // The machine shut down by itself when the display exited: nothing of it was left to end.
    assert!(
        r.ended_after.is_empty(),
        "{}: left running: {:?}",
        r.launcher,
        r.ended_after
    );
}

#[test]
fn two_stock_runs_are_identical_move_by_move() {
    if !lcnc_machine::ready("linuxcnc_machine") {
        return;
    }
    let a = baseline();
    check_shape(a);
    let b = run_or_panic(&Launcher::Stock, &machine("stock-b", LINES));
    check_shape(&b);
    let agree = compare(a, &b).unwrap_or_else(|e| panic!("two stock runs differ: {e}"));
    eprintln!(
        "stock vs stock: {} moves, {} periods equal to the bit; rests before each move (a, b): {:?}",
        agree.moves.len(),
        agree.periods,
        agree.rests
    );
}

#[test]
fn a_feed_rate_changed_by_one_is_a_difference() {
    if !lcnc_machine::ready("linuxcnc_machine") {
        return;
    }
    let a = baseline();
    let b = run_or_panic(
        &Launcher::Stock,
        &machine("stock-f121", &LINES.replace("F120", "F121")),
    );
    check_shape(&b);
    let e = compare(a, &b).expect_err("F120 and F121 compared equal");
    eprintln!("F121 instead of F120, as reported:\n{e}");
    assert!(
        e.contains("(phase 2)"),
        "the difference is in the lines program: {e}"
    );
}

#[test]
fn one_ulp_or_one_period_of_delay_is_a_difference() {
    if !lcnc_machine::ready("linuxcnc_machine") {
        return;
    }
    let a = baseline();
    let ms = moves(&a.samples);
    let arc = *ms.iter().find(|m| m.phase == 3).unwrap();
    let mid = (arc.first + arc.last) / 2;
    let copy = |samples: Vec<lcnc_machine::Sample>| Run {
        launcher: "altered copy".into(),
        result: a.result.clone(),
        samples,
        seconds: 0.0,
        log: String::new(),
        servo_thread: None,
        ended_after: Vec::new(),
    };
    // The copy itself compares equal.
    compare(a, &copy(a.samples.clone())).expect("a run equals its copy");
    let mut ulp = a.samples.clone();
    ulp[mid].values[0] = f64::from_bits(ulp[mid].values[0].to_bits() + 1);
    let e = compare(a, &copy(ulp)).expect_err("one ulp compared equal");
    assert!(e.contains("(phase 3)"), "{e}");
    let mut late = a.samples.clone();
    late.insert(mid, late[mid - 1].clone());
    let e = compare(a, &copy(late)).expect_err("one period of delay compared equal");
    assert!(e.contains("(phase 3)"), "{e}");
    let mut end = a.samples.clone();
    let home_end = ms.iter().rfind(|m| m.phase == 1).unwrap().last;
    end[home_end].values[1] += 1e-6;
    assert!(
        compare(a, &copy(end)).is_err(),
        "a homing sample off by 1e-6 compared equal"
    );
}

#[test]
fn rtapi_linuxcnc_runs_sim_axis_like_stock() {
    if !lcnc_machine::ready("linuxcnc_machine") {
        return;
    }
    // RTAPI_LINUXCNC_BIN: another build's binary (a branch's) instead of this one's.
    let bin = std::env::var_os("RTAPI_LINUXCNC_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_rtapi").into());
    let ours = Launcher::Rtapi(bin);
    let b = run_or_panic(&ours, &machine("rtapi", LINES));
    check_shape(&b);
    let a = baseline();
    let agree = compare(a, &b).unwrap_or_else(|e| panic!("rtapi linuxcnc differs from stock: {e}"));
    eprintln!(
        "rtapi vs stock: {} moves, {} periods equal to the bit",
        agree.moves.len(),
        agree.periods
    );
}

/// A run whose display never exits is ended at its deadline, and everything it started goes: its
/// processes (the daemonized `rtapi_app` too), its SysV segments, `/tmp/linuxcnc.lock`.
#[test]
fn a_hung_run_is_ended_and_cleaned_up() {
    if !lcnc_machine::ready("linuxcnc_machine") {
        return;
    }
    let mut m = Machine::up_only("hang", "sample-configs/sim/axis/axis.ini");
    m.hang = true;
    m.keep_failed = false;
    m.deadline = Some(std::time::Duration::from_secs(25));
    let e = run(&Launcher::Stock, &m).expect_err("a display that never exits ended");
    eprintln!("as reported: {}", e.what);
    assert!(e.what.contains("did not end within"), "{e}");
    assert!(
        e.log.contains("hanging, as the job says"),
        "the display got to its hang: {e}"
    );
    // The machine-wide checks under the LinuxCNC lock: another test's run may have started since.
    let _lock = linuxcnc::SessionLock::take();
    let home = format!("HOME={}", e.dir.display());
    let left: Vec<_> = lcnc_machine::processes()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{}/environ", p.pid))
                .map(|env| env.split(|b| *b == 0).any(|x| x == home.as_bytes()))
                .unwrap_or(false)
        })
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
    assert!(!linuxcnc::rtapi_app_running(), "an rtapi_app is left");
    let shm = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    for key in [0x48414C32_i64, 0x48484c34] {
        assert!(
            !shm.lines()
                .skip(1)
                .any(|l| l.split_whitespace().next() == Some(&key.to_string())),
            "segment {key:#x} left:\n{shm}"
        );
    }
    assert!(
        !std::path::Path::new("/tmp/linuxcnc.lock").exists(),
        "/tmp/linuxcnc.lock left"
    );
    assert!(!e.dir.exists(), "run directory left");
}
