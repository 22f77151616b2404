//! `rtapi compare-timers`' CPU-clock timers, on real threads and real timers: what each row counted
//! agrees with the CPU time the spinning thread really consumed, and the rows say so.

mod common;

use serde_json::Value;

const SHORT_NS: u64 = 200_000;
const LONG_NS: u64 = 25_000_000;

fn field(r: &Value, key: &str) -> u64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {r}"))
}

/// Whether `counted · period` is `cpu` within a generous bound: 10 % of it, plus two periods (one
/// partial at each end), plus 10 ms (the expirations of the last kernel tick — at most 10 ms at
/// CONFIG_HZ 100 — not yet signalled when the timer is disarmed).
fn agrees(counted: u64, period: u64, cpu: u64) -> bool {
    (counted * period).abs_diff(cpu) <= cpu / 10 + 2 * period + 10_000_000
}

/// A thread spins with every CPU-clock timer armed, at a period far shorter than the kernel's tick
/// and at one longer than two ticks: each POSIX timer's signals plus overruns add up to the CPU time
/// its clock consumed at both; each itimer's signals do at the long period, and never count more
/// than the CPU time at the short one (where the kernel gives them at most one signal per tick). The
/// thread clock row reports a CPU time that is real (positive) and no more than the wall time.
#[test]
fn cpu_clock_timers_count_the_cpu_time_consumed() {
    let instance = format!("cpuclk-{}", std::process::id());
    let out = common::rtapi(&[
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
    let (stdout, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    // The wake mechanisms' rows are still there, unchanged in form.
    assert_eq!(v["rows"].as_array().unwrap().len(), 7, "{v}");
    let section = &v["cpu_clock"];
    assert_eq!(section["periods_ns"], serde_json::json!([SHORT_NS, LONG_NS]));
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
        assert!((r["error_pct"].as_f64().unwrap() - error).abs() < 1e-6, "{r}");
        if timer.contains("THREAD") {
            // A thread's CPU time cannot run faster than the wall clock; and this one spun, so it
            // got a real share of it even on a loaded machine.
            assert!(cpu <= real, "{r}");
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
