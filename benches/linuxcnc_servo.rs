//! LinuxCNC's own servo-thread timing on a running sim/axis machine, stock `rtapi_app` against
//! `rtapi linuxcnc`, FIFO against FIFO, in alternated rounds, idle and under `stress-ng --cpu 2`.
//!
//! ```text
//! cargo bench --bench linuxcnc_servo -- --rtapi [PATH] [--rounds 5] [--seconds 20] [--load idle|stress|both]
//!                                        [--wake-path] [--with-other] [--no-dma-grant] [--against PATH]
//! ```
//!
//! What is measured: LinuxCNC's `timedelta` component, added *first* to the machine's `servo-thread`
//! (`addf timedelta.0 servo-thread 1`), sets `timedelta.0.out` to the time between this period's run
//! and the previous one (`rtapi_get_time`, ns); LinuxCNC's `sampler` records it every period
//! (tests/common/lcnc_machine.rs, its display holding the machine on, not homed, for `--seconds`).
//! Per period the error is |out − period|; a run gives its p50, p99 and max (µs), *late periods*
//! (intervals longer than 1.5 periods) and *missed* periods (Σ round(interval / period) − 1 over
//! those: 2.9's `rtapi_app` runs late periods back to back, rtapi skips them; both count).
//!
//! Rounds: per load, `--rounds` rounds of stock 2.9 with `LINUXCNC_FORCE_REALTIME=1` (its own
//! override; its `rtapi_app` is setuid root; where root lacks CAP_SYS_RESOURCE, as on this VM,
//! `lcnc/rtprio_shim.c` is preloaded in a private mount namespace, or 2.9 falls back to SCHED_OTHER)
//! and of `rtapi linuxcnc` (its master a copy with README's file capabilities; LinuxCNC runs as
//! `nobody`), the order swapped every round. Printed: each run; per load the median and range of
//! the per-round ratios rtapi ÷ stock (p50, p99, max) and, as the control, of stock ÷ stock a round
//! apart; the verdict at p50 and p99 (≤ 1.0, or inside the control's spread, or above both); late
//! and missed periods summed. `--with-other` adds one run of stock as 2.9 runs on this kernel
//! (SCHED_OTHER) per load, shown, never in a ratio.
//!
//! Before a ratio is counted the round checks both runs measured what they claim: the process that
//! mapped `motmod.so` has a thread that woke at least a quarter of the period rate during a
//! one-second probe (the servo thread), SCHED_FIFO with the same priority on both sides, and both
//! processes holding `/dev/cpu_dma_latency` or neither (`/proc/PID/fd`). Stock holds it as root;
//! rtapi's master, an ordinary user's process, holds it when its group may open the device (README,
//! "Idle states"): the bench gives it to `nobody`'s group in a mount namespace of its own, as
//! `packaging/udev/60-rtapi.rules` does for group `rtapi` (`--no-dma-grant`: not, to see what the
//! hold is worth — those rounds are refused a ratio, and say why).
//!
//! `--against PATH` puts another build of rtapi (its `rtapi`; `rtapi-lcnc-master` beside it) in
//! stock's place: a change to rtapi measured against the code before it, in the same rounds.
//!
//! `--wake-path` (tracefs, uprobes): in each run, for up to 8 s of the hold, the time from the servo
//! thread's wake (`sched_switch` to it) to its `rtapi_wait` returning and to the first
//! `rtapi_get_time` (the first function's), per period ([`wake_path`]).

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
    /// `--wake-path`: (p50 wake → `rtapi_wait` returned, p50 and p99 wake → first function), µs.
    wake: Option<Result<[f64; 3], String>>,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn measure(
    launcher: &Launcher,
    seconds: f64,
    label: &str,
    trace_wake: bool,
) -> Result<Stats, String> {
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
    // --wake-path: a window of the hold traced, once the servo thread runs.
    let tracer = trace_wake.then(|| {
        let window = Duration::from_secs_f64((seconds / 2.0).min(8.0));
        std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let t = loop {
                if let Some(t) = lcnc_machine::find_servo_thread(Duration::from_millis(300)) {
                    if t.check(false, PERIOD_NS).is_ok() {
                        break t;
                    }
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    return Err("no servo thread within 60 s".to_string());
                }
            };
            std::thread::sleep(Duration::from_secs(2));
            let spans = wake_path::measure(t.pid, t.tid, &t.cpus, window)?;
            let mut a = spans.to_return;
            let mut b = spans.to_first_function;
            a.sort_by(f64::total_cmp);
            b.sort_by(f64::total_cmp);
            Ok([
                percentile(&a, 0.5) / 1000.0,
                percentile(&b, 0.5) / 1000.0,
                percentile(&b, 0.99) / 1000.0,
            ])
        })
    });
    let r = run(launcher, &m).map_err(|e| e.to_string());
    let wake = tracer.map(|h| {
        h.join()
            .unwrap_or_else(|_| Err("the tracer panicked".into()))
    });
    let r = r?;
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
        wake,
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

/// One run of `l` under `load`, printed as a row; `None` when it failed.
fn one_run(l: &Launcher, load: &str, seconds: f64, tag: &str, trace_wake: bool) -> Option<Stats> {
    let s = (load == "stress").then(|| stress(seconds));
    if s.is_some() {
        std::thread::sleep(Duration::from_secs(1)); // the workers are up
    }
    let r = measure(l, seconds, &format!("{load}-{tag}"), trace_wake);
    if let Some(s) = s {
        end(s);
    }
    match r {
        Ok(st) => {
            let thread = match verified(l, &st) {
                Ok(t) => t.to_string(),
                Err(e) => format!("NOT VERIFIED: {e}"),
            };
            println!(
                "{load:<7} {tag:<6} {:<27} {:>7} {:>8.1} {:>8.1} {:>9.1} {:>5} {:>6}  {thread}",
                label(l),
                st.periods,
                st.p50,
                st.p99,
                st.max,
                st.late,
                st.missed
            );
            match &st.wake {
                Some(Ok([ret, first, first99])) => println!(
                    "{load:<7} {tag:<6} {:<27} wake → rtapi_wait returned p50 {ret:.2} µs, → first function p50 {first:.2} µs, p99 {first99:.2} µs (traced)",
                    label(l)
                ),
                Some(Err(e)) => println!("{load:<7} {tag:<6} {:<27} wake path not traced: {e}", label(l)),
                None => {}
            }
            Some(st)
        }
        Err(e) => {
            println!("{load:<7} {tag:<6} {l}: FAILED: {e}");
            None
        }
    }
}

/// Two runs are comparable when both servo threads were verified and run alike: same policy and
/// priority, and both processes holding `/dev/cpu_dma_latency` or neither. The reason when not.
fn comparable(la: &Launcher, a: &Stats, lb: &Launcher, b: &Stats) -> Result<(), String> {
    let ta = verified(la, a)?;
    let tb = verified(lb, b)?;
    if ta.policy != tb.policy || ta.rt_priority != tb.rt_priority {
        return Err(format!(
            "unlike scheduling: {} {} against {} {}",
            ta.policy, ta.rt_priority, tb.policy, tb.rt_priority
        ));
    }
    if ta.dma_latency_held != tb.dma_latency_held {
        return Err(format!(
            "one process held /dev/cpu_dma_latency and the other did not ({} / {})",
            ta.dma_latency_held, tb.dma_latency_held
        ));
    }
    Ok(())
}

/// The median (of an even count, the mean of the middle two).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 0 {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    } else {
        v[n / 2]
    }
}

/// `y / x`, NaN when `x` is 0 (a percentile of 0 µs has no ratio; NaN is shown, never dropped).
fn ratio(x: f64, y: f64) -> f64 {
    if x > 0.0 {
        y / x
    } else {
        f64::NAN
    }
}

/// Median and range of a set of ratios, `1.00 (0.90–1.10)`.
fn summary(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.iter().any(|x| x.is_nan()) {
        return format!("NaN in {v:.2?}");
    }
    format!("{:.2} ({lo:.2}–{hi:.2})", median(v))
}

/// Median and range of per-round counts, `12 (9–20)`.
fn counts_summary(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.0} ({lo:.0}–{hi:.0})", median(v))
}

/// rtapi's late (or missed) periods against stock's, per round: the median no more than stock's,
/// or inside stock's own range over its rounds (the host's stalls of several ms each add tens of
/// missed periods to whichever run they hit).
fn count_verdict(rtapi: &[f64], stock: &[f64]) -> &'static str {
    let hi = stock.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if median(rtapi) <= median(stock) {
        "no more than stock's (medians)"
    } else if median(rtapi) <= hi {
        "inside stock's own range"
    } else {
        "MORE than stock's"
    }
}

/// The verdict at one percentile: the median of rtapi ÷ stock at most 1.0, or inside the spread of
/// stock ÷ stock (the control: the same runtime twice, a round apart).
fn verdict(rtapi: &[f64], control: &[f64]) -> &'static str {
    if rtapi.is_empty() || rtapi.iter().any(|x| x.is_nan()) {
        return "undecided";
    }
    let m = median(rtapi);
    // A NaN in the control (a percentile of 0 µs) leaves its spread unknown: never "inside" it.
    let hi = if control.iter().any(|x| x.is_nan()) {
        f64::NEG_INFINITY
    } else {
        control.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    };
    if m <= 1.0 {
        "≤ 1.0"
    } else if !control.is_empty() && m <= hi {
        "inside the control's spread"
    } else {
        "ABOVE 1.0 and the control's spread"
    }
}

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut rtapi: Option<std::path::PathBuf> = None;
    let mut seconds = 20.0;
    let mut rounds = 5usize;
    let mut loads = vec!["idle", "stress"];
    let mut with_other = false;
    let mut grant = true;
    let mut trace_wake = false;
    let mut against: Option<std::path::PathBuf> = None;
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
            "--rounds" => {
                rounds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|n| *n >= 2)
                    .expect("--rounds N (at least 2: the control compares stock's rounds)")
            }
            "--load" => {
                loads = match args.next().as_deref() {
                    Some("idle") => vec!["idle"],
                    Some("stress") => vec!["stress"],
                    Some("both") => vec!["idle", "stress"],
                    other => panic!("--load idle|stress|both, not {other:?}"),
                }
            }
            "--with-other" => with_other = true,
            "--no-dma-grant" => grant = false,
            "--wake-path" => trace_wake = true,
            "--against" => {
                against = Some(
                    args.next()
                        .expect("--against PATH (an rtapi binary)")
                        .into(),
                )
            }
            _ => {}
        }
    }
    if let Some(why) = lcnc_machine::missing_prerequisite(true) {
        eprintln!("SKIPPED: linuxcnc_servo: {why}");
        return;
    }
    let Some(rtapi) = rtapi else {
        // Stock alone, as 2.9 runs here and forced realtime: one run each per load.
        println!("LinuxCNC servo-thread timing, stock only (--rtapi PATH compares rtapi)");
        for load in loads {
            for l in [Launcher::Stock, Launcher::StockRealtime] {
                one_run(&l, load, seconds, "1", false);
            }
        }
        return;
    };
    if grant {
        grant_dma_latency();
    }
    // `--against PATH`: the reference side is another build of rtapi (a change measured against
    // the code before it), not stock.
    let stock = match &against {
        Some(p) => Launcher::Rtapi(with_capabilities(p, "reference")),
        None => Launcher::StockRealtime,
    };
    let ours = Launcher::Rtapi(with_capabilities(&rtapi, "measured"));
    println!(
        "LinuxCNC servo-thread timing, sim/axis (1 ms), timedelta first in servo-thread; error = |interval − 1 ms|"
    );
    println!(
        "{rounds} rounds per load of {seconds} s each, stock forced RT and rtapi alternated (the order swapped every round)"
    );
    println!(
        "{:<7} {:<6} {:<27} {:>7} {:>8} {:>8} {:>9} {:>5} {:>6}  servo thread",
        "load", "round", "master", "periods", "p50 µs", "p99 µs", "max µs", "late", "missed"
    );
    for load in loads {
        if with_other {
            one_run(&Launcher::Stock, load, seconds, "other", false);
        }
        let mut pairs: Vec<(Option<Stats>, Option<Stats>)> = Vec::new();
        for r in 0..rounds {
            let tag = format!("{}", r + 1);
            let (a, b) = if r % 2 == 0 {
                let a = one_run(&stock, load, seconds, &tag, trace_wake);
                (a, one_run(&ours, load, seconds, &tag, trace_wake))
            } else {
                let b = one_run(&ours, load, seconds, &tag, trace_wake);
                (one_run(&stock, load, seconds, &tag, trace_wake), b)
            };
            pairs.push((a, b));
        }
        report(load, &stock, &ours, &pairs);
    }
}

/// Per load: the median and range of the per-round ratios rtapi ÷ stock, and of stock ÷ stock a
/// round apart (the control), with the verdict at p50 and p99; late and missed periods summed.
fn report(load: &str, stock: &Launcher, ours: &Launcher, pairs: &[(Option<Stats>, Option<Stats>)]) {
    let mut r50 = Vec::new();
    let mut r99 = Vec::new();
    let mut rmax = Vec::new();
    // Per round, (rtapi, stock): late and missed periods.
    let mut late: Vec<(f64, f64)> = Vec::new();
    let mut missed: Vec<(f64, f64)> = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let (Some(a), Some(b)) = p else {
            println!("{load:<7} round {}: a run failed, no ratio", i + 1);
            continue;
        };
        if let Err(e) = comparable(stock, a, ours, b) {
            println!("{load:<7} round {}: no ratio: {e}", i + 1);
            continue;
        }
        r50.push(ratio(a.p50, b.p50));
        r99.push(ratio(a.p99, b.p99));
        rmax.push(ratio(a.max, b.max));
        late.push((b.late as f64, a.late as f64));
        missed.push((b.missed as f64, a.missed as f64));
    }
    let stocks: Vec<&Stats> = pairs
        .iter()
        .filter_map(|p| p.0.as_ref())
        .filter(|s| verified(stock, s).is_ok())
        .collect();
    let c50: Vec<f64> = stocks
        .windows(2)
        .map(|w| ratio(w[0].p50, w[1].p50))
        .collect();
    let c99: Vec<f64> = stocks
        .windows(2)
        .map(|w| ratio(w[0].p99, w[1].p99))
        .collect();
    let cmax: Vec<f64> = stocks
        .windows(2)
        .map(|w| ratio(w[0].max, w[1].max))
        .collect();
    if r50.is_empty() {
        println!("{load:<7} no round gave a ratio");
        return;
    }
    println!(
        "{load:<7} rtapi ÷ stock, median (range) of {} rounds: p50 {}  p99 {}  max {}",
        r50.len(),
        summary(&r50),
        summary(&r99),
        summary(&rmax),
    );
    let counts = |v: &[(f64, f64)], side: usize| -> Vec<f64> {
        v.iter()
            .map(|p| if side == 0 { p.0 } else { p.1 })
            .collect()
    };
    println!(
        "{load:<7} per round, median (range): late rtapi {} stock {}; missed rtapi {} stock {}",
        counts_summary(&counts(&late, 0)),
        counts_summary(&counts(&late, 1)),
        counts_summary(&counts(&missed, 0)),
        counts_summary(&counts(&missed, 1)),
    );
    if !c50.is_empty() {
        println!(
            "{load:<7} stock ÷ stock (control, {} pairs of rounds):  p50 {}  p99 {}  max {}",
            c50.len(),
            summary(&c50),
            summary(&c99),
            summary(&cmax)
        );
    }
    for (side, name) in [(0, "stock"), (1, "rtapi")] {
        let w: Vec<[f64; 3]> = pairs
            .iter()
            .filter_map(|p| {
                if side == 0 {
                    p.0.as_ref()
                } else {
                    p.1.as_ref()
                }
            })
            .filter_map(|s| s.wake.as_ref()?.as_ref().ok().copied())
            .collect();
        if !w.is_empty() {
            let col = |i: usize| median(&w.iter().map(|x| x[i]).collect::<Vec<_>>());
            println!(
                "{load:<7} wake path, {name}, median of {} rounds: → rtapi_wait returned p50 {:.2} µs, → first function p50 {:.2} µs, p99 {:.2} µs",
                w.len(),
                col(0),
                col(1),
                col(2)
            );
        }
    }
    println!(
        "{load:<7} verdict: p50 {}, p99 {}; late periods {}, missed {}",
        verdict(&r50, &c50),
        verdict(&r99, &c99),
        count_verdict(&counts(&late, 0), &counts(&late, 1)),
        count_verdict(&counts(&missed, 0), &counts(&missed, 1)),
    );
}

/// Lets LinuxCNC's user (nobody, group nogroup) open `/dev/cpu_dma_latency`, as
/// `packaging/udev/60-rtapi.rules` does for group `rtapi`: stock 2.9's `rtapi_app` holds it at 0
/// (it is setuid root), and so does rtapi's master when it may — without it the CPUs sleep in idle
/// states between periods and the median moves (docs/guide/commission-pc.md, "Idle states"). Done in a mount namespace of
/// the bench's own (a device node of the same number, group nogroup, 0660, bound over the path), so
/// the machine's `/dev` is never changed.
fn grant_dma_latency() {
    use nix::sched::{unshare, CloneFlags};
    if !common::is_root() {
        println!("(not root: /dev/cpu_dma_latency as it is)");
        return;
    }
    unshare(CloneFlags::CLONE_NEWNS).expect("unshare(CLONE_NEWNS)");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-lcnc-dev");
    std::fs::create_dir_all(&dir).unwrap();
    let rdev = std::os::unix::fs::MetadataExt::rdev(
        &std::fs::metadata("/dev/cpu_dma_latency").expect("/dev/cpu_dma_latency"),
    );
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sh = format!(
        "set -e; mount --make-rprivate /; mount -t tmpfs -o mode=0755 rtapi-bench {d}; \
         mknod -m 0660 {d}/cpu_dma_latency c {major} {minor}; chgrp 65534 {d}/cpu_dma_latency; \
         mount --bind {d}/cpu_dma_latency /dev/cpu_dma_latency",
        d = dir.display()
    );
    let o = Command::new("sh").args(["-c", &sh]).output().unwrap();
    assert!(
        o.status.success(),
        "granting /dev/cpu_dma_latency: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    println!(
        "/dev/cpu_dma_latency: group nogroup, 0660, in this bench's mount namespace (as packaging/udev/60-rtapi.rules does for group rtapi; --no-dma-grant: as it is)"
    );
}

/// LinuxCNC runs as `nobody` here (its `rtapi_app` refuses root), so rtapi's master gets its
/// privileges as README tells an ordinary user: a copy of `rtapi` and `rtapi-lcnc-master` side by
/// side, the master with `cap_sys_nice,cap_ipc_lock=ep`. Not root: the binaries as they are.
fn with_capabilities(rtapi: &std::path::Path, sub: &str) -> std::path::PathBuf {
    if !common::is_root() {
        return rtapi.to_path_buf();
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-lcnc-caps")
        .join(sub);
    std::fs::create_dir_all(&dir).unwrap();
    lcnc_machine::master_with_capabilities(rtapi, &dir, "cap_sys_nice,cap_ipc_lock=ep")
}

fn label(l: &Launcher) -> &'static str {
    match l {
        Launcher::Stock => "stock rtapi_app",
        Launcher::StockRealtime => "stock rtapi_app, forced RT",
        Launcher::Rtapi(p) if p.parent().is_some_and(|d| d.ends_with("reference")) => {
            "rtapi linuxcnc, --against"
        }
        Launcher::Rtapi(_) => "rtapi linuxcnc",
        Launcher::Diverted(_) => "linuxcnc, rtapi_app diverted to rtapi",
    }
}

/// `--wake-path`: where the time between the servo thread's wake and LinuxCNC's first function
/// goes, per period, from tracefs: the switch to the servo thread on its CPU (`sched_switch`, the
/// timer's wake), the return of `rtapi_wait` (a uretprobe on the master's own `rtapi_wait`: stock's
/// in `rtapi_app`, rtapi's alias of `rtapi_hosted_wait`) and the entry of `rtapi_get_time`, which
/// `timedelta` — the thread's first function — calls first (a uprobe). Timestamps are the TSC
/// (`trace_clock` `x86-tsc`), scaled by its rate measured against `CLOCK_MONOTONIC`. The probes cost
/// the same traps in both runtimes; the numbers compare the two, they are not the untraced path.
mod wake_path {
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    const TRACEFS: &str = "/sys/kernel/tracing";

    /// Per period: (wake → `rtapi_wait` returned, wake → first `rtapi_get_time`), ns.
    pub(crate) struct Spans {
        pub(crate) to_return: Vec<f64>,
        pub(crate) to_first_function: Vec<f64>,
    }

    /// The file offset of dynamic symbol `sym` in ELF `exe` (what a uprobe needs).
    fn file_offset(exe: &Path, sym: &str) -> Result<u64, String> {
        let nm = std::process::Command::new("nm")
            .args(["-D", "--defined-only"])
            .arg(exe)
            .output()
            .map_err(|e| format!("nm: {e}"))?;
        let vaddr = String::from_utf8_lossy(&nm.stdout)
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == sym).then(|| u64::from_str_radix(f[0], 16).ok())?
            })
            .ok_or_else(|| format!("{sym} is not exported by {}", exe.display()))?;
        let re = std::process::Command::new("readelf")
            .args(["-lW"])
            .arg(exe)
            .output()
            .map_err(|e| format!("readelf: {e}"))?;
        for l in String::from_utf8_lossy(&re.stdout).lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() != Some(&"LOAD") || f.len() < 6 {
                continue;
            }
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or(0);
            let (off, va, filesz) = (hex(f[1]), hex(f[2]), hex(f[4]));
            if (va..va + filesz).contains(&vaddr) {
                return Ok(vaddr - va + off);
            }
        }
        Err(format!("{sym}: no LOAD segment holds {vaddr:#x}"))
    }

    fn write(path: impl AsRef<Path>, v: &str) -> Result<(), String> {
        fs::write(path.as_ref(), v).map_err(|e| format!("{}: {e}", path.as_ref().display()))
    }

    fn append(path: &str, v: &str) -> Result<(), String> {
        use std::io::Write;
        fs::OpenOptions::new()
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(v.as_bytes()))
            .map_err(|e| format!("{path} ({v}): {e}"))
    }

    /// TSC ticks per ns, against CLOCK_MONOTONIC over 200 ms.
    fn tsc_per_ns() -> f64 {
        // SAFETY: rdtsc has no preconditions on x86_64.
        let t0 = unsafe { core::arch::x86_64::_rdtsc() };
        let i0 = Instant::now();
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: as above.
        let t1 = unsafe { core::arch::x86_64::_rdtsc() };
        (t1 - t0) as f64 / i0.elapsed().as_nanos() as f64
    }

    /// Traces thread `tid` of process `pid` on `cpu` for `window`.
    pub(crate) fn measure(
        pid: i32,
        tid: i32,
        cpu: &str,
        window: Duration,
    ) -> Result<Spans, String> {
        let exe: PathBuf = fs::read_link(format!("/proc/{pid}/exe")).map_err(|e| e.to_string())?;
        let wait = file_offset(&exe, "rtapi_wait")?;
        let get_time = file_offset(&exe, "rtapi_get_time")?;
        let group = format!("rtapi_bench{}", std::process::id());
        let probes = format!("{TRACEFS}/uprobe_events");
        append(
            &probes,
            &format!("r:{group}/wait_ret {}:{wait:#x}\n", exe.display()),
        )?;
        let inst = format!("{TRACEFS}/instances/{group}");
        let result: Result<String, String> = (|| {
            append(
                &probes,
                &format!("p:{group}/get_time {}:{get_time:#x}\n", exe.display()),
            )?;
            fs::create_dir(&inst).map_err(|e| format!("{inst}: {e}"))?;
            let cpu: usize = cpu.parse().map_err(|_| format!("one CPU, not {cpu}"))?;
            write(
                format!("{inst}/tracing_cpumask"),
                &format!("{:x}", 1u64 << cpu),
            )?;
            write(format!("{inst}/trace_clock"), "x86-tsc")?;
            write(format!("{inst}/buffer_size_kb"), "16384")?;
            write(
                format!("{inst}/events/sched/sched_switch/filter"),
                &format!("next_pid == {tid}"),
            )?;
            write(format!("{inst}/events/sched/sched_switch/enable"), "1")?;
            for ev in ["wait_ret", "get_time"] {
                write(
                    format!("{inst}/events/{group}/{ev}/filter"),
                    &format!("common_pid == {tid}"),
                )?;
                write(format!("{inst}/events/{group}/{ev}/enable"), "1")?;
            }
            std::thread::sleep(window);
            write(format!("{inst}/tracing_on"), "0")?;
            let text = fs::read_to_string(format!("{inst}/trace")).map_err(|e| e.to_string())?;
            Ok(text)
        })();
        let _ = fs::remove_dir(&inst);
        let _ = append(&probes, &format!("-:{group}/get_time\n"));
        let _ = append(&probes, &format!("-:{group}/wait_ret\n"));
        let text = result?;
        let scale = tsc_per_ns();
        // Each line: "... [001] ..... TSC: event: ..."; keep (tsc, kind).
        let mut spans = Spans {
            to_return: Vec::new(),
            to_first_function: Vec::new(),
        };
        let (mut wake, mut returned) = (None::<u64>, false);
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((head, rest)) = l.split_once(": ") else {
                continue;
            };
            let Some(ts) = head
                .split_whitespace()
                .last()
                .and_then(|t| t.parse::<u64>().ok())
            else {
                continue;
            };
            let kind = rest.split(':').next().unwrap_or("");
            match kind {
                "sched_switch" => (wake, returned) = (Some(ts), false),
                "wait_ret" => {
                    if let (Some(w), false) = (wake, returned) {
                        spans.to_return.push((ts - w) as f64 / scale);
                        returned = true;
                    }
                }
                "get_time" => {
                    if let (Some(w), true) = (wake, returned) {
                        spans.to_first_function.push((ts - w) as f64 / scale);
                        wake = None;
                    }
                }
                _ => {}
            }
        }
        if spans.to_first_function.len() < 100 {
            return Err(format!(
                "only {} periods traced (wait_ret {}); trace begins: {}",
                spans.to_first_function.len(),
                spans.to_return.len(),
                text.lines()
                    .filter(|l| !l.starts_with('#'))
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            ));
        }
        Ok(spans)
    }
}
