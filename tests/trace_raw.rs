//! The binary reader (`trace_pipe_raw`) decodes the same events as the kernel's own text: one real
//! trace of a busy CPU, read both ways, event by event.

mod common;

use rtapi::trace::{parse_text, CpuReader, EventKind, Formats, RawReader, TraceSession};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The timer fields differ by design (the text hashes pointers); everything else must be equal.
fn comparable(k: &EventKind) -> EventKind {
    match k.clone() {
        EventKind::HrtimerEntry {
            function, now_ns, ..
        } => EventKind::HrtimerEntry {
            timer: String::new(),
            function,
            now_ns,
        },
        EventKind::HrtimerExit { .. } => EventKind::HrtimerExit {
            timer: String::new(),
        },
        other => other,
    }
}

#[test]
fn raw_pages_decode_to_the_events_the_text_shows() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip!(Ci, "tracefs instances need root");
    }
    if !std::path::Path::new("/sys/kernel/tracing/instances").exists() {
        return skip!(Machine, "tracefs is not mounted at /sys/kernel/tracing");
    }
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    let session = TraceSession::start(&[cpu], &format!("rtapi-rawtest-{}", std::process::id()))
        .expect("a trace session");
    // Work on the traced CPU: 1 ms sleeps (hrtimer wakeups, switches), some file I/O (IRQs,
    // softirqs, kworkers), for 300 ms.
    std::thread::spawn(move || {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
        let t = Instant::now();
        let dir = tempfile::tempdir().unwrap();
        let mut i = 0;
        while t.elapsed() < Duration::from_millis(300) {
            std::thread::sleep(Duration::from_millis(1));
            if i % 20 == 0 {
                let p = dir.path().join("f");
                std::fs::write(&p, vec![i as u8; 64 << 10]).unwrap();
                let f = std::fs::File::open(&p).unwrap();
                f.sync_all().unwrap();
            }
            i += 1;
        }
    })
    .join()
    .unwrap();
    session.stop().unwrap();

    // Each of the session's two instances (the wake path's events are in the second): the text of
    // the whole buffer (reading `trace` does not consume it), then the raw pages.
    let formats = Arc::new(Formats::load(&session).expect("formats and symbols"));
    let wake = session
        .wake()
        .expect("this kernel has per-instance pid lists");
    let mut comms_compared = 0;
    let mut comm_mismatches = Vec::new();
    let mut all_raw = Vec::new();
    for part in [&session, wake] {
        let text = parse_text(
            &std::fs::read_to_string(part.dir().join(format!("per_cpu/cpu{cpu}/trace"))).unwrap(),
        );
        let mut raw = RawReader::open(part, cpu, formats.clone()).unwrap();
        raw.pump(usize::MAX).unwrap();
        let raw = raw.window(0, u64::MAX);
        eprintln!(
            "{}: {} events as text ({} lines skipped), {} decoded from raw pages ({} skipped)",
            part.dir().display(),
            text.events.len(),
            text.skipped,
            raw.events.len(),
            raw.skipped
        );
        assert!(text.events.len() > 200, "the work made events");
        assert_eq!(raw.skipped, 0, "every raw record has a decoder");
        assert_eq!(raw.events.len(), text.events.len());
        for (i, (t, r)) in text.events.iter().zip(&raw.events).enumerate() {
            // The text has microseconds, rounded.
            assert!(
                r.ts_ns.abs_diff(t.ts_ns) <= 500,
                "event {i}: {t:?} vs {r:?}"
            );
            assert_eq!((r.cpu, r.pid), (t.cpu, t.pid), "event {i}: {t:?} vs {r:?}");
            assert_eq!(
                comparable(&r.kind),
                comparable(&t.kind),
                "event {i}: {t:?} vs {r:?}"
            );
            if t.comm != "<...>" && r.pid != 0 {
                comms_compared += 1;
                // A task that the reader's instance has no switch of is named from /proc, where a
                // kworker's name carries its workqueue: `kworker/1:2H-kblockd` for `kworker/1:2H`.
                let same = r.comm == t.comm
                    || (t.comm.starts_with("kworker/")
                        && r.comm.len() > t.comm.len()
                        && r.comm.starts_with(&t.comm)
                        && matches!(r.comm.as_bytes()[t.comm.len()], b'-' | b'+'));
                if !same {
                    comm_mismatches.push(format!("event {i}: raw {} vs text {}", r.comm, t.comm));
                }
            }
        }
        all_raw.extend(raw.events);
    }
    // The text names a task by the kernel's saved comm *now*, the raw reader by the comm its events
    // last carried: a task that exec'd during the trace (`bash` becoming `mkdir`) differs. Rare.
    assert!(comms_compared > 100, "{comms_compared}");
    assert!(
        comm_mismatches.len() * 50 <= comms_compared,
        "{} of {comms_compared} task names differ: {comm_mismatches:?}",
        comm_mismatches.len()
    );
    // Both views saw switches, wakeups, the local timer and hrtimer callbacks by name.
    let has = |f: &dyn Fn(&EventKind) -> bool| all_raw.iter().any(|e| f(&e.kind));
    assert!(has(&|k| matches!(k, EventKind::Switch { .. })));
    assert!(has(
        &|k| matches!(k, EventKind::HrtimerEntry { function, .. } if function == "hrtimer_wakeup")
    ));
    assert!(has(
        &|k| matches!(k, EventKind::VectorEntry { name, .. } if name == "local_timer")
    ));
}
