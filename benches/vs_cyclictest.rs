//! rtapi's servo thread against cyclictest, alternating runs on the same CPU, same priority, same
//! period: the ratio of their latency figures says what our runtime costs (or saves) on this machine.
//! Absolute numbers depend on the machine; the ratio is the result.
//!
//! `cargo bench --bench vs_cyclictest` (needs cyclictest from rt-tests; run as root).
//! `RTAPI_BENCH_ROUNDS` (default 3) and `RTAPI_BENCH_SECS` (default 5) set the size.

use serde_json::Value;
use std::process::Command;

#[derive(Debug, Clone, Copy)]
struct Figures {
    cycles: u64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The q-quantile of a histogram of 1 µs bins given as (bin, count).
fn quantile(bins: &[(u64, u64)], total: u64, q: f64) -> f64 {
    let rank = (q * total as f64).ceil() as u64;
    let mut seen = 0;
    for &(bin, count) in bins {
        seen += count;
        if seen >= rank {
            return bin as f64 + 1.0;
        }
    }
    bins.last().map_or(0.0, |b| b.0 as f64 + 1.0)
}

fn cyclictest(cpu: usize, secs: u64, file: &str) -> Option<Figures> {
    let status = Command::new("cyclictest")
        .args([
            "-m",
            "-p",
            "98",
            "-i",
            "1000",
            "-a",
            &cpu.to_string(),
            "-D",
            &secs.to_string(),
            "-q",
            "-h",
            "10000",
        ])
        .arg(format!("--json={file}"))
        .output()
        .ok()?;
    if !status.status.success() {
        return None;
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let t = &v["thread"]["0"];
    let mut bins: Vec<(u64, u64)> = t["histogram"]
        .as_object()?
        .iter()
        .filter_map(|(k, c)| Some((k.parse().ok()?, c.as_u64()?)))
        .collect();
    bins.sort_unstable();
    let total: u64 = bins.iter().map(|b| b.1).sum();
    Some(Figures {
        cycles: t["cycles"].as_u64()?,
        p50_us: quantile(&bins, total, 0.5),
        p99_us: quantile(&bins, total, 0.99),
        p999_us: quantile(&bins, total, 0.999),
        max_us: t["max"].as_f64()?,
    })
}

/// rtapi's servo thread alone: SCHED_FIFO 98 (the fastest, and only, thread), like cyclictest -p 98.
fn rtapi(cpu: usize, secs: u64, file: &str, wake: &str) -> Option<Figures> {
    let out = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args([
            "latency-test",
            "--base",
            "0",
            "--servo",
            "1ms",
            "--quiet",
            "--instance",
            &format!("bench-{}", std::process::id()),
            "--wake",
            wake,
        ])
        .args([
            "--cpu",
            &cpu.to_string(),
            "--duration",
            &format!("{secs}s"),
            "--json",
            file,
        ])
        .env("RUST_LOG", "error")
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!("rtapi: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let t = &v["threads"][0];
    // Compare only what was claimed: a real-time flavor, SCHED_FIFO 98 like `cyclictest -p 98`,
    // pinned to the CPU asked for.
    let flavor = v["system"]["flavor"].as_str().unwrap_or("?");
    if !matches!(flavor, "posix" | "rt-preempt")
        || t["priority"].as_i64() != Some(98)
        || t["cpu"].as_u64() != Some(cpu as u64)
    {
        eprintln!(
            "rtapi ran flavor {flavor}, priority {}, CPU {}: not comparable to cyclictest -p 98 -a {cpu}",
            t["priority"], t["cpu"]
        );
        return None;
    }
    let l = &t["latency_ns"];
    Some(Figures {
        cycles: t["cycles"].as_u64()?,
        p50_us: l["p50"].as_f64()? / 1000.0,
        p99_us: l["p99"].as_f64()? / 1000.0,
        p999_us: l["p999"].as_f64()? / 1000.0,
        max_us: l["max"].as_f64()? / 1000.0,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if Command::new("cyclictest").arg("--help").output().is_err() {
        eprintln!("cyclictest not found: apt-get install rt-tests");
        return;
    }
    let (rounds, secs) = (
        env_or("RTAPI_BENCH_ROUNDS", 3),
        env_or("RTAPI_BENCH_SECS", 5),
    );
    let cpu = std::thread::available_parallelism().map_or(0, |n| n.get() - 1);
    let dir = std::env::temp_dir();
    let (ct_file, rt_file) = (
        dir.join("rtapi-bench-ct.json"),
        dir.join("rtapi-bench-rt.json"),
    );
    println!("servo 1 ms on CPU {cpu}, SCHED_FIFO 98, {rounds} × {secs} s each, alternating\n");
    println!(
        "{:<6}{:<14}{:>8}{:>10}{:>10}{:>10}{:>10}",
        "round", "tool", "cycles", "p50 µs", "p99 µs", "p99.9 µs", "max µs"
    );
    let mut ratios = (Vec::new(), Vec::new(), Vec::new());
    let mut hybrid_p50 = Vec::new();
    for round in 1..=rounds {
        let ct = cyclictest(cpu, secs, ct_file.to_str().unwrap());
        let rt = rtapi(cpu, secs, rt_file.to_str().unwrap(), "sleep");
        let hy = rtapi(cpu, secs, rt_file.to_str().unwrap(), "hybrid");
        for (tool, f) in [
            ("cyclictest", ct),
            ("rtapi sleep", rt),
            ("rtapi hybrid", hy),
        ] {
            match f {
                Some(f) => println!(
                    "{round:<6}{tool:<14}{:>8}{:>10.1}{:>10.1}{:>10.1}{:>10.1}",
                    f.cycles, f.p50_us, f.p99_us, f.p999_us, f.max_us
                ),
                None => println!("{round:<6}{tool:<14} failed"),
            }
        }
        if let Some(h) = hy {
            hybrid_p50.push(h.p50_us);
        }
        if let (Some(c), Some(r)) = (ct, rt) {
            ratios.0.push(r.p50_us / c.p50_us.max(0.1));
            ratios.1.push(r.p99_us / c.p99_us.max(0.1));
            ratios.2.push(r.max_us / c.max_us.max(0.1));
        }
    }
    if !ratios.0.is_empty() {
        println!(
            "\nrtapi / cyclictest (median of rounds): p50 {:.2}, p99 {:.2}, max {:.2}",
            median(ratios.0),
            median(ratios.1),
            median(ratios.2)
        );
    }
    if !hybrid_p50.is_empty() {
        println!(
            "rtapi hybrid p50 (median of rounds): {:.1} µs (1 µs bins: 1.0 means under 1 µs)",
            median(hybrid_p50)
        );
    }
}
