//! LinuxCNC's own servo-thread timing on a running sim/axis machine, stock `rtapi_app` against
//! `rtapi linuxcnc` (issue 24), side by side, idle and under `stress-ng --cpu 2`.
//!
//! ```text
//! cargo bench --bench linuxcnc_servo -- [--rtapi [PATH]] [--seconds N] [--load idle|stress|both]
//! ```
//!
//! What is measured: LinuxCNC's `timedelta` component, added *first* to the machine's `servo-thread`
//! (`addf timedelta.0 servo-thread 1`), sets `timedelta.0.out` to the time between this period's run
//! and the previous one (`rtapi_get_time`, ns); LinuxCNC's `sampler` records it every period
//! (tests/common/lcnc_machine.rs, its display holding the machine on, not homed, for `--seconds`).
//! Per period the error is |out − period|; the report gives its p50, p99 and max (µs), and *late
//! periods*: intervals longer than 1.5 periods (a run that came after the next one was due), and
//! *missed* periods: Σ round(interval / period) − 1 over those, the period boundaries that passed
//! without a run on time. 2.9's rtapi_app catches up late periods back to back (a long interval, then
//! short ones: the runs happen, late); a master that skips late periods has fewer runs (`periods`)
//! for the same hold — both count as missed.
//!
//! Before a number is printed the run checks it measured what it claims: the process that mapped
//! `motmod.so` has a thread that woke at least a quarter of the period rate during a one-second probe
//! of the hold, the most of its threads (the servo thread: a late thread catching up runs periods back
//! to back without sleeping, so a loaded machine shows fewer wake-ups than periods), and its scheduling policy and priority (`/proc/PID/task/TID/stat`) are printed with the
//! numbers. Stock runs twice: as 2.9 runs on a kernel it does not call realtime (SCHED_OTHER), and
//! with `LINUXCNC_FORCE_REALTIME=1`, 2.9's own override of that check (its `rtapi_app` is setuid
//! root) — plus, where root lacks CAP_SYS_RESOURCE (this VM), `lcnc/rtprio_shim.c` preloaded in a
//! private mount namespace, or 2.9 falls back to SCHED_OTHER when it cannot raise RLIMIT_RTPRIO —,
//! which must show SCHED_FIFO to count; so one ratio compares the runtimes under one policy. rtapi's
//! master gets README's file capabilities on a copy (LinuxCNC runs as `nobody`).
//! Ratios (rtapi ÷ each stock) are printed only when both sides' servo threads were verified; when
//! their policies differ the ratio line says so. Per load: stock, stock forced RT, rtapi, one run each.

// The tests' helper tree (tests/common/mod.rs and its submodules): a bench target lives outside
// `tests/`, so it names the tree's root by path (the one `#[path]` left; everything below it is found
// as in a test binary).
#[path = "../tests/common/mod.rs"]
mod common;

use common::lcnc_machine;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lcnc_machine::{run, Launcher, Machine, Sampling, ThreadInfo};

const PERIOD_NS: f64 = 1_000_000.0; // sim/axis's [EMCMOT]SERVO_PERIOD

struct Stats {
    periods: usize,
    p50: f64,
    p99: f64,
    max: f64,
    late: usize,
    missed: u64,
    thread: Option<ThreadInfo>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn measure(launcher: &Launcher, seconds: f64, label: &str) -> Result<Stats, String> {
    let mut m = Machine::up_only(
        &format!("bench-{label}"),
        "sample-configs/sim/axis/axis.ini",
    );
    m.up_only = false;
    m.home = false;
    m.hold_seconds = seconds;
    m.depth = 200_000;
    m.sampling = Sampling::Pins {
        hal: vec![
            "loadrt timedelta count=1".into(),
            "addf timedelta.0 servo-thread 1".into(),
        ],
        pins: vec![("timedelta.0.out".into(), 's')],
    };
    let r = run(launcher, &m).map_err(|e| e.to_string())?;
    // The hold phase is phase 2 (no programs); its first sample's interval may span the phase change.
    let mut err: Vec<f64> = r
        .samples
        .iter()
        .filter(|s| s.phase == 2)
        .skip(1)
        .map(|s| s.values[0])
        .filter(|v| *v > 0.0)
        .collect();
    if err.len() < (seconds * 500.0) as usize {
        return Err(format!(
            "{launcher}: only {} samples in {seconds} s of hold",
            err.len()
        ));
    }
    let late = err.iter().filter(|v| **v > 1.5 * PERIOD_NS).count();
    let missed: u64 = err
        .iter()
        .map(|v| ((v / PERIOD_NS).round() as u64).saturating_sub(1))
        .sum();
    for v in err.iter_mut() {
        *v = (*v - PERIOD_NS).abs() / 1000.0;
    }
    err.sort_by(|a, b| a.partial_cmp(b).unwrap());
    Ok(Stats {
        periods: err.len(),
        p50: percentile(&err, 0.5),
        p99: percentile(&err, 0.99),
        max: *err.last().unwrap(),
        late,
        missed,
        thread: r.servo_thread,
    })
}

fn stress(seconds: f64) -> Child {
    Command::new("stress-ng")
        .args([
            "--cpu",
            "2",
            "--timeout",
            &format!("{}s", seconds as u64 + 120),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("stress-ng (Debian stress-ng) is needed for --load stress")
}

fn end(mut c: Child) {
    // SAFETY: kill(2) of our own child by pid; stress-ng passes SIGTERM on to its workers.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let _ = c.wait();
}

/// The servo thread was found and, where the launcher promises SCHED_FIFO, runs it.
fn verified<'a>(l: &Launcher, s: &'a Stats) -> Result<&'a ThreadInfo, String> {
    let t = s
        .thread
        .as_ref()
        .ok_or("no process with motmod.so mapped was found during the hold")?;
    t.check(!matches!(l, Launcher::Stock), PERIOD_NS)
        .map_err(|e| format!("{l}: {e}"))?;
    Ok(t)
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut rtapi: Option<std::path::PathBuf> = None;
    let mut seconds = 30.0;
    let mut loads = vec!["idle", "stress"];
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rtapi" => {
                rtapi = Some(
                    std::env::args()
                        .skip_while(|x| x != "--rtapi")
                        .nth(1)
                        .filter(|p| !p.starts_with("--"))
                        .map(Into::into)
                        .unwrap_or_else(|| {
                            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                                .join("target/release/rtapi")
                        }),
                );
            }
            "--seconds" => {
                seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--seconds N")
            }
            "--load" => {
                loads = match args.next().as_deref() {
                    Some("idle") => vec!["idle"],
                    Some("stress") => vec!["stress"],
                    Some("both") => vec!["idle", "stress"],
                    other => panic!("--load idle|stress|both, not {other:?}"),
                }
            }
            _ => {}
        }
    }
    if let Some(why) = lcnc_machine::missing_prerequisite(true) {
        eprintln!("SKIPPED: linuxcnc_servo: {why}");
        return;
    }
    // Stock twice: as 2.9 runs on this kernel (SCHED_OTHER: it does not call it realtime) and
    // with LINUXCNC_FORCE_REALTIME=1 (SCHED_FIFO), so one ratio compares the runtimes under the
    // same policy.
    let mut launchers = vec![Launcher::Stock, Launcher::StockRealtime];
    if let Some(p) = &rtapi {
        launchers.push(Launcher::Rtapi(with_capabilities(p)));
    }
    println!(
        "LinuxCNC servo-thread timing, sim/axis (1 ms), {seconds} s per run, timedelta first in servo-thread"
    );
    println!(
        "{:<8} {:<28} {:>8} {:>9} {:>9} {:>9} {:>6} {:>7}  servo thread",
        "load", "master", "periods", "p50 µs", "p99 µs", "max µs", "late", "missed"
    );
    for load in loads {
        let mut results = Vec::new();
        for (i, l) in launchers.iter().enumerate() {
            let s = if load == "stress" {
                Some(stress(seconds))
            } else {
                None
            };
            if s.is_some() {
                std::thread::sleep(Duration::from_secs(1)); // the workers are up
            }
            let r = measure(l, seconds, &format!("{load}-{i}"));
            if let Some(s) = s {
                end(s);
            }
            match &r {
                Ok(st) => {
                    let thread = match verified(l, st) {
                        Ok(t) => t.to_string(),
                        Err(e) => format!("NOT VERIFIED: {e}"),
                    };
                    println!(
                        "{load:<8} {:<28} {:>8} {:>9.1} {:>9.1} {:>9.1} {:>6} {:>7}  {thread}",
                        label(l),
                        st.periods,
                        st.p50,
                        st.p99,
                        st.max,
                        st.late,
                        st.missed
                    );
                }
                Err(e) => println!("{load:<8} {l}: FAILED: {e}"),
            }
            results.push((l, r));
        }
        let Some((rl, Ok(b))) = results
            .iter()
            .find(|(l, _)| matches!(l, Launcher::Rtapi(_)))
        else {
            continue;
        };
        for (sl, a) in results
            .iter()
            .filter(|(l, _)| !matches!(l, Launcher::Rtapi(_)))
        {
            let Ok(a) = a else { continue };
            match (verified(sl, a), verified(rl, b)) {
                (Ok(ta), Ok(tb)) => {
                    let ratio = |x: f64, y: f64| {
                        if x > 0.0 {
                            format!("{:.2}", y / x)
                        } else {
                            "-".into()
                        }
                    };
                    println!(
                        "{load:<8} {:<28} {:>8} {:>9} {:>9} {:>9} {:>6} {:>7}",
                        format!("rtapi / {}", label(sl)),
                        "",
                        ratio(a.p50, b.p50),
                        ratio(a.p99, b.p99),
                        ratio(a.max, b.max),
                        format!("{}/{}", b.late, a.late),
                        format!("{}/{}", b.missed, a.missed)
                    );
                    if ta.policy != tb.policy || ta.rt_priority != tb.rt_priority {
                        println!(
                            "         (unlike scheduling: stock {} {}, rtapi {} {} — this ratio compares the two as they run here, policy included)",
                            ta.policy, ta.rt_priority, tb.policy, tb.rt_priority
                        );
                    }
                }
                (ea, eb) => println!(
                    "{load:<8} no ratio rtapi / {}: the servo thread was not verified ({:?} / {:?})",
                    label(sl),
                    ea.err(),
                    eb.err()
                ),
            }
        }
    }
}

/// LinuxCNC runs as `nobody` here (its `rtapi_app` refuses root), so rtapi's master gets its
/// privileges as README tells an ordinary user: a copy of `rtapi` and `rtapi-lcnc-master` side by
/// side, the master with `cap_sys_nice,cap_ipc_lock=ep`. Not root: the binaries as they are.
fn with_capabilities(rtapi: &std::path::Path) -> std::path::PathBuf {
    if !common::is_root() {
        return rtapi.to_path_buf();
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-lcnc-caps");
    std::fs::create_dir_all(&dir).unwrap();
    lcnc_machine::master_with_capabilities(rtapi, &dir, "cap_sys_nice,cap_ipc_lock=ep")
}

fn label(l: &Launcher) -> &'static str {
    match l {
        Launcher::Stock => "stock rtapi_app",
        Launcher::StockRealtime => "stock rtapi_app, forced RT",
        Launcher::Rtapi(_) => "rtapi linuxcnc",
    }
}
