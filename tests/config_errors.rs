//! Bad machine configs: each gives `file:line: message` on stderr, exit code 2, and starts nothing
//! (no `/dev/shm/rtapi-<instance>` ever appears, nothing on stdout).

use std::path::Path;
use std::process::Command;

use rtapi::components::{Registry, Validation};
use rtapi::config::Machine;

const TOML: &str = r#"# test machine
hal = ["m.hal"]

[[thread]]
name = "base"
period = "50us"

[[thread]]
name = "servo"
period = "1ms"
"#;

/// Lines 1-4 of every bad .hal file; the bad line is line 5 unless the case says otherwise.
const PRELUDE: &str = "# prelude\nloadrt siggen\nloadrt pid\nloadrt stepgen\n";

struct Case {
    name: &'static str,
    toml: &'static str,
    hal: String,
    /// Expected start of the first stderr line: `file:line: ` with the file relative to the tempdir.
    place: &'static str,
    /// A fragment the message must contain.
    says: &'static str,
}

fn hal(bad: &str) -> String {
    format!("{PRELUDE}{bad}\n# after\n")
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "unknown component",
            toml: TOML,
            hal: hal("loadrt frobnicator count=2"),
            place: "m.hal:5: ",
            says: "unknown component 'frobnicator'",
        },
        Case {
            name: "unknown pin",
            toml: TOML,
            hal: hal("net cmd siggen.0.sine => pid.0.comand"),
            place: "m.hal:5: ",
            says: "no pin named 'pid.0.comand'; pid.0 has: ",
        },
        Case {
            name: "type mismatch",
            toml: TOML,
            hal: hal("net cmd siggen.0.sine => pid.0.enable"),
            place: "m.hal:5: ",
            says: "types must match",
        },
        Case {
            name: "two writers on one signal",
            toml: TOML,
            hal: hal("net cmd siggen.0.sine pid.0.output"),
            place: "m.hal:5: ",
            says: "already has writer 'siggen.0.sine'",
        },
        Case {
            name: "bad value",
            toml: TOML,
            hal: hal("setp pid.0.Pgain fast"),
            place: "m.hal:5: ",
            says: "'fast' is not a valid float value for 'pid.0.Pgain'",
        },
        Case {
            name: "bad value for a u32 param",
            toml: TOML,
            hal: hal("setp stepgen.0.steplen -5"),
            place: "m.hal:5: ",
            says: "not a valid u32 value",
        },
        Case {
            name: "unknown thread",
            toml: TOML,
            hal: hal("addf pid.0.do-pid-calcs servo-thread"),
            place: "m.hal:5: ",
            says: "no thread named 'servo-thread'; threads are the [[thread]] tables of",
        },
        Case {
            name: "unknown function",
            toml: TOML,
            hal: hal("addf pid.0.do-pid-calc servo"),
            place: "m.hal:5: ",
            says: "no function named 'pid.0.do-pid-calc'",
        },
        Case {
            name: "period 0",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = 0\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:4: ",
            says: "period 0",
        },
        Case {
            name: "duplicate thread name",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n\n[[thread]]\nname = \"servo\"\nperiod = \"2ms\"\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:7: ",
            says: "duplicate thread name 'servo'",
        },
        Case {
            name: "duplicate component name",
            toml: TOML,
            hal: hal("loadrt pid"),
            place: "m.hal:5: ",
            says: "a component named 'pid.0' already exists",
        },
        Case {
            name: "duplicate instance name from names=",
            toml: TOML,
            hal: hal("loadrt stepgen names=x,x"),
            place: "m.hal:5: ",
            says: "'x' is given twice",
        },
        Case {
            name: "dangling continuation",
            toml: TOML,
            hal: format!("{PRELUDE}net cmd siggen.0.sine \\\n    => pid.0.command \\\n"),
            place: "m.hal:6: ",
            says: "the file ends inside a continued line (started at line 5)",
        },
        Case {
            name: "arrow against the pin direction",
            toml: TOML,
            hal: hal("net cmd pid.0.command => siggen.0.frequency"),
            place: "m.hal:5: ",
            says: "'pid.0.command' is an IN pin but the '=>' after it needs a writer",
        },
        Case {
            name: "setp on an output",
            toml: TOML,
            hal: hal("setp pid.0.output 3"),
            place: "m.hal:5: ",
            says: "it is an OUT pin",
        },
        Case {
            name: "sets on a driven signal",
            toml: TOML,
            hal: format!("{PRELUDE}net cmd siggen.0.sine => pid.0.command\nsets cmd 1\n"),
            place: "m.hal:6: ",
            says: "driven by OUT pin 'siggen.0.sine'",
        },
        Case {
            name: "unknown command",
            toml: TOML,
            hal: hal("linkps a b"),
            place: "m.hal:5: ",
            says: "unknown command 'linkps'",
        },
        Case {
            name: "unknown loadrt argument",
            toml: TOML,
            hal: hal("loadrt encoder x4=1"),
            place: "m.hal:5: ",
            says: "component 'encoder' has no argument 'x4'",
        },
        Case {
            name: "unknown TOML key",
            toml: "hal = [\"m.hal\"]\n[runtime]\nlock_mem = true\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:3: ",
            says: "unknown field `lock_mem`",
        },
        Case {
            name: "missing hal file",
            toml: "# x\nhal = [\"nope.hal\"]\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:2: ",
            says: "cannot read hal file",
        },
        Case {
            name: "a pin where the signal name goes",
            toml: TOML,
            hal: hal("net siggen.0.sine pid.0.command"),
            place: "m.hal:5: ",
            says: "'siggen.0.sine' is a pin, but the first word names the signal",
        },
    ]
}

#[test]
fn every_bad_config_names_its_line_exits_2_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, case) in cases().iter().enumerate() {
        std::fs::write(dir.path().join("m.toml"), case.toml).unwrap();
        std::fs::write(dir.path().join("m.hal"), &case.hal).unwrap();
        let instance = format!("cfgerr-{}-{i}", std::process::id());
        let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
            .current_dir(dir.path())
            .args(["run", "m.toml", "--duration", "5s", "--instance", &instance])
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let first = stderr.lines().next().unwrap_or("");
        let ok = out.status.code() == Some(2)
            && first.starts_with(case.place)
            && first.contains(case.says)
            && out.stdout.is_empty()
            && !Path::new(&format!("/dev/shm/rtapi-{instance}")).exists();
        if !ok {
            failures.push(format!(
                "{}: exit {:?}, stderr:\n{stderr}\nstdout: {}",
                case.name,
                out.status.code(),
                String::from_utf8_lossy(&out.stdout)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n---\n"));
}

#[test]
fn syntax_errors_of_all_files_are_reported_together() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.toml"), "hal = [\"a.hal\", \"b.hal\"]\n").unwrap();
    std::fs::write(dir.path().join("a.hal"), "loadrt pid\nsetp x\n").unwrap();
    std::fs::write(dir.path().join("b.hal"), "\nnet\nbogus\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .current_dir(dir.path())
        .args(["run", "m.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines[0].starts_with("a.hal:2: setp: usage"), "{stderr}");
    assert!(lines[1].starts_with("b.hal:2: net: usage"), "{stderr}");
    assert!(
        lines[2].starts_with("b.hal:3: unknown command 'bogus'"),
        "{stderr}"
    );
    assert!(
        lines[3].contains("3 configuration error(s); nothing was started"),
        "{stderr}"
    );
}

#[test]
fn files_are_named_as_given_relative_to_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("cfg")).unwrap();
    std::fs::write(dir.path().join("cfg/m.toml"), "hal = [\"m.hal\"]\n").unwrap();
    std::fs::write(dir.path().join("cfg/m.hal"), "loadrt nothing\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .current_dir(dir.path())
        .args(["run", "cfg/m.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("cfg/m.hal:1: loadrt nothing: unknown component"),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .current_dir(dir.path())
        .args(["run", "cfg/missing.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("cfg/missing.toml: cannot read"));
}

#[test]
fn the_shipped_sim_axis_config_validates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
    let machine = Machine::load(&path).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(machine.threads.len(), 2);
    let mut dry = Validation::new("sim-axis-validate").unwrap();
    machine.apply(&mut dry, &Registry::builtin()).unwrap();
}

/// Records `addf` calls on top of a dry run.
struct Recorder {
    inner: Validation,
    addf: Vec<(String, Option<usize>)>,
}

impl rtapi::components::Target for Recorder {
    fn hal(&mut self) -> &mut rtapi_hal::HalBuilder {
        self.inner.hal()
    }
    fn function(
        &mut self,
        c: rtapi_hal::ComponentKey,
        name: &str,
        f: rtapi::rt::function::FunctionFactory,
    ) -> Result<(), rtapi::components::LoadError> {
        self.inner.function(c, name, f)
    }
    fn thread(
        &mut self,
        t: &rtapi::components::ThreadDecl,
    ) -> Result<(), rtapi::components::LoadError> {
        self.inner.thread(t)
    }
    fn addf(
        &mut self,
        f: &str,
        t: &str,
        position: Option<usize>,
    ) -> Result<(), rtapi::components::LoadError> {
        self.addf.push((f.to_string(), position));
        self.inner.addf(f, t, position)
    }
}

#[test]
fn addf_positions_count_like_halcmd() {
    let hal = "loadrt siggen count=4\n\
               addf siggen.0.update servo\n\
               addf siggen.1.update servo 1\n\
               addf siggen.2.update servo -1\n\
               addf siggen.3.update servo -2\n";
    let machine = Machine::from_texts("m.toml", TOML, &[("m.hal", hal)]).unwrap();
    let mut r = Recorder {
        inner: Validation::new("positions").unwrap(),
        addf: Vec::new(),
    };
    machine.apply(&mut r, &Registry::builtin()).unwrap();
    // 1 = first; -1 = append; -2 = before the last of the 3 already there.
    let positions: Vec<Option<usize>> = r.addf.iter().map(|(_, p)| *p).collect();
    assert_eq!(positions, [None, Some(0), None, Some(2)]);
    let too_far = "loadrt siggen\naddf siggen.0.update servo 3\n";
    let machine = Machine::from_texts("m.toml", TOML, &[("m.hal", too_far)]).unwrap();
    let e = machine
        .apply(
            &mut Validation::new("positions").unwrap(),
            &Registry::builtin(),
        )
        .err()
        .unwrap();
    assert_eq!(e.line, Some(2));
    assert!(
        e.message.contains("position 3 is outside thread 'servo'"),
        "{e}"
    );
}
