//! `latency-test --trace` names an injected cause (issue 11, part 1): a SCHED_FIFO 99 thread named
//! `spinner`, pinned to the measured CPU, spins 0.8 ms every 100 ms; the worst spikes of the 1 ms servo
//! thread must be attributed to that task, by name, from the trace — nothing on the RT path changes.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
}

#[test]
fn trace_names_an_injected_fifo_task_as_the_cause_of_the_worst_spikes() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("--trace needs root (tracefs instances)");
    }
    if !std::path::Path::new("/sys/kernel/tracing/instances").exists() {
        return skip("tracefs is not mounted at /sys/kernel/tracing (mount -t tracefs nodev /sys/kernel/tracing)");
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        return skip("needs two CPUs (one measured, one for the test itself)");
    }
    let cpu = cpus - 1;

    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let spinner = std::thread::Builder::new()
        .name("spinner".into())
        .spawn(move || {
            let mut set = nix::sched::CpuSet::new();
            set.set(cpu).unwrap();
            nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
            let param = libc::sched_param { sched_priority: 99 };
            // SAFETY: `param` is valid; 0 = the calling thread.
            assert_eq!(
                unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) },
                0
            );
            while !s.load(Ordering::Relaxed) {
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(800) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args([
            "latency-test",
            "--base",
            "0",
            "--servo",
            "1ms",
            "--duration",
            "4s",
            "--cpu",
            &cpu.to_string(),
            "--trace",
            "--quiet",
            "--json",
            "-",
            "--instance",
            &format!("trace-lt-{}", std::process::id()),
        ])
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let servo = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "servo")
        .unwrap();
    let spikes = servo["spikes"].as_array().unwrap();
    // The spinner's bursts: late by most of 0.8 ms.
    let burst: Vec<&serde_json::Value> = spikes
        .iter()
        .filter(|s| s["latency_ns"].as_u64().unwrap() >= 500_000)
        .collect();
    let named = burst
        .iter()
        .filter(|s| {
            s["causes"]
                .as_array()
                .and_then(|c| c.first())
                .and_then(|c| c["text"].as_str())
                .is_some_and(|c| c.contains("task spinner"))
        })
        .count();
    eprintln!(
        "{} spikes kept, {} from the bursts, {named} named 'spinner' first:",
        spikes.len(),
        burst.len()
    );
    for s in spikes {
        eprintln!("  {} ns: {}", s["latency_ns"], s["causes"]);
    }
    assert!(burst.len() >= 5, "the bursts made spikes ({})", burst.len());
    // Every kept spike was read from the trace. Over runs here 3 to 8 of 8 bursts named the spinner:
    // the others show only a local timer (a run the trace does not show; issue 11 has it open), so
    // this asserts that the task is found at all and that no burst is blamed on another task.
    assert!(
        named >= 2,
        "{named} of {} burst spikes named the spinner",
        burst.len()
    );
    let blamed_elsewhere: Vec<&str> = burst
        .iter()
        .filter_map(|s| s["causes"].as_array()?.first()?["text"].as_str())
        .filter(|c| c.starts_with("task ") && !c.contains("task spinner"))
        // `task NAME (pid N, prio P): 813.0 µs`: only a task that took most of a burst is a wrong
        // blame; a few µs of another task after the timer expired is real and harmless.
        .filter(|c| {
            c.rsplit_once("): ")
                .and_then(|(_, d)| d.split(' ').next()?.parse::<f64>().ok())
                .is_some_and(|us| us >= 300.0)
        })
        .collect();
    assert!(
        blamed_elsewhere.is_empty(),
        "bursts blamed on another task: {blamed_elsewhere:?}"
    );
    assert!(
        !std::fs::read_dir("/sys/kernel/tracing/instances")
            .unwrap()
            .any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("rtapi-")),
        "the trace instance was removed"
    );
}
