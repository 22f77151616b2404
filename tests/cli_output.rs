//! What the CLI prints when nobody reads it, or when asked to be quiet, through the real binary:
//! - a reader that goes away (`rtapi show | head -1`) ends the printing quietly: exit 0, no panic
//!   ("failed printing to stdout" before), and a run still stops and removes its segment;
//! - `latency-test --quiet` prints only its report: the runtime's once-a-second overrun warnings
//!   are not logged unless `RUST_LOG` asks for them.

mod common;
use common::segment_exists;
use common::sim_axis::Running as Instance;

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

/// One test at a time: the overrun scenario's 1 µs SCHED_FIFO thread keeps the RT CPU busy, and
/// another test's threads on that CPU would stall (and be reported stalled) meanwhile.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn rtapi(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args(args)
        .env_remove("RTAPI_FLAVOR")
        .env("RUST_LOG", "error");
    c
}

fn name(what: &str) -> String {
    format!("out-{what}-{}", std::process::id())
}

/// A pipe for a child's standard output, one page big: a command printing more than 4 KiB blocks in
/// its write until the test reads, so closing the read end then is seen by that write (EPIPE).
fn one_page_pipe() -> (File, OwnedFd) {
    // Close-on-exec: a copy of the read end in a child would keep the pipe open forever.
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    nix::fcntl::fcntl(w.as_raw_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
    (File::from(r), w)
}

/// Reads one line the way `head -1` does, byte by byte (nothing more is taken from the pipe).
fn read_line(r: &mut File) -> String {
    let mut line = Vec::new();
    let mut b = [0u8];
    while r.read(&mut b).unwrap() == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    String::from_utf8_lossy(&line).into_owned()
}

/// Runs `cmd` with standard output a pipe that the test closes after reading `lines` lines (0: closed
/// before the command starts writing); returns its status and standard error.
fn with_closed_stdout(mut cmd: Command, lines: usize) -> (Output, Vec<String>) {
    let (r, w) = one_page_pipe();
    // With no line to read, the pipe has no reader from the start: the first write fails.
    let mut r = (lines > 0).then_some(r);
    let child: Child = cmd
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child holds the write end now (ours went into the Command, dropped with it).
    drop(cmd);
    let read: Vec<String> = match r.as_mut() {
        Some(r) => (0..lines).map(|_| read_line(r)).collect(),
        None => Vec::new(),
    };
    drop(r);
    (child.wait_with_output().unwrap(), read)
}

fn assert_quiet_end(what: &str, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{what}: {stderr}");
    assert!(!stderr.contains("failed printing"), "{what}: {stderr}");
    assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
}

/// A `rtapi run` of the sim-axis machine for 10 s, without `RTAPI_FLAVOR` (as [`rtapi`]).
fn start(name: String) -> Instance {
    Instance::start(name, "10s", |c| {
        c.env_remove("RTAPI_FLAVOR");
    })
}

/// `rtapi show | head -1` panicked with "failed printing to stdout: Broken pipe" (exit 101).
#[test]
fn read_only_commands_end_quietly_when_their_reader_goes() {
    let _serial = serial();
    let i = start(name("show"));
    let on = |args: &[&str]| {
        let mut c = rtapi(args);
        c.args(["--instance", &i.name]);
        c
    };
    // Like `head -1`: one line read, then the pipe closed while `show` (6+ KiB) is still writing.
    let (out, read) = with_closed_stdout(on(&["show"]), 1);
    assert!(read[0].starts_with("Instance '"), "{read:?}");
    assert_quiet_end("show | head -1", &out);
    let (out, read) = with_closed_stdout(on(&["show", "--json"]), 1);
    assert_eq!(read[0], "{");
    assert_quiet_end("show --json | head -1", &out);
    // The reader gone before anything is written.
    for args in [
        &["show", "thread"][..],
        &["getp", "pid.0.Pgain"],
        &["watch", "pid.0.error", "--interval", "10ms"],
    ] {
        let (out, _) = with_closed_stdout(on(args), 0);
        assert_quiet_end(&format!("{args:?}"), &out);
    }
    for args in [&["detect"][..], &["detect", "--json"]] {
        let (out, _) = with_closed_stdout(rtapi(args), 0);
        assert_quiet_end(&format!("{args:?}"), &out);
    }
}

/// A run whose standard output is gone still stops, reports on standard error as usual, and removes
/// its segment; a broken pipe only ends the printing.
#[test]
fn runs_with_their_output_gone_still_clean_up() {
    let _serial = serial();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim-axis.toml");
    let run = name("run");
    let mut cmd = rtapi(&["run", config.to_str().unwrap(), "--duration", "1s"]);
    cmd.args(["--instance", &run]);
    let (out, _) = with_closed_stdout(cmd, 0);
    assert_quiet_end("run", &out);
    assert!(!segment_exists(&run), "run left /dev/shm/rtapi-{run}");

    // Live lines every second, then the report: all to a closed pipe.
    let lt = name("lt");
    let cmd = rtapi(&[
        "latency-test",
        "--duration",
        "2s",
        "--base",
        "0",
        "--instance",
        &lt,
    ]);
    let (out, _) = with_closed_stdout(cmd, 0);
    assert_quiet_end("latency-test", &out);
    assert!(
        !segment_exists(&lt),
        "latency-test left /dev/shm/rtapi-{lt}"
    );
}

/// A 1 µs base thread misses most of its periods on any kernel (no timer wakes within 1 µs), so the
/// runtime logs its once-a-second overrun warning: the observable the `--quiet` filter must remove.
fn overrun_run(what: &str, quiet: bool, rust_log: Option<&str>) -> (String, String) {
    let instance = name(what);
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args(["latency-test", "--base", "1us", "--servo", "1ms"])
        .args(["--duration", "2s", "--instance", &instance])
        .env_remove("RTAPI_FLAVOR")
        .env_remove("RUST_LOG");
    if quiet {
        c.arg("--quiet");
    }
    if let Some(l) = rust_log {
        c.env("RUST_LOG", l);
    }
    let out = c.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(stdout.contains("VERDICT:"), "{what}: {stdout}\n{stderr}");
    assert!(!segment_exists(&instance));
    (stdout, stderr)
}

#[test]
fn quiet_latency_test_prints_only_its_report() {
    let _serial = serial();
    // Without --quiet the overrun warnings are logged (the scenario does produce them)...
    let (_, stderr) = overrun_run("loud", false, None);
    assert!(
        stderr.contains(" WARN ") && stderr.contains("period(s) missed"),
        "no overrun warning without --quiet: {stderr}"
    );
    // ... with --quiet they are not, nor anything else below an error ...
    let (stdout, stderr) = overrun_run("quiet", true, None);
    assert!(
        !stderr.contains(" WARN ") && !stderr.contains(" INFO "),
        "--quiet logged: {stderr}"
    );
    assert!(stdout.starts_with("rtapi latency-test: "), "{stdout}");
    // ... unless RUST_LOG asks for them explicitly.
    let (_, stderr) = overrun_run("asked", true, Some("warn"));
    assert!(
        stderr.contains("period(s) missed"),
        "RUST_LOG=warn: {stderr}"
    );
}
