//! A reader written in Python from hal/LAYOUT.md alone (`tests/python/read_segment.py`) reads what the
//! Rust owner wrote — C-width cells, run-time additions, links, tombstones — exactly as `HalReader`
//! does, follows the structure-generation protocol while the owner changes the structure, and refuses
//! what LAYOUT.md says to refuse. If the layout document and the code drift apart, this fails.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{shm_path, unique_instance, write_shm, Cleanup};
use rtapi_hal::layout::{pin, table, Table};
use rtapi_hal::*;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/read_segment.py");

/// Runs the Python reader for `test`; `None` (and `SKIPPED: <test>: …` on stderr, a failure under
/// CI) if there is no python3.
fn python(test: &str, instance: &str, rounds: usize) -> Option<(bool, String, String)> {
    match Command::new("python3")
        .arg(SCRIPT)
        .arg(instance)
        .arg(rounds.to_string())
        .output()
    {
        Ok(o) => Some((
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )),
        Err(e) => {
            common::skip(
                test,
                &format!("no python3 to run the LAYOUT.md reader ({e})"),
                common::Prereq::Ci,
            );
            None
        }
    }
}

fn value(v: Value) -> String {
    match v {
        Value::Float(f) => format!("{f:?}"),
        other => other.to_string(),
    }
}

/// The same lines the Python reader prints, from HalReader.
fn rust_lines(r: &HalReader) -> Vec<String> {
    let s = r.snapshot().unwrap();
    let mut out = Vec::new();
    for c in s.components {
        out.push(format!(
            "component {} {} {} {}",
            c.name, c.pins, c.params, c.functions
        ));
    }
    for p in s.pins {
        let dir = match p.dir {
            PinDir::Io => "IO",
            d => d.as_str(),
        };
        out.push(format!(
            "pin {} {} {} {} {} {}",
            p.name,
            p.ty,
            dir,
            p.component,
            p.signal.as_deref().unwrap_or("-"),
            value(p.value)
        ));
    }
    for p in s.params {
        out.push(format!(
            "param {} {} {} {} {}",
            p.name,
            p.ty,
            p.access.as_str(),
            p.component,
            value(p.value)
        ));
    }
    for x in s.signals {
        out.push(format!(
            "signal {} {} {} {} {} {}",
            x.name,
            x.ty,
            x.writer.as_deref().unwrap_or("-"),
            x.readers,
            x.bidirs,
            value(x.value)
        ));
    }
    for f in s.functions {
        let (t, p) = match f.thread {
            Some((t, p)) => (t, p.to_string()),
            None => ("-".into(), "-".into()),
        };
        out.push(format!("function {} {} {t} {p}", f.name, f.component));
    }
    for t in s.threads {
        out.push(format!("thread {} {} {}", t.name, t.period_ns, t.functions));
    }
    out.sort();
    out
}

#[test]
fn python_reader_from_layout_md_agrees_with_the_rust_reader() {
    let inst = unique_instance("py");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    let out = b.pin::<Out, f64>(c, "c.out").unwrap();
    let s32 = b.pin::<Io, i32>(c, "c.s32").unwrap();
    let bit = b.pin::<Out, bool>(c, "c.bit").unwrap();
    b.pin_with_default::<In, u32>(c, "c.u32", 4_000_000_000)
        .unwrap();
    b.param(c, "c.gain", ParamAccess::Rw, -2.25f64).unwrap();
    b.param(c, "c.big", ParamAccess::Ro, -5i64).unwrap();
    b.function(c, "c.f").unwrap();
    b.function(c, "c.g").unwrap();
    b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("c.f", "servo", None).unwrap();
    b.addf("c.g", "servo", None).unwrap();
    b.net("cmd", "c.out").unwrap();
    b.net("flag", "c.bit").unwrap();
    let hal = b.build().unwrap();
    let (out, s32, bit) = (hal.pin(out), hal.pin(s32), hal.pin(bit));
    out.set(1.5);
    s32.set(-7);
    bit.set(true);
    // Run-time changes: an added component with pins and a param, links, a deleted signal.
    let k = hal.add_component("late").unwrap();
    hal.add_pin_with_default::<In, f64>(k, "late.in", 0.5)
        .unwrap();
    hal.add_param(k, "late.k", ParamAccess::Rw, 3u32).unwrap();
    hal.link("late.in", "cmd").unwrap();
    hal.new_signal("gone", ValueType::S32).unwrap();
    hal.link("c.s32", "gone").unwrap();
    hal.delete_signal("gone").unwrap();
    hal.new_signal("io", ValueType::S32).unwrap();
    hal.link("c.s32", "io").unwrap();
    hal.delf("c.f", "servo").unwrap();

    let Some((ok, stdout, stderr)) = python(test_name!(), &inst, 1) else {
        return;
    };
    assert!(ok, "python reader failed: {stderr}");
    let py: Vec<String> = stdout.lines().map(str::to_string).collect();
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    let rust = rust_lines(&r);
    assert_eq!(py, rust, "python (left) and rust (right) disagree");
    assert!(
        py.contains(&"pin c.s32 s32 IO c io -7".to_string()),
        "{py:?}"
    );
    assert!(
        py.contains(&"pin c.u32 u32 IN c - 4000000000".to_string()),
        "{py:?}"
    );
    assert!(py.contains(&"function c.f c - -".to_string()), "{py:?}");
    assert!(!stdout.contains("gone"), "the tombstone is skipped");
}

#[test]
fn python_reader_follows_the_generation_protocol_during_changes() {
    let inst = unique_instance("pylive");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap();
    let c = b.component("c").unwrap();
    b.pin::<Out, f64>(c, "c.out").unwrap();
    b.pin::<In, f64>(c, "c.in").unwrap();
    b.function(c, "c.f").unwrap();
    b.thread(ThreadConfig::new("servo", 1_000_000)).unwrap();
    b.addf("c.f", "servo", None).unwrap();
    let hal = Arc::new(b.build().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let changer = {
        let (hal, stop) = (hal.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            hal.new_signal("keep", ValueType::Float).unwrap();
            while !stop.load(Ordering::Relaxed) {
                // New signals while there is room (tombstones are not reused), then relinking.
                let s = if n < 50 {
                    let s = format!("s{n}");
                    hal.new_signal(&s, ValueType::Float).unwrap();
                    s
                } else {
                    "keep".to_string()
                };
                hal.link("c.out", &s).unwrap();
                hal.link("c.in", &s).unwrap();
                hal.delf("c.f", "servo").unwrap();
                hal.addf("c.f", "servo", None).unwrap();
                if n < 50 {
                    hal.delete_signal(&s).unwrap();
                } else {
                    hal.unlink("c.in").unwrap();
                    hal.unlink("c.out").unwrap();
                }
                n += 1;
                // Bursts of six changes, at a pace at which reads both overlap changes (and retry)
                // and complete (a changer that never pauses would starve any seqlock-style reader).
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            n
        })
    };
    let result = python(test_name!(), &inst, 1000);
    stop.store(true, Ordering::Relaxed);
    let changes = changer.join().unwrap();
    let Some((ok, stdout, stderr)) = result else {
        return;
    };
    assert!(ok, "python reader failed during changes: {stderr}");
    let summary = stdout.lines().last().unwrap();
    eprintln!("python: {summary}; owner made {} change rounds", changes);
    assert!(summary.starts_with("rounds 1000 retries "), "{summary}");
    let retries: u64 = summary.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        retries > 0,
        "no read overlapped a change, the protocol was not exercised: {summary}"
    );
    assert!(
        changes > 10,
        "the owner hardly changed anything ({changes})"
    );
}

#[test]
fn python_reader_refuses_what_layout_md_refuses() {
    let inst = unique_instance("pysrc");
    let bytes = {
        let _c = Cleanup(inst.clone());
        let mut b = HalBuilder::new(&inst).unwrap();
        let c = b.component("c").unwrap();
        b.pin::<Out, f64>(c, "c.out").unwrap();
        b.pin::<In, bool>(c, "c.bit").unwrap();
        b.net("s", "c.out").unwrap();
        let _hal = b.build().unwrap();
        std::fs::read(shm_path(&inst)).unwrap()
    };
    let d = Table::Pins.descriptor();
    let pins = u64::from_ne_bytes(bytes[d + table::OFFSET..][..8].try_into().unwrap()) as usize;
    let stride = 88;
    let sig = u64::from_ne_bytes(
        bytes[Table::Signals.descriptor() + table::OFFSET..][..8]
            .try_into()
            .unwrap(),
    );
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            {
                // The bit pin claims to be on the float signal.
                let mut b = bytes.clone();
                b[pins + stride + pin::SIGNAL..][..8].copy_from_slice(&sig.to_ne_bytes());
                b
            },
            "refused: pin linked to a signal of another type",
        ),
        (
            {
                let mut b = bytes.clone();
                b[rtapi_hal::layout::header::GENERATION..][..8]
                    .copy_from_slice(&3u64.to_ne_bytes());
                b
            },
            "refused: structure being changed for too long",
        ),
        (
            {
                let mut b = bytes.clone();
                b[8..12].copy_from_slice(&(1u32 << 16 | 3).to_ne_bytes());
                b
            },
            "refused: unsupported version 1.3",
        ),
    ];
    for (forged, want) in cases {
        let inst = unique_instance("pyforged");
        let _c = Cleanup(inst.clone());
        write_shm(&shm_path(&inst), &forged);
        let Some((ok, _, stderr)) = python(test_name!(), &inst, 1) else {
            return;
        };
        assert!(
            !ok && stderr.contains(want),
            "wanted '{want}', got: {stderr}"
        );
        // The Rust reader refuses the same file.
        assert!(HalReader::open(&inst, Access::ReadOnly).is_err());
    }
}
