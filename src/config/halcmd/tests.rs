//! The interpreter's commands, each by its effect: on the model (getp, show, save) and, emitted, on a
//! real HAL segment (the [`Harness`]).

use super::*;
use crate::components::{Harness, Validation};
use rtapi_hal::Value;

fn session() -> Session {
    Session::new(Registry::builtin(), "halcmd-test").unwrap()
}

/// Runs `text` as file `t.hal`; returns what it printed.
fn run(s: &mut Session, text: &str) -> Result<String, ConfigError> {
    let mut out = Vec::new();
    let commands = s.parse("t.hal", text).map_err(|mut e| e.remove(0))?;
    s.run_commands("t.hal", None, &commands, &mut out)?;
    Ok(String::from_utf8(out).unwrap())
}

fn ok(s: &mut Session, text: &str) -> String {
    run(s, text).unwrap_or_else(|e| panic!("{e}"))
}

fn err(s: &mut Session, text: &str) -> String {
    run(s, text).unwrap_err().to_string()
}

/// The session emitted into a real segment.
fn built(s: &Session, instance: &str) -> Harness {
    let mut h = Harness::new(instance).unwrap();
    s.apply_to(&mut h).unwrap_or_else(|e| panic!("{e}"));
    h.start().unwrap();
    h
}

const THREADS: &str = "loadrt threads name1=servo period1=1000000\n";

#[test]
fn unlinkp_really_unlinks_and_the_pin_keeps_the_last_value() {
    let mut s = session();
    ok(
        &mut s,
        "loadrt pid\nnewsig cmd float\nnet cmd pid.0.command\nsets cmd 2.5\n",
    );
    assert_eq!(ok(&mut s, "getp pid.0.command\n"), "2.5\n");
    assert!(err(&mut s, "setp pid.0.command 1\n").contains("connected to signal 'cmd'"));
    ok(&mut s, "unlinkp pid.0.command\n");
    // LinuxCNC: an unlinked pin keeps the signal's last value, and is the pin's own again.
    assert_eq!(ok(&mut s, "getp pid.0.command\n"), "2.5\n");
    ok(&mut s, "setp pid.0.command 7\nsets cmd 1\n");
    assert_eq!(ok(&mut s, "getp pid.0.command\ngets cmd\n"), "7\n1\n");
    // Emitted: the pin is on no signal; writing the signal does not reach it.
    let h = built(&s, "halcmd-test-unlinkp");
    assert_eq!(h.get("pid.0.command").unwrap(), Value::Float(7.0));
    assert_eq!(h.get("cmd").unwrap(), Value::Float(1.0));
    h.set("pid.0.command", "4").unwrap();
    assert_eq!(h.get("pid.0.command").unwrap(), Value::Float(4.0));
}

#[test]
fn delsig_unlinks_its_pins_and_is_gone() {
    let mut s = session();
    ok(
        &mut s,
        "loadrt pid count=2\nnet fb pid.0.output => pid.1.feedback\nnet en pid.0.enable pid.1.enable\nsets en 1\n",
    );
    ok(&mut s, "delsig en\n");
    assert!(err(&mut s, "gets en\n").starts_with("t.hal:1: gets: no signal named 'en'"));
    // The pins kept the value and are free again.
    assert_eq!(ok(&mut s, "getp pid.1.enable\n"), "TRUE\n");
    ok(&mut s, "net again pid.0.enable pid.1.enable\n");
    ok(&mut s, "delsig all\n");
    assert!(s.names(NameKind::Signal).is_empty());
    let h = built(&s, "halcmd-test-delsig");
    assert!(h.get("fb").is_err() && h.get("en").is_err());
    assert_eq!(h.get("pid.1.enable").unwrap(), Value::Bit(true));
    h.set("pid.1.feedback", "2").unwrap();
}

#[test]
fn addf_and_delf_positions() {
    let mut s = session();
    ok(&mut s, THREADS);
    ok(
        &mut s,
        "loadrt siggen count=4\naddf siggen.0.update servo\naddf siggen.1.update servo 1\n\
         addf siggen.2.update servo -1\naddf siggen.3.update servo -2\n",
    );
    assert_eq!(
        ok(&mut s, "save thread\n"),
        "# realtime thread/function links\naddf siggen.1.update servo\naddf siggen.0.update servo\naddf siggen.3.update servo\naddf siggen.2.update servo\n"
    );
    ok(&mut s, "delf siggen.0.update servo\n");
    s.script_friendly = true;
    assert_eq!(
        ok(&mut s, "show thread\n"),
        "1000000 servo siggen.1.update siggen.3.update siggen.2.update\n"
    );
    ok(&mut s, "addf siggen.0.update servo 2\n");
    assert_eq!(
        ok(&mut s, "show thread\n"),
        "1000000 servo siggen.1.update siggen.0.update siggen.3.update siggen.2.update\n"
    );
    assert!(err(&mut s, "addf siggen.0.update servo\n").contains("already added to thread 'servo'"));
    assert!(
        err(&mut s, "delf siggen.0.update other\n").contains("is in thread 'servo', not 'other'")
    );
    ok(&mut s, "delf siggen.0.update\n");
    assert!(err(&mut s, "delf siggen.0.update\n").contains("not in any thread"));
    assert!(err(&mut s, "addf siggen.0.update servo 9\n").contains("position 9 is outside"));
}

#[test]
fn one_function_for_all_channels_means_every_instance() {
    let mut s = session();
    ok(
        &mut s,
        "loadrt threads name1=base period1=50000 name2=servo period2=1000000\n\
         loadrt stepgen step_type=0,0,0\nloadrt pid num_chan=2\n\
         addf stepgen.make-pulses base\naddf stepgen.update-freq servo\n",
    );
    assert_eq!(
        s.names(NameKind::Comp),
        ["pid.0", "pid.1", "stepgen.0", "stepgen.1", "stepgen.2"]
    );
    let saved = ok(&mut s, "save thread\n");
    assert!(
        saved.starts_with("# realtime thread/function links\naddf stepgen.0.make-pulses base\naddf stepgen.1.make-pulses base\naddf stepgen.2.make-pulses base\n"),
        "{saved}"
    );
    assert!(err(&mut s, "loadrt stepgen names=q step_type=2\n")
        .contains("step/dir pulses in position mode only"));
}

#[test]
fn aliases_are_second_names() {
    let mut s = session();
    ok(&mut s, "loadrt pid\nalias pin pid.0.command cmd-in\nalias pin pid.0.Pgain kp\nalias param pid.0.do-pid-calcs.tmax tm\n");
    ok(&mut s, "setp kp 12\nsetp cmd-in 3\nsetp tm 5\n");
    assert_eq!(ok(&mut s, "getp pid.0.do-pid-calcs.tmax\n"), "5\n");
    assert_eq!(
        ok(&mut s, "getp pid.0.Pgain\ngetp pid.0.command\n"),
        "12\n3\n"
    );
    // show names the alias; list pin has both names.
    assert!(ok(&mut s, "show pin pid.0.command\n").contains(" cmd-in\n"));
    assert!(s.names(NameKind::Pin).contains(&"cmd-in".to_string()));
    ok(&mut s, "net x cmd-in\n");
    ok(&mut s, "unalias pin cmd-in\n");
    assert!(err(&mut s, "getp cmd-in\n").contains("no pin or param named 'cmd-in'"));
    assert!(err(&mut s, "alias pin pid.0.nope a\n").contains("no pin named 'pid.0.nope'"));
    assert!(err(&mut s, "alias pin pid.0.Igain pid.0.Pgain\n").contains("already taken"));
    assert!(err(&mut s, "alias param pid.0.Igain x\n").contains("no param named 'pid.0.Igain'"));
}

#[test]
fn save_output_loaded_again_gives_the_same_show_all() {
    let mut s = session();
    ok(
        &mut s,
        "loadrt threads name1=base period1=50000 name2=servo period2=1000000\n\
         loadrt siggen\nloadrt pid names=x,y\nloadrt and2 count=2\n\
         net cmd siggen.0.sine => x.command y.command\nnet en x.enable y.enable\nsets en TRUE\n\
         newsig spare s32\nsets spare -4\nsetp x.Pgain 0.1\nsetp y.Dgain 1e-7\nsetp and2.1.in0 1\n\
         setp x.maxoutput 25.5\nalias pin y.feedback yfb\n\
         addf siggen.0.update servo\naddf x.do-pid-calcs servo\naddf y.do-pid-calcs servo 1\naddf and2.0 base\n",
    );
    let saved = ok(&mut s, "save\n");
    let shown = ok(&mut s, "show all\n");
    let mut again = session();
    ok(&mut again, &saved);
    assert_eq!(ok(&mut again, "show all\n"), shown, "saved:\n{saved}");
    assert_eq!(ok(&mut again, "save\n"), saved);
    // And what it builds reads the same.
    let h = built(&again, "halcmd-test-save");
    assert_eq!(h.get("x.Pgain").unwrap(), Value::Float(0.1));
    assert_eq!(h.get("spare").unwrap(), Value::S32(-4));
    assert_eq!(h.get("and2.1.in0").unwrap(), Value::Bit(true));
}

#[test]
fn setp_shorthand_ptype_stype_list_and_echo() {
    let mut s = session();
    ok(&mut s, "loadrt pid\npid.0.Igain = 0.5\nnet e pid.0.error\n");
    assert_eq!(
        ok(&mut s, "getp pid.0.Igain\nptype pid.0.Igain\nstype e\n"),
        "0.5\nfloat\nfloat\n"
    );
    assert_eq!(ok(&mut s, "list pin -tbit pid.0.en\n"), "pid.0.enable \n");
    assert_eq!(
        ok(
            &mut s,
            "echo\nsetp pid.0.Pgain 1\nunecho\nsetp pid.0.Pgain 2\n"
        ),
        "setp pid.0.Pgain 1\nunecho\n"
    );
    assert_eq!(ok(&mut s, "print hi there\n"), "t.hal:1: hi there\n");
    assert!(ok(&mut s, "help net\n").starts_with("net SIGNAL"));
    assert!(!s.started());
    ok(&mut s, "start\n");
    assert!(s.started());
    let mut out = Vec::new();
    assert_eq!(s.execute("quit", &mut out).unwrap(), Flow::Quit);
    assert_eq!(s.execute("lock tune", &mut out).unwrap(), Flow::Continue);
}

#[test]
fn loadrt_threads_makes_threads_with_their_periods() {
    let mut s = session();
    ok(
        &mut s,
        "loadrt threads name1=fast period1=25000 fp1=0 name2=slow period2=10000000\n",
    );
    assert_eq!(s.names(NameKind::Thread), ["fast", "slow"]);
    s.script_friendly = true;
    assert_eq!(ok(&mut s, "show thread\n"), "25000 fast \n10000000 slow \n");
    assert!(ok(&mut s, "getp fast.tmax\n").starts_with('0'));
    assert!(err(&mut s, "loadrt threads name1=x period1=10\n").contains("shorter than 1us"));
    assert!(err(&mut s, "loadrt threads name1=x\n").contains("give both name1= and period1="));
    assert!(err(&mut s, "loadrt threads name1=fast period1=1000000\n")
        .contains("duplicate thread name 'fast'"));
    ok(&mut s, "unloadrt threads\n");
    assert!(s.names(NameKind::Thread).is_empty());
    let mut v = Validation::new("halcmd-threads").unwrap();
    let mut s = session();
    ok(
        &mut s,
        "loadrt threads name1=servo period1=1000000\nloadrt siggen\naddf siggen.0.update servo\n",
    );
    s.apply_to(&mut v).unwrap();
}

#[test]
fn what_rtapi_lacks_is_named_at_its_line() {
    let mut s = session();
    let e = err(&mut s, "\nloadrt motmod base_period_nsec=50000\n");
    assert!(
        e.starts_with(
            "t.hal:2: component 'motmod' (LinuxCNC's motion controller) is not available in rtapi"
        ),
        "{e}"
    );
    let e = err(&mut s, "loadrt pdi\n");
    assert!(
        e.ends_with("is not available in rtapi; did you mean 'pid'?"),
        "{e}"
    );
    // Nothing within the rule's edits: no suggestion ("comp" was one, for containing "comp").
    let e = err(&mut s, "loadrt nosuchcomp\n");
    assert!(
        !e.contains("did you mean") && e.contains("rtapi has: ") && e.contains("NAME.so from "),
        "{e}"
    );
    let mut t = session();
    ok(&mut t, "loadrt pid\n");
    let e = err(&mut t, "setp pid.0.Pgian 3\n");
    assert!(
        e.ends_with("no pin or param named 'pid.0.Pgian'; did you mean 'pid.0.Pgain'?"),
        "{e}"
    );
    let e = err(&mut t, "setp pid.0.zzzzzzzz 3\n");
    assert!(
        e.ends_with("`show pin pid.0` and `show param pid.0` list what pid.0 has"),
        "no name listing: {e}"
    );
    let e = err(&mut s, "lodart pid\n");
    assert!(
        e.ends_with("unknown command 'lodart'; did you mean 'loadrt'?"),
        "{e}"
    );
    let e = err(&mut s, "loadusr -W hal_manualtoolchange\n");
    assert!(
        e.contains("loadusr: user-space component 'hal_manualtoolchange'"),
        "{e}"
    );
    let e = err(&mut s, "loadusr -Wn ui pyvcp x.xml\n");
    assert!(e.contains("component 'ui' (program 'pyvcp')"), "{e}");
    let e = err(
        &mut s,
        "loadrt pid\nnet x-vel joint.0.vel-cmd => pid.0.command\n",
    );
    assert!(e.starts_with("t.hal:2: net x-vel: no pin named 'joint.0.vel-cmd'; in LinuxCNC it is created by the motion controller (loadrt motmod)"), "{e}");
    let e = err(&mut s, "net y halui.machine.is-on pid.0.enable\n");
    assert!(e.contains("created by halui (loadusr halui)"), "{e}");
    let e = err(&mut s, "setp pumakins.A2 1\n");
    assert!(
        e.contains("created by the kinematics module pumakins (loadrt pumakins)"),
        "{e}"
    );
    let e = err(&mut s, "addf pid.0.do-pid-calcs servo-thread\n");
    assert!(
        e.contains("the motion controller (loadrt motmod) creates servo-thread")
            && e.contains("run the whole machine with `rtapi linuxcnc INI`"),
        "{e}"
    );
    let e = err(&mut s, "unloadrt nothing\n");
    assert!(e.contains("no component 'nothing' is loaded"), "{e}");
    assert!(err(&mut s, "unload nothing\n").contains("no component 'nothing' is loaded"));
    ok(&mut s, "unloadrt pid\n");
    assert!(s
        .names(NameKind::Pin)
        .iter()
        .all(|p| !p.starts_with("pid.")));
    ok(
        &mut s,
        "loadrt pid\nloadrt threads name1=t period1=1000000\nunload all\n",
    );
    assert!(s.names(NameKind::Comp).is_empty() && s.names(NameKind::Thread).is_empty());
}

#[test]
fn ini_substitution_and_its_errors_at_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.ini"),
        "[EMCMOT]\nSERVO_PERIOD = 1000000\n[AXIS_X]\nP = 50\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("main.hal"),
        "loadrt threads name1=servo period1=[EMCMOT]SERVO_PERIOD\nloadrt pid\nsetp pid.0.Pgain [AXIS_X]P\nsource sub/more.hal\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(
        dir.path().join("sub/more.hal"),
        "# sourced\n\nsetp pid.0.Igain [AXIS_X]I\n",
    )
    .unwrap();
    let mut s = session();
    s.set_ini(Some(Ini::load(&dir.path().join("m.ini")).unwrap()));
    let e = s
        .source(&dir.path().join("main.hal"), &mut Vec::new())
        .unwrap_err();
    let shown = format!("{}:3", dir.path().join("sub/more.hal").display());
    assert_eq!(e.to_string().split(": ").next().unwrap(), shown);
    assert!(
        e.message.contains("has no key I in section [AXIS_X]"),
        "{e}"
    );
    assert_eq!(ok(&mut s, "getp pid.0.Pgain\n"), "50\n");
    assert_eq!(s.names(NameKind::Thread), ["servo"]);
    // Without an INI file.
    let mut s = session();
    let e = err(&mut s, "\nsetp a [X]Y\n");
    assert!(e.starts_with("t.hal:2: [X]Y needs an INI file"), "{e}");
}

/// `halrun -k` (and `--check -k`) went no further than the syntax errors: now, as LinuxCNC's
/// `halcmd -k`, the commands that parsed run too, every error at its own line in the file's order
/// (a bad `linkpp` said line 0). Without -k the first syntax error ends the file before anything runs.
#[test]
fn keep_going_runs_past_syntax_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("k.hal");
    std::fs::write(
        &f,
        "loadrt pid\nsetp pid.0.Pgain\nlinkpp\nsetp pid.0.Pgian 3\nsetp pid.0.Igain 4\n",
    )
    .unwrap();
    let mut out = Vec::new();
    let mut s = session();
    s.keep_going = true;
    assert!(s.source(&f, &mut out).is_err());
    let lines: Vec<Option<usize>> = s.errors().iter().map(|e| e.line).collect();
    assert_eq!(lines, [Some(2), Some(3), Some(4)], "{:?}", s.errors());
    assert_eq!(ok(&mut s, "getp pid.0.Igain\n"), "4\n");
    let mut s = session();
    let e = s.source(&f, &mut out).unwrap_err();
    assert_eq!(e.line, Some(2), "{e}");
    let e = err(&mut s, "getp pid.0.Igain\n");
    assert!(
        e.contains("no pin or param named"),
        "pid was not loaded: {e}"
    );
}

/// Refusals of a name that exists, or a param that is not the user's to set, say what to do.
#[test]
fn refusals_say_what_to_do() {
    let mut s = session();
    ok(&mut s, "loadrt stepgen step_type=0\nnewsig x float\n");
    let e = err(&mut s, "loadrt stepgen step_type=0\n");
    assert!(
        e.ends_with("give this one another name (names=…) or unloadrt that one first"),
        "{e}"
    );
    let e = err(&mut s, "newsig x float\n");
    assert!(e.ends_with("pick another name, or delsig it first"), "{e}");
    let e = err(&mut s, "setp stepgen.0.frequency 3\n");
    assert!(
        e.contains("read-only") && e.ends_with("lists the params that are RW"),
        "{e}"
    );
    let e = err(&mut s, "delf nosuch\n");
    assert!(e.ends_with("(`show funct` lists them)"), "{e}");
}

#[test]
fn keep_going_collects_every_error() {
    let mut s = session();
    s.keep_going = true;
    let e = err(
        &mut s,
        "loadrt nope\nloadrt pid\nsetp pid.0.x 1\nsetp pid.0.Pgain 2\n",
    );
    assert!(e.starts_with("t.hal:1:"), "{e}");
    let lines: Vec<Option<usize>> = s.errors().iter().map(|e| e.line).collect();
    assert_eq!(lines, [Some(1), Some(3)]);
    assert_eq!(ok(&mut s, "getp pid.0.Pgain\n"), "2\n");
    // A failed net links nothing: the whole command is checked first.
    let e = err(&mut s, "net n pid.0.enable pid.0.nope\n");
    assert!(e.contains("no pin named 'pid.0.nope'"), "{e}");
    ok(
        &mut s,
        "newsig a float\nnewsig b float\nlinkps pid.0.command a\nlinksp a pid.0.command\n",
    );
    let e = err(&mut s, "linkps pid.0.command b\n");
    assert!(
        e.contains("pin 'pid.0.command' is linked to 'a'; unlinkp it first"),
        "{e}"
    );
    ok(
        &mut s,
        "unlinkp pid.0.command\nlinkps pid.0.command => b\ndelsig all\n",
    );
    assert!(s.names(NameKind::Signal).is_empty());
    assert_eq!(ok(&mut s, "list pin -t bit pid.0.en\n"), "pid.0.enable \n");
    // The same from a prompt, line by line.
    let mut s = session();
    let mut out = Vec::new();
    s.execute("loadrt pid", &mut out).unwrap();
    assert!(s
        .execute("net n pid.0.enable pid.0.nope", &mut out)
        .is_err());
    assert!(s.names(NameKind::Signal).is_empty());
    s.execute("net n pid.0.enable", &mut out).unwrap();
    assert_eq!(s.names(NameKind::Signal), ["n"]);
}

#[test]
fn loadrt_without_a_count_makes_the_components_default_number_of_instances() {
    let mut s = session();
    ok(
        &mut s,
        "loadrt pid\nloadrt encoder\nloadrt and2\nloadrt siggen\n",
    );
    let comps = s.names(NameKind::Comp);
    for c in ["pid.0", "pid.1", "pid.2", "encoder.2", "and2.0", "siggen.0"] {
        assert!(comps.contains(&c.to_string()), "{c} in {comps:?}");
    }
    assert!(!comps.contains(&"pid.3".to_string()) && !comps.contains(&"and2.1".to_string()));
    let mut s = session();
    ok(&mut s, "loadrt pid count=1\nloadrt encoder num_chan=2\n");
    assert_eq!(s.names(NameKind::Comp), ["encoder.0", "encoder.1", "pid.0"]);
    // `loadrt threads` still refuses a count.
    assert!(err(&mut s, "loadrt threads name1=a period1=1000000 count=2").contains("not count="));
}
