//! A live segment under structural churn: this process makes 1 000 structural changes (signals
//! created, linked, unlinked and deleted; components and pins added, half of the components deleted
//! again; functions removed from and added back to a thread) while a real child process reads the whole structure in a loop, and a thread of
//! this process sets and reads pins through their handles the whole time.
//!
//! Asserted: the child never sees a torn or inconsistent structure and gets no error (its reads retry
//! around changes on their own); the handle thread never blocks (it makes progress in every sampling
//! window) and never reads a value that was not written.

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{unique_instance, Cleanup};
use rtapi_hal::*;

const ROLE: &str = "RTAPI_HAL_STRESS_ROLE";
const INSTANCE: &str = "RTAPI_HAL_STRESS_INSTANCE";
const CHANGES: usize = 1000;
const TIMEOUT: Duration = Duration::from_secs(60);

/// The child's entry point; a no-op in a normal run.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    assert_eq!(role, "reader");
    let inst = std::env::var(INSTANCE).unwrap();
    let r = HalReader::open(&inst, Access::ReadWrite).unwrap();
    r.setp("stress.reader-started", "1").unwrap();
    let start = Instant::now();
    let (mut reads, mut generations, mut last_gen) = (0u64, 0u64, u64::MAX);
    let mut max_signals = 0;
    loop {
        assert!(start.elapsed() < TIMEOUT, "never told to stop");
        let g = r.generation();
        // Any error here (corruption, a refused stuck or changing structure) fails the test.
        let snap = r
            .snapshot()
            .unwrap_or_else(|e| panic!("read {reads} failed: {e}"));
        reads += 1;
        if g != last_gen {
            generations += 1;
            last_gen = g;
        }
        // Our own consistency checks on top of the reader's: every link resolves both ways.
        for p in &snap.pins {
            if let Some(s) = &p.signal {
                let sig = snap
                    .signals
                    .iter()
                    .find(|x| &x.name == s)
                    .unwrap_or_else(|| panic!("pin {} on missing signal {s}", p.name));
                assert_eq!(sig.ty, p.ty);
                if p.dir == PinDir::Out {
                    assert_eq!(sig.writer.as_deref(), Some(p.name.as_str()));
                }
            }
        }
        for s in &snap.signals {
            let on: Vec<_> = snap
                .pins
                .iter()
                .filter(|p| p.signal.as_deref() == Some(&s.name))
                .collect();
            assert_eq!(
                on.len() as u32,
                u32::from(s.writer.is_some()) + s.readers + s.bidirs
            );
        }
        let servo = snap.threads.iter().find(|t| t.name == "servo").unwrap();
        let mut positions: Vec<u32> = snap
            .functions
            .iter()
            .filter_map(|f| f.thread.as_ref().map(|t| t.1))
            .collect();
        positions.sort_unstable();
        assert_eq!(positions, (0..servo.functions).collect::<Vec<_>>());
        max_signals = max_signals.max(snap.signals.len());
        if r.get("stress.done").unwrap() == Value::Bit(true) {
            break;
        }
    }
    println!("READS {reads} GENERATIONS {generations} MAX_SIGNALS {max_signals}");
}

#[test]
fn a_thousand_structural_changes_under_a_reader_process_and_a_pin_thread() {
    let inst = unique_instance("stress");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap().capacity(Capacity {
        factor: 4,
        floor: 256,
    });
    let c = b.component("stress").unwrap();
    let started = b
        .param(c, "stress.reader-started", ParamAccess::Rw, false)
        .unwrap();
    let done = b.param(c, "stress.done", ParamAccess::Ro, false).unwrap();
    let rt = b.component("rt").unwrap();
    let out = b.pin::<Out, f64>(rt, "rt.out").unwrap();
    let inp = b.pin::<In, f64>(rt, "rt.in").unwrap();
    b.function(rt, "rt.f").unwrap();
    b.function(rt, "rt.g").unwrap();
    b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("rt.f", "servo", None).unwrap();
    b.addf("rt.g", "servo", None).unwrap();
    let hal = b.build().unwrap();
    let (started, done) = (hal.param(started), hal.param(done));

    // The pin thread: writes 1, 2, 3… to rt.out and reads rt.in, which is linked to rt.out's signal
    // part of the time and otherwise holds a copy of an earlier value — never anything else.
    let (out, inp) = (hal.pin(out), hal.pin(inp));
    let iterations = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let rt_thread = {
        let (iterations, stop) = (iterations.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                out.set(k as f64);
                let v = inp.get();
                assert!(
                    v >= 0.0 && v <= k as f64 && v.fract() == 0.0,
                    "rt.in read {v}, never written (last write {k})"
                );
                iterations.store(k, Ordering::Relaxed);
            }
            k
        })
    };

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture"])
        .env(ROLE, "reader")
        .env(INSTANCE, &inst)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !started.get() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the reader exited early"
        );
        assert!(t0.elapsed() < TIMEOUT, "the reader never started");
        std::thread::sleep(Duration::from_millis(1));
    }

    // The changes, with the pin thread's progress sampled after each.
    let mut changes = 0;
    let mut samples: Vec<(Instant, u64)> = Vec::new();
    macro_rules! change {
        ($e:expr) => {{
            let r: Result<_> = $e;
            let v = r.unwrap();
            changes += 1;
            samples.push((Instant::now(), iterations.load(Ordering::Relaxed)));
            // Leave the reader time to read between changes (it also reads across them).
            std::thread::sleep(Duration::from_micros(200));
            v
        }};
    }
    let mut k = 0;
    let g0 = hal.generation();
    while changes < CHANGES {
        let sig = format!("s{k}");
        let comp_name = format!("x{k}");
        let pin_name = format!("x{k}.p");
        change!(hal.new_signal(&sig, ValueType::Float));
        change!(hal.link("rt.out", &sig));
        change!(hal.link("rt.in", &sig));
        let comp = change!(hal.add_component(&comp_name));
        change!(hal.add_pin::<In, f64>(comp, &pin_name));
        change!(hal.link(&pin_name, &sig));
        change!(hal.delf("rt.f", "servo"));
        change!(hal.addf("rt.f", "servo", Some(k % 2)));
        change!(hal.unlink("rt.in"));
        change!(hal.unlink("rt.out"));
        change!(hal.delete_signal(&sig));
        if k % 2 == 0 {
            change!(hal.delete_component(&comp_name));
        }
        k += 1;
    }
    assert_eq!(hal.generation(), g0 + 2 * changes as u64);
    done.set(true);

    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < TIMEOUT, "the reader did not finish");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut out_text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out_text)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut out_text)
        .unwrap();
    assert!(
        status.success(),
        "reader process failed ({status}):\n{out_text}"
    );
    let line = out_text
        .lines()
        .find(|l| l.starts_with("READS "))
        .unwrap_or_else(|| panic!("no summary from the reader:\n{out_text}"));
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (reads, generations) = (nums[0], nums[1]);
    eprintln!("stress: {changes} changes; child: {line}");
    assert!(reads >= 20, "the reader read only {reads} times: {line}");
    assert!(
        generations >= 10,
        "the reader saw only {generations} structure generations: {line}"
    );

    stop.store(true, Ordering::Relaxed);
    let total = rt_thread.join().unwrap();
    // Never blocked: progress in every 100 ms window of the changes (a changed-but-not-run thread on
    // a loaded 2-core machine may wait a few scheduler slices, never a whole window).
    let first = samples[0];
    let last = *samples.last().unwrap();
    assert!(last.1 > first.1, "the pin thread made no progress");
    let mut i = 0;
    for j in 0..samples.len() {
        while samples[j].0.duration_since(samples[i].0) > Duration::from_millis(100) {
            i += 1;
        }
        if samples[j].0.duration_since(samples[i].0) >= Duration::from_millis(50) {
            assert!(
                samples[j].1 > samples[i].1,
                "the pin thread stalled from change {i} to change {j}"
            );
        }
    }
    eprintln!(
        "stress: the pin thread ran {total} iterations over {:?}",
        last.0.duration_since(first.0)
    );
}
