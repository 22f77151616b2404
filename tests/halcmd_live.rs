//! halcmd on a live HAL, with the real binary: `rtapi halrun -I` driven through a pseudo-terminal
//! (build, start, change while running, stop, save; the saved file recreates the same HAL), `rtapi
//! halcmd` changing a running instance from another process, and a reader polling `show all --json`
//! while another process makes 1 000 structural changes.

mod common;
use common::halrun;
use common::pty;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{rtapi, text};
use halrun::{halcmd, Halrun};
use pty::Pty;

const T: Duration = Duration::from_secs(10);

fn instance(tag: &str) -> String {
    format!("hl-{tag}-{}", std::process::id())
}

/// Polls `rtapi halcmd getp NAME` until it prints `want`.
fn wait_value(instance: &str, name: &str, want: &str) {
    let until = Instant::now() + T;
    loop {
        let (_, out, err) = halcmd(instance, &["getp", name]);
        if out.trim() == want {
            return;
        }
        assert!(
            Instant::now() < until,
            "{name} never became {want}: last {out:?} {err:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `show all` with the values that measure time (health pins and params of the threads and of
/// every function: latency, time, tmax…) blanked: they differ from one run to the next by nature.
fn structure(show: &str) -> String {
    let timing = |name: &str| {
        name.starts_with("servo.")
            || name.ends_with(".time")
            || name.ends_with(".tmax")
            || name.ends_with(".tmax-increased")
    };
    show.lines()
        .filter(|l| !l.starts_with("halcmd:") && !l.contains("show all"))
        .map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.as_slice() {
                [_, _, _, _, name, ..] if timing(name) => {
                    format!("{} <timing> {name}", words[..3].join(" "))
                }
                _ => words.join(" "),
            }
        })
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The output of `show all` at the prompt: from after the command's echo to the next prompt.
fn show_all(p: &mut Pty) -> String {
    p.send("show all\r");
    p.expect("show all", T);
    let text = p.expect("halcmd: ", T);
    text.trim_end_matches("halcmd: ").to_string()
}

#[test]
fn the_prompt_builds_starts_changes_stops_and_saves_a_hal_that_loads_again_identical() {
    let dir = tempfile::tempdir().unwrap();
    let name = instance("pty");
    let mut p = Pty::rtapi(&["halrun", "-I", "--instance", &name], dir.path());
    p.expect("halcmd: ", T);
    for line in [
        "loadrt threads name1=servo period1=1000000",
        "loadrt and2 count=2",
        "net a and2.0.in0",
        "net b and2.0.in1",
        "addf and2.0 servo",
    ] {
        p.send(&format!("{line}\r"));
        p.expect("halcmd: ", T);
    }
    // Tab completion: a command, then a live object name.
    p.send("sh\t");
    p.expect("show", T);
    p.send(" funct and2.\t");
    p.expect("and2.", T);
    p.send("\u{15}"); // Ctrl-U: drop the line
                      // Completion redraws the prompt: get back in step on a command's own output.
    p.send("status\r");
    p.expect("threads started: no", T);
    p.expect("halcmd: ", T);
    p.send("start\r");
    p.expect("halcmd: ", T);

    // Running: another terminal sees it; changes made at the prompt take effect live.
    let (ok, out, err) = halcmd(&name, &["show", "thread"]);
    assert!(
        ok && out.contains("and2.0"),
        "{out} {err}\nscreen:\n{}",
        p.screen()
    );
    for line in [
        "sets a 1",
        "sets b 1",
        "loadrt or2",
        "net a or2.0.in0",
        "addf or2.0 servo 1",
        "net mid and2.0.out and2.1.in0",
        "net c and2.1.in1",
        "addf and2.1 servo",
        "sets c 1",
    ] {
        p.send(&format!("{line}\r"));
        p.expect("halcmd: ", T);
    }
    wait_value(&name, "or2.0.out", "TRUE");
    wait_value(&name, "and2.1.out", "TRUE");
    // Relink a pin while running: and2.1.in1 from c to a new signal d. As in LinuxCNC, the
    // unlinked pin keeps c's value and, first on d, gives it to d; then d is set FALSE.
    p.send("unlinkp and2.1.in1\r");
    p.expect("halcmd: ", T);
    p.send("net d and2.1.in1\r");
    p.expect("halcmd: ", T);
    let (_, d, _) = halcmd(&name, &["gets", "d"]);
    assert_eq!(d.trim(), "TRUE");
    p.send("sets d 0\r");
    p.expect("halcmd: ", T);
    wait_value(&name, "and2.1.out", "FALSE");
    p.send("sets c 0\r");
    p.expect("halcmd: ", T);
    p.send("sets d 1\r");
    p.expect("halcmd: ", T);
    wait_value(&name, "and2.1.out", "TRUE");
    let (_, threads, _) = halcmd(&name, &["show", "thread"]);
    let order: Vec<&str> = threads
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|w| w.contains('.'))
        .collect();
    assert_eq!(order, ["or2.0", "and2.0", "and2.1"], "{threads}");

    p.send("stop\r");
    p.expect("halcmd: ", T);
    let saved = dir.path().join("saved.hal");
    p.send(&format!("save all {}\r", saved.display()));
    p.expect("halcmd: ", T);
    let first = show_all(&mut p);
    p.send("quit\r");
    assert!(p.wait(T).is_some_and(|s| s.success()), "{}", p.screen());

    // A fresh instance from the saved file, run the same way (start, a few periods, stop).
    let name2 = instance("pty2");
    let mut q = Pty::rtapi(
        &[
            "halrun",
            "-I",
            "--instance",
            &name2,
            "-f",
            saved.to_str().unwrap(),
        ],
        dir.path(),
    );
    q.expect("halcmd: ", T);
    q.send("start\r");
    q.expect("halcmd: ", T);
    wait_value(&name2, "and2.0.out", "TRUE");
    q.send("stop\r");
    q.expect("halcmd: ", T);
    let second = show_all(&mut q);
    q.send("quit\r");
    assert!(q.wait(T).is_some_and(|s| s.success()));
    assert!(
        first.contains("or2.0") && first.contains("and2.1.in1 <== d"),
        "{first}"
    );
    assert_eq!(structure(&first), structure(&second));
}

/// A HAL for the other tests: one thread, 40 `sum2`s, started.
const BASE: &str =
    "loadrt threads name1=servo period1=1000000\nloadrt sum2 count=40\naddf sum2.0 servo\nstart\n";

#[test]
fn halcmd_from_another_terminal_changes_a_running_instance_and_reports_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = Halrun::start("hl-remote", BASE);
    let name = owner.name.clone();
    for cmd in [
        &["loadrt", "mult2", "names=m"][..],
        &["net", "x", "m.in0"],
        &["net", "y", "m.in1"],
        &["net", "z", "m.out", "sum2.0.in0"],
        &["addf", "m", "servo", "1"],
        &["sets", "x", "3"],
        &["sets", "y", "7"],
    ] {
        let (ok, out, err) = halcmd(&name, cmd);
        assert!(ok, "{cmd:?}: {out} {err}");
    }
    wait_value(&name, "sum2.0.out", "21");
    // A whole file, with an INI.
    std::fs::write(dir.path().join("m.ini"), "[SCALE]\nGAIN = 2\n").unwrap();
    std::fs::write(
        dir.path().join("more.hal"),
        "setp sum2.0.gain0 [SCALE]GAIN\n",
    )
    .unwrap();
    let (ok, _, err) = halcmd(
        &name,
        &[
            "-f",
            dir.path().join("more.hal").to_str().unwrap(),
            "-i",
            dir.path().join("m.ini").to_str().unwrap(),
        ],
    );
    assert!(ok, "{err}");
    wait_value(&name, "sum2.0.out", "42");
    // A bad command: exit 1, the message names what is wrong, nothing changed.
    let (ok, _, err) = halcmd(&name, &["net", "z", "sum2.1.out"]);
    assert!(!ok && err.contains("sum2.1.out"), "{err}");
    let (ok, _, err) = halcmd(&name, &["net", "q", "nosuch.pin"]);
    assert!(!ok && err.contains("nosuch.pin"), "{err}");
    let (_, sigs, _) = halcmd(&name, &["show", "sig"]);
    assert!(!sigs.contains(" q"), "{sigs}");
    // Threads cannot be made while running: said, not done.
    let (ok, _, err) = halcmd(&name, &["loadrt", "threads", "name1=fast", "period1=50000"]);
    assert!(!ok && err.contains("thread"), "{err}");
    owner.stop_cleanly();
}

#[test]
fn show_all_json_polled_by_other_processes_survives_1000_structural_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut owner = Halrun::start("hl-stress", BASE);
    let name = owner.name.clone();
    // 1 000 structural commands: signals made, pins linked and unlinked, signals deleted,
    // functions added and removed.
    let mut changes = String::new();
    let mut n = 0;
    for round in 0..50 {
        for i in 0..4 {
            let k = (round * 4 + i) % 40;
            let s = format!("s{round}x{i}");
            changes.push_str(&format!("newsig {s} float\n"));
            changes.push_str(&format!("linksp {s} sum2.{k}.in1\n"));
            changes.push_str(&format!("unlinkp sum2.{k}.in1\n"));
            changes.push_str(&format!("delsig {s}\n"));
            n += 4;
        }
        let f = 1 + round % 39;
        changes.push_str(&format!("addf sum2.{f} servo\ndelf sum2.{f} servo\n"));
        n += 2;
    }
    // Fill to 1 000 with link/unlink pairs.
    let mut i = 0;
    while n < 1000 {
        changes.push_str(&format!(
            "net t{i} sum2.{}.in0\nunlinkp sum2.{}.in0\ndelsig t{i}\n",
            i % 40,
            i % 40
        ));
        i += 1;
        n += 3;
    }
    // Ten files of 100 commands, each run by its own `rtapi halcmd -f` once a read finished after the
    // previous one: so reads are taken in generations between the first change's and the last's.
    let lines: Vec<&str> = changes.lines().collect();
    assert!(lines.len() >= 1000, "{} commands", lines.len());
    let files: Vec<_> = lines
        .chunks(100)
        .enumerate()
        .map(|(k, chunk)| {
            let file = dir.path().join(format!("changes{k}.hal"));
            std::fs::write(&file, chunk.join("\n") + "\n").unwrap();
            file
        })
        .collect();

    // Readers: separate processes, one `show all --json` after another, until the changes end;
    // each good read counts and keeps the structure generation it was read in.
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};
    let generation = || {
        let o = rtapi(&["show", "all", "--json", "--instance", &name]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["generation"].as_u64().unwrap()
    };
    let g_start = generation();
    let stop_flag = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reader = {
        let (name, stop_flag, reads, seen) =
            (name.clone(), stop_flag.clone(), reads.clone(), seen.clone());
        std::thread::spawn(move || {
            let mut failures = Vec::new();
            while !stop_flag.load(Ordering::Relaxed) {
                let o = rtapi(&["show", "all", "--json", "--instance", &name]);
                let (out, err) = text(&o);
                if !o.status.success() {
                    failures.push(err);
                    continue;
                }
                match serde_json::from_str::<serde_json::Value>(&out) {
                    Err(e) => failures.push(format!("not JSON ({e}): {out}")),
                    Ok(v) => {
                        seen.lock().unwrap().push(v["generation"].as_u64().unwrap());
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            failures
        })
    };
    let t0 = Instant::now();
    for file in &files {
        let before = reads.load(Ordering::Relaxed);
        let waiting = Instant::now();
        while reads.load(Ordering::Relaxed) == before {
            assert!(waiting.elapsed() < T, "no read finished within {T:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
        let (ok, _, err) = halcmd(&name, &["-f", file.to_str().unwrap()]);
        assert!(ok, "the changes of {} failed: {err}", file.display());
    }
    let took = t0.elapsed();
    stop_flag.store(true, Ordering::Relaxed);
    let failures = reader.join().unwrap();
    let g_end = generation();
    let seen = seen.lock().unwrap().clone();
    let between: std::collections::BTreeSet<u64> = seen
        .iter()
        .copied()
        .filter(|&g| g > g_start && g < g_end)
        .collect();
    eprintln!(
        "{} structural changes in {took:?}; {} `show all --json` reads meanwhile, {} of them in \
         {} generations between {g_start} and {g_end}",
        lines.len(),
        seen.len(),
        seen.iter().filter(|&&g| g > g_start && g < g_end).count(),
        between.len()
    );
    assert!(
        failures.is_empty(),
        "{} failed reads: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert!(
        seen.iter()
            .all(|&g| g % 2 == 0 && g >= g_start && g <= g_end),
        "a read in an odd generation or outside the run: {seen:?} ({g_start}..={g_end})"
    );
    assert!(
        g_end - g_start >= 2 * lines.len() as u64,
        "every structural command is at least one generation step of two: {g_start} → {g_end}"
    );
    assert!(
        between.len() >= 9,
        "reads in only {} generations between the changes' first and last: {seen:?}",
        between.len()
    );
    // The structure is back to the base: no signal left, one function in the thread.
    let (_, sigs, _) = halcmd(&name, &["show", "sig"]);
    assert!(!sigs.contains("s0x0") && !sigs.contains("t0"), "{sigs}");
    let (_, th, _) = halcmd(&name, &["show", "thread"]);
    let in_thread: Vec<&str> = th
        .split_whitespace()
        .filter(|w| w.starts_with("sum2."))
        .collect();
    assert_eq!(in_thread, ["sum2.0"], "{th}");
    owner.stop_cleanly();
    let _ = std::io::stderr().flush();
}

/// Issue 25 item 4: a log line (a thread's missed periods, once a second) was written into the
/// prompt's line, after what was being typed: `halcmd: getp fa[2026-…Z WARN rtapi::runtime] thread
/// fast: …`. Now it is printed above the prompt: the terminal is told to clear the prompt's line
/// before the log line, and the prompt comes back with what was typed.
#[test]
fn log_lines_go_above_the_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let name = instance("logprompt");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rtapi"));
    cmd.args(["halrun", "-I", "--instance", &name])
        .env("RUST_LOG", "warn")
        .env("HOME", dir.path())
        .env("TERM", "xterm");
    let mut p = Pty::spawn(cmd);
    p.expect("halcmd: ", T);
    // A 10 µs thread misses periods on any machine: a warning a second.
    p.send("loadrt threads name1=fast period1=10000\r");
    p.expect("halcmd: ", T);
    p.send("start\r");
    p.expect("halcmd: ", T);
    p.send("getp fa");
    p.expect("getp fa", T);
    p.expect("period(s) missed", Duration::from_secs(30));
    p.expect("halcmd: getp fa", T);
    let raw = p.raw();
    let typed = raw.find("getp fa").unwrap();
    let warned = typed + raw[typed..].find("period(s) missed").unwrap();
    let record = raw[..warned].rfind(" WARN ").unwrap();
    let record = raw[..record].rfind('[').unwrap();
    let before = &raw[..record];
    let between = &before[before.rfind("getp fa").unwrap() + "getp fa".len()..];
    assert!(
        between.contains('\x1b') || between.contains('\n'),
        "the log line went on into the prompt's line: {:?}",
        &raw[typed..(warned + 20).min(raw.len())]
    );
    p.send("\x15quit\r");
    let status = p.wait(T).expect("halrun -I ended at quit");
    assert!(status.success(), "{status:?}\n{}", p.screen());
}
