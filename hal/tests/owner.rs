//! One process: build a segment, use the typed handles and the stats writer, read it back.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{shm_path, unique_instance, Cleanup};
use rtapi_hal::layout;
use rtapi_hal::*;

/// The demo HAL and the keys the tests use.
type Demo = (
    Hal,
    PinKey<In, f64>,
    PinKey<Out, f64>,
    PinKey<Out, bool>,
    ParamKey<f64>,
    ThreadKey,
);

fn demo(instance: &str) -> Demo {
    let mut b = HalBuilder::new(instance).unwrap();
    let sg = b.component("siggen.0").unwrap();
    let pid = b.component("pid.0").unwrap();
    b.pin::<Out, f64>(sg, "siggen.0.sine").unwrap();
    let cmd = b.pin::<In, f64>(pid, "pid.0.command").unwrap();
    let out = b.pin::<Out, f64>(pid, "pid.0.output").unwrap();
    let en = b.pin::<Out, bool>(pid, "pid.0.enabled").unwrap();
    b.pin_with_default::<In, bool>(pid, "pid.0.enable", true)
        .unwrap();
    b.pin::<Io, i32>(pid, "pid.0.index").unwrap();
    let gain = b
        .param(pid, "pid.0.Pgain", ParamAccess::Rw, 2.5f64)
        .unwrap();
    b.param(pid, "pid.0.errorI", ParamAccess::Ro, 0.0f64)
        .unwrap();
    b.function(sg, "siggen.0.update").unwrap();
    b.function(pid, "pid.0.do-pid-calcs").unwrap();
    let servo = b
        .thread(
            ThreadConfig::new("servo", 1_000_000)
                .cpu(1)
                .priority(97)
                .flavor("posix")
                .timer("nanosleep")
                .histogram(HistogramConfig {
                    bin_ns: 1000,
                    bins: 100,
                }),
        )
        .unwrap();
    b.addf("pid.0.do-pid-calcs", "servo", None).unwrap();
    b.addf("siggen.0.update", "servo", Some(0)).unwrap();
    b.net("cmd", "siggen.0.sine").unwrap();
    b.net("cmd", "pid.0.command").unwrap();
    b.signal("spare", ValueType::U32).unwrap();
    (b.build().unwrap(), cmd, out, en, gain, servo)
}

#[test]
fn handles_values_and_reader_agree() {
    let inst = unique_instance("own");
    let _c = Cleanup(inst.clone());
    let (hal, cmd, out, en, gain, _) = demo(&inst);
    assert!(shm_path(&inst).exists());
    let meta = std::fs::metadata(shm_path(&inst)).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );

    let (cmd, out, en, gain) = (hal.pin(cmd), hal.pin(out), hal.pin(en), hal.param(gain));
    assert_eq!(gain.get(), 2.5);
    out.set(-1.25);
    en.set(true);
    let r = HalReader::open(&inst, Access::ReadOnly).unwrap();
    assert_eq!(r.get("pid.0.output").unwrap(), Value::Float(-1.25));
    assert_eq!(r.get("pid.0.enabled").unwrap(), Value::Bit(true));
    assert_eq!(
        r.get("pid.0.enable").unwrap(),
        Value::Bit(true),
        "pin default"
    );
    assert_eq!(r.get("pid.0.Pgain").unwrap(), Value::Float(2.5));

    // The netted IN pin reads the signal, which the other component's OUT pin drives.
    let w = hal.reader().unwrap();
    w.sets("spare", "7").unwrap();
    assert_eq!(r.get("spare").unwrap(), Value::U32(7));
    assert!(matches!(
        w.sets("cmd", "1"),
        Err(HalError::NotWritable {
            reason: WriteRefusal::SignalHasWriter { .. },
            ..
        })
    ));
    assert_eq!(cmd.get(), 0.0);

    let snap = r.snapshot().unwrap();
    assert_eq!(snap.header.instance, inst);
    assert_eq!(snap.header.owner_pid, std::process::id());
    assert_eq!(snap.header.state, SegmentState::Ready);
    assert_eq!(snap.components.len(), 2);
    assert_eq!(snap.pins.len(), 6);
    let p = snap
        .pins
        .iter()
        .find(|p| p.name == "pid.0.command")
        .unwrap();
    assert_eq!(
        (p.dir, p.ty, p.signal.as_deref(), p.component.as_str()),
        (PinDir::In, ValueType::Float, Some("cmd"), "pid.0")
    );
    let s = snap.signals.iter().find(|s| s.name == "cmd").unwrap();
    assert_eq!(
        (s.writer.as_deref(), s.readers, s.bidirs),
        (Some("siggen.0.sine"), 1, 0)
    );
    let f = snap
        .functions
        .iter()
        .find(|f| f.name == "siggen.0.update")
        .unwrap();
    assert_eq!(f.thread, Some(("servo".to_string(), 0)));
    let t = &snap.threads[0];
    assert_eq!(
        (
            t.period_ns,
            t.cpu,
            t.priority,
            t.flavor.as_str(),
            t.timer.as_str()
        ),
        (1_000_000, Some(1), 97, "posix", "nanosleep")
    );
    assert_eq!((t.functions, t.running, t.stats.cycles), (2, false, 0));
    assert_eq!(t.stats.latency_min(), None);

    hal.set_running(true);
    assert_eq!(r.header().state, SegmentState::Running);
    drop(hal);
    assert!(!shm_path(&inst).exists(), "clean shutdown unlinks");
    assert!(matches!(
        HalReader::open(&inst, Access::ReadOnly),
        Err(HalError::NoSuchInstance { .. })
    ));
    // The earlier reader keeps a valid mapping.
    assert_eq!(r.header().state, SegmentState::Stopped);
    assert_eq!(r.get("pid.0.output").unwrap(), Value::Float(-1.25));
}

#[test]
fn setp_follows_hal_rules() {
    let inst = unique_instance("setp");
    let _c = Cleanup(inst.clone());
    let (hal, ..) = demo(&inst);
    let rw = HalReader::open(&inst, Access::ReadWrite).unwrap();
    assert_eq!(rw.setp("pid.0.Pgain", "3.5").unwrap(), Value::Float(3.5));
    assert_eq!(rw.setp("pid.0.enable", "0").unwrap(), Value::Bit(false));
    assert_eq!(rw.setp("pid.0.index", "-4").unwrap(), Value::S32(-4));
    let refused = |name: &str| match rw.setp(name, "1") {
        Err(HalError::NotWritable { reason, .. }) => reason,
        other => panic!("{name}: {other:?}"),
    };
    assert!(
        matches!(refused("pid.0.output"), WriteRefusal::OutputPin { component } if component == "pid.0")
    );
    assert!(
        matches!(refused("pid.0.command"), WriteRefusal::ConnectedPin { signal } if signal == "cmd")
    );
    assert_eq!(refused("pid.0.errorI"), WriteRefusal::ReadOnlyParam);
    let e = rw.setp("pid.0.Pgain", "fast").unwrap_err();
    assert!(matches!(e, HalError::BadValue { .. }), "{e}");
    assert!(matches!(
        rw.setp("nope", "1"),
        Err(HalError::NotFound { .. })
    ));
    let ro = HalReader::open(&inst, Access::ReadOnly).unwrap();
    assert!(matches!(
        ro.setp("pid.0.Pgain", "1"),
        Err(HalError::NotWritable {
            reason: WriteRefusal::ReadOnlyMapping,
            ..
        })
    ));
    assert_eq!(ro.get("pid.0.Pgain").unwrap(), Value::Float(3.5));
    drop(hal);
}

#[test]
fn stats_writer_records_and_reader_derives() {
    let inst = unique_instance("stats");
    let _c = Cleanup(inst.clone());
    let (hal, .., servo) = demo(&inst);
    let w = hal.stats_writer(servo).unwrap();
    assert!(matches!(
        hal.stats_writer(servo),
        Err(HalError::StatsWriterTaken { .. })
    ));
    assert_eq!(w.function_count(), 2);
    let lats = [1_000i64, 3_000, 2_000, -50, 600_000, 150_000];
    for (i, &lat) in lats.iter().enumerate() {
        let missed = u64::from(i == 4);
        let rusage = w.is_spike(lat, missed).then_some(ThreadRusage {
            involuntary_ctx_switches: 3,
            page_faults: 1,
        });
        w.record(&PeriodSample {
            now_ns: 1_000_000 * (i as u64 + 1),
            latency_ns: lat,
            interval_ns: if i == 0 { 0 } else { 1_000_000 + 10 * i as u64 },
            exec_ns: 100 + i as u64,
            missed,
            drift_ns: -7,
            rusage,
        });
        w.record_function(0, 40, 0);
        w.record_function(1, 60, if i == 2 { 5 } else { 0 });
    }
    w.set_running(true);
    let r = hal.reader().unwrap();
    let s = r.thread_stats("servo").unwrap();
    assert_eq!((s.cycles, s.overruns), (6, 1));
    assert_eq!(
        (s.latency_min(), s.latency_max()),
        (Some(-50), Some(600_000))
    );
    let mean = lats.iter().sum::<i64>() as f64 / 6.0;
    assert!((s.latency_mean().unwrap() - mean).abs() < 1e-9);
    assert!(s.latency_stddev().unwrap() > 0.0);
    assert_eq!(s.jitter_max_ns, 50);
    assert_eq!(
        (s.exec_last_ns, s.exec_max_ns, s.exec_sum_ns),
        (105, 105, 615)
    );
    assert_eq!((s.drift_ns, s.last_wake_ns), (-7, 6_000_000));
    // Spikes: threshold is period/2 = 500 µs, or any missed period: only cycle 5.
    let spikes: Vec<_> = s.worst_spikes().collect();
    assert_eq!(spikes.len(), 1);
    assert_eq!(
        (
            spikes[0].cycle,
            spikes[0].latency_ns,
            spikes[0].involuntary_ctx_switches
        ),
        (5, 600_000, 3)
    );
    let h = r.histogram("servo").unwrap();
    assert_eq!((h.underflow, h.overflow, h.total()), (1, 2, 6));
    assert_eq!(h.counts[1] + h.counts[2] + h.counts[3], 3);
    assert_eq!(h.percentile(0.5), Some(Percentile::AtMost(3000)));
    let f = r.function_named("pid.0.do-pid-calcs").unwrap();
    assert_eq!(f.thread, Some(("servo".into(), 1)));
    assert_eq!(
        (
            f.timing.calls,
            f.timing.faults,
            f.timing.fault_code,
            f.timing.max_ns
        ),
        (6, 1, 0, 60)
    );
    assert_eq!(f.timing.mean_ns(), Some(60.0));
    assert!(r.thread_named("servo").unwrap().running);

    w.reset();
    let s = r.thread_stats("servo").unwrap();
    assert_eq!((s.cycles, s.spikes_total, s.latency_max()), (0, 0, None));
    assert_eq!(r.histogram("servo").unwrap().total(), 0);
    assert_eq!(r.function_named("siggen.0.update").unwrap().timing.calls, 0);
}

#[test]
fn extreme_latencies_never_overflow() {
    let inst = unique_instance("extreme");
    let _c = Cleanup(inst.clone());
    let (hal, .., servo) = demo(&inst);
    let w = hal.stats_writer(servo).unwrap();
    for lat in [i64::MAX, i64::MAX, i64::MIN, 0] {
        w.record(&PeriodSample {
            latency_ns: lat,
            exec_ns: u64::MAX,
            interval_ns: u64::MAX,
            missed: u64::MAX,
            ..Default::default()
        });
    }
    let s = hal.reader().unwrap().thread_stats("servo").unwrap();
    assert_eq!(
        (s.cycles, s.overruns, s.exec_sum_ns),
        (4, u64::MAX, u64::MAX)
    );
    assert_eq!(
        (s.latency_min(), s.latency_max()),
        (Some(i64::MIN), Some(i64::MAX))
    );
    assert_eq!(s.latency_sum_ns, i64::MAX as i128 * 2 + i64::MIN as i128);
    let sd = s.latency_stddev().unwrap();
    assert!(sd.is_finite() && sd > 0.0);
    assert_eq!(s.spikes_total, 4, "missed periods are spikes");
}

/// The seqlock under a real StatsWriter: a writer thread records latency = cycle number, so any
/// consistent snapshot satisfies sum = n(n+1)/2, sum of squares = n(n+1)(2n+1)/6, max = n. A torn read
/// (fields from two different periods) breaks these identities.
#[test]
fn concurrent_snapshots_are_never_torn() {
    let inst = unique_instance("torn");
    let _c = Cleanup(inst.clone());
    let (hal, .., servo) = demo(&inst);
    let w = hal.stats_writer(servo).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                w.record(&PeriodSample {
                    latency_ns: n as i64,
                    exec_ns: n,
                    now_ns: n,
                    ..Default::default()
                });
                // Like the fastest real thread (25 µs base): a tight loop could starve any reader.
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_micros(20) {
                    std::hint::spin_loop();
                }
            }
            n
        })
    };
    let r = hal.reader().unwrap();
    let mut seen = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    while std::time::Instant::now() < deadline {
        let s = r.thread_stats("servo").unwrap();
        let n = s.cycles as u128;
        assert_eq!(s.latency_sum_ns as u128, n * (n + 1) / 2, "torn: {s:?}");
        assert_eq!(
            s.latency_sum_sq_ns2,
            n * (n + 1) * (2 * n + 1) / 6,
            "torn: {s:?}"
        );
        assert_eq!(s.exec_sum_ns as u128, n * (n + 1) / 2);
        if n > 0 {
            assert_eq!(
                (
                    s.latency_max_ns as u128,
                    s.exec_last_ns as u128,
                    s.last_wake_ns as u128
                ),
                (n, n, n)
            );
            assert_eq!(s.latency_min_ns, 1);
        }
        seen += usize::from(n > 0);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0 && seen > 0);
}

#[test]
fn size_cap_and_group_permissions() {
    let inst = unique_instance("cap");
    let _c = Cleanup(inst.clone());
    let mut b = HalBuilder::new(&inst).unwrap().max_size(4096);
    let c = b.component("big").unwrap();
    for i in 0..100 {
        b.pin::<In, f64>(c, &format!("big.in{i}")).unwrap();
    }
    let e = b.build().err().unwrap();
    assert!(matches!(e, HalError::SegmentFull { cap: 4096, .. }), "{e}");
    assert!(e.to_string().contains("raise the size cap"));
    assert!(
        !shm_path(&inst).exists(),
        "nothing created when it does not fit"
    );

    // SAFETY: getgid has no preconditions and cannot fail.
    let gid = unsafe { libc::getgid() };
    let hal = HalBuilder::new(&inst)
        .unwrap()
        .permissions(Permissions::GroupReadable { gid })
        .build()
        .unwrap();
    let meta = std::fs::metadata(shm_path(&inst)).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o640
    );
    // An empty HAL is the header plus the default spare room: 64 records in each table but threads.
    let spare: usize = [
        layout::component::SIZE,
        layout::pin::SIZE,
        layout::param::SIZE,
        layout::signal::SIZE,
        layout::function::SIZE,
    ]
    .iter()
    .map(|r| 64 * r)
    .sum();
    assert_eq!(hal.size(), 256 + spare);
    drop(hal);
    let hal = HalBuilder::new(&inst)
        .unwrap()
        .capacity(Capacity {
            factor: 1,
            floor: 0,
        })
        .build()
        .unwrap();
    assert_eq!(
        hal.size(),
        256,
        "without spare room an empty HAL is just the header"
    );
}

#[test]
fn second_owner_in_same_process_gets_clear_error() {
    let inst = unique_instance("twice");
    let _c = Cleanup(inst.clone());
    let hal = HalBuilder::new(&inst).unwrap().build().unwrap();
    let e = HalBuilder::new(&inst).unwrap().build().err().unwrap();
    assert!(
        matches!(e, HalError::InstanceInUse { pid, .. } if pid == std::process::id()),
        "{e}"
    );
    assert!(e.to_string().contains(&std::process::id().to_string()));
    drop(hal);
    HalBuilder::new(&inst).unwrap().build().unwrap();
}
