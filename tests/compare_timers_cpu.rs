//! `rtapi compare-timers`' CPU-clock timers, on real threads and real timers: what each row counted
//! agrees with the CPU time the spinning thread really consumed, and the rows say so.

mod common;

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const SHORT_NS: u64 = 200_000;
const LONG_NS: u64 = 25_000_000;

fn field(r: &Value, key: &str) -> u64 {
    r[key].as_u64().unwrap_or_else(|| panic!("{key} in {r}"))
}

/// Whether `counted · period` is `cpu` within a generous bound: 10 % of it, plus two periods (one
/// partial at each end), plus 10 ms (the expirations of the last kernel tick — at most 10 ms at
/// CONFIG_HZ 100 — not yet signalled when the timer is disarmed).
fn agrees(counted: u64, period: u64, cpu: u64) -> bool {
    (counted * period).abs_diff(cpu) <= cpu / 10 + 2 * period + 10_000_000
}

/// The first CPU this process may run on.
fn first_cpu() -> usize {
    // SAFETY: cpu_set_t is plain data; all-zero is an empty set that sched_getaffinity fills.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(rc, 0, "sched_getaffinity");
    // SAFETY: CPU_ISSET only reads the set.
    (0..libc::CPU_SETSIZE as usize)
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .expect("some CPU is allowed")
}

/// Pins the calling thread (or, in `pre_exec`, the child) to `cpu`; async-signal-safe.
fn pin(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE (it came from first_cpu); CPU_SET only writes the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size given; pid 0 is the calling thread.
    match unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// A thread spins with every CPU-clock timer armed, at a period far shorter than the kernel's tick
/// and at one longer than two ticks: each POSIX timer's signals plus overruns add up to the CPU time
/// its clock consumed at both; each itimer's signals do at the long period, and never count more
/// than the CPU time at the short one (where the kernel gives them at most one signal per tick). The
/// thread clock row reports a CPU time that is real (positive) and no more than the wall time.
///
/// The spinner shares its CPU with a spinner of this test (both SCHED_OTHER), so its CPU time runs
/// at about half the wall clock's rate: a timer that counted wall time would be twice off.
#[test]
fn cpu_clock_timers_count_the_cpu_time_consumed() {
    let cpu = first_cpu();
    let stop = Arc::new(AtomicBool::new(false));
    let rival = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            pin(cpu).expect("pin the rival spinner");
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(0u64);
            }
        })
    };
    let instance = format!("cpuclk-{}", std::process::id());
    let mut command = common::rtapi_command(&[
        "compare-timers",
        "--period",
        "5ms",
        "--duration",
        "100ms",
        "--cpu-clock-periods",
        "200us,25ms",
        "--cpu-clock-duration",
        "1s",
        "--json",
        "-",
        "--instance",
        &instance,
    ]);
    // SAFETY: runs in the forked child before exec; sched_setaffinity is async-signal-safe and
    // pin allocates nothing on success.
    unsafe { command.pre_exec(move || pin(cpu)) };
    let out = command.output().unwrap();
    stop.store(true, Ordering::Relaxed);
    rival.join().unwrap();
    let (stdout, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    // The wake mechanisms' rows are still there, unchanged in form.
    assert_eq!(v["rows"].as_array().unwrap().len(), 7, "{v}");
    let section = &v["cpu_clock"];
    assert_eq!(
        section["periods_ns"],
        serde_json::json!([SHORT_NS, LONG_NS])
    );
    assert!(section["conclusion"]
        .as_str()
        .unwrap()
        .contains("cannot pace a servo thread"));
    let rows = section["rows"].as_array().unwrap();
    let timers = [
        "ITIMER_PROF",
        "ITIMER_VIRTUAL",
        "timer_create(CLOCK_PROCESS_CPUTIME_ID)",
        "timer_create(CLOCK_THREAD_CPUTIME_ID)",
        "timer_create(CPUCLOCK_PROF)",
        "timer_create(CPUCLOCK_VIRT)",
    ];
    let names: Vec<(&str, u64)> = rows
        .iter()
        .map(|r| (r["timer"].as_str().unwrap(), field(r, "period_ns")))
        .collect();
    let want: Vec<(&str, u64)> = [SHORT_NS, LONG_NS]
        .iter()
        .flat_map(|&p| timers.iter().map(move |&t| (t, p)))
        .collect();
    assert_eq!(names, want);

    for r in rows {
        let (timer, period) = (r["timer"].as_str().unwrap(), field(r, "period_ns"));
        let (cpu, real) = (field(r, "cpu_ns"), field(r, "real_ns"));
        let (signals, counted) = (field(r, "signals"), field(r, "ticks_counted"));
        let itimer = timer.starts_with("ITIMER");
        // The row's own figures are consistent with each other.
        assert!(cpu > 0, "{r}");
        assert_eq!(field(r, "ticks_expected"), cpu / period, "{r}");
        assert_eq!(
            counted,
            signals + r["overruns"].as_u64().unwrap_or(0),
            "{r}"
        );
        assert_eq!(r["overruns"].is_null(), itimer, "{r}");
        let error = (counted as f64 * period as f64 - cpu as f64) / cpu as f64 * 100.0;
        assert!(
            (r["error_pct"].as_f64().unwrap() - error).abs() < 1e-6,
            "{r}"
        );
        if timer.contains("THREAD") {
            // A thread's CPU time cannot run faster than the wall clock; this one spun, so it got
            // a real share of it, but shared its CPU with the rival: far from all of it.
            assert!(cpu <= real * 8 / 10, "it shared its CPU: {r}");
            assert!(cpu >= real / 10, "the thread spun: {r}");
        }
        if !itimer || period == LONG_NS {
            assert!(
                agrees(counted, period, cpu),
                "{timer} at {period} ns: {counted} × period vs {cpu} ns of CPU: {r}"
            );
        } else {
            assert!(
                counted * period <= cpu + 2 * period,
                "{timer} never counts more than the CPU time: {r}"
            );
        }
    }
    assert!(stderr.contains("CPU-clock timers"), "{stderr}");
    assert!(stderr.contains("cannot pace a servo thread"), "{stderr}");
}

/// A CPU-clock period longer than the spin would count nothing: refused before anything runs.
#[test]
fn a_cpu_clock_period_longer_than_the_spin_is_refused() {
    let out = common::rtapi(&[
        "compare-timers",
        "--cpu-clock-periods",
        "1ms,2s",
        "--cpu-clock-duration",
        "1s",
    ]);
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--cpu-clock-periods: 2s is longer than --cpu-clock-duration 1s"),
        "{stderr}"
    );
}
