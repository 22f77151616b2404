//! A running instance changed the way halcmd changes LinuxCNC's HAL: a component loaded while
//! threads run, its pins linked to new signals, its function added to a thread, a pin relinked —
//! with the values seen by another process's reader.

use rtapi::components::{Declared, Instances, LiveTarget, LoadArgs, Presets, Registry};
use rtapi::rt::clock::Nanos;
use rtapi::runtime::{Runtime, RuntimeOptions, ThreadSpec};
use rtapi_hal::{Value, ValueType};
use std::time::{Duration, Instant};

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(30);
    while !ok() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_component_loaded_linked_and_added_while_running_computes() {
    let mut rt = Runtime::configure(RuntimeOptions {
        instance: format!("t-live-{}", std::process::id()),
        flavor: Some("posix".into()),
        ..RuntimeOptions::default()
    })
    .unwrap();
    rt.thread(ThreadSpec::new("servo", Nanos::from_millis(1)))
        .unwrap();
    let running = rt.start().unwrap();
    let registry = Registry::builtin();
    let mut target = LiveTarget::new(&running).unwrap();
    let mut declared = Declared::default();
    let names = registry
        .load(
            &mut target,
            &mut declared,
            &Presets::new(),
            "and2",
            &Instances::Count(2),
            &LoadArgs::default(),
        )
        .unwrap();
    assert_eq!(names, ["and2.0", "and2.1"]);
    let hal = running.hal();
    let reader = hal.reader().unwrap();
    assert!(
        reader.pin_named("and2.1.out").is_ok(),
        "the reader sees the new pins"
    );
    assert!(reader.function_named("and2.0").is_ok());
    assert!(
        reader.pin_named("and2.0.time").is_ok(),
        "with its health pin"
    );

    // and2.0.out → and2.1.in0; a and b drive and2.0; c drives and2.1.in1.
    for (sig, pins) in [
        ("a", &["and2.0.in0"][..]),
        ("b", &["and2.0.in1"]),
        ("mid", &["and2.0.out", "and2.1.in0"]),
        ("c", &["and2.1.in1"]),
        ("result", &["and2.1.out"]),
    ] {
        hal.new_signal(sig, ValueType::Bit).unwrap();
        for p in pins {
            hal.link(p, sig).unwrap();
        }
    }
    running.addf("and2.0", "servo", None).unwrap();
    running.addf("and2.1", "servo", None).unwrap();
    for s in ["a", "b", "c"] {
        reader.sets(s, "1").unwrap();
    }
    wait_for("result TRUE", || {
        reader.get("result").unwrap() == Value::Bit(true)
    });
    reader.sets("b", "0").unwrap();
    wait_for("result FALSE", || {
        reader.get("result").unwrap() == Value::Bit(false)
    });
    // Relink and2.1.in1 from c to a (TRUE): the component follows without noticing.
    reader.sets("b", "1").unwrap();
    reader.sets("c", "0").unwrap();
    wait_for("result FALSE with c", || {
        reader.get("result").unwrap() == Value::Bit(false)
    });
    hal.unlink("and2.1.in1").unwrap();
    hal.link("and2.1.in1", "a").unwrap();
    wait_for("result TRUE after relink", || {
        reader.get("result").unwrap() == Value::Bit(true)
    });
    let f = reader.function_named("and2.1").unwrap();
    assert!(f.timing.calls > 0, "timed in the segment: {:?}", f.timing);
    running.stop();
}
