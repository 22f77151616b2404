//! `rtapi latency-test --all-cpus` end to end: the real binary surveys the real CPUs of this machine.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn survey(instance: &str, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtapi"));
    c.args(["latency-test", "--all-cpus", "--instance"])
        .arg(format!("{instance}-{}", std::process::id()))
        .args(args)
        .env_remove("RTAPI_FLAVOR")
        .env("RUST_LOG", "error");
    c
}

fn online_cpus() -> Vec<u64> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u64>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// The CPU numbers of the text table's rows (the lines under the `CPU  isolated …` heading).
fn table_cpus(text: &str) -> Vec<u64> {
    text.lines()
        .skip_while(|l| !l.starts_with("CPU  isolated"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with('('))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect()
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The smallest of `values`: a NaN among them fails the test (f64::min would drop it).
fn least(values: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.collect();
    assert!(v.iter().all(|x| !x.is_nan()), "not a number among {v:?}");
    v.into_iter().reduce(f64::min).unwrap_or(f64::INFINITY)
}

/// The documented rule, computed here from the JSON's numbers: the lowest worst case (within
/// max(5 µs, 10 %) of the best counts as equal), then the lowest p99.9, then the fewest interrupts per
/// second that cannot be moved (every kind but `movable`), then the highest CPU number.
fn rule(cpus: &[serde_json::Value]) -> Option<u64> {
    let c: Vec<(u64, f64, f64, f64)> = cpus
        .iter()
        .filter(|c| c["status"] == "measured")
        .map(|c| {
            let fixed: f64 = c["interrupts"]["irqs"]["sources"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter(|s| s["kind"] != "movable")
                        .map(|s| f(&s["per_s"]))
                        .sum()
                })
                .unwrap_or(0.0);
            (
                c["cpu"].as_u64().unwrap(),
                f(&c["worst_latency_ns"]),
                f(&c["p999_ns"]),
                fixed,
            )
        })
        .collect();
    let best = least(c.iter().map(|x| x.1));
    let limit = best + (best * 0.10).floor().max(5000.0);
    let c: Vec<_> = c.into_iter().filter(|x| x.1 <= limit).collect();
    let best = least(c.iter().map(|x| x.2));
    let c: Vec<_> = c.into_iter().filter(|x| x.2 == best).collect();
    let best = least(c.iter().map(|x| x.3));
    c.into_iter().filter(|x| x.3 <= best).map(|x| x.0).max()
}

/// Each source's count and rate and their totals agree; rates are per second of the run.
fn check_load(cpu: u64, what: &str, load: &serde_json::Value) {
    let seconds = f(&load["seconds"]);
    let l = &load[what];
    assert!(l.is_object(), "CPU {cpu}: no {what} (is /proc readable?)");
    let sources = l["sources"].as_array().unwrap();
    let mut sum = 0;
    for s in sources {
        let n = s["count"].as_u64().unwrap();
        assert!(n > 0, "only sources that fired are listed: {s}");
        let r = f(&s["per_s"]);
        assert!(r >= 0.0, "{s}");
        assert!((r - n as f64 / seconds).abs() < 1e-6 * (1.0 + r), "{s}");
        sum += n;
    }
    assert_eq!(
        sum,
        l["total"].as_u64().unwrap(),
        "CPU {cpu}: {what} add up"
    );
    assert!(f(&l["per_s"]) >= 0.0);
}

#[test]
fn survey_measures_each_online_cpu_on_that_cpu_and_follows_its_rule() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("survey.json");
    let out = survey(
        "survey",
        &[
            "--duration",
            "2s",
            "--base",
            "100us",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["tool"], "rtapi latency-test --all-cpus");
    assert_eq!(v["settings"]["mode"], "one-cpu-at-a-time");
    assert_eq!(v["settings"]["interrupted"], false);
    let online = online_cpus();
    let cpus = v["cpus"].as_array().unwrap();
    let measured: Vec<u64> = cpus
        .iter()
        .filter(|c| c["status"] == "measured")
        .map(|c| c["cpu"].as_u64().unwrap())
        .collect();
    assert_eq!(measured, online, "one measured entry per online CPU");
    // The /proc/interrupts line of the local timer, where the architecture has one (x86).
    let has_loc = std::fs::read_to_string("/proc/interrupts")
        .unwrap()
        .lines()
        .any(|l| l.trim_start().starts_with("LOC:"));
    for c in cpus.iter().filter(|c| c["status"] == "measured") {
        let cpu = c["cpu"].as_u64().unwrap();
        let threads = c["threads"].as_array().unwrap();
        let names: Vec<&str> = threads
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["base", "servo"]);
        let mut worst = 0;
        for t in threads {
            assert_eq!(t["cpu"].as_u64(), Some(cpu), "the thread ran on CPU {cpu}");
            // The CPU's measured duration (2 s asked; a busy host can make it longer).
            let due = f(&c["duration_s"]) * 1e9 / f(&t["period_ns"]);
            let accounted =
                (t["cycles"].as_u64().unwrap() + t["overruns"].as_u64().unwrap()) as f64;
            assert!(
                (accounted - due).abs() / due < 0.15,
                "CPU {cpu}: {accounted} periods of {due}"
            );
            worst = worst.max(t["latency_ns"]["max"].as_u64().unwrap());
        }
        assert_eq!(c["worst_latency_ns"].as_u64(), Some(worst));
        let load = &c["interrupts"];
        let seconds = f(&load["seconds"]);
        assert!(
            (2.0..6.0).contains(&seconds),
            "the counts cover the run: {seconds} s"
        );
        check_load(cpu, "irqs", load);
        check_load(cpu, "softirqs", load);
        if has_loc {
            // The threads' own wake-ups (10 000/s of the base thread) are local timer interrupts on
            // their CPU, far more than another CPU's tick: the column read is that CPU's.
            let loc = load["irqs"]["sources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["source"] == "LOC")
                .map_or(0, |s| s["count"].as_u64().unwrap());
            let cycles: u64 = threads.iter().map(|t| t["cycles"].as_u64().unwrap()).sum();
            assert!(
                loc * 2 >= cycles,
                "CPU {cpu}: {loc} timer interrupts for {cycles} wake-ups"
            );
        }
        assert!(c["verdict"]["rating"].is_string());
    }
    let recommended: Vec<u64> = v["recommended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_u64().unwrap())
        .collect();
    assert_eq!(recommended.len(), 1, "{}", v["recommendation"]);
    assert!(measured.contains(&recommended[0]));
    assert_eq!(
        Some(recommended[0]),
        rule(cpus),
        "the documented rule on these numbers: {}",
        v["recommendation"]
    );
    // The text: a row per CPU, the recommendation with its commands.
    assert_eq!(table_cpus(&stdout), online, "{stdout}");
    assert!(
        stdout.contains(&format!("give the RT threads CPU {}.", recommended[0])),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("latency-test --cpu {}", recommended[0])),
        "{stdout}"
    );
}

#[test]
fn all_cpus_with_one_cpu_is_refused() {
    for (args, says) in [
        (
            vec!["--cpu", "1"],
            "--all-cpus and --cpu cannot be used together",
        ),
        (
            vec!["--plot", "x.svg"],
            "--plot is not available with --all-cpus",
        ),
        (
            vec!["--histogram", "x.hist"],
            "--histogram is not available with --all-cpus",
        ),
    ] {
        let t0 = Instant::now();
        let out = survey("refused", &args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "nothing ran");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }
}

#[test]
fn ctrl_c_ends_the_survey_and_reports_the_cpus_measured_so_far() {
    let online = online_cpus();
    if online.len() < 2 {
        return skip!(
            Machine,
            "a survey of one CPU cannot be interrupted between CPUs"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("survey.json");
    let mut child = survey(
        "sigint",
        &[
            "--duration",
            "4s",
            "--base",
            "0",
            "--json",
            json.to_str().unwrap(),
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    // The survey announces each CPU before measuring it: wait for the second one, let it run a
    // second, then Ctrl-C.
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let second = format!("CPU {} (2 of {})", online[1], online.len());
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let found = line.starts_with(&second);
        seen.push(line);
        if found {
            break;
        }
    }
    assert!(
        seen.last().is_some_and(|l| l.starts_with(&second)),
        "{seen:#?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: kill sends a signal to our own child; no memory is involved.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let stopped = Instant::now();
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.wait().unwrap();
    let took = stopped.elapsed();
    assert_eq!(status.code(), Some(0));
    // The statuses below show it stopped early; the bound only catches a hang.
    eprintln!("ended {took:?} after Ctrl-C");
    assert!(
        took < Duration::from_secs(30),
        "ended {took:?} after Ctrl-C"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["settings"]["interrupted"], true);
    let cpus = v["cpus"].as_array().unwrap();
    let status_of = |cpu: u64| {
        cpus.iter()
            .find(|c| c["cpu"] == cpu)
            .map(|c| c["status"].as_str().unwrap().to_string())
    };
    assert_eq!(status_of(online[0]).as_deref(), Some("measured"));
    assert_eq!(status_of(online[1]).as_deref(), Some("interrupted"));
    let partial = cpus.iter().find(|c| c["cpu"] == online[1]).unwrap();
    let secs = f(&partial["duration_s"]);
    assert!(secs > 0.5 && secs < 4.0, "cut short of its 4 s: {secs} s");
    assert!(partial["threads"][0]["cycles"].as_u64().unwrap() > 300);
    for &cpu in &online[2..] {
        let c = cpus.iter().find(|c| c["cpu"] == cpu).unwrap();
        assert_eq!(c["status"], "not-measured");
        assert!(c["why"].as_str().unwrap().contains("interrupted"), "{c}");
    }
    // Only a CPU measured to the end is compared.
    assert_eq!(v["recommended"], serde_json::json!([online[0]]));
    let text = rest.join("\n");
    assert_eq!(table_cpus(&text), online, "{text}");
    assert!(text.contains("(interrupted)"), "{text}");
}

/// A CPU this process may not use (taskset) is a row that says why; the others are still measured.
#[test]
fn a_cpu_that_cannot_be_measured_is_a_row_that_says_why() {
    let online = online_cpus();
    if online.len() < 2 {
        return skip!(Machine, "needs two online CPUs to forbid one");
    }
    if let Err(e) = Command::new("taskset").arg("--version").output() {
        // util-linux is Essential on Debian: every machine .ci/run runs on has it.
        return skip!(Ci, "taskset (util-linux) cannot run: {e}");
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("survey.json");
    let rtapi = survey(
        "taskset",
        &[
            "--duration",
            "1s",
            "--base",
            "0",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let out = Command::new("taskset")
        .args(["-c", &online[0].to_string()])
        .arg(rtapi.get_program())
        .args(rtapi.get_args())
        .env_remove("RTAPI_FLAVOR")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cpus = v["cpus"].as_array().unwrap();
    assert_eq!(cpus.len(), online.len());
    for c in cpus {
        if c["cpu"] == online[0] {
            assert_eq!(c["status"], "measured", "{c}");
        } else {
            assert_eq!(c["status"], "not-measured", "{c}");
            assert!(c["why"].as_str().unwrap().contains("not allowed"), "{c}");
            assert!(c["threads"].as_array().unwrap().is_empty());
            assert!(text.contains(&format!("CPU {}: not measured: not allowed", c["cpu"])));
        }
    }
    assert_eq!(v["recommended"], serde_json::json!([online[0]]));
    assert_eq!(table_cpus(&text), online, "{text}");
}
