//! What users run today to check a NIC for a Mesa card, `chrt 90 ping -i .001 BOARD`, against
//! `rtapi latency-test --board BOARD`, to the same address from the same namespace, one after the
//! other (never at once: they would disturb each other), alternated.
//!
//! ```text
//! cargo bench --bench board_vs_ping -- [--seconds N] [--rounds R]
//! ```
//!
//! The card is `rtapi mesa-sim` (a 7I96S) on CPU 0 in the board namespace of a veth pair of the
//! bench's own (tests/common/netns.rs: 192.0.2.0/24, no route out, gone when the bench ends). Each
//! round runs, in the host namespace, on CPU 1:
//!
//! - **rtapi**: `rtapi latency-test --board B --base 0 --servo 1ms --duration Ns --cpu 1 --json -`:
//!   each servo period (SCHED_FIFO) one LBP16 read of 24 bytes, a 48-byte reply from the
//!   simulator's UDP server (user space), waited for by spinning on a non-blocking `recv` as
//!   hm2_eth does; the round trip is send to `recv`, user space to user space. Figures from the
//!   JSON's `board` object: `rtt_ns` (percentiles are upper edges of 1 µs bins, max exact),
//!   `on_time + late` replies, `lost`.
//! - **ping**: `chrt -f 90 taskset -c 1 ping -i 0.001 -c N·1000 -W 1 B` (64-byte ICMP echo, 56 data
//!   bytes), every `time=` line parsed. The echo is answered by the board namespace's *kernel*
//!   (ICMP in softirq), not by the simulator. iputils takes the reply's time from the kernel's
//!   receive timestamp (SO_TIMESTAMP), so its `time=` leaves out the wake-up of the sleeping ping;
//!   it prints microseconds truncated (3 decimals of ms below 1 ms, 2 from 1 ms, …).
//! - **ping -U**: the same with `-U` (iputils: user-to-user latency, the reply's time taken by
//!   ping after it woke), the quantity closest to rtapi's.
//!
//! Checked before a ratio is printed: rtapi ran a SCHED_FIFO flavor (`system.flavor` `posix` or
//! `rt-preempt`) with its servo thread at a real-time priority on CPU 1 (the JSON's `threads`);
//! ping's policy and priority read from `/proc/PID/stat` while it runs (SCHED_FIFO 90, its CPU
//! list from `/proc/PID/status`); each side got at least 90 % of the N·1000 replies.

// The tests' helper tree, named by path (a bench target lives outside `tests/`).
#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::lcnc_machine::proc_sched;
use common::netns::Link;
use common::sim_process::{Lines, SimProcess};
use serde_json::Value;

/// One side's figures over one run, µs.
#[derive(Debug, Clone)]
struct Figures {
    tool: String,
    sent: u64,
    replies: u64,
    /// Replies after 800 µs (rtapi: `late`, after its budget, 80 % of the period).
    over_800: u64,
    p50: f64,
    p99: f64,
    max: f64,
    lost: u64,
    /// How it was scheduled, as verified.
    sched: String,
}

fn arg_after(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

/// `rtapi latency-test --board` in the host namespace.
fn rtapi(link: &Link, seconds: u64, round: u64) -> Result<Figures, String> {
    let instance = format!("bvp{}-{round}", std::process::id());
    let out = link
        .host
        .command(env!("CARGO_BIN_EXE_rtapi"))
        .args(["latency-test", "--board", &link.board_ip.to_string()])
        .args(["--base", "0", "--servo", "1ms", "--cpu", "1"])
        .args(["--duration", &format!("{seconds}s"), "--json", "-"])
        .args(["--instance", &instance, "--quiet"])
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("rtapi: {e}"))?;
    let (stdout, stderr) = common::text(&out);
    if !out.status.success() {
        return Err(format!("rtapi latency-test failed: {stderr}"));
    }
    let v: Value = serde_json::from_str(&stdout).map_err(|e| format!("{e}: {stdout}"))?;
    let flavor = v["system"]["flavor"].as_str().unwrap_or("?");
    let servo = v["threads"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "servo"))
        .ok_or("no servo thread in the JSON")?;
    let prio = servo["priority"].as_i64().unwrap_or(0);
    if !matches!(flavor, "posix" | "rt-preempt") || prio < 1 || servo["cpu"].as_u64() != Some(1) {
        return Err(format!(
            "rtapi ran flavor {flavor}, priority {prio}, CPU {}: not SCHED_FIFO on CPU 1",
            servo["cpu"]
        ));
    }
    let b = &v["board"];
    let n = |key: &str| b[key].as_u64().ok_or(format!("board.{key} missing: {b:#}"));
    let us = |key: &str| {
        b["rtt_ns"][key]
            .as_f64()
            .map(|ns| ns / 1000.0)
            .ok_or(format!("board.rtt_ns.{key} missing"))
    };
    // Where the late replies were: the seconds of the run whose worst round trip passed 800 µs.
    let late_seconds: Vec<String> = b["max_rtt_per_second_ns"]
        .as_array()
        .map(|s| {
            s.iter()
                .enumerate()
                .filter(|(_, ns)| ns.as_u64().unwrap_or(0) > 800_000)
                .map(|(i, ns)| format!("s{i}: {:.1} ms", ns.as_f64().unwrap_or(0.0) / 1e6))
                .collect()
        })
        .unwrap_or_default();
    if !late_seconds.is_empty() {
        eprintln!(
            "rtapi: worst round trip past 800 µs in {}",
            late_seconds.join(", ")
        );
    }
    Ok(Figures {
        tool: "rtapi --board".into(),
        sent: n("sent")?,
        replies: n("on_time")? + n("late")?,
        over_800: n("late")?,
        p50: us("p50")?,
        p99: us("p99")?,
        max: us("max")?,
        lost: n("lost")?,
        sched: format!("SCHED_FIFO {prio} ({flavor}), CPU 1"),
    })
}

/// The policy and real-time priority of `pid` once it runs `comm` (tests/common/lcnc_machine.rs's
/// reading of `/proc/PID/stat`), and its allowed CPUs; `None` if it ended first.
fn sched_of(pid: u32, comm: &str) -> Option<(String, u32, String)> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        let (now, policy, prio) = proc_sched(&pid.to_string())?;
        if now == comm {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_string();
            return Some((policy, prio, cpus));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// The value `key=VALUE` in `line`, up to the next space.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    line[at..].split_whitespace().next()
}

/// `chrt -f 90 taskset -c 1 ping …` in the host namespace, with `more` options.
fn ping(link: &Link, seconds: u64, more: &[&str]) -> Result<Figures, String> {
    let count = seconds * 1000;
    let mut c = link.host.command("chrt");
    c.args(["-f", "90", "taskset", "-c", "1", "ping"])
        .args(more)
        .args(["-i", "0.001", "-c", &count.to_string(), "-W", "1"])
        .arg(link.board_ip.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child: Child = c.spawn().map_err(|e| format!("chrt: {e}"))?;
    let lines = Lines::of(&mut child);
    // `ip netns exec`, chrt and taskset each exec the next: the child's pid becomes ping's.
    let sched = sched_of(child.id(), "ping");
    let status = child.wait().map_err(|e| e.to_string())?;
    // The reader threads may still hold the last lines: wait for the summary.
    let t0 = Instant::now();
    while !lines.has("packets transmitted") && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = lines.text();
    let Some((policy, prio, cpus)) = sched else {
        return Err(format!("ping ended before its scheduling was read: {text}"));
    };
    if policy != "SCHED_FIFO" || prio != 90 || cpus != "1" {
        return Err(format!(
            "ping ran policy {policy} priority {prio} on CPUs {cpus}: not SCHED_FIFO 90 on CPU 1"
        ));
    }
    // Exit 1: some reply missing (counted below); 2: an error.
    if !matches!(status.code(), Some(0 | 1)) {
        return Err(format!("ping: {status}: {text}"));
    }
    let mut us: Vec<f64> = text
        .lines()
        .filter(|l| l.contains("icmp_seq="))
        .filter_map(|l| field(l, "time=")?.parse::<f64>().ok())
        .map(|ms| (ms * 1000.0).round())
        .collect();
    let summary = text
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .ok_or(format!("no summary line: {text}"))?;
    let number_before = |word: &str| -> Option<u64> {
        let words: Vec<&str> = summary.split_whitespace().collect();
        let i = words.iter().position(|w| w.trim_end_matches(',') == word)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    let sent = number_before("packets").ok_or(format!("transmitted? {summary}"))?;
    let received = number_before("received").ok_or(format!("received? {summary}"))?;
    if us.is_empty() {
        return Err(format!("no reply line: {text}"));
    }
    us.sort_by(f64::total_cmp);
    let rank = |q: f64| us[((q * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1];
    Ok(Figures {
        tool: format!(
            "ping{}",
            more.iter().map(|m| format!(" {m}")).collect::<String>()
        ),
        sent,
        replies: us.len() as u64,
        over_800: us.iter().filter(|&&t| t > 800.0).count() as u64,
        p50: rank(0.5),
        p99: rank(0.99),
        max: *us.last().unwrap(),
        lost: sent.saturating_sub(received),
        sched: format!("{policy} {prio} (/proc), CPUs {cpus}"),
    })
}

/// The mean of the rounds' figures.
fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds = arg_after(&args, "--seconds").unwrap_or(10).max(1);
    let rounds = arg_after(&args, "--rounds").unwrap_or(2).max(1);
    if let Some(why) = common::netns::missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("SKIPPED: needs two CPUs (the card on 0, the measuring side on 1)");
        return;
    }
    if !std::path::Path::new("/usr/bin/ping").exists() {
        eprintln!("SKIPPED: no /usr/bin/ping (iputils-ping)");
        return;
    }
    let link = Link::new("bvp").expect("a veth pair between two namespaces");
    let sim = SimProcess::start_on(&link, "7i96s", &[], Some(0));
    let want = seconds * 1000;
    println!(
        "board {} (rtapi mesa-sim 7I96S on CPU 0, namespace {}); measuring from {} on CPU 1",
        link.board_ip, link.board.name, link.host.name
    );
    println!(
        "{seconds} s per run ({want} requests at 1 ms), {rounds} round(s), one run at a time\n"
    );
    println!(
        "{:<6}{:<15}{:>7}{:>9}{:>9}{:>9}{:>9}{:>7}{:>9}  scheduling (verified)",
        "round", "tool", "sent", "replies", "p50 µs", "p99 µs", "max µs", "lost", ">800 µs"
    );
    let mut all: Vec<Figures> = Vec::new();
    let mut ok = true;
    for round in 1..=rounds {
        let runs = [
            rtapi(&link, seconds, round),
            ping(&link, seconds, &[]),
            ping(&link, seconds, &["-U"]),
        ];
        for r in runs {
            match r {
                Ok(f) => {
                    println!(
                        "{round:<6}{:<15}{:>7}{:>9}{:>9.1}{:>9.1}{:>9.1}{:>7}{:>9}  {}",
                        f.tool, f.sent, f.replies, f.p50, f.p99, f.max, f.lost, f.over_800, f.sched
                    );
                    if f.replies * 10 < want * 9 {
                        println!("      {}: fewer than 90 % of {want} replies", f.tool);
                        ok = false;
                    }
                    all.push(f);
                }
                Err(e) => {
                    println!("{round:<6}failed: {e}");
                    ok = false;
                }
            }
        }
    }
    drop(sim);
    if !ok {
        println!("\nno ratio: a run failed its checks");
        std::process::exit(1);
    }
    let of = |tool: &str, pick: fn(&Figures) -> f64| -> Vec<f64> {
        all.iter().filter(|f| f.tool == tool).map(pick).collect()
    };
    println!();
    for other in ["ping", "ping -U"] {
        let ratio = |pick: fn(&Figures) -> f64| {
            let (r, p) = (of("rtapi --board", pick), of(other, pick));
            let each: Vec<String> = r
                .iter()
                .zip(&p)
                .map(|(r, p)| format!("{:.2}", r / p.max(1.0)))
                .collect();
            (mean(&r) / mean(&p).max(1.0), each.join(", "))
        };
        let ((p50, p50s), (p99, p99s)) = (ratio(|f| f.p50), ratio(|f| f.p99));
        println!(
            "rtapi ÷ {other:<8} (means of rounds) p50 {p50:.2} (rounds: {p50s}), p99 {p99:.2} (rounds: {p99s})"
        );
    }
    println!(
        "\nrtapi's percentiles are upper edges of 1 µs bins, ping's its printed µs (truncated): \
         ping's read up to 1 µs lower. ping is answered by the board namespace's kernel, rtapi by \
         the simulator's UDP server."
    );
}
