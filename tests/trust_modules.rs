//! Issue 23, findings 1 and 9, through the real binary: which module files `loadrt` believes (owner,
//! mode, every directory above; relative paths from the `.hal` file's directory; `linuxcnc:` takes a
//! name only), that nothing of a refused or non-LinuxCNC shared object runs (a constructor writing a
//! marker file proves it), that `--check` never runs module code, and that `--check` refuses what
//! `start` refuses, in memory linear in the file.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const RTAPI: &str = env!("CARGO_BIN_EXE_rtapi");

/// Prints `SKIPPED` and returns false; fails instead under CI (which installs gcc and runs as root).
fn need(ok: bool, test: &str, why: &str) -> bool {
    if !ok {
        eprintln!("SKIPPED: {test}: {why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "{test}: {why} (CI must have it)"
        );
    }
    ok
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn have_gcc() -> bool {
    Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn have_linuxcnc_headers() -> bool {
    Path::new("/usr/include/linuxcnc/rtapi.h").is_file()
}

/// A shared object that is no LinuxCNC module: its constructor writes `marker`.
fn evil_so(dir: &Path, name: &str, marker: &Path) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(
        &c,
        format!(
            "#include <stdio.h>\n__attribute__((constructor)) static void boom(void) {{ \
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\\n\", f); fclose(f); }} }}\n\
             int triple(int x) {{ return 3 * x; }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let so = dir.join(format!("{name}.so"));
    let o = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&c)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    so
}

/// A LinuxCNC module (gcc, LinuxCNC's headers): arguments `gain` (int) and `label` (string), a pin
/// `tmod.out` = 2 × gain; its `rtapi_app_main` writes `marker` (proof that it ran).
fn real_module(dir: &Path, marker: &Path) -> PathBuf {
    let c = dir.join("tmod.c");
    std::fs::write(
        &c,
        format!(
            "#include \"rtapi.h\"\n#include \"rtapi_app.h\"\n#include \"hal.h\"\n#include <stdio.h>\n\
             MODULE_LICENSE(\"GPL\");\nstatic int gain = 1;\nRTAPI_MP_INT(gain, \"gain\");\n\
             static char *label = \"x\";\nRTAPI_MP_STRING(label, \"label\");\nstatic int comp_id;\n\
             struct st {{ hal_s32_t *out; }};\n\
             int rtapi_app_main(void) {{ struct st *s; int r; \
             FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(label, f); fclose(f); }} \
             comp_id = hal_init(\"tmod\"); if (comp_id < 0) return comp_id; \
             s = hal_malloc(sizeof *s); if (!s) return -1; \
             r = hal_pin_s32_new(\"tmod.out\", HAL_OUT, &s->out, comp_id); if (r) return r; \
             *(s->out) = 2 * gain; hal_ready(comp_id); return 0; }}\n\
             void rtapi_app_exit(void) {{ hal_exit(comp_id); }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let so = dir.join("tmod.so");
    let o = Command::new("gcc")
        .args([
            "-shared",
            "-fPIC",
            "-DRTAPI",
            "-D_GNU_SOURCE",
            "-D__MODULE__",
        ])
        .arg("-I/usr/include/linuxcnc")
        .arg("-o")
        .arg(&so)
        .arg(&c)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    so
}

/// `rtapi halrun [--check] -f hal` from `cwd`, with an instance of its own.
fn halrun(check: bool, hal: &Path, cwd: &Path, instance: &str) -> Output {
    let mut c = Command::new(RTAPI);
    c.arg("halrun").arg("--instance").arg(instance);
    if check {
        c.arg("--check");
    }
    c.arg("-f")
        .arg(hal)
        .current_dir(cwd)
        .env("RUST_LOG", "error")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Removes a file at the end of a test.
struct Remove(PathBuf);
impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The attack: an ordinary user (`nobody`) drops a `.so` with a constructor in /tmp. As root,
/// `--check` and a real `halrun -f` refuse it by path and by a `linuxcnc:../` name, and a `./NAME.so`
/// in a `.hal` file elsewhere is looked for next to that file, not in the working directory (/tmp).
/// The constructor never runs.
#[test]
fn a_module_file_of_another_user_in_tmp_is_refused_and_never_runs() {
    let t = "a_module_file_of_another_user_in_tmp_is_refused_and_never_runs";
    if !need(
        is_root(),
        t,
        "needs root (to own files as nobody, and as the attacked user)",
    ) || !need(have_gcc(), t, "gcc is missing")
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("MARKER");
    let built = evil_so(work.path(), "evil", &marker);
    // In /tmp itself, owned by nobody, as the probeuser did.
    let tag = format!("rtapi-tm-{}", std::process::id());
    let dropped = PathBuf::from(format!("/tmp/{tag}.so"));
    let _rm = Remove(dropped.clone());
    std::fs::copy(&built, &dropped).unwrap();
    std::os::unix::fs::chown(&dropped, Some(65534), Some(65534)).unwrap();
    let also = PathBuf::from("/tmp/triple.so");
    let _rm2 = if also.exists() {
        None
    } else {
        std::fs::copy(&built, &also).unwrap();
        std::os::unix::fs::chown(&also, Some(65534), Some(65534)).unwrap();
        Some(Remove(also.clone()))
    };
    let confdir = work.path().join("conf");
    std::fs::create_dir(&confdir).unwrap();
    chmod(&confdir, 0o755);
    let hal = confdir.join("t.hal");
    let cases = [
        (
            format!("loadrt {}\n", dropped.display()),
            "owned by uid 65534",
        ),
        (
            format!("loadrt linuxcnc:../../../../tmp/{tag}\n"),
            "takes a module name",
        ),
        ("loadrt ./triple.so\n".to_string(), "does not exist"),
    ];
    for (body, why) in &cases {
        std::fs::write(&hal, body).unwrap();
        for check in [true, false] {
            let o = halrun(
                check,
                &hal,
                Path::new("/tmp"),
                &format!("tm{}", std::process::id()),
            );
            let e = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{body} check={check}: {e}");
            assert!(
                e.contains("t.hal:1:") && e.contains(why),
                "{body} check={check}: {e}"
            );
            assert!(
                !marker.exists(),
                "{body} check={check}: the constructor ran: {e}"
            );
        }
    }
    // The message says what is wrong and what to do.
    std::fs::write(&hal, &cases[0].0).unwrap();
    let e = stderr(&halrun(true, &hal, Path::new("/"), "tmx"));
    assert!(
        e.contains("refused LinuxCNC module file")
            && e.contains("(nobody)")
            && e.contains("chown root:"),
        "{e}"
    );
}

/// The file may be root's, but a directory above it that others can write (not sticky) lets them
/// swap it: refused, naming the directory. Same for the file itself group-writable.
#[test]
fn a_module_under_a_directory_others_can_write_is_refused() {
    let t = "a_module_under_a_directory_others_can_write_is_refused";
    if !need(have_gcc(), t, "gcc is missing") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("MARKER");
    let open = work.path().join("open");
    std::fs::create_dir(&open).unwrap();
    let so = evil_so(&open, "m", &marker);
    chmod(&open, 0o777);
    let hal = work.path().join("t.hal");
    std::fs::write(&hal, "loadrt ./open/m.so\n").unwrap();
    for check in [true, false] {
        let e = stderr(&halrun(check, &hal, Path::new("/"), "tmd"));
        assert!(
            e.contains("refused LinuxCNC module file")
                && e.contains(&format!("the directory {} has mode 0777", open.display()))
                && e.contains("chmod go-w"),
            "{e}"
        );
    }
    chmod(&open, 0o755);
    chmod(&so, 0o666);
    let e = stderr(&halrun(true, &hal, Path::new("/"), "tmd"));
    assert!(e.contains("the file") && e.contains("mode 0666"), "{e}");
    assert!(!marker.exists());
}

/// A shared object properly owned but with no `rtapi_app_main` is refused from its symbols, before
/// `dlopen`: its constructor never runs, in `--check` and in a real load (which used to `dlopen` it
/// first and only then say it is not a module).
#[test]
fn a_shared_object_that_is_no_module_is_refused_before_it_is_opened() {
    let t = "a_shared_object_that_is_no_module_is_refused_before_it_is_opened";
    if !need(have_gcc(), t, "gcc is missing") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("MARKER");
    evil_so(work.path(), "triple", &marker);
    let hal = work.path().join("t.hal");
    std::fs::write(&hal, "loadrt ./triple.so\n").unwrap();
    for check in [true, false] {
        let o = halrun(check, &hal, Path::new("/"), "tmn");
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(
                "is not a LinuxCNC real-time module (it has no rtapi_app_main); give a module of"
            ) && e.contains("halcompile"),
            "{e}"
        );
        assert!(!marker.exists(), "check={check}: its constructor ran");
    }
}

/// A module next to the `.hal` file (root's or the caller's, 0755) loads by a relative path taken
/// from the `.hal` file's directory, whatever the working directory. `--check` checks its arguments
/// from its symbols (name, int type) and never runs it; a real halrun runs it.
#[test]
fn a_module_next_to_the_hal_file_loads_by_relative_path_and_check_never_runs_it() {
    let t = "a_module_next_to_the_hal_file_loads_by_relative_path_and_check_never_runs_it";
    if !need(have_gcc(), t, "gcc is missing")
        || !need(
            have_linuxcnc_headers(),
            t,
            "LinuxCNC's headers are missing (linuxcnc-uspace-dev)",
        )
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let conf = work.path().join("conf");
    let mods = conf.join("mods");
    std::fs::create_dir_all(&mods).unwrap();
    chmod(&conf, 0o755);
    chmod(&mods, 0o755);
    let marker = work.path().join("RAN");
    real_module(&mods, &marker);
    let hal = conf.join("t.hal");
    std::fs::write(
        &hal,
        "loadrt ./mods/tmod.so gain=21 label=hello\nshow pin\nsetp tmod.out 1\n",
    )
    .unwrap();
    let elsewhere = work.path();
    // --check: accepted, the module's pins are not known (listed as not checked), nothing ran.
    let o = halrun(true, &hal, elsewhere, "tmr");
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(
        e.contains("t.hal:3: not checked:") && e.contains("tmod.out"),
        "{e}"
    );
    assert!(!marker.exists(), "--check ran the module");
    // Arguments checked from the file alone.
    std::fs::write(&hal, "loadrt ./mods/tmod.so gain=x\n").unwrap();
    let e = stderr(&halrun(true, &hal, elsewhere, "tmr"));
    assert!(
        e.contains("'x' is not an integer (a C int) for tmod"),
        "{e}"
    );
    std::fs::write(&hal, "loadrt ./mods/tmod.so bogus=1\n").unwrap();
    let e = stderr(&halrun(true, &hal, elsewhere, "tmr"));
    assert!(
        e.contains("has no argument 'bogus'; it takes gain=, label="),
        "{e}"
    );
    assert!(!marker.exists(), "--check ran the module");
    // A real halrun runs it: its pin, its argument, its marker.
    std::fs::write(
        &hal,
        "loadrt ./mods/tmod.so gain=21 label=hello\nshow pin\n",
    )
    .unwrap();
    let o = halrun(
        false,
        &hal,
        elsewhere,
        &format!("tmr{}", std::process::id()),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.lines()
            .any(|l| l.contains("tmod.out") && l.contains("42")),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "hello");
}

/// Finding 9: `start` refuses a thread of more than 1024 functions; `--check` refuses it too, at
/// the `addf`, in the same words.
#[test]
fn check_refuses_the_thread_start_refuses() {
    let mut l = vec!["loadrt threads name1=servo period1=1000000".to_string()];
    for c in ["and2", "or2", "xor2", "not", "edge"] {
        l.push(format!("loadrt {c} count=205"));
        l.extend((0..205).map(|i| format!("addf {c}.{i} servo")));
    }
    let work = tempfile::tempdir().unwrap();
    let hal = work.path().join("many.hal");
    std::fs::write(&hal, l.join("\n") + "\n").unwrap();
    for check in [true, false] {
        let o = halrun(
            check,
            &hal,
            Path::new("/"),
            &format!("tmf{}", std::process::id()),
        );
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "check={check}: {e}");
        assert!(
            e.contains("many.hal:1031: addf edge.204: thread servo: 1025 functions in one thread; the most is 1024: spread them over more threads"),
            "check={check}: {e}"
        );
    }
}

/// Finding 9: `--check` of a 16 MiB file (the most a config file may be) stays within twice the
/// file plus the program's own size (it was 400 MB and more: every command parsed and kept first).
#[test]
fn check_memory_is_linear_in_the_file() {
    let work = tempfile::tempdir().unwrap();
    let hal = work.path().join("big.hal");
    let head = "loadrt threads name1=servo period1=1000000\nloadrt and2 count=2\n\
                net s and2.1.in0 and2.1.in1\n";
    let line = "setp and2.0.in0 1\nsets s 0\n";
    let n = ((16 << 20) - head.len() - 64) / line.len();
    {
        // Written line by line: this process stays small (a child's peak counts what it was
        // forked from, before its exec).
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&hal).unwrap());
        f.write_all(head.as_bytes()).unwrap();
        for _ in 0..n {
            f.write_all(line.as_bytes()).unwrap();
        }
        f.flush().unwrap();
    }
    let size = std::fs::metadata(&hal).unwrap().len();
    let child = Command::new(RTAPI)
        .args(["halrun", "--check", "-f"])
        .arg(&hal)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: all-zero is a valid `rusage` (plain integers).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child `pid` (not yet reaped: `child` is never waited on), writing
    // into the two locals above, which outlive the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status}"
    );
    let rss = usage.ru_maxrss as u64 * 1024;
    let bound = 2 * size + (40 << 20);
    assert!(
        rss <= bound,
        "--check of a {size}-byte file used {rss} bytes (bound {bound})"
    );
    drop(child);
}
