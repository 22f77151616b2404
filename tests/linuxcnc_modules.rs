//! LinuxCNC 2.9's compiled real-time modules hosted by rtapi (issue 16, `components::linuxcnc`): the
//! real `.so` files of `linuxcnc-uspace` (`/usr/lib/linuxcnc/modules`), loaded by the real binary in a
//! running instance and driven from other processes; a differential run of hosted modules against
//! LinuxCNC's own `halrun`, period by period; a `.comp` compiled with `halcompile --compile` and
//! loaded by path; what rtapi lacks named at `loadrt`.
//!
//! Without LinuxCNC's modules installed every test here fails (never skips).

mod common;
use common::halrun;
use common::linuxcnc;

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{rtapi, text};
use halrun::{halcmd, Halrun};
use linuxcnc::{rows, Case, Ty, V};
use rtapi::components::{Harness, Target};
use rtapi_hal::{Access, HalReader, WriteOptions};

const MODULES: &str = "/usr/lib/linuxcnc/modules";

fn need_modules() {
    assert!(
        Path::new(MODULES).join("and2.so").is_file(),
        "LinuxCNC's modules are missing from {MODULES}: install linuxcnc-uspace (.ci/run does)"
    );
}

/// Polls `getp NAME` until `ok(value)`; the last value otherwise (fails after 10 s).
fn wait_for(instance: &str, name: &str, ok: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, out, err) = halcmd(instance, &["getp", name]);
        let v = out.trim().to_string();
        if ok(&v) {
            return v;
        }
        assert!(
            Instant::now() < until,
            "{name} stayed {v:?} (stderr: {err})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn getp(instance: &str, name: &str) -> String {
    let (ok, out, err) = halcmd(instance, &["getp", name]);
    assert!(ok, "getp {name}: {err}");
    out.trim().to_string()
}

fn run(instance: &str, args: &[&str]) {
    let (ok, out, err) = halcmd(instance, args);
    assert!(ok, "halcmd {args:?}: {out}{err}");
}

#[test]
fn hosted_modules_run_in_a_real_instance_and_follow_links() {
    need_modules();
    let mut h = Halrun::start(
        "lcm-live",
        "loadrt threads name1=servo period1=1000000\n\
         loadrt linuxcnc:and2 count=2\n\
         loadrt linuxcnc:not\n\
         loadrt linuxcnc:scale count=1\n\
         loadrt linuxcnc:pid num_chan=1\n\
         loadrt linuxcnc:siggen\n\
         addf siggen.0.update servo\n\
         addf and2.0 servo\n\
         addf and2.1 servo\n\
         addf not.0 servo\n\
         addf scale.0 servo\n\
         addf pid.0.do-pid-calcs servo\n\
         setp and2.0.in0 1\n\
         setp and2.0.in1 1\n\
         setp scale.0.gain 2.5\n\
         setp scale.0.offset 0.25\n\
         setp scale.0.in 4\n\
         setp pid.0.Pgain 3\n\
         setp pid.0.enable 1\n\
         setp pid.0.command 2\n\
         setp pid.0.feedback 0.5\n\
         net a and2.0.out => not.0.in\n\
         start\n",
    );
    let n = h.name.clone();
    // Pins of all four kinds of direction and the module's own defaults.
    wait_for(&n, "and2.0.out", |v| v == "TRUE");
    wait_for(&n, "not.0.out", |v| v == "FALSE");
    wait_for(&n, "scale.0.out", |v| v == "10.25");
    // LinuxCNC's pid computes against the previous command by default: after a few periods the same.
    wait_for(&n, "pid.0.output", |v| v == "4.5");
    assert_eq!(getp(&n, "pid.0.error-previous-target"), "TRUE");
    // Time pins and tmax params of hosted functions, as native ones.
    wait_for(&n, "and2.0.time", |v| v.parse::<i64>().is_ok_and(|t| t > 0));
    // siggen runs: its sine moves.
    let s1 = getp(&n, "siggen.0.sine");
    wait_for(&n, "siggen.0.sine", |v| v != s1);

    // Links made while running re-point the module's own pointers.
    run(&n, &["setp", "and2.0.in1", "0"]);
    wait_for(&n, "not.0.out", |v| v == "TRUE");
    run(&n, &["unlinkp", "not.0.in"]);
    run(&n, &["net", "b", "and2.1.out", "not.0.in"]);
    run(&n, &["setp", "and2.1.in0", "1"]);
    run(&n, &["setp", "and2.1.in1", "1"]);
    wait_for(&n, "not.0.out", |v| v == "FALSE");
    run(&n, &["setp", "and2.1.in1", "0"]);
    wait_for(&n, "not.0.out", |v| v == "TRUE");

    // A module loaded into the running instance.
    run(&n, &["loadrt", "linuxcnc:or2"]);
    run(&n, &["addf", "or2.0", "servo"]);
    run(&n, &["net", "c", "or2.0.out"]);
    run(&n, &["setp", "or2.0.in1", "1"]);
    wait_for(&n, "or2.0.out", |v| v == "TRUE");
    run(&n, &["unloadrt", "linuxcnc:or2"]);
    // Unloaded (rtapi_app_exit, dlclose) and loaded again: a fresh module, at its defaults.
    let (_, out, _) = halcmd(&n, &["show", "pin", "or2"]);
    assert!(!out.contains("or2.0.out"), "{out}");
    run(&n, &["loadrt", "linuxcnc:or2"]);
    run(&n, &["addf", "or2.0", "servo"]);
    run(&n, &["setp", "or2.0.in0", "1"]);
    wait_for(&n, "or2.0.out", |v| v == "TRUE");
    assert_eq!(getp(&n, "or2.0.in1"), "FALSE");

    let out = h.stop();
    let (_, err) = text(&out);
    assert!(out.status.success(), "halrun failed: {err}");
    assert!(!common::segment_exists(&n));
}

/// A hosted module's params (its own variables) follow `setp` and show what the module writes.
#[test]
fn params_of_a_module_follow_setp_and_getp() {
    need_modules();
    let mut h = Halrun::start(
        "lcm-par",
        "loadrt threads name1=servo period1=1000000\n\
         loadrt linuxcnc:ddt count=1\n\
         loadrt linuxcnc:sum2 count=1\n\
         addf sum2.0 servo\n\
         setp sum2.0.gain0 2\n\
         setp sum2.0.in0 1.5\n\
         setp sum2.0.in1 1\n\
         start\n",
    );
    let n = h.name.clone();
    // sum2's gains are params (HAL_RW variables of the module).
    wait_for(&n, "sum2.0.out", |v| v == "4");
    run(&n, &["setp", "sum2.0.gain1", "-3"]);
    wait_for(&n, "sum2.0.out", |v| v == "0");
    assert_eq!(getp(&n, "sum2.0.gain1"), "-3");
    h.stop();
}

#[test]
fn what_rtapi_lacks_is_named_at_loadrt() {
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    let check = |body: &str| -> String {
        let f = dir.path().join("x.hal");
        std::fs::write(&f, body).unwrap();
        let o = rtapi(&["halrun", "--check", "-f", f.to_str().unwrap()]);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{body} was accepted");
        assert_eq!(o.status.code(), Some(2), "{err}");
        err
    };
    // Asked for explicitly: the symbol is named.
    let e = check("loadrt linuxcnc:hal_bb_gpio\n");
    assert!(
        e.contains("x.hal:1:") && e.contains("needs symbol 'rtapi_open_as_root'"),
        "{e}"
    );
    // Found by fallback: still "not available in rtapi", with the reason.
    let e = check("loadrt hal_bb_gpio\n");
    assert!(
        e.contains("is not available in rtapi") && e.contains("needs symbol 'rtapi_open_as_root'"),
        "{e}"
    );
    // Arguments the module does not declare, and bad values.
    let e = check("loadrt linuxcnc:and2 bogus=1\n");
    assert!(
        e.contains("has no argument 'bogus'") && e.contains("count="),
        "{e}"
    );
    let e = check("loadrt linuxcnc:and2 count=x\n");
    assert!(e.contains("count"), "{e}");
    let e = check("loadrt linuxcnc:nosuchmodule\n");
    assert!(e.contains("no LinuxCNC module nosuchmodule.so"), "{e}");
    // rtapi_app_main failing: its return and the module's own message (a real halrun: --check
    // never runs module code, so it cannot know).
    let f = dir.path().join("x.hal");
    std::fs::write(&f, "loadrt linuxcnc:siggen num_chan=100\n").unwrap();
    let o = rtapi(&[
        "halrun",
        "--instance",
        &format!("lcmw{}", std::process::id()),
        "-f",
        f.to_str().unwrap(),
    ]);
    let (_, e) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("rtapi_app_main failed"), "{e}");
}

// ---- differential: hosted module vs LinuxCNC's halrun -------------------------------------------

/// One hosted load at a time in this process (a module is loaded once per process).
static HOSTED: Mutex<()> = Mutex::new(());

/// Runs the case through the LinuxCNC module hosted in rtapi's component harness.
fn run_hosted(case: &Case) -> Vec<Vec<V>> {
    let _one = HOSTED.lock().unwrap_or_else(|e| e.into_inner());
    let instance = format!("lcmh-{}-{}", std::process::id(), case.name);
    let mut h = Harness::new(&instance).unwrap();
    let line = format!(
        "linuxcnc:{} {} {}",
        case.component, case.args, case.linuxcnc_args
    );
    h.loadrt(&line)
        .unwrap_or_else(|e| panic!("case {}: loadrt {line}: {e}", case.name));
    for l in &case.lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.as_slice() {
            ["loadrt", rest @ ..] => {
                let line = format!("linuxcnc:{}", rest.join(" "));
                h.loadrt(&line)
                    .unwrap_or_else(|e| panic!("case {}: loadrt {line}: {e}", case.name));
            }
            ["net", signal, pins @ ..] => {
                for p in pins.iter().filter(|p| !matches!(**p, "=>" | "<=" | "<=>")) {
                    Target::hal(&mut h)
                        .net(signal, p)
                        .unwrap_or_else(|e| panic!("case {}: {l}: {e}", case.name));
                }
            }
            _ => panic!("case {}: line '{l}' is neither loadrt nor net", case.name),
        }
    }
    h.start().unwrap();
    let w = HalReader::open(&instance, Access::ReadWrite).unwrap();
    let force = WriteOptions { force: true };
    for (k, v) in case.setp.iter().chain(&case.linuxcnc_only) {
        w.setp_with(k, v, force)
            .unwrap_or_else(|e| panic!("case {}: setp {k} {v}: {e}", case.name));
    }
    let mut out = Vec::new();
    for row in &case.rows {
        for ((pin, _), v) in case.inputs.iter().zip(row) {
            w.setp_with(pin, &v.text(), force).unwrap();
        }
        h.step(case.period_ns);
        out.push(
            case.outputs
                .iter()
                .map(|(pin, _)| V::from_value(h.get(pin).unwrap()).unwrap())
                .collect(),
        );
    }
    drop(w);
    drop(h);
    out
}

/// Hosted and LinuxCNC must agree exactly: it is the same machine code.
fn same_as_linuxcnc(case: &Case) {
    let ours = run_hosted(case);
    let theirs = linuxcnc::run_linuxcnc(case, &case.functions);
    for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            if !x.matches(y) {
                let mut m = String::new();
                for p in k.saturating_sub(3)..=k {
                    m.push_str(&format!(
                        "period {p}: in {:?}\n  hosted   {:?}\n  linuxcnc {:?}\n",
                        case.rows[p].iter().map(V::text).collect::<Vec<_>>(),
                        ours[p].iter().map(V::text).collect::<Vec<_>>(),
                        theirs[p].iter().map(V::text).collect::<Vec<_>>()
                    ));
                }
                panic!(
                    "case {}: period {k}, {}: hosted {x}, linuxcnc {y}\n{m}",
                    case.name, case.outputs[i].0
                );
            }
        }
    }
    eprintln!(
        "case {}: {} periods, {} outputs: hosted module identical to LinuxCNC",
        case.name,
        case.rows.len(),
        case.outputs.len()
    );
}

#[test]
fn hosted_siggen_is_identical_to_linuxcnc() {
    need_modules();
    let case = Case::new("host_siggen", "siggen", "", &["siggen.0.update"])
        .input("siggen.0.frequency", Ty::Float)
        .input("siggen.0.amplitude", Ty::Float)
        .input("siggen.0.offset", Ty::Float)
        .output("siggen.0.sine", Ty::Float)
        .output("siggen.0.cosine", Ty::Float)
        .output("siggen.0.sawtooth", Ty::Float)
        .output("siggen.0.square", Ty::Float)
        .output("siggen.0.triangle", Ty::Float)
        .output("siggen.0.clock", Ty::Bit)
        .rows(rows(300, 11, |k, r| {
            let f = if k < 150 { 7.3 } else { r.float(0.0, 40.0) };
            vec![
                V::F(f),
                V::F(1.5),
                V::F(if k % 40 < 20 { 0.0 } else { 0.5 }),
            ]
        }));
    same_as_linuxcnc(&case);
}

#[test]
fn hosted_pid_is_identical_to_linuxcnc() {
    need_modules();
    let case = Case::new("host_pid", "pid", "num_chan=1", &["pid.0.do-pid-calcs"])
        .input("pid.0.command", Ty::Float)
        .input("pid.0.feedback", Ty::Float)
        .input("pid.0.enable", Ty::Bit)
        .output("pid.0.output", Ty::Float)
        .output("pid.0.error", Ty::Float)
        .output("pid.0.saturated", Ty::Bit)
        .setp("pid.0.Pgain", "2.5")
        .setp("pid.0.Igain", "40")
        .setp("pid.0.Dgain", "0.01")
        .setp("pid.0.FF1", "0.5")
        .setp("pid.0.maxoutput", "8")
        .setp("pid.0.deadband", "0.001")
        .rows(rows(400, 12, |k, r| {
            vec![
                V::F(r.float(-3.0, 3.0)),
                V::F(r.float(-3.0, 3.0)),
                V::B(k % 97 > 5),
            ]
        }));
    same_as_linuxcnc(&case);
}

#[test]
fn hosted_lowpass_limit3_ddt_are_identical_to_linuxcnc() {
    need_modules();
    let lowpass = Case::new("host_lowpass", "lowpass", "count=1", &["lowpass.0"])
        .input("lowpass.0.in", Ty::Float)
        .output("lowpass.0.out", Ty::Float)
        .setp("lowpass.0.gain", "0.07")
        .rows(rows(200, 13, |_, r| vec![V::F(r.float(-10.0, 10.0))]));
    same_as_linuxcnc(&lowpass);
    let limit3 = Case::new("host_limit3", "limit3", "count=1", &["limit3.0"])
        .input("limit3.0.in", Ty::Float)
        .output("limit3.0.out", Ty::Float)
        .setp("limit3.0.min", "-5")
        .setp("limit3.0.max", "5")
        .setp("limit3.0.maxv", "100")
        .setp("limit3.0.maxa", "10000")
        .rows(rows(300, 14, |k, r| {
            vec![V::F(if k % 60 < 30 { r.float(-8.0, 8.0) } else { 3.0 })]
        }));
    same_as_linuxcnc(&limit3);
    let ddt = Case::new("host_ddt", "ddt", "count=1", &["ddt.0"])
        .input("ddt.0.in", Ty::Float)
        .output("ddt.0.out", Ty::Float)
        .rows(rows(100, 15, |_, r| vec![V::F(r.float(-1.0, 1.0))]));
    same_as_linuxcnc(&ddt);
}

#[test]
fn hosted_logic_and_conversions_are_identical_to_linuxcnc() {
    need_modules();
    let and2 = Case::new("host_and2", "and2", "count=1", &["and2.0"])
        .input("and2.0.in0", Ty::Bit)
        .input("and2.0.in1", Ty::Bit)
        .output("and2.0.out", Ty::Bit)
        .rows(rows(64, 16, |_, r| {
            vec![V::B(r.chance(0.5)), V::B(r.chance(0.5))]
        }));
    same_as_linuxcnc(&and2);
    let conv = Case::new(
        "host_conv_float_s32",
        "conv_float_s32",
        "count=1",
        &["conv-float-s32.0"],
    )
    .input("conv-float-s32.0.in", Ty::Float)
    .output("conv-float-s32.0.out", Ty::S32)
    .output("conv-float-s32.0.out-of-range", Ty::Bit)
    .rows(rows(100, 17, |_, r| vec![V::F(r.float(-3e9, 3e9))]));
    same_as_linuxcnc(&conv);
}

/// A chain in one thread, as a machine wires it: siggen's sine is the command of a pid whose feedback
/// is streamed in, its output smoothed by lowpass, scaled, limited by limit3 (position, velocity and
/// acceleration: its planner), and differentiated by ddt — each LinuxCNC module hosted, against
/// LinuxCNC running the same modules.
#[test]
fn hosted_servo_chain_is_identical_to_linuxcnc() {
    need_modules();
    same_as_linuxcnc(&servo_chain("host_chain"));
}

/// The servo chain with rtapi's native components, against LinuxCNC: equal within 1e-9 relative.
/// The command is streamed rather than siggen's (LinuxCNC's siggen steps its phase in single
/// precision: ~1e-7, compared on its own in `tests/linuxcnc_diff.rs`), LinuxCNC's pid is set to
/// rtapi's error rule (`error-previous-target` FALSE), and command and feedback rest at 0 for the
/// first periods, where the two pids' derivative histories differ by design (see linuxcnc_diff.rs).
#[test]
fn native_servo_chain_matches_linuxcnc_within_1e_9() {
    need_modules();
    let case = Case::new("native_chain", "pid", "num_chan=1", &DOWNSTREAM_FUNCTIONS)
        .input("pid.0.command", Ty::Float)
        .input("pid.0.feedback", Ty::Float)
        .input("pid.0.enable", Ty::Bit)
        .output("pid.0.error", Ty::Float)
        .setp("pid.0.Dgain", "0.01")
        .linuxcnc_setp("pid.0.error-previous-target", "0");
    let case = downstream_of_pid(case).rows(rows(500, 23, |k, r| {
        let quiet = k < 5;
        let t = k as f64 * 1e-3;
        vec![
            V::F(if quiet { 0.0 } else { 2.0 * (t * 6.0).sin() }),
            V::F(if quiet { 0.0 } else { r.float(-2.0, 2.0) }),
            V::B(true),
        ]
    }));
    within_1e_9_of_linuxcnc(&case);
}

/// The functions of the chain after the command: pid, then lowpass → scale → limit3 → ddt.
const DOWNSTREAM_FUNCTIONS: [&str; 5] = [
    "pid.0.do-pid-calcs",
    "lowpass.0",
    "scale.0",
    "limit3.0",
    "ddt.0",
];

/// The part of both servo chains after pid's command: lowpass → scale → limit3 → ddt loaded and
/// netted after `pid.0.output`, their settings, and their outputs compared.
fn downstream_of_pid(case: Case) -> Case {
    case.line("loadrt lowpass count=1")
        .line("loadrt scale count=1")
        .line("loadrt limit3 count=1")
        .line("loadrt ddt count=1")
        .line("net drive pid.0.output => lowpass.0.in")
        .line("net smooth lowpass.0.out => scale.0.in")
        .line("net scaled scale.0.out => limit3.0.in")
        .line("net limited limit3.0.out => ddt.0.in")
        .output("pid.0.output", Ty::Float)
        .output("lowpass.0.out", Ty::Float)
        .output("scale.0.out", Ty::Float)
        .output("limit3.0.out", Ty::Float)
        .output("ddt.0.out", Ty::Float)
        .setp("pid.0.Pgain", "4")
        .setp("pid.0.Igain", "20")
        .setp("pid.0.FF1", "0.2")
        .setp("pid.0.maxoutput", "10")
        .setp("lowpass.0.gain", "0.1")
        .setp("scale.0.gain", "1.5")
        .setp("scale.0.offset", "-0.25")
        .setp("limit3.0.min", "-6")
        .setp("limit3.0.max", "6")
        .setp("limit3.0.maxv", "200")
        .setp("limit3.0.maxa", "20000")
}

fn servo_chain(name: &str) -> Case {
    let functions: Vec<&str> = std::iter::once("siggen.0.update")
        .chain(DOWNSTREAM_FUNCTIONS)
        .collect();
    let case = Case::new(name, "siggen", "", &functions)
        .line("loadrt pid num_chan=1")
        .line("net cmd siggen.0.sine => pid.0.command")
        .input("pid.0.feedback", Ty::Float)
        .input("pid.0.enable", Ty::Bit)
        .input("siggen.0.frequency", Ty::Float)
        .output("siggen.0.sine", Ty::Float)
        .setp("siggen.0.amplitude", "2");
    downstream_of_pid(case).rows(rows(500, 21, |k, r| {
        vec![
            V::F(r.float(-2.0, 2.0)),
            V::B(k % 150 > 3),
            V::F(if k < 250 { 5.0 } else { 12.5 }),
        ]
    }))
}

/// Logic, edges, timing and conversions in one thread: two streamed bits through and2 → not → edge,
/// timedelay and debounce (its `delay` a param: the module's own variable), and a streamed float
/// through conv_float_s32 → conv_s32_float → abs.
#[test]
fn hosted_logic_chain_is_identical_to_linuxcnc() {
    need_modules();
    same_as_linuxcnc(&logic_chain("host_logic_chain"));
}

/// The same logic chain with rtapi's native components, against LinuxCNC.
#[test]
fn native_logic_chain_matches_linuxcnc_within_1e_9() {
    need_modules();
    within_1e_9_of_linuxcnc(&logic_chain("native_logic_chain"));
}

fn logic_chain(name: &str) -> Case {
    let functions = [
        "and2.0",
        "not.0",
        "edge.0",
        "timedelay.0",
        "debounce.0",
        "conv-float-s32.0",
        "conv-s32-float.0",
        "abs.0",
    ];
    Case::new(name, "and2", "count=1", &functions)
        .line("loadrt not count=1")
        .line("loadrt debounce cfg=1")
        .line("loadrt edge count=1")
        .line("loadrt timedelay count=1")
        .line("loadrt conv_float_s32 count=1")
        .line("loadrt conv_s32_float count=1")
        .line("loadrt abs count=1")
        .line("net a and2.0.out => not.0.in")
        .line("net b not.0.out => edge.0.in timedelay.0.in debounce.0.0.in")
        .line("net c conv-float-s32.0.out => conv-s32-float.0.in")
        .line("net d conv-s32-float.0.out => abs.0.in")
        .input("and2.0.in0", Ty::Bit)
        .input("and2.0.in1", Ty::Bit)
        .input("conv-float-s32.0.in", Ty::Float)
        .output("not.0.out", Ty::Bit)
        .output("edge.0.out", Ty::Bit)
        .output("edge.0.out-invert", Ty::Bit)
        .output("timedelay.0.out", Ty::Bit)
        .output("timedelay.0.elapsed", Ty::Float)
        .output("debounce.0.0.out", Ty::Bit)
        .output("abs.0.out", Ty::Float)
        .output("abs.0.sign", Ty::Bit)
        .setp("edge.0.both", "1")
        .setp("edge.0.out-width-ns", "2500000")
        .setp("timedelay.0.on-delay", "0.004")
        .setp("timedelay.0.off-delay", "0.002")
        .setp("debounce.0.delay", "3")
        .rows(rows(400, 22, |k, r| {
            vec![
                V::B(k % 23 < 15 || r.chance(0.1)),
                V::B(k % 7 < 5),
                V::F(r.float(-1e4, 1e4)),
            ]
        }))
}

/// rtapi's native components (the catalogue) against LinuxCNC's halrun, period by period: bits and
/// integers equal, floats within 1e-9 relative (or 1e-12 absolute near 0).
fn within_1e_9_of_linuxcnc(case: &Case) {
    let (ours, _) = linuxcnc::run_ours(case);
    let theirs = linuxcnc::run_linuxcnc(case, &case.functions);
    assert_eq!(ours.len(), theirs.len());
    let mut worst = 0.0f64;
    for (k, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                x.matches_within(y, 1e-9, 1e-12),
                "case {}: period {k}, {}: native {x}, linuxcnc {y}",
                case.name,
                case.outputs[i].0
            );
            if let (V::F(p), V::F(q)) = (x, y) {
                if p.is_finite() && q.is_finite() && p != q {
                    worst = worst.max((p - q).abs() / p.abs().max(q.abs()));
                }
            }
        }
    }
    eprintln!(
        "case {}: {} periods, {} outputs: native components within 1e-9 of LinuxCNC (largest relative difference {worst:e})",
        case.name,
        case.rows.len(),
        case.outputs.len()
    );
}

// ---- a .comp compiled with halcompile -------------------------------------------------------------

#[test]
fn a_comp_compiled_with_halcompile_loads_by_path_and_runs() {
    need_modules();
    let halcompile = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("halcompile").is_file()))
        .unwrap_or(false);
    assert!(
        halcompile,
        "halcompile is missing: install linuxcnc-uspace-dev (.ci/run does)"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("triple.comp"),
        "component triple \"out = 3 * in + k\";\n\
         pin in float in;\n\
         pin out float out;\n\
         pin in s32 steps;\n\
         pin out s32 count;\n\
         param rw float k = 0.5;\n\
         function _;\n\
         license \"GPL\";\n\
         ;;\n\
         out = 3 * in + k;\n\
         count += steps;\n",
    )
    .unwrap();
    let o = Command::new("halcompile")
        .args(["--compile", "triple.comp"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let so = dir.path().join("triple.so");
    assert!(
        so.is_file(),
        "halcompile failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let mut h = Halrun::start(
        "lcm-comp",
        &format!(
            "loadrt threads name1=servo period1=1000000\n\
             loadrt {} count=2\n\
             addf triple.0 servo\n\
             addf triple.1 servo\n\
             setp triple.0.in 2\n\
             setp triple.1.k -1\n\
             setp triple.1.in 1\n\
             setp triple.1.steps 1\n\
             start\n",
            so.display()
        ),
    );
    let n = h.name.clone();
    wait_for(&n, "triple.0.out", |v| v == "6.5");
    wait_for(&n, "triple.1.out", |v| v == "2");
    wait_for(&n, "triple.1.count", |v| {
        v.parse::<i32>().is_ok_and(|c| c > 10)
    });
    h.stop();
}

/// `rtapi_task_self` in a hosted function: the RT thread's task id (> 0); the unit tests check
/// `-EINVAL` off the RT threads.
#[test]
fn a_hosted_function_sees_its_task_id() {
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("taskid.comp"),
        "component taskid \"its task's id\";\n\
         pin out s32 task;\n\
         function _;\n\
         license \"GPL\";\n\
         ;;\n\
         task = rtapi_task_self();\n",
    )
    .unwrap();
    let o = Command::new("halcompile")
        .args(["--compile", "taskid.comp"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let so = dir.path().join("taskid.so");
    assert!(so.is_file(), "halcompile failed: {o:?}");
    let mut h = Halrun::start(
        "lcm-task",
        &format!(
            "loadrt threads name1=servo period1=1000000\nloadrt {}\naddf taskid.0 servo\nstart\n",
            so.display()
        ),
    );
    let n = h.name.clone();
    wait_for(&n, "taskid.0.task", |v| {
        v.parse::<i32>().is_ok_and(|t| t > 0)
    });
    h.stop();
}

// ---- every module, classified ----------------------------------------------------------------------

/// What `loadrt linuxcnc:NAME` (and running its functions) does with one of LinuxCNC's modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// Loads, and its functions run in a started instance (every one `addf`ed) without a fault.
    Runs,
    /// Loads, but has no function to run (a library of symbols, or user-space plumbing).
    LoadsNoFunction,
    /// `rtapi_app_main` fails without the hardware or the arguments it needs (its message is shown).
    NeedsHardwareOrArgs,
    /// Needs a symbol of rtapi's C interface that rtapi does not provide yet (named).
    MissingSymbol,
    /// Needs another LinuxCNC module loaded first (hostmot2's `hm2_*`, the motion controller's).
    NeedsOtherModule,
    /// The process died (a signal): the module crashed.
    Crash,
}

/// Modules that crash, with the reason: each was checked to crash LinuxCNC 2.9's own `rtapi_app` the
/// same way, or is explained.
const KNOWN_CRASHES: &[(&str, &str)] = &[(
    "boss_plc",
    "its rtapi_app_main writes its defaults through pin pointers before it makes the pins (null); \
     LinuxCNC 2.9's rtapi_app dies the same way (\"exited without becoming ready\")",
)];

/// Arguments the classification loads a module with: the ones it cannot do without (its
/// `rtapi_app_main` refuses to make nothing), and `gantry`'s personality (with the default 0 its
/// functions crash rtapi — they read joint pins it never made; LinuxCNC's larger HAL memory hides
/// that: an open question of issue 16).
const MODULE_ARGS: &[(&str, &str)] = &[
    ("debounce", "cfg=2"),
    ("gantry", "personality=2"),
    ("pwmgen", "output_type=0"),
    ("stepgen", "step_type=0"),
    ("watchdog", "num_inputs=1"),
    ("weighted_sum", "wsum_sizes=2"),
];

/// Modules that use hostmot2's symbols (`hm2_register`, …): the classification loads hostmot2 first,
/// as a LinuxCNC configuration does. Read from the installed modules (whichever LinuxCNC release is
/// installed): those whose undefined dynamic symbols include one that `hostmot2.so` defines.
fn needing_hostmot2(names: &[String]) -> Vec<String> {
    use object::{Object, ObjectSymbol};
    let symbols = |name: &str, undefined: bool| -> std::collections::BTreeSet<String> {
        let path = Path::new(MODULES).join(format!("{name}.so"));
        let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = object::File::parse(&*data)
            .unwrap_or_else(|e| panic!("{}: not an object file: {e}", path.display()));
        file.dynamic_symbols()
            .filter(|s| s.is_undefined() == undefined)
            .filter_map(|s| s.name().ok().map(String::from))
            .filter(|n| !n.is_empty())
            .collect()
    };
    let hostmot2 = symbols("hostmot2", false);
    names
        .iter()
        .filter(|n| *n != "hostmot2")
        .filter(|n| !symbols(n, true).is_disjoint(&hostmot2))
        .cloned()
        .collect()
}

/// Starts `c` in a network namespace of its own (only a down `lo`): nothing a module sends can leave
/// the machine (hm2_eth talks to its board, 10.10.10.10 or 192.168.1.121 by default) and what it
/// changes (hm2_eth's iptables rules) stays in that namespace. Root unshares a network namespace;
/// other users a user namespace with it. If neither works the child does not start (the spawn fails).
fn own_network(c: &mut Command) -> &mut Command {
    // SAFETY: between fork and exec the closure only calls unshare (a system call, async-signal-safe)
    // and reads errno; it allocates nothing and touches no lock.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(c, || {
            if libc::unshare(libc::CLONE_NEWNET) == 0
                || libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) == 0
            {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    }
}

/// `rtapi ARGS` for a module's child process, in a network namespace of its own ([`own_network`]). As
/// root, without CAP_SYS_RAWIO: hardware drivers then fail their `ioperm`/`iopl`/`/dev/mem` instead
/// of poking at I/O ports of the machine running the tests (LinuxCNC's `rtapi_app` would give them
/// the ports).
fn module_child(args: &[&str]) -> std::process::Output {
    let setpriv = Path::new("/usr/bin/setpriv");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        !root || setpriv.is_file(),
        "as root, module children need setpriv (util-linux) to drop CAP_SYS_RAWIO"
    );
    let mut c = if root {
        let mut c = Command::new(setpriv);
        c.args(["--bounding-set", "-sys_rawio", "--"])
            .arg(env!("CARGO_BIN_EXE_rtapi"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_rtapi"))
    };
    own_network(&mut c)
        .args(args)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

/// The classification's children (and the hardware tests') cannot reach the network: their network
/// namespace is not the test's, and has no interface but `lo`.
#[test]
fn module_children_have_a_network_namespace_of_their_own() {
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let o = own_network(&mut Command::new("readlink"))
        .arg("/proc/self/ns/net")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let theirs = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(theirs.starts_with("net:["), "{theirs}");
    assert_ne!(Path::new(&theirs), ours);
    // Its interfaces, as the kernel lists them: only the loopback one.
    let o = own_network(&mut Command::new("cat"))
        .arg("/proc/self/net/dev")
        .output()
        .unwrap();
    let (out, _) = text(&o);
    let ifaces: Vec<&str> = out
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"], "{out}");
}

/// Mesa's Ethernet driver and the parallel port, without their hardware: `loadrt` fails with the
/// module's own message, the exit code of a configuration error, no crash and no segment left. In a
/// network namespace of their own (hm2_eth sends to its board and runs iptables) and without
/// CAP_SYS_RAWIO (hal_parport's `ioperm`).
#[test]
fn mesa_ethernet_and_parport_fail_cleanly_without_their_hardware() {
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    let fails = |name: &str, body: &str, want: &[&str]| {
        let f = dir.path().join(format!("{name}.hal"));
        std::fs::write(&f, body).unwrap();
        let instance = format!("lcm-{name}-{}", std::process::id());
        let o = module_child(&["halrun", "--instance", &instance, "-f", f.to_str().unwrap()]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{body}: {:?}: {err}", o.status);
        for w in want {
            match w.strip_prefix('!') {
                Some(not) => assert!(!err.contains(not), "'{not}' in: {err}"),
                None => assert!(err.contains(w), "'{w}' not in: {err}"),
            }
        }
        let shm = format!("/dev/shm/rtapi-{instance}");
        assert!(!Path::new(&shm).exists(), "{shm} left behind");
        eprintln!("{body}=> {}", err.lines().next().unwrap_or(""));
    };
    fails(
        "eth",
        "loadrt linuxcnc:hostmot2\nloadrt linuxcnc:hm2_eth board_ip=127.0.0.1\n",
        &[
            "eth.hal:2: loadrt linuxcnc:hm2_eth",
            "rtapi_app_main failed",
            "hm2_eth: loading Mesa AnyIO HostMot2 ethernet driver",
            "hm2_eth: ERROR:",
        ],
    );
    fails(
        "parport",
        "loadrt linuxcnc:hal_parport cfg=0x378\n",
        &[
            "rtapi_app_main failed",
            "PARPORT: ERROR: hal_parport: no access to I/O ports 0x378-0x37f",
            // What to do, by why the kernel refused: no ioperm in it, or no privilege.
            match rtapi::rt::portio::probe().map_err(|e| e.raw_os_error()) {
                Err(Some(libc::ENOSYS)) => "CONFIG_X86_IOPL_IOPERM",
                _ => "CAP_SYS_RAWIO",
            },
        ],
    );
    // Found by fallback (no `linuxcnc:`): the module ran, so its own words come first, not
    // "not available in rtapi" and rtapi's list of components.
    fails(
        "parport-fallback",
        "loadrt hal_parport cfg=0x378\n",
        &[
            "parport-fallback.hal:1: loadrt hal_parport: LinuxCNC module hal_parport: rtapi_app_main failed",
            "PARPORT: ERROR: hal_parport: no access to I/O ports 0x378-0x37f",
            "!not available in rtapi",
            "!rtapi has:",
        ],
    );
}

fn classify_module(dir: &Path, name: &str, needs_hostmot2: &[String]) -> (Class, String) {
    let args = MODULE_ARGS
        .iter()
        .find(|(m, _)| *m == name)
        .map_or("", |(_, a)| a);
    let check = dir.join(format!("{name}-check.hal"));
    let before = if needs_hostmot2.iter().any(|n| n == name) {
        "loadrt linuxcnc:hostmot2\n"
    } else {
        ""
    };
    std::fs::write(
        &check,
        format!("{before}loadrt linuxcnc:{name} {args}\nshow funct\n"),
    )
    .unwrap();
    // Not --check: that never runs module code; this file has no `start`, so nothing runs after it.
    let instance = format!("lcmk{}-{}", std::process::id(), name.replace('_', "-"));
    let o = module_child(&[
        "halrun",
        "--instance",
        &instance,
        "-f",
        check.to_str().unwrap(),
    ]);
    let (out, err) = text(&o);
    let first = err
        .lines()
        .find(|l| l.contains("loadrt"))
        .unwrap_or(err.lines().next().unwrap_or(""))
        .to_string();
    if o.status.code().is_none() {
        return (Class::Crash, format!("loading: {:?}", o.status));
    }
    if !o.status.success() {
        if let Some((_, rest)) = first.split_once("needs symbol '") {
            let sym = rest.split('\'').next().unwrap_or("");
            let class = if sym.starts_with("hal_") || sym.starts_with("rtapi_") {
                Class::MissingSymbol
            } else {
                Class::NeedsOtherModule
            };
            return (class, sym.to_string());
        }
        if first.contains("rtapi_app_main failed") {
            let said = first.split("it said: ").nth(1).unwrap_or(&first);
            return (Class::NeedsHardwareOrArgs, said.to_string());
        }
        panic!("{name}: unexpected failure: {err}");
    }
    // `show funct` of the dry run: the functions it exports.
    let functions: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Exported Functions"))
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    if functions.is_empty() {
        return (Class::LoadsNoFunction, String::new());
    }
    let mut hal =
        format!("loadrt threads name1=t period1=1000000\n{before}loadrt linuxcnc:{name} {args}\n");
    for f in &functions {
        hal.push_str(&format!("addf {f} t\n"));
    }
    hal.push_str("start\n");
    let run = dir.join(format!("{name}-run.hal"));
    std::fs::write(&run, hal).unwrap();
    let instance = format!("lcmc-{}-{name}", std::process::id());
    let mut tries = 0;
    loop {
        let o = module_child(&[
            "halrun",
            "--instance",
            &instance,
            "--duration",
            "200ms",
            "-f",
            run.to_str().unwrap(),
        ]);
        let (_, err) = text(&o);
        tries += 1;
        match o.status.code() {
            None => {
                // The dead instance's segment stays behind: it is this test's own, remove it.
                let _ = std::fs::remove_file(format!("/dev/shm/rtapi-{instance}"));
                return (Class::Crash, format!("running: {:?}", o.status));
            }
            Some(0) => return (Class::Runs, format!("{} function(s)", functions.len())),
            // A machine shared with other work (2 CPUs, tests of other projects) can starve the
            // thread outside the module's code: the watchdog says where it was; try again.
            Some(_) if tries < 4 && err.contains("outside its functions") => {}
            Some(_) => panic!("{name}: its functions did not run: {err}"),
        }
    }
}

/// All of LinuxCNC's modules, each loaded (and run) by rtapi in a child process of its own: every
/// outcome is one of the classes, and a crash only where the module crashes LinuxCNC too.
#[test]
fn every_linuxcnc_module_is_classified() {
    need_modules();
    let mut names: Vec<String> = std::fs::read_dir(MODULES)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.strip_suffix(".so").map(String::from)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 150, "only {} modules", names.len());
    let needs_hostmot2 = needing_hostmot2(&names);
    eprintln!("loaded after hostmot2 (they use its symbols): {needs_hostmot2:?}");
    // Mesa's drivers found by their imports, not by a list of 2.9's module names.
    for m in ["hm2_eth", "hm2_pci", "setsserial"] {
        assert!(
            needs_hostmot2.iter().any(|n| n == m),
            "{m} not found to use hostmot2's symbols: {needs_hostmot2:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let mut by_class: std::collections::BTreeMap<Class, Vec<String>> = Default::default();
    let mut table = String::new();
    for n in &names {
        let (class, detail) = classify_module(dir.path(), n, &needs_hostmot2);
        table.push_str(&format!("{n:<24} {class:?} {detail}\n"));
        by_class.entry(class).or_default().push(n.clone());
    }
    eprintln!("{table}");
    let counts: Vec<String> = by_class
        .iter()
        .map(|(c, v)| format!("{c:?} {}", v.len()))
        .collect();
    eprintln!("{} modules: {}", names.len(), counts.join(", "));
    for crashed in by_class.get(&Class::Crash).into_iter().flatten() {
        assert!(
            KNOWN_CRASHES.iter().any(|(k, _)| k == crashed),
            "{crashed} crashed rtapi, and is not a known crasher:\n{table}"
        );
    }
    assert!(
        by_class.get(&Class::Runs).map_or(0, Vec::len) >= 100,
        "fewer modules run than before:\n{table}"
    );
    // Mesa's and the parallel port's drivers find every symbol they need.
    for m in [
        "hostmot2",
        "hm2_eth",
        "hal_parport",
        "hal_ppmc",
        "setsserial",
    ] {
        assert!(
            !by_class
                .get(&Class::MissingSymbol)
                .is_some_and(|v| v.iter().any(|n| n == m)),
            "{m} misses a symbol again:\n{table}"
        );
    }
    for (k, _) in KNOWN_CRASHES {
        assert!(
            !names.contains(&k.to_string()) || by_class[&Class::Crash].contains(&k.to_string()),
            "{k} no longer crashes: take it off KNOWN_CRASHES"
        );
    }
    assert!(!std::fs::read_dir("/dev/shm").unwrap().flatten().any(|e| e
        .file_name()
        .to_string_lossy()
        .starts_with(&format!("rtapi-lcmc-{}", std::process::id()))));
}

/// The module search path: the INI's `[RTAPI]LINUXCNC_MODULES`, then `$RTAPI_LINUXCNC_MODULES`, then
/// Debian's directory.
#[test]
fn modules_are_found_on_the_config_then_the_environment_path() {
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    let (conf, env) = (dir.path().join("conf"), dir.path().join("env"));
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::create_dir_all(&env).unwrap();
    // Two different modules under one name: which one loads tells which directory won.
    std::fs::copy(Path::new(MODULES).join("not.so"), conf.join("pathtest.so")).unwrap();
    std::fs::copy(Path::new(MODULES).join("and2.so"), env.join("pathtest.so")).unwrap();
    std::fs::write(
        dir.path().join("m.ini"),
        "[RTAPI]\nLINUXCNC_MODULES = conf\n",
    )
    .unwrap();
    let hal = dir.path().join("m.hal");
    std::fs::write(&hal, "loadrt pathtest\nshow pin\n").unwrap();
    let run = |ini: bool| -> String {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
        // Not --check (it never runs modules, so it cannot show their pins).
        c.arg("halrun")
            .arg("--instance")
            .arg(format!("lcmp{}", std::process::id()));
        if ini {
            c.arg("-i").arg(dir.path().join("m.ini"));
        }
        let o = c
            .arg("-f")
            .arg(&hal)
            .env("RTAPI_LINUXCNC_MODULES", &env)
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{err}");
        out
    };
    let with_ini = run(true);
    assert!(with_ini.contains("not.0.in"), "{with_ini}");
    let env_only = run(false);
    assert!(env_only.contains("and2.0.in0"), "{env_only}");
}

/// Two modules of our own, built with `halcompile --compile` from C: `consumer` calls a function that
/// `provider` exports. Loaded in that order they link (`RTLD_GLOBAL`, as LinuxCNC's `hm2_eth` uses
/// `hostmot2`); `consumer` alone is refused at `loadrt`, naming the symbol.
#[test]
fn modules_use_symbols_of_modules_loaded_before_them() {
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    let header = "#include \"rtapi.h\"\n#include \"rtapi_app.h\"\n#include \"hal.h\"\nMODULE_LICENSE(\"GPL\");\nstatic int comp_id;\n";
    let provider = format!(
        "{header}int provider_value(void) {{ return 42; }}\nEXPORT_SYMBOL(provider_value);\n\
         int rtapi_app_main(void) {{ comp_id = hal_init(\"provider\"); if (comp_id < 0) return comp_id; \
         hal_ready(comp_id); return 0; }}\nvoid rtapi_app_exit(void) {{ hal_exit(comp_id); }}\n"
    );
    let consumer = format!(
        "{header}extern int provider_value(void);\nstruct state {{ hal_s32_t *out; }};\n\
         static void update(void *arg, long period) {{ struct state *s = arg; (void)period; \
         *(s->out) = provider_value() + 1; }}\n\
         int rtapi_app_main(void) {{ struct state *s; int r; comp_id = hal_init(\"consumer\"); \
         if (comp_id < 0) return comp_id; s = hal_malloc(sizeof *s); if (!s) return -1; \
         r = hal_pin_s32_new(\"consumer.out\", HAL_OUT, &s->out, comp_id); if (r) return r; \
         *(s->out) = provider_value(); \
         r = hal_export_funct(\"consumer.update\", update, s, 0, 0, comp_id); if (r) return r; \
         hal_ready(comp_id); return 0; }}\nvoid rtapi_app_exit(void) {{ \
         rtapi_print_msg(RTAPI_MSG_ERR, \"consumer exits\\n\"); hal_exit(comp_id); }}\n"
    );
    for (name, src) in [("provider", &provider), ("consumer", &consumer)] {
        std::fs::write(dir.path().join(format!("{name}.c")), src).unwrap();
        let o = Command::new("halcompile")
            .args(["--compile", &format!("{name}.c")])
            .current_dir(dir.path())
            .output()
            .expect("halcompile (linuxcnc-uspace-dev)");
        assert!(
            dir.path().join(format!("{name}.so")).is_file(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let so = |n: &str| dir.path().join(format!("{n}.so")).display().to_string();
    // Alone: refused, naming what it needs.
    let f = dir.path().join("alone.hal");
    std::fs::write(&f, format!("loadrt {}\n", so("consumer"))).unwrap();
    let o = rtapi(&["halrun", "--check", "-f", f.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("needs symbol 'provider_value'") && err.contains("another module's"),
        "{err}"
    );
    // After its provider: it runs, calling into it every period.
    let mut h = Halrun::start(
        "lcm-dep",
        &format!(
            "loadrt threads name1=servo period1=1000000\nloadrt {}\nloadrt {}\n\
             addf consumer.update servo\nstart\n",
            so("provider"),
            so("consumer")
        ),
    );
    let n = h.name.clone();
    wait_for(&n, "consumer.out", |v| v == "43");
    let out = h.stop();
    let (_, err) = text(&out);
    assert!(out.status.success(), "{err}");
    // rtapi_app_exit, with the module's name: after each of the two dry runs (the `loadrt` line's,
    // the check before `start`), and once at the stop, after the threads ended.
    assert_eq!(err.matches("consumer: consumer exits").count(), 3, "{err}");
}

/// A hosted module's function is watched like a native one: one that never returns is reported as
/// stalled, by name, and `.time`/`.tmax` measure its calls.
#[test]
fn a_hosted_function_that_never_returns_is_reported_by_the_watchdog() {
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("spinner.c"),
        "#include \"rtapi.h\"\n#include \"rtapi_app.h\"\n#include \"hal.h\"\n\
         MODULE_LICENSE(\"GPL\");\nstatic int comp_id;\n\
         struct state { hal_bit_t *spin; hal_u32_t *calls; };\n\
         static void update(void *arg, long period) { struct state *s = arg; (void)period; \
         *(s->calls) += 1; while (*(s->spin)) { } }\n\
         int rtapi_app_main(void) { struct state *s; int r; comp_id = hal_init(\"spinner\"); \
         if (comp_id < 0) return comp_id; s = hal_malloc(sizeof *s); if (!s) return -1; \
         r = hal_pin_bit_new(\"spinner.spin\", HAL_IN, &s->spin, comp_id); if (r) return r; \
         r = hal_pin_u32_new(\"spinner.calls\", HAL_OUT, &s->calls, comp_id); if (r) return r; \
         r = hal_export_funct(\"spinner.update\", update, s, 0, 0, comp_id); if (r) return r; \
         hal_ready(comp_id); return 0; }\n\
         void rtapi_app_exit(void) { hal_exit(comp_id); }\n",
    )
    .unwrap();
    let o = Command::new("halcompile")
        .args(["--compile", "spinner.c"])
        .current_dir(dir.path())
        .output()
        .expect("halcompile (linuxcnc-uspace-dev)");
    let so = dir.path().join("spinner.so");
    assert!(so.is_file(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut h = Halrun::start(
        "lcm-stall",
        &format!(
            "loadrt threads name1=servo period1=1000000\nloadrt {}\naddf spinner.update servo\nstart\n",
            so.display()
        ),
    );
    let n = h.name.clone();
    wait_for(&n, "spinner.calls", |v| {
        v.parse::<u32>().is_ok_and(|c| c > 20)
    });
    wait_for(&n, "spinner.update.time", |v| {
        v.parse::<i64>().is_ok_and(|t| t > 0)
    });
    run(&n, &["setp", "spinner.spin", "1"]);
    wait_for(&n, "servo.stalled", |v| v == "TRUE");
    let out = h.stop();
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("STALLED") && err.contains("spinner.update"),
        "{err}"
    );
    // The stuck thread stays inside the module: it is not unloaded under it, and the segment goes.
    assert!(!common::segment_exists(&n));
}

/// A module's bad pointer kills the process (it is C in rtapi's address space), but not silently:
/// the crash report names the signal, the RT thread, the function and the module, and the segment
/// file is gone with the process.
#[test]
fn a_module_that_segfaults_is_named_and_its_segment_removed() {
    use std::os::unix::process::ExitStatusExt;
    need_modules();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("crashy.comp"),
        "component crashy \"writes through a null pointer when fire is TRUE\";\n\
         pin in bit fire;\n\
         pin out u32 calls;\n\
         function _;\n\
         license \"GPL\";\n\
         ;;\n\
         if (fire) { *(volatile int *)0 = 1; }\n\
         calls++;\n",
    )
    .unwrap();
    let o = Command::new("halcompile")
        .args(["--compile", "crashy.comp"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let so = dir.path().join("crashy.so");
    assert!(so.is_file(), "halcompile failed: {o:?}");
    let hal = dir.path().join("crash.hal");
    std::fs::write(
        &hal,
        format!(
            "loadrt threads name1=servo period1=1000000\nloadrt {}\nnet fire crashy.0.fire\n\
             addf crashy.0 servo\nstart\n",
            so.display()
        ),
    )
    .unwrap();
    let instance = format!("lcm-crash-{}", std::process::id());
    let shm = format!("/dev/shm/rtapi-{instance}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    cmd.args(halrun::kept_running(&instance, hal.to_str().unwrap()))
        .env("RUST_LOG", "warn")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // No core file from the crash this test makes.
    // SAFETY: between fork and exec the closure only calls setrlimit, which is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    wait_for(&instance, "crashy.0.calls", |v| {
        v.parse::<u32>().is_ok_and(|c| c > 10)
    });
    assert!(Path::new(&shm).exists());
    // The servo thread (on the other CPU) may crash the process before the reply is sent: then
    // the connection is lost, which is what this `sets` is for (seen in a stressed run).
    let (ok, out, err) = halcmd(&instance, &["sets", "fire", "1"]);
    assert!(
        ok || err.contains("lost the connection to the instance"),
        "sets fire 1: {out}{err}"
    );
    let t0 = Instant::now();
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "the crash ended the process {:?} after the sets",
        t0.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "{:?}: {err}",
        out.status
    );
    for want in [
        "SIGSEGV",
        "at address 0x0",
        "on RT thread servo",
        "in function crashy.0",
        "of LinuxCNC module crashy",
        &format!("Removed {shm}."),
    ] {
        assert!(err.contains(want), "'{want}' not in: {err}");
    }
    assert!(!Path::new(&shm).exists(), "{shm} left behind");
    eprintln!(
        "the crash report: {}",
        err.lines().find(|l| l.contains("SIGSEGV")).unwrap_or("")
    );
}
