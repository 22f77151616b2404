//! The binary reader (`trace_pipe_raw`) decodes the same events as the kernel's own text: one real
//! trace of a busy CPU, read both ways, event by event.

mod common;

use rtapi::trace::{CpuReader, EventKind, Formats, RawReader, TraceSession};
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

    // The text of the whole buffer (reading `trace` does not consume it), then the raw pages.
    let text = session.read_window(cpu, 0, u64::MAX).unwrap();
    let formats = Arc::new(Formats::load(&session).expect("formats and symbols"));
    let mut raw = RawReader::open(&session, cpu, formats).unwrap();
    raw.pump(usize::MAX).unwrap();
    let raw = raw.window(0, u64::MAX);

    eprintln!(
        "{} events as text ({} lines skipped), {} decoded from raw pages ({} skipped)",
        text.events.len(),
        text.skipped,
        raw.events.len(),
        raw.skipped
    );
    assert!(text.events.len() > 500, "the work made events");
    assert_eq!(raw.skipped, 0, "every raw record has a decoder");
    assert_eq!(raw.events.len(), text.events.len());
    let mut comms_compared = 0;
    let mut comm_mismatches = Vec::new();
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
            if r.comm != t.comm {
                comm_mismatches.push(format!("event {i}: raw {} vs text {}", r.comm, t.comm));
            }
        }
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
    let has = |f: &dyn Fn(&EventKind) -> bool| raw.events.iter().any(|e| f(&e.kind));
    assert!(has(&|k| matches!(k, EventKind::Switch { .. })));
    assert!(has(
        &|k| matches!(k, EventKind::HrtimerEntry { function, .. } if function == "hrtimer_wakeup")
    ));
    assert!(has(
        &|k| matches!(k, EventKind::VectorEntry { name, .. } if name == "local_timer")
    ));
}
