//! `rtapi latency-test` end to end: the real binary, real threads, its files and exit codes.

mod common;

use std::process::{Command, Stdio};

use common::eventually;
use common::pty;

fn rtapi(instance: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.arg("latency-test")
        .args([
            "--instance",
            &format!("{instance}-{}", std::process::id()),
            "--quiet",
        ])
        .args(args)
        .env_remove("RTAPI_FLAVOR")
        .env("RUST_LOG", "error");
    c
}

fn assert_success(out: &std::process::Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn json_of(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn json_report_has_the_documented_keys_and_consistent_numbers() {
    let out = rtapi(
        "json",
        &["--duration", "2s", "--base", "100us", "--json", "-"],
    )
    .output()
    .unwrap();
    assert_success(&out);
    let v = json_of(&out);
    assert_eq!(v["tool"], "rtapi latency-test");
    for key in [
        "/version",
        "/system/kernel",
        "/system/preempt_rt",
        "/system/flavor",
        "/system/virtualized",
        "/settings/duration_s",
        "/settings/timer",
        "/settings/wake",
        "/settings/load",
        "/verdict/rating",
        "/verdict/summary",
        "/verdict/advice",
    ] {
        assert!(v.pointer(key).is_some(), "missing {key}");
    }
    let threads = v["threads"].as_array().unwrap();
    assert_eq!(
        threads
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["base", "servo"]
    );
    for t in threads {
        let l = &t["latency_ns"];
        let n = |k: &str| l[k].as_f64().unwrap();
        assert!(
            n("min") <= n("p50")
                && n("p50") <= n("p99")
                && n("p99") <= n("p999")
                && n("p999") <= n("max"),
            "{l}"
        );
        assert!(n("min") <= n("mean") && n("mean") <= n("max"));
        let h = &t["histogram"];
        let counted: u64 = h["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum();
        assert_eq!(
            counted + h["overflow"].as_u64().unwrap(),
            t["cycles"].as_u64().unwrap(),
            "histogram sums to cycles"
        );
        assert_eq!(h["bin_ns"], 1000);
        for k in [
            "period_ns",
            "cpu",
            "priority",
            "overruns",
            "max_jitter_ns",
            "drift_ns",
            "exec_ns",
        ] {
            assert!(!t[k].is_null(), "{k}");
        }
        // A 100 µs / 1 ms thread for the run's measured duration (2 s asked; a busy host can make
        // it longer): every period is accounted for, woken or missed.
        let due =
            v["settings"]["duration_s"].as_f64().unwrap() * 1e9 / t["period_ns"].as_f64().unwrap();
        let accounted = (t["cycles"].as_u64().unwrap() + t["overruns"].as_u64().unwrap()) as f64;
        assert!((accounted - due).abs() / due < 0.05, "{accounted} of {due}");
    }
    assert!(["good", "ok", "servo-only", "unusable"]
        .contains(&v["verdict"]["rating"].as_str().unwrap()));
}

#[test]
fn histogram_file_is_cyclictest_format_and_svg_shows_both_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (hist, svg, json) = (
        dir.path().join("h.txt"),
        dir.path().join("p.svg"),
        dir.path().join("r.json"),
    );
    let out = rtapi("files", &["--duration", "2s", "--base", "200us"])
        .args([
            "--histogram",
            hist.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_success(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("VERDICT:"),
        "the text report goes to stdout"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // The file, read with the test's own reader of cyclictest's layout (checked against a real
    // cyclictest run by `cyclictest_writes_the_layout_the_histogram_reader_expects`), holds the
    // report's numbers.
    let text = std::fs::read_to_string(&hist).unwrap();
    let file = common::cyclictest::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    file.check_sums().unwrap_or_else(|e| panic!("{e}\n{text}"));
    let threads = report["threads"].as_array().unwrap();
    assert_eq!(file.bins.len(), 2, "one column per thread");
    assert_eq!(threads.len(), 2);
    for (i, t) in threads.iter().enumerate() {
        let counts: Vec<u64> = t["histogram"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        // Rows run to the longest thread's bins; a shorter one is 0 beyond its own.
        assert!(file.bins[i].len() >= counts.len(), "thread {i}");
        assert_eq!(
            file.bins[i][..counts.len()],
            counts[..],
            "thread {i}'s bins"
        );
        assert!(
            file.bins[i][counts.len()..].iter().all(|&c| c == 0),
            "thread {i}"
        );
        let overflow = t["histogram"]["overflow"].as_u64().unwrap();
        assert_eq!(file.overflows[i], overflow, "thread {i}");
        assert_eq!(
            file.total[i] + file.overflows[i],
            t["cycles"].as_u64().unwrap(),
            "thread {i}: every cycle is in a bin or an overflow"
        );
        let l = &t["latency_ns"];
        assert_eq!(
            file.min_us[i],
            l["min"].as_u64().unwrap() / 1000,
            "thread {i}"
        );
        assert_eq!(
            file.max_us[i],
            l["max"].as_u64().unwrap() / 1000,
            "thread {i}"
        );
        let mean_us = l["mean"].as_f64().unwrap() / 1000.0;
        assert!(
            (file.avg_us[i] as f64 - mean_us).abs() <= 1.0,
            "thread {i}: avg {} µs, mean {mean_us} µs",
            file.avg_us[i]
        );
        // The overflow cycles listed are the report's spikes beyond the last bin, in order.
        let limit = 1000 * file.bins[i].len() as u64;
        let mut beyond: Vec<u64> = t["spikes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|sp| sp["latency_ns"].as_u64().unwrap() >= limit)
            .map(|sp| sp["cycle"].as_u64().unwrap())
            .collect();
        beyond.sort_unstable();
        assert_eq!(file.overflow_cycles[i].0, beyond, "thread {i}");
    }
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("base (overflow") && svg.contains("servo (overflow"),
        "both threads in the legend"
    );
}

/// The test's reader of the histogram layout, [`common::cyclictest::parse`], reads what a real
/// cyclictest writes with `-h`, and its numbers mean what cyclictest's mean: every loop of each thread
/// is in a bin or an overflow (the thread that finished has all `-l` loops), the bins sum to `# Total`, the listed overflow cycles and the others to
/// `# Histogram Overflows`. (So a file it reads is in cyclictest's layout.)
#[test]
fn cyclictest_writes_the_layout_the_histogram_reader_expects() {
    const LOOPS: u64 = 300;
    // 8 bins of 1 µs: on a loaded VM most wakes overflow, some land in bins; SCHED_OTHER (no -p),
    // so no privilege is needed; one loop every 500 µs.
    let out = match Command::new("cyclictest")
        .args(["-q", "-t", "2", "-i", "500", "-h", "8"])
        .arg(format!("-l{LOOPS}"))
        .output()
    {
        Ok(o) => o,
        Err(e) => return skip!(Ci, "cyclictest (rt-tests) cannot run: {e}"),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    let h = common::cyclictest::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    h.check_sums().unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(h.bins.len(), 2, "two threads");
    // cyclictest ends every thread once one has run its loops: a thread the load held back has
    // fewer (seen under stress: 116 and 300).
    let loops: Vec<u64> = (0..2).map(|t| h.total[t] + h.overflows[t]).collect();
    assert_eq!(loops.iter().max(), Some(&LOOPS), "{loops:?}:\n{text}");
    for (t, &n) in loops.iter().enumerate() {
        assert_eq!(h.bins[t].len(), 8, "{text}");
        assert!((1..=LOOPS).contains(&n), "thread {t}: {n} loops:\n{text}");
        assert!(
            h.min_us[t] <= h.avg_us[t] && h.avg_us[t] <= h.max_us[t],
            "{text}"
        );
    }
}

#[test]
fn servo_only_is_judged_on_the_servo_thread() {
    let out = rtapi("servo", &["--duration", "1s", "--base", "0", "--json", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v = json_of(&out);
    assert_eq!(v["threads"].as_array().unwrap().len(), 1);
    assert_eq!(v["verdict"]["judged_thread"], "servo");
}

#[test]
fn fail_above_exits_3_after_writing_the_report() {
    let out = rtapi(
        "fail",
        &[
            "--duration",
            "1s",
            "--base",
            "0",
            "--fail-above",
            "1ns",
            "--json",
            "-",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds --fail-above"));
    let _ = json_of(&out);
    let out = rtapi(
        "pass",
        &["--duration", "1s", "--base", "0", "--fail-above", "10s"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn bad_arguments_exit_2_with_what_to_do() {
    for (args, says) in [
        (vec!["--duration", "1d"], "e.g. 25us"),
        (vec!["--timer", "select"], "compare-timers"),
        (vec!["--wake", "nap"], "hybrid:MARGIN"),
        (vec!["--load", "gpu"], "cpu,mem,io"),
        (vec!["--cpu", "x"], "BASE,SERVO"),
        (vec!["--flavor", "rtai"], "valid flavors"),
        (vec!["--cpu", "4000"], "CPU 4000"),
        (vec!["--trace=0"], "--trace=50us"),
    ] {
        let out = rtapi("bad", &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn sigint_ends_the_test_early_and_still_reports() {
    let child = rtapi(
        "sigint",
        &["--duration", "60s", "--base", "0", "--json", "-"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // A second of the servo thread's periods (its segment), then Ctrl-C.
    let instance = format!("sigint-{}", std::process::id());
    eventually::until_true(
        "the servo thread ran 1000 periods",
        eventually::GENEROUS,
        || {
            rtapi_hal::HalReader::open(&instance, rtapi_hal::Access::ReadOnly)
                .and_then(|r| r.thread_stats("servo"))
                .is_ok_and(|s| s.cycles + s.overruns >= 1000)
        },
    );
    // SAFETY: kill sends a signal to our own child; no memory is involved.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_success(&out);
    let v = json_of(&out);
    assert_eq!(v["settings"]["interrupted"], true);
    // Ended early (the signal, not the 60 s), and the report holds at least the periods seen before
    // the signal (its duration is measured from its own start, a little after the thread's origin,
    // so it is no bound here).
    let secs = v["settings"]["duration_s"].as_f64().unwrap();
    assert!(secs > 0.0 && secs < 60.0, "ended early: {secs} s");
    let t = &v["threads"][0];
    let periods = t["cycles"].as_u64().unwrap() + t["overruns"].as_u64().unwrap();
    assert!(periods >= 1000, "the report lost periods: {t}");
}

/// (pid, parent, process group, state) of every live stress-ng process on the machine.
fn stress_ng_processes() -> Vec<(i32, i32, i32, char)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.ok()?.path().join("stat")).ok()?;
            let (head, tail) = stat.rsplit_once(") ")?;
            let (pid, comm) = head.split_once(" (")?;
            let f: Vec<&str> = tail.split_whitespace().collect();
            let state = f.first()?.chars().next()?;
            (comm.starts_with("stress-ng") && state != 'Z').then_some((
                pid.parse().ok()?,
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                state,
            ))
        })
        .collect()
}

/// The stress-ng processes of the process groups `groups` (others may run stress-ng on this machine
/// too).
fn in_groups(groups: &[i32]) -> usize {
    stress_ng_processes()
        .iter()
        .filter(|p| groups.contains(&p.2))
        .count()
}

/// The load runs during the test and nothing of it is left afterwards, also when the test is
/// interrupted. stress-ng is installed by .ci/run.
#[test]
fn load_leaves_no_worker_behind() {
    assert!(
        Command::new("stress-ng").arg("--version").output().is_ok(),
        "stress-ng missing: .ci/run installs it"
    );
    let child = rtapi(
        "load",
        &[
            "--duration",
            "30s",
            "--base",
            "0",
            "--load",
            "stress-ng:--cpu 2 --io 1",
            "--json",
            "-",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Warm-up is 2 s at most; then stress-ng (a child of the test, in a process group of its own)
    // and its workers run.
    let pid = child.id() as i32;
    let mut groups = Vec::new();
    let seen = eventually::until("stress-ng and 3 workers", eventually::GENEROUS, || {
        for p in stress_ng_processes() {
            // The load's stress-ng leads a group of its own (not a `stress-ng --version` the
            // command ran in its own group to check it is installed).
            if p.1 == pid && p.0 == p.2 && !groups.contains(&p.2) {
                groups.push(p.2);
            }
        }
        let n = in_groups(&groups);
        (n >= 3).then_some(n)
    });
    // SAFETY: kill sends a signal to our own child; no memory is involved.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_success(&out);
    assert!(seen >= 3, "stress-ng and its workers ran ({seen})");
    assert_eq!(
        json_of(&out)["settings"]["load"][0],
        "stress-ng:--cpu 2 --io 1"
    );
    // The main stress-ng was reaped before the exit; its killed workers may take a moment more.
    eventually::until_true(
        &format!("no stress-ng process of groups {groups:?} outlives the test"),
        eventually::GENEROUS,
        || in_groups(&groups) == 0,
    );
}

/// The seeds' experiment in one command: machine-grade drivers keep every period and do not drift;
/// the relative sleep drifts further than the absolute one.
#[test]
fn compare_timers_reproduces_the_seeds() {
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args([
            "compare-timers",
            "--period",
            "5ms",
            "--duration",
            "1s",
            "--json",
            "-",
        ])
        .args(["--instance", &format!("cmp-{}", std::process::id())])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert_success(&out);
    let v = json_of(&out);
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["mechanism"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "nanosleep",
            "posix-timer",
            "timerfd",
            "nanosleep (hybrid)",
            "relative-nanosleep",
            "select",
            "itimer"
        ]
    );
    let row = |name: &str| rows.iter().find(|r| r["mechanism"] == name).unwrap();
    for name in ["nanosleep", "posix-timer", "timerfd"] {
        let r = row(name);
        let (expected, got, missed) = (
            r["periods_expected"].as_u64().unwrap(),
            r["periods_got"].as_u64().unwrap(),
            r["overruns"].as_u64().unwrap(),
        );
        assert!(
            (got + missed).abs_diff(expected) <= 1,
            "{name}: {got} + {missed} vs {expected}"
        );
        assert!(
            r["drift_ns"].as_i64().unwrap().abs() < 1_000_000,
            "{name}: {}",
            r["drift_ns"]
        );
    }
    let drift = |name: &str| row(name)["drift_ns"].as_i64().unwrap();
    assert!(
        drift("relative-nanosleep") > drift("nanosleep"),
        "a relative sleep falls behind the timeline"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("for comparison only"));
}

/// Without any RT privilege (user nobody, RLIMIT_RTPRIO 0) the same loop runs as flavor sim under
/// SCHED_OTHER: it still measures, and says it is not real time.
#[test]
fn without_privileges_the_same_loop_runs_as_sim() {
    use std::os::unix::process::CommandExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip!(
            Ci,
            "only root can start a child as the unprivileged user 'nobody'"
        );
    }
    let mut c = rtapi(
        "nobody",
        &["--duration", "1s", "--base", "0", "--json", "-"],
    );
    c.uid(65534).gid(65534).env("RUST_LOG", "warn");
    // SAFETY: runs in the forked child before exec; setrlimit is async-signal-safe.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_RTPRIO, &lim);
            Ok(())
        });
    }
    let out = c.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v = json_of(&out);
    assert_eq!(v["system"]["flavor"], "sim");
    assert_eq!(v["threads"][0]["priority"], 0);
    assert!(
        v["threads"][0]["cycles"].as_u64().unwrap() > 500,
        "the loop ran"
    );
    assert!(err.contains("NO REAL-TIME"), "said loudly: {err}");
    // The fallback gets no ordinary verdict: its numbers are not real-time evidence.
    assert_eq!(v["verdict"]["rating"], "not-real-time", "{}", v["verdict"]);
    assert_eq!(v["verdict"]["evidence"], false);
    assert!(v["verdict"]["max_step_rate_hz"].is_null());
}

/// On a terminal the live table is redrawn in place each second; the runtime's once-a-second
/// warnings (a 10 µs base thread misses periods on any machine) must not tear it: none is printed
/// while the table is up, and every redraw is whole (its header line, then the column line).
#[test]
fn log_lines_never_tear_the_live_table() {
    let dir = tempfile::tempdir().unwrap();
    let instance = format!("lt-tty-{}", std::process::id());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    cmd.args(["latency-test", "--duration", "4s", "--base", "10us"])
        .args(["--instance", &instance])
        .env("RUST_LOG", "warn")
        .env("HOME", dir.path())
        .env("TERM", "xterm");
    let mut p = pty::Pty::spawn(cmd);
    let status = p
        .wait(std::time::Duration::from_secs(120))
        .expect("latency-test ended");
    let raw = p.raw();
    assert!(status.success(), "{status:?}\n{raw}");
    let report = raw
        .find("rtapi latency-test: ")
        .unwrap_or_else(|| panic!("no final report:\n{raw}"));
    let live = &raw[..report];
    let redraws: Vec<&str> = live.split("rtapi latency-test | flavor").skip(1).collect();
    assert!(
        redraws.len() >= 2,
        "the table was redrawn {} times:\n{live:?}",
        redraws.len()
    );
    for r in &redraws {
        let second = r.split('\n').nth(1).unwrap_or("");
        assert!(
            pty::strip_escapes(second).trim_start().starts_with("name"),
            "a redraw's second line is not the column line: {second:?}\n{live:?}"
        );
    }
    // The last redraw: its header, the column line and one row per thread. What the start logs
    // before the first draw (a CPU shared with another instance) is not in the table.
    let first = live.find("rtapi latency-test | flavor").unwrap();
    let last = live.rfind("rtapi latency-test | flavor").unwrap();
    let table_end = live[last..]
        .match_indices('\n')
        .nth(3)
        .map_or(live.len(), |(i, _)| last + i + 1);
    assert!(
        !live[first..table_end].contains("period(s) missed")
            && !live[first..table_end].contains(" WARN "),
        "a log line went into the live table:\n{live:?}"
    );
    // What was logged meanwhile comes after the table, each line on its own.
    for (i, _) in live[table_end..].match_indices(" WARN ") {
        let at = table_end + i;
        let line_start = live[..at].rfind('\n').map_or(0, |n| n + 1);
        assert!(
            live[line_start..at].starts_with('[') && !live[line_start..at].contains(' '),
            "a log line glued to other output: {:?}",
            &live[line_start..(at + 40).min(live.len())]
        );
    }
    // The runs' overruns are in the report all the same.
    let base = raw[report..]
        .lines()
        .find(|l| pty::strip_escapes(l).trim_start().starts_with("base"))
        .unwrap_or_else(|| panic!("no base row:\n{}", &raw[report..]));
    assert!(!base.trim_end().ends_with(" 0"), "{base}");
}
