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
            says: "component 'frobnicator' is not available in rtapi",
        },
        Case {
            name: "unknown pin",
            toml: TOML,
            hal: hal("net cmd siggen.0.sine => pid.0.comand"),
            place: "m.hal:5: ",
            says: "no pin named 'pid.0.comand'; did you mean 'pid.0.command'?",
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
            hal: hal("frobnicate a b"),
            place: "m.hal:5: ",
            says: "unknown command 'frobnicate'",
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
        // Trust: clear messages and input limits.
        Case {
            name: "period as a float",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = 1.5\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:4: ",
            says: "thread 'servo': period must be a string with a unit like \"1ms\" (or an integer of nanoseconds)",
        },
        Case {
            name: "period under the shortest, in integer nanoseconds",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = 999\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:4: ",
            says: "period 999ns is shorter than 1us, which no timer keeps",
        },
        Case {
            name: "period under the shortest, as a string",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = \"1ns\"\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:4: ",
            says: "period 1ns is shorter than 1us, which no timer keeps",
        },
        Case {
            name: "period over the longest",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = \"100s\"\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:4: ",
            says: "period 100s is longer than 10s",
        },
        Case {
            name: "cpu that does not exist",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n\ncpu = 4095\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:6: ",
            says: "thread 'servo': cpu = 4095, but this machine has no online CPU 4095 (online CPUs: ",
        },
        Case {
            name: "hybrid margin of zero",
            toml: "hal = [\"m.hal\"]\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\nwake = \"hybrid:0\"\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:5: ",
            says: "the hybrid margin must be positive, e.g. hybrid:50us",
        },
        Case {
            name: "a loadrt count beyond the instance limit",
            toml: TOML,
            hal: hal("loadrt siggen count=100000"),
            place: "m.hal:5: ",
            says: "give a positive number of instances, at most 256",
        },
        Case {
            name: "a non-finite float",
            toml: TOML,
            hal: hal("setp pid.0.Pgain 1e309"),
            place: "m.hal:5: ",
            says: "setp: '1e309' for pid.0.Pgain is not a finite number",
        },
        Case {
            name: "unknown stall action",
            toml: "hal = [\"m.hal\"]\n[runtime]\non_stall = \"explode\"\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:3: ",
            says: "runtime.on_stall 'explode' is unknown; use report, demote or stop",
        },
        Case {
            name: "zero stall periods",
            toml: "hal = [\"m.hal\"]\n[runtime]\nstall_periods = 0\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n",
            hal: PRELUDE.to_string(),
            place: "m.toml:3: ",
            says: "runtime.stall_periods = 0 is out of range; give a number of periods from 1 to 1000000",
        },
    ]
}

/// The TOML of `n` threads with distinct names, each `[[thread]]` table 4 lines long from line 2.
fn many_threads(n: usize) -> String {
    let mut toml = String::from("hal = [\"m.hal\"]\n");
    for i in 0..n {
        toml.push_str(&format!(
            "[[thread]]\nname = \"t{i}\"\nperiod = \"1ms\"\n\n"
        ));
    }
    toml
}

/// Runs `rtapi run m.toml` on the given files (bytes, so a test can write what is not UTF-8);
/// returns exit code, stderr, stdout, and whether the segment appeared.
fn run_bytes(toml: &[u8], hal: &[u8], extra: &[&str]) -> (Option<i32>, String, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.toml"), toml).unwrap();
    std::fs::write(dir.path().join("m.hal"), hal).unwrap();
    let instance = format!("cfgtrust-{}-{}", std::process::id(), rand_suffix());
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .current_dir(dir.path())
        .args(["run", "m.toml", "--duration", "5s"])
        .args(if extra.contains(&"--instance") {
            extra.to_vec()
        } else {
            [extra, &["--instance", &instance]].concat()
        })
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        Path::new(&format!("/dev/shm/rtapi-{instance}")).exists(),
    )
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn too_many_threads_is_a_config_error_at_the_first_over_the_limit() {
    let (code, stderr, stdout, shm) =
        run_bytes(many_threads(10_000).as_bytes(), PRELUDE.as_bytes(), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty() && !shm);
    // Thread 65 (t64) starts at line 2 + 64 * 4.
    let first = stderr.lines().next().unwrap();
    assert_eq!(
        first,
        "m.toml:258: thread 't64' is thread 65 of 10000; a machine has at most 64 threads (a CNC machine usually has two, base and servo)"
    );
    assert!(!stderr.contains("max_size"), "{stderr}");
    // 64 is fine as far as the config goes.
    let machine = Machine::from_texts("m.toml", &many_threads(64), &[("m.hal", PRELUDE)]);
    assert!(machine.is_ok(), "{machine:?}");
}

#[test]
fn too_many_component_instances_is_a_config_error_at_its_loadrt_line() {
    let mut hal = String::from("# many\n");
    for i in 0..16 {
        let names: Vec<String> = (0..256).map(|j| format!("g{i}x{j}")).collect();
        hal.push_str(&format!("loadrt siggen names={}\n", names.join(",")));
    }
    hal.push_str("loadrt pid\n");
    let machine = Machine::from_texts("m.toml", TOML, &[("m.hal", &hal)]).unwrap();
    let e = machine
        .apply(&mut Validation::new("many").unwrap(), &Registry::builtin())
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "m.hal:18: loadrt pid: 3 more instances would make 4099; a machine may load at most 4096 component instances"
    );
}

#[test]
fn a_byte_order_mark_is_skipped_in_toml_and_hal() {
    let toml = format!("\u{feff}{TOML}");
    let hal = format!("\u{feff}{PRELUDE}addf pid.0.do-pid-calcs servo\n");
    let machine = Machine::from_texts("m.toml", &toml, &[("m.hal", &hal)]).unwrap();
    machine
        .apply(&mut Validation::new("bom").unwrap(), &Registry::builtin())
        .unwrap();
    // And through the files: an error later in the file still has its right line.
    let (code, stderr, _, _) = run_bytes(
        toml.as_bytes(),
        format!("\u{feff}{PRELUDE}bogus\n").as_bytes(),
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("m.hal:5: unknown command 'bogus'"),
        "{stderr}"
    );
}

#[test]
fn a_file_that_is_far_too_large_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.toml"), "# x\nhal = [\"zero.hal\"]\n").unwrap();
    // /dev/zero never ends: without a limit this would read until memory runs out.
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.hal")).unwrap();
    let e = Machine::load(&dir.path().join("m.toml")).unwrap_err();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].line, Some(2));
    assert!(
        e[0].message.ends_with(
            "zero.hal: the file is larger than 16 MiB, the most a config file may be; is this the right file?"
        ),
        "{}",
        e[0]
    );
}

#[test]
fn non_utf8_is_reported_at_its_own_file_and_line() {
    let mut hal = PRELUDE.as_bytes().to_vec();
    hal.extend_from_slice(b"setp pid.0.Pgain caf\xe9\n");
    let (code, stderr, stdout, shm) = run_bytes(TOML.as_bytes(), &hal, &[]);
    assert_eq!(code, Some(2));
    assert!(stdout.is_empty() && !shm);
    assert!(
        stderr.starts_with("m.hal:5: not UTF-8 (byte 0xE9 at column 21); save the file as UTF-8\n"),
        "{stderr}"
    );
    let mut toml = TOML.as_bytes().to_vec();
    toml.extend_from_slice(b"# \xff\n");
    let (code, stderr, _, _) = run_bytes(&toml, PRELUDE.as_bytes(), &[]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("m.toml:11: not UTF-8 (byte 0xFF at column 3)"),
        "{stderr}"
    );
}

#[test]
fn echoed_input_is_escaped_and_cut_once() {
    // A 10 MB name: shown once, cut to 60 characters with its size.
    let huge = "x".repeat(10 << 20);
    for bad in [
        format!("{PRELUDE}net {huge} pid.0.command\n"),
        format!("{PRELUDE}loadrt {huge}\n"),
        format!("{PRELUDE}setp pid.0.Pgain {huge}\n"),
        format!("{PRELUDE}addf {huge} servo\n"),
        format!("{PRELUDE}{huge}\n"),
    ] {
        let (code, stderr, _, _) = run_bytes(TOML.as_bytes(), bad.as_bytes(), &[]);
        assert_eq!(code, Some(2));
        let first = stderr.lines().next().unwrap();
        assert!(first.starts_with("m.hal:5: "), "{first}");
        assert!(
            first.len() < 400,
            "{} bytes: {}",
            first.len(),
            &first[..400]
        );
        // The name, cut, once (a quoted one counts its quotes too).
        assert_eq!(first.matches("(1048576").count(), 1, "{first}");
        assert_eq!(first.matches(&"x".repeat(40)).count(), 1, "{first}");
    }
    // Control characters never reach the terminal raw, from a .hal file or the TOML.
    let (code, stderr, _, _) = run_bytes(
        TOML.as_bytes(),
        // (No `[` in it: `[SECTION]KEY` is INI substitution syntax.)
        format!("{PRELUDE}setp pid.0.Pgain \u{1b}x2J\u{7}\n").as_bytes(),
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        !stderr.contains('\u{1b}') && !stderr.contains('\u{7}'),
        "{stderr:?}"
    );
    assert!(stderr.contains("\\u{1b}x2J\\u{7}"), "{stderr}");
    let toml = "hal = [\"m.hal\"]\n[[thread]]\nname = \"a\\u001b[31mb\"\nperiod = \"1ms\"\ntimer = \"\\u001b\"\n";
    let (code, stderr, _, _) = run_bytes(toml.as_bytes(), PRELUDE.as_bytes(), &[]);
    assert_eq!(code, Some(2));
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(
        stderr.starts_with("m.toml:3: thread name 'a\\u{1b}[31mb' is not a valid name"),
        "{stderr}"
    );
    let (code, stderr, _, _) = run_bytes(
        TOML.as_bytes(),
        PRELUDE.as_bytes(),
        &["--instance", "a\u{1b}b"],
    );
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("rtapi: --instance 'a\\u{1b}b' is not a valid name"),
        "{stderr:?}"
    );
}

#[test]
fn a_cpu_that_is_not_allowed_names_its_config_line() {
    let toml = "[[thread]]\nname = \"base\"\nperiod = \"25us\"\ncpu = 3\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\ncpu = 1\n";
    let machine = Machine::from_texts("m.toml", toml, &[]).unwrap();
    let e = machine.check_cpus(&[0, 1], Some(&[0])).unwrap_err();
    let shown: Vec<String> = e.iter().map(|e| e.to_string()).collect();
    assert_eq!(
        shown,
        [
            "m.toml:4: thread 'base': cpu = 3, but this machine has no online CPU 3 (online CPUs: 0-1); change `cpu` in this file, or remove it to let rtapi choose",
            "m.toml:8: thread 'servo': cpu = 1, but this process may not run on CPU 1 (allowed: 0; see taskset or the cgroup's cpuset); change `cpu` in this file, or remove it to let rtapi choose",
        ]
    );
    assert!(machine.check_cpus(&[0, 1, 2, 3], None).is_ok());
}

#[test]
fn run_duration_zero_and_unitless_numbers_are_refused() {
    for (duration, says) in [
        (
            "0",
            "--duration must be positive; omit it to run until Ctrl-C",
        ),
        ("5", "write a unit, e.g. 5us"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.toml"), TOML).unwrap();
        std::fs::write(dir.path().join("m.hal"), PRELUDE).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
            .current_dir(dir.path())
            .args(["run", "m.toml", "--duration", duration])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(says), "{stderr}");
        assert!(out.stdout.is_empty());
    }
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
        stderr.starts_with("cfg/m.hal:1: component 'nothing' is not available in rtapi"),
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
        f: rtapi::runtime::function::FunctionFactory,
    ) -> Result<(), rtapi::components::LoadError> {
        self.inner.function(c, name, f)
    }
    fn thread(
        &mut self,
        t: &rtapi::runtime::ThreadSpec,
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
    // 1 = first; -1 = append; -2 = before the last of the 3 already there. The session keeps the
    // run list and emits it in its final order once the files are done.
    let order: Vec<&str> = r.addf.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        order,
        [
            "siggen.1.update",
            "siggen.0.update",
            "siggen.3.update",
            "siggen.2.update"
        ]
    );
    assert!(r.addf.iter().all(|(_, p)| p.is_none()));
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
