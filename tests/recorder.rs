//! The flight recorder with the real binary: a 300 ms SIGSTOP of `rtapi run` is in the frozen dump
//! (the periods before it contiguous, the ~300 skipped periods as `missed` rows, the JSON naming the
//! overrun), `rtapi recorder dump` on demand (never over an earlier dump), and a bad `[recorder]`
//! table refused at its line with nothing started.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::eventually;
use common::{rtapi, segment_exists, text};

/// The tests here run 1 ms SCHED_FIFO threads on the same CPU, and one of them makes its thread
/// spin (a stall, until the watchdog sees it): run in parallel, that starves the others' threads for
/// hundreds of periods. One at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn instance(tag: &str) -> String {
    format!("rec-{tag}-{}", std::process::id())
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rtapi-recorder-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A 1 ms servo thread running siggen, recorded with two of its values.
fn machine(dir: &Path, instance: &str, recorder: &str) -> PathBuf {
    std::fs::write(
        dir.join("m.hal"),
        "loadrt siggen\nnet sine siggen.0.sine\naddf siggen.0.update servo\n",
    )
    .unwrap();
    let toml = dir.join("m.toml");
    std::fs::write(
        &toml,
        format!(
            "hal = [\"m.hal\"]\n[runtime]\ninstance = \"{instance}\"\n[[thread]]\nname = \"servo\"\nperiod = \"1ms\"\n{recorder}"
        ),
    )
    .unwrap();
    toml
}

const RECORDER: &str = "[recorder]\ndir = \"dumps\"\nseconds = 3\npost = \"50ms\"\nholdoff = \"0s\"\npins = [\"sine\", \"siggen.0.square\"]\n";

/// `rtapi run` of the machine, once its instance answers.
fn run(toml: &Path, instance: &str) -> Child {
    let child = Command::new(env!("CARGO_BIN_EXE_rtapi"))
        .args(["run", toml.to_str().unwrap(), "--duration", "30s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Up, and taking commands over its control socket.
    let until = Instant::now() + Duration::from_secs(10);
    while !rtapi(&["halcmd", "--instance", instance, "show", "thread"])
        .status
        .success()
    {
        assert!(Instant::now() < until, "the instance never came up");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Waits until the servo thread of `instance` has accounted `n` periods (run or missed) in all.
fn periods(instance: &str, n: u64) {
    let reader = rtapi_hal::HalReader::open(instance, rtapi_hal::Access::ReadOnly).unwrap();
    eventually::until_true(
        &format!("{instance}: {n} servo periods"),
        eventually::GENEROUS,
        || {
            let s = reader.thread_stats("servo").unwrap();
            s.cycles + s.overruns >= n
        },
    );
}

fn stop(child: Child) -> String {
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every complete dump in `dir` (its JSON, written last), oldest first.
fn dumps(dir: &Path) -> Vec<(PathBuf, serde_json::Value)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(PathBuf, serde_json::Value)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let j = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
            (p, j)
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// A CSV row: (period, state, latency_ns, missed, exec_ns).
type Row = (u64, String, Option<i64>, Option<u64>, Option<u64>);

/// CSV rows.
fn rows(csv: &str) -> Vec<Row> {
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("period,state,wake_ns,latency_ns,exec_ns,missed,fault,sine,siggen.0.square"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            assert_eq!(f.len(), 9, "{l}");
            (
                f[0].parse().unwrap(),
                f[1].to_string(),
                f[3].parse().ok(),
                f[5].parse().ok(),
                f[4].parse().ok(),
            )
        })
        .collect()
}

fn no_temporaries(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp"), "a temporary was left: {name}");
    }
}

#[test]
fn a_300_ms_sigstop_is_in_the_frozen_dump_with_the_periods_before_it() {
    let _one = serial();
    let (dir, inst) = (scratch("stop"), instance("stop"));
    // Only an overrun of 250 periods or more freezes it: the host's hiccups (a period or two, often
    // on this VM) write no dump of their own that the stop could fall into.
    let toml = machine(
        &dir,
        &inst,
        &format!("{RECORDER}freeze_on = [\"overrun:250\"]\n"),
    );
    let child = run(&toml, &inst);
    let out = dir.join("dumps");
    // Over a second of history first.
    periods(&inst, 1100);
    let reader = rtapi_hal::HalReader::open(&inst, rtapi_hal::Access::ReadOnly).unwrap();
    let s = reader.thread_stats("servo").unwrap();
    let before_stop = s.cycles + s.overruns;
    let pid = child.id() as i32;
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The stimulus: 300 ms stopped (at least; a busy host only makes it longer).
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // The dump of this stop (not of a stall that came before it).
    let found = eventually::until("the overrun dump", eventually::GENEROUS, || {
        dumps(&out).into_iter().find(|(_, j)| {
            j["trigger"]["event"] == "overrun"
                && j["trigger"]["missed"].as_u64() >= Some(250)
                && j["trigger"]["period"].as_u64() >= Some(before_stop)
        })
    });
    let err = stop(child);
    eprintln!("{err}");
    let (json_path, j) = found;
    eprintln!("{}", serde_json::to_string_pretty(&j).unwrap());
    let t = &j["trigger"];
    assert_eq!(t["thread"], "servo");
    let missed = t["missed"].as_u64().unwrap();
    let at = t["period"].as_u64().unwrap();
    assert!((250..5000).contains(&missed), "{missed} periods missed");
    let thread = &j["threads"][0];
    assert_eq!(thread["name"], "servo");
    let csv = std::fs::read_to_string(out.join(thread["csv"].as_str().unwrap())).unwrap();
    let svg = std::fs::read_to_string(out.join(thread["svg"].as_str().unwrap())).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("sine"),
        "{json_path:?}"
    );
    let rows = rows(&csv);
    // Contiguous period numbers, skipped periods included as rows of their own.
    assert!(
        rows.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "period numbers are contiguous"
    );
    let i = rows
        .iter()
        .position(|r| r.0 == at)
        .expect("the trigger row");
    let (_, state, latency, row_missed, exec) = &rows[i];
    assert_eq!(state, "run");
    assert_eq!(*row_missed, Some(missed));
    // The stop fell in the wait (the wake came late) or in the functions' work (the work ended
    // late): either way the period's wake-to-end spans it.
    assert!(
        latency.unwrap() + exec.unwrap() as i64 >= 250_000_000,
        "the period spans the ≥ 250 ms stop: latency {latency:?}, exec {exec:?}"
    );
    // The periods before the stop: over a second of them (up to the window), all run or missed.
    assert!(
        i >= 1000,
        "only {i} periods before the stop (rows from {:?} to {:?}, trigger {at})",
        rows.first(),
        rows.last()
    );
    // Then the gap: exactly `missed` rows of skipped periods, then the post-trigger stretch.
    let gap = rows[i + 1..].iter().take_while(|r| r.1 == "missed").count() as u64;
    assert_eq!(gap, missed);
    let after = rows.len() - i - 1 - gap as usize;
    assert!(
        after >= 40,
        "the post-trigger stretch (50 ms) was recorded: {after}"
    );
    no_temporaries(&out);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn recorder_dump_writes_on_demand_and_never_over_an_earlier_dump() {
    let _one = serial();
    let (dir, inst) = (scratch("dump"), instance("dump"));
    // Only the requests freeze it: a host hiccup's overrun would freeze it too, and a request that
    // comes during that freeze joins it (its dump is the overrun's: stop 39, a stall under test).
    let toml = machine(
        &dir,
        &inst,
        &format!("{RECORDER}freeze_on = [\"overrun:1000000\"]\n"),
    );
    let child = run(&toml, &inst);
    periods(&inst, 400);
    let out = dir.join("asked");
    let dump = || {
        let o = rtapi(&[
            "recorder",
            "dump",
            "--instance",
            &inst,
            "--out",
            out.to_str().unwrap(),
        ]);
        let (stdout, stderr) = text(&o);
        assert!(o.status.success(), "{stdout}{stderr}");
        stdout.lines().map(PathBuf::from).collect::<Vec<_>>()
    };
    let first = dump();
    let second = dump();
    let err = stop(child);
    assert_eq!(first.len(), 3, "{first:?}");
    assert!(first[0].extension().is_some_and(|x| x == "json"));
    assert!(
        first.iter().all(|f| !second.contains(f)),
        "{first:?} {second:?}"
    );
    let all = dumps(&out);
    assert_eq!(all.len(), 2, "{all:?}\n{err}");
    for (_, j) in &all {
        assert_eq!(j["trigger"]["event"], "request");
        let csv =
            std::fs::read_to_string(out.join(j["threads"][0]["csv"].as_str().unwrap())).unwrap();
        let rows = rows(&csv);
        assert!(rows.len() >= 300, "{} rows", rows.len());
        assert!(rows.windows(2).all(|w| w[1].0 == w[0].0 + 1));
    }
    no_temporaries(&out);
    // An instance without a recorder says so.
    let inst2 = instance("none");
    let dir2 = scratch("none");
    let toml2 = machine(&dir2, &inst2, "");
    let child = run(&toml2, &inst2);
    let o = rtapi(&["recorder", "dump", "--instance", &inst2]);
    stop(child);
    let (_, stderr) = text(&o);
    assert!(!o.status.success());
    assert!(stderr.contains("no flight recorder"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

#[test]
fn a_bad_recorder_table_is_refused_at_its_line_and_nothing_starts() {
    for (recorder, line, want) in [
        (
            "[recorder]\ndir = \"dumps\"\nfreeze_on = [\"overrun\", \"sometimes\"]\n",
            9,
            "recorder.freeze_on: 'sometimes' is unknown",
        ),
        (
            "[recorder]\ndir = \"dumps\"\nseconds = -1\n",
            9,
            "recorder.seconds = -1",
        ),
        (
            "[recorder]\ndir = \"dumps\"\n\npins = [\"sine\", \"no-such-pin\"]\n",
            10,
            "recorder: no pin or signal \"no-such-pin\"",
        ),
    ] {
        let (dir, inst) = (scratch("bad"), instance("bad"));
        let toml = machine(&dir, &inst, recorder);
        let o = rtapi(&["run", toml.to_str().unwrap(), "--duration", "2s"]);
        let (_, stderr) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        let at = format!("{}:{line}: {want}", toml.display());
        assert!(stderr.contains(&at), "want {at:?} in {stderr}");
        assert!(!stderr.contains("running"), "{stderr}");
        assert!(!segment_exists(&inst));
        assert!(!dir.join("dumps").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The runtime API: a function that panics freezes the recorder (`fault`), and one that never
/// returns is found stalled by the watchdog, which freezes it (`stall`); each dump names its event
/// and thread, and the periods before it are in the CSV.
#[test]
fn a_fault_and_a_stall_each_freeze_the_recorder() {
    let _one = serial();
    use rtapi::runtime::function::Cycle;
    use rtapi::runtime::recorder::RecorderConfig;
    use rtapi::runtime::watchdog::{StallAction, WatchdogOptions};
    use rtapi::runtime::{Runtime, RuntimeOptions, ThreadSpec};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    for (tag, want) in [("fault", "fault"), ("stall", "stall")] {
        let dir = scratch(tag);
        let mut rt = Runtime::configure(RuntimeOptions {
            instance: instance(tag),
            flavor: Some("posix".into()),
            watchdog: WatchdogOptions {
                action: StallAction::Report,
                periods: 5,
                min: Duration::from_millis(100),
            },
            recorder: Some(RecorderConfig {
                window: rtapi::rt::clock::Nanos::from_secs(2),
                post: rtapi::rt::clock::Nanos::from_millis(20),
                pins: Vec::new(),
                dir: dir.clone(),
                // Host hiccups are no overrun here: only the event under test freezes it.
                on_overrun: 1_000_000,
                on_stall: true,
                on_fault: true,
                triggers: Vec::new(),
                holdoff: rtapi::rt::clock::Nanos::ZERO,
                max_dumps: 10,
            }),
            ..RuntimeOptions::default()
        })
        .unwrap();
        rt.thread(ThreadSpec::new(
            "servo",
            rtapi::rt::clock::Nanos::from_millis(1),
        ))
        .unwrap();
        let comp = rt.hal().component("probe").unwrap();
        let release = Arc::new(AtomicBool::new(false));
        let r = release.clone();
        let stall = tag == "stall";
        rt.function(
            comp,
            "probe.run",
            Box::new(move |_| {
                Box::new(move |c: &Cycle| {
                    if c.number >= 300 && c.number < 310 {
                        if stall {
                            while !r.load(Ordering::Relaxed) {
                                std::hint::spin_loop();
                            }
                        } else {
                            panic!("probe fault");
                        }
                    }
                })
            }),
        )
        .unwrap();
        rt.addf("probe.run", "servo", None).unwrap();
        let running = rt.start().unwrap();
        let t0 = Instant::now();
        let mut found = None;
        while found.is_none() && t0.elapsed() < eventually::GENEROUS {
            found = dumps(&dir)
                .into_iter()
                .find(|(_, j)| j["trigger"]["event"] == want);
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("{want} dump after {:?}", t0.elapsed());
        release.store(true, Ordering::Relaxed);
        running.stop();
        let (_, j) = found.unwrap_or_else(|| panic!("no {want} dump: {:?}", dumps(&dir)));
        assert_eq!(j["trigger"]["thread"], "servo");
        let csv =
            std::fs::read_to_string(dir.join(j["threads"][0]["csv"].as_str().unwrap())).unwrap();
        let rows = rows_plain(&csv);
        assert!(rows.windows(2).all(|w| w[1] == w[0] + 1));
        assert!(
            rows.iter().filter(|&&p| p < 300).count() >= 250,
            "the periods before the event"
        );
        if !stall {
            assert_eq!(j["threads"][0]["faulted_periods"], 1);
        }
        no_temporaries(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// The period numbers of a CSV without pins.
fn rows_plain(csv: &str) -> Vec<u64> {
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect()
}

/// `falling:estop-ok`: an operator's `rtapi sets estop-ok 0` (TRUE → FALSE) freezes the recorder, and
/// the JSON names the pin; a rising edge of the same signal does not.
#[test]
fn an_estop_signal_going_false_freezes_the_recorder() {
    let _one = serial();
    let (dir, inst) = (scratch("estop"), instance("estop"));
    let toml = machine(
        &dir,
        &inst,
        "[recorder]\ndir = \"dumps\"\npost = \"20ms\"\nholdoff = \"0s\"\npins = [\"estop-ok\"]\nfreeze_on = [\"overrun:1000000\", \"falling:estop-ok\"]\n",
    );
    let hal = dir.join("m.hal");
    let mut hal_text = std::fs::read_to_string(&hal).unwrap();
    hal_text.push_str("newsig estop-ok bit\nsets estop-ok 0\n");
    std::fs::write(&hal, hal_text).unwrap();
    let child = run(&toml, &inst);
    let sets = |v: &str| {
        let o = rtapi(&["sets", "--instance", &inst, "estop-ok", v]);
        assert!(o.status.success(), "{:?}", text(&o));
    };
    let out = dir.join("dumps");
    sets("1"); // rising: not a trigger
    periods(&inst, 300);
    assert!(dumps(&out).is_empty(), "{:?}", dumps(&out));
    sets("0");
    eventually::until_true("the falling edge's dump", eventually::GENEROUS, || {
        !dumps(&out).is_empty()
    });
    let err = stop(child);
    let all = dumps(&out);
    assert_eq!(all.len(), 1, "{all:?}\n{err}");
    let j = &all[0].1;
    assert_eq!(j["trigger"]["event"], "pin");
    assert_eq!(j["trigger"]["pin"], "estop-ok");
    let csv = std::fs::read_to_string(out.join(j["threads"][0]["csv"].as_str().unwrap())).unwrap();
    // The recorded value goes 1 → 0 at the trigger period.
    let at = j["trigger"]["period"].as_u64().unwrap();
    let value = |p: u64| {
        csv.lines()
            .find(|l| l.starts_with(&format!("{p},run,")))
            .map(|l| l.rsplit(',').next().unwrap().to_string())
    };
    assert_eq!(value(at).as_deref(), Some("0"));
    // The period before it that ran (the host may have made the thread miss the ones between).
    let before = (0..at).rev().find_map(value);
    assert_eq!(before.as_deref(), Some("1"));
    let _ = std::fs::remove_dir_all(&dir);
}
