//! The halcmd language against LinuxCNC 2.9's own `halrun`: the same script through both, the same
//! standard output (getp/gets/ptype/stype/list/save after net, sets, unlinkp, delsig, linkps,
//! addf/delf with positions, aliases).
//!
//! Without LinuxCNC (`halrun` missing, or no non-root user to run it as) each test prints a loud
//! `LINUXCNC DIFFERENTIAL TEST NOT RUN` banner and FAILS.

mod common;
use common::linuxcnc;

use std::process::Command;

/// The script through `rtapi halrun --check`: its standard output (it must succeed).
fn ours(name: &str, script: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.hal"));
    std::fs::write(&path, script).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["halrun", "--check", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn same(name: &str, script: &str) {
    let (theirs, stderr) = linuxcnc::halrun_script(name, script);
    assert!(
        !stderr.to_lowercase().contains("error"),
        "{name}: LinuxCNC's halrun failed:\n{stderr}"
    );
    let ours = ours(name, script);
    assert_eq!(
        ours, theirs,
        "{name}: rtapi's output (left) differs from LinuxCNC's (right)"
    );
}

#[test]
fn signal_values_through_net_sets_unlinkp_delsig_and_linkps() {
    same(
        "values",
        "loadrt pid num_chan=1\n\
         newsig cmd float\nsets cmd 2.5\nnet cmd pid.0.command\ngetp pid.0.command\n\
         sets cmd 3.5\nunlinkp pid.0.command\ngetp pid.0.command\n\
         setp pid.0.feedback 4\nnet fb pid.0.feedback\ngets fb\ndelsig fb\ngetp pid.0.feedback\n\
         newsig e bit\nlinkps pid.0.enable e\ngets e\nsets e 1\ngetp pid.0.enable\n\
         pid.0.Pgain = 2\ngetp pid.0.Pgain\nptype pid.0.Pgain\nstype e\n\
         net out pid.0.output => pid.0.maxoutput\ngets out\n\
         setp pid.0.Pgain 1e-7\ngetp pid.0.Pgain\nsetp pid.0.Pgain 123456789.123\ngetp pid.0.Pgain\n\
         setp pid.0.Igain -2.5e12\ngetp pid.0.Igain\nsetp pid.0.Dgain 1.23456789\ngetp pid.0.Dgain\n\
         newsig f float\nsets f 0.00001234\ngets f\n",
    );
}

#[test]
fn run_order_aliases_and_lists() {
    same(
        "order",
        "loadrt threads name1=servo period1=1000000\nloadrt siggen num_chan=4\n\
         addf siggen.0.update servo\naddf siggen.1.update servo 1\n\
         addf siggen.2.update servo -1\naddf siggen.3.update servo -2\nsave thread\n\
         delf siggen.0.update servo\nsave thread\naddf siggen.0.update servo 2\nsave thread\n\
         newsig s bit\nlinkps siggen.0.reset s\nsets s 1\ngetp siggen.0.reset\nlist sig\n\
         alias pin siggen.0.amplitude amp\nsetp amp 3\ngetp siggen.0.amplitude\ngetp amp\n\
         unalias pin amp\ngetp siggen.0.amplitude\n",
    );
}

/// Issue 25 (halrun semantics): `halrun -f` of a file that starts its threads ends at the file's
/// end — stop, unload, exit — as LinuxCNC 2.9's own `halrun -f` does with the same file; ours prints
/// the run's summary, says how to keep it running, and leaves no segment.
#[test]
fn halrun_f_of_a_started_file_ends_at_its_end_as_linuxcncs_does() {
    let script = "loadrt threads name1=servo period1=1000000\nloadrt siggen\n\
                  addf siggen.0.update servo\nstart\nshow thread\n";
    // LinuxCNC's: halrun_script returns once its halrun has exited.
    let t = std::time::Instant::now();
    let (theirs, _) = linuxcnc::halrun_script("halrun-ends", script);
    assert!(theirs.contains("servo"), "LinuxCNC's show thread: {theirs}");
    let stock = t.elapsed();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("started.hal");
    std::fs::write(&path, script).unwrap();
    let instance = format!("halrun-ends-{}", std::process::id());
    let mut child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["halrun", "--instance", &instance, "-f"])
        .arg(&path)
        .env("RUST_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let limit = std::time::Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rtapi halrun -f was still running {limit:?} after a file that ends in `start` + `show`");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let ours = t.elapsed();
    let o = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{err}");
    // The file's own `show thread`, then the summary of the run, which names the thread's cycles.
    assert!(out.contains("servo") && out.contains("cycles"), "{out}");
    assert!(
        err.contains("stopped and unloaded at the end of") && err.contains("--duration"),
        "{err}"
    );
    assert!(
        !std::path::Path::new(&format!("/dev/shm/rtapi-{instance}")).exists(),
        "the segment of {instance} is left"
    );
    eprintln!("halrun -f of a started file ended: LinuxCNC's in {stock:?}, ours in {ours:?}");
}
