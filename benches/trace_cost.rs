//! What `latency-test --trace` costs the latency it measures: the default threads (base 25 µs and
//! servo 1 ms on one CPU), runs with and without `--trace` alternating on the same CPU, and the
//! ratio traced / untraced of each thread's p50 and p90 (and exact mean). The tracing happens in the
//! kernel on the RT CPU (a few hundred ns per event); reading and decoding happen on the other CPUs.
//! The RT threads' own wakes are filtered out in the kernel once the follower knows their tids
//! (`TraceSession::skip_own_wakes`); the local timer interrupt's entry and exit stay on each wake
//! path (the same vector is the tick). A task of another process on the RT CPU is recorded whole,
//! RT wakes under it included: run on a quiet RT CPU to see what the trace itself costs. Each
//! latency is a 1 µs histogram bin, so at a 20 µs p50 one bin is a ratio of 1.05.
//! Aim: p50/p90 ratio ≤ 1.05 (median of the rounds, each round's ratio printed with the spread).
//!
//! `cargo bench --bench trace_cost` (root, tracefs). `RTAPI_BENCH_ROUNDS` (default 4) and
//! `RTAPI_BENCH_SECS` (default 5) set the size. Each run's JSON is checked for what it claims to
//! have measured (a real-time flavor, SCHED_FIFO priorities, the pinned CPU; for the traced runs, a
//! trace read from tracefs with no events lost) before any ratio is printed.

use serde_json::Value;
use std::process::Command;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One thread's figures from a run: p50 and p90 from the 1 µs histogram (upper bin edge), the exact
/// mean, in µs.
#[derive(Debug, Clone, Copy)]
struct Figures {
    p50: f64,
    p90: f64,
    mean: f64,
}

fn quantile(counts: &[u64], overflow: u64, q: f64) -> f64 {
    let total: u64 = counts.iter().sum::<u64>() + overflow;
    let rank = (q * total as f64).ceil() as u64;
    let mut seen = 0;
    for (bin, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return bin as f64 + 1.0;
        }
    }
    f64::NAN
}

/// Runs one latency test; `None` (with why on stderr) if it failed or did not measure what it
/// claims.
fn run(cpu: usize, secs: u64, traced: bool, file: &str) -> Option<[Figures; 2]> {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args([
        "latency-test",
        "--cpu",
        &cpu.to_string(),
        "--duration",
        &format!("{secs}s"),
        "--quiet",
        "--json",
        file,
        "--instance",
        &format!("bench-trace-{}", std::process::id()),
    ]);
    if traced {
        c.arg("--trace");
    }
    let out = c.env("RUST_LOG", "error").output().ok()?;
    if !out.status.success() {
        eprintln!("rtapi: {}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).ok()?).ok()?;
    let flavor = v["system"]["flavor"].as_str().unwrap_or("?");
    if flavor != "posix" && flavor != "rt-preempt" {
        eprintln!("run was not real time (flavor {flavor}): not comparable");
        return None;
    }
    if traced {
        let t = &v["trace"];
        if t["method"] != "trace" || t["lost_events"] != 0 {
            eprintln!("the traced run did not trace everything: {t}");
            return None;
        }
    } else if !v["trace"].is_null() {
        eprintln!("the untraced run traced");
        return None;
    }
    let mut out = [Figures {
        p50: 0.0,
        p90: 0.0,
        mean: 0.0,
    }; 2];
    for (i, name) in ["base", "servo"].iter().enumerate() {
        let t = v["threads"]
            .as_array()?
            .iter()
            .find(|t| t["name"] == *name)?;
        let prio = t["priority"].as_i64().unwrap_or(0);
        if prio < 1 || t["cpu"].as_u64() != Some(cpu as u64) || t["cycles"].as_u64() == Some(0) {
            eprintln!(
                "{name}: priority {prio}, cpu {}, cycles {}: not what was asked",
                t["cpu"], t["cycles"]
            );
            return None;
        }
        let counts: Vec<u64> = t["histogram"]["counts"]
            .as_array()?
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        let overflow = t["histogram"]["overflow"].as_u64()?;
        out[i] = Figures {
            p50: quantile(&counts, overflow, 0.5),
            p90: quantile(&counts, overflow, 0.9),
            mean: t["latency_ns"]["mean"].as_f64()? / 1000.0,
        };
    }
    Some(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: --trace needs root");
        return;
    }
    let (rounds, secs) = (
        env_or("RTAPI_BENCH_ROUNDS", 4),
        env_or("RTAPI_BENCH_SECS", 5),
    );
    let cpu = std::thread::available_parallelism().map_or(0, |n| n.get() - 1);
    let file = std::env::temp_dir().join(format!("rtapi-bench-trace-{}.json", std::process::id()));
    let file = file.to_str().unwrap();
    println!(
        "base 25 µs + servo 1 ms on CPU {cpu}, {rounds} rounds × {secs} s, untraced and traced alternating\n"
    );
    println!(
        "{:<6}{:<10}{:>9}{:>9}{:>9}{:>10}{:>10}{:>10}",
        "round", "run", "base p50", "p90", "mean", "servo p50", "p90", "mean"
    );
    let mut ratios: [Vec<f64>; 6] = Default::default();
    for round in 1..=rounds {
        // Alternate which goes first, so a drift of the machine's load does not favour one.
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        let mut got = [None, None];
        for traced in order {
            let f = run(cpu, secs, traced, file);
            let label = if traced { "traced" } else { "untraced" };
            match f {
                Some([b, s]) => println!(
                    "{round:<6}{label:<10}{:>9.1}{:>9.1}{:>9.2}{:>10.1}{:>10.1}{:>10.2}",
                    b.p50, b.p90, b.mean, s.p50, s.p90, s.mean
                ),
                None => println!("{round:<6}{label:<10} failed (see above)"),
            }
            got[usize::from(traced)] = f;
        }
        if let [Some(u), Some(t)] = got {
            for (i, (u, t)) in u.iter().zip(&t).enumerate() {
                ratios[3 * i].push(t.p50 / u.p50);
                ratios[3 * i + 1].push(t.p90 / u.p90);
                ratios[3 * i + 2].push(t.mean / u.mean);
            }
        }
    }
    let _ = std::fs::remove_file(file);
    if ratios[0].is_empty() {
        println!("\nno round gave both runs: no ratio");
        return;
    }
    let n = ratios[0].len();
    let spread = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.2}–{hi:.2}")
    };
    let ranges = ratios.each_ref().map(|v| spread(v));
    let [bp50, bp90, bmean, sp50, sp90, smean] = ratios.map(median);
    println!(
        "\ntraced / untraced (median of {} rounds): base p50 {bp50:.2}, p90 {bp90:.2}, mean {bmean:.2}; servo p50 {sp50:.2}, p90 {sp90:.2}, mean {smean:.2} (aim ≤ 1.05)",
        n
    );
    println!(
        "spread (min–max of the rounds): base p50 {}, p90 {}, mean {}; servo p50 {}, p90 {}, mean {}",
        ranges[0], ranges[1], ranges[2], ranges[3], ranges[4], ranges[5]
    );
}
