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
    p90_us: f64,
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
        p90_us: quantile(&bins, total, 0.9),
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
    // p90 from the report's histogram, by the same rule as cyclictest's (upper edge of 1 µs bins).
    let h = &t["histogram"];
    let bin_ns = h["bin_ns"].as_u64()?;
    if bin_ns != 1000 {
        eprintln!("rtapi's histogram has {bin_ns} ns bins, not cyclictest's 1 µs");
        return None;
    }
    let mut bins: Vec<(u64, u64)> = h["counts"]
        .as_array()?
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i as u64, c.as_u64()?)))
        .filter(|b| b.1 > 0)
        .collect();
    let overflow = h["overflow"].as_u64()?;
    let n = h["counts"].as_array()?.len() as u64;
    if overflow > 0 {
        bins.push((n, overflow));
    }
    let total: u64 = bins.iter().map(|b| b.1).sum();
    Some(Figures {
        cycles: t["cycles"].as_u64()?,
        p90_us: quantile(&bins, total, 0.9),
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

/// `median (min–max)` of a list of ratios; NaN when a ratio is NaN (never dropped).
fn spread(v: &[f64]) -> (f64, f64, f64) {
    if v.iter().any(|r| r.is_nan()) {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(v.to_vec()), lo, hi)
}

const PERCENTILES: [&str; 4] = ["p50", "p90", "p99", "max"];

fn figures(f: &Figures) -> [f64; 4] {
    [f.p50_us, f.p90_us, f.p99_us, f.max_us]
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
    println!(
        "servo 1 ms on CPU {cpu}, SCHED_FIFO 98, {rounds} × {secs} s each, alternating (the order swapped every round)\n"
    );
    println!(
        "{:<6}{:<14}{:>8}{:>9}{:>9}{:>9}{:>10}{:>10}",
        "round", "tool", "cycles", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs"
    );
    let mut ratios: Vec<[f64; 4]> = Vec::new();
    let mut cyclictests: Vec<Option<[f64; 4]>> = Vec::new();
    let mut hybrid_p50 = Vec::new();
    for round in 1..=rounds {
        let ct_run = || cyclictest(cpu, secs, ct_file.to_str().unwrap());
        let rt_run = || rtapi(cpu, secs, rt_file.to_str().unwrap(), "sleep");
        // Alternated: cyclictest first in odd rounds, rtapi first in even ones, so that a drift of
        // the host over a round weighs on both alike.
        let (ct, rt) = if round % 2 == 1 {
            let c = ct_run();
            (c, rt_run())
        } else {
            let r = rt_run();
            (ct_run(), r)
        };
        let hy = rtapi(cpu, secs, rt_file.to_str().unwrap(), "hybrid");
        for (tool, f) in [
            ("cyclictest", ct),
            ("rtapi sleep", rt),
            ("rtapi hybrid", hy),
        ] {
            match f {
                Some(f) => println!(
                    "{round:<6}{tool:<14}{:>8}{:>9.1}{:>9.1}{:>9.1}{:>10.1}{:>10.1}",
                    f.cycles, f.p50_us, f.p90_us, f.p99_us, f.p999_us, f.max_us
                ),
                None => println!("{round:<6}{tool:<14} failed"),
            }
        }
        if let Some(h) = hy {
            hybrid_p50.push(h.p50_us);
        }
        if let (Some(c), Some(r)) = (ct, rt) {
            let (c, r) = (figures(&c), figures(&r));
            ratios.push(std::array::from_fn(|i| r[i] / c[i].max(0.1)));
        }
        cyclictests.push(ct.as_ref().map(figures));
    }
    if ratios.is_empty() {
        println!("\nno round gave a ratio");
        return;
    }
    // The control: cyclictest against itself a round apart, the spread the host alone makes.
    let control: Vec<[f64; 4]> = cyclictests
        .windows(2)
        .filter_map(|w| match (w[0], w[1]) {
            (Some(a), Some(b)) => Some(std::array::from_fn(|i| b[i] / a[i].max(0.1))),
            _ => None,
        })
        .collect();
    println!(
        "\nrtapi sleep / cyclictest, median (range) of {} rounds, and cyclictest / cyclictest a round apart ({} pairs):",
        ratios.len(),
        control.len()
    );
    for (i, name) in PERCENTILES.iter().enumerate() {
        let (m, lo, hi) = spread(&ratios.iter().map(|r| r[i]).collect::<Vec<_>>());
        let mut line = format!("  {name:<4} {m:.2} ({lo:.2}–{hi:.2})");
        let verdict = if control.is_empty() {
            line.push_str("   control: none (one round)");
            if m <= 1.05 {
                "≤ 1.05"
            } else {
                "ABOVE 1.05 (no control to judge the host's spread)"
            }
        } else {
            let (cm, clo, chi) = spread(&control.iter().map(|r| r[i]).collect::<Vec<_>>());
            line.push_str(&format!("   control {cm:.2} ({clo:.2}–{chi:.2})"));
            if m <= 1.05 {
                "≤ 1.05"
            } else if m <= chi {
                "inside the control's spread"
            } else {
                "ABOVE 1.05 and the control's spread"
            }
        };
        if *name != "max" {
            line.push_str(&format!("   {verdict}"));
        }
        println!("{line}");
    }
    if !hybrid_p50.is_empty() {
        println!(
            "rtapi hybrid p50 (median of rounds): {:.1} µs (1 µs bins: 1.0 means under 1 µs)",
            median(hybrid_p50)
        );
    }
}
