//! A whole LinuxCNC 2.9 machine as a reference: one of its sim configs, driven headless, its joints'
//! trajectory recorded period by period.
//!
//! # What a run is
//!
//! [`run`] takes a [`Machine`] (a sample config, G-code programs, what to sample) and a [`Launcher`]
//! and does, as an ordinary user (`nobody` when we are root, `HOME` in the run's directory):
//!
//! 1. copies LinuxCNC's examples tree (`/usr/share/doc/linuxcnc/examples`: the sample configs and the
//!    `nc_files` their symlinks point at) into a fresh directory writable by that user, so the config's
//!    `POSITION_FILE`, `PARAMETER_FILE` and tool table start as shipped on every run;
//! 2. rewrites the config's INI: `[DISPLAY]DISPLAY` becomes `drive.py` (tests/common/lcnc/drive.py, a
//!    `/usr/bin/python3` script using LinuxCNC's `linuxcnc` module), and one more `[HAL]HALFILE`
//!    (`lcref.hal`, after the config's own) loads LinuxCNC's `sampler` on what is sampled —
//!    `joint.N.pos-fb` of every joint, plus one s32 column, the *phase*, which `drive.py` sets with
//!    `hal.set_p` before each stage (1 homing, 2… the programs in order, 0 after the last) — and adds
//!    `sampler.0` last to the servo thread;
//! 3. starts an X server of its own (`Xvfb -displayfd`) when the config needs one (AXIS's
//!    `hal_manualtoolchange` is a Tk window, `pyvcp`/`gladevcp` panels are X clients);
//! 4. launches the machine: [`Launcher::Stock`] is LinuxCNC's own `linuxcnc -r INI` (its `rtapi_app`
//!    as the realtime master); [`Launcher::Rtapi`] is `<rtapi> linuxcnc -r INI` (issue 24: rtapi as
//!    the master, LinuxCNC's hal_lib, motion, milltask unchanged). `-r` keeps LinuxCNC's messages on
//!    its stdout and stderr, which go to `linuxcnc.log` in the run's directory;
//! 5. `drive.py` does estop reset, machine on, homes all joints, runs each program in AUTO mode and
//!    waits for it to end, while a thread drains the sampler FIFO (`hal.stream`, Python `repr` of the
//!    doubles: exact); then it writes `samples.txt`, `result.json` (stages with their times, errors
//!    from the error channel, final `actual_position` and joint positions) and exits, which makes
//!    LinuxCNC shut down. A stage past its deadline fails the run and `result.json` names the stage.
//!
//! # One LinuxCNC per machine, and cleaning up
//!
//! LinuxCNC's HAL, RTAPI and NML live in fixed SysV keys, and `linuxcnc` itself keeps
//! `/tmp/linuxcnc.lock`: every run holds tests/common/linuxcnc.rs's [`SessionLock`] (the one lock all
//! LinuxCNC sessions of this repository take) and waits for any `rtapi_app` to be gone first. Whatever
//! happens, the run then ends everything it started: the process group of the launch (SIGTERM, then
//! SIGKILL, by pid), the X server (by pid), the SysV shared-memory segments and semaphore sets that
//! appeared during the run owned or created by `nobody` (the setuid-root `rtapi_app` creates them as
//! root and hands them to the real user) and no longer attached (by id, never by key or `ipcrm -a`), and the
//! `/tmp/linuxcnc.lock` and `/tmp/linuxcnc.{debug,print}.*` files that appeared during the run. The
//! socket (`$HOME/.rtapi_fifo`) lives in the run's directory, which is removed when the run
//! succeeded and kept (its path in the error) when it did not.
//!
//! # Comparing trajectories
//!
//! Two runs never start moving at the same period: the display issues each command at a wall-clock
//! time, and a `G4` dwell is timed by milltask's wall clock (`EMC_TRAJ_DELAY` waits on `etime()`), not
//! in periods. Once a motion has started, though, the trajectory planner and the homing state machine
//! are deterministic in the period (two stock runs are bit-for-bit equal, see
//! tests/linuxcnc_machine.rs). So a trajectory is cut into **moves**: a *moving period* is a sample in
//! which some joint's `pos-fb` differs from the sample before it; a move runs from a moving period to
//! the last moving period before a standstill of at least [`MIN_REST`] periods (a shorter standstill —
//! an exact-stop corner — stays inside the move and is compared). [`compare`] requires the same number
//! of moves, each with the same phase, and each move equal period by period once aligned on its first
//! moving period, from the rest sample before it to the rest sample after it — exactly, every bit
//! (`f64::to_bits`; two stock runs agree to the bit, so there is no tolerance to justify). The rest
//! lengths between moves are wall-clock and are reported, not compared. The final positions
//! (`result.json`) must be equal too.

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::linuxcnc::{rtapi_app_running, SessionLock};

/// LinuxCNC's examples: the sample configs and the G-code their symlinks point at.
pub(crate) const EXAMPLES: &str = "/usr/share/doc/linuxcnc/examples";
/// The sim configs, relative to the copied examples tree.
pub(crate) const SIM: &str = "sample-configs/sim";
/// The headless display.
const DRIVE_PY: &str = include_str!("lcnc/drive.py");
/// A standstill at least this many periods long separates two moves (module docs).
pub(crate) const MIN_REST: usize = 20;
/// `linuxcnc`'s own lock file (it refuses, or asks, when it exists).
const LINUXCNC_LOCK: &str = "/tmp/linuxcnc.lock";

/// Who is the realtime master of the run.
#[derive(Clone, Debug)]
pub(crate) enum Launcher {
    /// LinuxCNC's own `linuxcnc` script, its `rtapi_app` the master.
    Stock,
    /// The same with `LINUXCNC_FORCE_REALTIME=1`: 2.9's `rtapi_is_realtime` takes it in place of a
    /// PREEMPT_RT kernel, so its setuid-root `rtapi_app` runs its threads SCHED_FIFO on this kernel
    /// (benches/linuxcnc_servo.rs: FIFO against FIFO).
    StockRealtime,
    /// `<path> linuxcnc [OPTIONS] INI`: rtapi as the master (issue 24).
    Rtapi(PathBuf),
    /// LinuxCNC's own `linuxcnc` script with this master (a copy with its file capabilities) bound
    /// over `/usr/bin/rtapi_app` in a private mount namespace: what `rtapi divert on` makes of the
    /// machine (issue 47). Root only.
    Diverted(PathBuf),
}

impl Launcher {
    /// The command that starts the machine, before its options and the INI.
    fn program(&self) -> Vec<String> {
        match self {
            Launcher::Stock | Launcher::StockRealtime | Launcher::Diverted(_) => {
                vec!["linuxcnc".into()]
            }
            Launcher::Rtapi(p) => vec![p.display().to_string(), "linuxcnc".into()],
        }
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Launcher::Stock => write!(f, "stock LinuxCNC (rtapi_app)"),
            Launcher::StockRealtime => {
                write!(f, "stock LinuxCNC (rtapi_app, LINUXCNC_FORCE_REALTIME=1)")
            }
            Launcher::Rtapi(p) => write!(f, "rtapi linuxcnc ({})", p.display()),
            Launcher::Diverted(p) => write!(f, "linuxcnc, rtapi_app diverted to {}", p.display()),
        }
    }
}

/// A G-code program the display runs in AUTO mode.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub name: String,
    pub gcode: String,
}

impl Program {
    pub(crate) fn new(name: &str, gcode: &str) -> Program {
        Program {
            name: name.into(),
            gcode: gcode.into(),
        }
    }
}

/// What the sampler records each servo period (the phase column is added after these).
#[derive(Clone, Debug)]
pub(crate) enum Sampling {
    /// Nothing: no sampler is loaded.
    None,
    /// `joint.N.pos-fb` of every joint of `[KINS]JOINTS`.
    Joints,
    /// These pins, `f` (float) or `s` (s32) each, and more HAL lines before them (a component to load).
    Pins {
        hal: Vec<String>,
        pins: Vec<(String, char)>,
    },
}

/// One machine to run: a sample config and what the display does with it.
#[derive(Clone, Debug)]
pub(crate) struct Machine {
    /// Names the run's directory.
    pub name: String,
    /// The INI, relative to the examples tree (`sample-configs/sim/axis/axis.ini`).
    pub ini: String,
    /// Run in AUTO mode in this order, after homing.
    pub programs: Vec<Program>,
    pub sampling: Sampling,
    /// Only estop reset and machine on, then exit (the config survey).
    pub up_only: bool,
    /// Home all joints (after machine on).
    pub home: bool,
    /// After the programs, sample this long before exiting (the benchmark's measuring time).
    pub hold_seconds: f64,
    /// Each stage's deadline in `drive.py` (generous: only a hang should reach it).
    pub stage_seconds: f64,
    /// Samples recorded after the last program ended (so its last move's end is in them).
    pub tail_periods: usize,
    /// The sampler FIFO's depth (samples; the display drains it every few ms).
    pub depth: usize,
    /// Start an X server for the config's X clients.
    pub x_server: bool,
    /// Keep the run's directory when the run fails (its path is in the error).
    pub keep_failed: bool,
    /// The display hangs once the machine is on (the cleanup's test: the run is killed at `deadline`).
    pub hang: bool,
    /// Kill the run after this long; `None`: every stage's deadline plus 30 s.
    pub deadline: Option<Duration>,
    /// A config directory of our own (`config/NAME`) copied into the examples tree as
    /// `examples/NAME` (then `ini` is relative to the tree: `NAME/NAME.ini`).
    pub config_dir: Option<PathBuf>,
    /// `(section, key, value)`: INI values replaced before the run (the board's address).
    pub ini_set: Vec<(String, String, String)>,
    /// Launch inside this network namespace (`ip netns exec NAME …`: a Mesa card's network), in
    /// IPC and PID namespaces of the run's own (`in_namespaces`).
    pub netns: Option<String>,
    /// After homing, the display waits for the machine to go to E-stop (the test stops the
    /// master; `drive.py` says it is ready in `estop-armed`), then clears this pin (the card's
    /// `watchdog.has_bit`, through `estop_recovery_signal`), resets the E-stop, turns the machine
    /// on and goes on with the programs.
    pub estop_recovery: Option<String>,
    /// The signal `estop_recovery`'s pin is on (cleared with `halcmd sets SIGNAL 0`).
    pub estop_recovery_signal: Option<String>,
}

impl Machine {
    /// The sim/axis config (`axis.ini`, three joints, trivkins), homed, joints sampled.
    pub(crate) fn sim_axis(name: &str, programs: Vec<Program>) -> Machine {
        Machine {
            name: name.into(),
            ini: format!("{SIM}/axis/axis.ini"),
            programs,
            sampling: Sampling::Joints,
            up_only: false,
            home: true,
            hold_seconds: 0.0,
            stage_seconds: 120.0,
            tail_periods: 200,
            depth: 200_000,
            x_server: true,
            keep_failed: true,
            hang: false,
            deadline: None,
            config_dir: None,
            ini_set: Vec::new(),
            netns: None,
            estop_recovery: None,
            estop_recovery_signal: None,
        }
    }

    /// A config brought up only (estop reset, machine on), nothing sampled: the survey.
    pub(crate) fn up_only(name: &str, ini: &str) -> Machine {
        Machine {
            name: name.into(),
            ini: ini.into(),
            programs: Vec::new(),
            sampling: Sampling::None,
            up_only: true,
            home: false,
            hold_seconds: 0.0,
            stage_seconds: 60.0,
            tail_periods: 0,
            depth: 0,
            x_server: true,
            keep_failed: false,
            hang: false,
            deadline: None,
            config_dir: None,
            ini_set: Vec::new(),
            netns: None,
            estop_recovery: None,
            estop_recovery_signal: None,
        }
    }
}

/// One sampled servo period: the sampled values (s32 columns as exact f64) and the phase.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Sample {
    pub values: Vec<f64>,
    pub phase: i32,
}

/// A finished run.
#[derive(Debug)]
pub(crate) struct Run {
    pub launcher: String,
    /// `drive.py`'s `result.json`.
    pub result: serde_json::Value,
    pub samples: Vec<Sample>,
    /// Wall time from launch to the end of LinuxCNC's shutdown.
    pub seconds: f64,
    /// LinuxCNC's stdout and stderr, interleaved.
    pub log: String,
    /// What [`run`] found while it ran ([`Machine::hold_seconds`]): the servo thread's scheduling.
    pub servo_thread: Option<ThreadInfo>,
    /// Processes of the run still alive after the launch ended, which the cleanup ended.
    pub ended_after: Vec<String>,
}

impl Run {
    /// `result.json`'s `final.<key>` as numbers.
    pub(crate) fn final_position(&self, key: &str) -> Vec<f64> {
        self.result["final"][key]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default()
    }

    /// The time `drive.py` reports for a stage.
    pub(crate) fn stage_seconds(&self, stage: &str) -> Option<f64> {
        self.result["stages"]
            .as_array()?
            .iter()
            .find(|s| s["stage"] == stage)?["seconds"]
            .as_f64()
    }
}

/// Why a run failed: what happened, the stage it got stuck in, LinuxCNC's output.
#[derive(Debug)]
pub(crate) struct RunError {
    pub what: String,
    pub dir: PathBuf,
    pub log: String,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tail: Vec<&str> = self.log.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let kept = if self.dir.exists() {
            format!(" (run directory kept: {})", self.dir.display())
        } else {
            String::new()
        };
        write!(
            f,
            "{}{kept}\n--- last lines of LinuxCNC's output ---\n{}",
            self.what,
            tail.join("\n")
        )
    }
}

impl RunError {
    /// One line: what failed, and the first line of LinuxCNC's output that says why.
    pub(crate) fn reason(&self) -> String {
        let noise = [
            "Note: Using POSIX",
            "LinuxCNC terminated with an error",
            "linuxcnc_debug.txt",
            "linuxcnc_print.txt",
            "dmesg",
        ];
        let why = self.log.lines().map(str::trim).find(|l| {
            let low = l.to_lowercase();
            (low.contains("error")
                || low.contains("failed")
                || low.contains("not found")
                || low.contains("no such")
                || low.contains("can't")
                || low.contains("cannot")
                || low.contains("traceback"))
                && !noise.iter().any(|n| l.contains(n))
        });
        let what = self.what.lines().next().unwrap_or("").to_string();
        match why {
            Some(w) if !what.contains(w) => format!("{what} — {w}"),
            _ => what,
        }
    }
}

/// What is missing to run LinuxCNC machines here (`None`: nothing). The tests skip with it.
pub(crate) fn missing_prerequisite(x_server: bool) -> Option<String> {
    if !Path::new("/usr/bin/linuxcnc").exists() {
        return Some("LinuxCNC 2.9 (`linuxcnc`, Debian linuxcnc-uspace) is not installed".into());
    }
    if !Path::new(EXAMPLES).join(SIM).is_dir() {
        return Some(format!(
            "LinuxCNC's sample configs are missing ({EXAMPLES}/{SIM})"
        ));
    }
    let py = Command::new("/usr/bin/python3")
        .args(["-c", "import linuxcnc, hal"])
        .output();
    if !py.map(|o| o.status.success()).unwrap_or(false) {
        return Some("/usr/bin/python3 cannot import LinuxCNC's `linuxcnc` and `hal`".into());
    }
    if x_server && which("Xvfb").is_none() {
        return Some("Xvfb is not installed (Debian xvfb): the sim configs have X clients".into());
    }
    if super::is_root() {
        let ok = Command::new("runuser")
            .args(["-u", "nobody", "--", "true"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Some("we are root and `runuser -u nobody` does not work".into());
        }
    }
    None
}

/// Whether LinuxCNC machines (with an X server) can run here; if not, says so for `test` (a test
/// file's name: `SKIPPED: <test>: <why>`, a failure under CI) and returns false.
pub(crate) fn ready(test: &str) -> bool {
    match missing_prerequisite(true) {
        None => true,
        Some(why) => {
            super::skip(test, &why, super::Prereq::Ci);
            false
        }
    }
}

pub(crate) fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(program))
            .find(|f| f.is_file())
    })
}

/// A copy of `rtapi` and its `rtapi-lcnc-master` (beside it) in `dir`, side by side, the master
/// with the file capabilities `caps` (`setcap` syntax): rtapi's master with the privileges README
/// tells an ordinary user to give, for LinuxCNC's user (`nobody` here). Returns the copied `rtapi`.
pub(crate) fn master_with_capabilities(rtapi: &Path, dir: &Path, caps: &str) -> PathBuf {
    let master = rtapi.with_file_name("rtapi-lcnc-master");
    for (from, name) in [(rtapi, "rtapi"), (master.as_path(), "rtapi-lcnc-master")] {
        let to = dir.join(name);
        let _ = fs::remove_file(&to);
        fs::copy(from, &to)
            .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
    }
    let o = Command::new("setcap")
        .arg(caps)
        .arg(dir.join("rtapi-lcnc-master"))
        .output()
        .expect("setcap (Debian libcap2-bin)");
    assert!(
        o.status.success(),
        "setcap: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    dir.join("rtapi")
}

/// The number of joints, `[KINS]JOINTS` (the first one).
pub(crate) fn ini_value(ini: &str, section: &str, key: &str) -> Option<String> {
    let mut current = String::new();
    for line in ini.lines() {
        let l = line.trim();
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            current = s.trim().to_string();
        } else if current == section {
            if let Some((k, v)) = l.split_once('=') {
                if k.trim() == key {
                    return Some(v.trim().to_string());
                }
            }
        }
    }
    None
}

/// The INI with its `#INCLUDE file` lines replaced by the files, as `linuxcnc` expands them before
/// it reads the INI: one level (an included file's own `#INCLUDE` stays a comment), the first word
/// exactly `#INCLUDE`, the file relative to the INI's directory; an `#INCLUDE` without a name or of a
/// file it cannot read becomes a comment saying so (linuxcnc prints that and goes on).
pub(crate) fn expand_includes(ini: &str, dir: &Path) -> String {
    let mut out = String::new();
    for line in ini.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#INCLUDE") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let name = words.collect::<Vec<_>>().join(" ");
        match fs::read_to_string(dir.join(&name)) {
            Ok(text) if !name.is_empty() => {
                out.push_str(&text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            _ => out.push_str(&format!("# (#INCLUDE '{name}': no such file, skipped)\n")),
        }
    }
    out
}

/// The INI with `[section]key` set to `value` (its first occurrence); an error when it has none.
pub(crate) fn set_ini_value(
    ini: &str,
    section: &str,
    key: &str,
    value: &str,
) -> Result<String, String> {
    let mut current = String::new();
    let mut done = false;
    let mut out = String::new();
    for line in ini.lines() {
        let l = line.trim();
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            current = s.trim().to_string();
        } else if !done && current == section {
            if let Some((k, _)) = l.split_once('=') {
                if k.trim() == key {
                    out.push_str(&format!("{key} = {value}\n"));
                    done = true;
                    continue;
                }
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    if done {
        Ok(out)
    } else {
        Err(format!("the INI has no [{section}]{key}"))
    }
}

/// The INI with `[DISPLAY]DISPLAY` set to `display` and `halfile` added after the `[HAL]` section's
/// last `HALFILE` (or at the section's end). Errors say what the INI lacks.
pub(crate) fn rewrite_ini(
    ini: &str,
    display: &Path,
    halfile: Option<&Path>,
) -> Result<String, String> {
    let lines: Vec<&str> = ini.lines().collect();
    let section_of = |i: usize| -> String {
        lines[..=i]
            .iter()
            .rev()
            .find_map(|l| {
                let l = l.trim();
                l.strip_prefix('[')
                    .and_then(|s| s.strip_suffix(']'))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_default()
    };
    let key_of = |l: &str| l.split_once('=').map(|(k, _)| k.trim().to_string());
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 2);
    let mut display_done = false;
    // Where the HALFILE goes: after the last HALFILE of [HAL], else after the [HAL] header's section.
    let hal_at = (0..lines.len())
        .rev()
        .find(|&i| section_of(i) == "HAL" && key_of(lines[i]).as_deref() == Some("HALFILE"))
        .or_else(|| {
            (0..lines.len())
                .rev()
                .find(|&i| section_of(i) == "HAL" && !lines[i].trim().is_empty())
        });
    for (i, l) in lines.iter().enumerate() {
        if section_of(i) == "DISPLAY" && key_of(l).as_deref() == Some("DISPLAY") && !display_done {
            out.push(format!("DISPLAY = {}", display.display()));
            display_done = true;
        } else {
            out.push(l.to_string());
        }
        if let (Some(h), Some(at)) = (halfile, hal_at) {
            if i == at {
                out.push(format!("HALFILE = {}", h.display()));
            }
        }
    }
    if !display_done {
        return Err("the INI has no [DISPLAY]DISPLAY".into());
    }
    if halfile.is_some() && hal_at.is_none() {
        return Err("the INI has no [HAL] section to add the sampler's HALFILE to".into());
    }
    Ok(out.join("\n") + "\n")
}

/// The extra HAL file: the sampler on the sampled pins, its function last in the servo thread.
fn sampler_hal(machine: &Machine, joints: usize) -> Option<(String, String)> {
    let (hal, pins): (Vec<String>, Vec<(String, char)>) = match &machine.sampling {
        Sampling::None => return None,
        Sampling::Joints => (
            Vec::new(),
            (0..joints)
                .map(|j| (format!("joint.{j}.pos-fb"), 'f'))
                .collect(),
        ),
        Sampling::Pins { hal, pins } => (hal.clone(), pins.clone()),
    };
    let cfg: String = pins.iter().map(|p| p.1).chain(['s']).collect();
    let mut s = String::new();
    let _ = writeln!(s, "# added by tests/common/lcnc_machine.rs");
    for l in hal {
        let _ = writeln!(s, "{l}");
    }
    let _ = writeln!(s, "loadrt sampler depth={} cfg={cfg}", machine.depth);
    for (i, (pin, _)) in pins.iter().enumerate() {
        let _ = writeln!(s, "net lcref-{i} {pin} => sampler.0.pin.{i}");
    }
    let _ = writeln!(s, "addf sampler.0 servo-thread");
    Some((s, cfg))
}

/// Our uid for LinuxCNC: `nobody` when root, else ourselves.
fn run_uid() -> u32 {
    if super::is_root() {
        nix::unistd::User::from_name("nobody")
            .ok()
            .flatten()
            .map(|u| u.uid.as_raw())
            .unwrap_or(65534)
    } else {
        nix::unistd::getuid().as_raw()
    }
}

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs `machine` under `launcher` (module docs); cleans up whatever happens.
pub(crate) fn run(launcher: &Launcher, machine: &Machine) -> Result<Run, RunError> {
    let r = run_kept(launcher, machine);
    if let Err(e) = &r {
        if !machine.keep_failed {
            let _ = fs::remove_dir_all(&e.dir);
        }
    }
    r
}

fn run_kept(launcher: &Launcher, machine: &Machine) -> Result<Run, RunError> {
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = PathBuf::from(format!(
        "/tmp/rtapi-lcref-{}-{}-{n}",
        std::process::id(),
        machine.name
    ));
    let fail = |what: String, log: String| RunError {
        what,
        dir: dir.clone(),
        log,
    };
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)
        .map_err(|e| fail(format!("mkdir {}: {e}", dir.display()), "".into()))?;
    let copy = Command::new("cp")
        .arg("-a")
        .arg(EXAMPLES)
        .arg(dir.join("examples"))
        .status();
    if !copy.map(|s| s.success()).unwrap_or(false) {
        return Err(fail(format!("cannot copy {EXAMPLES}"), "".into()));
    }
    if let Some(cfg) = &machine.config_dir {
        let copy = Command::new("cp")
            .arg("-a")
            .arg(cfg)
            .arg(dir.join("examples"))
            .status();
        if !copy.map(|s| s.success()).unwrap_or(false) {
            return Err(fail(format!("cannot copy {}", cfg.display()), "".into()));
        }
    }
    let ok = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(&dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Err(fail(
            "chmod -R a+rwX of the run directory failed".into(),
            "".into(),
        ));
    }
    // The run directory is LinuxCNC's HOME, where the master makes its socket: the master makes
    // it only in a directory that its user owns and others cannot write (README's trust model).
    std::os::unix::fs::chown(&dir, Some(run_uid()), None)
        .and_then(|()| fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)))
        .map_err(|e| {
            fail(
                format!("giving {} to uid {}: {e}", dir.display(), run_uid()),
                "".into(),
            )
        })?;
    let ini_path = dir.join("examples").join(&machine.ini);
    let mut ini_text = fs::read_to_string(&ini_path)
        .map(|t| expand_includes(&t, ini_path.parent().unwrap()))
        .map_err(|e| fail(format!("{}: {e}", ini_path.display()), "".into()))?;
    for (section, key, value) in &machine.ini_set {
        ini_text = set_ini_value(&ini_text, section, key, value)
            .map_err(|e| fail(format!("{}: {e}", ini_path.display()), "".into()))?;
    }
    let joints: usize = ini_value(&ini_text, "KINS", "JOINTS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let drive = dir.join("drive.py");
    write_file(&drive, DRIVE_PY, 0o755);
    let sampler = sampler_hal(machine, joints);
    let hal_path = dir.join("lcref.hal");
    if let Some((hal, _)) = &sampler {
        write_file(&hal_path, hal, 0o644);
    }
    let new_ini = rewrite_ini(
        &ini_text,
        &drive,
        sampler.as_ref().map(|_| hal_path.as_path()),
    )
    .map_err(|e| fail(format!("{}: {e}", ini_path.display()), "".into()))?;
    write_file(&ini_path, &new_ini, 0o666);
    let mut programs = Vec::new();
    for p in &machine.programs {
        let path = dir.join(format!("{}.ngc", p.name));
        write_file(&path, &p.gcode, 0o644);
        programs.push(serde_json::json!({"name": p.name, "path": path}));
    }
    let samples_path = dir.join("samples.txt");
    let result_path = dir.join("result.json");
    let job = serde_json::json!({
        "joints": joints,
        "stage_seconds": machine.stage_seconds,
        "sampler_cfg": sampler.as_ref().map(|s| s.1.clone()),
        "phase_pin": sampler.as_ref().map(|s| format!("sampler.0.pin.{}", s.1.len() - 1)),
        "programs": programs,
        "tail_periods": machine.tail_periods,
        "hold_seconds": machine.hold_seconds,
        "up_only": machine.up_only,
        "home": machine.home,
        "hang": machine.hang,
        "estop_recovery": machine.estop_recovery,
        "estop_recovery_signal": machine.estop_recovery_signal,
        "estop_armed": dir.join("estop-armed"),
        "samples": samples_path,
        "holding": dir.join("holding"),
        "result": result_path,
    });
    write_file(
        &ini_path.parent().unwrap().join("job.json"),
        &job.to_string(),
        0o644,
    );

    let _lock = SessionLock::take();
    // In namespaces of its own (`netns`), another session's rtapi_app is no concern of the run's.
    let alone = machine.netns.is_some();
    for _ in 0..200 {
        if alone || !rtapi_app_running() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if !alone && rtapi_app_running() {
        return Err(fail(
            "another LinuxCNC session (an rtapi_app) is still running after 50 s; not starting"
                .into(),
            "".into(),
        ));
    }
    if Path::new(LINUXCNC_LOCK).exists() {
        return Err(fail(
            format!(
                "{LINUXCNC_LOCK} exists: a LinuxCNC session runs outside the test lock, or a killed \
                 one left it (remove it by hand once no LinuxCNC runs)"
            ),
            "".into(),
        ));
    }
    let mut session = Session::new(run_uid(), &dir);
    let x = if machine.x_server {
        match XServer::start() {
            Ok(x) => Some(x),
            Err(e) => return Err(fail(e, "".into())),
        }
    } else {
        None
    };
    let log_path = dir.join("linuxcnc.log");
    let log_file = fs::File::create(&log_path).unwrap();
    let forced = match launcher {
        Launcher::StockRealtime => Some(ForcedRealtime::new(&dir).map_err(|e| fail(e, "".into()))?),
        _ => None,
    };
    let mut cmd = match (&forced, &machine.netns) {
        (Some(f), Some(ns)) => {
            let inner = f.command();
            let mut c = in_namespaces(ns);
            c.arg(inner.get_program()).args(inner.get_args());
            c
        }
        (Some(f), None) => f.command(),
        (None, Some(ns)) => {
            let mut c = in_namespaces(ns);
            c.arg(if super::is_root() { "runuser" } else { "env" });
            c
        }
        (None, None) if matches!(launcher, Launcher::Diverted(_)) => {
            let Launcher::Diverted(master) = launcher else {
                unreachable!()
            };
            if !super::is_root() {
                return Err(fail(
                    "the diverted launcher needs root (a mount namespace)".into(),
                    "".into(),
                ));
            }
            let mut c = Command::new("unshare");
            c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                .arg(format!(
                    "mount --bind '{}' /usr/bin/rtapi_app && exec \"$@\"",
                    master.display()
                ))
                .args(["sh", "runuser"]);
            c
        }
        (None, None) if super::is_root() => Command::new("runuser"),
        (None, None) => Command::new("env"),
    };
    if super::is_root() {
        cmd.args(["-u", "nobody", "--", "env"]);
    }
    // env's options before its assignments (after one, `-u` would be taken for the program).
    match &x {
        Some(x) => cmd.arg(format!("DISPLAY=:{}", x.display)),
        None => cmd.arg("-u").arg("DISPLAY"),
    };
    cmd.arg(format!("HOME={}", dir.display()));
    if forced.is_some() {
        cmd.arg("LINUXCNC_FORCE_REALTIME=1");
    }
    // stdin a terminal: `linuxcnc` asks on the terminal instead of in a Tk dialog on the X display
    // (its error report after a failed start), and nobody is there to answer a dialog. The master
    // is kept open and never written: a read from it would wait (no LinuxCNC program reads it).
    let tty =
        nix::pty::openpty(None, None).map_err(|e| fail(format!("openpty: {e}"), "".into()))?;
    cmd.args(launcher.program())
        .arg("-r")
        .arg(&ini_path)
        .current_dir(&dir)
        .stdin(Stdio::from(tty.slave))
        .stdout(Stdio::from(log_file.try_clone().unwrap()))
        .stderr(Stdio::from(log_file))
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| fail(format!("cannot start {launcher}: {e}"), "".into()))?;
    session.pgid = Some(child.id() as i32);
    let stages = if machine.up_only {
        3
    } else {
        4 + machine.programs.len()
    };
    let deadline = machine.deadline.unwrap_or(Duration::from_secs_f64(
        machine.stage_seconds * stages as f64 + machine.hold_seconds + 30.0,
    ));
    let mut servo_thread = None;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if t0.elapsed() > deadline {
            break None;
        }
        if machine.hold_seconds > 0.0 && servo_thread.is_none() && phase_started(&dir) {
            servo_thread = find_servo_thread(Duration::from_secs(1));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let seconds = t0.elapsed().as_secs_f64();
    let (leftovers, ended_after) = session.clean_up(&mut child);
    drop(tty.master);
    drop(x);
    let log = fs::read_to_string(&log_path).unwrap_or_default();
    let Some(status) = status else {
        // The display may have done its part and LinuxCNC not shut down after it.
        let display = match fs::read_to_string(&result_path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        {
            Some(r) if r["ok"] == true => "; the display had finished and exited",
            Some(_) => "; the display had failed",
            None => "",
        };
        return Err(fail(
            format!(
                "{launcher}: {} did not end within {deadline:?} (killed){display}",
                machine.ini
            ),
            log,
        ));
    };
    let result: Option<serde_json::Value> = fs::read_to_string(&result_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let Some(result) = result else {
        return Err(fail(
            format!(
                "{launcher}: {} ended ({status}) after {seconds:.1} s without the display's \
                 result.json: the display never ran or crashed before its end (see the log)",
                machine.ini
            ),
            log,
        ));
    };
    if result["ok"] != true {
        return Err(fail(
            format!(
                "{launcher}: {}: {}",
                machine.ini,
                result["failure"].as_str().unwrap_or("drive.py failed")
            ),
            log,
        ));
    }
    if !leftovers.is_empty() {
        return Err(fail(
            format!(
                "{launcher}: cleaning up after the run: {}",
                leftovers.join("; ")
            ),
            log,
        ));
    }
    let samples = match &sampler {
        None => Vec::new(),
        Some((_, cfg)) => parse_samples(&samples_path, cfg).map_err(|e| fail(e, log.clone()))?,
    };
    let _ = fs::remove_dir_all(&dir);
    Ok(Run {
        launcher: launcher.to_string(),
        result,
        samples,
        seconds,
        log,
        servo_thread,
        ended_after,
    })
}

/// `ip netns exec NS unshare --ipc --pid --fork --mount-proc --`, the rest appended by the caller:
/// the machine in the card's network namespace, with LinuxCNC's fixed SysV keys in an IPC namespace
/// and its processes in a PID namespace of their own (LinuxCNC's scripts refuse to start while `ps`
/// shows any `rtapi_app`, another test's included). Its segments go with the IPC namespace.
fn in_namespaces(netns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", netns, "unshare"]).args([
        "--ipc",
        "--pid",
        "--fork",
        "--mount-proc",
        "--",
    ]);
    c
}

fn write_file(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Whether `drive.py` has started its hold phase (it says so in `holding`).
fn phase_started(dir: &Path) -> bool {
    dir.join("holding").exists()
}

fn parse_samples(path: &Path, cfg: &str) -> Result<Vec<Sample>, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let cols: Vec<char> = cfg.chars().collect();
    let mut out = Vec::new();
    for (k, line) in text.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != cols.len() {
            return Err(format!(
                "{}:{}: {} columns, the sampler has {}",
                path.display(),
                k + 1,
                words.len(),
                cols.len()
            ));
        }
        let mut values = Vec::with_capacity(cols.len() - 1);
        for (w, c) in words.iter().zip(&cols).take(cols.len() - 1) {
            let v = match c {
                'f' => w.parse::<f64>().ok(),
                _ => w.parse::<i64>().ok().map(|i| i as f64),
            };
            values.push(v.ok_or_else(|| format!("{}:{}: '{w}'", path.display(), k + 1))?);
        }
        let phase = words[cols.len() - 1]
            .parse()
            .map_err(|_| format!("{}:{}: phase '{line}'", path.display(), k + 1))?;
        out.push(Sample { values, phase });
    }
    Ok(out)
}

/// An X server of our own (`Xvfb -displayfd 1`: it picks a free display and prints its number).
/// What [`Launcher::StockRealtime`] adds: `LINUXCNC_FORCE_REALTIME=1` (2.9's override of its
/// PREEMPT_RT check; its `rtapi_app` is setuid root) and, in a private mount namespace, an
/// `/etc/ld.so.preload` (an overlay on `/etc`) naming `lcnc/rtprio_shim.c`, so that 2.9's
/// `setrlimit(RLIMIT_RTPRIO, unlimited)` does not fail where root lacks CAP_SYS_RESOURCE and send
/// it back to SCHED_OTHER. Root only. Its directory goes with it.
struct ForcedRealtime {
    dir: PathBuf,
}

impl ForcedRealtime {
    fn new(run_dir: &Path) -> Result<ForcedRealtime, String> {
        if !super::is_root() {
            return Err("the forced-realtime stock launcher needs root (a mount namespace)".into());
        }
        let dir = PathBuf::from(format!("{}-rt", run_dir.display()));
        let _ = fs::remove_dir_all(&dir);
        for d in ["upper", "work"] {
            fs::create_dir_all(dir.join(d)).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        }
        let f = ForcedRealtime { dir };
        let src = f.dir.join("rtprio_shim.c");
        let so = f.dir.join("rtprio_shim.so");
        fs::write(&src, include_str!("lcnc/rtprio_shim.c")).unwrap();
        let o = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&so)
            .arg(&src)
            .arg("-ldl")
            .output()
            .map_err(|e| format!("cc (to build lcnc/rtprio_shim.c): {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "cc lcnc/rtprio_shim.c: {}",
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        for p in [&f.dir, &so] {
            fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(
            f.dir.join("upper/ld.so.preload"),
            format!("{}\n", so.display()),
        )
        .unwrap();
        Ok(f)
    }

    /// `unshare` into a private mount namespace, the overlay on `/etc`, then the rest of the
    /// command line (appended by the caller) exec'd.
    fn command(&self) -> Command {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(format!(
                "mount -t overlay overlay -o lowerdir=/etc,upperdir={0}/upper,workdir={0}/work /etc \
                 && exec \"$@\"",
                self.dir.display()
            ))
            .args(["sh", "runuser"]);
        c
    }
}

impl Drop for ForcedRealtime {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

struct XServer {
    child: Child,
    display: u32,
}

impl XServer {
    fn start() -> Result<XServer, String> {
        let mut child = Command::new("Xvfb")
            .args([
                "-displayfd",
                "1",
                "-nolisten",
                "tcp",
                "-screen",
                "0",
                "1280x1024x24",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start Xvfb: {e}"))?;
        let mut line = String::new();
        let out = child.stdout.take().unwrap();
        let _ = BufReader::new(out).read_line(&mut line);
        match line.trim().parse() {
            Ok(display) => Ok(XServer { child, display }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("Xvfb did not say its display ('{}')", line.trim()))
            }
        }
    }
}

impl Drop for XServer {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of our own child, which we have not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One process: pid, comm, state, pgrp, session (`/proc/PID/stat`), real uid (`status`).
#[derive(Clone, Debug)]
pub(crate) struct Proc {
    pub pid: i32,
    pub comm: String,
    pub state: char,
    pub pgrp: i32,
    pub session: i32,
    pub uid: u32,
}

pub(crate) fn processes() -> Vec<Proc> {
    let mut out = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let (Some(a), Some(b)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let rest: Vec<&str> = stat[b + 1..].split_whitespace().collect();
        if rest.len() < 4 {
            continue;
        }
        let uid = fs::read_to_string(e.path().join("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|l| l.split_whitespace().next().and_then(|u| u.parse().ok()))
            })
            .unwrap_or(u32::MAX);
        out.push(Proc {
            pid,
            comm: stat[a + 1..b].to_string(),
            state: rest[0].chars().next().unwrap_or('?'),
            pgrp: rest[2].parse().unwrap_or(0),
            session: rest[3].parse().unwrap_or(0),
            uid,
        });
    }
    out
}

/// One SysV object of `/proc/sysvipc/{shm,sem}`: id, key, owner and creator uid, attach count.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Ipc {
    id: i32,
    key: i64,
    uid: u32,
    cuid: u32,
    nattch: u64,
}

fn sysv(kind: &str) -> Vec<Ipc> {
    let text = fs::read_to_string(format!("/proc/sysvipc/{kind}")).unwrap_or_default();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(ki), Some(ii), Some(ci)) = (
        col("key"),
        col(if kind == "shm" { "shmid" } else { "semid" }),
        col("cuid"),
    ) else {
        return Vec::new();
    };
    let ni = col("nattch");
    let ui = col("uid");
    lines
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            Some(Ipc {
                id: w.get(ii)?.parse().ok()?,
                key: w.get(ki)?.parse().ok()?,
                cuid: w.get(ci)?.parse().ok()?,
                uid: ui.and_then(|i| w.get(i)?.parse().ok()).unwrap_or(u32::MAX),
                nattch: ni.and_then(|i| w.get(i)?.parse().ok()).unwrap_or(0),
            })
        })
        .collect()
}

fn linuxcnc_tmp_files() -> BTreeSet<PathBuf> {
    fs::read_dir("/tmp")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap_or_default().to_string_lossy();
                    n.starts_with("linuxcnc.debug.") || n.starts_with("linuxcnc.print.")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What existed before the run, to clean up only what the run made.
struct Session {
    uid: u32,
    home: PathBuf,
    pgid: Option<i32>,
    shm_before: BTreeSet<i32>,
    sem_before: BTreeSet<i32>,
    files_before: BTreeSet<PathBuf>,
    started: SystemTime,
}

impl Session {
    fn new(uid: u32, home: &Path) -> Session {
        Session {
            uid,
            home: home.to_path_buf(),
            pgid: None,
            shm_before: sysv("shm").into_iter().map(|s| s.id).collect(),
            sem_before: sysv("sem").into_iter().map(|s| s.id).collect(),
            files_before: linuxcnc_tmp_files(),
            started: SystemTime::now(),
        }
    }

    /// The live processes of the run: the launch's process group, and whatever has the run's
    /// directory as `HOME` in its environment (the `rtapi_app` master puts itself in a session of its
    /// own and, setuid root, runs with real uid 0: only its environment says it is this run's).
    fn members(&self) -> Vec<Proc> {
        let Some(pgid) = self.pgid else {
            return Vec::new();
        };
        let home = format!("HOME={}", self.home.display());
        processes()
            .into_iter()
            .filter(|p| p.state != 'Z')
            .filter(|p| {
                p.pgrp == pgid
                    || fs::read(format!("/proc/{}/environ", p.pid))
                        .map(|env| env.split(|b| *b == 0).any(|e| e == home.as_bytes()))
                        .unwrap_or(false)
            })
            .collect()
    }

    /// Ends the run's processes and removes what the run made; returns what it could not clean,
    /// and the processes it had to end after the launch itself had ended (a config's delayed
    /// `[APPLICATIONS]` subshell outlives `linuxcnc`).
    fn clean_up(&mut self, child: &mut Child) -> (Vec<String>, Vec<String>) {
        let mut problems = Vec::new();
        let mut ended = Vec::new();
        let running = child.try_wait().ok().flatten().is_none();
        let members = self.members();
        if running || !members.is_empty() {
            if !running {
                ended = members
                    .iter()
                    .map(|p| format!("{} {}", p.pid, p.comm))
                    .collect();
            }
            for sig in [libc::SIGTERM, libc::SIGKILL] {
                for p in self.members() {
                    // SAFETY: kill(2) by pid of a process of this run (its group, or its HOME).
                    unsafe { libc::kill(p.pid, sig) };
                }
                if running {
                    // SAFETY: as above, our direct child.
                    unsafe { libc::kill(child.id() as i32, sig) };
                }
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(10) && !self.members().is_empty() {
                    let _ = child.try_wait();
                    std::thread::sleep(Duration::from_millis(50));
                }
                if self.members().is_empty() {
                    break;
                }
            }
        }
        let t = Instant::now();
        while child.try_wait().ok().flatten().is_none() {
            if t.elapsed() > Duration::from_secs(10) {
                problems.push(format!("the launch (pid {}) did not end", child.id()));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let left = self.members();
        if !left.is_empty() {
            problems.push(format!("could not end: {left:?}"));
        }
        // LinuxCNC processes of this user that left the process group (none should).
        let escaped: Vec<String> = processes()
            .into_iter()
            .filter(|p| {
                p.uid == self.uid
                    && p.state != 'Z'
                    && matches!(
                        p.comm.as_str(),
                        "rtapi_app" | "milltask" | "linuxcncsvr" | "io" | "iocontrol" | "halui"
                    )
            })
            .map(|p| format!("{} {} (pgrp {})", p.pid, p.comm, p.pgrp))
            .collect();
        if !escaped.is_empty() {
            problems.push(format!(
                "LinuxCNC processes outside the launch's group: {}",
                escaped.join(", ")
            ));
        }
        for (kind, before) in [("shm", &self.shm_before), ("sem", &self.sem_before)] {
            for obj in sysv(kind) {
                // The setuid-root rtapi_app creates its segments as root and gives them to the
                // real user: owner or creator is our LinuxCNC user.
                if before.contains(&obj.id) || (obj.cuid != self.uid && obj.uid != self.uid) {
                    continue;
                }
                if obj.nattch > 0 {
                    problems.push(format!(
                        "{kind} id {} (key {:#x}) still attached, left alone",
                        obj.id, obj.key
                    ));
                    continue;
                }
                // SAFETY: IPC_RMID by id of an object our run created (not there before, made by
                // our LinuxCNC user, nothing attached); no buffer is passed.
                let r = unsafe {
                    if kind == "shm" {
                        libc::shmctl(obj.id, libc::IPC_RMID, std::ptr::null_mut())
                    } else {
                        libc::semctl(obj.id, 0, libc::IPC_RMID)
                    }
                };
                if r != 0 {
                    problems.push(format!(
                        "cannot remove {kind} id {}: {}",
                        obj.id,
                        std::io::Error::last_os_error()
                    ));
                }
            }
        }
        for f in linuxcnc_tmp_files().difference(&self.files_before) {
            let _ = fs::remove_file(f);
        }
        if let Ok(m) = fs::metadata(LINUXCNC_LOCK) {
            use std::os::unix::fs::MetadataExt;
            if m.uid() == self.uid && m.modified().map(|t| t >= self.started).unwrap_or(false) {
                let _ = fs::remove_file(LINUXCNC_LOCK);
            }
        }
        (problems, ended)
    }
}

/// The servo thread as found in `/proc` while the machine runs.
#[derive(Clone, Debug)]
pub(crate) struct ThreadInfo {
    pub pid: i32,
    pub tid: i32,
    pub process: String,
    /// The process's executable (`/proc/PID/exe`, read while it ran): a symbolic link's target,
    /// so a diverted `rtapi_app` shows as the program it points to.
    pub exe: Option<PathBuf>,
    pub thread: String,
    /// `SCHED_OTHER`, `SCHED_FIFO`, … (from `/proc/PID/task/TID/stat`).
    pub policy: String,
    pub rt_priority: u32,
    /// Wake-ups per second counted over the probe.
    pub wakeups_per_s: f64,
    /// The CPUs the thread may run on (`Cpus_allowed_list`).
    pub cpus: String,
    /// Whether its process holds `/dev/cpu_dma_latency` open (keeping the CPUs out of idle states
    /// with slow exits while it lives, as both runtimes try to).
    pub dma_latency_held: bool,
}

impl fmt::Display for ThreadInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} pid {} thread {} '{}': {} priority {}, CPUs {}, {:.0} wake-ups/s, cpu_dma_latency {}",
            self.process,
            self.pid,
            self.tid,
            self.thread,
            self.policy,
            self.rt_priority,
            self.cpus,
            self.wakeups_per_s,
            if self.dma_latency_held {
                "held"
            } else {
                "NOT held"
            }
        )
    }
}

impl ThreadInfo {
    /// Whether this looks like the servo thread of a `period_ns` thread — it woke at least a
    /// quarter of the period rate (a late thread catching up runs periods back to back without
    /// sleeping) — and, when `fifo`, runs SCHED_FIFO. The error says what it is instead.
    pub(crate) fn check(&self, fifo: bool, period_ns: f64) -> Result<(), String> {
        if fifo && self.policy != "SCHED_FIFO" {
            return Err(format!(
                "the servo thread was to run SCHED_FIFO; it runs {} ({self})",
                self.policy
            ));
        }
        if self.wakeups_per_s < 0.25e9 / period_ns {
            return Err(format!(
                "the busiest thread of {} woke {:.0}/s, not about {:.0}/s: not the servo thread",
                self.process,
                self.wakeups_per_s,
                1e9 / period_ns
            ));
        }
        Ok(())
    }
}

fn policy_name(p: u32) -> String {
    match p {
        0 => "SCHED_OTHER".into(),
        1 => "SCHED_FIFO".into(),
        2 => "SCHED_RR".into(),
        3 => "SCHED_BATCH".into(),
        5 => "SCHED_IDLE".into(),
        6 => "SCHED_DEADLINE".into(),
        n => format!("policy {n}"),
    }
}

/// The command name, scheduling policy (`SCHED_FIFO`, …) and real-time priority in
/// `/proc/WHO/stat`, `WHO` a `PID` or `PID/task/TID`; `None` once it is gone.
pub(crate) fn proc_sched(who: &str) -> Option<(String, String, u32)> {
    let stat = fs::read_to_string(format!("/proc/{who}/stat")).ok()?;
    let b_ = stat.rfind(')')?;
    let rest: Vec<&str> = stat[b_ + 1..].split_whitespace().collect();
    // Fields after comm start at field 3 (state): rt_priority is field 40, policy field 41.
    let rt_priority = rest.get(40 - 3)?.parse().ok()?;
    let policy = policy_name(rest.get(41 - 3)?.parse().ok()?);
    let comm = stat[stat.find('(')? + 1..b_].to_string();
    Some((comm, policy, rt_priority))
}

/// The process that loaded LinuxCNC's motion module (`motmod.so` mapped), and in it the thread that
/// wakes most often over `probe` (the servo thread: once a period): its scheduling policy.
pub(crate) fn find_servo_thread(probe: Duration) -> Option<ThreadInfo> {
    let host = processes().into_iter().find(|p| {
        fs::read_to_string(format!("/proc/{}/maps", p.pid))
            .map(|m| m.contains("/motmod.so"))
            .unwrap_or(false)
    })?;
    let switches = |pid: i32| -> Vec<(i32, u64)> {
        fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| {
                        let tid: i32 = e.file_name().to_string_lossy().parse().ok()?;
                        let s = fs::read_to_string(e.path().join("status")).ok()?;
                        let n = s
                            .lines()
                            .filter(|l| l.contains("ctxt_switches"))
                            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                            .sum();
                        Some((tid, n))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let a = switches(host.pid);
    std::thread::sleep(probe);
    let b = switches(host.pid);
    let (tid, delta) = b
        .iter()
        .filter_map(|(t, n)| Some((*t, n - a.iter().find(|(u, _)| u == t)?.1)))
        .max_by_key(|(_, d)| *d)?;
    let (thread, policy, rt_priority) = proc_sched(&format!("{}/task/{tid}", host.pid))?;
    let cpus = fs::read_to_string(format!("/proc/{}/task/{tid}/status", host.pid))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())?;
    let dma_latency_held = fs::read_dir(format!("/proc/{}/fd", host.pid))
        .map(|d| {
            d.flatten().any(|e| {
                fs::read_link(e.path()).is_ok_and(|t| t == Path::new("/dev/cpu_dma_latency"))
            })
        })
        .unwrap_or(false);
    Some(ThreadInfo {
        pid: host.pid,
        tid,
        exe: fs::read_link(format!("/proc/{}/exe", host.pid)).ok(),
        process: host.comm,
        thread,
        policy,
        rt_priority,
        wakeups_per_s: delta as f64 / probe.as_secs_f64(),
        cpus,
        dma_latency_held,
    })
}

/// A move: from its first moving sample to its last (module docs), and its phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Move {
    pub phase: i32,
    pub first: usize,
    pub last: usize,
}

impl Move {
    pub(crate) fn periods(&self) -> usize {
        self.last - self.first + 1
    }
}

/// The moves of a trajectory (module docs: a standstill of [`MIN_REST`] periods separates two).
pub(crate) fn moves(samples: &[Sample]) -> Vec<Move> {
    let mut out: Vec<Move> = Vec::new();
    let mut rest = 0usize;
    for k in 1..samples.len() {
        let moving = samples[k]
            .values
            .iter()
            .zip(&samples[k - 1].values)
            .any(|(a, b)| a.to_bits() != b.to_bits());
        if !moving {
            rest += 1;
            continue;
        }
        match out.last_mut() {
            Some(m) if rest < MIN_REST => m.last = k,
            _ => out.push(Move {
                phase: samples[k].phase,
                first: k,
                last: k,
            }),
        }
        rest = 0;
    }
    out
}

/// What two equal trajectories had in common.
#[derive(Debug)]
pub(crate) struct Agreement {
    pub moves: Vec<Move>,
    /// Periods compared (the moves and the rest sample on each side of each).
    pub periods: usize,
    /// Rests before each move, in periods: (a, b) — wall-clock, reported only.
    pub rests: Vec<(usize, usize)>,
}

/// Compares two runs' trajectories and final positions (module docs); the error says where they
/// first differ and shows the periods around it.
pub(crate) fn compare(a: &Run, b: &Run) -> Result<Agreement, String> {
    let ma = moves(&a.samples);
    let mb = moves(&b.samples);
    let names = |ms: &[Move]| {
        ms.iter()
            .map(|m| format!("phase {} at {} for {}", m.phase, m.first, m.periods()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if ma.is_empty() {
        return Err(format!(
            "{}: no move at all in {} samples",
            a.launcher,
            a.samples.len()
        ));
    }
    if ma.len() != mb.len() || ma.iter().zip(&mb).any(|(x, y)| x.phase != y.phase) {
        return Err(format!(
            "different moves:\n  {}: {}\n  {}: {}",
            a.launcher,
            names(&ma),
            b.launcher,
            names(&mb)
        ));
    }
    let mut periods = 0;
    let mut rests = Vec::new();
    let mut prev = (0usize, 0usize);
    for (i, (x, y)) in ma.iter().zip(&mb).enumerate() {
        rests.push((x.first - prev.0, y.first - prev.1));
        prev = (x.last, y.last);
        // From the rest sample before the move to the rest sample after it (when recorded).
        let len_a = (x.periods() + 2).min(a.samples.len() - (x.first - 1));
        let len_b = (y.periods() + 2).min(b.samples.len() - (y.first - 1));
        let len = len_a.min(len_b);
        let sa = &a.samples[x.first - 1..x.first - 1 + len];
        let sb = &b.samples[y.first - 1..y.first - 1 + len];
        let same = |p: &Sample, q: &Sample| {
            p.values.len() == q.values.len()
                && p.values
                    .iter()
                    .zip(&q.values)
                    .all(|(u, v)| u.to_bits() == v.to_bits())
        };
        let first_diff = (0..len).find(|&k| !same(&sa[k], &sb[k]));
        let diff_at = match first_diff {
            Some(k) => Some(k),
            None if x.periods() != y.periods() || len_a != len_b => Some(len),
            None => None,
        };
        if let Some(k) = diff_at {
            let mut msg = format!(
                "move {i} (phase {}) differs at period {k} after its first moving period - 1 \
                 ({}: move at sample {} for {} periods; {}: at sample {} for {} periods)\n",
                x.phase,
                a.launcher,
                x.first,
                x.periods(),
                b.launcher,
                y.first,
                y.periods()
            );
            for p in k.saturating_sub(3)..(k + 2) {
                let show = |s: &[Sample]| {
                    s.get(p)
                        .map(|s| format!("{:?}", s.values))
                        .unwrap_or_else(|| "(move over)".into())
                };
                let mark = if p == k {
                    "   <-- first difference"
                } else {
                    ""
                };
                let _ = writeln!(msg, "  period {p}: {} | {}{mark}", show(sa), show(sb));
            }
            return Err(msg);
        }
        periods += len;
    }
    for key in ["joint_actual_position", "actual_position"] {
        let (fa, fb) = (a.final_position(key), b.final_position(key));
        if fa.is_empty()
            || fa.len() != fb.len()
            || fa.iter().zip(&fb).any(|(u, v)| u.to_bits() != v.to_bits())
        {
            return Err(format!(
                "final {key} differs: {}: {fa:?}, {}: {fb:?}",
                a.launcher, b.launcher
            ));
        }
    }
    Ok(Agreement {
        moves: ma,
        periods,
        rests,
    })
}
